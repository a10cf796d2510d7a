/* plan.c (cli): `gpuslice plan`: reads each pod's GPU memory and duty-cycle series and prints how
 * to run them on the fewest GPUs of one model (src/consolidate). Everything is made in memory
 * first: an error leaves no output behind. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "consolidate/plan.h"
#include "consolidate/prom.h"
#include "consolidate/series.h"
#include "util/util.h"

#define CMD "plan"
#define MAX_CSV (16ull << 30)

static void usage(FILE *f) {
    fprintf(f,
            "Usage: gpuslice plan --memory-csv FILE --duty-csv FILE --gpu MODEL [OPTIONS]\n"
            "       gpuslice plan --prometheus URL [--window 7d] --gpu MODEL [OPTIONS]\n\n"
            "Plans how to run pods on the fewest GPUs of one model, each GPU shared by time-slicing with a\n"
            "VRAM quota per pod (docs/plan.md): every pod's quota is its observed memory peak (plus the\n"
            "margin), and the pods of one GPU keep their summed duty cycle within the budget at every time\n"
            "step but the tolerated share of steps.\n\n"
            "  --memory-csv FILE   memory in use per pod, bytes (columns timestamp_anon, value, container_ip)\n"
            "  --duty-csv FILE     duty cycle per pod, percent (the same columns)\n"
            "  --duty-ratio        the duty values are ratios (0..1), not percent\n"
            "  --prometheus URL    range queries on gpuslice's metrics instead: per pod (namespace/pod)\n"
            "                      gpuslice_guard_memory_used_bytes and gpuslice_pod_gpu_utilization_ratio\n"
            "  --window D          how far back (default 7d; 90m, 24h, 3600s)\n"
            "  --step D            the queries' step (default 60s)\n"
            "  --end T             the window's end, Unix seconds (default now)\n"
            "  --timeout S         each query's time limit in seconds (default 30)\n"
            "  --gpu MODEL         a catalogue model (H200-SXM-141GB, ...) or a short form (H200, H100-80GB)\n"
            "  --gpus-per-node N   GPUs per node (default 8)\n"
            "  --margin PCT        memory quota over each pod's peak, percent (default 0)\n"
            "  --budget PCT        summed duty allowed per GPU and step, percent (default 100)\n"
            "  --tolerance PCT|D   share of the window's minutes a GPU may exceed the budget, percent\n"
            "                      (default 0), or a length of time (14m, 1h)\n"
            "  --round-gib         quotas rounded up to whole GiB while packing (the fractional requests' unit)\n"
            "  --fill last|peak    a step without a sample of a pod: its last value (default) or its peak\n"
            "  --missing error|skip  a pod with only one of the two series: an error (default) or left out\n"
            "  --mode M            shared (default): time-slicing with VRAM quotas; mig: a MIG instance per\n"
            "                      pod; auto: the shared plan with each GPU in MIG mode where its pods\n"
            "                      form a layout, or the all-MIG plan when it needs fewer GPUs\n"
            "  --requests K        fractional (default): gpuslice.io/gpu-memory and gpu-compute per pod;\n"
            "                      dra: a ResourceClaimTemplate per shape (shared.gpu.gpuslice.io)\n"
            "  --compute split|none  each shared GPU's budget split into the pods' compute requests\n"
            "                      (default), or fractional requests of memory only (no compute cap)\n"
            "  --time-limit S      bound of the local search in seconds (default 20; 0: first-fit only)\n"
            "  --json              the plan as JSON on stdout instead of the table\n"
            "  --svg FILE          write the picture of each GPU's summed duty against the budget\n"
            "  --out DIR           write plan.json, plan.txt, duty.svg, policy.yaml (with MIG GPUs:\n"
            "                      policy-node-N.yaml and mig-layouts.yaml), requests/POD.yaml and\n"
            "                      with --requests dra claim-templates/NAME.yaml\n"
            "                      into DIR, which must not exist (made complete, then renamed into place)\n");
}

static int parse_percent(const char *opt, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end != s && *end == '%')
        end++;
    if (end == s || *end || errno || !isfinite(v) || v < lo || v > hi)
        return cli_usage_error(CMD, "%s: '%s' is not a percent in [%g, %g]", opt, s, lo, hi);
    *out = v;
    return GS_EXIT_OK;
}

/* A two-way option: *second is whether arg names b; neither is a usage error. */
static int choose(const char *opt, const char *arg, const char *a, const char *b, bool *second) {
    if (strcmp(arg, a) != 0 && strcmp(arg, b) != 0)
        return cli_usage_error(CMD, "--%s: '%s' is not %s or %s", opt, arg, a, b);
    *second = strcmp(arg, b) == 0;
    return GS_EXIT_OK;
}

/* One source's text, CSV or a Prometheus answer, fed to the builder's current pass. */
static int feed_source(struct cs_builder *b, enum cs_metric m, const char *prom, const char *path, const char *text,
                       size_t len) {
    char err[512];
    int r = prom ? cs_prom_feed(b, m, m == CS_MEMORY ? "memory query" : "utilization query", text, len, err, sizeof err)
                 : cs_csv_feed(b, m, path, text, len, err, sizeof err);
    if (r < 0) {
        fprintf(stderr, "gpuslice plan: %s\n", err);
        return GS_EXIT_FAILURE;
    }
    return GS_EXIT_OK;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Renders a writer into a memory buffer. */
static int render(int (*w)(const struct cs_plan *, FILE *), const struct cs_plan *p, char **buf, size_t *len) {
    FILE *f = open_memstream(buf, len);
    if (!f)
        return -errno;
    int r = w(p, f);
    if (fclose(f) != 0 && r == 0)
        r = -EIO;
    return r;
}

static int write_whole(const char *path, const char *buf, size_t len) {
    FILE *f = fopen(path, "wx");
    if (!f)
        return -errno;
    size_t n = fwrite(buf, 1, len, f);
    int r = (n == len) ? 0 : -EIO;
    if (fclose(f) != 0 && r == 0)
        r = -EIO;
    return r;
}

static int write_rendered(const char *path, int (*w)(const struct cs_plan *, FILE *), const struct cs_plan *p) {
    _cleanup_free_ char *buf = NULL;
    size_t len = 0;
    int r = render(w, p, &buf, &len);
    return r < 0 ? r : write_whole(path, buf, len);
}

static int write_policy(const char *path, const struct cs_plan *p, size_t node) {
    FILE *f = fopen(path, "wx");
    if (!f)
        return -errno;
    int r = cs_plan_write_policy(p, node, f);
    if (fclose(f) != 0 && r == 0)
        r = -EIO;
    return r;
}

static int write_out_dir(const char *dir, const struct cs_plan *p) {
    struct stat st;
    if (lstat(dir, &st) == 0) {
        fprintf(stderr, "gpuslice plan: --out %s: exists; give a directory that does not\n", dir);
        return GS_EXIT_FAILURE;
    }
    char tmp[4096], path[4500];
    if (snprintf(tmp, sizeof tmp, "%s.partial-%d", dir, (int)getpid()) >= (int)sizeof tmp) {
        fprintf(stderr, "gpuslice plan: --out %s: path too long\n", dir);
        return GS_EXIT_FAILURE;
    }
    int r = mkdir(tmp, 0755);
    const char *what = tmp;
    static const struct {
        const char *name;
        int (*w)(const struct cs_plan *, FILE *);
    } files[] = {
        { "plan.json", cs_plan_write_json },
        { "plan.txt", cs_plan_write_table },
        { "duty.svg", cs_plan_write_svg },
    };
    for (size_t i = 0; r == 0 && i < GS_ARRAY_SIZE(files); i++) {
        snprintf(path, sizeof path, "%s/%s", tmp, files[i].name);
        what = files[i].name;
        r = write_rendered(path, files[i].w, p);
    }
    if (r == 0 && cs_plan_has_mig(p)) {
        what = "mig-layouts.yaml";
        snprintf(path, sizeof path, "%s/mig-layouts.yaml", tmp);
        r = write_rendered(path, cs_plan_write_mig_layouts, p);
        size_t nodes = (p->gpus + p->t.gpus_per_node - 1) / p->t.gpus_per_node;
        for (size_t node = 0; r == 0 && node < nodes; node++) {
            snprintf(path, sizeof path, "%s/policy-node-%zu.yaml", tmp, node);
            what = path;
            r = write_policy(path, p, node);
        }
    } else if (r == 0) {
        what = "policy.yaml";
        snprintf(path, sizeof path, "%s/policy.yaml", tmp);
        r = write_policy(path, p, 0);
    }
    if (r == 0 && p->t.requests == CS_REQ_DRA) {
        what = "claim-templates";
        snprintf(path, sizeof path, "%s/claim-templates", tmp);
        r = mkdir(path, 0755) < 0 ? -errno : 0;
    }
    /* one template per shape: the first pod of a shape writes it */
    for (size_t i = 0; r == 0 && p->t.requests == CS_REQ_DRA && i < p->in->n; i++) {
        char name[128];
        cs_plan_template_name(p, i, name, sizeof name);
        snprintf(path, sizeof path, "%s/claim-templates/%s.yaml", tmp, name);
        what = path;
        FILE *f = fopen(path, "wx");
        if (!f) {
            r = errno == EEXIST ? 0 : -errno;
            continue;
        }
        r = cs_plan_write_claim_template(p, i, f);
        if (fclose(f) != 0 && r == 0)
            r = -EIO;
    }
    if (r == 0) {
        snprintf(path, sizeof path, "%s/requests", tmp);
        what = "requests";
        r = mkdir(path, 0755) < 0 ? -errno : 0;
    }
    for (size_t i = 0; r == 0 && i < p->in->n; i++) {
        char name[300];
        cs_plan_key_file(p->in->keys[i], name, sizeof name);
        snprintf(path, sizeof path, "%s/requests/%s", tmp, name);
        what = path;
        FILE *f = fopen(path, "wx");
        if (!f) {
            r = -errno;
            break;
        }
        r = cs_plan_write_requests(p, i, f);
        if (fclose(f) != 0 && r == 0)
            r = -EIO;
    }
    if (r == 0 && rename(tmp, dir) < 0) {
        r = -errno;
        what = dir;
    }
    if (r < 0) {
        fprintf(stderr, "gpuslice plan: --out %s: %s: %s\n", dir, what, strerror(-r));
        gs_remove_tree(tmp);
        return GS_EXIT_FAILURE;
    }
    return GS_EXIT_OK;
}

int cmd_plan(const struct cli *cli, int argc, char **argv) {
    (void)cli;
    enum {
        O_MEM = 256, O_DUTY, O_RATIO, O_GPU, O_GPN, O_MARGIN, O_BUDGET, O_TOL, O_ROUND, O_MODE,
        O_TIME, O_JSON, O_SVG, O_OUT, O_PROM, O_WINDOW, O_STEP, O_END, O_TIMEOUT,
        O_REQUESTS, O_COMPUTE, O_FILL, O_MISSING, /* in the order of the two-way options' table */
    };
    static const struct option opts[] = {
        { "memory-csv", required_argument, NULL, O_MEM }, { "duty-csv", required_argument, NULL, O_DUTY },
        { "duty-ratio", no_argument, NULL, O_RATIO },      { "gpu", required_argument, NULL, O_GPU },
        { "gpus-per-node", required_argument, NULL, O_GPN }, { "margin", required_argument, NULL, O_MARGIN },
        { "budget", required_argument, NULL, O_BUDGET },  { "tolerance", required_argument, NULL, O_TOL },
        { "round-gib", no_argument, NULL, O_ROUND },       { "fill", required_argument, NULL, O_FILL },
        { "missing", required_argument, NULL, O_MISSING }, { "mode", required_argument, NULL, O_MODE },
        { "time-limit", required_argument, NULL, O_TIME }, { "json", no_argument, NULL, O_JSON },
        { "svg", required_argument, NULL, O_SVG },         { "out", required_argument, NULL, O_OUT },
        { "prometheus", required_argument, NULL, O_PROM }, { "window", required_argument, NULL, O_WINDOW },
        { "step", required_argument, NULL, O_STEP },       { "end", required_argument, NULL, O_END },
        { "timeout", required_argument, NULL, O_TIMEOUT }, { "requests", required_argument, NULL, O_REQUESTS },
        { "compute", required_argument, NULL, O_COMPUTE }, { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    const char *mem_csv = NULL, *duty_csv = NULL, *gpu = NULL, *svg = NULL, *outdir = NULL, *prom = NULL;
    double window = 7 * 86400.0, step = 60, end_ts = 0, timeout = 30;
    bool ratio = false, json = false;
    struct cs_targets t = { .gpus_per_node = 8, .budget = 100 };
    enum cs_fill fill = CS_FILL_LAST;
    enum cs_missing missing = CS_MISSING_ERROR;
    double time_limit = 20, pctv;
    int c, rc;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case O_MEM: mem_csv = optarg; break;
        case O_DUTY: duty_csv = optarg; break;
        case O_RATIO: ratio = true; break;
        case O_GPU: gpu = optarg; break;
        case O_GPN: {
            unsigned long long v;
            if (gs_parse_uint(optarg, 1, 64, &v) < 0)
                return cli_usage_error(CMD, "--gpus-per-node: '%s' is not a number in 1..64", optarg);
            t.gpus_per_node = (unsigned)v;
            break;
        }
        case O_MARGIN:
            if ((rc = parse_percent("--margin", optarg, 0, 1000, &pctv)) != GS_EXIT_OK)
                return rc;
            t.margin = pctv / 100.0;
            break;
        case O_BUDGET:
            if ((rc = parse_percent("--budget", optarg, 1, 100, &t.budget)) != GS_EXIT_OK)
                return rc;
            break;
        case O_TOL: {
            /* a share of the window's minutes (percent), or a length of time (14m, 1h, 90s) */
            size_t l = strlen(optarg);
            if (l > 1 && strchr("smhd", optarg[l - 1])) {
                if (cs_parse_duration(optarg, &t.tolerance_s) < 0 || !(t.tolerance_s > 0))
                    return cli_usage_error(CMD, "--tolerance: '%s' is not a duration (14m, 1h, 90s)", optarg);
                t.tolerance = 0;
                break;
            }
            if ((rc = parse_percent("--tolerance", optarg, 0, 99, &pctv)) != GS_EXIT_OK)
                return rc;
            t.tolerance = pctv / 100.0;
            t.tolerance_s = 0;
            break;
        }
        case O_REQUESTS:
        case O_COMPUTE:
        case O_FILL:
        case O_MISSING: {
            bool second = false;
            static const char *const names[][3] = { { "requests", "fractional", "dra" }, { "compute", "split", "none" },
                                                    { "fill", "last", "peak" }, { "missing", "error", "skip" } };
            const char *const *w = names[c - O_REQUESTS];
            if ((rc = choose(w[0], optarg, w[1], w[2], &second)) != GS_EXIT_OK)
                return rc;
            if (c == O_REQUESTS)
                t.requests = second ? CS_REQ_DRA : CS_REQ_FRACTIONAL;
            else if (c == O_COMPUTE)
                t.no_compute = second;
            else if (c == O_FILL)
                fill = second ? CS_FILL_PEAK : CS_FILL_LAST;
            else
                missing = second ? CS_MISSING_SKIP : CS_MISSING_ERROR;
            break;
        }
        case O_ROUND: t.round_gib = true; break;
        case O_MODE:
            if (strcmp(optarg, "shared") == 0)
                t.mode = CS_MODE_SHARED;
            else if (strcmp(optarg, "mig") == 0)
                t.mode = CS_MODE_MIG;
            else if (strcmp(optarg, "auto") == 0)
                t.mode = CS_MODE_AUTO;
            else
                return cli_usage_error(CMD, "--mode: '%s' is not shared, mig or auto", optarg);
            break;
        case O_TIME: {
            char *end;
            errno = 0;
            time_limit = strtod(optarg, &end);
            if (end == optarg || *end || errno || !(time_limit >= 0 && time_limit <= 86400))
                return cli_usage_error(CMD, "--time-limit: '%s' is not seconds in [0, 86400]", optarg);
            break;
        }
        case O_PROM: prom = optarg; break;
        case O_WINDOW:
        case O_STEP:
        case O_TIMEOUT:
            if (cs_parse_duration(optarg, c == O_WINDOW ? &window : c == O_STEP ? &step : &timeout) < 0)
                return cli_usage_error(CMD, "--%s: '%s' is not a duration (7d, 24h, 90m, 60s)",
                                       c == O_WINDOW ? "window" : c == O_STEP ? "step" : "timeout", optarg);
            break;
        case O_END: {
            char *e;
            errno = 0;
            end_ts = strtod(optarg, &e);
            if (e == optarg || *e || errno || !(end_ts > 0 && end_ts < 1e11))
                return cli_usage_error(CMD, "--end: '%s' is not Unix seconds", optarg);
            break;
        }
        case O_JSON: json = true; break;
        case O_SVG: svg = optarg; break;
        case O_OUT: outdir = optarg; break;
        case 'h': usage(stdout); return GS_EXIT_OK;
        default: usage(stderr); return GS_EXIT_USAGE;
        }
    }
    if ((rc = cli_no_more_args(CMD, argc, argv, optind)) != GS_EXIT_OK)
        return rc;
    if (prom && (mem_csv || duty_csv))
        return cli_usage_error(CMD, "--prometheus or --memory-csv and --duty-csv, not both");
    if (!prom && (!mem_csv || !duty_csv))
        return cli_usage_error(CMD, "--memory-csv and --duty-csv (or --prometheus URL) are needed");
    if (prom && window / step + 1 > CS_PROM_MAX_POINTS)
        return cli_usage_error(CMD, "--window / --step is more than %d points per series; give a larger --step",
                               CS_PROM_MAX_POINTS);
    if (t.no_compute && t.requests == CS_REQ_DRA)
        return cli_usage_error(CMD, "--compute none needs --requests fractional: a DRA claim that names no compute "
                                    "takes the GPU's default share");
    if (!gpu)
        return cli_usage_error(CMD, "--gpu is needed; the catalogue has %s", gs_catalog_keys());
    char err[512];
    t.model = cs_resolve_gpu(gpu, err, sizeof err);
    if (!t.model) {
        fprintf(stderr, "gpuslice plan: %s\n", err);
        return GS_EXIT_FAILURE;
    }

    _cleanup_free_ char *mem_text = NULL;
    _cleanup_free_ char *duty_text = NULL;
    size_t mem_len = 0, duty_len = 0;
    if (prom) {
        if (end_ts == 0)
            end_ts = (double)time(NULL);
        struct cs_prom_query q = { .url = prom, .start = end_ts - window, .end = end_ts, .step = step,
                                   .timeout_ms = (long)(timeout * 1000), .max_body = 4ull << 30 };
        if (cs_prom_query_range(&q, CS_PROM_MEMORY_QUERY, &mem_text, &mem_len, err, sizeof err) < 0 ||
            cs_prom_query_range(&q, CS_PROM_DUTY_QUERY, &duty_text, &duty_len, err, sizeof err) < 0) {
            fprintf(stderr, "gpuslice plan: %s\n", err);
            return GS_EXIT_FAILURE;
        }
    } else if (gs_read_file_ex(mem_csv, MAX_CSV, 0, &mem_text, &mem_len, err, sizeof err) < 0 ||
               gs_read_file_ex(duty_csv, MAX_CSV, 0, &duty_text, &duty_len, err, sizeof err) < 0) {
        fprintf(stderr, "gpuslice plan: %s\n", err);
        return GS_EXIT_FAILURE;
    }
    struct cs_builder *b = NULL;
    if (cs_builder_new(&b) < 0) {
        fprintf(stderr, "gpuslice plan: out of memory\n");
        return GS_EXIT_FAILURE;
    }
    cs_builder_set_duty_scale(b, ratio || prom ? 100.0 : 1.0);
    struct cs_series in = { 0 };
    struct cs_plan plan = { 0 };
    _cleanup_free_ char *buf = NULL; /* the rendered plan */
    size_t len = 0;
    rc = GS_EXIT_FAILURE;
    for (unsigned pass = 0; pass < 2; pass++) {
        if (feed_source(b, CS_MEMORY, prom, mem_csv, mem_text, mem_len) != GS_EXIT_OK ||
            feed_source(b, CS_DUTY, prom, duty_csv, duty_text, duty_len) != GS_EXIT_OK)
            goto out;
        if (pass == 0 && cs_builder_grid(b, err, sizeof err) < 0) {
            fprintf(stderr, "gpuslice plan: %s\n", err);
            goto out;
        }
    }
    free(mem_text);
    free(duty_text);
    mem_text = duty_text = NULL;
    if (cs_builder_finish(b, fill, missing, &in, err, sizeof err) < 0) {
        fprintf(stderr, "gpuslice plan: %s\n", err);
        goto out;
    }
    cs_builder_free(b);
    b = NULL;
    struct cs_pack_opts po = { .search = time_limit > 0, .time_limit_s = time_limit, .now = now_s };
    int r = cs_plan_make(&in, &t, &po, &plan, err, sizeof err);
    if (r < 0) {
        fprintf(stderr, "gpuslice plan: %s\n", r == -EINVAL ? err : strerror(-r));
        goto out;
    }
    if (svg) {
        _cleanup_free_ char *pic = NULL;
        size_t piclen = 0;
        r = render(cs_plan_write_svg, &plan, &pic, &piclen);
        if (r == 0)
            r = gs_write_file_atomic(svg, pic, piclen, false);
        if (r < 0) {
            fprintf(stderr, "gpuslice plan: --svg %s: %s\n", svg, strerror(-r));
            goto out;
        }
    }
    if (outdir && write_out_dir(outdir, &plan) != GS_EXIT_OK)
        goto out;
    if (render(json ? cs_plan_write_json : cs_plan_write_table, &plan, &buf, &len) < 0 ||
        fwrite(buf, 1, len, stdout) != len || fflush(stdout) != 0) {
        fprintf(stderr, "gpuslice plan: writing the plan: %s\n", strerror(errno ? errno : EIO));
        goto out;
    }
    rc = GS_EXIT_OK;
out:
    cs_plan_free(&plan);
    cs_series_free(&in);
    cs_builder_free(b);
    return rc;
}
