/* slices.c: the node's ResourceSlices (resource.k8s.io/v1 of Kubernetes 1.36) from the inventory
 * and the policy. Pure: no I/O. What each device says is in docs/dra.md; the limits it keeps are
 * the API server's (k8s.io/api/resource/v1 and its validation):
 *   - at most 128 devices a slice, 64 when one of them consumes counters or has taints;
 *   - sharedCounters and devices never in one slice; at most 8 counter sets a slice, 32 counters
 *     a set; a device consumes from at most 2 sets;
 *   - device names and counter names are DNS labels; attribute and capacity names C identifiers
 *     (at most 32 characters), at most 32 of them a device; string and version values at most
 *     64 characters, versions semver 2.0.0 (no leading zeros: driver "570.172.08" is 570.172.8);
 *   - a capacity's requestPolicy.validRange: default and max multiples of step from min, min +
 *     step at most the capacity. */
#include "dra/slices.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/plan.h"
#include "util/quantity.h"
#include "util/util.h"

#define DNS1123_SUBDOMAIN_MAX 253
#define DRIVER_NAME_MAX 63
#define ATTR_VALUE_MAX 64
#define COUNTERS_PER_SET_MAX 32
#define MPS_CLIENTS GS_MPS_MAX_REPLICAS
#define PCI_BUS_ID_ATTR "resource.kubernetes.io/pciBusID"

struct builder {
    const struct gs_inventory *inv;
    const struct gs_policy *pol;
    const struct gs_plan *plan;
    json_t *devices;      /* every device, in GPU order */
    json_t *counter_sets; /* every counter set */
    char *err;
    size_t errlen;
};

static int fail(struct builder *b, int r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct builder *b, int r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (b->errlen)
        vsnprintf(b->err, b->errlen, fmt, ap);
    va_end(ap);
    return r;
}

/* ------------------------------------------------------------------ values */

/* A Kubernetes quantity of bytes, with the largest binary suffix that divides it exactly. */
static json_t *bytes_json(unsigned long long v) {
    char q[32];
    gs_quantity_format(v > INT64_MAX ? INT64_MAX : (int64_t)v, 0, GS_QTY_BINARY, q, sizeof(q));
    return json_string(q);
}

static json_t *count_json(unsigned long long v) {
    char q[32];
    snprintf(q, sizeof(q), "%llu", v);
    return json_string(q);
}

/* "580.65.06" -> "580.65.6", "13.0" -> "13.0.0": up to three numeric fields, semver 2.0.0's
 * MAJOR.MINOR.PATCH without leading zeros. Returns 0 or -EINVAL (not numeric fields). */
static int semver_of(const char *in, char *out, size_t len) {
    unsigned long long part[3] = { 0, 0, 0 };
    unsigned n = 0;
    const char *p = in;
    while (*p) {
        if (n == 3 || *p < '0' || *p > '9')
            return -EINVAL;
        unsigned long long v = 0;
        while (*p >= '0' && *p <= '9') {
            if (v > 100000000ULL)
                return -EINVAL;
            v = v * 10 + (unsigned)(*p++ - '0');
        }
        part[n++] = v;
        if (*p == '.' && p[1])
            p++;
        else if (*p)
            return -EINVAL;
    }
    if (!n)
        return -EINVAL;
    snprintf(out, len, "%llu.%llu.%llu", part[0], part[1], part[2]);
    return 0;
}

/* NVML's "00000000:18:00.0" as the extended BDF Kubernetes' pciBusID attribute takes,
 * "0000:18:00.0" (lower case, 4-digit domain). Returns 0 or -EINVAL. */
static int pci_bdf(const char *nvml, char *out, size_t len) {
    unsigned long dom;
    unsigned bus, dev, fn;
    char tail;
    if (sscanf(nvml, "%lx:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) != 4 || dom > 0xffff || bus > 0xff ||
        dev > 0x1f || fn > 7)
        return -EINVAL;
    snprintf(out, len, "%04lx:%02x:%02x.%x", dom, bus, dev, fn);
    return 0;
}

/* NVIDIA's driver names architectures as go-nvlib does ("Hopper", "Ada Lovelace"). */
static const char *arch_title(unsigned arch) {
    switch (arch) {
    case 2: return "Kepler";
    case 3: return "Maxwell";
    case 4: return "Pascal";
    case 5: return "Volta";
    case 6: return "Turing";
    case 7: return "Ampere";
    case 8: return "Ada Lovelace";
    case 9: return "Hopper";
    case 10: return "Blackwell";
    case 13: return "Rubin";
    default: return "Unknown";
    }
}

static bool dns_label_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* A DNS-1123 subdomain (node names, slice names, the driver): lower-case labels of [a-z0-9-]
 * separated by dots, each starting and ending alphanumeric. */
static bool dns_subdomain(const char *s, size_t max) {
    size_t n = strlen(s);
    if (!n || n > max)
        return false;
    for (size_t i = 0; i < n; i++) {
        bool edge = i == 0 || i + 1 == n || s[i - 1] == '.' || s[i + 1] == '.';
        if (dns_label_char(s[i]) || (s[i] == '-' && !edge) || (s[i] == '.' && !edge))
            continue;
        return false;
    }
    return true;
}

/* The profile part of a device name, as NVIDIA's driver writes it: "3g.40gb" -> "3g40gb",
 * "1g.10gb+me" -> "1g10gb-me". */
static void profile_label(const char *profile, char *out, size_t len) {
    size_t n = 0;
    for (const char *p = profile; *p && n + 1 < len; p++) {
        char c = *p >= 'A' && *p <= 'Z' ? (char)(*p - 'A' + 'a') : *p;
        if (dns_label_char(c))
            out[n++] = c;
        else if (c != '.' && n && out[n - 1] != '-')
            out[n++] = '-';
    }
    while (n && out[n - 1] == '-')
        n--;
    out[n] = 0;
}

/* ------------------------------------------------------------------ attributes */

static int set_attr(struct builder *b, json_t *attrs, const char *dev, const char *name, const char *kind,
                    json_t *value) {
    if (!value)
        return -ENOMEM;
    if (json_is_string(value) && strlen(json_string_value(value)) > ATTR_VALUE_MAX) {
        int r = fail(b, -EINVAL, "device %s: attribute %s: '%s' is longer than %d characters", dev, name,
                     json_string_value(value), ATTR_VALUE_MAX);
        json_decref(value);
        return r;
    }
    json_t *a = json_pack("{s:o}", kind, value); /* jansson's _new and "o" take the reference, failing too */
    return a && json_object_set_new(attrs, name, a) == 0 ? 0 : -ENOMEM;
}

static int attr_str(struct builder *b, json_t *attrs, const char *dev, const char *name, const char *v) {
    return set_attr(b, attrs, dev, name, "string", json_string(v));
}

static int attr_int(struct builder *b, json_t *attrs, const char *dev, const char *name, long long v) {
    return set_attr(b, attrs, dev, name, "int", json_integer(v));
}

static int attr_bool(struct builder *b, json_t *attrs, const char *dev, const char *name, bool v) {
    return set_attr(b, attrs, dev, name, "bool", json_boolean(v));
}

static int attr_version(struct builder *b, json_t *attrs, const char *dev, const char *name, const char *v) {
    return set_attr(b, attrs, dev, name, "version", json_string(v));
}

static const char *sharing_name(enum gs_dev_kind kind) {
    return kind == GS_DEV_MPS ? "mps" : kind == GS_DEV_REPLICA ? "time-slicing" : "exclusive";
}

/* What every device of GPU g says about its GPU (NVIDIA's names: productName, architecture,
 * cudaComputeCapability, driverVersion, cudaDriverVersion, the standard pciBusID). */
static int gpu_common_attrs(struct builder *b, json_t *attrs, const char *dev, const struct gs_gpu *g) {
    char v[64];
    int r = attr_str(b, attrs, dev, "productName", g->name);
    if (!r)
        r = attr_str(b, attrs, dev, "architecture", arch_title(g->arch));
    if (!r && g->cc_major >= 0 && g->cc_minor >= 0) {
        snprintf(v, sizeof(v), "%d.%d.0", g->cc_major, g->cc_minor);
        r = attr_version(b, attrs, dev, "cudaComputeCapability", v);
    }
    if (!r && semver_of(b->inv->driver_version, v, sizeof(v)) == 0)
        r = attr_version(b, attrs, dev, "driverVersion", v);
    if (!r && b->inv->cuda_driver_version > 0) {
        snprintf(v, sizeof(v), "%d.%d.0", b->inv->cuda_driver_version / 1000, b->inv->cuda_driver_version % 1000 / 10);
        r = attr_version(b, attrs, dev, "cudaDriverVersion", v);
    }
    if (!r && pci_bdf(g->bus_id, v, sizeof(v)) == 0)
        r = attr_str(b, attrs, dev, PCI_BUS_ID_ATTR, v);
    if (!r && g->numa_node >= 0)
        r = attr_int(b, attrs, dev, "numaNode", g->numa_node);
    return r;
}

/* ------------------------------------------------------------------ capacities */

static int set_capacity(json_t *caps, const char *name, json_t *value, json_t *policy) {
    json_t *c = json_pack("{s:o, s:o*}", "value", value, "requestPolicy", policy);
    return c && json_object_set_new(caps, name, c) == 0 ? 0 : -ENOMEM;
}

/* requestPolicy {default, validRange {min, max, step}} (step omitted when 0). */
static json_t *range_policy(json_t *def, json_t *min, json_t *max, json_t *step) {
    return json_pack("{s:o, s:{s:o, s:o, s:o*}}", "default", def, "validRange", "min", min, "max", max, "step", step);
}

/* The consumable capacities of a shared device of mem bytes (a GPU or an existing MIG device),
 * from its plan device d (the replica count, the guard's quota, MPS's thread percentage):
 *   memory   the device's bytes; requests in GS_DRA_MEMORY_STEP steps from one step up to the
 *            device (rounded down); a claim that names no memory takes one replica's quota
 *            (memoryPerReplica, or memory / replicas), rounded down to a step;
 *   compute  100 (percent of the device); requests 1..100; a claim that names none takes one
 *            replica's share (MPS: computePerReplica; time-slicing: 100 / replicas);
 *   clients  MPS only: 48, a claim takes exactly one (an MPS server's client limit). */
static int shared_capacities(json_t *caps, unsigned long long mem, const struct gs_device *d, unsigned replicas) {
    const unsigned long long step = GS_DRA_MEMORY_STEP;
    unsigned long long quota = d->quota ? d->quota : mem / (replicas ? replicas : 1);
    unsigned long long max = mem / step * step, def = quota / step * step;
    if (def < step)
        def = step;
    if (def > max)
        def = max;
    json_t *mpol = NULL;
    if (mem >= 2 * step) { /* min + step must fit in the capacity: else requests are unconstrained */
        mpol = range_policy(bytes_json(def), bytes_json(step), bytes_json(max), bytes_json(step));
        if (!mpol)
            return -ENOMEM;
    }
    if (set_capacity(caps, "memory", bytes_json(mem), mpol) < 0)
        return -ENOMEM;
    unsigned pct = d->kind == GS_DEV_MPS ? d->mps_percent : 100 / (replicas ? replicas : 1);
    if (pct < 1)
        pct = 1;
    if (pct > 100)
        pct = 100;
    json_t *cpol = range_policy(count_json(pct), count_json(1), count_json(100), count_json(1));
    if (!cpol || set_capacity(caps, "compute", count_json(100), cpol) < 0)
        return -ENOMEM;
    if (d->kind == GS_DEV_MPS) {
        json_t *kpol = range_policy(count_json(1), count_json(1), count_json(1), NULL);
        if (!kpol || set_capacity(caps, "clients", count_json(MPS_CLIENTS), kpol) < 0)
            return -ENOMEM;
    }
    return 0;
}

/* ------------------------------------------------------------------ devices */

static json_t *new_device(const char *name, json_t **attrs, json_t **caps) {
    json_t *d = json_object();
    *attrs = json_object();
    *caps = json_object();
    if (!d || !*attrs || !*caps || json_object_set_new(d, "name", json_string(name)) < 0 ||
        json_object_set(d, "attributes", *attrs) < 0 || json_object_set(d, "capacity", *caps) < 0) {
        json_decref(d);
        json_decref(*attrs);
        json_decref(*caps);
        return NULL;
    }
    json_decref(*attrs); /* d holds them */
    json_decref(*caps);
    return d;
}

static int add_device(struct builder *b, json_t *d) {
    return json_array_append_new(b->devices, d) < 0 ? -ENOMEM : 0;
}

/* A GPU, whole (d->kind GS_DEV_WHOLE) or shared (a replica of it: the policy's sharing). */
static int gpu_device(struct builder *b, const struct gs_gpu *g, const struct gs_device *pd, unsigned replicas) {
    char name[GS_DRA_DEVICE_NAME_MAX];
    snprintf(name, sizeof(name), "gpu-%u", g->index);
    json_t *attrs, *caps, *d = new_device(name, &attrs, &caps);
    if (!d)
        return -ENOMEM;
    int r = attr_str(b, attrs, name, "type", "gpu");
    if (!r)
        r = attr_str(b, attrs, name, "sharing", sharing_name(pd->kind));
    if (!r)
        r = attr_str(b, attrs, name, "uuid", g->uuid);
    if (!r)
        r = attr_int(b, attrs, name, "index", g->index);
    if (!r)
        r = attr_int(b, attrs, name, "minor", g->minor);
    if (!r)
        r = attr_bool(b, attrs, name, "migCapable", g->mig_capable);
    if (!r)
        r = gpu_common_attrs(b, attrs, name, g);
    if (!r && pd->kind == GS_DEV_WHOLE)
        r = set_capacity(caps, "memory", bytes_json(g->mem_total), NULL);
    else if (!r) {
        r = shared_capacities(caps, g->mem_total, pd, replicas);
        if (!r && json_object_set_new(d, "allowMultipleAllocations", json_true()) < 0)
            r = -ENOMEM;
    }
    if (r < 0) {
        json_decref(d);
        return r;
    }
    return add_device(b, d);
}

/* Attributes of a MIG placement of GPU g (existing or on demand). */
static int mig_attrs(struct builder *b, json_t *attrs, const char *name, const struct gs_gpu *g, const char *profile,
                     unsigned start, unsigned size, bool on_demand, enum gs_dev_kind kind) {
    int r = attr_str(b, attrs, name, "type", "mig");
    if (!r)
        r = attr_str(b, attrs, name, "sharing", sharing_name(kind));
    if (!r)
        r = attr_str(b, attrs, name, "profile", profile);
    if (!r)
        r = attr_str(b, attrs, name, "parentUUID", g->uuid);
    if (!r)
        r = attr_int(b, attrs, name, "parentIndex", g->index);
    if (!r)
        r = attr_int(b, attrs, name, "parentMinor", g->minor);
    if (!r)
        r = attr_bool(b, attrs, name, "migOnDemand", on_demand);
    if (!r)
        r = attr_int(b, attrs, name, "placementStart", start);
    if (!r)
        r = attr_int(b, attrs, name, "placementSize", size);
    if (!r)
        r = gpu_common_attrs(b, attrs, name, g);
    return r;
}

static int mig_name(struct builder *b, char *out, size_t len, unsigned gpu, const char *profile, unsigned id,
                    unsigned start) {
    char label[GS_PROFILE_NAME_LEN + 16];
    profile_label(profile, label, sizeof(label));
    int n = snprintf(out, len, "gpu-%u-mig-%s-%u-%u", gpu, label, id, start);
    if (n < 0 || (size_t)n >= len || !label[0])
        return fail(b, -EINVAL, "GPU %u: MIG profile '%s' (ID %u, start %u) makes no device name of at most %zu "
                                "characters", gpu, profile, id, start, len - 1);
    return 0;
}

/* An existing MIG device (the plan's device pd, GS_DEV_MIG, or a replica of one when shared). */
static int mig_device(struct builder *b, const struct gs_gpu *g, const struct gs_mig_device *m,
                      const struct gs_device *pd, unsigned replicas) {
    char name[GS_DRA_DEVICE_NAME_MAX];
    int r = mig_name(b, name, sizeof(name), g->index, m->profile, m->gi_profile_id, m->start);
    if (r < 0)
        return r;
    json_t *attrs, *caps, *d = new_device(name, &attrs, &caps);
    if (!d)
        return -ENOMEM;
    r = mig_attrs(b, attrs, name, g, m->profile, m->start, m->size, false, pd->kind);
    if (!r)
        r = attr_str(b, attrs, name, "uuid", m->uuid);
    if (!r && pd->kind == GS_DEV_MIG)
        r = set_capacity(caps, "memory", bytes_json(m->mem_mib << 20), NULL);
    else if (!r) {
        r = shared_capacities(caps, m->mem_mib << 20, pd, replicas);
        if (!r && json_object_set_new(d, "allowMultipleAllocations", json_true()) < 0)
            r = -ENOMEM;
    }
    if (!r && set_capacity(caps, "multiprocessors", count_json(m->sm), NULL) < 0)
        r = -ENOMEM;
    if (r < 0) {
        json_decref(d);
        return r;
    }
    return add_device(b, d);
}

/* ------------------------------------------------------------------ MIG on demand */

/* What of GPU g is free for new GPU instances: memory slices, compute slices, instances left per
 * profile (only for profiles whose instance cap is below their placement count: the others are
 * bounded by their slices already). */
struct mig_free {
    unsigned mem_slices;           /* the GPU's memory slices (8, 4 on A30) */
    bool slice_free[8];
    unsigned compute_slices;       /* compute slices left */
    bool capped[GS_MAX_PROFILES];  /* profile k has a profile-<id> counter */
    unsigned left[GS_MAX_PROFILES]; /* instances of profile k that can still be made */
};

static void mig_free_of(const struct gs_gpu *g, struct mig_free *f) {
    memset(f, 0, sizeof(*f));
    unsigned total_compute = 0;
    f->mem_slices = g->mig_mem_slices;
    for (unsigned k = 0; k < g->n_profiles; k++) {
        const struct gs_gi_profile *p = &g->profiles[k];
        if (p->slices > total_compute)
            total_compute = p->slices;
        for (unsigned i = 0; i < p->n_starts && i < GS_ARRAY_SIZE(p->starts); i++)
            if (p->starts[i] + p->placement_size > f->mem_slices)
                f->mem_slices = p->starts[i] + p->placement_size;
    }
    if (f->mem_slices > GS_ARRAY_SIZE(f->slice_free))
        f->mem_slices = GS_ARRAY_SIZE(f->slice_free);
    for (unsigned s = 0; s < f->mem_slices; s++)
        f->slice_free[s] = true;
    unsigned used_compute = 0;
    for (unsigned i = 0; i < g->n_gis; i++) {
        const struct gs_gpu_instance *gi = &g->gis[i];
        for (unsigned s = gi->start; s < gi->start + gi->size && s < f->mem_slices; s++)
            f->slice_free[s] = false;
        const struct gs_gi_profile *p = gs_gpu_profile_by_id(g, gi->profile_id);
        used_compute += p ? p->slices : 0;
    }
    f->compute_slices = used_compute < total_compute ? total_compute - used_compute : 0;
    for (unsigned k = 0; k < g->n_profiles && k < GS_MAX_PROFILES; k++) {
        const struct gs_gi_profile *p = &g->profiles[k];
        unsigned have = 0;
        for (unsigned i = 0; i < g->n_gis; i++)
            have += g->gis[i].profile_id == p->id;
        f->capped[k] = p->max_instances < p->n_starts;
        f->left[k] = p->max_instances > have ? p->max_instances - have : 0;
    }
}

static bool placement_free(const struct mig_free *f, unsigned start, unsigned size) {
    if (!size || start + size > f->mem_slices)
        return false;
    for (unsigned s = start; s < start + size; s++)
        if (!f->slice_free[s])
            return false;
    return true;
}

static int set_counter(json_t *counters, const char *name, unsigned long long v) {
    json_t *c = json_pack("{s:o}", "value", count_json(v));
    return c && json_object_set_new(counters, name, c) == 0 ? 0 : -ENOMEM;
}

/* The counters one placement of profile k at `start` consumes, or (k < 0) the counter set of
 * what is free. Counter names: compute-slices, memory-slice-<n>, profile-<id>. */
static json_t *mig_counters(const struct gs_gpu *g, const struct mig_free *f, int k, unsigned start) {
    json_t *c = json_object();
    if (!c)
        return NULL;
    const struct gs_gi_profile *p = k >= 0 ? &g->profiles[k] : NULL;
    int r = set_counter(c, "compute-slices", p ? p->slices : f->compute_slices);
    for (unsigned s = 0; !r && s < f->mem_slices; s++) {
        char name[32];
        snprintf(name, sizeof(name), "memory-slice-%u", s);
        if (p ? s >= start && s < start + p->placement_size : f->slice_free[s])
            r = set_counter(c, name, 1);
    }
    for (unsigned j = 0; !r && j < g->n_profiles && j < GS_MAX_PROFILES; j++) {
        char name[32];
        snprintf(name, sizeof(name), "profile-%u", g->profiles[j].id);
        if (f->capped[j] && f->left[j] && (p ? (int)j == k : true))
            r = set_counter(c, name, p ? 1 : f->left[j]);
    }
    if (r < 0) {
        json_decref(c);
        return NULL;
    }
    return c;
}

/* d.consumesCounters = [{counterSet: set, counters}] (counters taken, NULL: out of memory). */
static int consume(json_t *d, const char *set, json_t *counters) {
    json_t *use = json_pack("{s:s, s:o}", "counterSet", set, "counters", counters);
    json_t *list = use ? json_pack("[o]", use) : NULL;
    if (!list || json_object_set_new(d, "consumesCounters", list) < 0)
        return -ENOMEM;
    return 0;
}

static int counter_set_name(char *out, size_t len, unsigned gpu) {
    return snprintf(out, len, "gpu-%u-counter-set", gpu) < (int)len ? 0 : -EINVAL;
}

/* GPU g's free placements, each a device consuming the GPU's counter set, and the set. */
static int mig_on_demand(struct builder *b, const struct gs_gpu *g) {
    struct mig_free f;
    mig_free_of(g, &f);
    char set[64];
    counter_set_name(set, sizeof(set), g->index);
    unsigned added = 0;
    for (unsigned k = 0; k < g->n_profiles && k < GS_MAX_PROFILES; k++) {
        const struct gs_gi_profile *p = &g->profiles[k];
        if ((f.capped[k] && !f.left[k]) || !p->slices || p->slices > f.compute_slices)
            continue;
        for (unsigned i = 0; i < p->n_starts && i < GS_ARRAY_SIZE(p->starts); i++) {
            unsigned start = p->starts[i];
            if (!placement_free(&f, start, p->placement_size))
                continue;
            char name[GS_DRA_DEVICE_NAME_MAX];
            int r = mig_name(b, name, sizeof(name), g->index, p->name, p->id, start);
            if (r < 0)
                return r;
            json_t *attrs, *caps, *d = new_device(name, &attrs, &caps);
            if (!d)
                return -ENOMEM;
            r = mig_attrs(b, attrs, name, g, p->name, start, p->placement_size, true, GS_DEV_MIG);
            if (!r && (set_capacity(caps, "memory", bytes_json(p->mem_mib << 20), NULL) < 0 ||
                       set_capacity(caps, "multiprocessors", count_json(p->sm), NULL) < 0 ||
                       consume(d, set, mig_counters(g, &f, (int)k, start)) < 0))
                r = -ENOMEM;
            if (r < 0) {
                json_decref(d);
                return r;
            }
            if ((r = add_device(b, d)) < 0)
                return r;
            added++;
        }
    }
    if (!added)
        return 0;
    json_t *counters = mig_counters(g, &f, -1, 0);
    size_t n = json_object_size(counters);
    json_t *cs = counters ? json_pack("{s:s, s:o}", "name", set, "counters", counters) : NULL;
    if (!cs || json_array_append_new(b->counter_sets, cs) < 0)
        return -ENOMEM;
    if (n > COUNTERS_PER_SET_MAX)
        return fail(b, -EINVAL, "GPU %u: its MIG counter set has %zu counters, more than %d", g->index, n,
                    COUNTERS_PER_SET_MAX);
    return 0;
}

/* ------------------------------------------------------------------ the plan's devices */

/* The plan's devices of GPU i, in its resources' order: the first of each physical device (a
 * GPU, or a MIG device by UUID) with the number of replicas the plan gives it. */
static int gpu_devices(struct builder *b, unsigned i) {
    const struct gs_gpu *g = &b->inv->gpus[i];
    const struct gs_plan *plan = b->plan;
    for (unsigned k = 0; k < plan->n_resources; k++) {
        const struct gs_resource *res = &plan->resources[k];
        if (res->fraction == GS_FRAC_COMPUTE)
            continue; /* a fractional GPU is one device, published from its memory resource */
        for (unsigned j = 0; j < res->n_devices; j++) {
            const struct gs_device *d = &res->devices[j];
            if (d->gpu != g->index || ((d->kind == GS_DEV_REPLICA || d->kind == GS_DEV_MPS) && d->replica != 0))
                continue;
            unsigned replicas = 0;
            for (unsigned n = 0; n < res->n_devices; n++)
                replicas += res->devices[n].gpu == d->gpu && !strcmp(res->devices[n].uuid, d->uuid);
            int r = 0;
            if (!gs_device_is_mig(d)) {
                r = gpu_device(b, g, d, replicas);
            } else {
                for (unsigned m = 0; m < g->n_mig; m++)
                    if (!strcmp(g->mig[m].uuid, d->uuid))
                        r = mig_device(b, g, &g->mig[m], d, replicas);
            }
            if (r < 0)
                return r;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ slices */

static json_t *new_slice(const char *node, const char *driver, long long generation, unsigned k, unsigned count,
                         struct builder *b) {
    char name[DNS1123_SUBDOMAIN_MAX + 32];
    int n = snprintf(name, sizeof(name), "%s-%s-%u", node, driver, k);
    if (n < 0 || (size_t)n > DNS1123_SUBDOMAIN_MAX) {
        fail(b, -EINVAL, "node name of %zu characters: its slice names (<node>-%s-%u) would be longer than %d "
                         "characters", strlen(node), driver, k, DNS1123_SUBDOMAIN_MAX);
        return NULL;
    }
    json_t *s = json_pack("{s:s, s:s, s:{s:s}, s:{s:s, s:s, s:{s:s, s:I, s:I}}}", "apiVersion", "resource.k8s.io/v1",
                          "kind", "ResourceSlice", "metadata", "name", name, "spec", "driver", driver, "nodeName", node,
                          "pool", "name", node, "generation", (json_int_t)generation, "resourceSliceCount",
                          (json_int_t)count);
    if (!s)
        fail(b, -ENOMEM, "out of memory");
    return s;
}

/* A device that consumes counters or carries taints: its slice holds at most 64 devices. */
static bool needs_small_slice(json_t *dev) {
    return json_object_get(dev, "consumesCounters") != NULL || json_object_get(dev, "taints") != NULL;
}

/* Splits the devices into slices of at most 128 (64 with one that consumes counters or is
 * tainted), and the counter sets into slices of their own of at most 8. */
static int split(struct builder *b, const char *node, const char *driver, long long generation, json_t *out) {
    size_t nd = json_array_size(b->devices), ncs = json_array_size(b->counter_sets);
    /* first pass: the chunk boundaries */
    size_t *first = calloc(nd + 1, sizeof(*first));
    if (!first)
        return fail(b, -ENOMEM, "out of memory");
    size_t chunks = 0, in_chunk = 0;
    bool counters = false;
    for (size_t i = 0; i < nd; i++) {
        bool c = needs_small_slice(json_array_get(b->devices, i));
        size_t limit = counters || c ? GS_DRA_MAX_COUNTER_DEVICES_PER_SLICE : GS_DRA_MAX_DEVICES_PER_SLICE;
        if (!in_chunk || in_chunk + 1 > limit) {
            first[chunks++] = i;
            in_chunk = 0;
            counters = false;
        }
        in_chunk++;
        counters = counters || c;
    }
    first[chunks] = nd;
    size_t cs_slices = (ncs + GS_DRA_MAX_COUNTER_SETS_PER_SLICE - 1) / GS_DRA_MAX_COUNTER_SETS_PER_SLICE;
    size_t total = chunks + cs_slices ? chunks + cs_slices : 1;
    int r = 0;
    for (size_t k = 0; k < total && !r; k++) {
        json_t *s = new_slice(node, driver, generation, (unsigned)k, (unsigned)total, b);
        if (!s) {
            r = -EINVAL;
            break;
        }
        json_t *spec = json_object_get(s, "spec"), *list = json_array();
        bool counter_slice = k < cs_slices;
        json_t *from = counter_slice ? b->counter_sets : b->devices;
        size_t lo, hi;
        if (counter_slice) {
            lo = k * GS_DRA_MAX_COUNTER_SETS_PER_SLICE;
            hi = lo + GS_DRA_MAX_COUNTER_SETS_PER_SLICE < ncs ? lo + GS_DRA_MAX_COUNTER_SETS_PER_SLICE : ncs;
        } else {
            lo = chunks ? first[k - cs_slices] : 0;
            hi = chunks ? first[k - cs_slices + 1] : 0;
        }
        for (size_t i = lo; list && i < hi; i++)
            if (json_array_append(list, json_array_get(from, i)) < 0)
                break;
        bool ok = list && json_array_size(list) == hi - lo;
        if (ok && hi > lo) {
            ok = json_object_set_new(spec, counter_slice ? "sharedCounters" : "devices", list) == 0;
            list = NULL;
        }
        json_decref(list);
        if (!ok)
            json_decref(s);
        if (!ok || json_array_append_new(out, s) < 0) {
            r = fail(b, -ENOMEM, "out of memory");
            break;
        }
    }
    free(first);
    return r;
}

int gs_dra_plan(const struct gs_inventory *inv, const struct gs_policy *policy, struct gs_plan *out) {
    /* DRA has no resource names: MIG devices are published whatever flags.migStrategy says, */
    struct gs_policy *pol = malloc(sizeof(*pol));
    if (!pol)
        return -ENOMEM;
    *pol = *policy;
    pol->mig_strategy = GS_MIG_MIXED;
    pol->dra_gpus = GS_DRA_NONE; /* the plan of every GPU; those DRA serves are picked by the caller */
    /* nor resource names: a time-sliced and an MPS rule under one default name would make the
     * plan leave one of them out; here each rule's devices get a name of their own */
    for (unsigned i = 0; i < pol->n_rules && i < GS_POLICY_MAX_RULES; i++)
        snprintf(pol->rules[i].resource, sizeof(pol->rules[i].resource), "gpuslice.io/dra-rule-%u", i);
    int r = gs_plan_build(inv, pol, NULL, out);
    free(pol);
    return r;
}

/* The devices from index `from` on (one GPU's) tainted "<driver>/xid" = xid, NoSchedule. */
static int taint_devices(struct builder *b, size_t from, const char *driver, unsigned long long xid) {
    char key[DRIVER_NAME_MAX + 8], value[24];
    snprintf(key, sizeof(key), "%s/%s", driver, GS_DRA_TAINT_XID);
    snprintf(value, sizeof(value), "%llu", xid);
    for (size_t i = from; i < json_array_size(b->devices); i++) {
        json_t *t = json_pack("[{s:s,s:s,s:s}]", "key", key, "value", value, "effect", "NoSchedule");
        if (!t || json_object_set_new(json_array_get(b->devices, i), "taints", t) < 0)
            return -ENOMEM;
    }
    return 0;
}

int gs_dra_slices_build(const struct gs_inventory *inv, const struct gs_policy *policy, const char *node,
                        const char *driver, long long generation, json_t **slices_out, char *err, size_t errlen) {
    return gs_dra_slices_build_tainted(inv, policy, NULL, node, driver, generation, slices_out, err, errlen);
}

int gs_dra_slices_build_tainted(const struct gs_inventory *inv, const struct gs_policy *policy,
                                const struct gs_dra_taints *taints, const char *node, const char *driver,
                                long long generation, json_t **slices_out, char *err, size_t errlen) {
    struct builder b = { .inv = inv, .pol = policy, .err = err, .errlen = errlen };
    *slices_out = NULL;
    if (errlen)
        err[0] = 0;
    if (!node || !dns_subdomain(node, DNS1123_SUBDOMAIN_MAX))
        return fail(&b, -EINVAL, "node name '%s': not a DNS-1123 subdomain (lower-case letters, digits, '-', '.'; "
                                 "at most %d characters)", node ? node : "", DNS1123_SUBDOMAIN_MAX);
    if (!driver || !dns_subdomain(driver, DRIVER_NAME_MAX))
        return fail(&b, -EINVAL, "driver name '%s': not a DNS-1123 subdomain of at most %d characters",
                    driver ? driver : "", DRIVER_NAME_MAX);
    if (generation < 0)
        return fail(&b, -EINVAL, "pool generation %lld: must not be negative", generation);
    struct gs_plan *plan = malloc(sizeof(*plan));
    json_t *out = json_array();
    b.devices = json_array();
    b.counter_sets = json_array();
    int r = 0;
    if (!plan || !out || !b.devices || !b.counter_sets) {
        r = fail(&b, -ENOMEM, "out of memory");
        goto done;
    }
    if (gs_dra_plan(inv, policy, plan) < 0) {
        free(plan);
        plan = NULL;
        r = fail(&b, -ENOMEM, "out of memory");
        goto done;
    }
    b.plan = plan;
    for (unsigned i = 0; i < inv->n_gpus && i < GS_MAX_GPUS && !r; i++) {
        const struct gs_gpu *g = &inv->gpus[i];
        if (g->lost || !g->uuid[0])
            continue; /* a lost GPU is not offered (its identity is the last good read) */
        if (!gs_plan_dra_serves(policy, g->index, g->uuid, true))
            continue; /* the device plugins' (gpuslice.dra.gpus; unset: every GPU) */
        size_t first = json_array_size(b.devices);
        r = gpu_devices(&b, i);
        /* MIG on demand: GPUs the policy puts in MIG mode, unless a MIG layout owns them */
        if (!r && plan->gpus[i].mode == GS_MODE_MIG && g->mig_capable && g->mig_current && !policy->mig_config[0])
            r = mig_on_demand(&b, g);
        if (!r && taints && taints->xid[i])
            r = taint_devices(&b, first, driver, taints->xid_code[i]);
    }
    if (r == -ENOMEM && !(errlen && err[0]))
        fail(&b, r, "out of memory");
    if (!r)
        r = split(&b, node, driver, generation, out);
done:
    if (plan)
        gs_plan_free(plan);
    free(plan);
    json_decref(b.devices);
    json_decref(b.counter_sets);
    if (r < 0) {
        json_decref(out);
        return r;
    }
    *slices_out = out;
    return 0;
}

int gs_dra_device_parse(const char *name, struct gs_dra_device_ref *out) {
    memset(out, 0, sizeof(*out));
    unsigned long long gpu;
    char tail[GS_DRA_DEVICE_NAME_MAX];
    if (!name || strncmp(name, "gpu-", 4) != 0 || strlen(name) >= GS_DRA_DEVICE_NAME_MAX)
        return -EINVAL;
    const char *p = name + 4;
    size_t digits = strspn(p, "0123456789");
    if (!digits || digits > 3 || (digits > 1 && p[0] == '0'))
        return -EINVAL;
    memcpy(tail, p, digits);
    tail[digits] = 0;
    if (gs_parse_uint(tail, 0, GS_MAX_GPUS - 1, &gpu) < 0)
        return -EINVAL;
    out->gpu = (unsigned)gpu;
    p += digits;
    if (!*p)
        return 0;
    if (strncmp(p, "-mig-", 5) != 0)
        return -EINVAL;
    p += 5;
    /* PROFILE-ID-START, the profile may hold '-': the last two fields are the numbers */
    const char *dash2 = strrchr(p, '-');
    if (!dash2 || dash2 == p)
        return -EINVAL;
    const char *dash1 = dash2 - 1;
    while (dash1 > p && *dash1 != '-')
        dash1--;
    if (dash1 == p)
        return -EINVAL;
    unsigned long long id, start;
    size_t idlen = (size_t)(dash2 - dash1 - 1);
    if (idlen == 0 || idlen >= sizeof(tail))
        return -EINVAL;
    memcpy(tail, dash1 + 1, idlen);
    tail[idlen] = 0;
    if (gs_parse_uint(tail, 0, 1u << 20, &id) < 0 || gs_parse_uint(dash2 + 1, 0, 7, &start) < 0)
        return -EINVAL;
    for (const char *q = p; q < dash1; q++)
        if (!dns_label_char(*q) && *q != '-')
            return -EINVAL;
    out->mig = true;
    out->profile_id = (unsigned)id;
    out->start = (unsigned)start;
    return 0;
}
