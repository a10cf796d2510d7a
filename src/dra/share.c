/* share.c: a claim's share of a GPU and its enforcement (see share.h). Pure. */
#include "dra/share.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "../guard/guard_layout.h"
#include "dra/nvconfig.h"
#include "dra/prepare.h"
#include "util/quantity.h"
#include "util/util.h"

static const char *strategy_name(enum dra_sharing s) {
    switch (s) {
    case DRA_SHARING_TIME_SLICING: return "TimeSlicing";
    case DRA_SHARING_MPS: return "MPS";
    case DRA_SHARING_MIG: return "MIG";
    case DRA_SHARING_EXCLUSIVE: break;
    }
    return "exclusive";
}

static int expect_str(const json_t *o, const char *key, const char *want, char *err, size_t errlen) {
    const json_t *v = json_object_get(o, key);
    if (!json_is_string(v)) {
        snprintf(err, errlen, "%s: %s", key, v ? "not a string" : "missing");
        return -EINVAL;
    }
    if (strcmp(json_string_value(v), want) != 0) {
        snprintf(err, errlen, "%s: '%.64s', not %s", key, json_string_value(v), want);
        return -EINVAL;
    }
    return 0;
}

int dra_gpu_config_parse(const char *params, struct dra_gpu_config *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    json_t *root = json_loads(params ? params : "null", JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
    int rc = -EINVAL;
    if (!json_is_object(root)) {
        snprintf(err, errlen, "parameters: not an object (apiVersion %s, kind %s)", DRA_CONFIG_API_VERSION,
                 DRA_CONFIG_KIND);
        goto out;
    }
    if ((rc = expect_str(root, "apiVersion", DRA_CONFIG_API_VERSION, err, errlen)) < 0 ||
        (rc = expect_str(root, "kind", DRA_CONFIG_KIND, err, errlen)) < 0 ||
        (rc = dra_config_fields_known(root, "", "apiVersion kind sharing", err, errlen)) < 0)
        goto out;
    rc = -EINVAL;
    const json_t *sh = json_object_get(root, "sharing");
    if (!sh) {
        rc = 0;
        goto out;
    }
    if (!json_is_object(sh)) {
        snprintf(err, errlen, "sharing: not an object");
        goto out;
    }
    if ((rc = dra_config_fields_known(sh, "sharing.", "strategy", err, errlen)) < 0)
        goto out;
    rc = -EINVAL;
    const json_t *st = json_object_get(sh, "strategy");
    const char *s = json_string_value(st);
    if (!s) {
        snprintf(err, errlen, "sharing.strategy: %s (TimeSlicing or MPS)", st ? "not a string" : "missing");
        goto out;
    }
    if (!strcmp(s, "TimeSlicing"))
        out->strategy = DRA_SHARING_TIME_SLICING;
    else if (!strcmp(s, "MPS"))
        out->strategy = DRA_SHARING_MPS;
    else {
        snprintf(err, errlen, "sharing.strategy: '%.64s' is not TimeSlicing or MPS", s);
        goto out;
    }
    out->set = true;
    rc = 0;
out:
    json_decref(root);
    return rc;
}

static bool config_names(const struct dra_config *c, const char *request) {
    if (c->n_requests == 0)
        return true;
    for (unsigned i = 0; i < c->n_requests; i++)
        if (dra_config_names_request(c->requests[i], request))
            return true;
    return false;
}

void dra_claim_configs_decode(const struct dra_claim *c, struct dra_claim_configs *out) {
    out->n = c->n_configs < DRA_MAX_CONFIGS ? c->n_configs : DRA_MAX_CONFIGS;
    for (unsigned i = 0; i < out->n; i++) {
        out->c[i].why[0] = '\0';
        int rc = dra_opaque_config_parse(c->configs[i].parameters, &out->c[i].cfg, out->c[i].label,
                                         sizeof(out->c[i].label), out->c[i].why, sizeof(out->c[i].why));
        if (rc == 1) /* gpuslice's own */
            rc = dra_gpu_config_parse(c->configs[i].parameters, &out->c[i].cfg, out->c[i].why, sizeof(out->c[i].why));
        out->c[i].rc = rc;
    }
}

int dra_config_for(const struct dra_claim *c, const struct dra_claim_configs *d, const char *request,
                   struct dra_gpu_config *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    for (int pass = 0; pass < 2; pass++) { /* the class's first, then the claim's, which win */
        for (unsigned i = 0; i < c->n_configs && i < d->n; i++) {
            const struct dra_config *cf = &c->configs[i];
            if (cf->from_class != (pass == 0) || !config_names(cf, request))
                continue;
            if (d->c[i].rc < 0) {
                snprintf(err, errlen, "opaque config %u for request %.127s (%s, from the %s): %s", i, request,
                         d->c[i].label, cf->from_class ? "DeviceClass" : "claim", d->c[i].why);
                return -EINVAL;
            }
            if (d->c[i].cfg.set || d->c[i].cfg.kind != DRA_CONFIG_GPUSLICE)
                *out = d->c[i].cfg;
        }
    }
    return 0;
}

/* consumedCapacity[name] of r in *v: 1 found, 0 absent, -EINVAL (the error written). */
static int capacity_of(const struct dra_result *r, const char *name, unsigned long long *v, char *err,
                       size_t errlen) {
    for (unsigned i = 0; i < r->n_capacity; i++) {
        if (strcmp(r->capacity[i].name, name) != 0)
            continue;
        /* bytes and percents are whole: a fraction of either is refused, not rounded */
        int64_t q;
        int e = gs_quantity_parse(r->capacity[i].quantity, 0, GS_QTY_EXACT, &q);
        if (e < 0 || q < 0) {
            snprintf(err, errlen, "request %.127s: device %.63s: consumedCapacity.%s '%.63s' is not a quantity (%s)",
                     r->request, r->device, name, r->capacity[i].quantity,
                     e == -EDOM ? "not a whole number" : e == -EINVAL ? "Kubernetes' syntax: 20Gi, 30" : "out of range");
            return -EINVAL;
        }
        *v = (unsigned long long)q;
        return 1;
    }
    return 0;
}

int dra_share_of(const struct dra_result *r, const struct dra_device *d, const struct dra_gpu_config *cfg,
                 struct dra_share *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    out->sharing = d->sharing;
    if (cfg && cfg->set && cfg->strategy != d->sharing &&
        !(cfg->strategy == DRA_SHARING_TIME_SLICING && d->sharing == DRA_SHARING_EXCLUSIVE)) {
        snprintf(err, errlen,
                 "request %.127s: its GpuConfig asks sharing.strategy %s, but device %.63s is %s by the node's policy "
                 "(one mode per GPU: ask a device of the driver's %s class, %s.<driver>)",
                 r->request, strategy_name(cfg->strategy), r->device,
                 d->sharing == DRA_SHARING_EXCLUSIVE ? "a whole GPU" : strategy_name(d->sharing),
                 cfg->strategy == DRA_SHARING_MPS ? "MPS" : "time-sliced",
                 cfg->strategy == DRA_SHARING_MPS ? "mps" : "shared");
        return -EINVAL;
    }
    if (d->sharing != DRA_SHARING_TIME_SLICING && d->sharing != DRA_SHARING_MPS)
        return dra_config_apply(cfg, r, d, out, err, errlen); /* a whole GPU or a MIG device: all of it */
    unsigned long long mem = 0, pct = 0;
    int hm = capacity_of(r, "memory", &mem, err, errlen), hc = hm < 0 ? hm : capacity_of(r, "compute", &pct, err, errlen);
    if (hm < 0 || hc < 0)
        return -EINVAL;
    if (!hm && d->sharing == DRA_SHARING_TIME_SLICING) {
        snprintf(err, errlen,
                 "request %.127s: device %.63s is shared, but its allocation has no consumedCapacity.memory (the "
                 "guard's quota)", r->request, r->device);
        return -EINVAL;
    }
    if (hm && (mem == 0 || mem > d->mem_total)) {
        snprintf(err, errlen, "request %.127s: consumedCapacity.memory %llu bytes: not within 1..%llu (device %.63s)",
                 r->request, mem, d->mem_total, r->device);
        return -EINVAL;
    }
    if (hc && (pct < 1 || pct > 100)) {
        snprintf(err, errlen, "request %.127s: consumedCapacity.compute %llu: not a percentage 1..100 (device %.63s)",
                 r->request, pct, r->device);
        return -EINVAL;
    }
    out->memory = mem;
    out->compute = hc ? (unsigned)pct : (d->sharing == DRA_SHARING_MPS ? 100 : 0);
    return dra_config_apply(cfg, r, d, out, err, errlen);
}

int dra_share_guard_limits(const struct dra_share *shares, const struct dra_device *const *devs, unsigned n,
                           struct gs_guard_limits *l) {
    struct gs_guard_row rows[GS_GUARD_MAX_DEVICES];
    unsigned m = 0;
    for (unsigned k = 0; k < n; k++) {
        if (shares[k].sharing != DRA_SHARING_TIME_SLICING)
            continue;
        if (m == GS_GUARD_MAX_DEVICES)
            return -E2BIG;
        rows[m++] = (struct gs_guard_row){ (int)k, devs[k]->cdi, shares[k].memory, shares[k].compute,
                                           gs_arch_name(devs[k]->arch) };
    }
    return gs_guard_limits_build(rows, m, GS_GUARD_REGION_IN_CONTAINER, l) < 0 ? -E2BIG : (int)m;
}

static int mps_edits(const struct dra_share *shares, const struct dra_device *const *devs, unsigned n,
                     struct gs_alloc_response *a, char *err, size_t errlen) {
    const struct dra_device *daemon = NULL;
    unsigned pct = 0;
    unsigned long long pinned = 0;
    for (unsigned k = 0; k < n; k++) {
        if (shares[k].sharing != DRA_SHARING_MPS)
            continue;
        if (daemon && strcmp(daemon->cdi, devs[k]->cdi) != 0) {
            snprintf(err, errlen, "MPS devices %.63s and %.63s in one claim: an MPS client talks to one GPU's daemon",
                     daemon->name, devs[k]->name);
            return -EXDEV;
        }
        daemon = devs[k];
        pct += shares[k].compute;
        pinned += shares[k].memory;
    }
    if (!daemon)
        return 0;
    char pipe[400], shm[300], v_pct[16], v_pin[40];
    snprintf(pipe, sizeof(pipe), "%s/%s/pipe", daemon->mps_root, daemon->cdi);
    snprintf(shm, sizeof(shm), "%s/shm", daemon->mps_root);
    snprintf(v_pct, sizeof(v_pct), "%u", pct > 100 ? 100 : pct);
    /* the client sees one device, which MPS numbers 0 */
    snprintf(v_pin, sizeof(v_pin), "0=%lluM", (pinned >> 20) ? pinned >> 20 : 1);
    if (gs_alloc_add_mount(a, GS_MPS_PIPE_IN_CONTAINER, pipe, false) < 0 || gs_alloc_add_mount(a, "/dev/shm", shm, false) < 0 ||
        gs_alloc_add_env(a, "CUDA_MPS_PIPE_DIRECTORY", GS_MPS_PIPE_IN_CONTAINER) < 0 ||
        gs_alloc_add_env(a, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", v_pct) < 0 ||
        (pinned && gs_alloc_add_env(a, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", v_pin) < 0)) {
        snprintf(err, errlen, "MPS root %.200s: its paths do not fit the claim's CDI edits", daemon->mps_root);
        return -ENAMETOOLONG;
    }
    return 0;
}

int dra_share_edits(const struct dra_share *shares, const struct dra_device *const *devs, unsigned n,
                    const char *guard_dir, const char *guard_lib, const char *preload, struct gs_alloc_response *a,
                    char *err, size_t errlen) {
    if (guard_dir && guard_dir[0]) {
        char limits[300], state[300];
        snprintf(limits, sizeof(limits), "%s/limits", guard_dir);
        snprintf(state, sizeof(state), "%s/state", guard_dir);
        if (strlen(guard_dir) > 250 || gs_alloc_add_mount(a, DRA_GUARD_LIB_IN_CONTAINER, guard_lib, true) < 0 ||
            gs_alloc_add_mount(a, DRA_GUARD_CONF_IN_CONTAINER, limits, true) < 0 ||
            gs_alloc_add_mount(a, DRA_GUARD_STATE_IN_CONTAINER, state, false) < 0 ||
            gs_alloc_add_mount(a, "/etc/ld.so.preload", preload, true) < 0 ||
            gs_alloc_add_env(a, "GPUSLICE_GUARD_CONFIG", DRA_GUARD_CONF_IN_CONTAINER) < 0) {
            snprintf(err, errlen, "the guard's paths (%.200s) do not fit the claim's CDI edits", guard_dir);
            return -ENAMETOOLONG;
        }
    }
    return mps_edits(shares, devs, n, a, err, errlen);
}

/* ---- one guard a container ------------------------------------------------------------------ */

static const char *str_at(const json_t *o, const char *key) {
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : "";
}

/* The claim's name of the pod's resourceClaims entry `ref`: its resourceClaimName, or the name the
 * status gives the claim made from its template ("" while it has none). */
static const char *pod_claim_name(const json_t *pod, const char *ref) {
    size_t i;
    const json_t *e;
    json_array_foreach(json_object_get(json_object_get(pod, "spec"), "resourceClaims"), i, e) {
        if (strcmp(str_at(e, "name"), ref) != 0)
            continue;
        if (str_at(e, "resourceClaimName")[0])
            return str_at(e, "resourceClaimName");
        break;
    }
    json_array_foreach(json_object_get(json_object_get(pod, "status"), "resourceClaimStatuses"), i, e)
        if (!strcmp(str_at(e, "name"), ref))
            return str_at(e, "resourceClaimName");
    return "";
}

/* The claims container ctr holds (at most max names, deduplicated), the extended-resource claim
 * among them when a request mapping names the container. */
static unsigned container_claims(const json_t *pod, const json_t *ctr, const char **names, unsigned max) {
    unsigned n = 0;
    size_t i;
    const json_t *e;
    const char *cname = str_at(ctr, "name");
    const json_t *ext = json_object_get(json_object_get(pod, "status"), "extendedResourceClaimStatus");
    json_array_foreach(json_object_get(ext, "requestMappings"), i, e) {
        if (!strcmp(str_at(e, "containerName"), cname) && str_at(ext, "resourceClaimName")[0] && n < max) {
            names[n++] = str_at(ext, "resourceClaimName");
            break;
        }
    }
    json_array_foreach(json_object_get(json_object_get(ctr, "resources"), "claims"), i, e) {
        const char *name = pod_claim_name(pod, str_at(e, "name"));
        bool seen = !name[0];
        for (unsigned k = 0; k < n && !seen; k++)
            seen = !strcmp(names[k], name);
        if (!seen && n < max)
            names[n++] = name;
    }
    return n;
}

int dra_pod_claims_beside(const char *pod_json, size_t len, const char *uid, const char *claim,
                          struct dra_beside *out, unsigned max, unsigned *n, char *err, size_t errlen) {
    *n = 0;
    json_t *pod = json_loadb(pod_json, len, 0, NULL);
    const json_t *meta = json_object_get(pod, "metadata"), *spec = json_object_get(pod, "spec");
    int rc = 0;
    if (!json_is_object(meta) || !json_is_object(spec)) {
        snprintf(err, errlen, "not a Pod (no metadata and spec)");
        rc = -EINVAL;
    } else if (uid && uid[0] && strcmp(str_at(meta, "uid"), uid) != 0) {
        snprintf(err, errlen, "pod %.200s has UID %.40s, not %.40s (made again under its name)", str_at(meta, "name"),
                 str_at(meta, "uid"), uid);
        rc = -ESTALE;
    }
    static const char *const lists[] = { "initContainers", "containers" };
    for (size_t l = 0; rc == 0 && l < GS_ARRAY_SIZE(lists); l++) {
        size_t i;
        const json_t *ctr;
        json_array_foreach(json_object_get(spec, lists[l]), i, ctr) {
            const char *names[DRA_MAX_PODS * 4];
            unsigned k = container_claims(pod, ctr, names, GS_ARRAY_SIZE(names));
            bool holds = false;
            for (unsigned j = 0; j < k && !holds; j++)
                holds = !strcmp(names[j], claim);
            for (unsigned j = 0; holds && j < k; j++) {
                if (!strcmp(names[j], claim) || *n == max)
                    continue;
                gs_strlcpy(out[*n].container, str_at(ctr, "name"), sizeof(out[*n].container));
                gs_strlcpy(out[*n].claim, names[j], sizeof(out[*n].claim));
                (*n)++;
            }
        }
    }
    json_decref(pod);
    return rc;
}

static const struct dra_prepared *guarded_prepared(const struct dra_checkpoint *cp, const char *ns, const char *name) {
    for (size_t i = 0; i < cp->n; i++) {
        const struct dra_prepared *p = &cp->claims[i];
        if (!p->pending && p->guarded && !strcmp(p->ns, ns) && !strcmp(p->name, name))
            return p;
    }
    return NULL;
}

int dra_share_one_guard(const struct dra_claim *c, const struct dra_claim_source *src, const struct dra_checkpoint *cp,
                        char *err, size_t errlen) {
    for (unsigned i = 0; i < c->n_pods; i++) {
        const struct dra_pod_ref *pr = &c->pods[i];
        char *text = NULL, why[400] = "";
        size_t len = 0;
        int rc = src->pod ? src->pod(src->ctx, c->ns, pr->name, &text, &len, why, sizeof(why)) : -ENOSYS;
        struct dra_beside beside[16];
        unsigned n = 0;
        if (rc == 0)
            rc = dra_pod_claims_beside(text, len, pr->uid, c->name, beside, GS_ARRAY_SIZE(beside), &n, why, sizeof(why));
        free(text);
        if (rc < 0) {
            snprintf(err, errlen, "pod %.63s/%.200s not read (%.300s): whether another guarded claim shares a container "
                     "with this one is not checked", c->ns, pr->name, rc == -ENOSYS ? "the claim source reads no pods" : why);
            return 1;
        }
        for (unsigned k = 0; k < n; k++) {
            if (!guarded_prepared(cp, c->ns, beside[k].claim))
                continue;
            snprintf(err, errlen,
                     "claim %.63s/%.200s: container %.63s of pod %.200s also holds claim %.200s, prepared with the guard "
                     "of a shared GPU too: a container gets one claim's guard (the limits mount at one path); ask for "
                     "both GPUs in one request of one claim (count: 2), or give the claims to two containers",
                     c->ns, c->name, beside[k].container, pr->name, beside[k].claim);
            return -EBUSY;
        }
    }
    return 0;
}
