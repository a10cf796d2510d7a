/* pack.h: the consolidation planner's packing, pure: a temporal vector bin packing. Each pod has a
 * fixed memory quota and a duty series (one value per time step); a GPU holds pods whose quotas add
 * up to at most its memory and whose summed duty stays within the budget at every step but at most
 * `tolerated` steps.
 *
 * First-fit decreasing under several sizes (memory and duty combined in different ways; the best
 * result is kept), then a local search that empties the lightest GPU: its pods moved to other GPUs,
 * or swapped with a smaller pod there that moves on to a third GPU; an attempt that fails is undone.
 * The search stops when no GPU can be emptied or its work budget is spent. */
#ifndef GS_CONSOLIDATE_PACK_H
#define GS_CONSOLIDATE_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cs_problem {
    size_t n, steps;
    const uint64_t *mem;      /* n quotas, bytes */
    const uint16_t *duty;     /* n * steps, duty units (series.h) */
    uint64_t capacity;        /* one GPU's memory, bytes */
    uint32_t budget;          /* duty units per GPU and step */
    uint32_t tolerated;       /* steps a GPU may exceed the budget */
    const uint32_t *units;    /* n: each pod's memory in the requests' units (GiB), or NULL: none */
    uint64_t units_capacity;  /* the units one GPU has for requests (with units) */
    uint32_t max_pods;        /* pods one GPU may hold (0: any number) */
};

struct cs_pack_opts {
    bool search;              /* run the local search after first-fit decreasing */
    double time_limit_s;      /* wall-clock bound of the search (0: none) */
    uint64_t work_limit;      /* bound in duty-series comparisons (0: none): deterministic */
    double (*now)(void);      /* clock for time_limit_s (seconds); NULL: no time limit */
};

struct cs_pack_stats {
    size_t ffd_gpus;          /* best first-fit decreasing */
    const char *ffd_order;    /* its size */
    size_t gpus;              /* after the search */
    uint64_t work;            /* comparisons done */
    unsigned emptied;         /* GPUs the search emptied */
    bool search_complete;     /* the search ended because no GPU could be emptied */
};

/* The lower bounds the input proves. */
struct cs_bounds {
    size_t memory;            /* ceil(sum of quotas / capacity), or of the units over the units' capacity */
    size_t duty;              /* fewest GPUs whose budget covers the summed duty within the tolerance */
    size_t large;             /* pods over half a GPU's memory (or units): one GPU each */
    size_t pods;              /* ceil(pods / max_pods) */
    size_t bound;             /* the largest */
};

/* gpu_of: n entries, each pod's GPU (0..gpus-1). Returns the number of GPUs, or -EINVAL when a pod
 * fits no GPU (its index in *bad), -ENOMEM. */
long cs_pack(const struct cs_problem *pb, const struct cs_pack_opts *o, uint32_t *gpu_of, struct cs_pack_stats *st,
             size_t *bad);

/* First-fit decreasing only, under one named order ("memory+peak", ...); for comparisons. */
long cs_pack_ffd(const struct cs_problem *pb, unsigned order, uint32_t *gpu_of);
#define CS_FFD_ORDERS 5
const char *cs_ffd_order_name(unsigned order);

int cs_bounds(const struct cs_problem *pb, struct cs_bounds *out);

/* Whether pod p can go on a GPU on its own (memory and duty); false names why in the return. */
bool cs_pod_fits_alone(const struct cs_problem *pb, size_t p);

#endif
