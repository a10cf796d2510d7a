/* server.h: the scheduler extender's HTTP endpoints on the project's HTTP server (src/httpd):
 *   POST .../filter       ExtenderArgs -> ExtenderFilterResult (per-GPU fit, model.h)
 *   POST .../prioritize   ExtenderArgs -> HostPriorityList (the policy's score, 0..10)
 *   POST .../bind         ExtenderBindingArgs -> ExtenderBindingResult (the GPU chosen; bind_fn
 *                         makes the Binding)
 *   GET  /healthz         "ok" (open to any client)
 *   GET  /metrics         Prometheus text: requests, decisions, decision latency histogram
 * Every path but /healthz asks for a client certificate the TLS client CA verified (401 without),
 * unless plain_trusted. A bind names the pod by PodUID, which the filter must have seen with the
 * same namespace and name.
 * The verbs are matched on the path's last segment, so any urlPrefix works. Each decision is
 * taken under the model's lock, which a source (the API server's watch) also takes to change it. */
#ifndef GS_EXTENDER_SERVER_H
#define GS_EXTENDER_SERVER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "httpd/httpd.h"
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

/* Reads the pod of b (the API server's GET) before anything is committed: 0 when it is Pending,
 * not bound and has b->uid; else -errno (-ENOENT gone, -ESTALE another UID, -EEXIST bound,
 * -EPERM not Pending or being deleted) with the reason in err. Called on a bind worker. */
typedef int (*ex_check_fn)(void *ctx, const struct ex_bind_args *b, char *err, size_t errlen);

struct ex_server_config {
    const char *addr; /* HOST:PORT */
    const struct httpd_tls *tls; /* NULL: plain HTTP */
    bool plain_trusted; /* every request trusted, without TLS (a loopback address, asked for explicitly) */
    size_t max_body;  /* the longest request body (bytes; 0: EX_ARGS_BODY_MAX, what the largest request takes) */
    struct ex_model *model;
    pthread_mutex_t *lock; /* guards model */
    ex_bind_fn bind;
    ex_check_fn check; /* NULL: none (a model alone) */
    void *bind_ctx;    /* bind's and check's */
    unsigned bind_workers; /* bindings written at once, off the HTTP thread (0: 4; with bind only) */
};

struct ex_server *ex_server_start(const struct ex_server_config *cfg, char *err, size_t errlen);
unsigned ex_server_port(const struct ex_server *s);
void ex_server_stop(struct ex_server *s);

#endif
