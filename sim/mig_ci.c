/* mig_ci.c: compute instances inside the simulated GPU instances (go-nvlib's profile rule) and
 * the MIG device handles NVML hands out for them. */
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "simlib.h"
#include "util/util.h"

/* ---- compute instances ---------------------------------------------------------------------- */

/* CI profile table of a GI: CI profile index c-slices for c <= G and not (c < G && 2c > G + 1)
 * (go-nvlib's rule), over 1,2,3,4,7 slices. A REV2 1-slice GI (twice the memory) offers
 * 1_SLICE_REV1, as `nvidia-smi mig -cgi 15 -C` showed on GH200. */
static bool ci_profile_spec(const struct sim_gpu *g, const struct sim_gi *gi, unsigned profile, unsigned *slices) {
    const struct gs_profile_spec *gp = gs_model_profile_by_id(g->model, gi->profile_id);
    if (!gp)
        return false;
    unsigned G = gp->slices;
    if (gp->nvml_profile == NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2) {
        *slices = 1;
        return profile == NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1;
    }
    static const unsigned csl[] = { 1, 2, 3, 4, 7 };
    if (profile >= GS_ARRAY_SIZE(csl))
        return false;
    unsigned c = csl[profile];
    if (c > G || (c < G && 2 * c > G + 1))
        return false;
    *slices = c;
    return true;
}

/* nvml.h's versioned CI profile structs (nvmlGpuInstanceGetComputeInstanceProfileInfoV): the
 * unversioned fields after a version word, then the profile's name; v3 adds capabilities. */
typedef struct {
    unsigned int version;
    unsigned int id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount,
        sharedEncoderCount, sharedJpegCount, sharedOfaCount;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlComputeInstanceProfileInfo_v2_t;
typedef struct {
    unsigned int version;
    unsigned int id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount,
        sharedEncoderCount, sharedJpegCount, sharedOfaCount;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    unsigned int capabilities;
} nvmlComputeInstanceProfileInfo_v3_t;
#define nvmlComputeInstanceProfileInfo_v2 NVML_STRUCT_VERSION(ComputeInstanceProfileInfo, 2)
#define nvmlComputeInstanceProfileInfo_v3 NVML_STRUCT_VERSION(ComputeInstanceProfileInfo, 3)
_Static_assert(nvmlComputeInstanceProfileInfo_v2 == 0x02000088, "CI profile info v2 version");
_Static_assert(nvmlComputeInstanceProfileInfo_v3 == 0x0300008C, "CI profile info v3 version");
_Static_assert(offsetof(nvmlComputeInstanceProfileInfo_v3_t, name) == 40, "v3 name @40");

/* The CI profile of a GI (its fields as nvmlComputeInstanceProfileInfo_t) and, in name, nvidia-smi's
 * `mig -lcip` name: the GI's ("MIG 2g.20gb") for a CI of the whole GI, "MIG 1c.2g.20gb" for less. */
static nvmlReturn_t ci_profile_info(nvmlGpuInstance_t g, unsigned profile, unsigned engProfile, const void *out,
                                    nvmlComputeInstanceProfileInfo_t *info, char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE]) {
    struct dev_ref ref;
    nvmlReturn_t r = resolve_gi(g, &ref);
    if (r == NVML_SUCCESS && (!out || profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT ||
                              engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED))
        r = NVML_ERROR_INVALID_ARGUMENT;
    unsigned c = 0;
    if (r == NVML_SUCCESS && !ci_profile_spec(ref.gpu, ref.gi, profile, &c))
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r != NVML_SUCCESS)
        return r;
    const struct gs_profile_spec *gp = gs_model_profile_by_id(ref.gpu->model, ref.gi->profile_id);
    *info = (nvmlComputeInstanceProfileInfo_t){
        .id = profile,
        .sliceCount = c,
        .instanceCount = gp->slices / c,
        .multiprocessorCount = gp->sm * c / gp->slices,
        .sharedCopyEngineCount = gp->ce,
        .sharedDecoderCount = gp->dec,
        .sharedEncoderCount = gp->enc,
        .sharedJpegCount = gp->jpeg,
        .sharedOfaCount = gp->ofa,
    };
    if (c == gp->slices)
        snprintf(name, NVML_DEVICE_NAME_V2_BUFFER_SIZE, "MIG %s", gp->name);
    else
        snprintf(name, NVML_DEVICE_NAME_V2_BUFFER_SIZE, "MIG %uc.%s", c, gp->name);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t g, unsigned int profile,
                                                                unsigned int engProfile,
                                                                nvmlComputeInstanceProfileInfo_t *info) {
    READ_BEGIN;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    nvmlComputeInstanceProfileInfo_t v;
    nvmlReturn_t r = ci_profile_info(g, profile, engProfile, info, &v, name);
    if (r == NVML_SUCCESS)
        *info = v;
    READ_END(r);
}

/* The versioned call (nvidia-ml-py's default): the struct's version word says v2 or v3; another
 * -> ARGUMENT_VERSION_MISMATCH, as for the GI profiles. */
EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t g, unsigned int profile,
                                                                 unsigned int engProfile, void *vinfo) {
    READ_BEGIN;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    nvmlComputeInstanceProfileInfo_t v;
    nvmlReturn_t r = ci_profile_info(g, profile, engProfile, vinfo, &v, name);
    unsigned version = r == NVML_SUCCESS ? *(unsigned *)vinfo : 0;
    if (r == NVML_SUCCESS && version != nvmlComputeInstanceProfileInfo_v2 && version != nvmlComputeInstanceProfileInfo_v3)
        r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (r == NVML_SUCCESS) {
        /* v2 is v3 without its last field: fill the common prefix, then capabilities for v3 */
        nvmlComputeInstanceProfileInfo_v3_t out = {
            .version = version,
            .id = v.id,
            .sliceCount = v.sliceCount,
            .instanceCount = v.instanceCount,
            .multiprocessorCount = v.multiprocessorCount,
            .sharedCopyEngineCount = v.sharedCopyEngineCount,
            .sharedDecoderCount = v.sharedDecoderCount,
            .sharedEncoderCount = v.sharedEncoderCount,
            .sharedJpegCount = v.sharedJpegCount,
            .sharedOfaCount = v.sharedOfaCount,
        };
        memcpy(out.name, name, sizeof(out.name));
        memcpy(vinfo, &out, version == nvmlComputeInstanceProfileInfo_v3 ? sizeof(out)
                                                                          : sizeof(nvmlComputeInstanceProfileInfo_v2_t));
    }
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t g, unsigned int profileId,
                                                        nvmlComputeInstance_t *out) {
    mig_call_delay();
    WRITE_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_gi(g, &ref);
    unsigned c = 0;
    if (r == NVML_SUCCESS && !out)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && !ci_profile_spec(ref.gpu, ref.gi, profileId, &c))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        WRITE_END(r);
    const struct gs_profile_spec *gp = gs_model_profile_by_id(ref.gpu->model, ref.gi->profile_id);
    unsigned used_mask = 0, same = 0;
    int free_id = -1;
    for (unsigned i = 0; i < SIM_MAX_CI; i++) {
        const struct sim_ci *ci = &ref.gi->cis[i];
        if (ci->used) {
            used_mask |= ((1u << ci->size) - 1) << ci->start;
            same += ci->profile == profileId;
        } else if (free_id < 0) {
            free_id = (int)i;
        }
    }
    if (free_id < 0 || same >= gp->slices / c)
        WRITE_END(NVML_ERROR_INSUFFICIENT_RESOURCES);
    for (unsigned start = 0; start + c <= gp->slices; start += c) {
        unsigned m = ((1u << c) - 1) << start;
        if (used_mask & m)
            continue;
        struct sim_ci *ci = &ref.gi->cis[free_id];
        ci->used = true;
        ci->profile = profileId;
        ci->start = start;
        ci->size = c;
        sim_mig_uuid(sim_st->seed, ++sim_st->uuid_counter, ci->uuid, sizeof(ci->uuid));
        *out = ci_handle(ref.index, ref.gi_id, (unsigned)free_id);
        WRITE_END(NVML_SUCCESS);
    }
    WRITE_END(NVML_ERROR_INSUFFICIENT_RESOURCES);
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t g, unsigned int profileId,
                                                      nvmlComputeInstance_t *cis, unsigned int *count) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_gi(g, &ref);
    if (r == NVML_SUCCESS && (!cis || !count))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        READ_END(r);
    /* *count is output only, as for GPU instances: the buffer must hold the CI profile's
     * instanceCount (at most SIM_MAX_CI), which its instances never exceed. */
    unsigned n = 0;
    for (unsigned i = 0; i < SIM_MAX_CI; i++)
        if (ref.gi->cis[i].used && ref.gi->cis[i].profile == profileId)
            cis[n++] = ci_handle(ref.index, ref.gi_id, i);
    *count = n;
    READ_END(NVML_SUCCESS);
}

/* How many more compute instances of profileId fit in the GPU instance: free aligned slots of the
 * profile's size, up to its instance count (the order nvmlGpuInstanceCreateComputeInstance fills). */
EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t g, unsigned int profileId,
                                                                      unsigned int *count) {
    READ_BEGIN;
    struct dev_ref ref;
    unsigned c = 0;
    nvmlReturn_t r = with_out(resolve_gi(g, &ref), count);
    if (r == NVML_SUCCESS && !ci_profile_spec(ref.gpu, ref.gi, profileId, &c))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        READ_END(r);
    const struct gs_profile_spec *gp = gs_model_profile_by_id(ref.gpu->model, ref.gi->profile_id);
    unsigned used_mask = 0, same = 0, free_ids = 0, n = 0;
    for (unsigned i = 0; i < SIM_MAX_CI; i++) {
        const struct sim_ci *ci = &ref.gi->cis[i];
        if (ci->used) {
            used_mask |= ((1u << ci->size) - 1) << ci->start;
            same += ci->profile == profileId;
        } else {
            free_ids++;
        }
    }
    unsigned left = same < gp->slices / c ? gp->slices / c - same : 0;
    for (unsigned start = 0; start + c <= gp->slices && n < left && n < free_ids; start += c)
        n += !(used_mask & (((1u << c) - 1) << start));
    *count = n;
    READ_END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t g, unsigned int id,
                                                         nvmlComputeInstance_t *ci) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gi(g, &ref), ci);
    if (r == NVML_SUCCESS)
        r = id < SIM_MAX_CI && ref.gi->cis[id].used ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
    if (r == NVML_SUCCESS)
        *ci = ci_handle(ref.index, ref.gi_id, id);
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t c, nvmlComputeInstanceInfo_t *info) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_ci(c, &ref), info);
    if (r == NVML_SUCCESS) {
        info->device = mig_handle(ref.index, ref.gi_id, ref.ci_id);
        info->gpuInstance = gi_handle(ref.index, ref.gi_id);
        info->id = ref.ci_id;
        info->profileId = ref.ci->profile;
        info->placement = (nvmlComputeInstancePlacement_t){ ref.ci->start, ref.ci->size };
    }
    READ_END(r);
}
EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t c, nvmlComputeInstanceInfo_t *info) {
    return nvmlComputeInstanceGetInfo_v2(c, info);
}

EXPORT nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t c) {
    mig_call_delay();
    WRITE_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_ci(c, &ref);
    if (r == NVML_SUCCESS && gi_has_processes(ref.gpu, ref.gi_id, (int)ref.ci_id))
        r = NVML_ERROR_IN_USE;
    if (r == NVML_SUCCESS)
        memset(ref.ci, 0, sizeof(*ref.ci));
    WRITE_END(r);
}

/* ---- MIG device handles --------------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *count) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), count);
    if (r == NVML_SUCCESS)
        *count = ref.gpu->mig_current ? (ref.gpu->model->mig_mem_slices == 8 ? 7 : ref.gpu->model->mig_mem_slices)
                                      : 0;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index, nvmlDevice_t *mig) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_mig_gpu(d, &ref);
    if (r == NVML_SUCCESS && (!mig || index >= 7))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        READ_END(r);
    unsigned k = 0;
    for (unsigned gi = 0; gi < SIM_MAX_GI; gi++)
        for (unsigned ci = 0; ci < SIM_MAX_CI; ci++)
            if (ref.gpu->gis[gi].used && ref.gpu->gis[gi].cis[ci].used && k++ == index) {
                *mig = mig_handle(ref.index, gi, ci);
                READ_END(NVML_SUCCESS);
            }
    READ_END(NVML_ERROR_NOT_FOUND);
}

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *isMig) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_device(d, &ref), isMig);
    if (r == NVML_SUCCESS)
        *isMig = ref.ci != NULL;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t *parent) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_device(mig, &ref);
    if (r == NVML_SUCCESS && (!ref.ci || !parent))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *parent = gpu_handle(ref.index);
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int *id) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_mig_device_out(d, &ref, id);
    if (r == NVML_SUCCESS)
        *id = ref.gi_id;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned int *id) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_mig_device_out(d, &ref, id);
    if (r == NVML_SUCCESS)
        *id = ref.ci_id;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t d, nvmlDeviceAttributes_t *attr) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_device(d, &ref);
    if (r == NVML_SUCCESS && !ref.ci)
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS && !attr)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        const struct gs_profile_spec *gp = gs_model_profile_by_id(ref.gpu->model, ref.gi->profile_id);
        *attr = (nvmlDeviceAttributes_t){
            .multiprocessorCount = gp->sm * ref.ci->size / gp->slices,
            .sharedCopyEngineCount = gp->ce,
            .sharedDecoderCount = gp->dec,
            .sharedEncoderCount = gp->enc,
            .sharedJpegCount = gp->jpeg,
            .sharedOfaCount = gp->ofa,
            .gpuInstanceSliceCount = gp->slices,
            .computeInstanceSliceCount = ref.ci->size,
            .memorySizeMB = gp->mem_mib,
        };
    }
    READ_END(r);
}
