/* fake_cuda_bench.c: the smallest possible CUDA "driver" (libcuda.so.1) for measuring the guard's
 * own cost: every call returns at once, so what remains is the interposition. Bench only. */
#include <stddef.h>

#include "../guard/cuda_api.h"

#define EXPORT __attribute__((visibility("default")))

static unsigned long long next_ptr = 1ULL << 40;

EXPORT CUresult cuCtxGetDevice(CUdevice *d) {
    *d = 0;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    (void)n;
    *p = next_ptr;
    next_ptr += 4096;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
    (void)p;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                               unsigned int by, unsigned int bz, unsigned int shm, CUstream s, void **params,
                               void **extra) {
    (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shm, (void)s, (void)params, (void)extra;
    return CUDA_SUCCESS;
}

/* Events, for the compute pacer's path: recorded at once, complete at once, no time between them
 * (so the pacer never waits and what is measured is its bookkeeping). */
static char events[2];
EXPORT CUresult cuEventCreate(CUevent *e, unsigned int flags) {
    static unsigned k;
    (void)flags;
    *e = (CUevent)(void *)&events[k++ & 1];
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventRecord(CUevent e, CUstream s) {
    (void)e, (void)s;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventQuery(CUevent e) {
    (void)e;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventSynchronize(CUevent e) {
    (void)e;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
    (void)a, (void)b;
    *ms = 0.0f;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventDestroy_v2(CUevent e) {
    (void)e;
    return CUDA_SUCCESS;
}
