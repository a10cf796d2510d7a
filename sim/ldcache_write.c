/* ldcache_write.c: writes a glibc linker cache (/etc/ld.so.cache, the "glibc-ld.so.cache1.1"
 * format that glibc 2.32 and later write alone) for the simulated node's driver root, so that the
 * project's reader (src/cdi/ldcache.c) and the real `ldconfig -p -C FILE` find the stand-in
 * driver libraries as they find a driver's. Pure: the caller writes the bytes. Layout (glibc
 * elf/cache.h): a 48-byte header (magic and version, nlibs, len_strings, flags, extension offset,
 * unused), nlibs 24-byte entries (flags, key and value offsets from the header, OS version,
 * hwcap), then the strings. Entries are sorted as ldconfig sorts them (descending by glibc's
 * _dl_cache_libcmp, which compares digit runs as numbers), because ld.so searches them by halves. */
#include "ldcache_write.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC_VERSION "glibc-ld.so.cache1.1" /* 17-byte magic + "1.1", no NUL */
#define HEADER 48
#define ENTRY 24

static void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

/* glibc's _dl_cache_libcmp: digit runs compare as numbers, the rest byte by byte. */
static int libcmp(const char *p1, const char *p2) {
    while (*p1 != '\0') {
        if (*p1 >= '0' && *p1 <= '9') {
            if (*p2 >= '0' && *p2 <= '9') {
                int val1 = *p1++ - '0', val2 = *p2++ - '0';
                while (*p1 >= '0' && *p1 <= '9')
                    val1 = val1 * 10 + *p1++ - '0';
                while (*p2 >= '0' && *p2 <= '9')
                    val2 = val2 * 10 + *p2++ - '0';
                if (val1 != val2)
                    return val1 - val2;
            } else {
                return 1;
            }
        } else if (*p2 >= '0' && *p2 <= '9') {
            return -1;
        } else if (*p1 != *p2) {
            return *p1 - *p2;
        } else {
            ++p1;
            ++p2;
        }
    }
    return *p1 - *p2;
}

static int by_name_descending(const void *a, const void *b) {
    return libcmp(((const struct sim_ldcache_entry *)b)->soname, ((const struct sim_ldcache_entry *)a)->soname);
}

int sim_ldcache_build(const struct sim_ldcache_entry *entries, size_t n, uint32_t flags, unsigned char **out,
                      size_t *len) {
    *out = NULL;
    *len = 0;
    if (n > 1024)
        return -E2BIG;
    struct sim_ldcache_entry sorted[1024];
    memcpy(sorted, entries, n * sizeof(*entries));
    qsort(sorted, n, sizeof(*sorted), by_name_descending);
    size_t strings = 0;
    for (size_t i = 0; i < n; i++)
        strings += strlen(sorted[i].soname) + 1 + strlen(sorted[i].path) + 1;
    size_t total = HEADER + n * ENTRY + strings;
    unsigned char *buf = calloc(1, total);
    if (!buf)
        return -ENOMEM;
    memcpy(buf, MAGIC_VERSION, sizeof(MAGIC_VERSION) - 1);
    put32(buf + 20, (uint32_t)n);
    put32(buf + 24, (uint32_t)strings);
    buf[28] = 2; /* cache_file_new_flags_endian_little: written on little-endian hosts */
    size_t off = HEADER + n * ENTRY;
    for (size_t i = 0; i < n; i++) {
        unsigned char *e = buf + HEADER + i * ENTRY;
        put32(e, flags);
        size_t kl = strlen(sorted[i].soname) + 1, vl = strlen(sorted[i].path) + 1;
        memcpy(buf + off, sorted[i].soname, kl);
        put32(e + 4, (uint32_t)off);
        off += kl;
        memcpy(buf + off, sorted[i].path, vl);
        put32(e + 8, (uint32_t)off);
        off += vl;
        /* osversion and hwcap stay 0: no minimum kernel, no hardware capability subdirectory */
    }
    *out = buf;
    *len = total;
    return 0;
}
