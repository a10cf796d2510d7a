/* apiserver.h: the DRA driver's API-server side, over the Kubernetes REST client (src/kube/kube.h):
 *
 * - claims (claimkube.c): a claim source (dra.h) that GETs resource.k8s.io/v1
 *   namespaces/NS/resourceclaims/NAME at prepare and hands it to dra_claim_parse (UID checked, this
 *   driver's results and opaque configs). Each GET is bounded by the client's limits (the agent
 *   gives it 3 s to connect, 10 s a request: under the kubelet's 45 s for NodePrepareResources);
 *   once the API server did not answer, later claims fail at once with -EAGAIN for
 *   DRA_API_DOWN_MS, so a batch never waits on it more than once.
 *
 * - slices (publish.c): a thread that keeps the node's ResourceSlices in the API server equal to
 *   what the builder (slices.h) says: created, updated and deleted (the node's and driver's other
 *   slices, listed with fieldSelector spec.nodeName and spec.driver), the pool's generation bumped
 *   on every change (an unchanged pool found at the start keeps its generation), a 409 re-read and
 *   retried, any failure retried with backoff (0.5 s doubling to 30 s), and a resync every
 *   resync_ms (an API server that lost its data). The slices are watched (an informer): one
 *   deleted (the kubelet wipes the node's slices when it starts) is written again at once. The agent's loop hands
 *   it what the slices say and never waits on the API server. */
#ifndef GS_DRA_APISERVER_H
#define GS_DRA_APISERVER_H

#include <jansson.h>
#include <stddef.h>

#include "dra/dra.h"
#include "kube/kube.h"

#define DRA_API_DOWN_MS 5000        /* claims fail fast this long after the API server did not answer */
#define DRA_API_CONNECT_MS 3000     /* the claims client's limits (the agent's) */
#define DRA_API_REQUEST_MS 10000
#define DRA_RESYNC_MS_DEFAULT 60000 /* the publisher re-reads the slices this often */

struct dra_claim_kube;

/* A claim source on client c (kept by reference; it must outlive the source). */
int dra_claim_kube_new(struct kube_client *c, struct dra_claim_kube **out);
struct dra_claim_source dra_claim_kube_source(struct dra_claim_kube *k);
void dra_claim_kube_free(struct dra_claim_kube *k); /* NULL is fine */

struct dra_publisher_options {
    struct kube_client *client; /* kept by reference; used only on the publisher's thread */
    const char *node;           /* spec.nodeName, the pool's name */
    const char *driver;
    unsigned resync_ms;         /* 0: DRA_RESYNC_MS_DEFAULT */
};
struct dra_publisher;

/* Starts the thread; nothing is written before the first dra_publisher_set. */
int dra_publisher_start(const struct dra_publisher_options *o, struct dra_publisher **out, char *err, size_t errlen);
/* What the slices say now (a JSON array of ResourceSlices as gs_dra_slices_build writes them; the
 * generation is the publisher's; [] deletes the node's slices of the driver): the reference is
 * taken over. A copy equal to the last one is dropped; another wakes the thread. Returns the
 * sequence number of what is in force after the call (1, 2, ...: one per accepted change; 0
 * before the first). Any thread. */
unsigned long long dra_publisher_set(struct dra_publisher *p, json_t *slices);
/* The sequence number last synced: the API server had exactly those slices, the node's other
 * slices of the driver deleted (0: none yet); *last_rc (optional): the last sync's 0 or -errno
 * (-EPERM: forbidden), 1 before the first. A later number synced means every earlier one's
 * slices are gone too. Any thread. */
unsigned long long dra_publisher_synced(struct dra_publisher *p, int *last_rc);
/* The pool generation last written or found (0 before the first sync). Any thread. */
long long dra_publisher_generation(struct dra_publisher *p);
/* Stops the thread (a request in flight is cancelled) and frees it; the slices stay in the API
 * server (a restarted agent finds them). NULL is fine. */
void dra_publisher_stop(struct dra_publisher *p);

#endif
