/* util.h: small helpers shared by every component: cleanup attributes (systemd style),
 * bounded string copies and size parsing. Nothing here does I/O except the file helpers. */
#ifndef GS_UTIL_H
#define GS_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define GS_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static inline void gs_freep(void *p) { free(*(void **)p); }
static inline void gs_closep(int *fd) { if (*fd >= 0) close(*fd); }
static inline void gs_fclosep(FILE **f) { if (*f) fclose(*f); }

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _cleanup_free_ _cleanup_(gs_freep)
#define _cleanup_close_ _cleanup_(gs_closep)
#define _cleanup_fclose_ _cleanup_(gs_fclosep)

/* Copies src into dst (size dstsz), always NUL-terminated. Returns -ENAMETOOLONG if cut. */
int gs_strlcpy(char *dst, const char *src, size_t dstsz);

/* Parses a decimal unsigned integer in [min, max]; the whole string must be the number.
 * Returns 0 or -EINVAL / -ERANGE. */
int gs_parse_uint(const char *s, unsigned long long min, unsigned long long max, unsigned long long *out);

/* Parses a size such as "8GiB", "512MiB", "1024" (bytes), "10G" (taken as GiB). Returns 0 or -EINVAL/-ERANGE. */
int gs_parse_size(const char *s, unsigned long long *bytes);

/* Reads a whole file (at most max bytes) into a NUL-terminated buffer. Returns 0 or -errno
 * (-EFBIG when larger than max). */
int gs_read_file(const char *path, size_t max, char **out, size_t *len);

/* Writes data to path atomically: temp file in the same directory, fsync optional, rename. */
int gs_write_file_atomic(const char *path, const void *data, size_t len, bool sync);

/* Creates dir and its parents (mode 0755 for parents, mode for the last). */
int gs_mkdir_p(const char *dir, unsigned mode);

/* Monotonic clock in nanoseconds. */
uint64_t gs_now_ns(void);

#endif
