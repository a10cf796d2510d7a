/* plan_bench.c: `gpuslice plan`'s alignment and packing on a generated input, single-threaded.
 *
 *   plan_bench [PODS [STEPS [SEARCH_SECONDS [GPU]]]]     (default 10000 10080 60 H200)
 *
 * Each pod: a memory peak between 15 and 47 GiB, a duty level of 1..12 % with bursts of 40..95 %
 * (one step in 400 starts one, 1..5 steps long), one sample per minute of both metrics, fed through
 * the same two passes as the CSV reader's rows. Prints the times of each phase, the plan's GPUs,
 * first-fit decreasing's and the lower bound, and the peak resident memory. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "consolidate/plan.h"
#include "consolidate/series.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t rng(uint64_t *x) {
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    return *x * 0x2545F4914F6CDD1Dull;
}

static int feed(struct cs_builder *b, size_t pods, size_t steps) {
    char key[32], err[256];
    for (size_t p = 0; p < pods; p++) {
        uint64_t x = 0x9E3779B97F4A7C15ull ^ (p * 0x100000001B3ull + 1);
        double mem = (15.0 + (double)(rng(&x) % 3200) / 100.0) * 1073741824.0;
        double level = 1.0 + (double)(rng(&x) % 1100) / 100.0;
        int len = snprintf(key, sizeof key, "pod-%05zu", p);
        unsigned burst = 0;
        double bval = 0;
        for (size_t t = 0; t < steps; t++) {
            double ts = 1.7e9 + 60.0 * (double)t;
            if (burst == 0 && rng(&x) % 400 == 0) {
                burst = 1 + (unsigned)(rng(&x) % 5);
                bval = 40.0 + (double)(rng(&x) % 5500) / 100.0;
            }
            double d = burst ? bval : level * (0.5 + (double)(rng(&x) % 100) / 100.0);
            if (burst)
                burst--;
            double m = mem * (0.9 + (double)(rng(&x) % 100) / 1000.0);
            if (cs_builder_add(b, CS_MEMORY, key, (size_t)len, ts, m, "gen", err, sizeof err) < 0 ||
                cs_builder_add(b, CS_DUTY, key, (size_t)len, ts, d, "gen", err, sizeof err) < 0) {
                fprintf(stderr, "plan_bench: %s\n", err);
                return -1;
            }
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    size_t pods = argc > 1 ? strtoul(argv[1], NULL, 10) : 10000;
    size_t steps = argc > 2 ? strtoul(argv[2], NULL, 10) : 10080;
    double search = argc > 3 ? strtod(argv[3], NULL) : 60;
    const char *gpu = argc > 4 ? argv[4] : "H200";
    char err[512];
    struct cs_targets t = { .gpus_per_node = 8, .budget = 100 };
    t.model = cs_resolve_gpu(gpu, err, sizeof err);
    if (!t.model) {
        fprintf(stderr, "plan_bench: %s\n", err);
        return 1;
    }
    double t0 = now_s();
    struct cs_builder *b;
    if (cs_builder_new(&b) < 0)
        return 1;
    if (feed(b, pods, steps) < 0 || cs_builder_grid(b, err, sizeof err) < 0 || feed(b, pods, steps) < 0) {
        fprintf(stderr, "plan_bench: %s\n", err);
        return 1;
    }
    struct cs_series in;
    if (cs_builder_finish(b, CS_FILL_LAST, CS_MISSING_ERROR, &in, err, sizeof err) < 0) {
        fprintf(stderr, "plan_bench: %s\n", err);
        return 1;
    }
    cs_builder_free(b);
    double t1 = now_s();
    struct cs_pack_opts o = { .search = search > 0, .time_limit_s = search, .now = now_s };
    struct cs_plan p;
    if (cs_plan_make(&in, &t, &o, &p, err, sizeof err) < 0) {
        fprintf(stderr, "plan_bench: %s\n", err);
        return 1;
    }
    double t2 = now_s();
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("%zu pods x %zu steps on %s: %zu GPUs (first-fit decreasing %zu, lower bound %zu: memory %zu, duty %zu), "
           "%u emptied by the search%s\n",
           in.n, in.steps, t.model->key, p.gpus, p.ffd_gpus, p.bounds.bound, p.bounds.memory, p.bounds.duty,
           p.stats.emptied, p.stats.search_complete ? " (complete)" : " (stopped by its time limit)");
    printf("align %.1f s, plan %.1f s, total %.1f s, max RSS %.0f MiB\n", t1 - t0, t2 - t1, t2 - t0,
           ru.ru_maxrss / 1024.0);
    cs_plan_free(&p);
    cs_series_free(&in);
    return 0;
}
