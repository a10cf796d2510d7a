/* claims.h: ResourceClaims (DRA) in the scheduler extender's model. Pure: the objects are parsed
 * from jansson trees (the informers of apisource.c hand them over), no I/O.
 *
 * What the extender keeps of gpuslice's DRA driver (src/dra/slices.c, docs/dra.md):
 *   - the ResourceSlices of the driver (spec.driver, default gpu.gpuslice.io): per node, its
 *     devices (whole GPUs, shared GPUs with the consumable capacities memory / compute / clients
 *     and their requestPolicy, MIG devices) and the GPU each one is on (attribute index, or
 *     parentIndex for MIG): those GPUs are the DRA driver's (gpuslice.dra.gpus), never offered to
 *     a pod asking for extended resources (ex_dra_apply_node);
 *   - the ResourceClaims: what each asks (spec.devices.requests[].exactly: deviceClassName of
 *     one of the driver's DeviceClasses, count, capacity.requests memory / compute) and, once
 *     allocated, what it takes (status.allocation.devices.results[] of the driver: pool, device,
 *     consumedCapacity), counted against each device;
 *   - the ResourceClaimTemplates (spec.spec.devices.requests), for a pod whose claim is not made
 *     yet.
 * A pod's claims (podclaims.h: pod.spec.resourceClaims, a resourceClaimName, or a
 * resourceClaimTemplateName with the name made in pod.status.resourceClaimStatuses) are judged per node: each request of
 * a whole-GPU or shared class must find a device of its class with what it asks free (a shared
 * request: each capacity, after the device's requestPolicy, within the device's capacity less the
 * consumedCapacity of the claims allocated there). The scheduler's DRA allocator still picks the
 * device inside the node; CEL selectors, firstAvailable, allocationMode All and MIG classes are
 * not judged (the allocator decides them: the extender never refuses a node for them). */
#ifndef GS_EXTENDER_CLAIMS_H
#define GS_EXTENDER_CLAIMS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "extender/model.h"

#define EX_DRA_DRIVER "gpu.gpuslice.io"
#define EX_DRA_DEV_MAX 64   /* a device name: a DNS label, at most 63 characters */
#define EX_DRA_REQS 8       /* a claim's requests judged (more: the claim is not judged) */
#define EX_DRA_RESULTS 16   /* a claim's allocation results of the driver counted */
#define EX_DRA_SLICE_DEVS 128 /* the API's limit of devices in one slice */

enum ex_dra_class { EX_DC_NONE, EX_DC_WHOLE, EX_DC_SHARED, EX_DC_MPS, EX_DC_MIG };
enum { EX_CAP_MEMORY, EX_CAP_COMPUTE, EX_CAP_CLIENTS, EX_CAPS };

/* One consumable capacity of a device and its requestPolicy (0: not given). */
struct ex_dra_cap {
    int64_t value, dflt, min, max, step;
    bool present, policy;
};

struct ex_dra_dev {
    char name[EX_DRA_DEV_MAX];
    enum ex_dra_class cls;
    int gpu;    /* the GPU's index (-1: not known) */
    bool multi; /* allowMultipleAllocations */
    struct ex_dra_cap cap[EX_CAPS];
    int64_t used[EX_CAPS]; /* consumedCapacity of the claims allocated on it */
    int n_alloc;           /* allocation results naming it */
};

struct ex_dra_slice {
    char name[EX_NAME_MAX], node[EX_NAME_MAX], pool[EX_NAME_MAX];
    int64_t generation;
    int n_dev;
    struct ex_dra_dev *dev; /* owned */
};

struct ex_dra_req {
    char name[EX_DRA_DEV_MAX];
    enum ex_dra_class cls; /* EX_DC_NONE: not one of the driver's classes, or not judged */
    int count;
    int64_t want[EX_CAPS];
    bool asked[EX_CAPS];
};

struct ex_dra_result {
    char pool[EX_NAME_MAX], device[EX_DRA_DEV_MAX];
    int64_t used[EX_CAPS];
};

/* A ResourceClaim, or (no uid, never allocated) a ResourceClaimTemplate's claim spec. */
struct ex_dra_claim {
    char ns[EX_NAME_MAX], name[EX_NAME_MAX], uid[EX_UID_MAX];
    bool judged;    /* false: a request the extender does not judge (too many, firstAvailable) */
    bool allocated; /* status.allocation present: placed, its results counted */
    int n_req;
    struct ex_dra_req req[EX_DRA_REQS];
    int n_res;
    struct ex_dra_result res[EX_DRA_RESULTS];
};

struct ex_dra {
    char driver[EX_DRA_DEV_MAX];
    struct ex_dra_slice *slices; /* sorted by node, then name */
    size_t n_slices, cap_slices;
    struct ex_dra_claim *claims, *tmpls;
    size_t n_claims, cap_claims, n_tmpls, cap_tmpls;
};

/* An empty state for driver (NULL: EX_DRA_DRIVER). */
void ex_dra_init(struct ex_dra *d, const char *driver);
void ex_dra_free(struct ex_dra *d);

/* A ResourceSlice: 1 (the driver's, with a node: into *out, its devices malloc'd), 0 (another
 * driver's, or not a node's), -EINVAL/-ENOMEM with the field in err. */
int ex_dra_slice_from_json(const json_t *o, const char *driver, struct ex_dra_slice *out, char *err,
                           size_t errlen);
/* A ResourceClaim (tmpl false) or ResourceClaimTemplate (tmpl true): 0, or -EINVAL with the field. */
int ex_dra_claim_from_json(const json_t *o, const char *driver, bool tmpl, struct ex_dra_claim *out, char *err,
                           size_t errlen);

/* The slices replaced by n others (taken: their devices are owned by d from now), or one slice
 * set (by name; taken) or deleted. The claims' usage is counted again on the devices. -ENOMEM
 * (then the slices given are freed). */
int ex_dra_replace_slices(struct ex_dra *d, struct ex_dra_slice *s, size_t n);
int ex_dra_set_slice(struct ex_dra *d, struct ex_dra_slice *s);
void ex_dra_del_slice(struct ex_dra *d, const char *name);
/* The claims (or templates) replaced by n others, one set (by namespace and name) or deleted. */
int ex_dra_replace_claims(struct ex_dra *d, bool tmpl, const struct ex_dra_claim *c, size_t n);
int ex_dra_set_claim(struct ex_dra *d, bool tmpl, const struct ex_dra_claim *c);
void ex_dra_del_claim(struct ex_dra *d, bool tmpl, const char *ns, const char *name);

/* The GPUs of node that are the DRA driver's (bit g: GPU index g), from its slices of the pool's
 * newest generation. */
uint32_t ex_dra_gpus(const struct ex_dra *d, const char *node);
/* The node's spec with its DRA GPUs: the labels count the device plugin's GPUs only, so the node
 * has n_gpu + the DRA GPUs, each DRA GPU at its index with nothing free (never offered to an
 * extended-resource pod), the others in index order. Returns whether the node has GPUs now. */
bool ex_dra_apply_node(const struct ex_dra *d, struct ex_node_spec *s);

/* Whether the pod has claims the extender judges (of the driver's classes, not allocated yet). */
bool ex_dra_pod_judged(const struct ex_dra *d, const struct ex_pod *p);
/* filter of the pod's claims on node: EX_FIT (also when nothing is judged), EX_FAIL (the node's
 * devices cannot hold them now, with why per GPU), EX_UNRESOLVABLE (no device of the class, or
 * a request larger than any device of it). */
enum ex_verdict ex_dra_filter(const struct ex_dra *d, const struct ex_pod *p, const char *node, char *why,
                              size_t len);
/* For prioritize: the node base seen through its DRA devices of the pod's largest judged request
 * (a GPU per device, its free share as milli-GPU: the least free of memory and compute, or 1000 for a
 * free whole GPU) into *view, the request in the engine's terms into *q. 1 (the view made),
 * 0 (nothing judged), -ENOSPC (it does not fit). */
int ex_dra_view(const struct ex_dra *d, const struct ex_pod *p, const char *node, const struct pl_node *base,
                struct pl_node *view, struct pl_pod *q);
/* For a node the device plugin side cannot serve the pod on: why (ask GPUs the DRA driver has),
 * true when the node's GPUs outside DRA are fewer than num_gpu. */
bool ex_dra_plugin_short(const struct ex_dra *d, const char *node, int n_gpu, int num_gpu, char *why, size_t len);

/* *arr grown (doubling from first) to hold want elements of size bytes; false when out of memory */
bool ex_grow(void **arr, size_t *cap, size_t want, size_t size, size_t first);

#endif
