/* shared.c: the device plugins' handlers and the state they share with the main thread (see
 * shared.h). Allocate and GetPreferredAllocation run on the gRPC thread. */
#include "agent/shared.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../guard/guard_layout.h"
#include "agent/devrecord.h"
#include "cdi/cdi.h"
#include "cdi/nodespec.h"
#include "core/alloc.h"
#include "util/log.h"
#include "util/util.h"

void agent_shared_init(struct agent_shared *s, const struct agent_options *o) {
    s->o = o;
    memset(&s->frac, 0, sizeof(s->frac));
    atomic_init(&s->last_call_ns, 0);
    pthread_mutex_init(&s->lock, NULL);
}

void agent_shared_destroy(struct agent_shared *s) {
    free(s->cdi_spec);
    s->cdi_spec = NULL;
    free(s->cdi_names);
    s->cdi_names = NULL;
    frac_state_free(&s->frac);
    pthread_mutex_destroy(&s->lock);
}

/* ---- updates from the main thread ----------------------------------------------------------- */

const struct gs_policy *agent_shared_set_policy(struct agent_shared *s, const struct gs_policy *p) {
    pthread_mutex_lock(&s->lock);
    const struct gs_policy *old = s->policy;
    s->policy = p;
    pthread_mutex_unlock(&s->lock);
    return old;
}

#define CDI_NAME_KEY "\"name\": \""

static int cdi_name_cmp(const void *x, const void *y) {
    const struct agent_cdi_name *a = x, *b = y;
    int c = memcmp(a->name, b->name, a->len < b->len ? a->len : b->len);
    return c ? c : (a->len > b->len) - (a->len < b->len);
}

/* Every "name": "X" of the spec text, sorted: what cdi_check looks a device up in. NULL (and
 * *n = 0) for a text without names, or when out of memory (then nothing is found: Allocate answers
 * EAGAIN, as for a spec not written yet). */
static struct agent_cdi_name *cdi_index(const char *text, size_t *n) {
    size_t count = 0;
    for (const char *p = text; (p = strstr(p, CDI_NAME_KEY)); p += sizeof(CDI_NAME_KEY) - 1)
        count++;
    struct agent_cdi_name *names = count ? malloc(count * sizeof(*names)) : NULL;
    *n = 0;
    if (!names)
        return NULL;
    for (const char *p = text; (p = strstr(p, CDI_NAME_KEY));) {
        p += sizeof(CDI_NAME_KEY) - 1;
        const char *end = strchr(p, '"');
        if (!end)
            break;
        names[(*n)++] = (struct agent_cdi_name){ p, (size_t)(end - p) };
    }
    qsort(names, *n, sizeof(*names), cdi_name_cmp);
    return names;
}

void agent_shared_set_cdi(struct agent_shared *s, char *text, const char *err) {
    size_t n = 0;
    struct agent_cdi_name *names = text ? cdi_index(text, &n) : NULL; /* outside the lock */
    pthread_mutex_lock(&s->lock);
    gs_strlcpy(s->cdi_error, err ? err : "", sizeof(s->cdi_error));
    if (text) {
        free(s->cdi_spec);
        free(s->cdi_names);
        s->cdi_spec = text;
        s->cdi_names = names;
        s->n_cdi_names = n;
    }
    pthread_mutex_unlock(&s->lock);
}

bool agent_shared_cdi_is(struct agent_shared *s, const char *text) {
    pthread_mutex_lock(&s->lock);
    bool same = s->cdi_spec && !strcmp(s->cdi_spec, text);
    pthread_mutex_unlock(&s->lock);
    return same;
}

void agent_shared_count_xid(struct agent_shared *s, unsigned gpu) {
    pthread_mutex_lock(&s->lock);
    if (gpu < GS_MAX_GPUS)
        s->counters.xid_total[gpu]++;
    pthread_mutex_unlock(&s->lock);
}

void agent_shared_count_reload(struct agent_shared *s, bool ok) {
    pthread_mutex_lock(&s->lock);
    ok ? s->counters.policy_reloads++ : s->counters.policy_reload_errors++;
    pthread_mutex_unlock(&s->lock);
}

void agent_shared_count_reconcile_error(struct agent_shared *s) {
    pthread_mutex_lock(&s->lock);
    s->counters.reconcile_errors++;
    pthread_mutex_unlock(&s->lock);
}

void agent_shared_set_reconcile_seconds(struct agent_shared *s, double seconds) {
    pthread_mutex_lock(&s->lock);
    s->counters.reconcile_seconds = seconds;
    pthread_mutex_unlock(&s->lock);
}

void agent_shared_set_mps(struct agent_shared *s, const struct gs_mps_daemon_status *st, unsigned n) {
    pthread_mutex_lock(&s->lock);
    s->counters.n_mps = n < GS_METRICS_MAX_MPS ? n : GS_METRICS_MAX_MPS;
    memcpy(s->counters.mps, st, s->counters.n_mps * sizeof(*st));
    pthread_mutex_unlock(&s->lock);
}

size_t agent_shared_guard(struct agent_shared *s, struct gs_guard_usage *out) {
    pthread_mutex_lock(&s->lock);
    size_t n = s->counters.n_guard;
    memcpy(out, s->counters.guard, n * sizeof(*out));
    pthread_mutex_unlock(&s->lock);
    return n;
}

void agent_shared_set_guard(struct agent_shared *s, const struct gs_guard_usage *u, size_t n) {
    pthread_mutex_lock(&s->lock);
    s->counters.n_guard = (unsigned)(n < GS_METRICS_MAX_GUARD ? n : GS_METRICS_MAX_GUARD);
    memcpy(s->counters.guard, u, s->counters.n_guard * sizeof(*u));
    pthread_mutex_unlock(&s->lock);
}

void agent_shared_set_pods(struct agent_shared *s, bool known, const struct gs_pod_device *pd, unsigned n) {
    pthread_mutex_lock(&s->lock);
    s->counters.pods_known = known;
    s->counters.n_pod_devices = n < GS_METRICS_MAX_POD_DEVICES ? n : GS_METRICS_MAX_POD_DEVICES;
    if (s->counters.n_pod_devices) /* pd may be NULL when there are none */
        memcpy(s->counters.pod_devices, pd, s->counters.n_pod_devices * sizeof(*pd));
    pthread_mutex_unlock(&s->lock);
}

void agent_shared_with_counters(struct agent_shared *s, void (*fn)(struct gs_metrics_counters *c, void *ctx), void *ctx) {
    pthread_mutex_lock(&s->lock);
    fn(&s->counters, ctx);
    pthread_mutex_unlock(&s->lock);
}

int agent_shared_metrics(struct agent_shared *s, const struct gs_inventory *inv, const struct gs_plan *plan,
                         const struct gs_health *health, char *buf, size_t len) {
    pthread_mutex_lock(&s->lock);
    int n = gs_metrics_format(inv, plan, health, &s->counters, buf, len);
    pthread_mutex_unlock(&s->lock);
    return n;
}

/* ---- handlers called by the device plugins -------------------------------------------------- */

/* Allocate with a CDI strategy may only name devices the written spec has: a container created
 * from a name the runtime cannot resolve would fail later and less clearly. Looked up in the
 * spec's sorted names (agent_shared_set_cdi made them), not in its text. Under s->lock. */
static int cdi_check(const struct agent_shared *s, const struct gs_alloc_response *out, char *err, size_t errlen) {
    for (unsigned i = 0; i < out->n_cdi; i++) {
        struct agent_cdi_name key = { out->cdi[i], strlen(out->cdi[i]) };
        if (!s->n_cdi_names || !bsearch(&key, s->cdi_names, s->n_cdi_names, sizeof(key), cdi_name_cmp)) {
            snprintf(err, errlen, "device %s is not in the CDI spec yet (%s)", out->cdi[i],
                     s->cdi_error[0] ? s->cdi_error : "not written");
            return -EAGAIN;
        }
    }
    return 0;
}

/* The code the device plugin answers with (dp_handlers) for a failed write of the node's own
 * files: -ENOSPC or -EDQUOT for a full disk, -ENOMEM, else -EIO (an I/O failure of the node's,
 * never the request's fault). */
static int io_code(int r) {
    return r == -ENOSPC || r == -EDQUOT || r == -ENOMEM ? r : -EIO;
}

/* A failed write of the node's own files: "cannot VERB PATH: errno text", and io_code(r). */
static int io_failed(int r, const char *verb, const char *path, char *err, size_t errlen) {
    snprintf(err, errlen, "cannot %s %s: %s", verb, path, strerror(-r));
    return io_code(r);
}

/* The guard's files for one allocation (guard_layout.h): a limits file (read-only in the
 * container), a directory for the counters region (read-write), the devices record and the shared
 * /etc/ld.so.preload that loads the guard in every process of the container. They live as long as
 * the pod: the kubelet reuses this answer when the container restarts. The directory made is named
 * in dir (room: 200); when this fails, nothing of it is left. */
static int write_guard_files(const struct agent_shared *s, const struct gs_resource *res, const char *const *ids,
                             size_t n, struct gs_alloc_response *out, char *dir, char *err, size_t errlen);

static int inject_guard(const struct agent_shared *s, const struct gs_resource *res, const char *const *ids, size_t n,
                        struct gs_alloc_response *out, char *dir, char *err, size_t errlen) {
    static unsigned long long seq;
    if (dir[0]) /* a fractional container's second resource: the first one's files, rewritten */
        return write_guard_files(s, res, ids, n, out, dir, err, errlen);
    if (!s->o->guard_lib) {
        snprintf(err, errlen, "the resource has a VRAM quota but libgpuslice-guard.so was not found");
        return -ENOENT;
    }
    if (snprintf(dir, 200, "%s/a%llx-%llx", s->o->guard_root, (unsigned long long)time(NULL), ++seq) >= 200) {
        snprintf(err, errlen, "guard root %s is too long", s->o->guard_root);
        dir[0] = '\0';
        return -ENAMETOOLONG;
    }
    int r = write_guard_files(s, res, ids, n, out, dir, err, errlen);
    if (r < 0) {
        int rr = gs_guard_dir_remove(dir);
        if (rr < 0)
            log_warn("Cannot remove %s after a failed Allocate: %s", dir, strerror(-rr));
        dir[0] = '\0';
    }
    return r;
}

struct devices_record {
    const struct gs_resource *res;
    const char *const *ids;
    size_t n;
    bool failed; /* the record's own failure: its code is the answer's */
};

/* The allocation's devices record in the guard directory being made (gs_guard_fill_fn). */
static int write_record(const char *dir, void *ctx, char *err, size_t errlen) {
    struct devices_record *d = ctx;
    char path[256];
    int r = gs_guard_path(dir, GS_GUARD_DIR_DEVICES, path, sizeof(path));
    if (r == 0 && (r = agent_write_devices_record(path, d->res->name, d->ids, d->n)) == -ENOBUFS) {
        snprintf(err, errlen, "too many device IDs for the devices record %s", path);
        r = -E2BIG;
    } else if (r < 0) {
        r = io_failed(r, "write", path, err, errlen);
    }
    d->failed = r < 0;
    return r;
}

static int write_guard_files(const struct agent_shared *s, const struct gs_resource *res, const char *const *ids,
                             size_t n, struct gs_alloc_response *out, char *dir, char *err, size_t errlen) {
    _Static_assert(GS_ALLOC_MAX_GUARDED <= GS_GUARD_MAX_DEVICES, "a guarded GPU the limits cannot hold");
    struct gs_guard_row rows[GS_ALLOC_MAX_GUARDED];
    for (unsigned i = 0; i < out->n_guarded; i++)
        rows[i] = (struct gs_guard_row){ (int)out->guarded[i].ordinal, out->guarded[i].uuid, out->guarded[i].bytes,
                                         out->guarded[i].compute_pct, gs_arch_name(out->guarded[i].arch) };
    struct gs_guard_limits l;
    char text[4096];
    int len = gs_guard_limits_build(rows, out->n_guarded, GS_GUARD_REGION_IN_CONTAINER, &l);
    if (len == 0)
        len = gs_guard_limits_format(&l, text, sizeof(text));
    if (len < 0) {
        snprintf(err, errlen, "the guard's limits do not fit in %zu bytes", sizeof(text));
        return len;
    }
    struct devices_record rec = { res, ids, n, false };
    int r = gs_guard_dir_create(dir, text, (size_t)len, write_record, &rec, err, errlen);
    if (r < 0)
        return rec.failed ? r : io_code(r);
    char preload[256], host[256], state[256];
    if ((r = gs_guard_preload_ensure(s->o->guard_root, preload, sizeof(preload), err, errlen)) < 0)
        return io_code(r);
    gs_guard_path(dir, GS_GUARD_DIR_LIMITS, host, sizeof(host));
    gs_guard_path(dir, GS_GUARD_DIR_STATE, state, sizeof(state));
    if (gs_alloc_add_mount(out, GS_GUARD_LIB_IN_CONTAINER, s->o->guard_lib, true) < 0 ||
        gs_alloc_add_mount(out, GS_GUARD_CONF_IN_CONTAINER, host, true) < 0 ||
        gs_alloc_add_mount(out, GS_GUARD_STATE_IN_CONTAINER, state, false) < 0 ||
        gs_alloc_add_mount(out, GS_GUARD_PRELOAD_IN_CONTAINER, preload, true) < 0 ||
        gs_alloc_add_env(out, GS_GUARD_CONFIG_ENV, GS_GUARD_CONF_IN_CONTAINER) < 0) {
        snprintf(err, errlen, "the guard's mounts do not fit in the Allocate answer (paths too long?)");
        return -ENAMETOOLONG;
    }
    log_debug("Guard for %s: limits in %s", out->visible_devices, dir);
    return 0;
}

static bool file_exists(const char *path, void *ctx) {
    (void)ctx;
    return access(path, F_OK) == 0;
}

/* With a CDI strategy the per-container items (the guard's files, MPS's pipe, shared memory and
 * limits) go into a transient spec of their own, named in the answer beside the devices, instead
 * of the answer's mounts and environment (the runtime would otherwise mount them twice). */
static int cdi_transient(const struct agent_shared *s, const struct gs_resource *r, const char *const *ids, size_t n,
                         struct gs_alloc_response *out, char *err, size_t errlen) {
    static _Atomic unsigned long long seq;
    if (!out->n_cdi || (!out->n_extra_mounts && !out->n_envs) || !s->o->cdi_root || !s->o->cdi_root[0])
        return 0;
    if (out->n_cdi == GS_ALLOC_MAX_CDI) {
        snprintf(err, errlen, "more than %d CDI devices in one allocation", GS_ALLOC_MAX_CDI - 1);
        return -E2BIG;
    }
    const char *kind = s->o->cdi_kind ? s->o->cdi_kind : GS_CDI_KIND;
    char name[64], base[PATH_MAX], vc[GS_RESOURCE_NAME_MAX];
    snprintf(name, sizeof(name), "alloc-%llx-%llx", (unsigned long long)time(NULL), ++seq);
    gs_strlcpy(vc, kind, sizeof(vc));
    for (char *c = vc; *c; c++)
        if (*c == '/')
            *c = '-'; /* "nvidia.com/gpu" -> "nvidia.com-gpu", as CDI names spec files */
    if (snprintf(base, sizeof(base), "%s/%s_%s", s->o->cdi_root, vc, name) >= (int)sizeof(base) - 16) {
        snprintf(err, errlen, "CDI root %s is too long", s->o->cdi_root);
        return -ENAMETOOLONG;
    }
    char *text = NULL;
    int rc = gs_cdi_alloc_spec(kind, name, out, &text, err, errlen);
    if (rc < 0)
        return rc;
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s.devices", base); /* first: the record lets GC find the spec */
    if ((rc = agent_write_devices_record(path, r->name, ids, n)) < 0) {
        free(text);
        if (rc == -ENOBUFS) {
            snprintf(err, errlen, "too many device IDs for the devices record %s", path);
            return -E2BIG;
        }
        return io_failed(rc, "write", path, err, errlen);
    }
    char spec[PATH_MAX + 16];
    snprintf(spec, sizeof(spec), "%s.json", base);
    rc = gs_write_file_atomic(spec, text, strlen(text), false);
    free(text);
    if (rc < 0) {
        unlink(path); /* nothing left behind: the record without its spec */
        return io_failed(rc, "write", spec, err, errlen);
    }
    gs_strlcpy(path, spec, sizeof(path));
    gs_strlcpy(out->cdi[out->n_cdi++], name, sizeof(out->cdi[0]));
    out->n_extra_mounts = 0;
    out->n_envs = 0;
    log_debug("Allocate %s: per-container edits in the CDI spec %s", r->name, path);
    return 0;
}

/* ---- fractional GPUs (fractional.h) ---- */

/* The pod being admitted that asks for `size` units of r (the API server's; NULL: not known). A
 * lookup of the last 10 s that matches is reused (GetPreferredAllocation made it). */
static const struct frac_pod *frac_pod_lookup(struct agent_shared *s, const struct gs_resource *r, size_t size,
                                              struct frac_pod *p) {
    uint64_t now = gs_now_ns();
    pthread_mutex_lock(&s->lock);
    bool cached = s->frac.pod.uid[0] && now - s->frac.pod_t_ns < 10ULL * 1000000000ULL;
    for (unsigned c = 0; cached && c < s->frac.pod.n_containers; c++)
        if (s->frac.pod.c[c].units[r->fraction] == size)
            break;
        else if (c + 1 == s->frac.pod.n_containers)
            cached = false;
    for (unsigned k = 0; cached && k < s->frac.n_done && k < FRAC_DONE_PODS; k++)
        cached = strcmp(s->frac.done[k], s->frac.pod.uid) != 0; /* all its units allocated: another pod */
    *p = s->frac.pod;
    pthread_mutex_unlock(&s->lock);
    if (cached)
        return p;
    json_t *list = NULL;
    if (frac_list_pods(&s->frac, s->o, &list) < 0) /* the gRPC thread's client: outside the lock */
        return NULL;
    pthread_mutex_lock(&s->lock);
    size_t n_done = s->frac.n_done < FRAC_DONE_PODS ? s->frac.n_done : FRAC_DONE_PODS;
    int rc = frac_find_pod(list, r->fraction, size, (const char(*)[64])s->frac.done, n_done, p);
    if (rc == 0) {
        s->frac.pod = *p;
        s->frac.pod_t_ns = now;
    }
    pthread_mutex_unlock(&s->lock);
    json_decref(list);
    return rc == 0 ? p : NULL;
}

/* " for pod NS/NAME", or "" */
static const char *frac_who(const struct frac_pod *p, char *buf, size_t len) {
    if (p)
        snprintf(buf, len, " for pod %s/%s", p->ns, p->name);
    else
        buf[0] = '\0';
    return buf;
}

struct frac_alloc {
    const struct frac_pod *pod;
    struct frac_pod pod_copy;
    unsigned container, gpu;
    bool pair;
    unsigned long long mem_bytes;
    unsigned compute;
};

/* After gs_allocate: the units of one GPU, no whole GPUs beside them, and the guard's quota and
 * compute share of the container (with its other resource's, when this completes a pair: then
 * dir names the pair's guard files, which are rewritten). On error out is freed. */
static int frac_prepare(struct agent_shared *s, const struct gs_resource *r, const char *const *ids, size_t n,
                        struct gs_alloc_response *out, struct frac_alloc *fa, char *dir, char *err, size_t errlen) {
    memset(fa, 0, sizeof(*fa));
    int rc = frac_one_gpu(r, ids, n, &fa->gpu, err, errlen);
    const struct gs_device *d = gs_resource_device(r, ids[0]);
    fa->pod = rc == 0 ? frac_pod_lookup(s, r, n, &fa->pod_copy) : NULL;
    if (rc == 0 && fa->pod && fa->pod->whole) {
        snprintf(err, errlen, "pod %s/%s asks for %s together with whole GPUs (nvidia.com/gpu): a fraction of a GPU "
                 "and whole GPUs cannot be mixed in one pod (docs/fractional.md)", fa->pod->ns, fa->pod->name, r->name);
        rc = -EINVAL;
    }
    if (rc < 0) {
        gs_alloc_response_free(out);
        return rc;
    }
    pthread_mutex_lock(&s->lock);
    frac_assign(&s->frac, fa->pod, r->fraction, fa->gpu, gs_now_ns(), &fa->container, &fa->pair);
    if (fa->pair) {
        gs_strlcpy(dir, s->frac.guard_dir, 200);
        fa->mem_bytes = s->frac.mem_bytes;
        fa->compute = s->frac.compute;
    }
    pthread_mutex_unlock(&s->lock);
    if (r->fraction == GS_FRAC_MEMORY)
        fa->mem_bytes = (unsigned long long)n * GS_FRAC_MEMORY_UNIT;
    else
        fa->compute = (unsigned)(n > 100 ? 100 : n);
    if (!out->n_guarded) { /* compute units carry no quota: the guard's entry for the GPU */
        out->n_guarded = 1;
        memset(&out->guarded[0], 0, sizeof(out->guarded[0]));
        gs_strlcpy(out->guarded[0].uuid, d->uuid, sizeof(out->guarded[0].uuid));
        out->guarded[0].arch = d->arch;
    }
    out->guarded[0].bytes = fa->mem_bytes;
    out->guarded[0].compute_pct = fa->compute;
    char who[256];
    log_info("Allocate %s: %zu units of GPU %u%s (container %u%s): guard quota %llu MiB, compute %u%%", r->name, n,
             fa->gpu, frac_who(fa->pod, who, sizeof(who)), fa->container, fa->pair ? ", with its other resource" : "",
             fa->mem_bytes >> 20, fa->compute);
    return 0;
}

static int on_allocate(void *ctx, const struct gs_resource *r, const char *const *ids, size_t n,
                       struct gs_alloc_response *out, char *err, size_t errlen) {
    struct agent_shared *s = ctx;
    atomic_store(&s->last_call_ns, gs_now_ns());
    struct gs_mig_minors mm = { 0 };
    bool need_minors = false;
    pthread_mutex_lock(&s->lock);
    bool pass_specs = s->policy->pass_device_specs;
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n && pass_specs; i++) {
        const struct gs_device *d = gs_resource_device(r, ids[i]);
        need_minors |= d && (d->kind == GS_DEV_MIG || (d->kind == GS_DEV_MPS && d->mig));
    }
    if (need_minors) {
        int rr = gs_cdi_read_mig_minors(s->o->proc_root, &mm, err, errlen);
        if (rr < 0)
            return rr;
    }
    pthread_mutex_lock(&s->lock);
    int rc = gs_allocate(r, ids, n, s->policy, &mm, file_exists, NULL, out, err, errlen);
    pthread_mutex_unlock(&s->lock);
    gs_mig_minors_free(&mm);
    char guard_dir[200] = "";
    struct frac_alloc fa;
    if (rc == 0 && r->fraction)
        rc = frac_prepare(s, r, ids, n, out, &fa, guard_dir, err, errlen);
    bool shared_dir = guard_dir[0] != '\0'; /* the pair's: never removed here */
    if (rc == 0 && out->n_guarded && (rc = inject_guard(s, r, ids, n, out, guard_dir, err, errlen)) < 0)
        gs_alloc_response_free(out);
    if (rc == 0 && out->n_cdi) {
        pthread_mutex_lock(&s->lock);
        rc = cdi_check(s, out, err, errlen);
        pthread_mutex_unlock(&s->lock);
        if (rc == 0)
            rc = cdi_transient(s, r, ids, n, out, err, errlen);
        if (rc < 0) {
            gs_alloc_response_free(out);
            if (guard_dir[0] && !shared_dir) /* no answer names it: nothing left behind */
                gs_guard_dir_remove(guard_dir);
        }
    }
    for (unsigned i = 0; rc == 0 && i < out->n_cdi; i++) { /* "nvidia.com/gpu=GPU-..." */
        char q[sizeof(out->cdi[0])];
        gs_cdi_qualified(s->o->cdi_kind ? s->o->cdi_kind : GS_CDI_KIND, out->cdi[i], q, sizeof(q));
        gs_strlcpy(out->cdi[i], q, sizeof(out->cdi[i]));
    }
    pthread_mutex_lock(&s->lock);
    if (rc == 0 && r->fraction)
        frac_record(&s->frac, fa.pod, r->fraction, fa.container, fa.pair, fa.gpu, fa.mem_bytes, fa.compute, guard_dir,
                    gs_now_ns());
    gs_metrics_count_alloc(&s->counters, r->name, rc == 0);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* Request sizes per resource (under s->lock). */
static unsigned *size_hist(struct agent_shared *s, const char *resource) {
    for (unsigned i = 0; i < s->n_hist; i++)
        if (!strcmp(s->hist[i].resource, resource))
            return s->hist[i].count;
    if (s->n_hist == GS_PLAN_MAX_RESOURCES)
        return NULL;
    gs_strlcpy(s->hist[s->n_hist].resource, resource, sizeof(s->hist[0].resource));
    return s->hist[s->n_hist++].count;
}

static size_t on_preferred(void *ctx, const struct gs_resource *r, const char *const *avail, size_t n_avail,
                           const char *const *must, size_t n_must, size_t size, const char **out) {
    struct agent_shared *s = ctx;
    atomic_store(&s->last_call_ns, gs_now_ns());
    if (r->fraction) { /* one GPU: the pair's, else the extender's, else the best fit */
        struct frac_pod p;
        const struct frac_pod *pod = n_must ? NULL : frac_pod_lookup(s, r, size, &p);
        unsigned container;
        bool pair;
        pthread_mutex_lock(&s->lock);
        frac_assign(&s->frac, pod, r->fraction, s->frac.gpu, gs_now_ns(), &container, &pair);
        int want = pair ? (int)s->frac.gpu : pod ? pod->gpu_index : -1;
        pthread_mutex_unlock(&s->lock);
        size_t k = frac_preferred(r, avail, n_avail, must, n_must, size, want, out);
        char who[256];
        log_info("GetPreferredAllocation %s: %zu units%s, GPU %d wanted (%s): %s", r->name, size,
                 frac_who(pod, who, sizeof(who)), want,
                 pair ? "its other resource's" : pod && pod->gpu_index >= 0 ? "gpuslice.io/gpu-index" : "best fit",
                 k ? "chosen" : "no GPU holds them");
        return k;
    }
    pthread_mutex_lock(&s->lock);
    /* An MPS client talks to one daemon: replicas of one container come from one GPU. */
    enum gs_alloc_policy policy = r->mps ? GS_ALLOC_PACKED : s->policy->alloc_policy;
    /* The node's request sizes so far, the fragmentation policy's picture of its workload. */
    unsigned *hist = size_hist(s, r->name);
    unsigned h[GS_ALLOC_SIZE_HIST] = { 0 };
    if (hist) {
        if (size > 0)
            hist[size < GS_ALLOC_SIZE_HIST ? size : GS_ALLOC_SIZE_HIST - 1]++;
        memcpy(h, hist, sizeof(h));
    }
    pthread_mutex_unlock(&s->lock);
    return gs_preferred(r, avail, n_avail, must, n_must, size, policy, h, out);
}


struct dp_handlers agent_shared_handlers(struct agent_shared *s) {
    return (struct dp_handlers){ s, on_allocate, on_preferred };
}
