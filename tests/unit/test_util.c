/* test_util.c: integer parsing (sizes: test_quantity.c), bounded
 * copies, atomic file writes and bounded reads, tree removal racing a symbolic link swap. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "util/util.h"

static void test_parse_uint(void **state) {
    (void)state;
    unsigned long long v;
    assert_int_equal(gs_parse_uint("42", 0, 100, &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(gs_parse_uint("101", 0, 100, &v), -ERANGE);
    assert_int_equal(gs_parse_uint("4x", 0, 100, &v), -EINVAL);
    assert_int_equal(gs_parse_uint("-4", 0, 100, &v), -EINVAL);
    assert_int_equal(gs_parse_uint(" 4", 0, 100, &v), -EINVAL);
    assert_int_equal(gs_parse_uint("", 0, 100, &v), -EINVAL);
    assert_int_equal(gs_parse_uint(NULL, 0, 100, &v), -EINVAL);
    assert_int_equal(gs_parse_uint("99999999999999999999", 0, ~0ULL, &v), -ERANGE);
}

static void test_has_suffix(void **state) {
    (void)state;
    assert_true(gs_has_suffix("nvidia-gpu.sock", ".sock"));
    assert_true(gs_has_suffix(".sock", ".sock"));
    assert_true(gs_has_suffix("x", ""));
    assert_false(gs_has_suffix("sock", ".sock"));
    assert_false(gs_has_suffix("a.sock.bak", ".sock"));
    assert_false(gs_has_suffix("", ".yaml"));
}

static void test_strlcpy(void **state) {
    (void)state;
    char b[4];
    assert_int_equal(gs_strlcpy(b, "abc", sizeof(b)), 0);
    assert_string_equal(b, "abc");
    assert_int_equal(gs_strlcpy(b, "abcd", sizeof(b)), -ENAMETOOLONG);
    assert_string_equal(b, "abc");
}

static void test_files(void **state) {
    (void)state;
    char dir[] = "/tmp/gs-util-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof(path), "%s/a/b/f", dir);
    char sub[64];
    snprintf(sub, sizeof(sub), "%s/a/b", dir);
    assert_int_equal(gs_mkdir_p(sub, 0700), 0);
    assert_int_equal(gs_write_file_atomic(path, "hello", 5, true), 0);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(gs_read_file(path, 100, &text, &len), 0);
    assert_int_equal(len, 5);
    assert_string_equal(text, "hello");
    free(text);
    assert_int_equal(gs_read_file(path, 3, &text, &len), -EFBIG);
    assert_int_equal(gs_read_file(sub, 100, &text, &len), -EISDIR);
    assert_int_equal(gs_mkdir_p(path, 0700), -ENOTDIR);
    char cmd[100];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(gs_read_file(path, 100, &text, &len), -ENOENT);
}

/* In a fresh directory (dir, a mkdtemp template): a FIFO, a bound socket (its descriptor is
 * returned) and the names of a file and a link to make. Each name has 64 bytes. */
static int special_files(char *dir, char *fifo, char *sock, char *file, char *link) {
    assert_non_null(mkdtemp(dir));
    snprintf(fifo, 64, "%s/fifo", dir);
    snprintf(sock, 64, "%s/sock", dir);
    snprintf(file, 64, "%s/file", dir);
    snprintf(link, 64, "%s/link", dir);
    assert_int_equal(mkfifo(fifo, 0644), 0);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(s >= 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    gs_strlcpy(sa.sun_path, sock, sizeof(sa.sun_path));
    assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return s;
}

/* A FIFO, a socket or a device where a file is expected is refused at once (a FIFO's open used to
 * wait for a writer for ever: alarm() turns that hang into a failure), with the kind named; a
 * symbolic link is followed unless GS_READ_NOFOLLOW. */
static void test_read_file_refuses_special_files(void **state) {
    (void)state;
    char dir[] = "/tmp/gs-util-XXXXXX";
    char fifo[64], sock[64], file[64], link[64], err[256];
    int s = special_files(dir, fifo, sock, file, link);
    assert_int_equal(gs_write_file_atomic(file, "data", 4, false), 0);
    assert_int_equal(symlink("file", link), 0);
    char *text = NULL;
    size_t len = 0;
    alarm(10);
    assert_int_equal(gs_read_file_ex(fifo, 100, 0, &text, &len, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, fifo));
    assert_non_null(strstr(err, "a FIFO, not a regular file"));
    assert_int_equal(gs_read_file(fifo, 100, &text, &len), -EINVAL);
    assert_int_equal(gs_read_file_ex(sock, 100, 0, &text, &len, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "a socket, not a regular file"));
    assert_int_equal(gs_read_file_ex("/dev/null", 100, 0, &text, &len, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "/dev/null: a character device, not a regular file");
    assert_int_equal(gs_read_file_ex(dir, 100, 0, &text, &len, err, sizeof(err)), -EISDIR);
    assert_non_null(strstr(err, "a directory, not a regular file"));
    alarm(0);
    /* followed by default (a ConfigMap's ..data links), refused with GS_READ_NOFOLLOW */
    assert_int_equal(gs_read_file(link, 100, &text, &len), 0);
    assert_string_equal(text, "data");
    free(text);
    text = NULL;
    assert_int_equal(gs_read_file_ex(link, 100, GS_READ_NOFOLLOW, &text, &len, err, sizeof(err)), -ELOOP);
    assert_non_null(strstr(err, "a symbolic link (not followed)"));
    assert_null(text);
    assert_int_equal(gs_read_file_ex(file, 100, GS_READ_NOFOLLOW, &text, &len, NULL, 0), 0);
    free(text);
    /* bounded by the size fstat gives, and by what is read (files of /proc say 0) */
    assert_int_equal(gs_read_file_ex(file, 3, 0, &text, &len, err, sizeof(err)), -EFBIG);
    assert_non_null(strstr(err, "larger than 3 bytes"));
    assert_int_equal(gs_read_file_ex("/proc/self/status", 8, 0, &text, &len, err, sizeof(err)), -EFBIG);
    assert_int_equal(gs_read_file("/proc/self/status", 1 << 16, &text, &len), 0);
    assert_true(len > 0 && strstr(text, "Name:"));
    free(text);
    char missing[80];
    snprintf(missing, sizeof(missing), "%s/missing", dir);
    assert_int_equal(gs_read_file_ex(missing, 100, 0, &text, &len, err, sizeof(err)), -ENOENT);
    assert_non_null(strstr(err, "No such file or directory"));
    close(s);
    char cmd[100];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* Every file opened for writing goes through gs_open_write: a FIFO (even one with a reader, which
 * an O_NONBLOCK open would accept), a character device, a socket, a directory and a symbolic link
 * are refused by kind without blocking and without touching what a link points to; a regular
 * file is created, truncated or appended to, and comes back blocking and close-on-exec. alarm()
 * turns a hang into a failure. */
static void test_open_write_refuses_special_files(void **state) {
    (void)state;
    char dir[] = "/tmp/gs-util-XXXXXX";
    char fifo[64], sock[64], file[64], link[64], victim[64], newf[64], err[256];
    int s = special_files(dir, fifo, sock, file, link);
    snprintf(victim, sizeof(victim), "%s/victim", dir);
    snprintf(newf, sizeof(newf), "%s/new", dir);
    assert_int_equal(gs_write_file_atomic(victim, "keep", 4, false), 0);
    assert_int_equal(symlink("victim", link), 0);
    alarm(10);
    assert_int_equal(gs_open_write(fifo, GS_WRITE_TRUNC, 0644, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, fifo));
    assert_non_null(strstr(err, "a FIFO, not a regular file"));
    int reader = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    assert_true(reader >= 0);
    assert_int_equal(gs_open_write(fifo, 0, 0644, err, sizeof(err)), -EINVAL);
    assert_null(gs_fopen_write(fifo, GS_WRITE_TRUNC, err, sizeof(err)));
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err, "a FIFO, not a regular file"));
    close(reader);
    assert_int_equal(gs_open_write("/dev/null", GS_WRITE_TRUNC, 0644, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "/dev/null: a character device, not a regular file");
    assert_int_equal(gs_open_write(sock, 0, 0644, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "a socket, not a regular file"));
    assert_int_equal(gs_open_write(dir, 0, 0644, err, sizeof(err)), -EISDIR);
    assert_non_null(strstr(err, "a directory, not a regular file"));
    assert_int_equal(gs_open_write(link, GS_WRITE_TRUNC, 0644, err, sizeof(err)), -ELOOP);
    assert_non_null(strstr(err, "a symbolic link (not followed)"));
    assert_int_equal(gs_open_write(link, GS_WRITE_EXCL, 0644, err, sizeof(err)), -EEXIST);
    alarm(0);
    char *text = NULL;
    assert_int_equal(gs_read_file(victim, 100, &text, NULL), 0);
    assert_string_equal(text, "keep"); /* nothing written through the link */
    free(text);
    /* a regular file: created, then truncated or appended to; blocking and close-on-exec */
    int fd = gs_open_write(newf, 0, 0600, err, sizeof(err));
    assert_true(fd >= 0);
    assert_int_equal(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    assert_int_equal(fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
    assert_int_equal(write(fd, "hello", 5), 5);
    close(fd);
    static const struct { unsigned flags; const char *put, *then; } steps[] = {
        { GS_WRITE_APPEND, " world", "hello world" },
        { GS_WRITE_TRUNC, "x", "x" },
    };
    for (size_t i = 0; i < GS_ARRAY_SIZE(steps); i++) {
        FILE *f = gs_fopen_write(newf, steps[i].flags, err, sizeof(err));
        assert_non_null(f);
        fputs(steps[i].put, f);
        assert_int_equal(fclose(f), 0);
        assert_int_equal(gs_read_file(newf, 100, &text, NULL), 0);
        assert_string_equal(text, steps[i].then);
        free(text);
    }
    assert_int_equal(gs_open_write(newf, GS_WRITE_EXCL, 0644, err, sizeof(err)), -EEXIST);
    /* the atomic writer's temporary name: a link or a FIFO planted there is replaced, not used */
    char tmp[96];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", file, (long)getpid());
    assert_int_equal(symlink("victim", tmp), 0);
    assert_int_equal(gs_write_file_atomic(file, "new", 3, false), 0);
    unlink(tmp);
    assert_int_equal(mkfifo(tmp, 0644), 0);
    alarm(10);
    assert_int_equal(gs_write_file_atomic(file, "newer", 5, false), 0);
    alarm(0);
    assert_int_equal(gs_read_file(file, 100, &text, NULL), 0);
    assert_string_equal(text, "newer");
    free(text);
    assert_int_equal(gs_read_file(victim, 100, &text, NULL), 0);
    assert_string_equal(text, "keep");
    free(text);
    close(s);
    char cmd[100];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---- the guard GC's symbolic link race ------------------------------------------
 *
 * A container can swap a directory of its state tree for a symbolic link while the root-owned GC
 * removes the tree. The window is between the walk learning that an entry is a directory and the
 * walk opening it: the old remove_tree (src/agent/cleanup.c before e4281be) did lstat, then
 * opendir by name, which follows a link swapped in meanwhile and deletes what it points to. This
 * test binary defines opendir and openat, the calls the old and the new walk make to open a
 * directory, so it can make the swap at exactly that moment, every time: when either is asked to
 * open race_dir, race_dir is renamed away and replaced by a link to race_target first. */
static char race_dir[PATH_MAX], race_target[PATH_MAX];
static int race_swaps;

static void race_swap(void) {
    char moved[PATH_MAX + 8];
    snprintf(moved, sizeof(moved), "%s.moved", race_dir);
    if (rename(race_dir, moved) == 0 && symlink(race_target, race_dir) == 0)
        race_swaps++;
    race_dir[0] = '\0'; /* once */
}

/* Whether (fd, name) names race_dir. */
static bool names_race_dir(int fd, const char *name) {
    if (!race_dir[0] || !name)
        return false;
    if (name[0] == '/' || fd == AT_FDCWD)
        return !strcmp(name, race_dir);
    char link[64], dir[PATH_MAX], path[PATH_MAX + 256];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, dir, sizeof(dir) - 1);
    if (n <= 0)
        return false;
    dir[n] = '\0';
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return !strcmp(path, race_dir);
}

DIR *opendir(const char *name) {
    static DIR *(*real)(const char *);
    if (!real)
        real = (DIR * (*)(const char *)) dlsym(RTLD_NEXT, "opendir");
    if (names_race_dir(AT_FDCWD, name))
        race_swap();
    return real(name);
}

int openat(int fd, const char *name, int flags, ...) {
    static int (*real)(int, const char *, int, ...);
    if (!real)
        real = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat");
    unsigned mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, unsigned);
        va_end(ap);
    }
    if (names_race_dir(fd, name))
        race_swap();
    return real(fd, name, flags, mode);
}

static bool exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

static void test_remove_tree_link_swapped_in(void **state) {
    (void)state;
    char root[] = "/tmp/gs-gc-race-XXXXXX", tree[64], sub[80], outside[64], victim[80], file[96];
    assert_non_null(mkdtemp(root));
    snprintf(tree, sizeof(tree), "%s/tree", root);
    snprintf(sub, sizeof(sub), "%s/state", tree);
    snprintf(file, sizeof(file), "%s/region", sub);
    snprintf(outside, sizeof(outside), "%s/outside", root);
    snprintf(victim, sizeof(victim), "%s/victim", outside);
    assert_int_equal(mkdir(tree, 0755), 0);
    assert_int_equal(mkdir(sub, 0755), 0);
    assert_int_equal(mkdir(outside, 0755), 0);
    assert_int_equal(gs_write_file_atomic(file, "r", 1, false), 0);
    assert_int_equal(gs_write_file_atomic(victim, "v", 1, false), 0);

    snprintf(race_dir, sizeof(race_dir), "%s", sub);
    snprintf(race_target, sizeof(race_target), "%s", outside);
    race_swaps = 0;
    int r = gs_remove_tree(tree);
    race_dir[0] = '\0';
    assert_int_equal(race_swaps, 1); /* the walk opened the directory, and the link was swapped in then */
    /* Nothing outside the tree was touched: the old walk deleted the victim here. */
    assert_true(exists(victim));
    assert_true(exists(outside));
    /* What the race left (the link, the moved directory) goes on the next pass, still inside. */
    if (r < 0)
        assert_int_equal(gs_remove_tree(tree), 0);
    assert_false(exists(tree));
    assert_true(exists(victim));

    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
    assert_int_equal(system(cmd), 0);
}

/* The Node name (gs_node_name): the flag wins, $NODE_NAME is checked, the host name lower-cased. */
static void test_node_name(void **state) {
    (void)state;
    char out[256], err[512];
    const char *from = NULL;
    /* the host name with capitals, as the kubelet registers it */
    assert_int_equal(
        gs_node_name_pick(NULL, NULL, "GPU-Host7.Example.COM", out, sizeof(out), &from, err, sizeof(err)), 0);
    assert_string_equal(out, "gpu-host7.example.com");
    assert_string_equal(from, "the host name");
    assert_int_equal(gs_node_name_pick("", "", "Box", out, sizeof(out), &from, err, sizeof(err)), 0);
    assert_string_equal(out, "box");
    /* $NODE_NAME over the host name, taken as it is */
    assert_int_equal(gs_node_name_pick(NULL, "node-1.a", "Box", out, sizeof(out), &from, err, sizeof(err)), 0);
    assert_string_equal(out, "node-1.a");
    assert_string_equal(from, "NODE_NAME");
    /* the flag over both, as given (no lower-casing, no check: the caller's own choice) */
    assert_int_equal(gs_node_name_pick("Flag-Node", "node-1", "Box", out, sizeof(out), &from, err, sizeof(err)), 0);
    assert_string_equal(out, "Flag-Node");
    assert_string_equal(from, "--node-name");
    assert_int_equal(gs_node_name_pick("n", "BAD NAME", NULL, out, sizeof(out), NULL, NULL, 0), 0);
    assert_string_equal(out, "n");
    /* a hostile $NODE_NAME: refused with its reason, nothing in out */
    static const struct { const char *env, *why; } bad[] = {
        { "Node-1", "an upper-case letter" },
        { "node/../../x", "a character other than" },
        { "node_1", "a character other than" },
        { "-node", "starting or ending with '-'" },
        { "node-", "starting or ending with '-'" },
        { "a.-b", "starting or ending with '-'" },
        { "a-.b", "starting or ending with '-'" },
        { "a..b", "an empty label" },
        { ".a", "starting with '.'" },
        { "a.", "ending with '.'" },
        { "a b", "a character other than" },
    };
    for (size_t i = 0; i < GS_ARRAY_SIZE(bad); i++) {
        from = NULL;
        memset(out, 'x', sizeof(out));
        err[0] = '\0';
        assert_int_equal(gs_node_name_pick(NULL, bad[i].env, "box", out, sizeof(out), &from, err, sizeof(err)),
                         -EINVAL);
        assert_string_equal(out, "");
        assert_string_equal(from, "NODE_NAME");
        assert_non_null(strstr(err, "$NODE_NAME"));
        assert_non_null(strstr(err, bad[i].env));
        assert_non_null(strstr(err, bad[i].why));
    }
    char longname[300];
    memset(longname, 'a', 254);
    longname[254] = '\0';
    assert_int_equal(gs_node_name_pick(NULL, longname, "box", out, sizeof(out), NULL, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "longer than 253"));
    longname[253] = '\0';
    assert_int_equal(gs_dns_subdomain_check(longname, err, sizeof(err)), 0);
    assert_int_equal(gs_dns_subdomain_check("a", err, sizeof(err)), 0);
    assert_int_equal(gs_dns_subdomain_check("0-a.b-9", err, sizeof(err)), 0);
    assert_int_equal(gs_dns_subdomain_check("", err, sizeof(err)), -EINVAL);
    /* no name at all; a name that does not fit */
    assert_int_equal(gs_node_name_pick(NULL, NULL, "", out, sizeof(out), NULL, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "no host name"));
    assert_int_equal(gs_node_name_pick("abcdef", NULL, NULL, out, 4, NULL, err, sizeof(err)), -ENAMETOOLONG);
    assert_string_equal(out, "");
    assert_non_null(strstr(err, "--node-name 'abcdef'"));

    /* gs_node_name reads the environment and the host name */
    const char *saved = getenv("NODE_NAME");
    char keep[512] = "";
    if (saved)
        gs_strlcpy(keep, saved, sizeof(keep));
    assert_int_equal(setenv("NODE_NAME", "Evil;rm", 1), 0);
    assert_int_equal(gs_node_name(NULL, out, sizeof(out), &from, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "'Evil;rm'"));
    assert_int_equal(gs_node_name("flag-wins", out, sizeof(out), &from, err, sizeof(err)), 0);
    assert_string_equal(out, "flag-wins");
    assert_int_equal(setenv("NODE_NAME", "env-node", 1), 0);
    assert_int_equal(gs_node_name(NULL, out, sizeof(out), &from, err, sizeof(err)), 0);
    assert_string_equal(out, "env-node");
    assert_int_equal(unsetenv("NODE_NAME"), 0);
    char host[HOST_NAME_MAX + 1] = "";
    if (gethostname(host, sizeof(host)) == 0 && host[0]) {
        assert_int_equal(gs_node_name(NULL, out, sizeof(out), &from, err, sizeof(err)), 0);
        assert_string_equal(from, "the host name");
        assert_int_equal(strcasecmp(out, host), 0);
        for (const char *p = out; *p; p++)
            assert_false(*p >= 'A' && *p <= 'Z');
    }
    if (saved)
        assert_int_equal(setenv("NODE_NAME", keep, 1), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_uint),
        cmocka_unit_test(test_has_suffix),
        cmocka_unit_test(test_strlcpy),
        cmocka_unit_test(test_files),
        cmocka_unit_test(test_read_file_refuses_special_files),
        cmocka_unit_test(test_open_write_refuses_special_files),
        cmocka_unit_test(test_remove_tree_link_swapped_in),
        cmocka_unit_test(test_node_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
