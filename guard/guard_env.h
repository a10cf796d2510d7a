/* guard_env.h: inside the guard: where this process's limits come from (guard_env.c): the file the
 * agent mounts into a container, gpuslice exec's sealed memfd or GPUSLICE_GUARD_CONFIG (found at
 * load by guard_exec.c), read and parsed by the guard's first call. */
#ifndef GS_GUARD_ENV_H
#define GS_GUARD_ENV_H

#include "guard_limits.h"

/* From the guard's constructor, before main: finds the limits' source and wraps the exec family
 * (guard_exec_init). */
void guard_env_init(void);

/* Reads and parses the limits into *limits, with the file they came from in *path. G_READY when
 * they parsed; otherwise (logged) the state the guard must take: G_CLOSED, or G_OPEN when a file
 * that does not parse still says "on-error open". */
int guard_env_load_limits(struct gs_guard_limits *limits, const char **path);

#endif
