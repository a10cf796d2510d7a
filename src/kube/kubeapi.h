/* kubeapi.h: the pure parts of the Kubernetes REST client (no I/O): API paths and query strings,
 * the API's Status objects as errors, and the watch stream's framing into events. Used by the
 * client (kube.c) and tested and fuzzed on their own. */
#ifndef GS_KUBE_KUBEAPI_H
#define GS_KUBE_KUBEAPI_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Longest API path with its query the client builds. */
#define KUBE_URL_MAX 4096

/* The path of a collection (name NULL) or an object: api_version "v1" -> /api/v1/..., "G/V" ->
 * /apis/G/V/...; ns NULL or "" for cluster-scoped resources. Each segment is checked (no '/',
 * nothing empty, no "." or ".."); a name is percent-encoded. -EINVAL, or -ENAMETOOLONG when it
 * does not fit len. */
int kube_path(char *buf, size_t len, const char *api_version, const char *ns, const char *resource, const char *name);

/* Appends "?key=value" (or "&key=value" when buf has a '?') with value percent-encoded. */
int kube_query_add(char *buf, size_t len, const char *key, const char *value);

/* What a list or a watch asks for. Every field is optional (NULL / 0). */
struct kube_list_opts {
    const char *label_selector;   /* "app=x,tier!=db" */
    const char *field_selector;   /* "metadata.name=x" */
    const char *resource_version; /* list: "0" = from the cache; watch: where to start */
    const char *continue_token;   /* list: the previous page's metadata.continue */
    unsigned limit;               /* list: page size */
};

/* path + the list query of o. watch adds watch=1, allowWatchBookmarks=true and timeoutSeconds
 * (when timeout_s > 0) and leaves out limit and continue. */
int kube_list_url(char *buf, size_t len, const char *path, const struct kube_list_opts *o, bool watch,
                  unsigned timeout_s);

/* An HTTP error answer as an errno and a message: the Status object's message when the body is
 * one ("configmaps \"x\" not found"), else the body's first line (printable, cut), else the
 * reason phrase. 400/422 -EINVAL, 401 -EACCES, 403 -EPERM, 404 -ENOENT, 405 -EOPNOTSUPP,
 * 409 -EEXIST (reason AlreadyExists) or -ESTALE (a conflict: re-read and retry), 410 -ENODATA
 * (expired resourceVersion: relist), 413 -EFBIG, 429 -EBUSY, 5xx and the rest -EIO, 504 -ETIMEDOUT. */
int kube_status_error(long http_status, const char *body, size_t len, char *msg, size_t msglen);
/* The errno of a Status object's code and reason (as above); for watch ERROR events. */
int kube_status_errno(long code, const char *reason);

/* Newline framing of a streamed body, bounded: a line longer than max is -E2BIG (the stream is
 * then unusable). */
struct kube_lines {
    char *buf;
    size_t len, cap, max;
};
typedef int (*kube_line_fn)(void *ctx, const char *line, size_t len);
void kube_lines_init(struct kube_lines *l, size_t max);
/* Calls fn for each complete line (without its '\n'; empty lines skipped) in data. Returns 0,
 * -E2BIG, -ENOMEM or fn's first nonzero return, after which nothing more is delivered. */
int kube_lines_feed(struct kube_lines *l, const char *data, size_t n, kube_line_fn fn, void *ctx);
/* Bytes of an unfinished line left (a stream that ends there was cut). */
size_t kube_lines_pending(const struct kube_lines *l);
void kube_lines_free(struct kube_lines *l);

enum kube_event_type { KUBE_ADDED, KUBE_MODIFIED, KUBE_DELETED, KUBE_BOOKMARK, KUBE_ERROR };
const char *kube_event_name(enum kube_event_type t);

/* Parses one watch line {"type": T, "object": {...}}: *object is a new reference. For KUBE_ERROR
 * the object is a Status. -EBADMSG with err for anything else. */
int kube_event_parse(const char *line, size_t len, enum kube_event_type *type, json_t **object, char *err,
                     size_t errlen);

/* Formats an error into err (when err and errlen) and returns r: the module's error helper. */
int kube_errf(char *err, size_t errlen, int r, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* metadata.resourceVersion / metadata.name / metadata.namespace of an object, or NULL. */
const char *kube_meta(const json_t *obj, const char *field);

#endif
