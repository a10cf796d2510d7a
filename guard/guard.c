/* guard.c: libgpuslice-guard.so, a CUDA driver API interposer that enforces a VRAM quota per
 * container (all its processes together) for time-sliced GPUs.
 *
 * Interposition at the three layers programs use: the exported driver symbols (the library is
 * preloaded, so its definitions win), dlsym (programs and cudart that dlopen libcuda and look
 * symbols up in it), and cuGetProcAddress / _v2 (cudart >= 11.3 fetches every driver function
 * this way): a lookup of a hooked function returns the wrapper with the ABI the caller asked for;
 * older ABIs and unknown symbols pass through untouched.
 *
 * Accounting: reserve before allocating, under the robust process-shared lock of the container's
 * shared region (guard_region.h: a SIGKILL at any instruction is repaired by the next locker), rolled
 * back if the real allocation fails; frees of pointers the guard did not see go to the driver
 * untouched; the bytes of a process come back when it is dead, not at its exit. The limits come from
 * a read-only file (guard_limits.h: in a container the mounted one, whatever the environment says, or
 * gpuslice exec's sealed memfd, found through the process's ancestors) and every program a guarded
 * process starts loads the guard again (guard_exec.c). This is cooperative isolation (docs/guard.md):
 * a static binary or a process that unmaps the guard escapes it; MIG is the hard boundary.
 *
 * The kernel-launch path does one relaxed atomic load when no compute limit applies. */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cuda_api.h"
#include "guard_exec.h"
#include "guard_layout.h"
#include "guard_limits.h"
#include "guard_proc.h"
#include "guard_region.h"

#define EXPORT __attribute__((visibility("default")))
/* The limits file the agent mounts read-only into a container: when it exists, it is the only
 * source of limits (GPUSLICE_GUARD_CONFIG cannot override it). A test build points it elsewhere. */
#ifndef GS_GUARD_DEFAULT_CONFIG
#define GS_GUARD_DEFAULT_CONFIG GS_GUARD_CONF_IN_CONTAINER
#endif
#define DEFAULT_CONFIG GS_GUARD_DEFAULT_CONFIG
#define UNLIMITED_DEVICE (-1)


/* ---- real functions ------------------------------------------------------------------------- */

#define DECLARE_REAL(name, params, args) typedef CUresult(*name##_fn) params; static name##_fn real_##name;
GS_CUDA_HOOKED_FUNCTIONS(DECLARE_REAL)
static cuLaunchKernel_fn real_cuLaunchKernel_ptsz;
static cuLaunchKernelEx_fn real_cuLaunchKernelEx_ptsz;
static cuLaunchCooperativeKernel_fn real_cuLaunchCooperativeKernel_ptsz;
static cuGraphLaunch_fn real_cuGraphLaunch_ptsz;
static cuMemAllocAsync_fn real_cuMemAllocAsync_ptsz;
static cuMemAllocFromPoolAsync_fn real_cuMemAllocFromPoolAsync_ptsz;
static cuMemFreeAsync_fn real_cuMemFreeAsync_ptsz;
static cuCtxGetDevice_fn real_cuCtxGetDevice;
static cuGetProcAddress_fn real_cuGetProcAddress;
static cuGetProcAddress_v2_fn real_cuGetProcAddress_v2;
static cuEventCreate_fn real_cuEventCreate;
static cuEventRecord_fn real_cuEventRecord, real_cuEventRecord_ptsz;
static cuEventQuery_fn real_cuEventQuery;
static cuEventElapsedTime_fn real_cuEventElapsedTime;
static cuEventDestroy_v2_fn real_cuEventDestroy;


/* ---- state ---------------------------------------------------------------------------------- */

enum guard_state { G_UNINIT = 0, G_READY, G_OPEN, G_CLOSED };
static _Atomic int g_state;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Atomic bool g_pacing; /* some device has a compute limit and the pacer can time kernels */
static struct gs_guard_limits g_limits;
static struct gs_guard_region *g_region;
static struct gs_guard_proc_slot *g_slot;
static int g_dev_index[GS_GUARD_MAX_DEVICES]; /* CUDA ordinal -> index into g_limits.dev, or -1 */
static void *g_libcuda;

static void glog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void glog(const char *fmt, ...) {
    char buf[512];
    int n = snprintf(buf, sizeof(buf), "gpuslice-guard[%d]: ", (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = strlen(buf);
    if (len + 1 < sizeof(buf))
        buf[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, len);
    (void)w;
}

static void *cuda_sym(const char *name) {
    return g_libcuda ? real_dlsym(g_libcuda, name) : NULL;
}

static void resolve_driver(void) {
    resolve_dlsym();
    g_libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!g_libcuda) {
        glog("cannot load libcuda.so.1: %s", dlerror());
        return;
    }
#define RESOLVE(name, params, args) real_##name = (name##_fn)cuda_sym(#name);
    GS_CUDA_HOOKED_FUNCTIONS(RESOLVE)
    real_cuLaunchKernel_ptsz = (cuLaunchKernel_fn)cuda_sym("cuLaunchKernel_ptsz");
    real_cuLaunchKernelEx_ptsz = (cuLaunchKernelEx_fn)cuda_sym("cuLaunchKernelEx_ptsz");
    real_cuLaunchCooperativeKernel_ptsz = (cuLaunchCooperativeKernel_fn)cuda_sym("cuLaunchCooperativeKernel_ptsz");
    real_cuGraphLaunch_ptsz = (cuGraphLaunch_fn)cuda_sym("cuGraphLaunch_ptsz");
    real_cuMemAllocAsync_ptsz = (cuMemAllocAsync_fn)cuda_sym("cuMemAllocAsync_ptsz");
    real_cuMemAllocFromPoolAsync_ptsz = (cuMemAllocFromPoolAsync_fn)cuda_sym("cuMemAllocFromPoolAsync_ptsz");
    real_cuMemFreeAsync_ptsz = (cuMemFreeAsync_fn)cuda_sym("cuMemFreeAsync_ptsz");
    real_cuCtxGetDevice = (cuCtxGetDevice_fn)cuda_sym("cuCtxGetDevice");
    real_cuGetProcAddress = (cuGetProcAddress_fn)cuda_sym("cuGetProcAddress");
    real_cuGetProcAddress_v2 = (cuGetProcAddress_v2_fn)cuda_sym("cuGetProcAddress_v2");
    real_cuEventCreate = (cuEventCreate_fn)cuda_sym("cuEventCreate");
    real_cuEventRecord = (cuEventRecord_fn)cuda_sym("cuEventRecord");
    real_cuEventRecord_ptsz = (cuEventRecord_fn)cuda_sym("cuEventRecord_ptsz");
    real_cuEventQuery = (cuEventQuery_fn)cuda_sym("cuEventQuery");
    real_cuEventElapsedTime = (cuEventElapsedTime_fn)cuda_sym("cuEventElapsedTime");
    real_cuEventDestroy = (cuEventDestroy_v2_fn)cuda_sym("cuEventDestroy_v2");
}

/* ---- region --------------------------------------------------------------------------------- */

#define proc_stat gs_proc_stat

static uint64_t proc_start_time(pid_t pid) { return proc_stat(pid, NULL); }

static bool slot_dead(struct gs_guard_proc_slot *s, int32_t pid) {
    if (kill(pid, 0) < 0 && errno == ESRCH)
        return true;
    char state = '?';
    uint64_t st = atomic_load(&s->start_time);
    uint64_t now = proc_stat(pid, &state);
    if (state == 'Z' || state == 'X')
        return true; /* killed but not reaped (a PID 1 that never reaps): its memory is gone */
    return now && st && now != st; /* the pid was reused */
}

/* ---- fault points (test builds only) ------------------------------------------------------------ *
 *
 * Built with -DGS_GUARD_FAULT_POINTS (tests/guard: libgpuslice-guard-faults.so), the guard kills
 * itself with SIGKILL at the named point, GPUSLICE_GUARD_FAULT=NAME[:N] (the Nth time it gets
 * there, default the first), so that a test can prove the protocol survives a death in every
 * window. The production library has none of this. */
#ifdef GS_GUARD_FAULT_POINTS
static char g_fault[64];
static long g_fault_nth = 1;
static _Atomic long g_fault_hits;
static void fault_point(const char *name) {
    if (g_fault[0] && !strcmp(name, g_fault) && atomic_fetch_add(&g_fault_hits, 1) + 1 == g_fault_nth)
        raise(SIGKILL);
}
#define FAULT(name) fault_point(name)
#else
#define FAULT(name) ((void)0)
#endif

/* ---- the region's lock ---------------------------------------------------------------------------- */

static uint32_t slot_count(void) {
    uint32_t n = atomic_load_explicit(&g_region->n_slots, memory_order_relaxed);
    return n > GS_GUARD_MAX_PROCS ? GS_GUARD_MAX_PROCS : n;
}

/* The device totals from the slots (the truth), under the lock: repairs a dead holder's half-done
 * update. */
static void recompute_totals(void) {
    uint64_t sum[GS_GUARD_MAX_DEVICES] = { 0 };
    for (uint32_t i = 0, n = slot_count(); i < n; i++)
        for (unsigned d = 0; d < GS_GUARD_MAX_DEVICES; d++)
            sum[d] += atomic_load_explicit(&g_region->procs[i].used[d], memory_order_relaxed);
    FAULT("recover.partial");
    for (unsigned d = 0; d < GS_GUARD_MAX_DEVICES; d++)
        atomic_store(&g_region->dev[d].used, sum[d]);
}

/* Takes the region's lock; false (logged once) if it is unusable. A holder that died makes the
 * next one repair the totals: whatever instruction it died at, the slots say what is held. */
static bool region_lock(void) {
    int r = pthread_mutex_lock(&g_region->lock);
    if (__builtin_expect(r == 0, 1))
        return true;
    if (r == EOWNERDEAD) {
        FAULT("recover.locked");
        recompute_totals();
        atomic_fetch_add(&g_region->recoveries, 1);
        pthread_mutex_consistent(&g_region->lock);
        return true;
    }
    static _Atomic bool logged;
    if (!atomic_exchange(&logged, true))
        glog("the counters region's lock is unusable (%s): allocations are refused", strerror(r));
    return false;
}

static void region_unlock(void) {
    pthread_mutex_unlock(&g_region->lock);
}

/* Gives the bytes of processes that died back to the container. Returns the number reclaimed.
 * Whether a process is dead is checked without the lock (it stays dead); the slot is taken back
 * under it, if it still names the same process. */
static unsigned reclaim_dead(void) {
    int32_t me = (int32_t)getpid();
    unsigned n = 0;
    bool locked = false;
    for (uint32_t i = 0, ns = slot_count(); i < ns; i++) {
        struct gs_guard_proc_slot *s = &g_region->procs[i];
        int32_t pid = atomic_load(&s->pid);
        if (pid <= 0 || pid == me || !slot_dead(s, pid))
            continue;
        uint64_t start = atomic_load(&s->start_time);
        if (!locked && !(locked = region_lock()))
            return n;
        FAULT("reclaim.locked");
        if (atomic_load(&s->pid) != pid || atomic_load(&s->start_time) != start)
            continue; /* reclaimed (and perhaps reused) meanwhile */
        for (unsigned d = 0; d < GS_GUARD_MAX_DEVICES; d++) {
            uint64_t b = atomic_load(&s->used[d]);
            if (!b)
                continue;
            uint64_t u = atomic_load(&g_region->dev[d].used);
            atomic_store(&g_region->dev[d].used, u > b ? u - b : 0);
            FAULT("reclaim.partial");
            atomic_store(&s->used[d], 0);
        }
        FAULT("reclaim.slot");
        atomic_store(&s->start_time, 0);
        atomic_store(&s->pid, 0);
        atomic_fetch_add(&g_region->reclaimed, 1);
        n++;
    }
    if (locked)
        region_unlock();
    return n;
}

/* Initialises the region's robust process-shared lock (under the region's flock, before anyone
 * uses it) and, for a region some other writer laid out, the slot count and totals. */
static int init_lock(void) {
    pthread_mutexattr_t a;
    int r = pthread_mutexattr_init(&a);
    if (!r)
        r = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    if (!r)
        r = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    if (!r)
        r = pthread_mutex_init(&g_region->lock, &a);
    pthread_mutexattr_destroy(&a);
    if (r)
        return -r;
    uint32_t n = 0;
    for (uint32_t i = 0; i < GS_GUARD_MAX_PROCS; i++)
        if (atomic_load(&g_region->procs[i].pid) != 0)
            n = i + 1;
    atomic_store(&g_region->n_slots, n);
    recompute_totals();
    atomic_store(&g_region->lock_ready, GS_GUARD_LOCK_READY);
    return 0;
}

static int map_region(const char *path) {
    /* Every process of the container, whatever its user, must be able to account. */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0) {
        glog("cannot open the region %s: %s", path, strerror(errno));
        return -errno;
    }
    flock(fd, LOCK_EX);
    struct stat st;
    int r = 0;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
        (st.st_size < (off_t)sizeof(struct gs_guard_region) && ftruncate(fd, sizeof(struct gs_guard_region)) < 0)) {
        r = S_ISREG(st.st_mode) ? -errno : -EINVAL;
        glog("cannot size the region %s: %s", path, strerror(-r));
        goto out;
    }
    void *p = mmap(NULL, sizeof(struct gs_guard_region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        r = -errno;
        glog("cannot map the region %s: %s", path, strerror(errno));
        goto out;
    }
    g_region = p;
    if (g_region->magic == 0) {
        fchmod(fd, 0666); /* not narrowed by the first process's umask */
        g_region->version = GS_GUARD_REGION_VERSION;
        g_region->size = sizeof(struct gs_guard_region);
        g_region->n_devices = GS_GUARD_MAX_DEVICES;
        g_region->magic = GS_GUARD_REGION_MAGIC;
    } else if (g_region->magic != GS_GUARD_REGION_MAGIC || g_region->version != GS_GUARD_REGION_VERSION) {
        glog("region %s has an unknown format (magic %08x version %u)", path, g_region->magic, g_region->version);
        r = -EPROTO;
    }
    if (!r && atomic_load(&g_region->lock_ready) != GS_GUARD_LOCK_READY && (r = init_lock()) < 0)
        glog("cannot set up the region's lock %s: %s", path, strerror(-r));
    if (r) {
        munmap(p, sizeof(struct gs_guard_region));
        g_region = NULL;
    }
out:
    flock(fd, LOCK_UN);
    close(fd);
    return r;
}

static int claim_slot(void) {
    int32_t me = (int32_t)getpid();
    uint64_t start = proc_start_time(me);
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!region_lock())
            return -ENOLCK;
        FAULT("claim.locked");
        for (unsigned i = 0; i < GS_GUARD_MAX_PROCS; i++) {
            struct gs_guard_proc_slot *s = &g_region->procs[i];
            if (atomic_load(&s->pid) != 0)
                continue;
            if (i >= slot_count())
                atomic_store(&g_region->n_slots, i + 1);
            /* A free slot holds nothing; one written by another tool might: keep the sum true. */
            for (unsigned d = 0; d < GS_GUARD_MAX_DEVICES; d++) {
                uint64_t b = atomic_exchange(&s->used[d], 0), u = atomic_load(&g_region->dev[d].used);
                if (b)
                    atomic_store(&g_region->dev[d].used, u > b ? u - b : 0);
            }
            atomic_store(&s->start_time, start); /* before the pid: a slot never names a pid without it */
            atomic_store(&s->pid, me);
            FAULT("claim.pid");
            region_unlock();
            g_slot = s;
            return 0;
        }
        region_unlock();
        reclaim_dead();
    }
    glog("no free process slot in the region (%d processes)", GS_GUARD_MAX_PROCS);
    return -ENOSPC;
}

/* Looks for an "on-error open" line (any spacing, comments ignored) in a file that did not parse. */
static bool says_fail_open(const char *text) {
    for (const char *p = text; *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char line[256], w1[32], w2[32], extra[2];
        if (len < sizeof(line)) {
            memcpy(line, p, len);
            line[len] = '\0';
            char *hash = strchr(line, '#');
            if (hash)
                *hash = '\0';
            if (sscanf(line, "%31s %31s %1s", w1, w2, extra) == 2 && !strcmp(w1, "on-error") && !strcmp(w2, "open"))
                return true;
        }
        p = eol ? eol + 1 : p + len;
    }
    return false;
}

/* ---- initialisation ------------------------------------------------------------------------- */

/* The limits text: read at load from a sealed memfd (gpuslice exec's, or /proc/self/fd/N; see
 * guard_exec.c), or from a regular file (never a FIFO, which would block the program's first CUDA
 * call). NULL with the reason in why. */
static char *read_limits(const char *path, size_t *len, char *why, size_t whylen) {
    char *text = NULL;
    if (g_cfg.from_fd) {
        if (!g_cfg.text)
            snprintf(why, whylen, "%s", g_cfg.why);
        else if ((text = malloc(g_cfg.len + 1)))
            memcpy(text, g_cfg.text, g_cfg.len + 1), *len = g_cfg.len;
        else
            snprintf(why, whylen, "%s", strerror(errno));
        return text;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0)
        snprintf(why, whylen, "%s", strerror(errno));
    else if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        snprintf(why, whylen, "not a regular file");
    else if (!(text = guard_read_all(fd, len)))
        snprintf(why, whylen, "%s", strerror(errno));
    if (fd >= 0)
        close(fd);
    return text;
}

static void init_once(void) {
    resolve_driver();
    for (unsigned i = 0; i < GS_GUARD_MAX_DEVICES; i++)
        g_dev_index[i] = UNLIMITED_DEVICE;
    const char *path = g_cfg.path[0] ? g_cfg.path : DEFAULT_CONFIG;
    if (g_cfg.ignored[0])
        glog("GPUSLICE_GUARD_CONFIG=%s ignored: the limits come from %s", g_cfg.ignored, g_cfg.source);
    size_t text_len = 0;
    char why[160] = "";
    char *text = read_limits(path, &text_len, why, sizeof(why));
    if (!text) {
        glog("limits file %s: %s: failing closed, allocations are refused", path, why);
        atomic_store(&g_state, G_CLOSED);
        return;
    }
    char err[512];
    if (gs_guard_limits_parse(path, text, text_len, &g_limits, err, sizeof(err)) < 0) {
        /* A damaged file still says how to fail, if its on-error line survived. */
        bool open_mode = says_fail_open(text);
        glog("%s: failing %s", err, open_mode ? "open: no limits are enforced" : "closed: allocations are refused");
        atomic_store(&g_state, open_mode ? G_OPEN : G_CLOSED);
        free(text);
        return;
    }
    free(text);
    if (map_region(g_limits.region) < 0 || claim_slot() < 0) {
        atomic_store(&g_state, g_limits.fail_closed ? G_CLOSED : G_OPEN);
        return;
    }
    reclaim_dead();
    bool want_pacing = false;
    for (unsigned i = 0; i < g_limits.n_devices; i++) {
        g_dev_index[g_limits.dev[i].ordinal] = (int)i;
        want_pacing |= g_limits.dev[i].compute_pct != 0;
    }
    if (want_pacing) {
        if (real_cuEventCreate && real_cuEventRecord && real_cuEventQuery && real_cuEventElapsedTime &&
            real_cuEventDestroy)
            atomic_store(&g_pacing, true);
        else
            glog("%s: the driver has no event timing: compute limits are not enforced", path);
    }
    atomic_store(&g_state, G_READY);
}

static inline int guard_state(void) {
    int s = atomic_load_explicit(&g_state, memory_order_acquire);
    if (__builtin_expect(s != G_UNINIT, 1))
        return s;
    pthread_once(&g_once, init_once);
    return atomic_load(&g_state);
}

/* The device allocations go to: the current context's. */
static int current_device(void) {
    CUdevice d = 0;
    if (!real_cuCtxGetDevice || real_cuCtxGetDevice(&d) != CUDA_SUCCESS || d < 0 || d >= GS_GUARD_MAX_DEVICES)
        return 0;
    return d;
}

static uint64_t device_limit(int dev) {
    int i = dev >= 0 && dev < GS_GUARD_MAX_DEVICES ? g_dev_index[dev] : UNLIMITED_DEVICE;
    return i < 0 ? 0 : g_limits.dev[i].vram;
}

/* ---- reservations --------------------------------------------------------------------------- */

static bool reserve(int dev, uint64_t n) {
    if (n == 0)
        return true;
    if (__builtin_expect(!g_slot, 0)) { /* a forked child's first reservation */
        static pthread_mutex_t claim_lock = PTHREAD_MUTEX_INITIALIZER;
        pthread_mutex_lock(&claim_lock);
        int r = g_slot ? 0 : claim_slot();
        pthread_mutex_unlock(&claim_lock);
        if (r < 0)
            return false;
    }
    uint64_t limit = device_limit(dev);
    struct gs_guard_dev_counters *c = &g_region->dev[dev];
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!region_lock())
            break;
        FAULT("reserve.locked");
        uint64_t old = atomic_load_explicit(&c->used, memory_order_relaxed);
        if (limit ? old <= limit && n <= limit - old : n <= UINT64_MAX - old) {
            atomic_store_explicit(&g_slot->used[dev], atomic_load_explicit(&g_slot->used[dev], memory_order_relaxed) + n,
                                  memory_order_relaxed);
            FAULT("reserve.slot");
            atomic_store_explicit(&c->used, old + n, memory_order_relaxed);
            if (old + n > atomic_load_explicit(&c->peak, memory_order_relaxed))
                atomic_store_explicit(&c->peak, old + n, memory_order_relaxed);
            FAULT("reserve.dev");
            region_unlock();
            return true;
        }
        region_unlock();
        if (!reclaim_dead())
            break; /* nothing to give back: really over the quota */
    }
    atomic_fetch_add(&c->oom_refusals, 1);
    return false;
}

/* Gives back bytes this process reserved (never more than its slot holds). */
static void unreserve(int dev, uint64_t n) {
    if (n == 0 || !g_slot || !region_lock())
        return;
    FAULT("unreserve.locked");
    uint64_t mine = atomic_load_explicit(&g_slot->used[dev], memory_order_relaxed);
    if (n > mine)
        n = mine;
    atomic_store_explicit(&g_slot->used[dev], mine - n, memory_order_relaxed);
    FAULT("unreserve.slot");
    uint64_t u = atomic_load_explicit(&g_region->dev[dev].used, memory_order_relaxed);
    atomic_store_explicit(&g_region->dev[dev].used, u > n ? u - n : 0, memory_order_relaxed);
    FAULT("unreserve.dev");
    region_unlock();
}

/* ---- what this process allocated: key -> (device, bytes) ------------------------------------ */

enum kind { K_PTR = 1, K_HANDLE, K_ARRAY, K_MIPMAP, K_CTX };

struct entry {
    uint64_t key;       /* 0 = empty */
    uint32_t kind;
    int32_t dev;
    uint64_t bytes;
    uint32_t maps;      /* K_HANDLE: its live mappings (cuMemMap); MAPS_LOST: not known, held till exit */
    uint32_t released;  /* K_HANDLE: released while mapped, its bytes held until the last unmap */
};
#define MAPS_LOST UINT32_MAX

/* The table's lock: held for a few dozen instructions (a lookup, an insert, a rare growth), so a
 * spinlock that yields when it waits long is cheaper than a mutex (which cost ~50 instructions per
 * allocation and per free). Per process: a SIGKILL cannot leave it held for anyone else. */
static _Atomic int g_table_lock;

static void table_lock(void) {
    for (unsigned spins = 0; atomic_exchange_explicit(&g_table_lock, 1, memory_order_acquire);) {
        while (atomic_load_explicit(&g_table_lock, memory_order_relaxed))
            if (++spins >= 64) { /* the holder may be preempted */
                sched_yield();
                spins = 0;
            }
    }
}

static void table_unlock(void) {
    atomic_store_explicit(&g_table_lock, 0, memory_order_release);
}

/* Open addressing with linear probing and backward-shift deletion: no tombstones, so an
 * allocation and free cycle never makes the table rebuild itself. */
static struct entry *g_table;
static size_t g_cap, g_count;
/* Where entries go when the table cannot grow (see table_put). */
#define OVERFLOW_ENTRIES 64
static struct entry g_overflow[OVERFLOW_ENTRIES];
static _Atomic unsigned g_overflow_lost; /* allocations counted until exit: their free could not be matched */

static size_t slot_of(uint64_t key, uint32_t kind, size_t cap) {
    uint64_t h = (key ^ ((uint64_t)kind << 61)) * 0x9E3779B97F4A7C15ULL;
    return (size_t)(h >> 20) & (cap - 1);
}

static bool table_put_locked(uint64_t key, uint32_t kind, int dev, uint64_t bytes) {
    if ((g_count + 1) * 2 > g_cap) {
        size_t cap = g_cap ? g_cap * 2 : 1024;
        struct entry *t = calloc(cap, sizeof(*t));
        if (!t)
            return false;
        for (size_t i = 0; i < g_cap; i++) {
            if (!g_table[i].key)
                continue;
            size_t j = slot_of(g_table[i].key, g_table[i].kind, cap);
            while (t[j].key)
                j = (j + 1) & (cap - 1);
            t[j] = g_table[i];
        }
        free(g_table);
        g_table = t;
        g_cap = cap;
    }
    size_t j = slot_of(key, kind, g_cap);
    while (g_table[j].key)
        j = (j + 1) & (g_cap - 1);
    g_table[j] = (struct entry){ key, kind, dev, bytes };
    g_count++;
    return true;
}

/* The entry of (key, kind) in the table or the overflow list, or NULL; under g_table_lock. */
static struct entry *table_find_locked(uint64_t key, uint32_t kind) {
    for (size_t j = g_cap ? slot_of(key, kind, g_cap) : 0, n = 0; g_cap && n < g_cap; j = (j + 1) & (g_cap - 1), n++) {
        if (g_table[j].key == 0)
            break;
        if (g_table[j].key == key && g_table[j].kind == kind)
            return &g_table[j];
    }
    for (unsigned i = 0; i < OVERFLOW_ENTRIES; i++)
        if (g_overflow[i].key == key && g_overflow[i].kind == kind)
            return &g_overflow[i];
    return NULL;
}

static void table_remove_locked(struct entry *e) {
    if (e >= g_overflow && e < g_overflow + OVERFLOW_ENTRIES) {
        e->key = 0;
        return;
    }
    /* Backward shift: each later entry of the run that may sit in the hole moves into it. */
    size_t hole = (size_t)(e - g_table), mask = g_cap - 1;
    for (size_t k = (hole + 1) & mask; g_table[k].key; k = (k + 1) & mask) {
        size_t home = slot_of(g_table[k].key, g_table[k].kind, g_cap);
        /* it stays if its home is cyclically within (hole, k] */
        if (hole < k ? home > hole && home <= k : home > hole || home <= k)
            continue;
        g_table[hole] = g_table[k];
        hole = k;
    }
    g_table[hole].key = 0;
    g_count--;
}

static bool table_take(uint64_t key, uint32_t kind, int *dev, uint64_t *bytes) {
    table_lock();
    struct entry *e = table_find_locked(key, kind);
    if (e) {
        *dev = e->dev;
        *bytes = e->bytes;
        table_remove_locked(e);
    }
    table_unlock();
    return e != NULL;
}

/* Remembers an allocation. When the table cannot grow (no memory), the entry goes into the
 * overflow list, a fixed array; when that is full too, the bytes stay counted against the quota
 * (the process holds them until it exits, and reclaim gives them back once it is dead): an
 * allocation is never live and uncounted. */

static void table_put(uint64_t key, uint32_t kind, int dev, uint64_t bytes) {
    table_lock();
    bool ok = table_put_locked(key, kind, dev, bytes);
    for (unsigned i = 0; !ok && i < OVERFLOW_ENTRIES; i++)
        if (!g_overflow[i].key) {
            g_overflow[i] = (struct entry){ key, kind, dev, bytes };
            ok = true;
        }
    table_unlock();
    if (!ok && !atomic_fetch_add(&g_overflow_lost, 1))
        glog("out of memory: an allocation of %llu bytes stays counted until the process exits",
             (unsigned long long)bytes);
}

/* ---- allocation wrappers -------------------------------------------------------------------- */

#define MISSING(name) CUDA_ERROR_NOT_INITIALIZED
/* Frees and releases: never refused, whatever the guard's state. */
#define FREE_BEGIN(name)                                                                                      \
    int st_ = guard_state();                                                                                  \
    if (!real_##name)                                                                                         \
        return MISSING(name);
#define GUARDED_BEGIN(name)                                                                                   \
    int st_ = guard_state();                                                                                  \
    if (!real_##name)                                                                                         \
        return MISSING(name);                                                                                 \
    if (st_ == G_CLOSED)                                                                                      \
        return CUDA_ERROR_OUT_OF_MEMORY;

/* Allocates `bytes` through `call` (an expression yielding CUresult) with a reservation first, on
 * the current context's device (RESERVED_ALLOC) or on `dev_expr`. */
#define RESERVED_ALLOC(bytes, call, key_expr, kind) RESERVED_ALLOC_ON(current_device(), bytes, call, key_expr, kind)
#define RESERVED_ALLOC_ON(dev_expr, bytes, call, key_expr, kind)                                              \
    do {                                                                                                      \
        if (st_ != G_READY)                                                                                   \
            return (call);                                                                                    \
        int dev_ = (dev_expr);                                                                                \
        uint64_t n_ = (bytes);                                                                                \
        if (!reserve(dev_, n_))                                                                               \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                                  \
        FAULT("alloc.reserved");                                                                              \
        CUresult r_ = (call);                                                                                 \
        if (r_ != CUDA_SUCCESS) {                                                                             \
            unreserve(dev_, n_);                                                                              \
            return r_;                                                                                        \
        }                                                                                                     \
        FAULT("alloc.driver");                                                                                \
        table_put((uint64_t)(key_expr), kind, dev_, n_);                                                      \
        return CUDA_SUCCESS;                                                                                  \
    } while (0)

/* Frees through `call`; the bytes come back only if the free succeeded. Unknown keys go to the
 * driver untouched. */
#define TRACKED_FREE(key, kind, call)                                                                         \
    do {                                                                                                      \
        if (st_ != G_READY)                                                                                   \
            return (call);                                                                                    \
        int dev_;                                                                                             \
        uint64_t n_;                                                                                          \
        if (!table_take((uint64_t)(key), kind, &dev_, &n_))                                                   \
            return (call);                                                                                    \
        CUresult r_ = (call);                                                                                 \
        FAULT("free.driver");                                                                                 \
        if (r_ == CUDA_SUCCESS)                                                                               \
            unreserve(dev_, n_);                                                                              \
        else                                                                                                  \
            table_put((uint64_t)(key), kind, dev_, n_);                                                       \
        return r_;                                                                                            \
    } while (0)

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    GUARDED_BEGIN(cuMemAlloc_v2);
    if (!dptr)
        return real_cuMemAlloc_v2(dptr, bytesize);
    RESERVED_ALLOC(bytesize, real_cuMemAlloc_v2(dptr, bytesize), *dptr, K_PTR);
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    GUARDED_BEGIN(cuMemAllocManaged);
    if (!dptr)
        return real_cuMemAllocManaged(dptr, bytesize, flags);
    /* Counted at its full size: managed memory can become resident on the device. */
    RESERVED_ALLOC(bytesize, real_cuMemAllocManaged(dptr, bytesize, flags), *dptr, K_PTR);
}

/* The pitch is known only after the call: reserve the smallest possible size (width x height),
 * then reserve the padding, or give it all back if that does not fit. */
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t widthInBytes, size_t height,
                                   unsigned int elementSizeBytes) {
    GUARDED_BEGIN(cuMemAllocPitch_v2);
    if (st_ != G_READY || !dptr || !pitch)
        return real_cuMemAllocPitch_v2(dptr, pitch, widthInBytes, height, elementSizeBytes);
    int dev = current_device();
    if (height && widthInBytes > UINT64_MAX / height)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t min = (uint64_t)widthInBytes * height;
    if (!reserve(dev, min))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = real_cuMemAllocPitch_v2(dptr, pitch, widthInBytes, height, elementSizeBytes);
    if (r != CUDA_SUCCESS) {
        unreserve(dev, min);
        return r;
    }
    uint64_t real = (uint64_t)*pitch * height;
    if (real > min && !reserve(dev, real - min)) {
        if (real_cuMemFree_v2)
            real_cuMemFree_v2(*dptr);
        unreserve(dev, min);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    table_put(*dptr, K_PTR, dev, real > min ? real : min);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
    FREE_BEGIN(cuMemFree_v2);
    TRACKED_FREE(dptr, K_PTR, real_cuMemFree_v2(dptr));
}

/* ---- virtual memory management: cuMemCreate, cuMemMap, cuMemUnmap, cuMemRelease ---------------- *
 *
 * The driver frees a handle's memory when the handle is released AND its last mapping is unmapped,
 * in either order. So each handle's entry counts its mappings, the mappings are remembered (address,
 * size, handle: cuMemUnmap names an address range, which may hold several whole mappings), and the
 * bytes come back at whichever of the release and the last unmap comes last. */
struct vmm_map {
    CUdeviceptr ptr;
    uint64_t size;
    CUmemGenericAllocationHandle handle;
};
static struct vmm_map *g_maps; /* under g_table_lock */
static size_t g_n_maps, g_cap_maps;

/* cuMemCreate's size as the driver holds it: a multiple of the allocation granularity (cuda.h
 * requires one; if a driver rounds instead of refusing, the rounded size is what it holds). */
static uint64_t vmm_size(uint64_t size, const CUmemAllocationProp *prop) {
    static _Atomic(cuMemGetAllocationGranularity_fn) granularity_fn;
    cuMemGetAllocationGranularity_fn fn = atomic_load_explicit(&granularity_fn, memory_order_relaxed);
    if (!fn && g_libcuda) {
        fn = (cuMemGetAllocationGranularity_fn)cuda_sym("cuMemGetAllocationGranularity");
        atomic_store_explicit(&granularity_fn, fn, memory_order_relaxed);
    }
    size_t g = 0;
    if (!fn || fn(&g, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || g == 0 || size % g == 0 ||
        size > UINT64_MAX - g)
        return size;
    return size + (g - size % g);
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                            unsigned long long flags) {
    GUARDED_BEGIN(cuMemCreate);
    if (!handle || !prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return real_cuMemCreate(handle, size, prop, flags); /* only device memory counts */
    if (st_ != G_READY)
        return real_cuMemCreate(handle, size, prop, flags);
    int dev = prop->location.id >= 0 && prop->location.id < GS_GUARD_MAX_DEVICES ? prop->location.id : 0;
    uint64_t n = vmm_size(size, prop);
    if (!reserve(dev, n))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = real_cuMemCreate(handle, size, prop, flags);
    if (r != CUDA_SUCCESS) {
        unreserve(dev, n);
        return r;
    }
    table_put(*handle, K_HANDLE, dev, n);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                         unsigned long long flags) {
    FREE_BEGIN(cuMemMap);
    CUresult r = real_cuMemMap(ptr, size, offset, handle, flags);
    if (r != CUDA_SUCCESS || st_ != G_READY)
        return r;
    table_lock();
    struct entry *e = table_find_locked(handle, K_HANDLE);
    if (e && e->maps != MAPS_LOST) {
        if (g_n_maps == g_cap_maps) {
            size_t cap = g_cap_maps ? g_cap_maps * 2 : 64;
            struct vmm_map *m = realloc(g_maps, cap * sizeof(*m));
            if (m) {
                g_maps = m;
                g_cap_maps = cap;
            }
        }
        if (g_n_maps < g_cap_maps) {
            g_maps[g_n_maps++] = (struct vmm_map){ ptr, size, handle };
            e->maps++;
        } else {
            e->maps = MAPS_LOST; /* no memory to remember the mapping: counted until the process is dead */
        }
    }
    table_unlock();
    return r;
}

EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    FREE_BEGIN(cuMemUnmap);
    CUresult r = real_cuMemUnmap(ptr, size);
    if (r != CUDA_SUCCESS || st_ != G_READY)
        return r;
    table_lock();
    for (size_t i = 0; i < g_n_maps;) {
        struct vmm_map m = g_maps[i];
        if (m.ptr < ptr || m.ptr - ptr >= size) {
            i++;
            continue;
        }
        g_maps[i] = g_maps[--g_n_maps];
        struct entry *e = table_find_locked(m.handle, K_HANDLE);
        if (e && e->maps != MAPS_LOST && --e->maps == 0 && e->released) {
            int dev = e->dev;
            uint64_t n = e->bytes;
            table_remove_locked(e);
            unreserve(dev, n); /* the lock order is always the table's, then the region's */
        }
    }
    table_unlock();
    return r;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    FREE_BEGIN(cuMemRelease);
    if (st_ != G_READY)
        return real_cuMemRelease(handle);
    /* An unmapped handle is taken out of the table before the driver frees it (as every free
     * does), so that a handle value the driver hands out again at once is not confused with it. */
    int dev = 0;
    uint64_t n = 0;
    table_lock();
    struct entry *e = table_find_locked(handle, K_HANDLE);
    bool taken = e && !e->released && e->maps == 0;
    if (taken) {
        dev = e->dev;
        n = e->bytes;
        table_remove_locked(e);
    }
    table_unlock();
    CUresult r = real_cuMemRelease(handle);
    if (taken) {
        FAULT("free.driver");
        if (r == CUDA_SUCCESS)
            unreserve(dev, n);
        else
            table_put(handle, K_HANDLE, dev, n);
        return r;
    }
    if (r != CUDA_SUCCESS)
        return r;
    /* Still mapped: the driver keeps the memory until the last unmap, which gives the bytes back.
     * A handle already released (a reference cuMemRetainAllocationHandle took) changes nothing. */
    table_lock();
    e = table_find_locked(handle, K_HANDLE);
    if (e && !e->released && e->maps == 0) { /* unmapped meanwhile, by another thread */
        dev = e->dev;
        n = e->bytes;
        table_remove_locked(e);
    } else if (e && !e->released) {
        e->released = 1;
    }
    table_unlock();
    unreserve(dev, n);
    return r;
}

/* Memory pools and their devices: an allocation from a pool is charged to the pool's device, not
 * to the current context's (a pool of device 0 used from device 1's context). Pools are learnt
 * from cuDeviceGetDefaultMemPool and cuMemPoolCreate; an unknown pool (more than POOLS of them)
 * is charged to the current device. */
typedef struct { int allocType, handleTypes; CUmemLocation location; } guard_mem_pool_props; /* cuda.h's leading fields */
typedef CUresult (*cuDeviceGetDefaultMemPool_fn)(CUmemoryPool *, CUdevice);
typedef CUresult (*cuMemPoolCreate_fn)(CUmemoryPool *, const guard_mem_pool_props *);
#define POOLS 64
static struct { _Atomic(CUmemoryPool) pool; int dev; } g_pools[POOLS];

static void remember_pool(CUmemoryPool pool, int dev) {
    if (!pool || dev < 0 || dev >= GS_GUARD_MAX_DEVICES)
        return;
    for (unsigned i = 0; i < POOLS; i++) {
        CUmemoryPool cur = atomic_load(&g_pools[i].pool);
        if (cur == pool)
            return;
        if (!cur) {
            g_pools[i].dev = dev;
            CUmemoryPool none = NULL;
            if (atomic_compare_exchange_strong(&g_pools[i].pool, &none, pool) || none == pool)
                return;
        }
    }
}

static int pool_device(CUmemoryPool pool) {
    for (unsigned i = 0; i < POOLS; i++) {
        CUmemoryPool cur = atomic_load(&g_pools[i].pool);
        if (!cur)
            break;
        if (cur == pool)
            return g_pools[i].dev;
    }
    return current_device();
}

EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev) {
    guard_state();
    cuDeviceGetDefaultMemPool_fn real = (cuDeviceGetDefaultMemPool_fn)cuda_sym("cuDeviceGetDefaultMemPool");
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(pool, dev);
    if (r == CUDA_SUCCESS && pool)
        remember_pool(*pool, dev);
    return r;
}

EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const guard_mem_pool_props *props) {
    guard_state();
    cuMemPoolCreate_fn real = (cuMemPoolCreate_fn)cuda_sym("cuMemPoolCreate");
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(pool, props);
    if (r == CUDA_SUCCESS && pool && props && props->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
        remember_pool(*pool, props->location.id);
    return r;
}

/* Stream-ordered allocations are counted at their request size from the call until the free is
 * issued (the pool may keep the memory longer; the driver's own accounting is the reconcile). */
#define ASYNC_ALLOC(dev, real, ...)                                                                           \
    GUARDED_BEGIN(cuMemAllocAsync);                                                                           \
    if (!real)                                                                                                \
        return CUDA_ERROR_NOT_INITIALIZED;                                                                    \
    if (!dptr)                                                                                                \
        return real(__VA_ARGS__);                                                                             \
    RESERVED_ALLOC_ON(dev, bytesize, real(__VA_ARGS__), *dptr, K_PTR)

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    ASYNC_ALLOC(current_device(), real_cuMemAllocAsync, dptr, bytesize, hStream);
}
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    ASYNC_ALLOC(current_device(), real_cuMemAllocAsync_ptsz, dptr, bytesize, hStream);
}
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
    ASYNC_ALLOC(pool_device(pool), real_cuMemAllocFromPoolAsync, dptr, bytesize, pool, hStream);
}
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                             CUstream hStream) {
    ASYNC_ALLOC(pool_device(pool), real_cuMemAllocFromPoolAsync_ptsz, dptr, bytesize, pool, hStream);
}
EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
    FREE_BEGIN(cuMemFreeAsync);
    TRACKED_FREE(dptr, K_PTR, real_cuMemFreeAsync(dptr, hStream));
}
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
    FREE_BEGIN(cuMemFreeAsync);
    if (!real_cuMemFreeAsync_ptsz)
        return CUDA_ERROR_NOT_INITIALIZED;
    TRACKED_FREE(dptr, K_PTR, real_cuMemFreeAsync_ptsz(dptr, hStream));
}

static uint64_t format_bytes(CUarray_format f) {
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    default: return 4;
    }
}

/* Array sizes as laid out (estimates: the driver may pad; the reconcile with NVML catches it). */
static uint64_t array_bytes(size_t w, size_t h, size_t d, CUarray_format f, unsigned ch) {
    uint64_t b = (uint64_t)(w ? w : 1) * (h ? h : 1);
    b *= d ? d : 1;
    return b * format_bytes(f) * (ch ? ch : 1);
}

EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *desc) {
    GUARDED_BEGIN(cuArrayCreate_v2);
    if (!pHandle || !desc)
        return real_cuArrayCreate_v2(pHandle, desc);
    RESERVED_ALLOC(array_bytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels),
                   real_cuArrayCreate_v2(pHandle, desc), (uintptr_t)*pHandle, K_ARRAY);
}

EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc) {
    GUARDED_BEGIN(cuArray3DCreate_v2);
    if (!pHandle || !desc)
        return real_cuArray3DCreate_v2(pHandle, desc);
    RESERVED_ALLOC(array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels),
                   real_cuArray3DCreate_v2(pHandle, desc), (uintptr_t)*pHandle, K_ARRAY);
}

EXPORT CUresult cuArrayDestroy(CUarray hArray) {
    FREE_BEGIN(cuArrayDestroy);
    TRACKED_FREE((uintptr_t)hArray, K_ARRAY, real_cuArrayDestroy(hArray));
}

EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                       unsigned int levels) {
    GUARDED_BEGIN(cuMipmappedArrayCreate);
    if (!pHandle || !desc)
        return real_cuMipmappedArrayCreate(pHandle, desc, levels);
    uint64_t total = 0;
    size_t w = desc->Width, h = desc->Height, d = desc->Depth;
    for (unsigned l = 0; l < levels && l < 32; l++) {
        total += array_bytes(w, h, d, desc->Format, desc->NumChannels);
        w = w > 1 ? w / 2 : 1;
        h = h > 1 ? h / 2 : h;
        d = d > 1 ? d / 2 : d;
    }
    RESERVED_ALLOC(total, real_cuMipmappedArrayCreate(pHandle, desc, levels), (uintptr_t)*pHandle, K_MIPMAP);
}

EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray h) {
    FREE_BEGIN(cuMipmappedArrayDestroy);
    TRACKED_FREE((uintptr_t)h, K_MIPMAP, real_cuMipmappedArrayDestroy(h));
}

/* Context creation overhead: counted once per device while this process holds the primary
 * context. */
static _Atomic int g_ctx_refs[GS_GUARD_MAX_DEVICES];

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    GUARDED_BEGIN(cuDevicePrimaryCtxRetain);
    if (st_ != G_READY || dev < 0 || dev >= GS_GUARD_MAX_DEVICES || !g_limits.context_overhead)
        return real_cuDevicePrimaryCtxRetain(pctx, dev);
    bool first = atomic_fetch_add(&g_ctx_refs[dev], 1) == 0;
    if (first && !reserve(dev, g_limits.context_overhead)) {
        atomic_fetch_sub(&g_ctx_refs[dev], 1);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult r = real_cuDevicePrimaryCtxRetain(pctx, dev);
    if (r != CUDA_SUCCESS && atomic_fetch_sub(&g_ctx_refs[dev], 1) == 1)
        unreserve(dev, g_limits.context_overhead);
    return r;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    FREE_BEGIN(cuDevicePrimaryCtxRelease_v2);
    CUresult r = real_cuDevicePrimaryCtxRelease_v2(dev);
    if (r == CUDA_SUCCESS && st_ == G_READY && dev >= 0 && dev < GS_GUARD_MAX_DEVICES && g_limits.context_overhead) {
        int refs = atomic_load(&g_ctx_refs[dev]);
        while (refs > 0 && !atomic_compare_exchange_weak(&g_ctx_refs[dev], &refs, refs - 1))
            ;
        if (refs == 1)
            unreserve(dev, g_limits.context_overhead);
    }
    return r;
}

/* ---- what the workload sees ----------------------------------------------------------------- */

EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
    int st = guard_state();
    if (!real_cuMemGetInfo_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real_cuMemGetInfo_v2(free_bytes, total_bytes);
    if (r != CUDA_SUCCESS || st != G_READY || !free_bytes || !total_bytes)
        return r;
    int dev = current_device();
    uint64_t limit = device_limit(dev);
    if (!limit)
        return r;
    reclaim_dead(); /* a holder killed a moment ago holds nothing: the driver freed its memory */
    uint64_t total = *total_bytes < limit ? *total_bytes : limit;
    uint64_t used = atomic_load(&g_region->dev[dev].used);
    uint64_t free_q = used < total ? total - used : 0; /* never negative, never wrapped */
    *total_bytes = (size_t)total;
    *free_bytes = (size_t)(free_q < *free_bytes ? free_q : *free_bytes);
    return r;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    int st = guard_state();
    if (!real_cuDeviceTotalMem_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real_cuDeviceTotalMem_v2(bytes, dev);
    if (r == CUDA_SUCCESS && st == G_READY && bytes) {
        uint64_t limit = device_limit(dev);
        if (limit && limit < *bytes)
            *bytes = (size_t)limit;
    }
    return r;
}

/* NVML's view (nvidia-smi, monitoring inside the container): the quota and the container's use.
 * Declared here by hand; the guard depends on nothing else in the tree. */
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } guard_nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } guard_nvmlMemory_v2_t;
typedef int (*nvml_mem_fn)(nvmlDevice_t, void *);
typedef int (*nvml_uuid_fn)(nvmlDevice_t, char *, unsigned);
typedef int (*nvml_index_fn)(nvmlDevice_t, unsigned *);
static void *g_libnvml;

static void *nvml_sym(const char *name) {
    if (!g_libnvml)
        g_libnvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    return g_libnvml ? real_dlsym(g_libnvml, name) : NULL;
}

/* The limit entry for an NVML device: by UUID when the limits file names one, else by index. */
static int nvml_device_entry(nvmlDevice_t d) {
    nvml_uuid_fn get_uuid = (nvml_uuid_fn)nvml_sym("nvmlDeviceGetUUID");
    char uuid[96] = "";
    if (get_uuid && get_uuid(d, uuid, sizeof(uuid)) == 0)
        for (unsigned i = 0; i < g_limits.n_devices; i++)
            if (g_limits.dev[i].uuid[0] && !strcmp(g_limits.dev[i].uuid, uuid))
                return (int)i;
    nvml_index_fn get_index = (nvml_index_fn)nvml_sym("nvmlDeviceGetIndex");
    unsigned idx;
    if (get_index && get_index(d, &idx) == 0 && idx < GS_GUARD_MAX_DEVICES && g_dev_index[idx] >= 0 &&
        !g_limits.dev[g_dev_index[idx]].uuid[0])
        return g_dev_index[idx];
    return -1;
}

/* The same view as cuMemGetInfo: total the quota (or the GPU's memory, if smaller), free the
 * quota's room or the GPU's physical free memory, whichever is smaller, used the rest. */
static void quota_view(nvmlDevice_t d, unsigned long long *total, unsigned long long *free_b,
                       unsigned long long *used) {
    int e = nvml_device_entry(d);
    if (e < 0 || !g_limits.dev[e].vram)
        return;
    reclaim_dead();
    uint64_t limit = g_limits.dev[e].vram, u = atomic_load(&g_region->dev[g_limits.dev[e].ordinal].used);
    if (limit < *total)
        *total = limit;
    uint64_t room = u < *total ? *total - u : 0; /* never wraps */
    if (room < *free_b)
        *free_b = room;
    if (*free_b > *total)
        *free_b = *total;
    *used = *total - *free_b;
}

EXPORT int nvmlDeviceGetMemoryInfo(nvmlDevice_t d, guard_nvmlMemory_t *m) {
    int st = guard_state();
    nvml_mem_fn real = (nvml_mem_fn)nvml_sym("nvmlDeviceGetMemoryInfo");
    if (!real)
        return 3; /* NVML_ERROR_NOT_SUPPORTED */
    int r = real(d, m);
    if (r == 0 && m && st == G_READY)
        quota_view(d, &m->total, &m->free, &m->used);
    return r;
}

EXPORT int nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, guard_nvmlMemory_v2_t *m) {
    int st = guard_state();
    nvml_mem_fn real = (nvml_mem_fn)nvml_sym("nvmlDeviceGetMemoryInfo_v2");
    if (!real)
        return 3;
    int r = real(d, m);
    if (r == 0 && m && st == G_READY)
        quota_view(d, &m->total, &m->free, &m->used);
    return r;
}

/* ---- compute shares: the pacer ---------------------------------------------------------------- *
 *
 * With a compute limit of P % on a device, the container may use P % of every PACING_WINDOW_NS of
 * GPU time there. The time a kernel takes is measured with a pair of events around its launch
 * (on the launch's stream; harvested without waiting when they have completed) and added to the
 * container's counter in the shared region, so all its processes draw on one budget. A launch
 * that finds the window's budget spent sleeps until the next window. At each new window the
 * grant for the time that passed is subtracted from the counter, saturating at zero: time used
 * beyond the grant (measured late, kernels still in flight) is carried as debt, unused time is
 * not banked, so the long-run share converges to P %. At most PACING_INFLIGHT timed launches per
 * process are in flight: the next one waits for the oldest, which bounds how far the container
 * can run ahead of its measurements.
 *
 * What is measured is the time between the events, i.e. the time the container's work occupies
 * its stream. Under time-slicing with a busy neighbour that includes slices the GPU gave the
 * neighbour, so each process scales the spans it charges by the share of them its kernels actually
 * ran, from NVML's per-process utilization (util_update below); without NVML's samples the spans
 * are charged whole, and the share is then at most P % of the GPU (docs/guard.md). */
#define PACING_WINDOW_NS 100000000ULL
#define PACING_INFLIGHT 8
#define PACING_ROOM_WAIT_NS 2000000000ULL /* then a launch goes untimed (make_room) */

struct timed_launch {
    CUevent start, end;
    int dev;
};

static pthread_mutex_t g_pace_lock = PTHREAD_MUTEX_INITIALIZER;
static struct timed_launch g_inflight[PACING_INFLIGHT];
static int g_n_inflight;

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static unsigned device_compute(int dev) {
    int i = dev >= 0 && dev < GS_GUARD_MAX_DEVICES ? g_dev_index[dev] : UNLIMITED_DEVICE;
    return i < 0 ? 0 : g_limits.dev[i].compute_pct;
}

/* ---- charging the GPU time received: NVML's per-process utilization -------------------------- *
 *
 * Each process reads, at most every UTIL_INTERVAL_NS while it launches, NVML's utilization samples
 * for its own pid (nvmlDeviceGetProcessUtilization, those since the newest it has seen). Each
 * sample is the share of one sampling period in which the process's kernels ran; the period is
 * the smallest gap seen between two samples' timestamps (NVML leaves out periods in which a
 * process did not run). The GPU time received, the sum of smUtil x period, over the spans the
 * process measured meanwhile is the share of its spans its kernels actually ran (1 alone, 1/2
 * beside a busy time-slicing neighbour): every span it charges from then on is scaled by it. The
 * scale is at most 1 (a span bounds the time its kernels can have run) and at least 1/32. All
 * under g_pace_lock. When NVML cannot say (no library, not supported, or no sample ever names
 * this pid: a PID namespace NVML does not see into) spans are charged whole, as before. */
#define UTIL_INTERVAL_NS 100000000ULL
#define UTIL_SCALE_ONE 65536u
#define UTIL_MISSES_OFF 20 /* reads with spans but no sample for this pid before giving up */

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} guard_nvmlProcessUtilizationSample_t;
typedef int (*nvml_putil_fn)(nvmlDevice_t, guard_nvmlProcessUtilizationSample_t *, unsigned *, unsigned long long);
typedef int (*nvml_init_fn)(void);
typedef int (*nvml_handle_index_fn)(unsigned, nvmlDevice_t *);
typedef int (*nvml_handle_uuid_fn)(const char *, nvmlDevice_t *);

struct util_track {
    nvmlDevice_t h;
    bool tried, off;
    unsigned misses;
    uint32_t scale;                    /* 0: not measured yet (1) */
    uint64_t next_ns;                  /* the next read */
    uint64_t span_ns;                  /* spans harvested since the last update */
    unsigned long long last_seen;      /* NVML timestamp of the newest sample used */
    unsigned long long period;         /* the sampling period (NVML's time unit), 0 unknown */
    unsigned long long own_sum;        /* smUtil x period of own samples since the last update */
    unsigned long long own_first;      /* the timestamps they cover, from the update before */
};
static struct util_track g_util[GS_GUARD_MAX_DEVICES];
static nvml_putil_fn g_nvml_putil;

/* The scale for spans: received (GPU time, ns) over span_ns, within [1/32, 1] in 1/UTIL_SCALE_ONE. */
static uint32_t util_scale(double received_ns, uint64_t span_ns) {
    double r = span_ns ? received_ns / (double)span_ns : 1.0;
    if (r > 1.0)
        r = 1.0;
    if (r < 1.0 / 32)
        r = 1.0 / 32;
    return (uint32_t)(r * UTIL_SCALE_ONE);
}

/* NVML's handle of CUDA device `dev`: by the limits' UUID, else by index. False when none. */
static bool util_open(int dev, struct util_track *u) {
    u->tried = true;
    nvml_init_fn init = (nvml_init_fn)nvml_sym("nvmlInit_v2");
    g_nvml_putil = (nvml_putil_fn)nvml_sym("nvmlDeviceGetProcessUtilization");
    if (!init || !g_nvml_putil || init() != 0)
        return false;
    int i = g_dev_index[dev];
    const char *uuid = i >= 0 ? g_limits.dev[i].uuid : "";
    if (uuid[0]) {
        nvml_handle_uuid_fn by_uuid = (nvml_handle_uuid_fn)nvml_sym("nvmlDeviceGetHandleByUUID");
        return by_uuid && by_uuid(uuid, &u->h) == 0;
    }
    nvml_handle_index_fn by_index = (nvml_handle_index_fn)nvml_sym("nvmlDeviceGetHandleByIndex_v2");
    return by_index && by_index((unsigned)dev, &u->h) == 0;
}

/* Reads this process's new samples on `dev` and, once they cover two sampling periods, sets the
 * scale from them and the spans harvested meanwhile. */
static void util_update(int dev, uint64_t now) {
    struct util_track *u = &g_util[dev];
    if (u->off || now < u->next_ns)
        return;
    u->next_ns = now + UTIL_INTERVAL_NS;
    if (!u->tried && !util_open(dev, u)) {
        u->off = true;
        glog("device %d: NVML has no per-process utilization: the compute share is charged by kernel span "
             "(low beside a busy neighbour)", dev);
        return;
    }
    static guard_nvmlProcessUtilizationSample_t buf[512];
    unsigned n = 512;
    int r = g_nvml_putil(u->h, buf, &n, u->last_seen);
    if (r == 6 /* NOT_FOUND: no sample since last_seen */ || r == 7 /* INSUFFICIENT_SIZE */)
        return;
    if (r != 0) {
        u->off = true;
        glog("device %d: nvmlDeviceGetProcessUtilization failed (%d): the compute share is charged by kernel "
             "span", dev, r);
        return;
    }
    unsigned long long newest = u->last_seen, prev_ts = 0;
    unsigned pid = (unsigned)getpid();
    bool own = false;
    for (unsigned k = 0; k < n && k < 512; k++) {
        unsigned long long ts = buf[k].timeStamp;
        if (ts <= u->last_seen)
            continue;
        if (prev_ts && ts > prev_ts && (!u->period || ts - prev_ts < u->period))
            u->period = ts - prev_ts;
        if (ts != prev_ts)
            prev_ts = ts;
        if (ts > newest)
            newest = ts;
        if (buf[k].pid == pid) {
            own = true;
            u->own_sum += (unsigned long long)buf[k].smUtil;
        }
    }
    if (!u->own_first) { /* the first read only finds where NVML's samples are */
        u->own_first = u->last_seen = newest;
        u->own_sum = u->span_ns = 0;
        return;
    }
    u->last_seen = newest;
    if (!own && u->span_ns && ++u->misses >= UTIL_MISSES_OFF && !u->scale) {
        u->off = true;
        glog("device %d: NVML's utilization samples never name pid %u (another PID namespace?): the compute share "
             "is charged by kernel span", dev, pid);
        return;
    }
    if (!u->period || newest - u->own_first < 2 * u->period || !u->span_ns)
        return;
    /* smUtil % of `period` NVML units (microseconds) per sample, in ns. */
    double received = (double)u->own_sum / 100.0 * (double)u->period * 1000.0;
    u->scale = util_scale(received, u->span_ns);
    u->misses = 0;
    u->own_sum = 0;
    u->span_ns = 0;
    u->own_first = newest;
}

/* Adds the GPU time of finished timed launches to the container's counters (under g_pace_lock):
 * each span scaled by the share its kernels ran (util_update). A launch whose events fail (context
 * destroyed) is dropped uncounted. */
static void harvest(void) {
    int kept = 0;
    for (int i = 0; i < g_n_inflight; i++) {
        struct timed_launch t = g_inflight[i];
        CUresult r = real_cuEventQuery(t.end);
        if (r == CUDA_ERROR_NOT_READY) {
            g_inflight[kept++] = t;
            continue;
        }
        float ms = 0;
        if (r == CUDA_SUCCESS && real_cuEventElapsedTime(&ms, t.start, t.end) == CUDA_SUCCESS && ms > 0) {
            uint64_t span = (uint64_t)((double)ms * 1e6);
            uint32_t scale = g_util[t.dev].scale ? g_util[t.dev].scale : UTIL_SCALE_ONE;
            g_util[t.dev].span_ns += span;
            atomic_fetch_add(&g_region->dev[t.dev].busy_ns, span / UTIL_SCALE_ONE * scale +
                                                                 span % UTIL_SCALE_ONE * scale / UTIL_SCALE_ONE);
        }
        real_cuEventDestroy(t.start);
        real_cuEventDestroy(t.end);
    }
    g_n_inflight = kept;
}

/* When all PACING_INFLIGHT timed launches are pending, waits for one to finish, polling with
 * g_pace_lock released: blocking on an event under the lock could deadlock a kernel that waits for
 * one another thread has yet to launch (a collective across GPUs of one process). False when none
 * finished within PACING_ROOM_WAIT_NS: the launch then goes untimed rather than wait on a GPU that
 * may be waiting on it. Called and returns with the lock held. */
static bool make_room(void) {
    uint64_t give_up = 0; /* the clock is read only once the table is full */
    while (g_n_inflight == PACING_INFLIGHT) {
        uint64_t now = mono_ns();
        if (!give_up)
            give_up = now + PACING_ROOM_WAIT_NS;
        else if (now >= give_up)
            return false;
        pthread_mutex_unlock(&g_pace_lock);
        struct timespec ts = { .tv_sec = 0, .tv_nsec = 200000 };
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&g_pace_lock);
        harvest();
    }
    return true;
}

/* How long a launch on `dev` must wait at `now` for the container to stay within `pct` %. */
static uint64_t pacing_delay(int dev, unsigned pct, uint64_t now) {
    struct gs_guard_dev_counters *c = &g_region->dev[dev];
    uint64_t ws = atomic_load(&c->window_start_ns);
    if (now < ws) /* another process opened the window a moment after our clock read */
        now = ws;
    if (now - ws >= PACING_WINDOW_NS) {
        /* One process wins the new window and takes the elapsed grant off the counter. */
        if (atomic_compare_exchange_strong(&c->window_start_ns, &ws, now)) {
            uint64_t elapsed = ws ? now - ws : PACING_WINDOW_NS;
            uint64_t grant = elapsed / 100 * pct;
            uint64_t b = atomic_load(&c->busy_ns);
            while (!atomic_compare_exchange_weak(&c->busy_ns, &b, b > grant ? b - grant : 0))
                ;
        }
        ws = atomic_load(&c->window_start_ns);
        if (now < ws)
            now = ws;
    }
    if (atomic_load(&c->busy_ns) < PACING_WINDOW_NS / 100 * pct)
        return 0;
    uint64_t end = ws + PACING_WINDOW_NS;
    return end > now ? end - now : 1000000;
}

/* One paced launch: pace_begin waits for budget and records the start event under g_pace_lock;
 * pace_end records the end event, keeps the pair for harvest() and lets the lock go. */
struct pace {
    CUevent start, end;
    int dev;
};

/* False (nothing held) when the launch's device has no compute limit or events cannot be used. */
static bool pace_begin(struct pace *p, cuEventRecord_fn record, CUstream s) {
    int dev = current_device();
    unsigned pct = guard_state() == G_READY ? device_compute(dev) : 0;
    if (!pct || !record)
        return false;
    pthread_mutex_lock(&g_pace_lock);
    harvest();
    util_update(dev, mono_ns());
    for (uint64_t delay; (delay = pacing_delay(dev, pct, mono_ns())) != 0;) {
        pthread_mutex_unlock(&g_pace_lock);
        struct timespec ts = { .tv_sec = (time_t)(delay / 1000000000ULL), .tv_nsec = (long)(delay % 1000000000ULL) };
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&g_pace_lock);
        harvest();
    }
    bool room = make_room();
    *p = (struct pace){ .dev = dev };
    if (!room || real_cuEventCreate(&p->start, CU_EVENT_DEFAULT) != CUDA_SUCCESS ||
        real_cuEventCreate(&p->end, CU_EVENT_DEFAULT) != CUDA_SUCCESS || record(p->start, s) != CUDA_SUCCESS) {
        if (p->start)
            real_cuEventDestroy(p->start);
        if (p->end)
            real_cuEventDestroy(p->end);
        p->start = p->end = NULL; /* launched untimed */
    }
    return true;
}

static CUresult pace_end(struct pace *p, cuEventRecord_fn record, CUstream s, CUresult r) {
    if (p->start && r == CUDA_SUCCESS && g_n_inflight < PACING_INFLIGHT && record(p->end, s) == CUDA_SUCCESS) {
        g_inflight[g_n_inflight++] = (struct timed_launch){ p->start, p->end, p->dev };
    } else if (p->start) {
        real_cuEventDestroy(p->start);
        real_cuEventDestroy(p->end);
    }
    pthread_mutex_unlock(&g_pace_lock);
    return r;
}

/* Per-thread-default-stream launches are timed on the same kind of stream. */
static cuEventRecord_fn ptsz_record(void) {
    return real_cuEventRecord_ptsz ? real_cuEventRecord_ptsz : real_cuEventRecord;
}

/* ---- kernel launches: the hot path ------------------------------------------------------------ */

/* A launch wrapper's body: on the first call the guard loads the driver; with a compute limit the
 * launch CALL on STREAM is paced and timed with events recorded by RECORD. */
#define LAUNCH(real, record, stream, call)                                                                    \
    do {                                                                                                       \
        if (__builtin_expect(!(real), 0)) {                                                                    \
            guard_state();                                                                                     \
            if (!(real))                                                                                       \
                return CUDA_ERROR_NOT_INITIALIZED;                                                             \
        }                                                                                                      \
        if (__builtin_expect(atomic_load_explicit(&g_pacing, memory_order_relaxed), 0)) {                     \
            struct pace pace_; /* in this branch only: the unpaced path keeps its tail call */                \
            if (pace_begin(&pace_, (record), (stream)))                                                        \
                return pace_end(&pace_, (record), (stream), (call));                                           \
        }                                                                                                      \
        return (call);                                                                                         \
    } while (0)

#define LAUNCH_PARAMS                                                                                          \
    CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,         \
        unsigned int bz, unsigned int shm, CUstream s

EXPORT CUresult cuLaunchKernel(LAUNCH_PARAMS, void **params, void **extra) {
    LAUNCH(real_cuLaunchKernel, real_cuEventRecord, s,
           real_cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shm, s, params, extra));
}

EXPORT CUresult cuLaunchKernel_ptsz(LAUNCH_PARAMS, void **params, void **extra) {
    LAUNCH(real_cuLaunchKernel_ptsz, ptsz_record(), s,
           real_cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shm, s, params, extra));
}

EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
    LAUNCH(real_cuLaunchKernelEx, real_cuEventRecord, config ? config->hStream : NULL,
           real_cuLaunchKernelEx(config, f, params, extra));
}

EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
    LAUNCH(real_cuLaunchKernelEx_ptsz, ptsz_record(), config ? config->hStream : NULL,
           real_cuLaunchKernelEx_ptsz(config, f, params, extra));
}

EXPORT CUresult cuLaunchCooperativeKernel(LAUNCH_PARAMS, void **params) {
    LAUNCH(real_cuLaunchCooperativeKernel, real_cuEventRecord, s,
           real_cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shm, s, params));
}

EXPORT CUresult cuLaunchCooperativeKernel_ptsz(LAUNCH_PARAMS, void **params) {
    LAUNCH(real_cuLaunchCooperativeKernel_ptsz, ptsz_record(), s,
           real_cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, shm, s, params));
}

/* A CUDA graph counts as one launch: its whole GPU time lies between the two events. */
EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream s) {
    LAUNCH(real_cuGraphLaunch, real_cuEventRecord, s, real_cuGraphLaunch(g, s));
}

EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) {
    LAUNCH(real_cuGraphLaunch_ptsz, ptsz_record(), s, real_cuGraphLaunch_ptsz(g, s));
}

/* ---- symbol lookups: cuGetProcAddress and dlsym ----------------------------------------------- */

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *symbolStatus);

/* One row per hooked driver function, by the base name cuGetProcAddress takes: below min_version
 * the driver hands out an older ABI, which passes through untouched. */
struct hook {
    const char *base;
    const char *name;          /* the exported versioned name (dlsym) */
    int min_version;
    void *wrapper, *wrapper_ptsz;
    int ptsz_version;          /* the driver has the _ptsz form from this version on */
};

#define FN(f) ((void *)(f))
static const struct hook hooks[] = {
    { "cuMemAlloc", "cuMemAlloc_v2", 3020, FN(cuMemAlloc_v2), NULL },
    { "cuMemAllocPitch", "cuMemAllocPitch_v2", 3020, FN(cuMemAllocPitch_v2), NULL },
    { "cuMemAllocManaged", "cuMemAllocManaged", 0, FN(cuMemAllocManaged), NULL },
    { "cuMemFree", "cuMemFree_v2", 3020, FN(cuMemFree_v2), NULL },
    { "cuMemCreate", "cuMemCreate", 0, FN(cuMemCreate), NULL },
    { "cuMemRelease", "cuMemRelease", 0, FN(cuMemRelease), NULL },
    { "cuMemMap", "cuMemMap", 0, FN(cuMemMap), NULL },
    { "cuMemUnmap", "cuMemUnmap", 0, FN(cuMemUnmap), NULL },
    { "cuMemAllocAsync", "cuMemAllocAsync", 0, FN(cuMemAllocAsync), FN(cuMemAllocAsync_ptsz), 11020 },
    { "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", 0, FN(cuMemAllocFromPoolAsync),
      FN(cuMemAllocFromPoolAsync_ptsz), 11020 },
    { "cuMemFreeAsync", "cuMemFreeAsync", 0, FN(cuMemFreeAsync), FN(cuMemFreeAsync_ptsz), 11020 },
    { "cuDeviceGetDefaultMemPool", "cuDeviceGetDefaultMemPool", 11020, FN(cuDeviceGetDefaultMemPool), NULL },
    { "cuMemPoolCreate", "cuMemPoolCreate", 11020, FN(cuMemPoolCreate), NULL },
    { "cuArrayCreate", "cuArrayCreate_v2", 3020, FN(cuArrayCreate_v2), NULL },
    { "cuArray3DCreate", "cuArray3DCreate_v2", 3020, FN(cuArray3DCreate_v2), NULL },
    { "cuArrayDestroy", "cuArrayDestroy", 0, FN(cuArrayDestroy), NULL },
    { "cuMipmappedArrayCreate", "cuMipmappedArrayCreate", 0, FN(cuMipmappedArrayCreate), NULL },
    { "cuMipmappedArrayDestroy", "cuMipmappedArrayDestroy", 0, FN(cuMipmappedArrayDestroy), NULL },
    { "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", 0, FN(cuDevicePrimaryCtxRetain), NULL },
    { "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2", 11000, FN(cuDevicePrimaryCtxRelease_v2), NULL },
    { "cuMemGetInfo", "cuMemGetInfo_v2", 3020, FN(cuMemGetInfo_v2), NULL },
    { "cuDeviceTotalMem", "cuDeviceTotalMem_v2", 3020, FN(cuDeviceTotalMem_v2), NULL },
    { "cuLaunchKernel", "cuLaunchKernel", 0, FN(cuLaunchKernel), FN(cuLaunchKernel_ptsz), 7000 },
    { "cuLaunchKernelEx", "cuLaunchKernelEx", 11060, FN(cuLaunchKernelEx), FN(cuLaunchKernelEx_ptsz), 11060 },
    { "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel", 9000, FN(cuLaunchCooperativeKernel),
      FN(cuLaunchCooperativeKernel_ptsz), 9000 },
    { "cuGraphLaunch", "cuGraphLaunch", 10000, FN(cuGraphLaunch), FN(cuGraphLaunch_ptsz), 10000 },
    { "cuGetProcAddress", "cuGetProcAddress_v2", 12000, FN(cuGetProcAddress_v2), NULL },
};

/* The wrapper for what the driver returned for (symbol, version, flags), or the driver's own. */
static void *wrap_proc(const char *symbol, void *real, int cudaVersion, cuuint64_t flags) {
    if (!real || !symbol)
        return real;
    if (!strcmp(symbol, "cuGetProcAddress"))
        return cudaVersion >= 12000 ? FN(cuGetProcAddress_v2) : FN(cuGetProcAddress);
    for (size_t i = 0; i < sizeof(hooks) / sizeof(hooks[0]); i++) {
        if (strcmp(hooks[i].base, symbol) != 0)
            continue;
        if (cudaVersion < hooks[i].min_version)
            return real; /* an older ABI than the wrapper's */
        /* Before CUDA 7.0 (11.2 for stream-ordered allocation) the driver answers a per-thread
         * request with the legacy-stream function. */
        if ((flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && hooks[i].wrapper_ptsz &&
            cudaVersion >= hooks[i].ptsz_version)
            return hooks[i].wrapper_ptsz;
        return hooks[i].wrapper;
    }
    return real;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
    guard_state();
    if (!real_cuGetProcAddress)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real_cuGetProcAddress(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn)
        *pfn = wrap_proc(symbol, *pfn, cudaVersion, flags);
    return r;
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *symbolStatus) {
    guard_state();
    if (!real_cuGetProcAddress_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    /* The driver fills symbolStatus; only the returned pointer is replaced. */
    CUresult r = real_cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (r == CUDA_SUCCESS && pfn)
        *pfn = wrap_proc(symbol, *pfn, cudaVersion, flags);
    return r;
}

static void *wrapper_by_name(const char *name) {
    for (size_t i = 0; i < sizeof(hooks) / sizeof(hooks[0]); i++) {
        if (!strcmp(hooks[i].name, name))
            return hooks[i].wrapper;
        if (hooks[i].wrapper_ptsz) {
            size_t n = strlen(hooks[i].name);
            if (!strncmp(name, hooks[i].name, n) && !strcmp(name + n, "_ptsz"))
                return hooks[i].wrapper_ptsz;
        }
    }
    if (!strcmp(name, "cuGetProcAddress"))
        return FN(cuGetProcAddress);
    if (!strcmp(name, "nvmlDeviceGetMemoryInfo"))
        return FN(nvmlDeviceGetMemoryInfo);
    if (!strcmp(name, "nvmlDeviceGetMemoryInfo_v2"))
        return FN(nvmlDeviceGetMemoryInfo_v2);
    return NULL;
}

/* dlsym(RTLD_NEXT, name) means "after the caller"; called from here, glibc would search after the
 * guard instead, and a library loaded after the guard that looks its own "real" function up that
 * way would get itself back. So RTLD_NEXT is answered by searching the objects that follow the
 * caller in the link map, each with its own handle. */
static void *dlsym_after(const void *caller, const char *name) {
    Dl_info info;
    struct link_map *lm = NULL;
    if (!dladdr1(caller, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
        return real_dlsym(RTLD_NEXT, name);
    for (struct link_map *l = lm->l_next; l; l = l->l_next) {
        if (!l->l_name || !l->l_name[0])
            continue;
        void *h = dlopen(l->l_name, RTLD_LAZY | RTLD_NOLOAD);
        if (!h)
            continue;
        void *p = real_dlsym(h, name);
        dlclose(h);
        if (p)
            return p;
    }
    return NULL;
}

/* dlsym(handle-of-libcuda, "cuMemAlloc_v2") would find the driver's function, not the preloaded
 * one: hooked names found in any object are answered with the wrapper. */
EXPORT void *dlsym(void *handle, const char *name) {
    resolve_dlsym();
    if (!real_dlsym)
        return NULL;
    void *p = handle == RTLD_NEXT ? dlsym_after(__builtin_return_address(0), name) : real_dlsym(handle, name);
    if (p && ((name[0] == 'c' && name[1] == 'u') || !strncmp(name, "nvmlDeviceGetMemoryInfo", 23))) {
        void *w = wrapper_by_name(name);
        if (w)
            return w;
    }
    return p;
}

/* A forked child is a new process: it needs its own slot (claimed at its first reservation). */
static void after_fork_child(void) {
    if (atomic_load(&g_state) == G_READY && g_region) {
        g_slot = NULL;
        for (unsigned d = 0; d < GS_GUARD_MAX_DEVICES; d++)
            atomic_store(&g_ctx_refs[d], 0);
        atomic_store(&g_table_lock, 0); /* another thread of the parent may have held it */
        pthread_mutex_init(&g_pace_lock, NULL);
        g_n_inflight = 0; /* the parent's timed launches are the parent's */
        free(g_table); /* the parent's allocations are the parent's */
        g_table = NULL;
        g_cap = g_count = 0;
        memset(g_overflow, 0, sizeof(g_overflow));
        free(g_maps); /* and so are its mappings */
        g_maps = NULL;
        g_n_maps = g_cap_maps = 0;
        /* A slot when the child first allocates: most children exec at once, and a slot taken now
         * would name the pid until the exec'd program dies. */
    }
}

/* On exit, the slot is freed if the process holds nothing. Bytes it still holds (allocations never
 * freed, a primary context never released) are the driver's until the process is gone: the slot
 * keeps them, and reclaim gives them back once the process is dead, never before. */
static void release_slot(void) {
    if (atomic_load(&g_state) != G_READY || !g_slot)
        return;
    for (unsigned d = 0; d < GS_GUARD_MAX_DEVICES; d++)
        if (atomic_load(&g_slot->used[d]))
            return;
    if (!region_lock())
        return;
    FAULT("exit.locked");
    bool empty = true;
    for (unsigned d = 0; d < GS_GUARD_MAX_DEVICES; d++)
        empty &= atomic_load(&g_slot->used[d]) == 0;
    if (empty) {
        atomic_store(&g_slot->pid, 0);
        atomic_store(&g_slot->start_time, 0);
    }
    region_unlock();
    g_slot = NULL;
}

__attribute__((constructor)) static void guard_ctor(void) {
    guard_exec_init(DEFAULT_CONFIG); /* the limits' source, and the exec family (guard_exec.c) */
#ifdef GS_GUARD_FAULT_POINTS
    const char *fault = getenv("GPUSLICE_GUARD_FAULT");
    if (fault && *fault) {
        snprintf(g_fault, sizeof(g_fault), "%s", fault);
        char *colon = strchr(g_fault, ':');
        if (colon) {
            *colon = '\0';
            g_fault_nth = strtol(colon + 1, NULL, 10);
        }
    }
#endif
    pthread_atfork(NULL, NULL, after_fork_child);
    atexit(release_slot);
}
