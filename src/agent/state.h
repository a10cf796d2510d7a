/* state.h: the agent's main-thread state (struct agent), which every file of src/agent/ works
 * on, and the node's state machine (state.c): the policy in force, the inventory, health, the
 * plan served, the MIG layout. Only the main thread touches struct agent; what the gRPC thread
 * reads is in `shared`, under its lock (shared.h). */
#ifndef GS_AGENT_STATE_H
#define GS_AGENT_STATE_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "agent/agent.h"
#include "agent/coexist.h"
#include "agent/dra_glue.h"
#include "agent/loop.h"
#include "agent/migmgr.h"
#include "agent/mps_glue.h"
#include "agent/publish.h"
#include "agent/shared.h"

struct agent {
    const struct agent_options *o;
    struct gpu_node *node;
    struct agent_shared shared;    /* with the gRPC thread, under its lock */
    struct loop loop;

    struct gs_policy *policy;      /* in force (heap; published whole in shared, never changed in place) */
    unsigned long long policy_hash;
    struct gs_inventory *inv;
    struct gs_health health;
    unsigned long long last_xid_ns[GS_MAX_GPUS];
    unsigned long long last_xid[GS_MAX_GPUS];
    struct gs_plan plan;
    bool plan_valid;
    struct dp_manager *dp;
    struct dra_server *dra;        /* the DRA driver's kubelet side (--dra), NULL without */
    struct kube_client *dra_kube_claims, *dra_kube_pub; /* dra_glue.c: the API server's clients */
    struct dra_claim_kube *dra_claims; /* the claims' source (NULL: files, or no API server) */
    struct dra_publisher *dra_pub;     /* the ResourceSlices' thread (NULL: none) */
    char dra_slices_error[512];        /* why the slices could not be built, as last logged */
    char dra_node[256];                /* the host name, when neither --node-name nor $NODE_NAME says */
    struct agent_dra_switch dra_switch; /* dra_glue.c: GPUs held from the device plugins (handover) */
    unsigned long long poll_start_ns; /* when this inventory poll began (its reconcile_seconds) */

    /* fd sources (agent.c) */
    int sigfd, inofd, timerfd, pipe_rd, pipe_wr;
    int kubelet_wd, config_wd;
    char config_dir[PATH_MAX], config_base[NAME_MAX + 1];
    int policy_job;                /* the loop's job id of the policy reload, kicked by SIGHUP and inotify */
    int replan_job;                /* the loop's job id of a replan, kicked by the MPS supervisor's job */
    struct xidwatch *xid;          /* the NVML event thread (xidwatch.h), NULL without */
    unsigned long long trim_last_ns;

    struct agent_mps mps;          /* mps_glue.c */
    struct agent_pub pub;          /* publish.c */
    struct agent_coexist coexist;  /* coexist.c: resources other plugins serve, as last checked */
    struct agent_migmgr migmgr;    /* migmgr.c: NVIDIA's MIG manager's label on the Node */
    char attribution_error[256];   /* cleanup.c: why PodResources could not be asked, as last logged */
    char mig_partial[2048];        /* state.c: the reason of the partial MIG layout, as last logged */
};

/* Loads the policy file (defaults without one) and puts it in force. Returns 1 if a new policy is
 * in force, 0 if unchanged, -errno if the file is bad (the running policy stays). */
int agent_load_policy(struct agent *a, bool initial);

/* Hands the inventory's devices to the DRA server (when it runs). */
void agent_dra_devices(struct agent *a);

/* Re-reads the GPUs (a GPU that stops answering keeps its identity, marked lost). */
void agent_refresh_inventory(struct agent *a);

/* Builds the plan from the inventory, policy and health; when it changed, writes the CDI spec,
 * hands it to the device plugins and rewrites the labels. Returns 0 or -errno. */
int agent_replan(struct agent *a, bool log_warnings);

/* Applies the policy's MIG layout: the devices of every instance it destroys are first withdrawn
 * from ListAndWatch, then the layout is applied, then the new devices are advertised. A GPU whose
 * layout would destroy an instance a pod holds is laid out around it (mig/relay.h): the state is
 * "partial" until agent_mig_relay_job finds the instance released and makes the rest. */
void agent_reconcile_mig(struct agent *a);

/* A critical Xid (or one the policy ignores) from the event thread. */
void agent_handle_xid(struct agent *a, const struct gpu_event *ev);

/* The loop's jobs (loop.h; ctx: the agent). */
loop_job_fn agent_policy_job;    /* kicked: reload the policy, apply its MIG layout, replan */
loop_job_fn agent_inventory_job; /* tick: re-read the GPUs; retry a CDI spec that failed */
loop_job_fn agent_recovery_job;  /* tick: GPUs quiet for the policy's recovery period are Healthy */
loop_job_fn agent_plan_job;      /* tick, last: replan; the poll's reconcile_seconds */
loop_job_fn agent_replan_job;    /* kicked: replan (an MPS daemon changed state) */
loop_job_fn agent_mig_relay_job; /* tick interval: a partial MIG layout tried again (pods may have gone) */
loop_job_fn agent_mig_job;       /* kicked: the MIG layout again (NVIDIA's MIG manager's label gone) */

#endif
