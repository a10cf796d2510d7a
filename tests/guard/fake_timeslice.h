/* fake_timeslice.h: the simulated driver's time-sliced GPU, shared by processes
 * (FAKE_CUDA_GPU=FILE, device 0; tests only). Every process on it has a FIFO of kernels measured in
 * its own GPU time; the GPU runs the processes that have work in turn, so with k of them busy each
 * advances at 1/k of real time (a fluid model of time-slicing: a kernel's wall span grows with the
 * neighbours' load). The state is advanced lazily, exactly, by whichever process calls in.
 * The file also keeps per-process utilization samples (every FAKE_GPU_SAMPLE_MS, default 20: the
 * share of the period each process's kernels ran), what the simulated NVML reports through
 * nvmlDeviceGetProcessUtilization. */
#ifndef GS_FAKE_TIMESLICE_H
#define GS_FAKE_TIMESLICE_H

#include <stdbool.h>
#include <stdint.h>

#define FK_TS_FILE_BYTES (1u << 20) /* what the test creates (zeroed): at least the state's size */

struct fk_mark {
    uint64_t target;                   /* the process's launched GPU time when the event was recorded */
    int idx;                           /* its completion slot in the shared file */
};

struct fk_util_sample {
    unsigned pid;
    unsigned long long ts_us;          /* end of the sample period (CLOCK_MONOTONIC, microseconds) */
    unsigned sm_util;                  /* percent of the period the process's kernels ran */
};

bool fk_ts_enabled(void);              /* FAKE_CUDA_GPU names a usable file */
void fk_ts_launch(uint64_t own_ns);    /* queues own_ns of GPU time (waits while 64 ms are pending) */
struct fk_mark fk_ts_record(void);     /* an event at the end of what is queued now */
bool fk_ts_reached(struct fk_mark m, uint64_t *at_ns); /* done? and when the GPU reached it */
void fk_ts_drain(void);                /* waits until everything queued has run */
/* The samples of every process that ran in periods ending after last_seen_us (oldest first). */
unsigned fk_ts_samples(unsigned long long last_seen_us, struct fk_util_sample *out, unsigned max);

#endif
