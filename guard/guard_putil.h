/* guard_putil.h: inside the guard: charging the GPU time a process received, from NVML's
 * per-process utilization (guard_putil.c), for the pacer (guard_pace.c), which calls it under its
 * lock. */
#ifndef GS_GUARD_PUTIL_H
#define GS_GUARD_PUTIL_H

#include <stdbool.h>
#include <stdint.h>

#include "guard_driver.h"
#include "guard_region.h"

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} guard_nvmlProcessUtilizationSample_t;
typedef int (*nvml_putil_fn)(nvmlDevice_t, guard_nvmlProcessUtilizationSample_t *, unsigned *, unsigned long long);

#define PUTIL_SAMPLES 512

struct util_track {
    nvmlDevice_t h;
    bool tried, off;
    unsigned misses;
    uint32_t scale;                    /* 0: not measured yet (1) */
    uint64_t next_ns;                  /* the next read */
    uint64_t span_ns;                  /* spans harvested since the last update */
    unsigned long long last_seen;      /* NVML timestamp of the newest sample used */
    unsigned long long period;         /* the sampling period (NVML's time unit), 0 unknown */
    unsigned long long own_sum;        /* smUtil x period of own samples since the last update */
    unsigned long long own_first;      /* the timestamps they cover, from the update before */
};

struct guard_putil {
    struct util_track dev[GS_GUARD_MAX_DEVICES];
    nvml_putil_fn get;
    guard_nvmlProcessUtilizationSample_t buf[PUTIL_SAMPLES];
};

/* Reads this process's new samples on dev and updates the scale of its spans (putil_update). */
void putil_read(struct guard_putil *u, int dev, uint64_t now);

/* putil_read, at most every UTIL_INTERVAL_NS and not once NVML could not say: inline, as every
 * paced launch calls it. */
static inline void putil_update(struct guard_putil *u, int dev, uint64_t now) {
    const struct util_track *t = &u->dev[dev];
    if (!t->off && now >= t->next_ns)
        putil_read(u, dev, now);
}

/* The scale of spans is in 1/UTIL_SCALE_ONE. */
#define UTIL_SCALE_ONE 65536u

/* A span of `span` ns measured on dev: counted towards the next update; returns the GPU time to
 * charge for it (the span scaled by the share its kernels ran). Inline: once per timed launch. */
static inline uint64_t putil_charge(struct guard_putil *p, int dev, uint64_t span) {
    struct util_track *u = &p->dev[dev];
    uint32_t scale = u->scale ? u->scale : UTIL_SCALE_ONE;
    u->span_ns += span;
    return span / UTIL_SCALE_ONE * scale + span % UTIL_SCALE_ONE * scale / UTIL_SCALE_ONE;
}

#endif
