/* policy_pack.c: gpuslice's own placement policy (see policy_pack.h). Pure: no I/O.
 *
 * FGD's idea, with these changes that the paper's measurements point at:
 *  1. The target workload is learned online from the pods that have arrived so far (a real
 *     scheduler has no trace of the future), refreshed as it grows.
 *  2. Memory is part of fragmentation: a node whose memory is too short for a target spec strands
 *     its idle GPUs for that spec, as CPU does. The paper's filter enforces memory, its scorers
 *     ignore it, and memory was the only shortage in most of BestFit's and many of FGD's failures.
 *  3. Inside a node, the GPU is chosen on the exact increase (FGD truncates it first), the fuller
 *     GPU on equal increases. Between nodes FGD's 101 levels and seeded-rank ties are kept.
 *  4. CPU that cannot feed the node's idle GPUs at the observed CPU-per-GPU rate is fragment too
 *     (gs_frag). Each node's fragmentation is cached and kept current outside the decision:
 *     pl_observe recomputes every node when the estimate changes, pl_commit the node it changed.
 *  5. Pods that share a GPU follow a packing plan (below). */
#include "place/policy_pack.h"
#include "place/cutstock.h"
#include "place/engine.h"
#include "place/frag.h"

#include <stdlib.h>
#include <string.h>

#define ONLINE_THRESHOLD 95

struct pl_online {
    /* gpuslice's estimate of the workload, from the pods seen so far (see online_rebuild) */
    struct okey { int64_t cpu, mem; int milli, num; uint32_t models; double cnt; } *keys;
    size_t n, cap;
    double total;
    struct pl_target *tg; /* derived targets with memory */
    int64_t *tg_mem;
    size_t n_tg;
    unsigned version;
    double since_rebuild;
    double cpu_per_milli; /* the GPU pods' mean CPU (milli-core) per milli-GPU: what idle GPUs need */
    /* the packing plan: the cutting-stock program over the sharing requests seen so far */
    int n_sz, sz[CS_MAX_SIZES];
    struct cs_plan plan;                         /* plan.n == 0: no plan */
    double filled[CS_MAX_SIZES][CS_MAX_SIZES]; /* [size][pattern]: requests placed along the plan */
    int64_t sz_cpu[CS_MAX_SIZES], sz_mem[CS_MAX_SIZES]; /* mean CPU and memory of each size's requests */
    unsigned char sz_of[PL_MILLI];                      /* milli-GPU -> index + 1 in sz (0: none) */
    /* GPU models that the constrained pods seen so far need (see model_pressure) */
    double model_dem[PL_MAX_MODELS]; /* milli-GPU of constrained pods, spread over their models */
    uint32_t pressured;              /* models whose constrained demand reaches their capacity share */
};

/* ------------------------------------------------------------------------------------------- */
/* gpuslice's packing plan. FGD and the fragmentation measure look one request ahead; what a GPU ends
 * up holding is decided by the requests after it. The cutting-stock program over the sharing
 * requests seen so far (cutstock.h) gives the mix of GPU contents ("patterns": 470 + 470, 650 + 320,
 * 810 alone...) that holds them in the fewest GPUs. A request that opens an idle GPU chooses one of
 * the patterns containing its size, and the GPU keeps places ("slots") for the pattern's other
 * requests; later requests of those sizes go there first. Measured on the default trace, the plan
 * alone takes the allocation at 100 % arrived from 95.86 to 96.18 (docs/fragmentation.md). */

/* milli-GPU of a pod that shares one GPU; 0 for any other pod */
static int share_milli(const struct pl_pod *p) {
    return p->num_gpu == 1 && p->gpu_milli > 0 && p->gpu_milli < PL_MILLI ? p->gpu_milli : 0;
}

/* the plan's index of size s; -1 when the plan has no such size */
static int plan_size(const struct pl_online *o, int s) {
    return s > 0 && s < PL_MILLI ? o->sz_of[s] - 1 : -1;
}

/* Rebuilds the plan over the requests seen: their most frequent CS_MAX_SIZES sizes, each with its
 * requests' mean CPU and memory. */
static void plan_rebuild(struct pl_online *o) {
    double cnt[PL_MILLI] = { 0 }, cpu[PL_MILLI] = { 0 }, mem[PL_MILLI] = { 0 };
    for (size_t j = 0; j < o->n; j++) {
        const struct okey *k = &o->keys[j];
        if (k->num == 1 && k->milli > 0 && k->milli < PL_MILLI) {
            cnt[k->milli] += k->cnt;
            cpu[k->milli] += (double)k->cpu * k->cnt;
            mem[k->milli] += (double)k->mem; /* a sum over the key's pods */
        }
    }
    int sz[CS_MAX_SIZES];
    double d[CS_MAX_SIZES];
    int m = cs_top_sizes(cnt, PL_MILLI, sz, d);
    memset(o->filled, 0, sizeof(o->filled));
    memset(o->sz_of, 0, sizeof(o->sz_of));
    o->n_sz = 0;
    if (m == 0 || cs_solve(sz, d, m, PL_MILLI, &o->plan) <= 0) {
        o->plan.n = 0;
        return;
    }
    for (int i = 0; i < m; i++) {
        o->sz[i] = sz[i];
        o->sz_of[sz[i]] = (unsigned char)(i + 1);
        o->sz_cpu[i] = (int64_t)(cpu[sz[i]] / d[i]);
        o->sz_mem[i] = (int64_t)(mem[sz[i]] / d[i]);
    }
    o->n_sz = m;
}

/* The slots of node n (GPU free milli free_[]) that still fit: their milli-GPU, returned, and the
 * CPU and memory their requests need. A node that no longer has that CPU or memory strands them:
 * gs_frag counts them as fragment, so that other pods leave the room to the requests kept for. */
static int plan_kept(const struct pl_online *o, const struct pl_node *n, const int *free_, int64_t *cpu,
                     int64_t *mem) {
    int kept = 0;
    *cpu = *mem = 0;
    for (int g = 0; g < n->n_gpu; g++) {
        int used = 0;
        for (int k = 0; k < PL_SLOTS; k++) {
            int i = plan_size(o, n->slot[g][k]);
            if (i < 0 || n->slot[g][k] > free_[g] - used)
                continue;
            used += n->slot[g][k];
            *cpu += o->sz_cpu[i];
            *mem += o->sz_mem[i];
        }
        kept += used;
    }
    return kept;
}

/* How a sharing request of s milli-GPU fits GPU g, best first: a slot kept for this size, a close
 * fit (at most PLAN_CLOSE milli left; measured 0-150, 90 best), an idle GPU on a node that can host
 * the rest of the pattern it opens beside what its slots keep, an idle GPU on one that cannot
 * (TIER_POOR: set by the caller), anything else. */
enum { TIER_SLOT, TIER_CLOSE, TIER_IDLE, TIER_POOR, TIER_OTHER, TIER_NONE };
#define PLAN_CLOSE 90

static int plan_tier(const struct pl_online *o, const struct pl_node *n, int g, int s) {
    if (n->gpu_free[g] < s)
        return TIER_NONE;
    for (int k = 0; k < PL_SLOTS; k++)
        if (n->slot[g][k] == s && plan_size(o, s) >= 0)
            return TIER_SLOT;
    if (n->gpu_free[g] - s <= PLAN_CLOSE)
        return TIER_CLOSE;
    return n->gpu_free[g] == PL_MILLI ? TIER_IDLE : TIER_OTHER;
}

/* the node's best GPU for s: lowest tier, then least free, then lowest index */
static int plan_gpu(const struct pl_online *o, const struct pl_node *n, int s, int *tier) {
    int best = -1, bt = TIER_NONE;
    for (int g = 0; g < n->n_gpu; g++) {
        int t = plan_tier(o, n, g, s);
        if (t < bt || (t == bt && t != TIER_NONE && n->gpu_free[g] < n->gpu_free[best]))
            best = g, bt = t;
    }
    *tier = bt;
    return best;
}

/* The pattern an idle GPU is opened with by a request of the plan's size si: the one whose share
 * of this size's requests lags most behind the plan's, the fuller pattern on ties; -1: none. The
 * shares are counted since the plan was last solved (filled[] starts again at each solve, with the
 * new plan's patterns). */
static int plan_pick(const struct pl_online *o, int si) {
    if (si < 0)
        return -1;
    const struct cs_pattern *pat = o->plan.pat;
    double w = 0, placed = 1;
    for (int q = 0; q < o->plan.n; q++) {
        w += pat[q].bins * pat[q].count[si];
        placed += o->filled[si][q];
    }
    int best = -1, best_fill = 0;
    double best_lag = 0;
    for (int q = 0; q < o->plan.n; q++) {
        if (!pat[q].count[si])
            continue;
        double lag = pat[q].bins * pat[q].count[si] / w * placed - o->filled[si][q];
        int fill = 0;
        for (int i = 0; i < o->n_sz; i++)
            fill += pat[q].count[i] * o->sz[i];
        if (best < 0 || lag > best_lag || (lag == best_lag && fill > best_fill))
            best = q, best_lag = lag, best_fill = fill;
    }
    return best;
}

/* The slots a GPU opened with pattern q by a request of size si keeps: the rest of the pattern, the
 * plan's more frequent sizes first, at most PL_SLOTS; their number, and the CPU and memory their
 * requests need. */
static int plan_slots(const struct pl_online *o, int q, int si, short *slot, int64_t *cpu, int64_t *mem) {
    int k = 0;
    *cpu = *mem = 0;
    for (int i = 0; q >= 0 && i < o->n_sz; i++)
        for (int c = o->plan.pat[q].count[i] - (i == si); c > 0 && k < PL_SLOTS; c--) {
            slot[k++] = (short)o->sz[i];
            *cpu += o->sz_cpu[i];
            *mem += o->sz_mem[i];
        }
    return k;
}

/* Records a sharing request of s milli placed on GPU g of n (before it is subtracted): it takes a
 * slot kept for it, or it opens an idle GPU with plan_pick's pattern and leaves slots for the rest. */
static void plan_commit(struct pl_online *o, struct pl_node *n, int g, int s) {
    int si = plan_size(o, s);
    int pat = n->plan_ver[g] == o->version + 1 ? n->plan_pat[g] : -1;
    int kept = -1;
    for (int k = 0; k < PL_SLOTS && kept < 0; k++)
        if (n->slot[g][k] == s)
            kept = k;
    if (kept >= 0)
        n->slot[g][kept] = 0;
    if (si < 0)
        return;
    if (kept >= 0 || n->gpu_free[g] != PL_MILLI) {
        if (pat >= 0 && o->plan.pat[pat].count[si])
            o->filled[si][pat] += 1;
        return;
    }
    int best = plan_pick(o, si);
    if (best < 0)
        return;
    o->filled[si][best] += 1;
    int64_t cpu, mem;
    memset(n->slot[g], 0, sizeof(n->slot[g]));
    plan_slots(o, best, si, n->slot[g], &cpu, &mem);
    n->plan_pat[g] = (signed char)best;
    n->plan_ver[g] = o->version + 1;
}

/* gpuslice's fragmentation of a node state: FGD's measure under the online estimate (memory
 * included), plus the GPU that the node's CPU cannot feed. FGD checks the CPU of one target pod at a
 * time, so a node with 8 idle GPUs and 12 free cores looks healthy although one typical pod takes the
 * cores and strands the rest; with memory in the measure, most refusals before 100 % arrived were
 * such pods (a fitting GPU somewhere, the CPU nowhere beside it). The GPU pods of the estimate need
 * cpu_per_milli cores per milli-GPU on average, so of the node's free GPU only cpu_left / cpu_per_milli
 * can be fed; the remainder counts as fragment (weight 1, in the same milli-GPU unit; 0.5-3 measured
 * the same). */
static double gs_frag(const struct pl_online *o, const struct pl_node *n, int64_t cpu_left, int64_t mem_left,
                      const int *free_) {
    double f = pl_frag(o->tg, o->n_tg, o->tg_mem, cpu_left, mem_left, free_, n->n_gpu, n->model);
    if (o->plan.n > 0) {
        int64_t cpu, mem;
        int kept = plan_kept(o, n, free_, &cpu, &mem);
        if (cpu_left < cpu || mem_left < mem)
            f += kept;
    }
    if (o->cpu_per_milli > 0) {
        double left = 0;
        for (int g = 0; g < n->n_gpu; g++)
            left += free_[g];
        double fed = (double)(cpu_left > 0 ? cpu_left : 0) / o->cpu_per_milli;
        if (fed < left)
            f += left - fed;
    }
    return f;
}

/* the node's cached fragmentation under the current estimate (version + 1; 0 means stale) */
static void gs_refresh_node(const struct pl_online *o, struct pl_node *n) {
    n->gfrag = gs_frag(o, n, n->cpu_left, n->mem_left, n->gpu_free);
    n->gver = o->version + 1;
}

/* every node's cached fragmentation under a new estimate, once per node state (pl_node_groups:
 * at 2,000 pods of the default trace, 15 to 280 states among the 1,213 nodes) */
static void refresh_nodes(struct pl_cluster *c, const struct pl_online *o) {
    size_t *rep = malloc((c->n_nodes ? c->n_nodes : 1) * sizeof(*rep));
    if (rep)
        pl_node_groups(c, NULL, NULL, c->n_nodes, rep);
    for (size_t j = 0; j < c->n_nodes; j++) {
        struct pl_node *n = &c->nodes[j];
        if (rep && rep[j] != j) { /* computed for an earlier node in the same state */
            n->gfrag = c->nodes[rep[j]].gfrag;
            n->gver = c->nodes[rep[j]].gver;
        } else
            gs_refresh_node(o, n);
    }
    free(rep);
}

static struct pl_online *online_get(struct pl_cluster *c) {
    if (!c->online)
        c->online = calloc(1, sizeof(*c->online));
    return c->online;
}

static int okey_cmp(const void *a, const void *b) {
    const struct okey *x = a, *y = b;
    if (x->cnt != y->cnt)
        return x->cnt > y->cnt ? -1 : 1;
    if (x->cpu != y->cpu)
        return x->cpu > y->cpu ? -1 : 1;
    if (x->milli != y->milli)
        return x->milli > y->milli ? -1 : 1;
    if (x->num != y->num)
        return x->num > y->num ? -1 : 1;
    return x->models > y->models ? -1 : x->models < y->models;
}

static void online_rebuild(struct pl_online *o) {
    struct okey *k = malloc(o->n * sizeof(*k) + 1);
    struct pl_target *tg = calloc(o->n + 1, sizeof(*tg));
    int64_t *mem = calloc(o->n + 1, sizeof(*mem));
    if (!k || !tg || !mem) {
        free(k), free(tg), free(mem);
        return;
    }
    memcpy(k, o->keys, o->n * sizeof(*k));
    qsort(k, o->n, sizeof(*k), okey_cmp);
    double expected = ONLINE_THRESHOLD * o->total / 100.0, cum = 0;
    size_t i = 0;
    while (i < o->n && cum < expected) {
        tg[i].cpu = k[i].cpu;
        tg[i].milli = k[i].milli;
        tg[i].num = k[i].num;
        tg[i].models = k[i].models;
        mem[i] = (int64_t)((double)k[i].mem / k[i].cnt); /* mean memory of the spec */
        tg[i].p = k[i].cnt;
        cum += k[i].cnt;
        i++;
    }
    for (size_t j = 0; j < i; j++)
        tg[j].p /= cum;
    double sc = 0, sg = 0; /* all GPU pods seen, not only the targets */
    for (size_t j = 0; j < o->n; j++)
        if (o->keys[j].milli > 0) {
            sc += (double)o->keys[j].cpu * o->keys[j].cnt;
            sg += (double)o->keys[j].milli * o->keys[j].num * o->keys[j].cnt;
        }
    o->cpu_per_milli = sg > 0 ? sc / sg : 0;
    plan_rebuild(o);
    free(k);
    free(o->tg);
    free(o->tg_mem);
    o->tg = tg;
    o->tg_mem = mem;
    o->n_tg = i;
    o->version++;
    o->since_rebuild = 0;
}

/* ------------------------------------------------------------------------------------------- */
/* GPU models in demand. Where a share of the pods may only use some GPU models (a gpu_spec), a GPU
 * of such a model that a pod without the constraint takes is one the constrained pods lose, and the
 * plan's tiers (a slot, a close fit, an idle GPU: whichever node offers it) and FGD's measure (the
 * fragment of one target at a time) do not see it. So the policy counts, over the GPU pods seen, the
 * milli-GPU of the constrained ones, spread over their models in proportion to the models' GPUs, and
 * a model on which that demand per GPU is at least the cluster's (all constrained demand over all
 * GPUs) is "pressured": a GPU pod that may also use another model goes to a pressured model's node
 * only when no other node fits it. CPU-only pods do not keep off (they take no GPU, and the nodes of
 * the constrained models, T4s with 50 cores per GPU, have the spare CPU; keeping them off measured
 * 83.2 against 89.4 on gpuspec33, seed 42). With no constraints (the trace files) nothing is
 * pressured and nothing changes. */

uint32_t pk_pressured(const double *dem, const int64_t *cap, int n_models) {
    double all = 0;
    int64_t cap_all = 0;
    for (int i = 0; i < n_models && i < PL_MAX_MODELS; i++)
        all += dem[i], cap_all += cap[i];
    uint32_t m = 0;
    if (all <= 0 || cap_all <= 0)
        return 0;
    for (int i = 0; i < n_models && i < PL_MAX_MODELS; i++)
        if (cap[i] > 0 && dem[i] > 0 && dem[i] / (double)cap[i] >= all / (double)cap_all)
            m |= 1u << i;
    return m;
}

/* the cluster's milli-GPU per model */
static void model_caps(const struct pl_cluster *c, int64_t *cap) {
    memset(cap, 0, sizeof(int64_t) * PL_MAX_MODELS);
    for (size_t j = 0; j < c->n_nodes; j++)
        if (c->nodes[j].model >= 0 && c->nodes[j].model < PL_MAX_MODELS)
            cap[c->nodes[j].model] += (int64_t)c->nodes[j].n_gpu * PL_MILLI;
}

/* pod p's milli-GPU added to (sign 1) or taken from (-1) the demand of the models it allows */
static void model_observe(const struct pl_cluster *c, struct pl_online *o, const struct pl_pod *p, int sign) {
    if (!pl_is_gpu_pod(p))
        return;
    double d = (double)p->gpu_milli * p->num_gpu;
    if (!p->models)
        return;
    int64_t cap[PL_MAX_MODELS], in = 0;
    model_caps(c, cap); /* 1,213 nodes, once per constrained GPU pod seen: outside the decision */
    for (int i = 0; i < PL_MAX_MODELS; i++)
        if (p->models >> i & 1)
            in += cap[i];
    for (int i = 0; in > 0 && i < PL_MAX_MODELS; i++)
        if (p->models >> i & 1) {
            double x = o->model_dem[i] + sign * d * (double)cap[i] / (double)in;
            o->model_dem[i] = x > 0 ? x : 0;
        }
}

/* the models pod p should stay off: the pressured ones, when p may use some model that is not */
static uint32_t model_avoid(const struct pl_cluster *c, const struct pl_online *o, const struct pl_pod *p) {
    if (!o->pressured || !pl_is_gpu_pod(p)) /* CPU-only pods take no GPU (and often the CPU there is spare) */
        return 0;
    uint32_t any = c->n_models >= 32 ? 0xffffffffu : (1u << c->n_models) - 1;
    uint32_t allowed = p->models ? p->models & any : any;
    return allowed & ~o->pressured ? o->pressured : 0;
}

/* the estimate's key of p's kind (o->n: none) */
static size_t okey_find(const struct pl_online *o, const struct pl_pod *p) {
    int64_t cpu = pl_score_cpu(p);
    int milli = pl_is_gpu_pod(p) ? p->gpu_milli : 0, num = pl_is_gpu_pod(p) ? p->num_gpu : 0;
    size_t i;
    for (i = 0; i < o->n; i++)
        if (o->keys[i].cpu == cpu && o->keys[i].milli == milli && o->keys[i].num == num &&
            o->keys[i].models == p->models)
            break;
    return i;
}

void pk_observe(struct pl_cluster *c, const struct pl_pod *p) {
    struct pl_online *o = online_get(c);
    if (!o)
        return;
    int64_t cpu = pl_score_cpu(p);
    int milli = pl_is_gpu_pod(p) ? p->gpu_milli : 0, num = pl_is_gpu_pod(p) ? p->num_gpu : 0;
    size_t i = okey_find(o, p);
    if (i == o->n) {
        if (o->n == o->cap) {
            size_t cap = o->cap ? o->cap * 2 : 64;
            struct okey *nk = realloc(o->keys, cap * sizeof(*nk));
            if (!nk)
                return;
            o->keys = nk;
            o->cap = cap;
        }
        o->keys[i] = (struct okey){ cpu, 0, milli, num, p->models, 0 };
        o->n++;
    }
    o->keys[i].cnt += 1;
    o->keys[i].mem += p->mem;
    o->total += 1;
    model_observe(c, o, p, 1);
    o->since_rebuild += 1;
    /* refresh often while the estimate is young, then every 2 % of what has been seen */
    if (o->n_tg == 0 || o->since_rebuild >= 0.02 * o->total + 8) {
        unsigned v = o->version;
        online_rebuild(o);
        int64_t cap[PL_MAX_MODELS];
        model_caps(c, cap);
        o->pressured = pk_pressured(o->model_dem, cap, c->n_models);
        /* the estimate changed: every node's cached fragmentation is recomputed here, outside the
         * decision path (a real scheduler does this when it refreshes the estimate, not when a pod
         * waits for its decision) */
        if (o->version != v)
            refresh_nodes(c, o);
    }
}

void pk_unobserve(struct pl_cluster *c, const struct pl_pod *p) {
    struct pl_online *o = c->online;
    size_t i = o ? okey_find(o, p) : 0;
    if (!o || i == o->n)
        return;
    o->keys[i].cnt -= 1;
    o->keys[i].mem -= p->mem;
    if (o->keys[i].cnt <= 0)
        o->keys[i] = o->keys[--o->n];
    o->total = o->total > 1 ? o->total - 1 : 0;
    model_observe(c, o, p, -1); /* the estimate is rebuilt at the next pods' schedule (pk_observe) */
}

void pk_estimate_size(const struct pl_online *o, size_t *kinds, double *pods) {
    *kinds = o ? o->n : 0;
    *pods = o ? o->total : 0;
}

/* returns -(increase of fragmentation) and the GPU for a sharing pod (only GPU only_gpu when >= 0) */
static double score_gpuslice(struct pl_cluster *c, struct pl_node *n, const struct pl_pod *p, int only_gpu,
                             int *gpu) {
    struct pl_online *o = online_get(c);
    if (!o)
        return 0;
    if (n->gver != o->version + 1) /* only when pl_observe/pl_commit did not keep it current */
        gs_refresh_node(o, n);
    double before = n->gfrag;
    int free_[PL_MAX_GPUS];
    int64_t cpu_left = n->cpu_left - p->cpu, mem_left = n->mem_left - p->mem;
    if (p->num_gpu == 1 && p->gpu_milli > 0 && p->gpu_milli < PL_MILLI) {
        double best = 0;
        int best_g = -1, seen[PL_MAX_GPUS], n_seen = 0;
        memcpy(free_, n->gpu_free, sizeof(int) * (size_t)n->n_gpu);
        for (int g = 0; g < n->n_gpu; g++) {
            if (n->gpu_free[g] < p->gpu_milli || (only_gpu >= 0 && g != only_gpu))
                continue;
            int dup = 0;
            for (int k = 0; k < n_seen; k++)
                dup |= seen[k] == n->gpu_free[g];
            if (dup)
                continue;
            seen[n_seen++] = n->gpu_free[g];
            free_[g] -= p->gpu_milli;
            double after = gs_frag(o, n, cpu_left, mem_left, free_);
            free_[g] += p->gpu_milli;
            /* among equal increases, the fuller GPU */
            double s = (before - after) - 1e-6 * (n->gpu_free[g] - p->gpu_milli);
            if (best_g < 0 || s > best) {
                best = s;
                best_g = g;
            }
        }
        *gpu = best_g;
        return best;
    }
    int64_t cl;
    pl_sub_pod(n, p, &cl, free_);
    double after = gs_frag(o, n, cpu_left, mem_left, free_);
    *gpu = -1;
    return before - after;
}

/* ------------------------------------------------------------------------------------------- */
/* The engine's calls */

/* What pk_schedule and pk_score work out once per pod. */
struct pk_pod {
    int share;       /* share_milli(p) */
    uint32_t avoid;  /* model_avoid */
    int plan;        /* a sharing request with a plan to follow */
    int64_t rest_cpu, rest_mem; /* what the rest of the pattern an idle GPU opens needs */
};

static void pod_prep(const struct pl_cluster *c, const struct pl_pod *p, struct pk_pod *q) {
    q->share = share_milli(p);
    q->avoid = c->online ? model_avoid(c, c->online, p) : 0;
    q->plan = q->share && c->online && c->online->plan.n > 0;
    q->rest_cpu = q->rest_mem = 0;
    if (q->plan) {
        int si = plan_size(c->online, q->share);
        short slot[PL_SLOTS];
        plan_slots(c->online, plan_pick(c->online, si), si, slot, &q->rest_cpu, &q->rest_mem);
    }
}

/* A fitting node's class for the pod: *av (a node of a model the constrained pods need) and *tier
 * (the plan's tier of its best GPU, *only that GPU). Lower is better, av first. */
static void node_class(const struct pl_cluster *c, const struct pk_pod *q, const struct pl_node *n,
                       const struct pl_pod *p, int *av, int *tier, int *only) {
    /* a sharing request goes to the best plan tier first */
    *tier = TIER_NONE;
    *only = -1;
    if (q->plan)
        *only = plan_gpu(c->online, n, q->share, tier);
    if (*tier == TIER_IDLE) {
        /* the node's CPU and memory, less what its slots are kept for, must host the rest */
        int64_t kcpu, kmem;
        plan_kept(c->online, n, n->gpu_free, &kcpu, &kmem);
        if (n->cpu_left - p->cpu - kcpu < q->rest_cpu || n->mem_left - p->mem - kmem < q->rest_mem)
            *tier = TIER_POOR;
    }
    /* a node of a model the constrained pods need, only when no other node fits */
    *av = n->model >= 0 && (q->avoid >> n->model & 1);
}

/* FGD's 101 score levels: measured, the coarse levels with ties to the seeded rank spread load
 * better than an exact comparison with packing ties (docs/fragmentation.md) */
static double node_level(struct pl_cluster *c, struct pl_node *n, const struct pl_pod *p, int only, int *gpu) {
    return (double)(int64_t)(pl_sigmoid(score_gpuslice(c, n, p, only, gpu) / 1000) * 100.0);
}

int pk_schedule(struct pl_cluster *c, const struct pl_pod *p, int *gpu_out) {
    int best = -1, best_gpu = -1, best_tier = TIER_NONE, best_av = 0;
    double best_d = 0;
    struct pk_pod q;
    pod_prep(c, p, &q);
    for (size_t i = 0; i < c->n_nodes; i++) {
        struct pl_node *n = &c->nodes[i];
        if (!pl_node_fits(c, n, p))
            continue;
        int gpu = -1, tier, only, av;
        node_class(c, &q, n, p, &av, &tier, &only);
        if (best >= 0 && (av > best_av || (av == best_av && tier > best_tier)))
            continue;
        double d = node_level(c, n, p, only, &gpu);
        if (best < 0 || av < best_av || tier < best_tier || d > best_d ||
            (d == best_d && n->rank < c->nodes[best].rank)) {
            best = (int)i, best_d = d, best_gpu = gpu, best_tier = tier, best_av = av;
        }
    }
    *gpu_out = best_gpu;
    return best;
}

int64_t pk_score(struct pl_cluster *c, struct pl_node *n, const struct pl_pod *p, int *gpu) {
    struct pk_pod q;
    int tier, only, av;
    pod_prep(c, p, &q);
    node_class(c, &q, n, p, &av, &tier, &only);
    int64_t d = (int64_t)node_level(c, n, p, only, gpu); /* 0..100 */
    return ((int64_t)(1 - av) * (TIER_NONE + 1) + (TIER_NONE - tier)) * 101 + d;
}

void pk_commit_plan(struct pl_cluster *c, struct pl_node *n, const struct pl_pod *p, const struct pl_choice *ch) {
    if (c->online && c->online->plan.n > 0 && share_milli(p) && ch->n_gpus == 1)
        plan_commit(c->online, n, ch->gpus[0], p->gpu_milli);
}

void pk_node_changed(struct pl_cluster *c, struct pl_node *n) {
    n->gver = 0;
    if (c->online && c->online->n_tg) /* keep the node's cached fragmentation current */
        gs_refresh_node(c->online, n);
}

void pk_free(struct pl_online *o) {
    if (!o)
        return;
    free(o->keys);
    free(o->tg);
    free(o->tg_mem);
    free(o);
}
