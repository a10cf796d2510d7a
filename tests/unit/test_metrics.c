/* test_metrics.c: the Prometheus text (src/core/metrics.h) of hand-made inventories, plans and
 * counters: every output is checked against the text exposition format (HELP and TYPE before a
 * family's samples, label values escaped, no series twice), then for its samples: GPUs with and
 * without optional readings, lost and unhealthy GPUs, MIG devices, replicas with quotas, the
 * guard's figures attributed to pods, MPS daemons, the agent's counters; a node without GPUs;
 * names that need escaping; a buffer too small. */
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

#include "core/metrics.h"
#include "core/plan.h"
#include "inventory_fixture.h"

#define BUF_LEN (1 << 20)

static bool name_char(char c, bool first) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (!first && c >= '0' && c <= '9');
}

/* Checks the text exposition format, line by line; fails naming the line. */
static void check_format(const char *text) {
    char family[128] = "", type[64] = "";
    bool help = false;
    size_t n_series = 0, cap = 256;
    char **series = malloc(cap * sizeof(*series));
    assert_non_null(series);
    unsigned lineno = 0;
    for (const char *line = text; *line;) {
        lineno++;
        const char *eol = strchr(line, '\n');
        if (!eol)
            fail_msg("line %u: no newline at the end", lineno);
        char l[2048];
        assert_true((size_t)(eol - line) < sizeof(l));
        snprintf(l, sizeof(l), "%.*s", (int)(eol - line), line);
        line = eol + 1;
        char name[128], word[64];
        if (!strncmp(l, "# HELP ", 7)) {
            if (sscanf(l + 7, "%127s", name) != 1 || strlen(l) <= 8 + strlen(name))
                fail_msg("line %u: HELP without a text: %s", lineno, l);
            snprintf(family, sizeof(family), "%s", name);
            help = true;
            type[0] = '\0';
            continue;
        }
        if (!strncmp(l, "# TYPE ", 7)) {
            if (sscanf(l + 7, "%127s %63s", name, word) != 2 || strcmp(name, family) || !help ||
                (strcmp(word, "gauge") && strcmp(word, "counter")))
                fail_msg("line %u: TYPE not after its HELP, or not gauge/counter: %s", lineno, l);
            snprintf(type, sizeof(type), "%s", word);
            continue;
        }
        if (l[0] == '#')
            fail_msg("line %u: a comment that is neither HELP nor TYPE: %s", lineno, l);
        /* name{label="value",...} value */
        const char *p = l;
        size_t nl = 0;
        while (name_char(*p, nl == 0))
            p++, nl++;
        if (!nl || nl != strlen(family) || strncmp(l, family, nl) || !type[0])
            fail_msg("line %u: sample outside its family (%s): %s", lineno, family, l);
        if (!strcmp(type, "counter") && (nl < 6 || strncmp(l + nl - 6, "_total", 6)))
            fail_msg("line %u: counter without _total: %s", lineno, l);
        if (*p == '{') {
            p++;
            while (*p != '}') {
                size_t k = 0;
                while (name_char(p[k], k == 0))
                    k++;
                if (!k || p[k] != '=' || p[k + 1] != '"')
                    fail_msg("line %u: bad label at '%s'", lineno, p);
                p += k + 2;
                for (; *p != '"'; p++) {
                    if (!*p)
                        fail_msg("line %u: unterminated label value", lineno);
                    if (*p == '\\' && p[1] != '\\' && p[1] != '"' && p[1] != 'n')
                        fail_msg("line %u: bad escape '\\%c'", lineno, p[1]);
                    if (*p == '\\')
                        p++;
                }
                p++;
                if (*p == ',')
                    p++;
                else if (*p != '}')
                    fail_msg("line %u: expected ',' or '}' at '%s'", lineno, p);
            }
            p++;
        }
        if (*p != ' ')
            fail_msg("line %u: no value: %s", lineno, l);
        char *end;
        strtod(p + 1, &end);
        if (end == p + 1 || *end)
            fail_msg("line %u: value is not a number: %s", lineno, l);
        size_t sl = (size_t)(p - l);
        for (size_t i = 0; i < n_series; i++)
            if (strlen(series[i]) == sl && !strncmp(series[i], l, sl))
                fail_msg("line %u: series listed twice: %s", lineno, l);
        if (n_series == cap) {
            cap *= 2;
            series = realloc(series, cap * sizeof(*series));
            assert_non_null(series);
        }
        series[n_series] = malloc(sl + 1);
        assert_non_null(series[n_series]);
        snprintf(series[n_series++], sl + 1, "%s", l);
    }
    for (size_t i = 0; i < n_series; i++)
        free(series[i]);
    free(series);
}

/* The text for these inputs, checked against the format. Caller frees. */
static char *render(const struct gs_inventory *inv, const char *policy_yaml, const struct gs_health *health,
                    const struct gs_metrics_counters *c) {
    struct fx_planned p = fx_plan(inv, policy_yaml, health);
    char *buf = malloc(BUF_LEN);
    assert_non_null(buf);
    int n = gs_metrics_format(inv, &p.plan, health, c, buf, BUF_LEN);
    assert_true(n > 0);
    assert_int_equal((size_t)n, strlen(buf));
    check_format(buf);
    fx_plan_free(&p);
    return buf;
}

static void has_line(const char *text, const char *line) {
    if (!fx_has_line(text, line))
        fail_msg("no line '%s' in:\n%s", line, text);
}

static void no_series(const char *text, const char *prefix) {
    char want[256];
    snprintf(want, sizeof(want), "\n%s", prefix);
    if (strstr(text, want))
        fail_msg("unexpected '%s' in:\n%s", prefix, text);
}

#define U0 "GPU-00001000-aaaa-bbbb-cccc-000000000000"
#define U1 "GPU-00001001-aaaa-bbbb-cccc-000000000001"
#define U2 "GPU-00001002-aaaa-bbbb-cccc-000000000002"

static struct gs_inventory *three_gpus(void) {
    struct gs_inventory *inv = fx_node("550.54.15", 12040);
    for (int i = 0; i < 3; i++) {
        struct gs_gpu *g = fx_gpu(inv, "NVIDIA H100 80GB HBM3", FX_HOPPER, 9, 0, 80);
        g->mem_used = (unsigned long long)i << 30;
        g->n_procs = (unsigned)i;
    }
    inv->gpus[0].util_valid = inv->gpus[0].temp_valid = inv->gpus[0].power_valid = true;
    inv->gpus[0].util_gpu = 37;
    inv->gpus[0].temperature_c = 41;
    inv->gpus[0].power_mw = 312500;
    inv->gpus[2].lost = true;
    return inv;
}

#define TS_GUARD "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n" \
                 "      replicas: 2\n      memoryPerReplica: 8GiB\n"

static void test_gpus_and_resources(void **state) {
    (void)state;
    struct gs_inventory *inv = three_gpus();
    struct gs_health health = { 0 };
    health.unhealthy[1] = true;              /* an Xid */
    struct gs_metrics_counters *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    c->xid_total[1] = 3;
    char *t = render(inv, TS_GUARD, &health, c);
    has_line(t, "gpuslice_gpu_info{gpu=\"0\",UUID=\"" U0 "\",model_name=\"NVIDIA H100 80GB HBM3\",mode=\"time-slicing\"} 1");
    has_line(t, "gpuslice_gpu_memory_total_bytes{gpu=\"1\",UUID=\"" U1 "\"} 85899345920");
    has_line(t, "gpuslice_gpu_memory_used_bytes{gpu=\"2\",UUID=\"" U2 "\"} 2147483648");
    /* optional readings: only where NVML had them */
    has_line(t, "gpuslice_gpu_utilization_ratio{gpu=\"0\",UUID=\"" U0 "\"} 0.37");
    has_line(t, "gpuslice_gpu_temperature_celsius{gpu=\"0\",UUID=\"" U0 "\"} 41");
    has_line(t, "gpuslice_gpu_power_usage_watts{gpu=\"0\",UUID=\"" U0 "\"} 312.500");
    no_series(t, "gpuslice_gpu_utilization_ratio{gpu=\"1\"");
    no_series(t, "gpuslice_gpu_temperature_celsius{gpu=\"2\"");
    no_series(t, "gpuslice_gpu_power_usage_watts{gpu=\"1\"");
    has_line(t, "gpuslice_gpu_healthy{gpu=\"0\",UUID=\"" U0 "\"} 1");
    has_line(t, "gpuslice_gpu_healthy{gpu=\"1\",UUID=\"" U1 "\"} 0");   /* Xid */
    has_line(t, "gpuslice_gpu_healthy{gpu=\"2\",UUID=\"" U2 "\"} 0");   /* lost */
    has_line(t, "gpuslice_gpu_xid_errors_total{gpu=\"1\",UUID=\"" U1 "\"} 3");
    has_line(t, "gpuslice_gpu_xid_errors_total{gpu=\"0\",UUID=\"" U0 "\"} 0");
    has_line(t, "gpuslice_gpu_processes{gpu=\"2\",UUID=\"" U2 "\"} 2");
    /* 3 GPUs x 2 replicas, those of GPUs 1 and 2 unhealthy */
    has_line(t, "gpuslice_resource_devices{resource=\"nvidia.com/gpu\",health=\"healthy\"} 2");
    has_line(t, "gpuslice_resource_devices{resource=\"nvidia.com/gpu\",health=\"unhealthy\"} 4");
    has_line(t, "gpuslice_replica_memory_quota_bytes{resource=\"nvidia.com/gpu\",device=\"" U0 "::1\"} 8589934592");
    has_line(t, "gpuslice_replica_memory_quota_bytes{resource=\"nvidia.com/gpu\",device=\"" U2 "::0\"} 8589934592");
    /* every family has its HELP and TYPE even without samples */
    has_line(t, "# TYPE gpuslice_mig_device_memory_bytes gauge");
    no_series(t, "gpuslice_mig_device_memory_bytes{");
    has_line(t, "# TYPE gpuslice_mps_daemon_restarts_total counter");
    free(t);
    free(c);
    free(inv);
}

static void test_mig_devices(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("550.54.15", 12040);
    struct gs_gpu *g = fx_gpu(inv, "NVIDIA H100 80GB HBM3", FX_HOPPER, 9, 0, 80);
    struct gs_mig_device *a = fx_mig(g, "1g.10gb", 9, 0, 1, 9856, 16);
    struct gs_mig_device *b = fx_mig(g, "3g.40gb", 2, 0, 3, 40192, 60);
    fx_gpu(inv, "NVIDIA L4", FX_ADA, 8, 9, 24);
    struct gs_metrics_counters *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    char *t = render(inv, "version: v1\nflags:\n  migStrategy: mixed\n", NULL, c);
    char want[512];
    snprintf(want, sizeof(want),
             "gpuslice_mig_device_memory_bytes{gpu=\"0\",UUID=\"" U0 "\",GPU_I_ID=\"9\",GPU_I_PROFILE=\"1g.10gb\","
             "mig_uuid=\"%s\"} %llu", a->uuid, 9856ULL << 20);
    has_line(t, want);
    snprintf(want, sizeof(want),
             "gpuslice_mig_device_memory_bytes{gpu=\"0\",UUID=\"" U0 "\",GPU_I_ID=\"2\",GPU_I_PROFILE=\"3g.40gb\","
             "mig_uuid=\"%s\"} %llu", b->uuid, 40192ULL << 20);
    has_line(t, want);
    has_line(t, "gpuslice_gpu_info{gpu=\"0\",UUID=\"" U0 "\",model_name=\"NVIDIA H100 80GB HBM3\",mode=\"mig\"} 1");
    has_line(t, "gpuslice_gpu_info{gpu=\"1\",UUID=\"" U1 "\",model_name=\"NVIDIA L4\",mode=\"whole\"} 1");
    has_line(t, "gpuslice_resource_devices{resource=\"nvidia.com/mig-1g.10gb\",health=\"healthy\"} 1");
    has_line(t, "gpuslice_resource_devices{resource=\"nvidia.com/mig-3g.40gb\",health=\"healthy\"} 1");
    has_line(t, "gpuslice_resource_devices{resource=\"nvidia.com/gpu\",health=\"healthy\"} 1");
    no_series(t, "gpuslice_replica_memory_quota_bytes{");
    free(t);
    free(c);
    free(inv);
}

/* The agent's own counters, the guard's figures with and without a pod, MPS daemons. */
static void test_counters_and_attribution(void **state) {
    (void)state;
    struct gs_inventory *inv = three_gpus();
    struct gs_metrics_counters *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    gs_metrics_count_alloc(c, "nvidia.com/gpu", true);
    gs_metrics_count_alloc(c, "nvidia.com/gpu", true);
    gs_metrics_count_alloc(c, "nvidia.com/gpu", false);
    gs_metrics_count_alloc(c, "nvidia.com/mig-1g.10gb", false);
    assert_int_equal(c->n_resources, 2);
    c->reconcile_seconds = 0.0125;
    c->reconcile_errors = 1;
    c->policy_reloads = 4;
    c->policy_reload_errors = 2;
    c->n_guard = 2;
    c->guard[0] = (struct gs_guard_usage){ "alloc-a", "nvidia.com/gpu", U0 "::0", U0, 8ULL << 30, 1ULL << 30,
                                           (1ULL << 30) + (300ULL << 20), 2 };
    c->guard[1] = (struct gs_guard_usage){ "alloc-b", "nvidia.com/gpu", U1 "::1", U1, 8ULL << 30, 0, 0, 0 };
    c->pods_known = true;
    c->n_pod_devices = 1;
    c->pod_devices[0] = (struct gs_pod_device){ "team-a", "train-0", "main", "nvidia.com/gpu", U0 "::0" };
    c->n_mps = 1;
    c->mps[0] = (struct gs_mps_daemon_status){ U1, "restarting", 3 };
    char *t = render(inv, TS_GUARD, NULL, c);
    has_line(t, "gpuslice_allocations_total{resource=\"nvidia.com/gpu\"} 2");
    has_line(t, "gpuslice_allocation_errors_total{resource=\"nvidia.com/gpu\"} 1");
    has_line(t, "gpuslice_allocations_total{resource=\"nvidia.com/mig-1g.10gb\"} 0");
    has_line(t, "gpuslice_allocation_errors_total{resource=\"nvidia.com/mig-1g.10gb\"} 1");
    has_line(t, "gpuslice_reconcile_duration_seconds 0.012500");
    has_line(t, "gpuslice_reconcile_errors_total 1");
    has_line(t, "gpuslice_policy_reloads_total{result=\"applied\"} 4");
    has_line(t, "gpuslice_policy_reloads_total{result=\"rejected\"} 2");
    has_line(t, "gpuslice_guard_memory_limit_bytes{allocation=\"alloc-a\",UUID=\"" U0
                "\",namespace=\"team-a\",pod=\"train-0\",container=\"main\"} 8589934592");
    has_line(t, "gpuslice_guard_memory_used_bytes{allocation=\"alloc-a\",UUID=\"" U0
                "\",namespace=\"team-a\",pod=\"train-0\",container=\"main\"} 1073741824");
    has_line(t, "gpuslice_guard_memory_nvml_bytes{allocation=\"alloc-a\",UUID=\"" U0
                "\",namespace=\"team-a\",pod=\"train-0\",container=\"main\"} 1388314624");
    /* no pod holds alloc-b's device: empty attribution, not a missing series */
    has_line(t, "gpuslice_guard_memory_limit_bytes{allocation=\"alloc-b\",UUID=\"" U1
                "\",namespace=\"\",pod=\"\",container=\"\"} 8589934592");
    has_line(t, "gpuslice_pod_device_info{namespace=\"team-a\",pod=\"train-0\",container=\"main\","
                "resource=\"nvidia.com/gpu\",device=\"" U0 "::0\"} 1");
    has_line(t, "gpuslice_mps_daemon_state{UUID=\"" U1 "\",state=\"restarting\"} 1");
    has_line(t, "gpuslice_mps_daemon_restarts_total{UUID=\"" U1 "\"} 3");
    free(t);

    /* PodResources did not answer: nothing is attributed. */
    c->pods_known = false;
    t = render(inv, TS_GUARD, NULL, c);
    has_line(t, "gpuslice_guard_memory_limit_bytes{allocation=\"alloc-a\",UUID=\"" U0
                "\",namespace=\"\",pod=\"\",container=\"\"} 8589934592");
    free(t);
    free(c);
    free(inv);
}

static void test_count_alloc_bounded(void **state) {
    (void)state;
    struct gs_metrics_counters *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    char name[32];
    for (unsigned i = 0; i < GS_PLAN_MAX_RESOURCES + 5; i++) {
        snprintf(name, sizeof(name), "example.com/r%u", i);
        gs_metrics_count_alloc(c, name, true);
    }
    assert_int_equal(c->n_resources, GS_PLAN_MAX_RESOURCES);
    gs_metrics_count_alloc(c, "example.com/r0", true);
    assert_int_equal(c->res[0].allocations, 2);
    assert_string_equal(c->res[GS_PLAN_MAX_RESOURCES - 1].name, "example.com/r63");
    free(c);
}

static void test_no_gpus(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("", 0);
    struct gs_metrics_counters *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    char *t = render(inv, "version: v1\n", NULL, c);
    has_line(t, "# HELP gpuslice_gpu_info A GPU of the node (always 1), with its model and sharing mode.");
    has_line(t, "# TYPE gpuslice_gpu_info gauge");
    no_series(t, "gpuslice_gpu_info{");
    no_series(t, "gpuslice_gpu_healthy{");
    has_line(t, "gpuslice_reconcile_errors_total 0");
    has_line(t, "gpuslice_policy_reloads_total{result=\"applied\"} 0");
    free(t);
    free(c);
    free(inv);
}

/* Label values with backslashes, quotes and newlines (a model name, a pod's name from
 * PodResources, an MPS state) are escaped as the format requires. */
static void test_escaping(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("550.54.15", 12040);
    fx_gpu(inv, "Weird \"GPU\" \\ model\nnext", FX_HOPPER, 9, 0, 80);
    struct gs_metrics_counters *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    c->pods_known = true;
    c->n_pod_devices = 1;
    c->pod_devices[0] = (struct gs_pod_device){ "ns\"x", "pod\\\n} 1\nfake_metric 2", "c", "nvidia.com/gpu", U0 };
    c->n_mps = 1;
    c->mps[0] = (struct gs_mps_daemon_status){ U0, "st\"ate", 0 };
    char *t = render(inv, "version: v1\n", NULL, c);
    has_line(t, "gpuslice_gpu_info{gpu=\"0\",UUID=\"" U0 "\",model_name=\"Weird \\\"GPU\\\" \\\\ model\\nnext\","
                "mode=\"whole\"} 1");
    has_line(t, "gpuslice_pod_device_info{namespace=\"ns\\\"x\",pod=\"pod\\\\\\n} 1\\nfake_metric 2\",container=\"c\","
                "resource=\"nvidia.com/gpu\",device=\"" U0 "\"} 1");
    has_line(t, "gpuslice_mps_daemon_state{UUID=\"" U0 "\",state=\"st\\\"ate\"} 1");
    no_series(t, "fake_metric");
    free(t);

    /* The longest model name, every character escaped, is kept whole. */
    memset(inv->gpus[0].name, '"', sizeof(inv->gpus[0].name) - 1);
    inv->gpus[0].name[sizeof(inv->gpus[0].name) - 1] = '\0';
    t = render(inv, "version: v1\n", NULL, c);
    char want[512];
    size_t n = (size_t)snprintf(want, sizeof(want), "gpuslice_gpu_info{gpu=\"0\",UUID=\"" U0 "\",model_name=\"");
    for (size_t i = 0; i < sizeof(inv->gpus[0].name) - 1; i++)
        n += (size_t)snprintf(want + n, sizeof(want) - n, "\\\"");
    snprintf(want + n, sizeof(want) - n, "\",mode=\"whole\"} 1");
    has_line(t, want);
    free(t);
    free(c);
    free(inv);
}

static void test_buffer_too_small(void **state) {
    (void)state;
    struct gs_inventory *inv = three_gpus();
    struct fx_planned p = fx_plan(inv, TS_GUARD, NULL);
    struct gs_metrics_counters *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    char *buf = malloc(BUF_LEN);
    assert_non_null(buf);
    int n = gs_metrics_format(inv, &p.plan, NULL, c, buf, BUF_LEN);
    assert_true(n > 0);
    char *exact = malloc((size_t)n + 1);
    assert_non_null(exact);
    assert_int_equal(gs_metrics_format(inv, &p.plan, NULL, c, exact, (size_t)n + 1), n);
    assert_string_equal(exact, buf);
    for (size_t len = 0; len <= (size_t)n; len += len < 64 ? 1 : 97)
        if (gs_metrics_format(inv, &p.plan, NULL, c, exact, len) != -ENOSPC)
            fail_msg("%zu bytes for a %d-byte text: not -ENOSPC", len, n);
    assert_int_equal(gs_metrics_format(inv, &p.plan, NULL, c, exact, (size_t)n), -ENOSPC);
    free(exact);
    free(buf);
    free(c);
    fx_plan_free(&p);
    free(inv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpus_and_resources),
        cmocka_unit_test(test_mig_devices),
        cmocka_unit_test(test_counters_and_attribution),
        cmocka_unit_test(test_count_alloc_bounded),
        cmocka_unit_test(test_no_gpus),
        cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_buffer_too_small),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
