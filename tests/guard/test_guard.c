/* test_guard.c: the guard's test suite. Each test runs guard_app as child processes under
 * LD_PRELOAD=libgpuslice-guard.so, with the simulated driver (fake_cuda.c) as libcuda.so.1, a
 * limits file written by the test (GPUSLICE_GUARD_CONFIG) and its own counters region, both in a
 * fresh temporary directory. guard_app prints `key=value` lines; ground truth comes from the fake
 * driver's counters (fakeCuda*) and from the region file (guard/guard_region.h), which is the guard's
 * documented interface.
 *
 * Paths: GUARD_LIB, GUARD_APP, FAKE_CUDA_DIR from the environment (meson sets them), else the
 * build paths compiled in. A guard library that is missing fails the suite (the build always
 * makes it, so a missing one is a broken build); sanitizer builds exit 77 (skipped, see main)
 * unless GUARD_TEST_UNDER_SANITIZER=1. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "guard/guard_region.h"
#include "tests/guard/fake_shared.h"
#include "tests/guard/fake_timeslice.h"

#define MIB (1ULL << 20)
#define FAKE_TOTAL (16384ULL * MIB) /* the fake driver's default capacity */
#define OOM 2
#define TIMEOUT_MS 20000

static const char *guard_lib, *guard_app, *fake_dir, *faults_lib, *dlopen_app, *mounted_conf;
static const char *preload_lib; /* what make_env preloads: guard_lib unless a test says otherwise */

/* ---- fixture: a temporary directory with the limits file and the region ---------------------- */

struct fx {
    char dir[64];
    char limits[128];
    char region[128];
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    snprintf(f->dir, sizeof(f->dir), "/tmp/gs-guard-test-XXXXXX");
    if (!mkdtemp(f->dir)) {
        free(f);
        return -1;
    }
    snprintf(f->limits, sizeof(f->limits), "%s/limits", f->dir);
    snprintf(f->region, sizeof(f->region), "%s/region", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    preload_lib = NULL;
    unlink(mounted_conf);
    char shared[160];
    snprintf(shared, sizeof(shared), "%s/shared", f->dir);
    unlink(shared);
    unlink(f->limits);
    unlink(f->region);
    static const char *const share_files[] = { "gpu", "limits2", "region2" };
    for (size_t i = 0; i < sizeof(share_files) / sizeof(share_files[0]); i++) {
        char p[160];
        snprintf(p, sizeof(p), "%s/%s", f->dir, share_files[i]);
        unlink(p);
    }
    rmdir(f->dir);
    free(f);
    return 0;
}

static void write_file(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void write_file(const char *path, const char *fmt, ...)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(fp, fmt, ap);
    va_end(ap);
    assert_int_equal(fclose(fp), 0);
}

/* The usual limits: fail closed, one quota on device 0. */
static void limits(struct fx *f, unsigned long long quota)
{
    write_file(f->limits, "gpuslice-guard 1\non-error closed\nregion %s\ndevice 0 - %llu 0\n", f->region, quota);
}

/* ---- running guard_app ----------------------------------------------------------------------- */

struct child {
    pid_t pid;
    int in_fd, out_fd, err_fd;
    char out[1 << 16], err[1 << 16];
    size_t out_len, err_len;
    int status;
    bool exited;
};

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Environment: the guard, the fake driver, the test's limits and region, sanitizer options, plus
 * `extra` (NAME=VALUE entries; "NAME=" with nothing after removes NAME). */
static char **make_env(const struct fx *f, const char *const *extra)
{
    static char buf[16][1024];
    static char *env[24];
    int n = 0;
    snprintf(buf[n], sizeof(buf[n]), "PATH=/usr/bin:/bin");
    snprintf(buf[++n], sizeof(buf[n]), "LD_PRELOAD=%s", preload_lib ? preload_lib : guard_lib);
    snprintf(buf[++n], sizeof(buf[n]), "LD_LIBRARY_PATH=%s", fake_dir);
    snprintf(buf[++n], sizeof(buf[n]), "GPUSLICE_GUARD_CONFIG=%s", f->limits);
    snprintf(buf[++n], sizeof(buf[n]), "GUARD_APP_REGION=%s", f->region);
    const char *asan = getenv("ASAN_OPTIONS");
    /* A preloaded library comes before the sanitizer runtime in the link order. */
    snprintf(buf[++n], sizeof(buf[n]), "ASAN_OPTIONS=%s%sverify_asan_link_order=0", asan ? asan : "",
             asan && *asan ? ":" : "");
    const char *ubsan = getenv("UBSAN_OPTIONS");
    snprintf(buf[++n], sizeof(buf[n]), "UBSAN_OPTIONS=%s", ubsan ? ubsan : "");
    n++;
    for (int i = 0; extra && extra[i] && n < 15; i++) {
        const char *eq = strchr(extra[i], '=');
        size_t klen = eq ? (size_t)(eq - extra[i]) + 1 : strlen(extra[i]);
        int j;
        for (j = 0; j < n; j++)
            if (!strncmp(buf[j], extra[i], klen))
                break;
        snprintf(buf[j], sizeof(buf[j]), "%s", extra[i]);
        if (j == n)
            n++;
    }
    int k = 0;
    for (int i = 0; i < n; i++)
        if (buf[i][strlen(buf[i]) - 1] != '=' || !strncmp(buf[i], "UBSAN_OPTIONS=", 14))
            env[k++] = buf[i];
    env[k] = NULL;
    return env;
}

static void spawn(struct child *c, const struct fx *f, const char *const *extra, const char *const *args)
{
    int in[2], out[2], err[2];
    assert_int_equal(pipe2(in, O_CLOEXEC), 0);
    assert_int_equal(pipe2(out, O_CLOEXEC), 0);
    assert_int_equal(pipe2(err, O_CLOEXEC), 0);
    char *argv[16];
    int n = 0;
    const char *prog = args[0] && args[0][0] == '/' ? *args++ : guard_app; /* another program */
    argv[n++] = (char *)prog;
    for (int i = 0; args[i] && n < 15; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    char **env = make_env(f, extra);
    memset(c, 0, sizeof(*c));
    c->pid = fork();
    assert_true(c->pid >= 0);
    if (c->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        dup2(err[1], 2);
        execve(prog, argv, env);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    close(err[1]);
    c->in_fd = in[1];
    c->out_fd = out[0];
    c->err_fd = err[0];
}

/* Reads what the child wrote, for at most `ms`; returns false on EOF of both streams. */
static bool pump(struct child *c, int ms)
{
    struct pollfd p[2] = { { .fd = c->out_fd, .events = POLLIN }, { .fd = c->err_fd, .events = POLLIN } };
    if (c->out_fd < 0 && c->err_fd < 0)
        return false;
    if (poll(p, 2, ms) <= 0)
        return true;
    for (int i = 0; i < 2; i++) {
        int *fd = i ? &c->err_fd : &c->out_fd;
        char *buf = i ? c->err : c->out;
        size_t *len = i ? &c->err_len : &c->out_len;
        if (*fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        size_t room = sizeof(c->out) - 1 - *len;
        char scratch[4096];
        ssize_t r = read(*fd, room ? buf + *len : scratch, room ? room : sizeof(scratch));
        if (r > 0 && room) {
            *len += (size_t)r;
            buf[*len] = '\0';
        } else if (r == 0 || (r < 0 && errno != EINTR)) {
            close(*fd);
            *fd = -1;
        }
    }
    return true;
}

static void dump(const struct child *c)
{
    fprintf(stderr, "---- guard_app stdout ----\n%s---- guard_app stderr ----\n%s--------\n", c->out, c->err);
}

/* The value of the line `key=...` in the child's output, or LLONG_MIN. */
static long long value_of(const struct child *c, const char *key)
{
    size_t kl = strlen(key);
    for (const char *p = c->out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, key, kl) && p[kl] == '=')
            return strtoll(p + kl + 1, NULL, 0);
    return LLONG_MIN;
}

static const char *string_of(const struct child *c, const char *key, char *buf, size_t len)
{
    size_t kl = strlen(key);
    for (const char *p = c->out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, key, kl) && p[kl] == '=') {
            size_t n = strcspn(p + kl + 1, "\n");
            snprintf(buf, len, "%.*s", (int)(n < len ? n : len - 1), p + kl + 1);
            return buf;
        }
    return NULL;
}

/* Waits until the child printed `key=`; fails the test after TIMEOUT_MS. */
static void wait_key(struct child *c, const char *key)
{
    long long end = now_ms() + TIMEOUT_MS;
    while (value_of(c, key) == LLONG_MIN) {
        if (now_ms() > end || !pump(c, 100)) {
            dump(c);
            fail_msg("guard_app did not print %s", key);
        }
    }
}

/* Closes the child's stdin, collects its output and waits for it (killed after TIMEOUT_MS). */
static void finish(struct child *c)
{
    if (c->in_fd >= 0) {
        close(c->in_fd);
        c->in_fd = -1;
    }
    long long end = now_ms() + TIMEOUT_MS;
    while (pump(c, 100) && now_ms() < end)
        ;
    for (;;) {
        pid_t r = waitpid(c->pid, &c->status, WNOHANG);
        if (r == c->pid)
            break;
        if (now_ms() > end) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &c->status, 0);
            dump(c);
            fail_msg("guard_app timed out");
        }
        struct timespec ts = { 0, 5000000 };
        nanosleep(&ts, NULL);
    }
    if (c->out_fd >= 0)
        close(c->out_fd);
    if (c->err_fd >= 0)
        close(c->err_fd);
    c->out_fd = c->err_fd = -1;
    c->exited = true;
    if (!WIFEXITED(c->status) || WEXITSTATUS(c->status) != 0) {
        dump(c);
        fail_msg("guard_app exited with status 0x%x", c->status);
    }
}

/* Runs guard_app to completion: run(c, f, extra_env, "mode", "arg", ..., NULL). */
static struct child *run_env(struct fx *f, const char *const *extra, ...)
{
    static struct child c;
    const char *args[16];
    int n = 0;
    va_list ap;
    va_start(ap, extra);
    for (const char *a; n < 15 && (a = va_arg(ap, const char *));)
        args[n++] = a;
    va_end(ap);
    args[n] = NULL;
    spawn(&c, f, extra, args);
    finish(&c);
    return &c;
}

#define run(f, ...) run_env(f, NULL, __VA_ARGS__, (const char *)NULL)

static void expect_eq(const struct child *c, const char *key, long long want)
{
    long long v = value_of(c, key);
    if (v != want) {
        dump(c);
        if (v == LLONG_MIN)
            fail_msg("%s missing, expected %lld", key, want);
        fail_msg("%s = %lld, expected %lld", key, v, want);
    }
}

static void expect_ge(const struct child *c, const char *key, long long low)
{
    long long v = value_of(c, key);
    if (v == LLONG_MIN || v < low) {
        dump(c);
        fail_msg("%s = %lld, expected at least %lld", key, v, low);
    }
}

static void expect_ne(const struct child *c, const char *key, long long bad)
{
    long long v = value_of(c, key);
    if (v == LLONG_MIN || v == bad) {
        dump(c);
        fail_msg("%s = %lld, expected anything else", key, v);
    }
}

static const char *keyf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *keyf(const char *fmt, ...)
{
    static char k[8][128];
    static int i;
    i = (i + 1) % 8;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k[i], sizeof(k[i]), fmt, ap);
    va_end(ap);
    return k[i];
}

/* ---- the region, read by the test ----------------------------------------------------------- */

static struct gs_guard_region *map_region(const struct fx *f, bool writable)
{
    int fd = open(f->region, (writable ? O_RDWR | O_CREAT : O_RDONLY) | O_CLOEXEC, 0600);
    if (fd < 0)
        return NULL;
    if (writable && ftruncate(fd, sizeof(struct gs_guard_region)) < 0) {
        close(fd);
        return NULL;
    }
    void *p = mmap(NULL, sizeof(struct gs_guard_region), PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

static uint64_t region_used(const struct fx *f, int dev)
{
    struct gs_guard_region *r = map_region(f, false);
    assert_non_null(r);
    assert_int_equal(r->magic, GS_GUARD_REGION_MAGIC);
    uint64_t u = atomic_load(&r->dev[dev].used);
    munmap(r, sizeof(*r));
    return u;
}

/* ---- every allocation path counted and freed --------------------------------------------------- */

static const char *const alloc_steps[] = { "alloc", "pitch", "managed", "create", "async", "pool", "array",
                                           "array3d", "mipmap" };
/* Steps whose size the guard can know exactly (the array sizes are the driver's business). */
static const bool exact_size[] = { true, true, true, true, true, true, false, false, false };

static void test_all_paths_counted(void **state)
{
    struct fx *f = *state;
    limits(f, 1024 * MIB);
    struct child *c = run(f, "alloc-all-paths", "4M");
    expect_eq(c, "start_guard_used", 0);
    for (size_t i = 0; i < sizeof(alloc_steps) / sizeof(alloc_steps[0]); i++) {
        const char *s = alloc_steps[i];
        expect_eq(c, keyf("%s.res", s), 0);
        long long fake = value_of(c, keyf("%s.fake", s));
        assert_true(fake > 0);
        if (exact_size[i])
            expect_eq(c, keyf("%s.guard", s), fake);
        else
            expect_ge(c, keyf("%s.guard", s), fake); /* never undercounted */
        expect_eq(c, keyf("%s.region", s), value_of(c, keyf("%s.guard", s)));
        expect_eq(c, keyf("free_%s.res", s), 0);
        expect_eq(c, keyf("free_%s.guard", s), -value_of(c, keyf("%s.guard", s)));
        expect_eq(c, keyf("free_%s.fake", s), -fake);
    }
    expect_eq(c, "after_fake_used", 0);
    expect_eq(c, "after_guard_used", 0);
    expect_eq(c, "after_region_used", 0);
    expect_eq(c, "unknown_frees", 0);
    assert_int_equal(region_used(f, 0), 0);
}

/* ---- over the quota: OUT_OF_MEMORY and nothing allocated --------------------------------------- */

static void test_quota_exceeded(void **state)
{
    struct fx *f = *state;
    limits(f, 64 * MIB);
    struct child *c = run(f, "alloc", "48M", "2");
    expect_eq(c, "ok", 1);
    expect_eq(c, "first_err", OOM);
    expect_eq(c, "held_fake_used", 48 * MIB);
    expect_eq(c, "held_region_used", 48 * MIB);
    expect_eq(c, "after_region_used", 0);

    c = run(f, "alloc", "65M", "1");
    expect_eq(c, "ok", 0);
    expect_eq(c, "first_err", OOM);
    expect_eq(c, "held_fake_used", 0);

    /* Exactly the quota fits. */
    c = run(f, "alloc", "16M", "5");
    expect_eq(c, "ok", 4);
    expect_eq(c, "first_err", OOM);
    expect_eq(c, "held_fake_used", 64 * MIB);
}

/* Every path refuses over the quota and allocates nothing. */
static void test_quota_exceeded_all_paths(void **state)
{
    struct fx *f = *state;
    limits(f, 1 * MIB);
    struct child *c = run(f, "alloc-all-paths", "4M");
    for (size_t i = 0; i < sizeof(alloc_steps) / sizeof(alloc_steps[0]); i++) {
        expect_eq(c, keyf("%s.res", alloc_steps[i]), OOM);
        expect_eq(c, keyf("%s.fake", alloc_steps[i]), 0);
        expect_eq(c, keyf("%s.region", alloc_steps[i]), 0);
    }
    expect_eq(c, "after_region_used", 0);
}

/* A reservation is rolled back when the driver's allocation fails. */
static void test_rollback_on_driver_failure(void **state)
{
    struct fx *f = *state;
    limits(f, 64 * MIB);
    static const char *const env[] = { "FAKE_CUDA_FAIL_ALLOC=1", NULL };
    struct child *c = run_env(f, env, "alloc-all-paths", "1M", (const char *)NULL);
    for (size_t i = 0; i < sizeof(alloc_steps) / sizeof(alloc_steps[0]); i++) {
        expect_eq(c, keyf("%s.res", alloc_steps[i]), OOM);
        expect_eq(c, keyf("%s.guard", alloc_steps[i]), 0);
        expect_eq(c, keyf("%s.region", alloc_steps[i]), 0);
    }
    assert_int_equal(region_used(f, 0), 0);
}

/* ---- 16 processes x 8 threads racing ------------------------------------------------------------- */

#define RACE_PROCS 16

static void test_race_never_exceeds(void **state)
{
    struct fx *f = *state;
    const unsigned long long quota = 64 * MIB;
    limits(f, quota);
    static struct child kids[RACE_PROCS];
    static const char *const args[] = { "race", "8", "8", "1M", "gate", NULL };
    for (int i = 0; i < RACE_PROCS; i++)
        spawn(&kids[i], f, NULL, args);
    for (int i = 0; i < RACE_PROCS; i++)
        wait_key(&kids[i], "ready");
    for (int i = 0; i < RACE_PROCS; i++)
        assert_int_equal(write(kids[i].in_fd, "g", 1), 1);
    long long ok = 0, bytes = 0, fake = 0, other = 0;
    for (int i = 0; i < RACE_PROCS; i++) {
        wait_key(&kids[i], "done");
        ok += value_of(&kids[i], "ok");
        bytes += value_of(&kids[i], "bytes");
        fake += value_of(&kids[i], "held_fake_used");
        other += value_of(&kids[i], "other_err");
    }
    /* Every process holds its allocations now. */
    struct gs_guard_region *r = map_region(f, false);
    assert_non_null(r);
    uint64_t held = atomic_load(&r->dev[0].used), peak = atomic_load(&r->dev[0].peak);
    munmap(r, sizeof(*r));
    for (int i = 0; i < RACE_PROCS; i++)
        finish(&kids[i]);
    fprintf(stderr, "race: %lld allocations of 1 MiB succeeded, quota 64 MiB, region used %llu peak %llu\n", ok,
            (unsigned long long)held, (unsigned long long)peak);
    assert_int_equal(other, 0);
    assert_true((unsigned long long)bytes <= quota);
    assert_true((unsigned long long)fake <= quota);
    assert_int_equal(fake, bytes);
    assert_true(held <= quota);
    assert_true(peak <= quota);
    assert_int_equal(held, (uint64_t)bytes);
    /* Demand was 16x the quota: a reservation protocol without false refusals fills it. */
    assert_int_equal((unsigned long long)bytes, quota);
    for (int i = 0; i < RACE_PROCS; i++)
        expect_eq(&kids[i], "free_err", 0);
    assert_int_equal(region_used(f, 0), 0);
}

/* ---- dead processes ------------------------------------------------------------------------------- */

static void sigkill_reclaim(struct fx *f, bool reap)
{
    limits(f, 64 * MIB);
    struct child holder;
    static const char *const args[] = { "hold", "64M", "60", NULL };
    spawn(&holder, f, NULL, args);
    wait_key(&holder, "holding");
    expect_eq(&holder, "res", 0);
    assert_int_equal(region_used(f, 0), 64 * MIB);

    struct child *c = run(f, "alloc", "1M", "1");
    expect_eq(c, "first_err", OOM); /* the holder's bytes count */

    kill(holder.pid, SIGKILL);
    if (reap) {
        int st;
        waitpid(holder.pid, &st, 0);
    } else {
        struct timespec ts = { 0, 50000000 };
        nanosleep(&ts, NULL); /* dead, but a zombie until reaped */
    }
    c = run(f, "alloc", "64M", "1");
    expect_eq(c, "ok", 1);
    expect_eq(c, "after_region_used", 0);
    if (!reap) {
        int st;
        waitpid(holder.pid, &st, 0);
    }
    close(holder.in_fd);
    close(holder.out_fd);
    close(holder.err_fd);
}

static void test_sigkill_reclaimed(void **state)
{
    sigkill_reclaim(*state, true);
}

/* A killed process whose parent has not reaped it yet (a zombie) holds no GPU memory either. */
static void test_sigkill_zombie_reclaimed(void **state)
{
    sigkill_reclaim(*state, false);
}

/* A region left by 1024 processes that all died: the slots and their bytes come back. */
static void test_stale_region_reclaimed(void **state)
{
    struct fx *f = *state;
    limits(f, 64 * MIB);
    struct gs_guard_region *r = map_region(f, true);
    assert_non_null(r);
    r->version = GS_GUARD_REGION_VERSION;
    r->size = sizeof(*r);
    r->n_devices = GS_GUARD_MAX_DEVICES;
    r->magic = GS_GUARD_REGION_MAGIC;
    long pid_max = 4194304;
    FILE *fp = fopen("/proc/sys/kernel/pid_max", "r");
    if (fp) {
        if (fscanf(fp, "%ld", &pid_max) != 1)
            pid_max = 4194304;
        fclose(fp);
    }
    for (int i = 0; i < GS_GUARD_MAX_PROCS; i++) {
        atomic_store(&r->procs[i].pid, (int32_t)(pid_max + 1 + i)); /* no such process */
        atomic_store(&r->procs[i].start_time, 12345);
        atomic_store(&r->procs[i].used[0], MIB);
    }
    atomic_store(&r->dev[0].used, GS_GUARD_MAX_PROCS * MIB);
    munmap(r, sizeof(*r));
    struct child *c = run(f, "alloc", "32M", "1");
    expect_eq(c, "ok", 1);
    expect_eq(c, "after_region_used", 0);
    assert_int_equal(region_used(f, 0), 0);
}

/* ---- frees the guard did not see ----------------------------------------------------------------- */

static void test_unknown_free_forwarded(void **state)
{
    struct fx *f = *state;
    limits(f, 64 * MIB);
    struct child *c = run(f, "free-unknown");
    expect_eq(c, "unknown.res", 1); /* the driver's CUDA_ERROR_INVALID_VALUE */
    expect_eq(c, "unknown.fake_unknown_frees", 1);
    expect_eq(c, "unknown.guard_delta", 0);
    expect_eq(c, "untracked.alloc", 0);
    expect_eq(c, "untracked.res", 0); /* the driver freed it */
    expect_eq(c, "untracked.fake_frees", 1);
    expect_eq(c, "untracked.fake_used_after", 0);
    expect_eq(c, "untracked.guard_delta", 0);
    expect_eq(c, "release.res", 1);
    expect_eq(c, "freeasync.res", 1);
    expect_eq(c, "arraydestroy.res", 400);
    expect_eq(c, "mipmapdestroy.res", 400);
    expect_eq(c, "others.fake_unknown_frees", 4);
    expect_eq(c, "free_le_total", 1);
    expect_eq(c, "after_region_used", 0);
}

/* ---- cuGetProcAddress / _v2 ---------------------------------------------------------------------- */

static void check_procaddr(struct fx *f, const char *mode, const char *ver, const char *flags)
{
    struct child *c = run(f, mode, ver, flags);
    bool v2 = !strcmp(mode, "procaddr2");
    char na[128], nl[128];
    fprintf(stderr, "%s %s %s: cuMemAlloc -> %s, cuLaunchKernel -> %s\n", mode, ver, flags,
            string_of(c, "cuMemAlloc.name", na, sizeof(na)), string_of(c, "cuLaunchKernel.name", nl, sizeof(nl)));
    static const char *const found[] = { "cuMemAlloc", "cuMemAllocAsync", "cuLaunchKernel", "cuMemGetInfo",
                                         "cuGetProcAddress", "cuDeviceGetCount", "cuStreamSynchronize" };
    for (size_t i = 0; i < sizeof(found) / sizeof(found[0]); i++) {
        expect_eq(c, keyf("%s.res", found[i]), 0);
        expect_eq(c, keyf("%s.null", found[i]), 0);
        expect_eq(c, keyf("%s.status", found[i]), v2 ? 0 : -1);
    }
    /* Hooked: a wrapper, which counts, and runs the driver function of the requested ABI. */
    expect_eq(c, "cuMemAlloc.driver", 0);
    expect_eq(c, "cuMemAlloc.call.res", 0);
    expect_eq(c, "cuMemAlloc.call.ran", 1);
    expect_eq(c, "cuMemAlloc.call.guard", MIB);
    expect_eq(c, "cuMemAlloc.call.region", MIB);
    expect_eq(c, "cuMemAllocAsync.driver", 0);
    expect_eq(c, "cuMemAllocAsync.call.res", 0);
    expect_eq(c, "cuMemAllocAsync.call.ran", 1);
    expect_eq(c, "cuMemAllocAsync.call.region", MIB);
    expect_eq(c, "cuLaunchKernel.call.res", 0);
    expect_eq(c, "cuLaunchKernel.call.ran", 1);
    expect_eq(c, "cuLaunchKernel.call.launches", 1);
    /* cuLaunchCooperativeKernel (9.0) and cuGraphLaunch (10.0): older than every version here. */
    static const char *const launches[] = { "cuLaunchCooperativeKernel", "cuGraphLaunch" };
    for (size_t i = 0; i < sizeof(launches) / sizeof(launches[0]); i++) {
        expect_eq(c, keyf("%s.res", launches[i]), 0);
        expect_eq(c, keyf("%s.driver", launches[i]), 0);
        expect_eq(c, keyf("%s.call.res", launches[i]), 0);
        expect_eq(c, keyf("%s.call.ran", launches[i]), 1);
    }
    if (atoi(ver) >= 11060) { /* cuLaunchKernelEx appeared in CUDA 11.6's driver API */
        expect_eq(c, "cuLaunchKernelEx.res", 0);
        expect_eq(c, "cuLaunchKernelEx.driver", 0);
        expect_eq(c, "cuLaunchKernelEx.call.res", 0);
        expect_eq(c, "cuLaunchKernelEx.call.ran", 1);
        expect_eq(c, "cuLaunchKernelEx.call.launches", 1);
    } else {
        expect_eq(c, "cuLaunchKernelEx.res", 500);
        expect_eq(c, "cuLaunchKernelEx.null", 1);
    }
    expect_eq(c, "cuMemGetInfo.driver", 0);
    expect_eq(c, "cuMemGetInfo.call.res", 0);
    expect_eq(c, "cuMemGetInfo.call.total", 64 * MIB);
    expect_eq(c, "cuGetProcAddress.driver", 0);
    expect_eq(c, "cuGetProcAddress.inner.res", 0);
    expect_eq(c, "cuGetProcAddress.inner.driver", 0);
    expect_eq(c, "cuGetProcAddress.inner.call.region", MIB);
    /* Not hooked: the driver's own function. */
    expect_eq(c, "cuDeviceGetCount.driver", 1);
    expect_eq(c, "cuStreamSynchronize.driver", 1);
    /* Unknown: untouched. */
    expect_eq(c, "gsNoSuchFunction.res", 500);
    expect_eq(c, "gsNoSuchFunction.null", 1);
    expect_eq(c, "gsNoSuchFunction.status", v2 ? 1 : -1);
}

static void test_procaddr_versions(void **state)
{
    struct fx *f = *state;
    limits(f, 64 * MIB);
    static const char *const modes[] = { "procaddr", "procaddr2" };
    static const char *const vers[] = { "11030", "12000", "12080" };
    static const char *const flags[] = { "0", "1", "2" }; /* default, legacy stream, per-thread stream */
    for (int m = 0; m < 2; m++)
        for (int v = 0; v < 3; v++)
            for (int fl = 0; fl < 3; fl++)
                check_procaddr(f, modes[m], vers[v], flags[fl]);
    assert_int_equal(region_used(f, 0), 0);
}

/* Older ABIs than the wrappers' pass through; symbols too new for the caller are refused. */
static void test_procaddr_old_abi(void **state)
{
    struct fx *f = *state;
    limits(f, 64 * MIB);
    struct child *c = run(f, "procaddr2", "3000", "0");
    expect_eq(c, "cuMemAlloc.res", 0);
    expect_eq(c, "cuMemAlloc.driver", 1); /* the 32-bit cuMemAlloc */
    expect_eq(c, "cuMemAlloc.call.ran", 1);
    expect_eq(c, "cuMemAlloc.call.res", 801);
    expect_eq(c, "cuMemGetInfo.driver", 1);
    expect_eq(c, "cuMemAllocAsync.res", 500);
    expect_eq(c, "cuMemAllocAsync.status", 2);
    expect_eq(c, "cuMemAllocAsync.null", 1);
    expect_eq(c, "cuGetProcAddress.res", 500);
    expect_eq(c, "cuGetProcAddress.status", 2);
    expect_eq(c, "cuLaunchKernel.res", 500);
    expect_eq(c, "cuLaunchKernel.status", 2);

    /* CUDA 10: cuDevicePrimaryCtxRelease is the v1 ABI, cuMemAllocAsync does not exist yet. */
    c = run(f, "procaddr2", "10000", "0");
    expect_eq(c, "cuDevicePrimaryCtxRelease.res", 0);
    expect_eq(c, "cuDevicePrimaryCtxRelease.driver", 1);
    expect_eq(c, "cuMemAlloc.driver", 0);
    expect_eq(c, "cuMemAlloc.call.region", MIB);
    expect_eq(c, "cuMemAllocAsync.status", 2);

    /* cuGetProcAddress itself appeared in 11.3; _v2 in 12.0. */
    c = run(f, "procaddr", "11020", "0");
    expect_eq(c, "cuGetProcAddress.res", 500);
    expect_eq(c, "cuMemAllocAsync.res", 0);
    expect_eq(c, "cuMemAllocAsync.driver", 0);
}

/* The per-thread variant exists only since CUDA 7.0: before that the driver hands out the legacy
 * cuLaunchKernel even with the per-thread flag, and the wrapper must call that one. */
static void test_procaddr_ptsz_before_7(void **state)
{
    struct fx *f = *state;
    limits(f, 64 * MIB);
    struct child *c = run(f, "procaddr2", "6050", "2");
    expect_eq(c, "cuLaunchKernel.res", 0);
    expect_eq(c, "cuLaunchKernel.call.ran", 1);
}

/* ---- dlsym ----------------------------------------------------------------------------------------- */

static void test_dlsym_wrappers(void **state)
{
    struct fx *f = *state;
    limits(f, 64 * MIB);
    struct child *c = run(f, "dlsym", "cuMemAlloc_v2");
    expect_eq(c, "dlopen", 1);
    expect_eq(c, "null", 0);
    expect_eq(c, "driver", 0);
    expect_eq(c, "default", 1);
    expect_eq(c, "call.res", 0);
    expect_eq(c, "call.ran", 1);
    expect_eq(c, "call.guard", MIB);
    expect_eq(c, "call.region", MIB);
    expect_eq(c, "second_handle_same", 1);

    static const char *const wrapped[] = { "cuMemFree_v2",
                                           "cuMemAllocAsync",
                                           "cuMemAllocAsync_ptsz",
                                           "cuLaunchKernel_ptsz",
                                           "cuLaunchKernelEx",
                                           "cuLaunchKernelEx_ptsz",
                                           "cuLaunchCooperativeKernel",
                                           "cuLaunchCooperativeKernel_ptsz",
                                           "cuGraphLaunch",
                                           "cuGraphLaunch_ptsz",
                                           "cuGetProcAddress",
                                           "cuGetProcAddress_v2",
                                           "cuMemGetInfo_v2",
                                           "cuArrayCreate_v2",
                                           "cuMemCreate" };
    for (size_t i = 0; i < sizeof(wrapped) / sizeof(wrapped[0]); i++) {
        c = run(f, "dlsym", wrapped[i]);
        if (value_of(c, "driver") != 0 || value_of(c, "null") != 0) {
            dump(c);
            fail_msg("dlsym(libcuda, %s) is not the guard's wrapper", wrapped[i]);
        }
    }
    /* Old ABIs and functions the guard does not wrap: the driver's own. */
    static const char *const plain[] = { "cuMemAlloc", "cuMemGetInfo", "cuDeviceGetCount", "cuCtxGetDevice",
                                         "cuDevicePrimaryCtxRelease" };
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
        c = run(f, "dlsym", plain[i]);
        if (value_of(c, "driver") != 1) {
            dump(c);
            fail_msg("dlsym(libcuda, %s) is not the driver's function", plain[i]);
        }
    }
    c = run(f, "dlsym", "gsNoSuchFunction");
    expect_eq(c, "null", 1);
}

/* dlsym(RTLD_NEXT, ...) means "after the caller": the guard's dlsym must not make it "after the
 * guard". From the program, the next execve after the executable is the guard's own. */
static void test_dlsym_rtld_next(void **state)
{
    struct fx *f = *state;
    limits(f, 64 * MIB);
    struct child *c = run(f, "dlsym", "cuDeviceGetCount");
    expect_eq(c, "rtld_next_execve_is_default", 1);
}

/* ---- children with an empty environment keep their limits -------------------------------------- */

static void env_i(struct fx *f, const char *how)
{
    limits(f, 64 * MIB);
    /* Positive control: the child runs, sees the quota and can allocate under it (its
     * environment has no GUARD_APP_REGION, so the test reads the region itself). */
    struct child *c = run(f, "exec-env-i", "32M", how);
    expect_eq(c, "ok", 1);
    expect_eq(c, "held_fake_used", 32 * MIB);
    expect_eq(c, "held_total", 64 * MIB);
    expect_eq(c, "held_guard_used", 32 * MIB);
    assert_int_equal(region_used(f, 0), 0);
    /* Over the quota: refused, because the child is still guarded. */
    c = run(f, "exec-env-i", "100M", how);
    expect_eq(c, "ok", 0);
    expect_eq(c, "first_err", OOM);
    expect_eq(c, "held_fake_used", 0);
}

static void test_env_i_execve(void **state)
{
    env_i(*state, "execve");
}

static void test_env_i_program(void **state)
{
    env_i(*state, "env");
}

static void test_env_i_execvpe(void **state)
{
    env_i(*state, "execvpe");
}

static void test_env_i_clearenv(void **state)
{
    env_i(*state, "clearenv");
}

static void test_env_i_posix_spawn(void **state)
{
    env_i(*state, "posix_spawn");
}

static void test_env_i_execle(void **state)
{
    env_i(*state, "execle");
}

/* ---- what the workload sees ------------------------------------------------------------------------- */

static void test_meminfo_reports_quota(void **state)
{
    struct fx *f = *state;
    limits(f, 256 * MIB);
    struct child *c = run(f, "meminfo", "100M");
    expect_eq(c, "pre_alloc", 0);
    expect_eq(c, "meminfo_res", 0);
    expect_eq(c, "total", 256 * MIB);
    expect_eq(c, "free", 156 * MIB);
    expect_eq(c, "devtotal", 256 * MIB);
    expect_eq(c, "totalmem_res", 0);
    expect_eq(c, "meminfo_null_res", 1);

    /* A quota above the device's memory: the device's. */
    limits(f, 2 * FAKE_TOTAL);
    c = run(f, "meminfo");
    expect_eq(c, "total", FAKE_TOTAL);
    expect_eq(c, "devtotal", FAKE_TOTAL);
    expect_eq(c, "free", FAKE_TOTAL);

    /* No limit on the device: the driver's figures. */
    limits(f, 0);
    c = run(f, "meminfo", "1M");
    expect_eq(c, "total", FAKE_TOTAL);
    expect_eq(c, "free", FAKE_TOTAL - MIB);
}

/* Use above the quota (e.g. counted by another path): free is 0, never negative or wrapped. */
static void test_meminfo_over_quota(void **state)
{
    struct fx *f = *state;
    limits(f, 256 * MIB);
    struct gs_guard_region *r = map_region(f, true);
    assert_non_null(r);
    r->version = GS_GUARD_REGION_VERSION;
    r->size = sizeof(*r);
    r->n_devices = GS_GUARD_MAX_DEVICES;
    r->magic = GS_GUARD_REGION_MAGIC;
    /* Charged to this (live) test process. */
    atomic_store(&r->procs[0].pid, (int32_t)getpid());
    atomic_store(&r->procs[0].used[0], 512 * MIB);
    atomic_store(&r->dev[0].used, 512 * MIB);
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)getpid());
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    assert_non_null(p);
    unsigned field = 2;
    for (p++; *p && field < 22; p++)
        if (*p == ' ')
            field++;
    atomic_store(&r->procs[0].start_time, strtoull(p, NULL, 10));
    struct child *c = run(f, "meminfo");
    expect_eq(c, "total", 256 * MIB);
    expect_eq(c, "free", 0);
    expect_eq(c, "free_le_total", 1);
    c = run(f, "alloc", "1M", "1");
    expect_eq(c, "first_err", OOM);
    atomic_store(&r->procs[0].pid, 0);
    munmap(r, sizeof(*r));
}

static void test_multi_device(void **state)
{
    struct fx *f = *state;
    write_file(f->limits, "gpuslice-guard 1\non-error closed\nregion %s\ndevice 0 - %llu 0\ndevice 1 - %llu 0\n",
               f->region, 64 * MIB, 32 * MIB);
    static const char *const dev1[] = { "GUARD_APP_DEVICE=1", NULL };
    struct child *c = run_env(f, dev1, "alloc", "48M", "1", (const char *)NULL);
    expect_eq(c, "ok", 0);
    expect_eq(c, "first_err", OOM);
    c = run_env(f, dev1, "meminfo", (const char *)NULL);
    expect_eq(c, "total", 32 * MIB);
    expect_eq(c, "devtotal", 32 * MIB);
    c = run_env(f, dev1, "alloc-all-paths", "1M", (const char *)NULL);
    expect_eq(c, "create.res", 0);
    expect_eq(c, "create.region", MIB); /* region_used reads the device in use */
    expect_eq(c, "pool.region", MIB);
    c = run(f, "alloc", "48M", "1");
    expect_eq(c, "ok", 1);
}

static void test_context_overhead(void **state)
{
    struct fx *f = *state;
    write_file(f->limits, "gpuslice-guard 1\non-error closed\nregion %s\ncontext-overhead %llu\ndevice 0 - %llu 0\n",
               f->region, 100 * MIB, 256 * MIB);
    struct child *c = run(f, "alloc", "100M", "3");
    expect_eq(c, "retain", 0);
    expect_eq(c, "ok", 1); /* 100 MiB context + 100 MiB; a second 100 MiB would exceed 256 */
    expect_eq(c, "held_region_used", 200 * MIB);
    expect_eq(c, "after_region_used", 100 * MIB);
    assert_int_equal(region_used(f, 0), 0);
}

/* ---- damaged or missing limits ------------------------------------------------------------------------ */

static void test_limits_damaged_closed(void **state)
{
    struct fx *f = *state;
    write_file(f->limits, "gpuslice-guard 1\non-error closed\nregion %s\ndevice 0 - %llu 0\ndevice zero\n", f->region,
               64 * MIB);
    struct child *c = run(f, "alloc", "1M", "1");
    expect_eq(c, "ok", 0);
    expect_ne(c, "first_err", 0);
    expect_eq(c, "held_fake_used", 0);
}

static void test_limits_damaged_open(void **state)
{
    struct fx *f = *state;
    write_file(f->limits, "gpuslice-guard 1\non-error open\nregion %s\ndevice 0 - %llu 0\ndevice zero\n", f->region,
               64 * MIB);
    struct child *c = run(f, "alloc", "100M", "1");
    expect_eq(c, "ok", 1);
    expect_eq(c, "held_fake_used", 100 * MIB);
    /* The same with the setting spelled with other blanks (the parser accepts them). */
    write_file(f->limits, "gpuslice-guard 1\n  on-error\topen   # run unguarded\nregion %s\ndevice zero\n", f->region);
    c = run(f, "alloc", "1M", "1");
    expect_eq(c, "ok", 1);
}

static void test_limits_missing(void **state)
{
    struct fx *f = *state; /* no limits file written */
    struct child *c = run(f, "alloc", "1M", "1");
    expect_eq(c, "ok", 0);
    expect_ne(c, "first_err", 0);
    expect_eq(c, "held_fake_used", 0);
}

static void test_region_unusable(void **state)
{
    struct fx *f = *state;
    write_file(f->limits, "gpuslice-guard 1\non-error closed\nregion %s/no/such/dir/region\ndevice 0 - %llu 0\n",
               f->dir, 64 * MIB);
    struct child *c = run(f, "alloc", "1M", "1");
    expect_eq(c, "ok", 0);
    expect_eq(c, "held_fake_used", 0);
    write_file(f->limits, "gpuslice-guard 1\non-error open\nregion %s/no/such/dir/region\ndevice 0 - %llu 0\n",
               f->dir, 64 * MIB);
    c = run(f, "alloc", "1M", "1");
    expect_eq(c, "ok", 1);
}

/* ---- kernel launches ---------------------------------------------------------------------------------- */

static void test_launch_passthrough(void **state)
{
    struct fx *f = *state;
    limits(f, 64 * MIB);
    struct child *c = run(f, "launch", "20000");
    expect_eq(c, "launch_errors", 0);
    expect_eq(c, "launches", 20000);
    expect_eq(c, "gpu_us", 20000);
    fprintf(stderr, "launch: %.1f ns per cuLaunchKernel through the guard (wall clock, noisy)\n",
            (double)value_of(c, "wall_ns") / 20000.0);
}

/* ---- compute shares ------------------------------------------------------------------------------ */

#define PACE_MS "1500"

static void compute_limits(struct fx *f, unsigned pct)
{
    write_file(f->limits, "gpuslice-guard 1\non-error closed\nregion %s\ndevice 0 - 0 %u\n", f->region, pct);
}

static void expect_between(const struct child *c, const char *key, long long low, long long high)
{
    long long v = value_of(c, key);
    if (v == LLONG_MIN || v < low || v > high) {
        dump(c);
        fail_msg("%s = %lld, expected %lld..%lld", key, v, low, high);
    }
}

/* A process that would keep the simulated GPU busy all the time gets its limit, measured on the
 * driver's clock (GPU time launched over wall time), whatever the kernel size or thread count. */
static void test_pacer_converges(void **state)
{
    struct fx *f = *state;
    compute_limits(f, 30);
    struct child *c = run(f, "pace", PACE_MS, "1000");
    expect_eq(c, "launch_errors", 0);
    expect_between(c, "share_permille", 270, 330);
    expect_ge(c, "events_created", 2);
    unlink(f->region);
    compute_limits(f, 70);
    c = run(f, "pace", PACE_MS, "200", "4", "ptsz");
    expect_eq(c, "launch_errors", 0);
    expect_between(c, "share_permille", 650, 750);
    unlink(f->region);
    compute_limits(f, 10);
    c = run(f, "pace", PACE_MS, "5000", "2");
    expect_between(c, "share_permille", 70, 130);
}

/* Every launch entry point is paced, in both stream flavours: cuBLAS launches its Hopper kernels
 * with cuLaunchKernelEx, cooperative kernels and CUDA graphs have their own calls. On a real H200
 * a torch matmul loop under --compute 30% ran at 100% while only cuLaunchKernel was hooked. */
static void test_pacer_every_launch_call(void **state)
{
    struct fx *f = *state;
    static const char *const vias[] = { "ex", "ex-ptsz", "coop", "coop-ptsz", "graph", "graph-ptsz" };
    for (size_t i = 0; i < sizeof(vias) / sizeof(vias[0]); i++) {
        compute_limits(f, 30);
        struct child *c = run(f, "pace", PACE_MS, "1000", "1", vias[i]);
        fprintf(stderr, "pacer via %s: %lld permille\n", vias[i], value_of(c, "share_permille"));
        expect_eq(c, "launch_errors", 0);
        expect_between(c, "share_permille", 270, 330);
        expect_ge(c, "events_created", 2);
        /* Each wrapper runs its own driver function and times it on the same kind of stream. */
        expect_eq(c, "driver_calls", value_of(c, "launches"));
        bool ptsz = strstr(vias[i], "ptsz") != NULL;
        expect_ge(c, ptsz ? "records_ptsz" : "records_legacy", 2);
        expect_eq(c, ptsz ? "records_legacy" : "records_ptsz", 0);
        unlink(f->region);
    }
}

/* Beside a time-slicing neighbour that takes half of the GPU, a kernel's span (what the pacer
 * times) is twice its own GPU time: the pacer then errs low, never high. On a real H200 a matmul
 * loop under 30 % got 14.5 % beside an unguarded competitor (docs/guard.md). */
static void test_pacer_contention_errs_low(void **state)
{
    struct fx *f = *state;
    compute_limits(f, 30);
    static const char *const slow[] = { "FAKE_CUDA_SLOWDOWN=2", NULL };
    struct child *c = run_env(f, slow, "pace", PACE_MS, "1000", NULL);
    fprintf(stderr, "pacer beside a neighbour taking half the GPU: %lld permille of own GPU time\n",
            value_of(c, "share_permille"));
    expect_eq(c, "launch_errors", 0);
    expect_between(c, "share_permille", 120, 200);
}

/* ---- compute shares beside a neighbour on a time-sliced GPU ------------------------- *
 *
 * FAKE_CUDA_GPU makes device 0 one GPU time-sliced between the test's processes (fake_timeslice.h):
 * with k of them busy each runs at 1/k speed, so a kernel's span grows with the neighbours' load,
 * and the simulated NVML's per-process utilization says what each actually ran. The share is the
 * guarded process's own GPU time over wall time (share_permille). */
#define SHARE_MS "2500"
#define NEIGHBOUR_MS "2800" /* a neighbour busy during the whole measurement */

struct share_case {
    const char *name;
    unsigned pct;              /* the process under test */
    int neighbour;             /* 0: none, -1: unguarded, else a guarded neighbour's % */
};

/* Runs the case; *mine and *theirs get the share_permille of the process under test and of the
 * neighbour (0 without one). */
static void share_run(struct fx *f, const struct share_case *sc, long long *mine, long long *theirs)
{
    char gpu[160], limits2[160], region2[160], gpu_env[200], cfg2[200];
    snprintf(gpu, sizeof(gpu), "%s/gpu", f->dir);
    snprintf(limits2, sizeof(limits2), "%s/limits2", f->dir);
    snprintf(region2, sizeof(region2), "%s/region2", f->dir);
    unlink(f->region);
    unlink(region2);
    int fd = open(gpu, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, FK_TS_FILE_BYTES), 0);
    close(fd);
    snprintf(gpu_env, sizeof(gpu_env), "FAKE_CUDA_GPU=%s", gpu);
    compute_limits(f, sc->pct);
    static struct child me, other;
    const char *const env[] = { gpu_env, NULL };
    const char *const args[] = { "pace", SHARE_MS, "1000", NULL };
    const char *const nargs[] = { "pace", NEIGHBOUR_MS, "1000", NULL };
    if (sc->neighbour < 0) {
        const char *const nenv[] = { gpu_env, "LD_PRELOAD=", NULL };
        spawn(&other, f, nenv, nargs);
    } else if (sc->neighbour > 0) {
        write_file(limits2, "gpuslice-guard 1\non-error closed\nregion %s\ndevice 0 - 0 %d\n", region2,
                   sc->neighbour);
        snprintf(cfg2, sizeof(cfg2), "GPUSLICE_GUARD_CONFIG=%s", limits2);
        const char *const nenv[] = { gpu_env, cfg2, NULL };
        spawn(&other, f, nenv, args);
    }
    spawn(&me, f, env, args);
    finish(&me);
    expect_eq(&me, "launch_errors", 0);
    *mine = value_of(&me, "share_permille");
    *theirs = 0;
    if (sc->neighbour) {
        finish(&other);
        expect_eq(&other, "launch_errors", 0);
        *theirs = value_of(&other, "share_permille");
    }
    fprintf(stderr, "share %s: %lld permille at %u %% (neighbour %lld permille)\n", sc->name, *mine, sc->pct,
            *theirs);
}

/* Each guarded process gets its share within +-3 points, alone and beside an unguarded or a
 * guarded neighbour. Charged by kernel span (as the pacer once did) the process got 15 % at
 * 30 % beside the unguarded neighbour, as on the real H200. */
static void test_share_beside_neighbour(void **state)
{
    struct fx *f = *state;
    static const struct share_case cases[] = {
        { "alone", 30, 0 },
        { "beside an unguarded neighbour", 30, -1 },
        { "beside a guarded 50 % neighbour", 30, 50 },
        { "beside a guarded 40 % neighbour", 40, 40 },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        long long mine, theirs;
        share_run(f, &cases[i], &mine, &theirs);
        long long want = cases[i].pct * 10;
        if (mine < want - 30 || mine > want + 30)
            fail_msg("%s: %lld permille, expected %lld +- 30", cases[i].name, mine, want);
        if (cases[i].neighbour > 0 && (theirs < cases[i].neighbour * 10 - 30 || theirs > cases[i].neighbour * 10 + 30))
            fail_msg("%s: the neighbour got %lld permille, expected %d +- 30", cases[i].name, theirs,
                     cases[i].neighbour * 10);
        if (cases[i].neighbour < 0 && theirs < 1000 - want - 60)
            fail_msg("%s: the unguarded neighbour got %lld permille: the GPU idled", cases[i].name, theirs);
    }
}

/* With 8 timed launches pending, the next one waits for a slot without holding the pacer's lock
 * and, after 2 s without one, goes untimed: a launch never waits on a GPU that may be waiting for
 * it (the old code blocked in cuEventSynchronize on the oldest, 3 s here, holding the lock). */
static void test_pacer_full_table_gives_up(void **state)
{
    struct fx *f = *state;
    compute_limits(f, 90);
    struct child *c = run(f, "launch", "9", "3000000"); /* nine kernels of 3 s each, no sync */
    fprintf(stderr, "pacer: nine 3 s kernels launched in %lld ms\n", value_of(c, "wall_ns") / 1000000);
    expect_eq(c, "launch_errors", 0);
    expect_eq(c, "launches", 9);
    expect_between(c, "wall_ns", 1900000000LL, 2900000000LL);
}

/* The limit is the container's: three processes sharing one region get it together. */
static void test_pacer_container_wide(void **state)
{
    struct fx *f = *state;
    compute_limits(f, 40);
    static struct child kids[3];
    static const char *const args[] = { "pace", PACE_MS, "1000", NULL };
    for (int i = 0; i < 3; i++)
        spawn(&kids[i], f, NULL, args);
    long long total = 0;
    for (int i = 0; i < 3; i++) {
        finish(&kids[i]);
        expect_eq(&kids[i], "launch_errors", 0);
        expect_ge(&kids[i], "share_permille", 50); /* nobody starves */
        total += value_of(&kids[i], "share_permille");
    }
    fprintf(stderr, "pacer: three processes under one 40%% limit got %lld permille together\n", total);
    assert_true(total >= 360 && total <= 440);
}

/* No compute limit: no pacing (the GPU stays busy) and no events, i.e. nothing on the launch path. */
static void test_pacer_off_without_limit(void **state)
{
    struct fx *f = *state;
    compute_limits(f, 0);
    struct child *c = run(f, "pace", "500", "1000");
    expect_eq(c, "launch_errors", 0);
    expect_ge(c, "share_permille", 950);
    expect_eq(c, "events_created", 0);
}

/* ---- SIGKILL at every window of the reservation protocol ---------------------------- */

/* Waits for a child that must die of SIGKILL (a fault point of the test build): proof that it got
 * to the point. */
static void finish_killed(struct child *c, const char *point)
{
    if (c->in_fd >= 0) {
        close(c->in_fd);
        c->in_fd = -1;
    }
    long long end = now_ms() + TIMEOUT_MS;
    while (pump(c, 100) && now_ms() < end)
        ;
    if (waitpid(c->pid, &c->status, 0) != c->pid)
        fail_msg("waitpid: %s", strerror(errno));
    if (c->out_fd >= 0)
        close(c->out_fd);
    if (c->err_fd >= 0)
        close(c->err_fd);
    c->out_fd = c->err_fd = -1;
    if (!WIFSIGNALED(c->status) || WTERMSIG(c->status) != SIGKILL) {
        dump(c);
        fail_msg("fault point %s: guard_app was not killed there (status 0x%x)", point, c->status);
    }
}

static struct fake_shared *map_shared(const char *path, bool create)
{
    int fd = open(path, O_RDWR | (create ? O_CREAT | O_TRUNC : 0) | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    if (create)
        assert_int_equal(ftruncate(fd, sizeof(struct fake_shared)), 0);
    void *p = mmap(NULL, sizeof(struct fake_shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    assert_true(p != MAP_FAILED);
    return p;
}

/* The simulated driver's ground truth across processes, watching `quota`; env gets the variable
 * that gives it to guard_app. */
static struct fake_shared *ground_truth(const struct fx *f, unsigned long long quota, char *env, size_t len)
{
    char path[160];
    snprintf(path, sizeof(path), "%s/shared", f->dir);
    snprintf(env, len, "FAKE_CUDA_SHARED=%s", path);
    struct fake_shared *gt = map_shared(path, true);
    gt->watch_quota = quota;
    return gt;
}

/* The region's invariant with the lock free: each device total is the sum of the slots, within
 * the quota. */
static void check_region_sums(const struct fx *f, unsigned long long quota, const char *when)
{
    struct gs_guard_region *r = map_region(f, false);
    assert_non_null(r);
    uint64_t sum = 0;
    for (unsigned i = 0; i < GS_GUARD_MAX_PROCS; i++)
        sum += atomic_load(&r->procs[i].used[0]);
    uint64_t used = atomic_load(&r->dev[0].used);
    munmap(r, sizeof(*r));
    if (used != sum || used > quota)
        fail_msg("%s: the region counts %llu bytes, its slots %llu (quota %llu)", when, (unsigned long long)used,
                 (unsigned long long)sum, quota);
}

struct fault_case {
    const char *point;
    const char *before; /* NULL, "dead-holder" (a killed process's slot to reclaim) or "owner-dead"
                           (the lock left by a holder killed inside it) */
};

static const struct fault_case fault_cases[] = {
    { "claim.locked", NULL },        { "claim.pid", NULL },          { "reserve.locked", NULL },
    { "reserve.slot", NULL },        { "reserve.dev", NULL },        { "alloc.reserved", NULL },
    { "alloc.driver", NULL },        { "unreserve.locked", NULL },   { "unreserve.slot", NULL },
    { "unreserve.dev", NULL },       { "free.driver", NULL },        { "exit.locked", NULL },
    { "reclaim.locked", "dead-holder" }, { "reclaim.partial", "dead-holder" }, { "reclaim.slot", "dead-holder" },
    { "recover.locked", "owner-dead" },  { "recover.partial", "owner-dead" },
    { "reserve.slot:2", NULL },      { "unreserve.slot:2", NULL },
};

static void run_killed(struct fx *f, const char *point, const char *const *args)
{
    char fault[96], shared_env[200];
    snprintf(fault, sizeof(fault), "GPUSLICE_GUARD_FAULT=%s", point);
    snprintf(shared_env, sizeof(shared_env), "FAKE_CUDA_SHARED=%s/shared", f->dir);
    const char *const env[] = { fault, shared_env, NULL };
    struct child v;
    preload_lib = faults_lib;
    spawn(&v, f, env, args);
    preload_lib = NULL;
    finish_killed(&v, point);
}

/* A process killed at each window (fault points compiled into a test build of the guard), beside
 * a survivor holding 16 MiB of a 64 MiB quota: afterwards a new process gets exactly the other
 * 48 MiB (no leak, no escape), the region's totals are the sum of its slots (no double count, no
 * wrap), the survivor's cuMemGetInfo is exact, and the simulated driver's ground truth across
 * processes never saw the quota passed. */
static void test_sigkill_every_window(void **state)
{
    struct fx *f = *state;
    const unsigned long long quota = 64 * MIB;
    limits(f, quota);
    char shared_env[200];
    struct fake_shared *gt = ground_truth(f, quota, shared_env, sizeof(shared_env));
    const char *const env[] = { shared_env, NULL };
    static struct child survivor;
    static const char *const repl[] = { "repl", NULL };
    spawn(&survivor, f, env, repl);
    assert_int_equal(write(survivor.in_fd, "a 16M\n", 6), 6);
    wait_key(&survivor, "1.done");
    expect_eq(&survivor, "1.res", 0);
    int seq = 1;
    static const char *const victim[] = { "alloc", "4M", "2", NULL };
    for (size_t i = 0; i < sizeof(fault_cases) / sizeof(fault_cases[0]); i++) {
        const struct fault_case *fc = &fault_cases[i];
        if (fc->before && !strcmp(fc->before, "dead-holder")) {
            struct child h;
            static const char *const hold[] = { "hold", "8M", "60", NULL };
            spawn(&h, f, env, hold);
            wait_key(&h, "holding");
            kill(h.pid, SIGKILL);
            finish_killed(&h, "(holder)");
        } else if (fc->before && !strcmp(fc->before, "owner-dead")) {
            run_killed(f, "reserve.slot", victim);
        }
        run_killed(f, fc->point, victim);
        /* The survivor's view first: the dead hold nothing. */
        char cmd[8];
        seq++;
        assert_int_equal(write(survivor.in_fd, "i\n", 2), 2);
        snprintf(cmd, sizeof(cmd), "%d.done", seq);
        wait_key(&survivor, cmd);
        long long fr = value_of(&survivor, keyf("%d.free", seq));
        if (fr != (long long)(quota - 16 * MIB)) {
            dump(&survivor);
            fail_msg("after a kill at %s the survivor's cuMemGetInfo says %lld free, expected %llu", fc->point, fr,
                     quota - 16 * MIB);
        }
        struct child *c = run_env(f, env, "alloc", "1M", "64", (const char *)NULL);
        if (value_of(c, "ok") != 48 || value_of(c, "held_region_used") != (long long)quota ||
            value_of(c, "held_fake_used") != (long long)(48 * MIB) || value_of(c, "after_region_used") != (long long)(16 * MIB)) {
            dump(c);
            fail_msg("after a kill at %s: %lld MiB allocated of the 48 free (region %lld, driver %lld)", fc->point,
                     value_of(c, "ok"), value_of(c, "held_region_used"), value_of(c, "held_fake_used"));
        }
        check_region_sums(f, quota, fc->point);
        if (gt->violations) {
            fail_msg("after a kill at %s: the driver saw %llu allocations past the quota (by up to %llu bytes)",
                     fc->point, (unsigned long long)gt->violations, (unsigned long long)gt->max_over);
        }
    }
    struct gs_guard_region *r = map_region(f, false);
    assert_non_null(r);
    fprintf(stderr, "sigkill windows: %zu points, %u lock recoveries, %llu dead slots reclaimed, driver peak %llu MiB\n",
            sizeof(fault_cases) / sizeof(fault_cases[0]), atomic_load(&r->recoveries),
            (unsigned long long)atomic_load(&r->reclaimed), (unsigned long long)(gt->max_live[0] / MIB));
    assert_true(atomic_load(&r->recoveries) >= 4); /* the kills inside the lock were repaired */
    munmap(r, sizeof(*r));
    assert_true(gt->max_live[0] <= quota);
    assert_int_equal(write(survivor.in_fd, "q\n", 2), 2);
    finish(&survivor);
    assert_int_equal(region_used(f, 0), 0);
    check_region_sums(f, quota, "the end");
    munmap(gt, sizeof(*gt));
}

/* Random kills of racing allocators, at whatever instruction they are: the same checks. */
static void test_sigkill_random(void **state)
{
    struct fx *f = *state;
    const unsigned long long quota = 32 * MIB;
    limits(f, quota);
    char shared_env[200];
    struct fake_shared *gt = ground_truth(f, quota, shared_env, sizeof(shared_env));
    const char *const env[] = { shared_env, NULL };
    static const char *const args[] = { "race", "4", "64", "256K", NULL };
    srand(17);
    unsigned kills = 0;
    for (int round = 0; round < 30; round++) {
        static struct child kids[4];
        for (int i = 0; i < 4; i++)
            spawn(&kids[i], f, env, args);
        struct timespec ts = { 0, (long)(rand() % 8000) * 1000L };
        nanosleep(&ts, NULL);
        int victim = rand() % 4;
        kill(kids[victim].pid, SIGKILL);
        for (int i = 0; i < 4; i++) {
            if (i == victim) {
                close(kids[i].in_fd);
                kids[i].in_fd = -1;
                while (pump(&kids[i], 100))
                    ;
                waitpid(kids[i].pid, &kids[i].status, 0);
                kills += WIFSIGNALED(kids[i].status);
            } else {
                finish(&kids[i]);
                expect_eq(&kids[i], "other_err", 0);
            }
        }
        check_region_sums(f, quota, "a random kill");
        assert_int_equal(gt->violations, 0);
    }
    struct child *c = run_env(f, env, "alloc", "1M", "40", (const char *)NULL);
    expect_eq(c, "ok", 32); /* nothing leaked */
    expect_eq(c, "after_region_used", 0);
    fprintf(stderr, "random kills: %u of 30 processes killed mid-run, driver peak %llu MiB of %llu\n", kills,
            (unsigned long long)(gt->max_live[0] / MIB), quota / MIB);
    assert_true(gt->max_live[0] <= quota);
    munmap(gt, sizeof(*gt));
}

/* ---- the quota comes back only when the memory does -------------------------- */

/* 16 processes at a time exit while holding their allocations, each taking 30 ms after its atexit
 * handlers before it is gone (the driver's teardown), while others wait for room: the live bytes
 * of all processes together (the driver's ground truth) never pass the quota. */
static void test_exit_while_holding_never_exceeds(void **state)
{
    struct fx *f = *state;
    const unsigned long long quota = 64 * MIB;
    limits(f, quota);
    char shared_env[200];
    struct fake_shared *gt = ground_truth(f, quota, shared_env, sizeof(shared_env));
    const char *const env[] = { shared_env, "FAKE_CUDA_EXIT_DELAY_MS=30", NULL };
    static const char *const args[] = { "churn", "2M", "4", "3000", NULL };
    static struct child kids[16];
    long long ok = 0;
    for (int wave = 0; wave < 3; wave++) {
        for (int i = 0; i < 16; i++)
            spawn(&kids[i], f, env, args);
        for (int i = 0; i < 16; i++) {
            finish(&kids[i]);
            ok += value_of(&kids[i], "ok");
        }
    }
    fprintf(stderr, "exit while holding: %lld allocations of 2 MiB by 48 processes, driver peak %llu MiB of %llu, "
            "%llu allocations past the quota\n", ok, (unsigned long long)(gt->max_live[0] / MIB), quota / MIB,
            (unsigned long long)gt->violations);
    assert_int_equal(gt->violations, 0);
    assert_true(gt->max_live[0] <= quota);
    assert_true(ok >= 48 * 2); /* the waiting processes did get the room back */
    struct child *c = run_env(f, env, "alloc", "1M", "64", (const char *)NULL);
    expect_eq(c, "ok", 64); /* every dead holder's bytes came back */
    munmap(gt, sizeof(*gt));
}

/* A holder killed: the survivors' cuMemGetInfo says so at once, without an allocation first. */
static void test_meminfo_right_after_kill(void **state)
{
    struct fx *f = *state;
    limits(f, 64 * MIB);
    struct child holder, survivor;
    static const char *const hold[] = { "hold", "48M", "60", NULL };
    static const char *const repl[] = { "repl", NULL };
    spawn(&holder, f, NULL, hold);
    wait_key(&holder, "holding");
    spawn(&survivor, f, NULL, repl);
    assert_int_equal(write(survivor.in_fd, "i\n", 2), 2);
    wait_key(&survivor, "1.done");
    expect_eq(&survivor, "1.free", 16 * MIB);
    kill(holder.pid, SIGKILL);
    finish_killed(&holder, "(holder)");
    assert_int_equal(write(survivor.in_fd, "i\n", 2), 2);
    wait_key(&survivor, "2.done");
    expect_eq(&survivor, "2.free", 64 * MIB);
    expect_eq(&survivor, "2.total", 64 * MIB);
    assert_int_equal(write(survivor.in_fd, "q\n", 2), 2);
    finish(&survivor);
}

/* ---- limits a child cannot swap (item 2) ------------------------------------------------ */

/* In a container the mounted file is the only source: GPUSLICE_GUARD_CONFIG naming another file
 * (a bigger quota) changes nothing. The test build reads the "mounted" file at GUARD_MOUNTED_CONF. */
static void test_mounted_limits_win(void **state)
{
    struct fx *f = *state;
    write_file(mounted_conf, "gpuslice-guard 1\non-error closed\nregion %s\ndevice 0 - %llu 0\n", f->region, 64 * MIB);
    char mine[160];
    snprintf(mine, sizeof(mine), "%s/mine.conf", f->dir);
    write_file(mine, "gpuslice-guard 1\non-error open\nregion %s/other\ndevice 0 - %llu 0\n", f->dir, 1024 * MIB);
    char var[200];
    snprintf(var, sizeof(var), "GPUSLICE_GUARD_CONFIG=%s", mine);
    const char *const env[] = { var, NULL };
    preload_lib = faults_lib;
    struct child *c = run_env(f, env, "alloc", "100M", "1", (const char *)NULL);
    expect_eq(c, "ok", 0);
    expect_eq(c, "first_err", OOM);
    expect_eq(c, "held_total", 64 * MIB);
    assert_non_null(strstr(c->err, "ignored"));
    /* Without the mounted file the variable is what counts (gpuslice exec, tests). */
    unlink(mounted_conf);
    c = run_env(f, env, "alloc", "100M", "1", (const char *)NULL);
    expect_eq(c, "ok", 1);
    unlink(mine);
    char other[160];
    snprintf(other, sizeof(other), "%s/other", f->dir);
    unlink(other);
}

/* A guarded program that runs a child with GPUSLICE_GUARD_CONFIG naming its own file: the guard
 * puts its own limits back in what it executes. */
static void test_child_cannot_swap_config(void **state)
{
    struct fx *f = *state;
    limits(f, 64 * MIB);
    char mine[160];
    snprintf(mine, sizeof(mine), "%s/mine.conf", f->dir);
    write_file(mine, "gpuslice-guard 1\non-error open\nregion %s\ndevice 0 - %llu 0\n", f->region, 1024 * MIB);
    struct child *c = run(f, "exec-swap", "100M", mine);
    expect_eq(c, "ok", 0);
    expect_eq(c, "first_err", OOM);
    expect_eq(c, "held_total", 64 * MIB);
    c = run(f, "exec-swap", "32M", mine); /* positive control: the child runs and allocates */
    expect_eq(c, "ok", 1);
    unlink(mine);
}

/* The limits in a sealed memfd named by GPUSLICE_GUARD_CONFIG=/proc/self/fd/N (without gpuslice
 * exec, whose memfd the guard finds through the process's ancestors: tests/integration/test_exec.py).
 * A child that puts another file at that descriptor gets the guard's copy back; an unsealed one is
 * refused (fail closed). */
static int sealed_limits_fd(const char *text, bool seal)
{
    int fd = memfd_create("gpuslice-limits", seal ? MFD_ALLOW_SEALING : 0);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    if (seal)
        assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL), 0);
    int n = fcntl(fd, F_DUPFD, 40); /* inherited (no close-on-exec) */
    close(fd);
    return n;
}

static void test_sealed_fd_config(void **state)
{
    struct fx *f = *state;
    char text[512], var[64], mine[160];
    snprintf(text, sizeof(text), "gpuslice-guard 1\non-error closed\nregion %s\ndevice 0 - %llu 0\n", f->region, 64 * MIB);
    int fd = sealed_limits_fd(text, true);
    snprintf(var, sizeof(var), "GPUSLICE_GUARD_CONFIG=/proc/self/fd/%d", fd);
    const char *const env[] = { var, NULL };
    struct child *c = run_env(f, env, "alloc", "16M", "5", (const char *)NULL);
    expect_eq(c, "ok", 4);
    expect_eq(c, "held_total", 64 * MIB);
    snprintf(mine, sizeof(mine), "%s/mine.conf", f->dir);
    write_file(mine, "gpuslice-guard 1\non-error open\nregion %s\ndevice 0 - %llu 0\n", f->region, 1024 * MIB);
    c = run_env(f, env, "exec-swap", "100M", mine, "fd", (const char *)NULL);
    expect_eq(c, "ok", 0);
    expect_eq(c, "held_total", 64 * MIB);
    /* every descriptor closed before the exec (the guard's copy too): made again from what the
     * guard read at load, so the child is refused as the parent and works within the quota */
    c = run_env(f, env, "start-child", "closefrom", "100M", (const char *)NULL);
    expect_eq(c, "ok", 0);
    expect_eq(c, "held_total", 64 * MIB);
    c = run_env(f, env, "start-child", "closefrom", "32M", (const char *)NULL);
    expect_eq(c, "ok", 1);
    close(fd);
    fd = sealed_limits_fd(text, false);
    snprintf(var, sizeof(var), "GPUSLICE_GUARD_CONFIG=/proc/self/fd/%d", fd);
    c = run_env(f, env, "alloc", "1M", "1", (const char *)NULL);
    expect_eq(c, "ok", 0);
    assert_non_null(strstr(c->err, "not a sealed memfd"));
    close(fd);
    unlink(mine);
}

/* ---- the correctness suite ------------------------------------------------------------ */

/* Frees issued with another device's context current, on another stream, and a pool allocation
 * on device 0 made from device 1's context: each device's count follows the memory. */
static void test_cross_device_and_streams(void **state)
{
    struct fx *f = *state;
    write_file(f->limits, "gpuslice-guard 1\non-error closed\nregion %s\ndevice 0 - %llu 0\ndevice 1 - %llu 0\n",
               f->region, 64 * MIB, 64 * MIB);
    struct child *c = run(f, "cross-device", "8M");
    expect_eq(c, "alloc.res", 0);
    expect_eq(c, "alloc_async.res", 0);
    expect_eq(c, "held.dev0", 16 * MIB);
    expect_eq(c, "held.dev1", 0);
    expect_eq(c, "held.fake0", 16 * MIB);
    expect_eq(c, "free.res", 0);
    expect_eq(c, "free_async.res", 0);
    expect_eq(c, "after.dev0", 0);
    expect_eq(c, "after.dev1", 0);
    expect_eq(c, "after.fake0", 0);
    expect_eq(c, "pool.res", 0);
    expect_eq(c, "pool.fake0", 8 * MIB);
    expect_eq(c, "pool.dev0", 8 * MIB);
    expect_eq(c, "pool.dev1", 0);
    expect_eq(c, "pool_free.dev0", 0);
    assert_int_equal(region_used(f, 0), 0);
    assert_int_equal(region_used(f, 1), 0);
}

/* Virtual memory management: the driver frees a handle's memory when it is released and
 * its last mapping unmapped, whichever comes last; the quota follows the memory. 16 MiB handles
 * under a 48 MiB quota: while a released handle is still mapped, a 40 MiB allocation (which would
 * fit had the release given the bytes back, as the guard did before) is refused. */
static void test_vmm_release_while_mapped(void **state)
{
    struct fx *f = *state;
    const long long size = 16 * MIB, quota = 48 * MIB;
    limits(f, (unsigned long long)quota);
    static const char *const env[] = { "FAKE_CUDA_GRANULARITY_KIB=2048", NULL };
    struct child *c = run_env(f, env, "vmm", "16M", "40M", (const char *)NULL);
    expect_eq(c, "granularity.res", 0);
    expect_eq(c, "granularity", 2 * MIB);
    expect_eq(c, "reserve.res", 0);
    static const struct { const char *step; int res; long long held; } steps[] = {
        { "create", 0, 1 },          { "map", 0, 1 },           { "release_mapped", 0, 1 },
        { "other_while_mapped", OOM, 1 },                        { "unmap_last", 0, 0 },
        { "create2", 0, 1 },         { "map2", 0, 1 },          { "unmap2", 0, 1 },       { "release2", 0, 0 },
        { "create3", 0, 1 },         { "map3a", 0, 1 },         { "map3b", 0, 1 },        { "release3", 0, 1 },
        { "unmap3a", 0, 1 },         { "unmap3b", 0, 0 },
        { "create4a", 0, 1 },        { "create4b", 0, 2 },      { "map4a", 0, 2 },        { "map4b", 0, 2 },
        { "release4a", 0, 2 },       { "release4b", 0, 2 },     { "unmap4", 0, 0 },
        { "create_unaligned", 1 /* CUDA_ERROR_INVALID_VALUE */, 0 },
    };
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        const char *s = steps[i].step;
        expect_eq(c, keyf("%s.res", s), steps[i].res);
        expect_eq(c, keyf("%s.fake", s), steps[i].held * size);   /* the driver's truth */
        expect_eq(c, keyf("%s.region", s), steps[i].held * size); /* the guard follows it */
        expect_eq(c, keyf("%s.free", s), quota - steps[i].held * size);
    }
    expect_eq(c, "other_after_unmap.res", 0);
    expect_eq(c, "free_va.res", 0);
    expect_eq(c, "free_va2.res", 0);
    expect_eq(c, "unknown_frees", 0);
    assert_int_equal(region_used(f, 0), 0);
}

/* cuMemCreate counts what the driver holds, a multiple of the granularity: exactly the quota in
 * 2 MiB handles fits, one more is refused, and a size the driver refuses counts nothing. */
static void test_vmm_granularity(void **state)
{
    struct fx *f = *state;
    limits(f, 6 * MIB);
    static const char *const env[] = { "FAKE_CUDA_GRANULARITY_KIB=2048", NULL };
    struct child *c = run_env(f, env, "vmm", "2M", "6M", (const char *)NULL);
    expect_eq(c, "granularity", 2 * MIB);
    expect_eq(c, "create.region", 2 * MIB);
    expect_eq(c, "other_while_mapped.res", OOM); /* 2 MiB still mapped: 6 MiB does not fit */
    expect_eq(c, "other_after_unmap.res", 0);
    expect_eq(c, "create4b.region", 4 * MIB);
    expect_eq(c, "create_unaligned.res", 1);
    expect_eq(c, "create_unaligned.region", 0);
    expect_eq(c, "create_unaligned.fake", 0);
}

/* fork after init: the child shares the container's quota (the parent's bytes count), gets a slot
 * of its own, and its exit gives back nothing of the parent's. */
static void test_fork_after_init(void **state)
{
    struct fx *f = *state;
    limits(f, 64 * MIB);
    struct child *c = run(f, "fork", "40M", "32M");
    expect_eq(c, "parent.res", 0);
    expect_eq(c, "child.res", OOM); /* 40 + 32 > 64 */
    expect_eq(c, "child.exit", 0);
    expect_eq(c, "parent.after_child_region", 40 * MIB);
    expect_eq(c, "parent.free", 0);
    expect_eq(c, "parent.after_free_region", 0);
    c = run(f, "fork", "16M", "32M");
    expect_eq(c, "child.res", 0);
    expect_eq(c, "child.region", 48 * MIB);
    expect_eq(c, "parent.after_child_region", 16 * MIB);
    assert_int_equal(region_used(f, 0), 0);
}

/* nvidia-smi's view (nvmlDeviceGetMemoryInfo) is cuMemGetInfo's: with an 8 GiB quota on a GPU
 * whose other tenants leave 4 GiB, both say 4 GiB free (NVML said 6144 MiB where CUDA said 4096
 * before), and with room on the GPU both say the quota's room. */
static void test_nvml_view_matches_cuda(void **state)
{
    struct fx *f = *state;
    limits(f, 8192 * MIB);
    static const char *const busy[] = { "FAKE_GPU_OTHERS_MIB=12288", NULL };
    struct child *c = run_env(f, busy, "nvml", "2G", (const char *)NULL);
    expect_eq(c, "pre_alloc", 0);
    expect_eq(c, "nvml.res", 0);
    expect_eq(c, "cuda.total", 8192 * MIB);
    expect_eq(c, "nvml.total", 8192 * MIB);
    expect_eq(c, "cuda.free", 2048 * MIB); /* 16 GiB - 12 GiB others - 2 GiB ours */
    expect_eq(c, "nvml.free", value_of(c, "cuda.free"));
    expect_eq(c, "nvml.used", 8192 * MIB - value_of(c, "nvml.free"));
    c = run(f, "nvml", "2G");
    expect_eq(c, "cuda.free", 6144 * MIB);
    expect_eq(c, "nvml.free", 6144 * MIB);
    expect_eq(c, "nvml.used", 2048 * MIB);
}

/* A program not linked against libcuda that dlopens it late. */
static void test_dlopen_late(void **state)
{
    struct fx *f = *state;
    limits(f, 64 * MIB);
    struct child *c = run(f, dlopen_app, "41943040"); /* 40 MiB, twice */
    expect_eq(c, "first.res", 0);
    expect_eq(c, "second.res", OOM);
    expect_eq(c, "fake_used", 40 * MIB);
    expect_eq(c, "guard_used", 40 * MIB);
    expect_eq(c, "total", 64 * MIB);
    assert_int_equal(region_used(f, 0), 0);
}

int main(void)
{
    guard_lib = getenv("GUARD_LIB") ? getenv("GUARD_LIB") : GUARD_LIB_PATH;
    guard_app = getenv("GUARD_APP") ? getenv("GUARD_APP") : GUARD_APP_PATH;
    fake_dir = getenv("FAKE_CUDA_DIR") ? getenv("FAKE_CUDA_DIR") : FAKE_CUDA_DIR;
    faults_lib = getenv("GUARD_FAULTS_LIB") ? getenv("GUARD_FAULTS_LIB") : GUARD_FAULTS_LIB_PATH;
    dlopen_app = GUARD_DLOPEN_PATH;
    mounted_conf = GUARD_MOUNTED_CONF;
    if (access(guard_lib, R_OK) != 0) {
        fprintf(stderr, "test_guard: %s: %s (the build makes it: a broken build)\n", guard_lib, strerror(errno));
        return 1;
    }
    const char *san = getenv("GUARD_TEST_SANITIZED");
    if (san && !strcmp(san, "1") && !getenv("GUARD_TEST_UNDER_SANITIZER")) {
        /* The sanitizer runtime resolves its interceptors with dlsym(RTLD_NEXT) while it starts,
         * through the preloaded guard's dlsym, before the instrumented guard may run. */
        fprintf(stderr, "test_guard: sanitizer build: skipped (GUARD_TEST_UNDER_SANITIZER=1 runs it)\n");
        return 77;
    }
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_all_paths_counted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_quota_exceeded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_quota_exceeded_all_paths, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rollback_on_driver_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_race_never_exceeds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sigkill_reclaimed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sigkill_zombie_reclaimed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_region_reclaimed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_free_forwarded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_procaddr_versions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_procaddr_old_abi, setup, teardown),
        cmocka_unit_test_setup_teardown(test_procaddr_ptsz_before_7, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dlsym_wrappers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dlsym_rtld_next, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_i_execve, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_i_program, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_i_execvpe, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_i_clearenv, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_i_posix_spawn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_i_execle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_meminfo_reports_quota, setup, teardown),
        cmocka_unit_test_setup_teardown(test_meminfo_over_quota, setup, teardown),
        cmocka_unit_test_setup_teardown(test_multi_device, setup, teardown),
        cmocka_unit_test_setup_teardown(test_context_overhead, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limits_damaged_closed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limits_damaged_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limits_missing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_region_unusable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_launch_passthrough, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pacer_converges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pacer_every_launch_call, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pacer_contention_errs_low, setup, teardown),
        cmocka_unit_test_setup_teardown(test_share_beside_neighbour, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pacer_full_table_gives_up, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pacer_container_wide, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pacer_off_without_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sigkill_every_window, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sigkill_random, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exit_while_holding_never_exceeds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_meminfo_right_after_kill, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mounted_limits_win, setup, teardown),
        cmocka_unit_test_setup_teardown(test_child_cannot_swap_config, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sealed_fd_config, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cross_device_and_streams, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vmm_release_while_mapped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vmm_granularity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fork_after_init, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dlopen_late, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nvml_view_matches_cuda, setup, teardown),
    };
    return cmocka_run_group_tests_name("guard", tests, NULL, NULL);
}
