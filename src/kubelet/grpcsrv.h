/* grpcsrv.h: the one gRPC engine of src/kubelet (gRPC core, protobuf-c messages): servers of unary
 * and server-streaming methods on unix sockets, and unary client calls with a deadline.
 *
 * A loop is one completion queue drained by one thread, behind one lock: every server added to it
 * and every client call started on it is served there, its handlers and callbacks called one at a
 * time with that lock held (the device plugin's servers, one per resource, and its Register calls
 * to the kubelet). gs_grpc_server_start is a server with a loop of its own (the DRA driver's
 * registration and DRAPlugin services). Requests are parsed before the handler sees them, and
 * refused with INVALID_ARGUMENT when malformed or when a string in them holds a NUL byte. */
#ifndef GS_GRPCSRV_H
#define GS_GRPCSRV_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>

struct gs_grpc_loop;
struct gs_grpc_server;
struct gs_grpc_call;

/* What a server stream's stream_event hears (with the loop's lock held). */
enum gs_grpc_stream_event {
    GS_GRPC_STREAM_OPENED, /* its first message is on its way */
    GS_GRPC_STREAM_SENT,   /* a message went out (or could not: the stream is then closed) */
    GS_GRPC_STREAM_CLOSED, /* the client closed it, or the server stopped */
};

struct gs_grpc_method {
    const char *path;                          /* "/pluginregistration.Registration/GetInfo" */
    const ProtobufCMessageDescriptor *request; /* its request message */
    /* 0 with the answer in *resp (packed, then given to release), or -errno with a message in err;
     * the status of an error: see gs_grpc_status_of (pbmsg.h): -ENOSPC and -EDQUOT
     * RESOURCE_EXHAUSTED, -ENOMEM and -EIO INTERNAL, -EAGAIN UNAVAILABLE, others INVALID_ARGUMENT. */
    int (*handle)(void *ctx, const ProtobufCMessage *req, ProtobufCMessage **resp, char *err, size_t errlen);
    void (*release)(void *ctx, ProtobufCMessage *resp); /* NULL: nothing to free */
    /* A server stream (false: unary): handle gives each message of the stream, the first once the
     * request is read (an error there is the call's status), then a new one after each
     * gs_grpc_server_push, or after gs_grpc_server_notify (within GS_GRPC_STREAM_WAKE_MS) and every
     * refresh_ms (0: only when asked) on a server of its own loop, until the client closes the
     * stream or the server stops (an error of a later message skips that message). */
    bool stream;
    unsigned refresh_ms;
    void (*stream_event)(void *ctx, enum gs_grpc_stream_event ev); /* NULL: none */
};

/* ---- a loop of servers and client calls ------------------------------------------------------ */

/* tick (NULL: none) is called with the lock held after each round of events, first at once when
 * the loop starts; it returns how long the loop may wait for the next event (ms) before calling
 * it again. -ENOMEM. */
int gs_grpc_loop_new(unsigned (*tick)(void *ctx), void *tick_ctx, struct gs_grpc_loop **out);
/* Starts the loop's thread (servers and calls added before it wait for it). -errno of the thread. */
int gs_grpc_loop_start(struct gs_grpc_loop *l);
/* The loop's lock: taken by anything that adds, closes, pushes or cancels from another thread. */
void gs_grpc_loop_lock(struct gs_grpc_loop *l);
void gs_grpc_loop_unlock(struct gs_grpc_loop *l);
/* Closes every server and cancels every call (their callbacks still run), waits until every one
 * is back, stops the thread and frees the loop. NULL: nothing. Called without the lock. */
void gs_grpc_loop_free(struct gs_grpc_loop *l);

/* With the loop's lock held: listens on socket_path (a stale socket there is replaced) and serves
 * methods[0..n) (kept by reference: static tables) with ctx. on_closed (NULL: none) is called once
 * the server is closed and gone (the socket removed). -ENAMETOOLONG (over 107 bytes), -EADDRINUSE
 * (cannot listen), -ENOMEM, -ESHUTDOWN (the loop is stopping). */
int gs_grpc_server_add(struct gs_grpc_loop *l, const char *socket_path, const struct gs_grpc_method *methods, size_t n,
                       void *ctx, void (*on_closed)(void *ctx), struct gs_grpc_server **out);
/* With the loop's lock held: stops taking calls and cancels those in progress; the server is freed
 * (on_closed) once they are all back. Again: nothing. */
void gs_grpc_server_close(struct gs_grpc_server *s);
/* With the loop's lock held: every stream of the server gets a new message now. */
void gs_grpc_server_push(struct gs_grpc_server *s);
/* With the loop's lock held: the server's open streams, and whether each of them has sent its
 * latest message (none in flight, none due). */
unsigned gs_grpc_server_streams(const struct gs_grpc_server *s);
bool gs_grpc_server_streams_current(const struct gs_grpc_server *s);

/* ---- a server with a loop of its own --------------------------------------------------------- */

/* gs_grpc_server_add on a loop of its own, started: a thread per server. Errors of both. */
int gs_grpc_server_start(const char *socket_path, const struct gs_grpc_method *methods, size_t n, void *ctx,
                         struct gs_grpc_server **out);

/* The streams get a new message (within GS_GRPC_STREAM_WAKE_MS; any thread). */
#define GS_GRPC_STREAM_WAKE_MS 100
void gs_grpc_server_notify(struct gs_grpc_server *s);

/* Calls answered since the start (of every method, refused ones too). */
unsigned long gs_grpc_server_calls(const struct gs_grpc_server *s);

/* A server of gs_grpc_server_start: cancels the calls in progress, stops the thread and removes
 * the socket. NULL: nothing. */
void gs_grpc_server_stop(struct gs_grpc_server *s);

/* ---- unary client calls ---------------------------------------------------------------------- */

struct gs_grpc_request {
    const char *socket_path; /* the server's unix socket */
    const char *method;      /* "/v1.PodResourcesLister/List" (kept until the call is done) */
    const ProtobufCMessage *msg;
    const ProtobufCMessageDescriptor *answer; /* the answer's type; NULL: not parsed */
    unsigned deadline_ms;
    unsigned max_answer_bytes; /* 0: gRPC's default (4 MiB) */
    /* Not 0: a private subchannel (not shared with other channels to the socket, whose failure
     * while the server was down would make this call wait out its backoff), reconnecting after
     * reconnect_ms, backing off up to reconnect_max_ms. */
    unsigned reconnect_ms, reconnect_max_ms;
};

struct gs_grpc_result {
    int status;       /* the gRPC status code; -1: the call could not be made */
    char details[256]; /* the status's details (at most 200 bytes) */
    bool answered;    /* a message came back */
    ProtobufCMessage *answer; /* it, parsed (free with protobuf_c_message_free_unpacked); NULL when
                               * none, malformed, or not asked for */
};

/* The call on the calling thread, until it is answered or its deadline: 0 with the result in
 * *res (a status other than OK too), or -EIO (res->status -1) when it could not be made. */
int gs_grpc_unary(const struct gs_grpc_request *r, struct gs_grpc_result *res);

/* With the loop's lock held: starts the call; done (with the lock held, on the loop's thread) gets
 * its result, the answer the callee's to free; the call is gone after done. *out (NULL: not kept)
 * is for gs_grpc_call_cancel until done. -EIO when it could not be made (done is not called),
 * -ESHUTDOWN (the loop is stopping), -ENOMEM. */
int gs_grpc_call_start(struct gs_grpc_loop *l, const struct gs_grpc_request *r,
                       void (*done)(void *ctx, const struct gs_grpc_result *res), void *ctx, struct gs_grpc_call **out);
/* With the loop's lock held, before done: the call ends at once (CANCELLED). */
void gs_grpc_call_cancel(struct gs_grpc_call *c);

#endif
