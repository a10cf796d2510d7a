/* handles.c: NVML handles of the simulated library. A handle points into one of four static
 * arrays (GPU, MIG device, GPU instance, compute instance) and names indices, never state: every
 * call resolves it against the current state, so a handle of a destroyed instance is refused. */
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "simlib.h"
#include "util/util.h"

/* ---- handle storage ------------------------------------------------------------------------------ */

enum handle_kind { H_GPU = 1, H_MIG, H_GI, H_CI };
struct sim_handle {
    unsigned kind, gpu, gi, ci;
};

static struct sim_handle gpu_handles[GS_NODE_MAX_GPUS];
static struct sim_handle mig_handles[GS_NODE_MAX_GPUS][SIM_MAX_GI][SIM_MAX_CI];
static struct sim_handle gi_handles[GS_NODE_MAX_GPUS][SIM_MAX_GI];
static struct sim_handle ci_handles[GS_NODE_MAX_GPUS][SIM_MAX_GI][SIM_MAX_CI];

/* ---- handle resolution ---------------------------------------------------------------------- */

static bool in_array(const void *p, const void *base, size_t bytes) {
    return (const char *)p >= (const char *)base && (const char *)p < (const char *)base + bytes;
}

static const struct sim_handle *as_handle(const void *p, unsigned kind) {
    const struct sim_handle *h = p;
    if (!p)
        return NULL;
    switch (kind) {
    case H_GPU:
        if (!in_array(p, gpu_handles, sizeof(gpu_handles)))
            return NULL;
        break;
    case H_MIG:
        if (!in_array(p, mig_handles, sizeof(mig_handles)))
            return NULL;
        break;
    case H_GI:
        if (!in_array(p, gi_handles, sizeof(gi_handles)))
            return NULL;
        break;
    case H_CI:
        if (!in_array(p, ci_handles, sizeof(ci_handles)))
            return NULL;
        break;
    default:
        return NULL;
    }
    return h->kind == kind ? h : NULL;
}

nvmlDevice_t gpu_handle(unsigned i) {
    gpu_handles[i] = (struct sim_handle){ H_GPU, i, 0, 0 };
    return (nvmlDevice_t)&gpu_handles[i];
}
nvmlDevice_t mig_handle(unsigned g, unsigned gi, unsigned ci) {
    mig_handles[g][gi][ci] = (struct sim_handle){ H_MIG, g, gi, ci };
    return (nvmlDevice_t)&mig_handles[g][gi][ci];
}
nvmlGpuInstance_t gi_handle(unsigned g, unsigned gi) {
    gi_handles[g][gi] = (struct sim_handle){ H_GI, g, gi, 0 };
    return (nvmlGpuInstance_t)&gi_handles[g][gi];
}
nvmlComputeInstance_t ci_handle(unsigned g, unsigned gi, unsigned ci) {
    ci_handles[g][gi][ci] = (struct sim_handle){ H_CI, g, gi, ci };
    return (nvmlComputeInstance_t)&ci_handles[g][gi][ci];
}

/* The GPU a handle names, in the current state (ref zeroed first). */
static nvmlReturn_t ref_gpu(const struct sim_handle *h, struct dev_ref *ref) {
    memset(ref, 0, sizeof(*ref));
    if (!h || h->gpu >= sim_st->n_gpus)
        return NVML_ERROR_INVALID_ARGUMENT;
    ref->gpu = &sim_st->gpus[h->gpu];
    ref->index = h->gpu;
    return ref->gpu->lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

/* The compute instance (and its GPU instance) a MIG-device or CI handle names, if it still exists. */
static nvmlReturn_t ref_ci(const struct sim_handle *h, struct dev_ref *ref) {
    struct sim_gi *gi = &ref->gpu->gis[h->gi];
    if (!ref->gpu->mig_current || !gi->used || !gi->cis[h->ci].used)
        return NVML_ERROR_INVALID_ARGUMENT; /* destroyed */
    ref->gi = gi;
    ref->ci = &gi->cis[h->ci];
    ref->gi_id = h->gi;
    ref->ci_id = h->ci;
    return NVML_SUCCESS;
}

nvmlReturn_t resolve_device(nvmlDevice_t d, struct dev_ref *ref) {
    const struct sim_handle *h = as_handle(d, H_GPU);
    if (!h)
        h = as_handle(d, H_MIG);
    nvmlReturn_t r = ref_gpu(h, ref);
    if (r == NVML_SUCCESS && h->kind == H_MIG)
        r = ref_ci(h, ref);
    return r;
}

nvmlReturn_t resolve_gpu(nvmlDevice_t d, struct dev_ref *ref) {
    nvmlReturn_t r = resolve_device(d, ref);
    if (r == NVML_SUCCESS && ref->gi)
        return NVML_ERROR_INVALID_ARGUMENT;
    return r;
}

nvmlReturn_t resolve_mig_gpu(nvmlDevice_t d, struct dev_ref *ref) {
    nvmlReturn_t r = resolve_gpu(d, ref);
    if (r != NVML_SUCCESS)
        return r;
    if (!ref->gpu->model->mig_mem_slices || !ref->gpu->mig_current)
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

nvmlReturn_t resolve_gi(nvmlGpuInstance_t g, struct dev_ref *ref) {
    const struct sim_handle *h = as_handle(g, H_GI);
    nvmlReturn_t r = ref_gpu(h, ref);
    if (r != NVML_SUCCESS)
        return r;
    if (!ref->gpu->mig_current || !ref->gpu->gis[h->gi].used)
        return NVML_ERROR_INVALID_ARGUMENT;
    ref->gi = &ref->gpu->gis[h->gi];
    ref->gi_id = h->gi;
    return NVML_SUCCESS;
}

nvmlReturn_t resolve_ci(nvmlComputeInstance_t c, struct dev_ref *ref) {
    const struct sim_handle *h = as_handle(c, H_CI);
    nvmlReturn_t r = ref_gpu(h, ref);
    return r == NVML_SUCCESS ? ref_ci(h, ref) : r;
}

nvmlReturn_t resolve_mig_device_out(nvmlDevice_t d, struct dev_ref *ref, const void *out) {
    nvmlReturn_t r = resolve_device(d, ref);
    if (r == NVML_SUCCESS && !ref->ci)
        r = NVML_ERROR_NOT_SUPPORTED;
    return with_out(r, out);
}
