/* guard_view.h: inside the guard: what the workload sees of its GPUs' memory, the quota rather
 * than the GPU (guard_view.c), for the lookup table (guard_lookup.c). */
#ifndef GS_GUARD_VIEW_H
#define GS_GUARD_VIEW_H

#include "cuda_api.h"
#include "guard_base.h"
#include "guard_driver.h"

/* NVML's memory structs, declared here by hand (the guard depends on nothing else in the tree). */
typedef struct {
    unsigned long long total, free, used;
} guard_nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} guard_nvmlMemory_v2_t;

EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes);
EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
EXPORT int nvmlDeviceGetMemoryInfo(nvmlDevice_t d, guard_nvmlMemory_t *m);
EXPORT int nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, guard_nvmlMemory_v2_t *m);

#endif
