/* relay.h: a MIG layout around the instances pods hold. When the requested layout of a GPU would
 * destroy an instance the kubelet has assigned to a pod (holds.h), the GPU is re-laid instead of
 * refused: every held GPU instance stays as it is (its placement, its compute instances, its
 * UUID), and the rest of the GPU gets the requested profiles, in the layout's order, each where it
 * still fits among valid placements (what cannot fit is named). Pure: from the GPU's own profile
 * and placement table (struct gs_gpu, as NVML reported it). */
#ifndef GS_MIG_RELAY_H
#define GS_MIG_RELAY_H

#include <stdbool.h>

#include "core/inventory.h"
#include "core/mig.h"
#include "mig/holds.h"

struct gs_mig_relay {
    bool partial;              /* holds kept this GPU from the requested layout */
    unsigned n_kept;           /* held GPU instances kept (a held whole GPU counts 1) */
    unsigned n_missing;        /* requested instances not made */
    unsigned missing[GS_MIG_MAX_INSTANCES]; /* their profile IDs, in the layout's order */
    char kept[1024];           /* "MIG-x (GI 1, 3g.40gb at 0:4) for team-a/train-0, container main; ..." */
    char not_made[256];        /* "3 x 1g.10gb", "MIG mode disabled", "none" */
};

/* The plan for GPU g towards want that destroys nothing h holds. When gs_mig_diff's plan breaks
 * no hold, that plan (out->partial false). Otherwise (out->partial true):
 *  - MIG on and wanted on: the held GPU instances stay; each instance want asks for that a held
 *    one of the same profile does not already stand for is tried in want's order and kept in the
 *    layout when it fits beside the held ones and those before it (any valid placement of the
 *    whole, by gs_mig_solve); other instances are destroyed or kept as gs_mig_diff would;
 *  - a MIG mode change (off with held instances, on with the whole GPU held): nothing changes.
 * Returns 0, -E2BIG (more held instances than the shadow profile table can take), -ENOMEM, or
 * gs_mig_diff's error for want itself, with the reason in why. h may be NULL (nothing held). */
int gs_mig_relay_plan(const struct gs_gpu *g, const struct gs_mig_layout *want, const struct gs_mig_holds *h,
                      struct gs_mig_plan *plan, struct gs_mig_relay *out, char *why, size_t whylen);

#endif
