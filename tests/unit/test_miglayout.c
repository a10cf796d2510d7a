/* test_miglayout.c: unit tests for the MIG layout parser (src/config/miglayout.c). mig-parted's own
 * files and the examples in examples/mig must parse unchanged; the examples are also checked
 * against the GPU catalogue (every profile exists on the GPUs an item applies to and fits). Bad
 * inputs are table-driven and each checks the exact "NAME:LINE:COLUMN: PATH:" prefix. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "bad_cases.h"

#include "catalog/catalog.h"
#include "config/miglayout.h"
#include "util/util.h"

#ifndef GS_SOURCE_ROOT
#error "GS_SOURCE_ROOT must be defined by the build"
#endif

/* The layout struct is large (~800 KiB): tests keep it on the heap. */
static struct gs_layout_file *new_file(void) {
    struct gs_layout_file *f = malloc(sizeof(*f));
    assert_non_null(f);
    memset(f, 0xA5, sizeof(*f));
    return f;
}

static int parse(const char *yaml, struct gs_layout_file *f, char *err, size_t errlen) {
    return gs_miglayout_parse("t.yaml", yaml, strlen(yaml), f, err, errlen);
}

static void parse_ok(const char *yaml, struct gs_layout_file *f) {
    char err[1024] = "";
    int r = parse(yaml, f, err, sizeof(err));
    if (r < 0)
        fail_msg("unexpected error %d: %s", r, err);
}

static void load_example(const char *file, struct gs_layout_file *f) {
    char path[512], err[1024] = "";
    snprintf(path, sizeof(path), "%s/examples/mig/%s", GS_SOURCE_ROOT, file);
    int r = gs_miglayout_load(path, f, err, sizeof(err));
    if (r < 0)
        fail_msg("%s: unexpected error %d: %s", file, r, err);
    assert_string_equal(f->name, path);
}

static const struct gs_layout_config *find(const struct gs_layout_file *f, const char *name) {
    const struct gs_layout_config *c = gs_miglayout_find(f, name);
    if (!c)
        fail_msg("config '%s' not found", name);
    return c;
}

#define HDR "version: v1\nmig-configs:\n"

/* ---- good inputs ---- */

/* The example in miglayout.h's comment, verbatim. */
static const char header_example[] = "version: v1\n"
                                     "mig-configs:\n"
                                     "  all-disabled:\n"
                                     "    - devices: all\n"
                                     "      mig-enabled: false\n"
                                     "  custom:\n"
                                     "    - devices: [0, 1, 2, 3]             # NVML indices, or \"all\"\n"
                                     "      mig-enabled: true\n"
                                     "      mig-devices: {\"1g.10gb\": 2, \"2g.20gb\": 1, \"3g.40gb\": 1}\n"
                                     "    - device-filter: [\"0x233010DE\"]      # optional PCI device IDs "
                                     "(0x<device><vendor>)\n"
                                     "      devices: all\n"
                                     "      mig-enabled: false\n";

static void test_header_example(void **state) {
    (void)state;
    _cleanup_free_ struct gs_layout_file *f = new_file();
    parse_ok(header_example, f);
    assert_string_equal(f->name, "t.yaml");
    assert_int_equal(f->n_configs, 2);

    const struct gs_layout_config *c = &f->configs[0];
    assert_string_equal(c->name, "all-disabled");
    assert_int_equal(c->line, 3);
    assert_int_equal(c->n_items, 1);
    assert_true(c->items[0].all_devices);
    assert_int_equal(c->items[0].device_mask, 0);
    assert_int_equal(c->items[0].n_filters, 0);
    assert_false(c->items[0].mig_enabled);
    assert_int_equal(c->items[0].n_counts, 0);
    assert_int_equal(c->items[0].line, 4);

    c = &f->configs[1];
    assert_string_equal(c->name, "custom");
    assert_int_equal(c->line, 6);
    assert_int_equal(c->n_items, 2);
    const struct gs_layout_item *it = &c->items[0];
    assert_false(it->all_devices);
    assert_int_equal(it->device_mask, 0xF);
    assert_int_equal(it->n_filters, 0);
    assert_true(it->mig_enabled);
    assert_int_equal(it->line, 7);
    assert_int_equal(it->n_counts, 3);
    static const struct {
        const char *profile;
        unsigned count, column;
    } want[] = { { "1g.10gb", 2, 21 }, { "2g.20gb", 1, 35 }, { "3g.40gb", 1, 49 } };
    for (size_t i = 0; i < GS_ARRAY_SIZE(want); i++) {
        assert_string_equal(it->counts[i].profile, want[i].profile);
        assert_int_equal(it->counts[i].count, want[i].count);
        assert_int_equal(it->counts[i].line, 9);
        assert_int_equal(it->counts[i].column, want[i].column);
    }
    it = &c->items[1];
    assert_true(it->all_devices);
    assert_int_equal(it->n_filters, 1);
    assert_int_equal(it->filters[0], 0x233010DE);
    assert_false(it->mig_enabled);
    assert_int_equal(it->n_counts, 0);
    assert_int_equal(it->line, 10);
}

/* Forms mig-parted accepts that are easy to get wrong. */
static void test_accepted_forms(void **state) {
    (void)state;
    _cleanup_free_ struct gs_layout_file *f = new_file();
    parse_ok(HDR "  a:\n"
                 "    - device-filter: [\"0x233010de\", \"0X20B010DE:0x134F10DE\", \"0x233010DE\"]\n"
                 "      devices: [63, 0]\n"
                 "      mig-enabled: yes\n"
                 "      mig-devices: {\"1g.10gb\": 0, \"2g.20gb\": 3}\n"
                 "    - device-filter: \"\"\n"
                 "      devices: \"all\"\n"
                 "      mig-enabled: False\n"
                 "      mig-devices: {}\n"
                 "    - device-filter: []\n"
                 "      devices: all\n"
                 "      mig-enabled: no\n"
                 "      mig-devices:\n"
                 "    - device-filter:\n"
                 "      devices: all\n"
                 "      mig-enabled: TRUE\n"
                 "      mig-devices: {}\n",
             f);
    const struct gs_layout_config *c = find(f, "a");
    assert_int_equal(c->n_items, 4);
    const struct gs_layout_item *it = &c->items[0];
    /* hex in either case; the subsystem part is checked and dropped; repeats are one filter */
    assert_int_equal(it->n_filters, 2);
    assert_int_equal(it->filters[0], 0x233010DE);
    assert_int_equal(it->filters[1], 0x20B010DE);
    assert_false(it->all_devices);
    assert_int_equal(it->device_mask, (1ULL << 63) | 1ULL);
    assert_true(it->mig_enabled);
    /* zero counts are kept as written (mig-parted allows them next to a non-zero one) */
    assert_int_equal(it->n_counts, 2);
    assert_string_equal(it->counts[0].profile, "1g.10gb");
    assert_int_equal(it->counts[0].count, 0);
    assert_int_equal(it->counts[1].count, 3);
    /* an empty device-filter, "" or an empty list is no filter */
    assert_int_equal(c->items[1].n_filters, 0);
    assert_true(c->items[1].all_devices);
    assert_false(c->items[1].mig_enabled);
    assert_int_equal(c->items[2].n_filters, 0);
    assert_false(c->items[2].mig_enabled);
    /* MIG on without instances */
    assert_int_equal(c->items[3].n_filters, 0);
    assert_true(c->items[3].mig_enabled);
    assert_int_equal(c->items[3].n_counts, 0);

    /* JSON-style flow, CRLF line ends */
    parse_ok("{\"version\": \"v1\", \"mig-configs\": {\"x\": [{\"devices\": [2], \"mig-enabled\": true,\r\n"
             "  \"mig-devices\": {\"7g.80gb\": 1}}]}}\r\n",
             f);
    assert_int_equal(f->n_configs, 1);
    assert_int_equal(f->configs[0].items[0].device_mask, 1ULL << 2);
    assert_int_equal(f->configs[0].items[0].counts[0].line, 2);
    assert_int_equal(f->configs[0].items[0].counts[0].column, 19);
}

static void test_profile_names(void **state) {
    (void)state;
    static const char *const good[] = {
        "1g.10gb", "7g.141gb", "8g.288gb", "1c.3g.40gb", "3c.3g.40gb", "2c.4g.40gb", "1g.10gb+me", "1g.24gb+me.all",
        "1g.24gb-me", "2g.48gb+gfx", "1g.5gb+me,gfx", "4g.96gb+gfx", "1c.1g.5gb+me", "6g.9999gb", "1g.1gb+a.b.c",
    };
    for (size_t i = 0; i < GS_ARRAY_SIZE(good); i++) {
        char text[512];
        snprintf(text, sizeof(text), HDR "  a:\n    - {devices: all, mig-enabled: true, mig-devices: {\"%s\": 1}}\n",
                 good[i]);
        _cleanup_free_ struct gs_layout_file *f = new_file();
        char err[1024] = "";
        if (parse(text, f, err, sizeof(err)) < 0)
            fail_msg("'%s' rejected: %s", good[i], err);
        assert_string_equal(f->configs[0].items[0].counts[0].profile, good[i]);
    }

    static const char *const bad[] = {
        "1g.10gbb", "1g10gb", "1g.10", "1g.10GB", "1G.10gb", "0g.10gb", "5g.20gb", "9g.10gb", "10g.10gb",
        "2c.1g.10gb", "0c.1g.10gb", "1c1g.10gb", "1c.1g10gb", "1g.010gb", "1g.0gb", "1g.gb", "1g.12345gb", "g.10gb",
        "1g.10gb+", "1g.10gb-", "1g.10gb+ME", "1g.10gb+me,me", "1g.10gb-me,gfx", "1g.10gb+me.", "1g.10gb+.me",
        "1g.10gb+me..all", "1g.10gb+1me", "1g.10gb+me-x", "1g.10gb+me,", "1g.10gb +me", " 1g.10gb", "1g.10gb ",
        "1c.2c.3g.40gb", "1g.10gb+me+gfx", "", "1g.10gb+abcdefghijklmnopqrstuvwxyz",
    };
    for (size_t i = 0; i < GS_ARRAY_SIZE(bad); i++) {
        char text[512], prefix[256];
        snprintf(text, sizeof(text), HDR "  a:\n    - {devices: all, mig-enabled: true, mig-devices: {\"%s\": 1}}\n",
                 bad[i]);
        snprintf(prefix, sizeof(prefix), "t.yaml:4:55: mig-configs.a[0].mig-devices.%s: invalid MIG profile name '%s'",
                 bad[i], bad[i]);
        _cleanup_free_ struct gs_layout_file *f = new_file();
        char err[1024] = "";
        if (parse(text, f, err, sizeof(err)) != -EINVAL)
            fail_msg("'%s' accepted", bad[i]);
        if (strncmp(err, prefix, strlen(prefix)) != 0)
            fail_msg("'%s': expected '%s...', got '%s'", bad[i], prefix, err);
    }
}

static void test_find(void **state) {
    (void)state;
    _cleanup_free_ struct gs_layout_file *f = new_file();
    parse_ok(header_example, f);
    assert_ptr_equal(gs_miglayout_find(f, "custom"), &f->configs[1]);
    assert_ptr_equal(gs_miglayout_find(f, "all-disabled"), &f->configs[0]);
    assert_null(gs_miglayout_find(f, "Custom"));
    assert_null(gs_miglayout_find(f, "custo"));
    assert_null(gs_miglayout_find(f, ""));
    assert_null(gs_miglayout_find(f, NULL));
    assert_null(gs_miglayout_find(NULL, "custom"));
}

static void test_item_for(void **state) {
    (void)state;
    _cleanup_free_ struct gs_layout_file *f = new_file();
    /* As mig-parted applies every matching item in order, the last matching item decides. */
    parse_ok(HDR "  mixed:\n"
                 "    - devices: all\n"                              /* item 0: everything */
                 "      mig-enabled: true\n"
                 "      mig-devices: {}\n"
                 "    - device-filter: [\"0x20B010DE\", \"0x233010DE\"]\n" /* item 1: A100-40 or H100 */
                 "      devices: all\n"
                 "      mig-enabled: true\n"
                 "      mig-devices: {\"3g.40gb\": 2}\n"
                 "    - device-filter: \"0x233010DE\"\n"     /* item 2: H100 GPUs 0-1 */
                 "      devices: [0, 1]\n"
                 "      mig-enabled: true\n"
                 "      mig-devices: {\"1g.10gb\": 7}\n"
                 "    - devices: [0, 5, 63]\n"                       /* item 3: any GPU 0, 5 or 63 */
                 "      mig-enabled: false\n"
                 "  only-h200:\n"
                 "    - device-filter: \"0x233510DE\"\n"
                 "      devices: all\n"
                 "      mig-enabled: false\n",
             f);
    const struct gs_layout_config *c = find(f, "mixed");
    const struct gs_layout_item *it = c->items;
    assert_ptr_equal(gs_layout_item_for(c, 0, 0x233010DE), &it[3]);
    assert_ptr_equal(gs_layout_item_for(c, 1, 0x233010DE), &it[2]);
    assert_ptr_equal(gs_layout_item_for(c, 2, 0x233010DE), &it[1]);
    assert_ptr_equal(gs_layout_item_for(c, 63, 0x233010DE), &it[3]);
    assert_ptr_equal(gs_layout_item_for(c, 0, 0x20B010DE), &it[3]);
    assert_ptr_equal(gs_layout_item_for(c, 1, 0x20B010DE), &it[1]);
    /* a filter only matches listed PCI IDs; no filter matches any */
    assert_ptr_equal(gs_layout_item_for(c, 5, 0x233510DE), &it[3]);
    assert_ptr_equal(gs_layout_item_for(c, 63, 0x00000000), &it[3]);
    assert_ptr_equal(gs_layout_item_for(c, 1, 0x233510DE), &it[0]);
    assert_ptr_equal(gs_layout_item_for(c, 62, 0x233510DE), &it[0]);
    /* "all" also covers indices a list could not name */
    assert_ptr_equal(gs_layout_item_for(c, 64, 0x233510DE), &it[0]);
    assert_ptr_equal(gs_layout_item_for(c, 1000, 0x233010DE), &it[1]);

    c = find(f, "only-h200");
    assert_ptr_equal(gs_layout_item_for(c, 3, 0x233510DE), &c->items[0]);
    assert_null(gs_layout_item_for(c, 3, 0x233010DE));
    assert_null(gs_layout_item_for(NULL, 0, 0));

    /* index lists stop at 63: no shift past the mask */
    parse_ok(HDR "  a:\n    - {devices: [63], mig-enabled: false}\n", f);
    c = &f->configs[0];
    assert_non_null(gs_layout_item_for(c, 63, 0));
    assert_null(gs_layout_item_for(c, 64, 0));
    assert_null(gs_layout_item_for(c, 127, 0));
    assert_null(gs_layout_item_for(c, ~0u, 0));
}

/* ---- the examples, checked against the catalogue ---- */

/* Every profile the item asks for exists on the model, within its instance cap, and the total
 * fits the GPU's memory and compute slices. (Placement is the planner's business.) */
static void check_item_fits(const char *file, const struct gs_layout_config *c, const struct gs_layout_item *it,
                            const struct gs_model *m) {
    if (!it->mig_enabled)
        return;
    unsigned mem = 0, slices = 0, max_slices = 0;
    for (size_t i = 0; i < m->n_profiles; i++)
        if (m->profiles[i].slices > max_slices)
            max_slices = m->profiles[i].slices;
    for (unsigned i = 0; i < it->n_counts; i++) {
        const struct gs_layout_count *n = &it->counts[i];
        if (n->count == 0)
            continue;
        const struct gs_profile_spec *p = gs_model_profile_by_name(m, n->profile);
        if (!p)
            fail_msg("%s: %s (line %u): profile %s does not exist on %s", file, c->name, it->line, n->profile, m->key);
        if (n->count > p->max_instances)
            fail_msg("%s: %s: %u x %s exceeds %s's cap of %u", file, c->name, n->count, n->profile, m->key,
                     p->max_instances);
        mem += n->count * p->mem_slices;
        slices += n->count * p->slices;
    }
    if (mem > m->mig_mem_slices || slices > max_slices)
        fail_msg("%s: %s (line %u) does not fit %s (%u/%u memory slices, %u/%u compute slices)", file, c->name,
                 it->line, m->key, mem, m->mig_mem_slices, slices, max_slices);
}

/* For every catalogue model with MIG: each filtered item that names the model's PCI ID must fit
 * it. For the file's own model (if any): every config covers GPUs 0-7 and fits. */
static void check_example(const char *file, const struct gs_layout_file *f, const char *own_model) {
    for (size_t mi = 0; mi < gs_catalog_count(); mi++) {
        const struct gs_model *m = gs_catalog_get(mi);
        if (m->mig_mem_slices == 0)
            continue;
        for (unsigned ci = 0; ci < f->n_configs; ci++) {
            const struct gs_layout_config *c = &f->configs[ci];
            for (unsigned ii = 0; ii < c->n_items; ii++)
                for (unsigned k = 0; k < c->items[ii].n_filters; k++)
                    if (c->items[ii].filters[k] == m->pci_device_id)
                        check_item_fits(file, c, &c->items[ii], m);
        }
    }
    if (!own_model)
        return;
    const struct gs_model *m = gs_catalog_find(own_model);
    assert_non_null(m);
    for (unsigned ci = 0; ci < f->n_configs; ci++) {
        const struct gs_layout_config *c = &f->configs[ci];
        for (unsigned idx = 0; idx < 8; idx++) {
            const struct gs_layout_item *it = gs_layout_item_for(c, idx, m->pci_device_id);
            if (!it)
                fail_msg("%s: %s has no item for %s GPU %u", file, c->name, m->key, idx);
            check_item_fits(file, c, it, m);
        }
    }
}

static void test_examples(void **state) {
    (void)state;
    static const struct {
        const char *file, *model;
        const char *configs[7];
    } examples[] = {
        { "a100.yaml", "A100-SXM4-40GB",
          { "all-disabled", "all-enabled", "all-1g.5gb", "all-balanced", "custom-mixed", "balanced-by-model" } },
        { "h100.yaml", "H100-SXM5-80GB",
          { "all-disabled", "all-1g.10gb", "all-balanced", "custom-mixed", "balanced-by-model" } },
        { "h200.yaml", "H200-SXM-141GB",
          { "all-disabled", "all-1g.18gb", "all-balanced", "custom-mixed", "balanced-by-model" } },
    };
    for (size_t e = 0; e < GS_ARRAY_SIZE(examples); e++) {
        _cleanup_free_ struct gs_layout_file *f = new_file();
        load_example(examples[e].file, f);
        unsigned n = 0;
        for (; n < GS_ARRAY_SIZE(examples[e].configs) && examples[e].configs[n]; n++)
            assert_string_equal(f->configs[n].name, examples[e].configs[n]);
        assert_int_equal(f->n_configs, n);
        check_example(examples[e].file, f, examples[e].model);

        /* each file's all-balanced is the one of mig.md §3.1 for its model */
        const struct gs_layout_item *it = &find(f, "all-balanced")->items[0];
        assert_true(it->all_devices);
        assert_int_equal(it->n_counts, 3);
        assert_int_equal(it->counts[0].count, 2);
        assert_int_equal(it->counts[1].count, 1);
        assert_int_equal(it->counts[2].count, 1);
        /* the custom config disables some GPUs and enables others */
        const struct gs_layout_config *c = find(f, "custom-mixed");
        const struct gs_model *m = gs_catalog_find(examples[e].model);
        bool on = false, off = false;
        for (unsigned idx = 0; idx < 8; idx++) {
            bool enabled = gs_layout_item_for(c, idx, m->pci_device_id)->mig_enabled;
            on |= enabled;
            off |= !enabled;
        }
        assert_true(on && off);
    }

    /* device-filter picks per model */
    _cleanup_free_ struct gs_layout_file *f = new_file();
    load_example("h100.yaml", f);
    const struct gs_layout_config *c = find(f, "balanced-by-model");
    assert_int_equal(c->items[0].n_filters, 8);
    assert_string_equal(gs_layout_item_for(c, 3, 0x233010DE)->counts[0].profile, "1g.10gb");
    assert_string_equal(gs_layout_item_for(c, 3, 0x232110DE)->counts[0].profile, "1g.12gb");
    assert_null(gs_layout_item_for(c, 3, 0x233510DE));
    load_example("h200.yaml", f);
    c = find(f, "balanced-by-model");
    assert_string_equal(gs_layout_item_for(c, 0, 0x233B10DE)->counts[0].profile, "1g.18gb");
    assert_string_equal(gs_layout_item_for(c, 0, 0x290110DE)->counts[2].profile, "3g.90gb");
    load_example("a100.yaml", f);
    c = find(f, "balanced-by-model");
    assert_string_equal(gs_layout_item_for(c, 0, 0x20B010DE)->counts[0].profile, "1g.5gb");
    assert_string_equal(gs_layout_item_for(c, 0, 0x20B210DE)->counts[0].profile, "1g.10gb");
    assert_null(gs_layout_item_for(c, 0, 0x233010DE));
}

/* The excerpt of mig-parted's config-default.yaml: parses unchanged, and all-balanced gives every
 * MIG-capable catalogue model an item that fits it. */
static void test_mig_parted_default(void **state) {
    (void)state;
    _cleanup_free_ struct gs_layout_file *f = new_file();
    load_example("mig-parted-default-excerpt.yaml", f);
    assert_int_equal(f->n_configs, 11);
    check_example("mig-parted-default-excerpt.yaml", f, NULL);

    const struct gs_layout_config *c = find(f, "all-balanced");
    assert_int_equal(c->n_items, 10);
    for (size_t mi = 0; mi < gs_catalog_count(); mi++) {
        const struct gs_model *m = gs_catalog_get(mi);
        if (m->mig_mem_slices == 0)
            continue;
        const struct gs_layout_item *it = gs_layout_item_for(c, 0, m->pci_device_id);
        if (!it)
            fail_msg("all-balanced has no item for %s", m->key);
        assert_int_equal(it->n_filters > 0, 1);
        check_item_fits("excerpt", c, it, m);
    }
    /* the A30 item's filter is a plain string */
    const struct gs_layout_item *a30 = gs_layout_item_for(c, 0, 0x20B710DE);
    assert_int_equal(a30->n_filters, 1);
    assert_string_equal(a30->counts[0].profile, "1g.6gb");
    /* RTX PRO 6000 names */
    assert_string_equal(find(f, "all-1g.24gb.me.all")->items[0].counts[0].profile, "1g.24gb+me.all");
    assert_string_equal(find(f, "all-1g.24gb-me")->items[0].counts[0].profile, "1g.24gb-me");
    assert_string_equal(find(f, "all-1g.24gb.gfx")->items[0].counts[0].profile, "1g.24gb+gfx");
    /* two filtered items, A100-40GB second */
    c = find(f, "all-1g.10gb");
    assert_int_equal(c->n_items, 2);
    assert_ptr_equal(gs_layout_item_for(c, 0, 0x20B010DE), &c->items[1]);
    assert_int_equal(c->items[1].counts[0].count, 4);
    assert_null(gs_layout_item_for(c, 0, 0x233510DE));
}

/* ---- bad inputs ---- */

/* An item at line 4 (its mapping starts at column 7), config "a" at line 3. */
#define ITEM HDR "  a:\n    - "

static const struct bad_case bad_cases[] = {
    /* top level */
    { "empty document", "", "t.yaml:1:1: ", { "document is empty" } },
    { "root a list", "- version: v1\n", "t.yaml:1:1: ", { "expected a mapping" } },
    { "unknown top-level key", "version: v1\nmig-config:\n  a: []\n", "t.yaml:2:1: mig-config: ",
      { "unknown key 'mig-config'", "allowed keys: version, mig-configs" } },
    { "missing version", "mig-configs:\n  a:\n    - {devices: all, mig-enabled: false}\n", "t.yaml:1:1: ",
      { "missing required key 'version'" } },
    { "bad version", "version: v2\nmig-configs: {}\n", "t.yaml:1:10: version: ",
      { "unsupported version 'v2'", "expected v1" } },
    { "empty version", "version:\nmig-configs: {}\n", "t.yaml:1:9: version: ", { "missing value" } },
    { "missing mig-configs", "version: v1\n", "t.yaml:1:1: ", { "missing required key 'mig-configs'" } },
    { "empty mig-configs", "version: v1\nmig-configs: {}\n", "t.yaml:2:14: mig-configs: ",
      { "at least one config" } },
    { "mig-configs a list", "version: v1\nmig-configs: [a]\n", "t.yaml:2:14: mig-configs: ",
      { "expected a mapping, got a sequence" } },

    /* configs */
    { "empty config list", HDR "  a: []\n", "t.yaml:3:6: mig-configs.a: ", { "empty config", "at least one item" } },
    { "config a mapping", HDR "  a: {devices: all}\n", "t.yaml:3:6: mig-configs.a: ",
      { "expected a sequence, got a mapping" } },
    { "duplicate config name",
      HDR "  a:\n    - {devices: all, mig-enabled: false}\n  b:\n    - {devices: all, mig-enabled: false}\n"
          "  a:\n    - {devices: all, mig-enabled: true, mig-devices: {}}\n",
      "t.yaml:7:3: mig-configs.a: ", { "duplicate key 'a'", "first at line 3, column 3" } },
    { "bad config name", HDR "  my config:\n    - {devices: all, mig-enabled: false}\n",
      "t.yaml:3:3: mig-configs.my config: ", { "invalid config name 'my config'" } },
    { "config name too long",
      HDR "  a123456789b123456789c123456789d123456789e123456789f123456789g123:\n"
          "    - {devices: all, mig-enabled: false}\n",
      "t.yaml:3:3: mig-configs.a123456789b123456789c123456789d123456789e123456789f123456789g123: ",
      { "invalid config name", "1 to 63" } },
    { "item a scalar", ITEM "all\n", "t.yaml:4:7: mig-configs.a[0]: ", { "expected a mapping, got a scalar" } },

    /* item keys */
    { "unknown item key", ITEM "devices: all\n      mig-enabled: false\n      mig-device: {}\n",
      "t.yaml:6:7: mig-configs.a[0].mig-device: ",
      { "unknown key 'mig-device'", "allowed keys: device-filter, devices, mig-enabled, mig-devices" } },
    { "duplicate item key", ITEM "devices: all\n      mig-enabled: false\n      devices: [0]\n",
      "t.yaml:6:7: mig-configs.a[0].devices: ", { "duplicate key 'devices'", "first at line 4, column 7" } },
    { "devices missing", ITEM "mig-enabled: false\n", "t.yaml:4:7: mig-configs.a[0]: ",
      { "missing required key 'devices'" } },
    { "mig-enabled missing", ITEM "devices: all\n", "t.yaml:4:7: mig-configs.a[0]: ",
      { "missing required key 'mig-enabled'" } },
    { "mig-devices missing when enabled", ITEM "devices: all\n      mig-enabled: true\n",
      "t.yaml:4:7: mig-configs.a[0]: ", { "missing required key 'mig-devices' when mig-enabled is true" } },
    { "mig-devices null when enabled", ITEM "devices: all\n      mig-enabled: true\n      mig-devices:\n",
      "t.yaml:4:7: mig-configs.a[0]: ", { "missing required key 'mig-devices'" } },
    { "mig-devices non-empty when disabled",
      ITEM "devices: all\n      mig-enabled: false\n      mig-devices: {\"1g.10gb\": 1}\n",
      "t.yaml:6:20: mig-configs.a[0].mig-devices: ", { "must be absent or empty when mig-enabled is false" } },
    { "mig-devices a list when disabled", ITEM "devices: all\n      mig-enabled: false\n      mig-devices: []\n",
      "t.yaml:6:20: mig-configs.a[0].mig-devices: ", { "must be absent or empty" } },

    /* devices */
    { "devices []", ITEM "devices: []\n      mig-enabled: false\n", "t.yaml:4:16: mig-configs.a[0].devices: ",
      { "empty list of GPU indices" } },
    { "devices negative", ITEM "devices: [0, -1]\n      mig-enabled: false\n",
      "t.yaml:4:20: mig-configs.a[0].devices[1]: ", { "expected an integer in 0..63, got '-1'" } },
    { "devices too big", ITEM "devices: [64]\n      mig-enabled: false\n", "t.yaml:4:17: mig-configs.a[0].devices[0]: ",
      { "64 is out of range 0..63" } },
    { "devices duplicate", ITEM "devices: [1, 2, 1]\n      mig-enabled: false\n",
      "t.yaml:4:23: mig-configs.a[0].devices[2]: ", { "GPU index 1 is listed twice" } },
    { "devices quoted index", ITEM "devices: [\"0\"]\n      mig-enabled: false\n",
      "t.yaml:4:17: mig-configs.a[0].devices[0]: ", { "expected an integer, got a quoted string" } },
    { "devices All", ITEM "devices: All\n      mig-enabled: false\n", "t.yaml:4:16: mig-configs.a[0].devices: ",
      { "expected \"all\" or a list of GPU indices", "got 'All'" } },
    { "devices a number", ITEM "devices: 0\n      mig-enabled: false\n", "t.yaml:4:16: mig-configs.a[0].devices: ",
      { "expected \"all\" or a list", "got '0'" } },
    { "devices empty", ITEM "devices:\n      mig-enabled: false\n", "t.yaml:4:15: mig-configs.a[0].devices: ",
      { "got an empty value" } },
    { "devices nested list", ITEM "devices: [[0]]\n      mig-enabled: false\n",
      "t.yaml:4:17: mig-configs.a[0].devices[0]: ", { "expected a scalar, got a sequence" } },

    /* device-filter */
    { "filter too short", ITEM "device-filter: \"0x2330\"\n      devices: all\n      mig-enabled: false\n",
      "t.yaml:4:22: mig-configs.a[0].device-filter: ", { "invalid PCI device ID '0x2330'", "0x233010DE" } },
    { "filter without 0x",
      ITEM "device-filter: [\"0x233010DE\", \"233010DE\"]\n      devices: all\n      mig-enabled: false\n",
      "t.yaml:4:37: mig-configs.a[0].device-filter[1]: ", { "invalid PCI device ID '233010DE'" } },
    { "filter not hex", ITEM "device-filter: 0x2330G0DE\n      devices: all\n      mig-enabled: false\n",
      "t.yaml:4:22: mig-configs.a[0].device-filter: ", { "invalid PCI device ID '0x2330G0DE'" } },
    { "filter bad subsystem",
      ITEM "device-filter: \"0x233010DE:16C110DE\"\n      devices: all\n      mig-enabled: false\n",
      "t.yaml:4:22: mig-configs.a[0].device-filter: ", { "invalid PCI device ID '0x233010DE:16C110DE'" } },
    { "filter too long", ITEM "device-filter: 0x233010DE0\n      devices: all\n      mig-enabled: false\n",
      "t.yaml:4:22: mig-configs.a[0].device-filter: ", { "invalid PCI device ID" } },
    { "filter a mapping", ITEM "device-filter: {a: b}\n      devices: all\n      mig-enabled: false\n",
      "t.yaml:4:22: mig-configs.a[0].device-filter: ", { "expected a PCI device ID or a list of them" } },
    { "filter empty string in list", ITEM "device-filter: [\"\"]\n      devices: all\n      mig-enabled: false\n",
      "t.yaml:4:23: mig-configs.a[0].device-filter[0]: ", { "invalid PCI device ID ''" } },

    /* mig-enabled */
    { "mig-enabled quoted", ITEM "devices: all\n      mig-enabled: \"true\"\n      mig-devices: {}\n",
      "t.yaml:5:20: mig-configs.a[0].mig-enabled: ", { "expected true or false, got a quoted string" } },
    { "mig-enabled not a bool", ITEM "devices: all\n      mig-enabled: maybe\n",
      "t.yaml:5:20: mig-configs.a[0].mig-enabled: ", { "invalid value 'maybe'" } },

    /* mig-devices */
    { "bad profile name", ITEM "devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.10gbb\": 1}\n",
      "t.yaml:6:21: mig-configs.a[0].mig-devices.1g.10gbb: ", { "invalid MIG profile name '1g.10gbb'" } },
    { "count 8", ITEM "devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.10gb\": 8}\n",
      "t.yaml:6:32: mig-configs.a[0].mig-devices.1g.10gb: ", { "8 is out of range 0..7" } },
    { "count negative", ITEM "devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.10gb\": -1}\n",
      "t.yaml:6:32: mig-configs.a[0].mig-devices.1g.10gb: ", { "expected an integer in 0..7, got '-1'" } },
    { "count quoted", ITEM "devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.10gb\": \"2\"}\n",
      "t.yaml:6:32: mig-configs.a[0].mig-devices.1g.10gb: ", { "expected an integer, got a quoted string" } },
    { "count empty", ITEM "devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.10gb\": }\n",
      "t.yaml:6:32: mig-configs.a[0].mig-devices.1g.10gb: ", { "missing value" } },
    { "all counts zero",
      ITEM "devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.10gb\": 0, \"2g.20gb\": 0}\n",
      "t.yaml:6:20: mig-configs.a[0].mig-devices: ", { "all counts are 0" } },
    { "duplicate profile", ITEM "devices: all\n      mig-enabled: true\n      mig-devices:\n        1g.10gb: 1\n"
                                "        2g.20gb: 1\n        1g.10gb: 2\n",
      "t.yaml:9:9: mig-configs.a[0].mig-devices.1g.10gb: ",
      { "duplicate key '1g.10gb'", "first at line 7, column 9" } },
    { "same profile spelled twice",
      ITEM "devices: all\n      mig-enabled: true\n      mig-devices: {1g.10gb: 1, 1c.1g.10gb: 1}\n",
      "t.yaml:6:33: mig-configs.a[0].mig-devices.1c.1g.10gb: ",
      { "'1c.1g.10gb' is the same profile as '1g.10gb' (line 6)" } },
    { "mig-devices a list", ITEM "devices: all\n      mig-enabled: true\n      mig-devices: [1g.10gb]\n",
      "t.yaml:6:20: mig-configs.a[0].mig-devices: ", { "expected a mapping, got a sequence" } },
    { "profile key not a string",
      ITEM "devices: all\n      mig-enabled: true\n      mig-devices: {[1g.10gb]: 1}\n",
      "t.yaml:6:21: mig-configs.a[0].mig-devices: ", { "mapping keys must be strings" } },

    /* YAML itself */
    { "syntax error", ITEM "devices: all\n     mig-enabled: false\n", "t.yaml:5:6: ",
      { "syntax error", "did not find expected '-' indicator" } },
    { "anchors", HDR "  a: &x\n    - {devices: all, mig-enabled: false}\n  b: *x\n", "t.yaml:3:6: ",
      { "anchors and aliases are not supported" } },
    { "tags", HDR "  a: !!seq\n    - {devices: all, mig-enabled: false}\n", "t.yaml:3:6: ",
      { "tags are not supported" } },
    { "two documents", "version: v1\n---\nversion: v1\n", "t.yaml:2:1: ", { "more than one document" } },
};

static void test_bad(void **state) {
    const struct bad_case *c = *state;
    _cleanup_free_ struct gs_layout_file *f = new_file();
    _cleanup_free_ struct gs_layout_file *before = new_file();
    char err[1024] = "";

    int r = parse(c->yaml, f, err, sizeof(err));
    check_bad_message(c, r, err, false);
    /* failed parses leave the output alone */
    assert_memory_equal(f, before, sizeof(*f));
}

/* The error example in miglayout.h, to the character. */
static void test_header_error_example(void **state) {
    (void)state;
    _cleanup_free_ struct gs_layout_file *f = new_file();
    char err[1024] = "";
    static const char text[] = "version: v1\n"
                               "mig-configs:\n"
                               "  all-disabled:\n"
                               "    - {devices: all, mig-enabled: false}\n"
                               "  custom:\n"
                               "    - devices: [0, 1, 2, 3]\n"
                               "      mig-enabled: true\n"
                               "      mig-devices:\n"
                               "          \"1g.10gbb\": 2\n";
    assert_int_equal(gs_miglayout_parse("layouts.yaml", text, strlen(text), f, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "layouts.yaml:9:11: mig-configs.custom[0].mig-devices.1g.10gbb: invalid MIG profile "
                             "name '1g.10gbb'; expected [<c>c.]<g>g.<n>gb with an optional +attr or -attr suffix, "
                             "such as 1g.10gb, 1c.3g.40gb, 1g.10gb+me or 1g.24gb-me");
}

/* Limits that need long inputs. */
static void test_limits(void **state) {
    (void)state;
    _cleanup_free_ struct gs_layout_file *f = new_file();
    const size_t size = 64 * 1024;
    _cleanup_free_ char *text = malloc(size);
    assert_non_null(text);
    char err[1024];

    /* 128 configs fine, 129 not */
    for (int total = 128; total <= 129; total++) {
        size_t n = (size_t)snprintf(text, size, HDR);
        for (int i = 0; i < total; i++)
            n += (size_t)snprintf(text + n, size - n, "  c%d:\n    - {devices: all, mig-enabled: false}\n", i);
        int r = parse(text, f, err, sizeof(err));
        if (total == 128) {
            assert_int_equal(r, 0);
            assert_int_equal(f->n_configs, 128);
            assert_string_equal(f->configs[127].name, "c127");
            assert_int_equal(f->configs[127].line, 3 + 2 * 127);
        } else {
            assert_int_equal(r, -EINVAL);
            assert_string_equal(err, "t.yaml:3:3: mig-configs: has 129 configs; at most 128 are supported");
        }
    }

    /* 16 items fine, 17 not */
    for (int total = 16; total <= 17; total++) {
        size_t n = (size_t)snprintf(text, size, HDR "  a:\n");
        for (int i = 0; i < total; i++)
            n += (size_t)snprintf(text + n, size - n, "    - {devices: [%d], mig-enabled: false}\n", i);
        int r = parse(text, f, err, sizeof(err));
        if (total == 16) {
            assert_int_equal(r, 0);
            assert_int_equal(f->configs[0].n_items, 16);
            assert_int_equal(f->configs[0].items[15].device_mask, 1ULL << 15);
            assert_int_equal(f->configs[0].items[15].line, 19);
        } else {
            assert_int_equal(r, -EINVAL);
            assert_string_equal(err, "t.yaml:4:5: mig-configs.a: lists 17 items; at most 16 are supported");
        }
    }

    /* 16 profiles fine, 17 not */
    for (int total = 16; total <= 17; total++) {
        size_t n = (size_t)snprintf(text, size, HDR "  a:\n    - devices: all\n      mig-enabled: true\n"
                                                    "      mig-devices:\n");
        for (int i = 0; i < total; i++)
            n += (size_t)snprintf(text + n, size - n, "        %dg.%dgb: 1\n", 1 + i % 4, 10 + i);
        int r = parse(text, f, err, sizeof(err));
        if (total == 16) {
            assert_int_equal(r, 0);
            assert_int_equal(f->configs[0].items[0].n_counts, 16);
            assert_string_equal(f->configs[0].items[0].counts[15].profile, "4g.25gb");
            assert_int_equal(f->configs[0].items[0].counts[15].line, 22);
            assert_int_equal(f->configs[0].items[0].counts[15].column, 9);
        } else {
            assert_int_equal(r, -EINVAL);
            assert_string_equal(err, "t.yaml:7:9: mig-configs.a[0].mig-devices: lists 17 profiles; at most 16 are "
                                     "supported");
        }
    }

    /* 16 distinct filters fine, 17 not */
    for (int total = 16; total <= 17; total++) {
        size_t n = (size_t)snprintf(text, size, HDR "  a:\n    - devices: all\n      mig-enabled: false\n"
                                                    "      device-filter: [");
        for (int i = 0; i < total; i++)
            n += (size_t)snprintf(text + n, size - n, "%s\"0x%04X10DE\"", i ? ", " : "", (unsigned)i);
        snprintf(text + n, size - n, "]\n");
        int r = parse(text, f, err, sizeof(err));
        if (total == 16) {
            assert_int_equal(r, 0);
            assert_int_equal(f->configs[0].items[0].n_filters, 16);
            assert_int_equal(f->configs[0].items[0].filters[15], 0x000F10DE);
        } else {
            assert_int_equal(r, -EINVAL);
            assert_string_equal(err, "t.yaml:6:247: mig-configs.a[0].device-filter[16]: more than 16 device IDs "
                                     "in one device-filter");
        }
    }
    /* repeats count once */
    size_t n = (size_t)snprintf(text, size, HDR "  a:\n    - devices: all\n      mig-enabled: false\n"
                                                "      device-filter: [");
    for (int i = 0; i < 40; i++)
        n += (size_t)snprintf(text + n, size - n, "%s\"0x%04X10DE\"", i ? ", " : "", (unsigned)(i % 16));
    snprintf(text + n, size - n, "]\n");
    parse_ok(text, f);
    assert_int_equal(f->configs[0].items[0].n_filters, 16);
    assert_int_equal(f->configs[0].items[0].filters[15], 0x000F10DE);
}

static void test_error_buffer_edge_cases(void **state) {
    (void)state;
    _cleanup_free_ struct gs_layout_file *f = new_file();
    /* no buffer at all */
    assert_int_equal(gs_miglayout_parse("t.yaml", "version: v2\n", 12, f, NULL, 0), -EINVAL);
    /* a tiny buffer is cut, still terminated */
    char small[8];
    memset(small, 'x', sizeof(small));
    assert_int_equal(gs_miglayout_parse("t.yaml", "version: v2\n", 12, f, small, sizeof(small)), -EINVAL);
    assert_string_equal(small, "t.yaml:");
    /* text need not be NUL-terminated: only len bytes are read */
    static const char text[] = HDR "  a:\n    - {devices: all, mig-enabled: false}\nTRAILING GARBAGE: [";
    assert_int_equal(gs_miglayout_parse("t.yaml", text, strlen(text) - strlen("TRAILING GARBAGE: ["), f, NULL, 0), 0);
    assert_int_equal(f->n_configs, 1);
}

static void test_load_errors(void **state) {
    (void)state;
    _cleanup_free_ struct gs_layout_file *f = new_file();
    char err[1024] = "";
    assert_int_equal(gs_miglayout_load("/nonexistent/layouts.yaml", f, err, sizeof(err)), -ENOENT);
    assert_string_equal(err, "/nonexistent/layouts.yaml: No such file or directory");

    /* a file's errors carry its path */
    char path[] = "/tmp/test_miglayout_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    static const char bad[] = "version: v1\nmig-configs: {}\n";
    assert_int_equal(write(fd, bad, sizeof(bad) - 1), (ssize_t)(sizeof(bad) - 1));
    close(fd);
    assert_int_equal(gs_miglayout_load(path, f, err, sizeof(err)), -EINVAL);
    char want[256];
    snprintf(want, sizeof(want), "%s:2:14: mig-configs: must contain at least one config", path);
    assert_string_equal(err, want);
    unlink(path);
}

int main(void) {
    static const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_header_example),
        cmocka_unit_test(test_accepted_forms),
        cmocka_unit_test(test_profile_names),
        cmocka_unit_test(test_find),
        cmocka_unit_test(test_item_for),
        cmocka_unit_test(test_examples),
        cmocka_unit_test(test_mig_parted_default),
        cmocka_unit_test(test_header_error_example),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_error_buffer_edge_cases),
        cmocka_unit_test(test_load_errors),
    };
    return run_with_bad_cases("miglayout", fixed, GS_ARRAY_SIZE(fixed), bad_cases, GS_ARRAY_SIZE(bad_cases),
                              test_bad);
}
