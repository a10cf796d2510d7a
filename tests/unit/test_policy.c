/* test_policy.c: unit tests for the sharing policy parser (src/config/policy.c). NVIDIA's own
 * config files must parse unchanged; bad inputs are table-driven and each checks the exact
 * "NAME:LINE:COLUMN: PATH:" prefix, because users find their mistake by it. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "bad_cases.h"

#include "config/policy.h"
#include "config/yamlutil.h"
#include "util/util.h"

#ifndef GS_SOURCE_ROOT
#error "GS_SOURCE_ROOT must be defined by the build"
#endif

/* The policy struct is large (~150 KiB): tests keep it on the heap. */
static struct gs_policy *new_policy(void) {
    struct gs_policy *p = malloc(sizeof(*p));
    assert_non_null(p);
    memset(p, 0xA5, sizeof(*p));
    return p;
}

static int parse(const char *yaml, struct gs_policy *p, char *err, size_t errlen) {
    return gs_policy_parse("t.yaml", yaml, strlen(yaml), p, err, errlen);
}

static void parse_ok(const char *yaml, struct gs_policy *p) {
    char err[1024] = "";
    int r = parse(yaml, p, err, sizeof(err));
    if (r < 0)
        fail_msg("unexpected error %d: %s", r, err);
}

static bool has_warning(const struct gs_policy *p, const char *text) {
    for (unsigned i = 0; i < p->n_warnings; i++)
        if (strcmp(p->warnings[i], text) == 0)
            return true;
    return false;
}

static void assert_default_xids(const struct gs_policy *p) {
    static const unsigned long long want[] = { 13, 31, 43, 45, 68, 109 };
    assert_int_equal(p->n_ignored_xids, GS_ARRAY_SIZE(want));
    for (size_t i = 0; i < GS_ARRAY_SIZE(want); i++)
        assert_int_equal(p->ignored_xids[i], want[i]);
}

static void assert_defaults(const struct gs_policy *p) {
    assert_int_equal(p->mig_strategy, GS_MIG_NONE);
    assert_false(p->pass_device_specs);
    assert_int_equal(p->list_strategy, GS_LIST_ENVVAR);
    assert_int_equal(p->id_strategy, GS_ID_UUID);
    assert_int_equal(p->alloc_policy, GS_ALLOC_DISTRIBUTED);
    assert_true(p->fail_on_init_error);
    assert_string_equal(p->driver_root, "/");
    assert_string_equal(p->dev_root, "/");
    assert_string_equal(p->mps_root, "/run/nvidia/mps");
    assert_false(p->ts_present);
    assert_int_equal(p->n_ts_resources, 0);
    assert_false(p->mps_present);
    assert_int_equal(p->n_mps_resources, 0);
    assert_false(p->mps_exclusive_process);
    assert_int_equal(p->n_rules, 0);
    assert_default_xids(p);
    assert_int_equal(p->recovery_quiet_s, 300);
    assert_int_equal(p->n_warnings, 0);
}

/* ---- good inputs ---- */

static void test_minimal_defaults(void **state) {
    (void)state;
    _cleanup_free_ struct gs_policy *p = new_policy();
    parse_ok("version: v1\n", p);
    assert_defaults(p);

    /* what gs_policy_init gives, byte for byte, plus the file's name (for the planner's
     * FILE:LINE:COLUMN errors) */
    _cleanup_free_ struct gs_policy *q = new_policy();
    memset(q, 0, sizeof(*q));
    gs_policy_init(q);
    gs_strlcpy(q->source, "t.yaml", sizeof(q->source));
    assert_memory_equal(p, q, sizeof(*p));
}

static void test_empty_and_null_forms(void **state) {
    (void)state;
    /* NVIDIA: missing or empty version means v1; an empty file is all defaults. Sections with
     * nothing under them (everything commented out) read as absent. */
    static const char *const texts[] = {
        "",
        "# nothing\n",
        "version:\n",
        "version: \"\"\n",
        "flags:\nsharing:\ngpuslice:\nresources:\nimex:\n",
        "flags:\n  plugin:\n  gfd:\nsharing:\n  timeSlicing:\n  mps:\ngpuslice:\n  gpus:\n  health:\n  mps:\n",
        "flags:\n  mpsRoot: \"\"\ngpuslice:\n  mps: {}\n", /* an empty mpsRoot keeps the default */
        "flags: {}\nsharing: {}\ngpuslice: {}\n",
    };
    for (size_t i = 0; i < GS_ARRAY_SIZE(texts); i++) {
        _cleanup_free_ struct gs_policy *p = new_policy();
        parse_ok(texts[i], p);
        assert_defaults(p);
    }
}

/* The config-file example of NVIDIA's k8s-device-plugin README ("As a configuration file"), with
 * the other fields of its v1 schema (api/config/v1, v0.20.0) and a user's comments added. */
static const char nvidia_example[] =
    "version: v1\n"
    "flags:\n"
    "  migStrategy: \"none\"            # none | single | mixed\n"
    "  failOnInitError: true\n"
    "  nvidiaDriverRoot: \"/\"\n"
    "  mpsRoot: \"/run/nvidia/mps\"     # only needed when sharing.mps is used\n"
    "  gdsEnabled: false\n"
    "  mofedEnabled: false\n"
    "  plugin:\n"
    "    passDeviceSpecs: false\n"
    "    deviceListStrategy: [\"envvar\"]   # or \"volume-mounts\" | \"cdi-annotations\" | \"cdi-cri\"\n"
    "    deviceIDStrategy: \"uuid\"         # or \"index\"\n"
    "    sharedDevicesAllocationPolicy: \"distributed\"   # v0.20.0+: or \"packed\"\n"
    "sharing:\n"
    "  timeSlicing:\n"
    "    renameByDefault: true          # -> nvidia.com/gpu.shared\n"
    "    failRequestsGreaterThanOne: true\n"
    "    resources:\n"
    "    - name: nvidia.com/gpu\n"
    "      replicas: 4\n"
    "      # devices: [\"0\", \"GPU-…\"]    # schema-valid but IGNORED at runtime (forced to \"all\")\n"
    "  # mps:                           # instead of timeSlicing (mutually exclusive)\n"
    "  #   renameByDefault: true\n"
    "  #   resources: [{name: nvidia.com/gpu, replicas: 4}]\n";

static void test_nvidia_readme_example(void **state) {
    (void)state;
    _cleanup_free_ struct gs_policy *p = new_policy();
    parse_ok(nvidia_example, p);
    assert_int_equal(p->mig_strategy, GS_MIG_NONE);
    assert_true(p->fail_on_init_error);
    assert_string_equal(p->driver_root, "/");
    assert_string_equal(p->dev_root, "/");
    assert_false(p->pass_device_specs);
    assert_int_equal(p->list_strategy, GS_LIST_ENVVAR);
    assert_int_equal(p->id_strategy, GS_ID_UUID);
    assert_int_equal(p->alloc_policy, GS_ALLOC_DISTRIBUTED);
    assert_true(p->ts_present);
    assert_true(p->ts_rename_by_default);
    assert_true(p->ts_fail_requests_gt_one);
    assert_int_equal(p->n_ts_resources, 1);
    assert_string_equal(p->ts_resources[0].name, "nvidia.com/gpu");
    assert_string_equal(p->ts_resources[0].rename, "");
    assert_int_equal(p->ts_resources[0].replicas, 4);
    assert_int_equal(p->ts_resources[0].memory_per_replica, 0);
    assert_int_equal(p->ts_resources[0].compute_per_replica, 0); /* MPS-only fields stay unset */
    assert_int_equal(p->ts_resources[0].pinned_per_replica, 0);
    assert_true(p->ts_resources[0].devices_all);
    assert_int_equal(p->ts_resources[0].devices_count, 0);
    assert_int_equal(p->ts_resources[0].n_devices, 0);
    assert_false(p->mps_present);
    assert_string_equal(p->mps_root, "/run/nvidia/mps");
    assert_int_equal(p->n_rules, 0);
    assert_default_xids(p);
    assert_int_equal(p->n_warnings, 0);
}

/* NVIDIA's README "Configuration File" example, with GFD settings and a string list strategy. */
static void test_nvidia_readme_with_gfd(void **state) {
    (void)state;
    _cleanup_free_ struct gs_policy *p = new_policy();
    parse_ok("version: v1\n"
             "flags:\n"
             "  migStrategy: \"single\"\n"
             "  failOnInitError: false\n"
             "  nvidiaDriverRoot: \"/run/nvidia/driver\"\n"
             "  plugin:\n"
             "    passDeviceSpecs: true\n"
             "    deviceListStrategy: volume-mounts\n"
             "    deviceIDStrategy: index\n"
             "    sharedDevicesAllocationPolicy: packed\n"
             "  gfd:\n"
             "    oneshot: false\n"
             "    noTimestamp: false\n"
             "    outputFile: /etc/kubernetes/node-feature-discovery/features.d/gfd\n"
             "    sleepInterval: 60s\n"
             "    machineTypeFile: /sys/class/dmi/id/product_name\n"
             "  useNodeFeatureAPI: true\n"
             "  deviceDiscoveryStrategy: auto\n"
             "sharing:\n"
             "  timeSlicing:\n"
             "    resources:\n"
             "    - name: nvidia.com/gpu\n"
             "      replicas: 10\n",
             p);
    assert_int_equal(p->mig_strategy, GS_MIG_SINGLE);
    assert_false(p->fail_on_init_error);
    assert_string_equal(p->driver_root, "/run/nvidia/driver");
    assert_string_equal(p->dev_root, "/run/nvidia/driver"); /* follows the driver root */
    assert_true(p->pass_device_specs);
    assert_int_equal(p->list_strategy, GS_LIST_VOLUME_MOUNTS);
    assert_int_equal(p->id_strategy, GS_ID_INDEX);
    assert_int_equal(p->alloc_policy, GS_ALLOC_PACKED);
    assert_true(p->ts_present);
    assert_false(p->ts_rename_by_default);
    assert_false(p->ts_fail_requests_gt_one);
    assert_int_equal(p->ts_resources[0].replicas, 10);
    assert_int_equal(p->n_warnings, 0);
}

static void test_flags_variants(void **state) {
    (void)state;
    _cleanup_free_ struct gs_policy *p = new_policy();
    parse_ok("flags:\n"
             "  migStrategy: mixed\n"
             "  nvidiaDriverRoot: /run/nvidia/driver\n"
             "  nvidiaDevRoot: /\n"
             "  plugin:\n"
             "    deviceListStrategy: [envvar, volume-mounts, envvar]\n",
             p);
    assert_int_equal(p->mig_strategy, GS_MIG_MIXED);
    assert_string_equal(p->driver_root, "/run/nvidia/driver");
    assert_string_equal(p->dev_root, "/");
    assert_int_equal(p->list_strategy, GS_LIST_ENVVAR | GS_LIST_VOLUME_MOUNTS);
    assert_string_equal(p->cdi_annotation_prefix, "cdi.k8s.io/");
    /* NVIDIA's CDI strategies, and an annotation prefix of one's own */
    parse_ok("flags:\n  plugin:\n    deviceListStrategy: [cdi-cri, cdi-annotations]\n"
             "    cdiAnnotationPrefix: example.com/\n", p);
    assert_int_equal(p->list_strategy, GS_LIST_CDI_CRI | GS_LIST_CDI_ANNOTATIONS);
    assert_string_equal(p->cdi_annotation_prefix, "example.com/");

    /* NVIDIA: an empty nvidiaDevRoot means the driver root */
    parse_ok("flags:\n  nvidiaDriverRoot: /host\n  nvidiaDevRoot: \"\"\n", p);
    assert_string_equal(p->dev_root, "/host");
    /* booleans as the YAML 1.1 spellings people use */
    parse_ok("flags: {failOnInitError: no, plugin: {passDeviceSpecs: Yes}}\n", p);
    assert_false(p->fail_on_init_error);
    assert_true(p->pass_device_specs);
}

static void test_time_slicing_full(void **state) {
    (void)state;
    _cleanup_free_ struct gs_policy *p = new_policy();
    parse_ok("sharing:\n"
             "  timeSlicing:\n"
             "    renameByDefault: false\n"
             "    resources:\n"
             "      - name: nvidia.com/gpu\n"
             "        rename: example.com/shared-gpu\n"
             "        replicas: 2\n"
             "        devices: [\"0\", 1, GPU-B1028956-cfa2-0990-bf4a-5da9abb51763,\n"
             "                  MIG-3b6a2a4c-2a2b-5e0e-a3ad-7a2f1d0c9b11,\n"
             "                  MIG-GPU-B1028956-cfa2-0990-bf4a-5da9abb51763/3/0]\n"
             "      - name: gpu\n"
             "        replicas: 1024\n"
             "        devices: 3\n"
             "      - name: nvidia.com/mig-1g.10gb\n"
             "        replicas: 8\n"
             "        devices: all\n",
             p);
    assert_true(p->ts_present);
    assert_int_equal(p->n_ts_resources, 3);
    const struct gs_ts_resource *r = &p->ts_resources[0];
    assert_string_equal(r->name, "nvidia.com/gpu");
    assert_string_equal(r->rename, "example.com/shared-gpu");
    assert_int_equal(r->replicas, 2);
    assert_false(r->devices_all);
    assert_int_equal(r->devices_count, 0);
    assert_int_equal(r->n_devices, 5);
    assert_string_equal(r->devices[0].text, "0");
    assert_string_equal(r->devices[1].text, "1");
    assert_string_equal(r->devices[2].text, "GPU-b1028956-cfa2-0990-bf4a-5da9abb51763");
    assert_string_equal(r->devices[3].text, "MIG-3b6a2a4c-2a2b-5e0e-a3ad-7a2f1d0c9b11");
    assert_string_equal(r->devices[4].text, "MIG-GPU-b1028956-cfa2-0990-bf4a-5da9abb51763/3/0");
    r = &p->ts_resources[1];
    assert_string_equal(r->name, "nvidia.com/gpu"); /* a bare name gets NVIDIA's prefix */
    assert_int_equal(r->replicas, 1024);
    assert_false(r->devices_all);
    assert_int_equal(r->devices_count, 3);
    assert_int_equal(r->n_devices, 0);
    r = &p->ts_resources[2];
    assert_string_equal(r->name, "nvidia.com/mig-1g.10gb");
    assert_true(r->devices_all);
}

static void test_gpuslice_rules(void **state) {
    (void)state;
    _cleanup_free_ struct gs_policy *p = new_policy();
    parse_ok("flags:\n"
             "  migStrategy: single\n"
             "gpuslice:\n"
             "  gpus:\n"
             "    - index: \" 0 , 2-4,63\"\n"
             "      mode: time-slicing\n"
             "      replicas: 3\n"
             "      resourceName: example.com/ts\n"
             "    - index: [5, 7]\n"
             "      mode: mig\n"
             "    - uuid: GPU-B1028956-CFA2-0990-BF4A-5DA9ABB51763\n"
             "      mode: disabled\n"
             "    - model: \"NVIDIA H100*\"\n"
             "      mode: whole\n"
             "      resourceName: h100\n"
             "    - index: 8\n"
             "      mode: whole\n"
             "    - index: \"0-63\"\n"
             "      mode: whole\n",
             p);
    assert_int_equal(p->n_rules, 6);
    const struct gs_gpu_rule *r = p->rules;
    assert_int_equal(r[0].kind, GS_SEL_INDEX);
    assert_int_equal(r[0].index_mask, (1ULL << 0) | (1ULL << 2) | (1ULL << 3) | (1ULL << 4) | (1ULL << 63));
    assert_int_equal(r[0].mode, GS_MODE_TIME_SLICING);
    assert_int_equal(r[0].replicas, 3);
    assert_string_equal(r[0].resource, "example.com/ts");
    assert_int_equal(r[0].line, 5);
    assert_int_equal(r[1].index_mask, (1ULL << 5) | (1ULL << 7));
    assert_int_equal(r[1].mode, GS_MODE_MIG);
    assert_int_equal(r[1].replicas, 0);
    assert_string_equal(r[1].resource, "");
    assert_int_equal(r[1].line, 9);
    assert_int_equal(r[2].kind, GS_SEL_UUID);
    assert_string_equal(r[2].pattern, "GPU-b1028956-cfa2-0990-bf4a-5da9abb51763"); /* as NVML prints it */
    assert_int_equal(r[2].mode, GS_MODE_DISABLED);
    assert_int_equal(r[2].line, 11);
    assert_int_equal(r[3].kind, GS_SEL_MODEL);
    assert_string_equal(r[3].pattern, "NVIDIA H100*");
    assert_int_equal(r[3].mode, GS_MODE_WHOLE);
    assert_string_equal(r[3].resource, "nvidia.com/h100");
    assert_int_equal(r[4].index_mask, 1ULL << 8);
    assert_int_equal(r[5].index_mask, ~0ULL);
    assert_int_equal(r[5].line, 18);
}

/* NVIDIA's MPS form (the commented-out block of its README example, and the config of a v0.15
 * user's report): accepted unchanged, with NVIDIA's defaults. */
static void test_mps_nvidia_form(void **state) {
    (void)state;
    _cleanup_free_ struct gs_policy *p = new_policy();
    parse_ok("version: v1\n"
             "flags:\n"
             "  migStrategy: none\n"
             "  failOnInitError: true\n"
             "  nvidiaDriverRoot: \"/run/nvidia/driver/\"\n"
             "  mpsRoot: /run/nvidia/mps\n"
             "  plugin:\n"
             "    deviceListStrategy: envvar\n"
             "    deviceIDStrategy: uuid\n"
             "sharing:\n"
             "  mps:\n"
             "    renameByDefault: true\n"
             "    resources: [{name: nvidia.com/gpu, replicas: 4}]\n",
             p);
    assert_false(p->ts_present);
    assert_int_equal(p->n_ts_resources, 0);
    assert_true(p->mps_present);
    assert_true(p->mps_rename_by_default);
    assert_true(p->mps_fail_requests_gt_one); /* NVIDIA forces it to true for MPS unless set false */
    assert_string_equal(p->mps_root, "/run/nvidia/mps");
    assert_false(p->mps_exclusive_process);
    assert_int_equal(p->n_mps_resources, 1);
    const struct gs_ts_resource *r = &p->mps_resources[0];
    assert_string_equal(r->name, "nvidia.com/gpu");
    assert_string_equal(r->rename, "");
    assert_int_equal(r->replicas, 4);
    assert_int_equal(r->compute_per_replica, GS_COMPUTE_AUTO);
    assert_int_equal(r->pinned_per_replica, GS_MEMORY_AUTO);
    assert_int_equal(r->memory_per_replica, 0);
    assert_true(r->devices_all);
    assert_int_equal(p->n_warnings, 0);

    /* an explicit false is honoured (NVIDIA f14d3d12d) */
    parse_ok("sharing:\n  mps:\n    failRequestsGreaterThanOne: false\n    resources:\n"
             "      - {name: gpu, replicas: 2}\n",
             p);
    assert_true(p->mps_present);
    assert_false(p->mps_fail_requests_gt_one);
    assert_false(p->mps_rename_by_default);
    assert_string_equal(p->mps_resources[0].name, "nvidia.com/gpu");
}

static void test_mps_full(void **state) {
    (void)state;
    _cleanup_free_ struct gs_policy *p = new_policy();
    parse_ok("flags:\n"
             "  migStrategy: mixed\n"
             "  mpsRoot: /var/run/gpuslice/mps\n"
             "sharing:\n"
             "  mps:\n"
             "    renameByDefault: true\n"
             "    failRequestsGreaterThanOne: true\n"
             "    resources:\n"
             "      - name: nvidia.com/gpu\n"
             "        replicas: 4\n"
             "        computePerReplica: 25%\n"
             "        pinnedMemoryPerReplica: 8GiB\n"
             "        devices: [\"0\", GPU-B1028956-cfa2-0990-bf4a-5da9abb51763]\n"
             "      - name: nvidia.com/mig-3g.40gb\n"
             "        rename: example.com/mig-mps\n"
             "        replicas: 48\n"
             "        computePerReplica: 2\n"
             "        pinnedMemoryPerReplica: auto\n"
             "        devices: [MIG-3b6a2a4c-2a2b-5e0e-a3ad-7a2f1d0c9b11]\n"
             "      - name: example.com/gpu-mps\n"
             "        replicas: 3\n"
             "        computePerReplica: auto\n"
             "        pinnedMemoryPerReplica: 1MiB\n"
             "        devices: 2\n"
             "      - name: example.com/half\n"
             "        replicas: 2\n"
             "        computePerReplica: 50%\n"
             "gpuslice:\n"
             "  mps:\n"
             "    exclusiveProcess: true\n",
             p);
    assert_string_equal(p->mps_root, "/var/run/gpuslice/mps");
    assert_true(p->mps_exclusive_process);
    assert_true(p->mps_present);
    assert_int_equal(p->n_mps_resources, 4);
    const struct gs_ts_resource *r = p->mps_resources;
    assert_int_equal(r[0].replicas, 4);
    assert_int_equal(r[0].compute_per_replica, 25); /* 4 x 25% = 100%: fits exactly */
    assert_int_equal(r[0].pinned_per_replica, 8ULL << 30);
    assert_int_equal(r[0].n_devices, 2);
    assert_string_equal(r[0].devices[1].text, "GPU-b1028956-cfa2-0990-bf4a-5da9abb51763");
    assert_string_equal(r[1].name, "nvidia.com/mig-3g.40gb"); /* MPS on MIG instances is allowed */
    assert_string_equal(r[1].rename, "example.com/mig-mps");
    assert_int_equal(r[1].replicas, 48);
    assert_int_equal(r[1].compute_per_replica, 2); /* a bare number is a percentage */
    assert_int_equal(r[1].pinned_per_replica, GS_MEMORY_AUTO);
    assert_string_equal(r[1].devices[0].text, "MIG-3b6a2a4c-2a2b-5e0e-a3ad-7a2f1d0c9b11");
    assert_int_equal(r[2].compute_per_replica, GS_COMPUTE_AUTO);
    assert_int_equal(r[2].pinned_per_replica, 1ULL << 20);
    assert_int_equal(r[2].devices_count, 2);
    assert_int_equal(r[3].compute_per_replica, 50);
    assert_int_equal(r[3].pinned_per_replica, GS_MEMORY_AUTO);
    assert_true(r[3].devices_all);
    assert_false(p->ts_present);
}

static void test_mps_rules(void **state) {
    (void)state;
    _cleanup_free_ struct gs_policy *p = new_policy();
    parse_ok("sharing:\n"
             "  timeSlicing:\n"
             "    resources: [{name: nvidia.com/gpu, replicas: 2}]\n"
             "gpuslice:\n"
             "  gpus:\n"
             "    - index: \"0-1\"\n"
             "      mode: mps\n"
             "      replicas: 3\n"
             "      computePerReplica: 33%\n"
             "      pinnedMemoryPerReplica: 20Gi\n"
             "      resourceName: example.com/mps\n"
             "    - model: \"NVIDIA H200*\"\n"
             "      mode: mps\n"
             "      replicas: 48\n"
             "    - index: 2\n"
             "      mode: time-slicing\n"
             "      replicas: 4\n"
             "      memoryPerReplica: 10G\n", /* 10^10 bytes: a Kubernetes quantity's G */
             p);
    assert_true(p->ts_present); /* per-GPU rules mix the two modes */
    assert_false(p->mps_present);
    assert_int_equal(p->n_rules, 3);
    const struct gs_gpu_rule *r = p->rules;
    assert_int_equal(r[0].mode, GS_MODE_MPS);
    assert_int_equal(r[0].index_mask, 3);
    assert_int_equal(r[0].replicas, 3);
    assert_int_equal(r[0].compute_per_replica, 33);
    assert_int_equal(r[0].pinned_per_replica, 20ULL << 30);
    assert_int_equal(r[0].memory_per_replica, 0);
    assert_string_equal(r[0].resource, "example.com/mps");
    assert_int_equal(r[1].kind, GS_SEL_MODEL);
    assert_int_equal(r[1].mode, GS_MODE_MPS);
    assert_int_equal(r[1].replicas, 48);
    assert_int_equal(r[1].compute_per_replica, GS_COMPUTE_AUTO);
    assert_int_equal(r[1].pinned_per_replica, GS_MEMORY_AUTO);
    assert_int_equal(r[2].mode, GS_MODE_TIME_SLICING);
    assert_int_equal(r[2].replicas, 4);
    assert_int_equal(r[2].memory_per_replica, 10000000000ULL);
    assert_int_equal(r[2].compute_per_replica, 0);
    assert_int_equal(r[2].pinned_per_replica, 0);
    /* time-slicing keeps its own limit of 1024 replicas */
    parse_ok("gpuslice:\n  gpus:\n    - {index: 0, mode: time-slicing, replicas: 1024}\n", p);
    assert_int_equal(p->rules[0].replicas, 1024);
}

/* mode fractional: no replicas, limits or resource name (the units are the pods' own requests). */
static void test_fractional_rule(void **state) {
    (void)state;
    _cleanup_free_ struct gs_policy *p = new_policy();
    parse_ok("gpuslice:\n  gpus:\n    - model: \"NVIDIA H100*\"\n      mode: fractional\n"
             "    - {index: 1, mode: whole}\n", p);
    assert_int_equal(p->n_rules, 2);
    assert_int_equal(p->rules[0].mode, GS_MODE_FRACTIONAL);
    assert_int_equal(p->rules[0].kind, GS_SEL_MODEL);
    assert_int_equal(p->rules[0].replicas, 0);
    assert_string_equal(p->rules[0].resource, "");
    assert_int_equal(p->rules[1].mode, GS_MODE_WHOLE);
}

static void test_mps_percentages(void **state) {
    (void)state;
    _cleanup_free_ struct gs_policy *p = new_policy();
    static const struct {
        unsigned replicas;
        const char *text;
        unsigned percent;
    } ok[] = {
        { 2, "1%", 1 }, { 2, "50%", 50 }, { 2, "\"50\"", 50 }, { 3, "33%", 33 }, { 10, "10%", 10 },
        { 48, "2%", 2 }, { 20, "5", 5 }, { 2, "auto", GS_COMPUTE_AUTO },
    };
    for (size_t i = 0; i < GS_ARRAY_SIZE(ok); i++) {
        char text[256];
        snprintf(text, sizeof(text), "sharing:\n  mps:\n    resources:\n      - {name: gpu, replicas: %u, "
                 "computePerReplica: %s}\n", ok[i].replicas, ok[i].text);
        parse_ok(text, p);
        assert_int_equal(p->mps_resources[0].compute_per_replica, ok[i].percent);
        snprintf(text, sizeof(text), "gpuslice:\n  gpus:\n    - {index: 0, mode: mps, replicas: %u, "
                 "computePerReplica: %s}\n", ok[i].replicas, ok[i].text);
        parse_ok(text, p);
        assert_int_equal(p->rules[0].compute_per_replica, ok[i].percent);
    }
}

/* gpuslice.coexistence: both keys, each default refuse, each on its own. */
static void test_coexistence(void **state) {
    (void)state;
    _cleanup_free_ struct gs_policy *p = new_policy();
    static const struct {
        const char *text;
        enum gs_other_plugin plugin;
        enum gs_other_mig_manager mig;
    } cases[] = {
        { "version: v1\n", GS_OTHER_REFUSE, GS_OTHER_MIG_REFUSE },
        { "gpuslice:\n  coexistence:\n    otherMigManager: warn\n", GS_OTHER_REFUSE, GS_OTHER_MIG_WARN },
        { "gpuslice:\n  coexistence:\n    otherPlugin: share\n    otherMigManager: refuse\n", GS_OTHER_SHARE,
          GS_OTHER_MIG_REFUSE },
        { "gpuslice:\n  coexistence:\n    otherPlugin: warn\n", GS_OTHER_WARN, GS_OTHER_MIG_REFUSE },
    };
    for (size_t i = 0; i < GS_ARRAY_SIZE(cases); i++) {
        parse_ok(cases[i].text, p);
        assert_int_equal(p->other_plugin, cases[i].plugin);
        assert_int_equal(p->other_mig_manager, cases[i].mig);
    }
}

/* gpuslice.dra.gpus: which GPUs the DRA driver serves (the device plugins the rest). */
static void test_dra_gpus(void **state) {
    (void)state;
    _cleanup_free_ struct gs_policy *p = new_policy();
    parse_ok("version: v1\n", p);
    assert_int_equal(p->dra_gpus, GS_DRA_UNSET);
    parse_ok("gpuslice:\n  dra:\n    gpus: all\n", p);
    assert_int_equal(p->dra_gpus, GS_DRA_ALL);
    parse_ok("gpuslice:\n  dra:\n    gpus: none\n", p);
    assert_int_equal(p->dra_gpus, GS_DRA_NONE);
    parse_ok("gpuslice:\n  dra:\n    gpus: [\"0\", \"GPU-00000001-0000-0000-0000-00000000000A\"]\n", p);
    assert_int_equal(p->dra_gpus, GS_DRA_LIST);
    assert_int_equal(p->n_dra_devices, 2);
    assert_string_equal(p->dra_devices[0].text, "0");
    assert_string_equal(p->dra_devices[1].text, "GPU-00000001-0000-0000-0000-00000000000a"); /* NVML's case */
    static const struct {
        const char *text, *want;
    } bad[] = {
        { "gpuslice:\n  dra:\n    gpus: some\n",
          "t.yaml:3:11: gpuslice.dra.gpus: 'some' is not all, none or a list of GPU indices and UUIDs" },
        { "gpuslice:\n  dra:\n    gpus: [\"0\", \"0\"]\n", "t.yaml:3:17: gpuslice.dra.gpus[1]: GPU '0' is listed twice" },
        { "gpuslice:\n  dra:\n    gpus: [\"64\"]\n",
          "t.yaml:3:12: gpuslice.dra.gpus[0]: invalid device '64'; expected a GPU index in 0..63, a GPU UUID (GPU-...) "
          "or a MIG UUID (MIG-...)" },
        { "gpuslice:\n  dra:\n    gpus: [\"MIG-00000000-0000-0000-0000-000000000000\"]\n",
          "t.yaml:3:12: gpuslice.dra.gpus[0]: a MIG device cannot be given to DRA alone; name its GPU" },
        { "gpuslice:\n  dra:\n    devices: all\n", NULL },
    };
    for (size_t i = 0; i < GS_ARRAY_SIZE(bad); i++) {
        char err[512] = "";
        assert_int_equal(parse(bad[i].text, p, err, sizeof(err)), -EINVAL);
        if (bad[i].want)
            assert_string_equal(err, bad[i].want);
        else
            assert_non_null(strstr(err, "gpuslice.dra"));
    }
}

static void test_health(void **state) {
    (void)state;
    _cleanup_free_ struct gs_policy *p = new_policy();
    parse_ok("gpuslice:\n  health:\n    ignoredXids: [43, 0, 65535]\n    recoveryQuietPeriod: 90s\n", p);
    assert_int_equal(p->n_ignored_xids, 3);
    assert_int_equal(p->ignored_xids[0], 43);
    assert_int_equal(p->ignored_xids[2], 65535);
    assert_int_equal(p->recovery_quiet_s, 90);
    assert_true(gs_policy_xid_ignored(p, 43));
    assert_true(gs_policy_xid_ignored(p, 0));
    assert_true(gs_policy_xid_ignored(p, 65535));
    assert_false(gs_policy_xid_ignored(p, 13)); /* the list replaces the default one */
    assert_false(gs_policy_xid_ignored(p, 79));

    static const struct {
        const char *text;
        unsigned seconds;
    } durations[] = {
        { "0", 0 }, { "300", 300 }, { "\"45\"", 45 }, { "0s", 0 }, { "5m", 300 }, { "1h", 3600 },
        { "168h", 604800 }, { "604800s", 604800 }, { "10080m", 604800 },
    };
    for (size_t i = 0; i < GS_ARRAY_SIZE(durations); i++) {
        char text[128];
        snprintf(text, sizeof(text), "gpuslice:\n  health:\n    recoveryQuietPeriod: %s\n", durations[i].text);
        parse_ok(text, p);
        assert_int_equal(p->recovery_quiet_s, durations[i].seconds);
        assert_default_xids(p);
    }

    /* an empty list: no Xid is ignored */
    parse_ok("gpuslice:\n  health:\n    ignoredXids: []\n", p);
    assert_int_equal(p->n_ignored_xids, 0);
    assert_false(gs_policy_xid_ignored(p, 13));
    assert_int_equal(p->recovery_quiet_s, 300);
}

static void test_xid_ignored_defaults(void **state) {
    (void)state;
    struct gs_policy *p = new_policy();
    gs_policy_init(p);
    static const unsigned long long ignored[] = { 13, 31, 43, 45, 68, 109 };
    for (size_t i = 0; i < GS_ARRAY_SIZE(ignored); i++)
        assert_true(gs_policy_xid_ignored(p, ignored[i]));
    static const unsigned long long critical[] = { 0, 48, 63, 64, 74, 79, 94, 95, 119, 1ULL << 40 };
    for (size_t i = 0; i < GS_ARRAY_SIZE(critical); i++)
        assert_false(gs_policy_xid_ignored(p, critical[i]));
    free(p);
}

static void test_warnings(void **state) {
    (void)state;
    _cleanup_free_ struct gs_policy *p = new_policy();
    parse_ok("flags:\n"
             "  plugin:\n"
             "    cdiAnnotationPrefix: cdi.k8s.io/\n"
             "    nvidiaCTKPath: /usr/bin/nvidia-ctk\n"
             "    containerDriverRoot: /driver-root\n"
             "resources:\n"
             "  gpus:\n"
             "    - pattern: \"*\"\n"
             "      name: gpu\n"
             "  mig:\n"
             "    - {pattern: 1g.10gb, name: mig-small}\n"
             "imex:\n"
             "  channelIDs: [0, 1]\n"
             "  required: true\n",
             p);
    assert_int_equal(p->n_warnings, 3);
    assert_string_equal(p->warnings[0],
                        "flags.plugin.nvidiaCTKPath: not used by gpuslice (it writes its CDI spec itself); ignored");
    assert_string_equal(p->warnings[1], "resources: renaming is not supported; ignored");
    assert_string_equal(p->warnings[2], "imex: IMEX channels are not supported by this version yet; ignored");
    assert_string_equal(p->container_driver_root, "/driver-root"); /* where the agent reads the driver's files */

    /* false is what NVIDIA does anyway: no warning; true is a feature gpuslice lacks */
    parse_ok("flags:\n  gdsEnabled: false\n  mofedEnabled: true\n  deviceDiscoveryStrategy: tegra\n", p);
    assert_int_equal(p->n_warnings, 2);
    assert_true(has_warning(p, "flags.mofedEnabled: not supported by this version yet; ignored"));
    assert_true(has_warning(p, "flags.deviceDiscoveryStrategy: tegra is not supported; gpuslice finds GPUs "
                               "through NVML"));

    /* more than fit: the last line says so */
    parse_ok("flags:\n"
             "  gdsEnabled: true\n  mofedEnabled: true\n  gdrcopyEnabled: true\n"
             "  deviceDiscoveryStrategy: tegra\n"
             "  plugin:\n"
             "    cdiAnnotationPrefix: x.io/\n    nvidiaCTKPath: x\n    containerDriverRoot: /x\n"
             "    cdiFeatureFlags: x\n    kubeletSocket: /var/lib/kubelet/device-plugins/kubelet.sock\n"
             "resources: {gpus: []}\n"
             "imex: {}\n",
             p);
    assert_int_equal(p->n_warnings, 8);
    assert_string_equal(p->warnings[0], "flags.gdrcopyEnabled: not supported by this version yet; ignored");
    assert_non_null(strstr(p->warnings[7], "more ignored settings than can be listed"));
    for (unsigned i = 0; i < p->n_warnings; i++)
        assert_null(strchr(p->warnings[i], '\n'));

    /* gfd settings configure NVIDIA's GFD from the same file: no warning */
    parse_ok("flags:\n  gfd: {oneshot: true, sleepInterval: 60s}\n", p);
    assert_int_equal(p->n_warnings, 0);
}

static void test_crlf_bom_flow(void **state) {
    (void)state;
    _cleanup_free_ struct gs_policy *p = new_policy();
    parse_ok("\xEF\xBB\xBFversion: v1\r\nsharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, "
             "replicas: \"3\"}]}}\r\n",
             p);
    assert_int_equal(p->ts_resources[0].replicas, 3);
    /* JSON is YAML too, and NVIDIA's plugin takes JSON config files */
    parse_ok("{\"version\": \"v1\", \"flags\": {\"migStrategy\": \"mixed\"}}", p);
    assert_int_equal(p->mig_strategy, GS_MIG_MIXED);
}

/* ---- bad inputs ---- */

#define TS "sharing:\n  timeSlicing:\n    resources:\n"
#define RULES "gpuslice:\n  gpus:\n"
#define MPS "sharing:\n  mps:\n    resources:\n"
#define MPS_GPU MPS "      - name: nvidia.com/gpu\n"

static const struct bad_case bad_cases[] = {
    /* top level and flags */
    { "unknown top-level key", "version: v1\nsharin:\n  timeSlicing: {}\n", "t.yaml:2:1: sharin: ",
      { "unknown key 'sharin'", "allowed keys: version, flags, resources, sharing, imex, gpuslice" } },
    { "version v2", "version: v2\n", "t.yaml:1:10: version: ", { "unsupported version 'v2'", "expected v1" } },
    { "version a list", "version: [v1]\n", "t.yaml:1:10: version: ", { "expected a scalar" } },
    { "root a list", "- version: v1\n", "t.yaml:1:1: ", { "expected a mapping" } },
    { "renameByDefault under flags (NVIDIA #1433)", "flags:\n  renameByDefault: true\n",
      "t.yaml:2:3: flags.renameByDefault: ", { "unknown key 'renameByDefault'", "migStrategy", "plugin" } },
    { "migStrategy bad", "flags:\n  migStrategy: all\n", "t.yaml:2:16: flags.migStrategy: ",
      { "invalid value 'all'", "none, single, mixed" } },
    { "failOnInitError bad", "flags:\n  failOnInitError: maybe\n", "t.yaml:2:20: flags.failOnInitError: ",
      { "invalid value 'maybe'", "true or false" } },
    { "driver root relative", "flags:\n  nvidiaDriverRoot: run/nvidia/driver\n",
      "t.yaml:2:21: flags.nvidiaDriverRoot: ",
      { "'run/nvidia/driver' is not an absolute path" } },
    { "dev root relative", "flags:\n  nvidiaDevRoot: dev\n", "t.yaml:2:18: flags.nvidiaDevRoot: ",
      { "not an absolute path" } },
    { "discovery strategy bad", "flags:\n  deviceDiscoveryStrategy: wsl\n",
      "t.yaml:2:28: flags.deviceDiscoveryStrategy: ", { "invalid value 'wsl'", "auto, nvml, tegra" } },
    { "unknown plugin key", "flags:\n  plugin:\n    passDeviceSpec: true\n",
      "t.yaml:3:5: flags.plugin.passDeviceSpec: ", { "unknown key 'passDeviceSpec'", "passDeviceSpecs" } },
    { "list strategy unknown", "flags:\n  plugin:\n    deviceListStrategy: env\n",
      "t.yaml:3:25: flags.plugin.deviceListStrategy: ",
      { "invalid value 'env'", "envvar, volume-mounts, cdi-annotations, cdi-cri" } },
    { "cdiAnnotationPrefix without slash", "flags:\n  plugin:\n    cdiAnnotationPrefix: cdi.k8s.io\n",
      "t.yaml:3:26: flags.plugin.cdiAnnotationPrefix: ", { "'cdi.k8s.io' is not an annotation prefix", "cdi.k8s.io/" } },
    { "containerDriverRoot relative", "flags:\n  plugin:\n    containerDriverRoot: driver-root\n",
      "t.yaml:3:26: flags.plugin.containerDriverRoot: ", { "expected an absolute path" } },
    { "cdiAnnotationPrefix upper case", "flags:\n  plugin:\n    cdiAnnotationPrefix: CDI.io/\n",
      "t.yaml:3:26: flags.plugin.cdiAnnotationPrefix: ", { "'CDI.io/' is not an annotation prefix" } },
    { "list strategy empty list", "flags:\n  plugin:\n    deviceListStrategy: []\n",
      "t.yaml:3:25: flags.plugin.deviceListStrategy: ", { "at least one strategy" } },
    { "id strategy bad", "flags:\n  plugin:\n    deviceIDStrategy: serial\n",
      "t.yaml:3:23: flags.plugin.deviceIDStrategy: ", { "invalid value 'serial'", "uuid, index" } },
    { "alloc policy bad", "flags:\n  plugin:\n    sharedDevicesAllocationPolicy: spread\n",
      "t.yaml:3:36: flags.plugin.sharedDevicesAllocationPolicy: ", { "distributed, packed" } },
    { "cdiAnnotationPrefix a list", "flags:\n  plugin:\n    cdiAnnotationPrefix: [a]\n",
      "t.yaml:3:26: flags.plugin.cdiAnnotationPrefix: ", { "expected a scalar" } },
    { "gfd unknown key", "flags:\n  gfd:\n    oneShot: true\n", "t.yaml:3:5: flags.gfd.oneShot: ",
      { "unknown key 'oneShot'", "oneshot, noTimestamp" } },
    { "flags a list", "flags:\n  - migStrategy: none\n", "t.yaml:2:3: flags: ",
      { "expected a mapping, got a sequence" } },
    /* resources, imex */
    { "resources entry without pattern", "resources:\n  gpus:\n    - name: gpu\n", "t.yaml:3:7: resources.gpus[0]: ",
      { "missing required key 'pattern'" } },
    { "resources unknown key", "resources:\n  gpu: []\n", "t.yaml:2:3: resources.gpu: ",
      { "unknown key 'gpu'", "gpus, mig" } },
    { "imex channel negative", "imex:\n  channelIDs: [0, -1]\n", "t.yaml:2:19: imex.channelIDs[1]: ",
      { "expected an integer", "'-1'" } },
    /* sharing */
    { "unknown sharing key", "sharing:\n  timeslicing: {}\n", "t.yaml:2:3: sharing.timeslicing: ",
      { "unknown key 'timeslicing'", "timeSlicing, mps" } },
    { "timeSlicing without resources", "sharing:\n  timeSlicing:\n    renameByDefault: true\n",
      "t.yaml:3:5: sharing.timeSlicing: ", { "missing required key 'resources'" } },
    { "timeSlicing empty resources", "sharing:\n  timeSlicing:\n    resources: []\n",
      "t.yaml:3:16: sharing.timeSlicing.resources: ", { "at least one resource" } },
    { "replicas 1 (NVIDIA's message)", TS "      - name: nvidia.com/gpu\n        replicas: 1\n",
      "t.yaml:5:19: sharing.timeSlicing.resources[0].replicas: ", { "number of replicas must be >= 2 (got 1)" } },
    { "replicas over 1024", TS "      - name: nvidia.com/gpu\n        replicas: 1025\n",
      "t.yaml:5:19: sharing.timeSlicing.resources[0].replicas: ", { "must be <= 1024 (got 1025)" } },
    { "replicas missing", TS "      - name: nvidia.com/gpu\n", "t.yaml:4:9: sharing.timeSlicing.resources[0]: ",
      { "missing required key 'replicas'" } },
    { "replicas text", TS "      - name: nvidia.com/gpu\n        replicas: four\n",
      "t.yaml:5:19: sharing.timeSlicing.resources[0].replicas: ",
      { "expected a number of replicas in 2..1024", "'four'" } },
    { "replicas huge", TS "      - name: nvidia.com/gpu\n        replicas: 99999999999999999999999\n",
      "t.yaml:5:19: sharing.timeSlicing.resources[0].replicas: ", { "must be <= 1024 (got 99999999999999999999999)" } },
    { "replicas leading zero", TS "      - name: nvidia.com/gpu\n        replicas: 04\n",
      "t.yaml:5:19: sharing.timeSlicing.resources[0].replicas: ", { "expected a number of replicas", "'04'" } },
    { "replicas empty", TS "      - name: nvidia.com/gpu\n        replicas:\n",
      "t.yaml:5:18: sharing.timeSlicing.resources[0].replicas: ", { "missing value" } },
    { "name missing", TS "      - replicas: 2\n", "t.yaml:4:9: sharing.timeSlicing.resources[0]: ",
      { "missing required key 'name'" } },
    { "name uppercase domain", TS "      - name: NVIDIA.com/gpu\n        replicas: 2\n",
      "t.yaml:4:15: sharing.timeSlicing.resources[0].name: ",
      { "invalid resource name 'NVIDIA.com/gpu'", "nvidia.com/gpu" } },
    { "name with space", TS "      - name: nvidia.com/my gpu\n        replicas: 2\n",
      "t.yaml:4:15: sharing.timeSlicing.resources[0].name: ", { "invalid resource name" } },
    { "name two slashes", TS "      - name: a.com/b/c\n        replicas: 2\n",
      "t.yaml:4:15: sharing.timeSlicing.resources[0].name: ", { "invalid resource name 'a.com/b/c'" } },
    { "name ends with dash", TS "      - name: nvidia.com/gpu-\n        replicas: 2\n",
      "t.yaml:4:15: sharing.timeSlicing.resources[0].name: ", { "invalid resource name" } },
    { "name too long", TS "      - name: nvidia.com/abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabc\n"
                          "        replicas: 2\n",
      "t.yaml:4:15: sharing.timeSlicing.resources[0].name: ", { "longer than 63 characters" } },
    { "name kubernetes.io", TS "      - name: kubernetes.io/gpu\n        replicas: 2\n",
      "t.yaml:4:15: sharing.timeSlicing.resources[0].name: ", { "kubernetes.io domain is reserved" } },
    { ".shared suffix too long", "sharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
                                 "      - name: nvidia.com/abcdefghijabcdefghijabcdefghijabcdefghijabcdefgh\n"
                                 "        replicas: 2\n",
      "t.yaml:5:15: sharing.timeSlicing.resources[0].name: ", { "renameByDefault", ".shared", "give 'rename'" } },
    { "rename invalid", TS "      - name: nvidia.com/gpu\n        rename: Bad_Name/x\n        replicas: 2\n",
      "t.yaml:5:17: sharing.timeSlicing.resources[0].rename: ", { "invalid resource name 'Bad_Name/x'" } },
    { "unknown resource key", TS "      - name: nvidia.com/gpu\n        replica: 2\n",
      "t.yaml:5:9: sharing.timeSlicing.resources[0].replica: ",
      { "unknown key 'replica'", "name, rename, devices, replicas" } },
    { "devices some", TS "      - name: nvidia.com/gpu\n        replicas: 2\n        devices: some\n",
      "t.yaml:6:18: sharing.timeSlicing.resources[0].devices: ", { "invalid value 'some'", "\"all\"" } },
    { "devices count 0", TS "      - name: nvidia.com/gpu\n        replicas: 2\n        devices: 0\n",
      "t.yaml:6:18: sharing.timeSlicing.resources[0].devices: ", { "0 is out of range 1..64" } },
    { "devices bad uuid", TS "      - name: nvidia.com/gpu\n        replicas: 2\n        devices: [\"0\", GPU-1234]\n",
      "t.yaml:6:24: sharing.timeSlicing.resources[0].devices[1]: ", { "invalid device 'GPU-1234'", "GPU UUID" } },
    { "devices MIG legacy UUID without CI", TS "      - name: nvidia.com/gpu\n        replicas: 2\n"
                                               "        devices: [MIG-GPU-b1028956-cfa2-0990-bf4a-5da9abb51763/3/]\n",
      "t.yaml:6:19: sharing.timeSlicing.resources[0].devices[0]: ", { "invalid device", "MIG UUID" } },
    { "devices UUID with double dash", TS "      - name: nvidia.com/gpu\n        replicas: 2\n"
                                          "        devices: [GPU-b1028956--cfa2-0990-bf4a-5da9abb51763]\n",
      "t.yaml:6:19: sharing.timeSlicing.resources[0].devices[0]: ", { "invalid device" } },
    { "devices MIG index", TS "      - name: nvidia.com/gpu\n        replicas: 2\n        devices: [\"0:1\"]\n",
      "t.yaml:6:19: sharing.timeSlicing.resources[0].devices[0]: ", { "MIG indices", "'0:1'", "MIG-" } },
    { "devices index 64", TS "      - name: nvidia.com/gpu\n        replicas: 2\n        devices: [\"64\"]\n",
      "t.yaml:6:19: sharing.timeSlicing.resources[0].devices[0]: ", { "invalid device '64'", "0..63" } },
    { "devices duplicate", TS "      - name: nvidia.com/gpu\n        replicas: 2\n        devices: [\"1\", 1]\n",
      "t.yaml:6:24: sharing.timeSlicing.resources[0].devices[1]: ", { "device '1' is listed twice" } },
    { "devices empty list", TS "      - name: nvidia.com/gpu\n        replicas: 2\n        devices: []\n",
      "t.yaml:6:18: sharing.timeSlicing.resources[0].devices: ", { "at least one device" } },
    /* gpuslice rules */
    { "rule without selector", RULES "    - mode: whole\n", "t.yaml:3:7: gpuslice.gpus[0]: ",
      { "missing selector", "index, uuid, model" } },
    { "rule with two selectors", RULES "    - index: 0\n      uuid: GPU-b1028956-cfa2-0990-bf4a-5da9abb51763\n"
                                       "      mode: whole\n",
      "t.yaml:4:13: gpuslice.gpus[0].uuid: ", { "exactly one selector", "'index' and 'uuid'" } },
    { "rule without mode", RULES "    - index: 0\n", "t.yaml:3:7: gpuslice.gpus[0]: ",
      { "missing required key 'mode'", "whole, time-slicing, mig, disabled" } },
    { "rule bad mode", RULES "    - index: 0\n      mode: shared\n", "t.yaml:4:13: gpuslice.gpus[0].mode: ",
      { "invalid value 'shared'", "whole, time-slicing, mig, disabled" } },
    { "time-slicing without replicas", RULES "    - index: 0\n      mode: time-slicing\n",
      "t.yaml:3:7: gpuslice.gpus[0]: ", { "missing required key 'replicas'", "time-slicing" } },
    { "replicas with whole", RULES "    - index: 0\n      mode: whole\n      replicas: 4\n",
      "t.yaml:5:17: gpuslice.gpus[0].replicas: ", { "only allowed with mode time-slicing", "mode is whole" } },
    { "rule replicas 1", RULES "    - index: 0\n      mode: time-slicing\n      replicas: 1\n",
      "t.yaml:5:17: gpuslice.gpus[0].replicas: ", { "number of replicas must be >= 2" } },
    { "resourceName with mig", "flags:\n  migStrategy: mixed\n" RULES "    - index: 0\n      mode: mig\n"
                               "      resourceName: nvidia.com/mig\n",
      "t.yaml:7:21: gpuslice.gpus[0].resourceName: ", { "not allowed with mode mig" } },
    { "resourceName with disabled", RULES "    - index: 0\n      mode: disabled\n      resourceName: nvidia.com/x\n",
      "t.yaml:5:21: gpuslice.gpus[0].resourceName: ", { "not allowed with mode disabled" } },
    { "mig with migStrategy none", RULES "    - index: 0\n      mode: mig\n", "t.yaml:4:13: gpuslice.gpus[0].mode: ",
      { "needs flags.migStrategy single or mixed" } },
    { "index descending", RULES "    - index: \"3-1\"\n      mode: whole\n", "t.yaml:3:14: gpuslice.gpus[0].index: ",
      { "range 3-1 is not ascending" } },
    { "index 64", RULES "    - index: \"0,64\"\n      mode: whole\n", "t.yaml:3:14: gpuslice.gpus[0].index: ",
      { "0..63", "'0,64'" } },
    { "index duplicate", RULES "    - index: 0-3,2\n      mode: whole\n", "t.yaml:3:14: gpuslice.gpus[0].index: ",
      { "GPU index 2 is listed twice" } },
    { "index syntax", RULES "    - index: \"1,,2\"\n      mode: whole\n", "t.yaml:3:14: gpuslice.gpus[0].index: ",
      { "invalid GPU index list '1,,2'", "\"0-3,5\"" } },
    { "index leading zero", RULES "    - index: \"01\"\n      mode: whole\n", "t.yaml:3:14: gpuslice.gpus[0].index: ",
      { "invalid GPU index list" } },
    { "index list item 64", RULES "    - index: [1, 64]\n      mode: whole\n",
      "t.yaml:3:18: gpuslice.gpus[0].index[1]: ", { "64 is out of range 0..63" } },
    { "index list duplicate", RULES "    - index: [1, 1]\n      mode: whole\n",
      "t.yaml:3:18: gpuslice.gpus[0].index[1]: ", { "GPU index 1 is listed twice" } },
    { "index list empty", RULES "    - index: []\n      mode: whole\n", "t.yaml:3:14: gpuslice.gpus[0].index: ",
      { "at least one GPU index" } },
    { "uuid without GPU-", RULES "    - uuid: b1028956-cfa2-0990-bf4a-5da9abb51763\n      mode: whole\n",
      "t.yaml:3:13: gpuslice.gpus[0].uuid: ", { "invalid GPU UUID", "GPU-" } },
    { "model empty", RULES "    - model: \"\"\n      mode: whole\n", "t.yaml:3:14: gpuslice.gpus[0].model: ",
      { "1 to 127 characters" } },
    { "rule unknown key", RULES "    - index: 0\n      mode: whole\n      replica: 2\n",
      "t.yaml:5:7: gpuslice.gpus[0].replica: ", { "unknown key 'replica'", "index, uuid, model, mode, replicas" } },
    { "rule a scalar", RULES "    - 0\n", "t.yaml:3:7: gpuslice.gpus[0]: ", { "expected a mapping, got a scalar" } },
    { "gpuslice unknown key", "gpuslice:\n  gpu: []\n", "t.yaml:2:3: gpuslice.gpu: ",
      { "allowed keys: gpus, health" } },
    /* health */
    { "xid too large", "gpuslice:\n  health:\n    ignoredXids: [13, 65536]\n",
      "t.yaml:3:23: gpuslice.health.ignoredXids[1]: ", { "65536 is out of range 0..65535" } },
    { "xid duplicate", "gpuslice:\n  health:\n    ignoredXids: [13, 31, 13]\n",
      "t.yaml:3:27: gpuslice.health.ignoredXids[2]: ", { "Xid 13 is listed twice" } },
    { "xids not a list", "gpuslice:\n  health:\n    ignoredXids: 13\n",
      "t.yaml:3:18: gpuslice.health.ignoredXids: ", { "expected a sequence, got a scalar" } },
    { "xids null", "gpuslice:\n  health:\n    ignoredXids:\n", "t.yaml:3:17: gpuslice.health.ignoredXids: ",
      { "expected a sequence, got an empty value" } },
    { "quiet period unit", "gpuslice:\n  health:\n    recoveryQuietPeriod: 5min\n",
      "t.yaml:3:26: gpuslice.health.recoveryQuietPeriod: ", { "invalid duration '5min'", "s, m or h" } },
    { "quiet period 8 days", "gpuslice:\n  health:\n    recoveryQuietPeriod: 169h\n",
      "t.yaml:3:26: gpuslice.health.recoveryQuietPeriod: ", { "longer than 7 days" } },
    { "quiet period huge", "gpuslice:\n  health:\n    recoveryQuietPeriod: 99999999999999999999999s\n",
      "t.yaml:3:26: gpuslice.health.recoveryQuietPeriod: ", { "longer than 7 days" } },
    { "quiet period negative", "gpuslice:\n  health:\n    recoveryQuietPeriod: -5s\n",
      "t.yaml:3:26: gpuslice.health.recoveryQuietPeriod: ", { "invalid duration" } },
    { "health unknown key", "gpuslice:\n  health:\n    ignoredXIDs: []\n", "t.yaml:3:5: gpuslice.health.ignoredXIDs: ",
      { "unknown key 'ignoredXIDs'", "ignoredXids, recoveryQuietPeriod" } },
    /* YAML-level */
    { "duplicate key", "flags:\n  migStrategy: none\n  migStrategy: mixed\n", "t.yaml:3:3: flags.migStrategy: ",
      { "duplicate key 'migStrategy'", "first at line 2, column 3" } },
    { "syntax error", "flags:\n  migStrategy: none\n plugin: {}\n", "t.yaml:3:2: ", { "syntax error" } },
    { "anchor", "flags: &f\n  migStrategy: none\n", "t.yaml:1:8: ", { "anchors and aliases are not supported" } },
    /* MPS, each with its whole message */
    { "mps replicas 49", MPS_GPU "        replicas: 49\n",
      "t.yaml:5:19: sharing.mps.resources[0].replicas: number of replicas must be <= 48 (got 49): an MPS server "
      "takes at most 48 clients per device" },
    { "mps replicas 1", MPS_GPU "        replicas: 1\n",
      "t.yaml:5:19: sharing.mps.resources[0].replicas: number of replicas must be >= 2 (got 1)" },
    { "mps replicas text", MPS_GPU "        replicas: many\n",
      "t.yaml:5:19: sharing.mps.resources[0].replicas: expected a number of replicas in 2..48, got 'many'" },
    { "mps replicas huge", MPS_GPU "        replicas: 1000000\n",
      "t.yaml:5:19: sharing.mps.resources[0].replicas: number of replicas must be <= 48 (got 1000000): an MPS "
      "server takes at most 48 clients per device" },
    { "mps replicas missing", MPS_GPU "        computePerReplica: 10%\n",
      "t.yaml:4:9: sharing.mps.resources[0]: missing required key 'replicas' (2..48)" },
    { "mps compute does not fit", MPS_GPU "        replicas: 4\n        computePerReplica: 30%\n",
      "t.yaml:6:28: sharing.mps.resources[0].computePerReplica: 4 replicas x 30% = 120% does not fit in one GPU "
      "(at most 100%)" },
    { "mps compute 48 x 3", MPS_GPU "        replicas: 48\n        computePerReplica: 3\n",
      "t.yaml:6:28: sharing.mps.resources[0].computePerReplica: 48 replicas x 3% = 144% does not fit in one GPU "
      "(at most 100%)" },
    { "mps compute 0%", MPS_GPU "        replicas: 2\n        computePerReplica: 0%\n",
      "t.yaml:6:28: sharing.mps.resources[0].computePerReplica: expected auto or a percentage from 1% to 100% such "
      "as 25%, got '0%'" },
    { "mps compute 101%", MPS_GPU "        replicas: 2\n        computePerReplica: 101%\n",
      "t.yaml:6:28: sharing.mps.resources[0].computePerReplica: expected auto or a percentage from 1% to 100% such "
      "as 25%, got '101%'" },
    { "mps compute fraction", MPS_GPU "        replicas: 2\n        computePerReplica: 12.5%\n",
      "t.yaml:6:28: sharing.mps.resources[0].computePerReplica: expected auto or a percentage from 1% to 100% such "
      "as 25%, got '12.5%'" },
    { "mps compute leading zero", MPS_GPU "        replicas: 2\n        computePerReplica: 025%\n",
      "t.yaml:6:28: sharing.mps.resources[0].computePerReplica: expected auto or a percentage from 1% to 100% such "
      "as 25%, got '025%'" },
    { "mps compute percent twice", MPS_GPU "        replicas: 2\n        computePerReplica: 25%%\n",
      "t.yaml:6:28: sharing.mps.resources[0].computePerReplica: expected auto or a percentage from 1% to 100% such "
      "as 25%, got '25%%'" },
    { "mps compute a list", MPS_GPU "        replicas: 2\n        computePerReplica: [25]\n",
      "t.yaml:6:28: sharing.mps.resources[0].computePerReplica: expected a scalar, got a sequence" },
    { "mps pinned too small", MPS_GPU "        replicas: 2\n        pinnedMemoryPerReplica: 4096\n",
      "t.yaml:6:33: sharing.mps.resources[0].pinnedMemoryPerReplica: "
      "expected auto or a size from 1Mi to 1Pi bytes such as 8Gi (a Kubernetes quantity: Gi is 2^30, G is 10^9), got '4096'" },
    { "mps pinned unit", MPS_GPU "        replicas: 2\n        pinnedMemoryPerReplica: 8 GiB\n",
      "t.yaml:6:33: sharing.mps.resources[0].pinnedMemoryPerReplica: "
      "expected auto or a size from 1Mi to 1Pi bytes such as 8Gi (a Kubernetes quantity: Gi is 2^30, G is 10^9), got '8 GiB'" },
    { "mps pinned fraction", MPS_GPU "        replicas: 2\n        pinnedMemoryPerReplica: 1048576.5\n",
      "t.yaml:6:33: sharing.mps.resources[0].pinnedMemoryPerReplica: "
      "expected auto or a size from 1Mi to 1Pi bytes such as 8Gi (a Kubernetes quantity: Gi is 2^30, G is 10^9), got '1048576.5'" },
    { "mps pinned K", MPS_GPU "        replicas: 2\n        pinnedMemoryPerReplica: 8192K\n",
      "t.yaml:6:33: sharing.mps.resources[0].pinnedMemoryPerReplica: "
      "expected auto or a size from 1Mi to 1Pi bytes such as 8Gi (a Kubernetes quantity: Gi is 2^30, G is 10^9), got '8192K'" },
    { "mps pinned empty", MPS_GPU "        replicas: 2\n        pinnedMemoryPerReplica:\n",
      "t.yaml:6:32: sharing.mps.resources[0].pinnedMemoryPerReplica: missing value" },
    { "mps memoryPerReplica bad", MPS_GPU "        replicas: 2\n        memoryPerReplica: lots\n",
      "t.yaml:6:27: sharing.mps.resources[0].memoryPerReplica: "
      "expected auto or a size from 1Mi to 1Pi bytes such as 8Gi (a Kubernetes quantity: Gi is 2^30, G is 10^9), got 'lots'" },
    { "mps unknown key", MPS_GPU "        replicas: 2\n        memoryPerGpu: 8GiB\n",
      "t.yaml:6:9: sharing.mps.resources[0].memoryPerGpu: unknown key 'memoryPerGpu'; allowed keys: name, "
      "rename, devices, replicas, computePerReplica, pinnedMemoryPerReplica, memoryPerReplica" },
    { "computePerReplica under timeSlicing", TS "      - name: nvidia.com/gpu\n        replicas: 2\n"
                                             "        computePerReplica: 50%\n",
      "t.yaml:6:9: sharing.timeSlicing.resources[0].computePerReplica: unknown key 'computePerReplica'; allowed "
      "keys: name, rename, devices, replicas, memoryPerReplica" },
    { "mps devices bad", MPS_GPU "        replicas: 2\n        devices: [MIG-1234]\n",
      "t.yaml:6:19: sharing.mps.resources[0].devices[0]: invalid device 'MIG-1234'; expected a GPU index in 0..63, "
      "a GPU UUID (GPU-...) or a MIG UUID (MIG-...)" },
    { "mps name missing", MPS "      - replicas: 2\n",
      "t.yaml:4:9: sharing.mps.resources[0]: missing required key 'name' (e.g. nvidia.com/gpu)" },
    { "mps without resources", "sharing:\n  mps:\n    renameByDefault: true\n",
      "t.yaml:3:5: sharing.mps: missing required key 'resources'" },
    { "mps empty resources", "sharing:\n  mps:\n    resources: []\n",
      "t.yaml:3:16: sharing.mps.resources: must list at least one resource" },
    { "mps unknown key", "sharing:\n  mps:\n    renameByDefualt: true\n    resources: [{name: gpu, replicas: 2}]\n",
      "t.yaml:3:5: sharing.mps.renameByDefualt: unknown key 'renameByDefualt'; allowed keys: renameByDefault, "
      "failRequestsGreaterThanOne, resources" },
    { "mps failRequests bad", "sharing:\n  mps:\n    failRequestsGreaterThanOne: sometimes\n"
                              "    resources: [{name: gpu, replicas: 2}]\n",
      "t.yaml:3:33: sharing.mps.failRequestsGreaterThanOne: invalid value 'sometimes'; expected true or false (or "
      "yes/no)" },
    { "mps with timeSlicing", "sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2}]\n"
                              "  mps:\n    resources: [{name: gpu, replicas: 2}]\n",
      "t.yaml:5:5: sharing.mps: cannot be combined with sharing.timeSlicing; choose one, or choose per GPU with "
      "gpuslice.gpus rules (mode: time-slicing or mps)" },
    { "mpsRoot relative", "flags:\n  mpsRoot: run/nvidia/mps\n",
      "t.yaml:2:12: flags.mpsRoot: 'run/nvidia/mps' is not an absolute path" },
    { "mpsRoot a list", "flags:\n  mpsRoot: [/run]\n",
      "t.yaml:2:12: flags.mpsRoot: expected a scalar, got a sequence" },
    { "gpuslice.mps unknown key", "gpuslice:\n  mps:\n    exclusive: true\n",
      "t.yaml:3:5: gpuslice.mps.exclusive: unknown key 'exclusive'; allowed keys: exclusiveProcess" },
    { "exclusiveProcess bad", "gpuslice:\n  mps:\n    exclusiveProcess: EXCLUSIVE_PROCESS\n",
      "t.yaml:3:23: gpuslice.mps.exclusiveProcess: invalid value 'EXCLUSIVE_PROCESS'; expected true or false (or "
      "yes/no)" },
    { "otherPlugin bad", "gpuslice:\n  coexistence:\n    otherPlugin: yield\n",
      "t.yaml:3:18: gpuslice.coexistence.otherPlugin: invalid value 'yield'; expected one of: refuse, warn, share" },
    { "coexistence unknown key", "gpuslice:\n  coexistence:\n    other: warn\n",
      "t.yaml:3:5: gpuslice.coexistence.other: unknown key 'other'; allowed keys: otherPlugin, otherMigManager" },
    { "otherMigManager bad", "gpuslice:\n  coexistence:\n    otherMigManager: share\n",
      "t.yaml:3:22: gpuslice.coexistence.otherMigManager: invalid value 'share'; expected one of: refuse, warn" },
    { "labels nvidiaNames bad", "gpuslice:\n  labels:\n    nvidiaNames: both\n",
      "t.yaml:3:18: gpuslice.labels.nvidiaNames: invalid value 'both'; expected true or false (or yes/no)" },
    /* gpuslice.gpus rules with mode mps */
    { "rule mps without replicas", RULES "    - index: 0\n      mode: mps\n",
      "t.yaml:3:7: gpuslice.gpus[0]: missing required key 'replicas' (2..48) for mode mps" },
    { "rule mps replicas 49", RULES "    - index: 0\n      mode: mps\n      replicas: 49\n",
      "t.yaml:5:17: gpuslice.gpus[0].replicas: number of replicas must be <= 48 (got 49): an MPS server takes at "
      "most 48 clients per device" },
    { "rule mps compute does not fit", RULES "    - index: 0\n      mode: mps\n      replicas: 3\n"
                                       "      computePerReplica: 34%\n",
      "t.yaml:6:26: gpuslice.gpus[0].computePerReplica: 3 replicas x 34% = 102% does not fit in one GPU (at most "
      "100%)" },
    { "rule mps pinned bad", RULES "    - index: 0\n      mode: mps\n      replicas: 3\n"
                             "      pinnedMemoryPerReplica: half\n",
      "t.yaml:6:31: gpuslice.gpus[0].pinnedMemoryPerReplica: "
      "expected auto or a size from 1Mi to 1Pi bytes such as 8Gi (a Kubernetes quantity: Gi is 2^30, G is 10^9), got 'half'" },
    { "rule computePerReplica with time-slicing", RULES "    - index: 0\n      mode: time-slicing\n      replicas: 2\n"
                                                  "      computePerReplica: 50%\n",
      "t.yaml:6:26: gpuslice.gpus[0].computePerReplica: only allowed with mode mps (mode is time-slicing)" },
    { "rule pinnedMemoryPerReplica with whole", RULES "    - index: 0\n      mode: whole\n"
                                                "      pinnedMemoryPerReplica: 1GiB\n",
      "t.yaml:5:31: gpuslice.gpus[0].pinnedMemoryPerReplica: only allowed with mode mps (mode is whole)" },
    { "rule memoryPerReplica with whole", RULES "    - index: 0\n      mode: whole\n"
                                          "      memoryPerReplica: 1GiB\n",
      "t.yaml:5:25: gpuslice.gpus[0].memoryPerReplica: only allowed with mode time-slicing or mps (mode is whole)" },
    { "rule replicas with disabled", RULES "    - index: 0\n      mode: disabled\n      replicas: 2\n",
      "t.yaml:5:17: gpuslice.gpus[0].replicas: only allowed with mode time-slicing or mps (mode is disabled)" },
    { "rule mode mpss", RULES "    - index: 0\n      mode: mpss\n",
      "t.yaml:4:13: gpuslice.gpus[0].mode: invalid value 'mpss'; expected one of: whole, time-slicing, mig, "
      "disabled, mps, fractional" },
    { "rule without mode lists mps", RULES "    - index: 0\n",
      "t.yaml:3:7: gpuslice.gpus[0]: missing required key 'mode'; expected one of: whole, time-slicing, mig, "
      "disabled, mps, fractional" },
    { "rule fractional with replicas", RULES "    - index: 0\n      mode: fractional\n      replicas: 2\n",
      "t.yaml:5:17: gpuslice.gpus[0].replicas: only allowed with mode time-slicing or mps (mode is fractional)" },
    { "rule fractional with memoryPerReplica", RULES "    - index: 0\n      mode: fractional\n"
                                               "      memoryPerReplica: 1GiB\n",
      "t.yaml:5:25: gpuslice.gpus[0].memoryPerReplica: only allowed with mode time-slicing or mps (mode is "
      "fractional)" },
    { "rule fractional with resourceName", RULES "    - index: 0\n      mode: fractional\n"
                                           "      resourceName: nvidia.com/frac\n",
      "t.yaml:5:21: gpuslice.gpus[0].resourceName: not allowed with mode fractional: its resources are "
      "gpuslice.io/gpu-memory and gpuslice.io/gpu-compute, the names pods and the scheduler extender use" },
};

static void test_bad(void **state) {
    const struct bad_case *c = *state;
    _cleanup_free_ struct gs_policy *p = new_policy();
    _cleanup_free_ struct gs_policy *before = new_policy();
    char err[1024] = "";

    int r = parse(c->yaml, p, err, sizeof(err));
    check_bad_message(c, r, err, true);
    /* failed parses leave the output alone */
    assert_memory_equal(p, before, sizeof(*p));
}

/* Limits that need long inputs. */
static void test_bad_counts(void **state) {
    (void)state;
    _cleanup_free_ struct gs_policy *p = new_policy();
    _cleanup_free_ char *text = malloc(64 * 1024);
    assert_non_null(text);
    char err[1024];

    /* 65 rules */
    size_t n = (size_t)snprintf(text, 64 * 1024, "gpuslice:\n  gpus:\n");
    for (int i = 0; i < 65; i++)
        n += (size_t)snprintf(text + n, 64 * 1024 - n, "    - {index: %d, mode: whole}\n", i % 64);
    assert_int_equal(parse(text, p, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "t.yaml:3:5: gpuslice.gpus: lists 65 rules; at most 64 are supported");
    /* 64 are fine */
    n = (size_t)snprintf(text, 64 * 1024, "gpuslice:\n  gpus:\n");
    for (int i = 0; i < 64; i++)
        n += (size_t)snprintf(text + n, 64 * 1024 - n, "    - {index: %d, mode: whole}\n", i);
    parse_ok(text, p);
    assert_int_equal(p->n_rules, 64);
    assert_int_equal(p->rules[63].index_mask, 1ULL << 63);
    assert_int_equal(p->rules[63].line, 66);

    /* 65 Xids */
    n = (size_t)snprintf(text, 64 * 1024, "gpuslice:\n  health:\n    ignoredXids: [");
    for (int i = 0; i < 65; i++)
        n += (size_t)snprintf(text + n, 64 * 1024 - n, "%s%d", i ? ", " : "", i);
    snprintf(text + n, 64 * 1024 - n, "]\n");
    assert_int_equal(parse(text, p, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "t.yaml:3:18: gpuslice.health.ignoredXids: lists 65 Xids; at most 64 are supported");

    /* 17 time-slicing resources */
    n = (size_t)snprintf(text, 64 * 1024, "sharing:\n  timeSlicing:\n    resources:\n");
    for (int i = 0; i < 17; i++)
        n += (size_t)snprintf(text + n, 64 * 1024 - n, "      - {name: nvidia.com/gpu, replicas: 2}\n");
    assert_int_equal(parse(text, p, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "t.yaml:4:7: sharing.timeSlicing.resources: lists 17 resources; at most 16 are "
                             "supported");

    /* 65 devices */
    n = (size_t)snprintf(text, 64 * 1024, "sharing:\n  timeSlicing:\n    resources:\n"
                                          "      - name: nvidia.com/gpu\n        replicas: 2\n        devices: [");
    for (int i = 0; i < 65; i++)
        n += (size_t)snprintf(text + n, 64 * 1024 - n, "%s\"%d\"", i ? ", " : "", i);
    snprintf(text + n, 64 * 1024 - n, "]\n");
    assert_int_equal(parse(text, p, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "t.yaml:6:18: sharing.timeSlicing.resources[0].devices: lists 65 devices; at most 64 "
                             "are supported");

    /* 17 MPS resources; 16 are fine */
    n = (size_t)snprintf(text, 64 * 1024, "sharing:\n  mps:\n    resources:\n");
    for (int i = 0; i < 17; i++)
        n += (size_t)snprintf(text + n, 64 * 1024 - n, "      - {name: nvidia.com/gpu, replicas: 2}\n");
    assert_int_equal(parse(text, p, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "t.yaml:4:7: sharing.mps.resources: lists 17 resources; at most 16 are supported");
    text[strlen(text) - strlen("      - {name: nvidia.com/gpu, replicas: 2}\n")] = '\0';
    parse_ok(text, p);
    assert_int_equal(p->n_mps_resources, 16);
}

static void test_error_buffer_edge_cases(void **state) {
    (void)state;
    _cleanup_free_ struct gs_policy *p = new_policy();
    char small[12];
    memset(small, 'x', sizeof(small));
    assert_int_equal(parse("version: 2\n", p, small, sizeof(small)), -EINVAL);
    assert_string_equal(small, "t.yaml:1:10");
    assert_int_equal(parse("version: 2\n", p, NULL, 0), -EINVAL);
    /* user text with control characters never splits the line */
    char err[512];
    assert_int_equal(parse("flags:\n  \"mig\\nStrategy\": none\n", p, err, sizeof(err)), -EINVAL);
    assert_null(strchr(err, '\n'));
    assert_non_null(strstr(err, "unknown key 'mig?Strategy'"));
}

/* ---- files ---- */

static void test_load_errors(void **state) {
    (void)state;
    _cleanup_free_ struct gs_policy *p = new_policy();
    char err[512], want[600];
    assert_int_equal(gs_policy_load("/nonexistent-gpuslice-dir/policy.yaml", p, err, sizeof(err)), -ENOENT);
    assert_string_equal(err, "/nonexistent-gpuslice-dir/policy.yaml: No such file or directory");

    char path[] = "/tmp/gs-policy-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char text[] = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                        "      - name: nvidia.com/gpu\n        replicas: 1\n";
    assert_int_equal(write(fd, text, sizeof(text) - 1), (ssize_t)(sizeof(text) - 1));
    close(fd);
    int r = gs_policy_load(path, p, err, sizeof(err));
    unlink(path);
    assert_int_equal(r, -EINVAL);
    snprintf(want, sizeof(want),
             "%s:6:19: sharing.timeSlicing.resources[0].replicas: number of replicas must be >= 2 (got 1)", path);
    assert_string_equal(err, want);
}

static void load_example(const char *file, struct gs_policy *p) {
    char path[1024], err[1024] = "";
    snprintf(path, sizeof(path), "%s/examples/policies/%s", GS_SOURCE_ROOT, file);
    int r = gs_policy_load(path, p, err, sizeof(err));
    if (r < 0)
        fail_msg("%s: %d: %s", path, r, err);
}

static void test_examples(void **state) {
    (void)state;
    _cleanup_free_ struct gs_policy *p = new_policy();

    load_example("nvidia-time-slicing.yaml", p);
    assert_int_equal(p->mig_strategy, GS_MIG_NONE);
    assert_int_equal(p->list_strategy, GS_LIST_ENVVAR);
    assert_true(p->ts_present);
    assert_true(p->ts_rename_by_default);
    assert_true(p->ts_fail_requests_gt_one);
    assert_int_equal(p->n_ts_resources, 1);
    assert_string_equal(p->ts_resources[0].name, "nvidia.com/gpu");
    assert_int_equal(p->ts_resources[0].replicas, 4);
    assert_true(p->ts_resources[0].devices_all);
    assert_int_equal(p->n_rules, 0);
    assert_int_equal(p->n_warnings, 0);

    load_example("nvidia-mig-mixed.yaml", p);
    assert_int_equal(p->mig_strategy, GS_MIG_MIXED);
    assert_int_equal(p->list_strategy, GS_LIST_ENVVAR);
    assert_false(p->ts_present);
    assert_int_equal(p->n_rules, 0);
    assert_int_equal(p->n_warnings, 0);

    load_example("heterogeneous.yaml", p);
    assert_int_equal(p->mig_strategy, GS_MIG_MIXED);
    assert_false(p->ts_present);
    assert_int_equal(p->n_rules, 3);
    assert_int_equal(p->rules[0].kind, GS_SEL_INDEX);
    assert_int_equal(p->rules[0].index_mask, 0xFULL);
    assert_int_equal(p->rules[0].mode, GS_MODE_MIG);
    assert_int_equal(p->rules[1].index_mask, 0x30ULL);
    assert_int_equal(p->rules[1].mode, GS_MODE_TIME_SLICING);
    assert_int_equal(p->rules[1].replicas, 4);
    assert_string_equal(p->rules[1].resource, "");
    assert_int_equal(p->rules[2].index_mask, 0x40ULL);
    assert_int_equal(p->rules[2].mode, GS_MODE_WHOLE);
    assert_default_xids(p);
    assert_int_equal(p->recovery_quiet_s, 300);
    assert_int_equal(p->n_warnings, 0);

    load_example("whole.yaml", p);
    assert_false(p->ts_present);
    assert_int_equal(p->n_rules, 1);
    assert_int_equal(p->rules[0].kind, GS_SEL_MODEL);
    assert_string_equal(p->rules[0].pattern, "*");
    assert_int_equal(p->rules[0].mode, GS_MODE_WHOLE);
    assert_int_equal(p->n_warnings, 0);
}

int main(void) {
    static const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_minimal_defaults),
        cmocka_unit_test(test_empty_and_null_forms),
        cmocka_unit_test(test_nvidia_readme_example),
        cmocka_unit_test(test_nvidia_readme_with_gfd),
        cmocka_unit_test(test_flags_variants),
        cmocka_unit_test(test_time_slicing_full),
        cmocka_unit_test(test_gpuslice_rules),
        cmocka_unit_test(test_mps_nvidia_form),
        cmocka_unit_test(test_mps_full),
        cmocka_unit_test(test_mps_rules),
        cmocka_unit_test(test_mps_percentages),
        cmocka_unit_test(test_coexistence),
        cmocka_unit_test(test_health),
        cmocka_unit_test(test_dra_gpus),
        cmocka_unit_test(test_xid_ignored_defaults),
        cmocka_unit_test(test_warnings),
        cmocka_unit_test(test_crlf_bom_flow),
        cmocka_unit_test(test_fractional_rule),
        cmocka_unit_test(test_bad_counts),
        cmocka_unit_test(test_error_buffer_edge_cases),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_examples),
    };
    return run_with_bad_cases("policy", fixed, GS_ARRAY_SIZE(fixed), bad_cases, GS_ARRAY_SIZE(bad_cases),
                              test_bad);
}
