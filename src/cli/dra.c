/* dra.c (cli): `gpuslice dra slices`: the ResourceSlices the DRA driver publishes for this node
 * under a policy (src/dra/slices.h), as one Kubernetes List on stdout, so that
 * `gpuslice dra slices ... | kubectl create -f -` submits them to an API server. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "config/policy.h"
#include "dra/slices.h"
#include "util/util.h"

static int usage_slices(FILE *f) {
    fprintf(f, "Usage: gpuslice [GLOBAL OPTIONS] dra slices [--config POLICY.yaml] [--node NAME] [--dra-driver NAME]\n"
               "                                   [--generation N]\n\n"
               "Prints the ResourceSlice objects (resource.k8s.io/v1) the DRA driver publishes for this node\n"
               "under the policy, as a Kubernetes List (docs/dra.md):\n"
               "  --node NAME        the node's name (default: $NODE_NAME, else the host name)\n"
               "  --dra-driver NAME  the driver's name, as the agent's --dra-driver (default " GS_DRA_DRIVER_DEFAULT ";\n"
               "                     --driver: the same)\n"
               "  --generation N     spec.pool.generation (default 1)\n");
    return f == stdout ? GS_EXIT_OK : GS_EXIT_USAGE;
}

static int dra_slices(const struct cli *cli, int argc, char **argv) {
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "node", required_argument, NULL, 'n' },
        { "dra-driver", required_argument, NULL, 'd' },
        { "driver", required_argument, NULL, 'd' },
        { "generation", required_argument, NULL, 'g' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    const char *config = NULL, *node = NULL, *driver = GS_DRA_DRIVER_DEFAULT;
    unsigned long long generation = 1;
    int c;
    while ((c = getopt_long(argc, argv, "c:n:d:g:h", opts, NULL)) != -1) {
        switch (c) {
        case 'c': config = optarg; break;
        case 'n': node = optarg; break;
        case 'd': driver = optarg; break;
        case 'g':
            if (gs_parse_uint(optarg, 0, LLONG_MAX, &generation) < 0)
                return cli_usage_error("dra slices", "--generation: '%s' is not a number from 0 to %lld", optarg,
                                       LLONG_MAX);
            break;
        case 'h': return usage_slices(stdout);
        default: return GS_EXIT_USAGE;
        }
    }
    if (cli_no_more_args("dra slices", argc, argv, optind) != GS_EXIT_OK)
        return GS_EXIT_USAGE;
    char host[HOST_NAME_MAX + 1], why[512];
    if (gs_node_name(node, host, sizeof(host), NULL, why, sizeof(why)) < 0)
        return cli_usage_error("dra slices", "%s", why);
    node = host;
    struct gs_policy *policy = malloc(sizeof(*policy));
    if (!policy) {
        fprintf(stderr, "gpuslice: out of memory\n");
        return GS_EXIT_FAILURE;
    }
    gs_policy_init(policy);
    char err[512];
    if (config && gs_policy_load(config, policy, err, sizeof(err)) < 0) {
        fprintf(stderr, "gpuslice: %s\n", err);
        free(policy);
        return GS_EXIT_FAILURE;
    }
    struct gpu_node *gn;
    _cleanup_free_ struct gs_inventory *inv = NULL;
    int rc = cli_read_node(cli, &gn, &inv);
    if (rc != GS_EXIT_OK) {
        free(policy);
        return rc;
    }
    json_t *slices = NULL;
    int r = gs_dra_slices_build(inv, policy, node, driver, (long long)generation, &slices, err, sizeof(err));
    gpu_node_close(gn);
    free(policy);
    if (r < 0) {
        fprintf(stderr, "gpuslice: dra slices: %s\n", err);
        return GS_EXIT_FAILURE;
    }
    json_t *list = json_pack("{s:s, s:s, s:o}", "apiVersion", "v1", "kind", "List", "items", slices);
    char *text = list ? json_dumps(list, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(list);
    if (!text) {
        fprintf(stderr, "gpuslice: out of memory\n");
        return GS_EXIT_FAILURE;
    }
    printf("%s\n", text);
    free(text);
    return GS_EXIT_OK;
}

int cmd_dra(const struct cli *cli, int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "Usage: gpuslice [GLOBAL OPTIONS] dra COMMAND\n\n"
                   "The DRA driver (docs/dra.md):\n"
                   "  slices     print the ResourceSlices this node publishes under a policy\n");
        return argc < 2 ? GS_EXIT_USAGE : GS_EXIT_OK;
    }
    if (!strcmp(argv[1], "slices"))
        return dra_slices(cli, argc - 1, argv + 1);
    return cli_usage_error("dra", "unknown command '%s' (slices)", argv[1]);
}
