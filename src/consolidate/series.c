/* series.c: the pods' series, from CSV text or single samples, aligned on one grid (series.h). */
#include "consolidate/series.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

#define EMPTY 0xFFFFu

struct pod {
    char *key;
    uint32_t hash;
    bool has[2];
    uint64_t count[2];
    double peak[2];
    double last_ts[2];
    const char *last_where[2];
    uint32_t row;          /* duty row in the grid, UINT32_MAX: none */
};

struct cs_builder {
    unsigned pass;
    double to_percent;     /* duty value -> percent */
    struct pod *pods;
    size_t n, cap;
    uint32_t *slots;       /* open addressing: pod index + 1, 0 = empty */
    size_t nslots;
    double *ts;            /* distinct timestamps (pass 0), a set */
    size_t nts, tscap;
    double t0, step;
    size_t steps;
    uint16_t *grid;        /* rows * steps */
    size_t rows;
    size_t merged;
    size_t last;           /* the pod of the previous sample + 1 (0: none): rows come in runs */
    char where[4200];
};

#define fail cs_errf

int cs_errf(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen)
        vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

static uint32_t hash_key(const char *k, size_t len) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)k[i]) * 16777619u;
    return h;
}

static uint64_t hash_double(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    u ^= u >> 33;
    u *= 0xff51afd7ed558ccdull;
    u ^= u >> 33;
    return u;
}

bool cs_key_valid(const char *key, size_t len) {
    if (len == 0 || len > CS_MAX_KEY)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)key[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == ':' || c == '/' || c == '@' || c == '-'))
            return false;
    }
    return true;
}

int cs_builder_new(struct cs_builder **out) {
    struct cs_builder *b = calloc(1, sizeof *b);
    if (!b)
        return -ENOMEM;
    b->to_percent = 1.0;
    b->nslots = 1024;
    b->slots = calloc(b->nslots, sizeof *b->slots);
    b->tscap = 1024;
    b->ts = malloc(b->tscap * sizeof *b->ts);
    if (!b->slots || !b->ts) {
        cs_builder_free(b);
        return -ENOMEM;
    }
    for (size_t i = 0; i < b->tscap; i++)
        b->ts[i] = NAN;
    *out = b;
    return 0;
}

void cs_builder_free(struct cs_builder *b) {
    if (!b)
        return;
    for (size_t i = 0; i < b->n; i++)
        free(b->pods[i].key);
    free(b->pods);
    free(b->slots);
    free(b->ts);
    free(b->grid);
    free(b);
}

void cs_builder_set_duty_scale(struct cs_builder *b, double to_percent) { b->to_percent = to_percent; }

unsigned cs_builder_pass(const struct cs_builder *b) { return b->pass; }

static int rehash(struct cs_builder *b) {
    size_t ns = b->nslots * 2;
    uint32_t *s = calloc(ns, sizeof *s);
    if (!s)
        return -ENOMEM;
    for (size_t i = 0; i < b->n; i++) {
        size_t j = b->pods[i].hash & (ns - 1);
        while (s[j])
            j = (j + 1) & (ns - 1);
        s[j] = (uint32_t)i + 1;
    }
    free(b->slots);
    b->slots = s;
    b->nslots = ns;
    return 0;
}

/* The pod of key, added in pass 0; -ENOENT for an unknown key in pass 1. */
static int pod_of(struct cs_builder *b, const char *key, size_t len, size_t *idx) {
    if (b->last) {
        const struct pod *lp = &b->pods[b->last - 1];
        if (strncmp(lp->key, key, len) == 0 && lp->key[len] == 0) {
            *idx = b->last - 1;
            return 0;
        }
    }
    uint32_t h = hash_key(key, len);
    size_t j = h & (b->nslots - 1);
    while (b->slots[j]) {
        struct pod *p = &b->pods[b->slots[j] - 1];
        if (p->hash == h && strlen(p->key) == len && memcmp(p->key, key, len) == 0) {
            *idx = b->slots[j] - 1;
            b->last = *idx + 1;
            return 0;
        }
        j = (j + 1) & (b->nslots - 1);
    }
    if (b->pass != 0)
        return -ENOENT;
    if (b->n >= CS_MAX_PODS)
        return -E2BIG;
    if (b->n == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        struct pod *np = realloc(b->pods, nc * sizeof *np);
        if (!np)
            return -ENOMEM;
        b->pods = np;
        b->cap = nc;
    }
    struct pod *p = &b->pods[b->n];
    memset(p, 0, sizeof *p);
    p->key = strndup(key, len);
    if (!p->key)
        return -ENOMEM;
    p->hash = h;
    p->row = UINT32_MAX;
    b->slots[j] = (uint32_t)b->n + 1;
    *idx = b->n++;
    b->last = *idx + 1;
    if (b->n * 2 > b->nslots)
        return rehash(b);
    return 0;
}

static int ts_add(struct cs_builder *b, double t) {
    size_t j = hash_double(t) & (b->tscap - 1);
    while (!isnan(b->ts[j])) {
        if (b->ts[j] == t)
            return 0;
        j = (j + 1) & (b->tscap - 1);
    }
    if (b->nts >= CS_MAX_STEPS)
        return -E2BIG;
    b->ts[j] = t;
    b->nts++;
    if (b->nts * 2 > b->tscap) {
        size_t nc = b->tscap * 2;
        double *n = malloc(nc * sizeof *n);
        if (!n)
            return -ENOMEM;
        for (size_t i = 0; i < nc; i++)
            n[i] = NAN;
        for (size_t i = 0; i < b->tscap; i++) {
            if (isnan(b->ts[i]))
                continue;
            size_t k = hash_double(b->ts[i]) & (nc - 1);
            while (!isnan(n[k]))
                k = (k + 1) & (nc - 1);
            n[k] = b->ts[i];
        }
        free(b->ts);
        b->ts = n;
        b->tscap = nc;
    }
    return 0;
}

static const char *metric_name(enum cs_metric m) { return m == CS_MEMORY ? "memory" : "duty"; }

static uint16_t duty_units(double percent) {
    double u = ceil(percent * 100.0 - 1e-6);
    if (u < 0)
        u = 0;
    if (u > CS_DUTY_FULL)
        u = CS_DUTY_FULL;
    return (uint16_t)u;
}

int cs_builder_add(struct cs_builder *b, enum cs_metric m, const char *key, size_t keylen, double ts, double value,
                   const char *where, char *err, size_t errlen) {
    if (!cs_key_valid(key, keylen))
        return fail(err, errlen, "%s: pod key '%.*s' is not 1..%d characters of [A-Za-z0-9._:/@-]", where,
                    (int)(keylen > 64 ? 64 : keylen), key, CS_MAX_KEY);
    if (!isfinite(ts) || ts < 0 || ts > 1e11)
        return fail(err, errlen, "%s: timestamp %g is not a time in seconds (0..1e11)", where, ts);
    if (!isfinite(value))
        return fail(err, errlen, "%s: pod %.*s: %s value is %s", where, (int)keylen, key, metric_name(m),
                    isnan(value) ? "NaN" : "infinite");
    if (value < 0)
        return fail(err, errlen, "%s: pod %.*s: %s value %g is negative", where, (int)keylen, key, metric_name(m),
                    value);
    if (m == CS_MEMORY && value > 9.0e18)
        return fail(err, errlen, "%s: pod %.*s: memory value %g bytes is out of range", where, (int)keylen, key, value);
    if (m == CS_DUTY && value * b->to_percent > 100.0 + 1e-9)
        return fail(err, errlen, "%s: pod %.*s: duty %g is over 100 %%%s", where, (int)keylen, key, value,
                    b->to_percent == 1.0 ? "" : " (as a ratio over 1)");
    size_t i;
    int r = pod_of(b, key, keylen, &i);
    if (r == -ENOENT)
        return fail(err, errlen, "%s: pod %.*s was not in the first pass (the input changed)", where, (int)keylen, key);
    if (r == -E2BIG)
        return fail(err, errlen, "%s: more than %u pods", where, CS_MAX_PODS);
    if (r < 0)
        return fail(err, errlen, "%s: out of memory", where);
    struct pod *p = &b->pods[i];
    if (b->pass == 0) {
        if (p->has[m] && p->last_ts[m] == ts)
            return fail(err, errlen, "%s: pod %.*s: duplicate %s sample at timestamp %.17g", where, (int)keylen, key,
                        metric_name(m), ts);
        if (!p->has[m] || value > p->peak[m])
            p->peak[m] = value;
        p->has[m] = true;
        p->count[m]++;
        p->last_ts[m] = ts;
        r = ts_add(b, ts);
        if (r == -E2BIG)
            return fail(err, errlen, "%s: more than %u distinct timestamps", where, CS_MAX_STEPS);
        if (r < 0)
            return fail(err, errlen, "%s: out of memory", where);
        return 0;
    }
    if (m != CS_DUTY)
        return 0;
    if (p->row == UINT32_MAX)
        return fail(err, errlen, "%s: pod %.*s had no duty samples in the first pass", where, (int)keylen, key);
    double pos = (ts - b->t0) / b->step;
    long long s = llround(pos);
    if (s < 0 || (size_t)s >= b->steps)
        return fail(err, errlen, "%s: timestamp %.17g outside the first pass's range", where, ts);
    uint16_t u = duty_units(value * b->to_percent);
    uint16_t *cell = &b->grid[(size_t)p->row * b->steps + (size_t)s];
    if (*cell == EMPTY) {
        *cell = u;
    } else {
        b->merged++;
        if (u > *cell)
            *cell = u;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int cs_builder_grid(struct cs_builder *b, char *err, size_t errlen) {
    if (b->pass != 0)
        return fail(err, errlen, "the grid is already made");
    if (b->nts == 0)
        return fail(err, errlen, "no samples");
    double *t = malloc(b->nts * sizeof *t);
    if (!t)
        return -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < b->tscap; i++)
        if (!isnan(b->ts[i]))
            t[k++] = b->ts[i];
    qsort(t, k, sizeof *t, cmp_double);
    b->t0 = t[0];
    if (k < 2) {
        b->step = 60.0;
    } else {
        double *d = malloc((k - 1) * sizeof *d);
        if (!d) {
            free(t);
            return -ENOMEM;
        }
        for (size_t i = 0; i + 1 < k; i++)
            d[i] = t[i + 1] - t[i];
        qsort(d, k - 1, sizeof *d, cmp_double);
        b->step = d[(k - 1) / 2];
        free(d);
    }
    double span = t[k - 1] - t[0];
    free(t);
    double steps = floor(span / b->step + 0.5) + 1;
    if (steps > CS_MAX_STEPS)
        return fail(err, errlen, "the samples span %.0f s at a median step of %g s: %.0f steps, more than %u", span,
                    b->step, steps, CS_MAX_STEPS);
    b->steps = (size_t)steps;
    size_t rows = 0;
    for (size_t i = 0; i < b->n; i++)
        if (b->pods[i].has[CS_DUTY])
            b->pods[i].row = (uint32_t)rows++;
    if ((unsigned long long)rows * b->steps > CS_MAX_CELLS)
        return fail(err, errlen, "%zu pods x %zu steps is more than %llu values", rows, b->steps, CS_MAX_CELLS);
    b->rows = rows;
    if (rows) {
        b->grid = malloc(rows * b->steps * sizeof *b->grid);
        if (!b->grid)
            return fail(err, errlen, "out of memory for %zu pods x %zu steps", rows, b->steps);
        memset(b->grid, 0xFF, rows * b->steps * sizeof *b->grid);
    }
    b->pass = 1;
    return 0;
}

/* ---- CSV ---- */

enum { COL_TS, COL_VALUE, COL_KEY, NCOLS };
static const char *const col_names[NCOLS] = { "timestamp_anon", "value", "container_ip" };

static int parse_number(const char *f, size_t len, double *out) {
    char buf[64];
    if (len == 0 || len >= sizeof buf)
        return -EINVAL;
    memcpy(buf, f, len);
    buf[len] = 0;
    for (size_t i = 0; i < len; i++)
        if (!strchr("0123456789+-.eEinfatyINFATY", buf[i]))
            return -EINVAL;
    char *end;
    errno = 0;
    double v = strtod(buf, &end);
    if (end != buf + len)
        return -EINVAL;
    *out = v;
    return 0;
}

int cs_csv_feed(struct cs_builder *b, enum cs_metric m, const char *name, const char *text, size_t len, char *err,
                size_t errlen) {
    size_t pos = 0, line = 0;
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        pos = 3; /* a UTF-8 byte order mark before the header */
    int col[NCOLS] = { -1, -1, -1 };
    int ncols = 0;
    while (pos < len) {
        line++;
        const char *s = text + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t l = nl ? (size_t)(nl - s) : len - pos;
        pos += l + (nl ? 1 : 0);
        if (l && s[l - 1] == '\r')
            l--;
        if (memchr(s, 0, l))
            return fail(err, errlen, "%s:%zu: a NUL byte", name, line);
        if (memchr(s, '"', l))
            return fail(err, errlen, "%s:%zu: quoted fields are not supported", name, line);
        if (l == 0) {
            if (pos >= len)
                break;
            return fail(err, errlen, "%s:%zu: an empty line", name, line);
        }
        /* split */
        const char *f[NCOLS] = { 0 };
        size_t fl[NCOLS] = { 0 };
        int c = 0;
        size_t a = 0;
        for (size_t i = 0; i <= l; i++) {
            if (i < l && s[i] != ',')
                continue;
            if (line == 1) {
                for (int k = 0; k < NCOLS; k++) {
                    if (strlen(col_names[k]) == i - a && memcmp(s + a, col_names[k], i - a) == 0) {
                        if (col[k] >= 0)
                            return fail(err, errlen, "%s:1: column %s appears twice", name, col_names[k]);
                        col[k] = c;
                    }
                }
            } else {
                for (int k = 0; k < NCOLS; k++)
                    if (col[k] == c) {
                        f[k] = s + a;
                        fl[k] = i - a;
                    }
            }
            c++;
            a = i + 1;
            if (c > 64)
                return fail(err, errlen, "%s:%zu: more than 64 columns", name, line);
        }
        if (line == 1) {
            for (int k = 0; k < NCOLS; k++)
                if (col[k] < 0)
                    return fail(err, errlen, "%s:1: the header has no column %s (it needs %s, %s and %s)", name,
                                col_names[k], col_names[0], col_names[1], col_names[2]);
            ncols = c;
            continue;
        }
        if (c != ncols)
            return fail(err, errlen, "%s:%zu: %d fields, the header has %d", name, line, c, ncols);
        double ts, v;
        if (parse_number(f[COL_TS], fl[COL_TS], &ts) < 0)
            return fail(err, errlen, "%s:%zu: timestamp_anon '%.*s' is not a number", name, line,
                        (int)(fl[COL_TS] > 40 ? 40 : fl[COL_TS]), f[COL_TS]);
        if (parse_number(f[COL_VALUE], fl[COL_VALUE], &v) < 0)
            return fail(err, errlen, "%s:%zu: value '%.*s' is not a number", name, line,
                        (int)(fl[COL_VALUE] > 40 ? 40 : fl[COL_VALUE]), f[COL_VALUE]);
        snprintf(b->where, sizeof b->where, "%.4096s:%zu", name, line);
        int r = cs_builder_add(b, m, f[COL_KEY], fl[COL_KEY], ts, v, b->where, err, errlen);
        if (r < 0)
            return r;
    }
    if (line == 0)
        return fail(err, errlen, "%s: empty file (no header)", name);
    return 0;
}

/* ---- the result ---- */

static int cmp_key(const void *a, const void *b) {
    const struct pod *x = *(const struct pod *const *)a, *y = *(const struct pod *const *)b;
    return strcmp(x->key, y->key);
}

void cs_series_free(struct cs_series *s) {
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        free(s->keys[i]);
    for (size_t i = 0; i < s->n_skipped; i++)
        free(s->skipped[i]);
    free(s->keys);
    free(s->skipped);
    free(s->mem_peak);
    free(s->duty);
    free(s->duty_peak);
    free(s->filled);
    memset(s, 0, sizeof *s);
}

int cs_builder_finish(struct cs_builder *b, enum cs_fill fill, enum cs_missing missing, struct cs_series *out,
                      char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (b->pass != 1)
        return fail(err, errlen, "the duty samples were not placed on the grid");
    _cleanup_free_ struct pod **order = malloc((b->n ? b->n : 1) * sizeof *order);
    if (!order)
        return -ENOMEM;
    for (size_t i = 0; i < b->n; i++)
        order[i] = &b->pods[i];
    qsort(order, b->n, sizeof *order, cmp_key);
    size_t keep = 0, skip = 0;
    for (size_t i = 0; i < b->n; i++) {
        struct pod *p = order[i];
        if (p->has[CS_MEMORY] && p->has[CS_DUTY]) {
            keep++;
            continue;
        }
        if (missing == CS_MISSING_ERROR)
            return fail(err, errlen, "pod %s has a %s series but no %s series (--missing skip leaves such pods out)",
                        p->key, p->has[CS_MEMORY] ? "memory" : "duty", p->has[CS_MEMORY] ? "duty" : "memory");
        skip++;
    }
    if (keep == 0)
        return fail(err, errlen, "no pod has both a memory and a duty series");
    out->steps = b->steps;
    out->t0 = b->t0;
    out->step_s = b->step;
    out->merged = b->merged;
    out->fill = fill;
    out->keys = calloc(keep, sizeof *out->keys);
    out->mem_peak = calloc(keep, sizeof *out->mem_peak);
    out->duty_peak = calloc(keep, sizeof *out->duty_peak);
    out->filled = calloc(keep, sizeof *out->filled);
    out->skipped = calloc(skip ? skip : 1, sizeof *out->skipped);
    out->duty = malloc(keep * b->steps * sizeof *out->duty);
    if (!out->keys || !out->mem_peak || !out->duty_peak || !out->filled || !out->skipped || !out->duty) {
        cs_series_free(out);
        return fail(err, errlen, "out of memory for %zu pods x %zu steps", keep, b->steps);
    }
    for (size_t i = 0; i < b->n; i++) {
        struct pod *p = order[i];
        if (!(p->has[CS_MEMORY] && p->has[CS_DUTY])) {
            char *s;
            if (asprintf(&s, "%s (no %s series)", p->key, p->has[CS_MEMORY] ? "duty" : "memory") < 0) {
                cs_series_free(out);
                return -ENOMEM;
            }
            out->skipped[out->n_skipped++] = s;
            continue;
        }
        size_t k = out->n;
        out->keys[k] = p->key;
        p->key = NULL; /* moved */
        out->n++;
        out->mem_peak[k] = (uint64_t)ceil(p->peak[CS_MEMORY]);
        const uint16_t *src = b->grid + (size_t)p->row * b->steps;
        uint16_t *dst = out->duty + k * b->steps;
        uint16_t peak = 0, first = EMPTY;
        for (size_t t = 0; t < b->steps; t++) {
            if (src[t] != EMPTY) {
                if (first == EMPTY)
                    first = src[t];
                if (src[t] > peak)
                    peak = src[t];
            }
        }
        uint16_t last = first;
        uint32_t filled = 0;
        for (size_t t = 0; t < b->steps; t++) {
            if (src[t] != EMPTY) {
                last = dst[t] = src[t];
            } else {
                dst[t] = fill == CS_FILL_PEAK ? peak : last;
                filled++;
            }
        }
        out->duty_peak[k] = peak;
        out->filled[k] = filled;
    }
    return 0;
}
