/* fuzz_kubeconfig.c: libFuzzer target for the kubeconfig parser (src/kube/kubeconfig.c). A file it
 * accepts has an https:// or http:// server without a trailing '/', a namespace, credentials
 * that come in pairs (certificate and key) and decoded data that is PEM; a refused one has a
 * one-line message and leaves nothing allocated (ASan's leak check). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kube/kubeconfig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct kube_config c;
    char err[512] = "";
    int r = kube_config_parse("fuzz", (const char *)data, size, "/base", NULL, &c, err, sizeof err);
    if (r == 0) {
        size_t n = strlen(c.server);
        if ((strncmp(c.server, "https://", 8) && strncmp(c.server, "http://", 7)) || c.server[n - 1] == '/')
            __builtin_trap();
        if (!c.namespace || !c.namespace[0])
            __builtin_trap();
        if (!(c.cert_file || c.cert_pem) != !(c.key_file || c.key_pem))
            __builtin_trap();
        if ((c.ca_pem && !strstr(c.ca_pem, "-----BEGIN ")) || (c.token && c.token_file))
            __builtin_trap();
        if (c.ca_file && c.ca_file[0] != '/')
            __builtin_trap();
        kube_config_free(&c);
    } else {
        if (!err[0] || strchr(err, '\n') || c.server)
            __builtin_trap();
    }
    /* base64 on the raw bytes: decoded length follows the input's */
    char *out;
    size_t len;
    if (kube_base64_decode((const char *)data, size, &out, &len) == 0) {
        if (len > size / 4 * 3 || len + 2 < size / 4 * 3)
            __builtin_trap();
        free(out);
    }
    return 0;
}
