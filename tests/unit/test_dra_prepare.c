/* test_dra_prepare.c: the pure part of the DRA driver's kubelet side (src/dra/prepare.h): a
 * ResourceClaim's JSON to this driver's results (UID, namespace and name checked, other drivers'
 * results and configs left out, fields of the wrong type named), a claim to its prepared devices
 * and transient CDI spec, the checkpoint both ways with hostile content, and the checkpoint's
 * idempotent put and remove. */
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
#include <cmocka.h>

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
    assert_string_equal(p.devices[0].cdi[1], "gpuslice.io/gpu=claim-" UID);
    assert_string_equal(p.devices[1].cdi[0], "gpuslice.io/gpu=GPU-aaaa");
    json_error_t je;
    json_t *s = json_loads(spec, 0, &je);
    assert_non_null(s);
    assert_string_equal(json_string_value(json_object_get(s, "kind")), "gpuslice.io/gpu");
    json_t *dev = json_array_get(json_object_get(s, "devices"), 0);
    assert_string_equal(json_string_value(json_object_get(dev, "name")), "claim-" UID);
    json_t *env = json_object_get(json_object_get(dev, "containerEdits"), "env");
    assert_string_equal(json_string_value(json_array_get(env, 0)), "GPUSLICE_DRA_CLAIM=ns1/c");
    assert_string_equal(json_string_value(json_array_get(env, 1)), "GPUSLICE_DRA_DEVICES=GPU-bbbb,GPU-aaaa");
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
    const struct dra_device *bound[DRA_MAX_RESULTS];
    char err[512] = "";
    assert_int_equal(dra_resolve(&c, devs, 3, bound, err, sizeof(err)), 0);
    assert_ptr_equal(bound[0], &devs[0]);
    snprintf(c.results[0].device, sizeof(c.results[0].device), "gpu-1");
    assert_int_equal(dra_resolve(&c, devs, 3, bound, err, sizeof(err)), -EPERM);
    assert_string_equal(err, "request gpu: device gpu-1 (pool node-1) is on GPU 1, which the policy's "
                             "gpuslice.dra.gpus does not give to the DRA driver (the device plugins serve it; "
                             "allocated before the policy changed?)");
    /* a MIG placement of a withheld GPU in MIG mode, and a prepare of either: refused alike */
    snprintf(c.results[0].device, sizeof(c.results[0].device), "gpu-2-mig-3g40gb-9-4");
    assert_int_equal(dra_resolve(&c, devs, 3, bound, err, sizeof(err)), -EPERM);
    assert_non_null(strstr(err, "device gpu-2-mig-3g40gb-9-4 (pool node-1) is on GPU 2, which the policy's "
                                "gpuslice.dra.gpus"));
    struct dra_prepared prep;
    char *spec = NULL;
    assert_int_equal(dra_prepare_claim(&c, devs, 3, "gpuslice.io/gpu", &prep, &spec, err, sizeof(err)), -EPERM);
    assert_null(spec);
    /* a device of a GPU the node no longer has */
    snprintf(c.results[0].device, sizeof(c.results[0].device), "gpu-7");
    assert_int_equal(dra_resolve(&c, devs, 3, bound, err, sizeof(err)), -ENODEV);
    assert_string_equal(err, "request gpu: device gpu-7 (pool node-1) is not a device of this node");
    /* "all" gives every GPU; without a policy (and without the key: the preview) none is withheld */
    free(p);
    p = fx_policy("version: v1\nflags:\n  migStrategy: mixed\ngpuslice:\n  dra:\n    gpus: all\n");
    assert_int_equal(dra_devices_of(inv, p, devs, 4), 3);
    assert_false(devs[0].withheld || devs[1].withheld || devs[2].withheld);
    p->dra_gpus = GS_DRA_NONE; /* the agent's policy without the key */
    assert_int_equal(dra_devices_of(inv, p, devs, 4), 3);
    assert_true(devs[0].withheld && devs[1].withheld && devs[2].withheld);
    assert_int_equal(dra_devices_of(inv, NULL, devs, 4), 3);
    assert_false(devs[0].withheld || devs[1].withheld || devs[2].withheld);
    free(p);
    free(inv);
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
        { "{\"version\":2,\"claims\":[]}", "checkpoint: version: not 1" },
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_claim_parse),
        cmocka_unit_test(test_claim_parse_errors),
        cmocka_unit_test(test_prepare_claim),
        cmocka_unit_test(test_resolve_refuses_gpus_not_given_to_dra),
        cmocka_unit_test(test_uid_valid),
        cmocka_unit_test(test_checkpoint_roundtrip_and_idempotent_put),
        cmocka_unit_test(test_checkpoint_hostile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
