/* util.c: per-process utilization (nvmlDeviceGetProcessUtilization,
 * nvmlDeviceGetProcessesUtilizationInfo), sampled as the driver samples it: time is cut into
 * sampling periods of SIM_UTIL_PERIOD_US (CLOCK_REALTIME microseconds, the driver's CPU
 * timestamps); each process that ran in a period has one sample stamped at the period's end, with
 * the share of the period its kernels ran (smUtil); a process that did not run has none. The
 * driver keeps the last SIM_UTIL_BUFFER periods; a read returns those newer than
 * lastSeenTimeStamp, and NOT_FOUND when there are none.
 *
 * What each process ran is its duty schedule (gpusliceSimProcessUtil, `gpuslice sim util`): the
 * SM percentage of each period, cycled. A process without one is busy and shares the GPU evenly
 * with the others (100/n % each). The GPU's own utilization (device.c) is the sum over its
 * processes in the last complete period, at most 100. MIG devices and GPUs in MIG mode are
 * NOT_SUPPORTED (the driver has no per-process utilization under MIG). */
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

unsigned long long sim_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000;
}

unsigned sim_proc_util(const struct sim_proc *p, unsigned n_procs, unsigned long long end_us) {
    if (end_us <= p->since_us)
        return 0; /* not started yet */
    if (!p->n_util || end_us <= p->util_since_us)
        return n_procs ? 100 / n_procs : 0;
    unsigned long long first = (p->util_since_us / SIM_UTIL_PERIOD_US + 1) * SIM_UTIL_PERIOD_US;
    return p->util[((end_us - first) / SIM_UTIL_PERIOD_US) % p->n_util];
}

/* One sample. */
struct sample {
    unsigned pid, sm;
    unsigned long long ts;
};

/* The samples of the GPU of `d` newer than last_seen, oldest period first: with out NULL only
 * counted (*n); else at most max written. NOT_FOUND when there are none. */
static nvmlReturn_t samples_of(nvmlDevice_t d, unsigned long long last_seen, struct sample *out, unsigned max,
                               unsigned *n) {
    struct dev_ref ref;
    nvmlReturn_t r = resolve_device(d, &ref);
    if (r == NVML_SUCCESS && (ref.ci || ref.gpu->mig_current))
        r = NVML_ERROR_NOT_SUPPORTED;
    *n = 0;
    if (r != NVML_SUCCESS)
        return r;
    const struct sim_gpu *g = ref.gpu;
    unsigned long long last = sim_now_us() / SIM_UTIL_PERIOD_US; /* the newest complete period's end / period */
    unsigned long long first = last >= SIM_UTIL_BUFFER ? last - SIM_UTIL_BUFFER + 1 : 1;
    if (last_seen / SIM_UTIL_PERIOD_US + 1 > first)
        first = last_seen / SIM_UTIL_PERIOD_US + 1;
    for (unsigned long long k = first; k <= last; k++) {
        unsigned long long ts = k * SIM_UTIL_PERIOD_US;
        for (unsigned i = 0; i < g->n_procs; i++) {
            unsigned sm = sim_proc_util(&g->procs[i], g->n_procs, ts);
            if (!sm)
                continue;
            if (out && *n < max)
                out[*n] = (struct sample){ g->procs[i].pid, sm, ts };
            ++*n;
        }
    }
    return *n ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, sim_nvmlProcessUtilizationSample_t *u,
                                                    unsigned int *count, unsigned long long lastSeenTimeStamp) {
    READ_BEGIN;
    struct dev_ref ref;
    unsigned n = 0;
    nvmlReturn_t r = with_out(resolve_device(d, &ref), count);
    if (r == NVML_SUCCESS)
        r = samples_of(d, lastSeenTimeStamp, NULL, 0, &n);
    if (r == NVML_SUCCESS && (!u || *count < n)) {
        *count = n;
        r = NVML_ERROR_INSUFFICIENT_SIZE;
    }
    static struct sample buf[SIM_MAX_PROCS * SIM_UTIL_BUFFER]; /* under the state lock */
    if (r == NVML_SUCCESS)
        r = samples_of(d, lastSeenTimeStamp, buf, n, &n);
    for (unsigned i = 0; r == NVML_SUCCESS && i < n; i++)
        u[i] = (sim_nvmlProcessUtilizationSample_t){ buf[i].pid, buf[i].ts, buf[i].sm, 0, 0, 0 };
    if (r == NVML_SUCCESS)
        *count = n;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t d, sim_nvmlProcessesUtilizationInfo_t *info) {
    READ_BEGIN;
    struct dev_ref ref;
    unsigned n = 0;
    nvmlReturn_t r = with_out(resolve_device(d, &ref), info);
    if (r == NVML_SUCCESS && info->version != SIM_PROCESSES_UTIL_V1)
        r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (r == NVML_SUCCESS)
        r = samples_of(d, info->lastSeenTimeStamp, NULL, 0, &n);
    if (r == NVML_SUCCESS && (!info->procUtilArray || info->processSamplesCount < n)) {
        info->processSamplesCount = n;
        r = NVML_ERROR_INSUFFICIENT_SIZE;
    }
    static struct sample buf[SIM_MAX_PROCS * SIM_UTIL_BUFFER];
    if (r == NVML_SUCCESS)
        r = samples_of(d, info->lastSeenTimeStamp, buf, n, &n);
    unsigned long long newest = info ? info->lastSeenTimeStamp : 0;
    for (unsigned i = 0; r == NVML_SUCCESS && i < n; i++) {
        info->procUtilArray[i] = (sim_nvmlProcessUtilizationInfo_v1_t){ .timeStamp = buf[i].ts,
                                                                        .pid = buf[i].pid,
                                                                        .smUtil = buf[i].sm };
        if (buf[i].ts > newest)
            newest = buf[i].ts;
    }
    if (r == NVML_SUCCESS) {
        info->processSamplesCount = n;
        info->lastSeenTimeStamp = newest;
    }
    READ_END(r);
}
