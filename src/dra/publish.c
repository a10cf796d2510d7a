/* publish.c: the node's ResourceSlices kept in the API server by a thread of their own (see
 * apiserver.h). The agent's loop only swaps in what the slices say (dra_publisher_set); the
 * thread lists the node's slices of this driver, compares, and creates, updates and deletes. */
#include "dra/apiserver.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/log.h"
#include "util/util.h"

#define SLICES_PATH "/apis/resource.k8s.io/v1/resourceslices"
#define BACKOFF_MIN_MS 500
#define BACKOFF_MAX_MS 30000
#define CONFLICT_TRIES 3

struct dra_publisher {
    struct kube_client *client;
    char node[254], driver[254], selector[600];
    unsigned resync_ms;
    struct kube_cancel *cancel;
    pthread_t thread;
    struct kube_informer *watch; /* the node's slices of this driver: one deleted is written again */

    pthread_mutex_t lock; /* the fields below */
    pthread_cond_t cond;
    bool stop, changed;   /* changed: a new dra_publisher_set since the last sync began */
    json_t *desired;      /* the last dra_publisher_set, NULL before */
    unsigned long long seq, synced; /* desired's sequence number; the last one synced (0: none) */
    int last_rc;                    /* the last sync's result (1: none yet) */
    long long generation; /* last written or found */
    char last_error[512]; /* as last logged, so a retry that fails alike is not logged again */
};

/* want's every field is in have with the same value (objects: keys of want only; arrays: the same
 * length, element by element): what the API server adds (defaults, metadata) is not a change. */
static bool subset(const json_t *want, const json_t *have) {
    if (!have)
        return false;
    if (json_is_object(want)) {
        if (!json_is_object(have))
            return false;
        const char *key;
        const json_t *v;
        json_object_foreach((json_t *)want, key, v) if (!subset(v, json_object_get(have, key))) return false;
        return true;
    }
    if (json_is_array(want)) {
        if (!json_is_array(have) || json_array_size(want) != json_array_size(have))
            return false;
        for (size_t i = 0; i < json_array_size(want); i++)
            if (!subset(json_array_get(want, i), json_array_get(have, i)))
                return false;
        return true;
    }
    return json_equal(want, have);
}

/* subset() looks at want's keys only: what the API server still has but want no longer does is
 * a change too: devices or counter sets where want has none (an empty pool: every GPU left DRA),
 * a device's taints (its GPU healthy again). */
static bool lists_differ(const json_t *want_spec, const json_t *have_spec) {
    const json_t *wd = json_object_get(want_spec, "devices"), *hd = json_object_get(have_spec, "devices");
    if (json_array_size(wd) != json_array_size(hd) ||
        json_array_size(json_object_get(want_spec, "sharedCounters")) !=
            json_array_size(json_object_get(have_spec, "sharedCounters")))
        return true;
    for (size_t i = 0; i < json_array_size(hd); i++)
        if (json_array_size(json_object_get(json_array_get(hd, i), "taints")) !=
            json_array_size(json_object_get(json_array_get(wd, i), "taints")))
            return true;
    return false;
}

static long long pool_generation(const json_t *slice) {
    return json_integer_value(json_object_get(json_object_get(json_object_get(slice, "spec"), "pool"), "generation"));
}

static void set_generation(json_t *slice, long long gen) {
    json_object_set_new(json_object_get(json_object_get(slice, "spec"), "pool"), "generation", json_integer(gen));
}

static json_t *find_named(const json_t *items, const char *name) {
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it) {
        const char *n = kube_meta(it, "name");
        if (n && !strcmp(n, name))
            return it;
    }
    return NULL;
}

/* True if the slices there are exactly `want` at generation gen (and nothing else). */
static bool in_place(json_t *want, const json_t *items, long long gen) {
    if (json_array_size(want) != json_array_size(items))
        return false;
    size_t i;
    json_t *w;
    json_array_foreach(want, i, w) {
        const json_t *have = find_named(items, kube_meta(w, "name"));
        set_generation(w, gen);
        if (!have || pool_generation(have) != gen || !subset(json_object_get(w, "spec"), json_object_get(have, "spec")) ||
            lists_differ(json_object_get(w, "spec"), json_object_get(have, "spec")))
            return false;
    }
    return true;
}

/* One pass: 0 (in place), -ESTALE (a conflict: list again), or -errno with why. */
static int sync_once(struct dra_publisher *p, json_t *want, long long *gen_io, char *err, size_t errlen) {
    const struct kube_list_opts lo = { .field_selector = p->selector };
    json_t *list = NULL;
    int r = kube_list_all(p->client, SLICES_PATH, &lo, &list, err, errlen);
    if (r < 0)
        return r;
    json_t *items = json_object_get(list, "items");
    long long found = 0;
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it) {
        long long g = pool_generation(it);
        found = g > found ? g : found;
    }
    long long gen = found > *gen_io ? found : *gen_io;
    if (gen > 0 && in_place(want, items, gen)) {
        *gen_io = gen;
        json_decref(list);
        return 0;
    }
    gen++; /* every change bumps the pool's generation, in every slice of it */
    json_t *w;
    json_array_foreach(want, i, w) {
        const char *name = kube_meta(w, "name");
        const json_t *have = find_named(items, name);
        char path[KUBE_URL_MAX];
        set_generation(w, gen);
        json_t *obj = json_deep_copy(w);
        if (!obj) {
            r = -ENOMEM;
            break;
        }
        if (have) {
            json_object_set_new(json_object_get(obj, "metadata"), "resourceVersion",
                                json_string(kube_meta(have, "resourceVersion") ? kube_meta(have, "resourceVersion") : ""));
            r = kube_path(path, sizeof(path), "resource.k8s.io/v1", NULL, "resourceslices", name);
            if (r == 0)
                r = kube_update(p->client, path, obj, NULL, err, errlen);
        } else {
            r = kube_create(p->client, SLICES_PATH, obj, NULL, err, errlen);
            if (r == -EEXIST)
                r = -ESTALE; /* made meanwhile (another agent's start?): list again */
        }
        json_decref(obj);
        if (r < 0)
            break;
    }
    /* the node's other slices of this driver: an older pool's, or more than it has now */
    json_array_foreach(items, i, it) {
        const char *name = kube_meta(it, "name");
        char path[KUBE_URL_MAX];
        if (r < 0 || !name || find_named(want, name))
            continue;
        r = kube_path(path, sizeof(path), "resource.k8s.io/v1", NULL, "resourceslices", name);
        if (r == 0)
            r = kube_delete(p->client, path, NULL, err, errlen);
        if (r == -ENOENT)
            r = 0;
        if (r == 0)
            log_info("DRA: deleted the stale ResourceSlice %s", name);
    }
    if (r == 0) {
        *gen_io = gen;
        log_info("DRA: published %zu ResourceSlice(s) of pool %s, generation %lld", json_array_size(want), p->node,
                 gen);
    }
    json_decref(list);
    return r;
}

static int sync_slices(struct dra_publisher *p, json_t *want, char *err, size_t errlen) {
    pthread_mutex_lock(&p->lock);
    long long gen = p->generation;
    pthread_mutex_unlock(&p->lock);
    int r = -ESTALE;
    for (int t = 0; t < CONFLICT_TRIES && r == -ESTALE; t++)
        r = sync_once(p, want, &gen, err, errlen);
    if (r == 0) {
        pthread_mutex_lock(&p->lock);
        p->generation = gen;
        pthread_mutex_unlock(&p->lock);
    }
    return r;
}

static void deadline_in(struct timespec *ts, unsigned ms) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* Syncs whenever what the slices say changed, at every resync, and after a failure once its
 * backoff passed (a change meanwhile does not wait for it). */
static void *publisher_thread(void *arg) {
    struct dra_publisher *p = arg;
    kube_cancel_bind(p->cancel);
    unsigned backoff = BACKOFF_MIN_MS;
    pthread_mutex_lock(&p->lock);
    while (!p->stop) {
        unsigned wait_ms = p->resync_ms;
        if (p->desired) {
            json_t *want = json_deep_copy(p->desired);
            unsigned long long seq = p->seq;
            p->changed = false;
            pthread_mutex_unlock(&p->lock);
            char err[512] = "";
            int r = want ? sync_slices(p, want, err, sizeof(err)) : -ENOMEM;
            json_decref(want);
            pthread_mutex_lock(&p->lock);
            if (!p->stop)
                p->last_rc = r;
            if (r == 0)
                p->synced = seq;
            if (r < 0 && !p->stop) {
                if (!err[0])
                    gs_strlcpy(err, strerror(-r), sizeof(err));
                if (strcmp(err, p->last_error) != 0)
                    log_warn("DRA: the ResourceSlices of %s not published (%s); retrying in the background", p->node,
                             err);
                gs_strlcpy(p->last_error, err, sizeof(p->last_error));
                wait_ms = backoff;
                backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
            } else if (r == 0) {
                if (p->last_error[0])
                    log_info("DRA: the ResourceSlices of %s are published again", p->node);
                p->last_error[0] = 0;
                backoff = BACKOFF_MIN_MS;
            }
        }
        struct timespec ts;
        deadline_in(&ts, wait_ms);
        while (!p->stop && !p->changed && pthread_cond_timedwait(&p->cond, &p->lock, &ts) == 0) {
        }
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static void kick(struct dra_publisher *p) {
    pthread_mutex_lock(&p->lock);
    p->changed = true;
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

/* The kubelet deletes the node's slices when it starts (before the drivers register again) and
 * 30 s after a driver's socket went away: a slice of ours deleted, or a relist (the API server
 * back), makes the publisher look again at once instead of at the next resync. */
static int on_slices_list(void *ctx, json_t *list) {
    (void)list;
    kick(ctx);
    return 0;
}

static int on_slice_event(void *ctx, enum kube_event_type type, json_t *obj) {
    (void)obj;
    if (type == KUBE_DELETED)
        kick(ctx);
    return 0;
}

int dra_publisher_start(const struct dra_publisher_options *o, struct dra_publisher **out, char *err, size_t errlen) {
    *out = NULL;
    struct dra_publisher *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->client = o->client;
    gs_strlcpy(p->node, o->node, sizeof(p->node));
    gs_strlcpy(p->driver, o->driver, sizeof(p->driver));
    snprintf(p->selector, sizeof(p->selector), "spec.nodeName=%s,spec.driver=%s", p->node, p->driver);
    p->resync_ms = o->resync_ms ? o->resync_ms : DRA_RESYNC_MS_DEFAULT;
    p->last_rc = 1;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, &ca);
    pthread_condattr_destroy(&ca);
    int r = kube_cancel_new(&p->cancel);
    if (r == 0 && (r = -pthread_create(&p->thread, NULL, publisher_thread, p)) < 0)
        snprintf(err, errlen, "the ResourceSlice publisher's thread: %s", strerror(-r));
    if (r < 0) {
        kube_cancel_free(p->cancel);
        pthread_cond_destroy(&p->cond);
        pthread_mutex_destroy(&p->lock);
        free(p);
        return r;
    }
    const struct kube_informer_ops ops = { .path = SLICES_PATH, .field_selector = p->selector,
                                           .on_list = on_slices_list, .on_event = on_slice_event, .ctx = p };
    char why[512];
    if (kube_informer_start(p->client, &ops, &p->watch, why, sizeof(why)) < 0)
        log_warn("DRA: the ResourceSlices are not watched (%s): a slice deleted is written again at the next "
                 "resync", why);
    *out = p;
    return 0;
}

unsigned long long dra_publisher_set(struct dra_publisher *p, json_t *slices) {
    pthread_mutex_lock(&p->lock);
    if (!slices || (p->desired && json_equal(p->desired, slices))) {
        unsigned long long seq = p->seq;
        pthread_mutex_unlock(&p->lock);
        json_decref(slices);
        return seq;
    }
    json_decref(p->desired);
    p->desired = slices;
    unsigned long long seq = ++p->seq;
    p->changed = true;
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->lock);
    return seq;
}

unsigned long long dra_publisher_synced(struct dra_publisher *p, int *last_rc) {
    pthread_mutex_lock(&p->lock);
    unsigned long long s = p->synced;
    if (last_rc)
        *last_rc = p->last_rc;
    pthread_mutex_unlock(&p->lock);
    return s;
}

long long dra_publisher_generation(struct dra_publisher *p) {
    pthread_mutex_lock(&p->lock);
    long long g = p->generation;
    pthread_mutex_unlock(&p->lock);
    return g;
}

void dra_publisher_stop(struct dra_publisher *p) {
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->lock);
    kube_informer_stop(p->watch); /* first: its callbacks use the publisher */
    kube_cancel_fire(p->cancel);
    pthread_join(p->thread, NULL);
    kube_cancel_free(p->cancel);
    json_decref(p->desired);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->lock);
    free(p);
}
