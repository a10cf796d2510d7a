/* guard_lookup.c: symbol lookups: cuGetProcAddress (cudart >= 11.3 fetches every driver function
 * this way) and dlsym (programs and cudart that dlopen libcuda and look symbols up in it). A lookup
 * of a hooked function returns the wrapper with the ABI the caller asked for; older ABIs and
 * unknown symbols pass through untouched. */
#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include "guard_base.h"
#include "guard_core.h"
#include "guard_driver.h"
#include "guard_exec.h"
#include "guard_launch.h"
#include "guard_memory.h"
#include "guard_view.h"
#include "guard_vmm.h"

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *symbolStatus);
EXPORT void *dlsym(void *handle, const char *name);

/* One row per hooked driver function, by the base name cuGetProcAddress takes: below min_version
 * the driver hands out an older ABI, which passes through untouched. */
struct hook {
    const char *base;
    const char *name;          /* the exported versioned name (dlsym) */
    int min_version;
    void *wrapper, *wrapper_ptsz;
    int ptsz_version;          /* the driver has the _ptsz form from this version on */
};

#define FN(f) ((void *)(f))
static const struct hook hooks[] = {
    { "cuMemAlloc", "cuMemAlloc_v2", 3020, FN(cuMemAlloc_v2), NULL },
    { "cuMemAllocPitch", "cuMemAllocPitch_v2", 3020, FN(cuMemAllocPitch_v2), NULL },
    { "cuMemAllocManaged", "cuMemAllocManaged", 0, FN(cuMemAllocManaged), NULL },
    { "cuMemFree", "cuMemFree_v2", 3020, FN(cuMemFree_v2), NULL },
    { "cuMemCreate", "cuMemCreate", 0, FN(cuMemCreate), NULL },
    { "cuMemRelease", "cuMemRelease", 0, FN(cuMemRelease), NULL },
    { "cuMemMap", "cuMemMap", 0, FN(cuMemMap), NULL },
    { "cuMemUnmap", "cuMemUnmap", 0, FN(cuMemUnmap), NULL },
    { "cuMemAllocAsync", "cuMemAllocAsync", 0, FN(cuMemAllocAsync), FN(cuMemAllocAsync_ptsz), 11020 },
    { "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", 0, FN(cuMemAllocFromPoolAsync),
      FN(cuMemAllocFromPoolAsync_ptsz), 11020 },
    { "cuMemFreeAsync", "cuMemFreeAsync", 0, FN(cuMemFreeAsync), FN(cuMemFreeAsync_ptsz), 11020 },
    { "cuDeviceGetDefaultMemPool", "cuDeviceGetDefaultMemPool", 11020, FN(cuDeviceGetDefaultMemPool), NULL },
    { "cuMemPoolCreate", "cuMemPoolCreate", 11020, FN(cuMemPoolCreate), NULL },
    { "cuArrayCreate", "cuArrayCreate_v2", 3020, FN(cuArrayCreate_v2), NULL },
    { "cuArray3DCreate", "cuArray3DCreate_v2", 3020, FN(cuArray3DCreate_v2), NULL },
    { "cuArrayDestroy", "cuArrayDestroy", 0, FN(cuArrayDestroy), NULL },
    { "cuMipmappedArrayCreate", "cuMipmappedArrayCreate", 0, FN(cuMipmappedArrayCreate), NULL },
    { "cuMipmappedArrayDestroy", "cuMipmappedArrayDestroy", 0, FN(cuMipmappedArrayDestroy), NULL },
    { "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", 0, FN(cuDevicePrimaryCtxRetain), NULL },
    { "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2", 11000, FN(cuDevicePrimaryCtxRelease_v2), NULL },
    { "cuMemGetInfo", "cuMemGetInfo_v2", 3020, FN(cuMemGetInfo_v2), NULL },
    { "cuDeviceTotalMem", "cuDeviceTotalMem_v2", 3020, FN(cuDeviceTotalMem_v2), NULL },
    { "cuLaunchKernel", "cuLaunchKernel", 0, FN(cuLaunchKernel), FN(cuLaunchKernel_ptsz), 7000 },
    { "cuLaunchKernelEx", "cuLaunchKernelEx", 11060, FN(cuLaunchKernelEx), FN(cuLaunchKernelEx_ptsz), 11060 },
    { "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel", 9000, FN(cuLaunchCooperativeKernel),
      FN(cuLaunchCooperativeKernel_ptsz), 9000 },
    { "cuGraphLaunch", "cuGraphLaunch", 10000, FN(cuGraphLaunch), FN(cuGraphLaunch_ptsz), 10000 },
    { "cuGetProcAddress", "cuGetProcAddress_v2", 12000, FN(cuGetProcAddress_v2), NULL },
};

/* The wrapper for what the driver returned for (symbol, version, flags), or the driver's own. */
static void *wrap_proc(const char *symbol, void *real, int cudaVersion, cuuint64_t flags) {
    if (!real || !symbol)
        return real;
    if (!strcmp(symbol, "cuGetProcAddress"))
        return cudaVersion >= 12000 ? FN(cuGetProcAddress_v2) : FN(cuGetProcAddress);
    for (size_t i = 0; i < sizeof(hooks) / sizeof(hooks[0]); i++) {
        if (strcmp(hooks[i].base, symbol) != 0)
            continue;
        if (cudaVersion < hooks[i].min_version)
            return real; /* an older ABI than the wrapper's */
        /* Before CUDA 7.0 (11.2 for stream-ordered allocation) the driver answers a per-thread
         * request with the legacy-stream function. */
        if ((flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && hooks[i].wrapper_ptsz &&
            cudaVersion >= hooks[i].ptsz_version)
            return hooks[i].wrapper_ptsz;
        return hooks[i].wrapper;
    }
    return real;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
    guard_state();
    if (!g_real.cuGetProcAddress)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = g_real.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn)
        *pfn = wrap_proc(symbol, *pfn, cudaVersion, flags);
    return r;
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *symbolStatus) {
    guard_state();
    if (!g_real.cuGetProcAddress_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    /* The driver fills symbolStatus; only the returned pointer is replaced. */
    CUresult r = g_real.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (r == CUDA_SUCCESS && pfn)
        *pfn = wrap_proc(symbol, *pfn, cudaVersion, flags);
    return r;
}

static void *wrapper_by_name(const char *name) {
    for (size_t i = 0; i < sizeof(hooks) / sizeof(hooks[0]); i++) {
        if (!strcmp(hooks[i].name, name))
            return hooks[i].wrapper;
        if (hooks[i].wrapper_ptsz) {
            size_t n = strlen(hooks[i].name);
            if (!strncmp(name, hooks[i].name, n) && !strcmp(name + n, "_ptsz"))
                return hooks[i].wrapper_ptsz;
        }
    }
    if (!strcmp(name, "cuGetProcAddress"))
        return FN(cuGetProcAddress);
    if (!strcmp(name, "nvmlDeviceGetMemoryInfo"))
        return FN(nvmlDeviceGetMemoryInfo);
    if (!strcmp(name, "nvmlDeviceGetMemoryInfo_v2"))
        return FN(nvmlDeviceGetMemoryInfo_v2);
    return NULL;
}

/* dlsym(RTLD_NEXT, name) means "after the caller"; called from here, glibc would search after the
 * guard instead, and a library loaded after the guard that looks its own "real" function up that
 * way would get itself back. So RTLD_NEXT is answered by searching the objects that follow the
 * caller in the link map, each with its own handle. */
static void *dlsym_after(const void *caller, const char *name) {
    Dl_info info;
    struct link_map *lm = NULL;
    if (!dladdr1(caller, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
        return real_dlsym(RTLD_NEXT, name);
    for (struct link_map *l = lm->l_next; l; l = l->l_next) {
        if (!l->l_name || !l->l_name[0])
            continue;
        void *h = dlopen(l->l_name, RTLD_LAZY | RTLD_NOLOAD);
        if (!h)
            continue;
        void *p = real_dlsym(h, name);
        dlclose(h);
        if (p)
            return p;
    }
    return NULL;
}

/* dlsym(handle-of-libcuda, "cuMemAlloc_v2") would find the driver's function, not the preloaded
 * one: hooked names found in any object are answered with the wrapper. */
EXPORT void *dlsym(void *handle, const char *name) {
    resolve_dlsym();
    if (!real_dlsym)
        return NULL;
    void *p = handle == RTLD_NEXT ? dlsym_after(__builtin_return_address(0), name) : real_dlsym(handle, name);
    if (p && ((name[0] == 'c' && name[1] == 'u') || !strncmp(name, "nvmlDeviceGetMemoryInfo", 23))) {
        void *w = wrapper_by_name(name);
        if (w)
            return w;
    }
    return p;
}
