/* guard_reconcile.h: compares what the guard counted for each guarded allocation (its counters
 * region) with what NVML reports for the processes that use it, to catch allocation paths no hook
 * sees (CUDA contexts, graph memory nodes, imported memory). The processes of an allocation are
 * the GPU processes that map its region file (found by device and inode in /proc/PID/maps), so
 * this works across PID namespaces as long as the agent sees the host's processes (hostPID). */
#ifndef GS_GUARD_RECONCILE_H
#define GS_GUARD_RECONCILE_H

#include <stddef.h>

#include "core/inventory.h"
#include "core/metrics.h"

/* Differences smaller than this are not logged. */
#define GS_GUARD_RECONCILE_TOLERANCE (32ULL << 20)

/* Scans the allocations under GUARD_ROOT (each with limits and state/region) against the processes in `inv` and PROC_ROOT/PID/maps;
 * fills out[0..*n) (one entry per allocation and GPU with a quota). A difference beyond the
 * tolerance is logged when it first appears or moves by more than the tolerance since `prev`
 * (the previous result, n_prev entries). Unreadable allocations are skipped with a debug line. */
void guard_reconcile(const char *guard_root, const char *proc_root, const struct gs_inventory *inv,
                     const struct gs_guard_usage *prev, size_t n_prev, struct gs_guard_usage *out, size_t max,
                     size_t *n);

/* For each owners[i].pid, the guarded allocation under GUARD_ROOT whose counters region the
 * process maps (PROC_ROOT/PID/maps): the first device of its devices record, in resource and
 * device (left as they are when none). Every allocation whose region exists is looked at, at most
 * 256. */
struct gs_util_owner;
void guard_region_owners(const char *guard_root, const char *proc_root, struct gs_util_owner *owners, size_t n);

#endif
