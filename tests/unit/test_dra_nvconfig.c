/* test_dra_nvconfig.c: NVIDIA's opaque configs read and translated, another driver's config
 * refused (src/dra/nvconfig.c), through share.c's dra_config_for and dra_share_of. */
#include <errno.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dra/nvconfig.h"
#include "dra/prepare.h"
#include "dra/share.h"

static char err[512];

#define NV "{\"apiVersion\":\"resource.nvidia.com/v1beta1\",\"kind\":\"GpuConfig\""
#define NVMIG "{\"apiVersion\":\"resource.nvidia.com/v1beta1\",\"kind\":\"MigDeviceConfig\""
#define MPSCFG(x) NV ",\"sharing\":{\"strategy\":\"MPS\",\"mpsConfig\":{" x "}}}"
#define UUID1 "GPU-11111111-2222-3333-4444-555555555555"

static int parse(const char *text, struct dra_gpu_config *c) {
    err[0] = '\0';
    return dra_nv_config_parse(text, c, err, sizeof(err));
}

static void refused(const char *text, const char *why) {
    struct dra_gpu_config c;
    assert_int_equal(parse(text, &c), -EINVAL);
    if (!strstr(err, why))
        fail_msg("%s: error '%s' lacks '%s'", text, err, why);
    assert_false(c.set);
    assert_int_equal(c.mps_thread_pct, 0);
}

static void test_time_slicing(void **st) {
    (void)st;
    struct dra_gpu_config c;
    assert_int_equal(parse(NV "}", &c), 0);
    assert_false(c.set);
    assert_int_equal(c.kind, DRA_CONFIG_NV_GPU);
    assert_int_equal(parse(NV ",\"sharing\":{\"strategy\":\"TimeSlicing\"}}", &c), 0);
    assert_true(c.set);
    assert_int_equal(c.strategy, DRA_SHARING_TIME_SLICING);
    assert_int_equal(parse(NV ",\"sharing\":{\"strategy\":\"TimeSlicing\",\"timeSlicingConfig\":{\"interval\":\"Default\"}}}", &c), 0);
    assert_int_equal(c.strategy, DRA_SHARING_TIME_SLICING);
    assert_int_equal(parse(NV ",\"sharing\":{\"strategy\":\"TimeSlicing\",\"timeSlicingConfig\":{}}}", &c), 0);
    assert_int_equal(parse(NV ",\"sharing\":{\"strategy\":\"TimeSlicing\",\"timeSlicingConfig\":null}}", &c), 0);
    assert_int_equal(parse(NV ",\"sharing\":null}", &c), 0);
    assert_false(c.set);
    for (const char *const *i = (const char *const[]){ "Short", "Medium", "Long", NULL }; *i; i++) {
        char t[256];
        snprintf(t, sizeof(t), NV ",\"sharing\":{\"strategy\":\"TimeSlicing\",\"timeSlicingConfig\":{\"interval\":\"%s\"}}}", *i);
        refused(t, "sharing.timeSlicingConfig.interval: ");
        assert_non_null(strstr(err, "hardware time slice"));
        assert_non_null(strstr(err, *i));
    }
    refused(NV ",\"sharing\":{\"strategy\":\"TimeSlicing\",\"timeSlicingConfig\":{\"interval\":\"Huge\"}}}",
            "interval: 'Huge' is not Default, Short, Medium or Long");
    refused(NV ",\"sharing\":{\"strategy\":\"TimeSlicing\",\"timeSlicingConfig\":{\"interval\":3}}}",
            "interval: not a string");
    refused(NV ",\"sharing\":{\"strategy\":\"TimeSlicing\",\"timeSlicingConfig\":{\"slice\":\"Long\"}}}",
            "sharing.timeSlicingConfig.slice: unknown field");
    refused(NV ",\"sharing\":{\"strategy\":\"TimeSlicing\",\"mpsConfig\":{}}}", "sharing.mpsConfig: set with strategy TimeSlicing");
    refused(NV ",\"sharing\":{\"strategy\":\"TimeSlicing\",\"timeSlicingConfig\":[]}}", "sharing.timeSlicingConfig: not an object");
}

static void test_mps(void **st) {
    (void)st;
    struct dra_gpu_config c;
    assert_int_equal(parse(NV ",\"sharing\":{\"strategy\":\"MPS\"}}", &c), 0);
    assert_true(c.set);
    assert_int_equal(c.strategy, DRA_SHARING_MPS);
    assert_int_equal(c.mps_thread_pct, 0);
    assert_int_equal(parse(NV ",\"sharing\":{\"strategy\":\"MPS\",\"mpsConfig\":{\"defaultActiveThreadPercentage\":50,"
                              "\"defaultPinnedDeviceMemoryLimit\":\"10Gi\",\"defaultPerDevicePinnedMemoryLimit\":"
                              "{\"0\":\"2Gi\",\"" UUID1 "\":1048576}}}}", &c), 0);
    assert_int_equal(c.mps_thread_pct, 50);
    assert_int_equal(c.mps_pinned, 10ULL << 30);
    assert_int_equal(c.n_mps_pinned_per, 2);
    assert_string_equal(c.mps_pinned_per[0].device, "0");
    assert_int_equal(c.mps_pinned_per[0].bytes, 2ULL << 30);
    assert_string_equal(c.mps_pinned_per[1].device, UUID1);
    assert_int_equal(c.mps_pinned_per[1].bytes, 1ULL << 20);
    assert_int_equal(parse(NV ",\"sharing\":{\"strategy\":\"MPS\",\"mpsConfig\":{\"defaultActiveThreadPercentage\":null}}}", &c), 0);
    assert_int_equal(c.mps_thread_pct, 0);
    assert_int_equal(parse(NV ",\"sharing\":{\"strategy\":\"MPS\",\"mpsConfig\":{\"defaultActiveThreadPercentage\":100}}}", &c), 0);
    assert_int_equal(c.mps_thread_pct, 100);

    refused(NV ",\"sharing\":{\"strategy\":\"MPS\",\"mpsConfig\":{\"defaultActiveThreadPercentage\":101}}}",
            "sharing.mpsConfig.defaultActiveThreadPercentage: not an integer 0..100");
    refused(NV ",\"sharing\":{\"strategy\":\"MPS\",\"mpsConfig\":{\"defaultActiveThreadPercentage\":-1}}}",
            "defaultActiveThreadPercentage: not an integer 0..100");
    refused(NV ",\"sharing\":{\"strategy\":\"MPS\",\"mpsConfig\":{\"defaultActiveThreadPercentage\":\"50\"}}}",
            "defaultActiveThreadPercentage: not an integer");
    refused(NV ",\"sharing\":{\"strategy\":\"MPS\",\"mpsConfig\":{\"defaultActiveThreadPercentage\":50.5}}}",
            "defaultActiveThreadPercentage: not an integer");
    refused(NV ",\"sharing\":{\"strategy\":\"MPS\",\"mpsConfig\":{\"defaultActiveThreadPercentage\":0}}}",
            "defaultActiveThreadPercentage: 0 would leave the client no threads");
    static const struct {
        const char *q;
        unsigned long long bytes;
    } ok[] = { { "1.5Gi", 3ULL << 29 }, { "10Gi", 10ULL << 30 }, { "1024Ki", 1ULL << 20 }, { "2M", 2000000 },
               { "1.25G", 1250000000 }, { "3Ti", 3ULL << 40 }, { "1048576", 1ULL << 20 }, { "0.5Mi", 0 },
               { "1Ei", 1ULL << 60 }, { "1e9", 1000000000 }, { "Gi", 0 }, { "500m", 0 } };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        char t[256];
        snprintf(t, sizeof(t), MPSCFG("\"defaultPinnedDeviceMemoryLimit\":\"%s\""), ok[i].q);
        if (ok[i].bytes == 0) {
            refused(t, "under 1Mi");
            continue;
        }
        assert_int_equal(parse(t, &c), 0);
        assert_int_equal(c.mps_pinned, ok[i].bytes);
    }
    for (const char *const *q = (const char *const[]){ "-1Gi", "10ki", "10K", "10Kb", "16Ei", "15E",
                                                        "99999999999999999999999", " 1Gi", NULL };
         *q; q++) {
        char t[256];
        snprintf(t, sizeof(t), MPSCFG("\"defaultPinnedDeviceMemoryLimit\":\"%s\""), *q);
        refused(t, "sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: '");
        assert_non_null(strstr(err, "is not a quantity of bytes (Kubernetes' quantity syntax"));
    }
    refused(NV ",\"sharing\":{\"strategy\":\"MPS\",\"mpsConfig\":{\"defaultPinnedDeviceMemoryLimit\":\"512Ki\"}}}",
            "defaultPinnedDeviceMemoryLimit: 524288 bytes, under 1Mi");
    refused(NV ",\"sharing\":{\"strategy\":\"MPS\",\"mpsConfig\":{\"defaultPinnedDeviceMemoryLimit\":-5}}}",
            "defaultPinnedDeviceMemoryLimit: a value is not a quantity");
    refused(NV ",\"sharing\":{\"strategy\":\"MPS\",\"mpsConfig\":{\"defaultPerDevicePinnedMemoryLimit\":{\"0\":\"x\"}}}}",
            "sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit.0: 'x' is not a quantity of bytes");
    refused(NV ",\"sharing\":{\"strategy\":\"MPS\",\"mpsConfig\":{\"defaultPerDevicePinnedMemoryLimit\":[]}}}",
            "defaultPerDevicePinnedMemoryLimit: not a map");
    refused(NV ",\"sharing\":{\"strategy\":\"MPS\",\"mpsConfig\":{\"defaultPerDevicePinnedMemoryLimit\":{\"\":\"1Gi\"}}}}",
            "not a device index or UUID");
    refused(NV ",\"sharing\":{\"strategy\":\"MPS\",\"mpsConfig\":{\"defaultPerDevicePinnedMemoryLimit\":{\"0\":\"1Gi\","
               "\"1\":\"1Gi\",\"2\":\"1Gi\",\"3\":\"1Gi\",\"4\":\"1Gi\",\"5\":\"1Gi\",\"6\":\"1Gi\",\"7\":\"1Gi\",\"8\":\"1Gi\"}}}}",
            "not a map of at most 8 devices");
    refused(NV ",\"sharing\":{\"strategy\":\"MPS\",\"mpsConfig\":{\"maxClients\":4}}}",
            "sharing.mpsConfig.maxClients: unknown field");
    refused(NV ",\"sharing\":{\"strategy\":\"MPS\",\"timeSlicingConfig\":{}}}", "sharing.timeSlicingConfig: set with strategy MPS");
    refused(NV ",\"sharing\":{\"strategy\":\"MPS\",\"mpsConfig\":7}}", "sharing.mpsConfig: not an object");
}

static void test_config_refused(void **st) {
    (void)st;
    refused("[]", "parameters: not a JSON object (each key once)");
    refused("not json", "parameters: not a JSON object (each key once)");
    refused(NULL, "parameters: not a JSON object (each key once)");
    refused("{\"kind\":\"GpuConfig\"}", "apiVersion: missing");
    refused("{\"apiVersion\":\"resource.nvidia.com/v1\",\"kind\":\"GpuConfig\"}",
            "apiVersion: 'resource.nvidia.com/v1', not resource.nvidia.com/v1beta1");
    refused("{\"apiVersion\":\"resource.nvidia.com/v1beta1\"}", "kind: missing");
    refused("{\"apiVersion\":\"resource.nvidia.com/v1beta1\",\"kind\":\"VfioDeviceConfig\"}",
            "kind: VfioDeviceConfig: gpuslice has no VFIO pass-through");
    refused("{\"apiVersion\":\"resource.nvidia.com/v1beta1\",\"kind\":\"ComputeDomainChannelConfig\"}",
            "gpuslice has no ComputeDomains");
    refused("{\"apiVersion\":\"resource.nvidia.com/v1beta1\",\"kind\":\"TpuConfig\"}",
            "kind: 'TpuConfig' is not GpuConfig or MigDeviceConfig");
    refused(NV ",\"metadata\":{}}", "metadata: unknown field");
    refused(NV ",\"\":{}}", ": unknown field");
    refused(NV ",\"sharing\":{\"strategy\":\"MPS\",\"mpsConfig\":{\"\":1}}}", "sharing.mpsConfig.: unknown field");
    refused(NV ",\"sharing\":{\"strategy\":\"MPS\",\"mpsConfig\":{\"default\":1}}}", "sharing.mpsConfig.default: unknown field");
    refused(NV ",\"sharing\":{\"strategy\":\"TimeSlicing\",\"replicas\":2}}", "sharing.replicas: unknown field");
    refused(NV ",\"sharing\":{}}", "sharing.strategy: missing");
    refused(NV ",\"sharing\":{\"strategy\":5}}", "sharing.strategy: not a string");
    refused(NV ",\"sharing\":{\"strategy\":\"Fast\"}}", "sharing.strategy: 'Fast' is not TimeSlicing or MPS");
    refused(NV ",\"sharing\":\"MPS\"}", "sharing: not an object");
    refused(NV ",\"sharing\":{\"strategy\":\"MPS\",\"strategy\":\"MPS\"}}", "parameters: not a JSON object (each key once)");
}

static void test_mig_device_config(void **st) {
    (void)st;
    struct dra_gpu_config c;
    assert_int_equal(parse(NVMIG "}", &c), 0);
    assert_int_equal(c.kind, DRA_CONFIG_NV_MIG);
    assert_int_equal(parse(NVMIG ",\"sharing\":{\"strategy\":\"TimeSlicing\"}}", &c), 0);
    assert_false(c.set); /* the MIG device is the claim's: nothing to set */
    assert_int_equal(c.kind, DRA_CONFIG_NV_MIG);
    refused(NVMIG ",\"sharing\":{\"strategy\":\"MPS\"}}", "sharing.strategy: MPS: gpuslice runs no MPS daemon on a MIG device");
    refused(NVMIG ",\"sharing\":{\"strategy\":\"MPS\",\"mpsConfig\":{\"defaultActiveThreadPercentage\":20}}}",
            "gpuslice runs no MPS daemon on a MIG device");
    refused(NVMIG ",\"sharing\":{\"strategy\":\"TimeSlicing\",\"timeSlicingConfig\":{}}}",
            "sharing.timeSlicingConfig: unknown field");
}

static struct dra_device dev(enum dra_sharing sh) {
    return (struct dra_device){ .name = "gpu-1", .cdi = UUID1, .sharing = sh, .mem_total = 80ULL << 30,
                                .mps_root = "/run/nvidia/mps" };
}

/* gpu-1 for request "gpu": without consumedCapacity, or with 20Gi and 30 % */
static const struct dra_result NONE = { .request = "gpu", .device = "gpu-1" };
static const struct dra_result BOTH = { .request = "gpu", .device = "gpu-1", .n_capacity = 2,
                                        .capacity = { { "memory", "20Gi" }, { "compute", "30" } } };

static int share_of(const char *params, const struct dra_result *r, enum dra_sharing sh, struct dra_share *s) {
    struct dra_gpu_config c;
    char label[160];
    struct dra_device d = dev(sh);
    err[0] = '\0';
    int rc = dra_opaque_config_parse(params, &c, label, sizeof(label), err, sizeof(err));
    return rc < 0 ? rc : dra_share_of(r, &d, &c, s, err, sizeof(err));
}

static void test_translation_mps(void **st) {
    (void)st;
    struct dra_share s;
    const struct dra_result none = NONE, both = BOTH;
    /* the config's values where the claim has none */
    assert_int_equal(share_of(MPSCFG("\"defaultActiveThreadPercentage\":50,\"defaultPinnedDeviceMemoryLimit\":\"10Gi\""),
                              &none, DRA_SHARING_MPS, &s), 0);
    assert_int_equal(s.sharing, DRA_SHARING_MPS);
    assert_int_equal(s.compute, 50);
    assert_int_equal(s.memory, 10ULL << 30);
    /* the tighter of the config's and the claim's */
    assert_int_equal(share_of(MPSCFG("\"defaultActiveThreadPercentage\":50,\"defaultPinnedDeviceMemoryLimit\":\"10Gi\""),
                              &both, DRA_SHARING_MPS, &s), 0);
    assert_int_equal(s.compute, 30);
    assert_int_equal(s.memory, 10ULL << 30);
    assert_int_equal(share_of(MPSCFG("\"defaultActiveThreadPercentage\":20,\"defaultPinnedDeviceMemoryLimit\":\"40Gi\""),
                              &both, DRA_SHARING_MPS, &s), 0);
    assert_int_equal(s.compute, 20);
    assert_int_equal(s.memory, 20ULL << 30);
    /* per device: by index 0 or the GPU's UUID, over the default */
    assert_int_equal(share_of(MPSCFG("\"defaultPinnedDeviceMemoryLimit\":\"10Gi\",\"defaultPerDevicePinnedMemoryLimit\":"
                                     "{\"0\":\"3Gi\"}"), &none, DRA_SHARING_MPS, &s), 0);
    assert_int_equal(s.memory, 3ULL << 30);
    assert_int_equal(s.compute, 100);
    assert_int_equal(share_of(MPSCFG("\"defaultPerDevicePinnedMemoryLimit\":{\"" UUID1 "\":\"5Gi\"}"), &none,
                              DRA_SHARING_MPS, &s), 0);
    assert_int_equal(s.memory, 5ULL << 30);
    assert_int_equal(share_of(MPSCFG("\"defaultPerDevicePinnedMemoryLimit\":{\"1\":\"5Gi\"}"), &none, DRA_SHARING_MPS, &s),
                     -EINVAL);
    assert_non_null(strstr(err, "request gpu: device gpu-1: sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit.1: not "
                                "the device's index"));
    assert_int_equal(share_of(MPSCFG("\"defaultPinnedDeviceMemoryLimit\":\"81Gi\""), &none, DRA_SHARING_MPS, &s), -EINVAL);
    assert_non_null(strstr(err, "more than the GPU's"));
    /* MPS asked of a GPU the policy does not serve in MPS mode: refused, naming the strategy */
    assert_int_equal(share_of(MPSCFG("\"defaultActiveThreadPercentage\":50"), &both, DRA_SHARING_TIME_SLICING, &s), -EINVAL);
    assert_non_null(strstr(err, "asks sharing.strategy MPS, but device gpu-1 is TimeSlicing"));
    assert_int_equal(share_of(MPSCFG(""), &none, DRA_SHARING_EXCLUSIVE, &s), -EINVAL);
    assert_non_null(strstr(err, "device gpu-1 is a whole GPU"));
    /* the MPS edits carry them */
    struct dra_device d = dev(DRA_SHARING_MPS);
    const struct dra_device *devs[] = { &d };
    struct gs_alloc_response *a = calloc(1, sizeof(*a));
    assert_int_equal(share_of(MPSCFG("\"defaultActiveThreadPercentage\":40,\"defaultPinnedDeviceMemoryLimit\":\"2Gi\""),
                              &none, DRA_SHARING_MPS, &s), 0);
    assert_int_equal(dra_share_edits(&s, devs, 1, NULL, NULL, NULL, a, err, sizeof(err)), 0);
    bool pct = false, pin = false;
    for (unsigned i = 0; i < a->n_envs; i++) {
        pct = pct || (!strcmp(a->envs[i].key, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") && !strcmp(a->envs[i].value, "40"));
        pin = pin || (!strcmp(a->envs[i].key, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") && !strcmp(a->envs[i].value, "0=2048M"));
    }
    assert_true(pct);
    assert_true(pin);
    free(a);
}

static void test_translation_ts_and_kinds(void **st) {
    (void)st;
    struct dra_share s;
    const struct dra_result r = BOTH, none = NONE;
    const char *ts = NV ",\"sharing\":{\"strategy\":\"TimeSlicing\",\"timeSlicingConfig\":{\"interval\":\"Default\"}}}";
    assert_int_equal(share_of(ts, &r, DRA_SHARING_TIME_SLICING, &s), 0);
    assert_int_equal(s.sharing, DRA_SHARING_TIME_SLICING);
    assert_int_equal(s.memory, 20ULL << 30); /* the guard's quota: the claim's */
    assert_int_equal(s.compute, 30);
    assert_int_equal(share_of(ts, &none, DRA_SHARING_EXCLUSIVE, &s), 0); /* a whole GPU: a check that passes */
    assert_int_equal(s.sharing, DRA_SHARING_EXCLUSIVE);
    assert_int_equal(share_of(ts, &r, DRA_SHARING_MPS, &s), -EINVAL);
    assert_non_null(strstr(err, "asks sharing.strategy TimeSlicing, but device gpu-1 is MPS"));
    /* a config of the other kind of device */
    assert_int_equal(share_of(NVMIG ",\"sharing\":{\"strategy\":\"TimeSlicing\"}}", &none, DRA_SHARING_EXCLUSIVE, &s), -EINVAL);
    assert_non_null(strstr(err, "request gpu: device gpu-1 is a GPU, but its config is a MigDeviceConfig"));
    assert_int_equal(share_of(NVMIG ",\"sharing\":{\"strategy\":\"TimeSlicing\"}}", &none, DRA_SHARING_MIG, &s), 0);
    assert_int_equal(share_of(NV "}", &none, DRA_SHARING_MIG, &s), -EINVAL);
    assert_non_null(strstr(err, "is a MIG device, but its config is a GpuConfig"));
    /* gpuslice's own config still reads; neither apiVersion: both named */
    struct dra_gpu_config c;
    char label[160];
    assert_int_equal(dra_opaque_config_parse("{\"apiVersion\":\"gpuslice.io/v1alpha1\",\"kind\":\"GpuConfig\",\"sharing\":"
                                             "{\"strategy\":\"MPS\"}}", &c, label, sizeof(label), err, sizeof(err)), 1);
    assert_int_equal(c.kind, DRA_CONFIG_GPUSLICE);
    assert_string_equal(label, "gpuslice.io/v1alpha1 GpuConfig");
    assert_int_equal(dra_opaque_config_parse("[]", &c, label, sizeof(label), err, sizeof(err)), 1);
    assert_int_equal(dra_opaque_config_parse("{\"apiVersion\":\"example.com/v1\",\"kind\":\"GpuConfig\"}", &c, label,
                                             sizeof(label), err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "apiVersion: 'example.com/v1' is not gpuslice.io/v1alpha1 (gpuslice's GpuConfig) or "
                                "resource.nvidia.com/v1beta1"));
    assert_int_equal(dra_opaque_config_parse(NVMIG "}", &c, label, sizeof(label), err, sizeof(err)), 0);
    assert_string_equal(label, "resource.nvidia.com/v1beta1 MigDeviceConfig");
}

/* dra_config_for over a claim's configs: NVIDIA's and gpuslice's, the claim's after the class's. */
static void test_config_for(void **st) {
    (void)st;
    struct dra_claim c;
    memset(&c, 0, sizeof(c));
    c.n_configs = 2;
    c.configs[0].from_class = true;
    c.configs[0].parameters = strdup("{\"apiVersion\":\"gpuslice.io/v1alpha1\",\"kind\":\"GpuConfig\",\"sharing\":"
                                     "{\"strategy\":\"TimeSlicing\"}}");
    c.configs[1].parameters = strdup(MPSCFG("\"defaultActiveThreadPercentage\":25"));
    struct dra_gpu_config out;
    struct dra_claim_configs *d = calloc(1, sizeof(*d));
    assert_non_null(d);
    dra_claim_configs_decode(&c, d);
    assert_int_equal(dra_config_for(&c, d, "gpu", &out, err, sizeof(err)), 0);
    assert_int_equal(out.strategy, DRA_SHARING_MPS);
    assert_int_equal(out.kind, DRA_CONFIG_NV_GPU);
    assert_int_equal(out.mps_thread_pct, 25);
    free(c.configs[1].parameters);
    c.configs[1].parameters = strdup(NV ",\"sharing\":{\"strategy\":\"TimeSlicing\",\"timeSlicingConfig\":{\"interval\":\"Long\"}}}");
    dra_claim_configs_decode(&c, d);
    assert_int_equal(dra_config_for(&c, d, "gpu", &out, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "opaque config 1 for request gpu (resource.nvidia.com/v1beta1 GpuConfig, from the claim): "
                                "sharing.timeSlicingConfig.interval: Long: gpuslice leaves the GPU's hardware time slice"));
    free(d);
    dra_claim_free(&c);
}

/* Another driver's config: refused when only this driver serves what it names. */
static int foreign(const char *config, const char *results) {
    json_t *c = json_loads(config, 0, NULL), *r = json_loads(results, 0, NULL);
    assert_non_null(c);
    assert_non_null(r);
    err[0] = '\0';
    int rc = dra_config_foreign((const struct json_t *)c, (const struct json_t *)r, "gpu.gpuslice.io", 3, err, sizeof(err));
    json_decref(c);
    json_decref(r);
    return rc;
}

static void test_foreign_config(void **st) {
    (void)st;
    const char *ours = "[{\"request\":\"gpu\",\"driver\":\"gpu.gpuslice.io\"}]";
    const char *mixed = "[{\"request\":\"gpu\",\"driver\":\"gpu.gpuslice.io\"},{\"request\":\"nic\",\"driver\":\"nic.example.com\"}]";
    assert_int_equal(foreign("{\"requests\":[\"gpu\"],\"opaque\":{\"driver\":\"gpu.nvidia.com\",\"parameters\":{}}}", ours), -EINVAL);
    assert_non_null(strstr(err, "status.allocation.devices.config[3]: opaque.driver 'gpu.nvidia.com', but its requests are "
                                "served by gpu.gpuslice.io"));
    assert_non_null(strstr(err, "set opaque.driver: gpu.gpuslice.io"));
    assert_int_equal(foreign("{\"opaque\":{\"driver\":\"gpu.nvidia.com\"}}", ours), -EINVAL);          /* every request */
    assert_int_equal(foreign("{\"requests\":[\"gpu\"],\"opaque\":{}}", ours), -EINVAL);
    assert_non_null(strstr(err, "opaque.driver missing"));
    assert_int_equal(foreign("{\"requests\":[\"gpu\"],\"opaque\":{\"driver\":\"gpu.nvidia.com\"}}",
                             "[{\"request\":\"gpu/big\",\"driver\":\"gpu.gpuslice.io\"}]"), -EINVAL); /* a subrequest */
    /* another driver's devices in the claim read it */
    assert_int_equal(foreign("{\"opaque\":{\"driver\":\"nic.example.com\"}}", mixed), 0);
    assert_int_equal(foreign("{\"requests\":[\"nic\"],\"opaque\":{\"driver\":\"nic.example.com\"}}", mixed), 0);
    assert_int_equal(foreign("{\"requests\":[\"gpu\",\"nic\"],\"opaque\":{\"driver\":\"nic.example.com\"}}", mixed), 0);
    /* requests this driver does not serve are not its business */
    assert_int_equal(foreign("{\"requests\":[\"nic\"],\"opaque\":{\"driver\":\"gpu.nvidia.com\"}}", mixed), 0);
    assert_int_equal(foreign("{\"requests\":[\"gpus\"],\"opaque\":{\"driver\":\"gpu.nvidia.com\"}}", ours), 0);
}

/* Through dra_claim_parse: the config refused as the claim's error. */
static void test_claim_with_foreign_config(void **st) {
    (void)st;
    const char *claim =
        "{\"metadata\":{\"namespace\":\"ns1\",\"name\":\"c\",\"uid\":\"7a1c0d4e-4f3a-4c1e-9d59-1b2f0c9e0a01\"},"
        "\"status\":{\"allocation\":{\"devices\":{\"results\":[{\"request\":\"gpu\",\"driver\":\"gpu.gpuslice.io\","
        "\"pool\":\"n\",\"device\":\"gpu-0\"}],\"config\":[{\"source\":\"FromClaim\",\"requests\":[\"gpu\"],"
        "\"opaque\":{\"driver\":\"gpu.nvidia.com\",\"parameters\":{\"apiVersion\":\"resource.nvidia.com/v1beta1\","
        "\"kind\":\"GpuConfig\"}}}]}}}}";
    struct dra_claim c;
    assert_int_equal(dra_claim_parse(claim, strlen(claim), "gpu.gpuslice.io", "ns1", "c", NULL, &c, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "config[0]: opaque.driver 'gpu.nvidia.com'"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_time_slicing),
        cmocka_unit_test(test_mps),
        cmocka_unit_test(test_config_refused),
        cmocka_unit_test(test_mig_device_config),
        cmocka_unit_test(test_translation_mps),
        cmocka_unit_test(test_translation_ts_and_kinds),
        cmocka_unit_test(test_config_for),
        cmocka_unit_test(test_foreign_config),
        cmocka_unit_test(test_claim_with_foreign_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
