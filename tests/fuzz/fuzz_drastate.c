/* fuzz_drastate.c: the kubelet's DRA manager checkpoint (src/kubelet/drastate.h) and the pod logs
 * directory's names. The first byte picks the parser; for the checkpoint, an input that is a Data
 * text alone is also tried wrapped with its right checksum, so that the fuzzer reaches past the
 * checksum. Every device handed out has its fields set and within the checkpoint's bounds. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kubelet/drastate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void device(const struct gs_kl_dra_device *d, void *ctx) {
    (void)ctx;
    if (!d->claim_uid || !d->ns || !d->claim || !d->pod_uid || !d->driver || !d->pool || !d->device)
        abort();
    if (!d->claim_uid[0] || strlen(d->claim_uid) > 39 || !d->pod_uid[0] || strlen(d->pod_uid) > 39 ||
        strlen(d->ns) > 63 || strlen(d->claim) > 253 || !d->driver[0] || !d->device[0] || strlen(d->device) > 253)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    char err[256];
    if (data[0] % 2 == 0) {
        (void)gs_kl_dra_state_each(text, len, device, NULL, err, sizeof(err));
        json_t *w = json_pack("{s:s%,s:I}", "Data", text, len, "Checksum", (json_int_t)gs_kl_crc32(text, len));
        char *s = w ? json_dumps(w, JSON_COMPACT) : NULL;
        if (s)
            (void)gs_kl_dra_state_each(s, strlen(s), device, NULL, err, sizeof(err));
        free(s);
        json_decref(w);
        return 0;
    }
    char name[512], ns[64], pod[GS_KL_POD_NAME_MAX], uid[40];
    snprintf(name, sizeof(name), "%.*s", (int)(len < sizeof(name) - 1 ? len : sizeof(name) - 1), text);
    if (gs_kl_pod_log_dir_parse(name, ns, pod, uid) == 0 && (!ns[0] || !pod[0] || !uid[0] || strchr(pod, '_')))
        abort();
    return 0;
}
