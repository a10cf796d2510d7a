/* test_extender_share.c: the extender's fit of fractional pods in two dimensions per GPU
 * (src/extender/share.h, model.c): gpuslice.io/gpu-memory and gpuslice.io/gpu-compute each within
 * the GPU's own, as the node's guard enforces them. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "extender/model.h"
#include "extender/wire.h"
#include "extender/share.h"

#define GPU_MIB (140 * 1024) /* 140 GiB per GPU */

static struct ex_node_spec node(const char *name, int n_gpu) {
    struct ex_node_spec s = { .cpu = 64000, .mem = 256 * 1024, .n_gpu = n_gpu, .gpu_mem_mib = GPU_MIB };
    snprintf(s.name, sizeof(s.name), "%s", name);
    snprintf(s.model, sizeof(s.model), "H200");
    for (int g = 0; g < n_gpu; g++)
        s.gpu_free[g] = 1000;
    return s;
}

static struct ex_pod frac(const char *uid, int64_t gib, int pct) {
    struct ex_pod p = { .cpu = 1000, .mem = 1024, .gpu_mem_mib = gib * 1024, .compute_pct = pct };
    snprintf(p.uid, sizeof(p.uid), "%s", uid);
    return p;
}

/* The arithmetic: the one figure is the smaller free fraction; a request fits when both do. */
static void test_share_arith(void **state) {
    (void)state;
    struct ex_share none = { 0 }, a = { 130 * 1024, 100 }, b = { 8 * 1024, 900 };
    assert_int_equal(ex_share_milli(&none, GPU_MIB), 0);
    assert_int_equal(ex_share_milli(&a, GPU_MIB), 929); /* 130/140, rounded up */
    assert_int_equal(ex_share_after(&none, 1000, GPU_MIB, &a), 1000 - 929);
    /* b after a: 138 GiB and 100 % compute: fits, nothing left of the one figure */
    assert_int_equal(ex_share_after(&a, 1000 - 929, GPU_MIB, &b), 0);
    /* one percent more, or 3 GiB more, does not fit */
    struct ex_share b2 = { 8 * 1024, 910 }, b3 = { 11 * 1024, 100 };
    assert_int_equal(ex_share_after(&a, 1000 - 929, GPU_MIB, &b2), -1);
    assert_int_equal(ex_share_after(&a, 1000 - 929, GPU_MIB, &b3), -1);
    /* beside 300 milli of a one-figure pod (whole memory and compute): 700 milli of each left */
    struct ex_share c = { 98 * 1024, 700 }, c2 = { 99 * 1024, 10 };
    assert_int_equal(ex_share_after(&none, 700, GPU_MIB, &c), 0);
    assert_int_equal(ex_share_after(&none, 700, GPU_MIB, &c2), -1);
    /* memory on a GPU of unknown memory never fits */
    assert_int_equal(ex_share_after(&none, 1000, 0, &a), -1);
    struct ex_share cpt = { 0, 500 };
    assert_int_equal(ex_share_after(&none, 1000, 0, &cpt), 500);
}

/* A memory-heavy and a compute-heavy pod share one GPU (their larger fractions add up to 1,829
 * milli); filter, bind and the one figure follow both dimensions, and release gives them back. */
/* A GPU's memory in the node's units: an H100 of 81,559 MiB offers 80 GiB (its 79.6 GiB rounded, as
 * the agent advertises gpuslice.io/gpu-memory and the kubelet admits pods), so two 40 GiB pods
 * share one; a third GiB does not fit. */
static void test_memory_in_the_nodes_units(void **state) {
    (void)state;
    struct ex_node_spec ns[] = { node("n", 1) };
    ns[0].gpu_mem_mib = 81559;
    char err[256], why[EX_REASON_MAX];
    struct ex_model m;
    assert_int_equal(ex_model_init(&m, PL_GPUSLICE, ns, 1, err, sizeof(err)), 0);
    struct ex_pod a = frac("a", 40, 0), b = frac("b", 40, 0), c = frac("c", 1, 0);
    struct pl_choice ch;
    ex_observe(&m, &a);
    assert_int_equal(ex_bind(&m, &a, "n", &ch, why, sizeof(why)), 0);
    assert_int_equal(ex_filter(&m, &b, "n", why, sizeof(why)), EX_FIT);
    ex_observe(&m, &b);
    assert_int_equal(ex_bind(&m, &b, "n", &ch, why, sizeof(why)), 0);
    assert_int_equal(m.c.nodes[0].gpu_free[0], 0);
    assert_int_equal(ex_filter(&m, &c, "n", why, sizeof(why)), EX_FAIL);
    struct ex_pod big = frac("big", 81, 0); /* more than the 80 units: named with the GPU's offer */
    assert_int_equal(ex_filter(&m, &big, "n", why, sizeof(why)), EX_UNRESOLVABLE);
    assert_non_null(strstr(why, "this node's GPUs offer 81920 MiB (80 units)"));
    ex_model_free(&m);
}

static void test_two_dimensions(void **state) {
    (void)state;
    struct ex_node_spec ns[] = { node("n", 2) };
    char err[256], why[EX_REASON_MAX];
    for (int pol = PL_FGD; pol <= PL_GPUSLICE; pol++) {
        struct ex_model m;
        assert_int_equal(ex_model_init(&m, (enum pl_policy)pol, ns, 1, err, sizeof(err)), 0);
        struct ex_pod a = frac("a", 130, 10), b = frac("b", 8, 90), c = frac("c", 1, 5);
        struct pl_choice ch;
        ex_observe(&m, &a);
        assert_int_equal(ex_bind(&m, &a, "n", &ch, why, sizeof(why)), 0);
        int g = ch.gpus[0];
        assert_int_equal(m.c.nodes[0].gpu_free[g], 71);
        /* b fits a's GPU (138 GiB, 100 %) and takes it: the fullest */
        assert_int_equal(ex_filter(&m, &b, "n", why, sizeof(why)), EX_FIT);
        ex_observe(&m, &b);
        assert_int_equal(ex_bind(&m, &b, "n", &ch, why, sizeof(why)), 0);
        assert_int_equal(ch.n_gpus, 1);
        assert_int_equal(ch.gpus[0], g);
        assert_int_equal(m.c.nodes[0].gpu_free[g], 0);
        assert_int_equal(m.c.nodes[0].gpu_free[1 - g], 1000);
        assert_int_equal(m.c.alloc_gpu_milli, 1000);
        /* c goes to the other GPU; with it there, a 96 % compute pod fits no GPU */
        assert_int_equal(ex_bind(&m, &c, "n", &ch, why, sizeof(why)), 0);
        assert_int_equal(ch.gpus[0], 1 - g);
        struct ex_pod d = frac("d", 1, 96);
        assert_int_equal(ex_filter(&m, &d, "n", why, sizeof(why)), EX_FAIL);
        assert_non_null(strstr(why, "no single GPU has 960 milli-GPU free"));
        assert_non_null(strstr(why, "free MiB/compute % per GPU: "));
        assert_non_null(strstr(why, g == 0 ? "2048/0,142336/95" : "142336/95,2048/0"));
        /* a whole GPU: none (the one figure), and a compute-only pod of 95 % fits c's GPU */
        struct ex_pod whole = { .gpus = 1 };
        assert_int_equal(ex_filter(&m, &whole, "n", why, sizeof(why)), EX_FAIL);
        struct ex_pod e = frac("e", 0, 95);
        assert_int_equal(ex_filter(&m, &e, "n", why, sizeof(why)), EX_FIT);
        /* a's share given back: b's 8 GiB and 90 % stay on its GPU */
        assert_int_equal(ex_release(&m, "a"), 0);
        assert_int_equal(m.share[0][g].mem_mib, 8 * 1024);
        assert_int_equal(m.share[0][g].compute, 900);
        assert_int_equal(m.c.nodes[0].gpu_free[g], 100);
        assert_int_equal(ex_filter(&m, &a, "n", why, sizeof(why)), EX_FIT); /* on c's GPU */
        /* the node's labels again (a rebuild): the shares are kept */
        assert_int_equal(ex_model_rebuild(&m, ns, 1, err, sizeof(err)), 0);
        assert_int_equal(m.n_bound, 2);
        assert_int_equal(m.c.nodes[0].gpu_free[g], 100);
        assert_int_equal(m.share[0][g].compute, 900);
        ex_model_free(&m);
    }
}

/* Pods the extender learns from the API server: their gpu-index checked in both dimensions; one
 * without it put on the GPU that is fullest after it. */
static void test_commit_two_dimensions(void **state) {
    (void)state;
    struct ex_node_spec ns[] = { node("n", 3) };
    char err[256];
    struct ex_model m;
    assert_int_equal(ex_model_init(&m, PL_GPUSLICE, ns, 1, err, sizeof(err)), 0);
    struct pl_choice ch = { .n_gpus = 1, .gpus = { 0 } }, got;
    struct ex_pod a = frac("a", 100, 20), b = frac("b", 20, 60);
    assert_int_equal(ex_commit(&m, &a, "n", &ch), 0);
    ch.gpus[0] = 1;
    assert_int_equal(ex_commit(&m, &b, "n", &ch), 0);
    /* 30 GiB and 70 %: GPU 0 has 40 GiB and 80 % free (one figure 285), GPU 1 120 GiB and 40 % */
    struct ex_pod c = frac("c", 30, 70);
    ch.gpus[0] = 1;
    assert_int_equal(ex_commit(&m, &c, "n", &ch), -ENOSPC);
    assert_int_equal(ex_commit_best_fit(&m, &c, "n", &got), 0);
    assert_int_equal(got.gpus[0], 0);
    assert_int_equal(m.c.nodes[0].gpu_free[0], 71); /* 1000 - max(929, 900) */
    /* 10 GiB and 30 %: GPU 1 (100 milli left after it) rather than the idle GPU 2 (700) */
    struct ex_pod d = frac("d", 10, 30);
    assert_int_equal(ex_commit_best_fit(&m, &d, "n", &got), 0);
    assert_int_equal(got.gpus[0], 1);
    assert_int_equal(m.c.nodes[0].gpu_free[1], 100);
    ex_model_free(&m);
}

/* prioritize and bind put a pod that completes a GPU's other dimension on that GPU's node, not
 * on an idle one. */
static void test_prioritize_two_dimensions(void **state) {
    (void)state;
    struct ex_node_spec ns[] = { node("a", 1), node("b", 1) };
    char err[256];
    for (int pol = PL_FGD; pol <= PL_GPUSLICE; pol++) {
        struct ex_model m;
        assert_int_equal(ex_model_init(&m, (enum pl_policy)pol, ns, 2, err, sizeof(err)), 0);
        struct ex_pod mem = frac("m", 120, 20), cpt = frac("c", 10, 75);
        struct pl_choice ch = { .n_gpus = 1, .gpus = { 0 } };
        for (int k = 0; k < 24; k++) { /* the policy's workload: these two kinds */
            char uid[16];
            snprintf(uid, sizeof(uid), "w%d", k);
            struct ex_pod w = k % 2 ? frac(uid, 120, 20) : frac(uid, 10, 75);
            ex_observe(&m, &w);
        }
        ex_observe(&m, &mem);
        assert_int_equal(ex_commit(&m, &mem, "b", &ch), 0);
        const char *names[] = { "a", "b" };
        int64_t scores[2];
        ex_observe(&m, &cpt);
        ex_prioritize(&m, &cpt, names, 2, scores);
        assert_int_equal(scores[1], EX_MAX_PRIORITY);
        assert_true(scores[0] < scores[1]);
        ex_model_free(&m);
    }
}

/* Compute alone beside compute alone (the FGD trace's milli-GPU pods) is the one figure: the
 * reason as before; memory in play, the two dimensions said too. */
static void test_compute_alone(void **state) {
    (void)state;
    struct ex_node_spec ns[] = { node("n", 2) };
    char err[256], why[EX_REASON_MAX];
    struct ex_model m;
    assert_int_equal(ex_model_init(&m, PL_GPUSLICE, ns, 1, err, sizeof(err)), 0);
    struct pl_choice ch = { .n_gpus = 1, .gpus = { 0 } };
    struct ex_pod a = frac("a", 0, 60), b = frac("b", 0, 60);
    assert_int_equal(ex_commit(&m, &a, "n", &ch), 0);
    ch.gpus[0] = 1;
    assert_int_equal(ex_commit(&m, &b, "n", &ch), 0);
    struct ex_pod c = frac("c", 0, 50);
    assert_int_equal(ex_filter(&m, &c, "n", why, sizeof(why)), EX_FAIL);
    assert_string_equal(why, "no single GPU has 500 milli-GPU free (free per GPU: 400,400; 800 in all)");
    struct ex_pod d = frac("d", 1, 50);
    assert_int_equal(ex_filter(&m, &d, "n", why, sizeof(why)), EX_FAIL);
    assert_non_null(strstr(why, "800 in all); free MiB/compute % per GPU: 143360/40,143360/40"));
    ex_model_free(&m);
}

/* gpuslice.io/plan-gpu: a pod of a plan group goes to the GPU holding its group, else to an idle
 * GPU rather than beside another group's pods; a pod without one is left to the policy. */
static void test_plan_hint(void **state) {
    (void)state;
    struct ex_node_spec ns[] = { node("a", 2), node("b", 2) };
    char err[256], why[EX_REASON_MAX];
    const char *names[] = { "a", "b" };
    int64_t scores[2];
    for (int pol = PL_FGD; pol <= PL_GPUSLICE; pol++) {
        struct ex_model m;
        assert_int_equal(ex_model_init(&m, (enum pl_policy)pol, ns, 2, err, sizeof(err)), 0);
        struct pl_choice ch = { .n_gpus = 1, .gpus = { 1 } }, got;
        /* group 7 on b's GPU 1, group 8 on a's GPU 0 (with room left on both) */
        struct ex_pod g7 = frac("g7", 40, 30), g8 = frac("g8", 40, 30);
        strcpy(g7.ns, "ns"), strcpy(g8.ns, "ns");
        strcpy(g7.plan_gpu, "7"), strcpy(g8.plan_gpu, "8");
        assert_int_equal(ex_commit(&m, &g7, "b", &ch), 0);
        ch.gpus[0] = 0;
        assert_int_equal(ex_commit(&m, &g8, "a", &ch), 0);
        /* the next pod of group 7: node b, its group's GPU */
        struct ex_pod p = frac("p", 40, 30);
        strcpy(p.ns, "ns"), strcpy(p.plan_gpu, "7");
        ex_prioritize(&m, &p, names, 2, scores);
        assert_int_equal(scores[1], EX_MAX_PRIORITY);
        assert_true(scores[0] < EX_MAX_PRIORITY);
        assert_int_equal(ex_bind(&m, &p, "b", &got, why, sizeof(why)), 0);
        assert_int_equal(got.gpus[0], 1);
        /* a pod of group 9 (no GPU yet): an idle GPU, a's GPU 1 or b's GPU 0, not beside group 8 */
        struct ex_pod q = frac("q", 40, 30);
        strcpy(q.ns, "ns"), strcpy(q.plan_gpu, "9");
        assert_int_equal(ex_bind(&m, &q, "a", &got, why, sizeof(why)), 0);
        assert_int_equal(got.gpus[0], 1);
        /* group 7 in another namespace is another group: an idle GPU */
        struct ex_pod o = frac("o", 40, 30);
        strcpy(o.ns, "other"), strcpy(o.plan_gpu, "7");
        assert_int_equal(ex_bind(&m, &o, "b", &got, why, sizeof(why)), 0);
        assert_int_equal(got.gpus[0], 0);
        /* group 7 is placed: a pod its GPUs cannot take (compute) gets no idle GPU first */
        struct ex_pod big = frac("big", 10, 50);
        strcpy(big.ns, "ns"), strcpy(big.plan_gpu, "7");
        struct ex_node_spec ns3[] = { node("a", 2), node("b", 2), node("c", 1) };
        assert_int_equal(ex_model_rebuild(&m, ns3, 3, err, sizeof(err)), 0);
        const char *three[] = { "a", "b", "c" };
        int64_t sc[3];
        ex_prioritize(&m, &big, three, 3, sc);
        struct ex_pod big9 = big;
        strcpy(big9.plan_gpu, "10"); /* a group on no GPU: the idle node c first */
        int64_t sc9[3];
        ex_prioritize(&m, &big9, three, 3, sc9);
        assert_int_equal(sc9[2], EX_MAX_PRIORITY);
        assert_true(sc9[0] < EX_MAX_PRIORITY && sc9[1] < EX_MAX_PRIORITY);
        struct ex_pod none = big;
        none.plan_gpu[0] = '\0';
        int64_t sc0[3];
        ex_prioritize(&m, &none, three, 3, sc0);
        assert_memory_equal(sc, sc0, sizeof(sc)); /* the policy's own ranking */
        assert_true(sc0[2] < EX_MAX_PRIORITY);     /* which is not the idle node's */
        assert_int_equal(ex_model_rebuild(&m, ns, 2, err, sizeof(err)), 0);
        /* given back and counted again, the GPUs keep their groups */
        assert_int_equal(ex_release(&m, "g8"), 0);
        assert_int_equal(ex_model_rebuild(&m, ns, 2, err, sizeof(err)), 0);
        struct ex_pod r = frac("r", 40, 30);
        strcpy(r.ns, "ns"), strcpy(r.plan_gpu, "9");
        ex_prioritize(&m, &r, names, 2, scores);
        assert_int_equal(scores[0], EX_MAX_PRIORITY);
        ex_model_free(&m);
    }
}

/* The annotation read from the Pod: a value out of shape is no group. */
static void test_plan_hint_json(void **state) {
    (void)state;
    static const char *const vals[] = { "12", "plan-a.3_x", "", "a b", "x/y",
                                        "0123456789012345678901234567890123456789012345678901234567890123" };
    static const char *const want[] = { "12", "plan-a.3_x", "", "", "", "" };
    for (size_t k = 0; k < sizeof(vals) / sizeof(vals[0]); k++) {
        char js[512], err[256];
        snprintf(js, sizeof(js),
                 "{\"metadata\":{\"uid\":\"u\",\"name\":\"p\",\"namespace\":\"d\",\"annotations\":{"
                 "\"gpuslice.io/plan-gpu\":\"%s\"}},\"spec\":{\"containers\":[{\"name\":\"c\"}]}}",
                 vals[k]);
        json_error_t je;
        json_t *j = json_loads(js, 0, &je);
        assert_non_null(j);
        struct ex_pod p;
        assert_int_equal(ex_pod_from_json(j, &p, err, sizeof(err)), 0);
        assert_string_equal(p.plan_gpu, want[k]);
        json_decref(j);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_share_arith),
        cmocka_unit_test(test_memory_in_the_nodes_units),
        cmocka_unit_test(test_two_dimensions),
        cmocka_unit_test(test_commit_two_dimensions),
        cmocka_unit_test(test_prioritize_two_dimensions),
        cmocka_unit_test(test_compute_alone),
        cmocka_unit_test(test_plan_hint),
        cmocka_unit_test(test_plan_hint_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
