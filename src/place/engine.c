/* engine.c: what the engine (place.c) and the policy files beside it (policy_pack.c) both call:
 * the filter (pl_node_fits, place.h) and the node state a pod leaves (pl_sub_pod, engine.h). Its
 * own file, so that place.c and policy_pack.c do not call each other. Pure. */
#include <string.h>

#include "place/engine.h"
#include "place/frag.h"

static int gpus_fitting(const struct pl_node *n, int milli) {
    int k = 0;
    for (int g = 0; g < n->n_gpu; g++)
        k += n->gpu_free[g] >= milli;
    return k;
}

int pl_node_fits(const struct pl_cluster *c, const struct pl_node *n, const struct pl_pod *p) {
    (void)c;
    if (n->cpu_left < p->cpu || n->mem_left < p->mem || n->n_pods >= PL_MAX_PODS_PER_NODE)
        return 0;
    if (!pl_is_gpu_pod(p))
        return 1;
    if (n->n_gpu == 0 || !pl_model_ok(p->models, n->model))
        return 0;
    return gpus_fitting(n, p->gpu_milli) >= p->num_gpu;
}

/* the node state a pod leaves, as the simulator's scorers see it (engine.h) */
void pl_sub_pod(const struct pl_node *n, const struct pl_pod *p, int64_t *cpu_left, int *free_) {
    *cpu_left = n->cpu_left - pl_score_cpu(p);
    memcpy(free_, n->gpu_free, sizeof(int) * (size_t)n->n_gpu);
    if (!pl_is_gpu_pod(p))
        return;
    int idx[PL_MAX_GPUS];
    for (int g = 0; g < n->n_gpu; g++)
        idx[g] = g;
    for (int i = 1; i < n->n_gpu; i++)
        for (int j = i; j > 0 && free_[idx[j]] < free_[idx[j - 1]]; j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    int req = p->num_gpu;
    for (int i = 0; i < n->n_gpu && req > 0; i++)
        if (p->gpu_milli <= free_[idx[i]]) {
            free_[idx[i]] -= p->gpu_milli;
            req--;
        }
}
