/* dra_glue.c: the DRA driver's API-server side in the agent (see dra_glue.h). */
#include "agent/dra_glue.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/coexist.h"
#include "agent/mps_glue.h"
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

static const char *driver_name(const struct agent *a) {
    return a->o->dra_driver ? a->o->dra_driver : DRA_DRIVER_DEFAULT;
}

/* Whether the driver ran on this node: its directory under the kubelet's plugins directory (its
 * socket's, and the prepared claims' checkpoint), which a run with --dra leaves; its path in dir. */
static bool ran_dra(const struct agent *a, char *dir, size_t len) {
    struct stat st;
    snprintf(dir, len, "%s/%s", a->o->dra_plugins_dir ? a->o->dra_plugins_dir : DRA_PLUGINS_DIR_DEFAULT,
             driver_name(a));
    return stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
}

void agent_dra_slices_start(struct agent *a) {
    const struct agent_options *o = a->o;
    const char *driver = driver_name(a);
    char err[1024];
    int r;
    a->dra_switch.next_check_ns = gs_now_ns();
    char dir[4096];
    if (!o->dra && !ran_dra(a, dir, sizeof(dir))) {
        /* a node that never ran the driver: no API client (nor libcurl) for slices it cannot have */
        log_info("DRA: no %s: no run with --dra left ResourceSlices of driver %s to delete", dir, driver);
        return;
    }
    if (!o->dra && !o->kubeconfig && !getenv("KUBECONFIG") && !getenv("KUBERNETES_SERVICE_HOST")) {
        log_warn(
            "DRA: %s shows a run with --dra, but without --kubeconfig, KUBECONFIG or a cluster the ResourceSlices "
            "of driver %s it may have left for this node are not deleted: until the kubelet deletes them (about "
            "30 s after the driver is gone) the scheduler may allocate DRA claims on GPUs the device plugin serves",
            dir, driver);
        return;
    }
    if (!node_name(a)[0]) {
        log_error(
            "DRA: no Node name: the ResourceSlices of driver %s are neither published nor checked: stale ones may "
            "offer GPUs the device plugin serves",
            driver);
        return;
    }
    const struct kube_limits lim = { DRA_API_CONNECT_MS, DRA_API_REQUEST_MS, 0, 0 };
    if ((r = kube_client_open(o->kubeconfig, NULL, o->dra ? NULL : &lim, &a->dra_kube_pub, err, sizeof(err))) < 0) {
        log_error("DRA: no API server (%s): no ResourceSlice of driver %s is %s; stale ones may offer GPUs the device "
                  "plugin serves until the kubelet deletes them",
                  err, driver, o->dra ? "published" : "deleted");
        return;
    }
    const struct dra_publisher_options po = { a->dra_kube_pub, node_name(a), driver, o->dra_resync_ms };
    if ((r = dra_publisher_start(&po, &a->dra_pub, err, sizeof(err))) < 0) {
        log_error("DRA: %s: no ResourceSlice of driver %s is %s", err, driver, o->dra ? "published" : "deleted");
        kube_client_free(a->dra_kube_pub);
        a->dra_kube_pub = NULL;
        return;
    }
    const char *via = o->kubeconfig ? o->kubeconfig : "the default kubeconfig";
    if (o->dra) {
        log_info("DRA: publishing the ResourceSlices of node %s (driver %s) through %s", po.node, po.driver, via);
        return;
    }
    json_t *none = json_array();
    if (!none) {
        log_error("DRA: out of memory: the ResourceSlices of driver %s are not checked", driver);
        return;
    }
    a->dra_switch.cleaner = true;
    dra_publisher_set(a->dra_pub, none);
    log_info("DRA: no --dra: deleting the ResourceSlices of driver %s for node %s through %s (if any) before the "
             "device plugin serves their GPUs",
             driver, po.node, via);
}

void agent_dra_api_start(struct agent *a, struct dra_options *d) {
    const struct agent_options *o = a->o;
    d->pool = node_name(a); /* the slices' pool, named in the health stream */
    if (o->dra_claims_dir)
        return;
    char err[1024];
    const struct kube_limits claims_lim = { DRA_API_CONNECT_MS, DRA_API_REQUEST_MS, 0, 0 };
    int r = kube_client_open(o->kubeconfig, NULL, &claims_lim, &a->dra_kube_claims, err, sizeof(err));
    if (r < 0) {
        log_error("DRA: no API server (%s): ResourceClaims cannot be read", err);
        return;
    }
    if ((r = dra_claim_kube_new(a->dra_kube_claims, &a->dra_claims)) < 0) {
        log_error("DRA: the claim source: out of memory");
        return;
    }
    d->source = dra_claim_kube_source(a->dra_claims);
}

void agent_dra_refused(struct agent *a, const char *why) {
    log_error("%s; the device plugins serve on", why);
    json_t *none = a->dra_pub ? json_array() : NULL;
    if (!none)
        return;
    a->dra_switch.cleaner = true;
    dra_publisher_set(a->dra_pub, none);
    log_warn("DRA: deleting the ResourceSlices of driver %s for node %s: no claim can be prepared here until the "
             "checkpoint is dealt with and the agent restarted",
             driver_name(a), node_name(a));
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
        const char *down = d[i].sharing == DRA_SHARING_MPS ? agent_mps_down(a, d[i].cdi) : NULL;
        snprintf(d[i].mps_down, sizeof(d[i].mps_down), "%s", down ? down : "");
    }
}

/* "0, 2" of the GPUs in mask. */
static const char *gpu_list(const bool mask[GS_MAX_GPUS], char *buf, size_t len) {
    size_t n = 0;
    buf[0] = 0;
    for (unsigned g = 0; g < GS_MAX_GPUS && n < len; g++)
        if (mask[g])
            n += (size_t)snprintf(buf + n, len - n, "%s%u", n ? ", " : "", g);
    return buf;
}

/* Hands the publisher what the slices say now; returns the sequence number of what it has in
 * force (the next one, never synced before a later set, when the slices could not be built). */
static unsigned long long publish_slices(struct agent *a) {
    if (a->dra_switch.cleaner || !a->inv || !a->policy)
        return dra_publisher_set(a->dra_pub, NULL);
    json_t *slices = NULL;
    char err[512];
    const char *driver = driver_name(a);
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
        return dra_publisher_set(a->dra_pub, NULL) + 1;
    }
    a->dra_slices_error[0] = 0;
    return dra_publisher_set(a->dra_pub, slices);
}

void agent_dra_publish(struct agent *a, struct gs_plan *plan) {
    unsigned long long seq = a->dra_pub ? publish_slices(a) : 0;
    if (!plan || !a->inv)
        return;
    struct agent_dra_switch *sw = &a->dra_switch;
    bool dra[GS_MAX_GPUS] = { false };
    unsigned n = 0;
    for (unsigned i = 0; i < a->inv->n_gpus && i < plan->n_gpus; i++) {
        unsigned g = a->inv->gpus[i].index;
        if (g < GS_MAX_GPUS) {
            dra[g] = plan->gpus[i].dra;
            n = g + 1 > n ? g + 1 : n;
        }
    }
    uint64_t now = gs_now_ns();
    bool was = dra_handover_any(&sw->h);
    if (dra_handover_plan(&sw->h, dra, n, seq, now, (uint64_t)DRA_HANDOVER_WAIT_MS * 1000000ULL) && a->dra_pub) {
        char list[256];
        log_info("DRA: GPU(s) %s held back from the device plugin until no ResourceSlice of driver %s offers them "
                 "(at most %u s)",
                 gpu_list(sw->h.held, list, sizeof(list)), driver_name(a), DRA_HANDOVER_WAIT_MS / 1000);
    }
    if (!a->dra_pub) /* no API server to ask (logged at the start): nothing to wait for */
        dra_handover_release_all(&sw->h);
    if (!was && dra_handover_any(&sw->h))
        sw->next_check_ns = now; /* the loop looks at once, then every DRA_HANDOVER_POLL_MS */
    agent_plan_drop_gpus(a->inv, plan, sw->h.held);
}

uint64_t agent_dra_handover_due(void *ctx) {
    const struct agent *a = ctx;
    const struct agent_dra_switch *sw = &a->dra_switch;
    return dra_handover_any(&sw->h) || (sw->cleaner && a->dra_pub) ? sw->next_check_ns : UINT64_MAX;
}

void agent_dra_handover_job(void *ctx, uint64_t now_ns) {
    struct agent *a = ctx;
    struct agent_dra_switch *sw = &a->dra_switch;
    const char *driver = driver_name(a);
    int rc = 1;
    unsigned long long synced = a->dra_pub ? dra_publisher_synced(a->dra_pub, &rc) : 0;
    bool late[GS_MAX_GPUS], was[GS_MAX_GPUS], in_place[GS_MAX_GPUS];
    char list[256];
    memcpy(was, sw->h.held, sizeof(was));
    unsigned released;
    if (sw->cleaner && rc == -ENOENT && !synced) {
        /* the cleaner's list answered 404 (its deletes take a 404 for done): the API server does not
         * serve resource.k8s.io/v1, so no slice of it offers a GPU */
        released = dra_handover_release_all(&sw->h);
        log_info("DRA: the API server does not serve resource.k8s.io/v1 ResourceSlices: none offers this node's GPUs");
        synced = 1;
        memset(late, 0, sizeof(late));
    } else if (rc == -EPERM || rc == -EACCES) {
        /* not allowed to read or delete them: waiting cannot help */
        released = dra_handover_release_all(&sw->h);
        if (released)
            log_warn(
                "DRA: the API server refuses the ResourceSlices of driver %s on node %s to this agent (%s): GPU(s) "
                "%s go to the device plugin, and a stale slice may still offer them to DRA claims until the kubelet "
                "deletes it",
                driver, node_name(a), strerror(-rc), gpu_list(was, list, sizeof(list)));
        memset(late, 0, sizeof(late));
    } else {
        released = dra_handover_settle(&sw->h, synced, now_ns, late);
    }
    for (unsigned g = 0; g < GS_MAX_GPUS; g++)
        in_place[g] = was[g] && !sw->h.held[g] && !late[g] && rc != -EPERM && rc != -EACCES;
    if (gpu_list(late, list, sizeof(list))[0])
        log_warn(
            "DRA: GPU(s) %s go to the device plugin after %u s without knowing that no ResourceSlice of driver %s "
            "on node %s offers them (the API server did not answer: %s): a stale slice may still offer them to DRA "
            "claims, the same GPU given twice, until it is deleted (retried in the background)",
            list, DRA_HANDOVER_WAIT_MS / 1000, driver, node_name(a), rc < 0 ? strerror(-rc) : "no answer yet");
    if (gpu_list(in_place, list, sizeof(list))[0])
        log_info("DRA: no ResourceSlice of driver %s offers GPU(s) %s any more: the device plugin serves them", driver,
                 list);
    if (released)
        loop_kick(&a->loop, a->replan_job);
    if (sw->cleaner && a->dra_pub && (synced || rc == -EPERM || rc == -EACCES)) {
        if (synced && rc != -ENOENT)
            log_info("DRA: no ResourceSlice of driver %s is left for node %s", driver, node_name(a));
        dra_publisher_stop(a->dra_pub); /* idle now (it synced): returns at once */
        a->dra_pub = NULL;
        kube_client_free(a->dra_kube_pub);
        a->dra_kube_pub = NULL;
    }
    /* while a GPU is held, often; a cleaner still retrying after the wait, each second */
    sw->next_check_ns = now_ns + (dra_handover_any(&sw->h) ? DRA_HANDOVER_POLL_MS : 1000) * 1000000ULL;
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
