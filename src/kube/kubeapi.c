/* kubeapi.c: API paths, query strings, Status objects and watch framing (kubeapi.h). Pure. */
#include "kubeapi.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* ---- paths and queries ---- */

static bool unreserved(unsigned char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' ||
           ch == '_' || ch == '~';
}

/* Appends s percent-encoded at buf+*pos. */
static int put_escaped(char *buf, size_t len, size_t *pos, const char *s) {
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        size_t need = unreserved(*p) ? 1 : 3;
        if (*pos + need >= len)
            return -ENAMETOOLONG;
        if (need == 1) {
            buf[(*pos)++] = (char)*p;
        } else {
            buf[(*pos)++] = '%';
            buf[(*pos)++] = hex[*p >> 4];
            buf[(*pos)++] = hex[*p & 15];
        }
    }
    buf[*pos] = '\0';
    return 0;
}

static int put_raw(char *buf, size_t len, size_t *pos, const char *s) {
    size_t n = strlen(s);
    if (*pos + n >= len)
        return -ENAMETOOLONG;
    memcpy(buf + *pos, s, n + 1);
    *pos += n;
    return 0;
}

/* A path segment as written into the path: lower-case letters, digits, '-' and '.' (resources,
 * groups, versions, namespaces are DNS labels or subdomains). */
static bool segment_ok(const char *s) {
    if (!s || !*s || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.'))
            return false;
    return true;
}

int kube_path(char *buf, size_t len, const char *api_version, const char *ns, const char *resource, const char *name) {
    if (!buf || len == 0 || !api_version || !segment_ok(resource))
        return -EINVAL;
    buf[0] = '\0';
    size_t pos = 0;
    const char *slash = strchr(api_version, '/');
    int r;
    if (!slash) {
        if (!segment_ok(api_version))
            return -EINVAL;
        r = put_raw(buf, len, &pos, "/api/");
        if (r == 0)
            r = put_raw(buf, len, &pos, api_version);
    } else {
        char group[256];
        size_t glen = (size_t)(slash - api_version);
        if (glen == 0 || glen >= sizeof group || strchr(slash + 1, '/') || !segment_ok(slash + 1))
            return -EINVAL;
        memcpy(group, api_version, glen);
        group[glen] = '\0';
        if (!segment_ok(group))
            return -EINVAL;
        r = put_raw(buf, len, &pos, "/apis/");
        if (r == 0)
            r = put_raw(buf, len, &pos, api_version);
    }
    if (r == 0 && ns && *ns) {
        if (!segment_ok(ns))
            return -EINVAL;
        r = put_raw(buf, len, &pos, "/namespaces/");
        if (r == 0)
            r = put_raw(buf, len, &pos, ns);
    }
    if (r == 0)
        r = put_raw(buf, len, &pos, "/");
    if (r == 0)
        r = put_raw(buf, len, &pos, resource);
    if (r == 0 && name) {
        if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
            return -EINVAL;
        r = put_raw(buf, len, &pos, "/");
        if (r == 0)
            r = put_escaped(buf, len, &pos, name);
    }
    return r;
}

int kube_query_add(char *buf, size_t len, const char *key, const char *value) {
    size_t pos = strnlen(buf, len);
    if (pos >= len)
        return -EINVAL;
    int r = put_raw(buf, len, &pos, strchr(buf, '?') ? "&" : "?");
    if (r == 0)
        r = put_escaped(buf, len, &pos, key);
    if (r == 0)
        r = put_raw(buf, len, &pos, "=");
    if (r == 0)
        r = put_escaped(buf, len, &pos, value);
    return r;
}

int kube_list_url(char *buf, size_t len, const char *path, const struct kube_list_opts *o, bool watch,
                  unsigned timeout_s) {
    if (!path || path[0] != '/' || strchr(path, '?'))
        return -EINVAL;
    if (gs_strlcpy(buf, path, len) < 0)
        return -ENAMETOOLONG;
    static const struct kube_list_opts none = { 0 };
    if (!o)
        o = &none;
    int r = 0;
    char num[32];
    if (watch) {
        r = kube_query_add(buf, len, "watch", "1");
        if (r == 0)
            r = kube_query_add(buf, len, "allowWatchBookmarks", "true");
    }
    if (r == 0 && o->label_selector && *o->label_selector)
        r = kube_query_add(buf, len, "labelSelector", o->label_selector);
    if (r == 0 && o->field_selector && *o->field_selector)
        r = kube_query_add(buf, len, "fieldSelector", o->field_selector);
    if (r == 0 && o->resource_version && *o->resource_version)
        r = kube_query_add(buf, len, "resourceVersion", o->resource_version);
    if (!watch) {
        if (r == 0 && o->limit) {
            snprintf(num, sizeof num, "%u", o->limit);
            r = kube_query_add(buf, len, "limit", num);
        }
        if (r == 0 && o->continue_token && *o->continue_token)
            r = kube_query_add(buf, len, "continue", o->continue_token);
    } else if (r == 0 && timeout_s) {
        snprintf(num, sizeof num, "%u", timeout_s);
        r = kube_query_add(buf, len, "timeoutSeconds", num);
    }
    return r;
}

/* ---- Status objects ---- */

int kube_status_errno(long code, const char *reason) {
    switch (code) {
    case 400:
    case 422: return -EINVAL;
    case 401: return -EACCES;
    case 403: return -EPERM;
    case 404: return -ENOENT;
    case 405: return -EOPNOTSUPP;
    case 409: return reason && strcmp(reason, "AlreadyExists") == 0 ? -EEXIST : -ESTALE;
    case 410: return -ENODATA;
    case 413: return -EFBIG;
    case 429: return -EBUSY;
    case 504: return -ETIMEDOUT;
    default: return -EIO;
    }
}

static const char *reason_phrase(long code) {
    switch (code) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 413: return "Request Entity Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "error";
    }
}

/* Copies at most n bytes of s, its first line only, control characters as '?'. */
static void copy_line(char *dst, size_t dstlen, const char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n && s[i] && s[i] != '\n' && o + 1 < dstlen; i++) {
        unsigned char ch = (unsigned char)s[i];
        dst[o++] = (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
    }
    dst[o] = '\0';
}

int kube_status_error(long http_status, const char *body, size_t len, char *msg, size_t msglen) {
    char text[512] = "";
    const char *reason = NULL;
    json_t *j = body && len ? json_loadb(body, len, 0, NULL) : NULL;
    if (j && json_is_object(j)) {
        const char *kind = json_string_value(json_object_get(j, "kind"));
        const char *m = json_string_value(json_object_get(j, "message"));
        reason = json_string_value(json_object_get(j, "reason"));
        if (kind && strcmp(kind, "Status") == 0 && m)
            copy_line(text, sizeof text, m, strlen(m));
    }
    if (!text[0] && body && len)
        copy_line(text, sizeof text, body, len);
    int r = kube_status_errno(http_status, reason);
    if (msg && msglen) {
        if (text[0])
            snprintf(msg, msglen, "%ld %s: %s", http_status, reason_phrase(http_status), text);
        else
            snprintf(msg, msglen, "%ld %s", http_status, reason_phrase(http_status));
    }
    json_decref(j);
    return r;
}

/* ---- watch framing ---- */

void kube_lines_init(struct kube_lines *l, size_t max) {
    *l = (struct kube_lines){ .max = max ? max : 1 };
}

void kube_lines_free(struct kube_lines *l) {
    free(l->buf);
    l->buf = NULL;
    l->len = l->cap = 0;
}

size_t kube_lines_pending(const struct kube_lines *l) {
    return l->len;
}

static int lines_append(struct kube_lines *l, const char *data, size_t n) {
    if (n > l->max - l->len)
        return -E2BIG;
    if (l->len + n > l->cap) {
        size_t cap = l->cap ? l->cap : (l->max < 4096 ? l->max : 4096);
        while (cap < l->len + n)
            cap = cap > l->max / 2 ? l->max : cap * 2;
        char *b = realloc(l->buf, cap);
        if (!b)
            return -ENOMEM;
        l->buf = b;
        l->cap = cap;
    }
    memcpy(l->buf + l->len, data, n);
    l->len += n;
    return 0;
}

int kube_lines_feed(struct kube_lines *l, const char *data, size_t n, kube_line_fn fn, void *ctx) {
    while (n > 0) {
        const char *nl = memchr(data, '\n', n);
        size_t part = nl ? (size_t)(nl - data) : n;
        int r;
        if (!nl)
            return lines_append(l, data, part);
        if (l->len == 0) {
            if (part > l->max) /* the same limit whether the line came in one chunk or many */
                return -E2BIG;
            r = part ? fn(ctx, data, part) : 0;
        } else {
            r = lines_append(l, data, part);
            if (r == 0)
                r = fn(ctx, l->buf, l->len);
            l->len = 0;
        }
        if (r != 0)
            return r;
        data += part + 1;
        n -= part + 1;
    }
    return 0;
}

static const char *const event_names[] = { "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR" };

const char *kube_event_name(enum kube_event_type t) {
    return (unsigned)t < GS_ARRAY_SIZE(event_names) ? event_names[t] : "?";
}

int kube_errf(char *err, size_t errlen, int r, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return r;
}

int kube_event_parse(const char *line, size_t len, enum kube_event_type *type, json_t **object, char *err,
                     size_t errlen) {
    json_error_t je;
    *object = NULL;
    json_t *j = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
    if (!j)
        return kube_errf(err, errlen, -EBADMSG, "watch event: invalid JSON at column %d: %s", je.column, je.text);
    int r = 0;
    const char *t = json_string_value(json_object_get(j, "type"));
    json_t *obj = json_object_get(j, "object");
    unsigned i;
    for (i = 0; t && i < GS_ARRAY_SIZE(event_names); i++)
        if (strcmp(t, event_names[i]) == 0)
            break;
    if (!json_is_object(j))
        r = kube_errf(err, errlen, -EBADMSG, "watch event: not a JSON object");
    else if (!t)
        r = kube_errf(err, errlen, -EBADMSG, "watch event: no \"type\" string");
    else if (i == GS_ARRAY_SIZE(event_names))
        r = kube_errf(err, errlen, -EBADMSG, "watch event: unknown type \"%.40s\"", t);
    else if (!json_is_object(obj))
        r = kube_errf(err, errlen, -EBADMSG, "watch event %s: no \"object\" object", t);
    if (r == 0) {
        *type = (enum kube_event_type)i;
        *object = json_incref(obj);
    }
    json_decref(j);
    return r;
}

const char *kube_meta(const json_t *obj, const char *field) {
    return json_string_value(json_object_get(json_object_get(obj, "metadata"), field));
}
