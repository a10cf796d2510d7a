/* cli.h: what the command implementations share: the global options and how to open the node. */
#ifndef GS_CLI_H
#define GS_CLI_H

#include <limits.h>
#include <stdbool.h>

#include "gpu/gpu.h"

/* Exit codes, documented in docs/cli.md. */
enum {
    GS_EXIT_OK = 0,
    GS_EXIT_FAILURE = 1,   /* the command failed (bad input file, NVML error, ...) */
    GS_EXIT_USAGE = 2,     /* bad command line */
    GS_EXIT_NO_DRIVER = 3, /* no NVML library could be loaded */
};

struct cli {
    const char *sim_node;   /* --sim NODE.yaml: use the simulated NVML */
    const char *sim_state;  /* --sim-state DIR */
    const char *nvml_lib;   /* --nvml-lib PATH: explicit NVML library */
};

/* Opens the NVML backend per the global options. On failure prints the error and returns the
 * exit code to use; on success returns GS_EXIT_OK. */
int cli_open_node(const struct cli *cli, struct gpu_node **out);
/* Opens the node and reads its inventory (NUMA from /sys); prints the error. Returns an exit code;
 * on success the caller closes *node and frees *inv. */
int cli_read_node(const struct cli *cli, struct gpu_node **node, struct gs_inventory **inv);

/* Where a command finds the node's files: on the simulated node (--sim) the path SUB ("proc",
 * "sys", "" for the root itself) of its root (docs/simulator.md#the-nodes-root) in buf, else
 * `fallback` ("/proc", ...). Explicit options are applied by the caller over this default. */
const char *cli_node_path(const struct gpu_node *node, const char *sub, const char *fallback, char buf[PATH_MAX]);

int cmd_inspect(const struct cli *cli, int argc, char **argv);
int cmd_sim(const struct cli *cli, int argc, char **argv);
int cmd_agent(const struct cli *cli, int argc, char **argv);
int cmd_apply(const struct cli *cli, int argc, char **argv);
int cmd_mig(const struct cli *cli, int argc, char **argv);
int cmd_replay(const struct cli *cli, int argc, char **argv);
int cmd_exec(const struct cli *cli, int argc, char **argv);
int cmd_cdi(const struct cli *cli, int argc, char **argv);
int cmd_doctor(const struct cli *cli, int argc, char **argv);
int cmd_kube(const struct cli *cli, int argc, char **argv);
int cmd_dra(const struct cli *cli, int argc, char **argv);
int cmd_extender(const struct cli *cli, int argc, char **argv);
int cmd_plan(const struct cli *cli, int argc, char **argv);

/* The MIG layout CONFIG (from the layout file FILE; NULL or "": the built-ins) planned against the
 * node: what the agent would do before serving. With `print`, mig plan's listing on stdout.
 * *steps: the steps in total. Returns an exit code (the error printed). */
int cli_mig_preview(const struct gs_inventory *inv, const char *file, const char *config, bool print,
                    unsigned *steps);

/* Option helpers (opts.c). cli_usage_error prints "gpuslice CMD: MESSAGE" on stderr and returns
 * GS_EXIT_USAGE; cli_no_more_args does so when argv[first..argc) is not empty, else returns
 * GS_EXIT_OK. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cli_no_more_args(const char *cmd, int argc, char **argv, int first);

#define GS_GUARD_LIB_NAME "libgpuslice-guard.so"
/* libgpuslice-guard.so: $GPUSLICE_GUARD_LIB, beside the executable, ../lib/gpuslice/ or guard/
 * relative to it. Returns the path (possibly in the caller's `path`) or NULL. */
const char *cli_guard_lib_path(char path[PATH_MAX]);

#endif
