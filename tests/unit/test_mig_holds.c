/* test_mig_holds.c: which devices pods hold, from a PodResources list and the inventory, and
 * which of those a MIG plan would destroy (src/mig/holds.c, pure). */
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
#include "mig/holds.h"

/* GPU 0: an H100 in MIG mode with all-balanced (GIs 10.., one full CI each): MIG-a0 and MIG-a1
 * are the 1g.10gb, MIG-a2 the 2g.20gb, MIG-a3 the 3g.40gb; GPU 1: an H100 with MIG off. */
static struct gs_inventory *node(void) {
    struct gs_inventory *inv = calloc(1, sizeof(*inv));
    assert_non_null(inv);
    inv->n_gpus = 2;
    for (unsigned i = 0; i < 2; i++) {
        struct gs_gpu *g = &inv->gpus[i];
        gs_mig_gpu_from_model(gs_catalog_find("H100-SXM5-80GB"), g);
        g->index = i;
        snprintf(g->uuid, sizeof(g->uuid), "GPU-%u", i);
    }
    struct gs_gpu *g = &inv->gpus[0];
    struct gs_mig_layout bal;
    struct gs_mig_solution s;
    char why[256];
    assert_int_equal(gs_mig_builtin(g, "all-balanced", &bal, why, sizeof(why)), 0);
    assert_int_equal(gs_mig_solve(g, &bal, &s, why, sizeof(why)), 0);
    unsigned ones = 0;
    for (unsigned k = 0; k < s.n; k++) {
        const struct gs_gi_profile *p = gs_gpu_profile_by_id(g, s.inst[k].profile_id);
        unsigned name = p->name[0] == '1' ? ones++ : p->name[0] == '2' ? 2 : 3;
        g->gis[g->n_gis++] = (struct gs_gpu_instance){ 10 + k, s.inst[k].profile_id, s.inst[k].start, s.inst[k].size, 1 };
        struct gs_mig_device *d = &g->mig[g->n_mig++];
        d->gi_id = 10 + k;
        d->ci_id = 0;
        d->gi_profile_id = s.inst[k].profile_id;
        d->gi_slices = d->ci_slices = p->slices;
        snprintf(d->uuid, sizeof(d->uuid), "MIG-a%u", name);
        snprintf(d->profile, sizeof(d->profile), "%s", p->name);
    }
    inv->gpus[1].mig_current = inv->gpus[1].mig_pending = false;
    return inv;
}

static const struct gs_mig_device *device(const struct gs_gpu *g, const char *uuid) {
    for (unsigned k = 0; k < g->n_mig; k++)
        if (!strcmp(g->mig[k].uuid, uuid))
            return &g->mig[k];
    fail_msg("no MIG device %s", uuid);
    return NULL;
}

static struct pr_assignment as(const char *ns, const char *pod, const char *resource, const char *id) {
    return (struct pr_assignment){ (char *)pod, (char *)ns, (char *)"main", (char *)resource, (char *)id };
}

/* The list the tests use: held MIG devices, a replica of one, a whole GPU, and IDs that only look
 * like ours. */
static void holds_of(const struct gs_inventory *inv, struct gs_mig_holds *h) {
    struct pr_assignment items[] = {
        as("team-a", "train-0", "nvidia.com/mig-1g.10gb", "MIG-a0"),
        as("team-b", "infer-1", "example.com/slices", "MIG-a2::3"), /* a replica, a renamed resource */
        as("team-c", "whole", "nvidia.com/gpu", "GPU-1"),
        as("team-d", "other", "nvidia.com/gpu", "GPU-9"),          /* another node's */
        as("team-d", "other", "nvidia.com/gpu", "MIG-a1::x"),      /* not a replica suffix */
        as("team-d", "other", "nvidia.com/gpu", "MIG-a1::"),
        as("team-d", "other", "nvidia.com/gpu", "MIG-a"),          /* a prefix of ours */
        as("team-d", "other", "nvidia.com/gpu", "MIG-a10"),
        as("team-d", "other", "example.com/nic", "0000:01:00.0"),
    };
    struct pr_list l = { sizeof(items) / sizeof(items[0]), items };
    assert_int_equal(gs_mig_holds_find(inv, &l, h), 0);
}

static void test_find(void **state) {
    (void)state;
    struct gs_inventory *inv = node();
    struct gs_mig_holds h;
    holds_of(inv, &h);
    assert_int_equal(h.n, 3);
    assert_string_equal(h.items[0].uuid, "MIG-a0");
    assert_string_equal(h.items[0].device_id, "MIG-a0");
    assert_string_equal(h.items[0].who, "team-a/train-0, container main");
    assert_string_equal(h.items[1].uuid, "MIG-a2");
    assert_string_equal(h.items[1].device_id, "MIG-a2::3");
    assert_string_equal(h.items[1].who, "team-b/infer-1, container main");
    assert_string_equal(h.items[2].uuid, "GPU-1");
    gs_mig_holds_free(&h);
    assert_int_equal(h.n, 0);
    assert_null(h.items);

    struct pr_list empty = { 0, NULL };
    assert_int_equal(gs_mig_holds_find(inv, &empty, &h), 0);
    assert_int_equal(h.n, 0);
    gs_mig_holds_free(&h);
    free(inv);
}

static size_t held(const struct gs_inventory *inv, unsigned gpu, const char *layout, const struct gs_mig_holds *h,
                   char *msg, size_t len) {
    const struct gs_gpu *g = &inv->gpus[gpu];
    struct gs_mig_layout l;
    struct gs_mig_plan p;
    char why[256];
    const struct gs_gpu *table = g;
    struct gs_gpu *on = NULL;
    if (!g->mig_current) { /* profiles of the same model, as apply checks a layout for a GPU with MIG off */
        on = calloc(1, sizeof(*on));
        gs_mig_gpu_from_model(gs_catalog_find("H100-SXM5-80GB"), on);
        table = on;
    }
    assert_int_equal(gs_mig_builtin(table, layout, &l, why, sizeof(why)), 0);
    free(on);
    assert_int_equal(gs_mig_diff(g, &l, &p, why, sizeof(why)), 0);
    return gs_mig_plan_held(g, &p, h, msg, len);
}

static void test_plan_held(void **state) {
    (void)state;
    struct gs_inventory *inv = node();
    struct gs_mig_holds h;
    holds_of(inv, &h);
    char msg[1024];
    /* Nothing to do: nothing destroyed. */
    assert_int_equal(held(inv, 0, "all-balanced", &h, msg, sizeof(msg)), 0);
    assert_string_equal(msg, "");
    /* 7 x 1g.10gb keeps the two 1g (MIG-a0 among them) and destroys the 2g and the 3g: the pod's
     * replica of the 2g is in the way, the 1g's pod is not. */
    const struct gs_mig_device *a2 = device(&inv->gpus[0], "MIG-a2");
    assert_string_equal(a2->profile, "2g.20gb");
    assert_int_equal(held(inv, 0, "all-1g.10gb", &h, msg, sizeof(msg)), 1);
    char want[256];
    snprintf(want, sizeof(want), "MIG-a2::3 (GI %u, 2g.20gb) to team-b/infer-1, container main", a2->gi_id);
    assert_string_equal(msg, want);
    /* MIG off destroys both held devices. */
    assert_int_equal(held(inv, 0, "all-disabled", &h, msg, sizeof(msg)), 2);
    snprintf(want, sizeof(want), "MIG-a0 (GI %u, 1g.10gb) to team-a/train-0, container main; MIG-a2::3 (GI %u, ",
             device(&inv->gpus[0], "MIG-a0")->gi_id, a2->gi_id);
    assert_non_null(strstr(msg, want));
    /* Switching the held whole GPU to MIG takes it from its pod; leaving it whole does not. */
    assert_int_equal(held(inv, 1, "all-balanced", &h, msg, sizeof(msg)), 1);
    assert_string_equal(msg, "GPU-1 (the whole GPU) to team-c/whole, container main");
    assert_int_equal(held(inv, 1, "all-disabled", &h, msg, sizeof(msg)), 0);
    /* The MIG devices of another GPU are not this one's. */
    struct gs_mig_plan other = { .n_steps = 1 };
    other.steps[0] = (struct gs_mig_step){ .kind = GS_STEP_DESTROY_GI, .gi_id = a2->gi_id };
    assert_int_equal(gs_mig_plan_held(&inv->gpus[1], &other, &h, msg, sizeof(msg)), 0);
    assert_int_equal(gs_mig_plan_held(&inv->gpus[0], &other, &h, msg, sizeof(msg)), 1);
    /* No holds (no kubelet): nothing in the way. */
    assert_int_equal(held(inv, 0, "all-disabled", NULL, msg, sizeof(msg)), 0);
    assert_string_equal(msg, "");
    /* A short buffer: still counted, still terminated. */
    char small[12];
    assert_int_equal(held(inv, 0, "all-disabled", &h, small, sizeof(small)), 2);
    assert_string_equal(small, "MIG-a0 (GI ");
    assert_int_equal(held(inv, 0, "all-disabled", &h, NULL, 0), 2);
    gs_mig_holds_free(&h);
    free(inv);
}

/* A compute instance destroyed on its own (a kept GI whose compute instances change) breaks the
 * MIG device it is, and only that one. */
static void test_compute_instance_steps(void **state) {
    (void)state;
    struct gs_inventory *inv = node();
    struct gs_mig_holds h;
    holds_of(inv, &h);
    const struct gs_mig_device *a2 = device(&inv->gpus[0], "MIG-a2");
    struct gs_mig_plan p = { .n_steps = 1 };
    p.steps[0] = (struct gs_mig_step){ .kind = GS_STEP_DESTROY_CI, .gi_id = a2->gi_id, .ci_id = a2->ci_id + 1 };
    char msg[512];
    assert_int_equal(gs_mig_plan_held(&inv->gpus[0], &p, &h, msg, sizeof(msg)), 0);
    p.steps[0].ci_id = a2->ci_id;
    assert_int_equal(gs_mig_plan_held(&inv->gpus[0], &p, &h, msg, sizeof(msg)), 1);
    assert_non_null(strstr(msg, "MIG-a2::3"));
    p.steps[0].kind = GS_STEP_CREATE_GI; /* creating breaks nothing */
    assert_int_equal(gs_mig_plan_held(&inv->gpus[0], &p, &h, msg, sizeof(msg)), 0);
    gs_mig_holds_free(&h);
    free(inv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_find),
        cmocka_unit_test(test_plan_held),
        cmocka_unit_test(test_compute_instance_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
