/* handover.c: a GPU handed from the DRA driver to the device plugin (see handover.h; pure). */
#include "dra/handover.h"

unsigned dra_handover_plan(struct dra_handover *h, const bool dra[GS_MAX_GPUS], unsigned n_gpus, unsigned long long seq,
                           uint64_t now_ns, uint64_t wait_ns) {
    unsigned n = 0;
    for (unsigned g = 0; g < GS_MAX_GPUS; g++) {
        if (dra[g] || g >= n_gpus) {
            h->held[g] = false;
        } else if (!h->started || h->dra[g]) {
            /* held again (it left twice): the later set and a fresh wait */
            n += !h->held[g];
            h->held[g] = true;
            h->seq[g] = seq;
            h->deadline_ns[g] = now_ns + wait_ns;
        }
        h->dra[g] = dra[g];
    }
    h->started = true;
    return n;
}

unsigned dra_handover_settle(struct dra_handover *h, unsigned long long synced, uint64_t now_ns,
                             bool late[GS_MAX_GPUS]) {
    unsigned n = 0;
    for (unsigned g = 0; g < GS_MAX_GPUS; g++) {
        bool in_place = h->held[g] && synced && synced >= h->seq[g];
        bool expired = h->held[g] && !in_place && now_ns >= h->deadline_ns[g];
        if (late)
            late[g] = expired;
        if (in_place || expired) {
            h->held[g] = false;
            n++;
        }
    }
    return n;
}

unsigned dra_handover_release_all(struct dra_handover *h) {
    unsigned n = 0;
    for (unsigned g = 0; g < GS_MAX_GPUS; g++) {
        n += h->held[g];
        h->held[g] = false;
    }
    return n;
}

bool dra_handover_any(const struct dra_handover *h) {
    for (unsigned g = 0; g < GS_MAX_GPUS; g++)
        if (h->held[g])
            return true;
    return false;
}

uint64_t dra_handover_deadline(const struct dra_handover *h) {
    uint64_t d = UINT64_MAX;
    for (unsigned g = 0; g < GS_MAX_GPUS; g++)
        if (h->held[g] && h->deadline_ns[g] < d)
            d = h->deadline_ns[g];
    return d;
}
