/* test_extender_limits.c: the scheduler extender's bounds against hostile callers (src/extender):
 * quantities summed with overflow checks, the node names and the Pod of one request bounded, and
 * what the model remembers of the pods it was asked about bounded however many are made up. */
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

#include "extender/model.h"
#include "extender/wire.h"

/* a growing text */
struct text {
    char *s;
    size_t len;
};

static void add(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(struct text *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    assert_true(n >= 0);
    t->s = realloc(t->s, t->len + (size_t)n + 1);
    assert_non_null(t->s);
    va_start(ap, fmt);
    vsnprintf(t->s + t->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

/* the pod's mapping: 0, or the error with its text in err */
static int pod_of(const char *js, struct ex_pod *p, char *err, size_t errlen) {
    json_error_t je;
    json_t *j = json_loads(js, 0, &je);
    if (!j)
        fail_msg("%s: %s", js, je.text);
    err[0] = '\0';
    int r = ex_pod_from_json(j, p, err, errlen);
    json_decref(j);
    return r;
}

/* n containers each asking `each` of resource res (as requests) */
static char *containers_pod(int n, const char *res, const char *each) {
    struct text t = { 0 };
    add(&t, "{\"metadata\": {\"uid\": \"u-big\", \"name\": \"big\", \"namespace\": \"d\"}, \"spec\": {\"containers\": [");
    for (int k = 0; k < n; k++)
        add(&t, "%s{\"name\": \"c%d\", \"resources\": {\"requests\": {\"%s\": \"%s\"}}}", k ? "," : "", k, res, each);
    add(&t, "]}}");
    return t.s;
}

/* 1,100 containers of 9,090,909,090,909,091 GPUs each: 10^19 in all, past int64. Wrapped, the sum
 * was negative and the pod "fit" every node; it is refused naming the container and the field. */
static void test_gpu_sum_overflow(void **state) {
    (void)state;
    char err[512];
    struct ex_pod p;
    char *js = containers_pod(1100, "nvidia.com/gpu", "9090909090909091");
    assert_int_equal(pod_of(js, &p, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "Pod.spec.containers["));
    assert_non_null(strstr(err, ".resources.requests.nvidia.com/gpu"));
    assert_non_null(strstr(err, "overflows"));
    /* the same through ExtenderArgs: the request is refused, no node judged */
    struct text t = { 0 };
    add(&t, "{\"Pod\": %s, \"NodeNames\": [\"n1\"]}", js);
    struct ex_args a;
    assert_int_equal(ex_args_parse(t.s, t.len, EX_REQ_NODES_MAX, &a, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "overflows"));
    free(t.s);
    free(js);
    /* 1,000 of them fit int64 (9.09e18): out of range for the pod, not a wrapped count */
    js = containers_pod(1000, "nvidia.com/gpu", "9090909090909091");
    assert_int_equal(pod_of(js, &p, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "out of range"));
    free(js);
    /* CPU: two containers of 5e15 cores are 10^19 milli-CPU */
    js = containers_pod(2, "cpu", "5e15");
    assert_int_equal(pod_of(js, &p, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "Pod.spec.containers[1].resources.requests.cpu: '5e15': the pod's sum of cpu overflows"));
    free(js);
    /* memory in bytes: 3 x 4 EiB */
    js = containers_pod(3, "memory", "4Ei");
    assert_int_equal(pod_of(js, &p, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "memory"));
    free(js);
    /* compute and GPU memory sums over the containers are bounded too */
    js = containers_pod(1100, "gpuslice.io/gpu-compute", "9000000000000000");
    assert_int_equal(pod_of(js, &p, err, sizeof(err)), -EINVAL);
    free(js);
    js = containers_pod(1100, "gpuslice.io/gpu-memory", "1000000");
    assert_int_equal(pod_of(js, &p, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "out of range"));
    free(js);
}

/* A single quantity past int64 (10^19 GPUs, a JSON integer whose milli value overflows), the
 * overhead added with a check, an init container as large as the sum. */
static void test_quantity_ranges(void **state) {
    (void)state;
    char err[512];
    struct ex_pod p;
    assert_int_equal(pod_of("{\"spec\": {\"containers\": [{\"resources\": {\"limits\": {\"nvidia.com/gpu\": \"1e19\"}}}]}}",
                            &p, err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "Pod.spec.containers[0].resources.limits.nvidia.com/gpu: '1e19': out of range"));
    assert_int_equal(pod_of("{\"spec\": {\"containers\": [{\"resources\": {\"limits\": {\"cpu\": 9223372036854775807}}}]}}",
                            &p, err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "'9223372036854775807': out of range"));
    /* the overhead is added to the pod's requests; its sum is checked like the containers' */
    assert_int_equal(pod_of("{\"spec\": {\"containers\": [{\"resources\": {\"requests\": {\"cpu\": \"1\"}}}],"
                            " \"overhead\": {\"cpu\": \"250m\", \"memory\": \"1Mi\"}}}",
                            &p, err, sizeof(err)),
                     0);
    assert_int_equal(p.cpu, 1250);
    assert_int_equal(p.mem, 1);
    assert_int_equal(pod_of("{\"spec\": {\"containers\": [{\"resources\": {\"requests\": {\"cpu\": \"9e15\"}}}],"
                            " \"overhead\": {\"cpu\": \"9e15\"}}}",
                            &p, err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "Pod.spec.overhead.cpu: '9e15': the pod's sum of cpu overflows"));
    assert_int_equal(pod_of("{\"spec\": {\"containers\": [{\"resources\": {\"requests\": {\"cpu\": \"1\"}}}],"
                            " \"overhead\": {\"cpu\": \"x\"}}}",
                            &p, err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "Pod.spec.overhead.cpu: 'x': not a quantity"));
    /* init containers: the largest one, whole GPUs summed over nvidia.com/gpu and gpu.shared */
    assert_int_equal(pod_of("{\"spec\": {\"initContainers\": [{\"resources\": {\"limits\": {\"nvidia.com/gpu\": \"2\","
                            " \"nvidia.com/gpu.shared\": \"1\"}}}], \"containers\": [{\"resources\": {\"limits\":"
                            " {\"nvidia.com/gpu\": \"1\"}}}]}}",
                            &p, err, sizeof(err)),
                     0);
    assert_int_equal(p.gpus, 3);
    /* CPU in thousandths: exact up to int64, refused past it */
    assert_int_equal(pod_of("{\"spec\": {\"containers\": [{\"resources\": {\"requests\": {\"cpu\": "
                            "\"9223372036854775807\"}}}]}}",
                            &p, err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "out of range"));
    assert_int_equal(pod_of("{\"spec\": {\"containers\": [{\"resources\": {\"requests\": {\"cpu\": \"9e15\"}}}]}}",
                            &p, err, sizeof(err)),
                     0);
    assert_int_equal(p.cpu, 9000000000000000000LL);
    assert_int_equal(pod_of("{\"spec\": {\"containers\": [{\"resources\": {\"requests\": {\"cpu\": \"1e-3\"}}}]}}",
                            &p, err, sizeof(err)),
                     0);
    assert_int_equal(p.cpu, 1);
    assert_int_equal(pod_of("{\"spec\": {\"containers\": [{\"resources\": {\"requests\": {\"cpu\": \"1e31\"}}}]}}",
                            &p, err, sizeof(err)),
                     -EINVAL);
    assert_non_null(strstr(err, "out of range"));
}

/* body of ExtenderArgs with n one-letter node names (as the attacker's 8 MiB) */
static char *names_args(size_t n, size_t *len) {
    static const char head[] = "{\"Pod\": {\"metadata\": {\"uid\": \"u\"}, \"spec\": {}}, \"NodeNames\": [";
    char *s = malloc(sizeof(head) + 4 * n + 4);
    assert_non_null(s);
    size_t o = sizeof(head) - 1;
    memcpy(s, head, o);
    for (size_t k = 0; k < n; k++) {
        memcpy(s + o, k ? ",\"a\"" : "\"a\"", k ? 4 : 3);
        o += k ? 4 : 3;
    }
    memcpy(s + o, "]}", 3);
    *len = o + 2;
    return s;
}

/* A request naming more nodes than the model allows is refused while it is scanned (the names
 * array never grows past the bound); the bound follows the nodes known. */
static void test_names_bounded(void **state) {
    (void)state;
    char err[512];
    struct ex_args a;
    size_t len;
    char *body = names_args(2000000, &len); /* 8 MiB */
    assert_true(len > 8000000);
    assert_int_equal(ex_args_parse(body, len, 300, &a, err, sizeof(err)), -E2BIG);
    assert_non_null(strstr(err, "ExtenderArgs: NodeNames: more than 300 nodes"));
    assert_null(a.names); /* freed */
    free(body);
    body = names_args(300, &len);
    assert_int_equal(ex_args_parse(body, len, 300, &a, err, sizeof(err)), 0);
    assert_int_equal(a.n_names, 300);
    ex_args_free(&a);
    free(body);
    /* a name over 253 characters */
    char longname[400];
    snprintf(longname, sizeof(longname), "{\"Pod\": {}, \"NodeNames\": [\"%0254d\"]}", 0);
    assert_int_equal(ex_args_parse(longname, strlen(longname), 300, &a, err, sizeof(err)), -EBADMSG);
    assert_non_null(strstr(err, "NodeNames[0]: not a node name"));

    /* the model's bound: the nodes known plus a quarter and 256, at most EX_REQ_NODES_MAX */
    struct ex_node_spec ns[4] = { 0 };
    for (int i = 0; i < 4; i++)
        snprintf(ns[i].name, sizeof(ns[i].name), "n%d", i);
    struct ex_model m;
    assert_int_equal(ex_model_init(&m, PL_GPUSLICE, ns, 4, err, sizeof(err)), 0);
    assert_int_equal(ex_model_names_max(&m), 4 + 1 + 256);
    ex_model_note_nodes(&m, 4000); /* the source's Nodes without GPUs too */
    assert_int_equal(ex_model_nodes_known(&m), 4000);
    assert_int_equal(ex_model_names_max(&m), 4000 + 1000 + 256);
    ex_model_note_nodes(&m, 1000000);
    assert_int_equal(ex_model_names_max(&m), EX_REQ_NODES_MAX);
    ex_model_free(&m);
    assert_true(EX_ARGS_BODY_MAX < (size_t)8 << 20);
}

/* Nodes (nodeCacheCapable false): the names of whole v1.Nodes, scanned without a tree; the Pod
 * bounded in JSON values before jansson builds one. */
static void test_nodes_and_pod_bounded(void **state) {
    (void)state;
    char err[512];
    struct ex_args a;
    const char *nodes = "{\"Pod\": {\"spec\": {}}, \"Nodes\": {\"kind\": \"NodeList\", \"items\": ["
                        "{\"metadata\": {\"labels\": {\"name\": \"not-this\"}, \"name\": \"n1\"}, \"status\": "
                        "{\"images\": [{\"names\": [\"x\"]}]}}, {\"metadata\": {\"name\": \"n2\"}}]}}";
    assert_int_equal(ex_args_parse(nodes, strlen(nodes), 10, &a, err, sizeof(err)), 0);
    assert_int_equal(a.n_names, 2);
    assert_string_equal(a.names[0], "n1");
    assert_string_equal(a.names[1], "n2");
    ex_args_free(&a);
    assert_int_equal(ex_args_parse(nodes, strlen(nodes), 1, &a, err, sizeof(err)), -E2BIG);
    assert_non_null(strstr(err, "Nodes.items: more than 1 nodes"));
    static const char *const bad[] = {
        "{\"Pod\": {}, \"Nodes\": {\"items\": [{\"metadata\": {\"name\": \"a\", \"name\": \"b\"}}]}}",
        "{\"Pod\": {}, \"Nodes\": {\"items\": [{\"kind\": \"Node\"}]}}",
        "{\"Pod\": {}, \"Nodes\": {\"items\": {}}}",
        "{\"Pod\": {}, \"Nodes\": {}}",
        "{\"Pod\": {}, \"Nodes\": {\"items\": [{\"metadata\": {\"name\": 7}}]}}",
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        err[0] = '\0';
        assert_int_equal(ex_args_parse(bad[k], strlen(bad[k]), 10, &a, err, sizeof(err)), -EBADMSG);
        if (!strstr(err, "Nodes"))
            fail_msg("%s: '%s'", bad[k], err);
    }
    /* a Pod of 70,000 empty arrays: refused before jansson's tree of it */
    struct text t = { 0 };
    add(&t, "{\"NodeNames\": [], \"Pod\": {\"x\": [");
    for (int k = 0; k < 70000; k++)
        add(&t, k ? ",[]" : "[]");
    add(&t, "]}}");
    assert_int_equal(ex_args_parse(t.s, t.len, 10, &a, err, sizeof(err)), -E2BIG);
    assert_non_null(strstr(err, "ExtenderArgs: Pod: more than 65536 JSON values"));
    free(t.s);
}

static struct ex_pod made_up(int k) {
    struct ex_pod p = { .cpu = 1000 + k, .mem = 1024, .compute_pct = 1 + k % 90 };
    snprintf(p.uid, sizeof(p.uid), "made-up-%d", k);
    return p;
}

/* 60,000 filters of distinct made-up pods, never bound: the estimate holds at most
 * EX_PENDING_MAX of them (each a kind of its own, its refresh and decisions growing with them),
 * a pod bound meanwhile stays in it, and one retried after its observation was withdrawn is
 * observed again. */
static void test_made_up_pods_bounded(void **state) {
    (void)state;
    struct ex_node_spec ns[2] = { 0 };
    for (int i = 0; i < 2; i++) {
        snprintf(ns[i].name, sizeof(ns[i].name), "n%d", i);
        snprintf(ns[i].model, sizeof(ns[i].model), "A100");
        ns[i].cpu = 64000, ns[i].mem = 262144, ns[i].n_gpu = 2, ns[i].gpu_mem_mib = 81920;
        ns[i].gpu_free[0] = ns[i].gpu_free[1] = 1000;
    }
    char err[256], why[EX_REASON_MAX];
    struct ex_model m;
    assert_int_equal(ex_model_init(&m, PL_GPUSLICE, ns, 2, err, sizeof(err)), 0);
    struct ex_pod real = { .cpu = 500, .mem = 512, .compute_pct = 50 };
    snprintf(real.uid, sizeof(real.uid), "real");
    ex_observe(&m, &real);
    struct pl_choice ch;
    assert_int_equal(ex_bind(&m, &real, "n0", &ch, why, sizeof(why)), 0);
    size_t kinds;
    double pods;
    struct ex_pod retried = { .cpu = 777, .mem = 512, .compute_pct = 30 }; /* not bound, asked about again */
    snprintf(retried.uid, sizeof(retried.uid), "retried");
    /* 60,500: the retried pod was last asked about at 60,300 (found pending, its entry of 59,400),
     * which without the move would be withdrawn at 60,424 */
    for (int k = 0; k < 60500; k++) {
        struct ex_pod p = made_up(k);
        ex_observe(&m, &p);
        ex_observe(&m, &p); /* prioritize after filter: the same pod, once */
        if (k % 900 == 0)
            ex_observe(&m, &retried);
    }
    pl_estimate_size(&m.c, &kinds, &pods);
    assert_true(pods <= EX_PENDING_MAX + 1);
    assert_true(pods >= EX_PENDING_MAX); /* the last ones and the bound pod */
    assert_true(kinds <= EX_PENDING_MAX + 1);
    /* the pod asked about every 900 new pods is still there, counted once */
    struct pl_pod tq;
    assert_int_equal(ex_pod_on_node(&m, 0, &retried, &tq, why, sizeof(why)), 0);
    pl_unobserve(&m.c, &tq);
    size_t kinds1;
    double pods1;
    pl_estimate_size(&m.c, &kinds1, &pods1);
    assert_int_equal(kinds1, kinds - 1);
    pl_unobserve(&m.c, &tq); /* nothing more of it */
    pl_estimate_size(&m.c, &kinds1, &pods1);
    assert_int_equal(kinds1, kinds - 1);
    pl_observe(&m.c, &tq);
    /* the bound pod's kind is still there: without it one kind fewer */
    struct pl_pod rq;
    assert_int_equal(ex_pod_on_node(&m, 0, &real, &rq, why, sizeof(why)), 0);
    pl_unobserve(&m.c, &rq);
    size_t kinds2;
    pl_estimate_size(&m.c, &kinds2, &pods);
    assert_int_equal(kinds2, kinds - 1);
    pl_observe(&m.c, &rq);
    /* an early made-up pod retried is observed again; a recent one is not counted twice */
    struct ex_pod early = made_up(0), late = made_up(59999);
    double before;
    pl_estimate_size(&m.c, &kinds, &before);
    ex_observe(&m, &late);
    pl_estimate_size(&m.c, &kinds, &pods);
    assert_true(pods == before);
    ex_observe(&m, &early); /* added, the oldest pending withdrawn */
    pl_estimate_size(&m.c, &kinds, &pods);
    assert_true(pods == before);
    ex_model_free(&m);

    /* FGD: its window's targets hold at most EX_PENDING_MAX made-up kinds */
    assert_int_equal(ex_model_init(&m, PL_FGD, ns, 2, err, sizeof(err)), 0);
    for (int k = 0; k < 60000; k++) {
        struct ex_pod p = made_up(k);
        ex_observe(&m, &p);
    }
    for (int k = 0; k < 500; k++) { /* the last refresh after the flood: real pods, bound */
        struct ex_pod p = real;
        snprintf(p.uid, sizeof(p.uid), "real-%d", k);
        ex_observe(&m, &p);
        ex_bind(&m, &p, k % 2 ? "n0" : "n1", &ch, why, sizeof(why));
        ex_release(&m, p.uid);
    }
    assert_true(m.c.n_targets <= EX_PENDING_MAX + 1);
    assert_true(m.c.n_targets >= 1);
    ex_model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_sum_overflow),
        cmocka_unit_test(test_quantity_ranges),
        cmocka_unit_test(test_names_bounded),
        cmocka_unit_test(test_nodes_and_pod_bounded),
        cmocka_unit_test(test_made_up_pods_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
