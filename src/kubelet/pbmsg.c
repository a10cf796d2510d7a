/* pbmsg.c: protobuf-c <-> gRPC byte buffers. */
#include "kubelet/pbmsg.h"

#include <grpc/byte_buffer_reader.h>
#include <stdio.h>
#include <stdlib.h>

grpc_byte_buffer *gs_pb_pack(const ProtobufCMessage *msg) {
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return NULL;
    protobuf_c_message_pack(msg, buf);
    grpc_slice s = grpc_slice_from_copied_buffer((const char *)buf, len);
    free(buf);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

ProtobufCMessage *gs_pb_unpack(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb) {
    if (!bb)
        return NULL;
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb))
        return NULL;
    grpc_slice s = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    ProtobufCMessage *msg = protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
    grpc_slice_unref(s);
    return msg;
}

void gs_grpc_details(grpc_slice details, char *buf, size_t len) {
    size_t dl = GRPC_SLICE_LENGTH(details);
    snprintf(buf, len, "%.*s", (int)(dl < 200 ? dl : 200), (const char *)GRPC_SLICE_START_PTR(details));
}
