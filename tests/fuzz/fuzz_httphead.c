/* fuzz_httphead.c: libFuzzer target for the metrics server's HTTP request head parser. A head it
 * accepts must end in an empty line inside the input, and its fields must be terminated strings
 * of the allowed characters; feeding the input a byte at a time must give the same answer once
 * complete (no result depends on where a read split the bytes). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/httphead.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *buf = (const char *)data;
    struct gs_http_head h, g;
    int n = gs_http_parse_head(buf, size, &h);
    if (n > 0) {
        if ((size_t)n > size || buf[n - 1] != '\n')
            __builtin_trap();
        if (strlen(h.method) >= sizeof(h.method) || strlen(h.path) >= sizeof(h.path) || !h.method[0])
            __builtin_trap();
        for (const char *p = h.path; *p; p++)
            if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f || *p == '?')
                __builtin_trap();
        if (h.minor < 0 || h.minor > 9)
            __builtin_trap();
    }
    /* Every prefix is either incomplete or already decided the same way. */
    for (size_t k = 0; k < size && k < 512; k++) {
        int m = gs_http_parse_head(buf, k, &g);
        if (m > 0 && m != n)
            __builtin_trap();
        if (m < 0 && m != n)
            __builtin_trap();
    }
    return 0;
}
