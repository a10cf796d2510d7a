/* test_util.c: size and integer parsing (used for every size that comes from outside), bounded
 * copies, atomic file writes and bounded reads. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "util/util.h"

static void test_parse_size(void **state) {
    (void)state;
    unsigned long long b;
    assert_int_equal(gs_parse_size("8GiB", &b), 0);
    assert_int_equal(b, 8ULL << 30);
    assert_int_equal(gs_parse_size("512MiB", &b), 0);
    assert_int_equal(b, 512ULL << 20);
    assert_int_equal(gs_parse_size("10G", &b), 0);
    assert_int_equal(b, 10ULL << 30);
    assert_int_equal(gs_parse_size("1000", &b), 0);
    assert_int_equal(b, 1000);
    assert_int_equal(gs_parse_size("2GB", &b), 0);
    assert_int_equal(b, 2000000000ULL);
    assert_int_equal(gs_parse_size("", &b), -EINVAL);
    assert_int_equal(gs_parse_size("-1GiB", &b), -EINVAL);
    assert_int_equal(gs_parse_size("8 GiB", &b), -EINVAL);
    assert_int_equal(gs_parse_size("8XB", &b), -EINVAL);
    assert_int_equal(gs_parse_size("99999999999999999999", &b), -ERANGE);
    assert_int_equal(gs_parse_size("17179869184TiB", &b), -ERANGE);
}

static void test_parse_uint(void **state) {
    (void)state;
    unsigned long long v;
    assert_int_equal(gs_parse_uint("42", 0, 100, &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(gs_parse_uint("101", 0, 100, &v), -ERANGE);
    assert_int_equal(gs_parse_uint("4x", 0, 100, &v), -EINVAL);
    assert_int_equal(gs_parse_uint("-4", 0, 100, &v), -EINVAL);
    assert_int_equal(gs_parse_uint(" 4", 0, 100, &v), -EINVAL);
    assert_int_equal(gs_parse_uint("", 0, 100, &v), -EINVAL);
}

static void test_strlcpy(void **state) {
    (void)state;
    char b[4];
    assert_int_equal(gs_strlcpy(b, "abc", sizeof(b)), 0);
    assert_string_equal(b, "abc");
    assert_int_equal(gs_strlcpy(b, "abcd", sizeof(b)), -ENAMETOOLONG);
    assert_string_equal(b, "abc");
}

static void test_files(void **state) {
    (void)state;
    char dir[] = "/tmp/gs-util-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof(path), "%s/a/b/f", dir);
    char sub[64];
    snprintf(sub, sizeof(sub), "%s/a/b", dir);
    assert_int_equal(gs_mkdir_p(sub, 0700), 0);
    assert_int_equal(gs_write_file_atomic(path, "hello", 5, true), 0);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(gs_read_file(path, 100, &text, &len), 0);
    assert_int_equal(len, 5);
    assert_string_equal(text, "hello");
    free(text);
    assert_int_equal(gs_read_file(path, 3, &text, &len), -EFBIG);
    assert_int_equal(gs_read_file(sub, 100, &text, &len), -EISDIR);
    assert_int_equal(gs_mkdir_p(path, 0700), -ENOTDIR);
    char cmd[100];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(gs_read_file(path, 100, &text, &len), -ENOENT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_parse_uint),
        cmocka_unit_test(test_strlcpy),
        cmocka_unit_test(test_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
