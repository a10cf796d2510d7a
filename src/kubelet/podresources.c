/* podresources.c: PodResources v1 List, one unary call of grpcsrv.h on the calling thread (it is
 * called rarely, from the agent's main thread). */
#include "kubelet/podresources.h"
#include "kubelet/grpcsrv.h"

#include <errno.h>
#include <grpc/status.h>
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
    V1__ListPodResourcesRequest req = V1__LIST_POD_RESOURCES_REQUEST__INIT;
    struct gs_grpc_request r = {
        .socket_path = socket_path,
        .method = "/v1.PodResourcesLister/List",
        .msg = &req.base,
        .answer = &v1__list_pod_resources_response__descriptor,
        .deadline_ms = timeout_ms,
        .max_answer_bytes = 16u << 20, /* as the kubelet's own clients allow (a node with many pods) */
    };
    struct gs_grpc_result res;
    if (gs_grpc_unary(&r, &res) < 0 || res.status < 0) {
        snprintf(err, errlen, "PodResources List on %s: the call could not be made", socket_path);
        return -EIO;
    }
    V1__ListPodResourcesResponse *resp = (V1__ListPodResourcesResponse *)res.answer;
    if (res.status != GRPC_STATUS_OK) {
        snprintf(err, errlen, "PodResources List on %s: status %d: %s", socket_path, res.status, res.details);
        if (resp)
            v1__list_pod_resources_response__free_unpacked(resp, NULL);
        return res.status == GRPC_STATUS_UNAVAILABLE ? -ENOTCONN : -EIO;
    }
    if (!resp) {
        snprintf(err, errlen, "PodResources List on %s: %s", socket_path, res.answered ? "malformed answer" : "no answer");
        return -EPROTO;
    }
    int rc = 0;
    size_t cap = 0;
    for (size_t p = 0; p < resp->n_pod_resources && rc == 0; p++) {
        const V1__PodResources *pr = resp->pod_resources[p];
        for (size_t c = 0; c < pr->n_containers && rc == 0; c++) {
            const V1__ContainerResources *cr = pr->containers[c];
            for (size_t d = 0; d < cr->n_devices && rc == 0; d++)
                for (size_t i = 0; i < cr->devices[d]->n_device_ids && rc == 0; i++)
                    rc = add(out, &cap, pr->name, pr->namespace_, cr->name, cr->devices[d]->resource_name,
                             cr->devices[d]->device_ids[i]);
        }
    }
    v1__list_pod_resources_response__free_unpacked(resp, NULL);
    if (rc < 0) {
        snprintf(err, errlen, "out of memory");
        pr_list_free(out);
    }
    return rc;
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
