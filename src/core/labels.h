/* labels.h: the node labels gpuslice publishes through Node Feature Discovery's local source
 * (a features.d file of key=value lines): GPU Feature Discovery's names under gpuslice.io/
 * (gpuslice.io/gpu.count, ...), so they do not collide with GFD's or instruct NVIDIA's MIG
 * manager; with gpuslice.labels.nvidiaNames also GFD's nvidia.com/ names (never
 * nvidia.com/mig.config). Pure: built from the inventory, the policy and the plan. */
#ifndef GS_LABELS_H
#define GS_LABELS_H

#include <stddef.h>

#include "config/policy.h"
#include "core/inventory.h"
#include "core/plan.h"

#define GS_FEATURES_FILE "/etc/kubernetes/node-feature-discovery/features.d/gpuslice"

/* Writes the labels, sorted by key, one "key=value\n" per line, into buf. mig_state is the state
 * of the policy's MIG layout ("pending", "applied", "failed") or NULL when none was applied yet;
 * it is published only when the policy names a layout. Every value is a valid Kubernetes label
 * value (at most 63 characters of [A-Za-z0-9._-], alphanumeric at both ends).
 * Returns the length written, or -ENOSPC (buf too small), -ENOMEM. */
int gs_labels_format(const struct gs_inventory *inv, const struct gs_policy *policy, const struct gs_plan *plan,
                     const char *mig_state, char *buf, size_t len);

#endif
