/* guard_limits.c: the guard's limits file parser and formatter (pure; see guard_limits.h). Strict: every line
 * is checked, numbers must fit, and errors name the line, so a damaged file is noticed; the
 * formatter parses its own text back, so it never writes a file the guard would read differently. */
#include "guard_limits.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t errlen, const char *name, unsigned line, const char *msg) {
    snprintf(err, errlen, "%s:%u: %s", name, line, msg);
    return -EINVAL;
}

static bool parse_u64(const char *s, uint64_t max, uint64_t *out) {
    if (!*s)
        return false;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        unsigned d = (unsigned)(*s - '0');
        if (d > max || v > (max - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* Splits line into at most max whitespace-separated words (in place); max + 1 if there are more. */
static unsigned split(char *line, char **words, unsigned max) {
    unsigned n = 0;
    for (char *p = line; *p;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            break;
        if (n == max)
            return max + 1;
        words[n++] = p;
        while (*p && *p != ' ' && *p != '\t')
            p++;
        if (*p)
            *p++ = '\0';
    }
    return n;
}

/* The first control character of a line (tab aside), or -1. */
static int control_char(const char *line, size_t len) {
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)line[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return c;
    }
    return -1;
}

int gs_guard_limits_parse(const char *name, const char *text, size_t len, struct gs_guard_limits *out, char *err,
                          size_t errlen) {
    if (len > GS_GUARD_LIMITS_MAX) {
        snprintf(err, errlen, "%s: larger than %u bytes", name, (unsigned)GS_GUARD_LIMITS_MAX);
        return -EINVAL;
    }
    struct gs_guard_limits l;
    memset(&l, 0, sizeof(l));
    l.fail_closed = true;
    unsigned lineno = 0;
    bool have_magic = false, have_on_error = false, have_region = false, have_overhead = false;
    for (const char *p = text, *end = text + len; p < end;) {
        lineno++;
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        size_t n_line = (size_t)((eol ? eol : end) - p);
        int c = control_char(p, n_line);
        if (c == 0)
            return fail(err, errlen, name, lineno, "NUL byte");
        if (c > 0) {
            char msg[64];
            snprintf(msg, sizeof(msg), "control character 0x%02x", (unsigned)c);
            return fail(err, errlen, name, lineno, msg);
        }
        char line[512];
        if (n_line >= sizeof(line))
            return fail(err, errlen, name, lineno, "line too long (at most 511 bytes)");
        if (!eol)
            return fail(err, errlen, name, lineno, "no newline at the end of the line (truncated file?)");
        memcpy(line, p, n_line);
        line[n_line] = '\0';
        p = eol + 1;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *w[6];
        unsigned n = split(line, w, 5);
        if (n == 0)
            continue;
        if (n > 5)
            return fail(err, errlen, name, lineno, "too many fields");
        if (!have_magic) {
            if (n != 2 || strcmp(w[0], "gpuslice-guard") != 0)
                return fail(err, errlen, name, lineno, "expected 'gpuslice-guard 1' as the first line");
            if (strcmp(w[1], "1") != 0)
                return fail(err, errlen, name, lineno, "unsupported format version (this guard reads version 1)");
            have_magic = true;
            continue;
        }
        if (!strcmp(w[0], "on-error")) {
            if (have_on_error)
                return fail(err, errlen, name, lineno, "on-error: listed twice");
            if (n != 2 || (strcmp(w[1], "closed") && strcmp(w[1], "open")))
                return fail(err, errlen, name, lineno, "on-error: expected 'closed' or 'open'");
            l.fail_closed = !strcmp(w[1], "closed");
            have_on_error = true;
        } else if (!strcmp(w[0], "region")) {
            if (have_region)
                return fail(err, errlen, name, lineno, "region: listed twice");
            if (n != 2 || w[1][0] != '/')
                return fail(err, errlen, name, lineno, "region: expected an absolute path");
            if (strlen(w[1]) >= sizeof(l.region))
                return fail(err, errlen, name, lineno, "region: path too long (at most 255 bytes)");
            strcpy(l.region, w[1]);
            have_region = true;
        } else if (!strcmp(w[0], "context-overhead")) {
            if (have_overhead)
                return fail(err, errlen, name, lineno, "context-overhead: listed twice");
            if (n != 2 || !parse_u64(w[1], 1ULL << 40, &l.context_overhead))
                return fail(err, errlen, name, lineno, "context-overhead: expected bytes (at most 1 TiB)");
            have_overhead = true;
        } else if (!strcmp(w[0], "device")) {
            uint64_t ord, vram, pct;
            if (n != 5)
                return fail(err, errlen, name, lineno, "device: expected 'device ORDINAL UUID|- BYTES PERCENT'");
            if (!parse_u64(w[1], GS_GUARD_MAX_DEVICES - 1, &ord))
                return fail(err, errlen, name, lineno, "device: ordinal must be 0..15");
            if (strcmp(w[2], "-") && (strncmp(w[2], "GPU-", 4) && strncmp(w[2], "MIG-", 4)))
                return fail(err, errlen, name, lineno, "device: UUID must start with GPU- or MIG- (or be -)");
            if (strlen(w[2]) >= sizeof(l.dev[0].uuid))
                return fail(err, errlen, name, lineno, "device: UUID too long");
            if (!parse_u64(w[3], 1ULL << 50, &vram))
                return fail(err, errlen, name, lineno, "device: VRAM must be a number of bytes (at most 1 PiB)");
            if (!parse_u64(w[4], 100, &pct))
                return fail(err, errlen, name, lineno, "device: compute must be a percentage 0..100");
            for (unsigned i = 0; i < l.n_devices; i++)
                if (l.dev[i].ordinal == (int)ord)
                    return fail(err, errlen, name, lineno, "device: ordinal listed twice");
            /* GS_GUARD_MAX_DEVICES distinct ordinals 0..15 always fit dev[]. */
            struct gs_guard_device_limit *d = &l.dev[l.n_devices++];
            d->ordinal = (int)ord;
            strcpy(d->uuid, strcmp(w[2], "-") ? w[2] : "");
            d->vram = vram;
            d->compute_pct = (unsigned)pct;
        } else {
            return fail(err, errlen, name, lineno, "unknown setting (expected on-error, region, context-overhead, device)");
        }
    }
    if (!have_magic)
        return fail(err, errlen, name, lineno ? lineno : 1, "empty: expected 'gpuslice-guard 1'");
    if (!have_region)
        return fail(err, errlen, name, lineno, "no 'region PATH' line");
    *out = l;
    return 0;
}

static bool same_limits(const struct gs_guard_limits *a, const struct gs_guard_limits *b) {
    if (a->fail_closed != b->fail_closed || strcmp(a->region, b->region) ||
        a->context_overhead != b->context_overhead || a->n_devices != b->n_devices)
        return false;
    for (unsigned i = 0; i < a->n_devices; i++) {
        const struct gs_guard_device_limit *x = &a->dev[i], *y = &b->dev[i];
        if (x->ordinal != y->ordinal || strcmp(x->uuid, y->uuid) || x->vram != y->vram ||
            x->compute_pct != y->compute_pct)
            return false;
    }
    return true;
}

int gs_guard_limits_format(const struct gs_guard_limits *l, char *buf, size_t len) {
    if (l->n_devices > GS_GUARD_MAX_DEVICES || memchr(l->region, '\0', sizeof(l->region)) == NULL)
        return -EINVAL;
    for (unsigned i = 0; i < l->n_devices; i++)
        if (memchr(l->dev[i].uuid, '\0', sizeof(l->dev[i].uuid)) == NULL)
            return -EINVAL;
    size_t n = 0;
    int w = snprintf(buf, len, "gpuslice-guard 1\non-error %s\nregion %s\ncontext-overhead %llu\n",
                     l->fail_closed ? "closed" : "open", l->region, (unsigned long long)l->context_overhead);
    if (w < 0 || (size_t)w >= len)
        return -ENOSPC;
    n = (size_t)w;
    for (unsigned i = 0; i < l->n_devices; i++) {
        const struct gs_guard_device_limit *d = &l->dev[i];
        w = snprintf(buf + n, len - n, "device %d %s %llu %u\n", d->ordinal, d->uuid[0] ? d->uuid : "-",
                     (unsigned long long)d->vram, d->compute_pct);
        if (w < 0 || (size_t)w >= len - n)
            return -ENOSPC;
        n += (size_t)w;
    }
    /* What the guard will read back must be what was asked for. */
    struct gs_guard_limits back;
    char err[128];
    if (gs_guard_limits_parse("format", buf, n, &back, err, sizeof(err)) < 0 || !same_limits(l, &back))
        return -EINVAL;
    return (int)n;
}

/* Estimates, not measurements: the order of magnitude reported for a CUDA 12 context with its
 * kernels loaded (300-500 MiB per context per GPU), larger on the newer architectures
 * whose contexts reserve more. tests/gpu/measure_context.py measures the real figure on a GPU
 * (NVML's used memory before and after cuDevicePrimaryCtxRetain); docs/guard.md keeps the table
 * and what has been measured. */
uint64_t gs_guard_context_overhead_default(const char *arch) {
    static const struct {
        const char *arch;
        uint64_t mib;
    } table[] = {
        { "volta", 300 }, { "turing", 300 }, { "ampere", 400 }, { "ada", 400 }, { "hopper", 500 }, { "blackwell", 500 },
    };
    for (size_t i = 0; arch && i < sizeof(table) / sizeof(table[0]); i++)
        if (!strcmp(table[i].arch, arch))
            return table[i].mib << 20;
    return GS_GUARD_CONTEXT_OVERHEAD_UNKNOWN;
}
