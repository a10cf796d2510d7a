/* catalog.c: the GPU model catalogue (pure data). Sources: NVIDIA's MIG User Guide (supported
 * profiles per GPU), nvml.h 13.3.29 (as in NVIDIA/go-nvml) and real `nvidia-smi mig -lgip/-lgipp`
 * captures posted in NVIDIA/mig-parted and NVIDIA/gpu-operator issues; provenance per model is summarised in
 * docs/simulator.md. Rows marked verified=false hold numbers no real capture confirmed. */
#include "catalog/catalog.h"

#include <string.h>
#include <strings.h>

#include "util/util.h"

/* The 8-memory-slice family shares its placement table (verified on A100-40GB, H100-80GB and
 * H100 NVL; inferred for H200 and B200). */
#define STARTS_1G 7, { 0, 1, 2, 3, 4, 5, 6 }
#define STARTS_1G_REV2 4, { 0, 2, 4, 6 }
#define STARTS_2G 3, { 0, 2, 4 }
#define STARTS_3G 2, { 0, 4 }
#define STARTS_4G 1, { 0 }
#define STARTS_7G 1, { 0 }

/* Field order: nvml_profile, id, name, slices, mem_slices, max, mem_mib, sm, ce, dec, enc, jpeg, ofa,
 * n_starts, starts, verified. NVML profile indices: 0 1_SLICE, 1 2_SLICE, 2 3_SLICE, 3 4_SLICE,
 * 4 7_SLICE, 7 1_SLICE_REV1 (+me), 8 2_SLICE_REV1, 9 1_SLICE_REV2 (twice the memory). */

static const struct gs_profile_spec a30_profiles[] = {
    { 0, 14, "1g.6gb", 1, 1, 4, 5952, 14, 1, 1, 0, 0, 0, 4, { 0, 1, 2, 3 }, true },
    { 1, 5, "2g.12gb", 2, 2, 2, 11968, 28, 2, 2, 0, 0, 0, 2, { 0, 2 }, true },
    { 3, 0, "4g.24gb", 4, 4, 1, 24000, 56, 4, 4, 0, 1, 1, 1, { 0 }, true },
    { 7, 21, "1g.6gb+me", 1, 1, 1, 5952, 14, 1, 1, 0, 1, 1, 4, { 0, 1, 2, 3 }, true },
    { 8, 6, "2g.12gb+me", 2, 2, 1, 11968, 28, 2, 2, 0, 1, 1, 2, { 0, 2 }, true },
};

static const struct gs_profile_spec a100_40_profiles[] = {
    { 0, 19, "1g.5gb", 1, 1, 7, 4864, 14, 1, 0, 0, 0, 0, STARTS_1G, true },
    { 1, 14, "2g.10gb", 2, 2, 3, 9856, 28, 2, 1, 0, 0, 0, STARTS_2G, true },
    { 2, 9, "3g.20gb", 3, 4, 2, 19968, 42, 3, 2, 0, 0, 0, STARTS_3G, true },
    { 3, 5, "4g.20gb", 4, 4, 1, 19968, 56, 4, 2, 0, 0, 0, STARTS_4G, true },
    { 4, 0, "7g.40gb", 7, 8, 1, 40192, 98, 7, 5, 0, 1, 1, STARTS_7G, true },
    { 7, 20, "1g.5gb+me", 1, 1, 1, 4864, 14, 1, 1, 0, 1, 1, STARTS_1G, true },
    { 9, 15, "1g.10gb", 1, 2, 4, 9856, 14, 1, 1, 0, 0, 0, STARTS_1G_REV2, true },
};

static const struct gs_profile_spec a100_80_profiles[] = {
    { 0, 19, "1g.10gb", 1, 1, 7, 9856, 14, 1, 0, 0, 0, 0, STARTS_1G, true },
    { 1, 14, "2g.20gb", 2, 2, 3, 19968, 28, 2, 1, 0, 0, 0, STARTS_2G, true },
    { 2, 9, "3g.40gb", 3, 4, 2, 40192, 42, 3, 2, 0, 0, 0, STARTS_3G, true },
    { 3, 5, "4g.40gb", 4, 4, 1, 40192, 56, 4, 2, 0, 0, 0, STARTS_4G, true },
    { 4, 0, "7g.80gb", 7, 8, 1, 80384, 98, 7, 5, 0, 1, 1, STARTS_7G, true },
    { 7, 20, "1g.10gb+me", 1, 1, 1, 9856, 14, 1, 1, 0, 1, 1, STARTS_1G, true },
    /* No real capture of 1g.20gb on A100-80GB: ID 15 and SM 14 inferred, memory as 2g.20gb. */
    { 9, 15, "1g.20gb", 1, 2, 4, 19968, 14, 1, 1, 0, 0, 0, STARTS_1G_REV2, false },
};

static const struct gs_profile_spec h100_80_profiles[] = {
    { 0, 19, "1g.10gb", 1, 1, 7, 9984, 16, 1, 1, 0, 1, 0, STARTS_1G, true },
    { 1, 14, "2g.20gb", 2, 2, 3, 20096, 32, 2, 2, 0, 2, 0, STARTS_2G, true },
    { 2, 9, "3g.40gb", 3, 4, 2, 40448, 60, 3, 3, 0, 3, 0, STARTS_3G, true },
    { 3, 5, "4g.40gb", 4, 4, 1, 40448, 64, 4, 4, 0, 4, 0, STARTS_4G, true },
    { 4, 0, "7g.80gb", 7, 8, 1, 81152, 132, 8, 7, 0, 7, 1, STARTS_7G, true },
    { 7, 20, "1g.10gb+me", 1, 1, 1, 9984, 16, 1, 1, 0, 1, 1, STARTS_1G, true },
    { 9, 15, "1g.20gb", 1, 2, 4, 20096, 26, 1, 1, 0, 1, 0, STARTS_1G_REV2, true },
};

static const struct gs_profile_spec h100_nvl_profiles[] = {
    { 0, 19, "1g.12gb", 1, 1, 7, 11008, 16, 1, 1, 0, 1, 0, STARTS_1G, true },
    { 1, 14, "2g.24gb", 2, 2, 3, 22144, 32, 2, 2, 0, 2, 0, STARTS_2G, true },
    { 2, 9, "3g.47gb", 3, 4, 2, 47488, 60, 3, 3, 0, 3, 0, STARTS_3G, true },
    { 3, 5, "4g.47gb", 4, 4, 1, 47488, 64, 4, 4, 0, 4, 0, STARTS_4G, true },
    { 4, 0, "7g.94gb", 7, 8, 1, 95360, 132, 8, 7, 0, 7, 1, STARTS_7G, true },
    { 7, 20, "1g.12gb+me", 1, 1, 1, 11008, 16, 1, 1, 0, 1, 1, STARTS_1G, true },
    { 9, 15, "1g.24gb", 1, 2, 4, 22144, 26, 1, 1, 0, 1, 0, STARTS_1G_REV2, true },
};

/* H200: profile rows are real (8x H200 capture); the placement table is inferred from the family. */
static const struct gs_profile_spec h200_profiles[] = {
    { 0, 19, "1g.18gb", 1, 1, 7, 16384, 16, 1, 1, 0, 1, 0, STARTS_1G, true },
    { 1, 14, "2g.35gb", 2, 2, 3, 33024, 32, 2, 2, 0, 2, 0, STARTS_2G, true },
    { 2, 9, "3g.71gb", 3, 4, 2, 71168, 60, 3, 3, 0, 3, 0, STARTS_3G, true },
    { 3, 5, "4g.71gb", 4, 4, 1, 71168, 64, 4, 4, 0, 4, 0, STARTS_4G, true },
    { 4, 0, "7g.141gb", 7, 8, 1, 143104, 132, 8, 7, 0, 7, 1, STARTS_7G, true },
    { 7, 20, "1g.18gb+me", 1, 1, 1, 16384, 16, 1, 1, 0, 1, 1, STARTS_1G, true },
    { 9, 15, "1g.35gb", 1, 2, 4, 33024, 26, 1, 1, 0, 1, 0, STARTS_1G_REV2, true },
};

/* B200: 1g/2g rows are real captures; 3g/4g/7g memory and SM counts are unverified estimates
 * chosen so that go-nvlib's name rule reproduces the published names (3g.90gb, 4g.90gb, 7g.180gb). */
static const struct gs_profile_spec b200_profiles[] = {
    { 0, 19, "1g.23gb", 1, 1, 7, 22528, 18, 2, 1, 0, 1, 0, STARTS_1G, true },
    { 1, 14, "2g.45gb", 2, 2, 3, 45312, 36, 4, 2, 0, 2, 0, STARTS_2G, true },
    { 2, 9, "3g.90gb", 3, 4, 2, 91136, 54, 6, 3, 0, 3, 0, STARTS_3G, false },
    { 3, 5, "4g.90gb", 4, 4, 1, 91136, 72, 8, 4, 0, 4, 0, STARTS_4G, false },
    { 4, 0, "7g.180gb", 7, 8, 1, 182272, 144, 16, 7, 0, 7, 1, STARTS_7G, false },
    { 7, 20, "1g.23gb+me", 1, 1, 1, 22528, 18, 2, 1, 0, 1, 1, STARTS_1G, true },
    { 9, 15, "1g.45gb", 1, 2, 4, 45312, 30, 2, 1, 0, 1, 0, STARTS_1G_REV2, true },
};

#define PROFILES(p) GS_ARRAY_SIZE(p), p
#define NO_MIG 0, 0, NULL

static const struct gs_model models[] = {
    { "A30", "NVIDIA A30", 0x20B710DE, GS_ARCH_AMPERE, 8, 0, 24576, 56, 4, PROFILES(a30_profiles), true },
    { "A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", 0x20B010DE, GS_ARCH_AMPERE, 8, 0, 40960, 108, 8,
      PROFILES(a100_40_profiles), true },
    { "A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", 0x20B210DE, GS_ARCH_AMPERE, 8, 0, 81920, 108, 8,
      PROFILES(a100_80_profiles), false },
    { "H100-SXM5-80GB", "NVIDIA H100 80GB HBM3", 0x233010DE, GS_ARCH_HOPPER, 9, 0, 81559, 132, 8,
      PROFILES(h100_80_profiles), true },
    { "H100-NVL", "NVIDIA H100 NVL", 0x232110DE, GS_ARCH_HOPPER, 9, 0, 95830, 132, 8, PROFILES(h100_nvl_profiles),
      true },
    { "H200-SXM-141GB", "NVIDIA H200", 0x233510DE, GS_ARCH_HOPPER, 9, 0, 143771, 132, 8, PROFILES(h200_profiles),
      false },
    { "B200", "NVIDIA B200", 0x290110DE, GS_ARCH_BLACKWELL, 10, 0, 183359, 148, 8, PROFILES(b200_profiles), false },
    { "T4", "Tesla T4", 0x1EB810DE, GS_ARCH_TURING, 7, 5, 15360, 40, NO_MIG, true },
    { "L4", "NVIDIA L4", 0x27B810DE, GS_ARCH_ADA, 8, 9, 23034, 58, NO_MIG, true },
};

size_t gs_catalog_count(void) { return GS_ARRAY_SIZE(models); }

const struct gs_model *gs_catalog_get(size_t i) { return i < GS_ARRAY_SIZE(models) ? &models[i] : NULL; }

const struct gs_model *gs_catalog_find(const char *key) {
    if (!key)
        return NULL;
    for (size_t i = 0; i < GS_ARRAY_SIZE(models); i++)
        if (strcasecmp(models[i].key, key) == 0)
            return &models[i];
    return NULL;
}

const struct gs_model *gs_catalog_find_pci(unsigned pci_device_id) {
    for (size_t i = 0; i < GS_ARRAY_SIZE(models); i++)
        if (models[i].pci_device_id == pci_device_id)
            return &models[i];
    return NULL;
}

const char *gs_catalog_keys(void) {
    return "A30, A100-SXM4-40GB, A100-SXM4-80GB, H100-SXM5-80GB, H100-NVL, H200-SXM-141GB, B200, T4, L4";
}

const struct gs_profile_spec *gs_model_profile_by_id(const struct gs_model *m, unsigned id) {
    for (size_t i = 0; i < m->n_profiles; i++)
        if (m->profiles[i].id == id)
            return &m->profiles[i];
    return NULL;
}

const struct gs_profile_spec *gs_model_profile_by_nvml(const struct gs_model *m, unsigned nvml_profile) {
    for (size_t i = 0; i < m->n_profiles; i++)
        if (m->profiles[i].nvml_profile == nvml_profile)
            return &m->profiles[i];
    return NULL;
}

const struct gs_profile_spec *gs_model_profile_by_name(const struct gs_model *m, const char *name) {
    for (size_t i = 0; i < m->n_profiles; i++)
        if (strcmp(m->profiles[i].name, name) == 0)
            return &m->profiles[i];
    return NULL;
}
