/* apisource.h: the extender's model from the API server (`gpuslice extender --kubeconfig`), and the
 * Binding its bind verb makes.
 *
 * Two informers (src/kube/kube.h, each on a thread of its own, relisted after an API server
 * restart): Nodes, whose GPUs are the labels the agent publishes (src/core/labels.c): those of
 * its fractional GPUs (gpuslice.io/gpu-memory.count, .memory in MiB, .product) where it has
 * them, else gpuslice.io/gpu.count, gpu.memory, gpu.product, gpu.replicas (a Node with neither
 * count is no GPU node), and pods not finished (fieldSelector status.phase!=Succeeded,status.phase!=Failed), of
 * which those bound (spec.nodeName) are committed with the GPUs of their gpuslice.io/gpu-index
 * annotation, or, without one, where the node's best fit puts them (logged). A pod that leaves
 * gives its share back (ex_release); a Node whose GPUs change rebuilds the model
 * (ex_model_rebuild). Three more for DRA (claims.h): the driver's ResourceSlices (a node's
 * GPUs that are the DRA driver's: never offered to extended-resource pods), ResourceClaims
 * (what each asks, and what the allocated ones take of each device) and ResourceClaimTemplates.
 * Each change is made under the lock the HTTP handlers take, briefly: no decision waits on the
 * API server. */
#ifndef GS_EXTENDER_APISOURCE_H
#define GS_EXTENDER_APISOURCE_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "extender/model.h"
#include "extender/wire.h"
#include "kube/kube.h"

#define EX_ANN_GPU_INDEX "gpuslice.io/gpu-index"

struct ex_api_config {
    struct kube_client *client; /* borrowed */
    struct ex_model *model;
    pthread_mutex_t *lock; /* guards model */
    const char *dra_driver; /* the DRA driver whose slices and claims are judged (NULL: gpu.gpuslice.io) */
};
struct ex_api;

int ex_api_start(const struct ex_api_config *cfg, struct ex_api **out, char *err, size_t errlen);
/* Whether both informers have listed once. */
bool ex_api_synced(struct ex_api *a);
void ex_api_stop(struct ex_api *a);
/* The server's bind (ex_bind_fn, ctx the ex_api): POST .../pods/NAME/binding to the node with the
 * GPU annotation and the pod's UID (metadata.uid: the API server's precondition, as
 * kube-scheduler's DefaultBinder sets it); 0 or -errno with the API server's message in err. */
int ex_api_bind(void *ctx, const struct ex_bind_args *b, const struct pl_choice *ch, char *err, size_t errlen);
/* The server's check (ex_check_fn): GET the pod, then ex_pod_bindable. */
int ex_api_check(void *ctx, const struct ex_bind_args *b, char *err, size_t errlen);
/* Pure: whether the v1.Pod pod may be bound by b: its metadata.uid b->uid (-ESTALE), no
 * spec.nodeName (-EEXIST), no deletionTimestamp and status.phase Pending (-EPERM); -EBADMSG
 * without a uid. The reason in err. */
int ex_pod_bindable(const json_t *pod, const struct ex_bind_args *b, char *err, size_t errlen);

/* Pure, for the tests: a Node's spec from its labels and status.allocatable: 1 (a GPU node), 0 (no
 * gpuslice.io/gpu.count), -EINVAL with the label in err. */
int ex_node_from_json(const json_t *node, struct ex_node_spec *out, char *err, size_t errlen);
/* "1" or "0,2" into ch->gpus: 0, or -EINVAL. */
int ex_gpu_index_parse(const char *s, struct pl_choice *ch);
/* The Binding of b with the annotation of ch's GPUs (none without GPUs); a new reference. */
json_t *ex_binding_json(const struct ex_bind_args *b, const struct pl_choice *ch);

#endif
