/* affinity.c: where the simulated GPUs are for the host: handles by PCI bus ID, NUMA node and CPU
 * affinity (pci.c's layout; the simulated host has 64 CPUs, 0-31 on NUMA node 0 and 32-63 on node
 * 1), the GPUs near a GPU or a CPU, peer-to-peer status, and the names of processes. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "simlib.h"
#include "util/util.h"

#define SIM_HOST_CPUS 64
#define SIM_CPUS_PER_NODE 32

/* "DOMAIN:BUS:DEVICE.FUNCTION" (domain optional, hex, any case), as NVML accepts it. */
static bool parse_bus_id(const char *s, unsigned *domain, unsigned *bus, unsigned *dev, unsigned *fn) {
    for (const char *p = s; *p; p++) /* sscanf's %x would also take signs, spaces and 0x prefixes */
        if (!isxdigit((unsigned char)*p) && *p != ':' && *p != '.')
            return false;
    unsigned v[4] = { 0 };
    int n = 0;
    bool ok = (sscanf(s, "%x:%x:%x.%x%n", &v[0], &v[1], &v[2], &v[3], &n) == 4 && s[n] == '\0') ||
              (sscanf(s, "%x:%x.%x%n", &v[1], &v[2], &v[3], &n) == 3 && s[n] == '\0' && (v[0] = 0, true));
    if (!ok || v[1] > 0xff || v[2] > 0x1f || v[3] > 7)
        return false;
    *domain = v[0], *bus = v[1], *dev = v[2], *fn = v[3];
    return true;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *busId, nvmlDevice_t *device) {
    READ_BEGIN;
    unsigned domain, bus, dev, fn;
    if (!busId || !device || strnlen(busId, 33) > 32 || !parse_bus_id(busId, &domain, &bus, &dev, &fn))
        READ_END(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned i = 0; i < sim_st->n_gpus; i++) {
        unsigned di, bi;
        sim_pci_location(i, &di, &bi);
        if (di == domain && bi == bus && dev == 0 && fn == 0) {
            if (sim_st->gpus[i].lost)
                READ_END(NVML_ERROR_GPU_IS_LOST);
            *device = gpu_handle(i);
            READ_END(NVML_SUCCESS);
        }
    }
    READ_END(NVML_ERROR_NOT_FOUND);
}

EXPORT nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t d, unsigned int *node) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), node);
    if (r == NVML_SUCCESS)
        *node = (unsigned)sim_numa_node(ref.index);
    READ_END(r);
}

/* The CPUs of the GPU's NUMA node, as a bit mask in cpuSetSize unsigned longs. */
EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t d, unsigned int cpuSetSize, unsigned long *cpuSet) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), cpuSet);
    if (r == NVML_SUCCESS && cpuSetSize == 0)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        memset(cpuSet, 0, cpuSetSize * sizeof(*cpuSet));
        unsigned first = (unsigned)sim_numa_node(ref.index) * SIM_CPUS_PER_NODE;
        const unsigned bits = 8 * sizeof(unsigned long);
        for (unsigned c = first; c < first + SIM_CPUS_PER_NODE && c / bits < cpuSetSize; c++)
            cpuSet[c / bits] |= 1UL << (c % bits);
    }
    READ_END(r);
}

/* A list of GPU handles: *count in, the buffer's size (ignored for a NULL buffer); out, the GPUs there
 * are. `want(i)` chooses them. */
static nvmlReturn_t gpu_list(bool (*want)(unsigned i, const void *arg), const void *arg, unsigned *count,
                             nvmlDevice_t *out) {
    unsigned n = 0;
    for (unsigned i = 0; i < sim_st->n_gpus; i++)
        n += want(i, arg);
    if (!out) {
        *count = n;
        return NVML_SUCCESS;
    }
    if (*count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned k = 0;
    for (unsigned i = 0; i < sim_st->n_gpus; i++)
        if (want(i, arg))
            out[k++] = gpu_handle(i);
    *count = n;
    return NVML_SUCCESS;
}

static bool on_cpu_node(unsigned i, const void *arg) {
    return (unsigned)sim_numa_node(i) == *(const unsigned *)arg / SIM_CPUS_PER_NODE && !sim_st->gpus[i].lost;
}

EXPORT nvmlReturn_t nvmlSystemGetTopologyGpuSet(unsigned int cpuNumber, unsigned int *count,
                                                nvmlDevice_t *deviceArray) {
    READ_BEGIN;
    if (!count || cpuNumber >= SIM_HOST_CPUS)
        READ_END(NVML_ERROR_INVALID_ARGUMENT);
    READ_END(gpu_list(on_cpu_node, &cpuNumber, count, deviceArray));
}

struct near_arg {
    unsigned index;
    nvmlGpuTopologyLevel_t level;
};

static bool is_near(unsigned i, const void *arg) {
    const struct near_arg *a = arg;
    return i != a->index && !sim_st->gpus[i].lost && sim_topology_level(a->index, i) <= a->level;
}

/* The other GPUs whose common ancestor with the device is at `level` or closer. */
EXPORT nvmlReturn_t nvmlDeviceGetTopologyNearestGpus(nvmlDevice_t d, nvmlGpuTopologyLevel_t level, unsigned int *count,
                                                    nvmlDevice_t *deviceArray) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), count);
    if (r == NVML_SUCCESS && (level < NVML_TOPOLOGY_INTERNAL || level > NVML_TOPOLOGY_SYSTEM))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        READ_END(r);
    struct near_arg a = { ref.index, level };
    READ_END(gpu_list(is_near, &a, count, deviceArray));
}

/* nvmlGpuP2PStatus_t and nvmlGpuP2PCapsIndex_t values. */
#define P2P_OK 0
#define P2P_IOH_TOPOLOGY_NOT_SUPPORTED 3
#define P2P_NOT_SUPPORTED 5
#define P2P_CAPS_NVLINK 2
#define P2P_CAPS_ATOMICS 3
#define P2P_CAPS_COUNT 5

/* SXM boards: every kind of peer access over NVLink within the board. PCIe boards: reads, writes
 * and PCI peer access between GPUs on one NUMA node, not atomics or NVLink; across NUMA nodes or
 * boards the host bridge does not forward peer traffic. */
EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t d1, nvmlDevice_t d2, unsigned int index, int *status) {
    READ_BEGIN;
    struct dev_ref a, b;
    nvmlReturn_t r = resolve_gpu(d1, &a);
    if (r == NVML_SUCCESS)
        r = with_out(resolve_gpu(d2, &b), status);
    if (r == NVML_SUCCESS && (index >= P2P_CAPS_COUNT || a.index == b.index))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        READ_END(r);
    nvmlGpuTopologyLevel_t level = sim_topology_level(a.index, b.index);
    bool nvlink = sim_nvlink_count(a.gpu->model) && a.gpu->model == b.gpu->model && level < NVML_TOPOLOGY_SYSTEM;
    if (!nvlink && level == NVML_TOPOLOGY_SYSTEM)
        *status = P2P_IOH_TOPOLOGY_NOT_SUPPORTED;
    else if (!nvlink && (index == P2P_CAPS_NVLINK || index == P2P_CAPS_ATOMICS))
        *status = P2P_NOT_SUPPORTED;
    else
        *status = P2P_OK;
    READ_END(NVML_SUCCESS);
}

/* A simulated process's name (`sim process add --name`), else the host process's (they are host
 * processes), as /proc/PID/comm gives it; NOT_FOUND for neither. */
EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length) {
    READ_BEGIN;
    if (!name || length == 0 || pid == 0)
        READ_END(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned i = 0; i < sim_st->n_gpus; i++)
        for (unsigned k = 0; k < sim_st->gpus[i].n_procs; k++)
            if (sim_st->gpus[i].procs[k].pid == pid && sim_st->gpus[i].procs[k].name[0])
                READ_END(sim_copy_string(name, length, sim_st->gpus[i].procs[k].name));
    char path[64];
    _cleanup_free_ char *comm = NULL;
    snprintf(path, sizeof(path), "/proc/%u/comm", pid);
    if (gs_read_file(path, 4096, &comm, NULL) < 0)
        READ_END(NVML_ERROR_NOT_FOUND);
    comm[strcspn(comm, "\n")] = '\0';
    READ_END(sim_copy_string(name, length, comm));
}
