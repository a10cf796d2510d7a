/* extender.c: the doctor's check of the scheduler extender (pure): the URL the scheduler's
 * configuration names (its urlPrefix), the ExtenderArgs of the doctor's filter (a pod that asks for
 * nothing, on this node), and what /healthz and the filter answered, as findings. The requests are
 * probe.c's (gs_doc_check_extender). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "doctor/doctor.h"

#define S(x) ((x) ? (x) : "")

#define FIX_RUN                                                                                                        \
    "start the extender (gpuslice extender --api, the chart's extender.enabled) and give --extender the urlPrefix of " \
    "the scheduler's extenders entry; with ignorable: false the scheduler keeps every GPU pod Pending while it does "  \
    "not answer"

int gs_doc_extender_base(const char *url, char *base, size_t len, char *err, size_t errlen) {
    const char *rest = NULL;
    if (!strncmp(url, "http://", 7))
        rest = url + 7;
    else if (!strncmp(url, "https://", 8))
        rest = url + 8;
    if (!rest) {
        snprintf(err, errlen, "--extender %s: not an http:// or https:// URL", url);
        return -EINVAL;
    }
    size_t host = strcspn(rest, "/?#");
    if (host == 0 || rest[host] == '?' || rest[host] == '#' || strchr(url, ' ')) {
        snprintf(err, errlen, "--extender %s: not HTTP[S]://HOST[:PORT][/PREFIX]", url);
        return -EINVAL;
    }
    size_t n = (size_t)(rest - url) + host;
    if (n >= len || strlen(url) >= GS_DOC_TEXT_MAX / 2) {
        snprintf(err, errlen, "--extender: the URL is too long");
        return -ENAMETOOLONG;
    }
    memcpy(base, url, n);
    base[n] = '\0';
    return 0;
}

char *gs_doc_extender_args(const char *node) {
    json_t *args = json_pack("{s:{s:s,s:s,s:{s:s,s:s,s:s},s:{s:[{s:s,s:s}]}},s:[s]}", "Pod", "apiVersion", "v1",
                             "kind", "Pod", "metadata", "name", GS_DOC_EXT_PROBE_POD, "namespace", "default", "uid",
                             GS_DOC_EXT_PROBE_POD, "spec", "containers", "name", "probe", "image", "none", "NodeNames",
                             node);
    char *s = args ? json_dumps(args, JSON_COMPACT) : NULL;
    json_decref(args);
    return s;
}

/* The filter's answer: Error empty and the node among NodeNames, else why not. Keys as Go's decoder
 * takes them (case-insensitively; the extender writes them as the API's field names). */
static const json_t *get(const json_t *o, const char *key) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v)
        if (!strcasecmp(k, key))
            return v;
    return NULL;
}

static void filter_finding(struct gs_doc_report *r, const struct gs_doc_extender *e) {
    const char *node = S(e->node);
    if (e->filter_r == -EACCES) { /* 401: an extender with TLS, and no client certificate its CA verifies */
        gs_doc_add(r, "extender.filter", GS_DOC_FAIL,
                   e->client_cert ? "the extender's --client-ca-file must verify the certificate of --extender-cert "
                                    "(and --allowed-client-name name it): present the scheduler's"
                                  : "the extender takes requests only with a client certificate its client CA "
                                    "verifies: give the doctor the scheduler's (--extender-cert, --extender-key)",
                   "%s (a filter for a pod that asks for no GPU, on %s): %s", S(e->url), node, S(e->filter_err));
        return;
    }
    if (e->filter_r < 0) {
        gs_doc_add(r, "extender.filter", GS_DOC_FAIL,
                   "the scheduler POSTs its filter to URLPREFIX/filter: check that --extender is the urlPrefix and "
                   "that the extender's log shows the request",
                   "%s (a filter for a pod that asks for no GPU, on %s): %s", S(e->url), node, S(e->filter_err));
        return;
    }
    const json_t *ans = e->filter_answer;
    const json_t *error = json_is_object(ans) ? get(ans, "Error") : NULL;
    const json_t *names = json_is_object(ans) ? get(ans, "NodeNames") : NULL;
    if (!json_is_object(ans) || (error && !json_is_string(error)) || (names && !json_is_array(names) && !json_is_null(names))) {
        gs_doc_add(r, "extender.filter", GS_DOC_FAIL, "--extender must name gpuslice's extender (or another scheduler extender)",
                   "%s/filter answered, but not with an ExtenderFilterResult", S(e->url));
        return;
    }
    if (error && json_string_length(error)) {
        gs_doc_add(r, "extender.filter", GS_DOC_FAIL, "the extender's log names the cause; the scheduler would retry every pod",
                   "%s/filter (a pod that asks for no GPU, on %s) answered Error: %.300s", S(e->url), node,
                   json_string_value(error));
        return;
    }
    size_t i;
    json_t *v;
    json_array_foreach(names, i, v)
        if (json_is_string(v) && !strcmp(json_string_value(v), node)) {
            gs_doc_add(r, "extender.filter", GS_DOC_OK, NULL,
                       "%s/filter passes a pod that asks for no GPU on %s (the scheduler's ExtenderArgs, NodeNames)",
                       S(e->url), node);
            return;
        }
    const json_t *why = NULL;
    const char *set[] = { "FailedNodes", "FailedAndUnresolvableNodes" };
    for (size_t k = 0; k < 2 && !why; k++) {
        const json_t *failed = get(ans, set[k]);
        why = json_is_object(failed) ? json_object_get(failed, node) : NULL;
    }
    gs_doc_add(r, "extender.filter", GS_DOC_FAIL,
               "an extender passes nodes for pods that ask for none of its resources; check its version and log",
               "%s/filter refused %s for a pod that asks for no GPU: %.300s", S(e->url), node,
               json_is_string(why) ? json_string_value(why) : "the node is not among its NodeNames");
}

static void findings(struct gs_doc_report *r, const struct gs_doc_extender *e) {
    if (e->bad_url) {
        gs_doc_add(r, "extender", GS_DOC_FAIL, "give --extender the urlPrefix of the scheduler's extenders entry, "
                   "e.g. http://127.0.0.1:8888/gpuslice", "%s", e->bad_url);
        return;
    }
    if (e->health_r < 0) {
        gs_doc_add(r, "extender", GS_DOC_FAIL, FIX_RUN, "%s: %s", S(e->base), S(e->health_err));
        return;
    }
    gs_doc_add(r, "extender", GS_DOC_OK, NULL, "%s/healthz answered (the extender of --extender %s)", S(e->base),
               S(e->url));
    filter_finding(r, e);
}

/* --extender-warn: the extender is not the node's (an extender that does not answer keeps GPU pods
 * Pending, not the agent from starting), so each failure is a warning that says so, in whatever
 * room the message has left. */
void gs_doc_extender_findings(struct gs_doc_report *r, const struct gs_doc_extender *e) {
    unsigned first = r->n;
    findings(r, e);
    for (unsigned i = first; e->warn_only && i < r->n; i++) {
        struct gs_doc_finding *f = &r->f[i];
        if (f->status != GS_DOC_FAIL)
            continue;
        f->status = GS_DOC_WARN;
        size_t n = strlen(f->message);
        snprintf(f->message + n, sizeof(f->message) - n, "%s", GS_DOC_EXT_WARN_NOTE);
    }
}
