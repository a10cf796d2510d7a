/* dra.h: gpuslice's Dynamic Resource Allocation driver, the kubelet side: plugin registration
 * (pluginregistration.Registration on DIR/plugins_registry/<driver>-reg.sock: GetInfo with type
 * DRAPlugin and the services v1.DRAPlugin and v1beta1.DRAPlugin, NotifyRegistrationStatus) and
 * the DRAPlugin service (k8s.io.kubelet.pkg.apis.dra.v1 and v1beta1: NodePrepareResources,
 * NodeUnprepareResources) on PLUGINS/<driver>/dra.sock.
 *
 * Prepare is batched (an error of one claim goes into that claim's answer), idempotent (a claim
 * prepared before gets the same answer) and checkpointed in PLUGINS/<driver>/checkpoint.json, so
 * a restarted agent keeps its prepared claims; each prepared claim has a transient CDI spec of its
 * own (CDI_ROOT/<vendor>-<class>_claim-<uid>.json, one device "claim-<uid>"), and each of its
 * devices answers with two CDI IDs: the node spec's device and the claim's. Unprepare removes the
 * spec and the checkpoint entry; a claim never prepared is no error.
 *
 * The ResourceClaim itself comes from a claim source (struct dra_claim_source): the API server's,
 * or files in the shape `kubectl get resourceclaim -o json` writes (dra_claim_files_source). */
#ifndef GS_DRA_H
#define GS_DRA_H

#include <stdbool.h>
#include <stddef.h>

#include "config/policy.h"
#include "core/inventory.h"

#define DRA_DRIVER_DEFAULT "gpu.gpuslice.io"
#define DRA_REGISTRY_DIR_DEFAULT "/var/lib/kubelet/plugins_registry"
#define DRA_PLUGINS_DIR_DEFAULT "/var/lib/kubelet/plugins"

#define DRA_MAX_RESULTS 32  /* allocation results for this driver in one claim */
#define DRA_MAX_CAPACITY 4  /* consumedCapacity entries per result */
#define DRA_MAX_CONFIGS 8   /* opaque configs for this driver per claim */
#define DRA_MAX_PODS 8      /* the pods of a claim's reservedFor looked at (share.h: one guard a container) */
#define DRA_MAX_CONFIG_REQUESTS 8

/* One allocation result of a claim for this driver (status.allocation.devices.results[]). */
struct dra_result {
    char request[128];  /* "req" or "req/subrequest" */
    char pool[254];
    char device[64];
    char share_id[40];  /* "" without one */
    unsigned n_capacity;
    struct {
        char name[64];
        char quantity[64]; /* as the API server writes it: "10Gi", "30" */
    } capacity[DRA_MAX_CAPACITY];
};

/* An opaque config for this driver (status.allocation.devices.config[]). */
struct dra_config {
    bool from_class;    /* source FromClass (else FromClaim) */
    unsigned n_requests; /* 0: every request */
    char requests[DRA_MAX_CONFIG_REQUESTS][128];
    char *parameters;   /* opaque.parameters as JSON text (malloc'ed) */
};

struct dra_claim {
    char ns[64], name[254], uid[40];
    unsigned n_results;
    struct dra_result results[DRA_MAX_RESULTS];
    unsigned n_configs;
    struct dra_config configs[DRA_MAX_CONFIGS];
    unsigned n_pods;          /* status.reservedFor's pods (the claim's users), at most DRA_MAX_PODS */
    struct dra_pod_ref {
        char name[254], uid[40];
    } pods[DRA_MAX_PODS];
};

void dra_claim_free(struct dra_claim *c); /* the configs' parameters; the struct stays */

/* Where claims come from. fetch: the claim ns/name, which must have this uid, with its allocation
 * results for this driver: 0, or -errno with why in err (the claim's error in the kubelet's answer):
 * -ENOENT gone, -ESTALE another UID, -ENODATA not allocated, -EINVAL malformed, -EAGAIN the source
 * cannot be reached now. Called on the DRA server's thread; must return within the kubelet's
 * timeout. */
struct dra_claim_source {
    void *ctx;
    int (*fetch)(void *ctx, const char *driver, const char *ns, const char *name, const char *uid,
                 struct dra_claim *out, char *err, size_t errlen);
    /* pod (NULL: none): the Pod ns/name as JSON text in *json (malloc'd, *len bytes), for the
     * claims its containers hold (share.h: dra_share_one_guard); 0 or -errno with why in err. */
    int (*pod)(void *ctx, const char *ns, const char *name, char **json, size_t *len, char *err, size_t errlen);
    /* each (NULL: none): every ResourceClaim the source holds that is allocated with results of
     * `driver`, parsed as fetch parses it (dra_claim_parse with the claim's own namespace, name and
     * UID; claims it refuses are skipped), handed to fn one at a time (fn's claim is freed after
     * it returns): what a driver that lost its checkpoint rebuilds from. 0 or -errno with why in
     * err. */
    int (*each)(void *ctx, const char *driver, void (*fn)(void *arg, struct dra_claim *c), void *arg, char *err,
                size_t errlen);
};

/* Claims from files DIR/<namespace>/<name>.json, each what `kubectl get resourceclaim -n NS NAME
 * -o json` prints (tests, and nodes without the API server client). ctx is the directory (kept by
 * reference). */
struct dra_claim_source dra_claim_files_source(const char *dir);

/* How a GPU is shared, from the policy (as the slices publish it: docs/dra.md). */
enum dra_sharing {
    DRA_SHARING_EXCLUSIVE,    /* a whole GPU, one claim */
    DRA_SHARING_TIME_SLICING, /* claims take memory and compute: the guard enforces them */
    DRA_SHARING_MPS,          /* claims are MPS clients of the GPU's daemon */
    DRA_SHARING_MIG,          /* MIG mode: claims name MIG placements (src/dra/migdemand.c) */
};

/* A device's health in the resource-health stream (the values of its HealthStatus). */
enum dra_health { DRA_HEALTH_UNKNOWN, DRA_HEALTH_HEALTHY, DRA_HEALTH_UNHEALTHY };

/* A GPU of the node as the driver publishes it: its name in the ResourceSlice, the name of its
 * device in the node's CDI spec (the GPU's UUID), and what prepare needs to enforce a share. */
struct dra_device {
    char name[64];
    char cdi[GS_UUID_LEN];
    enum dra_sharing sharing;
    unsigned index, minor, arch;   /* NVML index, /dev/nvidia<minor>, NVML architecture */
    unsigned long long mem_total;  /* bytes */
    char mps_root[256];            /* MPS: the policy's root (<root>/<uuid>/pipe, <root>/shm) */
    char mps_down[64];             /* MPS: why its control daemon is not running ("" : it runs, or the
                                    * agent does not say); prepare refuses its claims then */
    bool withheld;                 /* the policy's gpuslice.dra.gpus does not give the GPU to DRA: prepare refuses it */
    enum dra_health health;        /* the agent's (Xid, GPU lost); dra_devices_of leaves it Unknown */
    char health_message[128];      /* why, for the kubelet ("critical Xid 79 ...") */
};

/* The node's GPUs for the driver: "gpu-<index>" per GPU, lost GPUs included (a claim prepared
 * on one stays valid), each with its sharing under policy (NULL: every GPU whole) and withheld
 * when the policy's gpuslice.dra.gpus does not give it to DRA (unset: given, as the slices'
 * preview; the agent puts "none" in force then). Returns the number written (at most max). */
size_t dra_devices_of(const struct gs_inventory *inv, const struct gs_policy *policy, struct dra_device *out,
                      size_t max);

struct dra_options {
    const char *driver;       /* DRA_DRIVER_DEFAULT */
    const char *registry_dir; /* the kubelet's plugins_registry */
    const char *plugins_dir;  /* the kubelet's plugins: <driver>/dra.sock, <driver>/checkpoint.json */
    const char *cdi_root;     /* where the claims' transient specs go */
    const char *cdi_kind;     /* the node spec's kind, gpuslice.io/gpu */
    struct dra_claim_source source; /* fetch NULL: every claim fails, saying there is no source */
    const char *guard_root;   /* shared GPUs: the claims' guard files (GUARD_ROOT/claim-<uid>/) */
    const char *guard_lib;    /* libgpuslice-guard.so on the host (NULL: time-sliced claims fail) */
    const char *nvml_lib;     /* MIG on demand: the NVML library the DRA thread opens (NULL: none) */
    const char *proc_root;    /* /proc: devices, driver/nvidia-caps/mig-minors (MIG devices' nodes) */
    const char *pool;         /* the slices' pool (the node's name): the health stream's devices */
};

struct dra_server;

/* Reads the checkpoint, serves the DRA socket, then the registration socket (the kubelet finds
 * it and asks GetInfo). -errno with "PATH: why" in err. A damaged checkpoint (not JSON, truncated,
 * empty, a UID twice, too many claims, not a regular file) is set aside next to it
 * (ckptfile.h) and the driver starts without it: at its first call it rebuilds the claims it had
 * prepared from the claim source (their specs are still in the CDI root) and refuses, at their
 * unprepare, those it cannot. -ENOTSUP when the checkpoint is refused: a newer version than this
 * agent's (left byte for byte as it is), or a damaged one that cannot be set aside: the driver
 * does not start. */
int dra_server_start(const struct dra_options *o, struct dra_server **out, char *err, size_t errlen);

/* The devices prepare maps claims to, with their health (copied; any thread): a change of health
 * goes to the kubelet's resource-health stream (DRAResourceHealth, on the DRA socket). */
int dra_server_set_devices(struct dra_server *s, const struct dra_device *d, size_t n);

/* How often the kubelet said it registered the plugin (NotifyRegistrationStatus with
 * plugin_registered true) since the start. */
unsigned dra_server_registrations(struct dra_server *s);

/* Stops both servers and removes their sockets; prepared claims stay in the checkpoint. */
void dra_server_stop(struct dra_server *s);

#endif
