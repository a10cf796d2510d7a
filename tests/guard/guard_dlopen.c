/* guard_dlopen.c: a program that is not linked against libcuda and dlopens it late, after main
 * started, as Python and cudart do: under the guard its allocations must be counted all the same.
 * Prints key=value lines; usage: guard_dlopen SIZE (bytes). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "guard/cuda_api.h"

typedef CUresult (*init_fn)(unsigned);
typedef CUresult (*retain_fn)(CUcontext *, CUdevice);
typedef CUresult (*set_fn)(CUcontext);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*info_fn)(size_t *, size_t *);
typedef unsigned long long (*used_fn)(int);

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    size_t size = (size_t)strtoull(argv[1], NULL, 0);
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 3;
    init_fn init = (init_fn)dlsym(h, "cuInit");
    retain_fn retain = (retain_fn)dlsym(h, "cuDevicePrimaryCtxRetain");
    set_fn set = (set_fn)dlsym(h, "cuCtxSetCurrent");
    alloc_fn alloc = (alloc_fn)dlsym(h, "cuMemAlloc_v2");
    free_fn fr = (free_fn)dlsym(h, "cuMemFree_v2");
    info_fn info = (info_fn)dlsym(h, "cuMemGetInfo_v2");
    used_fn used = (used_fn)dlsym(h, "fakeCudaUsedBytes");
    if (!init || !retain || !set || !alloc || !fr || !info || !used)
        return 3;
    CUcontext ctx;
    init(0);
    retain(&ctx, 0);
    set(ctx);
    CUdeviceptr p = 0, q = 0;
    CUresult r1 = alloc(&p, size), r2 = alloc(&q, size);
    size_t f = 0, t = 0;
    info(&f, &t);
    printf("first.res=%d\nsecond.res=%d\nfake_used=%llu\nguard_used=%lld\ntotal=%llu\n", (int)r1, (int)r2,
           used(0), (long long)t - (long long)f, (unsigned long long)t);
    if (r1 == CUDA_SUCCESS)
        fr(p);
    if (r2 == CUDA_SUCCESS)
        fr(q);
    return 0;
}
