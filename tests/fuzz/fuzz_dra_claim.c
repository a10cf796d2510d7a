/* fuzz_dra_claim.c: the ResourceClaim JSON the DRA driver decodes at prepare (dra_claim_parse,
 * for the kubelet's namespace, name and UID or, first byte odd, as a claim of a list), with its
 * reservedFor pods, and the opaque config each request gets (the claim's configs decoded once,
 * dra_claim_configs_decode, then dra_config_for for each result). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dra/prepare.h"
#include "dra/share.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    static struct dra_claim c;
    char err[512];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    bool any = data[0] & 1;
    int rc = dra_claim_parse(text, len, DRA_DRIVER_DEFAULT, any ? NULL : "ns1", any ? NULL : "c",
                             any ? NULL : "0b7c0d4e-4f3a-4c1e-9d59-1b2f0c9e0a01", &c, err, sizeof(err));
    if (rc < 0) {
        if (!memchr(err, '\0', sizeof(err)) || c.n_configs != 0)
            abort();
        return 0;
    }
    if (c.n_results == 0 || c.n_results > DRA_MAX_RESULTS || c.n_configs > DRA_MAX_CONFIGS || !dra_uid_valid(c.uid))
        abort();
    if (c.n_pods > DRA_MAX_PODS)
        abort();
    static struct dra_claim_configs d;
    dra_claim_configs_decode(&c, &d);
    if (d.n != c.n_configs)
        abort();
    for (unsigned i = 0; i < c.n_results; i++) {
        struct dra_gpu_config cfg;
        if (strlen(c.results[i].request) >= sizeof(c.results[i].request) || c.results[i].n_capacity > DRA_MAX_CAPACITY)
            abort();
        if (dra_config_for(&c, &d, c.results[i].request, &cfg, err, sizeof(err)) == 0 && cfg.set &&
            cfg.strategy != DRA_SHARING_TIME_SLICING && cfg.strategy != DRA_SHARING_MPS)
            abort();
    }
    dra_claim_free(&c);
    return 0;
}
