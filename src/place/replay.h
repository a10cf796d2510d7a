/* replay.h: the FGD paper's trace replay. Loads the Alibaba cluster-trace-gpu-v2023 CSVs (node list,
 * pod list) with validation, builds the arrival sequence exactly as the paper's simulator does
 * (name sort, Go math/rand shuffle, inflation by resampling to e.g. 130 % of GPU capacity, seeded
 * node ranks), places every pod once under a policy (failed pods are dropped, never retried; no pod
 * ever leaves) and reports the GPU allocation ratio per 1 % of arrived workload. */
#ifndef GS_REPLAY_H
#define GS_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include "place/place.h"

#define RP_MAX_PCT 400

struct rp_trace {
    struct pl_node *nodes;  /* in file order */
    char **node_names;
    size_t n_nodes;
    struct pl_pod *pods;    /* in file order */
    char **pod_names;
    char **pod_specs;       /* gpu_spec text ("" when any model) */
    size_t n_pods;
    struct pl_cluster models; /* only its model table is used */
};

/* Load a node CSV (columns sn, cpu_milli, memory_mib, gpu, model; others ignored) and a pod CSV
 * (name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec; others ignored). Load nodes first.
 * On error: -errno and a message "FILE:LINE: field 'NAME': what" in err. */
int rp_load_nodes(struct rp_trace *t, const char *path, char *err, size_t errlen);
int rp_load_pods(struct rp_trace *t, const char *path, char *err, size_t errlen);
void rp_trace_free(struct rp_trace *t);

struct rp_options {
    enum pl_policy policy;
    int64_t seed;
    double inflation;  /* 1.3: resample pods until 130 % of the cluster's GPU capacity has arrived */
    int threshold_pct; /* FGD's target workload: the most frequent specs covering this % (95) */
    int time_decisions; /* measure each decision's latency */
    int record_shares;  /* fill rp_result.shares (see there) */
    int record_events;  /* fill rp_result.events (see there) */
};

/* One pod event of the replay, in arrival order (rp_options.record_events). */
struct rp_event {
    size_t pod;             /* index into rp_trace.pods (file order) */
    int bucket;             /* the arrived workload after it, in whole % of the GPU capacity */
    struct pl_choice where; /* .node: index into rp_trace.nodes (file order), -1 when it failed */
};

struct rp_result {
    /* per whole percent of arrived GPU request (0..n_pct-1), the paper's discretisation:
     * the mean over the pod events in that bucket; NAN where there is none */
    double alloc_pct[RP_MAX_PCT + 1];
    double frag_pct[RP_MAX_PCT + 1];
    double power_kw[RP_MAX_PCT + 1]; /* the cluster's power (rp_node_power summed), kW, same buckets */
    int n_pct;
    size_t n_events, n_failed, n_failed_gpu;
    double final_alloc_pct;
    double wall_s;            /* the replay loop */
    double lat_median_us, lat_p99_us, lat_max_us;
    /* with record_shares: the milli-GPU of every GPU-sharing pod placed up to the last event of
     * the 100 % bucket (arrived < 100.5 %), in arrival order (what bench/place_bound.py packs) */
    int *shares;
    size_t n_shares;
    /* with record_events: every event, n_events of them (the pod order of `replay --dump-order`) */
    struct rp_event *events;
};

/* PWR's power model (Lettich et al., "Power- and Fragmentation-aware Online Scheduling for GPU
 * Datacenters", CCGrid'25; their simulator, a fork of the FGD one, NodeResource
 * GetEnergyConsumptionNode). Pure. A node's power in watts: each GPU with any milli-GPU taken draws
 * its model's full power, each idle GPU its idle power; the CPU side counts physical cores as half
 * the vCPUs (ceil of the capacity, floor of the free ones), packs the busy cores into the fewest
 * CPU packages of the node's CPU model, and draws full power per busy package, idle power per idle
 * one. A node with no pod draws the idle power of everything (PWR powers no node off). The node
 * list has no CPU model: the GPU model picks it as PWR's comments do (T4: Xeon 8163, P100: E5-2682
 * v4, V100: 6326, A100: 8369B; others: PWR's fallback, the 2682 profile). Unknown GPU models draw
 * PWR's G1-G3 placeholder (25 W idle, 250 W full). */
double rp_node_power(const char *model, int n_gpu, const int *gpu_free, int64_t cpu_cap, int64_t cpu_left);

/* Fills *r, which it zeroes first: release a result before running into it again. */
int rp_run(const struct rp_trace *t, const struct rp_options *o, struct rp_result *r);
/* Frees what rp_run allocated in r (the shares, the events). */
void rp_result_release(struct rp_result *r);

#endif
