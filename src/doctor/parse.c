/* parse.c: what the doctor reads on the node, parsed without I/O: the container runtime's CDI
 * settings (a strict line scanner over a TOML subset), the process's capabilities (the
 * kubelet's checkpoint is kubelet/plugindir.c's). Hostile input: every length is bounded (doctor.h). */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doctor/doctor.h"
#include "util/util.h"

#define PATH_MAX_KEY 512
#define VALUE_MAX (16u << 10)

struct scan {
    const char *name;
    unsigned lineno;
    char *err;
    size_t errlen;
};

static int fail(const struct scan *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(const struct scan *s, const char *fmt, ...) {
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    snprintf(s->err, s->errlen, "%s:%u: %s", s->name, s->lineno, why);
    return -EINVAL;
}

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

/* Walks a line outside quotes: returns where a comment ('#') starts, else end; counts the
 * brackets into *depth when depth is not NULL (an array value spanning lines). */
static const char *walk(const char *p, const char *end, int *depth) {
    char q = 0;
    for (; p < end; p++) {
        if (q) {
            if (q == '"' && *p == '\\' && p + 1 < end)
                p++;
            else if (*p == q)
                q = 0;
        } else if (*p == '"' || *p == '\'') {
            q = *p;
        } else if (*p == '#') {
            return p;
        } else if (depth && (*p == '[' || *p == ']')) {
            *depth += *p == '[' ? 1 : -1;
        }
    }
    return end;
}

/* A quoted string at p (p[0] is the quote) copied into out; returns the position after it, NULL
 * when unterminated or too long. */
static const char *parse_string(const char *p, const char *end, char *out, size_t outlen) {
    char q = *p++;
    size_t n = 0;
    for (; p < end && *p != q; p++) {
        if (q == '"' && *p == '\\' && p + 1 < end)
            p++;
        if (n + 1 >= outlen)
            return NULL;
        out[n++] = *p;
    }
    if (p >= end)
        return NULL;
    out[n] = '\0';
    return p + 1;
}

/* A dotted key or table name (bare, "double" or 'single' quoted parts) joined with '.' in out.
 * Stops at '=', ']' or the end; returns that position, NULL when malformed. */
static const char *parse_path(const char *p, const char *end, char *out, size_t outlen) {
    size_t n = 0;
    out[0] = '\0';
    for (;;) {
        p = skip_ws(p, end);
        char part[PATH_MAX_KEY];
        if (p < end && (*p == '"' || *p == '\'')) {
            if (!(p = parse_string(p, end, part, sizeof(part))))
                return NULL;
        } else {
            size_t k = 0;
            while (p < end && (isalnum((unsigned char)*p) || *p == '_' || *p == '-') && k + 1 < sizeof(part))
                part[k++] = *p++;
            if (!k)
                return NULL;
            part[k] = '\0';
        }
        size_t m = strlen(part);
        if (n + m + 2 > outlen)
            return NULL;
        if (n)
            out[n++] = '.';
        memcpy(out + n, part, m + 1);
        n += m;
        p = skip_ws(p, end);
        if (p < end && *p == '.') {
            p++;
            continue;
        }
        return p;
    }
}

static int parse_bool(const struct scan *s, const char *key, const char *v, int *out) {
    if (!strcmp(v, "true"))
        *out = 1;
    else if (!strcmp(v, "false"))
        *out = 0;
    else
        return fail(s, "%s: '%.40s' is not true or false", key, v);
    return 0;
}

static int parse_dirs(const struct scan *s, const char *key, const char *v, struct gs_doc_cdi_config *c) {
    const char *p = v, *end = v + strlen(v);
    if (*p != '[')
        return fail(s, "%s: not an array of strings", key);
    c->dirs_given = true;
    c->dirs_line = s->lineno;
    c->n_dirs = 0;
    p++;
    for (;;) {
        while (p < end && (isspace((unsigned char)*p) || *p == ','))
            p++;
        if (p < end && *p == ']')
            return skip_ws(p + 1, end) == end ? 0 : fail(s, "%s: text after the array", key);
        char dir[GS_DOC_DIR_MAX];
        if (p >= end || (*p != '"' && *p != '\''))
            return fail(s, "%s: not an array of strings", key);
        if (!(p = parse_string(p, end, dir, sizeof(dir))))
            return fail(s, "%s: an unterminated string or one over %u bytes", key, GS_DOC_DIR_MAX - 1);
        if (c->n_dirs < GS_DOC_MAX_DIRS)
            memcpy(c->dirs[c->n_dirs++], dir, strlen(dir) + 1);
    }
}

static const char *const containerd_tables[] = {
    "plugins.io.containerd.grpc.v1.cri",    /* version 2: containerd 1.7, 2.x */
    "plugins.io.containerd.cri.v1.runtime", /* version 3: containerd 2.x */
    "plugins.cri",                          /* version 1 */
};

static int take(const struct scan *s, enum gs_doc_runtime rt, const char *key, const char *v,
                struct gs_doc_cdi_config *c) {
    if (rt == GS_DOC_CRIO)
        return strcmp(key, "crio.runtime.cdi_spec_dirs") ? 0 : parse_dirs(s, key, v, c);
    if (!strcmp(key, "version")) {
        unsigned long long n;
        if (gs_parse_uint(v, 1, 99, &n) < 0)
            return fail(s, "version: '%.40s' is not a config version", v);
        c->version = (int)n;
        return 0;
    }
    if (!strcmp(key, "imports")) {
        c->imports = true;
        return 0;
    }
    for (size_t i = 0; i < GS_ARRAY_SIZE(containerd_tables); i++) {
        size_t n = strlen(containerd_tables[i]);
        if (strncmp(key, containerd_tables[i], n) || key[n] != '.')
            continue;
        if (!strcmp(key + n + 1, "enable_cdi")) {
            c->enable_line = s->lineno;
            return parse_bool(s, key, v, &c->enable_cdi);
        }
        if (!strcmp(key + n + 1, "cdi_spec_dirs"))
            return parse_dirs(s, key, v, c);
    }
    return 0;
}

/* Moves to the next line: *p its start, *eol its end, *next the line after. */
static void advance(struct scan *s, const char *end, const char **p, const char **eol, const char **next) {
    *p = *next;
    const char *e = memchr(*p, '\n', (size_t)(end - *p));
    *eol = e ? e : end;
    *next = *eol < end ? *eol + 1 : end;
    s->lineno++;
}

int gs_doc_cdi_config_parse(enum gs_doc_runtime rt, const char *name, const char *text, size_t len,
                            struct gs_doc_cdi_config *out, char *err, size_t errlen) {
    struct scan s = { name, 0, err, errlen };
    struct gs_doc_cdi_config c = { 0 };
    c.enable_cdi = -1;
    if (len > GS_DOC_CONFIG_MAX)
        return fail(&s, "over %u bytes", GS_DOC_CONFIG_MAX);
    char table[PATH_MAX_KEY] = "";
    char *value = malloc(VALUE_MAX);
    if (!value) {
        snprintf(err, errlen, "%s: out of memory", name);
        return -ENOMEM;
    }
    const char *p = text, *end = text + len;
    int r = 0;
    while (p < end && r == 0) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        s.lineno++;
        if (eol - p > GS_DOC_LINE_MAX) {
            r = fail(&s, "a line over %u bytes", GS_DOC_LINE_MAX);
            break;
        }
        const char *q = skip_ws(p, eol), *stop = walk(q, eol, NULL);
        while (stop > q && isspace((unsigned char)stop[-1]))
            stop--;
        const char *next = eol < end ? eol + 1 : end;
        if (q == stop) {
            p = next;
            continue;
        }
        if (*q == '[') {
            bool twice = q + 1 < stop && q[1] == '[';
            const char *e = parse_path(q + (twice ? 2 : 1), stop, table, sizeof(table));
            if (!e || e >= stop || *e != ']' || (twice && (e + 1 >= stop || e[1] != ']')) ||
                skip_ws(e + (twice ? 2 : 1), stop) != stop) {
                r = fail(&s, "a table header without its ']' or with a malformed name");
                break;
            }
            p = next;
            continue;
        }
        char key[PATH_MAX_KEY], full[2 * PATH_MAX_KEY];
        const char *e = parse_path(q, stop, key, sizeof(key));
        if (!e || e >= stop || *e != '=') {
            r = fail(&s, "not a KEY = VALUE line or a [table] header");
            break;
        }
        snprintf(full, sizeof(full), "%s%s%s", table, table[0] ? "." : "", key);
        const char *v = skip_ws(e + 1, stop);
        if (stop - v >= 3 && (!strncmp(v, "\"\"\"", 3) || !strncmp(v, "'''", 3))) {
            /* a multi-line string (of no key read here): skip to its closing quotes */
            char delim[4] = { v[0], v[0], v[0], 0 };
            const char *from = v + 3, *lim = eol;
            while (!memmem(from, (size_t)(lim - from), delim, 3)) {
                if (next >= end) {
                    r = fail(&s, "%s: an unterminated multi-line string", full);
                    break;
                }
                advance(&s, end, &p, &eol, &next);
                from = p;
                lim = eol;
            }
            p = next;
            continue;
        }
        size_t n = 0;
        int depth = 0;
        walk(v, stop, &depth);
        unsigned extra = 0;
        memcpy(value, v, (size_t)(stop - v));
        n = (size_t)(stop - v);
        while (depth > 0 && r == 0) { /* an array over several lines */
            if (next >= end || ++extra > GS_DOC_ARRAY_LINES) {
                r = fail(&s, "%s: an array without its ']' within %u lines", full, GS_DOC_ARRAY_LINES);
                break;
            }
            advance(&s, end, &p, &eol, &next);
            if (eol - p > GS_DOC_LINE_MAX) {
                r = fail(&s, "a line over %u bytes", GS_DOC_LINE_MAX);
                break;
            }
            const char *a = skip_ws(p, eol), *b = walk(a, eol, NULL);
            if (n + 1 + (size_t)(b - a) >= VALUE_MAX) {
                r = fail(&s, "%s: an array over %u bytes", full, VALUE_MAX);
                break;
            }
            value[n++] = ' ';
            memcpy(value + n, a, (size_t)(b - a));
            n += (size_t)(b - a);
            walk(a, b, &depth);
        }
        if (r)
            break;
        while (n && isspace((unsigned char)value[n - 1]))
            n--;
        value[n] = '\0';
        r = take(&s, rt, full, value, &c);
        p = next;
    }
    free(value);
    if (r == 0)
        *out = c;
    return r;
}

int gs_doc_cdi_enabled(enum gs_doc_runtime rt, const struct gs_doc_cdi_config *c) {
    if (rt == GS_DOC_CRIO)
        return 1;
    if (c->enable_cdi >= 0)
        return c->enable_cdi;
    return c->version >= 3 ? 1 : -1;
}

const char *gs_doc_cdi_table(enum gs_doc_runtime rt, int version) {
    if (rt == GS_DOC_CRIO)
        return "[crio.runtime]";
    return version >= 3 ? "[plugins.\"io.containerd.cri.v1.runtime\"]" : "[plugins.\"io.containerd.grpc.v1.cri\"]";
}

int gs_doc_capeff_parse(const char *text, size_t len, unsigned long long *capeff) {
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        eol = eol ? eol : end;
        if (eol - p > 7 && !strncmp(p, "CapEff:", 7)) {
            const char *v = skip_ws(p + 7, eol);
            unsigned long long x = 0;
            unsigned digits = 0;
            for (; v < eol && isxdigit((unsigned char)*v); v++, digits++) {
                if (digits >= 16)
                    return -EINVAL;
                x = x << 4 | (unsigned)(isdigit((unsigned char)*v) ? *v - '0' : (tolower((unsigned char)*v) - 'a' + 10));
            }
            if (!digits || skip_ws(v, eol) != eol)
                return -EINVAL;
            *capeff = x;
            return 0;
        }
        p = eol + (eol < end);
    }
    return -ENOENT;
}
