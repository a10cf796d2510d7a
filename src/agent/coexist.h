/* coexist.h: another device plugin on the node (NVIDIA's k8s-device-plugin, or any plugin not
 * ours) that serves a resource gpuslice would serve. Checked at every replan (the start, the loop's
 * tick, a kubelet restart, a policy reload): each such resource is named in a warning, and under
 * gpuslice.coexistence.otherPlugin: refuse (the default) left out of the plan, so that gpuslice
 * does not register it while the other serves it and takes it over when the other goes. Under
 * share, the same, and also every GPU the other plugin's devices name (the kubelet's checkpoint)
 * is left out of every resource gpuslice serves: gpuslice serves only the GPUs the other does not,
 * under resource names the other does not register. */
#ifndef GS_AGENT_COEXIST_H
#define GS_AGENT_COEXIST_H

#include <stdbool.h>

#include "config/policy.h"
#include "core/plan.h"

struct agent;

#define AGENT_COEXIST_BY_MAX 256

struct agent_coexist {
    bool gpu[GS_MAX_GPUS];         /* share: GPUs (NVML index) another plugin's devices name */
    unsigned n;                    /* resources another plugin serves, as last checked */
    struct {
        char resource[GS_RESOURCE_NAME_MAX];
        char by[AGENT_COEXIST_BY_MAX]; /* who: "nvidia-gpu.sock (NVIDIA's device plugin)", ... */
    } c[GS_PLAN_MAX_RESOURCES];
};

/* Looks at the device-plugins directory (and the kubelet's checkpoint) for plugins serving one of
 * plan's resources, logs what changed since the last check, and under refuse removes those
 * resources from plan (a plan just built, not yet served). */
void agent_coexist_apply(struct agent *a, struct gs_plan *plan);

/* Removes the devices of the GPUs gpu[] names (NVML index) from every resource of plan, and the
 * resources left empty (also the DRA handover's held GPUs, dra_glue.c). */
void agent_plan_drop_gpus(const struct gs_inventory *inv, struct gs_plan *plan, const bool gpu[GS_MAX_GPUS]);

#endif
