/* holds.h: the devices the kubelet has assigned to pods (its PodResources List), as a MIG layout
 * change sees them: a MIG device, or a whole GPU whose MIG mode would change, that a pod holds is
 * in use even while no process of the pod runs on it (not started yet, or between two). Pure: the
 * caller asks PodResources (kubelet/podresources.h) and passes the list. */
#ifndef GS_MIG_HOLDS_H
#define GS_MIG_HOLDS_H

#include <stdbool.h>
#include <stddef.h>

#include "core/inventory.h"
#include "core/mig.h"
#include "kubelet/podresources.h"

struct gs_mig_hold {
    char uuid[GS_UUID_LEN];    /* the MIG device's UUID, or the whole GPU's */
    char device_id[GS_UUID_LEN + 16]; /* as the kubelet listed it: the UUID, or "<UUID>::<n>" (a replica) */
    char who[400];             /* "namespace/pod, container c" (Kubernetes names: 63, 253, 63) */
};

struct gs_mig_holds {
    size_t n;
    struct gs_mig_hold *items;
};

/* The assignments of l that name a device of inv: a device ID that is a MIG device's UUID or a
 * GPU's UUID, or one of those followed by "::<n>" (a time-sliced or MPS replica of it), whatever
 * the resource name (a policy may rename resources). Other assignments are left out. Returns 0
 * or -ENOMEM; free out with gs_mig_holds_free. */
int gs_mig_holds_find(const struct gs_inventory *inv, const struct pr_list *l, struct gs_mig_holds *out);
void gs_mig_holds_free(struct gs_mig_holds *h);

/* How many holds plan p (for GPU g) breaks: a MIG device whose compute or GPU instance it
 * destroys, or the whole GPU when it switches MIG mode on. Writes, when there are any, "MIG-... (GI
 * 3, 1g.10gb) to default/a, container c, ..." into msg (truncated to msglen). h may be NULL. */
size_t gs_mig_plan_held(const struct gs_gpu *g, const struct gs_mig_plan *p, const struct gs_mig_holds *h, char *msg,
                        size_t msglen);

#endif
