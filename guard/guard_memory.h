/* guard_memory.h: inside the guard: the allocation wrappers of device memory, arrays and primary
 * contexts (guard_memory.c), for the lookup table (guard_lookup.c) and the fork handler (guard.c). */
#ifndef GS_GUARD_MEMORY_H
#define GS_GUARD_MEMORY_H

#include "cuda_api.h"
#include "guard_base.h"

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t widthInBytes, size_t height,
                                   unsigned int elementSizeBytes);
EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr);
EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *desc);
EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc);
EXPORT CUresult cuArrayDestroy(CUarray hArray);
EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                       unsigned int levels);
EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray h);
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);

/* The primary contexts this process holds. */
struct guard_memory;
extern GUARD_HIDDEN struct guard_memory g_memory;

/* In a forked child: it holds no primary context. */
void memory_after_fork(struct guard_memory *m);

#endif
