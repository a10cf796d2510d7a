/* guard_region.h: the guard's shared accounting region (versioned). One file per container, mapped
 * shared by every process of the container that runs under the guard; the only interface between
 * the guard and the rest of gpuslice. The limits themselves are in a separate read-only file (see
 * guard/guard_limits.h); this region holds only counters, so a process can damage its own container's
 * accounting at worst (cooperative isolation, see docs/guard.md).
 *
 * Reservation protocol: before an allocation of n bytes on device d a process adds n to
 * dev[d].used with a compare-and-swap that fails if the result would exceed the limit, then
 * makes the real allocation, and subtracts n again if that fails. Concurrent processes can
 * therefore never exceed the quota together. Each process also adds n to its own slot, so the
 * bytes of a process that died are given back by whoever notices first. */
#ifndef GS_GUARD_REGION_H
#define GS_GUARD_REGION_H

#include <stdatomic.h>
#include <stdint.h>

#define GS_GUARD_REGION_MAGIC 0x47534752u /* "GSGR" */
#define GS_GUARD_REGION_VERSION 1u
#define GS_GUARD_MAX_DEVICES 16
#define GS_GUARD_MAX_PROCS 1024

struct gs_guard_dev_counters {
    _Atomic uint64_t used;             /* bytes reserved by all processes */
    _Atomic uint64_t peak;
    _Atomic uint64_t oom_refusals;     /* allocations refused by the quota */
    _Atomic uint64_t busy_ns;          /* compute pacing: GPU time the container used (simulated or measured) */
    _Atomic uint64_t window_start_ns;
};

struct gs_guard_proc_slot {
    _Atomic int32_t pid;               /* 0 free, -1 being reclaimed */
    uint32_t pad;
    _Atomic uint64_t start_time;       /* /proc/PID/stat field 22: tells a reused pid apart */
    _Atomic uint64_t used[GS_GUARD_MAX_DEVICES];
};

struct gs_guard_region {
    uint32_t magic;
    uint32_t version;
    uint32_t size;                     /* sizeof(struct gs_guard_region) of the writer */
    uint32_t n_devices;
    struct gs_guard_dev_counters dev[GS_GUARD_MAX_DEVICES];
    struct gs_guard_proc_slot procs[GS_GUARD_MAX_PROCS];
};

#endif
