/* test_plan.c: what the node advertises, per policy, from hand-made inventories (no GPU, no
 * library): whole GPUs, time-sliced replicas (NVIDIA's file semantics), per-GPU rules, MIG single
 * and mixed, health, lost GPUs, and the Allocate / GetPreferredAllocation answers. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/alloc.h"
#include "core/plan.h"

static struct gs_inventory *inv_new(unsigned n, const char *name) {
    struct gs_inventory *inv = calloc(1, sizeof(*inv));
    inv->n_gpus = n;
    for (unsigned i = 0; i < n; i++) {
        struct gs_gpu *g = &inv->gpus[i];
        g->index = g->minor = i;
        g->numa_node = i < n / 2 ? 0 : 1;
        snprintf(g->uuid, sizeof(g->uuid), "GPU-%08u-0000-0000-0000-000000000000", i);
        snprintf(g->name, sizeof(g->name), "%s", name);
    }
    return inv;
}

static void add_mig(struct gs_gpu *g, const char *profile, unsigned gi, unsigned slices) {
    g->mig_capable = true;
    g->mig_current = g->mig_pending = 1;
    struct gs_mig_device *m = &g->mig[g->n_mig++];
    memset(m, 0, sizeof(*m));
    snprintf(m->uuid, sizeof(m->uuid), "MIG-%08u-%04u-0000-0000-000000000000", g->index, gi);
    snprintf(m->profile, sizeof(m->profile), "%s", profile);
    m->gi_id = gi;
    m->gi_slices = m->ci_slices = slices;
}

static struct gs_policy *policy(const char *yaml) {
    struct gs_policy *p = calloc(1, sizeof(*p));
    char err[512];
    if (gs_policy_parse("test.yaml", yaml, strlen(yaml), p, err, sizeof(err)) < 0)
        fail_msg("policy: %s", err);
    return p;
}

static void test_default_whole(void **state) {
    (void)state;
    struct gs_inventory *inv = inv_new(2, "Tesla T4");
    struct gs_policy *pol = policy("version: v1\n");
    struct gs_plan plan;
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    assert_int_equal(plan.n_resources, 1);
    const struct gs_resource *r = gs_plan_resource(&plan, "nvidia.com/gpu");
    assert_non_null(r);
    assert_int_equal(r->n_devices, 2);
    assert_string_equal(r->devices[1].id, inv->gpus[1].uuid);
    assert_int_equal(r->devices[1].kind, GS_DEV_WHOLE);
    assert_false(r->replicated);
    gs_plan_free(&plan);
    free(pol);
    free(inv);
}

/* NVIDIA's time-slicing file: every GPU x replicas, renamed to .shared by default when asked. */
static void test_nvidia_time_slicing(void **state) {
    (void)state;
    struct gs_inventory *inv = inv_new(8, "NVIDIA H100 80GB HBM3");
    struct gs_policy *pol = policy("version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n"
                                   "    failRequestsGreaterThanOne: true\n    resources:\n"
                                   "    - name: nvidia.com/gpu\n      replicas: 10\n");
    struct gs_plan plan;
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    assert_int_equal(plan.n_resources, 1);
    const struct gs_resource *r = gs_plan_resource(&plan, "nvidia.com/gpu.shared");
    assert_non_null(r);
    assert_int_equal(r->n_devices, 80);
    assert_true(r->replicated && r->fail_gt_one);
    char want[128];
    snprintf(want, sizeof(want), "%s::9", inv->gpus[7].uuid);
    assert_string_equal(r->devices[79].id, want);
    assert_int_equal(r->devices[79].replica, 9);
    gs_plan_free(&plan);
    free(pol);
    /* renameByDefault false: the replicas are nvidia.com/gpu itself; devices: list honoured. */
    pol = policy("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
                 "      replicas: 2\n      devices: [\"0\", \"GPU-00000003-0000-0000-0000-000000000000\"]\n");
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    r = gs_plan_resource(&plan, "nvidia.com/gpu");
    assert_int_equal(r->n_devices, 2 + 2 + 6); /* GPUs 0 and 3 x2, six whole */
    assert_int_equal(plan.gpus[0].mode, GS_MODE_TIME_SLICING);
    assert_int_equal(plan.gpus[3].mode, GS_MODE_TIME_SLICING);
    assert_int_equal(plan.gpus[1].mode, GS_MODE_WHOLE);
    gs_plan_free(&plan);
    free(pol);
    free(inv);
}

/* Per-GPU rules: GPUs 0-3 MIG, 4-5 time-sliced x4, 6 whole, 7 disabled. */
static void test_heterogeneous(void **state) {
    (void)state;
    struct gs_inventory *inv = inv_new(8, "NVIDIA H100 80GB HBM3");
    for (unsigned i = 0; i < 4; i++) {
        add_mig(&inv->gpus[i], "3g.40gb", 1, 3);
        add_mig(&inv->gpus[i], "1g.10gb", 9, 1);
    }
    struct gs_policy *pol = policy("version: v1\nflags:\n  migStrategy: mixed\ngpuslice:\n  gpus:\n"
                                   "  - index: \"0-3\"\n    mode: mig\n"
                                   "  - index: \"4,5\"\n    mode: time-slicing\n    replicas: 4\n"
                                   "  - index: 6\n    mode: whole\n  - index: 7\n    mode: disabled\n");
    struct gs_plan plan;
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    assert_int_equal(gs_plan_resource(&plan, "nvidia.com/mig-3g.40gb")->n_devices, 4);
    assert_int_equal(gs_plan_resource(&plan, "nvidia.com/mig-1g.10gb")->n_devices, 4);
    assert_int_equal(gs_plan_resource(&plan, "nvidia.com/gpu.shared")->n_devices, 8);
    const struct gs_resource *whole = gs_plan_resource(&plan, "nvidia.com/gpu");
    assert_int_equal(whole->n_devices, 1);
    assert_int_equal(whole->devices[0].gpu, 6);
    assert_int_equal(plan.gpus[7].mode, GS_MODE_DISABLED);
    assert_null(plan.gpus[7].resource);
    assert_int_equal(plan.n_resources, 4);
    gs_plan_free(&plan);
    free(pol);
    free(inv);
}

static void test_mig_strategies(void **state) {
    (void)state;
    struct gs_inventory *inv = inv_new(2, "NVIDIA A100-SXM4-40GB");
    add_mig(&inv->gpus[0], "1g.5gb", 7, 1);
    add_mig(&inv->gpus[0], "1g.5gb+me", 8, 1);
    add_mig(&inv->gpus[1], "1g.5gb", 7, 1);
    /* a CI smaller than its GI is never advertised */
    add_mig(&inv->gpus[1], "1c.3g.20gb", 1, 3);
    inv->gpus[1].mig[1].ci_slices = 1;
    struct gs_policy *pol = policy("version: v1\nflags:\n  migStrategy: mixed\n");
    struct gs_plan plan;
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    assert_int_equal(gs_plan_resource(&plan, "nvidia.com/mig-1g.5gb")->n_devices, 2);
    assert_non_null(gs_plan_resource(&plan, "nvidia.com/mig-1g.5gb.me")); /* '+' -> '.' */
    assert_int_equal(plan.n_resources, 2);
    gs_plan_free(&plan);
    free(pol);
    /* single: one profile on the node, advertised as nvidia.com/gpu; a second profile is a warning. */
    pol = policy("version: v1\nflags:\n  migStrategy: single\n");
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    const struct gs_resource *r = gs_plan_resource(&plan, "nvidia.com/gpu");
    assert_int_equal(r->n_devices, 2);
    assert_int_equal(r->devices[0].kind, GS_DEV_MIG);
    assert_int_equal(plan.n_resources, 1);
    assert_true(plan.n_warnings >= 1);
    assert_non_null(strstr(plan.warnings[0], "migStrategy single needs one MIG profile"));
    gs_plan_free(&plan);
    free(pol);
    /* none: MIG GPUs are not advertised at all. */
    pol = policy("version: v1\n");
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    assert_int_equal(plan.n_resources, 0);
    assert_int_equal(plan.n_warnings, 2);
    gs_plan_free(&plan);
    free(pol);
    free(inv);
}

/* An Xid on a GPU makes every device on it Unhealthy (all replicas), none elsewhere; a lost GPU
 * likewise; gs_plan_equal sees the difference. */
static void test_health(void **state) {
    (void)state;
    struct gs_inventory *inv = inv_new(2, "NVIDIA L4");
    struct gs_policy *pol = policy("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                                   "    - name: nvidia.com/gpu\n      replicas: 3\n");
    struct gs_plan a, b;
    struct gs_health h = { 0 };
    assert_int_equal(gs_plan_build(inv, pol, &h, &a), 0);
    h.unhealthy[1] = true;
    assert_int_equal(gs_plan_build(inv, pol, &h, &b), 0);
    assert_false(gs_plan_equal(&a, &b));
    const struct gs_resource *r = gs_plan_resource(&b, "nvidia.com/gpu");
    for (unsigned i = 0; i < r->n_devices; i++)
        assert_int_equal(r->devices[i].healthy, r->devices[i].gpu != 1);
    gs_plan_free(&b);
    h.unhealthy[1] = false;
    inv->gpus[0].lost = true;
    assert_int_equal(gs_plan_build(inv, pol, &h, &b), 0);
    r = gs_plan_resource(&b, "nvidia.com/gpu");
    assert_false(r->devices[0].healthy);
    assert_true(r->devices[5].healthy);
    gs_plan_free(&b);
    assert_int_equal(gs_plan_build(inv, pol, NULL, &b), 0);
    inv->gpus[0].lost = false;
    gs_plan_free(&a);
    assert_int_equal(gs_plan_build(inv, pol, NULL, &a), 0);
    assert_false(gs_plan_equal(&a, &b));
    gs_plan_free(&a);
    gs_plan_free(&b);
    free(pol);
    free(inv);
}

static bool exists_in(const char *path, void *ctx) {
    for (const char *const *p = ctx; *p; p++)
        if (strcmp(*p, path) == 0)
            return true;
    return false;
}

static void test_allocate(void **state) {
    (void)state;
    struct gs_inventory *inv = inv_new(2, "NVIDIA L4");
    add_mig(&inv->gpus[1], "1g.10gb", 7, 1); /* (mixed below only matters for the MIG case) */
    struct gs_policy *pol = policy("version: v1\nflags:\n  migStrategy: mixed\n  nvidiaDevRoot: /host\n"
                                   "  plugin:\n    passDeviceSpecs: true\nsharing:\n  timeSlicing:\n"
                                   "    failRequestsGreaterThanOne: true\n    resources:\n"
                                   "    - name: nvidia.com/gpu\n      replicas: 4\n");
    struct gs_plan plan;
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    const struct gs_resource *r = gs_plan_resource(&plan, "nvidia.com/gpu");
    char id0[128], id1[128];
    snprintf(id0, sizeof(id0), "%s::0", inv->gpus[0].uuid);
    snprintf(id1, sizeof(id1), "%s::3", inv->gpus[0].uuid);
    const char *files[] = { "/host/dev/nvidiactl", "/host/dev/nvidia0", "/host/dev/nvidia1",
                            "/host/dev/nvidia-caps/nvidia-cap66", "/host/dev/nvidia-caps/nvidia-cap67", NULL };
    struct gs_alloc_response resp;
    char err[256];
    const char *one[] = { id0 };
    assert_int_equal(gs_allocate(r, one, 1, pol, NULL, exists_in, files, &resp, err, sizeof(err)), 0);
    assert_string_equal(resp.visible_devices, inv->gpus[0].uuid);
    assert_int_equal(resp.n_devspecs, 2);
    assert_string_equal(resp.devspecs[0].container_path, "/dev/nvidiactl");
    assert_string_equal(resp.devspecs[1].host_path, "/host/dev/nvidia0");
    gs_alloc_response_free(&resp);
    const char *two[] = { id0, id1 };
    assert_int_equal(gs_allocate(r, two, 2, pol, NULL, exists_in, files, &resp, err, sizeof(err)), -E2BIG);
    assert_string_equal(err, "maximum request size for shared resources is 1; found 2");
    const char *bad[] = { "GPU-nope::0" };
    assert_int_equal(gs_allocate(r, bad, 1, pol, NULL, exists_in, files, &resp, err, sizeof(err)), -ENOENT);
    assert_non_null(strstr(err, "unknown device ID 'GPU-nope::0'"));
    /* Without failRequestsGreaterThanOne two replicas of one GPU collapse to one UUID. */
    pol->ts_fail_requests_gt_one = false;
    gs_plan_free(&plan);
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    r = gs_plan_resource(&plan, "nvidia.com/gpu");
    assert_int_equal(gs_allocate(r, two, 2, pol, NULL, exists_in, files, &resp, err, sizeof(err)), 0);
    assert_string_equal(resp.visible_devices, inv->gpus[0].uuid);
    gs_alloc_response_free(&resp);
    assert_int_equal(gs_allocate(r, (const char *[]){ id0, id0 }, 2, pol, NULL, NULL, NULL, &resp, err, sizeof(err)),
                     -EINVAL);
    /* MIG: parent node plus the GI and CI capability nodes from mig-minors. */
    struct gs_mig_minors mm;
    const char *minors = "config 1\nmonitor 2\ngpu1/gi7/access 66\ngpu1/gi7/ci0/access 67\n";
    assert_int_equal(gs_mig_minors_parse("mig-minors", minors, &mm, err, sizeof(err)), 0);
    assert_int_equal(mm.n, 2);
    const struct gs_resource *mr = gs_plan_resource(&plan, "nvidia.com/mig-1g.10gb");
    const char *mig[] = { mr->devices[0].id };
    assert_int_equal(gs_allocate(mr, mig, 1, pol, &mm, exists_in, files, &resp, err, sizeof(err)), 0);
    assert_int_equal(resp.n_devspecs, 4);
    assert_string_equal(resp.devspecs[2].container_path, "/dev/nvidia-caps/nvidia-cap66");
    assert_string_equal(resp.devspecs[3].host_path, "/host/dev/nvidia-caps/nvidia-cap67");
    gs_alloc_response_free(&resp);
    /* A missing device node fails the allocation instead of starting a container without it. */
    const char *no_gpu_node[] = { "/host/dev/nvidiactl", NULL };
    assert_int_equal(gs_allocate(r, one, 1, pol, NULL, exists_in, no_gpu_node, &resp, err, sizeof(err)), -ENODEV);
    assert_string_equal(err, "device node /host/dev/nvidia0 does not exist");
    gs_mig_minors_free(&mm);
    assert_int_equal(gs_mig_minors_parse("mm", "gpu0/gi1/access x\n", &mm, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "mm:1: minor 'x' is not a number in 0..1048576");
    assert_int_equal(gs_mig_minors_parse("mm", "config 1\ngpu0/gi1/access 3 4\n", &mm, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "mm:2: expected '<path> <minor>'");
    /* numbers too large to be real are refused, not wrapped */
    assert_int_equal(gs_mig_minors_parse("mm", "gpu0/gi1/access 99999999999\n", &mm, err, sizeof(err)), -EINVAL);
    assert_int_equal(gs_mig_minors_parse("mm", "gpu99999999999/gi1/access 5\nmonitor 2\n", &mm, err, sizeof(err)), 0);
    assert_int_equal(mm.n, 0);
    gs_mig_minors_free(&mm);
    gs_plan_free(&plan);
    free(pol);
    free(inv);
}

static unsigned gpus_of(const struct gs_resource *r, const char **ids, size_t n) {
    unsigned mask = 0;
    for (size_t i = 0; i < n; i++)
        mask |= 1u << gs_resource_device(r, ids[i])->gpu;
    return mask;
}

static void test_preferred(void **state) {
    (void)state;
    struct gs_inventory *inv = inv_new(4, "NVIDIA L4");
    struct gs_policy *pol = policy("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                                   "    - name: nvidia.com/gpu\n      replicas: 4\n");
    struct gs_plan plan;
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    const struct gs_resource *r = gs_plan_resource(&plan, "nvidia.com/gpu");
    const char *avail[16], *out[16];
    for (unsigned i = 0; i < 16; i++)
        avail[i] = r->devices[i].id;
    /* distributed: 3 replicas on 3 GPUs; packed: all on one. */
    assert_int_equal(gs_preferred(r, avail, 16, NULL, 0, 3, GS_ALLOC_DISTRIBUTED, NULL, out), 3);
    assert_int_equal(__builtin_popcount(gpus_of(r, out, 3)), 3);
    assert_int_equal(gs_preferred(r, avail, 16, NULL, 0, 3, GS_ALLOC_PACKED, NULL, out), 3);
    assert_int_equal(__builtin_popcount(gpus_of(r, out, 3)), 1);
    /* distributed prefers the least used GPUs: GPUs 0 and 1 have replicas in use. */
    const char *partial[16];
    unsigned k = 0;
    for (unsigned i = 0; i < 16; i++)
        if (!(r->devices[i].gpu == 0 && r->devices[i].replica < 2) && !(r->devices[i].gpu == 1 && r->devices[i].replica < 1))
            partial[k++] = r->devices[i].id;
    assert_int_equal(k, 13);
    assert_int_equal(gs_preferred(r, partial, k, NULL, 0, 2, GS_ALLOC_DISTRIBUTED, NULL, out), 2);
    assert_int_equal(gpus_of(r, out, 2), (1u << 2) | (1u << 3));
    /* packed prefers the most used GPU that can hold the request. */
    assert_int_equal(gs_preferred(r, partial, k, NULL, 0, 2, GS_ALLOC_PACKED, NULL, out), 2);
    assert_int_equal(gpus_of(r, out, 2), 1u << 0);
    /* must_include is always part of the answer. */
    const char *must[] = { r->devices[13].id };
    assert_int_equal(gs_preferred(r, avail, 16, must, 1, 2, GS_ALLOC_DISTRIBUTED, NULL, out), 2);
    assert_string_equal(out[0], r->devices[13].id);
    assert_int_equal(__builtin_popcount(gpus_of(r, out, 2)), 2);
    /* more than is available: as many as there are. */
    assert_int_equal(gs_preferred(r, avail, 2, NULL, 0, 5, GS_ALLOC_DISTRIBUTED, NULL, out), 2);

    /* fragmentation: GPU 0 has 2 replicas in use, GPU 1 one, GPUs 2 and 3 none, and the node's
     * requests have been for 2 replicas. One more replica: on GPU 0 it would leave a single
     * replica that no 2-replica request can use (+250 milli-GPU of fragmentation); on GPU 1 or 2
     * nothing is stranded, and GPU 1 is the more used. Distributed takes GPU 2, packed GPU 0. */
    k = 0;
    for (unsigned i = 0; i < 16; i++)
        if (!(r->devices[i].gpu == 0 && r->devices[i].replica < 2) && !(r->devices[i].gpu == 1 && r->devices[i].replica < 1))
            partial[k++] = r->devices[i].id;
    unsigned twos[GS_ALLOC_SIZE_HIST] = { [2] = 5 };
    assert_int_equal(gs_preferred(r, partial, k, NULL, 0, 1, GS_ALLOC_FRAGMENTATION, twos, out), 1);
    assert_int_equal(gpus_of(r, out, 1), 1u << 1);
    assert_int_equal(gs_preferred(r, partial, k, NULL, 0, 1, GS_ALLOC_DISTRIBUTED, twos, out), 1);
    assert_int_equal(gpus_of(r, out, 1), 1u << 2);
    assert_int_equal(gs_preferred(r, partial, k, NULL, 0, 1, GS_ALLOC_PACKED, twos, out), 1);
    assert_int_equal(gpus_of(r, out, 1), 1u << 0);
    /* With single replicas only, nothing fragments: the most used GPU with room, as packed. */
    unsigned ones[GS_ALLOC_SIZE_HIST] = { [1] = 3 };
    assert_int_equal(gs_preferred(r, partial, k, NULL, 0, 1, GS_ALLOC_FRAGMENTATION, ones, out), 1);
    assert_int_equal(gpus_of(r, out, 1), 1u << 0);
    assert_int_equal(gs_preferred(r, partial, k, NULL, 0, 1, GS_ALLOC_FRAGMENTATION, NULL, out), 1);
    assert_int_equal(gpus_of(r, out, 1), 1u << 0);
    gs_plan_free(&plan);
    free(pol);
    /* whole GPUs: stay on one NUMA node (GPUs 0,1 on node 0; 2,3 on node 1). */
    pol = policy("version: v1\n");
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    r = gs_plan_resource(&plan, "nvidia.com/gpu");
    const char *wavail[] = { r->devices[1].id, r->devices[2].id, r->devices[3].id };
    assert_int_equal(gs_preferred(r, wavail, 3, NULL, 0, 2, GS_ALLOC_DISTRIBUTED, NULL, out), 2);
    assert_int_equal(gpus_of(r, out, 2), (1u << 2) | (1u << 3));
    gs_plan_free(&plan);
    free(pol);
    free(inv);
}

/* memoryPerReplica: a replica carries its VRAM quota; Allocate lists, per GPU the container sees
 * (its CUDA ordinal = position in NVIDIA_VISIBLE_DEVICES), the sum of its replicas' quotas. */
static void test_guard_quotas(void **state) {
    (void)state;
    struct gs_inventory *inv = inv_new(2, "NVIDIA L4");
    inv->gpus[0].mem_total = inv->gpus[1].mem_total = 24ULL << 30;
    struct gs_policy *pol = policy("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                                   "    - name: nvidia.com/gpu\n      replicas: 4\n      memoryPerReplica: auto\n");
    struct gs_plan plan;
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    const struct gs_resource *r = gs_plan_resource(&plan, "nvidia.com/gpu");
    assert_int_equal(r->devices[0].quota, 6ULL << 30);
    char err[256];
    struct gs_alloc_response resp;
    const char *ids[] = { r->devices[5].id, r->devices[0].id, r->devices[1].id }; /* GPU 1 x1, GPU 0 x2 */
    assert_int_equal(gs_allocate(r, ids, 3, pol, NULL, NULL, NULL, &resp, err, sizeof(err)), 0);
    assert_int_equal(resp.n_guarded, 2);
    assert_string_equal(resp.guarded[0].uuid, inv->gpus[1].uuid);
    assert_int_equal(resp.guarded[0].ordinal, 0);
    assert_int_equal(resp.guarded[0].bytes, 6ULL << 30);
    assert_string_equal(resp.guarded[1].uuid, inv->gpus[0].uuid);
    assert_int_equal(resp.guarded[1].ordinal, 1);
    assert_int_equal(resp.guarded[1].bytes, 12ULL << 30); /* two replicas: twice the quota */
    gs_alloc_response_free(&resp);
    gs_plan_free(&plan);
    free(pol);
    /* An explicit size; no memoryPerReplica: no guard. */
    pol = policy("version: v1\ngpuslice:\n  gpus:\n  - index: 0\n    mode: time-slicing\n    replicas: 2\n"
                 "    memoryPerReplica: 20GiB\n  - index: 1\n    mode: time-slicing\n    replicas: 2\n");
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    assert_int_equal(plan.n_errors, 0);
    r = gs_plan_resource(&plan, "nvidia.com/gpu.shared");
    assert_int_equal(r->devices[0].quota, 20ULL << 30);
    assert_int_equal(r->devices[2].quota, 0);
    gs_plan_free(&plan);
    free(pol);
    /* Larger than the GPU (it used to be capped at the GPU, silently): an error at the setting's
     * position, and that GPU is not advertised. */
    pol = policy("version: v1\ngpuslice:\n  gpus:\n  - index: 0\n    mode: time-slicing\n    replicas: 2\n"
                 "    memoryPerReplica: 40GiB\n  - index: 1\n    mode: time-slicing\n    replicas: 2\n");
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    assert_int_equal(plan.n_errors, 1);
    assert_string_equal(plan.errors[0], "test.yaml:7:23: gpuslice.gpus[0].memoryPerReplica: 40 GiB is more than the "
                                        "24 GiB of GPU 0 (NVIDIA L4): its replicas are not advertised (at most 24 "
                                        "GiB, or auto)");
    assert_string_equal(plan.warnings[0], plan.errors[0]); /* the agent logs warnings */
    assert_int_equal(plan.gpus[0].mode, GS_MODE_DISABLED);
    r = gs_plan_resource(&plan, "nvidia.com/gpu.shared");
    assert_int_equal(r->n_devices, 2);
    assert_int_equal(r->devices[0].gpu, 1);
    assert_int_equal(r->devices[0].quota, 0);
    const char *one[] = { r->devices[0].id };
    assert_int_equal(gs_allocate(r, one, 1, pol, NULL, NULL, NULL, &resp, err, sizeof(err)), 0);
    assert_int_equal(resp.n_guarded, 0);
    gs_alloc_response_free(&resp);
    gs_plan_free(&plan);
    free(pol);
    /* bad values are policy errors */
    struct gs_policy p2;
    const char *bad = "version: v1\ngpuslice:\n  gpus:\n  - index: 0\n    mode: whole\n    memoryPerReplica: 1GiB\n";
    assert_int_equal(gs_policy_parse("t.yaml", bad, strlen(bad), &p2, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "t.yaml:6:23: gpuslice.gpus[0].memoryPerReplica: only allowed with mode time-slicing"));
    bad = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n"
          "      memoryPerReplica: lots\n";
    assert_int_equal(gs_policy_parse("t.yaml", bad, strlen(bad), &p2, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "memoryPerReplica: expected auto or a size"));
    free(inv);
}

/* MPS: replicas with per-replica limits, on whole GPUs and on MIG instances; Allocate's MPS part. */
static void test_mps(void **state) {
    (void)state;
    struct gs_inventory *inv = inv_new(3, "NVIDIA A100-SXM4-40GB");
    for (unsigned i = 0; i < 3; i++)
        inv->gpus[i].mem_total = 40ULL << 30;
    add_mig(&inv->gpus[2], "3g.20gb", 1, 4);
    inv->gpus[2].mig[0].mem_mib = 20 * 1024;
    add_mig(&inv->gpus[2], "1g.5gb+me", 9, 1);
    inv->gpus[2].mig[1].mem_mib = 5 * 1024;
    struct gs_policy *pol = policy("version: v1\nflags:\n  mpsRoot: /run/mps\n  migStrategy: mixed\n"
                                   "gpuslice:\n  gpus:\n"
                                   "  - index: 0\n    mode: mps\n    replicas: 4\n    memoryPerReplica: auto\n"
                                   "  - index: 1\n    mode: mps\n    replicas: 3\n    computePerReplica: 20%\n"
                                   "    pinnedMemoryPerReplica: 50GiB\n    resourceName: nvidia.com/gpu.mps20\n"
                                   "  - index: 2\n    mode: mps\n    replicas: 2\n");
    struct gs_plan plan;
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    const struct gs_resource *r = gs_plan_resource(&plan, "nvidia.com/gpu.shared");
    assert_non_null(r);
    assert_true(r->mps && r->replicated && r->fail_gt_one); /* MPS's default: one replica per container */
    assert_int_equal(r->n_devices, 4);
    assert_int_equal(r->devices[3].kind, GS_DEV_MPS);
    assert_string_equal(r->devices[3].id, "GPU-00000000-0000-0000-0000-000000000000::3");
    assert_int_equal(r->devices[3].mps_percent, 25);
    assert_int_equal(r->devices[3].mps_pinned, 10ULL << 30);
    assert_int_equal(r->devices[3].quota, 10ULL << 30); /* the guard's quota, over all of a container's processes */
    const struct gs_resource *r20 = gs_plan_resource(&plan, "nvidia.com/gpu.mps20");
    assert_int_equal(r20->n_devices, 3);
    assert_int_equal(r20->devices[0].mps_percent, 20);
    assert_int_equal(r20->devices[0].mps_pinned, 40ULL << 30); /* capped at the GPU's memory */
    assert_int_equal(r20->devices[0].quota, 0);                /* no memoryPerReplica: no guard */
    assert_int_equal(plan.gpus[1].mode, GS_MODE_MPS);
    /* MPS on MIG: each instance has its own daemon, named by its MIG UUID */
    const struct gs_resource *rm = gs_plan_resource(&plan, "nvidia.com/mig-3g.20gb.shared");
    assert_non_null(rm);
    assert_int_equal(rm->n_devices, 2);
    assert_true(rm->devices[0].mig);
    assert_string_equal(rm->devices[1].id, "MIG-00000002-0001-0000-0000-000000000000::1");
    assert_string_equal(rm->devices[1].uuid, "MIG-00000002-0001-0000-0000-000000000000");
    assert_int_equal(rm->devices[1].mps_pinned, 10ULL << 30);
    assert_non_null(gs_plan_resource(&plan, "nvidia.com/mig-1g.5gb.me.shared"));

    char err[256];
    struct gs_alloc_response resp;
    const char *one[] = { r->devices[1].id };
    assert_int_equal(gs_allocate(r, one, 1, pol, NULL, NULL, NULL, &resp, err, sizeof(err)), 0);
    assert_string_equal(resp.visible_devices, inv->gpus[0].uuid);
    assert_string_equal(resp.mps_uuid, inv->gpus[0].uuid);
    assert_int_equal(resp.n_extra_mounts, 2);
    assert_string_equal(resp.extra_mounts[0].container_path, "/mps/pipe");
    assert_string_equal(resp.extra_mounts[0].host_path, "/run/mps/GPU-00000000-0000-0000-0000-000000000000/pipe");
    assert_false(resp.extra_mounts[0].read_only);
    assert_string_equal(resp.extra_mounts[1].container_path, "/dev/shm");
    assert_string_equal(resp.extra_mounts[1].host_path, "/run/mps/shm");
    assert_int_equal(resp.n_envs, 3);
    assert_string_equal(resp.envs[0].key, "CUDA_MPS_PIPE_DIRECTORY");
    assert_string_equal(resp.envs[0].value, "/mps/pipe");
    assert_string_equal(resp.envs[1].key, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    assert_string_equal(resp.envs[1].value, "25");
    assert_string_equal(resp.envs[2].key, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
    assert_string_equal(resp.envs[2].value, "0=10240M");
    assert_int_equal(resp.n_guarded, 1); /* the agent adds the guard's files to the MPS mounts */
    assert_int_equal(resp.guarded[0].bytes, 10ULL << 30);
    gs_alloc_response_free(&resp);
    const char *two[] = { r->devices[0].id, r->devices[1].id };
    assert_int_equal(gs_allocate(r, two, 2, pol, NULL, NULL, NULL, &resp, err, sizeof(err)), -E2BIG);
    gs_plan_free(&plan);
    free(pol);

    /* Several replicas per container: the shares add up; one daemon per answer. */
    pol = policy("version: v1\nsharing:\n  mps:\n    failRequestsGreaterThanOne: false\n    resources:\n"
                 "    - name: nvidia.com/gpu\n      replicas: 3\n      computePerReplica: 30%\n");
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    r = gs_plan_resource(&plan, "nvidia.com/gpu");
    assert_int_equal(r->n_devices, 6); /* GPU 2 is in MIG mode: not shared by sharing.mps */
    const char *same[] = { r->devices[0].id, r->devices[2].id, r->devices[1].id };
    assert_int_equal(gs_allocate(r, same, 3, pol, NULL, NULL, NULL, &resp, err, sizeof(err)), 0);
    assert_string_equal(resp.envs[1].value, "90");
    gs_alloc_response_free(&resp);
    const char *across[] = { r->devices[0].id, r->devices[3].id };
    assert_int_equal(gs_allocate(r, across, 2, pol, NULL, NULL, NULL, &resp, err, sizeof(err)), -EXDEV);
    assert_non_null(strstr(err, "MPS replicas of one container must share one GPU"));
    gs_plan_free(&plan);
    free(pol);

    /* Time-sliced and MPS replicas never share a resource name; rules for missing GPUs are said. */
    pol = policy("version: v1\ngpuslice:\n  gpus:\n  - index: 0\n    mode: time-slicing\n    replicas: 2\n"
                 "  - index: 1\n    mode: mps\n    replicas: 2\n  - index: \"5-6\"\n    mode: mps\n    replicas: 2\n");
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    r = gs_plan_resource(&plan, "nvidia.com/gpu.shared");
    assert_int_equal(r->n_devices, 2);
    assert_false(r->mps);
    assert_int_equal(plan.gpus[1].mode, GS_MODE_DISABLED);
    bool conflict = false, missing = false;
    for (unsigned i = 0; i < plan.n_warnings; i++) {
        conflict |= strstr(plan.warnings[i], "GPU 1: nvidia.com/gpu.shared already carries time-sliced replicas") != NULL;
        missing |= strstr(plan.warnings[i], "policy line 10: gpuslice.gpus selects GPU indices beyond the node's 3 GPUs "
                                            "(mode mps)") != NULL;
    }
    assert_true(conflict);
    assert_true(missing);
    gs_plan_free(&plan);
    free(pol);
    free(inv);
}

/* NVIDIA-style time-slicing of a MIG resource: every MIG device of the profile is replicated
 * ("<MIG-UUID>::<n>", as NVIDIA's plugin names replicas), with the guard's quota taken against
 * the MIG device's memory; Allocate maps a replica back to its MIG device. */
static void test_mig_time_slicing(void **state) {
    (void)state;
    struct gs_inventory *inv = inv_new(4, "NVIDIA H100 80GB HBM3");
    for (unsigned i = 0; i < 4; i++) {
        inv->gpus[i].mem_total = 80ULL << 30;
        for (unsigned k = 0; k < 7; k++) {
            add_mig(&inv->gpus[i], "1g.10gb", 7 + k, 1);
            inv->gpus[i].mig[k].mem_mib = 9984; /* what the H100's 1g.10gb really has */
        }
    }
    struct gs_policy *pol = policy("version: v1\nflags:\n  migStrategy: mixed\n  plugin:\n    passDeviceSpecs: true\n"
                                   "sharing:\n  timeSlicing:\n    resources:\n"
                                   "    - name: nvidia.com/mig-1g.10gb\n      replicas: 3\n"
                                   "      memoryPerReplica: auto\n");
    struct gs_plan plan;
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    assert_int_equal(plan.n_resources, 1);
    const struct gs_resource *r = gs_plan_resource(&plan, "nvidia.com/mig-1g.10gb");
    assert_non_null(r);
    assert_int_equal(r->n_devices, 84); /* 28 MIG devices x 3, as NVIDIA's plugin advertises */
    assert_true(r->replicated);
    const struct gs_device *d = &r->devices[83];
    assert_string_equal(d->id, "MIG-00000003-0013-0000-0000-000000000000::2");
    assert_string_equal(d->uuid, "MIG-00000003-0013-0000-0000-000000000000");
    assert_int_equal(d->kind, GS_DEV_REPLICA);
    assert_true(d->mig && gs_device_is_mig(d));
    assert_int_equal(d->gpu, 3);
    assert_int_equal(d->gi_id, 13);
    assert_int_equal(d->quota, (9984ULL << 20) / 3);
    assert_int_equal(plan.n_errors, 0);
    /* Allocate: the MIG device itself, its GPU's node and its capability nodes. */
    struct gs_mig_minors mm;
    char err[256];
    assert_int_equal(gs_mig_minors_parse("mm", "gpu3/gi13/access 120\ngpu3/gi13/ci0/access 121\n", &mm, err,
                                         sizeof(err)), 0);
    const char *ids[] = { r->devices[83].id, r->devices[82].id };
    struct gs_alloc_response resp;
    assert_int_equal(gs_allocate(r, ids, 2, pol, &mm, NULL, NULL, &resp, err, sizeof(err)), 0);
    assert_string_equal(resp.visible_devices, "MIG-00000003-0013-0000-0000-000000000000");
    assert_int_equal(resp.n_devspecs, 4 + 3); /* control nodes; the GPU and its caps once for both replicas */
    assert_string_equal(resp.devspecs[4].container_path, "/dev/nvidia3");
    assert_string_equal(resp.devspecs[5].container_path, "/dev/nvidia-caps/nvidia-cap120");
    assert_string_equal(resp.devspecs[6].container_path, "/dev/nvidia-caps/nvidia-cap121");
    assert_int_equal(resp.n_guarded, 1);
    assert_int_equal(resp.guarded[0].bytes, 2 * ((9984ULL << 20) / 3)); /* two replicas: twice the quota */
    gs_alloc_response_free(&resp);
    pol->id_strategy = GS_ID_INDEX;
    pol->pass_device_specs = false;
    assert_int_equal(gs_allocate(r, ids, 1, pol, NULL, NULL, NULL, &resp, err, sizeof(err)), 0);
    assert_string_equal(resp.visible_devices, "3:13");
    gs_alloc_response_free(&resp);
    gs_mig_minors_free(&mm);
    gs_plan_free(&plan);
    free(pol);

    /* renameByDefault, a devices list (a MIG UUID, NVIDIA's older MIG-GPU-.../gi/ci form, a GPU
     * index: its MIG devices), the others stay plain MIG devices. */
    pol = policy("version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  timeSlicing:\n    renameByDefault: true\n"
                 "    resources:\n    - name: nvidia.com/mig-1g.10gb\n      replicas: 2\n"
                 "      devices: [MIG-00000000-0007-0000-0000-000000000000,\n"
                 "                MIG-GPU-00000001-0000-0000-0000-000000000000/8/0, \"2\"]\n");
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    r = gs_plan_resource(&plan, "nvidia.com/mig-1g.10gb.shared");
    assert_int_equal(r->n_devices, (1 + 1 + 7) * 2);
    assert_string_equal(r->devices[0].id, "MIG-00000000-0007-0000-0000-000000000000::0");
    assert_string_equal(r->devices[2].id, "MIG-00000001-0008-0000-0000-000000000000::0");
    assert_int_equal(r->devices[0].quota, 0); /* no memoryPerReplica: no guard */
    assert_int_equal(gs_plan_resource(&plan, "nvidia.com/mig-1g.10gb")->n_devices, 28 - 9);
    for (unsigned i = 0; i < plan.n_warnings; i++)
        assert_null(strstr(plan.warnings[i], "not a GPU of this node"));
    gs_plan_free(&plan);
    free(pol);

    /* memoryPerReplica larger than the MIG device: an error naming the setting; not advertised. */
    pol = policy("version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  timeSlicing:\n    resources:\n"
                 "    - name: nvidia.com/mig-1g.10gb\n      replicas: 2\n      memoryPerReplica: 12GiB\n"
                 "      devices: [MIG-00000000-0007-0000-0000-000000000000]\n"
                 "    - name: nvidia.com/mig-2g.20gb\n      replicas: 2\n");
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    assert_int_equal(plan.n_errors, 1);
    assert_string_equal(plan.errors[0],
                        "test.yaml:9:25: sharing.timeSlicing.resources[0].memoryPerReplica: 12 GiB is more than the "
                        "9.8 GiB of MIG device MIG-00000000-0007-0000-0000-000000000000 (1g.10gb, GPU 0): its "
                        "replicas are not advertised (at most 9.8 GiB, or auto)");
    r = gs_plan_resource(&plan, "nvidia.com/mig-1g.10gb");
    assert_int_equal(r->n_devices, 27);
    assert_false(r->replicated);
    bool unused = false;
    for (unsigned i = 0; i < plan.n_warnings; i++)
        unused |= strstr(plan.warnings[i], "sharing.timeSlicing.resources[1]: no MIG device of this node is "
                                           "advertised as nvidia.com/mig-2g.20gb") != NULL;
    assert_true(unused);
    gs_plan_free(&plan);
    free(pol);

    /* migStrategy single: the MIG devices are nvidia.com/gpu, and an nvidia.com/gpu entry
     * replicates them (NVIDIA's plugin does the same); `devices: 2` = the first two of them. */
    pol = policy("version: v1\nflags:\n  migStrategy: single\nsharing:\n  timeSlicing:\n    renameByDefault: true\n"
                 "    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n      devices: 2\n");
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    assert_int_equal(gs_plan_resource(&plan, "nvidia.com/gpu.shared")->n_devices, 8);
    assert_int_equal(gs_plan_resource(&plan, "nvidia.com/gpu")->n_devices, 26);
    gs_plan_free(&plan);
    free(pol);

    /* sharing.mps naming a MIG resource: MPS replicas of each MIG device, one daemon each. */
    pol = policy("version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  mps:\n    resources:\n"
                 "    - name: nvidia.com/mig-1g.10gb\n      replicas: 2\n");
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    r = gs_plan_resource(&plan, "nvidia.com/mig-1g.10gb");
    assert_int_equal(r->n_devices, 56);
    assert_true(r->mps && r->fail_gt_one);
    assert_int_equal(r->devices[1].kind, GS_DEV_MPS);
    assert_true(r->devices[1].mig);
    assert_int_equal(r->devices[1].mps_percent, 50);
    assert_int_equal(r->devices[1].mps_pinned, (9984ULL << 20) / 2);
    gs_plan_free(&plan);
    free(pol);
    free(inv);
}

/* memoryPerReplica larger than the GPU: an error with file:line:column, the GPU not advertised.
 * Replicas whose quotas add up to more than the GPU (overcommit) are allowed. */
static void test_quota_larger_than_gpu(void **state) {
    (void)state;
    struct gs_inventory *inv = inv_new(2, "Tesla T4");
    inv->gpus[0].mem_total = inv->gpus[1].mem_total = 15360ULL << 20;
    struct gs_policy *pol = policy("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                                   "    - name: nvidia.com/gpu\n      replicas: 4\n      memoryPerReplica: 500GiB\n");
    struct gs_plan plan;
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    assert_int_equal(plan.n_errors, 2);
    assert_string_equal(plan.errors[1], "test.yaml:7:25: sharing.timeSlicing.resources[0].memoryPerReplica: 500 GiB "
                                        "is more than the 15 GiB of GPU 1 (Tesla T4): its replicas are not "
                                        "advertised (at most 15 GiB, or auto)");
    assert_int_equal(plan.n_resources, 0);
    assert_int_equal(plan.gpus[0].mode, GS_MODE_DISABLED);
    gs_plan_free(&plan);
    free(pol);
    pol = policy("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                 "    - name: nvidia.com/gpu\n      replicas: 4\n      memoryPerReplica: 8GiB\n");
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    assert_int_equal(plan.n_errors, 0);
    assert_int_equal(gs_plan_resource(&plan, "nvidia.com/gpu")->devices[0].quota, 8ULL << 30);
    gs_plan_free(&plan);
    free(pol);
    free(inv);
}

/* migStrategy single on a node with a whole GPU and MIG devices: NVIDIA's plugin refuses such a
 * node; gpuslice names flags.migStrategy and does not advertise nvidia.com/gpu. */
static void test_single_mixed_node(void **state) {
    (void)state;
    struct gs_inventory *inv = inv_new(2, "NVIDIA H100 80GB HBM3");
    for (unsigned k = 0; k < 6; k++)
        add_mig(&inv->gpus[1], "1g.10gb", 9 + k, 1);
    struct gs_policy *pol = policy("version: v1\nflags:\n  migStrategy: single\n");
    struct gs_plan plan;
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    assert_int_equal(plan.n_errors, 1);
    assert_non_null(strstr(plan.errors[0], "test.yaml:3:16: flags.migStrategy: single needs every GPU in MIG mode "
                                           "with one profile, or none (as NVIDIA's plugin): nvidia.com/gpu would "
                                           "carry whole GPU 0 and the MIG devices of GPU 1"));
    assert_null(gs_plan_resource(&plan, "nvidia.com/gpu"));
    assert_int_equal(plan.n_resources, 0);
    assert_null(plan.gpus[0].resource);
    assert_null(plan.gpus[1].resource);
    gs_plan_free(&plan);
    free(pol);
    /* The whole GPU under a name of its own: no conflict. */
    pol = policy("version: v1\nflags:\n  migStrategy: single\ngpuslice:\n  gpus:\n  - index: 0\n    mode: whole\n"
                 "    resourceName: example.com/h100\n");
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    assert_int_equal(plan.n_errors, 0);
    assert_int_equal(gs_plan_resource(&plan, "nvidia.com/gpu")->n_devices, 6);
    assert_int_equal(gs_plan_resource(&plan, "example.com/h100")->n_devices, 1);
    assert_string_equal(plan.gpus[0].resource, "example.com/h100");
    assert_string_equal(plan.gpus[1].resource, "nvidia.com/gpu");
    gs_plan_free(&plan);
    free(pol);
    free(inv);
}

/* migStrategy single with several profiles: the warning names every one, and a GPU whose only
 * MIG device is of another profile (a 7g.80gb) is said to be left out, not to have none. */
static void test_single_profiles_warning(void **state) {
    (void)state;
    struct gs_inventory *inv = inv_new(4, "NVIDIA H100 80GB HBM3");
    add_mig(&inv->gpus[0], "1g.10gb", 9, 1);
    add_mig(&inv->gpus[0], "2g.20gb", 5, 2);
    add_mig(&inv->gpus[1], "3g.40gb", 2, 3);
    add_mig(&inv->gpus[1], "4g.40gb", 1, 4);
    add_mig(&inv->gpus[2], "1g.10gb", 9, 1);
    add_mig(&inv->gpus[3], "7g.80gb", 0, 7);
    struct gs_policy *pol = policy("version: v1\nflags:\n  migStrategy: single\n");
    struct gs_plan plan;
    assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
    assert_string_equal(plan.warnings[0], "migStrategy single needs one MIG profile on the node; found 5: 1g.10gb "
                                          "(GPUs 0,2), 2g.20gb (GPU 0), 3g.40gb (GPU 1), 4g.40gb (GPU 1), 7g.80gb "
                                          "(GPU 3): only 1g.10gb devices are advertised (use migStrategy mixed)");
    bool gpu3 = false;
    for (unsigned i = 0; i < plan.n_warnings; i++) {
        assert_null(strstr(plan.warnings[i], "has no MIG devices"));
        gpu3 |= !strcmp(plan.warnings[i], "GPU 3: its MIG devices (7g.80gb) are not advertised: migStrategy single "
                                          "advertises only 1g.10gb devices");
    }
    assert_true(gpu3);
    assert_int_equal(gs_plan_resource(&plan, "nvidia.com/gpu")->n_devices, 2);
    gs_plan_free(&plan);
    free(pol);
    free(inv);
}

/* The GPU a device plugin's device ID names (coexistence under otherPlugin: share). */
static void test_gpu_of_device_id(void **state) {
    (void)state;
    static struct gs_inventory inv;
    inv.n_gpus = 2;
    snprintf(inv.gpus[0].uuid, sizeof(inv.gpus[0].uuid), "GPU-a");
    snprintf(inv.gpus[1].uuid, sizeof(inv.gpus[1].uuid), "GPU-ab");
    inv.gpus[1].n_mig = 1;
    snprintf(inv.gpus[1].mig[0].uuid, sizeof(inv.gpus[1].mig[0].uuid), "MIG-m");
    assert_int_equal(gs_inventory_gpu_of_device_id(&inv, "GPU-a"), 0);
    assert_int_equal(gs_inventory_gpu_of_device_id(&inv, "GPU-a::3"), 0);
    assert_int_equal(gs_inventory_gpu_of_device_id(&inv, "GPU-ab"), 1); /* not GPU-a's: a longer UUID */
    assert_int_equal(gs_inventory_gpu_of_device_id(&inv, "MIG-m::1"), 1);
    assert_int_equal(gs_inventory_gpu_of_device_id(&inv, "GPU-a:3"), -1);
    assert_int_equal(gs_inventory_gpu_of_device_id(&inv, "GPU-"), -1);
    assert_int_equal(gs_inventory_gpu_of_device_id(&inv, ""), -1);
}

/* gs_plan_dra_serves: gpuslice.dra.gpus by index or UUID; unset: what the caller says. */
static void test_dra_serves(void **state) {
    (void)state;
    const char *u1 = "GPU-00000001-0000-0000-0000-000000000000";
    struct gs_policy *p = policy("version: v1\n");
    assert_false(gs_plan_dra_serves(p, 0, u1, false));
    assert_true(gs_plan_dra_serves(p, 0, u1, true));
    free(p);
    p = policy("gpuslice:\n  dra:\n    gpus: all\n");
    assert_true(gs_plan_dra_serves(p, 5, u1, false));
    free(p);
    p = policy("gpuslice:\n  dra:\n    gpus: none\n");
    assert_false(gs_plan_dra_serves(p, 0, u1, true));
    free(p);
    p = policy("gpuslice:\n  dra:\n    gpus: [\"0\", \"GPU-00000001-0000-0000-0000-00000000000A\"]\n");
    assert_true(gs_plan_dra_serves(p, 0, "GPU-x", false));
    assert_true(gs_plan_dra_serves(p, 7, "GPU-00000001-0000-0000-0000-00000000000a", false)); /* by UUID */
    assert_false(gs_plan_dra_serves(p, 1, u1, true));
    assert_false(gs_plan_dra_serves(p, 1, NULL, true));
    free(p);
}

/* gpuslice.dra.gpus: a GPU the DRA driver serves is not the device plugins' (never both). */
static void test_dra_gpus_left_out(void **state) {
    (void)state;
    struct gs_inventory *inv = inv_new(3, "Tesla T4");
    static const struct {
        const char *yaml;
        unsigned devices;
        bool dra[3];
    } cases[] = {
        { "version: v1\n", 3, { false, false, false } },
        { "gpuslice:\n  dra:\n    gpus: none\n", 3, { false, false, false } },
        { "gpuslice:\n  dra:\n    gpus: [\"0\", \"GPU-00000002-0000-0000-0000-000000000000\"]\n", 1, { true, false, true } },
        { "gpuslice:\n  dra:\n    gpus: all\n", 0, { true, true, true } },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct gs_policy *pol = policy(cases[i].yaml);
        struct gs_plan plan;
        assert_int_equal(gs_plan_build(inv, pol, NULL, &plan), 0);
        const struct gs_resource *r = gs_plan_resource(&plan, "nvidia.com/gpu");
        assert_int_equal(r ? r->n_devices : 0, cases[i].devices);
        for (unsigned g = 0; g < 3; g++) {
            assert_int_equal(plan.gpus[g].dra, cases[i].dra[g]);
            if (cases[i].dra[g])
                assert_int_equal(plan.gpus[g].mode, GS_MODE_DISABLED);
        }
        if (cases[i].devices == 1)
            assert_string_equal(r->devices[0].id, inv->gpus[1].uuid);
        gs_plan_free(&plan);
        free(pol);
    }
    free(inv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_whole),   cmocka_unit_test(test_nvidia_time_slicing),
        cmocka_unit_test(test_heterogeneous),   cmocka_unit_test(test_mig_strategies),
        cmocka_unit_test(test_health),          cmocka_unit_test(test_allocate),
        cmocka_unit_test(test_preferred),       cmocka_unit_test(test_guard_quotas),
        cmocka_unit_test(test_mps),             cmocka_unit_test(test_mig_time_slicing),
        cmocka_unit_test(test_quota_larger_than_gpu), cmocka_unit_test(test_single_mixed_node),
        cmocka_unit_test(test_single_profiles_warning),
        cmocka_unit_test(test_gpu_of_device_id),
        cmocka_unit_test(test_dra_gpus_left_out), cmocka_unit_test(test_dra_serves),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
