/* utilization.c: per-pod GPU utilization (see utilization.h). */
#include "agent/utilization.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/guard_reconcile.h"
#include "agent/state.h"
#include "core/podutil.h"
#include "dra/dra.h"
#include "dra/slices.h"
#include "gpu/gpu.h"
#include "kubelet/drastate.h"
#include "kubelet/plugindir.h"
#include "util/log.h"
#include "util/util.h"

#define MAX_PIDS 256 /* processes per GPU and interval attributed; the rest are dropped */

/* Per GPU, on the main thread only: the sampling window and what was last said about the GPU. */
static struct {
    char uuid[GS_UUID_LEN]; /* the GPU the window is of ("" none yet) */
    struct gs_util_window w;
    int said;               /* the last error logged (0: none) */
} gpus[GS_MAX_GPUS];

/* Per GPU instance of a GPU in MIG mode: the last GPM sample and the MIG device it was for. */
static struct gi_state {
    struct gpu_gpm_sample *sample;
    char mig_uuid[GS_UUID_LEN];
    bool seen;              /* in this pass */
} gis[GS_MAX_GPUS][GS_MAX_GIS];

/* One GPU instance's interval. */
struct mig_interval {
    unsigned gpu;
    const char *uuid;
    const struct gs_mig_device *m;
    double ratio;
};

/* One GPU's interval, for the attribution under the shared lock. */
struct gpu_interval {
    unsigned gpu;
    const char *uuid;
    unsigned n;
    struct gs_proc_util pu[MAX_PIDS];
    struct gs_util_owner owners[MAX_PIDS];
};

/* The devices the kubelet's checkpoint assigns to pods by UID (those of our resources only). */
#define MAX_UID_DEVICES GS_METRICS_MAX_POD_DEVICES
struct uid_devices {
    const struct gs_plan *plan;
    struct gs_uid_device *d;
    unsigned n;
};

/* The pods the kubelet's DRA manager checkpoint gives devices of our driver, by GPU (instance). */
#define MAX_DRA_HOLDERS 256
#define MAX_POD_LOG_DIRS 16384 /* entries of the pod logs directory looked at */
struct dra_holders {
    const struct gs_inventory *inv;
    const char *driver;
    struct gs_dra_holder *h;
    unsigned n, dropped;
};

struct attribution {
    const struct gs_plan *plan;
    const struct gpu_interval *iv;
    unsigned n;
    const struct uid_devices *ck;
    const struct dra_holders *dra;
    const struct mig_interval *mig;
    unsigned n_mig;
};

static void attribute(struct gs_metrics_counters *c, void *ctx) {
    const struct attribution *at = ctx;
    c->n_pod_util = 0;
    for (unsigned i = 0; i < at->n; i++) {
        const struct gpu_interval *v = &at->iv[i];
        gs_podutil_attribute_dra(at->plan, c, v->gpu, v->uuid, v->pu, v->n, v->owners, v->n, at->ck->d, at->ck->n,
                                 at->dra->h, at->dra->n, c->pod_util, GS_METRICS_MAX_POD_UTIL, &c->n_pod_util);
    }
    for (unsigned i = 0; i < at->n_mig; i++) {
        const struct mig_interval *v = &at->mig[i];
        gs_podutil_attribute_mig_dra(at->plan, c, v->gpu, v->uuid, v->m, v->ratio, at->dra->h, at->dra->n,
                                     c->pod_util, GS_METRICS_MAX_POD_UTIL, &c->n_pod_util);
    }
}

/* GPU i in MIG mode: each GPU instance's GPM figure since the last pass, into mig[*n..). The
 * first MIG device of each instance names it. Returns 0 or the -errno of the first failure. */
static int sample_mig(struct agent *a, unsigned i, struct mig_interval *mig, unsigned *n) {
    const struct gs_gpu *g = &a->inv->gpus[i];
    int rc = 0;
    for (unsigned k = 0; k < g->n_mig && rc == 0; k++) {
        const struct gs_mig_device *m = &g->mig[k];
        bool first = true;
        for (unsigned j = 0; j < k && first; j++)
            first = g->mig[j].gi_id != m->gi_id;
        if (!first || m->gi_id >= GS_MAX_GIS)
            continue;
        struct gi_state *s = &gis[i][m->gi_id];
        s->seen = true;
        if (strcmp(s->mig_uuid, m->uuid) != 0) { /* another instance: start over */
            gpu_gpm_free(a->node, s->sample);
            s->sample = NULL;
            gs_strlcpy(s->mig_uuid, m->uuid, sizeof(s->mig_uuid));
        }
        double pct = 0;
        bool have = false;
        rc = gpu_gpm_mig_util(a->node, i, m->gi_id, &s->sample, &pct, &have);
        if (rc == 0 && have)
            mig[(*n)++] = (struct mig_interval){ i, g->uuid, m, pct / 100.0 };
    }
    return rc;
}

/* Forgets the GPM samples of GPU instances not seen in this pass. */
static void forget_gis(struct agent *a) {
    for (unsigned i = 0; i < GS_MAX_GPUS; i++)
        for (unsigned k = 0; k < GS_MAX_GIS; k++) {
            if (!gis[i][k].seen && (gis[i][k].sample || gis[i][k].mig_uuid[0])) {
                gpu_gpm_free(a->node, gis[i][k].sample);
                gis[i][k].sample = NULL;
                gis[i][k].mig_uuid[0] = '\0';
            }
            gis[i][k].seen = false;
        }
}

static unsigned long long realtime_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000;
}

/* Logs why GPU i has no figure once per cause. */
static void say(unsigned i, const char *uuid, int rc, unsigned n) {
    if (gpus[i].said == rc)
        return;
    gpus[i].said = rc;
    if (rc == -EOPNOTSUPP)
        log_info("GPU %u (%s): NVML has no per-process utilization (in MIG mode: no GPM, which needs Hopper or newer): "
                 "no per-pod utilization for it", i, uuid);
    else if (rc == -ENOBUFS)
        log_warn("GPU %u (%s): %u per-process utilization samples in one interval, more than %d: interval "
                 "dropped (shorten --pod-attribution-interval-ms)", i, uuid, n, GS_PODUTIL_MAX_SAMPLES);
    else
        log_warn("GPU %u (%s): reading its utilization samples: %s: no per-pod utilization for it", i, uuid,
                 strerror(-rc));
}

/* Whether PROC_ROOT/PID/cgroup places the process in a pod, and the pod's UID. */
static void cgroup_of(const char *proc_root, struct gs_util_owner *o) {
    char path[PATH_MAX];
    _cleanup_free_ char *text = NULL;
    if (snprintf(path, sizeof(path), "%s/%u/cgroup", proc_root, o->pid) >= (int)sizeof(path) ||
        gs_read_file(path, 1 << 16, &text, NULL) < 0)
        return;
    o->in_pod = gs_cgroup_in_pod(text);
    gs_cgroup_pod_uid(text, o->pod_uid);
}


static void add_uid_device(const char *uid, const char *container, const char *resource, const char *id, void *ctx) {
    struct uid_devices *u = ctx;
    const struct gs_resource *r = gs_plan_resource(u->plan, resource);
    if (u->n == MAX_UID_DEVICES || !r || !gs_resource_device(r, id))
        return;
    struct gs_uid_device *d = &u->d[u->n];
    if (gs_strlcpy(d->uid, uid, sizeof(d->uid)) < 0 || gs_strlcpy(d->container, container, sizeof(d->container)) < 0 ||
        gs_strlcpy(d->resource, resource, sizeof(d->resource)) < 0 || gs_strlcpy(d->device, id, sizeof(d->device)) < 0)
        return;
    u->n++;
}

static void read_checkpoint(struct agent *a, struct uid_devices *u) {
    static char said[256];
    char path[PATH_MAX], err[256] = "";
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    if (!a->o->kubelet_dir || snprintf(path, sizeof(path), "%s/" GS_KL_CHECKPOINT_NAME, a->o->kubelet_dir) >= (int)sizeof(path))
        return;
    int r = gs_read_file_ex(path, GS_KL_CHECKPOINT_MAX, 0, &text, &len, NULL, 0);
    if (r == 0 && gs_kl_checkpoint_pods(text, len, add_uid_device, u, err, sizeof(err)) < 0)
        r = -EINVAL;
    else if (r < 0 && r != -ENOENT)
        snprintf(err, sizeof(err), "%s", strerror(-r));
    if (err[0] && strcmp(err, said) != 0)
        log_warn("Per-pod utilization: the kubelet's checkpoint %s: %s (processes are attributed without it)", path,
                 err);
    gs_strlcpy(said, err, sizeof(said));
}

/* Logs msg for file once (until another one or none comes). */
static void say_file(char said[256], const char *what, const char *path, const char *msg) {
    if (msg[0] && strcmp(msg, said) != 0)
        log_warn("Per-pod utilization: %s %s: %s (processes of pods with DRA claims go to the no-pod series)", what,
                 path, msg);
    gs_strlcpy(said, msg, 256);
}

/* A device of the DRA checkpoint: a holder when it is of our driver and names a GPU (or a MIG
 * placement of a GPU instance that exists) of this node. */
static void add_dra_device(const struct gs_kl_dra_device *d, void *ctx) {
    struct dra_holders *u = ctx;
    struct gs_dra_device_ref ref;
    if (strcmp(d->driver, u->driver) != 0 || gs_dra_device_parse(d->device, &ref) < 0 || ref.gpu >= u->inv->n_gpus ||
        ref.gpu >= GS_MAX_GPUS || strlen(d->pod_uid) >= GS_POD_UID_MAX)
        return;
    int gi = -1;
    const struct gs_gpu *g = &u->inv->gpus[ref.gpu];
    for (unsigned k = 0; ref.mig && k < g->n_mig && gi < 0; k++)
        if (g->mig[k].gi_profile_id == ref.profile_id && g->mig[k].start == ref.start)
            gi = (int)g->mig[k].gi_id;
    if (ref.mig && gi < 0)
        return; /* not made (yet), or gone */
    for (unsigned i = 0; i < u->n; i++)
        if (u->h[i].gpu == ref.gpu && u->h[i].gi == gi && !strcmp(u->h[i].uid, d->pod_uid))
            return;
    if (u->n == MAX_DRA_HOLDERS) {
        u->dropped++;
        return;
    }
    struct gs_dra_holder *h = &u->h[u->n++];
    *h = (struct gs_dra_holder){ .gpu = ref.gpu, .gi = gi };
    gs_strlcpy(h->uid, d->pod_uid, sizeof(h->uid));
    gs_strlcpy(h->ns, d->ns, sizeof(h->ns));
}

/* The kubelet's root directory: the parent of its device-plugins directory (--kubelet-dir). */
static int kubelet_root(const char *dp_dir, char *buf, size_t len) {
    if (gs_strlcpy(buf, dp_dir, len) < 0)
        return -ENAMETOOLONG;
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    char *slash = strrchr(buf, '/');
    if (!slash)
        return gs_strlcpy(buf, ".", len);
    slash[slash == buf] = '\0';
    return 0;
}

static void read_dra_state(struct agent *a, struct dra_holders *u) {
    static char said[256];
    char path[PATH_MAX], err[256] = "";
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    if (!a->o->kubelet_dir || kubelet_root(a->o->kubelet_dir, path, sizeof(path)) < 0 ||
        strlen(path) + sizeof("/" GS_KL_DRA_STATE_NAME) > sizeof(path))
        return;
    strcat(path, "/" GS_KL_DRA_STATE_NAME);
    int r = gs_read_file_ex(path, GS_KL_DRA_STATE_MAX, 0, &text, &len, NULL, 0);
    if (r == 0 && gs_kl_dra_state_each(text, len, add_dra_device, u, err, sizeof(err)) < 0)
        u->n = 0;
    else if (r < 0 && r != -ENOENT)
        snprintf(err, sizeof(err), "%s", strerror(-r));
    else if (r == 0 && u->dropped)
        snprintf(err, sizeof(err), "more than %d pods' devices on this node's GPUs: %u left out", MAX_DRA_HOLDERS,
                 u->dropped);
    say_file(said, "the kubelet's DRA checkpoint", path, err);
}

/* The only container subdirectory of DIR/ENTRY into ctr ("" when there are none or several). */
static void only_container(const char *dir, const char *entry, char *ctr, size_t len) {
    char path[PATH_MAX];
    ctr[0] = '\0';
    if (snprintf(path, sizeof(path), "%s/%s", dir, entry) >= (int)sizeof(path))
        return;
    DIR *d = opendir(path);
    unsigned seen = 0;
    for (struct dirent *e; d && (e = readdir(d)) != NULL && seen < 2;) {
        if (e->d_name[0] == '.' || (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN))
            continue;
        if (++seen == 1 && gs_strlcpy(ctr, e->d_name, len) < 0)
            seen = 2;
    }
    if (d)
        closedir(d);
    if (seen != 1)
        ctr[0] = '\0';
}

/* Each holder's pod name (and its container, when the pod has one) from the kubelet's pod logs
 * directory; holders without one are dropped (their processes go to the no-pod series). */
static void name_dra_pods(struct agent *a, struct dra_holders *u) {
    static char said[256];
    const char *dir = a->o->pod_logs_dir ? a->o->pod_logs_dir : "/var/log/pods";
    char err[256] = "";
    DIR *d = u->n ? opendir(dir) : NULL;
    if (u->n && !d)
        snprintf(err, sizeof(err), "%s", strerror(errno));
    unsigned looked = 0;
    for (struct dirent *e; d && looked < MAX_POD_LOG_DIRS && (e = readdir(d)) != NULL; looked++) {
        char ns[64], pod[GS_KL_POD_NAME_MAX], uid[40];
        if (gs_kl_pod_log_dir_parse(e->d_name, ns, pod, uid) < 0)
            continue;
        char ctr[64] = "";
        bool listed = false;
        for (unsigned i = 0; i < u->n; i++) {
            struct gs_dra_holder *h = &u->h[i];
            if (strcmp(h->uid, uid) != 0 || strcmp(h->ns, ns) != 0 || gs_strlcpy(h->pod, pod, sizeof(h->pod)) < 0)
                continue;
            if (!listed)
                only_container(dir, e->d_name, ctr, sizeof(ctr));
            listed = true;
            gs_strlcpy(h->container, ctr, sizeof(h->container));
        }
    }
    if (d)
        closedir(d);
    unsigned k = 0;
    for (unsigned i = 0; i < u->n; i++) {
        if (u->h[i].pod[0])
            u->h[k++] = u->h[i];
        else if (!err[0])
            snprintf(err, sizeof(err), "no directory of pod %s (namespace %s)", u->h[i].uid, u->h[i].ns);
    }
    u->n = k;
    say_file(said, "the kubelet's pod logs directory", dir, err);
}

void agent_pod_util_job(void *ctx, uint64_t now_ns) {
    struct agent *a = ctx;
    (void)now_ns;
    if (!a->plan_valid || !a->inv)
        return;
    unsigned n_gpus = a->inv->n_gpus < GS_MAX_GPUS ? a->inv->n_gpus : GS_MAX_GPUS;
    struct gpu_interval *iv = n_gpus ? calloc(n_gpus, sizeof(*iv)) : NULL;
    struct gpu_util_sample *raw = malloc(GS_PODUTIL_MAX_SAMPLES * sizeof(*raw));
    struct gs_util_sample *smp = malloc(GS_PODUTIL_MAX_SAMPLES * sizeof(*smp));
    unsigned n_iv = 0, n_mig = 0;
    struct mig_interval *mig = n_gpus ? calloc((size_t)n_gpus * GS_MAX_MIG_DEVICES, sizeof(*mig)) : NULL;
    unsigned long long interval_us = (unsigned long long)a->o->pod_attribution_ms * 1000ULL;
    for (unsigned i = 0; iv && raw && smp && i < n_gpus; i++) {
        const struct gs_gpu *g = &a->inv->gpus[i];
        if (g->lost || g->error[0] || g->mig_current) {
            gpus[i].uuid[0] = '\0'; /* a fresh window when it is back */
            if (!g->lost && !g->error[0]) { /* MIG: no per-process utilization, GPM per GPU instance */
                int rc = mig ? sample_mig(a, i, mig, &n_mig) : -ENOMEM;
                if (rc < 0)
                    say(i, g->uuid, rc, 0);
                else
                    gpus[i].said = 0;
            }
            continue;
        }
        if (strcmp(gpus[i].uuid, g->uuid) != 0) {
            unsigned long long t = realtime_us();
            gs_strlcpy(gpus[i].uuid, g->uuid, sizeof(gpus[i].uuid));
            gs_util_window_init(&gpus[i].w, t > interval_us ? t - interval_us : 0);
            gpus[i].said = 0;
        }
        unsigned n = 0;
        int rc = gpu_process_util(a->node, i, gpus[i].w.last_seen_us, raw, GS_PODUTIL_MAX_SAMPLES, &n);
        unsigned long long now = realtime_us(); /* after the read: every period it returned is complete by now */
        if (rc == -ENOENT) /* no sample since: nothing ran */
            rc = 0, n = 0;
        if (rc < 0) {
            say(i, g->uuid, rc, n);
            if (rc == -ENOBUFS) /* skipped: the next interval starts now */
                gs_util_window_init(&gpus[i].w, now);
            continue;
        }
        if (gpus[i].said)
            log_info("GPU %u (%s): per-process utilization read again", i, g->uuid);
        gpus[i].said = 0;
        for (unsigned k = 0; k < n; k++)
            smp[k] = (struct gs_util_sample){ raw[k].pid, raw[k].sm, raw[k].ts_us };
        struct gpu_interval *v = &iv[n_iv++];
        v->gpu = i;
        v->uuid = g->uuid;
        v->n = gs_util_fold(&gpus[i].w, smp, n, now, v->pu, MAX_PIDS);
        for (unsigned k = 0; k < v->n; k++) {
            v->owners[k] = (struct gs_util_owner){ .pid = v->pu[k].pid };
            cgroup_of(a->o->proc_root, &v->owners[k]);
        }
        if (a->o->guard_root && a->o->guard_root[0])
            guard_region_owners(a->o->guard_root, a->o->proc_root, v->owners, v->n);
    }
    struct uid_devices ck = { &a->plan, n_iv ? calloc(MAX_UID_DEVICES, sizeof(*ck.d)) : NULL, 0 };
    if (ck.d)
        read_checkpoint(a, &ck);
    struct dra_holders dra = { a->inv, a->o->dra_driver ? a->o->dra_driver : DRA_DRIVER_DEFAULT,
                               a->o->dra && (n_iv || n_mig) ? calloc(MAX_DRA_HOLDERS, sizeof(*dra.h)) : NULL, 0, 0 };
    if (dra.h) {
        read_dra_state(a, &dra);
        name_dra_pods(a, &dra);
    }
    forget_gis(a);
    struct attribution at = { &a->plan, iv, n_iv, &ck, &dra, mig, n_mig };
    if ((iv || !n_gpus) && raw && smp) /* no GPU any more: no entry either */
        agent_shared_with_counters(&a->shared, attribute, &at);
    free(ck.d);
    free(dra.h);
    free(mig);
    free(iv);
    free(raw);
    free(smp);
}
