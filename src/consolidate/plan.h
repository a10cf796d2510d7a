/* plan.h: a consolidation plan of `gpuslice plan`, pure: the targets (a catalogue GPU model, the
 * memory margin, the duty budget and tolerance), the plan made from aligned series (series.h) by
 * the packing (pack.h), and what is written from it: the JSON document, the table for a person, the
 * picture of each GPU's summed duty (SVG), the policy fragment and each pod's requests. Writers
 * take a FILE the caller opened. */
#ifndef GS_CONSOLIDATE_PLAN_H
#define GS_CONSOLIDATE_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "catalog/catalog.h"
#include "consolidate/pack.h"
#include "consolidate/series.h"

enum cs_mode {
    CS_MODE_SHARED, /* every GPU time-sliced with VRAM quotas */
    CS_MODE_MIG,    /* every GPU in MIG mode, a GPU instance per pod */
    CS_MODE_AUTO,   /* the shared plan, each of its GPUs in MIG mode where its pods form a layout; the
                     * all-MIG plan instead when it needs fewer GPUs */
};

/* What each pod's requests are written as. */
enum cs_requests {
    CS_REQ_FRACTIONAL, /* the device plugin's gpuslice.io/gpu-memory (GiB) and gpuslice.io/gpu-compute (%) */
    CS_REQ_DRA,        /* a ResourceClaimTemplate of the DRA driver's shared.gpu class per distinct shape */
};

struct cs_targets {
    enum cs_mode mode;
    const struct gs_model *model;
    unsigned gpus_per_node;   /* >= 1 */
    double margin;            /* fraction over each pod's peak (0.1 = 10 %) */
    double budget;            /* percent of a GPU's duty per step (1..100) */
    double tolerance;         /* fraction of the window's minutes a GPU may be over the budget (0..1) */
    double tolerance_s;       /* or > 0: seconds of the window a GPU may be over the budget */
    bool round_gib;           /* quotas rounded up to whole GiB (the fractional requests' unit) */
    enum cs_requests requests;
    bool no_compute;          /* fractional requests without gpuslice.io/gpu-compute (no cap) */
};

#define CS_MAX_LAYOUT 8

struct cs_gpu_report {
    bool mig;                 /* in MIG mode: a GPU instance per pod */
    unsigned slice_over;      /* MIG: steps some pod is over its instance's share of the budget */
    unsigned over;            /* steps over the budget */
    uint32_t peak;            /* summed duty's peak, duty units */
    uint64_t mem;             /* quotas' sum */
    uint64_t units;           /* the memory requests' units summed */
    size_t npods;
};

struct cs_plan {
    const struct cs_series *in;
    struct cs_targets t;
    uint64_t capacity;        /* the GPU's memory, bytes */
    uint32_t budget_units;
    uint32_t tolerated;       /* steps: the tolerated seconds over the step's length, rounded down */
    double tolerated_s;       /* seconds of the window tolerated over the budget (before rounding) */
    uint32_t *units;          /* per pod: its memory request in GiB (at least 1) */
    uint64_t units_capacity;  /* a GPU's memory units for requests: the device plugin's or the DRA driver's */
    unsigned *compute;        /* per pod: its compute request in percent (shared GPUs; 0 on MIG) */
    uint32_t *capped;         /* per pod: steps its duty is over its compute request */
    uint64_t *quota;          /* per pod, bytes */
    uint32_t *gpu_of;         /* per pod */
    int *profile;             /* per pod: its MIG profile (index in the model's profiles), -1: none */
    unsigned *start;          /* per pod on a MIG GPU: its instance's first memory slice */
    long shared_gpus, mig_gpus; /* the two plans' counts (-1: not made, or not possible) */
    unsigned mig_slices;      /* compute slices of the whole GPU (7) */
    bool mig_plan;            /* the all-MIG plan was taken */
    size_t gpus;
    size_t ffd_gpus;          /* first-fit decreasing alone (best order) */
    struct cs_bounds bounds;
    struct cs_pack_stats stats;
    struct cs_gpu_report *g;  /* per GPU */
    uint32_t *sum;            /* gpus * steps: each GPU's summed duty */
};

/* Resolves a GPU model as the catalogue names it ("H200-SXM-141GB"), case-insensitively, or a
 * short form whose dash-separated words are all in one key ("H200", "H100-80GB", "A100-80GB");
 * several keys match: the one SXM key among them, else an error naming them. NULL and err set. */
const struct gs_model *cs_resolve_gpu(const char *name, char *err, size_t errlen);

/* Makes the plan. A pod larger than the GPU (with the margin), or busier than the budget allows,
 * is an error naming it (-EINVAL). */
int cs_plan_make(const struct cs_series *in, const struct cs_targets *t, const struct cs_pack_opts *o,
                 struct cs_plan *out, char *err, size_t errlen);
void cs_plan_free(struct cs_plan *p);

/* The writers. Each returns 0 or -EIO. */
int cs_plan_write_json(const struct cs_plan *p, FILE *f);
int cs_plan_write_table(const struct cs_plan *p, FILE *f);
int cs_plan_write_svg(const struct cs_plan *p, FILE *f);
/* The policy fragment: one for every node when no GPU is in MIG mode, else node `node`'s (its MIG
 * GPUs by index, the config plan-node-NODE of cs_plan_write_mig_layouts). */
int cs_plan_write_policy(const struct cs_plan *p, size_t node, FILE *f);
bool cs_plan_has_mig(const struct cs_plan *p);
int cs_plan_write_mig_layouts(const struct cs_plan *p, FILE *f);
/* One pod's requests (requests.c): its container's resources block (fractional: gpu-memory and
 * gpu-compute; MIG: its nvidia.com/mig-PROFILE), or with DRA the pod's resourceClaims naming its
 * shape's template and the container's resources.claims. */
int cs_plan_write_requests(const struct cs_plan *p, size_t pod, FILE *f);
/* DRA: the ResourceClaimTemplate of pod's shape (its name: cs_plan_template_name); the pods of one
 * shape share it. */
int cs_plan_write_claim_template(const struct cs_plan *p, size_t pod, FILE *f);
/* The name of pod's ResourceClaimTemplate ("gpuslice-plan-12gi-35", "gpuslice-plan-mig-3g.40gb"). */
void cs_plan_template_name(const struct cs_plan *p, size_t pod, char *out, size_t len);
/* The compute requests of the shared GPUs' pods: each GPU's budget split among its pods so that
 * the fewest steps find a pod over its share (then the least duty over it); 0 or -ENOMEM. */
int cs_plan_split_compute(struct cs_plan *p);
/* A pod key as a file name under requests/: '/', ':' and '@' as '_', a leading '.' as '_'. */
void cs_plan_key_file(const char *key, char *out, size_t len);

const char *cs_mode_name(enum cs_mode m);

/* The GiB units of a fractional request for quota bytes (rounded up). */
unsigned long long cs_gib_units(uint64_t bytes);

#endif
