/* fractional.h: the node side of fractional requests (docs/fractional.md): a container's
 * gpuslice.io/gpu-memory units (GiB) and gpuslice.io/gpu-compute units (%) on ONE GPU, the GPU the
 * scheduler extender chose for the pod (its gpuslice.io/gpu-index annotation) when the agent can
 * find the pod, and the guard's quota and compute share of both in one limits file.
 *
 * The kubelet allocates memory and compute of a container as two resources, one after the other
 * in no fixed order, and tells a device plugin neither the pod nor the container. So:
 *   - with API access (agent --kubeconfig, or in a cluster) the pod being admitted is found: the
 *     oldest pod bound to this node, not yet running, that asks for this request and whose units
 *     the agent has not allocated yet; its containers' requests say which allocations belong to
 *     one container (init containers first, as the kubelet allocates them);
 *   - without it, an allocation of the other resource within FRAC_PAIR_WINDOW_NS of the first,
 *     on the same GPU, is taken as the same container's.
 * The pure parts (the GPU choice, the one-GPU check, the pod lookup on a PodList) are unit-tested
 * in tests/unit/test_fractional.c; frac_state holds the admission in progress (under the agent's
 * shared lock). */
#ifndef GS_AGENT_FRACTIONAL_H
#define GS_AGENT_FRACTIONAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/plan.h"

#define FRAC_PAIR_WINDOW_NS (5ULL * 1000000000ULL)
#define FRAC_MAX_CONTAINERS 16
#define FRAC_DONE_PODS 64
#define FRAC_GPU_INDEX_ANNOTATION "gpuslice.io/gpu-index"

/* The GPU (NVML index) all of ids are units of: 0, or -EXDEV naming the GPUs and their units. */
int frac_one_gpu(const struct gs_resource *r, const char *const *ids, size_t n, unsigned *gpu, char *err,
                 size_t errlen);

/* GetPreferredAllocation for a fractional resource: `size` units of one GPU: the must-include
 * units' GPU, else want_gpu (>= 0) if it has size available, else the best fit (the GPU with
 * the fewest available units that still holds the request, then the lowest index). Returns the
 * number chosen: 0 when no single GPU holds the request (the kubelet then picks, and Allocate
 * refuses units of two GPUs). */
size_t frac_preferred(const struct gs_resource *r, const char *const *avail, size_t n_avail, const char *const *must,
                      size_t n_must, size_t size, int want_gpu, const char **out);

/* A pod asking for fractional units, as the API server has it. */
struct frac_pod {
    char uid[64];
    char ns[64], name[128];
    int gpu_index;            /* gpuslice.io/gpu-index (-1: none) */
    bool whole;               /* also asks for nvidia.com/gpu or nvidia.com/gpu.shared */
    unsigned n_containers;    /* init containers, then containers (only those listed here) */
    struct {
        unsigned units[3];    /* by enum gs_fraction: [GS_FRAC_MEMORY], [GS_FRAC_COMPUTE] */
    } c[FRAC_MAX_CONTAINERS];
    long long created;        /* metadata.creationTimestamp, seconds */
};

/* From a PodList (pure): the oldest pod (then by name) not yet running (phase Pending, no
 * container started) and not in done[] (UIDs), one of whose containers asks for `size` units of
 * `kind`. 0 and *out, or -ENOENT. */
int frac_find_pod(const json_t *list, enum gs_fraction kind, size_t size, const char (*done)[64], size_t n_done,
                  struct frac_pod *out);

/* The container whose units are being allocated, and the pods done. */
struct frac_state {
    struct kube_client *kube;          /* NULL: no API access (or not tried yet) */
    bool kube_tried;
    char node[256];
    bool open;                         /* an allocation waits for its other resource */
    char uid[64];                      /* its pod ("": found without the API) */
    unsigned container;
    bool need[3], have[3];             /* by enum gs_fraction */
    unsigned gpu;
    unsigned long long mem_bytes;
    unsigned compute;
    char guard_dir[200];
    uint64_t t_ns;
    struct frac_pod pod;               /* the last pod looked up (uid "": none) */
    uint64_t pod_t_ns;
    unsigned n_done;                   /* a ring of the pods whose units are all allocated */
    char done[FRAC_DONE_PODS][64];
};

/* Which container an allocation of `kind` for pod p (NULL: not known) belongs to, given the
 * state: sets *container and *pair (true: it completes st's open allocation, whose guard files it
 * shares). Pure. */
void frac_assign(const struct frac_state *st, const struct frac_pod *p, enum gs_fraction kind, unsigned gpu,
                 uint64_t now_ns, unsigned *container, bool *pair);

/* Records an allocation in st (after it succeeded): opens or completes the container's entry,
 * and marks the pod done when its last container has all its units. Pure. */
void frac_record(struct frac_state *st, const struct frac_pod *p, enum gs_fraction kind, unsigned container, bool pair,
                 unsigned gpu, unsigned long long mem_bytes, unsigned compute, const char *guard_dir,
                 uint64_t now_ns);

struct agent_options;
/* The pods bound to this node from the API server (opened on first use: --kubeconfig, else in a
 * cluster; NULL with a reason logged once when neither). Blocking, bounded (3 s). The caller holds
 * no lock. 0 and *list, or -errno. */
int frac_list_pods(struct frac_state *st, const struct agent_options *o, json_t **list);
void frac_state_free(struct frac_state *st);

#endif
