/* test_quantity.c: Kubernetes' quantity text (util/quantity.h), on the cases of apimachinery's own
 * resource.Quantity tests (parse, round up, canonical form) and on the edges gpuslice adds: exact
 * overflow, GS_QTY_EXACT, GS_QTY_BYTES, the length bound. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "util/quantity.h"

struct qcase {
    const char *in;
    int scale;
    int64_t want;
};

/* Each text's value in units of 10^scale (rounded away from zero), and the same with a sign. */
static void check_cases(const struct qcase *t, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int64_t v = 12345;
        char with[80];
        if (gs_quantity_parse(t[i].in, t[i].scale, 0, &v) != 0 || v != t[i].want)
            fail_msg("'%s' at 10^%d: got %lld, want %lld", t[i].in, t[i].scale, (long long)v, (long long)t[i].want);
        snprintf(with, sizeof(with), "+%s", t[i].in);
        assert_int_equal(gs_quantity_parse(with, t[i].scale, 0, &v), 0);
        assert_int_equal(v, t[i].want);
        snprintf(with, sizeof(with), "-%s", t[i].in);
        assert_int_equal(gs_quantity_parse(with, t[i].scale, 0, &v), 0);
        if (v != -t[i].want)
            fail_msg("'%s': got %lld, want %lld", with, (long long)v, (long long)-t[i].want);
    }
}

/* apimachinery's TestQuantityParse table, as values. */
static void test_kubernetes_parse(void **st) {
    (void)st;
    static const struct qcase t[] = {
        { "0", 0, 0 },          { "0n", 0, 0 },          { "0u", 0, 0 },           { "0m", 0, 0 },
        { "0Ki", 0, 0 },        { "0k", 0, 0 },          { "0Mi", 0, 0 },          { "0M", 0, 0 },
        { "0Gi", 0, 0 },        { "0G", 0, 0 },          { "0Ti", 0, 0 },          { "0T", 0, 0 },
        { "1", 0, 1 },          { "1Ki", 0, 1024 },      { "8Ki", 0, 8 * 1024 },   { "7Mi", 0, 7LL << 20 },
        { "6Gi", 0, 6LL << 30 }, { "5Ti", 0, 5LL << 40 }, { "4Pi", 0, 4LL << 50 }, { "3Ei", 0, 3LL << 60 },
        { "10Ti", 0, 10LL << 40 }, { "100Ti", 0, 100LL << 40 },
        { "5n", -9, 5 },        { "4u", -9, 4000 },      { "3m", -3, 3 },          { "9", 0, 9 },
        { "8k", 0, 8000 },      { "50k", 0, 50000 },     { "7M", 0, 7000000 },     { "6G", 0, 6000000000LL },
        { "5T", 0, 5000000000000LL }, { "40T", 0, 40000000000000LL }, { "300T", 0, 300000000000000LL },
        { "2P", 0, 2000000000000000LL }, { "1E", 0, 1000000000000000000LL },
        { "1E-3", -3, 1 },      { "1e3", 0, 1000 },      { "1E6", 0, 1000000 },    { "1e9", 0, 1000000000 },
        { "1E12", 0, 1000000000000LL }, { "1e15", 0, 1000000000000000LL }, { "1E18", 0, 1000000000000000000LL },
        { "1e14", 0, 100000000000000LL }, { "1e13", 0, 10000000000000LL }, { "100.035k", 0, 100035 },
        { "0.001", -3, 1 },     { "0.0005k", -3, 500 },  { "0.005", -3, 5 },       { "0.05", -3, 50 },
        { "0.5", -3, 500 },     { "0.00050k", -3, 500 }, { "0.00500", -3, 5 },     { "0.05000", -3, 50 },
        { "0.50000", -3, 500 }, { "0.5e0", -3, 500 },    { "0.5e-1", -3, 50 },     { "0.5e-2", -3, 5 },
        { "10.035M", 0, 10035000 }, { "1.2e3", 0, 1200 }, { "1.3E+6", 0, 1300000 }, { "1.40e9", 0, 1400000000 },
        { "1.53E12", 0, 1530000000000LL }, { "1.6e15", 0, 1600000000000000LL }, { "1.7E18", 0, 1700000000000000000LL },
        { "9.01", -3, 9010 }, { "8.1k", 0, 8100 }, { "7.123456M", 0, 7123456 },
        { "6.987654321G", 0, 6987654321LL }, { "5.444T", 0, 5444000000000LL }, { "40.1T", 0, 40100000000000LL },
        { "300.2T", 0, 300200000000000LL }, { "2.5P", 0, 2500000000000000LL }, { "1.01E", 0, 1010000000000000000LL },
        /* things that saturate or round (at nano, as Kubernetes keeps them) */
        { "3.001n", -9, 4 },    { "1.1E-9", -9, 2 },     { "0.0000000001", -9, 1 }, { "0.0000000005", -9, 1 },
        { "0.00000000050", -9, 1 }, { "0.5e-9", -9, 1 }, { "0.9n", -9, 1 },       { "0.00000012345", -9, 124 },
        { "0.00000012354", -9, 124 },
        /* fractional binary ones */
        { "100.035Ki", -3, 102435840 }, { "0.5Mi", 0, 524288 }, { "0.05Gi", 0, 53687092 },
        { "0.025Ti", 0, 27487790695 },
        /* things written by trolls */
        { "0.000000000001Ki", -9, 2 }, { ".001", -3, 1 }, { ".0001k", -3, 100 }, { "1.", 0, 1 },
        { "1.G", 0, 1000000000 },
    };
    /* "12E" is past int64 (and "9Ei"): refused, where Kubernetes caps it */
    int64_t v;
    assert_int_equal(gs_quantity_parse("12E", 0, 0, &v), -ERANGE);
    assert_int_equal(gs_quantity_parse("9Ei", 0, 0, &v), -ERANGE);
    assert_int_equal(gs_quantity_parse("9223372036854775807Ki", 0, 0, &v), -ERANGE);
    check_cases(t, sizeof(t) / sizeof(t[0]));
}

/* apimachinery's invalid texts, and a few more. */
static void test_kubernetes_invalid(void **st) {
    (void)st;
    static const char *const bad[] = { "1.1.M", "1+1.0M", "0.1mi", "0.1am", "aoeu", ".5i", "1i", "-3.01i", "-3.01e-",
                                       " 1", "1 ", "", "1K", "1KiB", "10GB", "1e", "1e+", "1E3.5", "1ee3", "1Ki5",
                                       "--1", "1-", "0x10", "1,5", "1.5.", "\t1", "1Gi ", "e" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t v = 7;
        if (gs_quantity_parse(bad[i], 0, 0, &v) != -EINVAL || v != 7)
            fail_msg("'%s' parsed", bad[i]);
    }
    int64_t v;
    assert_int_equal(gs_quantity_parse(NULL, 0, 0, &v), -EINVAL);
    assert_int_equal(gs_quantity_parse("1", -10, 0, &v), -EINVAL);
    assert_int_equal(gs_quantity_parse("1", 10, 0, &v), -EINVAL);
}

/* A number without digits is 0, as Kubernetes reads it ("." "-" "Gi"). */
static void test_no_digits(void **st) {
    (void)st;
    static const char *const zero[] = { ".", "-.", "+", "-", "Gi", "m", "e3", "-0.000", "00", "0.e5" };
    for (size_t i = 0; i < sizeof(zero) / sizeof(zero[0]); i++) {
        int64_t v = 7;
        assert_int_equal(gs_quantity_parse(zero[i], 0, GS_QTY_EXACT, &v), 0);
        assert_int_equal(v, 0);
    }
}

/* apimachinery's TestQuantityRoundUp: away from zero. */
static void test_round_up(void **st) {
    (void)st;
    static const struct qcase t[] = {
        { "9.01", -3, 9010 }, { "9.01", -2, 901 }, { "9.01", -1, 91 }, { "9.01", 0, 10 }, { "9.01", 1, 1 },
        { "9.01", 2, 1 },     { "0.1m", -3, 1 },   { "1.5", 0, 2 },    { "1e-30", 0, 1 }, { "1e-99999", -9, 1 },
        { "999.9999", 0, 1000 },
    };
    check_cases(t, sizeof(t) / sizeof(t[0]));
    int64_t v;
    assert_int_equal(gs_quantity_parse("9.01", 0, GS_QTY_EXACT, &v), -EDOM);
    assert_int_equal(gs_quantity_parse("0.1m", -3, GS_QTY_EXACT, &v), -EDOM);
    assert_int_equal(gs_quantity_parse("1e-30", 0, GS_QTY_EXACT, &v), -EDOM);
    assert_int_equal(gs_quantity_parse("1.5Gi", 0, GS_QTY_EXACT, &v), 0);
    assert_int_equal(v, 1536LL << 20);
    assert_int_equal(gs_quantity_parse("1500m", 0, GS_QTY_EXACT, &v), -EDOM);
    assert_int_equal(gs_quantity_parse("2000m", 0, GS_QTY_EXACT, &v), 0);
    assert_int_equal(v, 2);
}

/* Exact up to int64, refused past it; no float on the way (2^63 - 1 has 19 digits). */
static void test_range(void **st) {
    (void)st;
    int64_t v;
    assert_int_equal(gs_quantity_parse("9223372036854775807", 0, 0, &v), 0);
    assert_int_equal(v, INT64_MAX);
    assert_int_equal(gs_quantity_parse("-9223372036854775807", 0, 0, &v), 0);
    assert_int_equal(v, -INT64_MAX);
    assert_int_equal(gs_quantity_parse("9223372036854775808", 0, 0, &v), -ERANGE);
    assert_int_equal(gs_quantity_parse("9223372036854775807", -3, 0, &v), -ERANGE);
    assert_int_equal(gs_quantity_parse("9223372036854775.807", -3, 0, &v), 0);
    assert_int_equal(v, INT64_MAX);
    assert_int_equal(gs_quantity_parse("9223372036854775.8071", -3, 0, &v), -ERANGE); /* rounds up past it */
    assert_int_equal(gs_quantity_parse("7Ei", 0, 0, &v), 0);
    assert_int_equal(v, 7LL << 60);
    assert_int_equal(gs_quantity_parse("8Ei", 0, 0, &v), -ERANGE);
    assert_int_equal(gs_quantity_parse("7.99999999Ei", 0, 0, &v), 0);
    assert_int_equal(gs_quantity_parse("1e18", 0, 0, &v), 0);
    assert_int_equal(gs_quantity_parse("1e19", 0, 0, &v), -ERANGE);
    assert_int_equal(gs_quantity_parse("0.00000000000000000001e38", 0, 0, &v), 0);
    assert_int_equal(v, 1000000000000000000LL);
    assert_int_equal(gs_quantity_parse("1e2147483647", 0, 0, &v), -ERANGE);
    assert_int_equal(gs_quantity_parse("0e2147483647", 0, 0, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(gs_quantity_parse("1e-2147483647", -9, 0, &v), 0); /* rounds up to one unit */
    assert_int_equal(v, 1);
    assert_int_equal(gs_quantity_parse("1e2147483648", 0, 0, &v), -EINVAL);
    assert_int_equal(gs_quantity_parse("0e-99999999999999999999999", 0, 0, &v), -EINVAL);
    assert_int_equal(gs_quantity_parse("9e15", -3, 0, &v), 0);
    assert_int_equal(v, 9000000000000000000LL);
    assert_int_equal(gs_quantity_parse("1e16", -3, 0, &v), -ERANGE);
    /* at most GS_QUANTITY_MAX characters */
    char s[GS_QUANTITY_MAX + 2];
    memset(s, '0', sizeof(s));
    s[GS_QUANTITY_MAX] = '\0';
    s[GS_QUANTITY_MAX - 1] = '1';
    assert_int_equal(gs_quantity_parse(s, 0, 0, &v), 0);
    assert_int_equal(v, 1);
    s[GS_QUANTITY_MAX] = '0';
    s[GS_QUANTITY_MAX + 1] = '\0';
    assert_int_equal(gs_quantity_parse(s, 0, 0, &v), -EINVAL);
}

/* GS_QTY_BYTES: one B after the quantity, the same value; nowhere else. */
static void test_bytes_unit(void **st) {
    (void)st;
    static const struct {
        const char *in;
        int64_t want;
    } t[] = { { "8GiB", 8LL << 30 }, { "512MiB", 512LL << 20 }, { "10GB", 10000000000LL }, { "1024B", 1024 },
              { "1024", 1024 },      { "10G", 10000000000LL },  { "10Gi", 10LL << 30 },    { "1.5KiB", 1536 } };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        int64_t v;
        assert_int_equal(gs_quantity_parse(t[i].in, 0, GS_QTY_BYTES | GS_QTY_EXACT, &v), 0);
        assert_int_equal(v, t[i].want);
    }
    static const char *const bad[] = { "B", "8GiBB", "8 GiB", "8KB", "8XB", "8b", "8BGi" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t v;
        if (gs_quantity_parse(bad[i], 0, GS_QTY_BYTES, &v) != -EINVAL)
            fail_msg("'%s' parsed", bad[i]);
    }
    int64_t v;
    assert_int_equal(gs_quantity_parse("8GiB", 0, 0, &v), -EINVAL);
}

/* apimachinery's TestQuantityString / TestNewSet canonical forms, and back. */
static void test_format(void **st) {
    (void)st;
    static const struct {
        int64_t v;
        int scale;
        unsigned flags;
        const char *want;
    } t[] = {
        { 1LL << 30, 0, GS_QTY_BINARY, "1Gi" },    { 300LL << 20, 0, GS_QTY_BINARY, "300Mi" },
        { 6 * 1024, 0, GS_QTY_BINARY, "6Ki" },      { 1001LL << 30, 0, GS_QTY_BINARY, "1001Gi" },
        { 1LL << 40, 0, GS_QTY_BINARY, "1Ti" },     { 5, 0, GS_QTY_BINARY, "5" },
        { 1025, 0, GS_QTY_BINARY, "1025" },         { 0, 0, GS_QTY_BINARY, "0" },
        { 1000000000, 0, 0, "1G" },                 { 1, -3, 0, "1m" },
        { 80, -3, 0, "80m" },                       { 1080, -3, 0, "1080m" },
        { 300000000, 0, 0, "300M" },                { 1000000000000LL, 0, 0, "1T" },
        { 1234567000000LL, 0, 0, "1234567M" },      { 3000, 0, 0, "3k" },
        { 1000, 0, 0, "1k" },                       { 1234000, 0, 0, "1234k" },
        { 1, -9, 0, "1n" },                         { 1080, -9, 0, "1080n" },
        { 1000, -9, 0, "1u" },                      { 1000, -3, 0, "1" },
        { -9010, -3, 0, "-9010m" },                 { INT64_MAX, 0, 0, "9223372036854775807" },
        { INT64_MIN, 0, 0, "-9223372036854775808" }, { 1000000000000000000LL, 0, 0, "1E" },
        { 1000000000000000000LL, 3, 0, "1000E" },   { 2000, -3, GS_QTY_BINARY, "2" },
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        char buf[32];
        int n = gs_quantity_format(t[i].v, t[i].scale, t[i].flags, buf, sizeof(buf));
        assert_int_equal(n, (int)strlen(t[i].want));
        assert_string_equal(buf, t[i].want);
        int64_t back;
        if (t[i].v == INT64_MIN || (t[i].scale == 3 && t[i].v > INT64_MAX / 1000))
            continue; /* past what parse takes back */
        assert_int_equal(gs_quantity_parse(buf, t[i].scale, GS_QTY_EXACT, &back), 0);
        assert_int_equal(back, t[i].v);
    }
    char small[3];
    assert_int_equal(gs_quantity_format(1024, 0, 0, small, sizeof(small)), -ENOSPC);
    assert_int_equal(gs_quantity_format(1, -1, 0, small, sizeof(small)), -EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kubernetes_parse), cmocka_unit_test(test_kubernetes_invalid),
        cmocka_unit_test(test_no_digits),        cmocka_unit_test(test_round_up),
        cmocka_unit_test(test_range),            cmocka_unit_test(test_bytes_unit),
        cmocka_unit_test(test_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
