/* guard_account.h: inside the guard: the container's accounting in its shared region
 * (guard_region.h): the region's robust lock, this process's slot, reservations before an
 * allocation and their return, and the bytes of dead processes given back (guard_account.c). */
#ifndef GS_GUARD_ACCOUNT_H
#define GS_GUARD_ACCOUNT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "guard_base.h"
#include "guard_region.h"

struct guard_account {
    struct gs_guard_region *region;  /* NULL until mapped */
    struct gs_guard_proc_slot *slot; /* this process's; NULL in a forked child until it reserves */
    pthread_mutex_t claim_lock;      /* a forked child's threads claiming its slot */
    _Atomic bool lock_logged;        /* an unusable region lock was logged */
};

extern GUARD_HIDDEN struct guard_account g_acct;

/* Maps the region file at path (created if missing, laid out and its lock initialised under the
 * file's flock); 0 or -errno, logged. */
int account_map(struct guard_account *a, const char *path);

/* Takes a free slot for this process; 0, -ENOLCK or -ENOSPC (logged). */
int account_claim_slot(struct guard_account *a);

/* Gives the bytes of processes that died back to the container. Returns the number reclaimed. */
unsigned account_reclaim_dead(struct guard_account *a);

/* Reserves n bytes on dev under `limit` (0: none); false (counted as a refusal) if over it. A
 * forked child claims its slot here first. */
bool account_reserve(struct guard_account *a, int dev, uint64_t limit, uint64_t n);

/* Gives back bytes this process reserved (never more than its slot holds). */
void account_unreserve(struct guard_account *a, int dev, uint64_t n);

/* At exit: frees the slot if the process holds nothing (see guard.c). */
void account_release_slot(struct guard_account *a);

/* In a forked child: the parent's slot is the parent's. */
static inline void account_forget_slot(struct guard_account *a) {
    a->slot = NULL;
}

/* The container's bytes in use on dev. */
static inline uint64_t account_used(const struct guard_account *a, int dev) {
    return atomic_load(&a->region->dev[dev].used);
}

#endif
