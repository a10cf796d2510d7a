/* requests.c: what each pod of a plan (plan.h) asks for: the compute share each shared GPU's pods
 * split among them, and the requests written from the plan: the device plugin's fractional
 * resources (docs/fractional.md), or ResourceClaimTemplates of gpuslice's DRA driver (docs/dra.md),
 * one per distinct shape. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "consolidate/plan.h"
#include "core/plan.h"
#include "util/util.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
#define DRA_DRIVER "gpu.gpuslice.io"
#define DRA_SHARED_CLASS "shared." DRA_DRIVER
#define DRA_MIG_CLASS "mig." DRA_DRIVER

/* ------------------------------------------------------------------ the compute split */

/* A pod's cost at a share: the steps its duty is over it, then the duty units over it. */
struct cost {
    uint64_t steps, excess;
};

static bool cost_less(struct cost a, struct cost b) {
    return a.steps != b.steps ? a.steps < b.steps : a.excess < b.excess;
}

static struct cost cost_add(struct cost a, struct cost b) { return (struct cost){ a.steps + b.steps, a.excess + b.excess }; }

/* cost[c] for c = 0..100 of one pod's series: steps with duty over c % and the duty over it. */
static void pod_costs(const uint16_t *d, size_t steps, struct cost *cost) {
    uint64_t h[102] = { 0 }, s[102] = { 0 };
    for (size_t t = 0; t < steps; t++) {
        unsigned b = (d[t] + 99u) / 100u; /* d > 100 c  <=>  ceil(d / 100) > c */
        b = b > 101 ? 101 : b;
        h[b]++;
        s[b] += d[t];
    }
    uint64_t cnt = 0, sum = 0;
    for (int c = 100; c >= 0; c--) {
        cnt += h[c + 1];
        sum += s[c + 1];
        cost[c] = (struct cost){ cnt, sum - 100ull * (uint64_t)c * cnt };
    }
}

/* Splits `units` among the k pods of one GPU (units >= k): the fewest pod-steps over their share,
 * by dynamic programming over the pods and the units used; then the units no pod needs (its share
 * already at its peak) go one by one to the pod with the least share for its peak. */
static int split_gpu(struct cs_plan *p, const size_t *pods, size_t k, unsigned units) {
    const struct cs_series *in = p->in;
    size_t W = units + 1;
    _cleanup_free_ struct cost *pc = malloc(k * 101 * sizeof *pc);
    _cleanup_free_ struct cost *f = malloc((k + 1) * W * sizeof *f);
    _cleanup_free_ uint8_t *pick = malloc((k + 1) * W);
    _cleanup_free_ unsigned *top = malloc(k * sizeof *top);
    if (!pc || !f || !pick || !top)
        return -ENOMEM;
    for (size_t j = 0; j < k; j++) {
        pod_costs(in->duty + pods[j] * in->steps, in->steps, pc + j * 101);
        unsigned pk = (in->duty_peak[pods[j]] + 99u) / 100u;
        unsigned most = units - (unsigned)(k - 1);
        top[j] = pk < 1 ? 1 : pk > most ? most : pk;
    }
    /* f[j][u]: the least cost of pods 0..j-1 within u units (impossible: steps = UINT64_MAX) */
    for (size_t u = 0; u < W; u++)
        f[u] = (struct cost){ 0, 0 };
    for (size_t j = 0; j < k; j++) {
        struct cost *prev = f + j * W, *cur = f + (j + 1) * W;
        for (size_t u = 0; u < W; u++) {
            cur[u] = (struct cost){ UINT64_MAX, UINT64_MAX };
            pick[(j + 1) * W + u] = 0;
            for (unsigned c = 1; c <= top[j] && c <= u; c++) {
                if (prev[u - c].steps == UINT64_MAX)
                    continue;
                struct cost v = cost_add(prev[u - c], pc[j * 101 + c]);
                if (cost_less(v, cur[u])) {
                    cur[u] = v;
                    pick[(j + 1) * W + u] = (uint8_t)c;
                }
            }
        }
    }
    size_t u = units;
    unsigned used = 0;
    for (size_t j = k; j > 0; j--) {
        unsigned c = pick[j * W + u];
        if (c == 0)
            return -EINVAL; /* units < k: the packing keeps pods per GPU within the budget */
        p->compute[pods[j - 1]] = c;
        u -= c;
        used += c;
    }
    for (; used < units; used++) {
        size_t best = 0;
        double br = INFINITY;
        for (size_t j = 0; j < k; j++) {
            double peak = in->duty_peak[pods[j]] > 100 ? in->duty_peak[pods[j]] / 100.0 : 1.0;
            double r = p->compute[pods[j]] / peak;
            if (p->compute[pods[j]] < 100 && r < br) {
                br = r;
                best = j;
            }
        }
        if (!isfinite(br))
            break;
        p->compute[pods[best]]++;
    }
    for (size_t j = 0; j < k; j++)
        p->capped[pods[j]] = (uint32_t)pc[j * 101 + p->compute[pods[j]]].steps;
    return 0;
}

int cs_plan_split_compute(struct cs_plan *p) {
    size_t n = p->in->n;
    memset(p->compute, 0, (n ? n : 1) * sizeof *p->compute);
    memset(p->capped, 0, (n ? n : 1) * sizeof *p->capped);
    if (p->t.no_compute && p->t.requests == CS_REQ_FRACTIONAL)
        return 0;
    unsigned units = (unsigned)floor(p->t.budget + 1e-9);
    _cleanup_free_ size_t *pods = malloc((n ? n : 1) * sizeof *pods);
    _cleanup_free_ size_t *start = calloc(p->gpus + 1, sizeof *start);
    _cleanup_free_ size_t *fill = calloc(p->gpus + 1, sizeof *fill);
    if (!pods || !start || !fill)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        start[p->gpu_of[i] + 1]++;
    for (size_t g = 0; g < p->gpus; g++)
        start[g + 1] += start[g];
    memcpy(fill, start, (p->gpus + 1) * sizeof *fill);
    for (size_t i = 0; i < n; i++)
        pods[fill[p->gpu_of[i]]++] = i;
    for (size_t g = 0; g < p->gpus; g++) {
        size_t k = start[g + 1] - start[g];
        if (p->g[g].mig || k == 0)
            continue;
        if (k > units)
            return cs_errf(NULL, 0, "GPU %zu: %zu pods for %u compute units", g, k, units);
        int r = split_gpu(p, pods + start[g], k, units);
        if (r < 0)
            return r;
    }
    return 0;
}

/* ------------------------------------------------------------------ the writers */

static bool on_mig(const struct cs_plan *p, size_t pod) { return p->g[p->gpu_of[pod]].mig; }

static const char *profile_of(const struct cs_plan *p, size_t pod) {
    return p->t.model->profiles[p->profile[pod]].name;
}

void cs_plan_key_file(const char *key, char *out, size_t len) {
    snprintf(out, len, "%s.yaml", key);
    for (char *c = out; *c; c++)
        if (*c == '/' || *c == ':' || *c == '@')
            *c = '_';
    if (out[0] == '.')
        out[0] = '_';
}

void cs_plan_template_name(const struct cs_plan *p, size_t pod, char *out, size_t len) {
    if (on_mig(p, pod))
        snprintf(out, len, "gpuslice-plan-mig-%s", profile_of(p, pod));
    else
        snprintf(out, len, "gpuslice-plan-%ugi-%u", p->units[pod], p->compute[pod]);
}

/* The comment line every request file starts with. */
static void pod_comment(const struct cs_plan *p, size_t pod, FILE *f) {
    fprintf(f, "# pod %s: GPU %u of the plan (node %u); its observed peaks: %.2f GiB, %.2f %% duty\n",
            p->in->keys[pod], p->gpu_of[pod], p->gpu_of[pod] / p->t.gpus_per_node, p->in->mem_peak[pod] / GIB,
            p->in->duty_peak[pod] / 100.0);
    if (on_mig(p, pod))
        fprintf(f, "# MIG instance %s at memory slice %u (flags.migStrategy: mixed, docs/policy.md)\n",
                profile_of(p, pod), p->start[pod]);
    else if (p->compute[pod])
        fprintf(f, "# the guard caps its compute at %u %%: %.1f minutes of its series were above it\n",
                p->compute[pod], p->capped[pod] * p->in->step_s / 60.0);
}

int cs_plan_write_requests(const struct cs_plan *p, size_t pod, FILE *f) {
    pod_comment(p, pod, f);
    if (p->t.requests == CS_REQ_DRA) {
        char name[128];
        cs_plan_template_name(p, pod, name, sizeof name);
        fprintf(f,
                "# resourceClaims goes into the pod's spec, resources into its container; the template is in\n"
                "# claim-templates/%s.yaml (docs/dra.md)\n"
                "resourceClaims:\n"
                "  - name: gpu\n"
                "    resourceClaimTemplateName: %s\n"
                "resources:\n"
                "  claims:\n"
                "    - name: gpu\n",
                name, name);
    } else if (on_mig(p, pod)) {
        fprintf(f,
                "# merge into the pod's container\n"
                "resources:\n"
                "  limits:\n"
                "    nvidia.com/mig-%s: 1\n",
                profile_of(p, pod));
    } else {
        fprintf(f,
                "# merge into the pod's container (docs/fractional.md)\n"
                "resources:\n"
                "  limits:\n"
                "    " GS_FRAC_MEMORY_RESOURCE ": %u\n",
                p->units[pod]);
        if (p->compute[pod])
            fprintf(f, "    " GS_FRAC_COMPUTE_RESOURCE ": %u\n", p->compute[pod]);
    }
    return ferror(f) ? -EIO : 0;
}

int cs_plan_write_claim_template(const struct cs_plan *p, size_t pod, FILE *f) {
    char name[128];
    cs_plan_template_name(p, pod, name, sizeof name);
    fprintf(f,
            "# gpuslice plan: a ResourceClaimTemplate of gpuslice's DRA driver for the plan's pods of this shape\n"
            "# (the chart's DeviceClasses with dra.enabled; docs/dra.md). Apply in the pods' namespace.\n"
            "apiVersion: resource.k8s.io/v1\n"
            "kind: ResourceClaimTemplate\n"
            "metadata:\n"
            "  name: %s\n"
            "spec:\n"
            "  spec:\n"
            "    devices:\n"
            "      requests:\n"
            "        - name: gpu\n"
            "          exactly:\n"
            "            deviceClassName: %s\n"
            "            selectors:\n"
            "              - cel:\n",
            name, on_mig(p, pod) ? DRA_MIG_CLASS : DRA_SHARED_CLASS);
    if (on_mig(p, pod)) {
        fprintf(f,
                "                  expression: >-\n"
                "                    device.attributes[\"" DRA_DRIVER "\"].productName.startsWith(\"%s\") &&\n"
                "                    device.attributes[\"" DRA_DRIVER "\"].profile == \"%s\"\n",
                p->t.model->nvml_name, profile_of(p, pod));
        return ferror(f) ? -EIO : 0;
    }
    fprintf(f,
            "                  expression: device.attributes[\"" DRA_DRIVER "\"].productName.startsWith(\"%s\")\n"
            "            capacity:\n"
            "              requests:\n"
            "                memory: %uGi\n"
            "                compute: \"%u\"\n"
            "      config:\n"
            "        - requests: [gpu]\n"
            "          opaque:\n"
            "            driver: " DRA_DRIVER "\n"
            "            parameters:\n"
            "              apiVersion: gpuslice.io/v1alpha1\n"
            "              kind: GpuConfig\n"
            "              sharing:\n"
            "                strategy: TimeSlicing\n",
            p->t.model->nvml_name, p->units[pod], p->compute[pod]);
    return ferror(f) ? -EIO : 0;
}
