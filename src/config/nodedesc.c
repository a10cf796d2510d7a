/* nodedesc.c: parses and validates the simulated node description (format in nodedesc.h). */
#include "nodedesc.h"

#include <errno.h>
#include <string.h>

#include "config/yamlutil.h"
#include "util/util.h"

#define DEFAULT_DRIVER_VERSION "580.65.06"
#define DEFAULT_CUDA_MAJOR 13
#define DEFAULT_CUDA_MINOR 0

static const char *const root_keys[] = { "gpus", "driver_version", "cuda_version", NULL };
static const char *const gpu_keys[] = { "model", "count", "mig", NULL };
/* true/false too, because "mig: true" is what people type first. Even index = enabled. */
static const char *const mig_values[] = { "enabled", "disabled", "true", "false", NULL };

/* Digits and dots, starting and ending with a digit, no empty component: what NVML prints. */
static bool driver_version_valid(const char *s) {
    if (!*s)
        return false;
    for (const char *p = s; *p; p++) {
        if (*p == '.') {
            if (p == s || p[1] == '.' || p[1] == '\0')
                return false;
        } else if (*p < '0' || *p > '9') {
            return false;
        }
    }
    return true;
}

static int parse_cuda_version(const char *s, int *major, int *minor) {
    const char *dot = strchr(s, '.');
    if (!dot || dot == s || (size_t)(dot - s) > 3)
        return -EINVAL;
    char maj[4] = { 0 };
    memcpy(maj, s, (size_t)(dot - s));
    unsigned long long a, b;
    if (gs_parse_uint(maj, 0, 999, &a) < 0 || gs_parse_uint(dot + 1, 0, 999, &b) < 0)
        return -EINVAL;
    *major = (int)a;
    *minor = (int)b;
    return 0;
}

static int parse_gpu(struct gs_yaml *y, const yaml_node_t *entry, const char *path, struct gs_nodedesc *nd) {
    char p[GS_YAML_PATH_MAX];
    int r = gs_yaml_check_keys(y, entry, path, gpu_keys);
    if (r < 0)
        return r;

    const yaml_node_t *model_node = gs_yaml_map_get(y, entry, "model");
    if (!model_node)
        return gs_yaml_error(y, entry, path, "missing required key 'model'; known models: %s", gs_catalog_keys());
    const char *model_name;
    r = gs_yaml_scalar(y, model_node, gs_yaml_path_key(p, path, "model"), &model_name);
    if (r < 0)
        return r;
    const struct gs_model *model = gs_catalog_find(model_name);
    if (!model)
        return gs_yaml_error(y, model_node, p, "unknown model '%.64s'; known models: %s", model_name,
                             gs_catalog_keys());

    unsigned long long count = 1;
    const yaml_node_t *count_node = gs_yaml_map_get(y, entry, "count");
    if (count_node) {
        r = gs_yaml_uint(y, count_node, gs_yaml_path_key(p, path, "count"), 1, GS_NODE_MAX_GPUS, &count);
        if (r < 0)
            return r;
    }
    if (nd->n_gpus + count > GS_NODE_MAX_GPUS)
        return gs_yaml_error(y, count_node ? count_node : entry, count_node ? p : path,
                             "total GPU count %llu exceeds the maximum of %d per node", nd->n_gpus + count,
                             GS_NODE_MAX_GPUS);

    bool mig = false;
    const yaml_node_t *mig_node = gs_yaml_map_get(y, entry, "mig");
    if (mig_node) {
        unsigned v;
        r = gs_yaml_enum(y, mig_node, gs_yaml_path_key(p, path, "mig"), mig_values, &v);
        if (r < 0)
            return r;
        mig = v % 2 == 0;
        if (mig && model->mig_mem_slices == 0)
            return gs_yaml_error(y, mig_node, p, "model %s does not support MIG", model->key);
    }

    for (unsigned long long i = 0; i < count; i++)
        nd->gpus[nd->n_gpus++] = (struct gs_node_gpu){ .model = model, .mig_enabled = mig };
    return 0;
}

static int parse_root(struct gs_yaml *y, struct gs_nodedesc *nd) {
    const yaml_node_t *root = gs_yaml_root(y);
    if (gs_yaml_is_null(root))
        return gs_yaml_error(y, root, NULL, "document is empty; expected a mapping with a 'gpus' list");
    if (root->type != YAML_MAPPING_NODE)
        return gs_yaml_error(y, root, NULL, "expected a mapping with a 'gpus' list at the top level");
    int r = gs_yaml_check_keys(y, root, NULL, root_keys);
    if (r < 0)
        return r;

    const yaml_node_t *gpus = gs_yaml_map_get(y, root, "gpus");
    if (!gpus)
        return gs_yaml_error(y, root, NULL, "missing required key 'gpus'");
    r = gs_yaml_expect(y, gpus, "gpus", YAML_SEQUENCE_NODE);
    if (r < 0)
        return r;
    size_t n = gs_yaml_seq_len(gpus);
    if (n == 0)
        return gs_yaml_error(y, gpus, "gpus", "must list at least one GPU");
    for (size_t i = 0; i < n; i++) {
        char p[GS_YAML_PATH_MAX];
        r = parse_gpu(y, gs_yaml_seq_at(y, gpus, i), gs_yaml_path_index(p, "gpus", i), nd);
        if (r < 0)
            return r;
    }

    const yaml_node_t *node = gs_yaml_map_get(y, root, "driver_version");
    if (node) {
        const char *s;
        r = gs_yaml_scalar(y, node, "driver_version", &s);
        if (r < 0)
            return r;
        if (!driver_version_valid(s) || strlen(s) >= sizeof(nd->driver_version))
            return gs_yaml_error(y, node, "driver_version",
                                 "invalid driver version '%.64s'; expected digits and dots such as \"%s\"", s,
                                 DEFAULT_DRIVER_VERSION);
        gs_strlcpy(nd->driver_version, s, sizeof(nd->driver_version));
    }

    node = gs_yaml_map_get(y, root, "cuda_version");
    if (node) {
        const char *s;
        r = gs_yaml_scalar(y, node, "cuda_version", &s);
        if (r < 0)
            return r;
        if (parse_cuda_version(s, &nd->cuda_major, &nd->cuda_minor) < 0)
            return gs_yaml_error(y, node, "cuda_version",
                                 "invalid CUDA version '%.64s'; expected MAJOR.MINOR such as \"%d.%d\"", s,
                                 DEFAULT_CUDA_MAJOR, DEFAULT_CUDA_MINOR);
    }
    return 0;
}

int gs_nodedesc_parse(const char *name, const char *text, size_t len, struct gs_nodedesc *out, char *err,
                      size_t errlen) {
    _cleanup_yaml_ struct gs_yaml y = { 0 };
    int r = gs_yaml_load(&y, name, text, len, err, errlen);
    if (r < 0)
        return r;

    /* Built on the side so that *out is untouched on error. */
    struct gs_nodedesc nd = { .cuda_major = DEFAULT_CUDA_MAJOR, .cuda_minor = DEFAULT_CUDA_MINOR };
    gs_strlcpy(nd.driver_version, DEFAULT_DRIVER_VERSION, sizeof(nd.driver_version));

    r = parse_root(&y, &nd);
    if (r < 0)
        return r;
    *out = nd;
    return 0;
}

int gs_nodedesc_load(const char *path, struct gs_nodedesc *out, char *err, size_t errlen) {
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    int r = gs_yaml_read_file(path, &text, &len, err, errlen);
    if (r < 0)
        return r;
    return gs_nodedesc_parse(path, text, len, out, err, errlen);
}
