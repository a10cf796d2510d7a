/* test_kubeyaml.c: a Kubernetes object's YAML as the JSON `gpuslice kube create|replace|apply -f`
 * sends (src/cli/kubeyaml.h): the scalars' types as kubectl reads them, nesting, and the errors,
 * each naming the file, line, column and field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/kubeyaml.h"

static json_t *convert(const char *yaml) {
    json_t *out = NULL;
    char err[512] = "";
    int r = cli_kube_yaml_object("o.yaml", yaml, strlen(yaml), &out, err, sizeof(err));
    if (r < 0)
        fail_msg("%s", err);
    assert_non_null(out);
    return out;
}

static void assert_json(const char *yaml, const char *json) {
    json_t *got = convert(yaml);
    json_error_t je;
    json_t *want = json_loads(json, 0, &je);
    assert_non_null(want);
    if (!json_equal(got, want)) {
        char *s = json_dumps(got, JSON_SORT_KEYS | JSON_COMPACT);
        fail_msg("got %s, want %s", s, json);
    }
    json_decref(got);
    json_decref(want);
}

static void assert_error(const char *yaml, const char *msg) {
    json_t *out = (json_t *)1;
    char err[512] = "";
    assert_int_equal(cli_kube_yaml_object("o.yaml", yaml, strlen(yaml), &out, err, sizeof(err)), -EINVAL);
    assert_null(out);
    assert_string_equal(err, msg);
}

static void test_an_object(void **state) {
    (void)state;
    assert_json("apiVersion: v1\n"
                "kind: Pod\n"
                "metadata:\n"
                "  name: p\n"
                "  labels: {app: web, tier: \"1\"}\n"
                "  annotations:\n"
                "    note: |\n"
                "      two\n"
                "      lines\n"
                "spec:\n"
                "  containers:\n"
                "  - name: c\n"
                "    image: 'busybox:1.36'\n"
                "    args: [sleep, \"3600\"]\n"
                "    ports:\n"
                "    - containerPort: 8080\n"
                "      protocol: TCP\n"
                "  terminationGracePeriodSeconds: 0\n",
                "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\",\"labels\":{\"app\":\"web\","
                "\"tier\":\"1\"},\"annotations\":{\"note\":\"two\\nlines\\n\"}},\"spec\":{\"containers\":[{\"name\":"
                "\"c\",\"image\":\"busybox:1.36\",\"args\":[\"sleep\",\"3600\"],\"ports\":[{\"containerPort\":8080,"
                "\"protocol\":\"TCP\"}]}],\"terminationGracePeriodSeconds\":0}}");
}

/* Plain scalars typed as kubectl's YAML (1.1) types them; quoted ones are strings. */
static void test_scalar_types(void **state) {
    (void)state;
    assert_json("a: 12\nb: -3\nc: +4\nd: 0\ne: 1.5\nf: -2.5e3\ng: .5\nh: 1e2\n",
                "{\"a\":12,\"b\":-3,\"c\":4,\"d\":0,\"e\":1.5,\"f\":-2500.0,\"g\":0.5,\"h\":100.0}");
    assert_json("a: true\nb: False\nc: yes\nd: NO\ne: on\nf: Off\ng: y\nh: N\n",
                "{\"a\":true,\"b\":false,\"c\":true,\"d\":false,\"e\":true,\"f\":false,\"g\":true,\"h\":false}");
    assert_json("a: ~\nb:\nc: null\nd: NULL\n", "{\"a\":null,\"b\":null,\"c\":null,\"d\":null}");
    assert_json("a: \"true\"\nb: 'yes'\nc: \"12\"\nd: \"0755\"\ne: ''\nf: \"null\"\n",
                "{\"a\":\"true\",\"b\":\"yes\",\"c\":\"12\",\"d\":\"0755\",\"e\":\"\",\"f\":\"null\"}");
    assert_json("a: 1.2.3\nb: 12abc\nc: v1\nd: 10Gi\ne: '-'\nf: 0.0.0.0/0\ng: \"true \"\n",
                "{\"a\":\"1.2.3\",\"b\":\"12abc\",\"c\":\"v1\",\"d\":\"10Gi\",\"e\":\"-\",\"f\":\"0.0.0.0/0\","
                "\"g\":\"true \"}");
    assert_json("big: 9223372036854775807\nsmall: -9223372036854775808\n",
                "{\"big\":9223372036854775807,\"small\":-9223372036854775808}");
    assert_json("empty: {}\nnone: []\nnested: [[1, [2]], {a: [b]}]\n",
                "{\"empty\":{},\"none\":[],\"nested\":[[1,[2]],{\"a\":[\"b\"]}]}");
}

/* What would mean something else under kubectl is refused, at the field. */
static void test_ambiguous_numbers_refused(void **state) {
    (void)state;
    static const char *const bad[] = { "0755", "0x1F", "0o17", "0b101", "1_000", "-0755", ".inf", "-.Inf", ".nan" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char yaml[64], msg[256];
        snprintf(yaml, sizeof(yaml), "data:\n  mode: %s\n", bad[i]);
        snprintf(msg, sizeof(msg),
                 "o.yaml:2:9: data.mode: '%s' is a number to kubectl's YAML (1.1) but not a plain decimal: quote it "
                 "for a string, or write the number in decimal",
                 bad[i]);
        assert_error(yaml, msg);
    }
    assert_error("spec:\n  replicas: 9223372036854775808\n",
                 "o.yaml:2:13: spec.replicas: 9223372036854775808 is out of range of a 64-bit integer");
    /* fuzz_kubeyaml: a real past a double's range was refused as "not valid UTF-8" */
    assert_error("a: 1e999\n", "o.yaml:1:4: a: 1e999 is out of range of a double");
    assert_error("a: [-1.5E+400]\n", "o.yaml:1:5: a[0]: -1.5E+400 is out of range of a double");
    assert_json("a: 1e308\nb: 1e-400\n", "{\"a\": 1e308, \"b\": 0.0}");
}

static void test_errors_name_the_line_and_field(void **state) {
    (void)state;
    assert_error("metadata:\n  labels:\n    a: x\n    a: y\n",
                 "o.yaml:4:5: metadata.labels.a: duplicate key 'a' (first at line 3, column 5)");
    assert_error("spec:\n  containers:\n  - name: c\n  - {name: d, ports: [{containerPort: 0x50}]}\n",
                 "o.yaml:4:39: spec.containers[1].ports[0].containerPort: '0x50' is a number to kubectl's YAML (1.1) "
                 "but not a plain decimal: quote it for a string, or write the number in decimal");
    assert_error("", "o.yaml:1:1: no object (the document is empty)");
    assert_error("# only a comment\n", "o.yaml:1:1: no object (the document is empty)");
    assert_error("- a\n- b\n", "o.yaml:1:1: expected a mapping, got a sequence");
    assert_error("just text\n", "o.yaml:1:1: expected a mapping, got a scalar");
    json_t *out = NULL;
    char err[512] = "";
    /* libyaml's and the limits' messages: a syntax error, a second document, an alias */
    assert_int_equal(cli_kube_yaml_object("o.yaml", "a: [1,\n", 7, &out, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "o.yaml:"));
    assert_non_null(strstr(err, "syntax error"));
    assert_int_equal(cli_kube_yaml_object("o.yaml", "a: 1\n---\nb: 2\n", 14, &out, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "o.yaml:"));
    assert_int_equal(cli_kube_yaml_object("o.yaml", "a: &x 1\nb: *x\n", 14, &out, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "o.yaml:"));
    assert_null(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_an_object),
        cmocka_unit_test(test_scalar_types),
        cmocka_unit_test(test_ambiguous_numbers_refused),
        cmocka_unit_test(test_errors_name_the_line_and_field),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
