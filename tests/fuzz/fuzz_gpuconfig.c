/* fuzz_gpuconfig.c: the DRA driver's opaque config (gpuslice.io/v1alpha1 GpuConfig) as the
 * parameters' JSON text, and the quantities of consumedCapacity (first byte odd). */
#include <stddef.h>
#include <stdint.h>
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
        unsigned long long q;
        (void)dra_quantity_parse(text, &q);
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
