/* fuzz_dra_checkpoint.c: the DRA driver's checkpoint reader (dra_checkpoint_parse): whatever it
 * accepts has valid, distinct UIDs within the bounds, and renders to text that parses back to the
 * same claims. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dra/prepare.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct dra_checkpoint cp, back;
    char err[512];
    int rc = dra_checkpoint_parse((const char *)data, size, &cp, err, sizeof(err));
    if (rc < 0) {
        if (cp.n || cp.claims || !memchr(err, '\0', sizeof(err)))
            abort();
        return 0;
    }
    if (cp.n > DRA_CHECKPOINT_MAX)
        abort();
    for (size_t i = 0; i < cp.n; i++) {
        if (!dra_uid_valid(cp.claims[i].uid) || cp.claims[i].n_devices > DRA_MAX_RESULTS ||
            dra_checkpoint_find(&cp, cp.claims[i].uid) != &cp.claims[i])
            abort();
    }
    char *text = dra_checkpoint_render(&cp);
    if (text) {
        if (dra_checkpoint_parse(text, strlen(text), &back, err, sizeof(err)) != 0 || back.n != cp.n)
            abort();
        for (size_t i = 0; i < cp.n; i++)
            if (memcmp(&back.claims[i], &cp.claims[i], sizeof(cp.claims[i])) != 0)
                abort();
        dra_checkpoint_free(&back);
        free(text);
    }
    dra_checkpoint_free(&cp);
    return 0;
}
