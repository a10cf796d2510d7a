/* migdemand.c: MIG instances made at prepare, destroyed at unprepare (see migdemand.h). */
#include "dra/migdemand.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cdi/cdi.h"
#include "cdi/nodespec.h"
#include "gpu/gpu.h"
#include "util/log.h"
#include "util/util.h"

/* ---- pure steps ------------------------------------------------------------------------------ */

int dra_mig_first(const struct gs_gpu *g, unsigned profile_id, unsigned start, struct dra_mig_made *rec,
                  const struct gs_mig_device **existing, char *err, size_t errlen) {
    *existing = NULL;
    if (!g->mig_current) {
        snprintf(err, errlen, "GPU %u is not in MIG mode", g->index);
        return -ENODEV;
    }
    const struct gs_gi_profile *p = gs_gpu_profile_by_id(g, profile_id);
    bool placed = false;
    for (unsigned i = 0; p && i < p->n_starts; i++)
        placed |= p->starts[i] == start;
    if (!placed) {
        snprintf(err, errlen, "GPU %u has no placement of GI profile %u at memory slice %u", g->index, profile_id, start);
        return -EINVAL;
    }
    for (unsigned i = 0; i < g->n_mig; i++) {
        const struct gs_mig_device *m = &g->mig[i];
        if (m->gi_profile_id == profile_id && m->start == start && m->ci_slices == m->gi_slices) {
            *existing = m;
            return 1;
        }
    }
    for (unsigned i = 0; i < g->n_gis; i++) {
        const struct gs_gpu_instance *gi = &g->gis[i];
        if (gi->start < start + p->placement_size && start < gi->start + gi->size) {
            snprintf(err, errlen, "GPU %u: GPU instance %u (profile %u at %u, size %u) covers the placement %s at %u",
                     g->index, gi->id, gi->profile_id, gi->start, gi->size, p->name, start);
            return -EBUSY;
        }
    }
    memset(rec, 0, sizeof(*rec));
    rec->on = true;
    rec->gpu = g->index;
    rec->profile_id = profile_id;
    rec->start = start;
    rec->gi = rec->ci = -1;
    return 0;
}

enum dra_mig_next dra_mig_next(const struct gs_gpu *g, struct dra_mig_made *rec) {
    const struct gs_gpu_instance *gi = NULL;
    for (unsigned i = 0; i < g->n_gis && !gi; i++) {
        const struct gs_gpu_instance *x = &g->gis[i];
        if (x->profile_id == rec->profile_id && x->start == rec->start && (rec->gi < 0 || (unsigned)rec->gi == x->id))
            gi = x;
    }
    if (!gi) {
        rec->gi = rec->ci = -1; /* not made yet, or gone (a GPU reset): made again */
        rec->uuid[0] = '\0';
        return DRA_MIG_MAKE_GI;
    }
    rec->gi = (int)gi->id;
    for (unsigned i = 0; i < g->n_mig; i++) {
        const struct gs_mig_device *m = &g->mig[i];
        if (m->gi_id == gi->id && m->ci_slices == m->gi_slices) {
            rec->ci = (int)m->ci_id;
            gs_strlcpy(rec->uuid, m->uuid, sizeof(rec->uuid));
            return DRA_MIG_READY;
        }
    }
    rec->ci = -1;
    return DRA_MIG_MAKE_CI;
}

/* ---- on the node ----------------------------------------------------------------------------- */

/* Test hook (migdemand.h): exit abruptly after N steps. */
static void step_done(struct dra_mig *m) {
    const char *s = getenv("GPUSLICE_DRA_FAULT_EXIT_AFTER_STEPS");
    unsigned long long n;
    if (s && gs_parse_uint(s, 1, 1000000, &n) == 0 && ++m->steps >= n)
        _exit(99);
}

static int record_step(struct dra_mig *m, dra_mig_record_fn record, void *ctx, char *err, size_t errlen) {
    int r = record(ctx, err, errlen);
    if (r == 0)
        step_done(m);
    return r;
}

/* The GPU as NVML lists it now (malloc'ed inventory in *inv). */
static int read_gpu(struct dra_mig *m, unsigned gpu, struct gs_inventory **inv, const struct gs_gpu **g, char *err,
                    size_t errlen) {
    if (!m->lib[0]) {
        snprintf(err, errlen, "MIG on demand needs the NVML library, which the DRA driver was not given");
        return -ENOSYS;
    }
    int r;
    if (!m->node && (r = gpu_node_open(m->lib, &m->node, err, errlen)) < 0)
        return r;
    *inv = calloc(1, sizeof(**inv));
    if (!*inv)
        return -ENOMEM;
    if ((r = gpu_inventory_read(m->node, *inv)) < 0) {
        snprintf(err, errlen, "reading the GPUs: %s", gpu_node_error(m->node));
        return r;
    }
    for (unsigned i = 0; i < (*inv)->n_gpus; i++) {
        if ((*inv)->gpus[i].index == gpu) {
            *g = &(*inv)->gpus[i];
            return 0;
        }
    }
    snprintf(err, errlen, "GPU %u is not on this node", gpu);
    return -ENODEV;
}

static int nvml_failed(struct dra_mig *m, int r, const char *what, char *err, size_t errlen) {
    snprintf(err, errlen, "%s: %s", what, gpu_node_error(m->node));
    return r;
}

/* The MIG device's nodes: its GPU's and its GI's and CI's capabilities (as the node spec has them). */
static int add_nodes(struct dra_mig *m, const struct gs_gpu *g, unsigned gi, unsigned ci, struct dra_edits *e,
                     char *err, size_t errlen) {
    char path[PATH_MAX + 16], *text = NULL;
    struct gs_dev_majors maj;
    snprintf(path, sizeof(path), "%s/devices", m->proc_root);
    int r = gs_read_file_ex(path, 1 << 20, 0, &text, NULL, err, errlen);
    if (r == 0)
        r = gs_proc_devices_parse(path, text, &maj, err, errlen);
    free(text);
    if (r < 0)
        return r;
    struct gs_mig_minors mm = { 0 };
    if ((r = gs_cdi_read_mig_minors(m->proc_root, &mm, err, errlen)) < 0)
        return r;
    int cap_gi = gs_mig_minor_lookup(&mm, g->minor, gi, -1), cap_ci = gs_mig_minor_lookup(&mm, g->minor, gi, (int)ci);
    gs_mig_minors_free(&mm);
    if (maj.caps < 0 || cap_gi < 0 || cap_ci < 0 || e->n_nodes + 3 > DRA_MAX_NODES) {
        snprintf(err, errlen, "GPU %u, GI %u, CI %u: %s", g->index, gi, ci,
                 maj.caps < 0 ? "no nvidia-caps character device in /proc/devices"
                              : e->n_nodes + 3 > DRA_MAX_NODES ? "too many MIG devices in one claim"
                                                               : "its capability minors are not in mig-minors");
        return -ENODEV;
    }
    const int minors[3] = { (int)g->minor, cap_gi, cap_ci }, majors[3] = { maj.nvidia, maj.caps, maj.caps };
    for (int i = 0; i < 3; i++) {
        if (i == 0)
            snprintf(e->nodes[e->n_nodes].path, sizeof(e->nodes[0].path), "/dev/nvidia%u", g->minor);
        else
            snprintf(e->nodes[e->n_nodes].path, sizeof(e->nodes[0].path), "/dev/nvidia-caps/nvidia-cap%d", minors[i]);
        e->nodes[e->n_nodes].major = majors[i];
        e->nodes[e->n_nodes].minor = minors[i];
        e->n_nodes++;
    }
    return 0;
}

int dra_mig_prepare(struct dra_mig *m, unsigned gpu, unsigned profile_id, unsigned start, struct dra_mig_made *rec,
                    dra_mig_record_fn record, void *ctx, struct dra_edits *e, char *err, size_t errlen) {
    struct gs_inventory *inv = NULL;
    const struct gs_gpu *g = NULL;
    int r = read_gpu(m, gpu, &inv, &g, err, errlen);
    if (r < 0)
        goto out;
    if (!rec->on || rec->gpu != gpu || rec->profile_id != profile_id || rec->start != start) {
        const struct gs_mig_device *existing;
        r = dra_mig_first(g, profile_id, start, rec, &existing, err, errlen);
        if (r < 0)
            goto out;
        if (r == 1) { /* there before: used as it is, never destroyed by this claim */
            memset(rec, 0, sizeof(*rec));
            rec->gpu = gpu, rec->profile_id = profile_id, rec->start = start;
            rec->gi = (int)existing->gi_id, rec->ci = (int)existing->ci_id;
            gs_strlcpy(rec->uuid, existing->uuid, sizeof(rec->uuid));
            r = add_nodes(m, g, existing->gi_id, existing->ci_id, e, err, errlen);
            goto out;
        }
        if ((r = record_step(m, record, ctx, err, errlen)) < 0) /* the intent, before any change */
            goto out;
    }
    for (;;) {
        enum dra_mig_next next = dra_mig_next(g, rec);
        if (next == DRA_MIG_READY)
            break;
        char what[128];
        if (next == DRA_MIG_MAKE_GI) {
            unsigned id;
            snprintf(what, sizeof(what), "GPU %u: creating GI profile %u at %u", gpu, profile_id, start);
            if ((r = gpu_gi_create(m->node, gpu, profile_id, start, &id)) < 0) {
                nvml_failed(m, r, what, err, errlen);
                goto out;
            }
            step_done(m);
            rec->gi = (int)id;
            log_info("DRA: GPU %u: created GPU instance %u (profile %u at %u)", gpu, id, profile_id, start);
        } else {
            unsigned ci;
            snprintf(what, sizeof(what), "GPU %u: creating the compute instance of GI %d", gpu, rec->gi);
            if ((r = gpu_ci_create_full(m->node, gpu, (unsigned)rec->gi, &ci, rec->uuid, sizeof(rec->uuid))) < 0) {
                nvml_failed(m, r, what, err, errlen);
                goto out;
            }
            step_done(m);
            rec->ci = (int)ci;
            log_info("DRA: GPU %u: created compute instance %u in GI %d: %s", gpu, ci, rec->gi, rec->uuid);
        }
        if ((r = record_step(m, record, ctx, err, errlen)) < 0)
            goto out;
        free(inv);
        inv = NULL;
        if ((r = read_gpu(m, gpu, &inv, &g, err, errlen)) < 0)
            goto out;
    }
    r = add_nodes(m, g, (unsigned)rec->gi, (unsigned)rec->ci, e, err, errlen);
out:
    free(inv);
    return r;
}

int dra_mig_release(struct dra_mig *m, struct dra_mig_made *rec, dra_mig_record_fn record, void *ctx, char *err,
                    size_t errlen) {
    if (!rec->on)
        return 0;
    struct gs_inventory *inv = NULL;
    const struct gs_gpu *g = NULL;
    int r = read_gpu(m, rec->gpu, &inv, &g, err, errlen);
    while (r == 0) {
        enum dra_mig_next next = dra_mig_next(g, rec);
        if (next == DRA_MIG_MAKE_GI)
            break; /* nothing of it is left */
        for (unsigned i = 0; i < g->n_procs; i++) {
            if (g->procs[i].gi_id == rec->gi) {
                snprintf(err, errlen, "GPU %u: process %u still runs on GPU instance %d: not destroyed yet", rec->gpu,
                         g->procs[i].pid, rec->gi);
                r = -EBUSY;
                goto out;
            }
        }
        char what[128];
        if (next == DRA_MIG_READY) {
            snprintf(what, sizeof(what), "GPU %u: destroying compute instance %d of GI %d", rec->gpu, rec->ci, rec->gi);
            if ((r = gpu_ci_destroy(m->node, rec->gpu, (unsigned)rec->gi, (unsigned)rec->ci)) < 0)
                goto failed;
            log_info("DRA: GPU %u: destroyed compute instance %d of GI %d (%s)", rec->gpu, rec->ci, rec->gi, rec->uuid);
        } else {
            snprintf(what, sizeof(what), "GPU %u: destroying GPU instance %d", rec->gpu, rec->gi);
            if ((r = gpu_gi_destroy(m->node, rec->gpu, (unsigned)rec->gi)) < 0)
                goto failed;
            log_info("DRA: GPU %u: destroyed GPU instance %d", rec->gpu, rec->gi);
        }
        step_done(m);
        free(inv);
        inv = NULL;
        r = read_gpu(m, rec->gpu, &inv, &g, err, errlen);
        continue;
    failed:
        nvml_failed(m, r, what, err, errlen);
        goto out;
    }
    if (r == 0) {
        rec->on = false;
        r = record_step(m, record, ctx, err, errlen);
    }
out:
    free(inv);
    return r;
}

void dra_mig_close(struct dra_mig *m) {
    if (m->node)
        gpu_node_close(m->node);
    m->node = NULL;
}
