/* httpd.h: a small HTTP/1.x server on one thread of its own (poll(2)), for the agent's /metrics and
 * the scheduler extender. Requests are read with the pure parser of src/core/httphead.c (fuzzed);
 * keep-alive and pipelining work; bodies with a Content-Length up to a bound are read whole and
 * handed to the handler with the head. Limits (fixed per-phase deadlines, 16 connections and who is
 * evicted for a 17th) are described in httpd.c. */
#ifndef GS_HTTPD_H
#define GS_HTTPD_H

#include <stddef.h>

#include "core/httphead.h"

struct httpd;

struct httpd_request {
    const struct gs_http_head *head;
    const char *body; /* body_len bytes (not NUL-terminated); NULL when there is none or it was not read */
    size_t body_len;
};

/* What the handler fills; the server has zeroed it (status 0 is taken as 500). */
struct httpd_response {
    int status;
    const char *content_type; /* NULL: no Content-Type field */
    const char *extra;        /* further header fields, each ending in CRLF (e.g. "Allow: GET\r\n"), or NULL */
    const char *body;         /* body_len bytes, valid until release(ref) is called (after it is sent) */
    size_t body_len;
    void (*release)(void *ref); /* NULL: the body is static */
    void *ref;
};

/* Called on the server's thread for each request whose head (and body) has arrived. For a HEAD
 * request the server sends the head only. */
typedef void (*httpd_handler_fn)(void *ctx, const struct httpd_request *req, struct httpd_response *resp);

struct httpd_config {
    const char *what; /* what is served, in error messages: "metrics", "extender" */
    const char *addr; /* "HOST:PORT" or ":PORT" (all addresses); PORT 0 picks a free port */
    size_t max_body;  /* the longest body read (413 beyond, 411 without a Content-Length); 0: bodies
                            * are not read, and a connection that sent one closes after the answer */
    httpd_handler_fn handler;
    void *ctx;
};

/* Returns NULL with the reason in err ("WHAT address 'ADDR': expected HOST:PORT or :PORT",
 * "cannot serve WHAT on ADDR: ..."). */
struct httpd *httpd_start(const struct httpd_config *cfg, char *err, size_t errlen);
/* The port actually bound. */
unsigned httpd_port(const struct httpd *h);
/* Stops the thread and closes every connection (NULL: nothing). */
void httpd_stop(struct httpd *h);

#endif
