/* guard_vmm.h: inside the guard: the wrappers of virtual memory management (cuMemCreate, cuMemMap,
 * cuMemUnmap, cuMemRelease) and of memory pools and stream-ordered allocation (guard_vmm.c), for
 * the lookup table (guard_lookup.c) and the fork handler (guard.c). */
#ifndef GS_GUARD_VMM_H
#define GS_GUARD_VMM_H

#include "cuda_api.h"
#include "guard_base.h"

/* cuda.h's CUmemPoolProps, its leading fields (the only ones the guard reads). */
typedef struct {
    int allocType, handleTypes;
    CUmemLocation location;
} guard_mem_pool_props;

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                            unsigned long long flags);
EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                         unsigned long long flags);
EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);
EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev);
EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const guard_mem_pool_props *props);
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                             CUstream hStream);
EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream);
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);

/* The mappings of this process's handles, and the pools' devices. */
struct guard_vmm;
extern GUARD_HIDDEN struct guard_vmm g_vmm;

/* In a forked child: the parent's mappings are the parent's. */
void vmm_after_fork(struct guard_vmm *v);

#endif
