/* drastate.c: the kubelet's DRA manager checkpoint (drastate.h), with jansson (duplicate keys
 * refused). Everything is checked before fn sees anything: a damaged file gives nothing. */
#include "kubelet/drastate.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define KIND "DRACheckpoint"
#define API_VERSION "checkpoint.dra.kubelet.k8s.io/v1"
#define ENTRIES "ClaimInfoStateList" /* the claims' list: an embedded field, named by its type */

uint32_t gs_kl_crc32(const void *data, size_t len) {
    const unsigned char *p = data;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < len; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return c ^ 0xffffffffu;
}

/* Where a check failed, for err: "ClaimInfoStateList[I].FIELD..." built as it descends. */
struct where {
    char *err;
    size_t errlen;
};

__attribute__((format(printf, 2, 3))) static int bad(struct where *w, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, w->errlen, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* o.key as a string of 1..max bytes (optional: may be absent, null or ""). */
static int str_field(struct where *w, const char *here, json_t *o, const char *key, size_t max, bool optional) {
    json_t *v = json_object_get(o, key);
    char at[320];
    snprintf(at, sizeof(at), "%.280s.%.30s", here, key);
    if ((!v || json_is_null(v)) && optional)
        return 0;
    if (!json_is_string(v))
        return bad(w, "Data: %s: %s", at, v ? "not a string" : "missing");
    size_t n = json_string_length(v);
    if ((!n && !optional) || n > max || memchr(json_string_value(v), '\0', n))
        return bad(w, "Data: %s: %s", at, n ? "longer than its bound or with a NUL byte" : "empty");
    return 0;
}

static const char *str(json_t *o, const char *key) {
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

/* An array (or null, or absent when optional) of at most max strings of at most len bytes. */
static int str_array(struct where *w, const char *here, json_t *o, const char *key, size_t max, size_t len) {
    json_t *a = json_object_get(o, key), *v;
    char at[320];
    snprintf(at, sizeof(at), "%.280s.%.30s", here, key);
    if (!a || json_is_null(a))
        return 0;
    if (!json_is_array(a) || json_array_size(a) > max)
        return bad(w, "Data: %s: %s", at, json_is_array(a) ? "too many items" : "not an array");
    size_t i;
    json_array_foreach(a, i, v) {
        if (!json_is_string(v) || json_string_length(v) > len)
                return bad(w, "Data: %s[%zu]: not a string of at most %zu bytes", at, i, len);
    }
    return 0;
}

static int check_device(struct where *w, const char *here, json_t *d) {
    int r;
    if (!json_is_object(d))
        return bad(w, "Data: %s: %s", here, "not an object");
    if ((r = str_field(w, here, d, "PoolName", 253, false)) < 0 || (r = str_field(w, here, d, "DeviceName", 253, false)) < 0 ||
        (r = str_field(w, here, d, "ShareID", 63, true)) < 0 ||
        (r = str_array(w, here, d, "RequestNames", GS_KL_DRA_STATE_MAX_ITEMS, 253)) < 0 ||
        (r = str_array(w, here, d, "CDIDeviceIDs", GS_KL_DRA_STATE_MAX_ITEMS, 1024)) < 0)
        return r;
    return 0;
}

static int check_drivers(struct where *w, const char *here, json_t *ds) {
    char at[80];
    snprintf(at, sizeof(at), "%.60s.DriverState", here);
    if (!ds || json_is_null(ds))
        return 0;
    if (!json_is_object(ds) || json_object_size(ds) > GS_KL_DRA_STATE_MAX_ITEMS)
        return bad(w, "Data: %s: %s", at, json_is_object(ds) ? "too many drivers" : "not an object");
    const char *drv;
    json_t *st;
    json_object_foreach(ds, drv, st) {
        char at2[160];
        snprintf(at2, sizeof(at2), "%.79s[%.64s]", at, drv);
        if (!drv[0] || strlen(drv) > 253)
            return bad(w, "Data: %s: %s", at, "a driver name empty or too long");
        if (!json_is_object(st))
            return bad(w, "Data: %s: %s", at2, "not an object");
        json_t *devs = json_object_get(st, "Devices"), *d;
        if (devs && !json_is_null(devs) && (!json_is_array(devs) || json_array_size(devs) > GS_KL_DRA_STATE_MAX_ITEMS))
            return bad(w, "Data: %s.Devices: %s", at2, json_is_array(devs) ? "too many devices" : "not an array");
        size_t i;
        json_array_foreach(devs, i, d) {
            char at3[200];
            snprintf(at3, sizeof(at3), "%.159s.Devices[%zu]", at2, i);
            int r = check_device(w, at3, d);
            if (r < 0)
                return r;
        }
    }
    return 0;
}

static int check_entry(struct where *w, size_t i, json_t *e) {
    char here[48];
    snprintf(here, sizeof(here), ENTRIES "[%zu]", i);
    if (!json_is_object(e))
        return bad(w, "Data: %s: %s", here, "not an object");
    int r;
    if ((r = str_field(w, here, e, "ClaimUID", 39, false)) < 0 || (r = str_field(w, here, e, "ClaimName", 253, false)) < 0 ||
        (r = str_field(w, here, e, "Namespace", 63, false)) < 0)
        return r;
    json_t *pods = json_object_get(e, "PodUIDs"), *v;
    if (pods && !json_is_null(pods)) {
        if (!json_is_object(pods) || json_object_size(pods) > GS_KL_DRA_STATE_MAX_ITEMS)
            return bad(w, "Data: %s.PodUIDs: %s", here, json_is_object(pods) ? "too many pods" : "not an object");
        const char *uid;
        json_object_foreach(pods, uid, v) {
            size_t n = strlen(uid);
            if (!n || n > 39 || strspn(uid, "0123456789abcdefABCDEF-") != n)
                return bad(w, "Data: %s.PodUIDs: '%.40s' is not a pod UID", here, uid);
        }
    }
    return check_drivers(w, here, json_object_get(e, "DriverState"));
}

/* The Data object, checked whole; *root to json_decref. */
static int load(const char *text, size_t len, json_t **root, json_t **data, struct where *w) {
    json_error_t je;
    *root = *data = NULL;
    if (len > GS_KL_DRA_STATE_MAX) {
        snprintf(w->err, w->errlen, "over %u bytes", GS_KL_DRA_STATE_MAX);
        return -EINVAL;
    }
    if (!(*root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je))) {
        snprintf(w->err, w->errlen, "not JSON: line %d, column %d: %s", je.line, je.column, je.text);
        return -EINVAL;
    }
    json_t *d = json_object_get(*root, "Data"), *ck = json_object_get(*root, "Checksum");
    if (!json_is_object(*root) || !json_is_string(d))
        return bad(w, "no Data string: not a DRA manager checkpoint");
    if (!json_is_integer(ck) || json_integer_value(ck) < 0 || json_integer_value(ck) > 0xffffffffLL)
        return bad(w, "Checksum: not a 32-bit unsigned integer");
    uint32_t want = (uint32_t)json_integer_value(ck), got = gs_kl_crc32(json_string_value(d), json_string_length(d));
    if (want != got) {
        snprintf(w->err, w->errlen, "Checksum %u is not the CRC-32 of Data (%u): a damaged or half-written file", want,
                 got);
        return -EINVAL;
    }
    if (!(*data = json_loadb(json_string_value(d), json_string_length(d), JSON_REJECT_DUPLICATES, &je))) {
        snprintf(w->err, w->errlen, "Data: not JSON: line %d, column %d: %s", je.line, je.column, je.text);
        return -EINVAL;
    }
    if (!json_is_object(*data))
        return bad(w, "Data: not an object");
    const char *kind = json_string_value(json_object_get(*data, "kind"));
    const char *api = json_string_value(json_object_get(*data, "apiVersion"));
    if (!kind || strcmp(kind, KIND) != 0)
        return bad(w, "Data: kind '%.64s': not %s", kind ? kind : "(none)", KIND);
    if (!api || strcmp(api, API_VERSION) != 0)
        return bad(w, "Data: apiVersion '%.64s': not %s (another kubelet version's format)", api ? api : "(none)",
                   API_VERSION);
    json_t *entries = json_object_get(*data, ENTRIES), *e;
    if (!entries || (!json_is_null(entries) &&
                     (!json_is_array(entries) || json_array_size(entries) > GS_KL_DRA_STATE_MAX_ENTRIES)))
        return bad(w, "Data: " ENTRIES ": %s",
                   !entries ? "missing" : json_is_array(entries) ? "too many claims" : "not an array");
    size_t i;
    json_array_foreach(entries, i, e) {
        int r = check_entry(w, i, e);
        if (r < 0)
            return r;
    }
    return 0;
}

static void emit(json_t *e, void (*fn)(const struct gs_kl_dra_device *d, void *ctx), void *ctx) {
    json_t *pods = json_object_get(e, "PodUIDs"), *v, *st, *dev;
    const char *uid, *drv;
    json_object_foreach(pods, uid, v) {
        json_object_foreach(json_object_get(e, "DriverState"), drv, st) {
            size_t i;
            json_array_foreach(json_object_get(st, "Devices"), i, dev) {
                struct gs_kl_dra_device d = { str(e, "ClaimUID"), str(e, "Namespace"), str(e, "ClaimName"), uid, drv,
                                              str(dev, "PoolName"), str(dev, "DeviceName") };
                fn(&d, ctx);
            }
        }
    }
}

int gs_kl_dra_state_each(const char *text, size_t len, void (*fn)(const struct gs_kl_dra_device *d, void *ctx),
                         void *ctx, char *err, size_t errlen) {
    struct where w = { err, errlen };
    json_t *root, *data;
    int r = load(text, len, &root, &data, &w);
    if (r == 0) {
        json_t *e;
        size_t i;
        json_array_foreach(json_object_get(data, ENTRIES), i, e) emit(e, fn, ctx);
    }
    json_decref(data);
    json_decref(root);
    return r;
}

/* Copies [p, p+n) into buf (size cap) if it is 1..cap-1 bytes of lower-case letters, digits, '-'
 * and '.' (a DNS subdomain; UIDs are of hex digits and '-'). */
static bool part(const char *p, size_t n, char *buf, size_t cap) {
    if (!n || n >= cap || strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789-.") < n)
        return false;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return true;
}

int gs_kl_pod_log_dir_parse(const char *name, char ns[64], char pod[GS_KL_POD_NAME_MAX], char uid[40]) {
    const char *a = strchr(name, '_'), *b = a ? strchr(a + 1, '_') : NULL;
    if (!a || !b || strchr(b + 1, '_') || !part(name, (size_t)(a - name), ns, 64) ||
        !part(a + 1, (size_t)(b - a - 1), pod, GS_KL_POD_NAME_MAX) || !part(b + 1, strlen(b + 1), uid, 40)) {
        ns[0] = pod[0] = uid[0] = '\0';
        return -EINVAL;
    }
    return 0;
}
