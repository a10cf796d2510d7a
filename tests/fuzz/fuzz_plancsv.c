/* fuzz_plancsv.c: the CSV reader of `gpuslice plan` (src/consolidate/series.c): the input is split
 * at its first NUL into a memory and a duty file, both read in the two passes the command makes,
 * then aligned and, when that succeeds, planned on an H100 in auto mode (shared and MIG). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/catalog.h"
#include "consolidate/plan.h"
#include "consolidate/series.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    const char *nul = memchr(text, 0, size);
    size_t mlen = nul ? (size_t)(nul - text) : size;
    const char *duty = nul ? nul + 1 : "";
    size_t dlen = nul ? size - mlen - 1 : 0;
    struct cs_builder *b = NULL;
    char err[512];
    if (cs_builder_new(&b) < 0)
        return 0;
    int r = 0;
    for (unsigned pass = 0; pass < 2 && r == 0; pass++) {
        r = cs_csv_feed(b, CS_MEMORY, "m.csv", text, mlen, err, sizeof err);
        if (r == 0)
            r = cs_csv_feed(b, CS_DUTY, "d.csv", duty, dlen, err, sizeof err);
        if (r == 0 && pass == 0)
            r = cs_builder_grid(b, err, sizeof err);
    }
    struct cs_series in = { 0 };
    if (r == 0 && cs_builder_finish(b, CS_FILL_LAST, CS_MISSING_SKIP, &in, err, sizeof err) == 0 &&
        in.n * in.steps <= 100000) {
        struct cs_targets t = { .mode = CS_MODE_AUTO, .model = gs_catalog_find("H100-SXM5-80GB"), .gpus_per_node = 8,
                                .budget = 100 };
        struct cs_pack_opts o = { .search = true, .work_limit = 1000000 };
        struct cs_plan p;
        if (cs_plan_make(&in, &t, &o, &p, err, sizeof err) == 0)
            cs_plan_free(&p);
    }
    cs_series_free(&in);
    cs_builder_free(b);
    return 0;
}
