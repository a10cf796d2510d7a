/* test_podutil.c: per-pod GPU utilization (src/core/podutil.h) from hand-made NVML samples: the
 * mean over an interval of samples taken per sampling period (idle periods counted), samples seen
 * before never counted twice, an interval without samples (NOT_FOUND) as zero, the period learnt
 * from one process's samples; the attribution of processes to containers (guarded allocation,
 * the only holder of a GPU, no pod), the sum over a GPU's entries equal to its processes'; the
 * kubepods cgroup test; and the metric's text. */
#include <errno.h>
#include <math.h>
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
#include "core/podutil.h"
#include "inventory_fixture.h"

#define P 100000ULL /* the sampling period in these tests, us */
#define T0 (1700000000ULL * 1000000ULL)

static const struct gs_proc_util *find(const struct gs_proc_util *pu, unsigned n, unsigned pid) {
    for (unsigned i = 0; i < n; i++)
        if (pu[i].pid == pid)
            return &pu[i];
    return NULL;
}

/* Samples for periods k in [from, to] of pid running sm % every `every`-th period. */
static unsigned add(struct gs_util_sample *s, unsigned n, unsigned pid, unsigned sm, unsigned from, unsigned to,
                    unsigned every) {
    for (unsigned k = from; k <= to; k++)
        if ((k - from) % every == 0)
            s[n++] = (struct gs_util_sample){ pid, sm, T0 + k * P };
    return n;
}

static void test_fold_means_over_periods(void **state) {
    (void)state;
    static struct gs_util_sample s[512];
    struct gs_proc_util pu[16];
    struct gs_util_window w;
    gs_util_window_init(&w, T0); /* the interval: periods 1..10 */
    unsigned n = add(s, 0, 10, 30, 1, 10, 1);  /* 30 % every period */
    n = add(s, n, 20, 60, 1, 10, 2);           /* 60 % every other period: 30 % */
    n = add(s, n, 30, 50, 3, 4, 1);            /* 2 periods of 10 at 50 %: 10 % */
    unsigned m = gs_util_fold(&w, s, n, T0 + 10 * P + 500, pu, 16);
    assert_int_equal(m, 3);
    assert_int_equal(w.period_us, P);
    assert_true(w.last_seen_us == T0 + 10 * P);
    assert_true(fabs(find(pu, m, 10)->ratio - 0.30) < 1e-9);
    assert_true(fabs(find(pu, m, 20)->ratio - 0.30) < 1e-9);
    assert_true(fabs(find(pu, m, 30)->ratio - 0.10) < 1e-9);

    /* The same samples again (a driver that ignores lastSeenTimeStamp) and 10 new periods in
     * which only pid 10 ran, half of them: nothing is counted twice, idle periods are counted. */
    n = add(s, n, 10, 80, 11, 20, 2);
    m = gs_util_fold(&w, s, n, T0 + 20 * P, pu, 16);
    assert_int_equal(m, 1);
    assert_true(fabs(find(pu, m, 10)->ratio - 0.40) < 1e-9);

    /* No sample since (NOT_FOUND): nothing ran; the next interval starts at the read. */
    assert_int_equal(gs_util_fold(&w, NULL, 0, T0 + 30 * P, pu, 16), 0);
    assert_true(w.start_us == T0 + 30 * P && w.last_seen_us == T0 + 19 * P);
    n = add(s, 0, 10, 100, 31, 40, 1);
    m = gs_util_fold(&w, s, n, T0 + 40 * P, pu, 16);
    assert_true(fabs(find(pu, m, 10)->ratio - 1.0) < 1e-9); /* periods 31..40 only, not 21..40 */

    /* Out of range values are bounded: smUtil past 100, a full output. */
    gs_util_window_init(&w, T0);
    n = 0;
    for (unsigned pid = 1; pid <= 20; pid++)
        n = add(s, n, pid, 250, 1, 10, 1);
    m = gs_util_fold(&w, s, n, T0 + 10 * P, pu, 16);
    assert_int_equal(m, 16);
    for (unsigned i = 0; i < m; i++)
        assert_true(pu[i].ratio <= 1.0);
}

/* A read that comes early against the driver's period grid (its last period stamped after the
 * read's clock says it ended): the samples' periods count, never fewer. */
static void test_fold_read_early_on_the_grid(void **state) {
    (void)state;
    static struct gs_util_sample s[32];
    struct gs_proc_util pu[4];
    struct gs_util_window w;
    gs_util_window_init(&w, T0);
    w.period_us = P;
    unsigned n = 0;
    for (unsigned k = 1; k <= 10; k++)
        s[n++] = (struct gs_util_sample){ 1, 40, T0 + k * P };
    unsigned m = gs_util_fold(&w, s, n, T0 + 9 * P + P / 2, pu, 4);
    assert_int_equal(m, 1);
    assert_true(fabs(pu[0].ratio - 0.40) < 1e-9); /* 10 samples in 10 periods, not 9 */
}

/* Processes' samples of one period a few microseconds apart (a driver that stamps each process
 * when it reads it): the periods are those of the interval, not the timestamps. */
static void test_fold_jittered_timestamps(void **state) {
    (void)state;
    static struct gs_util_sample s[64];
    struct gs_proc_util pu[4];
    struct gs_util_window w;
    gs_util_window_init(&w, T0);
    unsigned n = 0;
    for (unsigned k = 1; k <= 10; k++) {
        s[n++] = (struct gs_util_sample){ 1, 40, T0 + k * P };
        s[n++] = (struct gs_util_sample){ 2, 30, T0 + k * P + 7 };
    }
    unsigned m = gs_util_fold(&w, s, n, T0 + 10 * P + 100, pu, 4);
    assert_int_equal(m, 2);
    assert_int_equal(w.period_us, P);
    assert_true(fabs(find(pu, m, 1)->ratio - 0.40) < 1e-9);
    assert_true(fabs(find(pu, m, 2)->ratio - 0.30) < 1e-9);
}

/* Before the period is known (one sample per process) the periods are the timestamps seen. */
static void test_fold_period_unknown(void **state) {
    (void)state;
    struct gs_util_sample s[2] = { { 1, 40, T0 + P }, { 2, 20, T0 + P } };
    struct gs_proc_util pu[4];
    struct gs_util_window w;
    gs_util_window_init(&w, T0 - 50 * P);
    unsigned m = gs_util_fold(&w, s, 2, T0 + P, pu, 4);
    assert_int_equal(m, 2);
    assert_int_equal(w.period_us, 0);
    assert_true(fabs(find(pu, m, 1)->ratio - 0.40) < 1e-9);
    assert_true(fabs(find(pu, m, 2)->ratio - 0.20) < 1e-9);
    /* Samples of one process less than GS_PODUTIL_MIN_PERIOD_US apart are not a period. */
    struct gs_util_sample t[2] = { { 1, 40, T0 + 2 * P }, { 1, 40, T0 + 2 * P + 10 } };
    gs_util_fold(&w, t, 2, T0 + 3 * P, pu, 4);
    assert_int_equal(w.period_us, 0);
}

#define POLICY "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n" \
               "      replicas: 4\n"

static double ratio_of(const struct gs_pod_util *u, unsigned n, const char *pod, const char *ctr) {
    for (unsigned i = 0; i < n; i++)
        if (!strcmp(u[i].pod, pod) && !strcmp(u[i].container, ctr))
            return u[i].ratio;
    fail_msg("no entry for pod '%s' container '%s'", pod, ctr);
    return -1;
}

static void test_attribution(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("580.65.06", 13000);
    fx_gpu(inv, "Tesla T4", FX_ADA, 7, 5, 16);
    fx_gpu(inv, "Tesla T4", FX_ADA, 7, 5, 16);
    struct fx_planned pl = fx_plan(inv, POLICY, NULL);
    struct gs_metrics_counters *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    char d[4][GS_DEVICE_ID_MAX];
    for (int i = 0; i < 3; i++)
        snprintf(d[i], sizeof(d[i]), "%s::%d", inv->gpus[0].uuid, i);
    snprintf(d[3], sizeof(d[3]), "%s::0", inv->gpus[1].uuid);
    c->pods_known = true;
    c->n_pod_devices = 4;
    c->pod_devices[0] = (struct gs_pod_device){ "ml", "a", "main", "nvidia.com/gpu", "" };
    c->pod_devices[1] = (struct gs_pod_device){ "ml", "b", "main", "nvidia.com/gpu", "" };
    c->pod_devices[2] = (struct gs_pod_device){ "ml", "idle", "main", "nvidia.com/gpu", "" };
    c->pod_devices[3] = (struct gs_pod_device){ "web", "solo", "srv", "nvidia.com/gpu", "" };
    for (int i = 0; i < 4; i++)
        memcpy(c->pod_devices[i].device, d[i], sizeof(d[i]));

    /* GPU 0, shared by three containers: pids 1 and 2 map a's allocation, 3 maps b's, 4 is in a
     * pod's cgroup but maps nothing (several hold the GPU: unknown), 5 is a host process. */
    struct gs_proc_util pu[] = { { 1, 0.2 }, { 2, 0.1 }, { 3, 0.25 }, { 4, 0.05 }, { 5, 0.15 } };
    struct gs_util_owner ow[5] = { { .pid = 1, .resource = "nvidia.com/gpu" }, { .pid = 2, .resource = "nvidia.com/gpu" },
                                   { .pid = 3, .resource = "nvidia.com/gpu" }, { .pid = 4, .in_pod = true },
                                   { .pid = 5 } };
    memcpy(ow[0].device, d[0], sizeof(d[0]));
    memcpy(ow[1].device, d[0], sizeof(d[0]));
    memcpy(ow[2].device, d[1], sizeof(d[1]));
    static struct gs_pod_util out[64];
    unsigned n = 0;
    gs_podutil_attribute(&pl.plan, c, 0, inv->gpus[0].uuid, pu, 5, ow, 5, NULL, 0, out, 64, &n);
    assert_int_equal(n, 4); /* a, b, idle, no pod */
    assert_true(fabs(ratio_of(out, n, "a", "main") - 0.3) < 1e-9);
    assert_true(fabs(ratio_of(out, n, "b", "main") - 0.25) < 1e-9);
    assert_true(ratio_of(out, n, "idle", "main") == 0);
    assert_true(fabs(ratio_of(out, n, "", "") - 0.2) < 1e-9);
    double sum = 0;
    for (unsigned i = 0; i < n; i++) {
        sum += out[i].ratio;
        assert_int_equal(out[i].gpu, 0);
        assert_string_equal(out[i].uuid, inv->gpus[0].uuid);
    }
    assert_true(fabs(sum - 0.75) < 1e-9); /* all of the GPU's processes */

    /* GPU 1, held by one container alone: a process in a pod's cgroup is its; a host process not. */
    struct gs_proc_util pu1[] = { { 7, 0.6 }, { 8, 0.3 } };
    struct gs_util_owner ow1[] = { { .pid = 7, .in_pod = true }, { .pid = 8 } };
    gs_podutil_attribute(&pl.plan, c, 1, inv->gpus[1].uuid, pu1, 2, ow1, 2, NULL, 0, out, 64, &n);
    assert_int_equal(n, 6);
    assert_true(fabs(out[4].ratio - 0.6) < 1e-9 && !strcmp(out[4].pod, "solo"));
    assert_true(fabs(out[5].ratio - 0.3) < 1e-9 && !out[5].pod[0] && out[5].gpu == 1);

    /* PodResources not known: everything is no pod's. A full output drops entries, never overflows. */
    c->pods_known = false;
    n = 0;
    gs_podutil_attribute(&pl.plan, c, 0, inv->gpus[0].uuid, pu, 5, ow, 5, NULL, 0, out, 64, &n);
    assert_int_equal(n, 1);
    assert_true(fabs(out[0].ratio - 0.75) < 1e-9);
    c->pods_known = true;
    n = 62;
    gs_podutil_attribute(&pl.plan, c, 0, inv->gpus[0].uuid, pu, 5, ow, 5, NULL, 0, out, 64, &n);
    assert_int_equal(n, 64);

    /* By pod UID (the checkpoint): pod b's UID on GPU 0, shared with others; a UID with two
     * containers on the GPU: the pod's entry with container ""; a UID the checkpoint says holds a
     * device PodResources gives another container: not trusted. */
    struct gs_uid_device ck[4] = {
        { "0a1b2c3d-0000-4000-8000-00000000000b", "main", "nvidia.com/gpu", "" },
        { "0a1b2c3d-0000-4000-8000-00000000000c", "main", "nvidia.com/gpu", "" },
        { "0a1b2c3d-0000-4000-8000-00000000000c", "side", "nvidia.com/gpu", "" },
        { "0a1b2c3d-0000-4000-8000-00000000000d", "main", "nvidia.com/gpu", "" },
    };
    memcpy(ck[0].device, d[1], sizeof(d[1]));
    memcpy(ck[1].device, d[0], sizeof(d[0]));
    memcpy(ck[2].device, d[2], sizeof(d[2]));
    memcpy(ck[3].device, d[3], sizeof(d[3])); /* GPU 1's */
    c->pod_devices[2] = (struct gs_pod_device){ "ml", "a", "side", "nvidia.com/gpu", "" };
    memcpy(c->pod_devices[2].device, d[2], sizeof(d[2]));
    struct gs_proc_util pu2[] = { { 11, 0.1 }, { 12, 0.2 }, { 13, 0.05 }, { 14, 0.3 } };
    struct gs_util_owner ow2[4] = { { .pid = 11, .in_pod = true, .pod_uid = "0a1b2c3d-0000-4000-8000-00000000000b" },
                                    { .pid = 12, .in_pod = true, .pod_uid = "0a1b2c3d-0000-4000-8000-00000000000c" },
                                    { .pid = 13, .in_pod = true, .pod_uid = "0a1b2c3d-0000-4000-8000-00000000000d" },
                                    { .pid = 14, .in_pod = true, .pod_uid = "0a1b2c3d-0000-4000-8000-0000000000ff" } };
    n = 0;
    gs_podutil_attribute(&pl.plan, c, 0, inv->gpus[0].uuid, pu2, 4, ow2, 4, ck, 4, out, 64, &n);
    assert_true(fabs(ratio_of(out, n, "b", "main") - 0.1) < 1e-9);
    assert_true(fabs(ratio_of(out, n, "a", "") - 0.2) < 1e-9);      /* a/main and a/side both on GPU 0 */
    assert_true(ratio_of(out, n, "a", "main") == 0 && ratio_of(out, n, "a", "side") == 0);
    assert_true(fabs(ratio_of(out, n, "", "") - 0.35) < 1e-9);      /* 13: its pod holds GPU 1 only; 14: unknown */
    c->pod_devices[2] = (struct gs_pod_device){ "ml", "idle", "main", "nvidia.com/gpu", "" };
    memcpy(c->pod_devices[2].device, d[2], sizeof(d[2]));
    n = 0;
    gs_podutil_attribute(&pl.plan, c, 0, inv->gpus[0].uuid, pu2, 4, ow2, 4, ck, 4, out, 64, &n);
    assert_true(fabs(ratio_of(out, n, "a", "main") - 0.2) < 1e-9);  /* c's "side" is idle/main's: not c's */
    /* GPU 1, held by "solo" alone: a process whose pod the checkpoint places elsewhere is not its */
    struct gs_proc_util pu3[] = { { 21, 0.4 }, { 22, 0.1 } };
    struct gs_util_owner ow3[2] = { { .pid = 21, .in_pod = true, .pod_uid = "0a1b2c3d-0000-4000-8000-00000000000b" },
                                    { .pid = 22, .in_pod = true, .pod_uid = "0a1b2c3d-0000-4000-8000-00000000000d" } };
    n = 0;
    gs_podutil_attribute(&pl.plan, c, 1, inv->gpus[1].uuid, pu3, 2, ow3, 2, ck, 4, out, 64, &n);
    assert_true(fabs(ratio_of(out, n, "", "") - 0.5) < 1e-9); /* 21 and 22 */
    /* 22: UID d, whose container the checkpoint gives on GPU 1, but PodResources names "solo" there */
    assert_true(fabs(ratio_of(out, n, "solo", "srv") - 0.0) < 1e-9);

    /* DRA: pods known by UID from the kubelet's DRA checkpoint, on a GPU no PodResources device
     * is of: each holder has its series, a process goes to its pod's by the UID of its cgroup,
     * others (a host process, a pod of no claim here, a pod in a cgroup without a UID) to the
     * no-pod series; a pod with two claims on the GPU has one series. */
    unsigned n_pd = c->n_pod_devices;
    c->n_pod_devices = 0;
    const char *ua = "82f9116e-74f7-4081-b7e6-7cc3bb96e84e", *ub = "d63f6c97-9ee6-48c2-9134-05c97a797173";
    struct gs_dra_holder dra[4] = {
        { .gpu = 0, .gi = -1, .ns = "ml", .pod = "a", .container = "main" },
        { .gpu = 0, .gi = -1, .ns = "ml", .pod = "b", .container = "" },
        { .gpu = 0, .gi = -1, .ns = "ml", .pod = "a", .container = "main" }, /* a's second claim */
        { .gpu = 1, .gi = -1, .ns = "ml", .pod = "other", .container = "main" },
    };
    snprintf(dra[0].uid, sizeof(dra[0].uid), "%s", ua);
    snprintf(dra[1].uid, sizeof(dra[1].uid), "%s", ub);
    snprintf(dra[2].uid, sizeof(dra[2].uid), "%s", ua);
    snprintf(dra[3].uid, sizeof(dra[3].uid), "0a1b2c3d-0000-4000-8000-00000000000e");
    struct gs_proc_util pud[] = { { 1, 0.3 }, { 2, 0.1 }, { 3, 0.6 }, { 4, 0.05 }, { 5, 0.07 }, { 6, 0.02 } };
    struct gs_util_owner owd[6] = { { .pid = 1, .in_pod = true }, { .pid = 2, .in_pod = true },
                                    { .pid = 3, .in_pod = true }, { .pid = 4 },
                                    { .pid = 5, .in_pod = true }, { .pid = 6, .in_pod = true } };
    snprintf(owd[0].pod_uid, sizeof(owd[0].pod_uid), "%s", ua);
    snprintf(owd[1].pod_uid, sizeof(owd[1].pod_uid), "%s", ua);
    snprintf(owd[2].pod_uid, sizeof(owd[2].pod_uid), "%s", ub);
    snprintf(owd[4].pod_uid, sizeof(owd[4].pod_uid), "0a1b2c3d-0000-4000-8000-00000000000e"); /* GPU 1's pod */
    n = 0;
    gs_podutil_attribute_dra(&pl.plan, c, 0, inv->gpus[0].uuid, pud, 6, owd, 6, NULL, 0, dra, 4, out, 64, &n);
    assert_int_equal(n, 3); /* a, b, no pod */
    assert_true(fabs(ratio_of(out, n, "a", "main") - 0.4) < 1e-9);
    assert_true(fabs(ratio_of(out, n, "b", "") - 0.6) < 1e-9);
    assert_true(fabs(ratio_of(out, n, "", "") - 0.14) < 1e-9); /* 4 host, 5 GPU 1's pod, 6 no UID */
    for (unsigned i = 0; i < n; i++)
        assert_string_equal(out[i].ns, out[i].pod[0] ? "ml" : "");
    /* without the DRA holders (the checkpoint unread) everything is no pod's */
    n = 0;
    gs_podutil_attribute_dra(&pl.plan, c, 0, inv->gpus[0].uuid, pud, 6, owd, 6, NULL, 0, NULL, 0, out, 64, &n);
    assert_int_equal(n, 1);
    assert_true(fabs(out[0].ratio - 1.0) < 1e-9); /* 1.14, at most 1 */
    /* GPU 1: its holder's series, 0 while it does not run */
    n = 0;
    gs_podutil_attribute_dra(&pl.plan, c, 1, inv->gpus[1].uuid, pud, 0, owd, 0, NULL, 0, dra, 4, out, 64, &n);
    assert_int_equal(n, 2);
    assert_true(ratio_of(out, n, "other", "main") == 0 && out[0].gpu == 1);
    c->n_pod_devices = n_pd;

    /* The metric's text. */
    c->n_pod_util = 2;
    c->pod_util[0] = (struct gs_pod_util){ "ml", "a", "main", 0, "", 0.3 };
    c->pod_util[1] = (struct gs_pod_util){ "", "", "", 0, "", 0.125 };
    snprintf(c->pod_util[0].uuid, sizeof(c->pod_util[0].uuid), "%s", inv->gpus[0].uuid);
    snprintf(c->pod_util[1].uuid, sizeof(c->pod_util[1].uuid), "%s", inv->gpus[0].uuid);
    char *buf = malloc(1 << 20);
    assert_non_null(buf);
    assert_true(gs_metrics_format(inv, &pl.plan, NULL, c, buf, 1 << 20) > 0);
    char line[512];
    snprintf(line, sizeof(line),
             "gpuslice_pod_gpu_utilization_ratio{namespace=\"ml\",pod=\"a\",container=\"main\",gpu=\"0\",UUID=\"%s\"} 0.3000",
             inv->gpus[0].uuid);
    assert_true(fx_has_line(buf, line));
    snprintf(line, sizeof(line),
             "gpuslice_pod_gpu_utilization_ratio{namespace=\"\",pod=\"\",container=\"\",gpu=\"0\",UUID=\"%s\"} 0.1250",
             inv->gpus[0].uuid);
    assert_true(fx_has_line(buf, line));
    assert_true(fx_has_line(buf, "# TYPE gpuslice_pod_gpu_utilization_ratio gauge"));
    free(buf);
    free(c);
    fx_plan_free(&pl);
    free(inv);
}

/* MIG: a GPU instance held by one container gets its GPM figure; shared by several, or held by
 * none, the figure is the instance's no-pod entry; the entries carry the instance's labels. */
static void test_attribution_mig(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("580.65.06", 13000);
    struct gs_gpu *g = fx_gpu(inv, "NVIDIA H100 80GB HBM3", FX_HOPPER, 9, 0, 80);
    fx_mig(g, "3g.40gb", 1, 0, 3, 40192, 60);
    fx_mig(g, "3g.40gb", 2, 0, 3, 40192, 60);
    struct fx_planned pl = fx_plan(inv, "version: v1\nflags:\n  migStrategy: mixed\n", NULL);
    struct gs_metrics_counters *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    c->pods_known = true;
    c->n_pod_devices = 1;
    c->pod_devices[0] = (struct gs_pod_device){ "ml", "big", "main", "nvidia.com/mig-3g.40gb", "" };
    memcpy(c->pod_devices[0].device, g->mig[0].uuid, sizeof(c->pod_devices[0].device));
    static struct gs_pod_util out[16];
    unsigned n = 0;
    gs_podutil_attribute_mig(&pl.plan, c, 0, g->uuid, &g->mig[0], 0.35, out, 16, &n);
    gs_podutil_attribute_mig(&pl.plan, c, 0, g->uuid, &g->mig[1], 0.2, out, 16, &n);
    assert_int_equal(n, 3);
    assert_true(fabs(ratio_of(out, 2, "big", "main") - 0.35) < 1e-9 && ratio_of(out, 2, "", "") == 0);
    assert_true(!out[2].pod[0] && fabs(out[2].ratio - 0.2) < 1e-9 && out[2].gi_id == 2);
    assert_string_equal(out[0].mig_uuid, g->mig[0].uuid);
    assert_string_equal(out[2].mig_uuid, g->mig[1].uuid);
    /* a second container on the same instance: not split */
    c->n_pod_devices = 2;
    c->pod_devices[1] = c->pod_devices[0];
    snprintf(c->pod_devices[1].container, sizeof(c->pod_devices[1].container), "side");
    n = 0;
    gs_podutil_attribute_mig(&pl.plan, c, 0, g->uuid, &g->mig[0], 0.35, out, 16, &n);
    assert_int_equal(n, 3);
    assert_true(ratio_of(out, n, "big", "main") == 0 && ratio_of(out, n, "big", "side") == 0);
    assert_true(fabs(ratio_of(out, n, "", "") - 0.35) < 1e-9);
    /* the text */
    c->n_pod_util = 1;
    c->pod_util[0] = out[0];
    char *buf = malloc(1 << 20);
    assert_non_null(buf);
    assert_true(gs_metrics_format(inv, &pl.plan, NULL, c, buf, 1 << 20) > 0);
    char line[512];
    snprintf(line, sizeof(line),
             "gpuslice_pod_gpu_utilization_ratio{namespace=\"ml\",pod=\"big\",container=\"main\",gpu=\"0\",UUID=\"%s\","
             "GPU_I_ID=\"1\",GPU_I_PROFILE=\"3g.40gb\",mig_uuid=\"%s\"} 0.0000",
             g->uuid, g->mig[0].uuid);
    assert_true(fx_has_line(buf, line));
    free(buf);
    /* DRA: the pod whose claim holds a MIG device of instance 1 (no device-plugin holder) gets the
     * instance's figure; instance 2, of no claim, keeps it in its no-pod series */
    c->n_pod_devices = 0;
    struct gs_dra_holder dra[1] = { { .uid = "5716f59f-4425-4828-9f2c-8778dd1df8a8", .ns = "ml", .pod = "mig",
                                      .container = "main", .gpu = 0, .gi = 1 } };
    n = 0;
    gs_podutil_attribute_mig_dra(&pl.plan, c, 0, g->uuid, &g->mig[0], 0.4, dra, 1, out, 16, &n);
    gs_podutil_attribute_mig_dra(&pl.plan, c, 0, g->uuid, &g->mig[1], 0.2, dra, 1, out, 16, &n);
    assert_int_equal(n, 3);
    assert_true(!strcmp(out[0].pod, "mig") && fabs(out[0].ratio - 0.4) < 1e-9 && out[0].gi_id == 1);
    assert_string_equal(out[0].mig_uuid, g->mig[0].uuid);
    assert_true(!out[1].pod[0] && out[1].ratio == 0 && out[1].gi_id == 1);
    assert_true(!out[2].pod[0] && fabs(out[2].ratio - 0.2) < 1e-9 && out[2].gi_id == 2);
    free(c);
    fx_plan_free(&pl);
    free(inv);
}

static void test_cgroup_in_pod(void **state) {
    (void)state;
    assert_true(gs_cgroup_in_pod("0::/kubepods/burstable/pod1234-5678/abcdef\n"));
    assert_true(gs_cgroup_in_pod("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice/"
                                 "cri-containerd-abc.scope\n"));
    assert_true(gs_cgroup_in_pod("12:memory:/kubepods/besteffort/podx/y\n1:name=systemd:/\n"));
    assert_false(gs_cgroup_in_pod("0::/user.slice/user-1000.slice/session-3.scope\n"));
    assert_false(gs_cgroup_in_pod("0::/system.slice/notkubepods/x\n"));
    assert_false(gs_cgroup_in_pod("0::/system.slice/kubepodsx\n"));
    assert_false(gs_cgroup_in_pod(""));
    char uid[GS_POD_UID_MAX];
    assert_int_equal(gs_cgroup_pod_uid("0::/kubepods/burstable/pod0a1b2c3d-0000-4000-8000-00000000000b/abc\n", uid), 0);
    assert_string_equal(uid, "0a1b2c3d-0000-4000-8000-00000000000b");
    assert_int_equal(gs_cgroup_pod_uid("0::/kubepods/pod0a1b2c3d-0000-4000-8000-00000000000b/abc\n", uid), 0);
    assert_string_equal(uid, "0a1b2c3d-0000-4000-8000-00000000000b");
    assert_int_equal(gs_cgroup_pod_uid("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-"
                                       "pod0a1b2c3d_0000_4000_8000_00000000000b.slice/cri-containerd-abc.scope\n", uid), 0);
    assert_string_equal(uid, "0a1b2c3d-0000-4000-8000-00000000000b");
    assert_int_equal(gs_cgroup_pod_uid("0::/kubepods/burstable/podxyz/abc\n", uid), -ENOENT);
    assert_string_equal(uid, "");
    assert_int_equal(gs_cgroup_pod_uid("0::/system.slice/pod0a1b2c3d-0000-4000-8000-00000000000b/x\n", uid), -ENOENT);
    assert_int_equal(gs_cgroup_pod_uid("0::/kubepods/burstable/pod0a1b2c3d-0000-4000-8000-00000000000b0a1b2c3d\n", uid), -ENOENT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fold_means_over_periods),
        cmocka_unit_test(test_fold_jittered_timestamps),
        cmocka_unit_test(test_fold_read_early_on_the_grid),
        cmocka_unit_test(test_fold_period_unknown),
        cmocka_unit_test(test_attribution),
        cmocka_unit_test(test_attribution_mig),
        cmocka_unit_test(test_cgroup_in_pod),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
