/* guard_limits.h: the guard's limits file, read-only in the container (mounted by the agent, or written
 * by `gpuslice exec`). A child cannot lose its limits by clearing its environment: the guard
 * reads this file, and re-adds LD_PRELOAD and GPUSLICE_GUARD_CONFIG to the environment of every
 * program it executes. Format (one setting per line, '#' comments):
 *
 *   gpuslice-guard 1                       # magic and format version: first line
 *   on-error closed                        # closed: refuse CUDA if the guard cannot work; open: run unguarded
 *   region /run/gpuslice/guard/POD/region  # the counters file (created if missing)
 *   context-overhead 314572800             # bytes counted per CUDA context (optional, default 0)
 *   device 0 GPU-8f6c... 8589934592 30     # CUDA ordinal, UUID (or -), VRAM bytes (0 = no limit), compute % (0 = none)
 *
 * Parsing is pure (gs_guard_limits_parse) so it is unit-tested and fuzzed. */
#ifndef GS_GUARD_LIMITS_H
#define GS_GUARD_LIMITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "guard_region.h"

struct gs_guard_device_limit {
    int ordinal;
    char uuid[96];
    uint64_t vram;                     /* 0: no memory limit */
    unsigned compute_pct;              /* 0: no compute limit */
};

struct gs_guard_limits {
    bool fail_closed;
    char region[256];
    uint64_t context_overhead;
    unsigned n_devices;
    struct gs_guard_device_limit dev[GS_GUARD_MAX_DEVICES];
};

/* Returns 0, or -EINVAL with "NAME:LINE: message" in err. */
int gs_guard_limits_parse(const char *name, const char *text, struct gs_guard_limits *out, char *err, size_t errlen);

/* Writes the file's text for `l` into buf; returns the length or -ENOSPC. */
int gs_guard_limits_format(const struct gs_guard_limits *l, char *buf, size_t len);

#endif
