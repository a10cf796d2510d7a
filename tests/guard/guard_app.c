/* guard_app.c: a test program for the guard (tests/guard/test_guard.c runs it under
 * LD_PRELOAD=libgpuslice-guard.so). It is linked against the simulated driver (fake_cuda.c), so
 * its CUDA calls go through the dynamic linker exactly as a real program's do, and it exercises
 * the driver the ways real programs do: direct calls, dlopen + dlsym, cuGetProcAddress / _v2,
 * threads, children with an empty environment.
 *
 *   guard_app MODE ARGS...
 *
 * prints one `key=value` per line on stdout. Ground truth comes from the fake driver's test
 * exports (fakeCuda*), which the guard does not interpose; `guard_used` is what the program sees
 * (total - free from cuMemGetInfo_v2); `region_used` is dev[D].used of the guard's counters region
 * when GUARD_APP_REGION names it. GUARD_APP_DEVICE selects the device (default 0). Exit status:
 * 0 when the scenario ran (whatever CUDA returned), 2 on a usage error, 3 on an internal error. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "guard/cuda_api.h"
#include "guard/guard_region.h"

/* The driver's functions, as a program compiled against cuda.h would declare them. */
#define APP_DECLARE(name, params, args) CUresult name params;
GS_CUDA_HOOKED_FUNCTIONS(APP_DECLARE)
#undef APP_DECLARE
CUresult cuInit(unsigned int flags);
CUresult cuDriverGetVersion(int *driverVersion);
CUresult cuDeviceGetCount(int *count);
CUresult cuCtxGetDevice(CUdevice *device);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev);
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags);
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size);
CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option);
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus);

CUresult cuCtxSynchronize(void);
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                             unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                             unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra);
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                        void **kernelParams);
CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);

/* The simulated driver's ground truth. */
unsigned long long fakeCudaLaunches(void);
unsigned long long fakeCudaUsedBytes(int dev);
unsigned long long fakeCudaFrees(void);
unsigned long long fakeCudaUnknownFrees(void);
unsigned long long fakeCudaClockUs(void);
unsigned long long fakeCudaCalls(const char *name);
void *fakeCudaSymbol(const char *name);
const char *fakeCudaResolveName(const char *base, int cudaVersion, unsigned long long flags);

typedef CUresult (*mem_alloc_fn)(CUdeviceptr *dptr, size_t bytesize);
typedef CUresult (*mem_alloc_async_fn)(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
typedef CUresult (*mem_get_info_fn)(size_t *free, size_t *total);
typedef CUresult (*launch_ex_fn)(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra);
typedef CUresult (*launch_coop_fn)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                   unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                   unsigned int sharedMemBytes, CUstream hStream, void **kernelParams);
typedef CUresult (*graph_launch_fn)(CUgraphExec hGraphExec, CUstream hStream);
typedef CUresult (*launch_fn)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                              unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                              unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);

#define MIB (1ULL << 20)

static int device;
static CUcontext ctx;
static const struct gs_guard_region *region;

static void kv(const char *key, long long v)
{
    printf("%s=%lld\n", key, v);
}

static void kv2(const char *prefix, const char *key, long long v)
{
    printf("%s.%s=%lld\n", prefix, key, v);
}

static unsigned long long parse_size(const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s) {
        fprintf(stderr, "guard_app: bad number '%s'\n", s);
        exit(2);
    }
    if (*end == 'K' || *end == 'k')
        v <<= 10;
    else if (*end == 'M' || *end == 'm')
        v <<= 20;
    else if (*end == 'G' || *end == 'g')
        v <<= 30;
    return v;
}

/* total - free as the program sees it; -1 if cuMemGetInfo_v2 fails. */
static long long guard_used(void)
{
    size_t fr = 0, tot = 0;
    if (cuMemGetInfo_v2(&fr, &tot) != CUDA_SUCCESS)
        return -1;
    return (long long)tot - (long long)fr;
}

static long long region_used(void)
{
    if (!region)
        return -1;
    return (long long)atomic_load(&region->dev[device].used);
}

static void map_region(void)
{
    const char *path = getenv("GUARD_APP_REGION");
    if (!path || !*path)
        return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(struct gs_guard_region)) {
        void *p = mmap(NULL, sizeof(struct gs_guard_region), PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED && ((const struct gs_guard_region *)p)->magic == GS_GUARD_REGION_MAGIC)
            region = p;
        else if (p != MAP_FAILED)
            munmap(p, sizeof(struct gs_guard_region));
    }
    close(fd);
}

/* cuInit, then the device's primary context made current, as the CUDA runtime does. */
static void setup(void)
{
    const char *d = getenv("GUARD_APP_DEVICE");
    device = d && *d ? atoi(d) : 0;
    kv("init", cuInit(0));
    CUresult r = cuDevicePrimaryCtxRetain(&ctx, device);
    kv("retain", r);
    if (r == CUDA_SUCCESS)
        cuCtxSetCurrent(ctx);
    map_region();
}

static void teardown(void)
{
    if (ctx)
        cuDevicePrimaryCtxRelease_v2(device);
}

static void report_usage(const char *prefix)
{
    char k[128];
    snprintf(k, sizeof(k), "%s_fake_used", prefix);
    kv(k, (long long)fakeCudaUsedBytes(device));
    snprintf(k, sizeof(k), "%s_guard_used", prefix);
    kv(k, guard_used());
    snprintf(k, sizeof(k), "%s_region_used", prefix);
    kv(k, region_used());
    size_t fr = 0, tot = 0;
    cuMemGetInfo_v2(&fr, &tot);
    snprintf(k, sizeof(k), "%s_total", prefix);
    kv(k, (long long)tot);
}

/* ---- alloc SIZE [COUNT] ------------------------------------------------------------------------- */

static int mode_alloc(int argc, char **argv)
{
    if (argc < 1)
        return 2;
    unsigned long long size = parse_size(argv[0]);
    long count = argc > 1 ? (long)parse_size(argv[1]) : 1;
    setup();
    CUdeviceptr *p = calloc((size_t)count, sizeof(*p));
    if (!p)
        return 3;
    long ok = 0;
    CUresult first_err = CUDA_SUCCESS;
    for (long i = 0; i < count; i++) {
        CUresult r = cuMemAlloc_v2(&p[ok], size);
        if (r == CUDA_SUCCESS)
            ok++;
        else if (first_err == CUDA_SUCCESS)
            first_err = r;
    }
    kv("ok", ok);
    kv("first_err", first_err);
    report_usage("held");
    long free_err = 0;
    for (long i = 0; i < ok; i++)
        if (cuMemFree_v2(p[i]) != CUDA_SUCCESS)
            free_err++;
    kv("free_err", free_err);
    report_usage("after");
    free(p);
    teardown();
    return 0;
}

/* ---- alloc-all-paths SIZE ------------------------------------------------------------------------ */

struct step {
    long long fake, guard, region;
};

static struct step snap(void)
{
    return (struct step){ (long long)fakeCudaUsedBytes(device), guard_used(), region_used() };
}

static void report_step(const char *name, CUresult r, struct step before)
{
    struct step after = snap();
    kv2(name, "res", r);
    kv2(name, "fake", after.fake - before.fake);
    kv2(name, "guard", after.guard - before.guard);
    kv2(name, "region", region ? after.region - before.region : -1);
}

static int mode_alloc_all_paths(int argc, char **argv)
{
    if (argc < 1)
        return 2;
    size_t size = (size_t)parse_size(argv[0]);
    setup();
    CUdeviceptr d_alloc = 0, d_pitch = 0, d_managed = 0, d_async = 0, d_pool = 0;
    CUmemGenericAllocationHandle h_create = 0;
    CUarray a2 = NULL, a3 = NULL;
    CUmipmappedArray mm = NULL;
    size_t pitch = 0;
    CUmemoryPool pool = NULL;
    struct step b;
    CUresult r;

    kv("start_guard_used", guard_used());
    b = snap();
    r = cuMemAlloc_v2(&d_alloc, size);
    report_step("alloc", r, b);

    b = snap();
    r = cuMemAllocPitch_v2(&d_pitch, &pitch, size / 256 + 100, 256, 16);
    report_step("pitch", r, b);
    kv("pitch.pitch", (long long)pitch);

    b = snap();
    r = cuMemAllocManaged(&d_managed, size, 1);
    report_step("managed", r, b);

    CUmemAllocationProp prop = { 0 };
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    b = snap();
    r = cuMemCreate(&h_create, size, &prop, 0);
    report_step("create", r, b);

    b = snap();
    r = cuMemAllocAsync(&d_async, size, NULL);
    report_step("async", r, b);

    cuDeviceGetDefaultMemPool(&pool, device);
    b = snap();
    r = cuMemAllocFromPoolAsync(&d_pool, size, pool, NULL);
    report_step("pool", r, b);

    CUDA_ARRAY_DESCRIPTOR ad = { .Width = 1024, .Height = size / 16384 ? size / 16384 : 1,
                                 .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4 };
    b = snap();
    r = cuArrayCreate_v2(&a2, &ad);
    report_step("array", r, b);

    CUDA_ARRAY3D_DESCRIPTOR ad3 = { .Width = 64, .Height = 64, .Depth = size / 8192 ? size / 8192 : 1,
                                    .Format = CU_AD_FORMAT_UNSIGNED_INT16, .NumChannels = 1 };
    b = snap();
    r = cuArray3DCreate_v2(&a3, &ad3);
    report_step("array3d", r, b);

    CUDA_ARRAY3D_DESCRIPTOR md = { .Width = 512, .Height = 512, .Depth = 0,
                                   .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1 };
    b = snap();
    r = cuMipmappedArrayCreate(&mm, &md, 4);
    report_step("mipmap", r, b);

    report_usage("held");

    /* Frees, some through another path than the allocation's own (allowed by CUDA). */
    b = snap();
    r = cuMipmappedArrayDestroy(mm);
    report_step("free_mipmap", r, b);
    b = snap();
    r = cuArrayDestroy(a3);
    report_step("free_array3d", r, b);
    b = snap();
    r = cuArrayDestroy(a2);
    report_step("free_array", r, b);
    b = snap();
    r = cuMemFree_v2(d_pool);
    report_step("free_pool", r, b);
    b = snap();
    r = cuMemFreeAsync(d_async, NULL);
    report_step("free_async", r, b);
    b = snap();
    r = cuMemRelease(h_create);
    report_step("free_create", r, b);
    b = snap();
    r = cuMemFree_v2(d_managed);
    report_step("free_managed", r, b);
    b = snap();
    r = cuMemFree_v2(d_pitch);
    report_step("free_pitch", r, b);
    b = snap();
    r = cuMemFree_v2(d_alloc);
    report_step("free_alloc", r, b);

    report_usage("after");
    kv("unknown_frees", (long long)fakeCudaUnknownFrees());
    teardown();
    return 0;
}

/* ---- meminfo ------------------------------------------------------------------------------------- */

static int mode_meminfo(int argc, char **argv)
{
    setup();
    long long pre = argc > 0 ? (long long)parse_size(argv[0]) : 0;
    CUdeviceptr p = 0;
    if (pre > 0)
        kv("pre_alloc", cuMemAlloc_v2(&p, (size_t)pre));
    size_t fr = 0, tot = 0, dt = 0;
    kv("meminfo_res", cuMemGetInfo_v2(&fr, &tot));
    kv("free", (long long)fr);
    kv("total", (long long)tot);
    kv("free_le_total", fr <= tot);
    kv("totalmem_res", cuDeviceTotalMem_v2(&dt, device));
    kv("devtotal", (long long)dt);
    kv("meminfo_null_res", cuMemGetInfo_v2(NULL, NULL));
    if (p)
        cuMemFree_v2(p);
    teardown();
    return 0;
}

/* ---- dlsym NAME ---------------------------------------------------------------------------------- */

static void alloc_through(const char *prefix, void *fn, bool v2)
{
    if (!fn || !v2)
        return;
    struct step b = snap();
    CUdeviceptr p = 0;
    CUresult r = ((mem_alloc_fn)fn)(&p, MIB);
    report_step(prefix, r, b);
    if (r == CUDA_SUCCESS)
        cuMemFree_v2(p);
}

static int mode_dlsym(int argc, char **argv)
{
    if (argc < 1)
        return 2;
    setup();
    const char *name = argv[0];
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    kv("dlopen", h != NULL);
    if (!h)
        return 3;
    void *fn = dlsym(h, name);
    void *dflt = dlsym(RTLD_DEFAULT, name);
    void *drv = fakeCudaSymbol(name);
    kv("null", fn == NULL);
    kv("driver", fn != NULL && fn == drv);
    kv("default", fn != NULL && fn == dflt);
    kv("default_is_driver", dflt != NULL && dflt == drv);
    unsigned long long before = fakeCudaCalls(name);
    alloc_through("call", fn, strcmp(name, "cuMemAlloc_v2") == 0);
    kv("call.ran", (long long)(fakeCudaCalls(name) - before));
    /* A second handle opened by soname, and RTLD_NEXT-style global lookups. */
    void *h2 = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    void *fn2 = h2 ? dlsym(h2, name) : NULL;
    kv("second_handle_same", fn2 == fn);
    /* RTLD_NEXT is relative to the caller: from the executable, the first definition after it. */
    void *next = dlsym(RTLD_NEXT, "execve");
    kv("rtld_next_execve_is_default", next != NULL && next == dlsym(RTLD_DEFAULT, "execve"));
    if (h2)
        dlclose(h2);
    dlclose(h);
    teardown();
    return 0;
}

/* ---- procaddr / procaddr2 VER FLAGS ---------------------------------------------------------------- */

static bool use_v2;

static CUresult lookup(const char *sym, void **pfn, int ver, cuuint64_t flags, int *status)
{
    CUresult r;
    *pfn = NULL;
    if (use_v2) {
        CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
        r = cuGetProcAddress_v2(sym, pfn, ver, flags, &st);
        *status = (int)st;
    } else {
        r = cuGetProcAddress(sym, pfn, ver, flags);
        *status = -1;
    }
    return r;
}

static void *report_lookup(const char *sym, int ver, cuuint64_t flags, const char **expected)
{
    void *fn;
    int st;
    CUresult r = lookup(sym, &fn, ver, flags, &st);
    const char *exp = fakeCudaResolveName(sym, ver, flags);
    *expected = exp;
    kv2(sym, "res", r);
    kv2(sym, "status", st);
    printf("%s.name=%s\n", sym, exp ? exp : "-");
    kv2(sym, "null", fn == NULL);
    kv2(sym, "driver", fn != NULL && exp && fn == fakeCudaSymbol(exp));
    kv2(sym, "default", fn != NULL && exp && fn == dlsym(RTLD_DEFAULT, exp));
    return fn;
}

static int mode_procaddr(int argc, char **argv, bool v2)
{
    if (argc < 2)
        return 2;
    use_v2 = v2;
    int ver = (int)parse_size(argv[0]);
    cuuint64_t flags = parse_size(argv[1]);
    setup();
    const char *exp;
    void *fn;

    /* cuMemAlloc: call the pointer; with the _v2 ABI the guard must count it. */
    fn = report_lookup("cuMemAlloc", ver, flags, &exp);
    if (fn && exp) {
        unsigned long long before = fakeCudaCalls(exp);
        if (strcmp(exp, "cuMemAlloc_v2") == 0) {
            alloc_through("cuMemAlloc.call", fn, true);
        } else {
            unsigned int p32 = 0; /* the 32-bit ABI */
            kv2("cuMemAlloc.call", "res", ((CUresult(*)(unsigned int *, unsigned int))fn)(&p32, 4096));
        }
        kv2("cuMemAlloc.call", "ran", (long long)(fakeCudaCalls(exp) - before));
    }

    /* cuMemAllocAsync (_ptsz with the per-thread flag). */
    fn = report_lookup("cuMemAllocAsync", ver, flags, &exp);
    if (fn && exp) {
        unsigned long long before = fakeCudaCalls(exp);
        struct step b = snap();
        CUdeviceptr p = 0;
        CUresult r = ((mem_alloc_async_fn)fn)(&p, MIB, NULL);
        report_step("cuMemAllocAsync.call", r, b);
        kv2("cuMemAllocAsync.call", "ran", (long long)(fakeCudaCalls(exp) - before));
        if (r == CUDA_SUCCESS)
            cuMemFreeAsync(p, NULL);
    }

    /* cuLaunchKernel (_ptsz with the per-thread flag). */
    fn = report_lookup("cuLaunchKernel", ver, flags, &exp);
    if (fn && exp) {
        unsigned long long before = fakeCudaCalls(exp), l0 = fakeCudaLaunches();
        kv2("cuLaunchKernel.call", "res", ((launch_fn)fn)(NULL, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
        kv2("cuLaunchKernel.call", "ran", (long long)(fakeCudaCalls(exp) - before));
        kv2("cuLaunchKernel.call", "launches", (long long)(fakeCudaLaunches() - l0));
    }

    /* cuLaunchKernelEx (_ptsz with the per-thread flag): cuBLAS's launches on Hopper. */
    fn = report_lookup("cuLaunchKernelEx", ver, flags, &exp);
    if (fn && exp) {
        unsigned long long before = fakeCudaCalls(exp), l0 = fakeCudaLaunches();
        CUlaunchConfig cfg = { .gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32, .blockDimY = 1,
                               .blockDimZ = 1 };
        kv2("cuLaunchKernelEx.call", "res", ((launch_ex_fn)fn)(&cfg, NULL, NULL, NULL));
        kv2("cuLaunchKernelEx.call", "ran", (long long)(fakeCudaCalls(exp) - before));
        kv2("cuLaunchKernelEx.call", "launches", (long long)(fakeCudaLaunches() - l0));
    }

    /* cuLaunchCooperativeKernel and cuGraphLaunch (_ptsz with the per-thread flag). */
    fn = report_lookup("cuLaunchCooperativeKernel", ver, flags, &exp);
    if (fn && exp) {
        unsigned long long before = fakeCudaCalls(exp);
        kv2("cuLaunchCooperativeKernel.call", "res", ((launch_coop_fn)fn)(NULL, 1, 1, 1, 32, 1, 1, 0, NULL, NULL));
        kv2("cuLaunchCooperativeKernel.call", "ran", (long long)(fakeCudaCalls(exp) - before));
    }
    fn = report_lookup("cuGraphLaunch", ver, flags, &exp);
    if (fn && exp) {
        unsigned long long before = fakeCudaCalls(exp);
        kv2("cuGraphLaunch.call", "res", ((graph_launch_fn)fn)((CUgraphExec)(uintptr_t)1, NULL));
        kv2("cuGraphLaunch.call", "ran", (long long)(fakeCudaCalls(exp) - before));
    }

    /* cuMemGetInfo: with the _v2 ABI, total must be what the guard reports. */
    fn = report_lookup("cuMemGetInfo", ver, flags, &exp);
    if (fn && exp && strcmp(exp, "cuMemGetInfo_v2") == 0) {
        size_t fr = 0, tot = 0;
        kv2("cuMemGetInfo.call", "res", ((mem_get_info_fn)fn)(&fr, &tot));
        kv2("cuMemGetInfo.call", "total", (long long)tot);
        size_t fr2 = 0, tot2 = 0;
        cuMemGetInfo_v2(&fr2, &tot2);
        kv2("cuMemGetInfo.call", "same_as_direct", tot == tot2);
    }

    /* cuGetProcAddress itself: the pointer it returns must hand out wrappers too. */
    fn = report_lookup("cuGetProcAddress", ver, flags, &exp);
    if (fn && exp) {
        void *inner = NULL;
        CUresult r;
        int st = -1;
        if (strcmp(exp, "cuGetProcAddress_v2") == 0) {
            CUdriverProcAddressQueryResult s = (CUdriverProcAddressQueryResult)-1;
            r = ((cuGetProcAddress_v2_fn)fn)("cuMemAlloc", &inner, ver, flags, &s);
            st = (int)s;
        } else {
            r = ((cuGetProcAddress_fn)fn)("cuMemAlloc", &inner, ver, flags);
        }
        const char *iexp = fakeCudaResolveName("cuMemAlloc", ver, flags);
        kv2("cuGetProcAddress.inner", "res", r);
        kv2("cuGetProcAddress.inner", "status", st);
        kv2("cuGetProcAddress.inner", "driver", inner != NULL && iexp && inner == fakeCudaSymbol(iexp));
        if (inner && iexp && strcmp(iexp, "cuMemAlloc_v2") == 0)
            alloc_through("cuGetProcAddress.inner.call", inner, true);
    }

    /* Functions the guard does not wrap, an older ABI and an unknown name: untouched. */
    report_lookup("cuDeviceGetCount", ver, flags, &exp);
    report_lookup("cuDevicePrimaryCtxRelease", ver, flags, &exp);
    report_lookup("cuStreamSynchronize", ver, flags, &exp);
    report_lookup("gsNoSuchFunction", ver, flags, &exp);
    teardown();
    return 0;
}

/* ---- free-unknown --------------------------------------------------------------------------------- */

static int mode_free_unknown(void)
{
    setup();
    long long g0 = guard_used();
    unsigned long long u0 = fakeCudaUnknownFrees(), f0 = fakeCudaFrees();
    /* A pointer nobody allocated. */
    kv("unknown.res", cuMemFree_v2((CUdeviceptr)0xdead00000000ULL));
    kv("unknown.fake_unknown_frees", (long long)(fakeCudaUnknownFrees() - u0));
    kv("unknown.guard_delta", guard_used() - g0);
    /* A pointer the driver knows but the guard never saw (allocated behind its back). */
    CUdeviceptr p = 0;
    CUresult r = ((mem_alloc_fn)fakeCudaSymbol("cuMemAlloc_v2"))(&p, 3 * MIB);
    kv("untracked.alloc", r);
    kv("untracked.fake_used", (long long)fakeCudaUsedBytes(device));
    long long g1 = guard_used();
    kv("untracked.res", cuMemFree_v2(p));
    kv("untracked.fake_frees", (long long)(fakeCudaFrees() - f0));
    kv("untracked.fake_used_after", (long long)fakeCudaUsedBytes(device));
    kv("untracked.guard_delta", guard_used() - g1);
    /* The other free paths with unknown handles. */
    u0 = fakeCudaUnknownFrees();
    kv("release.res", cuMemRelease(0x1234ULL));
    kv("freeasync.res", cuMemFreeAsync((CUdeviceptr)0xdead00100000ULL, NULL));
    kv("arraydestroy.res", cuArrayDestroy((CUarray)(uintptr_t)0x4321));
    kv("mipmapdestroy.res", cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)0x4322));
    kv("others.fake_unknown_frees", (long long)(fakeCudaUnknownFrees() - u0));
    size_t fr = 0, tot = 0;
    cuMemGetInfo_v2(&fr, &tot);
    kv("free_le_total", fr <= tot);
    report_usage("after");
    teardown();
    return 0;
}

/* ---- hold SIZE SECONDS ------------------------------------------------------------------------------ */

static int mode_hold(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    unsigned long long size = parse_size(argv[0]);
    unsigned secs = (unsigned)parse_size(argv[1]);
    setup();
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc_v2(&p, size);
    kv("res", r);
    report_usage("held");
    kv("holding", 1);
    fflush(stdout);
    struct timespec ts = { .tv_sec = secs };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    if (r == CUDA_SUCCESS)
        cuMemFree_v2(p);
    teardown();
    return 0;
}

/* ---- churn SIZE COUNT MS: COUNT allocations, retried while over the quota for MS ms, then exit
 * holding them (no free, the context kept): the driver frees them when the process is gone. */

static int mode_churn(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    size_t size = (size_t)parse_size(argv[0]);
    long count = (long)parse_size(argv[1]);
    long long ms = (long long)parse_size(argv[2]);
    setup();
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long ok = 0;
    for (;;) {
        CUdeviceptr p;
        CUresult r = cuMemAlloc_v2(&p, size);
        if (r == CUDA_SUCCESS && ++ok == count)
            break;
        if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY)
            break;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000LL + (t.tv_nsec - t0.tv_nsec) / 1000000 > ms)
            break;
        if (r != CUDA_SUCCESS) {
            struct timespec ts = { 0, 200000 };
            nanosleep(&ts, NULL);
        }
    }
    kv("ok", ok);
    return 0; /* exit() holding: atexit handlers run, then the process goes */
}

/* ---- repl: commands on stdin, one per line: "a SIZE" allocates, "f" frees the last, "i" reports
 * cuMemGetInfo, "q" quits. Each prints N.res (N.free, N.total) then N.done=1, N counting from 1. */

static int mode_repl(void)
{
    setup();
    CUdeviceptr held[256];
    int n_held = 0, seq = 0;
    char line[128], k[32];
    while (fgets(line, sizeof(line), stdin)) {
        seq++;
        snprintf(k, sizeof(k), "%d", seq);
        if (line[0] == 'a' && n_held < 256) {
            CUresult r = cuMemAlloc_v2(&held[n_held], (size_t)parse_size(line + 2));
            n_held += r == CUDA_SUCCESS;
            kv2(k, "res", r);
        } else if (line[0] == 'f' && n_held > 0) {
            kv2(k, "res", cuMemFree_v2(held[--n_held]));
        } else if (line[0] == 'i') {
            size_t fr = 0, tot = 0;
            kv2(k, "res", cuMemGetInfo_v2(&fr, &tot));
            kv2(k, "free", (long long)fr);
            kv2(k, "total", (long long)tot);
        } else if (line[0] == 'q') {
            break;
        }
        kv2(k, "done", 1);
        fflush(stdout);
    }
    while (n_held > 0)
        cuMemFree_v2(held[--n_held]);
    teardown();
    return 0;
}

/* ---- cross-device SIZE: allocated with device 0's context current, freed with device 1's. */

static long long region_used_on(int dev)
{
    return region ? (long long)atomic_load(&region->dev[dev].used) : -1;
}

static int mode_cross_device(int argc, char **argv)
{
    if (argc < 1)
        return 2;
    size_t size = (size_t)parse_size(argv[0]);
    setup();
    CUcontext ctx1 = NULL;
    kv("retain1", cuDevicePrimaryCtxRetain(&ctx1, 1));
    CUdeviceptr p = 0, a = 0;
    cuCtxSetCurrent(ctx);
    kv("alloc.res", cuMemAlloc_v2(&p, size));
    kv("alloc_async.res", cuMemAllocAsync(&a, size, (CUstream)(uintptr_t)0x11));
    kv("held.dev0", region_used_on(0));
    kv("held.dev1", region_used_on(1));
    kv("held.fake0", (long long)fakeCudaUsedBytes(0));
    cuCtxSetCurrent(ctx1);
    kv("free.res", cuMemFree_v2(p));
    kv("free_async.res", cuMemFreeAsync(a, (CUstream)(uintptr_t)0x22)); /* another stream, another device */
    kv("after.dev0", region_used_on(0));
    kv("after.dev1", region_used_on(1));
    kv("after.fake0", (long long)fakeCudaUsedBytes(0));
    /* A pool allocation on device 0 made from device 1's context: device 0 is charged. */
    CUmemoryPool pool0 = NULL;
    cuDeviceGetDefaultMemPool(&pool0, 0);
    kv("pool.res", cuMemAllocFromPoolAsync(&a, size, pool0, (CUstream)(uintptr_t)0x33));
    kv("pool.dev0", region_used_on(0));
    kv("pool.dev1", region_used_on(1));
    kv("pool.fake0", (long long)fakeCudaUsedBytes(0));
    cuCtxSetCurrent(ctx);
    kv("pool_free.res", cuMemFreeAsync(a, (CUstream)(uintptr_t)0x44));
    kv("pool_free.dev0", region_used_on(0));
    kv("pool_free.dev1", region_used_on(1));
    cuDevicePrimaryCtxRelease_v2(1);
    teardown();
    return 0;
}

/* ---- vmm SIZE: cuMemCreate / cuMemMap / cuMemRelease / cuMemUnmap in the orders programs use
 * (PyTorch's expandable segments release a handle while it stays mapped). SIZE is a multiple of
 * the granularity; OTHER (a plain allocation between) follows as the second argument. Each step
 * prints STEP.res, STEP.fake (the driver's live bytes), STEP.region and STEP.free (cuMemGetInfo). */

static void vmm_report(const char *step, CUresult r)
{
    size_t fr = 0, tot = 0;
    cuMemGetInfo_v2(&fr, &tot);
    kv2(step, "res", r);
    kv2(step, "fake", (long long)fakeCudaUsedBytes(device));
    kv2(step, "region", region_used());
    kv2(step, "free", (long long)fr);
}

static int mode_vmm(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    size_t size = (size_t)parse_size(argv[0]), other = (size_t)parse_size(argv[1]);
    setup();
    CUmemAllocationProp prop = { 0 };
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    size_t gran = 0;
    kv("granularity.res", cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    kv("granularity", (long long)gran);
    CUmemGenericAllocationHandle h = 0, h2 = 0;
    CUdeviceptr va = 0, va2 = 0, p = 0;
    kv("reserve.res", cuMemAddressReserve(&va, 2 * size, 0, 0, 0));
    kv("reserve2.res", cuMemAddressReserve(&va2, size, 0, 0, 0));

    /* 1. create, map, release while mapped: the memory stays until the unmap */
    vmm_report("create", cuMemCreate(&h, size, &prop, 0));
    vmm_report("map", cuMemMap(va, size, 0, h, 0));
    vmm_report("release_mapped", cuMemRelease(h));
    CUresult r = cuMemAlloc_v2(&p, other); /* would fit if the release had given the bytes back */
    vmm_report("other_while_mapped", r);
    if (r == CUDA_SUCCESS)
        cuMemFree_v2(p);
    vmm_report("unmap_last", cuMemUnmap(va, size));
    r = cuMemAlloc_v2(&p, other);
    vmm_report("other_after_unmap", r);
    if (r == CUDA_SUCCESS)
        cuMemFree_v2(p);

    /* 2. unmapped first, released last: the release frees */
    vmm_report("create2", cuMemCreate(&h, size, &prop, 0));
    vmm_report("map2", cuMemMap(va, size, 0, h, 0));
    vmm_report("unmap2", cuMemUnmap(va, size));
    vmm_report("release2", cuMemRelease(h));

    /* 3. one handle mapped twice: freed with the second unmap */
    vmm_report("create3", cuMemCreate(&h, size, &prop, 0));
    vmm_report("map3a", cuMemMap(va, size, 0, h, 0));
    vmm_report("map3b", cuMemMap(va2, size, 0, h, 0));
    vmm_report("release3", cuMemRelease(h));
    vmm_report("unmap3a", cuMemUnmap(va, size));
    vmm_report("unmap3b", cuMemUnmap(va2, size));

    /* 4. two handles side by side in one range, released, then unmapped by one call */
    vmm_report("create4a", cuMemCreate(&h, size, &prop, 0));
    vmm_report("create4b", cuMemCreate(&h2, size, &prop, 0));
    vmm_report("map4a", cuMemMap(va, size, 0, h, 0));
    vmm_report("map4b", cuMemMap(va + size, size, 0, h2, 0));
    vmm_report("release4a", cuMemRelease(h));
    vmm_report("release4b", cuMemRelease(h2));
    vmm_report("unmap4", cuMemUnmap(va, 2 * size));

    /* 5. a size that is not a multiple of the granularity: refused, nothing counted */
    vmm_report("create_unaligned", cuMemCreate(&h, size + gran / 2, &prop, 0));

    kv("free_va.res", cuMemAddressFree(va, 2 * size));
    kv("free_va2.res", cuMemAddressFree(va2, size));
    kv("unknown_frees", (long long)fakeCudaUnknownFrees());
    teardown();
    return 0;
}

/* ---- fork SIZE CHILD_SIZE: holds SIZE, forks; the child allocates CHILD_SIZE and exits normally. */

static int mode_fork(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    size_t size = (size_t)parse_size(argv[0]), child_size = (size_t)parse_size(argv[1]);
    setup();
    CUdeviceptr p = 0;
    kv("parent.res", cuMemAlloc_v2(&p, size));
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        CUdeviceptr q = 0;
        CUresult r = cuMemAlloc_v2(&q, child_size);
        kv("child.res", r);
        kv("child.region", region_used());
        if (r == CUDA_SUCCESS)
            cuMemFree_v2(q);
        fflush(stdout);
        exit(0);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    kv("child.exit", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    kv("parent.after_child_region", region_used());
    if (p)
        kv("parent.free", cuMemFree_v2(p));
    kv("parent.after_free_region", region_used());
    teardown();
    return 0;
}

/* ---- exec-swap SIZE PATH [fd]: re-executes itself as `alloc SIZE` with GPUSLICE_GUARD_CONFIG=PATH
 * (or, with fd, PATH opened at the descriptor the current GPUSLICE_GUARD_CONFIG=/proc/self/fd/N
 * names): a child that tries to run under other limits. */

static int mode_exec_swap(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return 3;
    self[n] = '\0';
    if (argc > 2 && !strcmp(argv[2], "fd")) {
        const char *cfg = getenv("GPUSLICE_GUARD_CONFIG");
        int fd = open(argv[1], O_RDONLY);
        if (!cfg || strncmp(cfg, "/proc/self/fd/", 14) || fd < 0)
            return 3;
        dup2(fd, atoi(cfg + 14));
    } else {
        setenv("GPUSLICE_GUARD_CONFIG", argv[1], 1);
    }
    char *child_argv[] = { self, (char *)"alloc", argv[0], NULL };
    fflush(stdout);
    execv(self, child_argv);
    return 3;
}

/* ---- nvml [SIZE]: NVML's memory view (nvidia-smi's) beside cuMemGetInfo's, SIZE allocated ---------- */

typedef struct { unsigned long long total, free, used; } app_nvml_memory;

static int mode_nvml(int argc, char **argv)
{
    setup();
    CUdeviceptr p = 0;
    if (argc > 0)
        kv("pre_alloc", cuMemAlloc_v2(&p, (size_t)parse_size(argv[0])));
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    int (*init)(void) = h ? (int (*)(void))dlsym(h, "nvmlInit_v2") : NULL;
    int (*get)(unsigned, void **) = h ? (int (*)(unsigned, void **))dlsym(h, "nvmlDeviceGetHandleByIndex_v2") : NULL;
    int (*info)(void *, app_nvml_memory *) = h ? (int (*)(void *, app_nvml_memory *))dlsym(h, "nvmlDeviceGetMemoryInfo") : NULL;
    if (!init || !get || !info)
        return 3;
    void *d = NULL;
    app_nvml_memory m = { 0 };
    init();
    get((unsigned)device, &d);
    kv("nvml.res", info(d, &m));
    kv("nvml.total", (long long)m.total);
    kv("nvml.free", (long long)m.free);
    kv("nvml.used", (long long)m.used);
    size_t fr = 0, tot = 0;
    kv("cuda.res", cuMemGetInfo_v2(&fr, &tot));
    kv("cuda.total", (long long)tot);
    kv("cuda.free", (long long)fr);
    if (p)
        cuMemFree_v2(p);
    teardown();
    return 0;
}

/* ---- exec-env-i SIZE [HOW] ---------------------------------------------------------------------------- */

extern char **environ;

static int mode_exec_env_i(int argc, char **argv)
{
    if (argc < 1)
        return 2;
    const char *how = argc > 1 ? argv[1] : "execve";
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return 3;
    self[n] = '\0';
    char *child_argv[] = { self, (char *)"alloc", argv[0], NULL };
    char *empty_env[] = { NULL };
    fflush(stdout);
    if (strcmp(how, "execve") == 0) {
        execve(self, child_argv, empty_env);
    } else if (strcmp(how, "execvpe") == 0) {
        execvpe(self, child_argv, empty_env);
    } else if (strcmp(how, "clearenv") == 0) {
        clearenv();
        execv(self, child_argv);
    } else if (strcmp(how, "execle") == 0) {
        execle(self, self, "alloc", argv[0], (char *)NULL, empty_env);
    } else if (strcmp(how, "env") == 0) {
        /* The env(1) program, as a shell user would run it. */
        char *env_argv[] = { (char *)"env", (char *)"-i", self, (char *)"alloc", argv[0], NULL };
        execve("/usr/bin/env", env_argv, environ);
    } else if (strcmp(how, "posix_spawn") == 0) {
        pid_t pid;
        int e = posix_spawn(&pid, self, NULL, NULL, child_argv, empty_env);
        if (e != 0) {
            kv("spawn_errno", e);
            return 3;
        }
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 3;
    } else {
        return 2;
    }
    perror("guard_app: exec");
    return 3;
}

/* ---- start-child HOW SIZE [CONFIG|-] [nopreload] ----------------------------------------------------------
 * Starts `guard_app alloc SIZE` the way launchers do (HOW: system, popen, posix_spawn, posix_spawnp,
 * execve, execveat, fexecve, closefrom: every descriptor from 3 closed, then execv; syscall: the
 * execve system call, which no wrapper sees; orphan: that from a grandchild whose parent has
 * exited), after setting
 * GPUSLICE_GUARD_CONFIG=CONFIG in its own environment (CONFIG "memfd:PATH": PATH's text in a sealed
 * memfd of its own at descriptor 40, named as /proc/self/fd/40; "anchor:PATH": that memfd at
 * descriptor 1000, where gpuslice exec keeps the limits, and no variable) and, with nopreload, removing
 * LD_PRELOAD: a program that tries to give its child other limits, or none. The child's key=value
 * lines reach stdout (through the pipe for popen). */

/* PATH's content in a sealed memfd at descriptor at (inherited). */
static int forged_memfd(const char *path, int at)
{
    char buf[4096];
    int in = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = in < 0 ? -1 : read(in, buf, sizeof(buf));
    if (in >= 0)
        close(in);
    int fd = n <= 0 ? -1 : memfd_create("gpuslice-limits", MFD_ALLOW_SEALING);
    if (fd < 0 || write(fd, buf, (size_t)n) != n ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) < 0 || dup2(fd, at) < 0)
        return -1;
    close(fd);
    return 0;
}

static int wait_child(pid_t pid)
{
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return 3;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 3;
}

static int mode_start_child(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    const char *how = argv[0], *size = argv[1];
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return 3;
    self[n] = '\0';
    if (argc > 2 && strcmp(argv[2], "-") != 0) {
        if (!strncmp(argv[2], "memfd:", 6)) {
            if (forged_memfd(argv[2] + 6, 40) < 0)
                return 3;
            setenv("GPUSLICE_GUARD_CONFIG", "/proc/self/fd/40", 1);
        } else if (!strncmp(argv[2], "anchor:", 7)) { /* where gpuslice exec keeps its own */
            if (forged_memfd(argv[2] + 7, 1000) < 0)
                return 3;
        } else {
            setenv("GPUSLICE_GUARD_CONFIG", argv[2], 1);
        }
    }
    if (argc > 3 && !strcmp(argv[3], "nopreload"))
        unsetenv("LD_PRELOAD");
    char *child_argv[] = { self, (char *)"alloc", (char *)size, NULL };
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "'%s' alloc %s", self, size);
    fflush(stdout);
    if (!strcmp(how, "system")) {
        int st = system(cmd);
        return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : 3;
    }
    if (!strcmp(how, "popen")) {
        FILE *f = popen(cmd, "r");
        if (!f)
            return 3;
        char line[512];
        while (fgets(line, sizeof(line), f))
            fputs(line, stdout);
        int st = pclose(f);
        return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : 3;
    }
    if (!strcmp(how, "posix_spawn") || !strcmp(how, "posix_spawnp")) {
        pid_t pid;
        int e = !strcmp(how, "posix_spawn") ? posix_spawn(&pid, self, NULL, NULL, child_argv, environ)
                                            : posix_spawnp(&pid, self, NULL, NULL, child_argv, environ);
        return e ? 3 : wait_child(pid);
    }
    if (!strcmp(how, "execve"))
        execve(self, child_argv, environ);
    else if (!strcmp(how, "execveat"))
        execveat(AT_FDCWD, self, child_argv, environ, 0);
    else if (!strcmp(how, "fexecve")) {
        int fd = open(self, O_RDONLY | O_CLOEXEC);
        if (fd >= 0)
            fexecve(fd, child_argv, environ);
    } else if (!strcmp(how, "closefrom")) {
        closefrom(3);
        execv(self, child_argv);
    } else if (!strcmp(how, "syscall")) { /* no wrapper sees it: only where the guard looks counts */
        syscall(SYS_execve, self, child_argv, environ);
    } else if (!strcmp(how, "orphan")) { /* the same from a grandchild whose parent is gone */
        int pfd[2];
        if (pipe(pfd) < 0)
            return 3;
        pid_t middle = fork();
        if (middle == 0) {
            pid_t me = getpid();
            if (fork() == 0) {
                close(pfd[0]);
                while (getppid() == me)
                    usleep(10000);
                dup2(pfd[1], STDOUT_FILENO);
                closefrom(3);
                syscall(SYS_execve, self, child_argv, environ);
                _exit(3);
            }
            _exit(0);
        }
        close(pfd[1]);
        int rc = wait_child(middle);
        char buf[4096];
        ssize_t r;
        while ((r = read(pfd[0], buf, sizeof(buf))) > 0)
            fwrite(buf, 1, (size_t)r, stdout);
        return rc;
    } else {
        return 2;
    }
    perror("guard_app: exec");
    return 3;
}

/* ---- race THREADS COUNT SIZE [gate] ----------------------------------------------------------------- */

struct race_arg {
    long count;
    size_t size;
    pthread_barrier_t *barrier;
    CUdeviceptr *ptrs;
    long ok, oom, other;
};

static void *race_thread(void *p)
{
    struct race_arg *a = p;
    cuCtxSetCurrent(ctx);
    pthread_barrier_wait(a->barrier);
    for (long i = 0; i < a->count; i++) {
        CUresult r = cuMemAlloc_v2(&a->ptrs[a->ok], a->size);
        if (r == CUDA_SUCCESS)
            a->ok++;
        else if (r == CUDA_ERROR_OUT_OF_MEMORY)
            a->oom++;
        else
            a->other++;
    }
    return NULL;
}

static void wait_stdin(bool for_eof)
{
    char c;
    for (;;) {
        ssize_t n = read(0, &c, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || !for_eof)
            return;
    }
}

static int mode_race(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    int threads = (int)parse_size(argv[0]);
    long count = (long)parse_size(argv[1]);
    size_t size = (size_t)parse_size(argv[2]);
    bool gate = argc > 3 && strcmp(argv[3], "gate") == 0;
    if (threads < 1 || threads > 256 || count < 1)
        return 2;
    setup();
    struct race_arg *args = calloc((size_t)threads, sizeof(*args));
    pthread_t *tids = calloc((size_t)threads, sizeof(*tids));
    pthread_barrier_t barrier;
    if (!args || !tids || pthread_barrier_init(&barrier, NULL, (unsigned)threads) != 0)
        return 3;
    for (int i = 0; i < threads; i++) {
        args[i] = (struct race_arg){ .count = count, .size = size, .barrier = &barrier };
        args[i].ptrs = calloc((size_t)count, sizeof(CUdeviceptr));
        if (!args[i].ptrs)
            return 3;
    }
    if (gate) {
        kv("ready", 1);
        fflush(stdout);
        wait_stdin(false);
    }
    for (int i = 0; i < threads; i++)
        if (pthread_create(&tids[i], NULL, race_thread, &args[i]) != 0)
            return 3;
    long ok = 0, oom = 0, other = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(tids[i], NULL);
        ok += args[i].ok;
        oom += args[i].oom;
        other += args[i].other;
    }
    kv("ok", ok);
    kv("oom", oom);
    kv("other_err", other);
    kv("bytes", (long long)((unsigned long long)ok * size));
    report_usage("held");
    kv("done", 1);
    fflush(stdout);
    if (gate)
        wait_stdin(true);
    long free_err = 0;
    for (int i = 0; i < threads; i++) {
        for (long j = 0; j < args[i].ok; j++)
            if (cuMemFree_v2(args[i].ptrs[j]) != CUDA_SUCCESS)
                free_err++;
        free(args[i].ptrs);
    }
    kv("free_err", free_err);
    report_usage("after");
    pthread_barrier_destroy(&barrier);
    free(args);
    free(tids);
    teardown();
    return 0;
}

/* ---- launch N ------------------------------------------------------------------------------------------- */

static int mode_launch(int argc, char **argv)
{
    if (argc < 1)
        return 2;
    long n = (long)parse_size(argv[0]);
    unsigned grid = argc > 1 ? (unsigned)parse_size(argv[1]) : 1;
    setup();
    unsigned long long l0 = fakeCudaLaunches(), c0 = fakeCudaClockUs();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long errs = 0;
    for (long i = 0; i < n; i++)
        if (cuLaunchKernel(NULL, grid, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS)
            errs++;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long long ns = (long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
    kv("launch_errors", errs);
    kv("launches", (long long)(fakeCudaLaunches() - l0));
    kv("gpu_us", (long long)(fakeCudaClockUs() - c0));
    kv("wall_ns", ns);
    teardown();
    return 0;
}

/* How pace launches: every launch entry point the guard paces, in both stream flavours. */
enum pace_via { VIA_KERNEL, VIA_KERNEL_PTSZ, VIA_EX, VIA_EX_PTSZ, VIA_COOP, VIA_COOP_PTSZ, VIA_GRAPH, VIA_GRAPH_PTSZ };
static const char *const pace_via_names[] = { "kernel", "ptsz", "ex", "ex-ptsz", "coop", "coop-ptsz", "graph",
                                              "graph-ptsz" };
/* The driver function each must reach. */
static const char *const pace_via_driver[] = { "cuLaunchKernel",
                                               "cuLaunchKernel_ptsz",
                                               "cuLaunchKernelEx",
                                               "cuLaunchKernelEx_ptsz",
                                               "cuLaunchCooperativeKernel",
                                               "cuLaunchCooperativeKernel_ptsz",
                                               "cuGraphLaunch",
                                               "cuGraphLaunch_ptsz" };

struct pace_arg {
    long long until_ns;
    unsigned grid;
    enum pace_via via;
    long launches, errors;
};

static CUresult pace_launch(enum pace_via via, unsigned grid)
{
    CUlaunchConfig cfg = { .gridDimX = grid, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 128, .blockDimY = 1,
                           .blockDimZ = 1 };
    CUgraphExec graph = (CUgraphExec)(uintptr_t)grid; /* the simulated driver's graph of GRID us */
    switch (via) {
    case VIA_KERNEL: return cuLaunchKernel(NULL, grid, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL);
    case VIA_KERNEL_PTSZ: return cuLaunchKernel_ptsz(NULL, grid, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL);
    case VIA_EX: return cuLaunchKernelEx(&cfg, NULL, NULL, NULL);
    case VIA_EX_PTSZ: return cuLaunchKernelEx_ptsz(&cfg, NULL, NULL, NULL);
    case VIA_COOP: return cuLaunchCooperativeKernel(NULL, grid, 1, 1, 128, 1, 1, 0, NULL, NULL);
    case VIA_COOP_PTSZ: return cuLaunchCooperativeKernel_ptsz(NULL, grid, 1, 1, 128, 1, 1, 0, NULL, NULL);
    case VIA_GRAPH: return cuGraphLaunch(graph, NULL);
    case VIA_GRAPH_PTSZ: return cuGraphLaunch_ptsz(graph, NULL);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

static long long mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void *pace_thread(void *p)
{
    struct pace_arg *a = p;
    cuCtxSetCurrent(ctx);
    while (mono_ns() < a->until_ns) {
        CUresult r = pace_launch(a->via, a->grid);
        a->launches++;
        a->errors += r != CUDA_SUCCESS;
    }
    cuCtxSynchronize();
    return NULL;
}

/* pace MS GRID [THREADS] [VIA]: THREADS threads launch kernels of GRID microseconds of GPU time
 * through VIA (pace_via_names; default cuLaunchKernel) back to back for MS milliseconds, then wait for the GPU. gpu_us / wall_ns is the share of GPU
 * time the process got on the simulated driver's clock. */
static int mode_pace(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    long long ms = (long long)parse_size(argv[0]);
    unsigned grid = (unsigned)parse_size(argv[1]);
    int threads = argc > 2 ? (int)parse_size(argv[2]) : 1;
    int via = argc > 3 ? -1 : VIA_KERNEL;
    for (size_t i = 0; argc > 3 && i < sizeof(pace_via_names) / sizeof(pace_via_names[0]); i++)
        if (!strcmp(argv[3], pace_via_names[i]))
            via = (int)i;
    if (via < 0) {
        fprintf(stderr, "pace: unknown launch call '%s'\n", argv[3]);
        return 2;
    }
    if (threads < 1 || threads > 64 || grid == 0)
        return 2;
    setup();
    unsigned long long c0 = fakeCudaClockUs();
    long long t0 = mono_ns();
    struct pace_arg args[64];
    pthread_t tid[64];
    for (int i = 0; i < threads; i++) {
        args[i] = (struct pace_arg){ .until_ns = t0 + ms * 1000000LL, .grid = grid, .via = (enum pace_via)via };
        if (pthread_create(&tid[i], NULL, pace_thread, &args[i]) != 0)
            return 3;
    }
    long launches = 0, errors = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(tid[i], NULL);
        launches += args[i].launches;
        errors += args[i].errors;
    }
    long long wall = mono_ns() - t0;
    kv("launches", launches);
    kv("launch_errors", errors);
    kv("gpu_us", (long long)(fakeCudaClockUs() - c0));
    kv("wall_ns", wall);
    kv("share_permille", (long long)((double)(fakeCudaClockUs() - c0) * 1000.0 * 1000.0 / (double)wall));
    kv("events_created", (long long)fakeCudaCalls("cuEventCreate"));
    kv("driver_calls", (long long)fakeCudaCalls(pace_via_driver[via]));
    kv("records_legacy", (long long)fakeCudaCalls("cuEventRecord"));
    kv("records_ptsz", (long long)fakeCudaCalls("cuEventRecord_ptsz"));
    teardown();
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "usage: guard_app MODE ARGS... (alloc, alloc-all-paths, meminfo, dlsym, procaddr, "
                        "procaddr2, free-unknown, hold, exec-env-i, start-child, race, launch, pace, churn, repl, "
                        "cross-device, fork, exec-swap, nvml, vmm)\n");
        return 2;
    }
    const char *mode = argv[1];
    int rest = argc - 2;
    char **args = argv + 2;
    int rc;
    if (strcmp(mode, "alloc") == 0)
        rc = mode_alloc(rest, args);
    else if (strcmp(mode, "alloc-all-paths") == 0)
        rc = mode_alloc_all_paths(rest, args);
    else if (strcmp(mode, "meminfo") == 0)
        rc = mode_meminfo(rest, args);
    else if (strcmp(mode, "dlsym") == 0)
        rc = mode_dlsym(rest, args);
    else if (strcmp(mode, "procaddr") == 0)
        rc = mode_procaddr(rest, args, false);
    else if (strcmp(mode, "procaddr2") == 0)
        rc = mode_procaddr(rest, args, true);
    else if (strcmp(mode, "free-unknown") == 0)
        rc = mode_free_unknown();
    else if (strcmp(mode, "hold") == 0)
        rc = mode_hold(rest, args);
    else if (strcmp(mode, "exec-env-i") == 0)
        rc = mode_exec_env_i(rest, args);
    else if (strcmp(mode, "start-child") == 0)
        rc = mode_start_child(rest, args);
    else if (strcmp(mode, "race") == 0)
        rc = mode_race(rest, args);
    else if (strcmp(mode, "launch") == 0)
        rc = mode_launch(rest, args);
    else if (strcmp(mode, "pace") == 0)
        rc = mode_pace(rest, args);
    else if (strcmp(mode, "churn") == 0)
        rc = mode_churn(rest, args);
    else if (strcmp(mode, "repl") == 0)
        rc = mode_repl();
    else if (strcmp(mode, "cross-device") == 0)
        rc = mode_cross_device(rest, args);
    else if (strcmp(mode, "fork") == 0)
        rc = mode_fork(rest, args);
    else if (strcmp(mode, "exec-swap") == 0)
        rc = mode_exec_swap(rest, args);
    else if (strcmp(mode, "nvml") == 0)
        rc = mode_nvml(rest, args);
    else if (strcmp(mode, "vmm") == 0)
        rc = mode_vmm(rest, args);
    else
        rc = 2;
    if (rc == 2)
        fprintf(stderr, "guard_app: bad arguments for mode '%s'\n", mode);
    fflush(stdout);
    return rc;
}
