/* gpuslice.c: the multi-call CLI. Parses the global options, then dispatches to a command.
 *   gpuslice [--sim NODE.yaml] [--sim-state DIR] [--nvml-lib PATH] [--log-level LEVEL] COMMAND [ARGS] */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "util/log.h"
#include "util/util.h"

#ifndef GS_VERSION
#define GS_VERSION "0.0.0"
#endif

static const struct command {
    const char *name;
    int (*run)(const struct cli *, int, char **);
    const char *summary;
} commands[] = {
    { "agent", cmd_agent, "the node daemon: kubelet device plugins for whole GPUs, replicas and MIG devices" },
    { "apply", cmd_apply, "print what the node advertises under a policy (one-shot, no kubelet)" },
    { "mig", cmd_mig, "MIG layouts: show, plan, apply (mig-parted format, minimal changes), export" },
    { "exec", cmd_exec, "run a command under the guard with a VRAM quota (no Kubernetes needed)" },
    { "cdi", cmd_cdi, "print the Container Device Interface spec of the node's GPUs and MIG devices" },
    { "doctor", cmd_doctor, "check the node as the agent needs it, one line per finding with its fix" },
    { "inspect", cmd_inspect, "show GPUs, memory, MIG state and free capacity, health and processes" },
    { "sim", cmd_sim, "drive the simulated node: inject Xid errors, add processes, reset or lose a GPU" },
    { "dra", cmd_dra, "the DRA driver: the ResourceSlices this node publishes (resource.k8s.io/v1)" },
    { "extender", cmd_extender, "the kube-scheduler extender: per-GPU fit and the placement policy's score" },
    { "replay", cmd_replay, "replay a cluster trace under a placement policy (fragmentation study)" },
    { "plan", cmd_plan, "plan pods onto the fewest shared GPUs from their memory and duty-cycle series" },
    { "kube", cmd_kube, "talk to the Kubernetes API server: get, list, apply, delete, watch (src/kube)" },
};

static void usage(FILE *f) {
    fprintf(f,
            "Usage: gpuslice [GLOBAL OPTIONS] COMMAND [ARGS]\n"
            "\n"
            "Share NVIDIA GPUs in Kubernetes: MIG partitions, time-sliced replicas with VRAM quotas, MPS.\n"
            "\n"
            "Global options (before the command):\n"
            "  --sim NODE.yaml     use the simulated NVML driver over this node description\n"
            "                      (see docs/simulator.md); otherwise the driver's libnvidia-ml.so.1\n"
            "  --sim-state DIR     directory holding the simulated node's state, shared by every\n"
            "                      process that uses it (default ${XDG_RUNTIME_DIR:-/tmp}/gpuslice-sim-UID)\n"
            "  --nvml-lib PATH     load this NVML library instead\n"
            "  --log-level LEVEL   error, warn, info (default) or debug\n"
            "  -h, --help          show this help; `gpuslice COMMAND --help` for a command\n"
            "  --version           print the version\n"
            "\n"
            "Commands:\n");
    for (size_t i = 0; i < GS_ARRAY_SIZE(commands); i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nExit status: 0 success, 1 failure, 2 usage error, 3 NVIDIA driver (NVML) not found.\n");
}

int main(int argc, char **argv) {
    struct cli cli = { 0 };
    enum { OPT_SIM = 256, OPT_SIM_STATE, OPT_NVML_LIB, OPT_LOG_LEVEL, OPT_VERSION };
    static const struct option opts[] = {
        { "sim", required_argument, NULL, OPT_SIM },
        { "sim-state", required_argument, NULL, OPT_SIM_STATE },
        { "nvml-lib", required_argument, NULL, OPT_NVML_LIB },
        { "log-level", required_argument, NULL, OPT_LOG_LEVEL },
        { "version", no_argument, NULL, OPT_VERSION },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    int c;
    while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_SIM: cli.sim_node = optarg; break;
        case OPT_SIM_STATE: cli.sim_state = optarg; break;
        case OPT_NVML_LIB: cli.nvml_lib = optarg; break;
        case OPT_LOG_LEVEL: {
            enum gs_log_level lvl;
            if (gs_log_parse_level(optarg, &lvl) < 0) {
                fprintf(stderr, "gpuslice: --log-level: '%s' is not one of error, warn, info, debug\n", optarg);
                return GS_EXIT_USAGE;
            }
            gs_log_set_level(lvl);
            break;
        }
        case OPT_VERSION: printf("gpuslice %s\n", GS_VERSION); return GS_EXIT_OK;
        case 'h': usage(stdout); return GS_EXIT_OK;
        default: usage(stderr); return GS_EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return GS_EXIT_USAGE;
    }
    const char *name = argv[optind];
    for (size_t i = 0; i < GS_ARRAY_SIZE(commands); i++) {
        if (strcmp(commands[i].name, name) == 0) {
            int sub_argc = argc - optind;
            char **sub_argv = argv + optind;
            optind = 0; /* reset getopt for the command's own parsing */
            return commands[i].run(&cli, sub_argc, sub_argv);
        }
    }
    fprintf(stderr, "gpuslice: unknown command '%s'\n\n", name);
    usage(stderr);
    return GS_EXIT_USAGE;
}
