/* dra_glue.h: the DRA driver's API-server side in the agent (src/dra/apiserver.h): the claim
 * source prepare reads ResourceClaims from, and the ResourceSlices publisher fed at every replan. */
#ifndef GS_AGENT_DRA_GLUE_H
#define GS_AGENT_DRA_GLUE_H

#include <stddef.h>

#include "dra/dra.h"

struct agent;

/* Before the DRA server starts: the API server's client (--kubeconfig, else $KUBECONFIG,
 * in-cluster, ~/.kube/config) for the claims (d->source, unless --dra-claims-dir gave files) and
 * the publisher. Without an API server configuration the kubelet side still runs: each prepare
 * says why there is no claim, no slice is published (logged). */
void agent_dra_api_start(struct agent *a, struct dra_options *d);

/* Each device's health as the device plugin's (a critical Xid on its GPU until the quiet period
 * passes, or the GPU lost), for the resource-health stream. */
void agent_dra_health(const struct agent *a, struct dra_device *d, size_t n);

/* Hands the publisher what the slices say now (the inventory and policy in force); cheap when
 * nothing changed. Main thread. */
void agent_dra_publish(struct agent *a);

/* Stops the publisher (its slices stay) and frees the clients, after the DRA server stopped. */
void agent_dra_api_stop(struct agent *a);

#endif
