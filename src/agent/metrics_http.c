/* metrics_http.c: GET /metrics on the project's HTTP server (src/httpd/httpd.c, which holds the
 * connection limits and deadlines). The agent publishes a rendered text; each response holds the
 * text it sends by reference (no copy per connection), so a publish never waits for a scrape. */
#include "agent/metrics_http.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "httpd/httpd.h"

/* A published text, shared by the responses that send it. */
struct snap {
    struct metrics_http *owner;
    unsigned refs; /* under metrics_http.lock */
    size_t cap, len;
    char text[];
};

struct metrics_http {
    struct httpd *server;
    pthread_mutex_t lock; /* guards cur and every snap's refs */
    struct snap *cur;     /* the text served; NULL before the first publish */
};

static void snap_unref(void *ref) {
    struct snap *s = ref;
    if (!s)
        return;
    struct metrics_http *m = s->owner;
    pthread_mutex_lock(&m->lock);
    bool last = --s->refs == 0;
    pthread_mutex_unlock(&m->lock);
    if (last)
        free(s);
}

static bool known_method(const char *m) {
    static const char *const known[] = { "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT" };
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (strcmp(m, known[i]) == 0)
            return true;
    return false;
}

static void handle(void *ctx, const struct httpd_request *req, struct httpd_response *r) {
    static const char not_found[] = "gpuslice serves /metrics only\n";
    struct metrics_http *m = ctx;
    const struct gs_http_head *h = req->head;
    if (strcmp(h->method, "GET") != 0 && strcmp(h->method, "HEAD") != 0) {
        r->status = known_method(h->method) ? 405 : 501;
        r->extra = r->status == 405 ? "Allow: GET, HEAD\r\n" : NULL;
        return;
    }
    if (strcmp(h->path, "/metrics") != 0) {
        r->status = 404;
        r->content_type = "text/plain; charset=utf-8";
        r->body = not_found;
        r->body_len = sizeof(not_found) - 1;
        return;
    }
    pthread_mutex_lock(&m->lock);
    struct snap *s = m->cur;
    if (s)
        s->refs++;
    pthread_mutex_unlock(&m->lock);
    r->status = 200;
    r->content_type = "text/plain; version=0.0.4; charset=utf-8";
    r->body = s ? s->text : "";
    r->body_len = s ? s->len : 0;
    r->release = s ? snap_unref : NULL;
    r->ref = s;
}

struct metrics_http *metrics_http_start(const char *addr, char *err, size_t errlen) {
    struct metrics_http *m = calloc(1, sizeof(*m));
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&m->lock, NULL);
    struct httpd_config cfg = { .what = "metrics", .addr = addr, .max_body = 0, .handler = handle, .ctx = m };
    m->server = httpd_start(&cfg, err, errlen);
    if (!m->server) {
        pthread_mutex_destroy(&m->lock);
        free(m);
        return NULL;
    }
    return m;
}

unsigned metrics_http_port(const struct metrics_http *m) {
    return httpd_port(m->server);
}

void metrics_http_publish(struct metrics_http *m, const char *text, size_t len) {
    pthread_mutex_lock(&m->lock);
    struct snap *s = m->cur;
    if (s && s->refs == 1 && s->cap >= len) { /* no response holds it: rewritten in place */
        memcpy(s->text, text, len);
        s->len = len;
        pthread_mutex_unlock(&m->lock);
        return;
    }
    pthread_mutex_unlock(&m->lock);
    struct snap *n = malloc(sizeof(*n) + len + 1);
    if (!n)
        return;
    n->owner = m;
    n->refs = 1;
    n->cap = n->len = len;
    memcpy(n->text, text, len);
    pthread_mutex_lock(&m->lock);
    struct snap *old = m->cur;
    m->cur = n;
    pthread_mutex_unlock(&m->lock);
    snap_unref(old);
}

void metrics_http_stop(struct metrics_http *m) {
    if (!m)
        return;
    httpd_stop(m->server); /* every response released */
    snap_unref(m->cur);
    pthread_mutex_destroy(&m->lock);
    free(m);
}
