/* simctl.h: the simulated NVML library's own entry points (gpusliceSim*), exported by
 * libgpuslice-nvml-sim.so beside NVML's. A real driver has none of them: callers (`gpuslice sim`,
 * tests) look them up by name with gpu_node_symbol() and call them through the pointer types
 * below; the library defines them against the same prototypes.
 *
 * Each control but gpusliceSimCallCount returns 0 or -errno and writes a message to err. */
#ifndef GS_SIM_SIMCTL_H
#define GS_SIM_SIMCTL_H

#include <stddef.h>

/* Deliver Xid `xid` to every NVML event set registered on GPU `gpu`, optionally tied to GPU
 * instance gi_id (0xFFFFFFFF: none). */
int gpusliceSimInjectXid(unsigned gpu, unsigned long long xid, unsigned gi_id, char *err, size_t errlen);
/* A process using mem_bytes of GPU `gpu`, or of its MIG device gi_id/ci_id (-1: none / first CI). */
int gpusliceSimProcessAdd(unsigned gpu, int gi_id, int ci_id, unsigned pid, unsigned long long mem_bytes,
                          const char *name, char *err, size_t errlen);
/* Removes process `pid` from GPU `gpu` (-1: from every GPU). */
int gpusliceSimProcessRemove(unsigned pid, int gpu, char *err, size_t errlen);
/* The duty schedule of process `pid` on GPU `gpu` (-1: on every GPU it runs on): the SM
 * utilization (percent) of each of its sampling periods, sm[0..n) cycled from now on; n == 0
 * returns to no schedule (every process busy, sharing the GPU evenly). See docs/simulator.md. */
int gpusliceSimProcessUtil(unsigned pid, int gpu, const unsigned *sm, unsigned n, char *err, size_t errlen);
/* A GPU reset: a pending MIG mode takes effect, every MIG instance is dropped; refused while
 * processes run. */
int gpusliceSimResetGpu(unsigned gpu, char *err, size_t errlen);
/* The GPU falls off the bus (lost != 0: NVML calls on it return GPU_IS_LOST) or comes back. */
int gpusliceSimSetLost(unsigned gpu, int lost, char *err, size_t errlen);
/* Replaces this process's fault schedule (GPUSLICE_SIM_FAULTS syntax, docs/simulator.md) and
 * restarts its call counts; "" clears it. A bad schedule leaves the current one in place. */
int gpusliceSimSetFaults(const char *spec, char *err, size_t errlen);
/* The simulated node's root (STATE_DIR/root: proc/, dev/, sys/, the stand-in driver root;
 * docs/simulator.md#the-nodes-root), which `--sim` gives commands as their /proc, /dev, /sys and
 * driver root. */
int gpusliceSimRoot(char *buf, size_t len, char *err, size_t errlen);
/* Memory errors on GPU `gpu`: count (1..SIM_ECC_MAX_ADD) corrected or uncorrected ECC errors,
 * added to its volatile and aggregate counters; a retired page (before Ampere) or remapped row
 * (Ampere and newer) at `address`, caused by a double-bit error (double_bit != 0) or by repeated
 * single-bit errors, pending until the next GPU reset. A reset clears the volatile counters. */
#define SIM_ECC_MAX_ADD 1000000000ULL
int gpusliceSimEccError(unsigned gpu, int uncorrected, unsigned long long count, char *err, size_t errlen);
int gpusliceSimRetirePage(unsigned gpu, unsigned long long address, int double_bit, char *err, size_t errlen);
/* NVML calls that reached the library in this process (tests: proves calls go through it). */
unsigned long long gpusliceSimCallCount(void);

typedef __typeof__(&gpusliceSimInjectXid) gs_sim_inject_xid_fn;
typedef __typeof__(&gpusliceSimProcessAdd) gs_sim_process_add_fn;
typedef __typeof__(&gpusliceSimProcessRemove) gs_sim_process_remove_fn;
typedef __typeof__(&gpusliceSimProcessUtil) gs_sim_process_util_fn;
typedef __typeof__(&gpusliceSimResetGpu) gs_sim_reset_gpu_fn;
typedef __typeof__(&gpusliceSimSetLost) gs_sim_set_lost_fn;
typedef __typeof__(&gpusliceSimSetFaults) gs_sim_set_faults_fn;
typedef __typeof__(&gpusliceSimCallCount) gs_sim_call_count_fn;
typedef __typeof__(&gpusliceSimRoot) gs_sim_root_fn;
typedef __typeof__(&gpusliceSimEccError) gs_sim_ecc_error_fn;
typedef __typeof__(&gpusliceSimRetirePage) gs_sim_retire_page_fn;

#endif
