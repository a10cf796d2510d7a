/* faults.h: the simulated NVML library's fault schedule, SQLite-style: "the Nth call (or the Nth
 * and every later one) of NVML function F fails with NVML error E", written as the environment
 * variable GPUSLICE_SIM_FAULTS (docs/simulator.md#fault-schedule), for example
 *   nvmlDeviceCreateGpuInstanceWithPlacement:2:NVML_ERROR_INSUFFICIENT_RESOURCES,nvmlDeviceGetMemoryInfo:1+:NVML_ERROR_GPU_IS_LOST
 * Pure: parsing and counting, no I/O (fuzzed: fuzz_simfaults). Internal to the library. */
#ifndef GS_SIM_FAULTS_H
#define GS_SIM_FAULTS_H

#include <stdbool.h>
#include <stddef.h>

#include "gpu/nvml_types.h"

#define SIM_FAULTS_MAX 32      /* entries in one schedule */

struct sim_fault {
    const char *func;          /* NVML function, the library's name for it (static storage) */
    unsigned long long nth;    /* 1-based call number */
    bool and_later;            /* "N+": the Nth and every later call */
    nvmlReturn_t ret;          /* never NVML_SUCCESS */
    unsigned counter;          /* index into calls[]: the entries of one function share a counter */
};

struct sim_faults {
    unsigned n;
    struct sim_fault entries[SIM_FAULTS_MAX];
    unsigned long long calls[SIM_FAULTS_MAX]; /* calls counted so far, per function named */
};

/* Parses `spec` (NULL or "" is the empty schedule) into *out, counters at zero. On error returns
 * -EINVAL, leaves *out empty and writes "WHAT: entry K 'TEXT': FIELD: problem" to err. */
int sim_faults_parse(const char *what, const char *spec, struct sim_faults *out, char *err, size_t errlen);

/* Counts one call of NVML function `func` and returns the error the schedule gives that call, or
 * NVML_SUCCESS; *hit (if not NULL) is the entry that fired, else NULL. Functions the schedule does
 * not name are not counted. */
nvmlReturn_t sim_faults_next(struct sim_faults *f, const char *func, const struct sim_fault **hit);

/* The i-th function a schedule may name, in the library's spelling (NULL past the last). */
const char *sim_faults_function(size_t i);

/* "NVML_ERROR_GPU_IS_LOST" for NVML_ERROR_GPU_IS_LOST, NULL for a code without a name. */
const char *sim_faults_error_name(nvmlReturn_t r);

#endif
