/* policy.c: parses and validates the sharing policy file (format in policy.h and docs/policy.md):
 * NVIDIA device-plugin config files (version: v1) and gpuslice's own `gpuslice:` block.
 *
 * NVIDIA's plugin reads its file with sigs.k8s.io/yaml, which drops unknown keys without a word
 * (a misplaced `renameByDefault` under `flags` was silently ignored, NVIDIA issue #1433). Here every
 * key is checked, and settings that are valid for NVIDIA but mean nothing to gpuslice are accepted
 * with a warning, so that an NVIDIA file can be used unchanged and nobody is surprised. */
#include "policy.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <string.h>

#include "config/yamlutil.h"
#include "util/quantity.h"
#include "util/util.h"

#define MAX_REPLICAS 1024
#define MAX_PERCENT 100
#define MAX_GPU_INDEX 63
#define MAX_XID 65535
#define MAX_QUIET_S (7u * 24 * 3600)
#define DEFAULT_QUIET_S 300
#define DEFAULT_PREFIX "nvidia.com/"
#define SHARED_SUFFIX ".shared" /* NVIDIA's DefaultSharedResourceNameSuffix */
#define GS_XSTR(x) #x
#define GS_STR(x) GS_XSTR(x)

/* NVIDIA's hard-coded "application errors" (internal/rm/health.go): faults of one process, not
 * of the GPU. */
static const unsigned long long default_xids[] = { 13, 31, 43, 45, 68, 109 };

static const char *const root_keys[] = { "version", "flags", "resources", "sharing", "imex", "gpuslice", NULL };
static const char *const flags_keys[] = {
    "migStrategy",      "failOnInitError", "mpsRoot",           "nvidiaDriverRoot",        "nvidiaDevRoot",
    "gdrcopyEnabled",   "gdsEnabled",      "mofedEnabled",      "useNodeFeatureAPI",       "deviceDiscoveryStrategy",
    "plugin",           "gfd",             NULL,
};
static const char *const plugin_keys[] = {
    "passDeviceSpecs",     "deviceListStrategy", "deviceIDStrategy", "cdiAnnotationPrefix",
    "nvidiaCTKPath",       "containerDriverRoot", "kubeletSocket",   "cdiFeatureFlags",
    "sharedDevicesAllocationPolicy", NULL,
};
static const char *const gfd_keys[] = { "oneshot", "noTimestamp", "sleepInterval", "outputFile", "machineTypeFile",
                                        NULL };
static const char *const resources_keys[] = { "gpus", "mig", NULL };
static const char *const rename_rule_keys[] = { "pattern", "name", NULL };
static const char *const sharing_keys[] = { "timeSlicing", "mps", NULL };
/* sharing.timeSlicing and sharing.mps share these keys; their resources differ in the gpuslice additions. */
static const char *const ts_keys[] = { "renameByDefault", "failRequestsGreaterThanOne", "resources", NULL };
static const char *const ts_resource_keys[] = { "name", "rename", "devices", "replicas", "memoryPerReplica", NULL };
static const char *const mps_resource_keys[] = { "name", "rename", "devices", "replicas", "computePerReplica",
                                                 "pinnedMemoryPerReplica", "memoryPerReplica", NULL };
static const char *const imex_keys[] = { "channelIDs", "required", NULL };
static const char *const gpuslice_keys[] = { "gpus", "health", "mig", "mps", "coexistence", "labels", "dra", NULL };
static const char *const dra_keys[] = { "gpus", NULL };
static const char *const coexistence_keys[] = { "otherPlugin", "otherMigManager", NULL };
static const char *const labels_keys[] = { "nvidiaNames", NULL };
static const char *const gpuslice_mps_keys[] = { "exclusiveProcess", NULL };
static const char *const mig_keys[] = { "config", "layoutFile", "force", NULL };
static const char *const rule_keys[] = { "index", "uuid", "model", "mode", "replicas", "resourceName",
                                          "memoryPerReplica", "computePerReplica", "pinnedMemoryPerReplica", NULL };
static const char *const health_keys[] = { "ignoredXids", "recoveryQuietPeriod", NULL };

/* Same order as the enums in policy.h. */
static const char *const mig_values[] = { "none", "single", "mixed", NULL };
static const char *const other_plugin_values[] = { "refuse", "warn", "share", NULL };
static const char *const other_mig_manager_values[] = { "refuse", "warn", NULL };
static const char *const id_values[] = { "uuid", "index", NULL };
static const char *const alloc_values[] = { "distributed", "packed", "fragmentation", NULL };
static const char *const discovery_values[] = { "auto", "nvml", "tegra", NULL };
/* The first two map to GS_LIST_ENVVAR and GS_LIST_VOLUME_MOUNTS; the CDI ones are recognised so
 * that the message can say they are not supported rather than unknown. */
static const char *const list_values[] = { "envvar", "volume-mounts", "cdi-annotations", "cdi-cri", NULL };
/* Index + 1 = enum gs_gpu_mode. */
static const char *const mode_values[] = { "whole", "time-slicing", "mig", "disabled", "mps", "fractional", NULL };

/* ---- warnings ---- */

__attribute__((format(printf, 3, 4))) static void warn(struct gs_policy *p, const char *path, const char *fmt, ...) {
    size_t cap = GS_ARRAY_SIZE(p->warnings);
    if (p->n_warnings >= cap) {
        /* Keep the count honest rather than dropping lines silently. */
        snprintf(p->warnings[cap - 1], sizeof(p->warnings[0]), "more ignored settings than can be listed; "
                                                               "see docs/policy.md");
        return;
    }
    char *w = p->warnings[p->n_warnings++];
    size_t size = sizeof(p->warnings[0]);
    int n = snprintf(w, size, "%s: ", path);
    if (n < 0 || (size_t)n >= size)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w + n, size - (size_t)n, fmt, ap);
    va_end(ap);
}

/* ---- small readers ---- */

/* A section that is absent or written with nothing under it ("flags:" with every line below
 * commented out, which NVIDIA's plugin accepts) reads as NULL. */
static yaml_node_t *get_section(struct gs_yaml *y, const yaml_node_t *map, const char *key) {
    yaml_node_t *node = gs_yaml_map_get(y, map, key);
    return gs_yaml_is_null(node) ? NULL : node;
}

static struct gs_policy_pos pos_of(const yaml_node_t *node) {
    return (struct gs_policy_pos){ (unsigned)node->start_mark.line + 1, (unsigned)node->start_mark.column + 1 };
}

static int opt_bool(struct gs_yaml *y, const yaml_node_t *map, const char *path, const char *key, bool *out) {
    const yaml_node_t *node = gs_yaml_map_get(y, map, key);
    if (!node)
        return 0;
    char p[GS_YAML_PATH_MAX];
    return gs_yaml_bool(y, node, gs_yaml_path_key(p, path, key), out);
}

static int opt_enum(struct gs_yaml *y, const yaml_node_t *map, const char *path, const char *key,
                    const char *const *allowed, unsigned *out) {
    const yaml_node_t *node = gs_yaml_map_get(y, map, key);
    if (!node)
        return 0;
    char p[GS_YAML_PATH_MAX];
    return gs_yaml_enum(y, node, gs_yaml_path_key(p, path, key), allowed, out);
}

/* *out is NULL when the key is absent. */
static int opt_string(struct gs_yaml *y, const yaml_node_t *map, const char *path, const char *key,
                      const char **out) {
    *out = NULL;
    const yaml_node_t *node = gs_yaml_map_get(y, map, key);
    if (!node)
        return 0;
    char p[GS_YAML_PATH_MAX];
    return gs_yaml_scalar(y, node, gs_yaml_path_key(p, path, key), out);
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_lower_alnum(char c) { return is_digit(c) || (c >= 'a' && c <= 'z'); }
static bool is_alnum(char c) { return is_lower_alnum(c) || (c >= 'A' && c <= 'Z'); }
static bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* ---- resource names ---- */

/* RFC 1123 subdomain in lower case: the part of an extended resource name before the '/'. */
static bool dns_subdomain_valid(const char *s, size_t n) {
    if (n == 0 || n > 253)
        return false;
    size_t label = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '.') {
            if (label == 0 || s[i - 1] == '-')
                return false;
            label = 0;
        } else if (is_lower_alnum(s[i]) || (s[i] == '-' && label > 0)) {
            if (++label > 63)
                return false;
        } else {
            return false;
        }
    }
    return label > 0 && s[n - 1] != '-';
}

/* The part after the '/', as Kubernetes' IsQualifiedName takes it. */
static bool qualified_name_valid(const char *s, size_t n) {
    if (n == 0 || n > 63 || !is_alnum(s[0]) || !is_alnum(s[n - 1]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
            return false;
    return true;
}

static bool resource_name_valid(const char *s) {
    const char *slash = strchr(s, '/');
    size_t len = strlen(s);
    if (!slash || len >= GS_RESOURCE_NAME_MAX)
        return false;
    size_t plen = (size_t)(slash - s);
    return dns_subdomain_valid(s, plen) && qualified_name_valid(slash + 1, len - plen - 1);
}

/* The kubelet refuses extended resources in the kubernetes.io domain, so catch it here. */
static bool resource_name_reserved(const char *s) {
    size_t plen = (size_t)(strchr(s, '/') - s);
    static const char k8s[] = "kubernetes.io";
    size_t klen = sizeof(k8s) - 1;
    return plen == klen ? memcmp(s, k8s, klen) == 0
                        : plen > klen && s[plen - klen - 1] == '.' && memcmp(s + plen - klen, k8s, klen) == 0;
}

/* A resource name as NVIDIA's plugin reads it: a bare NAME means nvidia.com/NAME. */
static int parse_resource_name(struct gs_yaml *y, const yaml_node_t *node, const char *path,
                               char out[static GS_RESOURCE_NAME_MAX]) {
    const char *s;
    int r = gs_yaml_scalar(y, node, path, &s);
    if (r < 0)
        return r;
    char full[GS_RESOURCE_NAME_MAX * 2];
    int n = snprintf(full, sizeof(full), "%s%s", strchr(s, '/') ? "" : DEFAULT_PREFIX, s);
    if (n < 0 || (size_t)n >= GS_RESOURCE_NAME_MAX)
        return gs_yaml_error(y, node, path, "resource name '%.80s' is longer than %d characters", s,
                             GS_RESOURCE_NAME_MAX - 1);
    if (!resource_name_valid(full))
        return gs_yaml_error(y, node, path,
                             "invalid resource name '%.80s'; expected DOMAIN/NAME such as nvidia.com/gpu "
                             "(DOMAIN: lowercase DNS name; NAME: 1-63 letters, digits, '-', '_' or '.', "
                             "starting and ending with a letter or digit)",
                             s);
    if (resource_name_reserved(full))
        return gs_yaml_error(y, node, path, "invalid resource name '%.80s': the kubernetes.io domain is reserved",
                             s);
    gs_strlcpy(out, full, GS_RESOURCE_NAME_MAX);
    return 0;
}

/* ---- integers, durations, GPU references ---- */

/* A per-replica limit's text in *s, NULL for "auto". */
static int scalar_or_auto(struct gs_yaml *y, const yaml_node_t *node, const char *path, const char **s) {
    int r = gs_yaml_scalar(y, node, path, s);
    if (r == 0 && !strcmp(*s, "auto"))
        *s = NULL;
    return r;
}

/* memoryPerReplica (the guard's VRAM quota) and MPS's pinnedMemoryPerReplica: auto (GPU memory
 * / replicas) or a size in bytes, a quantity such as 8Gi (util/quantity.h). */
static int parse_memory_per_replica(struct gs_yaml *y, const yaml_node_t *node, const char *path,
                                    unsigned long long *out) {
    const char *s;
    int r = scalar_or_auto(y, node, path, &s);
    if (r < 0)
        return r;
    unsigned long long v = GS_MEMORY_AUTO;
    if (s && gs_quantity_bytes(s, 1ULL << 20, 1ULL << 50, &v) < 0)
        return gs_yaml_error(y, node, path,
                             "expected auto or a size from 1Mi to 1Pi bytes such as 8Gi (a Kubernetes quantity: "
                             "Gi is 2^30, G is 10^9), got '%.64s'", s);
    *out = v;
    return 0;
}

/* "replicas:" in both `sharing` and `gpuslice`; the >= 2 wording is NVIDIA's. MPS allows fewer:
 * a control daemon's server takes at most GS_MPS_MAX_REPLICAS clients per device. */
static int parse_replicas(struct gs_yaml *y, const yaml_node_t *node, const char *path, bool mps, unsigned *out) {
    const char *s;
    int r = gs_yaml_scalar(y, node, path, &s);
    if (r < 0)
        return r;
    unsigned max = mps ? GS_MPS_MAX_REPLICAS : MAX_REPLICAS;
    size_t len = strlen(s);
    if (len == 0 || strspn(s, "0123456789") != len || (s[0] == '0' && len > 1))
        return gs_yaml_error(y, node, path, "expected a number of replicas in 2..%u, got '%.64s'", max, s);
    /* More than 5 digits is over the limit whatever they are; no need to convert them. */
    unsigned long long v = len > 5 ? max + 1ULL : strtoull(s, NULL, 10);
    if (v < 2)
        return gs_yaml_error(y, node, path, "number of replicas must be >= 2 (got %llu)", v);
    if (v > max)
        return gs_yaml_error(y, node, path, "number of replicas must be <= %u (got %.64s)%s", max, s,
                             mps ? ": an MPS server takes at most " GS_STR(GS_MPS_MAX_REPLICAS) " clients per device"
                                 : "");
    *out = (unsigned)v;
    return 0;
}

/* computePerReplica: auto (100% / replicas) or a whole percentage, "25%" or 25. */
static int parse_compute_per_replica(struct gs_yaml *y, const yaml_node_t *node, const char *path, unsigned *out) {
    const char *s;
    int r = scalar_or_auto(y, node, path, &s);
    if (r < 0)
        return r;
    if (!s) {
        *out = GS_COMPUTE_AUTO;
        return 0;
    }
    size_t digits = strspn(s, "0123456789"), len = strlen(s);
    bool ok = digits > 0 && digits <= 3 && s[0] != '0' && (len == digits || (len == digits + 1 && s[digits] == '%'));
    unsigned v = ok ? (unsigned)strtoul(s, NULL, 10) : 0;
    if (!ok || v > MAX_PERCENT)
        return gs_yaml_error(y, node, path, "expected auto or a percentage from 1%% to 100%% such as 25%%, got '%.64s'",
                             s);
    *out = v;
    return 0;
}

/* The MPS limits of a sharing.mps resource or a `mode: mps` rule (replicas already parsed):
 * computePerReplica, whose total over the replicas must fit in the GPU, and pinnedMemoryPerReplica.
 * Both default to auto. */
static int parse_mps_limits(struct gs_yaml *y, const yaml_node_t *map, const char *path, unsigned replicas,
                            unsigned *compute, unsigned long long *pinned) {
    char p[GS_YAML_PATH_MAX];
    int r;
    *compute = GS_COMPUTE_AUTO;
    *pinned = GS_MEMORY_AUTO;
    const yaml_node_t *node = gs_yaml_map_get(y, map, "computePerReplica");
    if (node) {
        gs_yaml_path_key(p, path, "computePerReplica");
        if ((r = parse_compute_per_replica(y, node, p, compute)) < 0)
            return r;
        if (*compute != GS_COMPUTE_AUTO && replicas * *compute > MAX_PERCENT)
            return gs_yaml_error(y, node, p, "%u replicas x %u%% = %u%% does not fit in one GPU (at most 100%%)",
                                 replicas, *compute, replicas * *compute);
    }
    node = gs_yaml_map_get(y, map, "pinnedMemoryPerReplica");
    if (node &&
        (r = parse_memory_per_replica(y, node, gs_yaml_path_key(p, path, "pinnedMemoryPerReplica"), pinned)) < 0)
        return r;
    return 0;
}

/* Seconds, or a number with one unit: "90s", "5m", "1h". */
static int parse_duration(struct gs_yaml *y, const yaml_node_t *node, const char *path, unsigned *out) {
    const char *s;
    int r = gs_yaml_scalar(y, node, path, &s);
    if (r < 0)
        return r;
    size_t len = strlen(s), digits = strspn(s, "0123456789");
    unsigned long long mult = 1;
    bool ok = digits > 0 && !(s[0] == '0' && digits > 1);
    if (ok && digits + 1 == len) {
        switch (s[digits]) {
        case 's': mult = 1; break;
        case 'm': mult = 60; break;
        case 'h': mult = 3600; break;
        default: ok = false;
        }
    } else if (digits != len) {
        ok = false;
    }
    if (!ok)
        return gs_yaml_error(y, node, path,
                             "invalid duration '%.64s'; expected seconds or a number with unit s, m or h "
                             "(\"90s\", \"5m\", \"1h\")",
                             s);
    /* Seven digits already exceed the limit in any unit; stopping there avoids overflow. */
    unsigned long long v = 0;
    for (size_t i = 0; i < digits && i < 8; i++)
        v = v * 10 + (unsigned long long)(s[i] - '0');
    if (digits > 8 || v * mult > MAX_QUIET_S)
        return gs_yaml_error(y, node, path, "duration '%.64s' is longer than 7 days (%u s)", s, MAX_QUIET_S);
    *out = (unsigned)(v * mult);
    return 0;
}

/* 32 hex digits, dashes allowed between them, as NVML prints UUIDs (8-4-4-4-12). */
static bool hex_uuid_valid(const char *s, size_t n) {
    size_t hex = 0;
    for (size_t i = 0; i < n; i++) {
        if (is_hex(s[i]))
            hex++;
        else if (s[i] != '-' || i == 0 || i + 1 == n || s[i - 1] == '-')
            return false;
    }
    return hex == 32;
}

static bool gpu_uuid_valid(const char *s, size_t n) {
    return n > 4 && memcmp(s, "GPU-", 4) == 0 && hex_uuid_valid(s + 4, n - 4);
}

/* "MIG-<uuid>", or "MIG-GPU-<uuid>/<gi>/<ci>" as drivers before R470 named MIG devices. */
static bool mig_uuid_valid(const char *s) {
    size_t n = strlen(s);
    if (n <= 4 || memcmp(s, "MIG-", 4) != 0)
        return false;
    s += 4;
    n -= 4;
    if (hex_uuid_valid(s, n))
        return true;
    const char *a = memchr(s, '/', n);
    if (!a || !gpu_uuid_valid(s, (size_t)(a - s)))
        return false;
    const char *b = strchr(a + 1, '/');
    if (!b || b == a + 1 || !b[1])
        return false;
    return strspn(a + 1, "0123456789") == (size_t)(b - a - 1) && strspn(b + 1, "0123456789") == strlen(b + 1);
}

/* NVML prints UUIDs in lower case and the agent compares them as strings: normalise the hex
 * digits after the "GPU-"/"MIG-" prefix (the inner "GPU-" of the old MIG form has no A-F). */
static void lower_uuid(char *s) {
    for (s += 4; *s; s++)
        if (*s >= 'A' && *s <= 'F')
            *s = (char)(*s - 'A' + 'a');
}

/* A GPU index in 0..63 written without sign or leading zeros. */
static bool gpu_index_valid(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 2 || strspn(s, "0123456789") != n || (s[0] == '0' && n > 1))
        return false;
    return (unsigned)atoi(s) <= MAX_GPU_INDEX;
}

/* One index of a "0-3,5" list, spaces around it allowed. Values are capped at 999 so that a long
 * run of digits cannot overflow; anything over 63 is rejected by the caller anyway. */
static bool read_index(const char **pp, unsigned *out) {
    const char *p = *pp;
    while (*p == ' ')
        p++;
    if (!is_digit(*p) || (p[0] == '0' && is_digit(p[1])))
        return false;
    unsigned v = 0;
    for (; is_digit(*p); p++)
        v = v >= 100 ? 999 : v * 10 + (unsigned)(*p - '0');
    while (*p == ' ')
        p++;
    *out = v;
    *pp = p;
    return true;
}

static void add_index(unsigned long long *mask, unsigned i, char *why, size_t whylen) {
    if (*mask & (1ULL << i))
        snprintf(why, whylen, "GPU index %u is listed twice", i);
    *mask |= 1ULL << i;
}

/* "0-3,5": comma-separated GPU indices and ascending ranges. On error why says what is wrong. */
static int parse_index_list(const char *s, unsigned long long *mask, char *why, size_t whylen) {
    why[0] = '\0';
    *mask = 0;
    const char *p = s;
    for (;;) {
        unsigned a, b;
        if (!read_index(&p, &a))
            goto syntax;
        b = a;
        if (*p == '-') {
            p++;
            if (!read_index(&p, &b))
                goto syntax;
        }
        if (a > MAX_GPU_INDEX || b > MAX_GPU_INDEX) {
            snprintf(why, whylen, "GPU indices must be in 0..%d (in '%.64s')", MAX_GPU_INDEX, s);
            return -EINVAL;
        }
        if (a > b) {
            snprintf(why, whylen, "range %u-%u is not ascending", a, b);
            return -EINVAL;
        }
        for (unsigned i = a; i <= b && !why[0]; i++)
            add_index(mask, i, why, whylen);
        if (why[0])
            return -EINVAL;
        if (*p == '\0')
            return 0;
        if (*p != ',')
            goto syntax;
        p++;
    }
syntax:
    snprintf(why, whylen, "invalid GPU index list '%.64s'; expected indices and ranges such as \"0-3,5\"", s);
    return -EINVAL;
}

/* ---- flags ---- */

static int parse_list_strategy(struct gs_yaml *y, const yaml_node_t *node, const char *path, unsigned *out) {
    size_t n = 1;
    if (node->type == YAML_SEQUENCE_NODE) {
        n = gs_yaml_seq_len(node);
        if (n == 0)
            return gs_yaml_error(y, node, path, "must list at least one strategy");
    }
    unsigned bits = 0;
    for (size_t i = 0; i < n; i++) {
        char p[GS_YAML_PATH_MAX];
        const yaml_node_t *item = node;
        const char *ipath = path;
        if (node->type == YAML_SEQUENCE_NODE) {
            item = gs_yaml_seq_at(y, node, i);
            ipath = gs_yaml_path_index(p, path, i);
        }
        unsigned v;
        int r = gs_yaml_enum(y, item, ipath, list_values, &v);
        if (r < 0)
            return r;
        bits |= 1u << v;
    }
    *out = bits;
    return 0;
}

/* String settings gpuslice does not use: checked for type, and with `why` a warning for each one
 * given (GFD's settings pass NULL: they configure NVIDIA's GFD from the same file, not us). */
static int parse_ignored_strings(struct gs_yaml *y, const yaml_node_t *map, const char *path,
                                 const char *const *keys, const char *why, struct gs_policy *p) {
    for (size_t i = 0; keys[i]; i++) {
        const char *s;
        int r = opt_string(y, map, path, keys[i], &s);
        if (r < 0)
            return r;
        char kp[GS_YAML_PATH_MAX];
        if (s && why)
            warn(p, gs_yaml_path_key(kp, path, keys[i]), "%s; ignored", why);
    }
    return 0;
}

static int parse_plugin(struct gs_yaml *y, const yaml_node_t *map, struct gs_policy *p) {
    const char *path = "flags.plugin";
    int r = gs_yaml_check_keys(y, map, path, plugin_keys);
    if (r < 0)
        return r;
    if ((r = opt_bool(y, map, path, "passDeviceSpecs", &p->pass_device_specs)) < 0)
        return r;
    const yaml_node_t *node = gs_yaml_map_get(y, map, "deviceListStrategy");
    if (node && (r = parse_list_strategy(y, node, "flags.plugin.deviceListStrategy", &p->list_strategy)) < 0)
        return r;
    unsigned v = p->id_strategy;
    if ((r = opt_enum(y, map, path, "deviceIDStrategy", id_values, &v)) < 0)
        return r;
    p->id_strategy = (enum gs_id_strategy)v;
    v = p->alloc_policy;
    if ((r = opt_enum(y, map, path, "sharedDevicesAllocationPolicy", alloc_values, &v)) < 0)
        return r;
    p->alloc_policy = (enum gs_alloc_policy)v;

    const char *prefix;
    if ((r = opt_string(y, map, path, "cdiAnnotationPrefix", &prefix)) < 0)
        return r;
    if (prefix) {
        /* An annotation key's prefix: a DNS subdomain and '/' (cdi.k8s.io/). */
        size_t n = strlen(prefix);
        char kp[GS_YAML_PATH_MAX];
        if (n < 2 || n >= sizeof(p->cdi_annotation_prefix) || prefix[n - 1] != '/' ||
            !dns_subdomain_valid(prefix, n - 1))
            return gs_yaml_error(y, gs_yaml_map_get(y, map, "cdiAnnotationPrefix"),
                                 gs_yaml_path_key(kp, path, "cdiAnnotationPrefix"),
                                 "'%s' is not an annotation prefix: a lower-case DNS name and '/', such as cdi.k8s.io/",
                                 prefix);
        memcpy(p->cdi_annotation_prefix, prefix, n + 1);
    }
    const char *cdr;
    if ((r = opt_string(y, map, path, "containerDriverRoot", &cdr)) < 0)
        return r;
    if (cdr) {
        char kp[GS_YAML_PATH_MAX];
        if (cdr[0] != '/' || strlen(cdr) >= sizeof(p->container_driver_root))
            return gs_yaml_error(y, gs_yaml_map_get(y, map, "containerDriverRoot"),
                                 gs_yaml_path_key(kp, path, "containerDriverRoot"),
                                 "expected an absolute path shorter than %zu bytes", sizeof(p->container_driver_root));
        gs_strlcpy(p->container_driver_root, cdr, sizeof(p->container_driver_root));
    }
    static const char *const cdi_keys[] = { "nvidiaCTKPath", "cdiFeatureFlags", NULL };
    if ((r = parse_ignored_strings(y, map, path, cdi_keys, "not used by gpuslice (it writes its CDI spec itself)", p)) <
        0)
        return r;
    static const char *const socket_keys[] = { "kubeletSocket", NULL };
    return parse_ignored_strings(y, map, path, socket_keys, "not read from the policy file", p);
}

static int parse_gfd(struct gs_yaml *y, const yaml_node_t *map) {
    const char *path = "flags.gfd";
    int r = gs_yaml_check_keys(y, map, path, gfd_keys);
    if (r < 0)
        return r;
    bool b;
    if ((r = opt_bool(y, map, path, "oneshot", &b)) < 0 || (r = opt_bool(y, map, path, "noTimestamp", &b)) < 0)
        return r;
    /* GFD's settings: checked for type only, because the same file configures NVIDIA's GFD. */
    static const char *const strings[] = { "sleepInterval", "outputFile", "machineTypeFile", NULL };
    return parse_ignored_strings(y, map, path, strings, NULL, NULL);
}

static int parse_root_path(struct gs_yaml *y, const yaml_node_t *map, const char *key, bool empty_ok, char *out,
                           size_t outlen) {
    char p[GS_YAML_PATH_MAX];
    const char *s;
    gs_yaml_path_key(p, "flags", key);
    int r = opt_string(y, map, "flags", key, &s);
    if (r < 0 || !s)
        return r;
    if (empty_ok && !*s)
        return 0;
    const yaml_node_t *node = gs_yaml_map_get(y, map, key);
    if (s[0] != '/')
        return gs_yaml_error(y, node, p, "'%.64s' is not an absolute path", s);
    if (strlen(s) >= outlen)
        return gs_yaml_error(y, node, p, "path is longer than %zu characters", outlen - 1);
    gs_strlcpy(out, s, outlen);
    return 0;
}

static int parse_flags(struct gs_yaml *y, const yaml_node_t *map, struct gs_policy *p) {
    const char *path = "flags";
    int r = gs_yaml_check_keys(y, map, path, flags_keys);
    if (r < 0)
        return r;
    unsigned v = p->mig_strategy;
    if ((r = opt_enum(y, map, path, "migStrategy", mig_values, &v)) < 0)
        return r;
    p->mig_strategy = (enum gs_mig_strategy)v;
    if (gs_yaml_map_get(y, map, "migStrategy"))
        p->mig_strategy_pos = pos_of(gs_yaml_map_get(y, map, "migStrategy"));
    if ((r = opt_bool(y, map, path, "failOnInitError", &p->fail_on_init_error)) < 0)
        return r;

    if ((r = parse_root_path(y, map, "nvidiaDriverRoot", false, p->driver_root, sizeof(p->driver_root))) < 0)
        return r;
    /* NVIDIA: an absent or empty nvidiaDevRoot means the driver root. */
    gs_strlcpy(p->dev_root, p->driver_root, sizeof(p->dev_root));
    if ((r = parse_root_path(y, map, "nvidiaDevRoot", true, p->dev_root, sizeof(p->dev_root))) < 0)
        return r;

    /* Where the MPS control daemons' pipe and log directories go; empty keeps the default. */
    if ((r = parse_root_path(y, map, "mpsRoot", true, p->mps_root, sizeof(p->mps_root))) < 0)
        return r;
    static const char *const extras[] = { "gdrcopyEnabled", "gdsEnabled", "mofedEnabled", NULL };
    for (size_t i = 0; extras[i]; i++) {
        bool b = false;
        char kp[GS_YAML_PATH_MAX];
        if ((r = opt_bool(y, map, path, extras[i], &b)) < 0)
            return r;
        if (b)
            warn(p, gs_yaml_path_key(kp, path, extras[i]), "not supported by this version yet; ignored");
    }
    bool b;
    if ((r = opt_bool(y, map, path, "useNodeFeatureAPI", &b)) < 0) /* GFD's */
        return r;
    v = 0;
    if ((r = opt_enum(y, map, path, "deviceDiscoveryStrategy", discovery_values, &v)) < 0)
        return r;
    if (v == 2)
        warn(p, "flags.deviceDiscoveryStrategy", "tegra is not supported; gpuslice finds GPUs through NVML");

    const yaml_node_t *node = get_section(y, map, "plugin");
    if (node && (r = parse_plugin(y, node, p)) < 0)
        return r;
    node = get_section(y, map, "gfd");
    if (node && (r = parse_gfd(y, node)) < 0)
        return r;
    return 0;
}

/* ---- resources (NVIDIA ignores it too) and imex: checked, then ignored with a warning ---- */

static int parse_resources(struct gs_yaml *y, const yaml_node_t *map, struct gs_policy *p) {
    int r = gs_yaml_check_keys(y, map, "resources", resources_keys);
    if (r < 0)
        return r;
    for (size_t k = 0; resources_keys[k]; k++) {
        char lp[GS_YAML_PATH_MAX];
        const yaml_node_t *list = get_section(y, map, resources_keys[k]);
        if (!list)
            continue;
        if ((r = gs_yaml_expect(y, list, gs_yaml_path_key(lp, "resources", resources_keys[k]),
                                YAML_SEQUENCE_NODE)) < 0)
            return r;
        for (size_t i = 0; i < gs_yaml_seq_len(list); i++) {
            char ip[GS_YAML_PATH_MAX], fp[GS_YAML_PATH_MAX];
            const yaml_node_t *entry = gs_yaml_seq_at(y, list, i);
            gs_yaml_path_index(ip, lp, i);
            if ((r = gs_yaml_check_keys(y, entry, ip, rename_rule_keys)) < 0)
                return r;
            for (size_t f = 0; rename_rule_keys[f]; f++) {
                const yaml_node_t *node = gs_yaml_map_get(y, entry, rename_rule_keys[f]);
                if (!node)
                    return gs_yaml_error(y, entry, ip, "missing required key '%s'", rename_rule_keys[f]);
                const char *s;
                if ((r = gs_yaml_scalar(y, node, gs_yaml_path_key(fp, ip, rename_rule_keys[f]), &s)) < 0)
                    return r;
            }
        }
    }
    warn(p, "resources", "renaming is not supported; ignored");
    return 0;
}

static int parse_imex(struct gs_yaml *y, const yaml_node_t *map, struct gs_policy *p) {
    int r = gs_yaml_check_keys(y, map, "imex", imex_keys);
    if (r < 0)
        return r;
    const yaml_node_t *ids = gs_yaml_map_get(y, map, "channelIDs");
    if (ids) {
        if ((r = gs_yaml_expect(y, ids, "imex.channelIDs", YAML_SEQUENCE_NODE)) < 0)
            return r;
        for (size_t i = 0; i < gs_yaml_seq_len(ids); i++) {
            char ip[GS_YAML_PATH_MAX];
            unsigned long long v;
            if ((r = gs_yaml_uint(y, gs_yaml_seq_at(y, ids, i), gs_yaml_path_index(ip, "imex.channelIDs", i), 0,
                                  INT_MAX, &v)) < 0)
                return r;
        }
    }
    bool b;
    if ((r = opt_bool(y, map, "imex", "required", &b)) < 0)
        return r;
    warn(p, "imex", "IMEX channels are not supported by this version yet; ignored");
    return 0;
}

/* ---- sharing ---- */

static int parse_device_ref(struct gs_yaml *y, const yaml_node_t *node, const char *path, struct gs_device_ref *ref) {
    const char *s;
    int r = gs_yaml_scalar(y, node, path, &s);
    if (r < 0)
        return r;
    size_t n = strlen(s);
    bool ok;
    if (is_digit(s[0]) && strchr(s, ':'))
        return gs_yaml_error(y, node, path,
                             "MIG indices such as '%.64s' are not supported; use the MIG device's UUID (MIG-...)", s);
    if (is_digit(s[0]))
        ok = gpu_index_valid(s);
    else if (strncmp(s, "GPU-", 4) == 0)
        ok = gpu_uuid_valid(s, n);
    else
        ok = mig_uuid_valid(s);
    if (!ok || n >= sizeof(ref->text))
        return gs_yaml_error(y, node, path,
                             "invalid device '%.64s'; expected a GPU index in 0..%d, a GPU UUID (GPU-...) or a "
                             "MIG UUID (MIG-...)",
                             s, MAX_GPU_INDEX);
    gs_strlcpy(ref->text, s, sizeof(ref->text));
    if (!is_digit(s[0]))
        lower_uuid(ref->text);
    return 0;
}

static int parse_devices(struct gs_yaml *y, const yaml_node_t *node, const char *path, struct gs_ts_resource *res) {
    int r;
    if (node->type == YAML_SEQUENCE_NODE) {
        size_t n = gs_yaml_seq_len(node);
        if (n == 0)
            return gs_yaml_error(y, node, path, "must list at least one device");
        if (n > GS_POLICY_MAX_DEVICES)
            return gs_yaml_error(y, node, path, "lists %zu devices; at most %d are supported", n,
                                 GS_POLICY_MAX_DEVICES);
        for (size_t i = 0; i < n; i++) {
            char ip[GS_YAML_PATH_MAX];
            const yaml_node_t *item = gs_yaml_seq_at(y, node, i);
            gs_yaml_path_index(ip, path, i);
            if ((r = parse_device_ref(y, item, ip, &res->devices[i])) < 0)
                return r;
            for (size_t j = 0; j < i; j++)
                if (strcmp(res->devices[j].text, res->devices[i].text) == 0)
                    return gs_yaml_error(y, item, ip, "device '%s' is listed twice", res->devices[i].text);
        }
        res->n_devices = (unsigned)n;
        res->devices_all = false;
        return 0;
    }
    const char *s;
    if ((r = gs_yaml_scalar(y, node, path, &s)) < 0)
        return r;
    if (strcmp(s, "all") == 0)
        return 0;
    if (is_digit(s[0])) {
        unsigned long long v;
        if ((r = gs_yaml_uint(y, node, path, 1, GS_POLICY_MAX_DEVICES, &v)) < 0)
            return r;
        res->devices_count = (unsigned)v;
        res->devices_all = false;
        return 0;
    }
    return gs_yaml_error(y, node, path,
                         "invalid value '%.64s'; expected \"all\", a number of GPUs or a list of GPU indices "
                         "and UUIDs",
                         s);
}

/* sharing.timeSlicing or sharing.mps: the same NVIDIA form (ReplicatedResources), with gpuslice's
 * additions per resource (memoryPerReplica for time-slicing; computePerReplica and
 * pinnedMemoryPerReplica for MPS). */
struct replicated {
    const char *path;                    /* "sharing.timeSlicing" or "sharing.mps" */
    bool mps;
    bool *present, *rename_by_default, *fail_gt_one;
    unsigned *n_resources;
    struct gs_ts_resource *resources;
};

static int parse_replicated_resource(struct gs_yaml *y, const yaml_node_t *entry, const char *path,
                                     const struct replicated *rr, struct gs_ts_resource *res) {
    char p[GS_YAML_PATH_MAX];
    int r = gs_yaml_check_keys(y, entry, path, rr->mps ? mps_resource_keys : ts_resource_keys);
    if (r < 0)
        return r;
    *res = (struct gs_ts_resource){ .devices_all = true };

    const yaml_node_t *node = gs_yaml_map_get(y, entry, "name");
    if (!node)
        return gs_yaml_error(y, entry, path, "missing required key 'name' (e.g. nvidia.com/gpu)");
    if ((r = parse_resource_name(y, node, gs_yaml_path_key(p, path, "name"), res->name)) < 0)
        return r;

    node = gs_yaml_map_get(y, entry, "rename");
    if (node) {
        if ((r = parse_resource_name(y, node, gs_yaml_path_key(p, path, "rename"), res->rename)) < 0)
            return r;
    } else if (*rr->rename_by_default) {
        /* The advertised name is NAME.shared, which must still be a valid resource name. */
        char shared[GS_RESOURCE_NAME_MAX * 2];
        snprintf(shared, sizeof(shared), "%s%s", res->name, SHARED_SUFFIX);
        if (!resource_name_valid(shared))
            return gs_yaml_error(y, gs_yaml_map_get(y, entry, "name"), gs_yaml_path_key(p, path, "name"),
                                 "with renameByDefault the advertised name '%s' is not a valid resource name "
                                 "(too long); shorten it or give 'rename'",
                                 shared);
    }

    node = gs_yaml_map_get(y, entry, "replicas");
    if (!node)
        return gs_yaml_error(y, entry, path, "missing required key 'replicas' (2..%d)",
                             rr->mps ? GS_MPS_MAX_REPLICAS : MAX_REPLICAS);
    if ((r = parse_replicas(y, node, gs_yaml_path_key(p, path, "replicas"), rr->mps, &res->replicas)) < 0)
        return r;
    if (rr->mps && (r = parse_mps_limits(y, entry, path, res->replicas, &res->compute_per_replica,
                                         &res->pinned_per_replica)) < 0)
        return r;
    /* The guard's quota over all of a container's processes: time-slicing, and MPS (whose own
     * memory limit is per client process). */
    node = gs_yaml_map_get(y, entry, "memoryPerReplica");
    if (node && (r = parse_memory_per_replica(y, node, gs_yaml_path_key(p, path, "memoryPerReplica"),
                                              &res->memory_per_replica)) < 0)
        return r;
    if (node)
        res->memory_pos = pos_of(node);

    node = gs_yaml_map_get(y, entry, "devices");
    if (node && (r = parse_devices(y, node, gs_yaml_path_key(p, path, "devices"), res)) < 0)
        return r;
    return 0;
}

static int parse_replicated(struct gs_yaml *y, const yaml_node_t *map, const struct replicated *rr) {
    const char *path = rr->path;
    int r = gs_yaml_check_keys(y, map, path, ts_keys);
    if (r < 0)
        return r;
    if ((r = opt_bool(y, map, path, "renameByDefault", rr->rename_by_default)) < 0 ||
        (r = opt_bool(y, map, path, "failRequestsGreaterThanOne", rr->fail_gt_one)) < 0)
        return r;

    char lpath[GS_YAML_PATH_MAX];
    gs_yaml_path_key(lpath, path, "resources");
    const yaml_node_t *list = gs_yaml_map_get(y, map, "resources");
    if (!list)
        return gs_yaml_error(y, map, path, "missing required key 'resources'");
    if ((r = gs_yaml_expect(y, list, lpath, YAML_SEQUENCE_NODE)) < 0)
        return r;
    size_t n = gs_yaml_seq_len(list);
    if (n == 0)
        return gs_yaml_error(y, list, lpath, "must list at least one resource");
    if (n > GS_POLICY_MAX_RESOURCES)
        return gs_yaml_error(y, list, lpath, "lists %zu resources; at most %d are supported", n,
                             GS_POLICY_MAX_RESOURCES);
    for (size_t i = 0; i < n; i++) {
        char ip[GS_YAML_PATH_MAX];
        if ((r = parse_replicated_resource(y, gs_yaml_seq_at(y, list, i), gs_yaml_path_index(ip, lpath, i), rr,
                                           &rr->resources[i])) < 0)
            return r;
    }
    *rr->n_resources = (unsigned)n;
    *rr->present = true;
    return 0;
}

static int parse_sharing(struct gs_yaml *y, const yaml_node_t *map, struct gs_policy *p) {
    int r = gs_yaml_check_keys(y, map, "sharing", sharing_keys);
    if (r < 0)
        return r;
    const yaml_node_t *ts = get_section(y, map, "timeSlicing"), *mps = get_section(y, map, "mps");
    /* NVIDIA's plugin silently drops timeSlicing when mps is given; say so instead. */
    if (ts && mps)
        return gs_yaml_error(y, gs_yaml_map_get(y, map, "mps"), "sharing.mps",
                             "cannot be combined with sharing.timeSlicing; choose one, or choose per GPU with "
                             "gpuslice.gpus rules (mode: time-slicing or mps)");
    if (ts) {
        const struct replicated rr = { "sharing.timeSlicing", false, &p->ts_present, &p->ts_rename_by_default,
                                       &p->ts_fail_requests_gt_one, &p->n_ts_resources, p->ts_resources };
        if ((r = parse_replicated(y, ts, &rr)) < 0)
            return r;
    }
    if (mps) {
        const struct replicated rr = { "sharing.mps", true, &p->mps_present, &p->mps_rename_by_default,
                                       &p->mps_fail_requests_gt_one, &p->n_mps_resources, p->mps_resources };
        if ((r = parse_replicated(y, mps, &rr)) < 0)
            return r;
    }
    return 0;
}

/* ---- gpuslice ---- */

static int parse_index_selector(struct gs_yaml *y, const yaml_node_t *node, const char *path,
                                unsigned long long *mask) {
    int r;
    *mask = 0;
    if (node->type == YAML_SEQUENCE_NODE) {
        size_t n = gs_yaml_seq_len(node);
        if (n == 0)
            return gs_yaml_error(y, node, path, "must list at least one GPU index");
        for (size_t i = 0; i < n; i++) {
            char ip[GS_YAML_PATH_MAX];
            const yaml_node_t *item = gs_yaml_seq_at(y, node, i);
            unsigned long long v;
            if ((r = gs_yaml_uint(y, item, gs_yaml_path_index(ip, path, i), 0, MAX_GPU_INDEX, &v)) < 0)
                return r;
            if (*mask & (1ULL << v))
                return gs_yaml_error(y, item, ip, "GPU index %llu is listed twice", v);
            *mask |= 1ULL << v;
        }
        return 0;
    }
    const char *s;
    if ((r = gs_yaml_scalar(y, node, path, &s)) < 0)
        return r;
    char why[160];
    if (parse_index_list(s, mask, why, sizeof(why)) < 0)
        return gs_yaml_error(y, node, path, "%s", why);
    return 0;
}

static int parse_rule(struct gs_yaml *y, const yaml_node_t *entry, const char *path, const struct gs_policy *p,
                      struct gs_gpu_rule *rule) {
    char kp[GS_YAML_PATH_MAX];
    int r = gs_yaml_check_keys(y, entry, path, rule_keys);
    if (r < 0)
        return r;
    *rule = (struct gs_gpu_rule){ .line = (unsigned)entry->start_mark.line + 1 };

    static const char *const selectors[] = { "index", "uuid", "model" };
    const char *sel = NULL;
    const yaml_node_t *sel_node = NULL;
    for (size_t i = 0; i < GS_ARRAY_SIZE(selectors); i++) {
        const yaml_node_t *node = gs_yaml_map_get(y, entry, selectors[i]);
        if (!node)
            continue;
        if (sel)
            return gs_yaml_error(y, node, gs_yaml_path_key(kp, path, selectors[i]),
                                 "a rule takes exactly one selector; '%s' and '%s' are both given", sel,
                                 selectors[i]);
        sel = selectors[i];
        sel_node = node;
    }
    if (!sel)
        return gs_yaml_error(y, entry, path, "missing selector: give exactly one of index, uuid, model");
    gs_yaml_path_key(kp, path, sel);
    if (strcmp(sel, "index") == 0) {
        rule->kind = GS_SEL_INDEX;
        if ((r = parse_index_selector(y, sel_node, kp, &rule->index_mask)) < 0)
            return r;
    } else {
        const char *s;
        if ((r = gs_yaml_scalar(y, sel_node, kp, &s)) < 0)
            return r;
        bool uuid = strcmp(sel, "uuid") == 0;
        rule->kind = uuid ? GS_SEL_UUID : GS_SEL_MODEL;
        if (uuid && !gpu_uuid_valid(s, strlen(s)))
            return gs_yaml_error(y, sel_node, kp, "invalid GPU UUID '%.64s'; expected GPU- and 32 hex digits", s);
        if (!*s || strlen(s) >= sizeof(rule->pattern))
            return gs_yaml_error(y, sel_node, kp, "must be 1 to %zu characters long", sizeof(rule->pattern) - 1);
        gs_strlcpy(rule->pattern, s, sizeof(rule->pattern));
        if (uuid)
            lower_uuid(rule->pattern);
    }

    const yaml_node_t *mode = gs_yaml_map_get(y, entry, "mode");
    if (!mode)
        return gs_yaml_error(y, entry, path, "missing required key 'mode'; expected one of: whole, time-slicing, "
                                             "mig, disabled, mps, fractional");
    unsigned v;
    if ((r = gs_yaml_enum(y, mode, gs_yaml_path_key(kp, path, "mode"), mode_values, &v)) < 0)
        return r;
    rule->mode = (enum gs_gpu_mode)(v + 1);
    /* With migStrategy none there is no naming for MIG devices; refuse rather than guess. */
    if (rule->mode == GS_MODE_MIG && p->mig_strategy == GS_MIG_NONE)
        return gs_yaml_error(y, mode, kp, "mode mig needs flags.migStrategy single or mixed (it is none)");

    const yaml_node_t *node = gs_yaml_map_get(y, entry, "replicas");
    gs_yaml_path_key(kp, path, "replicas");
    bool mps = rule->mode == GS_MODE_MPS;
    if (rule->mode == GS_MODE_TIME_SLICING || mps) {
        if (!node)
            return gs_yaml_error(y, entry, path, "missing required key 'replicas' (2..%d) for mode %s",
                                 mps ? GS_MPS_MAX_REPLICAS : MAX_REPLICAS, mode_values[v]);
        if ((r = parse_replicas(y, node, kp, mps, &rule->replicas)) < 0)
            return r;
    } else if (node) {
        return gs_yaml_error(y, node, kp, "only allowed with mode time-slicing or mps (mode is %s)", mode_values[v]);
    }
    /* Each per-replica limit belongs to one mode. */
    static const struct {
        const char *key;
        enum gs_gpu_mode mode;
    } limits[] = {
        { "memoryPerReplica", GS_MODE_TIME_SLICING },
        { "computePerReplica", GS_MODE_MPS },
        { "pinnedMemoryPerReplica", GS_MODE_MPS },
    };
    for (size_t i = 0; i < GS_ARRAY_SIZE(limits); i++) {
        node = gs_yaml_map_get(y, entry, limits[i].key);
        gs_yaml_path_key(kp, path, limits[i].key);
        if (node && limits[i].mode == GS_MODE_TIME_SLICING && mps)
            continue; /* the guard's quota applies to MPS replicas too */
        if (node && limits[i].mode == GS_MODE_TIME_SLICING && rule->mode != GS_MODE_TIME_SLICING)
            return gs_yaml_error(y, node, kp, "only allowed with mode time-slicing or mps (mode is %s)",
                                 mode_values[v]);
        if (node && rule->mode != limits[i].mode)
            return gs_yaml_error(y, node, kp, "only allowed with mode %s (mode is %s)",
                                 mode_values[limits[i].mode - 1], mode_values[v]);
    }
    if (mps && (r = parse_mps_limits(y, entry, path, rule->replicas, &rule->compute_per_replica,
                                     &rule->pinned_per_replica)) < 0)
        return r;
    node = gs_yaml_map_get(y, entry, "memoryPerReplica");
    gs_yaml_path_key(kp, path, "memoryPerReplica");
    if (node && (r = parse_memory_per_replica(y, node, kp, &rule->memory_per_replica)) < 0)
        return r;
    if (node)
        rule->memory_pos = pos_of(node);

    node = gs_yaml_map_get(y, entry, "resourceName");
    if (node) {
        gs_yaml_path_key(kp, path, "resourceName");
        if (rule->mode == GS_MODE_MIG)
            return gs_yaml_error(y, node, kp, "not allowed with mode mig: MIG devices are named after their "
                                              "profile (flags.migStrategy)");
        if (rule->mode == GS_MODE_DISABLED)
            return gs_yaml_error(y, node, kp, "not allowed with mode disabled: the GPU is not advertised");
        if (rule->mode == GS_MODE_FRACTIONAL)
            return gs_yaml_error(y, node, kp, "not allowed with mode fractional: its resources are "
                                              "gpuslice.io/gpu-memory and gpuslice.io/gpu-compute, the names pods "
                                              "and the scheduler extender use");
        if ((r = parse_resource_name(y, node, kp, rule->resource)) < 0)
            return r;
    }
    return 0;
}

static int parse_xids(struct gs_yaml *y, const yaml_node_t *list, const char *path, struct gs_policy *p) {
    int r = gs_yaml_expect(y, list, path, YAML_SEQUENCE_NODE);
    /* "ignoredXids: []" is a sequence node that gs_yaml_expect accepts; only a null is refused. */
    if (r < 0)
        return r;
    size_t n = gs_yaml_seq_len(list);
    if (n > GS_POLICY_MAX_XIDS)
        return gs_yaml_error(y, list, path, "lists %zu Xids; at most %d are supported", n, GS_POLICY_MAX_XIDS);
    for (size_t i = 0; i < n; i++) {
        char ip[GS_YAML_PATH_MAX];
        const yaml_node_t *item = gs_yaml_seq_at(y, list, i);
        unsigned long long v;
        if ((r = gs_yaml_uint(y, item, gs_yaml_path_index(ip, path, i), 0, MAX_XID, &v)) < 0)
            return r;
        for (size_t j = 0; j < i; j++)
            if (p->ignored_xids[j] == v)
                return gs_yaml_error(y, item, ip, "Xid %llu is listed twice", v);
        p->ignored_xids[i] = v;
    }
    p->n_ignored_xids = (unsigned)n;
    return 0;
}

static int parse_health(struct gs_yaml *y, const yaml_node_t *map, struct gs_policy *p) {
    const char *path = "gpuslice.health";
    int r = gs_yaml_check_keys(y, map, path, health_keys);
    if (r < 0)
        return r;
    const yaml_node_t *node = gs_yaml_map_get(y, map, "ignoredXids");
    if (node && (r = parse_xids(y, node, "gpuslice.health.ignoredXids", p)) < 0)
        return r;
    node = gs_yaml_map_get(y, map, "recoveryQuietPeriod");
    if (node && (r = parse_duration(y, node, "gpuslice.health.recoveryQuietPeriod", &p->recovery_quiet_s)) < 0)
        return r;
    return 0;
}

/* gpuslice.mig: the MIG layout the agent applies (a config of layoutFile, or a built-in). */
static int parse_mig(struct gs_yaml *y, const yaml_node_t *map, struct gs_policy *p) {
    const char *path = "gpuslice.mig";
    int r = gs_yaml_check_keys(y, map, path, mig_keys);
    if (r < 0)
        return r;
    const char *config;
    if ((r = opt_string(y, map, path, "config", &config)) < 0)
        return r;
    if (!config)
        return gs_yaml_error(y, map, path, "config is required: the name of a MIG config (all-balanced, ...)");
    const yaml_node_t *node = gs_yaml_map_get(y, map, "config");
    if (!*config || strlen(config) >= sizeof(p->mig_config))
        return gs_yaml_error(y, node, "gpuslice.mig.config", "must be 1..%zu characters", sizeof(p->mig_config) - 1);
    for (const char *c = config; *c; c++)
        if (!is_alnum(*c) && *c != '-' && *c != '_' && *c != '.' && *c != '+')
            return gs_yaml_error(y, node, "gpuslice.mig.config", "'%.64s' is not a config name ([A-Za-z0-9._+-])",
                                 config);
    gs_strlcpy(p->mig_config, config, sizeof(p->mig_config));
    const char *file;
    if ((r = opt_string(y, map, path, "layoutFile", &file)) < 0)
        return r;
    if (file) {
        node = gs_yaml_map_get(y, map, "layoutFile");
        if (file[0] != '/')
            return gs_yaml_error(y, node, "gpuslice.mig.layoutFile", "'%.64s' is not an absolute path", file);
        if (strlen(file) >= sizeof(p->mig_layout_file))
            return gs_yaml_error(y, node, "gpuslice.mig.layoutFile", "path is longer than %zu characters",
                                 sizeof(p->mig_layout_file) - 1);
        gs_strlcpy(p->mig_layout_file, file, sizeof(p->mig_layout_file));
    }
    if ((node = gs_yaml_map_get(y, map, "force")) && (r = gs_yaml_bool(y, node, "gpuslice.mig.force", &p->mig_force)) < 0)
        return r;
    return 0;
}

/* gpuslice.mps: what gpuslice does around the MPS daemons that NVIDIA's plugin does always. */
static int parse_gpuslice_mps(struct gs_yaml *y, const yaml_node_t *map, struct gs_policy *p) {
    int r = gs_yaml_check_keys(y, map, "gpuslice.mps", gpuslice_mps_keys);
    if (r < 0)
        return r;
    return opt_bool(y, map, "gpuslice.mps", "exclusiveProcess", &p->mps_exclusive_process);
}

/* gpuslice.coexistence: what the agent does beside another device plugin serving one of its
 * resources, and beside NVIDIA's MIG manager's nvidia.com/mig.config label on its Node
 * (src/agent/coexist.c). */
static int parse_coexistence(struct gs_yaml *y, const yaml_node_t *map, struct gs_policy *p) {
    int r = gs_yaml_check_keys(y, map, "gpuslice.coexistence", coexistence_keys);
    if (r < 0)
        return r;
    const yaml_node_t *node = gs_yaml_map_get(y, map, "otherPlugin");
    unsigned v = 0;
    if (node && (r = gs_yaml_enum(y, node, "gpuslice.coexistence.otherPlugin", other_plugin_values, &v)) < 0)
        return r;
    p->other_plugin = (enum gs_other_plugin)v;
    node = gs_yaml_map_get(y, map, "otherMigManager");
    v = 0;
    if (node && (r = gs_yaml_enum(y, node, "gpuslice.coexistence.otherMigManager", other_mig_manager_values, &v)) < 0)
        return r;
    p->other_mig_manager = (enum gs_other_mig_manager)v;
    return 0;
}

/* gpuslice.labels: whether the node labels also carry GPU Feature Discovery's names. */
static int parse_labels(struct gs_yaml *y, const yaml_node_t *map, struct gs_policy *p) {
    int r = gs_yaml_check_keys(y, map, "gpuslice.labels", labels_keys);
    if (r < 0)
        return r;
    return opt_bool(y, map, "gpuslice.labels", "nvidiaNames", &p->labels_nvidia_names);
}

/* gpuslice.dra: which GPUs the DRA driver serves: none (the default), all, or a list of GPU
 * indices and UUIDs; the device plugins serve the rest. */
static int parse_dra(struct gs_yaml *y, const yaml_node_t *map, struct gs_policy *p) {
    int r = gs_yaml_check_keys(y, map, "gpuslice.dra", dra_keys);
    if (r < 0)
        return r;
    const char *path = "gpuslice.dra.gpus";
    const yaml_node_t *node = gs_yaml_map_get(y, map, "gpus");
    if (!node || gs_yaml_is_null(node))
        return 0;
    p->dra_gpus_pos = pos_of(node);
    if (node->type != YAML_SEQUENCE_NODE) {
        const char *s;
        if ((r = gs_yaml_scalar(y, node, path, &s)) < 0)
            return r;
        if (strcmp(s, "all") && strcmp(s, "none"))
            return gs_yaml_error(y, node, path, "'%.64s' is not all, none or a list of GPU indices and UUIDs", s);
        p->dra_gpus = strcmp(s, "all") == 0 ? GS_DRA_ALL : GS_DRA_NONE;
        return 0;
    }
    size_t n = gs_yaml_seq_len(node);
    if (n > GS_POLICY_MAX_DEVICES)
        return gs_yaml_error(y, node, path, "lists %zu GPUs; at most %d are supported", n, GS_POLICY_MAX_DEVICES);
    for (size_t i = 0; i < n; i++) {
        char ip[GS_YAML_PATH_MAX];
        const yaml_node_t *item = gs_yaml_seq_at(y, node, i);
        gs_yaml_path_index(ip, path, i);
        if ((r = parse_device_ref(y, item, ip, &p->dra_devices[i])) < 0)
            return r;
        if (strncmp(p->dra_devices[i].text, "MIG-", 4) == 0)
            return gs_yaml_error(y, item, ip, "a MIG device cannot be given to DRA alone; name its GPU");
        for (size_t j = 0; j < i; j++)
            if (strcmp(p->dra_devices[j].text, p->dra_devices[i].text) == 0)
                return gs_yaml_error(y, item, ip, "GPU '%s' is listed twice", p->dra_devices[i].text);
    }
    p->n_dra_devices = (unsigned)n;
    p->dra_gpus = GS_DRA_LIST;
    return 0;
}

static int parse_gpuslice(struct gs_yaml *y, const yaml_node_t *map, struct gs_policy *p) {
    int r = gs_yaml_check_keys(y, map, "gpuslice", gpuslice_keys);
    if (r < 0)
        return r;
    const yaml_node_t *list = get_section(y, map, "gpus");
    if (list) {
        const char *lpath = "gpuslice.gpus";
        if ((r = gs_yaml_expect(y, list, lpath, YAML_SEQUENCE_NODE)) < 0)
            return r;
        size_t n = gs_yaml_seq_len(list);
        if (n > GS_POLICY_MAX_RULES)
            return gs_yaml_error(y, list, lpath, "lists %zu rules; at most %d are supported", n, GS_POLICY_MAX_RULES);
        for (size_t i = 0; i < n; i++) {
            char ip[GS_YAML_PATH_MAX];
            if ((r = parse_rule(y, gs_yaml_seq_at(y, list, i), gs_yaml_path_index(ip, lpath, i), p, &p->rules[i])) <
                0)
                return r;
        }
        p->n_rules = (unsigned)n;
    }
    const yaml_node_t *health = get_section(y, map, "health");
    if (health && (r = parse_health(y, health, p)) < 0)
        return r;
    const yaml_node_t *mig = get_section(y, map, "mig");
    if (mig && (r = parse_mig(y, mig, p)) < 0)
        return r;
    const yaml_node_t *mps = get_section(y, map, "mps");
    if (mps && (r = parse_gpuslice_mps(y, mps, p)) < 0)
        return r;
    const yaml_node_t *coex = get_section(y, map, "coexistence");
    if (coex && (r = parse_coexistence(y, coex, p)) < 0)
        return r;
    const yaml_node_t *labels = get_section(y, map, "labels");
    if (labels && (r = parse_labels(y, labels, p)) < 0)
        return r;
    const yaml_node_t *dra = get_section(y, map, "dra");
    if (dra && (r = parse_dra(y, dra, p)) < 0)
        return r;
    return 0;
}

/* ---- top level ---- */

static int parse_root(struct gs_yaml *y, struct gs_policy *p) {
    const yaml_node_t *root = gs_yaml_root(y);
    /* An empty file is a valid NVIDIA config (all defaults); keep that. */
    if (gs_yaml_is_null(root))
        return 0;
    if (root->type != YAML_MAPPING_NODE)
        return gs_yaml_error(y, root, NULL, "expected a mapping (version, flags, sharing, gpuslice, ...) at the "
                                            "top level");
    int r = gs_yaml_check_keys(y, root, NULL, root_keys);
    if (r < 0)
        return r;

    const yaml_node_t *node = gs_yaml_map_get(y, root, "version");
    if (node && !gs_yaml_is_null(node)) {
        const char *s;
        if ((r = gs_yaml_scalar(y, node, "version", &s)) < 0)
            return r;
        if (*s && strcmp(s, "v1") != 0)
            return gs_yaml_error(y, node, "version", "unsupported version '%.64s'; expected v1", s);
    }

    /* flags before gpuslice: rules are checked against migStrategy. */
    if ((node = get_section(y, root, "flags")) && (r = parse_flags(y, node, p)) < 0)
        return r;
    if ((node = get_section(y, root, "resources")) && (r = parse_resources(y, node, p)) < 0)
        return r;
    if ((node = get_section(y, root, "sharing")) && (r = parse_sharing(y, node, p)) < 0)
        return r;
    if ((node = get_section(y, root, "imex")) && (r = parse_imex(y, node, p)) < 0)
        return r;
    if ((node = get_section(y, root, "gpuslice")) && (r = parse_gpuslice(y, node, p)) < 0)
        return r;
    return 0;
}

void gs_policy_init(struct gs_policy *p) {
    memset(p, 0, sizeof(*p));
    p->mig_strategy = GS_MIG_NONE;
    p->list_strategy = GS_LIST_ENVVAR;
    gs_strlcpy(p->cdi_annotation_prefix, GS_CDI_ANNOTATION_PREFIX_DEFAULT, sizeof(p->cdi_annotation_prefix));
    p->id_strategy = GS_ID_UUID;
    p->alloc_policy = GS_ALLOC_DISTRIBUTED;
    p->fail_on_init_error = true;
    gs_strlcpy(p->driver_root, "/", sizeof(p->driver_root));
    gs_strlcpy(p->dev_root, "/", sizeof(p->dev_root));
    gs_strlcpy(p->mps_root, GS_MPS_ROOT_DEFAULT, sizeof(p->mps_root));
    p->mps_fail_requests_gt_one = true;
    memcpy(p->ignored_xids, default_xids, sizeof(default_xids));
    p->n_ignored_xids = GS_ARRAY_SIZE(default_xids);
    p->recovery_quiet_s = DEFAULT_QUIET_S;
}

int gs_policy_parse(const char *name, const char *text, size_t len, struct gs_policy *out, char *err,
                    size_t errlen) {
    _cleanup_yaml_ struct gs_yaml y = { 0 };
    int r = gs_yaml_load(&y, name, text, len, err, errlen);
    if (r < 0)
        return r;

    /* Built on the side so that *out is untouched on error; on the heap because the struct is
     * about 150 KiB and callers may run on small thread stacks. */
    _cleanup_free_ struct gs_policy *p = malloc(sizeof(*p));
    if (!p) {
        gs_yaml_error(&y, NULL, NULL, "out of memory");
        return -ENOMEM;
    }
    gs_policy_init(p);
    gs_strlcpy(p->source, name ? name : "", sizeof(p->source));
    r = parse_root(&y, p);
    if (r < 0)
        return r;
    *out = *p;
    return 0;
}

int gs_policy_load(const char *path, struct gs_policy *out, char *err, size_t errlen) {
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    int r = gs_yaml_read_file(path, &text, &len, err, errlen);
    if (r < 0)
        return r;
    return gs_policy_parse(path, text, len, out, err, errlen);
}

bool gs_policy_xid_ignored(const struct gs_policy *p, unsigned long long xid) {
    for (unsigned i = 0; i < p->n_ignored_xids && i < GS_POLICY_MAX_XIDS; i++)
        if (p->ignored_xids[i] == xid)
            return true;
    return false;
}
