/* grpcsrv.h: a gRPC server of unary and server-streaming methods on one unix socket (gRPC core,
 * protobuf-c messages), with one thread of its own: the kubelet plugin servers (the DRA driver's
 * registration, DRAPlugin and DRAResourceHealth services). Requests are parsed before the handler
 * sees them, and refused with INVALID_ARGUMENT when malformed or when a string in them holds a NUL
 * byte. */
#ifndef GS_GRPCSRV_H
#define GS_GRPCSRV_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>

struct gs_grpc_server;

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
     * gs_grpc_server_notify and every refresh_ms (0: only on notify), until the client closes the
     * stream or the server stops (an error of a later message skips that message). */
    bool stream;
    unsigned refresh_ms;
};

/* Listens on socket_path (a stale socket there is replaced) and serves methods[0..n) (kept by
 * reference: static tables) from a thread of its own, handlers called one at a time with ctx.
 * -ENAMETOOLONG (over 107 bytes), -EADDRINUSE (cannot listen), -ENOMEM, -errno of the thread. */
int gs_grpc_server_start(const char *socket_path, const struct gs_grpc_method *methods, size_t n, void *ctx,
                         struct gs_grpc_server **out);

/* The streams get a new message (within GS_GRPC_STREAM_WAKE_MS; any thread). */
#define GS_GRPC_STREAM_WAKE_MS 100
void gs_grpc_server_notify(struct gs_grpc_server *s);

/* Calls answered since the start (of every method, refused ones too). */
unsigned long gs_grpc_server_calls(const struct gs_grpc_server *s);

/* Cancels the calls in progress, stops the thread and removes the socket. NULL: nothing. */
void gs_grpc_server_stop(struct gs_grpc_server *s);

#endif
