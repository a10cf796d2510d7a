/* pbmsg.h: protobuf-c messages in gRPC core byte buffers, for the gRPC engine of grpcsrv.c
 * (internal to src/kubelet/). */
#ifndef GS_PBMSG_H
#define GS_PBMSG_H

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/status.h>
#include <grpc/slice.h>
#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

/* The message serialised into a new byte buffer (NULL when out of memory). */
grpc_byte_buffer *gs_pb_pack(const ProtobufCMessage *msg);
/* The buffer parsed as desc's message (free with protobuf_c_message_free_unpacked); NULL when bb is
 * NULL or does not parse. */
ProtobufCMessage *gs_pb_unpack(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb);
/* A gRPC status details slice as text for a log line or error (at most 200 bytes). */
void gs_grpc_details(grpc_slice details, char *buf, size_t len);
/* A request parsed as desc's message, refusing string fields (of it and of the messages in it)
 * with a NUL byte, which protobuf-c would cut: NULL with "FIELD[INDEX]...: ..." or "malformed
 * NAME" in err, for an INVALID_ARGUMENT answer. */
ProtobufCMessage *gs_pb_unpack_request(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb, char *err,
                                       size_t errlen);
/* The status answered for a handler's -errno: -ENOSPC and -EDQUOT RESOURCE_EXHAUSTED, -ENOMEM and
 * -EIO INTERNAL, -EAGAIN UNAVAILABLE, anything else INVALID_ARGUMENT. */
grpc_status_code gs_grpc_status_of(int rc);
/* Starts a server call's unary answer: initial metadata, msg (NULL: none; packed here, and an
 * answer that cannot be packed becomes INTERNAL "out of memory"), the status with details (NULL:
 * none), and the client's close into *cancelled; tag comes back when all of it is done. */
grpc_call_error gs_grpc_answer(grpc_call *call, const ProtobufCMessage *msg, grpc_status_code status,
                               const char *details, int *cancelled, void *tag);

#endif
