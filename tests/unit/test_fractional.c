/* test_fractional.c: fractional GPUs (docs/fractional.md): the plan's units, the one-GPU choice of
 * GetPreferredAllocation, Allocate's one-GPU check and quota, the pod being admitted found in a
 * PodList, and the pairing of a container's memory and compute allocations. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "agent/fractional.h"
#include "core/alloc.h"
#include "core/plan.h"

/* Two H100 80GB (79.6 GiB as NVML says, 81559 MiB) and an L4 (22.5 GiB). */
static struct gs_inventory *node(void) {
    struct gs_inventory *inv = calloc(1, sizeof(*inv));
    inv->n_gpus = 3;
    for (unsigned i = 0; i < 3; i++) {
        struct gs_gpu *g = &inv->gpus[i];
        g->index = g->minor = i;
        snprintf(g->uuid, sizeof(g->uuid), "GPU-%08u-0000-0000-0000-000000000000", i);
        snprintf(g->name, sizeof(g->name), "%s", i < 2 ? "NVIDIA H100 80GB HBM3" : "NVIDIA L4");
        g->mem_total = (i < 2 ? 81559ULL : 23034ULL) << 20;
    }
    return inv;
}

/* The policy of yaml (heap) and the plan it gives inv. */
static struct gs_policy *plan_of(const struct gs_inventory *inv, const char *yaml, struct gs_plan *plan) {
    struct gs_policy *p = calloc(1, sizeof(*p));
    char err[512];
    if (gs_policy_parse("test.yaml", yaml, strlen(yaml), p, err, sizeof(err)) < 0)
        fail_msg("policy: %s", err);
    assert_int_equal(gs_plan_build(inv, p, NULL, plan), 0);
    return p;
}

#define FRACTIONAL "gpuslice:\n  gpus:\n    - {model: \"NVIDIA H100*\", mode: fractional}\n"

struct fixture {
    struct gs_inventory *inv;
    struct gs_policy *pol;
    struct gs_plan plan;
    const struct gs_resource *mem, *sm;
};

static int setup(void **state) {
    struct fixture *f = calloc(1, sizeof(*f));
    f->inv = node();
    f->pol = plan_of(f->inv, FRACTIONAL, &f->plan);
    f->mem = gs_plan_resource(&f->plan, GS_FRAC_MEMORY_RESOURCE);
    f->sm = gs_plan_resource(&f->plan, GS_FRAC_COMPUTE_RESOURCE);
    assert_non_null(f->mem);
    assert_non_null(f->sm);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    struct fixture *f = *state;
    gs_plan_free(&f->plan);
    free(f->pol);
    free(f->inv);
    free(f);
    return 0;
}

/* Memory units: a GiB each, the GPU's memory rounded to the nearest GiB; compute: 100. */
static void test_plan_units(void **state) {
    struct fixture *f = *state;
    assert_int_equal(gs_frac_memory_units(81559ULL << 20), 80);
    assert_int_equal(gs_frac_memory_units(143771ULL << 20), 140); /* H200: 140.4 GiB */
    assert_int_equal(gs_frac_memory_units(511ULL << 20), 0);
    assert_int_equal(f->mem->n_devices, 160); /* two H100s */
    assert_int_equal(f->sm->n_devices, 200);
    assert_true(f->mem->replicated);
    assert_false(f->mem->fail_gt_one);
    assert_int_equal(f->mem->fraction, GS_FRAC_MEMORY);
    assert_int_equal(f->sm->fraction, GS_FRAC_COMPUTE);
    const struct gs_device *d = gs_resource_device(f->mem, "GPU-00000001-0000-0000-0000-000000000000::mem-79");
    assert_non_null(d);
    assert_int_equal(d->gpu, 1);
    assert_int_equal(d->quota, 1ULL << 30);
    assert_int_equal(d->fraction, GS_FRAC_MEMORY);
    d = gs_resource_device(f->sm, "GPU-00000000-0000-0000-0000-000000000000::sm-99");
    assert_non_null(d);
    assert_int_equal(d->quota, 0);
    assert_null(gs_resource_device(f->sm, "GPU-00000000-0000-0000-0000-000000000000::sm-100"));
    assert_int_equal(f->plan.gpus[0].mode, GS_MODE_FRACTIONAL);
    assert_int_equal(f->plan.gpus[0].replicas, 80);
    assert_int_equal(f->plan.gpus[2].mode, GS_MODE_WHOLE); /* the L4: no rule */
    const struct gs_resource *whole = gs_plan_resource(&f->plan, "nvidia.com/gpu");
    assert_non_null(whole);
    assert_int_equal(whole->n_devices, 1);
}

/* A GPU in MIG mode cannot be fractional; a time-sliced rule cannot reuse the names. */
static void test_plan_refusals(void **state) {
    (void)state;
    struct gs_inventory *inv = node();
    inv->gpus[0].mig_capable = true;
    inv->gpus[0].mig_current = 1;
    struct gs_plan plan;
    struct gs_policy *pol = plan_of(inv, "gpuslice:\n  gpus:\n    - {index: \"0,1\", mode: fractional}\n"
                                         "    - {index: 2, mode: time-slicing, replicas: 2, "
                                         "resourceName: gpuslice.io/gpu-memory}\n", &plan);
    const struct gs_resource *mem = gs_plan_resource(&plan, GS_FRAC_MEMORY_RESOURCE);
    assert_non_null(mem);
    assert_int_equal(mem->n_devices, 80); /* GPU 1 only */
    assert_int_equal(plan.gpus[0].mode, GS_MODE_DISABLED);
    assert_int_equal(plan.gpus[2].mode, GS_MODE_DISABLED);
    bool mig = false, names = false;
    for (unsigned i = 0; i < plan.n_warnings; i++) {
        mig |= strstr(plan.warnings[i], "GPU 0 is in MIG mode: it cannot be shared as fractional") != NULL;
        names |= strstr(plan.warnings[i], "GPU 2: gpuslice.io/gpu-memory carries fractional units only") != NULL;
    }
    assert_true(mig);
    assert_true(names);
    gs_plan_free(&plan);
    free(pol);
    free(inv);
}

/* All device IDs of a resource, as the kubelet lists the available ones. */
static size_t ids_of(const struct gs_resource *r, const char **ids, unsigned skip_gpu0) {
    size_t n = 0;
    for (unsigned i = 0; i < r->n_devices; i++)
        if (!(r->devices[i].gpu == 0 && r->devices[i].replica < skip_gpu0))
            ids[n++] = r->devices[i].id;
    return n;
}

static unsigned gpu_of_all(const struct gs_resource *r, const char **ids, size_t n) {
    unsigned gpu = 99;
    for (size_t i = 0; i < n; i++) {
        const struct gs_device *d = gs_resource_device(r, ids[i]);
        assert_non_null(d);
        if (gpu == 99)
            gpu = d->gpu;
        assert_int_equal(d->gpu, gpu); /* one GPU */
    }
    return gpu;
}

/* One GPU: the extender's when it holds the request, else the best fit; none when no GPU does. */
static void test_preferred(void **state) {
    struct fixture *f = *state;
    const char *avail[200], *out[200];
    /* 50 GiB of GPU 0 taken: 30 free there, 80 on GPU 1 */
    size_t n = ids_of(f->mem, avail, 50);
    assert_int_equal(n, 110);
    assert_int_equal(frac_preferred(f->mem, avail, n, NULL, 0, 10, -1, out), 10);
    assert_int_equal(gpu_of_all(f->mem, out, 10), 0); /* best fit: the fuller GPU */
    assert_int_equal(frac_preferred(f->mem, avail, n, NULL, 0, 10, 1, out), 10);
    assert_int_equal(gpu_of_all(f->mem, out, 10), 1); /* the extender's choice */
    assert_int_equal(frac_preferred(f->mem, avail, n, NULL, 0, 40, 0, out), 40);
    assert_int_equal(gpu_of_all(f->mem, out, 40), 1); /* the extender's GPU cannot hold it: best fit */
    assert_int_equal(frac_preferred(f->mem, avail, n, NULL, 0, 81, -1, out), 0); /* no GPU has 81 */
    assert_int_equal(frac_preferred(f->mem, avail, n, NULL, 0, 31, -1, out), 31);
    assert_int_equal(gpu_of_all(f->mem, out, 31), 1);
    /* must-include units (an init container's): their GPU */
    const char *must[1] = { avail[100] }; /* of GPU 1 */
    assert_int_equal(frac_preferred(f->mem, avail, n, must, 1, 5, 0, out), 5);
    assert_string_equal(out[0], avail[100]);
    assert_int_equal(gpu_of_all(f->mem, out, 5), 1);
    for (size_t i = 1; i < 5; i++)
        assert_string_not_equal(out[i], avail[100]);
}

/* Allocate: units of one GPU give the guard their GiB; units of two GPUs are refused. */
static void test_allocate(void **state) {
    struct fixture *f = *state;
    const char *ids[12];
    for (unsigned i = 0; i < 10; i++)
        ids[i] = f->mem->devices[80 + i].id; /* GPU 1 */
    struct gs_alloc_response out;
    char err[512] = "";
    assert_int_equal(gs_allocate(f->mem, ids, 10, f->pol, NULL, NULL, NULL, &out, err, sizeof(err)), 0);
    assert_string_equal(out.visible_devices, "GPU-00000001-0000-0000-0000-000000000000");
    assert_int_equal(out.n_guarded, 1);
    assert_int_equal(out.guarded[0].bytes, 10ULL << 30);
    assert_int_equal(out.guarded[0].compute_pct, 0);
    gs_alloc_response_free(&out);
    unsigned gpu = 9;
    assert_int_equal(frac_one_gpu(f->mem, ids, 10, &gpu, err, sizeof(err)), 0);
    assert_int_equal(gpu, 1);
    ids[10] = f->mem->devices[0].id; /* GPU 0 */
    ids[11] = f->mem->devices[1].id;
    assert_int_equal(frac_one_gpu(f->mem, ids, 12, &gpu, err, sizeof(err)), -EXDEV);
    assert_string_equal(err, "gpuslice.io/gpu-memory: the 12 units of one container must be of one GPU, these are of "
                             "GPUs 0 (2), 1 (10): no GPU of this node has that much free (a container's fraction is "
                             "of one GPU, docs/fractional.md)");
}

static const char pods_json[] =
    "{\"items\": ["
    /* running: never the one being admitted */
    "{\"metadata\": {\"uid\": \"u-run\", \"namespace\": \"ns\", \"name\": \"a\", "
    "  \"creationTimestamp\": \"2025-01-01T00:00:00Z\"},"
    " \"spec\": {\"containers\": [{\"resources\": {\"limits\": {\"gpuslice.io/gpu-memory\": \"10\"}}}]},"
    " \"status\": {\"phase\": \"Running\"}},"
    /* the oldest pending one asking 10 GiB, with the extender's GPU */
    "{\"metadata\": {\"uid\": \"u-old\", \"namespace\": \"ns\", \"name\": \"b\", "
    "  \"creationTimestamp\": \"2025-01-01T00:00:01Z\", \"annotations\": {\"gpuslice.io/gpu-index\": \"1\"}},"
    " \"spec\": {\"initContainers\": [{\"resources\": {\"limits\": {\"gpuslice.io/gpu-compute\": \"5\"}}}],"
    "  \"containers\": [{\"resources\": {\"limits\": {\"cpu\": \"1\"}}},"
    "   {\"resources\": {\"limits\": {\"gpuslice.io/gpu-memory\": \"10\", \"gpuslice.io/gpu-compute\": \"30\"}}}]},"
    " \"status\": {\"phase\": \"Pending\"}},"
    /* newer, same request */
    "{\"metadata\": {\"uid\": \"u-new\", \"namespace\": \"ns\", \"name\": \"c\", "
    "  \"creationTimestamp\": \"2025-01-01T00:00:05Z\"},"
    " \"spec\": {\"containers\": [{\"resources\": {\"requests\": {\"gpuslice.io/gpu-memory\": 10},"
    "   \"limits\": {\"nvidia.com/gpu\": \"1\"}}}]},"
    " \"status\": {\"phase\": \"Pending\"}}"
    "]}";

static void test_find_pod(void **state) {
    (void)state;
    json_error_t je;
    json_t *list = json_loads(pods_json, 0, &je);
    assert_non_null(list);
    struct frac_pod p;
    assert_int_equal(frac_find_pod(list, GS_FRAC_MEMORY, 10, NULL, 0, &p), 0);
    assert_string_equal(p.uid, "u-old");
    assert_string_equal(p.name, "b");
    assert_int_equal(p.gpu_index, 1);
    assert_false(p.whole);
    assert_int_equal(p.n_containers, 2); /* the init container, then the second container */
    assert_int_equal(p.c[0].units[GS_FRAC_COMPUTE], 5);
    assert_int_equal(p.c[0].units[GS_FRAC_MEMORY], 0);
    assert_int_equal(p.c[1].units[GS_FRAC_MEMORY], 10);
    assert_int_equal(p.c[1].units[GS_FRAC_COMPUTE], 30);
    /* once its units are allocated, the next one */
    const char done[1][64] = { "u-old" };
    assert_int_equal(frac_find_pod(list, GS_FRAC_MEMORY, 10, done, 1, &p), 0);
    assert_string_equal(p.uid, "u-new");
    assert_int_equal(p.gpu_index, -1);
    assert_true(p.whole);
    /* another size: no pod */
    assert_int_equal(frac_find_pod(list, GS_FRAC_MEMORY, 11, NULL, 0, &p), -ENOENT);
    assert_int_equal(frac_find_pod(list, GS_FRAC_COMPUTE, 30, NULL, 0, &p), 0);
    assert_string_equal(p.uid, "u-old");
    json_decref(list);
}

/* A pod's units in Kubernetes' quantity syntax (util/quantity.h): whole numbers in any form; a
 * fraction or a byte quantity is no count of units. */
static void test_request_quantities(void **state) {
    (void)state;
    static const struct {
        const char *q;
        int units; /* -1: not a request of units */
    } t[] = { { "10", 10 }, { "1e1", 10 }, { "10000m", 10 }, { "+10", 10 }, { "1k", 1000 },
              { "10.5", -1 }, { "10Gi", -1 }, { "-10", -1 }, { "0", -1 }, { "10 ", -1 } };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        char js[400];
        snprintf(js, sizeof(js),
                 "{\"items\": [{\"metadata\": {\"uid\": \"u\", \"namespace\": \"ns\", \"name\": \"a\", "
                 "\"creationTimestamp\": \"2025-01-01T00:00:00Z\"}, \"spec\": {\"containers\": [{\"resources\": "
                 "{\"limits\": {\"gpuslice.io/gpu-memory\": \"%s\"}}}]}, \"status\": {\"phase\": \"Pending\"}}]}",
                 t[i].q);
        json_t *list = json_loads(js, 0, NULL);
        assert_non_null(list);
        struct frac_pod p;
        int want = t[i].units < 0 ? -ENOENT : 0;
        if (frac_find_pod(list, GS_FRAC_MEMORY, t[i].units < 0 ? 10 : (unsigned)t[i].units, NULL, 0, &p) != want)
            fail_msg("'%s': expected %d units", t[i].q, t[i].units);
        json_decref(list);
    }
}

/* A pod's allocations in the kubelet's order (init containers first, each container's two
 * resources in either order) pair memory and compute of one container, and nothing else. */
static void test_pairing(void **state) {
    (void)state;
    struct frac_state st;
    memset(&st, 0, sizeof(st));
    struct frac_pod p = { .uid = "u1", .gpu_index = -1, .n_containers = 3 };
    p.c[0].units[GS_FRAC_COMPUTE] = 5;                                         /* init: compute only */
    p.c[1].units[GS_FRAC_MEMORY] = 10, p.c[1].units[GS_FRAC_COMPUTE] = 30;     /* both */
    p.c[2].units[GS_FRAC_MEMORY] = 20;                                         /* memory only */
    unsigned c;
    bool pair;
    uint64_t t = 1000;
    frac_assign(&st, &p, GS_FRAC_COMPUTE, 0, t, &c, &pair);
    assert_int_equal(c, 0);
    assert_false(pair);
    frac_record(&st, &p, GS_FRAC_COMPUTE, c, pair, 0, 0, 5, "/g/a", t);
    assert_false(st.open); /* the init container needs nothing else */
    frac_assign(&st, &p, GS_FRAC_COMPUTE, 0, t + 1, &c, &pair); /* container 1's compute first */
    assert_int_equal(c, 1);
    assert_false(pair);
    frac_record(&st, &p, GS_FRAC_COMPUTE, c, pair, 0, 0, 30, "/g/b", t + 1);
    assert_true(st.open);
    frac_assign(&st, &p, GS_FRAC_MEMORY, 0, t + 2, &c, &pair);
    assert_int_equal(c, 1);
    assert_true(pair); /* its memory: the same guard files */
    assert_string_equal(st.guard_dir, "/g/b");
    assert_int_equal(st.compute, 30);
    frac_record(&st, &p, GS_FRAC_MEMORY, c, pair, 0, 10ULL << 30, 0, "/g/b", t + 2);
    assert_false(st.open);
    assert_int_equal(st.n_done, 0);
    frac_assign(&st, &p, GS_FRAC_MEMORY, 0, t + 3, &c, &pair);
    assert_int_equal(c, 2);
    assert_false(pair);
    frac_record(&st, &p, GS_FRAC_MEMORY, c, pair, 0, 20ULL << 30, 0, "/g/c", t + 3);
    assert_int_equal(st.n_done, 1); /* the pod is done: the next lookup skips it */
    assert_string_equal(st.done[0], "u1");

    /* without the pod: the other resource within the window on the same GPU pairs */
    memset(&st, 0, sizeof(st));
    frac_assign(&st, NULL, GS_FRAC_MEMORY, 1, t, &c, &pair);
    assert_false(pair);
    frac_record(&st, NULL, GS_FRAC_MEMORY, 0, false, 1, 10ULL << 30, 0, "/g/d", t);
    assert_true(st.open);
    frac_assign(&st, NULL, GS_FRAC_COMPUTE, 0, t + 1, &c, &pair);
    assert_false(pair); /* another GPU */
    frac_assign(&st, NULL, GS_FRAC_MEMORY, 1, t + 1, &c, &pair);
    assert_false(pair); /* the same resource again: another container */
    frac_assign(&st, NULL, GS_FRAC_COMPUTE, 1, t + FRAC_PAIR_WINDOW_NS + 1, &c, &pair);
    assert_false(pair); /* too late */
    frac_assign(&st, NULL, GS_FRAC_COMPUTE, 1, t + 1, &c, &pair);
    assert_true(pair);
    frac_record(&st, NULL, GS_FRAC_COMPUTE, 0, true, 1, 0, 30, "/g/d", t + 1);
    assert_false(st.open);
    assert_int_equal(st.mem_bytes, 10ULL << 30);
    assert_int_equal(st.compute, 30);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_plan_units, setup, teardown),
        cmocka_unit_test(test_plan_refusals),
        cmocka_unit_test_setup_teardown(test_preferred, setup, teardown),
        cmocka_unit_test_setup_teardown(test_allocate, setup, teardown),
        cmocka_unit_test(test_find_pod), cmocka_unit_test(test_request_quantities),
        cmocka_unit_test(test_pairing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
