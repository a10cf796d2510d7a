/* policy_pack.h: gpuslice's own placement policy (`--policy gpuslice`, PL_GPUSLICE): FGD's measure
 * against a workload learned online, with memory and CPU stranding, and a packing plan (cutting
 * stock, cutstock.h) for the pods that share a GPU; described in policy_pack.c and
 * docs/fragmentation.md. Its state is the cluster's `online` and the nodes' plan fields. The engine
 * (place.c) calls these from pl_schedule, pl_score_node, pl_commit, pl_observe and pl_cluster_free; nothing else
 * does. Pure: no I/O. */
#ifndef GS_POLICY_PACK_H
#define GS_POLICY_PACK_H

#include "place/place.h"

/* pl_schedule under PL_GPUSLICE: the chosen node's index, or -1 when no node fits; *gpu: for a pod
 * that shares one GPU, the GPU it takes, else -1. Does not change the nodes. */
int pk_schedule(struct pl_cluster *c, const struct pl_pod *p, int *gpu);
/* pl_score_node under PL_GPUSLICE for a node that fits: a score whose order between nodes is
 * pk_schedule's choice (a node of a pressured model last, then the plan's tier, then FGD's 101
 * levels; the seeded rank aside); *gpu as pk_schedule's. Does not change the nodes. */
int64_t pk_score(struct pl_cluster *c, struct pl_node *n, const struct pl_pod *p, int *gpu);
/* pl_commit, before the pod's GPUs are taken from node n: a sharing pod takes the slot kept for
 * it, or opens an idle GPU along the plan. */
void pk_commit_plan(struct pl_cluster *c, struct pl_node *n, const struct pl_pod *p, const struct pl_choice *ch);
/* pl_commit, after node n changed: its cached fragmentation under the estimate. */
void pk_node_changed(struct pl_cluster *c, struct pl_node *n);
/* pl_observe: pod p arrived; the estimate (and the plan) is rebuilt when it has grown enough. */
void pk_observe(struct pl_cluster *c, const struct pl_pod *p);
/* pl_unobserve: pod p's observation taken back (its kind's count, its models' demand); the
 * estimate is rebuilt when the pods observed since call for it (pk_observe's schedule). */
void pk_unobserve(struct pl_cluster *c, const struct pl_pod *p);
/* pl_estimate_size (o may be NULL: 0 and 0). */
void pk_estimate_size(const struct pl_online *o, size_t *kinds, double *pods);
/* The GPU models in demand (pure): bit i set where dem[i] (the milli-GPU of the constrained pods
 * seen, spread over the models they allow) per milli-GPU of model i's capacity cap[i] is at least
 * the sum of dem[] over the sum of cap[]: the models the constraints concentrate on. GPU pods that
 * may use another model keep off their nodes (policy_pack.c). 0 when nothing is constrained. */
uint32_t pk_pressured(const double *dem, const int64_t *cap, int n_models);
/* Frees the policy's state (NULL: nothing). */
void pk_free(struct pl_online *o);

#endif
