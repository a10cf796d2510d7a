/* ldcache.c: see ldcache.h. */
#include "cdi/ldcache.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define OLD_MAGIC "ld.so-1.7.0"
#define NEW_MAGIC "glibc-ld.so.cache1.1"
#define NEW_HEADER 48
#define NEW_ENTRY 24
#define OLD_HEADER 16 /* magic[11], padding, uint32 nlibs */
#define OLD_ENTRY 12

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A NUL-terminated string at `off` of the region [base, base + len), or NULL. */
static const char *string_at(const unsigned char *base, size_t len, uint32_t off) {
    if (off >= len)
        return NULL;
    const void *nul = memchr(base + off, '\0', len - off);
    return nul ? (const char *)base + off : NULL;
}

uint32_t gs_ldcache_native_flags(void) {
#if defined(__x86_64__)
    return GS_LDCACHE_X86_64;
#elif defined(__aarch64__)
    return GS_LDCACHE_AARCH64;
#else
    return 0;
#endif
}

int gs_ldcache_walk(const char *name, const unsigned char *data, size_t len, gs_ldcache_fn fn, void *ctx, char *err,
                    size_t errlen) {
    size_t off = 0;
    if (len >= sizeof(OLD_MAGIC) - 1 && !memcmp(data, OLD_MAGIC, sizeof(OLD_MAGIC) - 1)) {
        if (len < OLD_HEADER) {
            snprintf(err, errlen, "%s: truncated header", name);
            return -EINVAL;
        }
        uint32_t n_old = le32(data + 12);
        if (n_old > (len - OLD_HEADER) / OLD_ENTRY) {
            snprintf(err, errlen, "%s: %u entries do not fit in %zu bytes", name, n_old, len);
            return -EINVAL;
        }
        off = (OLD_HEADER + (size_t)n_old * OLD_ENTRY + 7) & ~(size_t)7; /* the new table follows, aligned */
    }
    if (off > len || len - off < NEW_HEADER || memcmp(data + off, NEW_MAGIC, sizeof(NEW_MAGIC) - 1) != 0) {
        snprintf(err, errlen, "%s: not a glibc ld.so.cache (no '%s' table)", name, NEW_MAGIC);
        return -EINVAL;
    }
    const unsigned char *base = data + off;
    size_t blen = len - off;
    uint32_t n = le32(base + 20);
    if (n > (blen - NEW_HEADER) / NEW_ENTRY) {
        snprintf(err, errlen, "%s: %u entries do not fit in %zu bytes", name, n, len);
        return -EINVAL;
    }
    for (uint32_t i = 0; i < n; i++) {
        const unsigned char *e = base + NEW_HEADER + (size_t)i * NEW_ENTRY;
        const char *key = string_at(base, blen, le32(e + 4));
        const char *value = string_at(base, blen, le32(e + 8));
        if (!key || !value) {
            snprintf(err, errlen, "%s: entry %u points outside the file", name, i);
            return -EINVAL;
        }
        if (fn(key, value, le32(e), ctx))
            break;
    }
    return 0;
}
