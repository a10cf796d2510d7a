/* nvconfig.c: NVIDIA's opaque configs translated, another driver's refused (see nvconfig.h). Pure. */
#include "dra/nvconfig.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "util/quantity.h"
#include "util/util.h"

int dra_config_fields_known(const struct json_t *config, const char *path, const char *known, char *err,
                            size_t errlen) {
    const json_t *o = (const json_t *)config;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)o, k, v) {
        size_t n = strlen(k);
        bool found = false;
        for (const char *at = known; !found && *at; at += strcspn(at, " "), at += *at == ' ') {
            size_t w = strcspn(at, " ");
            found = w == n && !strncmp(at, k, n);
        }
        if (!found) {
            snprintf(err, errlen, "%s%.64s: unknown field (%s has %s)", path, k, path[0] ? path : "the config", known);
            return -EINVAL;
        }
    }
    return 0;
}

/* o[key], NULL when absent or null (Go's nil); -EINVAL when present but not an object. */
static int nv_object(const json_t *o, const char *key, const char *path, const json_t **out, char *err, size_t errlen) {
    const json_t *v = json_object_get(o, key);
    *out = json_is_null(v) ? NULL : v;
    if (*out && !json_is_object(*out)) {
        snprintf(err, errlen, "%s%s: not an object", path, key);
        return -EINVAL;
    }
    return 0;
}

/* A resource.Quantity of pinned memory: a string or a non-negative integer, at least 1 MiB
 * (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT is set in whole MiB, as NVIDIA's driver does). */
static int nv_pinned(const json_t *v, const char *field, unsigned long long *out, char *err, size_t errlen) {
    int64_t q = -1;
    if (json_is_integer(v))
        q = json_integer_value(v);
    else if (json_is_string(v) && gs_quantity_parse(json_string_value(v), 0, 0, &q) < 0)
        q = -1;
    if (q < 0) {
        snprintf(err, errlen, "%s: %s%.64s%s is not a quantity of bytes (Kubernetes' quantity syntax, not negative)",
                 field, json_is_string(v) ? "'" : "", json_is_string(v) ? json_string_value(v) : "a value",
                 json_is_string(v) ? "'" : "");
        return -EINVAL;
    }
    *out = (unsigned long long)q;
    if (*out < (1ULL << 20)) {
        snprintf(err, errlen, "%s: %llu bytes, under 1Mi (the limit is set in whole MiB)", field, *out);
        return -EINVAL;
    }
    return 0;
}

static int nv_mps(const json_t *m, bool mig, struct dra_gpu_config *out, char *err, size_t errlen) {
    static const char *const p = "sharing.mpsConfig.";
    int rc;
    if (!m)
        return 0;
    if ((rc = dra_config_fields_known(m, p, "defaultActiveThreadPercentage defaultPinnedDeviceMemoryLimit "
                              "defaultPerDevicePinnedMemoryLimit", err, errlen)) < 0)
        return rc;
    if (mig && json_object_size(m) > 0) {
        snprintf(err, errlen, "sharing.mpsConfig: gpuslice runs no MPS daemon on a MIG device (ask an MPS GPU of the "
                 "policy's, whole)");
        return -EINVAL;
    }
    const json_t *pct = json_object_get(m, "defaultActiveThreadPercentage");
    if (pct && !json_is_null(pct)) {
        if (!json_is_integer(pct) || json_integer_value(pct) < 0 || json_integer_value(pct) > 100) {
            snprintf(err, errlen, "%sdefaultActiveThreadPercentage: not an integer 0..100", p);
            return -EINVAL;
        }
        if (json_integer_value(pct) == 0) {
            snprintf(err, errlen, "%sdefaultActiveThreadPercentage: 0 would leave the client no threads (1..100)", p);
            return -EINVAL;
        }
        out->mps_thread_pct = (unsigned)json_integer_value(pct);
    }
    const json_t *def = json_object_get(m, "defaultPinnedDeviceMemoryLimit");
    if (def && !json_is_null(def) &&
        (rc = nv_pinned(def, "sharing.mpsConfig.defaultPinnedDeviceMemoryLimit", &out->mps_pinned, err, errlen)) < 0)
        return rc;
    const json_t *per = json_object_get(m, "defaultPerDevicePinnedMemoryLimit");
    if (!per || json_is_null(per))
        return 0;
    if (!json_is_object(per) || json_object_size(per) > DRA_MPS_MAX_PINNED) {
        snprintf(err, errlen, "%sdefaultPerDevicePinnedMemoryLimit: not a map of at most %d devices to quantities", p,
                 DRA_MPS_MAX_PINNED);
        return -EINVAL;
    }
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)per, k, v) {
        char field[160];
        snprintf(field, sizeof(field), "%sdefaultPerDevicePinnedMemoryLimit.%.64s", p, k);
        if (!k[0] || strlen(k) >= sizeof(out->mps_pinned_per[0].device)) {
            snprintf(err, errlen, "%s: not a device index or UUID", field);
            return -EINVAL;
        }
        unsigned i = out->n_mps_pinned_per;
        if ((rc = nv_pinned(v, field, &out->mps_pinned_per[i].bytes, err, errlen)) < 0)
            return rc;
        gs_strlcpy(out->mps_pinned_per[i].device, k, sizeof(out->mps_pinned_per[i].device));
        out->n_mps_pinned_per++;
    }
    return 0;
}

static int nv_sharing(const json_t *sh, bool mig, struct dra_gpu_config *out, char *err, size_t errlen) {
    int rc;
    if ((rc = dra_config_fields_known(sh, "sharing.", mig ? "strategy mpsConfig" : "strategy timeSlicingConfig mpsConfig", err,
                        errlen)) < 0)
        return rc;
    const json_t *st = json_object_get(sh, "strategy"), *ts, *mps;
    const char *s = json_string_value(st);
    if (!s) {
        snprintf(err, errlen, "sharing.strategy: %s (TimeSlicing or MPS)", st ? "not a string" : "missing");
        return -EINVAL;
    }
    bool is_ts = !strcmp(s, "TimeSlicing"), is_mps = !strcmp(s, "MPS");
    if (!is_ts && !is_mps) {
        snprintf(err, errlen, "sharing.strategy: '%.64s' is not TimeSlicing or MPS", s);
        return -EINVAL;
    }
    if ((rc = nv_object(sh, "timeSlicingConfig", "sharing.", &ts, err, errlen)) < 0 ||
        (rc = nv_object(sh, "mpsConfig", "sharing.", &mps, err, errlen)) < 0)
        return rc;
    if ((is_ts && mps) || (is_mps && ts)) {
        snprintf(err, errlen, "sharing.%s: set with strategy %s", is_ts ? "mpsConfig" : "timeSlicingConfig", s);
        return -EINVAL;
    }
    if (ts) {
        if ((rc = dra_config_fields_known(ts, "sharing.timeSlicingConfig.", "interval", err, errlen)) < 0)
            return rc;
        const json_t *iv = json_object_get(ts, "interval");
        const char *i = json_string_value(iv);
        if (iv && !json_is_null(iv) && !i) {
            snprintf(err, errlen, "sharing.timeSlicingConfig.interval: not a string (Default, Short, Medium, Long)");
            return -EINVAL;
        }
        if (i && strcmp(i, "Default") != 0) {
            bool known = !strcmp(i, "Short") || !strcmp(i, "Medium") || !strcmp(i, "Long");
            snprintf(err, errlen,
                     known ? "sharing.timeSlicingConfig.interval: %.64s: gpuslice leaves the GPU's hardware time slice "
                             "as it is (Default only; the guard shares the GPU by compute percentage instead)"
                           : "sharing.timeSlicingConfig.interval: '%.64s' is not Default, Short, Medium or Long",
                     i);
            return -EINVAL;
        }
    }
    if (is_mps && mig) {
        snprintf(err, errlen, "sharing.strategy: MPS: gpuslice runs no MPS daemon on a MIG device (ask an MPS GPU of "
                 "the policy's, whole)");
        return -EINVAL;
    }
    if ((rc = nv_mps(mps, mig, out, err, errlen)) < 0)
        return rc;
    if (mig)
        return 0; /* time-slicing a MIG device: its claim's containers share it, nothing to set */
    out->set = true;
    out->strategy = is_ts ? DRA_SHARING_TIME_SLICING : DRA_SHARING_MPS;
    return 0;
}

int dra_nv_config_parse(const char *params, struct dra_gpu_config *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    json_t *root = json_loads(params ? params : "null", JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
    int rc = -EINVAL;
    const char *api = json_string_value(json_object_get(root, "apiVersion"));
    const char *kind = json_string_value(json_object_get(root, "kind"));
    const json_t *sh = NULL;
    if (!json_is_object(root))
        snprintf(err, errlen, "parameters: not a JSON object (each key once)");
    else if (!api || strcmp(api, DRA_NV_API_VERSION) != 0)
        snprintf(err, errlen, "apiVersion: %s%.64s%s, not %s", api ? "'" : "", api ? api : "missing or not a string",
                 api ? "'" : "", DRA_NV_API_VERSION);
    else if (!kind)
        snprintf(err, errlen, "kind: missing or not a string (GpuConfig or MigDeviceConfig)");
    else if (!strcmp(kind, "VfioDeviceConfig") || !strncmp(kind, "ComputeDomain", 13))
        snprintf(err, errlen, "kind: %.64s: gpuslice has no %s", kind,
                 kind[0] == 'V' ? "VFIO pass-through" : "ComputeDomains (IMEX channels)");
    else if (strcmp(kind, "GpuConfig") != 0 && strcmp(kind, "MigDeviceConfig") != 0)
        snprintf(err, errlen, "kind: '%.64s' is not GpuConfig or MigDeviceConfig", kind);
    else if ((rc = dra_config_fields_known(root, "", "apiVersion kind sharing", err, errlen)) == 0 &&
             (rc = nv_object(root, "sharing", "", &sh, err, errlen)) == 0) {
        bool mig = !strcmp(kind, "MigDeviceConfig");
        out->kind = mig ? DRA_CONFIG_NV_MIG : DRA_CONFIG_NV_GPU;
        rc = sh ? nv_sharing(sh, mig, out, err, errlen) : 0;
    }
    json_decref(root);
    if (rc < 0) {
        enum dra_config_kind k = out->kind;
        memset(out, 0, sizeof(*out));
        out->kind = k;
    }
    return rc;
}

int dra_opaque_config_parse(const char *params, struct dra_gpu_config *out, char *label, size_t labellen, char *err,
                            size_t errlen) {
    json_t *root = json_loads(params ? params : "null", JSON_DECODE_ANY, NULL);
    const char *api = json_string_value(json_object_get(root, "apiVersion"));
    const char *kind = json_string_value(json_object_get(root, "kind"));
    bool nv = api && !strcmp(api, DRA_NV_API_VERSION);
    int rc = 1; /* gpuslice's, or nobody's apiVersion: dra_gpu_config_parse says what is wrong */
    snprintf(label, labellen, "%.64s %.64s", nv ? DRA_NV_API_VERSION : DRA_CONFIG_API_VERSION,
             nv && kind ? kind : DRA_CONFIG_KIND);
    memset(out, 0, sizeof(*out));
    if (nv)
        rc = dra_nv_config_parse(params, out, err, errlen);
    else if (api && strcmp(api, DRA_CONFIG_API_VERSION) != 0) {
        snprintf(err, errlen, "apiVersion: '%.64s' is not %s (gpuslice's GpuConfig) or %s (NVIDIA's GpuConfig, "
                 "MigDeviceConfig)", api, DRA_CONFIG_API_VERSION, DRA_NV_API_VERSION);
        rc = -EINVAL;
    }
    json_decref(root);
    return rc;
}

/* The device's pinned limit of cfg: its entry by the index the claim gives it ("0": an MPS claim
 * talks to one GPU's daemon) or its UUID, else the default. -EINVAL for an entry naming no device. */
static int pinned_of(const struct dra_gpu_config *cfg, const struct dra_result *r, const struct dra_device *d,
                     unsigned long long *out, char *err, size_t errlen) {
    *out = cfg->mps_pinned;
    for (unsigned i = 0; i < cfg->n_mps_pinned_per; i++) {
        const char *k = cfg->mps_pinned_per[i].device;
        if (strcmp(k, "0") != 0 && strcmp(k, d->cdi) != 0) {
            snprintf(err, errlen,
                     "request %.127s: device %.63s: sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit.%.63s: not "
                     "the device's index (0: an MPS claim is one GPU's client) or UUID (%.63s)",
                     r->request, r->device, k, d->cdi);
            return -EINVAL;
        }
        *out = cfg->mps_pinned_per[i].bytes;
    }
    return 0;
}

int dra_config_apply(const struct dra_gpu_config *cfg, const struct dra_result *r, const struct dra_device *d,
                     struct dra_share *share, char *err, size_t errlen) {
    if (!cfg)
        return 0;
    bool mig = d->sharing == DRA_SHARING_MIG;
    if ((cfg->kind == DRA_CONFIG_NV_MIG && !mig) || (cfg->kind == DRA_CONFIG_NV_GPU && mig)) {
        snprintf(err, errlen, "request %.127s: device %.63s is %s, but its config is a %s (GpuConfig configures whole "
                 "GPUs, MigDeviceConfig MIG devices)", r->request, r->device, mig ? "a MIG device" : "a GPU",
                 cfg->kind == DRA_CONFIG_NV_MIG ? "MigDeviceConfig" : "GpuConfig");
        return -EINVAL;
    }
    if (!cfg->set || cfg->strategy != DRA_SHARING_MPS || d->sharing != DRA_SHARING_MPS)
        return 0;
    unsigned long long pinned;
    int rc = pinned_of(cfg, r, d, &pinned, err, errlen);
    if (rc < 0)
        return rc;
    if (pinned > d->mem_total) {
        snprintf(err, errlen, "request %.127s: device %.63s: the config's pinned memory limit %llu bytes is more than "
                 "the GPU's %llu", r->request, r->device, pinned, d->mem_total);
        return -EINVAL;
    }
    if (pinned && (!share->memory || pinned < share->memory))
        share->memory = pinned;
    if (cfg->mps_thread_pct && (!share->compute || cfg->mps_thread_pct < share->compute))
        share->compute = cfg->mps_thread_pct;
    return 0;
}

bool dra_config_names_request(const char *name, const char *request) {
    size_t n = strlen(name);
    return !strncmp(request, name, n) && (request[n] == '\0' || request[n] == '/');
}

int dra_config_foreign(const struct json_t *config, const struct json_t *results, const char *driver, size_t index,
                       char *err, size_t errlen) {
    const json_t *c = (const json_t *)config;
    const char *theirs = json_string_value(json_object_get(json_object_get(c, "opaque"), "driver"));
    const json_t *reqs = json_object_get(c, "requests");
    bool ours = false, honoured = false;
    size_t i, k;
    const json_t *r, *q;
    json_array_foreach((json_t *)results, i, r) {
        const char *req = json_string_value(json_object_get(r, "request"));
        const char *drv = json_string_value(json_object_get(r, "driver"));
        bool named = json_array_size(reqs) == 0;
        json_array_foreach(reqs, k, q) named = named || (req && json_is_string(q) && dra_config_names_request(json_string_value(q), req));
        if (!named || !drv)
            continue;
        ours = ours || !strcmp(drv, driver);
        honoured = honoured || (theirs && !strcmp(drv, theirs));
    }
    if (!ours || honoured)
        return 0;
    snprintf(err, errlen,
             "status.allocation.devices.config[%zu]: opaque.driver %s%.127s%s, but its requests are served by %s, "
             "which reads only its own configs: no driver would honour it (set opaque.driver: %s)",
             index, theirs ? "'" : "", theirs ? theirs : "missing", theirs ? "'" : "", driver, driver);
    return -EINVAL;
}
