/* replay.c: CSV loading with validation and the paper's replay loop (see replay.h). The order of
 * random draws is the simulator's (pkg/simulator/core.go: Simulate): Seed, one hidden Int, Shuffle
 * of the name-sorted pods, Intn draws for the inflation, Perm for the node ranks, then the policy's. */
#include "place/replay.h"
#include "place/gorand.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_FIELDS 32

static int64_t pod_gpu(const struct pl_pod *p) {
    return p->num_gpu > 0 && p->gpu_milli > 0 ? (int64_t)p->gpu_milli * p->num_gpu : 0;
}

static void seterr(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t len, const char *fmt, ...) {
    if (!err || !len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

/* Splits line in place at commas; strips the line end. Returns the number of fields. */
static int split(char *line, char **f) {
    size_t len = strlen(line);
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        line[--len] = '\0';
    int n = 0;
    char *s = line;
    for (;;) {
        if (n == MAX_FIELDS)
            return -1;
        f[n++] = s;
        char *e = strchr(s, ',');
        if (!e)
            break;
        *e = '\0';
        s = e + 1;
    }
    return n;
}

static int col(char **hdr, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(hdr[i], name) == 0)
            return i;
    return -1;
}

static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    if (!*s)
        return -EINVAL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -EINVAL;
    *out = v;
    return 0;
}

struct csv {
    FILE *f;
    const char *path;
    char *line;
    size_t cap;
    long lineno;
    char *hdr_buf;
    char *hdr[MAX_FIELDS];
    int n_hdr;
};

static int csv_open(struct csv *c, const char *path, char *err, size_t errlen) {
    memset(c, 0, sizeof(*c));
    c->path = path;
    c->f = fopen(path, "r");
    if (!c->f) {
        int e = errno;
        seterr(err, errlen, "%s: %s", path, strerror(e));
        return -e;
    }
    if (getline(&c->line, &c->cap, c->f) < 0) {
        seterr(err, errlen, "%s:1: empty file (expected a header line)", path);
        return -EINVAL;
    }
    c->lineno = 1;
    c->hdr_buf = strdup(c->line);
    if (!c->hdr_buf)
        return -ENOMEM;
    c->n_hdr = split(c->hdr_buf, c->hdr);
    if (c->n_hdr < 0) {
        seterr(err, errlen, "%s:1: more than %d columns", path, MAX_FIELDS);
        return -EINVAL;
    }
    return 0;
}

static void csv_close(struct csv *c) {
    if (c->f)
        fclose(c->f);
    free(c->line);
    free(c->hdr_buf);
}

/* next data row (skipping empty lines): 1, 0 at the end, -errno on error */
static int csv_next(struct csv *c, char **f, char *err, size_t errlen) {
    for (;;) {
        if (getline(&c->line, &c->cap, c->f) < 0)
            return 0;
        c->lineno++;
        if (c->line[0] == '\n' || (c->line[0] == '\r' && c->line[1] == '\n') || c->line[0] == '\0')
            continue;
        int n = split(c->line, f);
        if (n != c->n_hdr) {
            seterr(err, errlen, "%s:%ld: %d fields, the header has %d", c->path, c->lineno, n < 0 ? MAX_FIELDS : n,
                   c->n_hdr);
            return -EINVAL;
        }
        return 1;
    }
}

static int need_cols(struct csv *c, const char *const *names, int *idx, int n, char *err, size_t errlen) {
    for (int i = 0; i < n; i++) {
        idx[i] = col(c->hdr, c->n_hdr, names[i]);
        if (idx[i] < 0) {
            seterr(err, errlen, "%s:1: field '%s': missing from the header", c->path, names[i]);
            return -EINVAL;
        }
    }
    return 0;
}

static int field_i64(struct csv *c, char **f, int idx, const char *name, int64_t lo, int64_t hi, int64_t *out,
                     char *err, size_t errlen) {
    if (parse_i64(f[idx], lo, hi, out) < 0) {
        seterr(err, errlen, "%s:%ld: field '%s': '%s' is not an integer in %lld..%lld", c->path, c->lineno, name,
               f[idx], (long long)lo, (long long)hi);
        return -EINVAL;
    }
    return 0;
}

static int grow(void **p, size_t *cap, size_t n, size_t elem) {
    if (n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 256;
    void *np = realloc(*p, nc * elem);
    if (!np)
        return -ENOMEM;
    *p = np;
    *cap = nc;
    return 0;
}

int rp_load_nodes(struct rp_trace *t, const char *path, char *err, size_t errlen) {
    static const char *const names[] = { "sn", "cpu_milli", "memory_mib", "gpu", "model" };
    struct csv c;
    int idx[5], rc = csv_open(&c, path, err, errlen);
    if (rc == 0)
        rc = need_cols(&c, names, idx, 5, err, errlen);
    size_t cap = 0, cap2 = 0;
    char *f[MAX_FIELDS];
    while (rc == 0 && (rc = csv_next(&c, f, err, errlen)) == 1) {
        rc = 0;
        struct pl_node nd = { 0 };
        int64_t v;
        if ((rc = field_i64(&c, f, idx[1], "cpu_milli", 0, INT64_C(1) << 40, &nd.cpu_cap, err, errlen)) < 0 ||
            (rc = field_i64(&c, f, idx[2], "memory_mib", 0, INT64_C(1) << 40, &nd.mem_cap, err, errlen)) < 0 ||
            (rc = field_i64(&c, f, idx[3], "gpu", 0, PL_MAX_GPUS, &v, err, errlen)) < 0)
            break;
        if (!*f[idx[0]]) {
            seterr(err, errlen, "%s:%ld: field 'sn': empty node name", path, c.lineno);
            rc = -EINVAL;
            break;
        }
        nd.cpu_left = nd.cpu_cap;
        nd.mem_left = nd.mem_cap;
        nd.n_gpu = (int)v;
        for (int g = 0; g < nd.n_gpu; g++)
            nd.gpu_free[g] = PL_MILLI;
        nd.model = -1;
        if (*f[idx[4]]) {
            nd.model = pl_model_index(&t->models, f[idx[4]]);
            if (nd.model < 0) {
                seterr(err, errlen, "%s:%ld: field 'model': '%s': too many GPU models or too long a name", path,
                       c.lineno, f[idx[4]]);
                rc = -EINVAL;
                break;
            }
        }
        if (grow((void **)&t->nodes, &cap, t->n_nodes, sizeof(*t->nodes)) < 0 ||
            grow((void **)&t->node_names, &cap2, t->n_nodes, sizeof(char *)) < 0 ||
            !(t->node_names[t->n_nodes] = strdup(f[idx[0]]))) {
            rc = -ENOMEM;
            break;
        }
        t->nodes[t->n_nodes++] = nd;
    }
    if (rc == 0 && t->n_nodes == 0) {
        seterr(err, errlen, "%s: no nodes", path);
        rc = -EINVAL;
    }
    if (rc == 0) { /* the replay measures GPU allocation: a cluster without GPUs has none */
        size_t k = 0;
        while (k < t->n_nodes && t->nodes[k].n_gpu == 0)
            k++;
        if (k == t->n_nodes) {
            seterr(err, errlen, "%s: no node has a GPU: nothing to replay", path);
            rc = -EINVAL;
        }
    }
    csv_close(&c);
    return rc;
}

int rp_load_pods(struct rp_trace *t, const char *path, char *err, size_t errlen) {
    static const char *const names[] = { "name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec" };
    struct csv c;
    int idx[6], rc = csv_open(&c, path, err, errlen);
    if (rc == 0)
        rc = need_cols(&c, names, idx, 5, err, errlen);
    /* gpu_spec is optional: the multigpu* traces have no such column (any model) */
    idx[5] = rc == 0 ? col(c.hdr, c.n_hdr, names[5]) : -1;
    size_t cap = 0, cap2 = 0, cap3 = 0;
    char *f[MAX_FIELDS];
    while (rc == 0 && (rc = csv_next(&c, f, err, errlen)) == 1) {
        rc = 0;
        struct pl_pod p = { 0 };
        int64_t ng, gm;
        if ((rc = field_i64(&c, f, idx[1], "cpu_milli", 0, INT64_C(1) << 40, &p.cpu, err, errlen)) < 0 ||
            (rc = field_i64(&c, f, idx[2], "memory_mib", 0, INT64_C(1) << 40, &p.mem, err, errlen)) < 0 ||
            (rc = field_i64(&c, f, idx[3], "num_gpu", 0, PL_MAX_GPUS, &ng, err, errlen)) < 0 ||
            (rc = field_i64(&c, f, idx[4], "gpu_milli", INT64_MIN / 2, INT64_MAX / 2, &gm, err, errlen)) < 0)
            break;
        if (!*f[idx[0]]) {
            seterr(err, errlen, "%s:%ld: field 'name': empty pod name", path, c.lineno);
            rc = -EINVAL;
            break;
        }
        p.num_gpu = (int)ng;
        /* the simulator's pod_csv_to_yaml: gpu_milli clipped to 1000, <= 0 means none */
        p.gpu_milli = ng == 0 ? 0 : gm > PL_MILLI ? PL_MILLI : gm < 0 ? 0 : (int)gm;
        if (p.num_gpu > 1 && p.gpu_milli > 0 && p.gpu_milli < PL_MILLI) {
            seterr(err, errlen, "%s:%ld: field 'gpu_milli': %lld with num_gpu %d (a shared GPU is one GPU)", path,
                   c.lineno, (long long)gm, p.num_gpu);
            rc = -EINVAL;
            break;
        }
        const char *spec = idx[5] >= 0 ? f[idx[5]] : "";
        if (pl_spec_mask(&t->models, spec, &p.models) < 0) {
            seterr(err, errlen, "%s:%ld: field 'gpu_spec': '%s': too many GPU models or too long a name", path,
                   c.lineno, spec);
            rc = -EINVAL;
            break;
        }
        if (grow((void **)&t->pods, &cap, t->n_pods, sizeof(*t->pods)) < 0 ||
            grow((void **)&t->pod_names, &cap2, t->n_pods, sizeof(char *)) < 0 ||
            grow((void **)&t->pod_specs, &cap3, t->n_pods, sizeof(char *)) < 0) {
            rc = -ENOMEM;
            break;
        }
        t->pod_names[t->n_pods] = strdup(f[idx[0]]);
        t->pod_specs[t->n_pods] = strdup(spec);
        t->pods[t->n_pods++] = p;
        if (!t->pod_names[t->n_pods - 1] || !t->pod_specs[t->n_pods - 1]) {
            rc = -ENOMEM;
            break;
        }
    }
    if (rc == 0 && t->n_pods == 0) {
        seterr(err, errlen, "%s: no pods", path);
        rc = -EINVAL;
    }
    if (rc == 0) { /* the replay inflates the GPU request: without any there is nothing to replay */
        size_t k = 0;
        while (k < t->n_pods && pod_gpu(&t->pods[k]) == 0)
            k++;
        if (k == t->n_pods) {
            seterr(err, errlen, "%s: no pod asks for a GPU (num_gpu and gpu_milli above 0): nothing to replay",
                   path);
            rc = -EINVAL;
        }
    }
    csv_close(&c);
    return rc;
}

void rp_trace_free(struct rp_trace *t) {
    for (size_t i = 0; i < t->n_nodes; i++)
        free(t->node_names[i]);
    for (size_t i = 0; i < t->n_pods; i++) {
        free(t->pod_names[i]);
        free(t->pod_specs[i]);
    }
    free(t->node_names);
    free(t->pod_names);
    free(t->pod_specs);
    free(t->nodes);
    free(t->pods);
    memset(t, 0, sizeof(*t));
}

/* ------------------------------------------------------------------------------------------- */

static const struct rp_trace *sort_trace; /* qsort has no context argument in C11 */

static int by_pod_name(const void *a, const void *b) {
    return strcmp(sort_trace->pod_names[*(const size_t *)a], sort_trace->pod_names[*(const size_t *)b]);
}

static int by_node_name(const void *a, const void *b) {
    return strcmp(sort_trace->node_names[*(const size_t *)a], sort_trace->node_names[*(const size_t *)b]);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Python's round(x, 2), close enough: half-even on the scaled value */
static double round2(double x) {
    return nearbyint(x * 100.0) / 100.0;
}

/* PWR's tables (watts): GPU idle/full per model; CPU idle/full per package and cores per package */
static const struct { const char *model; double idle, full; int cpu; } pwr_gpu[] = {
    { "T4", 10, 70, 1 },       { "A10", 30, 150, 0 },     { "P100", 25, 250, 2 },
    { "V100M16", 30, 300, 3 }, { "V100M32", 30, 300, 3 }, { "A100", 50, 400, 4 },
    { "G1", 25, 250, 0 },      { "G2", 25, 250, 0 },      { "G3", 25, 250, 0 },
};
static const struct { double idle, full, ncores; } pwr_cpu[] = {
    { 15, 120, 16 }, /* none given: PWR's fallback, the E5-2682 v4 profile */
    { 20, 165, 24 }, /* Xeon 8163 (T4 instances) */
    { 15, 120, 16 }, /* Xeon E5-2682 v4 (P100) */
    { 20, 185, 16 }, /* Xeon 6326 (V100) */
    { 20, 270, 32 }, /* Xeon 8369B (A100) */
};

double rp_node_power(const char *model, int n_gpu, const int *gpu_free, int64_t cpu_cap, int64_t cpu_left) {
    double gidle = 25, gfull = 250, w = 0;
    int cpu = 0;
    for (size_t i = 0; model && i < sizeof(pwr_gpu) / sizeof(pwr_gpu[0]); i++)
        if (strcmp(model, pwr_gpu[i].model) == 0)
            gidle = pwr_gpu[i].idle, gfull = pwr_gpu[i].full, cpu = pwr_gpu[i].cpu;
    for (int g = 0; g < n_gpu; g++)
        w += gpu_free[g] >= PL_MILLI ? gidle : gfull;
    double cores = ceil((double)cpu_cap / 1000.0 / 2.0);
    double idle_cores = floor((double)(cpu_left > 0 ? cpu_left : 0) / 1000.0 / 2.0);
    double busy = cores - idle_cores > 0 ? cores - idle_cores : 0;
    double pk = ceil(cores / pwr_cpu[cpu].ncores), active = ceil(busy / pwr_cpu[cpu].ncores);
    return w + pwr_cpu[cpu].idle * (pk - active) + pwr_cpu[cpu].full * active;
}

static double node_power(const struct pl_cluster *c, const struct pl_node *n) {
    return rp_node_power(n->model >= 0 ? c->models[n->model] : NULL, n->n_gpu, n->gpu_free, n->cpu_cap, n->cpu_left);
}

int rp_run(const struct rp_trace *t, const struct rp_options *o, struct rp_result *r) {
    memset(r, 0, sizeof(*r));
    size_t n = t->n_pods, nn = t->n_nodes;
    size_t *sorted = malloc(n * sizeof(*sorted)), *nsorted = malloc(nn * sizeof(*nsorted));
    size_t cap = n * 2 + 16, len = 0;
    size_t *seq = malloc(cap * sizeof(*seq));
    int32_t *perm = malloc(nn * sizeof(*perm));
    struct pl_pod *orig = malloc(n * sizeof(*orig));
    const char **specs = malloc(n * sizeof(*specs));
    struct pl_node *nodes = malloc(nn * sizeof(*nodes));
    double *sum_a = calloc(RP_MAX_PCT + 2, sizeof(double)), *sum_f = calloc(RP_MAX_PCT + 2, sizeof(double));
    double *sum_w = calloc(RP_MAX_PCT + 2, sizeof(double));
    size_t *cnt = calloc(RP_MAX_PCT + 2, sizeof(size_t));
    double *lat = NULL;
    struct pl_cluster c = { 0 };
    int rc = -ENOMEM;
    if (!sorted || !nsorted || !seq || !perm || !orig || !specs || !nodes || !sum_a || !sum_f || !sum_w || !cnt)
        goto out;

    /* 1. the original pods sorted by name: the workload that FGD's targets come from */
    for (size_t i = 0; i < n; i++)
        sorted[i] = i;
    sort_trace = t;
    qsort(sorted, n, sizeof(*sorted), by_pod_name);
    for (size_t i = 0; i < n; i++) {
        orig[i] = t->pods[sorted[i]];
        specs[i] = t->pod_specs[sorted[i]];
    }
    /* 2. seed, and the draw hidden in a debug log's arguments */
    struct pl_gorand rng;
    pl_gorand_seed(&rng, o->seed);
    (void)pl_gorand_int63(&rng);
    /* 3. shuffle (rand.Shuffle) the name-sorted pods */
    for (size_t i = 0; i < n; i++)
        seq[i] = i;
    len = n;
    for (int64_t i = (int64_t)n - 1; i > 0; i--) {
        int32_t j = pl_gorand_int31n_lemire(&rng, (int32_t)(i + 1));
        size_t tmp = seq[i];
        seq[i] = seq[j];
        seq[j] = tmp;
    }
    /* 4./5. inflate (or deflate) to inflation x the cluster's GPU capacity */
    int64_t pod_total = 0, node_total = 0;
    for (size_t i = 0; i < n; i++)
        pod_total += pod_gpu(&orig[i]);
    for (size_t i = 0; i < nn; i++)
        node_total += (int64_t)t->nodes[i].n_gpu * PL_MILLI;
    double target = o->inflation * (double)node_total;
    if (node_total == 0 || pod_total == 0) {
        /* no GPU (the allocation ratio has no denominator) or no GPU request (inflating would never
         * end): rp_load_nodes and rp_load_pods refuse both */
        rc = -EINVAL;
        goto out;
    }
    if ((double)pod_total < target) {
        for (;;) {
            int32_t idx = pl_gorand_intn(&rng, (int32_t)n);
            /* the simulator compares with the per-GPU milli, then adds the total */
            if ((double)(pod_total + orig[idx].gpu_milli) > target)
                break;
            pod_total += pod_gpu(&orig[idx]);
            if (len == cap) {
                size_t *ns = realloc(seq, cap * 2 * sizeof(*seq));
                if (!ns)
                    goto out;
                seq = ns;
                cap *= 2;
            }
            seq[len++] = (size_t)idx;
        }
    } else {
        while ((double)pod_total > target && len > 0) {
            int32_t idx = pl_gorand_intn(&rng, (int32_t)len);
            pod_total -= pod_gpu(&orig[seq[idx]]);
            memmove(&seq[idx], &seq[idx + 1], (len - (size_t)idx - 1) * sizeof(*seq));
            len--;
        }
    }
    /* 6. node ranks: nodes sorted by name, node i gets the prefix perm[i] */
    for (size_t i = 0; i < nn; i++)
        nsorted[i] = i;
    qsort(nsorted, nn, sizeof(*nsorted), by_node_name);
    pl_gorand_perm(&rng, (int32_t)nn, perm);
    for (size_t i = 0; i < nn; i++) {
        nodes[i] = t->nodes[nsorted[i]];
        nodes[i].rank = perm[i];
    }
    rc = pl_cluster_init(&c, nodes, nn);
    if (rc < 0)
        goto out;
    memcpy(c.models, t->models.models, sizeof(c.models));
    c.n_models = t->models.n_models;
    rc = pl_set_targets(&c, orig, specs, n, o->threshold_pct > 0 ? o->threshold_pct : 95);
    if (rc < 0)
        goto out;
    if (o->time_decisions) {
        lat = malloc(len * sizeof(*lat));
        if (!lat) {
            rc = -ENOMEM;
            goto out;
        }
    }

    if (o->record_shares) {
        r->shares = malloc(len * sizeof(*r->shares) + 1);
        if (!r->shares) {
            rc = -ENOMEM;
            goto out;
        }
    }
    if (o->record_events) {
        r->events = malloc(len * sizeof(*r->events) + 1);
        if (!r->events) {
            rc = -ENOMEM;
            goto out;
        }
    }

    /* the replay: one event per pod, in order; a pod that fits nowhere is dropped */
    int64_t arrived = 0;
    double watts = 0; /* the cluster's power, kept current node by node */
    for (size_t i = 0; i < c.n_nodes; i++)
        watts += node_power(&c, &c.nodes[i]);
    double total = (double)node_total;
    int max_bucket = -1;
    double t0 = now_s();
    for (size_t k = 0; k < len; k++) {
        const struct pl_pod *p = &orig[seq[k]];
        arrived += pod_gpu(p);
        if (o->policy == PL_GPUSLICE)
            pl_observe(&c, p); /* the pod is in the scheduler's queue: it may learn from it */
        struct pl_choice ch;
        double ts = o->time_decisions ? now_s() : 0;
        int s = pl_schedule(&c, o->policy, p, &rng, &ch);
        if (o->time_decisions)
            lat[k] = (now_s() - ts) * 1e6;
        /* the paper: round(A / T / 10) with T in GPUs, i.e. the percent of capacity, half-even */
        int b = (int)nearbyint((double)arrived / (total / 1000.0) / 10.0);
        if (s == 0) {
            watts -= node_power(&c, &c.nodes[ch.node]);
            pl_commit(&c, p, &ch);
            watts += node_power(&c, &c.nodes[ch.node]);
            if (r->shares && p->num_gpu == 1 && p->gpu_milli > 0 && p->gpu_milli < PL_MILLI && b <= 100)
                r->shares[r->n_shares++] = p->gpu_milli;
        } else {
            r->n_failed++;
            r->n_failed_gpu += pod_gpu(p) > 0;
        }
        if (r->events) {
            struct rp_event *e = &r->events[k];
            e->pod = sorted[seq[k]];
            e->bucket = b;
            e->where = s == 0 ? ch : (struct pl_choice){ .node = -1 };
            if (s == 0)
                e->where.node = (int)nsorted[ch.node];
        }
        if (b >= 0 && b <= RP_MAX_PCT) {
            sum_a[b] += round2((double)c.alloc_gpu_milli / (total / 1000.0) / 10.0);
            sum_f[b] += c.frag_sum / total * 100.0;
            sum_w[b] += watts / 1000.0;
            cnt[b]++;
            if (b > max_bucket)
                max_bucket = b;
        }
    }
    r->wall_s = now_s() - t0;
    r->n_events = len;
    r->final_alloc_pct = (double)c.alloc_gpu_milli / total * 100.0;
    r->n_pct = max_bucket + 1;
    for (int x = 0; x < r->n_pct; x++) {
        double sa = 0, sf = 0, sw = 0;
        size_t nc = 0;
        if (cnt[x]) {
            sa = sum_a[x], sf = sum_f[x], sw = sum_w[x], nc = cnt[x];
        } else {
            for (int y = x - 1; y <= x + 1; y++)
                if (y >= 0 && y <= RP_MAX_PCT)
                    sa += sum_a[y], sf += sum_f[y], sw += sum_w[y], nc += cnt[y];
        }
        r->power_kw[x] = nc ? round2(sw / (double)nc) : NAN;
        r->alloc_pct[x] = nc ? round2(sa / (double)nc) : NAN;
        r->frag_pct[x] = nc ? round2(sf / (double)nc) : NAN;
    }
    if (lat && len) {
        qsort(lat, len, sizeof(*lat), cmp_double);
        r->lat_median_us = lat[len / 2];
        r->lat_p99_us = lat[(size_t)((double)(len - 1) * 0.99)];
        r->lat_max_us = lat[len - 1];
    }
    rc = 0;
out:
    if (rc < 0)
        rp_result_release(r);
    pl_cluster_free(&c);
    free(sorted), free(nsorted), free(seq), free(perm), free(orig), free(specs), free(nodes);
    free(sum_a), free(sum_f), free(sum_w), free(cnt), free(lat);
    return rc;
}

void rp_result_release(struct rp_result *r) {
    free(r->shares);
    r->shares = NULL;
    r->n_shares = 0;
    free(r->events);
    r->events = NULL;
}
