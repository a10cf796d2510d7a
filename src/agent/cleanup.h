/* cleanup.h: the agent's periodic jobs over what allocations leave behind and over PodResources:
 * guard files and transient CDI specs of pods that are gone, the guard's counters reconciled with
 * NVML (guard_reconcile.h), and which pod holds which device (the metrics' attribution). An
 * allocation's files carry a devices record ("RESOURCE\tID" lines) written at Allocate; when the
 * kubelet no longer assigns any of its devices, the pod is gone and the files can go. */
#ifndef GS_AGENT_CLEANUP_H
#define GS_AGENT_CLEANUP_H

#include "agent/loop.h"

/* The loop's jobs (loop.h; ctx: the agent). */
loop_job_fn agent_guard_gc_job;        /* guard files, then transient CDI specs, of gone pods */
loop_job_fn agent_guard_reconcile_job; /* the guard's counters against NVML, into the metrics */
loop_job_fn agent_attribution_job;     /* PodResources' assignments of our devices, into the metrics */

#endif
