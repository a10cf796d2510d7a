/* test_cdi_version.c: gs_cdi_min_version against the CDI reference library's rules
 * (specs-go/version.go), and gs_cdi_conflicts on JSON, YAML and hostile texts. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <jansson.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cdi/cdi.h"

static const char *version_of(const char *text) {
    json_t *j = json_loads(text, 0, NULL);
    assert_non_null(j);
    const char *v = gs_cdi_min_version(j);
    json_decref(j);
    return v;
}

static void test_versions(void **state) {
    (void)state;
    assert_string_equal(version_of("{}"), "0.3.0");
    assert_string_equal(version_of("{\"kind\":\"a.com/gpu\",\"devices\":[{\"name\":\"alloc-1\",\"containerEdits\":{}}]}"),
                        "0.3.0");
    assert_string_equal(version_of("{\"devices\":[{\"name\":\"x\",\"containerEdits\":{\"mounts\":[{\"type\":\"bind\"}]}}]}"),
                        "0.4.0");
    assert_string_equal(version_of("{\"containerEdits\":{\"mounts\":[{\"type\":\"\"}]}}"), "0.3.0");
    assert_string_equal(version_of("{\"devices\":[{\"name\":\"0\",\"containerEdits\":{}}]}"), "0.5.0");
    assert_string_equal(version_of("{\"devices\":[{\"name\":\"GPU-1\"},{\"name\":\"_x\"}]}"), "0.5.0");
    assert_string_equal(version_of("{\"containerEdits\":{\"deviceNodes\":[{\"path\":\"/a\",\"hostPath\":\"/b\"}]}}"),
                        "0.5.0");
    assert_string_equal(version_of("{\"kind\":\"gpuslice.io/gpu\"}"), "0.3.0");  /* dots in the vendor: fine */
    assert_string_equal(version_of("{\"kind\":\"a.com/g.pu\"}"), "0.6.0");
    assert_string_equal(version_of("{\"annotations\":{\"a\":\"b\"}}"), "0.6.0");
    assert_string_equal(version_of("{\"annotations\":{}}"), "0.3.0");
    assert_string_equal(version_of("{\"devices\":[{\"name\":\"x\",\"annotations\":{\"a\":\"b\"}}]}"), "0.6.0");
    assert_string_equal(version_of("{\"containerEdits\":{\"additionalGids\":[5]}}"), "0.7.0");
    assert_string_equal(version_of("{\"devices\":[{\"name\":\"0\",\"containerEdits\":{\"intelRdt\":{}}}]}"), "0.7.0");
}

static void test_conflicts(void **state) {
    (void)state;
    const char *names[] = { "0", "1", "GPU-a" };
    char msg[512];
    const char *yaml = "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n- name: all\n- name: GPU-a\n";
    assert_int_equal(gs_cdi_conflicts("nvidia.com/gpu", names, 3, "n.yaml", yaml, strlen(yaml), msg, sizeof(msg)), 2);
    assert_string_equal(msg, "n.yaml: defines nvidia.com/gpu=0, nvidia.com/gpu=GPU-a (2 of our devices)");
    assert_int_equal(gs_cdi_conflicts("gpuslice.io/gpu", names, 3, "n.yaml", yaml, strlen(yaml), msg, sizeof(msg)), 0);
    const char *js = "{\"kind\":\"nvidia.com/gpu\",\"devices\":[{\"name\":\"1\"}]}";
    assert_int_equal(gs_cdi_conflicts("nvidia.com/gpu", names, 3, "j.json", js, strlen(js), msg, sizeof(msg)), 1);
    const char *bad[] = { "[[[[", "kind: [1]\ndevices: 3\n", "- a\n- b\n", "", "\xff\xfe\x00" };
    for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(gs_cdi_conflicts("nvidia.com/gpu", names, 3, "b", bad[i], i == 4 ? 3 : strlen(bad[i]),
                                          msg, sizeof(msg)),
                         -EINVAL);
    assert_int_equal(gs_cdi_conflicts("nvidia.com/gpu", names, 3, "big", "", GS_CDI_SCAN_MAX + 1, msg, sizeof(msg)),
                     -EINVAL);
    /* aliases are references: a "billion laughs" document stays small */
    const char *laughs = "a: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nc: &c [*b, *b, *b, *b]\nkind: nvidia.com/gpu\n"
                         "devices: [*c, *c]\n";
    assert_int_equal(gs_cdi_conflicts("nvidia.com/gpu", names, 3, "l", laughs, strlen(laughs), msg, sizeof(msg)), 0);
}

static void test_device_names(void **state) {
    (void)state;
    char **names;
    size_t n;
    assert_int_equal(gs_cdi_device_names("{\"devices\":[{\"name\":\"0\"},{\"x\":1},{\"name\":\"GPU-a\"}]}", &names, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(names[0], "0");
    assert_string_equal(names[1], "GPU-a");
    free(names);
    assert_int_equal(gs_cdi_device_names("[]", &names, &n), -EINVAL);
}

/* A spec that lists one of our names several times counts it once (fuzz_cdiconflicts found 5 of
 * our 4 devices). */
static void test_conflicts_count_each_name_once(void **state) {
    (void)state;
    static const char *const names[] = { "0", "1" };
    const char *text = "kind: gpuslice.io/gpu\ndevices:\n  - name: \"1\"\n  - name: \"1\"\n  - name: \"1\"\n";
    char msg[256];
    assert_int_equal(gs_cdi_conflicts("gpuslice.io/gpu", names, 2, "x.yaml", text, strlen(text), msg, sizeof(msg)), 1);
    assert_string_equal(msg, "x.yaml: defines gpuslice.io/gpu=1 (1 of our devices)");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conflicts_count_each_name_once),
        cmocka_unit_test(test_versions),
        cmocka_unit_test(test_conflicts),
        cmocka_unit_test(test_device_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
