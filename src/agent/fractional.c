/* fractional.c: fractional units on one GPU (see fractional.h). Everything but frac_list_pods is
 * pure. */
#include "agent/fractional.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "kube/kube.h"
#include "util/log.h"
#include "util/quantity.h"
#include "util/util.h"

int frac_one_gpu(const struct gs_resource *r, const char *const *ids, size_t n, unsigned *gpu, char *err,
                 size_t errlen) {
    unsigned per[GS_MAX_GPUS] = { 0 }, first = GS_MAX_GPUS;
    for (size_t i = 0; i < n; i++) {
        const struct gs_device *d = gs_resource_device(r, ids[i]);
        if (!d || d->gpu >= GS_MAX_GPUS)
            continue; /* gs_allocate refuses unknown IDs */
        if (first == GS_MAX_GPUS)
            first = d->gpu;
        per[d->gpu]++;
    }
    char list[256] = "";
    size_t len = 0;
    unsigned gpus = 0;
    for (unsigned g = 0; g < GS_MAX_GPUS; g++) {
        if (!per[g])
            continue;
        gpus++;
        int k = snprintf(list + len, sizeof(list) - len, "%s%u (%u)", len ? ", " : "", g, per[g]);
        if (k > 0 && (size_t)k < sizeof(list) - len)
            len += (size_t)k;
    }
    if (gpus > 1) {
        snprintf(err, errlen,
                 "%s: the %zu units of one container must be of one GPU, these are of GPUs %s: no GPU of this node "
                 "has that much free (a container's fraction is of one GPU, docs/fractional.md)",
                 r->name, n, list);
        return -EXDEV;
    }
    *gpu = first == GS_MAX_GPUS ? 0 : first;
    return 0;
}

size_t frac_preferred(const struct gs_resource *r, const char *const *avail, size_t n_avail, const char *const *must,
                      size_t n_must, size_t size, int want_gpu, const char **out) {
    unsigned free_on[GS_MAX_GPUS] = { 0 };
    for (size_t i = 0; i < n_avail; i++) {
        const struct gs_device *d = gs_resource_device(r, avail[i]);
        if (d && d->gpu < GS_MAX_GPUS)
            free_on[d->gpu]++;
    }
    int pick = -1;
    if (n_must) {
        const struct gs_device *d = gs_resource_device(r, must[0]);
        pick = d && d->gpu < GS_MAX_GPUS && free_on[d->gpu] >= size ? (int)d->gpu : -1;
    } else if (want_gpu >= 0 && want_gpu < GS_MAX_GPUS && free_on[want_gpu] >= size) {
        pick = want_gpu;
    } else {
        for (unsigned g = 0; g < GS_MAX_GPUS; g++)
            if (free_on[g] >= size && (pick < 0 || free_on[g] < free_on[pick]))
                pick = (int)g;
    }
    if (pick < 0)
        return 0;
    size_t n = 0;
    for (size_t i = 0; i < n_must && n < size; i++)
        out[n++] = must[i];
    for (size_t i = 0; i < n_avail && n < size; i++) {
        const struct gs_device *d = gs_resource_device(r, avail[i]);
        bool taken = false;
        for (size_t k = 0; k < n_must && !taken; k++)
            taken = !strcmp(must[k], avail[i]);
        if (d && d->gpu == (unsigned)pick && !taken)
            out[n++] = avail[i];
    }
    return n;
}

/* ---- the pod being admitted ----------------------------------------------------------------- */

/* A whole extended-resource quantity in 1..2^30 ("10", "1k", or 10 as JSON: Kubernetes' syntax,
 * util/quantity.h); 0 for anything else. */
static unsigned quantity(const json_t *v) {
    if (json_is_integer(v))
        return json_integer_value(v) > 0 && json_integer_value(v) < 1 << 30 ? (unsigned)json_integer_value(v) : 0;
    int64_t x;
    const char *s = json_string_value(v);
    return s && gs_quantity_parse(s, 0, GS_QTY_EXACT, &x) == 0 && x >= 1 && x <= 1 << 30 ? (unsigned)x : 0;
}

/* requests, else limits (extended resources: the two are equal when both are given). */
static const json_t *request(const json_t *container, const char *name) {
    const json_t *res = json_object_get(container, "resources");
    const json_t *v = json_object_get(json_object_get(res, "requests"), name);
    return v ? v : json_object_get(json_object_get(res, "limits"), name);
}

/* "2024-05-01T10:00:00Z" to seconds (0 if it is not that). */
static long long timestamp(const char *s) {
    struct tm tm = { 0 };
    if (!s || !strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm))
        return 0;
    return (long long)timegm(&tm);
}

static bool started(const json_t *pod) {
    const json_t *st = json_object_get(pod, "status");
    const char *phase = json_string_value(json_object_get(st, "phase"));
    if (phase && strcmp(phase, "Pending") != 0)
        return true;
    static const char *const lists[] = { "containerStatuses", "initContainerStatuses" };
    for (size_t l = 0; l < 2; l++) {
        size_t i;
        const json_t *cs;
        json_array_foreach(json_object_get(st, lists[l]), i, cs) {
            const json_t *state = json_object_get(cs, "state");
            if (json_object_get(state, "running") || json_object_get(state, "terminated"))
                return true;
        }
    }
    return false;
}

static void pod_of(const json_t *pod, struct frac_pod *p) {
    memset(p, 0, sizeof(*p));
    const json_t *md = json_object_get(pod, "metadata"), *spec = json_object_get(pod, "spec");
    const char *s;
    gs_strlcpy(p->uid, (s = json_string_value(json_object_get(md, "uid"))) ? s : "", sizeof(p->uid));
    gs_strlcpy(p->ns, (s = json_string_value(json_object_get(md, "namespace"))) ? s : "", sizeof(p->ns));
    gs_strlcpy(p->name, (s = json_string_value(json_object_get(md, "name"))) ? s : "", sizeof(p->name));
    p->created = timestamp(json_string_value(json_object_get(md, "creationTimestamp")));
    p->gpu_index = -1;
    s = json_string_value(json_object_get(json_object_get(md, "annotations"), FRAC_GPU_INDEX_ANNOTATION));
    unsigned long long idx;
    char first[16] = "";
    if (s) {
        size_t l = strcspn(s, ",");
        snprintf(first, sizeof(first), "%.*s", (int)(l < sizeof(first) - 1 ? l : sizeof(first) - 1), s);
    }
    if (first[0] && gs_parse_uint(first, 0, GS_MAX_GPUS - 1, &idx) == 0)
        p->gpu_index = (int)idx;
    static const char *const lists[] = { "initContainers", "containers" };
    for (size_t l = 0; l < 2; l++) {
        size_t i;
        const json_t *c;
        json_array_foreach(json_object_get(spec, lists[l]), i, c) {
            if (request(c, "nvidia.com/gpu") || request(c, "nvidia.com/gpu.shared"))
                p->whole = true;
            unsigned m = quantity(request(c, GS_FRAC_MEMORY_RESOURCE)), k = quantity(request(c, GS_FRAC_COMPUTE_RESOURCE));
            if ((m || k) && p->n_containers < FRAC_MAX_CONTAINERS) {
                p->c[p->n_containers].units[GS_FRAC_MEMORY] = m;
                p->c[p->n_containers].units[GS_FRAC_COMPUTE] = k;
                p->n_containers++;
            }
        }
    }
}

int frac_find_pod(const json_t *list, enum gs_fraction kind, size_t size, const char (*done)[64], size_t n_done,
                  struct frac_pod *out) {
    bool found = false;
    size_t i;
    const json_t *pod;
    json_array_foreach(json_object_get(list, "items"), i, pod) {
        if (started(pod))
            continue;
        struct frac_pod p;
        pod_of(pod, &p);
        bool skip = !p.uid[0];
        for (size_t k = 0; k < n_done && !skip; k++)
            skip = !strcmp(done[k], p.uid);
        bool asks = false;
        for (unsigned c = 0; c < p.n_containers && !asks; c++)
            asks = p.c[c].units[kind] == size;
        if (skip || !asks)
            continue;
        if (found && (p.created > out->created ||
                      (p.created == out->created && strcmp(p.name, out->name) >= 0)))
            continue;
        *out = p;
        found = true;
    }
    return found ? 0 : -ENOENT;
}

void frac_assign(const struct frac_state *st, const struct frac_pod *p, enum gs_fraction kind, unsigned gpu,
                 uint64_t now_ns, unsigned *container, bool *pair) {
    *container = 0;
    *pair = false;
    bool fresh = st->open && now_ns - st->t_ns < FRAC_PAIR_WINDOW_NS && !st->have[kind];
    if (!p || !p->uid[0]) { /* no pod: the other resource's allocation just before, on this GPU */
        *pair = fresh && !st->uid[0] && st->gpu == gpu;
        return;
    }
    bool same = !strcmp(st->uid, p->uid);
    if (same && fresh && st->need[kind]) {
        *container = st->container;
        *pair = true;
        return;
    }
    unsigned from = same ? st->container + 1 : 0;
    for (unsigned c = from; c < p->n_containers; c++) {
        if (p->c[c].units[kind]) {
            *container = c;
            return;
        }
    }
    for (unsigned c = 0; c < p->n_containers; c++) { /* a restart of the pod's admission */
        if (p->c[c].units[kind]) {
            *container = c;
            return;
        }
    }
}

void frac_record(struct frac_state *st, const struct frac_pod *p, enum gs_fraction kind, unsigned container, bool pair,
                 unsigned gpu, unsigned long long mem_bytes, unsigned compute, const char *guard_dir,
                 uint64_t now_ns) {
    if (!pair) {
        st->open = true;
        gs_strlcpy(st->uid, p ? p->uid : "", sizeof(st->uid));
        st->container = container;
        memset(st->have, 0, sizeof(st->have));
        memset(st->need, 0, sizeof(st->need));
        bool known = p && p->uid[0] && container < p->n_containers;
        for (int k = GS_FRAC_MEMORY; k <= GS_FRAC_COMPUTE; k++)
            st->need[k] = known ? p->c[container].units[k] > 0 : true;
        st->gpu = gpu;
        st->mem_bytes = st->compute = 0;
        gs_strlcpy(st->guard_dir, guard_dir ? guard_dir : "", sizeof(st->guard_dir));
    }
    st->have[kind] = true;
    st->t_ns = now_ns;
    if (kind == GS_FRAC_MEMORY)
        st->mem_bytes = mem_bytes;
    else
        st->compute = compute;
    bool complete = (!st->need[GS_FRAC_MEMORY] || st->have[GS_FRAC_MEMORY]) &&
                    (!st->need[GS_FRAC_COMPUTE] || st->have[GS_FRAC_COMPUTE]);
    if (complete)
        st->open = false;
    if (!complete || !p || !p->uid[0])
        return;
    for (unsigned c = container + 1; c < p->n_containers; c++)
        if (p->c[c].units[GS_FRAC_MEMORY] || p->c[c].units[GS_FRAC_COMPUTE])
            return; /* more containers to come */
    gs_strlcpy(st->done[st->n_done % FRAC_DONE_PODS], p->uid, sizeof(st->done[0]));
    st->n_done++;
}

/* ---- the API server ------------------------------------------------------------------------- */

int frac_list_pods(struct frac_state *st, const struct agent_options *o, json_t **list) {
    char err[512];
    if (!st->kube_tried) {
        st->kube_tried = true;
        if (gs_node_name(o->node_name, st->node, sizeof(st->node), NULL, err, sizeof(err)) < 0)
            log_warn("Fractional GPUs: no Node name (%s): the extender's GPU is not known", err);
        if (!o->kubeconfig && !getenv("KUBERNETES_SERVICE_HOST")) {
            log_info("Fractional GPUs: no --kubeconfig and not in a cluster: the extender's GPU is not known, a "
                     "container's memory and compute are paired by time (docs/fractional.md)");
        } else {
            struct kube_limits lim = KUBE_DEFAULT_LIMITS;
            lim.connect_timeout_ms = 2000;
            lim.timeout_ms = 3000;
            lim.max_response = (size_t)16 << 20;
            int r = kube_client_open(o->kubeconfig, NULL, &lim, &st->kube, err, sizeof(err));
            if (r < 0)
                log_warn("Fractional GPUs: no API access (%s): the extender's GPU is not known", err);
        }
    }
    if (!st->kube || !st->node[0])
        return -ENOTCONN;
    char sel[300];
    snprintf(sel, sizeof(sel), "spec.nodeName=%s", st->node);
    struct kube_list_opts lo = { .field_selector = sel };
    int r = kube_list_all(st->kube, "/api/v1/pods", &lo, list, err, sizeof(err));
    if (r < 0)
        log_warn("Fractional GPUs: cannot list the node's pods: %s", err);
    return r;
}

void frac_state_free(struct frac_state *st) {
    kube_client_free(st->kube);
    st->kube = NULL;
}
