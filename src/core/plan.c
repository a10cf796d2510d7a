/* plan.c: from inventory + policy + health to the resources and devices the node advertises.
 * Pure: no I/O. The rules (first match wins):
 *   1. a gpuslice.gpus rule that selects the GPU (index, UUID or model glob);
 *   2. a GPU in MIG mode: its MIG devices, per flags.migStrategy (none: not advertised);
 *   3. a sharing.timeSlicing resource whose `devices` selects the GPU: replicas;
 *   4. otherwise the whole GPU as nvidia.com/gpu. */
#include "core/plan.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

#define DEFAULT_GPU_RESOURCE "nvidia.com/gpu"
#define DEFAULT_SHARED_RESOURCE "nvidia.com/gpu.shared"

const char *gs_mode_name(enum gs_gpu_mode mode) {
    switch (mode) {
    case GS_MODE_WHOLE: return "whole";
    case GS_MODE_TIME_SLICING: return "time-slicing";
    case GS_MODE_MIG: return "mig";
    case GS_MODE_DISABLED: return "disabled";
    case GS_MODE_MPS: return "mps";
    default: return "default";
    }
}

static void warn(struct gs_plan *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(struct gs_plan *p, const char *fmt, ...) {
    if (p->n_warnings >= GS_PLAN_MAX_WARNINGS)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->warnings[p->n_warnings++], sizeof(p->warnings[0]), fmt, ap);
    va_end(ap);
}

static struct gs_resource *resource_get(struct gs_plan *p, const char *name) {
    for (unsigned i = 0; i < p->n_resources; i++)
        if (strcmp(p->resources[i].name, name) == 0)
            return &p->resources[i];
    if (p->n_resources == GS_PLAN_MAX_RESOURCES)
        return NULL;
    struct gs_resource *r = &p->resources[p->n_resources++];
    memset(r, 0, sizeof(*r));
    gs_strlcpy(r->name, name, sizeof(r->name));
    return r;
}

static int resource_add(struct gs_resource *r, const struct gs_device *d) {
    if (r->n_devices == r->cap) {
        unsigned cap = r->cap ? r->cap * 2 : 16;
        struct gs_device *nd = realloc(r->devices, cap * sizeof(*nd));
        if (!nd)
            return -ENOMEM;
        r->devices = nd;
        r->cap = cap;
    }
    r->devices[r->n_devices++] = *d;
    return 0;
}

static bool rule_matches(const struct gs_gpu_rule *rule, const struct gs_gpu *g) {
    switch (rule->kind) {
    case GS_SEL_INDEX: return g->index < 64 && (rule->index_mask >> g->index) & 1;
    case GS_SEL_UUID: return strcmp(rule->pattern, g->uuid) == 0;
    case GS_SEL_MODEL: return fnmatch(rule->pattern, g->name, 0) == 0;
    }
    return false;
}

static bool ts_selects(const struct gs_ts_resource *t, const struct gs_gpu *g) {
    if (t->devices_count)
        return g->index < t->devices_count;
    if (t->n_devices == 0)
        return true; /* devices: all (the default) */
    char idx[16];
    snprintf(idx, sizeof(idx), "%u", g->index);
    for (unsigned i = 0; i < t->n_devices; i++)
        if (strcmp(t->devices[i].text, idx) == 0 || strcmp(t->devices[i].text, g->uuid) == 0)
            return true;
    return false;
}

struct choice {
    enum gs_gpu_mode mode;
    unsigned replicas;
    unsigned long long memory;            /* memoryPerReplica */
    unsigned compute;                     /* MPS: computePerReplica (GS_COMPUTE_AUTO) */
    unsigned long long pinned;            /* MPS: pinnedMemoryPerReplica (GS_MEMORY_AUTO) */
    char resource[GS_RESOURCE_NAME_MAX]; /* "" = default for the mode */
    bool from_rule;
};

/* The first sharing.timeSlicing or sharing.mps entry that selects the GPU (MIG resources are not
 * shared this way), into *c. */
static bool shared_choice(const struct gs_ts_resource *list, unsigned n, bool rename_by_default, enum gs_gpu_mode mode,
                          const struct gs_gpu *g, struct choice *c) {
    for (unsigned i = 0; i < n; i++) {
        const struct gs_ts_resource *t = &list[i];
        if (strncmp(t->name, "nvidia.com/mig-", 15) == 0 || !ts_selects(t, g))
            continue;
        c->mode = mode;
        c->replicas = t->replicas;
        c->memory = t->memory_per_replica;
        c->compute = t->compute_per_replica;
        c->pinned = t->pinned_per_replica;
        if (t->rename[0])
            gs_strlcpy(c->resource, t->rename, sizeof(c->resource));
        else
            snprintf(c->resource, sizeof(c->resource), "%s%s", t->name, rename_by_default ? ".shared" : "");
        return true;
    }
    return false;
}


static struct choice choose(const struct gs_gpu *g, const struct gs_policy *pol) {
    struct choice c = { 0 };
    for (unsigned i = 0; i < pol->n_rules; i++) {
        const struct gs_gpu_rule *rule = &pol->rules[i];
        if (!rule_matches(rule, g))
            continue;
        c.mode = rule->mode;
        c.replicas = rule->replicas;
        c.memory = rule->memory_per_replica;
        c.compute = rule->compute_per_replica;
        c.pinned = rule->pinned_per_replica;
        gs_strlcpy(c.resource, rule->resource, sizeof(c.resource));
        c.from_rule = true;
        return c;
    }
    if (g->mig_capable && g->mig_current) {
        c.mode = pol->mig_strategy == GS_MIG_NONE ? GS_MODE_DISABLED : GS_MODE_MIG;
        return c;
    }
    if (shared_choice(pol->ts_resources, pol->n_ts_resources, pol->ts_rename_by_default, GS_MODE_TIME_SLICING, g, &c) ||
        shared_choice(pol->mps_resources, pol->n_mps_resources, pol->mps_rename_by_default, GS_MODE_MPS, g, &c))
        return c;
    c.mode = GS_MODE_WHOLE;
    return c;
}


static struct gs_device base_device(const struct gs_gpu *g, bool healthy) {
    struct gs_device d;
    memset(&d, 0, sizeof(d));
    d.gpu = g->index;
    d.minor = g->minor;
    d.numa_node = g->numa_node;
    d.healthy = healthy;
    gs_strlcpy(d.uuid, g->uuid, sizeof(d.uuid));
    return d;
}

/* MIG resource name for a profile: '+' is not allowed in resource names (NVIDIA uses '.'). */
static void mig_resource_name(const char *profile, char *buf, size_t len) {
    snprintf(buf, len, "nvidia.com/mig-%s", profile);
    for (char *p = buf; *p; p++)
        if (*p == '+')
            *p = '.';
}

/* One MPS replica's limits on a device of mem_total bytes: computePerReplica auto = 100 % /
 * replicas; pinnedMemoryPerReplica auto = memory / replicas; explicit sizes capped to the memory. */
static void mps_limits(const struct choice *c, unsigned long long mem_total, struct gs_device *d) {
    d->mps_percent = c->compute == GS_COMPUTE_AUTO ? 100 / c->replicas : c->compute;
    if (d->mps_percent == 0)
        d->mps_percent = 1;
    if (c->pinned == GS_MEMORY_AUTO)
        d->mps_pinned = mem_total / c->replicas;
    else
        d->mps_pinned = mem_total && c->pinned > mem_total ? mem_total : c->pinned;
}

/* The guard's VRAM quota of one replica on a device of mem_total bytes (0: no guard). */
static unsigned long long replica_quota(unsigned long long memory, unsigned replicas, unsigned long long mem_total) {
    if (memory == GS_MEMORY_AUTO)
        return mem_total / replicas;
    return memory < mem_total || !mem_total ? memory : mem_total;
}

/* A resource carries either time-sliced or MPS replicas: their Allocate answers differ. */
static bool kind_fits(struct gs_plan *plan, struct gs_resource *r, bool mps, unsigned gpu) {
    if (r->n_devices && r->replicated && r->mps != mps) {
        warn(plan, "GPU %u: %s already carries %s replicas; give the %s GPUs their own resourceName: not advertised",
             gpu, r->name, r->mps ? "MPS" : "time-sliced", mps ? "MPS" : "time-sliced");
        return false;
    }
    if (r->n_devices && !r->replicated) {
        warn(plan, "GPU %u: %s already carries whole GPUs or MIG devices: not advertised", gpu, r->name);
        return false;
    }
    r->mps = mps;
    return true;
}

/* MPS on the MIG devices of a GPU in MIG mode: each MIG device gets `replicas` MPS replicas,
 * "<MIG-UUID>::<n>", under its profile's name with ".shared" (or the rule's resourceName). */
static int add_mps_mig_devices(struct gs_plan *plan, const struct gs_gpu *g, const struct gs_policy *pol,
                               const struct choice *c, bool healthy, struct gs_gpu_plan *gp) {
    for (unsigned k = 0; k < g->n_mig; k++) {
        const struct gs_mig_device *m = &g->mig[k];
        if (m->ci_slices && m->gi_slices && m->ci_slices != m->gi_slices)
            continue;
        char name[GS_RESOURCE_NAME_MAX];
        if (c->resource[0]) {
            gs_strlcpy(name, c->resource, sizeof(name));
        } else {
            char base[GS_RESOURCE_NAME_MAX];
            mig_resource_name(m->profile, base, sizeof(base));
            snprintf(name, sizeof(name), "%.50s.shared", base);
        }
        struct gs_resource *r = resource_get(plan, name);
        if (!r)
            return -ENOSPC;
        if (!kind_fits(plan, r, true, g->index))
            continue;
        r->replicated = true;
        r->fail_gt_one = r->fail_gt_one || pol->mps_fail_requests_gt_one;
        struct gs_device d = base_device(g, healthy);
        d.kind = GS_DEV_MPS;
        d.mig = true;
        d.gi_id = m->gi_id;
        d.ci_id = m->ci_id;
        gs_strlcpy(d.uuid, m->uuid, sizeof(d.uuid));
        mps_limits(c, m->mem_mib << 20, &d);
        d.quota = replica_quota(c->memory, c->replicas, m->mem_mib << 20);
        for (unsigned n = 0; n < c->replicas; n++) {
            d.replica = n;
            snprintf(d.id, sizeof(d.id), "%s::%u", m->uuid, n);
            if (resource_add(r, &d) < 0)
                return -ENOMEM;
        }
        gp->resource = r->name;
    }
    return 0;
}

static int add_mig_devices(struct gs_plan *plan, const struct gs_gpu *g, const struct gs_policy *pol, bool healthy,
                           const char *single_profile, unsigned withdrawn, struct gs_gpu_plan *gp) {
    unsigned added = 0;
    for (unsigned k = 0; k < g->n_mig; k++) {
        const struct gs_mig_device *m = &g->mig[k];
        if (m->gi_id < 32 && (withdrawn >> m->gi_id) & 1)
            continue; /* about to be destroyed */
        if (m->ci_slices && m->gi_slices && m->ci_slices != m->gi_slices)
            continue; /* only MIG devices whose compute instance spans the GPU instance (as NVIDIA) */
        char name[GS_RESOURCE_NAME_MAX];
        if (pol->mig_strategy == GS_MIG_SINGLE) {
            if (single_profile && strcmp(m->profile, single_profile) != 0)
                continue;
            gs_strlcpy(name, DEFAULT_GPU_RESOURCE, sizeof(name));
        } else {
            mig_resource_name(m->profile, name, sizeof(name));
        }
        struct gs_resource *r = resource_get(plan, name);
        if (!r)
            return -ENOSPC;
        struct gs_device d = base_device(g, healthy);
        d.kind = GS_DEV_MIG;
        gs_strlcpy(d.id, m->uuid, sizeof(d.id));
        gs_strlcpy(d.uuid, m->uuid, sizeof(d.uuid));
        d.gi_id = m->gi_id;
        d.ci_id = m->ci_id;
        if (resource_add(r, &d) < 0)
            return -ENOMEM;
        gp->resource = r->name;
        added++;
    }
    if (!added && !withdrawn)
        warn(plan, "GPU %u: MIG mode is enabled but it has no MIG devices to advertise", g->index);
    return 0;
}

/* migStrategy single needs one MIG profile across the node; returns it, or NULL (with a warning)
 * if MIG devices of different profiles exist. */
static const char *single_profile(struct gs_plan *plan, const struct gs_inventory *inv) {
    const char *first = NULL;
    for (unsigned i = 0; i < inv->n_gpus; i++) {
        const struct gs_gpu *g = &inv->gpus[i];
        for (unsigned k = 0; g->mig_current && k < g->n_mig; k++) {
            if (!first) {
                first = g->mig[k].profile;
            } else if (strcmp(first, g->mig[k].profile) != 0) {
                warn(plan, "migStrategy single needs one MIG profile on the node; found %s and %s: only %s devices "
                           "are advertised (use migStrategy mixed)", first, g->mig[k].profile, first);
                return first;
            }
        }
    }
    return first;
}

/* Rules and device lists that name GPUs this node does not have (by index or UUID) are most
 * likely mistakes: say so (models are globs and may legitimately match nothing). */
static void warn_unmatched(struct gs_plan *plan, const struct gs_inventory *inv, const struct gs_policy *pol) {
    for (unsigned i = 0; i < pol->n_rules; i++) {
        const struct gs_gpu_rule *rule = &pol->rules[i];
        if (rule->kind == GS_SEL_MODEL)
            continue;
        bool any = false;
        for (unsigned k = 0; k < inv->n_gpus && !any; k++)
            any = rule_matches(rule, &inv->gpus[k]);
        unsigned long long beyond = inv->n_gpus >= 64 ? 0 : rule->index_mask & ~((1ULL << inv->n_gpus) - 1);
        if (rule->kind == GS_SEL_INDEX && beyond)
            warn(plan, "policy line %u: gpuslice.gpus selects GPU indices beyond the node's %u GPU%s (mode %s)",
                 rule->line, inv->n_gpus, inv->n_gpus == 1 ? "" : "s", gs_mode_name(rule->mode));
        else if (!any)
            warn(plan, "policy line %u: gpuslice.gpus rule (mode %s) matches no GPU of this node", rule->line,
                 gs_mode_name(rule->mode));
    }
    for (int mps = 0; mps < 2; mps++) {
        unsigned n = mps ? pol->n_mps_resources : pol->n_ts_resources;
        for (unsigned i = 0; i < n; i++) {
            const struct gs_ts_resource *t = mps ? &pol->mps_resources[i] : &pol->ts_resources[i];
            for (unsigned d = 0; d < t->n_devices; d++) {
                bool found = false;
                for (unsigned k = 0; k < inv->n_gpus && !found; k++) {
                    char idx[16];
                    snprintf(idx, sizeof(idx), "%u", inv->gpus[k].index);
                    found = !strcmp(t->devices[d].text, idx) || !strcmp(t->devices[d].text, inv->gpus[k].uuid);
                    for (unsigned m = 0; m < inv->gpus[k].n_mig && !found; m++)
                        found = !strcmp(t->devices[d].text, inv->gpus[k].mig[m].uuid);
                }
                if (!found)
                    warn(plan, "sharing.%s resource %s: device '%s' is not a GPU of this node", mps ? "mps" : "timeSlicing",
                         t->name, t->devices[d].text);
            }
        }
    }
}

int gs_plan_build(const struct gs_inventory *inv, const struct gs_policy *pol, const struct gs_health *health,
                  struct gs_plan *out) {
    memset(out, 0, sizeof(*out));
    out->n_gpus = inv->n_gpus;
    const char *single = pol->mig_strategy == GS_MIG_SINGLE ? single_profile(out, inv) : NULL;
    for (unsigned i = 0; i < inv->n_gpus; i++) {
        const struct gs_gpu *g = &inv->gpus[i];
        struct gs_gpu_plan *gp = &out->gpus[i];
        if (!g->uuid[0]) {
            gp->mode = GS_MODE_DISABLED;
            warn(out, "GPU %u could not be read (%s): not advertised", g->index, g->error[0] ? g->error : "no UUID");
            continue;
        }
        bool healthy = !g->lost && !g->error[0] && !(health && i < GS_MAX_GPUS && health->unhealthy[i]);
        struct choice c = choose(g, pol);
        gp->mode = c.mode;
        gp->replicas = c.replicas;
        bool mig_on = g->mig_capable && g->mig_current;
        if (c.mode == GS_MODE_DISABLED) {
            if (!c.from_rule)
                warn(out, "GPU %u is in MIG mode and migStrategy is none: not advertised", g->index);
            continue;
        }
        if (c.mode == GS_MODE_MPS && mig_on) {
            if (add_mps_mig_devices(out, g, pol, &c, healthy, gp) < 0)
                goto oom;
            continue;
        }
        if (c.mode == GS_MODE_MIG) {
            if (!mig_on) {
                warn(out, "GPU %u: policy asks for MIG but MIG mode is %s: not advertised", g->index,
                     g->mig_capable ? "disabled" : "not supported");
                continue;
            }
            /* (The policy parser refuses a mig rule while migStrategy is none.) */
            if (add_mig_devices(out, g, pol, healthy, single, health && i < GS_MAX_GPUS ? health->withdrawn_gi[i] : 0,
                                gp) < 0)
                goto oom;
            continue;
        }
        if (mig_on) {
            warn(out, "GPU %u is in MIG mode: it cannot be shared as %s; not advertised", g->index,
                 gs_mode_name(c.mode));
            gp->mode = GS_MODE_DISABLED;
            continue;
        }
        const char *name = c.resource[0] ? c.resource
                                         : (c.mode == GS_MODE_WHOLE ? DEFAULT_GPU_RESOURCE : DEFAULT_SHARED_RESOURCE);
        struct gs_resource *r = resource_get(out, name);
        if (!r) {
            warn(out, "too many resource names: GPU %u not advertised", g->index);
            continue;
        }
        if (c.mode != GS_MODE_WHOLE && !kind_fits(out, r, c.mode == GS_MODE_MPS, g->index)) {
            gp->mode = GS_MODE_DISABLED;
            continue;
        }
        gp->resource = r->name;
        struct gs_device d = base_device(g, healthy);
        if (c.mode == GS_MODE_WHOLE) {
            d.kind = GS_DEV_WHOLE;
            gs_strlcpy(d.id, g->uuid, sizeof(d.id));
            if (resource_add(r, &d) < 0)
                goto oom;
            continue;
        }
        r->replicated = true;
        bool mps = c.mode == GS_MODE_MPS;
        r->fail_gt_one = r->fail_gt_one || (mps ? pol->mps_fail_requests_gt_one : pol->ts_fail_requests_gt_one);
        d.kind = mps ? GS_DEV_MPS : GS_DEV_REPLICA;
        if (mps)
            mps_limits(&c, g->mem_total, &d);
        d.quota = replica_quota(c.memory, c.replicas, g->mem_total);
        for (unsigned k = 0; k < c.replicas; k++) {
            d.replica = k;
            snprintf(d.id, sizeof(d.id), "%s::%u", g->uuid, k);
            if (resource_add(r, &d) < 0)
                goto oom;
        }
    }
    warn_unmatched(out, inv, pol);
    return 0;
oom:
    gs_plan_free(out);
    return -ENOMEM;
}

void gs_plan_free(struct gs_plan *plan) {
    for (unsigned i = 0; i < plan->n_resources; i++) {
        free(plan->resources[i].devices);
        plan->resources[i].devices = NULL;
        plan->resources[i].n_devices = plan->resources[i].cap = 0;
    }
    plan->n_resources = 0;
}

const struct gs_resource *gs_plan_resource(const struct gs_plan *plan, const char *name) {
    for (unsigned i = 0; i < plan->n_resources; i++)
        if (strcmp(plan->resources[i].name, name) == 0)
            return &plan->resources[i];
    return NULL;
}

const struct gs_device *gs_resource_device(const struct gs_resource *r, const char *id) {
    for (unsigned i = 0; i < r->n_devices; i++)
        if (strcmp(r->devices[i].id, id) == 0)
            return &r->devices[i];
    return NULL;
}

bool gs_resource_equal(const struct gs_resource *a, const struct gs_resource *b) {
    if (strcmp(a->name, b->name) != 0 || a->n_devices != b->n_devices || a->replicated != b->replicated ||
        a->fail_gt_one != b->fail_gt_one || a->mps != b->mps)
        return false;
    for (unsigned i = 0; i < a->n_devices; i++) {
        const struct gs_device *x = &a->devices[i], *y = &b->devices[i];
        if (strcmp(x->id, y->id) != 0 || x->healthy != y->healthy || x->numa_node != y->numa_node ||
            x->quota != y->quota || x->mps_percent != y->mps_percent || x->mps_pinned != y->mps_pinned)
            return false;
    }
    return true;
}

bool gs_plan_equal(const struct gs_plan *a, const struct gs_plan *b) {
    if (a->n_resources != b->n_resources)
        return false;
    for (unsigned i = 0; i < a->n_resources; i++) {
        const struct gs_resource *rb = gs_plan_resource(b, a->resources[i].name);
        if (!rb || !gs_resource_equal(&a->resources[i], rb))
            return false;
    }
    return true;
}
