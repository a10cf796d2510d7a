/* fuzz_extclaims.c: libFuzzer target for the extender's DRA parsers (claims.h): a ResourceSlice,
 * a ResourceClaim, a ResourceClaimTemplate or a Pod's claims, chosen by the first byte, the rest
 * JSON. What is accepted is kept in a small state (slices of two nodes, claims allocated on them)
 * and judged: filter answers every node with a verdict and a bounded reason, the view for
 * prioritize is a node of at most PL_MAX_GPUS GPUs with shares in 0..1000, the devices' usage
 * comes back to zero when every claim is gone, and the node's DRA GPUs stay within the mask. */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "extender/claims.h"
#include "extender/model.h"
#include "extender/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const nodes[] = { "n1", "n2", "n3" };

static void judge(struct ex_dra *d, const struct ex_pod *p) {
    char why[EX_REASON_MAX];
    for (size_t k = 0; k < sizeof(nodes) / sizeof(nodes[0]); k++) {
        why[0] = '\0';
        enum ex_verdict v = ex_dra_filter(d, p, nodes[k], why, sizeof(why));
        if (v != EX_FIT && v != EX_FAIL && v != EX_UNRESOLVABLE)
            __builtin_trap();
        if (v != EX_FIT && (!why[0] || strlen(why) >= sizeof(why)))
            __builtin_trap();
        struct pl_node base = { .cpu_cap = 64000, .cpu_left = 64000, .mem_cap = 1 << 20, .mem_left = 1 << 20 };
        struct pl_node view;
        struct pl_pod q;
        int r = ex_dra_view(d, p, nodes[k], &base, &view, &q);
        if (r == 1) {
            if (view.n_gpu < 0 || view.n_gpu > PL_MAX_GPUS || q.num_gpu < 1 || q.gpu_milli < 1 ||
                q.gpu_milli > PL_MILLI)
                __builtin_trap();
            for (int g = 0; g < view.n_gpu; g++)
                if (view.gpu_free[g] < 0 || view.gpu_free[g] > PL_MILLI)
                    __builtin_trap();
        } else if (r != 0 && r != -ENOSPC) {
            __builtin_trap();
        }
        struct ex_node_spec s = { .n_gpu = 1, .gpu_free = { 1000 } };
        strcpy(s.name, nodes[k]);
        ex_dra_apply_node(d, &s);
        if (s.n_gpu < 0 || s.n_gpu > PL_MAX_GPUS)
            __builtin_trap();
        ex_dra_plugin_short(d, nodes[k], s.n_gpu, 2, why, sizeof(why));
    }
}

static json_t *load(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static json_t *load(const char *fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    json_t *j = json_loads(buf, 0, NULL);
    if (!j)
        __builtin_trap();
    return j;
}

/* two nodes' slices (n1: a shared GPU, n2: a whole one) and a claim allocated on each */
static void seed(struct ex_dra *d) {
    ex_dra_init(d, NULL);
    char err[512];
    for (int k = 0; k < 2; k++) {
        json_t *j = load("{\"metadata\": {\"name\": \"%s-s\"}, \"spec\": {\"driver\": \"gpu.gpuslice.io\", \"nodeName\": "
                         "\"%s\", \"pool\": {\"name\": \"%s\", \"generation\": 1}, \"devices\": [{\"name\": \"gpu-0\", "
                         "\"attributes\": {\"type\": {\"string\": \"gpu\"}, \"sharing\": {\"string\": \"%s\"}, "
                         "\"index\": {\"int\": 0}}, \"allowMultipleAllocations\": %s, \"capacity\": {\"memory\": "
                         "{\"value\": \"80Gi\", \"requestPolicy\": {\"default\": \"20Gi\", \"validRange\": {\"min\": "
                         "\"1Gi\", \"max\": \"80Gi\", \"step\": \"1Gi\"}}}, \"compute\": {\"value\": \"100\"}}}]}}",
                         nodes[k], nodes[k], nodes[k], k ? "exclusive" : "time-slicing", k ? "false" : "true");
        struct ex_dra_slice s;
        if (ex_dra_slice_from_json(j, d->driver, &s, err, sizeof(err)) != 1 || ex_dra_set_slice(d, &s) != 0)
            __builtin_trap();
        json_decref(j);
        j = load("{\"metadata\": {\"name\": \"c%d\", \"namespace\": \"ns\", \"uid\": \"u%d\"}, \"status\": "
                 "{\"allocation\": {\"devices\": {\"results\": [{\"driver\": \"gpu.gpuslice.io\", \"pool\": \"%s\", "
                 "\"device\": \"gpu-0\", \"consumedCapacity\": {\"memory\": \"30Gi\"}}]}}}}",
                 k, k, nodes[k]);
        struct ex_dra_claim c;
        if (ex_dra_claim_from_json(j, d->driver, false, &c, err, sizeof(err)) != 0 || ex_dra_set_claim(d, false, &c))
            __builtin_trap();
        json_decref(j);
    }
}

/* with every claim gone, no device has anything used */
static void check_empty(struct ex_dra *d) {
    while (d->n_claims)
        ex_dra_del_claim(d, false, d->claims[0].ns, d->claims[0].name);
    for (size_t k = 0; k < d->n_slices; k++)
        for (int i = 0; i < d->slices[k].n_dev; i++) {
            const struct ex_dra_dev *v = &d->slices[k].dev[i];
            if (v->n_alloc || v->used[0] || v->used[1] || v->used[2])
                __builtin_trap();
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    json_t *j = json_loadb((const char *)data + 1, size - 1, JSON_REJECT_DUPLICATES, NULL);
    if (!j)
        return 0;
    struct ex_dra d;
    seed(&d);
    char err[512] = "";
    struct ex_pod p = { .cpu = 100 };
    strcpy(p.ns, "ns");
    p.claims.n = 2;
    strcpy(p.claims.r[0].entry, "a");
    strcpy(p.claims.r[0].claim, "x");
    strcpy(p.claims.r[1].entry, "b");
    strcpy(p.claims.r[1].tmpl, "x");
    int r;
    switch (data[0] % 4) {
    case 0: {
        struct ex_dra_slice s;
        r = ex_dra_slice_from_json(j, d.driver, &s, err, sizeof(err));
        if (r == 1 && ex_dra_set_slice(&d, &s) != 0)
            __builtin_trap();
        break;
    }
    case 1:
    case 2: {
        struct ex_dra_claim c;
        bool tmpl = data[0] % 4 == 2;
        r = ex_dra_claim_from_json(j, d.driver, tmpl, &c, err, sizeof(err));
        if (r == 0) {
            snprintf(c.ns, sizeof(c.ns), "ns");
            snprintf(c.name, sizeof(c.name), "x"); /* the pod's claim and template */
            if (ex_dra_set_claim(&d, tmpl, &c) != 0)
                __builtin_trap();
        }
        break;
    }
    default: {
        struct ex_pod q;
        r = ex_pod_from_json(j, &q, err, sizeof(err));
        if (r == 0) {
            if (q.claims.n < 0 || q.claims.n > EX_CLAIMS_MAX)
                __builtin_trap();
            p.claims = q.claims;
        }
        break;
    }
    }
    if (r < 0 && !err[0])
        __builtin_trap(); /* a refusal says why */
    judge(&d, &p);
    check_empty(&d);
    ex_dra_free(&d);
    json_decref(j);
    return 0;
}
