/* guard_launch.h: inside the guard: the kernel launch wrappers (guard_launch.c), for the lookup
 * table (guard_lookup.c). */
#ifndef GS_GUARD_LAUNCH_H
#define GS_GUARD_LAUNCH_H

#include "cuda_api.h"
#include "guard_base.h"

#define LAUNCH_PARAMS                                                                                          \
    CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,         \
        unsigned int bz, unsigned int shm, CUstream s

EXPORT CUresult cuLaunchKernel(LAUNCH_PARAMS, void **params, void **extra);
EXPORT CUresult cuLaunchKernel_ptsz(LAUNCH_PARAMS, void **params, void **extra);
EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra);
EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra);
EXPORT CUresult cuLaunchCooperativeKernel(LAUNCH_PARAMS, void **params);
EXPORT CUresult cuLaunchCooperativeKernel_ptsz(LAUNCH_PARAMS, void **params);
EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream s);
EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s);

#endif
