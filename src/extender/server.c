/* server.c: the extender's endpoints (server.h). The handler runs on the HTTP server's thread;
 * the decision itself is pure (model.c, wire.c). A bind with a bind_fn (the API server's Binding)
 * is decided there too (the GPUs committed to the model), and its round trip is made by a small
 * pool of bind workers: the handler defers the answer (httpd_defer) and queues the job, a worker
 * calls bind_fn, gives the share back on an error (ex_release) and completes the answer
 * (httpd_complete), while the HTTP thread answers the next filter and prioritize calls. At most
 * bind_workers bindings are in flight, the others wait in the queue, which holds as many as
 * httpd defers (HTTPD_MAX_DEFERRED); beyond that a bind is answered on the HTTP thread, as all
 * were before.
 *
 * Who may ask: with TLS (cfg.tls) a request without a client certificate the client CA verified
 * is answered 401 and changes nothing, except GET /healthz (open, for the kubelet's probes);
 * plain HTTP is served only when cfg.plain_trusted says so (a loopback address, asked for
 * explicitly: the caller checks both). A bind is taken only for a pod the filter saw, by its UID
 * (PodUID; the namespace and name must be those the filter saw with it), then, with the API
 * server (cfg.check), only for a pod it shows Pending and not bound with that UID: that read,
 * the GPUs committed and the Binding (the UID its precondition) are made in that order, so that a
 * refused bind leaves the model as it was. */
#include "extender/server.h"

#include <errno.h>
#include <stdbool.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "httpd/httpd.h"
#include "util/log.h"
#include "util/util.h"

#define RECENT 1024 /* pods remembered from filter for bind (which names the pod only) */
#define BIND_WORKERS 4 /* bindings in flight at once, by default */
#define BIND_QUEUE HTTPD_MAX_DEFERRED

enum verb { V_FILTER, V_PRIORITIZE, V_BIND, V_COUNT };
static const char *const verb_names[V_COUNT] = { "filter", "prioritize", "bind" };
/* latency buckets, seconds */
static const double buckets[] = { 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25 };
#define N_BUCKETS (sizeof(buckets) / sizeof(buckets[0]))

/* a bind a worker makes (the pod read, the GPUs committed, the Binding written) */
struct bind_job {
    struct httpd_deferred *answer;
    struct ex_bind_args b;
    struct ex_pod pod;  /* as the filter saw it */
    uint64_t t0, cpu;   /* the request's arrival, the HTTP thread's CPU time on it */
};

struct ex_server {
    struct ex_server_config cfg;
    struct httpd *http;
    /* the bind workers and their queue (under pool) */
    pthread_mutex_t pool;
    pthread_cond_t work;
    pthread_t *workers;
    unsigned n_workers;
    struct bind_job *queue[BIND_QUEUE];
    size_t q_head, q_len;
    bool stopping;
    /* counters: the bind workers touch errors, bound, hist and lat_sum, which are under counts
     * (taken by both threads); requests and the filter's are the server's thread's alone */
    pthread_mutex_t counts;
    uint64_t requests[V_COUNT], errors[V_COUNT];
    uint64_t fit, failed, unresolvable, bound, unauthorized;
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

/* The pod the filter saw with uid (never by its name: a bind without PodUID finds none). */
static const struct ex_pod *recall(const struct ex_server *s, const char *uid) {
    if (!uid[0])
        return NULL;
    for (size_t k = 0; k < RECENT; k++) {
        const struct ex_pod *p = &s->recent[k];
        if (p->uid[0] && strcmp(p->uid, uid) == 0)
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

/* room for n nodes' verdicts, reasons and scores, kept between requests for up to keep nodes (a
 * fresh quarter of a megabyte per request was page faults); a larger request's is freed after it
 * (trim), so that what is held does not follow what one caller sent */
static void trim(struct ex_server *s, size_t keep) {
    if (s->cap <= keep)
        return;
    free(s->v), free(s->why), free(s->sc);
    s->v = NULL, s->why = NULL, s->sc = NULL;
    s->cap = 0;
}

static bool room(struct ex_server *s, size_t n, size_t keep) {
    if (n <= s->cap)
        return true;
    size_t cap = n > keep ? n : keep;
    free(s->v), free(s->why), free(s->sc);
    s->v = malloc(cap * sizeof(*s->v));
    s->why = malloc(cap * sizeof(*s->why));
    s->sc = malloc(cap * sizeof(*s->sc));
    s->cap = s->v && s->why && s->sc ? cap : 0;
    return s->cap != 0;
}

static void filter(struct ex_server *s, const struct ex_args *a, size_t keep, struct httpd_response *r) {
    if (!room(s, a->n_names, keep)) {
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

static void prioritize(struct ex_server *s, const struct ex_args *a, size_t keep, struct httpd_response *r) {
    if (!room(s, a->n_names, keep)) {
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

static void observe_latency(struct ex_server *s, enum verb v, double secs) {
    size_t b = 0;
    while (b < N_BUCKETS && secs > buckets[b])
        b++;
    pthread_mutex_lock(&s->counts);
    s->hist[v][b]++;
    s->lat_sum[v] += secs;
    pthread_mutex_unlock(&s->counts);
}

static void count_error(struct ex_server *s, enum verb v) {
    pthread_mutex_lock(&s->counts);
    s->errors[v]++;
    pthread_mutex_unlock(&s->counts);
}

/* The decision's time and the CPU time spent on it (W3C Server-Timing, milliseconds): what the
 * bench reads, the CPU time being what a loaded machine does not inflate. */
static void server_timing(char *to, size_t len, uint64_t wall_ns, uint64_t cpu_ns_) {
    snprintf(to, len, "Server-Timing: decision;dur=%.3f, cpu;dur=%.3f\r\n", (double)wall_ns / 1e6,
             (double)cpu_ns_ / 1e6);
}

/* The API server's round trip (bind_fn), outside the model's lock so that the sources keep the
 * model current meanwhile; a binding refused gives the share back (uid: the pod's; fresh: the
 * GPUs were committed by this bind, not by an earlier one the scheduler retries). */
static int write_binding(struct ex_server *s, const struct ex_bind_args *b, const struct pl_choice *ch,
                         const char *uid, bool fresh, char *err, size_t errlen) {
    int e = s->cfg.bind(s->cfg.bind_ctx, b, ch, err, errlen);
    if (e < 0 && fresh) {
        pthread_mutex_lock(s->cfg.lock);
        ex_release(s->cfg.model, uid);
        pthread_mutex_unlock(s->cfg.lock);
    }
    return e;
}

/* The bind of p (the pod the filter saw) to b->node: the pod read from the API server and refused
 * unless Pending and unbound with p's UID (cfg.check), the GPUs chosen and committed, the Binding
 * written (an error gives them back). 0 or -errno with the reason in err; on either thread. */
static int make_bind(struct ex_server *s, const struct ex_bind_args *b, const struct ex_pod *p, char *err,
                     size_t errlen) {
    int e;
    if (s->cfg.check && (e = s->cfg.check(s->cfg.bind_ctx, b, err, errlen)) < 0)
        return e;
    struct pl_choice ch;
    pthread_mutex_lock(s->cfg.lock);
    e = ex_bind(s->cfg.model, p, b->node, &ch, err, errlen);
    if (e == -EALREADY && ch.node >= 0 && ch.node != ex_model_find(s->cfg.model, b->node)) {
        snprintf(err, errlen, "pod %s/%s (uid %s): bound to another node in the extender's model, not %s", b->ns,
                 b->name, b->uid, b->node);
        e = -EEXIST;
    }
    pthread_mutex_unlock(s->cfg.lock);
    bool fresh = e == 0;
    if (e == -EALREADY) /* the scheduler's retry: the same GPUs, bound again */
        e = 0;
    if (e == 0 && s->cfg.bind)
        e = write_binding(s, b, &ch, p->uid, fresh, err, errlen);
    return e;
}

/* A bind's ExtenderBindingResult into r (e: 0, or the error, its reason in err when there is
 * one), counted and logged; on either thread. */
static void bind_result(struct ex_server *s, const struct ex_bind_args *b, int e, char *err, size_t errlen,
                        struct httpd_response *r) {
    if (e < 0 && !err[0])
        snprintf(err, errlen, "bind %s/%s to %s: %s", b->ns, b->name, b->node, strerror(-e));
    pthread_mutex_lock(&s->counts);
    if (e == 0)
        s->bound++;
    if (err[0])
        s->errors[V_BIND]++;
    pthread_mutex_unlock(&s->counts);
    if (err[0])
        log_warn("Extender bind: %s", err);
    size_t len;
    char *body = ex_bind_result_render(err, &len);
    json_answer(r, 200, body, len);
}

static void run_job(struct ex_server *s, struct bind_job *j) {
    uint64_t c0 = cpu_ns();
    char err[1200] = "", timing[96];
    int e = make_bind(s, &j->b, &j->pod, err, sizeof(err));
    struct httpd_response r = { 0 };
    bind_result(s, &j->b, e, err, sizeof(err), &r);
    uint64_t wall = gs_now_ns() - j->t0;
    observe_latency(s, V_BIND, (double)wall / 1e9);
    server_timing(timing, sizeof(timing), wall, j->cpu + cpu_ns() - c0);
    r.extra = timing;
    httpd_complete(j->answer, &r);
    free(j);
}

static void *bind_worker(void *arg) {
    struct ex_server *s = arg;
    pthread_mutex_lock(&s->pool);
    for (;;) {
        while (!s->q_len && !s->stopping)
            pthread_cond_wait(&s->work, &s->pool);
        if (!s->q_len)
            break;
        struct bind_job *j = s->queue[s->q_head];
        s->q_head = (s->q_head + 1) % BIND_QUEUE;
        s->q_len--;
        pthread_mutex_unlock(&s->pool);
        run_job(s, j);
        pthread_mutex_lock(&s->pool);
    }
    pthread_mutex_unlock(&s->pool);
    return NULL;
}

/* Hands the bind to a worker, and the answer with it; false when there are no workers, the queue
 * or httpd's deferred answers are full, or without memory (the caller makes it now). */
static bool defer_bind(struct ex_server *s, const struct httpd_request *req, const struct ex_bind_args *b,
                       const struct ex_pod *p, uint64_t t0, uint64_t c0) {
    if (!s->n_workers)
        return false;
    struct bind_job *j = malloc(sizeof(*j));
    if (!j)
        return false;
    *j = (struct bind_job){ .b = *b, .pod = *p, .t0 = t0 };
    pthread_mutex_lock(&s->pool);
    if (s->q_len < BIND_QUEUE && !s->stopping)
        j->answer = httpd_defer(req);
    bool deferred = j->answer != NULL;
    if (deferred) { /* the worker owns j from here on (it may be freed once the lock is let go) */
        j->cpu = cpu_ns() - c0;
        s->queue[(s->q_head + s->q_len) % BIND_QUEUE] = j;
        s->q_len++;
        pthread_cond_signal(&s->work);
    }
    pthread_mutex_unlock(&s->pool);
    if (!deferred)
        free(j);
    return deferred;
}

/* The bind verb: the pod the filter saw with PodUID (else refused here, nothing changed), then the
 * bind made by a worker (true: the answer is deferred) or, when none can take it, here. */
static bool bind(struct ex_server *s, const struct httpd_request *req, struct httpd_response *r, uint64_t t0,
                 uint64_t c0) {
    struct ex_bind_args b;
    char err[1200] = "";
    if (ex_bind_args_parse(req->body, req->body_len, &b, err, sizeof(err)) < 0) {
        count_error(s, V_BIND);
        size_t len;
        char *body = ex_bind_result_render(err, &len);
        json_answer(r, 400, body, len);
        return false;
    }
    const struct ex_pod *p = recall(s, b.uid);
    int e = -EPERM;
    if (!b.uid[0]) {
        snprintf(err, sizeof(err), "bind %s/%s: no PodUID: the extender binds only a pod its filter saw, by its UID",
                 b.ns, b.name);
    } else if (!p) {
        snprintf(err, sizeof(err), "pod %s/%s (uid %s): not seen by the extender's filter", b.ns, b.name, b.uid);
    } else if (strcmp(p->ns, b.ns) != 0 || strcmp(p->name, b.name) != 0) {
        snprintf(err, sizeof(err), "pod %s/%s (uid %s): the extender's filter saw that uid as %s/%s", b.ns, b.name,
                 b.uid, p->ns, p->name);
    } else if (defer_bind(s, req, &b, p, t0, c0)) {
        return true;
    } else {
        e = make_bind(s, &b, p, err, sizeof(err));
    }
    bind_result(s, &b, e, err, sizeof(err), r);
    return false;
}

/* the Prometheus text, malloc'd */
static char *metrics_text(struct ex_server *s, size_t *len) {
    size_t cap = 8192, o = 0;
    char *t = malloc(cap);
    if (!t)
        return NULL;
    pthread_mutex_lock(s->cfg.lock);
    size_t nodes = s->cfg.model->c.n_nodes, pods = s->cfg.model->n_bound;
    double alloc = s->cfg.model->c.total_gpu_milli
                       ? (double)s->cfg.model->c.alloc_gpu_milli / (double)s->cfg.model->c.total_gpu_milli
                       : 0;
    pthread_mutex_unlock(s->cfg.lock);
    pthread_mutex_lock(&s->counts); /* not with the model's lock: the workers take that alone */
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
    OUT("# HELP gpuslice_extender_unauthorized_total Requests refused for want of a verified client certificate.\n"
        "# TYPE gpuslice_extender_unauthorized_total counter\ngpuslice_extender_unauthorized_total %" PRIu64 "\n",
        s->unauthorized);
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
    OUT("# HELP gpuslice_extender_nodes Nodes in the extender's model.\n# TYPE gpuslice_extender_nodes gauge\n"
        "gpuslice_extender_nodes %zu\n",
        nodes);
    OUT("# HELP gpuslice_extender_pods_bound Pods bound in the extender's model.\n# TYPE "
        "gpuslice_extender_pods_bound gauge\ngpuslice_extender_pods_bound %zu\n",
        pods);
    OUT("# HELP gpuslice_extender_gpu_allocated_ratio GPU allocated over the model's GPU capacity.\n# TYPE "
        "gpuslice_extender_gpu_allocated_ratio gauge\ngpuslice_extender_gpu_allocated_ratio %.6f\n",
        alloc);
    pthread_mutex_unlock(&s->counts);
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
    if (!s->cfg.plain_trusted && !req->client_verified && strcmp(h->path, "/healthz") != 0) {
        s->unauthorized++;
        text_answer(r, 401, "gpuslice extender: a client certificate that the extender's client CA verifies is "
                            "required (docs/extender.md, TLS)\n");
        return;
    }
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
        count_error(s, v);
        {
            char *b_ = ex_filter_error_render("no request body (Content-Length)", &len);
            json_answer(r, 400, b_, len);
        }
        return;
    }
    if (v == V_BIND) {
        if (bind(s, req, r, t0, c0))
            return; /* a bind worker answers, counts and times it */
    } else {
        struct ex_args a;
        char err[512];
        pthread_mutex_lock(s->cfg.lock); /* the most names a request may name, the scratch kept */
        size_t most = ex_model_names_max(s->cfg.model), keep = ex_model_nodes_known(s->cfg.model) + 64;
        pthread_mutex_unlock(s->cfg.lock);
        int e = ex_args_parse(req->body, req->body_len, most, &a, err, sizeof(err));
        int status = e == -ENOMEM ? 503 : e == -E2BIG ? 413 : 400;
        if (e < 0) {
            size_t len;
            count_error(s, v);
            if (v == V_FILTER) /* the scheduler takes Error as this extender's failure for the pod */
            {
                char *b_ = ex_filter_error_render(err, &len);
                json_answer(r, status, b_, len);
            } else
                text_answer(r, status, e == -E2BIG ? "ExtenderArgs too large\n" : "bad ExtenderArgs\n");
            log_debug("Extender %s: %s", verb_names[v], err);
#ifdef M_MMAP_THRESHOLD
            if (req->body_len > (1 << 20)) /* as below */
                malloc_trim(0);
#endif
            return;
        }
        if (v == V_FILTER) /* what a bind may name (prioritize follows filter: nothing new) */
            remember(s, &a.pod);
        if (v == V_FILTER)
            filter(s, &a, keep, r);
        else
            prioritize(s, &a, keep, r);
        trim(s, keep);
        ex_args_free(&a);
#ifdef M_MMAP_THRESHOLD
        if (req->body_len > (1 << 20)) /* the Pod's tree of small blocks, freed: back to the system */
            malloc_trim(0);
#endif
    }
    uint64_t wall = gs_now_ns() - t0, cpu = cpu_ns() - c0;
    observe_latency(s, v, (double)wall / 1e9);
    server_timing(s->timing, sizeof(s->timing), wall, cpu);
    r->extra = s->timing;
}

/* Joins the workers (the queue is empty: httpd_stop has waited for every deferred answer) and
 * frees s. */
static void stop_workers(struct ex_server *s) {
    pthread_mutex_lock(&s->pool);
    s->stopping = true;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->pool);
    for (unsigned k = 0; k < s->n_workers; k++)
        pthread_join(s->workers[k], NULL);
    pthread_mutex_destroy(&s->pool);
    pthread_mutex_destroy(&s->counts);
    pthread_cond_destroy(&s->work);
    free(s->workers);
    free(s->v);
    free(s->why);
    free(s->sc);
    free(s);
}

struct ex_server *ex_server_start(const struct ex_server_config *cfg, char *err, size_t errlen) {
    struct ex_server *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    pthread_mutex_init(&s->pool, NULL);
    pthread_mutex_init(&s->counts, NULL);
    pthread_cond_init(&s->work, NULL);
    unsigned want = cfg->bind || cfg->check ? (cfg->bind_workers ? cfg->bind_workers : BIND_WORKERS) : 0;
    s->workers = want ? calloc(want, sizeof(*s->workers)) : NULL;
    if (want && !s->workers) {
        snprintf(err, errlen, "out of memory");
        stop_workers(s);
        return NULL;
    }
    for (; s->n_workers < want; s->n_workers++) {
        int r = pthread_create(&s->workers[s->n_workers], NULL, bind_worker, s);
        if (r) {
            snprintf(err, errlen, "extender: bind workers: %s", strerror(r));
            stop_workers(s);
            return NULL;
        }
    }
#ifdef M_MMAP_THRESHOLD
    /* request bodies, their copies and answers of megabytes are mapped and unmapped, not left in the
     * heap: glibc's threshold otherwise rises to the largest freed, and what the process keeps
     * follows the largest requests callers sent */
    mallopt(M_MMAP_THRESHOLD, 256 << 10);
#endif
    struct httpd_config hc = {
        .what = "extender", .addr = cfg->addr, .max_body = cfg->max_body ? cfg->max_body : EX_ARGS_BODY_MAX,
        .handler = handle, .ctx = s, .tls = cfg->tls, .bodies_need_client = true
    };
    s->http = httpd_start(&hc, err, errlen);
    if (!s->http) {
        stop_workers(s);
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
    httpd_stop(s->http); /* after the binds in flight and queued are answered (or dropped) */
    stop_workers(s);
}
