/* util.c: per-process utilization (nvmlDeviceGetProcessUtilization,
 * nvmlDeviceGetProcessesUtilizationInfo). The simulator has no clock of work, so it models
 * time-slicing with every process busy: each of the n processes on a GPU ran 100/n % of the last
 * sampling period. One sample per process, stamped now (microseconds, CLOCK_REALTIME as the
 * driver's CPU timestamps); none newer than lastSeenTimeStamp is NOT_FOUND, as with the driver.
 * MIG devices and GPUs in MIG mode are NOT_SUPPORTED (the driver has no per-process utilization
 * under MIG). */
#include <string.h>
#include <time.h>

#include "simlib.h"

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} sim_nvmlProcessUtilizationSample_t;

typedef struct {
    unsigned long long timeStamp;
    unsigned int pid, smUtil, memUtil, encUtil, decUtil, jpgUtil, ofaUtil;
} sim_nvmlProcessUtilizationInfo_v1_t;

typedef struct {
    unsigned int version, processSamplesCount;
    unsigned long long lastSeenTimeStamp;
    sim_nvmlProcessUtilizationInfo_v1_t *procUtilArray;
} sim_nvmlProcessesUtilizationInfo_t;

#define SIM_PROCESSES_UTIL_V1 ((unsigned)sizeof(sim_nvmlProcessesUtilizationInfo_t) | (1u << 24))

static unsigned long long now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000;
}

/* How many samples the GPU of `d` has since last_seen (*n), and the one timestamp they share. */
static nvmlReturn_t samples_of(nvmlDevice_t d, unsigned long long last_seen, struct dev_ref *ref, unsigned *n,
                               unsigned long long *ts) {
    nvmlReturn_t r = resolve_device(d, ref);
    if (r == NVML_SUCCESS && (ref->ci || ref->gpu->mig_current))
        r = NVML_ERROR_NOT_SUPPORTED;
    *ts = now_us();
    *n = r == NVML_SUCCESS && *ts > last_seen ? ref->gpu->n_procs : 0;
    if (r == NVML_SUCCESS && *n == 0)
        r = NVML_ERROR_NOT_FOUND;
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, sim_nvmlProcessUtilizationSample_t *u,
                                                    unsigned int *count, unsigned long long lastSeenTimeStamp) {
    READ_BEGIN;
    struct dev_ref ref;
    unsigned n = 0;
    unsigned long long ts;
    nvmlReturn_t r = with_out(resolve_device(d, &ref), count);
    if (r == NVML_SUCCESS)
        r = samples_of(d, lastSeenTimeStamp, &ref, &n, &ts);
    if (r == NVML_SUCCESS && (!u || *count < n)) {
        *count = n;
        r = NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; r == NVML_SUCCESS && i < n; i++)
        u[i] = (sim_nvmlProcessUtilizationSample_t){ ref.gpu->procs[i].pid, ts, 100 / n, 0, 0, 0 };
    if (r == NVML_SUCCESS)
        *count = n;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t d, sim_nvmlProcessesUtilizationInfo_t *info) {
    READ_BEGIN;
    struct dev_ref ref;
    unsigned n = 0;
    unsigned long long ts;
    nvmlReturn_t r = with_out(resolve_device(d, &ref), info);
    if (r == NVML_SUCCESS && info->version != SIM_PROCESSES_UTIL_V1)
        r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (r == NVML_SUCCESS)
        r = samples_of(d, info->lastSeenTimeStamp, &ref, &n, &ts);
    if (r == NVML_SUCCESS && (!info->procUtilArray || info->processSamplesCount < n)) {
        info->processSamplesCount = n;
        r = NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; r == NVML_SUCCESS && i < n; i++)
        info->procUtilArray[i] = (sim_nvmlProcessUtilizationInfo_v1_t){ .timeStamp = ts,
                                                                        .pid = ref.gpu->procs[i].pid,
                                                                        .smUtil = 100 / n };
    if (r == NVML_SUCCESS) {
        info->processSamplesCount = n;
        info->lastSeenTimeStamp = ts;
    }
    READ_END(r);
}
