/* pbmsg.h: protobuf-c messages in gRPC core byte buffers, shared by the device plugin server and
 * the PodResources client (internal to src/kubelet/). */
#ifndef GS_PBMSG_H
#define GS_PBMSG_H

#include <grpc/byte_buffer.h>
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

#endif
