/* apisource.c: the model from the API server and the extender's Binding (apisource.h). The
 * parsing at the top is pure; the informers' callbacks below keep a cache of the GPU nodes and the
 * bound pods and change the model under its lock. */
#include "extender/apisource.h"

#include "extender/claims.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/log.h"
#include "util/quantity.h"
#include "util/util.h"

#define LABEL(k) "gpuslice.io/gpu." k
#define FRAC_LABEL(k) "gpuslice.io/gpu-memory." k
#define RECENT_BINDS 256
#define RECENT_NS (30ull * 1000000000ull) /* an extender bind not yet seen in a pod list is kept 30 s */

static int label_int(const json_t *labels, const char *key, long long lo, long long hi, long long dflt,
                     long long *out, const char *node, char *err, size_t errlen) {
    const char *v = json_string_value(json_object_get(labels, key));
    if (!v) {
        *out = dflt;
        return 0;
    }
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi) {
        snprintf(err, errlen, "node %s: label %s=%.40s: expected an integer in %lld..%lld", node, key, v, lo, hi);
        return -EINVAL;
    }
    *out = x;
    return 0;
}

int ex_node_from_json(const json_t *node, struct ex_node_spec *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    const json_t *md = json_object_get(node, "metadata");
    const json_t *labels = json_object_get(md, "labels");
    const char *name = json_string_value(json_object_get(md, "name"));
    if (!name || !name[0] || strlen(name) >= EX_NAME_MAX) {
        snprintf(err, errlen, "a Node without a name (or longer than %d)", EX_NAME_MAX - 1);
        return -EINVAL;
    }
    snprintf(out->name, sizeof(out->name), "%s", name);
    const json_t *alloc = json_object_get(json_object_get(node, "status"), "allocatable");
    const char *cpu = json_string_value(json_object_get(alloc, "cpu"));
    const char *memory = json_string_value(json_object_get(alloc, "memory"));
    int64_t milli, bytes;
    if (cpu && gs_quantity_parse(cpu, -3, 0, &milli) == 0 && milli >= 0)
        out->cpu = milli;
    if (memory && gs_quantity_parse(memory, 0, 0, &bytes) == 0 && bytes >= 0)
        out->mem = bytes / (1 << 20);
    /* fractional GPUs (gpuslice.io/gpu-memory.*: their replicas label counts GiB, not time-slicing),
     * else whole or time-sliced ones (gpuslice.io/gpu.*) */
    bool frac = json_object_get(labels, FRAC_LABEL("count")) != NULL;
    if (!frac && !json_object_get(labels, LABEL("count")))
        return 0;
    long long count, mem, rep = 0;
    int r;
    if ((r = label_int(labels, frac ? FRAC_LABEL("count") : LABEL("count"), 0, PL_MAX_GPUS, 0, &count, name, err,
                       errlen)) < 0 ||
        (r = label_int(labels, frac ? FRAC_LABEL("memory") : LABEL("memory"), 0, 1LL << 30, 0, &mem, name, err,
                       errlen)) < 0 ||
        (!frac && (r = label_int(labels, LABEL("replicas"), 0, 1000, 0, &rep, name, err, errlen)) < 0))
        return r;
    const char *product = json_string_value(json_object_get(labels, frac ? FRAC_LABEL("product") : LABEL("product")));
    snprintf(out->model, sizeof(out->model), "%s", product ? product : "");
    out->n_gpu = (int)count;
    out->gpu_mem_mib = mem;
    out->replicas = (int)rep;
    for (int g = 0; g < out->n_gpu; g++)
        out->gpu_free[g] = PL_MILLI;
    return out->n_gpu > 0;
}

int ex_gpu_index_parse(const char *s, struct pl_choice *ch) {
    ch->n_gpus = 0;
    for (const char *p = s;;) {
        char *end;
        errno = 0;
        long g = strtol(p, &end, 10);
        if (end == p || errno || g < 0 || g >= PL_MAX_GPUS || ch->n_gpus == PL_MAX_GPUS)
            return -EINVAL;
        ch->gpus[ch->n_gpus++] = (int)g;
        if (!*end)
            return 0;
        if (*end != ',')
            return -EINVAL;
        p = end + 1;
    }
}

json_t *ex_binding_json(const struct ex_bind_args *b, const struct pl_choice *ch) {
    json_t *md = json_pack("{s:s, s:s}", "name", b->name, "namespace", b->ns);
    if (md && b->uid[0])
        json_object_set_new(md, "uid", json_string(b->uid));
    if (md && ch->n_gpus > 0) {
        char idx[PL_MAX_GPUS * 4] = "";
        size_t o = 0;
        for (int k = 0; k < ch->n_gpus; k++)
            o += (size_t)snprintf(idx + o, sizeof(idx) - o, "%s%d", k ? "," : "", ch->gpus[k]);
        json_object_set_new(md, "annotations", json_pack("{s:s}", EX_ANN_GPU_INDEX, idx));
    }
    return json_pack("{s:s, s:s, s:o, s:{s:s, s:s, s:s}}", "apiVersion", "v1", "kind", "Binding", "metadata", md,
                     "target", "apiVersion", "v1", "kind", "Node", "name", b->node);
}

int ex_pod_bindable(const json_t *pod, const struct ex_bind_args *b, char *err, size_t errlen) {
    const json_t *md = json_object_get(pod, "metadata");
    const char *uid = json_string_value(json_object_get(md, "uid"));
    const char *node = json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName"));
    const char *phase = json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
    if (!json_is_object(pod) || !uid) {
        snprintf(err, errlen, "pod %s/%s: the API server's answer has no metadata.uid", b->ns, b->name);
        return -EBADMSG;
    }
    if (strcmp(uid, b->uid) != 0) {
        snprintf(err, errlen, "pod %s/%s: uid %s is not the API server's (%.64s): not bound", b->ns, b->name, b->uid,
                 uid);
        return -ESTALE;
    }
    if (node && node[0]) {
        snprintf(err, errlen, "pod %s/%s (uid %s): already bound to node %.253s: not bound again", b->ns, b->name,
                 b->uid, node);
        return -EEXIST;
    }
    if (json_object_get(md, "deletionTimestamp") && !json_is_null(json_object_get(md, "deletionTimestamp"))) {
        snprintf(err, errlen, "pod %s/%s (uid %s): being deleted: not bound", b->ns, b->name, b->uid);
        return -EPERM;
    }
    if (!phase || strcmp(phase, "Pending") != 0) {
        snprintf(err, errlen, "pod %s/%s (uid %s): status.phase %.32s, not Pending: not bound", b->ns, b->name, b->uid,
                 phase ? phase : "(none)");
        return -EPERM;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------- */

struct cached_pod {
    struct ex_pod pod;
    char node[EX_NAME_MAX];
    bool has_choice;
    struct pl_choice choice; /* from the annotation */
};

struct recent_bind {
    char uid[EX_UID_MAX];
    uint64_t at_ns;
};

struct ex_api {
    struct ex_api_config cfg;
    struct kube_informer *nodes_inf, *pods_inf, *slices_inf, *claims_inf, *tmpls_inf;
    /* the informers' caches: each informer's thread touches its own; all under cfg.lock. The
     * nodes are every Node (those without GPU labels may have DRA GPUs), the model has those
     * with GPUs. */
    struct ex_dra dra; /* the DRA driver's slices, claims and templates (claims.h); model->dra */
    char slices_sel[EX_DRA_DEV_MAX + 16];
    char slices_path[64], claims_path[64], tmpls_path[64];
    struct ex_node_spec *nodes;
    size_t n_nodes, cap_nodes;
    struct cached_pod *pods;
    size_t n_pods, cap_pods;
    struct recent_bind recent[RECENT_BINDS];
    size_t next_recent;
    bool nodes_listed, pods_listed, slices_listed;
    char nodes_path[64], pods_path[64];
};

static long find_pod(const struct ex_api *a, const char *uid) {
    for (size_t k = 0; k < a->n_pods; k++)
        if (strcmp(a->pods[k].pod.uid, uid) == 0)
            return (long)k;
    return -1;
}

/* the cached pod committed to the model (under the lock): its annotation's GPUs, else best fit */
static void commit_pod(struct ex_api *a, const struct cached_pod *cp) {
    struct ex_model *m = a->cfg.model;
    if (ex_find_bound(m, cp->pod.uid) || ex_model_find(m, cp->node) < 0)
        return;
    struct pl_choice ch;
    int r = -EINVAL;
    if (cp->has_choice) {
        ch = cp->choice;
        if ((r = ex_commit(m, &cp->pod, cp->node, &ch)) == 0)
            return;
    }
    if (!ex_pod_wants_gpu(&cp->pod)) {
        ex_commit_best_fit(m, &cp->pod, cp->node, &ch);
        return;
    }
    r = ex_commit_best_fit(m, &cp->pod, cp->node, &ch);
    char g[64] = "";
    for (int k = 0, o = 0; k < ch.n_gpus && r == 0; k++)
        o += snprintf(g + o, sizeof(g) - (size_t)o, "%s%d", k ? "," : "", ch.gpus[k]);
    if (r == 0)
        log_info("Extender: pod %s/%s on %s %s: counted on GPU %s, as the node's best fit would place it", cp->pod.ns,
                 cp->pod.name, cp->node, cp->has_choice ? "has a gpuslice.io/gpu-index that does not fit" :
                 "has no gpuslice.io/gpu-index annotation", g);
    else
        log_warn("Extender: pod %s/%s on %s: not counted (%s): its GPUs do not hold it in the model", cp->pod.ns,
                 cp->pod.name, cp->node, strerror(-r));
}

/* a pod object into *cp: 1 bound and not finished, 0 not bound or finished, -EINVAL */
static int pod_from_object(const json_t *o, struct cached_pod *cp) {
    char err[256];
    memset(cp, 0, sizeof(*cp));
    const char *phase = json_string_value(json_object_get(json_object_get(o, "status"), "phase"));
    const char *node = json_string_value(json_object_get(json_object_get(o, "spec"), "nodeName"));
    if (ex_pod_from_json(o, &cp->pod, err, sizeof(err)) < 0) {
        log_debug("Extender: %s", err);
        return -EINVAL;
    }
    if (!node || !node[0] || (phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed"))))
        return 0;
    snprintf(cp->node, sizeof(cp->node), "%s", node);
    const json_t *ann = json_object_get(json_object_get(o, "metadata"), "annotations");
    const char *idx = json_string_value(json_object_get(ann, EX_ANN_GPU_INDEX));
    cp->has_choice = idx && ex_gpu_index_parse(idx, &cp->choice) == 0;
    return 1;
}

static bool recently_bound(const struct ex_api *a, const char *uid, uint64_t now) {
    for (size_t k = 0; k < RECENT_BINDS; k++)
        if (a->recent[k].uid[0] && now - a->recent[k].at_ns < RECENT_NS && strcmp(a->recent[k].uid, uid) == 0)
            return true;
    return false;
}

static int pods_list(void *ctx, json_t *list) {
    struct ex_api *a = ctx;
    const json_t *items = json_object_get(list, "items");
    struct cached_pod *np = calloc(json_array_size(items) + 1, sizeof(*np));
    if (!np)
        return -ENOMEM;
    size_t n = 0, i;
    const json_t *o;
    json_array_foreach(items, i, o) n += pod_from_object(o, &np[n]) == 1;
    pthread_mutex_lock(a->cfg.lock);
    free(a->pods);
    a->pods = np;
    a->n_pods = a->cap_pods = n;
    struct ex_model *m = a->cfg.model;
    uint64_t now = gs_now_ns();
    for (size_t k = m->n_bound; k-- > 0;) { /* gone while the watch was down */
        char uid[EX_UID_MAX];
        snprintf(uid, sizeof(uid), "%s", m->bound[k].uid);
        if (find_pod(a, uid) < 0 && !recently_bound(a, uid, now))
            ex_release(m, uid);
    }
    for (size_t k = 0; k < n; k++)
        commit_pod(a, &a->pods[k]);
    if (!a->pods_listed)
        log_info("Extender: %zu bound pods from the API server", n);
    a->pods_listed = true;
    pthread_mutex_unlock(a->cfg.lock);
    return 0;
}

static int pods_event(void *ctx, enum kube_event_type type, json_t *o) {
    struct ex_api *a = ctx;
    struct cached_pod cp;
    int bound = pod_from_object(o, &cp);
    if (bound < 0)
        return 0;
    pthread_mutex_lock(a->cfg.lock);
    long k = find_pod(a, cp.pod.uid);
    const char *phase = json_string_value(json_object_get(json_object_get(o, "status"), "phase"));
    bool gone = type == KUBE_DELETED || (phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed")));
    if (gone) { /* its share given back, also an extender bind the watch never showed bound */
        if (k >= 0)
            a->pods[k] = a->pods[--a->n_pods];
        ex_release(a->cfg.model, cp.pod.uid);
    } else if (bound == 1 && k < 0 && ex_grow((void **)&a->pods, &a->cap_pods, a->n_pods + 1, sizeof(*a->pods), 64)) {
        a->pods[a->n_pods++] = cp;
        commit_pod(a, &cp);
    }
    pthread_mutex_unlock(a->cfg.lock);
    return 0;
}

/* the model rebuilt from the node cache (the nodes with GPUs: their labels' and, from the
 * slices, the DRA driver's), the cached pods committed again (under the lock) */
static void rebuild(struct ex_api *a) {
    char err[512];
    struct ex_node_spec *specs = malloc((a->n_nodes ? a->n_nodes : 1) * sizeof(*specs));
    if (!specs) {
        log_warn("Extender: the model from %zu Nodes: out of memory (the previous one is kept)", a->n_nodes);
        return;
    }
    size_t n = 0;
    for (size_t k = 0; k < a->n_nodes; k++) {
        specs[n] = a->nodes[k];
        n += ex_dra_apply_node(&a->dra, &specs[n]);
    }
    int r = ex_model_rebuild(a->cfg.model, specs, n, err, sizeof(err));
    free(specs);
    ex_model_note_nodes(a->cfg.model, a->n_nodes); /* with those without GPUs: a request's bound */
    a->cfg.model->dra = &a->dra;
    if (r < 0) {
        log_warn("Extender: the model from %zu Nodes: %s (the previous one is kept)", n, err);
        return;
    }
    for (size_t k = 0; k < a->n_pods; k++)
        commit_pod(a, &a->pods[k]);
}

static int nodes_list(void *ctx, json_t *list) {
    struct ex_api *a = ctx;
    const json_t *items = json_object_get(list, "items");
    struct ex_node_spec *nn = calloc(json_array_size(items) + 1, sizeof(*nn));
    if (!nn)
        return -ENOMEM;
    size_t n = 0, i;
    const json_t *o;
    char err[256];
    json_array_foreach(items, i, o) {
        int r = ex_node_from_json(o, &nn[n], err, sizeof(err));
        if (r < 0)
            log_warn("Extender: %s: the node is left out", err);
        n += r >= 0; /* one without GPU labels too: the DRA driver's slices may give it GPUs */
    }
    pthread_mutex_lock(a->cfg.lock);
    free(a->nodes);
    a->nodes = nn;
    a->n_nodes = a->cap_nodes = n;
    rebuild(a);
    if (!a->nodes_listed)
        log_info("Extender: %zu GPU nodes from the API server", a->cfg.model->c.n_nodes);
    a->nodes_listed = true;
    pthread_mutex_unlock(a->cfg.lock);
    return 0;
}

static int nodes_event(void *ctx, enum kube_event_type type, json_t *o) {
    struct ex_api *a = ctx;
    struct ex_node_spec s;
    char err[256];
    int r = ex_node_from_json(o, &s, err, sizeof(err));
    if (r < 0)
        log_warn("Extender: %s: the node is left out", err);
    if (!s.name[0])
        return 0;
    pthread_mutex_lock(a->cfg.lock);
    long k = -1;
    for (size_t i = 0; i < a->n_nodes && k < 0; i++)
        if (strcmp(a->nodes[i].name, s.name) == 0)
            k = (long)i;
    bool changed = false;
    if (type == KUBE_DELETED || r < 0) {
        if (k >= 0) {
            a->nodes[k] = a->nodes[--a->n_nodes];
            changed = true;
        }
    } else if (k >= 0) { /* a status heartbeat changes nothing here */
        changed = memcmp(&a->nodes[k], &s, sizeof(s)) != 0;
        a->nodes[k] = s;
    } else if (ex_grow((void **)&a->nodes, &a->cap_nodes, a->n_nodes + 1, sizeof(*a->nodes), 64)) {
        a->nodes[a->n_nodes++] = s;
        changed = true;
    }
    if (changed)
        rebuild(a);
    pthread_mutex_unlock(a->cfg.lock);
    return 0;
}

/* --- the DRA driver's ResourceSlices, and ResourceClaims and their templates (claims.h) --- */

/* whether the DRA GPUs of any cached node differ from masks (one per node, taken before) */
static bool dra_gpus_changed(const struct ex_api *a, const uint32_t *masks) {
    for (size_t k = 0; k < a->n_nodes; k++)
        if (ex_dra_gpus(&a->dra, a->nodes[k].name) != masks[k])
            return true;
    return false;
}

static int slices_list(void *ctx, json_t *list) {
    struct ex_api *a = ctx;
    const json_t *items = json_object_get(list, "items");
    struct ex_dra_slice *ns = calloc(json_array_size(items) + 1, sizeof(*ns));
    if (!ns)
        return -ENOMEM;
    size_t n = 0, i;
    const json_t *o;
    char err[512];
    json_array_foreach(items, i, o) {
        int r = ex_dra_slice_from_json(o, a->dra.driver, &ns[n], err, sizeof(err));
        if (r < 0)
            log_warn("Extender: %s: the slice is left out", err);
        n += r == 1;
    }
    pthread_mutex_lock(a->cfg.lock);
    int r = ex_dra_replace_slices(&a->dra, ns, n);
    free(ns); /* the array; the devices are the state's (or freed) */
    rebuild(a);
    if (r == 0 && !a->slices_listed)
        log_info("Extender: %zu ResourceSlices of %s from the API server", n, a->dra.driver);
    a->slices_listed = r == 0;
    pthread_mutex_unlock(a->cfg.lock);
    return r;
}

static int slices_event(void *ctx, enum kube_event_type type, json_t *o) {
    struct ex_api *a = ctx;
    struct ex_dra_slice s;
    char err[512];
    int r = ex_dra_slice_from_json(o, a->dra.driver, &s, err, sizeof(err));
    if (r < 0)
        log_warn("Extender: %s: the slice is left out", err);
    if (!s.name[0])
        return 0;
    pthread_mutex_lock(a->cfg.lock);
    uint32_t *masks = calloc(a->n_nodes + 1, sizeof(*masks));
    for (size_t k = 0; masks && k < a->n_nodes; k++)
        masks[k] = ex_dra_gpus(&a->dra, a->nodes[k].name);
    if (type == KUBE_DELETED || r <= 0) {
        if (r == 1)
            free(s.dev);
        ex_dra_del_slice(&a->dra, s.name);
    }
    else if (ex_dra_set_slice(&a->dra, &s) < 0)
        log_warn("Extender: ResourceSlice %s: out of memory", s.name);
    if (!masks || dra_gpus_changed(a, masks))
        rebuild(a); /* a GPU came to DRA or left it */
    free(masks);
    pthread_mutex_unlock(a->cfg.lock);
    return 0;
}

/* claims (tmpl false) or templates (tmpl true) */
static int claims_list_of(struct ex_api *a, json_t *list, bool tmpl) {
    const json_t *items = json_object_get(list, "items");
    struct ex_dra_claim *nc = calloc(json_array_size(items) + 1, sizeof(*nc));
    if (!nc)
        return -ENOMEM;
    size_t n = 0, i;
    const json_t *o;
    char err[512];
    json_array_foreach(items, i, o) {
        int r = ex_dra_claim_from_json(o, a->dra.driver, tmpl, &nc[n], err, sizeof(err));
        if (r < 0)
            log_debug("Extender: %s: not judged", err);
        n += r == 0;
    }
    pthread_mutex_lock(a->cfg.lock);
    int r = ex_dra_replace_claims(&a->dra, tmpl, nc, n);
    pthread_mutex_unlock(a->cfg.lock);
    free(nc);
    return r;
}

static int claims_event_of(struct ex_api *a, enum kube_event_type type, json_t *o, bool tmpl) {
    struct ex_dra_claim *c = malloc(sizeof(*c));
    if (!c)
        return -ENOMEM;
    char err[512];
    int r = ex_dra_claim_from_json(o, a->dra.driver, tmpl, c, err, sizeof(err));
    if (r < 0)
        log_debug("Extender: %s: not judged", err);
    pthread_mutex_lock(a->cfg.lock);
    if (c->name[0] && (type == KUBE_DELETED || r < 0))
        ex_dra_del_claim(&a->dra, tmpl, c->ns, c->name);
    else if (c->name[0] && ex_dra_set_claim(&a->dra, tmpl, c) < 0)
        log_warn("Extender: ResourceClaim %s/%s: out of memory", c->ns, c->name);
    pthread_mutex_unlock(a->cfg.lock);
    free(c);
    return 0;
}

static int claims_list(void *ctx, json_t *list) {
    return claims_list_of(ctx, list, false);
}
static int claims_event(void *ctx, enum kube_event_type type, json_t *o) {
    return claims_event_of(ctx, type, o, false);
}
static int tmpls_list(void *ctx, json_t *list) {
    return claims_list_of(ctx, list, true);
}
static int tmpls_event(void *ctx, enum kube_event_type type, json_t *o) {
    return claims_event_of(ctx, type, o, true);
}

static void on_error(void *ctx, int r, const char *msg) {
    (void)ctx;
    log_warn("Extender: the API server: %s (%s); listing again", msg, strerror(-r));
}

int ex_api_start(const struct ex_api_config *cfg, struct ex_api **out, char *err, size_t errlen) {
    struct ex_api *a = calloc(1, sizeof(*a));
    if (!a) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    a->cfg = *cfg;
    ex_dra_init(&a->dra, cfg->dra_driver);
    pthread_mutex_lock(cfg->lock);
    cfg->model->dra = &a->dra;
    pthread_mutex_unlock(cfg->lock);
    snprintf(a->slices_sel, sizeof(a->slices_sel), "spec.driver=%s", a->dra.driver);
    kube_path(a->slices_path, sizeof(a->slices_path), "resource.k8s.io/v1", NULL, "resourceslices", NULL);
    kube_path(a->claims_path, sizeof(a->claims_path), "resource.k8s.io/v1", NULL, "resourceclaims", NULL);
    kube_path(a->tmpls_path, sizeof(a->tmpls_path), "resource.k8s.io/v1", NULL, "resourceclaimtemplates", NULL);
    kube_path(a->nodes_path, sizeof(a->nodes_path), "v1", NULL, "nodes", NULL);
    kube_path(a->pods_path, sizeof(a->pods_path), "v1", NULL, "pods", NULL);
    struct kube_informer_ops nodes = { .path = a->nodes_path, .on_list = nodes_list, .on_event = nodes_event,
                                       .on_error = on_error, .ctx = a, .watch_timeout_s = 300 };
    struct kube_informer_ops pods = { .path = a->pods_path,
                                      .field_selector = "status.phase!=Succeeded,status.phase!=Failed",
                                      .on_list = pods_list, .on_event = pods_event, .on_error = on_error, .ctx = a,
                                      .watch_timeout_s = 300 };
    /* the DRA side: slices first, so that a node's DRA GPUs are known when its pods come */
    struct kube_informer_ops sl = { .path = a->slices_path, .field_selector = a->slices_sel, .on_list = slices_list,
                                    .on_event = slices_event, .on_error = on_error, .ctx = a, .watch_timeout_s = 300 };
    struct kube_informer_ops cl = { .path = a->claims_path, .on_list = claims_list, .on_event = claims_event,
                                    .on_error = on_error, .ctx = a, .watch_timeout_s = 300 };
    struct kube_informer_ops tl = { .path = a->tmpls_path, .on_list = tmpls_list, .on_event = tmpls_event,
                                    .on_error = on_error, .ctx = a, .watch_timeout_s = 300 };
    int r = kube_informer_start(cfg->client, &sl, &a->slices_inf, err, errlen);
    if (r == 0)
        r = kube_informer_start(cfg->client, &cl, &a->claims_inf, err, errlen);
    if (r == 0)
        r = kube_informer_start(cfg->client, &tl, &a->tmpls_inf, err, errlen);
    if (r == 0)
        r = kube_informer_start(cfg->client, &nodes, &a->nodes_inf, err, errlen);
    if (r == 0)
        r = kube_informer_start(cfg->client, &pods, &a->pods_inf, err, errlen);
    if (r < 0) {
        ex_api_stop(a);
        return r;
    }
    *out = a;
    return 0;
}

bool ex_api_synced(struct ex_api *a) {
    pthread_mutex_lock(a->cfg.lock);
    bool s = a->nodes_listed && a->pods_listed;
    pthread_mutex_unlock(a->cfg.lock);
    return s;
}

void ex_api_stop(struct ex_api *a) {
    if (!a)
        return;
    kube_informer_stop(a->pods_inf);
    kube_informer_stop(a->nodes_inf);
    kube_informer_stop(a->tmpls_inf);
    kube_informer_stop(a->claims_inf);
    kube_informer_stop(a->slices_inf);
    pthread_mutex_lock(a->cfg.lock);
    if (a->cfg.model->dra == &a->dra)
        a->cfg.model->dra = NULL;
    pthread_mutex_unlock(a->cfg.lock);
    ex_dra_free(&a->dra);
    free(a->nodes);
    free(a->pods);
    free(a);
}

static int pod_path(const struct ex_bind_args *b, char *path, size_t len, char *err, size_t errlen) {
    if (kube_path(path, len, "v1", b->ns, "pods", b->name) < 0 || strlen(path) + sizeof("/binding") > len) {
        snprintf(err, errlen, "pod %s/%s: name too long", b->ns, b->name);
        return -EINVAL;
    }
    return 0;
}

/* On the server's bind workers, before anything is committed: a read from the API server itself
 * (a GET without resourceVersion is served from storage, not a cache). */
int ex_api_check(void *ctx, const struct ex_bind_args *b, char *err, size_t errlen) {
    struct ex_api *a = ctx;
    char path[EX_NAME_MAX * 2 + 64];
    int r = pod_path(b, path, sizeof(path), err, errlen);
    if (r < 0)
        return r;
    json_t *pod = NULL;
    char why[1024];
    if ((r = kube_get(a->cfg.client, path, &pod, why, sizeof(why))) < 0) {
        snprintf(err, errlen, "pod %s/%s (uid %s): not bound: %s", b->ns, b->name, b->uid, why);
        return r;
    }
    r = ex_pod_bindable(pod, b, err, errlen);
    json_decref(pod);
    return r;
}

/* On the server's bind workers, several at once: the client is shared by threads (kube.h), the
 * recent binds are under the model's lock. */
int ex_api_bind(void *ctx, const struct ex_bind_args *b, const struct pl_choice *ch, char *err, size_t errlen) {
    struct ex_api *a = ctx;
    char path[EX_NAME_MAX * 2 + 64];
    int e = pod_path(b, path, sizeof(path), err, errlen);
    if (e < 0)
        return e;
    strcat(path, "/binding");
    json_t *obj = ex_binding_json(b, ch);
    if (!obj) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    if (b->uid[0]) {
        pthread_mutex_lock(a->cfg.lock);
        struct recent_bind *r = &a->recent[a->next_recent];
        a->next_recent = (a->next_recent + 1) % RECENT_BINDS;
        snprintf(r->uid, sizeof(r->uid), "%s", b->uid);
        r->at_ns = gs_now_ns();
        pthread_mutex_unlock(a->cfg.lock);
    }
    int r = kube_create(a->cfg.client, path, obj, NULL, err, errlen);
    json_decref(obj);
    return r;
}
