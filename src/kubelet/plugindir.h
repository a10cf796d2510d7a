/* plugindir.h: what is in the kubelet's device-plugins directory besides our own sockets: which
 * plugin a socket file name belongs to, whether something listens on a socket, and the kubelet's
 * device-plugin checkpoint (kubelet_internal_checkpoint). The name and checkpoint parsers are pure
 * (hostile input, bounded; fuzzed in tests/fuzz/fuzz_doctor.c); gs_kl_socket_probe is the one
 * call with I/O. Used by the doctor (plugin.* checks) and the agent (src/agent/coexist.c). */
#ifndef GS_KUBELET_PLUGINDIR_H
#define GS_KUBELET_PLUGINDIR_H

#include <stdbool.h>
#include <stddef.h>

#define GS_KL_CHECKPOINT_NAME "kubelet_internal_checkpoint"
#define GS_KL_CHECKPOINT_MAX (4u << 20) /* bytes of kubelet_internal_checkpoint read */
#define GS_KL_MAX_RESOURCES 32
#define GS_KL_RESOURCE_MAX 128

/* The resource names the kubelet's device-plugin checkpoint (device-plugins/
 * kubelet_internal_checkpoint, JSON {"Data":{"RegisteredDevices":{NAME:[IDS]},...},"Checksum":N})
 * names as registered, at most `max`, sorted as in the file. *n_devices: their device IDs in total.
 * Returns 0, -EINVAL (err: why) for text that is not such a checkpoint. */
int gs_kl_checkpoint_parse(const char *text, size_t len, char (*names)[GS_KL_RESOURCE_MAX], unsigned max,
                           unsigned *n, unsigned *n_devices, char *err, size_t errlen);

/* How many of the device IDs the checkpoint registers for `resource` are not among ours[0..n_ours)
 * (another plugin registered them); the first such ID in `first` (may be NULL). 0 when the
 * checkpoint does not name the resource. Returns the count, or -EINVAL (err: why) as above. */
int gs_kl_checkpoint_foreign(const char *text, size_t len, const char *resource, const char *const *ours,
                             size_t n_ours, char *first, size_t firstlen, char *err, size_t errlen);

/* Calls fn(resource, id, ctx) for every device ID the checkpoint registers (non-string IDs are
 * skipped). Returns 0, or -EINVAL (err: why) as above. */
int gs_kl_checkpoint_each(const char *text, size_t len, void (*fn)(const char *resource, const char *id, void *ctx),
                          void *ctx, char *err, size_t errlen);

/* Calls fn(pod_uid, container, resource, id, ctx) for every device the checkpoint's
 * Data.PodDeviceEntries assign (DeviceIDs an array, or an object of arrays by NUMA node, as the
 * kubelet has written them); entries with fields of other types are skipped. Returns 0, or
 * -EINVAL (err: why) as above. */
int gs_kl_checkpoint_pods(const char *text, size_t len,
                          void (*fn)(const char *pod_uid, const char *container, const char *resource, const char *id,
                                     void *ctx),
                          void *ctx, char *err, size_t errlen);

/* What a file name in the device-plugins directory is. */
enum gs_kl_socket_kind {
    GS_KL_SOCK_NONE,    /* not a *.sock name (the checkpoint, ...) */
    GS_KL_SOCK_KUBELET, /* kubelet.sock: the kubelet's registration socket */
    GS_KL_SOCK_OURS,    /* gpuslice-*.sock: the agent's plugins */
    GS_KL_SOCK_NVIDIA,  /* nvidia-*.sock, nvidia.sock: NVIDIA's k8s-device-plugin */
    GS_KL_SOCK_OTHER,   /* another device plugin */
};
enum gs_kl_socket_kind gs_kl_socket_kind(const char *name);

/* The resource NVIDIA's k8s-device-plugin serves on a socket of kind GS_KL_SOCK_NVIDIA: it names
 * the socket "nvidia-" + the resource name after "nvidia.com/" + ".sock" (nvidia-gpu.sock:
 * nvidia.com/gpu, nvidia-mig-1g.10gb.sock: nvidia.com/mig-1g.10gb); nvidia.sock is its old name
 * of nvidia.com/gpu. Returns 0, or -EINVAL for a name of another kind or too long for buf. */
int gs_kl_nvidia_resource(const char *name, char *buf, size_t len);

enum gs_kl_sock_state {
    GS_KL_SOCK_ABSENT,     /* no such file */
    GS_KL_SOCK_NOT_SOCKET, /* a file that is not a socket */
    GS_KL_SOCK_STALE,      /* a socket file nobody listens on (connect: ECONNREFUSED) */
    GS_KL_SOCK_LISTENING,  /* connect() succeeded (or the backlog is full) */
    GS_KL_SOCK_ERROR,      /* another error (errno in *err) */
};
/* Connects to a Unix socket (non-blocking, closed at once). */
enum gs_kl_sock_state gs_kl_socket_probe(const char *path, int *err);

#endif
