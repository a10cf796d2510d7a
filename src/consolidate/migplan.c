/* migplan.c: MIG layouts of `gpuslice plan` (migplan.h). */
#include "consolidate/migplan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/mig.h"
#include "util/util.h"

unsigned cs_mig_slices(const struct gs_model *m) {
    unsigned mx = 0;
    for (size_t i = 0; i < m->n_profiles; i++)
        if (m->profiles[i].slices > mx)
            mx = m->profiles[i].slices;
    return mx;
}

int cs_mig_profile_for(const struct gs_model *m, uint64_t quota, const uint16_t *duty, size_t steps, uint32_t budget,
                       uint32_t tolerated) {
    unsigned full = cs_mig_slices(m);
    int best = -1;
    for (size_t i = 0; i < m->n_profiles && full; i++) {
        const struct gs_profile_spec *p = &m->profiles[i];
        if (strchr(p->name, '+') || p->mem_mib * 1048576ull < quota)
            continue;
        if (best >= 0) {
            const struct gs_profile_spec *b = &m->profiles[best];
            if (p->slices > b->slices || (p->slices == b->slices && p->mem_mib >= b->mem_mib))
                continue;
        }
        size_t over = 0;
        for (size_t t = 0; t < steps && over <= tolerated; t++)
            over += (uint64_t)duty[t] * full > (uint64_t)budget * p->slices;
        if (over <= tolerated)
            best = (int)i;
    }
    return best;
}

bool cs_mig_fits(const struct gs_gpu *g, const struct gs_model *m, const int *prof, unsigned n, unsigned *starts) {
    if (n > GS_MIG_MAX_INSTANCES)
        return false;
    struct gs_mig_layout want = { .mig_enabled = true, .n = n };
    for (unsigned i = 0; i < n; i++)
        want.profile_ids[i] = m->profiles[prof[i]].id;
    struct gs_mig_solution sol;
    char why[256];
    if (gs_mig_solve(g, &want, &sol, why, sizeof why) != 0)
        return false;
    /* the solution's instances in the order asked: match them by profile */
    bool used[GS_MIG_MAX_INSTANCES] = { false };
    for (unsigned i = 0; i < n; i++)
        for (unsigned k = 0; k < sol.n; k++)
            if (!used[k] && sol.inst[k].profile_id == want.profile_ids[i]) {
                used[k] = true;
                starts[i] = sol.inst[k].start;
                break;
            }
    return true;
}

static const struct gs_model *cmp_model;
static const int *cmp_prof;
static int cmp_desc(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    const struct gs_profile_spec *px = &cmp_model->profiles[cmp_prof[x]], *py = &cmp_model->profiles[cmp_prof[y]];
    if (px->mem_slices != py->mem_slices)
        return px->mem_slices < py->mem_slices ? 1 : -1;
    if (px->slices != py->slices)
        return px->slices < py->slices ? 1 : -1;
    return (x > y) - (x < y);
}

long cs_mig_pack(const struct gs_model *m, const int *prof, size_t n, uint32_t *gpu_of) {
    _cleanup_free_ struct gs_gpu *g = malloc(sizeof *g);
    _cleanup_free_ uint32_t *idx = malloc((n ? n : 1) * sizeof *idx);
    _cleanup_free_ int *lay = malloc((n ? n : 1) * GS_MIG_MAX_INSTANCES * sizeof *lay);
    _cleanup_free_ unsigned *cnt = calloc(n ? n : 1, sizeof *cnt);
    if (!g || !idx || !lay || !cnt)
        return -ENOMEM;
    gs_mig_gpu_from_model(m, g);
    for (size_t i = 0; i < n; i++)
        idx[i] = (uint32_t)i;
    cmp_model = m;
    cmp_prof = prof;
    qsort(idx, n, sizeof *idx, cmp_desc);
    cmp_model = NULL;
    cmp_prof = NULL;
    size_t ng = 0;
    unsigned starts[GS_MIG_MAX_INSTANCES];
    for (size_t k = 0; k < n; k++) {
        size_t p = idx[k], gi = 0;
        for (; gi < ng; gi++) {
            int *l = lay + gi * GS_MIG_MAX_INSTANCES;
            if (cnt[gi] >= GS_MIG_MAX_INSTANCES)
                continue;
            l[cnt[gi]] = prof[p];
            if (cs_mig_fits(g, m, l, cnt[gi] + 1, starts))
                break;
        }
        if (gi == ng)
            ng++;
        lay[gi * GS_MIG_MAX_INSTANCES + cnt[gi]++] = prof[p];
        gpu_of[p] = (uint32_t)gi;
    }
    return (long)ng;
}
