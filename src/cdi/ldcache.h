/* ldcache.h: the dynamic linker's cache (/etc/ld.so.cache, glibc's "glibc-ld.so.cache1.1" format,
 * alone or after the old "ld.so-1.7.0" table), to find the driver's libraries under a driver root
 * as the linker would. Pure: the caller reads the file. Layout (glibc elf/cache.h): a 48-byte
 * header (magic, version, nlibs, len_strings, flags, extension offset), nlibs 24-byte entries
 * (flags, key and value string offsets relative to the header, OS version, hwcap), then strings. */
#ifndef GS_LDCACHE_H
#define GS_LDCACHE_H

#include <stddef.h>
#include <stdint.h>

#define GS_LDCACHE_X86_64 0x0303u  /* FLAG_ELF_LIBC6 | FLAG_X8664_LIB64 */
#define GS_LDCACHE_AARCH64 0x0a03u /* FLAG_ELF_LIBC6 | FLAG_AARCH64_LIB64 */

/* Called for each entry: the library's name (soname, "libcuda.so.1"), its path, glibc's flags.
 * Returning non-zero stops the walk. */
typedef int (*gs_ldcache_fn)(const char *soname, const char *path, uint32_t flags, void *ctx);

/* Walks the cache. Returns 0, or -EINVAL with "NAME: message" in err for a file that is not a
 * cache or whose offsets point outside it; nothing is reported for a damaged file. */
int gs_ldcache_walk(const char *name, const unsigned char *data, size_t len, gs_ldcache_fn fn, void *ctx, char *err,
                    size_t errlen);

/* The flags of this build's architecture (GS_LDCACHE_X86_64, ...; 0 when unknown: any). */
uint32_t gs_ldcache_native_flags(void);

#endif
