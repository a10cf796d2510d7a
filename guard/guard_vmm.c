/* guard_vmm.c: virtual memory management, memory pools and stream-ordered allocation
 * (guard_vmm.h).
 *
 * The driver frees a handle's memory when the handle is released AND its last mapping is unmapped,
 * in either order. So each handle's entry counts its mappings, the mappings are remembered (address,
 * size, handle: cuMemUnmap names an address range, which may hold several whole mappings), and the
 * bytes come back at whichever of the release and the last unmap comes last. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "guard_account.h"
#include "guard_alloc.h"
#include "guard_base.h"
#include "guard_core.h"
#include "guard_driver.h"
#include "guard_table.h"
#include "guard_vmm.h"

struct vmm_map {
    CUdeviceptr ptr;
    uint64_t size;
    CUmemGenericAllocationHandle handle;
};

/* Memory pools and their devices: an allocation from a pool is charged to the pool's device, not
 * to the current context's (a pool of device 0 used from device 1's context). Pools are learnt
 * from cuDeviceGetDefaultMemPool and cuMemPoolCreate; an unknown pool (more than POOLS of them)
 * is charged to the current device. */
#define POOLS 64

struct guard_vmm {
    struct vmm_map *maps; /* under the allocation table's lock */
    size_t n_maps, cap_maps;
    _Atomic(cuMemGetAllocationGranularity_fn) granularity_fn;
    struct {
        _Atomic(CUmemoryPool) pool;
        int dev;
    } pools[POOLS];
};

struct guard_vmm g_vmm;

typedef CUresult (*cuDeviceGetDefaultMemPool_fn)(CUmemoryPool *, CUdevice);
typedef CUresult (*cuMemPoolCreate_fn)(CUmemoryPool *, const guard_mem_pool_props *);

/* cuMemCreate's size as the driver holds it: a multiple of the allocation granularity (cuda.h
 * requires one; if a driver rounds instead of refusing, the rounded size is what it holds). */
static uint64_t vmm_size(struct guard_vmm *v, uint64_t size, const CUmemAllocationProp *prop) {
    cuMemGetAllocationGranularity_fn fn = atomic_load_explicit(&v->granularity_fn, memory_order_relaxed);
    if (!fn && g_real.libcuda) {
        fn = (cuMemGetAllocationGranularity_fn)guard_cuda_sym(&g_real, "cuMemGetAllocationGranularity");
        atomic_store_explicit(&v->granularity_fn, fn, memory_order_relaxed);
    }
    size_t g = 0;
    if (!fn || fn(&g, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || g == 0 || size % g == 0 ||
        size > UINT64_MAX - g)
        return size;
    return size + (g - size % g);
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                            unsigned long long flags) {
    /* only device memory counts */
    int st = guard_state();
    int mode = alloc_mode(st, g_real.cuMemCreate != NULL,
                          handle && prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE);
    if (mode != ALLOC_COUNT)
        return mode == ALLOC_PASS ? g_real.cuMemCreate(handle, size, prop, flags) : mode;
    int dev = prop->location.id >= 0 && prop->location.id < GS_GUARD_MAX_DEVICES ? prop->location.id : 0;
    uint64_t n = vmm_size(&g_vmm, size, prop);
    if (!alloc_reserve(&g_acct, dev, n))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = g_real.cuMemCreate(handle, size, prop, flags);
    if (r != CUDA_SUCCESS) {
        account_unreserve(&g_acct, dev, n);
        return r;
    }
    table_put(&g_table, *handle, K_HANDLE, dev, n);
    return CUDA_SUCCESS;
}

/* Remembers a mapping of handle's entry e; under the table's lock. */
static void vmm_add_map_locked(struct guard_vmm *v, struct table_entry *e, CUdeviceptr ptr, size_t size,
                               CUmemGenericAllocationHandle handle) {
    if (v->n_maps == v->cap_maps) {
        size_t cap = v->cap_maps ? v->cap_maps * 2 : 64;
        struct vmm_map *m = realloc(v->maps, cap * sizeof(*m));
        if (m) {
            v->maps = m;
            v->cap_maps = cap;
        }
    }
    if (v->n_maps < v->cap_maps) {
        v->maps[v->n_maps++] = (struct vmm_map){ ptr, size, handle };
        e->maps++;
    } else {
        e->maps = MAPS_LOST; /* no memory to remember the mapping: counted until the process is dead */
    }
}

EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                         unsigned long long flags) {
    int st = guard_state();
    if (!g_real.cuMemMap)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = g_real.cuMemMap(ptr, size, offset, handle, flags);
    if (r != CUDA_SUCCESS || st != G_READY)
        return r;
    table_lock(&g_table);
    struct table_entry *e = table_find_locked(&g_table, handle, K_HANDLE);
    if (e && e->maps != MAPS_LOST)
        vmm_add_map_locked(&g_vmm, e, ptr, size, handle);
    table_unlock(&g_table);
    return r;
}

/* Forgets the mappings within [ptr, ptr + size); a handle released while mapped gives its bytes
 * back at its last unmap. Under the table's lock (the lock order is always the table's, then the
 * region's). */
static void vmm_unmap_locked(struct guard_vmm *v, struct guard_table *t, CUdeviceptr ptr, size_t size) {
    for (size_t i = 0; i < v->n_maps;) {
        struct vmm_map m = v->maps[i];
        if (m.ptr < ptr || m.ptr - ptr >= size) {
            i++;
            continue;
        }
        v->maps[i] = v->maps[--v->n_maps];
        struct table_entry *e = table_find_locked(t, m.handle, K_HANDLE);
        if (e && e->maps != MAPS_LOST && --e->maps == 0 && e->released) {
            int dev = e->dev;
            uint64_t n = e->bytes;
            table_remove_locked(t, e);
            account_unreserve(&g_acct, dev, n);
        }
    }
}

EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    int st = guard_state();
    if (!g_real.cuMemUnmap)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = g_real.cuMemUnmap(ptr, size);
    if (r != CUDA_SUCCESS || st != G_READY)
        return r;
    table_lock(&g_table);
    vmm_unmap_locked(&g_vmm, &g_table, ptr, size);
    table_unlock(&g_table);
    return r;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    int st = guard_state();
    if (!g_real.cuMemRelease)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (st != G_READY)
        return g_real.cuMemRelease(handle);
    /* An unmapped handle is taken out of the table before the driver frees it (as every free
     * does), so that a handle value the driver hands out again at once is not confused with it. */
    int dev = 0;
    uint64_t n = 0;
    table_lock(&g_table);
    struct table_entry *e = table_find_locked(&g_table, handle, K_HANDLE);
    bool taken = e && !e->released && e->maps == 0;
    if (taken) {
        dev = e->dev;
        n = e->bytes;
        table_remove_locked(&g_table, e);
    }
    table_unlock(&g_table);
    CUresult r = g_real.cuMemRelease(handle);
    if (taken)
        return free_done(&g_acct, &g_table, r, handle, K_HANDLE, &(struct counted){ ALLOC_COUNT, dev, n });
    if (r != CUDA_SUCCESS)
        return r;
    /* Still mapped: the driver keeps the memory until the last unmap, which gives the bytes back.
     * A handle already released (a reference cuMemRetainAllocationHandle took) changes nothing. */
    table_lock(&g_table);
    e = table_find_locked(&g_table, handle, K_HANDLE);
    if (e && !e->released && e->maps == 0) { /* unmapped meanwhile, by another thread */
        dev = e->dev;
        n = e->bytes;
        table_remove_locked(&g_table, e);
    } else if (e && !e->released) {
        e->released = 1;
    }
    table_unlock(&g_table);
    account_unreserve(&g_acct, dev, n);
    return r;
}

static void remember_pool(struct guard_vmm *v, CUmemoryPool pool, int dev) {
    if (!pool || dev < 0 || dev >= GS_GUARD_MAX_DEVICES)
        return;
    for (unsigned i = 0; i < POOLS; i++) {
        CUmemoryPool cur = atomic_load(&v->pools[i].pool);
        if (cur == pool)
            return;
        if (!cur) {
            v->pools[i].dev = dev;
            CUmemoryPool none = NULL;
            if (atomic_compare_exchange_strong(&v->pools[i].pool, &none, pool) || none == pool)
                return;
        }
    }
}

static int pool_device(struct guard_vmm *v, CUmemoryPool pool) {
    for (unsigned i = 0; i < POOLS; i++) {
        CUmemoryPool cur = atomic_load(&v->pools[i].pool);
        if (!cur)
            break;
        if (cur == pool)
            return v->pools[i].dev;
    }
    return guard_current_device(&g_real);
}

EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev) {
    guard_state();
    cuDeviceGetDefaultMemPool_fn real =
        (cuDeviceGetDefaultMemPool_fn)guard_cuda_sym(&g_real, "cuDeviceGetDefaultMemPool");
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(pool, dev);
    if (r == CUDA_SUCCESS && pool)
        remember_pool(&g_vmm, *pool, dev);
    return r;
}

EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const guard_mem_pool_props *props) {
    guard_state();
    cuMemPoolCreate_fn real = (cuMemPoolCreate_fn)guard_cuda_sym(&g_real, "cuMemPoolCreate");
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(pool, props);
    if (r == CUDA_SUCCESS && pool && props && props->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
        remember_pool(&g_vmm, *pool, props->location.id);
    return r;
}

/* Stream-ordered allocations are counted at their request size from the call until the free is
 * issued (the pool may keep the memory longer; the driver's own accounting is the reconcile). The
 * four wrappers answer as cuMemAllocAsync does when it is missing, then as their own driver
 * function (*real_at, or *pool_at for an allocation from a pool) does; an allocation from a pool is
 * charged to the pool's device. */
static CUresult stream_alloc(const cuMemAllocAsync_fn *real_at, const cuMemAllocFromPoolAsync_fn *pool_at,
                             CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s) {
    int st = guard_state(); /* the driver's functions are read after it (the first call resolves them) */
    cuMemAllocAsync_fn real = real_at ? *real_at : NULL;
    cuMemAllocFromPoolAsync_fn real_pool = pool_at ? *pool_at : NULL;
    bool from_pool = pool_at != NULL;
    int mode = alloc_mode(st, g_real.cuMemAllocAsync != NULL, dptr != NULL);
    if (mode >= 0)
        return mode;
    if (from_pool ? !real_pool : !real)
        return CUDA_ERROR_NOT_INITIALIZED;
    struct counted c = { mode, 0, bytesize };
    if (mode == ALLOC_COUNT) {
        c.dev = from_pool ? pool_device(&g_vmm, pool) : guard_current_device(&g_real);
        if (!alloc_reserve(&g_acct, c.dev, bytesize))
            return CUDA_ERROR_OUT_OF_MEMORY;
        FAULT("alloc.reserved");
    }
    CUresult r = from_pool ? real_pool(dptr, bytesize, pool, s) : real(dptr, bytesize, s);
    return mode == ALLOC_COUNT ? alloc_done_ptr(&g_acct, &g_table, r, dptr, &c) : r;
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    return stream_alloc(&g_real.cuMemAllocAsync, NULL, dptr, bytesize, NULL, hStream);
}

EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    return stream_alloc(&g_real.cuMemAllocAsync_ptsz, NULL, dptr, bytesize, NULL, hStream);
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
    return stream_alloc(NULL, &g_real.cuMemAllocFromPoolAsync, dptr, bytesize, pool, hStream);
}

EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                             CUstream hStream) {
    return stream_alloc(NULL, &g_real.cuMemAllocFromPoolAsync_ptsz, dptr, bytesize, pool, hStream);
}

/* cuMemFreeAsync's forms: answered as cuMemFreeAsync does when it is missing. */
static CUresult stream_free(const cuMemFreeAsync_fn *real_at, CUdeviceptr dptr, CUstream s) {
    int st = guard_state();
    cuMemFreeAsync_fn real = *real_at;
    struct counted c = free_begin(st, g_real.cuMemFreeAsync && real, &g_table, dptr, K_PTR);
    if (c.mode != ALLOC_COUNT)
        return c.mode == ALLOC_PASS ? real(dptr, s) : c.mode;
    return free_done(&g_acct, &g_table, real(dptr, s), dptr, K_PTR, &c);
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
    return stream_free(&g_real.cuMemFreeAsync, dptr, hStream);
}

EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
    return stream_free(&g_real.cuMemFreeAsync_ptsz, dptr, hStream);
}

void vmm_after_fork(struct guard_vmm *v) {
    free(v->maps);
    v->maps = NULL;
    v->n_maps = v->cap_maps = 0;
}
