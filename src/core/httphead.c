/* httphead.c: HTTP/1.x request head parser (RFC 9112 §3 and §5, strictly: CRLF line ends, a bare
 * LF accepted as RFC 9112 §2.2 allows, no obsolete line folding). */
#include "core/httphead.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <strings.h>

/* RFC 9110 §5.6.2 tchar */
static bool is_tchar(unsigned char c) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return true;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* Visible characters of a request target (RFC 3986 characters are all in 0x21..0x7e). */
static bool is_target_char(unsigned char c) {
    return c > 0x20 && c < 0x7f;
}

/* Finds the end of the line starting at p (before CRLF or LF); *next is the next line's start.
 * Returns false when no line end is in buf yet. A CR not followed by LF is an error (-1). */
static int line_end(const char *buf, size_t len, size_t p, size_t *end, size_t *next) {
    for (size_t i = p; i < len; i++) {
        if (buf[i] == '\n') {
            *end = i;
            *next = i + 1;
            return 1;
        }
        if (buf[i] == '\r') {
            if (i + 1 == len)
                return 0;
            if (buf[i + 1] != '\n')
                return -1;
            *end = i;
            *next = i + 2;
            return 1;
        }
    }
    return 0;
}

static bool token_is(const char *s, size_t n, const char *word) {
    return strlen(word) == n && strncasecmp(s, word, n) == 0;
}

/* Does the comma-separated list s[0..n) hold the token word (any case)? */
static bool list_has(const char *s, size_t n, const char *word) {
    size_t i = 0;
    while (i < n) {
        while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == ','))
            i++;
        size_t b = i;
        while (i < n && s[i] != ',')
            i++;
        size_t e = i;
        while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t'))
            e--;
        if (e > b && token_is(s + b, e - b, word))
            return true;
    }
    return false;
}

static int parse_request_line(const char *l, size_t n, struct gs_http_head *h) {
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)l[i]))
        i++;
    if (i == 0 || i == n || l[i] != ' ')
        return -EBADMSG;
    if (i >= sizeof(h->method))
        return -EOPNOTSUPP;
    memcpy(h->method, l, i);
    h->method[i] = '\0';
    size_t t = ++i;
    while (i < n && is_target_char((unsigned char)l[i]))
        i++;
    if (i == t || i == n || l[i] != ' ')
        return -EBADMSG;
    size_t tlen = i - t;
    const char *target = l + t;
    /* absolute form: http://host[:port]/path -> /path (a proxy's request; servers must take it) */
    size_t skip = tlen >= 7 && strncasecmp(target, "http://", 7) == 0    ? 7
                  : tlen >= 8 && strncasecmp(target, "https://", 8) == 0 ? 8
                                                                         : 0;
    if (skip) {
        const char *slash = memchr(target + skip, '/', tlen - skip);
        if (!slash) {
            static const char root[] = "/";
            target = root;
            tlen = 1;
        } else {
            tlen -= (size_t)(slash - target);
            target = slash;
        }
    }
    const char *q = memchr(target, '?', tlen);
    if (q)
        tlen = (size_t)(q - target);
    if (tlen >= sizeof(h->path))
        return -ENAMETOOLONG;
    memcpy(h->path, target, tlen);
    h->path[tlen] = '\0';
    i++;
    const char *v = l + i;
    size_t vn = n - i;
    if (vn != 8 || memcmp(v, "HTTP/", 5) != 0 || v[5] < '0' || v[5] > '9' || v[6] != '.' || v[7] < '0' ||
        v[7] > '9')
        return -EBADMSG;
    if (v[5] != '1')
        return -EPROTONOSUPPORT;
    h->minor = v[7] - '0';
    return 0;
}

struct fields {
    bool close;   /* "close" in some Connection field */
    bool keep;    /* "keep-alive" in some Connection field */
    int n_host;
    int n_length; /* Content-Length fields seen */
};

static int parse_field(const char *l, size_t n, struct gs_http_head *h, struct fields *f) {
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)l[i]))
        i++;
    if (i == 0 || i == n || l[i] != ':') /* no name, or whitespace before the colon (RFC 9112 §5.1) */
        return -EBADMSG;
    const char *name = l;
    size_t name_len = i++;
    while (i < n && (l[i] == ' ' || l[i] == '\t'))
        i++;
    size_t e = n;
    while (e > i && (l[e - 1] == ' ' || l[e - 1] == '\t'))
        e--;
    for (size_t k = i; k < e; k++) {
        unsigned char c = (unsigned char)l[k];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return -EBADMSG;
    }
    const char *val = l + i;
    size_t val_len = e - i;
    if (token_is(name, name_len, "Connection")) {
        f->close |= list_has(val, val_len, "close");
        f->keep |= list_has(val, val_len, "keep-alive");
    } else if (token_is(name, name_len, "Host")) {
        f->n_host++;
    } else if (token_is(name, name_len, "Transfer-Encoding")) {
        h->has_body = true;
        h->chunked = true;
    } else if (token_is(name, name_len, "Content-Length")) {
        if (val_len == 0)
            return -EBADMSG;
        unsigned long long v = 0;
        for (size_t k = 0; k < val_len; k++) {
            if (val[k] < '0' || val[k] > '9')
                return -EBADMSG;
            if (v > (ULLONG_MAX - 9) / 10)
                return -EBADMSG; /* no body is that long */
            v = v * 10 + (unsigned)(val[k] - '0');
        }
        if (f->n_length++ && v != h->content_length)
            return -EBADMSG;
        h->content_length = v;
        h->has_body |= v > 0;
    }
    return 0;
}

int gs_http_parse_head(const char *buf, size_t len, struct gs_http_head *h) {
    memset(h, 0, sizeof(*h));
    size_t p = 0, end, next;
    /* RFC 9112 §2.2: ignore at least one empty line before the request line. */
    while (p < len && (buf[p] == '\r' || buf[p] == '\n')) {
        int r = line_end(buf, len, p, &end, &next);
        if (r <= 0)
            return r < 0 ? -EBADMSG : 0;
        if (end != p)
            break;
        p = next;
    }
    int r = line_end(buf, len, p, &end, &next);
    if (r <= 0)
        return r < 0 ? -EBADMSG : 0;
    r = parse_request_line(buf + p, end - p, h);
    if (r < 0)
        return r;
    p = next;
    struct fields f = { 0 };
    for (;;) {
        r = line_end(buf, len, p, &end, &next);
        if (r <= 0)
            return r < 0 ? -EBADMSG : 0;
        if (end == p) {
            if (h->minor >= 1 && f.n_host != 1)
                return -EBADMSG;
            h->keep_alive = !f.close && (h->minor >= 1 || f.keep);
            return next > (size_t)0x7fffffff ? -EBADMSG : (int)next;
        }
        if (buf[p] == ' ' || buf[p] == '\t') /* obsolete line folding: rejected (RFC 9112 §5.2) */
            return -EBADMSG;
        r = parse_field(buf + p, end - p, h, &f);
        if (r < 0)
            return r;
        p = next;
    }
}
