/* test_labels.c: the node labels (src/core/labels.h) of hand-made inventories: time-slicing on
 * H100s, a node without GPUs, MIG mixed with whole GPUs beside, MPS, the MIG layout's state,
 * model names that are no label values, and a buffer too small. Whole files are compared. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/labels.h"
#include "core/plan.h"
#include "inventory_fixture.h"

#define H100 "NVIDIA H100 80GB HBM3"

/* A Kubernetes label value: at most 63 of [A-Za-z0-9._-], alphanumeric at both ends (or empty). */
static bool label_value_ok(const char *v) {
    size_t n = strlen(v);
    if (n > 63)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = v[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && c != '.' && c != '_' && c != '-')
            return false;
        if (!alnum && (i == 0 || i == n - 1))
            return false;
    }
    return true;
}

/* The labels text of the inventory under the policy; every line "key=value" with keys in strictly
 * ascending order and a valid value. Caller frees. */
static char *labels(const struct gs_inventory *inv, const char *policy_yaml, const char *mig_state) {
    struct fx_planned p = fx_plan(inv, policy_yaml, NULL);
    char *buf = malloc(65536);
    assert_non_null(buf);
    int n = gs_labels_format(inv, p.policy, &p.plan, mig_state, buf, 65536);
    assert_true(n > 0);
    assert_int_equal((size_t)n, strlen(buf));
    assert_int_equal(buf[n - 1], '\n');
    char prev[256] = "";
    for (char *line = buf; *line;) {
        char *eol = strchr(line, '\n'), *eq = memchr(line, '=', (size_t)(eol - line));
        assert_non_null(eq);
        char key[256], value[256];
        snprintf(key, sizeof(key), "%.*s", (int)(eq - line), line);
        snprintf(value, sizeof(value), "%.*s", (int)(eol - eq - 1), eq + 1);
        if (strcmp(prev, key) >= 0)
            fail_msg("label keys out of order or repeated: '%s' then '%s'", prev, key);
        if (!label_value_ok(value))
            fail_msg("%s: '%s' is not a Kubernetes label value", key, value);
        snprintf(prev, sizeof(prev), "%s", key);
        line = eol + 1;
    }
    fx_plan_free(&p);
    return buf;
}

static void test_time_slicing(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("550.54.15", 12040);
    fx_gpu(inv, H100, FX_HOPPER, 9, 0, 80);
    fx_gpu(inv, H100, FX_HOPPER, 9, 0, 80);
    char *text = labels(inv, "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                             "    - name: nvidia.com/gpu\n      replicas: 4\n", NULL);
    assert_string_equal(text, "gpuslice.io/cuda.driver-version.full=550.54.15\n"
                              "gpuslice.io/cuda.driver-version.major=550\n"
                              "gpuslice.io/cuda.driver-version.minor=54\n"
                              "gpuslice.io/cuda.driver-version.revision=15\n"
                              "gpuslice.io/cuda.runtime-version.full=12.4\n"
                              "gpuslice.io/cuda.runtime-version.major=12\n"
                              "gpuslice.io/cuda.runtime-version.minor=4\n"
                              "gpuslice.io/gpu.compute.major=9\n"
                              "gpuslice.io/gpu.compute.minor=0\n"
                              "gpuslice.io/gpu.count=2\n"          /* GPUs, not the 8 replicas */
                              "gpuslice.io/gpu.family=hopper\n"
                              "gpuslice.io/gpu.memory=81920\n"     /* MiB */
                              "gpuslice.io/gpu.product=NVIDIA-H100-80GB-HBM3-SHARED\n"
                              "gpuslice.io/gpu.replicas=4\n"
                              "gpuslice.io/gpu.sharing-strategy=time-slicing\n"
                              "gpuslice.io/mig.capable=false\n"
                              "gpuslice.io/mig.strategy=none\n"
                              "gpuslice.io/mps.capable=false\n");
    free(text);
    /* Renamed replicas (gpu.shared) keep the product name as it is. */
    text = labels(inv, "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
                       "    - name: nvidia.com/gpu\n      replicas: 2\n", NULL);
    assert_true(fx_has_line(text, "gpuslice.io/gpu.shared.product=NVIDIA-H100-80GB-HBM3"));
    assert_true(fx_has_line(text, "gpuslice.io/gpu.shared.replicas=2"));
    assert_null(strstr(text, "gpuslice.io/gpu.product"));
    free(text);
    free(inv);
}

/* No GPU: only the node-wide labels, and no driver labels without a driver version. */
static void test_no_gpus(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("", 0);
    char *text = labels(inv, "version: v1\n", NULL);
    assert_string_equal(text, "gpuslice.io/mig.capable=false\ngpuslice.io/mig.strategy=none\ngpuslice.io/mps.capable=false\n");
    free(text);
    /* A two-part driver version has revision 00; the CUDA version 13.0. */
    free(inv);
    inv = fx_node("580.65", 13000);
    text = labels(inv, "version: v1\n", NULL);
    assert_string_equal(text, "gpuslice.io/cuda.driver-version.full=580.65\n"
                              "gpuslice.io/cuda.driver-version.major=580\n"
                              "gpuslice.io/cuda.driver-version.minor=65\n"
                              "gpuslice.io/cuda.driver-version.revision=00\n"
                              "gpuslice.io/cuda.runtime-version.full=13.0\n"
                              "gpuslice.io/cuda.runtime-version.major=13\n"
                              "gpuslice.io/cuda.runtime-version.minor=0\n"
                              "gpuslice.io/mig.capable=false\n"
                              "gpuslice.io/mig.strategy=none\n"
                              "gpuslice.io/mps.capable=false\n");
    free(text);
    free(inv);
}

/* MIG mixed: one label group per MIG profile, the L4s as whole GPUs, the layout and its state. */
static void test_mig_mixed(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("550.54.15", 12040);
    struct gs_gpu *g = fx_gpu(inv, H100, FX_HOPPER, 9, 0, 80);
    fx_mig(g, "1g.10gb", 9, 0, 1, 9856, 16);
    fx_mig(g, "1g.10gb", 10, 0, 1, 9856, 16);
    fx_mig(g, "3g.40gb", 2, 0, 3, 40192, 60);
    fx_gpu(inv, "NVIDIA L4", FX_ADA, 8, 9, 24);
    fx_gpu(inv, "NVIDIA L4", FX_ADA, 8, 9, 24);
    const char *mixed = "version: v1\nflags:\n  migStrategy: mixed\ngpuslice:\n  mig:\n    config: all-balanced\n";
    char *text = labels(inv, mixed, NULL);
    const char *want[] = {
        "gpuslice.io/gpu.count=2", "gpuslice.io/gpu.family=ada-lovelace", "gpuslice.io/gpu.compute.major=8",
        "gpuslice.io/gpu.compute.minor=9", "gpuslice.io/gpu.memory=24576", "gpuslice.io/gpu.product=NVIDIA-L4",
        "gpuslice.io/gpu.replicas=1", "gpuslice.io/gpu.sharing-strategy=none",
        "gpuslice.io/mig-1g.10gb.count=2", "gpuslice.io/mig-1g.10gb.family=hopper",
        "gpuslice.io/mig-1g.10gb.memory=9856", "gpuslice.io/mig-1g.10gb.multiprocessors=16",
        "gpuslice.io/mig-1g.10gb.product=NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
        "gpuslice.io/mig-1g.10gb.replicas=1", "gpuslice.io/mig-1g.10gb.sharing-strategy=none",
        "gpuslice.io/mig-1g.10gb.slices.ci=1", "gpuslice.io/mig-1g.10gb.slices.gi=1",
        "gpuslice.io/mig-3g.40gb.count=1", "gpuslice.io/mig-3g.40gb.memory=40192",
        "gpuslice.io/mig-3g.40gb.multiprocessors=60", "gpuslice.io/mig-3g.40gb.slices.gi=3",
        "gpuslice.io/mig.capable=true", "gpuslice.io/mig.config=all-balanced", "gpuslice.io/mig.strategy=mixed",
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        if (!fx_has_line(text, want[i]))
            fail_msg("no label %s in:\n%s", want[i], text);
    }
    /* No state until a layout was applied; then mig-parted's words. */
    assert_null(strstr(text, "mig.config.state"));
    free(text);
    static const char *const states[][2] = { { "applied", "success" }, { "pending", "pending" }, { "failed", "failed" } };
    for (size_t i = 0; i < 3; i++) {
        text = labels(inv, mixed, states[i][0]);
        char line[128];
        snprintf(line, sizeof(line), "gpuslice.io/mig.config.state=%s", states[i][1]);
        assert_true(fx_has_line(text, line));
        free(text);
    }
    /* Without a layout in the policy, a state is not published. */
    text = labels(inv, "version: v1\nflags:\n  migStrategy: mixed\n", "applied");
    assert_null(strstr(text, "nvidia.com/mig.config"));
    assert_null(strstr(text, "gpuslice.io/mig.config"));
    free(text);
    free(inv);
}

/* gpuslice.io/ names only by default; gpuslice.labels.nvidiaNames adds GFD's nvidia.com/ names,
 * except nvidia.com/mig.config, on which NVIDIA's MIG manager acts. */
static void test_nvidia_names(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("550.54.15", 12040);
    fx_gpu(inv, H100, FX_HOPPER, 9, 0, 80);
    fx_gpu(inv, H100, FX_HOPPER, 9, 0, 80);
    const char *mig = "version: v1\nflags:\n  migStrategy: mixed\ngpuslice:\n  mig:\n    config: all-disabled\n";
    char *text = labels(inv, mig, "applied");
    assert_null(strstr(text, "nvidia.com/"));
    assert_true(fx_has_line(text, "gpuslice.io/gpu.count=2"));
    assert_true(fx_has_line(text, "gpuslice.io/mig.config=all-disabled"));
    assert_true(fx_has_line(text, "gpuslice.io/mig.config.state=success"));
    free(text);
    char both[512];
    snprintf(both, sizeof(both), "%s  labels:\n    nvidiaNames: true\n", mig);
    text = labels(inv, both, "applied");
    static const char *const pairs[] = { "gpu.count=2", "gpu.product=NVIDIA-H100-80GB-HBM3", "gpu.replicas=1",
                                         "mig.capable=false", "mig.strategy=mixed", "cuda.driver-version.full=550.54.15" };
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        char a[128], b[128];
        snprintf(a, sizeof(a), "gpuslice.io/%s", pairs[i]);
        snprintf(b, sizeof(b), "nvidia.com/%s", pairs[i]);
        if (!fx_has_line(text, a) || !fx_has_line(text, b))
            fail_msg("no %s or %s in:\n%s", a, b, text);
    }
    assert_true(fx_has_line(text, "gpuslice.io/mig.config=all-disabled"));
    assert_null(strstr(text, "nvidia.com/mig.config"));
    free(text);
    free(inv);
}

static void test_mps(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("550.54.15", 12040);
    for (int i = 0; i < 3; i++)
        fx_gpu(inv, "NVIDIA A100-SXM4-40GB", FX_AMPERE, 8, 0, 40);
    char *text = labels(inv, "version: v1\nsharing:\n  mps:\n    resources:\n"
                             "    - name: nvidia.com/gpu\n      replicas: 5\n", NULL);
    assert_true(fx_has_line(text, "gpuslice.io/gpu.count=3"));
    assert_true(fx_has_line(text, "gpuslice.io/gpu.replicas=5"));
    assert_true(fx_has_line(text, "gpuslice.io/gpu.sharing-strategy=mps"));
    assert_true(fx_has_line(text, "gpuslice.io/gpu.family=ampere"));
    assert_true(fx_has_line(text, "gpuslice.io/mps.capable=true"));
    free(text);
    free(inv);
}

/* Model names are cut to label values: other characters become '-', the ends alphanumeric, at
 * most 63 characters. */
static void test_names_sanitized(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("550.54.15", 12040);
    fx_gpu(inv, "  (NVIDIA) A100/SXM4 \"40GB\" rev#2!! ", FX_AMPERE, 8, 0, 40);
    char *text = labels(inv, "version: v1\n", NULL);
    assert_true(fx_has_line(text, "gpuslice.io/gpu.product=NVIDIA--A100-SXM4--40GB--rev-2"));
    free(text);
    free(inv);

    inv = fx_node("550.54.15", 12040);
    char name[GS_UUID_LEN];
    memset(name, 'x', 70);
    name[70] = '\0';
    name[62] = ' ';              /* the 63rd character: cut there, then the blank's '-' too */
    fx_gpu(inv, name, 99, 1, 0, 1); /* an architecture NVML added later */
    text = labels(inv, "version: v1\n", NULL);
    char want[128];
    snprintf(want, sizeof(want), "gpuslice.io/gpu.product=%.62s", name);
    assert_true(fx_has_line(text, want));
    assert_true(fx_has_line(text, "gpuslice.io/gpu.family=undefined"));
    free(text);
    free(inv);

    /* A driver version that is not a label value is still cut to one. */
    inv = fx_node("550.54.15 (beta)", 0);
    text = labels(inv, "version: v1\n", NULL);
    assert_true(fx_has_line(text, "gpuslice.io/cuda.driver-version.full=550.54.15--beta"));
    free(text);
    free(inv);
}

static void test_buffer_too_small(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("550.54.15", 12040);
    fx_gpu(inv, H100, FX_HOPPER, 9, 0, 80);
    struct fx_planned p = fx_plan(inv, "version: v1\n", NULL);
    char buf[4096];
    int n = gs_labels_format(inv, p.policy, &p.plan, NULL, buf, sizeof(buf));
    assert_true(n > 0);
    char *small = malloc((size_t)n + 1);
    assert_non_null(small);
    assert_int_equal(gs_labels_format(inv, p.policy, &p.plan, NULL, small, (size_t)n + 1), n);
    assert_string_equal(small, buf);
    for (size_t len = 0; len <= (size_t)n; len++)
        if (gs_labels_format(inv, p.policy, &p.plan, NULL, small, len) != -ENOSPC)
            fail_msg("%zu bytes for a %d-byte text: not -ENOSPC", len, n);
    free(small);
    fx_plan_free(&p);
    free(inv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_time_slicing),
        cmocka_unit_test(test_no_gpus),
        cmocka_unit_test(test_mig_mixed),
        cmocka_unit_test(test_mps), cmocka_unit_test(test_nvidia_names),
        cmocka_unit_test(test_names_sanitized),
        cmocka_unit_test(test_buffer_too_small),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
