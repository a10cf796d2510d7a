/* fuzz_ldcache.c: libFuzzer target for the linker cache reader. Every entry it reports must be
 * two NUL-terminated strings inside the input; an error is one line naming the input. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cdi/ldcache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct bounds {
    const uint8_t *data;
    size_t size;
};

static int check(const char *soname, const char *path, uint32_t flags, void *ctx) {
    const struct bounds *b = ctx;
    (void)flags;
    const uint8_t *s = (const uint8_t *)soname, *p = (const uint8_t *)path;
    if (s < b->data || s >= b->data + b->size || p < b->data || p >= b->data + b->size ||
        s + strlen(soname) >= b->data + b->size || p + strlen(path) >= b->data + b->size)
        __builtin_trap();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct bounds b = { data, size };
    char err[256];
    if (gs_ldcache_walk("cache", data, size, check, &b, err, sizeof(err)) < 0 &&
        (strncmp(err, "cache: ", 7) != 0 || strchr(err, '\n')))
        __builtin_trap();
    return 0;
}
