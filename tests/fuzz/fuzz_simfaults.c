/* fuzz_simfaults.c: libFuzzer target for the simulated NVML library's fault schedule
 * (GPUSLICE_SIM_FAULTS): parsing must never crash, a refused schedule leaves nothing behind, and
 * an accepted one must print and parse back to the same entries and count without overflow. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../sim/faults.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    struct sim_faults *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
    char *again = malloc(SIM_FAULTS_MAX * 128 + 1);
    if (!text || !a || !b || !again)
        goto out;
    memcpy(text, data, size);
    text[size] = '\0';
    char err[512];
    if (sim_faults_parse("GPUSLICE_SIM_FAULTS", text, a, err, sizeof(err)) < 0) {
        if (a->n != 0 || !err[0])
            __builtin_trap();
        goto out;
    }
    if (a->n > SIM_FAULTS_MAX)
        __builtin_trap();
    size_t len = 0;
    again[0] = '\0';
    for (unsigned i = 0; i < a->n; i++) {
        const struct sim_fault *f = &a->entries[i];
        const char *ename = sim_faults_error_name(f->ret);
        if (!f->func || !ename || f->ret == NVML_SUCCESS || f->nth == 0 || f->counter > i)
            __builtin_trap();
        len += (size_t)snprintf(again + len, SIM_FAULTS_MAX * 128 + 1 - len, "%s%s:%llu%s:%s", i ? "," : "", f->func,
                                f->nth, f->and_later ? "+" : "", ename);
    }
    if (sim_faults_parse("again", again, b, err, sizeof(err)) < 0 || b->n != a->n)
        __builtin_trap();
    for (unsigned i = 0; i < a->n; i++) {
        const struct sim_fault *x = &a->entries[i], *y = &b->entries[i];
        if (strcmp(x->func, y->func) || x->nth != y->nth || x->and_later != y->and_later || x->ret != y->ret ||
            x->counter != y->counter)
            __builtin_trap();
    }
    /* A few calls of every function named: an entry fires only at or after its call number. */
    for (unsigned round = 1; round <= 4; round++) {
        for (unsigned i = 0; i < a->n; i++) {
            const struct sim_fault *hit;
            nvmlReturn_t r = sim_faults_next(a, a->entries[i].func, &hit);
            if ((r == NVML_SUCCESS) != (hit == NULL))
                __builtin_trap();
            if (hit && (a->calls[hit->counter] < hit->nth ||
                        (!hit->and_later && a->calls[hit->counter] != hit->nth)))
                __builtin_trap();
        }
    }
out:
    free(text);
    free(a);
    free(b);
    free(again);
    return 0;
}
