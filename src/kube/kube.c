/* kube.c: the Kubernetes REST client's requests and watches over libcurl (kube.h), loaded at the
 * first client (curlload.h). Every transfer
 * runs on a curl multi handle of its own, polled in slices, so that kube_cancel_fire() wakes it at
 * once (curl_multi_wakeup). */
#include "kube.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "curlload.h"
#include "util/util.h"

#define TOKEN_MAX (64 * 1024)
#define ERROR_BODY_MAX (64 * 1024)
#define WATCH_MARGIN_S 30

struct kube_client {
    struct kube_config cfg;
    struct kube_limits lim;
    pthread_mutex_t lock; /* guards the token */
    char *token;          /* the current bearer token (the inline one or the file's) */
    struct stat token_st; /* the token file when it was read */
    bool token_read;
};

struct kube_cancel {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool fired;
    CURLM *active; /* the transfer in flight, woken by kube_cancel_fire */
};

static _Thread_local struct kube_cancel *bound_cancel;

/* ---- cancel ---- */

int kube_cancel_new(struct kube_cancel **out) {
    struct kube_cancel *k = calloc(1, sizeof(*k));
    if (!k)
        return -ENOMEM;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&k->lock, NULL);
    pthread_cond_init(&k->cond, &ca);
    pthread_condattr_destroy(&ca);
    *out = k;
    return 0;
}

void kube_cancel_fire(struct kube_cancel *k) {
    pthread_mutex_lock(&k->lock);
    k->fired = true;
    if (k->active)
        curl_multi_wakeup(k->active);
    pthread_cond_broadcast(&k->cond);
    pthread_mutex_unlock(&k->lock);
}

bool kube_cancel_fired(struct kube_cancel *k) {
    pthread_mutex_lock(&k->lock);
    bool f = k->fired;
    pthread_mutex_unlock(&k->lock);
    return f;
}

void kube_cancel_bind(struct kube_cancel *k) {
    bound_cancel = k;
}

int kube_cancel_sleep(struct kube_cancel *k, unsigned ms) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&k->lock);
    int rc = 0;
    while (!k->fired && rc == 0)
        rc = pthread_cond_timedwait(&k->cond, &k->lock, &ts);
    bool f = k->fired;
    pthread_mutex_unlock(&k->lock);
    return f ? -ECANCELED : 0;
}

void kube_cancel_free(struct kube_cancel *k) {
    if (!k)
        return;
    pthread_mutex_destroy(&k->lock);
    pthread_cond_destroy(&k->cond);
    free(k);
}

/* ---- the client ---- */


int kube_client_new(struct kube_config *cfg, const struct kube_limits *limits, struct kube_client **out, char *err,
                    size_t errlen) {
    static const struct kube_limits defaults = KUBE_DEFAULT_LIMITS;
    *out = NULL;
    char why[512];
    int lr = kube_curl_load(why, sizeof(why));
    if (lr < 0)
        return kube_errf(err, errlen, lr, "%s", why);
    if (!cfg->server)
        return kube_errf(err, errlen, -EINVAL, "the configuration names no API server");
    struct kube_client *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->cfg = *cfg;
    *cfg = (struct kube_config){ 0 };
    c->lim = limits ? *limits : defaults;
    if (!c->lim.connect_timeout_ms)
        c->lim.connect_timeout_ms = defaults.connect_timeout_ms;
    if (!c->lim.timeout_ms)
        c->lim.timeout_ms = defaults.timeout_ms;
    if (!c->lim.max_response)
        c->lim.max_response = defaults.max_response;
    if (!c->lim.max_line)
        c->lim.max_line = defaults.max_line;
    pthread_mutex_init(&c->lock, NULL);
    if (c->cfg.token && !(c->token = strdup(c->cfg.token))) {
        kube_client_free(c);
        return -ENOMEM;
    }
    *out = c;
    return 0;
}

int kube_client_open(const char *kubeconfig, const char *context, const struct kube_limits *limits,
                     struct kube_client **out, char *err, size_t errlen) {
    struct kube_config cfg;
    int r = kube_config_default(kubeconfig, context, &cfg, err, errlen);
    if (r < 0)
        return r;
    r = kube_client_new(&cfg, limits, out, err, errlen);
    kube_config_free(&cfg);
    return r;
}

void kube_client_free(struct kube_client *c) {
    if (!c)
        return;
    kube_config_free(&c->cfg);
    free(c->token);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

const char *kube_client_namespace(const struct kube_client *c) {
    return c->cfg.namespace ? c->cfg.namespace : "default";
}

static bool same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* "Authorization: Bearer T" into *hdr (NULL when there is no token): the token file re-read when
 * it changed since it was read, or always with force. */
static int auth_header(struct kube_client *c, bool force, char **hdr, char *err, size_t errlen) {
    *hdr = NULL;
    int r = 0;
    pthread_mutex_lock(&c->lock);
    if (c->cfg.token_file) {
        struct stat st;
        if (stat(c->cfg.token_file, &st) < 0) {
            r = kube_errf(err, errlen, -errno, "%s: %s (the bearer token file)", c->cfg.token_file, strerror(errno));
            goto out;
        }
        if (force || !c->token_read || !same_file(&st, &c->token_st)) {
            char *text = NULL;
            size_t len;
            r = gs_read_file_ex(c->cfg.token_file, TOKEN_MAX, 0, &text, &len, err, errlen);
            if (r < 0)
                goto out;
            while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' '))
                text[--len] = '\0';
            if (len == 0 || strpbrk(text, "\r\n")) {
                free(text);
                r = kube_errf(err, errlen, -EINVAL, "%s: %s", c->cfg.token_file,
                              len ? "more than one line: not a bearer token" : "empty: no bearer token");
                goto out;
            }
            free(c->token);
            c->token = text;
            c->token_st = st;
            c->token_read = true;
        }
    }
    if (c->token && asprintf(hdr, "Authorization: Bearer %s", c->token) < 0) {
        *hdr = NULL;
        r = -ENOMEM;
    }
out:
    pthread_mutex_unlock(&c->lock);
    return r;
}

/* ---- one transfer ---- */

struct body {
    char *buf;
    size_t len, cap, max;
    bool over;
};

static int body_add(struct body *b, const char *data, size_t n) {
    if (n > b->max - b->len) {
        b->over = true;
        return -EFBIG;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 16384;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *nb = realloc(b->buf, cap);
        if (!nb)
            return -ENOMEM;
        b->buf = nb;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, data, n);
    b->len += n;
    b->buf[b->len] = '\0';
    return 0;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *userdata) {
    return body_add(userdata, data, size * nmemb) == 0 ? size * nmemb : 0;
}

struct xfer {
    CURL *h;
    struct curl_slist *headers;
    char curl_err[CURL_ERROR_SIZE];
    long http;
};

static void xfer_done(struct xfer *x) {
    if (x->h)
        curl_easy_cleanup(x->h);
    curl_slist_free_all(x->headers);
    x->h = NULL;
    x->headers = NULL;
}

static int add_header(struct xfer *x, const char *h) {
    struct curl_slist *n = curl_slist_append(x->headers, h);
    if (!n)
        return -ENOMEM;
    x->headers = n;
    return 0;
}

static void set_blob(CURL *h, CURLoption opt, char *pem, size_t len) {
    struct curl_blob blob = { .data = pem, .len = len, .flags = CURL_BLOB_NOCOPY };
    curl_easy_setopt(h, opt, &blob);
}

/* A curl handle for METHOD url with TLS, auth, limits and headers set. timeout_ms 0: none. */
static int xfer_setup(struct kube_client *c, struct xfer *x, const char *method, const char *path,
                      const char *content_type, const char *body, bool force_token, unsigned long timeout_ms, char *err,
                      size_t errlen) {
    _cleanup_free_ char *url = NULL, *auth = NULL;
    *x = (struct xfer){ 0 };
    if (asprintf(&url, "%s%s", c->cfg.server, path) < 0) {
        url = NULL;
        return -ENOMEM;
    }
    int r = auth_header(c, force_token, &auth, err, errlen);
    if (r < 0)
        return r;
    if (!(x->h = curl_easy_init()))
        return kube_errf(err, errlen, -ENOMEM, "curl_easy_init failed");
    CURL *h = x->h;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, x->curl_err);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https,http");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)c->lim.connect_timeout_ms);
    if (timeout_ms)
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 30L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 10L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "gpuslice-kube/1");
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    }
    if (c->cfg.insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (c->cfg.ca_file)
        curl_easy_setopt(h, CURLOPT_CAINFO, c->cfg.ca_file);
    else if (c->cfg.ca_pem)
        set_blob(h, CURLOPT_CAINFO_BLOB, c->cfg.ca_pem, c->cfg.ca_pem_len);
    if (c->cfg.cert_file)
        curl_easy_setopt(h, CURLOPT_SSLCERT, c->cfg.cert_file);
    else if (c->cfg.cert_pem)
        set_blob(h, CURLOPT_SSLCERT_BLOB, c->cfg.cert_pem, c->cfg.cert_pem_len);
    if (c->cfg.key_file)
        curl_easy_setopt(h, CURLOPT_SSLKEY, c->cfg.key_file);
    else if (c->cfg.key_pem)
        set_blob(h, CURLOPT_SSLKEY_BLOB, c->cfg.key_pem, c->cfg.key_pem_len);
    char ct[128];
    snprintf(ct, sizeof ct, "Content-Type: %s", content_type ? content_type : "application/json");
    if ((r = add_header(x, "Accept: application/json")) < 0 || (r = add_header(x, "Expect:")) < 0 ||
        (body && (r = add_header(x, ct)) < 0) || (auth && (r = add_header(x, auth)) < 0))
        return r;
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, x->headers);
    return 0;
}

static int curl_errno(CURLcode rc) {
    switch (rc) {
    case CURLE_OPERATION_TIMEDOUT: return -ETIMEDOUT;
    case CURLE_COULDNT_CONNECT: return -ECONNREFUSED;
    case CURLE_COULDNT_RESOLVE_HOST: return -EHOSTUNREACH;
    case CURLE_WRITE_ERROR:
    case CURLE_FILESIZE_EXCEEDED: return -EFBIG;
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR: return -EPIPE;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE: return -EPROTO;
    case CURLE_OUT_OF_MEMORY: return -ENOMEM;
    case CURLE_ABORTED_BY_CALLBACK: return -ECANCELED;
    default: return -EIO;
    }
}

/* Runs the transfer to its end on a multi handle, woken by the thread's cancel handle. */
CURLcode kube_curl_perform(CURL *h) {
    struct kube_cancel *k = bound_cancel;
    CURLM *m = curl_multi_init();
    if (!m)
        return CURLE_OUT_OF_MEMORY;
    CURLcode rc = CURLE_OK;
    if (curl_multi_add_handle(m, h) != CURLM_OK) {
        curl_multi_cleanup(m);
        return CURLE_OUT_OF_MEMORY;
    }
    if (k) {
        pthread_mutex_lock(&k->lock);
        bool fired = k->fired;
        if (!fired)
            k->active = m;
        pthread_mutex_unlock(&k->lock);
        if (fired) {
            rc = CURLE_ABORTED_BY_CALLBACK;
            goto out;
        }
    }
    for (;;) {
        int running = 0;
        CURLMcode mc = curl_multi_perform(m, &running);
        if (mc != CURLM_OK) {
            rc = CURLE_RECV_ERROR;
            break;
        }
        if (!running) {
            int left;
            CURLMsg *msg;
            while ((msg = curl_multi_info_read(m, &left)))
                if (msg->msg == CURLMSG_DONE)
                    rc = msg->data.result;
            break;
        }
        if (k && kube_cancel_fired(k)) {
            rc = CURLE_ABORTED_BY_CALLBACK;
            break;
        }
        curl_multi_poll(m, NULL, 0, 1000, NULL);
    }
out:
    if (k) {
        pthread_mutex_lock(&k->lock);
        k->active = NULL;
        pthread_mutex_unlock(&k->lock);
    }
    curl_multi_remove_handle(m, h);
    curl_multi_cleanup(m);
    return rc;
}

/* The error of a failed transfer: "METHOD PATH: why". */
static int transfer_error(struct xfer *x, CURLcode rc, const struct body *b, const char *method, const char *path,
                          char *err, size_t errlen) {
    int r = curl_errno(rc);
    if (b && b->over)
        return kube_errf(err, errlen, -EFBIG, "%s %s: the response is over %zu bytes (the client's limit)", method,
                         path, b->max);
    if (rc == CURLE_FILESIZE_EXCEEDED)
        return kube_errf(err, errlen, -EFBIG, "%s %s: the response is over the client's size limit", method, path);
    if (r == -ECANCELED)
        return kube_errf(err, errlen, r, "%s %s: cancelled", method, path);
    return kube_errf(err, errlen, r, "%s %s: %s", method, path, x->curl_err[0] ? x->curl_err : curl_easy_strerror(rc));
}

/* kube_request, and the size of the answer's body in *len. */
static int request_len(struct kube_client *c, const char *method, const char *path, const char *content_type,
                       const char *body, json_t **out, size_t *len, char *err, size_t errlen) {
    if (out)
        *out = NULL;
    if (!path || path[0] != '/')
        return kube_errf(err, errlen, -EINVAL, "%s %s: an API path starts with '/'", method, path ? path : "(null)");
    struct body b = { .max = c->lim.max_response };
    struct xfer x;
    int r = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        free(b.buf);
        b = (struct body){ .max = c->lim.max_response };
        r = xfer_setup(c, &x, method, path, content_type, body, attempt > 0, c->lim.timeout_ms, err, errlen);
        if (r < 0)
            goto out;
        curl_easy_setopt(x.h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(x.h, CURLOPT_WRITEDATA, &b);
        curl_easy_setopt(x.h, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)c->lim.max_response);
        CURLcode rc = kube_curl_perform(x.h);
        curl_easy_getinfo(x.h, CURLINFO_RESPONSE_CODE, &x.http);
        if (rc != CURLE_OK) {
            r = transfer_error(&x, rc, &b, method, path, err, errlen);
            xfer_done(&x);
            goto out;
        }
        xfer_done(&x);
        /* a 401 with a token file: the token may have rotated under us */
        if (!(x.http == 401 && c->cfg.token_file && attempt == 0))
            break;
    }
    if (x.http < 200 || x.http > 299) {
        char msg[640];
        r = kube_status_error(x.http, b.buf, b.len, msg, sizeof msg);
        kube_errf(err, errlen, r, "%s %s: %s", method, path, msg);
        goto out;
    }
    if (out) {
        json_error_t je;
        *out = json_loadb(b.buf ? b.buf : "", b.len, 0, &je);
        if (!*out)
            r = kube_errf(err, errlen, -EBADMSG, "%s %s: the answer is not JSON (line %d, column %d: %s)", method, path,
                          je.line, je.column, je.text);
    }
    if (len)
        *len = b.len;
out:
    free(b.buf);
    return r;
}

int kube_request(struct kube_client *c, const char *method, const char *path, const char *content_type,
                 const char *body, json_t **out, char *err, size_t errlen) {
    return request_len(c, method, path, content_type, body, out, NULL, err, errlen);
}

/* ---- verbs ---- */

int kube_get(struct kube_client *c, const char *path, json_t **out, char *err, size_t errlen) {
    return kube_request(c, "GET", path, NULL, NULL, out, err, errlen);
}

static int list_len(struct kube_client *c, const char *path, const struct kube_list_opts *o, json_t **out, size_t *len,
                    char *err, size_t errlen) {
    char url[KUBE_URL_MAX];
    int r = kube_list_url(url, sizeof url, path, o, false, 0);
    if (r < 0)
        return kube_errf(err, errlen, r, "GET %s: %s", path,
                         r == -ENAMETOOLONG ? "the query is too long" : "not an API path");
    return request_len(c, "GET", url, NULL, NULL, out, len, err, errlen);
}

int kube_list(struct kube_client *c, const char *path, const struct kube_list_opts *o, json_t **out, char *err,
              size_t errlen) {
    return list_len(c, path, o, out, NULL, err, errlen);
}

int kube_list_all(struct kube_client *c, const char *path, const struct kube_list_opts *o, json_t **out, char *err,
                  size_t errlen) {
    struct kube_list_opts page = o ? *o : (struct kube_list_opts){ 0 };
    if (!page.limit)
        page.limit = 500;
    json_t *all = NULL;
    char *token = NULL;
    size_t total = 0, len = 0;
    int r;
    *out = NULL;
    for (;;) {
        json_t *one;
        page.continue_token = token;
        r = list_len(c, path, &page, &one, &len, err, errlen);
        free(token);
        token = NULL;
        if (r < 0)
            break;
        json_t *items = json_object_get(one, "items");
        if (!json_is_object(one) || !(json_is_array(items) || json_is_null(items))) {
            json_decref(one);
            r = kube_errf(err, errlen, -EBADMSG, "GET %s: the answer is not a list (no \"items\" array)", path);
            break;
        }
        const char *next = json_string_value(json_object_get(json_object_get(one, "metadata"), "continue"));
        if (next && *next && !(token = strdup(next))) {
            json_decref(one);
            r = -ENOMEM;
            break;
        }
        if (!all) {
            all = one;
            if (!json_is_array(items))
                json_object_set_new(all, "items", json_array());
        } else {
            if (json_is_array(items))
                json_array_extend(json_object_get(all, "items"), items);
            json_decref(one);
        }
        if (!token)
            break;
        total += len;
        if (total > c->lim.max_response * 4) {
            r = kube_errf(err, errlen, -EFBIG,
                          "GET %s: the pages add up to over %zu bytes (4 times the client's limit)", path,
                          c->lim.max_response * 4);
            break;
        }
    }
    free(token);
    if (r < 0) {
        json_decref(all);
        return r;
    }
    json_object_del(json_object_get(all, "metadata"), "continue");
    *out = all;
    return 0;
}

static int send_json(struct kube_client *c, const char *method, const char *path, const char *ctype, json_t *obj,
                     json_t **out, char *err, size_t errlen) {
    _cleanup_free_ char *body = json_dumps(obj, JSON_COMPACT);
    if (!body)
        return kube_errf(err, errlen, -EINVAL, "%s %s: the body cannot be written as JSON", method, path);
    return kube_request(c, method, path, ctype, body, out, err, errlen);
}

int kube_create(struct kube_client *c, const char *path, json_t *obj, json_t **out, char *err, size_t errlen) {
    return send_json(c, "POST", path, NULL, obj, out, err, errlen);
}

int kube_update(struct kube_client *c, const char *path, json_t *obj, json_t **out, char *err, size_t errlen) {
    return send_json(c, "PUT", path, NULL, obj, out, err, errlen);
}

int kube_patch(struct kube_client *c, const char *path, enum kube_patch_type type, json_t *patch,
               const char *field_manager, bool force, json_t **out, char *err, size_t errlen) {
    static const char *const ctypes[] = {
        [KUBE_PATCH_MERGE] = "application/merge-patch+json",
        [KUBE_PATCH_STRATEGIC] = "application/strategic-merge-patch+json",
        [KUBE_PATCH_JSON] = "application/json-patch+json",
        [KUBE_PATCH_APPLY] = "application/apply-patch+yaml",
    };
    if ((unsigned)type >= GS_ARRAY_SIZE(ctypes))
        return kube_errf(err, errlen, -EINVAL, "PATCH %s: unknown patch type %d", path, (int)type);
    if (type == KUBE_PATCH_APPLY && (!field_manager || !*field_manager))
        return kube_errf(err, errlen, -EINVAL, "PATCH %s: server-side apply needs a field manager", path);
    char url[KUBE_URL_MAX];
    if (gs_strlcpy(url, path, sizeof url) < 0)
        return kube_errf(err, errlen, -ENAMETOOLONG, "PATCH %s: the path is too long", path);
    int r = 0;
    if (field_manager && *field_manager)
        r = kube_query_add(url, sizeof url, "fieldManager", field_manager);
    if (r == 0 && force && type == KUBE_PATCH_APPLY)
        r = kube_query_add(url, sizeof url, "force", "true");
    if (r < 0)
        return kube_errf(err, errlen, r, "PATCH %s: the query is too long", path);
    return send_json(c, "PATCH", url, ctypes[type], patch, out, err, errlen);
}

int kube_delete(struct kube_client *c, const char *path, json_t **out, char *err, size_t errlen) {
    return kube_request(c, "DELETE", path, NULL, NULL, out, err, errlen);
}

/* ---- watch ---- */

struct watch {
    struct kube_lines lines;
    struct body error_body; /* the body of a non-200 answer */
    kube_watch_fn fn;
    void *ctx;
    CURL *h;
    long http;
    int result; /* what ended the watch from inside: fn's return, an ERROR event, a bad line */
    char msg[512];
};

static int on_line(void *ctx, const char *line, size_t len) {
    struct watch *w = ctx;
    enum kube_event_type type;
    json_t *obj;
    int r = kube_event_parse(line, len, &type, &obj, w->msg, sizeof w->msg);
    if (r < 0)
        return r;
    if (type == KUBE_ERROR) {
        json_t *code = json_object_get(obj, "code");
        const char *reason = json_string_value(json_object_get(obj, "reason"));
        const char *m = json_string_value(json_object_get(obj, "message"));
        long n = json_is_integer(code) ? (long)json_integer_value(code) : 500;
        snprintf(w->msg, sizeof w->msg, "ERROR event %ld %s: %s", n, reason ? reason : "", m ? m : "");
        r = kube_status_errno(n, reason);
    } else {
        r = w->fn(w->ctx, type, obj);
        if (r != 0)
            snprintf(w->msg, sizeof w->msg, "stopped by the caller (%d)", r);
    }
    json_decref(obj);
    return r;
}

static size_t on_watch_body(char *data, size_t size, size_t nmemb, void *userdata) {
    struct watch *w = userdata;
    size_t n = size * nmemb;
    if (!w->http)
        curl_easy_getinfo(w->h, CURLINFO_RESPONSE_CODE, &w->http);
    if (w->http != 200) {
        /* an error answer: keep its first bytes for the message */
        size_t room = w->error_body.max - w->error_body.len;
        body_add(&w->error_body, data, n < room ? n : room);
        return n;
    }
    int r = kube_lines_feed(&w->lines, data, n, on_line, w);
    if (r == -E2BIG)
        snprintf(w->msg, sizeof w->msg, "a watch event over %zu bytes (the client's line limit)", w->lines.max);
    if (r != 0) {
        w->result = r;
        return 0;
    }
    return n;
}

int kube_watch(struct kube_client *c, const char *path, const struct kube_list_opts *o, unsigned timeout_s,
               kube_watch_fn fn, void *ctx, char *err, size_t errlen) {
    char url[KUBE_URL_MAX];
    if (!timeout_s)
        timeout_s = 300;
    int r = kube_list_url(url, sizeof url, path, o, true, timeout_s);
    if (r < 0)
        return kube_errf(err, errlen, r, "watch %s: %s", path ? path : "(null)",
                         r == -ENAMETOOLONG ? "the query is too long" : "not an API path");
    struct watch w = { .fn = fn, .ctx = ctx, .error_body = { .max = ERROR_BODY_MAX } };
    kube_lines_init(&w.lines, c->lim.max_line);
    for (int attempt = 0; attempt < 2; attempt++) {
        struct xfer x;
        free(w.error_body.buf);
        w.error_body = (struct body){ .max = ERROR_BODY_MAX };
        w.http = 0;
        r = xfer_setup(c, &x, "GET", url, NULL, NULL, attempt > 0, ((unsigned long)timeout_s + WATCH_MARGIN_S) * 1000,
                       err, errlen);
        if (r < 0)
            goto out;
        w.h = x.h;
        curl_easy_setopt(x.h, CURLOPT_WRITEFUNCTION, on_watch_body);
        curl_easy_setopt(x.h, CURLOPT_WRITEDATA, &w);
        CURLcode rc = kube_curl_perform(x.h);
        curl_easy_getinfo(x.h, CURLINFO_RESPONSE_CODE, &x.http);
        if (w.result != 0) {
            r = w.result;
            kube_errf(err, errlen, r, "watch %s: %s", path, w.msg);
        } else if (rc != CURLE_OK) {
            r = transfer_error(&x, rc, NULL, "watch", path, err, errlen);
            if (r == -ETIMEDOUT || r == -EPIPE || r == -EIO)
                r = kube_errf(err, errlen, r == -EIO ? -EPIPE : r, "watch %s: the connection ended: %s", path,
                              x.curl_err[0] ? x.curl_err : curl_easy_strerror(rc));
        } else if (x.http == 200 && kube_lines_pending(&w.lines)) {
            r = kube_errf(err, errlen, -EPIPE, "watch %s: the stream ended inside an event", path);
        } else if (x.http != 200 && !(x.http == 401 && c->cfg.token_file && attempt == 0)) {
            char msg[640];
            r = kube_status_error(x.http, w.error_body.buf, w.error_body.len, msg, sizeof msg);
            kube_errf(err, errlen, r, "watch %s: %s", path, msg);
        }
        xfer_done(&x);
        if (!(x.http == 401 && c->cfg.token_file && attempt == 0 && w.result == 0))
            break;
    }
out:
    kube_lines_free(&w.lines);
    free(w.error_body.buf);
    return r;
}
