/* inspect.c: `gpuslice inspect [--json]`: everything gpuslice sees on the node. Read-only: it
 * never changes MIG mode or resets anything, so it is safe on a production GPU node.
 * The JSON form is a stable interface (schema "gpuslice.inspect/v1", docs/cli.md). */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "util/util.h"

static const char *health(const struct gs_gpu *g) {
    if (g->lost)
        return "lost";
    return g->error[0] ? "error" : "ok";
}

static json_t *placement_json(unsigned start, unsigned size) {
    return json_pack("{s:i,s:i}", "start", (int)start, "size", (int)size);
}

static json_t *mig_json(const struct gs_gpu *g) {
    if (!g->mig_capable)
        return json_pack("{s:b}", "capable", 0);
    json_t *profiles = json_array();
    for (unsigned i = 0; i < g->n_profiles; i++) {
        const struct gs_gi_profile *p = &g->profiles[i];
        json_t *pl = json_array();
        for (unsigned k = 0; k < p->n_starts; k++)
            json_array_append_new(pl, placement_json(p->starts[k], p->placement_size));
        json_array_append_new(profiles, json_pack("{s:i,s:s,s:i,s:I,s:i,s:i,s:i,s:o}", "id", (int)p->id, "name",
                                                  p->name, "slices", (int)p->slices, "memory_mib",
                                                  (json_int_t)p->mem_mib, "sm", (int)p->sm, "max_instances",
                                                  (int)p->max_instances, "free", (int)p->remaining, "placements",
                                                  pl));
    }
    json_t *gis = json_array();
    for (unsigned i = 0; i < g->n_gis; i++) {
        const struct gs_gpu_instance *gi = &g->gis[i];
        const struct gs_gi_profile *p = gs_gpu_profile_by_id(g, gi->profile_id);
        json_array_append_new(gis, json_pack("{s:i,s:i,s:s,s:o,s:i}", "id", (int)gi->id, "profile_id",
                                             (int)gi->profile_id, "profile", p ? p->name : "", "placement",
                                             placement_json(gi->start, gi->size), "compute_instances",
                                             (int)gi->n_ci));
    }
    json_t *devs = json_array();
    for (unsigned i = 0; i < g->n_mig; i++) {
        const struct gs_mig_device *m = &g->mig[i];
        json_array_append_new(devs, json_pack("{s:s,s:i,s:i,s:s,s:i,s:i,s:o,s:I,s:i}", "uuid", m->uuid, "gi_id",
                                              (int)m->gi_id, "ci_id", (int)m->ci_id, "profile", m->profile,
                                              "gi_profile_id", (int)m->gi_profile_id, "ci_profile_id",
                                              (int)m->ci_profile_id, "placement", placement_json(m->start, m->size),
                                              "memory_mib", (json_int_t)m->mem_mib, "sm", (int)m->sm));
    }
    return json_pack("{s:b,s:s,s:s,s:i,s:o,s:o,s:o}", "capable", 1, "current",
                     g->mig_current ? "enabled" : "disabled", "pending", g->mig_pending ? "enabled" : "disabled",
                     "memory_slices", (int)g->mig_mem_slices, "profiles", profiles, "gpu_instances", gis, "devices",
                     devs);
}

static json_t *inventory_json(const struct gs_inventory *inv, const char *lib) {
    json_t *gpus = json_array();
    for (unsigned i = 0; i < inv->n_gpus; i++) {
        const struct gs_gpu *g = &inv->gpus[i];
        json_t *jg = json_object();
        json_object_set_new(jg, "index", json_integer(g->index));
        json_object_set_new(jg, "health", json_string(health(g)));
        json_object_set_new(jg, "error", g->error[0] ? json_string(g->error) : json_null());
        if (g->error[0]) {
            json_array_append_new(gpus, jg);
            continue;
        }
        char cc[16], pci[16];
        snprintf(cc, sizeof(cc), "%d.%d", g->cc_major, g->cc_minor);
        snprintf(pci, sizeof(pci), "0x%08X", g->pci_device_id);
        json_object_set_new(jg, "uuid", json_string(g->uuid));
        json_object_set_new(jg, "name", json_string(g->name));
        json_object_set_new(jg, "minor", json_integer(g->minor));
        json_object_set_new(jg, "pci_bus_id", json_string(g->bus_id));
        json_object_set_new(jg, "pci_device_id", json_string(pci));
        json_object_set_new(jg, "architecture", json_string(gs_arch_name(g->arch)));
        json_object_set_new(jg, "compute_capability", json_string(cc));
        json_object_set_new(jg, "memory", json_pack("{s:I,s:I}", "total_mib", (json_int_t)(g->mem_total >> 20),
                                                    "used_mib", (json_int_t)(g->mem_used >> 20)));
        json_object_set_new(jg, "utilization",
                            g->util_valid ? json_pack("{s:i,s:i}", "gpu", (int)g->util_gpu, "memory", (int)g->util_mem)
                                          : json_null());
        static const char *const modes[] = { "default", "exclusive_thread", "prohibited", "exclusive_process" };
        json_object_set_new(jg, "compute_mode",
                            g->compute_mode >= 0 && g->compute_mode <= 3 ? json_string(modes[g->compute_mode]) : json_null());
        json_object_set_new(jg, "temperature_c", g->temp_valid ? json_integer(g->temperature_c) : json_null());
        json_object_set_new(jg, "power_w", g->power_valid ? json_real(g->power_mw / 1000.0) : json_null());
        json_object_set_new(jg, "mig", mig_json(g));
        json_t *procs = json_array();
        for (unsigned k = 0; k < g->n_procs; k++) {
            const struct gs_process *p = &g->procs[k];
            json_array_append_new(procs, json_pack("{s:i,s:I,s:o,s:o}", "pid", (int)p->pid, "used_memory_mib",
                                                   (json_int_t)(p->mem_bytes >> 20), "gi_id",
                                                   p->gi_id < 0 ? json_null() : json_integer(p->gi_id), "ci_id",
                                                   p->ci_id < 0 ? json_null() : json_integer(p->ci_id)));
        }
        json_object_set_new(jg, "processes", procs);
        json_array_append_new(gpus, jg);
    }
    char cuda[16];
    snprintf(cuda, sizeof(cuda), "%d.%d", inv->cuda_driver_version / 1000, inv->cuda_driver_version % 1000 / 10);
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "schema", "gpuslice.inspect/v1", "nvml_library", lib,
                     "driver_version", inv->driver_version, "cuda_driver_version", cuda, "gpus", gpus);
}

static void print_table(const struct gs_inventory *inv, const char *lib) {
    printf("Node: %u GPU(s), driver %s, CUDA %d.%d (NVML: %s)\n", inv->n_gpus, inv->driver_version,
           inv->cuda_driver_version / 1000, inv->cuda_driver_version % 1000 / 10, lib);
    for (unsigned i = 0; i < inv->n_gpus; i++) {
        const struct gs_gpu *g = &inv->gpus[i];
        printf("\nGPU %u", g->index);
        if (g->error[0]) {
            printf("  health %s: %s\n", health(g), g->error);
            continue;
        }
        printf("  %s  %s  %s\n", g->name, g->uuid, g->bus_id);
        printf("  memory      %llu MiB total, %llu MiB used\n", g->mem_total >> 20, g->mem_used >> 20);
        printf("  arch        %s, compute capability %d.%d\n", gs_arch_name(g->arch), g->cc_major, g->cc_minor);
        printf("  health      %s\n", health(g));
        if (g->util_valid)
            printf("  utilization gpu %u%%, memory %u%%\n", g->util_gpu, g->util_mem);
        if (!g->mig_capable) {
            printf("  MIG         not supported\n");
        } else {
            printf("  MIG         %s", g->mig_current ? "enabled" : "disabled");
            if (g->mig_pending != g->mig_current)
                printf(" (pending %s: needs a GPU reset)", g->mig_pending ? "enabled" : "disabled");
            printf("\n");
            for (unsigned k = 0; k < g->n_gis; k++) {
                const struct gs_gpu_instance *gi = &g->gis[k];
                const struct gs_gi_profile *p = gs_gpu_profile_by_id(g, gi->profile_id);
                printf("  GI %-2u       %-12s placement %u:%u, %u compute instance(s)\n", gi->id, p ? p->name : "?",
                       gi->start, gi->size, gi->n_ci);
                for (unsigned m = 0; m < g->n_mig; m++)
                    if (g->mig[m].gi_id == gi->id)
                        printf("    CI %-2u     %-12s %s\n", g->mig[m].ci_id, g->mig[m].profile, g->mig[m].uuid);
            }
            if (g->mig_current && g->n_profiles) {
                printf("  free        ");
                for (unsigned k = 0; k < g->n_profiles; k++)
                    printf("%s%s x%u", k ? ", " : "", g->profiles[k].name, g->profiles[k].remaining);
                printf("\n");
            }
        }
        for (unsigned k = 0; k < g->n_procs; k++) {
            const struct gs_process *p = &g->procs[k];
            printf("  process     pid %u, %llu MiB", p->pid, p->mem_bytes >> 20);
            if (p->gi_id >= 0)
                printf(", GI %d CI %d", p->gi_id, p->ci_id);
            printf("\n");
        }
        if (g->procs_dropped)
            printf("  process     ... and %u more\n", g->procs_dropped);
    }
}

int cmd_inspect(const struct cli *cli, int argc, char **argv) {
    static const struct option opts[] = { { "json", no_argument, NULL, 'j' }, { "help", no_argument, NULL, 'h' }, { 0 } };
    bool as_json = false;
    int c;
    while ((c = getopt_long(argc, argv, "jh", opts, NULL)) != -1) {
        switch (c) {
        case 'j': as_json = true; break;
        case 'h':
            printf("Usage: gpuslice [GLOBAL OPTIONS] inspect [--json]\n\n"
                   "Show every GPU: name, UUID, memory, architecture, MIG mode (current and pending), MIG\n"
                   "GPU and compute instances with profile, placement and UUID, free capacity per profile,\n"
                   "health and processes. Read-only.\n\n"
                   "  --json   print the stable JSON form (schema gpuslice.inspect/v1, docs/cli.md)\n");
            return GS_EXIT_OK;
        default: return GS_EXIT_USAGE;
        }
    }
    if (cli_no_more_args("inspect", argc, argv, optind) != GS_EXIT_OK)
        return GS_EXIT_USAGE;
    struct gpu_node *node;
    int rc = cli_open_node(cli, &node);
    if (rc != GS_EXIT_OK)
        return rc;
    _cleanup_free_ struct gs_inventory *inv = calloc(1, sizeof(*inv));
    if (!inv || gpu_inventory_read(node, inv) < 0) {
        fprintf(stderr, "gpuslice: failed to read the node: %s\n", inv ? gpu_node_error(node) : "out of memory");
        gpu_node_close(node);
        return GS_EXIT_FAILURE;
    }
    if (as_json) {
        json_t *j = inventory_json(inv, gpu_node_lib(node));
        char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        printf("%s\n", s);
        free(s);
        json_decref(j);
    } else {
        print_table(inv, gpu_node_lib(node));
    }
    gpu_node_close(node);
    return GS_EXIT_OK;
}
