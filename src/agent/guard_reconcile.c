/* guard_reconcile.c: see guard_reconcile.h. */
#include "agent/guard_reconcile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "../guard/guard_limits.h"
#include "../guard/guard_region.h"
#include "core/procmaps.h"
#include "util/log.h"
#include "util/util.h"

/* The counters region, mapped read-only after checking it is one (a file the container can write). */
static const struct gs_guard_region *map_region(const char *path, struct stat *st) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return NULL;
    const struct gs_guard_region *r = NULL;
    if (fstat(fd, st) == 0 && S_ISREG(st->st_mode) && (size_t)st->st_size >= sizeof(*r)) {
        void *p = mmap(NULL, sizeof(*r), PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED)
            r = p;
    }
    close(fd);
    if (r && (r->magic != GS_GUARD_REGION_MAGIC || r->version != GS_GUARD_REGION_VERSION)) {
        log_debug("Guard reconcile: %s is not a version %u counters region", path, GS_GUARD_REGION_VERSION);
        munmap((void *)r, sizeof(*r));
        r = NULL;
    }
    return r;
}

/* True if process `pid` maps the file st refers to. */
static bool maps_file(const char *proc_root, unsigned pid, const struct stat *st) {
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s/%u/maps", proc_root, pid) >= (int)sizeof(path))
        return false;
    _cleanup_free_ char *text = NULL;
    if (gs_read_file(path, 16 << 20, &text, NULL) < 0)
        return false; /* gone, or not ours to read */
    return gs_maps_has_file(text, major(st->st_dev), minor(st->st_dev), (unsigned long long)st->st_ino);
}

static const struct gs_guard_usage *find_prev(const struct gs_guard_usage *prev, size_t n, const struct gs_guard_usage *u) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(prev[i].allocation, u->allocation) && !strcmp(prev[i].uuid, u->uuid))
            return &prev[i];
    return NULL;
}

static unsigned long long absdiff(unsigned long long a, unsigned long long b) {
    return a > b ? a - b : b - a;
}

/* NVML's view minus the guard's, in bytes. */
static long long excess(const struct gs_guard_usage *u) {
    return (long long)u->nvml - (long long)u->counted;
}

/* One allocation: every GPU of its limits file that NVML knows. */
static void reconcile_one(const char *dir, const char *name, const char *proc_root, const struct gs_inventory *inv,
                          const struct gs_guard_usage *prev, size_t n_prev, struct gs_guard_usage *out, size_t max,
                          size_t *n) {
    char path[PATH_MAX];
    _cleanup_free_ char *text = NULL;
    struct gs_guard_limits l;
    char err[512];
    size_t text_len;
    if (snprintf(path, sizeof(path), "%s/limits", dir) >= (int)sizeof(path) ||
        gs_read_file(path, GS_GUARD_LIMITS_MAX, &text, &text_len) < 0)
        return;
    if (gs_guard_limits_parse(path, text, text_len, &l, err, sizeof(err)) < 0) {
        log_debug("Guard reconcile: %s", err);
        return;
    }
    /* One device it was allocated for ("RESOURCE\tID" lines), for the pod attribution. */
    char resource[GS_RESOURCE_NAME_MAX] = "", device[GS_DEVICE_ID_MAX] = "";
    _cleanup_free_ char *devices = NULL;
    if (snprintf(path, sizeof(path), "%s/devices", dir) < (int)sizeof(path) &&
        gs_read_file(path, 1 << 16, &devices, NULL) == 0) {
        char *tab = strchr(devices, '\t'), *nl = tab ? strchr(tab, '\n') : NULL;
        if (tab && (size_t)(tab - devices) < sizeof(resource)) {
            memcpy(resource, devices, (size_t)(tab - devices));
            resource[tab - devices] = '\0';
            size_t dl = nl ? (size_t)(nl - tab - 1) : strlen(tab + 1);
            if (dl < sizeof(device)) {
                memcpy(device, tab + 1, dl);
                device[dl] = 0;
            }
        }
    }
    struct stat st;
    if (snprintf(path, sizeof(path), "%s/state/region", dir) >= (int)sizeof(path))
        return;
    const struct gs_guard_region *r = map_region(path, &st);
    if (!r)
        return; /* no process of the container has used CUDA yet */
    for (unsigned k = 0; k < l.n_devices && *n < max; k++) {
        const struct gs_guard_device_limit *dl = &l.dev[k];
        if (!dl->vram || !dl->uuid[0] || dl->ordinal < 0 || dl->ordinal >= GS_GUARD_MAX_DEVICES)
            continue;
        const struct gs_gpu *g = NULL;
        for (unsigned i = 0; i < inv->n_gpus && !g; i++)
            if (!strcmp(inv->gpus[i].uuid, dl->uuid))
                g = &inv->gpus[i];
        if (!g)
            continue;
        struct gs_guard_usage *u = &out[(*n)++];
        *u = (struct gs_guard_usage){ .limit = dl->vram, .counted = atomic_load(&r->dev[dl->ordinal].used) };
        gs_strlcpy(u->allocation, name, sizeof(u->allocation));
        gs_strlcpy(u->uuid, dl->uuid, sizeof(u->uuid));
        gs_strlcpy(u->resource, resource, sizeof(u->resource));
        gs_strlcpy(u->device, device, sizeof(u->device));
        char pids[256] = "";
        size_t pl = 0;
        for (unsigned p = 0; p < g->n_procs; p++) {
            if (!maps_file(proc_root, g->procs[p].pid, &st))
                continue;
            u->nvml += g->procs[p].mem_bytes;
            u->processes++;
            if (pl < sizeof(pids))
                pl += (size_t)snprintf(pids + pl, sizeof(pids) - pl, "%s%u", pl ? "," : "", g->procs[p].pid);
        }
        if (!u->processes)
            continue; /* nothing to compare with: NVML lists none of its processes */
        const struct gs_guard_usage *before = find_prev(prev, n_prev, u);
        bool differs = absdiff(u->nvml, u->counted) > GS_GUARD_RECONCILE_TOLERANCE;
        bool moved = !before || !before->processes ||
                     (unsigned long long)llabs(excess(before) - excess(u)) > GS_GUARD_RECONCILE_TOLERANCE;
        if (differs && moved)
            log_warn("Guard reconcile: allocation %s on %s: the guard counted %llu MiB, NVML reports %llu MiB for "
                     "its processes (%s): %s%llu MiB %s",
                     name, dl->uuid, u->counted >> 20, u->nvml >> 20, pids, u->nvml >= u->counted ? "+" : "-",
                     absdiff(u->nvml, u->counted) >> 20,
                     u->nvml >= u->counted ? "allocated through paths the guard does not see (contexts, graphs, "
                                             "imported memory)"
                                           : "counted but not in use (NVML not yet updated, or frees the guard "
                                             "missed)");
        else if (!differs && before && before->processes &&
                 absdiff(before->nvml, before->counted) > GS_GUARD_RECONCILE_TOLERANCE)
            log_info("Guard reconcile: allocation %s on %s: the guard's count agrees with NVML again (%llu MiB)",
                     name, dl->uuid, u->nvml >> 20);
    }
    munmap((void *)r, sizeof(*r));
}

void guard_reconcile(const char *guard_root, const char *proc_root, const struct gs_inventory *inv,
                     const struct gs_guard_usage *prev, size_t n_prev, struct gs_guard_usage *out, size_t max,
                     size_t *n) {
    *n = 0;
    DIR *d = opendir(guard_root);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) && *n < max) {
        if (e->d_name[0] != 'a')
            continue;
        char dir[PATH_MAX];
        if (snprintf(dir, sizeof(dir), "%s/%s", guard_root, e->d_name) >= (int)sizeof(dir))
            continue;
        reconcile_one(dir, e->d_name, proc_root, inv, prev, n_prev, out, max, n);
    }
    closedir(d);
}
