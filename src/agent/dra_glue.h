/* dra_glue.h: the DRA driver's API-server side in the agent (src/dra/apiserver.h): the claim
 * source prepare reads ResourceClaims from, the ResourceSlices publisher fed at every replan, and
 * the handover of GPUs from the DRA driver to the device plugins (src/dra/handover.h): a GPU the
 * driver does not serve is left out of the device plugins' plan while a slice of the driver in
 * the API server may still offer it (docs/dra.md, switching a node). */
#ifndef GS_AGENT_DRA_GLUE_H
#define GS_AGENT_DRA_GLUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/plan.h"
#include "dra/dra.h"
#include "dra/handover.h"

struct agent;

struct agent_dra_switch {
    struct dra_handover h;  /* the GPUs held from the device plugins */
    bool cleaner;           /* without --dra: the publisher only deletes the node's slices, then stops */
    uint64_t next_check_ns; /* when the loop looks at the publisher again */
};

/* Before the first replan: the API server's client (--kubeconfig, else $KUBECONFIG, in-cluster,
 * ~/.kube/config) and the ResourceSlices' publisher. Without --dra, when the agent has API access
 * (--kubeconfig, $KUBECONFIG, or in a cluster), the publisher deletes the driver's slices of the
 * node (the slices of an earlier run with --dra) and stops once they are gone. Without an API
 * server configuration nothing is published or deleted (logged: stale slices may exist). */
void agent_dra_slices_start(struct agent *a);

/* Before the DRA server starts: the claims' client (d->source, unless --dra-claims-dir gave
 * files). Without an API server configuration the kubelet side still runs: each prepare says why
 * there is no claim (logged). */
void agent_dra_api_start(struct agent *a, struct dra_options *d);

/* The DRA server did not start because its checkpoint is refused (a newer agent's, or damaged and
 * not set aside; why: its error): logged, and the node's ResourceSlices of the driver deleted as
 * a node without --dra does (no claim can be prepared here); the device plugins serve on. */
void agent_dra_refused(struct agent *a, const char *why);

/* Each device's health as the device plugin's (a critical Xid on its GPU until the quiet period
 * passes, or the GPU lost), for the resource-health stream; an MPS GPU's mps_down when its
 * control daemon is not running (prepare refuses its claims). */
void agent_dra_health(const struct agent *a, struct dra_device *d, size_t n);

/* Hands the publisher what the slices say now (the inventory and policy in force; cheap when
 * nothing changed) and, with plan (one just built, not yet served), leaves out of it the devices
 * of every GPU held: one that left the DRA driver (at the start: any GPU not the driver's) until
 * the publisher has the slices without it in place, at most DRA_HANDOVER_WAIT_MS. Main thread. */
void agent_dra_publish(struct agent *a, struct gs_plan *plan);

/* The loop's job (and its deadline) while a GPU is held: releases the GPUs whose slices are in
 * place, or whose wait passed (a warning), and kicks a replan that serves them; stops the
 * cleaner once it deleted the slices. */
void agent_dra_handover_job(void *ctx, uint64_t now_ns);
uint64_t agent_dra_handover_due(void *ctx);

/* Stops the publisher (its slices stay) and frees the clients, after the DRA server stopped. */
void agent_dra_api_stop(struct agent *a);

#endif
