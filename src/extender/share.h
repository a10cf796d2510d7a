/* share.h: one GPU's two dimensions under fractional pods (gpuslice.io/gpu-memory and
 * gpuslice.io/gpu-compute), as the node's agent advertises and its guard enforces them: memory
 * and compute are separate budgets, a pod fits a GPU when both hold it. Pure.
 *
 * The placement engine keeps one figure per GPU, its free milli-GPU; on a GPU that carries
 * fractional pods that figure is the smaller of the two free fractions: the free milli the GPU had
 * without its fractional pods (W) less the larger of their summed memory fraction (rounded up) and
 * their summed compute. A GPU without fractional pods keeps its one figure as it is. (Inline: the
 * model's arithmetic, compiled into whatever builds model.c.) */
#ifndef GS_EXTENDER_SHARE_H
#define GS_EXTENDER_SHARE_H

#include <stdint.h>

#include "place/place.h" /* PL_MILLI */

/* What the fractional pods on one GPU hold. */
struct ex_share {
    int64_t mem_mib; /* gpuslice.io/gpu-memory, MiB */
    int compute;     /* gpuslice.io/gpu-compute, milli (10 per percent) */
};

/* The milli-GPU that s takes of the GPU's one figure (gpu_mem_mib: the GPU's memory, > 0 when s
 * holds memory). */
static inline int ex_share_milli(const struct ex_share *s, int64_t gpu_mem_mib) {
    int64_t mem = 0;
    if (s->mem_mib > 0)
        mem = gpu_mem_mib > 0 ? (s->mem_mib * PL_MILLI + gpu_mem_mib - 1) / gpu_mem_mib : PL_MILLI + 1;
    return mem > s->compute ? (int)(mem > PL_MILLI + 1 ? PL_MILLI + 1 : mem) : s->compute;
}

/* The GPU's free milli-GPU once the request r joins s, or -1 when r does not fit in memory or in
 * compute; gpu_free: its free milli-GPU now (the engine's figure, with s in it). */
static inline int ex_share_after(const struct ex_share *s, int gpu_free, int64_t gpu_mem_mib,
                                 const struct ex_share *r) {
    int64_t whole = (int64_t)gpu_free + ex_share_milli(s, gpu_mem_mib); /* the free milli without s */
    struct ex_share n = { s->mem_mib + r->mem_mib, s->compute + r->compute };
    if (n.compute > whole)
        return -1;
    if (n.mem_mib > 0 && (gpu_mem_mib <= 0 || n.mem_mib * PL_MILLI > whole * gpu_mem_mib))
        return -1;
    return (int)(whole - ex_share_milli(&n, gpu_mem_mib));
}

#endif
