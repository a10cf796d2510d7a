/* ldcache_write.h: a glibc linker cache writer for the simulated driver root (internal to the
 * simulated NVML library; ldcache_write.c says the format). */
#ifndef GS_SIM_LDCACHE_WRITE_H
#define GS_SIM_LDCACHE_WRITE_H

#include <stddef.h>
#include <stdint.h>

struct sim_ldcache_entry {
    const char *soname; /* "libnvidia-ml.so.1" */
    const char *path;   /* "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", as seen from the root */
};

/* Builds the cache of n entries (at most 1024) with glibc's flags (FLAG_ELF_LIBC6 | the
 * architecture's). Returns 0 with a malloc'd buffer in *out, or -ENOMEM / -E2BIG. */
int sim_ldcache_build(const struct sim_ldcache_entry *entries, size_t n, uint32_t flags, unsigned char **out,
                      size_t *len);

#endif
