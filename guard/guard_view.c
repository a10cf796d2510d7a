/* guard_view.c: what the workload sees (guard_view.h): the driver's and NVML's memory figures
 * (nvidia-smi, monitoring inside the container) as the quota and the container's use. */
#include <stdint.h>
#include <string.h>

#include "guard_account.h"
#include "guard_base.h"
#include "guard_core.h"
#include "guard_driver.h"
#include "guard_view.h"

EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
    int st = guard_state();
    if (!g_real.cuMemGetInfo_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = g_real.cuMemGetInfo_v2(free_bytes, total_bytes);
    if (r != CUDA_SUCCESS || st != G_READY || !free_bytes || !total_bytes)
        return r;
    int dev = guard_current_device(&g_real);
    uint64_t limit = guard_device_limit(&g_core, dev);
    if (!limit)
        return r;
    account_reclaim_dead(&g_acct); /* a holder killed a moment ago holds nothing: the driver freed its memory */
    uint64_t total = *total_bytes < limit ? *total_bytes : limit;
    uint64_t used = account_used(&g_acct, dev);
    uint64_t free_q = used < total ? total - used : 0; /* never negative, never wrapped */
    *total_bytes = (size_t)total;
    *free_bytes = (size_t)(free_q < *free_bytes ? free_q : *free_bytes);
    return r;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    int st = guard_state();
    if (!g_real.cuDeviceTotalMem_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = g_real.cuDeviceTotalMem_v2(bytes, dev);
    if (r == CUDA_SUCCESS && st == G_READY && bytes) {
        uint64_t limit = guard_device_limit(&g_core, dev);
        if (limit && limit < *bytes)
            *bytes = (size_t)limit;
    }
    return r;
}

typedef int (*nvml_mem_fn)(nvmlDevice_t, void *);
typedef int (*nvml_uuid_fn)(nvmlDevice_t, char *, unsigned);
typedef int (*nvml_index_fn)(nvmlDevice_t, unsigned *);

/* The limit entry for an NVML device: by UUID when the limits file names one, else by index. */
static int nvml_device_entry(const struct guard_core *c, nvmlDevice_t d) {
    nvml_uuid_fn get_uuid = (nvml_uuid_fn)guard_nvml_sym(&g_real, "nvmlDeviceGetUUID");
    char uuid[96] = "";
    if (get_uuid && get_uuid(d, uuid, sizeof(uuid)) == 0)
        for (unsigned i = 0; i < c->limits.n_devices; i++)
            if (c->limits.dev[i].uuid[0] && !strcmp(c->limits.dev[i].uuid, uuid))
                return (int)i;
    nvml_index_fn get_index = (nvml_index_fn)guard_nvml_sym(&g_real, "nvmlDeviceGetIndex");
    unsigned idx;
    if (get_index && get_index(d, &idx) == 0 && idx < GS_GUARD_MAX_DEVICES && c->dev_index[idx] >= 0 &&
        !c->limits.dev[c->dev_index[idx]].uuid[0])
        return c->dev_index[idx];
    return -1;
}

/* The same view as cuMemGetInfo: total the quota (or the GPU's memory, if smaller), free the
 * quota's room or the GPU's physical free memory, whichever is smaller, used the rest. */
static void quota_view(nvmlDevice_t d, unsigned long long *total, unsigned long long *free_b,
                       unsigned long long *used) {
    const struct guard_core *c = &g_core;
    int e = nvml_device_entry(c, d);
    if (e < 0 || !c->limits.dev[e].vram)
        return;
    account_reclaim_dead(&g_acct);
    uint64_t limit = c->limits.dev[e].vram, u = account_used(&g_acct, c->limits.dev[e].ordinal);
    if (limit < *total)
        *total = limit;
    uint64_t room = u < *total ? *total - u : 0; /* never wraps */
    if (room < *free_b)
        *free_b = room;
    if (*free_b > *total)
        *free_b = *total;
    *used = *total - *free_b;
}

EXPORT int nvmlDeviceGetMemoryInfo(nvmlDevice_t d, guard_nvmlMemory_t *m) {
    int st = guard_state();
    nvml_mem_fn real = (nvml_mem_fn)guard_nvml_sym(&g_real, "nvmlDeviceGetMemoryInfo");
    if (!real)
        return 3; /* NVML_ERROR_NOT_SUPPORTED */
    int r = real(d, m);
    if (r == 0 && m && st == G_READY)
        quota_view(d, &m->total, &m->free, &m->used);
    return r;
}

EXPORT int nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, guard_nvmlMemory_v2_t *m) {
    int st = guard_state();
    nvml_mem_fn real = (nvml_mem_fn)guard_nvml_sym(&g_real, "nvmlDeviceGetMemoryInfo_v2");
    if (!real)
        return 3;
    int r = real(d, m);
    if (r == 0 && m && st == G_READY)
        quota_view(d, &m->total, &m->free, &m->used);
    return r;
}
