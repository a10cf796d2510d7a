/* podutil.h: per-pod GPU utilization from NVML's per-process samples (pure).
 *
 * NVML (nvmlDeviceGetProcessUtilization) keeps, per GPU, samples of the sampling periods in which
 * a process's kernels ran: one sample per such process and period, stamped at the period's end,
 * with the share of the period they ran (smUtil, percent). A process that did not run in a period
 * has no sample in it. The agent reads the samples newer than the newest it has seen, once per
 * interval, and folds them here into each process's mean over the interval: the sum of its
 * samples' shares divided by the periods in the interval (the period: the smallest gap between
 * two samples of one process, remembered). Processes are then attributed to the containers that
 * hold the GPU's devices (gs_podutil_attribute). */
#ifndef GS_PODUTIL_H
#define GS_PODUTIL_H

#include <stdbool.h>
#include <stddef.h>

#include "core/metrics.h"
#include "core/plan.h"

#define GS_PODUTIL_MAX_SAMPLES 8192   /* per GPU and read; more is refused (the interval dropped) */
#define GS_PODUTIL_MIN_PERIOD_US 1000 /* a smaller gap between one process's samples is not a period */

/* One sample as read. */
struct gs_util_sample {
    unsigned pid;
    unsigned sm;                  /* percent of the period */
    unsigned long long ts_us;     /* the period's end */
};

/* What is remembered per GPU between reads. */
struct gs_util_window {
    unsigned long long last_seen_us;  /* the newest sample's timestamp: the next read's lastSeenTimeStamp */
    unsigned long long start_us;      /* where the next interval starts */
    unsigned long long period_us;     /* the sampling period (0: not known yet) */
};

/* One process's mean share of the GPU over the interval, 0..1. */
struct gs_proc_util {
    unsigned pid;
    double ratio;
};

/* Starts a window whose first interval began at start_us (now minus the agent's interval). */
void gs_util_window_init(struct gs_util_window *w, unsigned long long start_us);

/* Folds one read of n samples (any order; those not newer than w->last_seen_us are ignored) made
 * at now_us (n == 0: NVML had none since, NOT_FOUND: every process 0). Writes each process's mean
 * into out (distinct pids, at most max; the rest dropped) and returns how many; advances w. */
unsigned gs_util_fold(struct gs_util_window *w, const struct gs_util_sample *s, unsigned n, unsigned long long now_us,
                      struct gs_proc_util *out, unsigned max);

#define GS_POD_UID_MAX 40

/* How a process was tied to a container's allocation. */
struct gs_util_owner {
    unsigned pid;
    char resource[GS_RESOURCE_NAME_MAX]; /* the allocation it belongs to ("" none): a guarded */
    char device[GS_DEVICE_ID_MAX];       /* allocation whose counters region it maps */
    bool in_pod;                         /* its cgroup is a Kubernetes pod's (kubepods) */
    char pod_uid[GS_POD_UID_MAX];        /* that pod's UID from the cgroup path ("" unknown) */
};

/* A device the kubelet's checkpoint (device-plugins/kubelet_internal_checkpoint) assigns to a
 * container of a pod known by UID. */
struct gs_uid_device {
    char uid[GS_POD_UID_MAX];
    char container[64];
    char resource[GS_RESOURCE_NAME_MAX];
    char device[GS_DEVICE_ID_MAX];
};

/* A pod that holds a device of a GPU through a DRA claim (the kubelet's DRA manager checkpoint:
 * src/kubelet/drastate.h), known by UID, with the labels of its series. */
struct gs_dra_holder {
    char uid[GS_POD_UID_MAX];
    char ns[64], pod[128], container[64]; /* container "": not known (several, or none said) */
    unsigned gpu;                         /* NVML index */
    int gi;                               /* -1: the GPU (whole or a share); else a MIG device's GPU instance */
};

/* The entries of GPU `gpu` (its UUID) appended to out[*n..max): one per container that holds a
 * device of this GPU in PodResources (0 when its processes did not run), with the sum of its
 * processes' shares (at most 1), and one with empty namespace/pod/container for the processes no
 * container is known for. A process belongs to a container, in this order:
 *   1. it maps the counters region of a guarded allocation PodResources names for the container;
 *   2. its cgroup names pod UID U, and the checkpoint (ck) gives U's container that holds devices
 *      of this GPU (PodResources gives the names: same container, resource and device); when
 *      several of U's containers hold devices of the GPU, the pod's entry with container "";
 *   3. it is in a pod's cgroup, one container alone holds devices of the GPU, and its pod is not
 *      known from the checkpoint (no UID in its cgroup, or no checkpoint: n_ck 0).
 * Anything else (host processes, pods without a device of ours) goes to the no-pod entry. */
void gs_podutil_attribute(const struct gs_plan *plan, const struct gs_metrics_counters *c, unsigned gpu,
                          const char *uuid, const struct gs_proc_util *pu, unsigned n_pu,
                          const struct gs_util_owner *owners, unsigned n_owners, const struct gs_uid_device *ck,
                          unsigned n_ck, struct gs_pod_util *out, unsigned max, unsigned *n);

/* gs_podutil_attribute with the DRA claims' holders too (dra[0..n_dra), those of GPU gpu with
 * gi -1): each has an entry (0 when its processes did not run), and between rules 1 and 2 a
 * process whose cgroup names pod UID U goes to U's holder on this GPU; rule 3 applies only when
 * no DRA holder is on the GPU. */
void gs_podutil_attribute_dra(const struct gs_plan *plan, const struct gs_metrics_counters *c, unsigned gpu,
                              const char *uuid, const struct gs_proc_util *pu, unsigned n_pu,
                              const struct gs_util_owner *owners, unsigned n_owners, const struct gs_uid_device *ck,
                              unsigned n_ck, const struct gs_dra_holder *dra, unsigned n_dra, struct gs_pod_util *out,
                              unsigned max, unsigned *n);

/* The entries of MIG device m (the first of its GPU instance) of GPU `gpu`, whose GPU instance
 * was busy `ratio` of the interval (NVML GPM: no per-process figure under MIG), appended to
 * out[*n..max): one per container that holds a MIG device of that GPU instance (or a replica of
 * one) in PodResources; when exactly one does, the ratio is its; else (none, or several that
 * cannot be told apart) it goes to the instance's entry with empty namespace/pod/container. */
void gs_podutil_attribute_mig(const struct gs_plan *plan, const struct gs_metrics_counters *c, unsigned gpu,
                              const char *uuid, const struct gs_mig_device *m, double ratio, struct gs_pod_util *out,
                              unsigned max, unsigned *n);

/* gs_podutil_attribute_mig with the DRA claims' holders of MIG devices (dra[0..n_dra), those of
 * GPU gpu and m's GPU instance) counted among the instance's holders. */
void gs_podutil_attribute_mig_dra(const struct gs_plan *plan, const struct gs_metrics_counters *c, unsigned gpu,
                                  const char *uuid, const struct gs_mig_device *m, double ratio,
                                  const struct gs_dra_holder *dra, unsigned n_dra, struct gs_pod_util *out,
                                  unsigned max, unsigned *n);

/* True if a /proc/PID/cgroup text places the process in a Kubernetes pod (a "kubepods" path
 * component: cgroupfs /kubepods/..., systemd kubepods.slice / kubepods-*.slice). */
bool gs_cgroup_in_pod(const char *text);

/* The pod UID of a /proc/PID/cgroup text in a pod: the "pod" + UID component under kubepods
 * (cgroupfs: pod0a1b...-..., systemd: kubepods-QOS-pod0a1b..._....slice, underscores for dashes),
 * written with dashes into uid. Returns 0, or -ENOENT when there is none. */
int gs_cgroup_pod_uid(const char *text, char uid[GS_POD_UID_MAX]);

#endif
