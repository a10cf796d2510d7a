/* server.h: the scheduler extender's HTTP endpoints on the project's HTTP server (src/httpd):
 *   POST .../filter       ExtenderArgs -> ExtenderFilterResult (per-GPU fit, model.h)
 *   POST .../prioritize   ExtenderArgs -> HostPriorityList (the policy's score, 0..10)
 *   POST .../bind         ExtenderBindingArgs -> ExtenderBindingResult (the GPU chosen; bind_fn
 *                         makes the Binding)
 *   GET  /healthz         "ok"
 *   GET  /metrics         Prometheus text: requests, decisions, decision latency histogram
 * The verbs are matched on the path's last segment, so any urlPrefix works. Each decision is
 * taken under the model's lock, which a source (the API server's watch) also takes to change it. */
#ifndef GS_EXTENDER_SERVER_H
#define GS_EXTENDER_SERVER_H

#include <pthread.h>
#include <stddef.h>

#include "extender/model.h"
#include "extender/wire.h"

struct ex_server;

/* Makes the binding of a pod to b->node with the GPUs of ch (e.g. a Binding with the
 * gpuslice.io/gpu-index annotation); 0 or -errno with the reason in err. Called after the choice
 * is committed to the model, outside the model's lock, on one of bind_workers threads (several at
 * once), the scheduler's bind answered with its result; an error releases the choice
 * (ex_release). NULL: the model alone records it, on the HTTP thread. */
typedef int (*ex_bind_fn)(void *ctx, const struct ex_bind_args *b, const struct pl_choice *ch, char *err,
                          size_t errlen);

struct ex_server_config {
    const char *addr; /* HOST:PORT */
    size_t max_body;  /* the longest request body (bytes; 0: EX_ARGS_BODY_MAX, what the largest request takes) */
    struct ex_model *model;
    pthread_mutex_t *lock; /* guards model */
    ex_bind_fn bind;
    void *bind_ctx;
    unsigned bind_workers; /* bindings written at once, off the HTTP thread (0: 4; with bind only) */
};

struct ex_server *ex_server_start(const struct ex_server_config *cfg, char *err, size_t errlen);
unsigned ex_server_port(const struct ex_server *s);
void ex_server_stop(struct ex_server *s);

#endif
