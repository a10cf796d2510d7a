/* guard_core.h: inside the guard: its state, set once by its first call (guard_core.c: the driver
 * resolved, the limits read, the region mapped and a slot claimed), and the limits per device.
 * Read by every wrapper; written only by that initialisation. */
#ifndef GS_GUARD_CORE_H
#define GS_GUARD_CORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "guard_base.h"
#include "guard_limits.h"
#include "guard_region.h"

#define UNLIMITED_DEVICE (-1)

struct guard_core {
    _Atomic int state; /* enum guard_state */
    pthread_once_t once;
    _Atomic bool pacing; /* some device has a compute limit and the pacer can time kernels */
    struct gs_guard_limits limits;
    int dev_index[GS_GUARD_MAX_DEVICES]; /* CUDA ordinal -> index into limits.dev, or -1 */
};

extern GUARD_HIDDEN struct guard_core g_core;

/* The first call's initialisation (once per process); returns the state it left. */
int guard_init(void);

/* The guard's state; the first call initialises it. */
static inline int guard_state(void) {
    int s = atomic_load_explicit(&g_core.state, memory_order_acquire);
    if (__builtin_expect(s != G_UNINIT, 1))
        return s;
    return guard_init();
}

/* Device dev's memory limit in bytes (0: none). */
static inline uint64_t guard_device_limit(const struct guard_core *c, int dev) {
    int i = dev >= 0 && dev < GS_GUARD_MAX_DEVICES ? c->dev_index[dev] : UNLIMITED_DEVICE;
    return i < 0 ? 0 : c->limits.dev[i].vram;
}

/* Device dev's compute limit in % (0: none). */
static inline unsigned guard_device_compute(const struct guard_core *c, int dev) {
    int i = dev >= 0 && dev < GS_GUARD_MAX_DEVICES ? c->dev_index[dev] : UNLIMITED_DEVICE;
    return i < 0 ? 0 : c->limits.dev[i].compute_pct;
}

/* Whether launches are paced: the launch path's one relaxed load when no compute limit applies. */
static inline bool guard_pacing(const struct guard_core *c) {
    return atomic_load_explicit(&c->pacing, memory_order_relaxed);
}

#endif
