/* test_nodedesc.c: unit tests for the node description parser (src/config/nodedesc.c) and the
 * YAML helpers under it (src/config/yamlutil.c). Bad inputs are table-driven: each one checks
 * the exact "NAME:LINE:COLUMN: PATH:" prefix, because users find their mistake by it. */
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
#include "config/nodedesc.h"
#include "config/yamlutil.h"
#include "util/util.h"

#ifndef GS_SOURCE_ROOT
#error "GS_SOURCE_ROOT must be defined by the build"
#endif

static int parse(const char *yaml, struct gs_nodedesc *nd, char *err, size_t errlen) {
    return gs_nodedesc_parse("t.yaml", yaml, strlen(yaml), nd, err, errlen);
}

static void parse_ok(const char *yaml, struct gs_nodedesc *nd) {
    char err[1024] = "";
    int r = parse(yaml, nd, err, sizeof(err));
    if (r < 0)
        fail_msg("unexpected error %d: %s", r, err);
}

/* ---- good inputs ---- */

static void test_minimal(void **state) {
    (void)state;
    struct gs_nodedesc nd;
    parse_ok("gpus:\n  - model: L4\n", &nd);
    assert_int_equal(nd.n_gpus, 1);
    assert_ptr_equal(nd.gpus[0].model, gs_catalog_find("L4"));
    assert_false(nd.gpus[0].mig_enabled);
    /* defaults */
    assert_string_equal(nd.driver_version, "580.65.06");
    assert_int_equal(nd.cuda_major, 13);
    assert_int_equal(nd.cuda_minor, 0);
}

static void test_multiple_entries(void **state) {
    (void)state;
    struct gs_nodedesc nd;
    parse_ok("gpus:\n"
             "  - model: H100-SXM5-80GB\n"
             "    count: 4\n"
             "    mig: enabled\n"
             "  - model: L4\n"
             "    count: 2\n"
             "  - model: A30\n"
             "    mig: true\n"
             "  - model: A100-SXM4-40GB\n"
             "    mig: false\n"
             "  - model: H100-NVL\n"
             "    mig: disabled\n"
             "driver_version: \"570.172.08\"\n"
             "cuda_version: 12.8\n",
             &nd);
    assert_int_equal(nd.n_gpus, 9);
    const struct gs_model *h100 = gs_catalog_find("H100-SXM5-80GB"), *l4 = gs_catalog_find("L4");
    for (unsigned i = 0; i < 4; i++) {
        assert_ptr_equal(nd.gpus[i].model, h100);
        assert_true(nd.gpus[i].mig_enabled);
    }
    for (unsigned i = 4; i < 6; i++) {
        assert_ptr_equal(nd.gpus[i].model, l4);
        assert_false(nd.gpus[i].mig_enabled);
    }
    assert_string_equal(nd.gpus[6].model->key, "A30");
    assert_true(nd.gpus[6].mig_enabled);
    assert_string_equal(nd.gpus[7].model->key, "A100-SXM4-40GB");
    assert_false(nd.gpus[7].mig_enabled);
    assert_string_equal(nd.gpus[8].model->key, "H100-NVL");
    assert_false(nd.gpus[8].mig_enabled);
    assert_string_equal(nd.driver_version, "570.172.08");
    assert_int_equal(nd.cuda_major, 12);
    assert_int_equal(nd.cuda_minor, 8);
}

static void test_case_insensitive_model(void **state) {
    (void)state;
    struct gs_nodedesc nd;
    parse_ok("gpus:\n  - model: h100-sxm5-80GB\n    count: 2\n", &nd);
    assert_int_equal(nd.n_gpus, 2);
    /* the canonical catalogue entry, not the user's spelling */
    assert_string_equal(nd.gpus[0].model->key, "H100-SXM5-80GB");
    assert_ptr_equal(nd.gpus[1].model, gs_catalog_find("H100-SXM5-80GB"));
}

static void test_flow_style_and_quoting(void **state) {
    (void)state;
    struct gs_nodedesc nd;
    parse_ok("{gpus: [{model: 'T4', count: \"3\"}], cuda_version: \"12.10\", driver_version: 535}", &nd);
    assert_int_equal(nd.n_gpus, 3);
    assert_string_equal(nd.gpus[2].model->key, "T4");
    assert_int_equal(nd.cuda_major, 12);
    assert_int_equal(nd.cuda_minor, 10);
    assert_string_equal(nd.driver_version, "535");
}

static void test_max_gpus(void **state) {
    (void)state;
    struct gs_nodedesc nd;
    parse_ok("gpus:\n  - model: B200\n    count: 32\n  - model: T4\n    count: 31\n  - model: L4\n", &nd);
    assert_int_equal(nd.n_gpus, GS_NODE_MAX_GPUS);
    assert_string_equal(nd.gpus[63].model->key, "L4");
    parse_ok("gpus:\n  - model: L4\n    count: 64\n", &nd);
    assert_int_equal(nd.n_gpus, 64);
}

static void test_crlf_bom_comments(void **state) {
    (void)state;
    struct gs_nodedesc nd;
    parse_ok("\xEF\xBB\xBF# node\r\ngpus:\r\n  - model: L4 # inline\r\n    count: 2\r\n...\r\n", &nd);
    assert_int_equal(nd.n_gpus, 2);
    parse_ok("---\ngpus:\n- model: T4\n", &nd);
    assert_int_equal(nd.n_gpus, 1);
}

/* ---- bad inputs ---- */

static const struct bad_case bad_cases[] = {
    { "unknown model", "gpus:\n  - model: H100\n", "t.yaml:2:12: gpus[0].model: ",
      { "unknown model 'H100'", "known models: ", "H100-SXM5-80GB" } },
    { "unknown top-level key", "gpus:\n  - model: L4\ncolour: red\n", "t.yaml:3:1: colour: ",
      { "unknown key 'colour'", "allowed keys: gpus, driver_version, cuda_version" } },
    { "unknown entry key", "gpus:\n  - model: L4\n    colour: red\n", "t.yaml:3:5: gpus[0].colour: ",
      { "unknown key 'colour'", "allowed keys: model, count, mig" } },
    { "count 0", "gpus:\n  - model: L4\n    count: 0\n", "t.yaml:3:12: gpus[0].count: ",
      { "0 is out of range 1..64" } },
    { "count 65", "gpus:\n  - model: L4\n    count: 65\n", "t.yaml:3:12: gpus[0].count: ",
      { "65 is out of range 1..64" } },
    { "count four", "gpus:\n  - model: L4\n    count: four\n", "t.yaml:3:12: gpus[0].count: ",
      { "expected an integer in 1..64", "'four'" } },
    { "count negative", "gpus:\n  - model: L4\n    count: -1\n", "t.yaml:3:12: gpus[0].count: ",
      { "expected an integer", "'-1'" } },
    { "count leading zero", "gpus:\n  - model: L4\n    count: 010\n", "t.yaml:3:12: gpus[0].count: ",
      { "leading zeros", "'010'" } },
    { "count huge", "gpus:\n  - model: L4\n    count: 99999999999999999999999\n", "t.yaml:3:12: gpus[0].count: ",
      { "out of range 1..64" } },
    { "total over 64", "gpus:\n  - model: L4\n    count: 40\n  - model: T4\n    count: 30\n",
      "t.yaml:5:12: gpus[1].count: ", { "total GPU count 70", "maximum of 64" } },
    { "total over 64 by default count", "gpus:\n  - model: L4\n    count: 64\n  - model: T4\n",
      "t.yaml:4:5: gpus[1]: ", { "total GPU count 65", "maximum of 64" } },
    { "mig on L4", "gpus:\n  - model: A30\n  - model: L4\n    mig: enabled\n", "t.yaml:4:10: gpus[1].mig: ",
      { "model L4 does not support MIG" } },
    { "mig maybe", "gpus:\n  - model: A30\n    mig: maybe\n", "t.yaml:3:10: gpus[0].mig: ",
      { "invalid value 'maybe'", "enabled, disabled, true, false" } },
    { "gpus a scalar", "gpus: L4\n", "t.yaml:1:7: gpus: ", { "expected a sequence, got a scalar" } },
    { "gpus a mapping", "gpus:\n  model: L4\n", "t.yaml:2:3: gpus: ", { "expected a sequence, got a mapping" } },
    { "gpus empty value", "gpus:\ncuda_version: \"13.0\"\n", "t.yaml:1:6: gpus: ",
      { "expected a sequence, got an empty value" } },
    { "gpus empty list", "gpus: []\n", "t.yaml:1:7: gpus: ", { "at least one GPU" } },
    { "gpus missing", "cuda_version: \"13.0\"\n", "t.yaml:1:1: ", { "missing required key 'gpus'" } },
    { "entry not a mapping", "gpus:\n  - L4\n", "t.yaml:2:5: gpus[0]: ", { "expected a mapping, got a scalar" } },
    { "missing model", "gpus:\n  - model: L4\n  - count: 2\n", "t.yaml:3:5: gpus[1]: ",
      { "missing required key 'model'" } },
    { "model empty", "gpus:\n  - model:\n    count: 1\n", "t.yaml:2:11: gpus[0].model: ", { "missing value" } },
    { "model a list", "gpus:\n  - model: [L4]\n", "t.yaml:2:12: gpus[0].model: ", { "expected a scalar" } },
    { "model with NUL", "gpus:\n  - model: \"L4\\0x\"\n", "t.yaml:2:12: gpus[0].model: ", { "NUL" } },
    { "syntax error", "gpus:\n  - model: L4\n   count: 2\n", "t.yaml:3:4: ", { "syntax error" } },
    { "unclosed flow", "gpus: [{model: L4}\n", "t.yaml:2:1: ", { "syntax error", "line 1, column 7" } },
    { "control character", "gpus:\n  - model: L4\x01\n", "t.yaml:2:14: ", { "syntax error", "control characters" } },
    { "invalid utf-8", "gpus:\n  - model: \xC3\x28\n", "t.yaml:2:13: ", { "syntax error" } },
    { "anchor and alias", "gpus:\n  - &x {model: L4}\n  - *x\n", "t.yaml:2:5: ",
      { "anchors and aliases are not supported" } },
    { "alias alone", "gpus: *x\n", "t.yaml:1:7: ", { "anchors and aliases are not supported" } },
    { "tag", "gpus:\n  - model: L4\n    count: !!int 3\n", "t.yaml:3:12: ", { "tags are not supported" } },
    { "duplicate entry key", "gpus:\n  - model: L4\n    model: T4\n", "t.yaml:3:5: gpus[0].model: ",
      { "duplicate key 'model'", "first at line 2, column 5" } },
    { "duplicate top-level key", "gpus:\n  - model: L4\ngpus:\n  - model: T4\n", "t.yaml:3:1: gpus: ",
      { "duplicate key 'gpus'" } },
    { "complex key", "? [a]\n: 1\n", "t.yaml:1:3: ", { "keys must be strings" } },
    { "empty document", "", "t.yaml:1:1: ", { "document is empty" } },
    { "comment only", "# nothing here\n", "t.yaml:1:1: ", { "document is empty" } },
    { "null document", "--- ~\n", "t.yaml:1:5: ", { "document is empty" } },
    { "root a sequence", "- model: L4\n", "t.yaml:1:1: ", { "expected a mapping" } },
    { "two documents", "gpus:\n  - model: L4\n---\ngpus:\n  - model: T4\n", "t.yaml:3:1: ",
      { "more than one document" } },
    { "nesting too deep",
      "gpus: [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n", "t.yaml:1:38: ",
      { "nesting deeper than 32" } },
    { "bad driver_version", "gpus:\n  - model: L4\ndriver_version: 580..1\n", "t.yaml:3:17: driver_version: ",
      { "invalid driver version '580..1'", "580.65.06" } },
    { "driver_version letters", "gpus:\n  - model: L4\ndriver_version: \"580.65.06-beta\"\n",
      "t.yaml:3:17: driver_version: ", { "invalid driver version" } },
    { "driver_version too long", "gpus:\n  - model: L4\ndriver_version: 1.2.3.4.5.6.7.8.9.10.11.12.13.14.15\n",
      "t.yaml:3:17: driver_version: ", { "invalid driver version" } },
    { "bad cuda_version", "gpus:\n  - model: L4\ncuda_version: 13\n", "t.yaml:3:15: cuda_version: ",
      { "invalid CUDA version '13'", "MAJOR.MINOR" } },
    { "cuda_version three parts", "gpus:\n  - model: L4\ncuda_version: 13.0.1\n", "t.yaml:3:15: cuda_version: ",
      { "invalid CUDA version" } },
};

static void test_bad(void **state) {
    const struct bad_case *c = *state;
    struct gs_nodedesc nd;
    memset(&nd, 0xA5, sizeof(nd));
    struct gs_nodedesc before = nd;
    char err[1024] = "";

    int r = parse(c->yaml, &nd, err, sizeof(err));
    check_bad_message(c, r, err, false);
    /* failed parses leave the output alone */
    assert_memory_equal(&nd, &before, sizeof(nd));
}

static void test_too_large(void **state) {
    (void)state;
    size_t len = GS_YAML_MAX_SIZE + 1;
    _cleanup_free_ char *text = malloc(len);
    assert_non_null(text);
    memset(text, ' ', len);
    struct gs_nodedesc nd;
    char err[256];
    assert_int_equal(gs_nodedesc_parse("big.yaml", text, len, &nd, err, sizeof(err)), -EINVAL);
    assert_string_equal(err, "big.yaml:1:1: document is larger than 1 MiB");
}

/* The text need not be NUL-terminated: only len bytes are read. */
static void test_length_bounded(void **state) {
    (void)state;
    const char text[] = "gpus:\n  - model: L4\nJUNK: [";
    struct gs_nodedesc nd;
    char err[256] = "";
    assert_int_equal(gs_nodedesc_parse("t.yaml", text, strlen("gpus:\n  - model: L4\n"), &nd, err, sizeof(err)), 0);
    assert_int_equal(nd.n_gpus, 1);
}

static void test_error_buffer_edge_cases(void **state) {
    (void)state;
    struct gs_nodedesc nd;
    char small[12];
    memset(small, 'x', sizeof(small));
    assert_int_equal(parse("gpus: 3\n", &nd, small, sizeof(small)), -EINVAL);
    assert_string_equal(small, "t.yaml:1:7:");
    assert_int_equal(parse("gpus: 3\n", &nd, NULL, 0), -EINVAL);
    char one[1] = { 'x' };
    assert_int_equal(parse("gpus: 3\n", &nd, one, sizeof(one)), -EINVAL);
    assert_int_equal(one[0], '\0');
    /* control characters from user text never split the line */
    char err[256];
    assert_int_equal(parse("gpus:\n  - model: L4\n    \"co\\nlour\": 1\n", &nd, err, sizeof(err)), -EINVAL);
    assert_null(strchr(err, '\n'));
    assert_non_null(strstr(err, "unknown key 'co?lour'"));
}

/* ---- files ---- */

static void test_load_missing_file(void **state) {
    (void)state;
    struct gs_nodedesc nd;
    char err[512];
    const char *path = "/nonexistent-gpuslice-dir/node.yaml";
    assert_int_equal(gs_nodedesc_load(path, &nd, err, sizeof(err)), -ENOENT);
    assert_string_equal(err, "/nonexistent-gpuslice-dir/node.yaml: No such file or directory");
}

static void test_load_directory(void **state) {
    (void)state;
    struct gs_nodedesc nd;
    char err[512];
    assert_int_equal(gs_nodedesc_load("/", &nd, err, sizeof(err)), -EISDIR);
    assert_string_equal(err, "/: Is a directory");
}

static void test_load_large_file(void **state) {
    (void)state;
    char path[] = "/tmp/gs-nodedesc-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    static char chunk[64 * 1024];
    memset(chunk, '#', sizeof(chunk));
    for (int i = 0; i < 17; i++)
        assert_int_equal(write(fd, chunk, sizeof(chunk)), (ssize_t)sizeof(chunk));
    close(fd);
    struct gs_nodedesc nd;
    char err[512], want[600];
    int r = gs_nodedesc_load(path, &nd, err, sizeof(err));
    unlink(path);
    assert_int_equal(r, -EFBIG);
    snprintf(want, sizeof(want), "%s: file is larger than 1 MiB", path);
    assert_string_equal(err, want);
}

static void test_load_parse_error_names_file(void **state) {
    (void)state;
    char path[] = "/tmp/gs-nodedesc-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char text[] = "gpus:\n  - model: L4\n    count: 0\n";
    assert_int_equal(write(fd, text, sizeof(text) - 1), (ssize_t)(sizeof(text) - 1));
    close(fd);
    struct gs_nodedesc nd;
    char err[512], want[600];
    int r = gs_nodedesc_load(path, &nd, err, sizeof(err));
    unlink(path);
    assert_int_equal(r, -EINVAL);
    snprintf(want, sizeof(want), "%s:3:12: gpus[0].count: 0 is out of range 1..64", path);
    assert_string_equal(err, want);
}

static void load_example(const char *file, struct gs_nodedesc *nd) {
    char path[1024], err[1024] = "";
    snprintf(path, sizeof(path), "%s/examples/nodes/%s", GS_SOURCE_ROOT, file);
    int r = gs_nodedesc_load(path, nd, err, sizeof(err));
    if (r < 0)
        fail_msg("%s: %d: %s", path, r, err);
}

static void test_examples(void **state) {
    (void)state;
    struct gs_nodedesc nd;

    load_example("h100x4-l4x2.yaml", &nd);
    assert_int_equal(nd.n_gpus, 6);
    assert_string_equal(nd.gpus[0].model->key, "H100-SXM5-80GB");
    assert_true(nd.gpus[3].mig_enabled);
    assert_string_equal(nd.gpus[4].model->key, "L4");
    assert_false(nd.gpus[5].mig_enabled);

    load_example("a100-mixed.yaml", &nd);
    assert_int_equal(nd.n_gpus, 4);
    assert_true(nd.gpus[0].mig_enabled);
    assert_false(nd.gpus[2].mig_enabled);
    assert_string_equal(nd.gpus[3].model->key, "A30");
    assert_true(nd.gpus[3].mig_enabled);

    load_example("h200x8.yaml", &nd);
    assert_int_equal(nd.n_gpus, 8);
    assert_string_equal(nd.gpus[7].model->key, "H200-SXM-141GB");
    assert_string_equal(nd.driver_version, "580.65.06");

    load_example("t4x2.yaml", &nd);
    assert_int_equal(nd.n_gpus, 2);
    assert_string_equal(nd.gpus[1].model->key, "T4");
    assert_false(nd.gpus[1].mig_enabled);
}

/* ---- yamlutil pieces nodedesc does not exercise ---- */

static void test_yaml_bool_and_free_form_maps(void **state) {
    (void)state;
    const char text[] = "flags: {a: true, b: No, c: YES, d: off}\n"
                        "names:\n  x: 1\n  y: 2\n  x: 3\n";
    char err[256] = "";
    _cleanup_yaml_ struct gs_yaml y = { 0 };
    assert_int_equal(gs_yaml_load(&y, "u.yaml", text, sizeof(text) - 1, err, sizeof(err)), 0);
    yaml_node_t *root = gs_yaml_root(&y);
    assert_int_equal(gs_yaml_check_keys(&y, root, NULL, NULL), 0);

    yaml_node_t *flags = gs_yaml_map_get(&y, root, "flags");
    assert_int_equal(gs_yaml_check_keys(&y, flags, "flags", NULL), 0);
    assert_int_equal(gs_yaml_map_len(flags), 4);
    bool want[] = { true, false, true };
    for (size_t i = 0; i < 3; i++) {
        const char *key;
        yaml_node_t *value;
        bool b;
        char p[GS_YAML_PATH_MAX];
        assert_int_equal(gs_yaml_map_at(&y, flags, i, &key, &value), 0);
        assert_int_equal(gs_yaml_bool(&y, value, gs_yaml_path_key(p, "flags", key), &b), 0);
        assert_int_equal(b, want[i]);
    }
    const char *key;
    yaml_node_t *value;
    bool b;
    assert_int_equal(gs_yaml_map_at(&y, flags, 3, &key, &value), 0);
    assert_int_equal(gs_yaml_bool(&y, value, "flags.d", &b), -EINVAL);
    assert_string_equal(err, "u.yaml:1:36: flags.d: invalid value 'off'; expected true or false (or yes/no)");
    assert_int_equal(gs_yaml_map_at(&y, flags, 4, &key, &value), -ERANGE);

    yaml_node_t *names = gs_yaml_map_get(&y, root, "names");
    assert_int_equal(gs_yaml_check_keys(&y, names, "names", NULL), -EINVAL);
    assert_string_equal(err, "u.yaml:5:3: names.x: duplicate key 'x' (first at line 3, column 3)");

    char p[GS_YAML_PATH_MAX];
    assert_string_equal(gs_yaml_path_index(p, "a.b", 7), "a.b[7]");
    assert_string_equal(gs_yaml_path_key(p, "", "top"), "top");
    assert_null(gs_yaml_map_get(&y, root, "absent"));
    assert_null(gs_yaml_seq_at(&y, root, 0));
}

int main(void) {
    static const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_minimal),
        cmocka_unit_test(test_multiple_entries),
        cmocka_unit_test(test_case_insensitive_model),
        cmocka_unit_test(test_flow_style_and_quoting),
        cmocka_unit_test(test_max_gpus),
        cmocka_unit_test(test_crlf_bom_comments),
        cmocka_unit_test(test_too_large),
        cmocka_unit_test(test_length_bounded),
        cmocka_unit_test(test_error_buffer_edge_cases),
        cmocka_unit_test(test_load_missing_file),
        cmocka_unit_test(test_load_directory),
        cmocka_unit_test(test_load_large_file),
        cmocka_unit_test(test_load_parse_error_names_file),
        cmocka_unit_test(test_examples),
        cmocka_unit_test(test_yaml_bool_and_free_form_maps),
    };
    return run_with_bad_cases("nodedesc", fixed, GS_ARRAY_SIZE(fixed), bad_cases, GS_ARRAY_SIZE(bad_cases),
                              test_bad);
}
