/* snapshot.c: nodes from a trace node list or a JSON snapshot (snapshot.h). */
#include "extender/snapshot.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "place/replay.h"
#include "util/util.h"

#define MAX_SNAPSHOT ((size_t)64 << 20)

static int int_field(const json_t *o, const char *key, long long lo, long long hi, long long dflt, long long *out,
                     const char *what, size_t i, char *err, size_t errlen) {
    const json_t *v = json_object_get(o, key);
    if (!v) {
        *out = dflt;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        snprintf(err, errlen, "%s: nodes[%zu].%s: expected an integer in %lld..%lld", what, i, key, lo, hi);
        return -EINVAL;
    }
    *out = json_integer_value(v);
    return 0;
}

int ex_snapshot_parse(const char *text, size_t len, const char *what, struct ex_node_spec **nodes, size_t *n, char *err,
                      size_t errlen) {
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    const json_t *arr = json_object_get(root, "nodes");
    *nodes = NULL;
    *n = 0;
    if (!json_is_array(arr)) {
        if (root)
            snprintf(err, errlen, "%s: no \"nodes\" array", what);
        else
            snprintf(err, errlen, "%s:%d:%d: %s", what, je.line, je.column, je.text);
        json_decref(root);
        return -EINVAL;
    }
    struct ex_node_spec *ns = calloc(json_array_size(arr) + 1, sizeof(*ns));
    if (!ns) {
        json_decref(root);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    size_t i;
    const json_t *o;
    int r = 0;
    json_array_foreach(arr, i, o) {
        struct ex_node_spec *s = &ns[i];
        const char *name = json_string_value(json_object_get(o, "name"));
        const char *model = json_string_value(json_object_get(o, "gpuModel"));
        const json_t *fr = json_object_get(o, "gpuFree");
        long long cpu, mem, gpus, gmem, rep;
        if (!name || !name[0] || strlen(name) >= EX_NAME_MAX) {
            snprintf(err, errlen, "%s: nodes[%zu].name: missing or longer than %d", what, i, EX_NAME_MAX - 1);
            r = -EINVAL;
            break;
        }
        if (model && strlen(model) >= PL_MODEL_LEN) {
            snprintf(err, errlen, "%s: nodes[%zu].gpuModel: longer than %d", what, i, PL_MODEL_LEN - 1);
            r = -EINVAL;
            break;
        }
        if (fr && (!json_is_array(fr) || json_array_size(fr) > PL_MAX_GPUS)) {
            snprintf(err, errlen, "%s: nodes[%zu].gpuFree: expected an array of at most %d", what, i, PL_MAX_GPUS);
            r = -EINVAL;
            break;
        }
        if ((r = int_field(o, "cpuMilli", 0, 1LL << 40, 0, &cpu, what, i, err, errlen)) < 0 ||
            (r = int_field(o, "memoryMiB", 0, 1LL << 40, 0, &mem, what, i, err, errlen)) < 0 ||
            (r = int_field(o, "gpus", 0, PL_MAX_GPUS, fr ? (long long)json_array_size(fr) : 0, &gpus, what, i, err,
                           errlen)) < 0 ||
            (r = int_field(o, "gpuMemoryMiB", 0, 1LL << 30, 0, &gmem, what, i, err, errlen)) < 0 ||
            (r = int_field(o, "replicas", 0, 1000, 0, &rep, what, i, err, errlen)) < 0)
            break;
        if (fr && json_array_size(fr) != (size_t)gpus) {
            snprintf(err, errlen, "%s: nodes[%zu].gpuFree: %zu values for %lld GPUs", what, i, json_array_size(fr),
                     gpus);
            r = -EINVAL;
            break;
        }
        snprintf(s->name, sizeof(s->name), "%s", name);
        snprintf(s->model, sizeof(s->model), "%s", model ? model : "");
        s->cpu = cpu, s->mem = mem, s->n_gpu = (int)gpus, s->gpu_mem_mib = gmem, s->replicas = (int)rep;
        for (int g = 0; g < s->n_gpu; g++) {
            const json_t *v = json_array_get(fr, (size_t)g);
            if (fr && (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > PL_MILLI)) {
                snprintf(err, errlen, "%s: nodes[%zu].gpuFree[%d]: expected milli-GPU 0..1000", what, i, g);
                r = -EINVAL;
                break;
            }
            s->gpu_free[g] = fr ? (int)json_integer_value(v) : PL_MILLI;
        }
        if (r < 0)
            break;
    }
    size_t count = json_array_size(arr);
    json_decref(root);
    if (r < 0) {
        free(ns);
        return r;
    }
    *nodes = ns;
    *n = count;
    return 0;
}

/* the trace's node list, through the replay's loader (its validation and errors) */
static int load_csv(const char *path, struct ex_node_spec **nodes, size_t *n, char *err, size_t errlen) {
    struct rp_trace t = { 0 };
    int r = rp_load_nodes(&t, path, err, errlen);
    if (r < 0) {
        rp_trace_free(&t);
        return r;
    }
    struct ex_node_spec *ns = calloc(t.n_nodes + 1, sizeof(*ns));
    if (!ns) {
        rp_trace_free(&t);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    for (size_t i = 0; i < t.n_nodes; i++) {
        const struct pl_node *p = &t.nodes[i];
        snprintf(ns[i].name, sizeof(ns[i].name), "%s", t.node_names[i]);
        ns[i].cpu = p->cpu_cap;
        ns[i].mem = p->mem_cap;
        ns[i].n_gpu = p->n_gpu;
        if (p->model >= 0)
            snprintf(ns[i].model, sizeof(ns[i].model), "%s", t.models.models[p->model]);
        memcpy(ns[i].gpu_free, p->gpu_free, sizeof(ns[i].gpu_free));
    }
    *nodes = ns;
    *n = t.n_nodes;
    rp_trace_free(&t);
    return 0;
}

int ex_snapshot_load(const char *path, struct ex_node_spec **nodes, size_t *n, char *err, size_t errlen) {
    size_t len = strlen(path);
    if (len > 4 && strcmp(path + len - 4, ".csv") == 0)
        return load_csv(path, nodes, n, err, errlen);
    char *text = NULL;
    size_t tl = 0;
    int r = gs_read_file(path, MAX_SNAPSHOT, &text, &tl);
    if (r < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(-r));
        return r;
    }
    r = ex_snapshot_parse(text, tl, path, nodes, n, err, errlen);
    free(text);
    return r;
}
