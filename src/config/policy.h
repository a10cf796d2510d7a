/* policy.h: the sharing policy file. NVIDIA device-plugin config files (version: v1) are accepted
 * unchanged; the optional top-level `gpuslice:` block adds what NVIDIA's plugin cannot do: a mode
 * and replica count per GPU, and health settings. Pure parsing: gs_policy_load is the only
 * function that reads a file.
 *
 *   version: v1
 *   flags:
 *     migStrategy: none | single | mixed
 *     plugin:
 *       passDeviceSpecs: false
 *       deviceListStrategy: envvar            # or volume-mounts, cdi-annotations, cdi-cri, or a list
 *       deviceIDStrategy: uuid | index
 *       sharedDevicesAllocationPolicy: distributed | packed | fragmentation   # the last: gpuslice
 *   sharing:
 *     timeSlicing:
 *       renameByDefault: true                 # time-sliced resources get the ".shared" suffix
 *       failRequestsGreaterThanOne: true
 *       resources:
 *         - name: nvidia.com/gpu
 *           replicas: 4                       # >= 2
 *           devices: all | <count> | ["0", "GPU-..."]   # honoured (NVIDIA's plugin ignores it)
 *           memoryPerReplica: auto | 8GiB     # gpuslice: VRAM quota per replica, enforced by the guard
 *     mps:                                    # instead of timeSlicing (not both), same form
 *       renameByDefault: true
 *       failRequestsGreaterThanOne: true      # default true for MPS, as in NVIDIA's plugin
 *       resources:
 *         - name: nvidia.com/gpu
 *           replicas: 4                       # 2..48: an MPS server takes at most 48 clients
 *           devices: all | <count> | ["0", "GPU-...", "MIG-..."]   # MPS on MIG instances is allowed
 *           computePerReplica: auto | 25%     # gpuslice: active thread percentage; auto = 100% / replicas
 *           pinnedMemoryPerReplica: auto | 8GiB  # gpuslice: pinned device memory; auto = memory / replicas
 *           memoryPerReplica: auto | 8GiB     # gpuslice: the guard's quota, as for timeSlicing
 *   gpuslice:
 *     gpus:                                   # first match wins; overrides `sharing`
 *       - index: "0-3"                        # or uuid: GPU-..., or model: "NVIDIA H100*" (glob)
 *         mode: mig                           # whole | time-slicing | mig | disabled | mps | fractional
 *       - index: "4,5"
 *         mode: time-slicing
 *         replicas: 4
 *       - index: "6"
 *         mode: mps                           # replicas (2..48), computePerReplica, pinnedMemoryPerReplica
 *         replicas: 3
 *         computePerReplica: 30%
 *       - model: "NVIDIA H100*"
 *         mode: fractional                    # gpuslice.io/gpu-memory (GiB) and gpuslice.io/gpu-compute (%)
 *     mps:
 *       exclusiveProcess: false               # true: set EXCLUSIVE_PROCESS compute mode on MPS GPUs
 *     mig:                                    # the agent partitions MIG GPUs (docs/mig.md)
 *       config: all-balanced                  # a config of layoutFile, or a built-in layout
 *       layoutFile: /etc/gpuslice/mig.yaml    # optional, mig-parted v1 format
 *       force: false                          # destroy instances that processes use
 *     dra:                                    # which GPUs the DRA driver serves (agent --dra; docs/dra.md)
 *       gpus: none | all | ["0", "GPU-..."]   # default none: the device plugins serve every GPU; a GPU
 *                                             # DRA serves is left out of the device plugins' plan
 *     health:
 *       ignoredXids: [13, 31, 43, 45, 68, 109] # application errors (the default list)
 *       recoveryQuietPeriod: 300s             # Healthy again after this long without a critical Xid
 */
#ifndef GS_POLICY_H
#define GS_POLICY_H

#include <stdbool.h>
#include <stddef.h>

#define GS_POLICY_MAX_RESOURCES 16
#define GS_POLICY_MAX_RULES 64
#define GS_POLICY_MAX_DEVICES 64
#define GS_POLICY_MAX_XIDS 64
#define GS_RESOURCE_NAME_MAX 64   /* "nvidia.com/" + up to 52 */
#define GS_SELECTOR_MAX 128
#define GS_MEMORY_AUTO (~0ULL)           /* memoryPerReplica: auto = GPU memory / replicas */
#define GS_COMPUTE_AUTO 0u               /* computePerReplica: auto = 100% / replicas (rounded down) */
#define GS_MPS_MAX_REPLICAS 48           /* MPS clients per device from Volta on (16 before) */
#define GS_MPS_ROOT_DEFAULT "/run/nvidia/mps" /* NVIDIA's helm default for flags.mpsRoot */

enum gs_mig_strategy { GS_MIG_NONE = 0, GS_MIG_SINGLE, GS_MIG_MIXED };
enum gs_alloc_policy { GS_ALLOC_DISTRIBUTED = 0, GS_ALLOC_PACKED, GS_ALLOC_FRAGMENTATION };
enum gs_id_strategy { GS_ID_UUID = 0, GS_ID_INDEX };
/* gpuslice.coexistence.otherPlugin: beside another plugin serving one of our resources. */
enum gs_other_plugin { GS_OTHER_REFUSE = 0, GS_OTHER_WARN, GS_OTHER_SHARE };
/* gpuslice.coexistence.otherMigManager: beside NVIDIA's MIG manager's nvidia.com/mig.config label. */
enum gs_other_mig_manager { GS_OTHER_MIG_REFUSE = 0, GS_OTHER_MIG_WARN };
/* gpuslice.dra.gpus: the GPUs the DRA driver publishes (never also the device plugins). */
enum gs_dra_gpus { GS_DRA_UNSET = 0, GS_DRA_NONE, GS_DRA_ALL, GS_DRA_LIST };
enum gs_list_strategy {
    GS_LIST_ENVVAR = 1 << 0, GS_LIST_VOLUME_MOUNTS = 1 << 1, GS_LIST_CDI_ANNOTATIONS = 1 << 2, GS_LIST_CDI_CRI = 1 << 3
};
#define GS_CDI_ANNOTATION_PREFIX_DEFAULT "cdi.k8s.io/"
enum gs_gpu_mode {
    GS_MODE_DEFAULT = 0, GS_MODE_WHOLE, GS_MODE_TIME_SLICING, GS_MODE_MIG, GS_MODE_DISABLED, GS_MODE_MPS,
    GS_MODE_FRACTIONAL   /* requests a pod writes: gpuslice.io/gpu-memory and gpu-compute units (docs/fractional.md) */
};

/* Where a setting was written (1-based; line 0: not written), so that checks that need the node
 * (GPU memory, GPU count, MIG mode) can still name FILE:LINE:COLUMN. */
struct gs_policy_pos {
    unsigned line, column;
};

/* A device selector as in NVIDIA's `devices:` lists: a GPU index ("0"), a GPU UUID ("GPU-..."). */
struct gs_device_ref {
    char text[GS_SELECTOR_MAX];
};

struct gs_ts_resource {                   /* one sharing.timeSlicing.resources[] or sharing.mps.resources[] entry */
    char name[GS_RESOURCE_NAME_MAX];      /* "nvidia.com/gpu" */
    char rename[GS_RESOURCE_NAME_MAX];    /* optional explicit name ("" = default rule) */
    unsigned replicas;                    /* >= 2 */
    unsigned long long memory_per_replica; /* bytes, GS_MEMORY_AUTO, or 0: no VRAM quota (no guard) */
    struct gs_policy_pos memory_pos;      /* of memoryPerReplica's value */
    unsigned compute_per_replica;         /* MPS: percent 1..100 or GS_COMPUTE_AUTO (time-slicing: 0) */
    unsigned long long pinned_per_replica; /* MPS: bytes or GS_MEMORY_AUTO (the default; time-slicing: 0) */
    bool devices_all;                     /* devices: all (the default) */
    unsigned devices_count;               /* devices: <count>: the first N GPUs (0 = not used) */
    unsigned n_devices;                   /* devices: [list] */
    struct gs_device_ref devices[GS_POLICY_MAX_DEVICES];
};

struct gs_gpu_rule {                      /* one gpuslice.gpus[] entry */
    enum { GS_SEL_INDEX, GS_SEL_UUID, GS_SEL_MODEL } kind;
    unsigned long long index_mask;        /* GS_SEL_INDEX: bit i = GPU i (indices 0..63) */
    char pattern[GS_SELECTOR_MAX];        /* GS_SEL_UUID: exact; GS_SEL_MODEL: glob on the NVML name */
    enum gs_gpu_mode mode;                /* never GS_MODE_DEFAULT */
    unsigned replicas;                    /* time-slicing: >= 2; mps: 2..GS_MPS_MAX_REPLICAS */
    unsigned long long memory_per_replica; /* time-slicing: as in gs_ts_resource */
    struct gs_policy_pos memory_pos;      /* of memoryPerReplica's value */
    unsigned compute_per_replica;         /* mps: as in gs_ts_resource */
    unsigned long long pinned_per_replica; /* mps: as in gs_ts_resource */
    char resource[GS_RESOURCE_NAME_MAX];  /* optional resource name override ("" = default rule) */
    unsigned line;                        /* where it was written, for log messages */
};

struct gs_policy {
    char source[256];                     /* the name given to gs_policy_parse, for FILE:LINE:COLUMN */
    enum gs_mig_strategy mig_strategy;
    struct gs_policy_pos mig_strategy_pos; /* of flags.migStrategy's value (line 0: the default) */
    bool pass_device_specs;
    unsigned list_strategy;               /* GS_LIST_* bits; default GS_LIST_ENVVAR */
    enum gs_id_strategy id_strategy;
    enum gs_alloc_policy alloc_policy;
    bool fail_on_init_error;              /* flags.failOnInitError, default true */
    char driver_root[256];                /* flags.nvidiaDriverRoot, default "/" */
    char cdi_annotation_prefix[64];       /* flags.plugin.cdiAnnotationPrefix, default "cdi.k8s.io/" */
    char container_driver_root[256];      /* flags.plugin.containerDriverRoot: the driver root as the agent sees it ("" = driver_root) */
    char dev_root[256];                   /* flags.nvidiaDevRoot, default = driver_root */
    char mps_root[256];                   /* flags.mpsRoot, default GS_MPS_ROOT_DEFAULT */

    bool ts_present;                      /* sharing.timeSlicing given */
    bool ts_rename_by_default;
    bool ts_fail_requests_gt_one;
    unsigned n_ts_resources;
    struct gs_ts_resource ts_resources[GS_POLICY_MAX_RESOURCES];

    bool mps_present;                     /* sharing.mps given (never together with timeSlicing) */
    bool mps_rename_by_default;
    bool mps_fail_requests_gt_one;        /* default true, as NVIDIA's plugin forces it for MPS */
    unsigned n_mps_resources;
    struct gs_ts_resource mps_resources[GS_POLICY_MAX_RESOURCES];
    bool mps_exclusive_process;           /* gpuslice.mps.exclusiveProcess: set EXCLUSIVE_PROCESS */

    unsigned n_rules;
    struct gs_gpu_rule rules[GS_POLICY_MAX_RULES];

    char mig_config[64];                  /* gpuslice.mig.config: "" = the agent leaves MIG alone */
    char mig_layout_file[256];            /* gpuslice.mig.layoutFile: "" = built-in layouts only */
    bool mig_force;                       /* gpuslice.mig.force: destroy instances in use */

    enum gs_other_plugin other_plugin;    /* gpuslice.coexistence.otherPlugin, default refuse */
    enum gs_other_mig_manager other_mig_manager; /* gpuslice.coexistence.otherMigManager, default refuse */
    bool labels_nvidia_names;             /* gpuslice.labels.nvidiaNames: GFD's label names too */

    enum gs_dra_gpus dra_gpus;            /* gpuslice.dra.gpus (GS_DRA_UNSET: not written) */
    struct gs_policy_pos dra_gpus_pos;
    unsigned n_dra_devices;               /* GS_DRA_LIST: GPU indices ("0") or GPU UUIDs */
    struct gs_device_ref dra_devices[GS_POLICY_MAX_DEVICES];

    unsigned n_ignored_xids;
    unsigned long long ignored_xids[GS_POLICY_MAX_XIDS]; /* default 13, 31, 43, 45, 68, 109 */
    unsigned recovery_quiet_s;            /* default 300 */

    unsigned n_warnings;                  /* accepted-but-ignored settings, one line each */
    char warnings[8][160];
};

/* Defaults: migStrategy none, envvar, uuid, distributed, failOnInitError true, driver root "/",
 * MPS root /run/nvidia/mps, no sharing, default ignored Xids, 300 s recovery. */
void gs_policy_init(struct gs_policy *p);

/* Parses YAML text; on error returns -EINVAL (or -ENOMEM) and writes one line to err:
 *   "policy.yaml:7:17: sharing.timeSlicing.resources[0].replicas: must be >= 2 (got 1)"
 * On success *out is fully replaced; on error it is left untouched. */
int gs_policy_parse(const char *name, const char *text, size_t len, struct gs_policy *out, char *err, size_t errlen);

/* Reads (at most 1 MiB) and parses a file. */
int gs_policy_load(const char *path, struct gs_policy *out, char *err, size_t errlen);

/* True if Xid `xid` is in the policy's ignore list. */
bool gs_policy_xid_ignored(const struct gs_policy *p, unsigned long long xid);

#endif
