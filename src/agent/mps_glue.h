/* mps_glue.h: the agent's side of MPS (src/mps): the plan's MPS GPUs and MIG instances and the
 * GPUs the DRA driver serves in MPS mode handed to the supervisor, replicas of a daemon that is not running marked Unhealthy before the plan is
 * compared and sent, compute modes (gpuslice.mps.exclusiveProcess), the supervisor's fd and
 * deadlines in the agent's loop (the fd comes and goes with the policy's MPS root). */
#ifndef GS_AGENT_MPS_GLUE_H
#define GS_AGENT_MPS_GLUE_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/loop.h"
#include "core/inventory.h"
#include "core/plan.h"

struct agent;

struct agent_mps {
    struct gs_mps_sup *sup;        /* NULL until the plan first has MPS replicas */
    char root[256];                /* the MPS root it supervises */
    bool stale_checked;            /* daemons left by an earlier agent stopped once */
    int cm_saved[GS_MAX_GPUS];     /* compute mode + 1 before the agent set EXCLUSIVE_PROCESS (0: untouched) */
    unsigned n_published;          /* daemons in the metrics */
    int job;                       /* the loop's job id of agent_mps_job, kicked by the supervisor's fd */
};

/* Hands the plan's MPS GPUs to the supervisor (started, or replaced when the policy's MPS root
 * changed) and marks the replicas of a GPU whose daemon is not running Unhealthy. */
void agent_mps_sync(struct agent *a, struct gs_plan *next);

/* Runs what the supervisor has due (a daemon that died or came back changes its devices' health);
 * due: its next deadline. */
loop_job_fn agent_mps_job;
loop_due_fn agent_mps_due;

/* NULL when the MPS control daemon of uuid (a GPU or MIG instance) is running; else why not: its
 * state ("starting", "restarting", "failed", "stopped": not supervised) or that no supervisor runs. */
const char *agent_mps_down(const struct agent *a, const char *uuid);

/* Quits the daemons and gives GPUs their compute modes back (the agent stops). */
void agent_mps_stop(struct agent *a);

#endif
