/* test_mig_apply.c: the MIG partition manager (mig/migapply.h) against the simulated node, through
 * the real dlopen backend: every built-in layout on every MIG-capable model (with the Ampere GPU
 * reset), a seeded property test over random layouts (UUIDs of instances that stay, minimal
 * destroys, refusals that change nothing), processes blocking destroys, kept instances whose
 * compute instances are partial, several GPUs planned all-or-nothing, crashes injected between any
 * two steps (fixed transitions and random ones), and layout-file errors. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "catalog/catalog.h"
#include "mig/migapply.h"
#include "util/log.h"
#include "util/util.h"
#include "sim_fixture.h"

/* ---- helpers --------------------------------------------------------------------------------- */

struct snap_gi {
    unsigned gi_id, profile_id, start, size, n_ci;
    char uuid[GS_UUID_LEN];
};

/* What one GPU looks like: MIG mode and its GPU instances with their MIG UUIDs. */
struct snap {
    unsigned cur, pend;
    unsigned n;
    struct snap_gi gi[GS_MAX_GIS];
};

static struct gs_inventory *read_inv(struct sim_fixture *f) {
    struct gs_inventory *inv = calloc(1, sizeof(*inv));
    assert_non_null(inv);
    assert_int_equal(gpu_inventory_read(f->node, inv), 0);
    assert_true(inv->n_gpus >= 1);
    return inv;
}

static void snap_of(const struct gs_gpu *g, struct snap *s) {
    memset(s, 0, sizeof(*s));
    s->cur = g->mig_current;
    s->pend = g->mig_pending;
    s->n = g->n_gis;
    for (unsigned e = 0; e < g->n_gis; e++) {
        struct snap_gi *x = &s->gi[e];
        x->gi_id = g->gis[e].id;
        x->profile_id = g->gis[e].profile_id;
        x->start = g->gis[e].start;
        x->size = g->gis[e].size;
        x->n_ci = g->gis[e].n_ci;
        for (unsigned k = 0; k < g->n_mig; k++)
            if (g->mig[k].gi_id == x->gi_id)
                gs_strlcpy(x->uuid, g->mig[k].uuid, sizeof(x->uuid));
    }
}

static void take_snap_gpu(struct sim_fixture *f, unsigned gpu, struct snap *s) {
    struct gs_inventory *inv = read_inv(f);
    assert_true(gpu < inv->n_gpus);
    snap_of(&inv->gpus[gpu], s);
    free(inv);
}

static void take_snap(struct sim_fixture *f, struct snap *s) { take_snap_gpu(f, 0, s); }

static const struct snap_gi *snap_find(const struct snap *s, unsigned profile_id, unsigned start) {
    for (unsigned e = 0; e < s->n; e++)
        if (s->gi[e].profile_id == profile_id && s->gi[e].start == start)
            return &s->gi[e];
    return NULL;
}

static bool snap_has_uuid(const struct snap *s, const char *uuid) {
    for (unsigned e = 0; e < s->n; e++)
        if (!strcmp(s->gi[e].uuid, uuid))
            return true;
    return false;
}

/* Identical: same mode, same instances (ID, profile, placement, CIs, UUID), in any order. */
static void assert_snap_equal(const struct snap *a, const struct snap *b, const char *what) {
    if (a->cur != b->cur || a->pend != b->pend || a->n != b->n)
        fail_msg("%s: mode %u/%u -> %u/%u, %u -> %u instances", what, a->cur, a->pend, b->cur, b->pend, a->n, b->n);
    for (unsigned e = 0; e < a->n; e++) {
        const struct snap_gi *x = &a->gi[e], *y = snap_find(b, x->profile_id, x->start);
        if (!y || y->gi_id != x->gi_id || y->size != x->size || y->n_ci != x->n_ci || strcmp(x->uuid, y->uuid))
            fail_msg("%s: GI %u (profile %u at %u, %s) changed", what, x->gi_id, x->profile_id, x->start, x->uuid);
    }
}

/* Every instance of `before` whose profile and placement are in `after` kept its MIG UUID; every
 * other instance's UUID is gone; every new instance has a new UUID. Returns how many stayed. */
static unsigned assert_uuids_kept(const struct snap *before, const struct snap *after, const char *what) {
    unsigned stayed = 0;
    for (unsigned e = 0; e < before->n; e++) {
        const struct snap_gi *x = &before->gi[e], *y = snap_find(after, x->profile_id, x->start);
        if (y) {
            if (strcmp(x->uuid, y->uuid))
                fail_msg("%s: instance profile %u at %u stayed but its UUID changed: %s -> %s", what, x->profile_id,
                         x->start, x->uuid, y->uuid);
            stayed++;
        } else if (snap_has_uuid(after, x->uuid)) {
            fail_msg("%s: UUID %s moved", what, x->uuid);
        }
    }
    for (unsigned e = 0; e < after->n; e++) {
        const struct snap_gi *y = &after->gi[e];
        assert_true(y->uuid[0] != '\0');
        if (!snap_find(before, y->profile_id, y->start) && snap_has_uuid(before, y->uuid))
            fail_msg("%s: new instance at %u reuses UUID %s", what, y->start, y->uuid);
    }
    return stayed;
}

static gs_sim_reset_gpu_fn reset_fn(struct sim_fixture *f) {
    gs_sim_reset_gpu_fn r = (gs_sim_reset_gpu_fn)gpu_node_symbol(f->node, "gpusliceSimResetGpu");
    assert_non_null(r);
    return r;
}

/* Fixtures still open when a test fails are closed by the teardown (from a copy: the test's own
 * struct is gone with its stack), so that one failure does not leave the simulator initialised on
 * a stale node for the tests after it. */
static struct sim_fixture open_fixtures[4];

static void fx_close(struct sim_fixture *f) {
    for (size_t i = 0; i < GS_ARRAY_SIZE(open_fixtures); i++)
        if (open_fixtures[i].node && open_fixtures[i].node == f->node)
            memset(&open_fixtures[i], 0, sizeof(open_fixtures[i]));
    sim_fixture_close(f);
}

static int close_fixtures(void **state) {
    (void)state;
    for (size_t i = 0; i < GS_ARRAY_SIZE(open_fixtures); i++)
        if (open_fixtures[i].node) {
            struct sim_fixture copy = open_fixtures[i];
            fx_close(&copy);
        }
    return 0;
}

static void fx_open(struct sim_fixture *f, const char *yaml) {
    assert_int_equal(sim_fixture_open(f, yaml), 0);
    for (size_t i = 0; i < GS_ARRAY_SIZE(open_fixtures); i++)
        if (!open_fixtures[i].node) {
            open_fixtures[i] = *f;
            return;
        }
    fail_msg("too many open fixtures");
}

static void open_model(struct sim_fixture *f, const char *model, int mig) {
    char yaml[256];
    one_gpu_yaml(yaml, sizeof(yaml), model, mig);
    fx_open(f, yaml);
}

static int apply_builtin(struct sim_fixture *f, const char *name, bool force, struct gs_mig_apply_result *res,
                         char *err, size_t errlen) {
    err[0] = '\0';
    return gs_mig_apply_node(f->node, NULL, name, force, res, err, errlen);
}

static void apply_ok(struct sim_fixture *f, const char *name) {
    struct gs_mig_apply_result res;
    char err[1024];
    int r = apply_builtin(f, name, false, &res, err, sizeof(err));
    if (r != 0)
        fail_msg("apply %s: %d: %s", name, r, err);
}

static int apply_one(struct sim_fixture *f, const struct gs_mig_layout *l, bool force, struct gs_mig_apply_result *res,
                     char *err, size_t errlen) {
    struct gs_mig_layout *ls = calloc(GS_MAX_GPUS, sizeof(*ls));
    assert_non_null(ls);
    bool sel[GS_MAX_GPUS] = { false };
    ls[0] = *l;
    sel[0] = true;
    err[0] = '\0';
    int r = gs_mig_apply_layouts(f->node, ls, sel, force, res, err, errlen);
    free(ls);
    return r;
}

/* The layout a built-in name resolves to on GPU 0 as it is now. */
static void builtin_now(struct sim_fixture *f, const char *name, struct gs_mig_layout *l) {
    struct gs_inventory *inv = read_inv(f);
    char why[512];
    int r = gs_mig_builtin(&inv->gpus[0], name, l, why, sizeof(why));
    if (r != 0)
        fail_msg("builtin %s: %d: %s", name, r, why);
    free(inv);
}

static bool matches_now(struct sim_fixture *f, const struct gs_mig_layout *l) {
    struct gs_inventory *inv = read_inv(f);
    bool m = gs_mig_matches(&inv->gpus[0], l);
    free(inv);
    return m;
}

static unsigned count_profile(const struct gs_gpu *g, const char *name) {
    const struct gs_gi_profile *p = gs_gpu_profile_by_name(g, name);
    assert_non_null(p);
    unsigned c = 0;
    for (unsigned e = 0; e < g->n_gis; e++)
        c += g->gis[e].profile_id == p->id;
    return c;
}

/* The plain (NVML index 0..4) catalogue profile with `slices` compute slices. */
static const struct gs_profile_spec *plain_spec(const struct gs_model *m, unsigned slices) {
    for (size_t i = 0; i < m->n_profiles; i++)
        if (m->profiles[i].slices == slices && m->profiles[i].nvml_profile <= 4)
            return &m->profiles[i];
    return NULL;
}

/* How many instances of p fit an empty GPU, from the catalogue alone: disjoint placements (equal
 * sizes: take the starts in ascending order greedily), the cap and the compute slices. */
static unsigned expected_fill(const struct gs_model *m, const struct gs_profile_spec *p) {
    unsigned starts[GS_MAX_STARTS];
    memcpy(starts, p->starts, sizeof(starts));
    for (unsigned i = 0; i < p->n_starts; i++)
        for (unsigned k = i + 1; k < p->n_starts; k++)
            if (starts[k] < starts[i]) {
                unsigned t = starts[i];
                starts[i] = starts[k];
                starts[k] = t;
            }
    unsigned n = 0, end = 0;
    for (unsigned i = 0; i < p->n_starts; i++)
        if (starts[i] >= end) {
            n++;
            end = starts[i] + p->mem_slices;
        }
    unsigned max_compute = 0;
    for (size_t i = 0; i < m->n_profiles; i++)
        if (m->profiles[i].slices > max_compute)
            max_compute = m->profiles[i].slices;
    if (n > p->max_instances)
        n = p->max_instances;
    if (n > max_compute / p->slices)
        n = max_compute / p->slices;
    return n;
}

/* ---- a. every built-in layout on every MIG-capable model ---------------------------------------- */

/* Applies a built-in layout. When the MIG mode changes on Ampere, the apply stops with -EAGAIN
 * asking for a GPU reset (and keeps asking, changing nothing, until there is one); after
 * gpusliceSimResetGpu the same apply completes. */
static void apply_builtin_flow(struct sim_fixture *f, const struct gs_model *m, const char *name) {
    struct snap before;
    take_snap(f, &before);
    bool want_enabled = strcmp(name, "all-disabled") != 0;
    bool mode_change = (before.cur != 0) != want_enabled;
    struct gs_mig_apply_result res;
    char err[1024];
    int r = apply_builtin(f, name, false, &res, err, sizeof(err));
    if (mode_change && m->arch < GS_ARCH_HOPPER) {
        if (r != -EAGAIN)
            fail_msg("%s: %s from MIG %s: expected -EAGAIN, got %d: %s", m->key, name,
                     before.cur ? "enabled" : "disabled", r, err);
        assert_non_null(strstr(err, "GPU reset"));
        assert_non_null(strstr(err, "sim reset-gpu 0"));
        assert_int_equal(res.mode_changes, 1);
        struct snap pending;
        take_snap(f, &pending);
        assert_int_equal(pending.cur, before.cur);
        assert_int_equal(pending.pend, want_enabled ? 1 : 0);
        if (!want_enabled)
            assert_int_equal(pending.n, 0); /* instances went before the mode change */
        /* Again without a reset: the same answer, nothing changes. */
        r = apply_builtin(f, name, false, &res, err, sizeof(err));
        assert_int_equal(r, -EAGAIN);
        assert_non_null(strstr(err, "GPU reset"));
        assert_int_equal(res.steps_done, 0);
        struct snap again;
        take_snap(f, &again);
        assert_snap_equal(&pending, &again, "apply while a reset is pending");
        /* The planner says so too. */
        struct gs_inventory *inv = read_inv(f);
        struct gs_mig_plan *plans = calloc(GS_MAX_GPUS, sizeof(*plans));
        bool sel[GS_MAX_GPUS];
        assert_int_equal(gs_mig_plan_node(inv, NULL, name, plans, sel, err, sizeof(err)), 0);
        assert_true(sel[0]);
        assert_true(plans[0].reset_pending);
        free(plans);
        free(inv);
        char rerr[256];
        assert_int_equal(reset_fn(f)(0, rerr, sizeof(rerr)), 0);
        r = apply_builtin(f, name, false, &res, err, sizeof(err));
        assert_int_equal(res.mode_changes, 0);
    } else if (mode_change) {
        assert_int_equal(res.mode_changes, 1);
        if (want_enabled && r == 0)
            assert_int_equal(res.passes, 2);
    }
    if (r != 0)
        fail_msg("%s: apply %s: %d: %s", m->key, name, r, err);
    struct gs_mig_layout l;
    builtin_now(f, name, &l);
    struct gs_inventory *inv = read_inv(f);
    const struct gs_gpu *g = &inv->gpus[0];
    if (!gs_mig_matches(g, &l))
        fail_msg("%s: after apply %s the GPU does not match (MIG %u/%u, %u GIs, %u wanted)", m->key, name,
                 g->mig_current, g->mig_pending, g->n_gis, l.n);
    assert_int_equal(g->mig_current, want_enabled);
    assert_int_equal(g->mig_pending, want_enabled);
    assert_int_equal(g->n_gis, l.n);
    assert_int_equal(g->n_mig, l.n);
    for (unsigned e = 0; e < g->n_gis; e++)
        assert_int_equal(g->gis[e].n_ci, 1);
    if (!strcmp(name, "all-balanced")) {
        const struct gs_profile_spec *p1 = plain_spec(m, 1), *p2 = plain_spec(m, 2), *p3 = plain_spec(m, 3);
        assert_non_null(p1);
        assert_non_null(p2);
        assert_int_equal(count_profile(g, p1->name), 2);
        assert_int_equal(count_profile(g, p2->name), 1);
        if (m->mig_mem_slices == 4) { /* A30: 2 x 1g + 1 x 2g */
            assert_null(p3);
            assert_int_equal(g->n_gis, 3);
        } else {
            assert_non_null(p3);
            assert_int_equal(count_profile(g, p3->name), 1);
            assert_int_equal(g->n_gis, 4);
        }
    } else if (!strncmp(name, "all-", 4) && want_enabled && strcmp(name, "all-enabled")) {
        const struct gs_profile_spec *p = gs_model_profile_by_name(m, name + 4);
        assert_non_null(p);
        unsigned want = expected_fill(m, p);
        if (count_profile(g, p->name) != want || g->n_gis != want)
            fail_msg("%s: %s made %u instances, %u expected", m->key, name, g->n_gis, want);
    } else {
        assert_int_equal(g->n_gis, 0);
    }
    /* Idempotent: applying again changes nothing and keeps every UUID; the plan is empty. */
    struct snap done, again;
    snap_of(g, &done);
    struct gs_mig_plan *plans = calloc(GS_MAX_GPUS, sizeof(*plans));
    bool sel[GS_MAX_GPUS];
    assert_int_equal(gs_mig_plan_node(inv, NULL, name, plans, sel, err, sizeof(err)), 0);
    assert_true(sel[0]);
    assert_int_equal(plans[0].n_steps, 0);
    assert_false(plans[0].reset_pending);
    free(plans);
    free(inv);
    r = apply_builtin(f, name, false, &res, err, sizeof(err));
    assert_int_equal(r, 0);
    assert_int_equal(res.steps_done, 0);
    assert_int_equal(res.kept, l.n);
    take_snap(f, &again);
    assert_snap_equal(&done, &again, "second apply");
}

static void test_builtins_every_model(void **state) {
    (void)state;
    unsigned models = 0, applied = 0;
    for (size_t mi = 0; mi < gs_catalog_count(); mi++) {
        const struct gs_model *m = gs_catalog_get(mi);
        if (!m->mig_mem_slices)
            continue;
        models++;
        struct sim_fixture f;
        open_model(&f, m->key, 0);
        /* From MIG disabled straight to a layout with instances (mode change + instances). */
        apply_builtin_flow(&f, m, "all-balanced");
        char name[64];
        for (size_t p = 0; p < m->n_profiles; p++) {
            snprintf(name, sizeof(name), "all-%s", m->profiles[p].name);
            apply_builtin_flow(&f, m, name);
            applied++;
        }
        apply_builtin_flow(&f, m, "all-balanced");
        apply_builtin_flow(&f, m, "all-enabled");   /* destroys everything, stays in MIG mode */
        apply_builtin_flow(&f, m, "all-balanced");
        apply_builtin_flow(&f, m, "all-disabled");  /* with instances present: cleared, then the mode */
        apply_builtin_flow(&f, m, "all-disabled");
        apply_builtin_flow(&f, m, "all-enabled");   /* from disabled: mode only */
        apply_builtin_flow(&f, m, "all-disabled");
        applied += 7;
        /* An unknown built-in name and a profile this model lacks. */
        struct gs_mig_apply_result res;
        char err[1024];
        assert_int_equal(apply_builtin(&f, "balanced", false, &res, err, sizeof(err)), -ENOENT);
        assert_non_null(strstr(err, "no MIG config 'balanced'"));
        apply_builtin_flow(&f, m, "all-enabled");
        struct snap before, after;
        take_snap(&f, &before);
        assert_int_equal(apply_builtin(&f, "all-9g.999gb", false, &res, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "has no MIG profile 9g.999gb"));
        take_snap(&f, &after);
        assert_snap_equal(&before, &after, "unknown profile");
        fx_close(&f);
    }
    assert_int_equal(models, 7);
    assert_true(applied > 50);
}

/* The Ampere reset flow spelled out once, on an A100 with instances: disable -> -EAGAIN (instances
 * already gone, mode pending) -> reset -> disabled; enable + layout -> -EAGAIN -> reset -> layout. */
static void test_ampere_reset_flow(void **state) {
    (void)state;
    struct sim_fixture f;
    open_model(&f, "A100-SXM4-40GB", 1);
    apply_ok(&f, "all-balanced");
    struct gs_mig_apply_result res;
    char err[1024];
    assert_int_equal(apply_builtin(&f, "all-disabled", false, &res, err, sizeof(err)), -EAGAIN);
    assert_non_null(strstr(err, "GPU 0 (NVIDIA A100-SXM4-40GB): MIG mode is pending disable"));
    assert_non_null(strstr(err, "GPU reset"));
    assert_int_equal(res.destroys, 8);
    assert_int_equal(res.mode_changes, 1);
    struct snap s;
    take_snap(&f, &s);
    assert_int_equal(s.cur, 1);
    assert_int_equal(s.pend, 0);
    assert_int_equal(s.n, 0);
    char rerr[256];
    assert_int_equal(reset_fn(&f)(0, rerr, sizeof(rerr)), 0);
    assert_int_equal(apply_builtin(&f, "all-disabled", false, &res, err, sizeof(err)), 0);
    assert_int_equal(res.steps_done, 0);
    assert_int_equal(apply_builtin(&f, "all-3g.20gb", false, &res, err, sizeof(err)), -EAGAIN);
    assert_non_null(strstr(err, "MIG mode is pending enable"));
    assert_int_equal(res.steps_done, 1);
    take_snap(&f, &s);
    assert_int_equal(s.cur, 0);
    assert_int_equal(s.pend, 1);
    assert_int_equal(reset_fn(&f)(0, rerr, sizeof(rerr)), 0);
    assert_int_equal(apply_builtin(&f, "all-3g.20gb", false, &res, err, sizeof(err)), 0);
    assert_int_equal(res.creates, 4);
    struct gs_mig_layout l;
    builtin_now(&f, "all-3g.20gb", &l);
    assert_int_equal(l.n, 2);
    assert_true(matches_now(&f, &l));
    /* Cancelling a pending disable: disable (pending), then ask for a layout again: the mode is
     * set back to enabled without a reset and the instances are created. */
    assert_int_equal(apply_builtin(&f, "all-disabled", false, &res, err, sizeof(err)), -EAGAIN);
    assert_int_equal(apply_builtin(&f, "all-balanced", false, &res, err, sizeof(err)), 0);
    builtin_now(&f, "all-balanced", &l);
    assert_true(matches_now(&f, &l));
    take_snap(&f, &s);
    assert_int_equal(s.cur, 1);
    assert_int_equal(s.pend, 1);
    fx_close(&f);
}

/* ---- b. property test: random layouts ------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void random_layout(uint64_t *rng, const struct gs_gpu *g, struct gs_mig_layout *l) {
    memset(l, 0, sizeof(*l));
    l->mig_enabled = true;
    unsigned r = (unsigned)(rng_next(rng) % 16);
    l->n = r == 0 ? 0 : r < 12 ? 1 + (unsigned)(rng_next(rng) % 5) : 1 + (unsigned)(rng_next(rng) % GS_MIG_MAX_INSTANCES);
    for (unsigned i = 0; i < l->n; i++)
        l->profile_ids[i] = g->profiles[rng_next(rng) % g->n_profiles].id;
}

/* Independent check of the placement problem (no shared code with the solver): can the profiles
 * `ids` be placed in slots not in `used`? Identical profiles take ascending starts. */
static bool place_rest(const struct gs_gpu *g, const unsigned *ids, unsigned n, unsigned i, unsigned used,
                       unsigned prev_start) {
    if (i == n)
        return true;
    const struct gs_gi_profile *p = gs_gpu_profile_by_id(g, ids[i]);
    bool same = i > 0 && ids[i - 1] == ids[i];
    for (unsigned k = 0; k < p->n_starts; k++) {
        unsigned st = p->starts[k];
        if (same && st <= prev_start)
            continue;
        unsigned m = ((1u << p->placement_size) - 1) << st;
        if (used & m)
            continue;
        if (place_rest(g, ids, n, i + 1, used | m, st))
            return true;
    }
    return false;
}

/* The most instances of `before` any placement of `want` can keep (brute force over subsets). */
static unsigned max_keepable(const struct gs_gpu *g, const struct snap *before, const struct gs_mig_layout *want) {
    unsigned best = 0;
    for (unsigned mask = 0; mask < (1u << before->n); mask++) {
        unsigned kept = (unsigned)__builtin_popcount(mask);
        if (kept <= best)
            continue;
        unsigned rest[GS_MIG_MAX_INSTANCES], n_rest = want->n;
        memcpy(rest, want->profile_ids, sizeof(rest));
        unsigned used = 0;
        bool ok = true;
        for (unsigned e = 0; e < before->n && ok; e++) {
            if (!(mask & (1u << e)))
                continue;
            ok = false;
            for (unsigned i = 0; i < n_rest; i++)
                if (rest[i] == before->gi[e].profile_id) {
                    rest[i] = rest[--n_rest];
                    ok = true;
                    break;
                }
            used |= ((1u << before->gi[e].size) - 1) << before->gi[e].start;
        }
        if (!ok)
            continue;
        /* sort the rest so identical profiles are adjacent */
        for (unsigned i = 0; i < n_rest; i++)
            for (unsigned k = i + 1; k < n_rest; k++)
                if (rest[k] < rest[i]) {
                    unsigned t = rest[i];
                    rest[i] = rest[k];
                    rest[k] = t;
                }
        if (place_rest(g, rest, n_rest, 0, used, 0))
            best = kept;
    }
    return best;
}

static void property_model(const char *model, unsigned seeds, unsigned steps) {
    unsigned applied = 0, refused = 0, kept_total = 0;
    for (unsigned seed = 1; seed <= seeds; seed++) {
        uint64_t rng = seed * 1000003ull + (uint64_t)(unsigned char)model[0] * 7919ull;
        struct sim_fixture f;
        open_model(&f, model, 1);
        struct gs_inventory *inv = read_inv(&f);
        struct gs_gpu *empty = malloc(sizeof(*empty));
        assert_non_null(empty);
        *empty = inv->gpus[0];
        empty->n_gis = 0;
        empty->n_mig = 0;
        free(inv);
        assert_true(empty->n_profiles >= 7);
        for (unsigned step = 0; step < steps; step++) {
            struct gs_mig_layout l;
            struct gs_mig_solution sol;
            char why[512];
            bool tested_refusal = false;
            for (unsigned draw = 0;; draw++) {
                assert_true(draw < 10000);
                random_layout(&rng, empty, &l);
                int r = gs_mig_solve(empty, &l, &sol, why, sizeof(why));
                if (r == 0)
                    break;
                assert_int_equal(r, -ENOSPC);
                if (tested_refusal || step % 3 != 0)
                    continue;
                /* Does not fit: refused before any change, with the reason. */
                tested_refusal = true;
                struct snap before, after;
                take_snap(&f, &before);
                struct gs_mig_apply_result res;
                char err[1024];
                int ar = apply_one(&f, &l, false, &res, err, sizeof(err));
                if (ar != -ENOSPC)
                    fail_msg("%s seed %u step %u: unfit layout: %d (%s), solver said %s", model, seed, step, ar, err,
                             why);
                char want_err[1100];
                snprintf(want_err, sizeof(want_err), "GPU 0: %s", why); /* errors name the GPU */
                assert_string_equal(err, want_err);
                assert_int_equal(res.steps_done, 0);
                take_snap(&f, &after);
                assert_snap_equal(&before, &after, "refused layout");
                refused++;
            }
            struct snap before, after;
            take_snap(&f, &before);
            inv = read_inv(&f);
            unsigned best = max_keepable(&inv->gpus[0], &before, &l);
            free(inv);
            struct gs_mig_apply_result res;
            char err[1024];
            int r = apply_one(&f, &l, false, &res, err, sizeof(err));
            if (r != 0)
                fail_msg("%s seed %u step %u: apply: %d: %s", model, seed, step, r, err);
            applied++;
            if (!matches_now(&f, &l))
                fail_msg("%s seed %u step %u: result does not match the layout", model, seed, step);
            take_snap(&f, &after);
            char what[128];
            snprintf(what, sizeof(what), "%s seed %u step %u", model, seed, step);
            unsigned stayed = assert_uuids_kept(&before, &after, what);
            if (stayed != best)
                fail_msg("%s: kept %u instances, %u could have stayed", what, stayed, best);
            assert_int_equal(res.kept, stayed);
            /* One CI and one GI destroyed per instance that goes, created per instance that comes. */
            assert_int_equal(res.destroys, 2 * (before.n - stayed));
            assert_int_equal(res.creates, 2 * (after.n - stayed));
            assert_int_equal(res.steps_done, res.destroys + res.creates);
            assert_int_equal(res.mode_changes, 0);
            assert_int_equal(res.passes, 1);
            kept_total += stayed;
        }
        free(empty);
        fx_close(&f);
    }
    assert_true(applied == seeds * steps);
    assert_true(refused > 0);
    assert_true(kept_total > 0);
}

static void test_property_h100(void **state) {
    (void)state;
    property_model("H100-SXM5-80GB", 20, 15);
}

static void test_property_a100(void **state) {
    (void)state;
    property_model("A100-SXM4-40GB", 20, 15);
}

/* ---- c. processes block destroys ------------------------------------------------------------------ */

static void test_process_blocks_destroy(void **state) {
    (void)state;
    struct sim_fixture f;
    open_model(&f, "H100-SXM5-80GB", 1);
    apply_ok(&f, "all-balanced");
    struct snap s0;
    take_snap(&f, &s0);
    assert_int_equal(s0.n, 4);
    gs_sim_process_add_fn add = (gs_sim_process_add_fn)gpu_node_symbol(f.node, "gpusliceSimProcessAdd");
    gs_sim_process_remove_fn rm = (gs_sim_process_remove_fn)gpu_node_symbol(f.node, "gpusliceSimProcessRemove");
    char serr[256];
    /* A process on a 1g instance that all-1g.10gb keeps: it does not block anything. */
    const struct snap_gi *small = NULL, *big = NULL;
    for (unsigned e = 0; e < s0.n; e++) {
        if (s0.gi[e].profile_id == 19 && (!small || s0.gi[e].start > small->start))
            small = &s0.gi[e];
        if (s0.gi[e].profile_id == 9)
            big = &s0.gi[e];
    }
    assert_non_null(small);
    assert_non_null(big);
    struct snap_gi keep = *small, busy = *big;
    assert_int_equal(add(0, (int)keep.gi_id, -1, 5151, 1 << 20, "infer", serr, sizeof(serr)), 0);
    struct gs_mig_apply_result res;
    char err[1024];
    assert_int_equal(apply_builtin(&f, "all-1g.10gb", false, &res, err, sizeof(err)), 0);
    struct snap s1;
    take_snap(&f, &s1);
    const struct snap_gi *k1 = snap_find(&s1, keep.profile_id, keep.start);
    assert_non_null(k1);
    assert_string_equal(k1->uuid, keep.uuid);
    assert_int_equal(apply_builtin(&f, "all-balanced", false, &res, err, sizeof(err)), 0);
    take_snap(&f, &s0);
    k1 = snap_find(&s0, keep.profile_id, keep.start);
    assert_non_null(k1);
    assert_string_equal(k1->uuid, keep.uuid);
    big = NULL;
    for (unsigned e = 0; e < s0.n; e++)
        if (s0.gi[e].profile_id == 9)
            big = &s0.gi[e];
    assert_non_null(big);
    busy = *big;
    /* A process on the 3g instance: all-1g.10gb would destroy it. */
    assert_int_equal(add(0, (int)busy.gi_id, -1, 4242, 1 << 20, "trainer", serr, sizeof(serr)), 0);
    struct gs_inventory *inv = read_inv(&f);
    struct gs_mig_plan *plans = calloc(GS_MAX_GPUS, sizeof(*plans));
    bool sel[GS_MAX_GPUS];
    assert_int_equal(gs_mig_plan_node(inv, NULL, "all-1g.10gb", plans, sel, err, sizeof(err)), 0);
    assert_int_equal(plans[0].n_busy, 1);
    assert_int_equal(plans[0].busy_pids[0], 4242);
    free(plans);
    free(inv);
    assert_int_equal(apply_builtin(&f, "all-1g.10gb", false, &res, err, sizeof(err)), -EBUSY);
    assert_non_null(strstr(err, "4242"));
    assert_non_null(strstr(err, "in use"));
    assert_non_null(strstr(err, "--force"));
    assert_null(strstr(err, "5151"));
    assert_int_equal(res.steps_done, 0);
    struct snap s2;
    take_snap(&f, &s2);
    assert_snap_equal(&s0, &s2, "refused: instance in use");
    /* Also for all-disabled and all-enabled. */
    assert_int_equal(apply_builtin(&f, "all-disabled", false, &res, err, sizeof(err)), -EBUSY);
    assert_int_equal(apply_builtin(&f, "all-enabled", false, &res, err, sizeof(err)), -EBUSY);
    take_snap(&f, &s2);
    assert_snap_equal(&s0, &s2, "refused: instance in use (disable)");
    /* --force: the driver still refuses to destroy an instance in use; the error names the step. */
    int r = apply_builtin(&f, "all-1g.10gb", true, &res, err, sizeof(err));
    assert_int_equal(r, -EBUSY);
    assert_non_null(strstr(err, "GPU 0: destroy-ci 3g.40gb failed: "));
    assert_non_null(strstr(err, "In use"));
    take_snap(&f, &s2);
    const struct snap_gi *b2 = snap_find(&s2, busy.profile_id, busy.start);
    assert_non_null(b2);
    assert_string_equal(b2->uuid, busy.uuid);
    k1 = snap_find(&s2, keep.profile_id, keep.start);
    assert_non_null(k1);
    assert_string_equal(k1->uuid, keep.uuid);
    /* The process ends: the apply converges, the instance with the other process stays. */
    assert_int_equal(rm(4242, -1, serr, sizeof(serr)), 0);
    assert_int_equal(apply_builtin(&f, "all-1g.10gb", false, &res, err, sizeof(err)), 0);
    struct gs_mig_layout l;
    builtin_now(&f, "all-1g.10gb", &l);
    assert_true(matches_now(&f, &l));
    take_snap(&f, &s2);
    k1 = snap_find(&s2, keep.profile_id, keep.start);
    assert_non_null(k1);
    assert_string_equal(k1->uuid, keep.uuid);
    assert_int_equal(rm(5151, -1, serr, sizeof(serr)), 0);
    fx_close(&f);
}

/* ---- an NVML call failing in the middle of an apply (GPUSLICE_SIM_FAULTS) ----------------------- */

/* The driver refuses the 2nd GPU instance of an apply: the apply stops and names the step and the
 * NVML error, what it did before stays (and kept instances keep their UUIDs), the node stays
 * readable, and the next apply converges. */
static void test_fault_second_create(void **state) {
    (void)state;
    struct sim_fixture f;
    open_model(&f, "H100-SXM5-80GB", 1);
    apply_ok(&f, "all-1g.10gb");
    struct snap s0;
    take_snap(&f, &s0);
    assert_int_equal(s0.n, 7);
    assert_int_equal(sim_fixture_faults(&f, "nvmlDeviceCreateGpuInstanceWithPlacement:2:NVML_ERROR_INSUFFICIENT_RESOURCES"),
                     0);
    struct gs_mig_apply_result res;
    char err[1024];
    assert_int_equal(apply_builtin(&f, "all-balanced", false, &res, err, sizeof(err)), -ENOSPC);
    assert_non_null(strstr(err, "GPU 0: create-gi "));
    assert_non_null(strstr(err, "Insufficient Resources"));
    assert_int_equal(res.creates, 2); /* the first GPU instance and its compute instance */
    assert_true(res.destroys > 0);
    struct snap s1;
    take_snap(&f, &s1);
    struct gs_mig_layout l;
    builtin_now(&f, "all-balanced", &l);
    assert_false(matches_now(&f, &l));
    assert_true(s1.n < s0.n);
    assert_uuids_kept(&s0, &s1, "interrupted by the fault");
    /* The schedule failed call 2 only: the same apply now converges. */
    assert_int_equal(apply_builtin(&f, "all-balanced", false, &res, err, sizeof(err)), 0);
    assert_true(matches_now(&f, &l));
    struct snap s2;
    take_snap(&f, &s2);
    assert_int_equal(assert_uuids_kept(&s1, &s2, "converged after the fault"), s1.n);
    assert_int_equal(sim_fixture_faults(&f, ""), 0);
    fx_close(&f);
}

/* ---- kept GPU instances with partial compute instances ------------------------------------------ */

/* A compute instance of `slices` compute slices in GI gi_id (CI profile index slices-1 for 1..4). */
static void make_partial_ci(struct sim_fixture *f, unsigned gi_id, unsigned ci_profile) {
    nvmlDevice_t d = sim_device(f, 0);
    nvmlGpuInstance_t gi;
    assert_int_equal(f->api->DeviceGetGpuInstanceById(d, gi_id, &gi), NVML_SUCCESS);
    nvmlComputeInstanceProfileInfo_t info;
    assert_int_equal(f->api->GpuInstanceGetComputeInstanceProfileInfo(gi, ci_profile,
                                                                       NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &info),
                     NVML_SUCCESS);
    nvmlComputeInstance_t ci;
    assert_int_equal(f->api->GpuInstanceCreateComputeInstance(gi, info.id, &ci), NVML_SUCCESS);
}

/* A GI at the right profile and placement whose compute instances are smaller than the GI (or
 * several) is kept: only its CIs are replaced by one full-size CI; a GI without a CI gets one. A
 * process on such a CI blocks the change. */
static void test_partial_compute_instances(void **state) {
    (void)state;
    struct sim_fixture f;
    open_model(&f, "H100-SXM5-80GB", 1);
    unsigned gi3, gi2, gi1;
    assert_int_equal(gpu_gi_create(f.node, 0, 9, 4, &gi3), 0);  /* 3g.40gb at 4: two CIs, 2c + 1c */
    make_partial_ci(&f, gi3, 1);
    make_partial_ci(&f, gi3, 0);
    assert_int_equal(gpu_gi_create(f.node, 0, 14, 0, &gi2), 0); /* 2g.20gb at 0: one 1c CI */
    make_partial_ci(&f, gi2, 0);
    assert_int_equal(gpu_gi_create(f.node, 0, 19, 2, &gi1), 0); /* 1g.10gb at 2: no CI */
    static const char *const names[] = { "3g.40gb", "2g.20gb", "1g.10gb" };
    static const unsigned counts[] = { 1, 1, 1 };
    struct gs_inventory *inv = read_inv(&f);
    struct gs_mig_layout l;
    char why[512];
    assert_int_equal(gs_mig_layout_from_names(&inv->gpus[0], true, names, counts, 3, &l, why, sizeof(why)), 0);
    assert_false(gs_mig_matches(&inv->gpus[0], &l));
    assert_int_equal(inv->gpus[0].n_mig, 3);
    free(inv);
    /* A process on the 2c CI of the 3g instance: the CI would be destroyed, so the apply refuses. */
    struct snap s0, s1;
    take_snap(&f, &s0);
    inv = read_inv(&f);
    unsigned busy_ci = ~0u;
    for (unsigned k = 0; k < inv->gpus[0].n_mig; k++)
        if (inv->gpus[0].mig[k].gi_id == gi3 && inv->gpus[0].mig[k].ci_slices == 2)
            busy_ci = inv->gpus[0].mig[k].ci_id;
    free(inv);
    assert_true(busy_ci != ~0u);
    gs_sim_process_add_fn add = (gs_sim_process_add_fn)gpu_node_symbol(f.node, "gpusliceSimProcessAdd");
    gs_sim_process_remove_fn rm = (gs_sim_process_remove_fn)gpu_node_symbol(f.node, "gpusliceSimProcessRemove");
    char serr[256], err[1024];
    assert_int_equal(add(0, (int)gi3, (int)busy_ci, 777, 1 << 20, "job", serr, sizeof(serr)), 0);
    struct gs_mig_apply_result res;
    assert_int_equal(apply_one(&f, &l, false, &res, err, sizeof(err)), -EBUSY);
    assert_non_null(strstr(err, "777"));
    take_snap(&f, &s1);
    assert_snap_equal(&s0, &s1, "partial CI in use");
    assert_int_equal(rm(777, -1, serr, sizeof(serr)), 0);
    /* Now: the three GIs stay (same GI IDs); CIs: 3 destroyed, 3 full ones created. */
    assert_int_equal(apply_one(&f, &l, false, &res, err, sizeof(err)), 0);
    assert_int_equal(res.kept, 3);
    assert_int_equal(res.destroys, 3);
    assert_int_equal(res.creates, 3);
    assert_true(matches_now(&f, &l));
    take_snap(&f, &s1);
    assert_int_equal(s1.n, 3);
    const struct snap_gi *x = snap_find(&s1, 9, 4), *y = snap_find(&s1, 14, 0), *z = snap_find(&s1, 19, 2);
    assert_non_null(x);
    assert_non_null(y);
    assert_non_null(z);
    assert_int_equal(x->gi_id, gi3);
    assert_int_equal(y->gi_id, gi2);
    assert_int_equal(z->gi_id, gi1);
    inv = read_inv(&f);
    for (unsigned k = 0; k < inv->gpus[0].n_mig; k++)
        assert_int_equal(inv->gpus[0].mig[k].ci_slices, inv->gpus[0].mig[k].gi_slices);
    free(inv);
    fx_close(&f);
}

/* ---- several GPUs: all or nothing ---------------------------------------------------------------- */

/* The whole node is planned before anything changes: one GPU's unsolvable layout or busy instance
 * stops the others too; GPUs not selected are never touched. */
static void test_multi_gpu_all_or_nothing(void **state) {
    (void)state;
    struct sim_fixture f;
    fx_open(&f, "gpus:\n  - model: H100-SXM5-80GB\n    count: 2\n    mig: enabled\n  - model: L4\n");
    apply_ok(&f, "all-balanced");
    struct snap g0, g1, l4, now;
    take_snap_gpu(&f, 0, &g0);
    take_snap_gpu(&f, 1, &g1);
    take_snap_gpu(&f, 2, &l4);
    assert_int_equal(g0.n, 4);
    assert_int_equal(g1.n, 4);
    struct gs_mig_layout *ls = calloc(GS_MAX_GPUS, sizeof(*ls));
    bool sel[GS_MAX_GPUS] = { false };
    struct gs_mig_apply_result res;
    char err[1024];
    /* GPU 0: 7 x 1g (fits); GPU 1: 3 x 3g (does not). */
    ls[0] = (struct gs_mig_layout){ true, 7, { 19, 19, 19, 19, 19, 19, 19 } };
    ls[1] = (struct gs_mig_layout){ true, 3, { 9, 9, 9 } };
    sel[0] = sel[1] = true;
    assert_int_equal(gs_mig_apply_layouts(f.node, ls, sel, false, &res, err, sizeof(err)), -ENOSPC);
    assert_int_equal(res.steps_done, 0);
    take_snap_gpu(&f, 0, &now);
    assert_snap_equal(&g0, &now, "GPU 0 while GPU 1 does not fit");
    take_snap_gpu(&f, 1, &now);
    assert_snap_equal(&g1, &now, "GPU 1 that does not fit");
    /* GPU 1: a process on an instance its layout destroys. */
    ls[1] = (struct gs_mig_layout){ true, 1, { 0 } }; /* 7g.80gb */
    gs_sim_process_add_fn add = (gs_sim_process_add_fn)gpu_node_symbol(f.node, "gpusliceSimProcessAdd");
    gs_sim_process_remove_fn rm = (gs_sim_process_remove_fn)gpu_node_symbol(f.node, "gpusliceSimProcessRemove");
    char serr[256];
    assert_int_equal(add(1, (int)g1.gi[0].gi_id, -1, 31337, 1 << 20, "job", serr, sizeof(serr)), 0);
    assert_int_equal(gs_mig_apply_layouts(f.node, ls, sel, false, &res, err, sizeof(err)), -EBUSY);
    assert_non_null(strstr(err, "GPU 1 (NVIDIA H100 80GB HBM3)"));
    assert_non_null(strstr(err, "31337"));
    assert_int_equal(res.steps_done, 0);
    take_snap_gpu(&f, 0, &now);
    assert_snap_equal(&g0, &now, "GPU 0 while GPU 1 is busy");
    take_snap_gpu(&f, 1, &now);
    assert_snap_equal(&g1, &now, "busy GPU 1");
    /* Only GPU 0 selected: GPU 1 (busy) and the L4 are left alone. */
    sel[1] = false;
    assert_int_equal(gs_mig_apply_layouts(f.node, ls, sel, false, &res, err, sizeof(err)), 0);
    take_snap_gpu(&f, 0, &now);
    assert_int_equal(now.n, 7);
    assert_int_equal(assert_uuids_kept(&g0, &now, "GPU 0 alone"), 2);
    take_snap_gpu(&f, 1, &now);
    assert_snap_equal(&g1, &now, "GPU 1 not selected");
    take_snap_gpu(&f, 2, &now);
    assert_snap_equal(&l4, &now, "L4");
    assert_int_equal(rm(31337, -1, serr, sizeof(serr)), 0);
    free(ls);
    fx_close(&f);
}

/* Runs fn(ctx) in a child whose apply exits abruptly (99) after n state-changing steps (0 if it
 * finishes first, 1 if it fails); returns the child's exit status. */
static int crash_after(unsigned n, int (*fn)(void *), void *ctx) {
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char v[16];
        snprintf(v, sizeof(v), "%u", n);
        setenv("GPUSLICE_FAULT_EXIT_AFTER_STEPS", v, 1);
        _exit(fn(ctx) == 0 ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* ---- d. crash between any two steps ---------------------------------------------------------------- */

struct transition {
    const char *name;
    const char *model;
    int mig;                 /* node file */
    const char *start;       /* built-in config for the start state (NULL: the node as described) */
    const char *target;      /* config name: built-in, or in `file` */
    const char *file;        /* layout file text or NULL */
    unsigned expect_steps;
};

static const char crash_layouts[] =
    "version: v1\n"
    "mig-configs:\n"
    "  big-two:\n"
    "    - devices: all\n"
    "      mig-enabled: true\n"
    "      mig-devices: {\"3g.20gb\": 1, \"4g.20gb\": 1}\n"
    "  three-and-four-small:\n"
    "    - devices: all\n"
    "      mig-enabled: true\n"
    "      mig-devices:\n"
    "        \"3g.40gb\": 1\n"
    "        \"1g.10gb\": 4\n";

static int run_transition(struct sim_fixture *f, const struct transition *t, const struct gs_layout_file *lf,
                          struct gs_mig_apply_result *res, char *err, size_t errlen) {
    err[0] = '\0';
    return gs_mig_apply_node(f->node, lf, t->target, false, res, err, errlen);
}

struct transition_run {
    struct sim_fixture *f;
    const struct transition *t;
    const struct gs_layout_file *lf;
};

static int transition_child(void *ctx) {
    struct transition_run *x = ctx;
    struct gs_mig_apply_result res;
    char err[1024];
    return run_transition(x->f, x->t, x->lf, &res, err, sizeof(err));
}

static void setup_start(struct sim_fixture *f, const struct transition *t, struct snap *s) {
    open_model(f, t->model, t->mig);
    if (t->start)
        apply_ok(f, t->start);
    take_snap(f, s);
}

static void check_converged(struct sim_fixture *f, const struct transition *t, const struct gs_layout_file *lf,
                            const struct snap *start, const char *what) {
    struct gs_inventory *inv = read_inv(f);
    struct gs_mig_layout *ls = calloc(GS_MAX_GPUS, sizeof(*ls));
    bool sel[GS_MAX_GPUS];
    char err[1024];
    assert_int_equal(gs_mig_resolve(inv, lf, t->target, ls, sel, err, sizeof(err)), 0);
    assert_true(sel[0]);
    if (!gs_mig_matches(&inv->gpus[0], &ls[0]))
        fail_msg("%s: did not converge to %s", what, t->target);
    struct snap now;
    snap_of(&inv->gpus[0], &now);
    assert_uuids_kept(start, &now, what);
    free(ls);
    free(inv);
}

static void crash_transition(const struct transition *t) {
    struct gs_layout_file *lf = NULL;
    char err[1024];
    if (t->file) {
        lf = calloc(1, sizeof(*lf));
        assert_non_null(lf);
        int r = gs_miglayout_parse("crash.yaml", t->file, strlen(t->file), lf, err, sizeof(err));
        if (r != 0)
            fail_msg("parse: %s", err);
    }
    /* Without a fault: how many steps the transition takes. */
    struct sim_fixture f;
    struct snap start;
    setup_start(&f, t, &start);
    struct gs_mig_apply_result res;
    int r = run_transition(&f, t, lf, &res, err, sizeof(err));
    if (r != 0)
        fail_msg("%s: %d: %s", t->name, r, err);
    unsigned k = res.steps_done;
    assert_int_equal(k, t->expect_steps);
    check_converged(&f, t, lf, &start, t->name);
    fx_close(&f);
    for (unsigned n = 1; n <= k + 1; n++) {
        setup_start(&f, t, &start);
        struct transition_run tr = { &f, t, lf };
        int status = crash_after(n, transition_child, &tr);
        if (status != (n <= k ? 99 : 0))
            fail_msg("%s: fault after %u of %u steps: child exit %d", t->name, n, k, status);
        char what[128];
        snprintf(what, sizeof(what), "%s, crash after step %u of %u", t->name, n, k);
        r = run_transition(&f, t, lf, &res, err, sizeof(err));
        if (r != 0)
            fail_msg("%s: rerun: %d: %s", what, r, err);
        /* The rerun does only what was left. */
        if (res.steps_done != (n <= k ? k - n : 0))
            fail_msg("%s: rerun took %u steps, %u were left", what, res.steps_done, n <= k ? k - n : 0);
        check_converged(&f, t, lf, &start, what);
        fx_close(&f);
    }
    free(lf);
}

static void test_crash_h100_balanced_to_1g(void **state) {
    (void)state;
    /* 3g@4 2g@0 1g@2 1g@3 -> 7 x 1g: keep the two 1g, destroy 2 (4 steps), create 5 (10 steps) */
    const struct transition t = { "H100 all-balanced -> all-1g.10gb", "H100-SXM5-80GB", 1, "all-balanced",
                                  "all-1g.10gb", NULL, 14 };
    crash_transition(&t);
}

static void test_crash_h100_disabled_to_balanced(void **state) {
    (void)state;
    const struct transition t = { "H100 MIG disabled -> all-balanced", "H100-SXM5-80GB", 0, NULL, "all-balanced",
                                  NULL, 9 };
    crash_transition(&t);
}

static void test_crash_a100_small_to_big(void **state) {
    (void)state;
    const struct transition t = { "A100 7 x 1g.5gb -> 3g.20gb + 4g.20gb", "A100-SXM4-40GB", 1, "all-1g.5gb", "big-two",
                                  crash_layouts, 18 };
    crash_transition(&t);
}

static void test_crash_h100_keeps_common(void **state) {
    (void)state;
    /* all-balanced (3g@4 2g@0 1g@2 1g@3) -> 3g + 4 x 1g: 3g and both 1g stay; 2g goes (2 steps);
     * 1g@0 and 1g@1 come (4 steps) */
    const struct transition t = { "H100 all-balanced -> 3g + 4 x 1g", "H100-SXM5-80GB", 1, "all-balanced",
                                  "three-and-four-small", crash_layouts, 6 };
    crash_transition(&t);
}

/* Random transitions with a crash after a random step: the rerun converges, does only what was
 * left, and the instances the start and the result share keep their UUIDs, as many as could. */
struct layout_run {
    struct sim_fixture *f;
    const struct gs_mig_layout *l;
};

static int layout_child(void *ctx) {
    struct layout_run *x = ctx;
    struct gs_mig_apply_result res;
    char err[1024];
    return apply_one(x->f, x->l, false, &res, err, sizeof(err));
}

static void crash_property(const char *model, unsigned seeds, unsigned steps) {
    unsigned crashed = 0;
    for (unsigned seed = 1; seed <= seeds; seed++) {
        uint64_t rng = seed * 7777777ull + (uint64_t)(unsigned char)model[0];
        struct sim_fixture f;
        open_model(&f, model, 1);
        struct gs_inventory *inv = read_inv(&f);
        struct gs_gpu *empty = malloc(sizeof(*empty));
        assert_non_null(empty);
        *empty = inv->gpus[0];
        empty->n_gis = 0;
        empty->n_mig = 0;
        free(inv);
        for (unsigned step = 0; step < steps; step++) {
            struct gs_mig_layout l;
            struct gs_mig_solution sol;
            char why[512], err[1024];
            do
                random_layout(&rng, empty, &l);
            while (gs_mig_solve(empty, &l, &sol, why, sizeof(why)) != 0);
            struct snap before, after;
            take_snap(&f, &before);
            inv = read_inv(&f);
            unsigned best = max_keepable(&inv->gpus[0], &before, &l);
            struct gs_mig_plan plan;
            assert_int_equal(gs_mig_diff(&inv->gpus[0], &l, &plan, why, sizeof(why)), 0);
            free(inv);
            unsigned k = plan.n_steps, n = 0;
            if (k > 0) {
                n = 1 + (unsigned)(rng_next(&rng) % k);
                struct layout_run lr = { &f, &l };
                assert_int_equal(crash_after(n, layout_child, &lr), 99);
                crashed++;
            }
            struct gs_mig_apply_result res;
            int r = apply_one(&f, &l, false, &res, err, sizeof(err));
            char what[160];
            snprintf(what, sizeof(what), "%s seed %u step %u (crash after %u of %u)", model, seed, step, n, k);
            if (r != 0)
                fail_msg("%s: rerun: %d: %s", what, r, err);
            if (res.steps_done != k - n)
                fail_msg("%s: rerun took %u steps, %u were left", what, res.steps_done, k - n);
            if (!matches_now(&f, &l))
                fail_msg("%s: did not converge", what);
            take_snap(&f, &after);
            unsigned stayed = assert_uuids_kept(&before, &after, what);
            if (stayed != best)
                fail_msg("%s: %u instances kept, %u could have been", what, stayed, best);
        }
        free(empty);
        fx_close(&f);
    }
    assert_true(crashed > seeds * steps / 2);
}

static void test_crash_property(void **state) {
    (void)state;
    crash_property("H100-SXM5-80GB", 5, 10);
    crash_property("A100-SXM4-40GB", 5, 10);
}

/* ---- d2. around what pods hold ---------------------------------------------------------------------- */

/* A pod holds the 3g.40gb of all-balanced (at 4); all-1g.10gb is laid out around it: the 3g stays
 * with its GI and UUID, the 2g at 0 gives way to two 1g (the 1g at 2 and 3 stay), nothing else.
 * A crash after any step and a rerun with the same holds end there too, the held instance there at
 * every point; once released, the layout is made whole. The refusing apply refuses instead. */
/* One pod holding the device uuid (NULL: none). */
static struct gs_mig_holds one_hold(struct gs_mig_hold *item, const char *uuid) {
    *item = (struct gs_mig_hold){ .who = "team-a/train-0, container main" };
    snprintf(item->uuid, sizeof(item->uuid), "%s", uuid ? uuid : "");
    snprintf(item->device_id, sizeof(item->device_id), "%s", uuid ? uuid : "");
    return (struct gs_mig_holds){ uuid ? 1 : 0, item };
}

static int apply_keep_held(struct sim_fixture *f, const char *uuid, struct gs_mig_apply_result *res,
                           struct gs_mig_relay *relays, char *err, size_t errlen) {
    struct gs_mig_hold item;
    struct gs_mig_holds h = one_hold(&item, uuid);
    err[0] = '\0';
    return gs_mig_apply_node_keep_held(f->node, NULL, "all-1g.10gb", &h, false, res, relays, err, errlen);
}

struct held_run {
    struct sim_fixture *f;
    const char *uuid;
    struct gs_mig_relay *relays;
};

static int held_child(void *ctx) {
    struct held_run *x = ctx;
    struct gs_mig_apply_result res;
    char err[1024];
    return apply_keep_held(x->f, x->uuid, &res, x->relays, err, sizeof(err));
}

static void check_around_held(struct sim_fixture *f, const struct snap *start, const struct snap_gi *held,
                              const char *what) {
    struct snap now;
    take_snap(f, &now);
    const struct snap_gi *x = snap_find(&now, held->profile_id, held->start);
    if (!x || x->gi_id != held->gi_id || strcmp(x->uuid, held->uuid) || x->n_ci != 1)
        fail_msg("%s: the held instance %s did not stay", what, held->uuid);
    assert_int_equal(now.n, 5);
    for (unsigned s = 0; s < 4; s++) {
        const struct snap_gi *one = snap_find(&now, 19, s); /* 1g.10gb */
        if (!one)
            fail_msg("%s: no 1g.10gb at %u", what, s);
    }
    assert_int_equal(assert_uuids_kept(start, &now, what), 3);
}

static void test_keep_held_instance(void **state) {
    (void)state;
    struct sim_fixture f;
    struct snap start;
    struct gs_mig_apply_result res;
    struct gs_mig_relay *relays = calloc(GS_MAX_GPUS, sizeof(*relays));
    char err[1024];
    assert_non_null(relays);
    open_model(&f, "H100-SXM5-80GB", 1);
    apply_ok(&f, "all-balanced");
    take_snap(&f, &start);
    const struct snap_gi *big = snap_find(&start, 9, 4); /* 3g.40gb at 4 */
    assert_non_null(big);
    struct snap_gi held = *big;
    /* The refusing apply (gpuslice mig apply) changes nothing. */
    struct gs_mig_hold item;
    struct gs_mig_holds h = one_hold(&item, held.uuid);
    assert_int_equal(gs_mig_apply_node_held(f.node, NULL, "all-1g.10gb", &h, false, &res, err, sizeof(err)), -EBUSY);
    struct snap now;
    take_snap(&f, &now);
    assert_snap_equal(&start, &now, "refused");
    /* Around it: 2 destroy steps (the 2g's CI and GI), 4 create steps (two 1g). */
    assert_int_equal(apply_keep_held(&f, held.uuid, &res, relays, err, sizeof(err)), 0);
    assert_int_equal(res.steps_done, 6);
    assert_int_equal(res.n_partial, 1);
    assert_true(relays[0].partial);
    assert_string_equal(relays[0].not_made, "3 x 1g.10gb");
    assert_non_null(strstr(relays[0].kept, held.uuid));
    assert_non_null(strstr(relays[0].kept, "team-a/train-0"));
    check_around_held(&f, &start, &held, "around the held 3g.40gb");
    /* Again: nothing to do, still partial. */
    assert_int_equal(apply_keep_held(&f, held.uuid, &res, relays, err, sizeof(err)), 0);
    assert_int_equal(res.steps_done, 0);
    assert_int_equal(res.n_partial, 1);
    /* Released: the whole layout, 7 x 1g.10gb. */
    assert_int_equal(apply_keep_held(&f, NULL, &res, relays, err, sizeof(err)), 0);
    assert_int_equal(res.n_partial, 0);
    assert_false(relays[0].partial);
    take_snap(&f, &now);
    assert_int_equal(now.n, 7);
    assert_false(snap_has_uuid(&now, held.uuid));
    fx_close(&f);

    for (unsigned n = 1; n <= 7; n++) {
        open_model(&f, "H100-SXM5-80GB", 1);
        apply_ok(&f, "all-balanced");
        take_snap(&f, &start);
        big = snap_find(&start, 9, 4); /* a new node: new UUIDs */
        assert_non_null(big);
        held = *big;
        struct held_run hr = { &f, held.uuid, relays };
        int status = crash_after(n, held_child, &hr);
        if (status != (n <= 6 ? 99 : 0))
            fail_msg("fault after %u of 6 steps: child exit %d", n, status);
        char what[96];
        snprintf(what, sizeof(what), "around the held 3g.40gb, crash after step %u of 6", n);
        take_snap(&f, &now);
        if (!snap_has_uuid(&now, held.uuid))
            fail_msg("%s: the held instance is gone", what);
        assert_int_equal(apply_keep_held(&f, held.uuid, &res, relays, err, sizeof(err)), 0);
        if (res.steps_done != (n <= 6 ? 6 - n : 0))
            fail_msg("%s: rerun took %u steps", what, res.steps_done);
        check_around_held(&f, &start, &held, what);
        fx_close(&f);
    }
    free(relays);
}

/* ---- e. layout files with errors --------------------------------------------------------------------- */

static const char bad_layouts[] =
    "version: v1\n"
    "mig-configs:\n"
    "  wrong-model:\n"
    "    - devices: all\n"
    "      mig-enabled: true\n"
    "      mig-devices:\n"
    "        \"1g.10gb\": 2\n"
    "        \"1g.5gb\": 1\n"
    "  too-big:\n"
    "    - devices: all\n"
    "      mig-enabled: true\n"
    "      mig-devices:\n"
    "        \"4g.40gb\": 1\n"
    "        \"3g.40gb\": 1\n"
    "        \"1g.10gb\": 1\n"
    "  too-many:\n"
    "    - devices: all\n"
    "      mig-enabled: true\n"
    "      mig-devices: {\"1g.20gb\": 5}\n"
    "  too-much-compute:\n"
    "    - devices: all\n"
    "      mig-enabled: true\n"
    "      mig-devices: {\"4g.40gb\": 1, \"2g.20gb\": 2}\n"
    "  me-twice:\n"
    "    - devices: all\n"
    "      mig-enabled: true\n"
    "      mig-devices: {\"1g.10gb+me\": 2}\n"
    "  other-gpus-only:\n"
    "    - devices: [3]\n"
    "      mig-enabled: false\n"
    "  fine:\n"
    "    - devices: all\n"
    "      mig-enabled: true\n"
    "      mig-devices: {\"3g.40gb\": 2}\n";

static void test_layout_file_errors(void **state) {
    (void)state;
    struct sim_fixture f;
    open_model(&f, "H100-SXM5-80GB", 1);
    apply_ok(&f, "all-balanced");
    char path[400];
    snprintf(path, sizeof(path), "%s/layouts.yaml", f.dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(bad_layouts, fp);
    fclose(fp);
    struct gs_layout_file *lf = calloc(1, sizeof(*lf));
    char err[1024];
    if (gs_miglayout_load(path, lf, err, sizeof(err)) != 0)
        fail_msg("load: %s", err);
    struct gs_layout_file *lf2 = calloc(1, sizeof(*lf2));
    assert_int_equal(gs_miglayout_parse("layouts.yaml", bad_layouts, strlen(bad_layouts), lf2, err, sizeof(err)), 0);
    assert_int_equal(lf2->n_configs, lf->n_configs);
    free(lf2);
    struct snap before, after;
    take_snap(&f, &before);
    struct gs_mig_apply_result res;
    static const struct {
        const char *config;
        int rc;
        const char *msg[3];
    } cases[] = {
        { "wrong-model", -EINVAL,
          { "mig-configs.wrong-model: GPU 0 (NVIDIA H100 80GB HBM3) has no MIG profile 1g.5gb; it has",
            "1g.10gb", "7g.80gb" } },
        { "too-big", -ENOSPC, { "4g.40gb + 3g.40gb + 1g.10gb needs 9 memory slices, the GPU has 8", NULL, NULL } },
        { "too-many", -ENOSPC, { "asks for 5 x 1g.20gb, the GPU allows at most 4", NULL, NULL } },
        { "too-much-compute", -ENOSPC, { "needs 8 compute slices, the GPU has 7", NULL, NULL } },
        { "me-twice", -ENOSPC, { "2 x 1g.10gb+me, the GPU allows at most 1", NULL, NULL } },
        { "no-such-config", -ENOENT, { "layouts.yaml: no MIG config 'no-such-config'", NULL, NULL } },
    };
    for (size_t i = 0; i < GS_ARRAY_SIZE(cases); i++) {
        memset(&res, 0, sizeof(res));
        err[0] = '\0';
        int r = gs_mig_apply_node(f.node, lf, cases[i].config, false, &res, err, sizeof(err));
        if (r != cases[i].rc)
            fail_msg("%s: %d (%s), expected %d", cases[i].config, r, err, cases[i].rc);
        for (int k = 0; k < 3 && cases[i].msg[k]; k++)
            if (!strstr(err, cases[i].msg[k]))
                fail_msg("%s: '%s' lacks '%s'", cases[i].config, err, cases[i].msg[k]);
        assert_int_equal(res.steps_done, 0);
        take_snap(&f, &after);
        assert_snap_equal(&before, &after, cases[i].config);
        /* plan says the same */
        struct gs_inventory *inv = read_inv(&f);
        struct gs_mig_plan *plans = calloc(GS_MAX_GPUS, sizeof(*plans));
        bool sel[GS_MAX_GPUS];
        char perr[1024] = "";
        assert_int_equal(gs_mig_plan_node(inv, lf, cases[i].config, plans, sel, perr, sizeof(perr)), cases[i].rc);
        assert_string_equal(perr, err);
        free(plans);
        free(inv);
    }
    /* The unknown-profile error names the file and a line of the config. */
    memset(&res, 0, sizeof(res));
    assert_int_equal(gs_mig_apply_node(f.node, lf, "wrong-model", false, &res, err, sizeof(err)), -EINVAL);
    char prefix[420];
    snprintf(prefix, sizeof(prefix), "%s:", path);
    assert_memory_equal(err, prefix, strlen(prefix));
    unsigned line = (unsigned)atoi(err + strlen(prefix));
    assert_true(line >= 4 && line <= 8);
    /* A config naming a GPU this node does not have is an error at the index (it was applied
     * as selecting nothing, silently), and changes nothing. */
    memset(&res, 0, sizeof(res));
    assert_int_equal(gs_mig_apply_node(f.node, lf, "other-gpus-only", false, &res, err, sizeof(err)), -ENODEV);
    assert_non_null(strstr(err, ": mig-configs.other-gpus-only[0].devices[0]: GPU 3 is not on this node"));
    assert_int_equal(res.steps_done, 0);
    take_snap(&f, &after);
    assert_snap_equal(&before, &after, "other-gpus-only");
    /* The file's config: applied, the 3g instance at 0 stays. */
    assert_int_equal(gs_mig_apply_node(f.node, lf, "fine", false, &res, err, sizeof(err)), 0);
    take_snap(&f, &after);
    assert_int_equal(after.n, 2);
    assert_int_equal(assert_uuids_kept(&before, &after, "fine"), 1);
    /* A file config shadows the built-in of the same name. */
    static const char shadow[] = "version: v1\nmig-configs:\n  all-balanced:\n    - devices: all\n"
                                 "      mig-enabled: true\n      mig-devices: {\"7g.80gb\": 1}\n";
    assert_int_equal(gs_miglayout_parse("shadow.yaml", shadow, strlen(shadow), lf, err, sizeof(err)), 0);
    assert_int_equal(gs_mig_apply_node(f.node, lf, "all-balanced", false, &res, err, sizeof(err)), 0);
    take_snap(&f, &after);
    assert_int_equal(after.n, 1);
    assert_int_equal(after.gi[0].profile_id, 0);
    free(lf);
    fx_close(&f);
}

int main(void) {
    gs_log_set_level(GS_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_builtins_every_model, close_fixtures),
        cmocka_unit_test_teardown(test_ampere_reset_flow, close_fixtures),
        cmocka_unit_test_teardown(test_property_h100, close_fixtures),
        cmocka_unit_test_teardown(test_property_a100, close_fixtures),
        cmocka_unit_test_teardown(test_process_blocks_destroy, close_fixtures),
        cmocka_unit_test_teardown(test_fault_second_create, close_fixtures),
        cmocka_unit_test_teardown(test_partial_compute_instances, close_fixtures),
        cmocka_unit_test_teardown(test_multi_gpu_all_or_nothing, close_fixtures),
        cmocka_unit_test_teardown(test_crash_h100_balanced_to_1g, close_fixtures),
        cmocka_unit_test_teardown(test_crash_h100_disabled_to_balanced, close_fixtures),
        cmocka_unit_test_teardown(test_crash_a100_small_to_big, close_fixtures),
        cmocka_unit_test_teardown(test_crash_h100_keeps_common, close_fixtures),
        cmocka_unit_test_teardown(test_crash_property, close_fixtures),
        cmocka_unit_test_teardown(test_keep_held_instance, close_fixtures),
        cmocka_unit_test_teardown(test_layout_file_errors, close_fixtures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
