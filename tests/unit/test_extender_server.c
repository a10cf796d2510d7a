/* test_extender_server.c: the extender's HTTP server (src/extender/server.c) with a bind_fn, on
 * loopback: the Binding written by a bind worker while filter and prioritize are answered, its
 * result (success or the API server's error, the share given back) in the scheduler's answer, the
 * bound on bindings in flight, a scheduler that closes its connection mid-bind, and a stop with a
 * bind in flight. The bind_fn is a fake the test holds shut (a gate) to keep a bind in flight.
 * Who may bind what: a bind without PodUID, or of a UID the filter never saw or saw with another
 * name, is refused before anything is committed; a pod check (the API server's read) that says no
 * leaves the model as it was and writes no Binding; without plain_trusted (no TLS client
 * certificate) every path but /healthz is 401. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "extender/model.h"
#include "extender/server.h"
#include "http_client.h"

static struct fake {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool open;           /* the gate: binds wait until it opens */
    int result;          /* what they return then */
    int in_flight, max_in_flight, calls, done;
    char last_uid[64];
} fk = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static int fake_bind(void *ctx, const struct ex_bind_args *b, const struct pl_choice *ch, char *err, size_t errlen) {
    (void)ctx;
    (void)ch;
    pthread_mutex_lock(&fk.mu);
    fk.calls++;
    if (++fk.in_flight > fk.max_in_flight)
        fk.max_in_flight = fk.in_flight;
    snprintf(fk.last_uid, sizeof(fk.last_uid), "%s", b->uid);
    while (!fk.open)
        pthread_cond_wait(&fk.cv, &fk.mu);
    int r = fk.result;
    fk.in_flight--;
    fk.done++;
    pthread_mutex_unlock(&fk.mu);
    if (r < 0)
        snprintf(err, errlen, "pods \"%s\" is forbidden: injected by the test", b->name);
    return r;
}

static void gate(bool open, int result) {
    pthread_mutex_lock(&fk.mu);
    fk.open = open;
    fk.result = result;
    pthread_cond_broadcast(&fk.cv);
    pthread_mutex_unlock(&fk.mu);
}

static int fake_get(const int *field) {
    pthread_mutex_lock(&fk.mu);
    int v = *field;
    pthread_mutex_unlock(&fk.mu);
    return v;
}

/* Waits (5 s at most) for *field to reach want. */
static void wait_fake(const int *field, int want) {
    for (int i = 0; i < 500 && fake_get(field) < want; i++)
        hc_sleep_ms(10);
    assert_int_equal(fake_get(field), want);
}

struct fixture {
    struct ex_model m;
    pthread_mutex_t lock;
    struct ex_server *s;
    unsigned port;
};

/* The fake pod check: its answer, and its calls. */
static int check_result, check_calls;

static int fake_check(void *ctx, const struct ex_bind_args *b, char *err, size_t errlen) {
    (void)ctx;
    pthread_mutex_lock(&fk.mu);
    check_calls++;
    int r = check_result;
    pthread_mutex_unlock(&fk.mu);
    if (r < 0)
        snprintf(err, errlen, "pod %s/%s: already bound to node m (injected by the test)", b->ns, b->name);
    return r;
}

/* One node "n" of two A100s; the fake's gate shut; workers bind_workers (0: the default); every
 * request trusted unless untrusted; check: the pod check (NULL: none). */
static void start_with(struct fixture *f, unsigned workers, bool untrusted, ex_check_fn check) {
    pthread_mutex_lock(&fk.mu);
    fk.open = false;
    fk.result = 0;
    fk.in_flight = fk.max_in_flight = fk.calls = fk.done = 0;
    pthread_mutex_unlock(&fk.mu);
    struct ex_node_spec ns = { .name = "n", .cpu = 64000, .mem = 256 * 1024, .model = "A100", .n_gpu = 2,
                               .gpu_mem_mib = 81920, .gpu_free = { 1000, 1000 } };
    char err[256];
    assert_int_equal(ex_model_init(&f->m, PL_FGD, &ns, 1, err, sizeof(err)), 0);
    pthread_mutex_init(&f->lock, NULL);
    struct ex_server_config cfg = { .addr = "127.0.0.1:0", .plain_trusted = !untrusted, .max_body = 1 << 20,
                                    .model = &f->m, .lock = &f->lock, .bind = fake_bind, .check = check,
                                    .bind_workers = workers };
    check_calls = 0;
    f->s = ex_server_start(&cfg, err, sizeof(err));
    assert_non_null(f->s);
    f->port = ex_server_port(f->s);
}

static void start(struct fixture *f, unsigned workers) {
    start_with(f, workers, false, NULL);
}

static void stop(struct fixture *f) {
    gate(true, 0);
    ex_server_stop(f->s);
    ex_model_free(&f->m);
    pthread_mutex_destroy(&f->lock);
}

/* A pod asking GPUS whole GPUs, in ExtenderArgs for node n. */
static void args(char *to, size_t len, const char *uid, int gpus) {
    snprintf(to, len,
             "{\"Pod\":{\"metadata\":{\"name\":\"p-%s\",\"namespace\":\"default\",\"uid\":\"%s\"},\"spec\":{"
             "\"containers\":[{\"name\":\"c\",\"resources\":{\"requests\":{\"nvidia.com/gpu\":\"%d\"}}}]}},"
             "\"NodeNames\":[\"n\"]}",
             uid, uid, gpus);
}

/* Filters the pod on n: whether n fits. */
static bool fits(const struct fixture *f, const char *uid, int gpus) {
    char body[1024], buf[4096];
    const char *resp = "";
    args(body, sizeof(body), uid, gpus);
    assert_int_equal(hc_roundtrip(f->port, "POST", "/scheduler/filter", body, buf, sizeof(buf), &resp), 200);
    return strstr(resp, "\"NodeNames\": [\"n\"]") || strstr(resp, "\"NodeNames\":[\"n\"]");
}

/* Sends the bind of pod NAME (uid UID) on a connection of its own, returned. */
static int send_bind_named(const struct fixture *f, const char *name, const char *uid) {
    char body[512];
    snprintf(body, sizeof(body), "{\"PodName\":\"%s\",\"PodNamespace\":\"default\",\"PodUID\":\"%s\",\"Node\":\"n\"}",
             name, uid);
    int fd = hc_connect(f->port);
    assert_true(fd >= 0);
    assert_int_equal(hc_send(fd, "POST", "/scheduler/bind", body), 0);
    return fd;
}

/* The pod p-UID's bind. */
static int send_bind(const struct fixture *f, const char *uid) {
    char name[80];
    snprintf(name, sizeof(name), "p-%s", uid);
    return send_bind_named(f, name, uid);
}

/* The bind's answer on fd: its Error field ("" when bound), into buf. */
static const char *bind_answer(int fd, char *buf, size_t cap) {
    int status = 0;
    const char *resp = "";
    assert_true(hc_read(fd, buf, cap, &status, &resp) > 0);
    assert_int_equal(status, 200);
    assert_non_null(strstr(buf, "Server-Timing: decision;dur="));
    const char *e = strstr(resp, "\"Error\"");
    assert_non_null(e);
    return e;
}

/* Whether every line (NULL-terminated list) is in /metrics, asked up to 100 times 10 ms apart (a
 * worker counts a bind just after the bind_fn returns). */
static bool metrics_have(const struct fixture *f, const char *const *lines) {
    static char buf[16384];
    for (int i = 0; i < 100; i++) {
        const char *resp = "";
        assert_int_equal(hc_roundtrip(f->port, "GET", "/metrics", NULL, buf, sizeof(buf), &resp), 200);
        size_t k = 0;
        while (lines[k] && strstr(resp, lines[k]))
            k++;
        if (!lines[k])
            return true;
        hc_sleep_ms(10);
    }
    return false;
}

/* Whether the model holds the pod bound is want, within a second. */
static bool bound_is(struct fixture *f, const char *uid, bool want) {
    for (int i = 0; i < 100; i++) {
        pthread_mutex_lock(&f->lock);
        bool bound = ex_find_bound(&f->m, uid) != NULL;
        pthread_mutex_unlock(&f->lock);
        if (bound == want)
            return true;
        hc_sleep_ms(10);
    }
    return false;
}

/* The pod's bind sent, and the fake holding it: its connection. */
static int bind_in_flight(const struct fixture *f, const char *uid) {
    int calls = fake_get(&fk.calls), fd = send_bind(f, uid);
    wait_fake(&fk.calls, calls + 1);
    return fd;
}

static bool bound_ok(const char *e) {
    return strncmp(e, "\"Error\": \"\"", 11) == 0 || strncmp(e, "\"Error\":\"\"", 10) == 0;
}

/* While a Binding is in flight, filter and prioritize are answered, and they see its GPU taken. */
static void test_filter_answered_while_binding(void **state) {
    (void)state;
    struct fixture f;
    start(&f, 0);
    assert_true(fits(&f, "u1", 1));
    int b = bind_in_flight(&f, "u1");
    /* one GPU left of two: a 2-GPU pod does not fit, a 1-GPU pod does */
    assert_false(fits(&f, "u2", 2));
    assert_true(fits(&f, "u3", 1));
    char body[1024], buf[8192];
    const char *resp = "";
    args(body, sizeof(body), "u3", 1);
    assert_int_equal(hc_roundtrip(f.port, "POST", "/scheduler/prioritize", body, buf, sizeof(buf), &resp), 200);
    assert_non_null(strstr(resp, "\"Host\""));
    assert_int_equal(fake_get(&fk.done), 0); /* all of that with the bind still in flight */
    gate(true, 0);
    assert_true(bound_ok(bind_answer(b, buf, sizeof(buf))));
    close(b);
    assert_true(bound_is(&f, "u1", true));
    const char *want[] = { "gpuslice_extender_binds_total 1\n", "gpuslice_extender_errors_total{verb=\"bind\"} 0\n",
                           "gpuslice_extender_decision_seconds_count{verb=\"bind\"} 1\n", NULL };
    assert_true(metrics_have(&f, want));
    stop(&f);
}

/* The API server refuses the Binding: the scheduler gets its error, and the share is given back. */
static void test_bind_error_gives_share_back(void **state) {
    (void)state;
    struct fixture f;
    start(&f, 0);
    assert_true(fits(&f, "u1", 2));
    int b = bind_in_flight(&f, "u1");
    assert_false(fits(&f, "u2", 1)); /* both GPUs taken while it is in flight */
    gate(true, -EACCES);
    char buf[8192];
    const char *e = bind_answer(b, buf, sizeof(buf));
    assert_non_null(strstr(e, "injected by the test"));
    close(b);
    assert_true(bound_is(&f, "u1", false));
    assert_true(fits(&f, "u2", 2));
    const char *want[] = { "gpuslice_extender_binds_total 0\n", "gpuslice_extender_errors_total{verb=\"bind\"} 1\n",
                           NULL };
    assert_true(metrics_have(&f, want));
    stop(&f);
}

/* The scheduler closes the connection while its bind is in flight: the Binding is still written
 * (the model keeps the GPUs), the answer is dropped, the server goes on. */
static void test_connection_closed_mid_bind(void **state) {
    (void)state;
    struct fixture f;
    start(&f, 0);
    assert_true(fits(&f, "u1", 1));
    int b = bind_in_flight(&f, "u1");
    close(b);
    hc_sleep_ms(100);
    assert_true(fits(&f, "u2", 1)); /* served with the connection gone and the bind in flight */
    gate(true, 0);
    wait_fake(&fk.done, 1);
    const char *want[] = { "gpuslice_extender_binds_total 1\n", NULL };
    assert_true(metrics_have(&f, want));
    assert_true(bound_is(&f, "u1", true));
    /* the same with a refused Binding: the share comes back although nobody hears of it */
    gate(false, 0);
    close(bind_in_flight(&f, "u2"));
    gate(true, -EACCES);
    wait_fake(&fk.done, 2);
    assert_true(bound_is(&f, "u2", false));
    const char *errs[] = { "gpuslice_extender_errors_total{verb=\"bind\"} 1\n", NULL };
    assert_true(metrics_have(&f, errs));
    stop(&f);
}

/* At most bind_workers Bindings in flight; the others wait their turn and all are answered. */
static void test_bindings_in_flight_bounded(void **state) {
    (void)state;
    struct fixture f;
    start(&f, 2);
    enum { N = 6 };
    int fds[N];
    char uid[N][8];
    for (int k = 0; k < N; k++) {
        snprintf(uid[k], sizeof(uid[k]), "v%d", k);
        /* pods asking nothing of the GPUs: each fits, each is bound */
        char body[1024], buf[4096];
        const char *resp = "";
        snprintf(body, sizeof(body),
                 "{\"Pod\":{\"metadata\":{\"name\":\"p-%s\",\"namespace\":\"default\",\"uid\":\"%s\"},\"spec\":{"
                 "\"containers\":[{\"name\":\"c\",\"resources\":{\"requests\":{\"cpu\":\"1\"}}}]}},"
                 "\"NodeNames\":[\"n\"]}",
                 uid[k], uid[k]);
        assert_int_equal(hc_roundtrip(f.port, "POST", "/scheduler/filter", body, buf, sizeof(buf), &resp), 200);
        fds[k] = send_bind(&f, uid[k]);
    }
    wait_fake(&fk.calls, 2);
    hc_sleep_ms(200); /* time for a third to start, were it let */
    assert_int_equal(fake_get(&fk.calls), 2); /* the other four are queued */
    assert_true(fits(&f, "w", 1));            /* and the HTTP thread is free */
    gate(true, 0);
    char buf[8192];
    for (int k = 0; k < N; k++) {
        assert_true(bound_ok(bind_answer(fds[k], buf, sizeof(buf))));
        close(fds[k]);
    }
    assert_int_equal(fake_get(&fk.calls), N);
    assert_int_equal(fake_get(&fk.max_in_flight), 2);
    const char *want[] = { "gpuslice_extender_binds_total 6\n", NULL };
    assert_true(metrics_have(&f, want));
    stop(&f);
}

static void *open_later(void *arg) {
    (void)arg;
    hc_sleep_ms(200);
    gate(true, 0);
    return NULL;
}

/* Stopping with a bind in flight waits for it (the worker still has the model and the HTTP
 * server's answer to complete), then frees everything. */
static void test_stop_with_bind_in_flight(void **state) {
    (void)state;
    struct fixture f;
    start(&f, 0);
    assert_true(fits(&f, "u1", 1));
    int b = bind_in_flight(&f, "u1");
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, open_later, NULL), 0);
    ex_server_stop(f.s);
    assert_int_equal(fake_get(&fk.done), 1);
    pthread_join(t, NULL);
    close(b);
    ex_model_free(&f.m);
    pthread_mutex_destroy(&f.lock);
}

/* The bind's Error names want (refused), nothing reached the bind_fn and the model binds nothing. */
static void assert_refused(struct fixture *f, int fd, const char *want) {
    char buf[8192];
    const char *e = bind_answer(fd, buf, sizeof(buf));
    close(fd);
    if (!strstr(e, want))
        fail_msg("bind answer %s: expected %s", e, want);
    assert_int_equal(fake_get(&fk.calls), 0);
    pthread_mutex_lock(&f->lock);
    assert_int_equal(f->m.n_bound, 0);
    pthread_mutex_unlock(&f->lock);
}

/* A bind names a pod the filter saw, by its UID: never by its name alone, never another's name. */
static void test_bind_only_what_the_filter_saw(void **state) {
    (void)state;
    struct fixture f;
    start(&f, 0);
    gate(true, 0);
    assert_refused(&f, send_bind(&f, "never"), "pod default/p-never (uid never): not seen by the extender's filter");
    assert_true(fits(&f, "u1", 1));
    assert_refused(&f, send_bind_named(&f, "p-u1", ""), "no PodUID");
    assert_refused(&f, send_bind_named(&f, "victim", "u1"), "the extender's filter saw that uid as default/p-u1");
    /* prioritize alone is not a filter: its pod is not remembered */
    char body[1024], buf[4096];
    const char *resp = "";
    args(body, sizeof(body), "u2", 1);
    assert_int_equal(hc_roundtrip(f.port, "POST", "/scheduler/prioritize", body, buf, sizeof(buf), &resp), 200);
    assert_refused(&f, send_bind(&f, "u2"), "not seen by the extender's filter");
    /* the right one binds */
    assert_true(bound_ok(bind_answer(send_bind(&f, "u1"), buf, sizeof(buf))));
    assert_true(bound_is(&f, "u1", true));
    stop(&f);
}

/* The pod check (the API server's read of the pod) says no: nothing committed, no Binding. */
static void test_check_refusal_changes_nothing(void **state) {
    (void)state;
    struct fixture f;
    start_with(&f, 0, false, fake_check);
    gate(true, 0);
    check_result = -EEXIST;
    assert_true(fits(&f, "u1", 2));
    assert_refused(&f, send_bind(&f, "u1"), "already bound to node m (injected by the test)");
    assert_int_equal(check_calls, 1);
    assert_true(fits(&f, "u2", 2)); /* both GPUs still free */
    check_result = 0;
    char buf[8192];
    assert_true(bound_ok(bind_answer(send_bind(&f, "u2"), buf, sizeof(buf))));
    assert_true(bound_is(&f, "u2", true));
    assert_int_equal(check_calls, 2);
    stop(&f);
}

/* Untrusted (no verified client certificate): 401 for all but /healthz, and nothing changes. */
static void test_untrusted_is_401(void **state) {
    (void)state;
    struct fixture f;
    start_with(&f, 0, true, NULL);
    gate(true, 0);
    char body[1024], buf[4096];
    const char *resp = "";
    assert_int_equal(hc_roundtrip(f.port, "GET", "/healthz", NULL, buf, sizeof(buf), &resp), 200);
    assert_int_equal(hc_roundtrip(f.port, "GET", "/metrics", NULL, buf, sizeof(buf), &resp), 401);
    args(body, sizeof(body), "u1", 2);
    assert_int_equal(hc_roundtrip(f.port, "POST", "/scheduler/filter", body, buf, sizeof(buf), &resp), 401);
    assert_non_null(strstr(resp, "client certificate"));
    snprintf(body, sizeof(body), "{\"PodName\":\"p-u1\",\"PodNamespace\":\"default\",\"PodUID\":\"u1\",\"Node\":\"n\"}");
    assert_int_equal(hc_roundtrip(f.port, "POST", "/scheduler/bind", body, buf, sizeof(buf), &resp), 401);
    assert_int_equal(fake_get(&fk.calls), 0);
    pthread_mutex_lock(&f.lock);
    assert_int_equal(f.m.n_bound, 0);
    pthread_mutex_unlock(&f.lock);
    stop(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filter_answered_while_binding),
        cmocka_unit_test(test_bind_error_gives_share_back),
        cmocka_unit_test(test_connection_closed_mid_bind),
        cmocka_unit_test(test_bindings_in_flight_bounded),
        cmocka_unit_test(test_stop_with_bind_in_flight),
        cmocka_unit_test(test_bind_only_what_the_filter_saw),
        cmocka_unit_test(test_check_refusal_changes_nothing),
        cmocka_unit_test(test_untrusted_is_401),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
