/* test_loop.c: the agent's event loop (src/agent/loop.h): fd rows, job rows and when each kind
 * of job runs, the wait's timeout from the nearest deadline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "agent/loop.h"
#include "util/util.h"

struct rec {
    struct loop *l;
    char seq[64];      /* one letter per job run, in order */
    size_t n;
    unsigned fd_calls;
    int pair[2];       /* with del_other: the handler of one removes the other */
    bool del_other;
    int kick;          /* a job the fd handler kicks (-1: none) */
    uint64_t due_ns;   /* what due() answers */
};

static void record(struct rec *r, char c) {
    if (r->n + 1 < sizeof(r->seq))
        r->seq[r->n++] = c;
    r->seq[r->n] = '\0';
}

#define JOB(LETTER)                                                                                  \
    static void job_##LETTER(void *ctx, uint64_t now) {                                             \
        (void)now;                                                                                   \
        record(ctx, #LETTER[0]);                                                                     \
    }
JOB(a)
JOB(b)
JOB(c)
JOB(d)
JOB(e)

static uint64_t due(void *ctx) {
    return ((struct rec *)ctx)->due_ns;
}

static void on_fd(void *ctx, int fd) {
    struct rec *r = ctx;
    char buf[16];
    while (read(fd, buf, sizeof(buf)) > 0)
        ;
    r->fd_calls++;
    if (r->del_other)
        loop_del_fd(r->l, fd == r->pair[0] ? r->pair[1] : r->pair[0]);
    if (r->kick >= 0)
        loop_kick(r->l, r->kick);
}

static void setup_rec(struct loop *l, struct rec *r) {
    assert_int_equal(loop_init(l), 0);
    memset(r, 0, sizeof(*r));
    r->l = l;
    r->kick = -1;
    r->due_ns = UINT64_MAX;
}

static void test_kicked_and_tick_jobs(void **state) {
    (void)state;
    struct loop l;
    struct rec r;
    setup_rec(&l, &r);
    const struct loop_job jobs[] = {
        { "kicked", LOOP_KICKED, 0, job_a, NULL },
        { "tick", LOOP_TICK, 0, job_b, NULL },
        { "tick, 1 h", LOOP_TICK_INTERVAL, 3600 * 1000, job_c, NULL },
        { "tick, never", LOOP_TICK_INTERVAL, 0, job_d, NULL },
        { "timer, never", LOOP_TIMER, 0, job_e, NULL },
    };
    int ids[5];
    for (int i = 0; i < 5; i++)
        assert_int_equal(ids[i] = loop_add_job(&l, &jobs[i], &r), i);
    assert_int_equal(loop_timeout_ms(&l, gs_now_ns()), -1); /* nothing has a deadline */
    loop_kick(&l, ids[0]);
    assert_int_equal(loop_timeout_ms(&l, gs_now_ns()), 0);
    assert_int_equal(loop_once(&l), 0);
    assert_string_equal(r.seq, "a"); /* no tick: only the kicked job */
    loop_tick(&l);
    assert_int_equal(loop_timeout_ms(&l, gs_now_ns()), 0); /* a pending tick: no wait */
    assert_int_equal(loop_once(&l), 0);
    assert_string_equal(r.seq, "abc"); /* every tick; the first tick for an interval; never 0 */
    loop_tick(&l);
    loop_kick(&l, ids[3]);
    assert_int_equal(loop_once(&l), 0);
    assert_string_equal(r.seq, "abcbd"); /* the hour has not passed; a kick runs even "never" */
    loop_free(&l);
}

static void test_timer_and_due(void **state) {
    (void)state;
    struct loop l;
    struct rec r;
    setup_rec(&l, &r);
    const struct loop_job timer = { "timer", LOOP_TIMER, 30, job_a, NULL };
    const struct loop_job own = { "own deadline", LOOP_KICKED, 0, job_b, due };
    assert_int_equal(loop_add_job(&l, &timer, &r), 0);
    assert_int_equal(loop_add_job(&l, &own, &r), 1);
    int t = loop_timeout_ms(&l, gs_now_ns());
    assert_true(t > 0 && t <= 30); /* the timer's first run is one interval after it was added */
    uint64_t t0 = gs_now_ns();
    assert_int_equal(loop_once(&l), 0); /* waits for it */
    assert_true(gs_now_ns() - t0 >= 29 * 1000000ULL);
    assert_string_equal(r.seq, "a");
    r.due_ns = gs_now_ns() + 5 * 1000000ULL; /* nearer than the timer */
    t = loop_timeout_ms(&l, gs_now_ns());
    assert_true(t > 0 && t <= 5);
    assert_int_equal(loop_once(&l), 0);
    assert_string_equal(r.seq, "ab");
    r.due_ns = gs_now_ns() + 120 * 1000000000ULL;
    assert_true(loop_timeout_ms(&l, gs_now_ns()) <= 30);
    r.due_ns = 0;
    assert_int_equal(loop_timeout_ms(&l, gs_now_ns()), 0);
    loop_free(&l);
}

static void test_long_deadline_capped(void **state) {
    (void)state;
    struct loop l;
    struct rec r;
    setup_rec(&l, &r);
    const struct loop_job own = { "own deadline", LOOP_KICKED, 0, job_a, due };
    assert_int_equal(loop_add_job(&l, &own, &r), 0);
    r.due_ns = gs_now_ns() + 3600 * 1000000000ULL;
    assert_int_equal(loop_timeout_ms(&l, gs_now_ns()), LOOP_MAX_WAIT_MS);
    loop_free(&l);
}

static void test_fd_dispatch_and_removal(void **state) {
    (void)state;
    struct loop l;
    struct rec r;
    setup_rec(&l, &r);
    int p1[2], p2[2];
    assert_int_equal(pipe2(p1, O_NONBLOCK), 0);
    assert_int_equal(pipe2(p2, O_NONBLOCK), 0);
    const struct loop_job kicked = { "kicked", LOOP_KICKED, 0, job_a, NULL };
    r.kick = loop_add_job(&l, &kicked, &r);
    assert_int_equal(loop_add_fd(&l, p1[0], on_fd, &r), 0);
    assert_int_equal(loop_add_fd(&l, p1[0], on_fd, &r), -EEXIST);
    assert_int_equal(loop_add_fd(&l, p2[0], on_fd, &r), 0);
    /* Both readable; the first handler called removes the other source (and the kicked job
     * runs once, after the dispatch). */
    r.pair[0] = p1[0];
    r.pair[1] = p2[0];
    r.del_other = true;
    assert_int_equal(write(p1[1], "x", 1), 1);
    assert_int_equal(write(p2[1], "x", 1), 1);
    assert_int_equal(loop_once(&l), 0);
    assert_int_equal(r.fd_calls, 1);
    assert_string_equal(r.seq, "a");
    loop_del_fd(&l, p1[0]);
    loop_del_fd(&l, p2[0]);
    loop_del_fd(&l, p1[0]); /* a no-op */
    assert_int_equal(l.n_fds, 0);
    assert_int_equal(loop_add_fd(&l, p1[0], on_fd, &r), 0); /* the slot is free again */
    for (int i = 0; i < 4; i++)
        close(i < 2 ? p1[i] : p2[i - 2]);
    loop_free(&l);
}

static void test_full_tables(void **state) {
    (void)state;
    struct loop l;
    struct rec r;
    setup_rec(&l, &r);
    const struct loop_job j = { "j", LOOP_KICKED, 0, job_a, NULL };
    for (int i = 0; i < LOOP_MAX_JOBS; i++)
        assert_int_equal(loop_add_job(&l, &j, &r), i);
    assert_int_equal(loop_add_job(&l, &j, &r), -ENOSPC);
    int p[LOOP_MAX_FDS + 1][2];
    for (int i = 0; i <= LOOP_MAX_FDS; i++) {
        assert_int_equal(pipe(p[i]), 0);
        assert_int_equal(loop_add_fd(&l, p[i][0], on_fd, &r), i < LOOP_MAX_FDS ? 0 : -ENOSPC);
    }
    for (int i = 0; i <= LOOP_MAX_FDS; i++) {
        close(p[i][0]);
        close(p[i][1]);
    }
    assert_true(loop_running(&l));
    loop_stop(&l);
    assert_false(loop_running(&l));
    loop_free(&l);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kicked_and_tick_jobs),
        cmocka_unit_test(test_timer_and_due),
        cmocka_unit_test(test_long_deadline_capped),
        cmocka_unit_test(test_fd_dispatch_and_removal),
        cmocka_unit_test(test_full_tables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
