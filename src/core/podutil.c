/* podutil.c: per-process means of NVML's utilization samples and their pods (see podutil.h). */
#include "core/podutil.h"

#include <errno.h>
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
    /* The periods complete at the read since the interval's start, once the period is known
     * (processes' samples of one period need not share a timestamp); before, the timestamps. */
    unsigned long long periods = distinct, next = end;
    if (w->period_us) {
        unsigned long long spanned = now_us > w->start_us ? (now_us - w->start_us) / w->period_us : 0;
        periods = spanned ? spanned : 1;
        if (w->start_us + spanned * w->period_us > next)
            next = w->start_us + spanned * w->period_us;
    }
    /* Never fewer periods than one process has samples (one a period at most): a read late or
     * early against the driver's period grid would otherwise divide one more period's samples by
     * one period fewer. */
    for (unsigned i = 0, j; i < m; i = j) {
        for (j = i; j < m && s[j].pid == s[i].pid; j++)
            ;
        if (periods < j - i)
            periods = j - i;
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

/* The device of plan `resource`/`id` if it is of GPU gpu (not one of its MIG devices). */
static bool on_gpu(const struct gs_plan *plan, const char *resource, const char *id, unsigned gpu) {
    const struct gs_resource *r = gs_plan_resource(plan, resource);
    const struct gs_device *d = r ? gs_resource_device(r, id) : NULL;
    return d && d->gpu == gpu && !gs_device_is_mig(d);
}

/* Adds an entry (from out[*n] on) for every container that holds, in PodResources, a device of
 * GPU gpu: one of the whole GPU (gi < 0: the GPU, a replica, a unit), or of its GPU instance gi
 * (a MIG device or a replica of one). Returns the first such container (NULL: none); *several
 * when there are others. */
static const struct gs_pod_device *holders(const struct gs_plan *plan, const struct gs_metrics_counters *c,
                                           unsigned gpu, int gi, const char *uuid, struct gs_pod_util *out,
                                           unsigned max, unsigned *n, bool *several) {
    unsigned first = *n;
    const struct gs_pod_device *only = NULL;
    *several = false;
    for (unsigned i = 0; c->pods_known && i < c->n_pod_devices; i++) {
        const struct gs_pod_device *pd = &c->pod_devices[i];
        const struct gs_resource *r = gs_plan_resource(plan, pd->resource);
        const struct gs_device *d = r ? gs_resource_device(r, pd->device) : NULL;
        if (!d || d->gpu != gpu || gs_device_is_mig(d) != (gi >= 0) || (gi >= 0 && d->gi_id != (unsigned)gi))
            continue;
        entry(pd, gpu, uuid, out, first, max, n);
        if (!only)
            only = pd;
        else if (!same_container(only, pd))
            *several = true;
    }
    return only;
}

/* Rule 2 of gs_podutil_attribute: pod UID uid's container on GPU gpu, into *tmp (its container
 * "" when several); NULL when the checkpoint names none of uid's devices on it. */
static const struct gs_pod_device *by_uid(const struct gs_plan *plan, const struct gs_metrics_counters *c,
                                          const char *uid, unsigned gpu, const struct gs_uid_device *ck,
                                          unsigned n_ck, struct gs_pod_device *tmp) {
    const struct gs_pod_device *found = NULL;
    bool several = false;
    for (unsigned i = 0; i < n_ck; i++) {
        if (strcmp(ck[i].uid, uid) != 0 || !on_gpu(plan, ck[i].resource, ck[i].device, gpu))
            continue;
        const struct gs_pod_device *pd = gs_metrics_pod_of(c, ck[i].resource, ck[i].device);
        if (!pd || strcmp(pd->container, ck[i].container) != 0)
            continue; /* PodResources does not (or no longer) say the same */
        if (!found)
            found = pd;
        else if (!same_container(found, pd))
            several = true;
    }
    if (!found || !several)
        return found;
    *tmp = *found;
    tmp->container[0] = '\0';
    return tmp;
}

/* The holders among dra[0..n_dra) of GPU gpu's instance gi (-1: the GPU) as PodResources-like
 * entries in tmp (at most max): one entry added each, the first in *only, *several as holders()
 * says (counting those holders() found: *only on entry). */
static void dra_holders(const struct gs_dra_holder *dra, unsigned n_dra, unsigned gpu, int gi, const char *uuid,
                        struct gs_pod_util *out, unsigned first, unsigned max, unsigned *n,
                        struct gs_pod_device *tmp, const struct gs_pod_device **only, bool *several) {
    for (unsigned i = 0; i < n_dra; i++) {
        if (dra[i].gpu != gpu || dra[i].gi != gi)
            continue;
        struct gs_pod_device pd = { 0 };
        snprintf(pd.ns, sizeof(pd.ns), "%s", dra[i].ns);
        snprintf(pd.pod, sizeof(pd.pod), "%s", dra[i].pod);
        snprintf(pd.container, sizeof(pd.container), "%s", dra[i].container);
        entry(&pd, gpu, uuid, out, first, max, n);
        if (!*only) {
            *tmp = pd;
            *only = tmp;
        } else if (!same_container(*only, &pd))
            *several = true;
    }
}

/* The entry of the DRA holder of GPU gpu whose pod has UID uid (NULL: none). */
static struct gs_pod_util *dra_entry(const struct gs_dra_holder *dra, unsigned n_dra, const char *uid, unsigned gpu,
                                     const char *uuid, struct gs_pod_util *out, unsigned first, unsigned max,
                                     unsigned *n) {
    for (unsigned i = 0; i < n_dra; i++)
        if (dra[i].gpu == gpu && dra[i].gi < 0 && !strcmp(dra[i].uid, uid)) {
            struct gs_pod_device pd = { 0 };
            snprintf(pd.ns, sizeof(pd.ns), "%s", dra[i].ns);
            snprintf(pd.pod, sizeof(pd.pod), "%s", dra[i].pod);
            snprintf(pd.container, sizeof(pd.container), "%s", dra[i].container);
            return entry(&pd, gpu, uuid, out, first, max, n);
        }
    return NULL;
}

void gs_podutil_attribute_dra(const struct gs_plan *plan, const struct gs_metrics_counters *c, unsigned gpu,
                              const char *uuid, const struct gs_proc_util *pu, unsigned n_pu,
                              const struct gs_util_owner *owners, unsigned n_owners, const struct gs_uid_device *ck,
                              unsigned n_ck, const struct gs_dra_holder *dra, unsigned n_dra, struct gs_pod_util *out,
                              unsigned max, unsigned *n) {
    unsigned first = *n;
    bool several, dra_several = false;
    const struct gs_pod_device *only = holders(plan, c, gpu, -1, uuid, out, max, n, &several);
    const struct gs_pod_device *dra_only = NULL;
    struct gs_pod_device dra_tmp;
    dra_holders(dra, n_dra, gpu, -1, uuid, out, first, max, n, &dra_tmp, &dra_only, &dra_several);
    struct gs_pod_util *none = entry(NULL, gpu, uuid, out, first, max, n);
    for (unsigned i = 0; i < n_pu; i++) {
        const struct gs_util_owner *o = NULL;
        for (unsigned k = 0; k < n_owners && !o; k++)
            if (owners[k].pid == pu[i].pid)
                o = &owners[k];
        struct gs_pod_device tmp;
        struct gs_pod_util *u = NULL;
        const struct gs_pod_device *pd = o && o->device[0] ? gs_metrics_pod_of(c, o->resource, o->device) : NULL;
        if (!pd && o && o->pod_uid[0])
            u = dra_entry(dra, n_dra, o->pod_uid, gpu, uuid, out, first, max, n);
        if (!pd && !u && o && o->pod_uid[0])
            pd = by_uid(plan, c, o->pod_uid, gpu, ck, n_ck, &tmp);
        if (!pd && !u && o && o->in_pod && !several && !dra_only && !(o->pod_uid[0] && n_ck))
            pd = only; /* its pod is not known from the checkpoint: the only holder's */
        if (!u)
            u = pd ? entry(pd, gpu, uuid, out, first, max, n) : none;
        if (u)
            u->ratio = u->ratio + pu[i].ratio > 1 ? 1 : u->ratio + pu[i].ratio;
    }
}

void gs_podutil_attribute(const struct gs_plan *plan, const struct gs_metrics_counters *c, unsigned gpu,
                          const char *uuid, const struct gs_proc_util *pu, unsigned n_pu,
                          const struct gs_util_owner *owners, unsigned n_owners, const struct gs_uid_device *ck,
                          unsigned n_ck, struct gs_pod_util *out, unsigned max, unsigned *n) {
    gs_podutil_attribute_dra(plan, c, gpu, uuid, pu, n_pu, owners, n_owners, ck, n_ck, NULL, 0, out, max, n);
}

void gs_podutil_attribute_mig_dra(const struct gs_plan *plan, const struct gs_metrics_counters *c, unsigned gpu,
                                  const char *uuid, const struct gs_mig_device *m, double ratio,
                                  const struct gs_dra_holder *dra, unsigned n_dra, struct gs_pod_util *out,
                                  unsigned max, unsigned *n) {
    unsigned first = *n;
    bool several;
    const struct gs_pod_device *only = holders(plan, c, gpu, (int)m->gi_id, uuid, out, max, n, &several);
    struct gs_pod_device tmp;
    dra_holders(dra, n_dra, gpu, (int)m->gi_id, uuid, out, first, max, n, &tmp, &only, &several);
    struct gs_pod_util *none = entry(NULL, gpu, uuid, out, first, max, n);
    struct gs_pod_util *u = only && !several ? entry(only, gpu, uuid, out, first, max, n) : none;
    if (u)
        u->ratio = ratio < 0 ? 0 : ratio > 1 ? 1 : ratio;
    for (unsigned i = first; i < *n; i++) {
        snprintf(out[i].mig_uuid, sizeof(out[i].mig_uuid), "%s", m->uuid);
        snprintf(out[i].profile, sizeof(out[i].profile), "%s", m->profile);
        out[i].gi_id = m->gi_id;
    }
}

void gs_podutil_attribute_mig(const struct gs_plan *plan, const struct gs_metrics_counters *c, unsigned gpu,
                              const char *uuid, const struct gs_mig_device *m, double ratio, struct gs_pod_util *out,
                              unsigned max, unsigned *n) {
    gs_podutil_attribute_mig_dra(plan, c, gpu, uuid, m, ratio, NULL, 0, out, max, n);
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

int gs_cgroup_pod_uid(const char *text, char uid[GS_POD_UID_MAX]) {
    uid[0] = '\0';
    if (!gs_cgroup_in_pod(text))
        return -ENOENT;
    /* The component after a kubepods one that starts with "pod" (cgroupfs), or the last
     * "-pod" of a kubepods systemd slice name. */
    for (const char *p = text; (p = strstr(p, "pod")) != NULL; p += 3) {
        char before = p > text ? p[-1] : '\0';
        bool cgroupfs = before == '/';
        if (!cgroupfs && before != '-')
            continue;
        const char *q = p + 3;
        size_t k = 0;
        while (k + 1 < GS_POD_UID_MAX && ((*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f') || *q == '-' || *q == '_')) {
            uid[k++] = *q == '_' ? '-' : *q;
            q++;
        }
        uid[k] = '\0';
        bool end = cgroupfs ? (*q == '/' || *q == '\n' || *q == '\0') : !strncmp(q, ".slice", 6);
        if (k >= 32 && end) /* a UID: 32 hex digits and 4 dashes */
            return 0;
        uid[0] = '\0';
    }
    return -ENOENT;
}
