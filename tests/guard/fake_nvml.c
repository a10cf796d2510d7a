/* fake_nvml.c: a simulated NVML (libnvidia-ml.so.1) for the guard's tests only: the memory view of
 * the same simulated GPUs as fake_cuda.c. Total FAKE_CUDA_TOTAL_MIB (default 16384), used
 * FAKE_GPU_OTHERS_MIB (memory used on the physical GPU by processes outside the test) plus what the
 * process allocated through the simulated driver (fakeCudaUsedBytes, when it is loaded). Devices are
 * handles 1..16 (index + 1); nvmlDeviceGetUUID is not supported, so the guard matches by index. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;

EXPORT int nvmlInit_v2(void);
EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *d);
EXPORT int nvmlDeviceGetIndex(nvmlDevice_t d, unsigned *index);
EXPORT int nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned len);
EXPORT int nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m);

static unsigned long long mib_env(const char *name, unsigned long long dflt)
{
    const char *s = getenv(name);
    return s && *s ? strtoull(s, NULL, 10) : dflt;
}

EXPORT int nvmlInit_v2(void)
{
    return 0;
}

EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *d)
{
    if (!d || index >= 16)
        return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *d = (nvmlDevice_t)(uintptr_t)(index + 1);
    return 0;
}

EXPORT int nvmlDeviceGetIndex(nvmlDevice_t d, unsigned *index)
{
    if (!d || !index)
        return 2;
    *index = (unsigned)((uintptr_t)d - 1);
    return 0;
}

EXPORT int nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned len)
{
    (void)d, (void)uuid, (void)len;
    return 3; /* NVML_ERROR_NOT_SUPPORTED */
}

EXPORT int nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    if (!d || !m)
        return 2;
    m->total = mib_env("FAKE_CUDA_TOTAL_MIB", 16384) << 20;
    unsigned long long (*cuda_used)(int) = (unsigned long long (*)(int))dlsym(RTLD_DEFAULT, "fakeCudaUsedBytes");
    m->used = (mib_env("FAKE_GPU_OTHERS_MIB", 0) << 20) + (cuda_used ? cuda_used((int)((uintptr_t)d - 1)) : 0);
    m->free = m->total - m->used;
    return 0;
}
