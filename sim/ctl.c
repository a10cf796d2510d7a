/* ctl.c: the simulator's own controls (simctl.h): Xid injection, simulated processes, GPU reset
 * and loss, the fault schedule. Each runs under the state lock like an NVML call. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "simctl.h"
#include "simlib.h"
#include "util/util.h"

/* ---- simulator controls (not NVML) ---------------------------------------------------------- */

/* Each control returns 0 or -errno and writes a message to err. */
#define CTL_BEGIN                                                                                             \
    if (lock_state(true, NULL) != NVML_SUCCESS) {                                                                   \
        snprintf(err, errlen, "simulated NVML is not initialised");                                           \
        return -ENXIO;                                                                                        \
    }
#define CTL_END(rc)                                                                                           \
    do {                                                                                                      \
        int rc_ = (rc);                                                                                       \
        if (unlock_state(rc_ == 0 ? NVML_SUCCESS : NVML_ERROR_UNKNOWN, rc_ == 0) != NVML_SUCCESS && rc_ == 0) { \
            snprintf(err, errlen, "failed to save the simulated state in %s", sim_state_dir);                    \
            rc_ = -EIO;                                                                                       \
        }                                                                                                     \
        return rc_;                                                                                           \
    } while (0)

static int check_gpu(unsigned gpu, char *err, size_t errlen) {
    if (gpu >= sim_st->n_gpus) {
        snprintf(err, errlen, "GPU %u does not exist: the node has %u GPU(s)", gpu, sim_st->n_gpus);
        return -ENODEV;
    }
    return 0;
}

EXPORT int gpusliceSimInjectXid(unsigned gpu, unsigned long long xid, unsigned gi_id, char *err, size_t errlen) {
    CTL_BEGIN;
    int r = check_gpu(gpu, err, errlen);
    if (r < 0)
        CTL_END(r);
    struct sim_gpu *g = &sim_st->gpus[gpu];
    if (gi_id != NO_GI && (gi_id >= SIM_MAX_GI || !g->gis[gi_id].used)) {
        snprintf(err, errlen, "GPU %u has no GPU instance %u", gpu, gi_id);
        CTL_END(-ENOENT);
    }
    if (g->n_events == SIM_EVENT_RING) {
        memmove(&g->events[0], &g->events[1], sizeof(g->events[0]) * (SIM_EVENT_RING - 1));
        g->n_events--;
    }
    g->events[g->n_events++] = (struct sim_event){ ++sim_st->event_seq, xid, gi_id };
    CTL_END(0);
}

EXPORT int gpusliceSimProcessAdd(unsigned gpu, int gi_id, int ci_id, unsigned pid, unsigned long long mem_bytes,
                                 const char *name, char *err, size_t errlen) {
    CTL_BEGIN;
    int r = check_gpu(gpu, err, errlen);
    if (r < 0)
        CTL_END(r);
    struct sim_gpu *g = &sim_st->gpus[gpu];
    if (pid == 0) {
        snprintf(err, errlen, "pid must be > 0");
        CTL_END(-EINVAL);
    }
    if (g->lost) {
        snprintf(err, errlen, "GPU %u is lost", gpu);
        CTL_END(-ENODEV);
    }
    unsigned long long total = g->model->mem_mib << 20;
    if (g->mig_current) {
        if (gi_id < 0 || gi_id >= SIM_MAX_GI || !g->gis[gi_id].used) {
            snprintf(err, errlen, "GPU %u is in MIG mode: a process must run on an existing MIG device", gpu);
            CTL_END(-EINVAL);
        }
        if (ci_id < 0)
            for (int c = 0; c < SIM_MAX_CI && ci_id < 0; c++)
                if (g->gis[gi_id].cis[c].used)
                    ci_id = c;
        if (ci_id < 0 || ci_id >= SIM_MAX_CI || !g->gis[gi_id].cis[ci_id].used) {
            snprintf(err, errlen, "GPU %u GPU instance %d has no compute instance %d", gpu, gi_id, ci_id);
            CTL_END(-EINVAL);
        }
        total = gs_model_profile_by_id(g->model, g->gis[gi_id].profile_id)->mem_mib << 20;
    } else if (gi_id >= 0) {
        snprintf(err, errlen, "GPU %u is not in MIG mode", gpu);
        CTL_END(-EINVAL);
    } else {
        ci_id = -1;
    }
    for (unsigned i = 0; i < g->n_procs; i++) {
        if (g->procs[i].pid == pid) {
            snprintf(err, errlen, "process %u already runs on GPU %u", pid, gpu);
            CTL_END(-EEXIST);
        }
    }
    if (g->n_procs == SIM_MAX_PROCS) {
        snprintf(err, errlen, "GPU %u already has %d processes", gpu, SIM_MAX_PROCS);
        CTL_END(-ENOSPC);
    }
    unsigned long long used = used_bytes(g, g->mig_current ? gi_id : -1, -1);
    if (mem_bytes > total - used) {
        snprintf(err, errlen, "out of memory: %llu MiB requested, %llu MiB free", mem_bytes >> 20,
                 (total - used) >> 20);
        CTL_END(-ENOMEM);
    }
    sim_energy_settle(g); /* the power it draws changes from now */
    struct sim_proc *p = &g->procs[g->n_procs++];
    *p = (struct sim_proc){
        .pid = pid, .mem = mem_bytes, .gi = g->mig_current ? gi_id : -1, .ci = ci_id, .since_us = sim_now_us()
    };
    gs_strlcpy(p->name, name ? name : "", sizeof(p->name));
    CTL_END(0);
}

EXPORT int gpusliceSimProcessRemove(unsigned pid, int gpu, char *err, size_t errlen) {
    CTL_BEGIN;
    unsigned removed = 0;
    for (unsigned i = 0; i < sim_st->n_gpus; i++) {
        if (gpu >= 0 && (unsigned)gpu != i)
            continue;
        struct sim_gpu *g = &sim_st->gpus[i];
        for (unsigned k = 0; k < g->n_procs;) {
            if (g->procs[k].pid == pid) {
                sim_energy_settle(g);
                g->procs[k] = g->procs[--g->n_procs];
                removed++;
            } else {
                k++;
            }
        }
    }
    if (!removed) {
        snprintf(err, errlen, "no simulated process %u", pid);
        CTL_END(-ESRCH);
    }
    CTL_END(0);
}

EXPORT int gpusliceSimProcessUtil(unsigned pid, int gpu, const unsigned *sm, unsigned n, char *err, size_t errlen) {
    CTL_BEGIN;
    if (n > SIM_UTIL_STEPS) {
        snprintf(err, errlen, "a duty schedule has at most %d steps, not %u", SIM_UTIL_STEPS, n);
        CTL_END(-E2BIG);
    }
    for (unsigned k = 0; k < n; k++) {
        if (sm[k] > 100) {
            snprintf(err, errlen, "step %u of the duty schedule: %u is not a percentage (0..100)", k + 1, sm[k]);
            CTL_END(-EINVAL);
        }
    }
    unsigned found = 0;
    unsigned long long now = sim_now_us();
    for (unsigned i = 0; i < sim_st->n_gpus; i++) {
        if (gpu >= 0 && (unsigned)gpu != i)
            continue;
        struct sim_gpu *g = &sim_st->gpus[i];
        for (unsigned k = 0; k < g->n_procs; k++) {
            struct sim_proc *p = &g->procs[k];
            if (p->pid != pid)
                continue;
            found++;
            p->n_util = n;
            p->util_since_us = now;
            for (unsigned j = 0; j < n; j++)
                p->util[j] = (unsigned char)sm[j];
        }
    }
    if (!found) {
        if (gpu >= 0)
            snprintf(err, errlen, "no simulated process %u on GPU %d", pid, gpu);
        else
            snprintf(err, errlen, "no simulated process %u", pid);
        CTL_END(-ESRCH);
    }
    CTL_END(0);
}

/* A GPU reset activates a pending MIG mode and, as on real hardware, drops every GPU and compute
 * instance (they do not survive a reset). It is refused while processes run. */
EXPORT int gpusliceSimResetGpu(unsigned gpu, char *err, size_t errlen) {
    CTL_BEGIN;
    int r = check_gpu(gpu, err, errlen);
    if (r < 0)
        CTL_END(r);
    struct sim_gpu *g = &sim_st->gpus[gpu];
    if (g->n_procs) {
        snprintf(err, errlen, "GPU %u cannot be reset: %u process(es) still use it", gpu, g->n_procs);
        CTL_END(-EBUSY);
    }
    g->mig_current = g->mig_pending;
    g->lost = false;
    sim_health_reset(g);
    memset(g->gis, 0, sizeof(g->gis));
    CTL_END(0);
}

EXPORT int gpusliceSimSetLost(unsigned gpu, int lost, char *err, size_t errlen) {
    CTL_BEGIN;
    int r = check_gpu(gpu, err, errlen);
    if (r < 0)
        CTL_END(r);
    sim_st->gpus[gpu].lost = lost != 0;
    CTL_END(0);
}

EXPORT int gpusliceSimSetFaults(const char *spec, char *err, size_t errlen) { return sim_set_faults(spec, err, errlen); }

EXPORT int gpusliceSimRoot(char *buf, size_t len, char *err, size_t errlen) {
    if (lock_state(false, NULL) != NVML_SUCCESS) {
        snprintf(err, errlen, "simulated NVML is not initialised");
        return -ENXIO;
    }
    char root[PATH_MAX];
    sim_root_dir(sim_state_dir, root, sizeof(root));
    unlock_state(NVML_SUCCESS, false);
    if (gs_strlcpy(buf, root, len) < 0) {
        snprintf(err, errlen, "the root's path %s is too long", root);
        return -ENAMETOOLONG;
    }
    return 0;
}
