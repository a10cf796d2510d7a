/* test_catalog.c: the model catalogue is internally consistent and matches the published
 * tables (mig.md §1): profile IDs, placements, caps, and names reproduced by go-nvlib's rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "catalog/catalog.h"
#include "core/inventory.h"

static void test_lookup(void **state) {
    (void)state;
    assert_int_equal(gs_catalog_count(), 9);
    assert_non_null(gs_catalog_find("h100-sxm5-80gb"));
    assert_null(gs_catalog_find("H100"));
    assert_null(gs_catalog_find(NULL));
    for (size_t i = 0; i < gs_catalog_count(); i++)
        assert_non_null(strstr(gs_catalog_keys(), gs_catalog_get(i)->key));
}

/* The 8-slice family uses the real GI profile IDs 19, 20, 15, 14, 9, 5, 0 with the published
 * placement table; A30 uses its own IDs. */
static void test_profile_ids_and_placements(void **state) {
    (void)state;
    static const struct { unsigned nvml, id, size, max, n; unsigned starts[7]; } family[] = {
        { 0, 19, 1, 7, 7, { 0, 1, 2, 3, 4, 5, 6 } }, { 7, 20, 1, 1, 7, { 0, 1, 2, 3, 4, 5, 6 } },
        { 9, 15, 2, 4, 4, { 0, 2, 4, 6 } },          { 1, 14, 2, 3, 3, { 0, 2, 4 } },
        { 2, 9, 4, 2, 2, { 0, 4 } },                 { 3, 5, 4, 1, 1, { 0 } },
        { 4, 0, 8, 1, 1, { 0 } },
    };
    unsigned checked = 0;
    for (size_t i = 0; i < gs_catalog_count(); i++) {
        const struct gs_model *m = gs_catalog_get(i);
        if (m->mig_mem_slices != 8)
            continue;
        assert_int_equal(m->n_profiles, 7);
        for (size_t k = 0; k < 7; k++) {
            const struct gs_profile_spec *p = gs_model_profile_by_nvml(m, family[k].nvml);
            assert_non_null(p);
            assert_int_equal(p->id, family[k].id);
            assert_int_equal(p->mem_slices, family[k].size);
            assert_int_equal(p->max_instances, family[k].max);
            assert_int_equal(p->n_starts, family[k].n);
            assert_memory_equal(p->starts, family[k].starts, family[k].n * sizeof(unsigned));
            checked++;
        }
    }
    assert_int_equal(checked, 6 * 7);
    const struct gs_model *a30 = gs_catalog_find("A30");
    assert_int_equal(a30->mig_mem_slices, 4);
    assert_int_equal(gs_model_profile_by_name(a30, "1g.6gb")->id, 14);
    assert_int_equal(gs_model_profile_by_name(a30, "1g.6gb+me")->id, 21);
    assert_int_equal(gs_model_profile_by_name(a30, "2g.12gb")->id, 5);
    assert_int_equal(gs_model_profile_by_name(a30, "2g.12gb+me")->id, 6);
    assert_int_equal(gs_model_profile_by_name(a30, "4g.24gb")->id, 0);
    assert_null(gs_catalog_find("L4")->profiles);
    assert_int_equal(gs_catalog_find("T4")->mig_mem_slices, 0);
}

/* Every profile's memory fits the GPU, its placements fit the slices, and the name the driver
 * would compute from memory (go-nvlib's rule) is the catalogue's name: this cross-checks the
 * memory sizes against the published names. */
static void test_names_match_memory(void **state) {
    (void)state;
    for (size_t i = 0; i < gs_catalog_count(); i++) {
        const struct gs_model *m = gs_catalog_get(i);
        for (size_t k = 0; k < m->n_profiles; k++) {
            const struct gs_profile_spec *p = &m->profiles[k];
            assert_true(p->mem_mib <= m->mem_mib);
            for (unsigned s = 0; s < p->n_starts; s++)
                assert_true(p->starts[s] + p->mem_slices <= m->mig_mem_slices);
            char name[32];
            assert_int_equal(gs_mig_profile_name(p->slices, p->mem_mib, m->mem_mib, p->nvml_profile, name,
                                                 sizeof(name)), 0);
            if (strcmp(name, p->name) != 0)
                fail_msg("%s: profile %u computes as %s, catalogue says %s", m->key, p->id, name, p->name);
        }
    }
}

static void test_profile_name_rule(void **state) {
    (void)state;
    char name[32];
    assert_int_equal(gs_mig_profile_name(1, 9984, 81559, 0, name, sizeof(name)), 0);
    assert_string_equal(name, "1g.10gb");
    assert_int_equal(gs_mig_profile_name(1, 9984, 81559, 7, name, sizeof(name)), 0);
    assert_string_equal(name, "1g.10gb+me");
    assert_int_equal(gs_mig_profile_name(7, 143104, 143771, 4, name, sizeof(name)), 0);
    assert_string_equal(name, "7g.141gb");
    assert_int_equal(gs_mig_profile_name(1, 0, 81559, 0, name, sizeof(name)), -22);
    assert_int_equal(gs_mig_profile_name(1, 90000, 81559, 0, name, sizeof(name)), -22);
    assert_int_equal(gs_mig_profile_name(1, 9984, 81559, 0, name, 4), -22);
}

/* Every model has its board figures, consistent with one another; the rows from captures keep the
 * captured values. */
static void test_boards(void **state) {
    (void)state;
    for (size_t i = 0; i < gs_catalog_count(); i++) {
        const struct gs_board *b = gs_model_board(gs_catalog_get(i));
        assert_non_null(b);
        assert_true(b->power_min_mw > 0 && b->power_min_mw <= b->power_default_mw);
        assert_true(b->power_default_mw <= b->power_max_mw);
        assert_true(b->app_graphics_mhz > 0 && b->app_graphics_mhz <= b->max_graphics_mhz);
        assert_true(b->app_mem_mhz > 0 && b->app_mem_mhz <= b->max_mem_mhz && b->max_video_mhz > 0);
        assert_true(b->pcie_gen >= 3 && b->pcie_gen <= 5 && b->pcie_width == 16 && b->bar1_mib > 0);
        assert_true(b->vbios && strlen(b->vbios) < 32);
    }
    const struct gs_board *a100 = gs_model_board(gs_catalog_find("A100-SXM4-40GB"));
    assert_int_equal(a100->max_graphics_mhz, 1410);
    assert_int_equal(a100->app_graphics_mhz, 1095);
    assert_int_equal(a100->power_default_mw, 400000);
    const struct gs_board *t4 = gs_model_board(gs_catalog_find("T4"));
    assert_int_equal(t4->max_mem_mhz, 5001);
    assert_int_equal(t4->pcie_gen, 3);
    assert_null(gs_model_board(NULL));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lookup),
        cmocka_unit_test(test_boards),
        cmocka_unit_test(test_profile_ids_and_placements),
        cmocka_unit_test(test_names_match_memory),
        cmocka_unit_test(test_profile_name_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
