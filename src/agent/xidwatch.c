/* xidwatch.c: the agent's NVML event thread (see xidwatch.h). */
#include "agent/xidwatch.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "util/log.h"

/* How long one nvmlEventSetWait lasts, as NVIDIA's device plugin waits: the thread wakes this
 * often when nothing happens. Stopping does not wait for it (xidwatch_stop). */
#define EVENT_WAIT_MS 5000
/* After the event source failed: the next try. The inventory poll tells meanwhile what is left. */
#define RETRY_MS 1000

struct xidwatch {
    struct gpu_events *events;
    pthread_t thread;
    atomic_bool stop;
    int pipe_wr, wake; /* wake: an eventfd that ends the pause after a failure at once */
};

/* The watches left to end with the process (their thread still in NVML's wait): reachable, not
 * leaked. */
static struct xidwatch *_Atomic left[4];

static void *run(void *arg) {
    struct xidwatch *x = arg;
    while (!atomic_load(&x->stop)) {
        struct gpu_event ev;
        int r = gpu_events_wait_unless(x->events, EVENT_WAIT_MS, &x->stop, &ev);
        if (r == -ETIMEDOUT || r == -ECANCELED)
            continue;
        if (r < 0) {
            struct pollfd p = { .fd = x->wake, .events = POLLIN };
            poll(&p, 1, RETRY_MS);
            continue;
        }
        ssize_t w = write(x->pipe_wr, &ev, sizeof(ev));
        (void)w;
    }
    return NULL;
}

int xidwatch_start(struct gpu_node *node, int pipe_wr, struct xidwatch **out) {
    struct xidwatch *x = calloc(1, sizeof(*x));
    if (!x)
        return -ENOMEM;
    x->pipe_wr = pipe_wr;
    x->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int r = x->wake < 0 ? -errno : gpu_events_open(node, &x->events);
    if (r == 0 && (r = -pthread_create(&x->thread, NULL, run, x)) < 0)
        gpu_events_close(x->events);
    if (r < 0) {
        if (x->wake >= 0)
            close(x->wake);
        free(x);
        return r;
    }
    *out = x;
    return 0;
}

void xidwatch_stop(struct xidwatch *x) {
    if (!x)
        return;
    atomic_store(&x->stop, true);
    uint64_t one = 1;
    ssize_t w = write(x->wake, &one, sizeof(one));
    (void)w;
    /* stop is set before waiting is read: a thread not counted in a wait now will not start one. */
    if (gpu_events_waiting(x->events)) {
        pthread_detach(x->thread);
        for (size_t i = 0; i < sizeof(left) / sizeof(left[0]); i++) {
            struct xidwatch *none = NULL;
            if (atomic_compare_exchange_strong(&left[i], &none, x))
                break;
        }
        log_debug("The NVML event thread is in its wait: left to end with the process");
        return;
    }
    pthread_join(x->thread, NULL);
    gpu_events_close(x->events);
    close(x->pipe_wr);
    close(x->wake);
    free(x);
}
