/* podutil.c: per-process means of NVML's utilization samples and their pods (see podutil.h). */
#include "core/podutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gs_util_window_init(struct gs_util_window *w, unsigned long long start_us) {
    *w = (struct gs_util_window){ .last_seen_us = start_us, .start_us = start_us };
}

static int by_pid_ts(const void *a, const void *b) {
    const struct gs_util_sample *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    return x->ts_us < y->ts_us ? -1 : x->ts_us > y->ts_us;
}

static int by_ts(const void *a, const void *b) {
    const unsigned long long *x = a, *y = b;
    return *x < *y ? -1 : *x > *y;
}

unsigned gs_util_fold(struct gs_util_window *w, const struct gs_util_sample *in, unsigned n, unsigned long long now_us,
                      struct gs_proc_util *out, unsigned max) {
    if (n > GS_PODUTIL_MAX_SAMPLES)
        n = GS_PODUTIL_MAX_SAMPLES;
    struct gs_util_sample *s = n ? malloc(n * sizeof(*s)) : NULL;
    unsigned long long *ts = n ? malloc(n * sizeof(*ts)) : NULL;
    unsigned m = 0;
    for (unsigned i = 0; s && ts && i < n; i++)
        if (in[i].ts_us > w->last_seen_us)
            s[m++] = in[i];
    if (!m) { /* nothing ran since the last read: the next interval starts where this one ends */
        if (now_us > w->start_us)
            w->start_us = w->period_us ? w->start_us + (now_us - w->start_us) / w->period_us * w->period_us : now_us;
        free(s);
        free(ts);
        return 0;
    }
    qsort(s, m, sizeof(*s), by_pid_ts);
    /* The period: the smallest gap between two samples of one process (one per period at most). */
    for (unsigned i = 1; i < m; i++) {
        unsigned long long gap = s[i].ts_us - s[i - 1].ts_us;
        if (s[i].pid == s[i - 1].pid && gap >= GS_PODUTIL_MIN_PERIOD_US && (!w->period_us || gap < w->period_us))
            w->period_us = gap;
    }
    /* The periods in the interval: those the samples name, and those in which nothing ran. */
    for (unsigned i = 0; i < m; i++)
        ts[i] = s[i].ts_us;
    qsort(ts, m, sizeof(*ts), by_ts);
    unsigned long long end = ts[m - 1], distinct = 1;
    for (unsigned i = 1; i < m; i++)
        distinct += ts[i] != ts[i - 1];
    /* The periods complete at the read since the interval's start. */
    unsigned long long periods = distinct, next = end;
    if (w->period_us && now_us > w->start_us) {
        unsigned long long spanned = (now_us - w->start_us) / w->period_us;
        if (spanned > periods)
            periods = spanned;
        if (w->start_us + spanned * w->period_us > next)
            next = w->start_us + spanned * w->period_us;
    }
    unsigned k = 0;
    for (unsigned i = 0; i < m;) {
        unsigned long long sum = 0;
        unsigned pid = s[i].pid;
        for (; i < m && s[i].pid == pid; i++)
            sum += s[i].sm > 100 ? 100 : s[i].sm;
        double r = (double)sum / (100.0 * (double)periods);
        if (k < max)
            out[k++] = (struct gs_proc_util){ pid, r > 1 ? 1 : r };
    }
    w->last_seen_us = end;
    w->start_us = next;
    free(s);
    free(ts);
    return k;
}

/* The entry of container pd (NULL: the one of no container) among out[first..*n), added if new. */
static struct gs_pod_util *entry(const struct gs_pod_device *pd, unsigned gpu, const char *uuid,
                                 struct gs_pod_util *out, unsigned first, unsigned max, unsigned *n) {
    const char *ns = pd ? pd->ns : "", *pod = pd ? pd->pod : "", *ctr = pd ? pd->container : "";
    for (unsigned i = first; i < *n; i++)
        if (!strcmp(out[i].ns, ns) && !strcmp(out[i].pod, pod) && !strcmp(out[i].container, ctr))
            return &out[i];
    if (*n >= max)
        return NULL;
    struct gs_pod_util *u = &out[(*n)++];
    *u = (struct gs_pod_util){ .gpu = gpu, .ratio = 0 };
    snprintf(u->ns, sizeof(u->ns), "%s", ns);
    snprintf(u->pod, sizeof(u->pod), "%s", pod);
    snprintf(u->container, sizeof(u->container), "%s", ctr);
    snprintf(u->uuid, sizeof(u->uuid), "%s", uuid);
    return u;
}

static bool same_container(const struct gs_pod_device *a, const struct gs_pod_device *b) {
    return !strcmp(a->ns, b->ns) && !strcmp(a->pod, b->pod) && !strcmp(a->container, b->container);
}

void gs_podutil_attribute(const struct gs_plan *plan, const struct gs_metrics_counters *c, unsigned gpu,
                          const char *uuid, const struct gs_proc_util *pu, unsigned n_pu,
                          const struct gs_util_owner *owners, unsigned n_owners, struct gs_pod_util *out,
                          unsigned max, unsigned *n) {
    unsigned first = *n;
    /* The containers that hold a device of this GPU (not one of its MIG devices). */
    const struct gs_pod_device *only = NULL;
    bool several = false;
    for (unsigned i = 0; c->pods_known && i < c->n_pod_devices; i++) {
        const struct gs_pod_device *pd = &c->pod_devices[i];
        const struct gs_resource *r = gs_plan_resource(plan, pd->resource);
        const struct gs_device *d = r ? gs_resource_device(r, pd->device) : NULL;
        if (!d || d->gpu != gpu || gs_device_is_mig(d))
            continue;
        entry(pd, gpu, uuid, out, first, max, n);
        if (!only)
            only = pd;
        else if (!same_container(only, pd))
            several = true;
    }
    struct gs_pod_util *none = entry(NULL, gpu, uuid, out, first, max, n);
    for (unsigned i = 0; i < n_pu; i++) {
        const struct gs_util_owner *o = NULL;
        for (unsigned k = 0; k < n_owners && !o; k++)
            if (owners[k].pid == pu[i].pid)
                o = &owners[k];
        const struct gs_pod_device *pd = o && o->device[0] ? gs_metrics_pod_of(c, o->resource, o->device) : NULL;
        if (!pd && o && o->in_pod && !several)
            pd = only;
        struct gs_pod_util *u = pd ? entry(pd, gpu, uuid, out, first, max, n) : none;
        if (u)
            u->ratio = u->ratio + pu[i].ratio > 1 ? 1 : u->ratio + pu[i].ratio;
    }
}

bool gs_cgroup_in_pod(const char *text) {
    for (const char *p = text; (p = strstr(p, "kubepods")) != NULL; p += 8) {
        bool starts = p == text || p[-1] == '/';
        char next = p[8];
        if (starts && (next == '/' || next == '.' || next == '-' || next == '\n' || next == '\0'))
            return true;
    }
    return false;
}
