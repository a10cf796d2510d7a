/* replay.c (cli): `gpuslice replay`: replays a cluster trace (the FGD paper's Alibaba GPU traces)
 * under a placement policy and reports the GPU allocation ratio per 1 % of arrived workload. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "place/replay.h"

static void usage(FILE *f) {
    fprintf(f,
            "Usage: gpuslice replay --nodes NODES.csv --pods PODS.csv --policy NAME --seed N\n"
            "                       [--inflation 1.3] [--out FILE.csv] [--timing] [--placed-shares FILE]\n"
            "                       [--dump-order FILE.csv]\n\n"
            "Replays a cluster trace as the FGD paper (USENIX ATC'23) does: every pod arrives once, in a\n"
            "seeded shuffle, resampled until INFLATION x the cluster's GPU capacity has arrived; a pod that\n"
            "fits nowhere is dropped. Prints the GPU allocation ratio at 100 %% arrived workload.\n\n"
            "  --nodes FILE       node list (sn,cpu_milli,memory_mib,gpu,model)\n"
            "  --pods FILE        pod list (name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,...)\n"
            "  --policy NAME      random, dotprod, gpuclustering, gpupacking, bestfit, fgd, gpuslice\n"
            "  --seed N           the seed (the paper uses 42..51)\n"
            "  --inflation X      arrived workload at the end, x GPU capacity (default 1.3)\n"
            "  --out FILE         write arrived_pct,gpu_alloc_pct,frag_pct,power_kw, one row per 1 %%\n"
            "  --timing           also measure each decision (median, p99, max) and the replay time\n"
            "  --placed-shares FILE  write the milli-GPU of each GPU-sharing pod placed up to the end of\n"
            "                     the 100 %% bucket, one per line (input of bench/place_bound.py)\n"
            "  --dump-order FILE  write every pod event in arrival order: seq,pod,bucket,node,gpus (the pod's\n"
            "                     name, the arrived %% after it, the node and GPUs it took, empty when it\n"
            "                     failed; bench/kwok_replay.py replays this order through kube-scheduler)\n");
}

static void write_curve(FILE *f, const struct rp_result *r) {
    fprintf(f, "arrived_pct,gpu_alloc_pct,frag_pct,power_kw\n");
    for (int x = 0; x < r->n_pct; x++) {
        if (isnan(r->alloc_pct[x]))
            fprintf(f, "%d,,,\n", x);
        else
            fprintf(f, "%d,%.2f,%.2f,%.2f\n", x, r->alloc_pct[x], r->frag_pct[x], r->power_kw[x]);
    }
}

static void write_shares(FILE *f, const struct rp_result *r) {
    for (size_t i = 0; i < r->n_shares; i++)
        fprintf(f, "%d\n", r->shares[i]);
}

static const struct rp_trace *order_trace; /* write_output's writers take the result only */

static void write_order(FILE *f, const struct rp_result *r) {
    const struct rp_trace *t = order_trace;
    fprintf(f, "seq,pod,bucket,node,gpus\n");
    for (size_t k = 0; k < r->n_events; k++) {
        const struct rp_event *e = &r->events[k];
        fprintf(f, "%zu,%s,%d,%s,", k, t->pod_names[e->pod], e->bucket,
                e->where.node >= 0 ? t->node_names[e->where.node] : "");
        for (int g = 0; e->where.node >= 0 && g < e->where.n_gpus; g++)
            fprintf(f, g ? "|%d" : "%d", e->where.gpus[g]);
        fputc('\n', f);
    }
}

/* Writes r with `write` to the file `name` ("-": stdout, when stdout_dash); -1 with the error
 * said, naming the file, when it cannot be opened or written. */
static int write_output(const char *name, bool stdout_dash, void (*write)(FILE *, const struct rp_result *),
                        const struct rp_result *r) {
    FILE *f = stdout_dash && strcmp(name, "-") == 0 ? stdout : fopen(name, "w");
    if (!f) {
        fprintf(stderr, "gpuslice replay: %s: %s\n", name, strerror(errno));
        return -1;
    }
    write(f, r);
    bool bad = ferror(f) != 0;
    if ((f != stdout && fclose(f) != 0) || bad) {
        fprintf(stderr, "gpuslice replay: %s: %s\n", name, strerror(errno));
        return -1;
    }
    return 0;
}

/* Why the allocation at 100 % arrived workload has no figure (printed as alloc_at_100=none): the
 * arrived workload never got there, or no pod arrival fell in that 1 % bucket because each pod is
 * several percent of a small cluster's GPUs. */
static void explain_no_figure(const struct rp_trace *t, const struct rp_options *o, const struct rp_result *r) {
    long long gpus = 0, biggest = 0;
    for (size_t i = 0; i < t->n_nodes; i++)
        gpus += t->nodes[i].n_gpu;
    for (size_t i = 0; i < t->n_pods; i++) {
        const struct pl_pod *p = &t->pods[i];
        long long milli = p->num_gpu == 1 && p->gpu_milli < 1000 ? p->gpu_milli : 1000LL * p->num_gpu;
        if (milli > biggest)
            biggest = milli;
    }
    if (r->n_pct <= 100) {
        fprintf(stderr, "gpuslice replay: no figure at 100 %% arrived workload: the arrivals reached only %d %% of the "
                        "cluster's GPU capacity (--inflation %.2f)\n", r->n_pct - 1, o->inflation);
        return;
    }
    int below = 100;
    while (below > 0 && isnan(r->alloc_pct[below]))
        below--;
    fprintf(stderr, "gpuslice replay: no figure at 100 %% arrived workload: no pod arrived within that 1 %% bucket "
                    "(the cluster has %lld GPUs, so one pod adds up to %.1f %% of its capacity; the nearest figure "
                    "below is %.2f at %d %%); the paper's figure needs a cluster of hundreds of GPUs\n",
            gpus, gpus ? 100.0 * (double)biggest / (1000.0 * (double)gpus) : 0.0,
            below > 0 ? r->alloc_pct[below] : 0.0, below);
}

int cmd_replay(const struct cli *cli, int argc, char **argv) {
    (void)cli;
    enum { OPT_NODES = 256, OPT_PODS, OPT_POLICY, OPT_SEED, OPT_INFL, OPT_OUT, OPT_TIMING, OPT_SHARES, OPT_ORDER };
    static const struct option opts[] = {
        { "nodes", required_argument, NULL, OPT_NODES },
        { "pods", required_argument, NULL, OPT_PODS },
        { "policy", required_argument, NULL, OPT_POLICY },
        { "seed", required_argument, NULL, OPT_SEED },
        { "inflation", required_argument, NULL, OPT_INFL },
        { "out", required_argument, NULL, OPT_OUT },
        { "timing", no_argument, NULL, OPT_TIMING },
        { "placed-shares", required_argument, NULL, OPT_SHARES },
        { "dump-order", required_argument, NULL, OPT_ORDER },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    const char *nodes = NULL, *pods = NULL, *out = NULL, *policy = NULL, *shares = NULL, *order = NULL;
    struct rp_options o = { PL_FGD, 42, 1.3, 95, 0 };
    int have_seed = 0, c;
    char *end;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_NODES: nodes = optarg; break;
        case OPT_PODS: pods = optarg; break;
        case OPT_OUT: out = optarg; break;
        case OPT_TIMING: o.time_decisions = 1; break;
        case OPT_SHARES:
            shares = optarg;
            o.record_shares = 1;
            break;
        case OPT_ORDER:
            order = optarg;
            o.record_events = 1;
            break;
        case OPT_POLICY:
            policy = optarg;
            if (pl_policy_from_name(optarg, &o.policy) < 0) {
                fprintf(stderr, "gpuslice replay: --policy: unknown policy '%s' (random, dotprod, gpuclustering, "
                                "gpupacking, bestfit, fgd, gpuslice)\n", optarg);
                return GS_EXIT_USAGE;
            }
            break;
        case OPT_SEED:
            errno = 0;
            o.seed = strtoll(optarg, &end, 10);
            if (errno || *end || !*optarg) {
                return cli_usage_error("replay", "--seed: '%s' is not an integer", optarg);
            }
            have_seed = 1;
            break;
        case OPT_INFL:
            errno = 0;
            o.inflation = strtod(optarg, &end);
            if (errno || *end || !*optarg || !(o.inflation > 0 && o.inflation <= 3.5)) {
                return cli_usage_error("replay", "--inflation: '%s' is not a number in (0, 3.5]", optarg);
            }
            break;
        case 'h': usage(stdout); return GS_EXIT_OK;
        default: return GS_EXIT_USAGE;
        }
    }
    if (cli_no_more_args("replay", argc, argv, optind) != GS_EXIT_OK)
        return GS_EXIT_USAGE;
    if (!nodes || !pods || !policy || !have_seed) {
        return cli_usage_error("replay", "--nodes, --pods, --policy and --seed are required (see --help)");
    }
    struct rp_trace t = { 0 };
    char err[512];
    if (rp_load_nodes(&t, nodes, err, sizeof(err)) < 0 || rp_load_pods(&t, pods, err, sizeof(err)) < 0) {
        fprintf(stderr, "gpuslice replay: %s\n", err);
        rp_trace_free(&t);
        return GS_EXIT_FAILURE;
    }
    struct rp_result *r = malloc(sizeof(*r));
    if (!r || rp_run(&t, &o, r) < 0) {
        fprintf(stderr, "gpuslice replay: out of memory\n");
        free(r);
        rp_trace_free(&t);
        return GS_EXIT_FAILURE;
    }
    int rc = GS_EXIT_OK;
    if (out && write_output(out, true, write_curve, r) < 0)
        rc = GS_EXIT_FAILURE;
    if (shares && write_output(shares, false, write_shares, r) < 0)
        rc = GS_EXIT_FAILURE;
    order_trace = &t;
    if (order && write_output(order, false, write_order, r) < 0)
        rc = GS_EXIT_FAILURE;
    FILE *sf = out && strcmp(out, "-") == 0 ? stderr : stdout;
    char at100[32] = "none", pw100[32] = "none";
    if (r->n_pct > 100 && !isnan(r->alloc_pct[100])) {
        snprintf(at100, sizeof(at100), "%.2f", r->alloc_pct[100]);
        snprintf(pw100, sizeof(pw100), "%.2f", r->power_kw[100]);
    } else {
        explain_no_figure(&t, &o, r);
    }
    fprintf(sf,
            "policy=%s seed=%lld nodes=%zu pods=%zu events=%zu failed=%zu alloc_at_100=%s alloc_final=%.2f "
            "power_at_100=%s\n",
            pl_policy_name(o.policy), (long long)o.seed, t.n_nodes, t.n_pods, r->n_events, r->n_failed, at100,
            r->final_alloc_pct, pw100);
    if (o.time_decisions)
        fprintf(sf, "replay_s=%.3f decision_us_median=%.1f decision_us_p99=%.1f decision_us_max=%.1f\n", r->wall_s,
                r->lat_median_us, r->lat_p99_us, r->lat_max_us);
    rp_result_release(r);
    free(r);
    rp_trace_free(&t);
    return rc;
}
