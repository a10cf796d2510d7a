/* shared.h: what the device plugins' gRPC thread shares with the agent's main thread: the
 * Allocate and GetPreferredAllocation handlers (guard injection, transient CDI specs) and the
 * state their lock guards. Everything under `lock` is reached only through these functions, so
 * the main thread never holds the lock while it calls into the device plugins (whose own lock the
 * handlers run under): the two locks cannot deadlock. */
#ifndef GS_AGENT_SHARED_H
#define GS_AGENT_SHARED_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "agent/agent.h"
#include "agent/fractional.h"
#include "core/metrics.h"
#include "kubelet/deviceplugin.h"

struct agent_shared {
    const struct agent_options *o; /* immutable: not under the lock */
    atomic_ullong last_call_ns;    /* when the last Allocate or GetPreferredAllocation began */

    pthread_mutex_t lock;          /* guards everything below */
    const struct gs_policy *policy; /* the policy in force (the main thread's, replaced whole) */
    char *cdi_spec;                /* the node's CDI spec as last written (NULL: none yet) */
    struct agent_cdi_name {        /* its device names, sorted (pointers into cdi_spec): Allocate's index */
        const char *name;
        size_t len;
    } *cdi_names;
    size_t n_cdi_names;
    char cdi_error[256];           /* why it could not be written ("": it was) */
    struct gs_metrics_counters counters; /* Allocate counts from the gRPC thread, the rest from the main one */
    struct frac_state frac;        /* fractional GPUs: the admission in progress (its kube client and node
                                      name: the gRPC thread's only, used outside the lock) */
    unsigned n_hist;               /* request sizes seen per resource (GetPreferredAllocation) */
    struct {
        char resource[GS_RESOURCE_NAME_MAX];
        unsigned count[GS_ALLOC_SIZE_HIST];
    } hist[GS_PLAN_MAX_RESOURCES];
};

void agent_shared_init(struct agent_shared *s, const struct agent_options *o);
void agent_shared_destroy(struct agent_shared *s);

/* The handlers for dp_manager_new (ctx: s). */
struct dp_handlers agent_shared_handlers(struct agent_shared *s);

/* ---- updates from the main thread ---- */

/* Puts `p` in force; returns the policy it replaces, which no handler uses any more (the caller
 * frees it). */
const struct gs_policy *agent_shared_set_policy(struct agent_shared *s, const struct gs_policy *p);
/* The CDI spec written (text: taken over), or why not (text NULL, err). */
void agent_shared_set_cdi(struct agent_shared *s, char *text, const char *err);
/* True if text is the spec last written. */
bool agent_shared_cdi_is(struct agent_shared *s, const char *text);

void agent_shared_count_xid(struct agent_shared *s, unsigned gpu);
void agent_shared_count_reload(struct agent_shared *s, bool ok);
void agent_shared_count_reconcile_error(struct agent_shared *s);
void agent_shared_set_reconcile_seconds(struct agent_shared *s, double seconds);
void agent_shared_set_mps(struct agent_shared *s, const struct gs_mps_daemon_status *st, unsigned n);
/* Copies the last guard usage into out (room for GS_METRICS_MAX_GUARD); returns how many. */
size_t agent_shared_guard(struct agent_shared *s, struct gs_guard_usage *out);
void agent_shared_set_guard(struct agent_shared *s, const struct gs_guard_usage *u, size_t n);
/* known false: PodResources did not answer (no attribution). */
void agent_shared_set_pods(struct agent_shared *s, bool known, const struct gs_pod_device *pd, unsigned n);

/* Runs fn on the counters under the lock (the pod utilization's attribution, utilization.c). */
void agent_shared_with_counters(struct agent_shared *s, void (*fn)(struct gs_metrics_counters *c, void *ctx), void *ctx);

/* Renders the metrics (gs_metrics_format) with the counters. */
int agent_shared_metrics(struct agent_shared *s, const struct gs_inventory *inv, const struct gs_plan *plan,
                         const struct gs_health *health, char *buf, size_t len);

#endif
