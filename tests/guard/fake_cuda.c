/* fake_cuda.c: a simulated CUDA driver (libcuda.so.1) for the guard's tests only. It exports the
 * driver functions the guard interposes, with the signatures of guard/cuda_api.h, plus the few a
 * program needs around them (cuInit, devices, primary contexts) and cuGetProcAddress / _v2, which
 * resolve base names the way the real driver does: the newest ABI version of the symbol available
 * at the caller's cudaVersion, the _ptsz variant when the caller asks for per-thread default
 * streams, CUDA_ERROR_NOT_FOUND with SYMBOL_NOT_FOUND or VERSION_NOT_SUFFICIENT otherwise.
 *
 * Memory model (per process; the guard must enforce across processes itself): each device has a
 * capacity (FAKE_CUDA_TOTAL_MIB, default 16384) and a used byte count. Every allocation gets a
 * distinct fake address or handle and its size is recorded; frees of unknown addresses or handles
 * fail (CUDA_ERROR_INVALID_VALUE / INVALID_HANDLE) and are counted. FAKE_CUDA_DEVICES sets the
 * device count (default 2); FAKE_CUDA_FAIL_ALLOC=1 makes every allocation fail with
 * CUDA_ERROR_OUT_OF_MEMORY. FAKE_GPU_OTHERS_MIB is memory used on the physical GPU by processes
 * outside the test (cuMemGetInfo's free is that much smaller). FAKE_CUDA_SHARED=FILE keeps the
 * ground truth across processes (fake_shared.h): each process's live bytes until it frees them or
 * dies, checked against a watch quota at every allocation, and cuMemGetInfo's free is what all of
 * them leave. FAKE_CUDA_EXIT_DELAY_MS=N makes a process that exits take N ms after its atexit
 * handlers before it is gone, holding its memory meanwhile (the real driver's teardown).
 *
 * Virtual memory management as cuda.h documents it: cuMemCreate's size must be a multiple of the
 * granularity (cuMemGetAllocationGranularity, minimum and recommended: FAKE_CUDA_GRANULARITY_KIB,
 * default 1024; current GPUs say 2 MiB, which the VMM tests set; else CUDA_ERROR_INVALID_VALUE); cuMemMap maps a live handle into a range cuMemAddressReserve gave out
 * (address, size and offset multiples of the granularity, within the handle); cuMemUnmap takes
 * whole mappings; and a handle's memory is freed only when it is released AND its last mapping
 * is unmapped (fakeCudaUsedBytes and the shared ground truth hold it until then).
 *
 * Time model: each device of the process is a GPU that runs kernels one after another in real
 * (CLOCK_MONOTONIC) time: a launch takes gridX*gridY*gridZ microseconds of GPU time and starts
 * when the previous one ends (launches return at once, as the real driver's queue does). Events
 * take the time at which the device reaches them, so cuEventQuery says CUDA_ERROR_NOT_READY until
 * then, cuEventSynchronize / cuCtxSynchronize / cuStreamSynchronize wait for it, and
 * cuEventElapsedTime gives the GPU time between two events. All streams of a device share its one
 * queue. fakeCudaClockUs is the total GPU time launched. FAKE_CUDA_GPU=FILE makes device 0 one GPU
 * time-sliced between every process that names the same file (fake_timeslice.h): a kernel's span
 * then grows with the neighbours' load, and fakeCudaProcessSamples gives the per-process
 * utilization the simulated NVML reports.
 *
 * The library is linked with -Bsymbolic so that the addresses it hands out (cuGetProcAddress,
 * fakeCudaSymbol) are its own functions even while a preloaded guard exports the same names.
 * The fakeCuda* exports are ground truth for tests and do not depend on the guard. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "guard/cuda_api.h"
#include "guard/guard_proc.h"
#include "tests/guard/fake_shared.h"
#include "tests/guard/fake_timeslice.h"

#define EXPORT __attribute__((visibility("default")))
#define FK_MAX_DEVICES 16
#define FK_PTR_BASE 0x7f0000000000ULL
#define FK_HANDLE_BASE 0x5a0000000000ULL
#define FK_ARRAY_BASE 0x3c0000000000ULL
#define FK_MIPMAP_BASE 0x3d0000000000ULL
#define FK_CTX_BASE 0xc7000ULL
#define FK_POOL_BASE 0xb0000ULL
#define FK_VA_BASE 0x600000000000ULL   /* cuMemAddressReserve's ranges */
#define FK_MAX_RANGES 4096             /* reservations and mappings per process */

/* Every exported driver function: S(name, base name for cuGetProcAddress, version it appeared in,
 * per-thread-default-stream variant?). */
#define FK_SYMBOLS(S)                                                                                      \
    S(cuInit, "cuInit", 2000, 0)                                                                           \
    S(cuDriverGetVersion, "cuDriverGetVersion", 2020, 0)                                                   \
    S(cuDeviceGet, "cuDeviceGet", 2000, 0)                                                                 \
    S(cuDeviceGetCount, "cuDeviceGetCount", 2000, 0)                                                       \
    S(cuDeviceGetUuid, "cuDeviceGetUuid", 9020, 0)                                                         \
    S(cuDeviceGetUuid_v2, "cuDeviceGetUuid", 11040, 0)                                                     \
    S(cuCtxGetDevice, "cuCtxGetDevice", 2000, 0)                                                           \
    S(cuCtxSetCurrent, "cuCtxSetCurrent", 4000, 0)                                                         \
    S(cuCtxSynchronize, "cuCtxSynchronize", 2000, 0)                                                       \
    S(cuStreamSynchronize, "cuStreamSynchronize", 2000, 0)                                                 \
    S(cuStreamSynchronize_ptsz, "cuStreamSynchronize", 7000, 1)                                            \
    S(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000, 0)                                       \
    S(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", 7000, 0)                                     \
    S(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", 11000, 0)                                 \
    S(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", 11020, 0)                                    \
    S(cuMemAlloc, "cuMemAlloc", 2000, 0)                                                                   \
    S(cuMemAlloc_v2, "cuMemAlloc", 3020, 0)                                                                \
    S(cuMemAllocPitch, "cuMemAllocPitch", 2000, 0)                                                         \
    S(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, 0)                                                      \
    S(cuMemAllocManaged, "cuMemAllocManaged", 6000, 0)                                                     \
    S(cuMemFree, "cuMemFree", 2000, 0)                                                                     \
    S(cuMemFree_v2, "cuMemFree", 3020, 0)                                                                  \
    S(cuMemCreate, "cuMemCreate", 10020, 0)                                                                \
    S(cuMemRelease, "cuMemRelease", 10020, 0)                                                              \
    S(cuMemMap, "cuMemMap", 10020, 0)                                                                      \
    S(cuMemUnmap, "cuMemUnmap", 10020, 0)                                                                  \
    S(cuMemAddressReserve, "cuMemAddressReserve", 10020, 0)                                                \
    S(cuMemAddressFree, "cuMemAddressFree", 10020, 0)                                                      \
    S(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity", 10020, 0)                            \
    S(cuMemAllocAsync, "cuMemAllocAsync", 11020, 0)                                                        \
    S(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020, 1)                                                   \
    S(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, 0)                                        \
    S(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 11020, 1)                                   \
    S(cuMemFreeAsync, "cuMemFreeAsync", 11020, 0)                                                          \
    S(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020, 1)                                                     \
    S(cuArrayCreate, "cuArrayCreate", 2000, 0)                                                             \
    S(cuArrayCreate_v2, "cuArrayCreate", 3020, 0)                                                          \
    S(cuArray3DCreate, "cuArray3DCreate", 2000, 0)                                                         \
    S(cuArray3DCreate_v2, "cuArray3DCreate", 3020, 0)                                                      \
    S(cuArrayDestroy, "cuArrayDestroy", 2000, 0)                                                           \
    S(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 5000, 0)                                           \
    S(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 5000, 0)                                         \
    S(cuMemGetInfo, "cuMemGetInfo", 2000, 0)                                                               \
    S(cuMemGetInfo_v2, "cuMemGetInfo", 3020, 0)                                                            \
    S(cuDeviceTotalMem, "cuDeviceTotalMem", 2000, 0)                                                       \
    S(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020, 0)                                                    \
    S(cuLaunchKernel, "cuLaunchKernel", 4000, 0)                                                           \
    S(cuLaunchKernel_ptsz, "cuLaunchKernel", 7000, 1)                                                      \
    S(cuLaunchKernelEx, "cuLaunchKernelEx", 11060, 0)                                                      \
    S(cuLaunchKernelEx_ptsz, "cuLaunchKernelEx", 11060, 1)                                                 \
    S(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", 9000, 0)                                     \
    S(cuLaunchCooperativeKernel_ptsz, "cuLaunchCooperativeKernel", 9000, 1)                                \
    S(cuGraphLaunch, "cuGraphLaunch", 10000, 0)                                                            \
    S(cuGraphLaunch_ptsz, "cuGraphLaunch", 10000, 1)                                                       \
    S(cuEventCreate, "cuEventCreate", 2000, 0)                                                             \
    S(cuEventRecord, "cuEventRecord", 2000, 0)                                                             \
    S(cuEventRecord_ptsz, "cuEventRecord", 7000, 1)                                                        \
    S(cuEventQuery, "cuEventQuery", 2000, 0)                                                               \
    S(cuEventSynchronize, "cuEventSynchronize", 2000, 0)                                                   \
    S(cuEventElapsedTime, "cuEventElapsedTime", 2000, 0)                                                   \
    S(cuEventDestroy, "cuEventDestroy", 2000, 0)                                                           \
    S(cuEventDestroy_v2, "cuEventDestroy", 4000, 0)                                                        \
    S(cuGetProcAddress, "cuGetProcAddress", 11030, 0)                                                      \
    S(cuGetProcAddress_v2, "cuGetProcAddress", 12000, 0)

enum fk_symbol_index {
#define FK_ENUM(name, base, since, ptsz) FK_##name,
    FK_SYMBOLS(FK_ENUM)
#undef FK_ENUM
    FK_N_SYMBOLS
};

/* Prototypes: the hooked functions with cuda_api.h's signatures (the compiler checks the
 * definitions below against them), then the rest. */
#define FK_DECLARE(name, params, args) EXPORT CUresult name params;
GS_CUDA_HOOKED_FUNCTIONS(FK_DECLARE)
#undef FK_DECLARE

typedef struct { char bytes[16]; } CUuuid;
typedef unsigned int CUdeviceptr_v1;

EXPORT CUresult cuInit(unsigned int flags);
EXPORT CUresult cuDriverGetVersion(int *driverVersion);
EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal);
EXPORT CUresult cuDeviceGetCount(int *count);
EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev);
EXPORT CUresult cuCtxGetDevice(CUdevice *device);
EXPORT CUresult cuCtxSetCurrent(CUcontext ctx);
EXPORT CUresult cuCtxSynchronize(void);
EXPORT CUresult cuStreamSynchronize(CUstream hStream);
EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream);
EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev);
EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize);
EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pitch, unsigned int widthInBytes,
                                unsigned int height, unsigned int elementSizeBytes);
EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr);
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                             CUstream hStream);
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                    unsigned long long flags);
EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size);
EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                              CUmemAllocationGranularity_flags option);
EXPORT CUresult cuArrayCreate(CUarray *pHandle, const void *pAllocateArray);
EXPORT CUresult cuArray3DCreate(CUarray *pHandle, const void *pAllocateArray);
EXPORT CUresult cuMemGetInfo(unsigned int *free, unsigned int *total);
EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev);
EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                    unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                    unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                    void **kernelParams, void **extra);
EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra);
EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                               unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                               unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                               void **kernelParams);
EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *symbolStatus);
EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags);
EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream);
EXPORT CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream);
EXPORT CUresult cuEventQuery(CUevent hEvent);
EXPORT CUresult cuEventSynchronize(CUevent hEvent);
EXPORT CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
EXPORT CUresult cuEventDestroy(CUevent hEvent);
EXPORT CUresult cuEventDestroy_v2(CUevent hEvent);

/* Test-only exports. */
EXPORT unsigned long long fakeCudaLaunches(void);
EXPORT unsigned long long fakeCudaUsedBytes(int dev);
EXPORT unsigned long long fakeCudaFrees(void);
EXPORT unsigned long long fakeCudaUnknownFrees(void);
EXPORT unsigned long long fakeCudaAllocs(void);
EXPORT unsigned long long fakeCudaClockUs(void);
EXPORT unsigned long long fakeCudaCalls(const char *name);
EXPORT void *fakeCudaSymbol(const char *name);
EXPORT const char *fakeCudaResolveName(const char *base, int cudaVersion, unsigned long long flags);

/* ---- state ---------------------------------------------------------------------------------- */

enum fk_kind { K_PTR = 1, K_HANDLE, K_ARRAY, K_MIPMAP };

struct fk_alloc {
    uint64_t key;
    uint64_t size;
    int dev;                           /* -1: not device memory (cuMemCreate on the host) */
    int kind;
    unsigned maps;                     /* K_HANDLE: mappings of it (cuMemMap) */
    bool released;                     /* K_HANDLE: released, its memory held by its mappings */
};

static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static int n_devices = 2;
static uint64_t capacity = 16384ULL << 20;
static bool fail_alloc;
static uint64_t slowdown = 1; /* FAKE_CUDA_SLOWDOWN=k: a time-slicing neighbour takes (k-1)/k of the GPU */
static uint64_t others_bytes; /* FAKE_GPU_OTHERS_MIB */
static struct fake_shared *shared; /* FAKE_CUDA_SHARED */
static int shared_fd = -1;
static unsigned exit_delay_ms;
static uint64_t vmm_granularity = 1ULL << 20; /* FAKE_CUDA_GRANULARITY_KIB */

static _Atomic int initialized;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t used[FK_MAX_DEVICES];
static int ctx_refs[FK_MAX_DEVICES];
static struct fk_alloc *allocs;
static size_t n_allocs, cap_allocs;
static uint64_t next_id = 1;

static _Atomic unsigned long long launches, frees, unknown_frees, n_alloc_ok, clock_us;
static _Atomic unsigned long long calls[FK_N_SYMBOLS];
static _Thread_local int current_device;
static uint64_t busy_until_ns[FK_MAX_DEVICES]; /* when each device's queue runs dry (under `lock`) */
/* The end times of the launches queued on each device (a ring, under `lock`): as the real driver,
 * a launch waits while FK_QUEUE_DEPTH launches are still pending. */
#define FK_QUEUE_DEPTH 1024
static uint64_t queue_end[FK_MAX_DEVICES][FK_QUEUE_DEPTH];
static unsigned queue_head[FK_MAX_DEVICES], queue_len[FK_MAX_DEVICES];

#define HIT(name) atomic_fetch_add_explicit(&calls[FK_##name], 1, memory_order_relaxed)

static void read_config(void)
{
    const char *s = getenv("FAKE_CUDA_DEVICES");
    if (s && *s) {
        long v = strtol(s, NULL, 10);
        if (v >= 0 && v <= FK_MAX_DEVICES)
            n_devices = (int)v;
    }
    s = getenv("FAKE_CUDA_TOTAL_MIB");
    if (s && *s) {
        unsigned long long v = strtoull(s, NULL, 10);
        if (v > 0)
            capacity = (uint64_t)v << 20;
    }
    s = getenv("FAKE_CUDA_FAIL_ALLOC");
    fail_alloc = s && strcmp(s, "1") == 0;
    s = getenv("FAKE_GPU_OTHERS_MIB");
    if (s && *s)
        others_bytes = strtoull(s, NULL, 10) << 20;
    s = getenv("FAKE_CUDA_EXIT_DELAY_MS");
    if (s && *s)
        exit_delay_ms = (unsigned)strtoul(s, NULL, 10);
    s = getenv("FAKE_CUDA_SHARED");
    if (s && *s) {
        shared_fd = open(s, O_RDWR | O_CLOEXEC);
        void *p = shared_fd < 0 ? MAP_FAILED
                                : mmap(NULL, sizeof(struct fake_shared), PROT_READ | PROT_WRITE, MAP_SHARED, shared_fd, 0);
        if (p == MAP_FAILED) {
            fprintf(stderr, "fake_cuda: FAKE_CUDA_SHARED=%s: cannot map it\n", s);
            abort();
        }
        shared = p;
    }
    s = getenv("FAKE_CUDA_GRANULARITY_KIB");
    if (s && *s) {
        unsigned long long v = strtoull(s, NULL, 10);
        if (v >= 4 && (v & (v - 1)) == 0)
            vmm_granularity = (uint64_t)v << 10;
    }
    s = getenv("FAKE_CUDA_SLOWDOWN");
    if (s && *s) {
        unsigned long long v = strtoull(s, NULL, 10);
        if (v >= 1 && v <= 100)
            slowdown = v;
    }
}

static void config(void)
{
    pthread_once(&config_once, read_config);
}

static bool ready(void)
{
    return atomic_load(&initialized) != 0;
}

static bool valid_device(int dev)
{
    config();
    return dev >= 0 && dev < n_devices;
}

#define NO_DEVICE INT_MIN

/* The checks the driver makes first, in its order: initialised, the output pointer, the device
 * ordinal (NO_DEVICE: the call takes none). */
static CUresult precheck(const void *out, int dev)
{
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev != NO_DEVICE && !valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

static uint64_t base_of(int kind)
{
    switch (kind) {
    case K_HANDLE: return FK_HANDLE_BASE;
    case K_ARRAY: return FK_ARRAY_BASE;
    case K_MIPMAP: return FK_MIPMAP_BASE;
    default: return FK_PTR_BASE;
    }
}

/* ---- the ground truth across processes (FAKE_CUDA_SHARED) -------------------------------------- */

/* Whether the process still holds GPU memory: alive and not a zombie, and the same process. */
static bool holds_memory(int32_t pid, uint64_t start)
{
    if (kill(pid, 0) < 0 && errno == ESRCH)
        return false;
    char state = '?';
    uint64_t st = gs_proc_stat(pid, &state);
    return st && st == start && state != 'Z' && state != 'X';
}

/* Adds delta (signed) to this process's live bytes on dev and, for an allocation, checks what all
 * live processes hold together there. */
static void shared_account(int dev, int64_t delta)
{
    if (!shared || dev < 0 || dev >= FAKE_SHARED_DEVICES)
        return;
    int32_t me = (int32_t)getpid();
    /* flock excludes other processes only (the lock is the open file's): threads take this too */
    static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&shared_lock);
    while (flock(shared_fd, LOCK_EX) < 0 && errno == EINTR)
        ;
    int mine = -1, free_slot = -1;
    uint64_t live = 0;
    for (int i = 0; i < FAKE_SHARED_PROCS; i++) {
        int32_t pid = shared->procs[i].pid;
        if (pid == me) {
            mine = i;
        } else if (pid && !holds_memory(pid, shared->procs[i].start_time)) {
            memset(&shared->procs[i], 0, sizeof(shared->procs[i])); /* the kernel freed it */
            pid = 0;
        }
        if (!pid && free_slot < 0)
            free_slot = i;
    }
    if (mine < 0 && free_slot >= 0) {
        char state;
        mine = free_slot;
        shared->procs[mine].pid = me;
        shared->procs[mine].start_time = gs_proc_stat(me, &state);
    }
    if (mine >= 0)
        shared->procs[mine].used[dev] += (uint64_t)delta;
    for (int i = 0; i < FAKE_SHARED_PROCS; i++)
        live += shared->procs[i].used[dev];
    if (delta > 0) {
        if (live > shared->max_live[dev])
            shared->max_live[dev] = live;
        if (shared->watch_quota && live > shared->watch_quota) {
            shared->violations++;
            if (live - shared->watch_quota > shared->max_over)
                shared->max_over = live - shared->watch_quota;
        }
    }
    flock(shared_fd, LOCK_UN);
    pthread_mutex_unlock(&shared_lock);
}

/* What every live process holds on dev together (FAKE_CUDA_SHARED), or this process's use. */
static uint64_t device_used(int dev)
{
    if (!shared)
        return used[dev];
    uint64_t live = 0;
    while (flock(shared_fd, LOCK_EX) < 0 && errno == EINTR)
        ;
    for (int i = 0; i < FAKE_SHARED_PROCS; i++)
        if (shared->procs[i].pid &&
            (shared->procs[i].pid == getpid() || holds_memory(shared->procs[i].pid, shared->procs[i].start_time)))
            live += shared->procs[i].used[dev];
    flock(shared_fd, LOCK_UN);
    return live;
}

/* A process's teardown after its atexit handlers (ELF destructors run after them): its memory is
 * still held while it lasts. */
__attribute__((destructor)) static void exit_delay(void)
{
    if (exit_delay_ms) {
        struct timespec ts = { .tv_sec = exit_delay_ms / 1000, .tv_nsec = (long)(exit_delay_ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
    }
}

/* Records an allocation of `size` bytes on `dev` (-1: not device memory); returns its key. */
static CUresult record_alloc(int kind, int dev, uint64_t size, uint64_t *key)
{
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev >= 0 && !valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (fail_alloc)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    if (dev >= 0 && (size > capacity || used[dev] > capacity - size)) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (n_allocs == cap_allocs) {
        size_t ncap = cap_allocs ? cap_allocs * 2 : 256;
        struct fk_alloc *n = realloc(allocs, ncap * sizeof(*n));
        if (!n) {
            pthread_mutex_unlock(&lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        allocs = n;
        cap_allocs = ncap;
    }
    uint64_t k = base_of(kind) + (next_id++ << 20);
    allocs[n_allocs++] = (struct fk_alloc){ .key = k, .size = size, .dev = dev, .kind = kind };
    if (dev >= 0)
        used[dev] += size;
    pthread_mutex_unlock(&lock);
    if (dev >= 0)
        shared_account(dev, (int64_t)size);
    atomic_fetch_add(&n_alloc_ok, 1);
    *key = k;
    return CUDA_SUCCESS;
}

static CUresult release(int kind, uint64_t key, CUresult unknown)
{
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < n_allocs; i++) {
        if (allocs[i].key == key && allocs[i].kind == kind && !allocs[i].released) {
            if (allocs[i].maps) { /* the mappings keep the memory until the last is unmapped */
                allocs[i].released = true;
                pthread_mutex_unlock(&lock);
                atomic_fetch_add(&frees, 1);
                return CUDA_SUCCESS;
            }
            int dev = allocs[i].dev;
            uint64_t size = allocs[i].size;
            if (dev >= 0)
                used[dev] -= size;
            allocs[i] = allocs[--n_allocs];
            pthread_mutex_unlock(&lock);
            if (dev >= 0)
                shared_account(dev, -(int64_t)size);
            atomic_fetch_add(&frees, 1);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&lock);
    atomic_fetch_add(&unknown_frees, 1);
    return unknown;
}

static int format_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 4;
    default: return 0;
    }
}

/* Bytes of one array level; 0 if the descriptor is invalid. */
static uint64_t array_bytes(size_t w, size_t h, size_t d, CUarray_format f, unsigned ch)
{
    int fb = format_bytes(f);
    if (fb == 0 || w == 0 || (ch != 1 && ch != 2 && ch != 4))
        return 0;
    return (uint64_t)w * (h ? h : 1) * (d ? d : 1) * ch * (uint64_t)fb;
}

/* ---- initialisation, devices, contexts ------------------------------------------------------- */

EXPORT CUresult cuInit(unsigned int flags)
{
    HIT(cuInit);
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    config();
    atomic_store(&initialized, 1);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int *driverVersion)
{
    HIT(cuDriverGetVersion);
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = 12080;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    HIT(cuDeviceGet);
    CUresult pre = precheck(device, ordinal);
    if (pre != CUDA_SUCCESS)
        return pre;
    *device = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *count)
{
    HIT(cuDeviceGetCount);
    CUresult pre = precheck(count, NO_DEVICE);
    if (pre != CUDA_SUCCESS)
        return pre;
    config();
    *count = n_devices;
    return CUDA_SUCCESS;
}

static CUresult device_uuid(CUuuid *uuid, CUdevice dev)
{
    CUresult pre = precheck(uuid, dev);
    if (pre != CUDA_SUCCESS)
        return pre;
    for (int i = 0; i < 16; i++)
        uuid->bytes[i] = (char)(0x10 * (i % 16) + dev);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    HIT(cuDeviceGetUuid);
    return device_uuid(uuid, dev);
}

EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    HIT(cuDeviceGetUuid_v2);
    return device_uuid(uuid, dev);
}

EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
    HIT(cuCtxGetDevice);
    CUresult pre = precheck(device, NO_DEVICE);
    if (pre != CUDA_SUCCESS)
        return pre;
    *device = current_device;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    HIT(cuCtxSetCurrent);
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!ctx) {
        current_device = 0;
        return CUDA_SUCCESS;
    }
    uintptr_t v = (uintptr_t)ctx;
    if (v < FK_CTX_BASE || (v - FK_CTX_BASE) % 64 != 0 || !valid_device((int)((v - FK_CTX_BASE) / 64)))
        return CUDA_ERROR_INVALID_CONTEXT;
    current_device = (int)((v - FK_CTX_BASE) / 64);
    return CUDA_SUCCESS;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
    for (uint64_t n = now_ns(); n < t; n = now_ns()) {
        struct timespec ts = { .tv_sec = (time_t)((t - n) / 1000000000ULL), .tv_nsec = (long)((t - n) % 1000000000ULL) };
        nanosleep(&ts, NULL);
    }
}

/* The time at which the current device's queue reaches a point enqueued now. */
static uint64_t queue_tail(void)
{
    pthread_mutex_lock(&lock);
    uint64_t t = busy_until_ns[current_device];
    pthread_mutex_unlock(&lock);
    uint64_t n = now_ns();
    return t > n ? t : n;
}

/* Device 0 is the time-sliced GPU shared with other processes (FAKE_CUDA_GPU). */
static bool timesliced(void)
{
    return current_device == 0 && fk_ts_enabled();
}

/* Waits until the current device has run everything launched so far. */
static CUresult drain(void)
{
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (timesliced())
        fk_ts_drain();
    else
        sleep_until(queue_tail());
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSynchronize(void)
{
    HIT(cuCtxSynchronize);
    return drain();
}

EXPORT CUresult cuStreamSynchronize(CUstream hStream)
{
    HIT(cuStreamSynchronize);
    (void)hStream;
    return drain();
}

EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
    HIT(cuStreamSynchronize_ptsz);
    (void)hStream;
    return drain();
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    HIT(cuDevicePrimaryCtxRetain);
    CUresult pre = precheck(pctx, dev);
    if (pre != CUDA_SUCCESS)
        return pre;
    pthread_mutex_lock(&lock);
    ctx_refs[dev]++;
    pthread_mutex_unlock(&lock);
    *pctx = (CUcontext)(uintptr_t)(FK_CTX_BASE + 64 * (uint64_t)dev);
    return CUDA_SUCCESS;
}

static CUresult primary_release(CUdevice dev)
{
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!valid_device(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    if (ctx_refs[dev] > 0)
        ctx_refs[dev]--;
    else
        r = CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_unlock(&lock);
    return r;
}

EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    HIT(cuDevicePrimaryCtxRelease);
    return primary_release(dev);
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    HIT(cuDevicePrimaryCtxRelease_v2);
    return primary_release(dev);
}

EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
    HIT(cuDeviceGetDefaultMemPool);
    CUresult pre = precheck(pool, dev);
    if (pre != CUDA_SUCCESS)
        return pre;
    *pool = (CUmemoryPool)(uintptr_t)(FK_POOL_BASE + 64 * (uint64_t)dev);
    return CUDA_SUCCESS;
}

/* ---- allocations ------------------------------------------------------------------------------ */

/* The ABIs before CUDA 3.2 (32-bit sizes): present, as in the real driver, but unusable here. */
EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    HIT(cuMemAlloc);
    (void)dptr, (void)bytesize;
    return CUDA_ERROR_NOT_SUPPORTED;
}

EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pitch, unsigned int widthInBytes,
                                unsigned int height, unsigned int elementSizeBytes)
{
    HIT(cuMemAllocPitch);
    (void)dptr, (void)pitch, (void)widthInBytes, (void)height, (void)elementSizeBytes;
    return CUDA_ERROR_NOT_SUPPORTED;
}

EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
    HIT(cuMemFree);
    (void)dptr;
    return CUDA_ERROR_NOT_SUPPORTED;
}

EXPORT CUresult cuArrayCreate(CUarray *pHandle, const void *pAllocateArray)
{
    HIT(cuArrayCreate);
    (void)pHandle, (void)pAllocateArray;
    return CUDA_ERROR_NOT_SUPPORTED;
}

EXPORT CUresult cuArray3DCreate(CUarray *pHandle, const void *pAllocateArray)
{
    HIT(cuArray3DCreate);
    (void)pHandle, (void)pAllocateArray;
    return CUDA_ERROR_NOT_SUPPORTED;
}

EXPORT CUresult cuMemGetInfo(unsigned int *free, unsigned int *total)
{
    HIT(cuMemGetInfo);
    (void)free, (void)total;
    return CUDA_ERROR_NOT_SUPPORTED;
}

EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    HIT(cuDeviceTotalMem);
    (void)bytes, (void)dev;
    return CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult alloc_ptr(CUdeviceptr *dptr, size_t bytesize, int dev)
{
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key;
    CUresult r = record_alloc(K_PTR, dev, bytesize, &key);
    if (r == CUDA_SUCCESS)
        *dptr = key;
    return r;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    HIT(cuMemAlloc_v2);
    return alloc_ptr(dptr, bytesize, current_device);
}

EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t widthInBytes, size_t height,
                                   unsigned int elementSizeBytes)
{
    HIT(cuMemAllocPitch_v2);
    if (!pitch || widthInBytes == 0 || height == 0 ||
        (elementSizeBytes != 4 && elementSizeBytes != 8 && elementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t p = (widthInBytes + 511) / 512 * 512;
    CUresult r = alloc_ptr(dptr, p * height, current_device);
    if (r == CUDA_SUCCESS)
        *pitch = p;
    return r;
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    HIT(cuMemAllocManaged);
    if (flags != 1 && flags != 2) /* CU_MEM_ATTACH_GLOBAL, CU_MEM_ATTACH_HOST */
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_ptr(dptr, bytesize, current_device);
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    HIT(cuMemFree_v2);
    return release(K_PTR, dptr, CUDA_ERROR_INVALID_VALUE);
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                            unsigned long long flags)
{
    HIT(cuMemCreate);
    if (!handle || !prop || flags != 0 || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || size % vmm_granularity)
        return CUDA_ERROR_INVALID_VALUE;
    int dev = -1;
    if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        if (!valid_device(prop->location.id))
            return CUDA_ERROR_INVALID_DEVICE;
        dev = prop->location.id;
    } else if (prop->location.type == CU_MEM_LOCATION_TYPE_INVALID) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    uint64_t key;
    CUresult r = record_alloc(K_HANDLE, dev, size, &key);
    if (r == CUDA_SUCCESS)
        *handle = key;
    return r;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    HIT(cuMemRelease);
    return release(K_HANDLE, handle, CUDA_ERROR_INVALID_VALUE);
}

/* Address reservations and mappings (under `lock`). */
struct fk_range {
    uint64_t ptr, size, handle;
};
static struct fk_range reservations[FK_MAX_RANGES], mappings[FK_MAX_RANGES];
static unsigned n_reservations, n_mappings;
static uint64_t next_va = FK_VA_BASE;

EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                              CUmemAllocationGranularity_flags option)
{
    HIT(cuMemGetAllocationGranularity);
    if (!granularity || !prop || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE && !valid_device(prop->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    *granularity = vmm_granularity;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                    unsigned long long flags)
{
    HIT(cuMemAddressReserve);
    (void)alignment;
    (void)addr; /* a hint */
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!ptr || !size || size % vmm_granularity || flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    if (n_reservations < FK_MAX_RANGES) {
        reservations[n_reservations++] = (struct fk_range){ next_va, size, 0 };
        *ptr = next_va;
        next_va += size + vmm_granularity; /* a gap: ranges never touch */
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    HIT(cuMemAddressFree);
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n_reservations; i++)
        if (reservations[i].ptr == ptr && reservations[i].size == size) {
            bool mapped = false;
            for (unsigned j = 0; j < n_mappings; j++)
                mapped |= mappings[j].ptr >= ptr && mappings[j].ptr < ptr + size;
            if (!mapped) { /* the driver refuses to free a range still mapped */
                reservations[i] = reservations[--n_reservations];
                r = CUDA_SUCCESS;
            }
            break;
        }
    pthread_mutex_unlock(&lock);
    return r;
}

static struct fk_alloc *find_handle(uint64_t handle)
{
    for (size_t i = 0; i < n_allocs; i++)
        if (allocs[i].key == handle && allocs[i].kind == K_HANDLE)
            return &allocs[i];
    return NULL;
}

EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                         unsigned long long flags)
{
    HIT(cuMemMap);
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!size || flags || ptr % vmm_granularity || size % vmm_granularity || offset % vmm_granularity)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_ERROR_INVALID_HANDLE;
    struct fk_alloc *a = find_handle(handle);
    if (a && !a->released) {
        bool reserved = false, overlaps = false;
        for (unsigned i = 0; i < n_reservations; i++)
            reserved |= ptr >= reservations[i].ptr && ptr + size <= reservations[i].ptr + reservations[i].size;
        for (unsigned i = 0; i < n_mappings; i++)
            overlaps |= ptr < mappings[i].ptr + mappings[i].size && mappings[i].ptr < ptr + size;
        if (!reserved || overlaps || offset > a->size || size > a->size - offset || n_mappings == FK_MAX_RANGES) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            mappings[n_mappings++] = (struct fk_range){ ptr, size, handle };
            a->maps++;
            r = CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&lock);
    return r;
}

/* Unmaps whole mappings only; a handle released earlier is freed with its last mapping. */
EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    HIT(cuMemUnmap);
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&lock);
    unsigned inside = 0;
    for (unsigned i = 0; i < n_mappings; i++) {
        const struct fk_range *m = &mappings[i];
        bool in = m->ptr >= ptr && m->ptr + m->size <= ptr + size;
        if (!in && m->ptr < ptr + size && ptr < m->ptr + m->size) { /* a sub-range of a mapping */
            pthread_mutex_unlock(&lock);
            return CUDA_ERROR_INVALID_VALUE;
        }
        inside += in;
    }
    if (!size || !inside) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    uint64_t freed[FK_MAX_DEVICES] = { 0 };
    for (unsigned i = 0; i < n_mappings;) {
        if (!(mappings[i].ptr >= ptr && mappings[i].ptr + mappings[i].size <= ptr + size)) {
            i++;
            continue;
        }
        struct fk_alloc *a = find_handle(mappings[i].handle);
        mappings[i] = mappings[--n_mappings];
        if (a && --a->maps == 0 && a->released) {
            if (a->dev >= 0) {
                used[a->dev] -= a->size;
                freed[a->dev] += a->size;
            }
            *a = allocs[--n_allocs];
        }
    }
    pthread_mutex_unlock(&lock);
    for (int d = 0; d < FK_MAX_DEVICES; d++)
        if (freed[d])
            shared_account(d, -(int64_t)freed[d]);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    HIT(cuMemAllocAsync);
    (void)hStream;
    return alloc_ptr(dptr, bytesize, current_device);
}

EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    HIT(cuMemAllocAsync_ptsz);
    (void)hStream;
    return alloc_ptr(dptr, bytesize, current_device);
}

static CUresult alloc_from_pool(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool)
{
    uintptr_t v = (uintptr_t)pool;
    if (v < FK_POOL_BASE || (v - FK_POOL_BASE) % 64 != 0 || !valid_device((int)((v - FK_POOL_BASE) / 64)))
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_ptr(dptr, bytesize, (int)((v - FK_POOL_BASE) / 64));
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    HIT(cuMemAllocFromPoolAsync);
    (void)hStream;
    return alloc_from_pool(dptr, bytesize, pool);
}

EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                             CUstream hStream)
{
    HIT(cuMemAllocFromPoolAsync_ptsz);
    (void)hStream;
    return alloc_from_pool(dptr, bytesize, pool);
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    HIT(cuMemFreeAsync);
    (void)hStream;
    return release(K_PTR, dptr, CUDA_ERROR_INVALID_VALUE);
}

EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    HIT(cuMemFreeAsync_ptsz);
    (void)hStream;
    return release(K_PTR, dptr, CUDA_ERROR_INVALID_VALUE);
}

EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray)
{
    HIT(cuArrayCreate_v2);
    if (!pHandle || !pAllocateArray)
        return CUDA_ERROR_INVALID_VALUE;
    const CUDA_ARRAY_DESCRIPTOR *d = pAllocateArray;
    uint64_t n = array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels);
    if (n == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key;
    CUresult r = record_alloc(K_ARRAY, current_device, n, &key);
    if (r == CUDA_SUCCESS)
        *pHandle = (CUarray)(uintptr_t)key;
    return r;
}

EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray)
{
    HIT(cuArray3DCreate_v2);
    if (!pHandle || !pAllocateArray)
        return CUDA_ERROR_INVALID_VALUE;
    const CUDA_ARRAY3D_DESCRIPTOR *d = pAllocateArray;
    uint64_t n = array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels);
    if (n == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key;
    CUresult r = record_alloc(K_ARRAY, current_device, n, &key);
    if (r == CUDA_SUCCESS)
        *pHandle = (CUarray)(uintptr_t)key;
    return r;
}

EXPORT CUresult cuArrayDestroy(CUarray hArray)
{
    HIT(cuArrayDestroy);
    return release(K_ARRAY, (uintptr_t)hArray, CUDA_ERROR_INVALID_HANDLE);
}

EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
                                       unsigned int numMipmapLevels)
{
    HIT(cuMipmappedArrayCreate);
    if (!pHandle || !pMipmappedArrayDesc || numMipmapLevels == 0 || numMipmapLevels > 32)
        return CUDA_ERROR_INVALID_VALUE;
    const CUDA_ARRAY3D_DESCRIPTOR *d = pMipmappedArrayDesc;
    uint64_t n = 0;
    for (unsigned l = 0; l < numMipmapLevels; l++) {
        size_t w = d->Width >> l, h = d->Height >> l, z = d->Depth >> l;
        uint64_t lv = array_bytes(w ? w : 1, d->Height ? (h ? h : 1) : 0, d->Depth ? (z ? z : 1) : 0, d->Format,
                                  d->NumChannels);
        if (lv == 0)
            return CUDA_ERROR_INVALID_VALUE;
        n += lv;
    }
    uint64_t key;
    CUresult r = record_alloc(K_MIPMAP, current_device, n, &key);
    if (r == CUDA_SUCCESS)
        *pHandle = (CUmipmappedArray)(uintptr_t)key;
    return r;
}

EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
    HIT(cuMipmappedArrayDestroy);
    return release(K_MIPMAP, (uintptr_t)hMipmappedArray, CUDA_ERROR_INVALID_HANDLE);
}

/* ---- memory information ----------------------------------------------------------------------- */

EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    HIT(cuMemGetInfo_v2);
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!free || !total)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    uint64_t u = shared ? 0 : used[current_device];
    pthread_mutex_unlock(&lock);
    if (shared)
        u = device_used(current_device);
    u += others_bytes;
    *free = u < capacity ? capacity - u : 0;
    *total = capacity;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    HIT(cuDeviceTotalMem_v2);
    CUresult pre = precheck(bytes, dev);
    if (pre != CUDA_SUCCESS)
        return pre;
    *bytes = capacity;
    return CUDA_SUCCESS;
}

/* ---- kernel launches --------------------------------------------------------------------------- */

static CUresult launch(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz)
{
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t us = (uint64_t)gx * gy * gz;
    int d = current_device;
    if (timesliced()) {
        fk_ts_launch(us * 1000);
        atomic_fetch_add(&launches, 1);
        atomic_fetch_add(&clock_us, us);
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&lock);
    for (;;) {
        uint64_t n = now_ns();
        while (queue_len[d] && queue_end[d][queue_head[d]] <= n) {
            queue_head[d] = (queue_head[d] + 1) % FK_QUEUE_DEPTH;
            queue_len[d]--;
        }
        if (queue_len[d] < FK_QUEUE_DEPTH) {
            uint64_t *tail = &busy_until_ns[d];
            /* us of the process's own GPU time; with a neighbour, it spans slowdown times that */
            *tail = (*tail > n ? *tail : n) + us * 1000 * slowdown;
            queue_end[d][(queue_head[d] + queue_len[d]++) % FK_QUEUE_DEPTH] = *tail;
            break;
        }
        uint64_t oldest = queue_end[d][queue_head[d]];
        pthread_mutex_unlock(&lock);
        sleep_until(oldest);
        pthread_mutex_lock(&lock);
    }
    pthread_mutex_unlock(&lock);
    atomic_fetch_add(&launches, 1);
    atomic_fetch_add(&clock_us, us);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                               unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                               unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
    HIT(cuLaunchKernel);
    (void)f, (void)sharedMemBytes, (void)hStream, (void)kernelParams, (void)extra;
    return launch(gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ);
}

EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                    unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                    unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                    void **kernelParams, void **extra)
{
    HIT(cuLaunchKernel_ptsz);
    (void)f, (void)sharedMemBytes, (void)hStream, (void)kernelParams, (void)extra;
    return launch(gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ);
}

static CUresult launch_ex(const CUlaunchConfig *c)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    return launch(c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ);
}

EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
    HIT(cuLaunchKernelEx);
    (void)f, (void)kernelParams, (void)extra;
    return launch_ex(config);
}

EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
    HIT(cuLaunchKernelEx_ptsz);
    (void)f, (void)kernelParams, (void)extra;
    return launch_ex(config);
}

EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                          unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                          unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                          void **kernelParams)
{
    HIT(cuLaunchCooperativeKernel);
    (void)f, (void)sharedMemBytes, (void)hStream, (void)kernelParams;
    return launch(gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ);
}

EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                               unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                               unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                               void **kernelParams)
{
    HIT(cuLaunchCooperativeKernel_ptsz);
    (void)f, (void)sharedMemBytes, (void)hStream, (void)kernelParams;
    return launch(gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ);
}

/* A simulated graph is one kernel; its handle's value is its GPU time in microseconds. */
EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    HIT(cuGraphLaunch);
    (void)hStream;
    return hGraphExec ? launch((unsigned)(uintptr_t)hGraphExec, 1, 1, 1, 1, 1) : CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    HIT(cuGraphLaunch_ptsz);
    (void)hStream;
    return hGraphExec ? launch((unsigned)(uintptr_t)hGraphExec, 1, 1, 1, 1, 1) : CUDA_ERROR_INVALID_HANDLE;
}

/* ---- events ------------------------------------------------------------------------------------ */

#define FK_EVENT_MAGIC 0x45564e54u

struct CUevent_st {
    unsigned magic;
    bool recorded;
    bool ts;                           /* on the time-sliced GPU: `mark` says when it is reached */
    uint64_t at_ns;                    /* when the device reaches the event */
    struct fk_mark mark;
};

/* Whether the device has reached e (recorded), and then at_ns is when. */
static bool reached(CUevent e)
{
    if (!e->recorded)
        return true;
    if (e->ts)
        return fk_ts_reached(e->mark, &e->at_ns);
    return now_ns() >= e->at_ns;
}

static bool valid_event(CUevent e)
{
    return e && e->magic == FK_EVENT_MAGIC;
}

EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    HIT(cuEventCreate);
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!phEvent || Flags > 0xf)
        return CUDA_ERROR_INVALID_VALUE;
    CUevent e = calloc(1, sizeof(*e));
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = FK_EVENT_MAGIC;
    *phEvent = e;
    return CUDA_SUCCESS;
}

static CUresult event_record(CUevent e)
{
    if (!ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!valid_event(e))
        return CUDA_ERROR_INVALID_HANDLE;
    e->ts = timesliced();
    if (e->ts)
        e->mark = fk_ts_record();
    else
        e->at_ns = queue_tail();
    e->recorded = true;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
    HIT(cuEventRecord);
    (void)hStream;
    return event_record(hEvent);
}

EXPORT CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    HIT(cuEventRecord_ptsz);
    (void)hStream;
    return event_record(hEvent);
}

/* As the driver: an event never recorded counts as complete. */
EXPORT CUresult cuEventQuery(CUevent hEvent)
{
    HIT(cuEventQuery);
    if (!valid_event(hEvent))
        return CUDA_ERROR_INVALID_HANDLE;
    return reached(hEvent) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

EXPORT CUresult cuEventSynchronize(CUevent hEvent)
{
    HIT(cuEventSynchronize);
    if (!valid_event(hEvent))
        return CUDA_ERROR_INVALID_HANDLE;
    if (hEvent->recorded && hEvent->ts) {
        while (!reached(hEvent)) {
            struct timespec ts = { 0, 200000 };
            nanosleep(&ts, NULL);
        }
    } else if (hEvent->recorded) {
        sleep_until(hEvent->at_ns);
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    HIT(cuEventElapsedTime);
    if (!pMilliseconds)
        return CUDA_ERROR_INVALID_VALUE;
    if (!valid_event(hStart) || !valid_event(hEnd) || !hStart->recorded || !hEnd->recorded)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!reached(hStart) || !reached(hEnd))
        return CUDA_ERROR_NOT_READY;
    *pMilliseconds = (float)(((double)hEnd->at_ns - (double)hStart->at_ns) / 1e6);
    return CUDA_SUCCESS;
}

static CUresult event_destroy(CUevent e)
{
    if (!valid_event(e))
        return CUDA_ERROR_INVALID_HANDLE;
    e->magic = 0;
    free(e);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventDestroy(CUevent hEvent)
{
    HIT(cuEventDestroy);
    return event_destroy(hEvent);
}

EXPORT CUresult cuEventDestroy_v2(CUevent hEvent)
{
    HIT(cuEventDestroy_v2);
    return event_destroy(hEvent);
}

/* ---- cuGetProcAddress -------------------------------------------------------------------------- */

struct fk_symbol {
    const char *name, *base;
    int since;
    bool per_thread;
    void *fn;
};

static const struct fk_symbol symbols[FK_N_SYMBOLS] = {
#define FK_ENTRY(n, b, s, p) [FK_##n] = { .name = #n, .base = b, .since = s, .per_thread = p, .fn = (void *)n },
    FK_SYMBOLS(FK_ENTRY)
#undef FK_ENTRY
};

/* The entry the real driver would pick: the newest version at cudaVersion, preferring the
 * per-thread-stream variant when asked for. *status tells why there is none. */
static const struct fk_symbol *resolve(const char *base, int cudaVersion, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *status)
{
    const struct fk_symbol *best = NULL;
    bool known = false;
    bool ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    for (int i = 0; i < FK_N_SYMBOLS; i++) {
        const struct fk_symbol *s = &symbols[i];
        if (strcmp(s->base, base) != 0)
            continue;
        known = true;
        if (s->since > cudaVersion || (s->per_thread && !ptds))
            continue;
        if (!best || s->per_thread > best->per_thread ||
            (s->per_thread == best->per_thread && s->since > best->since))
            best = s;
    }
    *status = best ? CU_GET_PROC_ADDRESS_SUCCESS
                   : known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return best;
}

static CUresult get_proc_address(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                 CUdriverProcAddressQueryResult *symbolStatus)
{
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (symbolStatus)
        *symbolStatus = st;
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    const struct fk_symbol *s = resolve(symbol, cudaVersion, flags, &st);
    if (symbolStatus)
        *symbolStatus = st;
    *pfn = s ? s->fn : NULL;
    return s ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    HIT(cuGetProcAddress);
    return get_proc_address(symbol, pfn, cudaVersion, flags, NULL);
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *symbolStatus)
{
    HIT(cuGetProcAddress_v2);
    return get_proc_address(symbol, pfn, cudaVersion, flags, symbolStatus);
}

/* ---- test-only ground truth ---------------------------------------------------------------------- */

EXPORT unsigned long long fakeCudaLaunches(void)
{
    return atomic_load(&launches);
}

EXPORT unsigned long long fakeCudaUsedBytes(int dev)
{
    if (dev < 0 || dev >= FK_MAX_DEVICES)
        return 0;
    pthread_mutex_lock(&lock);
    unsigned long long u = used[dev];
    pthread_mutex_unlock(&lock);
    return u;
}

EXPORT unsigned long long fakeCudaFrees(void)
{
    return atomic_load(&frees);
}

EXPORT unsigned long long fakeCudaUnknownFrees(void)
{
    return atomic_load(&unknown_frees);
}

EXPORT unsigned long long fakeCudaAllocs(void)
{
    return atomic_load(&n_alloc_ok);
}

EXPORT unsigned long long fakeCudaClockUs(void)
{
    return atomic_load(&clock_us);
}

/* The time-sliced GPU's per-process utilization samples (for the simulated NVML): how many were
 * written to out (at most max), those of periods ending after last_seen_us. */
EXPORT unsigned fakeCudaProcessSamples(unsigned long long last_seen_us, struct fk_util_sample *out, unsigned max)
{
    return fk_ts_samples(last_seen_us, out, max);
}

/* How often the driver function `name` (exact, versioned name) has run in this process. */
EXPORT unsigned long long fakeCudaCalls(const char *name)
{
    for (int i = 0; i < FK_N_SYMBOLS; i++)
        if (name && strcmp(symbols[i].name, name) == 0)
            return atomic_load(&calls[i]);
    return 0;
}

/* The driver's own function for the exact (versioned) name, whatever a preloaded library exports. */
EXPORT void *fakeCudaSymbol(const char *name)
{
    for (int i = 0; i < FK_N_SYMBOLS; i++)
        if (name && strcmp(symbols[i].name, name) == 0)
            return symbols[i].fn;
    return NULL;
}

/* The versioned name cuGetProcAddress would return for `base`, or NULL. */
EXPORT const char *fakeCudaResolveName(const char *base, int cudaVersion, unsigned long long flags)
{
    CUdriverProcAddressQueryResult st;
    const struct fk_symbol *s = base ? resolve(base, cudaVersion, flags, &st) : NULL;
    return s ? s->name : NULL;
}
