/* fuzz_procmaps.c: libFuzzer target for the /proc/PID/maps reader. The first 8 bytes choose the
 * device and inode looked for; a match must be on a line that names that inode in decimal. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/procmaps.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 8)
        return 0;
    unsigned major = data[0] | (unsigned)(data[1] & 0x0f) << 8;
    unsigned minor = data[2] | (unsigned)data[3] << 8;
    unsigned long long ino = data[4] | (unsigned long long)data[5] << 8 | (unsigned long long)data[6] << 16 |
                             (unsigned long long)data[7] << 24;
    char *text = malloc(size - 8 + 1);
    if (!text)
        return 0;
    memcpy(text, data + 8, size - 8);
    text[size - 8] = '\0';
    if (gs_maps_has_file(text, major, minor, ino)) {
        char want[32];
        snprintf(want, sizeof(want), "%llu", ino);
        if (ino == 0 || !strstr(text, want))
            __builtin_trap();
    }
    free(text);
    return 0;
}
