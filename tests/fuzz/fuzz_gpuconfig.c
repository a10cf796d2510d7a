/* fuzz_gpuconfig.c: the DRA driver's opaque config (gpuslice.io/v1alpha1 GpuConfig) as the
 * parameters' JSON text, and (first byte odd) a result's share with the text as its
 * consumedCapacity.memory (util/quantity.h, whole bytes) on a time-sliced GPU of 80 GiB. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dra/share.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 1 << 16)
        return 0;
    char *text = malloc(size);
    if (!text)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    char err[512];
    if (data[0] & 1) {
        struct dra_result r = { .request = "gpu", .device = "gpu-0", .n_capacity = 1 };
        struct dra_device d = { .name = "gpu-0", .sharing = DRA_SHARING_TIME_SLICING, .mem_total = 80ULL << 30 };
        struct dra_share sh;
        strcpy(r.capacity[0].name, "memory");
        snprintf(r.capacity[0].quantity, sizeof(r.capacity[0].quantity), "%s", text);
        int rc = dra_share_of(&r, &d, NULL, &sh, err, sizeof(err));
        if (rc == 0 && (sh.memory == 0 || sh.memory > d.mem_total))
            abort();
        if (rc < 0 && !memchr(err, '\0', sizeof(err)))
            abort();
    } else {
        struct dra_gpu_config cfg;
        int rc = dra_gpu_config_parse(text, &cfg, err, sizeof(err));
        if (rc == 0 && cfg.set && cfg.strategy != DRA_SHARING_TIME_SLICING && cfg.strategy != DRA_SHARING_MPS)
            abort();
        if (rc < 0 && !memchr(err, '\0', sizeof(err)))
            abort();
    }
    free(text);
    return 0;
}
