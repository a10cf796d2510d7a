/* cutstock.c: the cutting-stock linear program by column generation, with a revised simplex on a
 * dense basis (at most CS_MAX_SIZES rows, so the basis is inverted afresh each iteration, which
 * keeps it numerically clean). The master program is
 *     minimise sum_p x_p  subject to  sum_p a_ip x_p = d_i,  x >= 0,
 * equalities being enough because any sub-multiset of a pattern is a pattern. It starts from the
 * basis of one-size patterns (floor(cap / s_i) items of size i), which is feasible, and adds the
 * pattern of most negative reduced cost, 1 - max_a sum_i y_i a_i over the knapsack a, while it is
 * negative. */
#include "place/cutstock.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#define EPS 1e-9
#define MAX_ITER 500

/* inv = a^-1 by Gauss-Jordan with partial pivoting; -1 when a is singular */
static int invert(int m, double a[CS_MAX_SIZES][CS_MAX_SIZES], double inv[CS_MAX_SIZES][CS_MAX_SIZES]) {
    double w[CS_MAX_SIZES][2 * CS_MAX_SIZES];
    for (int i = 0; i < m; i++)
        for (int j = 0; j < 2 * m; j++)
            w[i][j] = j < m ? a[i][j] : (double)(j - m == i);
    for (int col = 0; col < m; col++) {
        int piv = col;
        for (int i = col + 1; i < m; i++)
            if ((w[i][col] < 0 ? -w[i][col] : w[i][col]) > (w[piv][col] < 0 ? -w[piv][col] : w[piv][col]))
                piv = i;
        double pv = w[piv][col];
        if (pv < EPS && pv > -EPS)
            return -1;
        if (piv != col)
            for (int j = 0; j < 2 * m; j++) {
                double t = w[col][j];
                w[col][j] = w[piv][j];
                w[piv][j] = t;
            }
        for (int j = 0; j < 2 * m; j++)
            w[col][j] /= pv;
        for (int i = 0; i < m; i++) {
            double f = w[i][col];
            if (i == col || f == 0)
                continue;
            for (int j = 0; j < 2 * m; j++)
                w[i][j] -= f * w[col][j];
        }
    }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++)
            inv[i][j] = w[i][m + j];
    return 0;
}

/* max sum_i y_i a_i over integer a >= 0 with sum_i s_i a_i <= cap; the best a into a[] */
static double knapsack(const int *s, const double *y, int m, int cap, int *a) {
    static _Thread_local double best[CS_MAX_CAP + 1];
    static _Thread_local signed char take[CS_MAX_CAP + 1]; /* item last added at this capacity; -1: none */
    best[0] = 0;
    take[0] = -1;
    for (int v = 1; v <= cap; v++) {
        best[v] = best[v - 1];
        take[v] = -2; /* same as v - 1 */
        for (int i = 0; i < m; i++)
            if (y[i] > EPS && s[i] <= v && best[v - s[i]] + y[i] > best[v] + EPS) {
                best[v] = best[v - s[i]] + y[i];
                take[v] = (signed char)i;
            }
    }
    memset(a, 0, sizeof(int) * (size_t)m);
    for (int v = cap; v > 0;) {
        if (take[v] == -2) {
            v--;
        } else {
            a[take[v]]++;
            v -= s[take[v]];
        }
    }
    return best[cap];
}

int cs_solve(const int *sizes, const double *demand, int m, int cap, struct cs_pattern *out, double *total) {
    if (m < 1 || m > CS_MAX_SIZES || cap < 1 || cap > CS_MAX_CAP)
        return -EINVAL;
    for (int i = 0; i < m; i++)
        if (sizes[i] < 1 || sizes[i] > cap || !(demand[i] >= 0) || !isfinite(demand[i]))
            return -EINVAL;
    int basis[CS_MAX_SIZES][CS_MAX_SIZES]; /* basis[j]: column j's pattern */
    double b[CS_MAX_SIZES][CS_MAX_SIZES], inv[CS_MAX_SIZES][CS_MAX_SIZES], x[CS_MAX_SIZES], y[CS_MAX_SIZES];
    memset(basis, 0, sizeof(basis));
    for (int i = 0; i < m; i++)
        basis[i][i] = cap / sizes[i];
    for (int it = 0;; it++) {
        for (int i = 0; i < m; i++)
            for (int j = 0; j < m; j++)
                b[i][j] = basis[j][i];
        if (invert(m, b, inv) < 0)
            return -EINVAL; /* cannot happen: each pivot keeps the basis regular */
        for (int i = 0; i < m; i++) {
            x[i] = 0;
            y[i] = 0;
            for (int j = 0; j < m; j++) {
                x[i] += inv[i][j] * demand[j];
                y[i] += inv[j][i]; /* y = B^-T c, c = 1 */
            }
            if (x[i] < 0)
                x[i] = 0; /* rounding */
        }
        int a[CS_MAX_SIZES];
        if (it >= MAX_ITER || knapsack(sizes, y, m, cap, a) <= 1 + EPS)
            break;
        double u[CS_MAX_SIZES];
        int r = -1;
        for (int i = 0; i < m; i++) {
            u[i] = 0;
            for (int j = 0; j < m; j++)
                u[i] += inv[i][j] * a[j];
            if (u[i] > EPS && (r < 0 || x[i] / u[i] < x[r] / u[r]))
                r = i;
        }
        if (r < 0)
            break; /* unbounded: impossible with positive costs */
        memcpy(basis[r], a, sizeof(int) * (size_t)m);
    }
    int n = 0;
    double sum = 0;
    for (int j = 0; j < m; j++) {
        if (x[j] <= EPS)
            continue;
        memset(&out[n], 0, sizeof(out[n]));
        memcpy(out[n].count, basis[j], sizeof(int) * (size_t)m);
        out[n].bins = x[j];
        sum += x[j];
        n++;
    }
    if (total)
        *total = sum;
    return n;
}
