/* guard_region.h: the guard's shared accounting region (versioned). One file per container, mapped
 * shared by every process of the container that runs under the guard; the only interface between
 * the guard and the rest of gpuslice. The limits themselves are in a separate read-only file (see
 * guard/guard_limits.h); this region holds only counters, so a process can damage its own container's
 * accounting at worst (cooperative isolation, see docs/guard.md).
 *
 * Reservation protocol (version 2): every change of a process slot's bytes and of the device totals
 * happens under `lock`, a robust process-shared mutex. The process slots are the truth and the
 * device totals their cache: whenever the lock is free, dev[d].used == the sum of procs[*].used[d].
 * Before an allocation of n bytes on device d a process takes the lock, checks the quota, adds n to
 * its slot and to dev[d].used, lets the lock go, then makes the real allocation (and takes the n
 * bytes back the same way if that fails). A process killed while it holds the lock (at any
 * instruction) leaves the mutex owner-dead: the next process to take it gets EOWNERDEAD and
 * recomputes every device total from the slots before it marks the mutex consistent, so a
 * half-done update is neither lost nor applied twice; a recoverer killed while recovering leaves
 * the mutex owner-dead again, and the next one starts over. The bytes of a dead process (its pid
 * gone, a zombie, or reused: start_time differs) are given back, under the lock, by whoever
 * notices first; a process that exits with allocations left keeps its slot until it is dead,
 * because the driver frees its memory only then. */
#ifndef GS_GUARD_REGION_H
#define GS_GUARD_REGION_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define GS_GUARD_REGION_MAGIC 0x47534752u /* "GSGR" */
#define GS_GUARD_REGION_VERSION 2u
#define GS_GUARD_MAX_DEVICES 16
#define GS_GUARD_MAX_PROCS 1024
#define GS_GUARD_LOCK_READY 0x4c4f434bu /* "LOCK" */

struct gs_guard_dev_counters {
    _Atomic uint64_t used;             /* bytes reserved by all processes: the sum of the slots' */
    _Atomic uint64_t peak;
    _Atomic uint64_t oom_refusals;     /* allocations refused by the quota */
    _Atomic uint64_t busy_ns;          /* compute pacing: GPU time the container used (simulated or measured) */
    _Atomic uint64_t window_start_ns;
};

struct gs_guard_proc_slot {
    _Atomic int32_t pid;               /* 0 free */
    uint32_t pad;
    _Atomic uint64_t start_time;       /* /proc/PID/stat field 22: tells a reused pid apart */
    _Atomic uint64_t used[GS_GUARD_MAX_DEVICES];
};

struct gs_guard_region {
    uint32_t magic;
    uint32_t version;
    uint32_t size;                     /* sizeof(struct gs_guard_region) of the writer */
    uint32_t n_devices;
    union {
        pthread_mutex_t lock;          /* robust, process-shared: every slot and total update */
        char lock_space[64];
    };
    _Atomic uint32_t lock_ready;       /* GS_GUARD_LOCK_READY once `lock` is initialised (under flock) */
    _Atomic uint32_t n_slots;          /* slots [0, n_slots) have ever been used: scans stop there */
    _Atomic uint32_t recoveries;       /* times a dead lock holder's half-done update was repaired */
    uint32_t pad;
    _Atomic uint64_t reclaimed;        /* slots of dead processes given back */
    struct gs_guard_dev_counters dev[GS_GUARD_MAX_DEVICES];
    struct gs_guard_proc_slot procs[GS_GUARD_MAX_PROCS];
};

_Static_assert(sizeof(pthread_mutex_t) <= 64, "the region keeps 64 bytes for its mutex");

#endif
