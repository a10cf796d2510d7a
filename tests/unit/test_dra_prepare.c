/* test_dra_prepare.c: the pure part of the DRA driver's kubelet side (src/dra/prepare.h): a
 * ResourceClaim's JSON to this driver's results (UID, namespace and name checked, other drivers'
 * results and configs left out, fields of the wrong type named), a claim to its prepared devices
 * and transient CDI spec, the checkpoint both ways with hostile content, the checkpoint's
 * idempotent put and remove, and its file (src/dra/ckptfile.h): damaged ones told apart from a
 * newer version, FIFOs and links not opened, set aside under a new name, never a path from it. */
#include <errno.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "dra/ckptfile.h"
#include "dra/prepare.h"
#include "inventory_fixture.h"

#define DRIVER "gpu.gpuslice.io"
#define UID "0b7c0d4e-4f3a-4c1e-9d59-1b2f0c9e0a01"

static const char CLAIM[] =
    "{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceClaim\",\"metadata\":{\"namespace\":\"ns1\","
    "\"name\":\"c\",\"uid\":\"" UID "\"},\"status\":{\"allocation\":{\"devices\":{\"results\":["
    "{\"request\":\"a\",\"driver\":\"gpu.nvidia.com\",\"pool\":\"n\",\"device\":\"gpu-0\"},"
    "{\"request\":\"b\",\"driver\":\"" DRIVER "\",\"pool\":\"node-1\",\"device\":\"gpu-1\",\"shareID\":\"s-1\","
    "\"consumedCapacity\":{\"memory\":\"10Gi\",\"compute\":\"30\"}},"
    "{\"request\":\"c/x\",\"driver\":\"" DRIVER "\",\"pool\":\"node-1\",\"device\":\"gpu-0\"}],"
    "\"config\":[{\"source\":\"FromClaim\",\"requests\":[\"b\"],\"opaque\":{\"driver\":\"" DRIVER "\","
    "\"parameters\":{\"kind\":\"GpuConfig\",\"sharing\":\"mps\"}}},"
    "{\"source\":\"FromClass\",\"opaque\":{\"driver\":\"gpu.nvidia.com\",\"parameters\":{}}}]}}}}";

static void test_claim_parse(void **state) {
    (void)state;
    struct dra_claim c;
    char err[512] = "";
    assert_int_equal(dra_claim_parse(CLAIM, strlen(CLAIM), DRIVER, "ns1", "c", UID, &c, err, sizeof(err)), 0);
    assert_int_equal(c.n_results, 2); /* the other driver's result is left out */
    assert_string_equal(c.results[0].request, "b");
    assert_string_equal(c.results[0].device, "gpu-1");
    assert_string_equal(c.results[0].pool, "node-1");
    assert_string_equal(c.results[0].share_id, "s-1");
    assert_int_equal(c.results[0].n_capacity, 2);
    assert_string_equal(c.results[0].capacity[0].name, "memory");
    assert_string_equal(c.results[0].capacity[0].quantity, "10Gi");
    assert_string_equal(c.results[1].request, "c/x");
    assert_string_equal(c.results[1].share_id, "");
    assert_int_equal(c.n_configs, 1);
    assert_false(c.configs[0].from_class);
    assert_int_equal(c.configs[0].n_requests, 1);
    assert_string_equal(c.configs[0].requests[0], "b");
    assert_string_equal(c.configs[0].parameters, "{\"kind\":\"GpuConfig\",\"sharing\":\"mps\"}");
    dra_claim_free(&c);
}

static void test_claim_parse_errors(void **state) {
    (void)state;
    struct dra_claim c;
    char err[512] = "";
    assert_int_equal(dra_claim_parse(CLAIM, strlen(CLAIM), DRIVER, "ns1", "c", "ffff", &c, err, sizeof(err)), -ESTALE);
    assert_non_null(strstr(err, "has UID " UID ", not ffff"));
    assert_int_equal(dra_claim_parse(CLAIM, strlen(CLAIM), DRIVER, "ns2", "c", UID, &c, err, sizeof(err)), -ENOENT);
    assert_int_equal(dra_claim_parse(CLAIM, strlen(CLAIM), DRIVER, "ns1", "d", UID, &c, err, sizeof(err)), -ENOENT);
    assert_int_equal(dra_claim_parse(CLAIM, strlen(CLAIM), "x.example.com", "ns1", "c", UID, &c, err, sizeof(err)),
                     -ENODATA);
    assert_non_null(strstr(err, "has no device of x.example.com"));
    static const char unalloc[] = "{\"metadata\":{\"namespace\":\"n\",\"name\":\"c\",\"uid\":\"u\"},\"status\":{}}";
    assert_int_equal(dra_claim_parse(unalloc, strlen(unalloc), DRIVER, "n", "c", "u", &c, err, sizeof(err)), -ENODATA);
    assert_non_null(strstr(err, "is not allocated"));
    static const char badtype[] = "{\"metadata\":{\"namespace\":\"n\",\"name\":\"c\",\"uid\":\"u\"},\"status\":{"
                                  "\"allocation\":{\"devices\":{\"results\":[{\"driver\":\"" DRIVER "\","
                                  "\"request\":\"r\",\"pool\":\"p\",\"device\":7}]}}}}";
    assert_int_equal(dra_claim_parse(badtype, strlen(badtype), DRIVER, "n", "c", "u", &c, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "status.allocation.devices.results[0].device: not a string");
    static const char nul[] = "{\"metadata\":{\"namespace\":\"n\",\"name\":\"c\",\"uid\":\"u\"},\"status\":{"
                              "\"allocation\":{\"devices\":{\"results\":[{\"driver\":\"" DRIVER "\","
                              "\"request\":\"r\",\"pool\":\"p\\u0000x\",\"device\":\"gpu-0\"}]}}}}";
    assert_int_equal(dra_claim_parse(nul, strlen(nul), DRIVER, "n", "c", "u", &c, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "\\u0000 is not allowed")); /* jansson refuses NUL bytes in strings */
    assert_int_equal(dra_claim_parse("[1,", 3, DRIVER, "n", "c", "u", &c, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "line 1"));
}

static const struct dra_device DEVS[] = { { "gpu-0", "GPU-aaaa" }, { "gpu-1", "GPU-bbbb" } };

static void test_prepare_claim(void **state) {
    (void)state;
    struct dra_claim c;
    char err[512] = "";
    assert_int_equal(dra_claim_parse(CLAIM, strlen(CLAIM), DRIVER, "ns1", "c", UID, &c, err, sizeof(err)), 0);
    struct dra_prepared p;
    char *spec = NULL;
    assert_int_equal(dra_prepare_claim(&c, DEVS, 2, "gpuslice.io/gpu", &p, &spec, err, sizeof(err)), 0);
    assert_string_equal(p.uid, UID);
    assert_int_equal(p.n_devices, 2);
    assert_string_equal(p.devices[0].device, "gpu-1");
    assert_string_equal(p.devices[0].share_id, "s-1");
    assert_string_equal(p.devices[0].cdi[0], "gpuslice.io/gpu=GPU-bbbb");
    assert_string_equal(p.devices[0].cdi[1], "gpuslice.io/gpu=claim-" UID "-0");
    assert_string_equal(p.devices[1].cdi[0], "gpuslice.io/gpu=GPU-aaaa");
    assert_string_equal(p.devices[1].cdi[1], "gpuslice.io/gpu=claim-" UID "-1");
    json_error_t je;
    json_t *s = json_loads(spec, 0, &je);
    assert_non_null(s);
    assert_string_equal(json_string_value(json_object_get(s, "kind")), "gpuslice.io/gpu");
    assert_int_equal(json_array_size(json_object_get(s, "devices")), 2);
    /* one device a result, each with its request's devices only (requests b and c) */
    static const char *const want[2][3] = {
        { "GPUSLICE_DRA_CLAIM=ns1/c", "GPUSLICE_DRA_DEVICES=GPU-bbbb", "GPUSLICE_DRA_DEVICES_B=GPU-bbbb" },
        { "GPUSLICE_DRA_CLAIM=ns1/c", "GPUSLICE_DRA_DEVICES=GPU-aaaa", "GPUSLICE_DRA_DEVICES_C=GPU-aaaa" },
    };
    for (size_t k = 0; k < 2; k++) {
        json_t *dev = json_array_get(json_object_get(s, "devices"), k);
        char name[96];
        snprintf(name, sizeof(name), "claim-%s-%zu", UID, k);
        assert_string_equal(json_string_value(json_object_get(dev, "name")), name);
        json_t *env = json_object_get(json_object_get(dev, "containerEdits"), "env");
        assert_int_equal(json_array_size(env), 3);
        for (size_t j = 0; j < 3; j++)
            assert_string_equal(json_string_value(json_array_get(env, j)), want[k][j]);
    }
    json_decref(s);
    free(spec);
    /* a device the node does not have */
    assert_int_equal(dra_prepare_claim(&c, DEVS, 1, "gpuslice.io/gpu", &p, &spec, err, sizeof(err)), -ENODEV);
    assert_string_equal(err, "request b: device gpu-1 (pool node-1) is not a device of this node");
    assert_null(spec);
    dra_claim_free(&c);
    char name[128];
    dra_claim_spec_file("gpuslice.io/gpu", UID, name, sizeof(name));
    assert_string_equal(name, "gpuslice.io-gpu_claim-" UID ".json");
}

/* A claim of four requests, each one MIG device (the container of each names one request): each
 * result's device of the spec has its own MIG device's nodes, UUID and its request's edits, and
 * nothing of the other requests'; a claim-wide device carries nothing. */
#define MIG(n) "MIG-0b7c0d4e-4f3a-4c1e-9d59-1b2f0c9e0a0" #n
static void four_mig_claim(struct dra_claim *c, unsigned n, bool one_request) {
    memset(c, 0, sizeof(*c));
    strcpy(c->ns, "team-a");
    memset(c->name, 'n', 250); /* a name of 250 bytes: GPUSLICE_DRA_CLAIM holds it whole */
    strcpy(c->uid, UID);
    c->n_results = n;
    for (unsigned i = 0; i < n; i++) {
        snprintf(c->results[i].request, sizeof(c->results[i].request), one_request ? "gpus/mig-%u" : "req-%u", i);
        snprintf(c->results[i].pool, sizeof(c->results[i].pool), "node-1");
        snprintf(c->results[i].device, sizeof(c->results[i].device), "gpu-%u-mig-1g10gb-%u", i % 2, i);
    }
}

static const char *env_of(json_t *dev, const char *key) {
    size_t i, n = strlen(key);
    json_t *v;
    json_array_foreach(json_object_get(json_object_get(dev, "containerEdits"), "env"), i, v) {
        const char *kv = json_string_value(v);
        if (!strncmp(kv, key, n) && kv[n] == '=')
            return kv + n + 1;
    }
    return NULL;
}

static void test_prepare_scopes_each_request(void **state) {
    (void)state;
    static const char *const uuids[4] = { MIG(1), MIG(2), MIG(3), MIG(4) };
    struct dra_claim *c = malloc(sizeof(*c));
    struct dra_edits *e = calloc(1, sizeof(*e));
    struct dra_prepared *p = malloc(sizeof(*p));
    const struct dra_device *bound[DRA_MAX_RESULTS];
    four_mig_claim(c, 4, false);
    for (unsigned i = 0; i < 4; i++) {
        bound[i] = &DEVS[i % 2];
        e->uuid[i] = uuids[i];
        for (unsigned k = 0; k < 3; k++, e->n_nodes++) { /* as migdemand.c adds them: result i's */
            snprintf(e->nodes[e->n_nodes].path, sizeof(e->nodes[0].path), "/dev/nvidia-caps/nvidia-cap%u", 10 * i + k);
            e->nodes[e->n_nodes].major = 236;
            e->nodes[e->n_nodes].minor = (int)(10 * i + k);
            e->nodes[e->n_nodes].result = i;
        }
    }
    /* request req-2 is an MPS client: its limits in its device only */
    strcpy(e->extra[2].envs[0].key, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    strcpy(e->extra[2].envs[0].value, "25");
    e->extra[2].n_envs = 1;
    strcpy(e->extra[2].mounts[0].container_path, "/mps/pipe");
    strcpy(e->extra[2].mounts[0].host_path, "/run/mps/" MIG(3) "/pipe");
    e->extra[2].n_mounts = 1;
    char err[512] = "", *spec = NULL;
    assert_int_equal(dra_prepare_claim_ex(c, bound, e, "gpuslice.io/gpu", p, &spec, err, sizeof(err)), 0);
    assert_int_equal(p->n_devices, 4);
    json_t *s = json_loads(spec, 0, NULL);
    json_t *devs = json_object_get(s, "devices");
    assert_int_equal(json_array_size(devs), 4);
    for (unsigned i = 0; i < 4; i++) {
        char name[96], key[64], want[96];
        snprintf(name, sizeof(name), "gpuslice.io/gpu=claim-%s-%u", UID, i);
        assert_string_equal(p->devices[i].cdi[1], name);
        assert_string_equal(p->devices[i].cdi[0], i % 2 ? "gpuslice.io/gpu=GPU-bbbb" : "gpuslice.io/gpu=GPU-aaaa");
        json_t *dev = json_array_get(devs, i);
        assert_string_equal(json_string_value(json_object_get(dev, "name")), name + strlen("gpuslice.io/gpu="));
        assert_string_equal(env_of(dev, "GPUSLICE_DRA_DEVICES"), uuids[i]);
        snprintf(key, sizeof(key), "GPUSLICE_DRA_DEVICES_REQ_%u", i);
        assert_string_equal(env_of(dev, key), uuids[i]);
        assert_int_equal(strlen(env_of(dev, "GPUSLICE_DRA_CLAIM")), strlen("team-a/") + 250);
        json_t *nodes = json_object_get(json_object_get(dev, "containerEdits"), "deviceNodes");
        assert_int_equal(json_array_size(nodes), 3);
        for (unsigned k = 0; k < 3; k++) {
            snprintf(want, sizeof(want), "/dev/nvidia-caps/nvidia-cap%u", 10 * i + k);
            assert_string_equal(json_string_value(json_object_get(json_array_get(nodes, k), "path")), want);
        }
        json_t *mounts = json_object_get(json_object_get(dev, "containerEdits"), "mounts");
        assert_int_equal(json_array_size(mounts), i == 2 ? 1 : 0);
        assert_true((env_of(dev, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") != NULL) == (i == 2));
    }
    json_decref(s);
    free(spec);
    free(c);
    free(e);
    free(p);
}

/* The devices of one request are listed whole, however long their UUIDs (four MIG UUIDs do not fit
 * 160 bytes); a list past what an environment value holds is refused, never cut. */
static void test_prepare_lists_long_uuids_whole(void **state) {
    (void)state;
    struct dra_claim *c = malloc(sizeof(*c));
    struct dra_edits *e = calloc(1, sizeof(*e));
    struct dra_prepared *p = malloc(sizeof(*p));
    struct dra_device *big = calloc(DRA_MAX_RESULTS, sizeof(*big));
    const struct dra_device *bound[DRA_MAX_RESULTS];
    static const char *const uuids[4] = { MIG(1), MIG(2), MIG(3), MIG(4) };
    four_mig_claim(c, 4, true);
    for (unsigned i = 0; i < 4; i++) {
        bound[i] = &DEVS[i % 2];
        e->uuid[i] = uuids[i];
    }
    char err[512] = "", *spec = NULL;
    assert_int_equal(dra_prepare_claim_ex(c, bound, e, "gpuslice.io/gpu", p, &spec, err, sizeof(err)), 0);
    json_t *s = json_loads(spec, 0, NULL);
    const char *all = MIG(1) "," MIG(2) "," MIG(3) "," MIG(4);
    assert_true(strlen(all) > 159);
    for (unsigned i = 0; i < 4; i++) { /* one request "gpus" (subrequests gpus/mig-N): each device lists all four */
        json_t *dev = json_array_get(json_object_get(s, "devices"), i);
        assert_string_equal(env_of(dev, "GPUSLICE_DRA_DEVICES"), all);
        assert_string_equal(env_of(dev, "GPUSLICE_DRA_DEVICES_GPUS"), all);
    }
    json_decref(s);
    free(spec);
    /* 32 devices with UUIDs of 95 bytes: more than GS_ENV_VALUE_MAX */
    four_mig_claim(c, DRA_MAX_RESULTS, true);
    for (unsigned i = 0; i < DRA_MAX_RESULTS; i++) {
        memset(big[i].cdi, 'u', GS_UUID_LEN - 1);
        big[i].cdi[0] = (char)('A' + i % 26);
        bound[i] = &big[i];
    }
    assert_int_equal(dra_prepare_claim_ex(c, bound, NULL, "gpuslice.io/gpu", p, &spec, err, sizeof(err)), -E2BIG);
    assert_null(spec);
    assert_non_null(strstr(err, "request gpus/mig-0: its devices' UUIDs are longer than GPUSLICE_DRA_DEVICES holds"));
    /* an answer's value past its buffer is refused, not cut */
    struct gs_alloc_response *a = calloc(1, sizeof(*a));
    char *v = malloc(GS_ENV_VALUE_MAX + 1);
    memset(v, 'x', GS_ENV_VALUE_MAX);
    v[GS_ENV_VALUE_MAX] = '\0';
    assert_int_equal(gs_alloc_add_env(a, "K", v), -E2BIG);
    v[GS_ENV_VALUE_MAX - 1] = '\0';
    assert_int_equal(gs_alloc_add_env(a, "K", v), 0);
    assert_int_equal(strlen(a->envs[0].value), GS_ENV_VALUE_MAX - 1);
    free(v);
    free(a);
    free(big);
    free(c);
    free(e);
    free(p);
}

/* A result on a GPU the policy's gpuslice.dra.gpus does not give to DRA (the policy changed after
 * the scheduler allocated it, or a forged allocation) is refused naming the device and the key; a
 * device not in the inventory is refused too. */
static void test_resolve_refuses_gpus_not_given_to_dra(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("580.65.06", 13000);
    fx_gpu(inv, "NVIDIA H100 80GB HBM3", FX_HOPPER, 9, 0, 80);
    fx_gpu(inv, "NVIDIA H100 80GB HBM3", FX_HOPPER, 9, 0, 80);
    fx_mig(fx_gpu(inv, "NVIDIA H100 80GB HBM3", FX_HOPPER, 9, 0, 80), "3g.40gb", 2, 0, 3, 40448, 60);
    struct gs_policy *p = fx_policy("version: v1\nflags:\n  migStrategy: mixed\ngpuslice:\n  dra:\n    gpus: [\"0\"]\n");
    struct dra_device devs[4];
    assert_int_equal(dra_devices_of(inv, p, devs, 4), 3);
    assert_false(devs[0].withheld);
    assert_true(devs[1].withheld);
    assert_true(devs[2].withheld);
    struct dra_claim c;
    memset(&c, 0, sizeof(c));
    snprintf(c.uid, sizeof(c.uid), "%s", UID);
    c.n_results = 1;
    snprintf(c.results[0].request, sizeof(c.results[0].request), "gpu");
    snprintf(c.results[0].pool, sizeof(c.results[0].pool), "node-1");
    snprintf(c.results[0].device, sizeof(c.results[0].device), "gpu-0");
    struct dra_bound bound;
    char err[512] = "";
    assert_int_equal(dra_resolve(&c, devs, 3, &bound, err, sizeof(err)), 0);
    assert_ptr_equal(bound.dev[0], &devs[0]);
    assert_false(bound.ref[0].mig);
    snprintf(c.results[0].device, sizeof(c.results[0].device), "gpu-1");
    assert_int_equal(dra_resolve(&c, devs, 3, &bound, err, sizeof(err)), -EPERM);
    assert_string_equal(err, "request gpu: device gpu-1 (pool node-1) is on GPU 1, which the policy's "
                             "gpuslice.dra.gpus does not give to the DRA driver (the device plugins serve it; "
                             "allocated before the policy changed?)");
    /* a MIG placement of a withheld GPU in MIG mode, and a prepare of either: refused alike */
    snprintf(c.results[0].device, sizeof(c.results[0].device), "gpu-2-mig-3g40gb-9-4");
    assert_int_equal(dra_resolve(&c, devs, 3, &bound, err, sizeof(err)), -EPERM);
    assert_non_null(strstr(err, "device gpu-2-mig-3g40gb-9-4 (pool node-1) is on GPU 2, which the policy's "
                                "gpuslice.dra.gpus"));
    struct dra_prepared prep;
    char *spec = NULL;
    assert_int_equal(dra_prepare_claim(&c, devs, 3, "gpuslice.io/gpu", &prep, &spec, err, sizeof(err)), -EPERM);
    assert_null(spec);
    /* a device of a GPU the node no longer has */
    snprintf(c.results[0].device, sizeof(c.results[0].device), "gpu-7");
    assert_int_equal(dra_resolve(&c, devs, 3, &bound, err, sizeof(err)), -ENODEV);
    assert_string_equal(err, "request gpu: device gpu-7 (pool node-1) is not a device of this node");
    /* "all" gives every GPU; without a policy (and without the key: the preview) none is withheld */
    free(p);
    p = fx_policy("version: v1\nflags:\n  migStrategy: mixed\ngpuslice:\n  dra:\n    gpus: all\n");
    assert_int_equal(dra_devices_of(inv, p, devs, 4), 3);
    assert_false(devs[0].withheld || devs[1].withheld || devs[2].withheld);
    /* a MIG placement's name, resolved once: its GPU's device and what the name says */
    snprintf(c.results[0].device, sizeof(c.results[0].device), "gpu-2-mig-3g40gb-9-4");
    c.n_results = 2;
    c.results[1] = c.results[0];
    snprintf(c.results[1].device, sizeof(c.results[1].device), "gpu-0");
    assert_int_equal(dra_resolve(&c, devs, 3, &bound, err, sizeof(err)), 0);
    assert_ptr_equal(bound.dev[0], &devs[2]);
    assert_true(bound.ref[0].mig);
    assert_int_equal(bound.ref[0].gpu, 2);
    assert_int_equal(bound.ref[0].profile_id, 9);
    assert_int_equal(bound.ref[0].start, 4);
    assert_ptr_equal(bound.dev[1], &devs[0]);
    assert_false(bound.ref[1].mig);
    p->dra_gpus = GS_DRA_NONE; /* the agent's policy without the key */
    assert_int_equal(dra_devices_of(inv, p, devs, 4), 3);
    assert_true(devs[0].withheld && devs[1].withheld && devs[2].withheld);
    assert_int_equal(dra_devices_of(inv, NULL, devs, 4), 3);
    assert_false(devs[0].withheld || devs[1].withheld || devs[2].withheld);
    free(p);
    free(inv);
}

/* status.reservedFor's pods are read with the claim, in its one decode; a decoded claim (an API
 * server's answer) reads the same as its text. */
static void test_claim_reserved_pods(void **state) {
    (void)state;
    static const char head[] =
        "{\"metadata\":{\"namespace\":\"ns1\",\"name\":\"c\",\"uid\":\"" UID "\"},\"status\":{\"allocation\":"
        "{\"devices\":{\"results\":[{\"request\":\"b\",\"driver\":\"" DRIVER "\",\"pool\":\"p\",\"device\":\"gpu-1\"}]}}";
    char js[1024], err[512] = "";
    struct dra_claim c, d;
    snprintf(js, sizeof(js),
             "%s,\"reservedFor\":[{\"resource\":\"pods\",\"name\":\"p\",\"uid\":\"u1\"},"
             "{\"apiGroup\":\"example.com\",\"resource\":\"pods\",\"name\":\"x\",\"uid\":\"u2\"},"
             "{\"resource\":\"pods\",\"name\":\"q\",\"uid\":\"u3\"}]}}",
             head);
    assert_int_equal(dra_claim_parse(js, strlen(js), DRIVER, "ns1", "c", UID, &c, err, sizeof(err)), 0);
    assert_int_equal(c.n_pods, 2); /* not another group's "pods" */
    assert_string_equal(c.pods[0].name, "p");
    assert_string_equal(c.pods[1].uid, "u3");
    json_t *root = json_loads(js, 0, NULL);
    assert_non_null(root);
    assert_int_equal(dra_claim_from_json(root, DRIVER, "ns1", "c", UID, &d, err, sizeof(err)), 0);
    json_decref(root);
    assert_memory_equal(&c, &d, sizeof(c));
    dra_claim_free(&c);
    dra_claim_free(&d);
    snprintf(js, sizeof(js), "%s}}", head);
    assert_int_equal(dra_claim_parse(js, strlen(js), DRIVER, "ns1", "c", UID, &c, err, sizeof(err)), 0);
    assert_int_equal(c.n_pods, 0);
    dra_claim_free(&c);
    static const struct {
        const char *rf, *why;
    } bad[] = { { "{}", "status.reservedFor: not a list" },
                { "[{\"resource\":\"pods\"}]", "status.reservedFor[0]: not a consumer with a name" },
                { "[1]", "status.reservedFor[0]: not a consumer with a name" } };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(js, sizeof(js), "%s,\"reservedFor\":%s}}", head, bad[i].rf);
        assert_int_equal(dra_claim_parse(js, strlen(js), DRIVER, "ns1", "c", UID, &c, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, bad[i].why);
        assert_int_equal(c.n_configs, 0);
    }
}

static void test_uid_valid(void **state) {
    (void)state;
    assert_true(dra_uid_valid(UID));
    assert_false(dra_uid_valid(""));
    assert_false(dra_uid_valid("../x"));
    assert_false(dra_uid_valid("A"));
    assert_false(dra_uid_valid("0123456789012345678901234567890123456"));
}

static struct dra_prepared one(const char *uid, const char *dev) {
    struct dra_prepared p;
    memset(&p, 0, sizeof(p));
    snprintf(p.uid, sizeof(p.uid), "%s", uid);
    snprintf(p.ns, sizeof(p.ns), "ns");
    snprintf(p.name, sizeof(p.name), "n-%s", uid);
    p.n_devices = 1;
    snprintf(p.devices[0].request, sizeof(p.devices[0].request), "gpu");
    snprintf(p.devices[0].pool, sizeof(p.devices[0].pool), "node");
    snprintf(p.devices[0].device, sizeof(p.devices[0].device), "%s", dev);
    snprintf(p.devices[0].cdi[0], sizeof(p.devices[0].cdi[0]), "k.io/gpu=GPU-1");
    snprintf(p.devices[0].cdi[1], sizeof(p.devices[0].cdi[1]), "k.io/gpu=claim-%s", uid);
    return p;
}

static void test_checkpoint_roundtrip_and_idempotent_put(void **state) {
    (void)state;
    struct dra_checkpoint cp = { 0 };
    struct dra_prepared a = one("a1", "gpu-0"), b = one("b2", "gpu-1");
    assert_int_equal(dra_checkpoint_put(&cp, &a), 0);
    assert_int_equal(dra_checkpoint_put(&cp, &b), 0);
    assert_int_equal(dra_checkpoint_put(&cp, &a), 0); /* the same claim again: still one entry */
    assert_int_equal(cp.n, 2);
    char *text = dra_checkpoint_render(&cp);
    assert_non_null(text);
    struct dra_checkpoint back;
    char err[512] = "";
    assert_int_equal(dra_checkpoint_parse(text, strlen(text), &back, err, sizeof(err)), 0);
    assert_int_equal(back.n, 2);
    assert_memory_equal(dra_checkpoint_find(&back, "b2"), &b, sizeof(b));
    assert_memory_equal(dra_checkpoint_find(&back, "a1"), &a, sizeof(a));
    assert_true(dra_checkpoint_remove(&back, "a1"));
    assert_false(dra_checkpoint_remove(&back, "a1")); /* unprepare twice: nothing there */
    assert_null(dra_checkpoint_find(&back, "a1"));
    assert_non_null(dra_checkpoint_find(&back, "b2"));
    free(text);
    dra_checkpoint_free(&back);
    dra_checkpoint_free(&cp);
}

static void test_checkpoint_hostile(void **state) {
    (void)state;
    static const struct {
        const char *text, *err;
    } cases[] = {
        { "", "checkpoint: line 1" },
        { "[]", "checkpoint: version: not 1" },
        { "{\"version\":0,\"claims\":[]}", "checkpoint: version: not 1" },
        { "{\"version\":\"2\",\"claims\":[]}", "checkpoint: version: not 1" },
        { "{\"version\":1,\"claims\":[{\"uid\":\"a\",\"namespace\":\"n\",\"name\":\"c\",\"guard\":7,\"devices\":[]}]}",
          "checkpoint: claims[0].guard: not a string" },
        { "{\"version\":1,\"claims\":[{\"uid\":\"a\",\"namespace\":\"n\",\"name\":\"c\",\"guarded\":1,\"devices\":[]}]}",
          "checkpoint: claims[0].guarded: not a boolean" },
        { "{\"version\":1,\"claims\":{}}", "checkpoint: claims: not a list" },
        { "{\"version\":1,\"claims\":[7]}", "checkpoint: claims[0]: not an object" },
        { "{\"version\":1,\"claims\":[{\"uid\":\"../x\",\"namespace\":\"n\",\"name\":\"c\",\"devices\":[]}]}",
          "checkpoint: claims[0].uid: '../x' is not a UID" },
        { "{\"version\":1,\"claims\":[{\"uid\":\"a\",\"namespace\":\"n\",\"name\":\"c\",\"devices\":[]},"
          "{\"uid\":\"a\",\"namespace\":\"n\",\"name\":\"d\",\"devices\":[]}]}",
          "checkpoint: claims[1].uid: a listed twice" },
        { "{\"version\":1,\"claims\":[{\"uid\":\"a\",\"namespace\":\"n\",\"name\":\"c\"}]}",
          "checkpoint: claims[0].devices: not a list of at most 32 devices" },
        { "{\"version\":1,\"claims\":[{\"uid\":\"a\",\"namespace\":\"n\\u0000\",\"name\":\"c\",\"devices\":[]}]}",
          "\\u0000 is not allowed" },
        { "{\"version\":1,\"claims\":[{\"uid\":\"a\",\"namespace\":\"n\",\"name\":\"c\",\"devices\":[{\"request\":"
          "\"r\",\"pool\":\"p\",\"device\":\"d\",\"cdi\":[\"k/c=x\"]}]}]}",
          "checkpoint: claims[0].devices[0].cdi: not a list of 2 CDI IDs" },
        { "{\"version\":1,\"claims\":[{\"uid\":\"a\",\"namespace\":\"n\",\"name\":\"c\",\"devices\":[{\"request\":"
          "\"r\",\"pool\":\"p\",\"device\":\"d\",\"cdi\":[\"k/c=x\",\"nokind\"]}]}]}",
          "checkpoint: claims[0].devices[0].cdi[1]: not a CDI ID (KIND=NAME)" },
        { "{\"version\":1,\"claims\":[{\"uid\":\"a\",\"namespace\":\"n\",\"name\":\"c\",\"devices\":[{\"request\":"
          "\"r\",\"pool\":{},\"device\":\"d\",\"cdi\":[]}]}]}",
          "checkpoint: claims[0].devices[0].pool: not a string" },
        { "{\"version\":1,\"version\":1,\"claims\":[]}", "duplicate" },
        { "{\"version\":1,\"claims\":[{\"uid\":\"a\",\"namespace\":\"nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn\","
          "\"name\":\"c\",\"devices\":[]}]}",
          "checkpoint: claims[0].namespace: longer than 63 bytes or holds a NUL byte" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct dra_checkpoint cp;
        char err[512] = "";
        assert_int_equal(dra_checkpoint_parse(cases[i].text, strlen(cases[i].text), &cp, err, sizeof(err)), -EINVAL);
        if (!strstr(err, cases[i].err))
            fail_msg("case %zu: '%s' does not say '%s'", i, err, cases[i].err);
        assert_int_equal(cp.n, 0);
        assert_null(cp.claims);
    }
    /* too many devices for a claim */
    char big[8192];
    size_t o = (size_t)snprintf(big, sizeof(big), "{\"version\":1,\"claims\":[{\"uid\":\"a\",\"namespace\":\"n\","
                                                   "\"name\":\"c\",\"devices\":[");
    for (int i = 0; i < DRA_MAX_RESULTS + 1; i++)
        o += (size_t)snprintf(big + o, sizeof(big) - o, "%s{}", i ? "," : "");
    snprintf(big + o, sizeof(big) - o, "]}]}");
    struct dra_checkpoint cp;
    char err[512] = "";
    assert_int_equal(dra_checkpoint_parse(big, strlen(big), &cp, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "not a list of at most 32 devices"));
}

/* The damaged checkpoints of the agent's start, each with where the parser stopped; a newer
 * version is -ENOTSUP, not damage. */
static void test_checkpoint_damaged_and_newer(void **state) {
    (void)state;
    struct dra_checkpoint cp = { 0 };
    struct dra_prepared a = one("a1", "gpu-0");
    assert_int_equal(dra_checkpoint_put(&cp, &a), 0);
    char *good = dra_checkpoint_render(&cp);
    assert_non_null(good);
    dra_checkpoint_free(&cp);
    char err[512];
    /* truncated anywhere: refused, naming the line and column */
    for (size_t cut = 0; cut < strlen(good); cut += 7) {
        err[0] = '\0';
        assert_int_equal(dra_checkpoint_parse(good, cut, &cp, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "checkpoint: line "));
        assert_null(cp.claims);
    }
    assert_int_equal(dra_checkpoint_parse("\x01\xfe garbage", 10, &cp, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "column"));
    assert_int_equal(dra_checkpoint_parse("", 0, &cp, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "checkpoint: line 1"));
    assert_int_equal(dra_checkpoint_parse("{\"version\":2,\"claims\":[{\"x\":1}]}", 32, &cp, err, sizeof(err)), -ENOTSUP);
    assert_string_equal(err, "checkpoint: version: 2, newer than this agent's 1");
    /* one claim more than the bound */
    size_t cap = 64 + (DRA_CHECKPOINT_MAX + 1) * 80, o = 0;
    char *big = malloc(cap);
    assert_non_null(big);
    o += (size_t)snprintf(big + o, cap - o, "{\"version\":1,\"claims\":[");
    for (int i = 0; i <= DRA_CHECKPOINT_MAX; i++)
        o += (size_t)snprintf(big + o, cap - o, "%s{\"uid\":\"u%d\",\"namespace\":\"n\",\"name\":\"c\",\"devices\":[]}",
                              i ? "," : "", i);
    snprintf(big + o, cap - o, "]}");
    assert_int_equal(dra_checkpoint_parse(big, strlen(big), &cp, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "checkpoint: claims: 4097 claims, more than 4096");
    free(big);
    free(good);
}

/* A "guard" path (older agents wrote one) says the claim is guarded and nothing more: the path
 * is neither kept nor written back; the directory is the root's and the UID's. */
static void test_checkpoint_guard_path_ignored(void **state) {
    (void)state;
    static const char text[] = "{\"version\":1,\"claims\":[{\"uid\":\"a\",\"namespace\":\"n\",\"name\":\"c\","
                               "\"guard\":\"/etc\",\"devices\":[]},{\"uid\":\"b\",\"namespace\":\"n\",\"name\":\"d\","
                               "\"guard\":\"\",\"devices\":[]}]}";
    struct dra_checkpoint cp;
    char err[512] = "", dir[64];
    assert_int_equal(dra_checkpoint_parse(text, strlen(text), &cp, err, sizeof(err)), 0);
    assert_true(dra_checkpoint_find(&cp, "a")->guarded);
    assert_false(dra_checkpoint_find(&cp, "b")->guarded);
    char *back = dra_checkpoint_render(&cp);
    assert_non_null(back);
    assert_null(strstr(back, "/etc"));
    assert_null(strstr(back, "\"guard\""));
    assert_non_null(strstr(back, "\"guarded\": true"));
    free(back);
    dra_checkpoint_free(&cp);
    assert_int_equal(dra_guard_dir("/var/lib/g", "a", dir, sizeof(dir)), 0);
    assert_string_equal(dir, "/var/lib/g/claim-a");
    assert_int_equal(dra_guard_dir("/var/lib/g", "../../etc", dir, sizeof(dir)), -EINVAL);
    assert_int_equal(dra_guard_dir("/var/lib/g", "", dir, sizeof(dir)), -EINVAL);
    assert_int_equal(dra_guard_dir("", "a", dir, sizeof(dir)), -EINVAL);
    assert_int_equal(dra_guard_dir("/var/lib/g", UID, dir, 20), -ENAMETOOLONG);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* The file: absent, not a regular file (a FIFO is not opened: the read would wait for a writer),
 * a link, too large, a newer version; set aside under a fresh name each time. */
static void test_checkpoint_file(void **state) {
    (void)state;
    char dir[] = "/tmp/gs-ckpt-XXXXXX", path[128], aside[256], aside2[256], err[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/checkpoint.json", dir);
    struct dra_checkpoint cp;
    assert_int_equal(dra_checkpoint_read(path, &cp, err, sizeof(err)), -ENOENT);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(dra_checkpoint_read(path, &cp, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "a FIFO, not a regular file"));
    assert_int_equal(dra_checkpoint_set_aside(path, 86400, aside, sizeof(aside), err, sizeof(err)), 0);
    assert_true(strstr(aside, "/checkpoint.json.damaged-19700102T000000Z") != NULL);
    assert_int_equal(access(path, F_OK), -1);
    assert_true(dra_checkpoint_is_aside(strrchr(aside, '/') + 1));
    assert_false(dra_checkpoint_is_aside("checkpoint.json"));
    assert_false(dra_checkpoint_is_aside("checkpoint.json.damaged-"));
    /* the same second again: a new name, the first left alone */
    write_text(path, "{\"version\":1,\"claims\":[");
    assert_int_equal(dra_checkpoint_read(path, &cp, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "checkpoint.json: checkpoint: line 1, column"));
    assert_int_equal(dra_checkpoint_set_aside(path, 86400, aside2, sizeof(aside2), err, sizeof(err)), 0);
    assert_true(strstr(aside2, "damaged-19700102T000000Z-1") != NULL);
    struct stat st;
    assert_int_equal(lstat(aside, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    /* a link is not followed */
    assert_int_equal(symlink(aside2, path), 0);
    assert_int_equal(dra_checkpoint_read(path, &cp, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "symbolic link"));
    assert_int_equal(unlink(path), 0);
    /* larger than the bound (a sparse file) */
    write_text(path, "");
    assert_int_equal(truncate(path, (off_t)DRA_CHECKPOINT_FILE_MAX + 1), 0);
    assert_int_equal(dra_checkpoint_read(path, &cp, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "larger than"));
    /* a newer version: -ENOTSUP, the file untouched */
    write_text(path, "{\"version\":9,\"claims\":[]}");
    assert_int_equal(dra_checkpoint_read(path, &cp, err, sizeof(err)), -ENOTSUP);
    assert_non_null(strstr(err, "version: 9, newer than this agent's 1"));
    write_text(path, "{\"version\":1,\"claims\":[]}");
    assert_int_equal(dra_checkpoint_read(path, &cp, err, sizeof(err)), 0);
    assert_int_equal(cp.n, 0);
    unlink(path);
    unlink(aside);
    unlink(aside2);
    assert_int_equal(rmdir(dir), 0);
}

/* A claim of a list: its own namespace, name and UID, the UID checked as one. */
static void test_claim_parse_any(void **state) {
    (void)state;
    struct dra_claim c;
    char err[512] = "";
    assert_int_equal(dra_claim_parse(CLAIM, strlen(CLAIM), DRIVER, NULL, NULL, NULL, &c, err, sizeof(err)), 0);
    assert_string_equal(c.ns, "ns1");
    assert_string_equal(c.name, "c");
    assert_string_equal(c.uid, UID);
    dra_claim_free(&c);
    static const char bad[] = "{\"metadata\":{\"namespace\":\"n\",\"name\":\"c\",\"uid\":\"../x\"},\"status\":{}}";
    assert_int_equal(dra_claim_parse(bad, strlen(bad), DRIVER, NULL, NULL, NULL, &c, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "metadata.uid: '../x' is not a UID");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_claim_parse),
        cmocka_unit_test(test_claim_parse_errors),
        cmocka_unit_test(test_prepare_claim),
        cmocka_unit_test(test_prepare_scopes_each_request),
        cmocka_unit_test(test_prepare_lists_long_uuids_whole),
        cmocka_unit_test(test_resolve_refuses_gpus_not_given_to_dra),
        cmocka_unit_test(test_claim_reserved_pods), cmocka_unit_test(test_uid_valid),
        cmocka_unit_test(test_checkpoint_roundtrip_and_idempotent_put),
        cmocka_unit_test(test_checkpoint_hostile),
        cmocka_unit_test(test_checkpoint_damaged_and_newer),
        cmocka_unit_test(test_checkpoint_guard_path_ignored),
        cmocka_unit_test(test_checkpoint_file),
        cmocka_unit_test(test_claim_parse_any),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
