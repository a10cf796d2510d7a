/* guard_layout.h: the guard's files as the node lays them out, one contract for every writer (the
 * device plugin's Allocate, src/agent/shared.c; the DRA driver's prepare, src/dra/server.c;
 * `gpuslice exec`, src/cli/exec.c) and for the guard that reads them (guard.c).
 *
 * In the container:
 *   GS_GUARD_LIB_IN_CONTAINER     the guard library, read-only
 *   GS_GUARD_CONF_IN_CONTAINER    the limits file (guard_limits.h), read-only
 *   GS_GUARD_STATE_IN_CONTAINER   the counters' directory, read-write; the region in it
 *   GS_GUARD_PRELOAD_IN_CONTAINER the node's ld.so.preload, naming the guard library
 *
 * On the host, an allocation's (or a claim's) guard directory DIR:
 *   DIR/limits        mounted at GS_GUARD_CONF_IN_CONTAINER
 *   DIR/state/        mounted at GS_GUARD_STATE_IN_CONTAINER (0755, root's)
 *   DIR/state/region  empty and mode 0666 when made: the guard sizes and initialises it, as any user
 *   DIR/devices       the agent's devices record (src/agent/devrecord.h), written by the caller
 * and, once for the node, GUARD_ROOT/ld.so.preload.
 *
 * The limits are built from rows (gs_guard_limits_build, pure, guard_layout.c); the directory is
 * made and removed by gs_guard_dir_create / gs_guard_dir_remove (guard_files.c, I/O). Unit-tested
 * in tests/unit/test_guard_layout.c. */
#ifndef GS_GUARD_LAYOUT_H
#define GS_GUARD_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "guard_limits.h"

/* ---- in the container --------------------------------------------------------------------- */

#define GS_GUARD_LIB_IN_CONTAINER "/usr/lib/gpuslice/libgpuslice-guard.so"
#define GS_GUARD_CONF_IN_CONTAINER "/etc/gpuslice/guard.conf"
#define GS_GUARD_STATE_IN_CONTAINER "/run/gpuslice/guard"
#define GS_GUARD_REGION_IN_CONTAINER GS_GUARD_STATE_IN_CONTAINER "/region"
#define GS_GUARD_PRELOAD_IN_CONTAINER "/etc/ld.so.preload"
/* The environment variable that names the limits file (set to GS_GUARD_CONF_IN_CONTAINER). */
#define GS_GUARD_CONFIG_ENV "GPUSLICE_GUARD_CONFIG"

/* ---- on the host -------------------------------------------------------------------------- */

#define GS_GUARD_DIR_LIMITS "limits"
#define GS_GUARD_DIR_STATE "state"
#define GS_GUARD_DIR_REGION "state/region"
#define GS_GUARD_DIR_DEVICES "devices"
#define GS_GUARD_ROOT_PRELOAD "ld.so.preload"

/* DIR/NAME into buf: 0, or -ENAMETOOLONG (buf holds "" then) rather than a cut path. Pure. */
int gs_guard_path(const char *dir, const char *name, char *buf, size_t len);

/* ---- the limits --------------------------------------------------------------------------- */

/* One GPU the container sees. */
struct gs_guard_row {
    int ordinal;          /* its CUDA ordinal in the container */
    const char *uuid;     /* NULL or "": none (the guard matches by ordinal only) */
    uint64_t bytes;       /* VRAM quota (0: none) */
    unsigned compute_pct; /* compute share (0: none) */
    const char *arch;     /* NVML architecture as gs_arch_name names it; NULL: not known */
};

/* The limits for rows[0..n): failing closed, the counters region at `region`, one device a row in
 * order, and as the context overhead the largest estimate of the rows' architectures
 * (gs_guard_context_overhead_default; that of an unknown GPU when n is 0), as the limits file has
 * one figure for all. Pure. 0, -E2BIG (more than GS_GUARD_MAX_DEVICES rows) or -ENAMETOOLONG (a
 * region or UUID longer than the limits hold); out is filled only on success. */
int gs_guard_limits_build(const struct gs_guard_row *rows, unsigned n, const char *region, struct gs_guard_limits *out);

/* ---- the directory (I/O) ------------------------------------------------------------------ */

/* The caller's own files in a guard directory being made (the agent's devices record): called with
 * the directory they go in, which is a temporary one when the directory is new. 0, or -errno with
 * why in err. */
typedef int (*gs_guard_fill_fn)(const char *dir, void *ctx, char *err, size_t errlen);

/* Makes the guard directory dir with DIR/state, DIR/state/region and DIR/limits (the len bytes of
 * text, as gs_guard_limits_format wrote them), then fill's files (fill may be NULL). A new
 * directory (and the missing ones above it, 0755) is made complete under a temporary name beside it
 * (DIR.tmp.PID) and renamed into place: when this fails, or the process dies half-way, nothing is
 * at DIR. An existing directory (a second resource of the same container) keeps its state and its
 * region, and gets its limits (and fill's files) replaced, each file atomically. 0, or -errno with
 * "cannot VERB PATH: why" in err (fill's own code and message when fill fails). */
int gs_guard_dir_create(const char *dir, const char *text, size_t len, gs_guard_fill_fn fill, void *ctx, char *err,
                        size_t errlen);

/* ROOT/ld.so.preload, naming GS_GUARD_LIB_IN_CONTAINER, unless it is there and readable; its path
 * into preload (room: len). 0, or -errno with "cannot write PATH: why" in err. */
int gs_guard_preload_ensure(const char *root, char *preload, size_t len, char *err, size_t errlen);

/* Removes the guard directory dir and what is in it (no link followed, gs_remove_tree), and what a
 * create that died half-way left beside it (DIR.tmp.*). 0 (also when there is none) or -errno. */
int gs_guard_dir_remove(const char *dir);

#endif
