/* events.c: NVML event sets on the simulated node. Xid events live in the shared state (a ring
 * per GPU, gpusliceSimInjectXid appends); a set delivers those after its cursor on the GPUs it is
 * registered on, and waits on inotify of the state directory, which every writer's rename wakes. */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "simlib.h"
#include "util/util.h"

struct nvmlEventSet_st {
    int inotify_fd;
    unsigned long long types[GS_NODE_MAX_GPUS]; /* registered event types per GPU */
    unsigned long long cursor;                  /* last event sequence delivered */
};

/* ---- events --------------------------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    READ_BEGIN;
    if (!set)
        READ_END(NVML_ERROR_INVALID_ARGUMENT);
    struct nvmlEventSet_st *s = calloc(1, sizeof(*s));
    if (!s)
        READ_END(NVML_ERROR_MEMORY);
    /* The state file is replaced by rename: IN_MOVED_TO on the directory wakes waiters. */
    s->inotify_fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (s->inotify_fd < 0 || inotify_add_watch(s->inotify_fd, sim_state_dir, IN_MOVED_TO | IN_CLOSE_WRITE) < 0) {
        if (s->inotify_fd >= 0)
            close(s->inotify_fd);
        free(s);
        READ_END(NVML_ERROR_UNKNOWN);
    }
    s->cursor = sim_st->event_seq;
    *set = s;
    READ_END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), types);
    if (r == NVML_SUCCESS)
        *types = nvmlEventTypeXidCriticalError;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), set);
    if (r == NVML_SUCCESS && (types & ~nvmlEventTypeXidCriticalError))
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS)
        set->types[ref.index] |= types;
    READ_END(r);
}

/* Finds the oldest event after the set's cursor on a registered GPU. Caller holds the lock. */
static bool next_event(struct nvmlEventSet_st *s, nvmlEventData_t *data) {
    const struct sim_event *best = NULL;
    unsigned best_gpu = 0;
    for (unsigned i = 0; i < sim_st->n_gpus; i++) {
        if (!(s->types[i] & nvmlEventTypeXidCriticalError))
            continue;
        for (unsigned e = 0; e < sim_st->gpus[i].n_events; e++) {
            const struct sim_event *ev = &sim_st->gpus[i].events[e];
            if (ev->seq > s->cursor && (!best || ev->seq < best->seq)) {
                best = ev;
                best_gpu = i;
            }
        }
    }
    if (!best) {
        s->cursor = sim_st->event_seq > s->cursor ? s->cursor : sim_st->event_seq;
        return false;
    }
    s->cursor = best->seq;
    *data = (nvmlEventData_t){
        .device = gpu_handle(best_gpu),
        .eventType = nvmlEventTypeXidCriticalError,
        .eventData = best->xid,
        .gpuInstanceId = best->gi,
        .computeInstanceId = best->gi == NO_GI ? NO_GI : 0,
    };
    return true;
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    nvmlReturn_t fault = sim_fault_check(__func__);
    if (fault != NVML_SUCCESS)
        return fault;
    if (!set || !data)
        return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t deadline = gs_now_ns() + (uint64_t)timeoutms * 1000000ULL;
    for (;;) {
        char buf[4096];
        while (read(set->inotify_fd, buf, sizeof(buf)) > 0) /* drain: we re-read the state below */
            ;
        nvmlReturn_t r = lock_state(false, NULL);
        if (r != NVML_SUCCESS)
            return r;
        bool found = next_event(set, data);
        unlock_state(NVML_SUCCESS, false);
        if (found)
            return NVML_SUCCESS;
        uint64_t now = gs_now_ns();
        if (now >= deadline)
            return NVML_ERROR_TIMEOUT;
        struct pollfd pfd = { .fd = set->inotify_fd, .events = POLLIN };
        int ms = (int)((deadline - now + 999999) / 1000000);
        if (poll(&pfd, 1, ms) < 0 && errno != EINTR)
            return NVML_ERROR_UNKNOWN;
    }
}
EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    close(set->inotify_fd);
    free(set);
    return NVML_SUCCESS;
}
