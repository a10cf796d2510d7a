/* gpm.c: GPU performance monitoring (nvmlGpmQueryDeviceSupport, nvmlGpmSampleAlloc/Free,
 * nvmlGpmSampleGet, nvmlGpmMigSampleGet, nvmlGpmMetricsGet), the driver's per-GPU-instance
 * figures under MIG, where it has no per-process utilization. Hopper and newer GPUs only; others
 * are NOT_SUPPORTED, as on the driver. A sample records when it was taken and of what (a GPU, or
 * one of its GPU instances); the metrics of two samples are computed from the processes' duty
 * schedules (util.c) over the sampling periods between them: GRAPHICS_UTIL and SM_UTIL (the same
 * value here) are the mean over those periods of what the processes of the GPU or GPU instance
 * ran, at most 100 %. Every other metric is NOT_SUPPORTED in its entry. */
#include <stdlib.h>
#include <string.h>

#include "simlib.h"

#define GPM_MAGIC 0x47504d53u
#define GPM_METRIC_SM_UTIL 2
#define GPM_MAX_PERIODS 100000ULL /* the newest periods between two samples looked at */

/* What an nvmlGpmSample_t points to here. */
struct nvmlGpmSample_st {
    unsigned magic;
    bool taken;
    unsigned gpu;
    int gi;                       /* -1: the whole GPU */
    unsigned long long ts_us;
};

/* nvmlGpmMetricsGet_t with the caller's array, of whatever size its header gives (numMetrics used). */
typedef struct {
    unsigned int version, numMetrics;
    nvmlGpmSample_t sample1, sample2;
    nvmlGpmMetric_t metrics[];
} sim_nvmlGpmMetricsGet_t;

static bool supported(const struct sim_gpu *g) {
    return g->model->arch >= GS_ARCH_HOPPER;
}

EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t d, nvmlGpmSupport_t *s) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_device(d, &ref), s);
    if (r == NVML_SUCCESS && s->version != 1)
        r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (r == NVML_SUCCESS)
        s->isSupportedDevice = supported(ref.gpu);
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlGpmSampleAlloc(struct nvmlGpmSample_st **s) {
    if (!s)
        return NVML_ERROR_INVALID_ARGUMENT;
    *s = calloc(1, sizeof(**s));
    if (!*s)
        return NVML_ERROR_MEMORY;
    (*s)->magic = GPM_MAGIC;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmSampleFree(struct nvmlGpmSample_st *s) {
    if (!s || s->magic != GPM_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    s->magic = 0;
    free(s);
    return NVML_SUCCESS;
}

/* Takes sample s of GPU ref (gi -1) or of its GPU instance gi. */
static nvmlReturn_t take(const struct dev_ref *ref, int gi, struct nvmlGpmSample_st *s) {
    if (!s || s->magic != GPM_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!supported(ref->gpu))
        return NVML_ERROR_NOT_SUPPORTED;
    *s = (struct nvmlGpmSample_st){ GPM_MAGIC, true, ref->index, gi, sim_now_us() };
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t d, struct nvmlGpmSample_st *s) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_gpu(d, &ref);
    if (r == NVML_SUCCESS)
        r = take(&ref, -1, s);
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t d, unsigned int gi, struct nvmlGpmSample_st *s) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_mig_gpu(d, &ref);
    if (r == NVML_SUCCESS && (gi >= SIM_MAX_GI || !ref.gpu->gis[gi].used))
        r = NVML_ERROR_NOT_FOUND;
    if (r == NVML_SUCCESS)
        r = take(&ref, (int)gi, s);
    READ_END(r);
}

/* The mean (percent) of what the processes of GPU g (or of its GPU instance gi) ran in the
 * periods ending in (t1, t2]. */
static double busy(const struct sim_gpu *g, int gi, unsigned long long t1, unsigned long long t2) {
    unsigned long long first = t1 / SIM_UTIL_PERIOD_US + 1, last = t2 / SIM_UTIL_PERIOD_US;
    if (last < first)
        return 0;
    if (last - first + 1 > GPM_MAX_PERIODS)
        first = last - GPM_MAX_PERIODS + 1;
    unsigned n = 0;
    for (unsigned i = 0; i < g->n_procs; i++)
        n += gi < 0 || g->procs[i].gi == gi;
    double sum = 0;
    for (unsigned long long k = first; k <= last; k++) {
        unsigned p = 0;
        for (unsigned i = 0; i < g->n_procs; i++)
            if (gi < 0 || g->procs[i].gi == gi)
                p += sim_proc_util(&g->procs[i], n, k * SIM_UTIL_PERIOD_US);
        sum += p > 100 ? 100 : p;
    }
    return sum / (double)(last - first + 1);
}

EXPORT nvmlReturn_t nvmlGpmMetricsGet(sim_nvmlGpmMetricsGet_t *m) {
    READ_BEGIN;
    nvmlReturn_t r = NVML_SUCCESS;
    if (!m)
        r = NVML_ERROR_INVALID_ARGUMENT;
    else if (m->version != 1)
        r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    else if (!m->sample1 || !m->sample2 || m->sample1->magic != GPM_MAGIC || m->sample2->magic != GPM_MAGIC ||
             !m->sample1->taken || !m->sample2->taken || m->sample1->gpu != m->sample2->gpu ||
             m->sample1->gi != m->sample2->gi || m->sample2->ts_us <= m->sample1->ts_us ||
             m->sample1->gpu >= sim_st->n_gpus || m->numMetrics > 210)
        r = NVML_ERROR_INVALID_ARGUMENT;
    static char gr[] = "GR_ENGINE_ACTIVE", sm[] = "SM_ACTIVE", pct[] = "%", none[] = "";
    for (unsigned i = 0; r == NVML_SUCCESS && i < m->numMetrics; i++) {
        nvmlGpmMetric_t *e = &m->metrics[i];
        bool known = e->metricId == NVML_GPM_METRIC_GRAPHICS_UTIL || e->metricId == GPM_METRIC_SM_UTIL;
        e->nvmlReturn = known ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
        e->value = known ? busy(&sim_st->gpus[m->sample1->gpu], m->sample1->gi, m->sample1->ts_us, m->sample2->ts_us)
                         : 0;
        char *name = !known ? none : e->metricId == GPM_METRIC_SM_UTIL ? sm : gr;
        e->metricInfo.shortName = e->metricInfo.longName = name;
        e->metricInfo.unit = known ? pct : none;
    }
    READ_END(r);
}
