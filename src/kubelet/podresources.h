/* podresources.h: a client of the kubelet's PodResources API (v1 List): which pod and container
 * holds which device. The agent uses it to remove the guard files of pods that are gone (and,
 * later, to attribute metrics to pods). */
#ifndef GS_PODRESOURCES_H
#define GS_PODRESOURCES_H

#include <stddef.h>

#define GS_PODRESOURCES_SOCKET "/var/lib/kubelet/pod-resources/kubelet.sock"

struct pr_assignment {
    char *pod, *ns, *container, *resource, *device_id;
};

struct pr_list {
    size_t n;
    struct pr_assignment *items;
};

/* Calls List on the socket (timeout_ms bounds the call). Returns 0, or -errno with the gRPC
 * status in err (e.g. the kubelet's "rejected by rate limit"). */
int pr_list(const char *socket_path, unsigned timeout_ms, struct pr_list *out, char *err, size_t errlen);
void pr_list_free(struct pr_list *l);

#endif
