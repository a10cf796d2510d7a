/* board.c: what identifies a simulated board and its links, from the catalogue's board figures
 * (src/catalog/board.c) and the GPU's place on the node (pci.c): BAR1, serial number, VBIOS, board
 * ID, PCIe link (generation and width: the board's maximum, which an idle link keeps here) and
 * throughput, encoder and decoder utilization (no video work runs: 0 %), accounting mode (off, the
 * driver's default) and the NVLink fabric (Hopper and newer SXM boards on NVSwitches: fabric
 * manager done; other boards NOT_SUPPORTED), display (none attached) and driver model (a Windows
 * setting). MIG device handles: INVALID_ARGUMENT, but for BAR1. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "simlib.h"

static nvmlReturn_t board_gpu(nvmlDevice_t d, struct dev_ref *ref, const struct gs_board **b, const void *out) {
    nvmlReturn_t r = with_out(resolve_gpu(d, ref), out);
    if (r == NVML_SUCCESS && !(*b = gs_model_board(ref->gpu->model)))
        r = NVML_ERROR_NOT_SUPPORTED;
    return r;
}

typedef struct {
    unsigned long long bar1Total, bar1Free, bar1Used;
} sim_nvmlBAR1Memory_t;

/* BAR1 in use: the driver's own mappings, 1 MiB idle (as captures of idle boards show), plus
 * 2 MiB per process that maps GPU memory. A MIG device has the share of BAR1 of its memory slices
 * (nvidia-smi's MIG table shows 8191MiB for a 1g.5gb of an A100 40GB's 64 GiB), none used but by
 * its processes. */
EXPORT nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t d, sim_nvmlBAR1Memory_t *bar1) {
    READ_BEGIN;
    struct dev_ref ref;
    const struct gs_board *b = NULL;
    nvmlReturn_t r = with_out(resolve_device(d, &ref), bar1);
    if (r == NVML_SUCCESS && !(b = gs_model_board(ref.gpu->model)))
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r != NVML_SUCCESS)
        READ_END(r);
    unsigned procs = 0;
    for (unsigned i = 0; i < ref.gpu->n_procs; i++)
        procs += !ref.gi || ref.gpu->procs[i].gi == (int)ref.gi_id;
    bar1->bar1Total = b->bar1_mib << 20;
    bar1->bar1Used = (ref.gi ? 0 : 1ULL << 20) + ((2ULL * procs) << 20);
    if (ref.gi && ref.gpu->model->mig_mem_slices)
        bar1->bar1Total = bar1->bar1Total / ref.gpu->model->mig_mem_slices * ref.gi->size - (1ULL << 20);
    if (bar1->bar1Used > bar1->bar1Total)
        bar1->bar1Used = bar1->bar1Total;
    bar1->bar1Free = bar1->bar1Total - bar1->bar1Used;
    READ_END(NVML_SUCCESS);
}

/* A 13-digit serial number, from the GPU's UUID (stable for a node description, unique per GPU). */
EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t d, char *serial, unsigned int length) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_gpu(d, &ref);
    if (r == NVML_SUCCESS) {
        char u[SIM_UUID_LEN], buf[16];
        sim_gpu_uuid(ref.gpu->model, ref.index, u, sizeof(u));
        uint64_t h = 1469598103934665603ULL;
        for (const char *p = u; *p; p++)
            h = (h ^ (unsigned char)*p) * 1099511628211ULL;
        snprintf(buf, sizeof(buf), "13%011llu", (unsigned long long)(h % 100000000000ULL));
        r = sim_copy_string(serial, length, buf);
    }
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t d, char *version, unsigned int length) {
    READ_BEGIN;
    struct dev_ref ref;
    const struct gs_board *b = NULL;
    nvmlReturn_t r = board_gpu(d, &ref, &b, version);
    if (r == NVML_SUCCESS)
        r = sim_copy_string(version, length, b->vbios);
    READ_END(r);
}

/* The board ID the driver derives from the PCI location (nvidia-smi's "Board ID: 0x1800" for bus 0x18). */
EXPORT nvmlReturn_t nvmlDeviceGetBoardId(nvmlDevice_t d, unsigned int *id) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), id);
    if (r == NVML_SUCCESS) {
        unsigned domain, bus;
        sim_pci_location(ref.index, &domain, &bus);
        *id = domain << 16 | bus << 8;
    }
    READ_END(r);
}

enum link_what { LINK_GEN, LINK_WIDTH };

static nvmlReturn_t link_call(const char *fn, nvmlDevice_t d, enum link_what what, unsigned *out) {
    nvmlReturn_t ret_ = lock_state(false, fn);
    if (ret_ != NVML_SUCCESS)
        return ret_;
    struct dev_ref ref;
    const struct gs_board *b = NULL;
    nvmlReturn_t r = board_gpu(d, &ref, &b, out);
    if (r == NVML_SUCCESS)
        *out = what == LINK_GEN ? b->pcie_gen : b->pcie_width;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t d, unsigned int *gen) {
    return link_call(__func__, d, LINK_GEN, gen);
}
EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int *gen) {
    return link_call(__func__, d, LINK_GEN, gen);
}
EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t d, unsigned int *width) {
    return link_call(__func__, d, LINK_WIDTH, width);
}
EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t d, unsigned int *width) {
    return link_call(__func__, d, LINK_WIDTH, width);
}

/* PCIe throughput in KB/s over the last 20 ms: none while idle; a busy GPU moves 1 % of its link's
 * rate each way (lane rates after encoding: Gen3 985, Gen4 1969, Gen5 3938 MB/s). */
EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, unsigned int counter, unsigned int *value) {
    READ_BEGIN;
    static const unsigned lane_mbs[] = { 0, 250, 500, 985, 1969, 3938 };
    struct dev_ref ref;
    const struct gs_board *b = NULL;
    nvmlReturn_t r = board_gpu(d, &ref, &b, value);
    if (r == NVML_SUCCESS && counter > 1) /* NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES */
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *value = ref.gpu->n_procs && b->pcie_gen <= 5 ? lane_mbs[b->pcie_gen] * b->pcie_width * 10 : 0;
    READ_END(r);
}

static nvmlReturn_t codec_call(const char *fn, nvmlDevice_t d, unsigned *util, unsigned *period_us) {
    nvmlReturn_t ret_ = lock_state(false, fn);
    if (ret_ != NVML_SUCCESS)
        return ret_;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), util);
    if (r == NVML_SUCCESS && !period_us)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        *util = 0;
        *period_us = 167000; /* the driver's sampling period for the video engines */
    }
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t d, unsigned int *util, unsigned int *period_us) {
    return codec_call(__func__, d, util, period_us);
}
EXPORT nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t d, unsigned int *util, unsigned int *period_us) {
    return codec_call(__func__, d, util, period_us);
}

EXPORT nvmlReturn_t nvmlDeviceGetAccountingMode(nvmlDevice_t d, nvmlEnableState_t *mode) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), mode);
    if (r == NVML_SUCCESS)
        *mode = 0; /* NVML_FEATURE_DISABLED */
    READ_END(r);
}

/* nvmlGpuFabricInfo_t (nvml.h; pynvml's c_nvmlGpuFabricInfo_t): the cluster UUID, the fabric's
 * status, the clique and the state (NVML_GPU_FABRIC_STATE_COMPLETED = 3). */
typedef struct {
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned int cliqueId;
    unsigned char state;
} sim_nvmlGpuFabricInfo_t;
_Static_assert(sizeof(sim_nvmlGpuFabricInfo_t) == 28, "nvmlGpuFabricInfo_t is 28 bytes");

EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t d, sim_nvmlGpuFabricInfo_t *info) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), info);
    if (r == NVML_SUCCESS && (ref.gpu->model->arch < GS_ARCH_HOPPER || !sim_nvlink_count(ref.gpu->model)))
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) {
        memset(info, 0, sizeof(*info));
        info->status = NVML_SUCCESS;
        info->cliqueId = 0;
        info->state = 3;
    }
    READ_END(r);
}

/* No display is attached to a data-center board, and the driver model is a Windows setting
 * (NOT_SUPPORTED on Linux, as the driver answers). */
static nvmlReturn_t display_call(const char *fn, nvmlDevice_t d, nvmlEnableState_t *state) {
    nvmlReturn_t ret_ = lock_state(false, fn);
    if (ret_ != NVML_SUCCESS)
        return ret_;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), state);
    if (r == NVML_SUCCESS)
        *state = 0; /* NVML_FEATURE_DISABLED */
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t d, nvmlEnableState_t *active) {
    return display_call(__func__, d, active);
}
EXPORT nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t d, nvmlEnableState_t *mode) {
    return display_call(__func__, d, mode);
}

EXPORT nvmlReturn_t nvmlDeviceGetDriverModel_v2(nvmlDevice_t d, int *current, int *pending) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), current);
    (void)pending;
    READ_END(r == NVML_SUCCESS ? NVML_ERROR_NOT_SUPPORTED : r);
}
EXPORT nvmlReturn_t nvmlDeviceGetDriverModel(nvmlDevice_t d, int *current, int *pending) {
    return nvmlDeviceGetDriverModel_v2(d, current, pending);
}
