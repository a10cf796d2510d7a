/* simlib.h: what the files of the simulated NVML library share (internal to the library; the
 * interface others use is NVML's and simctl.h's).
 *
 * lib.c       library lifetime, the state lock, the fault schedule, nvmlInit/nvmlShutdown
 * handles.c   NVML handles and their resolution against the current state
 * device.c    system and device queries, processes
 * mig.c       MIG mode, GPU-instance profiles, placements, GPU instances
 * mig_ci.c    compute instances and MIG device handles
 * events.c    event sets and Xid delivery
 * pci.c       PCI addresses and NUMA nodes (pure)
 * topology.c  PCIe topology between GPUs, NVLink
 * root.c      the node's root (proc, dev, sys, the stand-in driver root); ldcache_write.c its
 *             linker cache
 * util.c      per-process utilization; gpm.c GPU performance monitoring (per GPU instance)
 * power.c     clocks, power limits and energy, fans, P-state, persistence mode
 * ecc.c       ECC mode and counters, retired pages, remapped rows; their controls
 * board.c     BAR1, serial, VBIOS, board ID, PCIe link and throughput, encoder/decoder,
 *             accounting, fabric
 * affinity.c  handles by PCI bus ID, NUMA node and CPU affinity, nearest GPUs, P2P, process names
 * samples.c   nvmlDeviceGetSamples and nvmlDeviceGetFieldValues
 * ctl.c       the gpusliceSim* controls (simctl.h)
 * sim_state.c the shared state file; faults.c the fault schedule's parser */
#ifndef GS_SIM_SIMLIB_H
#define GS_SIM_SIMLIB_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "gpu/nvml_types.h"
#include "sim_state.h"

#define EXPORT __attribute__((visibility("default")))
#define NO_GI 0xFFFFFFFFu

/* lib.c */
extern struct sim_state *sim_st;         /* cached copy of DIR/state.json, valid under lock_state */
extern char sim_state_dir[PATH_MAX];
void sim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A MIG reconfiguration call takes GPUSLICE_SIM_MIG_DELAY_MS, as on a driver (outside the lock). */
void mig_call_delay(void);
/* Each NVML entry point runs between lock_state() and unlock_state(). `fn` names the entry point
 * for the fault schedule (NULL: not subject to it); a scheduled fault returns its error unlocked. */
nvmlReturn_t lock_state(bool write, const char *fn);
nvmlReturn_t unlock_state(nvmlReturn_t ret, bool save);
/* The fault schedule alone, for entry points that lock later or more than once. */
nvmlReturn_t sim_fault_check(const char *fn);
int sim_set_faults(const char *spec, char *err, size_t errlen);

/* Read-only / writing entry point helpers: lock (faults as the function's name), body, unlock. */
#define READ_BEGIN                                                                                            \
    nvmlReturn_t ret_ = lock_state(false, __func__);                                                          \
    if (ret_ != NVML_SUCCESS)                                                                                 \
        return ret_;
#define READ_END(r) return unlock_state((r), false)
#define WRITE_BEGIN                                                                                           \
    nvmlReturn_t ret_ = lock_state(true, __func__);                                                           \
    if (ret_ != NVML_SUCCESS)                                                                                 \
        return ret_;
#define WRITE_END(r) return unlock_state((r), true)

/* handles.c: a device handle (whole GPU or MIG device) resolved against the current state. */
struct dev_ref {
    struct sim_gpu *gpu;
    unsigned index;
    struct sim_gi *gi;   /* NULL for a whole GPU */
    struct sim_ci *ci;
    unsigned gi_id, ci_id;
};

nvmlDevice_t gpu_handle(unsigned i);
nvmlDevice_t mig_handle(unsigned g, unsigned gi, unsigned ci);
nvmlGpuInstance_t gi_handle(unsigned g, unsigned gi);
nvmlComputeInstance_t ci_handle(unsigned g, unsigned gi, unsigned ci);
nvmlReturn_t resolve_device(nvmlDevice_t d, struct dev_ref *ref);
nvmlReturn_t resolve_gpu(nvmlDevice_t d, struct dev_ref *ref);
nvmlReturn_t resolve_mig_gpu(nvmlDevice_t d, struct dev_ref *ref);
nvmlReturn_t resolve_gi(nvmlGpuInstance_t g, struct dev_ref *ref);
nvmlReturn_t resolve_ci(nvmlComputeInstance_t c, struct dev_ref *ref);
/* A MIG device handle (NOT_SUPPORTED for a GPU handle, as NVML answers), then the output pointer. */
nvmlReturn_t resolve_mig_device_out(nvmlDevice_t d, struct dev_ref *ref, const void *out);

/* A resolved handle's result, or INVALID_ARGUMENT when the call's output pointer is NULL (NVML
 * checks the handle first). */
static inline nvmlReturn_t with_out(nvmlReturn_t r, const void *out) {
    return r == NVML_SUCCESS && !out ? NVML_ERROR_INVALID_ARGUMENT : r;
}

/* util.c: the sampling clock (CLOCK_REALTIME microseconds, as the driver's CPU timestamps); the
 * SM % process p (one of n_procs on its GPU) ran in the sampling period ending at end_us. */
#define SIM_UTIL_PERIOD_US 100000ULL /* one sample per process that ran, per period */
#define SIM_UTIL_BUFFER 200          /* periods the driver keeps (20 s) */
unsigned long long sim_now_us(void);
unsigned sim_proc_util(const struct sim_proc *p, unsigned n_procs, unsigned long long end_us);

/* device.c: bytes used by processes on GPU g, or on its GPU instance gi (and compute instance ci). */
unsigned long long used_bytes(const struct sim_gpu *g, int gi, int ci);
/* pci.c: GPU `index`'s PCI domain and bus, and NUMA node (pure: root.c and topology.c use them). */
void sim_pci_location(unsigned index, unsigned *domain, unsigned *bus);
int sim_numa_node(unsigned index);
nvmlGpuTopologyLevel_t sim_topology_level(unsigned a, unsigned b);
/* topology.c: a PCI info struct for a device at DOMAIN:BUS:00.0; the number of NVLinks of a model
 * (0: a PCIe board). */
void sim_fill_pci(unsigned domain, unsigned bus, unsigned device_id, nvmlPciInfo_t *pci);
unsigned sim_nvlink_count(const struct gs_model *m);

/* root.c, under the state lock: STATE_DIR/root; the capability minor of GI gi (ci < 0) or of its
 * CI ci on the GPU with that minor; (re)creates the root when it is missing or was made for
 * another node; brings dev/nvidia-caps in line with the
 * instances and proc/PID with the processes. 0 or -errno. */
void sim_root_dir(const char *state_dir, char *buf, size_t len);
unsigned sim_cap_minor(unsigned gpu_minor, unsigned gi, int ci);
int sim_root_create(const struct sim_state *st, const char *state_dir);
int sim_root_sync(const struct sim_state *st, const char *state_dir);

/* power.c: the power GPU g draws now (milliwatts); its energy counter at now_ms (millijoules);
 * sim_energy_settle, before the processes of g change, folds the energy so far into the state. */
unsigned sim_power_mw(const struct sim_gpu *g);
unsigned long long sim_energy_mj(const struct sim_gpu *g, unsigned long long now_ms);
void sim_energy_settle(struct sim_gpu *g);
/* power.c: the clock of NVML type `type` (0 graphics, 1 SM, 2 memory, 3 video) GPU g runs at now (MHz). */
unsigned sim_current_clock_mhz(const struct sim_gpu *g, unsigned type);
/* ecc.c: a GPU reset clears the volatile ECC counters and what was pending retirement. */
void sim_health_reset(struct sim_gpu *g);
/* device.c: copies src to dst (len bytes), INSUFFICIENT_SIZE when it does not fit. */
nvmlReturn_t sim_copy_string(char *dst, unsigned len, const char *src);

/* mig.c: whether processes run on GPU instance gi (and compute instance ci, -1: any) of g. */
bool gi_has_processes(const struct sim_gpu *g, unsigned gi, int ci);

#endif
