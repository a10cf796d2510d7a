/* fuzz_cdiconflicts.c: libFuzzer target for the reader of other CDI specs on the node
 * (gs_cdi_conflicts: JSON or YAML written by anyone with access to /etc/cdi or /var/run/cdi).
 * Checks that it never reports more devices than it was asked about, that a result is one line
 * naming the file, and that it terminates its message. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cdi/cdi.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > GS_CDI_SCAN_MAX)
        return 0;
    static const char *const names[] = { "0", "1", "GPU-0e0b6bd4-5d8d-1b1b-0c1e-7f3a5e2b9c10", "0:1:0" };
    char msg[512];
    memset(msg, 'x', sizeof(msg));
    int r = gs_cdi_conflicts("gpuslice.io/gpu", names, 4, "spec.yaml", (const char *)data, size, msg, sizeof(msg));
    if (r > 4 || r < -4095 || !memchr(msg, '\0', sizeof(msg)))
        __builtin_trap();
    if (r > 0 && (strncmp(msg, "spec.yaml", 9) != 0 || strchr(msg, '\n')))
        __builtin_trap();
    return 0;
}
