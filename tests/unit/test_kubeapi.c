/* test_kubeapi.c: the REST client's pure parts (src/kube/kubeapi.c): API paths, list and watch
 * queries with selectors and continue tokens, Status objects as errors, the watch stream's line
 * framing (bounded) and event parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/kubeapi.h"
#include "util/util.h"

static void test_paths(void **state) {
    (void)state;
    char p[KUBE_URL_MAX];
    assert_int_equal(kube_path(p, sizeof p, "v1", NULL, "nodes", "n1"), 0);
    assert_string_equal(p, "/api/v1/nodes/n1");
    assert_int_equal(kube_path(p, sizeof p, "v1", "gs", "configmaps", NULL), 0);
    assert_string_equal(p, "/api/v1/namespaces/gs/configmaps");
    assert_int_equal(kube_path(p, sizeof p, "resource.k8s.io/v1", "", "resourceslices", "node-1.gpu-0"), 0);
    assert_string_equal(p, "/apis/resource.k8s.io/v1/resourceslices/node-1.gpu-0");
    assert_int_equal(kube_path(p, sizeof p, "resource.k8s.io/v1", "ns", "resourceclaims", "a b/c"), 0);
    assert_string_equal(p, "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/a%20b%2Fc"); /* escaped */
    /* what cannot be a path segment */
    assert_int_equal(kube_path(p, sizeof p, "v1", "a/b", "pods", NULL), -EINVAL);
    assert_int_equal(kube_path(p, sizeof p, "v1", "..", "pods", NULL), -EINVAL);
    assert_int_equal(kube_path(p, sizeof p, "v1", NULL, "Pods", NULL), -EINVAL);
    assert_int_equal(kube_path(p, sizeof p, "v1", NULL, "", NULL), -EINVAL);
    assert_int_equal(kube_path(p, sizeof p, "a/b/c", NULL, "pods", NULL), -EINVAL);
    assert_int_equal(kube_path(p, sizeof p, "/v1", NULL, "pods", NULL), -EINVAL);
    assert_int_equal(kube_path(p, sizeof p, "v1", NULL, "pods", ".."), -EINVAL);
    assert_int_equal(kube_path(p, sizeof p, "v1", NULL, "pods", ""), -EINVAL);
    assert_int_equal(kube_path(p, 12, "v1", NULL, "nodes", "n1"), -ENAMETOOLONG);
}

static void test_list_and_watch_queries(void **state) {
    (void)state;
    char u[KUBE_URL_MAX];
    struct kube_list_opts o = { .label_selector = "app=gpu,tier in (a,b)",
                                .field_selector = "spec.nodeName=n1",
                                .continue_token = "eyJ2Ijo+/=",
                                .limit = 50 };
    assert_int_equal(kube_list_url(u, sizeof u, "/api/v1/pods", &o, false, 0), 0);
    assert_string_equal(u, "/api/v1/pods?labelSelector=app%3Dgpu%2Ctier%20in%20%28a%2Cb%29"
                           "&fieldSelector=spec.nodeName%3Dn1&limit=50&continue=eyJ2Ijo%2B%2F%3D");
    assert_int_equal(kube_list_url(u, sizeof u, "/api/v1/pods", NULL, false, 0), 0);
    assert_string_equal(u, "/api/v1/pods");
    /* a watch: no limit, no continue; bookmarks and the timeout */
    o.resource_version = "123";
    assert_int_equal(kube_list_url(u, sizeof u, "/api/v1/pods", &o, true, 60), 0);
    assert_string_equal(
        u, "/api/v1/pods?watch=1&allowWatchBookmarks=true&labelSelector=app%3Dgpu%2Ctier%20in%20%28a%2Cb%29"
           "&fieldSelector=spec.nodeName%3Dn1&resourceVersion=123&timeoutSeconds=60");
    assert_int_equal(kube_list_url(u, sizeof u, "api/v1/pods", NULL, false, 0), -EINVAL);
    assert_int_equal(kube_list_url(u, sizeof u, "/api/v1/pods?x=1", NULL, false, 0), -EINVAL);
    char big[5000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    o.label_selector = big;
    assert_int_equal(kube_list_url(u, sizeof u, "/api/v1/pods", &o, false, 0), -ENAMETOOLONG);
    char q[64] = "/p";
    assert_int_equal(kube_query_add(q, sizeof q, "a", "1"), 0);
    assert_int_equal(kube_query_add(q, sizeof q, "b", "x&y"), 0);
    assert_string_equal(q, "/p?a=1&b=x%26y");
}

static void test_status_errors(void **state) {
    (void)state;
    char msg[256];
    const char *forbidden = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
                            "\"message\":\"resourceslices.resource.k8s.io \\\"x\\\" is forbidden: User \\\"u\\\" "
                            "cannot get resource\",\"reason\":\"Forbidden\",\"code\":403}";
    assert_int_equal(kube_status_error(403, forbidden, strlen(forbidden), msg, sizeof msg), -EPERM);
    assert_string_equal(msg, "403 Forbidden: resourceslices.resource.k8s.io \"x\" is forbidden: User \"u\" cannot get "
                             "resource");
    const char *conflict = "{\"kind\":\"Status\",\"message\":\"the object has been modified\",\"reason\":\"Conflict\","
                           "\"code\":409}";
    assert_int_equal(kube_status_error(409, conflict, strlen(conflict), msg, sizeof msg), -ESTALE);
    const char *exists = "{\"kind\":\"Status\",\"message\":\"configmaps \\\"a\\\" already exists\","
                         "\"reason\":\"AlreadyExists\",\"code\":409}";
    assert_int_equal(kube_status_error(409, exists, strlen(exists), msg, sizeof msg), -EEXIST);
    assert_string_equal(msg, "409 Conflict: configmaps \"a\" already exists");
    /* not a Status: the body's first line, control characters replaced */
    const char *html = "<html>bad\tgateway\nmore";
    assert_int_equal(kube_status_error(502, html, strlen(html), msg, sizeof msg), -EIO);
    assert_string_equal(msg, "502 error: <html>bad?gateway");
    assert_int_equal(kube_status_error(404, NULL, 0, msg, sizeof msg), -ENOENT);
    assert_string_equal(msg, "404 Not Found");
    assert_int_equal(kube_status_error(410, "", 0, msg, sizeof msg), -ENODATA);
    assert_int_equal(kube_status_error(401, "", 0, msg, sizeof msg), -EACCES);
    assert_int_equal(kube_status_error(422, "", 0, msg, sizeof msg), -EINVAL);
    assert_int_equal(kube_status_error(429, "", 0, msg, sizeof msg), -EBUSY);
    assert_int_equal(kube_status_error(504, "", 0, msg, sizeof msg), -ETIMEDOUT);
    /* a message is cut to the buffer, never overflows */
    char small[16];
    assert_int_equal(kube_status_error(403, forbidden, strlen(forbidden), small, sizeof small), -EPERM);
    assert_int_equal(strlen(small), sizeof small - 1);
}

struct got {
    char lines[8][64];
    int n;
    int stop_at; /* return 7 at this line (1-based), 0: never */
};

static int collect(void *ctx, const char *line, size_t len) {
    struct got *g = ctx;
    assert_true(g->n < 8);
    assert_true(len < 64);
    memcpy(g->lines[g->n], line, len);
    g->lines[g->n][len] = '\0';
    g->n++;
    return g->stop_at == g->n ? 7 : 0;
}

static void test_line_framing(void **state) {
    (void)state;
    struct kube_lines l;
    struct got g = { 0 };
    kube_lines_init(&l, 16);
    /* lines split across chunks at every place, an empty line skipped */
    assert_int_equal(kube_lines_feed(&l, "ab", 2, collect, &g), 0);
    assert_int_equal(g.n, 0);
    assert_int_equal(kube_lines_pending(&l), 2);
    assert_int_equal(kube_lines_feed(&l, "c\n\nde\nf", 7, collect, &g), 0);
    assert_int_equal(g.n, 2);
    assert_string_equal(g.lines[0], "abc");
    assert_string_equal(g.lines[1], "de");
    assert_int_equal(kube_lines_feed(&l, "\n", 1, collect, &g), 0);
    assert_string_equal(g.lines[2], "f");
    assert_int_equal(kube_lines_pending(&l), 0);
    /* at the limit is fine, over it is -E2BIG, in one chunk or in many */
    assert_int_equal(kube_lines_feed(&l, "0123456789abcdef\n", 17, collect, &g), 0);
    assert_string_equal(g.lines[3], "0123456789abcdef");
    assert_int_equal(kube_lines_feed(&l, "0123456789", 10, collect, &g), 0);
    assert_int_equal(kube_lines_feed(&l, "abcdefg", 7, collect, &g), -E2BIG);
    kube_lines_free(&l);
    kube_lines_init(&l, 16);
    /* a whole line over the limit in one chunk is refused too (found by fuzz_kubewatch) */
    assert_int_equal(kube_lines_feed(&l, "0123456789abcdefg\n", 18, collect, &g), -E2BIG);
    kube_lines_free(&l);
    /* the callback's nonzero stops delivery */
    struct got h = { .stop_at = 2 };
    kube_lines_init(&l, 16);
    assert_int_equal(kube_lines_feed(&l, "a\nb\nc\n", 6, collect, &h), 7);
    assert_int_equal(h.n, 2);
    kube_lines_free(&l);
}

static void test_line_framing_bounded_when_buffered(void **state) {
    (void)state;
    struct kube_lines l;
    struct got g = { 0 };
    kube_lines_init(&l, 8);
    for (int i = 0; i < 8; i++)
        assert_int_equal(kube_lines_feed(&l, "x", 1, collect, &g), 0);
    assert_int_equal(kube_lines_feed(&l, "x", 1, collect, &g), -E2BIG); /* the 9th byte of a line */
    assert_true(l.cap <= 8);
    kube_lines_free(&l);
}

static void test_events(void **state) {
    (void)state;
    enum kube_event_type t;
    json_t *obj;
    char err[256];
    const char *added = "{\"type\":\"ADDED\",\"object\":{\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"a\","
                        "\"namespace\":\"gs\",\"resourceVersion\":\"42\"}}}";
    assert_int_equal(kube_event_parse(added, strlen(added), &t, &obj, err, sizeof err), 0);
    assert_int_equal(t, KUBE_ADDED);
    assert_string_equal(kube_meta(obj, "name"), "a");
    assert_string_equal(kube_meta(obj, "namespace"), "gs");
    assert_string_equal(kube_meta(obj, "resourceVersion"), "42");
    assert_null(kube_meta(obj, "uid"));
    json_decref(obj);
    const char *gone = "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410,\"reason\":\"Expired\","
                       "\"message\":\"too old resource version: 1 (2)\"}}";
    assert_int_equal(kube_event_parse(gone, strlen(gone), &t, &obj, err, sizeof err), 0);
    assert_int_equal(t, KUBE_ERROR);
    assert_int_equal(kube_status_errno(json_integer_value(json_object_get(obj, "code")), "Expired"), -ENODATA);
    json_decref(obj);
    const char *bm = "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"9\"}}}";
    assert_int_equal(kube_event_parse(bm, strlen(bm), &t, &obj, err, sizeof err), 0);
    assert_int_equal(t, KUBE_BOOKMARK);
    json_decref(obj);
    assert_string_equal(kube_event_name(KUBE_MODIFIED), "MODIFIED");
    assert_string_equal(kube_event_name(KUBE_DELETED), "DELETED");
    static const struct {
        const char *line, *want;
    } bad[] = {
        { "{\"type\":\"ADDED\"", "watch event: invalid JSON" },
        { "[1]", "watch event: not a JSON object" },
        { "{\"object\":{}}", "watch event: no \"type\" string" },
        { "{\"type\":\"RENAMED\",\"object\":{}}", "watch event: unknown type \"RENAMED\"" },
        { "{\"type\":\"DELETED\",\"object\":[]}", "watch event DELETED: no \"object\" object" },
        { "{\"type\":\"DELETED\"}", "watch event DELETED: no \"object\" object" },
        { "{\"type\":\"ADDED\",\"type\":\"DELETED\",\"object\":{}}", "watch event: invalid JSON" },
    };
    for (size_t i = 0; i < GS_ARRAY_SIZE(bad); i++) {
        err[0] = '\0';
        assert_int_equal(kube_event_parse(bad[i].line, strlen(bad[i].line), &t, &obj, err, sizeof err), -EBADMSG);
        assert_null(obj);
        if (strncmp(err, bad[i].want, strlen(bad[i].want)) != 0)
            fail_msg("'%s': expected '%s...', got '%s'", bad[i].line, bad[i].want, err);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_list_and_watch_queries),
        cmocka_unit_test(test_status_errors),
        cmocka_unit_test(test_line_framing),
        cmocka_unit_test(test_line_framing_bounded_when_buffered),
        cmocka_unit_test(test_events),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
