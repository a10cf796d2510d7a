/* dra_glue.c: the DRA driver's API-server side in the agent (see dra_glue.h). */
#include "agent/dra_glue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/state.h"
#include "dra/apiserver.h"
#include "dra/slices.h"
#include "util/log.h"
#include "util/util.h"

/* --node-name, else $NODE_NAME, else the lower-cased host name (util.h's gs_node_name: the Node's
 * name in the API server); worked out once, "" when there is none. */
static const char *node_name(struct agent *a) {
    char err[512];
    if (!a->dra_node[0] && gs_node_name(a->o->node_name, a->dra_node, sizeof(a->dra_node), NULL, err, sizeof(err)) < 0)
        log_error("DRA: no Node name: %s", err);
    return a->dra_node;
}

void agent_dra_api_start(struct agent *a, struct dra_options *d) {
    const struct agent_options *o = a->o;
    d->pool = node_name(a); /* the slices' pool, named in the health stream */
    char err[1024];
    const struct kube_limits claims_lim = { DRA_API_CONNECT_MS, DRA_API_REQUEST_MS, 0, 0 };
    int r = kube_client_open(o->kubeconfig, NULL, NULL, &a->dra_kube_pub, err, sizeof(err));
    if (r == 0 && !o->dra_claims_dir)
        r = kube_client_open(o->kubeconfig, NULL, &claims_lim, &a->dra_kube_claims, err, sizeof(err));
    if (r < 0) {
        log_error("DRA: no API server (%s): ResourceClaims cannot be read and no ResourceSlice is published", err);
        return;
    }
    if (a->dra_kube_claims) {
        if ((r = dra_claim_kube_new(a->dra_kube_claims, &a->dra_claims)) < 0) {
            log_error("DRA: the claim source: out of memory");
            return;
        }
        d->source = dra_claim_kube_source(a->dra_claims);
    }
    const struct dra_publisher_options po = { a->dra_kube_pub, node_name(a), d->driver ? d->driver : DRA_DRIVER_DEFAULT,
                                              o->dra_resync_ms };
    if ((r = dra_publisher_start(&po, &a->dra_pub, err, sizeof(err))) < 0)
        log_error("DRA: %s: no ResourceSlice is published", err);
    else
        log_info("DRA: publishing the ResourceSlices of node %s (driver %s) through %s", po.node, po.driver,
                 o->kubeconfig ? o->kubeconfig : "the default kubeconfig");
}

void agent_dra_health(const struct agent *a, struct dra_device *d, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned g = d[i].index;
        bool lost = a->inv && g < a->inv->n_gpus && a->inv->gpus[g].lost;
        bool xid = g < GS_MAX_GPUS && a->health.unhealthy[g];
        d[i].health = lost || xid ? DRA_HEALTH_UNHEALTHY : DRA_HEALTH_HEALTHY;
        if (lost)
            snprintf(d[i].health_message, sizeof(d[i].health_message), "GPU lost (NVML: GPU_IS_LOST)");
        else if (xid && a->policy && a->policy->recovery_quiet_s)
            snprintf(d[i].health_message, sizeof(d[i].health_message),
                     "critical Xid %llu: healthy again after %u s without one", a->last_xid[g],
                     a->policy->recovery_quiet_s);
        else if (xid)
            snprintf(d[i].health_message, sizeof(d[i].health_message), "critical Xid %llu", a->last_xid[g]);
        else
            d[i].health_message[0] = 0;
    }
}

void agent_dra_publish(struct agent *a) {
    if (!a->dra_pub || !a->inv || !a->policy)
        return;
    json_t *slices = NULL;
    char err[512];
    const char *driver = a->o->dra_driver ? a->o->dra_driver : DRA_DRIVER_DEFAULT;
    /* a critical Xid taints the GPU's devices until it is healthy again (lost GPUs are left out) */
    struct gs_dra_taints t;
    for (unsigned g = 0; g < GS_MAX_GPUS; g++) {
        t.xid[g] = a->health.unhealthy[g];
        t.xid_code[g] = a->last_xid[g];
    }
    int r = gs_dra_slices_build_tainted(a->inv, a->policy, &t, node_name(a), driver, 0, &slices, err, sizeof(err));
    if (r < 0) {
        if (strcmp(err, a->dra_slices_error) != 0)
            log_error("DRA: the ResourceSlices: %s", err);
        snprintf(a->dra_slices_error, sizeof(a->dra_slices_error), "%s", err);
        return;
    }
    a->dra_slices_error[0] = 0;
    dra_publisher_set(a->dra_pub, slices);
}

void agent_dra_api_stop(struct agent *a) {
    dra_publisher_stop(a->dra_pub);
    a->dra_pub = NULL;
    dra_claim_kube_free(a->dra_claims);
    a->dra_claims = NULL;
    kube_client_free(a->dra_kube_claims);
    kube_client_free(a->dra_kube_pub);
    a->dra_kube_claims = a->dra_kube_pub = NULL;
}
