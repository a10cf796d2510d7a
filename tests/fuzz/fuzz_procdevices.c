/* fuzz_procdevices.c: libFuzzer target for the /proc/devices parser (CDI device numbers). Checks
 * that an error is one line naming the input and that a success has an nvidia major in range. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cdi/cdi.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    struct gs_dev_majors maj;
    char err[256];
    int r = gs_proc_devices_parse("devices", text, &maj, err, sizeof(err));
    if (r < 0) {
        if (strncmp(err, "devices", 7) != 0 || strchr(err, '\n'))
            __builtin_trap();
    } else if (maj.nvidia < 0 || maj.nvidia > 4095 || maj.uvm > 4095 || maj.caps > 4095) {
        __builtin_trap();
    }
    free(text);
    return 0;
}
