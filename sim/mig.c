/* mig.c: MIG on the simulated node: the mode (pending on Ampere, immediate on Hopper and newer),
 * GPU-instance profiles and placements from the model catalogue, GPU instances with the driver's
 * GI ID numbering. Compute instances and MIG device handles are in mig_ci.c. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "simlib.h"
#include "util/util.h"

/* ---- MIG mode ------------------------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_gpu(d, &ref);
    if (r == NVML_SUCCESS && !ref.gpu->model->mig_mem_slices)
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS && (!current || !pending))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        *current = ref.gpu->mig_current;
        *pending = ref.gpu->mig_pending;
    }
    READ_END(r);
}

static bool gpu_has_instances(const struct sim_gpu *g) {
    for (unsigned i = 0; i < SIM_MAX_GI; i++)
        if (g->gis[i].used)
            return true;
    return false;
}

/* Ampere sets a pending mode that a GPU reset activates; Hopper and newer switch at once. The
 * driver refuses to toggle while processes run or (when disabling) while instances exist. */
EXPORT nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t d, unsigned int mode, nvmlReturn_t *activationStatus) {
    mig_call_delay();
    WRITE_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_gpu(d, &ref);
    if (r == NVML_SUCCESS && !ref.gpu->model->mig_mem_slices)
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS && (mode > 1 || !activationStatus))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        WRITE_END(r);
    struct sim_gpu *g = ref.gpu;
    if (g->mig_current == mode && g->mig_pending == mode) {
        *activationStatus = NVML_SUCCESS;
        WRITE_END(NVML_SUCCESS);
    }
    if (g->n_procs > 0 || (mode == 0 && gpu_has_instances(g))) {
        *activationStatus = NVML_ERROR_IN_USE;
        WRITE_END(NVML_ERROR_IN_USE);
    }
    g->mig_pending = mode;
    if (g->model->arch >= GS_ARCH_HOPPER) {
        g->mig_current = mode;
        *activationStatus = NVML_SUCCESS;
    } else {
        *activationStatus = g->mig_current == mode ? NVML_SUCCESS : NVML_ERROR_RESET_REQUIRED;
    }
    WRITE_END(NVML_SUCCESS);
}

/* ---- GPU-instance profiles and placements ---------------------------------------------------- */

static void fill_profile_common(const struct gs_profile_spec *p, unsigned *id, unsigned *slice, unsigned *inst,
                                unsigned *sm, unsigned *ce, unsigned *dec, unsigned *enc, unsigned *jpeg,
                                unsigned *ofa, unsigned long long *mem) {
    *id = p->id;
    *slice = p->slices;
    *inst = p->max_instances;
    *sm = p->sm;
    *ce = p->ce;
    *dec = p->dec;
    *enc = p->enc;
    *jpeg = p->jpeg;
    *ofa = p->ofa;
    *mem = p->mem_mib;
}

/* Shared checks for the profile-index queries: the enumeration contract is 0,1,2,... until
 * INVALID_ARGUMENT, with NOT_SUPPORTED for indices this GPU lacks. */
static nvmlReturn_t lookup_profile_index(nvmlDevice_t d, unsigned profile, const struct gs_profile_spec **out) {
    struct dev_ref ref;
    nvmlReturn_t r = resolve_gpu(d, &ref);
    if (r != NVML_SUCCESS)
        return r;
    if (!ref.gpu->model->mig_mem_slices)
        return NVML_ERROR_NOT_SUPPORTED;
    if (profile >= NVML_GPU_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!ref.gpu->mig_current)
        return NVML_ERROR_NOT_SUPPORTED;
    *out = gs_model_profile_by_nvml(ref.gpu->model, profile);
    return *out ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t d, unsigned int profile,
                                                       nvmlGpuInstanceProfileInfo_t *info) {
    READ_BEGIN;
    const struct gs_profile_spec *p = NULL;
    nvmlReturn_t r = lookup_profile_index(d, profile, &p);
    if (r == NVML_SUCCESS && !info)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        memset(info, 0, sizeof(*info));
        fill_profile_common(p, &info->id, &info->sliceCount, &info->instanceCount, &info->multiprocessorCount,
                            &info->copyEngineCount, &info->decoderCount, &info->encoderCount, &info->jpegCount,
                            &info->ofaCount, &info->memorySizeMB);
    }
    READ_END(r);
}

static nvmlReturn_t fill_profile_v(const struct gs_profile_spec *p, void *vinfo) {
    unsigned version = *(unsigned *)vinfo;
    if (version == nvmlGpuInstanceProfileInfo_v2) {
        nvmlGpuInstanceProfileInfo_v2_t *info = vinfo;
        memset(info, 0, sizeof(*info));
        info->version = version;
        fill_profile_common(p, &info->id, &info->sliceCount, &info->instanceCount, &info->multiprocessorCount,
                            &info->copyEngineCount, &info->decoderCount, &info->encoderCount, &info->jpegCount,
                            &info->ofaCount, &info->memorySizeMB);
        snprintf(info->name, sizeof(info->name), "MIG %s", p->name);
        return NVML_SUCCESS;
    }
    if (version == nvmlGpuInstanceProfileInfo_v3) {
        nvmlGpuInstanceProfileInfo_v3_t *info = vinfo;
        memset(info, 0, sizeof(*info));
        info->version = version;
        fill_profile_common(p, &info->id, &info->sliceCount, &info->instanceCount, &info->multiprocessorCount,
                            &info->copyEngineCount, &info->decoderCount, &info->encoderCount, &info->jpegCount,
                            &info->ofaCount, &info->memorySizeMB);
        snprintf(info->name, sizeof(info->name), "MIG %s", p->name);
        return NVML_SUCCESS;
    }
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t d, unsigned int profile, void *info) {
    READ_BEGIN;
    const struct gs_profile_spec *p = NULL;
    nvmlReturn_t r = lookup_profile_index(d, profile, &p);
    if (r == NVML_SUCCESS && !info)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        r = fill_profile_v(p, info);
    READ_END(r);
}

/* Resolves a GI profile ID (19, 9, ...) on a MIG-capable GPU, MIG mode not required. */
static nvmlReturn_t lookup_profile_id(nvmlDevice_t d, unsigned profile_id, struct dev_ref *ref,
                                      const struct gs_profile_spec **out) {
    nvmlReturn_t r = resolve_gpu(d, ref);
    if (r != NVML_SUCCESS)
        return r;
    if (!ref->gpu->model->mig_mem_slices)
        return NVML_ERROR_NOT_SUPPORTED;
    *out = gs_model_profile_by_id(ref->gpu->model, profile_id);
    return *out ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

/* A GI profile ID on a GPU in MIG mode, then the call's output pointer. */
static nvmlReturn_t lookup_mig_profile(nvmlDevice_t d, unsigned profile_id, struct dev_ref *ref,
                                       const struct gs_profile_spec **out, const void *ptr) {
    nvmlReturn_t r = lookup_profile_id(d, profile_id, ref, out);
    if (r == NVML_SUCCESS && !ref->gpu->mig_current)
        r = NVML_ERROR_NOT_SUPPORTED;
    return with_out(r, ptr);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t d, unsigned int profileId, void *info) {
    READ_BEGIN;
    struct dev_ref ref;
    const struct gs_profile_spec *p = NULL;
    nvmlReturn_t r = lookup_mig_profile(d, profileId, &ref, &p, info);
    if (r == NVML_SUCCESS)
        r = fill_profile_v(p, info);
    READ_END(r);
}

/* Returns every placement of the profile, occupied or not, whether MIG is enabled or not. */
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t d, unsigned int profileId,
                                                                 nvmlGpuInstancePlacement_t *placements,
                                                                 unsigned int *count) {
    READ_BEGIN;
    struct dev_ref ref;
    const struct gs_profile_spec *p = NULL;
    nvmlReturn_t r = lookup_profile_id(d, profileId, &ref, &p);
    if (r == NVML_SUCCESS && !count)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        READ_END(r);
    if (!placements) {
        *count = p->n_starts;
        READ_END(NVML_SUCCESS);
    }
    if (*count < p->n_starts) {
        *count = p->n_starts;
        READ_END(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned i = 0; i < p->n_starts; i++)
        placements[i] = (nvmlGpuInstancePlacement_t){ p->starts[i], p->mem_slices };
    *count = p->n_starts;
    READ_END(NVML_SUCCESS);
}

static unsigned occupied_mask(const struct sim_gpu *g) {
    unsigned mask = 0;
    for (unsigned i = 0; i < SIM_MAX_GI; i++)
        if (g->gis[i].used)
            mask |= ((1u << g->gis[i].size) - 1) << g->gis[i].start;
    return mask;
}

static unsigned count_profile(const struct sim_gpu *g, unsigned profile_id) {
    unsigned n = 0;
    for (unsigned i = 0; i < SIM_MAX_GI; i++)
        if (g->gis[i].used && g->gis[i].profile_id == profile_id)
            n++;
    return n;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t d, unsigned int profileId,
                                                             unsigned int *count) {
    READ_BEGIN;
    struct dev_ref ref;
    const struct gs_profile_spec *p = NULL;
    nvmlReturn_t r = lookup_mig_profile(d, profileId, &ref, &p, count);
    if (r != NVML_SUCCESS)
        READ_END(r);
    /* Placements of one profile are aligned intervals of equal size: a greedy scan counts the
     * largest set of further instances that fit. */
    unsigned mask = occupied_mask(ref.gpu), n = 0;
    unsigned left = p->max_instances - count_profile(ref.gpu, p->id);
    for (unsigned i = 0; i < p->n_starts && n < left; i++) {
        unsigned m = ((1u << p->mem_slices) - 1) << p->starts[i];
        if (!(mask & m)) {
            mask |= m;
            n++;
        }
    }
    *count = n;
    READ_END(NVML_SUCCESS);
}

/* GI IDs come from the driver. Like the real one (mig.md §2.8), the simulator numbers slots as a
 * binary tree over memory slices (7g -> 0, 1g at slot s -> 7+s, 2g -> 3..6) except for half-GPU
 * instances, which take the lowest free of 1 and 2: a 3g created at slot 4 first gets GI 1.
 * Callers must read IDs back (nvmlGpuInstanceGetInfo), never derive them. */
static int assign_gi_id(const struct sim_gpu *g, unsigned start, unsigned size) {
    unsigned slices = g->model->mig_mem_slices;
    int id;
    if (size == slices)
        id = 0;
    else if (size * 2 == slices)
        id = !g->gis[1].used ? 1 : 2;
    else if (slices == 8 && size == 2)
        id = (int)(3 + start / 2);
    else if (slices == 8 && size == 1)
        id = (int)(7 + start);
    else if (slices == 4 && size == 1) /* A30 */
        id = (int)(3 + start);
    else
        id = -1;
    if (id >= 0 && id < SIM_MAX_GI && !g->gis[id].used)
        return id;
    for (int i = 0; i < SIM_MAX_GI; i++) /* defensive: should not happen for valid placements */
        if (!g->gis[i].used)
            return i;
    return -1;
}

static nvmlReturn_t create_gi_locked(struct dev_ref *ref, const struct gs_profile_spec *p, unsigned start,
                                     nvmlGpuInstance_t *out) {
    struct sim_gpu *g = ref->gpu;
    if (count_profile(g, p->id) >= p->max_instances)
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    unsigned m = ((1u << p->mem_slices) - 1) << start;
    if (occupied_mask(g) & m)
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    int id = assign_gi_id(g, start, p->mem_slices);
    if (id < 0)
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    struct sim_gi *gi = &g->gis[id];
    memset(gi, 0, sizeof(*gi));
    gi->used = true;
    gi->profile_id = p->id;
    gi->start = start;
    gi->size = p->mem_slices;
    *out = gi_handle(ref->index, (unsigned)id);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t d, unsigned int profileId,
                                                            const nvmlGpuInstancePlacement_t *placement,
                                                            nvmlGpuInstance_t *gpuInstance) {
    mig_call_delay();
    WRITE_BEGIN;
    struct dev_ref ref;
    const struct gs_profile_spec *p = NULL;
    nvmlReturn_t r = lookup_mig_profile(d, profileId, &ref, &p, gpuInstance);
    if (r == NVML_SUCCESS && (!placement || placement->size != p->mem_slices))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        bool valid = false;
        for (unsigned i = 0; i < p->n_starts; i++)
            valid |= p->starts[i] == placement->start;
        r = valid ? create_gi_locked(&ref, p, placement->start, gpuInstance) : NVML_ERROR_INVALID_ARGUMENT;
    }
    WRITE_END(r);
}

/* Without a placement the driver picks the slot. Observed order for 1g on H100: 6,4,5,0,1,2,3;
 * larger profiles are placed from the top down. This reproduces the user guide's example where
 * `-cgi 19,19,14,9` fails but `-cgi 9,19,14,19` succeeds. */
EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t d, unsigned int profileId,
                                               nvmlGpuInstance_t *gpuInstance) {
    mig_call_delay();
    WRITE_BEGIN;
    struct dev_ref ref;
    const struct gs_profile_spec *p = NULL;
    nvmlReturn_t r = lookup_mig_profile(d, profileId, &ref, &p, gpuInstance);
    if (r != NVML_SUCCESS)
        WRITE_END(r);
    static const unsigned one_slice_order[] = { 6, 4, 5, 0, 1, 2, 3 };
    unsigned order[GS_MAX_STARTS], n = p->n_starts;
    if (p->mem_slices == 1 && ref.gpu->model->mig_mem_slices == 8) {
        memcpy(order, one_slice_order, sizeof(one_slice_order));
        n = 7;
    } else {
        for (unsigned i = 0; i < n; i++)
            order[i] = p->starts[n - 1 - i];
    }
    r = NVML_ERROR_INSUFFICIENT_RESOURCES;
    for (unsigned i = 0; i < n && r == NVML_ERROR_INSUFFICIENT_RESOURCES; i++)
        r = create_gi_locked(&ref, p, order[i], gpuInstance);
    WRITE_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t d, unsigned int profileId,
                                             nvmlGpuInstance_t *gpuInstances, unsigned int *count) {
    READ_BEGIN;
    struct dev_ref ref;
    const struct gs_profile_spec *p = NULL;
    nvmlReturn_t r = lookup_mig_profile(d, profileId, &ref, &p, count);
    if (r == NVML_SUCCESS && !gpuInstances)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        READ_END(r);
    /* *count is output only (nvml.h: "the count of returned GPU instances"): the buffer must hold
     * the profile's instanceCount, which the instances of the profile never exceed. */
    unsigned n = 0;
    for (unsigned i = 0; i < SIM_MAX_GI && n < p->max_instances; i++)
        if (ref.gpu->gis[i].used && ref.gpu->gis[i].profile_id == profileId)
            gpuInstances[n++] = gi_handle(ref.index, i);
    *count = n;
    READ_END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t d, unsigned int id, nvmlGpuInstance_t *gi) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_mig_gpu(d, &ref), gi);
    if (r == NVML_SUCCESS)
        r = id < SIM_MAX_GI && ref.gpu->gis[id].used ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
    if (r == NVML_SUCCESS)
        *gi = gi_handle(ref.index, id);
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t g, nvmlGpuInstanceInfo_t *info) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gi(g, &ref), info);
    if (r == NVML_SUCCESS) {
        info->device = gpu_handle(ref.index);
        info->id = ref.gi_id;
        info->profileId = ref.gi->profile_id;
        info->placement = (nvmlGpuInstancePlacement_t){ ref.gi->start, ref.gi->size };
    }
    READ_END(r);
}

bool gi_has_processes(const struct sim_gpu *g, unsigned gi, int ci) {
    for (unsigned i = 0; i < g->n_procs; i++)
        if (g->procs[i].gi == (int)gi && (ci < 0 || g->procs[i].ci == ci))
            return true;
    return false;
}

EXPORT nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t g) {
    mig_call_delay();
    WRITE_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_gi(g, &ref);
    if (r != NVML_SUCCESS)
        WRITE_END(r);
    for (unsigned c = 0; c < SIM_MAX_CI; c++)
        if (ref.gi->cis[c].used)
            WRITE_END(NVML_ERROR_IN_USE);
    if (gi_has_processes(ref.gpu, ref.gi_id, -1))
        WRITE_END(NVML_ERROR_IN_USE);
    memset(ref.gi, 0, sizeof(*ref.gi));
    WRITE_END(NVML_SUCCESS);
}
