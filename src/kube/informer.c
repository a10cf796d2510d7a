/* informer.c: list-then-watch on a thread of its own (kube.h). The thread lists, hands the list
 * over, then watches from the list's resourceVersion, resuming from the last one it saw (events and
 * bookmarks) when the server ends a watch; an expired resourceVersion (410), a dropped connection,
 * an API server restart or any error relists after a backoff. A cancel handle bound to the thread
 * wakes whatever it waits on when the informer is stopped. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/kube.h"
#include "util/util.h"

#define BACKOFF_MIN_MS 200
#define BACKOFF_MAX_MS 30000
/* A watch the server ends sooner than this counts as a failure (no busy loop on a server that
 * closes at once). */
#define WATCH_MIN_NS (1000ull * 1000 * 1000)

struct kube_informer {
    struct kube_client *c;
    struct kube_informer_ops ops;
    struct kube_cancel *cancel;
    pthread_t thread;
    char rv[128]; /* the last resourceVersion seen */
};

static void report(struct kube_informer *inf, int r, const char *msg) {
    if (inf->ops.on_error && !kube_cancel_fired(inf->cancel))
        inf->ops.on_error(inf->ops.ctx, r, msg);
}

static void keep_rv(struct kube_informer *inf, const json_t *obj) {
    const char *rv = kube_meta(obj, "resourceVersion");
    if (rv && *rv)
        gs_strlcpy(inf->rv, rv, sizeof inf->rv);
}

static int on_watch_event(void *ctx, enum kube_event_type type, json_t *object) {
    struct kube_informer *inf = ctx;
    keep_rv(inf, object);
    if (type == KUBE_BOOKMARK || !inf->ops.on_event)
        return 0;
    return inf->ops.on_event(inf->ops.ctx, type, object);
}

/* Watches from inf->rv until something fails: the failure's errno. */
static int watch_loop(struct kube_informer *inf) {
    char err[768];
    for (;;) {
        struct kube_list_opts o = { .label_selector = inf->ops.label_selector,
                                    .field_selector = inf->ops.field_selector,
                                    .resource_version = inf->rv };
        uint64_t t0 = gs_now_ns();
        err[0] = '\0';
        int r = kube_watch(inf->c, inf->ops.path, &o, inf->ops.watch_timeout_s, on_watch_event, inf, err, sizeof err);
        if (r == 0 && gs_now_ns() - t0 < WATCH_MIN_NS) {
            r = -EPIPE;
            snprintf(err, sizeof err, "watch %s: the server ended the watch at once", inf->ops.path);
        }
        if (r != 0) {
            if (r > 0)
                snprintf(err, sizeof err, "watch %s: on_event returned %d: relisting", inf->ops.path, r);
            report(inf, r < 0 ? r : -ECANCELED, err);
            return r < 0 ? r : -ECANCELED;
        }
    }
}

static void *run(void *arg) {
    struct kube_informer *inf = arg;
    unsigned backoff = BACKOFF_MIN_MS;
    char err[768];
    kube_cancel_bind(inf->cancel);
    while (!kube_cancel_fired(inf->cancel)) {
        json_t *list = NULL;
        struct kube_list_opts o = { .label_selector = inf->ops.label_selector,
                                    .field_selector = inf->ops.field_selector };
        err[0] = '\0';
        int r = kube_list_all(inf->c, inf->ops.path, &o, &list, err, sizeof err);
        if (r == 0) {
            keep_rv(inf, list);
            r = inf->ops.on_list ? inf->ops.on_list(inf->ops.ctx, list) : 0;
            json_decref(list);
            if (r != 0) {
                snprintf(err, sizeof err, "list %s: on_list returned %d: relisting", inf->ops.path, r);
                r = r < 0 ? r : -ECANCELED;
            } else {
                backoff = BACKOFF_MIN_MS;
                r = watch_loop(inf);
                if (r == -ENODATA) /* expired: relist at once, as client-go does */
                    continue;
                err[0] = '\0'; /* reported by watch_loop */
            }
        }
        if (err[0])
            report(inf, r, err);
        if (kube_cancel_sleep(inf->cancel, backoff) < 0)
            break;
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    kube_cancel_bind(NULL);
    return NULL;
}

int kube_informer_start(struct kube_client *c, const struct kube_informer_ops *ops, struct kube_informer **out,
                        char *err, size_t errlen) {
    *out = NULL;
    if (!ops || !ops->path || ops->path[0] != '/') {
        snprintf(err, errlen, "informer: no collection path");
        return -EINVAL;
    }
    struct kube_informer *inf = calloc(1, sizeof(*inf));
    if (!inf)
        return -ENOMEM;
    inf->c = c;
    inf->ops = *ops;
    int r = kube_cancel_new(&inf->cancel);
    if (r < 0) {
        free(inf);
        return r;
    }
    r = -pthread_create(&inf->thread, NULL, run, inf);
    if (r < 0) {
        snprintf(err, errlen, "informer %s: pthread_create: %s", ops->path, strerror(-r));
        kube_cancel_free(inf->cancel);
        free(inf);
        return r;
    }
    *out = inf;
    return 0;
}

void kube_informer_stop(struct kube_informer *inf) {
    if (!inf)
        return;
    kube_cancel_fire(inf->cancel);
    pthread_join(inf->thread, NULL);
    kube_cancel_free(inf->cancel);
    free(inf);
}
