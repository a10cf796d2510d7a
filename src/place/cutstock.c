/* cutstock.c: the cutting-stock linear program by column generation, with a revised simplex on a
 * dense basis (at most CS_MAX_SIZES rows, so the basis is inverted afresh each iteration, which
 * keeps it numerically clean). The master program is
 *     minimise sum_p x_p  subject to  sum_p a_ip x_p = d_i,  x >= 0,
 * equalities being enough because any sub-multiset of a pattern is a pattern. It starts from the
 * basis of one-size patterns (floor(cap / s_i) items of size i), which is feasible, and adds the
 * pattern of most negative reduced cost, 1 - max_a sum_i y_i a_i over the knapsack a, while it is
 * negative. Sizes with demand 0 are left out (they make the program degenerate), and the ratio
 * test runs on demands perturbed by a tiny distinct amount per row, the textbook guard against
 * cycling on degenerate pivots; the plan's bins come from the true demands. */
#include "place/cutstock.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#define EPS 1e-9
#define PERTURB 1e-9
#define MAX_ITER 1000

/* inv = a^-1 by Gauss-Jordan with partial pivoting; -1 when a is singular */
static int invert(int m, double a[CS_MAX_SIZES][CS_MAX_SIZES], double inv[CS_MAX_SIZES][CS_MAX_SIZES]) {
    double w[CS_MAX_SIZES][2 * CS_MAX_SIZES];
    for (int i = 0; i < m; i++)
        for (int j = 0; j < 2 * m; j++)
            w[i][j] = j < m ? a[i][j] : (double)(j - m == i);
    for (int col = 0; col < m; col++) {
        int piv = col;
        for (int i = col + 1; i < m; i++)
            if (fabs(w[i][col]) > fabs(w[piv][col]))
                piv = i;
        double pv = w[piv][col];
        if (fabs(pv) < EPS)
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

static int gcd(int a, int b) {
    while (b) {
        int t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* max sum_i y_i a_i over integer a >= 0 with sum_i s_i a_i <= cap; the best a into a[].
 * This DP is most of a refresh of gpuslice's plan, so it runs in units of g, the gcd of the sizes
 * worth something (10 milli-GPU for the trace's): over the capacities v = u * g only, with sizes
 * s_i / g, which gives the same best, the same ties and the same a as over every v. For v = u * g + r
 * (0 < r < g) each item's candidate best[v - s_i] + y_i is, by induction, the one at u * g, none of
 * which beat best[u * g] + EPS there (the scan below only raises the value it compares to), so
 * best[v] = best[u * g] and nothing is taken at v: the walk back steps over such v one by one. */
static double knapsack(const int *s, const double *y, int m, int cap, int *a) {
    double best[CS_MAX_CAP + 1]; /* 36 KiB of stack */
    /* take[u]: the item whose addition gives best[u]; -1: best[u] is best[u - 1] (and at u = 0) */
    signed char take[CS_MAX_CAP + 1];
    /* the items worth something, in their order (the comparisons, in the same order, decide ties as
     * a scan of all m would), in units of g */
    int it[CS_MAX_SIZES], sg[CS_MAX_SIZES], n_it = 0, g = 0;
    for (int i = 0; i < m; i++)
        if (y[i] > EPS) {
            it[n_it++] = i;
            g = gcd(s[i], g);
        }
    g = g > 0 ? g : 1;
    for (int j = 0; j < n_it; j++)
        sg[j] = s[it[j]] / g;
    int top = cap / g;
    best[0] = 0;
    take[0] = -1;
    for (int u = 1; u <= top; u++) {
        double bv = best[u - 1];
        int tv = -1;
        for (int j = 0; j < n_it; j++)
            if (sg[j] <= u && best[u - sg[j]] + y[it[j]] > bv + EPS) {
                bv = best[u - sg[j]] + y[it[j]];
                tv = j;
            }
        best[u] = bv;
        take[u] = (signed char)tv;
    }
    memset(a, 0, sizeof(int) * (size_t)m);
    for (int u = top; u > 0;) {
        if (take[u] < 0) {
            u--;
        } else {
            a[it[take[u]]]++;
            u -= sg[take[u]];
        }
    }
    return best[top];
}

int cs_solve(const int *sizes, const double *demand, int m, int cap, struct cs_plan *out) {
    if (m < 1 || m > CS_MAX_SIZES || cap < 1 || cap > CS_MAX_CAP)
        return -EINVAL;
    int s[CS_MAX_SIZES], row[CS_MAX_SIZES], k = 0; /* the sizes asked for; row[r]: index in sizes[] */
    double d[CS_MAX_SIZES], dp[CS_MAX_SIZES];
    for (int i = 0; i < m; i++) {
        if (sizes[i] < 1 || sizes[i] > cap || !(demand[i] >= 0) || !isfinite(demand[i]))
            return -EINVAL;
        for (int j = 0; j < i; j++)
            if (sizes[j] == sizes[i])
                return -EINVAL;
        if (demand[i] > 0) {
            s[k] = sizes[i];
            d[k] = demand[i];
            dp[k] = demand[i] * (1 + PERTURB * (k + 1));
            row[k++] = i;
        }
    }
    memset(out, 0, sizeof(*out));
    out->optimal = 1;
    if (k == 0)
        return 0;
    int basis[CS_MAX_SIZES][CS_MAX_SIZES]; /* basis[j]: column j's pattern */
    double b[CS_MAX_SIZES][CS_MAX_SIZES], inv[CS_MAX_SIZES][CS_MAX_SIZES], x[CS_MAX_SIZES], y[CS_MAX_SIZES];
    memset(basis, 0, sizeof(basis));
    for (int i = 0; i < k; i++)
        basis[i][i] = cap / s[i];
    for (int it = 0;; it++) {
        for (int i = 0; i < k; i++)
            for (int j = 0; j < k; j++)
                b[i][j] = basis[j][i];
        if (invert(k, b, inv) < 0)
            return -EINVAL; /* cannot happen: each pivot keeps the basis regular */
        double xp[CS_MAX_SIZES];
        for (int i = 0; i < k; i++) {
            x[i] = xp[i] = y[i] = 0;
            for (int j = 0; j < k; j++) {
                x[i] += inv[i][j] * d[j];
                xp[i] += inv[i][j] * dp[j];
                y[i] += inv[j][i]; /* y = B^-T c, c = 1 */
            }
        }
        int a[CS_MAX_SIZES];
        if (knapsack(s, y, k, cap, a) <= 1 + EPS)
            break;
        if (it >= MAX_ITER) {
            out->optimal = 0;
            break;
        }
        double u[CS_MAX_SIZES];
        int r = -1;
        for (int i = 0; i < k; i++) {
            u[i] = 0;
            for (int j = 0; j < k; j++)
                u[i] += inv[i][j] * a[j];
            if (u[i] > EPS && (r < 0 || xp[i] / u[i] < xp[r] / u[r]))
                r = i;
        }
        if (r < 0) { /* unbounded: impossible with positive costs */
            out->optimal = 0;
            break;
        }
        memcpy(basis[r], a, sizeof(int) * (size_t)k);
    }
    for (int i = 0; i < k; i++)
        out->dual[row[i]] = y[i];
    for (int j = 0; j < k; j++) {
        if (x[j] <= EPS)
            continue; /* rounding, or a degenerate basic column */
        struct cs_pattern *p = &out->pat[out->n++];
        for (int i = 0; i < k; i++)
            p->count[row[i]] = basis[j][i];
        p->bins = x[j];
        out->bins += x[j];
    }
    return out->n;
}

int cs_top_sizes(const double *count, int cap, int *sizes, double *demand) {
    int m = 0;
    bool taken[CS_MAX_CAP] = { false };
    if (cap < 2 || cap > CS_MAX_CAP)
        return 0;
    while (m < CS_MAX_SIZES) {
        int best = 0;
        for (int v = 1; v < cap; v++)
            if (!taken[v] && count[v] > 0 && (best == 0 || count[v] > count[best]))
                best = v;
        if (best == 0)
            break;
        taken[best] = true;
        sizes[m] = best;
        demand[m++] = count[best];
    }
    return m;
}
