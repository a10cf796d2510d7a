/* fake_timeslice.c: the simulated driver's time-sliced GPU shared by processes (see fake_timeslice.h).
 * Tests only. The file (created zeroed by the test, at least sizeof(struct fk_gpu)) holds the
 * GPU's state under a spin lock; a process that dies holding it would stop the others, which a
 * test notices as a timeout. */
#include "tests/guard/fake_timeslice.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define FK_TS_PROCS 16
#define FK_TS_MARKS 256
#define FK_TS_SNAPS 256
#define FK_TS_PENDING_NS 64000000ULL /* the driver's queue: at most 64 ms of own GPU time pending */

struct fk_ts_proc {
    int32_t pid;                       /* 0: free */
    uint32_t n_marks;
    uint64_t launched_ns, done_ns;     /* own GPU time queued and run, cumulative */
    uint64_t mark_target[FK_TS_MARKS], mark_at[FK_TS_MARKS];
};

struct fk_gpu {
    _Atomic uint32_t lock;
    uint32_t n_snaps;                  /* snapshots taken; the last FK_TS_SNAPS are kept */
    uint64_t last_ns;                  /* the state is exact up to here */
    uint64_t snap_ns;                  /* the last sample boundary */
    struct fk_ts_proc procs[FK_TS_PROCS];
    uint64_t snap_ts[FK_TS_SNAPS];
    int32_t snap_pid[FK_TS_SNAPS][FK_TS_PROCS];
    uint64_t snap_done[FK_TS_SNAPS][FK_TS_PROCS];
};

_Static_assert(sizeof(struct fk_gpu) <= FK_TS_FILE_BYTES, "the test's file holds the state");

static pthread_once_t ts_once = PTHREAD_ONCE_INIT;
static struct fk_gpu *g;
static uint64_t sample_ns = 20000000ULL;
static int mine = -1;                  /* this process's slot (under the lock) */

static void ts_open(void)
{
    const char *s = getenv("FAKE_CUDA_GPU");
    if (!s || !*s)
        return;
    const char *p = getenv("FAKE_GPU_SAMPLE_MS");
    if (p && *p && strtoul(p, NULL, 10) > 0)
        sample_ns = strtoul(p, NULL, 10) * 1000000ULL;
    int fd = open(s, O_RDWR | O_CLOEXEC);
    void *m = fd < 0 ? MAP_FAILED : mmap(NULL, sizeof(struct fk_gpu), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0)
        close(fd);
    if (m == MAP_FAILED) {
        fprintf(stderr, "fake_cuda: FAKE_CUDA_GPU=%s: cannot map it\n", s);
        abort();
    }
    g = m;
}

bool fk_ts_enabled(void)
{
    pthread_once(&ts_once, ts_open);
    return g != NULL;
}

static uint64_t mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void nap(void)
{
    struct timespec ts = { 0, 200000 };
    nanosleep(&ts, NULL);
}

static void lock(void)
{
    while (atomic_exchange_explicit(&g->lock, 1, memory_order_acquire))
        sched_yield();
}

static void unlock(void)
{
    atomic_store_explicit(&g->lock, 0, memory_order_release);
}

/* Runs the GPU from last_ns to now: the busy processes share it equally; the steps end where a
 * process runs dry and at sample boundaries, so completions and samples are exact. */
static void advance(uint64_t now)
{
    if (!g->last_ns) {
        g->last_ns = g->snap_ns = now;
        return;
    }
    uint64_t t = g->last_ns;
    while (t < now) {
        unsigned k = 0;
        uint64_t least = UINT64_MAX;
        for (int i = 0; i < FK_TS_PROCS; i++) {
            struct fk_ts_proc *p = &g->procs[i];
            if (p->pid && p->launched_ns > p->done_ns) {
                k++;
                if (p->launched_ns - p->done_ns < least)
                    least = p->launched_ns - p->done_ns;
            }
        }
        uint64_t end = g->snap_ns + sample_ns < now ? g->snap_ns + sample_ns : now;
        if (k && t + least * k < end)
            end = t + least * k;
        uint64_t dt = end - t;
        for (int i = 0; k && i < FK_TS_PROCS; i++) {
            struct fk_ts_proc *p = &g->procs[i];
            if (!p->pid || p->launched_ns <= p->done_ns)
                continue;
            uint64_t before = p->done_ns, step = dt / k;
            p->done_ns = before + step < p->launched_ns ? before + step : p->launched_ns;
            for (unsigned m = 0; m < FK_TS_MARKS; m++)
                if (!p->mark_at[m] && p->mark_target[m] > before && p->mark_target[m] <= p->done_ns)
                    p->mark_at[m] = t + (p->mark_target[m] - before) * k;
        }
        t = end;
        if (t == g->snap_ns + sample_ns) {
            unsigned s = g->n_snaps++ % FK_TS_SNAPS;
            g->snap_ts[s] = t;
            for (int i = 0; i < FK_TS_PROCS; i++) {
                g->snap_pid[s][i] = g->procs[i].pid;
                g->snap_done[s][i] = g->procs[i].done_ns;
            }
            g->snap_ns = t;
        }
    }
    g->last_ns = now;
}

/* This process's slot (a free one, or one whose process is gone), under the lock. */
static struct fk_ts_proc *me(void)
{
    int32_t pid = (int32_t)getpid();
    if (mine >= 0 && g->procs[mine].pid == pid)
        return &g->procs[mine];
    for (int i = 0; i < FK_TS_PROCS; i++) {
        struct fk_ts_proc *p = &g->procs[i];
        if (!p->pid || (kill(p->pid, 0) != 0 && errno == ESRCH)) {
            *p = (struct fk_ts_proc){ .pid = pid };
            mine = i;
            return p;
        }
    }
    fprintf(stderr, "fake_cuda: FAKE_CUDA_GPU: more than %d processes\n", FK_TS_PROCS);
    abort();
}

void fk_ts_launch(uint64_t own_ns)
{
    for (;;) {
        lock();
        advance(mono());
        struct fk_ts_proc *p = me();
        if (p->launched_ns - p->done_ns < FK_TS_PENDING_NS) {
            p->launched_ns += own_ns;
            unlock();
            return;
        }
        unlock();
        nap();
    }
}

struct fk_mark fk_ts_record(void)
{
    lock();
    uint64_t now = mono();
    advance(now);
    struct fk_ts_proc *p = me();
    unsigned m = p->n_marks++ % FK_TS_MARKS;
    p->mark_target[m] = p->launched_ns;
    p->mark_at[m] = p->launched_ns <= p->done_ns ? now : 0;
    struct fk_mark r = { p->launched_ns, (int)m };
    unlock();
    return r;
}

bool fk_ts_reached(struct fk_mark mk, uint64_t *at_ns)
{
    lock();
    uint64_t now = mono();
    advance(now);
    struct fk_ts_proc *p = me();
    bool done = p->done_ns >= mk.target;
    if (done && at_ns) /* the slot was reused by a later event: say now */
        *at_ns = p->mark_target[mk.idx] == mk.target && p->mark_at[mk.idx] ? p->mark_at[mk.idx] : now;
    unlock();
    return done;
}

void fk_ts_drain(void)
{
    struct fk_mark m = fk_ts_record();
    while (!fk_ts_reached(m, NULL))
        nap();
}

unsigned fk_ts_samples(unsigned long long last_seen_us, struct fk_util_sample *out, unsigned max)
{
    if (!fk_ts_enabled())
        return 0;
    lock();
    advance(mono());
    unsigned n = 0, total = g->n_snaps;
    unsigned first = total > FK_TS_SNAPS ? total - FK_TS_SNAPS + 1 : 1;
    for (unsigned s = first; s < total; s++) {
        unsigned cur = s % FK_TS_SNAPS, prev = (s - 1) % FK_TS_SNAPS;
        if (g->snap_ts[cur] / 1000 <= last_seen_us)
            continue;
        uint64_t period = g->snap_ts[cur] - g->snap_ts[prev];
        for (int i = 0; i < FK_TS_PROCS && n < max; i++) {
            if (!g->snap_pid[cur][i] || g->snap_pid[cur][i] != g->snap_pid[prev][i] ||
                g->snap_done[cur][i] <= g->snap_done[prev][i] || !period)
                continue;
            uint64_t ran = g->snap_done[cur][i] - g->snap_done[prev][i];
            out[n++] = (struct fk_util_sample){ (unsigned)g->snap_pid[cur][i], g->snap_ts[cur] / 1000,
                                                (unsigned)((ran * 100 + period / 2) / period) };
        }
    }
    unlock();
    return n;
}

/* A process that exits leaves the GPU: its queued work goes with it (the driver tears it down). */
__attribute__((destructor)) static void ts_leave(void)
{
    if (!g || mine < 0)
        return;
    lock();
    advance(mono());
    if (g->procs[mine].pid == (int32_t)getpid())
        g->procs[mine] = (struct fk_ts_proc){ 0 };
    unlock();
}
