/* guard_pace.c: compute shares: the pacer (guard_pace.h).
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
 * ran, from NVML's per-process utilization (guard_putil.c); without NVML's samples the spans are
 * charged whole, and the share is then at most P % of the GPU (docs/guard.md). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "guard_account.h"
#include "guard_base.h"
#include "guard_core.h"
#include "guard_driver.h"
#include "guard_pace.h"
#include "guard_putil.h"

#define PACING_WINDOW_NS 100000000ULL
#define PACING_INFLIGHT 8
#define PACING_ROOM_WAIT_NS 2000000000ULL /* then a launch goes untimed (make_room) */

struct timed_launch {
    CUevent start, end;
    int dev;
};

struct guard_pacer {
    pthread_mutex_t lock;
    struct timed_launch inflight[PACING_INFLIGHT];
    int n_inflight;
    struct guard_putil util; /* under the lock */
};

struct guard_pacer g_pacer = { .lock = PTHREAD_MUTEX_INITIALIZER };

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Adds the GPU time of finished timed launches to the container's counters (under the lock):
 * each span scaled by the share its kernels ran (putil_charge). A launch whose events fail
 * (context destroyed) is dropped uncounted. */
static void harvest(struct guard_pacer *pc) {
    int kept = 0;
    for (int i = 0; i < pc->n_inflight; i++) {
        struct timed_launch t = pc->inflight[i];
        CUresult r = g_real.cuEventQuery(t.end);
        if (r == CUDA_ERROR_NOT_READY) {
            pc->inflight[kept++] = t;
            continue;
        }
        float ms = 0;
        if (r == CUDA_SUCCESS && g_real.cuEventElapsedTime(&ms, t.start, t.end) == CUDA_SUCCESS && ms > 0) {
            uint64_t span = (uint64_t)((double)ms * 1e6);
            atomic_fetch_add(&g_acct.region->dev[t.dev].busy_ns, putil_charge(&pc->util, t.dev, span));
        }
        g_real.cuEventDestroy(t.start);
        g_real.cuEventDestroy(t.end);
    }
    pc->n_inflight = kept;
}

/* When all PACING_INFLIGHT timed launches are pending, waits for one to finish, polling with the
 * lock released: blocking on an event under the lock could deadlock a kernel that waits for one
 * another thread has yet to launch (a collective across GPUs of one process). False when none
 * finished within PACING_ROOM_WAIT_NS: the launch then goes untimed rather than wait on a GPU that
 * may be waiting on it. Called and returns with the lock held. */
static bool make_room(struct guard_pacer *pc) {
    uint64_t give_up = 0; /* the clock is read only once the table is full */
    while (pc->n_inflight == PACING_INFLIGHT) {
        uint64_t now = mono_ns();
        if (!give_up)
            give_up = now + PACING_ROOM_WAIT_NS;
        else if (now >= give_up)
            return false;
        pthread_mutex_unlock(&pc->lock);
        struct timespec ts = { .tv_sec = 0, .tv_nsec = 200000 };
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&pc->lock);
        harvest(pc);
    }
    return true;
}

/* How long a launch on `dev` must wait at `now` for the container to stay within `pct` %. */
static uint64_t pacing_delay(struct gs_guard_dev_counters *c, unsigned pct, uint64_t now) {
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

bool pace_begin(struct guard_pacer *pc, struct pace *p, cuEventRecord_fn record, CUstream s) {
    int dev = guard_current_device(&g_real);
    unsigned pct = guard_state() == G_READY ? guard_device_compute(&g_core, dev) : 0;
    if (!pct || !record)
        return false;
    struct gs_guard_dev_counters *c = &g_acct.region->dev[dev];
    pthread_mutex_lock(&pc->lock);
    harvest(pc);
    putil_update(&pc->util, dev, mono_ns());
    for (uint64_t delay; (delay = pacing_delay(c, pct, mono_ns())) != 0;) {
        pthread_mutex_unlock(&pc->lock);
        struct timespec ts = { .tv_sec = (time_t)(delay / 1000000000ULL), .tv_nsec = (long)(delay % 1000000000ULL) };
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&pc->lock);
        harvest(pc);
    }
    bool room = make_room(pc);
    *p = (struct pace){ .dev = dev };
    if (!room || g_real.cuEventCreate(&p->start, CU_EVENT_DEFAULT) != CUDA_SUCCESS ||
        g_real.cuEventCreate(&p->end, CU_EVENT_DEFAULT) != CUDA_SUCCESS || record(p->start, s) != CUDA_SUCCESS) {
        if (p->start)
            g_real.cuEventDestroy(p->start);
        if (p->end)
            g_real.cuEventDestroy(p->end);
        p->start = p->end = NULL; /* launched untimed */
    }
    return true;
}

CUresult pace_end(struct guard_pacer *pc, struct pace *p, cuEventRecord_fn record, CUstream s, CUresult r) {
    if (p->start && r == CUDA_SUCCESS && pc->n_inflight < PACING_INFLIGHT && record(p->end, s) == CUDA_SUCCESS) {
        pc->inflight[pc->n_inflight++] = (struct timed_launch){ p->start, p->end, p->dev };
    } else if (p->start) {
        g_real.cuEventDestroy(p->start);
        g_real.cuEventDestroy(p->end);
    }
    pthread_mutex_unlock(&pc->lock);
    return r;
}

void pace_after_fork(struct guard_pacer *pc) {
    pthread_mutex_init(&pc->lock, NULL);
    pc->n_inflight = 0;
}
