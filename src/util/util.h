/* util.h: small helpers shared by every component: cleanup attributes (systemd style),
 * bounded string copies and integer parsing (quantities: quantity.h). Nothing here does I/O except the file helpers. */
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

/* True when s ends with suffix (an empty suffix: always). */
bool gs_has_suffix(const char *s, const char *suffix);

/* Parses a decimal unsigned integer in [min, max]; the whole string must be the number.
 * Returns 0 or -EINVAL / -ERANGE. */
int gs_parse_uint(const char *s, unsigned long long min, unsigned long long max, unsigned long long *out);

/* Reads a whole regular file (at most max bytes) into a NUL-terminated buffer. Returns 0 or
 * -errno: -EFBIG when larger than max, -EISDIR for a directory, -EINVAL for anything else that is
 * not a regular file (a FIFO, a socket, a device), which is refused without blocking: the file is
 * checked before it is opened, opened O_NONBLOCK (a FIFO's open would wait for a writer for
 * ever) and checked again on the open descriptor. A symbolic link is followed (a ConfigMap's
 * files are links through `..data`): use GS_READ_NOFOLLOW for files someone else can replace. */
int gs_read_file(const char *path, size_t max, char **out, size_t *len);

/* gs_read_file_ex flags. */
#define GS_READ_NOFOLLOW 1u /* the last component must not be a symbolic link (-ELOOP) */

/* gs_read_file with flags, and on error "PATH: why" in err (e.g. "PATH: a FIFO, not a regular
 * file"; err may be NULL). */
int gs_read_file_ex(const char *path, size_t max, unsigned flags, char **out, size_t *len, char *err, size_t errlen);

/* gs_open_write flags. */
#define GS_WRITE_TRUNC 1u  /* empty the file (after it is known to be a regular file) */
#define GS_WRITE_APPEND 2u /* O_APPEND */
#define GS_WRITE_EXCL 4u   /* O_EXCL: the file must not exist yet */

/* Opens path for writing (O_WRONLY, created with mode if missing) without ever blocking or
 * following a link: a FIFO, socket, device or directory is refused by its kind, from lstat before
 * the open (opening a device can have effects of its own) and from fstat after it (the name may
 * have been replaced in between); the open itself is O_NONBLOCK | O_NOFOLLOW | O_NOCTTY |
 * O_CLOEXEC, so a FIFO swapped in at the last moment fails at once (ENXIO) instead of waiting for
 * a reader. O_NONBLOCK is cleared again before the descriptor is returned. Returns the descriptor,
 * or -errno with "PATH: why" in err (may be NULL): -ELOOP for a symbolic link, -EISDIR for a
 * directory, -EINVAL for any other kind ("PATH: a FIFO, not a regular file"). */
int gs_open_write(const char *path, unsigned flags, unsigned mode, char *err, size_t errlen);
/* The same as a stdio stream ("w" or "a" by flags); NULL with errno set and err filled. */
FILE *gs_fopen_write(const char *path, unsigned flags, char *err, size_t errlen);

/* Writes data to path atomically: temp file in the same directory (created afresh with
 * gs_open_write and GS_WRITE_EXCL: whatever was planted at its name is never written through),
 * fsync optional, rename. */
int gs_write_file_atomic(const char *path, const void *data, size_t len, bool sync);

/* Creates dir and its parents (mode 0755 for parents, mode for the last). */
int gs_mkdir_p(const char *dir, unsigned mode);

/* Removes the directory NAME in the directory open at PARENT (AT_FDCWD: the working directory)
 * and everything in it, without following a symbolic link anywhere below PARENT: for trees
 * someone else can write while they are removed (a container's guard state). A link is removed
 * as a link; a tree deeper than 32 levels is left. 0 (also when it does not exist) or -errno. */
int gs_remove_tree_at(int parent, const char *name);
/* The same by path: the last component is opened O_NOFOLLOW from its parent directory. */
int gs_remove_tree(const char *dir);

/* The agent's Node name, as every component works it out: flag (--node-name) when set and not
 * empty, else env ($NODE_NAME, which the chart sets from spec.nodeName) when set and not empty,
 * else host (the host name) lower-cased, as the kubelet lower-cases its hostname-derived node
 * name. $NODE_NAME comes from the environment, so it must be a DNS-1123 subdomain (lower-case
 * letters, digits, '-' and '.', labels starting and ending with a letter or digit, at most 253
 * characters); the flag is taken as given. *from (may be NULL) says where the name came from:
 * "--node-name", "NODE_NAME" or "the host name". Pure. Returns 0, or -EINVAL (a bad $NODE_NAME, no
 * host name) or -ENAMETOOLONG (longer than len - 1), with why in err (may be NULL). */
int gs_node_name_pick(const char *flag, const char *env, const char *host, char *out, size_t len, const char **from,
                      char *err, size_t errlen);
/* gs_node_name_pick with getenv("NODE_NAME") and gethostname(). */
int gs_node_name(const char *flag, char *out, size_t len, const char **from, char *err, size_t errlen);

/* 0 when name is a DNS-1123 subdomain (a Kubernetes object name such as a Node's), else -EINVAL
 * with why in err (may be NULL). Pure. */
int gs_dns_subdomain_check(const char *name, char *err, size_t errlen);

/* Monotonic clock in nanoseconds. */
uint64_t gs_now_ns(void);

#endif
