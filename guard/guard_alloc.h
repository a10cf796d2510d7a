/* guard_alloc.h: inside the guard: the steps of a counted allocation and of its free, shared by
 * the memory and VMM wrappers (guard_memory.c, guard_vmm.c). Inline: they are the allocation
 * path.
 *
 * Every wrapper takes guard_state() first (the first call resolves the driver, so the driver's
 * function is read after it) and passes it on. An allocation: alloc_begin (failing closed refuses
 * it, any state but ready passes it to the driver untouched; then the reservation), the driver's
 * call, alloc_kept (on failure the bytes go back) and table_put of what the driver returned. A
 * free: free_begin (table_take: unknown keys go to the driver untouched), the driver's call,
 * free_done (the bytes come back only if the free succeeded). Frees and releases are never
 * refused, whatever the guard's state. */
#ifndef GS_GUARD_ALLOC_H
#define GS_GUARD_ALLOC_H

#include <stdbool.h>
#include <stdint.h>

#include "cuda_api.h"
#include "guard_account.h"
#include "guard_base.h"
#include "guard_core.h"
#include "guard_driver.h"
#include "guard_table.h"

/* What a wrapper does next: a CUresult (>= 0) to answer at once, or one of these. */
enum { ALLOC_COUNT = -1, ALLOC_PASS = -2 };

/* An allocating wrapper's start, from the guard's state st (guard_state(), taken before anything
 * else: the first call resolves the driver): CUDA_ERROR_NOT_INITIALIZED without the driver's
 * function, CUDA_ERROR_OUT_OF_MEMORY when failing closed, ALLOC_COUNT when the guard is ready and
 * the call's arguments say what it allocates (`countable`), else ALLOC_PASS. */
static inline int alloc_mode(int st, bool have_real, bool countable) {
    if (!have_real)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (st == G_CLOSED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return st == G_READY && countable ? ALLOC_COUNT : ALLOC_PASS;
}

/* Reserves n bytes on dev under its limit; false: over the quota. */
static inline bool alloc_reserve(struct guard_account *a, int dev, uint64_t n) {
    return account_reserve(a, dev, guard_device_limit(&g_core, dev), n);
}

/* An allocation under way: mode (as alloc_mode, or CUDA_ERROR_OUT_OF_MEMORY when the reservation
 * was refused) and, when ALLOC_COUNT, the n bytes reserved on dev. */
struct counted {
    int mode;
    int dev;
    uint64_t n;
};

/* alloc_mode, then the reservation of n bytes on the current context's device. */
static inline struct counted alloc_begin(struct guard_account *a, int st, bool have_real, bool countable,
                                         uint64_t n) {
    struct counted c = { alloc_mode(st, have_real, countable), 0, n };
    if (c.mode != ALLOC_COUNT)
        return c;
    c.dev = guard_current_device(&g_real);
    if (!alloc_reserve(a, c.dev, n))
        c.mode = CUDA_ERROR_OUT_OF_MEMORY;
    else
        FAULT("alloc.reserved");
    return c;
}

/* After the driver's allocation call: true if it succeeded (the caller then remembers the
 * allocation); false with the bytes given back. */
static inline bool alloc_kept(struct guard_account *a, CUresult r, const struct counted *c) {
    if (r != CUDA_SUCCESS) {
        account_unreserve(a, c->dev, c->n);
        return false;
    }
    FAULT("alloc.driver");
    return true;
}

/* alloc_kept, and the device pointer the driver wrote to *dptr remembered. Returns r. */
static inline CUresult alloc_done_ptr(struct guard_account *a, struct guard_table *t, CUresult r,
                                      const CUdeviceptr *dptr, const struct counted *c) {
    if (alloc_kept(a, r, c))
        table_put(t, *dptr, K_PTR, c->dev, c->n);
    return r;
}

/* A free under way, in the guard's state st: mode (a CUresult to answer at once, ALLOC_COUNT when
 * the key was this process's and was taken out of the table with its dev and n, else ALLOC_PASS). */
static inline struct counted free_begin(int st, bool have_real, struct guard_table *t, uint64_t key,
                                        uint32_t kind) {
    struct counted c = { CUDA_ERROR_NOT_INITIALIZED, 0, 0 };
    if (have_real)
        c.mode = st == G_READY && table_take(t, key, kind, &c.dev, &c.n) ? ALLOC_COUNT : ALLOC_PASS;
    return c;
}

/* After the driver's free of (key, kind): the bytes come back if it succeeded, else the entry goes
 * back into the table. Returns r. */
static inline CUresult free_done(struct guard_account *a, struct guard_table *t, CUresult r, uint64_t key,
                                 uint32_t kind, const struct counted *c) {
    FAULT("free.driver");
    if (r == CUDA_SUCCESS)
        account_unreserve(a, c->dev, c->n);
    else
        table_put(t, key, kind, c->dev, c->n);
    return r;
}

#endif
