/* guard_base.h: inside the guard: what every one of its files shares: the guard's states, its log
 * line on stderr and the fault points of test builds.
 *
 * How the guard's files keep their state: each module owns one state struct (the region and this
 * process's slot in guard_account.c, the allocation map in guard_table.c, the pacer in guard_pace.c,
 * ...) and its functions take it as an argument; only the exported entry points (which have the
 * driver's ABI) name the instances. Two are read everywhere without being passed: the driver's real
 * functions (guard_driver.h) and the guard's state and limits (guard_core.h), both written once,
 * at load or by the first call, and read-only afterwards. */
#ifndef GS_GUARD_BASE_H
#define GS_GUARD_BASE_H

/* A function the guard exports in the driver's or NVML's name (the library is built with hidden
 * visibility: nothing else leaves it). */
#define EXPORT __attribute__((visibility("default")))

/* G_UNINIT until the first call initialises the guard; then for good: G_READY (limits enforced),
 * G_OPEN (failing open: no limits) or G_CLOSED (failing closed: allocations refused). */
/* On the declarations of the state the guard's files share: without it a PIC build reaches an
 * extern variable through the GOT (an extra load or lea on every access, the launch path's too). */
#define GUARD_HIDDEN __attribute__((visibility("hidden")))

enum guard_state { G_UNINIT = 0, G_READY, G_OPEN, G_CLOSED };

/* One line on stderr, "gpuslice-guard[PID]: ...", with a single write. */
void glog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- fault points (test builds only) ---------------------------------------------------------- *
 *
 * Built with -DGS_GUARD_FAULT_POINTS (tests/guard: libgpuslice-guard-faults.so), the guard kills
 * itself with SIGKILL at the named point, GPUSLICE_GUARD_FAULT=NAME[:N] (the Nth time it gets
 * there, default the first), so that a test can prove the protocol survives a death in every
 * window. The production library has none of this. */
#ifdef GS_GUARD_FAULT_POINTS
void guard_fault_init(void); /* reads GPUSLICE_GUARD_FAULT, from the constructor */
void guard_fault_point(const char *name);
#define FAULT(name) guard_fault_point(name)
#else
static inline void guard_fault_init(void) {}
#define FAULT(name) ((void)0)
#endif

#endif
