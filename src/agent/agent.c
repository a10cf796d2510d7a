/* agent.c: the node agent's event loop (see agent.h).
 *
 * Three threads: the main one waits in epoll on a signalfd, an inotify fd (kubelet directory and
 * the policy file's directory), a timerfd (the inventory poll) and a pipe fed by the NVML event
 * thread, whose only job is to block in nvmlEventSetWait and forward Xid events; the device
 * plugins' gRPC thread answers the kubelet. The policy is shared with the gRPC handlers under
 * `lock`; the main thread never holds it while calling into the device plugins. */
#include "agent/agent.h"

#include <errno.h>
#include <malloc.h>
#include <fcntl.h>
#include <jansson.h>
#include <time.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/labels.h"
#include "core/metrics.h"
#include "agent/metrics_http.h"
#include "kubelet/deviceplugin.h"
#include "kubelet/podresources.h"
#include <dirent.h>
#include <sys/stat.h>
#include "mig/migapply.h"
#include "../guard/guard_limits.h"
#include "agent/guard_reconcile.h"
#include "cdi/cdi.h"
#include "gpu/nvml_types.h"
#include "mps/mps.h"
#include "util/log.h"
#include "util/util.h"

struct agent {
    pthread_mutex_t lock;          /* policy, as read by the gRPC handlers */
    const struct agent_options *o;
    struct gpu_node *node;
    struct gs_policy policy;
    unsigned long long policy_hash;
    struct gs_inventory *inv;
    struct gs_health health;
    unsigned long long last_xid_ns[GS_MAX_GPUS];
    unsigned long long last_xid[GS_MAX_GPUS];
    struct gs_plan plan;
    bool plan_valid;
    struct dp_manager *dp;
    int epfd, sigfd, inofd, timerfd, pipe_rd, pipe_wr;
    int kubelet_wd, config_wd;
    char config_dir[PATH_MAX], config_base[NAME_MAX + 1];
    struct gpu_events *events;
    pthread_t event_thread;
    atomic_bool stop;
    bool event_thread_started;
    unsigned long long last_gc_ns;
    unsigned long long last_guard_reconcile_ns;
    unsigned long long last_attribution_ns;
    char attribution_error[256];   /* why PodResources could not be asked, as last logged */
    char mig_state[16];           /* state of the policy's MIG layout, "" before the first try */
    char *labels;                 /* the features file as last written */
    struct gs_metrics_counters counters; /* under lock (Allocate counts come from the gRPC thread) */
    struct metrics_http *metrics;
    struct gs_mps_sup *mps;        /* MPS control daemons (src/mps), for the policy's MPS root */
    char mps_root[256];
    bool mps_stale_checked;        /* daemons left by an earlier agent stopped once */
    int cm_saved[GS_MAX_GPUS];     /* compute mode + 1 before the agent set EXCLUSIVE_PROCESS (0: untouched) */
    unsigned n_hist;               /* request sizes seen per resource (GetPreferredAllocation), under lock */
    struct {
        char resource[GS_RESOURCE_NAME_MAX];
        unsigned count[GS_ALLOC_SIZE_HIST];
    } hist[GS_PLAN_MAX_RESOURCES];
    char *cdi_spec;                /* the CDI spec as last written */
    char cdi_error[256];           /* why it could not be written, as last logged */
    char *metrics_text;            /* publish_metrics' buffer, metrics_cap bytes */
    size_t metrics_cap;
    atomic_ullong last_call_ns;    /* when the last Allocate or GetPreferredAllocation began */
    unsigned long long trim_last_ns; /* trim_when_quiet */
    int metrics_err;               /* publish_metrics' last error (logged once per cause) */
};

/* ---- inventory ------------------------------------------------------------------------------ */

static int read_numa(const char *sysfs_root, const char *bus_id) {
    unsigned dom, bus, dev, fn;
    if (sscanf(bus_id, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4)
        return -1;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/bus/pci/devices/%04x:%02x:%02x.%x/numa_node", sysfs_root, dom, bus, dev, fn);
    _cleanup_free_ char *text = NULL;
    if (gs_read_file(path, 64, &text, NULL) < 0)
        return -1;
    char *end;
    long v = strtol(text, &end, 10);
    if (end == text || v < 0 || v > 1024)
        return -1;
    return (int)v;
}

int agent_read_inventory(struct gpu_node *node, const char *sysfs_root, struct gs_inventory *inv) {
    int r = gpu_inventory_read(node, inv);
    if (r < 0)
        return r;
    for (unsigned i = 0; i < inv->n_gpus; i++)
        if (inv->gpus[i].bus_id[0])
            inv->gpus[i].numa_node = read_numa(sysfs_root ? sysfs_root : "/sys", inv->gpus[i].bus_id);
    return 0;
}

/* A GPU that stops answering keeps its identity from the last good read, marked lost, so its
 * devices stay listed (as Unhealthy) instead of vanishing from the kubelet's view. */
static void merge_lost(struct gs_inventory *fresh, const struct gs_inventory *prev) {
    for (unsigned i = 0; i < fresh->n_gpus && prev && i < prev->n_gpus; i++) {
        struct gs_gpu *g = &fresh->gpus[i];
        if (g->uuid[0] || !prev->gpus[i].uuid[0])
            continue;
        bool lost = g->lost;
        char error[sizeof(g->error)];
        memcpy(error, g->error, sizeof(error));
        *g = prev->gpus[i];
        g->lost = lost || g->lost;
        memcpy(g->error, error, sizeof(error));
        if (!g->lost && !g->error[0])
            snprintf(g->error, sizeof(g->error), "unreadable");
    }
}

/* ---- plan ----------------------------------------------------------------------------------- */

static void log_plan_changes(struct agent *a, const struct gs_plan *old, const struct gs_plan *new) {
    for (unsigned i = 0; i < new->n_resources; i++) {
        const struct gs_resource *r = &new->resources[i];
        const struct gs_resource *o = old ? gs_plan_resource(old, r->name) : NULL;
        unsigned healthy = 0;
        for (unsigned k = 0; k < r->n_devices; k++)
            healthy += r->devices[k].healthy;
        if (!o || !gs_resource_equal(o, r))
            log_info("Advertising %s: %u devices, %u healthy", r->name, r->n_devices, healthy);
    }
    for (unsigned i = 0; old && i < old->n_resources; i++)
        if (!gs_plan_resource(new, old->resources[i].name))
            log_info("Withdrawing %s", old->resources[i].name);
    (void)a;
}

static void write_labels(struct agent *a);

/* ---- CDI ----------------------------------------------------------------------------------- */

static void set_cdi_error(struct agent *a, const char *err) {
    pthread_mutex_lock(&a->lock); /* read by Allocate */
    gs_strlcpy(a->cdi_error, err, sizeof(a->cdi_error));
    pthread_mutex_unlock(&a->lock);
}

/* Writes the node's CDI spec (CDI_ROOT/gpuslice.json, atomically) when it changed. It names every
 * GPU and MIG device of the inventory, so it is written before the plan that advertises them is
 * served. It stays when the agent stops: running containers were created from it. */
static void write_cdi_spec(struct agent *a) {
    if (!a->o->cdi_root || !a->o->cdi_root[0])
        return;
    char *text = NULL, err[512];
    unsigned n_files = 0;
    const char *read_root = a->o->container_driver_root && a->o->container_driver_root[0] ? a->o->container_driver_root
                            : a->policy.container_driver_root[0]                          ? a->policy.container_driver_root
                                                                                          : a->policy.driver_root;
    int r = agent_cdi_spec(a->inv, a->o->proc_root, a->policy.driver_root, read_root,
                           a->o->cdi_kind ? a->o->cdi_kind : GS_CDI_KIND, &text, &n_files, err, sizeof(err));
    if (r < 0) {
        if (strcmp(err, a->cdi_error) != 0)
            log_warn("CDI spec not written: %s", err);
        set_cdi_error(a, err);
        return;
    }
    bool was_failing = a->cdi_error[0] != '\0';
    set_cdi_error(a, "");
    if (a->cdi_spec && !strcmp(a->cdi_spec, text)) {
        free(text);
        return;
    }
    if (was_failing)
        log_info("CDI spec can be written again");
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/gpuslice.json", a->o->cdi_root);
    if ((r = gs_mkdir_p(a->o->cdi_root, 0755)) < 0 || (r = gs_write_file_atomic(path, text, strlen(text), false)) < 0) {
        snprintf(err, sizeof(err), "cannot write %.300s: %s", path, strerror(-r));
        log_error("CDI spec not written: %s", err);
        set_cdi_error(a, err);
        free(text);
        return;
    }
    if (!a->cdi_spec)
        log_info("CDI spec written to %s (%u driver files from %s, read at %s)", path, n_files, a->policy.driver_root,
                 read_root);
    pthread_mutex_lock(&a->lock); /* read by Allocate */
    free(a->cdi_spec);
    a->cdi_spec = text;
    pthread_mutex_unlock(&a->lock);
}

/* Allocate with a CDI strategy may only name devices the written spec has: a container created
 * from a name the runtime cannot resolve would fail later and less clearly. Under a->lock. */
static int cdi_check(const struct agent *a, const struct gs_alloc_response *out, char *err, size_t errlen) {
    for (unsigned i = 0; i < out->n_cdi; i++) {
        char needle[sizeof(out->cdi[0]) + 16];
        snprintf(needle, sizeof(needle), "\"name\": \"%s\"", out->cdi[i]);
        if (!a->cdi_spec || !strstr(a->cdi_spec, needle)) {
            snprintf(err, errlen, "device %s is not in the CDI spec yet (%s)", out->cdi[i],
                     a->cdi_error[0] ? a->cdi_error : "not written");
            return -EAGAIN;
        }
    }
    return 0;
}

/* ---- MPS ----------------------------------------------------------------------------------- */

static int replan(struct agent *a, bool log_warnings);

/* A supervisor for the policy's MPS root (a new one when the root changed: the old one's daemons
 * are stopped). */
static int mps_supervisor(struct agent *a) {
    if (a->mps && !strcmp(a->mps_root, a->policy.mps_root))
        return 0;
    if (a->mps) {
        log_info("MPS root changed from %s to %s: stopping the daemons under the old one", a->mps_root,
                 a->policy.mps_root);
        epoll_ctl(a->epfd, EPOLL_CTL_DEL, gs_mps_sup_fd(a->mps), NULL);
        gs_mps_sup_stop_all(a->mps);
        gs_mps_sup_free(a->mps);
        a->mps = NULL;
        a->mps_stale_checked = false;
    }
    struct gs_mps_opts opts = { .root = a->policy.mps_root, .control = a->o->mps_control };
    int r = gs_mps_sup_new(&opts, &a->mps);
    if (r < 0) {
        log_error("MPS: cannot supervise daemons under %s: %s", a->policy.mps_root, strerror(-r));
        return r;
    }
    gs_strlcpy(a->mps_root, a->policy.mps_root, sizeof(a->mps_root));
    struct epoll_event ev = { .events = EPOLLIN, .data.fd = gs_mps_sup_fd(a->mps) };
    if (a->epfd >= 0 && ev.data.fd >= 0)
        epoll_ctl(a->epfd, EPOLL_CTL_ADD, ev.data.fd, &ev);
    return 0;
}

/* The daemons the plan needs, one per GPU or MIG instance with MPS replicas. With
 * failRequestsGreaterThanOne (the default) every container holds one replica, so the daemon's
 * defaults are one replica's share: a client that drops the variables still gets no more. When
 * a container may hold several replicas its share is only in its environment (a client can
 * lower the daemon's percentage, not raise it), and the daemon keeps 100 % and no memory limit. */
static size_t mps_wanted(const struct gs_plan *plan, struct gs_mps_gpu *out, size_t max) {
    size_t n = 0;
    for (unsigned i = 0; i < plan->n_resources; i++) {
        const struct gs_resource *r = &plan->resources[i];
        for (unsigned k = 0; r->mps && k < r->n_devices; k++) {
            const struct gs_device *d = &r->devices[k];
            bool seen = false;
            for (size_t j = 0; j < n && !seen; j++)
                seen = !strcmp(out[j].uuid, d->uuid);
            if (seen || n == max)
                continue;
            struct gs_mps_gpu *g = &out[n++];
            memset(g, 0, sizeof(*g));
            gs_strlcpy(g->uuid, d->uuid, sizeof(g->uuid));
            if (r->fail_gt_one) {
                g->thread_percentage = d->mps_percent;
                g->pinned_mem_limit = d->mps_pinned;
            }
        }
    }
    return n;
}

static void mps_publish(struct agent *a, const struct gs_mps_gpu *gpus, size_t n) {
    pthread_mutex_lock(&a->lock);
    a->counters.n_mps = 0;
    for (size_t i = 0; i < n && i < GS_METRICS_MAX_MPS; i++) {
        struct gs_mps_info info;
        if (gs_mps_sup_info(a->mps, gpus[i].uuid, &info) < 0)
            continue;
        struct gs_mps_daemon_status *st = &a->counters.mps[a->counters.n_mps++];
        gs_strlcpy(st->uuid, gpus[i].uuid, sizeof(st->uuid));
        gs_strlcpy(st->state, gs_mps_state_name(info.state), sizeof(st->state));
        st->restarts = info.restarts;
    }
    pthread_mutex_unlock(&a->lock);
}

/* Compute modes: left as they are, unless the policy asks for EXCLUSIVE_PROCESS on MPS GPUs
 * (gpuslice.mps.exclusiveProcess: only MPS clients may then use the GPU). A GPU the agent changed
 * gets its previous mode back when it stops being served by MPS, or when the agent stops. */
static void set_compute_mode(struct agent *a, unsigned gpu, unsigned mode, const char *why) {
    if (gpu_set_compute_mode(a->node, gpu, mode) < 0) {
        log_error("GPU %u: compute mode not set to %u (%s): %s", gpu, mode, why, gpu_node_error(a->node));
        return;
    }
    log_info("GPU %u: compute mode set to %s (%s)", gpu, mode == NVML_COMPUTEMODE_EXCLUSIVE_PROCESS ? "EXCLUSIVE_PROCESS"
                                                           : mode == NVML_COMPUTEMODE_DEFAULT         ? "DEFAULT"
                                                                                                      : "its previous mode",
             why);
    if (a->inv && gpu < a->inv->n_gpus)
        a->inv->gpus[gpu].compute_mode = (int)mode;
}

static void mps_compute_modes(struct agent *a, const struct gs_plan *next) {
    bool want[GS_MAX_GPUS] = { false };
    for (unsigned i = 0; a->policy.mps_exclusive_process && i < next->n_resources; i++) {
        const struct gs_resource *r = &next->resources[i];
        for (unsigned k = 0; r->mps && k < r->n_devices; k++)
            if (!r->devices[k].mig && r->devices[k].gpu < GS_MAX_GPUS) /* a MIG GPU's mode is not per instance */
                want[r->devices[k].gpu] = true;
    }
    for (unsigned g = 0; a->inv && g < a->inv->n_gpus && g < GS_MAX_GPUS; g++) {
        int cur = a->inv->gpus[g].compute_mode;
        if (want[g] && cur >= 0 && cur != NVML_COMPUTEMODE_EXCLUSIVE_PROCESS) {
            a->cm_saved[g] = cur + 1;
            set_compute_mode(a, g, NVML_COMPUTEMODE_EXCLUSIVE_PROCESS, "MPS, gpuslice.mps.exclusiveProcess");
        } else if (!want[g] && a->cm_saved[g]) {
            set_compute_mode(a, g, (unsigned)(a->cm_saved[g] - 1), "no longer MPS with exclusiveProcess");
            a->cm_saved[g] = 0;
        }
    }
}

/* Hands the plan's MPS GPUs to the supervisor and marks the replicas of a GPU whose daemon is not
 * running Unhealthy. */
static void mps_sync(struct agent *a, struct gs_plan *next) {
    static struct gs_mps_gpu gpus[GS_METRICS_MAX_MPS];
    mps_compute_modes(a, next);
    size_t n = mps_wanted(next, gpus, GS_METRICS_MAX_MPS);
    if (!n && !a->mps)
        return;
    if (mps_supervisor(a) < 0)
        return;
    if (n) {
        char shm[300];
        snprintf(shm, sizeof(shm), "%s/shm", a->mps_root);
        if (gs_mkdir_p(shm, 0755) == 0)
            chmod(shm, 01777); /* /dev/shm of every MPS client */
        else
            log_warn("MPS: cannot create %s: clients get no shared memory mount", shm);
    }
    if (gs_mps_sup_set_gpus(a->mps, gpus, n) < 0)
        log_error("MPS: the plan's GPUs were not handed to the supervisor (see above)");
    if (!a->mps_stale_checked) {
        a->mps_stale_checked = true;
        gs_mps_sup_stop_stale(a->mps);
    }
    for (unsigned i = 0; i < next->n_resources; i++) {
        struct gs_resource *r = &next->resources[i];
        for (unsigned k = 0; r->mps && k < r->n_devices; k++)
            if (gs_mps_sup_state(a->mps, r->devices[k].uuid) != GS_MPS_RUNNING)
                r->devices[k].healthy = false;
    }
    mps_publish(a, gpus, n);
}

/* Runs what the supervisor has due; a daemon that died or came back changes its devices' health. */
static void mps_tick(struct agent *a) {
    if (!a->mps)
        return;
    struct gs_mps_change ch[16];
    size_t n = 0;
    if (gs_mps_sup_tick(a->mps, gs_now_ns(), ch, GS_ARRAY_SIZE(ch), &n) < 0)
        return;
    for (size_t i = 0; i < n; i++)
        log_info("MPS daemon of %s is %s: its devices are %s", ch[i].uuid, gs_mps_state_name(ch[i].state),
                 ch[i].healthy ? "Healthy" : "Unhealthy");
    if (n || a->counters.n_mps)
        replan(a, false);
}

/* Milliseconds until the supervisor's next deadline, for epoll_wait (-1: none). */
static int mps_timeout_ms(const struct agent *a) {
    if (!a->mps)
        return -1;
    uint64_t due = gs_mps_sup_next_due(a->mps), now = gs_now_ns();
    if (due == UINT64_MAX)
        return -1;
    if (due <= now)
        return 0;
    uint64_t ms = (due - now + 999999) / 1000000;
    return ms > 60000 ? 60000 : (int)ms;
}

static int replan(struct agent *a, bool log_warnings) {
    struct gs_plan next;
    int r = gs_plan_build(a->inv, &a->policy, &a->health, &next);
    if (r < 0) {
        log_error("Failed to build the plan: %s", strerror(-r));
        return r;
    }
    mps_sync(a, &next);
    if (log_warnings)
        for (unsigned i = 0; i < next.n_warnings; i++)
            log_warn("%s", next.warnings[i]);
    if (a->plan_valid && gs_plan_equal(&a->plan, &next)) {
        gs_plan_free(&next);
        return 0;
    }
    log_plan_changes(a, a->plan_valid ? &a->plan : NULL, &next);
    write_cdi_spec(a); /* before any Allocate can name the new devices */
    r = dp_manager_sync(a->dp, &next);
    if (r < 0) {
        log_error("Failed to update the device plugins: %s", strerror(-r));
        gs_plan_free(&next);
        return r;
    }
    if (a->plan_valid)
        gs_plan_free(&a->plan);
    a->plan = next;
    a->plan_valid = true;
    write_labels(a);
    return 0;
}

static void refresh_inventory(struct agent *a) {
    struct gs_inventory *fresh = malloc(sizeof(*fresh));
    if (!fresh)
        return;
    int r = agent_read_inventory(a->node, a->o->sysfs_root, fresh);
    if (r < 0) {
        a->counters.reconcile_errors++;
        log_error("Failed to read the GPUs: %s", gpu_node_error(a->node));
        free(fresh);
        return;
    }
    merge_lost(fresh, a->inv);
    for (unsigned i = 0; i < fresh->n_gpus; i++) {
        bool was = a->inv && i < a->inv->n_gpus && a->inv->gpus[i].lost;
        if (fresh->gpus[i].lost && !was)
            log_error("GPU %u (%s) is lost: NVML reports GPU_IS_LOST; its devices are Unhealthy", i,
                      fresh->gpus[i].uuid);
        else if (!fresh->gpus[i].lost && was)
            log_info("GPU %u (%s) answers again", i, fresh->gpus[i].uuid);
    }
    free(a->inv);
    a->inv = fresh;
}

/* Healthy again after the quiet period without a critical Xid (0 = never automatically). */
static bool recover_quiet_gpus(struct agent *a) {
    if (!a->policy.recovery_quiet_s)
        return false;
    bool changed = false;
    unsigned long long now = gs_now_ns(), quiet = (unsigned long long)a->policy.recovery_quiet_s * 1000000000ULL;
    for (unsigned i = 0; i < GS_MAX_GPUS; i++) {
        if (a->health.unhealthy[i] && now - a->last_xid_ns[i] >= quiet) {
            a->health.unhealthy[i] = false;
            changed = true;
            log_info("GPU %u recovered: no critical Xid for %u s (last Xid %llu); its devices are Healthy again", i,
                     a->policy.recovery_quiet_s, a->last_xid[i]);
        }
    }
    return changed;
}

/* ---- MIG layout ----------------------------------------------------------------------------- */

/* The status the node-labels side publishes: {"state": "pending|applied|failed", ...}. */
/* Writes a file other components read (atomically, creating its directory); logs a failure. */
static int write_state_file(const char *path, const char *text, size_t len, const char *what) {
    char dir[PATH_MAX];
    gs_strlcpy(dir, path, sizeof(dir));
    gs_mkdir_p(dirname(dir), 0755);
    int r = gs_write_file_atomic(path, text, len, false);
    if (r < 0)
        log_warn("Cannot write %s to %s: %s", what, path, strerror(-r));
    return r;
}

/* Rewrites the features file (atomically) when the labels changed. */
static void write_labels(struct agent *a) {
    if (!a->o->features_file || !a->o->features_file[0] || !a->plan_valid)
        return;
    size_t cap = 1 << 16;
    char *text = malloc(cap);
    int n = text ? gs_labels_format(a->inv, &a->policy, &a->plan, a->mig_state[0] ? a->mig_state : NULL, text, cap)
                 : -ENOMEM;
    if (n < 0) {
        log_warn("Cannot build the node labels: %s", strerror(-n));
        free(text);
        return;
    }
    if (a->labels && !strcmp(a->labels, text)) {
        free(text);
        return;
    }
    if (write_state_file(a->o->features_file, text, (size_t)n, "the node labels") < 0) {
        free(text);
        return;
    }
    log_info("Node labels written to %s", a->o->features_file);
    free(a->labels);
    a->labels = text;
}

static void write_mig_status(struct agent *a, const char *state, const char *reason) {
    gs_strlcpy(a->mig_state, state, sizeof(a->mig_state));
    write_labels(a);
    if (!a->o->mig_status_path)
        return;
    json_t *j = json_pack("{s:s,s:s,s:s,s:I}", "state", state, "config", a->policy.mig_config, "reason",
                          reason ? reason : "", "updated", (json_int_t)time(NULL));
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!text)
        return;
    write_state_file(a->o->mig_status_path, text, strlen(text), "the MIG status");
    free(text);
}

static void refresh_inventory(struct agent *a);

/* Applies the policy's MIG layout: the devices of every instance the layout destroys are first
 * withdrawn from ListAndWatch, then the layout is applied, then the new devices are advertised. */
static void reconcile_mig(struct agent *a) {
    if (!a->policy.mig_config[0])
        return;
    struct gs_layout_file *file = NULL;
    char err[1024];
    if (a->policy.mig_layout_file[0]) {
        file = malloc(sizeof(*file));
        if (!file || gs_miglayout_load(a->policy.mig_layout_file, file, err, sizeof(err)) < 0) {
            write_mig_status(a, "failed", file ? err : "out of memory");
            log_error("MIG layout not applied: %s", file ? err : "out of memory");
            free(file);
            return;
        }
    }
    struct gs_mig_plan *plans = calloc(GS_MAX_GPUS, sizeof(*plans));
    bool selected[GS_MAX_GPUS];
    unsigned steps = 0;
    int r = plans ? gs_mig_plan_node(a->inv, file, a->policy.mig_config, plans, selected, err, sizeof(err)) : -ENOMEM;
    if (r < 0) {
        write_mig_status(a, "failed", plans ? err : "out of memory");
        log_error("MIG layout %s not applied: %s", a->policy.mig_config, plans ? err : "out of memory");
        goto out;
    }
    memset(a->health.withdrawn_gi, 0, sizeof(a->health.withdrawn_gi));
    for (unsigned i = 0; i < a->inv->n_gpus; i++) {
        steps += plans[i].n_steps + plans[i].reset_pending;
        for (unsigned k = 0; k < plans[i].n_steps; k++) {
            const struct gs_mig_step *st = &plans[i].steps[k];
            if (st->kind == GS_STEP_DESTROY_GI || st->kind == GS_STEP_DESTROY_CI)
                a->health.withdrawn_gi[i] |= 1u << st->gi_id;
        }
    }
    if (!steps) {
        write_mig_status(a, "applied", NULL);
        goto out;
    }
    write_mig_status(a, "pending", NULL);
    log_info("Applying MIG layout %s%s%s", a->policy.mig_config, file ? " from " : "", file ? file->name : "");
    if (a->plan_valid)
        replan(a, false); /* withdraw the devices of instances about to be destroyed */
    struct gs_mig_apply_result res;
    r = gs_mig_apply_node(a->node, file, a->policy.mig_config, a->policy.mig_force, &res, err, sizeof(err));
    memset(a->health.withdrawn_gi, 0, sizeof(a->health.withdrawn_gi));
    if (r < 0) {
        write_mig_status(a, "failed", err); /* first: whoever reads the log line finds the state written */
        log_error("MIG layout %s failed after %u step(s): %s", a->policy.mig_config, res.steps_done, err);
    } else {
        write_mig_status(a, "applied", NULL);
        log_info("MIG layout %s applied: %u created, %u destroyed, %u kept", a->policy.mig_config, res.creates,
                 res.destroys, res.kept);
    }
    refresh_inventory(a);
    if (a->plan_valid)
        replan(a, true);
out:
    free(plans);
    free(file);
}

/* ---- guard files of pods that are gone ------------------------------------------------------- */

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[PATH_MAX];
        if (snprintf(p, sizeof(p), "%s/%s", dir, e->d_name) >= (int)sizeof(p))
            continue;
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            remove_tree(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* Which devices an allocation's files belong to ("RESOURCE\tID" lines): when the kubelet no
 * longer assigns any of them, the pod is gone and the files can go (still_assigned). */
static int write_devices_record(const char *path, const char *resource, const char *const *ids, size_t n) {
    char devices[8192];
    size_t dl = 0;
    for (size_t i = 0; i < n && dl < sizeof(devices); i++)
        dl += (size_t)snprintf(devices + dl, sizeof(devices) - dl, "%s\t%s\n", resource, ids[i]);
    if (dl >= sizeof(devices))
        return -ENOBUFS;
    return gs_write_file_atomic(path, devices, dl, false);
}

/* True if the kubelet still assigns one of the devices listed in the file ("RESOURCE\tID" lines). */
static bool still_assigned(const char *path, const struct pr_list *l) {
    _cleanup_free_ char *text = NULL;
    if (gs_read_file(path, 1 << 20, &text, NULL) < 0)
        return true; /* cannot tell: keep */
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *tab = strchr(line, '\t');
        if (!tab)
            continue;
        *tab = '\0';
        for (size_t i = 0; i < l->n; i++)
            if (!strcmp(l->items[i].resource, line) && !strcmp(l->items[i].device_id, tab + 1))
                return true;
    }
    return false;
}

/* The transient CDI specs of allocations (CDI_ROOT/<vendor>-<class>_alloc-<id>.json, each with its
 * .devices record) go when PodResources no longer assigns their devices, after the grace period,
 * like the guard files. l: the kubelet's list, NULL when it has not been asked yet. */
static void gc_cdi_transient(struct agent *a, const struct pr_list *l) {
    if (!a->o->cdi_root || !a->o->cdi_root[0])
        return;
    DIR *d = opendir(a->o->cdi_root);
    if (!d)
        return;
    struct pr_list own;
    bool asked = false;
    char err[512];
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (!strstr(e->d_name, "_alloc-") || len < 8 || strcmp(e->d_name + len - 8, ".devices") != 0)
            continue;
        char rec[PATH_MAX], spec[PATH_MAX];
        if (snprintf(rec, sizeof(rec), "%s/%s", a->o->cdi_root, e->d_name) >= (int)sizeof(rec))
            continue;
        snprintf(spec, sizeof(spec), "%.*s.json", (int)(strlen(rec) - 8), rec);
        struct stat st;
        if (stat(rec, &st) < 0 || (unsigned long long)(now - st.st_mtime) * 1000ULL < a->o->guard_grace_ms)
            continue;
        if (!l && !asked) {
            if (pr_list(a->o->pod_resources, 5000, &own, err, sizeof(err)) < 0)
                break;
            asked = true;
            l = &own;
        }
        if (!still_assigned(rec, l)) {
            unlink(spec);
            unlink(rec);
            log_info("Removed the CDI spec of a pod that is gone: %s", spec);
        }
    }
    closedir(d);
    if (asked)
        pr_list_free(&own);
}

/* The kubelet never calls Allocate again for a restarted container, so a container's guard files
 * live as long as its pod; they are removed once PodResources no longer assigns their devices.
 * When PodResources cannot be asked, nothing is removed. */
static void gc_guard_files(struct agent *a) {
    DIR *d = opendir(a->o->guard_root);
    if (!d) {
        gc_cdi_transient(a, NULL);
        return;
    }
    struct pr_list l;
    bool listed = false;
    char err[512];
    struct dirent *e;
    time_t now = time(NULL);
    while ((e = readdir(d))) {
        if (e->d_name[0] != 'a')
            continue;
        char dir[PATH_MAX];
        if (snprintf(dir, sizeof(dir), "%s/%s", a->o->guard_root, e->d_name) >= (int)sizeof(dir))
            continue;
        struct stat st;
        if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode) ||
            (unsigned long long)(now - st.st_mtime) * 1000ULL < a->o->guard_grace_ms)
            continue;
        if (!listed) {
            if (pr_list(a->o->pod_resources, 5000, &l, err, sizeof(err)) < 0) {
                log_debug("Guard files not cleaned up: %s", err);
                break;
            }
            listed = true;
        }
        char devices[PATH_MAX + 16];
        snprintf(devices, sizeof(devices), "%s/devices", dir);
        if (!still_assigned(devices, &l)) {
            remove_tree(dir);
            log_info("Removed the guard files of a pod that is gone: %s", dir);
        }
    }
    closedir(d);
    gc_cdi_transient(a, listed ? &l : NULL);
    if (listed)
        pr_list_free(&l);
}

/* Compares the guard's counters with NVML's per-process memory (guard_reconcile.h) and publishes
 * both in the metrics. */
static void reconcile_guard_counters(struct agent *a) {
    struct gs_guard_usage *now = calloc(GS_METRICS_MAX_GUARD, sizeof(*now));
    if (!now)
        return;
    size_t n = 0;
    guard_reconcile(a->o->guard_root, a->o->proc_root, a->inv, a->counters.guard, a->counters.n_guard, now,
                    GS_METRICS_MAX_GUARD, &n);
    pthread_mutex_lock(&a->lock);
    memcpy(a->counters.guard, now, n * sizeof(*now));
    a->counters.n_guard = (unsigned)n;
    pthread_mutex_unlock(&a->lock);
    free(now);
}

/* Who holds which of our devices, from the kubelet's PodResources List (at most one call per
 * --pod-attribution-interval-ms, far below the kubelet's 100 calls/s limit), for the metrics'
 * namespace/pod/container labels. Devices of other resources are left out. */
static void attribute_pods(struct agent *a) {
    struct pr_list l;
    char err[512];
    if (pr_list(a->o->pod_resources, 2000, &l, err, sizeof(err)) < 0) {
        if (strcmp(err, a->attribution_error) != 0)
            log_warn("No pod attribution in the metrics: %s", err);
        gs_strlcpy(a->attribution_error, err, sizeof(a->attribution_error));
        pthread_mutex_lock(&a->lock);
        a->counters.pods_known = false;
        a->counters.n_pod_devices = 0;
        pthread_mutex_unlock(&a->lock);
        return;
    }
    if (a->attribution_error[0])
        log_info("PodResources answers again: pod attribution resumes");
    a->attribution_error[0] = '\0';
    pthread_mutex_lock(&a->lock);
    unsigned n = 0;
    for (size_t i = 0; i < l.n && n < GS_METRICS_MAX_POD_DEVICES; i++) {
        const struct pr_assignment *as = &l.items[i];
        const struct gs_resource *r = a->plan_valid ? gs_plan_resource(&a->plan, as->resource) : NULL;
        if (!r || !gs_resource_device(r, as->device_id))
            continue;
        struct gs_pod_device *pd = &a->counters.pod_devices[n++];
        gs_strlcpy(pd->ns, as->ns, sizeof(pd->ns));
        gs_strlcpy(pd->pod, as->pod, sizeof(pd->pod));
        gs_strlcpy(pd->container, as->container, sizeof(pd->container));
        gs_strlcpy(pd->resource, as->resource, sizeof(pd->resource));
        gs_strlcpy(pd->device, as->device_id, sizeof(pd->device));
    }
    a->counters.n_pod_devices = n;
    a->counters.pods_known = true;
    pthread_mutex_unlock(&a->lock);
    pr_list_free(&l);
}

/* ---- handlers called by the device plugins -------------------------------------------------- */

/* Where the guard's files appear inside the container. */
#define GUARD_LIB_IN_CONTAINER "/usr/lib/gpuslice/libgpuslice-guard.so"
#define GUARD_CONF_IN_CONTAINER "/etc/gpuslice/guard.conf"
#define GUARD_STATE_IN_CONTAINER "/run/gpuslice/guard"

/* The guard's files for one allocation: a limits file (read-only in the container), a directory
 * for the counters region (read-write) and the shared /etc/ld.so.preload that loads the guard in
 * every process of the container. They live as long as the pod: the kubelet reuses this answer
 * when the container restarts. */
static int inject_guard(struct agent *a, const struct gs_resource *res, const char *const *ids, size_t n,
                        struct gs_alloc_response *out, char *err, size_t errlen) {
    static unsigned long long seq;
    if (!a->o->guard_lib) {
        snprintf(err, errlen, "the resource has a VRAM quota but libgpuslice-guard.so was not found");
        return -ENOENT;
    }
    char dir[200], path[256];
    if (snprintf(dir, sizeof(dir), "%s/a%llx-%llx", a->o->guard_root, (unsigned long long)time(NULL), ++seq) >=
        (int)sizeof(dir)) {
        snprintf(err, errlen, "guard root %s is too long", a->o->guard_root);
        return -ENAMETOOLONG;
    }
    snprintf(path, sizeof(path), "%s/state", dir);
    int r = gs_mkdir_p(path, 0755);
    if (r < 0) {
        snprintf(err, errlen, "cannot create %s: %s", path, strerror(-r));
        return r;
    }
    /* The counters region, empty (the guard sizes and initialises it) and writable by the
     * container's processes whatever their user: the directory is root's. */
    snprintf(path, sizeof(path), "%s/state/region", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0 || fchmod(fd, 0666) < 0) {
        r = -errno;
        snprintf(err, errlen, "cannot create %s: %s", path, strerror(-r));
        if (fd >= 0)
            close(fd);
        return r;
    }
    close(fd);
    struct gs_guard_limits l = { .fail_closed = true };
    snprintf(l.region, sizeof(l.region), "%s/region", GUARD_STATE_IN_CONTAINER);
    for (unsigned i = 0; i < out->n_guarded && i < GS_GUARD_MAX_DEVICES; i++)
        l.dev[l.n_devices++] = (struct gs_guard_device_limit){ (int)out->guarded[i].ordinal, "", out->guarded[i].bytes, 0 };
    for (unsigned i = 0; i < l.n_devices; i++)
        gs_strlcpy(l.dev[i].uuid, out->guarded[i].uuid, sizeof(l.dev[i].uuid));
    char text[4096];
    int len = gs_guard_limits_format(&l, text, sizeof(text));
    snprintf(path, sizeof(path), "%s/limits", dir);
    if (len < 0 || (r = gs_write_file_atomic(path, text, (size_t)len, false)) < 0) {
        snprintf(err, errlen, "cannot write %s", path);
        return len < 0 ? len : r;
    }
    snprintf(path, sizeof(path), "%s/devices", dir);
    if (write_devices_record(path, res->name, ids, n) < 0) {
        snprintf(err, errlen, "cannot write %s", path);
        return -EIO;
    }
    char preload[256];
    snprintf(preload, sizeof(preload), "%s/ld.so.preload", a->o->guard_root);
    if (access(preload, R_OK) != 0 &&
        gs_write_file_atomic(preload, GUARD_LIB_IN_CONTAINER "\n", strlen(GUARD_LIB_IN_CONTAINER) + 1, false) < 0) {
        snprintf(err, errlen, "cannot write %s", preload);
        return -EIO;
    }
    char host[256];
    snprintf(host, sizeof(host), "%s/limits", dir);
    char state[256];
    snprintf(state, sizeof(state), "%s/state", dir);
    if (gs_alloc_add_mount(out, GUARD_LIB_IN_CONTAINER, a->o->guard_lib, true) < 0 ||
        gs_alloc_add_mount(out, GUARD_CONF_IN_CONTAINER, host, true) < 0 ||
        gs_alloc_add_mount(out, GUARD_STATE_IN_CONTAINER, state, false) < 0 ||
        gs_alloc_add_mount(out, "/etc/ld.so.preload", preload, true) < 0 ||
        gs_alloc_add_env(out, "GPUSLICE_GUARD_CONFIG", GUARD_CONF_IN_CONTAINER) < 0) {
        snprintf(err, errlen, "the guard's mounts do not fit in the Allocate answer (paths too long?)");
        return -ENOSPC;
    }
    log_info("Guard for %s: limits in %s", out->visible_devices, dir);
    return 0;
}

/* Reads PROC_ROOT/NAME (at most 1 MiB) into *text; path gets the file's name for messages. */
static int read_proc_file(const char *proc_root, const char *name, char path[PATH_MAX], char **text, char *err,
                          size_t errlen) {
    snprintf(path, PATH_MAX, "%s/%s", proc_root, name);
    int r = gs_read_file(path, 1 << 20, text, NULL);
    if (r < 0)
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(-r));
    return r;
}

int agent_read_mig_minors(const char *proc_root, struct gs_mig_minors *mm, char *err, size_t errlen) {
    char path[PATH_MAX];
    _cleanup_free_ char *text = NULL;
    int r = read_proc_file(proc_root, "driver/nvidia-caps/mig-minors", path, &text, err, errlen);
    return r < 0 ? r : gs_mig_minors_parse(path, text, mm, err, errlen);
}

static bool file_exists(const char *path, void *ctx) {
    (void)ctx;
    return access(path, F_OK) == 0;
}

int agent_cdi_spec(const struct gs_inventory *inv, const char *proc_root, const char *driver_root, const char *read_root,
                   const char *kind, char **out, unsigned *n_driver_files, char *err, size_t errlen) {
    *out = NULL;
    char path[PATH_MAX];
    _cleanup_free_ char *devices = NULL;
    int r = read_proc_file(proc_root, "devices", path, &devices, err, errlen);
    if (r < 0)
        return r;
    struct gs_dev_majors maj;
    if ((r = gs_proc_devices_parse(path, devices, &maj, err, errlen)) < 0)
        return r;
    bool any_mig = false;
    for (unsigned i = 0; i < inv->n_gpus; i++)
        any_mig |= inv->gpus[i].n_mig > 0;
    struct gs_mig_minors mm = { 0 };
    if (any_mig && (r = agent_read_mig_minors(proc_root, &mm, err, errlen)) < 0)
        return r;
    snprintf(path, sizeof(path), "%s%setc/ld.so.cache", read_root,
             read_root[0] && read_root[strlen(read_root) - 1] == '/' ? "" : "/");
    _cleanup_free_ char *cache = NULL;
    size_t len = 0;
    if (gs_read_file(path, 64 << 20, &cache, &len) < 0)
        len = 0; /* no cache: no libraries */
    struct gs_cdi_driver *drv = malloc(sizeof(*drv));
    if (!drv) {
        gs_mig_minors_free(&mm);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    char cerr[256];
    if (gs_cdi_driver_files(driver_root, read_root, len ? (const unsigned char *)cache : NULL, len, file_exists, NULL,
                            drv, cerr, sizeof(cerr)) < 0) {
        snprintf(err, errlen, "%s (%s)", cerr, path);
        free(drv);
        gs_mig_minors_free(&mm);
        return -EINVAL;
    }
    if (n_driver_files)
        *n_driver_files = drv->n;
    r = gs_cdi_spec(inv, &maj, any_mig ? &mm : NULL, drv, kind, out, err, errlen);
    free(drv);
    gs_mig_minors_free(&mm);
    return r;
}

/* With a CDI strategy the per-container items (the guard's files, MPS's pipe, shared memory and
 * limits) go into a transient spec of their own, named in the answer beside the devices, instead
 * of the answer's mounts and environment (the runtime would otherwise mount them twice). */
static int cdi_transient(struct agent *a, const struct gs_resource *r, const char *const *ids, size_t n,
                         struct gs_alloc_response *out, char *err, size_t errlen) {
    static _Atomic unsigned long long seq;
    if (!out->n_cdi || (!out->n_extra_mounts && !out->n_envs) || !a->o->cdi_root || !a->o->cdi_root[0])
        return 0;
    if (out->n_cdi == GS_ALLOC_MAX_CDI) {
        snprintf(err, errlen, "more than %d CDI devices in one allocation", GS_ALLOC_MAX_CDI - 1);
        return -E2BIG;
    }
    const char *kind = a->o->cdi_kind ? a->o->cdi_kind : GS_CDI_KIND;
    char name[64], base[PATH_MAX], vc[GS_RESOURCE_NAME_MAX];
    snprintf(name, sizeof(name), "alloc-%llx-%llx", (unsigned long long)time(NULL), ++seq);
    gs_strlcpy(vc, kind, sizeof(vc));
    for (char *c = vc; *c; c++)
        if (*c == '/')
            *c = '-'; /* "nvidia.com/gpu" -> "nvidia.com-gpu", as CDI names spec files */
    if (snprintf(base, sizeof(base), "%s/%s_%s", a->o->cdi_root, vc, name) >= (int)sizeof(base) - 16) {
        snprintf(err, errlen, "CDI root %s is too long", a->o->cdi_root);
        return -ENAMETOOLONG;
    }
    char *text = NULL;
    int rc = gs_cdi_alloc_spec(kind, name, out, &text, err, errlen);
    if (rc < 0)
        return rc;
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s.devices", base); /* first: the record lets GC find the spec */
    if ((rc = write_devices_record(path, r->name, ids, n)) < 0 ||
        (snprintf(path, sizeof(path), "%s.json", base), (rc = gs_write_file_atomic(path, text, strlen(text), false)) < 0)) {
        snprintf(err, errlen, "cannot write %s", path);
        free(text);
        return rc < 0 ? rc : -EIO;
    }
    free(text);
    gs_strlcpy(out->cdi[out->n_cdi++], name, sizeof(out->cdi[0]));
    out->n_extra_mounts = 0;
    out->n_envs = 0;
    log_info("Allocate %s: per-container edits in the CDI spec %s", r->name, path);
    return 0;
}

static int on_allocate(void *ctx, const struct gs_resource *r, const char *const *ids, size_t n,
                       struct gs_alloc_response *out, char *err, size_t errlen) {
    struct agent *a = ctx;
    atomic_store(&a->last_call_ns, gs_now_ns());
    struct gs_mig_minors mm = { 0 };
    bool need_minors = false;
    pthread_mutex_lock(&a->lock);
    bool pass_specs = a->policy.pass_device_specs;
    pthread_mutex_unlock(&a->lock);
    for (size_t i = 0; i < n && pass_specs; i++) {
        const struct gs_device *d = gs_resource_device(r, ids[i]);
        need_minors |= d && (d->kind == GS_DEV_MIG || (d->kind == GS_DEV_MPS && d->mig));
    }
    if (need_minors) {
        int rr = agent_read_mig_minors(a->o->proc_root, &mm, err, errlen);
        if (rr < 0)
            return rr;
    }
    pthread_mutex_lock(&a->lock);
    int rc = gs_allocate(r, ids, n, &a->policy, &mm, file_exists, NULL, out, err, errlen);
    pthread_mutex_unlock(&a->lock);
    gs_mig_minors_free(&mm);
    if (rc == 0 && out->n_guarded && (rc = inject_guard(a, r, ids, n, out, err, errlen)) < 0)
        gs_alloc_response_free(out);
    if (rc == 0 && out->n_cdi) {
        pthread_mutex_lock(&a->lock);
        rc = cdi_check(a, out, err, errlen);
        pthread_mutex_unlock(&a->lock);
        if (rc == 0)
            rc = cdi_transient(a, r, ids, n, out, err, errlen);
        if (rc < 0)
            gs_alloc_response_free(out);
    }
    for (unsigned i = 0; rc == 0 && i < out->n_cdi; i++) { /* "nvidia.com/gpu=GPU-..." */
        char q[sizeof(out->cdi[0])];
        gs_cdi_qualified(a->o->cdi_kind ? a->o->cdi_kind : GS_CDI_KIND, out->cdi[i], q, sizeof(q));
        gs_strlcpy(out->cdi[i], q, sizeof(out->cdi[i]));
    }
    pthread_mutex_lock(&a->lock);
    gs_metrics_count_alloc(&a->counters, r->name, rc == 0);
    pthread_mutex_unlock(&a->lock);
    return rc;
}

/* Request sizes per resource (under a->lock). */
static unsigned *size_hist(struct agent *a, const char *resource) {
    for (unsigned i = 0; i < a->n_hist; i++)
        if (!strcmp(a->hist[i].resource, resource))
            return a->hist[i].count;
    if (a->n_hist == GS_PLAN_MAX_RESOURCES)
        return NULL;
    gs_strlcpy(a->hist[a->n_hist].resource, resource, sizeof(a->hist[0].resource));
    return a->hist[a->n_hist++].count;
}

static size_t on_preferred(void *ctx, const struct gs_resource *r, const char *const *avail, size_t n_avail,
                           const char *const *must, size_t n_must, size_t size, const char **out) {
    struct agent *a = ctx;
    atomic_store(&a->last_call_ns, gs_now_ns());
    pthread_mutex_lock(&a->lock);
    /* An MPS client talks to one daemon: replicas of one container come from one GPU. */
    enum gs_alloc_policy policy = r->mps ? GS_ALLOC_PACKED : a->policy.alloc_policy;
    /* The node's request sizes so far, the fragmentation policy's picture of its workload. */
    unsigned *hist = size_hist(a, r->name);
    unsigned h[GS_ALLOC_SIZE_HIST] = { 0 };
    if (hist) {
        if (size > 0)
            hist[size < GS_ALLOC_SIZE_HIST ? size : GS_ALLOC_SIZE_HIST - 1]++;
        memcpy(h, hist, sizeof(h));
    }
    pthread_mutex_unlock(&a->lock);
    return gs_preferred(r, avail, n_avail, must, n_must, size, policy, h, out);
}

/* ---- policy --------------------------------------------------------------------------------- */

static unsigned long long hash_text(const char *s, size_t n) {
    unsigned long long h = 0xCBF29CE484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001B3ULL;
    }
    return h;
}

/* Loads the policy file. Returns 1 if a new policy is in force, 0 if unchanged, -errno if the
 * file is bad (the running policy stays). */
static int load_policy(struct agent *a, bool initial) {
    if (!a->o->config_path) {
        pthread_mutex_lock(&a->lock);
        gs_policy_init(&a->policy);
        pthread_mutex_unlock(&a->lock);
        return 1;
    }
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    int r = gs_read_file(a->o->config_path, 1 << 20, &text, &len);
    if (r < 0) {
        log_error("Cannot read policy %s: %s%s", a->o->config_path, strerror(-r),
                  initial ? "" : "; keeping the running policy");
        return r;
    }
    unsigned long long h = hash_text(text, len);
    if (!initial && h == a->policy_hash)
        return 0;
    /* On the heap: a policy is ~280 KiB, and stack pages once touched stay resident. */
    _cleanup_free_ struct gs_policy *next = malloc(sizeof(*next));
    if (!next) {
        log_error("Cannot load policy %s: out of memory%s", a->o->config_path,
                  initial ? "" : "; keeping the running policy");
        return -ENOMEM;
    }
    char err[512];
    r = gs_policy_parse(a->o->config_path, text, len, next, err, sizeof(err));
    if (r < 0) {
        log_error("Rejected policy: %s%s", err, initial ? "" : "; keeping the running policy");
        return r;
    }
    for (unsigned i = 0; i < next->n_warnings; i++)
        log_warn("Policy %s: %s", a->o->config_path, next->warnings[i]);
    pthread_mutex_lock(&a->lock);
    a->policy = *next;
    pthread_mutex_unlock(&a->lock);
    a->policy_hash = h;
    if (!initial)
        log_info("Applied the new policy from %s", a->o->config_path);
    return 1;
}

/* ---- metrics ------------------------------------------------------------------------------ */

/* Renders the metrics from the state the main loop holds now and hands them to the HTTP thread:
 * a scrape sees the state of the last loop iteration (at most one poll interval old). */
static void publish_metrics(struct agent *a) {
    if (!a->metrics || !a->plan_valid)
        return;
    /* One buffer kept across iterations, grown when the text outgrows it (up to 16 MiB) and
     * shrunk when the text falls under a quarter of it: rendering every 200 ms into a fresh
     * buffer would churn the allocator, and a buffer that only grows would keep a peak resident. */
    enum { MIN_CAP = 64 * 1024, MAX_CAP = 16 << 20 };
    int n;
    for (;;) {
        if (!a->metrics_text) {
            size_t cap = a->metrics_cap ? a->metrics_cap : MIN_CAP;
            a->metrics_text = malloc(cap);
            if (!a->metrics_text)
                return;
            a->metrics_cap = cap;
        }
        pthread_mutex_lock(&a->lock);
        n = gs_metrics_format(a->inv, &a->plan, &a->health, &a->counters, a->metrics_text, a->metrics_cap);
        pthread_mutex_unlock(&a->lock);
        if (n != -ENOSPC || a->metrics_cap >= MAX_CAP)
            break;
        free(a->metrics_text);
        a->metrics_text = NULL;
        a->metrics_cap *= 2;
    }
    if (n >= 0) {
        metrics_http_publish(a->metrics, a->metrics_text, (size_t)n);
        if (a->metrics_cap > MIN_CAP && (size_t)n < a->metrics_cap / 4) {
            free(a->metrics_text); /* the next render allocates half */
            a->metrics_text = NULL;
            a->metrics_cap /= 2;
        }
    } else if (n != a->metrics_err) {
        log_warn("Cannot render the metrics: %s%s", strerror(-n),
                 n == -ENOSPC ? " (the text is over 16 MiB)" : ""); /* once per cause */
    }
    a->metrics_err = n < 0 ? n : 0;
}

/* ---- memory --------------------------------------------------------------------------------- */

/* Hands freed heap memory back to the kernel when the allocator holds more than 512 KiB free:
 * gRPC allocates per call on its own threads, the simulated NVML parses its state file, and glibc
 * keeps what was freed. Checked at the inventory polls, at most once a second, and only when no
 * Allocate or GetPreferredAllocation call started in the last second (malloc_trim takes the
 * arenas' locks, and would delay a burst of calls). */
static void trim_when_quiet(struct agent *a, unsigned long long now) {
    unsigned long long last_call = atomic_load(&a->last_call_ns); /* may be after now */
    if (last_call + 1000000000ULL > now || now - a->trim_last_ns < 1000000000ULL)
        return;
    a->trim_last_ns = now;
    struct mallinfo2 mi = mallinfo2();
    if (mi.fordblks > 512 * 1024)
        malloc_trim(0);
}

/* ---- NVML event thread ---------------------------------------------------------------------- */

static void *event_thread(void *arg) {
    struct agent *a = arg;
    while (!atomic_load(&a->stop)) {
        struct gpu_event ev;
        int r = gpu_events_wait(a->events, 500, &ev);
        if (r == -ETIMEDOUT)
            continue;
        if (r < 0) {
            /* Lost contact with the event source: the inventory poll will tell what is left. */
            usleep(200000);
            continue;
        }
        ssize_t w = write(a->pipe_wr, &ev, sizeof(ev));
        (void)w;
    }
    return NULL;
}

static void handle_xid(struct agent *a, const struct gpu_event *ev) {
    if (ev->gpu >= GS_MAX_GPUS) {
        log_warn("Xid %llu on an unknown device: ignored", ev->xid);
        return;
    }
    pthread_mutex_lock(&a->lock);
    a->counters.xid_total[ev->gpu]++;
    pthread_mutex_unlock(&a->lock);
    if (gs_policy_xid_ignored(&a->policy, ev->xid)) {
        log_info("GPU %u: Xid %llu is an application error (ignored by policy): devices stay Healthy", ev->gpu,
                 ev->xid);
        return;
    }
    a->last_xid_ns[ev->gpu] = gs_now_ns();
    a->last_xid[ev->gpu] = ev->xid;
    if (!a->health.unhealthy[ev->gpu])
        log_warn("GPU %u: critical Xid %llu: marking the GPU and every replica and MIG device on it Unhealthy",
                 ev->gpu, ev->xid);
    a->health.unhealthy[ev->gpu] = true;
    replan(a, false);
}

/* ---- setup ---------------------------------------------------------------------------------- */

static int epoll_add(int epfd, int fd) {
    struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

static int setup_fds(struct agent *a) {
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    a->sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    a->epfd = epoll_create1(EPOLL_CLOEXEC);
    a->inofd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    a->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    int p[2];
    if (a->sigfd < 0 || a->epfd < 0 || a->inofd < 0 || a->timerfd < 0 || pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0)
        return -errno;
    a->pipe_rd = p[0];
    a->pipe_wr = p[1];
    a->config_wd = -1;
    a->kubelet_wd = inotify_add_watch(a->inofd, a->o->kubelet_dir, IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM);
    if (a->kubelet_wd < 0) {
        int e = -errno;
        log_error("Cannot watch %s: %s", a->o->kubelet_dir, strerror(-e));
        return e;
    }
    if (a->o->config_path) {
        char tmp[PATH_MAX];
        gs_strlcpy(tmp, a->o->config_path, sizeof(tmp));
        gs_strlcpy(a->config_dir, dirname(tmp), sizeof(a->config_dir));
        gs_strlcpy(tmp, a->o->config_path, sizeof(tmp));
        gs_strlcpy(a->config_base, basename(tmp), sizeof(a->config_base));
        /* The directory, not the file: editors and ConfigMap updates replace the file. */
        a->config_wd = inotify_add_watch(a->inofd, a->config_dir, IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_MASK_ADD);
        if (a->config_wd < 0)
            log_warn("Cannot watch %s for policy changes (%s): SIGHUP still reloads", a->config_dir, strerror(errno));
    }
    unsigned ms = a->o->poll_ms ? a->o->poll_ms : 2000;
    struct itimerspec its = { { ms / 1000, (long)(ms % 1000) * 1000000L }, { ms / 1000, (long)(ms % 1000) * 1000000L } };
    timerfd_settime(a->timerfd, 0, &its, NULL);
    int fds[] = { a->sigfd, a->inofd, a->timerfd, a->pipe_rd };
    for (size_t i = 0; i < GS_ARRAY_SIZE(fds); i++)
        if (epoll_add(a->epfd, fds[i]) < 0)
            return -errno;
    return 0;
}

static void handle_inotify(struct agent *a, bool *reload) {
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t n;
    while ((n = read(a->inofd, buf, sizeof(buf))) > 0) {
        for (char *p = buf; p < buf + n;) {
            struct inotify_event *ev = (struct inotify_event *)(void *)p;
            p += sizeof(*ev) + ev->len;
            if (!ev->len)
                continue;
            if (ev->wd == a->kubelet_wd) {
                if ((ev->mask & (IN_CREATE | IN_MOVED_TO)) && strcmp(ev->name, "kubelet.sock") == 0) {
                    log_info("kubelet.sock was created: the kubelet restarted; registering again");
                    dp_manager_kubelet_restarted(a->dp);
                } else if (ev->mask & (IN_DELETE | IN_MOVED_FROM)) {
                    dp_manager_socket_deleted(a->dp, ev->name);
                }
            }
            if (ev->wd == a->config_wd && (strcmp(ev->name, a->config_base) == 0 || strcmp(ev->name, "..data") == 0))
                *reload = true;
        }
    }
}

int agent_run(struct gpu_node *node, const struct agent_options *o) {
    /* Two malloc arenas, not one per thread (up to 8 per core): the agent's ~10 threads (gRPC's,
     * the metrics server's, the NVML event thread) allocate little, and each arena keeps pages of
     * its own resident. */
    mallopt(M_ARENA_MAX, 2);
    struct agent *a = calloc(1, sizeof(*a));
    if (!a)
        return 1;
    pthread_mutex_init(&a->lock, NULL);
    a->o = o;
    a->node = node;
    a->sigfd = a->epfd = a->inofd = a->timerfd = a->pipe_rd = a->pipe_wr = -1;
    int exit_code = 1;
    if (load_policy(a, true) < 0)
        goto out;
    a->inv = calloc(1, sizeof(*a->inv));
    if (!a->inv || agent_read_inventory(node, o->sysfs_root, a->inv) < 0) {
        log_error("Failed to read the GPUs: %s", gpu_node_error(node));
        goto out;
    }
    log_info("gpuslice agent starting: %u GPU(s), driver %s, NVML %s, kubelet directory %s", a->inv->n_gpus,
             a->inv->driver_version, gpu_node_lib(node), o->kubelet_dir);
    if (setup_fds(a) < 0) {
        log_error("Failed to set up the event loop: %s", strerror(errno));
        goto out;
    }
    struct dp_handlers h = { a, on_allocate, on_preferred };
    if (dp_manager_new(o->kubelet_dir, &h, &a->dp) < 0)
        goto out;
    reconcile_mig(a); /* before serving: nothing to withdraw yet */
    if (replan(a, true) < 0 || dp_manager_start(a->dp) < 0)
        goto out;
    if (o->metrics_address && o->metrics_address[0]) {
        char err[256];
        a->metrics = metrics_http_start(o->metrics_address, err, sizeof(err));
        if (a->metrics)
            log_info("Serving metrics on %s (port %u) at /metrics", o->metrics_address, metrics_http_port(a->metrics));
        else
            log_error("No metrics: %s; the device plugins run without them", err);
        publish_metrics(a);
    }
    if (gpu_events_open(node, &a->events) == 0) {
        if (pthread_create(&a->event_thread, NULL, event_thread, a) == 0)
            a->event_thread_started = true;
    } else {
        log_warn("Xid events unavailable (%s): health comes from the inventory poll only", gpu_node_error(node));
    }
    exit_code = 0;
    for (bool running = true; running;) {
        struct epoll_event evs[8];
        int n = epoll_wait(a->epfd, evs, 8, mps_timeout_ms(a));
        if (n < 0 && errno != EINTR) {
            log_error("epoll_wait: %s", strerror(errno));
            exit_code = 1;
            break;
        }
        bool reload = false, poll_now = false, mps_woke = false;
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == a->sigfd) {
                struct signalfd_siginfo si;
                while (read(a->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                    if (si.ssi_signo == SIGHUP) {
                        log_info("SIGHUP: reloading the policy");
                        reload = true;
                    } else {
                        log_info("Signal %u: shutting down", si.ssi_signo);
                        running = false;
                    }
                }
            } else if (fd == a->inofd) {
                handle_inotify(a, &reload);
            } else if (fd == a->timerfd) {
                uint64_t ticks;
                ssize_t rr = read(a->timerfd, &ticks, sizeof(ticks));
                (void)rr;
                poll_now = true;
            } else if (a->mps && fd == gs_mps_sup_fd(a->mps)) {
                mps_woke = true;
            } else if (fd == a->pipe_rd) {
                struct gpu_event ev;
                while (read(a->pipe_rd, &ev, sizeof(ev)) == (ssize_t)sizeof(ev))
                    handle_xid(a, &ev);
            }
        }
        if (a->mps && (mps_woke || mps_timeout_ms(a) == 0))
            mps_tick(a);
        int lr = reload ? load_policy(a, false) : 0;
        if (lr != 0) {
            pthread_mutex_lock(&a->lock);
            lr < 0 ? a->counters.policy_reload_errors++ : a->counters.policy_reloads++;
            pthread_mutex_unlock(&a->lock);
        }
        if (lr > 0) {
            reconcile_mig(a);
            replan(a, true);
        }
        if (poll_now && a->o->guard_gc_ms && gs_now_ns() - a->last_gc_ns >= a->o->guard_gc_ms * 1000000ULL) {
            a->last_gc_ns = gs_now_ns();
            gc_guard_files(a);
        }
        if (poll_now) {
            unsigned long long t0 = gs_now_ns();
            refresh_inventory(a);
            if (a->cdi_error[0])
                write_cdi_spec(a); /* it failed: the cause (a missing mig-minors line, ...) may be gone */
            if (a->o->pod_attribution_ms && a->o->pod_resources && a->o->pod_resources[0] &&
                t0 - a->last_attribution_ns >= a->o->pod_attribution_ms * 1000000ULL) {
                a->last_attribution_ns = t0;
                attribute_pods(a);
            }
            if (a->o->guard_reconcile_ms &&
                t0 - a->last_guard_reconcile_ns >= a->o->guard_reconcile_ms * 1000000ULL) {
                a->last_guard_reconcile_ns = t0;
                reconcile_guard_counters(a);
            }
            recover_quiet_gpus(a);
            trim_when_quiet(a, t0);
            if (replan(a, false) < 0)
                a->counters.reconcile_errors++;
            a->counters.reconcile_seconds = (double)(gs_now_ns() - t0) / 1e9;
        }
        publish_metrics(a);
    }
out:
    atomic_store(&a->stop, true);
    if (a->event_thread_started)
        pthread_join(a->event_thread, NULL);
    gpu_events_close(a->events);
    metrics_http_stop(a->metrics);
    free(a->metrics_text);
    if (a->mps) {
        gs_mps_sup_stop_all(a->mps); /* quit, directories removed */
        gs_mps_sup_free(a->mps);
    }
    for (unsigned g = 0; g < GS_MAX_GPUS; g++) /* MPS is gone: other CUDA clients may use the GPU again */
        if (a->cm_saved[g])
            set_compute_mode(a, g, (unsigned)(a->cm_saved[g] - 1), "the agent stops");
    dp_manager_free(a->dp);
    if (a->plan_valid)
        gs_plan_free(&a->plan);
    int fds[] = { a->sigfd, a->epfd, a->inofd, a->timerfd, a->pipe_rd, a->pipe_wr };
    for (size_t i = 0; i < GS_ARRAY_SIZE(fds); i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(a->inv);
    free(a->labels);
    free(a->cdi_spec);
    pthread_mutex_destroy(&a->lock);
    free(a);
    if (exit_code == 0)
        log_info("gpuslice agent stopped");
    return exit_code;
}
