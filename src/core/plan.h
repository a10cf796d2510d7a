/* plan.h: what the node advertises to Kubernetes. A pure function of the inventory (what NVML
 * says), the sharing policy and the health state: which resource names exist and which devices
 * each carries. No I/O, so every policy rule is unit-tested without a GPU or a kubelet. */
#ifndef GS_PLAN_H
#define GS_PLAN_H

#include <stdbool.h>

#include "config/policy.h"
#include "core/inventory.h"

enum gs_dev_kind { GS_DEV_WHOLE = 0, GS_DEV_REPLICA, GS_DEV_MIG, GS_DEV_MPS };

/* A fractional GPU (gpuslice.gpus mode fractional, docs/fractional.md) carries two resources of
 * units a pod writes as integers: GiB of its memory ("GPU-...::mem-<k>", one per GiB, the GPU's
 * memory rounded to the nearest GiB) and percent of its time ("GPU-...::sm-<k>", 100). Both are
 * replicas (GS_DEV_REPLICA) of the GPU; a container's units must all be of one GPU. */
enum gs_fraction { GS_FRAC_NONE = 0, GS_FRAC_MEMORY, GS_FRAC_COMPUTE };
#define GS_FRAC_MEMORY_RESOURCE "gpuslice.io/gpu-memory"
#define GS_FRAC_COMPUTE_RESOURCE "gpuslice.io/gpu-compute"
#define GS_FRAC_MEMORY_UNIT (1ULL << 30) /* bytes of one gpuslice.io/gpu-memory unit */
#define GS_FRAC_COMPUTE_UNITS 100u       /* gpuslice.io/gpu-compute units of one GPU */

#define GS_DEVICE_ID_MAX (GS_UUID_LEN + 16)

struct gs_device {
    char id[GS_DEVICE_ID_MAX];  /* "GPU-...", "GPU-...::3", "MIG-...", "MIG-...::1" (a replica of a MIG device) */
    enum gs_dev_kind kind;
    unsigned gpu;               /* NVML index of the physical GPU */
    unsigned replica;           /* GS_DEV_REPLICA, GS_DEV_MPS: n in "::n" */
    char uuid[GS_UUID_LEN];     /* the physical device: GPU UUID, or MIG UUID */
    unsigned minor;             /* /dev/nvidia<minor> of the GPU */
    unsigned gi_id, ci_id;      /* GS_DEV_MIG, and replicas when `mig` */
    bool mig;                   /* GS_DEV_REPLICA, GS_DEV_MPS: the replica is of a MIG device (uuid is its MIG UUID) */
    unsigned mps_percent;       /* GS_DEV_MPS: active thread percentage of one replica */
    unsigned long long mps_pinned; /* GS_DEV_MPS: pinned device memory of one replica (0: no limit) */
    int numa_node;              /* -1 unknown */
    bool healthy;
    unsigned long long quota;   /* GS_DEV_REPLICA: VRAM bytes the guard allows it (0: no guard) */
    unsigned arch;              /* NVML architecture of the physical GPU (the guard's context overhead) */
    enum gs_fraction fraction;  /* a unit of a fractional GPU (quota: GS_FRAC_MEMORY_UNIT for memory) */
};

/* A MIG device, or a (time-sliced or MPS) replica of one: Allocate names it by MIG UUID or
 * "<gpu>:<gi>" and passes its GPU and compute instance capability nodes. */
static inline bool gs_device_is_mig(const struct gs_device *d) {
    return d->kind == GS_DEV_MIG || d->mig;
}

struct gs_resource {
    char name[GS_RESOURCE_NAME_MAX];
    bool replicated;            /* carries time-sliced or MPS replicas */
    bool mps;                   /* carries MPS replicas (never mixed with time-sliced ones) */
    bool fail_gt_one;           /* refuse requests of more than one device */
    enum gs_fraction fraction;  /* the fractional units of GS_FRAC_*_RESOURCE (GS_FRAC_NONE: other devices) */
    unsigned n_devices, cap;
    struct gs_device *devices;  /* sorted by GPU, then replica / MIG instance */
};

/* Per-GPU decision, for `apply` and labels. */
struct gs_gpu_plan {
    enum gs_gpu_mode mode;      /* resolved: never GS_MODE_DEFAULT */
    unsigned replicas;          /* time-slicing, MPS; fractional: its gpuslice.io/gpu-memory units */
    const char *resource;       /* points into the plan's resources, NULL if nothing advertised */
    bool dra;                   /* served by the DRA driver (gpuslice.dra.gpus): mode disabled here */
};

#define GS_PLAN_MAX_RESOURCES 64
#define GS_PLAN_MAX_WARNINGS 32
#define GS_PLAN_MAX_ERRORS 8
#define GS_PLAN_LINE_MAX 256

struct gs_plan {
    unsigned n_resources;
    struct gs_resource resources[GS_PLAN_MAX_RESOURCES];
    unsigned n_gpus;
    struct gs_gpu_plan gpus[GS_MAX_GPUS];
    unsigned n_warnings;
    char warnings[GS_PLAN_MAX_WARNINGS][GS_PLAN_LINE_MAX];
    /* Settings of the policy that this node cannot honour (memoryPerReplica larger than the
     * device, migStrategy single on a node mixing MIG and whole GPUs), as
     * "FILE:LINE:COLUMN: PATH: message"; what they concern is not advertised. Each is also one of
     * the warnings, which the agent logs; `apply` fails on them. */
    unsigned n_errors;
    char errors[GS_PLAN_MAX_ERRORS][GS_PLAN_LINE_MAX];
};

/* Health input: GPUs marked unhealthy by the agent (Xid). Lost GPUs in the inventory are always
 * unhealthy. NULL = all healthy. */
struct gs_health {
    bool unhealthy[GS_MAX_GPUS];
    unsigned withdrawn_gi[GS_MAX_GPUS]; /* bit g: MIG devices of GPU instance g are not advertised
                                           (withdrawn before a MIG apply destroys them) */
};

/* True if the policy's gpuslice.dra.gpus gives the GPU (NVML index, UUID) to the DRA driver, whose
 * GPUs the plan leaves out; unset: if_unset (the agent puts "none" in force without the key,
 * `gpuslice dra slices` previews "all"). */
bool gs_plan_dra_serves(const struct gs_policy *p, unsigned index, const char *uuid, bool if_unset);

/* The gpuslice.io/gpu-memory units of a fractional GPU of mem_total bytes: its GiB, rounded to the
 * nearest (an H100's 79.6 GiB is 80). Inline: the scheduler extender counts a GPU's memory so. */
static inline unsigned gs_frac_memory_units(unsigned long long mem_total) {
    return (unsigned)((mem_total + GS_FRAC_MEMORY_UNIT / 2) / GS_FRAC_MEMORY_UNIT);
}

/* Builds the plan. Returns 0, or -ENOMEM. Problems that only disable part of the node (a MIG rule
 * on a GPU without MIG mode, ...) become warnings; settings this node cannot honour become
 * errors (plan->errors, with the policy's file:line:column) and what they concern is left out. */
int gs_plan_build(const struct gs_inventory *inv, const struct gs_policy *policy, const struct gs_health *health,
                  struct gs_plan *out);
void gs_plan_free(struct gs_plan *plan);

const struct gs_resource *gs_plan_resource(const struct gs_plan *plan, const char *name);
const struct gs_device *gs_resource_device(const struct gs_resource *r, const char *id);

/* True if the two plans advertise the same resources with the same devices and health. */
bool gs_plan_equal(const struct gs_plan *a, const struct gs_plan *b);
bool gs_resource_equal(const struct gs_resource *a, const struct gs_resource *b);

const char *gs_mode_name(enum gs_gpu_mode mode);

#endif
