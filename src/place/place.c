/* place.c: the placement engine. Pure: no I/O.
 * Reproduces the FGD paper's simulator (hkust-adsl/kubernetes-scheduler-simulator, the code of Weng
 * et al., "Beware of Fragmentation", USENIX ATC '23; what is reproduced: docs/fragmentation.md):
 *   filter   CPU and memory (NodeResourcesFit), pod count, GPU model, a feasible GPU set;
 *   score    one policy, integer scores as the simulator computes them;
 *   select   the highest score, ties to the node with the lowest seeded rank (the simulator's fork
 *            picks the lexicographically smallest node name, and names start with a seeded index);
 *   reserve  the policy's GPU choice inside the node.
 * The fragmentation measure is in frag.c, Go's random stream in gorand.c, and gpuslice's own policy
 * in policy_pack.c. */
#include "place/place.h"
#include "place/engine.h"
#include "place/policy_pack.h"

#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------- */
/* Cluster and model table */

int pl_cluster_init(struct pl_cluster *c, const struct pl_node *nodes, size_t n) {
    memset(c, 0, sizeof(*c));
    c->nodes = calloc(n ? n : 1, sizeof(*c->nodes));
    if (!c->nodes)
        return -ENOMEM;
    if (n)
        memcpy(c->nodes, nodes, n * sizeof(*nodes));
    c->n_nodes = n;
    for (size_t i = 0; i < n; i++) {
        struct pl_node *nd = &c->nodes[i];
        if (nd->n_gpu < 0 || nd->n_gpu > PL_MAX_GPUS)
            return pl_cluster_free(c), -EINVAL;
        memset(nd->slot, 0, sizeof(nd->slot)); /* the engine's own state */
        memset(nd->plan_ver, 0, sizeof(nd->plan_ver));
        c->total_gpu_milli += (int64_t)nd->n_gpu * PL_MILLI;
        for (int g = 0; g < nd->n_gpu; g++)
            c->alloc_gpu_milli += PL_MILLI - nd->gpu_free[g];
    }
    return 0;
}

void pl_cluster_free(struct pl_cluster *c) {
    free(c->nodes);
    free(c->targets);
    pk_free(c->online);
    memset(c, 0, sizeof(*c));
}

int pl_model_index(struct pl_cluster *c, const char *name) {
    for (int i = 0; i < c->n_models; i++)
        if (strcmp(c->models[i], name) == 0)
            return i;
    if (c->n_models >= PL_MAX_MODELS || strlen(name) >= PL_MODEL_LEN)
        return -ENOSPC;
    strcpy(c->models[c->n_models], name);
    return c->n_models++;
}

int pl_spec_mask(struct pl_cluster *c, const char *spec, uint32_t *mask) {
    *mask = 0;
    if (!spec)
        return 0;
    const char *s = spec;
    while (*s) {
        const char *e = strchr(s, '|');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len > 0) {
            char buf[PL_MODEL_LEN];
            if (len >= sizeof(buf))
                return -EINVAL;
            memcpy(buf, s, len);
            buf[len] = '\0';
            int idx = pl_model_index(c, buf);
            if (idx < 0)
                return idx;
            *mask |= 1u << idx;
        }
        if (!e)
            break;
        s = e + 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------- */
/* Target workload (frag.go: GetTypicalPods) */

double pl_node_frag(const struct pl_cluster *c, const struct pl_node *n) {
    return pl_frag(c->targets, c->n_targets, NULL, n->cpu_left, n->mem_left, n->gpu_free, n->n_gpu, n->model);
}

static void refresh_frag(struct pl_cluster *c) {
    c->frag_sum = 0;
    for (size_t i = 0; i < c->n_nodes; i++) {
        c->nodes[i].frag = pl_node_frag(c, &c->nodes[i]);
        c->frag_sum += c->nodes[i].frag;
    }
}

/* Sort of the target list: count descending, then the key descending (resource.go: Less). */
static int target_cmp(const void *a, const void *b) {
    const struct pl_target *x = a, *y = b;
    if (x->p != y->p)
        return x->p > y->p ? -1 : 1;
    if (x->cpu != y->cpu)
        return x->cpu > y->cpu ? -1 : 1;
    if (x->milli != y->milli)
        return x->milli > y->milli ? -1 : 1;
    if (x->num != y->num)
        return x->num > y->num ? -1 : 1;
    return -strcmp(x->spec, y->spec);
}

int pl_set_targets(struct pl_cluster *c, const struct pl_pod *pods, const char *const *specs, size_t n,
                   int threshold_pct) {
    struct pl_target *t = calloc(n ? n : 1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    size_t nt = 0;
    for (size_t i = 0; i < n; i++) {
        const char *sp = specs && specs[i] ? specs[i] : "";
        int64_t cpu = pl_score_cpu(&pods[i]);
        size_t k;
        for (k = 0; k < nt; k++)
            if (t[k].cpu == cpu && t[k].milli == pods[i].gpu_milli && t[k].num == pods[i].num_gpu &&
                strcmp(t[k].spec, sp) == 0)
                break;
        if (k == nt) {
            t[nt].cpu = cpu;
            t[nt].milli = pods[i].gpu_milli;
            t[nt].num = pods[i].num_gpu;
            t[nt].models = pods[i].models;
            snprintf(t[nt].spec, sizeof(t[nt].spec), "%s", sp);
            t[nt].p = 0;
            nt++;
        }
        t[k].p += 1.0;
    }
    qsort(t, nt, sizeof(*t), target_cmp);
    double total = (double)n, expected = (double)threshold_pct * total / 100.0, cum = 0;
    size_t i = 0;
    while (cum < expected && i < nt) {
        cum += t[i].p;
        t[i].p = t[i].p / total;
        i++;
    }
    if (i < nt)
        for (size_t j = 0; j < i; j++)
            t[j].p /= cum / total;
    free(c->targets);
    c->targets = t;
    c->n_targets = i;
    refresh_frag(c);
    return 0;
}

/* ------------------------------------------------------------------------------------------- */
/* Filter */

/* pl_node_fits: engine.c */

/* ------------------------------------------------------------------------------------------- */
/* GPU choice inside a node */

/* k lowest-indexed GPUs with at least milli free (for whole GPUs: the fully free ones) */
static void choose_lowest(const struct pl_node *n, const struct pl_pod *p, struct pl_choice *ch) {
    ch->n_gpus = 0;
    for (int g = 0; g < n->n_gpu && ch->n_gpus < p->num_gpu; g++)
        if (n->gpu_free[g] >= p->gpu_milli)
            ch->gpus[ch->n_gpus++] = g;
}

/* "best": a sharing pod takes the GPU with the least free milli that fits, lowest index on ties */
static void choose_best(const struct pl_node *n, const struct pl_pod *p, struct pl_choice *ch) {
    if (p->num_gpu == 1 && p->gpu_milli < PL_MILLI) {
        int best = -1;
        for (int g = 0; g < n->n_gpu; g++)
            if (n->gpu_free[g] >= p->gpu_milli && (best < 0 || n->gpu_free[g] < n->gpu_free[best]))
                best = g;
        ch->n_gpus = 1;
        ch->gpus[0] = best;
        return;
    }
    choose_lowest(n, p, ch);
}

/* ------------------------------------------------------------------------------------------- */
/* Policies. Each scores one feasible node; higher wins. */

#define MAX_SPEC_CPU 128000.0
#define MAX_SPEC_GPU 8000.0

static int64_t node_gpu_left(const struct pl_node *n) {
    int64_t s = 0;
    for (int g = 0; g < n->n_gpu; g++)
        s += n->gpu_free[g];
    return s;
}

static int64_t pod_gpu_total(const struct pl_pod *p) {
    return pl_is_gpu_pod(p) ? (int64_t)p->gpu_milli * p->num_gpu : 0;
}

/* DotProd (Tetris), merged GPU dimension, normalised by the largest node: the smallest dot
 * product of the remaining node vector and the pod vector wins. */
static int64_t score_dotprod(const struct pl_node *n, const struct pl_pod *p) {
    int64_t cpu = pl_score_cpu(p);
    if (n->cpu_left < cpu)
        return 0;
    double nv0 = (double)n->cpu_left / MAX_SPEC_CPU, nv1 = (double)node_gpu_left(n) / MAX_SPEC_GPU;
    double pv0 = (double)cpu / MAX_SPEC_CPU, pv1 = (double)pod_gpu_total(p) / MAX_SPEC_GPU;
    double dot = nv0 * pv0 + nv1 * pv1;
    double s = 1 - dot / 2;
    return (int64_t)(100.0 * s);
}

static int pod_class(const struct pl_pod *p) {
    if (!pl_is_gpu_pod(p))
        return -1;
    if (p->num_gpu == 1 && p->gpu_milli < PL_MILLI)
        return 0;
    return p->num_gpu <= 8 ? p->num_gpu : 8;
}

/* GpuClustering: nodes already running pods of the same class first, then empty nodes, then
 * the fullest within a band (integer maths as in the simulator). */
static int64_t score_clustering(const struct pl_node *n, const struct pl_pod *p) {
    int cls = pod_class(p);
    if (cls < 0)
        return 0;
    int n_cls = 0;
    for (int k = 0; k < 9; k++)
        n_cls += n->aff[k] > 0;
    int64_t fill = 25 * ((int64_t)MAX_SPEC_GPU - node_gpu_left(n)) / (int64_t)MAX_SPEC_GPU;
    if (n->aff[cls] > 0)
        return fill + (n_cls == 1 ? 75 : 50);
    return fill + (n_cls == 0 ? 25 : 0);
}

/* GpuPacking: shared GPUs first, then free GPUs of used nodes, then idle nodes (small ones). */
static int64_t score_packing(const struct pl_node *n, const struct pl_pod *p) {
    if (!pl_is_gpu_pod(p))
        return 0;
    int fully = 0;
    for (int g = 0; g < n->n_gpu; g++)
        fully += n->gpu_free[g] == PL_MILLI;
    if (fully == n->n_gpu) {
        int64_t s = 100 / 3 - fully;
        return s > fully ? s : fully;
    }
    /* scan the GPUs by free milli ascending (stable) */
    int idx[PL_MAX_GPUS];
    for (int g = 0; g < n->n_gpu; g++)
        idx[g] = g;
    for (int i = 1; i < n->n_gpu; i++)
        for (int j = i; j > 0 && n->gpu_free[idx[j]] < n->gpu_free[idx[j - 1]]; j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    int req = p->num_gpu, use_free = 0;
    int64_t ratio = 0;
    for (int i = 0; i < n->n_gpu && req > 0; i++) {
        int f = n->gpu_free[idx[i]];
        if (p->gpu_milli <= f) {
            req--;
            ratio += (int64_t)f * 100 / PL_MILLI;
            if (f == PL_MILLI)
                use_free++;
        }
    }
    if (use_free > 0) {
        int64_t s = 100 / 2 - use_free;
        return s > 100 / 3 ? s : 100 / 3;
    }
    int64_t s = 100 - ratio / 10;
    return s > 50 ? s : 50;
}

/* BestFit: least weighted leftover of CPU and GPU. The simulator then min-max rescales the scores
 * with integer division, which keeps their order and ties (the raw range is at most 100). */
static int64_t score_bestfit(const struct pl_node *n, const struct pl_pod *p) {
    double s = 0;
    s += ((double)n->cpu_left - (double)pl_score_cpu(p)) / MAX_SPEC_CPU * 0.5;
    s += ((double)node_gpu_left(n) - (double)pod_gpu_total(p)) / MAX_SPEC_GPU * 0.5;
    s = (1.0 - s) * 100.0;
    return (int64_t)s;
}

/* FGD: the node whose fragmentation grows least, as int(100 * sigmoid(-delta / 1000)); a sharing
 * pod tries every GPU that fits and keeps the best (lowest index on ties). */
static int64_t score_fgd(const struct pl_cluster *c, const struct pl_node *n, const struct pl_pod *p, int *gpu) {
    double before = n->frag;
    int free_[PL_MAX_GPUS];
    if (p->num_gpu == 1 && p->gpu_milli > 0 && p->gpu_milli < PL_MILLI) {
        int64_t best = 0;
        int best_g = -1, seen[PL_MAX_GPUS], n_seen = 0;
        int64_t seen_s[PL_MAX_GPUS];
        memcpy(free_, n->gpu_free, sizeof(int) * (size_t)n->n_gpu);
        for (int g = 0; g < n->n_gpu; g++) {
            if (n->gpu_free[g] < p->gpu_milli)
                continue;
            /* GPUs with the same free milli give the same state: same score, lower index kept */
            int dup = 0;
            for (int k = 0; k < n_seen; k++)
                if (seen[k] == n->gpu_free[g])
                    dup = 1;
            if (dup)
                continue;
            free_[g] -= p->gpu_milli;
            double after = pl_frag(c->targets, c->n_targets, NULL, n->cpu_left - pl_score_cpu(p), 0, free_,
                                   n->n_gpu, n->model);
            free_[g] += p->gpu_milli;
            int64_t s = (int64_t)(pl_sigmoid((before - after) / 1000) * 100.0);
            seen[n_seen] = n->gpu_free[g];
            seen_s[n_seen++] = s;
            if (best_g < 0 || s > best) {
                best = s;
                best_g = g;
            }
        }
        (void)seen_s;
        if (gpu)
            *gpu = best_g;
        return best;
    }
    int64_t cpu_left;
    pl_sub_pod(n, p, &cpu_left, free_);
    double after = pl_frag(c->targets, c->n_targets, NULL, cpu_left, 0, free_, n->n_gpu, n->model);
    if (gpu)
        *gpu = -1;
    return (int64_t)(pl_sigmoid((before - after) / 1000) * 100.0);
}

/* ------------------------------------------------------------------------------------------- */

static const char *const policy_names[PL_POLICY_COUNT] = {
    "random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd", "gpuslice",
};

int pl_policy_from_name(const char *name, enum pl_policy *out) {
    for (int i = 0; i < PL_POLICY_COUNT; i++)
        if (strcmp(name, policy_names[i]) == 0) {
            *out = (enum pl_policy)i;
            return 0;
        }
    return -EINVAL;
}

const char *pl_policy_name(enum pl_policy p) {
    return (unsigned)p < PL_POLICY_COUNT ? policy_names[p] : "?";
}

static int schedule_random(struct pl_cluster *c, const struct pl_pod *p, struct pl_gorand *rng,
                           struct pl_choice *out) {
    /* PreScore: a uniform draw over the feasible nodes, which win outright */
    int32_t n_feasible = 0;
    for (size_t i = 0; i < c->n_nodes; i++)
        n_feasible += pl_node_fits(c, &c->nodes[i], p);
    if (n_feasible == 0)
        return -ENOSPC;
    int32_t pick = rng ? pl_gorand_intn(rng, n_feasible) : 0;
    for (size_t i = 0; i < c->n_nodes; i++) {
        if (!pl_node_fits(c, &c->nodes[i], p))
            continue;
        if (pick-- == 0) {
            const struct pl_node *n = &c->nodes[i];
            out->node = (int)i;
            if (p->num_gpu == 1 && p->gpu_milli > 0 && p->gpu_milli < PL_MILLI) {
                /* reservoir sampling over the GPUs that fit */
                int k = 0, g_pick = -1;
                for (int g = 0; g < n->n_gpu; g++)
                    if (n->gpu_free[g] >= p->gpu_milli && (rng ? pl_gorand_intn(rng, ++k) : ++k - 1) == 0)
                        g_pick = g;
                out->n_gpus = 1;
                out->gpus[0] = g_pick;
            } else if (pl_is_gpu_pod(p)) {
                choose_lowest(n, p, out);
            } else {
                out->n_gpus = 0;
            }
            return 0;
        }
    }
    return -ENOSPC;
}

/* The score of a fitting node under one of the scoring policies (not Random, not gpuslice's) */
static int score_one(const struct pl_cluster *c, enum pl_policy pol, const struct pl_node *n, const struct pl_pod *p,
                     int64_t *s, int *gpu) {
    switch (pol) {
    case PL_DOTPROD: *s = score_dotprod(n, p); return 0;
    case PL_GPUCLUSTERING: *s = score_clustering(n, p); return 0;
    case PL_GPUPACKING: *s = score_packing(n, p); return 0;
    case PL_BESTFIT: *s = score_bestfit(n, p); return 0;
    case PL_FGD: *s = score_fgd(c, n, p, gpu); return 0;
    default: return -EINVAL;
    }
}

int pl_score_node(struct pl_cluster *c, enum pl_policy pol, size_t node, const struct pl_pod *p, int64_t *score,
                  int *gpu) {
    if (node >= c->n_nodes || pol == PL_RANDOM || (unsigned)pol >= PL_POLICY_COUNT)
        return -EINVAL;
    struct pl_node *n = &c->nodes[node];
    int g = -1;
    if (!pl_node_fits(c, n, p))
        return -ENOSPC;
    if (pol == PL_GPUSLICE)
        *score = pk_score(c, n, p, &g);
    else if (score_one(c, pol, n, p, score, &g) < 0)
        return -EINVAL;
    if (gpu)
        *gpu = g;
    return 0;
}

int pl_schedule(struct pl_cluster *c, enum pl_policy pol, const struct pl_pod *p, struct pl_gorand *rng,
                struct pl_choice *out) {
    if (pol == PL_RANDOM)
        return schedule_random(c, p, rng, out);
    int best = -1, best_gpu = -1;
    int64_t best_s = 0;
    if (pol == PL_GPUSLICE)
        best = pk_schedule(c, p, &best_gpu);
    else
        for (size_t i = 0; i < c->n_nodes; i++) {
            struct pl_node *n = &c->nodes[i];
            if (!pl_node_fits(c, n, p))
                continue;
            int gpu = -1;
            int64_t s;
            if (score_one(c, pol, n, p, &s, &gpu) < 0)
                return -EINVAL;
            if (best < 0 || s > best_s || (s == best_s && n->rank < c->nodes[best].rank)) {
                best = (int)i, best_s = s, best_gpu = gpu;
            }
        }
    if (best < 0)
        return -ENOSPC;
    const struct pl_node *n = &c->nodes[best];
    out->node = best;
    out->n_gpus = 0;
    if (!pl_is_gpu_pod(p))
        return 0;
    if ((pol == PL_FGD || pol == PL_GPUSLICE) && p->num_gpu == 1 && p->gpu_milli < PL_MILLI) {
        out->n_gpus = 1;
        out->gpus[0] = best_gpu;
    } else if (pol == PL_FGD || pol == PL_GPUSLICE) {
        choose_lowest(n, p, out);
    } else {
        choose_best(n, p, out);
    }
    return 0;
}

void pl_commit(struct pl_cluster *c, const struct pl_pod *p, const struct pl_choice *ch) {
    struct pl_node *n = &c->nodes[ch->node];
    n->cpu_left -= p->cpu;
    n->mem_left -= p->mem;
    n->n_pods++;
    pk_commit_plan(c, n, p, ch); /* before the GPUs are taken: the plan looks at idle GPUs */
    if (pl_is_gpu_pod(p)) {
        for (int i = 0; i < ch->n_gpus; i++) {
            n->gpu_free[ch->gpus[i]] -= p->gpu_milli;
            c->alloc_gpu_milli += p->gpu_milli;
        }
        n->aff[pod_class(p)]++;
    }
    c->frag_sum -= n->frag;
    n->frag = pl_node_frag(c, n);
    c->frag_sum += n->frag;
    pk_node_changed(c, n);
}

void pl_observe(struct pl_cluster *c, const struct pl_pod *p) {
    pk_observe(c, p);
}

void pl_unobserve(struct pl_cluster *c, const struct pl_pod *p) {
    pk_unobserve(c, p);
}

void pl_estimate_size(const struct pl_cluster *c, size_t *kinds, double *pods) {
    pk_estimate_size(c->online, kinds, pods);
}
