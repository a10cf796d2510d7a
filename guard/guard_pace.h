/* guard_pace.h: inside the guard: compute shares, the pacer of kernel launches (guard_pace.c),
 * for the launch wrappers (guard_launch.c) and the fork handler (guard.c). */
#ifndef GS_GUARD_PACE_H
#define GS_GUARD_PACE_H

#include <stdbool.h>

#include "cuda_api.h"
#include "guard_base.h"

/* The timed launches in flight, the lock over them and the utilization scale. */
struct guard_pacer;
extern GUARD_HIDDEN struct guard_pacer g_pacer;

/* One paced launch: pace_begin waits for budget and records the start event under the pacer's
 * lock; pace_end records the end event, keeps the pair for the harvest and lets the lock go. */
struct pace {
    CUevent start, end;
    int dev;
};

/* False (nothing held) when the launch's device has no compute limit or events cannot be used. */
bool pace_begin(struct guard_pacer *pc, struct pace *p, cuEventRecord_fn record, CUstream s);

/* After the launch (result r, returned): see pace_begin. */
CUresult pace_end(struct guard_pacer *pc, struct pace *p, cuEventRecord_fn record, CUstream s, CUresult r);

/* In a forked child: the parent's timed launches are the parent's (and so is the lock). */
void pace_after_fork(struct guard_pacer *pc);

#endif
