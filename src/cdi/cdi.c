/* cdi.c: CDI spec generation. */
#include "cdi/cdi.h"
#include "cdi/ldcache.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

int gs_proc_devices_parse(const char *name, const char *text, struct gs_dev_majors *out, char *err, size_t errlen) {
    *out = (struct gs_dev_majors){ -1, -1, -1 };
    bool chr = false;
    unsigned line = 0;
    for (const char *p = text; *p;) {
        const char *eol = strchr(p, '\n');
        size_t n = eol ? (size_t)(eol - p) : strlen(p);
        line++;
        char buf[128];
        if (n >= sizeof(buf)) {
            snprintf(err, errlen, "%s:%u: line too long", name, line);
            return -EINVAL;
        }
        memcpy(buf, p, n);
        buf[n] = '\0';
        p += n + (eol ? 1 : 0);
        if (!strcmp(buf, "Character devices:")) {
            chr = true;
            continue;
        }
        if (!strcmp(buf, "Block devices:")) {
            chr = false;
            continue;
        }
        if (!buf[0] || !chr)
            continue;
        char *s = buf, *end;
        while (*s == ' ')
            s++;
        long major = strtol(s, &end, 10);
        if (end == s || *end != ' ' || major < 0 || major > 4095 || !end[1]) {
            snprintf(err, errlen, "%s:%u: malformed line '%s' (expected 'MAJOR NAME')", name, line, buf);
            return -EINVAL;
        }
        const char *dev = end + 1;
        if (!strcmp(dev, "nvidia-frontend") || (!strcmp(dev, "nvidia") && out->nvidia < 0))
            out->nvidia = (int)major;
        else if (!strcmp(dev, "nvidia-uvm"))
            out->uvm = (int)major;
        else if (!strcmp(dev, "nvidia-caps"))
            out->caps = (int)major;
    }
    if (out->nvidia < 0) {
        snprintf(err, errlen, "%s: no nvidia-frontend character device: is the NVIDIA driver loaded?", name);
        return -ENOENT;
    }
    return 0;
}

static json_t *node(const char *path, int major, int minor) {
    return json_pack("{s:s,s:s,s:i,s:i}", "path", path, "type", "c", "major", major, "minor", minor);
}

static json_t *device(const char *name, json_t *nodes) {
    return json_pack("{s:s,s:{s:o}}", "name", name, "containerEdits", "deviceNodes", nodes);
}

/* specs-go/version.go's requiresV0x0 checks, on the JSON the spec is written as. */
static bool edits_need(const json_t *edits, const char *list, const char *field) {
    const json_t *a = json_object_get(edits, list), *e;
    size_t i;
    json_array_foreach(a, i, e) {
        const char *v = json_string_value(json_object_get(e, field));
        if (v && v[0])
            return true;
    }
    return false;
}

static bool nonempty(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return (json_is_object(v) && json_object_size(v)) || (json_is_array(v) && json_array_size(v));
}

const char *gs_cdi_min_version(const json_t *spec) {
    const json_t *devices = json_object_get(spec, "devices"), *d;
    const json_t *edits = json_object_get(spec, "containerEdits");
    bool v4 = edits_need(edits, "mounts", "type"), v5 = edits_need(edits, "deviceNodes", "hostPath");
    bool v6 = nonempty(spec, "annotations");
    bool v7 = json_object_get(edits, "intelRdt") || nonempty(edits, "additionalGids");
    size_t i;
    json_array_foreach(devices, i, d) {
        const json_t *e = json_object_get(d, "containerEdits");
        const char *name = json_string_value(json_object_get(d, "name"));
        v4 |= edits_need(e, "mounts", "type");
        v5 |= edits_need(e, "deviceNodes", "hostPath") || (name && name[0] && !isalpha((unsigned char)name[0]));
        v6 |= nonempty(d, "annotations");
        v7 |= json_object_get(e, "intelRdt") || nonempty(e, "additionalGids");
    }
    const char *kind = json_string_value(json_object_get(spec, "kind")), *slash = kind ? strchr(kind, '/') : NULL;
    v6 |= slash && slash != kind && slash[1] && strchr(slash + 1, '.'); /* a dot in the class */
    return v7 ? "0.7.0" : v6 ? "0.6.0" : v5 ? "0.5.0" : v4 ? "0.4.0" : "0.3.0";
}

/* The scalar value of KEY in a YAML mapping node, or NULL. */
static const char *yaml_get(yaml_document_t *doc, yaml_node_t *map, const char *key, yaml_node_t **node) {
    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key), *v = yaml_document_get_node(doc, p->value);
        if (k && k->type == YAML_SCALAR_NODE && !strcmp((const char *)k->data.scalar.value, key)) {
            if (node)
                *node = v;
            return v && v->type == YAML_SCALAR_NODE ? (const char *)v->data.scalar.value : NULL;
        }
    }
    return NULL;
}

int gs_cdi_conflicts(const char *kind, const char *const *names, size_t n, const char *file, const char *text,
                     size_t len, char *msg, size_t msglen) {
    msg[0] = '\0';
    if (len > GS_CDI_SCAN_MAX) {
        snprintf(msg, msglen, "%s: larger than %u bytes, not read", file, GS_CDI_SCAN_MAX);
        return -EINVAL;
    }
    /* JSON is YAML: one parser for both. libyaml keeps aliases as references (no expansion), so
     * the document is bounded by the text. */
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser))
        return -ENOMEM;
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        snprintf(msg, msglen, "%s:%zu:%zu: %s", file, parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                 parser.problem ? parser.problem : "not YAML or JSON");
        yaml_parser_delete(&parser);
        return -EINVAL;
    }
    yaml_parser_delete(&parser);
    yaml_node_t *root = yaml_document_get_root_node(&doc), *devs = NULL;
    const char *their = yaml_get(&doc, root, "kind", NULL);
    yaml_get(&doc, root, "devices", &devs);
    int found = 0;
    if (!their || !devs || devs->type != YAML_SEQUENCE_NODE) {
        snprintf(msg, msglen, "%s: not a CDI spec (no kind or no devices)", file);
        found = -EINVAL;
    } else if (!strcmp(their, kind)) {
        /* Each of our names counts once, however often the other spec lists it. */
        bool *seen = calloc(n ? n : 1, sizeof(*seen));
        if (!seen) {
            yaml_document_delete(&doc);
            return -ENOMEM;
        }
        size_t off = (size_t)snprintf(msg, msglen, "%s: defines", file);
        for (yaml_node_item_t *it = devs->data.sequence.items.start; it < devs->data.sequence.items.top; it++) {
            const char *name = yaml_get(&doc, yaml_document_get_node(&doc, *it), "name", NULL);
            for (size_t i = 0; name && i < n; i++) {
                if (seen[i] || strcmp(name, names[i]))
                    continue;
                seen[i] = true;
                if (found < 4 && off < msglen)
                    off += (size_t)snprintf(msg + off, msglen - off, "%s %s=%s", found ? "," : "", kind, name);
                found++;
                break;
            }
        }
        free(seen);
        if (off < msglen)
            snprintf(msg + off, msglen - off, "%s (%d of our devices)", found > 4 ? ", ..." : "", found);
        if (!found)
            msg[0] = '\0';
    }
    yaml_document_delete(&doc);
    return found;
}

int gs_cdi_device_names(const char *spec, char ***names, size_t *n) {
    *names = NULL;
    *n = 0;
    json_t *j = json_loads(spec, 0, NULL), *d;
    const json_t *devices = json_object_get(j, "devices");
    if (!json_is_array(devices)) {
        json_decref(j);
        return -EINVAL;
    }
    size_t count = json_array_size(devices), bytes = 0, i;
    json_array_foreach(devices, i, d) {
        const char *name = json_string_value(json_object_get(d, "name"));
        bytes += name ? strlen(name) + 1 : 0;
    }
    char **out = malloc(count * sizeof(char *) + bytes + 1), *p;
    if (!out) {
        json_decref(j);
        return -ENOMEM;
    }
    p = (char *)(out + count);
    json_array_foreach(devices, i, d) {
        const char *name = json_string_value(json_object_get(d, "name"));
        if (!name)
            continue;
        out[(*n)++] = strcpy(p, name);
        p += strlen(name) + 1;
    }
    json_decref(j);
    *names = out;
    return 0;
}

bool gs_cdi_kind_valid(const char *kind) {
    const char *slash = strchr(kind, '/');
    if (!slash || slash == kind || !slash[1] || strchr(slash + 1, '/'))
        return false;
    for (const char *p = kind; p < slash; p++)
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '.')
            return false;
    for (const char *p = slash + 1; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.')
            return false;
    return isalnum((unsigned char)kind[0]) && isalnum((unsigned char)slash[-1]) && isalnum((unsigned char)slash[1]) &&
           isalnum((unsigned char)kind[strlen(kind) - 1]);
}

void gs_cdi_qualified(const char *kind, const char *name, char *buf, size_t len) {
    snprintf(buf, len, "%s=%s", kind, name);
}

/* The libraries a CUDA (compute) container needs from the driver, as NVIDIA's container toolkit
 * mounts them for the "compute" and "utility" capabilities. */
static const char *const driver_libs[] = {
    "libcuda.so", "libcudadebugger.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so", "libnvidia-nvvm.so",
    "libnvidia-opencl.so", "libnvidia-gpucomp.so", "libnvidia-allocator.so", "libnvidia-cfg.so", "libnvidia-nscq.so",
    "libnvidia-nvvm70.so",
    /* video ("video" capability): decode, encode, optical flow */
    "libvdpau_nvidia.so", "libnvidia-encode.so", "libnvidia-opticalflow.so", "libnvcuvid.so",
    /* display ("display" capability): frame buffer capture */
    "libnvidia-fbc.so",
    NULL,
};
static const char *const driver_bins[] = {
    "nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server", NULL,
};

struct lib_walk {
    const char *root;
    uint32_t flags;
    struct gs_cdi_driver *out;
};

static void add_file(struct gs_cdi_driver *out, const char *root, const char *path, const char *dir, const char *name) {
    for (unsigned i = 0; i < out->n; i++)
        if (!strcmp(strrchr(out->files[i].container, '/') + 1, name))
            return; /* the first entry wins, as for the linker */
    if (out->n == GS_CDI_MAX_DRIVER_FILES)
        return;
    bool slash = root[0] && root[strlen(root) - 1] == '/';
    snprintf(out->files[out->n].host, sizeof(out->files[0].host), "%s%s", root, slash ? path + 1 : path);
    snprintf(out->files[out->n].container, sizeof(out->files[0].container), "%s/%s", dir, name);
    out->n++;
}

static int on_lib(const char *soname, const char *path, uint32_t flags, void *ctx) {
    struct lib_walk *w = ctx;
    if (w->flags && flags != w->flags)
        return 0;
    if (path[0] != '/' || strstr(path, "/../") || strlen(soname) > 96 || strchr(soname, '/'))
        return 0;
    for (const char *const *l = driver_libs; *l; l++) {
        size_t n = strlen(*l);
        /* a versioned soname: "libcuda.so.1", not the development link "libcuda.so" */
        if (!strncmp(soname, *l, n) && soname[n] == '.' && soname[n + 1]) {
            add_file(w->out, w->root, path, GS_CDI_LIB_DIR, soname);
            break;
        }
    }
    return 0;
}

int gs_cdi_driver_files(const char *host_root, const char *read_root, const unsigned char *cache, size_t len,
                        gs_exists_fn exists, void *ctx, struct gs_cdi_driver *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    snprintf(out->hook, sizeof(out->hook), "%s", GS_CDI_HOOK_PATH);
    struct lib_walk w = { host_root, gs_ldcache_native_flags(), out };
    int r = cache ? gs_ldcache_walk("ld.so.cache", cache, len, on_lib, &w, err, errlen) : 0;
    if (r < 0)
        return r;
    for (const char *const *b = driver_bins; *b; b++) {
        char path[64];
        snprintf(path, sizeof(path), "/usr/bin/%s", *b);
        char seen[400];
        bool slash = read_root[0] && read_root[strlen(read_root) - 1] == '/';
        snprintf(seen, sizeof(seen), "%s%s", read_root, slash ? path + 1 : path);
        if (exists(seen, ctx))
            add_file(out, host_root, path, GS_CDI_BIN_DIR, *b);
    }
    char seen[400];
    snprintf(seen, sizeof(seen), "%s%sdev/nvidia-modeset", read_root,
             read_root[0] && read_root[strlen(read_root) - 1] == '/' ? "" : "/");
    out->modeset = exists(seen, ctx);
    return 0;
}

/* The spec's text with its computed cdiVersion first, as a reader expects it. */
static int finish(json_t *spec, char **out, char *err, size_t errlen) {
    *out = NULL;
    if (spec) {
        json_t *ordered = json_pack("{s:s}", "cdiVersion", gs_cdi_min_version(spec));
        json_object_update(ordered, spec);
        *out = json_dumps(ordered, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        json_decref(ordered);
    }
    json_decref(spec);
    if (!*out) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    return 0;
}

static bool has_libcuda(const struct gs_cdi_driver *drv) {
    for (unsigned i = 0; i < drv->n; i++)
        if (!strcmp(drv->files[i].container, GS_CDI_LIB_DIR "/libcuda.so.1"))
            return true;
    return false;
}

int gs_cdi_spec(const struct gs_inventory *inv, const struct gs_dev_majors *maj, const struct gs_mig_minors *mm,
                const struct gs_cdi_driver *drv, const char *kind, char **out, char *err, size_t errlen) {
    *out = NULL;
    if (!gs_cdi_kind_valid(kind)) {
        snprintf(err, errlen, "CDI kind '%s': expected VENDOR/CLASS, e.g. nvidia.com/gpu", kind);
        return -EINVAL;
    }
    json_t *devices = json_array();
    char path[64], name[GS_UUID_LEN];
    for (unsigned i = 0; i < inv->n_gpus; i++) {
        const struct gs_gpu *g = &inv->gpus[i];
        snprintf(path, sizeof(path), "/dev/nvidia%u", g->minor);
        json_t *nodes = json_pack("[o]", node(path, maj->nvidia, (int)g->minor));
        snprintf(name, sizeof(name), "%u", i);
        json_array_append_new(devices, device(name, json_deep_copy(nodes)));
        json_array_append_new(devices, device(g->uuid, nodes));
        for (unsigned k = 0; k < g->n_mig; k++) {
            const struct gs_mig_device *m = &g->mig[k];
            int gi = mm ? gs_mig_minor_lookup(mm, g->minor, m->gi_id, -1) : -1;
            int ci = mm ? gs_mig_minor_lookup(mm, g->minor, m->gi_id, (int)m->ci_id) : -1;
            if (maj->caps < 0 || gi < 0 || ci < 0) {
                snprintf(err, errlen, "MIG device %s (GPU %u, GI %u, CI %u): %s", m->uuid, i, m->gi_id, m->ci_id,
                         maj->caps < 0 ? "no nvidia-caps character device in /proc/devices"
                                       : "its capability minors are not in mig-minors");
                json_decref(devices);
                return -ENODEV;
            }
            json_t *mn = json_array();
            json_array_append_new(mn, node(path, maj->nvidia, (int)g->minor));
            char cap[64];
            snprintf(cap, sizeof(cap), "/dev/nvidia-caps/nvidia-cap%d", gi);
            json_array_append_new(mn, node(cap, maj->caps, gi));
            snprintf(cap, sizeof(cap), "/dev/nvidia-caps/nvidia-cap%d", ci);
            json_array_append_new(mn, node(cap, maj->caps, ci));
            snprintf(name, sizeof(name), "%u:%u:%u", i, m->gi_id, m->ci_id);
            json_array_append_new(devices, device(name, json_deep_copy(mn)));
            json_array_append_new(devices, device(m->uuid, mn));
        }
    }
    json_t *common = json_array();
    json_array_append_new(common, node("/dev/nvidiactl", maj->nvidia, 255));
    if (maj->uvm >= 0) {
        json_array_append_new(common, node("/dev/nvidia-uvm", maj->uvm, 0));
        json_array_append_new(common, node("/dev/nvidia-uvm-tools", maj->uvm, 1));
    }
    if (drv && drv->modeset)
        json_array_append_new(common, node("/dev/nvidia-modeset", maj->nvidia, 254));
    /* NVIDIA's runtime in legacy mode would add the GPUs of an image's NVIDIA_VISIBLE_DEVICES=all */
    json_t *edits = json_pack("{s:[s],s:o}", "env", "NVIDIA_VISIBLE_DEVICES=void", "deviceNodes", common);
    if (drv && drv->hook[0] && has_libcuda(drv))
        json_object_set_new(edits, "hooks",
                            json_pack("[{s:s,s:s,s:[s,s,s]}]", "hookName", "createContainer", "path", drv->hook,
                                      "args", "gpuslice-cdi-hook", "--lib-dir", GS_CDI_LIB_DIR));
    if (drv && drv->n) {
        json_t *mounts = json_array();
        for (unsigned i = 0; i < drv->n; i++)
            json_array_append_new(mounts, json_pack("{s:s,s:s,s:[s,s,s,s]}", "hostPath", drv->files[i].host,
                                                    "containerPath", drv->files[i].container, "options", "ro",
                                                    "nosuid", "nodev", "bind"));
        json_object_set_new(edits, "mounts", mounts);
    }
    return finish(json_pack("{s:s,s:o,s:o}", "kind", kind, "devices", devices, "containerEdits", edits), out, err,
                  errlen);
}

int gs_cdi_alloc_spec(const char *kind, const char *name, const struct gs_alloc_response *a, char **out, char *err,
                      size_t errlen) {
    json_t *env = json_array(), *mounts = json_array();
    for (unsigned i = 0; i < a->n_envs; i++) {
        char kv[sizeof(a->envs[0].key) + sizeof(a->envs[0].value) + 2];
        snprintf(kv, sizeof(kv), "%s=%s", a->envs[i].key, a->envs[i].value);
        json_array_append_new(env, json_string(kv));
    }
    for (unsigned i = 0; i < a->n_extra_mounts; i++) {
        const struct gs_mount *m = &a->extra_mounts[i];
        json_array_append_new(mounts, json_pack("{s:s,s:s,s:[s,s,s,s]}", "hostPath", m->host_path, "containerPath",
                                                m->container_path, "options", m->read_only ? "ro" : "rw", "nosuid",
                                                "nodev", "rbind"));
    }
    return finish(json_pack("{s:s,s:[{s:s,s:{s:o,s:o}}]}", "kind", kind, "devices", "name", name, "containerEdits",
                            "env", env, "mounts", mounts),
                  out, err, errlen);
}
