/* test_dra_share.c: a claim's share of a GPU (src/dra/share.c) and the pure MIG steps of MIG on
 * demand (src/dra/migdemand.c). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dra/migdemand.h"
#include "dra/prepare.h"
#include "dra/share.h"

static char err[512];

static struct dra_device dev(enum dra_sharing sh) {
    struct dra_device d;
    memset(&d, 0, sizeof(d));
    strcpy(d.name, "gpu-1");
    strcpy(d.cdi, "GPU-11111111-2222-3333-4444-555555555555");
    d.sharing = sh;
    d.mem_total = 80ULL << 30;
    strcpy(d.mps_root, "/run/nvidia/mps");
    return d;
}

static struct dra_result res(const char *mem, const char *compute) {
    struct dra_result r;
    memset(&r, 0, sizeof(r));
    strcpy(r.request, "gpu");
    strcpy(r.device, "gpu-1");
    if (mem) {
        strcpy(r.capacity[r.n_capacity].name, "memory");
        strcpy(r.capacity[r.n_capacity++].quantity, mem);
    }
    if (compute) {
        strcpy(r.capacity[r.n_capacity].name, "compute");
        strcpy(r.capacity[r.n_capacity++].quantity, compute);
    }
    return r;
}

/* consumedCapacity in Kubernetes' quantity syntax (util/quantity.h): whole bytes and percents. */
static void test_quantities(void **st) {
    (void)st;
    struct dra_device d = dev(DRA_SHARING_TIME_SLICING);
    struct dra_share sh;
    static const struct {
        const char *mem, *compute;
        unsigned long long bytes;
        unsigned pct;
    } ok[] = { { "20Gi", "30", 20ULL << 30, 30 }, { "1536Mi", "3e1", 1536ULL << 20, 30 },
               { "1.5Gi", "30000m", 1536ULL << 20, 30 }, { "2G", "+30", 2000000000ULL, 30 } };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        struct dra_result r = res(ok[i].mem, ok[i].compute);
        assert_int_equal(dra_share_of(&r, &d, NULL, &sh, err, sizeof(err)), 0);
        assert_int_equal(sh.memory, ok[i].bytes);
        assert_int_equal(sh.compute, ok[i].pct);
    }
    static const struct {
        const char *mem, *why;
    } bad[] = { { "0.5", "not a whole number" }, { "-1", "out of range" }, { "500m", "not a whole number" },
                { "", "syntax" },                { "20Gb", "syntax" },     { "99999999999Ei", "out of range" },
                { "20 Gi", "syntax" } };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct dra_result r = res(bad[i].mem, "30");
        assert_int_equal(dra_share_of(&r, &d, NULL, &sh, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "is not a quantity"));
        assert_non_null(strstr(err, bad[i].why));
    }
}

static void test_time_sliced_share(void **st) {
    (void)st;
    struct dra_device d = dev(DRA_SHARING_TIME_SLICING);
    struct dra_result r = res("20Gi", "30");
    struct dra_share sh;
    assert_int_equal(dra_share_of(&r, &d, NULL, &sh, err, sizeof(err)), 0);
    assert_int_equal(sh.sharing, DRA_SHARING_TIME_SLICING);
    assert_int_equal(sh.memory, 20ULL << 30);
    assert_int_equal(sh.compute, 30);
    const struct dra_device *devs[] = { &d };
    struct gs_guard_limits l;
    assert_int_equal(dra_share_guard_limits(&sh, devs, 1, &l), 1);
    assert_int_equal(l.dev[0].vram, 20ULL << 30);
    assert_int_equal(l.dev[0].compute_pct, 30);
    assert_string_equal(l.dev[0].uuid, d.cdi);
    assert_true(l.fail_closed);
    char text[4096];
    assert_true(gs_guard_limits_format(&l, text, sizeof(text)) > 0); /* the guard parses it back */
    struct gs_alloc_response *a = calloc(1, sizeof(*a));
    assert_int_equal(dra_share_edits(&sh, devs, 1, "/run/g/claim-x", "/opt/libgpuslice-guard.so", "/run/g/ld.so.preload",
                                     a, err, sizeof(err)), 0);
    assert_int_equal(a->n_extra_mounts, 4);
    assert_string_equal(a->extra_mounts[1].host_path, "/run/g/claim-x/limits");
    assert_string_equal(a->extra_mounts[3].container_path, "/etc/ld.so.preload");
    assert_string_equal(a->envs[0].key, "GPUSLICE_GUARD_CONFIG");
    free(a);
}

static void test_shared_errors(void **st) {
    (void)st;
    struct dra_device d = dev(DRA_SHARING_TIME_SLICING);
    struct dra_share sh;
    struct dra_result r = res(NULL, "30");
    assert_int_equal(dra_share_of(&r, &d, NULL, &sh, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "no consumedCapacity.memory"));
    r = res("100Gi", NULL);
    assert_int_equal(dra_share_of(&r, &d, NULL, &sh, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "not within"));
    r = res("1Gi", "150");
    assert_int_equal(dra_share_of(&r, &d, NULL, &sh, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "1..100"));
    r = res("ten", NULL);
    assert_int_equal(dra_share_of(&r, &d, NULL, &sh, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "'ten' is not a quantity"));
    struct dra_gpu_config mps = { true, DRA_SHARING_MPS };
    r = res("1Gi", "10");
    assert_int_equal(dra_share_of(&r, &d, &mps, &sh, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "MPS"));
    assert_non_null(strstr(err, "the driver's MPS class, mps.<driver>"));
}

static void test_mps_share(void **st) {
    (void)st;
    struct dra_device d = dev(DRA_SHARING_MPS);
    struct dra_result r = res("10Gi", "25");
    struct dra_gpu_config cfg = { true, DRA_SHARING_MPS };
    struct dra_share sh;
    assert_int_equal(dra_share_of(&r, &d, &cfg, &sh, err, sizeof(err)), 0);
    const struct dra_device *devs[] = { &d };
    struct gs_guard_limits l;
    assert_int_equal(dra_share_guard_limits(&sh, devs, 1, &l), 0); /* MPS: no guard */
    struct gs_alloc_response *a = calloc(1, sizeof(*a));
    assert_int_equal(dra_share_edits(&sh, devs, 1, "", NULL, NULL, a, err, sizeof(err)), 0);
    assert_int_equal(a->n_extra_mounts, 2);
    assert_string_equal(a->extra_mounts[0].host_path, "/run/nvidia/mps/GPU-11111111-2222-3333-4444-555555555555/pipe");
    assert_string_equal(a->envs[1].key, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    assert_string_equal(a->envs[1].value, "25");
    assert_string_equal(a->envs[2].value, "0=10240M");
    free(a);
    /* two MPS GPUs in one claim: one daemon per client */
    struct dra_device d2 = dev(DRA_SHARING_MPS);
    strcpy(d2.cdi, "GPU-other");
    struct dra_share two[2] = { sh, sh };
    const struct dra_device *both[] = { &d, &d2 };
    a = calloc(1, sizeof(*a));
    assert_int_equal(dra_share_edits(two, both, 2, "", NULL, NULL, a, err, sizeof(err)), -EXDEV);
    free(a);
    /* TimeSlicing asked of an MPS GPU */
    cfg.strategy = DRA_SHARING_TIME_SLICING;
    assert_int_equal(dra_share_of(&r, &d, &cfg, &sh, err, sizeof(err)), -EINVAL);
}

static void test_whole_gpu_takes_no_share(void **st) {
    (void)st;
    struct dra_device d = dev(DRA_SHARING_EXCLUSIVE);
    struct dra_result r = res("80Gi", NULL);
    struct dra_gpu_config ts = { true, DRA_SHARING_TIME_SLICING }, mps = { true, DRA_SHARING_MPS };
    struct dra_share sh;
    assert_int_equal(dra_share_of(&r, &d, &ts, &sh, err, sizeof(err)), 0);
    assert_int_equal(sh.memory, 0);
    assert_int_equal(dra_share_of(&r, &d, &mps, &sh, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "a whole GPU"));
}

static void test_configs(void **st) {
    (void)st;
    struct dra_gpu_config c;
    assert_int_equal(dra_gpu_config_parse("{\"apiVersion\":\"gpuslice.io/v1alpha1\",\"kind\":\"GpuConfig\","
                                          "\"sharing\":{\"strategy\":\"MPS\"}}", &c, err, sizeof(err)), 0);
    assert_true(c.set);
    assert_int_equal(c.strategy, DRA_SHARING_MPS);
    static const struct {
        const char *json, *why;
    } bad[] = {
        { "[]", "not an object" },
        { "{\"apiVersion\":\"gpuslice.io/v1\",\"kind\":\"GpuConfig\"}", "apiVersion: 'gpuslice.io/v1', not" },
        { "{\"apiVersion\":\"gpuslice.io/v1alpha1\",\"kind\":\"Other\"}", "kind: 'Other'" },
        { "{\"apiVersion\":\"gpuslice.io/v1alpha1\",\"kind\":\"GpuConfig\",\"x\":1}", "x: unknown field" },
        { "{\"apiVersion\":\"gpuslice.io/v1alpha1\",\"kind\":\"GpuConfig\",\"sharing\":{\"strategy\":\"Fast\"}}",
          "'Fast' is not TimeSlicing or MPS" },
        { "{\"apiVersion\":\"gpuslice.io/v1alpha1\",\"kind\":\"GpuConfig\",\"sharing\":{\"mode\":1}}",
          "sharing.mode: unknown field" },
        { "{\"kind\":\"GpuConfig\"}", "apiVersion: missing" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(dra_gpu_config_parse(bad[i].json, &c, err, sizeof(err)), -EINVAL);
        if (!strstr(err, bad[i].why))
            fail_msg("%s: '%s' lacks '%s'", bad[i].json, err, bad[i].why);
    }
    /* the claim's config after the class's; a config for another request does not apply */
    struct dra_claim *claim = calloc(1, sizeof(*claim));
    claim->n_configs = 3;
    claim->configs[0].from_class = false;
    claim->configs[0].parameters = strdup("{\"apiVersion\":\"gpuslice.io/v1alpha1\",\"kind\":\"GpuConfig\","
                                          "\"sharing\":{\"strategy\":\"TimeSlicing\"}}");
    claim->configs[1].from_class = true;
    claim->configs[1].parameters = strdup("{\"apiVersion\":\"gpuslice.io/v1alpha1\",\"kind\":\"GpuConfig\","
                                          "\"sharing\":{\"strategy\":\"MPS\"}}");
    claim->configs[2].n_requests = 1;
    strcpy(claim->configs[2].requests[0], "other");
    claim->configs[2].parameters = strdup("{}");
    struct dra_claim_configs *d = calloc(1, sizeof(*d));
    dra_claim_configs_decode(claim, d);
    /* decoded once: what the lookups read, whatever the text is now */
    free(claim->configs[0].parameters);
    claim->configs[0].parameters = strdup("not JSON");
    assert_int_equal(dra_config_for(claim, d, "gpu", &c, err, sizeof(err)), 0);
    assert_true(c.set);
    assert_int_equal(c.strategy, DRA_SHARING_TIME_SLICING);
    /* a bad config is an error for the requests it names only */
    assert_int_equal(dra_config_for(claim, d, "other/sub", &c, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "opaque config 2 for request other/sub"));
    assert_non_null(strstr(err, "apiVersion: missing"));
    free(d);
    dra_claim_free(claim);
    free(claim);
}

/* An H100-like GPU in MIG mode: 3g.40gb (profile 9) at 0 or 4, 1g.10gb (19) at 0..6. */
static struct gs_gpu *mig_gpu(void) {
    struct gs_gpu *g = calloc(1, sizeof(*g));
    g->index = 3;
    g->mig_capable = true;
    g->mig_current = 1;
    g->n_profiles = 2;
    g->profiles[0] = (struct gs_gi_profile){ .id = 9, .name = "3g.40gb", .slices = 3, .placement_size = 4,
                                             .n_starts = 2, .starts = { 0, 4 } };
    g->profiles[1] = (struct gs_gi_profile){ .id = 19, .name = "1g.10gb", .slices = 1, .placement_size = 1,
                                             .n_starts = 7, .starts = { 0, 1, 2, 3, 4, 5, 6 } };
    return g;
}

static void test_mig_steps(void **st) {
    (void)st;
    struct gs_gpu *g = mig_gpu();
    struct dra_mig_made rec;
    const struct gs_mig_device *ex;
    memset(&rec, 0, sizeof(rec));
    assert_int_equal(dra_mig_first(g, 9, 2, &rec, &ex, err, sizeof(err)), -EINVAL); /* no such start */
    assert_int_equal(dra_mig_first(g, 9, 4, &rec, &ex, err, sizeof(err)), 0);
    assert_true(rec.on);
    assert_int_equal(rec.gi, -1);
    assert_int_equal(dra_mig_next(g, &rec), DRA_MIG_MAKE_GI);
    /* the GI made (and perhaps its record lost in a crash): adopted, then its CI */
    g->n_gis = 1;
    g->gis[0] = (struct gs_gpu_instance){ .id = 2, .profile_id = 9, .start = 4, .size = 4 };
    assert_int_equal(dra_mig_next(g, &rec), DRA_MIG_MAKE_CI);
    assert_int_equal(rec.gi, 2);
    g->n_mig = 1;
    g->mig[0] = (struct gs_mig_device){ .uuid = "MIG-abc", .gi_id = 2, .ci_id = 0, .gi_profile_id = 9, .start = 4,
                                        .size = 4, .ci_slices = 3, .gi_slices = 3 };
    assert_int_equal(dra_mig_next(g, &rec), DRA_MIG_READY);
    assert_string_equal(rec.uuid, "MIG-abc");
    assert_int_equal(rec.ci, 0);
    /* another claim's placement over it is refused; the same placement, made, is used as it is */
    struct dra_mig_made other;
    memset(&other, 0, sizeof(other));
    assert_int_equal(dra_mig_first(g, 19, 5, &other, &ex, err, sizeof(err)), -EBUSY);
    assert_non_null(strstr(err, "GPU instance 2"));
    assert_int_equal(dra_mig_first(g, 9, 4, &other, &ex, err, sizeof(err)), 1);
    assert_ptr_equal(ex, &g->mig[0]);
    assert_false(other.on);
    /* gone (a GPU reset): made again */
    g->n_gis = g->n_mig = 0;
    assert_int_equal(dra_mig_next(g, &rec), DRA_MIG_MAKE_GI);
    assert_int_equal(rec.gi, -1);
    g->mig_current = 0;
    assert_int_equal(dra_mig_first(g, 9, 0, &other, &ex, err, sizeof(err)), -ENODEV);
    free(g);
}

/* ---- one guard a container ---------------------------------------------------------------- */

/* A pod of two containers: main holds claims a (by name) and b (from a template, named in the
 * status) and the extended-resource claim; side holds c only. */
static const char POD[] =
    "{\"metadata\":{\"name\":\"p\",\"uid\":\"11111111-1111-1111-1111-111111111111\"},"
    "\"spec\":{\"resourceClaims\":[{\"name\":\"ra\",\"resourceClaimName\":\"a\"},"
    "{\"name\":\"rb\",\"resourceClaimTemplateName\":\"t\"},{\"name\":\"rc\",\"resourceClaimName\":\"c\"}],"
    "\"initContainers\":[{\"name\":\"init\",\"resources\":{\"claims\":[{\"name\":\"rc\"}]}}],"
    "\"containers\":[{\"name\":\"main\",\"resources\":{\"claims\":[{\"name\":\"ra\"},{\"name\":\"rb\"},"
    "{\"name\":\"ra\",\"request\":\"gpu\"}]}},{\"name\":\"side\",\"resources\":{\"claims\":[{\"name\":\"rc\"}]}}]},"
    "\"status\":{\"resourceClaimStatuses\":[{\"name\":\"rb\",\"resourceClaimName\":\"p-rb-x7\"}],"
    "\"extendedResourceClaimStatus\":{\"resourceClaimName\":\"p-extended-resources-q\","
    "\"requestMappings\":[{\"containerName\":\"main\",\"resourceName\":\"gpu.gpuslice.io/gpu.shared\","
    "\"requestName\":\"container-0-request-0\"}]}}}";

static void test_pod_claims_beside(void **st) {
    (void)st;
    struct dra_beside b[8];
    unsigned n;
    const char *uid = "11111111-1111-1111-1111-111111111111";
    assert_int_equal(dra_pod_claims_beside(POD, strlen(POD), uid, "a", b, 8, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 2); /* b once, though main names ra twice; the extended-resource claim */
    assert_string_equal(b[0].container, "main");
    assert_string_equal(b[0].claim, "p-extended-resources-q");
    assert_string_equal(b[1].claim, "p-rb-x7");
    assert_int_equal(dra_pod_claims_beside(POD, strlen(POD), uid, "p-rb-x7", b, 8, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 2);
    assert_string_equal(b[1].claim, "a");
    /* c is alone in each of its containers (an init container and side) */
    assert_int_equal(dra_pod_claims_beside(POD, strlen(POD), uid, "c", b, 8, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 0);
    assert_int_equal(dra_pod_claims_beside(POD, strlen(POD), "", "nope", b, 8, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 0);
    /* at most max */
    assert_int_equal(dra_pod_claims_beside(POD, strlen(POD), uid, "a", b, 1, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 1);
    /* another pod of the name, not a pod */
    assert_int_equal(dra_pod_claims_beside(POD, strlen(POD), "22222222-2222-2222-2222-222222222222", "a", b, 8, &n,
                                           err, sizeof(err)),
                     -ESTALE);
    assert_non_null(strstr(err, "made again"));
    assert_int_equal(dra_pod_claims_beside("[1]", 3, "", "a", b, 8, &n, err, sizeof(err)), -EINVAL);
    assert_int_equal(dra_pod_claims_beside("{", 1, "", "a", b, 8, &n, err, sizeof(err)), -EINVAL);
}

struct fake_pods {
    const char *json; /* NULL: the pod cannot be read */
    int calls;
};

static int fake_pod(void *ctx, const char *ns, const char *name, char **json, size_t *len, char *e, size_t elen) {
    struct fake_pods *f = ctx;
    f->calls++;
    assert_string_equal(ns, "team");
    assert_string_equal(name, "p");
    if (!f->json) {
        snprintf(e, elen, "forbidden");
        return -EACCES;
    }
    *json = strdup(f->json);
    *len = strlen(f->json);
    return 0;
}

static void test_one_guard_a_container(void **st) {
    (void)st;
    struct dra_claim c;
    memset(&c, 0, sizeof(c));
    strcpy(c.ns, "team");
    strcpy(c.name, "p-rb-x7");
    c.n_pods = 1;
    strcpy(c.pods[0].name, "p");
    strcpy(c.pods[0].uid, "11111111-1111-1111-1111-111111111111");
    struct fake_pods f = { POD, 0 };
    struct dra_claim_source src = { &f, NULL, fake_pod };
    struct dra_prepared prepared[2];
    memset(prepared, 0, sizeof(prepared));
    strcpy(prepared[0].ns, "team");
    strcpy(prepared[0].name, "a"); /* in main with p-rb-x7, but whole: no guard */
    strcpy(prepared[1].ns, "team");
    strcpy(prepared[1].name, "c"); /* guarded, in other containers */
    prepared[1].guarded = true;
    struct dra_checkpoint cp = { 2, 2, prepared };
    assert_int_equal(dra_share_one_guard(&c, &src, &cp, err, sizeof(err)), 0);
    assert_int_equal(f.calls, 1);
    /* a guarded, prepared: the second guarded claim of main is refused, both named */
    prepared[0].guarded = true;
    assert_int_equal(dra_share_one_guard(&c, &src, &cp, err, sizeof(err)), -EBUSY);
    assert_non_null(strstr(err, "claim team/p-rb-x7: container main of pod p also holds claim a"));
    /* a's entry only begun (MIG steps pending): not prepared yet */
    prepared[0].pending = true;
    assert_int_equal(dra_share_one_guard(&c, &src, &cp, err, sizeof(err)), 0);
    prepared[0].pending = false;
    /* the same name in another namespace is another claim */
    strcpy(prepared[0].ns, "other");
    assert_int_equal(dra_share_one_guard(&c, &src, &cp, err, sizeof(err)), 0);
    strcpy(prepared[0].ns, "team");
    /* a pod not read: not refused, but said */
    f.json = NULL;
    assert_int_equal(dra_share_one_guard(&c, &src, &cp, err, sizeof(err)), 1);
    assert_non_null(strstr(err, "pod team/p not read (forbidden)"));
    src.pod = NULL;
    assert_int_equal(dra_share_one_guard(&c, &src, &cp, err, sizeof(err)), 1);
    assert_non_null(strstr(err, "reads no pods"));
    /* a pod made again under the name is not the claim's */
    f.json = POD;
    src.pod = fake_pod;
    strcpy(c.pods[0].uid, "22222222-2222-2222-2222-222222222222");
    assert_int_equal(dra_share_one_guard(&c, &src, &cp, err, sizeof(err)), 1);
    /* no pods reserved: nothing to look at */
    c.n_pods = 0;
    f.calls = 0;
    assert_int_equal(dra_share_one_guard(&c, &src, &cp, err, sizeof(err)), 0);
    assert_int_equal(f.calls, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantities),      cmocka_unit_test(test_time_sliced_share),
        cmocka_unit_test(test_shared_errors),   cmocka_unit_test(test_mps_share),
        cmocka_unit_test(test_whole_gpu_takes_no_share), cmocka_unit_test(test_configs),
        cmocka_unit_test(test_mig_steps),       cmocka_unit_test(test_pod_claims_beside),
        cmocka_unit_test(test_one_guard_a_container),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
