/* fake_nvml.c: a simulated NVML (libnvidia-ml.so.1) for the guard's tests only: the memory view of
 * the same simulated GPUs as fake_cuda.c. Total FAKE_CUDA_TOTAL_MIB (default 16384), used
 * FAKE_GPU_OTHERS_MIB (memory used on the physical GPU by processes outside the test) plus what the
 * process allocated through the simulated driver (fakeCudaUsedBytes, when it is loaded). Devices are
 * handles 1..16 (index + 1); nvmlDeviceGetUUID is not supported, so the guard matches by index.
 * nvmlDeviceGetProcessUtilization reports the per-process samples of fake_cuda's time-sliced GPU
 * (FAKE_CUDA_GPU, device 0); without it the call is not supported, as on GPUs before Maxwell. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

#include "tests/guard/fake_timeslice.h"

#define EXPORT __attribute__((visibility("default")))

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;

EXPORT int nvmlInit_v2(void);
EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *d);
EXPORT int nvmlDeviceGetIndex(nvmlDevice_t d, unsigned *index);
EXPORT int nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned len);
EXPORT int nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m);

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;
EXPORT int nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *u, unsigned *count,
                                           unsigned long long last_seen);

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

/* As the driver: a NULL buffer (or one too small) is INSUFFICIENT_SIZE with the count needed, no
 * sample since last_seen is NOT_FOUND. */
EXPORT int nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *u, unsigned *count,
                                           unsigned long long last_seen)
{
    if (!d || !count)
        return 2;
    typedef unsigned (*samples_fn)(unsigned long long, struct fk_util_sample *, unsigned);
    samples_fn samples = (samples_fn)dlsym(RTLD_DEFAULT, "fakeCudaProcessSamples");
    const char *gpu = getenv("FAKE_CUDA_GPU");
    if (!samples || !gpu || !*gpu || (uintptr_t)d != 1)
        return 3; /* NVML_ERROR_NOT_SUPPORTED */
    static struct fk_util_sample buf[4096];
    unsigned n = samples(last_seen, buf, 4096);
    if (n == 0)
        return 6; /* NVML_ERROR_NOT_FOUND */
    if (!u || *count < n) {
        *count = n;
        return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    }
    for (unsigned i = 0; i < n; i++)
        u[i] = (nvmlProcessUtilizationSample_t){ buf[i].pid, buf[i].ts_us, buf[i].sm_util, 0, 0, 0 };
    *count = n;
    return 0;
}
