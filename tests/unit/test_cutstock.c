/* test_cutstock.c: the cutting-stock program. Known optima (each checked against HiGHS through
 * scipy.optimize.linprog over every pattern, when the test was written); on random instances a
 * valid plan and a proof of its optimality checked independently of the solver (its dual prices,
 * against every pattern enumerated by brute force); the input checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "place/cutstock.h"

/* every pattern fits a bin and has a positive count; together they cover the demand; the sum of
 * their bins is plan->bins */
static void check_plan(const int *s, const double *d, int m, int cap, const struct cs_plan *plan) {
    double cover[CS_MAX_SIZES] = { 0 }, total = 0;
    int asked = 0;
    for (int i = 0; i < m; i++)
        asked += d[i] > 0;
    assert_true(plan->n >= (asked > 0) && plan->n <= asked);
    for (int k = 0; k < plan->n; k++) {
        const struct cs_pattern *p = &plan->pat[k];
        int fill = 0;
        assert_true(p->bins > 0);
        for (int i = 0; i < m; i++) {
            assert_true(p->count[i] >= 0);
            if (d[i] == 0)
                assert_int_equal(p->count[i], 0); /* a size nobody asks for takes no part */
            fill += p->count[i] * s[i];
            cover[i] += p->count[i] * p->bins;
        }
        assert_true(fill > 0 && fill <= cap);
        total += p->bins;
    }
    for (int i = 0; i < m; i++)
        assert_true(cover[i] >= d[i] - 1e-6 * (1 + d[i]));
    assert_true(fabs(total - plan->bins) < 1e-6 * (1 + total));
}

/* the most any pattern is worth at prices y: every multiset of sizes that fits, by brute force */
static double best_pattern(const int *s, const double *y, int m, int i, int room) {
    if (i == m)
        return 0;
    double best = 0;
    for (int c = 0; c * s[i] <= room; c++) {
        double v = c * y[i] + best_pattern(s, y, m, i + 1, room - c * s[i]);
        if (v > best)
            best = v;
    }
    return best;
}

/* weak duality: prices under which no pattern is worth more than a bin, and at which the demand is
 * worth the plan's bins, prove that no plan uses fewer */
static void check_optimal(const int *s, const double *d, int m, int cap, const struct cs_plan *plan) {
    assert_true(plan->optimal);
    double worth = 0;
    for (int i = 0; i < m; i++) {
        assert_true(d[i] > 0 || plan->dual[i] == 0);
        worth += plan->dual[i] * d[i];
    }
    assert_true(fabs(worth - plan->bins) < 1e-6 * (1 + plan->bins));
    assert_true(best_pattern(s, plan->dual, m, 0, cap) <= 1 + 1e-7);
}

static void expect_optimum(const int *s, const double *d, int m, int cap, double want) {
    struct cs_plan plan;
    int r = cs_solve(s, d, m, cap, &plan);
    assert_int_equal(r, plan.n);
    check_plan(s, d, m, cap, &plan);
    check_optimal(s, d, m, cap, &plan);
    assert_true(fabs(plan.bins - want) < 1e-6);
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
    struct cs_plan plan;
    assert_int_equal(cs_solve((int[]){ 600, 400 }, (double[]){ 10, 10 }, 2, 1000, &plan), 1);
    assert_int_equal(plan.pat[0].count[0], 1);
    assert_int_equal(plan.pat[0].count[1], 1);
    assert_true(fabs(plan.pat[0].bins - 10) < 1e-9);
}

/* nothing asked: no pattern, no bin */
static void test_nothing(void **state) {
    (void)state;
    struct cs_plan plan;
    assert_int_equal(cs_solve((int[]){ 300, 200 }, (double[]){ 0, 0 }, 2, 1000, &plan), 0);
    assert_int_equal(plan.n, 0);
    assert_true(plan.bins == 0 && plan.optimal);
}

static uint32_t next(uint32_t *x) {
    *x = *x * 1103515245u + 12345u;
    return *x >> 16;
}

/* random instances, some demands zero: a valid plan, proven optimal */
static void test_random(void **state) {
    (void)state;
    uint32_t x = 12345;
    for (int round = 0; round < 300; round++) {
        int cap = round % 2 ? 100 : 60, m = 1 + (int)(next(&x) % CS_MAX_SIZES), s[CS_MAX_SIZES];
        double d[CS_MAX_SIZES];
        for (int i = 0; i < m; i++) {
            int dup;
            do {
                s[i] = 10 + (int)(next(&x) % (unsigned)(cap - 9)); /* 10..cap, distinct */
                dup = 0;
                for (int j = 0; j < i; j++)
                    dup |= s[j] == s[i];
            } while (dup);
            d[i] = next(&x) % 4 == 0 ? 0 : (double)(next(&x) & 1023);
        }
        struct cs_plan plan;
        int r = cs_solve(s, d, m, cap, &plan);
        assert_int_equal(r, plan.n);
        check_plan(s, d, m, cap, &plan);
        check_optimal(s, d, m, cap, &plan);
    }
}

/* the program's input: the most frequent sizes first, the smaller on ties, none without a count,
 * at most CS_MAX_SIZES, never the whole bin */
static void test_top_sizes(void **state) {
    (void)state;
    double count[1000] = { 0 }, d[CS_MAX_SIZES];
    int s[CS_MAX_SIZES];
    count[470] = 750, count[810] = 1078, count[320] = 328, count[650] = 328, count[999] = 1;
    assert_int_equal(cs_top_sizes(count, 1000, s, d), 5);
    const int want[5] = { 810, 470, 320, 650, 999 };
    for (int i = 0; i < 5; i++)
        assert_int_equal(s[i], want[i]);
    assert_true(d[0] == 1078 && d[3] == 328 && d[4] == 1);
    for (int v = 1; v < 1000; v++)
        count[v] = v % 7 + 1; /* 999 sizes: the 24 kept all have the largest count, 7 */
    assert_int_equal(cs_top_sizes(count, 1000, s, d), CS_MAX_SIZES);
    for (int i = 0; i < CS_MAX_SIZES; i++) {
        assert_true(d[i] == 7);
        assert_int_equal(s[i], 6 + 7 * i);
    }
    memset(count, 0, sizeof(count));
    assert_int_equal(cs_top_sizes(count, 1000, s, d), 0);
}

static void assert_same_plan(const struct cs_plan *a, const struct cs_plan *b, int m) {
    assert_int_equal(a->n, b->n);
    assert_int_equal(a->optimal, b->optimal);
    assert_true(a->bins == b->bins);
    for (int i = 0; i < m; i++)
        assert_true(a->dual[i] == b->dual[i]);
    for (int k = 0; k < a->n; k++) {
        assert_true(a->pat[k].bins == b->pat[k].bins);
        for (int i = 0; i < m; i++)
            assert_int_equal(a->pat[k].count[i], b->pat[k].count[i]);
    }
}

/* The pricing knapsack runs in units of the sizes' gcd (the trace's are multiples of 10): the plan
 * of sizes g * s over a bin of g * cap + r (0 <= r < g) is the plan of sizes s over cap, solved at
 * every capacity, bit for bit (the patterns, their bins, the duals: the pivots taken were the same).
 * The trace's sizes with demands as gpuslice's refresh sees them, then random ones. */
static void test_scaled(void **state) {
    (void)state;
    const int trace[] = { 810, 470, 230, 320, 550, 460, 370, 220, 590, 110, 160, 650, 480, 270, 50, 350, 440, 140 };
    const double td[] = { 221, 125, 78, 66, 55, 39, 23, 20, 19, 13, 13, 13, 4, 3, 2, 2, 2, 1 };
    int m = 18, s[CS_MAX_SIZES], big[CS_MAX_SIZES];
    struct cs_plan a, b;
    for (int i = 0; i < m; i++)
        s[i] = trace[i] / 10;
    assert_true(cs_solve(s, td, m, 100, &a) > 0);
    for (int r = 0; r < 10; r += 9) {
        assert_true(cs_solve(trace, td, m, 1000 + r, &b) > 0);
        assert_same_plan(&a, &b, m);
    }
    unsigned seed = 7;
    for (int t = 0; t < 60; t++) {
        int g = 2 + t % 9, cap = 20 + (int)(seed % 80);
        m = 2 + t % 10;
        double d[CS_MAX_SIZES];
        for (int i = 0; i < m; i++) {
            int v;
            bool dup;
            do {
                seed = seed * 1103515245u + 12345u;
                v = 1 + (int)((seed >> 8) % (unsigned)(cap - 1));
                dup = false;
                for (int j = 0; j < i; j++)
                    dup |= s[j] == v;
            } while (dup);
            s[i] = v;
            big[i] = v * g;
            d[i] = (double)(1 + (seed >> 4) % 40);
        }
        if (cs_solve(s, d, m, cap, &a) <= 0)
            fail_msg("instance %d: no plan", t);
        assert_true(cs_solve(big, d, m, cap * g + (t % g), &b) > 0);
        assert_same_plan(&a, &b, m);
    }
}

static void test_invalid(void **state) {
    (void)state;
    struct cs_plan plan;
    int s[CS_MAX_SIZES + 1];
    double d[CS_MAX_SIZES + 1];
    for (int i = 0; i <= CS_MAX_SIZES; i++)
        s[i] = 10 + i, d[i] = 1;
    assert_int_equal(cs_solve(s, d, 0, 1000, &plan), -EINVAL);
    assert_int_equal(cs_solve(s, d, CS_MAX_SIZES + 1, 1000, &plan), -EINVAL);
    assert_int_equal(cs_solve(s, d, 1, 0, &plan), -EINVAL);
    assert_int_equal(cs_solve(s, d, 1, CS_MAX_CAP + 1, &plan), -EINVAL);
    assert_int_equal(cs_solve((int[]){ 1001 }, d, 1, 1000, &plan), -EINVAL);
    assert_int_equal(cs_solve((int[]){ 0 }, d, 1, 1000, &plan), -EINVAL);
    assert_int_equal(cs_solve((int[]){ 300, 300 }, d, 2, 1000, &plan), -EINVAL); /* sizes must differ */
    assert_int_equal(cs_solve(s, (double[]){ -1 }, 1, 1000, &plan), -EINVAL);
    assert_int_equal(cs_solve(s, (double[]){ NAN }, 1, 1000, &plan), -EINVAL);
    assert_int_equal(cs_solve(s, (double[]){ INFINITY }, 1, 1000, &plan), -EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known),
        cmocka_unit_test(test_pairs),
        cmocka_unit_test(test_nothing),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_top_sizes),
        cmocka_unit_test(test_scaled),
        cmocka_unit_test(test_invalid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
