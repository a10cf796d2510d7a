/* cdi.c (cli): `gpuslice cdi generate`: prints the CDI spec of the node's GPUs and MIG devices. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdi/nodespec.h"
#include "cdi/cdi.h"
#include "cli/cli.h"
#include "util/util.h"

static void warn_conflict(void *ctx, const char *msg) {
    (void)ctx;
    fprintf(stderr, "gpuslice: warning: %s\n", msg);
}

int cmd_cdi(const struct cli *cli, int argc, char **argv) {
    enum { OPT_PROC_ROOT = 256, OPT_KIND, OPT_DRIVER_ROOT, OPT_HOOK, OPT_SCAN_DIR };
    static const struct option opts[] = {
        { "proc-root", required_argument, NULL, OPT_PROC_ROOT },
        { "driver-root", required_argument, NULL, OPT_DRIVER_ROOT },
        { "kind", required_argument, NULL, OPT_KIND },
        { "hook", required_argument, NULL, OPT_HOOK },
        { "scan-dir", required_argument, NULL, OPT_SCAN_DIR },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    const char *proc_root = NULL, *kind = GS_CDI_KIND, *driver_root = NULL; /* NULL: the node's (--sim: its root) */
    const char *scan[8] = { "/etc/cdi", "/var/run/cdi" };
    size_t n_scan = 2;
    bool scan_given = false;
    int c;
    optind = 1;
    if (argc < 2 || strcmp(argv[1], "generate")) {
        fprintf(stderr, "Usage: gpuslice cdi generate [--kind VENDOR/CLASS] [--proc-root DIR] [--driver-root DIR]\n");
        return argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) ? GS_EXIT_OK : GS_EXIT_USAGE;
    }
    argc--, argv++;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_PROC_ROOT: proc_root = optarg; break;
        case OPT_KIND: kind = optarg; break;
        case OPT_DRIVER_ROOT: driver_root = optarg; break;
        case OPT_HOOK: setenv("GPUSLICE_CDI_HOOK", optarg, 1); break;
        case OPT_SCAN_DIR:
            if (!scan_given)
                n_scan = 0, scan_given = true;
            if (n_scan == 8)
                return cli_usage_error("cdi generate", "--scan-dir: at most 8 directories");
            scan[n_scan++] = optarg;
            break;
        case 'h':
            printf("Usage: gpuslice [GLOBAL OPTIONS] cdi generate [--kind VENDOR/CLASS] [--proc-root DIR]\n"
                   "                                             [--driver-root DIR]\n\n"
                   "Prints the Container Device Interface spec (JSON; cdiVersion: the lowest the content needs,\n"
                   "0.5.0 with the default kind) of the node's GPUs and MIG devices: device names GPU-UUID, index, MIG-UUID and GPU:GI:CI. Device numbers\n"
                   "come from DIR/devices and DIR/driver/nvidia-caps/mig-minors (--proc-root; default /proc,\n"
                   "under --sim the simulated node's ROOT/proc, and its ROOT as the driver root); the\n"
                   "driver's libraries from the driver root's linker cache (etc/ld.so.cache), mounted under\n"
                   GS_CDI_LIB_DIR ", and its tools from its usr/bin, mounted under " GS_CDI_BIN_DIR ".\n"
                   "  --kind VENDOR/CLASS   the spec's kind (default " GS_CDI_KIND ")\n"
                   "  --driver-root DIR     where the driver is installed (default /)\n"
                   "  --hook PATH           the host path of gpuslice-cdi-hook, run as a createContainer hook\n"
                   "                        when libcuda is mounted (default " GS_CDI_HOOK_PATH "; \"\": none)\n"
                   "  --scan-dir DIR        warn about specs in DIR defining the same devices (repeatable;\n"
                   "                        default /etc/cdi and /var/run/cdi)\n");
            return GS_EXIT_OK;
        default: return GS_EXIT_USAGE;
        }
    }
    if (cli_no_more_args("cdi generate", argc, argv, optind) != GS_EXIT_OK)
        return GS_EXIT_USAGE;
    struct gpu_node *node;
    _cleanup_free_ struct gs_inventory *inv = NULL;
    int rc = cli_read_node(cli, &node, &inv);
    if (rc != GS_EXIT_OK)
        return rc;
    char sim_proc[PATH_MAX], sim_root[PATH_MAX];
    if (!proc_root)
        proc_root = cli_node_path(node, "proc", "/proc", sim_proc);
    if (!driver_root)
        driver_root = cli_node_path(node, "", "/", sim_root);
    gpu_node_close(node);
    char *text, err[512];
    int r = gs_cdi_node_spec(inv, proc_root, driver_root, driver_root, kind, NULL, &text, NULL, err, sizeof(err));
    if (r < 0) {
        fprintf(stderr, "gpuslice: %s\n", err);
        return GS_EXIT_FAILURE;
    }
    printf("%s\n", text);
    if (gs_cdi_scan_dirs(kind, text, scan, n_scan, "gpuslice", warn_conflict, NULL) > 0)
        fprintf(stderr, "gpuslice: warning: the container runtime's CDI library refuses devices that two specs "
                        "define; choose another --kind or remove the other spec\n");
    free(text);
    return GS_EXIT_OK;
}
