/* fuzz_nvconfig.c: NVIDIA's opaque configs (resource.nvidia.com/v1beta1 GpuConfig and
 * MigDeviceConfig) as the parameters' JSON text, read by dra_opaque_config_parse and, when read,
 * applied to an MPS device's share (dra_config_apply). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dra/nvconfig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16)
        return 0;
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char err[512], label[160];
    struct dra_gpu_config cfg;
    int rc = dra_opaque_config_parse(text, &cfg, label, sizeof(label), err, sizeof(err));
    if (rc < 0 && (!memchr(err, '\0', sizeof(err)) || cfg.set))
        abort();
    if (rc == 0) {
        if (cfg.mps_thread_pct > 100 || cfg.n_mps_pinned_per > DRA_MPS_MAX_PINNED ||
            (cfg.set && cfg.strategy != DRA_SHARING_TIME_SLICING && cfg.strategy != DRA_SHARING_MPS))
            abort();
        struct dra_device d = { .name = "gpu-0", .cdi = "GPU-0", .sharing = DRA_SHARING_MPS, .mem_total = 1ULL << 34 };
        struct dra_result r = { .request = "gpu", .device = "gpu-0" };
        struct dra_share s = { .sharing = DRA_SHARING_MPS, .compute = 100 };
        if (dra_config_apply(&cfg, &r, &d, &s, err, sizeof(err)) == 0 && (s.compute > 100 || s.memory > d.mem_total))
            abort();
    }
    free(text);
    return 0;
}
