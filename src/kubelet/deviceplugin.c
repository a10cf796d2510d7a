/* deviceplugin.c: kubelet Device Plugin API v1beta1 on the gRPC engine of grpcsrv.h (see
 * deviceplugin.h).
 *
 * Every plugin is a server of the manager's one loop (its thread, its lock), and its Register
 * call to the kubelet a client call on that loop. A plugin stops with its server closed and its
 * Register call back; a restart (kubelet restart, socket deleted) waits for that before binding
 * the same path again, because gRPC unlinks a unix socket's path when its listener is destroyed. */
#include "kubelet/deviceplugin.h"
#include "kubelet/grpcsrv.h"

#include <errno.h>
#include <grpc/status.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kubelet/deviceplugin.pb-c.h"
#include "util/log.h"
#include "util/util.h"

#define API_VERSION "v1beta1"
#define REGISTER_METHOD "/v1beta1.Registration/Register"
#define METHOD_PREFIX "/v1beta1.DevicePlugin/"
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
/* The longest the event thread waits when nothing is due (it wakes for gRPC's events). */
#define IDLE_WAIT_MS 30000
#define REGISTER_DEADLINE_MS 10000

enum plugin_state { P_RUNNING, P_STOPPING, P_STOPPED };
enum reg_state { R_WAIT, R_IN_FLIGHT, R_DONE };

struct dp_plugin {
    struct dp_manager *m;
    struct dp_plugin *next;
    char resource[GS_RESOURCE_NAME_MAX];
    char endpoint[128];
    char socket_path[PATH_MAX + 160];
    struct gs_grpc_server *srv;      /* P_RUNNING, P_STOPPING until it is gone */
    enum plugin_state state;
    bool restart_when_stopped, remove_when_stopped;
    bool draining;                   /* removed: stop once the empty list reached every stream */
    struct gs_resource devices;      /* owned copy of the advertised list */
    enum reg_state reg;
    unsigned long long reg_at_ns;    /* R_WAIT: when to try */
    struct gs_grpc_call *reg_call;   /* R_IN_FLIGHT */
    unsigned long long reg_ino;      /* kubelet.sock's identity when Register was sent: which kubelet */
    bool reregister;                 /* a new kubelet appeared while Register was in flight */
    unsigned backoff_ms;
};

struct dp_manager {
    struct gs_grpc_loop *loop;       /* its lock guards everything below */
    char dir[PATH_MAX];
    char kubelet_sock[PATH_MAX + 16];
    struct dp_handlers h;
    struct dp_plugin *plugins;
};

void dp_socket_name(const char *resource, char *buf, size_t len) {
    snprintf(buf, len, "gpuslice-%s.sock", resource);
    for (char *p = buf; *p; p++)
        if (*p == '/')
            *p = '_';
}

/* ---- request handlers (on the loop's thread, its lock held) --------------------------------- */

static int handle_options(void *ctx, const ProtobufCMessage *req, ProtobufCMessage **resp, char *err, size_t errlen) {
    (void)ctx, (void)req;
    V1beta1__DevicePluginOptions *o = malloc(sizeof(*o));
    if (!o) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    v1beta1__device_plugin_options__init(o);
    o->get_preferred_allocation_available = 1;
    o->pre_start_required = 0;
    *resp = &o->base;
    return 0;
}

static int handle_pre_start(void *ctx, const ProtobufCMessage *req, ProtobufCMessage **resp, char *err, size_t errlen) {
    (void)ctx, (void)req;
    V1beta1__PreStartContainerResponse *r = malloc(sizeof(*r));
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    v1beta1__pre_start_container_response__init(r);
    *resp = &r->base;
    return 0;
}

static void release_plain(void *ctx, ProtobufCMessage *resp) {
    (void)ctx;
    free(resp);
}

/* A ListAndWatch message: the resource's whole device list. */
struct device_list {
    V1beta1__ListAndWatchResponse resp; /* first: the message given back to release */
    V1beta1__Device *devs, **ptrs;
    V1beta1__TopologyInfo *topo;
    V1beta1__NUMANode *numa, **numa_ptrs;
};

static void release_device_list(void *ctx, ProtobufCMessage *resp) {
    (void)ctx;
    struct device_list *l = (struct device_list *)resp;
    free(l->devs);
    free(l->ptrs);
    free(l->topo);
    free(l->numa);
    free(l->numa_ptrs);
    free(l);
}

static int handle_list_and_watch(void *ctx, const ProtobufCMessage *req, ProtobufCMessage **resp, char *err,
                                 size_t errlen) {
    (void)req;
    const struct gs_resource *r = &((struct dp_plugin *)ctx)->devices;
    size_t n = r->n_devices, room = n ? n : 1;
    struct device_list *l = calloc(1, sizeof(*l));
    if (l) {
        v1beta1__list_and_watch_response__init(&l->resp);
        l->devs = calloc(room, sizeof(*l->devs));
        l->ptrs = calloc(room, sizeof(*l->ptrs));
        l->topo = calloc(room, sizeof(*l->topo));
        l->numa = calloc(room, sizeof(*l->numa));
        l->numa_ptrs = calloc(room, sizeof(*l->numa_ptrs));
    }
    if (!l || !l->devs || !l->ptrs || !l->topo || !l->numa || !l->numa_ptrs) {
        if (l)
            release_device_list(NULL, &l->resp.base);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        const struct gs_device *d = &r->devices[i];
        v1beta1__device__init(&l->devs[i]);
        l->devs[i].id = (char *)d->id;
        l->devs[i].health = d->healthy ? "Healthy" : "Unhealthy";
        if (d->numa_node >= 0) {
            v1beta1__topology_info__init(&l->topo[i]);
            v1beta1__numanode__init(&l->numa[i]);
            l->numa[i].id = d->numa_node;
            l->numa_ptrs[i] = &l->numa[i];
            l->topo[i].n_nodes = 1;
            l->topo[i].nodes = &l->numa_ptrs[i];
            l->devs[i].topology = &l->topo[i];
        }
        l->ptrs[i] = &l->devs[i];
    }
    l->resp.n_devices = n;
    l->resp.devices = l->ptrs;
    *resp = &l->resp.base;
    return 0;
}

static void check_drain(struct dp_plugin *p);
static void plugin_maybe_finish(struct dp_plugin *p);

static void list_and_watch_event(void *ctx, enum gs_grpc_stream_event ev) {
    struct dp_plugin *p = ctx;
    if (ev == GS_GRPC_STREAM_OPENED)
        log_info("ListAndWatch %s: kubelet connected, sending %u devices", p->resource, p->devices.n_devices);
    else if (ev == GS_GRPC_STREAM_CLOSED)
        log_info("ListAndWatch %s: stream closed", p->resource);
    check_drain(p);
}


/* The CDI part of one container's answer (cdi-cri: cdi_devices; cdi-annotations: one annotation). */
struct cdi_room {
    V1beta1__CDIDevice dev[GS_ALLOC_MAX_CDI];
    V1beta1__CDIDevice *devp[GS_ALLOC_MAX_CDI];
    V1beta1__ContainerAllocateResponse__AnnotationsEntry ann;
    V1beta1__ContainerAllocateResponse__AnnotationsEntry *annp;
    char value[GS_ALLOC_MAX_CDI * (GS_UUID_LEN + 64)];
};

static void fill_cdi(V1beta1__ContainerAllocateResponse *cr, const struct gs_alloc_response *a, struct cdi_room *room) {
    if (a->cdi_cri) {
        for (unsigned i = 0; i < a->n_cdi; i++) {
            v1beta1__cdidevice__init(&room->dev[i]);
            room->dev[i].name = (char *)a->cdi[i];
            room->devp[i] = &room->dev[i];
        }
        cr->n_cdi_devices = a->n_cdi;
        cr->cdi_devices = room->devp;
    }
    if (a->cdi_annotation[0] && a->n_cdi) {
        size_t off = 0;
        for (unsigned i = 0; i < a->n_cdi; i++)
            off += (size_t)snprintf(room->value + off, sizeof(room->value) - off, "%s%s", i ? "," : "", a->cdi[i]);
        v1beta1__container_allocate_response__annotations_entry__init(&room->ann);
        room->ann.key = (char *)a->cdi_annotation;
        room->ann.value = room->value;
        room->annp = &room->ann;
        cr->n_annotations = 1;
        cr->annotations = &room->annp;
    }
}

/* env/envp: room for 1 + GS_ALLOC_MAX_ENVS entries; mounts/mountp: room for a->n_mounts + a->n_extra_mounts. */
static void fill_container_response(V1beta1__ContainerAllocateResponse *cr, const struct gs_alloc_response *a,
                                    V1beta1__ContainerAllocateResponse__EnvsEntry *env,
                                    V1beta1__ContainerAllocateResponse__EnvsEntry **envp, V1beta1__DeviceSpec *specs,
                                    V1beta1__DeviceSpec **specp, V1beta1__Mount *mounts, V1beta1__Mount **mountp) {
    v1beta1__container_allocate_response__init(cr);
    cr->n_envs = 0;
    if (a->visible_env) { /* strategies envvar, volume-mounts (NVIDIA's container runtime) */
        v1beta1__container_allocate_response__envs_entry__init(&env[0]);
        env[0].key = "NVIDIA_VISIBLE_DEVICES";
        env[0].value = a->n_mounts ? "/var/run/nvidia-container-devices" : a->visible_devices;
        envp[cr->n_envs++] = &env[0];
    }
    for (unsigned i = 0; i < a->n_envs; i++) { /* MPS client settings, the guard's limits file */
        v1beta1__container_allocate_response__envs_entry__init(&env[1 + i]);
        env[1 + i].key = (char *)a->envs[i].key;
        env[1 + i].value = (char *)a->envs[i].value;
        envp[cr->n_envs++] = &env[1 + i];
    }
    cr->envs = envp;
    for (unsigned i = 0; i < a->n_devspecs; i++) {
        v1beta1__device_spec__init(&specs[i]);
        specs[i].container_path = (char *)a->devspecs[i].container_path;
        specs[i].host_path = (char *)a->devspecs[i].host_path;
        specs[i].permissions = (char *)a->devspecs[i].permissions;
        specp[i] = &specs[i];
    }
    cr->n_devices = a->n_devspecs;
    cr->devices = specp;
    for (unsigned i = 0; i < a->n_mounts + a->n_extra_mounts; i++) {
        const struct gs_mount *src = i < a->n_mounts ? &a->mounts[i] : &a->extra_mounts[i - a->n_mounts];
        v1beta1__mount__init(&mounts[i]);
        mounts[i].container_path = (char *)src->container_path;
        mounts[i].host_path = (char *)src->host_path;
        mounts[i].read_only = i < a->n_mounts || src->read_only;
        mountp[i] = &mounts[i];
    }
    cr->n_mounts = a->n_mounts + a->n_extra_mounts;
    cr->mounts = mountp;
}

/* An Allocate answer and everything its message points into. */
struct alloc_answer {
    V1beta1__AllocateResponse resp; /* first: the message given back to release */
    size_t done;                    /* alloc[0..done) to free */
    struct gs_alloc_response *alloc;
    V1beta1__ContainerAllocateResponse *crs, **crp;
    V1beta1__ContainerAllocateResponse__EnvsEntry *envs, **envp;
    V1beta1__DeviceSpec *specs, **specp;
    V1beta1__Mount *mounts, **mountp;
    struct cdi_room *cdi;
};

static void release_alloc(void *ctx, ProtobufCMessage *resp) {
    (void)ctx;
    struct alloc_answer *a = (struct alloc_answer *)resp;
    for (size_t i = 0; i < a->done; i++)
        gs_alloc_response_free(&a->alloc[i]);
    free(a->alloc);
    free(a->crs);
    free(a->crp);
    free(a->envs);
    free(a->envp);
    free(a->specs);
    free(a->specp);
    free(a->mounts);
    free(a->mountp);
    free(a->cdi);
    free(a);
}

static int handle_allocate(void *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out, char *err, size_t errlen) {
    struct dp_plugin *p = ctx;
    const V1beta1__AllocateRequest *req = (const V1beta1__AllocateRequest *)msg;
    size_t n = req->n_container_requests, room = n ? n : 1;
    size_t env_room = 1 + GS_ALLOC_MAX_ENVS;
    size_t total_ids = 0;
    for (size_t i = 0; i < n; i++)
        total_ids += req->container_requests[i]->n_devices_ids;
    size_t mount_room = total_ids + GS_ALLOC_MAX_EXTRA_MOUNTS * n + 1; /* volume mounts + MPS's and the guard's */
    struct alloc_answer *a = calloc(1, sizeof(*a));
    if (a) {
        v1beta1__allocate_response__init(&a->resp);
        a->alloc = calloc(room, sizeof(*a->alloc));
        a->crs = calloc(room, sizeof(*a->crs));
        a->crp = calloc(room, sizeof(*a->crp));
        a->envs = calloc(env_room * room, sizeof(*a->envs));
        a->envp = calloc(env_room * room, sizeof(*a->envp));
        a->specs = calloc(room * GS_ALLOC_MAX_DEVSPECS, sizeof(*a->specs));
        a->specp = calloc(room * GS_ALLOC_MAX_DEVSPECS, sizeof(*a->specp));
        a->cdi = calloc(room, sizeof(*a->cdi));
        a->mounts = calloc(mount_room, sizeof(*a->mounts));
        a->mountp = calloc(mount_room, sizeof(*a->mountp));
    }
    char why[256] = "";
    int rc = 0;
    if (!a || !a->alloc || !a->crs || !a->crp || !a->envs || !a->envp || !a->specs || !a->specp || !a->mounts ||
        !a->mountp || !a->cdi) {
        rc = -ENOMEM;
        snprintf(why, sizeof(why), "out of memory");
    }
    size_t mount_off = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const V1beta1__ContainerAllocateRequest *cr = req->container_requests[i];
        rc = p->m->h.allocate(p->m->h.ctx, &p->devices, (const char *const *)cr->devices_ids, cr->n_devices_ids,
                              &a->alloc[i], why, sizeof(why));
        if (rc < 0)
            break;
        a->done++;
        fill_container_response(&a->crs[i], &a->alloc[i], &a->envs[env_room * i], &a->envp[env_room * i],
                                &a->specs[i * GS_ALLOC_MAX_DEVSPECS], &a->specp[i * GS_ALLOC_MAX_DEVSPECS],
                                &a->mounts[mount_off], &a->mountp[mount_off]);
        fill_cdi(&a->crs[i], &a->alloc[i], &a->cdi[i]);
        mount_off += a->alloc[i].n_mounts + a->alloc[i].n_extra_mounts;
        a->crp[i] = &a->crs[i];
        /* debug, not info: a line per Allocate cost the call a fifth of its median time */
        log_debug("Allocate %s: %s -> %s%s", p->resource, cr->n_devices_ids ? cr->devices_ids[0] : "",
                  a->alloc[i].n_cdi ? "CDI " : "NVIDIA_VISIBLE_DEVICES=",
                  a->alloc[i].n_cdi ? a->alloc[i].cdi[0] : a->alloc[i].visible_devices);
    }
    if (rc < 0) {
        log_warn("Allocate %s refused: %s", p->resource, why);
        snprintf(err, errlen, "%s", why);
        if (a)
            release_alloc(NULL, &a->resp.base);
        return rc;
    }
    a->resp.n_container_responses = n;
    a->resp.container_responses = a->crp;
    *out = &a->resp.base;
    return 0;
}

static bool listed_before(char *const *ids, size_t n, const char *id) {
    for (size_t k = 0; k < n; k++)
        if (!strcmp(ids[k], id))
            return true;
    return false;
}

/* One container's GetPreferredAllocation request, as the kubelet makes it: a size of 1 up to the
 * available IDs, each ID a device of the resource and given once, and the must-include IDs (the
 * devices of init containers to reuse) among the available ones, no more of them than the size.
 * -EINVAL with the field and ID in err for anything else. */
static int check_preferred(const struct gs_resource *res, const V1beta1__ContainerPreferredAllocationRequest *r,
                           size_t i, char *err, size_t errlen) {
    if (r->allocation_size <= 0) {
        snprintf(err, errlen, "container_requests[%zu].allocation_size: %d is not a positive number of devices", i,
                 r->allocation_size);
        return -EINVAL;
    }
    if ((size_t)r->allocation_size > r->n_available_deviceids) {
        snprintf(err, errlen, "container_requests[%zu].allocation_size: %d is more than the %zu available_deviceIDs", i,
                 r->allocation_size, r->n_available_deviceids);
        return -EINVAL;
    }
    if (r->n_must_include_deviceids > (size_t)r->allocation_size) {
        snprintf(err, errlen, "container_requests[%zu].must_include_deviceIDs: %zu IDs, more than allocation_size %d",
                 i, r->n_must_include_deviceids, r->allocation_size);
        return -EINVAL;
    }
    for (size_t k = 0; k < r->n_available_deviceids; k++) {
        const char *id = r->available_deviceids[k];
        if (!gs_resource_device(res, id)) {
            snprintf(err, errlen, "container_requests[%zu].available_deviceIDs[%zu]: unknown device ID '%.100s' for %s",
                     i, k, id, res->name);
            return -EINVAL;
        }
        if (listed_before(r->available_deviceids, k, id)) {
            snprintf(err, errlen, "container_requests[%zu].available_deviceIDs[%zu]: device ID '%.100s' listed twice",
                     i, k, id);
            return -EINVAL;
        }
    }
    for (size_t k = 0; k < r->n_must_include_deviceids; k++) {
        const char *id = r->must_include_deviceids[k];
        if (listed_before(r->must_include_deviceids, k, id)) {
            snprintf(err, errlen, "container_requests[%zu].must_include_deviceIDs[%zu]: device ID '%.100s' listed twice",
                     i, k, id);
            return -EINVAL;
        }
        if (!listed_before(r->available_deviceids, r->n_available_deviceids, id)) {
            snprintf(err, errlen,
                     "container_requests[%zu].must_include_deviceIDs[%zu]: device ID '%.100s' is not in "
                     "available_deviceIDs",
                     i, k, id);
            return -EINVAL;
        }
    }
    return 0;
}

/* A GetPreferredAllocation answer and the IDs it points to (the request's strings). */
struct preferred_answer {
    V1beta1__PreferredAllocationResponse resp; /* first: the message given back to release */
    size_t n;
    V1beta1__ContainerPreferredAllocationResponse *crs, **crp;
    const char ***chosen;
};

static void release_preferred(void *ctx, ProtobufCMessage *resp) {
    (void)ctx;
    struct preferred_answer *a = (struct preferred_answer *)resp;
    for (size_t i = 0; a->chosen && i < a->n; i++)
        free(a->chosen[i]);
    free(a->chosen);
    free(a->crs);
    free(a->crp);
    free(a);
}

static int handle_preferred(void *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out, char *err, size_t errlen) {
    struct dp_plugin *p = ctx;
    const V1beta1__PreferredAllocationRequest *req = (const V1beta1__PreferredAllocationRequest *)msg;
    size_t n = req->n_container_requests, room = n ? n : 1;
    for (size_t i = 0; i < n; i++) {
        if (check_preferred(&p->devices, req->container_requests[i], i, err, errlen) < 0) {
            log_warn("GetPreferredAllocation %s refused: %s", p->resource, err);
            return -EINVAL;
        }
    }
    struct preferred_answer *a = calloc(1, sizeof(*a));
    bool ok = a;
    if (a) {
        v1beta1__preferred_allocation_response__init(&a->resp);
        a->n = n;
        a->crs = calloc(room, sizeof(*a->crs));
        a->crp = calloc(room, sizeof(*a->crp));
        a->chosen = calloc(room, sizeof(*a->chosen));
        ok = a->crs && a->crp && a->chosen;
    }
    for (size_t i = 0; ok && i < n; i++) {
        const V1beta1__ContainerPreferredAllocationRequest *r = req->container_requests[i];
        size_t size = (size_t)r->allocation_size; /* checked: 1 .. n_available_deviceids */
        a->chosen[i] = calloc(size, sizeof(char *));
        if (!a->chosen[i]) {
            ok = false;
            break;
        }
        size_t k = p->m->h.preferred(p->m->h.ctx, &p->devices, (const char *const *)r->available_deviceids,
                                     r->n_available_deviceids, (const char *const *)r->must_include_deviceids,
                                     r->n_must_include_deviceids, size, a->chosen[i]);
        v1beta1__container_preferred_allocation_response__init(&a->crs[i]);
        a->crs[i].n_deviceids = k;
        a->crs[i].deviceids = (char **)a->chosen[i];
        a->crp[i] = &a->crs[i];
    }
    if (!ok) {
        if (a)
            release_preferred(NULL, &a->resp.base);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    a->resp.n_container_responses = n;
    a->resp.container_responses = a->crp;
    *out = &a->resp.base;
    return 0;
}

static const struct gs_grpc_method dp_methods[] = {
    { METHOD_PREFIX "GetDevicePluginOptions", &v1beta1__empty__descriptor, handle_options, release_plain },
    { METHOD_PREFIX "ListAndWatch", &v1beta1__empty__descriptor, handle_list_and_watch, release_device_list, true, 0,
      list_and_watch_event },
    { METHOD_PREFIX "Allocate", &v1beta1__allocate_request__descriptor, handle_allocate, release_alloc },
    { METHOD_PREFIX "GetPreferredAllocation", &v1beta1__preferred_allocation_request__descriptor, handle_preferred,
      release_preferred },
    { METHOD_PREFIX "PreStartContainer", &v1beta1__pre_start_container_request__descriptor, handle_pre_start,
      release_plain },
};

/* ---- registration --------------------------------------------------------------------------- */

/* Which kubelet.sock: its inode number and change time together (0: none). The number alone
 * does not tell: a kubelet that restarts unlinks its socket and binds a new one, which often gets
 * the old number, and the agent then took the new kubelet for the one it had registered with. */
static unsigned long long kubelet_ino(const struct dp_manager *m) {
    struct stat st;
    if (stat(m->kubelet_sock, &st) < 0)
        return 0;
    unsigned long long id = (unsigned long long)st.st_ino * 0x9E3779B97F4A7C15ULL;
    id ^= (unsigned long long)st.st_ctim.tv_sec * 1000000000ULL + (unsigned long long)st.st_ctim.tv_nsec;
    return id ? id : 1;
}

static void register_done(void *ctx, const struct gs_grpc_result *res);

static void register_start(struct dp_plugin *p) {
    struct dp_manager *m = p->m;
    p->reg_ino = kubelet_ino(m);
    p->reregister = false;
    V1beta1__DevicePluginOptions opts = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    opts.get_preferred_allocation_available = 1;
    V1beta1__RegisterRequest req = V1BETA1__REGISTER_REQUEST__INIT;
    req.version = API_VERSION;
    req.endpoint = p->endpoint;
    req.resource_name = p->resource;
    req.options = &opts;
    /* A private subchannel with short reconnect backoff: gRPC shares subchannels between
     * channels to one target, and one that failed while the kubelet was down would make the next
     * Register wait out a backoff of a second or more. */
    struct gs_grpc_request r = {
        .socket_path = m->kubelet_sock,
        .method = REGISTER_METHOD,
        .msg = &req.base,
        .deadline_ms = REGISTER_DEADLINE_MS,
        .reconnect_ms = BACKOFF_MIN_MS,
        .reconnect_max_ms = BACKOFF_MAX_MS,
    };
    if (gs_grpc_call_start(m->loop, &r, register_done, p, &p->reg_call) < 0) {
        p->reg_call = NULL;
        p->reg = R_WAIT;
        p->reg_at_ns = gs_now_ns() + (unsigned long long)p->backoff_ms * 1000000ULL;
    } else {
        p->reg = R_IN_FLIGHT;
    }
}

static void register_done(void *ctx, const struct gs_grpc_result *res) {
    struct dp_plugin *p = ctx;
    p->reg_call = NULL;
    if (p->state != P_RUNNING) {
        p->reg = R_WAIT;
    } else if (res->status == GRPC_STATUS_OK) {
        p->reg = R_DONE;
        p->backoff_ms = BACKOFF_MIN_MS;
        log_info("Registered %s with the kubelet (endpoint %s)", p->resource, p->endpoint);
        /* Sent while no kubelet.sock existed, it can only have reached the new kubelet. */
        unsigned long long now = kubelet_ino(p->m);
        if (p->reregister && p->reg_ino && now != p->reg_ino) {
            register_start(p); /* that was the old kubelet: register with the new one */
            return;
        }
        p->reg_ino = now;
    } else {
        log_warn("Failed to register %s with the kubelet at %s: %s (status %d); retrying in %u ms", p->resource,
                 p->m->kubelet_sock, res->details[0] ? res->details : "no answer", res->status, p->backoff_ms);
        p->reg = R_WAIT;
        p->reg_at_ns = gs_now_ns() + (unsigned long long)p->backoff_ms * 1000000ULL;
        p->backoff_ms = p->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : p->backoff_ms * 2;
    }
    plugin_maybe_finish(p);
}

/* ---- plugin lifecycle ----------------------------------------------------------------------- */

static void plugin_closed(void *ctx) {
    struct dp_plugin *p = ctx;
    p->srv = NULL;
    plugin_maybe_finish(p);
}

static void plugin_start(struct dp_plugin *p) {
    int rc = gs_grpc_server_add(p->m->loop, p->socket_path, dp_methods, GS_ARRAY_SIZE(dp_methods), p, plugin_closed,
                                &p->srv);
    if (rc < 0) {
        log_error("Failed to listen on %s for %s", p->socket_path, p->resource);
        p->srv = NULL;
        p->state = P_STOPPED;
        return;
    }
    p->state = P_RUNNING;
    /* Serve first, then register (the kubelet dials us back during Register). */
    p->backoff_ms = BACKOFF_MIN_MS;
    register_start(p);
}

static void plugin_stop(struct dp_plugin *p) {
    if (p->state != P_RUNNING)
        return;
    p->state = P_STOPPING;
    gs_grpc_server_close(p->srv);
    gs_grpc_call_cancel(p->reg_call); /* do not wait out the Register deadline */
}

static void plugin_free(struct dp_plugin *p) {
    free(p->devices.devices);
    free(p);
}

/* Called when a stopping plugin's server or Register call is back: once both are, it is either
 * started again (restart) or removed. */
static void plugin_maybe_finish(struct dp_plugin *p) {
    if (p->state == P_STOPPED && p->remove_when_stopped)
        p->state = P_STOPPING; /* never served (listen failed): nothing outstanding */
    if (p->state != P_STOPPING || p->srv || p->reg_call)
        return;
    p->state = P_STOPPED;
    p->reg = R_WAIT;
    if (p->remove_when_stopped) {
        struct dp_manager *m = p->m;
        for (struct dp_plugin **pp = &m->plugins; *pp; pp = &(*pp)->next) {
            if (*pp == p) {
                *pp = p->next;
                break;
            }
        }
        unlink(p->socket_path);
        log_info("Stopped serving %s", p->resource);
        plugin_free(p);
        return;
    }
    if (p->restart_when_stopped) {
        p->restart_when_stopped = false;
        plugin_start(p);
    }
}

static int copy_resource(struct gs_resource *dst, const struct gs_resource *src) {
    struct gs_device *d = malloc((src->n_devices ? src->n_devices : 1) * sizeof(*d));
    if (!d)
        return -ENOMEM;
    if (src->n_devices) /* a withdrawn resource has no devices (and may have no array) */
        memcpy(d, src->devices, src->n_devices * sizeof(*d));
    free(dst->devices);
    *dst = *src;
    dst->devices = d;
    dst->cap = src->n_devices;
    return 0;
}

static struct dp_plugin *plugin_find(struct dp_manager *m, const char *resource) {
    for (struct dp_plugin *p = m->plugins; p; p = p->next)
        if (strcmp(p->resource, resource) == 0)
            return p;
    return NULL;
}


/* A removed resource first sends an empty device list, so the kubelet withdraws its devices at
 * once, and stops serving when every stream has it. */
static void check_drain(struct dp_plugin *p) {
    if (!p->draining || p->state != P_RUNNING || !gs_grpc_server_streams_current(p->srv))
        return;
    p->draining = false;
    plugin_stop(p);
}

/* ---- manager -------------------------------------------------------------------------------- */

/* The loop's tick: the registration retries that are due; how long until the next one (ms, at
 * most IDLE_WAIT_MS). */
static unsigned register_due(void *ctx) {
    struct dp_manager *m = ctx;
    unsigned long long now = gs_now_ns(), next = now + IDLE_WAIT_MS * 1000000ULL;
    for (struct dp_plugin *p = m->plugins; p; p = p->next) {
        if (p->state != P_RUNNING || p->reg != R_WAIT)
            continue;
        if (now >= p->reg_at_ns)
            register_start(p);
        else if (p->reg_at_ns < next)
            next = p->reg_at_ns;
    }
    return (unsigned)((next - now + 999999) / 1000000);
}

int dp_manager_new(const char *kubelet_dir, const struct dp_handlers *h, struct dp_manager **out) {
    struct dp_manager *m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    if (gs_strlcpy(m->dir, kubelet_dir, sizeof(m->dir)) < 0) {
        free(m);
        return -ENAMETOOLONG;
    }
    snprintf(m->kubelet_sock, sizeof(m->kubelet_sock), "%s/kubelet.sock", kubelet_dir);
    m->h = *h;
    int rc = gs_grpc_loop_new(register_due, m, &m->loop);
    if (rc < 0) {
        free(m);
        return rc;
    }
    *out = m;
    return 0;
}

static int sync_locked(struct dp_manager *m, const struct gs_plan *plan);

int dp_manager_sync(struct dp_manager *m, const struct gs_plan *plan) {
    gs_grpc_loop_lock(m->loop);
    int r = sync_locked(m, plan);
    gs_grpc_loop_unlock(m->loop);
    return r;
}

static int sync_locked(struct dp_manager *m, const struct gs_plan *plan) {
    for (unsigned i = 0; i < plan->n_resources; i++) {
        const struct gs_resource *r = &plan->resources[i];
        struct dp_plugin *p = plugin_find(m, r->name);
        if (p && p->remove_when_stopped) { /* back before it was gone: keep serving it */
            p->remove_when_stopped = p->draining = false;
            if (p->state == P_STOPPING)
                p->restart_when_stopped = true;
        }
        if (p) {
            if (gs_resource_equal(&p->devices, r))
                continue;
            if (copy_resource(&p->devices, r) < 0)
                return -ENOMEM;
            gs_grpc_server_push(p->srv);
            continue;
        }
        p = calloc(1, sizeof(*p));
        if (!p || copy_resource(&p->devices, r) < 0) {
            free(p);
            return -ENOMEM;
        }
        p->m = m;
        gs_strlcpy(p->resource, r->name, sizeof(p->resource));
        dp_socket_name(r->name, p->endpoint, sizeof(p->endpoint));
        snprintf(p->socket_path, sizeof(p->socket_path), "%s/%s", m->dir, p->endpoint);
        if (strlen(p->socket_path) >= 108) {
            log_error("Socket path %s is longer than a unix socket allows (107 bytes): %s not served",
                      p->socket_path, r->name);
            plugin_free(p);
            continue;
        }
        p->next = m->plugins;
        m->plugins = p;
        log_info("Serving %s with %u devices on %s", p->resource, r->n_devices, p->socket_path);
        plugin_start(p);
    }
    for (struct dp_plugin *p = m->plugins; p; p = p->next) {
        if (p->remove_when_stopped || gs_plan_resource(plan, p->resource))
            continue;
        p->remove_when_stopped = true;
        if (p->state != P_RUNNING)
            continue;
        struct gs_resource empty = { 0 };
        gs_strlcpy(empty.name, p->resource, sizeof(empty.name));
        if (gs_grpc_server_streams(p->srv) && copy_resource(&p->devices, &empty) == 0) {
            p->draining = true;
            log_info("Withdrawing every device of %s", p->resource);
            gs_grpc_server_push(p->srv);
            check_drain(p);
        } else {
            plugin_stop(p);
        }
    }
    /* Plugins that never served are freed here; stopping ones when their server and call are back. */
    for (struct dp_plugin *p = m->plugins, *next; p; p = next) {
        next = p->next;
        if (p->state == P_STOPPED)
            plugin_maybe_finish(p);
    }
    return 0;
}

static void restart_plugin(struct dp_plugin *p) {
    if (p->remove_when_stopped)
        return;
    if (p->state == P_RUNNING) {
        p->restart_when_stopped = true;
        plugin_stop(p);
    } else if (p->state == P_STOPPED) {
        plugin_start(p);
    } else {
        p->restart_when_stopped = true;
    }
}

/* A new kubelet.sock: the kubelet's cleanup deleted our sockets just before (inotify reports that
 * first, and those plugins are already restarting). Every plugin must be registered with the new
 * kubelet exactly once: Register calls are tagged with the inode of the kubelet.sock they went to. */
void dp_manager_kubelet_restarted(struct dp_manager *m) {
    gs_grpc_loop_lock(m->loop);
    unsigned long long ino = kubelet_ino(m);
    for (struct dp_plugin *p = m->plugins; ino && p; p = p->next) {
        if (p->state != P_RUNNING || p->restart_when_stopped || p->remove_when_stopped)
            continue; /* starting again: it registers then */
        struct stat st;
        if (stat(p->socket_path, &st) < 0) {
            restart_plugin(p);
            continue;
        }
        if (p->reg == R_WAIT) {
            p->backoff_ms = BACKOFF_MIN_MS;
            register_start(p);
        } else if (p->reg_ino != ino) {
            if (p->reg == R_IN_FLIGHT)
                p->reregister = true;
            else
                register_start(p);
        }
    }
    gs_grpc_loop_unlock(m->loop);
}

void dp_manager_socket_deleted(struct dp_manager *m, const char *basename) {
    gs_grpc_loop_lock(m->loop);
    for (struct dp_plugin *p = m->plugins; p; p = p->next) {
        if (strcmp(p->endpoint, basename) != 0 || p->state != P_RUNNING || p->restart_when_stopped)
            continue;
        struct stat st;
        if (stat(p->socket_path, &st) == 0)
            continue; /* our own restart already made a new one */
        log_warn("Socket %s was deleted (kubelet restart?): serving %s again", p->socket_path, p->resource);
        restart_plugin(p);
    }
    gs_grpc_loop_unlock(m->loop);
}

unsigned dp_manager_registered(struct dp_manager *m) {
    gs_grpc_loop_lock(m->loop);
    unsigned n = 0;
    for (const struct dp_plugin *p = m->plugins; p; p = p->next)
        n += p->reg == R_DONE && p->state == P_RUNNING;
    gs_grpc_loop_unlock(m->loop);
    return n;
}

int dp_manager_start(struct dp_manager *m) {
    return gs_grpc_loop_start(m->loop);
}

void dp_manager_free(struct dp_manager *m) {
    if (!m)
        return;
    gs_grpc_loop_lock(m->loop);
    for (struct dp_plugin *p = m->plugins; p; p = p->next) {
        p->remove_when_stopped = true;
        plugin_stop(p);
    }
    gs_grpc_loop_unlock(m->loop);
    /* Every server closed and every Register call back (each plugin removed as its own are). */
    gs_grpc_loop_free(m->loop);
    for (struct dp_plugin *p = m->plugins, *next; p; p = next) { /* those that never served */
        next = p->next;
        unlink(p->socket_path);
        plugin_free(p);
    }
    free(m);
}
