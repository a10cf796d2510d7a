/* plan.c: the targets and the plan of `gpuslice plan` (plan.h); the writers are in report.c. */
#include "consolidate/plan.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "consolidate/migplan.h"
#include "core/mig.h"
#include "core/plan.h"
#include "util/util.h"

#define GIB (1024ull * 1024 * 1024)

unsigned long long cs_gib_units(uint64_t bytes) { return (bytes + GIB - 1) / GIB; }

#define fail cs_errf

/* Whether every dash-separated word of name is a word of key (case-insensitive). */
static bool words_in(const char *name, const char *key) {
    const char *w = name;
    while (*w) {
        size_t wl = strcspn(w, "-");
        if (wl == 0)
            return false;
        bool found = false;
        for (const char *k = key; *k;) {
            size_t kl = strcspn(k, "-");
            if (kl == wl && strncasecmp(k, w, wl) == 0)
                found = true;
            k += kl;
            if (*k == '-')
                k++;
        }
        if (!found)
            return false;
        w += wl;
        if (*w == '-')
            w++;
    }
    return true;
}

const struct gs_model *cs_resolve_gpu(const char *name, char *err, size_t errlen) {
    if (!name || !*name || strlen(name) > 64) {
        fail(err, errlen, "--gpu: a GPU model is needed; the catalogue has %s", gs_catalog_keys());
        return NULL;
    }
    const struct gs_model *m = gs_catalog_find(name);
    if (m)
        return m;
    const struct gs_model *match[16], *sxm = NULL;
    size_t n = 0, nsxm = 0;
    for (size_t i = 0; i < gs_catalog_count() && n < GS_ARRAY_SIZE(match); i++) {
        const struct gs_model *c = gs_catalog_get(i);
        if (!words_in(name, c->key))
            continue;
        match[n++] = c;
        if (strstr(c->key, "-SXM")) {
            sxm = c;
            nsxm++;
        }
    }
    if (n == 1)
        return match[0];
    if (n > 1 && nsxm == 1)
        return sxm;
    if (n == 0) {
        fail(err, errlen, "--gpu: '%s' is not in the catalogue; it has %s", name, gs_catalog_keys());
        return NULL;
    }
    char list[512] = "";
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "%s%s", i ? ", " : "", match[i]->key);
    }
    fail(err, errlen, "--gpu: '%s' names several GPU models: %s", name, list);
    return NULL;
}

const char *cs_mode_name(enum cs_mode m) { return m == CS_MODE_MIG ? "mig" : m == CS_MODE_AUTO ? "auto" : "shared"; }

void cs_plan_free(struct cs_plan *p) {
    if (!p)
        return;
    free(p->profile);
    free(p->start);
    free(p->quota);
    free(p->gpu_of);
    free(p->g);
    free(p->sum);
    free(p->units);
    free(p->compute);
    free(p->capped);
    memset(p, 0, sizeof *p);
}

/* Packs in the targets' mode: out->gpu_of, gpus, the stats; profiles for MIG and auto. */
static int plan_modes(struct cs_plan *out, const struct cs_problem *pb, const struct cs_pack_opts *o, char *err,
                      size_t errlen) {
    const struct cs_series *in = out->in;
    const struct gs_model *m = out->t.model;
    size_t n = in->n;
    out->shared_gpus = out->mig_gpus = -1;
    out->profile = malloc((n ? n : 1) * sizeof *out->profile);
    out->start = calloc(n ? n : 1, sizeof *out->start);
    if (!out->profile || !out->start)
        return -ENOMEM;
    bool all_mig = m->mig_mem_slices > 0;
    for (size_t p = 0; p < n; p++) {
        out->profile[p] = out->t.mode == CS_MODE_SHARED || !m->mig_mem_slices
                              ? -1
                              : cs_mig_profile_for(m, out->quota[p], in->duty + p * in->steps, in->steps,
                                                   out->budget_units, out->tolerated);
        if (out->profile[p] < 0)
            all_mig = false;
        if (out->t.mode == CS_MODE_MIG && out->profile[p] < 0)
            return m->mig_mem_slices
                       ? fail(err, errlen,
                              "pod %s: no MIG profile of %s holds its quota of %.1f GiB and its duty (peak %.2f %%) "
                              "within the budget",
                              in->keys[p], m->key, (double)out->quota[p] / GIB, in->duty_peak[p] / 100.0)
                       : fail(err, errlen, "--mode mig: %s has no MIG", m->key);
    }
    out->mig_slices = cs_mig_slices(m);
    _cleanup_free_ uint32_t *mig_of = NULL;
    if (all_mig) {
        mig_of = malloc((n ? n : 1) * sizeof *mig_of);
        if (!mig_of)
            return -ENOMEM;
        out->mig_gpus = cs_mig_pack(m, out->profile, n, mig_of);
        if (out->mig_gpus < 0)
            return (int)out->mig_gpus;
    }
    if (out->t.mode != CS_MODE_MIG) {
        size_t bad = 0;
        long g = cs_pack(pb, o, out->gpu_of, &out->stats, &bad);
        if (g < 0)
            return g == -EINVAL ? fail(err, errlen, "pod %s fits no GPU", in->keys[bad]) : (int)g;
        out->shared_gpus = g;
    }
    if (out->t.mode == CS_MODE_MIG || (out->t.mode == CS_MODE_AUTO && all_mig && out->mig_gpus < out->shared_gpus)) {
        memcpy(out->gpu_of, mig_of, n * sizeof *mig_of);
        out->gpus = (size_t)out->mig_gpus;
        out->mig_plan = true;
        if (out->t.mode == CS_MODE_MIG)
            out->stats.ffd_gpus = out->gpus;
    } else {
        out->gpus = (size_t)out->shared_gpus;
    }
    out->ffd_gpus = out->stats.ffd_gpus;
    return 0;
}

/* Which GPUs run in MIG mode, with each pod's instance: all of them in the all-MIG plan; in auto
 * mode those whose pods all have profiles that form a layout. */
static int mark_mig(struct cs_plan *out, bool from_mig) {
    const struct gs_model *m = out->t.model;
    if (out->t.mode == CS_MODE_SHARED || !m->mig_mem_slices)
        return 0;
    _cleanup_free_ struct gs_gpu *g = malloc(sizeof *g);
    _cleanup_free_ size_t *pods = malloc(out->in->n * sizeof *pods + 1);
    if (!g || !pods)
        return -ENOMEM;
    gs_mig_gpu_from_model(m, g);
    for (size_t gi = 0; gi < out->gpus; gi++) {
        int prof[CS_MAX_LAYOUT];
        unsigned starts[CS_MAX_LAYOUT], k = 0;
        bool ok = true;
        for (size_t p = 0; p < out->in->n && ok; p++) {
            if (out->gpu_of[p] != gi)
                continue;
            if (out->profile[p] < 0 || k == CS_MAX_LAYOUT) {
                ok = false;
                break;
            }
            pods[k] = p;
            prof[k++] = out->profile[p];
        }
        /* in auto mode a GPU of one pod stays shared: MIG would isolate it from nobody */
        ok = ok && k > 0 && (from_mig || k > 1) && cs_mig_fits(g, m, prof, k, starts);
        if (!ok && from_mig)
            return fail(NULL, 0, "internal error");
        if (!ok)
            continue;
        out->g[gi].mig = true;
        for (unsigned i = 0; i < k; i++)
            out->start[pods[i]] = starts[i];
    }
    return 0;
}

int cs_plan_make(const struct cs_series *in, const struct cs_targets *t, const struct cs_pack_opts *o,
                 struct cs_plan *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!t->model)
        return fail(err, errlen, "no GPU model");
    if (!(t->budget > 0 && t->budget <= 100))
        return fail(err, errlen, "--budget %g: a percent in (0, 100]", t->budget);
    if (!(t->tolerance >= 0 && t->tolerance < 1))
        return fail(err, errlen, "--tolerance %g: a fraction in [0, 1)", t->tolerance);
    if (!(t->tolerance_s >= 0 && t->tolerance_s <= 1e12))
        return fail(err, errlen, "--tolerance %gs: not a duration", t->tolerance_s);
    if (!(t->margin >= 0 && t->margin <= 10))
        return fail(err, errlen, "--margin %g: a fraction in [0, 10]", t->margin);
    out->in = in;
    out->t = *t;
    out->capacity = t->model->mem_mib * 1024ull * 1024ull;
    out->budget_units = (uint32_t)llround(t->budget * 100.0);
    /* the tolerance is a length of time: the window is steps x step_s seconds, and a GPU may be over
     * the budget on as many whole steps as fit in the tolerated seconds */
    double window_s = (double)in->steps * in->step_s;
    out->tolerated_s = t->tolerance_s > 0 ? t->tolerance_s : t->tolerance * window_s;
    double tol_steps = in->step_s > 0 ? floor(out->tolerated_s / in->step_s + 1e-9) : 0;
    out->tolerated = tol_steps >= (double)in->steps ? (uint32_t)in->steps : (uint32_t)tol_steps;
    size_t n = in->n;
    out->quota = calloc(n ? n : 1, sizeof *out->quota);
    out->gpu_of = calloc(n ? n : 1, sizeof *out->gpu_of);
    out->units = calloc(n ? n : 1, sizeof *out->units);
    out->compute = calloc(n ? n : 1, sizeof *out->compute);
    out->capped = calloc(n ? n : 1, sizeof *out->capped);
    if (!out->quota || !out->gpu_of || !out->units || !out->compute || !out->capped) {
        cs_plan_free(out);
        return -ENOMEM;
    }
    for (size_t p = 0; p < n; p++) {
        double q = ceil((double)in->mem_peak[p] * (1.0 + t->margin));
        uint64_t qb = q >= 1.8e19 ? UINT64_MAX : (uint64_t)q;
        if (qb < in->mem_peak[p])
            qb = in->mem_peak[p];
        if (t->round_gib && qb <= UINT64_MAX - GIB)
            qb = cs_gib_units(qb) * GIB;
        out->quota[p] = qb;
        unsigned long long u = cs_gib_units(qb);
        out->units[p] = u < 1 ? 1 : u > UINT32_MAX ? UINT32_MAX : (uint32_t)u;
    }
    /* the requests' memory units of one GPU: the device plugin advertises its GiB rounded to the
     * nearest (docs/fractional.md), the DRA driver its bytes, requests in whole GiB steps */
    out->units_capacity = t->requests == CS_REQ_DRA ? out->capacity / GS_FRAC_MEMORY_UNIT
                                                     : gs_frac_memory_units(out->capacity);
    /* every pod of a GPU asks at least 1 % of its compute */
    uint32_t max_pods = t->no_compute && t->requests == CS_REQ_FRACTIONAL ? 0 : (uint32_t)floor(t->budget + 1e-9);
    struct cs_problem pb = {
        .n = n,
        .steps = in->steps,
        .mem = out->quota,
        .duty = in->duty,
        .capacity = out->capacity,
        .budget = out->budget_units,
        .tolerated = out->tolerated,
        .units = out->units,
        .units_capacity = out->units_capacity,
        .max_pods = max_pods,
    };
    for (size_t p = 0; p < n; p++) {
        if (out->quota[p] > out->capacity) {
            int r = fail(err, errlen,
                         "pod %s: its memory quota %.1f GiB (peak %.1f GiB%s) is more than one %s's %.1f GiB",
                         in->keys[p], (double)out->quota[p] / GIB, (double)in->mem_peak[p] / GIB,
                         t->margin > 0 ? " plus the margin" : "", t->model->key, (double)out->capacity / GIB);
            cs_plan_free(out);
            return r;
        }
        if (t->mode != CS_MODE_MIG && out->units[p] > out->units_capacity) {
            int r = fail(err, errlen,
                         "pod %s: its memory request of %u GiB is more than the %llu GiB units one %s has for %s "
                         "requests",
                         in->keys[p], out->units[p], (unsigned long long)out->units_capacity, t->model->key,
                         t->requests == CS_REQ_DRA ? "DRA" : "fractional");
            cs_plan_free(out);
            return r;
        }
        if (!cs_pod_fits_alone(&pb, p)) {
            int r = fail(err, errlen, "pod %s: its duty is over the budget of %g %% on more steps than tolerated (%u)",
                         in->keys[p], t->budget, out->tolerated);
            cs_plan_free(out);
            return r;
        }
    }
    if (cs_bounds(&pb, &out->bounds) < 0) {
        cs_plan_free(out);
        return -ENOMEM;
    }
    int r = plan_modes(out, &pb, o, err, errlen);
    if (r < 0) {
        cs_plan_free(out);
        return r;
    }
    out->g = calloc(out->gpus ? out->gpus : 1, sizeof *out->g);
    out->sum = calloc((out->gpus ? out->gpus : 1) * (in->steps ? in->steps : 1), sizeof *out->sum);
    if (!out->g || !out->sum) {
        cs_plan_free(out);
        return -ENOMEM;
    }
    bool from_mig = out->mig_plan;
    r = mark_mig(out, from_mig);
    if (r < 0) {
        cs_plan_free(out);
        return r;
    }
    for (size_t p = 0; p < n; p++) {
        size_t gi = out->gpu_of[p];
        out->g[gi].mem += out->quota[p];
        out->g[gi].units += out->units[p];
        out->g[gi].npods++;
        uint32_t *s = out->sum + gi * in->steps;
        const uint16_t *d = in->duty + p * in->steps;
        for (size_t k = 0; k < in->steps; k++)
            s[k] += d[k];
    }
    for (size_t p = 0; p < n; p++) {
        size_t gi = out->gpu_of[p];
        if (!out->g[gi].mig)
            continue;
        const struct gs_profile_spec *ps = &t->model->profiles[out->profile[p]];
        const uint16_t *d = in->duty + p * in->steps;
        for (size_t k = 0; k < in->steps; k++)
            if ((uint64_t)d[k] * out->mig_slices > (uint64_t)out->budget_units * ps->slices)
                out->g[gi].slice_over++;
    }
    for (size_t gi = 0; gi < out->gpus; gi++) {
        const uint32_t *s = out->sum + gi * in->steps;
        for (size_t k = 0; k < in->steps; k++) {
            if (s[k] > out->budget_units)
                out->g[gi].over++;
            if (s[k] > out->g[gi].peak)
                out->g[gi].peak = s[k];
        }
        /* the packing's own promise, checked again on the result (a GPU of the all-MIG plan keeps
         * each pod within its instance instead) */
        if (out->g[gi].mem > out->capacity ||
            (!from_mig && (out->g[gi].over > out->tolerated || out->g[gi].units > out->units_capacity))) {
            r = fail(err, errlen, "internal error: GPU %zu breaks the targets", gi);
            cs_plan_free(out);
            return r;
        }
    }
    r = cs_plan_split_compute(out);
    if (r < 0)
        cs_plan_free(out);
    return r;
}
