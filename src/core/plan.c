/* plan.c: from inventory + policy + health to the resources and devices the node advertises.
 * Pure: no I/O. The rules (first match wins):
 *   1. a gpuslice.gpus rule that selects the GPU (index, UUID or model glob);
 *   2. a GPU in MIG mode: its MIG devices, per flags.migStrategy (none: not advertised);
 *   3. a sharing.timeSlicing resource whose `devices` selects the GPU: replicas;
 *   4. otherwise the whole GPU as nvidia.com/gpu.
 * A MIG device (rule `mig` or 2.) is replicated, as NVIDIA's plugin does, by the first
 * sharing.timeSlicing or sharing.mps entry that names its resource (nvidia.com/mig-<profile>, or
 * nvidia.com/gpu with migStrategy single) and whose `devices` select it. */
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
    case GS_MODE_FRACTIONAL: return "fractional";
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

/* A setting of the policy this node cannot honour: "FILE:LINE:COLUMN: PATH: message", in the
 * errors and (for the agent, which logs warnings) in the warnings. */
static void plan_error(struct gs_plan *p, const struct gs_policy *pol, struct gs_policy_pos pos, const char *path,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void plan_error(struct gs_plan *p, const struct gs_policy *pol, struct gs_policy_pos pos, const char *path,
                       const char *fmt, ...) {
    char line[GS_PLAN_LINE_MAX], where[32] = "";
    if (pos.line)
        snprintf(where, sizeof(where), ":%u:%u", pos.line, pos.column);
    int n = snprintf(line, sizeof(line), "%s%s: %s: ", pol->source[0] ? pol->source : "policy", where, path);
    if (n < 0 || (size_t)n >= sizeof(line))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    if (p->n_errors < GS_PLAN_MAX_ERRORS)
        gs_strlcpy(p->errors[p->n_errors++], line, sizeof(p->errors[0]));
    warn(p, "%s", line);
}

/* "15 GiB", "14.6 GiB", "512 MiB": sizes in messages. */
static const char *size_text(unsigned long long bytes, char *buf, size_t len) {
    if (bytes >= 1ULL << 30) {
        if (bytes % (1ULL << 30) == 0)
            snprintf(buf, len, "%llu GiB", bytes >> 30);
        else
            snprintf(buf, len, "%.1f GiB", (double)bytes / (double)(1ULL << 30));
    } else {
        snprintf(buf, len, "%llu MiB", bytes >> 20);
    }
    return buf;
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
    struct gs_policy_pos memory_pos;      /* where it was written */
    char memory_path[80];                 /* "sharing.timeSlicing.resources[0].memoryPerReplica" */
    unsigned compute;                     /* MPS: computePerReplica (GS_COMPUTE_AUTO) */
    unsigned long long pinned;            /* MPS: pinnedMemoryPerReplica (GS_MEMORY_AUTO) */
    char resource[GS_RESOURCE_NAME_MAX]; /* "" = default for the mode */
    bool from_rule;
};

/* Entry i of sharing.timeSlicing (or sharing.mps) into *c. */
static void entry_choice(const struct gs_ts_resource *t, unsigned i, bool rename_by_default, enum gs_gpu_mode mode,
                         struct choice *c) {
    c->mode = mode;
    c->replicas = t->replicas;
    c->memory = t->memory_per_replica;
    c->memory_pos = t->memory_pos;
    snprintf(c->memory_path, sizeof(c->memory_path), "sharing.%s.resources[%u].memoryPerReplica",
             mode == GS_MODE_MPS ? "mps" : "timeSlicing", i);
    c->compute = t->compute_per_replica;
    c->pinned = t->pinned_per_replica;
    char name[GS_RESOURCE_NAME_MAX + 8]; /* the parser made sure NAME.shared is a valid name */
    if (snprintf(name, sizeof(name), "%s%s", t->name, rename_by_default ? ".shared" : "") >= (int)sizeof(name))
        name[0] = '\0'; /* not reached (the parser bounds the name); an -O3 build cannot see that */
    gs_strlcpy(c->resource, t->rename[0] ? t->rename : name, sizeof(c->resource));
}

/* The first sharing.timeSlicing or sharing.mps entry that selects the GPU (MIG resources are
 * replicated per MIG device, see mig_share), into *c. */
static bool shared_choice(const struct gs_ts_resource *list, unsigned n, bool rename_by_default, enum gs_gpu_mode mode,
                          const struct gs_gpu *g, struct choice *c) {
    for (unsigned i = 0; i < n; i++) {
        const struct gs_ts_resource *t = &list[i];
        if (strncmp(t->name, "nvidia.com/mig-", 15) == 0 || !ts_selects(t, g))
            continue;
        entry_choice(t, i, rename_by_default, mode, c);
        return true;
    }
    return false;
}

/* Does a `devices` entry name MIG device m of GPU g: its MIG UUID, NVIDIA's older form
 * "MIG-<GPU UUID>/<gi>/<ci>", or (gpuslice) the index or UUID of its GPU? */
static bool ref_names_mig(const char *ref, const struct gs_gpu *g, const struct gs_mig_device *m) {
    char idx[16], old[GS_UUID_LEN + 32];
    snprintf(idx, sizeof(idx), "%u", g->index);
    snprintf(old, sizeof(old), "MIG-%s/%u/%u", g->uuid, m->gi_id, m->ci_id);
    return !strcmp(ref, m->uuid) || !strcmp(ref, old) || !strcmp(ref, idx) || !strcmp(ref, g->uuid);
}

/* Per sharing entry, how many MIG devices of its resource came before (for `devices: N`, the
 * first N devices of the resource as NVIDIA counts them) and whether it replicated any. */
struct mig_share_state {
    unsigned seen[2][GS_POLICY_MAX_RESOURCES];
    bool used[2][GS_POLICY_MAX_RESOURCES];
};

/* The first sharing.timeSlicing, then sharing.mps, entry that names `resource` (the MIG device's
 * own resource name) and selects MIG device m, into *c. */
static bool mig_share(const struct gs_policy *pol, const char *resource, const struct gs_gpu *g,
                      const struct gs_mig_device *m, struct mig_share_state *st, struct choice *c) {
    bool found = false;
    for (int mps = 0; mps < 2; mps++) {
        unsigned n = mps ? pol->n_mps_resources : pol->n_ts_resources;
        const struct gs_ts_resource *list = mps ? pol->mps_resources : pol->ts_resources;
        for (unsigned i = 0; i < n && i < GS_POLICY_MAX_RESOURCES; i++) {
            const struct gs_ts_resource *t = &list[i];
            if (strcmp(t->name, resource) != 0)
                continue;
            bool sel = t->devices_count ? st->seen[mps][i] < t->devices_count : t->n_devices == 0;
            for (unsigned k = 0; k < t->n_devices && !sel; k++)
                sel = ref_names_mig(t->devices[k].text, g, m);
            st->seen[mps][i]++;
            if (!sel || found)
                continue;
            entry_choice(t, i, mps ? pol->mps_rename_by_default : pol->ts_rename_by_default,
                         mps ? GS_MODE_MPS : GS_MODE_TIME_SLICING, c);
            st->used[mps][i] = found = true;
        }
    }
    return found;
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
        c.memory_pos = rule->memory_pos;
        snprintf(c.memory_path, sizeof(c.memory_path), "gpuslice.gpus[%u].memoryPerReplica", i);
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
    d.arch = g->arch;
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
    if (r->fraction) {
        warn(plan, "GPU %u: %s carries fractional units only: not advertised", gpu, r->name);
        return false;
    }
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

/* memoryPerReplica larger than the device it is a quota on would let a container past what
 * exists: an error with the setting's position; the device's replicas are not advertised.
 * (Quotas of several replicas may add up to more than the device: the guard limits each
 * container, the device's memory limits them together.) */
static bool quota_fits(struct gs_plan *plan, const struct gs_policy *pol, const struct choice *c,
                       unsigned long long mem_total, const char *what) {
    if (c->memory == GS_MEMORY_AUTO || !c->memory || !mem_total || c->memory <= mem_total)
        return true;
    char want[32], have[32];
    plan_error(plan, pol, c->memory_pos, c->memory_path,
               "%s is more than the %s of %s: its replicas are not advertised (at most %s, or auto)",
               size_text(c->memory, want, sizeof(want)), size_text(mem_total, have, sizeof(have)), what, have);
    return false;
}

/* A fractional GPU: its memory units (GiB, each a GiB of the guard's quota) and its 100 compute
 * units, under the two fixed resource names, which carry nothing else. */
static int add_fractional(struct gs_plan *plan, const struct gs_gpu *g, bool healthy, struct gs_gpu_plan *gp) {
    static const struct {
        const char *name, *prefix;
        enum gs_fraction kind;
    } res[] = { { GS_FRAC_MEMORY_RESOURCE, "mem", GS_FRAC_MEMORY }, { GS_FRAC_COMPUTE_RESOURCE, "sm", GS_FRAC_COMPUTE } };
    unsigned units[2] = { gs_frac_memory_units(g->mem_total), GS_FRAC_COMPUTE_UNITS };
    if (!units[0]) {
        warn(plan, "GPU %u: mode fractional needs at least 1 GiB of memory (NVML says %llu MiB): not advertised",
             g->index, g->mem_total >> 20);
        gp->mode = GS_MODE_DISABLED;
        return 0;
    }
    struct gs_resource *r[2];
    for (unsigned k = 0; k < 2; k++) {
        if (!(r[k] = resource_get(plan, res[k].name))) {
            warn(plan, "too many resource names: GPU %u not advertised", g->index);
            gp->mode = GS_MODE_DISABLED;
            return 0;
        }
        if (r[k]->n_devices && r[k]->fraction != res[k].kind) {
            warn(plan, "GPU %u: %s already carries other devices (a resourceName rule?): not advertised", g->index,
                 res[k].name);
            gp->mode = GS_MODE_DISABLED;
            return 0;
        }
    }
    for (unsigned k = 0; k < 2; k++) {
        r[k]->replicated = true;
        r[k]->fraction = res[k].kind;
        struct gs_device d = base_device(g, healthy);
        d.kind = GS_DEV_REPLICA;
        d.fraction = res[k].kind;
        d.quota = res[k].kind == GS_FRAC_MEMORY ? GS_FRAC_MEMORY_UNIT : 0;
        for (unsigned n = 0; n < units[k]; n++) {
            d.replica = n;
            snprintf(d.id, sizeof(d.id), "%s::%s-%u", g->uuid, res[k].prefix, n);
            if (resource_add(r[k], &d) < 0)
                return -ENOMEM;
        }
    }
    gp->resource = r[0]->name;
    gp->replicas = units[0];
    return 0;
}

/* `replicas` time-sliced or MPS replicas of MIG device m, "<MIG-UUID>::<n>", under `name`. */
static int add_mig_replicas(struct gs_plan *plan, const struct gs_gpu *g, const struct gs_mig_device *m,
                            const struct gs_policy *pol, const struct choice *c, const char *name, bool healthy,
                            struct gs_gpu_plan *gp) {
    bool mps = c->mode == GS_MODE_MPS;
    unsigned long long mem = m->mem_mib << 20;
    char what[GS_UUID_LEN + GS_PROFILE_NAME_LEN + 64];
    snprintf(what, sizeof(what), "MIG device %s (%s, GPU %u)", m->uuid, m->profile, g->index);
    if (!quota_fits(plan, pol, c, mem, what))
        return 0;
    struct gs_resource *r = resource_get(plan, name);
    if (!r)
        return -ENOSPC;
    if (!kind_fits(plan, r, mps, g->index))
        return 0;
    r->replicated = true;
    r->fail_gt_one = r->fail_gt_one || (mps ? pol->mps_fail_requests_gt_one : pol->ts_fail_requests_gt_one);
    struct gs_device d = base_device(g, healthy);
    d.kind = mps ? GS_DEV_MPS : GS_DEV_REPLICA;
    d.mig = true;
    d.gi_id = m->gi_id;
    d.ci_id = m->ci_id;
    gs_strlcpy(d.uuid, m->uuid, sizeof(d.uuid));
    if (mps)
        mps_limits(c, mem, &d);
    d.quota = replica_quota(c->memory, c->replicas, mem);
    for (unsigned n = 0; n < c->replicas; n++) {
        d.replica = n;
        snprintf(d.id, sizeof(d.id), "%s::%u", m->uuid, n);
        if (resource_add(r, &d) < 0)
            return -ENOMEM;
    }
    gp->resource = r->name;
    return 0;
}

/* Only MIG devices whose compute instance spans the GPU instance are advertised (as NVIDIA). */
static bool mig_full(const struct gs_mig_device *m) {
    return !m->ci_slices || !m->gi_slices || m->ci_slices == m->gi_slices;
}

/* MPS on the MIG devices of a GPU in MIG mode (a `mps` rule): each MIG device gets `replicas`
 * MPS replicas under its profile's name with ".shared" (or the rule's resourceName). */
static int add_mps_mig_devices(struct gs_plan *plan, const struct gs_gpu *g, const struct gs_policy *pol,
                               const struct choice *c, bool healthy, struct gs_gpu_plan *gp) {
    for (unsigned k = 0; k < g->n_mig; k++) {
        const struct gs_mig_device *m = &g->mig[k];
        if (!mig_full(m))
            continue;
        char name[GS_RESOURCE_NAME_MAX];
        if (c->resource[0]) {
            gs_strlcpy(name, c->resource, sizeof(name));
        } else {
            char base[GS_RESOURCE_NAME_MAX];
            mig_resource_name(m->profile, base, sizeof(base));
            snprintf(name, sizeof(name), "%.50s.shared", base);
        }
        int r = add_mig_replicas(plan, g, m, pol, c, name, healthy, gp);
        if (r < 0)
            return r;
    }
    return 0;
}

static int add_mig_devices(struct gs_plan *plan, const struct gs_gpu *g, const struct gs_policy *pol, bool healthy,
                           const char *single_profile, unsigned withdrawn, struct mig_share_state *st,
                           struct gs_gpu_plan *gp) {
    unsigned added = 0, other_profile = 0, partial = 0;
    char others[96] = "";
    for (unsigned k = 0; k < g->n_mig; k++) {
        const struct gs_mig_device *m = &g->mig[k];
        if (m->gi_id < 32 && (withdrawn >> m->gi_id) & 1)
            continue; /* about to be destroyed */
        if (!mig_full(m)) {
            partial++;
            continue;
        }
        char name[GS_RESOURCE_NAME_MAX];
        if (pol->mig_strategy == GS_MIG_SINGLE) {
            if (single_profile && strcmp(m->profile, single_profile) != 0) {
                if (!strstr(others, m->profile) && strlen(others) + strlen(m->profile) + 3 < sizeof(others))
                    snprintf(others + strlen(others), sizeof(others) - strlen(others), "%s%s", others[0] ? ", " : "",
                             m->profile);
                other_profile++;
                continue;
            }
            gs_strlcpy(name, DEFAULT_GPU_RESOURCE, sizeof(name));
        } else {
            mig_resource_name(m->profile, name, sizeof(name));
        }
        struct choice c;
        memset(&c, 0, sizeof(c));
        if (mig_share(pol, name, g, m, st, &c)) {
            int r = add_mig_replicas(plan, g, m, pol, &c, c.resource, healthy, gp);
            if (r < 0)
                return r;
            added++;
            continue;
        }
        struct gs_resource *r = resource_get(plan, name);
        if (!r)
            return -ENOSPC;
        if (r->n_devices && r->replicated) {
            warn(plan, "GPU %u: %s already carries replicas: MIG device %s not advertised (give the replicas a "
                       "rename)", g->index, r->name, m->uuid);
            continue;
        }
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
    if (added || withdrawn)
        return 0;
    if (other_profile)
        warn(plan, "GPU %u: its MIG devices (%s) are not advertised: migStrategy single advertises only %s devices",
             g->index, others, single_profile);
    else if (partial)
        warn(plan, "GPU %u: its %u MIG device%s have compute instances smaller than their GPU instance: not "
                   "advertised", g->index, partial, partial == 1 ? "" : "s");
    else
        warn(plan, "GPU %u: MIG mode is enabled but it has no MIG devices to advertise", g->index);
    return 0;
}

/* migStrategy single needs one MIG profile across the node; returns the first one, or NULL, and
 * names every profile found (with its GPUs) in a warning if there are several. */
static const char *single_profile(struct gs_plan *plan, const struct gs_inventory *inv) {
    const char *profiles[GS_MAX_GPUS * 2];
    unsigned long long gpus[GS_MAX_GPUS * 2];
    unsigned n = 0;
    for (unsigned i = 0; i < inv->n_gpus; i++) {
        const struct gs_gpu *g = &inv->gpus[i];
        for (unsigned k = 0; g->mig_current && k < g->n_mig; k++) {
            if (!mig_full(&g->mig[k]))
                continue;
            unsigned p = 0;
            while (p < n && strcmp(profiles[p], g->mig[k].profile) != 0)
                p++;
            if (p == n) {
                if (n == GS_ARRAY_SIZE(profiles))
                    continue;
                profiles[n] = g->mig[k].profile;
                gpus[n++] = 0;
            }
            if (g->index < 64)
                gpus[p] |= 1ULL << g->index;
        }
    }
    if (n > 1) {
        char list[GS_PLAN_LINE_MAX - 100] = "";
        size_t len = 0;
        for (unsigned p = 0; p < n && len < sizeof(list); p++) {
            char where[64] = "";
            size_t w = 0;
            for (unsigned i = 0; i < 64 && w < sizeof(where); i++)
                if ((gpus[p] >> i) & 1)
                    w += (size_t)snprintf(where + w, sizeof(where) - w, "%s%u", w ? "," : "", i);
            int k = snprintf(list + len, sizeof(list) - len, "%s%s (GPU%s %s)", p ? ", " : "", profiles[p],
                             __builtin_popcountll(gpus[p]) == 1 ? "" : "s", where);
            len += k > 0 ? (size_t)k : 0;
        }
        warn(plan, "migStrategy single needs one MIG profile on the node; found %u: %s: only %s devices are "
                   "advertised (use migStrategy mixed)", n, list, profiles[0]);
    }
    return n ? profiles[0] : NULL;
}

/* Rules and device lists that name GPUs this node does not have (by index or UUID) are most
 * likely mistakes: say so (models are globs and may legitimately match nothing). */
static void warn_unmatched(struct gs_plan *plan, const struct gs_inventory *inv, const struct gs_policy *pol,
                           const struct mig_share_state *share) {
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
                        found = ref_names_mig(t->devices[d].text, &inv->gpus[k], &inv->gpus[k].mig[m]);
                }
                if (!found)
                    warn(plan, "sharing.%s resource %s: device '%s' is not a GPU of this node", mps ? "mps" : "timeSlicing",
                         t->name, t->devices[d].text);
            }
            /* A MIG resource (or, with migStrategy single, nvidia.com/gpu on MIG devices) that
             * no MIG device of the node carries: a typo, or a layout that is not there yet. */
            bool mig_name = strncmp(t->name, "nvidia.com/mig-", 15) == 0;
            if (mig_name && i < GS_POLICY_MAX_RESOURCES && !share->used[mps][i])
                warn(plan, "sharing.%s.resources[%u]: no MIG device of this node is advertised as %s: nothing is "
                           "replicated", mps ? "mps" : "timeSlicing", i, t->name);
        }
    }
}

/* Drops resource k from the plan, keeping the GPUs' resource pointers right. */
static void drop_resource(struct gs_plan *plan, unsigned k) {
    int index[GS_MAX_GPUS];
    for (unsigned i = 0; i < plan->n_gpus && i < GS_MAX_GPUS; i++) {
        index[i] = -1;
        for (unsigned j = 0; plan->gpus[i].resource && j < plan->n_resources; j++)
            if (plan->gpus[i].resource == plan->resources[j].name)
                index[i] = (int)j;
    }
    free(plan->resources[k].devices);
    memmove(&plan->resources[k], &plan->resources[k + 1], (plan->n_resources - k - 1) * sizeof(plan->resources[0]));
    plan->n_resources--;
    for (unsigned i = 0; i < plan->n_gpus && i < GS_MAX_GPUS; i++) {
        if (index[i] == (int)k) {
            plan->gpus[i].resource = NULL;
            plan->gpus[i].mode = GS_MODE_DISABLED;
        } else if (index[i] > (int)k) {
            plan->gpus[i].resource = plan->resources[index[i] - 1].name;
        }
    }
}

/* migStrategy single with MIG devices and whole GPUs (or their replicas) under one resource:
 * NVIDIA's plugin refuses the node ("all devices on the node must be configured with the same
 * migEnabled value"). An error at flags.migStrategy; the resource is not advertised. */
static void single_mixed(struct gs_plan *plan, const struct gs_policy *pol) {
    for (unsigned k = 0; k < plan->n_resources; k++) {
        const struct gs_resource *r = &plan->resources[k];
        unsigned long long mig = 0, whole = 0;
        for (unsigned i = 0; i < r->n_devices; i++)
            if (r->devices[i].gpu < 64)
                *(gs_device_is_mig(&r->devices[i]) ? &mig : &whole) |= 1ULL << r->devices[i].gpu;
        if (!mig || !whole)
            continue;
        char wl[128] = "", ml[128] = "";
        for (int pass = 0; pass < 2; pass++) {
            char *buf = pass ? ml : wl;
            unsigned long long mask = pass ? mig : whole;
            size_t len = 0;
            for (unsigned i = 0; i < 64 && len < sizeof(wl); i++)
                if ((mask >> i) & 1)
                    len += (size_t)snprintf(buf + len, sizeof(wl) - len, "%s%u", len ? "," : "", i);
        }
        plan_error(plan, pol, pol->mig_strategy_pos, "flags.migStrategy",
                   "single needs every GPU in MIG mode with one profile, or none (as NVIDIA's plugin): %s would "
                   "carry whole GPU%s %s and the MIG devices of GPU%s %s, so it is not advertised; use "
                   "migStrategy mixed, or a gpuslice.gpus rule for the whole GPU%s",
                   r->name, __builtin_popcountll(whole) == 1 ? "" : "s", wl, __builtin_popcountll(mig) == 1 ? "" : "s",
                   ml, __builtin_popcountll(whole) == 1 ? "" : "s");
        drop_resource(plan, k);
        k--;
    }
}

bool gs_plan_dra_serves(const struct gs_policy *p, unsigned index, const char *uuid, bool if_unset) {
    switch (p->dra_gpus) {
    case GS_DRA_UNSET: return if_unset;
    case GS_DRA_NONE: return false;
    case GS_DRA_ALL: return true;
    case GS_DRA_LIST: break;
    }
    char idx[16];
    snprintf(idx, sizeof(idx), "%u", index);
    for (unsigned i = 0; i < p->n_dra_devices && i < GS_POLICY_MAX_DEVICES; i++)
        if (!strcmp(p->dra_devices[i].text, idx) || (uuid && !strcmp(p->dra_devices[i].text, uuid)))
            return true;
    return false;
}

int gs_plan_build(const struct gs_inventory *inv, const struct gs_policy *pol, const struct gs_health *health,
                  struct gs_plan *out) {
    memset(out, 0, sizeof(*out));
    out->n_gpus = inv->n_gpus;
    const char *single = pol->mig_strategy == GS_MIG_SINGLE ? single_profile(out, inv) : NULL;
    struct mig_share_state share;
    memset(&share, 0, sizeof(share));
    for (unsigned i = 0; i < inv->n_gpus; i++) {
        const struct gs_gpu *g = &inv->gpus[i];
        struct gs_gpu_plan *gp = &out->gpus[i];
        if (!g->uuid[0]) {
            gp->mode = GS_MODE_DISABLED;
            warn(out, "GPU %u could not be read (%s): not advertised", g->index, g->error[0] ? g->error : "no UUID");
            continue;
        }
        if (gs_plan_dra_serves(pol, g->index, g->uuid, false)) {
            gp->mode = GS_MODE_DISABLED; /* the DRA driver's (gpuslice.dra.gpus), never both */
            gp->dra = true;
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
                                &share, gp) < 0)
                goto oom;
            continue;
        }
        if (mig_on) {
            warn(out, "GPU %u is in MIG mode: it cannot be shared as %s; not advertised", g->index,
                 gs_mode_name(c.mode));
            gp->mode = GS_MODE_DISABLED;
            continue;
        }
        if (c.mode == GS_MODE_FRACTIONAL) {
            if (add_fractional(out, g, healthy, gp) < 0)
                goto oom;
            continue;
        }
        char what[GS_UUID_LEN * 2 + 16];
        snprintf(what, sizeof(what), "GPU %u (%s)", g->index, g->name);
        if (c.mode != GS_MODE_WHOLE && !quota_fits(out, pol, &c, g->mem_total, what)) {
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
    if (pol->mig_strategy == GS_MIG_SINGLE)
        single_mixed(out, pol);
    warn_unmatched(out, inv, pol, &share);
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
