/* test_httpd.c: src/httpd's deferred answers on loopback: the other connections served while an
 * answer is deferred, pipelined input kept for after it, the bound on deferred answers, a client
 * that closes before its answer, and httpd_stop waiting for the answers outstanding. */
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

#include "http_client.h"
#include "httpd/httpd.h"

/* The deferred answers the handler took, for the test to complete; and the bodies released. */
static struct {
    pthread_mutex_t mu;
    struct httpd_deferred *pending[32];
    int n_pending;
    int released;
} g = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void handler(void *ctx, const struct httpd_request *req, struct httpd_response *r) {
    (void)ctx;
    if (strcmp(req->head->path, "/defer") == 0) {
        struct httpd_deferred *d = httpd_defer(req);
        if (d) {
            pthread_mutex_lock(&g.mu);
            g.pending[g.n_pending++] = d;
            pthread_mutex_unlock(&g.mu);
            return;
        }
    }
    r->status = 200;
    r->body = "now";
    r->body_len = 3;
}

static void release_counted(void *ref) {
    free(ref);
    pthread_mutex_lock(&g.mu);
    g.released++;
    pthread_mutex_unlock(&g.mu);
}

static int n_pending(void) {
    pthread_mutex_lock(&g.mu);
    int n = g.n_pending;
    pthread_mutex_unlock(&g.mu);
    return n;
}

static int n_released(void) {
    pthread_mutex_lock(&g.mu);
    int n = g.released;
    pthread_mutex_unlock(&g.mu);
    return n;
}

/* Waits (5 s at most) until the handler has deferred n answers. */
static void wait_pending(int n) {
    for (int i = 0; i < 500 && n_pending() < n; i++)
        hc_sleep_ms(10);
    assert_int_equal(n_pending(), n);
}

/* Completes the k-th deferred answer with body TEXT (malloc'd, released by the server). */
static void complete(int k, const char *text) {
    pthread_mutex_lock(&g.mu);
    struct httpd_deferred *d = g.pending[k];
    pthread_mutex_unlock(&g.mu);
    char *body = strdup(text);
    assert_non_null(body);
    struct httpd_response r = { .status = 200, .extra = "X-Deferred: yes\r\n", .body = body,
                                .body_len = strlen(body), .release = release_counted, .ref = body };
    httpd_complete(d, &r);
}

static struct httpd *start(void) {
    pthread_mutex_lock(&g.mu);
    g.n_pending = 0;
    g.released = 0;
    pthread_mutex_unlock(&g.mu);
    char err[256];
    struct httpd_config cfg = { .what = "test", .addr = "127.0.0.1:0", .handler = handler };
    struct httpd *h = httpd_start(&cfg, err, sizeof(err));
    assert_non_null(h);
    return h;
}

/* One connection waits for its answer; another is served meanwhile; the answer, with its header
 * fields, then comes on the first. */
static void test_others_served_while_deferred(void **state) {
    (void)state;
    struct httpd *h = start();
    unsigned port = httpd_port(h);
    int a = hc_connect(port);
    assert_true(a >= 0);
    assert_int_equal(hc_send(a, "GET", "/defer", NULL), 0);
    wait_pending(1);
    char buf[2048];
    const char *body = "";
    assert_int_equal(hc_roundtrip(port, "GET", "/now", NULL, buf, sizeof(buf), &body), 200);
    assert_string_equal(body, "now");
    complete(0, "later");
    int status = 0;
    assert_int_equal(hc_read(a, buf, sizeof(buf), &status, &body), 5);
    assert_int_equal(status, 200);
    assert_string_equal(body, "later");
    assert_non_null(strstr(buf, "X-Deferred: yes\r\n"));
    /* the connection goes on after its deferred answer */
    assert_int_equal(hc_send(a, "GET", "/now", NULL), 0);
    assert_int_equal(hc_read(a, buf, sizeof(buf), &status, &body), 3);
    close(a);
    httpd_stop(h);
    assert_int_equal(n_released(), 1);
}

/* A request pipelined behind a deferred one is answered after it, in order. */
static void test_pipelined_after_deferred(void **state) {
    (void)state;
    struct httpd *h = start();
    int a = hc_connect(httpd_port(h));
    assert_true(a >= 0);
    const char *two = "GET /defer HTTP/1.1\r\nHost: t\r\n\r\nGET /now HTTP/1.1\r\nHost: t\r\n\r\n";
    assert_int_equal(send(a, two, strlen(two), 0), (ssize_t)strlen(two));
    wait_pending(1);
    hc_sleep_ms(100); /* the second request has arrived and waits */
    complete(0, "first");
    char buf[4096];
    size_t have = 0;
    while (have < sizeof(buf) - 1) {
        buf[have] = '\0';
        const char *f = strstr(buf, "\r\n\r\nfirst"), *n = f ? strstr(f, "\r\n\r\nnow") : NULL;
        if (n)
            break;
        ssize_t got = recv(a, buf + have, sizeof(buf) - 1 - have, 0);
        assert_true(got > 0);
        have += (size_t)got;
    }
    close(a);
    httpd_stop(h);
}

/* Beyond HTTPD_MAX_DEFERRED outstanding, httpd_defer refuses and the handler answers at once. */
static void test_deferred_bounded(void **state) {
    (void)state;
    struct httpd *h = start();
    unsigned port = httpd_port(h);
    int fds[HTTPD_MAX_DEFERRED];
    for (int k = 0; k < HTTPD_MAX_DEFERRED; k++) {
        fds[k] = hc_connect(port);
        assert_true(fds[k] >= 0);
        assert_int_equal(hc_send(fds[k], "GET", "/defer", NULL), 0);
        wait_pending(k + 1);
    }
    char buf[2048];
    const char *body = "";
    assert_int_equal(hc_roundtrip(port, "GET", "/defer", NULL, buf, sizeof(buf), &body), 200);
    assert_string_equal(body, "now");
    assert_int_equal(n_pending(), HTTPD_MAX_DEFERRED);
    for (int k = 0; k < HTTPD_MAX_DEFERRED; k++) {
        char text[16];
        snprintf(text, sizeof(text), "answer %d", k);
        complete(k, text);
    }
    for (int k = 0; k < HTTPD_MAX_DEFERRED; k++) {
        int status = 0;
        char text[16];
        snprintf(text, sizeof(text), "answer %d", k);
        assert_true(hc_read(fds[k], buf, sizeof(buf), &status, &body) > 0);
        assert_string_equal(body, text);
        close(fds[k]);
    }
    /* the slots are free again: a new one is deferred */
    int a = hc_connect(port);
    assert_int_equal(hc_send(a, "GET", "/defer", NULL), 0);
    wait_pending(HTTPD_MAX_DEFERRED + 1);
    complete(HTTPD_MAX_DEFERRED, "again");
    int status = 0;
    assert_int_equal(hc_read(a, buf, sizeof(buf), &status, &body), 5);
    close(a);
    httpd_stop(h);
    assert_int_equal(n_released(), HTTPD_MAX_DEFERRED + 1);
}

/* The client goes away before its answer: the answer is dropped (its body released), the server
 * goes on; its slot may be another connection's by then, which does not get it. */
static void test_closed_before_answer(void **state) {
    (void)state;
    struct httpd *h = start();
    unsigned port = httpd_port(h);
    int a = hc_connect(port);
    assert_int_equal(hc_send(a, "GET", "/defer", NULL), 0);
    wait_pending(1);
    close(a);
    hc_sleep_ms(100); /* the server sees the close */
    int b = hc_connect(port); /* likely a's slot */
    assert_true(b >= 0);
    complete(0, "for a");
    for (int i = 0; i < 500 && n_released() < 1; i++)
        hc_sleep_ms(10);
    assert_int_equal(n_released(), 1);
    char buf[2048];
    const char *body = "";
    int status = 0;
    assert_int_equal(hc_send(b, "GET", "/now", NULL), 0);
    assert_int_equal(hc_read(b, buf, sizeof(buf), &status, &body), 3);
    assert_string_equal(body, "now");
    close(b);
    httpd_stop(h);
}

static void *complete_later(void *arg) {
    (void)arg;
    hc_sleep_ms(200);
    complete(0, "late");
    return NULL;
}

/* httpd_stop with an answer outstanding waits for it, and drops it. */
static void test_stop_waits_for_outstanding(void **state) {
    (void)state;
    struct httpd *h = start();
    int a = hc_connect(httpd_port(h));
    assert_int_equal(hc_send(a, "GET", "/defer", NULL), 0);
    wait_pending(1);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, complete_later, NULL), 0);
    httpd_stop(h);
    assert_int_equal(n_released(), 1);
    pthread_join(t, NULL);
    close(a);
}

/* Which listen addresses are loopback (plain HTTP is served only there). */
static void test_addr_is_loopback(void **state) {
    (void)state;
    assert_true(httpd_addr_is_loopback("127.0.0.1:8888"));
    assert_true(httpd_addr_is_loopback("127.1.2.3:0"));
    assert_false(httpd_addr_is_loopback(":8888"));
    assert_false(httpd_addr_is_loopback("0.0.0.0:8888"));
    assert_false(httpd_addr_is_loopback("10.0.0.1:8888"));
    assert_false(httpd_addr_is_loopback("128.0.0.1:8888"));
    assert_false(httpd_addr_is_loopback("localhost:8888"));
    assert_false(httpd_addr_is_loopback("127.0.0.1"));
    assert_false(httpd_addr_is_loopback("127.0.0.1.5:1"));
    assert_false(httpd_addr_is_loopback(""));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_addr_is_loopback),
        cmocka_unit_test(test_others_served_while_deferred),
        cmocka_unit_test(test_pipelined_after_deferred),
        cmocka_unit_test(test_deferred_bounded),
        cmocka_unit_test(test_closed_before_answer),
        cmocka_unit_test(test_stop_waits_for_outstanding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
