/* deviceplugin.h: the kubelet Device Plugin API v1beta1 over the gRPC core C API: one gRPC server
 * and unix socket per resource name, registration with the kubelet (with retry), ListAndWatch
 * streams that carry the full device list at once and on every change, and Allocate /
 * GetPreferredAllocation / PreStartContainer answered through the agent's handlers.
 *
 * Every gRPC event (the plugin's own servers and its Register calls to the kubelet) goes through
 * one loop of grpcsrv.h, one completion queue drained by one thread (dp_manager_start), so the kubelet's
 * GetDevicePluginOptions is answered while our Register call is still in flight. The handlers
 * run on that thread; the other functions may be called from any thread (one lock inside). */
#ifndef GS_DEVICEPLUGIN_H
#define GS_DEVICEPLUGIN_H

#include <stdbool.h>
#include <stddef.h>

#include "core/alloc.h"
#include "core/plan.h"

struct dp_manager;

struct dp_handlers {
    void *ctx;
    /* One container's Allocate: 0, or -errno with a message for the kubelet in err. The status
     * answered: -ENOSPC and -EDQUOT RESOURCE_EXHAUSTED (the node's disk is full), -ENOMEM and
     * -EIO INTERNAL (a failure of the node's own, its errno text in err), -EAGAIN UNAVAILABLE
     * (not ready yet, e.g. the CDI spec), anything else INVALID_ARGUMENT (the request). */
    int (*allocate)(void *ctx, const struct gs_resource *r, const char *const *ids, size_t n,
                    struct gs_alloc_response *out, char *err, size_t errlen);
    /* GetPreferredAllocation: see gs_preferred(). Called only with a request already checked:
     * 1 <= size <= n_avail, every ID a device of r, none twice, must-include ones among the
     * available and no more of them than size. */
    size_t (*preferred)(void *ctx, const struct gs_resource *r, const char *const *avail, size_t n_avail,
                        const char *const *must, size_t n_must, size_t size, const char **out);
};

/* kubelet_dir: where kubelet.sock is and where the plugin sockets go
 * (/var/lib/kubelet/device-plugins). */
int dp_manager_new(const char *kubelet_dir, const struct dp_handlers *h, struct dp_manager **out);

/* Makes the served resources match the plan: starts a server (and registers) for each new
 * resource, sends the new device list on every ListAndWatch stream of a changed resource, and
 * stops the servers of resources that are gone. */
int dp_manager_sync(struct dp_manager *m, const struct gs_plan *plan);

/* The kubelet restarted (kubelet.sock re-created): every plugin registers with the new kubelet at
 * once, exactly once (plugins whose socket was deleted get a fresh one first). */
void dp_manager_kubelet_restarted(struct dp_manager *m);

/* A file was deleted from the kubelet directory: if it was one of our live sockets, that plugin
 * is restarted with a fresh socket and registers again. */
void dp_manager_socket_deleted(struct dp_manager *m, const char *basename);

/* Starts the thread that serves gRPC events and registration retries. */
int dp_manager_start(struct dp_manager *m);

/* Number of resources currently registered with the kubelet. */
unsigned dp_manager_registered(struct dp_manager *m);

/* Closes every stream, shuts the servers down and removes their sockets. */
void dp_manager_free(struct dp_manager *m);

/* The socket file name for a resource: "gpuslice-nvidia.com_gpu.shared.sock". */
void dp_socket_name(const char *resource, char *buf, size_t len);

#endif
