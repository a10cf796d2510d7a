/* relay.c: a MIG layout around the instances pods hold (pure; see relay.h). */
#include "mig/relay.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* Profile IDs of the shadow table's pinned copies: far above NVML's (0..~20). */
#define PIN_BASE 0x10000u

/* The GPU instances of g that a hold names a MIG device of (indices into g->gis, marked in
 * held_gi); *whole when the whole GPU is held. Returns how many GIs. */
static unsigned held_gis(const struct gs_gpu *g, const struct gs_mig_holds *h, bool held_gi[GS_MAX_GIS], bool *whole) {
    unsigned n = 0;
    memset(held_gi, 0, sizeof(bool) * GS_MAX_GIS);
    *whole = false;
    for (size_t i = 0; h && i < h->n; i++) {
        const char *uuid = h->items[i].uuid;
        if (!strcmp(uuid, g->uuid))
            *whole = true;
        for (unsigned k = 0; k < g->n_mig; k++) {
            if (strcmp(uuid, g->mig[k].uuid))
                continue;
            for (unsigned e = 0; e < g->n_gis; e++)
                if (g->gis[e].id == g->mig[k].gi_id && !held_gi[e]) {
                    held_gi[e] = true;
                    n++;
                }
        }
    }
    return n;
}

/* out->kept: every hold on what stays, as gs_mig_plan_held words a hold ("MIG-x (GI 1, 3g.40gb)
 * to ns/pod, container c; ..."), from a plan that would take all of it. */
static void describe_kept(const struct gs_gpu *g, const bool *held_gi, bool whole, const struct gs_mig_holds *h,
                          struct gs_mig_relay *out) {
    struct gs_mig_plan *all = calloc(1, sizeof(*all));
    if (!all) {
        snprintf(out->kept, sizeof(out->kept), "(out of memory)");
        return;
    }
    all->gpu = g->index;
    for (unsigned e = 0; e < g->n_gis && all->n_steps < GS_MIG_MAX_STEPS; e++)
        if (held_gi[e])
            all->steps[all->n_steps++] = (struct gs_mig_step){ .kind = GS_STEP_DESTROY_GI, .gi_id = g->gis[e].id };
    if (whole && !g->mig_current && all->n_steps < GS_MIG_MAX_STEPS)
        all->steps[all->n_steps++] = (struct gs_mig_step){ .kind = GS_STEP_SET_MODE, .enable = true };
    gs_mig_plan_held(g, all, h, out->kept, sizeof(out->kept));
    free(all);
}

/* out->not_made: "3 x 1g.10gb + 2g.20gb" (counted per profile, in the order of first mention). */
static void describe_missing(const struct gs_gpu *g, struct gs_mig_relay *out) {
    size_t n = 0, len = sizeof(out->not_made);
    bool done[GS_MIG_MAX_INSTANCES] = { false };
    out->not_made[0] = '\0';
    for (unsigned i = 0; i < out->n_missing && n < len; i++) {
        if (done[i])
            continue;
        unsigned count = 0;
        for (unsigned k = i; k < out->n_missing; k++)
            if (out->missing[k] == out->missing[i]) {
                done[k] = true;
                count++;
            }
        const struct gs_gi_profile *p = gs_gpu_profile_by_id(g, out->missing[i]);
        const char *name = p ? p->name : "?";
        int w = count > 1 ? snprintf(out->not_made + n, len - n, "%s%u x %s", n ? " + " : "", count, name)
                          : snprintf(out->not_made + n, len - n, "%s%s", n ? " + " : "", name);
        n += w < 0 ? 0 : (size_t)w;
    }
    if (!out->n_missing)
        snprintf(out->not_made, len, "none");
}

/* g with each held GPU instance pinned: its profile replaced by a copy of its own whose only start
 * is where it sits (ID PIN_BASE + k, at most one instance), so that any solution of a layout
 * naming the copies keeps it where it is; its compute instances shown as one full-size instance,
 * so that the diff leaves them as they are. The copies' IDs go to pins[k], in g->gis order. */
static int pin_held(const struct gs_gpu *g, const bool *held_gi, struct gs_gpu *s, unsigned *pins, unsigned *n_pins,
                    char *why, size_t whylen) {
    *s = *g;
    *n_pins = 0;
    s->n_mig = 0;
    for (unsigned e = 0; e < g->n_gis; e++) {
        if (!held_gi[e])
            continue;
        const struct gs_gi_profile *p = gs_gpu_profile_by_id(g, g->gis[e].profile_id);
        if (!p || s->n_profiles == GS_MAX_PROFILES) {
            snprintf(why, whylen, "GPU %u (%s): cannot lay out around GI %u (%s)", g->index, g->name, g->gis[e].id,
                     p ? "too many profiles" : "unknown profile");
            return p ? -E2BIG : -EINVAL;
        }
        struct gs_gi_profile *q = &s->profiles[s->n_profiles++];
        *q = *p;
        q->id = PIN_BASE + *n_pins;
        q->max_instances = 1;
        q->n_starts = 1;
        q->starts[0] = g->gis[e].start;
        s->gis[e].profile_id = q->id;
        pins[(*n_pins)++] = q->id;
    }
    for (unsigned k = 0; k < g->n_mig; k++) {
        const struct gs_mig_device *m = &g->mig[k];
        bool held = false, shown = false;
        for (unsigned e = 0; e < g->n_gis; e++)
            held |= held_gi[e] && g->gis[e].id == m->gi_id;
        for (unsigned j = 0; j < s->n_mig; j++)
            shown |= s->mig[j].gi_id == m->gi_id;
        if (held && shown)
            continue;
        s->mig[s->n_mig] = *m;
        if (held)
            s->mig[s->n_mig].ci_slices = m->gi_slices;
        s->n_mig++;
    }
    return 0;
}

/* How many instances of real profile id the layout l on the pinned GPU s has (pins count as their
 * original's profile, orig[k]). */
static unsigned count_of(const struct gs_mig_layout *l, unsigned id, const unsigned *orig) {
    unsigned n = 0;
    for (unsigned i = 0; i < l->n; i++)
        n += (l->profile_ids[i] >= PIN_BASE ? orig[l->profile_ids[i] - PIN_BASE] : l->profile_ids[i]) == id;
    return n;
}

/* Keeps the held GPU instances and lays out what want asks for around them (see relay.h). */
static int relay_around(const struct gs_gpu *g, const struct gs_mig_layout *want, const bool *held_gi,
                        struct gs_mig_plan *plan, struct gs_mig_relay *out, char *why, size_t whylen) {
    struct gs_gpu *s = malloc(sizeof(*s));
    if (!s)
        return -ENOMEM;
    unsigned pins[GS_MAX_GIS], orig[GS_MAX_GIS], n_pins = 0;
    int r = pin_held(g, held_gi, s, pins, &n_pins, why, whylen);
    if (r < 0)
        goto out;
    struct gs_mig_layout l = { true, 0, { 0 } };
    bool covered[GS_MIG_MAX_INSTANCES] = { false }; /* want's instances a held one stands for */
    for (unsigned e = 0, k = 0; e < g->n_gis; e++) {
        if (!held_gi[e])
            continue;
        orig[k] = g->gis[e].profile_id;
        if (l.n < GS_MIG_MAX_INSTANCES)
            l.profile_ids[l.n++] = pins[k];
        for (unsigned i = 0; i < want->n; i++)
            if (!covered[i] && want->profile_ids[i] == orig[k]) {
                covered[i] = true;
                break;
            }
        k++;
    }
    char tmp[512];
    struct gs_mig_solution sol;
    for (unsigned i = 0; i < want->n; i++) {
        if (covered[i])
            continue;
        unsigned id = want->profile_ids[i];
        const struct gs_gi_profile *p = gs_gpu_profile_by_id(g, id);
        struct gs_mig_layout t = l;
        bool fits = p && t.n < GS_MIG_MAX_INSTANCES && count_of(&t, id, orig) < p->max_instances;
        if (fits) {
            t.profile_ids[t.n++] = id;
            fits = gs_mig_solve(s, &t, &sol, tmp, sizeof(tmp)) == 0;
        }
        if (fits)
            l = t;
        else
            out->missing[out->n_missing++] = id;
    }
    r = gs_mig_diff(s, &l, plan, why, whylen);
out:
    free(s);
    return r;
}

int gs_mig_relay_plan(const struct gs_gpu *g, const struct gs_mig_layout *want, const struct gs_mig_holds *h,
                      struct gs_mig_plan *plan, struct gs_mig_relay *out, char *why, size_t whylen) {
    memset(out, 0, sizeof(*out));
    int r = gs_mig_diff(g, want, plan, why, whylen);
    if (r < 0 || !gs_mig_plan_held(g, plan, h, NULL, 0))
        return r;
    bool held_gi[GS_MAX_GIS], whole;
    out->partial = true;
    out->n_kept = held_gis(g, h, held_gi, &whole);
    describe_kept(g, held_gi, whole, h, out);
    if (!want->mig_enabled || !g->mig_current) {
        /* MIG off with instances held, or on with the whole GPU held: the mode stays. */
        out->n_kept += whole && !g->mig_current;
        memset(plan, 0, sizeof(*plan));
        plan->gpu = g->index;
        snprintf(out->not_made, sizeof(out->not_made), "MIG mode %s", want->mig_enabled ? "enabled" : "disabled");
        return 0;
    }
    if ((r = relay_around(g, want, held_gi, plan, out, why, whylen)) < 0)
        return r;
    describe_missing(g, out);
    if (gs_mig_plan_held(g, plan, h, NULL, 0)) { /* cannot happen: every held instance is pinned */
        snprintf(why, whylen, "GPU %u (%s): the layout around the held instances would still destroy one", g->index,
                 g->name);
        return -EBUSY;
    }
    return 0;
}
