/* sim.c: `gpuslice sim ...`: fault injection on the simulated node (tests and demos).
 *   sim xid GPU XID [--gi ID]          deliver an Xid event to every NVML event set on GPU
 *   sim process add --gpu N --pid P --mem SIZE [--gi ID] [--ci ID] [--name NAME]
 *   sim process remove --pid P [--gpu N]
 *   sim util --pid P [--gpu N] --sm PCT[,PCT...]|none   its duty schedule (per sampling period)
 *   sim reset-gpu GPU                  GPU reset: activates a pending MIG mode, drops instances
 *   sim gpu-lost GPU [--recover]       the GPU falls off the bus (NVML_ERROR_GPU_IS_LOST)
 *   sim mig-create --gpu N --profile NAME|ID --start S   a GPU instance + its full compute instance
 *   sim mig-destroy --gpu N --gi ID    its compute instances, then the GPU instance
 * (mig-create/destroy use plain NVML calls; `gpuslice mig apply` is the declarative way.) */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../sim/simctl.h"
#include "cli/cli.h"
#include "util/quantity.h"
#include "util/util.h"

static void sim_memory_usage(FILE *f);

static void sim_usage(FILE *f) {
    fprintf(f, "Usage: gpuslice --sim NODE.yaml [--sim-state DIR] sim SUBCOMMAND\n\n"
               "Drive the simulated node (needs --sim):\n"
               "  xid GPU XID [--gi ID]     inject Xid XID on GPU (optionally tied to GPU instance ID);\n"
               "                            delivered to every NVML event set registered on that GPU\n"
               "  process add --gpu N --pid PID --mem SIZE [--gi ID] [--ci ID] [--name NAME]\n"
               "                            a process using SIZE (e.g. 2GiB) of GPU N or of its MIG\n"
               "                            device GI ID (CI defaults to the first one)\n"
               "  process remove --pid PID [--gpu N]\n"
               "  util --pid PID [--gpu N] --sm PCT[,PCT...]|none\n"
               "                            the SM utilization process PID runs in each sampling period\n"
               "                            (100 ms), the list cycled (at most 16 steps); 'none': busy,\n"
               "                            sharing the GPU evenly with the others (the default)\n"
               "  reset-gpu GPU             GPU reset: a pending MIG mode takes effect and every MIG\n"
               "                            instance is dropped; refused while processes run\n"
               "  gpu-lost GPU [--recover]  the GPU falls off the bus: NVML calls on it return\n"
               "                            GPU_IS_LOST until --recover or reset-gpu\n"
               "  mig-create --gpu N --profile NAME|ID --start SLOT\n"
               "                            create a MIG GPU instance at a placement and its full compute\n"
               "                            instance; prints the MIG device UUID\n"
               "  mig-destroy --gpu N --gi ID\n"
               "                            destroy GPU instance ID and its compute instances\n");
    sim_memory_usage(f);
}

static int parse_index(const char *what, const char *s, unsigned long long max, unsigned long long *out) {
    if (gs_parse_uint(s, 0, max, out) < 0) {
        fprintf(stderr, "gpuslice sim: %s: '%s' is not a number in 0..%llu\n", what, s, max);
        return -EINVAL;
    }
    return 0;
}

static void *sim_symbol(struct gpu_node *node, const char *name) {
    void *p = gpu_node_symbol(node, name);
    if (!p)
        fprintf(stderr, "gpuslice sim: %s is not the simulated NVML library (no %s)\n", gpu_node_lib(node), name);
    return p;
}

static int finish(int r, const char *err) {
    if (r < 0) {
        fprintf(stderr, "gpuslice sim: %s\n", err);
        return GS_EXIT_FAILURE;
    }
    return GS_EXIT_OK;
}

/* ---- memory errors: `sim ecc`, `sim retire-page` ---------------------------------------------- */

static void sim_memory_usage(FILE *f) {
    fprintf(f, "  ecc GPU corrected|uncorrected [--count N]\n"
               "                            add N (default 1) ECC errors to GPU's volatile and aggregate\n"
               "                            counters (a GPU reset clears the volatile ones)\n"
               "  retire-page GPU ADDRESS [--double-bit]\n"
               "                            retire the page at ADDRESS (decimal or 0x hex; a remapped row\n"
               "                            on Ampere and newer) for repeated single-bit errors or a\n"
               "                            double-bit error; pending until reset-gpu\n");
}

/* A page address: decimal, or hexadecimal after 0x; below 2^52. */
static int parse_address(const char *s, unsigned long long *out) {
    if (strncmp(s, "0x", 2) && strncmp(s, "0X", 2))
        return gs_parse_uint(s, 0, (1ULL << 52) - 1, out);
    size_t n = strlen(s + 2);
    if (n == 0 || n > 13 || strspn(s + 2, "0123456789abcdefABCDEF") != n)
        return -EINVAL;
    *out = strtoull(s + 2, NULL, 16);
    return *out < (1ULL << 52) ? 0 : -ERANGE;
}

static int sim_memory(struct gpu_node *node, int argc, char **argv, bool ecc) {
    static const struct option opts[] = { { "count", required_argument, NULL, 'n' },
                                          { "double-bit", no_argument, NULL, 'd' }, { 0 } };
    unsigned long long count = 1, gpu, address = 0;
    bool dbe = false;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'n' && ecc && gs_parse_uint(optarg, 1, SIM_ECC_MAX_ADD, &count) == 0)
            continue;
        if (c == 'd' && !ecc) {
            dbe = true;
            continue;
        }
        if (c == 'n' && ecc)
            fprintf(stderr, "gpuslice sim ecc: --count: '%s' is not a number in 1..%llu\n", optarg, SIM_ECC_MAX_ADD);
        return GS_EXIT_USAGE;
    }
    if (argc - optind != 2) {
        fprintf(stderr, "gpuslice sim %s: expected GPU and %s\n", argv[0], ecc ? "corrected|uncorrected" : "ADDRESS");
        return GS_EXIT_USAGE;
    }
    const char *what = argv[optind + 1];
    if (parse_index("GPU", argv[optind], 63, &gpu) < 0)
        return GS_EXIT_USAGE;
    if (ecc && strcmp(what, "corrected") && strcmp(what, "uncorrected")) {
        fprintf(stderr, "gpuslice sim ecc: '%s': expected corrected or uncorrected\n", what);
        return GS_EXIT_USAGE;
    }
    if (!ecc && parse_address(what, &address) < 0) {
        fprintf(stderr, "gpuslice sim retire-page: ADDRESS: '%s' is not an address below 2^52 (decimal or 0x...)\n",
                what);
        return GS_EXIT_USAGE;
    }
    char err[256];
    if (ecc) {
        gs_sim_ecc_error_fn fn = (gs_sim_ecc_error_fn)sim_symbol(node, "gpusliceSimEccError");
        return fn ? finish(fn((unsigned)gpu, what[0] == 'u', count, err, sizeof(err)), err) : GS_EXIT_FAILURE;
    }
    gs_sim_retire_page_fn fn = (gs_sim_retire_page_fn)sim_symbol(node, "gpusliceSimRetirePage");
    return fn ? finish(fn((unsigned)gpu, address, dbe, err, sizeof(err)), err) : GS_EXIT_FAILURE;
}

static int sim_xid(struct gpu_node *node, int argc, char **argv) {
    static const struct option opts[] = { { "gi", required_argument, NULL, 'g' }, { 0 } };
    unsigned long long gi = 0xFFFFFFFFULL, gpu, xid;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c != 'g' || parse_index("--gi", optarg, 14, &gi) < 0)
            return GS_EXIT_USAGE;
    }
    if (argc - optind != 2) {
        fprintf(stderr, "gpuslice sim xid: expected GPU and XID\n");
        return GS_EXIT_USAGE;
    }
    if (parse_index("GPU", argv[optind], 63, &gpu) < 0 || parse_index("XID", argv[optind + 1], 1000000, &xid) < 0)
        return GS_EXIT_USAGE;
    gs_sim_inject_xid_fn fn = (gs_sim_inject_xid_fn)sim_symbol(node, "gpusliceSimInjectXid");
    if (!fn)
        return GS_EXIT_FAILURE;
    char err[256];
    return finish(fn((unsigned)gpu, xid, (unsigned)gi, err, sizeof(err)), err);
}

static int sim_process(struct gpu_node *node, int argc, char **argv) {
    if (argc < 2 || (strcmp(argv[1], "add") && strcmp(argv[1], "remove"))) {
        fprintf(stderr, "gpuslice sim process: expected 'add' or 'remove'\n");
        return GS_EXIT_USAGE;
    }
    bool add = strcmp(argv[1], "add") == 0;
    static const struct option opts[] = {
        { "gpu", required_argument, NULL, 'g' }, { "pid", required_argument, NULL, 'p' },
        { "mem", required_argument, NULL, 'm' }, { "gi", required_argument, NULL, 'i' },
        { "ci", required_argument, NULL, 'c' },  { "name", required_argument, NULL, 'n' },
        { 0 },
    };
    unsigned long long gpu = ~0ULL, pid = 0, mem = ~0ULL, gi = ~0ULL, ci = ~0ULL;
    const char *name = "";
    int c;
    optind = 0; /* parse after "add"/"remove" */
    while ((c = getopt_long(argc - 1, argv + 1, "", opts, NULL)) != -1) {
        int r = 0;
        switch (c) {
        case 'g': r = gs_parse_uint(optarg, 0, 63, &gpu); break;
        case 'p': r = gs_parse_uint(optarg, 1, 0x7fffffff, &pid); break;
        case 'm': r = gs_quantity_bytes(optarg, 0, INT64_MAX, &mem); break;
        case 'i': r = gs_parse_uint(optarg, 0, 14, &gi); break;
        case 'c': r = gs_parse_uint(optarg, 0, 7, &ci); break;
        case 'n': name = optarg; break;
        default: return GS_EXIT_USAGE;
        }
        if (r < 0) {
            const char *opt = "?";
            for (const struct option *o = opts; o->name; o++)
                if (o->val == c)
                    opt = o->name;
            fprintf(stderr, "gpuslice sim process: invalid value '%s' for --%s (%s)\n", optarg, opt,
                    c == 'm' ? "a size in bytes such as 512Mi or 2Gi" : "a non-negative integer in range");
            return GS_EXIT_USAGE;
        }
    }
    if (!pid) {
        fprintf(stderr, "gpuslice sim process %s: --pid is required\n", argv[1]);
        return GS_EXIT_USAGE;
    }
    char err[256];
    if (!add) {
        gs_sim_process_remove_fn fn = (gs_sim_process_remove_fn)sim_symbol(node, "gpusliceSimProcessRemove");
        return fn ? finish(fn((unsigned)pid, gpu == ~0ULL ? -1 : (int)gpu, err, sizeof(err)), err) : GS_EXIT_FAILURE;
    }
    if (gpu == ~0ULL || mem == ~0ULL) {
        fprintf(stderr, "gpuslice sim process add: --gpu and --mem are required\n");
        return GS_EXIT_USAGE;
    }
    gs_sim_process_add_fn fn = (gs_sim_process_add_fn)sim_symbol(node, "gpusliceSimProcessAdd");
    if (!fn)
        return GS_EXIT_FAILURE;
    return finish(fn((unsigned)gpu, gi == ~0ULL ? -1 : (int)gi, ci == ~0ULL ? -1 : (int)ci, (unsigned)pid, mem, name,
                     err, sizeof(err)),
                  err);
}

/* util --pid P [--gpu N] --sm LIST|none */
static int sim_util(struct gpu_node *node, int argc, char **argv) {
    static const struct option opts[] = {
        { "gpu", required_argument, NULL, 'g' }, { "pid", required_argument, NULL, 'p' },
        { "sm", required_argument, NULL, 's' },  { 0 },
    };
    unsigned long long gpu = ~0ULL, pid = 0;
    const char *sm = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int r = 0;
        switch (c) {
        case 'g': r = gs_parse_uint(optarg, 0, 63, &gpu); break;
        case 'p': r = gs_parse_uint(optarg, 1, 0x7fffffff, &pid); break;
        case 's': sm = optarg; break;
        default: return GS_EXIT_USAGE;
        }
        if (r < 0) {
            fprintf(stderr, "gpuslice sim util: invalid value '%s' for --%s (a non-negative integer in range)\n",
                    optarg, c == 'g' ? "gpu" : "pid");
            return GS_EXIT_USAGE;
        }
    }
    if (!pid || !sm || optind != argc) {
        fprintf(stderr, "gpuslice sim util: needs --pid and --sm (and no other argument)\n");
        return GS_EXIT_USAGE;
    }
    unsigned steps[16], n = 0;
    if (strcmp(sm, "none") != 0) {
        char list[256];
        if (gs_strlcpy(list, sm, sizeof(list)) < 0) {
            fprintf(stderr, "gpuslice sim util: --sm: the list is too long\n");
            return GS_EXIT_USAGE;
        }
        char *save = NULL;
        for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            unsigned long long v;
            if (n == 16 || gs_parse_uint(t, 0, 100, &v) < 0) {
                fprintf(stderr, "gpuslice sim util: --sm: %s\n",
                        n == 16 ? "at most 16 steps" : "each step is a percentage in 0..100");
                return GS_EXIT_USAGE;
            }
            steps[n++] = (unsigned)v;
        }
        if (!n) {
            fprintf(stderr, "gpuslice sim util: --sm: expected percentages such as 30 or 80,0, or 'none'\n");
            return GS_EXIT_USAGE;
        }
    }
    gs_sim_process_util_fn fn = (gs_sim_process_util_fn)sim_symbol(node, "gpusliceSimProcessUtil");
    if (!fn)
        return GS_EXIT_FAILURE;
    char err[256];
    return finish(fn((unsigned)pid, gpu == ~0ULL ? -1 : (int)gpu, steps, n, err, sizeof(err)), err);
}

static int sim_gpu_command(struct gpu_node *node, int argc, char **argv, bool lost_cmd) {
    static const struct option opts[] = { { "recover", no_argument, NULL, 'r' }, { 0 } };
    bool recover = false;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c != 'r' || !lost_cmd)
            return GS_EXIT_USAGE;
        recover = true;
    }
    unsigned long long gpu;
    if (argc - optind != 1) {
        fprintf(stderr, "gpuslice sim %s: expected GPU\n", argv[0]);
        return GS_EXIT_USAGE;
    }
    if (parse_index("GPU", argv[optind], 63, &gpu) < 0)
        return GS_EXIT_USAGE;
    char err[256];
    if (lost_cmd) {
        gs_sim_set_lost_fn fn = (gs_sim_set_lost_fn)sim_symbol(node, "gpusliceSimSetLost");
        return fn ? finish(fn((unsigned)gpu, !recover, err, sizeof(err)), err) : GS_EXIT_FAILURE;
    }
    gs_sim_reset_gpu_fn fn = (gs_sim_reset_gpu_fn)sim_symbol(node, "gpusliceSimResetGpu");
    return fn ? finish(fn((unsigned)gpu, err, sizeof(err)), err) : GS_EXIT_FAILURE;
}

/* mig-create / mig-destroy: MIG instances by hand, through the same NVML calls as on a real GPU. */
static int sim_mig(struct gpu_node *node, int argc, char **argv, bool create) {
    static const struct option opts[] = {
        { "gpu", required_argument, NULL, 'g' }, { "profile", required_argument, NULL, 'p' },
        { "start", required_argument, NULL, 's' }, { "gi", required_argument, NULL, 'i' }, { 0 },
    };
    unsigned long long gpu = ~0ULL, start = ~0ULL, gi = ~0ULL;
    const char *profile = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int r = 0;
        switch (c) {
        case 'g': r = gs_parse_uint(optarg, 0, 63, &gpu); break;
        case 'p': profile = optarg; break;
        case 's': r = gs_parse_uint(optarg, 0, 7, &start); break;
        case 'i': r = gs_parse_uint(optarg, 0, 14, &gi); break;
        default: return GS_EXIT_USAGE;
        }
        if (r < 0) {
            fprintf(stderr, "gpuslice sim %s: invalid number '%s'\n", argv[0], optarg);
            return GS_EXIT_USAGE;
        }
    }
    if (gpu == ~0ULL || (create ? (!profile || start == ~0ULL) : gi == ~0ULL)) {
        fprintf(stderr, "gpuslice sim %s: needs %s\n", argv[0],
                create ? "--gpu, --profile and --start" : "--gpu and --gi");
        return GS_EXIT_USAGE;
    }
    struct gs_inventory *inv = calloc(1, sizeof(*inv));
    if (!inv || gpu_inventory_read(node, inv) < 0 || gpu >= inv->n_gpus) {
        fprintf(stderr, "gpuslice sim %s: GPU %llu not found\n", argv[0], gpu);
        free(inv);
        return GS_EXIT_FAILURE;
    }
    const struct gs_gpu *g = &inv->gpus[gpu];
    int rc = GS_EXIT_FAILURE;
    if (create) {
        unsigned long long id;
        const struct gs_gi_profile *p = gs_gpu_profile_by_name(g, profile);
        if (!p && gs_parse_uint(profile, 0, 255, &id) == 0)
            p = gs_gpu_profile_by_id(g, (unsigned)id);
        if (!p) {
            fprintf(stderr, "gpuslice sim mig-create: GPU %llu has no MIG profile '%s'%s\n", gpu, profile,
                    g->mig_current ? "" : " (MIG mode is disabled)");
            goto out;
        }
        unsigned gi_id, ci_id;
        char uuid[GS_UUID_LEN];
        if (gpu_gi_create(node, (unsigned)gpu, p->id, (unsigned)start, &gi_id) < 0 ||
            gpu_ci_create_full(node, (unsigned)gpu, gi_id, &ci_id, uuid, sizeof(uuid)) < 0) {
            fprintf(stderr, "gpuslice sim mig-create: %s\n", gpu_node_error(node));
            goto out;
        }
        printf("%s\n", uuid);
        rc = GS_EXIT_OK;
    } else {
        for (unsigned k = 0; k < g->n_mig; k++) {
            if (g->mig[k].gi_id == gi && gpu_ci_destroy(node, (unsigned)gpu, (unsigned)gi, g->mig[k].ci_id) < 0) {
                fprintf(stderr, "gpuslice sim mig-destroy: %s\n", gpu_node_error(node));
                goto out;
            }
        }
        if (gpu_gi_destroy(node, (unsigned)gpu, (unsigned)gi) < 0) {
            fprintf(stderr, "gpuslice sim mig-destroy: %s\n", gpu_node_error(node));
            goto out;
        }
        rc = GS_EXIT_OK;
    }
out:
    free(inv);
    return rc;
}

int cmd_sim(const struct cli *cli, int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        sim_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? GS_EXIT_USAGE : GS_EXIT_OK;
    }
    const char *sub = argv[1];
    bool known = !strcmp(sub, "xid") || !strcmp(sub, "process") || !strcmp(sub, "util") || !strcmp(sub, "reset-gpu") ||
                 !strcmp(sub, "gpu-lost") || !strcmp(sub, "mig-create") || !strcmp(sub, "mig-destroy") ||
                 !strcmp(sub, "ecc") || !strcmp(sub, "retire-page");
    if (!known) {
        fprintf(stderr, "gpuslice sim: unknown subcommand '%s'\n\n", sub);
        sim_usage(stderr);
        return GS_EXIT_USAGE;
    }
    if (!cli->sim_node) {
        fprintf(stderr, "gpuslice sim: needs the simulated node: gpuslice --sim NODE.yaml sim %s ...\n", sub);
        return GS_EXIT_USAGE;
    }
    struct gpu_node *node;
    int rc = cli_open_node(cli, &node);
    if (rc != GS_EXIT_OK)
        return rc;
    optind = 0;
    if (!strcmp(sub, "xid"))
        rc = sim_xid(node, argc - 1, argv + 1);
    else if (!strcmp(sub, "process"))
        rc = sim_process(node, argc - 1, argv + 1);
    else if (!strcmp(sub, "ecc") || !strcmp(sub, "retire-page"))
        rc = sim_memory(node, argc - 1, argv + 1, !strcmp(sub, "ecc"));
    else if (!strcmp(sub, "util"))
        rc = sim_util(node, argc - 1, argv + 1);
    else if (!strncmp(sub, "mig-", 4))
        rc = sim_mig(node, argc - 1, argv + 1, !strcmp(sub, "mig-create"));
    else
        rc = sim_gpu_command(node, argc - 1, argv + 1, !strcmp(sub, "gpu-lost"));
    gpu_node_close(node);
    return rc;
}
