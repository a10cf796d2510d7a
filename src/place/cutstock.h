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

struct cs_plan {
    int n;                              /* patterns in use (bins > 0), at most the sizes asked for */
    struct cs_pattern pat[CS_MAX_SIZES];
    double bins;                        /* the plan's number of bins: the sum over pat[] */
    double dual[CS_MAX_SIZES];          /* the dual price of each size (0 where nothing is asked) */
    int optimal;                        /* 1: proven optimal; 0: the iteration limit came first (the
                                         * plan is feasible, not minimal) */
};

/* Solves: minimise the number of bins such that bins pack demand[i] items of sizes[i], by column
 * generation (the pricing problem, an unbounded knapsack, is solved exactly by dynamic programming
 * over the capacity). sizes[] distinct, each in 1..cap; demand[i] finite and >= 0 (sizes with
 * demand 0 take no part); 1 <= m <= CS_MAX_SIZES; cap <= CS_MAX_CAP. When optimal, dual[] proves
 * it: no pattern is worth more than one bin at those prices (sum_i dual[i] * count[i] <= 1) and
 * sum_i dual[i] * demand[i] equals bins. The patterns cover each demand up to rounding (1e-9).
 * Returns out->n (0 when nothing is asked) or -EINVAL. */
int cs_solve(const int *sizes, const double *demand, int m, int cap, struct cs_plan *out);

/* The program's input from a count per size: the at most CS_MAX_SIZES sizes in 1..cap-1 with the
 * largest count[size] > 0, most frequent first (the smaller size on equal counts), into sizes[] and
 * their counts into demand[]. count[] has cap entries (a whole bin is no item to share it). Returns
 * how many. */
int cs_top_sizes(const double *count, int cap, int *sizes, double *demand);

#endif
