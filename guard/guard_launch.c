/* guard_launch.c: kernel launches, the hot path (guard_launch.h). Without a compute limit a
 * launch does one relaxed atomic load before it tail-calls the driver; with one it is paced and
 * timed (guard_pace.c). */
#include <stdbool.h>
#include <stddef.h>

#include "guard_base.h"
#include "guard_core.h"
#include "guard_driver.h"
#include "guard_launch.h"
#include "guard_pace.h"

/* Per-thread-default-stream launches are timed on the same kind of stream. */
static inline cuEventRecord_fn ptsz_record(void) {
    return g_real.cuEventRecord_ptsz ? g_real.cuEventRecord_ptsz : g_real.cuEventRecord;
}

/* The launch path: when the driver's function is known and no compute limit applies, a wrapper
 * tail-calls it at once (no frame, no register saved: one relaxed load beyond the driver's own
 * call); otherwise it tail-calls its slow path, where the first call initialises the guard and a
 * launch with a compute limit is paced. */
static inline bool launch_direct(bool have_real) {
    return __builtin_expect(have_real && !guard_pacing(&g_core), 1);
}

/* A slow path's body, with everything it uses as arguments: REAL is the driver's function (loaded
 * by the guard's first call), the launch CALL on STREAM is paced and timed with events recorded by
 * RECORD. A macro: CALL is evaluated on one of two paths. */
#define LAUNCH_SLOW(real, record, stream, call)                                                               \
    do {                                                                                                       \
        if (!(real)) {                                                                                         \
            guard_state();                                                                                     \
            if (!(real))                                                                                       \
                return CUDA_ERROR_NOT_INITIALIZED;                                                             \
        }                                                                                                      \
        if (guard_pacing(&g_core)) {                                                                           \
            struct pace pace_;                                                                                 \
            if (pace_begin(&g_pacer, &pace_, (record), (stream)))                                              \
                return pace_end(&g_pacer, &pace_, (record), (stream), (call));                                 \
        }                                                                                                      \
        return (call);                                                                                         \
    } while (0)

#define SLOW static __attribute__((noinline, cold)) CUresult

SLOW launch_kernel_slow(LAUNCH_PARAMS, void **params, void **extra) {
    LAUNCH_SLOW(g_real.cuLaunchKernel, g_real.cuEventRecord, s,
                g_real.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shm, s, params, extra));
}

EXPORT CUresult cuLaunchKernel(LAUNCH_PARAMS, void **params, void **extra) {
    if (launch_direct(g_real.cuLaunchKernel != NULL))
        return g_real.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
    return launch_kernel_slow(f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
}

SLOW launch_kernel_ptsz_slow(LAUNCH_PARAMS, void **params, void **extra) {
    LAUNCH_SLOW(g_real.cuLaunchKernel_ptsz, ptsz_record(), s,
                g_real.cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shm, s, params, extra));
}

EXPORT CUresult cuLaunchKernel_ptsz(LAUNCH_PARAMS, void **params, void **extra) {
    if (launch_direct(g_real.cuLaunchKernel_ptsz != NULL))
        return g_real.cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
    return launch_kernel_ptsz_slow(f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
}

SLOW launch_kernel_ex_slow(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
    LAUNCH_SLOW(g_real.cuLaunchKernelEx, g_real.cuEventRecord, config ? config->hStream : NULL,
                g_real.cuLaunchKernelEx(config, f, params, extra));
}

EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
    if (launch_direct(g_real.cuLaunchKernelEx != NULL))
        return g_real.cuLaunchKernelEx(config, f, params, extra);
    return launch_kernel_ex_slow(config, f, params, extra);
}

SLOW launch_kernel_ex_ptsz_slow(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
    LAUNCH_SLOW(g_real.cuLaunchKernelEx_ptsz, ptsz_record(), config ? config->hStream : NULL,
                g_real.cuLaunchKernelEx_ptsz(config, f, params, extra));
}

EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
    if (launch_direct(g_real.cuLaunchKernelEx_ptsz != NULL))
        return g_real.cuLaunchKernelEx_ptsz(config, f, params, extra);
    return launch_kernel_ex_ptsz_slow(config, f, params, extra);
}

SLOW launch_cooperative_slow(LAUNCH_PARAMS, void **params) {
    LAUNCH_SLOW(g_real.cuLaunchCooperativeKernel, g_real.cuEventRecord, s,
                g_real.cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shm, s, params));
}

EXPORT CUresult cuLaunchCooperativeKernel(LAUNCH_PARAMS, void **params) {
    if (launch_direct(g_real.cuLaunchCooperativeKernel != NULL))
        return g_real.cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shm, s, params);
    return launch_cooperative_slow(f, gx, gy, gz, bx, by, bz, shm, s, params);
}

SLOW launch_cooperative_ptsz_slow(LAUNCH_PARAMS, void **params) {
    LAUNCH_SLOW(g_real.cuLaunchCooperativeKernel_ptsz, ptsz_record(), s,
                g_real.cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, shm, s, params));
}

EXPORT CUresult cuLaunchCooperativeKernel_ptsz(LAUNCH_PARAMS, void **params) {
    if (launch_direct(g_real.cuLaunchCooperativeKernel_ptsz != NULL))
        return g_real.cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, shm, s, params);
    return launch_cooperative_ptsz_slow(f, gx, gy, gz, bx, by, bz, shm, s, params);
}

/* A CUDA graph counts as one launch: its whole GPU time lies between the two events. */
SLOW graph_launch_slow(CUgraphExec g, CUstream s) {
    LAUNCH_SLOW(g_real.cuGraphLaunch, g_real.cuEventRecord, s, g_real.cuGraphLaunch(g, s));
}

EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream s) {
    if (launch_direct(g_real.cuGraphLaunch != NULL))
        return g_real.cuGraphLaunch(g, s);
    return graph_launch_slow(g, s);
}

SLOW graph_launch_ptsz_slow(CUgraphExec g, CUstream s) {
    LAUNCH_SLOW(g_real.cuGraphLaunch_ptsz, ptsz_record(), s, g_real.cuGraphLaunch_ptsz(g, s));
}

EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) {
    if (launch_direct(g_real.cuGraphLaunch_ptsz != NULL))
        return g_real.cuGraphLaunch_ptsz(g, s);
    return graph_launch_ptsz_slow(g, s);
}
