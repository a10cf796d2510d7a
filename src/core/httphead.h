/* httphead.h: the head of an HTTP/1.x request (request line and header fields), parsed from the
 * bytes received so far. Pure: no I/O. The HTTP server (src/httpd/httpd.c) reads with it. */
#ifndef GS_HTTPHEAD_H
#define GS_HTTPHEAD_H

#include <stdbool.h>
#include <stddef.h>

#define GS_HTTP_METHOD_MAX 16
#define GS_HTTP_PATH_MAX 256

struct gs_http_head {
    char method[GS_HTTP_METHOD_MAX]; /* as sent: "GET", "HEAD", ... */
    char path[GS_HTTP_PATH_MAX];     /* the target's path, without query string, scheme and host
                                      * (absolute form, RFC 9112 §3.2.2): "/metrics" */
    int minor;                       /* HTTP/1.<minor> */
    bool keep_alive;                 /* what the client asked for (1.1 default yes, 1.0 default no;
                                      * a "close" anywhere in Connection wins) */
    bool has_body;                   /* Content-Length > 0 or Transfer-Encoding: not for a scrape */
    bool chunked;                    /* a Transfer-Encoding field (its body's length is not known) */
    unsigned long long content_length; /* Content-Length (0 without one); two different values are
                                      * -EBADMSG (RFC 9112 §6.3) */
};

/* Parses the request head at the start of buf[0..len). Returns the head's length in bytes (up to
 * and including the empty line) when it is complete, 0 when more bytes are needed, or a negative
 * errno: -EBADMSG for a malformed request line or header field (or an HTTP/1.1 request without
 * exactly one Host field, RFC 9112 §3.2), -EPROTONOSUPPORT for a version
 * other than HTTP/1.x, -ENAMETOOLONG for a target longer than GS_HTTP_PATH_MAX - 1 and
 * -EOPNOTSUPP for a method longer than GS_HTTP_METHOD_MAX - 1 (no method this server knows). */
int gs_http_parse_head(const char *buf, size_t len, struct gs_http_head *h);

#endif
