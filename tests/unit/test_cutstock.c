/* test_cutstock.c: the cutting-stock program. Known optima (each checked against HiGHS through
 * scipy.optimize.linprog over every pattern, when the test was written), the plan's validity on
 * random instances, and the input checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <string.h>

#include "place/cutstock.h"

/* every pattern fits a bin and has a positive count; together they cover the demand; returns the
 * plan's number of bins */
static double check_plan(const int *s, const double *d, int m, int cap, const struct cs_pattern *p, int n) {
    double cover[CS_MAX_SIZES] = { 0 }, total = 0;
    assert_true(n >= 1 && n <= m);
    for (int k = 0; k < n; k++) {
        int fill = 0;
        assert_true(p[k].bins > 0);
        for (int i = 0; i < m; i++) {
            assert_true(p[k].count[i] >= 0);
            fill += p[k].count[i] * s[i];
            cover[i] += p[k].count[i] * p[k].bins;
        }
        assert_true(fill > 0 && fill <= cap);
        total += p[k].bins;
    }
    for (int i = 0; i < m; i++)
        assert_true(cover[i] >= d[i] - 1e-6 * (1 + d[i]));
    return total;
}

static void expect_optimum(const int *s, const double *d, int m, int cap, double want) {
    struct cs_pattern p[CS_MAX_SIZES];
    double total = -1;
    int n = cs_solve(s, d, m, cap, p, &total);
    assert_true(n > 0);
    assert_true(fabs(check_plan(s, d, m, cap, p, n) - total) < 1e-6);
    assert_true(fabs(total - want) < 1e-6);
}

static void test_known(void **state) {
    (void)state;
    /* Chvatal, Linear Programming, ch. 13: rolls of 100, the LP optimum is 452.25 */
    expect_optimum((int[]){ 45, 36, 31, 14 }, (double[]){ 97, 610, 395, 211 }, 4, 100, 452.25);
    /* the default trace's main sharing sizes: 810s alone or with a 160, 470 + 470, 650 + 320 */
    expect_optimum((int[]){ 810, 470, 320, 650, 230, 160 }, (double[]){ 1078, 750, 328, 253, 140, 74 }, 6, 1000,
                   1766.0);
    expect_optimum((int[]){ 600, 400 }, (double[]){ 10, 10 }, 2, 1000, 10.0);
    expect_optimum((int[]){ 300 }, (double[]){ 7 }, 1, 1000, 7.0 / 3.0);
    expect_optimum((int[]){ 1000, 500 }, (double[]){ 3, 0 }, 2, 1000, 3.0); /* a size nobody asks for */
}

/* the plan for 600s and 400s pairs them: one pattern, 600 + 400 */
static void test_pairs(void **state) {
    (void)state;
    struct cs_pattern p[CS_MAX_SIZES];
    int n = cs_solve((int[]){ 600, 400 }, (double[]){ 10, 10 }, 2, 1000, p, NULL);
    assert_int_equal(n, 1);
    assert_int_equal(p[0].count[0], 1);
    assert_int_equal(p[0].count[1], 1);
    assert_true(fabs(p[0].bins - 10) < 1e-9);
}

/* random instances: a valid plan, between the volume bound and the one-size-per-bin plan */
static void test_random(void **state) {
    (void)state;
    uint32_t x = 12345;
    for (int round = 0; round < 300; round++) {
        int m = 1 + (int)((x = x * 1103515245u + 12345u) >> 16) % CS_MAX_SIZES, cap = 1000, s[CS_MAX_SIZES];
        double d[CS_MAX_SIZES], volume = 0, naive = 0;
        for (int i = 0; i < m; i++) {
            int dup;
            do {
                s[i] = 10 * (1 + (int)((x = x * 1103515245u + 12345u) >> 16) % 99);
                dup = 0;
                for (int j = 0; j < i; j++)
                    dup |= s[j] == s[i];
            } while (dup);
            d[i] = (double)((x = x * 1103515245u + 12345u) >> 16 & 1023);
            volume += d[i] * s[i] / cap;
            naive += d[i] / (cap / s[i]);
        }
        struct cs_pattern p[CS_MAX_SIZES];
        double total;
        int n = cs_solve(s, d, m, cap, p, &total);
        if (volume == 0) { /* nothing asked: an empty plan */
            assert_int_equal(n, 0);
            continue;
        }
        double t = check_plan(s, d, m, cap, p, n);
        assert_true(fabs(t - total) < 1e-6);
        assert_true(total >= volume - 1e-6);
        assert_true(total <= naive + 1e-6);
    }
}

static void test_invalid(void **state) {
    (void)state;
    struct cs_pattern p[CS_MAX_SIZES];
    int s[CS_MAX_SIZES + 1];
    double d[CS_MAX_SIZES + 1];
    for (int i = 0; i <= CS_MAX_SIZES; i++)
        s[i] = 10 + i, d[i] = 1;
    assert_int_equal(cs_solve(s, d, 0, 1000, p, NULL), -EINVAL);
    assert_int_equal(cs_solve(s, d, CS_MAX_SIZES + 1, 1000, p, NULL), -EINVAL);
    assert_int_equal(cs_solve(s, d, 1, 0, p, NULL), -EINVAL);
    assert_int_equal(cs_solve(s, d, 1, CS_MAX_CAP + 1, p, NULL), -EINVAL);
    assert_int_equal(cs_solve((int[]){ 1001 }, d, 1, 1000, p, NULL), -EINVAL);
    assert_int_equal(cs_solve((int[]){ 0 }, d, 1, 1000, p, NULL), -EINVAL);
    assert_int_equal(cs_solve(s, (double[]){ -1 }, 1, 1000, p, NULL), -EINVAL);
    assert_int_equal(cs_solve(s, (double[]){ NAN }, 1, 1000, p, NULL), -EINVAL);
    assert_int_equal(cs_solve(s, (double[]){ INFINITY }, 1, 1000, p, NULL), -EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known),
        cmocka_unit_test(test_pairs),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_invalid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
