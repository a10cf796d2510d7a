/* report.c: the doctor's findings, as text, JSON (gpuslice.doctor/v1) and a termination message. */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "doctor/doctor.h"
#include "util/util.h"

void gs_doc_add(struct gs_doc_report *r, const char *check, enum gs_doc_status st, const char *fix, const char *fmt,
                ...) {
    if (r->n >= GS_DOC_MAX_FINDINGS) {
        r->dropped++;
        return;
    }
    struct gs_doc_finding *f = &r->f[r->n++];
    gs_strlcpy(f->check, check, sizeof(f->check));
    f->status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->message, sizeof(f->message), fmt, ap);
    va_end(ap);
    gs_strlcpy(f->fix, fix ? fix : "", sizeof(f->fix));
}

const char *gs_doc_status_name(enum gs_doc_status st) {
    return st == GS_DOC_FAIL ? "fail" : st == GS_DOC_WARN ? "warn" : "ok";
}

unsigned gs_doc_count(const struct gs_doc_report *r, enum gs_doc_status st) {
    unsigned n = 0;
    for (unsigned i = 0; i < r->n; i++)
        n += r->f[i].status == st;
    return n;
}

int gs_doc_exit_code(const struct gs_doc_report *r) {
    return gs_doc_count(r, GS_DOC_FAIL) ? 1 : 0;
}

static int line(const struct gs_doc_finding *f, char *buf, size_t len) {
    return snprintf(buf, len, "%-4s %s: %s%s%s\n", gs_doc_status_name(f->status), f->check, f->message,
                    f->fix[0] ? "; fix: " : "", f->fix);
}

void gs_doc_print_text(const struct gs_doc_report *r, FILE *out) {
    char buf[GS_DOC_CHECK_MAX + 2 * GS_DOC_TEXT_MAX + 32];
    for (unsigned i = 0; i < r->n; i++) {
        line(&r->f[i], buf, sizeof(buf));
        fputs(buf, out);
    }
    unsigned fails = gs_doc_count(r, GS_DOC_FAIL), warns = gs_doc_count(r, GS_DOC_WARN);
    if (r->dropped)
        fprintf(out, "(%u more findings not shown)\n", r->dropped);
    fprintf(out, "%s: %u failed, %u warnings, %u ok\n", fails ? "node NOT ready" : "node ready", fails, warns,
            gs_doc_count(r, GS_DOC_OK));
}

char *gs_doc_json(const struct gs_doc_report *r) {
    json_t *arr = json_array();
    for (unsigned i = 0; arr && i < r->n; i++) {
        const struct gs_doc_finding *f = &r->f[i];
        json_array_append_new(arr, json_pack("{s:s,s:s,s:s,s:s}", "check", f->check, "status",
                                             gs_doc_status_name(f->status), "message", f->message, "fix", f->fix));
    }
    json_t *root = arr ? json_pack("{s:s,s:b,s:o,s:i}", "schema", "gpuslice.doctor/v1", "ready",
                                   gs_doc_exit_code(r) == 0, "findings", arr, "dropped", (int)r->dropped)
                       : NULL;
    char *s = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    return s;
}

size_t gs_doc_summary(const struct gs_doc_report *r, char *buf, size_t len) {
    size_t used = 0;
    if (!len)
        return 0;
    buf[0] = '\0';
    const enum gs_doc_status order[] = { GS_DOC_FAIL, GS_DOC_WARN };
    char tmp[GS_DOC_CHECK_MAX + 2 * GS_DOC_TEXT_MAX + 32];
    for (size_t k = 0; k < GS_ARRAY_SIZE(order); k++) {
        for (unsigned i = 0; i < r->n; i++) {
            if (r->f[i].status != order[k])
                continue;
            int n = line(&r->f[i], tmp, sizeof(tmp));
            if (n < 0 || (size_t)n >= len - used)
                return used;
            memcpy(buf + used, tmp, (size_t)n + 1);
            used += (size_t)n;
        }
    }
    return used;
}
