/* metrics.h: the agent's Prometheus metrics in the text exposition format (version 0.0.4),
 * rendered from the inventory, the plan and the agent's counters. Pure: the HTTP side is
 * src/agent/metrics_http.c. */
#ifndef GS_METRICS_H
#define GS_METRICS_H

#include <stdbool.h>
#include <stddef.h>

#include "core/inventory.h"
#include "core/plan.h"

/* One guarded allocation's use of one GPU, from the agent's reconcile of the guard's counters with
 * NVML's per-process memory (src/agent/guard_reconcile.h). */
#define GS_METRICS_MAX_GUARD 256
struct gs_guard_usage {
    char allocation[64];                           /* the directory under the guard root */
    char resource[GS_RESOURCE_NAME_MAX];           /* one device it was allocated for (its devices file), */
    char device[GS_DEVICE_ID_MAX];                 /* to find its pod among the pod devices */
    char uuid[GS_UUID_LEN];                        /* the GPU */
    unsigned long long limit;                      /* the quota */
    unsigned long long counted;                    /* what the guard counted (its region) */
    unsigned long long nvml;                       /* NVML's used memory of the processes that map the region */
    unsigned processes;                            /* how many such processes NVML lists */
};

/* One MPS control daemon (GPU or MIG instance), from the agent's supervisor (src/mps). */
#define GS_METRICS_MAX_MPS 128
struct gs_mps_daemon_status {
    char uuid[GS_UUID_LEN];
    char state[16];                                /* stopped, starting, running, restarting, failed */
    unsigned restarts;
};

/* A device the kubelet assigned to a container (PodResources List), for attribution. */
#define GS_METRICS_MAX_POD_DEVICES 1024
struct gs_pod_device {
    char ns[64], pod[128], container[64];
    char resource[GS_RESOURCE_NAME_MAX];
    char device[GS_DEVICE_ID_MAX];
};

/* One container's share of a GPU's time over the last sampling interval (src/core/podutil.h);
 * ns, pod and container empty: the GPU's processes no container is known for. */
#define GS_METRICS_MAX_POD_UTIL 1024
struct gs_pod_util {
    char ns[64], pod[128], container[64];
    unsigned gpu;                                  /* NVML index */
    char uuid[GS_UUID_LEN];
    double ratio;                                  /* 0..1: of the GPU's time, or of its GPU instance's */
    char mig_uuid[GS_UUID_LEN];                    /* "" for a whole GPU; else the GPU instance's (first) */
    unsigned gi_id;                                /* MIG device, its GPU instance's ID and profile */
    char profile[GS_PROFILE_NAME_LEN + 16];
};

struct gs_metrics_counters {
    unsigned long long xid_total[GS_MAX_GPUS];     /* every Xid seen, ignored ones included */
    unsigned n_resources;
    struct {
        char name[GS_RESOURCE_NAME_MAX];
        unsigned long long allocations, errors;    /* Allocate calls answered / refused */
    } res[GS_PLAN_MAX_RESOURCES];
    double reconcile_seconds;                      /* the last inventory read + plan */
    unsigned long long reconcile_errors;
    unsigned long long policy_reloads, policy_reload_errors;
    unsigned n_guard;
    struct gs_guard_usage guard[GS_METRICS_MAX_GUARD];
    unsigned n_mps;
    struct gs_mps_daemon_status mps[GS_METRICS_MAX_MPS];
    bool pods_known;                               /* PodResources answered (else no attribution) */
    unsigned n_pod_devices;
    struct gs_pod_device pod_devices[GS_METRICS_MAX_POD_DEVICES];
    unsigned n_pod_util;
    struct gs_pod_util pod_util[GS_METRICS_MAX_POD_UTIL];
};

/* Counts one Allocate of resource (creating its entry). */
void gs_metrics_count_alloc(struct gs_metrics_counters *c, const char *resource, bool ok);

/* The container PodResources names for device `device` of `resource`, or NULL (none, or
 * PodResources not known). */
const struct gs_pod_device *gs_metrics_pod_of(const struct gs_metrics_counters *c, const char *resource,
                                              const char *device);

/* Renders every metric; returns the length, or -ENOSPC / -ENOMEM. Label values are escaped as
 * the format requires. */
int gs_metrics_format(const struct gs_inventory *inv, const struct gs_plan *plan, const struct gs_health *health,
                      const struct gs_metrics_counters *c, char *buf, size_t len);

#endif
