/* test_mig.c: the MIG placement solver and layout diff (pure code), for every MIG model of the
 * catalogue: every multiset of up to 7 instances is placed exactly when a brute-force search over
 * all start slots says it fits, every placement returned is valid, refusals say why, and the solver
 * keeps as many existing instances as brute force can. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "catalog/catalog.h"
#include "core/mig.h"

/* A GPU as NVML would report it in MIG mode, from the catalogue (the test's fixture). */
static void gpu_from_model(const struct gs_model *m, struct gs_gpu *g) { gs_mig_gpu_from_model(m, g); }

/* Brute force: try every start for every instance, in the given order, no symmetry breaking;
 * returns whether a valid assignment exists (caps checked separately). */
static bool brute(const struct gs_gpu *g, const struct gs_gi_profile **p, unsigned n, unsigned i, unsigned used) {
    if (i == n)
        return true;
    for (unsigned k = 0; k < p[i]->n_starts; k++) {
        unsigned m = ((1u << p[i]->placement_size) - 1) << p[i]->starts[k];
        if (!(used & m) && brute(g, p, n, i + 1, used | m))
            return true;
    }
    return false;
}

static bool caps_ok(const struct gs_gpu *g, const struct gs_mig_layout *l) {
    for (unsigned i = 0; i < g->n_profiles; i++) {
        unsigned c = 0;
        for (unsigned k = 0; k < l->n; k++)
            c += l->profile_ids[k] == g->profiles[i].id;
        if (c > g->profiles[i].max_instances)
            return false;
    }
    return true;
}

static void check_solution(const struct gs_gpu *g, const struct gs_mig_layout *l, const struct gs_mig_solution *s) {
    assert_int_equal(s->n, l->n);
    unsigned used = 0, want[32] = { 0 }, got[32] = { 0 };
    for (unsigned k = 0; k < l->n; k++)
        want[l->profile_ids[k] % 32]++;
    for (unsigned k = 0; k < s->n; k++) {
        const struct gs_gi_profile *p = gs_gpu_profile_by_id(g, s->inst[k].profile_id);
        assert_non_null(p);
        bool valid_start = false;
        for (unsigned j = 0; j < p->n_starts; j++)
            valid_start |= p->starts[j] == s->inst[k].start;
        assert_true(valid_start);
        assert_int_equal(s->inst[k].size, p->placement_size);
        unsigned m = ((1u << p->placement_size) - 1) << s->inst[k].start;
        assert_int_equal(used & m, 0);
        used |= m;
        got[p->id % 32]++;
    }
    assert_memory_equal(want, got, sizeof(want));
}

/* Every multiset of up to 7 profiles (with repetition) of every model. */
static unsigned cases, fits_seen, refusals_seen;

static void enumerate(const struct gs_gpu *g, struct gs_mig_layout *l, unsigned from) {
    if (l->n > 0) {
        const struct gs_gi_profile *p[GS_MIG_MAX_INSTANCES];
        for (unsigned k = 0; k < l->n; k++)
            p[k] = gs_gpu_profile_by_id(g, l->profile_ids[k]);
        bool expect = caps_ok(g, l) && brute(g, p, l->n, 0, 0);
        struct gs_mig_solution s;
        char why[512] = "";
        int r = gs_mig_solve(g, l, &s, why, sizeof(why));
        if (expect) {
            if (r != 0)
                fail_msg("%s: solver refused a layout that fits: %s", g->name, why);
            check_solution(g, l, &s);
            fits_seen++;
        } else {
            assert_int_equal(r, -ENOSPC);
            assert_true(strncmp(why, g->name, strlen(g->name)) == 0);
            assert_true(strstr(why, "memory slices") || strstr(why, "compute slices") || strstr(why, "at most") ||
                        strstr(why, "no placement"));
            refusals_seen++;
        }
        cases++;
    }
    if (l->n == 7)
        return;
    for (unsigned i = from; i < g->n_profiles; i++) {
        l->profile_ids[l->n++] = g->profiles[i].id;
        enumerate(g, l, i);
        l->n--;
    }
}

static void test_solver_matches_brute_force(void **state) {
    (void)state;
    struct gs_gpu *g = calloc(1, sizeof(*g));
    unsigned models = 0;
    for (size_t i = 0; i < gs_catalog_count(); i++) {
        const struct gs_model *m = gs_catalog_get(i);
        if (!m->mig_mem_slices)
            continue;
        gpu_from_model(m, g);
        struct gs_mig_layout l = { true, 0, { 0 } };
        enumerate(g, &l, 0);
        models++;
    }
    assert_int_equal(models, 7);
    print_message("%u fit, %u refused\n", fits_seen, refusals_seen);
    assert_true(fits_seen > 500 && refusals_seen > 500);
    print_message("%u layouts checked against brute force: %u fit, %u refused\n", cases, fits_seen, refusals_seen);
    free(g);
}

static void test_refusal_reasons(void **state) {
    (void)state;
    struct gs_gpu *g = calloc(1, sizeof(*g));
    gpu_from_model(gs_catalog_find("A100-SXM4-40GB"), g);
    struct gs_mig_layout l = { true, 3, { 5, 9, 19 } }; /* 4g.20gb + 3g.20gb + 1g.5gb */
    struct gs_mig_solution s;
    char why[512];
    assert_int_equal(gs_mig_solve(g, &l, &s, why, sizeof(why)), -ENOSPC);
    assert_string_equal(why, "A100-SXM4-40GB: 4g.20gb + 3g.20gb + 1g.5gb needs 9 memory slices, the GPU has 8");
    struct gs_mig_layout two_4g = { true, 2, { 5, 5 } };
    assert_int_equal(gs_mig_solve(g, &two_4g, &s, why, sizeof(why)), -ENOSPC);
    assert_string_equal(why, "A100-SXM4-40GB: 2 x 4g.20gb asks for 2 x 4g.20gb, the GPU allows at most 1");
    /* Memory fits (4 + 2 + 2 slices) but compute does not (4 + 2 + 2 of 7). */
    struct gs_mig_layout odd = { true, 3, { 5, 14, 14 } };
    assert_int_equal(gs_mig_solve(g, &odd, &s, why, sizeof(why)), -ENOSPC);
    assert_string_equal(why, "A100-SXM4-40GB: 4g.20gb + 2 x 2g.10gb needs 8 compute slices, the GPU has 7");
    /* A placement table the caps and slice counts cannot explain (a GPU whose 2g may only start at
     * 0): two 2g do not fit although 4 of 8 slices would. */
    g->profiles[1].n_starts = 1;
    struct gs_mig_layout two_2g = { true, 2, { 14, 14 } };
    assert_int_equal(gs_mig_solve(g, &two_2g, &s, why, sizeof(why)), -ENOSPC);
    assert_string_equal(why, "A100-SXM4-40GB: no placement of 2 x 2g.10gb fits the GPU's placement table "
                             "(2g.10gb starts at 0)");
    struct gs_mig_layout unknown = { true, 1, { 77 } };
    assert_int_equal(gs_mig_solve(g, &unknown, &s, why, sizeof(why)), -EINVAL);
    free(g);
}

/* With instances present, the solver keeps as many as any valid placement could. */
static unsigned brute_keep(const struct gs_gpu *g, const struct gs_gi_profile **p, unsigned n, unsigned i,
                           unsigned used, bool *claimed) {
    if (i == n)
        return 0;
    unsigned best = 0;
    bool any = false;
    for (unsigned k = 0; k < p[i]->n_starts; k++) {
        unsigned st = p[i]->starts[k], m = ((1u << p[i]->placement_size) - 1) << st;
        if (used & m)
            continue;
        int e = -1;
        for (unsigned x = 0; x < g->n_gis; x++)
            if (!claimed[x] && g->gis[x].profile_id == p[i]->id && g->gis[x].start == st)
                e = (int)x;
        if (e >= 0)
            claimed[e] = true;
        if (brute(g, p, n, i + 1, used | m)) {
            unsigned v = (e >= 0) + brute_keep(g, p, n, i + 1, used | m, claimed);
            if (!any || v > best)
                best = v;
            any = true;
        }
        if (e >= 0)
            claimed[e] = false;
    }
    return best;
}

static void test_keeps_maximum(void **state) {
    (void)state;
    struct gs_gpu *g = calloc(1, sizeof(*g));
    unsigned seed = 12345, checked = 0;
    for (size_t mi = 0; mi < gs_catalog_count(); mi++) {
        const struct gs_model *m = gs_catalog_get(mi);
        if (!m->mig_mem_slices)
            continue;
        gpu_from_model(m, g);
        for (int round = 0; round < 300; round++) {
            /* existing: a random valid layout, placed by the solver on an empty GPU */
            struct gs_mig_layout cur = { true, 0, { 0 } }, next = { true, 0, { 0 } };
            for (unsigned k = 0, n = 1 + (seed = seed * 1103515245u + 12345u) % 5; k < n; k++) {
                cur.profile_ids[cur.n++] = g->profiles[(seed = seed * 1103515245u + 12345u) % g->n_profiles].id;
                next.profile_ids[next.n++] = g->profiles[(seed = seed * 1103515245u + 12345u) % g->n_profiles].id;
            }
            if (seed % 2)
                next.profile_ids[0] = cur.profile_ids[0]; /* often share a profile */
            struct gs_mig_solution s;
            char why[512];
            g->n_gis = 0;
            if (gs_mig_solve(g, &cur, &s, why, sizeof(why)) < 0)
                continue;
            for (unsigned k = 0; k < s.n; k++)
                g->gis[g->n_gis++] = (struct gs_gpu_instance){ k + 1, s.inst[k].profile_id, s.inst[k].start,
                                                               s.inst[k].size, 1 };
            if (gs_mig_solve(g, &next, &s, why, sizeof(why)) < 0)
                continue;
            check_solution(g, &next, &s);
            const struct gs_gi_profile *p[GS_MIG_MAX_INSTANCES];
            for (unsigned k = 0; k < next.n; k++)
                p[k] = gs_gpu_profile_by_id(g, next.profile_ids[k]);
            bool claimed[GS_MAX_GIS] = { false };
            unsigned best = 0;
            /* brute force over every order of the instances (keep depends on which one claims) */
            unsigned idx[GS_MIG_MAX_INSTANCES];
            for (unsigned k = 0; k < next.n; k++)
                idx[k] = k;
            for (unsigned perm = 0; perm < 24; perm++) {
                const struct gs_gi_profile *q[GS_MIG_MAX_INSTANCES];
                for (unsigned k = 0; k < next.n; k++)
                    q[k] = p[idx[k]];
                unsigned v = brute_keep(g, q, next.n, 0, 0, claimed);
                if (v > best)
                    best = v;
                if (next.n > 1) { /* rotate */
                    unsigned t = idx[0];
                    memmove(idx, idx + 1, (next.n - 1) * sizeof(unsigned));
                    idx[next.n - 1] = t;
                }
            }
            assert_int_equal(s.kept, best);
            unsigned kept = 0;
            for (unsigned k = 0; k < s.n; k++)
                kept += s.inst[k].keep_gi >= 0;
            assert_int_equal(kept, s.kept);
            checked++;
        }
    }
    assert_true(checked > 200);
    free(g);
}

static void test_builtins_and_diff(void **state) {
    (void)state;
    struct gs_gpu *g = calloc(1, sizeof(*g));
    gpu_from_model(gs_catalog_find("H100-SXM5-80GB"), g);
    struct gs_mig_layout l;
    char why[256];
    assert_int_equal(gs_mig_builtin(g, "all-balanced", &l, why, sizeof(why)), 0);
    assert_int_equal(l.n, 4);
    assert_int_equal(gs_mig_builtin(g, "all-1g.10gb", &l, why, sizeof(why)), 0);
    assert_int_equal(l.n, 7);
    assert_int_equal(gs_mig_builtin(g, "all-1g.20gb", &l, why, sizeof(why)), 0);
    assert_int_equal(l.n, 4);
    assert_int_equal(gs_mig_builtin(g, "all-3g.40gb", &l, why, sizeof(why)), 0);
    assert_int_equal(l.n, 2);
    assert_int_equal(gs_mig_builtin(g, "all-1g.10gb+me", &l, why, sizeof(why)), 0);
    assert_int_equal(l.n, 1);
    assert_int_equal(gs_mig_builtin(g, "all-1g.5gb", &l, why, sizeof(why)), -EINVAL);
    assert_non_null(strstr(why, "has no MIG profile 1g.5gb"));
    assert_int_equal(gs_mig_builtin(g, "everything", &l, why, sizeof(why)), -ENOENT);
    assert_int_equal(gs_mig_builtin(g, "all-disabled", &l, why, sizeof(why)), 0);
    assert_false(l.mig_enabled);
    gpu_from_model(gs_catalog_find("A30"), g);
    assert_int_equal(gs_mig_builtin(g, "all-balanced", &l, why, sizeof(why)), 0);
    assert_int_equal(l.n, 3);

    /* Diff from 2 x 1g + 2g + 3g (on H100) to 7 x 1g keeps the two 1g in place and destroys the rest,
     * compute instances first. */
    gpu_from_model(gs_catalog_find("H100-SXM5-80GB"), g);
    struct gs_mig_layout bal;
    assert_int_equal(gs_mig_builtin(g, "all-balanced", &bal, why, sizeof(why)), 0);
    struct gs_mig_solution s;
    assert_int_equal(gs_mig_solve(g, &bal, &s, why, sizeof(why)), 0);
    for (unsigned k = 0; k < s.n; k++) {
        g->gis[g->n_gis++] = (struct gs_gpu_instance){ 10 + k, s.inst[k].profile_id, s.inst[k].start, s.inst[k].size, 1 };
        struct gs_mig_device *d = &g->mig[g->n_mig++];
        memset(d, 0, sizeof(*d));
        d->gi_id = 10 + k;
        d->gi_slices = d->ci_slices = gs_gpu_profile_by_id(g, s.inst[k].profile_id)->slices;
    }
    assert_true(gs_mig_matches(g, &bal));
    struct gs_mig_plan plan;
    assert_int_equal(gs_mig_diff(g, &bal, &plan, why, sizeof(why)), 0);
    assert_int_equal(plan.n_steps, 0);
    assert_int_equal(gs_mig_builtin(g, "all-1g.10gb", &l, why, sizeof(why)), 0);
    assert_false(gs_mig_matches(g, &l));
    assert_int_equal(gs_mig_diff(g, &l, &plan, why, sizeof(why)), 0);
    assert_int_equal(plan.kept, 2);
    unsigned destroys = 0, creates = 0;
    for (unsigned k = 0; k < plan.n_steps; k++) {
        destroys += plan.steps[k].kind == GS_STEP_DESTROY_GI;
        creates += plan.steps[k].kind == GS_STEP_CREATE_GI;
        if (plan.steps[k].kind == GS_STEP_CREATE_GI)
            for (unsigned j = 0; j < k; j++) /* destroys come before creates */
                assert_true(plan.steps[j].kind != GS_STEP_CREATE_GI || j < k);
    }
    assert_int_equal(destroys, 2);
    assert_int_equal(creates, 5);
    assert_int_equal(plan.steps[0].kind, GS_STEP_DESTROY_CI);
    assert_int_equal(plan.steps[1].kind, GS_STEP_DESTROY_GI);
    /* MIG off and a layout with instances: the mode change first, instances on the next pass. */
    g->mig_current = g->mig_pending = 0;
    assert_int_equal(gs_mig_diff(g, &l, &plan, why, sizeof(why)), 0);
    assert_int_equal(plan.n_steps, 1);
    assert_int_equal(plan.steps[0].kind, GS_STEP_SET_MODE);
    assert_true(plan.needs_mode_change);
    /* Ampere pending: nothing to do but say a reset is needed. */
    g->mig_pending = 1;
    assert_int_equal(gs_mig_diff(g, &l, &plan, why, sizeof(why)), 0);
    assert_true(plan.reset_pending);
    assert_int_equal(plan.n_steps, 0);
    free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_solver_matches_brute_force),
        cmocka_unit_test(test_refusal_reasons),
        cmocka_unit_test(test_keeps_maximum),
        cmocka_unit_test(test_builtins_and_diff),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
