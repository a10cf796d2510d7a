/* promfetch.c: the HTTP request of the Prometheus source (prom.h), through libcurl as src/kube
 * loads it. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consolidate/prom.h"
#include "kube/curlload.h"
#include "util/util.h"

struct body {
    char *buf;
    size_t len, cap, max;
    int too_big;
};

static size_t on_body(char *data, size_t size, size_t n, void *ctx) {
    struct body *b = ctx;
    size_t add = size * n;
    if (b->len + add > b->max) {
        b->too_big = 1;
        return 0;
    }
    if (b->len + add + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 65536;
        while (nc < b->len + add + 1)
            nc *= 2;
        char *nb = realloc(b->buf, nc);
        if (!nb)
            return 0;
        b->buf = nb;
        b->cap = nc;
    }
    memcpy(b->buf + b->len, data, add);
    b->len += add;
    b->buf[b->len] = 0;
    return add;
}

static void urlencode(const char *s, char *out, size_t outlen) {
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (; *s && o + 4 < outlen; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("-_.~", c)) {
            out[o++] = (char)c;
        } else {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    out[o] = 0;
}

int cs_prom_query_range(const struct cs_prom_query *q, const char *query, char **body_out, size_t *len, char *err,
                        size_t errlen) {
    *body_out = NULL;
    if (kube_curl_load(err, errlen) < 0)
        return -ENOENT;
    char enc[1024], url[4096];
    urlencode(query, enc, sizeof enc);
    size_t ul = strlen(q->url);
    while (ul && q->url[ul - 1] == '/')
        ul--;
    if (snprintf(url, sizeof url, "%.*s/api/v1/query_range?query=%s&start=%.3f&end=%.3f&step=%.3f", (int)ul, q->url,
                 enc, q->start, q->end, q->step) >= (int)sizeof url)
        return cs_errf(err, errlen, "--prometheus %s: URL too long", q->url);
    CURL *h = curl_easy_init();
    if (!h)
        return cs_errf(err, errlen, "--prometheus %s: libcurl failed to start", q->url);
    char cerr[CURL_ERROR_SIZE] = "";
    struct body b = { .max = q->max_body };
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https,http");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, q->timeout_ms < 5000 ? q->timeout_ms : 5000L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, q->timeout_ms);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "gpuslice-plan/1");
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    CURLcode cc = kube_curl_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    int rc = 0;
    if (b.too_big) {
        rc = cs_errf(err, errlen, "--prometheus %s: the answer is larger than %zu bytes", q->url, q->max_body);
    } else if (cc != CURLE_OK) {
        rc = cs_errf(err, errlen, "--prometheus %s: %s", q->url, cerr[0] ? cerr : curl_easy_strerror(cc));
    } else if (status != 200) {
        json_t *j = b.buf ? json_loadb(b.buf, b.len, 0, NULL) : NULL;
        const char *e = json_string_value(json_object_get(j, "error"));
        rc = cs_errf(err, errlen, "--prometheus %s: HTTP %ld: %.200s", q->url, status,
                     e ? e : b.buf ? b.buf : "(no body)");
        json_decref(j);
    }
    if (rc < 0) {
        free(b.buf);
        return rc;
    }
    *body_out = b.buf ? b.buf : strdup("");
    *len = b.len;
    return *body_out ? 0 : -ENOMEM;
}
