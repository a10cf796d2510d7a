/* deviceplugin.c: kubelet Device Plugin API v1beta1 on the gRPC core C API (see deviceplugin.h).
 *
 * Every asynchronous operation carries a tag that points at its call; a plugin counts the tags
 * it has outstanding and is torn down only when all have come back. A plugin restart (kubelet
 * restart, socket deleted) shuts the old server down completely before binding the same path
 * again, because gRPC unlinks a unix socket's path when its listener is destroyed. */
#include "kubelet/deviceplugin.h"
#include "kubelet/pbmsg.h"

#include <errno.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
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

enum op { OP_NEW, OP_RECV, OP_DONE, OP_SEND, OP_CLOSE, OP_REGISTER, OP_SHUTDOWN, OP_COUNT };
enum call_kind { CALL_SERVER, CALL_REGISTER };
enum plugin_state { P_RUNNING, P_STOPPING, P_STOPPED };
enum reg_state { R_WAIT, R_IN_FLIGHT, R_DONE };

struct dp_plugin;

struct tag {
    struct dp_call *call;
    struct dp_plugin *plugin; /* for OP_SHUTDOWN */
    enum op op;
};

struct dp_call {
    enum call_kind kind;
    struct dp_plugin *p;
    struct tag tags[OP_COUNT];
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md, trailing;
    grpc_byte_buffer *recv;
    int cancelled;
    /* ListAndWatch stream */
    bool is_stream, closed, close_done, send_in_flight;
    unsigned long long sent_version;
    struct dp_call *next_stream;
    /* Register */
    grpc_channel *channel;
    grpc_status_code status;
    grpc_slice status_details;
};

struct dp_plugin {
    struct dp_manager *m;
    struct dp_plugin *next;
    char resource[GS_RESOURCE_NAME_MAX];
    char endpoint[128];
    char socket_path[PATH_MAX + 160];
    grpc_server *server;
    enum plugin_state state;
    bool restart_when_stopped, remove_when_stopped;
    bool draining;                   /* removed: stop once the empty list reached every stream */
    unsigned refs;
    struct tag shutdown_tag;
    struct gs_resource devices;      /* owned copy of the advertised list */
    unsigned long long version;
    struct dp_call *streams;
    enum reg_state reg;
    unsigned long long reg_at_ns;    /* R_WAIT: when to try */
    struct dp_call *reg_call;        /* R_IN_FLIGHT */
    unsigned long long reg_ino;      /* kubelet.sock's identity when Register was sent: which kubelet */
    bool reregister;                 /* a new kubelet appeared while Register was in flight */
    unsigned backoff_ms;
};

struct dp_manager {
    pthread_mutex_t lock;            /* everything below; taken around each event and API call */
    pthread_t thread;
    bool thread_started;
    atomic_bool stop;
    char dir[PATH_MAX];
    char kubelet_sock[PATH_MAX + 16];
    struct dp_handlers h;
    grpc_completion_queue *cq;
    struct dp_plugin *plugins;
};

void dp_socket_name(const char *resource, char *buf, size_t len) {
    snprintf(buf, len, "gpuslice-%s.sock", resource);
    for (char *p = buf; *p; p++)
        if (*p == '/')
            *p = '_';
}

/* ---- messages ------------------------------------------------------------------------------- */

static grpc_byte_buffer *pack_device_list(const struct gs_resource *r) {
    V1beta1__ListAndWatchResponse resp = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
    size_t n = r->n_devices;
    V1beta1__Device *devs = calloc(n ? n : 1, sizeof(*devs));
    V1beta1__Device **ptrs = calloc(n ? n : 1, sizeof(*ptrs));
    V1beta1__TopologyInfo *topo = calloc(n ? n : 1, sizeof(*topo));
    V1beta1__NUMANode *numa = calloc(n ? n : 1, sizeof(*numa));
    V1beta1__NUMANode **numa_ptrs = calloc(n ? n : 1, sizeof(*numa_ptrs));
    grpc_byte_buffer *bb = NULL;
    if (!devs || !ptrs || !topo || !numa || !numa_ptrs)
        goto out;
    for (size_t i = 0; i < n; i++) {
        const struct gs_device *d = &r->devices[i];
        v1beta1__device__init(&devs[i]);
        devs[i].id = (char *)d->id;
        devs[i].health = d->healthy ? "Healthy" : "Unhealthy";
        if (d->numa_node >= 0) {
            v1beta1__topology_info__init(&topo[i]);
            v1beta1__numanode__init(&numa[i]);
            numa[i].id = d->numa_node;
            numa_ptrs[i] = &numa[i];
            topo[i].n_nodes = 1;
            topo[i].nodes = &numa_ptrs[i];
            devs[i].topology = &topo[i];
        }
        ptrs[i] = &devs[i];
    }
    resp.n_devices = n;
    resp.devices = ptrs;
    bb = gs_pb_pack(&resp.base);
out:
    free(devs);
    free(ptrs);
    free(topo);
    free(numa);
    free(numa_ptrs);
    return bb;
}

/* ---- calls and tags ------------------------------------------------------------------------- */

static struct dp_call *call_new(struct dp_plugin *p, enum call_kind kind) {
    struct dp_call *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->kind = kind;
    c->p = p;
    for (int i = 0; i < OP_COUNT; i++)
        c->tags[i] = (struct tag){ c, p, (enum op)i };
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->md);
    grpc_metadata_array_init(&c->trailing);
    c->status_details = grpc_empty_slice();
    return c;
}

static void call_free(struct dp_call *c) {
    if (c->recv)
        grpc_byte_buffer_destroy(c->recv);
    if (c->call)
        grpc_call_unref(c->call);
    if (c->channel)
        grpc_channel_destroy(c->channel);
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->md);
    grpc_metadata_array_destroy(&c->trailing);
    grpc_slice_unref(c->status_details);
    free(c);
}

static bool start_batch(struct dp_call *c, const grpc_op *ops, size_t n, enum op op) {
    grpc_call_error e = grpc_call_start_batch(c->call, ops, n, &c->tags[op], NULL);
    if (e != GRPC_CALL_OK) {
        log_error("gRPC start_batch failed for %s (op %d): error %d", c->p->resource, (int)op, (int)e);
        return false;
    }
    c->p->refs++;
    return true;
}

static void plugin_maybe_finish(struct dp_plugin *p);
static void plugin_start(struct dp_plugin *p);
static void register_start(struct dp_plugin *p);

static void request_new_call(struct dp_plugin *p) {
    if (p->state != P_RUNNING)
        return;
    struct dp_call *c = call_new(p, CALL_SERVER);
    if (!c)
        return;
    grpc_call_error e =
        grpc_server_request_call(p->server, &c->call, &c->details, &c->md, p->m->cq, p->m->cq, &c->tags[OP_NEW]);
    if (e != GRPC_CALL_OK) {
        log_error("gRPC request_call failed for %s: error %d", p->resource, (int)e);
        call_free(c);
        return;
    }
    p->refs++;
}

/* Sends a unary answer (msg may be NULL when status is not OK) and waits for the close. */
static void send_unary(struct dp_call *c, const ProtobufCMessage *msg, grpc_status_code status, const char *details) {
    grpc_call_error e = gs_grpc_answer(c->call, msg, status, details, &c->cancelled, &c->tags[OP_DONE]);
    if (e != GRPC_CALL_OK) {
        log_error("gRPC start_batch failed for %s (op %d): error %d", c->p->resource, (int)OP_DONE, (int)e);
        call_free(c);
        return;
    }
    c->p->refs++;
}

static void stream_send(struct dp_call *c) {
    struct dp_plugin *p = c->p;
    if (c->closed || c->send_in_flight || c->sent_version == p->version)
        return;
    grpc_byte_buffer *bb = pack_device_list(&p->devices);
    if (!bb)
        return;
    grpc_op ops[2];
    memset(ops, 0, sizeof(ops));
    size_t n = 0;
    if (c->sent_version == 0)
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = bb;
    unsigned long long v = p->version;
    if (start_batch(c, ops, n, OP_SEND)) {
        c->send_in_flight = true;
        c->sent_version = v;
    }
    grpc_byte_buffer_destroy(bb);
}

static void stream_unlink(struct dp_call *c) {
    for (struct dp_call **pp = &c->p->streams; *pp; pp = &(*pp)->next_stream) {
        if (*pp == c) {
            *pp = c->next_stream;
            return;
        }
    }
}

/* ---- request handlers ----------------------------------------------------------------------- */

static void handle_options(struct dp_call *c) {
    V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    o.get_preferred_allocation_available = 1;
    o.pre_start_required = 0;
    send_unary(c, &o.base, GRPC_STATUS_OK, NULL);
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

static void handle_allocate(struct dp_call *c) {
    struct dp_plugin *p = c->p;
    char why[640];
    V1beta1__AllocateRequest *req =
        (V1beta1__AllocateRequest *)gs_pb_unpack_request(&v1beta1__allocate_request__descriptor, c->recv, why, sizeof(why));
    if (!req) {
        log_warn("Allocate %s refused: %s", p->resource, why);
        send_unary(c, NULL, GRPC_STATUS_INVALID_ARGUMENT, why);
        return;
    }
    size_t n = req->n_container_requests;
    struct gs_alloc_response *alloc = calloc(n ? n : 1, sizeof(*alloc));
    V1beta1__ContainerAllocateResponse *crs = calloc(n ? n : 1, sizeof(*crs));
    V1beta1__ContainerAllocateResponse **crp = calloc(n ? n : 1, sizeof(*crp));
    size_t env_room = 1 + GS_ALLOC_MAX_ENVS;
    V1beta1__ContainerAllocateResponse__EnvsEntry *envs = calloc(env_room * (n ? n : 1), sizeof(*envs));
    V1beta1__ContainerAllocateResponse__EnvsEntry **envp = calloc(env_room * (n ? n : 1), sizeof(*envp));
    V1beta1__DeviceSpec *specs = calloc((n ? n : 1) * GS_ALLOC_MAX_DEVSPECS, sizeof(*specs));
    V1beta1__DeviceSpec **specp = calloc((n ? n : 1) * GS_ALLOC_MAX_DEVSPECS, sizeof(*specp));
    size_t total_ids = 0;
    for (size_t i = 0; i < n; i++)
        total_ids += req->container_requests[i]->n_devices_ids;
    size_t mount_room = total_ids + GS_ALLOC_MAX_EXTRA_MOUNTS * n + 1; /* volume mounts + MPS's and the guard's */
    struct cdi_room *cdi = calloc(n ? n : 1, sizeof(*cdi));
    V1beta1__Mount *mounts = calloc(mount_room, sizeof(*mounts));
    V1beta1__Mount **mountp = calloc(mount_room, sizeof(*mountp));
    size_t done = 0, mount_off = 0;
    char err[256] = "";
    int rc = 0;
    if (!alloc || !crs || !crp || !envs || !envp || !specs || !specp || !mounts || !mountp || !cdi) {
        rc = -ENOMEM;
        snprintf(err, sizeof(err), "out of memory");
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const V1beta1__ContainerAllocateRequest *cr = req->container_requests[i];
        rc = p->m->h.allocate(p->m->h.ctx, &p->devices, (const char *const *)cr->devices_ids, cr->n_devices_ids,
                              &alloc[i], err, sizeof(err));
        if (rc < 0)
            break;
        done++;
        fill_container_response(&crs[i], &alloc[i], &envs[env_room * i], &envp[env_room * i], &specs[i * GS_ALLOC_MAX_DEVSPECS],
                                &specp[i * GS_ALLOC_MAX_DEVSPECS], &mounts[mount_off], &mountp[mount_off]);
        fill_cdi(&crs[i], &alloc[i], &cdi[i]);
        mount_off += alloc[i].n_mounts + alloc[i].n_extra_mounts;
        crp[i] = &crs[i];
        /* debug, not info: a line per Allocate cost the call a fifth of its median time */
        log_debug("Allocate %s: %s -> %s%s", p->resource, cr->n_devices_ids ? cr->devices_ids[0] : "",
                 alloc[i].n_cdi ? "CDI " : "NVIDIA_VISIBLE_DEVICES=", alloc[i].n_cdi ? alloc[i].cdi[0] : alloc[i].visible_devices);
    }
    if (rc == 0) {
        V1beta1__AllocateResponse resp = V1BETA1__ALLOCATE_RESPONSE__INIT;
        resp.n_container_responses = n;
        resp.container_responses = crp;
        send_unary(c, &resp.base, GRPC_STATUS_OK, NULL);
    } else {
        log_warn("Allocate %s refused: %s", p->resource, err);
        send_unary(c, NULL, gs_grpc_status_of(rc), err);
    }
    for (size_t i = 0; i < done; i++)
        gs_alloc_response_free(&alloc[i]);
    free(alloc);
    free(crs);
    free(crp);
    free(envs);
    free(envp);
    free(specs);
    free(specp);
    free(mounts);
    free(mountp);
    free(cdi);
    protobuf_c_message_free_unpacked(&req->base, NULL);
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

static void handle_preferred(struct dp_call *c) {
    struct dp_plugin *p = c->p;
    char why[640];
    V1beta1__PreferredAllocationRequest *req = (V1beta1__PreferredAllocationRequest *)gs_pb_unpack_request(
        &v1beta1__preferred_allocation_request__descriptor, c->recv, why, sizeof(why));
    if (!req) {
        log_warn("GetPreferredAllocation %s refused: %s", p->resource, why);
        send_unary(c, NULL, GRPC_STATUS_INVALID_ARGUMENT, why);
        return;
    }
    size_t n = req->n_container_requests;
    for (size_t i = 0; i < n; i++) {
        if (check_preferred(&p->devices, req->container_requests[i], i, why, sizeof(why)) < 0) {
            log_warn("GetPreferredAllocation %s refused: %s", p->resource, why);
            send_unary(c, NULL, GRPC_STATUS_INVALID_ARGUMENT, why);
            protobuf_c_message_free_unpacked(&req->base, NULL);
            return;
        }
    }
    V1beta1__ContainerPreferredAllocationResponse *crs = calloc(n ? n : 1, sizeof(*crs));
    V1beta1__ContainerPreferredAllocationResponse **crp = calloc(n ? n : 1, sizeof(*crp));
    const char ***chosen = calloc(n ? n : 1, sizeof(*chosen));
    bool ok = crs && crp && chosen;
    for (size_t i = 0; ok && i < n; i++) {
        const V1beta1__ContainerPreferredAllocationRequest *r = req->container_requests[i];
        size_t size = (size_t)r->allocation_size; /* checked: 1 .. n_available_deviceids */
        chosen[i] = calloc(size, sizeof(char *));
        if (!chosen[i]) {
            ok = false;
            break;
        }
        size_t k = p->m->h.preferred(p->m->h.ctx, &p->devices, (const char *const *)r->available_deviceids,
                                     r->n_available_deviceids, (const char *const *)r->must_include_deviceids,
                                     r->n_must_include_deviceids, size, chosen[i]);
        v1beta1__container_preferred_allocation_response__init(&crs[i]);
        crs[i].n_deviceids = k;
        crs[i].deviceids = (char **)chosen[i];
        crp[i] = &crs[i];
    }
    if (ok) {
        V1beta1__PreferredAllocationResponse resp = V1BETA1__PREFERRED_ALLOCATION_RESPONSE__INIT;
        resp.n_container_responses = n;
        resp.container_responses = crp;
        send_unary(c, &resp.base, GRPC_STATUS_OK, NULL);
    } else {
        send_unary(c, NULL, GRPC_STATUS_INTERNAL, "out of memory");
    }
    for (size_t i = 0; chosen && i < n; i++)
        free(chosen[i]);
    free(chosen);
    free(crs);
    free(crp);
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void handle_list_and_watch(struct dp_call *c) {
    struct dp_plugin *p = c->p;
    c->is_stream = true;
    c->next_stream = p->streams;
    p->streams = c;
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->cancelled;
    if (!start_batch(c, &op, 1, OP_CLOSE)) {
        stream_unlink(c);
        call_free(c);
        return;
    }
    log_info("ListAndWatch %s: kubelet connected, sending %u devices", p->resource, p->devices.n_devices);
    stream_send(c);
}

static bool method_is(const grpc_call_details *d, const char *name) {
    size_t pl = strlen(METHOD_PREFIX), nl = strlen(name);
    return GRPC_SLICE_LENGTH(d->method) == pl + nl &&
           memcmp(GRPC_SLICE_START_PTR(d->method), METHOD_PREFIX, pl) == 0 &&
           memcmp(GRPC_SLICE_START_PTR(d->method) + pl, name, nl) == 0;
}

static void dispatch(struct dp_call *c) {
    if (method_is(&c->details, "GetDevicePluginOptions"))
        handle_options(c);
    else if (method_is(&c->details, "ListAndWatch"))
        handle_list_and_watch(c);
    else if (method_is(&c->details, "Allocate"))
        handle_allocate(c);
    else if (method_is(&c->details, "GetPreferredAllocation"))
        handle_preferred(c);
    else if (method_is(&c->details, "PreStartContainer")) {
        V1beta1__PreStartContainerResponse r = V1BETA1__PRE_START_CONTAINER_RESPONSE__INIT;
        send_unary(c, &r.base, GRPC_STATUS_OK, NULL);
    } else
        send_unary(c, NULL, GRPC_STATUS_UNIMPLEMENTED, "unknown method");
}

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

static void register_start(struct dp_plugin *p) {
    struct dp_manager *m = p->m;
    p->reg_ino = kubelet_ino(m);
    p->reregister = false;
    struct dp_call *c = call_new(p, CALL_REGISTER);
    if (!c)
        return;
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    char target[PATH_MAX + 32];
    snprintf(target, sizeof(target), "unix:%s", m->kubelet_sock);
    /* A private subchannel with short reconnect backoff: gRPC shares subchannels between
     * channels to one target, and one that failed while the kubelet was down would make the next
     * Register wait out a backoff of a second or more. */
    grpc_arg args[] = {
        { GRPC_ARG_INTEGER, GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, { .integer = 1 } },
        { GRPC_ARG_INTEGER, GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, { .integer = BACKOFF_MIN_MS } },
        { GRPC_ARG_INTEGER, GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, { .integer = BACKOFF_MIN_MS } },
        { GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, { .integer = BACKOFF_MAX_MS } },
    };
    grpc_channel_args chan_args = { GS_ARRAY_SIZE(args), args };
    c->channel = grpc_channel_create(target, creds, &chan_args);
    grpc_channel_credentials_release(creds);
    grpc_slice method = grpc_slice_from_static_string(REGISTER_METHOD);
    gpr_timespec deadline =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(REGISTER_DEADLINE_MS, GPR_TIMESPAN));
    c->call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, m->cq, method, NULL, deadline, NULL);
    V1beta1__DevicePluginOptions opts = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    opts.get_preferred_allocation_available = 1;
    V1beta1__RegisterRequest req = V1BETA1__REGISTER_REQUEST__INIT;
    req.version = API_VERSION;
    req.endpoint = p->endpoint;
    req.resource_name = p->resource;
    req.options = &opts;
    grpc_byte_buffer *bb = gs_pb_pack(&req.base);
    grpc_op ops[6];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &c->md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &c->recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &c->trailing;
    ops[5].data.recv_status_on_client.status = &c->status;
    ops[5].data.recv_status_on_client.status_details = &c->status_details;
    if (!bb || !c->call || !start_batch(c, ops, 6, OP_REGISTER)) {
        call_free(c);
        p->reg = R_WAIT;
        p->reg_at_ns = gs_now_ns() + (unsigned long long)p->backoff_ms * 1000000ULL;
    } else {
        p->reg = R_IN_FLIGHT;
        p->reg_call = c;
    }
    if (bb)
        grpc_byte_buffer_destroy(bb);
}

static void register_done(struct dp_call *c, bool ok) {
    struct dp_plugin *p = c->p;
    p->reg_call = NULL;
    if (p->state != P_RUNNING) {
        p->reg = R_WAIT;
    } else if (ok && c->status == GRPC_STATUS_OK) {
        p->reg = R_DONE;
        p->backoff_ms = BACKOFF_MIN_MS;
        log_info("Registered %s with the kubelet (endpoint %s)", p->resource, p->endpoint);
        /* Sent while no kubelet.sock existed, it can only have reached the new kubelet. */
        unsigned long long now = kubelet_ino(p->m);
        if (p->reregister && p->reg_ino && now != p->reg_ino) {
            call_free(c);
            register_start(p); /* that was the old kubelet: register with the new one */
            return;
        }
        p->reg_ino = now;
    } else {
        char details[256];
        gs_grpc_details(c->status_details, details, sizeof(details));
        log_warn("Failed to register %s with the kubelet at %s: %s (status %d); retrying in %u ms", p->resource,
                 p->m->kubelet_sock, details[0] ? details : "no answer", (int)c->status, p->backoff_ms);
        p->reg = R_WAIT;
        p->reg_at_ns = gs_now_ns() + (unsigned long long)p->backoff_ms * 1000000ULL;
        p->backoff_ms = p->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : p->backoff_ms * 2;
    }
    call_free(c);
}

/* ---- plugin lifecycle ----------------------------------------------------------------------- */

static void plugin_start(struct dp_plugin *p) {
    struct dp_manager *m = p->m;
    unlink(p->socket_path); /* a stale socket from an earlier run */
    p->server = grpc_server_create(NULL, NULL);
    grpc_server_register_completion_queue(p->server, m->cq, NULL);
    char addr[sizeof(p->socket_path) + 8];
    snprintf(addr, sizeof(addr), "unix:%s", p->socket_path);
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    int port = grpc_server_add_http2_port(p->server, addr, creds);
    grpc_server_credentials_release(creds);
    if (!port) {
        log_error("Failed to listen on %s for %s", p->socket_path, p->resource);
        grpc_server_destroy(p->server);
        p->server = NULL;
        p->state = P_STOPPED;
        return;
    }
    grpc_server_start(p->server);
    p->state = P_RUNNING;
    request_new_call(p);
    /* Serve first, then register (the kubelet dials us back during Register). */
    p->backoff_ms = BACKOFF_MIN_MS;
    register_start(p);
}

static void plugin_stop(struct dp_plugin *p) {
    if (p->state != P_RUNNING)
        return;
    p->state = P_STOPPING;
    p->shutdown_tag = (struct tag){ NULL, p, OP_SHUTDOWN };
    grpc_server_shutdown_and_notify(p->server, p->m->cq, &p->shutdown_tag);
    p->refs++;
    grpc_server_cancel_all_calls(p->server);
    if (p->reg_call) /* do not wait out the Register deadline */
        grpc_call_cancel(p->reg_call->call, NULL);
}

static void plugin_free(struct dp_plugin *p) {
    free(p->devices.devices);
    free(p);
}

/* Called after each event: a stopping plugin whose every tag has returned is destroyed, then
 * either started again (restart) or removed. */
static void plugin_maybe_finish(struct dp_plugin *p) {
    if (p->state == P_STOPPED && p->remove_when_stopped)
        p->state = P_STOPPING; /* never served (listen failed): nothing outstanding */
    if (p->state != P_STOPPING || p->refs > 0)
        return;
    if (p->server)
        grpc_server_destroy(p->server);
    p->server = NULL;
    p->state = P_STOPPED;
    p->streams = NULL;
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
    if (!p->draining || p->state != P_RUNNING)
        return;
    for (struct dp_call *c = p->streams; c; c = c->next_stream)
        if (!c->closed && (c->send_in_flight || c->sent_version != p->version))
            return;
    p->draining = false;
    plugin_stop(p);
}

/* ---- manager -------------------------------------------------------------------------------- */

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
    pthread_mutex_init(&m->lock, NULL);
    grpc_init();
    m->cq = grpc_completion_queue_create_for_next(NULL);
    *out = m;
    return 0;
}

static int sync_locked(struct dp_manager *m, const struct gs_plan *plan);

int dp_manager_sync(struct dp_manager *m, const struct gs_plan *plan) {
    pthread_mutex_lock(&m->lock);
    int r = sync_locked(m, plan);
    pthread_mutex_unlock(&m->lock);
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
            p->version++;
            for (struct dp_call *c = p->streams; c; c = c->next_stream)
                stream_send(c);
            continue;
        }
        p = calloc(1, sizeof(*p));
        if (!p || copy_resource(&p->devices, r) < 0) {
            free(p);
            return -ENOMEM;
        }
        p->m = m;
        p->version = 1;
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
        if (p->streams && copy_resource(&p->devices, &empty) == 0) {
            p->version++;
            p->draining = true;
            log_info("Withdrawing every device of %s", p->resource);
            for (struct dp_call *c = p->streams; c; c = c->next_stream)
                stream_send(c);
            check_drain(p);
        } else {
            plugin_stop(p);
        }
    }
    /* Plugins that never served are freed here; stopping ones when their tags are back. */
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
    pthread_mutex_lock(&m->lock);
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
    pthread_mutex_unlock(&m->lock);
}

void dp_manager_socket_deleted(struct dp_manager *m, const char *basename) {
    pthread_mutex_lock(&m->lock);
    for (struct dp_plugin *p = m->plugins; p; p = p->next) {
        if (strcmp(p->endpoint, basename) != 0 || p->state != P_RUNNING || p->restart_when_stopped)
            continue;
        struct stat st;
        if (stat(p->socket_path, &st) == 0)
            continue; /* our own restart already made a new one */
        log_warn("Socket %s was deleted (kubelet restart?): serving %s again", p->socket_path, p->resource);
        restart_plugin(p);
    }
    pthread_mutex_unlock(&m->lock);
}

unsigned dp_manager_registered(struct dp_manager *m) {
    pthread_mutex_lock(&m->lock);
    unsigned n = 0;
    for (const struct dp_plugin *p = m->plugins; p; p = p->next)
        n += p->reg == R_DONE && p->state == P_RUNNING;
    pthread_mutex_unlock(&m->lock);
    return n;
}

static void handle_event(struct dp_manager *m, grpc_event ev) {
    (void)m;
    struct tag *t = ev.tag;
    if (t->op == OP_SHUTDOWN) {
        t->plugin->refs--;
        plugin_maybe_finish(t->plugin);
        return;
    }
    struct dp_call *c = t->call;
    struct dp_plugin *p = c->p;
    p->refs--;
    bool ok = ev.success != 0;
    switch (t->op) {
    case OP_NEW:
        if (!ok) {
            call_free(c);
            break;
        }
        request_new_call(p);
        {
            grpc_op op;
            memset(&op, 0, sizeof(op));
            op.op = GRPC_OP_RECV_MESSAGE;
            op.data.recv_message.recv_message = &c->recv;
            if (!start_batch(c, &op, 1, OP_RECV))
                call_free(c);
        }
        break;
    case OP_RECV:
        if (!ok || p->state != P_RUNNING) {
            send_unary(c, NULL, GRPC_STATUS_UNAVAILABLE, "shutting down");
            break;
        }
        dispatch(c);
        break;
    case OP_DONE:
        call_free(c);
        break;
    case OP_SEND:
        c->send_in_flight = false;
        if (!ok)
            c->closed = true;
        if (!c->closed)
            stream_send(c);
        else if (c->close_done)
            call_free(c); /* both the last send and the close have come back */
        check_drain(p);
        break;
    case OP_CLOSE:
        c->closed = c->close_done = true;
        stream_unlink(c);
        log_info("ListAndWatch %s: stream closed", p->resource);
        if (!c->send_in_flight)
            call_free(c);
        check_drain(p);
        break;
    case OP_REGISTER:
        register_done(c, ok);
        break;
    default:
        break;
    }
    plugin_maybe_finish(p);
}

/* Waits up to timeout_ms for gRPC events (without the lock), then handles each under the lock,
 * then starts the registration retries that are due. Returns how long until the next retry is due
 * (ms, at most IDLE_WAIT_MS). */
static int poll_events(struct dp_manager *m, int timeout_ms) {
    gpr_timespec deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(m->cq, deadline, NULL);
        if (ev.type != GRPC_OP_COMPLETE)
            break;
        pthread_mutex_lock(&m->lock);
        handle_event(m, ev);
        pthread_mutex_unlock(&m->lock);
        deadline = gpr_inf_past(GPR_CLOCK_MONOTONIC);
    }
    pthread_mutex_lock(&m->lock);
    unsigned long long now = gs_now_ns(), next = now + IDLE_WAIT_MS * 1000000ULL;
    for (struct dp_plugin *p = m->plugins; p; p = p->next) {
        if (p->state != P_RUNNING || p->reg != R_WAIT)
            continue;
        if (now >= p->reg_at_ns)
            register_start(p);
        else if (p->reg_at_ns < next)
            next = p->reg_at_ns;
    }
    pthread_mutex_unlock(&m->lock);
    return (int)((next - now + 999999) / 1000000);
}

/* Event-driven: it wakes for gRPC's events (calls, streams, Register answers, and the servers'
 * shut-down that dp_manager_free starts, or the queue's when no server runs), for a registration
 * retry that is due, and else once in IDLE_WAIT_MS. */
static void *event_loop(void *arg) {
    struct dp_manager *m = arg;
    int wait_ms = 0;
    while (!atomic_load(&m->stop))
        wait_ms = poll_events(m, wait_ms);
    return NULL;
}

int dp_manager_start(struct dp_manager *m) {
    int r = pthread_create(&m->thread, NULL, event_loop, m);
    if (r != 0)
        return -r;
    m->thread_started = true;
    return 0;
}

void dp_manager_free(struct dp_manager *m) {
    if (!m)
        return;
    /* Stopped first, then the servers' shut-down: its events wake the event thread at once. */
    atomic_store(&m->stop, true);
    pthread_mutex_lock(&m->lock);
    for (struct dp_plugin *p = m->plugins; p; p = p->next) {
        p->remove_when_stopped = true;
        if (p->state == P_RUNNING)
            plugin_stop(p);
    }
    /* Drain until every plugin has finished (bounded: 5 s). */
    unsigned long long end = gs_now_ns() + 5000000000ULL;
    for (struct dp_plugin *p = m->plugins, *next; p; p = next) {
        next = p->next;
        if (p->state == P_STOPPED)
            plugin_maybe_finish(p);
    }
    bool idle = !m->plugins; /* nothing outstanding: no event would come to wake the thread */
    pthread_mutex_unlock(&m->lock);
    if (idle)
        grpc_completion_queue_shutdown(m->cq); /* its next wait returns at once */
    if (m->thread_started)
        pthread_join(m->thread, NULL);
    while (m->plugins && gs_now_ns() < end)
        poll_events(m, 50);
    grpc_completion_queue_shutdown(m->cq);
    while (grpc_completion_queue_next(m->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type != GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(m->cq);
    grpc_shutdown();
    pthread_mutex_destroy(&m->lock);
    free(m);
}
