/* state.c: the node's state machine on the agent's main thread (see state.h). */
#include "agent/state.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "agent/dra_glue.h"
#include "dra/dra.h"
#include "kubelet/podresources.h"
#include "mig/migapply.h"
#include "util/log.h"
#include "util/util.h"

/* ---- policy --------------------------------------------------------------------------------- */

static unsigned long long hash_text(const char *s, size_t n) {
    unsigned long long h = 0xCBF29CE484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001B3ULL;
    }
    return h;
}

/* Puts p (heap) in force: the handlers see it from now on, and the one it replaces is freed. */
static void set_policy(struct agent *a, struct gs_policy *p) {
    /* On the simulated node, "/" (the default) is its root: the host's has no driver of it. */
    const char *root = a->o->default_driver_root;
    if (root && root[0] && !strcmp(p->driver_root, "/"))
        gs_strlcpy(p->driver_root, root, sizeof(p->driver_root));
    if (root && root[0] && !strcmp(p->dev_root, "/"))
        gs_strlcpy(p->dev_root, root, sizeof(p->dev_root));
    /* gpuslice.dra.gpus: the DRA driver's GPUs; without the key, or without --dra, none (the
     * device plugins serve every GPU). */
    if (!a->o->dra && (p->dra_gpus == GS_DRA_ALL || p->dra_gpus == GS_DRA_LIST))
        log_warn("Policy %s: gpuslice.dra.gpus gives GPUs to the DRA driver, but the agent runs without --dra: the "
                 "device plugins serve them", a->o->config_path ? a->o->config_path : "(defaults)");
    if (!a->o->dra || p->dra_gpus == GS_DRA_UNSET)
        p->dra_gpus = GS_DRA_NONE;
    const struct gs_policy *old = agent_shared_set_policy(&a->shared, p);
    a->policy = p;
    free((void *)old);
}

int agent_load_policy(struct agent *a, bool initial) {
    /* On the heap: a policy is ~280 KiB, and stack pages once touched stay resident. */
    struct gs_policy *next = NULL;
    if (!a->o->config_path) {
        if (!(next = malloc(sizeof(*next))))
            return -ENOMEM;
        gs_policy_init(next);
        set_policy(a, next);
        return 1;
    }
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    char why[PATH_MAX + 128];
    /* Follows symbolic links: a ConfigMap's file is one, through ..data. A FIFO, socket or device
     * there is refused without blocking the loop. */
    int r = gs_read_file_ex(a->o->config_path, 1 << 20, 0, &text, &len, why, sizeof(why));
    if (r < 0) {
        log_error("Cannot read policy %s%s", why, initial ? "" : "; keeping the running policy");
        return r;
    }
    unsigned long long h = hash_text(text, len);
    if (!initial && h == a->policy_hash)
        return 0;
    next = malloc(sizeof(*next));
    if (!next) {
        log_error("Cannot load policy %s: out of memory%s", a->o->config_path,
                  initial ? "" : "; keeping the running policy");
        return -ENOMEM;
    }
    char err[512];
    r = gs_policy_parse(a->o->config_path, text, len, next, err, sizeof(err));
    if (r < 0) {
        log_error("Rejected policy: %s%s", err, initial ? "" : "; keeping the running policy");
        free(next);
        return r;
    }
    for (unsigned i = 0; i < next->n_warnings; i++)
        log_warn("Policy %s: %s", a->o->config_path, next->warnings[i]);
    set_policy(a, next);
    a->policy_hash = h;
    if (!initial)
        log_info("Applied the new policy from %s", a->o->config_path);
    return 1;
}

void agent_policy_job(void *ctx, uint64_t now_ns) {
    struct agent *a = ctx;
    (void)now_ns;
    int r = agent_load_policy(a, false);
    if (r != 0)
        agent_shared_count_reload(&a->shared, r > 0);
    if (r > 0) {
        agent_migmgr_start(a); /* a layout the policy did not have before */
        agent_reconcile_mig(a);
        agent_replan(a, true);
    }
}

/* ---- inventory and plan -------------------------------------------------------------------- */

/* A GPU that stops answering keeps its identity from the last good read, marked lost, so its
 * devices stay listed (as Unhealthy) instead of vanishing from the kubelet's view. */
static void merge_lost(struct gs_inventory *fresh, const struct gs_inventory *prev) {
    for (unsigned i = 0; i < fresh->n_gpus && prev && i < prev->n_gpus; i++) {
        struct gs_gpu *g = &fresh->gpus[i];
        if (g->uuid[0] || !prev->gpus[i].uuid[0])
            continue;
        bool lost = g->lost;
        char error[sizeof(g->error)];
        memcpy(error, g->error, sizeof(error));
        *g = prev->gpus[i];
        g->lost = lost || g->lost;
        memcpy(g->error, error, sizeof(error));
        if (!g->lost && !g->error[0])
            snprintf(g->error, sizeof(g->error), "unreadable");
    }
}

static void log_plan_changes(const struct gs_plan *old, const struct gs_plan *new) {
    for (unsigned i = 0; i < new->n_resources; i++) {
        const struct gs_resource *r = &new->resources[i];
        const struct gs_resource *o = old ? gs_plan_resource(old, r->name) : NULL;
        unsigned healthy = 0;
        for (unsigned k = 0; k < r->n_devices; k++)
            healthy += r->devices[k].healthy;
        if (!o || !gs_resource_equal(o, r))
            log_info("Advertising %s: %u devices, %u healthy", r->name, r->n_devices, healthy);
    }
    for (unsigned i = 0; old && i < old->n_resources; i++)
        if (!gs_plan_resource(new, old->resources[i].name))
            log_info("Withdrawing %s", old->resources[i].name);
}

void agent_dra_devices(struct agent *a) {
    if (!a->dra)
        return;
    struct dra_device devs[GS_MAX_GPUS];
    size_t n = dra_devices_of(a->inv, a->policy, devs, GS_MAX_GPUS);
    agent_dra_health(a, devs, n);
    dra_server_set_devices(a->dra, devs, n);
}

int agent_replan(struct agent *a, bool log_warnings) {
    struct gs_plan next;
    int r = gs_plan_build(a->inv, a->policy, &a->health, &next);
    if (r < 0) {
        log_error("Failed to build the plan: %s", strerror(-r));
        return r;
    }
    agent_coexist_apply(a, &next); /* resources another plugin serves (refuse: left out) */
    agent_dra_devices(a);
    agent_dra_publish(a, &next); /* what the slices say (the publisher's thread writes a change); GPUs held out */
    agent_mps_sync(a, &next);
    if (log_warnings)
        for (unsigned i = 0; i < next.n_warnings; i++)
            log_warn("%s", next.warnings[i]);
    if (a->plan_valid && gs_plan_equal(&a->plan, &next)) {
        gs_plan_free(&next);
        return 0;
    }
    log_plan_changes(a->plan_valid ? &a->plan : NULL, &next);
    agent_publish_cdi_spec(a); /* before any Allocate can name the new devices */
    r = dp_manager_sync(a->dp, &next);
    if (r < 0) {
        log_error("Failed to update the device plugins: %s", strerror(-r));
        gs_plan_free(&next);
        return r;
    }
    if (a->plan_valid)
        gs_plan_free(&a->plan);
    a->plan = next;
    a->plan_valid = true;
    agent_publish_labels(a);
    return 0;
}

void agent_refresh_inventory(struct agent *a) {
    struct gs_inventory *fresh = malloc(sizeof(*fresh));
    if (!fresh)
        return;
    int r = gpu_inventory_read_sysfs(a->node, a->o->sysfs_root, fresh);
    if (r < 0) {
        agent_shared_count_reconcile_error(&a->shared);
        log_error("Failed to read the GPUs: %s", gpu_node_error(a->node));
        free(fresh);
        return;
    }
    merge_lost(fresh, a->inv);
    for (unsigned i = 0; i < fresh->n_gpus; i++) {
        bool was = a->inv && i < a->inv->n_gpus && a->inv->gpus[i].lost;
        if (fresh->gpus[i].lost && !was)
            log_error("GPU %u (%s) is lost: NVML reports GPU_IS_LOST; its devices are Unhealthy", i,
                      fresh->gpus[i].uuid);
        else if (!fresh->gpus[i].lost && was)
            log_info("GPU %u (%s) answers again", i, fresh->gpus[i].uuid);
    }
    free(a->inv);
    a->inv = fresh;
}

/* Healthy again after the quiet period without a critical Xid (0 = never automatically); the plan
 * job advertises it. */
void agent_recovery_job(void *ctx, uint64_t now_ns) {
    struct agent *a = ctx;
    (void)now_ns;
    if (!a->policy->recovery_quiet_s)
        return;
    unsigned long long now = gs_now_ns(), quiet = (unsigned long long)a->policy->recovery_quiet_s * 1000000000ULL;
    for (unsigned i = 0; i < GS_MAX_GPUS; i++) {
        if (a->health.unhealthy[i] && now - a->last_xid_ns[i] >= quiet) {
            a->health.unhealthy[i] = false;
            log_info("GPU %u recovered: no critical Xid for %u s (last Xid %llu); its devices are Healthy again", i,
                     a->policy->recovery_quiet_s, a->last_xid[i]);
        }
    }
}

/* ---- MIG layout ----------------------------------------------------------------------------- */

/* What the kubelet has assigned to pods (PodResources), which the layout must not destroy, as it
 * does not destroy an instance a process uses. Asked after the devices to destroy are withdrawn,
 * so that the kubelet does not assign them meanwhile. No socket (or none configured): no kubelet,
 * nothing held. Returns 0, or -errno with the reason in err. */
static int read_mig_holds(struct agent *a, struct gs_mig_holds *holds, char *err, size_t errlen) {
    const char *path = a->o->pod_resources;
    struct stat st;
    memset(holds, 0, sizeof(*holds));
    if (!path || !path[0] || (stat(path, &st) < 0 && errno == ENOENT)) {
        log_info("No kubelet on this node (no PodResources socket%s%s): only processes count as in use for the "
                 "MIG layout", path && path[0] ? " " : "", path ? path : "");
        return 0;
    }
    struct pr_list l;
    char why[512];
    int r = pr_list(path, 5000, &l, why, sizeof(why));
    if (r < 0) {
        snprintf(err, errlen, "cannot ask the kubelet which pods hold which devices (PodResources %s): %s", path, why);
        return r;
    }
    r = gs_mig_holds_find(a->inv, &l, holds);
    pr_list_free(&l);
    if (r < 0)
        snprintf(err, errlen, "out of memory");
    return r;
}

/* The reason of a partial layout: "GPU 0: kept MIG-x (GI 1, 3g.40gb) to ns/pod, container c; not
 * made: 3 x 1g.10gb; GPU 1: ..." */
static void partial_reason(const struct gs_inventory *inv, const struct gs_mig_relay *relays, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = '\0';
    for (unsigned i = 0; i < inv->n_gpus && n < len; i++) {
        if (!relays[i].partial)
            continue;
        int w = snprintf(buf + n, len - n, "%sGPU %u: kept %s; not made: %s", n ? "; " : "", i, relays[i].kept,
                         relays[i].not_made);
        n += w < 0 ? 0 : (size_t)w;
    }
}

/* Says that GPUs were laid out around held instances: the status "partial" with the reason, and a
 * warning per GPU when it is news (a retry that changes nothing stays quiet). */
static void report_partial(struct agent *a, const struct gs_mig_relay *relays) {
    char reason[sizeof(a->mig_partial) - 256], seen[sizeof(a->mig_partial)];
    partial_reason(a->inv, relays, reason, sizeof(reason));
    snprintf(seen, sizeof(seen), "%.200s: %s", a->policy->mig_config, reason);
    if (!strcmp(seen, a->mig_partial) && !strcmp(a->pub.mig_state, "partial"))
        return; /* said already; the status file keeps its time of the change */
    agent_publish_mig_status(a, "partial", reason);
    gs_strlcpy(a->mig_partial, seen, sizeof(a->mig_partial));
    for (unsigned i = 0; i < a->inv->n_gpus; i++)
        if (relays[i].partial)
            log_warn("GPU %u: MIG layout %s partially applied: kept what pods hold: %s; not made: %s; the rest of "
                     "the layout follows once they release it", i, a->policy->mig_config, relays[i].kept,
                     relays[i].not_made);
}

/* Marks the devices of the instances the plans destroy as withdrawn (the next replan sends the
 * kubelet the lists without them). Returns how many steps the plans have. */
static unsigned withdraw_destroyed(struct agent *a, const struct gs_mig_plan *plans) {
    unsigned steps = 0;
    memset(a->health.withdrawn_gi, 0, sizeof(a->health.withdrawn_gi));
    for (unsigned i = 0; i < a->inv->n_gpus; i++) {
        steps += plans[i].n_steps + plans[i].reset_pending;
        for (unsigned k = 0; k < plans[i].n_steps; k++) {
            const struct gs_mig_step *st = &plans[i].steps[k];
            if (st->kind == GS_STEP_DESTROY_GI || st->kind == GS_STEP_DESTROY_CI)
                a->health.withdrawn_gi[i] |= 1u << st->gi_id;
        }
    }
    return steps;
}

/* The plans around what pods hold now (unless force: then the plans are as they are). Returns 0,
 * or -errno with the reason in err (PodResources not answering, *unasked set: nothing is changed). */
static int plan_around_holds(struct agent *a, const struct gs_layout_file *file, struct gs_mig_plan *plans,
                             bool *selected, struct gs_mig_relay *relays, bool *unasked, char *err, size_t errlen) {
    if (a->policy->mig_force)
        return 0;
    struct gs_mig_holds holds;
    int r = read_mig_holds(a, &holds, err, errlen);
    if ((*unasked = r < 0)) {
        size_t n = strlen(err);
        snprintf(err + n, errlen - n, "; nothing is changed (gpuslice.mig.force goes on without it)");
        return r;
    }
    r = gs_mig_plan_node_keep_held(a->inv, file, a->policy->mig_config, &holds, plans, selected, relays, err, errlen);
    gs_mig_holds_free(&holds);
    return r;
}

/* A partial layout's next pass that could not ask PodResources stays partial (said once per
 * cause) and is tried again at the next one. */
static void retry_later(struct agent *a, const char *err) {
    char seen[sizeof(a->mig_partial)];
    snprintf(seen, sizeof(seen), "!%s", err);
    if (strcmp(seen, a->mig_partial))
        log_warn("MIG layout %s stays partial for now: %s", a->policy->mig_config, err);
    gs_strlcpy(a->mig_partial, seen, sizeof(a->mig_partial));
}

/* retry: a pass of the re-lay job over a partial layout. */
static void reconcile_mig(struct agent *a, bool retry) {
    if (!a->policy->mig_config[0] || agent_migmgr_blocks(a))
        return;
    struct gs_layout_file *file = NULL;
    char err[1024];
    if (a->policy->mig_layout_file[0]) {
        file = malloc(sizeof(*file));
        if (!file || gs_miglayout_load(a->policy->mig_layout_file, file, err, sizeof(err)) < 0) {
            agent_publish_mig_status(a, "failed", file ? err : "out of memory");
            log_error("MIG layout not applied: %s", file ? err : "out of memory");
            free(file);
            return;
        }
    }
    struct gs_mig_plan *plans = calloc(GS_MAX_GPUS, sizeof(*plans));
    struct gs_mig_relay *relays = calloc(GS_MAX_GPUS, sizeof(*relays));
    bool selected[GS_MAX_GPUS];
    int r = plans && relays ? gs_mig_plan_node(a->inv, file, a->policy->mig_config, plans, selected, err, sizeof(err))
                            : -ENOMEM;
    /* Only a layout with something to do asks the kubelet what pods hold, and is then planned
     * around it: a GPU whose layout would destroy a held instance keeps it and gets the rest. */
    bool asked = r == 0 && withdraw_destroyed(a, plans), unasked = false;
    if (asked)
        r = plan_around_holds(a, file, plans, selected, relays, &unasked, err, sizeof(err));
    if (r < 0 && retry && unasked) {
        memset(a->health.withdrawn_gi, 0, sizeof(a->health.withdrawn_gi));
        retry_later(a, err);
        goto out;
    }
    if (r < 0) {
        memset(a->health.withdrawn_gi, 0, sizeof(a->health.withdrawn_gi));
        agent_publish_mig_status(a, "failed", plans && relays ? err : "out of memory");
        log_error("MIG layout %s %s: %s", a->policy->mig_config, asked ? "failed after 0 step(s)" : "not applied",
                  plans && relays ? err : "out of memory");
        goto out;
    }
    unsigned partial = 0;
    for (unsigned i = 0; i < a->inv->n_gpus; i++)
        partial += relays[i].partial;
    if (!withdraw_destroyed(a, plans)) {
        if (partial)
            report_partial(a, relays); /* nothing more can be done until pods release what they hold */
        else
            agent_publish_mig_status(a, "applied", NULL);
        goto out;
    }
    agent_publish_mig_status(a, "pending", NULL);
    log_info("Applying MIG layout %s%s%s", a->policy->mig_config, file ? " from " : "", file ? file->name : "");
    if (a->plan_valid)
        agent_replan(a, false); /* withdraw the devices of instances about to be destroyed */
    struct gs_mig_apply_result res = { 0 };
    struct gs_mig_holds holds;
    /* Asked again after the withdrawal, so that what the kubelet assigned meanwhile is held too;
     * the apply plans each pass around these. */
    r = read_mig_holds(a, &holds, err, sizeof(err));
    if (r < 0 && a->policy->mig_force) {
        log_warn("MIG layout %s forced without knowing what pods hold: %s", a->policy->mig_config, err);
        r = 0;
    } else if (r < 0) {
        size_t n = strlen(err);
        snprintf(err + n, sizeof(err) - n, "; nothing is changed (gpuslice.mig.force goes on without it)");
    }
    unasked = r < 0;
    if (r == 0)
        r = gs_mig_apply_node_keep_held(a->node, file, a->policy->mig_config, &holds, a->policy->mig_force, &res,
                                        relays, err, sizeof(err));
    gs_mig_holds_free(&holds);
    memset(a->health.withdrawn_gi, 0, sizeof(a->health.withdrawn_gi));
    if (r < 0 && retry && unasked) {
        char reason[sizeof(a->mig_partial) - 256];
        partial_reason(a->inv, relays, reason, sizeof(reason)); /* as it was: nothing was changed */
        agent_publish_mig_status(a, "partial", reason);
        retry_later(a, err); /* the withdrawn devices are advertised again below */
    } else if (r < 0) {
        agent_publish_mig_status(a, "failed", err); /* first: whoever reads the log line finds the state written */
        log_error("MIG layout %s failed after %u step(s): %s", a->policy->mig_config, res.steps_done, err);
    } else {
        if (res.n_partial)
            report_partial(a, relays);
        else
            agent_publish_mig_status(a, "applied", NULL);
        log_info("MIG layout %s %s: %u created, %u destroyed, %u kept", a->policy->mig_config,
                 res.n_partial ? "partially applied" : "applied", res.creates, res.destroys, res.kept);
    }
    agent_refresh_inventory(a);
    if (a->plan_valid)
        agent_replan(a, true);
out:
    if (strcmp(a->pub.mig_state, "partial"))
        a->mig_partial[0] = '\0';
    free(relays);
    free(plans);
    free(file);
}

void agent_reconcile_mig(struct agent *a) { reconcile_mig(a, false); }

void agent_mig_job(void *ctx, uint64_t now_ns) {
    (void)now_ns;
    reconcile_mig(ctx, false);
}

/* While a layout is partial, what pods hold is asked again at the pod attribution's pace: once
 * they release it, the next pass makes the rest of the layout. */
void agent_mig_relay_job(void *ctx, uint64_t now_ns) {
    struct agent *a = ctx;
    (void)now_ns;
    if (!strcmp(a->pub.mig_state, "partial"))
        reconcile_mig(a, true);
}

/* ---- Xid ----------------------------------------------------------------------------------- */

void agent_handle_xid(struct agent *a, const struct gpu_event *ev) {
    if (ev->gpu >= GS_MAX_GPUS) {
        log_warn("Xid %llu on an unknown device: ignored", ev->xid);
        return;
    }
    agent_shared_count_xid(&a->shared, ev->gpu);
    if (gs_policy_xid_ignored(a->policy, ev->xid)) {
        log_info("GPU %u: Xid %llu is an application error (ignored by policy): devices stay Healthy", ev->gpu,
                 ev->xid);
        return;
    }
    a->last_xid_ns[ev->gpu] = gs_now_ns();
    a->last_xid[ev->gpu] = ev->xid;
    if (!a->health.unhealthy[ev->gpu])
        log_warn("GPU %u: critical Xid %llu: marking the GPU and every replica and MIG device on it Unhealthy",
                 ev->gpu, ev->xid);
    a->health.unhealthy[ev->gpu] = true;
    agent_replan(a, false);
}

/* ---- the inventory poll's jobs ------------------------------------------------------------- */

void agent_inventory_job(void *ctx, uint64_t now_ns) {
    struct agent *a = ctx;
    (void)now_ns;
    a->poll_start_ns = gs_now_ns();
    agent_refresh_inventory(a);
    if (a->pub.cdi_error[0])
        agent_publish_cdi_spec(a); /* it failed: the cause (a missing mig-minors line, ...) may be gone */
}

void agent_replan_job(void *ctx, uint64_t now_ns) {
    (void)now_ns;
    agent_replan(ctx, false);
}

void agent_plan_job(void *ctx, uint64_t now_ns) {
    struct agent *a = ctx;
    (void)now_ns;
    if (agent_replan(a, false) < 0)
        agent_shared_count_reconcile_error(&a->shared);
    agent_shared_set_reconcile_seconds(&a->shared, (double)(gs_now_ns() - a->poll_start_ns) / 1e9);
}
