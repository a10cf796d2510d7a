/* coexist.c: another device plugin serving one of our resources (see coexist.h). Who serves what:
 * a listening nvidia-*.sock serves the nvidia.com/ resource its name gives (NVIDIA's plugin names
 * its sockets so); a listening socket of another plugin serves the resources the kubelet's
 * checkpoint registers with device IDs that are not ours (the checkpoint does not say which
 * socket registered what, so all such sockets are named). Stale sockets serve nothing. The
 * checkpoint is read and parsed at most once per check, for both of its uses. */
#include "agent/coexist.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/state.h"
#include "kubelet/plugindir.h"
#include "util/log.h"
#include "util/util.h"

#define MAX_SOCKETS 64

#define MAX_NVIDIA 16

struct scan {
    unsigned n_nvidia;             /* the resources listening nvidia-*.sock serve, ours or not */
    char nvidia[MAX_NVIDIA][GS_RESOURCE_NAME_MAX];
    unsigned n_other;
    char other[AGENT_COEXIST_BY_MAX]; /* the other plugins' listening sockets, ", "-separated */
};

static void add_conflict(struct agent_coexist *c, const char *resource, const char *by) {
    for (unsigned i = 0; i < c->n; i++)
        if (!strcmp(c->c[i].resource, resource))
            return;
    if (c->n == GS_PLAN_MAX_RESOURCES)
        return;
    gs_strlcpy(c->c[c->n].resource, resource, sizeof(c->c[c->n].resource));
    gs_strlcpy(c->c[c->n].by, by, sizeof(c->c[c->n].by));
    c->n++;
}

static const char *conflict_of(const struct agent_coexist *c, const char *resource) {
    for (unsigned i = 0; i < c->n; i++)
        if (!strcmp(c->c[i].resource, resource))
            return c->c[i].by;
    return NULL;
}

/* The plugins' sockets in the directory: NVIDIA's give their resource, the others are listed. */
static void scan_sockets(const char *dir, const struct gs_plan *plan, struct agent_coexist *found, struct scan *s) {
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    unsigned seen = 0;
    while ((e = readdir(d)) && seen < MAX_SOCKETS) {
        enum gs_kl_socket_kind k = gs_kl_socket_kind(e->d_name);
        if (k != GS_KL_SOCK_NVIDIA && k != GS_KL_SOCK_OTHER)
            continue;
        seen++;
        char path[PATH_MAX], resource[GS_RESOURCE_NAME_MAX];
        if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path))
            continue;
        if (k == GS_KL_SOCK_NVIDIA && gs_kl_nvidia_resource(e->d_name, resource, sizeof(resource)) < 0)
            continue;
        int err;
        if (gs_kl_socket_probe(path, &err) != GS_KL_SOCK_LISTENING)
            continue;
        if (k == GS_KL_SOCK_NVIDIA && s->n_nvidia < MAX_NVIDIA)
            gs_strlcpy(s->nvidia[s->n_nvidia++], resource, sizeof(s->nvidia[0]));
        if (k == GS_KL_SOCK_NVIDIA && !gs_plan_resource(plan, resource))
            continue;
        if (k == GS_KL_SOCK_NVIDIA) {
            char by[AGENT_COEXIST_BY_MAX];
            snprintf(by, sizeof(by), "%.120s (NVIDIA's device plugin)", e->d_name);
            add_conflict(found, resource, by);
        } else {
            size_t n = strlen(s->other);
            if (n + strlen(e->d_name) + 3 < sizeof(s->other))
                snprintf(s->other + n, sizeof(s->other) - n, "%s%s", n ? ", " : "", e->d_name);
            s->n_other++;
        }
    }
    closedir(d);
}

/* The kubelet's checkpoint as one check reads it: loaded on first use, then the same for every
 * later use in that check (one read, one parse). */
struct checkpoint {
    bool loaded;
    int read_r;                    /* gs_read_file's: 0, or -errno (nothing to say: no checkpoint) */
    int parse_r;                   /* 0, or -EINVAL (err: why) or -ENOMEM */
    char path[PATH_MAX], err[256];
    unsigned n, cap;
    struct cp_device {             /* every (resource, device ID) it registers, in its order */
        char *resource, *id;
    } *dev;
};

static void cp_collect(const char *resource, const char *id, void *ctx) {
    struct checkpoint *cp = ctx;
    if (cp->parse_r < 0)
        return;
    if (cp->n == cp->cap) {
        unsigned cap = cp->cap ? cp->cap * 2 : 64;
        struct cp_device *d = realloc(cp->dev, cap * sizeof(*d));
        if (!d) {
            cp->parse_r = -ENOMEM;
            return;
        }
        cp->dev = d;
        cp->cap = cap;
    }
    char *r = strdup(resource), *i = strdup(id);
    if (!r || !i) {
        free(r);
        free(i);
        cp->parse_r = -ENOMEM;
        return;
    }
    cp->dev[cp->n++] = (struct cp_device){ r, i };
}

/* 0 when the checkpoint was read (then parse_r says whether it parsed), else read_r. */
static int cp_load(struct checkpoint *cp, const char *dir) {
    if (cp->loaded)
        return cp->read_r;
    cp->loaded = true;
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    if (snprintf(cp->path, sizeof(cp->path), "%s/%s", dir, GS_KL_CHECKPOINT_NAME) >= (int)sizeof(cp->path))
        return cp->read_r = -ENAMETOOLONG;
    if ((cp->read_r = gs_read_file(cp->path, GS_KL_CHECKPOINT_MAX, &text, &len)) < 0)
        return cp->read_r;
    int r = gs_kl_checkpoint_each(text, len, cp_collect, cp, cp->err, sizeof(cp->err));
    if (r < 0)
        cp->parse_r = r;
    return 0;
}

static void cp_free(struct checkpoint *cp) {
    for (unsigned i = 0; i < cp->n; i++) {
        free(cp->dev[i].resource);
        free(cp->dev[i].id);
    }
    free(cp->dev);
}

/* How many of the IDs the checkpoint registers for r are not r's devices; the first in first. */
static int cp_foreign(const struct checkpoint *cp, const struct gs_resource *r, char *first, size_t len) {
    int n = 0;
    for (unsigned i = 0; i < cp->n; i++) {
        if (strcmp(cp->dev[i].resource, r->name) || gs_resource_device(r, cp->dev[i].id))
            continue;
        if (!n++)
            gs_strlcpy(first, cp->dev[i].id, len);
    }
    return n;
}

/* With other plugins listening: the plan's resources that the checkpoint registers with IDs of
 * devices that are not ours. */
static void scan_checkpoint(const char *dir, const struct gs_plan *plan, const struct scan *s,
                            struct checkpoint *cp, struct agent_coexist *found) {
    if (cp_load(cp, dir) < 0)
        return;
    for (unsigned i = 0; i < plan->n_resources; i++) {
        const struct gs_resource *r = &plan->resources[i];
        if (conflict_of(found, r->name))
            continue;
        if (cp->parse_r == -EINVAL) {
            log_warn("Cannot read %s: %s; other device plugins (%s) are not checked against it", cp->path, cp->err,
                     s->other);
            return;
        }
        if (cp->parse_r < 0)
            return;
        char first[GS_DEVICE_ID_MAX] = "";
        int n = cp_foreign(cp, r, first, sizeof(first));
        if (n > 0) {
            char by[AGENT_COEXIST_BY_MAX];
            int w = snprintf(by, sizeof(by), "another device plugin (listening: %.60s; the kubelet's checkpoint "
                             "registers %d device(s) not ours, e.g. %.40s)", s->other, n, first);
            (void)w; /* at most ~210 bytes: never truncated */
            add_conflict(found, r->name, by);
        }
    }
}

static void log_changes(const struct agent_coexist *old, const struct agent_coexist *now, bool refuse) {
    for (unsigned i = 0; i < now->n; i++) {
        const char *was = conflict_of(old, now->c[i].resource);
        if (was && !strcmp(was, now->c[i].by))
            continue;
        if (refuse)
            log_warn("%s is served by %s: gpuslice does not register it while that plugin serves it (two plugins "
                     "would double-count the devices); turn the other plugin off (docs/operator.md), or set "
                     "gpuslice.coexistence.otherPlugin: warn",
                     now->c[i].resource, now->c[i].by);
        else
            log_warn("%s is also served by %s: both register it and the kubelet keeps the last registration "
                     "(gpuslice.coexistence.otherPlugin: warn); turn the other plugin off (docs/operator.md)",
                     now->c[i].resource, now->c[i].by);
    }
    for (unsigned i = 0; i < old->n; i++)
        if (!conflict_of(now, old->c[i].resource))
            log_info("%s is no longer served by %s%s", old->c[i].resource, old->c[i].by,
                     refuse ? ": gpuslice registers it" : "");
}

/* Removes resource i from the plan; the GPUs' resource pointers follow the array. */
static void drop(struct gs_plan *plan, unsigned i) {
    const char *gone = plan->resources[i].name;
    for (unsigned g = 0; g < plan->n_gpus; g++) {
        const char *p = plan->gpus[g].resource;
        if (!p)
            continue;
        size_t k = (size_t)(p - (const char *)plan->resources) / sizeof(plan->resources[0]);
        if (p == gone)
            plan->gpus[g].resource = NULL;
        else if (k > i)
            plan->gpus[g].resource = plan->resources[k - 1].name;
    }
    free(plan->resources[i].devices);
    memmove(&plan->resources[i], &plan->resources[i + 1],
            (plan->n_resources - i - 1) * sizeof(plan->resources[0]));
    plan->n_resources--;
}

/* share: which GPUs the other plugins' devices name. A device is the other's when its resource is
 * one a listening nvidia-*.sock serves or one another plugin serves (found above), or when other
 * sockets listen and its resource is not gpuslice's: not in the plan and not under the domains
 * gpuslice's resource names use (the checkpoint keeps what gpuslice registered under another
 * policy, which must not count as another plugin's). */
struct foreign_gpus {
    const struct gs_inventory *inv;
    const struct gs_plan *plan;
    const struct agent_coexist *found;
    const struct scan *s;
    struct agent_coexist *out;
};

static bool nvidia_serves(const struct scan *s, const char *resource) {
    for (unsigned i = 0; i < s->n_nvidia; i++)
        if (!strcmp(s->nvidia[i], resource))
            return true;
    return false;
}

static bool ours_by_name(const struct gs_plan *plan, const char *resource) {
    return gs_plan_resource(plan, resource) || !strncmp(resource, "nvidia.com/", 11) ||
           !strncmp(resource, "gpuslice.io/", 12);
}

static void foreign_device(const char *resource, const char *id, void *ctx) {
    struct foreign_gpus *f = ctx;
    bool theirs = conflict_of(f->found, resource) || nvidia_serves(f->s, resource) ||
                  (f->s->n_other && !ours_by_name(f->plan, resource));
    int g = theirs ? gs_inventory_gpu_of_device_id(f->inv, id) : -1;
    if (g >= 0 && f->inv->gpus[g].index < GS_MAX_GPUS)
        f->out->gpu[f->inv->gpus[g].index] = true;
}

static void scan_gpus(const char *dir, const struct gs_inventory *inv, const struct gs_plan *plan,
                      const struct scan *s, struct checkpoint *cp, struct agent_coexist *found) {
    if (!found->n && !s->n_nvidia && !s->n_other)
        return;
    if (cp_load(cp, dir) < 0)
        return;
    if (cp->parse_r == -EINVAL) {
        log_warn("Cannot read %s: %s; which GPUs the other device plugin serves is not known", cp->path, cp->err);
        return;
    }
    if (cp->parse_r < 0)
        return;
    struct foreign_gpus f = { inv, plan, found, s, found };
    for (unsigned i = 0; i < cp->n; i++)
        foreign_device(cp->dev[i].resource, cp->dev[i].id, &f);
}

static void log_gpu_changes(const struct gs_inventory *inv, const struct agent_coexist *old,
                            const struct agent_coexist *now) {
    for (unsigned i = 0; i < inv->n_gpus; i++) {
        unsigned g = inv->gpus[i].index;
        if (g >= GS_MAX_GPUS)
            continue;
        if (now->gpu[g] && !old->gpu[g])
            log_warn("GPU %u (%s) is served by another device plugin (the kubelet's checkpoint registers its "
                     "devices): gpuslice leaves it out of every resource it serves "
                     "(gpuslice.coexistence.otherPlugin: share)",
                     g, inv->gpus[i].uuid);
        else if (!now->gpu[g] && old->gpu[g])
            log_info("GPU %u (%s) is no longer served by another device plugin: gpuslice serves it", g,
                     inv->gpus[i].uuid);
    }
}

void agent_plan_drop_gpus(const struct gs_inventory *inv, struct gs_plan *plan, const bool gpu[GS_MAX_GPUS]) {
    for (unsigned i = plan->n_resources; i-- > 0;) {
        struct gs_resource *r = &plan->resources[i];
        unsigned k = 0;
        for (unsigned d = 0; d < r->n_devices; d++)
            if (!(r->devices[d].gpu < GS_MAX_GPUS && gpu[r->devices[d].gpu]))
                r->devices[k++] = r->devices[d];
        r->n_devices = k;
        if (!k)
            drop(plan, i);
    }
    for (unsigned i = 0; i < inv->n_gpus && i < plan->n_gpus; i++)
        if (inv->gpus[i].index < GS_MAX_GPUS && gpu[inv->gpus[i].index])
            plan->gpus[i].resource = NULL;
}

void agent_coexist_apply(struct agent *a, struct gs_plan *plan) {
    struct agent_coexist *found = calloc(1, sizeof(*found));
    if (!found)
        return;
    struct scan s = { 0 };
    struct checkpoint cp = { 0 };
    scan_sockets(a->o->kubelet_dir, plan, found, &s);
    if (s.n_other)
        scan_checkpoint(a->o->kubelet_dir, plan, &s, &cp, found);
    bool share = a->policy->other_plugin == GS_OTHER_SHARE;
    bool refuse = a->policy->other_plugin == GS_OTHER_REFUSE || share;
    if (share)
        scan_gpus(a->o->kubelet_dir, a->inv, plan, &s, &cp, found);
    cp_free(&cp);
    log_changes(&a->coexist, found, refuse);
    if (share)
        log_gpu_changes(a->inv, &a->coexist, found);
    a->coexist = *found;
    free(found);
    for (unsigned i = plan->n_resources; refuse && i-- > 0;)
        if (conflict_of(&a->coexist, plan->resources[i].name))
            drop(plan, i);
    if (share)
        agent_plan_drop_gpus(a->inv, plan, a->coexist.gpu);
}
