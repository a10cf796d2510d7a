/* nvml.c: the NVML backend. Loads an NVML library with dlopen, resolves the functions gpuslice
 * uses (newest version first, with fallbacks), and reads the node into a plain inventory.
 * Whether the library is the driver's or the simulator's makes no difference here. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define GS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GS_ASAN 1
#endif
#endif
#ifdef GS_ASAN
#include <sanitizer/asan_interface.h>
#endif

#include "gpu/gpu.h"
#include "util/util.h"

struct gpu_node {
    void *dl;
    char lib[256];
    struct nvml_api api;
    nvmlDevice_t devices[GS_MAX_GPUS];
    unsigned n_devices;
    nvmlReturn_t last;
    char error[512];
    atomic_uint waiting; /* threads inside nvmlEventSetWait (gpu_events_wait_unless) */
    struct profile_table *profiles[GS_MAX_GPUS]; /* read_profiles' tables, NULL until read */
};

/* A GPU's GPU-instance profiles and their placements as NVML gave them: the board's, the same at
 * every read for one GPU (its UUID) in one MIG mode. Read once, they are copied at each inventory;
 * only the remaining capacity, which changes with the instances, is asked every time. */
struct profile_table {
    char uuid[GS_UUID_LEN];
    unsigned mig_current;
    unsigned n_profiles, mig_mem_slices;
    struct gs_gi_profile profiles[GS_MAX_PROFILES];
};

struct gpu_events {
    struct gpu_node *node;
    nvmlEventSet_t set;
};

/* Resolves the first of several names (NULL-terminated list). */
static void *resolve(void *dl, const char *const *names) {
    for (; *names; names++) {
        void *p = dlsym(dl, *names);
        if (p)
            return p;
    }
    return NULL;
}

#define NAMES(...) ((const char *const[]){ __VA_ARGS__, NULL })

struct symbol {
    size_t offset;
    const char *const *names;
    bool required;
};

#define SYM(field, req, ...) { offsetof(struct nvml_api, field), NAMES(__VA_ARGS__), req }

static const struct symbol symbols[] = {
    SYM(Init, true, "nvmlInit_v2", "nvmlInit"),
    SYM(Shutdown, true, "nvmlShutdown"),
    SYM(ErrorString, true, "nvmlErrorString"),
    SYM(SystemGetDriverVersion, false, "nvmlSystemGetDriverVersion"),
    SYM(SystemGetCudaDriverVersion, false, "nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"),
    SYM(DeviceGetCount, true, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"),
    SYM(DeviceGetHandleByIndex, true, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"),
    SYM(DeviceGetHandleByUUID, false, "nvmlDeviceGetHandleByUUID"),
    SYM(DeviceGetUUID, true, "nvmlDeviceGetUUID"),
    SYM(DeviceGetName, true, "nvmlDeviceGetName"),
    SYM(DeviceGetMinorNumber, false, "nvmlDeviceGetMinorNumber"),
    SYM(DeviceGetPciInfo, false, "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2"),
    SYM(DeviceGetMemoryInfo, true, "nvmlDeviceGetMemoryInfo"),
    SYM(DeviceGetArchitecture, false, "nvmlDeviceGetArchitecture"),
    SYM(DeviceGetCudaComputeCapability, false, "nvmlDeviceGetCudaComputeCapability"),
    SYM(DeviceGetUtilizationRates, false, "nvmlDeviceGetUtilizationRates"),
    SYM(DeviceGetComputeMode, false, "nvmlDeviceGetComputeMode"),
    SYM(DeviceSetComputeMode, false, "nvmlDeviceSetComputeMode"),
    SYM(DeviceGetTemperature, false, "nvmlDeviceGetTemperature"),
    SYM(DeviceGetPowerUsage, false, "nvmlDeviceGetPowerUsage"),
    SYM(DeviceGetComputeRunningProcesses, false, "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetComputeRunningProcesses_v2"),
    SYM(DeviceGetProcessUtilization, false, "nvmlDeviceGetProcessUtilization"),
    SYM(GpmQueryDeviceSupport, false, "nvmlGpmQueryDeviceSupport"),
    SYM(GpmSampleAlloc, false, "nvmlGpmSampleAlloc"),
    SYM(GpmSampleFree, false, "nvmlGpmSampleFree"),
    SYM(GpmMigSampleGet, false, "nvmlGpmMigSampleGet"),
    SYM(GpmMetricsGet, false, "nvmlGpmMetricsGet"),
    SYM(DeviceGetMigMode, false, "nvmlDeviceGetMigMode"),
    SYM(DeviceSetMigMode, false, "nvmlDeviceSetMigMode"),
    SYM(DeviceGetGpuInstanceProfileInfo, false, "nvmlDeviceGetGpuInstanceProfileInfo"),
    SYM(DeviceGetGpuInstanceProfileInfoV, false, "nvmlDeviceGetGpuInstanceProfileInfoV"),
    SYM(DeviceGetGpuInstancePossiblePlacements, false, "nvmlDeviceGetGpuInstancePossiblePlacements_v2"),
    SYM(DeviceGetGpuInstanceRemainingCapacity, false, "nvmlDeviceGetGpuInstanceRemainingCapacity"),
    SYM(DeviceCreateGpuInstance, false, "nvmlDeviceCreateGpuInstance"),
    SYM(DeviceCreateGpuInstanceWithPlacement, false, "nvmlDeviceCreateGpuInstanceWithPlacement"),
    SYM(DeviceGetGpuInstances, false, "nvmlDeviceGetGpuInstances"),
    SYM(DeviceGetGpuInstanceById, false, "nvmlDeviceGetGpuInstanceById"),
    SYM(GpuInstanceGetInfo, false, "nvmlGpuInstanceGetInfo"),
    SYM(GpuInstanceDestroy, false, "nvmlGpuInstanceDestroy"),
    SYM(GpuInstanceGetComputeInstanceProfileInfo, false, "nvmlGpuInstanceGetComputeInstanceProfileInfo"),
    SYM(GpuInstanceCreateComputeInstance, false, "nvmlGpuInstanceCreateComputeInstance"),
    SYM(GpuInstanceGetComputeInstances, false, "nvmlGpuInstanceGetComputeInstances"),
    SYM(GpuInstanceGetComputeInstanceById, false, "nvmlGpuInstanceGetComputeInstanceById"),
    SYM(ComputeInstanceGetInfo, false, "nvmlComputeInstanceGetInfo_v2", "nvmlComputeInstanceGetInfo"),
    SYM(ComputeInstanceDestroy, false, "nvmlComputeInstanceDestroy"),
    SYM(DeviceGetMaxMigDeviceCount, false, "nvmlDeviceGetMaxMigDeviceCount"),
    SYM(DeviceGetMigDeviceHandleByIndex, false, "nvmlDeviceGetMigDeviceHandleByIndex"),
    SYM(DeviceIsMigDeviceHandle, false, "nvmlDeviceIsMigDeviceHandle"),
    SYM(DeviceGetDeviceHandleFromMigDeviceHandle, false, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle"),
    SYM(DeviceGetGpuInstanceId, false, "nvmlDeviceGetGpuInstanceId"),
    SYM(DeviceGetComputeInstanceId, false, "nvmlDeviceGetComputeInstanceId"),
    SYM(EventSetCreate, false, "nvmlEventSetCreate"),
    SYM(DeviceRegisterEvents, false, "nvmlDeviceRegisterEvents"),
    SYM(DeviceGetSupportedEventTypes, false, "nvmlDeviceGetSupportedEventTypes"),
    SYM(EventSetWait, false, "nvmlEventSetWait_v2", "nvmlEventSetWait"),
    SYM(EventSetFree, false, "nvmlEventSetFree"),
};

int gpu_errno(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return 0;
    case NVML_ERROR_INVALID_ARGUMENT: return -EINVAL;
    case NVML_ERROR_NOT_SUPPORTED: return -EOPNOTSUPP;
    case NVML_ERROR_NO_PERMISSION: return -EPERM;
    case NVML_ERROR_NOT_FOUND: return -ENOENT;
    case NVML_ERROR_INSUFFICIENT_SIZE: return -ENOBUFS;
    case NVML_ERROR_TIMEOUT: return -ETIMEDOUT;
    case NVML_ERROR_GPU_IS_LOST: return -ENODEV;
    case NVML_ERROR_RESET_REQUIRED: return -EAGAIN;
    case NVML_ERROR_IN_USE: return -EBUSY;
    case NVML_ERROR_MEMORY: return -ENOMEM;
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return -ENOSPC;
    case NVML_ERROR_UNINITIALIZED:
    case NVML_ERROR_DRIVER_NOT_LOADED: return -ENXIO;
    case NVML_ERROR_FUNCTION_NOT_FOUND: return -ENOSYS;
    default: return -EIO;
    }
}

/* Records a failed call with its context and returns the mapped errno. */
static int fail(struct gpu_node *n, nvmlReturn_t r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct gpu_node *n, nvmlReturn_t r, const char *fmt, ...) {
    char ctx[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof(ctx), fmt, ap);
    va_end(ap);
    n->last = r;
    snprintf(n->error, sizeof(n->error), "%s: %s", ctx, n->api.ErrorString(r));
    return gpu_errno(r);
}

static int missing(struct gpu_node *n, const char *fn) {
    n->last = NVML_ERROR_FUNCTION_NOT_FOUND;
    snprintf(n->error, sizeof(n->error), "%s: not provided by %s", fn, n->lib);
    return -EOPNOTSUPP;
}

int gpu_node_open(const char *lib, struct gpu_node **out, char *err, size_t errlen) {
    if (!lib)
        lib = GS_NVML_LIB;
    struct gpu_node *n = calloc(1, sizeof(*n));
    if (!n)
        return -ENOMEM;
    gs_strlcpy(n->lib, lib, sizeof(n->lib));
    n->dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!n->dl) {
        snprintf(err, errlen, "NVIDIA driver not found: could not load %s: %s", lib, dlerror());
        free(n);
        return -ENOENT;
    }
    for (size_t i = 0; i < GS_ARRAY_SIZE(symbols); i++) {
        void *p = resolve(n->dl, symbols[i].names);
        if (!p && symbols[i].required) {
            snprintf(err, errlen, "%s does not export %s: not a usable NVML library", lib, symbols[i].names[0]);
            dlclose(n->dl);
            free(n);
            return -ENOSYS;
        }
        memcpy((char *)&n->api + symbols[i].offset, &p, sizeof(p));
    }
    if (!n->api.DeviceGetComputeRunningProcesses) {
        void *p = dlsym(n->dl, "nvmlDeviceGetComputeRunningProcesses");
        memcpy(&n->api.DeviceGetComputeRunningProcesses, &p, sizeof(p));
        n->api.processes_v1 = p != NULL;
    }
    n->api.profile_info_v1 = n->api.DeviceGetGpuInstanceProfileInfoV == NULL;
    /* libnvidia-ml starts a thread in nvmlInit (driver 580: a process's thread count goes from 1 to
     * 2). Created with every signal blocked, it never takes one meant for the program: on an H200
     * it took the SIGTERM the agent reads through a signalfd, and the agent died of it. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    nvmlReturn_t r = n->api.Init();
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != NVML_SUCCESS) {
        snprintf(err, errlen, "nvmlInit failed (%s): %s", lib, n->api.ErrorString(r));
        dlclose(n->dl);
        free(n);
        return -EIO;
    }
    *out = n;
    return 0;
}

void gpu_node_close(struct gpu_node *n) {
    if (!n)
        return;
    /* A thread still inside nvmlEventSetWait, which nothing interrupts: the process is ending, and
     * the library, its handles and this node stay for the last moments of that thread's wait. */
    if (atomic_load(&n->waiting))
        return;
    n->api.Shutdown();
    dlclose(n->dl);
    for (size_t i = 0; i < GS_ARRAY_SIZE(n->profiles); i++)
        free(n->profiles[i]);
    free(n);
}

const struct nvml_api *gpu_node_api(const struct gpu_node *n) { return &n->api; }
const char *gpu_node_lib(const struct gpu_node *n) { return n->lib; }
void *gpu_node_symbol(const struct gpu_node *n, const char *name) { return dlsym(n->dl, name); }
const char *gpu_node_error(const struct gpu_node *n) { return n->error; }
nvmlReturn_t gpu_node_last_nvml(const struct gpu_node *n) { return n->last; }

/* Looks up the handle of GPU idx; a lost GPU fails here with GPU_IS_LOST. */
static int device(struct gpu_node *n, unsigned idx, nvmlDevice_t *d) {
    nvmlReturn_t r = n->api.DeviceGetHandleByIndex(idx, d);
    if (r != NVML_SUCCESS)
        return fail(n, r, "nvmlDeviceGetHandleByIndex(%u)", idx);
    return 0;
}

/* ---- inventory ------------------------------------------------------------------------------- */

/* The remaining capacity of every profile of g, now. */
static void read_remaining(struct gpu_node *n, nvmlDevice_t d, struct gs_gpu *g) {
    for (unsigned p = 0; p < g->n_profiles && n->api.DeviceGetGpuInstanceRemainingCapacity; p++)
        if (n->api.DeviceGetGpuInstanceRemainingCapacity(d, g->profiles[p].id, &g->profiles[p].remaining) != NVML_SUCCESS)
            g->profiles[p].remaining = 0;
}

/* g's profiles from the table read before for this GPU in this MIG mode; false when there is none. */
static bool profiles_from_table(struct gpu_node *n, nvmlDevice_t d, struct gs_gpu *g) {
    const struct profile_table *t = g->index < GS_MAX_GPUS ? n->profiles[g->index] : NULL;
    if (!t || strcmp(t->uuid, g->uuid) != 0 || t->mig_current != g->mig_current)
        return false;
    g->n_profiles = t->n_profiles;
    g->mig_mem_slices = t->mig_mem_slices;
    memcpy(g->profiles, t->profiles, t->n_profiles * sizeof(g->profiles[0]));
    read_remaining(n, d, g);
    return true;
}

/* Keeps g's profiles as the table of this GPU in this MIG mode (complete reads only). */
static void profiles_to_table(struct gpu_node *n, const struct gs_gpu *g) {
    if (g->index >= GS_MAX_GPUS)
        return;
    struct profile_table *t = n->profiles[g->index];
    if (!t && !(t = n->profiles[g->index] = malloc(sizeof(*t))))
        return;
    gs_strlcpy(t->uuid, g->uuid, sizeof(t->uuid));
    t->mig_current = g->mig_current;
    t->n_profiles = g->n_profiles;
    t->mig_mem_slices = g->mig_mem_slices;
    memcpy(t->profiles, g->profiles, g->n_profiles * sizeof(g->profiles[0]));
}

static void read_profiles(struct gpu_node *n, nvmlDevice_t d, struct gs_gpu *g) {
    const struct nvml_api *a = &n->api;
    if (!a->DeviceGetGpuInstanceProfileInfo && !a->DeviceGetGpuInstanceProfileInfoV)
        return;
    if (profiles_from_table(n, d, g))
        return;
    bool complete = true; /* every answer a profile, NOT_SUPPORTED, or the end of the list */
    /* Enumerate profile indices forward-compatibly: 0, 1, ... until INVALID_ARGUMENT. */
    for (unsigned p = 0; p < 64 && g->n_profiles < GS_MAX_PROFILES; p++) {
        struct gs_gi_profile *gp = &g->profiles[g->n_profiles];
        memset(gp, 0, sizeof(*gp));
        nvmlReturn_t r;
        if (a->DeviceGetGpuInstanceProfileInfoV) {
            nvmlGpuInstanceProfileInfo_v2_t info = { .version = nvmlGpuInstanceProfileInfo_v2 };
            r = a->DeviceGetGpuInstanceProfileInfoV(d, p, &info);
            if (r == NVML_SUCCESS) {
                gp->id = info.id;
                gp->slices = info.sliceCount;
                gp->max_instances = info.instanceCount;
                gp->mem_mib = info.memorySizeMB;
                gp->sm = info.multiprocessorCount;
                const char *nm = strncmp(info.name, "MIG ", 4) == 0 ? info.name + 4 : info.name;
                gs_strlcpy(gp->name, nm, sizeof(gp->name));
            }
        } else {
            nvmlGpuInstanceProfileInfo_t info;
            r = a->DeviceGetGpuInstanceProfileInfo(d, p, &info);
            if (r == NVML_SUCCESS) {
                gp->id = info.id;
                gp->slices = info.sliceCount;
                gp->max_instances = info.instanceCount;
                gp->mem_mib = info.memorySizeMB;
                gp->sm = info.multiprocessorCount;
            }
        }
        if (r == NVML_ERROR_INVALID_ARGUMENT)
            break;
        complete &= r == NVML_SUCCESS || r == NVML_ERROR_NOT_SUPPORTED;
        if (r != NVML_SUCCESS)
            continue;
        gp->nvml_index = p;
        if (!gp->name[0])
            gs_mig_profile_name(gp->slices, gp->mem_mib, g->mem_total >> 20, p, gp->name, sizeof(gp->name));
        if (a->DeviceGetGpuInstancePossiblePlacements) {
            nvmlGpuInstancePlacement_t pl[8];
            unsigned cnt = GS_ARRAY_SIZE(pl);
            nvmlReturn_t pr = a->DeviceGetGpuInstancePossiblePlacements(d, gp->id, pl, &cnt);
            complete &= pr == NVML_SUCCESS || pr == NVML_ERROR_NOT_SUPPORTED;
            if (pr == NVML_SUCCESS) {
                gp->n_starts = cnt;
                for (unsigned i = 0; i < cnt; i++) {
                    gp->starts[i] = pl[i].start;
                    gp->placement_size = pl[i].size;
                    if (pl[i].start + pl[i].size > g->mig_mem_slices)
                        g->mig_mem_slices = pl[i].start + pl[i].size;
                }
            }
        }
        g->n_profiles++;
    }
    if (complete)
        profiles_to_table(n, g);
    read_remaining(n, d, g);
}

static void read_mig_devices(struct gpu_node *n, nvmlDevice_t d, struct gs_gpu *g) {
    const struct nvml_api *a = &n->api;
    if (!a->DeviceGetGpuInstances || !a->GpuInstanceGetInfo)
        return;
    /* GPU instances per profile (including empty ones, which have no MIG device). */
    for (unsigned p = 0; p < g->n_profiles; p++) {
        /* Room for every instance the profile allows: there is none of it (one would take one). */
        if (g->profiles[p].max_instances && g->profiles[p].remaining == g->profiles[p].max_instances)
            continue;
        nvmlGpuInstance_t gis[GS_MAX_GIS];
        unsigned cnt = GS_ARRAY_SIZE(gis);
        if (a->DeviceGetGpuInstances(d, g->profiles[p].id, gis, &cnt) != NVML_SUCCESS)
            continue;
        for (unsigned i = 0; i < cnt && g->n_gis < GS_MAX_GIS; i++) {
            nvmlGpuInstanceInfo_t info;
            if (a->GpuInstanceGetInfo(gis[i], &info) != NVML_SUCCESS)
                continue;
            struct gs_gpu_instance *gi = &g->gis[g->n_gis++];
            *gi = (struct gs_gpu_instance){ info.id, info.profileId, info.placement.start, info.placement.size, 0 };
            if (!a->GpuInstanceGetComputeInstances || !a->ComputeInstanceGetInfo)
                continue;
            for (unsigned cp = 0; cp < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; cp++) {
                nvmlComputeInstance_t cis[8];
                unsigned cc = GS_ARRAY_SIZE(cis);
                if (a->GpuInstanceGetComputeInstances(gis[i], cp, cis, &cc) != NVML_SUCCESS)
                    continue;
                for (unsigned k = 0; k < cc && g->n_mig < GS_MAX_MIG_DEVICES; k++) {
                    nvmlComputeInstanceInfo_t ci;
                    if (a->ComputeInstanceGetInfo(cis[k], &ci) != NVML_SUCCESS)
                        continue;
                    gi->n_ci++;
                    struct gs_mig_device *m = &g->mig[g->n_mig++];
                    memset(m, 0, sizeof(*m));
                    m->gi_id = info.id;
                    m->ci_id = ci.id;
                    m->gi_profile_id = info.profileId;
                    m->ci_profile_id = ci.profileId;
                    m->start = info.placement.start;
                    m->size = info.placement.size;
                    m->ci_slices = ci.placement.size;
                    a->DeviceGetUUID(ci.device, m->uuid, sizeof(m->uuid));
                    const struct gs_gi_profile *gp = gs_gpu_profile_by_id(g, info.profileId);
                    if (gp) {
                        m->gi_slices = gp->slices;
                        m->mem_mib = gp->mem_mib;
                        m->sm = gp->slices ? gp->sm * m->ci_slices / gp->slices : 0;
                        if (m->ci_slices && m->ci_slices < gp->slices)
                            snprintf(m->profile, sizeof(m->profile), "%uc.%s", m->ci_slices, gp->name);
                        else
                            gs_strlcpy(m->profile, gp->name, sizeof(m->profile));
                    }
                }
            }
        }
    }
}

static void read_processes(struct gpu_node *n, nvmlDevice_t d, struct gs_gpu *g) {
    const struct nvml_api *a = &n->api;
    if (!a->DeviceGetComputeRunningProcesses)
        return;
    size_t stride = a->processes_v1 ? sizeof(nvmlProcessInfo_v1_t) : sizeof(nvmlProcessInfo_t);
    unsigned cap = 32;
    for (int attempt = 0; attempt < 4; attempt++) {
        _cleanup_free_ char *buf = calloc(cap, stride);
        if (!buf)
            return;
        unsigned cnt = cap;
        nvmlReturn_t r = a->DeviceGetComputeRunningProcesses(d, &cnt, (nvmlProcessInfo_t *)(void *)buf);
        if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
            cap = cnt + 8; /* processes may start between the two calls */
            continue;
        }
        if (r != NVML_SUCCESS)
            return;
        for (unsigned i = 0; i < cnt; i++) {
            if (g->n_procs == GS_MAX_PROCS) {
                g->procs_dropped++;
                continue;
            }
            struct gs_process *p = &g->procs[g->n_procs++];
            if (a->processes_v1) {
                nvmlProcessInfo_v1_t pi;
                memcpy(&pi, buf + i * stride, sizeof(pi));
                *p = (struct gs_process){ pi.pid, pi.usedGpuMemory, -1, -1 };
            } else {
                nvmlProcessInfo_t pi;
                memcpy(&pi, buf + i * stride, sizeof(pi));
                *p = (struct gs_process){ pi.pid, pi.usedGpuMemory,
                                          pi.gpuInstanceId == 0xFFFFFFFFu ? -1 : (int)pi.gpuInstanceId,
                                          pi.computeInstanceId == 0xFFFFFFFFu ? -1 : (int)pi.computeInstanceId };
            }
        }
        return;
    }
}

static void read_gpu(struct gpu_node *n, unsigned idx, struct gs_gpu *g) {
    const struct nvml_api *a = &n->api;
    memset(g, 0, sizeof(*g));
    g->index = idx;
    g->minor = idx;
    g->numa_node = -1;
    nvmlDevice_t d;
    nvmlReturn_t r = a->DeviceGetHandleByIndex(idx, &d);
    if (r == NVML_SUCCESS)
        r = a->DeviceGetUUID(d, g->uuid, sizeof(g->uuid));
    if (r == NVML_SUCCESS)
        r = a->DeviceGetName(d, g->name, sizeof(g->name));
    nvmlMemory_t mem;
    if (r == NVML_SUCCESS)
        r = a->DeviceGetMemoryInfo(d, &mem);
    if (r != NVML_SUCCESS) {
        g->lost = r == NVML_ERROR_GPU_IS_LOST;
        snprintf(g->error, sizeof(g->error), "%s", a->ErrorString(r));
        return;
    }
    if (idx < GS_MAX_GPUS)
        n->devices[idx] = d;
    g->mem_total = mem.total;
    g->mem_used = mem.used;
    if (a->DeviceGetMinorNumber)
        a->DeviceGetMinorNumber(d, &g->minor);
    nvmlPciInfo_t pci;
    if (a->DeviceGetPciInfo && a->DeviceGetPciInfo(d, &pci) == NVML_SUCCESS) {
        g->pci_device_id = pci.pciDeviceId;
        gs_strlcpy(g->bus_id, pci.busId, sizeof(g->bus_id));
    }
    if (a->DeviceGetArchitecture)
        a->DeviceGetArchitecture(d, &g->arch);
    if (a->DeviceGetCudaComputeCapability)
        a->DeviceGetCudaComputeCapability(d, &g->cc_major, &g->cc_minor);
    nvmlUtilization_t u;
    if (a->DeviceGetUtilizationRates && a->DeviceGetUtilizationRates(d, &u) == NVML_SUCCESS) {
        g->util_valid = true;
        g->util_gpu = u.gpu;
        g->util_mem = u.memory;
    }
    g->compute_mode = -1;
    unsigned v;
    if (a->DeviceGetComputeMode && a->DeviceGetComputeMode(d, &v) == NVML_SUCCESS)
        g->compute_mode = (int)v;
    if (a->DeviceGetTemperature && a->DeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &v) == NVML_SUCCESS) {
        g->temp_valid = true;
        g->temperature_c = v;
    }
    if (a->DeviceGetPowerUsage && a->DeviceGetPowerUsage(d, &v) == NVML_SUCCESS) {
        g->power_valid = true;
        g->power_mw = v;
    }
    if (a->DeviceGetMigMode && a->DeviceGetMigMode(d, &g->mig_current, &g->mig_pending) == NVML_SUCCESS) {
        g->mig_capable = true;
        /* Profiles can only be read while MIG is enabled; placements are read regardless. */
        read_profiles(n, d, g);
        if (g->mig_current)
            read_mig_devices(n, d, g);
    }
    read_processes(n, d, g);
}

/* The inventory is sized for the largest node (~600 KiB); zeroing all of it on every read would
 * keep it all resident in the agent, which reads it at each poll. Only the header and the GPUs the
 * node has are written; entries at and past n_gpus are never read (under AddressSanitizer they are
 * poisoned, so the test suite proves it). */
static void inventory_reset(struct gs_inventory *inv) {
#ifdef GS_ASAN
    ASAN_UNPOISON_MEMORY_REGION(inv, sizeof(*inv));
#endif
    memset(inv, 0, offsetof(struct gs_inventory, gpus));
}

static void inventory_seal(struct gs_inventory *inv) {
#ifdef GS_ASAN
    ASAN_POISON_MEMORY_REGION(&inv->gpus[inv->n_gpus], sizeof(inv->gpus[0]) * (GS_MAX_GPUS - inv->n_gpus));
#else
    (void)inv;
#endif
}

int gpu_inventory_read(struct gpu_node *n, struct gs_inventory *inv) {
    inventory_reset(inv);
    const struct nvml_api *a = &n->api;
    if (a->SystemGetDriverVersion)
        a->SystemGetDriverVersion(inv->driver_version, sizeof(inv->driver_version));
    if (a->SystemGetCudaDriverVersion)
        a->SystemGetCudaDriverVersion(&inv->cuda_driver_version);
    unsigned count = 0;
    nvmlReturn_t r = a->DeviceGetCount(&count);
    if (r != NVML_SUCCESS)
        return fail(n, r, "nvmlDeviceGetCount");
    if (count > GS_MAX_GPUS) {
        n->last = NVML_ERROR_UNKNOWN;
        snprintf(n->error, sizeof(n->error), "%u GPUs reported; gpuslice supports at most %d", count, GS_MAX_GPUS);
        return -E2BIG;
    }
    inv->n_gpus = count;
    n->n_devices = count;
    for (unsigned i = 0; i < count; i++) {
        memset(&inv->gpus[i], 0, sizeof(inv->gpus[i]));
        read_gpu(n, i, &inv->gpus[i]);
    }
    inventory_seal(inv);
    return 0;
}

int gpu_set_compute_mode(struct gpu_node *n, unsigned gpu, unsigned mode) {
    if (!n->api.DeviceSetComputeMode)
        return missing(n, "nvmlDeviceSetComputeMode");
    nvmlDevice_t d;
    int e = device(n, gpu, &d);
    if (e < 0)
        return e;
    nvmlReturn_t r = n->api.DeviceSetComputeMode(d, mode);
    if (r != NVML_SUCCESS)
        return fail(n, r, "nvmlDeviceSetComputeMode(GPU %u, %u)", gpu, mode);
    return 0;
}

int gpu_process_util(struct gpu_node *n, unsigned gpu, unsigned long long last_seen_us, struct gpu_util_sample *out,
                     unsigned max, unsigned *count) {
    *count = 0;
    if (!n->api.DeviceGetProcessUtilization)
        return -EOPNOTSUPP;
    nvmlDevice_t d;
    if (gpu >= GS_MAX_GPUS)
        return -ENODEV;
    nvmlReturn_t r = n->api.DeviceGetHandleByIndex(gpu, &d);
    if (r != NVML_SUCCESS)
        return gpu_errno(r);
    enum { CHUNK = 256 };
    nvmlProcessUtilizationSample_t buf[CHUNK];
    nvmlProcessUtilizationSample_t *s = max <= CHUNK ? buf : malloc(max * sizeof(*s));
    if (!s)
        return -ENOMEM;
    unsigned c = max;
    r = n->api.DeviceGetProcessUtilization(d, max ? s : NULL, &c, last_seen_us);
    int e = gpu_errno(r);
    if (r == NVML_SUCCESS && c > max)
        e = -EIO; /* more than the room given: not trusted */
    if (r == NVML_SUCCESS && e == 0) {
        for (unsigned i = 0; i < c; i++)
            out[i] = (struct gpu_util_sample){ s[i].pid, s[i].smUtil, s[i].timeStamp };
        *count = c;
    } else if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
        *count = c;
    }
    if (s != buf)
        free(s);
    return e;
}

/* A GPM sample and what it is of. */
struct gpu_gpm_sample {
    nvmlGpmSample_t s;
    unsigned gpu, gi;
};

void gpu_gpm_free(struct gpu_node *n, struct gpu_gpm_sample *g) {
    if (!g)
        return;
    if (g->s && n->api.GpmSampleFree)
        n->api.GpmSampleFree(g->s);
    free(g);
}

int gpu_gpm_mig_util(struct gpu_node *n, unsigned gpu, unsigned gi_id, struct gpu_gpm_sample **prev, double *pct,
                     bool *have) {
    const struct nvml_api *a = &n->api;
    *have = false;
    if (!a->GpmQueryDeviceSupport || !a->GpmSampleAlloc || !a->GpmSampleFree || !a->GpmMigSampleGet ||
        !a->GpmMetricsGet)
        return -EOPNOTSUPP;
    nvmlDevice_t d;
    nvmlReturn_t r = a->DeviceGetHandleByIndex(gpu, &d);
    nvmlGpmSupport_t sup = { .version = NVML_GPM_SUPPORT_VERSION };
    if (r == NVML_SUCCESS && (r = a->GpmQueryDeviceSupport(d, &sup)) == NVML_SUCCESS && !sup.isSupportedDevice)
        r = NVML_ERROR_NOT_SUPPORTED;
    struct gpu_gpm_sample *cur = r == NVML_SUCCESS ? calloc(1, sizeof(*cur)) : NULL;
    if (r == NVML_SUCCESS && !cur)
        r = NVML_ERROR_MEMORY;
    if (r == NVML_SUCCESS) {
        *cur = (struct gpu_gpm_sample){ NULL, gpu, gi_id };
        r = a->GpmSampleAlloc(&cur->s);
    }
    if (r == NVML_SUCCESS)
        r = a->GpmMigSampleGet(d, gi_id, cur->s);
    struct gpu_gpm_sample *old = *prev;
    if (r == NVML_SUCCESS && old && old->gpu == gpu && old->gi == gi_id) {
        nvmlGpmMetricsGet_t m = { .version = NVML_GPM_METRICS_GET_VERSION, .numMetrics = 1, .sample1 = old->s,
                                  .sample2 = cur->s };
        m.metrics[0].metricId = NVML_GPM_METRIC_GRAPHICS_UTIL;
        nvmlReturn_t mr = a->GpmMetricsGet(&m);
        if (mr == NVML_SUCCESS && m.metrics[0].nvmlReturn == NVML_SUCCESS && m.metrics[0].value >= 0 &&
            m.metrics[0].value <= 100) {
            *pct = m.metrics[0].value;
            *have = true;
        }
    }
    gpu_gpm_free(n, old);
    *prev = NULL;
    if (r != NVML_SUCCESS) {
        gpu_gpm_free(n, cur);
        return gpu_errno(r);
    }
    *prev = cur;
    return 0;
}

/* ---- MIG operations --------------------------------------------------------------------------- */

int gpu_mig_set_mode(struct gpu_node *n, unsigned gpu, bool enable, nvmlReturn_t *activation) {
    if (!n->api.DeviceSetMigMode)
        return missing(n, "nvmlDeviceSetMigMode");
    nvmlDevice_t d;
    int e = device(n, gpu, &d);
    if (e < 0)
        return e;
    nvmlReturn_t act = NVML_SUCCESS;
    nvmlReturn_t r = n->api.DeviceSetMigMode(d, enable ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE, &act);
    if (activation)
        *activation = act;
    if (r != NVML_SUCCESS)
        return fail(n, r, "nvmlDeviceSetMigMode(GPU %u, %s)", gpu, enable ? "enable" : "disable");
    return 0;
}

static int gi_by_id(struct gpu_node *n, unsigned gpu, unsigned gi_id, nvmlGpuInstance_t *gi) {
    if (!n->api.DeviceGetGpuInstanceById)
        return missing(n, "nvmlDeviceGetGpuInstanceById");
    nvmlDevice_t d;
    int e = device(n, gpu, &d);
    if (e < 0)
        return e;
    nvmlReturn_t r = n->api.DeviceGetGpuInstanceById(d, gi_id, gi);
    if (r != NVML_SUCCESS)
        return fail(n, r, "nvmlDeviceGetGpuInstanceById(GPU %u, GI %u)", gpu, gi_id);
    return 0;
}

int gpu_gi_create(struct gpu_node *n, unsigned gpu, unsigned profile_id, unsigned start, unsigned *gi_id) {
    const struct nvml_api *a = &n->api;
    if (!a->DeviceCreateGpuInstanceWithPlacement || !a->GpuInstanceGetInfo || !a->DeviceGetGpuInstancePossiblePlacements)
        return missing(n, "nvmlDeviceCreateGpuInstanceWithPlacement");
    nvmlDevice_t d;
    int e = device(n, gpu, &d);
    if (e < 0)
        return e;
    /* The placement size is the profile's, read from the driver, never assumed. */
    nvmlGpuInstancePlacement_t pl[8];
    unsigned cnt = GS_ARRAY_SIZE(pl);
    nvmlReturn_t r = a->DeviceGetGpuInstancePossiblePlacements(d, profile_id, pl, &cnt);
    if (r != NVML_SUCCESS)
        return fail(n, r, "nvmlDeviceGetGpuInstancePossiblePlacements(GPU %u, profile %u)", gpu, profile_id);
    nvmlGpuInstancePlacement_t want = { start, cnt ? pl[0].size : 0 };
    nvmlGpuInstance_t gi;
    r = a->DeviceCreateGpuInstanceWithPlacement(d, profile_id, &want, &gi);
    if (r != NVML_SUCCESS)
        return fail(n, r, "nvmlDeviceCreateGpuInstanceWithPlacement(GPU %u, profile %u, start %u)", gpu, profile_id,
                    start);
    nvmlGpuInstanceInfo_t info;
    r = a->GpuInstanceGetInfo(gi, &info);
    if (r != NVML_SUCCESS)
        return fail(n, r, "nvmlGpuInstanceGetInfo(GPU %u)", gpu);
    if (gi_id)
        *gi_id = info.id;
    return 0;
}

int gpu_ci_create_full(struct gpu_node *n, unsigned gpu, unsigned gi_id, unsigned *ci_id, char *uuid,
                       size_t uuid_len) {
    const struct nvml_api *a = &n->api;
    if (!a->GpuInstanceGetComputeInstanceProfileInfo || !a->GpuInstanceCreateComputeInstance ||
        !a->ComputeInstanceGetInfo)
        return missing(n, "nvmlGpuInstanceCreateComputeInstance");
    nvmlGpuInstance_t gi;
    int e = gi_by_id(n, gpu, gi_id, &gi);
    if (e < 0)
        return e;
    /* The full-size CI profile is the one with the most slices this GI offers. */
    nvmlComputeInstanceProfileInfo_t best = { 0 };
    bool found = false;
    for (unsigned p = 0; p < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; p++) {
        nvmlComputeInstanceProfileInfo_t info;
        nvmlReturn_t r = a->GpuInstanceGetComputeInstanceProfileInfo(gi, p, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                                                                     &info);
        if (r == NVML_ERROR_INVALID_ARGUMENT)
            break;
        if (r == NVML_SUCCESS && (!found || info.sliceCount > best.sliceCount)) {
            best = info;
            found = true;
        }
    }
    if (!found)
        return fail(n, NVML_ERROR_NOT_SUPPORTED, "no compute-instance profile on GPU %u GI %u", gpu, gi_id);
    nvmlComputeInstance_t ci;
    nvmlReturn_t r = a->GpuInstanceCreateComputeInstance(gi, best.id, &ci);
    if (r != NVML_SUCCESS)
        return fail(n, r, "nvmlGpuInstanceCreateComputeInstance(GPU %u, GI %u, profile %u)", gpu, gi_id, best.id);
    nvmlComputeInstanceInfo_t info;
    r = a->ComputeInstanceGetInfo(ci, &info);
    if (r != NVML_SUCCESS)
        return fail(n, r, "nvmlComputeInstanceGetInfo(GPU %u, GI %u)", gpu, gi_id);
    if (ci_id)
        *ci_id = info.id;
    if (uuid) {
        /* The MIG UUID comes straight from the new CI's device handle (no scan of all handles). */
        r = a->DeviceGetUUID(info.device, uuid, (unsigned)uuid_len);
        if (r != NVML_SUCCESS)
            return fail(n, r, "nvmlDeviceGetUUID(GPU %u, GI %u, CI %u)", gpu, gi_id, info.id);
    }
    return 0;
}

int gpu_ci_destroy(struct gpu_node *n, unsigned gpu, unsigned gi_id, unsigned ci_id) {
    const struct nvml_api *a = &n->api;
    if (!a->GpuInstanceGetComputeInstanceById || !a->ComputeInstanceDestroy)
        return missing(n, "nvmlComputeInstanceDestroy");
    nvmlGpuInstance_t gi;
    int e = gi_by_id(n, gpu, gi_id, &gi);
    if (e < 0)
        return e;
    nvmlComputeInstance_t ci;
    nvmlReturn_t r = a->GpuInstanceGetComputeInstanceById(gi, ci_id, &ci);
    if (r != NVML_SUCCESS)
        return fail(n, r, "nvmlGpuInstanceGetComputeInstanceById(GPU %u, GI %u, CI %u)", gpu, gi_id, ci_id);
    r = a->ComputeInstanceDestroy(ci);
    if (r != NVML_SUCCESS)
        return fail(n, r, "nvmlComputeInstanceDestroy(GPU %u, GI %u, CI %u)", gpu, gi_id, ci_id);
    return 0;
}

int gpu_gi_destroy(struct gpu_node *n, unsigned gpu, unsigned gi_id) {
    if (!n->api.GpuInstanceDestroy)
        return missing(n, "nvmlGpuInstanceDestroy");
    nvmlGpuInstance_t gi;
    int e = gi_by_id(n, gpu, gi_id, &gi);
    if (e < 0)
        return e;
    nvmlReturn_t r = n->api.GpuInstanceDestroy(gi);
    if (r != NVML_SUCCESS)
        return fail(n, r, "nvmlGpuInstanceDestroy(GPU %u, GI %u)", gpu, gi_id);
    return 0;
}

/* ---- events ----------------------------------------------------------------------------------- */

int gpu_events_open(struct gpu_node *n, struct gpu_events **out) {
    const struct nvml_api *a = &n->api;
    if (!a->EventSetCreate || !a->DeviceRegisterEvents || !a->EventSetWait || !a->EventSetFree)
        return missing(n, "nvmlEventSetCreate");
    struct gpu_events *e = calloc(1, sizeof(*e));
    if (!e)
        return -ENOMEM;
    e->node = n;
    nvmlReturn_t r = a->EventSetCreate(&e->set);
    if (r != NVML_SUCCESS) {
        free(e);
        return fail(n, r, "nvmlEventSetCreate");
    }
    unsigned count = 0;
    a->DeviceGetCount(&count);
    for (unsigned i = 0; i < count && i < GS_MAX_GPUS; i++) {
        nvmlDevice_t d;
        if (a->DeviceGetHandleByIndex(i, &d) != NVML_SUCCESS)
            continue;
        n->devices[i] = d;
        unsigned long long types = 0;
        if (a->DeviceGetSupportedEventTypes && a->DeviceGetSupportedEventTypes(d, &types) == NVML_SUCCESS &&
            !(types & nvmlEventTypeXidCriticalError))
            continue;
        r = a->DeviceRegisterEvents(d, nvmlEventTypeXidCriticalError, e->set);
        if (r != NVML_SUCCESS && r != NVML_ERROR_NOT_SUPPORTED) {
            a->EventSetFree(e->set);
            free(e);
            return fail(n, r, "nvmlDeviceRegisterEvents(GPU %u, Xid)", i);
        }
    }
    if (count > n->n_devices)
        n->n_devices = count > GS_MAX_GPUS ? GS_MAX_GPUS : count;
    *out = e;
    return 0;
}

int gpu_events_wait(struct gpu_events *e, unsigned timeout_ms, struct gpu_event *ev) {
    struct gpu_node *n = e->node;
    nvmlEventData_t data;
    nvmlReturn_t r = n->api.EventSetWait(e->set, &data, timeout_ms);
    /* Runs on the agent's event thread: no shared error buffer is written here. */
    if (r != NVML_SUCCESS)
        return r == NVML_ERROR_TIMEOUT ? -ETIMEDOUT : gpu_errno(r);
    ev->gpu = UINT32_MAX;
    for (unsigned i = 0; i < n->n_devices; i++)
        if (n->devices[i] == data.device)
            ev->gpu = i;
    ev->xid = data.eventData;
    ev->gi_id = data.gpuInstanceId;
    ev->ci_id = data.computeInstanceId;
    return 0;
}

int gpu_events_wait_unless(struct gpu_events *e, unsigned timeout_ms, const atomic_bool *stop, struct gpu_event *ev) {
    /* Counted before stop is read: a closer that sees no waiter knows this call will not wait. */
    atomic_fetch_add(&e->node->waiting, 1);
    int r = atomic_load(stop) ? -ECANCELED : gpu_events_wait(e, timeout_ms, ev);
    atomic_fetch_sub(&e->node->waiting, 1);
    return r;
}

bool gpu_events_waiting(const struct gpu_events *e) {
    return atomic_load(&e->node->waiting) != 0;
}

void gpu_events_close(struct gpu_events *e) {
    if (!e)
        return;
    e->node->api.EventSetFree(e->set);
    free(e);
}
