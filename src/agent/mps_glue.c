/* mps_glue.c: MPS supervision in the agent (see mps_glue.h). */
#include "agent/mps_glue.h"

#include <string.h>
#include <sys/stat.h>

#include "agent/state.h"
#include "dra/dra.h"
#include "gpu/gpu.h"
#include "mps/mps.h"
#include "util/log.h"
#include "util/util.h"

/* The supervisor's fd: readable when a daemon died. */
static void on_mps_fd(void *ctx, int fd) {
    struct agent *a = ctx;
    (void)fd;
    loop_kick(&a->loop, a->mps.job);
}

/* A supervisor for the policy's MPS root (a new one when the root changed: the old one's daemons
 * are stopped). */
static int mps_supervisor(struct agent *a) {
    if (a->mps.sup && !strcmp(a->mps.root, a->policy->mps_root))
        return 0;
    if (a->mps.sup) {
        log_info("MPS root changed from %s to %s: stopping the daemons under the old one", a->mps.root,
                 a->policy->mps_root);
        loop_del_fd(&a->loop, gs_mps_sup_fd(a->mps.sup));
        gs_mps_sup_stop_all(a->mps.sup);
        gs_mps_sup_free(a->mps.sup);
        a->mps.sup = NULL;
        a->mps.stale_checked = false;
    }
    struct gs_mps_opts opts = { .root = a->policy->mps_root, .control = a->o->mps_control };
    int r = gs_mps_sup_new(&opts, &a->mps.sup);
    if (r < 0) {
        log_error("MPS: cannot supervise daemons under %s: %s", a->policy->mps_root, strerror(-r));
        return r;
    }
    gs_strlcpy(a->mps.root, a->policy->mps_root, sizeof(a->mps.root));
    int fd = gs_mps_sup_fd(a->mps.sup);
    if (fd >= 0 && loop_add_fd(&a->loop, fd, on_mps_fd, a) < 0)
        log_warn("MPS: the supervisor's fd is not watched: dead daemons are noticed at their next deadline");
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

/* The GPUs the DRA driver serves in MPS mode (the policy's MPS GPUs given to DRA): a daemon each,
 * added to out after the plan's. A claim's share is in its environment (CUDA_MPS_*, share.c): the
 * daemon keeps 100 % and no memory limit. */
static size_t mps_wanted_dra(const struct agent *a, struct gs_mps_gpu *out, size_t n, size_t max) {
    static struct dra_device devs[GS_MAX_GPUS];
    if (!a->dra || !a->inv || !a->policy)
        return n;
    size_t nd = dra_devices_of(a->inv, a->policy, devs, GS_MAX_GPUS);
    for (size_t i = 0; i < nd && n < max; i++) {
        bool seen = devs[i].sharing != DRA_SHARING_MPS || devs[i].withheld;
        for (size_t j = 0; j < n && !seen; j++)
            seen = !strcmp(out[j].uuid, devs[i].cdi);
        if (seen)
            continue;
        memset(&out[n], 0, sizeof(out[n]));
        gs_strlcpy(out[n++].uuid, devs[i].cdi, sizeof(out[0].uuid));
    }
    return n;
}

static void mps_publish(struct agent *a, const struct gs_mps_gpu *gpus, size_t n) {
    static struct gs_mps_daemon_status st[GS_METRICS_MAX_MPS];
    unsigned k = 0;
    for (size_t i = 0; i < n && i < GS_METRICS_MAX_MPS; i++) {
        struct gs_mps_info info;
        if (gs_mps_sup_info(a->mps.sup, gpus[i].uuid, &info) < 0)
            continue;
        gs_strlcpy(st[k].uuid, gpus[i].uuid, sizeof(st[k].uuid));
        gs_strlcpy(st[k].state, gs_mps_state_name(info.state), sizeof(st[k].state));
        st[k++].restarts = info.restarts;
    }
    a->mps.n_published = k;
    agent_shared_set_mps(&a->shared, st, k);
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
    for (unsigned i = 0; a->policy->mps_exclusive_process && i < next->n_resources; i++) {
        const struct gs_resource *r = &next->resources[i];
        for (unsigned k = 0; r->mps && k < r->n_devices; k++)
            if (!r->devices[k].mig && r->devices[k].gpu < GS_MAX_GPUS) /* a MIG GPU's mode is not per instance */
                want[r->devices[k].gpu] = true;
    }
    for (unsigned g = 0; a->inv && g < a->inv->n_gpus && g < GS_MAX_GPUS; g++) {
        int cur = a->inv->gpus[g].compute_mode;
        if (want[g] && cur >= 0 && cur != NVML_COMPUTEMODE_EXCLUSIVE_PROCESS) {
            a->mps.cm_saved[g] = cur + 1;
            set_compute_mode(a, g, NVML_COMPUTEMODE_EXCLUSIVE_PROCESS, "MPS, gpuslice.mps.exclusiveProcess");
        } else if (!want[g] && a->mps.cm_saved[g]) {
            set_compute_mode(a, g, (unsigned)(a->mps.cm_saved[g] - 1), "no longer MPS with exclusiveProcess");
            a->mps.cm_saved[g] = 0;
        }
    }
}

void agent_mps_sync(struct agent *a, struct gs_plan *next) {
    static struct gs_mps_gpu gpus[GS_METRICS_MAX_MPS];
    mps_compute_modes(a, next);
    size_t n = mps_wanted_dra(a, gpus, mps_wanted(next, gpus, GS_METRICS_MAX_MPS), GS_METRICS_MAX_MPS);
    if (!n && !a->mps.sup)
        return;
    if (mps_supervisor(a) < 0)
        return;
    if (n) {
        char shm[300];
        snprintf(shm, sizeof(shm), "%s/shm", a->mps.root);
        if (gs_mkdir_p(shm, 0755) == 0)
            chmod(shm, 01777); /* /dev/shm of every MPS client */
        else
            log_warn("MPS: cannot create %s: clients get no shared memory mount", shm);
    }
    if (gs_mps_sup_set_gpus(a->mps.sup, gpus, n) < 0)
        log_error("MPS: the plan's and DRA's GPUs were not handed to the supervisor (see above)");
    if (!a->mps.stale_checked) {
        a->mps.stale_checked = true;
        gs_mps_sup_stop_stale(a->mps.sup);
    }
    for (unsigned i = 0; i < next->n_resources; i++) {
        struct gs_resource *r = &next->resources[i];
        for (unsigned k = 0; r->mps && k < r->n_devices; k++)
            if (gs_mps_sup_state(a->mps.sup, r->devices[k].uuid) != GS_MPS_RUNNING)
                r->devices[k].healthy = false;
    }
    mps_publish(a, gpus, n);
}

void agent_mps_job(void *ctx, uint64_t now_ns) {
    struct agent *a = ctx;
    (void)now_ns; /* the supervisor's deadlines are to the nanosecond: asked again below */
    if (!a->mps.sup)
        return;
    struct gs_mps_change ch[16];
    size_t n = 0;
    if (gs_mps_sup_tick(a->mps.sup, gs_now_ns(), ch, GS_ARRAY_SIZE(ch), &n) < 0)
        return;
    for (size_t i = 0; i < n; i++)
        log_info("MPS daemon of %s is %s: its devices are %s", ch[i].uuid, gs_mps_state_name(ch[i].state),
                 ch[i].healthy ? "Healthy" : "Unhealthy");
    if (n || a->mps.n_published)
        loop_kick(&a->loop, a->replan_job); /* state.c replans later in this round */
}

uint64_t agent_mps_due(void *ctx) {
    const struct agent *a = ctx;
    return a->mps.sup ? gs_mps_sup_next_due(a->mps.sup) : UINT64_MAX;
}

void agent_mps_stop(struct agent *a) {
    if (a->mps.sup) {
        loop_del_fd(&a->loop, gs_mps_sup_fd(a->mps.sup));
        gs_mps_sup_stop_all(a->mps.sup); /* quit, directories removed */
        gs_mps_sup_free(a->mps.sup);
        a->mps.sup = NULL;
    }
    for (unsigned g = 0; g < GS_MAX_GPUS; g++) /* MPS is gone: other CUDA clients may use the GPU again */
        if (a->mps.cm_saved[g])
            set_compute_mode(a, g, (unsigned)(a->mps.cm_saved[g] - 1), "the agent stops");
}

const char *agent_mps_down(const struct agent *a, const char *uuid) {
    if (!a->mps.sup)
        return "no MPS supervisor runs (see the agent's log)";
    enum gs_mps_state st = gs_mps_sup_state(a->mps.sup, uuid);
    return st == GS_MPS_RUNNING ? NULL : gs_mps_state_name(st);
}
