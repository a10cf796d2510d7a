/* guard_reconcile.c: see guard_reconcile.h. */
#include "agent/guard_reconcile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "../guard/guard_layout.h"
#include "../guard/guard_limits.h"
#include "../guard/guard_region.h"
#include "core/podutil.h"
#include "core/procmaps.h"
#include "util/log.h"
#include "util/util.h"

/* The largest device total taken as real (1 PiB): beyond it the region is garbage, and the
 * differences with NVML's figures could no longer be computed. */
#define COUNTER_MAX (1ULL << 50)

/* Allocations whose region was found damaged, so that a container that keeps damaging its
 * region cannot flood the log: the damage is logged when it appears and when the region is
 * usable again, at most REPORTS_MAX times per allocation (the reconcile runs on the main thread
 * only; an entry goes with its allocation's directory). */
#define MAX_DAMAGED 64
#define REPORTS_MAX 3
static struct damaged_region {
    char allocation[64];
    bool damaged; /* now (else usable again) */
    bool seen;    /* in this pass */
    unsigned reports;
} damaged[MAX_DAMAGED];
static unsigned n_damaged;

static int damaged_find(const char *name) {
    for (unsigned i = 0; i < n_damaged; i++)
        if (!strcmp(damaged[i].allocation, name))
            return (int)i;
    return -1;
}

static void report_damaged(const char *name, const char *path, const char *why) {
    int i = damaged_find(name);
    if (i < 0 && n_damaged < MAX_DAMAGED) {
        i = (int)n_damaged++;
        damaged[i] = (struct damaged_region){ .reports = 0 };
        gs_strlcpy(damaged[i].allocation, name, sizeof(damaged[i].allocation));
    }
    if (i >= 0) {
        damaged[i].seen = true;
        if (damaged[i].damaged || damaged[i].reports >= REPORTS_MAX)
            return;
        damaged[i].damaged = true;
        damaged[i].reports++;
    }
    log_warn("Guard reconcile: skipping allocation %s: its counters region %s is not usable (%s); the container "
             "may have damaged it%s",
             name, path, why, i >= 0 && damaged[i].reports == REPORTS_MAX ? " (not logged again)" : "");
}

static void report_usable(const char *name) {
    int i = damaged_find(name);
    if (i < 0)
        return;
    damaged[i].seen = true;
    if (damaged[i].damaged && damaged[i].reports < REPORTS_MAX)
        log_info("Guard reconcile: the counters region of allocation %s is usable again", name);
    damaged[i].damaged = false;
}

static uint32_t load_u32(const unsigned char *buf, size_t off) {
    uint32_t v;
    memcpy(&v, buf + off, sizeof(v));
    return v;
}

/* The device totals of the counters region at path, read with pread into the agent's own memory.
 * The file is the container's (mode 0666 in a directory mounted read-write): it can be truncated,
 * replaced (by a symbolic link, a FIFO) or overwritten at any moment, so it is never mapped (a
 * mapping faults with SIGBUS once the file is truncated under it) and its content is checked
 * like any input. Returns 1 with used[] filled and st (for the /proc/PID/maps match), 0 when the
 * region is not there yet (empty or not yet initialised: no process of the container has used
 * CUDA), -1 with why when it is damaged. */
static int read_region(const char *path, struct stat *st, uint64_t used[GS_GUARD_MAX_DEVICES], char *why,
                       size_t whylen) {
    enum { HEAD = offsetof(struct gs_guard_region, procs) }; /* header and device totals */
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        snprintf(why, whylen, "%s", errno == ELOOP ? "a symbolic link" : strerror(errno));
        return -1;
    }
    if (fstat(fd, st) < 0) {
        snprintf(why, whylen, "fstat: %s", strerror(errno));
        return -1;
    }
    if (!S_ISREG(st->st_mode)) {
        snprintf(why, whylen, "not a regular file");
        return -1;
    }
    if (st->st_size == 0)
        return 0;
    unsigned char buf[HEAD];
    ssize_t n;
    do
        n = pread(fd, buf, sizeof(buf), 0);
    while (n < 0 && errno == EINTR);
    if (n < 0) {
        snprintf(why, whylen, "read: %s", strerror(errno));
        return -1;
    }
    if ((size_t)n < sizeof(buf) || (unsigned long long)st->st_size < sizeof(struct gs_guard_region)) {
        long long size = (size_t)n < sizeof(buf) ? (long long)n : (long long)st->st_size; /* truncated meanwhile */
        snprintf(why, whylen, "%lld bytes, a version %u region has %zu", size, GS_GUARD_REGION_VERSION,
                 sizeof(struct gs_guard_region));
        return -1;
    }
    uint32_t magic = load_u32(buf, offsetof(struct gs_guard_region, magic));
    uint32_t version = load_u32(buf, offsetof(struct gs_guard_region, version));
    uint32_t size = load_u32(buf, offsetof(struct gs_guard_region, size));
    if (magic == 0 && version == 0)
        return 0; /* sized, not yet initialised by the guard */
    if (magic != GS_GUARD_REGION_MAGIC || version != GS_GUARD_REGION_VERSION || size != sizeof(struct gs_guard_region)) {
        snprintf(why, whylen, "magic 0x%08x, version %u, size %u: not a version %u counters region", magic, version,
                 size, GS_GUARD_REGION_VERSION);
        return -1;
    }
    for (unsigned d = 0; d < GS_GUARD_MAX_DEVICES; d++) {
        size_t off = offsetof(struct gs_guard_region, dev) + d * sizeof(struct gs_guard_dev_counters) +
                     offsetof(struct gs_guard_dev_counters, used);
        memcpy(&used[d], buf + off, sizeof(used[d]));
        if (used[d] > COUNTER_MAX) {
            snprintf(why, whylen, "device %u counts %llu bytes", d, (unsigned long long)used[d]);
            return -1;
        }
    }
    return 1;
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

/* One device an allocation was allocated for (the first "RESOURCE\tID" line of its devices
 * record), for the pod attribution; "" when unreadable. */
static void first_device(const char *dir, char resource[GS_RESOURCE_NAME_MAX], char device[GS_DEVICE_ID_MAX]) {
    char path[PATH_MAX];
    _cleanup_free_ char *devices = NULL;
    resource[0] = device[0] = '\0';
    if (snprintf(path, sizeof(path), "%s/" GS_GUARD_DIR_DEVICES, dir) >= (int)sizeof(path) ||
        gs_read_file_ex(path, 1 << 16, GS_READ_NOFOLLOW, &devices, NULL, NULL, 0) < 0)
        return;
    char *tab = strchr(devices, '\t'), *nl = tab ? strchr(tab, '\n') : NULL;
    if (tab && (size_t)(tab - devices) < GS_RESOURCE_NAME_MAX) {
        memcpy(resource, devices, (size_t)(tab - devices));
        resource[tab - devices] = '\0';
        size_t dl = nl ? (size_t)(nl - tab - 1) : strlen(tab + 1);
        if (dl < GS_DEVICE_ID_MAX) {
            memcpy(device, tab + 1, dl);
            device[dl] = 0;
        }
    }
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
        gs_read_file_ex(path, GS_GUARD_LIMITS_MAX, GS_READ_NOFOLLOW, &text, &text_len, NULL, 0) < 0)
        return;
    if (gs_guard_limits_parse(path, text, text_len, &l, err, sizeof(err)) < 0) {
        log_debug("Guard reconcile: %s", err);
        return;
    }
    char resource[GS_RESOURCE_NAME_MAX], device[GS_DEVICE_ID_MAX];
    first_device(dir, resource, device);
    struct stat st;
    uint64_t used[GS_GUARD_MAX_DEVICES];
    char why[160];
    if (snprintf(path, sizeof(path), "%s/" GS_GUARD_DIR_REGION, dir) >= (int)sizeof(path))
        return;
    int rr = read_region(path, &st, used, why, sizeof(why));
    if (rr < 0) {
        report_damaged(name, path, why);
        return;
    }
    if (rr == 0) {
        int i = damaged_find(name);
        if (i >= 0)
            damaged[i].seen = true;
        return; /* no process of the container has used CUDA yet */
    }
    report_usable(name);
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
        *u = (struct gs_guard_usage){ .limit = dl->vram, .counted = used[dl->ordinal] };
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
}

void guard_reconcile(const char *guard_root, const char *proc_root, const struct gs_inventory *inv,
                     const struct gs_guard_usage *prev, size_t n_prev, struct gs_guard_usage *out, size_t max,
                     size_t *n) {
    *n = 0;
    for (unsigned i = 0; i < n_damaged; i++)
        damaged[i].seen = false;
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
    for (unsigned i = n_damaged; i-- > 0;) /* gone (or left unread): forgotten */
        if (!damaged[i].seen)
            damaged[i] = damaged[--n_damaged];
}

/* A guarded allocation's counters region, by device and inode, and the device it was allocated for. */
#define MAX_REGIONS 256
struct region_id {
    unsigned long long dev, ino;
    char resource[GS_RESOURCE_NAME_MAX], device[GS_DEVICE_ID_MAX];
};

void guard_region_owners(const char *guard_root, const char *proc_root, struct gs_util_owner *owners, size_t n) {
    DIR *d = n ? opendir(guard_root) : NULL;
    if (!d)
        return;
    struct region_id *r = calloc(MAX_REGIONS, sizeof(*r));
    size_t nr = 0;
    struct dirent *e;
    while (r && (e = readdir(d)) && nr < MAX_REGIONS) {
        char dir[PATH_MAX], path[PATH_MAX + 16];
        if (e->d_name[0] != 'a' || snprintf(dir, sizeof(dir), "%s/%s", guard_root, e->d_name) >= (int)sizeof(dir))
            continue;
        snprintf(path, sizeof(path), "%s/" GS_GUARD_DIR_REGION, dir);
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
            continue;
        first_device(dir, r[nr].resource, r[nr].device);
        if (!r[nr].device[0])
            continue;
        r[nr].dev = st.st_dev;
        r[nr].ino = st.st_ino;
        nr++;
    }
    closedir(d);
    for (size_t i = 0; i < n && nr; i++) {
        char path[PATH_MAX];
        _cleanup_free_ char *text = NULL;
        if (snprintf(path, sizeof(path), "%s/%u/maps", proc_root, owners[i].pid) >= (int)sizeof(path) ||
            gs_read_file(path, 16 << 20, &text, NULL) < 0)
            continue;
        for (size_t k = 0; k < nr; k++) {
            if (gs_maps_has_file(text, major(r[k].dev), minor(r[k].dev), r[k].ino)) {
                gs_strlcpy(owners[i].resource, r[k].resource, sizeof(owners[i].resource));
                gs_strlcpy(owners[i].device, r[k].device, sizeof(owners[i].device));
                break;
            }
        }
    }
    free(r);
}
