/* utilization.h: the agent's job that samples NVML's per-process utilization of every GPU and
 * attributes it to the containers that hold the GPU's devices, for the metric
 * gpuslice_pod_gpu_utilization_ratio (src/core/podutil.h has the arithmetic). */
#ifndef GS_AGENT_UTILIZATION_H
#define GS_AGENT_UTILIZATION_H

#include "agent/loop.h"

/* The loop's job (ctx: the agent), every --pod-attribution-interval-ms: each GPU's samples since
 * the newest it has read (the lastSeenTimeStamp remembered per GPU), averaged over the interval. */
loop_job_fn agent_pod_util_job;

#endif
