/* grpcsrv.c: unary and server-streaming gRPC methods on a unix socket, one thread (see grpcsrv.h).
 *
 * A unary call goes through three steps, one operation outstanding at a time, its tag c->op: the
 * server hands it over (AWAIT), its request arrives (READ), its answer and status are sent and the
 * client's close received (ANSWERED). A stream, after READ, has two: the client's close (its tag
 * c->close, CLOSED when back) and at most one message being sent (c->op, SENT when back); it is
 * freed once both are back. The thread wakes every GS_GRPC_STREAM_WAKE_MS while a stream is open,
 * to send what gs_grpc_server_notify or a method's refresh asks for. Stopping shuts the server down
 * and cancels what is in progress; the thread leaves once the shut-down is notified and every
 * call's tags have come back. */
#include "kubelet/grpcsrv.h"
#include "kubelet/pbmsg.h"

#include <errno.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
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

enum step { AWAIT, READ, ANSWERED, SENT, CLOSED };

struct gs_grpc_server;
struct srv_call;

struct srv_tag { /* what comes back from the completion queue */
    struct srv_call *c;
    enum step step;
};

struct srv_call {
    struct gs_grpc_server *s;
    struct srv_tag op, close;
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

struct gs_grpc_server {
    grpc_server *server;
    grpc_completion_queue *cq;
    pthread_t thread;
    const struct gs_grpc_method *methods;
    size_t n_methods;
    void *ctx;
    char path[108];
    atomic_bool stopping;
    atomic_ulong calls;
    atomic_ulong version; /* gs_grpc_server_notify */
    struct srv_call *streams;
    unsigned in_flight; /* tags not back yet (the thread's, after the start) */
    char shutdown_tag;  /* its address tags the shut-down notice */
};

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

/* Asks the server for the next incoming call. */
static void await_call(struct gs_grpc_server *s) {
    if (atomic_load(&s->stopping))
        return;
    struct srv_call *c = calloc(1, sizeof(*c));
    if (!c) {
        log_error("gRPC server %s: out of memory, no longer taking calls", s->path);
        return;
    }
    c->s = s;
    c->op = (struct srv_tag){ c, AWAIT };
    c->close = (struct srv_tag){ c, CLOSED };
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->md);
    if (grpc_server_request_call(s->server, &c->call, &c->details, &c->md, s->cq, s->cq, &c->op) != GRPC_CALL_OK) {
        call_release(c);
        return;
    }
    s->in_flight++;
}

static bool batch(struct srv_call *c, struct srv_tag *t, const grpc_op *ops, size_t n, enum step next) {
    t->step = next;
    if (grpc_call_start_batch(c->call, ops, n, t, NULL) != GRPC_CALL_OK)
        return false;
    c->s->in_flight++;
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
    c->s->in_flight++;
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

/* The stream's next message, if one is due and none is being sent. */
static void stream_send(struct srv_call *c) {
    struct gs_grpc_server *s = c->s;
    unsigned long v = atomic_load(&s->version);
    if (c->closed || c->send_in_flight ||
        (c->sent_version == v && !(c->m->refresh_ms && now_ms() - c->sent_ns >= c->m->refresh_ms)))
        return;
    ProtobufCMessage *resp = NULL;
    char err[640] = "";
    int rc = c->m->handle(s->ctx, c->req, &resp, err, sizeof(err));
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
    if (step == CLOSED) {
        c->close_done = true;
        stream_unlink(c);
    } else {
        c->send_in_flight = false;
    }
    c->closed = c->closed || !ok || step == CLOSED;
    if (!c->closed)
        stream_send(c);
    else if (c->close_done && !c->send_in_flight)
        call_release(c);
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
    if (resp && m->release)
        m->release(s->ctx, resp);
    atomic_fetch_add(&s->calls, 1);
    c->m = m;
    c->req = req;
    grpc_op op = { .op = GRPC_OP_RECV_CLOSE_ON_SERVER, .data.recv_close_on_server.cancelled = &c->cancelled };
    if (!batch(c, &c->close, &op, 1, CLOSED)) {
        call_release(c);
        return;
    }
    c->next = s->streams;
    s->streams = c;
    c->sent_version = atomic_load(&s->version) - 1; /* due now */
    stream_send(c);
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

static void advance(struct srv_tag *t, bool ok) {
    struct srv_call *c = t->c;
    switch (t->step) {
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
        if (!ok || atomic_load(&c->s->stopping))
            answer(c, NULL, GRPC_STATUS_UNAVAILABLE, "shutting down");
        else
            serve_request(c);
        return;
    case ANSWERED:
        call_release(c);
        return;
    case SENT:
    case CLOSED:
        stream_back(c, t->step, ok);
        return;
    }
}

static void *serve(void *arg) {
    struct gs_grpc_server *s = arg;
    bool shut = false;
    while (!shut || s->in_flight > 0) {
        gpr_timespec until = s->streams ? gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                                       gpr_time_from_millis(GS_GRPC_STREAM_WAKE_MS, GPR_TIMESPAN))
                                        : gpr_inf_future(GPR_CLOCK_MONOTONIC);
        grpc_event ev = grpc_completion_queue_next(s->cq, until, NULL);
        if (!atomic_load(&s->stopping))
            for (struct srv_call *c = s->streams; c; c = c->next)
                stream_send(c);
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        if (ev.tag == &s->shutdown_tag) {
            shut = true;
            continue;
        }
        s->in_flight--;
        advance(ev.tag, ev.success != 0);
    }
    return NULL;
}

static void shut_down(struct gs_grpc_server *s) {
    atomic_store(&s->stopping, true);
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
    grpc_server_cancel_all_calls(s->server);
}

int gs_grpc_server_start(const char *socket_path, const struct gs_grpc_method *methods, size_t n, void *ctx,
                         struct gs_grpc_server **out) {
    struct gs_grpc_server *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    if (gs_strlcpy(s->path, socket_path, sizeof(s->path)) < 0) {
        free(s);
        return -ENAMETOOLONG;
    }
    s->methods = methods;
    s->n_methods = n;
    s->ctx = ctx;
    grpc_init();
    s->cq = grpc_completion_queue_create_for_next(NULL);
    s->server = grpc_server_create(NULL, NULL);
    grpc_server_register_completion_queue(s->server, s->cq, NULL);
    unlink(socket_path); /* left by an earlier run */
    char addr[sizeof(s->path) + 8];
    snprintf(addr, sizeof(addr), "unix:%s", socket_path);
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    int port = grpc_server_add_http2_port(s->server, addr, creds);
    grpc_server_credentials_release(creds);
    int rc = 0;
    if (!port) {
        rc = -EADDRINUSE;
        grpc_server_destroy(s->server);
    } else {
        grpc_server_start(s->server);
        await_call(s);
        int e = pthread_create(&s->thread, NULL, serve, s);
        if (e != 0) {
            rc = -e;
            shut_down(s);
            serve(s); /* on this thread: until the shut-down and every call are back */
            grpc_server_destroy(s->server);
        }
    }
    if (rc < 0) {
        grpc_completion_queue_shutdown(s->cq);
        while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type != GRPC_QUEUE_SHUTDOWN)
            ;
        grpc_completion_queue_destroy(s->cq);
        grpc_shutdown();
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void gs_grpc_server_notify(struct gs_grpc_server *s) {
    if (s)
        atomic_fetch_add(&s->version, 1);
}

unsigned long gs_grpc_server_calls(const struct gs_grpc_server *s) {
    return atomic_load(&s->calls);
}

void gs_grpc_server_stop(struct gs_grpc_server *s) {
    if (!s)
        return;
    shut_down(s);
    pthread_join(s->thread, NULL);
    grpc_server_destroy(s->server); /* unlinks the socket */
    grpc_completion_queue_shutdown(s->cq);
    while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type != GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(s->cq);
    unlink(s->path);
    grpc_shutdown();
    free(s);
}
