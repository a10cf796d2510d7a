/* migdemand.h: MIG instances made when a claim naming a MIG placement is prepared, destroyed at
 * unprepare (used by server.c). The GI and CI are made through the GPU seam's functions the MIG
 * manager uses (gpu_gi_create, gpu_ci_create_full, gpu_ci_destroy, gpu_gi_destroy), on an NVML
 * handle of the DRA thread's own. Each step is recorded (record(), which saves the checkpoint)
 * before and after, and every call starts from what NVML lists, so a prepare retried after a crash
 * between two steps finds the half-made instance and finishes it, and an unprepare destroys it.
 * An instance the claim did not make (there before: a layout's, or one a device-plugin pod holds)
 * is used as it is and never destroyed.
 *
 * Test hook: GPUSLICE_DRA_FAULT_EXIT_AFTER_STEPS=N exits the process after N steps (records and
 * NVML calls both count), as GPUSLICE_FAULT_EXIT_AFTER_STEPS does for the MIG manager. */
#ifndef GS_DRA_MIGDEMAND_H
#define GS_DRA_MIGDEMAND_H

#include <limits.h>
#include <stddef.h>

#include "core/inventory.h"
#include "dra/prepare.h"

/* ---- pure steps ------------------------------------------------------------------------------ */

/* A placement first seen by a claim (rec->on false): 1 with *existing set when a full MIG device of
 * that profile is there already (used, not the claim's); 0 with rec set (on, gi = ci = -1) when
 * the placement is free; -ENODEV (not in MIG mode), -EINVAL (no such profile or start on this
 * GPU), -EBUSY (another instance covers part of it); why in err. */
int dra_mig_first(const struct gs_gpu *g, unsigned profile_id, unsigned start, struct dra_mig_made *rec,
                  const struct gs_mig_device **existing, char *err, size_t errlen);

enum dra_mig_next { DRA_MIG_MAKE_GI, DRA_MIG_MAKE_CI, DRA_MIG_READY, DRA_MIG_GONE };

/* What the claim's instance (rec->on) needs next, from the GPU as NVML lists it: its GI (rec->gi,
 * or while rec->gi is -1 the GI of the profile at the start, made before the crash that lost its
 * record) adopted into rec; READY with rec->ci and rec->uuid set when its full CI exists. For
 * unprepare, GONE means there is nothing of it left (MAKE_GI otherwise). */
enum dra_mig_next dra_mig_next(const struct gs_gpu *g, struct dra_mig_made *rec);

/* ---- on the node ----------------------------------------------------------------------------- */

struct dra_mig {
    char lib[PATH_MAX];       /* the NVML library ("": MIG on demand is not available) */
    char proc_root[PATH_MAX]; /* devices and driver/nvidia-caps/mig-minors */
    struct gpu_node *node;    /* opened at the first MIG claim */
    unsigned long steps;      /* for the test hook */
};

typedef int (*dra_mig_record_fn)(void *ctx, char *err, size_t errlen);

/* Makes (or finds) the claim's instance on the placement ref names; on success rec->uuid and
 * rec->gi/ci name it (rec->on false: an instance the claim did not make), and the MIG device's
 * nodes (the GPU's and its two capabilities) are added to e. */
int dra_mig_prepare(struct dra_mig *m, unsigned gpu, unsigned profile_id, unsigned start, struct dra_mig_made *rec,
                    dra_mig_record_fn record, void *ctx, struct dra_edits *e, char *err, size_t errlen);

/* Destroys the claim's instance (rec->on), recording each step; -EBUSY while a process runs on it. */
int dra_mig_release(struct dra_mig *m, struct dra_mig_made *rec, dra_mig_record_fn record, void *ctx, char *err,
                    size_t errlen);

void dra_mig_close(struct dra_mig *m);

#endif
