/* loop.c: the agent's event loop (see loop.h). */
#include "agent/loop.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "util/util.h"

int loop_init(struct loop *l) {
    memset(l, 0, sizeof(*l));
    for (unsigned i = 0; i < LOOP_MAX_FDS; i++)
        l->fds[i].fd = -1;
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    return l->epfd < 0 ? -errno : 0;
}

void loop_free(struct loop *l) {
    if (l->epfd >= 0)
        close(l->epfd);
    l->epfd = -1;
}

int loop_add_fd(struct loop *l, int fd, loop_fd_fn *fn, void *ctx) {
    unsigned slot = LOOP_MAX_FDS;
    for (unsigned i = 0; i < LOOP_MAX_FDS; i++) {
        if (l->fds[i].fd == fd)
            return -EEXIST;
        if (l->fds[i].fd < 0 && slot == LOOP_MAX_FDS)
            slot = i;
    }
    if (slot == LOOP_MAX_FDS)
        return -ENOSPC;
    struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
    if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
        return -errno;
    l->fds[slot].fd = fd;
    l->fds[slot].fn = fn;
    l->fds[slot].ctx = ctx;
    l->n_fds++;
    return 0;
}

void loop_del_fd(struct loop *l, int fd) {
    for (unsigned i = 0; i < LOOP_MAX_FDS; i++) {
        if (l->fds[i].fd != fd || fd < 0)
            continue;
        epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, NULL);
        l->fds[i].fd = -1;
        l->n_fds--;
    }
}

int loop_add_job(struct loop *l, const struct loop_job *job, void *ctx) {
    if (l->n_jobs == LOOP_MAX_JOBS)
        return -ENOSPC;
    unsigned id = l->n_jobs++;
    l->jobs[id].job = *job;
    l->jobs[id].ctx = ctx;
    l->jobs[id].last_ns = job->when == LOOP_TIMER ? gs_now_ns() : 0;
    l->jobs[id].ran = l->jobs[id].kicked = false;
    return (int)id;
}

void loop_kick(struct loop *l, int id) {
    if (id >= 0 && (unsigned)id < l->n_jobs)
        l->jobs[id].kicked = true;
}

void loop_tick(struct loop *l) {
    l->ticked = true;
}

void loop_stop(struct loop *l) {
    l->stopped = true;
}

bool loop_running(const struct loop *l) {
    return !l->stopped;
}

static bool interval_passed(uint64_t last_ns, unsigned interval_ms, uint64_t now_ns) {
    return interval_ms && now_ns - last_ns >= (uint64_t)interval_ms * 1000000ULL;
}

/* The job's next deadline, UINT64_MAX for none (tick jobs wait for the tick, not for a time). */
static uint64_t job_deadline(const struct loop *l, unsigned i) {
    uint64_t due = UINT64_MAX;
    if (l->jobs[i].kicked)
        return 0;
    const struct loop_job *j = &l->jobs[i].job;
    if (j->when == LOOP_TIMER && j->interval_ms)
        due = l->jobs[i].last_ns + (uint64_t)j->interval_ms * 1000000ULL;
    if (j->due) {
        uint64_t own = j->due(l->jobs[i].ctx);
        due = own < due ? own : due;
    }
    return due;
}

int loop_timeout_ms(const struct loop *l, uint64_t now_ns) {
    if (l->ticked)
        return 0;
    uint64_t due = UINT64_MAX;
    for (unsigned i = 0; i < l->n_jobs; i++) {
        uint64_t d = job_deadline(l, i);
        due = d < due ? d : due;
    }
    if (due == UINT64_MAX)
        return -1;
    if (due <= now_ns)
        return 0;
    uint64_t ms = (due - now_ns + 999999) / 1000000; /* never wake before it */
    return ms > LOOP_MAX_WAIT_MS ? LOOP_MAX_WAIT_MS : (int)ms;
}

static bool job_due(const struct loop *l, unsigned i, uint64_t now_ns) {
    const struct loop_job *j = &l->jobs[i].job;
    if (l->jobs[i].kicked)
        return true;
    switch (j->when) {
    case LOOP_KICKED: break;
    case LOOP_TICK:
        if (l->ticked)
            return true;
        break;
    case LOOP_TICK_INTERVAL:
        if (l->ticked && j->interval_ms &&
            (!l->jobs[i].ran || interval_passed(l->jobs[i].last_ns, j->interval_ms, now_ns)))
            return true;
        break;
    case LOOP_TIMER:
        if (interval_passed(l->jobs[i].last_ns, j->interval_ms, now_ns))
            return true;
        break;
    }
    return j->due && j->due(l->jobs[i].ctx) <= now_ns;
}

int loop_once(struct loop *l) {
    struct epoll_event evs[LOOP_MAX_FDS];
    int n = epoll_wait(l->epfd, evs, LOOP_MAX_FDS, loop_timeout_ms(l, gs_now_ns()));
    if (n < 0 && errno != EINTR)
        return -errno;
    for (int i = 0; i < n; i++) {
        /* Looked up, not a pointer in the event: a handler may remove another source (or its own)
         * before the rest of this round's events are dispatched. */
        for (unsigned k = 0; k < LOOP_MAX_FDS; k++)
            if (l->fds[k].fd >= 0 && l->fds[k].fd == evs[i].data.fd) {
                l->fds[k].fn(l->fds[k].ctx, l->fds[k].fd);
                break;
            }
    }
    uint64_t now = gs_now_ns();
    for (unsigned i = 0; i < l->n_jobs; i++) {
        if (!job_due(l, i, now))
            continue;
        l->jobs[i].kicked = false;
        l->jobs[i].ran = true;
        l->jobs[i].last_ns = now;
        l->jobs[i].job.run(l->jobs[i].ctx, now);
    }
    l->ticked = false;
    return 0;
}
