/* test_extender.c: the scheduler extender's model, decisions and JSON (src/extender). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "extender/apisource.h"
#include "extender/claims.h"
#include "extender/model.h"
#include "extender/snapshot.h"
#include "extender/wire.h"

static struct ex_node_spec node(const char *name, int n_gpu, const int *free_, int64_t gpu_mem) {
    struct ex_node_spec s = { .cpu = 64000, .mem = 256 * 1024, .n_gpu = n_gpu, .gpu_mem_mib = gpu_mem };
    snprintf(s.name, sizeof(s.name), "%s", name);
    snprintf(s.model, sizeof(s.model), "A100");
    for (int g = 0; g < n_gpu; g++)
        s.gpu_free[g] = free_ ? free_[g] : 1000;
    return s;
}

static struct ex_pod share_pod(const char *uid, int pct) {
    struct ex_pod p = { .cpu = 1000, .mem = 1024, .compute_pct = pct };
    snprintf(p.uid, sizeof(p.uid), "%s", uid);
    return p;
}

/* Two GPUs with 0.4 free each: the node's sum (0.8) would take a 0.5 pod, no GPU does. */
static void test_filter_per_gpu_fit(void **state) {
    (void)state;
    const int split[] = { 400, 400 }, one[] = { 600, 0 };
    struct ex_node_spec ns[] = { node("split", 2, split, 81920), node("one", 2, one, 81920) };
    struct ex_model m;
    char err[256], why[EX_REASON_MAX];
    assert_int_equal(ex_model_init(&m, PL_FGD, ns, 2, err, sizeof(err)), 0);
    struct ex_pod p = share_pod("u1", 50);
    assert_int_equal(ex_filter(&m, &p, "split", why, sizeof(why)), EX_FAIL);
    assert_non_null(strstr(why, "no single GPU has 500 milli-GPU free"));
    assert_non_null(strstr(why, "400,400; 800 in all"));
    assert_int_equal(ex_filter(&m, &p, "one", why, sizeof(why)), EX_FIT);
    /* 0.4 fits both */
    struct ex_pod small = share_pod("u2", 40);
    assert_int_equal(ex_filter(&m, &small, "split", why, sizeof(why)), EX_FIT);
    /* a node it does not know: unresolvable for a GPU pod, fine for a CPU-only one */
    assert_int_equal(ex_filter(&m, &p, "ghost", why, sizeof(why)), EX_UNRESOLVABLE);
    struct ex_pod cpu = { .cpu = 500 };
    assert_int_equal(ex_filter(&m, &cpu, "ghost", why, sizeof(why)), EX_FIT);
    /* whole GPUs: two asked, one free */
    const int one_free[] = { 1000, 300 };
    ex_model_free(&m);
    ns[0] = node("n", 2, one_free, 81920);
    assert_int_equal(ex_model_init(&m, PL_FGD, ns, 1, err, sizeof(err)), 0);
    struct ex_pod two = { .gpus = 2 };
    assert_int_equal(ex_filter(&m, &two, "n", why, sizeof(why)), EX_FAIL);
    assert_non_null(strstr(why, "fewer than 2 GPUs have 1000 milli-GPU free"));
    struct ex_pod three = { .gpus = 3 };
    assert_int_equal(ex_filter(&m, &three, "n", why, sizeof(why)), EX_UNRESOLVABLE);
    ex_model_free(&m);
}

/* A pod's node affinity on gpuslice.io/gpu.product (what kwok_replay.py writes for a trace pod's
 * gpu_spec) reaches the policy: parsed into gpu_spec, refused on another model's node, and the
 * estimate told the pod's models (a term without the label, NotIn or a too long list: any). */
static void test_gpu_product_affinity(void **state) {
    (void)state;
    static const char pod_json[] =
        "{\"metadata\":{\"uid\":\"u-aff\",\"name\":\"p\",\"namespace\":\"d\"},\"spec\":{"
        "\"affinity\":{\"nodeAffinity\":{\"requiredDuringSchedulingIgnoredDuringExecution\":{\"nodeSelectorTerms\":["
        "{\"matchExpressions\":[{\"key\":\"gpuslice.io/kwok-replay\",\"operator\":\"In\",\"values\":[\"true\"]},"
        "{\"key\":\"gpuslice.io/gpu.product\",\"operator\":\"In\",\"values\":[\"V100M16\",\"P100\"]}]}]}}},"
        "\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{\"gpuslice.io/gpu-compute\":\"50\"}}}]}}";
    char err[256], why[EX_REASON_MAX];
    json_error_t je;
    json_t *j = json_loads(pod_json, 0, &je);
    assert_non_null(j);
    struct ex_pod p;
    assert_int_equal(ex_pod_from_json(j, &p, err, sizeof(err)), 0);
    assert_string_equal(p.gpu_spec, "V100M16|P100");
    /* a second term without the label: any model */
    json_t *terms = json_object_get(json_object_get(json_object_get(json_object_get(json_object_get(j, "spec"),
        "affinity"), "nodeAffinity"), "requiredDuringSchedulingIgnoredDuringExecution"), "nodeSelectorTerms");
    json_array_append_new(terms, json_pack("{s:[{s:s,s:s,s:[s]}]}", "matchExpressions", "key", "zone", "operator",
                                           "In", "values", "a"));
    assert_int_equal(ex_pod_from_json(j, &p, err, sizeof(err)), 0);
    assert_string_equal(p.gpu_spec, "");
    json_array_remove(terms, 1);
    /* a nodeSelector on the label narrows the set to its value */
    json_object_set_new(json_object_get(j, "spec"), "nodeSelector", json_pack("{s:s}", "gpuslice.io/gpu.product", "P100"));
    assert_int_equal(ex_pod_from_json(j, &p, err, sizeof(err)), 0);
    assert_string_equal(p.gpu_spec, "P100");
    json_object_del(json_object_get(j, "spec"), "nodeSelector");
    /* NotIn: not understood, any */
    json_t *ex = json_array_get(json_object_get(json_array_get(terms, 0), "matchExpressions"), 1);
    json_object_set_new(ex, "operator", json_string("NotIn"));
    assert_int_equal(ex_pod_from_json(j, &p, err, sizeof(err)), 0);
    assert_string_equal(p.gpu_spec, "");
    /* more names than EX_SPEC_MAX holds: any */
    json_object_set_new(ex, "operator", json_string("In"));
    json_t *vals = json_object_get(ex, "values");
    for (int k = 0; k < 40; k++) {
        char name[16];
        snprintf(name, sizeof(name), "MODEL-%02d", k);
        json_array_append_new(vals, json_string(name));
    }
    assert_int_equal(ex_pod_from_json(j, &p, err, sizeof(err)), 0);
    assert_string_equal(p.gpu_spec, "");
    json_decref(j);

    /* the filter: a node of another model refused, naming both; an allowed one fits */
    struct ex_node_spec ns[] = { node("a100", 1, NULL, 81920), node("v100", 1, NULL, 16384) };
    snprintf(ns[1].model, sizeof(ns[1].model), "V100M16");
    struct ex_model m;
    assert_int_equal(ex_model_init(&m, PL_GPUSLICE, ns, 2, err, sizeof(err)), 0);
    struct ex_pod q = share_pod("u-v100", 50);
    snprintf(q.gpu_spec, sizeof(q.gpu_spec), "V100M16|P100");
    assert_int_equal(ex_filter(&m, &q, "a100", why, sizeof(why)), EX_UNRESOLVABLE);
    assert_non_null(strstr(why, "GPU model A100"));
    assert_non_null(strstr(why, "allows V100M16|P100"));
    assert_int_equal(ex_filter(&m, &q, "v100", why, sizeof(why)), EX_FIT);
    struct pl_pod pp;
    assert_int_equal(ex_pod_on_node(&m, 1, &q, &pp, why, sizeof(why)), 0);
    assert_int_not_equal(pp.models, 0u);
    assert_int_equal(pp.models, 1u << m.c.nodes[1].model); /* P100: no node has it */
    /* without a spec every node is the pod's */
    struct ex_pod any = share_pod("u-any", 50);
    assert_int_equal(ex_filter(&m, &any, "a100", why, sizeof(why)), EX_FIT);
    assert_int_equal(ex_pod_on_node(&m, 0, &any, &pp, why, sizeof(why)), 0);
    assert_int_equal(pp.models, 0u);
    ex_model_free(&m);
}

/* Memory shares are fractions of the node's GPU size; impossible requests are unresolvable. */
static void test_memory_share(void **state) {
    (void)state;
    const int f[] = { 300, 1000 };
    struct ex_node_spec ns[] = { node("big", 2, f, 81920), node("small", 1, NULL, 24576), node("unknown", 1, NULL, 0) };
    struct ex_model m;
    char err[256], why[EX_REASON_MAX];
    assert_int_equal(ex_model_init(&m, PL_GPUSLICE, ns, 3, err, sizeof(err)), 0);
    struct ex_pod p = { .gpu_mem_mib = 20480 }; /* 20 GiB: 250 milli of 80 GiB, 834 of 24 GiB */
    struct pl_pod q;
    assert_int_equal(ex_pod_on_node(&m, 0, &p, &q, why, sizeof(why)), 0);
    assert_int_equal(q.gpu_milli, 250);
    assert_int_equal(q.num_gpu, 1);
    assert_int_equal(ex_pod_on_node(&m, 1, &p, &q, why, sizeof(why)), 0);
    assert_int_equal(q.gpu_milli, 834);
    assert_int_equal(ex_filter(&m, &p, "unknown", why, sizeof(why)), EX_UNRESOLVABLE);
    assert_non_null(strstr(why, "not known"));
    p.gpu_mem_mib = 40960; /* more than the small GPU has */
    assert_int_equal(ex_filter(&m, &p, "small", why, sizeof(why)), EX_UNRESOLVABLE);
    assert_non_null(strstr(why, "24576 MiB"));
    /* compute and memory: the larger fraction */
    p = (struct ex_pod){ .gpu_mem_mib = 10240, .compute_pct = 30 };
    assert_int_equal(ex_pod_on_node(&m, 0, &p, &q, why, sizeof(why)), 0);
    assert_int_equal(q.gpu_milli, 300);
    /* a share with a whole-GPU count */
    p.gpus = 1;
    assert_int_equal(ex_filter(&m, &p, "big", why, sizeof(why)), EX_UNRESOLVABLE);
    assert_non_null(strstr(why, "whole-GPU count"));
    ex_model_free(&m);
}

/* prioritize orders the nodes as the engine's score does, best 10, unfit 0. */
/* a workload for the policies to learn: n pods of half and quarter GPUs */
static void learn_shares(struct ex_model *m, int n) {
    for (int i = 0; i < n; i++) {
        char uid[16];
        snprintf(uid, sizeof(uid), "w%d", i);
        struct ex_pod w = share_pod(uid, i % 2 ? 50 : 25);
        ex_observe(m, &w);
    }
}

static void test_prioritize_follows_engine(void **state) {
    (void)state;
    const int a[] = { 1000, 1000, 1000, 1000 }, b[] = { 500, 1000, 1000, 1000 }, c[] = { 250, 0, 0, 0 },
              d[] = { 700, 700, 1000, 1000 };
    struct ex_node_spec ns[] = { node("a", 4, a, 81920), node("b", 4, b, 81920), node("c", 4, c, 81920),
                                 node("d", 4, d, 81920) };
    enum pl_policy pols[] = { PL_FGD, PL_GPUSLICE };
    for (size_t k = 0; k < 2; k++) {
        struct ex_model m;
        char err[256];
        assert_int_equal(ex_model_init(&m, pols[k], ns, 4, err, sizeof(err)), 0);
        learn_shares(&m, 200);
        struct ex_pod p = share_pod("x", 50);
        const char *names[] = { "a", "b", "c", "d", "ghost" };
        int64_t sc[5];
        ex_prioritize(&m, &p, names, 5, sc);
        int64_t raw[4];
        int best = -1;
        for (int i = 0; i < 4; i++) {
            struct pl_pod q;
            char why[EX_REASON_MAX];
            assert_int_equal(ex_pod_on_node(&m, (size_t)i, &p, &q, why, sizeof(why)), 0);
            int r = pl_score_node(&m.c, pols[k], (size_t)i, &q, &raw[i], NULL);
            if (i == 2) {
                assert_int_equal(r, -ENOSPC); /* 250 free: a 500 pod does not fit */
                assert_int_equal(sc[i], 0);
                continue;
            }
            assert_int_equal(r, 0);
            assert_in_range(sc[i], 1, EX_MAX_PRIORITY);
            if (best < 0 || raw[i] > raw[best])
                best = i;
        }
        assert_int_equal(sc[4], 0);
        assert_int_equal(sc[best], EX_MAX_PRIORITY);
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++)
                if (i != 2 && j != 2 && raw[i] > raw[j])
                    assert_true(sc[i] >= sc[j]);
        /* the engine's own decision picks a node of the top score */
        struct pl_pod q;
        char why[EX_REASON_MAX];
        ex_pod_on_node(&m, 0, &p, &q, why, sizeof(why));
        struct pl_choice ch;
        assert_int_equal(pl_schedule(&m.c, pols[k], &q, NULL, &ch), 0);
        assert_int_equal(sc[ch.node], EX_MAX_PRIORITY);
        ex_model_free(&m);
    }
}

/* prioritize scores each state of node once (pl_node_groups): nodes alike in the engine but not
 * in their GPUs' memory are scored apart (a 30 GiB share is 375 milli of an 80 GiB GPU, 750 of a
 * 40 GiB one), identical ones alike, and every score is the one a list of that node alone beside
 * the first would give. */
static void test_prioritize_groups(void **state) {
    (void)state;
    struct ex_node_spec ns[8];
    const char *names[8];
    char nm[8][8];
    for (int i = 0; i < 8; i++) {
        snprintf(nm[i], sizeof(nm[i]), "n%d", i);
        ns[i] = node(nm[i], 4, NULL, i == 5 ? 40960 : 81920);
        names[i] = nm[i];
    }
    enum pl_policy pols[] = { PL_FGD, PL_GPUSLICE };
    for (size_t k = 0; k < 2; k++) {
        struct ex_model m;
        char err[256];
        assert_int_equal(ex_model_init(&m, pols[k], ns, 8, err, sizeof(err)), 0);
        learn_shares(&m, 100);
        struct ex_pod p = { .cpu = 1000, .mem = 1024, .gpu_mem_mib = 30 * 1024 };
        snprintf(p.uid, sizeof(p.uid), "x");
        struct pl_choice ch;
        char why[EX_REASON_MAX];
        assert_int_equal(ex_bind(&m, &p, "n3", &ch, why, sizeof(why)), 0); /* n3 differs now */
        struct ex_pod q = p;
        snprintf(q.uid, sizeof(q.uid), "y");
        int64_t raw[8], sc[8];
        for (int i = 0; i < 8; i++) {
            struct pl_pod e;
            assert_int_equal(ex_pod_on_node(&m, (size_t)i, &q, &e, why, sizeof(why)), 0);
            assert_int_equal(pl_score_node(&m.c, pols[k], (size_t)i, &e, &raw[i], NULL), 0);
        }
        assert_true(raw[5] != raw[0]); /* the test could fail if n5 were taken for n0 */
        ex_prioritize(&m, &q, names, 8, sc);
        for (int i = 1; i < 8; i++) {
            int64_t pair[2];
            const char *two[2] = { names[0], names[i] };
            ex_prioritize(&m, &q, two, 2, pair);
            if (raw[i] == raw[0])
                assert_int_equal(sc[i], sc[1 + (i == 1)]); /* the tie's 9 (or its 10 at n0) */
            else
                assert_true((raw[i] > raw[0]) == (sc[i] > sc[0]) && (pair[1] > pair[0]) == (raw[i] > raw[0]));
        }
        ex_model_free(&m);
    }
}

/* Only one node, of the best raw score, gets 10 (exact ties: the smallest name): with 1..10 over
 * the whole range, rounded (the mapping before), every node within 1/18 of the range from the best
 * tied at 10 and the scheduler picked among them at random. The nodes here differ slightly (the top ones) and one is far worse,
 * so that mapping would tie several; the test checks it would, so it cannot pass vacuously. */
static void test_prioritize_only_best_is_top(void **state) {
    (void)state;
    enum { N = 12 };
    struct ex_node_spec ns[N];
    const char *names[N];
    char nm[N][8];
    for (int i = 0; i < N; i++) {
        int f[2] = { 300 + 60 * i, 1000 - 70 * i }; /* free shares of many sizes */
        snprintf(nm[i], sizeof(nm[i]), "n%d", i);
        ns[i] = node(nm[i], 2, f, 81920);
        if (i == N - 1) /* far below the rest: the pod leaves too little CPU for the GPUs' rest */
            ns[i].cpu = 1500, ns[i].gpu_free[0] = ns[i].gpu_free[1] = 1000;
        names[i] = nm[i];
    }
    enum pl_policy pols[] = { PL_FGD, PL_GPUSLICE };
    for (size_t k = 0; k < 2; k++) {
        struct ex_model m;
        char err[256], why[EX_REASON_MAX];
        assert_int_equal(ex_model_init(&m, pols[k], ns, N, err, sizeof(err)), 0);
        for (int i = 0; i < 300; i++) {
            char uid[16];
            snprintf(uid, sizeof(uid), "w%d", i);
            struct ex_pod w = share_pod(uid, i % 3 == 0 ? 50 : i % 3 == 1 ? 25 : 10);
            ex_observe(&m, &w);
        }
        struct ex_pod p = share_pod("x", 30);
        int64_t sc[N], raw[N], lo = INT64_MAX, hi = INT64_MIN;
        ex_prioritize(&m, &p, names, N, sc);
        for (int i = 0; i < N; i++) {
            struct pl_pod q;
            assert_int_equal(ex_pod_on_node(&m, (size_t)i, &p, &q, why, sizeof(why)), 0);
            assert_int_equal(pl_score_node(&m.c, pols[k], (size_t)i, &q, &raw[i], NULL), 0);
            lo = raw[i] < lo ? raw[i] : lo;
            hi = raw[i] > hi ? raw[i] : hi;
        }
        assert_true(hi > lo);
        /* one node gets 10: of those with the best raw score, the smallest name (in any order of
         * the request's names); the rest of that tie 9 */
        int top = -1, n_tied = 0;
        for (int i = 0; i < N; i++)
            if (raw[i] == hi) {
                n_tied++;
                if (top < 0 || strcmp(names[i], names[top]) < 0)
                    top = i;
            }
        if (k == 0)
            assert_true(n_tied >= 2); /* FGD's integer score ties here: the tie-break is tested */
        const char *rev[N];
        int64_t rsc[N];
        for (int i = 0; i < N; i++)
            rev[i] = names[N - 1 - i];
        ex_prioritize(&m, &p, rev, N, rsc);
        int old_top = 0, old_top_not_best = 0;
        for (int i = 0; i < N; i++) {
            /* 10 for that node only; 1..9 elsewhere, in the engine's order */
            assert_int_equal(sc[i] == EX_MAX_PRIORITY, i == top);
            assert_int_equal(rsc[N - 1 - i], sc[i]);
            if (raw[i] == hi && i != top)
                assert_int_equal(sc[i], EX_MAX_PRIORITY - 1);
            assert_in_range(sc[i], 1, EX_MAX_PRIORITY);
            for (int j = 0; j < N; j++)
                if (raw[i] > raw[j])
                    assert_true(sc[i] >= sc[j]);
            int64_t old = 1 + ((raw[i] - lo) * (EX_MAX_PRIORITY - 1) * 2 + (hi - lo)) / (2 * (hi - lo));
            old_top += old == EX_MAX_PRIORITY;
            old_top_not_best += old == EX_MAX_PRIORITY && raw[i] != hi;
        }
        assert_true(old_top >= 2); /* the old mapping tied nodes the engine ranks apart */
        assert_true(old_top_not_best >= 1);
        ex_model_free(&m);
    }
}

/* bind takes the policy's GPU and commits it: the next filter sees the GPU's new free share. */
static void test_bind_commits(void **state) {
    (void)state;
    const int f[] = { 600, 1000 };
    struct ex_node_spec ns[] = { node("n", 2, f, 81920) };
    struct ex_model m;
    char err[256], why[EX_REASON_MAX];
    assert_int_equal(ex_model_init(&m, PL_FGD, ns, 1, err, sizeof(err)), 0);
    struct ex_pod p = share_pod("u1", 50);
    struct pl_choice ch;
    assert_int_equal(ex_bind(&m, &p, "n", &ch, why, sizeof(why)), 0);
    assert_int_equal(ch.n_gpus, 1);
    int g = ch.gpus[0];
    assert_int_equal(m.c.nodes[0].gpu_free[g], (g == 0 ? 600 : 1000) - 500);
    assert_int_equal(ex_bind(&m, &p, "n", &ch, why, sizeof(why)), -EALREADY);
    assert_int_equal(ch.gpus[0], g);
    assert_non_null(ex_find_bound(&m, "u1"));
    struct ex_pod q = share_pod("u2", 60);
    struct pl_choice same = { .n_gpus = 1, .gpus = { g } }, other = { .n_gpus = 1, .gpus = { 1 - g } };
    assert_int_equal(ex_commit(&m, &q, "n", &same), -ENOSPC); /* 100 or 500 left there */
    assert_int_equal(ex_commit(&m, &q, "n", &other), 0);
    assert_int_equal(m.c.nodes[0].gpu_free[1 - g], (g == 0 ? 1000 : 600) - 600);
    struct pl_choice bad = { .n_gpus = 1, .gpus = { 7 } };
    struct ex_pod q2 = share_pod("u4", 10);
    assert_int_equal(ex_commit(&m, &q2, "n", &bad), -EINVAL);
    assert_int_equal(ex_bind(&m, &p, "ghost", &ch, why, sizeof(why)), -EALREADY); /* by uid first */
    struct ex_pod r = share_pod("u3", 10);
    assert_int_equal(ex_bind(&m, &r, "ghost", &ch, why, sizeof(why)), -ENOENT);
    ex_model_free(&m);
    /* duplicate names are refused */
    struct ex_node_spec dup[] = { node("n", 1, NULL, 0), node("n", 1, NULL, 0) };
    assert_int_equal(ex_model_init(&m, PL_FGD, dup, 2, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "node n: listed twice"));
    assert_int_equal(ex_model_init(&m, PL_RANDOM, dup, 1, err, sizeof(err)), -EINVAL);
}

/* One container asking `res: "q"`: the pod the extender maps (0) or the error. */
static int one_request(const char *res, const char *q, struct ex_pod *p) {
    char js[512], why[256];
    snprintf(js, sizeof(js),
             "{\"metadata\": {\"uid\": \"u\"}, \"spec\": {\"containers\": [{\"resources\": {\"requests\": "
             "{\"%s\": \"%s\"}}}]}}",
             res, q);
    json_t *pod = json_loads(js, 0, NULL);
    assert_non_null(pod);
    int r = ex_pod_from_json(pod, p, why, sizeof(why));
    json_decref(pod);
    return r;
}

/* A pod's quantities in Kubernetes' syntax (util/quantity.h): CPU in thousandths, memory in bytes
 * (then MiB), both rounded up as Kubernetes rounds; GPUs whole. */
static void test_quantity(void **state) {
    (void)state;
    struct ex_pod p;
    static const struct {
        const char *q;
        int64_t milli;
    } cpu[] = { { "500m", 500 }, { "2", 2000 }, { "1.5", 1500 }, { "1e3", 1000000 }, { "0.1m", 1 }, { "+2", 2000 },
                { "1k", 1000000 } };
    for (size_t i = 0; i < sizeof(cpu) / sizeof(cpu[0]); i++) {
        assert_int_equal(one_request("cpu", cpu[i].q, &p), 0);
        assert_int_equal(p.cpu, cpu[i].milli);
    }
    assert_int_equal(one_request("memory", "1Gi", &p), 0);
    assert_int_equal(p.mem, 1024);
    assert_int_equal(one_request("memory", "10G", &p), 0); /* 10^10 bytes, not 10 GiB */
    assert_int_equal(p.mem, 9537);                         /* MiB, rounded up */
    assert_int_equal(one_request("memory", "1Ei", &p), 0); /* past int64 in thousandths, not in bytes */
    assert_int_equal(p.mem, 1LL << 40);
    assert_int_equal(one_request(EX_RES_GPU, "2000m", &p), 0);
    assert_int_equal(p.gpus, 2);
    assert_int_equal(one_request(EX_RES_GPU, "1500m", &p), -EINVAL);
    static const char *const bad[] = { "-1", "1x", "", "1e", "9Ei", "1 ", "1e19" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(one_request("memory", bad[i], &p), -EINVAL);
}

static const char args_json[] =
    "{\"Pod\": {\"metadata\": {\"name\": \"p\", \"namespace\": \"ns\", \"uid\": \"u-1\"},"
    " \"spec\": {\"initContainers\": [{\"resources\": {\"requests\": {\"cpu\": \"4\"}}}],"
    "  \"containers\": [{\"resources\": {\"requests\": {\"cpu\": \"500m\", \"memory\": \"1Gi\"},"
    "    \"limits\": {\"gpuslice.io/gpu-compute\": \"30\", \"gpuslice.io/gpu-memory\": \"10\"}}},"
    "   {\"resources\": {\"limits\": {\"cpu\": \"1\", \"memory\": \"512Mi\"}}}]}},"
    " \"nodenames\": [\"n1\", \"n2\"]}";

static void test_args_mapping(void **state) {
    (void)state;
    struct ex_args a;
    char err[256];
    assert_int_equal(ex_args_parse(args_json, strlen(args_json), EX_REQ_NODES_MAX, &a, err, sizeof(err)), 0);
    assert_string_equal(a.pod.uid, "u-1");
    assert_string_equal(a.pod.ns, "ns");
    assert_string_equal(a.pod.name, "p");
    assert_int_equal(a.pod.cpu, 4000); /* the init container's 4 > 0.5 + 1 */
    assert_int_equal(a.pod.mem, 1536);
    assert_int_equal(a.pod.compute_pct, 30);
    assert_int_equal(a.pod.gpu_mem_mib, 10240);
    assert_int_equal(a.pod.gpus, 0);
    assert_int_equal(a.n_names, 2); /* "nodenames": matched without regard to case */
    assert_string_equal(a.names[1], "n2");
    ex_args_free(&a);
    /* Nodes (nodeCacheCapable false): names from the items */
    const char *nodes = "{\"Pod\": {\"spec\": {}}, \"Nodes\": {\"items\": [{\"metadata\": {\"name\": \"x\"}}]}}";
    assert_int_equal(ex_args_parse(nodes, strlen(nodes), EX_REQ_NODES_MAX, &a, err, sizeof(err)), 0);
    assert_int_equal(a.n_names, 1);
    assert_string_equal(a.names[0], "x");
    ex_args_free(&a);
    struct {
        const char *in;
        int r;
        const char *msg;
    } bad[] = {
        { "{", -EBADMSG, "ExtenderArgs: at byte 1: expected a key" },
        { "{\"Pod\": {}, \"NodeNames\": []} x", -EBADMSG, "text after the object" },
        { "{\"Pod\": {\"a\": [1, 2,]}, \"NodeNames\": []}", -EBADMSG, "not JSON" },
        { "{\"Pod\": {}, \"NodeNames\": [\"a\\u0041\"]}", -EBADMSG, "NodeNames[0]: not a node name" },
        { "[]", -EBADMSG, "not a JSON object" },
        { "{\"NodeNames\": []}", -EBADMSG, "no Pod" },
        { "{\"Pod\": {}}", -EBADMSG, "neither NodeNames nor Nodes" },
        { "{\"Pod\": {}, \"NodeNames\": [1]}", -EBADMSG, "NodeNames[0]: not a node name" },
        { "{\"Pod\": {\"spec\": {\"containers\": [{}, {\"resources\": {\"requests\": {\"cpu\": \"5x\"}}}]}}, "
          "\"NodeNames\": []}",
          -EINVAL, "Pod.spec.containers[1].resources.requests.cpu: '5x': not a quantity" },
        { "{\"Pod\": {\"spec\": {\"containers\": [{\"resources\": {\"limits\": {\"nvidia.com/gpu\": \"500m\"}}}]}}, "
          "\"NodeNames\": []}",
          -EINVAL, "whole devices" },
        { "{\"Pod\": {\"spec\": {\"containers\": [{\"resources\": {\"limits\": {\"gpuslice.io/gpu-memory\": "
          "\"10Gi\"}}}]}}, \"NodeNames\": []}",
          -EINVAL, "gpuslice.io/gpu-memory is counted in GiB (write 10 for 10 GiB)" },
        { "{\"Pod\": {}, \"Pod\": {}, \"NodeNames\": []}", -EBADMSG, "duplicate" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_int_equal(ex_args_parse(bad[i].in, strlen(bad[i].in), EX_REQ_NODES_MAX, &a, err, sizeof(err)), bad[i].r);
        if (!strstr(err, bad[i].msg))
            fail_msg("%s: '%s' lacks '%s'", bad[i].in, err, bad[i].msg);
    }
}

static void test_render(void **state) {
    (void)state;
    const char *names[] = { "a", "b", "c" };
    enum ex_verdict v[] = { EX_FIT, EX_FAIL, EX_UNRESOLVABLE };
    char why[3][EX_REASON_MAX] = { "", "no single GPU", "no GPUs" };
    size_t len;
    char *t = ex_filter_render(names, v, why, 3, &len);
    assert_non_null(t);
    json_t *j = json_loads(t, 0, NULL);
    assert_non_null(j);
    assert_int_equal(json_array_size(json_object_get(j, "NodeNames")), 1);
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "NodeNames"), 0)), "a");
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "FailedNodes"), "b")), "no single GPU");
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "FailedAndUnresolvableNodes"), "c")),
                        "no GPUs");
    assert_string_equal(json_string_value(json_object_get(j, "Error")), "");
    assert_int_equal(strlen(t), len);
    json_decref(j);
    free(t);
    int64_t sc[] = { 10, 0, 3 };
    t = ex_priorities_render(names, sc, 3, &len);
    assert_string_equal(t, "[{\"Host\":\"a\",\"Score\":10},{\"Host\":\"b\",\"Score\":0},{\"Host\":\"c\",\"Score\":3}]");
    free(t);
    struct ex_bind_args b;
    char err[256];
    const char *bj = "{\"PodName\":\"p\",\"PodNamespace\":\"ns\",\"PodUID\":\"u\",\"Node\":\"n1\"}";
    assert_int_equal(ex_bind_args_parse(bj, strlen(bj), &b, err, sizeof(err)), 0);
    assert_string_equal(b.node, "n1");
    assert_string_equal(b.uid, "u");
    assert_int_equal(ex_bind_args_parse("{\"PodName\":\"p\"}", 15, &b, err, sizeof(err)), -EBADMSG);
    assert_non_null(strstr(err, "PodNamespace"));
}

static void test_snapshot(void **state) {
    (void)state;
    const char *js = "{\"nodes\": [{\"name\": \"n1\", \"cpuMilli\": 8000, \"gpuModel\": \"T4\", \"gpuFree\": [400, 400]},"
                     " {\"name\": \"n2\", \"gpus\": 2}]}";
    struct ex_node_spec *ns;
    size_t n;
    char err[256];
    assert_int_equal(ex_snapshot_parse(js, strlen(js), "s.json", &ns, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ns[0].n_gpu, 2);
    assert_int_equal(ns[0].gpu_free[1], 400);
    assert_int_equal(ns[1].gpu_free[1], 1000);
    free(ns);
    const char *bad = "{\"nodes\": [{\"name\": \"n1\", \"gpus\": 1, \"gpuFree\": [400, 400]}]}";
    assert_int_equal(ex_snapshot_parse(bad, strlen(bad), "s.json", &ns, &n, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "s.json: nodes[0].gpuFree: 2 values for 1 GPUs");
    const char *bad2 = "{\"nodes\": [{\"name\": \"n1\", \"gpuFree\": [1001]}]}";
    assert_int_equal(ex_snapshot_parse(bad2, strlen(bad2), "s.json", &ns, &n, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "s.json: nodes[0].gpuFree[0]: expected milli-GPU 0..1000");
}

/* A pod that leaves gives its share back; the node's other pods stay; best fit as the node's. */
static void test_release_and_best_fit(void **state) {
    (void)state;
    const int f[] = { 1000, 1000 };
    struct ex_node_spec ns[] = { node("n", 2, f, 81920) };
    struct ex_model m;
    char err[256];
    for (int pol = PL_BESTFIT; pol <= PL_GPUSLICE; pol++) {
        assert_int_equal(ex_model_init(&m, (enum pl_policy)pol, ns, 1, err, sizeof(err)), 0);
        struct ex_pod a = share_pod("a", 30), b = share_pod("b", 50), c = share_pod("c", 60);
        struct pl_choice ca = { .n_gpus = 1, .gpus = { 1 } }, cb, cc;
        assert_int_equal(ex_commit(&m, &a, "n", &ca), 0);
        /* best fit: the fullest GPU that holds it, GPU 1 (700 free) */
        assert_int_equal(ex_commit_best_fit(&m, &b, "n", &cb), 0);
        assert_int_equal(cb.n_gpus, 1);
        assert_int_equal(cb.gpus[0], 1);
        assert_int_equal(m.c.nodes[0].gpu_free[1], 200);
        /* 60 % fits GPU 0 only */
        assert_int_equal(ex_commit_best_fit(&m, &c, "n", &cc), 0);
        assert_int_equal(cc.gpus[0], 0);
        struct ex_pod d = share_pod("d", 50), ghost = share_pod("ghost", 10);
        struct pl_choice cd;
        assert_int_equal(ex_commit_best_fit(&m, &d, "n", &cd), -ENOSPC); /* 400 and 200 free */
        assert_int_equal(ex_commit_best_fit(&m, &ghost, "nowhere", &cd), -ENOENT);
        assert_int_equal(m.c.alloc_gpu_milli, 1400);
        assert_int_equal(m.c.nodes[0].cpu_left, 64000 - 3000);
        /* b leaves: GPU 1 back to 700, a and c stay */
        assert_int_equal(ex_release(&m, "b"), 0);
        assert_int_equal(ex_release(&m, "b"), -ENOENT);
        assert_null(ex_find_bound(&m, "b"));
        assert_int_equal(m.n_bound, 2);
        assert_int_equal(m.c.nodes[0].gpu_free[0], 400);
        assert_int_equal(m.c.nodes[0].gpu_free[1], 700);
        assert_int_equal(m.c.nodes[0].n_pods, 2);
        assert_int_equal(m.c.nodes[0].cpu_left, 64000 - 2000);
        assert_int_equal(m.c.alloc_gpu_milli, 900);
        /* now d fits GPU 1, and the filter says so */
        char why[EX_REASON_MAX];
        assert_int_equal(ex_filter(&m, &d, "n", why, sizeof(why)), EX_FIT);
        assert_int_equal(ex_release(&m, "a"), 0);
        assert_int_equal(ex_release(&m, "c"), 0);
        assert_int_equal(m.c.nodes[0].gpu_free[0], 1000);
        assert_int_equal(m.c.nodes[0].gpu_free[1], 1000);
        assert_int_equal(m.c.alloc_gpu_milli, 0);
        assert_int_equal(m.c.nodes[0].n_pods, 0);
        double frag = 0;
        for (size_t i = 0; i < m.c.n_nodes; i++)
            frag += m.c.nodes[i].frag;
        assert_true(m.c.frag_sum - frag < 1e-6 && frag - m.c.frag_sum < 1e-6);
        ex_model_free(&m);
    }
}

/* The Nodes change: pods on nodes still there are committed again, the others dropped. */
/* FGD's target workload given (--workload): the targets are the engine's from those pods, with
 * each spec's mask against the model's table; the pods seen do not change them; a rebuild keeps
 * them. */
static void test_workload_targets(void **state) {
    (void)state;
    struct ex_node_spec ns[] = { node("a", 2, NULL, 81920), node("v", 2, NULL, 32768) };
    snprintf(ns[1].model, sizeof(ns[1].model), "V100");
    struct ex_model m;
    char err[256];
    assert_int_equal(ex_model_init(&m, PL_FGD, ns, 2, err, sizeof(err)), 0);
    struct pl_pod wl[10];
    const char *specs[10];
    for (int i = 0; i < 10; i++) {
        wl[i] = (struct pl_pod){ .cpu = 1000, .num_gpu = 1, .gpu_milli = i < 6 ? 500 : 250, .models = 0x80 };
        specs[i] = i < 6 ? "" : "V100";
    }
    assert_int_equal(ex_model_set_workload(&m, wl, NULL, 0, err, sizeof(err)), -EINVAL);
    assert_int_equal(ex_model_set_workload(&m, wl, specs, 10, err, sizeof(err)), 0);
    assert_int_equal(m.c.n_targets, 2);
    assert_int_equal(m.c.targets[0].milli, 500);
    assert_int_equal(m.c.targets[0].models, 0); /* "": any model, whatever mask the caller had */
    assert_int_equal(m.c.targets[1].milli, 250);
    assert_int_equal(m.c.targets[1].models, 1u << pl_model_index(&m.c, "V100"));
    assert_true(m.c.targets[0].p > 0.59 && m.c.targets[0].p < 0.61);
    /* the pods seen leave them as they are */
    for (int i = 0; i < 100; i++) {
        char uid[16];
        snprintf(uid, sizeof(uid), "s%d", i);
        struct ex_pod w = share_pod(uid, 10);
        ex_observe(&m, &w);
    }
    assert_int_equal(m.c.n_targets, 2);
    assert_int_equal(m.c.targets[0].milli, 500);
    /* a rebuild (the nodes changed) keeps them, the masks against the new table */
    struct ex_node_spec ns2[] = { node("v2", 1, NULL, 32768), node("a", 2, NULL, 81920) };
    snprintf(ns2[0].model, sizeof(ns2[0].model), "V100");
    assert_int_equal(ex_model_rebuild(&m, ns2, 2, err, sizeof(err)), 0);
    assert_int_equal(m.c.n_targets, 2);
    assert_int_equal(m.c.targets[1].models, 1u << pl_model_index(&m.c, "V100"));
    assert_int_equal(pl_model_index(&m.c, "V100"), 0);
    ex_model_free(&m);
    /* a spec naming more models than the table holds */
    assert_int_equal(ex_model_init(&m, PL_FGD, ns, 2, err, sizeof(err)), 0);
    char many[40 * 4 + 1] = "";
    for (int i = 0; i < 40; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "%sM%d", i ? "|" : "", i);
    specs[0] = many;
    assert_int_equal(ex_model_set_workload(&m, wl, specs, 10, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "workload pod 0: gpu_spec"));
    assert_int_equal(m.n_wl, 0);
    ex_model_free(&m);
}

static void test_rebuild(void **state) {
    (void)state;
    struct ex_node_spec ns[] = { node("a", 2, NULL, 81920), node("b", 1, NULL, 81920) };
    struct ex_model m;
    char err[256];
    assert_int_equal(ex_model_init(&m, PL_GPUSLICE, ns, 2, err, sizeof(err)), 0);
    struct ex_pod p = share_pod("p", 40), q = share_pod("q", 70);
    ex_observe(&m, &p);
    struct pl_choice c1 = { .n_gpus = 1, .gpus = { 1 } }, c2 = { .n_gpus = 1, .gpus = { 0 } };
    assert_int_equal(ex_commit(&m, &p, "a", &c1), 0);
    assert_int_equal(ex_commit(&m, &q, "b", &c2), 0);
    struct ex_node_spec now[] = { node("c", 1, NULL, 81920), node("a", 2, NULL, 81920) };
    assert_int_equal(ex_model_rebuild(&m, now, 2, err, sizeof(err)), 0);
    assert_int_equal(ex_model_find(&m, "b"), -1);
    assert_int_equal(ex_model_find(&m, "a"), 1);
    assert_int_equal(m.n_bound, 1);
    assert_non_null(ex_find_bound(&m, "p"));
    assert_null(ex_find_bound(&m, "q"));
    assert_int_equal(m.c.nodes[1].gpu_free[1], 600);
    assert_int_equal(m.c.nodes[1].gpu_free[0], 1000);
    size_t kinds;
    double pods;
    pl_estimate_size(&m.c, &kinds, &pods);
    assert_int_equal((int)pods, 1); /* the policy's observations are kept */
    /* a bad node set leaves the model as it was */
    struct ex_node_spec dup[] = { node("a", 1, NULL, 0), node("a", 1, NULL, 0) };
    assert_int_equal(ex_model_rebuild(&m, dup, 2, err, sizeof(err)), -EINVAL);
    assert_int_equal(m.c.nodes[1].gpu_free[1], 600);
    assert_int_equal(ex_release(&m, "p"), 0);
    assert_int_equal(m.c.nodes[1].gpu_free[1], 1000);
    ex_model_free(&m);
}

/* The API server's objects: a Node's GPUs from the agent's labels, the annotation, the Binding. */
static void test_api_objects(void **state) {
    (void)state;
    json_error_t je;
    json_t *n = json_loads("{\"metadata\": {\"name\": \"gpu-1\", \"labels\": {\"gpuslice.io/gpu.count\": \"2\","
                           " \"gpuslice.io/gpu.product\": \"NVIDIA-H100-80GB-HBM3\", \"gpuslice.io/gpu.memory\": "
                           "\"81559\", \"gpuslice.io/gpu.replicas\": \"1\"}}, \"status\": {\"allocatable\": "
                           "{\"cpu\": \"7500m\", \"memory\": \"16Gi\"}}}",
                           0, &je);
    assert_non_null(n);
    struct ex_node_spec s;
    char err[256];
    assert_int_equal(ex_node_from_json(n, &s, err, sizeof(err)), 1);
    assert_string_equal(s.name, "gpu-1");
    assert_int_equal(s.n_gpu, 2);
    assert_int_equal(s.gpu_mem_mib, 81559);
    assert_int_equal(s.replicas, 1);
    assert_int_equal(s.cpu, 7500);
    assert_int_equal(s.mem, 16384);
    assert_int_equal(s.gpu_free[1], 1000);
    assert_string_equal(s.model, "NVIDIA-H100-80GB-HBM3");
    json_object_set_new(json_object_get(json_object_get(n, "metadata"), "labels"), "gpuslice.io/gpu.count",
                        json_string("two"));
    assert_int_equal(ex_node_from_json(n, &s, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "node gpu-1: label gpuslice.io/gpu.count=two: expected an integer in 0..16"));
    json_object_del(json_object_get(json_object_get(n, "metadata"), "labels"), "gpuslice.io/gpu.count");
    assert_int_equal(ex_node_from_json(n, &s, err, sizeof(err)), 0); /* no GPU node */
    json_decref(n);
    /* a fractional node: its gpu-memory labels, whose replicas (GiB units) are no time-slicing */
    n = json_loads("{\"metadata\": {\"name\": \"f\", \"labels\": {\"gpuslice.io/gpu-memory.count\": \"2\","
                   " \"gpuslice.io/gpu-memory.memory\": \"81559\", \"gpuslice.io/gpu-memory.replicas\": \"80\","
                   " \"gpuslice.io/gpu-memory.product\": \"NVIDIA-H100-80GB-HBM3\"}}}",
                   0, &je);
    assert_int_equal(ex_node_from_json(n, &s, err, sizeof(err)), 1);
    assert_int_equal(s.n_gpu, 2);
    assert_int_equal(s.gpu_mem_mib, 81559);
    assert_int_equal(s.replicas, 0);
    assert_string_equal(s.model, "NVIDIA-H100-80GB-HBM3");
    json_decref(n);

    struct pl_choice ch;
    assert_int_equal(ex_gpu_index_parse("1", &ch), 0);
    assert_int_equal(ch.n_gpus, 1);
    assert_int_equal(ch.gpus[0], 1);
    assert_int_equal(ex_gpu_index_parse("0,3", &ch), 0);
    assert_int_equal(ch.n_gpus, 2);
    assert_int_equal(ch.gpus[1], 3);
    assert_int_equal(ex_gpu_index_parse("", &ch), -EINVAL);
    assert_int_equal(ex_gpu_index_parse("1,", &ch), -EINVAL);
    assert_int_equal(ex_gpu_index_parse("-1", &ch), -EINVAL);
    assert_int_equal(ex_gpu_index_parse("16", &ch), -EINVAL);

    struct ex_bind_args b = { .name = "p", .ns = "ns", .uid = "u-1", .node = "gpu-1" };
    struct pl_choice two = { .n_gpus = 2, .gpus = { 0, 2 } };
    json_t *bj = ex_binding_json(&b, &two);
    char *t = json_dumps(bj, JSON_SORT_KEYS | JSON_COMPACT);
    assert_string_equal(t, "{\"apiVersion\":\"v1\",\"kind\":\"Binding\",\"metadata\":{\"annotations\":"
                           "{\"gpuslice.io/gpu-index\":\"0,2\"},\"name\":\"p\",\"namespace\":\"ns\",\"uid\":\"u-1\"},"
                           "\"target\":{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"name\":\"gpu-1\"}}");
    free(t);
    json_decref(bj);
    struct pl_choice none = { 0 };
    bj = ex_binding_json(&b, &none);
    assert_null(json_object_get(json_object_get(bj, "metadata"), "annotations"));
    json_decref(bj);
}

/* Whether the API server's pod may be bound by a bind naming uid u-1: its uid, unbound, Pending,
 * not being deleted (ex_pod_bindable); each refusal with its reason. */
static void test_pod_bindable(void **state) {
    (void)state;
    struct ex_bind_args b = { .name = "p", .ns = "ns", .uid = "u-1", .node = "gpu-1" };
    static const struct {
        const char *pod;
        int want;
        const char *why;
    } cases[] = {
        { "{\"metadata\":{\"uid\":\"u-1\"},\"spec\":{},\"status\":{\"phase\":\"Pending\"}}", 0, "" },
        { "{\"metadata\":{\"uid\":\"u-1\"},\"spec\":{\"nodeName\":\"\"},\"status\":{\"phase\":\"Pending\"}}", 0, "" },
        { "{\"metadata\":{\"uid\":\"u-2\"},\"spec\":{},\"status\":{\"phase\":\"Pending\"}}", -ESTALE,
          "pod ns/p: uid u-1 is not the API server's (u-2): not bound" },
        { "{\"metadata\":{\"uid\":\"u-1\"},\"spec\":{\"nodeName\":\"gpu-2\"},\"status\":{\"phase\":\"Pending\"}}",
          -EEXIST, "pod ns/p (uid u-1): already bound to node gpu-2: not bound again" },
        { "{\"metadata\":{\"uid\":\"u-1\"},\"spec\":{},\"status\":{\"phase\":\"Running\"}}", -EPERM,
          "pod ns/p (uid u-1): status.phase Running, not Pending: not bound" },
        { "{\"metadata\":{\"uid\":\"u-1\"},\"spec\":{}}", -EPERM,
          "pod ns/p (uid u-1): status.phase (none), not Pending: not bound" },
        { "{\"metadata\":{\"uid\":\"u-1\",\"deletionTimestamp\":\"2026-01-01T00:00:00Z\"},\"status\":{\"phase\":"
          "\"Pending\"}}",
          -EPERM, "pod ns/p (uid u-1): being deleted: not bound" },
        { "{\"metadata\":{},\"status\":{\"phase\":\"Pending\"}}", -EBADMSG,
          "pod ns/p: the API server's answer has no metadata.uid" },
        { "[]", -EBADMSG, "pod ns/p: the API server's answer has no metadata.uid" },
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        json_t *pod = json_loads(cases[k].pod, 0, NULL);
        assert_non_null(pod);
        char err[256] = "";
        assert_int_equal(ex_pod_bindable(pod, &b, err, sizeof(err)), cases[k].want);
        assert_string_equal(err, cases[k].why);
        json_decref(pod);
    }
}

/* ---- ResourceClaims (DRA) in the model (claims.h) ---- */

#define GIB (1LL << 30)

/* a ResourceSlice of the driver for node with n GPU devices from first_index: whole
 * ("exclusive"), or shared ("time-slicing") with memory_gib each and the requestPolicy the
 * driver publishes (1 GiB steps, the default a quarter) */
static json_t *dra_slice(const char *node, const char *name, int first_index, int n, const char *sharing,
                         int memory_gib) {
    json_t *devs = json_array();
    for (int k = 0; k < n; k++) {
        char dn[32], mem[32], def[32];
        snprintf(dn, sizeof(dn), "gpu-%d", first_index + k);
        snprintf(mem, sizeof(mem), "%dGi", memory_gib);
        snprintf(def, sizeof(def), "%dGi", memory_gib / 4);
        json_t *d = json_pack("{s:s, s:{s:{s:s}, s:{s:s}, s:{s:i}}}", "name", dn, "attributes", "type", "string",
                              "gpu", "sharing", "string", sharing, "index", "int", first_index + k);
        if (strcmp(sharing, "exclusive") == 0) {
            json_object_set_new(d, "capacity", json_pack("{s:{s:s}}", "memory", "value", mem));
        } else {
            json_object_set_new(d, "allowMultipleAllocations", json_true());
            json_object_set_new(d, "capacity",
                                json_pack("{s:{s:s, s:{s:s, s:{s:s, s:s, s:s}}}, s:{s:s, s:{s:s, s:{s:s, s:s, s:s}}}}",
                                          "memory", "value", mem, "requestPolicy", "default", def, "validRange",
                                          "min", "1Gi", "max", mem, "step", "1Gi", "compute", "value", "100",
                                          "requestPolicy", "default", "25", "validRange", "min", "1", "max", "100",
                                          "step", "1"));
        }
        json_array_append_new(devs, d);
    }
    return json_pack("{s:s, s:s, s:{s:s}, s:{s:s, s:s, s:{s:s, s:i, s:i}, s:o}}", "apiVersion", "resource.k8s.io/v1",
                     "kind", "ResourceSlice", "metadata", "name", name, "spec", "driver", "gpu.gpuslice.io",
                     "nodeName", node, "pool", "name", node, "generation", 1, "resourceSliceCount", 1, "devices", devs);
}

static void add_slice(struct ex_dra *d, json_t *j) {
    struct ex_dra_slice s;
    char err[512];
    assert_int_equal(ex_dra_slice_from_json(j, d->driver, &s, err, sizeof(err)), 1);
    assert_int_equal(ex_dra_set_slice(d, &s), 0);
    json_decref(j);
}

/* a ResourceClaim asking mem_gib (0: none) of class cls, allocated on node's device (NULL: not
 * allocated) with that much consumed */
static void add_claim(struct ex_dra *d, const char *name, const char *cls, int mem_gib, const char *node,
                      const char *device) {
    char mem[32];
    snprintf(mem, sizeof(mem), "%dGi", mem_gib);
    json_t *req = json_pack("{s:s, s:{s:s}}", "name", "gpu", "exactly", "deviceClassName", cls);
    if (mem_gib)
        json_object_set_new(json_object_get(req, "exactly"), "capacity",
                            json_pack("{s:{s:s}}", "requests", "memory", mem));
    json_t *c = json_pack("{s:{s:s, s:s, s:s}, s:{s:{s:[o]}}}", "metadata", "name", name, "namespace", "default",
                          "uid", name, "spec", "devices", "requests", req);
    if (device)
        json_object_set_new(c, "status",
                            json_pack("{s:{s:{s:[{s:s, s:s, s:s, s:s, s:{s:s}}]}}}", "allocation", "devices",
                                      "results", "request", "gpu", "driver", "gpu.gpuslice.io", "pool", node,
                                      "device", device, "consumedCapacity", "memory", mem));
    struct ex_dra_claim cl;
    char err[512];
    assert_int_equal(ex_dra_claim_from_json(c, d->driver, false, &cl, err, sizeof(err)), 0);
    assert_int_equal(ex_dra_set_claim(d, false, &cl), 0);
    json_decref(c);
}

static struct ex_pod claim_pod(const char *uid, const char *claim) {
    struct ex_pod p = { .cpu = 1000, .mem = 1024 };
    snprintf(p.uid, sizeof(p.uid), "%s", uid);
    snprintf(p.ns, sizeof(p.ns), "default");
    snprintf(p.name, sizeof(p.name), "%s", uid);
    p.claims.n = 1;
    snprintf(p.claims.r[0].entry, sizeof(p.claims.r[0].entry), "gpu");
    snprintf(p.claims.r[0].claim, sizeof(p.claims.r[0].claim), "%s", claim);
    return p;
}

/* pod.spec.resourceClaims and the names of the claims made from templates */
static void test_dra_pod_claims(void **state) {
    (void)state;
    const char *js = "{\"metadata\": {\"name\": \"p\", \"namespace\": \"default\"}, \"spec\": {\"containers\": [],"
                     " \"resourceClaims\": [{\"name\": \"a\", \"resourceClaimName\": \"c1\"},"
                     " {\"name\": \"b\", \"resourceClaimTemplateName\": \"t1\"},"
                     " {\"name\": \"c\", \"resourceClaimTemplateName\": \"t2\"}]},"
                     " \"status\": {\"resourceClaimStatuses\": [{\"name\": \"b\", \"resourceClaimName\": \"p-b-x7\"}]}}";
    json_t *j = json_loads(js, 0, NULL);
    assert_non_null(j);
    struct ex_pod p;
    char err[256] = "";
    assert_int_equal(ex_pod_from_json(j, &p, err, sizeof(err)), 0);
    assert_int_equal(p.claims.n, 3);
    assert_string_equal(p.claims.r[0].claim, "c1");
    assert_string_equal(p.claims.r[1].tmpl, "t1");
    assert_string_equal(p.claims.r[1].claim, "p-b-x7");
    assert_string_equal(p.claims.r[2].claim, ""); /* not made yet: its template is judged */
    json_decref(j);
    static const char *const bad[] = {
        "{\"spec\": {\"resourceClaims\": {}}}",
        "{\"spec\": {\"resourceClaims\": [7]}}",
        "{\"spec\": {\"resourceClaims\": [{\"resourceClaimName\": \"c\"}]}}",
        "{\"spec\": {\"resourceClaims\": [{\"name\": \"a\", \"resourceClaimName\": \"c\", "
        "\"resourceClaimTemplateName\": \"t\"}]}}",
        "{\"spec\": {\"resourceClaims\": [{\"name\": \"a\"}]}}",
        "{\"spec\": {\"resourceClaims\": [{\"name\": \"a\", \"resourceClaimTemplateName\": \"t\"}]}, "
        "\"status\": {\"resourceClaimStatuses\": 3}}",
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        j = json_loads(bad[k], 0, NULL);
        assert_non_null(j);
        err[0] = '\0';
        assert_int_equal(ex_pod_from_json(j, &p, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "Pod."));
        json_decref(j);
    }
}

/* The labels count the device plugin's GPUs; the slices say GPU 0 is DRA's: the node has two
 * GPUs, GPU 0 never offered to a pod asking for nvidia.com/gpu (filter, bind, a node of DRA
 * GPUs only). */
static void test_dra_gpu_never_offered(void **state) {
    (void)state;
    struct ex_dra d;
    ex_dra_init(&d, NULL);
    add_slice(&d, dra_slice("mixed", "mixed-gpu", 0, 1, "exclusive", 80));
    add_slice(&d, dra_slice("dra-only", "dra-only-gpu", 0, 2, "time-slicing", 80));
    struct ex_node_spec ns[3] = { node("mixed", 1, NULL, 81920), node("dra-only", 0, NULL, 0),
                                  node("plain", 1, NULL, 81920) };
    assert_int_equal(ex_dra_gpus(&d, "mixed"), 1u);
    assert_int_equal(ex_dra_gpus(&d, "dra-only"), 3u);
    for (int k = 0; k < 3; k++)
        assert_true(ex_dra_apply_node(&d, &ns[k]));
    assert_int_equal(ns[0].n_gpu, 2);
    assert_int_equal(ns[0].gpu_free[0], 0);
    assert_int_equal(ns[0].gpu_free[1], 1000);
    assert_int_equal(ns[1].n_gpu, 2);
    assert_int_equal(ns[1].gpu_mem_mib, 81920);
    assert_int_equal(ns[2].n_gpu, 1);
    struct ex_model m;
    char err[256], why[EX_REASON_MAX];
    assert_int_equal(ex_model_init(&m, PL_GPUSLICE, ns, 3, err, sizeof(err)), 0);
    m.dra = &d;
    struct ex_pod one = { .uid = "g1", .cpu = 100, .gpus = 1 }, two = { .uid = "g2", .cpu = 100, .gpus = 2 };
    assert_int_equal(ex_filter(&m, &one, "mixed", why, sizeof(why)), EX_FIT);
    struct pl_choice ch;
    assert_int_equal(ex_bind(&m, &one, "mixed", &ch, why, sizeof(why)), 0);
    assert_int_equal(ch.n_gpus, 1);
    assert_int_equal(ch.gpus[0], 1); /* the device plugin's GPU, not DRA's GPU 0 */
    struct ex_pod next = { .uid = "g3", .cpu = 100, .gpus = 1 };
    assert_int_equal(ex_filter(&m, &next, "mixed", why, sizeof(why)), EX_FAIL);
    assert_int_equal(ex_filter(&m, &two, "mixed", why, sizeof(why)), EX_UNRESOLVABLE);
    assert_non_null(strstr(why, "the device plugin serves 1 of the node's 2: GPU 0 the DRA driver's"));
    assert_int_equal(ex_filter(&m, &next, "dra-only", why, sizeof(why)), EX_UNRESOLVABLE);
    assert_non_null(strstr(why, "GPU 0,1 the DRA driver's"));
    struct ex_pod share = share_pod("s1", 10);
    assert_int_equal(ex_filter(&m, &share, "dra-only", why, sizeof(why)), EX_UNRESOLVABLE);
    assert_int_equal(ex_bind(&m, &share, "dra-only", &ch, why, sizeof(why)), -ENOSPC);
    /* a pod without an annotation counted by best fit: never on GPU 0 */
    assert_int_equal(ex_release(&m, "g1"), 0);
    assert_int_equal(ex_commit_best_fit(&m, &next, "mixed", &ch), 0);
    assert_int_equal(ch.gpus[0], 1);
    /* a pod of no GPU (a claim's, or CPU only: every pod reaches an extender without
     * managedResources) is bound on a node the model does not know, nothing recorded */
    struct ex_pod cpu = claim_pod("c1", "no-such-claim");
    assert_int_equal(ex_bind(&m, &cpu, "cpu-only", &ch, why, sizeof(why)), 0);
    assert_int_equal(ch.n_gpus, 0);
    assert_null(ex_find_bound(&m, "c1"));
    struct ex_pod gpu_pod = { .uid = "g9", .gpus = 1 };
    assert_int_equal(ex_bind(&m, &gpu_pod, "cpu-only", &ch, why, sizeof(why)), -ENOENT);
    /* a rebuild keeps the DRA side */
    assert_int_equal(ex_model_rebuild(&m, ns, 3, err, sizeof(err)), 0);
    assert_ptr_equal(m.dra, &d);
    ex_model_free(&m);
    ex_dra_free(&d);
}

/* Two pods with 20 GiB and 40 GiB claims on each of two 80 GiB shared DRA GPUs: 20 GiB free on
 * each, 40 on the node. A 30 GiB claim is refused there with the per-GPU reason (the node's sum
 * would hold it), fits a node with 50 GiB free on one GPU, is unresolvable where no GPU is that
 * large or the node has no such device; an allocated claim is not judged again. */
static void test_dra_shared_claim_per_gpu(void **state) {
    (void)state;
    struct ex_dra d;
    ex_dra_init(&d, NULL);
    add_slice(&d, dra_slice("two", "two-gpus", 0, 2, "time-slicing", 80));
    add_slice(&d, dra_slice("roomy", "roomy-gpu", 0, 1, "time-slicing", 80));
    add_slice(&d, dra_slice("small", "small-gpu", 0, 1, "time-slicing", 24));
    add_slice(&d, dra_slice("whole", "whole-gpu", 0, 1, "exclusive", 80));
    const char *shared = "shared.gpu.gpuslice.io";
    add_claim(&d, "a20", shared, 20, "two", "gpu-0");
    add_claim(&d, "a40", shared, 40, "two", "gpu-0");
    add_claim(&d, "b20", shared, 20, "two", "gpu-1");
    add_claim(&d, "b40", shared, 40, "two", "gpu-1");
    add_claim(&d, "r30", shared, 30, "roomy", "gpu-0");
    add_claim(&d, "want30", shared, 30, NULL, NULL);
    struct ex_pod p = claim_pod("p30", "want30");
    assert_true(ex_dra_pod_judged(&d, &p));
    char why[EX_REASON_MAX];
    assert_int_equal(ex_dra_filter(&d, &p, "two", why, sizeof(why)), EX_FAIL);
    assert_non_null(strstr(why, "claim want30 (request gpu): no single time-sliced DRA GPU has 30 GiB free"));
    assert_non_null(strstr(why, "(free per GPU: 20 GiB, 20 GiB; 40 GiB in all)"));
    assert_int_equal(ex_dra_filter(&d, &p, "roomy", why, sizeof(why)), EX_FIT);
    assert_int_equal(ex_dra_filter(&d, &p, "small", why, sizeof(why)), EX_UNRESOLVABLE);
    assert_int_equal(ex_dra_filter(&d, &p, "whole", why, sizeof(why)), EX_UNRESOLVABLE);
    assert_non_null(strstr(why, "no time-sliced DRA GPU"));
    assert_int_equal(ex_dra_filter(&d, &p, "nowhere", why, sizeof(why)), EX_UNRESOLVABLE);
    /* through the model's filter too (the node's extended-resource side is not asked) */
    struct ex_node_spec ns[] = { node("two", 0, NULL, 0), node("roomy", 0, NULL, 0) };
    for (int k = 0; k < 2; k++)
        assert_true(ex_dra_apply_node(&d, &ns[k]));
    struct ex_model m;
    char err[256];
    assert_int_equal(ex_model_init(&m, PL_FGD, ns, 2, err, sizeof(err)), 0);
    m.dra = &d;
    assert_int_equal(ex_filter(&m, &p, "two", why, sizeof(why)), EX_FAIL);
    assert_int_equal(ex_filter(&m, &p, "roomy", why, sizeof(why)), EX_FIT);
    /* one 40 GiB claim gone: GPU 1 has 60 free */
    ex_dra_del_claim(&d, false, "default", "b40");
    assert_int_equal(ex_filter(&m, &p, "two", why, sizeof(why)), EX_FIT);
    /* allocated itself: placed, not judged again; a claim not known yet: not judged */
    add_claim(&d, "want30", shared, 30, "roomy", "gpu-0");
    assert_false(ex_dra_pod_judged(&d, &p));
    struct ex_pod ghost = claim_pod("pg", "no-such-claim");
    assert_int_equal(ex_dra_filter(&d, &ghost, "small", why, sizeof(why)), EX_FIT);
    /* a whole-GPU claim: the free whole device, then none */
    add_claim(&d, "w1", "gpu.gpuslice.io", 0, NULL, NULL);
    struct ex_pod w = claim_pod("pw", "w1");
    assert_int_equal(ex_dra_filter(&d, &w, "whole", why, sizeof(why)), EX_FIT);
    add_claim(&d, "w0", "gpu.gpuslice.io", 0, "whole", "gpu-0");
    assert_int_equal(ex_dra_filter(&d, &w, "whole", why, sizeof(why)), EX_FAIL);
    assert_non_null(strstr(why, "1 whole DRA GPU(s) asked, 0 free"));
    ex_model_free(&m);
    ex_dra_free(&d);
}

/* A claim judged from its template (the claim not made yet), and prioritize among the nodes
 * whose DRA GPUs hold it: the policy's score of each node seen through its DRA devices (best
 * fit: the fuller GPU first), 0 for the node that does not fit. */
static void test_dra_template_and_scores(void **state) {
    (void)state;
    struct ex_dra d;
    ex_dra_init(&d, NULL);
    add_slice(&d, dra_slice("full", "full-gpus", 0, 2, "time-slicing", 80));
    add_slice(&d, dra_slice("half", "half-gpu", 0, 1, "time-slicing", 80));
    add_slice(&d, dra_slice("empty", "empty-gpu", 0, 1, "time-slicing", 80));
    const char *shared = "shared.gpu.gpuslice.io";
    add_claim(&d, "f0", shared, 60, "full", "gpu-0");
    add_claim(&d, "f1", shared, 60, "full", "gpu-1");
    add_claim(&d, "h0", shared, 40, "half", "gpu-0");
    json_t *t = json_pack("{s:{s:s, s:s}, s:{s:{s:{s:[{s:s, s:{s:s, s:{s:{s:s}}}}]}}}}", "metadata", "name", "t30",
                          "namespace", "default", "spec", "spec", "devices", "requests", "name", "gpu", "exactly",
                          "deviceClassName", shared, "capacity", "requests", "memory", "30Gi");
    struct ex_dra_claim tc;
    char err[512], why[EX_REASON_MAX];
    assert_int_equal(ex_dra_claim_from_json(t, d.driver, true, &tc, err, sizeof(err)), 0);
    json_decref(t);
    assert_int_equal(ex_dra_set_claim(&d, true, &tc), 0);
    struct ex_pod p = claim_pod("pt", "");
    snprintf(p.claims.r[0].tmpl, sizeof(p.claims.r[0].tmpl), "t30");
    assert_int_equal(ex_dra_filter(&d, &p, "full", why, sizeof(why)), EX_FAIL);
    assert_int_equal(ex_dra_filter(&d, &p, "half", why, sizeof(why)), EX_FIT);
    struct ex_node_spec ns[] = { node("full", 0, NULL, 0), node("half", 0, NULL, 0), node("empty", 0, NULL, 0) };
    for (int k = 0; k < 3; k++)
        assert_true(ex_dra_apply_node(&d, &ns[k]));
    struct ex_model m;
    assert_int_equal(ex_model_init(&m, PL_BESTFIT, ns, 3, err, sizeof(err)), 0);
    m.dra = &d;
    const char *names[] = { "full", "half", "empty" };
    int64_t sc[3];
    ex_prioritize(&m, &p, names, 3, sc);
    assert_int_equal(sc[0], 0);
    assert_int_equal(sc[1], EX_MAX_PRIORITY); /* 40 GiB free: the best fit */
    assert_in_range(sc[2], 1, EX_MAX_PRIORITY - 1);
    /* the view prioritize scored: one GPU per device, its free share; the request's milli-GPU */
    struct pl_node view;
    struct pl_pod q;
    assert_int_equal(ex_dra_view(&d, &p, "half", &m.c.nodes[1], &view, &q), 1);
    assert_int_equal(view.n_gpu, 1);
    assert_int_equal(view.gpu_free[0], 500);
    assert_int_equal(q.num_gpu, 1);
    assert_int_equal(q.gpu_milli, 375);
    assert_int_equal(ex_dra_view(&d, &p, "full", &m.c.nodes[0], &view, &q), -ENOSPC);
    /* the model's node is as it was */
    assert_int_equal(m.c.nodes[1].gpu_free[0], 0);
    /* the claim made from the template (named in the pod's status) wins over the template */
    add_claim(&d, "pt-gpu-1", shared, 10, NULL, NULL);
    snprintf(p.claims.r[0].claim, sizeof(p.claims.r[0].claim), "pt-gpu-1");
    assert_int_equal(ex_dra_filter(&d, &p, "full", why, sizeof(why)), EX_FIT);
    ex_model_free(&m);
    ex_dra_free(&d);
}

/* Malformed slices and claims: an error naming the field, never a crash. */
static void test_dra_parse_errors(void **state) {
    (void)state;
    static const char *const slices[] = {
        "{\"spec\": {\"driver\": \"gpu.gpuslice.io\"}}",
        "{\"metadata\": {\"name\": \"s\"}, \"spec\": {\"driver\": \"gpu.gpuslice.io\", \"nodeName\": 3}}",
        "{\"metadata\": {\"name\": \"s\"}, \"spec\": {\"driver\": \"gpu.gpuslice.io\", \"nodeName\": \"n\", "
        "\"devices\": {}}}",
        "{\"metadata\": {\"name\": \"s\"}, \"spec\": {\"driver\": \"gpu.gpuslice.io\", \"nodeName\": \"n\", "
        "\"devices\": [{\"name\": \"d\", \"capacity\": {\"memory\": {\"value\": \"lots\"}}}]}}",
        "{\"metadata\": {\"name\": \"s\"}, \"spec\": {\"driver\": \"gpu.gpuslice.io\", \"nodeName\": \"n\", "
        "\"devices\": [{}]}}",
    };
    char err[512];
    for (size_t k = 0; k < sizeof(slices) / sizeof(slices[0]); k++) {
        json_t *j = json_loads(slices[k], 0, NULL);
        struct ex_dra_slice s;
        err[0] = '\0';
        assert_int_equal(ex_dra_slice_from_json(j, "gpu.gpuslice.io", &s, err, sizeof(err)), -EINVAL);
        assert_true(err[0]);
        assert_null(s.dev);
        json_decref(j);
    }
    json_t *other = json_loads("{\"metadata\": {\"name\": \"s\"}, \"spec\": {\"driver\": \"x.io\"}}", 0, NULL);
    struct ex_dra_slice s;
    assert_int_equal(ex_dra_slice_from_json(other, "gpu.gpuslice.io", &s, err, sizeof(err)), 0);
    json_decref(other);
    static const char *const claims[] = {
        "{\"metadata\": {\"namespace\": \"d\"}}",
        "{\"metadata\": {\"name\": \"c\", \"namespace\": \"d\"}, \"spec\": {\"devices\": {\"requests\": 1}}}",
        "{\"metadata\": {\"name\": \"c\", \"namespace\": \"d\"}, \"spec\": {\"devices\": {\"requests\": "
        "[{\"name\": \"g\", \"exactly\": {}}]}}}",
        "{\"metadata\": {\"name\": \"c\", \"namespace\": \"d\"}, \"spec\": {\"devices\": {\"requests\": "
        "[{\"name\": \"g\", \"exactly\": {\"deviceClassName\": \"gpu.gpuslice.io\", \"count\": 0}}]}}}",
        "{\"metadata\": {\"name\": \"c\", \"namespace\": \"d\"}, \"spec\": {\"devices\": {\"requests\": "
        "[{\"name\": \"g\", \"exactly\": {\"deviceClassName\": \"shared.gpu.gpuslice.io\", \"capacity\": "
        "{\"requests\": {\"memory\": \"-1Gi\"}}}}]}}}",
        "{\"metadata\": {\"name\": \"c\", \"namespace\": \"d\"}, \"status\": {\"allocation\": {\"devices\": "
        "{\"results\": [{\"driver\": \"gpu.gpuslice.io\", \"pool\": \"n\"}]}}}}",
    };
    for (size_t k = 0; k < sizeof(claims) / sizeof(claims[0]); k++) {
        json_t *j = json_loads(claims[k], 0, NULL);
        assert_non_null(j);
        struct ex_dra_claim c;
        err[0] = '\0';
        assert_int_equal(ex_dra_claim_from_json(j, "gpu.gpuslice.io", false, &c, err, sizeof(err)), -EINVAL);
        assert_true(err[0]);
        json_decref(j);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filter_per_gpu_fit),
        cmocka_unit_test(test_pod_bindable),
        cmocka_unit_test(test_memory_share),
        cmocka_unit_test(test_gpu_product_affinity),
        cmocka_unit_test(test_dra_pod_claims),
        cmocka_unit_test(test_dra_gpu_never_offered),
        cmocka_unit_test(test_dra_shared_claim_per_gpu),
        cmocka_unit_test(test_dra_template_and_scores),
        cmocka_unit_test(test_dra_parse_errors),
        cmocka_unit_test(test_prioritize_follows_engine),
        cmocka_unit_test(test_prioritize_only_best_is_top),
        cmocka_unit_test(test_prioritize_groups),
        cmocka_unit_test(test_bind_commits),
        cmocka_unit_test(test_quantity),
        cmocka_unit_test(test_args_mapping),
        cmocka_unit_test(test_render),
        cmocka_unit_test(test_snapshot),
        cmocka_unit_test(test_release_and_best_fit),
        cmocka_unit_test(test_rebuild),
        cmocka_unit_test(test_workload_targets),
        cmocka_unit_test(test_api_objects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
