/* inventory.h: what gpuslice knows about one node at one moment: GPUs, MIG profiles and
 * instances, processes, health. Plain data filled by the GPU backend (gpu/gpu.h) and read by the
 * pure planning code, so planning can be tested without any GPU or library. */
#ifndef GS_INVENTORY_H
#define GS_INVENTORY_H

#include <stdbool.h>

#define GS_MAX_GPUS 64
#define GS_MAX_PROFILES 24
#define GS_MAX_GIS 16
#define GS_MAX_MIG_DEVICES 16
#define GS_MAX_PROCS 128
#define GS_UUID_LEN 96
#define GS_PROFILE_NAME_LEN 32

struct gs_gi_profile {
    unsigned id;                /* GI profile ID (19, 9, ...) */
    unsigned nvml_index;        /* NVML_GPU_INSTANCE_PROFILE_* it was read with */
    char name[GS_PROFILE_NAME_LEN]; /* "1g.10gb", "1g.10gb+me" */
    unsigned slices;            /* compute slices */
    unsigned max_instances;
    unsigned remaining;         /* instances that can still be created (0 when MIG is off) */
    unsigned long long mem_mib;
    unsigned sm;
    unsigned placement_size;    /* memory slices */
    unsigned n_starts;
    unsigned starts[8];
};

struct gs_gpu_instance {
    unsigned id;                /* GI ID (driver-assigned) */
    unsigned profile_id;
    unsigned start, size;       /* placement, memory slices */
    unsigned n_ci;              /* compute instances inside */
};

struct gs_mig_device {          /* one compute instance = one MIG device */
    char uuid[GS_UUID_LEN];
    unsigned gi_id, ci_id;
    unsigned gi_profile_id;
    unsigned ci_profile_id;
    unsigned start, size;       /* the GI's placement */
    unsigned ci_slices, gi_slices;
    char profile[GS_PROFILE_NAME_LEN + 16]; /* GI profile name; "<c>c.<gi>" when the CI is smaller */
    unsigned long long mem_mib;
    unsigned sm;
};

struct gs_process {
    unsigned pid;
    unsigned long long mem_bytes;
    int gi_id, ci_id;           /* -1 when not on a MIG device */
};

struct gs_gpu {
    unsigned index, minor;
    char uuid[GS_UUID_LEN];
    char name[GS_UUID_LEN];
    char bus_id[32];
    int numa_node;                          /* -1 unknown; filled from sysfs by the agent */
    unsigned pci_device_id;
    unsigned arch;
    int cc_major, cc_minor;
    unsigned long long mem_total, mem_used; /* bytes */
    bool util_valid;
    unsigned util_gpu, util_mem;            /* percent */
    int compute_mode;                       /* NVML_COMPUTEMODE_* (0 default, 2 prohibited, 3 exclusive process); -1 unknown */
    bool temp_valid, power_valid;
    unsigned temperature_c;                 /* GPU core, degrees C */
    unsigned power_mw;                      /* board power draw, milliwatts */
    bool lost;                              /* NVML_ERROR_GPU_IS_LOST */
    char error[160];                        /* set when the GPU could not be read completely */
    bool mig_capable;
    unsigned mig_current, mig_pending;
    unsigned n_profiles;
    struct gs_gi_profile profiles[GS_MAX_PROFILES];
    unsigned mig_mem_slices;                /* largest placement end seen (8, or 4 on A30) */
    unsigned n_gis;
    struct gs_gpu_instance gis[GS_MAX_GIS];
    unsigned n_mig;
    struct gs_mig_device mig[GS_MAX_MIG_DEVICES];
    unsigned n_procs;
    unsigned procs_dropped;                 /* beyond GS_MAX_PROCS */
    struct gs_process procs[GS_MAX_PROCS];
};

struct gs_inventory {
    char driver_version[80];
    int cuda_driver_version;                /* 13000 = 13.0 */
    unsigned n_gpus;
    struct gs_gpu gpus[GS_MAX_GPUS];
};

/* MIG profile name by go-nvlib's rule (mig.md §2.9): memory fraction in eighths of the GPU,
 * scaled to the GPU's whole GiB, plus "+me" for REV1 profiles. Used when the driver's
 * profile-info call has no name field (v1). Returns 0 or -EINVAL. */
int gs_mig_profile_name(unsigned slices, unsigned long long mem_mib, unsigned long long gpu_mem_mib,
                        unsigned nvml_index, char *buf, unsigned len);

const struct gs_gi_profile *gs_gpu_profile_by_id(const struct gs_gpu *g, unsigned id);
const struct gs_gi_profile *gs_gpu_profile_by_name(const struct gs_gpu *g, const char *name);

/* The GPU a device plugin's device ID names: its GPU UUID or one of its MIG devices' UUIDs, alone
 * or followed by "::" and a replica suffix ("GPU-x", "GPU-x::3", "MIG-y", "MIG-y::1"; the IDs
 * NVIDIA's plugin and gpuslice give). Returns the GPU's position in inv->gpus, or -1. */
int gs_inventory_gpu_of_device_id(const struct gs_inventory *inv, const char *id);

/* The NVML architecture number's name: "turing", "ampere", "ada", "hopper", ... or "unknown". */
const char *gs_arch_name(unsigned arch);

#endif
