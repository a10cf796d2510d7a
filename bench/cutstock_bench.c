/* cutstock_bench.c: the cost of one packing-plan solve (gpuslice's policy re-solves it in
 * pl_observe, every 2 % of the pods seen). Reads the milli-GPU of sharing pods, one per line
 * (`gpuslice replay --placed-shares FILE`), keeps the CS_MAX_SIZES most frequent sizes as the
 * policy does, and times REPEAT solves.
 * usage: build/bench/cutstock_bench FILE [REPEAT]   (prints one line) */
#include <stdio.h>
#include <stdlib.h>

#include "place/cutstock.h"
#include "util/util.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE [REPEAT]\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    static double cnt[1000];
    int v, n = 0;
    while (fscanf(f, "%d", &v) == 1)
        if (v > 0 && v < 1000)
            cnt[v] += 1, n++;
    fclose(f);
    int sz[CS_MAX_SIZES];
    double d[CS_MAX_SIZES];
    int m = cs_top_sizes(cnt, 1000, sz, d);
    if (m == 0) {
        fprintf(stderr, "%s: no sharing requests\n", argv[1]);
        return 1;
    }
    int repeat = argc > 2 ? atoi(argv[2]) : 1000;
    if (repeat < 1)
        repeat = 1;
    double *t = malloc(sizeof(double) * (size_t)repeat);
    if (!t)
        return 1;
    struct cs_plan plan;
    for (int i = 0; i < repeat; i++) {
        uint64_t t0 = gs_now_ns();
        int r = cs_solve(sz, d, m, 1000, &plan);
        t[i] = (double)(gs_now_ns() - t0) / 1e3;
        if (r <= 0) {
            fprintf(stderr, "cs_solve: %d\n", r);
            free(t);
            return 1;
        }
    }
    qsort(t, (size_t)repeat, sizeof(double), cmp_double);
    printf("requests=%d sizes=%d patterns=%d lp_gpus=%.2f optimal=%d solve_us_median=%.1f solve_us_p99=%.1f\n", n,
           m, plan.n, plan.bins, plan.optimal, t[repeat / 2], t[(size_t)(repeat * 0.99)]);
    free(t);
    return 0;
}
