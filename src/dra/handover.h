/* handover.h: a GPU handed from the DRA driver to the device plugin (pure). The device plugin
 * must not advertise a GPU while a ResourceSlice of the driver in the API server may still offer
 * it (the scheduler would allocate a claim on it, and the same GPU would be given twice): a GPU
 * that was the DRA driver's, or may have been (at the start, slices of an earlier run may
 * offer any GPU), and is not now is held back until the publisher (apiserver.h) has what the
 * slices say without it in place (its sequence number synced), or until the bounded wait passes
 * (released then with a warning: the API server down must not keep the GPU from the device
 * plugin for ever). The agent leaves a held GPU's devices out of the plan it serves. */
#ifndef GS_DRA_HANDOVER_H
#define GS_DRA_HANDOVER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/inventory.h"

#define DRA_HANDOVER_WAIT_MS 30000 /* the longest a GPU is held back (the kubelet's own grace is 30 s) */
#define DRA_HANDOVER_POLL_MS 100   /* how often the agent looks at the publisher while one is */

struct dra_handover {
    bool started;                        /* dra_handover_plan was called once */
    bool dra[GS_MAX_GPUS];               /* the DRA driver's (NVML index) as last planned */
    bool held[GS_MAX_GPUS];              /* kept from the device plugin */
    unsigned long long seq[GS_MAX_GPUS]; /* held until the publisher synced this sequence number */
    uint64_t deadline_ns[GS_MAX_GPUS];   /* or until then (monotonic) */
};

/* The DRA driver's GPUs now (dra[g], NVML index g < n: the node's GPUs), handed to the publisher as sequence number seq
 * (what the slices say: without the GPUs not in dra). Every GPU that was the driver's before this
 * call, or any GPU at the first call, and is not now is held until seq is synced or wait_ns
 * passes; one that is the driver's now is not held (the device plugin does not serve it anyway).
 * Returns how many GPUs this call newly held. */
unsigned dra_handover_plan(struct dra_handover *h, const bool dra[GS_MAX_GPUS], unsigned n, unsigned long long seq,
                           uint64_t now_ns, uint64_t wait_ns);

/* The publisher synced sequence number `synced` (0: none yet): the GPUs held for it or an earlier
 * one are released, and at now_ns those whose wait passed, marked in late[] (may be NULL).
 * Returns how many were released. */
unsigned dra_handover_settle(struct dra_handover *h, unsigned long long synced, uint64_t now_ns,
                             bool late[GS_MAX_GPUS]);

/* Releases every held GPU (no API server to wait for); returns how many were held. */
unsigned dra_handover_release_all(struct dra_handover *h);

/* Whether any GPU is held; the earliest deadline of one (UINT64_MAX: none held). */
bool dra_handover_any(const struct dra_handover *h);
uint64_t dra_handover_deadline(const struct dra_handover *h);

#endif
