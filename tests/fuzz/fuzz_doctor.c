/* fuzz_doctor.c: the doctor's parsers of node files: the runtime config scanner (containerd and
 * CRI-O), the kubelet's device-plugin checkpoint (registered devices and pods' entries), CapEff. The first byte picks the parser. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "doctor/doctor.h"
#include "kubelet/plugindir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void pod_device(const char *uid, const char *container, const char *resource, const char *id, void *ctx) {
    (void)ctx;
    if (!uid || !container || !resource || !id)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    char err[256];
    switch (data[0] % 4) {
    case 0:
    case 1: {
        struct gs_doc_cdi_config c;
        enum gs_doc_runtime rt = data[0] % 4 ? GS_DOC_CRIO : GS_DOC_CONTAINERD;
        if (gs_doc_cdi_config_parse(rt, "fuzz.toml", text, len, &c, err, sizeof(err)) == 0) {
            if (c.n_dirs > GS_DOC_MAX_DIRS)
                abort();
            for (unsigned i = 0; i < c.n_dirs; i++)
                if (strlen(c.dirs[i]) >= GS_DOC_DIR_MAX)
                    abort();
            (void)gs_doc_cdi_enabled(rt, &c);
        }
        break;
    }
    case 2: {
        char names[GS_KL_MAX_RESOURCES][GS_KL_RESOURCE_MAX];
        unsigned n, devs;
        if (gs_kl_checkpoint_parse(text, len, names, GS_KL_MAX_RESOURCES, &n, &devs, err, sizeof(err)) == 0 &&
            n > GS_KL_MAX_RESOURCES)
            abort();
        (void)gs_kl_checkpoint_pods(text, len, pod_device, NULL, err, sizeof(err));
        break;
    }
    default: {
        unsigned long long cap;
        (void)gs_doc_capeff_parse(text, len, &cap);
        break;
    }
    }
    return 0;
}
