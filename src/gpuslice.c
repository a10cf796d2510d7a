/* gpuslice.c: the multi-call CLI. Parses the global options, then dispatches to a command.
 *   gpuslice [--sim NODE.yaml] [--sim-state DIR] [--nvml-lib PATH] [--log-level LEVEL] COMMAND [ARGS] */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "config/nodedesc.h"
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
    { "inspect", cmd_inspect, "show GPUs, memory, MIG state and free capacity, health and processes" },
    { "sim", cmd_sim, "drive the simulated node: inject Xid errors, add processes, reset or lose a GPU" },
    { "replay", cmd_replay, "replay a cluster trace under a placement policy (fragmentation study)" },
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

const char *cli_find_lib(const char *env_var, const char *name, const char *build_subdir, const char *install_path,
                         const char *build_path) {
    static char path[PATH_MAX];
    const char *env = getenv(env_var);
    if (env && *env)
        return env;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        const char *dir = dirname(exe);
        const char *rel[] = { "/", "/../lib/gpuslice/", build_subdir };
        for (size_t i = 0; i < GS_ARRAY_SIZE(rel); i++) {
            snprintf(path, sizeof(path), "%s%s%s", dir, rel[i], name);
            if (access(path, R_OK) == 0)
                return path;
        }
    }
    if (install_path && access(install_path, R_OK) == 0)
        return install_path;
    if (build_path && access(build_path, R_OK) == 0)
        return build_path;
    return NULL;
}

#ifndef GS_SIM_LIB_INSTALL_PATH
#define GS_SIM_LIB_INSTALL_PATH NULL
#endif
#ifndef GS_SIM_LIB_BUILD_PATH
#define GS_SIM_LIB_BUILD_PATH NULL
#endif

static const char *sim_lib_path(void) {
    return cli_find_lib("GPUSLICE_SIM_LIB", GS_SIM_LIB_NAME, "/src/gpu/", GS_SIM_LIB_INSTALL_PATH, GS_SIM_LIB_BUILD_PATH);
}

int cli_open_node(const struct cli *cli, struct gpu_node **out) {
    const char *lib = cli->nvml_lib;
    if (cli->sim_node) {
        /* Validate here so a bad node file is reported with file:line:column before loading. */
        struct gs_nodedesc nd;
        char err[512];
        if (gs_nodedesc_load(cli->sim_node, &nd, err, sizeof(err)) < 0) {
            fprintf(stderr, "gpuslice: %s\n", err);
            return GS_EXIT_FAILURE;
        }
        char abs[PATH_MAX];
        setenv("GPUSLICE_SIM_NODE", realpath(cli->sim_node, abs) ? abs : cli->sim_node, 1);
        if (cli->sim_state)
            setenv("GPUSLICE_SIM_STATE", cli->sim_state, 1);
        if (!lib) {
            lib = sim_lib_path();
            if (!lib) {
                fprintf(stderr, "gpuslice: simulated NVML library %s not found (set GPUSLICE_SIM_LIB)\n",
                        GS_SIM_LIB_NAME);
                return GS_EXIT_NO_DRIVER;
            }
        }
    } else if (cli->sim_state) {
        fprintf(stderr, "gpuslice: --sim-state needs --sim NODE.yaml\n");
        return GS_EXIT_USAGE;
    }
    char err[1024];
    int r = gpu_node_open(lib, out, err, sizeof(err));
    if (r < 0) {
        fprintf(stderr, "gpuslice: %s\n", err);
        if (r == -ENOENT)
            fprintf(stderr, "gpuslice: on a machine without an NVIDIA GPU, use the simulated node: "
                            "gpuslice --sim examples/nodes/h100x4-l4x2.yaml %s\n", "inspect");
        return r == -ENOENT || r == -ENOSYS ? GS_EXIT_NO_DRIVER : GS_EXIT_FAILURE;
    }
    return GS_EXIT_OK;
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
