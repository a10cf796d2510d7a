/* drastate.h: the kubelet's DRA manager checkpoint (ROOT/dra_manager_state, ROOT the kubelet's
 * root directory, the parent of its device-plugins directory): which ResourceClaims the kubelet
 * prepared on the node, for which pods (by UID), with which devices of which driver. The agent
 * reads it to tie the processes of pods with DRA claims to the GPUs of those claims (src/agent/
 * utilization.c). Pure: hostile input, bounded, validated whole before anything is handed out
 * (fuzzed in tests/fuzz/fuzz_drastate.c).
 *
 * The file, as the kubelet writes it (pkg/kubelet/cm/dra/state):
 *   {"Data":"<JSON text>","Checksum":CRC32-IEEE of Data's bytes}
 * and Data:
 *   {"kind":"DRACheckpoint","apiVersion":"checkpoint.dra.kubelet.k8s.io/v1","ClaimInfoStateList":[
 *     {"ClaimUID":U,"ClaimName":N,"Namespace":NS,"PodUIDs":{"<pod UID>":{},...},
 *      "DriverState":{"<driver>":{"Devices":[{"PoolName":P,"DeviceName":D,"ShareID":S,
 *                                             "RequestNames":[...],"CDIDeviceIDs":[...]}]}}}]}
 * (ClaimInfoStateList null when there is no claim; ShareID only for a shared device). The real
 * kubelet's text is tests/unit/data/dra_manager_state.json. */
#ifndef GS_KUBELET_DRASTATE_H
#define GS_KUBELET_DRASTATE_H

#include <stddef.h>
#include <stdint.h>

#define GS_KL_DRA_STATE_NAME "dra_manager_state"
#define GS_KL_DRA_STATE_MAX (4u << 20)   /* bytes of the file read */
#define GS_KL_DRA_STATE_MAX_ENTRIES 4096 /* claims */
#define GS_KL_DRA_STATE_MAX_ITEMS 64     /* pods of a claim, drivers of a claim, devices of a driver */

/* One device of a claim prepared for one pod. */
struct gs_kl_dra_device {
    const char *claim_uid, *ns, *claim; /* the claim's UID, namespace (its pods'), name */
    const char *pod_uid;
    const char *driver, *pool, *device;
};

/* CRC-32 (IEEE 802.3, as Go's hash/crc32.ChecksumIEEE) of len bytes. */
uint32_t gs_kl_crc32(const void *data, size_t len);

/* Validates the checkpoint text (at most GS_KL_DRA_STATE_MAX bytes, JSON without duplicate keys,
 * the checksum right, kind and apiVersion as above, every field of the type above, strings within
 * bounds, at most the counts above), then calls fn once per claim, pod and device (a claim of no
 * pod or no device: not at all). Returns 0, or -EINVAL with why in err (the field named, e.g.
 * "Data: ClaimInfoStateList[2].PodUIDs: not an object") and fn never called. */
int gs_kl_dra_state_each(const char *text, size_t len, void (*fn)(const struct gs_kl_dra_device *d, void *ctx),
                         void *ctx, char *err, size_t errlen);

/* A directory name in the kubelet's pod logs directory (podLogsDir, default /var/log/pods):
 * NAMESPACE_NAME_UID, for a pod's containers' logs (one subdirectory per container that started).
 * Namespaces and pod names hold no '_'. 0, or -EINVAL for another name or a part too long. */
#define GS_KL_POD_NAME_MAX 254
int gs_kl_pod_log_dir_parse(const char *name, char ns[64], char pod[GS_KL_POD_NAME_MAX], char uid[40]);

#endif
