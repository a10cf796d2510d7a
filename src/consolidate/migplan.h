/* migplan.h: MIG layouts for `gpuslice plan`, pure: each pod's smallest profile, whether a GPU's
 * pods form a valid layout (src/core/mig.c's solver on the catalogue's profile table), and
 * first-fit decreasing of pods by profile. */
#ifndef GS_CONSOLIDATE_MIGPLAN_H
#define GS_CONSOLIDATE_MIGPLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "core/inventory.h"

/* The smallest GPU-instance profile of m (index in m->profiles; "+me" profiles left out) whose
 * memory holds quota bytes and whose share of the GPU's compute slices holds the pod's duty within
 * the budget on all but `tolerated` steps; -1 when none does. */
int cs_mig_profile_for(const struct gs_model *m, uint64_t quota, const uint16_t *duty, size_t steps, uint32_t budget,
                       uint32_t tolerated);

/* The largest compute-slice count of m's profiles (7 on 8-slice GPUs). */
unsigned cs_mig_slices(const struct gs_model *m);

/* Whether profiles prof[0..n) (indexes in m->profiles) fit one GPU (g: gs_mig_gpu_from_model of m);
 * starts[i] the memory slice each starts at. */
bool cs_mig_fits(const struct gs_gpu *g, const struct gs_model *m, const int *prof, unsigned n, unsigned *starts);

/* First-fit decreasing of n pods with profiles prof[] onto GPUs. Returns GPUs or -ENOMEM. */
long cs_mig_pack(const struct gs_model *m, const int *prof, size_t n, uint32_t *gpu_of);

#endif
