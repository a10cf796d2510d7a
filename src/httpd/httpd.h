/* httpd.h: a small HTTP/1.x server on one thread of its own (poll(2)), for the agent's /metrics and
 * the scheduler extender. Requests are read with the pure parser of src/core/httphead.c (fuzzed);
 * keep-alive and pipelining work; bodies with a Content-Length up to a bound are read whole and
 * handed to the handler with the head. A handler may defer its answer to another thread
 * (httpd_defer, httpd_complete) while the thread serves the other connections. Limits (fixed
 * per-phase deadlines, 16 connections and who is evicted for a 17th, 8 deferred answers) are
 * described in httpd.c. With TLS (struct httpd_tls), each connection is TLS 1.2 or later and a client
 * certificate, when one is sent, must verify against the client CA: the handler learns whether the
 * request came with one (httpd_request.client_verified) and decides what is open without. */
#ifndef GS_HTTPD_H
#define GS_HTTPD_H

#include <stdbool.h>
#include <stddef.h>

#include "core/httphead.h"

struct httpd;

/* Valid during the handler's call only. */
struct httpd_request {
    const struct gs_http_head *head;
    const char *body; /* body_len bytes (not NUL-terminated); NULL when there is none or it was not read */
    size_t body_len;
    void *conn; /* the server's, for httpd_defer */
    /* TLS: the client presented a certificate the client CA verified (and that names one of
     * httpd_tls.client_names, where given); client_cn its subject's CN. Plain HTTP: false, "". */
    bool client_verified;
    const char *client_cn;
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

/* TLS for every connection (PEM files, read once at httpd_start). */
struct httpd_tls {
    const char *cert_file;           /* the server's certificate, with its chain */
    const char *key_file;            /* its private key */
    const char *client_ca_file;      /* the CAs a client certificate must chain to */
    const char *const *client_names; /* NULL-terminated; NULL or empty: any verified client */
};

struct httpd_config {
    const char *what; /* what is served, in error messages: "metrics", "extender" */
    const char *addr; /* "HOST:PORT" or ":PORT" (all addresses); PORT 0 picks a free port */
    size_t max_body;  /* the longest body read (413 beyond, 411 without a Content-Length); 0: bodies
                            * are not read, and a connection that sent one closes after the answer */
    httpd_handler_fn handler;
    void *ctx;
    const struct httpd_tls *tls; /* NULL: plain HTTP */
    bool bodies_need_client;     /* with tls: a request body is read only from a client whose certificate
                                  * verified; another's request is served without its body (the handler
                                  * refuses it) and the connection closes after the answer */
};

/* Deferred answers, for a handler whose answer waits on a round trip elsewhere (the extender's
 * Binding written to the API server): the handler calls httpd_defer(req) and leaves its response
 * alone; the connection then waits for httpd_complete(), which any thread calls once with the
 * answer, while the server's thread serves the other connections (input arriving meanwhile on
 * that connection is kept for after the answer). At most HTTPD_MAX_DEFERRED answers are
 * outstanding at once, so that most connection slots stay free for the others: beyond that (or
 * without memory) httpd_defer returns NULL and the handler answers now. A connection that closed
 * meanwhile (the client gone, or its 30 s to get the answer passed) drops the answer when it
 * comes, its body released. httpd_stop waits for every outstanding answer to be completed. */
#define HTTPD_MAX_DEFERRED 8
struct httpd_deferred;
/* On the server's thread, in the handler only. */
struct httpd_deferred *httpd_defer(const struct httpd_request *req);
/* From any thread, once per httpd_defer: r is copied (its extra fields up to 255 bytes; its body by
 * reference, released after it is sent or dropped). */
void httpd_complete(struct httpd_deferred *d, const struct httpd_response *r);

/* Returns NULL with the reason in err ("WHAT address 'ADDR': expected HOST:PORT or :PORT",
 * "cannot serve WHAT on ADDR: ...", or a TLS file's error naming the file). */
struct httpd *httpd_start(const struct httpd_config *cfg, char *err, size_t errlen);
/* Whether addr ("HOST:PORT") names an IPv4 loopback address (127.0.0.0/8); ":PORT" (every
 * address), another host or a malformed addr: false. Pure. */
bool httpd_addr_is_loopback(const char *addr);
/* The port actually bound. */
unsigned httpd_port(const struct httpd *h);
/* Stops the thread, closes every connection and waits for the deferred answers outstanding (NULL:
 * nothing). */
void httpd_stop(struct httpd *h);

#endif
