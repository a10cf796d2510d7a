/* test_cdi.c: the CDI specs of src/cdi/cdi.h from hand-made inventories, read back as JSON: whole
 * GPUs (named by index and UUID, device nodes by minor), a node without GPUs, no nvidia-uvm, MIG
 * devices with their capability nodes from mig-minors and the errors when those are missing, the
 * driver's files as mounts, the transient spec of one allocation; /proc/devices, kinds and
 * qualified names. The cdiVersion and kind are checked in one place (check_version_and_kind). */
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

#include "cdi/cdi.h"
#include "inventory_fixture.h"

#define KIND "example.com/gpu"
#define PROC_DEVICES "Character devices:\n  1 mem\n  4 /dev/vc/0\n195 nvidia\n195 nvidia-frontend\n" \
                     "235 nvidia-caps\n509 nvidia-uvm\n\nBlock devices:\n  8 sd\n259 blkext\n"

static const struct gs_dev_majors MAJORS = { 195, 509, 235 };

/* What src/cdi/cdi.c writes as cdiVersion, the lowest version the spec's content needs (the rules
 * are tested in test_cdi_version.c), for the specs of these tests; and the kind it was given. The
 * one place to update when cdi.c changes what it writes. */
#define V_INDEX_NAMES "0.5.0" /* device names that start with a digit: "0", "1:9:0" */
#define V_PLAIN "0.3.0"       /* no GPU, or an allocation's spec ("alloc-...") */

static void check_version_and_kind(const json_t *spec, const char *kind, const char *version) {
    assert_string_equal(json_string_value(json_object_get(spec, "kind")), kind);
    assert_string_equal(json_string_value(json_object_get(spec, "cdiVersion")), version);
    assert_string_equal(version, gs_cdi_min_version(spec));
}

static json_t *parse_spec(const char *text, const char *kind, const char *version) {
    json_error_t e;
    json_t *spec = json_loads(text, 0, &e);
    if (!spec)
        fail_msg("not JSON: %s (line %d): %s", e.text, e.line, text);
    check_version_and_kind(spec, kind, version);
    return spec;
}

static json_t *spec_of(const struct gs_inventory *inv, const struct gs_dev_majors *maj, const struct gs_mig_minors *mm,
                       const struct gs_cdi_driver *drv, const char *version) {
    char *text = NULL, err[256] = "";
    int r = gs_cdi_spec(inv, maj, mm, drv, KIND, &text, err, sizeof(err));
    if (r != 0)
        fail_msg("gs_cdi_spec: %d: %s", r, err);
    json_t *spec = parse_spec(text, KIND, version);
    free(text);
    return spec;
}

struct node_want {
    const char *path;
    int major, minor;
};

static void check_nodes(const json_t *nodes, const struct node_want *want, size_t n) {
    assert_true(json_is_array(nodes));
    assert_int_equal(json_array_size(nodes), n);
    for (size_t i = 0; i < n; i++) {
        const json_t *d = json_array_get(nodes, i);
        assert_string_equal(json_string_value(json_object_get(d, "path")), want[i].path);
        assert_string_equal(json_string_value(json_object_get(d, "type")), "c");
        assert_int_equal(json_integer_value(json_object_get(d, "major")), want[i].major);
        assert_int_equal(json_integer_value(json_object_get(d, "minor")), want[i].minor);
    }
}

/* The device names in order; each device's own edits are device nodes only. */
static void check_names(const json_t *spec, const char *const *names, size_t n) {
    const json_t *devices = json_object_get(spec, "devices");
    assert_true(json_is_array(devices));
    assert_int_equal(json_array_size(devices), n);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(json_string_value(json_object_get(json_array_get(devices, i), "name")), names[i]);
}

static const json_t *device_nodes(const json_t *spec, const char *name) {
    size_t i;
    const json_t *d;
    json_array_foreach(json_object_get(spec, "devices"), i, d) {
        if (!strcmp(json_string_value(json_object_get(d, "name")), name))
            return json_object_get(json_object_get(d, "containerEdits"), "deviceNodes");
    }
    fail_msg("no device %s", name);
    return NULL;
}

static const json_t *common_edits(const json_t *spec) {
    return json_object_get(spec, "containerEdits");
}

static const struct node_want CONTROL[] = {
    { "/dev/nvidiactl", 195, 255 }, { "/dev/nvidia-uvm", 509, 0 }, { "/dev/nvidia-uvm-tools", 509, 1 },
};

/* ---- /proc/devices ------------------------------------------------------------------------- */

static void test_proc_devices(void **state) {
    (void)state;
    struct gs_dev_majors m;
    char err[256] = "";
    assert_int_equal(gs_proc_devices_parse("/proc/devices", PROC_DEVICES, &m, err, sizeof(err)), 0);
    assert_int_equal(m.nvidia, 195);
    assert_int_equal(m.uvm, 509);
    assert_int_equal(m.caps, 235);
    /* "nvidia" without a frontend (older drivers); no uvm, no caps; block devices never count */
    assert_int_equal(gs_proc_devices_parse("p", "Character devices:\n 10 misc\n195 nvidia\n\nBlock devices:\n"
                                                "509 nvidia-uvm\n", &m, err, sizeof(err)), 0);
    assert_int_equal(m.nvidia, 195);
    assert_int_equal(m.uvm, -1);
    assert_int_equal(m.caps, -1);
    /* nvidia-frontend wins over nvidia, in either order */
    assert_int_equal(gs_proc_devices_parse("p", "Character devices:\n195 nvidia-frontend\n194 nvidia\n", &m, err,
                                           sizeof(err)), 0);
    assert_int_equal(m.nvidia, 195);

    assert_int_equal(gs_proc_devices_parse("p", "Character devices:\n  1 mem\n\nBlock devices:\n195 nvidia\n", &m, err,
                                           sizeof(err)), -ENOENT);
    assert_string_equal(err, "p: no nvidia-frontend character device: is the NVIDIA driver loaded?");
    assert_int_equal(gs_proc_devices_parse("p", "", &m, err, sizeof(err)), -ENOENT);
    assert_int_equal(gs_proc_devices_parse("p", "Character devices:\n  1 mem\nnvidia 195\n", &m, err, sizeof(err)),
                     -EINVAL);
    assert_string_equal(err, "p:3: malformed line 'nvidia 195' (expected 'MAJOR NAME')");
    assert_int_equal(gs_proc_devices_parse("p", "Character devices:\n4096 nvidia\n", &m, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "p:2: malformed line '4096 nvidia' (expected 'MAJOR NAME')");
    assert_int_equal(gs_proc_devices_parse("p", "Character devices:\n195 \n", &m, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "p:2: malformed line '195 ' (expected 'MAJOR NAME')");
    char long_line[300];
    memset(long_line, '1', sizeof(long_line) - 1);
    long_line[sizeof(long_line) - 1] = '\0';
    char text[400];
    snprintf(text, sizeof(text), "Character devices:\n%s nvidia\n", long_line);
    assert_int_equal(gs_proc_devices_parse("p", text, &m, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "p:2: line too long");
}

/* ---- gs_cdi_spec --------------------------------------------------------------------------- */

static void test_whole_gpus(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("550.54.15", 12040);
    struct gs_gpu *g0 = fx_gpu(inv, "NVIDIA H100 80GB HBM3", FX_HOPPER, 9, 0, 80);
    struct gs_gpu *g1 = fx_gpu(inv, "NVIDIA H100 80GB HBM3", FX_HOPPER, 9, 0, 80);
    g1->minor = 3;                            /* the device node follows the minor, the name the index */
    json_t *spec = spec_of(inv, &MAJORS, NULL, NULL, V_INDEX_NAMES);
    const char *names[] = { "0", g0->uuid, "1", g1->uuid };
    check_names(spec, names, 4);
    const struct node_want n0[] = { { "/dev/nvidia0", 195, 0 } }, n1[] = { { "/dev/nvidia3", 195, 3 } };
    check_nodes(device_nodes(spec, "0"), n0, 1);
    check_nodes(device_nodes(spec, g0->uuid), n0, 1);
    check_nodes(device_nodes(spec, "1"), n1, 1);
    check_nodes(device_nodes(spec, g1->uuid), n1, 1);
    check_nodes(json_object_get(common_edits(spec), "deviceNodes"), CONTROL, 3);
    assert_null(json_object_get(common_edits(spec), "mounts"));   /* no driver files given */
    json_decref(spec);

    /* nvidia-uvm not loaded: the control node only */
    struct gs_dev_majors no_uvm = { 195, -1, -1 };
    spec = spec_of(inv, &no_uvm, NULL, NULL, V_INDEX_NAMES);
    check_nodes(json_object_get(common_edits(spec), "deviceNodes"), CONTROL, 1);
    check_names(spec, names, 4);
    json_decref(spec);
    free(inv);
}

static void test_no_gpus(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("", 0);
    json_t *spec = spec_of(inv, &MAJORS, NULL, NULL, V_PLAIN);
    check_names(spec, NULL, 0);
    check_nodes(json_object_get(common_edits(spec), "deviceNodes"), CONTROL, 3);
    json_decref(spec);
    free(inv);
}

#define MIG_MINORS "config 1\nmonitor 2\ngpu1/gi2/access 21\ngpu1/gi2/ci0/access 22\n" \
                   "gpu1/gi9/access 93\ngpu1/gi9/ci0/access 94\ngpu0/gi9/access 5\n"

static void test_mig_devices(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("550.54.15", 12040);
    struct gs_gpu *l4 = fx_gpu(inv, "NVIDIA L4", FX_ADA, 8, 9, 24);
    struct gs_gpu *h = fx_gpu(inv, "NVIDIA H100 80GB HBM3", FX_HOPPER, 9, 0, 80);
    struct gs_mig_device *a = fx_mig(h, "1g.10gb", 9, 0, 1, 9856, 16);
    struct gs_mig_device *b = fx_mig(h, "3g.40gb", 2, 0, 3, 40192, 60);
    struct gs_mig_minors mm;
    char err[256] = "";
    assert_int_equal(gs_mig_minors_parse("mig-minors", MIG_MINORS, &mm, err, sizeof(err)), 0);
    json_t *spec = spec_of(inv, &MAJORS, &mm, NULL, V_INDEX_NAMES);
    /* the MIG-mode GPU keeps its own names; each MIG device is "<gpu>:<gi>:<ci>" and its UUID */
    const char *names[] = { "0", l4->uuid, "1", h->uuid, "1:9:0", a->uuid, "1:2:0", b->uuid };
    check_names(spec, names, 8);
    const struct node_want na[] = { { "/dev/nvidia1", 195, 1 },
                                    { "/dev/nvidia-caps/nvidia-cap93", 235, 93 },
                                    { "/dev/nvidia-caps/nvidia-cap94", 235, 94 } };
    const struct node_want nb[] = { { "/dev/nvidia1", 195, 1 },
                                    { "/dev/nvidia-caps/nvidia-cap21", 235, 21 },
                                    { "/dev/nvidia-caps/nvidia-cap22", 235, 22 } };
    check_nodes(device_nodes(spec, "1:9:0"), na, 3);
    check_nodes(device_nodes(spec, a->uuid), na, 3);
    check_nodes(device_nodes(spec, "1:2:0"), nb, 3);
    check_nodes(device_nodes(spec, b->uuid), nb, 3);
    json_decref(spec);

    /* No nvidia-caps major, no mig-minors, or a minor missing from it: refused, naming the device. */
    char *text = (char *)"untouched";
    struct gs_dev_majors no_caps = { 195, 509, -1 };
    assert_int_equal(gs_cdi_spec(inv, &no_caps, &mm, NULL, KIND, &text, err, sizeof(err)), -ENODEV);
    assert_null(text);
    char want[512];
    snprintf(want, sizeof(want), "MIG device %s (GPU 1, GI 9, CI 0): no nvidia-caps character device in /proc/devices",
             a->uuid);
    assert_string_equal(err, want);
    assert_int_equal(gs_cdi_spec(inv, &MAJORS, NULL, NULL, KIND, &text, err, sizeof(err)), -ENODEV);
    snprintf(want, sizeof(want), "MIG device %s (GPU 1, GI 9, CI 0): its capability minors are not in mig-minors",
             a->uuid);
    assert_string_equal(err, want);
    gs_mig_minors_free(&mm);
    assert_int_equal(gs_mig_minors_parse("mig-minors", "gpu1/gi9/access 93\ngpu1/gi9/ci0/access 94\n", &mm, err,
                                         sizeof(err)), 0);
    assert_int_equal(gs_cdi_spec(inv, &MAJORS, &mm, NULL, KIND, &text, err, sizeof(err)), -ENODEV);
    snprintf(want, sizeof(want), "MIG device %s (GPU 1, GI 2, CI 0): its capability minors are not in mig-minors",
             b->uuid);
    assert_string_equal(err, want);
    gs_mig_minors_free(&mm);
    free(inv);
}

static void test_bad_kind(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("", 0);
    char *text = (char *)"untouched", err[256] = "";
    assert_int_equal(gs_cdi_spec(inv, &MAJORS, NULL, NULL, "nvidia.com", &text, err, sizeof(err)), -EINVAL);
    assert_null(text);
    assert_string_equal(err, "CDI kind 'nvidia.com': expected VENDOR/CLASS, e.g. nvidia.com/gpu");
    free(inv);
}

/* The driver's files: one read-only bind mount each, at its container path. */
static void test_driver_mounts(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("550.54.15", 12040);
    fx_gpu(inv, "NVIDIA L4", FX_ADA, 8, 9, 24);
    struct gs_cdi_driver *drv = calloc(1, sizeof(*drv));
    assert_non_null(drv);
    static const char *const files[][2] = {
        { "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15", GS_CDI_LIB_DIR "/libnvidia-ml.so.1" },
        { "/run/nvidia/driver/usr/bin/nvidia-smi", GS_CDI_BIN_DIR "/nvidia-smi" },
    };
    drv->n = 2;
    for (unsigned i = 0; i < 2; i++) {
        snprintf(drv->files[i].host, sizeof(drv->files[i].host), "%s", files[i][0]);
        snprintf(drv->files[i].container, sizeof(drv->files[i].container), "%s", files[i][1]);
    }
    json_t *spec = spec_of(inv, &MAJORS, NULL, drv, V_INDEX_NAMES);
    const json_t *mounts = json_object_get(common_edits(spec), "mounts");
    assert_int_equal(json_array_size(mounts), 2);
    for (unsigned i = 0; i < 2; i++) {
        const json_t *m = json_array_get(mounts, i);
        assert_string_equal(json_string_value(json_object_get(m, "hostPath")), files[i][0]);
        assert_string_equal(json_string_value(json_object_get(m, "containerPath")), files[i][1]);
        const json_t *opts = json_object_get(m, "options");
        const char *want[] = { "ro", "nosuid", "nodev", "bind" };
        assert_int_equal(json_array_size(opts), 4);
        for (size_t k = 0; k < 4; k++)
            assert_string_equal(json_string_value(json_array_get(opts, k)), want[k]);
    }
    check_nodes(json_object_get(common_edits(spec), "deviceNodes"), CONTROL, 3);
    json_decref(spec);
    /* An empty driver: no mounts key. */
    drv->n = 0;
    spec = spec_of(inv, &MAJORS, NULL, drv, V_INDEX_NAMES);
    assert_null(json_object_get(common_edits(spec), "mounts"));
    json_decref(spec);
    free(drv);
    free(inv);
}

/* One allocation's transient spec: one device with the answer's environment and extra mounts. */
static void test_alloc_spec(void **state) {
    (void)state;
    struct gs_alloc_response *a = calloc(1, sizeof(*a));
    assert_non_null(a);
    assert_int_equal(gs_alloc_add_env(a, "GPUSLICE_GUARD_CONFIG", "/etc/gpuslice/guard.conf"), 0);
    assert_int_equal(gs_alloc_add_env(a, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25"), 0);
    assert_int_equal(gs_alloc_add_mount(a, "/etc/gpuslice/guard.conf", "/var/lib/gpuslice/guard/a1/limits", true), 0);
    assert_int_equal(gs_alloc_add_mount(a, "/run/gpuslice/guard", "/var/lib/gpuslice/guard/a1", false), 0);
    char *text = NULL, err[256] = "";
    assert_int_equal(gs_cdi_alloc_spec(KIND, "alloc-a1", a, &text, err, sizeof(err)), 0);
    json_t *spec = parse_spec(text, KIND, V_PLAIN);
    free(text);
    const char *names[] = { "alloc-a1" };
    check_names(spec, names, 1);
    const json_t *edits = json_object_get(json_array_get(json_object_get(spec, "devices"), 0), "containerEdits");
    const json_t *env = json_object_get(edits, "env");
    assert_int_equal(json_array_size(env), 2);
    assert_string_equal(json_string_value(json_array_get(env, 0)), "GPUSLICE_GUARD_CONFIG=/etc/gpuslice/guard.conf");
    assert_string_equal(json_string_value(json_array_get(env, 1)), "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25");
    const json_t *mounts = json_object_get(edits, "mounts");
    assert_int_equal(json_array_size(mounts), 2);
    static const char *const want[2][6] = {
        { "/var/lib/gpuslice/guard/a1/limits", "/etc/gpuslice/guard.conf", "ro", "nosuid", "nodev", "rbind" },
        { "/var/lib/gpuslice/guard/a1", "/run/gpuslice/guard", "rw", "nosuid", "nodev", "rbind" },
    };
    for (size_t i = 0; i < 2; i++) {
        const json_t *m = json_array_get(mounts, i);
        assert_string_equal(json_string_value(json_object_get(m, "hostPath")), want[i][0]);
        assert_string_equal(json_string_value(json_object_get(m, "containerPath")), want[i][1]);
        const json_t *opts = json_object_get(m, "options");
        assert_int_equal(json_array_size(opts), 4);
        for (size_t k = 0; k < 4; k++)
            assert_string_equal(json_string_value(json_array_get(opts, k)), want[i][2 + k]);
    }
    json_decref(spec);

    /* An answer without extras: the device is still there, with empty edits. */
    memset(a, 0, sizeof(*a));
    assert_int_equal(gs_cdi_alloc_spec(KIND, "alloc-a2", a, &text, err, sizeof(err)), 0);
    spec = parse_spec(text, KIND, V_PLAIN);
    free(text);
    edits = json_object_get(json_array_get(json_object_get(spec, "devices"), 0), "containerEdits");
    assert_int_equal(json_array_size(json_object_get(edits, "env")), 0);
    assert_int_equal(json_array_size(json_object_get(edits, "mounts")), 0);
    json_decref(spec);
    free(a);
}

/* ---- kinds and names ----------------------------------------------------------------------- */

static void test_kinds(void **state) {
    (void)state;
    static const char *const valid[] = { GS_CDI_KIND, "nvidia.com/gpu", "a/b", "vendor-x.example.io/class_y.z", "a1/2b" };
    for (size_t i = 0; i < sizeof(valid) / sizeof(valid[0]); i++)
        if (!gs_cdi_kind_valid(valid[i]))
            fail_msg("'%s' refused", valid[i]);
    static const char *const invalid[] = { "", "nvidia.com", "/gpu", "nvidia.com/", "a/b/c", "-a/b", "a-/b", "a/_b",
                                           "a/b.", "a b/c", "a/b c", "nvidia_com/gpu", "a/b=c" };
    for (size_t i = 0; i < sizeof(invalid) / sizeof(invalid[0]); i++)
        if (gs_cdi_kind_valid(invalid[i]))
            fail_msg("'%s' accepted", invalid[i]);
    char buf[128];
    gs_cdi_qualified("nvidia.com/gpu", "GPU-1234", buf, sizeof(buf));
    assert_string_equal(buf, "nvidia.com/gpu=GPU-1234");
    gs_cdi_qualified(KIND, "1:9:0", buf, 12);    /* cut, NUL-terminated */
    assert_string_equal(buf, "example.com");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proc_devices),
        cmocka_unit_test(test_whole_gpus),
        cmocka_unit_test(test_no_gpus),
        cmocka_unit_test(test_mig_devices),
        cmocka_unit_test(test_bad_kind),
        cmocka_unit_test(test_driver_mounts),
        cmocka_unit_test(test_alloc_spec),
        cmocka_unit_test(test_kinds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
