/* pbmsg.c: protobuf-c <-> gRPC byte buffers; requests checked for NUL bytes in strings. */
#include "kubelet/pbmsg.h"

#include <errno.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

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

grpc_status_code gs_grpc_status_of(int rc) {
    switch (rc) {
    case -ENOSPC:
    case -EDQUOT: return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case -ENOMEM:
    case -EIO: return GRPC_STATUS_INTERNAL;
    case -EAGAIN: return GRPC_STATUS_UNAVAILABLE;
    default: return GRPC_STATUS_INVALID_ARGUMENT;
    }
}

/* An ID as text for an error message: at most 100 bytes, a NUL as \0, other control bytes as \xNN. */
static void quote_id(const uint8_t *v, size_t len, char *buf, size_t buflen) {
    size_t o = 0;
    for (size_t i = 0; i < len && i < 100 && o + 5 < buflen; i++) {
        if (v[i] == 0)
            o += (size_t)snprintf(buf + o, buflen - o, "\\0");
        else if (v[i] < 0x20 || v[i] == 0x7f || v[i] == '"' || v[i] == '\\')
            o += (size_t)snprintf(buf + o, buflen - o, "\\x%02x", v[i]);
        else
            buf[o++] = (char)v[i];
    }
    buf[o] = '\0';
}

static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    uint64_t r = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (*p == end)
            return false;
        uint8_t b = *(*p)++;
        r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

/* protobuf-c hands a string field over as a C string, so "GPU-a\0x" would arrive as "GPU-a": the
 * wire is scanned first for string fields (of msg and the messages in it) with a NUL byte.
 * Returns -EINVAL with "FIELD[INDEX]...: ..." in err for one; 0 otherwise, malformed input too
 * (protobuf-c refuses that itself). */
static int find_nul_strings(const ProtobufCMessageDescriptor *desc, const uint8_t *p, const uint8_t *end,
                            unsigned depth, const char *prefix, char *err, size_t errlen) {
    unsigned seen[16] = { 0 };
    while (p < end) {
        uint64_t key, len;
        if (!read_varint(&p, end, &key))
            return 0;
        const ProtobufCFieldDescriptor *f =
            key >> 3 <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(desc, (unsigned)(key >> 3)) : NULL;
        size_t fi = f ? (size_t)(f - desc->fields) : 0;
        unsigned index = f && fi < GS_ARRAY_SIZE(seen) ? seen[fi]++ : 0;
        switch (key & 7) {
        case 0:
            if (!read_varint(&p, end, &len))
                return 0;
            continue;
        case 1:
            if (end - p < 8)
                return 0;
            p += 8;
            continue;
        case 5:
            if (end - p < 4)
                return 0;
            p += 4;
            continue;
        case 2:
            if (!read_varint(&p, end, &len) || len > (uint64_t)(end - p))
                return 0;
            break;
        default:
            return 0;
        }
        const uint8_t *v = p;
        p += len;
        if (!f)
            continue;
        char here[160];
        if (strlen(prefix) > 100)
            prefix = "...";
        if (f->label == PROTOBUF_C_LABEL_REPEATED)
            snprintf(here, sizeof(here), "%s%s%s[%u]", prefix, prefix[0] ? "." : "", f->name, index);
        else
            snprintf(here, sizeof(here), "%s%s%s", prefix, prefix[0] ? "." : "", f->name);
        if (f->type == PROTOBUF_C_TYPE_STRING && memchr(v, 0, (size_t)len)) {
            char q[420];
            quote_id(v, (size_t)len, q, sizeof(q));
            snprintf(err, errlen, "%.160s: \"%.420s\" contains a NUL byte", here, q);
            return -EINVAL;
        }
        if (f->type == PROTOBUF_C_TYPE_MESSAGE && depth < 8) {
            int r = find_nul_strings(f->descriptor, v, v + len, depth + 1, here, err, errlen);
            if (r < 0)
                return r;
        }
    }
    return 0;
}

ProtobufCMessage *gs_pb_unpack_request(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb, char *err,
                                       size_t errlen) {
    snprintf(err, errlen, "malformed %s", desc->short_name);
    grpc_byte_buffer_reader r;
    if (!bb || !grpc_byte_buffer_reader_init(&r, bb))
        return NULL;
    grpc_slice s = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    const uint8_t *data = GRPC_SLICE_START_PTR(s);
    size_t len = GRPC_SLICE_LENGTH(s);
    ProtobufCMessage *msg = NULL;
    if (find_nul_strings(desc, data, data + len, 0, "", err, errlen) == 0)
        msg = protobuf_c_message_unpack(desc, NULL, len, data);
    grpc_slice_unref(s);
    return msg;
}

grpc_call_error gs_grpc_answer(grpc_call *call, const ProtobufCMessage *msg, grpc_status_code status,
                               const char *details, int *cancelled, void *tag) {
    grpc_byte_buffer *bb = msg ? gs_pb_pack(msg) : NULL;
    if (msg && !bb) {
        status = GRPC_STATUS_INTERNAL;
        details = "out of memory";
    }
    grpc_slice det = grpc_slice_from_copied_string(details ? details : "");
    grpc_op ops[4];
    memset(ops, 0, sizeof(ops));
    size_t n = 0;
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (bb) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = bb;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = status;
    ops[n++].data.send_status_from_server.status_details = details ? &det : NULL;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = cancelled;
    grpc_call_error e = grpc_call_start_batch(call, ops, n, tag, NULL);
    if (bb)
        grpc_byte_buffer_destroy(bb);
    grpc_slice_unref(det);
    return e;
}
