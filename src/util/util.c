/* util.c: implementation of the helpers declared in util.h. */
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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

int gs_parse_uint(const char *s, unsigned long long min, unsigned long long max, unsigned long long *out) {
    if (!s || !*s || !isdigit((unsigned char)*s))
        return -EINVAL;
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE)
        return -ERANGE;
    if (*end != '\0')
        return -EINVAL;
    if (v < min || v > max)
        return -ERANGE;
    *out = v;
    return 0;
}

int gs_parse_size(const char *s, unsigned long long *bytes) {
    if (!s || !isdigit((unsigned char)*s))
        return -EINVAL;
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE)
        return -ERANGE;
    static const struct { const char *suffix; unsigned long long mult; } units[] = {
        { "", 1ULL },
        { "B", 1ULL },
        { "K", 1ULL << 10 }, { "KiB", 1ULL << 10 }, { "KB", 1000ULL },
        { "M", 1ULL << 20 }, { "MiB", 1ULL << 20 }, { "MB", 1000000ULL },
        { "G", 1ULL << 30 }, { "GiB", 1ULL << 30 }, { "GB", 1000000000ULL },
        { "T", 1ULL << 40 }, { "TiB", 1ULL << 40 }, { "TB", 1000000000000ULL },
    };
    for (size_t i = 0; i < GS_ARRAY_SIZE(units); i++) {
        if (strcmp(end, units[i].suffix) == 0) {
            if (v > ULLONG_MAX / units[i].mult)
                return -ERANGE;
            *bytes = v * units[i].mult;
            return 0;
        }
    }
    return -EINVAL;
}

int gs_read_file(const char *path, size_t max, char **out, size_t *len) {
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    if (S_ISDIR(st.st_mode))
        return -EISDIR;
    size_t cap = 4096, n = 0;
    _cleanup_free_ char *buf = malloc(cap + 1);
    if (!buf)
        return -ENOMEM;
    for (;;) {
        if (n == cap) {
            if (cap > max)
                return -EFBIG;
            cap *= 2;
            char *nb = realloc(buf, cap + 1);
            if (!nb)
                return -ENOMEM;
            buf = nb;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n > max)
            return -EFBIG;
    }
    buf[n] = '\0';
    *out = buf;
    buf = NULL;
    if (len)
        *len = n;
    return 0;
}

int gs_write_file_atomic(const char *path, const void *data, size_t len, bool sync) {
    char tmp[PATH_MAX];
    int n = snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof(tmp))
        return -ENAMETOOLONG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
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

uint64_t gs_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}
