/* guard_files.c: the I/O half of guard_layout.h: a guard directory made whole or not at all, the
 * node's ld.so.preload, the directory removed. */
#include "guard_layout.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/util.h"

/* "cannot VERB DIR/NAME: why" (NAME may be NULL); returns r. */
static int failed(int r, const char *verb, const char *dir, const char *name, char *err, size_t errlen) {
    snprintf(err, errlen, "cannot %s %s%s%s: %s", verb, dir, name ? "/" : "", name ? name : "", strerror(-r));
    return r;
}

/* The guard's own files in at (the directory being made, or dir itself), named in messages as
 * under dir (the directory the caller knows). */
static int write_files(const char *at, const char *dir, const char *text, size_t len, char *err, size_t errlen) {
    char path[PATH_MAX];
    int r;
    if ((r = gs_guard_path(at, GS_GUARD_DIR_STATE, path, sizeof(path))) < 0 || (r = gs_mkdir_p(path, 0755)) < 0)
        return failed(r, "create", dir, GS_GUARD_DIR_STATE, err, errlen);
    /* The counters region, empty (the guard sizes and initialises it) and writable by the
     * container's processes whatever their user: the directory is root's. */
    if ((r = gs_guard_path(at, GS_GUARD_DIR_REGION, path, sizeof(path))) < 0)
        return failed(r, "create", dir, GS_GUARD_DIR_REGION, err, errlen);
    int fd = gs_open_write(path, 0, 0666, NULL, 0);
    if (fd < 0 || fchmod(fd, 0666) < 0) {
        r = fd < 0 ? fd : -errno;
        if (fd >= 0)
            close(fd);
        return failed(r, "create", dir, GS_GUARD_DIR_REGION, err, errlen);
    }
    close(fd);
    if ((r = gs_guard_path(at, GS_GUARD_DIR_LIMITS, path, sizeof(path))) < 0 ||
        (r = gs_write_file_atomic(path, text, len, false)) < 0)
        return failed(r, "write", dir, GS_GUARD_DIR_LIMITS, err, errlen);
    return 0;
}

int gs_guard_dir_create(const char *dir, const char *text, size_t len, gs_guard_fill_fn fill, void *ctx, char *err,
                        size_t errlen) {
    struct stat st;
    int r;
    if (stat(dir, &st) == 0) { /* there already: rewritten in place, file by file */
        if (!S_ISDIR(st.st_mode))
            return failed(-ENOTDIR, "create", dir, NULL, err, errlen);
        if ((r = write_files(dir, dir, text, len, err, errlen)) < 0)
            return r;
        return fill ? fill(dir, ctx, err, errlen) : 0;
    }
    if (errno != ENOENT)
        return failed(-errno, "create", dir, NULL, err, errlen);
    char parent[PATH_MAX], tmp[PATH_MAX];
    const char *slash = strrchr(dir, '/');
    size_t plen = slash ? (size_t)(slash - dir) : 0;
    if (plen >= sizeof(parent) || snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", dir, (long)getpid()) >= (int)sizeof(tmp))
        return failed(-ENAMETOOLONG, "create", dir, NULL, err, errlen);
    memcpy(parent, dir, plen);
    parent[plen] = '\0';
    if (plen && (r = gs_mkdir_p(parent, 0755)) < 0)
        return failed(r, "create", parent, NULL, err, errlen);
    /* A leftover at the temporary name (a create of this process's number that died) goes first. */
    if ((r = gs_remove_tree(tmp)) < 0 && r != -ENOENT)
        return failed(r, "remove", tmp, NULL, err, errlen);
    if (mkdir(tmp, 0755) < 0)
        return failed(-errno, "create", dir, NULL, err, errlen);
    if ((r = write_files(tmp, dir, text, len, err, errlen)) == 0 && (!fill || (r = fill(tmp, ctx, err, errlen)) == 0) &&
        rename(tmp, dir) < 0)
        r = failed(-errno, "create", dir, NULL, err, errlen);
    if (r < 0)
        gs_remove_tree(tmp);
    return r;
}

int gs_guard_preload_ensure(const char *root, char *preload, size_t len, char *err, size_t errlen) {
    static const char line[] = GS_GUARD_LIB_IN_CONTAINER "\n";
    int r = gs_guard_path(root, GS_GUARD_ROOT_PRELOAD, preload, len);
    if (r < 0)
        return failed(r, "write", root, GS_GUARD_ROOT_PRELOAD, err, errlen);
    if (access(preload, R_OK) != 0 && (r = gs_write_file_atomic(preload, line, sizeof(line) - 1, false)) < 0)
        return failed(r, "write", preload, NULL, err, errlen);
    return 0;
}

int gs_guard_dir_remove(const char *dir) {
    int r = gs_remove_tree(dir);
    if (r == -ENOENT)
        r = 0;
    const char *slash = strrchr(dir, '/');
    char parent[PATH_MAX], prefix[NAME_MAX + 8];
    size_t plen = slash ? (size_t)(slash - dir) : 0;
    if (plen >= sizeof(parent) ||
        snprintf(prefix, sizeof(prefix), "%s.tmp.", slash ? slash + 1 : dir) >= (int)sizeof(prefix))
        return r;
    memcpy(parent, dir, plen);
    parent[plen] = '\0';
    DIR *d = opendir(plen ? parent : slash ? "/" : ".");
    if (!d)
        return r;
    size_t n = strlen(prefix);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, prefix, n) != 0)
            continue;
        int rr = gs_remove_tree_at(dirfd(d), e->d_name);
        if (rr < 0 && rr != -ENOENT && r == 0)
            r = rr;
    }
    closedir(d);
    return r;
}
