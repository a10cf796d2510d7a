/* test_mps.c: MPS control daemon supervision (src/mps). The pure part (backoff, state machine,
 * commands, replies, paths, limits), then supervision of the stand-in control binary
 * (fake_mps_control.c) in a temporary MPS root: environment and defaults of each daemon, a
 * SIGKILLed daemon seen within a second and restarted, adoption after a restart of the
 * supervisor, stop with quit and cleanup, and start failures. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "config/policy.h"
#include "mps/mps.h"
#include "util/util.h"

#ifndef FAKE_MPS_CONTROL
#error "FAKE_MPS_CONTROL must be defined by the build"
#endif

#define MS 1000000ULL
#define GPU_A "GPU-b1028956-cfa2-0990-bf4a-5da9abb51763"
#define GPU_B "MIG-3b6a2a4c-2a2b-5e0e-a3ad-7a2f1d0c9b11"

/* ---- pure ---- */

static struct gs_mps_timing defaults(void) { return gs_mps_timing_defaults(NULL); }

static void test_state_names(void **state) {
    (void)state;
    assert_string_equal(gs_mps_state_name(GS_MPS_STOPPED), "stopped");
    assert_string_equal(gs_mps_state_name(GS_MPS_STARTING), "starting");
    assert_string_equal(gs_mps_state_name(GS_MPS_RUNNING), "running");
    assert_string_equal(gs_mps_state_name(GS_MPS_RESTARTING), "restarting");
    assert_string_equal(gs_mps_state_name(GS_MPS_FAILED), "failed");
    assert_string_equal(gs_mps_state_name((enum gs_mps_state)42), "unknown");
}

static void test_timing_defaults(void **state) {
    (void)state;
    struct gs_mps_timing t = defaults();
    assert_int_equal(t.backoff_min_ms, 500);
    assert_int_equal(t.backoff_max_ms, 30000);
    assert_int_equal(t.start_timeout_ms, 10000);
    assert_int_equal(t.command_timeout_ms, 3000);
    assert_int_equal(t.stop_timeout_ms, 5000);
    assert_int_equal(t.probe_interval_ms, 300000);
    assert_int_equal(t.failed_after, 5);
    /* given values stay; a maximum below the minimum is raised to it */
    struct gs_mps_timing in = { .backoff_min_ms = 100, .backoff_max_ms = 50, .failed_after = 2 };
    t = gs_mps_timing_defaults(&in);
    assert_int_equal(t.backoff_min_ms, 100);
    assert_int_equal(t.backoff_max_ms, 100);
    assert_int_equal(t.failed_after, 2);
    assert_int_equal(t.start_timeout_ms, 10000);
}

static void test_backoff(void **state) {
    (void)state;
    struct gs_mps_timing t = defaults();
    static const struct {
        unsigned failures;
        uint64_t ms;
    } want[] = {
        { 0, 500 },   { 1, 500 },    { 2, 1000 },   { 3, 2000 },   { 4, 4000 },        { 5, 8000 },
        { 6, 16000 }, { 7, 30000 },  { 8, 30000 },  { 64, 30000 }, { UINT_MAX, 30000 },
    };
    for (size_t i = 0; i < GS_ARRAY_SIZE(want); i++)
        assert_int_equal(gs_mps_backoff_ms(&t, want[i].failures), want[i].ms);
}

static void test_fsm(void **state) {
    (void)state;
    struct gs_mps_timing t = defaults();
    struct gs_mps_fsm f = { 0 };
    uint64_t now = 1000 * MS;
    assert_true(gs_mps_fsm_due(&f, now)); /* a new GPU starts at once */

    /* events that do not apply are ignored */
    assert_int_equal(gs_mps_fsm_event(&f, GS_MPS_EV_READY, now, &t), GS_MPS_STOPPED);
    assert_int_equal(gs_mps_fsm_event(&f, GS_MPS_EV_DIED, now, &t), GS_MPS_STOPPED);

    assert_int_equal(gs_mps_fsm_event(&f, GS_MPS_EV_START, now, &t), GS_MPS_STARTING);
    assert_int_equal(f.due_ns, now + 10000 * MS); /* the start timeout */
    assert_false(gs_mps_fsm_due(&f, now + 9999 * MS));
    assert_true(gs_mps_fsm_due(&f, now + 10000 * MS));
    assert_int_equal(gs_mps_fsm_event(&f, GS_MPS_EV_DIED, now, &t), GS_MPS_STARTING); /* FAILED is for starts */
    assert_int_equal(gs_mps_fsm_event(&f, GS_MPS_EV_START, now, &t), GS_MPS_STARTING);
    assert_int_equal(f.restarts, 0);

    assert_int_equal(gs_mps_fsm_event(&f, GS_MPS_EV_READY, now, &t), GS_MPS_RUNNING);
    assert_int_equal(f.due_ns, now + 300000 * MS); /* the next probe */
    assert_int_equal(gs_mps_fsm_event(&f, GS_MPS_EV_PROBED, now + 300000 * MS, &t), GS_MPS_RUNNING);
    assert_int_equal(f.due_ns, now + 600000 * MS);
    assert_int_equal(gs_mps_fsm_event(&f, GS_MPS_EV_FAILED, now, &t), GS_MPS_RUNNING); /* DIED is for running */

    /* dies soon after start: failures add up, the backoff doubles */
    now += 1000 * MS;
    assert_int_equal(gs_mps_fsm_event(&f, GS_MPS_EV_DIED, now, &t), GS_MPS_RESTARTING);
    assert_int_equal(f.failures, 1);
    assert_int_equal(f.due_ns, now + 500 * MS);
    assert_false(gs_mps_fsm_due(&f, now + 499 * MS));
    assert_int_equal(gs_mps_fsm_event(&f, GS_MPS_EV_START, now + 500 * MS, &t), GS_MPS_STARTING);
    assert_int_equal(f.restarts, 1);
    assert_int_equal(gs_mps_fsm_event(&f, GS_MPS_EV_FAILED, now + 600 * MS, &t), GS_MPS_RESTARTING);
    assert_int_equal(f.failures, 2);
    assert_int_equal(f.due_ns, now + 600 * MS + 1000 * MS);
    for (unsigned k = 3; k <= 5; k++) {
        gs_mps_fsm_event(&f, GS_MPS_EV_START, now, &t);
        gs_mps_fsm_event(&f, GS_MPS_EV_FAILED, now, &t);
        assert_int_equal(f.failures, k);
    }
    assert_int_equal(f.state, GS_MPS_FAILED); /* failed_after = 5 */
    assert_int_equal(f.due_ns, now + 8000 * MS); /* still retried */
    assert_int_equal(f.restarts, 4);
    assert_int_equal(gs_mps_fsm_event(&f, GS_MPS_EV_START, now, &t), GS_MPS_STARTING);
    assert_int_equal(gs_mps_fsm_event(&f, GS_MPS_EV_READY, now, &t), GS_MPS_RUNNING);
    /* died after running for backoff_max: its failures are forgotten */
    assert_int_equal(gs_mps_fsm_event(&f, GS_MPS_EV_DIED, now + 30000 * MS, &t), GS_MPS_RESTARTING);
    assert_int_equal(f.failures, 1);
    assert_int_equal(f.due_ns, now + 30500 * MS);

    /* STOP from any state */
    assert_int_equal(gs_mps_fsm_event(&f, GS_MPS_EV_STOP, now, &t), GS_MPS_STOPPED);
    assert_int_equal(f.failures, 0);

    /* probes can be turned off */
    t.probe_interval_ms = GS_MPS_PROBE_NEVER;
    struct gs_mps_fsm g = { 0 };
    gs_mps_fsm_event(&g, GS_MPS_EV_START, now, &t);
    gs_mps_fsm_event(&g, GS_MPS_EV_READY, now, &t);
    assert_int_equal(g.due_ns, UINT64_MAX);
    assert_false(gs_mps_fsm_due(&g, UINT64_MAX - 1));
}

static void test_uuid_valid(void **state) {
    (void)state;
    assert_true(gs_mps_uuid_valid(GPU_A));
    assert_true(gs_mps_uuid_valid(GPU_B));
    assert_true(gs_mps_uuid_valid("GPU-B1028956-CFA2-0990-BF4A-5DA9ABB51763"));
    static const char *const bad[] = {
        "", "GPU-", "gpu-b1028956", "b1028956-cfa2-0990-bf4a-5da9abb51763", "GPU-../../etc",
        "MIG-GPU-b1028956-cfa2-0990-bf4a-5da9abb51763/3/0", "GPU-b1028956 cfa2", "GPU-xyz",
        "GPU-0123456789012345678901234567890123456789012345678901234567890", /* 64 characters */
    };
    for (size_t i = 0; i < GS_ARRAY_SIZE(bad); i++)
        assert_false(gs_mps_uuid_valid(bad[i]));
}

static void test_paths(void **state) {
    (void)state;
    struct gs_mps_paths p;
    assert_int_equal(gs_mps_paths("/run/nvidia/mps", GPU_A, &p), 0);
    assert_string_equal(p.dir, "/run/nvidia/mps/" GPU_A);
    assert_string_equal(p.pipe, "/run/nvidia/mps/" GPU_A "/pipe");
    assert_string_equal(p.log, "/run/nvidia/mps/" GPU_A "/log");
    assert_string_equal(p.pid_file, "/run/nvidia/mps/" GPU_A "/pipe/nvidia-cuda-mps-control.pid");
    assert_string_equal(p.socket, "/run/nvidia/mps/" GPU_A "/pipe/control");
    assert_int_equal(gs_mps_paths("/run/nvidia/mps//", GPU_B, &p), 0);
    assert_string_equal(p.dir, "/run/nvidia/mps/" GPU_B);
    assert_int_equal(gs_mps_paths("/", GPU_B, &p), 0);
    assert_string_equal(p.pipe, "/" GPU_B "/pipe");

    assert_int_equal(gs_mps_paths("run/mps", GPU_A, &p), -EINVAL);
    assert_int_equal(gs_mps_paths(NULL, GPU_A, &p), -EINVAL);
    assert_int_equal(gs_mps_paths("/run", "GPU-1/../x", &p), -EINVAL);
    /* the control socket's path must fit in sun_path (108 bytes with the NUL) */
    char root[128];
    memset(root, 'r', sizeof(root));
    root[0] = '/';
    size_t fits = 107 - strlen("/" GPU_A "/pipe/control"); /* root length that just fits */
    root[fits] = '\0';
    assert_int_equal(gs_mps_paths(root, GPU_A, &p), 0);
    assert_int_equal(strlen(p.socket), 107);
    root[fits] = 'r';
    root[fits + 1] = '\0';
    assert_int_equal(gs_mps_paths(root, GPU_A, &p), -ENAMETOOLONG);
}

static void test_commands(void **state) {
    (void)state;
    char buf[128];
    assert_int_equal(gs_mps_cmd_thread_percentage(buf, sizeof(buf), 25), 0);
    assert_string_equal(buf, "set_default_active_thread_percentage 25");
    assert_int_equal(gs_mps_cmd_thread_percentage(buf, sizeof(buf), 100), 0);
    assert_string_equal(buf, "set_default_active_thread_percentage 100");
    assert_int_equal(gs_mps_cmd_thread_percentage(buf, sizeof(buf), 0), -EINVAL);
    assert_int_equal(gs_mps_cmd_thread_percentage(buf, sizeof(buf), 101), -EINVAL);
    assert_int_equal(gs_mps_cmd_thread_percentage(buf, 10, 25), -ENOBUFS);

    assert_int_equal(gs_mps_cmd_pinned_limit(buf, sizeof(buf), "0", 4ULL << 30), 0);
    assert_string_equal(buf, "set_default_device_pinned_mem_limit 0 4096M");
    assert_int_equal(gs_mps_cmd_pinned_limit(buf, sizeof(buf), "0", (3ULL << 20) / 2), 0); /* 1.5 MiB */
    assert_string_equal(buf, "set_default_device_pinned_mem_limit 0 1M");
    assert_int_equal(gs_mps_cmd_pinned_limit(buf, sizeof(buf), GPU_A, 141ULL << 30), 0);
    assert_string_equal(buf, "set_default_device_pinned_mem_limit " GPU_A " 144384M");
    assert_int_equal(gs_mps_cmd_pinned_limit(buf, sizeof(buf), "0", (1ULL << 20) - 1), -EINVAL);
    assert_int_equal(gs_mps_cmd_pinned_limit(buf, sizeof(buf), "", 1ULL << 30), -EINVAL);
    assert_int_equal(gs_mps_cmd_pinned_limit(buf, sizeof(buf), "0 1", 1ULL << 30), -EINVAL);
    assert_int_equal(gs_mps_cmd_pinned_limit(buf, 20, "0", 1ULL << 30), -ENOBUFS);
    assert_string_equal(GS_MPS_CMD_PROBE, "get_default_active_thread_percentage");
    assert_string_equal(GS_MPS_CMD_QUIT, "quit");
}

static void test_parse_percentage(void **state) {
    (void)state;
    static const struct {
        const char *text;
        double v;
    } ok[] = { { "25.0\n", 25.0 }, { "100.0", 100.0 }, { " 33.3 \r\n", 33.3 }, { "0", 0.0 }, { "50", 50.0 } };
    for (size_t i = 0; i < GS_ARRAY_SIZE(ok); i++) {
        double v = -1;
        assert_int_equal(gs_mps_parse_percentage(ok[i].text, &v), 0);
        assert_true(v > ok[i].v - 1e-9 && v < ok[i].v + 1e-9);
    }
    static const char *const bad[] = { "", "\n", "abc", "-5", "+5", "100.1", "1e9", "inf", "nan", "25.0 extra",
                                       "Cannot find MPS control daemon process" };
    for (size_t i = 0; i < GS_ARRAY_SIZE(bad); i++) {
        double v;
        assert_int_equal(gs_mps_parse_percentage(bad[i], &v), -EINVAL);
    }
}

static void test_parse_pid(void **state) {
    (void)state;
    pid_t pid;
    assert_int_equal(gs_mps_parse_pid("1234\n", &pid), 0);
    assert_int_equal(pid, 1234);
    assert_int_equal(gs_mps_parse_pid("2", &pid), 0);
    assert_int_equal(pid, 2);
    assert_int_equal(gs_mps_parse_pid("2147483647", &pid), 0);
    static const char *const bad[] = { "", "\n", "0", "1", "-5", "12a", " 12", "2147483648", "99999999999999999999",
                                       "12 13" };
    for (size_t i = 0; i < GS_ARRAY_SIZE(bad); i++)
        assert_int_equal(gs_mps_parse_pid(bad[i], &pid), -EINVAL);
}

static void test_resolve_limits(void **state) {
    (void)state;
    unsigned pct;
    unsigned long long pinned;
    const unsigned long long h100 = 80ULL << 30;
    assert_int_equal(gs_mps_resolve_limits(4, GS_COMPUTE_AUTO, GS_MEMORY_AUTO, h100, &pct, &pinned), 0);
    assert_int_equal(pct, 25);
    assert_int_equal(pinned, 20ULL << 30);
    assert_int_equal(gs_mps_resolve_limits(3, GS_COMPUTE_AUTO, GS_MEMORY_AUTO, h100, &pct, &pinned), 0);
    assert_int_equal(pct, 33); /* rounded down: 3 x 33% fits */
    assert_int_equal(pinned, h100 / 3);
    assert_int_equal(gs_mps_resolve_limits(48, 2, 1ULL << 30, h100, &pct, &pinned), 0);
    assert_int_equal(pct, 2);
    assert_int_equal(pinned, 1ULL << 30);
    assert_int_equal(gs_mps_resolve_limits(2, 50, 100ULL << 30, h100, &pct, &pinned), 0);
    assert_int_equal(pinned, h100); /* capped to the memory */
    assert_int_equal(gs_mps_resolve_limits(2, GS_COMPUTE_AUTO, GS_MEMORY_AUTO, 0, &pct, &pinned), 0);
    assert_int_equal(pinned, 0); /* memory unknown: no limit */
    assert_int_equal(gs_mps_resolve_limits(2, 30, 8ULL << 30, 0, &pct, &pinned), 0);
    assert_int_equal(pct, 30);
    assert_int_equal(pinned, 8ULL << 30);
    assert_int_equal(gs_mps_resolve_limits(200, GS_COMPUTE_AUTO, GS_MEMORY_AUTO, h100, &pct, &pinned), 0);
    assert_int_equal(pct, 1); /* never 0, which would mean "not set" */
    assert_int_equal(gs_mps_resolve_limits(0, GS_COMPUTE_AUTO, GS_MEMORY_AUTO, h100, &pct, &pinned), -EINVAL);
}

/* ---- supervision of the stand-in ---- */

struct fixture {
    char tmp[64];           /* the test's directory */
    char root[128];         /* the MPS root under it (created by the supervisor) */
    char journal[128];      /* every daemon's commands, kept after the log directories are gone */
};

static int setup(void **state) {
    struct fixture *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    snprintf(f->tmp, sizeof(f->tmp), "/tmp/gs-mps-XXXXXX");
    if (!mkdtemp(f->tmp))
        return -1;
    snprintf(f->root, sizeof(f->root), "%s/mps", f->tmp);
    snprintf(f->journal, sizeof(f->journal), "%s/journal", f->tmp);
    setenv("GS_FAKE_MPS_JOURNAL", f->journal, 1);
    setenv("GS_FAKE_MPS_LIFETIME_S", "60", 1);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    struct fixture *f = *state;
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->tmp);
    int r = system(cmd);
    free(f);
    return r == 0 ? 0 : -1;
}

static struct gs_mps_sup *new_sup(const struct fixture *f, const char *control, const struct gs_mps_timing *t) {
    struct gs_mps_opts o = { .root = f->root, .control = control };
    if (t)
        o.timing = *t;
    struct gs_mps_sup *s = NULL;
    assert_int_equal(gs_mps_sup_new(&o, &s), 0);
    return s;
}

static struct gs_mps_gpu gpu(const char *uuid, unsigned pct, unsigned long long pinned) {
    struct gs_mps_gpu g = { .thread_percentage = pct, .pinned_mem_limit = pinned };
    gs_strlcpy(g.uuid, uuid, sizeof(g.uuid));
    return g;
}

/* Ticks every 10 ms until `want` changes were reported or ms passed; returns how many. */
static size_t tick_for(struct gs_mps_sup *s, size_t want, unsigned ms, struct gs_mps_change *changes, size_t max) {
    size_t got = 0;
    uint64_t end = gs_now_ns() + ms * MS;
    while (got < want && gs_now_ns() < end) {
        size_t n = 0;
        assert_int_equal(gs_mps_sup_tick(s, gs_now_ns(), changes + got, max - got, &n), 0);
        got += n;
        if (got < want)
            usleep(10000);
    }
    return got;
}

static char *read_text(const char *path) {
    char *text = NULL;
    if (gs_read_file(path, 1 << 20, &text, NULL) < 0)
        fail_msg("cannot read %s", path);
    return text;
}

static size_t count(const char *text, const char *needle) {
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* Each line, in this order (others may come between). */
static void assert_lines_in_order(const char *text, const char *const *lines) {
    const char *p = text;
    for (size_t i = 0; lines[i]; i++) {
        char want[600];
        if (snprintf(want, sizeof(want), "%s\n", lines[i]) >= (int)sizeof(want))
            fail_msg("line too long for the test: '%s'", lines[i]);
        const char *at = strstr(p, want);
        if (!at)
            fail_msg("missing (or out of order) '%s' in:\n%s", lines[i], text);
        p = at + strlen(want);
    }
}

static bool gone(pid_t pid) {
    if (kill(pid, 0) < 0 && errno == ESRCH)
        return true;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    _cleanup_free_ char *stat = NULL;
    if (gs_read_file(path, 4096, &stat, NULL) < 0)
        return true;
    const char *p = strrchr(stat, ')');
    return p && p[1] == ' ' && p[2] == 'Z'; /* a zombie its new parent has not reaped */
}

static bool is_dir(const char *path, unsigned mode) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == mode;
}

static void check_daemon_log(const struct fixture *f, const char *uuid, const char *const *cmds) {
    char path[512], env[3][600];
    snprintf(path, sizeof(path), "%s/%s/log/control.log", f->root, uuid);
    _cleanup_free_ char *text = read_text(path);
    snprintf(env[0], sizeof(env[0]), "env CUDA_MPS_PIPE_DIRECTORY=%s/%s/pipe", f->root, uuid);
    snprintf(env[1], sizeof(env[1]), "env CUDA_MPS_LOG_DIRECTORY=%s/%s/log", f->root, uuid);
    snprintf(env[2], sizeof(env[2]), "env CUDA_VISIBLE_DEVICES=%s", uuid);
    const char *lines[8] = { env[0], env[1], env[2] };
    for (size_t i = 0; cmds[i] && i < 4; i++)
        lines[3 + i] = cmds[i];
    assert_lines_in_order(text, lines);
}

static void test_supervise_kill_restart_stop(void **state) {
    struct fixture *f = *state;
    struct gs_mps_timing t = { .probe_interval_ms = 300 };
    struct gs_mps_sup *s = new_sup(f, FAKE_MPS_CONTROL, &t);
    struct gs_mps_gpu gpus[] = { gpu(GPU_A, 25, 20ULL << 30), gpu(GPU_B, 50, 0) };
    assert_int_equal(gs_mps_sup_set_gpus(s, gpus, 2), 0);
    assert_int_equal(gs_mps_sup_state(s, GPU_A), GS_MPS_STOPPED);
    assert_int_equal(gs_mps_sup_next_due(s), 0); /* start now */

    /* both start and report healthy, once each */
    struct gs_mps_change ch[8];
    assert_int_equal(tick_for(s, 2, 5000, ch, 8), 2);
    assert_true(ch[0].healthy && ch[1].healthy);
    assert_int_equal(ch[0].state, GS_MPS_RUNNING);
    assert_true((!strcmp(ch[0].uuid, GPU_A) && !strcmp(ch[1].uuid, GPU_B)) ||
                (!strcmp(ch[0].uuid, GPU_B) && !strcmp(ch[1].uuid, GPU_A)));
    assert_int_equal(tick_for(s, 1, 400, ch, 8), 0); /* nothing more, though a probe ran */

    struct gs_mps_info a, b;
    assert_int_equal(gs_mps_sup_info(s, GPU_A, &a), 0);
    assert_int_equal(gs_mps_sup_info(s, GPU_B, &b), 0);
    assert_int_equal(a.state, GS_MPS_RUNNING);
    assert_true(a.healthy);
    assert_true(a.pid > 1 && b.pid > 1 && a.pid != b.pid);
    assert_int_equal(a.restarts, 0);
    assert_string_equal(a.error, "");
    assert_int_equal(gs_mps_sup_info(s, "GPU-00000000-0000-0000-0000-000000000000", &a), -ENOENT);
    gs_mps_sup_info(s, GPU_A, &a);

    /* directories, pid file, environment and defaults */
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", f->root, GPU_A);
    assert_true(is_dir(path, 0755));
    snprintf(path, sizeof(path), "%s/%s/pipe", f->root, GPU_B);
    assert_true(is_dir(path, 0755));
    snprintf(path, sizeof(path), "%s/%s/log", f->root, GPU_B);
    assert_true(is_dir(path, 0755));
    snprintf(path, sizeof(path), "%s/%s/pipe/nvidia-cuda-mps-control.pid", f->root, GPU_A);
    _cleanup_free_ char *pidtext = read_text(path);
    assert_int_equal(atoi(pidtext), a.pid);
    static const char *const cmds_a[] = { "cmd set_default_active_thread_percentage 25",
                                          "cmd set_default_device_pinned_mem_limit 0 20480M",
                                          "cmd get_default_active_thread_percentage", NULL };
    static const char *const cmds_b[] = { "cmd set_default_active_thread_percentage 50",
                                          "cmd get_default_active_thread_percentage", NULL };
    check_daemon_log(f, GPU_A, cmds_a);
    check_daemon_log(f, GPU_B, cmds_b);
    snprintf(path, sizeof(path), "%s/%s/log/control.log", f->root, GPU_B);
    _cleanup_free_ char *log_b = read_text(path);
    assert_int_equal(count(log_b, "pinned_mem_limit"), 0); /* no limit given, none set */

    /* SIGKILL: exactly that GPU is reported unhealthy within a second; the fd wakes the loop */
    int fd = gs_mps_sup_fd(s);
    struct pollfd p = { .fd = fd, .events = POLLIN };
    assert_int_equal(poll(&p, 1, 0), 0);
    uint64_t t0 = gs_now_ns();
    assert_int_equal(kill(a.pid, SIGKILL), 0);
    assert_int_equal(poll(&p, 1, 1000), 1);
    assert_int_equal(tick_for(s, 1, 1000, ch, 8), 1);
    assert_true(gs_now_ns() - t0 < 1000 * MS);
    assert_string_equal(ch[0].uuid, GPU_A);
    assert_false(ch[0].healthy);
    assert_int_equal(ch[0].state, GS_MPS_RESTARTING);
    assert_int_equal(gs_mps_sup_state(s, GPU_B), GS_MPS_RUNNING);
    struct gs_mps_info a2;
    gs_mps_sup_info(s, GPU_A, &a2);
    assert_non_null(strstr(a2.error, "exited"));
    uint64_t due = gs_mps_sup_next_due(s);
    assert_true(due > t0 && due <= gs_now_ns() + 500 * MS); /* the first backoff */

    /* restarted after the backoff, healthy again */
    assert_int_equal(tick_for(s, 1, 5000, ch, 8), 1);
    assert_string_equal(ch[0].uuid, GPU_A);
    assert_true(ch[0].healthy);
    assert_true(gs_now_ns() - t0 >= 500 * MS);
    gs_mps_sup_info(s, GPU_A, &a2);
    assert_int_equal(a2.state, GS_MPS_RUNNING);
    assert_int_equal(a2.restarts, 1);
    assert_true(a2.pid != a.pid && a2.pid > 1);
    assert_string_equal(a2.error, "");
    gs_mps_sup_info(s, GPU_B, &b);
    assert_int_equal(b.restarts, 0);
    snprintf(path, sizeof(path), "%s/%s/log/control.log", f->root, GPU_A);
    _cleanup_free_ char *log_a = read_text(path);
    assert_int_equal(count(log_a, "cmd set_default_active_thread_percentage 25\n"), 2); /* set again */
    assert_int_equal(count(log_a, "env CUDA_VISIBLE_DEVICES=" GPU_A "\n"), 2);

    /* stop: quit, directories gone, the root stays */
    assert_int_equal(gs_mps_sup_stop_all(s), 0);
    assert_true(gone(a2.pid));
    assert_true(gone(b.pid));
    snprintf(path, sizeof(path), "%s/%s", f->root, GPU_A);
    assert_int_equal(access(path, F_OK), -1);
    snprintf(path, sizeof(path), "%s/%s", f->root, GPU_B);
    assert_int_equal(access(path, F_OK), -1);
    assert_true(is_dir(f->root, 0755));
    _cleanup_free_ char *journal = read_text(f->journal);
    assert_int_equal(count(journal, GPU_A " quit\n"), 1);
    assert_int_equal(count(journal, GPU_B " quit\n"), 1);
    assert_int_equal(gs_mps_sup_state(s, GPU_A), GS_MPS_STOPPED);
    assert_int_equal(gs_mps_sup_next_due(s), UINT64_MAX);
    gs_mps_sup_free(s);
}

/* A supervisor freed without stopping leaves its daemon running; the next one adopts it, sets
 * its defaults again, and stops it when the GPU leaves the list. */
static void test_adopt_change_remove(void **state) {
    struct fixture *f = *state;
    struct gs_mps_sup *s = new_sup(f, FAKE_MPS_CONTROL, NULL);
    struct gs_mps_gpu g = gpu(GPU_A, 25, 0);
    assert_int_equal(gs_mps_sup_set_gpus(s, &g, 1), 0);
    struct gs_mps_change ch[4];
    assert_int_equal(tick_for(s, 1, 5000, ch, 4), 1);
    struct gs_mps_info first;
    gs_mps_sup_info(s, GPU_A, &first);
    gs_mps_sup_free(s);
    assert_false(gone(first.pid));

    s = new_sup(f, FAKE_MPS_CONTROL, NULL);
    g.thread_percentage = 30;
    assert_int_equal(gs_mps_sup_set_gpus(s, &g, 1), 0);
    assert_int_equal(tick_for(s, 1, 5000, ch, 4), 1);
    assert_true(ch[0].healthy);
    struct gs_mps_info info;
    gs_mps_sup_info(s, GPU_A, &info);
    assert_int_equal(info.pid, first.pid); /* the same daemon */
    assert_int_equal(info.restarts, 0);

    /* changed defaults are set again at the next tick, on the same daemon */
    g.pinned_mem_limit = 2ULL << 30;
    assert_int_equal(gs_mps_sup_set_gpus(s, &g, 1), 0);
    assert_int_equal(gs_mps_sup_next_due(s), 0);
    assert_int_equal(tick_for(s, 1, 200, ch, 4), 0); /* no health change */
    gs_mps_sup_info(s, GPU_A, &info);
    assert_int_equal(info.pid, first.pid);
    assert_int_equal(info.state, GS_MPS_RUNNING);
    _cleanup_free_ char *journal = read_text(f->journal);
    static const char *const lines[] = {
        GPU_A " set_default_active_thread_percentage 25", GPU_A " get_default_active_thread_percentage",
        GPU_A " set_default_active_thread_percentage 30", GPU_A " get_default_active_thread_percentage",
        GPU_A " set_default_device_pinned_mem_limit 0 2048M", NULL,
    };
    assert_lines_in_order(journal, lines);

    /* removed from the list: stopped at once */
    assert_int_equal(gs_mps_sup_set_gpus(s, NULL, 0), 0);
    assert_true(gone(first.pid));
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", f->root, GPU_A);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(gs_mps_sup_info(s, GPU_A, &info), -ENOENT);
    gs_mps_sup_free(s);
}

/* One tick, which changes no health (GPU_A was never healthy); GPU_A's state after it. */
static struct gs_mps_info tick_info(struct gs_mps_sup *s) {
    struct gs_mps_change ch[4];
    size_t n;
    assert_int_equal(gs_mps_sup_tick(s, gs_now_ns(), ch, 4, &n), 0);
    assert_int_equal(n, 0);
    struct gs_mps_info info;
    assert_int_equal(gs_mps_sup_info(s, GPU_A, &info), 0);
    return info;
}

/* The first start of GPU_A with this control binary fails: RESTARTING with the message want.
 * The supervisor is returned for more. */
static struct gs_mps_sup *fail_once(const struct fixture *f, const char *control, const char *want) {
    static const struct gs_mps_timing t = { .backoff_min_ms = 10, .backoff_max_ms = 40, .failed_after = 2 };
    struct gs_mps_sup *s = new_sup(f, control, &t);
    struct gs_mps_gpu g = gpu(GPU_A, 0, 0);
    assert_int_equal(gs_mps_sup_set_gpus(s, &g, 1), 0);
    struct gs_mps_info info = tick_info(s);
    assert_int_equal(info.state, GS_MPS_RESTARTING);
    assert_string_equal(info.error, want);
    return s;
}

/* A restarted agent that serves fewer GPUs stops the daemons of the others, and only those. */
static void test_stop_stale(void **state) {
    struct fixture *f = *state;
    struct gs_mps_sup *s = new_sup(f, FAKE_MPS_CONTROL, NULL);
    assert_int_equal(gs_mps_sup_stop_stale(s), 0); /* no root yet */
    struct gs_mps_gpu gpus[] = { gpu(GPU_A, 0, 0), gpu(GPU_B, 0, 0) };
    assert_int_equal(gs_mps_sup_set_gpus(s, gpus, 2), 0);
    struct gs_mps_change ch[4];
    assert_int_equal(tick_for(s, 2, 5000, ch, 4), 2);
    struct gs_mps_info a, b;
    gs_mps_sup_info(s, GPU_A, &a);
    gs_mps_sup_info(s, GPU_B, &b);
    gs_mps_sup_free(s);

    char other[256];
    snprintf(other, sizeof(other), "%s/not-a-gpu", f->root);
    assert_int_equal(mkdir(other, 0755), 0);
    s = new_sup(f, FAKE_MPS_CONTROL, NULL);
    assert_int_equal(gs_mps_sup_set_gpus(s, gpus, 1), 0);
    assert_int_equal(gs_mps_sup_stop_stale(s), 1);
    assert_true(gone(b.pid));
    assert_false(gone(a.pid));
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", f->root, GPU_B);
    assert_int_equal(access(path, F_OK), -1);
    snprintf(path, sizeof(path), "%s/%s", f->root, GPU_A);
    assert_int_equal(access(path, F_OK), 0);
    assert_int_equal(access(other, F_OK), 0); /* not ours */
    assert_int_equal(gs_mps_sup_stop_stale(s), 0);
    assert_int_equal(tick_for(s, 1, 5000, ch, 4), 1); /* GPU_A adopted */
    gs_mps_sup_info(s, GPU_A, &a);
    assert_int_equal(gs_mps_sup_stop_all(s), 0);
    assert_true(gone(a.pid));
    gs_mps_sup_free(s);
}

/* A control binary that cannot run, or that fails: RESTARTING with the reason, then FAILED
 * after failed_after tries, retried all the same. */
static void test_start_failures(void **state) {
    struct fixture *f = *state;
    struct gs_mps_sup *s = fail_once(f, "/nonexistent/nvidia-cuda-mps-control",
                                     "cannot run /nonexistent/nvidia-cuda-mps-control: No such file or directory");
    usleep(20000);
    struct gs_mps_info info = tick_info(s);
    assert_int_equal(info.state, GS_MPS_FAILED);
    assert_int_equal(info.restarts, 1);
    uint64_t due = gs_mps_sup_next_due(s);
    assert_true(due != UINT64_MAX && due <= gs_now_ns() + 20 * MS); /* retried */
    assert_int_equal(gs_mps_sup_stop_all(s), 0);
    gs_mps_sup_free(s);

    /* found in PATH, exits 1 */
    s = fail_once(f, "false", "false '-d' exited with status 1");
    assert_int_equal(gs_mps_sup_stop_all(s), 0);
    gs_mps_sup_free(s);
    /* not in PATH */
    s = fail_once(f, "gs-no-such-mps-control",
                  "cannot run gs-no-such-mps-control (searched in PATH): No such file or directory");
    gs_mps_sup_free(s);
}

/* A symbolic link where a daemon's directory goes is refused and left alone. */
static void test_symlink_refused(void **state) {
    struct fixture *f = *state;
    char target[128], link[256];
    snprintf(target, sizeof(target), "%s/elsewhere", f->tmp);
    assert_int_equal(mkdir(target, 0700), 0);
    assert_int_equal(mkdir(f->root, 0755), 0);
    snprintf(link, sizeof(link), "%s/%s", f->root, GPU_A);
    assert_int_equal(symlink(target, link), 0);

    char want[512];
    snprintf(want, sizeof(want), "%s is a symbolic link; refusing to use it", link);
    struct gs_mps_sup *s = fail_once(f, FAKE_MPS_CONTROL, want);
    assert_true(is_dir(target, 0700)); /* untouched: no chmod through the link */
    char inside[256];
    snprintf(inside, sizeof(inside), "%s/pipe", target);
    assert_int_equal(access(inside, F_OK), -1);
    gs_mps_sup_free(s);
}

static void test_bad_arguments(void **state) {
    struct fixture *f = *state;
    struct gs_mps_sup *s = NULL;
    struct gs_mps_opts o = { .root = "run/mps" };
    assert_int_equal(gs_mps_sup_new(&o, &s), -EINVAL);
    s = new_sup(f, FAKE_MPS_CONTROL, NULL);
    struct gs_mps_gpu g[2] = { gpu(GPU_A, 0, 0), gpu("GPU-../../etc", 0, 0) };
    assert_int_equal(gs_mps_sup_set_gpus(s, g, 2), -EINVAL);
    g[1] = gpu(GPU_A, 0, 0);
    assert_int_equal(gs_mps_sup_set_gpus(s, g, 2), -EINVAL); /* twice */
    g[1] = gpu(GPU_B, 101, 0);
    assert_int_equal(gs_mps_sup_set_gpus(s, g, 2), -EINVAL);
    assert_int_equal(gs_mps_sup_state(s, GPU_A), GS_MPS_STOPPED); /* nothing changed */
    assert_int_equal(gs_mps_sup_next_due(s), UINT64_MAX);
    gs_mps_sup_free(s);
    /* the control socket's path would not fit */
    char root[128];
    memset(root, 'r', sizeof(root) - 1);
    root[0] = '/';
    root[sizeof(root) - 1] = '\0';
    o.root = root;
    assert_int_equal(gs_mps_sup_new(&o, &s), 0);
    assert_int_equal(gs_mps_sup_set_gpus(s, g, 1), -ENAMETOOLONG);
    gs_mps_sup_free(s);
    gs_mps_sup_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_state_names),
        cmocka_unit_test(test_timing_defaults),
        cmocka_unit_test(test_backoff),
        cmocka_unit_test(test_fsm),
        cmocka_unit_test(test_uuid_valid),
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_commands),
        cmocka_unit_test(test_parse_percentage),
        cmocka_unit_test(test_parse_pid),
        cmocka_unit_test(test_resolve_limits),
        cmocka_unit_test_setup_teardown(test_supervise_kill_restart_stop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_adopt_change_remove, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_stale, setup, teardown),
        cmocka_unit_test_setup_teardown(test_start_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_symlink_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_arguments, setup, teardown),
    };
    return cmocka_run_group_tests_name("mps", tests, NULL, NULL);
}
