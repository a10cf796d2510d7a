/* device.c: NVML's system and device queries on the simulated node (identity, PCI, memory,
 * utilisation, compute mode, temperature, power) and the processes running on a GPU. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "simlib.h"
#include "util/util.h"

/* ---- system and device queries -------------------------------------------------------------- */

static nvmlReturn_t copy_string(char *dst, unsigned len, const char *src) {
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}
nvmlReturn_t sim_copy_string(char *dst, unsigned len, const char *src) { return copy_string(dst, len, src); }

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    READ_BEGIN;
    READ_END(copy_string(version, length, sim_st->driver_version));
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    READ_BEGIN;
    char buf[64];
    snprintf(buf, sizeof(buf), "%d.%s", sim_st->cuda_major, sim_st->driver_version);
    READ_END(copy_string(version, length, buf));
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) {
    READ_BEGIN;
    if (!v)
        READ_END(NVML_ERROR_INVALID_ARGUMENT);
    *v = sim_st->cuda_major * 1000 + sim_st->cuda_minor * 10;
    READ_END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { return nvmlSystemGetCudaDriverVersion_v2(v); }

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    READ_BEGIN;
    if (!count)
        READ_END(NVML_ERROR_INVALID_ARGUMENT);
    *count = sim_st->n_gpus;
    READ_END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    READ_BEGIN;
    if (!device || index >= sim_st->n_gpus)
        READ_END(NVML_ERROR_INVALID_ARGUMENT);
    if (sim_st->gpus[index].lost)
        READ_END(NVML_ERROR_GPU_IS_LOST);
    *device = gpu_handle(index);
    READ_END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    READ_BEGIN;
    if (!uuid || !device)
        READ_END(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned i = 0; i < sim_st->n_gpus; i++) {
        struct sim_gpu *g = &sim_st->gpus[i];
        char u[SIM_UUID_LEN];
        sim_gpu_uuid(g->model, i, u, sizeof(u));
        if (strcmp(u, uuid) == 0) {
            if (g->lost)
                READ_END(NVML_ERROR_GPU_IS_LOST);
            *device = gpu_handle(i);
            READ_END(NVML_SUCCESS);
        }
        if (!g->mig_current)
            continue;
        for (unsigned gi = 0; gi < SIM_MAX_GI; gi++) {
            for (unsigned ci = 0; ci < SIM_MAX_CI; ci++) {
                if (!g->gis[gi].used || !g->gis[gi].cis[ci].used)
                    continue;
                char legacy[SIM_UUID_LEN + 32];
                snprintf(legacy, sizeof(legacy), "MIG-%s/%u/%u", u, gi, ci);
                if (strcmp(g->gis[gi].cis[ci].uuid, uuid) == 0 || strcmp(legacy, uuid) == 0) {
                    *device = mig_handle(i, gi, ci);
                    READ_END(NVML_SUCCESS);
                }
            }
        }
    }
    READ_END(NVML_ERROR_NOT_FOUND);
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), index);
    if (r == NVML_SUCCESS)
        *index = ref.index;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_device(d, &ref);
    if (r == NVML_SUCCESS) {
        char u[SIM_UUID_LEN];
        if (ref.ci)
            r = copy_string(uuid, length, ref.ci->uuid);
        else {
            sim_gpu_uuid(ref.gpu->model, ref.index, u, sizeof(u));
            r = copy_string(uuid, length, u);
        }
    }
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_device(d, &ref);
    if (r == NVML_SUCCESS) {
        if (ref.ci) {
            /* MIG devices report "<GPU name> MIG <profile>", as the driver does. */
            const struct gs_profile_spec *p = gs_model_profile_by_id(ref.gpu->model, ref.gi->profile_id);
            char buf[160];
            snprintf(buf, sizeof(buf), "%s MIG %s", ref.gpu->model->nvml_name, p ? p->name : "?");
            r = copy_string(name, length, buf);
        } else {
            r = copy_string(name, length, ref.gpu->model->nvml_name);
        }
    }
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_device(d, &ref);
    if (r == NVML_SUCCESS && ref.ci)
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS && !minor)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *minor = ref.index;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_device(d, &ref), pci);
    if (r == NVML_SUCCESS) {
        unsigned domain, bus;
        sim_pci_location(ref.index, &domain, &bus);
        sim_fill_pci(domain, bus, ref.gpu->model->pci_device_id, pci);
    }
    READ_END(r);
}

unsigned long long used_bytes(const struct sim_gpu *g, int gi, int ci) {
    unsigned long long sum = 0;
    for (unsigned i = 0; i < g->n_procs; i++)
        if (gi < 0 || (g->procs[i].gi == gi && (ci < 0 || g->procs[i].ci == ci)))
            sum += g->procs[i].mem;
    return sum;
}

static void memory_of(const struct dev_ref *ref, unsigned long long *total, unsigned long long *used) {
    if (ref->ci) {
        const struct gs_profile_spec *p = gs_model_profile_by_id(ref->gpu->model, ref->gi->profile_id);
        *total = (p ? p->mem_mib : 0) << 20;
        *used = used_bytes(ref->gpu, (int)ref->gi_id, -1);
    } else {
        *total = ref->gpu->model->mem_mib << 20;
        *used = used_bytes(ref->gpu, -1, -1);
    }
    if (*used > *total)
        *used = *total;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *mem) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_device(d, &ref), mem);
    if (r == NVML_SUCCESS) {
        memory_of(&ref, &mem->total, &mem->used);
        mem->free = mem->total - mem->used;
    }
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *mem) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_device(d, &ref), mem);
    if (r == NVML_SUCCESS && mem->version != nvmlMemory_v2)
        r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (r == NVML_SUCCESS) {
        memory_of(&ref, &mem->total, &mem->used);
        mem->reserved = 0;
        mem->free = mem->total - mem->used;
    }
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t d, unsigned int *arch) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_device(d, &ref), arch);
    if (r == NVML_SUCCESS)
        *arch = (unsigned)ref.gpu->model->arch;
    READ_END(r);
}

/* nvmlBrandType_t: every model of the catalogue is a data-center board, which drivers since R460
 * report as NVML_BRAND_NVIDIA ("Product Brand : NVIDIA" in nvidia-smi -q); MIG devices as their GPU.
 * NVIDIA's DRA driver puts it in its devices' attributes (go-nvlib's GetBrandAsString). */
#define SIM_BRAND_NVIDIA 14

EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t d, int *brand) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_device(d, &ref), brand);
    if (r == NVML_SUCCESS)
        *brand = SIM_BRAND_NVIDIA;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_device(d, &ref);
    if (r == NVML_SUCCESS && (!major || !minor))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        *major = ref.gpu->model->cc_major;
        *minor = ref.gpu->model->cc_minor;
    }
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_device(d, &ref);
    if (r == NVML_SUCCESS && (ref.ci || ref.gpu->mig_current))
        r = NVML_ERROR_NOT_SUPPORTED; /* as the driver: no utilization for MIG devices or their parent */
    if (r == NVML_SUCCESS && !u)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        /* The last complete sampling period (util.c): what the processes ran, at most all of it. */
        unsigned long long end = sim_now_us() / SIM_UTIL_PERIOD_US * SIM_UTIL_PERIOD_US;
        unsigned sum = 0;
        for (unsigned i = 0; i < ref.gpu->n_procs; i++)
            sum += sim_proc_util(&ref.gpu->procs[i], ref.gpu->n_procs, end);
        bool scheduled = false;
        for (unsigned i = 0; i < ref.gpu->n_procs && !scheduled; i++)
            scheduled = ref.gpu->procs[i].n_util != 0;
        u->gpu = !scheduled ? (ref.gpu->n_procs ? 100 : 0) : sum > 100 ? 100 : sum;
        unsigned long long total, used;
        memory_of(&ref, &total, &used);
        u->memory = total ? (unsigned)(used * 100 / total) : 0;
    }
    READ_END(r);
}

/* Compute mode: a setting of the physical GPU, kept in the state (the real call needs root). */
EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t d, unsigned int *mode) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), mode);
    if (r == NVML_SUCCESS)
        *mode = ref.gpu->compute_mode;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t d, unsigned int mode) {
    WRITE_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_gpu(d, &ref);
    if (r == NVML_SUCCESS && mode > NVML_COMPUTEMODE_EXCLUSIVE_PROCESS)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && mode == NVML_COMPUTEMODE_EXCLUSIVE_THREAD)
        r = NVML_ERROR_NOT_SUPPORTED; /* removed from the driver long ago */
    if (r == NVML_SUCCESS)
        ref.gpu->compute_mode = mode;
    WRITE_END(r);
}

/* Temperature and power are synthetic (no thermal model): a GPU with processes is warm and draws
 * more (power.c: within the board's power limit). MIG device handles have neither, as with the
 * driver. */
EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, unsigned int sensor, unsigned int *temp) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_gpu(d, &ref);
    if (r == NVML_SUCCESS && (sensor != NVML_TEMPERATURE_GPU || !temp))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *temp = ref.gpu->n_procs ? 65 : 35;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *power) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), power);
    if (r == NVML_SUCCESS)
        *power = sim_power_mw(ref.gpu);
    READ_END(r);
}

/* Processes: GPU handle = every process on the GPU; MIG handle = those on its GPU instance.
 * Simulated processes are compute processes: the graphics and MPS lists are empty (`none`). */
static nvmlReturn_t list_processes(const char *fn, nvmlDevice_t d, unsigned int *count, void *infos, size_t stride,
                                   bool with_ids, bool none) {
    nvmlReturn_t ret_ = lock_state(false, fn);
    if (ret_ != NVML_SUCCESS)
        return ret_;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_device(d, &ref), count);
    if (r != NVML_SUCCESS)
        READ_END(r);
    unsigned n = 0;
    for (unsigned i = 0; i < ref.gpu->n_procs && !none; i++)
        if (!ref.ci || ref.gpu->procs[i].gi == (int)ref.gi_id)
            n++;
    if (n > 0 && (!infos || *count < n)) {
        *count = n;
        READ_END(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    unsigned k = 0;
    for (unsigned i = 0; i < ref.gpu->n_procs && n; i++) {
        const struct sim_proc *p = &ref.gpu->procs[i];
        if (ref.ci && p->gi != (int)ref.gi_id)
            continue;
        char *slot = (char *)infos + stride * k++;
        if (with_ids) {
            nvmlProcessInfo_t pi = { p->pid, p->mem, p->gi < 0 ? NO_GI : (unsigned)p->gi,
                                     p->ci < 0 ? NO_GI : (unsigned)p->ci };
            memcpy(slot, &pi, sizeof(pi));
        } else {
            nvmlProcessInfo_v1_t pi = { p->pid, p->mem };
            memcpy(slot, &pi, sizeof(pi));
        }
    }
    *count = n;
    READ_END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                           nvmlProcessInfo_t *infos) {
    return list_processes(__func__, d, count, infos, sizeof(nvmlProcessInfo_t), true, false);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *count,
                                                           nvmlProcessInfo_t *infos) {
    return list_processes(__func__, d, count, infos, sizeof(nvmlProcessInfo_t), true, false);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *count,
                                                        nvmlProcessInfo_v1_t *infos) {
    return list_processes(__func__, d, count, infos, sizeof(nvmlProcessInfo_v1_t), false, false);
}
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                            nvmlProcessInfo_t *infos) {
    return list_processes(__func__, d, count, infos, sizeof(nvmlProcessInfo_t), true, true);
}
EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                              nvmlProcessInfo_t *infos) {
    return list_processes(__func__, d, count, infos, sizeof(nvmlProcessInfo_t), true, true);
}
