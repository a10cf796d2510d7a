/* place.h: the placement engine: a cluster of GPU nodes, pod requests, and the placement policies
 * of the FGD paper (Weng et al., USENIX ATC'23) plus gpuslice's own, behind one interface.
 * Pure: no I/O. Units: CPU in milli-cores, memory in MiB, GPU in milli-GPU (1000 = one GPU).
 * The engine reproduces the paper's simulator (hkust-adsl/kubernetes-scheduler-simulator):
 * integer scores, ties to the node with the smallest seeded rank, Go's math/rand stream. */
#ifndef GS_PLACE_H
#define GS_PLACE_H

#include <stddef.h>
#include <stdint.h>

#include "place/frag.h"   /* struct pl_target, the measure */
#include "place/gorand.h" /* struct pl_gorand, which pl_schedule draws from */

#define PL_MAX_GPUS 16      /* GPUs per node */
#define PL_MAX_MODELS 32    /* distinct GPU models in one cluster (a pod's gpu_spec is a bit mask) */
#define PL_MODEL_LEN 24
#define PL_MAX_PODS_PER_NODE 1001 /* the simulator's node allocatable "pods" */
#define PL_MILLI 1000
#define PL_SLOTS 8          /* requests a GPU's packing plan can still expect (gpuslice's policy) */

struct pl_pod {
    int64_t cpu;       /* milli-CPU request */
    int64_t mem;       /* MiB; only the filter looks at it (as Kubernetes' NodeResourcesFit does) */
    int num_gpu;       /* 0: CPU-only; 1 with gpu_milli < 1000: GPU-sharing; k: k whole GPUs */
    int gpu_milli;     /* per GPU, 0..1000 */
    uint32_t models;   /* allowed GPU models (bit i = cluster model i); 0: any */
};

struct pl_node {
    int64_t cpu_cap, cpu_left;
    int64_t mem_cap, mem_left;
    int n_gpu;
    int model;                 /* index into the cluster's model table; -1: none */
    int gpu_free[PL_MAX_GPUS]; /* free milli-GPU per GPU index */
    int rank;                  /* tie-break: the lowest rank wins among equal scores */
    int n_pods;
    int aff[9];                /* GPU pods on the node by class: [0] sharing, [k] k-GPU (k <= 8) */
    double frag;               /* cached F(node) under the cluster's target workload */
    double gfrag;              /* cached fragmentation under gpuslice's online estimate */
    unsigned gver;             /* the estimate's version gfrag was computed for */
    /* gpuslice's packing plan, per GPU: the milli-GPU requests the GPU is kept for (0: none) and the
     * plan pattern it was opened with (plan_ver: the plan's version + 1; 0: none) */
    short slot[PL_MAX_GPUS][PL_SLOTS];
    signed char plan_pat[PL_MAX_GPUS];
    unsigned plan_ver[PL_MAX_GPUS];
};

enum pl_policy {
    PL_RANDOM,
    PL_DOTPROD,
    PL_GPUCLUSTERING,
    PL_GPUPACKING,
    PL_BESTFIT,
    PL_FGD,
    PL_GPUSLICE,
    PL_POLICY_COUNT
};

struct pl_cluster {
    struct pl_node *nodes;
    size_t n_nodes;
    char models[PL_MAX_MODELS][PL_MODEL_LEN];
    int n_models;
    struct pl_target *targets; /* FGD's target workload; owned */
    size_t n_targets;
    /* gpuslice's online workload estimate (policy_pack.c) */
    struct pl_online *online;
    int64_t total_gpu_milli;
    int64_t alloc_gpu_milli;
    double frag_sum;           /* sum of nodes' frag */
};

/* The decision for one pod. */
struct pl_choice {
    int node;                 /* index into cluster nodes */
    int n_gpus;
    int gpus[PL_MAX_GPUS];    /* GPU indexes taken (each gets gpu_milli) */
};

/* Cluster lifecycle. pl_cluster_init takes ownership of nothing; nodes are copied. */
int pl_cluster_init(struct pl_cluster *c, const struct pl_node *nodes, size_t n);
void pl_cluster_free(struct pl_cluster *c);
/* Model table: returns the index of NAME, adding it; -ENOSPC when full. */
int pl_model_index(struct pl_cluster *c, const char *name);
/* Parses a '|'-separated gpu_spec into a model mask (adding names); 0 for an empty spec. */
int pl_spec_mask(struct pl_cluster *c, const char *spec, uint32_t *mask);

/* Builds the target workload from the ORIGINAL pods (the simulator's GetTypicalPods: group by
 * (cpu, milli, #gpu, gpu_spec), most frequent first, until >= threshold_pct of the pods,
 * renormalised). specs[i] is pod i's gpu_spec text (may be NULL). Recomputes node frag. */
int pl_set_targets(struct pl_cluster *c, const struct pl_pod *pods, const char *const *specs, size_t n,
                   int threshold_pct);

/* F(node): the FGD fragmentation (milli-GPU) of a node state under the cluster's targets. */
double pl_node_frag(const struct pl_cluster *c, const struct pl_node *n);

/* Policy names: random, dotprod, gpuclustering, gpupacking, bestfit, fgd, gpuslice. */
int pl_policy_from_name(const char *name, enum pl_policy *out);
const char *pl_policy_name(enum pl_policy p);

/* Whether node n can host pod p (the scheduler's filters). */
int pl_node_fits(const struct pl_cluster *c, const struct pl_node *n, const struct pl_pod *p);

/* Decides where pod p goes under policy pol. rng is used by Random only (may be NULL otherwise).
 * Returns 0 and fills *out, or -ENOSPC when no node fits. Does not change the cluster. */
int pl_schedule(struct pl_cluster *c, enum pl_policy pol, const struct pl_pod *p, struct pl_gorand *rng,
                struct pl_choice *out);
/* The score policy pol (not PL_RANDOM: -EINVAL) gives node c->nodes[node] for pod p, without
 * deciding or changing the nodes: pl_schedule takes the fitting node of the highest score, ties to
 * the lowest rank, so scores of different nodes for one pod compare as pl_schedule compares them.
 * Returns 0, or -ENOSPC when the node does not fit. *gpu (gpu may be NULL): the GPU a pod that
 * shares one would take under FGD or gpuslice's policy, else -1. (The scheduler extender.) */
int pl_score_node(struct pl_cluster *c, enum pl_policy pol, size_t node, const struct pl_pod *p, int64_t *score,
                  int *gpu);
/* Applies a decision. */
void pl_commit(struct pl_cluster *c, const struct pl_pod *p, const struct pl_choice *ch);
/* Tells gpuslice's policy that pod p arrived (placed or not): its online workload estimate. */
void pl_observe(struct pl_cluster *c, const struct pl_pod *p);
/* Takes an observation back (a pod told to pl_observe that is known never to come: the scheduler
 * extender's pods that were not bound); p as observed. Nothing when no such pod was observed. */
void pl_unobserve(struct pl_cluster *c, const struct pl_pod *p);
/* The estimate's size: its distinct pod kinds and the pods counted (tests, bounds). */
void pl_estimate_size(const struct pl_cluster *c, size_t *kinds, double *pods);

/* Nodes in the same state: everything a filter or a score reads (CPU, memory, GPUs free, model,
 * pods, gpuslice's plan fields) equal; the rank and the cached fragmentation (frag, gfrag, gver:
 * functions of the rest) aside. Any policy's score and fragmentation of two such nodes are equal,
 * so a decision over many nodes computes them once per state (most of 1,213 trace nodes are a few
 * kinds of idle node until the cluster fills). */
int pl_node_same(const struct pl_node *a, const struct pl_node *b);
/* Groups n nodes by state: rep[k] = the first k' <= k whose node c->nodes[idx[k']] (idx NULL: k')
 * is in the same state as idx[k]'s and key[k'] == key[k] (key: the caller's own part of the state,
 * NULL: none). Returns 0, or -ENOMEM (rep[k] = k then). */
int pl_node_groups(const struct pl_cluster *c, const size_t *idx, const uint64_t *key, size_t n, size_t *rep);

#endif
