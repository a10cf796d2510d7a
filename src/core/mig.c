/* mig.c: MIG placement solver, built-in layouts and layout diff (pure; see mig.h). */
#include "core/mig.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/catalog.h"
#include "util/util.h"

const char *gs_mig_step_name(enum gs_mig_step_kind k) {
    switch (k) {
    case GS_STEP_DESTROY_CI: return "destroy-ci";
    case GS_STEP_DESTROY_GI: return "destroy-gi";
    case GS_STEP_SET_MODE: return "set-mig-mode";
    case GS_STEP_CREATE_GI: return "create-gi";
    case GS_STEP_CREATE_CI: return "create-ci";
    }
    return "?";
}

/* ---- solver --------------------------------------------------------------------------------- */

struct search {
    const struct gs_gpu *g;
    unsigned n;
    const struct gs_gi_profile *prof[GS_MIG_MAX_INSTANCES]; /* sorted: larger first */
    unsigned start[GS_MIG_MAX_INSTANCES];
    int keep[GS_MIG_MAX_INSTANCES];
    bool claimed[GS_MAX_GIS];       /* existing GIs already kept by an earlier instance */
    unsigned best_kept, max_keepable;
    bool found;
    struct gs_mig_solution best;
    unsigned long nodes;
};

static unsigned mask_of(unsigned start, unsigned size) { return ((1u << size) - 1) << start; }

/* Depth-first over the instances; identical profiles take ascending starts (no permutations). */
static void dfs(struct search *s, unsigned i, unsigned used, unsigned kept) {
    s->nodes++;
    if (s->found && s->best_kept == s->max_keepable)
        return; /* cannot do better */
    if (i == s->n) {
        if (!s->found || kept > s->best_kept) {
            s->found = true;
            s->best_kept = kept;
            s->best.n = s->n;
            s->best.kept = kept;
            for (unsigned k = 0; k < s->n; k++)
                s->best.inst[k] = (struct gs_mig_placement){ s->prof[k]->id, s->start[k], s->prof[k]->placement_size,
                                                             s->keep[k] };
        }
        return;
    }
    if (kept + (s->n - i) <= s->best_kept && s->found)
        return; /* even keeping all the rest would not beat the best */
    const struct gs_gi_profile *p = s->prof[i];
    bool same_as_prev = i > 0 && s->prof[i - 1] == p;
    /* Try the starts where an existing instance of this profile sits first (to keep it). */
    for (int pass = 0; pass < 2; pass++) {
        for (unsigned k = 0; k < p->n_starts; k++) {
            unsigned st = p->starts[k];
            if (same_as_prev && st <= s->start[i - 1])
                continue;
            unsigned m = mask_of(st, p->placement_size);
            if (used & m)
                continue;
            int existing = -1;
            for (unsigned e = 0; e < s->g->n_gis; e++) {
                const struct gs_gpu_instance *gi = &s->g->gis[e];
                if (!s->claimed[e] && gi->profile_id == p->id && gi->start == st)
                    existing = (int)e;
            }
            if ((pass == 0) != (existing >= 0))
                continue;
            s->start[i] = st;
            s->keep[i] = existing >= 0 ? (int)s->g->gis[existing].id : -1;
            if (existing >= 0)
                s->claimed[existing] = true;
            dfs(s, i + 1, used | m, kept + (existing >= 0));
            if (existing >= 0)
                s->claimed[existing] = false;
        }
    }
}

static int cmp_profile_desc(const void *a, const void *b) {
    const struct gs_gi_profile *x = *(const struct gs_gi_profile *const *)a, *y = *(const struct gs_gi_profile *const *)b;
    if (x->placement_size != y->placement_size)
        return x->placement_size > y->placement_size ? -1 : 1;
    if (x->slices != y->slices)
        return x->slices > y->slices ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* "4g.20gb + 3g.20gb + 2 x 1g.5gb" */
static void describe(const struct search *s, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = '\0';
    for (unsigned i = 0; i < s->n && n < len;) {
        unsigned k = i;
        while (k < s->n && s->prof[k] == s->prof[i])
            k++;
        int w = k - i > 1 ? snprintf(buf + n, len - n, "%s%u x %s", n ? " + " : "", k - i, s->prof[i]->name)
                          : snprintf(buf + n, len - n, "%s%s", n ? " + " : "", s->prof[i]->name);
        if (w < 0)
            break;
        n += (size_t)w;
        i = k;
    }
}

int gs_mig_solve(const struct gs_gpu *g, const struct gs_mig_layout *want, struct gs_mig_solution *out, char *why,
                 size_t whylen) {
    struct search *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->g = g;
    s->n = want->n;
    int r = 0;
    if (want->n > GS_MIG_MAX_INSTANCES) {
        snprintf(why, whylen, "%s: %u instances requested, at most %d", g->name, want->n, GS_MIG_MAX_INSTANCES);
        r = -ENOSPC;
        goto out;
    }
    for (unsigned i = 0; i < want->n; i++) {
        s->prof[i] = gs_gpu_profile_by_id(g, want->profile_ids[i]);
        if (!s->prof[i] || !s->prof[i]->n_starts) {
            snprintf(why, whylen, "%s has no MIG profile with ID %u", g->name, want->profile_ids[i]);
            r = -EINVAL;
            goto out;
        }
    }
    qsort(s->prof, s->n, sizeof(s->prof[0]), cmp_profile_desc);
    char list[256];
    describe(s, list, sizeof(list));
    unsigned mem = 0, compute = 0, max_compute = 0;
    for (unsigned i = 0; i < g->n_profiles; i++)
        if (g->profiles[i].slices > max_compute)
            max_compute = g->profiles[i].slices;
    for (unsigned i = 0; i < s->n; i++) {
        mem += s->prof[i]->placement_size;
        compute += s->prof[i]->slices;
        unsigned same = 0;
        for (unsigned k = 0; k < s->n; k++)
            same += s->prof[k] == s->prof[i];
        if (same > s->prof[i]->max_instances) {
            snprintf(why, whylen, "%s: %s asks for %u x %s, the GPU allows at most %u", g->name, list, same,
                     s->prof[i]->name, s->prof[i]->max_instances);
            r = -ENOSPC;
            goto out;
        }
    }
    if (mem > g->mig_mem_slices) {
        snprintf(why, whylen, "%s: %s needs %u memory slices, the GPU has %u", g->name, list, mem, g->mig_mem_slices);
        r = -ENOSPC;
        goto out;
    }
    if (compute > max_compute) {
        snprintf(why, whylen, "%s: %s needs %u compute slices, the GPU has %u", g->name, list, compute, max_compute);
        r = -ENOSPC;
        goto out;
    }
    for (unsigned i = 0; i < s->n; i++)
        s->keep[i] = -1;
    /* Upper bound of instances that could be kept: existing GIs whose profile is wanted. */
    bool used[GS_MAX_GIS] = { false };
    for (unsigned i = 0; i < s->n; i++)
        for (unsigned e = 0; e < g->n_gis; e++)
            if (!used[e] && g->gis[e].profile_id == s->prof[i]->id) {
                used[e] = true;
                s->max_keepable++;
                break;
            }
    dfs(s, 0, 0, 0);
    if (!s->found) {
        size_t n = (size_t)snprintf(why, whylen, "%s: no placement of %s fits the GPU's placement table (", g->name,
                                    list);
        for (unsigned i = 0; i < s->n && n < whylen; i++) {
            if (i && s->prof[i] == s->prof[i - 1])
                continue;
            n += (size_t)snprintf(why + n, whylen - n, "%s%s starts at", i ? "; " : "", s->prof[i]->name);
            for (unsigned k = 0; k < s->prof[i]->n_starts && n < whylen; k++)
                n += (size_t)snprintf(why + n, whylen - n, "%s%u", k ? "," : " ", s->prof[i]->starts[k]);
        }
        if (n < whylen)
            snprintf(why + n, whylen - n, ")");
        r = -ENOSPC;
        goto out;
    }
    *out = s->best;
out:
    free(s);
    return r;
}

/* ---- built-in layouts ----------------------------------------------------------------------- */

bool gs_mig_builtin_name(const char *name) {
    if (!strcmp(name, "all-disabled") || !strcmp(name, "all-enabled") || !strcmp(name, "all-balanced"))
        return true;
    /* all-<profile>: only what reads as a profile ("1g.10gb", "1c.2g.20gb", "1g.10gb+me"), so
     * that a misspelt "all-balancd" is an unknown config, not a profile the GPU lacks. */
    const char *p = name + 4;
    return !strncmp(name, "all-", 4) && isdigit((unsigned char)p[0]) && strstr(p, "g.") && strstr(p, "gb");
}

/* The plain profile of `slices` compute slices (NVML index 0/1/2/3/4: no media extensions, not
 * the double-memory 1-slice variant). */
static const struct gs_gi_profile *plain_profile(const struct gs_gpu *g, unsigned slices) {
    for (unsigned i = 0; i < g->n_profiles; i++)
        if (g->profiles[i].slices == slices && g->profiles[i].nvml_index <= 4)
            return &g->profiles[i];
    return NULL;
}

int gs_mig_builtin(const struct gs_gpu *g, const char *name, struct gs_mig_layout *out, char *why, size_t whylen) {
    memset(out, 0, sizeof(*out));
    if (!strcmp(name, "all-disabled"))
        return 0;
    out->mig_enabled = true;
    if (!strcmp(name, "all-enabled"))
        return 0;
    if (!strncmp(name, "all-", 4) && !g->n_profiles) {
        snprintf(why, whylen, "GPU %u (%s): MIG profiles can only be read while MIG mode is enabled", g->index, g->name);
        return -EINVAL;
    }
    if (!strcmp(name, "all-balanced")) {
        const struct gs_gi_profile *p1 = plain_profile(g, 1), *p2 = plain_profile(g, 2), *p3 = plain_profile(g, 3);
        if (!p1 || !p2) {
            snprintf(why, whylen, "GPU %u (%s): no 1g and 2g profiles for all-balanced", g->index, g->name);
            return -EINVAL;
        }
        out->profile_ids[out->n++] = p1->id;
        out->profile_ids[out->n++] = p1->id;
        out->profile_ids[out->n++] = p2->id;
        if (p3)
            out->profile_ids[out->n++] = p3->id;
        return 0;
    }
    if (!strncmp(name, "all-", 4)) {
        const struct gs_gi_profile *p = gs_gpu_profile_by_name(g, name + 4);
        if (!p) {
            snprintf(why, whylen, "GPU %u (%s) has no MIG profile %s", g->index, g->name, name + 4);
            return -EINVAL;
        }
        /* As many as fit: from the cap down until the solver places them. */
        for (unsigned n = p->max_instances < GS_MIG_MAX_INSTANCES ? p->max_instances : GS_MIG_MAX_INSTANCES; n > 0; n--) {
            struct gs_mig_layout l = { true, n, { 0 } };
            for (unsigned i = 0; i < n; i++)
                l.profile_ids[i] = p->id;
            struct gs_mig_solution sol;
            char tmp[256];
            struct gs_gpu empty = *g;
            empty.n_gis = 0;
            if (gs_mig_solve(&empty, &l, &sol, tmp, sizeof(tmp)) == 0) {
                *out = l;
                return 0;
            }
        }
        snprintf(why, whylen, "GPU %u (%s): no instance of %s fits", g->index, g->name, p->name);
        return -EINVAL;
    }
    return -ENOENT;
}

int gs_mig_layout_from_names(const struct gs_gpu *g, bool enabled, const char *const *names, const unsigned *counts,
                             size_t n, struct gs_mig_layout *out, char *why, size_t whylen) {
    memset(out, 0, sizeof(*out));
    out->mig_enabled = enabled;
    for (size_t i = 0; i < n; i++) {
        const struct gs_gi_profile *p = gs_gpu_profile_by_name(g, names[i]);
        if (!p) {
            size_t k = (size_t)snprintf(why, whylen, "GPU %u (%s) has no MIG profile %s; it has", g->index, g->name,
                                        names[i]);
            for (unsigned j = 0; j < g->n_profiles && k < whylen; j++)
                k += (size_t)snprintf(why + k, whylen - k, "%s %s", j ? "," : "", g->profiles[j].name);
            return -EINVAL;
        }
        for (unsigned c = 0; c < counts[i]; c++) {
            if (out->n == GS_MIG_MAX_INSTANCES) {
                snprintf(why, whylen, "GPU %u (%s): more than %d MIG instances requested", g->index, g->name,
                         GS_MIG_MAX_INSTANCES);
                return -ENOSPC;
            }
            out->profile_ids[out->n++] = p->id;
        }
    }
    return 0;
}

/* ---- diff ----------------------------------------------------------------------------------- */

static bool gi_has_full_ci(const struct gs_gpu *g, unsigned gi_id, unsigned *n_ci) {
    unsigned count = 0;
    bool full = false;
    for (unsigned k = 0; k < g->n_mig; k++) {
        if (g->mig[k].gi_id != gi_id)
            continue;
        count++;
        full = g->mig[k].ci_slices == g->mig[k].gi_slices;
    }
    *n_ci = count;
    return count == 1 && full;
}

bool gs_mig_matches(const struct gs_gpu *g, const struct gs_mig_layout *want) {
    if (!g->mig_capable)
        return !want->mig_enabled;
    if ((g->mig_current != 0) != want->mig_enabled || g->mig_pending != g->mig_current)
        return false;
    if (!want->mig_enabled)
        return true;
    if (g->n_gis != want->n)
        return false;
    unsigned wanted[GS_MIG_MAX_INSTANCES];
    memcpy(wanted, want->profile_ids, sizeof(wanted));
    for (unsigned e = 0; e < g->n_gis; e++) {
        unsigned n_ci;
        if (!gi_has_full_ci(g, g->gis[e].id, &n_ci))
            return false;
        bool found = false;
        for (unsigned i = 0; i < want->n && !found; i++) {
            if (wanted[i] == g->gis[e].profile_id) {
                wanted[i] = ~0u;
                found = true;
            }
        }
        if (!found)
            return false;
    }
    return true;
}

static struct gs_mig_step *add_step(struct gs_mig_plan *p, enum gs_mig_step_kind kind) {
    if (p->n_steps == GS_MIG_MAX_STEPS)
        return NULL;
    struct gs_mig_step *s = &p->steps[p->n_steps++];
    memset(s, 0, sizeof(*s));
    s->kind = kind;
    s->gpu = p->gpu;
    s->new_gi = -1;
    return s;
}

static void note_busy(struct gs_mig_plan *p, const struct gs_gpu *g, unsigned gi_id) {
    for (unsigned k = 0; k < g->n_procs; k++)
        if (g->procs[k].gi_id == (int)gi_id && p->n_busy < GS_ARRAY_SIZE(p->busy_pids))
            p->busy_pids[p->n_busy++] = g->procs[k].pid;
}

static const char *profile_name(const struct gs_gpu *g, unsigned id) {
    const struct gs_gi_profile *p = gs_gpu_profile_by_id(g, id);
    return p ? p->name : "?";
}

/* Destroys a GI and its compute instances (steps only). */
static int plan_destroy_gi(struct gs_mig_plan *p, const struct gs_gpu *g, const struct gs_gpu_instance *gi) {
    for (unsigned k = 0; k < g->n_mig; k++) {
        if (g->mig[k].gi_id != gi->id)
            continue;
        struct gs_mig_step *s = add_step(p, GS_STEP_DESTROY_CI);
        if (!s)
            return -E2BIG;
        s->gi_id = gi->id;
        s->ci_id = g->mig[k].ci_id;
        gs_strlcpy(s->profile, profile_name(g, gi->profile_id), sizeof(s->profile));
    }
    struct gs_mig_step *s = add_step(p, GS_STEP_DESTROY_GI);
    if (!s)
        return -E2BIG;
    s->gi_id = gi->id;
    s->profile_id = gi->profile_id;
    s->start = gi->start;
    s->size = gi->size;
    gs_strlcpy(s->profile, profile_name(g, gi->profile_id), sizeof(s->profile));
    note_busy(p, g, gi->id);
    return 0;
}

int gs_mig_diff(const struct gs_gpu *g, const struct gs_mig_layout *want, struct gs_mig_plan *out, char *why,
                size_t whylen) {
    memset(out, 0, sizeof(*out));
    out->gpu = g->index;
    if (!g->mig_capable) {
        if (!want->mig_enabled)
            return 0;
        snprintf(why, whylen, "GPU %u (%s) does not support MIG", g->index, g->name);
        return -EOPNOTSUPP;
    }
    int r;
    if (!want->mig_enabled) {
        if (g->mig_current)
            for (unsigned e = 0; e < g->n_gis; e++)
                if ((r = plan_destroy_gi(out, g, &g->gis[e])) < 0)
                    return r;
        if (g->mig_pending) {
            struct gs_mig_step *s = add_step(out, GS_STEP_SET_MODE);
            s->enable = false;
            out->needs_mode_change = true;
            for (unsigned k = 0; k < g->n_procs && out->n_busy < GS_ARRAY_SIZE(out->busy_pids); k++)
                if (g->procs[k].gi_id < 0) /* processes on instances were noted with their instance */
                    out->busy_pids[out->n_busy++] = g->procs[k].pid;
        } else if (g->mig_current) {
            out->reset_pending = true; /* disabling is pending: a reset activates it */
        }
        return 0;
    }
    if (!g->mig_current) {
        if (g->mig_pending) {
            out->reset_pending = true;
        } else {
            struct gs_mig_step *s = add_step(out, GS_STEP_SET_MODE);
            s->enable = true;
            out->needs_mode_change = true;
            /* The driver refuses to switch a GPU that processes use: say so before changing anything. */
            for (unsigned k = 0; k < g->n_procs && out->n_busy < GS_ARRAY_SIZE(out->busy_pids); k++)
                out->busy_pids[out->n_busy++] = g->procs[k].pid;
        }
        return 0;
    }
    if (!g->mig_pending) { /* enabled, with a disable pending: cancel it */
        struct gs_mig_step *s = add_step(out, GS_STEP_SET_MODE);
        s->enable = true;
    }
    struct gs_mig_solution sol;
    if ((r = gs_mig_solve(g, want, &sol, why, whylen)) < 0)
        return r;
    out->kept = sol.kept;
    /* 1. GPU instances that do not stay. */
    for (unsigned e = 0; e < g->n_gis; e++) {
        bool kept = false;
        for (unsigned i = 0; i < sol.n; i++)
            kept |= sol.inst[i].keep_gi == (int)g->gis[e].id;
        if (!kept && (r = plan_destroy_gi(out, g, &g->gis[e])) < 0)
            return r;
    }
    /* 2. Kept instances whose compute instances are not exactly one full-size CI. */
    for (unsigned i = 0; i < sol.n; i++) {
        if (sol.inst[i].keep_gi < 0)
            continue;
        unsigned gi_id = (unsigned)sol.inst[i].keep_gi, n_ci;
        if (gi_has_full_ci(g, gi_id, &n_ci))
            continue;
        for (unsigned k = 0; k < g->n_mig; k++) {
            if (g->mig[k].gi_id != gi_id)
                continue;
            struct gs_mig_step *s = add_step(out, GS_STEP_DESTROY_CI);
            if (!s)
                return -E2BIG;
            s->gi_id = gi_id;
            s->ci_id = g->mig[k].ci_id;
            gs_strlcpy(s->profile, profile_name(g, sol.inst[i].profile_id), sizeof(s->profile));
            note_busy(out, g, gi_id);
        }
        struct gs_mig_step *s = add_step(out, GS_STEP_CREATE_CI);
        if (!s)
            return -E2BIG;
        s->gi_id = gi_id;
        gs_strlcpy(s->profile, profile_name(g, sol.inst[i].profile_id), sizeof(s->profile));
    }
    /* 3. New instances, each with its full compute instance. */
    for (unsigned i = 0; i < sol.n; i++) {
        if (sol.inst[i].keep_gi >= 0)
            continue;
        struct gs_mig_step *s = add_step(out, GS_STEP_CREATE_GI);
        if (!s)
            return -E2BIG;
        s->profile_id = sol.inst[i].profile_id;
        s->start = sol.inst[i].start;
        s->size = sol.inst[i].size;
        gs_strlcpy(s->profile, profile_name(g, s->profile_id), sizeof(s->profile));
        int gi_step = (int)(out->n_steps - 1);
        s = add_step(out, GS_STEP_CREATE_CI);
        if (!s)
            return -E2BIG;
        s->new_gi = gi_step;
        gs_strlcpy(s->profile, profile_name(g, sol.inst[i].profile_id), sizeof(s->profile));
    }
    return 0;
}

void gs_mig_gpu_from_model(const struct gs_model *m, struct gs_gpu *g) {
    memset(g, 0, sizeof(*g));
    gs_strlcpy(g->name, m->key, sizeof(g->name));
    g->mig_capable = true;
    g->mig_current = g->mig_pending = 1;
    g->mig_mem_slices = m->mig_mem_slices;
    g->mem_total = m->mem_mib << 20;
    for (size_t i = 0; i < m->n_profiles && g->n_profiles < GS_MAX_PROFILES; i++) {
        const struct gs_profile_spec *p = &m->profiles[i];
        struct gs_gi_profile *q = &g->profiles[g->n_profiles++];
        *q = (struct gs_gi_profile){ .id = p->id, .nvml_index = p->nvml_profile, .slices = p->slices,
                                     .max_instances = p->max_instances, .mem_mib = p->mem_mib,
                                     .placement_size = p->mem_slices, .n_starts = p->n_starts };
        gs_strlcpy(q->name, p->name, sizeof(q->name));
        memcpy(q->starts, p->starts, sizeof(q->starts));
    }
}
