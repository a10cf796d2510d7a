/* inventory.c: pure helpers over the inventory (no I/O). */
#include "core/inventory.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int gs_mig_profile_name(unsigned slices, unsigned long long mem_mib, unsigned long long gpu_mem_mib,
                        unsigned nvml_index, char *buf, unsigned len) {
    if (!slices || !mem_mib || !gpu_mem_mib || mem_mib > gpu_mem_mib)
        return -EINVAL;
    /* eighths = ceil(mem / total * 8); GB = round(eighths / 8 * ceil(total GiB)) */
    unsigned long long eighths = (mem_mib * 8 + gpu_mem_mib - 1) / gpu_mem_mib;
    unsigned long long total_gib = (gpu_mem_mib + 1023) / 1024;
    unsigned long long gb = (eighths * total_gib * 2 + 8) / 16; /* round half up */
    const char *suffix = "";
    if (nvml_index == 7 || nvml_index == 8) /* 1_SLICE_REV1, 2_SLICE_REV1: media extensions */
        suffix = "+me";
    int n = snprintf(buf, len, "%ug.%llugb%s", slices, gb, suffix);
    return n < 0 || (unsigned)n >= len ? -EINVAL : 0;
}

const struct gs_gi_profile *gs_gpu_profile_by_id(const struct gs_gpu *g, unsigned id) {
    for (unsigned i = 0; i < g->n_profiles; i++)
        if (g->profiles[i].id == id)
            return &g->profiles[i];
    return NULL;
}

const struct gs_gi_profile *gs_gpu_profile_by_name(const struct gs_gpu *g, const char *name) {
    for (unsigned i = 0; i < g->n_profiles; i++)
        if (strcmp(g->profiles[i].name, name) == 0)
            return &g->profiles[i];
    return NULL;
}

/* True if id is uuid, or uuid followed by "::". */
static bool names_uuid(const char *id, const char *uuid) {
    size_t n = strlen(uuid);
    return n && !strncmp(id, uuid, n) && (id[n] == '\0' || !strncmp(id + n, "::", 2));
}

int gs_inventory_gpu_of_device_id(const struct gs_inventory *inv, const char *id) {
    for (unsigned g = 0; g < inv->n_gpus; g++) {
        const struct gs_gpu *gpu = &inv->gpus[g];
        if (names_uuid(id, gpu->uuid))
            return (int)g;
        for (unsigned m = 0; m < gpu->n_mig; m++)
            if (names_uuid(id, gpu->mig[m].uuid))
                return (int)g;
    }
    return -1;
}

const char *gs_arch_name(unsigned arch) {
    switch (arch) {
    case 2: return "kepler";
    case 3: return "maxwell";
    case 4: return "pascal";
    case 5: return "volta";
    case 6: return "turing";
    case 7: return "ampere";
    case 8: return "ada";
    case 9: return "hopper";
    case 10: return "blackwell";
    case 13: return "rubin";
    default: return "unknown";
    }
}
