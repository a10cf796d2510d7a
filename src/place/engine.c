/* engine.c: what the engine (place.c) and the policy files beside it (policy_pack.c) both call:
 * the filter (pl_node_fits, place.h) and the node state a pod leaves (pl_sub_pod, engine.h). Its
 * own file, so that place.c and policy_pack.c do not call each other. Pure. */
#include <errno.h>
#include <stdlib.h>
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

/* pl_node_same and pl_node_groups (place.h): the fields, not the struct's bytes (padding) */
int pl_node_same(const struct pl_node *a, const struct pl_node *b) {
    return a->cpu_cap == b->cpu_cap && a->cpu_left == b->cpu_left && a->mem_cap == b->mem_cap &&
           a->mem_left == b->mem_left && a->n_gpu == b->n_gpu && a->model == b->model && a->n_pods == b->n_pods &&
           !memcmp(a->gpu_free, b->gpu_free, sizeof(a->gpu_free)) && !memcmp(a->aff, b->aff, sizeof(a->aff)) &&
           !memcmp(a->slot, b->slot, sizeof(a->slot)) && !memcmp(a->plan_pat, b->plan_pat, sizeof(a->plan_pat)) &&
           !memcmp(a->plan_ver, b->plan_ver, sizeof(a->plan_ver));
}

static uint64_t mix(uint64_t h, uint64_t v) {
    return (h ^ v) * 1099511628211ull; /* FNV-1a, a word at a time */
}

static uint64_t node_hash(const struct pl_node *n, uint64_t key) {
    uint64_t h = mix(mix(mix(1469598103934665603ull, (uint64_t)n->cpu_left), (uint64_t)n->mem_left), key);
    h = mix(mix(h, (uint64_t)n->n_gpu), (uint64_t)(n->model + 1));
    for (int g = 0; g < n->n_gpu; g++) {
        h = mix(h, (uint64_t)n->gpu_free[g]);
        for (int k = 0; k < PL_SLOTS; k++)
            h = mix(h, (uint64_t)(unsigned short)n->slot[g][k]);
    }
    h ^= h >> 33; /* the multiplications carry upwards only: the high bits into the low ones */
    h *= 0xff51afd7ed558ccdull;
    return h ^ h >> 33;
}

int pl_node_groups(const struct pl_cluster *c, const size_t *idx, const uint64_t *key, size_t n, size_t *rep) {
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    size_t *tab = malloc(cap * sizeof(*tab)); /* k + 1 of the first node of a state (0: empty) */
    for (size_t k = 0; k < n; k++)
        rep[k] = k;
    if (!tab)
        return -ENOMEM;
    memset(tab, 0, cap * sizeof(*tab));
    for (size_t k = 0; k < n; k++) {
        const struct pl_node *nd = &c->nodes[idx ? idx[k] : k];
        uint64_t kk = key ? key[k] : 0;
        for (size_t s = node_hash(nd, kk) & (cap - 1);; s = (s + 1) & (cap - 1)) {
            if (!tab[s]) {
                tab[s] = k + 1;
                break;
            }
            size_t r = tab[s] - 1;
            if ((key ? key[r] : 0) == kk && pl_node_same(&c->nodes[idx ? idx[r] : r], nd)) {
                rep[k] = r;
                break;
            }
        }
    }
    free(tab);
    return 0;
}
