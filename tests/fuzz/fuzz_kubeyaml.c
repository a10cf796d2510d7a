/* fuzz_kubeyaml.c: libFuzzer target for the YAML-to-JSON reader of `gpuslice kube create|replace|
 * apply -f` (src/cli/kubeyaml.c). An accepted text is one JSON object that jansson can write and
 * read back as the same value; a refused one has a one-line message ("NAME:LINE:COLUMN: ...") and
 * no object, says bad UTF-8 only where the text can hold some, and leaves nothing allocated (ASan's
 * leak check). */
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/kubeyaml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *obj = (json_t *)1;
    char err[512] = "";
    int r = cli_kube_yaml_object("fuzz", (const char *)data, size, &obj, err, sizeof err);
    if (r == 0) {
        if (!json_is_object(obj))
            __builtin_trap();
        char *s = json_dumps(obj, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!s)
            __builtin_trap();
        json_t *back = json_loads(s, 0, NULL);
        if (!back || !json_equal(back, obj))
            __builtin_trap();
        json_decref(back);
        free(s);
        json_decref(obj);
    } else {
        if ((r != -EINVAL && r != -ENOMEM) || obj || !err[0] || strchr(err, '\n') || strncmp(err, "fuzz", 4))
            __builtin_trap();
        /* bad UTF-8 needs a byte past ASCII or an escape to write it ("\\u..." in a scalar, "%b5"
         * in a tag, which YAML decodes as a URI escape); a text without any (nor a 'U' that a
         * message could quote back) cannot be refused as bad UTF-8 */
        bool plain_ascii = true;
        for (size_t i = 0; i < size; i++)
            if (data[i] >= 0x80 || data[i] == '\\' || data[i] == '%' || data[i] == 'U')
                plain_ascii = false;
        if (plain_ascii && strstr(err, "UTF-8"))
            __builtin_trap();
    }
    return 0;
}
