/* guard_layout.c: the pure half of guard_layout.h: paths in a guard directory, limits from rows. */
#include "guard_layout.h"

#include <errno.h>
#include <string.h>

int gs_guard_path(const char *dir, const char *name, char *buf, size_t len) {
    size_t d = strlen(dir), n = strlen(name);
    if (len == 0)
        return -ENAMETOOLONG;
    if (d + 1 + n >= len) {
        buf[0] = '\0';
        return -ENAMETOOLONG;
    }
    memcpy(buf, dir, d);
    buf[d] = '/';
    memcpy(buf + d + 1, name, n + 1);
    return 0;
}

static int copy(char *dst, size_t size, const char *src) {
    size_t n = src ? strlen(src) : 0;
    if (n >= size)
        return -ENAMETOOLONG;
    if (n)
        memcpy(dst, src, n);
    dst[n] = '\0';
    return 0;
}

int gs_guard_limits_build(const struct gs_guard_row *rows, unsigned n, const char *region,
                          struct gs_guard_limits *out) {
    if (n > GS_GUARD_MAX_DEVICES)
        return -E2BIG;
    struct gs_guard_limits l;
    memset(&l, 0, sizeof(l));
    l.fail_closed = true;
    if (copy(l.region, sizeof(l.region), region) < 0)
        return -ENAMETOOLONG;
    /* Each CUDA context's memory counts: the estimate for the GPU's architecture, the largest of
     * them when the container sees GPUs of several (the limits file has one figure). */
    l.context_overhead = n ? 0 : gs_guard_context_overhead_default(NULL);
    for (unsigned i = 0; i < n; i++) {
        uint64_t o = gs_guard_context_overhead_default(rows[i].arch);
        if (o > l.context_overhead)
            l.context_overhead = o;
        struct gs_guard_device_limit *d = &l.dev[l.n_devices++];
        d->ordinal = rows[i].ordinal;
        d->vram = rows[i].bytes;
        d->compute_pct = rows[i].compute_pct;
        if (copy(d->uuid, sizeof(d->uuid), rows[i].uuid) < 0)
            return -ENAMETOOLONG;
    }
    *out = l;
    return 0;
}
