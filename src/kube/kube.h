/* kube.h: a small Kubernetes REST client (libcurl over HTTPS, jansson): get, list, create,
 * update, patch, delete, and watch with an informer-like list-then-watch helper.
 *
 * Paths are API paths built with kube_path() (kubeapi.h), e.g.
 *   kube_path(p, sizeof p, "resource.k8s.io/v1", NULL, "resourceslices", "node-1-gpu");
 *
 * Every call returns 0 or -errno and, on error, one line in err naming the call and the API
 * server's own message, e.g.
 *   PUT /api/v1/namespaces/x/configmaps/c: 409 Conflict: Operation cannot be fulfilled on
 *   configmaps "c": the object has been modified; please apply your changes to the latest version
 * The errno of an HTTP error is kube_status_error()'s (404 -ENOENT, 409 -ESTALE for a conflict and
 * -EEXIST for AlreadyExists, 410 -ENODATA, ...); transport errors: -ETIMEDOUT (connect or total
 * timeout), -ECONNREFUSED, -EPROTO (TLS), -EFBIG (a response over the size limit), -EPIPE (a body
 * cut short), -EBADMSG (not JSON).
 *
 * Bounded: each call has a connect timeout and a total timeout, a response is read into memory up
 * to max_response bytes and no further, a watch line up to max_line. A watch has no total timeout
 * of its own beyond timeoutSeconds plus a margin, and TCP keepalive finds a dead peer.
 *
 * Authentication: the kubeconfig's client certificate, or a bearer token. A token file is re-read
 * when it changes (stat before each request: projected service-account tokens rotate), and a 401
 * re-reads it and retries the request once.
 *
 * Threads: a client is shared by any number of threads (each call has its own curl handle; the
 * token is under a lock). A watch blocks its thread: kube_informer runs one thread per watch and
 * calls back on it, so an event loop (src/agent/loop.c) is never blocked. The callbacks hand their
 * results to the loop (a pipe, an eventfd, a locked copy): they must not call back into the
 * informer. */
#ifndef GS_KUBE_KUBE_H
#define GS_KUBE_KUBE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "kube/kubeapi.h"
#include "kube/kubeconfig.h"

struct kube_limits {
    unsigned connect_timeout_ms; /* default 10 000 */
    unsigned timeout_ms;         /* per request, default 30 000 */
    size_t max_response;         /* bytes, default 64 MiB */
    size_t max_line;             /* one watch event, default 16 MiB */
};
#define KUBE_DEFAULT_LIMITS                                                                                            \
    { 10000, 30000, (size_t)64 << 20, (size_t)16 << 20 }

struct kube_client;

/* A client of the configuration cfg (taken over: *cfg is emptied) with limits (NULL: defaults).
 * The CA, certificate and key files are read when each request is made. */
int kube_client_new(struct kube_config *cfg, const struct kube_limits *limits, struct kube_client **out, char *err,
                    size_t errlen);
/* kube_config_default(kubeconfig, context) then kube_client_new. */
int kube_client_open(const char *kubeconfig, const char *context, const struct kube_limits *limits,
                     struct kube_client **out, char *err, size_t errlen);
void kube_client_free(struct kube_client *c);
/* The configuration's namespace ("default" when it names none). */
const char *kube_client_namespace(const struct kube_client *c);

/* GET path; *out the object (a new reference; out may be NULL in every call). */
int kube_get(struct kube_client *c, const char *path, json_t **out, char *err, size_t errlen);
/* One page of a list (o may be NULL): metadata.continue names the next one. */
int kube_list(struct kube_client *c, const char *path, const struct kube_list_opts *o, json_t **out, char *err,
              size_t errlen);
/* Every page (o->limit a page's size, default 500), items concatenated into the first page's list
 * object, metadata.continue removed; the pages together at most 4 times max_response (-EFBIG).
 * -ENODATA when a continue token expired: list again. */
int kube_list_all(struct kube_client *c, const char *path, const struct kube_list_opts *o, json_t **out, char *err,
                  size_t errlen);
/* POST obj to the collection path. -EEXIST when it exists. */
int kube_create(struct kube_client *c, const char *path, json_t *obj, json_t **out, char *err, size_t errlen);
/* PUT obj to the object's path; with metadata.resourceVersion set the server refuses a stale
 * copy: -ESTALE, then re-read, re-apply the change and update again. */
int kube_update(struct kube_client *c, const char *path, json_t *obj, json_t **out, char *err, size_t errlen);

enum kube_patch_type {
    KUBE_PATCH_MERGE,     /* application/merge-patch+json (RFC 7386) */
    KUBE_PATCH_STRATEGIC, /* application/strategic-merge-patch+json (built-in types only) */
    KUBE_PATCH_JSON,      /* application/json-patch+json (RFC 6902: patch is an array) */
    KUBE_PATCH_APPLY,     /* server-side apply: patch is the whole intent; field_manager required */
};
/* PATCH path. field_manager: the manager's name (required for APPLY, optional otherwise); force:
 * APPLY takes fields over from other managers. */
int kube_patch(struct kube_client *c, const char *path, enum kube_patch_type type, json_t *patch,
               const char *field_manager, bool force, json_t **out, char *err, size_t errlen);
/* DELETE path; *out what the server answers (the object, or a Status). */
int kube_delete(struct kube_client *c, const char *path, json_t **out, char *err, size_t errlen);

/* Any request: method, path with its query, body (NULL: none) of content_type. */
int kube_request(struct kube_client *c, const char *method, const char *path, const char *content_type,
                 const char *body, json_t **out, char *err, size_t errlen);

/* Cancelling from another thread: kube_cancel_bind(k) binds k to the calling thread, and
 * kube_cancel_fire(k), from any thread, ends that thread's request in flight at once and every
 * later one with -ECANCELED (a kubelet call whose deadline passed, a shutdown). One thread per
 * handle. */
struct kube_cancel;
int kube_cancel_new(struct kube_cancel **out);
void kube_cancel_fire(struct kube_cancel *k);
bool kube_cancel_fired(struct kube_cancel *k);
/* Binds k (NULL: none) to the calling thread. */
void kube_cancel_bind(struct kube_cancel *k);
/* Sleeps ms milliseconds or until k is fired: 0 or -ECANCELED. */
int kube_cancel_sleep(struct kube_cancel *k, unsigned ms);
/* Frees k; it must not be bound to a thread still making requests. NULL is fine. */
void kube_cancel_free(struct kube_cancel *k);

/* A watch event: ADDED, MODIFIED, DELETED or BOOKMARK (ERROR events end the watch instead). The
 * object is borrowed for the call (json_incref to keep it). A nonzero return ends the watch and is
 * kube_watch's return. */
typedef int (*kube_watch_fn)(void *ctx, enum kube_event_type type, json_t *object);

/* Watches the collection path from o->resource_version (NULL or "": from now, after synthetic
 * ADDED events for what exists) for at most timeout_s seconds (0: 300), blocking. Returns 0 when
 * the server ends the watch (a new watch from the last resourceVersion continues it), fn's return,
 * or -errno: -ENODATA for an expired resourceVersion (410 Gone: list again), -EPIPE when the
 * connection drops. */
int kube_watch(struct kube_client *c, const char *path, const struct kube_list_opts *o, unsigned timeout_s,
               kube_watch_fn fn, void *ctx, char *err, size_t errlen);

/* List-then-watch, for ever, on a thread of its own. */
struct kube_informer_ops {
    const char *path;           /* the collection */
    const char *label_selector; /* optional */
    const char *field_selector; /* optional */
    unsigned watch_timeout_s;   /* one watch's timeoutSeconds (0: 300) */
    /* After each (re)list: the whole list object; the caller replaces what it holds with its items.
     * Called first, then again after every relist (an expired watch, a dropped connection, an API
     * server restart). */
    int (*on_list)(void *ctx, json_t *list);
    /* ADDED / MODIFIED / DELETED between lists (bookmarks are kept internally). */
    int (*on_event)(void *ctx, enum kube_event_type type, json_t *object);
    /* Optional: a list or watch failed with r and msg; the informer backs off (0.2 s doubling to
     * 30 s, reset by a good list) and lists again. */
    void (*on_error)(void *ctx, int r, const char *msg);
    void *ctx;
};
struct kube_informer;

/* Starts the informer's thread (ops is copied; its strings must outlive the informer). A callback
 * returning nonzero makes the informer relist. */
int kube_informer_start(struct kube_client *c, const struct kube_informer_ops *ops, struct kube_informer **out,
                        char *err, size_t errlen);
/* Stops it (an in-flight request is woken at once), joins the thread and frees it: no callback
 * runs after it returns. NULL is fine. */
void kube_informer_stop(struct kube_informer *inf);

#endif
