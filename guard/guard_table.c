/* guard_table.c: what this process allocated (guard_table.h). */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "guard_base.h"
#include "guard_table.h"

struct guard_table g_table;

void table_lock_wait(struct guard_table *t) {
    for (unsigned spins = 0; atomic_exchange_explicit(&t->lock, 1, memory_order_acquire);) {
        while (atomic_load_explicit(&t->lock, memory_order_relaxed))
            if (++spins >= 64) { /* the holder may be preempted */
                sched_yield();
                spins = 0;
            }
    }
}

static size_t slot_of(uint64_t key, uint32_t kind, size_t cap) {
    uint64_t h = (key ^ ((uint64_t)kind << 61)) * 0x9E3779B97F4A7C15ULL;
    return (size_t)(h >> 20) & (cap - 1);
}

static bool table_put_locked(struct guard_table *t, uint64_t key, uint32_t kind, int dev, uint64_t bytes) {
    if ((t->count + 1) * 2 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        struct table_entry *n = calloc(cap, sizeof(*n));
        if (!n)
            return false;
        for (size_t i = 0; i < t->cap; i++) {
            if (!t->slots[i].key)
                continue;
            size_t j = slot_of(t->slots[i].key, t->slots[i].kind, cap);
            while (n[j].key)
                j = (j + 1) & (cap - 1);
            n[j] = t->slots[i];
        }
        free(t->slots);
        t->slots = n;
        t->cap = cap;
    }
    size_t j = slot_of(key, kind, t->cap);
    while (t->slots[j].key)
        j = (j + 1) & (t->cap - 1);
    t->slots[j] = (struct table_entry){ key, kind, dev, bytes };
    t->count++;
    return true;
}

struct table_entry *table_find_locked(struct guard_table *t, uint64_t key, uint32_t kind) {
    for (size_t j = t->cap ? slot_of(key, kind, t->cap) : 0, n = 0; t->cap && n < t->cap;
         j = (j + 1) & (t->cap - 1), n++) {
        if (t->slots[j].key == 0)
            break;
        if (t->slots[j].key == key && t->slots[j].kind == kind)
            return &t->slots[j];
    }
    for (unsigned i = 0; i < OVERFLOW_ENTRIES; i++)
        if (t->overflow[i].key == key && t->overflow[i].kind == kind)
            return &t->overflow[i];
    return NULL;
}

void table_remove_locked(struct guard_table *t, struct table_entry *e) {
    if (e >= t->overflow && e < t->overflow + OVERFLOW_ENTRIES) {
        e->key = 0;
        return;
    }
    /* Backward shift: each later entry of the run that may sit in the hole moves into it. */
    size_t hole = (size_t)(e - t->slots), mask = t->cap - 1;
    for (size_t k = (hole + 1) & mask; t->slots[k].key; k = (k + 1) & mask) {
        size_t home = slot_of(t->slots[k].key, t->slots[k].kind, t->cap);
        /* it stays if its home is cyclically within (hole, k] */
        if (hole < k ? home > hole && home <= k : home > hole || home <= k)
            continue;
        t->slots[hole] = t->slots[k];
        hole = k;
    }
    t->slots[hole].key = 0;
    t->count--;
}

void table_put(struct guard_table *t, uint64_t key, uint32_t kind, int dev, uint64_t bytes) {
    table_lock(t);
    bool ok = table_put_locked(t, key, kind, dev, bytes);
    for (unsigned i = 0; !ok && i < OVERFLOW_ENTRIES; i++)
        if (!t->overflow[i].key) {
            t->overflow[i] = (struct table_entry){ key, kind, dev, bytes };
            ok = true;
        }
    table_unlock(t);
    if (!ok && !atomic_fetch_add(&t->overflow_lost, 1))
        glog("out of memory: an allocation of %llu bytes stays counted until the process exits",
             (unsigned long long)bytes);
}

void table_after_fork(struct guard_table *t) {
    atomic_store(&t->lock, 0);
    free(t->slots);
    t->slots = NULL;
    t->cap = t->count = 0;
    memset(t->overflow, 0, sizeof(t->overflow));
}
