/* cleanup.c: guard GC, transient CDI GC, guard reconcile and pod attribution (see cleanup.h). */
#include "agent/cleanup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../guard/guard_layout.h"
#include "agent/guard_reconcile.h"
#include "agent/state.h"
#include "kubelet/podresources.h"
#include "util/log.h"
#include "util/util.h"

/* Whether the kubelet still assigns one of the devices in a devices record ("RESOURCE\tID" lines). */
static bool record_assigned(char *text, const struct pr_list *l) {
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *tab = strchr(line, '\t');
        if (!tab)
            continue;
        *tab = '\0';
        for (size_t i = 0; i < l->n; i++)
            if (!strcmp(l->items[i].resource, line) && !strcmp(l->items[i].device_id, tab + 1))
                return true;
    }
    return false;
}

/* True if the kubelet still assigns one of the devices listed in the file. */
static bool still_assigned(const char *path, const struct pr_list *l) {
    _cleanup_free_ char *text = NULL;
    if (gs_read_file_ex(path, 1 << 20, GS_READ_NOFOLLOW, &text, NULL, NULL, 0) < 0)
        return true; /* cannot tell: keep */
    return record_assigned(text, l);
}

/* The transient CDI specs of allocations (CDI_ROOT/<vendor>-<class>_alloc-<id>.json, each with its
 * .devices record) go when PodResources no longer assigns their devices, after the grace period,
 * like the guard files. l: the kubelet's list, NULL when it has not been asked yet. */
static void gc_cdi_transient(struct agent *a, const struct pr_list *l) {
    if (!a->o->cdi_root || !a->o->cdi_root[0])
        return;
    DIR *d = opendir(a->o->cdi_root);
    if (!d)
        return;
    struct pr_list own;
    bool asked = false;
    char err[512];
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (!strstr(e->d_name, "_alloc-") || len < 8 || strcmp(e->d_name + len - 8, ".devices") != 0)
            continue;
        char rec[PATH_MAX], spec[PATH_MAX];
        if (snprintf(rec, sizeof(rec), "%s/%s", a->o->cdi_root, e->d_name) >= (int)sizeof(rec))
            continue;
        snprintf(spec, sizeof(spec), "%.*s.json", (int)(strlen(rec) - 8), rec);
        struct stat st;
        if (stat(rec, &st) < 0 || (unsigned long long)(now - st.st_mtime) * 1000ULL < a->o->guard_grace_ms)
            continue;
        if (!l && !asked) {
            if (pr_list(a->o->pod_resources, 5000, &own, err, sizeof(err)) < 0)
                break;
            asked = true;
            l = &own;
        }
        if (!still_assigned(rec, l)) {
            unlink(spec);
            unlink(rec);
            log_info("Removed the CDI spec of a pod that is gone: %s", spec);
        }
    }
    closedir(d);
    if (asked)
        pr_list_free(&own);
}

/* An allocation directory without its devices record is what an Allocate that failed half-way
 * left (the record is written last before the answer, so no container was given it): it goes
 * once older than the grace period, and than this, whatever PodResources says. */
#define INCOMPLETE_MIN_AGE_MS 10000ULL
/* A guard directory being removed: renamed to this prefix + its name, removed whatever its content. */
#define GONE_PREFIX ".gone-"

/* The kubelet never calls Allocate again for a restarted container, so a container's guard files
 * live as long as its pod; they are removed once PodResources no longer assigns their devices.
 * When PodResources cannot be asked, nothing is removed but incomplete directories. The guard
 * root is root's, but each allocation's state directory is the container's to write: the
 * removal never follows a link in it (gs_remove_tree_at). */
void agent_guard_gc_job(void *ctx, uint64_t now_ns) {
    struct agent *a = ctx;
    (void)now_ns;
    DIR *d = opendir(a->o->guard_root);
    if (!d) {
        gc_cdi_transient(a, NULL);
        return;
    }
    struct pr_list l;
    bool listed = false, unlisted = false;
    char err[512];
    struct dirent *e;
    time_t now = time(NULL);
    while ((e = readdir(d))) {
        if (!strncmp(e->d_name, GONE_PREFIX, strlen(GONE_PREFIX))) { /* decided before: finish it */
            int r = gs_remove_tree_at(dirfd(d), e->d_name);
            if (r < 0 && r != -ENOENT)
                log_warn("Cannot remove the guard files %s/%s: %s", a->o->guard_root, e->d_name, strerror(-r));
            continue;
        }
        if (e->d_name[0] != 'a')
            continue;
        char dir[PATH_MAX];
        if (snprintf(dir, sizeof(dir), "%s/%s", a->o->guard_root, e->d_name) >= (int)sizeof(dir))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode) || now < st.st_mtime)
            continue;
        unsigned long long age_ms = (unsigned long long)(now - st.st_mtime) * 1000ULL;
        if (age_ms < a->o->guard_grace_ms)
            continue;
        char devices[PATH_MAX + 16];
        snprintf(devices, sizeof(devices), "%s/" GS_GUARD_DIR_DEVICES, dir);
        _cleanup_free_ char *record = NULL;
        int r = gs_read_file_ex(devices, 1 << 20, GS_READ_NOFOLLOW, &record, NULL, NULL, 0);
        const char *why = NULL;
        if (r == -ENOENT) {
            if (age_ms < INCOMPLETE_MIN_AGE_MS)
                continue;
            why = "an incomplete allocation (no devices record)";
        } else if (r < 0 || unlisted) {
            continue; /* cannot tell: keep */
        } else {
            if (!listed) {
                if (pr_list(a->o->pod_resources, 5000, &l, err, sizeof(err)) < 0) {
                    log_debug("Guard files not cleaned up: %s", err);
                    unlisted = true; /* incomplete ones still go */
                    continue;
                }
                listed = true;
            }
            if (record_assigned(record, &l))
                continue;
            why = "a pod that is gone";
        }
        /* Renamed first, so that a removal the container disturbs (it can still write the state
         * directory) is finished at the next pass instead of the directory looking incomplete
         * (its devices record may be gone already) and waiting INCOMPLETE_MIN_AGE_MS again. */
        char gone[NAME_MAX + 1];
        const char *name = e->d_name;
        if (snprintf(gone, sizeof(gone), "%s%s", GONE_PREFIX, e->d_name) < (int)sizeof(gone) &&
            renameat(dirfd(d), e->d_name, dirfd(d), gone) == 0)
            name = gone;
        if ((r = gs_remove_tree_at(dirfd(d), name)) < 0)
            log_warn("Cannot remove the guard files of %s, %s: %s (again at the next pass)", why, dir, strerror(-r));
        else
            log_info("Removed the guard files of %s: %s", why, dir);
    }
    closedir(d);
    gc_cdi_transient(a, listed ? &l : NULL);
    if (listed)
        pr_list_free(&l);
}

/* Compares the guard's counters with NVML's per-process memory (guard_reconcile.h) and publishes
 * both in the metrics. */
void agent_guard_reconcile_job(void *ctx, uint64_t now_ns) {
    struct agent *a = ctx;
    (void)now_ns;
    struct gs_guard_usage *prev = calloc(GS_METRICS_MAX_GUARD, sizeof(*prev));
    struct gs_guard_usage *now = calloc(GS_METRICS_MAX_GUARD, sizeof(*now));
    if (prev && now) {
        size_t n_prev = agent_shared_guard(&a->shared, prev), n = 0;
        guard_reconcile(a->o->guard_root, a->o->proc_root, a->inv, prev, n_prev, now, GS_METRICS_MAX_GUARD, &n);
        agent_shared_set_guard(&a->shared, now, n);
    }
    free(prev);
    free(now);
}

/* Who holds which of our devices, from the kubelet's PodResources List (at most one call per
 * --pod-attribution-interval-ms, far below the kubelet's 100 calls/s limit), for the metrics'
 * namespace/pod/container labels. Devices of other resources are left out. */
void agent_attribution_job(void *ctx, uint64_t now_ns) {
    struct agent *a = ctx;
    (void)now_ns;
    struct pr_list l;
    char err[512];
    if (pr_list(a->o->pod_resources, 2000, &l, err, sizeof(err)) < 0) {
        if (strcmp(err, a->attribution_error) != 0)
            log_warn("No pod attribution in the metrics: %s", err);
        gs_strlcpy(a->attribution_error, err, sizeof(a->attribution_error));
        agent_shared_set_pods(&a->shared, false, NULL, 0);
        return;
    }
    if (a->attribution_error[0])
        log_info("PodResources answers again: pod attribution resumes");
    a->attribution_error[0] = '\0';
    size_t max = l.n < GS_METRICS_MAX_POD_DEVICES ? l.n : GS_METRICS_MAX_POD_DEVICES;
    struct gs_pod_device *pd = max ? calloc(max, sizeof(*pd)) : NULL;
    unsigned n = 0;
    for (size_t i = 0; pd && i < l.n && n < max; i++) {
        const struct pr_assignment *as = &l.items[i];
        const struct gs_resource *r = a->plan_valid ? gs_plan_resource(&a->plan, as->resource) : NULL;
        if (!r || !gs_resource_device(r, as->device_id))
            continue;
        gs_strlcpy(pd[n].ns, as->ns, sizeof(pd[n].ns));
        gs_strlcpy(pd[n].pod, as->pod, sizeof(pd[n].pod));
        gs_strlcpy(pd[n].container, as->container, sizeof(pd[n].container));
        gs_strlcpy(pd[n].resource, as->resource, sizeof(pd[n].resource));
        gs_strlcpy(pd[n].device, as->device_id, sizeof(pd[n].device));
        n++;
    }
    agent_shared_set_pods(&a->shared, true, pd, n);
    free(pd);
    pr_list_free(&l);
}
