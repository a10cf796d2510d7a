/* fuzz_nodedesc.c: libFuzzer target for the node description parser. Beyond what the
 * sanitizers catch it checks the parser's promises: an error is one non-empty line starting
 * with the input name, and a success is a description the rest of gpuslice can trust. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "config/nodedesc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct gs_nodedesc nd;
    char err[512];
    memset(err, 'x', sizeof(err)); /* so a missing terminator shows up */

    int r = gs_nodedesc_parse("fuzz.yaml", (const char *)data, size, &nd, err, sizeof(err));
    if (r < 0) {
        if (!memchr(err, '\0', sizeof(err)) || strncmp(err, "fuzz.yaml:", 10) != 0 || strchr(err, '\n'))
            __builtin_trap();
        return 0;
    }
    if (nd.n_gpus == 0 || nd.n_gpus > GS_NODE_MAX_GPUS)
        __builtin_trap();
    for (unsigned i = 0; i < nd.n_gpus; i++) {
        if (!nd.gpus[i].model || (nd.gpus[i].mig_enabled && nd.gpus[i].model->mig_mem_slices == 0))
            __builtin_trap();
    }
    if (!memchr(nd.driver_version, '\0', sizeof(nd.driver_version)) ||
        strspn(nd.driver_version, "0123456789.") != strlen(nd.driver_version) || nd.cuda_major < 0 ||
        nd.cuda_minor < 0)
        __builtin_trap();
    return 0;
}
