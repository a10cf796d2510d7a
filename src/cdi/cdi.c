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
    return 0;
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
    json_t *edits = json_pack("{s:o}", "deviceNodes", common);
    if (drv && drv->n) {
        json_t *mounts = json_array();
        for (unsigned i = 0; i < drv->n; i++)
            json_array_append_new(mounts, json_pack("{s:s,s:s,s:[s,s,s,s]}", "hostPath", drv->files[i].host,
                                                    "containerPath", drv->files[i].container, "options", "ro",
                                                    "nosuid", "nodev", "bind"));
        json_object_set_new(edits, "mounts", mounts);
    }
    json_t *spec = json_pack("{s:s,s:s,s:o,s:o}", "cdiVersion", GS_CDI_VERSION, "kind", kind, "devices", devices,
                             "containerEdits", edits);
    *out = spec ? json_dumps(spec, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(spec);
    if (!*out) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    return 0;
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
    json_t *spec = json_pack("{s:s,s:s,s:[{s:s,s:{s:o,s:o}}]}", "cdiVersion", GS_CDI_VERSION, "kind", kind, "devices",
                             "name", name, "containerEdits", "env", env, "mounts", mounts);
    *out = spec ? json_dumps(spec, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(spec);
    if (!*out) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    return 0;
}
