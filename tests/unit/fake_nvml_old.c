/* fake_nvml_old.c: a test-only NVML library that exports only the oldest names of the functions
 * gpuslice needs (nvmlInit, nvmlDeviceGetCount, ..., the v1 process struct) and no MIG calls, as
 * an old driver would. test_nvml_fallback.c checks the backend falls back to them. */
#include <string.h>

#include "gpu/nvml_types.h"

#define EXPORT __attribute__((visibility("default")))

static struct nvmlDevice_st { int index; } devs[2] = { { 0 }, { 1 } };

EXPORT nvmlReturn_t nvmlInit(void) { return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }
EXPORT const char *nvmlErrorString(nvmlReturn_t r) { return r == NVML_SUCCESS ? "Success" : "Old Error"; }
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned *n) { *n = 2; return NVML_SUCCESS; }
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned i, nvmlDevice_t *d) {
    if (i >= 2)
        return NVML_ERROR_INVALID_ARGUMENT;
    *d = &devs[i];
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *buf, unsigned len) {
    const char *u = d->index ? "GPU-00000000-0000-0000-0000-000000000001" : "GPU-00000000-0000-0000-0000-000000000000";
    if (strlen(u) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(buf, u);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *buf, unsigned len) {
    (void)d;
    if (len < 9)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(buf, "Tesla T4");
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    (void)d;
    m->total = 15360ULL << 20;
    m->used = 300ULL << 20;
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}
/* v1 process struct: 16 bytes per entry, no GI/CI IDs. */
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned *count, nvmlProcessInfo_v1_t *p) {
    unsigned n = d->index == 1 ? 2 : 0;
    if (n && (!p || *count < n)) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < n; i++)
        p[i] = (nvmlProcessInfo_v1_t){ 1000 + i, (100ULL + i) << 20 };
    *count = n;
    return NVML_SUCCESS;
}
