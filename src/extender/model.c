/* model.c: the extender's cluster model and decisions (model.h). Pure. */
#include "extender/model.h"

#include "core/plan.h"
#include "extender/claims.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    /* the high bits into the low ones, which index the table: names that differ in their last
     * digits only ("openb-node-0143") collided there */
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    return h ^ h >> 33;
}

long ex_model_find(const struct ex_model *m, const char *name) {
    if (!m->n_slots)
        return -1;
    uint64_t h = hash_str(name);
    for (size_t k = h & (m->n_slots - 1);; k = (k + 1) & (m->n_slots - 1)) {
        uint32_t v = m->slots[k];
        if (!v)
            return -1;
        if (m->name_hash[v - 1] == h && strcmp(m->names[v - 1], name) == 0)
            return (long)v - 1;
    }
}

int ex_model_init(struct ex_model *m, enum pl_policy pol, const struct ex_node_spec *nodes, size_t n, char *err,
                  size_t errlen) {
    memset(m, 0, sizeof(*m));
    m->policy = pol;
    m->n_known = n;
    if (pol == PL_RANDOM || (unsigned)pol >= PL_POLICY_COUNT) {
        snprintf(err, errlen, "policy %s cannot score nodes", pl_policy_name(pol));
        return -EINVAL;
    }
    struct pl_node *pn = calloc(n ? n : 1, sizeof(*pn));
    m->names = calloc(n ? n : 1, sizeof(*m->names));
    m->gpu_mem = calloc(n ? n : 1, sizeof(*m->gpu_mem));
    m->replicas = calloc(n ? n : 1, sizeof(*m->replicas));
    m->share = calloc(n ? n : 1, sizeof(*m->share));
    m->plan = calloc(n ? n : 1, sizeof(*m->plan));
    for (m->n_slots = 16; m->n_slots < 2 * n; m->n_slots *= 2)
        ;
    m->slots = calloc(m->n_slots, sizeof(*m->slots));
    m->name_hash = calloc(n ? n : 1, sizeof(*m->name_hash));
    int r = -ENOMEM;
    if (!pn || !m->names || !m->gpu_mem || !m->replicas || !m->share || !m->plan || !m->slots || !m->name_hash) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    r = -EINVAL;
    for (size_t i = 0; i < n; i++) {
        const struct ex_node_spec *s = &nodes[i];
        if (!s->name[0]) {
            snprintf(err, errlen, "node %zu: no name", i);
            goto fail;
        }
        if (s->n_gpu < 0 || s->n_gpu > PL_MAX_GPUS) {
            snprintf(err, errlen, "node %s: gpus %d: at most %d", s->name, s->n_gpu, PL_MAX_GPUS);
            goto fail;
        }
        m->name_hash[i] = hash_str(s->name);
        size_t k = m->name_hash[i] & (m->n_slots - 1);
        for (; m->slots[k]; k = (k + 1) & (m->n_slots - 1))
            if (strcmp(m->names[m->slots[k] - 1], s->name) == 0) {
                snprintf(err, errlen, "node %s: listed twice", s->name);
                goto fail;
            }
        m->slots[k] = (uint32_t)(i + 1);
        snprintf(m->names[i], EX_NAME_MAX, "%s", s->name);
        /* what the node's gpuslice.io/gpu-memory units offer of a GPU (its GiB rounded to the
         * nearest, as the agent advertises them and the kubelet admits pods), in MiB */
        m->gpu_mem[i] = s->gpu_mem_mib > 0
                            ? (int64_t)gs_frac_memory_units((unsigned long long)s->gpu_mem_mib << 20) * 1024
                            : s->gpu_mem_mib;
        m->replicas[i] = s->replicas;
        pn[i].cpu_cap = pn[i].cpu_left = s->cpu;
        pn[i].mem_cap = pn[i].mem_left = s->mem;
        pn[i].n_gpu = s->n_gpu;
        pn[i].model = -1;
        pn[i].rank = (int)i;
        for (int g = 0; g < s->n_gpu; g++) {
            if (s->gpu_free[g] < 0 || s->gpu_free[g] > PL_MILLI) {
                snprintf(err, errlen, "node %s: GPU %d: free %d milli-GPU: expected 0..1000", s->name, g,
                         s->gpu_free[g]);
                goto fail;
            }
            pn[i].gpu_free[g] = s->gpu_free[g];
        }
    }
    if ((r = pl_cluster_init(&m->c, pn, n)) < 0) {
        snprintf(err, errlen, "cannot build the cluster: %s", strerror(-r));
        goto fail;
    }
    for (size_t i = 0; i < n; i++)
        if (nodes[i].n_gpu > 0 && nodes[i].model[0]) {
            int mi = pl_model_index(&m->c, nodes[i].model);
            if (mi < 0) {
                snprintf(err, errlen, "node %s: GPU model %s: more than %d models or a name over %d characters",
                         nodes[i].name, nodes[i].model, PL_MAX_MODELS, PL_MODEL_LEN - 1);
                r = -EINVAL;
                goto fail;
            }
            m->c.nodes[i].model = mi;
        }
    if (!(m->base = malloc((n ? n : 1) * sizeof(*m->base)))) {
        snprintf(err, errlen, "out of memory");
        r = -ENOMEM;
        goto fail;
    }
    memcpy(m->base, m->c.nodes, n * sizeof(*m->base));
    free(pn);
    return 0;
fail:
    free(pn);
    ex_model_free(m);
    return r;
}

static void free_specs(char **sp, size_t n) {
    for (size_t k = 0; sp && k < n; k++)
        free(sp[k]);
    free(sp);
}

void ex_model_free(struct ex_model *m) {
    pl_cluster_free(&m->c);
    free(m->base);
    free(m->names);
    free(m->gpu_mem);
    free(m->replicas);
    free(m->share);
    free(m->plan);
    free(m->slots);
    free(m->name_hash);
    free(m->bound);
    free(m->pend);
    free(m->obs);
    free(m->obs_dead);
    free(m->wl);
    free_specs(m->wl_specs, m->n_wl);
    memset(m, 0, sizeof(*m));
}

/* FGD's targets from the workload pods[0..n) with their spec text: *out a copy of the pods with
 * their model masks against m's table (m's own workload arrays are not touched) */
static int apply_workload(struct ex_model *m, const struct pl_pod *pods, char *const *specs, size_t n,
                          struct pl_pod **out, char *err, size_t errlen) {
    struct pl_pod *wl = malloc(n * sizeof(*wl));
    if (!wl) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    memcpy(wl, pods, n * sizeof(*wl));
    for (size_t k = 0; k < n; k++)
        if (pl_spec_mask(&m->c, specs[k], &wl[k].models) < 0) {
            snprintf(err, errlen,
                     "workload pod %zu: gpu_spec '%s': more than %d GPU models or a name over %d characters", k,
                     specs[k], PL_MAX_MODELS, PL_MODEL_LEN - 1);
            free(wl);
            return -EINVAL;
        }
    if (pl_set_targets(&m->c, wl, (const char *const *)specs, n, 95) < 0) {
        snprintf(err, errlen, "out of memory");
        free(wl);
        return -ENOMEM;
    }
    *out = wl;
    return 0;
}

int ex_model_set_workload(struct ex_model *m, const struct pl_pod *pods, const char *const *specs, size_t n,
                          char *err, size_t errlen) {
    if (!n) {
        snprintf(err, errlen, "the workload has no pods");
        return -EINVAL;
    }
    char **sp = calloc(n, sizeof(*sp));
    size_t k = 0;
    while (sp && k < n && (sp[k] = strdup(specs && specs[k] ? specs[k] : "")))
        k++;
    if (!sp || k < n) {
        free_specs(sp, k);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    struct pl_pod *wl;
    int r = apply_workload(m, pods, sp, n, &wl, err, errlen);
    if (r < 0) {
        free_specs(sp, n);
        return r;
    }
    free(m->wl);
    free_specs(m->wl_specs, m->n_wl);
    m->wl = wl;
    m->wl_specs = sp;
    m->n_wl = n;
    return 0;
}

bool ex_pod_wants_gpu(const struct ex_pod *p) {
    return p->gpus > 0 || p->compute_pct > 0 || p->gpu_mem_mib > 0;
}

/* The models of the cluster's table that a pod's gpu_spec names (names no node has are left out;
 * none known: 0, any, as the trace's replay does not either: the scheduler finds no node). */
static uint32_t spec_models(const struct pl_cluster *c, const char *spec) {
    uint32_t mask = 0;
    for (const char *s = spec; *s;) {
        size_t n = strcspn(s, "|");
        for (int k = 0; k < c->n_models; k++)
            if (strlen(c->models[k]) == n && strncmp(c->models[k], s, n) == 0)
                mask |= 1u << k;
        s += n + (s[n] == '|');
    }
    return mask;
}

int ex_pod_on_node(const struct ex_model *m, size_t i, const struct ex_pod *p, struct pl_pod *out, char *why,
                   size_t len) {
    const struct pl_node *n = &m->c.nodes[i];
    *out = (struct pl_pod){ .cpu = p->cpu, .mem = p->mem, .models = p->gpu_spec[0] ? spec_models(&m->c, p->gpu_spec) : 0 };
    if (out->models && ex_pod_wants_gpu(p) && (n->model < 0 || !(out->models & (1u << n->model)))) {
        snprintf(why, len, "GPU model %s: the pod's node affinity on " EX_PRODUCT_LABEL " allows %.120s",
                 n->model >= 0 ? m->c.models[n->model] : "(none)", p->gpu_spec);
        return -EINVAL;
    }
    if (p->compute_pct > 0 || p->gpu_mem_mib > 0) {
        if (p->gpus > 0) {
            snprintf(why, len,
                     "a share of a GPU (gpuslice.io/gpu-compute, gpu-memory) with a whole-GPU count "
                     "(nvidia.com/gpu: %d): ask for one or the other",
                     p->gpus);
            return -EINVAL;
        }
        if (p->compute_pct > 100) {
            snprintf(why, len, "gpuslice.io/gpu-compute %d: at most 100 (percent of one GPU)", p->compute_pct);
            return -EINVAL;
        }
        int milli = p->compute_pct * 10;
        if (p->gpu_mem_mib > 0) {
            int64_t gm = m->gpu_mem[i];
            if (gm <= 0) {
                snprintf(why, len, "the memory of this node's GPUs is not known (gpuslice.io/gpu.memory)");
                return -EINVAL;
            }
            if (p->gpu_mem_mib > gm) {
                snprintf(why, len, "gpuslice.io/gpu-memory %lld MiB: this node's GPUs offer %lld MiB (%lld units)",
                         (long long)p->gpu_mem_mib, (long long)gm, (long long)(gm / 1024));
                return -EINVAL;
            }
            int64_t mm = (p->gpu_mem_mib * PL_MILLI + gm - 1) / gm;
            if (mm > milli)
                milli = (int)mm;
        }
        out->num_gpu = 1;
        out->gpu_milli = milli;
    } else if (p->gpus > 0) {
        int rep = m->replicas[i] > 1 ? m->replicas[i] : 1;
        out->num_gpu = p->gpus;
        out->gpu_milli = PL_MILLI / rep;
    }
    if (out->num_gpu > n->n_gpu) {
        snprintf(why, len, "%d GPU(s) asked, the node has %d", out->num_gpu, n->n_gpu);
        return -EINVAL;
    }
    return 0;
}

/* p's fractional request in *r (gpu-memory MiB, gpu-compute milli): false for a pod asking neither */
static bool frac_req(const struct ex_pod *p, struct ex_share *r) {
    r->mem_mib = p->gpu_mem_mib > 0 ? p->gpu_mem_mib : 0;
    r->compute = p->compute_pct > 0 ? p->compute_pct * 10 : 0;
    return r->mem_mib > 0 || r->compute > 0;
}

/* GPU g of node i once the fractional request r joins it: its free milli-GPU, -1 when r does not
 * fit its memory or its compute */
static int frac_after(const struct ex_model *m, size_t i, int g, const struct ex_share *r) {
    return ex_share_after(&m->share[i][g], m->c.nodes[i].gpu_free[g], m->gpu_mem[i], r);
}

/* whether the two dimensions of node i's GPUs tell the fractional request r (NULL: any) other than
 * their one figure does: its GPUs carry fractional pods, and memory is in play (r's or theirs).
 * Compute alone, as the trace's milli-GPU pods ask it, is the one figure exactly. */
static bool node_apart(const struct ex_model *m, size_t i, const struct ex_share *r) {
    bool any = false, mem = !r || r->mem_mib > 0;
    for (int g = 0; g < m->c.nodes[i].n_gpu; g++) {
        any = any || m->share[i][g].mem_mib || m->share[i][g].compute;
        mem = mem || m->share[i][g].mem_mib;
    }
    return any && mem;
}

/* Node i as the fractional request r of figure d sees it: a GPU that holds r in both dimensions
 * offers its free milli after r plus d (the engine, which takes d off the GPU it picks, then sees
 * that GPU exactly as it will be), the others less than d. A node without fractional pods is
 * seen as it is (its GPUs' two dimensions are the one figure). */
static void frac_view(const struct ex_model *m, size_t i, const struct ex_share *r, int d, struct pl_node *view) {
    const struct pl_node *n = &m->c.nodes[i];
    *view = *n;
    for (int g = 0; g < n->n_gpu; g++) {
        int a = frac_after(m, i, g, r);
        view->gpu_free[g] = a >= 0 ? a + d : n->gpu_free[g] < d ? n->gpu_free[g] : d > 0 ? d - 1 : 0;
    }
}

/* the pod's plan group: its namespace and gpuslice.io/plan-gpu hashed (0: none) */
static uint64_t plan_hash(const struct ex_pod *p) {
    if (!p->plan_gpu[0])
        return 0;
    char key[EX_NAME_MAX + EX_PLAN_MAX + 1];
    snprintf(key, sizeof(key), "%s/%s", p->ns, p->plan_gpu);
    uint64_t h = hash_str(key);
    return h ? h : 1;
}

/* commits pod q (its figure) on ch at node i; a fractional one (r not NULL) takes of its GPU's one
 * figure what its memory and compute leave: the GPU's free milli before less after. A pod of plan
 * group plan (0: none) on one GPU marks the GPU with it unless a group did first. */
static void commit_pod(struct ex_model *m, size_t i, const struct pl_pod *q, const struct ex_share *r,
                       uint64_t plan, const struct pl_choice *ch) {
    if (plan && ch->n_gpus == 1 && ch->gpus[0] >= 0 && ch->gpus[0] < PL_MAX_GPUS && !m->plan[i][ch->gpus[0]])
        m->plan[i][ch->gpus[0]] = plan;
    if (!r || ch->n_gpus != 1) {
        pl_commit(&m->c, q, ch);
        return;
    }
    int g = ch->gpus[0], after = frac_after(m, i, g, r);
    struct pl_pod e = *q;
    e.gpu_milli = after >= 0 ? m->c.nodes[i].gpu_free[g] - after : 0; /* callers checked the fit */
    if (after >= 0) {
        m->share[i][g].mem_mib += r->mem_mib;
        m->share[i][g].compute += r->compute;
    }
    pl_commit(&m->c, &e, ch);
}

/* appends text or a number to why[*o..len) (snprintf per failed node cost more than the filter) */
static void app(char *why, size_t len, size_t *o, const char *t) {
    while (*t && *o + 1 < len)
        why[(*o)++] = *t++;
    why[*o < len ? *o : len - 1] = '\0';
}

static void app_num(char *why, size_t len, size_t *o, long long v) {
    char num[24], *q = num + sizeof(num);
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    *--q = '\0';
    do
        *--q = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0)
        *--q = '-';
    app(why, len, o, q);
}

/* why the GPUs of n do not hold q: the free milli-GPU of each GPU and their sum */
static void gpu_reason(const struct pl_node *n, const struct pl_pod *q, char *why, size_t len) {
    size_t o = 0;
    int64_t sum = 0;
    if (q->num_gpu == 1) {
        app(why, len, &o, "no single GPU has ");
    } else {
        app(why, len, &o, "fewer than ");
        app_num(why, len, &o, q->num_gpu);
        app(why, len, &o, " GPUs have ");
    }
    app_num(why, len, &o, q->gpu_milli);
    app(why, len, &o, " milli-GPU free (free per GPU: ");
    for (int g = 0; g < n->n_gpu; g++) {
        if (g)
            app(why, len, &o, ",");
        app_num(why, len, &o, n->gpu_free[g]);
        sum += n->gpu_free[g];
    }
    if (q->num_gpu == 1) {
        app(why, len, &o, "; ");
        app_num(why, len, &o, sum);
        app(why, len, &o, " in all");
    }
    app(why, len, &o, ")");
}

/* why no GPU of node i holds the fractional request r (figure q): gpu_reason (on the one figure,
 * the smaller of each GPU's free fractions, which is below the pod's on every GPU that fails it)
 * and, where GPUs carry fractional pods, each GPU's free memory and compute */
static void frac_reason(const struct ex_model *m, size_t i, const struct ex_share *r, const struct pl_pod *q,
                        char *why, size_t len) {
    const struct pl_node *n = &m->c.nodes[i];
    gpu_reason(n, q, why, len);
    if (!node_apart(m, i, r))
        return;
    int64_t gm = m->gpu_mem[i];
    size_t o = strlen(why);
    app(why, len, &o, "; free MiB/compute % per GPU: ");
    for (int g = 0; g < n->n_gpu; g++) {
        const struct ex_share *s = &m->share[i][g];
        int64_t whole = (int64_t)n->gpu_free[g] + ex_share_milli(s, gm);
        int64_t mem = gm > 0 ? whole * gm / PL_MILLI - s->mem_mib : 0;
        if (g)
            app(why, len, &o, ",");
        app_num(why, len, &o, mem > 0 ? mem : 0);
        app(why, len, &o, "/");
        app_num(why, len, &o, (whole - s->compute) / 10);
    }
}

enum ex_verdict ex_filter(struct ex_model *m, const struct ex_pod *p, const char *node, char *why, size_t len) {
    long i = ex_model_find(m, node);
    bool gpu = ex_pod_wants_gpu(p);
    if (m->dra && p->claims.n) { /* its ResourceClaims, on the DRA driver's devices (claims.h) */
        enum ex_verdict v = ex_dra_filter(m->dra, p, node, why, len);
        if (v != EX_FIT)
            return v;
    }
    if (i < 0) {
        if (!gpu)
            return EX_FIT;
        snprintf(why, len, "the gpuslice extender knows no GPUs on this node");
        return EX_UNRESOLVABLE;
    }
    if (!gpu)
        return EX_FIT; /* CPU and memory: the scheduler's own filters, on the real state */
    struct pl_pod q;
    if (ex_pod_on_node(m, (size_t)i, p, &q, why, len) < 0 ||
        ex_dra_plugin_short(m->dra, node, m->c.nodes[i].n_gpu, q.num_gpu, why, len))
        return EX_UNRESOLVABLE;
    const struct pl_node *n = &m->c.nodes[i];
    struct ex_share r;
    bool frac = frac_req(p, &r);
    int k = 0;
    for (int g = 0; g < n->n_gpu; g++)
        k += frac ? frac_after(m, (size_t)i, g, &r) >= 0 : n->gpu_free[g] >= q.gpu_milli;
    if (k >= q.num_gpu)
        return EX_FIT;
    if (frac)
        frac_reason(m, (size_t)i, &r, &q, why, len);
    else
        gpu_reason(n, &q, why, len);
    return EX_FAIL;
}

/* pl_score_node of q (pod p on node i), on the node as a fractional p sees it (frac_view) */
static int score_pod(struct ex_model *m, const struct ex_pod *p, size_t i, const struct pl_pod *q, int64_t *s,
                     int *gpu) {
    struct ex_share r;
    if (!frac_req(p, &r) || !node_apart(m, i, &r))
        return pl_score_node(&m->c, m->policy, i, q, s, gpu);
    struct pl_node view, keep = m->c.nodes[i];
    frac_view(m, i, &r, q->gpu_milli, &view);
    m->c.nodes[i] = view; /* its cached fragmentation is the node's: the state before the pod */
    int ret = pl_score_node(&m->c, m->policy, i, q, s, gpu);
    m->c.nodes[i] = keep;
    return ret;
}

/* node i's raw score for p (pl_score_node); for a pod asking no extended resource whose claims
 * are judged (claims.h), the node seen through its DRA devices: < 0 when it does not fit */
static int raw_score(struct ex_model *m, const struct ex_pod *p, size_t i, int64_t *s) {
    struct pl_pod q;
    int r;
    if (m->dra && p->claims.n && !ex_pod_wants_gpu(p)) {
        struct pl_node view, keep = m->c.nodes[i];
        if ((r = ex_dra_view(m->dra, p, m->names[i], &keep, &view, &q)) < 0)
            return r;
        if (r > 0) { /* scored in the node's place, which is put back */
            view.frag = pl_node_frag(&m->c, &view);
            m->c.nodes[i] = view;
            r = pl_score_node(&m->c, m->policy, i, &q, s, NULL);
            m->c.nodes[i] = keep;
            return r;
        }
    }
    char why[EX_REASON_MAX];
    if ((r = ex_pod_on_node(m, i, p, &q, why, sizeof(why))) < 0)
        return r;
    return score_pod(m, p, i, &q, s, NULL);
}

/* rep[k]: the first of the n nodes whose raw score is node idx[k]'s (-1: not known): the same
 * node state, GPU memory and replicas (pl_node_groups). false: no groups, when memory is short or
 * the pod's claims are judged on each node's DRA devices. */
static bool score_groups(const struct ex_model *m, const struct ex_pod *p, const long *idx, const int *cls, size_t n,
                         size_t *rep) {
    if ((m->dra && p->claims.n && !ex_pod_wants_gpu(p)) || !n)
        return false;
    size_t *at = malloc(n * sizeof(*at));
    uint64_t *key = malloc(n * sizeof(*key));
    bool ok = at && key;
    for (size_t k = 0; ok && k < n; k++) {
        long i = idx[k];
        at[k] = i < 0 ? 0 : (size_t)i;
        struct ex_share r;
        bool packs = i >= 0 && !(frac_req(p, &r) && node_apart(m, (size_t)i, &r)) && !(cls && cls[k] == 2) &&
                     m->gpu_mem[i] >= 0 && m->gpu_mem[i] < (int64_t)1 << 40 && m->replicas[i] >= 0 &&
                     m->replicas[i] < 1 << 22;
        /* a node not known, one whose pair does not pack, one whose fractional pods a fractional
         * pod sees (frac_view), or one with a GPU of the pod's plan group, in a group of its own */
        key[k] = packs ? (uint64_t)m->gpu_mem[i] << 22 | (uint64_t)m->replicas[i] : (uint64_t)1 << 63 | k;
    }
    ok = ok && pl_node_groups(&m->c, at, key, n, rep) == 0;
    free(at);
    free(key);
    return ok;
}

/* whether a GPU of the model holds pods of plan group h */
static bool group_placed(const struct ex_model *m, uint64_t h) {
    for (size_t i = 0; h && i < m->c.n_nodes; i++)
        for (int g = 0; g < m->c.nodes[i].n_gpu; g++)
            if (m->plan[i][g] == h)
                return true;
    return false;
}

/* The GPU of node i that a pod of a plan group (q: its figure there) goes to first: one that holds
 * pods of its group and fits it (the fullest after it; *cls 2), else, when no GPU holds its group
 * yet (placed false), an idle one that fits it (the lowest index; *cls 1), else -1 (*cls 0: the
 * policy's choice; also for a pod of no group or of more than one GPU). A pod its group's GPUs
 * cannot take is left to the policy, which fills gaps where an idle GPU would be one more. */
static int hint_gpu(const struct ex_model *m, size_t i, const struct ex_pod *p, const struct pl_pod *q, bool placed,
                    int *cls) {
    uint64_t h = plan_hash(p);
    const struct pl_node *n = &m->c.nodes[i];
    struct ex_share r;
    bool frac = frac_req(p, &r);
    int best = -1, best_left = 0, idle = -1;
    *cls = 0;
    if (!h || q->num_gpu != 1 || q->gpu_milli <= 0)
        return -1;
    for (int g = 0; g < n->n_gpu; g++) {
        int left = frac ? frac_after(m, i, g, &r) : n->gpu_free[g] - q->gpu_milli;
        if (left < 0)
            continue;
        if (m->plan[i][g] == h && (best < 0 || left < best_left))
            best = g, best_left = left;
        if (idle < 0 && !placed && n->gpu_free[g] == PL_MILLI && !m->plan[i][g])
            idle = g;
    }
    *cls = best >= 0 ? 2 : idle >= 0 ? 1 : 0;
    return best >= 0 ? best : idle;
}

/* the hint's class of each of the n nodes for a pod of a plan group (cls[k], 0 for a node not
 * known or that does not take the pod); the highest */
static int hint_classes(const struct ex_model *m, const struct ex_pod *p, const long *idx, size_t n, int *cls) {
    int top = 0;
    bool placed = group_placed(m, plan_hash(p));
    for (size_t k = 0; k < n; k++) {
        struct pl_pod q;
        char why[EX_REASON_MAX];
        cls[k] = 0;
        if (idx[k] >= 0 && ex_pod_on_node(m, (size_t)idx[k], p, &q, why, sizeof(why)) == 0)
            hint_gpu(m, (size_t)idx[k], p, &q, placed, &cls[k]);
        top = cls[k] > top ? cls[k] : top;
    }
    return top;
}

void ex_prioritize(struct ex_model *m, const struct ex_pod *p, const char *const *nodes, size_t n, int64_t *scores) {
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    long *idx = malloc((n ? n : 1) * sizeof(*idx));
    size_t *rep = malloc((n ? n : 1) * sizeof(*rep));
    int *cls = p->plan_gpu[0] ? malloc((n ? n : 1) * sizeof(*cls)) : NULL;
    for (size_t k = 0; idx && k < n; k++)
        idx[k] = ex_model_find(m, nodes[k]);
    int top_cls = cls && idx ? hint_classes(m, p, idx, n, cls) : 0;
    bool grouped = idx && rep && score_groups(m, p, idx, top_cls ? cls : NULL, n, rep);
    /* raw scores first (INT64_MIN: no fit), once per group of nodes in the same state, then mapped
     * onto 1..10 */
    for (size_t k = 0; k < n; k++) {
        long i = idx ? idx[k] : ex_model_find(m, nodes[k]);
        int64_t s;
        if (grouped && rep[k] != k) {
            scores[k] = scores[rep[k]];
            continue;
        }
        scores[k] = INT64_MIN;
        if (i < 0 || raw_score(m, p, (size_t)i, &s) < 0)
            continue;
        scores[k] = s;
    }
    free(idx);
    free(rep);
    for (size_t k = 0; k < n; k++)
        if (scores[k] != INT64_MIN) {
            lo = scores[k] < lo ? scores[k] : lo;
            hi = scores[k] > hi ? scores[k] : hi;
        }
    /* a pod of a plan group: the hint's class first, the raw score within it */
    if (top_cls && hi >= lo && (uint64_t)hi - (uint64_t)lo < (uint64_t)1 << 60) {
        int64_t span = hi - lo + 1;
        for (size_t k = 0; k < n; k++)
            if (scores[k] != INT64_MIN)
                scores[k] = scores[k] - lo + cls[k] * span;
        lo = INT64_MAX, hi = INT64_MIN;
        for (size_t k = 0; k < n; k++)
            if (scores[k] != INT64_MIN) {
                lo = scores[k] < lo ? scores[k] : lo;
                hi = scores[k] > hi ? scores[k] : hi;
            }
    }
    free(cls);
    /* exact ties of the best raw score (FGD's is an integer 0..100: hundreds of nodes tie) go to
     * the smallest node name, as in the FGD paper's simulator; the scheduler would pick among
     * them at random, and spreading a workload over the tied nodes fragments it (`replay`'s FGD
     * with random ties: about 90 % allocated at 100 % arrived where it reaches 95, docs/fragmentation.md) */
    size_t top = n;
    for (size_t k = 0; k < n; k++)
        if (scores[k] != INT64_MIN && scores[k] == hi && (top == n || strcmp(nodes[k], nodes[top]) < 0))
            top = k;
    /* that node alone gets 10, the others 1..9 linearly (rounded down, in double: raw scores may
     * span more than int64 products hold; the rest of the tie 9), so the scheduler's pick is the
     * engine's argmax; 0 for a node that does not fit */
    for (size_t k = 0; k < n; k++) {
        if (scores[k] == INT64_MIN)
            scores[k] = 0;
        else if (k == top)
            scores[k] = EX_MAX_PRIORITY;
        else if (scores[k] == hi)
            scores[k] = EX_MAX_PRIORITY - 1;
        else {
            double f = ((double)scores[k] - (double)lo) / ((double)hi - (double)lo); /* [0, 1) */
            int64_t v = 1 + (int64_t)(f * (EX_MAX_PRIORITY - 1));
            scores[k] = v < 1 ? 1 : v > EX_MAX_PRIORITY - 1 ? EX_MAX_PRIORITY - 1 : v;
        }
    }
}

void ex_model_note_nodes(struct ex_model *m, size_t n) {
    m->n_known = n;
}

size_t ex_model_nodes_known(const struct ex_model *m) {
    return m->n_known > m->c.n_nodes ? m->n_known : m->c.n_nodes;
}

size_t ex_model_names_max(const struct ex_model *m) {
    size_t n = ex_model_nodes_known(m);
    n = n > EX_REQ_NODES_MAX ? EX_REQ_NODES_MAX : n;
    n += n / 4 + 256;
    return n > EX_REQ_NODES_MAX ? EX_REQ_NODES_MAX : n;
}

/* the pending entry of uid (hash h), or NULL */
static struct ex_pending *pending_find(const struct ex_model *m, const char *uid, uint64_t h) {
    for (size_t k = 0; m->pend && uid[0] && k < EX_PENDING_MAX; k++)
        if (m->pend[k].hash == h && m->pend[k].uid[0] && strcmp(m->pend[k].uid, uid) == 0)
            return &m->pend[k];
    return NULL;
}

/* FGD's targets from the pods of its window that were not withdrawn */
static void fgd_targets(struct ex_model *m, struct pl_cluster *c) {
    size_t live = 0;
    for (size_t k = 0; k < m->n_obs; k++)
        live += !m->obs_dead[k];
    if (live == m->n_obs) {
        pl_set_targets(c, m->obs, NULL, m->n_obs, 95);
        return;
    }
    struct pl_pod *w = malloc((live ? live : 1) * sizeof(*w));
    if (!w)
        return; /* the previous targets stay */
    live = 0;
    for (size_t k = 0; k < m->n_obs; k++)
        if (!m->obs_dead[k])
            w[live++] = m->obs[k];
    pl_set_targets(c, w, NULL, live, 95);
    free(w);
}

/* the pending pod's observation taken back (it was never bound) */
static void withdraw(struct ex_model *m, struct ex_pending *e) {
    if (m->policy == PL_FGD) {
        if (m->obs_total - e->obs_seq <= m->n_obs) /* still in the window */
            m->obs_dead[e->obs_seq % EX_OBS_MAX] = true;
    } else {
        pl_unobserve(&m->c, &e->q);
    }
    e->live = false;
}

/* FGD's targets from the pods seen: the most frequent covering 95 % (as the replay's threshold) */
static void fgd_observe(struct ex_model *m, const struct pl_pod *q) {
    if (!m->obs && !(m->obs = calloc(EX_OBS_MAX, sizeof(*m->obs))))
        return;
    if (!m->obs_dead && !(m->obs_dead = calloc(EX_OBS_MAX, sizeof(*m->obs_dead))))
        return;
    m->obs[m->next_obs] = *q;
    m->obs_dead[m->next_obs] = false;
    m->next_obs = (m->next_obs + 1) % EX_OBS_MAX;
    m->obs_total++;
    if (m->n_obs < EX_OBS_MAX)
        m->n_obs++;
    /* refreshed when the pods seen grew by 2 % (and 8), then every 2 % of the window */
    static const size_t step = 8;
    if (m->n_obs < EX_OBS_MAX && m->n_obs < m->obs_at_targets + m->obs_at_targets / 50 + step)
        return;
    if (m->n_obs == EX_OBS_MAX && (m->next_obs % (EX_OBS_MAX / 50)) != 0)
        return;
    fgd_targets(m, &m->c);
    m->obs_at_targets = m->n_obs;
}

/* the ring's next entry for a pod: its occupant, if never bound, is withdrawn */
static struct ex_pending *pending_next(struct ex_model *m) {
    struct ex_pending *e = &m->pend[m->next_pend];
    m->next_pend = (m->next_pend + 1) % EX_PENDING_MAX;
    if (e->live)
        withdraw(m, e);
    return e;
}

void ex_observe(struct ex_model *m, const struct ex_pod *p) {
    uint64_t h = p->uid[0] ? hash_str(p->uid) : 0;
    if ((m->policy != PL_GPUSLICE && m->policy != PL_FGD) || m->c.n_nodes == 0)
        return;
    struct ex_pending *e = pending_find(m, p->uid, h);
    if (e) { /* asked about again (the scheduler retries a pod that did not fit): kept, and moved
              * to the ring's newer half, so that a pod retried is not withdrawn */
        size_t age = (m->next_pend + EX_PENDING_MAX - (size_t)(e - m->pend)) % EX_PENDING_MAX;
        if (age == 0 || age > EX_PENDING_MAX / 2) {
            struct ex_pending keep = *e;
            memset(e, 0, sizeof(*e));
            *pending_next(m) = keep;
        }
        return;
    }
    if (!m->pend && !(m->pend = calloc(EX_PENDING_MAX, sizeof(*m->pend))))
        return; /* not observed: the estimate is an estimate */
    /* the pod's request on the first node that takes it (a memory share differs by GPU size) */
    struct pl_pod q = { .cpu = p->cpu, .mem = p->mem };
    char why[EX_REASON_MAX];
    for (size_t i = 0; i < m->c.n_nodes; i++)
        if (ex_pod_on_node(m, i, p, &q, why, sizeof(why)) == 0 && (!ex_pod_wants_gpu(p) || q.num_gpu > 0))
            break;
    e = pending_next(m);
    *e = (struct ex_pending){ .hash = h, .q = q, .obs_seq = m->obs_total, .live = true };
    snprintf(e->uid, sizeof(e->uid), "%s", p->uid);
    if (m->policy == PL_FGD) {
        if (!m->n_wl) /* a given workload stays FGD's target */
            fgd_observe(m, &q);
        else
            e->live = false;
    } else
        pl_observe(&m->c, &q);
}

const struct ex_bound *ex_find_bound(const struct ex_model *m, const char *uid) {
    for (size_t k = 0; uid[0] && k < m->n_bound; k++)
        if (strcmp(m->bound[k].uid, uid) == 0)
            return &m->bound[k];
    return NULL;
}

static bool takes_gpus(const struct pl_pod *q) {
    return q->num_gpu > 0 && q->gpu_milli > 0;
}

static int record(struct ex_model *m, const struct ex_pod *p, size_t node, const struct pl_pod *q,
                  const struct pl_choice *ch) {
    struct ex_share r;
    bool frac = frac_req(p, &r) && takes_gpus(q);
    if (m->n_bound == m->cap_bound) {
        size_t cap = m->cap_bound ? m->cap_bound * 2 : 256;
        struct ex_bound *nb = realloc(m->bound, cap * sizeof(*nb));
        if (!nb)
            return -ENOMEM;
        m->bound = nb;
        m->cap_bound = cap;
    }
    struct ex_bound *b = &m->bound[m->n_bound++];
    snprintf(b->uid, sizeof(b->uid), "%s", p->uid);
    struct ex_pending *e = pending_find(m, p->uid, p->uid[0] ? hash_str(p->uid) : 0);
    if (e) /* bound: its observation stays */
        memset(e, 0, sizeof(*e));
    b->node = node;
    b->pod = *q;
    b->choice = *ch;
    b->frac = frac;
    b->req = frac ? r : (struct ex_share){ 0 };
    b->plan = plan_hash(p);
    commit_pod(m, node, q, frac ? &r : NULL, b->plan, ch);
    return 0;
}

int ex_bind(struct ex_model *m, const struct ex_pod *p, const char *node, struct pl_choice *out, char *why,
            size_t len) {
    const struct ex_bound *b = ex_find_bound(m, p->uid);
    if (b) {
        *out = b->choice;
        return -EALREADY;
    }
    long i = ex_model_find(m, node);
    if (i < 0 && !ex_pod_wants_gpu(p)) { /* no GPU on a node of none (an extender without
                                           * managedResources binds every pod): nothing to record */
        *out = (struct pl_choice){ .node = -1 };
        return 0;
    }
    if (i < 0) {
        snprintf(why, len, "node %s: not known to the gpuslice extender", node);
        return -ENOENT;
    }
    struct pl_pod q;
    if (ex_pod_on_node(m, (size_t)i, p, &q, why, len) < 0)
        return -ENOSPC;
    struct pl_node *n = &m->c.nodes[i];
    *out = (struct pl_choice){ .node = (int)i };
    if (takes_gpus(&q)) {
        int64_t s;
        int gpu = -1;
        struct ex_share r;
        bool frac = frac_req(p, &r);
        if (score_pod(m, p, (size_t)i, &q, &s, &gpu) < 0) {
            if (frac)
                frac_reason(m, (size_t)i, &r, &q, why, len);
            else
                gpu_reason(n, &q, why, len);
            return -ENOSPC;
        }
        int cls, hint = p->plan_gpu[0] ? hint_gpu(m, (size_t)i, p, &q, group_placed(m, plan_hash(p)), &cls) : -1;
        if (hint >= 0)
            gpu = hint; /* its plan group's GPU, or an idle one */
        if (gpu >= 0) {
            out->n_gpus = 1;
            out->gpus[0] = gpu;
        } else { /* whole GPUs, or a share the policy does not place per GPU: the first that fit */
            for (int g = 0; g < n->n_gpu && out->n_gpus < q.num_gpu; g++)
                if (frac ? frac_after(m, (size_t)i, g, &r) >= 0 : n->gpu_free[g] >= q.gpu_milli)
                    out->gpus[out->n_gpus++] = g;
            if (out->n_gpus < q.num_gpu) {
                gpu_reason(n, &q, why, len);
                return -ENOSPC;
            }
        }
    }
    return record(m, p, (size_t)i, &q, out);
}

/* a pod bound elsewhere, on node: its index in *i and its request there in *q; -EALREADY (its
 * uid bound: *ch its choice), -ENOENT, -EINVAL */
static int bound_elsewhere(struct ex_model *m, const struct ex_pod *p, const char *node, long *i, struct pl_pod *q,
                           struct pl_choice *ch) {
    const struct ex_bound *b = ex_find_bound(m, p->uid);
    if (b) {
        if (ch)
            *ch = b->choice;
        return -EALREADY;
    }
    if ((*i = ex_model_find(m, node)) < 0)
        return -ENOENT;
    char why[EX_REASON_MAX];
    return ex_pod_on_node(m, (size_t)*i, p, q, why, sizeof(why)) < 0 ? -EINVAL : 0;
}

int ex_commit(struct ex_model *m, const struct ex_pod *p, const char *node, const struct pl_choice *ch) {
    long i;
    struct pl_pod q;
    int r = bound_elsewhere(m, p, node, &i, &q, NULL);
    if (r < 0)
        return r;
    const struct pl_node *n = &m->c.nodes[i];
    struct pl_choice c = *ch;
    c.node = (int)i;
    if (!takes_gpus(&q))
        c.n_gpus = 0;
    else if (c.n_gpus != q.num_gpu)
        return -EINVAL;
    struct ex_share fr;
    bool frac = frac_req(p, &fr);
    for (int k = 0; k < c.n_gpus; k++) {
        if (c.gpus[k] < 0 || c.gpus[k] >= n->n_gpu)
            return -EINVAL;
        if (frac ? frac_after(m, (size_t)i, c.gpus[k], &fr) < 0 : n->gpu_free[c.gpus[k]] < q.gpu_milli)
            return -ENOSPC;
    }
    return record(m, p, (size_t)i, &q, &c);
}

int ex_commit_best_fit(struct ex_model *m, const struct ex_pod *p, const char *node, struct pl_choice *out) {
    long i;
    struct pl_pod q;
    int r = bound_elsewhere(m, p, node, &i, &q, out);
    if (r < 0)
        return r;
    const struct pl_node *n = &m->c.nodes[i];
    *out = (struct pl_choice){ .node = (int)i };
    bool used[PL_MAX_GPUS] = { false };
    struct ex_share fr;
    bool frac = frac_req(p, &fr);
    while (takes_gpus(&q) && out->n_gpus < q.num_gpu) { /* the fullest GPU that holds it, as the node's best
                                                         * fit (a fractional pod: the fullest after it) */
        int best = -1, best_left = 0;
        for (int g = 0; g < n->n_gpu; g++) {
            int left = frac ? frac_after(m, (size_t)i, g, &fr) : n->gpu_free[g] - q.gpu_milli;
            if (!used[g] && left >= 0 && (best < 0 || left < best_left))
                best = g, best_left = left;
        }
        if (best < 0)
            return -ENOSPC;
        used[best] = true;
        out->gpus[out->n_gpus++] = best;
    }
    return ex_commit(m, p, node, out);
}

/* node i as built, then its bound pods committed again in their order */
static void reset_node(struct ex_model *m, size_t i) {
    struct pl_node *n = &m->c.nodes[i];
    for (int g = 0; g < n->n_gpu; g++)
        m->c.alloc_gpu_milli -= m->base[i].gpu_free[g] - n->gpu_free[g];
    double frag = n->frag;
    *n = m->base[i];
    n->frag = frag; /* the sum's share, which pl_commit takes out */
    const struct pl_pod none = { 0 };
    const struct pl_choice here = { .node = (int)i };
    pl_commit(&m->c, &none, &here); /* recomputes the node's cached fragmentation */
    n->n_pods = 0;
    memset(m->share[i], 0, sizeof(m->share[i]));
    memset(m->plan[i], 0, sizeof(m->plan[i]));
    for (size_t k = 0; k < m->n_bound; k++)
        if (m->bound[k].node == i)
            commit_pod(m, i, &m->bound[k].pod, m->bound[k].frac ? &m->bound[k].req : NULL, m->bound[k].plan,
                       &m->bound[k].choice);
}

int ex_release(struct ex_model *m, const char *uid) {
    const struct ex_bound *b = ex_find_bound(m, uid);
    if (!b)
        return -ENOENT;
    size_t k = (size_t)(b - m->bound), node = b->node;
    memmove(&m->bound[k], &m->bound[k + 1], (m->n_bound - k - 1) * sizeof(*m->bound));
    m->n_bound--;
    reset_node(m, node);
    return 0;
}

static bool same_models(const struct pl_cluster *a, const struct pl_cluster *b) {
    if (a->n_models != b->n_models)
        return false;
    for (int k = 0; k < a->n_models; k++)
        if (strcmp(a->models[k], b->models[k]) != 0)
            return false;
    return true;
}

#define MOVE(f)                                                                                                        \
    do {                                                                                                               \
        nm.f = m->f;                                                                                                   \
        m->f = 0;                                                                                                      \
    } while (0)

int ex_model_rebuild(struct ex_model *m, const struct ex_node_spec *nodes, size_t n, char *err, size_t errlen) {
    struct ex_model nm;
    int r = ex_model_init(&nm, m->policy, nodes, n, err, errlen);
    if (r < 0)
        return r;
    if (m->n_bound && !(nm.bound = malloc(m->n_bound * sizeof(*nm.bound)))) {
        ex_model_free(&nm);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    nm.cap_bound = m->n_bound;
    if (m->n_wl && (r = apply_workload(&nm, m->wl, m->wl_specs, m->n_wl, &nm.wl, err, errlen)) < 0) {
        ex_model_free(&nm);
        return r;
    }
    /* the policy's observations: gpuslice's estimate (its model indices must mean the same
     * models, else it starts again), FGD's workload, the pods seen */
    bool kept = same_models(&m->c, &nm.c);
    if (kept) {
        nm.c.online = m->c.online;
        m->c.online = NULL;
    }
    nm.dra = m->dra;
    MOVE(pend);
    MOVE(next_pend);
    for (size_t k = 0; !kept && m->policy != PL_FGD && nm.pend && k < EX_PENDING_MAX; k++)
        nm.pend[k].live = false; /* the estimate they were told starts again */
    MOVE(obs);
    MOVE(obs_dead);
    MOVE(n_obs);
    MOVE(next_obs);
    MOVE(obs_at_targets);
    MOVE(obs_total);
    MOVE(wl_specs);
    MOVE(n_wl);
    if (m->policy == PL_FGD && nm.n_obs && !nm.n_wl)
        fgd_targets(&nm, &nm.c);
    for (size_t k = 0; k < m->n_bound; k++) {
        const struct ex_bound *b = &m->bound[k];
        long i = ex_model_find(&nm, m->names[b->node]);
        if (i < 0)
            continue; /* its node is gone */
        const struct pl_node *nn = &nm.c.nodes[i];
        struct ex_bound *nb = &nm.bound[nm.n_bound];
        *nb = *b;
        nb->node = (size_t)i;
        nb->choice.node = (int)i;
        bool fits = true; /* CPU and memory are the scheduler's to check; the GPUs here */
        for (int g = 0; g < nb->choice.n_gpus; g++)
            fits = fits && nb->choice.gpus[g] < nn->n_gpu &&
                   (b->frac ? frac_after(&nm, (size_t)i, nb->choice.gpus[g], &b->req) >= 0
                            : nn->gpu_free[nb->choice.gpus[g]] >= b->pod.gpu_milli);
        if (!fits)
            continue; /* the node's GPUs changed under it: the pod is counted again when it is seen */
        nm.n_bound++;
        commit_pod(&nm, (size_t)i, &nb->pod, b->frac ? &b->req : NULL, b->plan, &nb->choice);
    }
    ex_model_free(m);
    *m = nm;
    return 0;
}
#undef MOVE
