/* guard_driver.h: inside the guard: the real functions, libcuda's and libnvidia-ml's, that the
 * wrappers call on to (guard_driver.c resolves them). */
#ifndef GS_GUARD_DRIVER_H
#define GS_GUARD_DRIVER_H

#include "cuda_api.h"
#include "guard_base.h"
#include "guard_region.h"

#define GUARD_REAL_TYPE(name, params, args) typedef CUresult(*name##_fn) params;
GS_CUDA_HOOKED_FUNCTIONS(GUARD_REAL_TYPE)
#undef GUARD_REAL_TYPE

/* NVML's device handle, declared here by hand: the guard depends on nothing else in the tree. */
typedef struct nvmlDevice_st *nvmlDevice_t;

/* The other functions of libcuda the guard calls: _ptsz forms of hooked ones and functions it
 * uses without interposing them (field, type, symbol). */
#define GUARD_DRIVER_FUNCTIONS(X)                                                                           \
    X(cuLaunchKernel_ptsz, cuLaunchKernel_fn, "cuLaunchKernel_ptsz")                                          \
    X(cuLaunchKernelEx_ptsz, cuLaunchKernelEx_fn, "cuLaunchKernelEx_ptsz")                                    \
    X(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel_fn, "cuLaunchCooperativeKernel_ptsz")         \
    X(cuGraphLaunch_ptsz, cuGraphLaunch_fn, "cuGraphLaunch_ptsz")                                             \
    X(cuMemAllocAsync_ptsz, cuMemAllocAsync_fn, "cuMemAllocAsync_ptsz")                                       \
    X(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync_fn, "cuMemAllocFromPoolAsync_ptsz")               \
    X(cuMemFreeAsync_ptsz, cuMemFreeAsync_fn, "cuMemFreeAsync_ptsz")                                          \
    X(cuCtxGetDevice, cuCtxGetDevice_fn, "cuCtxGetDevice")                                                    \
    X(cuGetProcAddress, cuGetProcAddress_fn, "cuGetProcAddress")                                              \
    X(cuGetProcAddress_v2, cuGetProcAddress_v2_fn, "cuGetProcAddress_v2")                                     \
    X(cuEventCreate, cuEventCreate_fn, "cuEventCreate")                                                       \
    X(cuEventRecord, cuEventRecord_fn, "cuEventRecord")                                                       \
    X(cuEventRecord_ptsz, cuEventRecord_fn, "cuEventRecord_ptsz")                                             \
    X(cuEventQuery, cuEventQuery_fn, "cuEventQuery")                                                          \
    X(cuEventElapsedTime, cuEventElapsedTime_fn, "cuEventElapsedTime")                                       \
    X(cuEventDestroy, cuEventDestroy_v2_fn, "cuEventDestroy_v2")

/* libcuda's functions, resolved once by the guard's first call (a NULL one is missing in the
 * driver), and the libraries they come from. Read-only once resolved, apart from libnvml, opened
 * at its first use. */
struct guard_driver {
    void *libcuda, *libnvml;
#define GUARD_REAL_FIELD(name, params, args) name##_fn name;
    GS_CUDA_HOOKED_FUNCTIONS(GUARD_REAL_FIELD)
#undef GUARD_REAL_FIELD
#define GUARD_REAL_FIELD_AS(field, type, symbol) type field;
    GUARD_DRIVER_FUNCTIONS(GUARD_REAL_FIELD_AS)
#undef GUARD_REAL_FIELD_AS
};

extern GUARD_HIDDEN struct guard_driver g_real;

/* Loads libcuda.so.1 and resolves every function above (logged when the library is missing). */
void guard_driver_resolve(struct guard_driver *d);

/* A symbol of libcuda (NULL before guard_driver_resolve or without the library). */
void *guard_cuda_sym(const struct guard_driver *d, const char *name);

/* A symbol of libnvidia-ml.so.1, loaded at the first call. */
void *guard_nvml_sym(struct guard_driver *d, const char *name);

/* The device allocations go to: the current context's (0 without one). */
static inline int guard_current_device(const struct guard_driver *d) {
    CUdevice dev = 0;
    if (!d->cuCtxGetDevice || d->cuCtxGetDevice(&dev) != CUDA_SUCCESS || dev < 0 || dev >= GS_GUARD_MAX_DEVICES)
        return 0;
    return dev;
}

#endif
