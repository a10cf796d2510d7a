/* guard_exec.h: inside the guard (guard_exec.c; read by guard_env.c, guard_driver.c and guard_lookup.c):
 * where this process's limits come from, found once at load, and the exec family, posix_spawn, system and
 * popen, wrapped so that every program a guarded process starts loads the guard and gets the same limits. */
#ifndef GS_GUARD_EXEC_H
#define GS_GUARD_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct guard_config {
    char path[512];    /* what the limits are read from; exec'd programs get it as GPUSLICE_GUARD_CONFIG */
    char source[64];   /* where they come from, for messages: the mounted file or "gpuslice exec (pid N)" */
    char ignored[512]; /* a GPUSLICE_GUARD_CONFIG that the mounted file or gpuslice exec overrode */
    bool from_fd;      /* from a sealed memfd: read at load, into text (or why says why not) */
    char *text;
    size_t len;
    char why[160];
    int fd, fd_num; /* GPUSLICE_GUARD_CONFIG=/proc/self/fd/N without gpuslice exec: the guard's copy, N */
};

extern struct guard_config g_cfg;

/* Called once from the guard's constructor, before main (so before the program can close a
 * descriptor or change its environment): finds the limits (guard_exec.c says in which order) and
 * resolves the real exec functions, so that the wrappers call neither malloc nor dlsym (they run
 * in children of fork and vfork, where only async-signal-safe calls are safe). */
void guard_exec_init(const char *mounted_config);

/* Reads up to GS_GUARD_LIMITS_MAX + 1 bytes at offset 0 of fd; NULL with errno on failure. */
char *guard_read_all(int fd, size_t *len);

/* libc's dlsym (the guard defines dlsym itself), found with dlvsym. */
typedef void *(*guard_dlsym_fn)(void *, const char *);
extern guard_dlsym_fn real_dlsym;
void resolve_dlsym(void);

#endif
