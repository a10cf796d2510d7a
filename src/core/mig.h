/* mig.h: MIG layout planning, pure: the placement solver, the built-in layouts and the diff from
 * the current MIG state of a GPU to a desired layout. Everything works from the GPU's own profile
 * table as NVML reported it (struct gs_gpu), never from the model catalogue. */
#ifndef GS_MIG_H
#define GS_MIG_H

#include <stdbool.h>
#include <stddef.h>

#include "core/inventory.h"

#define GS_MIG_MAX_INSTANCES 8

/* A desired layout for one GPU: MIG mode and a multiset of GPU-instance profiles. */
struct gs_mig_layout {
    bool mig_enabled;
    unsigned n;
    unsigned profile_ids[GS_MIG_MAX_INSTANCES];
};

struct gs_mig_placement {
    unsigned profile_id;
    unsigned start, size;
    int keep_gi;               /* GI ID of an existing instance kept in place, or -1 (new) */
};

struct gs_mig_solution {
    unsigned n;
    struct gs_mig_placement inst[GS_MIG_MAX_INSTANCES];
    unsigned kept;             /* how many existing instances stay */
};

/* Finds start slots for every profile of `want` that satisfy the GPU's placement table, instance
 * caps and memory slices, keeping as many of the GPU's existing GPU instances (same profile, same
 * placement) as possible. Exhaustive (the space is small). Returns 0, -ENOSPC with the reason in
 * why ("A100-SXM4-40GB: 4g.20gb + 3g.20gb + 1g.5gb needs 9 memory slices, the GPU has 8"), or
 * -EINVAL for a profile the GPU does not have. */
int gs_mig_solve(const struct gs_gpu *g, const struct gs_mig_layout *want, struct gs_mig_solution *out, char *why,
                 size_t whylen);

/* Built-in layouts by name, derived from the GPU's profile table: all-disabled, all-enabled,
 * all-<profile> (as many as fit), all-balanced (2 x 1g + 1 x 2g + 1 x 3g; A30: 2 x 1g + 1 x 2g).
 * Returns 0, -ENOENT for an unknown name, -EINVAL when the name needs MIG profiles the GPU lacks. */
int gs_mig_builtin(const struct gs_gpu *g, const char *name, struct gs_mig_layout *out, char *why, size_t whylen);
bool gs_mig_builtin_name(const char *name);

/* Resolves profile names ("1g.10gb") of this GPU into a layout. */
int gs_mig_layout_from_names(const struct gs_gpu *g, bool enabled, const char *const *names, const unsigned *counts,
                             size_t n, struct gs_mig_layout *out, char *why, size_t whylen);

enum gs_mig_step_kind {
    GS_STEP_DESTROY_CI,
    GS_STEP_DESTROY_GI,
    GS_STEP_SET_MODE,
    GS_STEP_CREATE_GI,
    GS_STEP_CREATE_CI,
};

struct gs_mig_step {
    enum gs_mig_step_kind kind;
    unsigned gpu;
    unsigned gi_id, ci_id;     /* destroy steps; CREATE_CI on a kept GI */
    unsigned profile_id;       /* CREATE_GI */
    unsigned start, size;      /* CREATE_GI placement */
    int new_gi;                /* CREATE_CI after CREATE_GI: index of that step's instance, else -1 */
    bool enable;               /* SET_MODE */
    char profile[GS_PROFILE_NAME_LEN];
};

#define GS_MIG_MAX_STEPS 64

struct gs_mig_plan {
    unsigned gpu;
    unsigned n_steps;
    struct gs_mig_step steps[GS_MIG_MAX_STEPS];
    bool needs_mode_change;    /* SET_MODE planned: instances are planned after it takes effect */
    bool reset_pending;        /* MIG mode is pending (Ampere): a GPU reset is needed first */
    unsigned kept;             /* instances kept with their UUIDs */
    unsigned n_busy;           /* processes on instances the plan destroys */
    unsigned busy_pids[16];
};

/* The minimal steps from the GPU's current state to `want`: destroy only what does not fit the
 * layout (compute instances before their GPU instance), keep matching instances (same profile and
 * placement), then create. When the MIG mode must change, the plan is that change (plus clearing
 * instances when disabling); instances are planned on the next round, once NVML can list the
 * profiles. Returns 0 or the solver's error. */
int gs_mig_diff(const struct gs_gpu *g, const struct gs_mig_layout *want, struct gs_mig_plan *out, char *why,
                size_t whylen);

/* True if the GPU already is exactly `want` (mode, and the multiset of full-size MIG devices). */
bool gs_mig_matches(const struct gs_gpu *g, const struct gs_mig_layout *want);

const char *gs_mig_step_name(enum gs_mig_step_kind k);

struct gs_model;
/* A GPU in MIG mode with the catalogue's profile table for model m (name = the catalogue key).
 * For checking layouts where NVML cannot list profiles yet (MIG off), tests and benchmarks. */
void gs_mig_gpu_from_model(const struct gs_model *m, struct gs_gpu *out);

#endif
