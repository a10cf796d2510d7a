/* engine.h: what the placement engine (place.c) and the policy files beside it (policy_pack.c)
 * share: the simulator's conventions for a pod's requests and the node state a pod leaves
 * (engine.c). Internal to src/place; the engine's interface is place.h. */
#ifndef GS_PLACE_ENGINE_H
#define GS_PLACE_ENGINE_H

#include <math.h>
#include <stdint.h>

#include "place/place.h"

/* The pod's CPU as the scorers see it: Kubernetes' non-zero request rule. */
static inline int64_t pl_score_cpu(const struct pl_pod *p) {
    return p->cpu ? p->cpu : 100;
}

static inline int pl_is_gpu_pod(const struct pl_pod *p) {
    return p->num_gpu > 0 && p->gpu_milli > 0;
}

/* FGD's score of a fragmentation decrease x (in GPUs): 100 * sigmoid(x), truncated by the caller */
static inline double pl_sigmoid(double x) {
    return 1.0 / (1.0 + exp(-x));
}

/* Node state after taking the pod, the way the simulator computes it for scoring (NodeResource.Sub:
 * the scorers' CPU; GPUs scanned by free milli ascending, stable): *cpu_left and free_[n->n_gpu]. */
void pl_sub_pod(const struct pl_node *n, const struct pl_pod *p, int64_t *cpu_left, int *free_);

#endif
