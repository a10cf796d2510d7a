/* series.h: the pods' GPU memory and duty-cycle series of `gpuslice plan`, pure (no I/O): CSV text
 * in the layout of Alibaba's GenAI trace (`value,timestamp_anon,container_ip`, columns found by
 * their header names), or samples handed over one by one (the Prometheus source), aligned on one
 * time grid.
 *
 * The grid: its first step is the earliest timestamp of either metric, its step the median of the
 * differences between consecutive distinct timestamps (both metrics together), a sample goes to
 * the step nearest to it; two samples of one pod in one step keep the larger value. A step with no
 * sample of a pod counts as the pod's last value before it (CS_FILL_LAST; steps before its first
 * sample: its first value) or as its peak (CS_FILL_PEAK); never as zero.
 *
 * Memory is kept as each pod's peak only (its quota is fixed for the whole plan); duty as one value
 * per pod and step, in units of 1/100 of a percent of the GPU, rounded up (0..10000). */
#ifndef GS_CONSOLIDATE_SERIES_H
#define GS_CONSOLIDATE_SERIES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CS_DUTY_FULL 10000u          /* 100 % of one GPU in duty units */
#define CS_MAX_KEY 253               /* longest pod key */
#define CS_MAX_PODS 1000000u
#define CS_MAX_STEPS 1000000u
#define CS_MAX_CELLS 400000000ull    /* pods x steps: 800 MB of duty */

enum cs_metric { CS_MEMORY = 0, CS_DUTY = 1 };
enum cs_fill { CS_FILL_LAST, CS_FILL_PEAK };
enum cs_missing { CS_MISSING_ERROR, CS_MISSING_SKIP };

struct cs_builder;

/* The aligned input of the planner. */
struct cs_series {
    size_t n;                /* pods */
    size_t steps;            /* time steps */
    double t0, step_s;       /* timestamp of step 0, seconds per step */
    char **keys;             /* n pod keys, sorted */
    uint64_t *mem_peak;      /* n: observed peak memory in bytes */
    uint16_t *duty;          /* n * steps: duty units, row per pod */
    uint16_t *duty_peak;     /* n */
    uint32_t *filled;        /* n: steps filled without a sample of the pod's own */
    size_t n_skipped;        /* pods left out (CS_MISSING_SKIP) */
    char **skipped;          /* their keys and why: "KEY (no duty series)" */
    size_t merged;           /* samples that shared a step with another of the same pod */
    enum cs_fill fill;       /* how steps without a sample were filled */
};

int cs_builder_new(struct cs_builder **out);
void cs_builder_free(struct cs_builder *b);

/* Duty values in the input are percent (0..100, the trace) or ratios (0..1, Prometheus). */
void cs_builder_set_duty_scale(struct cs_builder *b, double to_percent);

/* Feeding happens in two passes over the same samples, in the same order: pass 0 learns the pods
 * and the timestamps, pass 1 (after cs_builder_grid) places the duty samples on the grid. */
int cs_builder_grid(struct cs_builder *b, char *err, size_t errlen);
unsigned cs_builder_pass(const struct cs_builder *b);

/* One sample. `where` names it in errors ("FILE:LINE"). Returns 0 or -EINVAL with err set. */
int cs_builder_add(struct cs_builder *b, enum cs_metric m, const char *key, size_t keylen, double ts, double value,
                   const char *where, char *err, size_t errlen);

/* Parses CSV text (`name` for errors) and feeds every row to the builder's current pass. The header
 * must name the columns timestamp_anon, value and container_ip (any order, other columns
 * ignored). Errors are "NAME:LINE: ..." (-EINVAL). */
int cs_csv_feed(struct cs_builder *b, enum cs_metric m, const char *name, const char *text, size_t len, char *err,
                size_t errlen);

/* After pass 1: the aligned series (owned by the caller, cs_series_free). A pod with only one of
 * the two metrics is an error naming it (CS_MISSING_ERROR) or left out and listed (SKIP). */
int cs_builder_finish(struct cs_builder *b, enum cs_fill fill, enum cs_missing missing, struct cs_series *out,
                      char *err, size_t errlen);

void cs_series_free(struct cs_series *s);

/* Formats an error message into err (when errlen > 0) and returns -EINVAL. */
int cs_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A pod key is 1..CS_MAX_KEY bytes of [A-Za-z0-9._:/@-]. */
bool cs_key_valid(const char *key, size_t len);

#endif
