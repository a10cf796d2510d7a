/* plugindir.c: the kubelet's device-plugins directory as another plugin leaves it (plugindir.h):
 * socket names, the checkpoint (jansson, duplicate keys refused), and the one probe with I/O. */
#include "kubelet/plugindir.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/util.h"

/* The checkpoint's Data.RegisteredDevices object (NULL: none registered), or -EINVAL. *root: to
 * json_decref. */
static int registered(const char *text, size_t len, json_t **root, json_t **reg, char *err, size_t errlen) {
    *root = *reg = NULL;
    if (len > GS_KL_CHECKPOINT_MAX) {
        snprintf(err, errlen, "over %u bytes", GS_KL_CHECKPOINT_MAX);
        return -EINVAL;
    }
    json_error_t je;
    *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!*root) {
        snprintf(err, errlen, "not JSON: line %d: %s", je.line, je.text);
        return -EINVAL;
    }
    json_t *data = json_object_get(*root, "Data");
    json_t *r = json_object_get(data, "RegisteredDevices");
    if (!json_is_object(data) || !(json_is_object(r) || json_is_null(r))) {
        snprintf(err, errlen, "no Data.RegisteredDevices object");
        return -EINVAL;
    }
    const char *key;
    json_t *ids;
    json_object_foreach(r, key, ids) {
        if (!json_is_array(ids) && !json_is_null(ids)) {
            snprintf(err, errlen, "Data.RegisteredDevices.%.100s: not an array of device IDs", key);
            return -EINVAL;
        }
    }
    *reg = json_is_object(r) ? r : NULL;
    return 0;
}

int gs_kl_checkpoint_parse(const char *text, size_t len, char (*names)[GS_KL_RESOURCE_MAX], unsigned max,
                           unsigned *n, unsigned *n_devices, char *err, size_t errlen) {
    *n = 0;
    *n_devices = 0;
    json_t *root, *reg;
    int r = registered(text, len, &root, &reg, err, errlen);
    const char *key;
    json_t *ids;
    if (r == 0 && reg) {
        json_object_foreach(reg, key, ids) {
            *n_devices += (unsigned)json_array_size(ids);
            if (*n < max && strlen(key) < GS_KL_RESOURCE_MAX)
                memcpy(names[(*n)++], key, strlen(key) + 1);
        }
    }
    json_decref(root);
    return r;
}

int gs_kl_checkpoint_foreign(const char *text, size_t len, const char *resource, const char *const *ours,
                             size_t n_ours, char *first, size_t firstlen, char *err, size_t errlen) {
    json_t *root, *reg;
    int r = registered(text, len, &root, &reg, err, errlen);
    json_t *ids = r == 0 ? json_object_get(reg, resource) : NULL;
    size_t i;
    json_t *id;
    json_array_foreach(ids, i, id) {
        const char *s = json_string_value(id);
        bool known = false;
        for (size_t k = 0; s && k < n_ours && !known; k++)
            known = !strcmp(ours[k], s);
        if (known)
            continue;
        if (r == 0 && first && firstlen)
            snprintf(first, firstlen, "%s", s ? s : "(not a string)");
        r++;
    }
    json_decref(root);
    return r;
}

int gs_kl_checkpoint_each(const char *text, size_t len, void (*fn)(const char *resource, const char *id, void *ctx),
                          void *ctx, char *err, size_t errlen) {
    json_t *root, *reg;
    int r = registered(text, len, &root, &reg, err, errlen);
    const char *key;
    json_t *ids, *id;
    size_t i;
    if (r == 0 && reg) {
        json_object_foreach(reg, key, ids) {
            json_array_foreach(ids, i, id) {
                if (json_is_string(id))
                    fn(key, json_string_value(id), ctx);
            }
        }
    }
    json_decref(root);
    return r;
}

static void pod_ids(json_t *e, json_t *ids,
                    void (*fn)(const char *, const char *, const char *, const char *, void *), void *ctx) {
    const char *uid = json_string_value(json_object_get(e, "PodUID"));
    const char *ctr = json_string_value(json_object_get(e, "ContainerName"));
    const char *res = json_string_value(json_object_get(e, "ResourceName"));
    size_t i;
    json_t *id;
    json_array_foreach(ids, i, id) {
        if (uid && ctr && res && json_is_string(id))
            fn(uid, ctr, res, json_string_value(id), ctx);
    }
}

int gs_kl_checkpoint_pods(const char *text, size_t len,
                          void (*fn)(const char *pod_uid, const char *container, const char *resource, const char *id,
                                     void *ctx),
                          void *ctx, char *err, size_t errlen) {
    json_t *root, *reg;
    int r = registered(text, len, &root, &reg, err, errlen);
    json_t *entries = r == 0 ? json_object_get(json_object_get(root, "Data"), "PodDeviceEntries") : NULL, *e;
    size_t i;
    json_array_foreach(entries, i, e) {
        json_t *ids = json_object_get(e, "DeviceIDs"), *per_node;
        const char *numa;
        if (json_is_array(ids))
            pod_ids(e, ids, fn, ctx);
        else
            json_object_foreach(ids, numa, per_node) pod_ids(e, per_node, fn, ctx);
    }
    json_decref(root);
    return r;
}

enum gs_kl_socket_kind gs_kl_socket_kind(const char *name) {
    if (!gs_has_suffix(name, ".sock"))
        return GS_KL_SOCK_NONE;
    if (!strcmp(name, "kubelet.sock"))
        return GS_KL_SOCK_KUBELET;
    if (!strncmp(name, "gpuslice-", 9))
        return GS_KL_SOCK_OURS;
    if (!strncmp(name, "nvidia-", 7) || !strcmp(name, "nvidia.sock"))
        return GS_KL_SOCK_NVIDIA;
    return GS_KL_SOCK_OTHER;
}

int gs_kl_nvidia_resource(const char *name, char *buf, size_t len) {
    if (gs_kl_socket_kind(name) != GS_KL_SOCK_NVIDIA)
        return -EINVAL;
    size_t n = strlen(name);
    int w = !strcmp(name, "nvidia.sock") ? snprintf(buf, len, "nvidia.com/gpu")
                                          : snprintf(buf, len, "nvidia.com/%.*s", (int)(n - 7 - 5), name + 7);
    return w < 0 || (size_t)w >= len || !strcmp(buf, "nvidia.com/") ? -EINVAL : 0;
}

enum gs_kl_sock_state gs_kl_socket_probe(const char *path, int *err) {
    struct stat st;
    *err = 0;
    if (lstat(path, &st) < 0) {
        *err = errno;
        return errno == ENOENT ? GS_KL_SOCK_ABSENT : GS_KL_SOCK_ERROR;
    }
    if (!S_ISSOCK(st.st_mode))
        return GS_KL_SOCK_NOT_SOCKET;
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof(sa.sun_path)) {
        *err = ENAMETOOLONG;
        return GS_KL_SOCK_ERROR;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *err = errno;
        return GS_KL_SOCK_ERROR;
    }
    int r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    int e = errno;
    close(fd);
    if (r == 0 || e == EAGAIN || e == EINPROGRESS)
        return GS_KL_SOCK_LISTENING;
    *err = e;
    return e == ECONNREFUSED ? GS_KL_SOCK_STALE : GS_KL_SOCK_ERROR;
}
