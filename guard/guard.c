/* guard.c: libgpuslice-guard.so, a CUDA driver API interposer that enforces a VRAM quota per
 * container (all its processes together) for time-sliced GPUs. This file: the library's
 * constructor and what happens to the guard at fork and at exit; the rest is split by concern:
 *
 *   guard_lookup.c   interposition at the three layers programs use: the exported driver symbols
 *                    (the library is preloaded, so its definitions win), dlsym and cuGetProcAddress
 *   guard_driver.c   the real functions (libcuda's, libnvidia-ml's)
 *   guard_core.c     the guard's state, set up by its first call
 *   guard_env.c      where the limits come from (the mounted file, gpuslice exec, the environment)
 *   guard_account.c  the container's accounting in its shared region: the robust lock,
 *                    reservations, dead processes' bytes given back
 *   guard_table.c    what this process allocated
 *   guard_memory.c   the allocation wrappers (memory, arrays, primary contexts)
 *   guard_vmm.c      virtual memory management, pools, stream-ordered allocation
 *   guard_view.c     what the workload sees: the quota in cuMemGetInfo and NVML
 *   guard_pace.c     compute shares: the pacer of kernel launches
 *   guard_putil.c    the GPU time received, from NVML's per-process utilization
 *   guard_launch.c   the kernel launch wrappers, the hot path
 *   guard_exec.c     the exec family, system and popen: every program started loads the guard
 *
 * This is cooperative isolation (docs/guard.md): a static binary or a process that unmaps the
 * guard escapes it; MIG is the hard boundary. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "guard_account.h"
#include "guard_base.h"
#include "guard_core.h"
#include "guard_env.h"
#include "guard_memory.h"
#include "guard_pace.h"
#include "guard_table.h"
#include "guard_vmm.h"

/* A forked child is a new process: it needs its own slot (claimed at its first reservation). */
static void after_fork_child(void) {
    if (atomic_load(&g_core.state) == G_READY && g_acct.region) {
        account_forget_slot(&g_acct);
        memory_after_fork(&g_memory);
        table_after_fork(&g_table); /* another thread of the parent may have held its lock */
        pace_after_fork(&g_pacer);
        vmm_after_fork(&g_vmm);
        /* A slot when the child first allocates: most children exec at once, and a slot taken now
         * would name the pid until the exec'd program dies. */
    }
}

/* On exit, the slot is freed if the process holds nothing (guard_account.c). */
static void release_slot(void) {
    if (atomic_load(&g_core.state) == G_READY)
        account_release_slot(&g_acct);
}

__attribute__((constructor)) static void guard_ctor(void) {
    guard_env_init();
    guard_fault_init();
    pthread_atfork(NULL, NULL, after_fork_child);
    atexit(release_slot);
}
