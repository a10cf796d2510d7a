/* mig_bench.c: MIG planner benchmarks.
 *   1. Solver time for every layout of up to 7 instances of every MIG model (empty GPU), and for
 *      random transitions with instances to keep.
 *   2. NVML create/destroy calls of gpuslice's minimal apply over a sequence of layout transitions
 *      on the simulated node, against mig-parted's clear-all-and-recreate (every compute and GPU
 *      instance destroyed, then every one of the target created).
 * usage: build/bench/mig_bench [SIM_LIB]   (prints markdown) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "catalog/catalog.h"
#include "core/mig.h"
#include "mig/migapply.h"
#include "util/util.h"

static void gpu_from_model(const struct gs_model *m, struct gs_gpu *g) { gs_mig_gpu_from_model(m, g); }

static double *times;
static size_t n_times, cap_times;

static void timed_solve(const struct gs_gpu *g, const struct gs_mig_layout *l) {
    struct gs_mig_solution s;
    char why[256];
    uint64_t t0 = gs_now_ns();
    gs_mig_solve(g, l, &s, why, sizeof(why));
    uint64_t t1 = gs_now_ns();
    if (n_times == cap_times) {
        cap_times = cap_times ? cap_times * 2 : 4096;
        times = realloc(times, cap_times * sizeof(*times));
    }
    times[n_times++] = (double)(t1 - t0) / 1000.0;
}

static void enumerate(const struct gs_gpu *g, struct gs_mig_layout *l, unsigned from) {
    if (l->n)
        timed_solve(g, l);
    if (l->n == 7)
        return;
    for (unsigned i = from; i < g->n_profiles; i++) {
        l->profile_ids[l->n++] = g->profiles[i].id;
        enumerate(g, l, i);
        l->n--;
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double p) { return times[(size_t)(p / 100.0 * (double)(n_times - 1) + 0.5)]; }

int main(int argc, char **argv) {
    struct gs_gpu *g = calloc(1, sizeof(*g));
    uint64_t t0 = gs_now_ns();
    for (size_t i = 0; i < gs_catalog_count(); i++) {
        const struct gs_model *m = gs_catalog_get(i);
        if (!m->mig_mem_slices)
            continue;
        gpu_from_model(m, g);
        struct gs_mig_layout l = { true, 0, { 0 } };
        enumerate(g, &l, 0);
    }
    double total_ms = (double)(gs_now_ns() - t0) / 1e6;
    qsort(times, n_times, sizeof(double), cmp_double);
    printf("| solver, empty GPU | value |\n|---|---|\n");
    printf("| layouts (every multiset of 1..7 profiles, 7 MIG models) | %zu |\n", n_times);
    printf("| total | %.1f ms |\n| median | %.2f us |\n| p99 | %.2f us |\n| max | %.2f us |\n", total_ms, pct(50),
           pct(99), times[n_times - 1]);

    /* Transitions with instances to keep: random valid layouts on an H100, solved from the previous. */
    n_times = 0;
    gpu_from_model(gs_catalog_find("H100-SXM5-80GB"), g);
    unsigned seed = 7;
    for (int i = 0; i < 20000; i++) {
        struct gs_mig_layout l = { true, 0, { 0 } };
        for (unsigned k = 0, n = 1 + (seed = seed * 1103515245u + 12345u) % 7; k < n; k++)
            l.profile_ids[l.n++] = g->profiles[(seed = seed * 1103515245u + 12345u) % g->n_profiles].id;
        struct gs_mig_solution s;
        char why[256];
        uint64_t a = gs_now_ns();
        int r = gs_mig_solve(g, &l, &s, why, sizeof(why));
        uint64_t b = gs_now_ns();
        if (r < 0)
            continue;
        if (n_times == cap_times) {
            cap_times *= 2;
            times = realloc(times, cap_times * sizeof(*times));
        }
        times[n_times++] = (double)(b - a) / 1000.0;
        g->n_gis = 0;
        for (unsigned k = 0; k < s.n; k++)
            g->gis[g->n_gis++] = (struct gs_gpu_instance){ k + 1, s.inst[k].profile_id, s.inst[k].start, s.inst[k].size, 1 };
    }
    qsort(times, n_times, sizeof(double), cmp_double);
    printf("\n| solver, H100 with existing instances (random valid transitions) | value |\n|---|---|\n");
    printf("| transitions | %zu |\n| median | %.2f us |\n| p99 | %.2f us |\n| max | %.2f us |\n", n_times, pct(50),
           pct(99), times[n_times - 1]);

    /* NVML calls on the simulated node: minimal apply vs clear-all-and-recreate. */
    const char *sim = argc > 1 ? argv[1] : "build/sim/libgpuslice-nvml-sim.so";
    char dir[] = "/tmp/gs-migbench-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char node_path[128], state[128];
    snprintf(node_path, sizeof(node_path), "%s/node.yaml", dir);
    snprintf(state, sizeof(state), "%s/state", dir);
    FILE *f = fopen(node_path, "w");
    fputs("gpus:\n  - model: H100-SXM5-80GB\n    mig: enabled\n  - model: A100-SXM4-40GB\n    mig: enabled\n", f);
    fclose(f);
    setenv("GPUSLICE_SIM_NODE", node_path, 1);
    setenv("GPUSLICE_SIM_STATE", state, 1);
    struct gpu_node *node;
    char err[512];
    if (gpu_node_open(sim, &node, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    static const char *const seq[] = { "all-balanced", "all-1g.10gb", "all-balanced", "all-3g.40gb", "all-balanced",
                                       "all-1g.20gb", "all-2g.20gb", "all-balanced", "all-7g.80gb", "all-balanced" };
    static const char *const seq_a100[] = { "all-balanced", "all-1g.5gb", "all-balanced", "all-3g.20gb", "all-balanced",
                                            "all-1g.10gb", "all-2g.10gb", "all-balanced", "all-7g.40gb", "all-balanced" };
    printf("\n| transition (H100 GPU 0 / A100-40GB GPU 1) | gpuslice calls | clear-all-and-recreate calls | instances kept |\n|---|---|---|---|\n");
    unsigned sum_min = 0, sum_clear = 0;
    struct gs_inventory *inv = malloc(sizeof(*inv));
    for (size_t i = 0; i < GS_ARRAY_SIZE(seq); i++) {
        if (gpu_inventory_read(node, inv) < 0)
            return 1;
        unsigned before = 0;
        for (unsigned k = 0; k < inv->n_gpus; k++)
            before += inv->gpus[k].n_gis + inv->gpus[k].n_mig; /* destroys: every CI and GI */
        struct gs_mig_layout layouts[GS_MAX_GPUS];
        bool selected[GS_MAX_GPUS] = { true, true };
        if (gs_mig_builtin(&inv->gpus[0], seq[i], &layouts[0], err, sizeof(err)) < 0 ||
            gs_mig_builtin(&inv->gpus[1], seq_a100[i], &layouts[1], err, sizeof(err)) < 0) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        struct gs_mig_apply_result res;
        if (gs_mig_apply_layouts(node, layouts, selected, false, &res, err, sizeof(err)) < 0) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        unsigned clear = before + 2 * (layouts[0].n + layouts[1].n); /* + create GI and CI of each */
        sum_min += res.creates + res.destroys;
        sum_clear += clear;
        printf("| -> %s / %s | %u | %u | %u |\n", seq[i], seq_a100[i], res.creates + res.destroys, clear, res.kept);
    }
    printf("| **total** | **%u** | **%u** | |\n", sum_min, sum_clear);
    free(inv);
    gpu_node_close(node);
    char cmd[200];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        return 1;
    free(times);
    free(g);
    return 0;
}
