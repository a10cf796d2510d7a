/* fuzz_podutil.c: libFuzzer target for the per-pod utilization's inputs (src/core/podutil.h):
 * a /proc/PID/cgroup text (first byte even: its pod UID must be a UID's characters, dashes for
 * underscores) or NVML samples (odd: 16 bytes each, folded in two reads; every mean in 0..1). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/podutil.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    if (data[0] % 2 == 0) {
        char *text = malloc(size);
        if (!text)
            return 0;
        memcpy(text, data + 1, size - 1);
        text[size - 1] = '\0';
        char uid[GS_POD_UID_MAX];
        if (gs_cgroup_pod_uid(text, uid) == 0) {
            if (strlen(uid) < 32 || strspn(uid, "0123456789abcdef-") != strlen(uid) || !gs_cgroup_in_pod(text))
                abort();
        } else if (uid[0]) {
            abort();
        }
        free(text);
        return 0;
    }
    size_t n = (size - 1) / 16;
    struct gs_util_sample *s = calloc(n + 1, sizeof(*s));
    if (!s)
        return 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = data + 1 + 16 * i;
        s[i].pid = p[0] | (unsigned)p[1] << 8;
        s[i].sm = p[2];
        memcpy(&s[i].ts_us, p + 8, 8);
    }
    struct gs_util_window w;
    gs_util_window_init(&w, 1000);
    struct gs_proc_util out[64];
    for (int round = 0; round < 2; round++) {
        unsigned long long now = w.last_seen_us + 1000000;
        unsigned m = gs_util_fold(&w, s, (unsigned)n, now, out, 64);
        if (m > 64)
            abort();
        for (unsigned i = 0; i < m; i++)
            if (!(out[i].ratio >= 0 && out[i].ratio <= 1))
                abort();
    }
    free(s);
    return 0;
}
