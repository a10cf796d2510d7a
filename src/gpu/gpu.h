/* gpu.h: the GPU seam. gpuslice talks to NVML only, through dlopen: the driver's
 * libnvidia-ml.so.1 on a GPU node, or the project's simulated NVML library elsewhere. Everything
 * above this header is the same code on both.
 *
 * Functions return 0 or a negative errno mapped from the NVML return code (see gpu_errno); the
 * failing call and NVML's own message are kept in gpu_node_error() for one log line with context. */
#ifndef GS_GPU_H
#define GS_GPU_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/inventory.h"
#include "gpu/nvml_types.h"

#define GS_NVML_LIB "libnvidia-ml.so.1"
#define GS_SIM_LIB_NAME "libgpuslice-nvml-sim.so"

struct gpu_node;

/* Function table resolved from the loaded library. Optional entries may be NULL: the feature is
 * then reported as not supported instead of failing (nvtop's approach). */
struct nvml_api {
    nvmlReturn_t (*Init)(void);
    nvmlReturn_t (*Shutdown)(void);
    const char *(*ErrorString)(nvmlReturn_t);
    nvmlReturn_t (*SystemGetDriverVersion)(char *, unsigned);
    nvmlReturn_t (*SystemGetCudaDriverVersion)(int *);
    nvmlReturn_t (*DeviceGetCount)(unsigned *);
    nvmlReturn_t (*DeviceGetHandleByIndex)(unsigned, nvmlDevice_t *);
    nvmlReturn_t (*DeviceGetHandleByUUID)(const char *, nvmlDevice_t *);
    nvmlReturn_t (*DeviceGetUUID)(nvmlDevice_t, char *, unsigned);
    nvmlReturn_t (*DeviceGetName)(nvmlDevice_t, char *, unsigned);
    nvmlReturn_t (*DeviceGetMinorNumber)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*DeviceGetPciInfo)(nvmlDevice_t, nvmlPciInfo_t *);
    nvmlReturn_t (*DeviceGetMemoryInfo)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*DeviceGetArchitecture)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*DeviceGetCudaComputeCapability)(nvmlDevice_t, int *, int *);
    nvmlReturn_t (*DeviceGetUtilizationRates)(nvmlDevice_t, nvmlUtilization_t *);
    nvmlReturn_t (*DeviceGetComputeMode)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*DeviceSetComputeMode)(nvmlDevice_t, unsigned);
    nvmlReturn_t (*DeviceGetTemperature)(nvmlDevice_t, unsigned, unsigned *);
    nvmlReturn_t (*DeviceGetPowerUsage)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*DeviceGetComputeRunningProcesses)(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *);
    nvmlReturn_t (*DeviceGetProcessUtilization)(nvmlDevice_t, nvmlProcessUtilizationSample_t *, unsigned *,
                                                unsigned long long);
    nvmlReturn_t (*GpmQueryDeviceSupport)(nvmlDevice_t, nvmlGpmSupport_t *);
    nvmlReturn_t (*GpmSampleAlloc)(nvmlGpmSample_t *);
    nvmlReturn_t (*GpmSampleFree)(nvmlGpmSample_t);
    nvmlReturn_t (*GpmMigSampleGet)(nvmlDevice_t, unsigned, nvmlGpmSample_t);
    nvmlReturn_t (*GpmMetricsGet)(nvmlGpmMetricsGet_t *);
    nvmlReturn_t (*DeviceGetMigMode)(nvmlDevice_t, unsigned *, unsigned *);
    nvmlReturn_t (*DeviceSetMigMode)(nvmlDevice_t, unsigned, nvmlReturn_t *);
    nvmlReturn_t (*DeviceGetGpuInstanceProfileInfo)(nvmlDevice_t, unsigned, nvmlGpuInstanceProfileInfo_t *);
    nvmlReturn_t (*DeviceGetGpuInstanceProfileInfoV)(nvmlDevice_t, unsigned, nvmlGpuInstanceProfileInfo_v2_t *);
    nvmlReturn_t (*DeviceGetGpuInstancePossiblePlacements)(nvmlDevice_t, unsigned, nvmlGpuInstancePlacement_t *,
                                                           unsigned *);
    nvmlReturn_t (*DeviceGetGpuInstanceRemainingCapacity)(nvmlDevice_t, unsigned, unsigned *);
    nvmlReturn_t (*DeviceCreateGpuInstance)(nvmlDevice_t, unsigned, nvmlGpuInstance_t *);
    nvmlReturn_t (*DeviceCreateGpuInstanceWithPlacement)(nvmlDevice_t, unsigned, const nvmlGpuInstancePlacement_t *,
                                                         nvmlGpuInstance_t *);
    nvmlReturn_t (*DeviceGetGpuInstances)(nvmlDevice_t, unsigned, nvmlGpuInstance_t *, unsigned *);
    nvmlReturn_t (*DeviceGetGpuInstanceById)(nvmlDevice_t, unsigned, nvmlGpuInstance_t *);
    nvmlReturn_t (*GpuInstanceGetInfo)(nvmlGpuInstance_t, nvmlGpuInstanceInfo_t *);
    nvmlReturn_t (*GpuInstanceDestroy)(nvmlGpuInstance_t);
    nvmlReturn_t (*GpuInstanceGetComputeInstanceProfileInfo)(nvmlGpuInstance_t, unsigned, unsigned,
                                                             nvmlComputeInstanceProfileInfo_t *);
    nvmlReturn_t (*GpuInstanceCreateComputeInstance)(nvmlGpuInstance_t, unsigned, nvmlComputeInstance_t *);
    nvmlReturn_t (*GpuInstanceGetComputeInstances)(nvmlGpuInstance_t, unsigned, nvmlComputeInstance_t *,
                                                   unsigned *);
    nvmlReturn_t (*GpuInstanceGetComputeInstanceById)(nvmlGpuInstance_t, unsigned, nvmlComputeInstance_t *);
    nvmlReturn_t (*ComputeInstanceGetInfo)(nvmlComputeInstance_t, nvmlComputeInstanceInfo_t *);
    nvmlReturn_t (*ComputeInstanceDestroy)(nvmlComputeInstance_t);
    nvmlReturn_t (*DeviceGetMaxMigDeviceCount)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*DeviceGetMigDeviceHandleByIndex)(nvmlDevice_t, unsigned, nvmlDevice_t *);
    nvmlReturn_t (*DeviceIsMigDeviceHandle)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*DeviceGetDeviceHandleFromMigDeviceHandle)(nvmlDevice_t, nvmlDevice_t *);
    nvmlReturn_t (*DeviceGetGpuInstanceId)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*DeviceGetComputeInstanceId)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*EventSetCreate)(nvmlEventSet_t *);
    nvmlReturn_t (*DeviceRegisterEvents)(nvmlDevice_t, unsigned long long, nvmlEventSet_t);
    nvmlReturn_t (*DeviceGetSupportedEventTypes)(nvmlDevice_t, unsigned long long *);
    nvmlReturn_t (*EventSetWait)(nvmlEventSet_t, nvmlEventData_t *, unsigned);
    nvmlReturn_t (*EventSetFree)(nvmlEventSet_t);
    /* which fallbacks were taken, for `inspect` and tests */
    bool processes_v1;    /* only nvmlDeviceGetComputeRunningProcesses (v1 struct) was found */
    bool profile_info_v1; /* no nvmlDeviceGetGpuInstanceProfileInfoV: names computed */
};

/* Loads `lib` (GS_NVML_LIB when NULL) with dlopen and initialises NVML.
 * Returns 0; -ENOENT when the library cannot be loaded (err: "NVIDIA driver not found: could not
 * load libnvidia-ml.so.1: <dlerror>"); -ENOSYS when a required symbol is missing; -EIO when
 * nvmlInit fails. */
int gpu_node_open(const char *lib, struct gpu_node **out, char *err, size_t errlen);
void gpu_node_close(struct gpu_node *node);

const struct nvml_api *gpu_node_api(const struct gpu_node *node);
const char *gpu_node_lib(const struct gpu_node *node);
/* dlsym in the loaded library (for the simulator's own controls). */
void *gpu_node_symbol(const struct gpu_node *node, const char *name);
/* The last failure: "nvmlDeviceCreateGpuInstanceWithPlacement(GPU 1, profile 9, start 4): Insufficient Resources" */
const char *gpu_node_error(const struct gpu_node *node);
nvmlReturn_t gpu_node_last_nvml(const struct gpu_node *node);

/* NVML return code -> negative errno (INSUFFICIENT_RESOURCES -ENOSPC, IN_USE -EBUSY,
 * NOT_SUPPORTED -EOPNOTSUPP, NOT_FOUND -ENOENT, GPU_IS_LOST -ENODEV, TIMEOUT -ETIMEDOUT, ...). */
int gpu_errno(nvmlReturn_t r);

/* Reads everything about the node. Per-GPU failures are recorded in gpus[i].error / .lost and do
 * not fail the whole read; only a failure to count GPUs does. */
int gpu_inventory_read(struct gpu_node *node, struct gs_inventory *inv);
/* gpu_inventory_read, then each GPU's NUMA node from SYSFS_ROOT/bus/pci/devices/<bus id>/numa_node
 * (NULL: /sys; -1 when unknown). src/gpu/sysfs.c. */
int gpu_inventory_read_sysfs(struct gpu_node *node, const char *sysfs_root, struct gs_inventory *inv);

/* Compute mode (NVML_COMPUTEMODE_*) of GPU `gpu`: a setting of the GPU, changed only when the
 * policy asks (gpuslice.mps.exclusiveProcess); needs root on a real driver. */
int gpu_set_compute_mode(struct gpu_node *node, unsigned gpu, unsigned mode);

/* Per-process utilization samples of GPU `gpu` (NVML index) newer than last_seen_us
 * (nvmlDeviceGetProcessUtilization; 0: every sample the driver keeps), at most max into out, *n
 * written. 0; -ENOENT when there is no sample since (NVML_ERROR_NOT_FOUND: no process ran);
 * -ENOBUFS when more than max are there (*n: how many); -EOPNOTSUPP where the driver has none (MIG
 * mode, older GPUs); other -errno. Does not update gpu_node_error (the caller logs per GPU). */
struct gpu_util_sample {
    unsigned pid;
    unsigned sm;                 /* percent of the sampling period */
    unsigned long long ts_us;    /* the period's end */
};
int gpu_process_util(struct gpu_node *node, unsigned gpu, unsigned long long last_seen_us, struct gpu_util_sample *out,
                     unsigned max, unsigned *n);

/* The share of the time any kernel ran on GPU instance gi_id of GPU `gpu` (NVML GPM's
 * GRAPHICS_UTIL, percent) between two samples: *sample is the previous one (NULL: none yet), and
 * is replaced by the one taken now; *pct is set when there was a previous one (*have true).
 * 0; -EOPNOTSUPP where GPM is not there (before Hopper, older drivers); other -errno (the
 * sample is dropped). gpu_gpm_free frees a sample. Does not update gpu_node_error. */
struct gpu_gpm_sample;
int gpu_gpm_mig_util(struct gpu_node *node, unsigned gpu, unsigned gi_id, struct gpu_gpm_sample **sample,
                     double *pct, bool *have);
void gpu_gpm_free(struct gpu_node *node, struct gpu_gpm_sample *sample);

/* MIG operations (GPU by NVML index). */
int gpu_mig_set_mode(struct gpu_node *node, unsigned gpu, bool enable, nvmlReturn_t *activation);
int gpu_gi_create(struct gpu_node *node, unsigned gpu, unsigned profile_id, unsigned start, unsigned *gi_id);
/* Creates the compute instance that spans the whole GPU instance; returns its MIG UUID. */
int gpu_ci_create_full(struct gpu_node *node, unsigned gpu, unsigned gi_id, unsigned *ci_id, char *uuid,
                       size_t uuid_len);
int gpu_ci_destroy(struct gpu_node *node, unsigned gpu, unsigned gi_id, unsigned ci_id);
int gpu_gi_destroy(struct gpu_node *node, unsigned gpu, unsigned gi_id);

/* Xid events on every GPU that supports them. */
struct gpu_event {
    unsigned gpu;            /* NVML index */
    unsigned long long xid;
    unsigned gi_id, ci_id;   /* 0xFFFFFFFF when not tied to a MIG instance */
};
struct gpu_events;
int gpu_events_open(struct gpu_node *node, struct gpu_events **out);
/* 0 with *ev filled, -ETIMEDOUT, or another -errno (gpu_node_error is not updated: this may run
 * on its own thread while the node is used elsewhere). */
int gpu_events_wait(struct gpu_events *e, unsigned timeout_ms, struct gpu_event *ev);
/* gpu_events_wait unless *stop is already set (-ECANCELED then, without calling NVML). While such a
 * wait lasts gpu_events_waiting is true, and gpu_node_close leaves the library loaded: nothing
 * interrupts NVML's wait, and a process that stops need not wait for it to end. */
int gpu_events_wait_unless(struct gpu_events *e, unsigned timeout_ms, const atomic_bool *stop, struct gpu_event *ev);
bool gpu_events_waiting(const struct gpu_events *e);
void gpu_events_close(struct gpu_events *e);

#endif
