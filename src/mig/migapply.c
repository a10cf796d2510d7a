/* migapply.c: MIG layout application (see migapply.h). */
#include "mig/migapply.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog/catalog.h"
#include "util/log.h"
#include "util/util.h"

/* A GPU whose MIG mode is off cannot list its profiles (NVML answers NOT_SUPPORTED), so a layout
 * for it is checked against the catalogue's table for its model, when the catalogue knows it,
 * before the mode is changed: a layout that cannot work then fails without touching the GPU. */
/* Resolves an item's profile names on GPU g; errors point at the count's line and column. */
static int layout_from_item(const struct gs_gpu *g, const struct gs_layout_file *file, const char *config,
                            const struct gs_layout_item *it, struct gs_mig_layout *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    out->mig_enabled = true;
    for (unsigned k = 0; k < it->n_counts; k++) {
        const struct gs_layout_count *c = &it->counts[k];
        if (!c->count)
            continue; /* "1g.5gb": 0 asks for nothing, even on a GPU without that profile */
        char why[512];
        const char *name = c->profile;
        unsigned count = c->count;
        struct gs_mig_layout one;
        if (gs_mig_layout_from_names(g, true, &name, &count, 1, &one, why, sizeof(why)) < 0) {
            snprintf(err, errlen, "%s:%u:%u: mig-configs.%s: %s", file->name, c->line, c->column, config, why);
            return -EINVAL;
        }
        for (unsigned i = 0; i < one.n; i++) {
            if (out->n == GS_MIG_MAX_INSTANCES) {
                snprintf(err, errlen, "%s:%u: mig-configs.%s: GPU %u: more than %d MIG instances", file->name,
                         it->line, config, g->index, GS_MIG_MAX_INSTANCES);
                return -ENOSPC;
            }
            out->profile_ids[out->n++] = one.profile_ids[i];
        }
    }
    return 0;
}

int gs_mig_resolve(const struct gs_inventory *inv, const struct gs_layout_file *file, const char *config,
                   struct gs_mig_layout layouts[GS_MAX_GPUS], bool selected[GS_MAX_GPUS], char *err, size_t errlen) {
    const struct gs_layout_config *c = file ? gs_miglayout_find(file, config) : NULL;
    if (!c && !gs_mig_builtin_name(config)) {
        snprintf(err, errlen, "%s%sno MIG config '%s' (built-in: all-disabled, all-enabled, all-balanced, "
                 "all-<profile>)", file ? file->name : "", file ? ": " : "", config);
        return -ENOENT;
    }
    int rc = gs_miglayout_check_gpus(file, c, inv->n_gpus, err, errlen);
    if (rc < 0)
        return rc;
    struct gs_gpu *shadow = malloc(sizeof(*shadow));
    if (!shadow)
        return -ENOMEM;
    int r = 0;
    for (unsigned i = 0; i < inv->n_gpus && r == 0; i++) {
        const struct gs_gpu *g = &inv->gpus[i];
        memset(&layouts[i], 0, sizeof(layouts[i]));
        selected[i] = false;
        const struct gs_layout_item *it = c ? gs_layout_item_for(c, g->index, g->pci_device_id) : NULL;
        if (c && !it)
            continue;
        if (g->lost || g->error[0]) {
            snprintf(err, errlen, "GPU %u cannot be read (%s): nothing is changed", i, g->lost ? "lost" : g->error);
            r = -ENODEV;
            break;
        }
        if (!g->mig_capable)
            continue; /* as mig-parted: GPUs without MIG are left alone */
        selected[i] = true;
        /* Profiles readable now, or (MIG off) the catalogue's for this model, for checking only. */
        const struct gs_gpu *table = g;
        const struct gs_model *model = NULL;
        if (!g->mig_current && (model = gs_catalog_find_pci(g->pci_device_id)) && model->mig_mem_slices) {
            gs_mig_gpu_from_model(model, shadow);
            shadow->index = g->index;
            gs_strlcpy(shadow->name, g->name, sizeof(shadow->name));
            shadow->mem_total = g->mem_total;
            table = shadow;
        }
        struct gs_mig_layout want;
        if (!c) {
            r = gs_mig_builtin(table, config, &want, err, errlen);
            if (r == -EINVAL && table == g && !g->mig_current) {
                r = 0; /* unknown model with MIG off: enable first, resolve on the next pass */
                layouts[i].mig_enabled = true;
                continue;
            }
        } else if (!it->mig_enabled) {
            memset(&want, 0, sizeof(want));
        } else if (table == g && !g->mig_current) {
            layouts[i].mig_enabled = true; /* unknown model: names are resolved once MIG is on */
            continue;
        } else {
            r = layout_from_item(table, file, config, it, &want, err, errlen);
        }
        if (r < 0)
            break;
        if (want.mig_enabled && want.n) {
            struct gs_mig_solution sol;
            struct gs_gpu empty = *table;
            empty.n_gis = 0;
            char why[512];
            if (gs_mig_solve(&empty, &want, &sol, why, sizeof(why)) < 0) {
                snprintf(err, errlen, "GPU %u: %s%s%s", i, why, c ? " (config " : "", c ? config : "");
                if (c)
                    strncat(err, ")", errlen - strlen(err) - 1);
                r = -ENOSPC;
                break;
            }
        }
        /* Only profile IDs read from this GPU go into a plan; with MIG off the layout is the mode. */
        if (table == g)
            layouts[i] = want;
        else
            layouts[i].mig_enabled = want.mig_enabled;
    }
    free(shadow);
    return r;
}

/* Test hook for crash-safety tests (SQLite style): exit abruptly after N state-changing steps. */
static unsigned long fault_budget(void) {
    const char *s = getenv("GPUSLICE_FAULT_EXIT_AFTER_STEPS");
    unsigned long long v;
    return s && gs_parse_uint(s, 1, 1000000, &v) == 0 ? (unsigned long)v : 0;
}

static unsigned long steps_taken;

static void maybe_crash(void) {
    unsigned long budget = fault_budget();
    if (budget && ++steps_taken >= budget)
        _exit(99);
}

static int run_step(struct gpu_node *node, const struct gs_mig_plan *plan, unsigned i, unsigned *new_gi_ids,
                    struct gs_mig_apply_result *res, char *err, size_t errlen) {
    const struct gs_mig_step *s = &plan->steps[i];
    int r = 0;
    char uuid[GS_UUID_LEN] = "";
    unsigned ci_id = 0;
    switch (s->kind) {
    case GS_STEP_DESTROY_CI:
        r = gpu_ci_destroy(node, s->gpu, s->gi_id, s->ci_id);
        if (r == 0) {
            log_info("GPU %u: destroyed compute instance %u of GI %u (%s)", s->gpu, s->ci_id, s->gi_id, s->profile);
            res->destroys++;
        }
        break;
    case GS_STEP_DESTROY_GI:
        r = gpu_gi_destroy(node, s->gpu, s->gi_id);
        if (r == 0) {
            log_info("GPU %u: destroyed GPU instance %u (%s at %u:%u)", s->gpu, s->gi_id, s->profile, s->start, s->size);
            res->destroys++;
        }
        break;
    case GS_STEP_SET_MODE: {
        nvmlReturn_t act = NVML_SUCCESS;
        r = gpu_mig_set_mode(node, s->gpu, s->enable, &act);
        if (r == 0)
            log_info("GPU %u: MIG mode set to %s%s", s->gpu, s->enable ? "enabled" : "disabled",
                     act == NVML_ERROR_RESET_REQUIRED ? " (pending until a GPU reset)" : "");
        break;
    }
    case GS_STEP_CREATE_GI:
        r = gpu_gi_create(node, s->gpu, s->profile_id, s->start, &new_gi_ids[i]);
        if (r == 0) {
            log_info("GPU %u: created GPU instance %u: %s at %u:%u", s->gpu, new_gi_ids[i], s->profile, s->start,
                     s->size);
            res->creates++;
        }
        break;
    case GS_STEP_CREATE_CI: {
        unsigned gi = s->new_gi >= 0 ? new_gi_ids[s->new_gi] : s->gi_id;
        r = gpu_ci_create_full(node, s->gpu, gi, &ci_id, uuid, sizeof(uuid));
        if (r == 0) {
            log_info("GPU %u: created compute instance %u in GI %u (%s): %s", s->gpu, ci_id, gi, s->profile, uuid);
            res->creates++;
        }
        break;
    }
    }
    if (r < 0) {
        snprintf(err, errlen, "GPU %u: %s%s%s failed: %s", s->gpu, gs_mig_step_name(s->kind), s->profile[0] ? " " : "",
                 s->profile, gpu_node_error(node));
        return r;
    }
    res->steps_done++;
    maybe_crash();
    return 0;
}

/* Plans GPU i of inv towards layout: around what h holds when relay is given (relay.h), else
 * exactly; an error is prefixed with the GPU. */
static int plan_gpu(const struct gs_inventory *inv, unsigned i, const struct gs_mig_layout *layout,
                    const struct gs_mig_holds *h, struct gs_mig_relay *relay, struct gs_mig_plan *plan, char *err,
                    size_t errlen) {
    int r = relay ? gs_mig_relay_plan(&inv->gpus[i], layout, h, plan, relay, err, errlen)
                  : gs_mig_diff(&inv->gpus[i], layout, plan, err, errlen);
    if (r < 0) {
        char tmp[512];
        gs_strlcpy(tmp, err, sizeof(tmp));
        snprintf(err, errlen, "GPU %u: %s", i, tmp);
    }
    return r;
}

int gs_mig_plan_node_keep_held(const struct gs_inventory *inv, const struct gs_layout_file *file, const char *config,
                               const struct gs_mig_holds *holds, struct gs_mig_plan plans[GS_MAX_GPUS],
                               bool selected[GS_MAX_GPUS], struct gs_mig_relay *relays, char *err, size_t errlen) {
    struct gs_mig_layout *layouts = calloc(GS_MAX_GPUS, sizeof(*layouts));
    if (!layouts)
        return -ENOMEM;
    int r = gs_mig_resolve(inv, file, config, layouts, selected, err, errlen);
    for (unsigned i = 0; r == 0 && i < inv->n_gpus; i++) {
        memset(&plans[i], 0, sizeof(plans[i]));
        plans[i].gpu = i;
        if (relays)
            memset(&relays[i], 0, sizeof(relays[i]));
        if (selected[i])
            r = plan_gpu(inv, i, &layouts[i], holds, relays ? &relays[i] : NULL, &plans[i], err, errlen);
    }
    free(layouts);
    return r;
}

int gs_mig_plan_node(const struct gs_inventory *inv, const struct gs_layout_file *file, const char *config,
                     struct gs_mig_plan plans[GS_MAX_GPUS], bool selected[GS_MAX_GPUS], char *err, size_t errlen) {
    return gs_mig_plan_node_keep_held(inv, file, config, NULL, plans, selected, NULL, err, errlen);
}

static void note_reset(struct gs_mig_apply_result *res, unsigned gpu) {
    for (unsigned k = 0; k < res->n_reset; k++)
        if (res->reset_gpus[k] == gpu)
            return;
    res->reset_gpus[res->n_reset++] = gpu;
}

/* One pass: validate every selected GPU's plan, then execute them. GPUs whose MIG mode waits for
 * a reset are left out (noted in res): nothing can change on them, and the others do not depend
 * on them (each GPU's layout is its own). With relays (and not force), each GPU is planned around
 * what pods hold (relay.h) and relays[i] says what was kept and not made. */
static int apply_pass(struct gpu_node *node, const struct gs_inventory *inv, const struct gs_mig_layout *layouts,
                      const bool *selected, const struct gs_mig_holds *holds, bool force, struct gs_mig_relay *relays,
                      struct gs_mig_plan *plans, bool first, struct gs_mig_apply_result *res, bool *mode_changed,
                      char *err, size_t errlen) {
    int r;
    for (unsigned i = 0; i < inv->n_gpus; i++) {
        memset(&plans[i], 0, sizeof(plans[i]));
        struct gs_mig_relay *relay = relays && !force ? &relays[i] : NULL;
        if (selected[i] && (r = plan_gpu(inv, i, &layouts[i], holds, relay, &plans[i], err, errlen)) < 0)
            return r;
    }
    /* Validate the whole pass before changing anything. */
    bool skip[GS_MAX_GPUS] = { false };
    for (unsigned i = 0; i < inv->n_gpus; i++) {
        const struct gs_mig_plan *p = &plans[i];
        if (!selected[i])
            continue;
        if (p->reset_pending) {
            skip[i] = true;
            note_reset(res, i);
            continue;
        }
        if (p->n_busy && !force) {
            size_t n = (size_t)snprintf(err, errlen, "GPU %u (%s): the layout destroys MIG instances in use by "
                                        "process(es)", i, inv->gpus[i].name);
            for (unsigned k = 0; k < p->n_busy && n < errlen; k++)
                n += (size_t)snprintf(err + n, errlen - n, "%s %u", k ? "," : "", p->busy_pids[k]);
            if (n < errlen)
                snprintf(err + n, errlen - n, "; stop them or use --force");
            return -EBUSY;
        }
        char held[768];
        if (gs_mig_plan_held(&inv->gpus[i], p, holds, held, sizeof(held))) {
            if (!force) {
                snprintf(err, errlen, "GPU %u (%s): the layout destroys what the kubelet has assigned to pods: %s; "
                         "end those pods or use --force", i, inv->gpus[i].name, held);
                return -EBUSY;
            }
            log_warn("GPU %u: forced: destroying what the kubelet has assigned to pods: %s", i, held);
        }
    }
    res->passes++;
    *mode_changed = false;
    for (unsigned i = 0; i < inv->n_gpus; i++) {
        const struct gs_mig_plan *p = &plans[i];
        if (!selected[i] || skip[i])
            continue;
        if (first)
            res->kept += p->kept;
        unsigned new_gi_ids[GS_MIG_MAX_STEPS] = { 0 };
        for (unsigned k = 0; k < p->n_steps; k++) {
            if ((r = run_step(node, p, k, new_gi_ids, res, err, errlen)) < 0)
                return r;
            if (p->steps[k].kind == GS_STEP_SET_MODE) {
                res->mode_changes++;
                *mode_changed = true;
            }
        }
    }
    return 0;
}

/* -EAGAIN, naming each GPU of res->reset_gpus (as inv, the last read, has it) and what to do. */
static int reset_needed(const struct gs_inventory *inv, const struct gs_mig_apply_result *res, char *err,
                        size_t errlen) {
    size_t n = 0;
    for (unsigned k = 0; k < res->n_reset && n < errlen; k++) {
        unsigned i = res->reset_gpus[k];
        n += (size_t)snprintf(err + n, errlen - n, "%sGPU %u (%s): MIG mode is pending %s and takes effect only after "
                              "a GPU reset (nvidia-smi -r -i %u, or a reboot; on the simulated node: gpuslice sim "
                              "reset-gpu %u)", k ? "; " : "", i, inv->gpus[i].name,
                              inv->gpus[i].mig_pending ? "enable" : "disable", i, i);
    }
    if (n < errlen)
        snprintf(err + n, errlen - n, "; then run the apply again");
    return -EAGAIN;
}

/* Passes until nothing is left to do: a MIG mode change makes another pass, whose layouts
 * (re)resolved by `resolve` can then name profiles. */
static int apply_passes(struct gpu_node *node, const struct gs_layout_file *file, const char *config,
                        const struct gs_mig_layout *fixed, const bool *fixed_selected,
                        const struct gs_mig_holds *holds, bool force, struct gs_mig_relay *relays,
                        struct gs_mig_apply_result *res, char *err, size_t errlen) {
    memset(res, 0, sizeof(*res));
    if (relays)
        memset(relays, 0, sizeof(*relays) * GS_MAX_GPUS);
    struct gs_inventory *inv = malloc(sizeof(*inv));
    struct gs_mig_plan *plans = calloc(GS_MAX_GPUS, sizeof(*plans));
    struct gs_mig_layout *layouts = calloc(GS_MAX_GPUS, sizeof(*layouts));
    bool selected[GS_MAX_GPUS] = { false };
    int r = -ENOMEM;
    if (!inv || !plans || !layouts) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    for (int pass = 0; pass < 3; pass++) {
        if ((r = gpu_inventory_read(node, inv)) < 0) {
            snprintf(err, errlen, "cannot read the GPUs: %s", gpu_node_error(node));
            goto out;
        }
        if (fixed) {
            memcpy(layouts, fixed, sizeof(*layouts) * inv->n_gpus);
            memcpy(selected, fixed_selected, sizeof(bool) * inv->n_gpus);
        } else if ((r = gs_mig_resolve(inv, file, config, layouts, selected, err, errlen)) < 0) {
            goto out;
        }
        bool mode_changed;
        r = apply_pass(node, inv, layouts, selected, holds, force, relays, plans, pass == 0, res, &mode_changed,
                       err, errlen);
        if (r < 0)
            goto out;
        if (!mode_changed)
            break;
    }
    for (unsigned i = 0; relays && i < inv->n_gpus; i++)
        res->n_partial += relays[i].partial;
    r = res->n_reset ? reset_needed(inv, res, err, errlen) : 0;
out:
    free(inv);
    free(plans);
    free(layouts);
    return r;
}

int gs_mig_apply_node_held(struct gpu_node *node, const struct gs_layout_file *file, const char *config,
                           const struct gs_mig_holds *holds, bool force, struct gs_mig_apply_result *res, char *err,
                           size_t errlen) {
    return apply_passes(node, file, config, NULL, NULL, holds, force, NULL, res, err, errlen);
}

int gs_mig_apply_node_keep_held(struct gpu_node *node, const struct gs_layout_file *file, const char *config,
                                const struct gs_mig_holds *holds, bool force, struct gs_mig_apply_result *res,
                                struct gs_mig_relay relays[GS_MAX_GPUS], char *err, size_t errlen) {
    return apply_passes(node, file, config, NULL, NULL, holds, force, relays, res, err, errlen);
}

int gs_mig_apply_node(struct gpu_node *node, const struct gs_layout_file *file, const char *config, bool force,
                      struct gs_mig_apply_result *res, char *err, size_t errlen) {
    return apply_passes(node, file, config, NULL, NULL, NULL, force, NULL, res, err, errlen);
}

int gs_mig_apply_layouts(struct gpu_node *node, const struct gs_mig_layout layouts[GS_MAX_GPUS],
                         const bool selected[GS_MAX_GPUS], bool force, struct gs_mig_apply_result *res, char *err,
                         size_t errlen) {
    return apply_passes(node, NULL, NULL, layouts, selected, NULL, force, NULL, res, err, errlen);
}
