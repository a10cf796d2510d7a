/* ecc.c: ECC and memory health of the simulated GPUs: ECC mode (enabled on every board of the
 * catalogue, as data-center boards ship), the corrected and uncorrected error counters (volatile:
 * since the last GPU reset; aggregate: for the board's life), and the pages taken out of service:
 * retired pages on GPUs before Ampere, remapped rows on Ampere and newer (each generation answers
 * the other's call NOT_SUPPORTED, as the driver does). A page or row waits, pending, for the next
 * GPU reset. The counters and pages come from `gpuslice sim ecc` and `gpuslice sim retire-page`
 * (gpusliceSimEccError, gpusliceSimRetirePage below). MIG device handles: INVALID_ARGUMENT. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "simctl.h"
#include "simlib.h"

#define SIM_LOCATION_DEVICE_MEMORY 2
#define SIM_LOCATION_COUNT 8

static bool remaps_rows(const struct sim_gpu *g) { return g->model->arch >= GS_ARCH_AMPERE; }

EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t d, nvmlEnableState_t *current, nvmlEnableState_t *pending) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), current);
    if (r == NVML_SUCCESS && !pending)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *current = *pending = 1; /* NVML_FEATURE_ENABLED */
    READ_END(r);
}

static nvmlReturn_t ecc_count(nvmlDevice_t d, unsigned type, unsigned counter, unsigned location,
                              unsigned long long *count) {
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), count);
    if (r == NVML_SUCCESS && (type > 1 || counter > 1 || location >= SIM_LOCATION_COUNT))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) /* errors happen in device memory; the caches and register files stay clean */
        *count = location == SIM_LOCATION_DEVICE_MEMORY ? ref.gpu->health.ecc[type][counter] : 0;
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, unsigned int errorType, unsigned int counterType,
                                                unsigned long long *count) {
    READ_BEGIN;
    READ_END(ecc_count(d, errorType, counterType, SIM_LOCATION_DEVICE_MEMORY, count));
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t d, unsigned int errorType, unsigned int counterType,
                                                    unsigned int locationType, unsigned long long *count) {
    READ_BEGIN;
    READ_END(ecc_count(d, errorType, counterType, locationType, count));
}

/* Retired pages of one cause (0 multiple single-bit errors, 1 a double-bit error); *count in: the
 * buffer's size, out: the pages there are (INSUFFICIENT_SIZE when they do not fit). */
EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t d, unsigned int cause, unsigned int *count,
                                              unsigned long long *addresses) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), count);
    if (r == NVML_SUCCESS && remaps_rows(ref.gpu))
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS && cause > 1)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        READ_END(r);
    const struct sim_health *h = &ref.gpu->health;
    unsigned n = 0;
    for (unsigned i = 0; i < h->n_retired; i++)
        n += h->retired[i].cause == cause;
    if (n > 0 && (!addresses || *count < n)) {
        *count = n;
        READ_END(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned i = 0, k = 0; i < h->n_retired; i++)
        if (h->retired[i].cause == cause)
            addresses[k++] = h->retired[i].address;
    *count = n;
    READ_END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t d, nvmlEnableState_t *pending) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), pending);
    if (r == NVML_SUCCESS && remaps_rows(ref.gpu))
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS)
        *pending = ref.gpu->health.retire_pending ? 1 : 0;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int *corrRows, unsigned int *uncRows,
                                              unsigned int *isPending, unsigned int *failureOccurred) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), corrRows);
    if (r == NVML_SUCCESS && (!uncRows || !isPending || !failureOccurred))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && !remaps_rows(ref.gpu))
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r != NVML_SUCCESS)
        READ_END(r);
    const struct sim_health *h = &ref.gpu->health;
    *corrRows = *uncRows = 0;
    for (unsigned i = 0; i < h->n_retired; i++)
        *(h->retired[i].cause ? uncRows : corrRows) += 1;
    *isPending = h->retire_pending;
    *failureOccurred = h->n_retired == SIM_MAX_RETIRED; /* no spare row left */
    READ_END(NVML_SUCCESS);
}

void sim_health_reset(struct sim_gpu *g) {
    g->health.ecc[0][0] = g->health.ecc[1][0] = 0;
    g->health.retire_pending = false;
}

/* ---- controls (simctl.h) -------------------------------------------------------------------- */

static int ctl_gpu(unsigned gpu, struct sim_gpu **g, char *err, size_t errlen) {
    if (lock_state(true, NULL) != NVML_SUCCESS) {
        snprintf(err, errlen, "simulated NVML is not initialised");
        return -ENXIO;
    }
    if (gpu >= sim_st->n_gpus) {
        snprintf(err, errlen, "GPU %u does not exist: the node has %u GPU(s)", gpu, sim_st->n_gpus);
        unlock_state(NVML_ERROR_INVALID_ARGUMENT, false);
        return -ENODEV;
    }
    *g = &sim_st->gpus[gpu];
    return 0;
}

/* Unlocks, saving the state when rc is 0. */
static int ctl_done(int rc, char *err, size_t errlen) {
    if (unlock_state(rc == 0 ? NVML_SUCCESS : NVML_ERROR_UNKNOWN, rc == 0) != NVML_SUCCESS && rc == 0) {
        snprintf(err, errlen, "failed to save the simulated state in %s", sim_state_dir);
        return -EIO;
    }
    return rc;
}

EXPORT int gpusliceSimEccError(unsigned gpu, int uncorrected, unsigned long long count, char *err, size_t errlen) {
    struct sim_gpu *g;
    int r = ctl_gpu(gpu, &g, err, errlen);
    if (r < 0)
        return r;
    if (count == 0 || count > SIM_ECC_MAX_ADD) {
        snprintf(err, errlen, "error count %llu: expected 1..%llu", count, (unsigned long long)SIM_ECC_MAX_ADD);
        return ctl_done(-EINVAL, err, errlen);
    }
    unsigned long long *c = g->health.ecc[uncorrected ? 1 : 0];
    for (int k = 0; k < 2; k++) /* saturating: a counter never wraps to a small number */
        c[k] = c[k] > ~0ULL - count ? ~0ULL : c[k] + count;
    return ctl_done(0, err, errlen);
}

EXPORT int gpusliceSimRetirePage(unsigned gpu, unsigned long long address, int double_bit, char *err, size_t errlen) {
    struct sim_gpu *g;
    int r = ctl_gpu(gpu, &g, err, errlen);
    if (r < 0)
        return r;
    struct sim_health *h = &g->health;
    const char *what = remaps_rows(g) ? "row" : "page";
    for (unsigned i = 0; i < h->n_retired; i++) {
        if (h->retired[i].address == address) {
            snprintf(err, errlen, "GPU %u: %s 0x%llx is already retired", gpu, what, address);
            return ctl_done(-EEXIST, err, errlen);
        }
    }
    if (h->n_retired == SIM_MAX_RETIRED) {
        snprintf(err, errlen, "GPU %u: already %d retired %ss", gpu, SIM_MAX_RETIRED, what);
        return ctl_done(-ENOSPC, err, errlen);
    }
    h->retired[h->n_retired++] = (struct sim_retired){ address, sim_now_ms() / 1000, double_bit ? 1u : 0u };
    h->retire_pending = true;
    return ctl_done(0, err, errlen);
}
