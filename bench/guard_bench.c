/* guard_bench.c: cost of the guard on cuLaunchKernel (no compute limit) and on a cuMemAlloc_v2 +
 * cuMemFree_v2 pair, against a driver whose calls return at once (fake_cuda_bench.c). Run it
 * with and without LD_PRELOAD=libgpuslice-guard.so (bench/guard_bench.sh does both, and counts
 * instructions with callgrind). usage: guard_bench launch|alloc N */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../guard/cuda_api.h"

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n);
CUresult cuMemFree_v2(CUdeviceptr p);
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int shm, CUstream s, void **params, void **extra);

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 3)
        return 2;
    long n = atol(argv[2]);
    bool launch = !strcmp(argv[1], "launch");
    CUdeviceptr p;
    /* warm up: resolve symbols, initialise the guard */
    cuMemAlloc_v2(&p, 4096);
    cuMemFree_v2(p);
    cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        if (launch) {
            cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
        } else {
            cuMemAlloc_v2(&p, 4096);
            cuMemFree_v2(p);
        }
    }
    double t1 = now_ns();
    printf("%s %.2f ns/call\n", argv[1], (t1 - t0) / (double)n);
    return 0;
}
