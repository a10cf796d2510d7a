/* test_guard_layout.c: the guard's files on the host (guard/guard_layout.h): the limits built from
 * rows (the context overhead of mixed architectures, the bounds), the text they make, a guard
 * directory made and removed in a temporary directory with its files' contents and modes, the
 * rewrite of an existing one, the node's ld.so.preload, and failures half-way: each failing step
 * (mkdir, rename, the util writers, fchmod, wrapped with -Wl,--wrap in tests/meson.build), a
 * failing fill and a process killed half-way leave nothing at the directory's name. */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../guard/guard_layout.h"
#include "util/util.h"

/* ---- fault injection ------------------------------------------------------------------------
 * fail_at = N > 0: the Nth wrapped call from now fails with ENOSPC (and the count of calls made is
 * in calls); 0: no failure. */
static unsigned fail_at, calls;

static bool inject(void) {
    calls++;
    if (fail_at && --fail_at == 0)
        return true;
    return false;
}

int __real_mkdir(const char *path, mode_t mode);
int __wrap_mkdir(const char *path, mode_t mode);
int __wrap_mkdir(const char *path, mode_t mode) {
    if (inject()) {
        errno = ENOSPC;
        return -1;
    }
    return __real_mkdir(path, mode);
}

int __real_rename(const char *from, const char *to);
int __wrap_rename(const char *from, const char *to);
int __wrap_rename(const char *from, const char *to) {
    if (inject()) {
        errno = ENOSPC;
        return -1;
    }
    return __real_rename(from, to);
}

int __real_fchmod(int fd, mode_t mode);
int __wrap_fchmod(int fd, mode_t mode);
int __wrap_fchmod(int fd, mode_t mode) {
    if (inject()) {
        errno = ENOSPC;
        return -1;
    }
    return __real_fchmod(fd, mode);
}

int __real_gs_open_write(const char *path, unsigned flags, unsigned mode, char *err, size_t errlen);
int __wrap_gs_open_write(const char *path, unsigned flags, unsigned mode, char *err, size_t errlen);
int __wrap_gs_open_write(const char *path, unsigned flags, unsigned mode, char *err, size_t errlen) {
    return inject() ? -ENOSPC : __real_gs_open_write(path, flags, mode, err, errlen);
}

int __real_gs_write_file_atomic(const char *path, const void *data, size_t len, bool sync);
int __wrap_gs_write_file_atomic(const char *path, const void *data, size_t len, bool sync);
int __wrap_gs_write_file_atomic(const char *path, const void *data, size_t len, bool sync) {
    return inject() ? -ENOSPC : __real_gs_write_file_atomic(path, data, len, sync);
}

int __real_gs_mkdir_p(const char *dir, unsigned mode);
int __wrap_gs_mkdir_p(const char *dir, unsigned mode);
int __wrap_gs_mkdir_p(const char *dir, unsigned mode) {
    return inject() ? -ENOSPC : __real_gs_mkdir_p(dir, mode);
}

/* ---- helpers ---------------------------------------------------------------------------------- */

static char root[256];

static int setup(void **st) {
    (void)st;
    umask(022);
    snprintf(root, sizeof(root), "/tmp/test_guard_layout-XXXXXX");
    assert_non_null(mkdtemp(root));
    fail_at = 0;
    return 0;
}

static int teardown(void **st) {
    (void)st;
    fail_at = 0;
    assert_int_equal(gs_remove_tree(root), 0);
    return 0;
}

static void at(char *buf, size_t len, const char *rel) {
    assert_int_equal(gs_guard_path(root, rel, buf, len), 0);
}

static char *slurp(const char *rel) {
    char path[512];
    at(path, sizeof(path), rel);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(gs_read_file(path, 1 << 16, &text, &len), 0);
    return text;
}

static unsigned mode_of(const char *rel) {
    char path[512];
    at(path, sizeof(path), rel);
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    return (unsigned)(st.st_mode & 07777);
}

static bool exists(const char *rel) {
    char path[512];
    at(path, sizeof(path), rel);
    struct stat st;
    return lstat(path, &st) == 0;
}

/* The names in ROOT/rel, sorted, joined by ' ' ("" when empty). */
static void names(const char *rel, char *out, size_t len) {
    char path[512];
    at(path, sizeof(path), rel);
    struct dirent **list;
    int n = scandir(path, &list, NULL, alphasort);
    assert_true(n >= 0);
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (strcmp(list[i]->d_name, ".") && strcmp(list[i]->d_name, ".."))
            snprintf(out + strlen(out), len - strlen(out), "%s%s", out[0] ? " " : "", list[i]->d_name);
        free(list[i]);
    }
    free(list);
}

static const struct gs_guard_row two_gpus[] = {
    { 0, "GPU-aaaa", 8ULL << 30, 30, "volta" },
    { 1, "GPU-bbbb", 4ULL << 30, 0, "hopper" },
};

#define TWO_GPUS_TEXT                                                                                                  \
    "gpuslice-guard 1\n"                                                                                             \
    "on-error closed\n"                                                                                              \
    "region /run/gpuslice/guard/region\n"                                                                            \
    "context-overhead 524288000\n"                                                                                   \
    "device 0 GPU-aaaa 8589934592 30\n"                                                                              \
    "device 1 GPU-bbbb 4294967296 0\n"

static int two_gpus_text(char *text, size_t len) {
    struct gs_guard_limits l;
    assert_int_equal(gs_guard_limits_build(two_gpus, 2, GS_GUARD_REGION_IN_CONTAINER, &l), 0);
    return gs_guard_limits_format(&l, text, len);
}

/* ---- the limits ------------------------------------------------------------------------------- */

static void test_build_rows(void **st) {
    (void)st;
    struct gs_guard_limits l;
    assert_int_equal(gs_guard_limits_build(two_gpus, 2, GS_GUARD_REGION_IN_CONTAINER, &l), 0);
    assert_true(l.fail_closed);
    assert_string_equal(l.region, "/run/gpuslice/guard/region");
    assert_int_equal(l.context_overhead, 500ULL << 20); /* hopper's, the larger of the two */
    assert_int_equal(l.n_devices, 2);
    assert_int_equal(l.dev[0].ordinal, 0);
    assert_string_equal(l.dev[0].uuid, "GPU-aaaa");
    assert_int_equal(l.dev[0].vram, 8ULL << 30);
    assert_int_equal(l.dev[0].compute_pct, 30);
    assert_int_equal(l.dev[1].ordinal, 1);
    assert_int_equal(l.dev[1].compute_pct, 0);
    char text[4096];
    int len = gs_guard_limits_format(&l, text, sizeof(text));
    assert_int_equal(len, (int)strlen(TWO_GPUS_TEXT));
    assert_string_equal(text, TWO_GPUS_TEXT);
}

static void test_build_overhead(void **st) {
    (void)st;
    struct gs_guard_limits l;
    const struct gs_guard_row volta[] = { { 0, NULL, 1 << 20, 0, "volta" }, { 1, "", 1 << 20, 0, "turing" } };
    assert_int_equal(gs_guard_limits_build(volta, 2, "/r", &l), 0);
    assert_int_equal(l.context_overhead, 300ULL << 20);
    assert_string_equal(l.dev[0].uuid, ""); /* no UUID: "-" in the file */
    const struct gs_guard_row mixed[] = { { 0, NULL, 1, 0, "ampere" }, { 2, NULL, 1, 0, NULL } };
    assert_int_equal(gs_guard_limits_build(mixed, 2, "/r", &l), 0);
    assert_int_equal(l.context_overhead, GS_GUARD_CONTEXT_OVERHEAD_UNKNOWN); /* an unknown GPU counts */
    assert_int_equal(l.dev[1].ordinal, 2);
    const struct gs_guard_row ada[] = { { 3, NULL, 1, 0, "ada" } };
    assert_int_equal(gs_guard_limits_build(ada, 1, "/r", &l), 0);
    assert_int_equal(l.context_overhead, 400ULL << 20);
    assert_int_equal(gs_guard_limits_build(NULL, 0, "/r", &l), 0); /* no GPU named: the unknown estimate */
    assert_int_equal(l.n_devices, 0);
    assert_int_equal(l.context_overhead, GS_GUARD_CONTEXT_OVERHEAD_UNKNOWN);
}

static void test_build_bounds(void **st) {
    (void)st;
    struct gs_guard_row rows[GS_GUARD_MAX_DEVICES + 1];
    for (unsigned i = 0; i <= GS_GUARD_MAX_DEVICES; i++)
        rows[i] = (struct gs_guard_row){ (int)i, NULL, 1 << 20, 0, "volta" };
    struct gs_guard_limits l, before;
    memset(&l, 0xa5, sizeof(l));
    before = l;
    assert_int_equal(gs_guard_limits_build(rows, GS_GUARD_MAX_DEVICES + 1, "/r", &l), -E2BIG);
    assert_memory_equal(&l, &before, sizeof(l)); /* untouched */
    assert_int_equal(gs_guard_limits_build(rows, GS_GUARD_MAX_DEVICES, "/r", &l), 0);
    assert_int_equal(l.n_devices, GS_GUARD_MAX_DEVICES);
    char long_uuid[sizeof(l.dev[0].uuid) + 1];
    memset(long_uuid, 'u', sizeof(long_uuid) - 1);
    long_uuid[sizeof(long_uuid) - 1] = '\0';
    rows[0].uuid = long_uuid;
    l = before;
    assert_int_equal(gs_guard_limits_build(rows, 1, "/r", &l), -ENAMETOOLONG);
    assert_memory_equal(&l, &before, sizeof(l));
    long_uuid[sizeof(long_uuid) - 2] = '\0'; /* 95 characters: they fit */
    assert_int_equal(gs_guard_limits_build(rows, 1, "/r", &l), 0);
    char long_region[sizeof(l.region) + 1];
    memset(long_region, 'r', sizeof(long_region) - 1);
    long_region[0] = '/';
    long_region[sizeof(long_region) - 1] = '\0';
    assert_int_equal(gs_guard_limits_build(rows, 1, long_region, &l), -ENAMETOOLONG);
}

static void test_paths(void **st) {
    (void)st;
    char buf[32];
    assert_int_equal(gs_guard_path("/g/a1", GS_GUARD_DIR_REGION, buf, sizeof(buf)), 0);
    assert_string_equal(buf, "/g/a1/state/region");
    assert_int_equal(gs_guard_path("/g", GS_GUARD_ROOT_PRELOAD, buf, 17), 0); /* "/g/ld.so.preload" and NUL */
    assert_int_equal(gs_guard_path("/g", GS_GUARD_ROOT_PRELOAD, buf, 16), -ENAMETOOLONG);
    assert_string_equal(buf, "");
    assert_string_equal(GS_GUARD_REGION_IN_CONTAINER, "/run/gpuslice/guard/region");
}

/* ---- the directory ---------------------------------------------------------------------------- */

static int write_extra(const char *dir, void *ctx, char *err, size_t errlen) {
    char path[512];
    assert_int_equal(gs_guard_path(dir, GS_GUARD_DIR_DEVICES, path, sizeof(path)), 0);
    int r = gs_write_file_atomic(path, ctx, strlen(ctx), false);
    if (r < 0)
        snprintf(err, errlen, "the record: %s", strerror(-r));
    return r;
}

static void test_create_remove(void **st) {
    (void)st;
    char text[4096], dir[512], err[512] = "", list[512];
    int len = two_gpus_text(text, sizeof(text));
    assert_true(len > 0);
    at(dir, sizeof(dir), "guard/a1");
    assert_int_equal(gs_guard_dir_create(dir, text, (size_t)len, write_extra, "nvidia.com/gpu\tGPU-aaaa::0\n", err,
                                         sizeof(err)),
                     0);
    names("guard", list, sizeof(list));
    assert_string_equal(list, "a1"); /* no temporary left beside it */
    names("guard/a1", list, sizeof(list));
    assert_string_equal(list, "devices limits state");
    names("guard/a1/state", list, sizeof(list));
    assert_string_equal(list, "region");
    char *limits = slurp("guard/a1/limits"), *region = slurp("guard/a1/state/region");
    assert_string_equal(limits, TWO_GPUS_TEXT);
    assert_string_equal(region, "");
    free(limits);
    free(region);
    assert_int_equal(mode_of("guard"), 0755);
    assert_int_equal(mode_of("guard/a1"), 0755);
    assert_int_equal(mode_of("guard/a1/state"), 0755);
    assert_int_equal(mode_of("guard/a1/state/region"), 0666); /* whatever the umask */
    assert_int_equal(mode_of("guard/a1/limits"), 0644);

    char root_g[512], preload[512];
    at(root_g, sizeof(root_g), "guard");
    assert_int_equal(gs_guard_preload_ensure(root_g, preload, sizeof(preload), err, sizeof(err)), 0);
    char *line = slurp("guard/ld.so.preload");
    assert_string_equal(line, "/usr/lib/gpuslice/libgpuslice-guard.so\n");
    free(line);
    assert_int_equal(mode_of("guard/ld.so.preload"), 0644);
    assert_int_equal(gs_write_file_atomic(preload, "kept\n", 5, false), 0);
    assert_int_equal(gs_guard_preload_ensure(root_g, preload, sizeof(preload), err, sizeof(err)), 0);
    line = slurp("guard/ld.so.preload"); /* there: not rewritten */
    assert_string_equal(line, "kept\n");
    free(line);

    /* A leftover of a create that died (DIR.tmp.PID) goes with the directory. */
    char leftover[512];
    at(leftover, sizeof(leftover), "guard/a1.tmp.999999");
    assert_int_equal(mkdir(leftover, 0755), 0);
    at(leftover, sizeof(leftover), "guard/a1.tmp.999999/limits");
    assert_int_equal(gs_write_file_atomic(leftover, "x", 1, false), 0);
    at(leftover, sizeof(leftover), "guard/a10"); /* another directory: not a leftover of a1 */
    assert_int_equal(mkdir(leftover, 0755), 0);
    assert_int_equal(gs_guard_dir_remove(dir), 0);
    names("guard", list, sizeof(list));
    assert_string_equal(list, "a10 ld.so.preload");
    assert_int_equal(gs_guard_dir_remove(dir), 0); /* gone already: not an error */
}

static void test_rewrite_keeps_region(void **st) {
    (void)st;
    char text[4096], dir[512], err[512] = "";
    int len = two_gpus_text(text, sizeof(text));
    at(dir, sizeof(dir), "a2");
    assert_int_equal(gs_guard_dir_create(dir, text, (size_t)len, NULL, NULL, err, sizeof(err)), 0);
    char region[512];
    at(region, sizeof(region), "a2/state/region");
    assert_int_equal(gs_write_file_atomic(region, "counters", 8, false), 0); /* the guard's, meanwhile */
    assert_int_equal(chmod(region, 0666), 0);
    const struct gs_guard_row one[] = { { 0, "GPU-cccc", 1 << 20, 50, "ampere" } };
    struct gs_guard_limits l;
    assert_int_equal(gs_guard_limits_build(one, 1, GS_GUARD_REGION_IN_CONTAINER, &l), 0);
    len = gs_guard_limits_format(&l, text, sizeof(text));
    assert_int_equal(gs_guard_dir_create(dir, text, (size_t)len, write_extra, "r\tx\n", err, sizeof(err)), 0);
    char *got = slurp("a2/state/region");
    assert_string_equal(got, "counters");
    free(got);
    got = slurp("a2/limits");
    assert_non_null(strstr(got, "context-overhead 419430400\ndevice 0 GPU-cccc 1048576 50\n"));
    free(got);
    got = slurp("a2/devices");
    assert_string_equal(got, "r\tx\n");
    free(got);
    /* A file where the directory goes is refused, and left alone. */
    at(dir, sizeof(dir), "a2/limits");
    assert_int_equal(gs_guard_dir_create(dir, text, (size_t)len, NULL, NULL, err, sizeof(err)), -ENOTDIR);
    assert_non_null(strstr(err, "a2/limits: Not a directory"));
}

static int fill_fails(const char *dir, void *ctx, char *err, size_t errlen) {
    (void)dir, (void)ctx;
    snprintf(err, errlen, "the record does not fit");
    return -E2BIG;
}

static int fill_dies(const char *dir, void *ctx, char *err, size_t errlen) {
    (void)dir, (void)ctx, (void)err, (void)errlen;
    raise(SIGKILL);
    return 0;
}

static void test_failure_leaves_nothing(void **st) {
    (void)st;
    char text[4096], dir[512], err[512], list[512];
    int len = two_gpus_text(text, sizeof(text));
    at(dir, sizeof(dir), "guard/a3");
    assert_false(exists("guard")); /* made by the create too */
    /* Each step of the create fails in turn, until none is left to fail. */
    unsigned failed = 0;
    for (unsigned k = 1;; k++) {
        err[0] = '\0';
        calls = 0;
        fail_at = k;
        int r = gs_guard_dir_create(dir, text, (size_t)len, write_extra, "rec\n", err, sizeof(err));
        bool hit = fail_at == 0;
        fail_at = 0;
        if (!hit) {
            assert_int_equal(r, 0);
            break;
        }
        failed++;
        assert_int_equal(r, -ENOSPC);
        assert_non_null(strstr(err, "No space left on device"));
        if (strncmp(err, "the record: ", 12) != 0) { /* the fill's own message, else: */
            assert_non_null(strstr(err, root)); /* names the path */
            assert_null(strstr(err, ".tmp.")); /* as the caller knows it */
        }
        assert_false(exists("guard/a3"));
        if (exists("guard")) {
            names("guard", list, sizeof(list));
            assert_string_equal(list, ""); /* nor anything half-made beside it */
        }
        assert_true(k < 64);
    }
    assert_true(failed >= 6); /* mkdir_p, mkdir, state, region, fchmod, limits, the record, rename */
    names("guard", list, sizeof(list));
    assert_string_equal(list, "a3");
    assert_int_equal(gs_guard_dir_remove(dir), 0);

    /* The caller's files failing: its code and message, nothing left. */
    assert_int_equal(gs_guard_dir_create(dir, text, (size_t)len, fill_fails, NULL, err, sizeof(err)), -E2BIG);
    assert_string_equal(err, "the record does not fit");
    names("guard", list, sizeof(list));
    assert_string_equal(list, "");

    /* Killed half-way: nothing at the directory's name; the leftover goes with a removal. */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        gs_guard_dir_create(dir, text, (size_t)len, fill_dies, NULL, err, sizeof(err));
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    assert_false(exists("guard/a3"));
    names("guard", list, sizeof(list));
    char expect[64];
    snprintf(expect, sizeof(expect), "a3.tmp.%ld", (long)pid);
    assert_string_equal(list, expect);
    assert_int_equal(gs_guard_dir_remove(dir), 0);
    names("guard", list, sizeof(list));
    assert_string_equal(list, "");
}

static void test_preload_failure(void **st) {
    (void)st;
    char err[512] = "", preload[512], list[512];
    fail_at = 1;
    assert_int_equal(gs_guard_preload_ensure(root, preload, sizeof(preload), err, sizeof(err)), -ENOSPC);
    fail_at = 0;
    assert_non_null(strstr(err, "cannot write "));
    assert_non_null(strstr(err, "/ld.so.preload: No space left on device"));
    names("", list, sizeof(list));
    assert_string_equal(list, "");
    assert_int_equal(gs_guard_preload_ensure(root, preload, 8, err, sizeof(err)), -ENAMETOOLONG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_build_rows),
        cmocka_unit_test(test_build_overhead),
        cmocka_unit_test(test_build_bounds),
        cmocka_unit_test(test_paths),
        cmocka_unit_test_setup_teardown(test_create_remove, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rewrite_keeps_region, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failure_leaves_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_preload_failure, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
