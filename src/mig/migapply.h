/* migapply.h: applies MIG layouts to a node through the GPU seam (NVML), using the pure planner
 * in core/mig.h. Idempotent and crash-safe: every pass re-reads the GPUs and plans from what is
 * there, so running it again after a crash between any two steps converges to the layout. */
#ifndef GS_MIGAPPLY_H
#define GS_MIGAPPLY_H

#include <stdbool.h>

#include "config/miglayout.h"
#include "core/mig.h"
#include "gpu/gpu.h"
#include "mig/holds.h"
#include "mig/relay.h"

/* The layout for each GPU from a named config: the file's config of that name if it has one, else
 * the built-in of that name. GPUs no item selects are left alone (selected[i] false). A GPU whose
 * MIG mode is off gets mig_enabled with no instances yet (profiles are readable only in MIG mode;
 * the next pass resolves them). Errors name the file, line and profile. */
int gs_mig_resolve(const struct gs_inventory *inv, const struct gs_layout_file *file, const char *config,
                   struct gs_mig_layout layouts[GS_MAX_GPUS], bool selected[GS_MAX_GPUS], char *err, size_t errlen);

/* Plans every selected GPU (no change is made). plans[i].n_steps == 0 for GPUs already right. */
int gs_mig_plan_node(const struct gs_inventory *inv, const struct gs_layout_file *file, const char *config,
                     struct gs_mig_plan plans[GS_MAX_GPUS], bool selected[GS_MAX_GPUS], char *err, size_t errlen);

/* The same around what pods hold (holds, NULL for nothing): a GPU whose plan would destroy a held
 * instance is planned by gs_mig_relay_plan, and relays[i] (GS_MAX_GPUS of them) says what is kept
 * and what is not made; no plan destroys a held instance. */
int gs_mig_plan_node_keep_held(const struct gs_inventory *inv, const struct gs_layout_file *file, const char *config,
                               const struct gs_mig_holds *holds, struct gs_mig_plan plans[GS_MAX_GPUS],
                               bool selected[GS_MAX_GPUS], struct gs_mig_relay *relays, char *err, size_t errlen);

struct gs_mig_apply_result {
    unsigned steps_done;       /* NVML create/destroy/mode calls made */
    unsigned creates, destroys, mode_changes;
    unsigned kept;             /* instances that stayed with their UUIDs */
    unsigned passes;
    unsigned n_reset;          /* GPUs left as they were: their MIG mode waits for a GPU reset */
    unsigned reset_gpus[GS_MAX_GPUS];
    unsigned n_partial;        /* GPUs laid out around held instances (gs_mig_apply_node_keep_held) */
};

/* Applies config to the node: plans every selected GPU first (an unsolvable layout, or a process
 * on an instance to destroy or a device a pod holds (holds, NULL for none) stops everything
 * before any change, unless force for the latter two), then executes, in passes until nothing is
 * left to do (a MIG mode change makes a second pass). A GPU whose MIG mode waits for a GPU reset
 * (Ampere) is left out and the others are applied; then it returns -EAGAIN naming every GPU that
 * needs a reset (also in res->reset_gpus). */
int gs_mig_apply_node_held(struct gpu_node *node, const struct gs_layout_file *file, const char *config,
                           const struct gs_mig_holds *holds, bool force, struct gs_mig_apply_result *res, char *err,
                           size_t errlen);

/* The same, but a GPU whose layout would destroy what a pod holds is laid out around it instead of
 * stopping the apply (unless force, which destroys it as above): every pass plans such a GPU with
 * gs_mig_relay_plan from what is there, so a crash between two steps converges as well, and no
 * step destroys a held instance. relays[i] (GS_MAX_GPUS of them) says, for the last pass, what
 * was kept and what could not be made; res->n_partial counts those GPUs. */
int gs_mig_apply_node_keep_held(struct gpu_node *node, const struct gs_layout_file *file, const char *config,
                                const struct gs_mig_holds *holds, bool force, struct gs_mig_apply_result *res,
                                struct gs_mig_relay relays[GS_MAX_GPUS], char *err, size_t errlen);

/* The same with no device held by a pod. */
int gs_mig_apply_node(struct gpu_node *node, const struct gs_layout_file *file, const char *config, bool force,
                      struct gs_mig_apply_result *res, char *err, size_t errlen);

/* The same with layouts given by profile ID (GPUs already in MIG mode, or mode changes only). */
int gs_mig_apply_layouts(struct gpu_node *node, const struct gs_mig_layout layouts[GS_MAX_GPUS],
                         const bool selected[GS_MAX_GPUS], bool force, struct gs_mig_apply_result *res, char *err,
                         size_t errlen);

#endif
