/* sim_fixture.h: helpers for tests that drive the simulated NVML library through the real dlopen
 * backend: write a node description into a fresh temporary directory and open the node there. */
#ifndef GS_SIM_FIXTURE_H
#define GS_SIM_FIXTURE_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../sim/simctl.h"
#include "gpu/gpu.h"

struct sim_fixture {
    char dir[256];        /* temporary directory: node.yaml and state/ */
    char node_path[300];
    char state_dir[300];
    struct gpu_node *node;
    const struct nvml_api *api;
};

static inline const char *sim_lib(void) {
    const char *p = getenv("GS_SIM_LIB");
    return p && *p ? p : GS_SIM_LIB_PATH;
}

/* Writes `yaml` as the node description, points the simulator at it and opens the node. */
static inline int sim_fixture_open(struct sim_fixture *f, const char *yaml) {
    memset(f, 0, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/gpuslice-test-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->node_path, sizeof(f->node_path), "%s/node.yaml", f->dir);
    snprintf(f->state_dir, sizeof(f->state_dir), "%s/state", f->dir);
    FILE *fp = fopen(f->node_path, "w");
    if (!fp)
        return -1;
    fputs(yaml, fp);
    fclose(fp);
    setenv("GPUSLICE_SIM_NODE", f->node_path, 1);
    setenv("GPUSLICE_SIM_STATE", f->state_dir, 1);
    char err[512];
    int r = gpu_node_open(sim_lib(), &f->node, err, sizeof(err));
    if (r < 0) {
        fprintf(stderr, "gpu_node_open: %s\n", err);
        return r;
    }
    f->api = gpu_node_api(f->node);
    return 0;
}

static inline void sim_fixture_close(struct sim_fixture *f) {
    if (f->node)
        gpu_node_close(f->node);
    f->node = NULL;
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", f->dir);
}

/* Replaces the fault schedule of this process's simulated NVML (docs/simulator.md#fault-schedule)
 * and restarts its counts; "" clears it. Returns 0 or -errno (the message on stderr). */
static inline int sim_fixture_faults(struct sim_fixture *f, const char *spec) {
    gs_sim_set_faults_fn set = (gs_sim_set_faults_fn)gpu_node_symbol(f->node, "gpusliceSimSetFaults");
    char err[512];
    int r = set ? set(spec, err, sizeof(err)) : -ENOSYS;
    if (r < 0)
        fprintf(stderr, "gpusliceSimSetFaults: %s\n", set ? err : "not exported");
    return r;
}

static inline nvmlDevice_t sim_device(struct sim_fixture *f, unsigned i) {
    nvmlDevice_t d = NULL;
    if (f->api->DeviceGetHandleByIndex(i, &d) != NVML_SUCCESS)
        return NULL;
    return d;
}

/* Node description with one GPU of `model`. */
static inline void one_gpu_yaml(char *buf, size_t len, const char *model, int mig) {
    snprintf(buf, len, "gpus:\n  - model: %s\n    count: 1\n%s", model, mig ? "    mig: enabled\n" : "");
}

#endif
