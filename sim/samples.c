/* samples.c: nvmlDeviceGetSamples and nvmlDeviceGetFieldValues over the simulated GPUs' state.
 * The simulator keeps no history: each sampling type has one sample, stamped now (microseconds,
 * CLOCK_REALTIME), of what the other calls report now (power.c, device.c, ecc.c); none newer than
 * lastSeenTimeStamp is NOT_FOUND. Field values answer the fields below, each other field with
 * its own nvmlReturn NOT_SUPPORTED, as the driver marks a field it lacks. */
#include <string.h>
#include <time.h>

#include "simlib.h"

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    int siVal;
    unsigned short usVal;
} sim_nvmlValue_t;

typedef struct {
    unsigned long long timeStamp;
    sim_nvmlValue_t sampleValue;
} sim_nvmlSample_t;

typedef struct {
    unsigned int fieldId, scopeId;
    long long timestamp, latencyUsec;
    int valueType;
    nvmlReturn_t nvmlReturn;
    sim_nvmlValue_t value;
} sim_nvmlFieldValue_t;
_Static_assert(sizeof(sim_nvmlSample_t) == 16 && sizeof(sim_nvmlFieldValue_t) == 40, "nvml.h sizes (LP64)");

#define VALUE_UINT 1 /* NVML_VALUE_TYPE_UNSIGNED_INT */
#define VALUE_ULL 3  /* NVML_VALUE_TYPE_UNSIGNED_LONG_LONG */

static unsigned long long now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000;
}

static unsigned memory_percent(const struct sim_gpu *g) {
    unsigned long long total = g->model->mem_mib << 20, used = used_bytes(g, -1, -1);
    return total ? (unsigned)((used > total ? total : used) * 100 / total) : 0;
}

/* The value of sampling type `type` (nvmlSamplingType_t) on GPU g now. */
static nvmlReturn_t sample_of(const struct sim_gpu *g, unsigned type, unsigned *v) {
    switch (type) {
    case 0: *v = sim_power_mw(g); return NVML_SUCCESS;                          /* TOTAL_POWER (mW) */
    case 1:                                                                      /* GPU_UTILIZATION */
    case 2:                                                                      /* MEMORY_UTILIZATION */
        if (g->mig_current)
            return NVML_ERROR_NOT_SUPPORTED; /* as nvmlDeviceGetUtilizationRates under MIG */
        *v = type == 1 ? (g->n_procs ? 100 : 0) : memory_percent(g);
        return NVML_SUCCESS;
    case 3: case 4: case 8: case 9: *v = 0; return NVML_SUCCESS;                /* ENC, DEC, JPG, OFA */
    case 5: *v = sim_current_clock_mhz(g, 0); return NVML_SUCCESS;              /* PROCESSOR_CLK */
    case 6: *v = sim_current_clock_mhz(g, 2); return NVML_SUCCESS;              /* MEMORY_CLK */
    case 7: return NVML_ERROR_NOT_SUPPORTED;                                     /* MODULE_POWER: no module */
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
}

EXPORT nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t d, unsigned int type, unsigned long long lastSeenTimeStamp,
                                         int *valueType, unsigned int *count, sim_nvmlSample_t *samples) {
    READ_BEGIN;
    struct dev_ref ref;
    unsigned v = 0;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), count);
    if (r == NVML_SUCCESS && !valueType)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        r = sample_of(ref.gpu, type, &v);
    unsigned long long ts = now_us();
    if (r == NVML_SUCCESS && ts <= lastSeenTimeStamp)
        r = NVML_ERROR_NOT_FOUND;
    if (r != NVML_SUCCESS)
        READ_END(r);
    *valueType = VALUE_UINT;
    if (!samples) { /* the number of samples there are */
        *count = 1;
        READ_END(NVML_SUCCESS);
    }
    if (*count < 1)
        READ_END(NVML_ERROR_INSUFFICIENT_SIZE);
    memset(&samples[0], 0, sizeof(samples[0]));
    samples[0].timeStamp = ts;
    samples[0].sampleValue.uiVal = v;
    *count = 1;
    READ_END(NVML_SUCCESS);
}

/* nvmlFieldValue_t's field IDs (nvml.h NVML_FI_DEV_*) the simulated node answers. */
enum {
    FI_ECC_CURRENT = 1, FI_ECC_PENDING = 2, FI_ECC_SBE_VOL = 3, FI_ECC_DBE_VOL = 4, FI_ECC_SBE_AGG = 5,
    FI_ECC_DBE_AGG = 6, FI_RETIRED_SBE = 29, FI_RETIRED_DBE = 30, FI_RETIRED_PENDING = 31, FI_ENERGY = 83,
    FI_NVLINK_LINK_COUNT = 91, FI_NVLINK_DATA_TX = 138, FI_NVLINK_RAW_RX = 141, FI_REMAPPED_COR = 142,
    FI_REMAPPED_UNC = 143, FI_REMAPPED_PENDING = 144, FI_REMAPPED_FAILURE = 145, FI_POWER_AVERAGE = 185,
    FI_POWER_INSTANT = 186,
};

static void field_of(const struct sim_gpu *g, sim_nvmlFieldValue_t *f, unsigned long long now_ms) {
    const struct sim_health *h = &g->health;
    bool remaps = g->model->arch >= GS_ARCH_AMPERE;
    unsigned id = f->fieldId;
    unsigned long long v = 0;
    f->valueType = VALUE_UINT;
    f->nvmlReturn = NVML_SUCCESS;
    if (id >= FI_ECC_SBE_VOL && id <= FI_ECC_DBE_AGG) {
        f->valueType = VALUE_ULL;
        v = h->ecc[(id - FI_ECC_SBE_VOL) % 2][(id - FI_ECC_SBE_VOL) / 2];
    } else if (id == FI_ECC_CURRENT || id == FI_ECC_PENDING) {
        v = 1;
    } else if (id >= FI_RETIRED_SBE && id <= FI_RETIRED_PENDING && !remaps) {
        for (unsigned i = 0; i < h->n_retired; i++)
            v += id != FI_RETIRED_PENDING && h->retired[i].cause == id - FI_RETIRED_SBE;
        if (id == FI_RETIRED_PENDING)
            v = h->retire_pending;
    } else if (id >= FI_REMAPPED_COR && id <= FI_REMAPPED_FAILURE && remaps) {
        for (unsigned i = 0; i < h->n_retired; i++)
            v += id <= FI_REMAPPED_UNC && h->retired[i].cause == id - FI_REMAPPED_COR;
        if (id == FI_REMAPPED_PENDING)
            v = h->retire_pending;
        else if (id == FI_REMAPPED_FAILURE)
            v = h->n_retired == SIM_MAX_RETIRED;
    } else if (id == FI_ENERGY) {
        f->valueType = VALUE_ULL;
        v = sim_energy_mj(g, now_ms);
    } else if (id == FI_NVLINK_LINK_COUNT) {
        v = sim_nvlink_count(g->model);
    } else if (id >= FI_NVLINK_DATA_TX && id <= FI_NVLINK_RAW_RX && sim_nvlink_count(g->model)) {
        f->valueType = VALUE_ULL; /* no traffic crosses the simulated NVLinks */
    } else if (id == FI_POWER_AVERAGE || id == FI_POWER_INSTANT) {
        v = sim_power_mw(g);
    } else {
        f->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        return;
    }
    if (f->valueType == VALUE_ULL)
        f->value.ullVal = v;
    else
        f->value.uiVal = (unsigned)v;
}

EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int valuesCount, sim_nvmlFieldValue_t *values) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), values);
    if (r == NVML_SUCCESS && (valuesCount <= 0 || valuesCount > 1024))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        READ_END(r);
    unsigned long long ts = now_us();
    for (int i = 0; i < valuesCount; i++) {
        values[i].timestamp = (long long)ts;
        values[i].latencyUsec = 0;
        memset(&values[i].value, 0, sizeof(values[i].value));
        field_of(ref.gpu, &values[i], ts / 1000);
    }
    READ_END(NVML_SUCCESS);
}
