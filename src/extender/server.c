/* server.c: the extender's endpoints (server.h). The handler runs on the HTTP server's thread;
 * the decision itself is pure (model.c, wire.c). */
#include "extender/server.h"

#include <errno.h>
#include <stdbool.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "httpd/httpd.h"
#include "util/log.h"
#include "util/util.h"

#define RECENT 1024 /* pods remembered from filter/prioritize for bind (which names the pod only) */

enum verb { V_FILTER, V_PRIORITIZE, V_BIND, V_COUNT };
static const char *const verb_names[V_COUNT] = { "filter", "prioritize", "bind" };
/* latency buckets, seconds */
static const double buckets[] = { 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25 };
#define N_BUCKETS (sizeof(buckets) / sizeof(buckets[0]))

struct ex_server {
    struct ex_server_config cfg;
    struct httpd *http;
    /* counters: only the server's thread touches them */
    uint64_t requests[V_COUNT], errors[V_COUNT];
    uint64_t fit, failed, unresolvable, bound;
    uint64_t hist[V_COUNT][N_BUCKETS + 1];
    double lat_sum[V_COUNT];
    struct ex_pod recent[RECENT];
    size_t next_recent;
    char timing[96];    /* the answer's Server-Timing field (formatted before the next request) */
    enum ex_verdict *v; /* per node of a request (room()) */
    char (*why)[EX_REASON_MAX];
    int64_t *sc;
    size_t cap;
};

static uint64_t cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void remember(struct ex_server *s, const struct ex_pod *p) {
    if (!p->uid[0])
        return;
    size_t last = (s->next_recent + RECENT - 1) % RECENT; /* prioritize follows filter: the same pod */
    if (strcmp(s->recent[last].uid, p->uid) == 0) {
        s->recent[last] = *p;
        return;
    }
    s->recent[s->next_recent] = *p;
    s->next_recent = (s->next_recent + 1) % RECENT;
}

static const struct ex_pod *recall(const struct ex_server *s, const char *uid, const char *ns, const char *name) {
    for (size_t k = 0; k < RECENT; k++) {
        const struct ex_pod *p = &s->recent[k];
        if (p->uid[0] && (uid[0] ? strcmp(p->uid, uid) == 0 : !strcmp(p->ns, ns) && !strcmp(p->name, name)))
            return p;
    }
    return NULL;
}

static void json_answer(struct httpd_response *r, int status, char *body, size_t len) {
    r->status = body ? status : 503;
    r->content_type = "application/json";
    r->body = body ? body : "";
    r->body_len = body ? len : 0;
    r->release = body ? free : NULL;
    r->ref = body;
}

static void text_answer(struct httpd_response *r, int status, const char *text) {
    r->status = status;
    r->content_type = "text/plain; charset=utf-8";
    r->body = text;
    r->body_len = strlen(text);
}

/* room for n nodes' verdicts, reasons and scores, kept between requests (a fresh quarter of a
 * megabyte per request was page faults) */
static bool room(struct ex_server *s, size_t n) {
    if (n <= s->cap)
        return true;
    size_t cap = n + n / 2 + 16;
    free(s->v), free(s->why), free(s->sc);
    s->v = malloc(cap * sizeof(*s->v));
    s->why = malloc(cap * sizeof(*s->why));
    s->sc = malloc(cap * sizeof(*s->sc));
    s->cap = s->v && s->why && s->sc ? cap : 0;
    return s->cap != 0;
}

static void filter(struct ex_server *s, const struct ex_args *a, struct httpd_response *r) {
    if (!room(s, a->n_names)) {
        json_answer(r, 503, NULL, 0);
        return;
    }
    pthread_mutex_lock(s->cfg.lock);
    ex_observe(s->cfg.model, &a->pod);
    for (size_t k = 0; k < a->n_names; k++)
        s->v[k] = ex_filter(s->cfg.model, &a->pod, a->names[k], s->why[k], sizeof(s->why[k]));
    pthread_mutex_unlock(s->cfg.lock);
    for (size_t k = 0; k < a->n_names; k++)
        s->fit += s->v[k] == EX_FIT, s->failed += s->v[k] == EX_FAIL, s->unresolvable += s->v[k] == EX_UNRESOLVABLE;
    size_t len;
    char *body = ex_filter_render(a->names, s->v, s->why, a->n_names, &len);
    json_answer(r, 200, body, len);
}

static void prioritize(struct ex_server *s, const struct ex_args *a, struct httpd_response *r) {
    if (!room(s, a->n_names)) {
        json_answer(r, 503, NULL, 0);
        return;
    }
    pthread_mutex_lock(s->cfg.lock);
    ex_observe(s->cfg.model, &a->pod);
    ex_prioritize(s->cfg.model, &a->pod, a->names, a->n_names, s->sc);
    pthread_mutex_unlock(s->cfg.lock);
    size_t len;
    char *body = ex_priorities_render(a->names, s->sc, a->n_names, &len);
    json_answer(r, 200, body, len);
}

static void bind(struct ex_server *s, const struct httpd_request *req, struct httpd_response *r) {
    struct ex_bind_args b;
    char err[1200] = "";
    size_t len;
    if (ex_bind_args_parse(req->body, req->body_len, &b, err, sizeof(err)) < 0) {
        s->errors[V_BIND]++;
        {
            char *b_ = ex_bind_result_render(err, &len);
            json_answer(r, 400, b_, len);
        }
        return;
    }
    const struct ex_pod *p = recall(s, b.uid, b.ns, b.name);
    if (!p) {
        snprintf(err, sizeof(err), "pod %s/%s (uid %s): not seen by the extender's filter", b.ns, b.name, b.uid);
    } else {
        struct pl_choice ch;
        pthread_mutex_lock(s->cfg.lock);
        int e = ex_bind(s->cfg.model, p, b.node, &ch, err, sizeof(err));
        pthread_mutex_unlock(s->cfg.lock);
        bool fresh = e == 0;
        if (e == -EALREADY) /* the scheduler's retry: the same GPUs, bound again */
            e = 0;
        if (e == 0 && s->cfg.bind) {
            /* the API server's round trip outside the lock, so that the sources keep the model
             * current meanwhile; a binding refused gives the share back */
            e = s->cfg.bind(s->cfg.bind_ctx, &b, &ch, err, sizeof(err));
            if (e < 0 && fresh) {
                pthread_mutex_lock(s->cfg.lock);
                ex_release(s->cfg.model, p->uid);
                pthread_mutex_unlock(s->cfg.lock);
            }
        }
        if (e == 0)
            s->bound++;
        else if (!err[0])
            snprintf(err, sizeof(err), "bind %s/%s to %s: %s", b.ns, b.name, b.node, strerror(-e));
    }
    if (err[0]) {
        s->errors[V_BIND]++;
        log_warn("Extender bind: %s", err);
    }
    {
        char *b_ = ex_bind_result_render(err, &len);
        json_answer(r, 200, b_, len);
    }
}

static void observe_latency(struct ex_server *s, enum verb v, double secs) {
    size_t b = 0;
    while (b < N_BUCKETS && secs > buckets[b])
        b++;
    s->hist[v][b]++;
    s->lat_sum[v] += secs;
}

/* the Prometheus text, malloc'd */
static char *metrics_text(struct ex_server *s, size_t *len) {
    size_t cap = 8192, o = 0;
    char *t = malloc(cap);
    if (!t)
        return NULL;
#define OUT(...)                                                                                                       \
    do {                                                                                                               \
        int w_ = snprintf(t + o, cap - o, __VA_ARGS__);                                                                \
        if (w_ > 0 && (size_t)w_ < cap - o)                                                                            \
            o += (size_t)w_;                                                                                           \
    } while (0)
    OUT("# HELP gpuslice_extender_requests_total Extender requests by verb.\n# TYPE gpuslice_extender_requests_total "
        "counter\n");
    for (int v = 0; v < V_COUNT; v++)
        OUT("gpuslice_extender_requests_total{verb=\"%s\"} %" PRIu64 "\n", verb_names[v], s->requests[v]);
    OUT("# HELP gpuslice_extender_errors_total Extender requests answered with an error.\n# TYPE "
        "gpuslice_extender_errors_total counter\n");
    for (int v = 0; v < V_COUNT; v++)
        OUT("gpuslice_extender_errors_total{verb=\"%s\"} %" PRIu64 "\n", verb_names[v], s->errors[v]);
    OUT("# HELP gpuslice_extender_filter_nodes_total Nodes filtered, by result.\n# TYPE "
        "gpuslice_extender_filter_nodes_total counter\n");
    OUT("gpuslice_extender_filter_nodes_total{result=\"fit\"} %" PRIu64 "\n", s->fit);
    OUT("gpuslice_extender_filter_nodes_total{result=\"failed\"} %" PRIu64 "\n", s->failed);
    OUT("gpuslice_extender_filter_nodes_total{result=\"unresolvable\"} %" PRIu64 "\n", s->unresolvable);
    OUT("# HELP gpuslice_extender_binds_total Pods bound with a GPU choice.\n# TYPE gpuslice_extender_binds_total "
        "counter\ngpuslice_extender_binds_total %" PRIu64 "\n",
        s->bound);
    OUT("# HELP gpuslice_extender_decision_seconds Time from a request's arrival to its answer.\n# TYPE "
        "gpuslice_extender_decision_seconds histogram\n");
    for (int v = 0; v < V_COUNT; v++) {
        uint64_t cum = 0;
        for (size_t b = 0; b < N_BUCKETS; b++) {
            cum += s->hist[v][b];
            OUT("gpuslice_extender_decision_seconds_bucket{verb=\"%s\",le=\"%g\"} %" PRIu64 "\n", verb_names[v],
                buckets[b], cum);
        }
        cum += s->hist[v][N_BUCKETS];
        OUT("gpuslice_extender_decision_seconds_bucket{verb=\"%s\",le=\"+Inf\"} %" PRIu64 "\n", verb_names[v], cum);
        OUT("gpuslice_extender_decision_seconds_sum{verb=\"%s\"} %.9f\n", verb_names[v], s->lat_sum[v]);
        OUT("gpuslice_extender_decision_seconds_count{verb=\"%s\"} %" PRIu64 "\n", verb_names[v], cum);
    }
    pthread_mutex_lock(s->cfg.lock);
    size_t nodes = s->cfg.model->c.n_nodes, pods = s->cfg.model->n_bound;
    double alloc = s->cfg.model->c.total_gpu_milli
                       ? (double)s->cfg.model->c.alloc_gpu_milli / (double)s->cfg.model->c.total_gpu_milli
                       : 0;
    pthread_mutex_unlock(s->cfg.lock);
    OUT("# HELP gpuslice_extender_nodes Nodes in the extender's model.\n# TYPE gpuslice_extender_nodes gauge\n"
        "gpuslice_extender_nodes %zu\n",
        nodes);
    OUT("# HELP gpuslice_extender_pods_bound Pods bound in the extender's model.\n# TYPE "
        "gpuslice_extender_pods_bound gauge\ngpuslice_extender_pods_bound %zu\n",
        pods);
    OUT("# HELP gpuslice_extender_gpu_allocated_ratio GPU allocated over the model's GPU capacity.\n# TYPE "
        "gpuslice_extender_gpu_allocated_ratio gauge\ngpuslice_extender_gpu_allocated_ratio %.6f\n",
        alloc);
#undef OUT
    *len = o;
    return t;
}

static enum verb verb_of(const char *path) {
    const char *last = strrchr(path, '/');
    last = last ? last + 1 : path;
    for (int v = 0; v < V_COUNT; v++)
        if (strcmp(last, verb_names[v]) == 0)
            return (enum verb)v;
    return V_COUNT;
}

static void handle(void *ctx, const struct httpd_request *req, struct httpd_response *r) {
    struct ex_server *s = ctx;
    const struct gs_http_head *h = req->head;
    bool get = !strcmp(h->method, "GET") || !strcmp(h->method, "HEAD");
    if (!strcmp(h->path, "/healthz") || !strcmp(h->path, "/metrics")) {
        if (!get) {
            r->status = 405;
            r->extra = "Allow: GET, HEAD\r\n";
            return;
        }
        if (!strcmp(h->path, "/healthz")) {
            text_answer(r, 200, "ok\n");
            return;
        }
        size_t len;
        char *t = metrics_text(s, &len);
        text_answer(r, t ? 200 : 503, "");
        r->content_type = "text/plain; version=0.0.4; charset=utf-8";
        r->body = t ? t : "";
        r->body_len = t ? len : 0;
        r->release = t ? free : NULL;
        r->ref = t;
        return;
    }
    enum verb v = verb_of(h->path);
    if (v == V_COUNT) {
        text_answer(r, 404, "gpuslice extender: POST .../filter, .../prioritize, .../bind; GET /healthz, /metrics\n");
        return;
    }
    if (strcmp(h->method, "POST") != 0) {
        r->status = 405;
        r->extra = "Allow: POST\r\n";
        return;
    }
    s->requests[v]++;
    uint64_t t0 = gs_now_ns(), c0 = cpu_ns();
    if (!req->body) { /* a POST without a body */
        size_t len;
        s->errors[v]++;
        {
            char *b_ = ex_filter_error_render("no request body (Content-Length)", &len);
            json_answer(r, 400, b_, len);
        }
        return;
    }
    if (v == V_BIND) {
        bind(s, req, r);
    } else {
        struct ex_args a;
        char err[512];
        int e = ex_args_parse(req->body, req->body_len, &a, err, sizeof(err));
        if (e < 0) {
            size_t len;
            s->errors[v]++;
            if (v == V_FILTER) /* the scheduler takes Error as this extender's failure for the pod */
            {
                char *b_ = ex_filter_error_render(err, &len);
                json_answer(r, e == -ENOMEM ? 503 : 400, b_, len);
            } else
                text_answer(r, e == -ENOMEM ? 503 : 400, "bad ExtenderArgs\n");
            log_debug("Extender %s: %s", verb_names[v], err);
            return;
        }
        remember(s, &a.pod);
        if (v == V_FILTER)
            filter(s, &a, r);
        else
            prioritize(s, &a, r);
        ex_args_free(&a);
    }
    uint64_t wall = gs_now_ns() - t0, cpu = cpu_ns() - c0;
    observe_latency(s, v, (double)wall / 1e9);
    /* the decision's time and the thread's CPU time in it (W3C Server-Timing, milliseconds): what
     * the bench reads, the CPU time being what a loaded machine does not inflate */
    snprintf(s->timing, sizeof(s->timing), "Server-Timing: decision;dur=%.3f, cpu;dur=%.3f\r\n", (double)wall / 1e6,
             (double)cpu / 1e6);
    r->extra = s->timing;
}

struct ex_server *ex_server_start(const struct ex_server_config *cfg, char *err, size_t errlen) {
    struct ex_server *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    struct httpd_config hc = {
        .what = "extender", .addr = cfg->addr, .max_body = cfg->max_body, .handler = handle, .ctx = s
    };
    s->http = httpd_start(&hc, err, errlen);
    if (!s->http) {
        free(s);
        return NULL;
    }
    return s;
}

unsigned ex_server_port(const struct ex_server *s) {
    return httpd_port(s->http);
}

void ex_server_stop(struct ex_server *s) {
    if (!s)
        return;
    httpd_stop(s->http);
    free(s->v);
    free(s->why);
    free(s->sc);
    free(s);
}
