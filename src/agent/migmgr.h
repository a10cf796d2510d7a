/* migmgr.h: NVIDIA's MIG manager's label on the agent's Node.
 * NVIDIA's MIG manager acts on the Node label nvidia.com/mig.config, which gpuslice never writes.
 * With API access (agent --kubeconfig, else the in-cluster service account) the agent reads its
 * own Node (--node-name, else $NODE_NAME, else the host name) at start and at the inventory
 * poll's pace, on a thread of its own with bounded requests (the loop is never blocked: the
 * thread's answers come through an eventfd). While the label is there and the policy has a MIG
 * layout, a warning names the label and its value; under gpuslice.coexistence.otherMigManager:
 * refuse no layout is applied (the MIG status says "refused"), and the layout follows once the
 * label is gone. At start the layout waits up to AGENT_MIGMGR_WAIT_MS for the first answer. Without
 * API access the check is off, said once. */
#ifndef GS_AGENT_MIGMGR_H
#define GS_AGENT_MIGMGR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/policy.h"

struct agent;

#define AGENT_MIGMGR_LABEL "nvidia.com/mig.config"
#define AGENT_MIGMGR_WAIT_MS 10000
#define AGENT_MIGMGR_VALUE_MAX 64

/* What the label means for the MIG layout (pure). */
enum agent_migmgr_verdict {
    AGENT_MIGMGR_CLEAR,  /* no label, or the policy leaves MIG alone: nothing to say */
    AGENT_MIGMGR_WARN,   /* the label and a layout, otherMigManager: warn: the layout is applied */
    AGENT_MIGMGR_REFUSE, /* the label and a layout, otherMigManager: refuse: no layout applied */
};
enum agent_migmgr_verdict agent_migmgr_decide(const struct gs_policy *p, const char *label /* NULL: absent */);
/* The warning of a verdict other than CLEAR, one line into buf. */
void agent_migmgr_text(enum agent_migmgr_verdict v, const char *node, const char *label, const char *mig_config,
                       char *buf, size_t len);

struct agent_migmgr_thread;

struct agent_migmgr {
    struct agent_migmgr_thread *t; /* NULL: no API access, the check is off */
    int job;                       /* the loop's job that applies the layout again (agent.c) */
    bool known, present;           /* an answer came; the label is there */
    char value[AGENT_MIGMGR_VALUE_MAX];
    bool deferred;                 /* the layout waits for the first answer, until deadline_ns */
    unsigned long long deadline_ns;
    char said[AGENT_MIGMGR_VALUE_MAX + 96]; /* what was last logged, so that each change is said once */
    char said_err[512];
};

/* Starts the Node's reader (or says why the check is off) and registers its eventfd in a's loop,
 * once the policy has a MIG layout (at start, or at the reload that gives it one; before that the
 * label concerns nothing gpuslice does). Never fails the agent. */
void agent_migmgr_start(struct agent *a);
/* Stops the reader (a request in flight ends at once) and joins it. */
void agent_migmgr_stop(struct agent *a);
/* Before a MIG layout is applied: true when it must not be now (the label under refuse: the
 * status is "refused"; or the first answer is awaited: the loop's job applies it later). */
bool agent_migmgr_blocks(struct agent *a);
/* The loop's job's deadline: the end of the wait for the first answer (loop_due_fn). */
uint64_t agent_migmgr_due(void *ctx);

#endif
