/* guard_memory.c: the allocation wrappers of device memory (cuMemAlloc, managed and pitched), of
 * arrays and mipmapped arrays, and the primary context's overhead (guard_memory.h). Each reserves
 * before it allocates (guard_alloc.h); frees and releases are never refused, whatever the guard's
 * state, and frees of keys the guard did not see go to the driver untouched. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "guard_account.h"
#include "guard_alloc.h"
#include "guard_base.h"
#include "guard_core.h"
#include "guard_driver.h"
#include "guard_memory.h"
#include "guard_table.h"

/* Context creation overhead: counted once per device while this process holds the primary
 * context. */
struct guard_memory {
    _Atomic int ctx_refs[GS_GUARD_MAX_DEVICES];
};

struct guard_memory g_memory;

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    int st = guard_state();
    struct counted c = alloc_begin(&g_acct, st, g_real.cuMemAlloc_v2 != NULL, dptr != NULL, bytesize);
    if (c.mode != ALLOC_COUNT)
        return c.mode == ALLOC_PASS ? g_real.cuMemAlloc_v2(dptr, bytesize) : c.mode;
    return alloc_done_ptr(&g_acct, &g_table, g_real.cuMemAlloc_v2(dptr, bytesize), dptr, &c);
}

/* Counted at its full size: managed memory can become resident on the device. */
EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    int st = guard_state();
    struct counted c = alloc_begin(&g_acct, st, g_real.cuMemAllocManaged != NULL, dptr != NULL, bytesize);
    if (c.mode != ALLOC_COUNT)
        return c.mode == ALLOC_PASS ? g_real.cuMemAllocManaged(dptr, bytesize, flags) : c.mode;
    return alloc_done_ptr(&g_acct, &g_table, g_real.cuMemAllocManaged(dptr, bytesize, flags), dptr, &c);
}

/* The pitch is known only after the call: reserve the smallest possible size (width x height),
 * then reserve the padding, or give it all back if that does not fit. */
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t widthInBytes, size_t height,
                                   unsigned int elementSizeBytes) {
    int st = guard_state();
    int mode = alloc_mode(st, g_real.cuMemAllocPitch_v2 != NULL, dptr && pitch);
    if (mode != ALLOC_COUNT)
        return mode == ALLOC_PASS ? g_real.cuMemAllocPitch_v2(dptr, pitch, widthInBytes, height, elementSizeBytes)
                                  : mode;
    int dev = guard_current_device(&g_real);
    if (height && widthInBytes > UINT64_MAX / height)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t min = (uint64_t)widthInBytes * height;
    if (!alloc_reserve(&g_acct, dev, min))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = g_real.cuMemAllocPitch_v2(dptr, pitch, widthInBytes, height, elementSizeBytes);
    if (r != CUDA_SUCCESS) {
        account_unreserve(&g_acct, dev, min);
        return r;
    }
    uint64_t real = (uint64_t)*pitch * height;
    if (real > min && !alloc_reserve(&g_acct, dev, real - min)) {
        if (g_real.cuMemFree_v2)
            g_real.cuMemFree_v2(*dptr);
        account_unreserve(&g_acct, dev, min);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    table_put(&g_table, *dptr, K_PTR, dev, real > min ? real : min);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
    int st = guard_state();
    struct counted c = free_begin(st, g_real.cuMemFree_v2 != NULL, &g_table, dptr, K_PTR);
    if (c.mode != ALLOC_COUNT)
        return c.mode == ALLOC_PASS ? g_real.cuMemFree_v2(dptr) : c.mode;
    return free_done(&g_acct, &g_table, g_real.cuMemFree_v2(dptr), dptr, K_PTR, &c);
}

static uint64_t format_bytes(CUarray_format f) {
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    default: return 4;
    }
}

/* Array sizes as laid out (estimates: the driver may pad; the reconcile with NVML catches it). */
static uint64_t array_bytes(size_t w, size_t h, size_t d, CUarray_format f, unsigned ch) {
    uint64_t b = (uint64_t)(w ? w : 1) * (h ? h : 1);
    b *= d ? d : 1;
    return b * format_bytes(f) * (ch ? ch : 1);
}

/* cuArrayCreate_v2 (desc) or cuArray3DCreate_v2 (desc3, when three_d). */
static CUresult array_create(bool three_d, CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *desc,
                             const CUDA_ARRAY3D_DESCRIPTOR *desc3) {
    int st = guard_state();
    bool have_real = three_d ? g_real.cuArray3DCreate_v2 != NULL : g_real.cuArrayCreate_v2 != NULL;
    uint64_t n = 0;
    if (three_d && desc3)
        n = array_bytes(desc3->Width, desc3->Height, desc3->Depth, desc3->Format, desc3->NumChannels);
    else if (!three_d && desc)
        n = array_bytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels);
    struct counted c = alloc_begin(&g_acct, st, have_real, pHandle && (three_d ? desc3 != NULL : desc != NULL), n);
    if (c.mode >= 0)
        return c.mode;
    CUresult r = three_d ? g_real.cuArray3DCreate_v2(pHandle, desc3) : g_real.cuArrayCreate_v2(pHandle, desc);
    if (c.mode == ALLOC_COUNT && alloc_kept(&g_acct, r, &c))
        table_put(&g_table, (uintptr_t)*pHandle, K_ARRAY, c.dev, c.n);
    return r;
}

EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *desc) {
    return array_create(false, pHandle, desc, NULL);
}

EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc) {
    return array_create(true, pHandle, NULL, desc);
}

/* cuArrayDestroy (kind K_ARRAY, of a) or cuMipmappedArrayDestroy (K_MIPMAP, of m). */
static CUresult array_destroy(uint32_t kind, CUarray a, CUmipmappedArray m) {
    int st = guard_state();
    bool arr = kind == K_ARRAY;
    uint64_t key = arr ? (uintptr_t)a : (uintptr_t)m;
    bool have_real = arr ? g_real.cuArrayDestroy != NULL : g_real.cuMipmappedArrayDestroy != NULL;
    struct counted c = free_begin(st, have_real, &g_table, key, kind);
    if (c.mode >= 0)
        return c.mode;
    CUresult r = arr ? g_real.cuArrayDestroy(a) : g_real.cuMipmappedArrayDestroy(m);
    return c.mode == ALLOC_COUNT ? free_done(&g_acct, &g_table, r, key, kind, &c) : r;
}

EXPORT CUresult cuArrayDestroy(CUarray hArray) {
    return array_destroy(K_ARRAY, hArray, NULL);
}

/* The levels' sizes, each half the one before. */
static uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned levels) {
    uint64_t total = 0;
    size_t w = desc->Width, h = desc->Height, d = desc->Depth;
    for (unsigned l = 0; l < levels && l < 32; l++) {
        total += array_bytes(w, h, d, desc->Format, desc->NumChannels);
        w = w > 1 ? w / 2 : 1;
        h = h > 1 ? h / 2 : h;
        d = d > 1 ? d / 2 : d;
    }
    return total;
}

EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                       unsigned int levels) {
    uint64_t n = desc ? mipmap_bytes(desc, levels) : 0;
    int st = guard_state();
    struct counted c = alloc_begin(&g_acct, st, g_real.cuMipmappedArrayCreate != NULL, pHandle && desc, n);
    if (c.mode != ALLOC_COUNT)
        return c.mode == ALLOC_PASS ? g_real.cuMipmappedArrayCreate(pHandle, desc, levels) : c.mode;
    CUresult r = g_real.cuMipmappedArrayCreate(pHandle, desc, levels);
    if (alloc_kept(&g_acct, r, &c))
        table_put(&g_table, (uintptr_t)*pHandle, K_MIPMAP, c.dev, c.n);
    return r;
}

EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray h) {
    return array_destroy(K_MIPMAP, NULL, h);
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    int st = guard_state();
    int mode = alloc_mode(st, g_real.cuDevicePrimaryCtxRetain != NULL, dev >= 0 && dev < GS_GUARD_MAX_DEVICES);
    uint64_t overhead = g_core.limits.context_overhead;
    if (mode != ALLOC_COUNT || !overhead)
        return mode >= 0 ? mode : g_real.cuDevicePrimaryCtxRetain(pctx, dev);
    struct guard_memory *m = &g_memory;
    bool first = atomic_fetch_add(&m->ctx_refs[dev], 1) == 0;
    if (first && !alloc_reserve(&g_acct, dev, overhead)) {
        atomic_fetch_sub(&m->ctx_refs[dev], 1);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult r = g_real.cuDevicePrimaryCtxRetain(pctx, dev);
    if (r != CUDA_SUCCESS && atomic_fetch_sub(&m->ctx_refs[dev], 1) == 1)
        account_unreserve(&g_acct, dev, overhead);
    return r;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    int st = guard_state();
    if (!g_real.cuDevicePrimaryCtxRelease_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = g_real.cuDevicePrimaryCtxRelease_v2(dev);
    uint64_t overhead = g_core.limits.context_overhead;
    if (r == CUDA_SUCCESS && st == G_READY && dev >= 0 && dev < GS_GUARD_MAX_DEVICES && overhead) {
        struct guard_memory *m = &g_memory;
        int refs = atomic_load(&m->ctx_refs[dev]);
        while (refs > 0 && !atomic_compare_exchange_weak(&m->ctx_refs[dev], &refs, refs - 1))
            ;
        if (refs == 1)
            account_unreserve(&g_acct, dev, overhead);
    }
    return r;
}

void memory_after_fork(struct guard_memory *m) {
    for (unsigned d = 0; d < GS_GUARD_MAX_DEVICES; d++)
        atomic_store(&m->ctx_refs[d], 0);
}
