/* share.h: what a claim's result on a shared GPU is allowed, and how that is enforced (used by
 * server.c). Pure: the claim's consumedCapacity and opaque config, and the GPU's sharing from the
 * policy, in; the guard's limits and the container's mounts and environment out (server.c writes
 * the files).
 *
 *   time-slicing  the guard: VRAM quota = consumedCapacity.memory, compute share =
 *                 consumedCapacity.compute (percent), the mounts and ld.so.preload the device
 *                 plugin's time-sliced Allocate gives;
 *   MPS           the GPU's MPS daemon: its pipe directory and shared memory,
 *                 CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = compute, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT =
 *                 memory;
 *   whole, MIG    nothing to enforce.
 *
 * The opaque config (DeviceClass or claim, driver gpu.gpuslice.io):
 *   apiVersion: gpuslice.io/v1alpha1
 *   kind: GpuConfig
 *   sharing: {strategy: TimeSlicing | MPS}
 * The strategy must be the GPU's (the node runs one mode per GPU, from its policy): a claim asking
 * MPS of a time-sliced GPU gets an error naming both, not a silent mode. NVIDIA's configs
 * (resource.nvidia.com/v1beta1) are read too, and their MPS limits applied: nvconfig.h. */
#ifndef GS_DRA_SHARE_H
#define GS_DRA_SHARE_H

#include <stdbool.h>
#include <stddef.h>

#include "../guard/guard_layout.h"
#include "core/alloc.h"
#include "dra/dra.h"

#define DRA_CONFIG_API_VERSION "gpuslice.io/v1alpha1"
#define DRA_CONFIG_KIND "GpuConfig"

/* Where the guard's files appear inside the container (guard_layout.h, as the device plugin mounts them). */
#define DRA_GUARD_LIB_IN_CONTAINER GS_GUARD_LIB_IN_CONTAINER
#define DRA_GUARD_CONF_IN_CONTAINER GS_GUARD_CONF_IN_CONTAINER
#define DRA_GUARD_STATE_IN_CONTAINER GS_GUARD_STATE_IN_CONTAINER

#define DRA_MPS_MAX_PINNED 8
struct dra_gpu_config {
    bool set;                 /* a config named a strategy */
    enum dra_sharing strategy; /* DRA_SHARING_TIME_SLICING or DRA_SHARING_MPS */
    /* whose config: gpuslice's GpuConfig, NVIDIA's GpuConfig or MigDeviceConfig (nvconfig.h) */
    enum dra_config_kind { DRA_CONFIG_GPUSLICE, DRA_CONFIG_NV_GPU, DRA_CONFIG_NV_MIG } kind;
    unsigned mps_thread_pct;          /* MPS: the client's active thread percentage 1..100 (0: none) */
    unsigned long long mps_pinned;    /* MPS: pinned device memory limit in bytes, any device (0: none) */
    unsigned n_mps_pinned_per;        /* MPS: per device (its index in the claim or its UUID), over mps_pinned */
    struct {
        char device[64];
        unsigned long long bytes;
    } mps_pinned_per[DRA_MPS_MAX_PINNED];
};

/* One opaque config's parameters (JSON text): -EINVAL with "FIELD: why" in err. */
int dra_gpu_config_parse(const char *params, struct dra_gpu_config *out, char *err, size_t errlen);

/* The claim's opaque configs, each decoded once (dra_gpu_config_parse) for every request that
 * dra_config_for looks up: its result and, when it is no GpuConfig, why. */
struct dra_claim_configs {
    unsigned n;
    struct {
        int rc;
        struct dra_gpu_config cfg;
        char label[160]; /* its apiVersion and kind, for errors */
        char why[256];
    } c[DRA_MAX_CONFIGS];
};
void dra_claim_configs_decode(const struct dra_claim *c, struct dra_claim_configs *out);

/* The config for a request of the claim ("req" or "req/sub") from its decoded configs d: the
 * claim's configs after the class's, in order, the last that names the request (or every request)
 * wins. -EINVAL when one that names it is not a GpuConfig: "opaque config I for request R
 * (gpuslice.io/v1alpha1 GpuConfig, from the claim): FIELD: why". */
int dra_config_for(const struct dra_claim *c, const struct dra_claim_configs *d, const char *request,
                   struct dra_gpu_config *out, char *err, size_t errlen);

struct dra_share {
    enum dra_sharing sharing;
    unsigned long long memory; /* bytes: the guard's quota, MPS's pinned limit (0: none) */
    unsigned compute;          /* percent 1..100 (0: none) */
};

/* A result's share of device d under cfg (NULL: none). -EINVAL naming the request, the device and
 * the capacity (a strategy the GPU does not run, a quantity that is not one, memory past the GPU,
 * compute outside 1..100, a time-sliced result without consumedCapacity.memory). */
int dra_share_of(const struct dra_result *r, const struct dra_device *d, const struct dra_gpu_config *cfg,
                 struct dra_share *out, char *err, size_t errlen);

/* The guard's limits for a claim's guarded shares: shares[k] on devs[k] (the claim's k-th device,
 * its CUDA ordinal), those DRA_SHARING_TIME_SLICING only; the counters region in the container.
 * Returns how many devices are guarded (0: no guard), or -E2BIG. */
int dra_share_guard_limits(const struct dra_share *shares, const struct dra_device *const *devs, unsigned n,
                           struct gs_guard_limits *l);

/* The container's edits for the claim (added to a): the guard's mounts and environment when
 * guard_dir is set (GUARD_DIR/limits, GUARD_DIR/state, the node's ld.so.preload at preload, the
 * library at guard_lib), and MPS's for the MPS shares (one daemon a claim: -EXDEV for two GPUs).
 * -ENAMETOOLONG when a path does not fit the answer. */
int dra_share_edits(const struct dra_share *shares, const struct dra_device *const *devs, unsigned n,
                    const char *guard_dir, const char *guard_lib, const char *preload, struct gs_alloc_response *a,
                    char *err, size_t errlen);

/* ---- one guard a container ----------------------------------------------------------------
 * A time-sliced claim's guard files are mounted at fixed paths of the container (its limits at
 * DRA_GUARD_CONF_IN_CONTAINER, the counters, ld.so.preload): two guarded claims in one container
 * would mount over each other and the container would run under one claim's limits. A guarded
 * claim is therefore refused when a container that holds it already holds another prepared
 * guarded claim (two shared GPUs for one container: one request of count 2, whose one limits
 * file has a quota per device). The containers come from the pods of the claim's reservedFor
 * (read with the claim: dra_claim_parse). */

/* A claim beside another in one container of a pod. */
struct dra_beside {
    char container[254]; /* the container (or init container) */
    char claim[254];     /* the other claim's name (the pod's namespace) */
};

/* The claims that share a container with claim `claim` in the Pod JSON text (a v1 Pod: its
 * spec.resourceClaims named directly or, made from templates, in status.resourceClaimStatuses;
 * containers' resources.claims; the extended-resource claim of status.extendedResourceClaimStatus
 * in the containers of its requestMappings): each (container, other claim) into out (at most max,
 * *n of them). -ESTALE when the pod's UID is not uid ("" = any), -EINVAL for text that is not a
 * pod. */
int dra_pod_claims_beside(const char *pod_json, size_t len, const char *uid, const char *claim,
                          struct dra_beside *out, unsigned max, unsigned *n, char *err, size_t errlen);

struct dra_checkpoint;

/* For a guarded claim c: 0 when no container of its pods holds another guarded claim prepared
 * (in cp); -EBUSY naming the claims, the pod and the container when one does; 1, with why in
 * err, when a pod could not be read (src->pod missing or failing: the claim is not refused). */
int dra_share_one_guard(const struct dra_claim *c, const struct dra_claim_source *src, const struct dra_checkpoint *cp,
                        char *err, size_t errlen);

#endif
