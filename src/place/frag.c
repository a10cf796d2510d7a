/* frag.c: FGD's fragmentation measure (see frag.h). Pure. */
#include "place/frag.h"

/* frag.go: NodeGpuShareFragAmount, summed except the "q3 satisfied" part. The buckets are
 * accumulated separately and summed in the simulator's order so that the float result, and so
 * the truncated score, is the same bit for bit. */

enum { B_Q1, B_Q2, B_Q3, B_Q4, B_XL, B_XR, B_NA, B_COUNT };

double pl_frag(const struct pl_target *tg, size_t n_tg, const int64_t *tg_mem, int64_t cpu_left, int64_t mem_left,
               const int *free_, int n_gpu, int node_model) {
    double d[B_COUNT] = { 0 };
    int64_t left = 0;
    for (int g = 0; g < n_gpu; g++)
        left += free_[g];
    if (left == 0)
        return 0.0;
    for (size_t i = 0; i < n_tg; i++) {
        const struct pl_target *t = &tg[i];
        int cpu_ok = cpu_left >= t->cpu && (!tg_mem || mem_left >= tg_mem[i]);
        if (t->milli == 0) {
            d[cpu_ok ? B_XL : B_XR] += t->p * (double)left;
            continue;
        }
        if (!pl_model_ok(t->models, node_model)) {
            d[B_NA] += t->p * (double)left;
            continue;
        }
        int fit = 0;
        int64_t small = 0;
        for (int g = 0; g < n_gpu; g++) {
            if (free_[g] >= t->milli)
                fit++;
            else
                small += free_[g];
        }
        if (fit >= t->num) {
            if (cpu_ok) {
                d[B_Q2] += t->p * (double)small;
                d[B_Q3] += t->p * (double)(left - small);
            } else {
                d[B_Q4] += t->p * (double)left;
            }
        } else {
            d[cpu_ok ? B_Q2 : B_Q1] += t->p * (double)left;
        }
    }
    double out = 0;
    for (int b = 0; b < B_COUNT; b++)
        if (b != B_Q3)
            out += d[b];
    return out;
}
