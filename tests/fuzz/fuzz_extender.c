/* fuzz_extender.c: libFuzzer target for the scheduler extender's request parsers (ExtenderArgs'
 * scanner and its Pod mapping, ExtenderBindingArgs) and the decisions on what they accept: an
 * accepted request names only non-empty, bounded names inside its own copy of the body, and
 * filter and prioritize on a small cluster answer every name with a verdict and a score in 0..10. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "extender/model.h"
#include "extender/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct ex_model model;
static int ready;

static void setup(void) {
    struct ex_node_spec ns[3] = { 0 };
    const char *names[] = { "a", "b", "c" };
    for (int i = 0; i < 3; i++) {
        strcpy(ns[i].name, names[i]);
        strcpy(ns[i].model, i ? "A100" : "T4");
        ns[i].cpu = 32000, ns[i].mem = 65536, ns[i].n_gpu = i + 1, ns[i].gpu_mem_mib = i ? 81920 : 0;
        for (int g = 0; g <= i; g++)
            ns[i].gpu_free[g] = 1000 - 300 * g;
    }
    char err[256];
    if (ex_model_init(&model, PL_GPUSLICE, ns, 3, err, sizeof(err)) != 0)
        __builtin_trap();
    ready = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!ready)
        setup();
    const char *body = (const char *)data;
    char err[512];
    struct ex_args a;
    if (ex_args_parse(body, size, EX_REQ_NODES_MAX, &a, err, sizeof(err)) == 0) {
        if (!a.names)
            __builtin_trap();
        for (size_t k = 0; k < a.n_names; k++) {
            size_t n = strlen(a.names[k]);
            if (n == 0 || n >= EX_NAME_MAX)
                __builtin_trap();
        }
        size_t n = a.n_names < 64 ? a.n_names : 64;
        int64_t sc[64];
        char why[EX_REASON_MAX];
        for (size_t k = 0; k < n; k++) {
            enum ex_verdict v = ex_filter(&model, &a.pod, a.names[k], why, sizeof(why));
            if (v != EX_FIT && (!why[0] || strlen(why) >= sizeof(why)))
                __builtin_trap();
        }
        ex_prioritize(&model, &a.pod, a.names, n, sc);
        for (size_t k = 0; k < n; k++)
            if (sc[k] < 0 || sc[k] > EX_MAX_PRIORITY)
                __builtin_trap();
        size_t len;
        enum ex_verdict vs[64] = { 0 };
        char(*reasons)[EX_REASON_MAX] = calloc(64, EX_REASON_MAX);
        free(ex_filter_render(a.names, vs, reasons, n, &len));
        free(reasons);
        ex_args_free(&a);
    } else if (!err[0]) {
        __builtin_trap(); /* a refusal says why */
    }
    struct ex_bind_args b;
    err[0] = '\0';
    if (ex_bind_args_parse(body, size, &b, err, sizeof(err)) != 0 && !err[0])
        __builtin_trap();
    return 0;
}
