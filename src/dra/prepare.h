/* prepare.h: the pure part of the DRA driver's kubelet side (used by server.c and the claim
 * sources): a ResourceClaim's JSON to its allocation results for this driver, a claim's results to
 * the prepared devices and the claim's transient CDI spec, and the checkpoint of prepared claims
 * (its text both ways; hostile input refused with the field named). No I/O. */
#ifndef GS_DRA_PREPARE_H
#define GS_DRA_PREPARE_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "core/alloc.h"
#include "dra/dra.h"
#include "dra/slices.h"

#define DRA_CDI_IDS 2 /* per device: the node spec's device, the result's own (dra_result_cdi_name) */

/* A MIG instance a claim's prepare makes on demand (migdemand.c), recorded before and after each
 * step so that a restart between two steps finds it. */
struct dra_mig_made {
    bool on;                 /* this device is a MIG placement made for the claim */
    unsigned gpu, profile_id, start;
    int gi, ci;              /* -1: not made yet */
    char uuid[GS_UUID_LEN];  /* the MIG device's, once its compute instance exists */
};

struct dra_prepared_device {
    char request[128];
    char pool[254];
    char device[64];
    char share_id[40];
    char cdi[DRA_CDI_IDS][GS_UUID_LEN + 64]; /* fully qualified: "gpuslice.io/gpu=GPU-..." */
    struct dra_mig_made mig;
};

struct dra_prepared {
    char uid[40], ns[64], name[254];
    bool pending;            /* prepare began (MIG instances recorded) but has not answered yet */
    bool guarded;            /* the claim has guard files: GUARD_ROOT/claim-<uid> (dra_guard_dir), never a
                              * path from the checkpoint */
    unsigned n_devices;
    struct dra_prepared_device devices[DRA_MAX_RESULTS];
};

/* What a container that names a request gets besides its devices (server.c gathers it: share.c,
 * migdemand.c): each result's edits reach only the containers given that result (the kubelet hands
 * a container the CDI devices of the results of the requests it names). */
#define DRA_MAX_NODES 24
struct dra_result_edits {                 /* the guard's and MPS's mounts and environment */
    unsigned n_envs;
    struct gs_env envs[GS_ALLOC_MAX_ENVS];
    unsigned n_mounts;
    struct gs_mount mounts[GS_ALLOC_MAX_EXTRA_MOUNTS];
};
struct dra_edits {
    struct dra_result_edits extra[DRA_MAX_RESULTS]; /* per result */
    const char *uuid[DRA_MAX_RESULTS];    /* per result: the device the container uses (a MIG UUID); NULL: the GPU's */
    unsigned n_nodes;                     /* device nodes (a MIG device's capabilities) */
    struct {
        char path[64];
        int major, minor;
        unsigned result;                  /* the result whose device it is */
    } nodes[DRA_MAX_NODES];
};

/* A request name without its subrequest ("gpus" of "gpus/big"): what a container names. */
size_t dra_request_base_len(const char *request);
/* Whether results i and j of c belong to one request (the same base name). */
bool dra_same_request(const struct dra_claim *c, unsigned i, unsigned j);

/* A result's edits from an answer's environment and mounts (-ENOSPC when they do not fit). */
int dra_result_edits_from(struct dra_result_edits *out, const struct gs_alloc_response *a);

/* Each result's device, its name resolved once through the node's devices: the device, and what
 * the name says (a MIG placement's GPU, profile and start: ref[i].mig), for the steps after. */
struct dra_bound {
    const struct dra_device *dev[DRA_MAX_RESULTS];
    struct gs_dra_device_ref ref[DRA_MAX_RESULTS]; /* all 0 for a GPU's own name */
};

/* The device of each result of c: a GPU by its name in devs, a MIG placement
 * ("gpu-<i>-mig-...") by its GPU's, which must be in MIG mode. -ENODEV naming the first that is not
 * a device of this node (not in its inventory); -EPERM naming the first on a GPU the policy's
 * gpuslice.dra.gpus does not give to DRA (withheld: the policy changed after the scheduler
 * allocated it, or a forged allocation). */
int dra_resolve(const struct dra_claim *c, const struct dra_device *devs, size_t n_devs, struct dra_bound *out,
                char *err, size_t errlen);

/* dra_prepare_claim with each result's device given (bound: dra_resolve's dev) and the edits (NULL: none):
 * each result answers with its GPU's node spec device and its own device of the claim's spec
 * (dra_result_cdi_name), which carries that result's edits only: its device nodes, its
 * request's guard and MPS edits, GPUSLICE_DRA_CLAIM, and the UUIDs of its request's devices as
 * GPUSLICE_DRA_DEVICES and GPUSLICE_DRA_DEVICES_<REQUEST> (upper case, '-' as '_'). -E2BIG naming
 * the request when a value does not fit (never cut). */
int dra_prepare_claim_ex(const struct dra_claim *c, const struct dra_device *const *bound, const struct dra_edits *e,
                         const char *kind, struct dra_prepared *out, char **spec, char *err, size_t errlen);

struct dra_checkpoint {
    size_t n, cap;
    struct dra_prepared *claims;
};

/* A claim UID as the kubelet sends it: 1..36 of [0-9a-z-] (it names files). */
bool dra_uid_valid(const char *uid);

/* The claim's guard directory, ROOT/claim-<uid>: the only place its guard files are written and
 * removed. -EINVAL for a UID that is not one or an empty root, -ENAMETOOLONG. */
int dra_guard_dir(const char *root, const char *uid, char *buf, size_t len);

/* The claim's JSON (a ResourceClaim, as the API server or `kubectl get -o json` gives it) for the
 * kubelet's ns/name/uid, decoded once: the results and opaque configs of `driver`, and the pods of
 * status.reservedFor (other consumers skipped; those past DRA_MAX_PODS left out). -ESTALE (another
 * UID), -ENOENT (another name or namespace), -ENODATA (not allocated, or nothing for this driver),
 * -EINVAL (not JSON, or a field of the wrong type or too long, a reservedFor that is not a list of
 * consumers with names: named in err), -ENOMEM. ns, name and uid NULL: the claim's own (a claim of
 * a list), its UID checked as a UID. */
int dra_claim_parse(const char *json, size_t len, const char *driver, const char *ns, const char *name,
                    const char *uid, struct dra_claim *out, char *err, size_t errlen);
/* The same from the claim already decoded (an API server's answer). */
int dra_claim_from_json(const json_t *root, const char *driver, const char *ns, const char *name, const char *uid,
                        struct dra_claim *out, char *err, size_t errlen);

/* The claim's prepared devices and its transient spec's JSON text (*spec, malloc'ed; one device
 * a result, dra_result_cdi_name). Every result must name a device of devs (-ENODEV otherwise, the
 * device named in err). kind: the node spec's ("gpuslice.io/gpu"). */
int dra_prepare_claim(const struct dra_claim *c, const struct dra_device *devs, size_t n_devs, const char *kind,
                      struct dra_prepared *out, char **spec, char *err, size_t errlen);

/* "claim-<uid>-<index>": result index's device in the claim's transient spec, and the spec file's
 * base name "<vendor>-<class>_claim-<uid>.json" (kind's '/' as '-'). */
void dra_result_cdi_name(const char *uid, unsigned index, char *buf, size_t len);
void dra_claim_spec_file(const char *kind, const char *uid, char *buf, size_t len);

/* The checkpoint's text (malloc'ed JSON; NULL when out of memory) and back. Parse: -EINVAL with
 * where it stopped in err ("checkpoint: line L, column C: why" for text that is not JSON,
 * "checkpoint: claims[I].FIELD: why" for a field) for anything but what render writes (bounded: at
 * most DRA_CHECKPOINT_MAX claims, fields within their sizes, valid UIDs, none twice); -ENOTSUP for
 * a version newer than DRA_CHECKPOINT_VERSION (another agent's format: never rewritten). An entry's
 * "guard" (a path, in checkpoints of older agents) only says the claim is guarded: its value is
 * not used. */
#define DRA_CHECKPOINT_MAX 4096
#define DRA_CHECKPOINT_VERSION 1
char *dra_checkpoint_render(const struct dra_checkpoint *cp);
int dra_checkpoint_parse(const char *text, size_t len, struct dra_checkpoint *out, char *err, size_t errlen);

const struct dra_prepared *dra_checkpoint_find(const struct dra_checkpoint *cp, const char *uid);
struct dra_prepared *dra_checkpoint_get(struct dra_checkpoint *cp, const char *uid); /* to change it */
int dra_checkpoint_put(struct dra_checkpoint *cp, const struct dra_prepared *p); /* replaces same UID */
bool dra_checkpoint_remove(struct dra_checkpoint *cp, const char *uid);          /* false: not there */
void dra_checkpoint_free(struct dra_checkpoint *cp);

#endif
