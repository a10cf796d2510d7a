/* prepare.c: ResourceClaim JSON, prepared claims and their checkpoint (see prepare.h). Pure. */
#include "dra/prepare.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdi/cdi.h"
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

static int claim_from(const json_t *root, const char *driver, const char *ns, const char *name, const char *uid,
                      struct dra_claim *out, char *err, size_t errlen) {
    char got[254];
    int rc;
    if (!json_is_object(root) || !json_is_object(json_object_get(root, "metadata"))) {
        snprintf(err, errlen, "not a ResourceClaim (no metadata)");
        return -EINVAL;
    }
    const json_t *md = json_object_get(root, "metadata");
    if ((rc = take_str(md, "namespace", true, got, sizeof(got), "metadata", err, errlen)) < 0)
        return rc;
    if (strcmp(got, ns) != 0) {
        snprintf(err, errlen, "the claim is in namespace %.63s, not %.63s", got, ns);
        return -ENOENT;
    }
    if ((rc = take_str(md, "name", true, got, sizeof(got), "metadata", err, errlen)) < 0)
        return rc;
    if (strcmp(got, name) != 0) {
        snprintf(err, errlen, "the claim is named %.200s, not %.200s", got, name);
        return -ENOENT;
    }
    if ((rc = take_str(md, "uid", true, got, sizeof(got), "metadata", err, errlen)) < 0)
        return rc;
    if (strcmp(got, uid) != 0) {
        snprintf(err, errlen, "ResourceClaim %.63s/%.200s has UID %.40s, not %.40s (deleted and made again?)", ns,
                 name, got, uid);
        return -ESTALE;
    }
    gs_strlcpy(out->ns, ns, sizeof(out->ns));
    gs_strlcpy(out->name, name, sizeof(out->name));
    gs_strlcpy(out->uid, uid, sizeof(out->uid));
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
        if (!json_is_string(d) || strcmp(json_string_value(d), driver) != 0)
            continue;
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
    return 0;
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
    int rc = claim_from(root, driver, ns, name, uid, out, err, errlen);
    json_decref(root);
    if (rc < 0)
        dra_claim_free(out);
    return rc;
}

void dra_claim_cdi_name(const char *uid, char *buf, size_t len) {
    snprintf(buf, len, "claim-%s", uid);
}

void dra_claim_spec_file(const char *kind, const char *uid, char *buf, size_t len) {
    char vc[128];
    gs_strlcpy(vc, kind, sizeof(vc));
    for (char *c = vc; *c; c++)
        if (*c == '/')
            *c = '-'; /* "gpuslice.io/gpu" -> "gpuslice.io-gpu", as CDI names spec files */
    snprintf(buf, len, "%s_claim-%s.json", vc, uid);
}

size_t dra_devices_of(const struct gs_inventory *inv, struct dra_device *out, size_t max) {
    size_t n = 0;
    for (unsigned i = 0; i < inv->n_gpus && n < max; i++, n++) {
        snprintf(out[n].name, sizeof(out[n].name), "gpu-%u", inv->gpus[i].index);
        gs_strlcpy(out[n].cdi, inv->gpus[i].uuid, sizeof(out[n].cdi));
    }
    return n;
}

int dra_prepare_claim(const struct dra_claim *c, const struct dra_device *devs, size_t n_devs, const char *kind,
                      struct dra_prepared *out, char **spec, char *err, size_t errlen) {
    *spec = NULL;
    memset(out, 0, sizeof(*out));
    if (!dra_uid_valid(c->uid)) {
        snprintf(err, errlen, "claim UID '%.40s' is not a UID", c->uid);
        return -EINVAL;
    }
    gs_strlcpy(out->uid, c->uid, sizeof(out->uid));
    gs_strlcpy(out->ns, c->ns, sizeof(out->ns));
    gs_strlcpy(out->name, c->name, sizeof(out->name));
    char own[64], own_q[GS_UUID_LEN + 64];
    dra_claim_cdi_name(c->uid, own, sizeof(own));
    gs_cdi_qualified(kind, own, own_q, sizeof(own_q));
    struct gs_alloc_response a;
    memset(&a, 0, sizeof(a));
    size_t used = 0;
    char list[sizeof(a.envs[0].value)] = "";
    for (unsigned i = 0; i < c->n_results; i++) {
        const struct dra_result *r = &c->results[i];
        const struct dra_device *d = NULL;
        for (size_t k = 0; k < n_devs && !d; k++)
            if (!strcmp(devs[k].name, r->device))
                d = &devs[k];
        if (!d) {
            snprintf(err, errlen, "request %.127s: device %.63s (pool %.200s) is not a device of this node", r->request,
                     r->device, r->pool);
            return -ENODEV;
        }
        struct dra_prepared_device *p = &out->devices[out->n_devices++];
        gs_strlcpy(p->request, r->request, sizeof(p->request));
        gs_strlcpy(p->pool, r->pool, sizeof(p->pool));
        gs_strlcpy(p->device, r->device, sizeof(p->device));
        gs_strlcpy(p->share_id, r->share_id, sizeof(p->share_id));
        gs_cdi_qualified(kind, d->cdi, p->cdi[0], sizeof(p->cdi[0]));
        gs_strlcpy(p->cdi[1], own_q, sizeof(p->cdi[1]));
        int w = snprintf(list + used, sizeof(list) - used, "%s%s", used ? "," : "", d->cdi);
        used = w < 0 || (size_t)w >= sizeof(list) - used ? sizeof(list) - 1 : used + (size_t)w;
    }
    /* What the container is told of its claim: which claim, and the GPUs it was given. */
    snprintf(a.envs[0].key, sizeof(a.envs[0].key), "GPUSLICE_DRA_CLAIM");
    snprintf(a.envs[0].value, sizeof(a.envs[0].value), "%.63s/%.95s", c->ns, c->name);
    snprintf(a.envs[1].key, sizeof(a.envs[1].key), "GPUSLICE_DRA_DEVICES");
    gs_strlcpy(a.envs[1].value, list, sizeof(a.envs[1].value));
    a.n_envs = 2;
    return gs_cdi_alloc_spec(kind, own, &a, spec, err, errlen);
}

/* ---- checkpoint ----------------------------------------------------------------------------- */

#define CHECKPOINT_VERSION 1

char *dra_checkpoint_render(const struct dra_checkpoint *cp) {
    json_t *claims = json_array();
    for (size_t i = 0; claims && i < cp->n; i++) {
        const struct dra_prepared *p = &cp->claims[i];
        json_t *devs = json_array();
        for (unsigned k = 0; devs && k < p->n_devices; k++) {
            const struct dra_prepared_device *d = &p->devices[k];
            json_array_append_new(devs, json_pack("{s:s,s:s,s:s,s:s,s:[s,s]}", "request", d->request, "pool", d->pool,
                                                  "device", d->device, "shareID", d->share_id, "cdi", d->cdi[0],
                                                  d->cdi[1]));
        }
        json_array_append_new(claims, json_pack("{s:s,s:s,s:s,s:o}", "uid", p->uid, "namespace", p->ns, "name",
                                                p->name, "devices", devs));
    }
    json_t *root = json_pack("{s:i,s:o}", "version", CHECKPOINT_VERSION, "claims", claims);
    char *text = root ? json_dumps(root, JSON_INDENT(1) | JSON_SORT_KEYS) : NULL;
    json_decref(root);
    return text;
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
    if (!json_is_integer(ver) || json_integer_value(ver) != CHECKPOINT_VERSION) {
        snprintf(err, errlen, "checkpoint: version: not %d", CHECKPOINT_VERSION);
        goto out;
    }
    if (!json_is_array(claims) || json_array_size(claims) > DRA_CHECKPOINT_MAX) {
        snprintf(err, errlen, "checkpoint: claims: not a list of at most %d claims", DRA_CHECKPOINT_MAX);
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
