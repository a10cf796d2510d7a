/* share.c: a GPU's memory and compute under fractional pods (share.h). Pure. */
#include "extender/share.h"

#include "place/place.h"

int ex_share_milli(const struct ex_share *s, int64_t gpu_mem_mib) {
    int64_t mem = 0;
    if (s->mem_mib > 0)
        mem = gpu_mem_mib > 0 ? (s->mem_mib * PL_MILLI + gpu_mem_mib - 1) / gpu_mem_mib : PL_MILLI + 1;
    return mem > s->compute ? (int)(mem > PL_MILLI + 1 ? PL_MILLI + 1 : mem) : s->compute;
}

int ex_share_after(const struct ex_share *s, int gpu_free, int64_t gpu_mem_mib, const struct ex_share *r) {
    int64_t whole = (int64_t)gpu_free + ex_share_milli(s, gpu_mem_mib); /* the free milli without s */
    struct ex_share n = { s->mem_mib + r->mem_mib, s->compute + r->compute };
    if (n.compute > whole)
        return -1;
    if (n.mem_mib > 0 && (gpu_mem_mib <= 0 || n.mem_mib * PL_MILLI > whole * gpu_mem_mib))
        return -1;
    return (int)(whole - ex_share_milli(&n, gpu_mem_mib));
}
