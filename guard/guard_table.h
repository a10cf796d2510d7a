/* guard_table.h: inside the guard: what this process allocated, key -> (device, bytes), so that a
 * free gives back what its allocation reserved (guard_table.c). Per process: a forked child starts
 * with an empty one. */
#ifndef GS_GUARD_TABLE_H
#define GS_GUARD_TABLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "guard_base.h"

enum table_kind { K_PTR = 1, K_HANDLE, K_ARRAY, K_MIPMAP, K_CTX };

struct table_entry {
    uint64_t key;       /* 0 = empty */
    uint32_t kind;
    int32_t dev;
    uint64_t bytes;
    uint32_t maps;      /* K_HANDLE: its live mappings (cuMemMap); MAPS_LOST: not known, held till exit */
    uint32_t released;  /* K_HANDLE: released while mapped, its bytes held until the last unmap */
};
#define MAPS_LOST UINT32_MAX

/* Where entries go when the table cannot grow (see table_put). */
#define OVERFLOW_ENTRIES 64

/* Open addressing with linear probing and backward-shift deletion: no tombstones, so an
 * allocation and free cycle never makes the table rebuild itself.
 *
 * The lock: held for a few dozen instructions (a lookup, an insert, a rare growth), so a spinlock
 * that yields when it waits long is cheaper than a mutex (which cost ~50 instructions per
 * allocation and per free). Per process: a SIGKILL cannot leave it held for anyone else. */
struct guard_table {
    _Atomic int lock;
    struct table_entry *slots;
    size_t cap, count;
    struct table_entry overflow[OVERFLOW_ENTRIES];
    _Atomic unsigned overflow_lost; /* allocations counted until exit: their free could not be matched */
};

extern GUARD_HIDDEN struct guard_table g_table;

/* The lock's contended case: spins, and yields when the holder may be preempted. */
void table_lock_wait(struct guard_table *t);

static inline void table_lock(struct guard_table *t) {
    if (__builtin_expect(atomic_exchange_explicit(&t->lock, 1, memory_order_acquire), 0))
        table_lock_wait(t);
}

static inline void table_unlock(struct guard_table *t) {
    atomic_store_explicit(&t->lock, 0, memory_order_release);
}

/* The entry of (key, kind) in the table or the overflow list, or NULL; under the lock. */
struct table_entry *table_find_locked(struct guard_table *t, uint64_t key, uint32_t kind);

/* Takes e (found under the same lock hold) out of the table. */
void table_remove_locked(struct guard_table *t, struct table_entry *e);

/* Remembers an allocation. When the table cannot grow (no memory), the entry goes into the
 * overflow list, a fixed array; when that is full too, the bytes stay counted against the quota
 * (the process holds them until it exits, and reclaim gives them back once it is dead): an
 * allocation is never live and uncounted. */
void table_put(struct guard_table *t, uint64_t key, uint32_t kind, int dev, uint64_t bytes);

/* Takes (key, kind) out of the table: true with its device and bytes, false if unknown. */
static inline bool table_take(struct guard_table *t, uint64_t key, uint32_t kind, int *dev, uint64_t *bytes) {
    table_lock(t);
    struct table_entry *e = table_find_locked(t, key, kind);
    if (e) {
        *dev = e->dev;
        *bytes = e->bytes;
        table_remove_locked(t, e);
    }
    table_unlock(t);
    return e != NULL;
}

/* In a forked child: the parent's allocations are the parent's (and another thread of the parent
 * may have held the lock). */
void table_after_fork(struct guard_table *t);

#endif
