/* cdi.c (cli): `gpuslice cdi generate`: prints the CDI spec of the node's GPUs and MIG devices. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent.h"
#include "cdi/cdi.h"
#include "cli/cli.h"
#include "util/util.h"

static int read_majors(const char *proc_root, struct gs_dev_majors *maj, struct gs_mig_minors *mm, bool need_minors) {
    char path[PATH_MAX], err[512];
    snprintf(path, sizeof(path), "%s/devices", proc_root);
    _cleanup_free_ char *text = NULL;
    int r = gs_read_file(path, 1 << 20, &text, NULL);
    if (r < 0) {
        fprintf(stderr, "gpuslice: cannot read %s: %s\n", path, strerror(-r));
        return r;
    }
    if ((r = gs_proc_devices_parse(path, text, maj, err, sizeof(err))) < 0) {
        fprintf(stderr, "gpuslice: %s\n", err);
        return r;
    }
    if (need_minors && (r = agent_read_mig_minors(proc_root, mm, err, sizeof(err))) < 0) {
        fprintf(stderr, "gpuslice: %s\n", err);
        return r;
    }
    return 0;
}

int cmd_cdi(const struct cli *cli, int argc, char **argv) {
    enum { OPT_PROC_ROOT = 256, OPT_KIND };
    static const struct option opts[] = {
        { "proc-root", required_argument, NULL, OPT_PROC_ROOT },
        { "kind", required_argument, NULL, OPT_KIND },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    const char *proc_root = "/proc", *kind = GS_CDI_KIND;
    int c;
    optind = 1;
    if (argc < 2 || strcmp(argv[1], "generate")) {
        fprintf(stderr, "Usage: gpuslice cdi generate [--kind VENDOR/CLASS] [--proc-root DIR]\n");
        return argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) ? GS_EXIT_OK : GS_EXIT_USAGE;
    }
    argc--, argv++;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_PROC_ROOT: proc_root = optarg; break;
        case OPT_KIND: kind = optarg; break;
        case 'h':
            printf("Usage: gpuslice [GLOBAL OPTIONS] cdi generate [--kind VENDOR/CLASS] [--proc-root DIR]\n\n"
                   "Prints the Container Device Interface spec (JSON, cdiVersion " GS_CDI_VERSION ") of the node's GPUs\n"
                   "and MIG devices: device names GPU-UUID, index, MIG-UUID and GPU:GI:CI. Device numbers\n"
                   "come from DIR/devices and DIR/driver/nvidia-caps/mig-minors (default DIR /proc).\n"
                   "  --kind VENDOR/CLASS   the spec's kind (default " GS_CDI_KIND ")\n");
            return GS_EXIT_OK;
        default: return GS_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "gpuslice cdi generate: unexpected argument '%s'\n", argv[optind]);
        return GS_EXIT_USAGE;
    }
    struct gpu_node *node;
    _cleanup_free_ struct gs_inventory *inv = NULL;
    int rc = cli_read_node(cli, &node, &inv);
    if (rc != GS_EXIT_OK)
        return rc;
    gpu_node_close(node);
    bool any_mig = false;
    for (unsigned i = 0; i < inv->n_gpus; i++)
        any_mig |= inv->gpus[i].n_mig > 0;
    struct gs_dev_majors maj;
    struct gs_mig_minors mm = { 0 };
    if (read_majors(proc_root, &maj, &mm, any_mig) < 0) {
        gs_mig_minors_free(&mm);
        return GS_EXIT_FAILURE;
    }
    char *text, err[512];
    int r = gs_cdi_spec(inv, &maj, any_mig ? &mm : NULL, kind, &text, err, sizeof(err));
    gs_mig_minors_free(&mm);
    if (r < 0) {
        fprintf(stderr, "gpuslice: %s\n", err);
        return GS_EXIT_FAILURE;
    }
    printf("%s\n", text);
    free(text);
    return GS_EXIT_OK;
}
