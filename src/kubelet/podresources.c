/* podresources.c: PodResources v1 List over the gRPC core C API: one unary call on its own
 * completion queue (it is called rarely, from the agent's main thread). */
#include "kubelet/podresources.h"
#include "kubelet/pbmsg.h"

#include <errno.h>
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kubelet/podresources.pb-c.h"

static int add(struct pr_list *l, size_t *cap, const char *pod, const char *ns, const char *container,
               const char *resource, const char *id) {
    if (l->n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        struct pr_assignment *it = realloc(l->items, c * sizeof(*it));
        if (!it)
            return -ENOMEM;
        l->items = it;
        *cap = c;
    }
    struct pr_assignment *a = &l->items[l->n];
    a->pod = strdup(pod ? pod : "");
    a->ns = strdup(ns ? ns : "");
    a->container = strdup(container ? container : "");
    a->resource = strdup(resource ? resource : "");
    a->device_id = strdup(id ? id : "");
    l->n++;
    if (!a->pod || !a->ns || !a->container || !a->resource || !a->device_id)
        return -ENOMEM;
    return 0;
}

int pr_list(const char *socket_path, unsigned timeout_ms, struct pr_list *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    grpc_init();
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    char target[PATH_MAX + 8];
    snprintf(target, sizeof(target), "unix:%s", socket_path);
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    /* The kubelet's own clients allow 16 MiB answers (a node with many pods). */
    grpc_arg args[] = { { GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, { .integer = 16 << 20 } } };
    grpc_channel_args chan_args = { 1, args };
    grpc_channel *ch = grpc_channel_create(target, creds, &chan_args);
    grpc_channel_credentials_release(creds);
    gpr_timespec deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
    grpc_call *call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                               grpc_slice_from_static_string("/v1.PodResourcesLister/List"), NULL,
                                               deadline, NULL);
    V1__ListPodResourcesRequest req = V1__LIST_POD_RESOURCES_REQUEST__INIT;
    grpc_byte_buffer *send = gs_pb_pack(&req.base);
    grpc_byte_buffer *recv = NULL;
    grpc_metadata_array init_md, trail_md;
    grpc_metadata_array_init(&init_md);
    grpc_metadata_array_init(&trail_md);
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    grpc_op ops[6];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &init_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trail_md;
    ops[5].data.recv_status_on_client.status = &status;
    ops[5].data.recv_status_on_client.status_details = &details;
    int r = 0;
    void *tag = &r;
    if (!send || !call || grpc_call_start_batch(call, ops, 6, tag, NULL) != GRPC_CALL_OK ||
        grpc_completion_queue_pluck(cq, tag, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type != GRPC_OP_COMPLETE) {
        snprintf(err, errlen, "PodResources List on %s: the call could not be made", socket_path);
        r = -EIO;
        goto out;
    }
    if (status != GRPC_STATUS_OK) {
        char text[256];
        gs_grpc_details(details, text, sizeof(text));
        snprintf(err, errlen, "PodResources List on %s: status %d: %s", socket_path, (int)status, text);
        r = status == GRPC_STATUS_UNAVAILABLE ? -ENOTCONN : -EIO;
        goto out;
    }
    V1__ListPodResourcesResponse *resp =
        (V1__ListPodResourcesResponse *)gs_pb_unpack(&v1__list_pod_resources_response__descriptor, recv);
    if (!resp) {
        snprintf(err, errlen, "PodResources List on %s: %s", socket_path, recv ? "malformed answer" : "no answer");
        r = -EPROTO;
        goto out;
    }
    size_t cap = 0;
    for (size_t p = 0; p < resp->n_pod_resources && r == 0; p++) {
        const V1__PodResources *pr = resp->pod_resources[p];
        for (size_t c = 0; c < pr->n_containers && r == 0; c++) {
            const V1__ContainerResources *cr = pr->containers[c];
            for (size_t d = 0; d < cr->n_devices && r == 0; d++)
                for (size_t i = 0; i < cr->devices[d]->n_device_ids && r == 0; i++)
                    r = add(out, &cap, pr->name, pr->namespace_, cr->name, cr->devices[d]->resource_name,
                            cr->devices[d]->device_ids[i]);
        }
    }
    v1__list_pod_resources_response__free_unpacked(resp, NULL);
    if (r < 0) {
        snprintf(err, errlen, "out of memory");
        pr_list_free(out);
    }
out:
    if (recv)
        grpc_byte_buffer_destroy(recv);
    if (send)
        grpc_byte_buffer_destroy(send);
    grpc_metadata_array_destroy(&init_md);
    grpc_metadata_array_destroy(&trail_md);
    grpc_slice_unref(details);
    if (call)
        grpc_call_unref(call);
    grpc_channel_destroy(ch);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_past(GPR_CLOCK_MONOTONIC), NULL).type != GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
    grpc_shutdown();
    return r;
}

void pr_list_free(struct pr_list *l) {
    for (size_t i = 0; i < l->n; i++) {
        free(l->items[i].pod);
        free(l->items[i].ns);
        free(l->items[i].container);
        free(l->items[i].resource);
        free(l->items[i].device_id);
    }
    free(l->items);
    memset(l, 0, sizeof(*l));
}
