/* test_dra_handover.c: GPUs held from the device plugin while the DRA driver's slices may still
 * offer them (src/dra/handover.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "dra/handover.h"

#define MS 1000000ULL
#define WAIT (DRA_HANDOVER_WAIT_MS * MS)

static void set(bool dra[GS_MAX_GPUS], const char *which) {
    memset(dra, 0, GS_MAX_GPUS * sizeof(dra[0]));
    for (const char *c = which; *c; c++)
        dra[*c - '0'] = true;
}

static unsigned held(const struct dra_handover *h) {
    unsigned n = 0;
    for (unsigned g = 0; g < GS_MAX_GPUS; g++)
        n += h->held[g];
    return n;
}

/* Started without DRA (or with fewer of its GPUs than an earlier run had): every GPU not the
 * driver's is held until the first set is synced, the node's absent GPUs never. */
static void test_start_holds_every_gpu_not_dras_until_synced(void **state) {
    (void)state;
    struct dra_handover h = { 0 };
    bool dra[GS_MAX_GPUS];
    set(dra, "1");
    assert_int_equal(dra_handover_plan(&h, dra, 4, 1, 0, WAIT), 3);
    assert_true(h.held[0] && !h.held[1] && h.held[2] && h.held[3] && !h.held[4]);
    assert_true(dra_handover_any(&h));
    assert_int_equal(dra_handover_deadline(&h), WAIT);
    /* nothing synced yet, or an older number: still held */
    assert_int_equal(dra_handover_settle(&h, 0, 10 * MS, NULL), 0);
    bool late[GS_MAX_GPUS];
    assert_int_equal(dra_handover_settle(&h, 1, 20 * MS, late), 3);
    assert_false(late[0] || late[2] || late[3]);
    assert_false(dra_handover_any(&h));
    assert_int_equal(dra_handover_deadline(&h), UINT64_MAX);
    /* a replan with the same GPUs holds nothing again */
    assert_int_equal(dra_handover_plan(&h, dra, 4, 1, 30 * MS, WAIT), 0);
    assert_int_equal(held(&h), 0);
}

/* A live policy change: only the GPU that left DRA is held, for the number that left it out; a
 * later number synced releases it too (the slices in place then do not offer it either). */
static void test_a_gpu_leaving_dra_is_held_for_its_set(void **state) {
    (void)state;
    struct dra_handover h = { 0 };
    bool dra[GS_MAX_GPUS];
    set(dra, "01");
    assert_int_equal(dra_handover_plan(&h, dra, 2, 1, 0, WAIT), 0);
    set(dra, "0");
    assert_int_equal(dra_handover_plan(&h, dra, 2, 2, 100 * MS, WAIT), 1);
    assert_true(h.held[1] && !h.held[0]);
    assert_int_equal(dra_handover_settle(&h, 1, 200 * MS, NULL), 0); /* the old slices, with GPU 1 */
    assert_true(h.held[1]);
    assert_int_equal(dra_handover_settle(&h, 3, 300 * MS, NULL), 1);
    assert_false(h.held[1]);
    /* back to DRA while held: not held any more (the plan gives it to the driver) */
    set(dra, "01");
    dra_handover_plan(&h, dra, 2, 4, 400 * MS, WAIT);
    set(dra, "0");
    dra_handover_plan(&h, dra, 2, 5, 500 * MS, WAIT);
    assert_true(h.held[1]);
    set(dra, "01");
    assert_int_equal(dra_handover_plan(&h, dra, 2, 6, 600 * MS, WAIT), 0);
    assert_false(dra_handover_any(&h));
}

/* The API server does not answer: the GPU goes to the device plugin once the wait passed, marked
 * late (the agent warns), and not a moment before. */
static void test_the_wait_is_bounded(void **state) {
    (void)state;
    struct dra_handover h = { 0 };
    bool dra[GS_MAX_GPUS], late[GS_MAX_GPUS];
    set(dra, "");
    assert_int_equal(dra_handover_plan(&h, dra, 2, 1, 1000 * MS, WAIT), 2);
    assert_int_equal(dra_handover_settle(&h, 0, 1000 * MS + WAIT - 1, late), 0);
    assert_false(late[0] || late[1]);
    assert_int_equal(dra_handover_settle(&h, 0, 1000 * MS + WAIT, late), 2);
    assert_true(late[0] && late[1]);
    assert_false(dra_handover_any(&h));
    /* leaving again later: a fresh wait, from then */
    set(dra, "1");
    dra_handover_plan(&h, dra, 2, 2, 2 * WAIT, WAIT);
    set(dra, "");
    dra_handover_plan(&h, dra, 2, 3, 3 * WAIT, WAIT);
    assert_int_equal(dra_handover_deadline(&h), 4 * WAIT);
    assert_int_equal(dra_handover_settle(&h, 2, 3 * WAIT + 1, late), 0);
}

static void test_release_all(void **state) {
    (void)state;
    struct dra_handover h = { 0 };
    bool dra[GS_MAX_GPUS];
    set(dra, "0");
    dra_handover_plan(&h, dra, 3, 1, 0, WAIT);
    assert_int_equal(dra_handover_release_all(&h), 2);
    assert_false(dra_handover_any(&h));
    assert_int_equal(dra_handover_release_all(&h), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_start_holds_every_gpu_not_dras_until_synced),
        cmocka_unit_test(test_a_gpu_leaving_dra_is_held_for_its_set),
        cmocka_unit_test(test_the_wait_is_bounded),
        cmocka_unit_test(test_release_all),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
