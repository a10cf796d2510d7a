/* util.c: implementation of the helpers declared in util.h. */
#include "util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

int gs_strlcpy(char *dst, const char *src, size_t dstsz) {
    if (dstsz == 0)
        return -ENAMETOOLONG;
    size_t n = strlen(src);
    if (n >= dstsz) {
        memcpy(dst, src, dstsz - 1);
        dst[dstsz - 1] = '\0';
        return -ENAMETOOLONG;
    }
    memcpy(dst, src, n + 1);
    return 0;
}

bool gs_has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* The decimal number s starts with (a digit first: no sign, no space); *end: what follows it. */
static int leading_uint(const char *s, unsigned long long *v, char **end) {
    if (!s || !isdigit((unsigned char)*s))
        return -EINVAL;
    errno = 0;
    *v = strtoull(s, end, 10);
    return errno == ERANGE ? -ERANGE : 0;
}

int gs_parse_uint(const char *s, unsigned long long min, unsigned long long max, unsigned long long *out) {
    char *end = NULL;
    unsigned long long v;
    int r = leading_uint(s, &v, &end);
    if (r < 0)
        return r;
    if (*end != '\0')
        return -EINVAL;
    if (v < min || v > max)
        return -ERANGE;
    *out = v;
    return 0;
}

/* What a file that is not a regular one is, for the error message. */
static const char *file_kind(mode_t mode) {
    switch (mode & S_IFMT) {
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFLNK: return "a symbolic link (not followed)";
    default: return "of an unknown type";
    }
}

/* 0 for a regular file of at most max bytes, else the error (and its text in err). */
static int check_regular(const char *path, const struct stat *st, size_t max, char *err, size_t errlen) {
    int r = 0;
    if (!S_ISREG(st->st_mode))
        r = S_ISDIR(st->st_mode) ? -EISDIR : S_ISLNK(st->st_mode) ? -ELOOP : -EINVAL;
    else if (st->st_size > 0 && (unsigned long long)st->st_size > max)
        r = -EFBIG;
    if (r == -EFBIG && err)
        snprintf(err, errlen, "%s: larger than %zu bytes", path, max);
    else if (r < 0 && err)
        snprintf(err, errlen, "%s: %s, not a regular file", path, file_kind(st->st_mode));
    return r;
}

static int io_error(const char *path, int r, size_t max, char *err, size_t errlen) {
    if (err && r == -EFBIG)
        snprintf(err, errlen, "%s: larger than %zu bytes", path, max);
    else if (err)
        snprintf(err, errlen, "%s: %s", path, strerror(-r));
    return r;
}

int gs_read_file_ex(const char *path, size_t max, unsigned flags, char **out, size_t *len, char *err, size_t errlen) {
    bool nofollow = flags & GS_READ_NOFOLLOW;
    /* Looked at before it is opened: opening a device can have effects of its own. */
    struct stat st;
    if ((nofollow ? lstat(path, &st) : stat(path, &st)) < 0)
        return io_error(path, -errno, max, err, errlen);
    int r = check_regular(path, &st, max, err, errlen);
    if (r < 0)
        return r;
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (nofollow ? O_NOFOLLOW : 0));
    if (fd < 0)
        return io_error(path, -errno, max, err, errlen);
    /* And again on what was opened: the name may have been replaced in between. */
    if (fstat(fd, &st) < 0)
        return io_error(path, -errno, max, err, errlen);
    if ((r = check_regular(path, &st, max, err, errlen)) < 0)
        return r;
    size_t cap = 4096, n = 0;
    _cleanup_free_ char *buf = malloc(cap + 1);
    if (!buf)
        return io_error(path, -ENOMEM, max, err, errlen);
    for (;;) {
        if (n == cap) {
            if (cap > max)
                return io_error(path, -EFBIG, max, err, errlen);
            cap *= 2;
            char *nb = realloc(buf, cap + 1);
            if (!nb)
                return io_error(path, -ENOMEM, max, err, errlen);
            buf = nb;
        }
        ssize_t rd = read(fd, buf + n, cap - n);
        if (rd < 0) {
            if (errno == EINTR)
                continue;
            return io_error(path, -errno, max, err, errlen);
        }
        if (rd == 0)
            break;
        n += (size_t)rd;
        if (n > max)
            return io_error(path, -EFBIG, max, err, errlen);
    }
    buf[n] = '\0';
    *out = buf;
    buf = NULL;
    if (len)
        *len = n;
    return 0;
}

int gs_read_file(const char *path, size_t max, char **out, size_t *len) {
    return gs_read_file_ex(path, max, 0, out, len, NULL, 0);
}

int gs_open_write(const char *path, unsigned flags, unsigned mode, char *err, size_t errlen) {
    struct stat st;
    /* Looked at before it is opened (an O_EXCL open never opens what is there). */
    if (!(flags & GS_WRITE_EXCL)) {
        if (lstat(path, &st) == 0) {
            int r = check_regular(path, &st, SIZE_MAX, err, errlen);
            if (r < 0)
                return r;
        } else if (errno != ENOENT) {
            return io_error(path, -errno, 0, err, errlen);
        }
    }
    int oflags = O_WRONLY | O_CREAT | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC;
    if (flags & GS_WRITE_APPEND)
        oflags |= O_APPEND;
    if (flags & GS_WRITE_EXCL)
        oflags |= O_EXCL;
    int fd = open(path, oflags, (mode_t)mode);
    if (fd < 0) {
        int e = errno;
        /* Swapped in after the lstat: a link (ELOOP), a FIFO without a reader or a socket (ENXIO). */
        if (e == ELOOP || e == ENXIO) {
            if (err)
                snprintf(err, errlen, "%s: %s, not a regular file", path,
                         e == ELOOP ? "a symbolic link (not followed)" : "a FIFO or a socket");
            return e == ELOOP ? -ELOOP : -EINVAL;
        }
        return io_error(path, -e, 0, err, errlen);
    }
    /* And again on what was opened: the name may have been replaced in between. */
    int r = fstat(fd, &st) < 0 ? io_error(path, -errno, 0, err, errlen) : check_regular(path, &st, SIZE_MAX, err, errlen);
    if (r == 0 && (flags & GS_WRITE_TRUNC) && ftruncate(fd, 0) < 0)
        r = io_error(path, -errno, 0, err, errlen);
    int fl = r == 0 ? fcntl(fd, F_GETFL) : -1;
    if (r == 0 && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0))
        r = io_error(path, -errno, 0, err, errlen);
    if (r < 0) {
        close(fd);
        return r;
    }
    return fd;
}

FILE *gs_fopen_write(const char *path, unsigned flags, char *err, size_t errlen) {
    int fd = gs_open_write(path, flags, 0666, err, errlen);
    if (fd < 0) {
        errno = -fd;
        return NULL;
    }
    FILE *f = fdopen(fd, flags & GS_WRITE_APPEND ? "a" : "w");
    if (!f) {
        int e = errno;
        close(fd);
        io_error(path, -e, 0, err, errlen);
        errno = e;
    }
    return f;
}

int gs_write_file_atomic(const char *path, const void *data, size_t len, bool sync) {
    char tmp[PATH_MAX];
    int n = snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof(tmp))
        return -ENAMETOOLONG;
    /* A leftover (or something planted) at the temporary name is removed as what it is (a link as
     * a link), and the file is made afresh: never written through. */
    if (unlink(tmp) < 0 && errno != ENOENT && errno != EISDIR)
        return -errno;
    int fd = gs_open_write(tmp, GS_WRITE_EXCL, 0644, NULL, 0);
    if (fd < 0)
        return fd;
    const char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            int e = -errno;
            close(fd);
            unlink(tmp);
            return e;
        }
        p += w;
        left -= (size_t)w;
    }
    if (sync && fsync(fd) < 0) {
        int e = -errno;
        close(fd);
        unlink(tmp);
        return e;
    }
    if (close(fd) < 0) {
        int e = -errno;
        unlink(tmp);
        return e;
    }
    if (rename(tmp, path) < 0) {
        int e = -errno;
        unlink(tmp);
        return e;
    }
    return 0;
}

int gs_mkdir_p(const char *dir, unsigned mode) {
    char buf[PATH_MAX];
    if (gs_strlcpy(buf, dir, sizeof(buf)) < 0)
        return -ENAMETOOLONG;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(buf, mode) < 0 && errno != EEXIST)
        return -errno;
    struct stat st;
    if (stat(buf, &st) < 0)
        return -errno;
    if (!S_ISDIR(st.st_mode))
        return -ENOTDIR;
    return 0;
}

/* How deep remove_contents goes: a deeper tree (a container can make one in its state
 * directory) is left, with the directories above it, rather than run out of descriptors. */
#define REMOVE_MAX_DEPTH 32

/* Empties the directory open at dfd (taken over and closed). Every step is relative to a
 * directory descriptor: an entry is unlinked as what it is, and descended into only through
 * openat(O_DIRECTORY | O_NOFOLLOW), so a symbolic link swapped in for a directory while this runs
 * is removed as a link, never followed out of the tree. Passes repeat while they remove
 * something (entries that changed under a pass). 0 when empty, else -errno. */
static int remove_contents(int dfd, unsigned depth) {
    DIR *d = fdopendir(dfd);
    if (!d) {
        int r = -errno;
        close(dfd);
        return r;
    }
    int r = 0;
    for (unsigned pass = 0; pass < 4; pass++) {
        bool removed = false;
        r = 0;
        rewinddir(d);
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            if (unlinkat(dirfd(d), e->d_name, 0) == 0) { /* anything but a directory */
                removed = true;
                continue;
            }
            if (errno == EISDIR) {
                int sub = depth < REMOVE_MAX_DEPTH ? openat(dirfd(d), e->d_name,
                                                            O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
                                                   : (errno = ELOOP, -1);
                if (sub >= 0 && remove_contents(sub, depth + 1) == 0 && unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR) == 0) {
                    removed = true;
                    continue;
                }
            }
            if (errno != ENOENT)
                r = -errno; /* a link swapped in (ELOOP, ENOTDIR), not emptied: the next pass */
        }
        if (r == 0 || !removed)
            break;
    }
    closedir(d);
    return r;
}

int gs_remove_tree_at(int parent, const char *name) {
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return errno == ENOENT ? 0 : -errno;
    int r = remove_contents(fd, 0);
    if (r < 0)
        return r;
    return unlinkat(parent, name, AT_REMOVEDIR) < 0 && errno != ENOENT ? -errno : 0;
}

int gs_remove_tree(const char *dir) {
    char parent[PATH_MAX];
    if (gs_strlcpy(parent, dir, sizeof(parent)) < 0)
        return -ENAMETOOLONG;
    char *slash = strrchr(parent, '/');
    if (!slash)
        return gs_remove_tree_at(AT_FDCWD, dir);
    if (!slash[1])
        return -EINVAL; /* "dir/": name it without the slash */
    *slash = '\0';
    _cleanup_close_ int pfd = open(slash == parent ? "/" : parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0)
        return -errno;
    return gs_remove_tree_at(pfd, slash + 1);
}

int gs_dns_subdomain_check(const char *name, char *err, size_t errlen) {
    size_t n = strlen(name);
    const char *why = NULL;
    if (!n)
        why = "empty";
    else if (n > 253)
        why = "longer than 253 characters";
    for (size_t i = 0; !why && i < n; i++) {
        char c = name[i], prev = i ? name[i - 1] : '.', next = i + 1 < n ? name[i + 1] : '.';
        if (c == '.' && prev == '.')
            why = i ? "an empty label, \"..\"" : "starting with '.'";
        else if (c == '-' && (prev == '.' || next == '.'))
            why = "a label starting or ending with '-'";
        else if (c != '.' && c != '-' && !(c >= 'a' && c <= 'z') && !(c >= '0' && c <= '9'))
            why = c >= 'A' && c <= 'Z' ? "an upper-case letter" : "a character other than a-z, 0-9, '-' and '.'";
    }
    if (!why && name[n - 1] == '.')
        why = "ending with '.'";
    if (!why)
        return 0;
    if (err && errlen)
        snprintf(err, errlen, "not a DNS-1123 subdomain (%s)", why);
    return -EINVAL;
}

int gs_node_name_pick(const char *flag, const char *env, const char *host, char *out, size_t len, const char **from,
                      char *err, size_t errlen) {
    const char *src = "the host name", *name = host;
    if (flag && flag[0])
        src = "--node-name", name = flag;
    else if (env && env[0])
        src = "NODE_NAME", name = env;
    if (from)
        *from = src;
    if (len)
        out[0] = '\0';
    char why[128];
    if (!name || !name[0]) {
        if (err && errlen)
            snprintf(err, errlen, "no --node-name, no $NODE_NAME and no host name");
        return -EINVAL;
    }
    if (name == env && gs_dns_subdomain_check(env, why, sizeof(why)) < 0) {
        if (err && errlen)
            snprintf(err, errlen, "$NODE_NAME '%.256s' is %s: not a Node name", env, why);
        return -EINVAL;
    }
    if (gs_strlcpy(out, name, len) < 0) {
        if (err && errlen)
            snprintf(err, errlen, "%s '%.256s' is longer than %zu characters", src, name, len ? len - 1 : 0);
        if (len)
            out[0] = '\0';
        return -ENAMETOOLONG;
    }
    if (name == host)
        for (char *p = out; *p; p++)
            *p = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p); /* the kubelet's default node name */
    return 0;
}

int gs_node_name(const char *flag, char *out, size_t len, const char **from, char *err, size_t errlen) {
    char host[HOST_NAME_MAX + 1] = "";
    if ((!flag || !flag[0]) && gethostname(host, sizeof(host)) < 0)
        host[0] = '\0';
    host[sizeof(host) - 1] = '\0';
    return gs_node_name_pick(flag, getenv("NODE_NAME"), host, out, len, from, err, errlen);
}

uint64_t gs_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}
