/* labels.c: node labels from a plan, under gpuslice.io/ (GPU Feature Discovery's names with
 * nvidia.com/ replaced), and GFD's own names too with gpuslice.labels.nvidiaNames. The labels are
 * built under GFD's names, then renamed when written. */
#include "core/labels.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LABELS 512
#define KEY_MAX 128
#define VALUE_MAX 64 /* Kubernetes: 63 characters */

struct label {
    char key[KEY_MAX];
    char value[VALUE_MAX];
};

struct labels {
    unsigned n, cap;
    struct label *l;
};

/* A Kubernetes label value: [A-Za-z0-9._-], at most 63, alphanumeric at both ends; other
 * characters (spaces in NVML names) become '-'. */
static void sanitize(const char *in, char *out) {
    size_t n = 0;
    for (const char *p = in; *p && n < VALUE_MAX - 1; p++) {
        unsigned char c = (unsigned char)*p;
        out[n++] = (char)(isalnum(c) || c == '.' || c == '_' || c == '-' ? c : '-');
    }
    out[n] = '\0';
    size_t start = 0;
    while (out[start] && !isalnum((unsigned char)out[start]))
        start++;
    memmove(out, out + start, strlen(out + start) + 1);
    for (n = strlen(out); n && !isalnum((unsigned char)out[n - 1]); n--)
        out[n - 1] = '\0';
}

static void add(struct labels *ls, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add(struct labels *ls, const char *key, const char *fmt, ...) {
    if (ls->n == ls->cap)
        return;
    char raw[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof(raw), fmt, ap);
    va_end(ap);
    struct label *l = NULL;
    for (unsigned i = 0; i < ls->n && !l; i++)
        if (!strcmp(ls->l[i].key, key))
            l = &ls->l[i]; /* the first writer of a key wins */
    if (l)
        return;
    l = &ls->l[ls->n++];
    snprintf(l->key, sizeof(l->key), "%s", key);
    sanitize(raw, l->value);
}

static void addf(struct labels *ls, const char *prefix, const char *suffix, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void addf(struct labels *ls, const char *prefix, const char *suffix, const char *fmt, ...) {
    char key[KEY_MAX], raw[256];
    snprintf(key, sizeof(key), "%s.%s", prefix, suffix);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof(raw), fmt, ap);
    va_end(ap);
    add(ls, key, "%s", raw);
}

/* GFD's family names: the architecture's, except "ada-lovelace" and "undefined". */
static const char *family(unsigned arch) {
    const char *name = gs_arch_name(arch);
    return !strcmp(name, "ada") ? "ada-lovelace" : !strcmp(name, "unknown") ? "undefined" : name;
}

static const struct gs_mig_device *mig_device(const struct gs_gpu *g, const char *uuid) {
    for (unsigned i = 0; i < g->n_mig; i++)
        if (!strcmp(g->mig[i].uuid, uuid))
            return &g->mig[i];
    return NULL;
}

/* <resource>.count, .replicas, .sharing-strategy, .product, .memory, .family, .compute.* and, for
 * MIG devices, .multiprocessors and .slices.{gi,ci}. The first device describes the resource. */
static void resource_labels(struct labels *ls, const struct gs_inventory *inv, const struct gs_plan *plan,
                            const struct gs_resource *r) {
    if (!r->n_devices)
        return;
    const struct gs_device *d0 = &r->devices[0];
    if (d0->gpu >= inv->n_gpus)
        return;
    const struct gs_gpu *g = &inv->gpus[d0->gpu];
    /* count: the physical devices (GPUs, or MIG instances for MPS on MIG) behind the replicas */
    unsigned count = 0;
    for (unsigned i = 0; i < r->n_devices; i++) {
        const struct gs_device *d = &r->devices[i];
        bool first = true;
        for (unsigned k = 0; k < i && first && (d->kind == GS_DEV_REPLICA || d->kind == GS_DEV_MPS); k++)
            first = strcmp(r->devices[k].uuid, d->uuid) != 0;
        count += first;
    }
    bool replica = d0->kind == GS_DEV_REPLICA || d0->kind == GS_DEV_MPS;
    unsigned replicas = replica && d0->gpu < plan->n_gpus ? plan->gpus[d0->gpu].replicas : 1;
    addf(ls, r->name, "count", "%u", count);
    addf(ls, r->name, "replicas", "%u", replicas);
    addf(ls, r->name, "sharing-strategy", "%s", r->mps ? "mps" : r->replicated ? "time-slicing" : "none");
    addf(ls, r->name, "family", "%s", family(g->arch));
    addf(ls, r->name, "compute.major", "%d", g->cc_major);
    addf(ls, r->name, "compute.minor", "%d", g->cc_minor);
    const struct gs_mig_device *m = d0->kind == GS_DEV_MIG ? mig_device(g, d0->uuid) : NULL;
    if (m) {
        addf(ls, r->name, "product", "%s-MIG-%s", g->name, m->profile);
        addf(ls, r->name, "memory", "%llu", m->mem_mib);
        addf(ls, r->name, "multiprocessors", "%u", m->sm);
        addf(ls, r->name, "slices.gi", "%u", m->gi_slices);
        addf(ls, r->name, "slices.ci", "%u", m->ci_slices);
    } else {
        /* GFD appends -SHARED when replicas keep the plain resource name */
        bool shared = r->replicated && !strcmp(r->name, "nvidia.com/gpu");
        addf(ls, r->name, "product", "%s%s", g->name, shared ? "-SHARED" : "");
        addf(ls, r->name, "memory", "%llu", g->mem_total >> 20);
    }
}

#define NVIDIA_PREFIX "nvidia.com/"
#define OUR_PREFIX "gpuslice.io/"

/* The labels as written: each nvidia.com/ key under gpuslice.io/, and with nvidia_names also as
 * it is, except nvidia.com/mig.config*, the label NVIDIA's MIG manager acts on, which gpuslice
 * never writes; other keys (resources of another domain) as they are. */
static void rename_labels(const struct labels *in, struct labels *out, bool nvidia_names) {
    for (unsigned i = 0; i < in->n; i++) {
        const struct label *l = &in->l[i];
        size_t np = strlen(NVIDIA_PREFIX);
        if (strncmp(l->key, NVIDIA_PREFIX, np)) {
            add(out, l->key, "%s", l->value);
            continue;
        }
        char key[KEY_MAX];
        snprintf(key, sizeof(key), "%s%.*s", OUR_PREFIX, KEY_MAX - (int)sizeof(OUR_PREFIX), l->key + np);
        add(out, key, "%s", l->value);
        if (nvidia_names && strncmp(l->key + np, "mig.config", 10))
            add(out, l->key, "%s", l->value);
    }
}

static int cmp_label(const void *a, const void *b) {
    return strcmp(((const struct label *)a)->key, ((const struct label *)b)->key);
}

int gs_labels_format(const struct gs_inventory *inv, const struct gs_policy *policy, const struct gs_plan *plan,
                     const char *mig_state, char *buf, size_t len) {
    struct labels ls = { 0, MAX_LABELS, calloc(MAX_LABELS, sizeof(struct label)) };
    if (!ls.l)
        return -ENOMEM;
    for (unsigned i = 0; i < plan->n_resources; i++)
        resource_labels(&ls, inv, plan, &plan->resources[i]);

    bool mig_capable = false;
    for (unsigned i = 0; i < inv->n_gpus; i++)
        mig_capable |= inv->gpus[i].mig_capable;
    add(&ls, "nvidia.com/mig.capable", "%s", mig_capable ? "true" : "false");
    static const char *const strategies[] = { [GS_MIG_NONE] = "none", [GS_MIG_SINGLE] = "single",
                                              [GS_MIG_MIXED] = "mixed" };
    add(&ls, "nvidia.com/mig.strategy", "%s", strategies[policy->mig_strategy]);
    bool mps = false;
    for (unsigned i = 0; i < plan->n_resources; i++)
        mps |= plan->resources[i].mps;
    add(&ls, "nvidia.com/mps.capable", "%s", mps ? "true" : "false");
    if (policy->mig_config[0]) {
        add(&ls, "nvidia.com/mig.config", "%s", policy->mig_config);
        /* mig-parted's vocabulary: success | pending | failed */
        if (mig_state)
            add(&ls, "nvidia.com/mig.config.state", "%s", !strcmp(mig_state, "applied") ? "success" : mig_state);
    }
    unsigned major, minor, rev;
    int fields = sscanf(inv->driver_version, "%u.%u.%u", &major, &minor, &rev);
    if (fields >= 2) {
        add(&ls, "nvidia.com/cuda.driver-version.major", "%u", major);
        add(&ls, "nvidia.com/cuda.driver-version.minor", "%u", minor);
        add(&ls, "nvidia.com/cuda.driver-version.revision", "%02u", fields == 3 ? rev : 0);
        add(&ls, "nvidia.com/cuda.driver-version.full", "%s", inv->driver_version);
    }
    if (inv->cuda_driver_version > 0) {
        int cmaj = inv->cuda_driver_version / 1000, cmin = inv->cuda_driver_version % 1000 / 10;
        add(&ls, "nvidia.com/cuda.runtime-version.major", "%d", cmaj);
        add(&ls, "nvidia.com/cuda.runtime-version.minor", "%d", cmin);
        add(&ls, "nvidia.com/cuda.runtime-version.full", "%d.%d", cmaj, cmin);
    }

    struct labels out = { 0, 2 * MAX_LABELS, calloc(2 * MAX_LABELS, sizeof(struct label)) };
    if (!out.l) {
        free(ls.l);
        return -ENOMEM;
    }
    rename_labels(&ls, &out, policy->labels_nvidia_names);
    free(ls.l);
    qsort(out.l, out.n, sizeof(*out.l), cmp_label);
    size_t off = 0;
    int rc = 0;
    for (unsigned i = 0; i < out.n; i++) {
        int w = snprintf(buf + off, len - off, "%s=%s\n", out.l[i].key, out.l[i].value);
        if (w < 0 || (size_t)w >= len - off) {
            rc = -ENOSPC;
            break;
        }
        off += (size_t)w;
    }
    free(out.l);
    return rc < 0 ? rc : (int)off;
}
