/* test_httphead.c: the HTTP/1.x request head parser of the metrics server (src/core/httphead.h). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/httphead.h"

static int parse(const char *s, struct gs_http_head *h) {
    return gs_http_parse_head(s, strlen(s), h);
}

static void test_complete_head(void **state) {
    (void)state;
    struct gs_http_head h;
    const char *req = "GET /metrics?name[]=up HTTP/1.1\r\nHost: node:9400\r\nAccept: */*\r\n\r\nNEXT";
    assert_int_equal(parse(req, &h), (int)(strlen(req) - 4));
    assert_string_equal(h.method, "GET");
    assert_string_equal(h.path, "/metrics");
    assert_int_equal(h.minor, 1);
    assert_true(h.keep_alive);
    assert_false(h.has_body);
    /* bare LF line ends and empty lines before the request line (RFC 9112 §2.2) */
    assert_int_equal(parse("\r\n\nHEAD / HTTP/1.0\nX:  y \n\n", &h), 27);
    assert_string_equal(h.method, "HEAD");
    assert_string_equal(h.path, "/");
    assert_int_equal(h.minor, 0);
    assert_false(h.keep_alive); /* HTTP/1.0 closes by default */
}

static void test_incomplete_needs_more(void **state) {
    (void)state;
    struct gs_http_head h;
    const char *req = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    for (size_t n = 0; n < strlen(req); n++)
        assert_int_equal(gs_http_parse_head(req, n, &h), 0);
    assert_int_equal(gs_http_parse_head(req, strlen(req), &h), (int)strlen(req));
}

static void test_connection_and_body(void **state) {
    (void)state;
    static const struct {
        const char *req;
        bool keep_alive, has_body;
    } cases[] = {
        { "GET / HTTP/1.1\r\nHost: x\r\nConnection: TE, close\r\n\r\n", false, false },
        { "GET / HTTP/1.0\r\nconnection: Keep-Alive\r\n\r\n", true, false },
        /* a close anywhere wins, whatever the order */
        { "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n", false, false },
        { "GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n", false, false },
        { "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n", true, true },
        { "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 000\r\n\r\n", true, false },
        { "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", true, true },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct gs_http_head h;
        assert_true(parse(cases[i].req, &h) > 0);
        if (h.keep_alive != cases[i].keep_alive || h.has_body != cases[i].has_body)
            fail_msg("%s: keep_alive %d has_body %d, expected %d %d", cases[i].req, h.keep_alive, h.has_body,
                     cases[i].keep_alive, cases[i].has_body);
    }
}

/* The body's length, for a server that reads bodies (the extender): one value, or the same twice. */
static void test_content_length(void **state) {
    (void)state;
    struct gs_http_head h;
    assert_true(parse("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 12345\r\n\r\n", &h) > 0);
    assert_true(h.content_length == 12345 && !h.chunked);
    assert_true(parse("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\nContent-Length: 7\r\n\r\n", &h) > 0);
    assert_true(h.content_length == 7);
    assert_int_equal(parse("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\nContent-Length: 8\r\n\r\n", &h),
                     -EBADMSG);
    assert_int_equal(parse("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n", &h),
                     -EBADMSG);
    assert_true(parse("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", &h) > 0);
    assert_true(h.chunked && h.content_length == 0);
}

static void test_host_and_absolute_form(void **state) {
    (void)state;
    struct gs_http_head h;
    assert_int_equal(parse("GET /metrics HTTP/1.1\r\n\r\n", &h), -EBADMSG);           /* no Host */
    assert_int_equal(parse("GET /metrics HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", &h), -EBADMSG);
    assert_true(parse("GET /metrics HTTP/1.0\r\n\r\n", &h) > 0);                     /* 1.0 needs none */
    assert_true(parse("GET http://node:9400/metrics?x HTTP/1.1\r\nHost: node:9400\r\n\r\n", &h) > 0);
    assert_string_equal(h.path, "/metrics");
    assert_true(parse("GET HTTPS://node HTTP/1.1\r\nHost: node\r\n\r\n", &h) > 0);
    assert_string_equal(h.path, "/");
    assert_true(parse("GET http:/x HTTP/1.0\r\n\r\n", &h) > 0); /* not absolute form: as sent */
    assert_string_equal(h.path, "http:/x");
}

static void test_errors(void **state) {
    (void)state;
    struct gs_http_head h;
    static const struct {
        const char *req;
        int err;
    } cases[] = {
        { "GARBAGE\r\n\r\n", -EBADMSG },
        { "GET\r\n\r\n", -EBADMSG },
        { "GET  / HTTP/1.1\r\n\r\n", -EBADMSG },           /* two spaces */
        { "GET / HTTP/1.1 \r\n\r\n", -EBADMSG },
        { "GET / HTTP/11\r\n\r\n", -EBADMSG },
        { "GET / http/1.1\r\n\r\n", -EBADMSG },
        { "G(T / HTTP/1.1\r\n\r\n", -EBADMSG },           /* not a token */
        { "GET /\x01 HTTP/1.1\r\n\r\n", -EBADMSG },
        { "GET / HTTP/1.1\rX\n\r\n", -EBADMSG },           /* CR not before LF */
        { "GET / HTTP/1.1\r\nNo colon\r\n\r\n", -EBADMSG },
        { "GET / HTTP/1.1\r\nName : v\r\n\r\n", -EBADMSG }, /* space before the colon */
        { "GET / HTTP/1.1\r\n: v\r\n\r\n", -EBADMSG },
        { "GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", -EBADMSG },
        { "GET / HTTP/1.1\r\nA: b\x01\r\n\r\n", -EBADMSG },
        { "GET / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", -EBADMSG },
        { "GET / HTTP/1.1\r\nContent-Length:\r\n\r\n", -EBADMSG },
        { "GET / HTTP/2.0\r\n\r\n", -EPROTONOSUPPORT },
        { "GET / HTTP/0.9\r\n\r\n", -EPROTONOSUPPORT },
        { "ABCDEFGHIJKLMNOPQ / HTTP/1.1\r\n\r\n", -EOPNOTSUPP },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int r = parse(cases[i].req, &h);
        if (r != cases[i].err)
            fail_msg("case %zu (%s): got %d, want %d", i, cases[i].req, r, cases[i].err);
    }
    char longpath[600] = "GET /";
    memset(longpath + 5, 'a', 300);
    strcpy(longpath + 305, " HTTP/1.1\r\n\r\n");
    assert_int_equal(parse(longpath, &h), -ENAMETOOLONG);
    /* an error in a complete line is found before the head is complete */
    assert_int_equal(parse("GET / HTTP/1.1\r\nbad line\r\nHost:", &h), -EBADMSG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_complete_head),
        cmocka_unit_test(test_incomplete_needs_more),
        cmocka_unit_test(test_connection_and_body),
        cmocka_unit_test(test_content_length),
        cmocka_unit_test(test_host_and_absolute_form),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
