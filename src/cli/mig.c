/* mig.c (cli): `gpuslice mig show|plan|apply|export`: MIG layouts in mig-parted's file format,
 * placed explicitly, changing only what differs, never destroying an instance in use unless
 * --force. `plan` and `show` and `export` only read. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "kubelet/podresources.h"
#include "mig/migapply.h"
#include "util/util.h"

static void mig_usage(FILE *f) {
    fprintf(f, "Usage: gpuslice [GLOBAL OPTIONS] mig COMMAND\n\n"
               "  show [--json]                      MIG mode, instances (profile, placement, UUID) per GPU\n"
               "  plan [-f FILE] -c NAME             the steps `apply` would take; changes nothing\n"
               "  apply [-f FILE] -c NAME [--force]  partition the GPUs as config NAME says\n"
               "  export                             the current state as a layout file `apply` accepts\n"
               "  --pod-resources-socket PATH        plan, apply: the kubelet's PodResources socket, asked\n"
               "                                     which devices pods hold (default\n"
               "                                     " GS_PODRESOURCES_SOCKET ")\n\n"
               "FILE is a layout file in mig-parted's v1 format (docs/mig.md). Without -f, or when FILE has no\n"
               "config NAME, the built-in layouts apply to every MIG-capable GPU: all-disabled, all-enabled,\n"
               "all-balanced, all-<profile> (as many of that profile as fit), e.g. all-1g.10gb.\n"
               "apply keeps instances that already match (same profile and placement: same UUID), destroys\n"
               "only what does not fit, and refuses to destroy an instance a process uses or a device the\n"
               "kubelet has assigned to a pod (PodResources; no socket: no kubelet) unless --force. A GPU\n"
               "whose MIG mode waits for a GPU reset is left as it is, the others are applied, and apply then\n"
               "names each GPU to reset (exit 1).\n"
               "SIGINT, SIGTERM and SIGHUP wait until apply is done (no layout is left half applied); it\n"
               "then exits with 128 + the signal's number.\n");
}

static int read_node(const struct cli *cli, struct gpu_node **node, struct gs_inventory **inv) {
    int rc = cli_open_node(cli, node);
    if (rc != GS_EXIT_OK)
        return rc;
    *inv = malloc(sizeof(**inv));
    if (!*inv || gpu_inventory_read(*node, *inv) < 0) {
        fprintf(stderr, "gpuslice mig: failed to read the GPUs: %s\n", *inv ? gpu_node_error(*node) : "out of memory");
        free(*inv);
        gpu_node_close(*node);
        return GS_EXIT_FAILURE;
    }
    return GS_EXIT_OK;
}

static int cmd_show(const struct cli *cli, bool as_json) {
    struct gpu_node *node;
    struct gs_inventory *inv;
    int rc = read_node(cli, &node, &inv);
    if (rc != GS_EXIT_OK)
        return rc;
    json_t *gpus = json_array();
    for (unsigned i = 0; i < inv->n_gpus; i++) {
        const struct gs_gpu *g = &inv->gpus[i];
        json_t *insts = json_array();
        if (!as_json && (g->lost || g->error[0])) {
            printf("GPU %u  %s\n", i, g->lost ? "lost (NVML: GPU is lost)" : g->error);
            json_decref(insts);
            continue;
        }
        if (!as_json)
            printf("GPU %u  %s  MIG %s%s\n", i, g->name,
                   !g->mig_capable ? "not supported" : g->mig_current ? "enabled" : "disabled",
                   g->mig_capable && g->mig_current != g->mig_pending
                       ? (g->mig_pending ? " (pending enable: needs a GPU reset)" : " (pending disable: needs a GPU reset)")
                       : "");
        for (unsigned k = 0; k < g->n_gis; k++) {
            const struct gs_gpu_instance *gi = &g->gis[k];
            const struct gs_gi_profile *p = gs_gpu_profile_by_id(g, gi->profile_id);
            const char *uuid = "";
            for (unsigned m = 0; m < g->n_mig; m++)
                if (g->mig[m].gi_id == gi->id)
                    uuid = g->mig[m].uuid;
            if (as_json)
                json_array_append_new(insts, json_pack("{s:i,s:s,s:i,s:i,s:i,s:s}", "gi_id", (int)gi->id, "profile",
                                                       p ? p->name : "", "start", (int)gi->start, "size",
                                                       (int)gi->size, "compute_instances", (int)gi->n_ci, "uuid", uuid));
            else
                printf("  GI %-2u %-12s placement %u:%u  %s\n", gi->id, p ? p->name : "?", gi->start, gi->size,
                       gi->n_ci ? uuid : "(no compute instance)");
        }
        if (as_json)
            json_array_append_new(gpus, json_pack("{s:i,s:s,s:b,s:s,s:s,s:o}", "index", (int)i, "name", g->name,
                                                  "mig_capable", g->mig_capable, "current",
                                                  g->mig_current ? "enabled" : "disabled", "pending",
                                                  g->mig_pending ? "enabled" : "disabled", "instances", insts));
        else
            json_decref(insts);
    }
    if (as_json) {
        json_t *root = json_pack("{s:s,s:o}", "schema", "gpuslice.mig/v1", "gpus", gpus);
        char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        printf("%s\n", s);
        free(s);
        json_decref(root);
    } else {
        json_decref(gpus);
    }
    free(inv);
    gpu_node_close(node);
    return GS_EXIT_OK;
}

static int cmd_export(const struct cli *cli) {
    struct gpu_node *node;
    struct gs_inventory *inv;
    int rc = read_node(cli, &node, &inv);
    if (rc != GS_EXIT_OK)
        return rc;
    printf("version: v1\nmig-configs:\n  current:\n");
    unsigned items = 0;
    for (unsigned i = 0; i < inv->n_gpus; i++) {
        const struct gs_gpu *g = &inv->gpus[i];
        if (!g->mig_capable)
            continue;
        items++;
        printf("    - devices: [%u]\n      mig-enabled: %s\n", i, g->mig_current ? "true" : "false");
        if (!g->mig_current)
            continue;
        printf("      mig-devices: {");
        unsigned shown = 0;
        for (unsigned p = 0; p < g->n_profiles; p++) {
            unsigned count = 0;
            for (unsigned k = 0; k < g->n_gis; k++)
                count += g->gis[k].profile_id == g->profiles[p].id;
            if (count)
                printf("%s\"%s\": %u", shown++ ? ", " : "", g->profiles[p].name, count);
        }
        printf("}\n");
    }
    if (!items)
        printf("    - devices: all\n      mig-enabled: false\n");
    free(inv);
    gpu_node_close(node);
    return GS_EXIT_OK;
}

static void print_plan(const struct gs_inventory *inv, const struct gs_mig_plan *plans, const bool *selected,
                       const struct gs_mig_holds *holds) {
    unsigned total = 0;
    for (unsigned i = 0; i < inv->n_gpus; i++) {
        const struct gs_mig_plan *p = &plans[i];
        if (!selected[i])
            continue;
        printf("GPU %u (%s): ", i, inv->gpus[i].name);
        if (p->reset_pending) {
            printf("MIG mode change pending: needs a GPU reset before anything else\n");
            continue;
        }
        if (!p->n_steps) {
            printf("already as the layout says%s\n", p->kept ? "" : "");
            continue;
        }
        printf("%u step(s), %u instance(s) kept\n", p->n_steps, p->kept);
        for (unsigned k = 0; k < p->n_steps; k++) {
            const struct gs_mig_step *s = &p->steps[k];
            switch (s->kind) {
            case GS_STEP_DESTROY_CI: printf("  destroy compute instance %u of GI %u (%s)\n", s->ci_id, s->gi_id, s->profile); break;
            case GS_STEP_DESTROY_GI: printf("  destroy GPU instance %u (%s at %u:%u)\n", s->gi_id, s->profile, s->start, s->size); break;
            case GS_STEP_SET_MODE: printf("  set MIG mode %s\n", s->enable ? "enabled" : "disabled"); break;
            case GS_STEP_CREATE_GI: printf("  create GPU instance %s at %u:%u\n", s->profile, s->start, s->size); break;
            case GS_STEP_CREATE_CI:
                if (s->new_gi >= 0)
                    printf("  create its compute instance (%s)\n", s->profile);
                else
                    printf("  create the compute instance of GI %u (%s)\n", s->gi_id, s->profile);
                break;
            }
        }
        if (p->needs_mode_change && p->steps[p->n_steps - 1].kind == GS_STEP_SET_MODE && p->steps[p->n_steps - 1].enable)
            printf("  then: plan the instances (MIG profiles can be read once MIG mode is on)\n");
        if (p->n_busy) {
            printf("  in use by process(es):");
            for (unsigned k = 0; k < p->n_busy; k++)
                printf(" %u", p->busy_pids[k]);
            printf(" (apply refuses unless --force)\n");
        }
        char held[1024];
        if (gs_mig_plan_held(&inv->gpus[i], p, holds, held, sizeof(held)))
            printf("  assigned to pods: %s (apply refuses unless --force)\n", held);
        total += p->n_steps;
    }
    printf("%u step(s) in total\n", total);
}

static int load_layouts(const char *file, struct gs_layout_file **out);

int cli_mig_preview(const struct gs_inventory *inv, const char *file, const char *config, bool print,
                    unsigned *steps) {
    *steps = 0;
    struct gs_layout_file *layouts = NULL;
    int rc = load_layouts(file && file[0] ? file : NULL, &layouts);
    if (rc != GS_EXIT_OK)
        return rc;
    char err[2048];
    struct gs_mig_plan *plans = calloc(GS_MAX_GPUS, sizeof(*plans));
    bool selected[GS_MAX_GPUS];
    int r = plans ? gs_mig_plan_node(inv, layouts, config, plans, selected, err, sizeof(err)) : -ENOMEM;
    if (r < 0) {
        fprintf(stderr, "gpuslice: MIG layout %s: %s\n", config, plans ? err : "out of memory");
        rc = GS_EXIT_FAILURE;
    } else {
        for (unsigned i = 0; i < inv->n_gpus; i++)
            *steps += selected[i] ? plans[i].n_steps : 0;
        if (print) {
            static const struct gs_mig_holds no_holds;
            printf("MIG layout %s%s%s (gpuslice.mig.config), applied by the agent before it serves:\n", config,
                   layouts ? " from " : "", layouts ? file : "");
            print_plan(inv, plans, selected, &no_holds);
        }
    }
    free(plans);
    free(layouts);
    return rc;
}

static int load_layouts(const char *file, struct gs_layout_file **out) {
    *out = NULL;
    if (!file)
        return GS_EXIT_OK;
    *out = malloc(sizeof(**out));
    char err[512];
    if (!*out || gs_miglayout_load(file, *out, err, sizeof(err)) < 0) {
        fprintf(stderr, "gpuslice mig: %s\n", *out ? err : "out of memory");
        free(*out);
        *out = NULL;
        return GS_EXIT_FAILURE;
    }
    return GS_EXIT_OK;
}

/* What the kubelet has assigned to pods, from its PodResources socket at path. No socket there: no
 * kubelet on this node (said), nothing held. A socket that does not answer is an error, unless
 * the answer does not matter (force, or only a plan): then a warning. */
static int read_holds(const char *cmd, const char *path, const struct gs_inventory *inv, bool must,
                      struct gs_mig_holds *out) {
    memset(out, 0, sizeof(*out));
    struct stat st;
    if (stat(path, &st) < 0 && errno == ENOENT) {
        fprintf(stderr, "gpuslice mig %s: no kubelet on this node (no PodResources socket %s): only processes "
                        "count as in use\n", cmd, path);
        return GS_EXIT_OK;
    }
    struct pr_list l;
    char err[512];
    if (pr_list(path, 5000, &l, err, sizeof(err)) < 0) {
        fprintf(stderr, "gpuslice mig %s: cannot ask the kubelet which pods hold which devices (PodResources %s): "
                        "%s%s\n", cmd, path, err, must ? "; nothing is changed (--force goes on without it)"
                                                       : ": going on without it");
        return must ? GS_EXIT_FAILURE : GS_EXIT_OK;
    }
    int r = gs_mig_holds_find(inv, &l, out);
    pr_list_free(&l);
    if (r < 0) {
        fprintf(stderr, "gpuslice mig %s: out of memory\n", cmd);
        return GS_EXIT_FAILURE;
    }
    return GS_EXIT_OK;
}

/* SIGINT, SIGTERM and SIGHUP wait while an apply runs: stopped between two NVML calls it would
 * leave a layout half applied. The first one that came is reported afterwards. */
static void apply_signals(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGHUP);
}

/* 0, or the signal that came while the apply ran (taken: it does not fire later). */
static int apply_interrupted(void) {
    sigset_t set;
    apply_signals(&set);
    struct timespec now = { 0, 0 };
    int sig = sigtimedwait(&set, NULL, &now);
    return sig > 0 ? sig : 0;
}

static int cmd_plan_apply(const struct cli *cli, const char *file, const char *config, bool apply, bool force,
                          const char *pod_resources) {
    struct gs_layout_file *layouts;
    int rc = load_layouts(file, &layouts);
    if (rc != GS_EXIT_OK)
        return rc;
    if (!(layouts && gs_miglayout_find(layouts, config)) && !gs_mig_builtin_name(config)) {
        char why[1024];
        gs_miglayout_unknown_config(layouts, config, why, sizeof(why));
        fprintf(stderr, "gpuslice mig: %s\n", why);
        free(layouts);
        return GS_EXIT_FAILURE;
    }
    if (apply) {
        sigset_t set;
        apply_signals(&set);
        pthread_sigmask(SIG_BLOCK, &set, NULL); /* for the rest of the process: it ends after the apply */
    }
    struct gpu_node *node;
    struct gs_inventory *inv;
    if ((rc = read_node(cli, &node, &inv)) != GS_EXIT_OK) {
        free(layouts);
        return rc;
    }
    char err[2048];
    struct gs_mig_plan *plans = calloc(GS_MAX_GPUS, sizeof(*plans));
    bool selected[GS_MAX_GPUS];
    struct gs_mig_holds holds = { 0 };
    int r = plans ? gs_mig_plan_node(inv, layouts, config, plans, selected, err, sizeof(err)) : -ENOMEM;
    if (r < 0) {
        fprintf(stderr, "gpuslice mig: %s\n", plans ? err : "out of memory");
        rc = GS_EXIT_FAILURE;
    } else if ((rc = read_holds(apply ? "apply" : "plan", pod_resources, inv, apply && !force, &holds)) != GS_EXIT_OK) {
        /* said why; nothing is changed */
    } else if (!apply) {
        print_plan(inv, plans, selected, &holds);
    } else {
        struct gs_mig_apply_result res;
        r = gs_mig_apply_node_held(node, layouts, config, &holds, force, &res, err, sizeof(err));
        if (r == -EAGAIN && res.n_reset) {
            printf("applied %s to the other GPUs: %u step(s) (%u created, %u destroyed, %u mode change(s)), %u "
                   "instance(s) kept\n", config, res.steps_done, res.creates, res.destroys, res.mode_changes, res.kept);
            fprintf(stderr, "gpuslice mig apply: %u GPU(s) need a GPU reset before their layout: %s\n", res.n_reset,
                    err);
            rc = GS_EXIT_FAILURE;
        } else if (r < 0) {
            fprintf(stderr, "gpuslice mig apply: %s\n", err);
            fprintf(stderr, "gpuslice mig apply: %u step(s) were done before that; running the apply again "
                            "continues from the current state\n", res.steps_done);
            rc = GS_EXIT_FAILURE;
        } else {
            printf("applied %s: %u step(s) (%u created, %u destroyed, %u mode change(s)), %u instance(s) kept\n",
                   config, res.steps_done, res.creates, res.destroys, res.mode_changes, res.kept);
        }
        int sig = apply_interrupted();
        if (sig) {
            fprintf(stderr, "gpuslice mig apply: %s came while the apply ran; it was let finish first%s\n",
                    strsignal(sig), r < 0 ? " (and failed, as said above)" : "");
            rc = 128 + sig;
        }
    }
    gs_mig_holds_free(&holds);
    free(plans);
    free(inv);
    free(layouts);
    gpu_node_close(node);
    return rc;
}

int cmd_mig(const struct cli *cli, int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        mig_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? GS_EXIT_USAGE : GS_EXIT_OK;
    }
    const char *sub = argv[1];
    static const struct option opts[] = {
        { "file", required_argument, NULL, 'f' }, { "config", required_argument, NULL, 'c' },
        { "force", no_argument, NULL, 'F' },      { "json", no_argument, NULL, 'j' },
        { "help", no_argument, NULL, 'h' },       { "pod-resources-socket", required_argument, NULL, 'P' },
        { 0 },
    };
    const char *file = NULL, *config = NULL, *pod_resources = GS_PODRESOURCES_SOCKET;
    bool force = false, as_json = false;
    int c;
    optind = 0;
    while ((c = getopt_long(argc - 1, argv + 1, "f:c:jh", opts, NULL)) != -1) {
        switch (c) {
        case 'f': file = optarg; break;
        case 'c': config = optarg; break;
        case 'F': force = true; break;
        case 'P': pod_resources = optarg; break;
        case 'j': as_json = true; break;
        case 'h': mig_usage(stdout); return GS_EXIT_OK;
        default: return GS_EXIT_USAGE;
        }
    }
    if (optind < argc - 1) {
        fprintf(stderr, "gpuslice mig %s: unexpected argument '%s'\n", sub, argv[optind + 1]);
        return GS_EXIT_USAGE;
    }
    if (!strcmp(sub, "show"))
        return cmd_show(cli, as_json);
    if (!strcmp(sub, "export"))
        return cmd_export(cli);
    if (!strcmp(sub, "plan") || !strcmp(sub, "apply")) {
        if (!config) {
            fprintf(stderr, "gpuslice mig %s: -c NAME is required\n", sub);
            return GS_EXIT_USAGE;
        }
        return cmd_plan_apply(cli, file, config, !strcmp(sub, "apply"), force, pod_resources);
    }
    fprintf(stderr, "gpuslice mig: unknown command '%s'\n\n", sub);
    mig_usage(stderr);
    return GS_EXIT_USAGE;
}
