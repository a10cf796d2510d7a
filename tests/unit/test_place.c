/* test_place.c: the placement engine (each policy on small hand-made clusters with known answers,
 * Go's random stream), the trace replay's determinism per seed, and the CSV loader's errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "place/place.h"
#include "place/policy_pack.h"
#include "place/replay.h"

/* a node with n GPUs whose free milli are given (missing = fully free) */
static struct pl_node mknode(int64_t cpu, int64_t mem, int n_gpu, int rank, const int *free_) {
    struct pl_node n = { 0 };
    n.cpu_cap = n.cpu_left = cpu;
    n.mem_cap = n.mem_left = mem;
    n.n_gpu = n_gpu;
    n.rank = rank;
    n.model = 0;
    for (int g = 0; g < n_gpu; g++)
        n.gpu_free[g] = free_ ? free_[g] : PL_MILLI;
    return n;
}

static struct pl_pod mkpod(int64_t cpu, int64_t mem, int num, int milli) {
    struct pl_pod p = { cpu, mem, num, milli, 0 };
    return p;
}

static int place(struct pl_cluster *c, enum pl_policy pol, struct pl_pod p, struct pl_choice *ch) {
    return pl_schedule(c, pol, &p, NULL, ch);
}

static void test_gorand(void **state) {
    (void)state;
    struct pl_gorand r;
    pl_gorand_seed(&r, 1); /* Go: rand.Seed(1); rand.Int63() twice */
    assert_int_equal(pl_gorand_int63(&r), 5577006791947779410LL);
    assert_int_equal(pl_gorand_int63(&r), 8674665223082153551LL);
    for (int i = 0; i < 1000; i++) {
        int32_t v = pl_gorand_intn(&r, 7);
        assert_true(v >= 0 && v < 7);
        v = pl_gorand_int31n_lemire(&r, 1213);
        assert_true(v >= 0 && v < 1213);
    }
    int32_t perm[50];
    int seen[50] = { 0 };
    pl_gorand_perm(&r, 50, perm);
    for (int i = 0; i < 50; i++)
        seen[perm[i]]++;
    for (int i = 0; i < 50; i++)
        assert_int_equal(seen[i], 1);
}

static void test_filter(void **state) {
    (void)state;
    int used[2] = { 300, 1000 };
    struct pl_node nodes[3] = {
        mknode(64000, 1000, 2, 0, used), /* short on memory */
        mknode(64000, 262144, 0, 1, NULL), /* no GPU */
        mknode(64000, 262144, 2, 2, used),
    };
    struct pl_cluster c;
    assert_int_equal(pl_cluster_init(&c, nodes, 3), 0);
    struct pl_choice ch;
    for (int pol = 0; pol < PL_POLICY_COUNT; pol++) {
        /* a 500-milli pod only fits GPU 1 of node 2 */
        assert_int_equal(place(&c, (enum pl_policy)pol, mkpod(1000, 4096, 1, 500), &ch), 0);
        assert_int_equal(ch.node, 2);
        assert_int_equal(ch.gpus[0], 1);
        /* two whole GPUs fit nowhere */
        assert_int_equal(place(&c, (enum pl_policy)pol, mkpod(1000, 4096, 2, 1000), &ch), -ENOSPC);
    }
    /* GPU model constraint */
    assert_int_equal(pl_model_index(&c, "T4"), 0);
    uint32_t mask;
    assert_int_equal(pl_spec_mask(&c, "V100|A10", &mask), 0);
    struct pl_pod p = mkpod(1000, 1, 1, 100);
    p.models = mask;
    assert_int_equal(pl_schedule(&c, PL_BESTFIT, &p, NULL, &ch), -ENOSPC);
    pl_cluster_free(&c);
}

/* A: 8 idle GPUs; B: 2 GPUs, one idle. A whole-GPU pod: packing policies pick B, though A ranks first. */
static void test_fullest_node(void **state) {
    (void)state;
    int b[2] = { 0, 1000 };
    struct pl_node nodes[2] = { mknode(96000, 262144, 8, 0, NULL), mknode(96000, 262144, 2, 1, b) };
    struct pl_cluster c;
    assert_int_equal(pl_cluster_init(&c, nodes, 2), 0);
    c.nodes[1].aff[1] = 1;
    struct pl_choice ch;
    assert_int_equal(place(&c, PL_BESTFIT, mkpod(8000, 1024, 1, 1000), &ch), 0);
    assert_int_equal(ch.node, 1);
    assert_int_equal(ch.gpus[0], 1);
    assert_int_equal(place(&c, PL_DOTPROD, mkpod(8000, 1024, 1, 1000), &ch), 0);
    assert_int_equal(ch.node, 1);
    /* GpuClustering: B already runs 1-GPU pods (75+ band) */
    assert_int_equal(place(&c, PL_GPUCLUSTERING, mkpod(8000, 1024, 1, 1000), &ch), 0);
    assert_int_equal(ch.node, 1);
    /* GpuPacking: B is used (50 - 1 = 49) and beats an idle 8-GPU node (33 - 8 = 25) */
    assert_int_equal(place(&c, PL_GPUPACKING, mkpod(8000, 1024, 1, 1000), &ch), 0);
    assert_int_equal(ch.node, 1);
    pl_cluster_free(&c);
}

/* GpuPacking and the "best" GPU rule: a sharing pod goes to the partly used GPU with the least free. */
static void test_packing_best_gpu(void **state) {
    (void)state;
    int a[4] = { 1000, 700, 600, 1000 };
    struct pl_node nodes[2] = { mknode(96000, 262144, 1, 0, NULL), mknode(96000, 262144, 4, 1, a) };
    struct pl_cluster c;
    assert_int_equal(pl_cluster_init(&c, nodes, 2), 0);
    struct pl_choice ch;
    assert_int_equal(place(&c, PL_GPUPACKING, mkpod(1000, 1024, 1, 500), &ch), 0);
    assert_int_equal(ch.node, 1);
    assert_int_equal(ch.gpus[0], 2);
    pl_commit(&c, &(struct pl_pod){ 1000, 1024, 1, 500, 0 }, &ch);
    assert_int_equal(c.nodes[1].gpu_free[2], 100);
    assert_int_equal(c.alloc_gpu_milli, 500 + 700);
    pl_cluster_free(&c);
}

/* Equal scores go to the lowest rank. */
static void test_ties_by_rank(void **state) {
    (void)state;
    struct pl_node nodes[3] = { mknode(64000, 262144, 2, 7, NULL), mknode(64000, 262144, 2, 3, NULL),
                                mknode(64000, 262144, 2, 5, NULL) };
    struct pl_cluster c;
    assert_int_equal(pl_cluster_init(&c, nodes, 3), 0);
    struct pl_choice ch;
    for (int pol = PL_DOTPROD; pol <= PL_BESTFIT; pol++) {
        assert_int_equal(place(&c, (enum pl_policy)pol, mkpod(4000, 1024, 1, 1000), &ch), 0);
        assert_int_equal(ch.node, 1);
    }
    pl_cluster_free(&c);
}

/* FGD: with a target workload of 600-milli pods, a 400-milli pod fills the 400 left on node 1 (its
 * fragmentation drops by 400: score int(100 sigmoid(0.4)) = 59) rather than cut an idle GPU (50). */
static void test_fgd(void **state) {
    (void)state;
    int b[2] = { 400, 0 };
    struct pl_node nodes[2] = { mknode(64000, 262144, 1, 0, NULL), mknode(64000, 262144, 2, 1, b) };
    struct pl_cluster c;
    assert_int_equal(pl_cluster_init(&c, nodes, 2), 0);
    struct pl_pod tp[3] = { mkpod(1000, 1, 1, 600), mkpod(1000, 1, 1, 600), mkpod(1000, 1, 1, 600) };
    assert_int_equal(pl_set_targets(&c, tp, NULL, 3, 95), 0);
    assert_int_equal(c.n_targets, 1);
    assert_true(fabs(c.targets[0].p - 1.0) < 1e-12);
    assert_true(fabs(pl_node_frag(&c, &c.nodes[1]) - 400.0) < 1e-9);
    assert_true(fabs(pl_node_frag(&c, &c.nodes[0])) < 1e-9);
    struct pl_choice ch;
    assert_int_equal(place(&c, PL_FGD, mkpod(1000, 1024, 1, 400), &ch), 0);
    assert_int_equal(ch.node, 1);
    assert_int_equal(ch.gpus[0], 0);
    pl_cluster_free(&c);
}

/* Random: a seeded draw among the feasible nodes, never an infeasible one. */
static void test_random(void **state) {
    (void)state;
    struct pl_node nodes[4] = { mknode(64000, 10, 2, 0, NULL), mknode(64000, 262144, 2, 1, NULL),
                                mknode(64000, 262144, 2, 2, NULL), mknode(64000, 262144, 2, 3, NULL) };
    struct pl_cluster c;
    assert_int_equal(pl_cluster_init(&c, nodes, 4), 0);
    struct pl_gorand r1, r2;
    pl_gorand_seed(&r1, 42);
    pl_gorand_seed(&r2, 42);
    int hits[4] = { 0 };
    for (int i = 0; i < 200; i++) {
        struct pl_pod p = mkpod(100, 100, 1, 300);
        struct pl_choice a, b;
        assert_int_equal(pl_schedule(&c, PL_RANDOM, &p, &r1, &a), 0);
        assert_int_equal(pl_schedule(&c, PL_RANDOM, &p, &r2, &b), 0);
        assert_int_equal(a.node, b.node);
        assert_int_equal(a.gpus[0], b.gpus[0]);
        hits[a.node]++;
    }
    assert_int_equal(hits[0], 0);
    assert_true(hits[1] > 0 && hits[2] > 0 && hits[3] > 0);
    pl_cluster_free(&c);
}

/* gpuslice: learns the workload from what it observes; memory stranding counts. Node 0 would be
 * left with GPUs but no memory for the 40 GiB pods seen so far; node 1 keeps room. */
static void test_gpuslice(void **state) {
    (void)state;
    struct pl_node nodes[2] = { mknode(64000, 50000, 2, 0, NULL), mknode(64000, 262144, 2, 1, NULL) };
    struct pl_cluster c;
    assert_int_equal(pl_cluster_init(&c, nodes, 2), 0);
    for (int i = 0; i < 20; i++) {
        struct pl_pod seen = mkpod(4000, 40000, 1, 1000);
        pl_observe(&c, &seen);
    }
    struct pl_pod p = mkpod(4000, 20000, 1, 1000);
    pl_observe(&c, &p);
    struct pl_choice ch;
    assert_int_equal(pl_schedule(&c, PL_GPUSLICE, &p, NULL, &ch), 0);
    assert_int_equal(ch.node, 1);
    /* FGD, blind to memory, takes the rank order */
    struct pl_pod tp = mkpod(4000, 40000, 1, 1000);
    assert_int_equal(pl_set_targets(&c, &tp, NULL, 1, 95), 0);
    assert_int_equal(pl_schedule(&c, PL_FGD, &p, NULL, &ch), 0);
    assert_int_equal(ch.node, 0);
    pl_cluster_free(&c);
}

/* gpuslice: CPU that cannot feed the idle GPUs counts as fragmentation. The GPU pods seen need 12
 * cores per GPU; a CPU-only pod on node 0 would leave 12 cores for 8 GPUs, so it goes to node 1.
 * FGD checks one target pod at a time (12 cores still fit one) and takes the rank order. The cached
 * per-node fragmentation is kept current by pl_observe and pl_commit, not by the decision. */
static void test_gpuslice_cpu_strand(void **state) {
    (void)state;
    struct pl_node nodes[2] = { mknode(24000, 1 << 20, 8, 0, NULL), mknode(200000, 1 << 20, 8, 1, NULL) };
    struct pl_cluster c;
    assert_int_equal(pl_cluster_init(&c, nodes, 2), 0);
    struct pl_pod gp = mkpod(12000, 1000, 1, 1000);
    for (int i = 0; i < 20; i++)
        pl_observe(&c, &gp);
    struct pl_pod p = mkpod(12000, 1000, 0, 0);
    pl_observe(&c, &p);
    assert_true(c.nodes[0].gver != 0 && c.nodes[0].gver == c.nodes[1].gver);
    unsigned v = c.nodes[0].gver;
    struct pl_choice ch;
    assert_int_equal(pl_schedule(&c, PL_GPUSLICE, &p, NULL, &ch), 0);
    assert_int_equal(ch.node, 1);
    pl_commit(&c, &p, &ch);
    assert_int_equal(c.nodes[1].gver, v);
    assert_int_equal(pl_set_targets(&c, &gp, NULL, 1, 95), 0);
    assert_int_equal(pl_schedule(&c, PL_FGD, &p, NULL, &ch), 0);
    assert_int_equal(ch.node, 0);
    pl_cluster_free(&c);
}

/* observes n pods of each of the given sharing sizes (CPU cpu each) */
static void observe_shares(struct pl_cluster *c, int n, int64_t cpu, const int *milli, int k) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < k; j++) {
            struct pl_pod p = mkpod(cpu, 1000, 1, milli[j]);
            pl_observe(c, &p);
        }
}

/* The estimate's refresh computes each node state's fragmentation once (pl_node_groups): a node
 * that takes an earlier one's must hold what its own computation gives. 40 nodes of four kinds,
 * some with pods, so that some states repeat and some do not; each cached value is checked
 * against the node's own refresh (gver 0 makes the score recompute it). */
static void test_gpuslice_refresh_by_state(void **state) {
    (void)state;
    struct pl_node nodes[40];
    for (int i = 0; i < 40; i++)
        nodes[i] = mknode(i % 4 == 3 ? 16000 : 96000, 1 << 19, i % 2 ? 8 : 2, i, NULL);
    struct pl_cluster c;
    assert_int_equal(pl_cluster_init(&c, nodes, 40), 0);
    assert_int_equal(pl_node_same(&c.nodes[0], &c.nodes[4]), 1);
    assert_int_equal(pl_node_same(&c.nodes[0], &c.nodes[1]), 0);
    size_t rep[40];
    assert_int_equal(pl_node_groups(&c, NULL, NULL, 40, rep), 0);
    assert_true(rep[0] == 0 && rep[4] == 0 && rep[1] == 1 && rep[5] == 1 && rep[3] == 3 && rep[7] == 3);
    const int milli[] = { 470, 320, 810, 230 };
    struct pl_choice ch = { .node = 6, .n_gpus = 1, .gpus = { 1 } };
    struct pl_pod busy = mkpod(8000, 1000, 1, 470);
    pl_commit(&c, &busy, &ch); /* node 6 differs from 2, 10, ... now */
    assert_int_equal(pl_node_same(&c.nodes[2], &c.nodes[6]), 0);
    observe_shares(&c, 30, 6000, milli, 4);
    int checked = 0;
    for (int i = 0; i < 40; i++) {
        double cached = c.nodes[i].gfrag;
        assert_true(c.nodes[i].gver != 0);
        c.nodes[i].gver = 0;
        int64_t s;
        struct pl_pod p = mkpod(1000, 1000, 1, 230);
        assert_int_equal(pl_score_node(&c, PL_GPUSLICE, (size_t)i, &p, &s, NULL), 0);
        assert_true(c.nodes[i].gfrag == cached);
        checked += cached > 0;
    }
    assert_true(checked > 0); /* the fragmentation compared is not 0 everywhere */
    pl_cluster_free(&c);
}

/* the full decision for pod p: observe, schedule with pol, commit; returns the choice */
static struct pl_choice arrive(struct pl_cluster *c, enum pl_policy pol, struct pl_pod p) {
    struct pl_choice ch;
    pl_observe(c, &p);
    assert_int_equal(pl_schedule(c, pol, &p, NULL, &ch), 0);
    pl_commit(c, &p, &ch);
    return ch;
}

/* gpuslice's packing plan: with as many 650s as 320s seen, the plan pairs them. A 650 opens an idle
 * GPU and keeps a slot for a 320; the next 320 takes the slot (30 left) although another GPU fits it
 * closer (10 left), where best fit puts it; the slot is then used up. */
static void test_gpuslice_plan(void **state) {
    (void)state;
    struct pl_node nodes[1] = { mknode(256000, 1 << 20, 3, 0, (int[]){ 1000, 330, 1000 }) };
    struct pl_cluster c;
    assert_int_equal(pl_cluster_init(&c, nodes, 1), 0);
    observe_shares(&c, 20, 1000, (int[]){ 650, 320 }, 2);
    struct pl_choice ch = arrive(&c, PL_GPUSLICE, mkpod(1000, 1000, 1, 650));
    assert_int_equal(ch.gpus[0], 0);
    assert_int_equal(c.nodes[0].slot[0][0], 320);
    assert_int_equal(c.nodes[0].slot[0][1], 0);
    struct pl_pod p = mkpod(1000, 1000, 1, 320);
    assert_int_equal(pl_schedule(&c, PL_BESTFIT, &p, NULL, &ch), 0);
    assert_int_equal(ch.gpus[0], 1);
    ch = arrive(&c, PL_GPUSLICE, p);
    assert_int_equal(ch.gpus[0], 0);
    assert_int_equal(c.nodes[0].slot[0][0], 0);
    assert_int_equal(c.nodes[0].gpu_free[0], 30);
    /* no slot left: the next 320 takes the close fit */
    ch = arrive(&c, PL_GPUSLICE, p);
    assert_int_equal(ch.gpus[0], 1);
    pl_cluster_free(&c);
}

/* An idle GPU is opened where the rest of its pattern can follow: node 0 has the CPU for the 650
 * but not for the 320 its pattern keeps a slot for, so the 650 goes to node 1 (rank 1). */
static void test_gpuslice_plan_rest(void **state) {
    (void)state;
    struct pl_node nodes[2] = { mknode(10000, 1 << 20, 2, 0, (int[]){ 1000, 0 }),
                                mknode(64000, 1 << 20, 2, 1, NULL) };
    struct pl_cluster c;
    assert_int_equal(pl_cluster_init(&c, nodes, 2), 0);
    observe_shares(&c, 20, 8000, (int[]){ 650, 320 }, 2);
    struct pl_choice ch = arrive(&c, PL_GPUSLICE, mkpod(8000, 1000, 1, 650));
    assert_int_equal(ch.node, 1);
    assert_int_equal(c.nodes[1].slot[ch.gpus[0]][0], 320);
    pl_cluster_free(&c);
}

/* A slot's request needs CPU beside it. Two 650s on node 0 keep slots for two 320s of 8 cores each;
 * a CPU-only pod of 6 cores there would leave 14: enough for one typical pod (what FGD's measure
 * checks, one target at a time) and to feed the 700 free milli-GPU at the observed rate, but not
 * for both slots. So it goes to node 1, which has no GPU (ranked after node 0). */
static void test_gpuslice_plan_kept(void **state) {
    (void)state;
    struct pl_node nodes[2] = { mknode(36000, 1 << 20, 2, 0, NULL), mknode(64000, 1 << 20, 0, 1, NULL) };
    struct pl_cluster c;
    assert_int_equal(pl_cluster_init(&c, nodes, 2), 0);
    observe_shares(&c, 20, 8000, (int[]){ 650, 320 }, 2);
    for (int i = 0; i < 2; i++) {
        struct pl_choice ch = arrive(&c, PL_GPUSLICE, mkpod(8000, 1000, 1, 650));
        assert_int_equal(ch.node, 0);
        assert_int_equal(c.nodes[0].slot[ch.gpus[0]][0], 320);
    }
    struct pl_choice ch = arrive(&c, PL_GPUSLICE, mkpod(6000, 1000, 0, 0));
    assert_int_equal(ch.node, 1);
    pl_cluster_free(&c);
}

/* schedule and commit p without observing it (the estimate, and its plan, stay as they are) */
static struct pl_choice place_commit(struct pl_cluster *c, struct pl_pod p) {
    struct pl_choice ch;
    assert_int_equal(pl_schedule(c, PL_GPUSLICE, &p, NULL, &ch), 0);
    pl_commit(c, &p, &ch);
    return ch;
}

/* The plan for 30 600s, 20 400s and 10 300s pairs two thirds of the 600s with a 400 and a third
 * with a 300. Idle GPUs opened by 600s follow those shares, each time the pattern lagging most
 * behind its share: 600 + 400 (2/3 against 1/3), then 600 + 300 (1/3 behind), then 600 + 400. */
static void test_gpuslice_plan_shares(void **state) {
    (void)state;
    struct pl_node nodes[1] = { mknode(256000, 1 << 20, 4, 0, NULL) };
    struct pl_cluster c;
    assert_int_equal(pl_cluster_init(&c, nodes, 1), 0);
    observe_shares(&c, 10, 1000, (int[]){ 600, 600, 400, 600, 400, 300 }, 6);
    const int want[3] = { 400, 300, 400 };
    for (int i = 0; i < 3; i++) {
        struct pl_choice ch = place_commit(&c, mkpod(1000, 1000, 1, 600));
        assert_int_equal(c.nodes[0].slot[ch.gpus[0]][0], want[i]);
        assert_int_equal(c.nodes[0].slot[ch.gpus[0]][1], 0);
    }
    pl_cluster_free(&c);
}

/* A pattern of ten 100s keeps PL_SLOTS slots, and idle GPUs are judged by the CPU of those: node 0
 * has the CPU for the pod and 8 more, not 9, and still gets it. */
static void test_gpuslice_plan_many(void **state) {
    (void)state;
    struct pl_node nodes[2] = { mknode(9000, 1 << 20, 1, 0, NULL), mknode(64000, 1 << 20, 1, 1, NULL) };
    struct pl_cluster c;
    assert_int_equal(pl_cluster_init(&c, nodes, 2), 0);
    observe_shares(&c, 20, 1000, (int[]){ 100 }, 1);
    struct pl_choice ch = place_commit(&c, mkpod(1000, 1000, 1, 100));
    assert_int_equal(ch.node, 0);
    for (int k = 0; k < PL_SLOTS; k++)
        assert_int_equal(c.nodes[0].slot[0][k], 100);
    pl_cluster_free(&c);
}

/* Slots outlive a new plan: the estimate is re-solved after the 650 kept a slot for a 320, and the
 * next 320 still takes it rather than the closer fit. */
static void test_gpuslice_plan_rebuilt(void **state) {
    (void)state;
    struct pl_node nodes[1] = { mknode(256000, 1 << 20, 3, 0, (int[]){ 1000, 330, 1000 }) };
    struct pl_cluster c;
    assert_int_equal(pl_cluster_init(&c, nodes, 1), 0);
    observe_shares(&c, 20, 1000, (int[]){ 650, 320 }, 2);
    struct pl_choice ch = place_commit(&c, mkpod(1000, 1000, 1, 650));
    assert_int_equal(c.nodes[0].slot[ch.gpus[0]][0], 320);
    unsigned v = c.nodes[0].gver;
    observe_shares(&c, 10, 1000, (int[]){ 650, 320 }, 2);
    assert_true(c.nodes[0].gver != v); /* a new estimate, and plan */
    ch = place_commit(&c, mkpod(1000, 1000, 1, 320));
    assert_int_equal(ch.gpus[0], 0);
    pl_cluster_free(&c);
}

/* Memory, as CPU: two 650s on node 0 keep slots for two 320s of 40 GiB each; a CPU-only pod of
 * 24 GiB there would leave 66: enough for one (what FGD's measure checks), not for both. It goes to
 * node 1, which has no GPU. */
static void test_gpuslice_plan_kept_mem(void **state) {
    (void)state;
    struct pl_node nodes[2] = { mknode(256000, 110 * 1024, 2, 0, NULL), mknode(256000, 1 << 20, 0, 1, NULL) };
    struct pl_cluster c;
    assert_int_equal(pl_cluster_init(&c, nodes, 2), 0);
    for (int i = 0; i < 20; i++) {
        struct pl_pod a = mkpod(1000, 10 * 1024, 1, 650), b = mkpod(1000, 40 * 1024, 1, 320);
        pl_observe(&c, &a);
        pl_observe(&c, &b);
    }
    for (int i = 0; i < 2; i++) {
        struct pl_choice ch = place_commit(&c, mkpod(1000, 10 * 1024, 1, 650));
        assert_int_equal(ch.node, 0);
        assert_int_equal(c.nodes[0].slot[ch.gpus[0]][0], 320);
    }
    struct pl_choice ch = place_commit(&c, mkpod(1000, 24 * 1024, 0, 0));
    assert_int_equal(ch.node, 1);
    pl_cluster_free(&c);
}

/* An idle GPU's node must host the rest of the new pattern beside what its slots already keep: on
 * node 0 a 650 keeps a slot for a 320 (8 cores each); a second 650 there would leave 12 cores, enough
 * for one 320 but not for the two the node would then keep. Node 0 scores better (it was the more
 * CPU-strained), yet the 650 opens a GPU on node 1. */
static void test_gpuslice_plan_rest_kept(void **state) {
    (void)state;
    struct pl_node nodes[2] = { mknode(28000, 1 << 20, 2, 0, NULL), mknode(256000, 1 << 20, 2, 1, NULL) };
    struct pl_cluster c;
    assert_int_equal(pl_cluster_init(&c, nodes, 2), 0);
    observe_shares(&c, 20, 8000, (int[]){ 650, 320 }, 2);
    struct pl_choice ch = place_commit(&c, mkpod(8000, 1000, 1, 650));
    assert_int_equal(ch.node, 0);
    ch = place_commit(&c, mkpod(8000, 1000, 1, 650));
    assert_int_equal(ch.node, 1);
    pl_cluster_free(&c);
}

/* gpuslice: the GPU models the constrained pods concentrate on (pk_pressured, pure). 3 models of
 * 1000, 1000 and 2000 milli-GPU; constrained demand 900 on model 0, 100 on 1, 0 on 2: the cluster's
 * is 1000 / 4000 per milli-GPU, model 0 has 0.9 (pressured), model 1 0.1, model 2 none. */
static void test_pressured(void **state) {
    (void)state;
    double dem[3] = { 900, 100, 0 };
    int64_t cap[3] = { 1000, 1000, 2000 };
    assert_int_equal(pk_pressured(dem, cap, 3), 1u);
    dem[1] = 250; /* 0.25 per milli-GPU, the cluster's 1150 / 4000 = 0.2875: still not */
    assert_int_equal(pk_pressured(dem, cap, 3), 1u);
    dem[1] = 600; /* 0.6 >= 1500 / 4000 */
    assert_int_equal(pk_pressured(dem, cap, 3), 3u);
    double none[3] = { 0, 0, 0 };
    assert_int_equal(pk_pressured(none, cap, 3), 0u); /* no constraint: nothing changes */
    int64_t nocap[3] = { 0, 0, 0 };
    assert_int_equal(pk_pressured(dem, nocap, 3), 0u);
}

/* gpuslice: an unconstrained sharing pod keeps off the nodes of a model that the constrained pods
 * seen need: a 460 takes an idle GPU of node 1 ("G2") rather than the close fit (500 free) on node 0
 * ("T4"), where its plan tier would put it; a 460 constrained to T4 takes the close fit, and once
 * node 1 is full the unconstrained one does too. */
static void test_gpuslice_pressured(void **state) {
    (void)state;
    int half[2] = { 500, 0 };
    struct pl_node nodes[2] = { mknode(64000, 262144, 2, 0, half), mknode(64000, 262144, 2, 1, NULL) };
    nodes[1].model = 1;
    struct pl_cluster c;
    assert_int_equal(pl_cluster_init(&c, nodes, 2), 0);
    assert_int_equal(pl_model_index(&c, "T4"), 0);
    assert_int_equal(pl_model_index(&c, "G2"), 1);
    struct pl_pod t4 = mkpod(4000, 16384, 1, 1000), t4s = mkpod(4000, 16384, 1, 460);
    assert_int_equal(pl_spec_mask(&c, "T4", &t4.models), 0);
    t4s.models = t4.models;
    struct pl_pod any = mkpod(4000, 16384, 1, 460);
    for (int i = 0; i < 10; i++) {
        pl_observe(&c, &t4);
        pl_observe(&c, &any);
        pl_observe(&c, &any);
    }
    struct pl_choice ch;
    assert_int_equal(pl_schedule(&c, PL_GPUSLICE, &any, NULL, &ch), 0);
    assert_int_equal(ch.node, 1);
    assert_int_equal(pl_schedule(&c, PL_GPUSLICE, &t4s, NULL, &ch), 0);
    assert_int_equal(ch.node, 0);
    assert_int_equal(ch.gpus[0], 0);
    struct pl_pod two = mkpod(4000, 16384, 2, 1000);
    struct pl_choice full = { .node = 1, .n_gpus = 2, .gpus = { 0, 1 } };
    pl_commit(&c, &two, &full);
    assert_int_equal(pl_schedule(&c, PL_GPUSLICE, &any, NULL, &ch), 0);
    assert_int_equal(ch.node, 0);
    pl_cluster_free(&c);
}

/* PWR's power model (rp_node_power, pure). A T4 node, 2 GPUs, 96 vCPUs = 48 cores = 2 packages of
 * 24 (Xeon 8163: 20 W idle, 165 W full): idle, 2 x 10 + 2 x 20 = 60 W; one GPU used and 8 vCPUs
 * taken (4 cores: one package busy), 70 + 10 + 165 + 20 = 265 W; everything taken, 2 x 70 + 2 x 165
 * = 470 W. A G2 node (PWR's 25/250 W placeholder, fallback CPU 15/120 W, 16 cores): 8 idle GPUs and
 * 64 vCPUs (2 packages) = 8 x 25 + 2 x 15 = 230 W; a shared GPU counts as used (250 W). */
static void test_power(void **state) {
    (void)state;
    int idle[8] = { 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000 }, one[2] = { 0, 1000 }, none[2] = { 0, 0 };
    assert_true(fabs(rp_node_power("T4", 2, idle, 96000, 96000) - 60) < 1e-9);
    assert_true(fabs(rp_node_power("T4", 2, one, 96000, 88000) - 265) < 1e-9);
    assert_true(fabs(rp_node_power("T4", 2, none, 96000, 0) - 470) < 1e-9);
    assert_true(fabs(rp_node_power("G2", 8, idle, 64000, 64000) - 230) < 1e-9);
    int shared[8] = { 530, 1000, 1000, 1000, 1000, 1000, 1000, 1000 };
    assert_true(fabs(rp_node_power("G2", 8, shared, 64000, 63000) - (250 + 7 * 25 + 120 + 15)) < 1e-9);
    /* odd vCPUs: ceil for the capacity (3 cores), floor for the free (1 core): 2 busy, one package */
    assert_true(fabs(rp_node_power("P100", 0, NULL, 5000, 3000) - 120) < 1e-9);
    /* an unknown model: PWR's placeholder, and the fallback CPU */
    assert_true(fabs(rp_node_power("X9", 1, idle, 32000, 32000) - (25 + 15)) < 1e-9);
}

static void test_policy_names(void **state) {
    (void)state;
    enum pl_policy p;
    for (int i = 0; i < PL_POLICY_COUNT; i++) {
        assert_int_equal(pl_policy_from_name(pl_policy_name((enum pl_policy)i), &p), 0);
        assert_int_equal(p, i);
    }
    assert_int_equal(pl_policy_from_name("worstfit", &p), -EINVAL);
}

/* ------------------------------------------------------------------------------------------- */

static char tmpdir[64];

static char *write_file(const char *name, const char *text) {
    static char path[8][128];
    static int k;
    char *p = path[k++ % 8];
    snprintf(p, 128, "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return p;
}

static int setup_dir(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_place.XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_dir(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* a small synthetic trace: 12 nodes, 60 pods of every kind */
static void synth(char **nodes, char **pods) {
    char *nb = malloc(4096), *pb = malloc(16384);
    int off = sprintf(nb, "sn,cpu_milli,memory_mib,gpu,model\n");
    for (int i = 0; i < 12; i++)
        off += sprintf(nb + off, "node-%02d,%d,%d,%d,%s\n", (i * 7) % 12, 32000 + 16000 * (i % 3), 131072,
                       i % 3 == 0 ? 8 : 2, i % 2 ? "T4" : "G2");
    off = sprintf(pb, "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
                      "deletion_time,scheduled_time\n");
    for (int i = 0; i < 60; i++) {
        int kind = (i * 5) % 7;
        int num = kind == 0 ? 0 : kind < 4 ? 1 : kind == 6 ? 4 : 1;
        int milli = kind == 0 ? 0 : kind < 3 ? 250 + 100 * (i % 5) : 1000;
        off += sprintf(pb + off, "pod-%03d,%d,%d,%d,%d,,LS,Running,0,0,0\n", (i * 37) % 60, 2000 + 1000 * (i % 4),
                       8192 + 1024 * (i % 9), num, milli);
    }
    *nodes = write_file("nodes.csv", nb);
    *pods = write_file("pods.csv", pb);
    free(nb);
    free(pb);
}

static void test_replay_deterministic(void **state) {
    (void)state;
    char *np, *pp, err[256];
    synth(&np, &pp);
    struct rp_trace t = { 0 };
    assert_int_equal(rp_load_nodes(&t, np, err, sizeof(err)), 0);
    assert_int_equal(rp_load_pods(&t, pp, err, sizeof(err)), 0);
    assert_int_equal(t.n_nodes, 12);
    assert_int_equal(t.n_pods, 60);
    struct rp_result *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
    for (int pol = 0; pol < PL_POLICY_COUNT; pol++) {
        struct rp_options o = { (enum pl_policy)pol, 42, 1.3, 95, 0 };
        assert_int_equal(rp_run(&t, &o, a), 0);
        assert_int_equal(rp_run(&t, &o, b), 0);
        assert_true(a->n_pct > 100);
        assert_int_equal(a->n_pct, b->n_pct);
        assert_int_equal(a->n_failed, b->n_failed);
        for (int x = 0; x < a->n_pct; x++) {
            if (isnan(a->alloc_pct[x])) {
                assert_true(isnan(b->alloc_pct[x]));
                continue;
            }
            assert_true(a->alloc_pct[x] == b->alloc_pct[x]);
            assert_true(a->frag_pct[x] == b->frag_pct[x]);
            assert_true(a->alloc_pct[x] <= 100.0 + 1e-9);
        }
    }
    /* recording the placed shares changes no decision; they are the sharing pods' sizes */
    struct rp_options o = { PL_GPUSLICE, 42, 1.3, 95, 0 };
    assert_int_equal(rp_run(&t, &o, a), 0);
    o.record_shares = 1;
    assert_int_equal(rp_run(&t, &o, b), 0);
    assert_null(a->shares);
    assert_int_equal(a->n_failed, b->n_failed);
    for (int x = 0; x < a->n_pct; x++)
        assert_true(isnan(a->alloc_pct[x]) ? isnan(b->alloc_pct[x]) : a->alloc_pct[x] == b->alloc_pct[x]);
    assert_true(b->n_shares > 0);
    size_t n_sharing = 0;
    for (size_t i = 0; i < t.n_pods; i++)
        n_sharing += t.pods[i].num_gpu == 1 && t.pods[i].gpu_milli > 0 && t.pods[i].gpu_milli < PL_MILLI;
    assert_true(n_sharing > 0);
    for (size_t i = 0; i < b->n_shares; i++) {
        int m = b->shares[i], known = 0;
        for (size_t j = 0; j < t.n_pods; j++) /* each is the size of some sharing pod of the trace */
            known |= t.pods[j].num_gpu == 1 && t.pods[j].gpu_milli == m && m < PL_MILLI;
        assert_true(known);
    }
    rp_result_release(b);
    assert_null(b->shares);
    assert_int_equal(b->n_shares, 0);
    free(a);
    free(b);
    rp_trace_free(&t);
}

static void expect_error(const char *nodes_text, const char *pods_text, const char *want) {
    char *np = write_file("n.csv", nodes_text), *pp = write_file("p.csv", pods_text), err[256] = "";
    struct rp_trace t = { 0 };
    int rc = rp_load_nodes(&t, np, err, sizeof(err));
    if (rc == 0)
        rc = rp_load_pods(&t, pp, err, sizeof(err));
    assert_true(rc < 0);
    if (!strstr(err, want))
        fail_msg("error '%s' does not contain '%s'", err, want);
    rp_trace_free(&t);
}

static void test_csv_errors(void **state) {
    (void)state;
    const char *okn = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,1024,2,T4\n";
    const char *okp = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1000,10,1,500,\n";
    expect_error("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,1024,2,T4\nn1,lots,1024,2,T4\n", okp,
                 "n.csv:3: field 'cpu_milli': 'lots' is not an integer");
    expect_error("sn,cpu_milli,memory_mib,gpu\nn0,64000,1024,2\n", okp, "n.csv:1: field 'model': missing");
    expect_error("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,1024,99,T4\n", okp, "n.csv:2: field 'gpu'");
    expect_error(okn, "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1000,10,1,500\n",
                 "p.csv:2: 5 fields, the header has 6");
    expect_error(okn, "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1000,-3,1,500,\n",
                 "p.csv:2: field 'memory_mib'");
    expect_error(okn, "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1000,3,2,500,\n",
                 "p.csv:2: field 'gpu_milli'");
    expect_error(okn, "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n", "p.csv: no pods");
    /* a cluster without GPUs divided by zero (found by fuzz_replay); inflating a trace without GPU
     * requests never ended (found while writing it) */
    expect_error("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,1024,0,\n", okp, "n.csv: no node has a GPU");
    expect_error(okn, "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1000,10,0,0,\np1,1000,10,1,0,\n",
                 "p.csv: no pod asks for a GPU");
    expect_error("/nonexistent", okp, "");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gorand),
        cmocka_unit_test(test_filter),
        cmocka_unit_test(test_fullest_node),
        cmocka_unit_test(test_packing_best_gpu),
        cmocka_unit_test(test_ties_by_rank),
        cmocka_unit_test(test_fgd),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_gpuslice),
        cmocka_unit_test(test_gpuslice_cpu_strand),
        cmocka_unit_test(test_gpuslice_plan),
        cmocka_unit_test(test_gpuslice_plan_rest),
        cmocka_unit_test(test_gpuslice_plan_kept),
        cmocka_unit_test(test_gpuslice_plan_shares),
        cmocka_unit_test(test_gpuslice_plan_many),
        cmocka_unit_test(test_gpuslice_plan_rebuilt),
        cmocka_unit_test(test_gpuslice_plan_kept_mem),
        cmocka_unit_test(test_gpuslice_plan_rest_kept),
        cmocka_unit_test(test_pressured),
        cmocka_unit_test(test_gpuslice_refresh_by_state),
        cmocka_unit_test(test_gpuslice_pressured),
        cmocka_unit_test(test_power),
        cmocka_unit_test(test_policy_names),
        cmocka_unit_test(test_replay_deterministic),
        cmocka_unit_test(test_csv_errors),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
