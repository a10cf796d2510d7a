/* pack.c: first-fit decreasing and the local search of the consolidation planner (pack.h). */
#include "consolidate/pack.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

#define BLK 32

struct gpu {
    uint64_t mem;
    uint64_t units;          /* the pods' memory units (cs_problem.units) */
    uint64_t total;          /* summed duty over all steps */
    uint32_t over;           /* steps over the budget */
    uint32_t maxsum;
    uint32_t *sum;           /* steps */
    uint32_t *bmax;          /* per block of BLK steps: the largest sum */
    uint32_t *pods;
    size_t np, cap;
};

struct state {
    const struct cs_problem *pb;
    struct gpu *g;
    size_t ng, gcap;
    uint32_t *gpu_of;
    uint16_t *peak;          /* per pod */
    uint16_t *pbmax;         /* per pod and block: the largest duty */
    size_t nblk;
    uint32_t *top;           /* per pod: the steps of its ntop largest duty values */
    size_t ntop;             /* tolerated + 4 (0 when that is too many): enough to refuse quickly */
    uint64_t *total;         /* per pod: summed duty */
    double *size;            /* per pod: the current order's size */
    uint64_t work;
};

static const uint16_t *duty_of(const struct state *s, size_t p) { return s->pb->duty + p * s->pb->steps; }

static void state_free(struct state *s) {
    for (size_t i = 0; i < s->ng; i++) {
        free(s->g[i].sum);
        free(s->g[i].bmax);
        free(s->g[i].pods);
    }
    free(s->g);
    free(s->peak);
    free(s->pbmax);
    free(s->top);
    free(s->total);
    free(s->size);
    memset(s, 0, sizeof *s);
}

/* Each pod's ntop busiest steps (by a histogram of its duty values), for the quick refusal: a pod
 * whose busiest steps alone would put a GPU over the budget more often than tolerated does not fit. */
static int top_steps(struct state *s) {
    const struct cs_problem *pb = s->pb;
    size_t want = (size_t)pb->tolerated + 4;
    if (want > 1024 || want > pb->steps)
        return 0;
    s->ntop = want;
    s->top = malloc((pb->n ? pb->n : 1) * want * sizeof *s->top);
    _cleanup_free_ uint32_t *hist = malloc((UINT16_MAX + 1) * sizeof *hist);
    if (!s->top || !hist)
        return -ENOMEM;
    for (size_t p = 0; p < pb->n; p++) {
        const uint16_t *d = pb->duty + p * pb->steps;
        memset(hist, 0, (UINT16_MAX + 1) * sizeof *hist);
        for (size_t t = 0; t < pb->steps; t++)
            hist[d[t]]++;
        size_t v = UINT16_MAX, have = 0;
        while (v > 0 && have + hist[v] < want)
            have += hist[v--];
        /* every step above v, then steps at v until want */
        uint32_t *top = s->top + p * want;
        size_t k = 0;
        for (size_t t = 0; t < pb->steps && k < want; t++)
            if (d[t] > v)
                top[k++] = (uint32_t)t;
        for (size_t t = 0; t < pb->steps && k < want; t++)
            if (d[t] == v)
                top[k++] = (uint32_t)t;
    }
    return 0;
}

static int state_init(struct state *s, const struct cs_problem *pb, uint32_t *gpu_of) {
    memset(s, 0, sizeof *s);
    s->pb = pb;
    s->gpu_of = gpu_of;
    s->peak = calloc(pb->n ? pb->n : 1, sizeof *s->peak);
    s->total = calloc(pb->n ? pb->n : 1, sizeof *s->total);
    s->size = calloc(pb->n ? pb->n : 1, sizeof *s->size);
    s->nblk = (pb->steps + BLK - 1) / BLK;
    s->pbmax = calloc((pb->n ? pb->n : 1) * (s->nblk ? s->nblk : 1), sizeof *s->pbmax);
    if (!s->peak || !s->total || !s->size || !s->pbmax)
        return -ENOMEM;
    for (size_t p = 0; p < pb->n; p++) {
        const uint16_t *d = pb->duty + p * pb->steps;
        uint16_t pk = 0;
        uint64_t tot = 0;
        for (size_t t = 0; t < pb->steps; t++) {
            if (d[t] > pk)
                pk = d[t];
            tot += d[t];
            uint16_t *bm = &s->pbmax[p * s->nblk + t / BLK];
            if (d[t] > *bm)
                *bm = d[t];
        }
        s->peak[p] = pk;
        s->total[p] = tot;
        gpu_of[p] = UINT32_MAX;
    }
    return top_steps(s);
}

/* Makes room for one more element in *arr (count n, capacity *cap). */
static int grow(void **arr, size_t n, size_t *cap, size_t elem, size_t first) {
    if (n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : first;
    void *a = realloc(*arr, nc * elem);
    if (!a)
        return -ENOMEM;
    *arr = a;
    *cap = nc;
    return 0;
}

static long open_gpu(struct state *s) {
    if (grow((void **)&s->g, s->ng, &s->gcap, sizeof *s->g, 64) < 0)
        return -ENOMEM;
    struct gpu *g = &s->g[s->ng];
    memset(g, 0, sizeof *g);
    g->sum = calloc(s->pb->steps ? s->pb->steps : 1, sizeof *g->sum);
    g->bmax = calloc(s->nblk ? s->nblk : 1, sizeof *g->bmax);
    if (!g->sum || !g->bmax) {
        free(g->sum);
        free(g->bmax);
        return -ENOMEM;
    }
    return (long)s->ng++;
}

/* Whether pod p fits on GPU gi as it is. */
static bool fits(struct state *s, size_t gi, size_t p) {
    const struct cs_problem *pb = s->pb;
    struct gpu *g = &s->g[gi];
    if (g->mem + pb->mem[p] > pb->capacity)
        return false;
    if (pb->units && g->units + pb->units[p] > pb->units_capacity)
        return false;
    if (pb->max_pods && g->np >= pb->max_pods)
        return false;
    if (g->maxsum + s->peak[p] <= pb->budget)
        return true;
    const uint16_t *d = duty_of(s, p), *pbm = s->pbmax + p * s->nblk;
    const uint32_t *sum = g->sum, b = pb->budget;
    if (s->ntop) {
        const uint32_t *top = s->top + p * s->ntop;
        uint32_t c = 0;
        for (size_t k = 0; k < s->ntop; k++)
            c += sum[top[k]] + d[top[k]] > b;
        if (c > pb->tolerated)
            return false;
    }
    uint32_t over = g->over;
    for (size_t k = 0; k < s->nblk; k++) {
        if (g->bmax[k] + pbm[k] <= b)
            continue;
        size_t t0 = k * BLK, e = t0 + BLK < pb->steps ? t0 + BLK : pb->steps;
        uint32_t c = 0;
        s->work += e - t0;
        for (size_t t = t0; t < e; t++)
            c += (sum[t] <= b) & (sum[t] + d[t] > b);
        over += c;
        if (over > pb->tolerated)
            return false;
    }
    return true;
}

/* Whether pod p fits on GPU gi once pod q has left it. */
static bool fits_instead(struct state *s, size_t gi, size_t q, size_t p) {
    const struct cs_problem *pb = s->pb;
    struct gpu *g = &s->g[gi];
    if (g->mem - pb->mem[q] + pb->mem[p] > pb->capacity)
        return false;
    if (pb->units && g->units - pb->units[q] + pb->units[p] > pb->units_capacity)
        return false;
    if (g->maxsum + s->peak[p] <= pb->budget)
        return true;
    const uint16_t *dp = duty_of(s, p), *dq = duty_of(s, q), *pbm = s->pbmax + p * s->nblk;
    const uint32_t *sum = g->sum, b = pb->budget;
    if (s->ntop) {
        const uint32_t *top = s->top + p * s->ntop;
        uint32_t c = 0;
        for (size_t k = 0; k < s->ntop; k++)
            c += sum[top[k]] - dq[top[k]] + dp[top[k]] > b;
        if (c > pb->tolerated)
            return false;
    }
    uint32_t over = 0;
    for (size_t k = 0; k < s->nblk; k++) {
        size_t t0 = k * BLK, e = t0 + BLK < pb->steps ? t0 + BLK : pb->steps;
        uint32_t c = 0;
        if (g->bmax[k] + pbm[k] <= b)
            continue;
        s->work += e - t0;
        for (size_t t = t0; t < e; t++)
            c += sum[t] - dq[t] + dp[t] > b;
        over += c;
        if (over > pb->tolerated)
            return false;
    }
    return true;
}

/* Adds (sign 1) or takes away (-1) pod p's duty on GPU gi, with the GPU's over count and maxima. */
static void apply_duty(struct state *s, struct gpu *g, size_t p, int sign) {
    const uint16_t *d = duty_of(s, p);
    const uint32_t b = s->pb->budget;
    uint32_t over = 0, mx = 0;
    for (size_t k = 0; k < s->nblk; k++) {
        size_t t0 = k * BLK, e = t0 + BLK < s->pb->steps ? t0 + BLK : s->pb->steps;
        uint32_t bm = 0;
        for (size_t t = t0; t < e; t++) {
            uint32_t v = sign > 0 ? g->sum[t] + d[t] : g->sum[t] - d[t];
            g->sum[t] = v;
            over += v > b;
            bm = v > bm ? v : bm;
        }
        g->bmax[k] = bm;
        mx = bm > mx ? bm : mx;
    }
    g->over = over;
    g->maxsum = mx;
}

static int add_pod(struct state *s, size_t gi, size_t p) {
    struct gpu *g = &s->g[gi];
    if (grow((void **)&g->pods, g->np, &g->cap, sizeof *g->pods, 8) < 0)
        return -ENOMEM;
    g->pods[g->np++] = (uint32_t)p;
    apply_duty(s, g, p, 1);
    g->mem += s->pb->mem[p];
    g->units += s->pb->units ? s->pb->units[p] : 0;
    g->total += s->total[p];
    s->gpu_of[p] = (uint32_t)gi;
    return 0;
}

static void remove_pod(struct state *s, size_t gi, size_t p) {
    struct gpu *g = &s->g[gi];
    for (size_t i = 0; i < g->np; i++)
        if (g->pods[i] == p) {
            g->pods[i] = g->pods[--g->np];
            break;
        }
    apply_duty(s, g, p, -1);
    g->mem -= s->pb->mem[p];
    g->units -= s->pb->units ? s->pb->units[p] : 0;
    g->total -= s->total[p];
    s->gpu_of[p] = UINT32_MAX;
}

bool cs_pod_fits_alone(const struct cs_problem *pb, size_t p) {
    if (pb->mem[p] > pb->capacity || (pb->units && pb->units[p] > pb->units_capacity))
        return false;
    const uint16_t *d = pb->duty + p * pb->steps;
    size_t over = 0;
    for (size_t t = 0; t < pb->steps; t++)
        over += d[t] > pb->budget;
    return over <= pb->tolerated;
}

static const char *const order_names[CS_FFD_ORDERS] = { "memory+peak", "max(memory,peak)", "memory+mean", "memory",
                                                        "peak" };

const char *cs_ffd_order_name(unsigned order) { return order < CS_FFD_ORDERS ? order_names[order] : "?"; }

static void set_sizes(struct state *s, unsigned order) {
    const struct cs_problem *pb = s->pb;
    for (size_t p = 0; p < pb->n; p++) {
        double m = (double)pb->mem[p] / (double)pb->capacity;
        double pk = (double)s->peak[p] / pb->budget;
        double mean = pb->steps ? (double)s->total[p] / ((double)pb->budget * (double)pb->steps) : 0;
        switch (order) {
        case 0: s->size[p] = m + pk; break;
        case 1: s->size[p] = m > pk ? m : pk; break;
        case 2: s->size[p] = m + mean; break;
        case 3: s->size[p] = m + 1e-6 * pk; break;
        default: s->size[p] = pk + 1e-6 * m; break;
        }
    }
}

static const struct state *sort_ctx;
static int cmp_size_desc(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    double sx = sort_ctx->size[x], sy = sort_ctx->size[y];
    if (sx != sy)
        return sx < sy ? 1 : -1;
    return (x > y) - (x < y);
}

static void sort_by_size(const struct state *s, uint32_t *idx, size_t n) {
    sort_ctx = s;
    qsort(idx, n, sizeof *idx, cmp_size_desc);
    sort_ctx = NULL;
}

/* First-fit decreasing into an empty state. Returns GPUs or -errno (-EINVAL: *bad fits nowhere). */
static long ffd(struct state *s, unsigned order, size_t *bad) {
    const struct cs_problem *pb = s->pb;
    set_sizes(s, order);
    _cleanup_free_ uint32_t *idx = malloc((pb->n ? pb->n : 1) * sizeof *idx);
    if (!idx)
        return -ENOMEM;
    for (size_t p = 0; p < pb->n; p++)
        idx[p] = (uint32_t)p;
    sort_by_size(s, idx, pb->n);
    for (size_t k = 0; k < pb->n; k++) {
        size_t p = idx[k];
        size_t gi = 0;
        while (gi < s->ng && !fits(s, gi, p))
            gi++;
        if (gi == s->ng) {
            if (!cs_pod_fits_alone(pb, p)) {
                if (bad)
                    *bad = p;
                return -EINVAL;
            }
            long r = open_gpu(s);
            if (r < 0)
                return r;
        }
        int r = add_pod(s, gi, p);
        if (r < 0)
            return r;
    }
    return (long)s->ng;
}

long cs_pack_ffd(const struct cs_problem *pb, unsigned order, uint32_t *gpu_of) {
    struct state s;
    int r = state_init(&s, pb, gpu_of);
    long g = r < 0 ? r : ffd(&s, order, NULL);
    state_free(&s);
    return g;
}

/* ---- local search ---- */

struct move {
    uint32_t pod, from, to;
};

struct search {
    struct state *s;
    const struct cs_pack_opts *o;
    double start;
    struct move *log;
    size_t nlog, logcap;
    bool out_of_budget;
};

static bool budget_spent(struct search *x) {
    if (x->o->work_limit && x->s->work >= x->o->work_limit)
        x->out_of_budget = true;
    else if (x->o->time_limit_s > 0 && x->o->now && x->o->now() - x->start >= x->o->time_limit_s)
        x->out_of_budget = true;
    return x->out_of_budget;
}

static double gpu_load(const struct state *s, size_t gi) {
    const struct gpu *g = &s->g[gi];
    double steps = s->pb->steps ? (double)s->pb->steps : 1;
    return (double)g->mem / (double)s->pb->capacity + (double)g->total / ((double)s->pb->budget * steps);
}

static int log_move(struct search *x, size_t p, size_t from, size_t to) {
    if (grow((void **)&x->log, x->nlog, &x->logcap, sizeof *x->log, 64) < 0)
        return -ENOMEM;
    x->log[x->nlog++] = (struct move){ (uint32_t)p, (uint32_t)from, (uint32_t)to };
    return 0;
}

static int do_move(struct search *x, size_t p, size_t from, size_t to) {
    remove_pod(x->s, from, p);
    int r = add_pod(x->s, to, p);
    return r < 0 ? r : log_move(x, p, from, to);
}

static int undo(struct search *x, size_t upto) {
    while (x->nlog > upto) {
        struct move m = x->log[--x->nlog];
        remove_pod(x->s, m.to, m.pod);
        int r = add_pod(x->s, m.from, m.pod);
        if (r < 0)
            return r;
    }
    return 0;
}

/* Places pod p (on GPU e) elsewhere: the fullest GPU it fits, or a swap. 1 placed, 0 not, -errno. */
static int relocate(struct search *x, size_t e, size_t p) {
    struct state *s = x->s;
    long best = -1;
    double best_load = -1;
    for (size_t g = 0; g < s->ng; g++) {
        if (g == e)
            continue;
        double l = gpu_load(s, g);
        if (l > best_load && fits(s, g, p)) {
            best = (long)g;
            best_load = l;
        }
    }
    if (best >= 0) {
        int r = do_move(x, p, e, (size_t)best);
        return r < 0 ? r : 1;
    }
    /* a swap: q leaves g for a third GPU h, p takes its place */
    for (size_t g = 0; g < s->ng; g++) {
        if (g == e)
            continue;
        for (size_t i = 0; i < s->g[g].np; i++) {
            size_t q = s->g[g].pods[i];
            if (s->size[q] >= s->size[p])
                continue;
            if (budget_spent(x))
                return 0;
            if (!fits_instead(s, g, q, p))
                continue;
            for (size_t h = 0; h < s->ng; h++) {
                if (h == e || h == g || !fits(s, h, q))
                    continue;
                int r = do_move(x, q, g, h);
                if (r == 0)
                    r = do_move(x, p, e, g);
                return r < 0 ? r : 1;
            }
        }
    }
    return 0;
}

/* Tries to empty GPU e. 1 emptied, 0 not (everything as before), -errno. */
static int try_empty(struct search *x, size_t e) {
    struct state *s = x->s;
    size_t mark = x->nlog;
    size_t np = s->g[e].np;
    _cleanup_free_ uint32_t *pods = malloc((np ? np : 1) * sizeof *pods);
    if (!pods)
        return -ENOMEM;
    memcpy(pods, s->g[e].pods, np * sizeof *pods);
    sort_by_size(s, pods, np);
    for (size_t k = 0; k < np; k++) {
        int r = budget_spent(x) ? 0 : relocate(x, e, pods[k]);
        if (r < 0)
            return r;
        if (r == 0) {
            r = undo(x, mark);
            return r < 0 ? r : 0;
        }
    }
    return 1;
}

/* Drops the empty GPU e: the last GPU takes its index. */
static void drop_gpu(struct state *s, size_t e) {
    free(s->g[e].sum);
    free(s->g[e].bmax);
    free(s->g[e].pods);
    size_t last = s->ng - 1;
    if (e != last) {
        s->g[e] = s->g[last];
        for (size_t i = 0; i < s->g[e].np; i++)
            s->gpu_of[s->g[e].pods[i]] = (uint32_t)e;
    }
    s->ng--;
}

static const struct state *load_ctx;
static int cmp_load_asc(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    double lx = gpu_load(load_ctx, x), ly = gpu_load(load_ctx, y);
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return (x > y) - (x < y);
}

static int search(struct state *s, const struct cs_pack_opts *o, struct cs_pack_stats *st) {
    struct search x = { .s = s, .o = o, .start = o->now ? o->now() : 0 };
    int rc = 0;
    for (;;) {
        if (s->ng <= 1)
            break;
        _cleanup_free_ uint32_t *order = malloc(s->ng * sizeof *order);
        if (!order) {
            rc = -ENOMEM;
            break;
        }
        for (size_t i = 0; i < s->ng; i++)
            order[i] = (uint32_t)i;
        load_ctx = s;
        qsort(order, s->ng, sizeof *order, cmp_load_asc);
        load_ctx = NULL;
        bool emptied = false;
        for (size_t k = 0; k < s->ng && !emptied; k++) {
            if (budget_spent(&x))
                break;
            x.nlog = 0;
            int r = try_empty(&x, order[k]);
            if (r < 0) {
                rc = r;
                goto out;
            }
            if (r == 1) {
                drop_gpu(s, order[k]);
                st->emptied++;
                emptied = true;
            }
        }
        if (!emptied) {
            st->search_complete = !x.out_of_budget;
            break;
        }
    }
out:
    free(x.log);
    return rc;
}

/* ---- the ejection search: with one GPU fewer, the pods of the lightest GPU are placed again, a pod
 * that fits nowhere taking the place of a smaller one that it ejects into the pool (a pod placed is
 * not ejected again for a few rounds); the GPU count is kept when the pool empties, else the
 * solution before it comes back. ---- */

#define EJECT_ROUNDS 3000
#define EJECT_TENURE 4

static uint64_t rng_next(uint64_t *x) {
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    return *x * 0x2545F4914F6CDD1Dull;
}

static int rebuild(struct state *s, const uint32_t *snap, size_t ng) {
    for (size_t i = 0; i < s->ng; i++) {
        free(s->g[i].sum);
        free(s->g[i].bmax);
        free(s->g[i].pods);
    }
    s->ng = 0;
    for (size_t i = 0; i < ng; i++) {
        long r = open_gpu(s);
        if (r < 0)
            return (int)r;
    }
    for (size_t p = 0; p < s->pb->n; p++) {
        int r = add_pod(s, snap[p], p);
        if (r < 0)
            return r;
    }
    return 0;
}

/* The GPU the pool's pod p fits on as it is, the fullest; -1 if none. */
static long best_fit(struct state *s, size_t p) {
    long best = -1;
    double best_load = -1;
    for (size_t g = 0; g < s->ng; g++) {
        double l = gpu_load(s, g);
        if (l > best_load && fits(s, g, p)) {
            best = (long)g;
            best_load = l;
        }
    }
    return best;
}

static int eject_search(struct state *s, const struct cs_pack_opts *o, struct cs_pack_stats *st, double start) {
    const size_t n = s->pb->n;
    _cleanup_free_ uint32_t *snap = malloc(n * sizeof *snap);
    _cleanup_free_ uint32_t *pool = malloc(n * sizeof *pool);
    _cleanup_free_ uint64_t *stamp = calloc(n, sizeof *stamp);
    _cleanup_free_ uint32_t *order = malloc(n * sizeof *order);
    if (!snap || !pool || !stamp || !order)
        return -ENOMEM;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    size_t fails = 0;
    struct search x = { .s = s, .o = o, .start = start };
    while (s->ng > 1 && fails < s->ng && fails < 20) {
        if (budget_spent(&x))
            break;
        memcpy(snap, s->gpu_of, n * sizeof *snap);
        size_t snap_ng = s->ng;
        for (size_t i = 0; i < s->ng; i++)
            order[i] = (uint32_t)i;
        load_ctx = s;
        qsort(order, s->ng, sizeof *order, cmp_load_asc);
        load_ctx = NULL;
        size_t e = order[fails];
        size_t np = s->g[e].np;
        memcpy(pool, s->g[e].pods, np * sizeof *pool);
        for (size_t k = 0; k < np; k++)
            remove_pod(s, e, pool[k]);
        drop_gpu(s, e);
        for (uint64_t round = EJECT_TENURE + 1; np > 0 && round < EJECT_ROUNDS + EJECT_TENURE + 1; round++) {
            if ((round & 15) == 0 && budget_spent(&x))
                break;
            size_t i = 0;
            if (rng_next(&rng) & 1) {
                i = (size_t)(rng_next(&rng) % np);
            } else {
                for (size_t k = 1; k < np; k++)
                    if (s->size[pool[k]] > s->size[pool[i]])
                        i = k;
            }
            size_t p = pool[i];
            long g = best_fit(s, p);
            if (g >= 0) {
                int r = add_pod(s, (size_t)g, p);
                if (r < 0)
                    return r;
                stamp[p] = round;
                pool[i] = pool[--np];
                continue;
            }
            long bg = -1;
            size_t bq = 0;
            double bscore = 0;
            for (size_t h = 0; h < s->ng; h++) {
                for (size_t k = 0; k < s->g[h].np; k++) {
                    size_t q = s->g[h].pods[k];
                    if (stamp[q] + EJECT_TENURE > round || !fits_instead(s, h, q, p))
                        continue;
                    double score = s->size[q] * (1.0 + 0.5 * (double)(rng_next(&rng) % 1000) / 1000.0);
                    if (bg < 0 || score < bscore) {
                        bg = (long)h;
                        bq = q;
                        bscore = score;
                    }
                }
            }
            if (bg < 0)
                continue;
            remove_pod(s, (size_t)bg, bq);
            int r = add_pod(s, (size_t)bg, p);
            if (r < 0)
                return r;
            stamp[p] = round;
            pool[i] = (uint32_t)bq;
        }
        if (np == 0) {
            st->emptied++;
            fails = 0;
            continue;
        }
        int r = rebuild(s, snap, snap_ng);
        if (r < 0)
            return r;
        fails++;
    }
    return 0;
}

/* Renumbers the GPUs: fullest first (load descending), ties by the smallest pod index. */
static int renumber(struct state *s) {
    _cleanup_free_ uint32_t *order = malloc((s->ng ? s->ng : 1) * sizeof *order);
    _cleanup_free_ uint32_t *newidx = malloc((s->ng ? s->ng : 1) * sizeof *newidx);
    if (!order || !newidx)
        return -ENOMEM;
    for (size_t i = 0; i < s->ng; i++)
        order[i] = (uint32_t)i;
    load_ctx = s;
    qsort(order, s->ng, sizeof *order, cmp_load_asc);
    load_ctx = NULL;
    for (size_t k = 0; k < s->ng; k++)
        newidx[order[k]] = (uint32_t)(s->ng - 1 - k);
    for (size_t p = 0; p < s->pb->n; p++)
        s->gpu_of[p] = newidx[s->gpu_of[p]];
    return 0;
}

long cs_pack(const struct cs_problem *pb, const struct cs_pack_opts *o, uint32_t *gpu_of, struct cs_pack_stats *st,
             size_t *bad) {
    memset(st, 0, sizeof *st);
    if (pb->n == 0)
        return 0;
    _cleanup_free_ uint32_t *tmp = malloc(pb->n * sizeof *tmp);
    if (!tmp)
        return -ENOMEM;
    long best = -1;
    unsigned best_order = 0;
    double start = o->now ? o->now() : 0;
    for (unsigned ord = 0; ord < CS_FFD_ORDERS; ord++) {
        /* the other orders only while half the time limit is left */
        if (ord > 0 && o->now && o->time_limit_s > 0 && o->now() - start > o->time_limit_s / 2)
            break;
        struct state s;
        int r = state_init(&s, pb, tmp);
        long g = r < 0 ? r : ffd(&s, ord, bad);
        st->work += s.work;
        state_free(&s);
        if (g < 0)
            return g;
        if (best < 0 || g < best) {
            best = g;
            best_order = ord;
        }
    }
    st->ffd_gpus = (size_t)best;
    st->ffd_order = order_names[best_order];
    struct state s;
    int r = state_init(&s, pb, gpu_of);
    long g = r < 0 ? r : ffd(&s, best_order, bad);
    if (g >= 0 && o->search) {
        s.work = st->work;
        r = search(&s, o, st);
        if (r == 0)
            r = eject_search(&s, o, st, o->now ? o->now() : 0);
        st->work = s.work;
        if (r < 0)
            g = r;
    } else if (g >= 0) {
        st->search_complete = false;
    }
    if (g >= 0) {
        r = renumber(&s);
        g = r < 0 ? r : (long)s.ng;
    }
    st->gpus = g >= 0 ? (size_t)g : 0;
    state_free(&s);
    return g;
}

int cs_bounds(const struct cs_problem *pb, struct cs_bounds *out) {
    memset(out, 0, sizeof *out);
    unsigned long long sum = 0, usum = 0;
    size_t ularge = 0;
    for (size_t p = 0; p < pb->n; p++) {
        sum += pb->mem[p];
        if (pb->mem[p] * 2 > pb->capacity)
            out->large++;
        if (pb->units) {
            usum += pb->units[p];
            ularge += (uint64_t)pb->units[p] * 2 > pb->units_capacity;
        }
    }
    out->memory = pb->capacity ? (size_t)((sum + pb->capacity - 1) / pb->capacity) : 0;
    if (pb->units && pb->units_capacity) {
        size_t um = (size_t)((usum + pb->units_capacity - 1) / pb->units_capacity);
        out->memory = um > out->memory ? um : out->memory;
        /* two pods over half the units never share a GPU either (a set by one measure only) */
        out->large = ularge > out->large ? ularge : out->large;
    }
    out->pods = pb->max_pods ? (pb->n + pb->max_pods - 1) / pb->max_pods : 0;
    _cleanup_free_ uint64_t *tot = calloc(pb->steps ? pb->steps : 1, sizeof *tot);
    if (!tot)
        return -ENOMEM;
    for (size_t p = 0; p < pb->n; p++) {
        const uint16_t *d = pb->duty + p * pb->steps;
        for (size_t t = 0; t < pb->steps; t++)
            tot[t] += d[t];
    }
    /* G GPUs: a step whose total is over G budgets has a GPU over its budget; each GPU may be over
     * on `tolerated` steps, so such steps number at most G * tolerated. */
    size_t g = pb->n ? 1 : 0;
    for (; g > 0 && g < pb->n; g++) {
        unsigned long long cap = (unsigned long long)g * pb->budget;
        size_t over = 0;
        for (size_t t = 0; t < pb->steps; t++)
            over += tot[t] > cap;
        if (over <= (unsigned long long)g * pb->tolerated)
            break;
    }
    out->duty = g;
    out->bound = out->memory;
    if (out->duty > out->bound)
        out->bound = out->duty;
    if (out->large > out->bound)
        out->bound = out->large;
    if (out->pods > out->bound)
        out->bound = out->pods;
    return 0;
}
