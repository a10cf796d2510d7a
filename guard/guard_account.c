/* guard_account.c: the container's accounting in its shared region (guard_account.h).
 *
 * Reserve before allocating, under the robust process-shared lock of the container's shared region
 * (guard_region.h: a SIGKILL at any instruction is repaired by the next locker), rolled back if the
 * real allocation fails; the bytes of a process come back when it is dead, not at its exit. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "guard_account.h"
#include "guard_base.h"
#include "guard_proc.h"

struct guard_account g_acct = { .claim_lock = PTHREAD_MUTEX_INITIALIZER };

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

/* ---- the region's lock ---------------------------------------------------------------------------- */

static uint32_t slot_count(const struct guard_account *a) {
    uint32_t n = atomic_load_explicit(&a->region->n_slots, memory_order_relaxed);
    return n > GS_GUARD_MAX_PROCS ? GS_GUARD_MAX_PROCS : n;
}

/* The device totals from the slots (the truth), under the lock: repairs a dead holder's half-done
 * update. */
static void recompute_totals(struct guard_account *a) {
    uint64_t sum[GS_GUARD_MAX_DEVICES] = { 0 };
    for (uint32_t i = 0, n = slot_count(a); i < n; i++)
        for (unsigned d = 0; d < GS_GUARD_MAX_DEVICES; d++)
            sum[d] += atomic_load_explicit(&a->region->procs[i].used[d], memory_order_relaxed);
    FAULT("recover.partial");
    for (unsigned d = 0; d < GS_GUARD_MAX_DEVICES; d++)
        atomic_store(&a->region->dev[d].used, sum[d]);
}

/* region_lock's failure r: a holder that died makes the next one repair the totals (whatever
 * instruction it died at, the slots say what is held); any other is logged once. */
static __attribute__((noinline)) bool region_lock_failed(struct guard_account *a, int r) {
    if (r == EOWNERDEAD) {
        FAULT("recover.locked");
        recompute_totals(a);
        atomic_fetch_add(&a->region->recoveries, 1);
        pthread_mutex_consistent(&a->region->lock);
        return true;
    }
    if (!atomic_exchange(&a->lock_logged, true))
        glog("the counters region's lock is unusable (%s): allocations are refused", strerror(r));
    return false;
}

/* Takes the region's lock; false if it is unusable. */
static inline bool region_lock(struct guard_account *a) {
    int r = pthread_mutex_lock(&a->region->lock);
    if (__builtin_expect(r == 0, 1))
        return true;
    return region_lock_failed(a, r);
}

static void region_unlock(struct guard_account *a) {
    pthread_mutex_unlock(&a->region->lock);
}

/* Whether a process is dead is checked without the lock (it stays dead); the slot is taken back
 * under it, if it still names the same process. */
unsigned account_reclaim_dead(struct guard_account *a) {
    int32_t me = (int32_t)getpid();
    unsigned n = 0;
    bool locked = false;
    for (uint32_t i = 0, ns = slot_count(a); i < ns; i++) {
        struct gs_guard_proc_slot *s = &a->region->procs[i];
        int32_t pid = atomic_load(&s->pid);
        if (pid <= 0 || pid == me || !slot_dead(s, pid))
            continue;
        uint64_t start = atomic_load(&s->start_time);
        if (!locked && !(locked = region_lock(a)))
            return n;
        FAULT("reclaim.locked");
        if (atomic_load(&s->pid) != pid || atomic_load(&s->start_time) != start)
            continue; /* reclaimed (and perhaps reused) meanwhile */
        for (unsigned d = 0; d < GS_GUARD_MAX_DEVICES; d++) {
            uint64_t b = atomic_load(&s->used[d]);
            if (!b)
                continue;
            uint64_t u = atomic_load(&a->region->dev[d].used);
            atomic_store(&a->region->dev[d].used, u > b ? u - b : 0);
            FAULT("reclaim.partial");
            atomic_store(&s->used[d], 0);
        }
        FAULT("reclaim.slot");
        atomic_store(&s->start_time, 0);
        atomic_store(&s->pid, 0);
        atomic_fetch_add(&a->region->reclaimed, 1);
        n++;
    }
    if (locked)
        region_unlock(a);
    return n;
}

/* Initialises the region's robust process-shared lock (under the region's flock, before anyone
 * uses it) and, for a region some other writer laid out, the slot count and totals. */
static int init_lock(struct guard_account *a) {
    pthread_mutexattr_t attr;
    int r = pthread_mutexattr_init(&attr);
    if (!r)
        r = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    if (!r)
        r = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    if (!r)
        r = pthread_mutex_init(&a->region->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    if (r)
        return -r;
    uint32_t n = 0;
    for (uint32_t i = 0; i < GS_GUARD_MAX_PROCS; i++)
        if (atomic_load(&a->region->procs[i].pid) != 0)
            n = i + 1;
    atomic_store(&a->region->n_slots, n);
    recompute_totals(a);
    atomic_store(&a->region->lock_ready, GS_GUARD_LOCK_READY);
    return 0;
}

int account_map(struct guard_account *a, const char *path) {
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
    a->region = p;
    if (a->region->magic == 0) {
        fchmod(fd, 0666); /* not narrowed by the first process's umask */
        a->region->version = GS_GUARD_REGION_VERSION;
        a->region->size = sizeof(struct gs_guard_region);
        a->region->n_devices = GS_GUARD_MAX_DEVICES;
        a->region->magic = GS_GUARD_REGION_MAGIC;
    } else if (a->region->magic != GS_GUARD_REGION_MAGIC || a->region->version != GS_GUARD_REGION_VERSION) {
        glog("region %s has an unknown format (magic %08x version %u)", path, a->region->magic,
             a->region->version);
        r = -EPROTO;
    }
    if (!r && atomic_load(&a->region->lock_ready) != GS_GUARD_LOCK_READY && (r = init_lock(a)) < 0)
        glog("cannot set up the region's lock %s: %s", path, strerror(-r));
    if (r) {
        munmap(p, sizeof(struct gs_guard_region));
        a->region = NULL;
    }
out:
    flock(fd, LOCK_UN);
    close(fd);
    return r;
}

int account_claim_slot(struct guard_account *a) {
    int32_t me = (int32_t)getpid();
    uint64_t start = proc_start_time(me);
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!region_lock(a))
            return -ENOLCK;
        FAULT("claim.locked");
        for (unsigned i = 0; i < GS_GUARD_MAX_PROCS; i++) {
            struct gs_guard_proc_slot *s = &a->region->procs[i];
            if (atomic_load(&s->pid) != 0)
                continue;
            if (i >= slot_count(a))
                atomic_store(&a->region->n_slots, i + 1);
            /* A free slot holds nothing; one written by another tool might: keep the sum true. */
            for (unsigned d = 0; d < GS_GUARD_MAX_DEVICES; d++) {
                uint64_t b = atomic_exchange(&s->used[d], 0), u = atomic_load(&a->region->dev[d].used);
                if (b)
                    atomic_store(&a->region->dev[d].used, u > b ? u - b : 0);
            }
            atomic_store(&s->start_time, start); /* before the pid: a slot never names a pid without it */
            atomic_store(&s->pid, me);
            FAULT("claim.pid");
            region_unlock(a);
            a->slot = s;
            return 0;
        }
        region_unlock(a);
        account_reclaim_dead(a);
    }
    glog("no free process slot in the region (%d processes)", GS_GUARD_MAX_PROCS);
    return -ENOSPC;
}

/* ---- reservations --------------------------------------------------------------------------- */

bool account_reserve(struct guard_account *a, int dev, uint64_t limit, uint64_t n) {
    if (n == 0)
        return true;
    if (__builtin_expect(!a->slot, 0)) { /* a forked child's first reservation */
        pthread_mutex_lock(&a->claim_lock);
        int r = a->slot ? 0 : account_claim_slot(a);
        pthread_mutex_unlock(&a->claim_lock);
        if (r < 0)
            return false;
    }
    struct gs_guard_dev_counters *c = &a->region->dev[dev];
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!region_lock(a))
            break;
        FAULT("reserve.locked");
        uint64_t old = atomic_load_explicit(&c->used, memory_order_relaxed);
        if (limit ? old <= limit && n <= limit - old : n <= UINT64_MAX - old) {
            atomic_store_explicit(&a->slot->used[dev],
                                  atomic_load_explicit(&a->slot->used[dev], memory_order_relaxed) + n,
                                  memory_order_relaxed);
            FAULT("reserve.slot");
            atomic_store_explicit(&c->used, old + n, memory_order_relaxed);
            if (old + n > atomic_load_explicit(&c->peak, memory_order_relaxed))
                atomic_store_explicit(&c->peak, old + n, memory_order_relaxed);
            FAULT("reserve.dev");
            region_unlock(a);
            return true;
        }
        region_unlock(a);
        if (!account_reclaim_dead(a))
            break; /* nothing to give back: really over the quota */
    }
    atomic_fetch_add(&c->oom_refusals, 1);
    return false;
}

void account_unreserve(struct guard_account *a, int dev, uint64_t n) {
    if (n == 0 || !a->slot || !region_lock(a))
        return;
    FAULT("unreserve.locked");
    uint64_t mine = atomic_load_explicit(&a->slot->used[dev], memory_order_relaxed);
    if (n > mine)
        n = mine;
    atomic_store_explicit(&a->slot->used[dev], mine - n, memory_order_relaxed);
    FAULT("unreserve.slot");
    uint64_t u = atomic_load_explicit(&a->region->dev[dev].used, memory_order_relaxed);
    atomic_store_explicit(&a->region->dev[dev].used, u > n ? u - n : 0, memory_order_relaxed);
    FAULT("unreserve.dev");
    region_unlock(a);
}

/* Bytes it still holds (allocations never freed, a primary context never released) are the
 * driver's until the process is gone: the slot keeps them, and reclaim gives them back once the
 * process is dead, never before. */
void account_release_slot(struct guard_account *a) {
    if (!a->slot)
        return;
    for (unsigned d = 0; d < GS_GUARD_MAX_DEVICES; d++)
        if (atomic_load(&a->slot->used[d]))
            return;
    if (!region_lock(a))
        return;
    FAULT("exit.locked");
    bool empty = true;
    for (unsigned d = 0; d < GS_GUARD_MAX_DEVICES; d++)
        empty &= atomic_load(&a->slot->used[d]) == 0;
    if (empty) {
        atomic_store(&a->slot->pid, 0);
        atomic_store(&a->slot->start_time, 0);
    }
    region_unlock(a);
    a->slot = NULL;
}
