/* slices.h: what gpuslice's DRA driver publishes: the node's ResourceSlice objects
 * (resource.k8s.io/v1, Kubernetes 1.36) as JSON, a pure function of the inventory and the policy
 * (docs/dra.md). No I/O: the REST client (src/kube/) creates or updates the objects.
 *
 * Only the GPUs the policy's gpuslice.dra.gpus gives the DRA driver (every GPU when the key is
 * not written: a preview; the agent puts "none" in force then).
 *
 * One pool per node (pool name = node name), every slice of it with the same generation and
 * resourceSliceCount. Per GPU, by the policy's mode (src/core/plan.h resolves it; DRA ignores
 * flags.migStrategy):
 *   whole         one device "gpu-<index>" (type "gpu", sharing "exclusive"), capacity memory;
 *   time-slicing  one device "gpu-<index>", allowMultipleAllocations, consumable capacities
 *   / mps         memory (1Gi steps) and compute (percent 1..100; MPS: clients, at most 48),
 *                 sharing "time-slicing" / "mps";
 *   MIG mode      its existing MIG devices as ordinary devices (type "mig"), and, unless the policy
 *                 has a gpuslice.mig.config layout, every profile placement on free memory slices
 *                 as an on-demand device consuming the GPU's shared counters (counter set
 *                 "gpu-<index>-counter-set": compute-slices, memory-slice-<n>, profile-<id>), in
 *                 slices of their own (sharedCounters and devices never share a slice).
 * Device names:
 *   "gpu-<index>"                           a GPU (whole or shared)
 *   "gpu-<index>-mig-<profile>-<id>-<start>" a MIG placement (existing or on demand), as NVIDIA's
 *                                           driver names it: the profile without dots, '+' as '-'
 *                                           ("3g40gb", "1g10gb-me"), id the GI profile ID, start
 *                                           the placement start. An existing instance keeps the
 *                                           name of the placement it was made on, so a claim
 *                                           allocated on demand names it after it is created.
 * Compute instances smaller than their GPU instance are not published (as for the device plugin). */
#ifndef GS_DRA_SLICES_H
#define GS_DRA_SLICES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "config/policy.h"
#include "core/inventory.h"
#include "core/plan.h"

#define GS_DRA_DRIVER_DEFAULT "gpu.gpuslice.io"
#define GS_DRA_MAX_DEVICES_PER_SLICE 128          /* ResourceSliceMaxDevices */
#define GS_DRA_MAX_COUNTER_DEVICES_PER_SLICE 64   /* ...WithAdvancedFeatures (consumesCounters) */
#define GS_DRA_MAX_COUNTER_SETS_PER_SLICE 8       /* ResourceSliceMaxCounterSets */
#define GS_DRA_MEMORY_STEP (1ULL << 30)           /* shared GPUs: memory requests in 1 GiB steps */
#define GS_DRA_DEVICE_NAME_MAX 64                 /* a DNS label: at most 63 characters */

/* The node's ResourceSlices: *slices_out is a new JSON array of complete ResourceSlice objects
 * (apiVersion, kind, metadata.name "<node>-<driver>-<k>", spec), at least one (an empty pool is a
 * slice without devices). `generation` is spec.pool.generation of every slice (the caller bumps
 * it whenever the content changes). Returns 0, -EINVAL (a node or driver name Kubernetes would
 * refuse, a device name or attribute that cannot be written, too many counters), or -ENOMEM; the
 * error is one line in err. */
int gs_dra_slices_build(const struct gs_inventory *inv, const struct gs_policy *policy, const char *node,
                        const char *driver, long long generation, json_t **slices_out, char *err, size_t errlen);

/* What the agent's health holds against a GPU, for the slices: a critical Xid (not one of
 * gpuslice.health.ignoredXids) until recoveryQuietPeriod passes without another. Each device of
 * the GPU (the GPU, its MIG devices and on-demand placements) then carries a DRA device taint
 * (resource.k8s.io/v1 Device.taints; DRADeviceTaints, beta and on by default since 1.36), as
 * NVIDIA's DRA driver taints its devices: key "<driver>/xid", value the Xid, effect NoSchedule:
 * the scheduler allocates the device to no new claim that does not tolerate it, the claims
 * allocated keep it. A slice with a tainted device holds at most 64 devices. */
struct gs_dra_taints {
    bool xid[GS_MAX_GPUS];
    unsigned long long xid_code[GS_MAX_GPUS];
};
#define GS_DRA_TAINT_XID "xid" /* the key's name: "<driver>/xid" */

/* gs_dra_slices_build with the devices of the GPUs taints names tainted (NULL: none). */
int gs_dra_slices_build_tainted(const struct gs_inventory *inv, const struct gs_policy *policy,
                                const struct gs_dra_taints *taints, const char *node, const char *driver,
                                long long generation, json_t **slices_out, char *err, size_t errlen);

/* The plan of every GPU as DRA sees it (no resource names: every rule's devices under a name of
 * its own; MIG devices whatever flags.migStrategy says; gpuslice.dra.gpus not applied): what the
 * slices publish per GPU and what prepare enforces. 0 or -ENOMEM; gs_plan_free(out) after. */
int gs_dra_plan(const struct gs_inventory *inv, const struct gs_policy *policy, struct gs_plan *out);

/* What a device name of ours names (for prepare). */
struct gs_dra_device_ref {
    unsigned gpu;            /* NVML index of the GPU */
    bool mig;                /* a MIG placement: profile_id and start are set */
    unsigned profile_id;     /* GI profile ID */
    unsigned start;          /* placement start (memory slice) */
};

/* Parses a device name of the form above. Returns 0 or -EINVAL (not one of ours). */
int gs_dra_device_parse(const char *name, struct gs_dra_device_ref *out);

#endif
