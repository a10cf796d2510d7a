/* fuzz_extquantity.c: libFuzzer target for the scheduler extender's quantities and a pod's sums
 * (ex_pod_from_json, its quantities read by util/quantity.h). The input is lines "K R Q [N]": N containers (1..2000;
 * K 'c'), init containers ('i') or the overhead ('o') asking quantity Q (Kubernetes' text, or
 * "#123" for a JSON integer) of resource R (0 cpu, 1 memory, 2 nvidia.com/gpu, 3
 * nvidia.com/gpu.shared, 4 gpuslice.io/gpu-compute, 5 gpuslice.io/gpu-memory). The pod is built
 * and mapped, and checked against the same sums taken in 128 bits: a pod whose sum does not fit
 * int64 (or its range) is refused with a reason, an accepted one has exactly the reference's
 * requests, so an overflow that wraps is a crash. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "extender/wire.h"
#include "util/quantity.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_CONTAINERS 5000
#define GIB_MAX (1 << 20)

static const char *const res[] = { "cpu", "memory", EX_RES_GPU, EX_RES_GPU_SHARED, EX_RES_COMPUTE, EX_RES_MEMORY };
enum { CPU, MEM, GPUS, COMPUTE, GPU_MEM, N_SUM };

typedef __int128 wide;

struct ref {
    wide main_[N_SUM], init[N_SUM], over[N_SUM];
    int bad; /* a quantity the mapping must refuse on its own */
};

/* quantity q's contribution to sums[] in the mapping's units (0: refused): CPU in thousandths, the
 * rest in units, rounded up as Kubernetes rounds (util/quantity.h, fuzzed by fuzz_quantity); GPUs
 * whole */
static int contribute(const char *q, json_t **val, int r, wide *sums) {
    int64_t x;
    if (q[0] == '#') {
        char *end;
        long long v = strtoll(q + 1, &end, 10);
        if (*end || end == q + 1)
            return 0;
        *val = json_integer(v);
        if (v < 0 || (r == 0 && v > INT64_MAX / 1000))
            return 0;
        x = r == 0 ? v * 1000 : v;
    } else {
        *val = json_string(q);
        if (gs_quantity_parse(q, r == 0 ? -3 : 0, r == 2 || r == 3 ? GS_QTY_EXACT : 0, &x) < 0 || x < 0)
            return 0;
    }
    switch (r) {
    case 0: sums[CPU] += x; break;
    case 1: sums[MEM] += x; break;
    case 4: sums[COMPUTE] += x; break;
    case 5:
        if (x > GIB_MAX)
            return 0;
        sums[GPU_MEM] += x;
        break;
    default: sums[GPUS] += x;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = strndup((const char *)data, size); /* lines of text: a NUL ends them */
    if (!text)
        return 0;
    json_t *containers = json_array(), *inits = json_array(), *overhead = json_object();
    struct ref ref = { { 0 }, { 0 }, { 0 }, 0 };
    size_t n_containers = 0;
    int partial_over = 0; /* the running main sum passed int64 (the mapping checks each step) */
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char kind, q[128];
        int r, n = 1;
        if (sscanf(line, " %c %d %127s %d", &kind, &r, q, &n) < 3 || r < 0 || r > 5 || n < 1 || n > 2000 ||
            (kind != 'c' && kind != 'i' && kind != 'o'))
            continue;
        if (kind == 'o') {
            json_t *v = NULL;
            wide one[N_SUM] = { 0 };
            if (json_object_get(overhead, res[r])) /* one value per resource, as in a ResourceList */
                continue;
            ref.bad |= !contribute(q, &v, r, one);
            json_object_set_new(overhead, res[r], v ? v : json_null());
            for (int k = 0; k < N_SUM; k++)
                ref.over[k] += one[k];
            continue;
        }
        for (int c = 0; c < n && n_containers < MAX_CONTAINERS; c++, n_containers++) {
            json_t *v = NULL;
            wide one[N_SUM] = { 0 };
            ref.bad |= !contribute(q, &v, r, one);
            json_array_append_new(kind == 'c' ? containers : inits,
                                  json_pack("{s:{s:{s:o}}}", "resources", "requests", res[r], v ? v : json_null()));
            for (int k = 0; k < N_SUM; k++) {
                if (kind == 'c') {
                    ref.main_[k] += one[k];
                    partial_over |= ref.main_[k] > INT64_MAX;
                } else if (one[k] > ref.init[k]) {
                    ref.init[k] = one[k];
                }
            }
        }
    }
    free(text);
    json_t *pod = json_pack("{s:{s:s,s:s,s:s},s:{s:o,s:o,s:o}}", "metadata", "uid", "u", "name", "p", "namespace",
                            "d", "spec", "containers", containers, "initContainers", inits, "overhead", overhead);
    if (!pod)
        __builtin_trap();
    wide tot[N_SUM];
    int fits = !ref.bad && !partial_over;
    for (int k = 0; k < N_SUM; k++) {
        tot[k] = (ref.main_[k] > ref.init[k] ? ref.main_[k] : ref.init[k]) + ref.over[k];
        fits &= tot[k] <= INT64_MAX;
    }
    fits &= tot[GPUS] <= PL_MAX_GPUS * 64 && tot[COMPUTE] <= 100000 && tot[GPU_MEM] <= GIB_MAX;
    struct ex_pod p;
    char err[512] = "";
    int e = ex_pod_from_json(pod, &p, err, sizeof(err));
    json_decref(pod);
    if (e == 0 && !fits)
        __builtin_trap(); /* accepted what does not fit: a wrapped sum */
    if (e != 0 && !err[0])
        __builtin_trap(); /* a refusal says why */
    if (e == 0) {
        wide mib = tot[MEM] / (1 << 20) + (tot[MEM] % (1 << 20) != 0);
        if (p.cpu != (int64_t)tot[CPU] || p.mem != (int64_t)mib || p.gpus != (int)tot[GPUS] ||
            p.compute_pct != (int)tot[COMPUTE] || p.gpu_mem_mib != (int64_t)tot[GPU_MEM] * 1024)
            __builtin_trap();
    } else if (fits) {
        __builtin_trap(); /* refused what fits */
    }
    return 0;
}
