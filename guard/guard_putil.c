/* guard_putil.c: charging the GPU time received: NVML's per-process utilization (guard_putil.h).
 *
 * Each process reads, at most every UTIL_INTERVAL_NS while it launches, NVML's utilization samples
 * for its own pid (nvmlDeviceGetProcessUtilization, those since the newest it has seen). Each
 * sample is the share of one sampling period in which the process's kernels ran; the period is
 * the smallest gap seen between two samples' timestamps (NVML leaves out periods in which a
 * process did not run). The GPU time received, the sum of smUtil x period, over the spans the
 * process measured meanwhile is the share of its spans its kernels actually ran (1 alone, 1/2
 * beside a busy time-slicing neighbour): every span it charges from then on is scaled by it. The
 * scale is at most 1 (a span bounds the time its kernels can have run) and at least 1/32. All
 * under the pacer's lock. When NVML cannot say (no library, not supported, or no sample ever names
 * this pid: a PID namespace NVML does not see into) spans are charged whole, as before. */
#include <unistd.h>

#include "guard_base.h"
#include "guard_core.h"
#include "guard_driver.h"
#include "guard_putil.h"

#define UTIL_INTERVAL_NS 100000000ULL
#define UTIL_MISSES_OFF 20 /* reads with spans but no sample for this pid before giving up */

typedef int (*nvml_init_fn)(void);
typedef int (*nvml_handle_index_fn)(unsigned, nvmlDevice_t *);
typedef int (*nvml_handle_uuid_fn)(const char *, nvmlDevice_t *);

/* The scale for spans: received (GPU time, ns) over span_ns, within [1/32, 1] in 1/UTIL_SCALE_ONE. */
static uint32_t util_scale(double received_ns, uint64_t span_ns) {
    double r = span_ns ? received_ns / (double)span_ns : 1.0;
    if (r > 1.0)
        r = 1.0;
    if (r < 1.0 / 32)
        r = 1.0 / 32;
    return (uint32_t)(r * UTIL_SCALE_ONE);
}

/* NVML's handle of CUDA device `dev`: by the limits' UUID, else by index. False when none. */
static bool util_open(struct guard_putil *p, int dev, struct util_track *u) {
    u->tried = true;
    nvml_init_fn init = (nvml_init_fn)guard_nvml_sym(&g_real, "nvmlInit_v2");
    p->get = (nvml_putil_fn)guard_nvml_sym(&g_real, "nvmlDeviceGetProcessUtilization");
    if (!init || !p->get || init() != 0)
        return false;
    int i = g_core.dev_index[dev];
    const char *uuid = i >= 0 ? g_core.limits.dev[i].uuid : "";
    if (uuid[0]) {
        nvml_handle_uuid_fn by_uuid = (nvml_handle_uuid_fn)guard_nvml_sym(&g_real, "nvmlDeviceGetHandleByUUID");
        return by_uuid && by_uuid(uuid, &u->h) == 0;
    }
    nvml_handle_index_fn by_index = (nvml_handle_index_fn)guard_nvml_sym(&g_real, "nvmlDeviceGetHandleByIndex_v2");
    return by_index && by_index((unsigned)dev, &u->h) == 0;
}

/* Once the samples cover two sampling periods, sets the scale from them and the spans harvested
 * meanwhile. */
void putil_read(struct guard_putil *p, int dev, uint64_t now) {
    struct util_track *u = &p->dev[dev];
    if (u->off || now < u->next_ns)
        return;
    u->next_ns = now + UTIL_INTERVAL_NS;
    if (!u->tried && !util_open(p, dev, u)) {
        u->off = true;
        glog("device %d: NVML has no per-process utilization: the compute share is charged by kernel span "
             "(low beside a busy neighbour)", dev);
        return;
    }
    guard_nvmlProcessUtilizationSample_t *buf = p->buf;
    unsigned n = PUTIL_SAMPLES;
    int r = p->get(u->h, buf, &n, u->last_seen);
    if (r == 6 /* NOT_FOUND: no sample since last_seen */ || r == 7 /* INSUFFICIENT_SIZE */)
        return;
    if (r != 0) {
        u->off = true;
        glog("device %d: nvmlDeviceGetProcessUtilization failed (%d): the compute share is charged by kernel "
             "span", dev, r);
        return;
    }
    unsigned long long newest = u->last_seen, prev_ts = 0;
    unsigned pid = (unsigned)getpid();
    bool own = false;
    for (unsigned k = 0; k < n && k < PUTIL_SAMPLES; k++) {
        unsigned long long ts = buf[k].timeStamp;
        if (ts <= u->last_seen)
            continue;
        if (prev_ts && ts > prev_ts && (!u->period || ts - prev_ts < u->period))
            u->period = ts - prev_ts;
        if (ts != prev_ts)
            prev_ts = ts;
        if (ts > newest)
            newest = ts;
        if (buf[k].pid == pid) {
            own = true;
            u->own_sum += (unsigned long long)buf[k].smUtil;
        }
    }
    if (!u->own_first) { /* the first read only finds where NVML's samples are */
        u->own_first = u->last_seen = newest;
        u->own_sum = u->span_ns = 0;
        return;
    }
    u->last_seen = newest;
    if (!own && u->span_ns && ++u->misses >= UTIL_MISSES_OFF && !u->scale) {
        u->off = true;
        glog("device %d: NVML's utilization samples never name pid %u (another PID namespace?): the compute share "
             "is charged by kernel span", dev, pid);
        return;
    }
    if (!u->period || newest - u->own_first < 2 * u->period || !u->span_ns)
        return;
    /* smUtil % of `period` NVML units (microseconds) per sample, in ns. */
    double received = (double)u->own_sum / 100.0 * (double)u->period * 1000.0;
    u->scale = util_scale(received, u->span_ns);
    u->misses = 0;
    u->own_sum = 0;
    u->span_ns = 0;
    u->own_first = newest;
}
