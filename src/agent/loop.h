/* loop.h: the agent's event loop, in the manner of Redis' ae.c: file descriptors registered as
 * {fd, handler, ctx} rows, periodic jobs as {name, when, interval_ms, run} rows, one epoll_wait
 * whose timeout is the nearest job's deadline. Adding an fd source or a job is one row.
 *
 * A round (loop_once) waits, calls the handler of every readable fd, then runs the jobs that are
 * due, in the order they were added. A job is due when
 *   - an fd handler kicked it this round (loop_kick), whatever its interval, or
 *   - LOOP_TICK: the tick fired this round (loop_tick, called by the handler of the tick source:
 *     the inventory poll's timerfd), or
 *   - LOOP_TICK_INTERVAL: the tick fired and interval_ms passed since the job last ran (jobs that
 *     piggyback on the poll; the first tick runs them), or
 *   - LOOP_TIMER: interval_ms passed since it last ran (or since it was added; the loop wakes for
 *     it), or
 *   - due() (optional, any kind) says its own deadline has come: a deadline only the job knows
 *     (the MPS supervisor's next start, probe or timeout), which also bounds the wait.
 * interval_ms 0 means never (only when kicked). Not thread-safe: one thread runs a loop. */
#ifndef GS_AGENT_LOOP_H
#define GS_AGENT_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#define LOOP_MAX_FDS 16
#define LOOP_MAX_JOBS 16
#define LOOP_MAX_WAIT_MS 60000 /* the longest wait when no deadline is nearer */

/* Called when fd is readable (level-triggered: read until EAGAIN, or it is called again). */
typedef void loop_fd_fn(void *ctx, int fd);
/* now_ns: the round's time (monotonic), the same for every job of the round. */
typedef void loop_job_fn(void *ctx, uint64_t now_ns);
/* The job's own next deadline (monotonic ns), UINT64_MAX for none. */
typedef uint64_t loop_due_fn(void *ctx);

enum loop_when {
    LOOP_KICKED,        /* only when kicked */
    LOOP_TICK,          /* every tick */
    LOOP_TICK_INTERVAL, /* at the first tick interval_ms after its last run */
    LOOP_TIMER,         /* every interval_ms */
};

struct loop_job {
    const char *name;
    enum loop_when when;
    unsigned interval_ms; /* LOOP_TICK_INTERVAL, LOOP_TIMER; 0: never */
    loop_job_fn *run;
    loop_due_fn *due;     /* optional */
};

struct loop {
    int epfd;
    bool stopped, ticked;
    unsigned n_fds, n_jobs;
    struct {
        int fd; /* -1: free */
        loop_fd_fn *fn;
        void *ctx;
    } fds[LOOP_MAX_FDS];
    struct {
        struct loop_job job;
        void *ctx;
        uint64_t last_ns; /* when it last ran; LOOP_TIMER: when it was added, at first */
        bool ran, kicked;
    } jobs[LOOP_MAX_JOBS];
};

/* Returns 0 or -errno (epoll_create1). */
int loop_init(struct loop *l);
void loop_free(struct loop *l);

/* Registers fd (EPOLLIN). -EEXIST, -ENOSPC (LOOP_MAX_FDS), or epoll_ctl's -errno. */
int loop_add_fd(struct loop *l, int fd, loop_fd_fn *fn, void *ctx);
/* Unregisters fd (before it is closed); a no-op for an fd not registered. */
void loop_del_fd(struct loop *l, int fd);

/* Adds a job (copied); returns its id for loop_kick, or -ENOSPC. */
int loop_add_job(struct loop *l, const struct loop_job *job, void *ctx);
/* Runs job `id` at the end of this round (from an fd handler), or of the next one. */
void loop_kick(struct loop *l, int id);
/* The tick source fired: LOOP_TICK and LOOP_TICK_INTERVAL jobs are considered this round. */
void loop_tick(struct loop *l);

/* One round: waits (at most until the nearest deadline), dispatches, runs the due jobs. Returns
 * 0 (also when interrupted by a signal), or epoll_wait's -errno. */
int loop_once(struct loop *l);

/* Ends the loop after the current round (loop_running turns false). */
void loop_stop(struct loop *l);
bool loop_running(const struct loop *l);

/* Milliseconds until the nearest deadline (0: one is due, or a kick or tick is pending; -1: none),
 * for tests and the wait. */
int loop_timeout_ms(const struct loop *l, uint64_t now_ns);

#endif
