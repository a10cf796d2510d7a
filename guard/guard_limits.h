/* guard_limits.h: the guard's limits file, read-only in the container (mounted by the agent, or written
 * by `gpuslice exec` into a sealed memfd it keeps, guard_anchor.h). A child cannot lose or swap its
 * limits through its environment: in a container the mounted file wins over GPUSLICE_GUARD_CONFIG,
 * under `gpuslice exec` its memfd does, and the guard puts LD_PRELOAD and its own
 * GPUSLICE_GUARD_CONFIG into the environment of every program it starts (guard_exec.c).
 * Format (one setting per line, '#' comments):
 *
 *   gpuslice-guard 1                       # magic and format version: first line
 *   on-error closed                        # closed: refuse CUDA if the guard cannot work; open: run unguarded
 *   region /run/gpuslice/guard/POD/region  # the counters file (created if missing)
 *   context-overhead 524288000             # bytes counted per CUDA context (optional, default 0)
 *   device 0 GPU-8f6c... 8589934592 30     # CUDA ordinal, UUID (or -), VRAM bytes (0 = no limit), compute % (0 = none)
 *
 * Strict, so that a damaged or truncated file is noticed rather than half-read: every line must
 * end with a newline, no setting may appear twice, numbers must fit their bounds, and control
 * characters (NUL included) are refused. Parsing and formatting are pure, unit-tested
 * (tests/unit/test_guard_limits.c) and fuzzed (tests/fuzz/fuzz_guard_limits.c). */
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

/* The largest limits file read (the guard reads at most this much, plus one byte to notice more). */
#define GS_GUARD_LIMITS_MAX 65536

/* Parses the len bytes of text (which need no terminating NUL). Returns 0 and fills out, or
 * -EINVAL with "NAME:LINE: message" in err (out untouched); a file over GS_GUARD_LIMITS_MAX
 * bytes is "NAME: message". */
int gs_guard_limits_parse(const char *name, const char *text, size_t len, struct gs_guard_limits *out, char *err,
                          size_t errlen);

/* Writes the file's text for `l` into buf (NUL-terminated); returns the length, -ENOSPC if buf is
 * too small, or -EINVAL if the text would not parse back to `l` (a region or UUID with blanks, '#'
 * or control characters, a relative region, an out-of-range value, an ordinal listed twice). */
int gs_guard_limits_format(const struct gs_guard_limits *l, char *buf, size_t len);

/* The bytes to count per CUDA context (the limits file's context-overhead) on a GPU of the NVML
 * architecture `arch` ("volta", "turing", "ampere", "ada", "hopper", "blackwell", as gs_arch_name
 * names them); GS_GUARD_CONTEXT_OVERHEAD_UNKNOWN for another or NULL. Estimates (see docs/guard.md). */
#define GS_GUARD_CONTEXT_OVERHEAD_UNKNOWN (500ULL << 20)
uint64_t gs_guard_context_overhead_default(const char *arch);

#endif
