/* node.c (cli): how every command reaches the node: finding the project's libraries (the
 * simulated NVML, the guard) and opening the NVML backend per the global options. */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/gpu.h"
#include "cli/cli.h"
#include "../sim/simctl.h"
#include "config/nodedesc.h"
#include "util/util.h"

/* A library of the project: $ENV_VAR, beside the executable, ../lib/gpuslice/ relative to it, its
 * build subdirectory relative to it, then the given install and build paths (may be NULL). The
 * result may be `path`, the caller's buffer: each lookup has its own, so finding one library does
 * not overwrite the path of another (the guard's path once became the simulator's under --sim). */
static const char *find_lib(const char *env_var, const char *name, const char *build_subdir, const char *install_path,
                            const char *build_path, char path[PATH_MAX]) {
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
            snprintf(path, PATH_MAX, "%s%s%s", dir, rel[i], name);
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

static const char *sim_lib_path(char path[PATH_MAX]) {
    return find_lib("GPUSLICE_SIM_LIB", GS_SIM_LIB_NAME, "/sim/", GS_SIM_LIB_INSTALL_PATH, GS_SIM_LIB_BUILD_PATH,
                    path);
}

int cli_open_node(const struct cli *cli, struct gpu_node **out) {
    const char *lib = cli->nvml_lib;
    char sim_path[PATH_MAX];
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
            lib = sim_lib_path(sim_path);
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

int cli_read_node(const struct cli *cli, struct gpu_node **node, struct gs_inventory **inv) {
    int rc = cli_open_node(cli, node);
    if (rc != GS_EXIT_OK)
        return rc;
    *inv = calloc(1, sizeof(**inv));
    char sys[PATH_MAX];
    if (!*inv || gpu_inventory_read_sysfs(*node, cli_node_path(*node, "sys", "/sys", sys), *inv) < 0) {
        fprintf(stderr, "gpuslice: failed to read the node: %s\n", *inv ? gpu_node_error(*node) : "out of memory");
        gpu_node_close(*node);
        free(*inv);
        *inv = NULL;
        return GS_EXIT_FAILURE;
    }
    return GS_EXIT_OK;
}

const char *cli_guard_lib_path(char path[PATH_MAX]) {
    return find_lib("GPUSLICE_GUARD_LIB", GS_GUARD_LIB_NAME, "/guard/", NULL, NULL, path);
}

const char *cli_node_path(const struct gpu_node *node, const char *sub, const char *fallback, char buf[PATH_MAX]) {
    gs_sim_root_fn root = (gs_sim_root_fn)gpu_node_symbol(node, "gpusliceSimRoot");
    char err[256];
    if (!root || root(buf, PATH_MAX, err, sizeof(err)) < 0)
        return fallback;
    size_t n = strlen(buf);
    if (*sub && snprintf(buf + n, PATH_MAX - n, "/%s", sub) >= (int)(PATH_MAX - n))
        return fallback;
    return buf;
}
