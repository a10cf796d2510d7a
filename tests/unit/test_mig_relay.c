/* test_mig_relay.c: a MIG layout around the instances pods hold (src/mig/relay.c, pure): held
 * instances stay where they are, the requested profiles are placed in the layout's order where they
 * still fit, what does not fit is named; on H100 80GB, A100 40GB and H200 profile tables. */
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
#include "mig/relay.h"

struct gi_spec {
    const char *profile;
    unsigned start;
};

/* A GPU of the model in MIG mode with the given GPU instances (GI IDs 1.., one full-size compute
 * instance each, MIG device UUIDs "MIG-<GI ID>"). */
static struct gs_gpu *gpu(const char *model, const struct gi_spec *gis, unsigned n) {
    struct gs_gpu *g = calloc(1, sizeof(*g));
    assert_non_null(g);
    gs_mig_gpu_from_model(gs_catalog_find(model), g);
    snprintf(g->uuid, sizeof(g->uuid), "GPU-0");
    for (unsigned k = 0; k < n; k++) {
        const struct gs_gi_profile *p = gs_gpu_profile_by_name(g, gis[k].profile);
        assert_non_null(p);
        g->gis[g->n_gis++] = (struct gs_gpu_instance){ k + 1, p->id, gis[k].start, p->placement_size, 1 };
        struct gs_mig_device *d = &g->mig[g->n_mig++];
        snprintf(d->uuid, sizeof(d->uuid), "MIG-%u", k + 1);
        d->gi_id = k + 1;
        d->gi_profile_id = p->id;
        d->gi_slices = d->ci_slices = p->slices;
        d->start = gis[k].start;
        d->size = p->placement_size;
        snprintf(d->profile, sizeof(d->profile), "%s", p->name);
    }
    return g;
}

/* Pods holding the devices named (pod "p<k>" in namespace "team"). */
static struct gs_mig_holds holding(unsigned n, const char *const *ids) {
    struct gs_mig_holds h = { n, calloc(n ? n : 1, sizeof(struct gs_mig_hold)) };
    assert_non_null(h.items);
    for (unsigned k = 0; k < n; k++) {
        const char *sep = strstr(ids[k], "::");
        snprintf(h.items[k].uuid, sizeof(h.items[k].uuid), "%.*s", sep ? (int)(sep - ids[k]) : (int)strlen(ids[k]),
                 ids[k]);
        snprintf(h.items[k].device_id, sizeof(h.items[k].device_id), "%s", ids[k]);
        snprintf(h.items[k].who, sizeof(h.items[k].who), "team/p%u, container main", k);
    }
    return h;
}

static struct gs_mig_layout layout(const struct gs_gpu *g, const char *builtin) {
    struct gs_mig_layout l;
    char why[256];
    assert_int_equal(gs_mig_builtin(g, builtin, &l, why, sizeof(why)), 0);
    return l;
}

static struct gs_mig_layout named(const struct gs_gpu *g, const char *const *names, const unsigned *counts, size_t n) {
    struct gs_mig_layout l;
    char why[256];
    assert_int_equal(gs_mig_layout_from_names(g, true, names, counts, n, &l, why, sizeof(why)), 0);
    return l;
}

/* What the GPU is after the plan: GIs not destroyed, and those created. */
struct after {
    unsigned n;
    struct {
        unsigned profile_id, start;
        int gi;                /* the existing GI kept, or -1 */
    } x[GS_MAX_GIS];
};

static bool destroyed(const struct gs_mig_plan *p, unsigned gi_id) {
    for (unsigned k = 0; k < p->n_steps; k++)
        if (p->steps[k].kind == GS_STEP_DESTROY_GI && p->steps[k].gi_id == gi_id)
            return true;
    return false;
}

/* The GPU after plan p, checked against the GPU's table: valid starts, no overlap, compute and
 * per-profile caps. */
static void after_of(const struct gs_gpu *g, const struct gs_mig_plan *p, struct after *a) {
    memset(a, 0, sizeof(*a));
    for (unsigned e = 0; e < g->n_gis; e++)
        if (!destroyed(p, g->gis[e].id)) {
            a->x[a->n].profile_id = g->gis[e].profile_id;
            a->x[a->n].start = g->gis[e].start;
            a->x[a->n++].gi = (int)g->gis[e].id;
        }
    for (unsigned k = 0; k < p->n_steps; k++)
        if (p->steps[k].kind == GS_STEP_CREATE_GI) {
            a->x[a->n].profile_id = p->steps[k].profile_id;
            a->x[a->n].start = p->steps[k].start;
            a->x[a->n++].gi = -1;
        }
    unsigned used = 0, compute = 0;
    for (unsigned i = 0; i < a->n; i++) {
        const struct gs_gi_profile *q = gs_gpu_profile_by_id(g, a->x[i].profile_id);
        assert_non_null(q);
        bool valid = false;
        for (unsigned k = 0; k < q->n_starts; k++)
            valid |= q->starts[k] == a->x[i].start;
        assert_true(valid);
        unsigned m = ((1u << q->placement_size) - 1) << a->x[i].start;
        assert_int_equal(used & m, 0);
        used |= m;
        compute += q->slices;
        unsigned same = 0;
        for (unsigned j = 0; j < a->n; j++)
            same += a->x[j].profile_id == q->id;
        assert_true(same <= q->max_instances);
    }
    assert_true(compute <= 7);
}

/* "1g.10gb@0 1g.10gb@1 3g.40gb@4*": the GPU after the plan, by start, kept instances starred. */
static void after_text(const struct gs_gpu *g, const struct after *a, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = '\0';
    for (unsigned s = 0; s < 8; s++)
        for (unsigned i = 0; i < a->n; i++)
            if (a->x[i].start == s && n < len)
                n += (size_t)snprintf(buf + n, len - n, "%s%s@%u%s", n ? " " : "",
                                      gs_gpu_profile_by_id(g, a->x[i].profile_id)->name, s, a->x[i].gi >= 0 ? "*" : "");
}

/* Plans want around h and checks: partial, the GPU after it (after_text), what was not made. */
static void expect(const struct gs_gpu *g, const struct gs_mig_layout *want, const struct gs_mig_holds *h,
                   const char *after_want, const char *not_made, struct gs_mig_relay *rl) {
    struct gs_mig_plan *p = calloc(1, sizeof(*p));
    char why[512] = "", text[512];
    assert_int_equal(gs_mig_relay_plan(g, want, h, p, rl, why, sizeof(why)), 0);
    assert_true(rl->partial);
    assert_int_equal(gs_mig_plan_held(g, p, h, NULL, 0), 0);
    struct after a;
    after_of(g, p, &a);
    after_text(g, &a, text, sizeof(text));
    assert_string_equal(text, after_want);
    assert_string_equal(rl->not_made, not_made);
    for (unsigned k = 0; k < p->n_steps; k++) { /* held instances: not a step touches them */
        for (size_t i = 0; i < h->n; i++)
            for (unsigned d = 0; d < g->n_mig; d++)
                if (!strcmp(g->mig[d].uuid, h->items[i].uuid) && p->steps[k].kind != GS_STEP_CREATE_GI &&
                    p->steps[k].new_gi < 0)
                    assert_int_not_equal(p->steps[k].gi_id, g->mig[d].gi_id);
    }
    free(p);
}

static const struct gi_spec two_3g[] = { { "3g.40gb", 0 }, { "3g.40gb", 4 } };

/* A held 3g.40gb at each of its placements, the layout asks for 7 x 1g.10gb: the 1g instances go
 * where the 3g does not sit (slot 7 takes no 1g: 3 beside the one at 0, 4 beside the one at 4). */
static void test_h100_held_3g_each_placement(void **state) {
    (void)state;
    struct gs_gpu *g = gpu("H100-SXM5-80GB", two_3g, 2);
    struct gs_mig_layout l = layout(g, "all-1g.10gb");
    assert_int_equal(l.n, 7);
    struct gs_mig_relay rl;
    const char *at0[] = { "MIG-1" }, *at4[] = { "MIG-2" };
    struct gs_mig_holds h0 = holding(1, at0), h4 = holding(1, at4);
    expect(g, &l, &h0, "3g.40gb@0* 1g.10gb@4 1g.10gb@5 1g.10gb@6", "4 x 1g.10gb", &rl);
    assert_int_equal(rl.n_kept, 1);
    assert_int_equal(rl.n_missing, 4);
    assert_string_equal(rl.kept, "MIG-1 (GI 1, 3g.40gb) to team/p0, container main");
    expect(g, &l, &h4, "1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 3g.40gb@4*", "3 x 1g.10gb", &rl);
    assert_string_equal(rl.kept, "MIG-2 (GI 2, 3g.40gb) to team/p0, container main");
    /* A replica of the instance (time-sliced, "::N") holds it as well. */
    const char *rep[] = { "MIG-2::3" };
    struct gs_mig_holds hr = holding(1, rep);
    expect(g, &l, &hr, "1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 3g.40gb@4*", "3 x 1g.10gb", &rl);
    assert_non_null(strstr(rl.kept, "MIG-2::3 (GI 2, 3g.40gb)"));
    gs_mig_holds_free(&h0);
    gs_mig_holds_free(&h4);
    gs_mig_holds_free(&hr);
    free(g);
}

static const struct gi_spec balanced[] = { { "2g.20gb", 0 }, { "1g.10gb", 2 }, { "1g.10gb", 3 }, { "3g.40gb", 4 } };

/* A held 1g.10gb: the layout's 3g.40gb go where they still fit, an instance of the layout that
 * already sits where it fits is kept (its UUID stays), and a layout of one 7g.80gb makes nothing
 * new (the rest of the GPU is cleared: the layout has nothing else), reported. */
static void test_h100_held_1g(void **state) {
    (void)state;
    struct gs_gpu *g = gpu("H100-SXM5-80GB", balanced, 4);
    const char *ids[] = { "MIG-2" };
    struct gs_mig_holds h = holding(1, ids);
    struct gs_mig_relay rl;
    struct gs_mig_layout l = layout(g, "all-3g.40gb");
    expect(g, &l, &h, "1g.10gb@2* 3g.40gb@4*", "3g.40gb", &rl);
    l = layout(g, "all-7g.80gb");
    expect(g, &l, &h, "1g.10gb@2*", "7g.80gb", &rl);
    assert_int_equal(rl.n_missing, 1);
    assert_int_equal(rl.n_kept, 1);
    /* all-2g.20gb: the 2g at 0 stays, the others would cross the held 1g or the 3g's slots. */
    l = layout(g, "all-2g.20gb");
    expect(g, &l, &h, "2g.20gb@0* 1g.10gb@2* 2g.20gb@4", "2g.20gb", &rl);
    gs_mig_holds_free(&h);
    free(g);
}

/* Two holds: the held 1g.10gb stands for one of the layout's 1g.10gb (6 more are asked), and the
 * held 3g.40gb for none of them. */
static void test_h100_two_holds(void **state) {
    (void)state;
    struct gs_gpu *g = gpu("H100-SXM5-80GB", balanced, 4);
    const char *ids[] = { "MIG-2", "MIG-4" };
    struct gs_mig_holds h = holding(2, ids);
    struct gs_mig_relay rl;
    struct gs_mig_layout l = layout(g, "all-1g.10gb");
    expect(g, &l, &h, "1g.10gb@0 1g.10gb@1 1g.10gb@2* 1g.10gb@3* 3g.40gb@4*", "3 x 1g.10gb", &rl);
    assert_int_equal(rl.n_kept, 2);
    assert_string_equal(rl.kept, "MIG-2 (GI 2, 1g.10gb) to team/p0, container main; "
                                 "MIG-4 (GI 4, 3g.40gb) to team/p1, container main");
    l = layout(g, "all-2g.20gb");
    expect(g, &l, &h, "2g.20gb@0* 1g.10gb@2* 3g.40gb@4*", "2 x 2g.20gb", &rl);
    l = layout(g, "all-7g.80gb");
    expect(g, &l, &h, "1g.10gb@2* 3g.40gb@4*", "7g.80gb", &rl);
    gs_mig_holds_free(&h);
    free(g);
}

/* The layout's order decides what is made when not all of it fits: 1g, 1g, 2g beside a held 3g at
 * 0 leaves the 2g out; 2g, 1g, 1g leaves a 1g out. */
static void test_order_of_the_layout(void **state) {
    (void)state;
    struct gs_gpu *g = gpu("H100-SXM5-80GB", two_3g, 2);
    const char *ids[] = { "MIG-1" };
    struct gs_mig_holds h = holding(1, ids);
    struct gs_mig_relay rl;
    const char *a[] = { "1g.10gb", "2g.20gb" }, *b[] = { "2g.20gb", "1g.10gb" };
    const unsigned ca[] = { 2, 1 }, cb[] = { 1, 2 };
    struct gs_mig_layout l = named(g, a, ca, 2);
    expect(g, &l, &h, "3g.40gb@0* 1g.10gb@4 1g.10gb@5", "2g.20gb", &rl);
    l = named(g, b, cb, 2);
    expect(g, &l, &h, "3g.40gb@0* 2g.20gb@4 1g.10gb@6", "1g.10gb", &rl);
    gs_mig_holds_free(&h);
    free(g);
}

/* A100 40GB: 1g.5gb beside a held 3g.20gb at 4; the double-memory 1g.10gb (2 slices, starts 0, 2,
 * 4, 6) beside one at 0. */
static void test_a100(void **state) {
    (void)state;
    const struct gi_spec gis[] = { { "3g.20gb", 0 }, { "3g.20gb", 4 } };
    struct gs_gpu *g = gpu("A100-SXM4-40GB", gis, 2);
    const char *at4[] = { "MIG-2" }, *at0[] = { "MIG-1" };
    struct gs_mig_holds h4 = holding(1, at4), h0 = holding(1, at0);
    struct gs_mig_relay rl;
    struct gs_mig_layout l = layout(g, "all-1g.5gb");
    expect(g, &l, &h4, "1g.5gb@0 1g.5gb@1 1g.5gb@2 1g.5gb@3 3g.20gb@4*", "3 x 1g.5gb", &rl);
    l = layout(g, "all-1g.10gb");
    assert_int_equal(l.n, 4);
    expect(g, &l, &h0, "3g.20gb@0* 1g.10gb@4 1g.10gb@6", "2 x 1g.10gb", &rl);
    gs_mig_holds_free(&h4);
    gs_mig_holds_free(&h0);
    free(g);
}

/* H200: the same placement family with its own profile names. */
static void test_h200(void **state) {
    (void)state;
    const struct gi_spec gis[] = { { "3g.71gb", 0 }, { "2g.35gb", 4 }, { "1g.18gb", 6 } };
    struct gs_gpu *g = gpu("H200-SXM-141GB", gis, 3);
    const char *ids[] = { "MIG-1" };
    struct gs_mig_holds h = holding(1, ids);
    struct gs_mig_relay rl;
    struct gs_mig_layout l = layout(g, "all-1g.18gb");
    expect(g, &l, &h, "3g.71gb@0* 1g.18gb@4 1g.18gb@5 1g.18gb@6*", "4 x 1g.18gb", &rl);
    /* all-balanced asks 1g, 1g, 2g (and a 3g, the held one): in that order, the two 1g come first
     * and the 2g at 4 gives way to one of them. */
    l = layout(g, "all-balanced");
    expect(g, &l, &h, "3g.71gb@0* 1g.18gb@4 1g.18gb@6*", "2g.35gb", &rl);
    gs_mig_holds_free(&h);
    free(g);
}

/* A layout that destroys nothing held is planned exactly as gs_mig_diff plans it. */
static void test_nothing_held_in_the_way(void **state) {
    (void)state;
    struct gs_gpu *g = gpu("H100-SXM5-80GB", balanced, 4);
    const char *ids[] = { "MIG-2", "GPU-9" };
    struct gs_mig_holds h = holding(2, ids);
    struct gs_mig_layout l = layout(g, "all-1g.10gb");
    struct gs_mig_plan *p = calloc(2, sizeof(*p));
    struct gs_mig_relay rl;
    char why[256];
    assert_int_equal(gs_mig_relay_plan(g, &l, &h, &p[0], &rl, why, sizeof(why)), 0);
    assert_false(rl.partial);
    assert_int_equal(gs_mig_diff(g, &l, &p[1], why, sizeof(why)), 0);
    assert_memory_equal(&p[0], &p[1], sizeof(p[0]));
    assert_int_equal(gs_mig_relay_plan(g, &l, NULL, &p[0], &rl, why, sizeof(why)), 0);
    assert_false(rl.partial);
    assert_memory_equal(&p[0], &p[1], sizeof(p[0]));
    /* A layout the GPU cannot take at all is the diff's error, holds or not. */
    struct gs_mig_layout bad = l;
    bad.profile_ids[0] = 99;
    assert_int_equal(gs_mig_relay_plan(g, &bad, &h, &p[0], &rl, why, sizeof(why)), -EINVAL);
    free(p);
    gs_mig_holds_free(&h);
    free(g);
}

/* MIG off while instances are held, or on while the whole GPU is held: the mode stays, nothing
 * changes, said. */
static void test_mode_changes_wait(void **state) {
    (void)state;
    struct gs_gpu *g = gpu("H100-SXM5-80GB", balanced, 4);
    const char *ids[] = { "MIG-4" };
    struct gs_mig_holds h = holding(1, ids);
    struct gs_mig_layout off = { false, 0, { 0 } };
    struct gs_mig_plan *p = calloc(1, sizeof(*p));
    struct gs_mig_relay rl;
    char why[256];
    assert_int_equal(gs_mig_relay_plan(g, &off, &h, p, &rl, why, sizeof(why)), 0);
    assert_true(rl.partial);
    assert_int_equal(p->n_steps, 0);
    assert_string_equal(rl.not_made, "MIG mode disabled");
    assert_string_equal(rl.kept, "MIG-4 (GI 4, 3g.40gb) to team/p0, container main");
    gs_mig_holds_free(&h);

    struct gs_gpu *w = gpu("H100-SXM5-80GB", NULL, 0);
    w->mig_current = w->mig_pending = 0;
    const char *whole[] = { "GPU-0::2" };
    h = holding(1, whole);
    struct gs_mig_layout on = { true, 0, { 0 } };
    assert_int_equal(gs_mig_relay_plan(w, &on, &h, p, &rl, why, sizeof(why)), 0);
    assert_true(rl.partial);
    assert_int_equal(p->n_steps, 0);
    assert_int_equal(rl.n_kept, 1);
    assert_string_equal(rl.not_made, "MIG mode enabled");
    assert_string_equal(rl.kept, "GPU-0::2 (the whole GPU) to team/p0, container main");
    free(p);
    gs_mig_holds_free(&h);
    free(w);
    free(g);
}

/* A held GPU instance split into two compute instances stays split: no compute-instance step on it
 * (a plain diff would make it one full-size compute instance). */
static void test_held_compute_instances_stay(void **state) {
    (void)state;
    struct gs_gpu *g = gpu("H100-SXM5-80GB", two_3g, 2);
    g->mig[0].ci_slices = 1; /* GI 1 holds two compute instances: MIG-1 (1c) and MIG-1b (2c) */
    struct gs_mig_device *d = &g->mig[g->n_mig++];
    *d = g->mig[0];
    d->ci_id = 1;
    d->ci_slices = 2;
    snprintf(d->uuid, sizeof(d->uuid), "MIG-1b");
    g->gis[0].n_ci = 2;
    const char *ids[] = { "MIG-1b" };
    struct gs_mig_holds h = holding(1, ids);
    struct gs_mig_layout l = layout(g, "all-3g.40gb"); /* the diff alone would redo GI 1's compute instances */
    struct gs_mig_plan *p = calloc(1, sizeof(*p));
    struct gs_mig_relay rl;
    char why[256];
    assert_int_equal(gs_mig_diff(g, &l, p, why, sizeof(why)), 0);
    assert_int_equal(gs_mig_plan_held(g, p, &h, NULL, 0), 1);
    assert_int_equal(gs_mig_relay_plan(g, &l, &h, p, &rl, why, sizeof(why)), 0);
    assert_true(rl.partial);
    assert_int_equal(p->n_steps, 0); /* both 3g stay as they are: the layout is there but for GI 1's split */
    assert_string_equal(rl.not_made, "none");
    free(p);
    gs_mig_holds_free(&h);
    free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_h100_held_3g_each_placement),
        cmocka_unit_test(test_h100_held_1g),
        cmocka_unit_test(test_h100_two_holds),
        cmocka_unit_test(test_order_of_the_layout),
        cmocka_unit_test(test_a100),
        cmocka_unit_test(test_h200),
        cmocka_unit_test(test_nothing_held_in_the_way),
        cmocka_unit_test(test_mode_changes_wait),
        cmocka_unit_test(test_held_compute_instances_stay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
