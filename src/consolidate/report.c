/* report.c: what `gpuslice plan` writes from a plan (plan.h): JSON, the table, the SVG picture, the
 * policy fragment and the pods' requests. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "consolidate/plan.h"
#include "util/util.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static double pct(uint32_t units) { return units / 100.0; }

static bool on_mig(const struct cs_plan *p, size_t pod) { return p->g[p->gpu_of[pod]].mig; }

static const char *profile_name(const struct cs_plan *p, size_t pod) {
    return on_mig(p, pod) ? p->t.model->profiles[p->profile[pod]].name : NULL;
}

/* Shared: its compute request (null without one); MIG: its instance's share of the compute slices. */
static json_t *compute_percent(const struct cs_plan *p, size_t pod) {
    if (on_mig(p, pod))
        return json_integer(p->t.model->profiles[p->profile[pod]].slices * 100 / p->mig_slices);
    return p->compute[pod] ? json_integer(p->compute[pod]) : json_null();
}

static double minutes(const struct cs_plan *p, uint64_t steps) { return (double)steps * p->in->step_s / 60.0; }

/* The pod's file of requests under --out. */
static json_t *requests_file(const struct cs_plan *p, size_t pod) {
    char file[300], path[320];
    cs_plan_key_file(p->in->keys[pod], file, sizeof file);
    snprintf(path, sizeof path, "requests/%s", file);
    return json_string(path);
}

/* The pod's requests as the files under --out say them: the resources of its container, or with DRA
 * its ResourceClaimTemplate's name. */
static json_t *requests_json(const struct cs_plan *p, size_t pod) {
    json_t *r = json_object();
    if (p->t.requests == CS_REQ_DRA) {
        char name[128];
        cs_plan_template_name(p, pod, name, sizeof name);
        json_object_set_new(r, "claim_template", json_string(name));
        if (!on_mig(p, pod)) {
            char mem[32];
            snprintf(mem, sizeof mem, "%uGi", p->units[pod]);
            json_object_set_new(r, "memory", json_string(mem));
            json_object_set_new(r, "compute", json_integer(p->compute[pod]));
        }
    } else if (on_mig(p, pod)) {
        char res[96];
        snprintf(res, sizeof res, "nvidia.com/mig-%s", profile_name(p, pod));
        json_object_set_new(r, res, json_integer(1));
    } else {
        json_object_set_new(r, "gpuslice.io/gpu-memory", json_integer(p->units[pod]));
        if (p->compute[pod])
            json_object_set_new(r, "gpuslice.io/gpu-compute", json_integer(p->compute[pod]));
    }
    return r;
}

/* The over-budget steps of GPU gi with the pods busy then, as a JSON array. */
static json_t *risk_json(const struct cs_plan *p, size_t gi, const size_t *pods, size_t np) {
    json_t *a = json_array();
    const struct cs_series *in = p->in;
    const uint32_t *s = p->sum + gi * in->steps;
    for (size_t t = 0; t < in->steps && a; t++) {
        if (s[t] <= p->budget_units)
            continue;
        json_t *who = json_array();
        for (size_t k = 0; k < np; k++) {
            uint16_t d = in->duty[pods[k] * in->steps + t];
            if (d > 0)
                json_array_append_new(who, json_pack("{s:s, s:f}", "pod", in->keys[pods[k]], "duty_percent", pct(d)));
        }
        json_array_append_new(a, json_pack("{s:I, s:f, s:f, s:f, s:o}", "step", (json_int_t)t, "timestamp",
                                           in->t0 + (double)t * in->step_s, "minutes", in->step_s / 60.0,
                                           "duty_percent", pct(s[t]), "pods", who));
    }
    return a;
}

/* The pods of every GPU, in pod order: idx[start[g] .. start[g+1]). */
static int pods_by_gpu(const struct cs_plan *p, size_t **idx_out, size_t **start_out) {
    size_t n = p->in->n, G = p->gpus;
    size_t *start = calloc(G + 1, sizeof *start), *idx = malloc((n ? n : 1) * sizeof *idx);
    _cleanup_free_ size_t *fillpos = calloc(G + 1, sizeof *fillpos);
    if (!start || !idx || !fillpos) {
        free(start);
        free(idx);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        start[p->gpu_of[i] + 1]++;
    for (size_t g = 0; g < G; g++)
        start[g + 1] += start[g];
    memcpy(fillpos, start, (G + 1) * sizeof *fillpos);
    for (size_t i = 0; i < n; i++)
        idx[fillpos[p->gpu_of[i]]++] = i;
    *idx_out = idx;
    *start_out = start;
    return 0;
}

int cs_plan_write_json(const struct cs_plan *p, FILE *f) {
    const struct cs_series *in = p->in;
    _cleanup_free_ size_t *idx = NULL;
    _cleanup_free_ size_t *start = NULL;
    if (pods_by_gpu(p, &idx, &start) < 0)
        return -ENOMEM;
    json_t *root = json_object();
    json_t *asg = json_array(), *gpus = json_array(), *skipped = json_array();
    for (size_t i = 0; i < in->n; i++)
        json_array_append_new(
            asg, json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:f, s:o, s:f, s:o, s:o, s:o}", "pod", in->keys[i], "gpu",
                           (json_int_t)p->gpu_of[i], "node", (json_int_t)(p->gpu_of[i] / p->t.gpus_per_node),
                           "memory_bytes", (json_int_t)p->quota[i], "memory_peak_bytes", (json_int_t)in->mem_peak[i],
                           "memory_gib", (json_int_t)p->units[i], "duty_peak_percent", pct(in->duty_peak[i]),
                           "compute_percent", compute_percent(p, i), "compute_capped_minutes",
                           minutes(p, p->capped[i]), "mig_profile",
                           profile_name(p, i) ? json_string(profile_name(p, i)) : json_null(), "requests",
                           requests_json(p, i), "requests_file", requests_file(p, i)));
    for (size_t g = 0; g < p->gpus; g++) {
        json_t *pods = json_array();
        for (size_t k = start[g]; k < start[g + 1]; k++)
            json_array_append_new(pods, json_string(in->keys[idx[k]]));
        unsigned long long units = 0, compute = 0;
        json_t *layout = p->g[g].mig ? json_array() : json_null();
        for (size_t k = start[g]; k < start[g + 1]; k++) {
            units += p->units[idx[k]];
            compute += p->compute[idx[k]];
            if (p->g[g].mig)
                json_array_append_new(layout, json_pack("{s:s, s:I, s:s}", "profile", profile_name(p, idx[k]), "start",
                                                        (json_int_t)p->start[idx[k]], "pod", in->keys[idx[k]]));
        }
        json_array_append_new(
            gpus, json_pack("{s:I, s:I, s:s, s:o, s:I, s:I, s:I, s:f, s:I, s:f, s:o, s:o, s:I}", "gpu", (json_int_t)g,
                            "node", (json_int_t)(g / p->t.gpus_per_node), "mode", p->g[g].mig ? "mig" : "shared",
                            "pods", pods, "memory_bytes", (json_int_t)p->g[g].mem, "memory_gib_units",
                            (json_int_t)units, "compute_units", (json_int_t)compute, "duty_peak_percent",
                            pct(p->g[g].peak), "steps_over_budget", (json_int_t)p->g[g].over,
                            "minutes_over_budget", minutes(p, p->g[g].over), "over_budget",
                            risk_json(p, g, idx + start[g], start[g + 1] - start[g]), "mig_layout", layout,
                            "slice_steps_over", (json_int_t)p->g[g].slice_over));
    }
    for (size_t i = 0; i < in->n_skipped; i++)
        json_array_append_new(skipped, json_string(in->skipped[i]));
    size_t nodes = (p->gpus + p->t.gpus_per_node - 1) / p->t.gpus_per_node;
    json_object_set_new(root, "gpu_model", json_string(p->t.model->key));
    json_object_set_new(root, "gpu_memory_bytes", json_integer((json_int_t)p->capacity));
    json_object_set_new(root, "mode", json_string(cs_mode_name(p->t.mode)));
    json_object_set_new(root, "alternatives",
                        json_pack("{s:o, s:o}", "shared",
                                  p->shared_gpus >= 0 ? json_integer(p->shared_gpus) : json_null(), "mig",
                                  p->mig_gpus >= 0 ? json_integer(p->mig_gpus) : json_null()));
    json_object_set_new(root, "gpus_per_node", json_integer(p->t.gpus_per_node));
    json_object_set_new(root, "margin", json_real(p->t.margin));
    json_object_set_new(root, "budget_percent", json_real(p->t.budget));
    json_object_set_new(root, "tolerance", json_real(p->t.tolerance));
    json_object_set_new(root, "tolerated_steps", json_integer(p->tolerated));
    json_object_set_new(root, "tolerated_minutes", json_real(minutes(p, p->tolerated)));
    json_object_set_new(root, "requests", json_string(p->t.requests == CS_REQ_DRA ? "dra" : "fractional"));
    json_object_set_new(root, "memory_units_per_gpu", json_integer((json_int_t)p->units_capacity));
    json_object_set_new(root, "grid",
                        json_pack("{s:f, s:f, s:I, s:I, s:s}", "t0", in->t0, "step_s", in->step_s, "steps",
                                  (json_int_t)in->steps, "merged_samples", (json_int_t)in->merged, "fill",
                                  in->fill == CS_FILL_PEAK ? "peak" : "last"));
    json_object_set_new(root, "pods", json_integer((json_int_t)in->n));
    json_object_set_new(root, "gpus", json_integer((json_int_t)p->gpus));
    json_object_set_new(root, "nodes", json_integer((json_int_t)nodes));
    json_object_set_new(root, "first_fit_decreasing_gpus", json_integer((json_int_t)p->ffd_gpus));
    json_object_set_new(root, "lower_bound",
                        json_pack("{s:I, s:I, s:I, s:I, s:I}", "memory", (json_int_t)p->bounds.memory, "duty",
                                  (json_int_t)p->bounds.duty, "large_pods", (json_int_t)p->bounds.large, "pods",
                                  (json_int_t)p->bounds.pods, "bound", (json_int_t)p->bounds.bound));
    json_t *policies = json_array();
    if (cs_plan_has_mig(p)) {
        json_array_append_new(policies, json_string("mig-layouts.yaml"));
        for (size_t node = 0; node < nodes; node++) {
            char name[64];
            snprintf(name, sizeof name, "policy-node-%zu.yaml", node);
            json_array_append_new(policies, json_string(name));
        }
    } else {
        json_array_append_new(policies, json_string("policy.yaml"));
    }
    json_object_set_new(root, "files",
                        json_pack("{s:o, s:s, s:o}", "policy", policies, "requests", "requests/", "claim_templates",
                                  p->t.requests == CS_REQ_DRA ? json_string("claim-templates/") : json_null()));
    json_object_set_new(root, "gap", json_integer((json_int_t)(p->gpus - p->bounds.bound)));
    json_object_set_new(root, "search", json_pack("{s:I, s:b, s:I}", "emptied", (json_int_t)p->stats.emptied,
                                                  "complete", p->stats.search_complete, "work",
                                                  (json_int_t)p->stats.work));
    json_object_set_new(root, "assignments", asg);
    json_object_set_new(root, "gpu_list", gpus);
    json_object_set_new(root, "skipped", skipped);
    int r = json_dumpf(root, f, JSON_INDENT(1) | JSON_REAL_PRECISION(12));
    json_decref(root);
    if (r < 0 || fputc('\n', f) == EOF)
        return -EIO;
    return 0;
}

/* The risk report of the table: per GPU over the budget its minutes over, and each run of
 * consecutive steps over it: when, how long, the summed duty's peak and the pods busy then (each
 * with its largest duty in the run). */
static void write_risk(const struct cs_plan *p, const size_t *idx, const size_t *start, FILE *f) {
    const struct cs_series *in = p->in;
    bool any = false;
    for (size_t g = 0; g < p->gpus; g++) {
        if (!p->g[g].over)
            continue;
        if (!any)
            fprintf(f, "\nrisk report: the minutes each GPU's summed duty is over the budget, and the pods busy then\n");
        any = true;
        fprintf(f, "GPU %zu: %.1f minutes over %g %% (%u steps)\n", g, minutes(p, p->g[g].over), p->t.budget,
                p->g[g].over);
        const uint32_t *s = p->sum + g * in->steps;
        for (size_t t = 0; t < in->steps; t++) {
            if (s[t] <= p->budget_units)
                continue;
            size_t e = t;
            uint32_t peak = 0;
            while (e < in->steps && s[e] > p->budget_units)
                peak = s[e] > peak ? s[e] : peak, e++;
            fprintf(f, "  at %.0f, %.1f minutes, up to %.2f %%:", in->t0 + (double)t * in->step_s, minutes(p, e - t),
                    pct(peak));
            for (size_t k = start[g]; k < start[g + 1]; k++) {
                uint16_t mx = 0;
                for (size_t u = t; u < e; u++)
                    mx = in->duty[idx[k] * in->steps + u] > mx ? in->duty[idx[k] * in->steps + u] : mx;
                if (mx)
                    fprintf(f, " %s %.2f %%", in->keys[idx[k]], pct(mx));
            }
            fputc('\n', f);
            t = e;
        }
    }
}

int cs_plan_write_table(const struct cs_plan *p, FILE *f) {
    const struct cs_series *in = p->in;
    _cleanup_free_ size_t *idx = NULL;
    _cleanup_free_ size_t *start = NULL;
    if (pods_by_gpu(p, &idx, &start) < 0)
        return -ENOMEM;
    size_t nodes = (p->gpus + p->t.gpus_per_node - 1) / p->t.gpus_per_node;
    size_t nmig = 0;
    for (size_t g = 0; g < p->gpus; g++)
        nmig += p->g[g].mig;
    fprintf(f, "%zu pods on %zu x %s (%.1f GiB) in %zu nodes of %u: %zu shared (time-slicing, VRAM quotas), %zu MIG\n",
            in->n, p->gpus, p->t.model->key, p->capacity / GIB, nodes, p->t.gpus_per_node, p->gpus - nmig, nmig);
    if (p->t.mode != CS_MODE_SHARED)
        fprintf(f, "mode %s: all shared %ld GPUs, all MIG %ld GPUs (-1: not possible)\n", cs_mode_name(p->t.mode),
                p->shared_gpus, p->mig_gpus);
    char share[48] = "";
    if (!(p->t.tolerance_s > 0))
        snprintf(share, sizeof share, "%g %% of the window, ", p->t.tolerance * 100);
    fprintf(f,
            "targets: quota = peak + %g %%, duty budget %g %% per GPU, over it tolerated %s%.1f minutes: %u whole "
            "steps of %g s (%.1f minutes) a GPU; %s requests\n",
            p->t.margin * 100, p->t.budget, share, p->tolerated_s / 60.0, p->tolerated, in->step_s,
            minutes(p, p->tolerated),
            p->t.requests == CS_REQ_DRA ? "DRA" : "fractional");
    fprintf(f, "grid: %zu steps of %g s from %.0f (a step without a sample: the pod's %s)\n", in->steps, in->step_s,
            in->t0, in->fill == CS_FILL_PEAK ? "peak" : "last value");
    fprintf(f, "lower bound %zu (memory %zu, duty %zu, pods over half a GPU %zu): gap %zu; first-fit decreasing %zu\n",
            p->bounds.bound, p->bounds.memory, p->bounds.duty, p->bounds.large, p->gpus - p->bounds.bound,
            p->ffd_gpus);
    double over_min = 0;
    size_t over_gpus = 0;
    for (size_t g = 0; g < p->gpus; g++) {
        over_min += minutes(p, p->g[g].over);
        over_gpus += p->g[g].over > 0;
    }
    fprintf(f, "over the budget: %.1f minutes on %zu GPUs (the risk report below)\n", over_min, over_gpus);
    if (in->n_skipped)
        fprintf(f, "left out: %zu pods (no series of one metric)\n", in->n_skipped);
    fprintf(f, "\n%4s %4s %6s %5s %9s %9s %8s  %s\n", "GPU", "NODE", "MODE", "PODS", "MEM GiB", "PEAK %", "MIN OVER",
            "PODS (quota GiB, compute request %; or MIG profile)");
    for (size_t g = 0; g < p->gpus; g++) {
        fprintf(f, "%4zu %4zu %6s %5zu %9.1f %9.2f %8.1f ", g, g / p->t.gpus_per_node, p->g[g].mig ? "mig" : "shared",
                p->g[g].npods, p->g[g].mem / GIB, pct(p->g[g].peak), minutes(p, p->g[g].over));
        for (size_t k = start[g]; k < start[g + 1]; k++) {
            if (p->g[g].mig)
                fprintf(f, " %s (%s)", in->keys[idx[k]], profile_name(p, idx[k]));
            else if (p->compute[idx[k]])
                fprintf(f, " %s (%.1f, %u)", in->keys[idx[k]], p->quota[idx[k]] / GIB, p->compute[idx[k]]);
            else
                fprintf(f, " %s (%.1f)", in->keys[idx[k]], p->quota[idx[k]] / GIB);
        }
        fputc('\n', f);
    }
    write_risk(p, idx, start, f);
    return ferror(f) ? -EIO : 0;
}

int cs_plan_write_svg(const struct cs_plan *p, FILE *f) {
    const struct cs_series *in = p->in;
    const unsigned cols = 4, w = 300, h = 120, pad = 28;
    size_t rows = (p->gpus + cols - 1) / cols;
    unsigned W = cols * (w + pad) + pad;
    size_t H = rows * (h + pad) + pad + 20;
    double ymax = 100.0;
    for (size_t g = 0; g < p->gpus; g++)
        if (pct(p->g[g].peak) > ymax)
            ymax = pct(p->g[g].peak);
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%u\" height=\"%zu\" font-family=\"sans-serif\" "
            "font-size=\"10\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, H);
    fprintf(f, "<text x=\"%u\" y=\"16\" font-size=\"13\">%zu pods on %zu %s: summed duty per GPU over %.1f h, budget %g %%"
               " (red)</text>\n",
            pad, in->n, p->gpus, p->t.model->key, (double)in->steps * in->step_s / 3600.0, p->t.budget);
    size_t stride = in->steps > w ? (in->steps + w - 1) / w : 1;
    for (size_t g = 0; g < p->gpus; g++) {
        unsigned x0 = pad + (unsigned)(g % cols) * (w + pad);
        size_t y0 = 20 + pad + (g / cols) * (h + pad);
        fprintf(f, "<g transform=\"translate(%u,%zu)\"><rect width=\"%u\" height=\"%u\" fill=\"none\" stroke=\"#bbb\"/>\n",
                x0, y0, w, h);
        fprintf(f, "<text x=\"2\" y=\"-3\">GPU %zu: %zu pods, peak %.0f %%, %u steps over</text>\n", g, p->g[g].npods,
                pct(p->g[g].peak), p->g[g].over);
        double by = h - p->t.budget / ymax * h;
        fprintf(f, "<line x1=\"0\" x2=\"%u\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"red\"/>\n", w, by, by);
        fprintf(f, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1\" points=\"");
        const uint32_t *s = p->sum + g * in->steps;
        for (size_t t = 0; t < in->steps; t += stride) {
            uint32_t mx = 0;
            for (size_t k = t; k < t + stride && k < in->steps; k++)
                mx = s[k] > mx ? s[k] : mx;
            double x = in->steps > 1 ? (double)t / (double)(in->steps - 1) * w : 0;
            fprintf(f, "%.1f,%.1f ", x, h - pct(mx) / ymax * h);
        }
        fprintf(f, "\"/></g>\n");
    }
    fprintf(f, "</svg>\n");
    return ferror(f) ? -EIO : 0;
}

bool cs_plan_has_mig(const struct cs_plan *p) {
    for (size_t g = 0; g < p->gpus; g++)
        if (p->g[g].mig)
            return true;
    return false;
}

int cs_plan_write_policy(const struct cs_plan *p, size_t node, FILE *f) {
    bool dra = p->t.requests == CS_REQ_DRA;
    /* under DRA every GPU of the plan's nodes goes to the DRA driver, which publishes a fractional
     * GPU with consumable memory and compute */
    const char *dra_key = dra ? "  dra:\n    gpus: all\n" : "";
    if (!cs_plan_has_mig(p)) {
        fprintf(f,
                "# gpuslice plan: the GPUs of the plan's nodes shared by %s (docs/fractional.md%s)\n"
                "version: v1\n"
                "gpuslice:\n"
                "%s"
                "  gpus:\n"
                "    - model: \"%s*\"\n"
                "      mode: fractional\n",
                dra ? "DRA claims of memory and compute" : "fractional requests", dra ? ", docs/dra.md" : "",
                dra_key, p->t.model->nvml_name);
        return ferror(f) ? -EIO : 0;
    }
    unsigned gpn = p->t.gpus_per_node;
    fprintf(f,
            "# gpuslice plan: node %zu of the plan: its MIG GPUs (mig-layouts.yaml, config plan-node-%zu) and\n"
            "# its GPUs shared by fractional requests (docs/policy.md, docs/mig.md)\n"
            "version: v1\n"
            "flags:\n"
            "  migStrategy: mixed\n"
            "gpuslice:\n"
            "%s"
            "  gpus:\n",
            node, node, dra_key);
    bool first = true;
    for (size_t g = node * gpn; g < p->gpus && g < (node + 1) * gpn; g++) {
        if (!p->g[g].mig)
            continue;
        fprintf(f, "%s%zu", first ? "    - index: \"" : ",", g - node * gpn);
        first = false;
    }
    if (!first)
        fprintf(f, "\"\n      mode: mig\n");
    fprintf(f,
            "    - model: \"%s*\"\n"
            "      mode: fractional\n"
            "  mig:\n"
            "    config: plan-node-%zu\n"
            "    layoutFile: /etc/gpuslice/mig-layouts.yaml   # where the node has the plan's mig-layouts.yaml\n",
            p->t.model->nvml_name, node);
    return ferror(f) ? -EIO : 0;
}

int cs_plan_write_mig_layouts(const struct cs_plan *p, FILE *f) {
    unsigned gpn = p->t.gpus_per_node;
    size_t nodes = (p->gpus + gpn - 1) / gpn;
    fprintf(f, "# gpuslice plan: each node's MIG layout (mig-parted's v1 format, docs/mig.md)\nversion: v1\nmig-configs:\n");
    for (size_t node = 0; node < nodes; node++) {
        fprintf(f, "  plan-node-%zu:\n", node);
        for (size_t g = node * gpn; g < p->gpus && g < (node + 1) * gpn; g++) {
            fprintf(f, "    - devices: [%zu]\n      mig-enabled: %s\n", g - node * gpn, p->g[g].mig ? "true" : "false");
            if (!p->g[g].mig)
                continue;
            fprintf(f, "      mig-devices: {");
            /* count each profile of the GPU's pods */
            const struct gs_model *m = p->t.model;
            bool any = false;
            for (size_t k = 0; k < m->n_profiles; k++) {
                unsigned c = 0;
                for (size_t pod = 0; pod < p->in->n; pod++)
                    c += p->gpu_of[pod] == g && p->profile[pod] == (int)k;
                if (c)
                    fprintf(f, "%s\"%s\": %u", any ? ", " : "", m->profiles[k].name, c);
                any = any || c;
            }
            fprintf(f, "}\n");
        }
    }
    return ferror(f) ? -EIO : 0;
}
