/* fuzz_guard_limits.c: libFuzzer target for the guard's limits file parser and formatter. What
 * the parser accepts must hold its bounds (absolute region, ordinals 0..15 listed once, UUIDs of
 * GPU-/MIG- or none, VRAM <= 1 PiB, compute <= 100 %, overhead <= 1 TiB) and have come from a file
 * of newline-terminated lines without NUL; the formatter must write it back as a text that parses
 * to the same limits. A refusal is one line naming the file. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../../guard/guard_limits.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_bounds(const struct gs_guard_limits *l) {
    if (l->region[0] != '/' || !memchr(l->region, '\0', sizeof(l->region)) || l->n_devices > GS_GUARD_MAX_DEVICES ||
        l->context_overhead > 1ULL << 40)
        __builtin_trap();
    unsigned seen = 0;
    for (unsigned i = 0; i < l->n_devices; i++) {
        const struct gs_guard_device_limit *d = &l->dev[i];
        if (d->ordinal < 0 || d->ordinal >= GS_GUARD_MAX_DEVICES || (seen & 1u << d->ordinal))
            __builtin_trap();
        seen |= 1u << d->ordinal;
        if (!memchr(d->uuid, '\0', sizeof(d->uuid)) ||
            (d->uuid[0] && strncmp(d->uuid, "GPU-", 4) && strncmp(d->uuid, "MIG-", 4)))
            __builtin_trap();
        if (d->vram > 1ULL << 50 || d->compute_pct > 100)
            __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    struct gs_guard_limits l, back;
    char err[512];
    if (gs_guard_limits_parse("f", text, size, &l, err, sizeof(err)) < 0) {
        if (strncmp(err, "f:", 2) != 0 || strchr(err, '\n'))
            __builtin_trap();
        return 0;
    }
    if (size == 0 || text[size - 1] != '\n' || memchr(text, '\0', size))
        __builtin_trap();
    check_bounds(&l);
    /* Cut inside the last line: refused as truncated. */
    if (size >= 2 && text[size - 2] != '\n' && gs_guard_limits_parse("f", text, size - 1, &back, err, sizeof(err)) == 0)
        __builtin_trap();
    static char buf[8192];
    int n = gs_guard_limits_format(&l, buf, sizeof(buf));
    if (n <= 0 || (size_t)n != strlen(buf) || gs_guard_limits_parse("f", buf, (size_t)n, &back, err, sizeof(err)) < 0)
        __builtin_trap();
    if (back.fail_closed != l.fail_closed || strcmp(back.region, l.region) || back.context_overhead != l.context_overhead ||
        back.n_devices != l.n_devices)
        __builtin_trap();
    for (unsigned i = 0; i < l.n_devices; i++)
        if (back.dev[i].ordinal != l.dev[i].ordinal || strcmp(back.dev[i].uuid, l.dev[i].uuid) ||
            back.dev[i].vram != l.dev[i].vram || back.dev[i].compute_pct != l.dev[i].compute_pct)
            __builtin_trap();
    return 0;
}
