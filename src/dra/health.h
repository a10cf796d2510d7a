/* health.h: the DRA driver's resource-health stream (DRAResourceHealth.NodeWatchResources,
 * k8s.io/kubelet/pkg/apis/dra-health/v1alpha1, health.proto): what one message of it says, built
 * from the driver's devices and its prepared claims (pure; server.c serves it, grpcsrv.h streams
 * it). Internal to src/dra/. */
#ifndef GS_DRA_HEALTH_H
#define GS_DRA_HEALTH_H

#include <stddef.h>
#include <stdint.h>

#include "dra/dra.h"
#include "dra/health.pb-c.h"
#include "dra/prepare.h"

#define DRA_HEALTH_REFRESH_S 10 /* a message at least this often, so the kubelet's timeout never runs out */
#define DRA_HEALTH_TIMEOUT_S 30 /* health_check_timeout_seconds: Unknown after this long without one */
#define DRA_HEALTH_MAX 512      /* devices in one message */

/* One message with the storage it points into (free() it whole). */
struct dra_health_msg {
    V1alpha1__NodeWatchResourcesResponse resp;
    V1alpha1__DeviceHealth *ptrs[DRA_HEALTH_MAX];
    V1alpha1__DeviceHealth dev[DRA_HEALTH_MAX];
    V1alpha1__DeviceIdentifier id[DRA_HEALTH_MAX];
    char pool[254];
    char name[DRA_HEALTH_MAX][64];
    char message[DRA_HEALTH_MAX][sizeof(((struct dra_device *)0)->health_message)];
};

/* The complete list for the kubelet: every device of devs (its name in the slices, in pool), and
 * every device of a prepared claim in cp (NULL: none) that devs does not name, such as a MIG
 * placement ("gpu-<i>-mig-..."), with its GPU's health (Unknown when the GPU is not in devs), each
 * stamped now (Unix seconds) with DRA_HEALTH_TIMEOUT_S. Devices past DRA_HEALTH_MAX are left out
 * (counted in *left_out). */
void dra_health_build(const char *pool, const struct dra_device *devs, size_t n, const struct dra_checkpoint *cp,
                      int64_t now, struct dra_health_msg *out, size_t *left_out);

#endif
