/* claims.c: ResourceClaims and gpuslice's ResourceSlices in the extender's model (claims.h). Pure. */
#include "extender/claims.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "extender/wire.h"
#include "util/quantity.h"

static const char *const cap_names[EX_CAPS] = { "memory", "compute", "clients" };

void ex_dra_init(struct ex_dra *d, const char *driver) {
    memset(d, 0, sizeof(*d));
    snprintf(d->driver, sizeof(d->driver), "%s", driver && driver[0] ? driver : EX_DRA_DRIVER);
}

static void free_slices(struct ex_dra_slice *s, size_t n) {
    for (size_t k = 0; k < n; k++)
        free(s[k].dev);
}

void ex_dra_free(struct ex_dra *d) {
    free_slices(d->slices, d->n_slices);
    free(d->slices);
    free(d->claims);
    free(d->tmpls);
    memset(d, 0, sizeof(*d));
}

/* ------------------------------------------------------------------ parsing */

/* a string field of at most len - 1 characters into dst: 0, 1 when absent, -EINVAL */
static int get_name(const json_t *obj, const char *key, char *dst, size_t len, const char *where, char *err,
                    size_t errlen) {
    const json_t *v = json_object_get(obj, key);
    dst[0] = '\0';
    if (!v || json_is_null(v))
        return 1;
    const char *s = json_string_value(v);
    if (!s || strlen(s) >= len) {
        snprintf(err, errlen, "%s.%s: expected a name of at most %zu characters", where, key, len - 1);
        return -EINVAL;
    }
    memcpy(dst, s, strlen(s) + 1);
    return 0;
}

/* a typed attribute (attributes[name] or attributes["DRIVER/name"]) */
static const json_t *attr(const json_t *attrs, const char *driver, const char *name, const char *type) {
    const json_t *a = json_object_get(attrs, name);
    if (!a) {
        char q[EX_DRA_DEV_MAX + 64];
        snprintf(q, sizeof(q), "%s/%s", driver, name);
        a = json_object_get(attrs, q);
    }
    return json_object_get(a, type);
}

/* a quantity (string, or a JSON integer) in units (memory: bytes; counts as they are) */
static int quantity(const json_t *v, int64_t *out) {
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return *out < 0 ? -EINVAL : 0;
    }
    const char *s = json_string_value(v);
    int64_t x;
    if (!s || gs_quantity_parse(s, 0, 0, &x) < 0 || x < 0) /* rounded up, as Quantity.Value */
        return -EINVAL;
    *out = x;
    return 0;
}

static int parse_cap(const json_t *c, struct ex_dra_cap *cap, const char *where, char *err, size_t errlen) {
    memset(cap, 0, sizeof(*cap));
    if (!json_is_object(c) || quantity(json_object_get(c, "value"), &cap->value) < 0) {
        snprintf(err, errlen, "%s.value: not a quantity", where);
        return -EINVAL;
    }
    cap->present = true;
    const json_t *pol = json_object_get(c, "requestPolicy");
    if (!pol || json_is_null(pol))
        return 0;
    const json_t *def = json_object_get(pol, "default"), *vr = json_object_get(pol, "validRange");
    if ((def && quantity(def, &cap->dflt) < 0) ||
        (json_object_get(vr, "min") && quantity(json_object_get(vr, "min"), &cap->min) < 0) ||
        (json_object_get(vr, "max") && quantity(json_object_get(vr, "max"), &cap->max) < 0) ||
        (json_object_get(vr, "step") && quantity(json_object_get(vr, "step"), &cap->step) < 0)) {
        snprintf(err, errlen, "%s.requestPolicy: not a quantity", where);
        return -EINVAL;
    }
    cap->policy = true;
    return 0;
}

static enum ex_dra_class device_class(const char *type, const char *sharing) {
    if (!type || !sharing)
        return EX_DC_NONE;
    if (!strcmp(sharing, "time-slicing"))
        return EX_DC_SHARED;
    if (!strcmp(sharing, "mps"))
        return EX_DC_MPS;
    if (!strcmp(sharing, "exclusive"))
        return !strcmp(type, "gpu") ? EX_DC_WHOLE : !strcmp(type, "mig") ? EX_DC_MIG : EX_DC_NONE;
    return EX_DC_NONE;
}

int ex_dra_slice_from_json(const json_t *o, const char *driver, struct ex_dra_slice *out, char *err,
                           size_t errlen) {
    memset(out, 0, sizeof(*out));
    const json_t *md = json_object_get(o, "metadata"), *spec = json_object_get(o, "spec");
    if (get_name(md, "name", out->name, sizeof(out->name), "ResourceSlice.metadata", err, errlen) != 0) {
        snprintf(err, errlen, "a ResourceSlice without a name (or longer than %d)", EX_NAME_MAX - 1);
        return -EINVAL;
    }
    const char *drv = json_string_value(json_object_get(spec, "driver"));
    if (!drv || strcmp(drv, driver) != 0)
        return 0;
    char where[EX_NAME_MAX + 64];
    snprintf(where, sizeof(where), "ResourceSlice %s: spec", out->name);
    const json_t *pool = json_object_get(spec, "pool");
    if (get_name(spec, "nodeName", out->node, sizeof(out->node), where, err, errlen) < 0 ||
        get_name(pool, "name", out->pool, sizeof(out->pool), where, err, errlen) < 0)
        return -EINVAL;
    if (!out->node[0])
        return 0; /* not a node's (network-attached): nothing the extender places on */
    const json_t *gen = json_object_get(pool, "generation");
    out->generation = json_is_integer(gen) ? json_integer_value(gen) : 0;
    const json_t *devs = json_object_get(spec, "devices");
    if (devs && !json_is_null(devs) && !json_is_array(devs)) {
        snprintf(err, errlen, "%s.devices: not an array", where);
        return -EINVAL;
    }
    size_t n = json_array_size(devs);
    if (n > EX_DRA_SLICE_DEVS) {
        snprintf(err, errlen, "%s.devices: %zu devices, at most %d", where, n, EX_DRA_SLICE_DEVS);
        return -EINVAL;
    }
    if (n && !(out->dev = calloc(n, sizeof(*out->dev)))) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    size_t i;
    const json_t *d;
    json_array_foreach(devs, i, d) {
        struct ex_dra_dev *v = &out->dev[out->n_dev];
        char dw[EX_NAME_MAX + 96];
        snprintf(dw, sizeof(dw), "%s.devices[%zu]", where, i);
        if (get_name(d, "name", v->name, sizeof(v->name), dw, err, errlen) != 0) {
            snprintf(err, errlen, "%s.name: expected a name of at most %d characters", dw, EX_DRA_DEV_MAX - 1);
            goto fail;
        }
        const json_t *attrs = json_object_get(d, "attributes");
        v->cls = device_class(json_string_value(attr(attrs, driver, "type", "string")),
                              json_string_value(attr(attrs, driver, "sharing", "string")));
        const json_t *gi = attr(attrs, driver, "index", "int");
        if (!gi)
            gi = attr(attrs, driver, "parentIndex", "int");
        v->gpu = json_is_integer(gi) && json_integer_value(gi) >= 0 && json_integer_value(gi) < PL_MAX_GPUS ?
                     (int)json_integer_value(gi) :
                     -1;
        v->multi = json_is_true(json_object_get(d, "allowMultipleAllocations"));
        const json_t *caps = json_object_get(d, "capacity");
        for (int c = 0; c < EX_CAPS; c++) {
            const json_t *cv = json_object_get(caps, cap_names[c]);
            char cw[EX_NAME_MAX + 128];
            snprintf(cw, sizeof(cw), "%s.capacity.%s", dw, cap_names[c]);
            if (cv && parse_cap(cv, &v->cap[c], cw, err, errlen) < 0)
                goto fail;
        }
        out->n_dev++;
    }
    return 1;
fail:
    free(out->dev);
    out->dev = NULL;
    out->n_dev = 0;
    return -EINVAL;
}

/* the class of a DeviceClass name: DRIVER, shared.DRIVER, mps.DRIVER, mig.DRIVER (the chart's) */
static enum ex_dra_class class_of(const char *driver, const char *name) {
    static const struct {
        const char *prefix;
        enum ex_dra_class cls;
    } k[] = { { "", EX_DC_WHOLE }, { "shared.", EX_DC_SHARED }, { "mps.", EX_DC_MPS }, { "mig.", EX_DC_MIG } };
    size_t dl = strlen(driver), nl = strlen(name);
    for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++) {
        size_t pl = strlen(k[i].prefix);
        if (nl == pl + dl && !strncmp(name, k[i].prefix, pl) && !strcmp(name + pl, driver))
            return k[i].cls;
    }
    return EX_DC_NONE;
}

static int parse_request(const json_t *r, const char *driver, struct ex_dra_req *q, bool *judged, const char *where,
                         char *err, size_t errlen) {
    memset(q, 0, sizeof(*q));
    if (!json_is_object(r)) {
        snprintf(err, errlen, "%s: not an object", where);
        return -EINVAL;
    }
    if (get_name(r, "name", q->name, sizeof(q->name), where, err, errlen) < 0)
        return -EINVAL;
    const json_t *ex = json_object_get(r, "exactly");
    if (!ex || json_is_null(ex)) {
        if (json_object_get(r, "firstAvailable"))
            *judged = false; /* subrequests: the allocator's choice */
        return 0;
    }
    const char *cls = json_string_value(json_object_get(ex, "deviceClassName"));
    if (!cls) {
        snprintf(err, errlen, "%s.exactly.deviceClassName: expected a string", where);
        return -EINVAL;
    }
    q->cls = class_of(driver, cls);
    const char *mode = json_string_value(json_object_get(ex, "allocationMode"));
    if (mode && strcmp(mode, "ExactCount") != 0) {
        if (q->cls != EX_DC_NONE)
            *judged = false; /* All: every matching device, the allocator's to count */
        q->cls = EX_DC_NONE;
        return 0;
    }
    const json_t *cnt = json_object_get(ex, "count");
    q->count = 1;
    if (cnt) {
        if (!json_is_integer(cnt) || json_integer_value(cnt) < 1 || json_integer_value(cnt) > PL_MAX_GPUS * 8) {
            snprintf(err, errlen, "%s.exactly.count: expected 1..%d", where, PL_MAX_GPUS * 8);
            return -EINVAL;
        }
        q->count = (int)json_integer_value(cnt);
    }
    const json_t *reqs = json_object_get(json_object_get(ex, "capacity"), "requests");
    for (int c = 0; c < EX_CAPS; c++) {
        const json_t *v = json_object_get(reqs, cap_names[c]);
        if (!v)
            continue;
        if (quantity(v, &q->want[c]) < 0) {
            snprintf(err, errlen, "%s.exactly.capacity.requests.%s: not a quantity", where, cap_names[c]);
            return -EINVAL;
        }
        q->asked[c] = true;
    }
    if (q->cls == EX_DC_MIG)
        q->cls = EX_DC_NONE; /* MIG placements and their counters: the allocator's */
    return 0;
}

int ex_dra_claim_from_json(const json_t *o, const char *driver, bool tmpl, struct ex_dra_claim *out, char *err,
                           size_t errlen) {
    memset(out, 0, sizeof(*out));
    const char *kind = tmpl ? "ResourceClaimTemplate" : "ResourceClaim";
    const json_t *md = json_object_get(o, "metadata");
    char where[2 * EX_NAME_MAX + 96];
    if (get_name(md, "name", out->name, sizeof(out->name), kind, err, errlen) != 0 ||
        get_name(md, "namespace", out->ns, sizeof(out->ns), kind, err, errlen) != 0) {
        snprintf(err, errlen, "a %s without a name or namespace (or longer than %d)", kind, EX_NAME_MAX - 1);
        return -EINVAL;
    }
    if (!tmpl && get_name(md, "uid", out->uid, sizeof(out->uid), kind, err, errlen) < 0)
        return -EINVAL;
    const json_t *spec = json_object_get(o, "spec");
    if (tmpl)
        spec = json_object_get(spec, "spec");
    snprintf(where, sizeof(where), "%s %s/%s: %s", kind, out->ns, out->name, tmpl ? "spec.spec" : "spec");
    const json_t *reqs = json_object_get(json_object_get(spec, "devices"), "requests");
    if (reqs && !json_is_null(reqs) && !json_is_array(reqs)) {
        snprintf(err, errlen, "%s.devices.requests: not an array", where);
        return -EINVAL;
    }
    out->judged = true;
    size_t i;
    const json_t *r;
    json_array_foreach(reqs, i, r) {
        if (out->n_req == EX_DRA_REQS) {
            out->judged = false;
            break;
        }
        char rw[sizeof(where) + 40];
        snprintf(rw, sizeof(rw), "%s.devices.requests[%zu]", where, i);
        if (parse_request(r, driver, &out->req[out->n_req], &out->judged, rw, err, errlen) < 0)
            return -EINVAL;
        out->n_req++;
    }
    if (tmpl)
        return 0;
    const json_t *alloc = json_object_get(json_object_get(o, "status"), "allocation");
    if (!alloc || json_is_null(alloc))
        return 0;
    out->allocated = true;
    const json_t *res = json_object_get(json_object_get(alloc, "devices"), "results");
    json_array_foreach(res, i, r) {
        const char *drv = json_string_value(json_object_get(r, "driver"));
        if (!drv || strcmp(drv, driver) != 0)
            continue;
        if (out->n_res == EX_DRA_RESULTS)
            break;
        struct ex_dra_result *x = &out->res[out->n_res];
        char rw[sizeof(where) + 64];
        snprintf(rw, sizeof(rw), "ResourceClaim %s/%s: status.allocation.devices.results[%zu]", out->ns,
                 out->name, i);
        if (get_name(r, "pool", x->pool, sizeof(x->pool), rw, err, errlen) != 0 ||
            get_name(r, "device", x->device, sizeof(x->device), rw, err, errlen) != 0) {
            snprintf(err, errlen, "%s: expected a pool and a device name", rw);
            return -EINVAL;
        }
        const json_t *cc = json_object_get(r, "consumedCapacity");
        for (int c = 0; c < EX_CAPS; c++) {
            const json_t *v = json_object_get(cc, cap_names[c]);
            if (v && quantity(v, &x->used[c]) < 0) {
                snprintf(err, errlen, "%s.consumedCapacity.%s: not a quantity", rw, cap_names[c]);
                return -EINVAL;
            }
        }
        out->n_res++;
    }
    return 0;
}

/* ------------------------------------------------------------------ the state */

static int slice_cmp(const struct ex_dra_slice *a, const char *node, const char *name) {
    int c = strcmp(a->node, node);
    return c ? c : strcmp(a->name, name);
}

/* the first slice of node (sorted), or n_slices */
static size_t first_of_node(const struct ex_dra *d, const char *node) {
    size_t lo = 0, hi = d->n_slices;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (strcmp(d->slices[mid].node, node) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* the newest generation of the pool among node's slices [k, end) */
static int64_t newest(const struct ex_dra *d, size_t k, size_t end, const char *pool) {
    int64_t g = INT64_MIN;
    for (; k < end; k++)
        if (!strcmp(d->slices[k].pool, pool) && d->slices[k].generation > g)
            g = d->slices[k].generation;
    return g;
}

/* node's slices: [*from, *to) */
static void node_range(const struct ex_dra *d, const char *node, size_t *from, size_t *to) {
    size_t k = first_of_node(d, node), e = k;
    while (e < d->n_slices && !strcmp(d->slices[e].node, node))
        e++;
    *from = k;
    *to = e;
}

/* whether slice k is of its pool's newest generation among the slices of its node [from, to) */
static bool current(const struct ex_dra *d, size_t k, size_t from, size_t to) {
    return d->slices[k].generation == newest(d, from, to, d->slices[k].pool);
}

static struct ex_dra_dev *device_in(struct ex_dra *d, size_t from, size_t to, const char *pool, const char *device) {
    for (size_t k = from; k < to; k++) {
        struct ex_dra_slice *s = &d->slices[k];
        if (strcmp(s->pool, pool) != 0)
            continue;
        for (int i = 0; i < s->n_dev; i++)
            if (!strcmp(s->dev[i].name, device))
                return &s->dev[i];
    }
    return NULL;
}

/* the device of pool: among the slices of the node named as the pool first (gpuslice names its
 * pool after the node), else all */
static struct ex_dra_dev *find_device(struct ex_dra *d, const char *pool, const char *device) {
    size_t from, to;
    node_range(d, pool, &from, &to);
    struct ex_dra_dev *v = device_in(d, from, to, pool, device);
    return v ? v : device_in(d, 0, d->n_slices, pool, device);
}

/* adds (sign 1) or takes out (-1) the claim's results on the devices; false when a device's sum was
 * past int64 (held there: the claims are to be counted again, recount) */
static bool count_claim(struct ex_dra *d, const struct ex_dra_claim *c, int sign) {
    bool exact = true;
    for (int k = 0; k < c->n_res; k++) {
        struct ex_dra_dev *v = find_device(d, c->res[k].pool, c->res[k].device);
        if (!v)
            continue;
        v->n_alloc += sign;
        for (int i = 0; i < EX_CAPS; i++) {
            /* a sum past int64 stays there (the device full) until the claims are counted again */
            int64_t u;
            if (v->used[i] == INT64_MAX)
                exact = false;
            else if (__builtin_add_overflow(v->used[i], sign > 0 ? c->res[k].used[i] : -c->res[k].used[i], &u))
                v->used[i] = INT64_MAX;
            else
                v->used[i] = u < 0 ? 0 : u;
        }
    }
    return exact;
}

static void recount(struct ex_dra *d) {
    for (size_t k = 0; k < d->n_slices; k++)
        for (int i = 0; i < d->slices[k].n_dev; i++) {
            d->slices[k].dev[i].n_alloc = 0;
            memset(d->slices[k].dev[i].used, 0, sizeof(d->slices[k].dev[i].used));
        }
    for (size_t k = 0; k < d->n_claims; k++)
        count_claim(d, &d->claims[k], 1);
}

static int by_node_name(const void *a, const void *b) {
    const struct ex_dra_slice *x = a, *y = b;
    return slice_cmp(x, y->node, y->name);
}

int ex_dra_replace_slices(struct ex_dra *d, struct ex_dra_slice *s, size_t n) {
    struct ex_dra_slice *ns = malloc((n ? n : 1) * sizeof(*ns));
    if (!ns) {
        free_slices(s, n);
        return -ENOMEM;
    }
    memcpy(ns, s, n * sizeof(*ns));
    qsort(ns, n, sizeof(*ns), by_node_name);
    free_slices(d->slices, d->n_slices);
    free(d->slices);
    d->slices = ns;
    d->n_slices = d->cap_slices = n;
    recount(d);
    return 0;
}

/* the index of the slice named name, or -1 */
static long slice_index(const struct ex_dra *d, const char *name) {
    for (size_t k = 0; k < d->n_slices; k++)
        if (!strcmp(d->slices[k].name, name))
            return (long)k;
    return -1;
}

void ex_dra_del_slice(struct ex_dra *d, const char *name) {
    long k = slice_index(d, name);
    if (k < 0)
        return;
    free(d->slices[k].dev);
    memmove(&d->slices[k], &d->slices[k + 1], (d->n_slices - (size_t)k - 1) * sizeof(*d->slices));
    d->n_slices--;
    recount(d);
}

bool ex_grow(void **arr, size_t *cap, size_t want, size_t size, size_t first) {
    if (want <= *cap)
        return true;
    size_t c = *cap ? *cap * 2 : first;
    while (c < want)
        c *= 2;
    void *n = realloc(*arr, c * size);
    if (!n)
        return false;
    *arr = n;
    *cap = c;
    return true;
}

int ex_dra_set_slice(struct ex_dra *d, struct ex_dra_slice *s) {
    long old = slice_index(d, s->name);
    if (old >= 0) {
        free(d->slices[old].dev);
        memmove(&d->slices[old], &d->slices[old + 1], (d->n_slices - (size_t)old - 1) * sizeof(*d->slices));
        d->n_slices--;
    }
    if (!ex_grow((void **)&d->slices, &d->cap_slices, d->n_slices + 1, sizeof(*d->slices), 16)) {
        free(s->dev);
        recount(d);
        return -ENOMEM;
    }
    size_t k = 0;
    while (k < d->n_slices && slice_cmp(&d->slices[k], s->node, s->name) < 0)
        k++;
    memmove(&d->slices[k + 1], &d->slices[k], (d->n_slices - k) * sizeof(*d->slices));
    d->slices[k] = *s;
    d->n_slices++;
    recount(d);
    return 0;
}

static struct ex_dra_claim **arr_of(struct ex_dra *d, bool tmpl, size_t **n, size_t **cap) {
    *n = tmpl ? &d->n_tmpls : &d->n_claims;
    *cap = tmpl ? &d->cap_tmpls : &d->cap_claims;
    return tmpl ? &d->tmpls : &d->claims;
}

static long claim_index(const struct ex_dra_claim *a, size_t n, const char *ns, const char *name) {
    for (size_t k = 0; k < n; k++)
        if (!strcmp(a[k].name, name) && !strcmp(a[k].ns, ns))
            return (long)k;
    return -1;
}

int ex_dra_replace_claims(struct ex_dra *d, bool tmpl, const struct ex_dra_claim *c, size_t n) {
    size_t *cnt, *cap;
    struct ex_dra_claim **arr = arr_of(d, tmpl, &cnt, &cap);
    struct ex_dra_claim *nc = malloc((n ? n : 1) * sizeof(*nc));
    if (!nc)
        return -ENOMEM;
    memcpy(nc, c, n * sizeof(*nc));
    free(*arr);
    *arr = nc;
    *cnt = *cap = n;
    if (!tmpl)
        recount(d);
    return 0;
}

int ex_dra_set_claim(struct ex_dra *d, bool tmpl, const struct ex_dra_claim *c) {
    size_t *cnt, *cap;
    struct ex_dra_claim **arr = arr_of(d, tmpl, &cnt, &cap);
    long k = claim_index(*arr, *cnt, c->ns, c->name);
    bool exact = true;
    if (k < 0) {
        if (!ex_grow((void **)arr, cap, *cnt + 1, sizeof(**arr), 16))
            return -ENOMEM;
        k = (long)(*cnt)++;
    } else if (!tmpl) {
        exact = count_claim(d, &(*arr)[k], -1);
    }
    (*arr)[k] = *c;
    if (!tmpl && exact)
        count_claim(d, c, 1);
    else if (!tmpl)
        recount(d);
    return 0;
}

void ex_dra_del_claim(struct ex_dra *d, bool tmpl, const char *ns, const char *name) {
    size_t *cnt, *cap;
    struct ex_dra_claim **arr = arr_of(d, tmpl, &cnt, &cap);
    long k = claim_index(*arr, *cnt, ns, name);
    if (k < 0)
        return;
    bool exact = tmpl || count_claim(d, &(*arr)[k], -1);
    (*arr)[k] = (*arr)[--(*cnt)];
    if (!exact)
        recount(d);
}

/* ------------------------------------------------------------------ nodes */

uint32_t ex_dra_gpus(const struct ex_dra *d, const char *node) {
    size_t from, to;
    uint32_t mask = 0;
    node_range(d, node, &from, &to);
    for (size_t k = from; k < to; k++)
        if (current(d, k, from, to))
            for (int i = 0; i < d->slices[k].n_dev; i++)
                if (d->slices[k].dev[i].gpu >= 0)
                    mask |= 1u << d->slices[k].dev[i].gpu;
    return mask;
}

/* the memory of a GPU device of node (MiB; 0: none) */
static int64_t dra_gpu_mem(const struct ex_dra *d, const char *node) {
    size_t from, to;
    node_range(d, node, &from, &to);
    for (size_t k = from; k < to; k++)
        for (int i = 0; i < d->slices[k].n_dev; i++) {
            const struct ex_dra_dev *v = &d->slices[k].dev[i];
            if ((v->cls == EX_DC_WHOLE || v->cls == EX_DC_SHARED || v->cls == EX_DC_MPS) &&
                v->cap[EX_CAP_MEMORY].present)
                return v->cap[EX_CAP_MEMORY].value >> 20;
        }
    return 0;
}

bool ex_dra_apply_node(const struct ex_dra *d, struct ex_node_spec *s) {
    uint32_t mask = d ? ex_dra_gpus(d, s->name) : 0;
    if (!mask)
        return s->n_gpu > 0;
    int n = s->n_gpu + __builtin_popcount(mask), top = 32 - __builtin_clz(mask);
    if (n < top)
        n = top; /* a GPU lost, or left out of both: its index is still the DRA driver's */
    if (n > PL_MAX_GPUS)
        n = PL_MAX_GPUS;
    int plugin[PL_MAX_GPUS], np = 0; /* the device plugin's GPUs' free shares, in index order */
    for (int g = 0; g < s->n_gpu && g < PL_MAX_GPUS; g++)
        plugin[np++] = s->gpu_free[g];
    for (int g = 0, k = 0; g < n; g++)
        s->gpu_free[g] = mask & (1u << g) ? 0 : k < np ? plugin[k++] : 0;
    s->n_gpu = n;
    if (s->gpu_mem_mib <= 0)
        s->gpu_mem_mib = dra_gpu_mem(d, s->name);
    return true;
}

static void list_gpus(uint32_t mask, char *out, size_t len) {
    size_t o = 0;
    out[0] = '\0';
    for (int g = 0; g < 32 && o + 1 < len; g++)
        if (mask & (1u << g))
            o += (size_t)snprintf(out + o, len - o, "%s%d", o ? "," : "", g);
}

bool ex_dra_plugin_short(const struct ex_dra *d, const char *node, int n_gpu, int num_gpu, char *why, size_t len) {
    uint32_t mask = d ? ex_dra_gpus(d, node) : 0;
    if (n_gpu < 32)
        mask &= (1u << n_gpu) - 1;
    int plugin = n_gpu - __builtin_popcount(mask);
    if (!mask || plugin >= num_gpu)
        return false;
    char g[64];
    list_gpus(mask, g, sizeof(g));
    snprintf(why, len, "%d GPU(s) asked, the device plugin serves %d of the node's %d: GPU %s the DRA driver's "
             "(ask through a ResourceClaim)", num_gpu, plugin, n_gpu, g);
    return true;
}

/* ------------------------------------------------------------------ judging claims */

#define MAX_DEMAND (EX_CLAIMS_MAX * EX_DRA_REQS)

struct demand {
    const struct ex_dra_claim *claim;
    const struct ex_dra_req *req;
};

/* the claim a pod's reference names: the claim when it exists (NULL when allocated: placed
 * already), else the template's spec; NULL when neither is known */
static const struct ex_dra_claim *resolve(const struct ex_dra *d, const char *ns, const struct ex_claim_ref *r) {
    long k = r->claim[0] ? claim_index(d->claims, d->n_claims, ns, r->claim) : -1;
    if (k >= 0)
        return d->claims[k].allocated ? NULL : &d->claims[k];
    if (r->tmpl[0] && (k = claim_index(d->tmpls, d->n_tmpls, ns, r->tmpl)) >= 0)
        return &d->tmpls[k];
    return NULL;
}

/* the pod's judged requests (of the driver's whole and shared classes); their number */
static int demands(const struct ex_dra *d, const struct ex_pod *p, struct demand *out) {
    int n = 0;
    for (int k = 0; k < p->claims.n; k++) {
        const struct ex_dra_claim *c = resolve(d, p->ns, &p->claims.r[k]);
        if (!c || !c->judged)
            continue;
        for (int i = 0; i < c->n_req && n < MAX_DEMAND; i++)
            if (c->req[i].cls != EX_DC_NONE)
                out[n++] = (struct demand){ c, &c->req[i] };
    }
    return n;
}

bool ex_dra_pod_judged(const struct ex_dra *d, const struct ex_pod *p) {
    struct demand dm[MAX_DEMAND];
    return d && p->claims.n && demands(d, p, dm) > 0;
}

/* what request q consumes of capacity c of device v (its requestPolicy: the default when not
 * asked, else rounded up to min + a multiple of step); -1 when v cannot grant it */
static int64_t consumes(const struct ex_dra_dev *v, const struct ex_dra_req *q, int c) {
    const struct ex_dra_cap *cap = &v->cap[c];
    if (!cap->present)
        return q->asked[c] ? -1 : 0;
    if (!v->multi)
        return q->asked[c] && q->want[c] > cap->value ? -1 : 0; /* a whole device: all of it */
    int64_t w = q->asked[c] ? q->want[c] : cap->policy ? cap->dflt : cap->value;
    if (cap->policy && q->asked[c]) {
        if (w < cap->min)
            w = cap->min;
        if (cap->step > 0 && w > cap->min) { /* min + the steps that hold w - min: past int64, none does */
            int64_t k;
            if (__builtin_add_overflow(w - cap->min, cap->step - 1, &k) ||
                __builtin_mul_overflow(k / cap->step, cap->step, &k) || __builtin_add_overflow(cap->min, k, &w))
                return -1;
        }
        if (cap->max > 0 && w > cap->max)
            return -1;
    }
    return w > cap->value ? -1 : w;
}

struct dev_state {
    const struct ex_dra_dev *v;
    int64_t free_[EX_CAPS];
    bool taken; /* a whole device allocated */
};

/* the node's current devices into st (at most max); their number */
static int node_devices(const struct ex_dra *d, const char *node, struct dev_state *st, int max) {
    size_t from, to;
    int n = 0;
    node_range(d, node, &from, &to);
    for (size_t k = from; k < to; k++) {
        if (!current(d, k, from, to))
            continue;
        for (int i = 0; i < d->slices[k].n_dev && n < max; i++) {
            const struct ex_dra_dev *v = &d->slices[k].dev[i];
            st[n].v = v;
            for (int c = 0; c < EX_CAPS; c++)
                st[n].free_[c] = v->cap[c].value - v->used[c];
            st[n].taken = !v->multi && v->n_alloc > 0;
            n++;
        }
    }
    return n;
}

/* whether device s grants q now (*use: what it takes) / ever (empty) */
static bool grants(const struct dev_state *s, const struct ex_dra_req *q, bool now, int64_t *use) {
    if (s->v->cls != q->cls || (now && s->taken))
        return false;
    for (int c = 0; c < EX_CAPS; c++) {
        int64_t w = consumes(s->v, q, c);
        if (w < 0 || (now && s->v->multi && w > s->free_[c]))
            return false;
        use[c] = w;
    }
    return true;
}

static const char *class_name(enum ex_dra_class c) {
    switch (c) {
    case EX_DC_WHOLE: return "whole";
    case EX_DC_SHARED: return "time-sliced";
    case EX_DC_MPS: return "MPS";
    case EX_DC_MIG: return "MIG";
    default: return "other";
    }
}

/* bytes as GiB (or MiB when not whole GiB) */
static void fmt_mem(int64_t b, char *out, size_t len) {
    if (b % (1 << 30) == 0)
        snprintf(out, len, "%lld GiB", (long long)(b >> 30));
    else
        snprintf(out, len, "%lld MiB", (long long)(b >> 20));
}

/* why no device of the node holds q now: what it asks and what each device has free */
static void fail_reason(const struct demand *dm, const struct dev_state *st, int n, char *why, size_t len) {
    const struct ex_dra_req *q = dm->req;
    size_t o = 0;
    o += (size_t)snprintf(why + o, len - o, "claim %s (request %s): ", dm->claim->name, q->name);
    if (q->cls == EX_DC_WHOLE) {
        int free_ = 0;
        for (int k = 0; k < n; k++)
            free_ += st[k].v->cls == EX_DC_WHOLE && !st[k].taken;
        snprintf(why + o, o < len ? len - o : 0, "%d whole DRA GPU(s) asked, %d free", q->count, free_);
        return;
    }
    int64_t m = -1, sum = 0; /* the sum for the text, held at int64's top */
    for (int k = 0; k < n && m < 0; k++)
        if (st[k].v->cls == q->cls)
            m = consumes(st[k].v, q, EX_CAP_MEMORY);
    char a[32], b[32];
    fmt_mem(m < 0 ? 0 : m, a, sizeof(a));
    int64_t cpu = q->asked[EX_CAP_COMPUTE] ? q->want[EX_CAP_COMPUTE] : 0;
    if (o < len)
        o += (size_t)snprintf(why + o, len - o, "no single %s DRA GPU has %s", class_name(q->cls), a);
    if (cpu && o < len)
        o += (size_t)snprintf(why + o, len - o, " and %lld %% compute", (long long)cpu);
    if (o < len)
        o += (size_t)snprintf(why + o, len - o, " free (free per GPU:");
    bool first = true;
    for (int k = 0; k < n && o < len; k++) {
        if (st[k].v->cls != q->cls)
            continue;
        int64_t fm = st[k].free_[EX_CAP_MEMORY] > 0 ? st[k].free_[EX_CAP_MEMORY] : 0;
        if (__builtin_add_overflow(sum, fm, &sum))
            sum = INT64_MAX;
        fmt_mem(fm, b, sizeof(b));
        o += (size_t)snprintf(why + o, len - o, "%s %s", first ? "" : ",", b);
        if (cpu && o < len)
            o += (size_t)snprintf(why + o, len - o, " %lld %%", (long long)st[k].free_[EX_CAP_COMPUTE]);
        first = false;
    }
    fmt_mem(sum, b, sizeof(b));
    if (o < len)
        snprintf(why + o, len - o, "; %s in all)", b);
}

/* the demands sorted: larger memory first (a greedy fit places the hard ones first) */
static int by_size(const void *a, const void *b) {
    const struct demand *x = a, *y = b;
    int64_t u = x->req->want[EX_CAP_MEMORY], v = y->req->want[EX_CAP_MEMORY];
    return u < v ? 1 : u > v ? -1 : 0;
}

#define NODE_DEVS 256

enum ex_verdict ex_dra_filter(const struct ex_dra *d, const struct ex_pod *p, const char *node, char *why,
                              size_t len) {
    struct demand dm[MAX_DEMAND];
    int nd = d && p->claims.n ? demands(d, p, dm) : 0;
    if (nd == 0)
        return EX_FIT;
    static _Thread_local struct dev_state st[NODE_DEVS];
    int n = node_devices(d, node, st, NODE_DEVS);
    qsort(dm, (size_t)nd, sizeof(*dm), by_size);
    for (int k = 0; k < nd; k++) {
        const struct ex_dra_req *q = dm[k].req;
        for (int c = 0; c < q->count; c++) {
            int best = -1;
            int64_t use[EX_CAPS], best_use[EX_CAPS] = { 0 };
            for (int i = 0; i < n; i++) /* best fit: the least memory free that grants it */
                if (grants(&st[i], q, true, use) &&
                    (best < 0 || st[i].free_[EX_CAP_MEMORY] < st[best].free_[EX_CAP_MEMORY])) {
                    best = i;
                    memcpy(best_use, use, sizeof(use));
                }
            if (best >= 0) {
                if (st[best].v->multi)
                    for (int x = 0; x < EX_CAPS; x++)
                        st[best].free_[x] -= best_use[x];
                else
                    st[best].taken = true;
                continue;
            }
            int ever = 0, of_class = 0;
            for (int i = 0; i < n; i++) {
                of_class += st[i].v->cls == q->cls;
                ever += grants(&st[i], q, false, use);
            }
            if (!of_class) {
                snprintf(why, len, "claim %s (request %s): the node has no %s DRA GPU of %s", dm[k].claim->name,
                         q->name, class_name(q->cls), d->driver);
                return EX_UNRESOLVABLE;
            }
            if (q->cls == EX_DC_WHOLE ? of_class < q->count : ever == 0) {
                fail_reason(&dm[k], st, n, why, len);
                return EX_UNRESOLVABLE;
            }
            fail_reason(&dm[k], st, n, why, len);
            return EX_FAIL;
        }
    }
    return EX_FIT;
}

/* x * PL_MILLI / cap (x, cap > 0; rounded up when up) at most PL_MILLI, without overflowing */
static int milli_of(int64_t x, int64_t cap, bool up) {
    int64_t p, r;
    if (x <= 0)
        return 0;
    if (__builtin_mul_overflow(x, (int64_t)PL_MILLI, &p))
        r = (int64_t)((long double)x * PL_MILLI / (long double)cap) + up; /* x over 9.2e15: r is near 1000 or more */
    else
        r = p / cap + (up && p % cap != 0);
    return r > PL_MILLI ? PL_MILLI : (int)r;
}

int ex_dra_view(const struct ex_dra *d, const struct ex_pod *p, const char *node, const struct pl_node *base,
                struct pl_node *view, struct pl_pod *q) {
    struct demand dm[MAX_DEMAND];
    int nd = d && p->claims.n ? demands(d, p, dm) : 0;
    if (nd == 0)
        return 0;
    char why[EX_REASON_MAX];
    if (ex_dra_filter(d, p, node, why, sizeof(why)) != EX_FIT)
        return -ENOSPC;
    qsort(dm, (size_t)nd, sizeof(*dm), by_size);
    const struct ex_dra_req *r = dm[0].req;
    static _Thread_local struct dev_state st[NODE_DEVS];
    int n = node_devices(d, node, st, NODE_DEVS);
    *view = *base;
    view->n_gpu = 0;
    view->gver = 0;
    memset(view->slot, 0, sizeof(view->slot));
    memset(view->plan_pat, 0, sizeof(view->plan_pat));
    memset(view->plan_ver, 0, sizeof(view->plan_ver));
    *q = (struct pl_pod){ .cpu = p->cpu, .mem = p->mem, .num_gpu = r->count, .gpu_milli = PL_MILLI };
    int milli = 0;
    for (int i = 0; i < n && view->n_gpu < PL_MAX_GPUS; i++) {
        const struct dev_state *s = &st[i];
        if (s->v->cls != r->cls)
            continue;
        int f = PL_MILLI;
        if (!s->v->multi) {
            f = s->taken ? 0 : PL_MILLI;
        } else {
            for (int c = 0; c < EX_CAPS; c++) {
                int64_t cap = s->v->cap[c].value;
                if (cap <= 0 || c == EX_CAP_CLIENTS)
                    continue;
                int fc = milli_of(s->free_[c], cap, false);
                f = fc < f ? fc : f;
                int64_t w = consumes(s->v, r, c);
                int mc = milli_of(w, cap, true);
                milli = mc > milli ? mc : milli;
            }
        }
        view->gpu_free[view->n_gpu++] = f;
    }
    if (r->cls != EX_DC_WHOLE) {
        q->num_gpu = 1;
        q->gpu_milli = milli < 1 ? 1 : milli > PL_MILLI ? PL_MILLI : milli;
    }
    return 1;
}
