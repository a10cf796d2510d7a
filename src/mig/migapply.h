/* migapply.h: applies MIG layouts to a node through the GPU seam (NVML), using the pure planner
 * in core/mig.h. Idempotent and crash-safe: every pass re-reads the GPUs and plans from what is
 * there, so running it again after a crash between any two steps converges to the layout. */
#ifndef GS_MIGAPPLY_H
#define GS_MIGAPPLY_H

#include <stdbool.h>

#include "config/miglayout.h"
#include "core/mig.h"
#include "gpu/gpu.h"

/* The layout for each GPU from a named config: the file's config of that name if it has one, else
 * the built-in of that name. GPUs no item selects are left alone (selected[i] false). A GPU whose
 * MIG mode is off gets mig_enabled with no instances yet (profiles are readable only in MIG mode;
 * the next pass resolves them). Errors name the file, line and profile. */
int gs_mig_resolve(const struct gs_inventory *inv, const struct gs_layout_file *file, const char *config,
                   struct gs_mig_layout layouts[GS_MAX_GPUS], bool selected[GS_MAX_GPUS], char *err, size_t errlen);

/* Plans every selected GPU (no change is made). plans[i].n_steps == 0 for GPUs already right. */
int gs_mig_plan_node(const struct gs_inventory *inv, const struct gs_layout_file *file, const char *config,
                     struct gs_mig_plan plans[GS_MAX_GPUS], bool selected[GS_MAX_GPUS], char *err, size_t errlen);

struct gs_mig_apply_result {
    unsigned steps_done;       /* NVML create/destroy/mode calls made */
    unsigned creates, destroys, mode_changes;
    unsigned kept;             /* instances that stayed with their UUIDs */
    unsigned passes;
};

/* Applies config to the node: plans every selected GPU first (an unsolvable layout or a process
 * on an instance to destroy stops everything before any change, unless force for the latter),
 * then executes, in passes until nothing is left to do (a MIG mode change makes a second pass).
 * Stops with -EAGAIN when a mode change waits for a GPU reset (Ampere), saying so. */
int gs_mig_apply_node(struct gpu_node *node, const struct gs_layout_file *file, const char *config, bool force,
                      struct gs_mig_apply_result *res, char *err, size_t errlen);

/* The same with layouts given by profile ID (GPUs already in MIG mode, or mode changes only). */
int gs_mig_apply_layouts(struct gpu_node *node, const struct gs_mig_layout layouts[GS_MAX_GPUS],
                         const bool selected[GS_MAX_GPUS], bool force, struct gs_mig_apply_result *res, char *err,
                         size_t errlen);

#endif
