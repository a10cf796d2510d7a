/* cutstock.h: the cutting-stock linear program (Gilmore and Gomory, 1961). Items of a few sizes are
 * to be packed into bins of one capacity; the program's fractional answer is a plan: patterns (how
 * many items of each size one bin takes) and how many bins are packed by each. gpuslice's policy
 * fills GPUs along such a plan of the milli-GPU requests it has seen (place.c). Pure: no I/O. */
#ifndef GS_CUTSTOCK_H
#define GS_CUTSTOCK_H

#define CS_MAX_SIZES 24 /* distinct item sizes */
#define CS_MAX_CAP 4096 /* the largest bin capacity */

struct cs_pattern {
    int count[CS_MAX_SIZES]; /* items of size i in one bin */
    double bins;             /* bins packed this way (fractional) */
};

/* Solves: minimise the number of bins such that bins pack at least demand[i] items of sizes[i], by
 * column generation (the pricing problem, an unbounded knapsack, is solved exactly by dynamic
 * programming over the capacity). sizes[i] in 1..cap, demand[i] >= 0, 1 <= m <= CS_MAX_SIZES,
 * cap <= CS_MAX_CAP. Writes the patterns in use (at most m, bins > 0) to out[] and returns how many,
 * or -EINVAL. *total (may be NULL) receives the plan's number of bins: the optimum of the program
 * unless its iteration limit was reached first, in which case the plan is feasible but not minimal. */
int cs_solve(const int *sizes, const double *demand, int m, int cap, struct cs_pattern *out, double *total);

#endif
