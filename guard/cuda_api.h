/* cuda_api.h: the few CUDA driver API types and signatures the guard needs, declared by hand
 * (as nvtop declares NVML) so the guard builds without the CUDA toolkit. Layouts and values follow
 * cuda.h (CUDA 12.x); tests/guard/check_cuda_h.sh (test guard_cuda_h) checks the names and
 * signatures against a real cuda.h wherever one is installed. Shared by the guard and the simulated driver used in tests. */
#ifndef GS_CUDA_API_H
#define GS_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_UNKNOWN = 999,
};

typedef int CUdevice;
typedef unsigned long long CUdeviceptr;            /* CUdeviceptr_v2 */
typedef unsigned long long cuuint64_t;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUfunc_st *CUfunction;
typedef struct CUevent_st *CUevent;
typedef struct CUarray_st *CUarray;
typedef struct CUmipmappedArray_st *CUmipmappedArray;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUgraphExec_st *CUgraphExec;
typedef unsigned long long CUmemGenericAllocationHandle;

/* cuGetProcAddress flags */
#define CU_GET_PROC_ADDRESS_DEFAULT 0
#define CU_GET_PROC_ADDRESS_LEGACY_STREAM (1ULL << 0)
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (1ULL << 1)

typedef enum CUdriverProcAddressQueryResult_enum {
    CU_GET_PROC_ADDRESS_SUCCESS = 0,
    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
    CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
} CUdriverProcAddressQueryResult;

typedef enum CUarray_format_enum {
    CU_AD_FORMAT_UNSIGNED_INT8 = 0x01,
    CU_AD_FORMAT_UNSIGNED_INT16 = 0x02,
    CU_AD_FORMAT_UNSIGNED_INT32 = 0x03,
    CU_AD_FORMAT_SIGNED_INT8 = 0x08,
    CU_AD_FORMAT_SIGNED_INT16 = 0x09,
    CU_AD_FORMAT_SIGNED_INT32 = 0x0a,
    CU_AD_FORMAT_HALF = 0x10,
    CU_AD_FORMAT_FLOAT = 0x20,
} CUarray_format;

typedef struct CUDA_ARRAY_DESCRIPTOR_st {
    size_t Width, Height;
    CUarray_format Format;
    unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;

typedef struct CUDA_ARRAY3D_DESCRIPTOR_st {
    size_t Width, Height, Depth;
    CUarray_format Format;
    unsigned int NumChannels;
    unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;

typedef enum CUmemLocationType_enum { CU_MEM_LOCATION_TYPE_INVALID = 0, CU_MEM_LOCATION_TYPE_DEVICE = 1 } CUmemLocationType;
typedef enum CUmemAllocationType_enum { CU_MEM_ALLOCATION_TYPE_PINNED = 1 } CUmemAllocationType;

typedef struct CUmemLocation_st {
    CUmemLocationType type;
    int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
    CUmemAllocationType type;
    int requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType, gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

/* cuMemCreate's size and cuMemMap's address, size and offset are multiples of this (cuda.h). */
typedef enum CUmemAllocationGranularity_flags_enum {
    CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0,
    CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 0x1,
} CUmemAllocationGranularity_flags;

_Static_assert(sizeof(CUDA_ARRAY_DESCRIPTOR) == 24, "CUDA_ARRAY_DESCRIPTOR");
_Static_assert(sizeof(CUDA_ARRAY3D_DESCRIPTOR) == 40, "CUDA_ARRAY3D_DESCRIPTOR");
_Static_assert(sizeof(CUmemAllocationProp) == 32, "CUmemAllocationProp");

/* cuLaunchKernelEx's launch configuration (CUDA >= 11.8; cuBLAS launches its Hopper kernels with
 * it). The guard reads hStream alone; the attributes stay opaque. */
typedef struct CUlaunchAttribute_st CUlaunchAttribute;
typedef struct CUlaunchConfig_st {
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;
_Static_assert(sizeof(CUlaunchConfig) == 56 && offsetof(CUlaunchConfig, hStream) == 32, "CUlaunchConfig");

/* Signatures of every function the guard interposes (the _v2 ABIs; older ABIs pass through). */
#define GS_CUDA_HOOKED_FUNCTIONS(X)                                                                          \
    X(cuMemAlloc_v2, (CUdeviceptr * dptr, size_t bytesize), (dptr, bytesize))                                  \
    X(cuMemAllocPitch_v2,                                                                                      \
      (CUdeviceptr * dptr, size_t *pitch, size_t widthInBytes, size_t height, unsigned int elementSizeBytes),   \
      (dptr, pitch, widthInBytes, height, elementSizeBytes))                                                   \
    X(cuMemAllocManaged, (CUdeviceptr * dptr, size_t bytesize, unsigned int flags), (dptr, bytesize, flags))   \
    X(cuMemFree_v2, (CUdeviceptr dptr), (dptr))                                                                \
    X(cuMemCreate,                                                                                             \
      (CUmemGenericAllocationHandle * handle, size_t size, const CUmemAllocationProp *prop,                    \
       unsigned long long flags),                                                                              \
      (handle, size, prop, flags))                                                                             \
    X(cuMemRelease, (CUmemGenericAllocationHandle handle), (handle))                                           \
    X(cuMemMap, (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,             \
                 unsigned long long flags),                                                                    \
      (ptr, size, offset, handle, flags))                                                                      \
    X(cuMemUnmap, (CUdeviceptr ptr, size_t size), (ptr, size))                                                 \
    X(cuMemAllocAsync, (CUdeviceptr * dptr, size_t bytesize, CUstream hStream), (dptr, bytesize, hStream))     \
    X(cuMemAllocFromPoolAsync, (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream),    \
      (dptr, bytesize, pool, hStream))                                                                         \
    X(cuMemFreeAsync, (CUdeviceptr dptr, CUstream hStream), (dptr, hStream))                                   \
    X(cuArrayCreate_v2, (CUarray * pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray),                     \
      (pHandle, pAllocateArray))                                                                               \
    X(cuArray3DCreate_v2, (CUarray * pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray),                 \
      (pHandle, pAllocateArray))                                                                               \
    X(cuArrayDestroy, (CUarray hArray), (hArray))                                                              \
    X(cuMipmappedArrayCreate,                                                                                  \
      (CUmipmappedArray * pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,                         \
       unsigned int numMipmapLevels),                                                                          \
      (pHandle, pMipmappedArrayDesc, numMipmapLevels))                                                         \
    X(cuMipmappedArrayDestroy, (CUmipmappedArray hMipmappedArray), (hMipmappedArray))                          \
    X(cuDevicePrimaryCtxRetain, (CUcontext * pctx, CUdevice dev), (pctx, dev))                                 \
    X(cuDevicePrimaryCtxRelease_v2, (CUdevice dev), (dev))                                                     \
    X(cuMemGetInfo_v2, (size_t * free, size_t *total), (free, total))                                          \
    X(cuDeviceTotalMem_v2, (size_t * bytes, CUdevice dev), (bytes, dev))                                       \
    X(cuLaunchKernel,                                                                                          \
      (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,                      \
       unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes,     \
       CUstream hStream, void **kernelParams, void **extra),                                                   \
      (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,              \
       kernelParams, extra))                                                                                   \
    X(cuLaunchKernelEx, (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra),       \
      (config, f, kernelParams, extra))                                                                        \
    X(cuLaunchCooperativeKernel,                                                                               \
      (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,                      \
       unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes,     \
       CUstream hStream, void **kernelParams),                                                                 \
      (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,              \
       kernelParams))                                                                                          \
    X(cuGraphLaunch, (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream))

/* Functions the guard uses without interposing them. */
typedef CUresult (*cuCtxGetDevice_fn)(CUdevice *device);
typedef CUresult (*cuDeviceGet_fn)(CUdevice *device, int ordinal);
typedef CUresult (*cuGetProcAddress_fn)(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
typedef CUresult (*cuGetProcAddress_v2_fn)(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                           CUdriverProcAddressQueryResult *symbolStatus);
typedef CUresult (*cuMemGetAllocationGranularity_fn)(size_t *granularity, const CUmemAllocationProp *prop,
                                                   CUmemAllocationGranularity_flags option);
/* The compute pacer times the container's kernels with events (CU_EVENT_DEFAULT = 0: timing on). */
#define CU_EVENT_DEFAULT 0
typedef CUresult (*cuEventCreate_fn)(CUevent *phEvent, unsigned int Flags);
typedef CUresult (*cuEventRecord_fn)(CUevent hEvent, CUstream hStream);
typedef CUresult (*cuEventQuery_fn)(CUevent hEvent);
typedef CUresult (*cuEventElapsedTime_fn)(float *pMilliseconds, CUevent hStart, CUevent hEnd);
typedef CUresult (*cuEventDestroy_v2_fn)(CUevent hEvent);

#endif
