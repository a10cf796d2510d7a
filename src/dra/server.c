/* server.c: the DRA driver's kubelet side (see dra.h): the registration and DRAPlugin servers on
 * grpcsrv.h, prepare and unprepare with their files (the claims' transient CDI specs, the
 * checkpoint), and the resource-health stream (health.h). The DRA methods run on the DRA server's
 * thread, one call at a time, so the checkpoint is only ever changed there; the device table is
 * set from the agent's thread, under the lock. */
#include "dra/ckptfile.h"
#include "dra/dra.h"
#include "dra/health.h"
#include "dra/migdemand.h"
#include "dra/prepare.h"
#include "dra/share.h"
#include "dra/slices.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../guard/guard_layout.h"
#include "dra/dra.pb-c.h"
#include "dra/pluginregistration.pb-c.h"
#include "kubelet/grpcsrv.h"
#include "util/log.h"
#include "util/util.h"

typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim Claim;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Device Device;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest PrepareReq;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse PrepareResp;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse__ClaimsEntry PrepareEntry;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourceResponse PrepareOne;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesRequest UnprepareReq;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse UnprepareResp;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse__ClaimsEntry UnprepareEntry;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourceResponse UnprepareOne;

#define MAX_DEVICES 256

struct dra_server {
    char driver[254], pool[254];
    char cdi_root[PATH_MAX], cdi_kind[128];
    char plugin_dir[PATH_MAX], dra_sock[PATH_MAX + 16], reg_sock[PATH_MAX + 16], checkpoint[PATH_MAX + 16];
    struct dra_claim_source source;
    struct gs_grpc_server *dra, *reg;
    atomic_uint registrations;

    pthread_mutex_t lock; /* the device table */
    size_t n_devices;
    struct dra_device devices[MAX_DEVICES];

    /* The prepared claims: changed only by update_checkpoint (on the DRA thread, under cp_lock),
     * which saves the file after each change. An entry is put "pending" (prepare started) before
     * anything is made for the claim and replaced when its prepare completes. */
    pthread_mutex_t cp_lock;
    struct dra_checkpoint cp;
    /* A damaged checkpoint set aside at the start (aside: where it is now; lost_why: why): the
     * claims it held are rebuilt at the first call (rebuild_due) from the claim source. */
    bool lost, rebuild_due;
    char aside[PATH_MAX + 64], lost_why[512];
    char guard_root[PATH_MAX], guard_lib[PATH_MAX];
    struct dra_mig mig;       /* MIG on demand: the DRA thread's NVML handle */
};

/* ---- registration --------------------------------------------------------------------------- */

static const char *const services[] = { "v1.DRAPlugin", "v1beta1.DRAPlugin" };

static int get_info(void *ctx, const ProtobufCMessage *req, ProtobufCMessage **resp, char *err, size_t errlen) {
    struct dra_server *s = ctx;
    (void)req, (void)err, (void)errlen;
    Pluginregistration__PluginInfo *info = malloc(sizeof(*info));
    if (!info)
        return -ENOMEM;
    pluginregistration__plugin_info__init(info);
    info->type = "DRAPlugin";
    info->name = s->driver;
    info->endpoint = s->dra_sock;
    info->n_supported_versions = GS_ARRAY_SIZE(services);
    info->supported_versions = (char **)services;
    log_info("DRA: the kubelet asked GetInfo on %s: %s at %s", s->reg_sock, s->driver, s->dra_sock);
    *resp = &info->base;
    return 0;
}

static int notify_status(void *ctx, const ProtobufCMessage *req, ProtobufCMessage **resp, char *err, size_t errlen) {
    struct dra_server *s = ctx;
    (void)err, (void)errlen;
    const Pluginregistration__RegistrationStatus *st = (const Pluginregistration__RegistrationStatus *)req;
    if (st->plugin_registered) {
        unsigned n = atomic_fetch_add(&s->registrations, 1) + 1;
        log_info("DRA: registered with the kubelet as %s (registration %u)", s->driver, n);
    } else {
        log_error("DRA: the kubelet refused to register %s: %s", s->driver, st->error);
    }
    Pluginregistration__RegistrationStatusResponse *r = malloc(sizeof(*r));
    if (!r)
        return -ENOMEM;
    pluginregistration__registration_status_response__init(r);
    *resp = &r->base;
    return 0;
}

static void release_plain(void *ctx, ProtobufCMessage *resp) {
    (void)ctx;
    free(resp);
}

static const struct gs_grpc_method reg_methods[] = {
    { "/pluginregistration.Registration/GetInfo", &pluginregistration__info_request__descriptor, get_info,
      release_plain },
    { "/pluginregistration.Registration/NotifyRegistrationStatus",
      &pluginregistration__registration_status__descriptor, notify_status, release_plain },
};

/* ---- files ---------------------------------------------------------------------------------- */

/* A change of the checkpoint: > 0 changed (the file is saved), 0 nothing to do, -errno. */
typedef int (*cp_mutate_fn)(struct dra_checkpoint *cp, const void *arg);

/* The one way the checkpoint changes: mutate, then the file saved, under cp_lock. An error of
 * either with why in err ("PATH: why" for the file: the change stays in memory, and the next
 * save writes it). */
static int update_checkpoint(struct dra_server *s, cp_mutate_fn mutate, const void *arg, char *err, size_t errlen) {
    pthread_mutex_lock(&s->cp_lock);
    int rc = mutate(&s->cp, arg);
    char *text = rc > 0 ? dra_checkpoint_render(&s->cp) : NULL;
    if (rc > 0 && !text)
        rc = -ENOMEM;
    if (rc == -ENOMEM || rc == -ENOSPC)
        snprintf(err, errlen, "%s", rc == -ENOSPC ? "too many prepared claims" : "out of memory");
    else if (rc < 0)
        snprintf(err, errlen, "the checkpoint has no entry to change (%s)", strerror(-rc));
    if (text) {
        gs_grpc_server_notify(s->dra); /* the prepared devices are the health stream's too */
        int w = gs_write_file_atomic(s->checkpoint, text, strlen(text), true);
        if (w < 0) { /* else rc stays > 0: changed and saved */
            rc = w;
            snprintf(err, errlen, "checkpoint not saved: %.400s: %s", s->checkpoint, strerror(-w));
        }
        free(text);
    }
    pthread_mutex_unlock(&s->cp_lock);
    return rc;
}

static int m_put(struct dra_checkpoint *cp, const void *arg) {
    int rc = dra_checkpoint_put(cp, arg);
    return rc < 0 ? rc : 1;
}

static int m_remove(struct dra_checkpoint *cp, const void *arg) {
    return dra_checkpoint_remove(cp, arg) ? 1 : 0;
}

/* Prepare started: a pending entry for a claim the checkpoint does not hold (one it holds, pending
 * or prepared, stays as it is: its record is what is there). */
static int m_begin(struct dra_checkpoint *cp, const void *arg) {
    const struct dra_claim *c = arg;
    if (dra_checkpoint_find(cp, c->uid))
        return 0;
    struct dra_prepared *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    gs_strlcpy(p->uid, c->uid, sizeof(p->uid));
    gs_strlcpy(p->ns, c->ns, sizeof(p->ns));
    gs_strlcpy(p->name, c->name, sizeof(p->name));
    p->pending = true;
    int rc = dra_checkpoint_put(cp, p);
    free(p);
    return rc < 0 ? rc : 1;
}

/* A pending entry that made nothing (a MIG placement refused before its first step) is dropped. */
static int m_drop_unmade(struct dra_checkpoint *cp, const void *arg) {
    const struct dra_prepared *p = dra_checkpoint_find(cp, arg);
    bool made = false;
    for (unsigned i = 0; p && i < p->n_devices; i++)
        made |= p->devices[i].mig.on;
    return p && p->pending && !made && dra_checkpoint_remove(cp, arg) ? 1 : 0;
}

/* A step of a claim's MIG instance: device index's record (and, at prepare, its result). */
struct mig_step {
    struct dra_server *s;
    const char *uid;
    unsigned index, n_results;
    const struct dra_result *result; /* NULL at unprepare */
    const struct dra_mig_made *rec;
};

static int m_mig_step(struct dra_checkpoint *cp, const void *arg) {
    const struct mig_step *m = arg;
    struct dra_prepared *entry = dra_checkpoint_get(cp, m->uid);
    if (!entry || m->index >= DRA_MAX_RESULTS)
        return -ENOENT;
    struct dra_prepared_device *pd = &entry->devices[m->index];
    if (m->result) {
        if (entry->n_devices < m->n_results) /* the record of each device, by position */
            entry->n_devices = m->n_results;
        gs_strlcpy(pd->request, m->result->request, sizeof(pd->request));
        gs_strlcpy(pd->pool, m->result->pool, sizeof(pd->pool));
        gs_strlcpy(pd->device, m->result->device, sizeof(pd->device));
        for (unsigned j = 0; j < DRA_CDI_IDS; j++)
            if (!pd->cdi[j][0])
                gs_strlcpy(pd->cdi[j], "pending=", sizeof(pd->cdi[j]));
    }
    pd->mig = *m->rec;
    return 1;
}

static int record_mig_step(void *ctx, char *err, size_t errlen) {
    const struct mig_step *m = ctx;
    int rc = update_checkpoint(m->s, m_mig_step, m, err, errlen);
    return rc < 0 ? rc : 0;
}

/* The claim's entry's fields, copied (the DRA thread's: no other changes it). */
static bool entry_of(struct dra_server *s, const char *uid, struct dra_prepared *out) {
    const struct dra_prepared *p = dra_checkpoint_find(&s->cp, uid);
    if (p)
        *out = *p;
    return p != NULL;
}

static void spec_path(const struct dra_server *s, const char *uid, char *buf, size_t len) {
    char base[128];
    dra_claim_spec_file(s->cdi_kind, uid, base, sizeof(base));
    snprintf(buf, len, "%s/%s", s->cdi_root, base);
}

/* ---- prepare -------------------------------------------------------------------------------- */

/* The guard directory of a claim (sub < 0) or of its request whose first result is sub
 * (GUARD_ROOT/claim-<uid>/r<sub>: a claim with several guarded requests, each with its own CUDA
 * ordinals). */
static int guard_path(const struct dra_server *s, const char *uid, int sub, char *dir, size_t dirlen) {
    int rc = dra_guard_dir(s->guard_root, uid, dir, dirlen);
    size_t n = strlen(dir);
    if (rc == 0 && sub >= 0 && (size_t)snprintf(dir + n, dirlen - n, "/r%d", sub) >= dirlen - n)
        rc = -ENAMETOOLONG;
    return rc;
}

/* The claim's guard files (GUARD_ROOT/claim-<uid>: limits, state/region) and the node's
 * ld.so.preload, for the device plugin's mounts; nothing is left of them when this fails. */
static int write_guard(const struct dra_server *s, const char *uid, int sub, const struct gs_guard_limits *l, char *dir,
                       size_t dirlen, char *preload, size_t plen, char *err, size_t errlen) {
    char text[4096], why[PATH_MAX + 128];
    if (!s->guard_lib[0] || !s->guard_root[0]) {
        snprintf(err, errlen, "a shared GPU's claim needs the guard, but %s was not found",
                 s->guard_lib[0] ? "the guard root" : "libgpuslice-guard.so");
        return -ENOENT;
    }
    if (guard_path(s, uid, sub, dir, dirlen) < 0) {
        snprintf(err, errlen, "the guard root %.200s and claim UID '%.40s' make no guard directory", s->guard_root, uid);
        dir[0] = '\0';
        return -ENAMETOOLONG;
    }
    if (gs_guard_path(s->guard_root, GS_GUARD_ROOT_PRELOAD, preload, plen) < 0) {
        snprintf(err, errlen, "the guard root %.200s... is too long for the claim's mounts", s->guard_root);
        dir[0] = '\0';
        return -ENAMETOOLONG;
    }
    int len = gs_guard_limits_format(l, text, sizeof(text)), r;
    if (len < 0) {
        snprintf(err, errlen, "the guard's limits cannot be written (%s)", strerror(-len));
        return len;
    }
    if ((r = gs_guard_dir_create(dir, text, (size_t)len, NULL, NULL, why, sizeof(why))) < 0 ||
        (r = gs_guard_preload_ensure(s->guard_root, preload, plen, why, sizeof(why))) < 0) {
        snprintf(err, errlen, "%.500s", why);
        gs_guard_dir_remove(dir);
        dir[0] = '\0';
        return r;
    }
    return 0;
}

/* The claim's MIG placements: made (or found) one by one, each step recorded in the claim's
 * entry (update_checkpoint), which its prepare's start put there. */
static int prepare_mig(struct dra_server *s, const struct dra_claim *c, const struct dra_bound *b,
                       struct dra_edits *e, struct dra_mig_made made[DRA_MAX_RESULTS], char *err, size_t errlen) {
    struct dra_prepared *entry = malloc(sizeof(*entry));
    int rc = entry ? 0 : -ENOMEM;
    for (unsigned i = 0; rc == 0 && i < c->n_results; i++) {
        const struct gs_dra_device_ref ref = b->ref[i];
        if (!ref.mig)
            continue;
        struct dra_mig_made rec = { 0 };
        if (entry_of(s, c->uid, entry) && i < entry->n_devices)
            rec = entry->devices[i].mig;
        const struct mig_step step = { s, c->uid, i, c->n_results, &c->results[i], &rec };
        char why[400];
        unsigned before = e->n_nodes;
        if ((rc = dra_mig_prepare(&s->mig, ref.gpu, ref.profile_id, ref.start, &rec, record_mig_step, (void *)&step, e,
                                  why, sizeof(why))) < 0)
            snprintf(err, errlen, "request %.127s: MIG device %.63s: %.200s", c->results[i].request, c->results[i].device,
                     why);
        for (unsigned k = before; k < e->n_nodes; k++)
            e->nodes[k].result = i; /* the nodes of result i's device: its containers' only */
        made[i] = rec;
    }
    free(entry);
    return rc;
}

/* An MPS share's daemon: running (as the agent last saw it) and its pipe directory there; else
 * -EAGAIN saying why (the kubelet retries the prepare). */
static int mps_ready(const struct dra_result *r, const struct dra_device *d, char *err, size_t errlen) {
    char pipe[600];
    struct stat st;
    snprintf(pipe, sizeof(pipe), "%s/%s/pipe", d->mps_root, d->cdi);
    if (d->mps_down[0]) {
        snprintf(err, errlen, "request %.127s: device %.63s is shared by MPS, but its control daemon (%.96s) is not "
                 "running: %.63s (the agent's log says why)", r->request, d->name, d->cdi, d->mps_down);
        return -EAGAIN;
    }
    int there = stat(pipe, &st) == 0 ? 1 : errno == ENOENT ? 0 : -1;
    if (there <= 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "request %.63s: device %.63s is shared by MPS, but its pipe directory %.240s %s: no "
                 "control daemon runs for it", r->request, d->name, pipe,
                 there == 0 ? "does not exist" : there < 0 ? "cannot be read" : "is not a directory");
        return -EAGAIN;
    }
    return 0;
}

/* Each result's edits: its request's guard and MPS edits, so that a container gets those of the
 * requests it names only. A request with time-sliced shares gets its own guard limits (its devices
 * numbered from CUDA ordinal 0, as a container naming it sees them), in the claim's guard
 * directory, or in claim_dir/r<I> when several requests of the claim are guarded. The claim's MPS
 * shares are checked together first (a container naming several requests talks to one daemon).
 * claim_dir: the claim's guard directory once something was written there (removed on failure). */
static int request_edits(const struct dra_server *s, const struct dra_claim *c, const struct dra_share *shares,
                         const struct dra_device *const *bound, struct gs_guard_limits *l, char *claim_dir,
                         size_t cdlen, struct dra_edits *e, char *err, size_t errlen) {
    struct gs_alloc_response *a = calloc(1, sizeof(*a));
    int rc = a ? dra_share_edits(shares, bound, c->n_results, NULL, NULL, NULL, a, err, errlen) : -ENOMEM;
    unsigned first[DRA_MAX_RESULTS], guarded_requests = 0;
    bool guarded[DRA_MAX_RESULTS] = { false };
    for (unsigned i = 0; i < c->n_results; i++) {
        for (first[i] = 0; !dra_same_request(c, i, first[i]); first[i]++)
            ;
        if (shares[i].sharing == DRA_SHARING_TIME_SLICING) {
            guarded_requests += !guarded[first[i]];
            guarded[first[i]] = true;
        }
    }
    if (rc == 0 && guarded_requests) { /* one guarded claim a container (share.h) */
        int one = dra_share_one_guard(c, &s->source, &s->cp, err, errlen);
        if (one < 0)
            rc = one;
        else if (one > 0)
            log_warn("DRA: %.63s/%.200s: %s", c->ns, c->name, err);
        if (one >= 0)
            err[0] = '\0';
    }
    for (unsigned i = 0; rc == 0 && i < c->n_results; i++) {
        struct dra_share sub[DRA_MAX_RESULTS];
        const struct dra_device *dev[DRA_MAX_RESULTS];
        char dir[256] = "", preload[256] = "";
        unsigned m = 0;
        for (unsigned j = 0; j < c->n_results; j++) {
            if (first[j] == first[i]) {
                sub[m] = shares[j];
                dev[m++] = bound[j];
            }
        }
        int at = guarded_requests > 1 ? (int)first[i] : -1;
        if (guarded[first[i]] && first[i] == i) {
            if (dra_share_guard_limits(sub, dev, m, l) < 0) {
                snprintf(err, errlen, "request %.127s: more than %d guarded GPUs", c->results[i].request,
                         GS_GUARD_MAX_DEVICES);
                rc = -E2BIG;
                break;
            }
            if (!claim_dir[0] && dra_guard_dir(s->guard_root, c->uid, claim_dir, cdlen) < 0)
                claim_dir[0] = '\0';
            if ((rc = write_guard(s, c->uid, at, l, dir, sizeof(dir), preload, sizeof(preload), err, errlen)) < 0)
                break;
        } else if (guarded[first[i]]) {
            guard_path(s, c->uid, at, dir, sizeof(dir));
            /* it fitted at the request's first result */
            gs_guard_path(s->guard_root, GS_GUARD_ROOT_PRELOAD, preload, sizeof(preload));
        }
        memset(a, 0, sizeof(*a));
        if ((rc = dra_share_edits(sub, dev, m, dir[0] ? dir : NULL, s->guard_lib, preload, a, err, errlen)) == 0 &&
            (rc = dra_result_edits_from(&e->extra[i], a)) < 0)
            snprintf(err, errlen, "request %.127s: its edits do not fit", c->results[i].request);
    }
    free(a);
    return rc;
}

/* A fetched claim: its devices, shares and MIG instances, the guard's files, its spec. */
static int prepare_fetched(struct dra_server *s, const struct dra_claim *c, struct dra_prepared *out, char **spec,
                           char *err, size_t errlen) {
    struct dra_device *devs = malloc(sizeof(s->devices));
    struct dra_edits *e = calloc(1, sizeof(*e));
    struct dra_mig_made *made = calloc(DRA_MAX_RESULTS, sizeof(*made));
    struct gs_guard_limits *l = malloc(sizeof(*l));
    struct dra_bound b;
    const struct dra_device *const *bound = b.dev;
    struct dra_claim_configs cfgs;
    struct dra_share shares[DRA_MAX_RESULTS];
    char guard_dir[256] = "";
    int rc = -ENOMEM;
    if (!devs || !e || !made || !l)
        goto out;
    pthread_mutex_lock(&s->lock);
    size_t n = s->n_devices;
    memcpy(devs, s->devices, n * sizeof(*devs));
    pthread_mutex_unlock(&s->lock);
    if ((rc = dra_resolve(c, devs, n, &b, err, errlen)) < 0)
        goto out;
    dra_claim_configs_decode(c, &cfgs); /* each config once for the claim, not once a result */
    for (unsigned i = 0; i < c->n_results; i++) {
        struct dra_gpu_config cfg;
        if ((rc = dra_config_for(c, &cfgs, c->results[i].request, &cfg, err, errlen)) < 0 ||
            (rc = dra_share_of(&c->results[i], bound[i], &cfg, &shares[i], err, errlen)) < 0 ||
            (shares[i].sharing == DRA_SHARING_MPS && (rc = mps_ready(&c->results[i], bound[i], err, errlen)) < 0))
            goto out;
    }
    bool any_mig = false;
    if ((rc = prepare_mig(s, c, &b, e, made, err, errlen)) < 0)
        goto out;
    for (unsigned i = 0; i < c->n_results; i++) {
        if (made[i].uuid[0]) {
            e->uuid[i] = made[i].uuid;
            any_mig = true;
        }
    }
    if ((rc = request_edits(s, c, shares, bound, l, guard_dir, sizeof(guard_dir), e, err, errlen)) < 0 ||
        (rc = dra_prepare_claim_ex(c, bound, e, s->cdi_kind, out, spec, err, errlen)) < 0)
        goto out;
    for (unsigned i = 0; i < out->n_devices; i++)
        out->devices[i].mig = made[i];
    out->guarded = guard_dir[0] != '\0';
    if (any_mig || guard_dir[0])
        log_info("DRA: %.63s/%.200s: %s%s%s%s", c->ns, c->name, any_mig ? "its MIG devices are there" : "",
                 any_mig && guard_dir[0] ? "; " : "", guard_dir[0] ? "the guard's files are in " : "", guard_dir);
out:
    if (rc < 0 && guard_dir[0])
        gs_guard_dir_remove(guard_dir);
    free(devs);
    free(e);
    free(made);
    free(l);
    return rc;
}

static void drop_unmade(struct dra_server *s, const char *uid) {
    char why[512];
    if (update_checkpoint(s, m_drop_unmade, uid, why, sizeof(why)) < 0)
        log_error("DRA: %s", why);
}

/* A claim read from the source: its prepare's start recorded (a pending entry), then mapped, its
 * spec written and its entry replaced by the prepared one, each change saved. */
static int prepare_claim(struct dra_server *s, const struct dra_claim *claim, struct dra_prepared *out, char *err,
                         size_t errlen) {
    char path[PATH_MAX + 160], *spec = NULL;
    spec_path(s, claim->uid, path, sizeof(path));
    int rc = update_checkpoint(s, m_begin, claim, err, errlen);
    if (rc < 0)
        return rc;
    if ((rc = prepare_fetched(s, claim, out, &spec, err, errlen)) < 0) {
        drop_unmade(s, claim->uid);
        return rc;
    }
    rc = gs_write_file_atomic(path, spec, strlen(spec), true);
    free(spec);
    if (rc < 0) {
        snprintf(err, errlen, "%.400s: %s", path, strerror(-rc));
        drop_unmade(s, claim->uid);
        return rc;
    }
    if ((rc = update_checkpoint(s, m_put, out, err, errlen)) < 0) {
        /* not kept: undone, so the kubelet's retry starts clean (its MIG records stay, pending) */
        unlink(path);
        struct dra_prepared *back = malloc(sizeof(*back));
        char why[512];
        if (back && entry_of(s, claim->uid, back)) {
            back->pending = true;
            (void)update_checkpoint(s, m_put, back, why, sizeof(why));
        }
        free(back);
        drop_unmade(s, claim->uid);
        return rc;
    }
    return 0;
}

/* After a damaged checkpoint: " (...)" saying so, for the error of a claim it may have held
 * (its spec is still there); "" otherwise. */
static const char *lost_note(const struct dra_server *s, const char *uid, char *buf, size_t len) {
    char path[PATH_MAX + 160];
    spec_path(s, uid, path, sizeof(path));
    buf[0] = '\0';
    if (s->lost && !dra_checkpoint_find(&s->cp, uid) && access(path, F_OK) == 0)
        snprintf(buf, len, " (prepared before the damaged checkpoint was set aside as %.300s, and not rebuilt)",
                 s->aside);
    return buf;
}

/* One claim: prepared before (and its spec still there), else fetched, mapped and its spec
 * written; *fresh says it is new (the checkpoint must be saved). */
static int prepare_one(struct dra_server *s, const Claim *c, struct dra_prepared *out, bool *fresh, char *err,
                       size_t errlen) {
    *fresh = false;
    if (!dra_uid_valid(c->uid)) {
        snprintf(err, errlen, "claim UID '%.40s' is not a UID", c->uid);
        return -EINVAL;
    }
    char path[PATH_MAX + 160], note[512];
    spec_path(s, c->uid, path, sizeof(path));
    const struct dra_prepared *known = dra_checkpoint_find(&s->cp, c->uid);
    if (known && !known->pending && access(path, F_OK) == 0) {
        *out = *known;
        return 0;
    }
    lost_note(s, c->uid, note, sizeof(note));
    if (!s->source.fetch) {
        snprintf(err, errlen, "no ResourceClaim source: cannot read %.63s/%.200s%s", c->namespace_, c->name, note);
        return -EAGAIN;
    }
    struct dra_claim *claim = calloc(1, sizeof(*claim));
    if (!claim)
        return -ENOMEM;
    int rc = s->source.fetch(s->source.ctx, s->driver, c->namespace_, c->name, c->uid, claim, err, errlen);
    if (rc == 0) {
        rc = prepare_claim(s, claim, out, err, errlen);
    } else {
        drop_unmade(s, c->uid);
        if (note[0] && strlen(err) + strlen(note) < errlen)
            strcat(err, note);
    }
    dra_claim_free(claim);
    free(claim);
    if (rc == 0)
        *fresh = true;
    return rc;
}

/* ---- a damaged checkpoint: rebuilt from the claim source -------------------------------------- */

struct rebuild {
    struct dra_server *s;
    unsigned done, failed;
};

/* A claim of the source: rebuilt when it is allocated on this node (every result in the pool),
 * its spec is still there (it was prepared here) and the checkpoint does not hold it yet. */
static void rebuild_claim(void *arg, struct dra_claim *c) {
    struct rebuild *b = arg;
    struct dra_server *s = b->s;
    char path[PATH_MAX + 160], err[512] = "";
    for (unsigned i = 0; i < c->n_results; i++)
        if (s->pool[0] && strcmp(c->results[i].pool, s->pool) != 0)
            return;
    spec_path(s, c->uid, path, sizeof(path));
    if (dra_checkpoint_find(&s->cp, c->uid) || access(path, F_OK) != 0)
        return;
    struct dra_prepared *p = calloc(1, sizeof(*p));
    int rc = p ? prepare_claim(s, c, p, err, sizeof(err)) : -ENOMEM;
    free(p);
    if (rc < 0) {
        b->failed++;
        log_warn("DRA: %.63s/%.200s (%.40s) not rebuilt after the damaged checkpoint: %s", c->ns, c->name, c->uid,
                 err[0] ? err : strerror(-rc));
        return;
    }
    b->done++;
    log_info("DRA: %.63s/%.200s (%.40s) rebuilt from its ResourceClaim", c->ns, c->name, c->uid);
}

/* Once, at the first call after a damaged checkpoint was set aside (the device table is set by
 * then): the claims prepared on this node, from the source. */
static void rebuild_if_due(struct dra_server *s) {
    if (!s->rebuild_due)
        return;
    pthread_mutex_lock(&s->lock);
    bool have_devices = s->n_devices > 0;
    pthread_mutex_unlock(&s->lock);
    if (!have_devices)
        return;
    s->rebuild_due = false;
    char err[512] = "";
    if (!s->source.each) {
        log_warn("DRA: the claim source cannot list ResourceClaims: nothing of %s is rebuilt; its claims are "
                 "prepared again at their next prepare",
                 s->aside);
        return;
    }
    struct rebuild b = { s, 0, 0 };
    int rc = s->source.each(s->source.ctx, s->driver, rebuild_claim, &b, err, sizeof(err));
    if (rc < 0)
        log_warn("DRA: ResourceClaims not listed (%s): nothing more of %s is rebuilt", err, s->aside);
    log_info("DRA: %u claim(s) rebuilt from the ResourceClaims of driver %s after %s was set aside, %u not", b.done,
             s->driver, s->aside, b.failed);
}

struct prep_answer {
    PrepareResp msg; /* first: the message handed back to release */
    size_t n;
    PrepareEntry *entries;
    PrepareEntry **entryp;
    PrepareOne *ones;
    Device *devs;
    Device **devp;
    char **requests; /* one request name per device */
    char **cdi;      /* DRA_CDI_IDS per device */
    struct dra_prepared *prepared;
    char (*errors)[512];
};

/* An answer and its arrays in one allocation (freed whole by release_plain). */
static void *carve(char **p, size_t n, size_t size) {
    void *r = *p;
    *p += (n * size + _Alignof(max_align_t) - 1) / _Alignof(max_align_t) * _Alignof(max_align_t);
    return r;
}

static void fill_prepared(struct prep_answer *a, size_t i) {
    const struct dra_prepared *p = &a->prepared[i];
    size_t base = i * DRA_MAX_RESULTS;
    for (unsigned k = 0; k < p->n_devices; k++) {
        Device *d = &a->devs[base + k];
        const struct dra_prepared_device *pd = &p->devices[k];
        k8s__io__kubelet__pkg__apis__dra__v1__device__init(d);
        a->requests[base + k] = (char *)pd->request;
        d->n_request_names = 1;
        d->request_names = &a->requests[base + k];
        d->pool_name = (char *)pd->pool;
        d->device_name = (char *)pd->device;
        for (unsigned j = 0; j < DRA_CDI_IDS; j++)
            a->cdi[(base + k) * DRA_CDI_IDS + j] = (char *)pd->cdi[j];
        d->n_cdi_device_ids = DRA_CDI_IDS;
        d->cdi_device_ids = &a->cdi[(base + k) * DRA_CDI_IDS];
        d->share_id = (char *)pd->share_id;
        a->devp[base + k] = d;
    }
    a->ones[i].n_devices = p->n_devices;
    a->ones[i].devices = &a->devp[base];
}

static int node_prepare(void *ctx, const ProtobufCMessage *req, ProtobufCMessage **resp, char *err, size_t errlen) {
    struct dra_server *s = ctx;
    const PrepareReq *r = (const PrepareReq *)req;
    size_t n = r->n_claims, m = n ? n : 1, devs = m * DRA_MAX_RESULTS, a_ = _Alignof(max_align_t);
    size_t total = sizeof(struct prep_answer) + a_ * 12 + m * (sizeof(PrepareEntry) + sizeof(PrepareEntry *) +
                   sizeof(PrepareOne) + sizeof(struct dra_prepared) + 512 + 1) +
                   devs * (sizeof(Device) + sizeof(Device *) + sizeof(char *) * (1 + DRA_CDI_IDS));
    char *p = calloc(1, total);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    struct prep_answer *a = carve(&p, 1, sizeof(*a));
    a->entries = carve(&p, m, sizeof(*a->entries));
    a->entryp = carve(&p, m, sizeof(*a->entryp));
    a->ones = carve(&p, m, sizeof(*a->ones));
    a->devs = carve(&p, devs, sizeof(*a->devs));
    a->devp = carve(&p, devs, sizeof(*a->devp));
    a->requests = carve(&p, devs, sizeof(*a->requests));
    a->cdi = carve(&p, devs * DRA_CDI_IDS, sizeof(*a->cdi));
    a->prepared = carve(&p, m, sizeof(*a->prepared));
    a->errors = carve(&p, m, sizeof(*a->errors));
    bool *fresh = carve(&p, m, sizeof(bool));
    k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__init(&a->msg);
    a->n = n;
    rebuild_if_due(s);
    for (size_t i = 0; i < n; i++) {
        const Claim *c = r->claims[i];
        k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resource_response__init(&a->ones[i]);
        int rc = prepare_one(s, c, &a->prepared[i], &fresh[i], a->errors[i], sizeof(a->errors[0]));
        if (rc < 0) {
            if (!a->errors[i][0])
                snprintf(a->errors[i], sizeof(a->errors[0]), "%s", strerror(-rc));
            a->ones[i].error = a->errors[i];
            log_warn("DRA: NodePrepareResources %.63s/%.200s (%.40s): %s", c->namespace_, c->name, c->uid,
                     a->errors[i]);
        } else {
            if (fresh[i])
                log_info("DRA: prepared %.63s/%.200s (%.40s): %u device(s), %s", c->namespace_, c->name, c->uid,
                         a->prepared[i].n_devices, a->prepared[i].devices[0].cdi[0]);
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (!a->ones[i].error || !a->ones[i].error[0])
            fill_prepared(a, i);
        k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__claims_entry__init(&a->entries[i]);
        a->entries[i].key = r->claims[i]->uid;
        a->entries[i].value = &a->ones[i];
        a->entryp[i] = &a->entries[i];
    }
    a->msg.n_claims = n;
    a->msg.claims = a->entryp;
    *resp = &a->msg.base;
    return 0;
}

/* ---- unprepare ------------------------------------------------------------------------------ */

/* What prepare made for the claim beyond its spec: its MIG instances (destroyed, each step
 * recorded) and its guard files. */
static int release_claim(struct dra_server *s, const char *uid, char *err, size_t errlen) {
    struct dra_prepared *p = malloc(sizeof(*p));
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    bool known = entry_of(s, uid, p);
    for (unsigned i = 0; known && i < p->n_devices; i++) {
        char why[400];
        struct dra_mig_made rec = p->devices[i].mig;
        const struct mig_step step = { s, uid, i, 0, NULL, &rec };
        int rc = dra_mig_release(&s->mig, &rec, record_mig_step, (void *)&step, why, sizeof(why));
        if (rc < 0) {
            snprintf(err, errlen, "device %.63s: %s", p->devices[i].device, why);
            free(p);
            return rc;
        }
    }
    free(p);
    /* the guard directory is the claim's by its UID (never a path from the checkpoint): removed
     * whether or not the entry says there is one */
    char dir[PATH_MAX + 64];
    if (s->guard_root[0] && dra_guard_dir(s->guard_root, uid, dir, sizeof(dir)) == 0) {
        int rc = gs_guard_dir_remove(dir);
        if (rc < 0 && rc != -ENOENT) {
            snprintf(err, errlen, "cannot remove %.400s: %s", dir, strerror(-rc));
            return rc;
        }
    }
    return 0;
}

/* An unprepare of a claim the checkpoint does not hold although its spec is there, after a damaged
 * checkpoint was set aside: what it made besides its files (which are found by its UID) is known
 * only when it can have made nothing else. MIG instances made on demand are not: the claim is
 * refused when its ResourceClaim (or, unread, the node's GPUs) may have them. 0: release it. */
static int check_lost(struct dra_server *s, const Claim *c, char *err, size_t errlen) {
    char path[PATH_MAX + 160];
    spec_path(s, c->uid, path, sizeof(path));
    if (!s->lost || dra_checkpoint_find(&s->cp, c->uid) || access(path, F_OK) != 0)
        return 0;
    struct dra_claim *claim = calloc(1, sizeof(*claim));
    char why[512] = "the claim source cannot read it";
    int rc = !claim ? -ENOMEM
             : s->source.fetch
                 ? s->source.fetch(s->source.ctx, s->driver, c->namespace_, c->name, c->uid, claim, why, sizeof(why))
                 : -ENOENT;
    bool mig = false;
    for (unsigned i = 0; rc == 0 && i < claim->n_results; i++) {
        struct gs_dra_device_ref ref;
        mig |= gs_dra_device_parse(claim->results[i].device, &ref) == 0 && ref.mig;
    }
    if (rc < 0) { /* unread: any GPU of the node in MIG mode may hold its instances */
        pthread_mutex_lock(&s->lock);
        for (size_t i = 0; i < s->n_devices; i++)
            mig |= s->devices[i].sharing == DRA_SHARING_MIG;
        pthread_mutex_unlock(&s->lock);
    }
    if (claim)
        dra_claim_free(claim);
    free(claim);
    if (!mig) {
        log_warn("DRA: %.63s/%.200s (%.40s): not in the checkpoint (%s was set aside): its files are removed", c->namespace_,
                 c->name, c->uid, s->aside);
        return 0;
    }
    snprintf(err, errlen,
             "refused: prepared before the damaged checkpoint was set aside as %.160s and not rebuilt: the MIG "
             "instances it may hold are not known (%s%.80s); destroy them by hand, then remove its CDI spec",
             s->aside, rc < 0 ? "its ResourceClaim: " : "it names MIG devices", rc < 0 ? why : "");
    return -EBUSY;
}

struct unprep_answer {
    UnprepareResp msg; /* first */
    UnprepareEntry *entries;
    UnprepareEntry **entryp;
    UnprepareOne *ones;
    char (*errors)[512];
};

static int node_unprepare(void *ctx, const ProtobufCMessage *req, ProtobufCMessage **resp, char *err, size_t errlen) {
    struct dra_server *s = ctx;
    const UnprepareReq *r = (const UnprepareReq *)req;
    size_t n = r->n_claims, m = n ? n : 1;
    char *p = calloc(1, sizeof(struct unprep_answer) + _Alignof(max_align_t) * 5 +
                            m * (sizeof(UnprepareEntry) + sizeof(UnprepareEntry *) + sizeof(UnprepareOne) + 512));
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    struct unprep_answer *a = carve(&p, 1, sizeof(*a));
    a->entries = carve(&p, m, sizeof(*a->entries));
    a->entryp = carve(&p, m, sizeof(*a->entryp));
    a->ones = carve(&p, m, sizeof(*a->ones));
    a->errors = carve(&p, m, sizeof(*a->errors));
    k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__init(&a->msg);
    rebuild_if_due(s);
    for (size_t i = 0; i < n; i++) {
        const Claim *c = r->claims[i];
        k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resource_response__init(&a->ones[i]);
        if (!dra_uid_valid(c->uid)) {
            snprintf(a->errors[i], sizeof(a->errors[0]), "claim UID '%.40s' is not a UID", c->uid);
        } else {
            char path[PATH_MAX + 160];
            spec_path(s, c->uid, path, sizeof(path));
            if (check_lost(s, c, a->errors[i], sizeof(a->errors[0])) < 0) {
                /* refused until a person looked: the files stay */
            } else if (release_claim(s, c->uid, a->errors[i], sizeof(a->errors[0])) < 0) {
                /* the kubelet calls again: what is left and the checkpoint entry stay */
            } else if (unlink(path) < 0 && errno != ENOENT)
                snprintf(a->errors[i], sizeof(a->errors[0]), "%.400s: %s", path, strerror(errno));
            else if (update_checkpoint(s, m_remove, c->uid, a->errors[i], sizeof(a->errors[0])) > 0)
                log_info("DRA: unprepared %.63s/%.200s (%.40s)", c->namespace_, c->name, c->uid);
        }
        if (a->errors[i][0]) {
            a->ones[i].error = a->errors[i];
            log_warn("DRA: NodeUnprepareResources %.63s/%.200s: %s", c->namespace_, c->name, a->errors[i]);
        }
        k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__claims_entry__init(&a->entries[i]);
        a->entries[i].key = c->uid;
        a->entries[i].value = &a->ones[i];
        a->entryp[i] = &a->entries[i];
    }
    a->msg.n_claims = n;
    a->msg.claims = a->entryp;
    *resp = &a->msg.base;
    return 0;
}

#define DRA_METHODS(pkg)                                                                                   \
    { "/k8s.io.kubelet.pkg.apis.dra." pkg ".DRAPlugin/NodePrepareResources",                              \
      &k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__descriptor, node_prepare,      \
      release_plain },                                                                                      \
    {                                                                                                      \
        "/k8s.io.kubelet.pkg.apis.dra." pkg ".DRAPlugin/NodeUnprepareResources",                          \
            &k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__descriptor,           \
            node_unprepare, release_plain                                                                  \
    }

/* ---- resource health ------------------------------------------------------------------------ */

static int watch_resources(void *ctx, const ProtobufCMessage *req, ProtobufCMessage **resp, char *err,
                           size_t errlen) {
    struct dra_server *s = ctx;
    (void)req;
    struct dra_health_msg *m = malloc(sizeof(*m));
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    size_t left = 0;
    pthread_mutex_lock(&s->lock);
    dra_health_build(s->pool, s->devices, s->n_devices, &s->cp, (int64_t)time(NULL), m, &left);
    pthread_mutex_unlock(&s->lock);
    if (left)
        log_warn("DRA: the health stream lists %d devices, %zu left out", DRA_HEALTH_MAX, left);
    *resp = &m->resp.base;
    return 0;
}

/* v1beta1's messages are v1's on the wire (v1 adds Device.share_id, which v1beta1 skips). */
static const struct gs_grpc_method dra_methods[] = {
    DRA_METHODS("v1"),
    DRA_METHODS("v1beta1"),
    { "/v1alpha1.DRAResourceHealth/NodeWatchResources", &v1alpha1__node_watch_resources_request__descriptor,
      watch_resources, release_plain, true, DRA_HEALTH_REFRESH_S * 1000 },
};

/* ---- lifecycle ------------------------------------------------------------------------------ */

/* The checkpoint: read; a damaged one set aside (the driver starts empty and rebuilds at its first
 * call); a newer one, or a damaged one that stays where it is, refused (-ENOTSUP). */
static int load_checkpoint(struct dra_server *s, char *err, size_t errlen) {
    char why[1024];
    int rc = dra_checkpoint_read(s->checkpoint, &s->cp, why, sizeof(why));
    if (rc == -ENOENT)
        return 0;
    if (rc == 0) {
        if (s->cp.n)
            log_info("DRA: %zu prepared claim(s) in %s", s->cp.n, s->checkpoint);
        return 0;
    }
    if (rc == -ENOTSUP) {
        snprintf(err, errlen,
                 "DRA: %.700s: the checkpoint of a newer agent is left as it is and the DRA driver does not start "
                 "(run that agent's version, or move the file away to start with no prepared claims)",
                 why);
        return -ENOTSUP;
    }
    if (rc == -ENOMEM) {
        snprintf(err, errlen, "DRA: %s: out of memory", s->checkpoint);
        return rc;
    }
    char aside_err[512];
    if (dra_checkpoint_set_aside(s->checkpoint, time(NULL), s->aside, sizeof(s->aside), aside_err,
                                 sizeof(aside_err)) < 0) {
        snprintf(err, errlen, "DRA: damaged checkpoint %.400s, not set aside (%.300s): the DRA driver does not start",
                 why, aside_err);
        return -ENOTSUP;
    }
    s->lost = s->rebuild_due = true;
    gs_strlcpy(s->lost_why, why, sizeof(s->lost_why));
    log_warn("DRA: damaged checkpoint %s: set aside as %s; the driver starts without it and rebuilds the claims "
             "prepared on this node from their ResourceClaims",
             why, s->aside);
    return 0;
}

/* Claims whose prepare started and never completed (the agent stopped in between; the kubelet
 * got no answer and asks again): rolled back, as their unprepare would (MIG instances made for
 * them destroyed, their guard files and spec removed, the entry dropped); one that cannot be (a
 * process on its MIG instance) stays pending, finished by its next prepare or released by its
 * unprepare. */
static void recover_pending(struct dra_server *s) {
    for (size_t i = 0; i < s->cp.n;) {
        const struct dra_prepared *p = &s->cp.claims[i];
        if (!p->pending) {
            i++;
            continue;
        }
        char uid[40], name[320], path[PATH_MAX + 160], why[512] = "";
        gs_strlcpy(uid, p->uid, sizeof(uid));
        snprintf(name, sizeof(name), "%.63s/%.200s (%.40s)", p->ns, p->name, p->uid);
        spec_path(s, uid, path, sizeof(path));
        int rc = release_claim(s, uid, why, sizeof(why));
        if (rc == 0 && unlink(path) < 0 && errno != ENOENT) {
            rc = -errno;
            snprintf(why, sizeof(why), "%.400s: %s", path, strerror(errno));
        }
        if (rc == 0 && (rc = update_checkpoint(s, m_remove, uid, why, sizeof(why))) >= 0) {
            log_warn("DRA: the prepare of %s started but did not complete before the agent stopped: rolled back (the "
                     "kubelet's retry prepares it again)",
                     name);
            continue; /* the entry at i is the next one now */
        }
        log_warn("DRA: the prepare of %s started but did not complete before the agent stopped, and is not rolled "
                 "back (%s): its next prepare finishes it, its unprepare releases it",
                 name, why);
        i++;
    }
}

int dra_server_start(const struct dra_options *o, struct dra_server **out, char *err, size_t errlen) {
    struct dra_server *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->cp_lock, NULL);
    s->source = o->source;
    gs_strlcpy(s->guard_root, o->guard_root ? o->guard_root : "", sizeof(s->guard_root));
    gs_strlcpy(s->guard_lib, o->guard_lib ? o->guard_lib : "", sizeof(s->guard_lib));
    gs_strlcpy(s->mig.lib, o->nvml_lib ? o->nvml_lib : "", sizeof(s->mig.lib));
    gs_strlcpy(s->mig.proc_root, o->proc_root ? o->proc_root : "/proc", sizeof(s->mig.proc_root));
    const char *driver = o->driver ? o->driver : DRA_DRIVER_DEFAULT;
    int rc = -ENAMETOOLONG;
    if (gs_strlcpy(s->driver, driver, sizeof(s->driver)) < 0 ||
        gs_strlcpy(s->pool, o->pool ? o->pool : "", sizeof(s->pool)) < 0 ||
        gs_strlcpy(s->cdi_root, o->cdi_root ? o->cdi_root : "", sizeof(s->cdi_root)) < 0 ||
        gs_strlcpy(s->cdi_kind, o->cdi_kind ? o->cdi_kind : "gpuslice.io/gpu", sizeof(s->cdi_kind)) < 0 ||
        snprintf(s->plugin_dir, sizeof(s->plugin_dir), "%s/%s", o->plugins_dir, driver) >= (int)sizeof(s->plugin_dir)) {
        snprintf(err, errlen, "DRA: a path or name is too long");
        goto fail;
    }
    snprintf(s->dra_sock, sizeof(s->dra_sock), "%s/dra.sock", s->plugin_dir);
    snprintf(s->checkpoint, sizeof(s->checkpoint), "%s/checkpoint.json", s->plugin_dir);
    snprintf(s->reg_sock, sizeof(s->reg_sock), "%.3800s/%.250s-reg.sock", o->registry_dir, driver);
    if (strlen(s->dra_sock) > 107 || strlen(s->reg_sock) > 107) {
        snprintf(err, errlen, "DRA: socket path %s is longer than a unix socket allows (107 bytes)",
                 strlen(s->dra_sock) > 107 ? s->dra_sock : s->reg_sock);
        goto fail;
    }
    if (!s->cdi_root[0]) {
        rc = -EINVAL;
        snprintf(err, errlen, "DRA: needs a CDI directory for the claims' specs (--cdi-root)");
        goto fail;
    }
    const char *dirs[] = { s->plugin_dir, o->registry_dir, s->cdi_root };
    for (size_t i = 0; i < GS_ARRAY_SIZE(dirs); i++) {
        if ((rc = gs_mkdir_p(dirs[i], 0755)) < 0) {
            snprintf(err, errlen, "%s: %s", dirs[i], strerror(-rc));
            goto fail;
        }
    }
    if ((rc = load_checkpoint(s, err, errlen)) < 0)
        goto fail;
    recover_pending(s);
    if ((rc = gs_grpc_server_start(s->dra_sock, dra_methods, GS_ARRAY_SIZE(dra_methods), s, &s->dra)) < 0) {
        snprintf(err, errlen, "%s: cannot serve: %s", s->dra_sock, strerror(-rc));
        goto fail;
    }
    if ((rc = gs_grpc_server_start(s->reg_sock, reg_methods, GS_ARRAY_SIZE(reg_methods), s, &s->reg)) < 0) {
        snprintf(err, errlen, "%s: cannot serve: %s", s->reg_sock, strerror(-rc));
        gs_grpc_server_stop(s->dra);
        goto fail;
    }
    log_info("DRA: driver %s serving %s, registration socket %s", s->driver, s->dra_sock, s->reg_sock);
    *out = s;
    return 0;
fail:
    dra_checkpoint_free(&s->cp);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->cp_lock);
    free(s);
    return rc;
}

int dra_server_set_devices(struct dra_server *s, const struct dra_device *d, size_t n) {
    if (n > MAX_DEVICES)
        return -E2BIG;
    pthread_mutex_lock(&s->lock);
    bool changed = n != s->n_devices;
    for (size_t i = 0; i < n && !changed; i++)
        changed = strcmp(d[i].name, s->devices[i].name) || d[i].health != s->devices[i].health ||
                  strcmp(d[i].health_message, s->devices[i].health_message);
    if (n)
        memcpy(s->devices, d, n * sizeof(*d));
    s->n_devices = n;
    pthread_mutex_unlock(&s->lock);
    if (changed)
        gs_grpc_server_notify(s->dra); /* the health stream's next message */
    return 0;
}

unsigned dra_server_registrations(struct dra_server *s) {
    return atomic_load(&s->registrations);
}

void dra_server_stop(struct dra_server *s) {
    if (!s)
        return;
    gs_grpc_server_stop(s->reg); /* first: the kubelet stops finding the plugin */
    gs_grpc_server_stop(s->dra);
    dra_mig_close(&s->mig);
    dra_checkpoint_free(&s->cp);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->cp_lock);
    free(s);
}
