/* grpcsrv.c: gRPC servers and unary client calls on loops of one thread (see grpcsrv.h).
 *
 * Everything that comes back from a loop's completion queue is a struct tag: a server call's
 * step, a server's shut-down notice, or a client call's end. A unary server call goes through
 * three steps, one operation outstanding at a time, its tag c->op: the server hands it over
 * (AWAIT), its request arrives (READ), its answer and status are sent and the client's close
 * received (ANSWERED). A stream, after READ, has two: the client's close (its tag c->close, CLOSED
 * when back) and at most one message being sent (c->op, SENT when back); it is freed once both
 * are back. A client call is one batch (CLIENT). The loop and each server count the tags they have
 * outstanding: a closed server is destroyed once its shut-down notice and every call's tags are
 * back, and the thread leaves once the loop is stopping and nothing is outstanding. On a loop of
 * gs_grpc_server_start the thread wakes every GS_GRPC_STREAM_WAKE_MS while a stream is open, to
 * send what gs_grpc_server_notify or a method's refresh asks for. */
#include "kubelet/grpcsrv.h"
#include "kubelet/pbmsg.h"

#include <errno.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"
#include "util/util.h"

enum step { AWAIT, READ, ANSWERED, SENT, CLOSED, SHUTDOWN, CLIENT };

struct tag { /* what comes back from the completion queue */
    void *owner; /* a struct srv_call, a struct gs_grpc_server (SHUTDOWN), a struct gs_grpc_call (CLIENT) */
    enum step step;
};

struct srv_call {
    struct gs_grpc_server *s;
    struct tag op, close;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    grpc_byte_buffer *recv;
    int cancelled;
    /* a stream */
    const struct gs_grpc_method *m;
    ProtobufCMessage *req;
    bool send_in_flight, closed, close_done, sent_once;
    unsigned long sent_version;
    uint64_t sent_ns;
    struct srv_call *next;
};

struct gs_grpc_loop {
    grpc_completion_queue *cq;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t lock; /* everything below and in the servers and calls; taken around each event */
    unsigned (*tick)(void *ctx);
    void *tick_ctx;
    bool polls;    /* a loop of gs_grpc_server_start: streams polled for notify and refresh */
    bool stopping;
    unsigned in_flight; /* tags not back yet */
    struct gs_grpc_server *servers;
    struct gs_grpc_call *calls;
};

struct gs_grpc_server {
    struct gs_grpc_loop *l;
    struct gs_grpc_server *next;
    grpc_server *server;
    const struct gs_grpc_method *methods;
    size_t n_methods;
    void *ctx;
    void (*on_closed)(void *ctx);
    char path[108];
    bool stopping, shut;
    atomic_ulong calls;
    atomic_ulong version; /* gs_grpc_server_notify, gs_grpc_server_push */
    struct srv_call *streams;
    unsigned in_flight; /* tags not back yet: its calls' and its shut-down notice */
    struct tag shutdown_tag;
};

struct gs_grpc_call {
    struct gs_grpc_loop *l;
    struct gs_grpc_call *next;
    struct tag tag;
    grpc_channel *channel;
    grpc_call *call;
    grpc_metadata_array md, trailing;
    grpc_byte_buffer *recv;
    grpc_status_code status;
    grpc_slice details;
    const ProtobufCMessageDescriptor *answer;
    void (*done)(void *ctx, const struct gs_grpc_result *res);
    void *ctx;
};

/* ---- server calls --------------------------------------------------------------------------- */

static void call_release(struct srv_call *c) {
    if (c->req)
        protobuf_c_message_free_unpacked(c->req, NULL);
    if (c->recv)
        grpc_byte_buffer_destroy(c->recv);
    if (c->call)
        grpc_call_unref(c->call);
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->md);
    free(c);
}

static void server_out(struct gs_grpc_server *s) {
    s->in_flight++;
    s->l->in_flight++;
}

/* Asks the server for the next incoming call. */
static void await_call(struct gs_grpc_server *s) {
    if (s->stopping)
        return;
    struct srv_call *c = calloc(1, sizeof(*c));
    if (!c) {
        log_error("gRPC server %s: out of memory, no longer taking calls", s->path);
        return;
    }
    c->s = s;
    c->op = (struct tag){ c, AWAIT };
    c->close = (struct tag){ c, CLOSED };
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->md);
    if (grpc_server_request_call(s->server, &c->call, &c->details, &c->md, s->l->cq, s->l->cq, &c->op) !=
        GRPC_CALL_OK) {
        call_release(c);
        return;
    }
    server_out(s);
}

static bool batch(struct srv_call *c, struct tag *t, const grpc_op *ops, size_t n, enum step next) {
    t->step = next;
    if (grpc_call_start_batch(c->call, ops, n, t, NULL) != GRPC_CALL_OK)
        return false;
    server_out(c->s);
    return true;
}

/* The answer: the message (NULL for an error status), the status, then the client's close. */
static void answer(struct srv_call *c, const ProtobufCMessage *msg, grpc_status_code code, const char *why) {
    atomic_fetch_add(&c->s->calls, 1);
    c->op.step = ANSWERED;
    if (gs_grpc_answer(c->call, msg, code, why, &c->cancelled, &c->op) != GRPC_CALL_OK) {
        call_release(c);
        return;
    }
    server_out(c->s);
}

static const struct gs_grpc_method *method_of(const struct gs_grpc_server *s, grpc_slice path) {
    for (size_t i = 0; i < s->n_methods; i++) {
        size_t len = strlen(s->methods[i].path);
        if (GRPC_SLICE_LENGTH(path) == len && memcmp(GRPC_SLICE_START_PTR(path), s->methods[i].path, len) == 0)
            return &s->methods[i];
    }
    return NULL;
}

static uint64_t now_ms(void) {
    gpr_timespec t = gpr_now(GPR_CLOCK_MONOTONIC);
    return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

static void stream_event(struct gs_grpc_server *s, const struct gs_grpc_method *m, enum gs_grpc_stream_event ev) {
    if (m->stream_event)
        m->stream_event(s->ctx, ev);
}

/* The stream's next message, if one is due and none is being sent; first (not NULL): the first
 * message, already made. */
static void stream_send(struct srv_call *c, ProtobufCMessage *first) {
    struct gs_grpc_server *s = c->s;
    unsigned long v = atomic_load(&s->version);
    if (!first && (c->closed || c->send_in_flight ||
                   (c->sent_version == v && !(c->m->refresh_ms && now_ms() - c->sent_ns >= c->m->refresh_ms))))
        return;
    ProtobufCMessage *resp = first;
    char err[640] = "";
    int rc = first ? 0 : c->m->handle(s->ctx, c->req, &resp, err, sizeof(err));
    grpc_byte_buffer *bb = rc < 0 ? NULL : gs_pb_pack(resp);
    if (resp && c->m->release)
        c->m->release(s->ctx, resp);
    c->sent_version = v;
    c->sent_ns = now_ms();
    if (!bb) {
        log_warn("%s: stream message skipped: %s", c->m->path, rc < 0 ? err : "out of memory");
        return;
    }
    grpc_op ops[2];
    memset(ops, 0, sizeof(ops));
    size_t n = 0;
    if (!c->sent_once)
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = bb;
    if (batch(c, &c->op, ops, n, SENT))
        c->send_in_flight = c->sent_once = true;
    grpc_byte_buffer_destroy(bb);
}

static void stream_unlink(struct srv_call *c) {
    for (struct srv_call **pp = &c->s->streams; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            return;
        }
}

/* A stream's send (SENT) or the client's close (CLOSED) came back: the next message while the
 * stream is open, else the call freed once both are back. */
static void stream_back(struct srv_call *c, enum step step, bool ok) {
    struct gs_grpc_server *s = c->s;
    const struct gs_grpc_method *m = c->m;
    if (step == CLOSED) {
        c->close_done = true;
        stream_unlink(c);
    } else {
        c->send_in_flight = false;
    }
    c->closed = c->closed || !ok || step == CLOSED;
    if (!c->closed)
        stream_send(c, NULL);
    else if (c->close_done && !c->send_in_flight)
        call_release(c);
    stream_event(s, m, step == CLOSED ? GS_GRPC_STREAM_CLOSED : GS_GRPC_STREAM_SENT);
}

/* A stream method's call: its first message or the call's error status, then the stream. */
static void stream_start(struct srv_call *c, const struct gs_grpc_method *m, ProtobufCMessage *req) {
    struct gs_grpc_server *s = c->s;
    ProtobufCMessage *resp = NULL;
    char err[640] = "";
    int rc = m->handle(s->ctx, req, &resp, err, sizeof(err));
    if (rc < 0) {
        answer(c, NULL, gs_grpc_status_of(rc), err[0] ? err : "failed");
        protobuf_c_message_free_unpacked(req, NULL);
        return;
    }
    atomic_fetch_add(&s->calls, 1);
    c->m = m;
    c->req = req;
    grpc_op op = { .op = GRPC_OP_RECV_CLOSE_ON_SERVER, .data.recv_close_on_server.cancelled = &c->cancelled };
    if (!batch(c, &c->close, &op, 1, CLOSED)) {
        if (resp && m->release)
            m->release(s->ctx, resp);
        call_release(c);
        return;
    }
    c->next = s->streams;
    s->streams = c;
    stream_send(c, resp);
    stream_event(s, m, GS_GRPC_STREAM_OPENED);
}

static void serve_request(struct srv_call *c) {
    struct gs_grpc_server *s = c->s;
    const struct gs_grpc_method *m = method_of(s, c->details.method);
    if (!m) {
        answer(c, NULL, GRPC_STATUS_UNIMPLEMENTED, "unknown method");
        return;
    }
    char err[640];
    ProtobufCMessage *req = gs_pb_unpack_request(m->request, c->recv, err, sizeof(err));
    if (!req) {
        log_warn("%s refused: %s", m->path, err);
        answer(c, NULL, GRPC_STATUS_INVALID_ARGUMENT, err);
        return;
    }
    if (m->stream) {
        stream_start(c, m, req);
        return;
    }
    ProtobufCMessage *resp = NULL;
    err[0] = '\0';
    int rc = m->handle(s->ctx, req, &resp, err, sizeof(err));
    if (rc < 0)
        answer(c, NULL, gs_grpc_status_of(rc), err[0] ? err : "failed");
    else
        answer(c, resp, GRPC_STATUS_OK, NULL);
    if (resp && m->release)
        m->release(s->ctx, resp);
    protobuf_c_message_free_unpacked(req, NULL); /* last: the answer may point into the request */
}

static void server_back(struct srv_call *c, enum step step, bool ok) {
    switch (step) {
    case AWAIT:
        if (!ok) { /* the server is shutting down */
            call_release(c);
            return;
        }
        await_call(c->s);
        grpc_op op = { .op = GRPC_OP_RECV_MESSAGE, .data.recv_message.recv_message = &c->recv };
        if (!batch(c, &c->op, &op, 1, READ))
            call_release(c);
        return;
    case READ:
        if (!ok || c->s->stopping)
            answer(c, NULL, GRPC_STATUS_UNAVAILABLE, "shutting down");
        else
            serve_request(c);
        return;
    case ANSWERED:
        call_release(c);
        return;
    default: /* SENT, CLOSED */
        stream_back(c, step, ok);
        return;
    }
}

/* ---- servers -------------------------------------------------------------------------------- */

static void server_unlink(struct gs_grpc_server *s) {
    for (struct gs_grpc_server **pp = &s->l->servers; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            return;
        }
}

/* A closed server whose shut-down and calls are all back: destroyed, its socket removed. */
static void server_maybe_gone(struct gs_grpc_server *s) {
    if (!s->shut || s->in_flight > 0)
        return;
    grpc_server_destroy(s->server); /* unlinks the socket */
    unlink(s->path);
    server_unlink(s);
    if (s->on_closed)
        s->on_closed(s->ctx);
    free(s);
}

int gs_grpc_server_add(struct gs_grpc_loop *l, const char *socket_path, const struct gs_grpc_method *methods, size_t n,
                       void *ctx, void (*on_closed)(void *ctx), struct gs_grpc_server **out) {
    if (l->stopping)
        return -ESHUTDOWN;
    struct gs_grpc_server *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    if (gs_strlcpy(s->path, socket_path, sizeof(s->path)) < 0) {
        free(s);
        return -ENAMETOOLONG;
    }
    s->l = l;
    s->methods = methods;
    s->n_methods = n;
    s->ctx = ctx;
    s->on_closed = on_closed;
    s->shutdown_tag = (struct tag){ s, SHUTDOWN };
    s->server = grpc_server_create(NULL, NULL);
    grpc_server_register_completion_queue(s->server, l->cq, NULL);
    unlink(socket_path); /* left by an earlier run */
    char addr[sizeof(s->path) + 8];
    snprintf(addr, sizeof(addr), "unix:%s", socket_path);
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    int port = grpc_server_add_http2_port(s->server, addr, creds);
    grpc_server_credentials_release(creds);
    if (!port) {
        grpc_server_destroy(s->server);
        free(s);
        return -EADDRINUSE;
    }
    grpc_server_start(s->server);
    s->next = l->servers;
    l->servers = s;
    await_call(s);
    *out = s;
    return 0;
}

void gs_grpc_server_close(struct gs_grpc_server *s) {
    if (!s || s->stopping)
        return;
    s->stopping = true;
    grpc_server_shutdown_and_notify(s->server, s->l->cq, &s->shutdown_tag);
    server_out(s);
    grpc_server_cancel_all_calls(s->server);
}

void gs_grpc_server_push(struct gs_grpc_server *s) {
    if (!s)
        return;
    atomic_fetch_add(&s->version, 1);
    for (struct srv_call *c = s->streams; c; c = c->next)
        stream_send(c, NULL);
}

unsigned gs_grpc_server_streams(const struct gs_grpc_server *s) {
    unsigned n = 0;
    for (const struct srv_call *c = s ? s->streams : NULL; c; c = c->next)
        n += !c->closed;
    return n;
}

bool gs_grpc_server_streams_current(const struct gs_grpc_server *s) {
    unsigned long v = atomic_load(&s->version);
    for (const struct srv_call *c = s->streams; c; c = c->next)
        if (!c->closed && (c->send_in_flight || c->sent_version != v))
            return false;
    return true;
}

void gs_grpc_server_notify(struct gs_grpc_server *s) {
    if (s)
        atomic_fetch_add(&s->version, 1);
}

unsigned long gs_grpc_server_calls(const struct gs_grpc_server *s) {
    return atomic_load(&s->calls);
}

/* ---- client calls --------------------------------------------------------------------------- */

static void client_init(struct gs_grpc_call *c) {
    grpc_metadata_array_init(&c->md);
    grpc_metadata_array_init(&c->trailing);
    c->details = grpc_empty_slice();
    c->status = GRPC_STATUS_UNKNOWN;
}

static void client_destroy(struct gs_grpc_call *c) {
    if (c->recv)
        grpc_byte_buffer_destroy(c->recv);
    if (c->call)
        grpc_call_unref(c->call);
    if (c->channel)
        grpc_channel_destroy(c->channel);
    grpc_metadata_array_destroy(&c->md);
    grpc_metadata_array_destroy(&c->trailing);
    grpc_slice_unref(c->details);
}

/* The channel, the call and its one batch (the request sent and closed, the answer and the status
 * received), tagged &c->tag on cq. -EIO when any of it fails. */
static int client_begin(struct gs_grpc_call *c, const struct gs_grpc_request *r, grpc_completion_queue *cq) {
    c->answer = r->answer;
    c->tag = (struct tag){ c, CLIENT };
    char target[PATH_MAX + 8];
    snprintf(target, sizeof(target), "unix:%s", r->socket_path);
    grpc_arg args[5];
    size_t n = 0;
    if (r->max_answer_bytes)
        args[n++] = (grpc_arg){ GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
                                { .integer = (int)r->max_answer_bytes } };
    if (r->reconnect_ms) {
        args[n++] = (grpc_arg){ GRPC_ARG_INTEGER, GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, { .integer = 1 } };
        args[n++] = (grpc_arg){ GRPC_ARG_INTEGER, GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                                { .integer = (int)r->reconnect_ms } };
        args[n++] = (grpc_arg){ GRPC_ARG_INTEGER, GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, { .integer = (int)r->reconnect_ms } };
        args[n++] = (grpc_arg){ GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
                                { .integer = (int)r->reconnect_max_ms } };
    }
    grpc_channel_args chan_args = { n, args };
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    c->channel = grpc_channel_create(target, creds, &chan_args);
    grpc_channel_credentials_release(creds);
    gpr_timespec deadline =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(r->deadline_ms, GPR_TIMESPAN));
    c->call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                       grpc_slice_from_static_string(r->method), NULL, deadline, NULL);
    grpc_byte_buffer *send = gs_pb_pack(r->msg);
    grpc_op ops[6];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &c->md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &c->recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &c->trailing;
    ops[5].data.recv_status_on_client.status = &c->status;
    ops[5].data.recv_status_on_client.status_details = &c->details;
    int rc = send && c->call && grpc_call_start_batch(c->call, ops, 6, &c->tag, NULL) == GRPC_CALL_OK ? 0 : -EIO;
    if (send)
        grpc_byte_buffer_destroy(send);
    return rc;
}

/* The call's batch came back (ok: gRPC's success of it). */
static void client_result(const struct gs_grpc_call *c, bool ok, struct gs_grpc_result *res) {
    memset(res, 0, sizeof(*res));
    res->status = ok ? (int)c->status : -1;
    gs_grpc_details(c->details, res->details, sizeof(res->details));
    res->answered = ok && c->recv;
    if (res->answered && c->answer)
        res->answer = gs_pb_unpack(c->answer, c->recv);
}

int gs_grpc_unary(const struct gs_grpc_request *r, struct gs_grpc_result *res) {
    grpc_init();
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    struct gs_grpc_call c = { 0 };
    client_init(&c);
    int rc = client_begin(&c, r, cq);
    if (rc == 0) {
        grpc_event ev = grpc_completion_queue_pluck(cq, &c.tag, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        rc = ev.type == GRPC_OP_COMPLETE ? 0 : -EIO;
        client_result(&c, rc == 0 && ev.success, res);
    }
    if (rc < 0) {
        memset(res, 0, sizeof(*res));
        res->status = -1;
    }
    client_destroy(&c);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_past(GPR_CLOCK_MONOTONIC), NULL).type != GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
    grpc_shutdown();
    return rc;
}

int gs_grpc_call_start(struct gs_grpc_loop *l, const struct gs_grpc_request *r,
                       void (*done)(void *ctx, const struct gs_grpc_result *res), void *ctx, struct gs_grpc_call **out) {
    if (l->stopping)
        return -ESHUTDOWN;
    struct gs_grpc_call *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    client_init(c);
    c->l = l;
    c->done = done;
    c->ctx = ctx;
    if (client_begin(c, r, l->cq) < 0) {
        client_destroy(c);
        free(c);
        return -EIO;
    }
    l->in_flight++;
    c->next = l->calls;
    l->calls = c;
    if (out)
        *out = c;
    return 0;
}

void gs_grpc_call_cancel(struct gs_grpc_call *c) {
    if (c)
        grpc_call_cancel(c->call, NULL);
}

static void client_back(struct gs_grpc_call *c, bool ok) {
    for (struct gs_grpc_call **pp = &c->l->calls; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    struct gs_grpc_result res;
    client_result(c, ok, &res);
    c->done(c->ctx, &res);
    client_destroy(c);
    free(c);
}

/* ---- loops ---------------------------------------------------------------------------------- */

static void back(struct gs_grpc_loop *l, struct tag *t, bool ok) {
    l->in_flight--;
    if (t->step == CLIENT) {
        client_back(t->owner, ok);
        return;
    }
    struct gs_grpc_server *s = t->step == SHUTDOWN ? t->owner : ((struct srv_call *)t->owner)->s;
    s->in_flight--;
    if (t->step == SHUTDOWN)
        s->shut = true;
    else
        server_back(t->owner, t->step, ok);
    server_maybe_gone(s);
}

/* How long the loop may wait (ms; UINT_MAX: until an event), after the streams that are due. */
static unsigned round_done(struct gs_grpc_loop *l) {
    unsigned wait = l->tick ? l->tick(l->tick_ctx) : UINT_MAX;
    if (!l->polls || l->stopping)
        return wait;
    for (struct gs_grpc_server *s = l->servers; s; s = s->next) {
        for (struct srv_call *c = s->streams; c && !s->stopping; c = c->next)
            stream_send(c, NULL);
        if (s->streams && wait > GS_GRPC_STREAM_WAKE_MS)
            wait = GS_GRPC_STREAM_WAKE_MS;
    }
    return wait;
}

/* Waits for events (without the lock), handles each with the lock held, then ends the round
 * (round_done), until the loop is stopping and nothing is outstanding. */
static void *serve(void *arg) {
    struct gs_grpc_loop *l = arg;
    unsigned wait = 0;
    pthread_mutex_lock(&l->lock);
    while (!l->stopping || l->in_flight > 0) {
        pthread_mutex_unlock(&l->lock);
        gpr_timespec until = wait == UINT_MAX ? gpr_inf_future(GPR_CLOCK_MONOTONIC)
                                              : gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                                             gpr_time_from_millis(wait, GPR_TIMESPAN));
        for (;;) {
            grpc_event ev = grpc_completion_queue_next(l->cq, until, NULL);
            if (ev.type != GRPC_OP_COMPLETE)
                break;
            pthread_mutex_lock(&l->lock);
            back(l, ev.tag, ev.success != 0);
            pthread_mutex_unlock(&l->lock);
            until = gpr_inf_past(GPR_CLOCK_MONOTONIC);
        }
        pthread_mutex_lock(&l->lock);
        wait = round_done(l);
    }
    pthread_mutex_unlock(&l->lock);
    return NULL;
}

int gs_grpc_loop_new(unsigned (*tick)(void *ctx), void *tick_ctx, struct gs_grpc_loop **out) {
    struct gs_grpc_loop *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->tick = tick;
    l->tick_ctx = tick_ctx;
    pthread_mutex_init(&l->lock, NULL);
    grpc_init();
    l->cq = grpc_completion_queue_create_for_next(NULL);
    *out = l;
    return 0;
}

int gs_grpc_loop_start(struct gs_grpc_loop *l) {
    int e = pthread_create(&l->thread, NULL, serve, l);
    if (e != 0)
        return -e;
    l->thread_started = true;
    return 0;
}

void gs_grpc_loop_lock(struct gs_grpc_loop *l) {
    pthread_mutex_lock(&l->lock);
}

void gs_grpc_loop_unlock(struct gs_grpc_loop *l) {
    pthread_mutex_unlock(&l->lock);
}

void gs_grpc_loop_free(struct gs_grpc_loop *l) {
    if (!l)
        return;
    pthread_mutex_lock(&l->lock);
    l->stopping = true;
    for (struct gs_grpc_server *s = l->servers; s; s = s->next)
        gs_grpc_server_close(s);
    for (struct gs_grpc_call *c = l->calls; c; c = c->next)
        gs_grpc_call_cancel(c);
    bool idle = l->in_flight == 0; /* no event would come to wake the thread */
    pthread_mutex_unlock(&l->lock);
    if (idle)
        grpc_completion_queue_shutdown(l->cq); /* its next wait returns at once */
    if (l->thread_started)
        pthread_join(l->thread, NULL);
    else
        serve(l); /* on this thread: until every tag is back */
    grpc_completion_queue_shutdown(l->cq);
    while (grpc_completion_queue_next(l->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type != GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(l->cq);
    grpc_shutdown();
    pthread_mutex_destroy(&l->lock);
    free(l);
}

/* ---- a server with a loop of its own -------------------------------------------------------- */

int gs_grpc_server_start(const char *socket_path, const struct gs_grpc_method *methods, size_t n, void *ctx,
                         struct gs_grpc_server **out) {
    struct gs_grpc_loop *l;
    int rc = gs_grpc_loop_new(NULL, NULL, &l);
    if (rc < 0)
        return rc;
    l->polls = true;
    pthread_mutex_lock(&l->lock);
    rc = gs_grpc_server_add(l, socket_path, methods, n, ctx, NULL, out);
    pthread_mutex_unlock(&l->lock);
    if (rc == 0)
        rc = gs_grpc_loop_start(l);
    if (rc < 0)
        gs_grpc_loop_free(l);
    return rc;
}

void gs_grpc_server_stop(struct gs_grpc_server *s) {
    if (s)
        gs_grpc_loop_free(s->l); /* the server's own: closes it, and it is gone before the thread */
}
