/* prepare.c: ResourceClaim JSON, prepared claims and their checkpoint (see prepare.h). Pure. */
#include "dra/prepare.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdi/cdi.h"
#include "dra/nvconfig.h"
#include "dra/slices.h"
#include "util/util.h"

bool dra_uid_valid(const char *uid) {
    size_t n = strlen(uid);
    if (n == 0 || n > 36)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((uid[i] >= '0' && uid[i] <= '9') || (uid[i] >= 'a' && uid[i] <= 'z') || uid[i] == '-'))
            return false;
    return true;
}

int dra_guard_dir(const char *root, const char *uid, char *buf, size_t len) {
    if (!root || !root[0] || !dra_uid_valid(uid))
        return -EINVAL;
    int n = snprintf(buf, len, "%s/claim-%s", root, uid);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* o[key] as a string into dst: -EINVAL naming "where.key" when not a string, too long, or (required)
 * missing. */
static int take_str(const json_t *o, const char *key, bool required, char *dst, size_t size, const char *where,
                    char *err, size_t errlen) {
    const json_t *v = json_object_get(o, key);
    dst[0] = '\0';
    if (!v && !required)
        return 0;
    if (!json_is_string(v)) {
        snprintf(err, errlen, "%s.%s: %s", where, key, v ? "not a string" : "missing");
        return -EINVAL;
    }
    if (json_string_length(v) >= size || strlen(json_string_value(v)) != json_string_length(v)) {
        snprintf(err, errlen, "%s.%s: longer than %zu bytes or holds a NUL byte", where, key, size - 1);
        return -EINVAL;
    }
    memcpy(dst, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

/* What names an allocated device, in a claim's result and in the checkpoint alike. */
static int take_device(const json_t *o, const char *where, char request[128], char pool[254], char device[64],
                       char share_id[40], char *err, size_t errlen) {
    int rc;
    if ((rc = take_str(o, "request", true, request, 128, where, err, errlen)) < 0 ||
        (rc = take_str(o, "pool", true, pool, 254, where, err, errlen)) < 0 ||
        (rc = take_str(o, "device", true, device, 64, where, err, errlen)) < 0)
        return rc;
    return take_str(o, "shareID", false, share_id, 40, where, err, errlen);
}

static const json_t *path_get(const json_t *o, const char *a, const char *b, const char *c) {
    const char *keys[] = { a, b, c };
    for (size_t i = 0; i < 3 && o && keys[i]; i++)
        o = json_object_get(o, keys[i]);
    return o;
}

static int parse_result(const json_t *r, const char *where, struct dra_result *out, char *err, size_t errlen) {
    int rc;
    if (!json_is_object(r)) {
        snprintf(err, errlen, "%s: not an object", where);
        return -EINVAL;
    }
    if ((rc = take_device(r, where, out->request, out->pool, out->device, out->share_id, err, errlen)) < 0)
        return rc;
    const json_t *cap = json_object_get(r, "consumedCapacity");
    if (cap && !json_is_object(cap)) {
        snprintf(err, errlen, "%s.consumedCapacity: not an object", where);
        return -EINVAL;
    }
    const char *k;
    const json_t *v;
    out->n_capacity = 0;
    json_object_foreach((json_t *)cap, k, v) {
        char here[320];
        snprintf(here, sizeof(here), "%.200s.consumedCapacity", where);
        if (out->n_capacity == DRA_MAX_CAPACITY) {
            snprintf(err, errlen, "%s: more than %d entries", here, DRA_MAX_CAPACITY);
            return -EINVAL;
        }
        if (strlen(k) >= sizeof(out->capacity[0].name)) {
            snprintf(err, errlen, "%s: a name longer than %zu bytes", here, sizeof(out->capacity[0].name) - 1);
            return -EINVAL;
        }
        gs_strlcpy(out->capacity[out->n_capacity].name, k, sizeof(out->capacity[0].name));
        if ((rc = take_str(cap, k, true, out->capacity[out->n_capacity].quantity, sizeof(out->capacity[0].quantity),
                           here, err, errlen)) < 0)
            return rc;
        out->n_capacity++;
    }
    return 0;
}

static int parse_config(const json_t *c, const char *where, struct dra_config *out, char *err, size_t errlen) {
    const json_t *src = json_object_get(c, "source"), *reqs = json_object_get(c, "requests");
    out->from_class = json_is_string(src) && !strcmp(json_string_value(src), "FromClass");
    if (reqs && !json_is_array(reqs)) {
        snprintf(err, errlen, "%s.requests: not a list", where);
        return -EINVAL;
    }
    if (json_array_size(reqs) > DRA_MAX_CONFIG_REQUESTS) {
        snprintf(err, errlen, "%s.requests: more than %d", where, DRA_MAX_CONFIG_REQUESTS);
        return -EINVAL;
    }
    for (size_t i = 0; i < json_array_size(reqs); i++) {
        const json_t *r = json_array_get(reqs, i);
        if (!json_is_string(r) || json_string_length(r) >= sizeof(out->requests[0])) {
            snprintf(err, errlen, "%s.requests[%zu]: not a request name", where, i);
            return -EINVAL;
        }
        gs_strlcpy(out->requests[out->n_requests++], json_string_value(r), sizeof(out->requests[0]));
    }
    const json_t *params = path_get(c, "opaque", "parameters", NULL);
    out->parameters = json_dumps(params ? params : json_null(), JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS);
    return out->parameters ? 0 : -ENOMEM;
}

void dra_claim_free(struct dra_claim *c) {
    for (unsigned i = 0; i < c->n_configs; i++) {
        free(c->configs[i].parameters);
        c->configs[i].parameters = NULL;
    }
    c->n_configs = 0;
}

static const char *str_at(const json_t *o, const char *key) {
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : "";
}

/* status.reservedFor's pods (rf, NULL: none) into c->pods (share.h: one guard a container):
 * -EINVAL for a reservedFor that is not a list of consumers with names; other consumers skipped,
 * pods past DRA_MAX_PODS left out. */
static int take_pods(const json_t *rf, struct dra_claim *c, char *err, size_t errlen) {
    c->n_pods = 0;
    if (rf && !json_is_array(rf)) {
        snprintf(err, errlen, "status.reservedFor: not a list");
        return -EINVAL;
    }
    size_t i;
    const json_t *e;
    json_array_foreach(rf, i, e) {
        if (!json_is_object(e) || !json_is_string(json_object_get(e, "name"))) {
            snprintf(err, errlen, "status.reservedFor[%zu]: not a consumer with a name", i);
            c->n_pods = 0;
            return -EINVAL;
        }
        if (strcmp(str_at(e, "resource"), "pods") != 0 || str_at(e, "apiGroup")[0] || c->n_pods == DRA_MAX_PODS)
            continue;
        struct dra_pod_ref *p = &c->pods[c->n_pods++];
        gs_strlcpy(p->name, str_at(e, "name"), sizeof(p->name));
        gs_strlcpy(p->uid, str_at(e, "uid"), sizeof(p->uid));
    }
    return 0;
}

static int claim_from(const json_t *root, const char *driver, const char *ns, const char *name, const char *uid,
                      struct dra_claim *out, char *err, size_t errlen) {
    char got[254];
    int rc;
    if (!json_is_object(root) || !json_is_object(json_object_get(root, "metadata"))) {
        snprintf(err, errlen, "not a ResourceClaim (no metadata)");
        return -EINVAL;
    }
    const json_t *md = json_object_get(root, "metadata");
    if ((rc = take_str(md, "namespace", true, out->ns, sizeof(out->ns), "metadata", err, errlen)) < 0)
        return rc;
    if (ns && strcmp(out->ns, ns) != 0) {
        snprintf(err, errlen, "the claim is in namespace %.63s, not %.63s", out->ns, ns);
        return -ENOENT;
    }
    if ((rc = take_str(md, "name", true, out->name, sizeof(out->name), "metadata", err, errlen)) < 0)
        return rc;
    if (name && strcmp(out->name, name) != 0) {
        snprintf(err, errlen, "the claim is named %.200s, not %.200s", out->name, name);
        return -ENOENT;
    }
    if ((rc = take_str(md, "uid", true, got, sizeof(got), "metadata", err, errlen)) < 0)
        return rc;
    if (uid && strcmp(got, uid) != 0) {
        snprintf(err, errlen, "ResourceClaim %.63s/%.200s has UID %.40s, not %.40s (deleted and made again?)", out->ns,
                 out->name, got, uid);
        return -ESTALE;
    }
    if (gs_strlcpy(out->uid, got, sizeof(out->uid)) < 0 || !dra_uid_valid(out->uid)) {
        snprintf(err, errlen, "metadata.uid: '%.40s' is not a UID", got);
        return -EINVAL;
    }
    ns = out->ns;
    name = out->name;
    const json_t *devs = path_get(root, "status", "allocation", "devices");
    if (!path_get(root, "status", "allocation", NULL)) {
        snprintf(err, errlen, "ResourceClaim %.63s/%.200s is not allocated", ns, name);
        return -ENODATA;
    }
    const json_t *results = json_object_get(devs, "results"), *configs = json_object_get(devs, "config");
    if ((results && !json_is_array(results)) || (configs && !json_is_array(configs))) {
        snprintf(err, errlen, "status.allocation.devices: results and config must be lists");
        return -EINVAL;
    }
    for (size_t i = 0; i < json_array_size(results); i++) {
        const json_t *r = json_array_get(results, i);
        const json_t *d = json_object_get(r, "driver");
        if (!json_is_string(d) || strcmp(json_string_value(d), driver) != 0)
            continue; /* another driver's */
        char where[96];
        snprintf(where, sizeof(where), "status.allocation.devices.results[%zu]", i);
        if (out->n_results == DRA_MAX_RESULTS) {
            snprintf(err, errlen, "%s: more than %d devices for %s in one claim", where, DRA_MAX_RESULTS, driver);
            return -EINVAL;
        }
        if ((rc = parse_result(r, where, &out->results[out->n_results], err, errlen)) < 0)
            return rc;
        out->n_results++;
    }
    if (out->n_results == 0) {
        snprintf(err, errlen, "ResourceClaim %.63s/%.200s has no device of %s", ns, name, driver);
        return -ENODATA;
    }
    for (size_t i = 0; i < json_array_size(configs); i++) {
        const json_t *c = json_array_get(configs, i);
        const json_t *d = path_get(c, "opaque", "driver", NULL);
        if (!json_is_string(d) || strcmp(json_string_value(d), driver) != 0) {
            if ((rc = dra_config_foreign(c, results, driver, i, err, errlen)) < 0)
                return rc; /* no driver would read it */
            continue;
        }
        char where[96];
        snprintf(where, sizeof(where), "status.allocation.devices.config[%zu]", i);
        if (out->n_configs == DRA_MAX_CONFIGS) {
            snprintf(err, errlen, "%s: more than %d configs for %s", where, DRA_MAX_CONFIGS, driver);
            return -EINVAL;
        }
        if ((rc = parse_config(c, where, &out->configs[out->n_configs], err, errlen)) < 0)
            return rc;
        out->n_configs++;
    }
    return take_pods(json_object_get(json_object_get(root, "status"), "reservedFor"), out, err, errlen);
}

int dra_claim_parse(const char *json, size_t len, const char *driver, const char *ns, const char *name,
                    const char *uid, struct dra_claim *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        snprintf(err, errlen, "line %d, column %d: %s", je.line, je.column, je.text);
        return -EINVAL;
    }
    int rc = dra_claim_from_json(root, driver, ns, name, uid, out, err, errlen);
    json_decref(root);
    return rc;
}

int dra_claim_from_json(const json_t *root, const char *driver, const char *ns, const char *name, const char *uid,
                        struct dra_claim *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    int rc = claim_from(root, driver, ns, name, uid, out, err, errlen);
    if (rc < 0)
        dra_claim_free(out);
    return rc;
}

void dra_result_cdi_name(const char *uid, unsigned index, char *buf, size_t len) {
    snprintf(buf, len, "claim-%s-%u", uid, index);
}

size_t dra_request_base_len(const char *request) {
    return strcspn(request, "/");
}

bool dra_same_request(const struct dra_claim *c, unsigned i, unsigned j) {
    const char *a = c->results[i].request, *b = c->results[j].request;
    size_t n = dra_request_base_len(a);
    return n == dra_request_base_len(b) && !strncmp(a, b, n);
}

int dra_result_edits_from(struct dra_result_edits *out, const struct gs_alloc_response *a) {
    memset(out, 0, sizeof(*out));
    if (a->n_envs > GS_ALLOC_MAX_ENVS || a->n_extra_mounts > GS_ALLOC_MAX_EXTRA_MOUNTS)
        return -ENOSPC;
    out->n_envs = a->n_envs;
    memcpy(out->envs, a->envs, a->n_envs * sizeof(a->envs[0]));
    out->n_mounts = a->n_extra_mounts;
    memcpy(out->mounts, a->extra_mounts, a->n_extra_mounts * sizeof(a->extra_mounts[0]));
    return 0;
}

void dra_claim_spec_file(const char *kind, const char *uid, char *buf, size_t len) {
    char vc[128];
    gs_strlcpy(vc, kind, sizeof(vc));
    for (char *c = vc; *c; c++)
        if (*c == '/')
            *c = '-'; /* "gpuslice.io/gpu" -> "gpuslice.io-gpu", as CDI names spec files */
    snprintf(buf, len, "%s_claim-%s.json", vc, uid);
}

size_t dra_devices_of(const struct gs_inventory *inv, const struct gs_policy *policy, struct dra_device *out,
                      size_t max) {
    struct gs_plan *plan = policy ? malloc(sizeof(*plan)) : NULL;
    if (plan && gs_dra_plan(inv, policy, plan) < 0) {
        free(plan);
        plan = NULL; /* out of memory: every GPU whole, which enforces nothing a share needs */
    }
    size_t n = 0;
    for (unsigned i = 0; i < inv->n_gpus && n < max; i++, n++) {
        const struct gs_gpu *g = &inv->gpus[i];
        struct dra_device *d = &out[n];
        memset(d, 0, sizeof(*d));
        snprintf(d->name, sizeof(d->name), "gpu-%u", g->index);
        gs_strlcpy(d->cdi, g->uuid, sizeof(d->cdi));
        d->index = g->index;
        d->minor = g->minor;
        d->arch = g->arch;
        d->mem_total = g->mem_total;
        if (policy) {
            gs_strlcpy(d->mps_root, policy->mps_root, sizeof(d->mps_root));
            d->withheld = !gs_plan_dra_serves(policy, g->index, g->uuid, true);
        }
        switch (plan && i < GS_MAX_GPUS ? plan->gpus[i].mode : GS_MODE_WHOLE) {
        case GS_MODE_TIME_SLICING: d->sharing = DRA_SHARING_TIME_SLICING; break;
        case GS_MODE_MPS: d->sharing = DRA_SHARING_MPS; break;
        case GS_MODE_MIG: d->sharing = DRA_SHARING_MIG; break;
        default: d->sharing = DRA_SHARING_EXCLUSIVE; break;
        }
    }
    if (plan) {
        gs_plan_free(plan);
        free(plan);
    }
    return n;
}

int dra_resolve(const struct dra_claim *c, const struct dra_device *devs, size_t n_devs, struct dra_bound *out,
                char *err, size_t errlen) {
    for (unsigned i = 0; i < c->n_results && i < DRA_MAX_RESULTS; i++) {
        const struct dra_result *r = &c->results[i];
        struct gs_dra_device_ref *ref = &out->ref[i];
        char gpu[64];
        bool mig = gs_dra_device_parse(r->device, ref) == 0 && ref->mig;
        if (mig)
            snprintf(gpu, sizeof(gpu), "gpu-%u", ref->gpu);
        else
            memset(ref, 0, sizeof(*ref));
        const struct dra_device *d = NULL;
        for (size_t k = 0; k < n_devs && !d; k++)
            if (!strcmp(devs[k].name, mig ? gpu : r->device) && (!mig || devs[k].sharing == DRA_SHARING_MIG))
                d = &devs[k];
        out->dev[i] = NULL;
        if (!d) {
            snprintf(err, errlen, "request %.127s: device %.63s (pool %.200s) is not a device of this node%s",
                     r->request, r->device, r->pool, mig ? " (its GPU is not in MIG mode by the policy)" : "");
            return -ENODEV;
        }
        if (d->withheld) {
            snprintf(err, errlen,
                     "request %.127s: device %.63s (pool %.200s) is on GPU %u, which the policy's gpuslice.dra.gpus "
                     "does not give to the DRA driver (the device plugins serve it; allocated before the policy "
                     "changed?)",
                     r->request, r->device, r->pool, d->index);
            return -EPERM;
        }
        out->dev[i] = d;
    }
    return 0;
}

int dra_prepare_claim(const struct dra_claim *c, const struct dra_device *devs, size_t n_devs, const char *kind,
                      struct dra_prepared *out, char **spec, char *err, size_t errlen) {
    struct dra_bound b;
    *spec = NULL;
    memset(out, 0, sizeof(*out));
    if (!dra_uid_valid(c->uid)) {
        snprintf(err, errlen, "claim UID '%.40s' is not a UID", c->uid);
        return -EINVAL;
    }
    int rc = dra_resolve(c, devs, n_devs, &b, err, errlen);
    return rc < 0 ? rc : dra_prepare_claim_ex(c, b.dev, NULL, kind, out, spec, err, errlen);
}

/* A spec device's containerEdits gets the device nodes of result i. */
static int add_nodes(const struct dra_edits *e, unsigned i, json_t *dev) {
    json_t *edits = json_object_get(dev, "containerEdits"), *nodes = json_array();
    bool any = false;
    for (unsigned k = 0; nodes && e && k < e->n_nodes; k++) {
        if (e->nodes[k].result != i)
            continue;
        any = true;
        if (json_array_append_new(nodes, json_pack("{s:s,s:s,s:i,s:i}", "path", e->nodes[k].path, "type", "c", "major",
                                                   e->nodes[k].major, "minor", e->nodes[k].minor)) < 0) {
            json_decref(nodes);
            return -ENOMEM;
        }
    }
    int rc = !nodes || !edits ? -ENOMEM : !any ? 0 : json_object_set(edits, "deviceNodes", nodes) < 0 ? -ENOMEM : 0;
    json_decref(nodes);
    return rc;
}

/* GPUSLICE_DRA_DEVICES_<REQUEST> of a request: upper case, '-' and '.' as '_'; -E2BIG when it does
 * not fit len (never cut). */
static int request_env_name(const char *request, char *buf, size_t len) {
    static const char prefix[] = "GPUSLICE_DRA_DEVICES_";
    size_t n = dra_request_base_len(request), k = sizeof(prefix) - 1;
    if (k + n >= len)
        return -E2BIG;
    memcpy(buf, prefix, k);
    for (size_t j = 0; j < n; j++, k++) {
        char ch = request[j];
        buf[k] = ch == '-' || ch == '.' ? '_' : ch >= 'a' && ch <= 'z' ? (char)(ch - 'a' + 'A') : ch;
    }
    buf[k] = '\0';
    return 0;
}

/* Result i's device of the claim's spec, appended to devices: its environment, its request's
 * edits, its device nodes. */
static int result_device(const struct dra_claim *c, const struct dra_device *const *bound, const struct dra_edits *e,
                         const char *kind, unsigned i, struct gs_alloc_response *a, json_t *devices, char *err,
                         size_t errlen) {
    const struct dra_result *r = &c->results[i];
    char list[GS_ENV_VALUE_MAX], value[GS_ENV_VALUE_MAX], key[sizeof(a->envs[0].key)], name[96];
    size_t used = 0;
    memset(a, 0, sizeof(*a));
    for (unsigned j = 0; j < c->n_results && j < DRA_MAX_RESULTS; j++) {
        if (!dra_same_request(c, i, j))
            continue;
        const char *uuid = e && e->uuid[j] ? e->uuid[j] : bound[j]->cdi;
        int w = snprintf(list + used, sizeof(list) - used, "%s%s", used ? "," : "", uuid);
        if (w < 0 || (size_t)w >= sizeof(list) - used) {
            snprintf(err, errlen, "request %.127s: its devices' UUIDs are longer than GPUSLICE_DRA_DEVICES holds (%d bytes)",
                     r->request, GS_ENV_VALUE_MAX - 1);
            return -E2BIG;
        }
        used += (size_t)w;
    }
    /* What the container is told of its claim: which claim, and the devices of its request. */
    snprintf(value, sizeof(value), "%s/%s", c->ns, c->name);
    int rc = 0;
    if (request_env_name(r->request, key, sizeof(key)) < 0 || gs_alloc_add_env(a, "GPUSLICE_DRA_CLAIM", value) < 0 || gs_alloc_add_env(a, "GPUSLICE_DRA_DEVICES", list) < 0 ||
        gs_alloc_add_env(a, key, list) < 0)
        rc = -E2BIG;
    const struct dra_result_edits *x = e ? &e->extra[i] : NULL;
    for (unsigned k = 0; x && rc == 0 && k < x->n_envs; k++)
        rc = gs_alloc_add_env(a, x->envs[k].key, x->envs[k].value);
    for (unsigned k = 0; x && rc == 0 && k < x->n_mounts; k++)
        rc = gs_alloc_add_mount(a, x->mounts[k].container_path, x->mounts[k].host_path, x->mounts[k].read_only);
    if (rc < 0) {
        snprintf(err, errlen, "request %.127s: its environment and mounts do not fit its CDI edits", r->request);
        return rc;
    }
    char *text = NULL;
    dra_result_cdi_name(c->uid, i, name, sizeof(name));
    if ((rc = gs_cdi_alloc_spec(kind, name, a, &text, err, errlen)) < 0)
        return rc;
    json_t *one = json_loads(text, 0, NULL);
    free(text);
    json_t *dev = json_array_get(json_object_get(one, "devices"), 0);
    rc = !dev ? -ENOMEM : add_nodes(e, i, dev);
    if (rc == 0 && json_array_append(devices, dev) < 0)
        rc = -ENOMEM;
    json_decref(one);
    if (rc < 0)
        snprintf(err, errlen, "out of memory");
    return rc;
}

int dra_prepare_claim_ex(const struct dra_claim *c, const struct dra_device *const *bound, const struct dra_edits *e,
                         const char *kind, struct dra_prepared *out, char **spec, char *err, size_t errlen) {
    *spec = NULL;
    memset(out, 0, sizeof(*out));
    if (!dra_uid_valid(c->uid)) {
        snprintf(err, errlen, "claim UID '%.40s' is not a UID", c->uid);
        return -EINVAL;
    }
    gs_strlcpy(out->uid, c->uid, sizeof(out->uid));
    gs_strlcpy(out->ns, c->ns, sizeof(out->ns));
    gs_strlcpy(out->name, c->name, sizeof(out->name));
    struct gs_alloc_response *a = calloc(1, sizeof(*a));
    json_t *devices = json_array();
    int rc = a && devices ? 0 : -ENOMEM;
    for (unsigned i = 0; rc == 0 && i < c->n_results && i < DRA_MAX_RESULTS; i++) {
        const struct dra_result *r = &c->results[i];
        struct dra_prepared_device *p = &out->devices[out->n_devices++];
        char own[96];
        gs_strlcpy(p->request, r->request, sizeof(p->request));
        gs_strlcpy(p->pool, r->pool, sizeof(p->pool));
        gs_strlcpy(p->device, r->device, sizeof(p->device));
        gs_strlcpy(p->share_id, r->share_id, sizeof(p->share_id));
        gs_cdi_qualified(kind, bound[i]->cdi, p->cdi[0], sizeof(p->cdi[0])); /* a MIG device's: its GPU's node */
        dra_result_cdi_name(c->uid, i, own, sizeof(own));
        gs_cdi_qualified(kind, own, p->cdi[1], sizeof(p->cdi[1]));
        rc = result_device(c, bound, e, kind, i, a, devices, err, errlen);
    }
    /* the claim's spec: the first result's, with every result's device */
    json_t *root = NULL;
    if (rc == 0 && c->n_results) {
        char *text = NULL;
        memset(a, 0, sizeof(*a));
        char first[96];
        dra_result_cdi_name(c->uid, 0, first, sizeof(first));
        if ((rc = gs_cdi_alloc_spec(kind, first, a, &text, err, errlen)) == 0) {
            root = json_loads(text, 0, NULL);
            free(text);
            if (!root || json_object_set(root, "devices", devices) < 0 ||
                json_object_set_new(root, "cdiVersion", json_string(gs_cdi_min_version(root))) < 0 ||
                !(*spec = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS)))
                rc = -ENOMEM;
        }
    } else if (rc == 0) {
        snprintf(err, errlen, "the claim has no allocation results for this driver");
        rc = -ENODATA;
    }
    if (rc == -ENOMEM)
        snprintf(err, errlen, "out of memory");
    json_decref(root);
    json_decref(devices);
    free(a);
    return rc;
}

/* ---- checkpoint ----------------------------------------------------------------------------- */

char *dra_checkpoint_render(const struct dra_checkpoint *cp) {
    json_t *claims = json_array();
    for (size_t i = 0; claims && i < cp->n; i++) {
        const struct dra_prepared *p = &cp->claims[i];
        json_t *devs = json_array();
        for (unsigned k = 0; devs && k < p->n_devices; k++) {
            const struct dra_prepared_device *d = &p->devices[k];
            json_t *dj = json_pack("{s:s,s:s,s:s,s:s,s:[s,s]}", "request", d->request, "pool", d->pool, "device",
                                   d->device, "shareID", d->share_id, "cdi", d->cdi[0], d->cdi[1]);
            if (dj && d->mig.on)
                json_object_set_new(dj, "mig", json_pack("{s:i,s:i,s:i,s:i,s:i,s:s}", "gpu", (int)d->mig.gpu, "profile",
                                                         (int)d->mig.profile_id, "start", (int)d->mig.start, "gi",
                                                         d->mig.gi, "ci", d->mig.ci, "uuid", d->mig.uuid));
            json_array_append_new(devs, dj);
        }
        json_t *cj = json_pack("{s:s,s:s,s:s,s:o}", "uid", p->uid, "namespace", p->ns, "name", p->name, "devices", devs);
        if (cj && p->pending)
            json_object_set_new(cj, "pending", json_true());
        if (cj && p->guarded)
            json_object_set_new(cj, "guarded", json_true());
        json_array_append_new(claims, cj);
    }
    json_t *root = json_pack("{s:i,s:o}", "version", DRA_CHECKPOINT_VERSION, "claims", claims);
    char *text = root ? json_dumps(root, JSON_INDENT(1) | JSON_SORT_KEYS) : NULL;
    json_decref(root);
    return text;
}

/* A device's "mig" record (absent: none): GPU, profile and start within NVML's ranges, GI and CI
 * -1 or IDs, a UUID without blanks. */
static int parse_mig(const json_t *m, const char *where, struct dra_mig_made *out, char *err, size_t errlen) {
    static const struct {
        const char *key;
        long long min, max;
    } f[] = { { "gpu", 0, GS_MAX_GPUS - 1 }, { "profile", 0, 1 << 20 }, { "start", 0, 7 }, { "gi", -1, 1 << 20 },
              { "ci", -1, 1 << 20 } };
    long long v[5];
    memset(out, 0, sizeof(*out));
    if (!m)
        return 0;
    if (!json_is_object(m)) {
        snprintf(err, errlen, "%s.mig: not an object", where);
        return -EINVAL;
    }
    for (size_t i = 0; i < GS_ARRAY_SIZE(f); i++) {
        const json_t *x = json_object_get(m, f[i].key);
        if (!json_is_integer(x) || json_integer_value(x) < f[i].min || json_integer_value(x) > f[i].max) {
            snprintf(err, errlen, "%s.mig.%s: not an integer %lld..%lld", where, f[i].key, f[i].min, f[i].max);
            return -EINVAL;
        }
        v[i] = json_integer_value(x);
    }
    char mw[160];
    snprintf(mw, sizeof(mw), "%.100s.mig", where);
    int rc = take_str(m, "uuid", true, out->uuid, sizeof(out->uuid), mw, err, errlen);
    if (rc < 0)
        return rc;
    if (strpbrk(out->uuid, " \t\n/")) {
        snprintf(err, errlen, "%s.uuid: not a UUID", mw);
        return -EINVAL;
    }
    out->on = true;
    out->gpu = (unsigned)v[0];
    out->profile_id = (unsigned)v[1];
    out->start = (unsigned)v[2];
    out->gi = (int)v[3];
    out->ci = (int)v[4];
    return 0;
}

static int parse_prepared(const json_t *c, const char *where, struct dra_prepared *p, char *err, size_t errlen) {
    int rc;
    if (!json_is_object(c)) {
        snprintf(err, errlen, "%s: not an object", where);
        return -EINVAL;
    }
    if ((rc = take_str(c, "uid", true, p->uid, sizeof(p->uid), where, err, errlen)) < 0 ||
        (rc = take_str(c, "namespace", true, p->ns, sizeof(p->ns), where, err, errlen)) < 0 ||
        (rc = take_str(c, "name", true, p->name, sizeof(p->name), where, err, errlen)) < 0)
        return rc;
    if (!dra_uid_valid(p->uid)) {
        snprintf(err, errlen, "%s.uid: '%.40s' is not a UID", where, p->uid);
        return -EINVAL;
    }
    /* an older agent's "guard" named the directory: only whether there is one is kept */
    const json_t *guard = json_object_get(c, "guard"), *guarded = json_object_get(c, "guarded"),
                 *pending = json_object_get(c, "pending");
    if (guard && !json_is_string(guard)) {
        snprintf(err, errlen, "%s.guard: not a string", where);
        return -EINVAL;
    }
    if ((guarded && !json_is_boolean(guarded)) || (pending && !json_is_boolean(pending))) {
        snprintf(err, errlen, "%s.%s: not a boolean", where, guarded && !json_is_boolean(guarded) ? "guarded" : "pending");
        return -EINVAL;
    }
    p->guarded = json_is_true(guarded) || (guard && json_string_length(guard) > 0);
    p->pending = json_is_true(pending);
    const json_t *devs = json_object_get(c, "devices");
    if (!json_is_array(devs) || json_array_size(devs) > DRA_MAX_RESULTS) {
        snprintf(err, errlen, "%s.devices: not a list of at most %d devices", where, DRA_MAX_RESULTS);
        return -EINVAL;
    }
    for (size_t k = 0; k < json_array_size(devs); k++) {
        const json_t *d = json_array_get(devs, k);
        struct dra_prepared_device *pd = &p->devices[k];
        char here[96];
        snprintf(here, sizeof(here), "%.40s.devices[%zu]", where, k);
        if (!json_is_object(d)) {
            snprintf(err, errlen, "%s: not an object", here);
            return -EINVAL;
        }
        if ((rc = take_device(d, here, pd->request, pd->pool, pd->device, pd->share_id, err, errlen)) < 0)
            return rc;
        const json_t *ids = json_object_get(d, "cdi");
        if (!json_is_array(ids) || json_array_size(ids) != DRA_CDI_IDS) {
            snprintf(err, errlen, "%s.cdi: not a list of %d CDI IDs", here, DRA_CDI_IDS);
            return -EINVAL;
        }
        for (size_t j = 0; j < DRA_CDI_IDS; j++) {
            const json_t *v = json_array_get(ids, j);
            if (!json_is_string(v) || json_string_length(v) >= sizeof(pd->cdi[0]) ||
                strlen(json_string_value(v)) != json_string_length(v) || !strchr(json_string_value(v), '=')) {
                snprintf(err, errlen, "%s.cdi[%zu]: not a CDI ID (KIND=NAME)", here, j);
                return -EINVAL;
            }
            gs_strlcpy(pd->cdi[j], json_string_value(v), sizeof(pd->cdi[0]));
        }
        if ((rc = parse_mig(json_object_get(d, "mig"), here, &pd->mig, err, errlen)) < 0)
            return rc;
        p->n_devices++;
    }
    return 0;
}

int dra_checkpoint_parse(const char *text, size_t len, struct dra_checkpoint *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        snprintf(err, errlen, "checkpoint: line %d, column %d: %s", je.line, je.column, je.text);
        return -EINVAL;
    }
    int rc = -EINVAL;
    const json_t *ver = json_object_get(root, "version"), *claims = json_object_get(root, "claims");
    if (json_is_integer(ver) && json_integer_value(ver) > DRA_CHECKPOINT_VERSION) {
        snprintf(err, errlen, "checkpoint: version: %lld, newer than this agent's %d", (long long)json_integer_value(ver),
                 DRA_CHECKPOINT_VERSION);
        rc = -ENOTSUP;
        goto out;
    }
    if (!json_is_integer(ver) || json_integer_value(ver) != DRA_CHECKPOINT_VERSION) {
        snprintf(err, errlen, "checkpoint: version: not %d", DRA_CHECKPOINT_VERSION);
        goto out;
    }
    if (!json_is_array(claims)) {
        snprintf(err, errlen, "checkpoint: claims: not a list of at most %d claims", DRA_CHECKPOINT_MAX);
        goto out;
    }
    if (json_array_size(claims) > DRA_CHECKPOINT_MAX) {
        snprintf(err, errlen, "checkpoint: claims: %zu claims, more than %d", json_array_size(claims),
                 DRA_CHECKPOINT_MAX);
        goto out;
    }
    for (size_t i = 0; i < json_array_size(claims); i++) {
        struct dra_prepared *p = calloc(1, sizeof(*p));
        char where[64];
        snprintf(where, sizeof(where), "checkpoint: claims[%zu]", i);
        if (!p) {
            rc = -ENOMEM;
            goto out;
        }
        rc = parse_prepared(json_array_get(claims, i), where, p, err, errlen);
        if (rc == 0 && dra_checkpoint_find(out, p->uid)) {
            snprintf(err, errlen, "%s.uid: %s listed twice", where, p->uid);
            rc = -EINVAL;
        }
        if (rc == 0)
            rc = dra_checkpoint_put(out, p);
        free(p);
        if (rc < 0)
            goto out;
    }
    rc = 0;
out:
    json_decref(root);
    if (rc < 0)
        dra_checkpoint_free(out);
    return rc;
}

const struct dra_prepared *dra_checkpoint_find(const struct dra_checkpoint *cp, const char *uid) {
    for (size_t i = 0; i < cp->n; i++)
        if (!strcmp(cp->claims[i].uid, uid))
            return &cp->claims[i];
    return NULL;
}

struct dra_prepared *dra_checkpoint_get(struct dra_checkpoint *cp, const char *uid) {
    for (size_t i = 0; i < cp->n; i++)
        if (!strcmp(cp->claims[i].uid, uid))
            return &cp->claims[i];
    return NULL;
}

int dra_checkpoint_put(struct dra_checkpoint *cp, const struct dra_prepared *p) {
    for (size_t i = 0; i < cp->n; i++) {
        if (!strcmp(cp->claims[i].uid, p->uid)) {
            cp->claims[i] = *p;
            return 0;
        }
    }
    if (cp->n == DRA_CHECKPOINT_MAX)
        return -ENOSPC;
    if (cp->n == cp->cap) {
        size_t cap = cp->cap ? cp->cap * 2 : 8;
        struct dra_prepared *c = realloc(cp->claims, cap * sizeof(*c));
        if (!c)
            return -ENOMEM;
        cp->claims = c;
        cp->cap = cap;
    }
    cp->claims[cp->n++] = *p;
    return 0;
}

bool dra_checkpoint_remove(struct dra_checkpoint *cp, const char *uid) {
    for (size_t i = 0; i < cp->n; i++) {
        if (!strcmp(cp->claims[i].uid, uid)) {
            memmove(&cp->claims[i], &cp->claims[i + 1], (cp->n - i - 1) * sizeof(cp->claims[0]));
            cp->n--;
            return true;
        }
    }
    return false;
}

void dra_checkpoint_free(struct dra_checkpoint *cp) {
    free(cp->claims);
    memset(cp, 0, sizeof(*cp));
}
