/* fuzz_migminors.c: libFuzzer target for the /proc/driver/nvidia-caps/mig-minors parser. Checks
 * that an error is one line naming the input and that a success yields only well-formed entries. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    struct gs_mig_minors mm;
    char err[256];
    int r = gs_mig_minors_parse("mig-minors", text, &mm, err, sizeof(err));
    if (r < 0) {
        if (strncmp(err, "mig-minors", 10) != 0 || strchr(err, '\n'))
            __builtin_trap();
    } else {
        for (size_t i = 0; i < mm.n; i++)
            if (mm.entries[i].ci < -1)
                __builtin_trap();
        if (mm.n && gs_mig_minor_lookup(&mm, mm.entries[0].gpu, mm.entries[0].gi, mm.entries[0].ci) < 0)
            __builtin_trap();
        gs_mig_minors_free(&mm);
    }
    free(text);
    return 0;
}
