/* frag.h: FGD's fragmentation measure (Weng et al., "Beware of Fragmentation: Scheduling
 * GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC '23; as their simulator,
 * hkust-adsl/kubernetes-scheduler-simulator, computes it in frag.go: NodeGpuShareFragAmount).
 * For a node state and a target workload (task specs with their probabilities), the fragment is
 * the expected free GPU of the node that the next task cannot use. Pure: no I/O, no allocation.
 *
 * It is a static library of its own (gs_frag, src/place/meson.build) because two libraries use it
 * that must not depend on each other: the placement engine (gs_place: FGD's score, gpuslice's
 * policy) and core (gs_core: core/alloc.c scores the GPUs of GetPreferredAllocation's
 * `fragmentation` policy with it). Both link gs_frag; core does not link the engine (its policies,
 * the cutting-stock solver, the replay), and gs_frag links nothing, so there is no cycle. */
#ifndef GS_FRAG_H
#define GS_FRAG_H

#include <stddef.h>
#include <stdint.h>

/* One spec of the target workload ("typical pods") with its probability. */
struct pl_target {
    int64_t cpu;     /* milli-CPU */
    int milli, num;  /* milli-GPU per GPU (0: CPU-only) and number of GPUs */
    uint32_t models; /* allowed GPU models (bit i = model i); 0: any */
    char spec[64];   /* the gpu_spec text: part of the engine's sort key, as in the simulator */
    double p;
};

/* Whether a model mask (0: any model) allows a node's model (-1: none). */
static inline int pl_model_ok(uint32_t models, int node_model) {
    if (!models)
        return 1;
    return node_model >= 0 && (models >> node_model & 1u);
}

/* F: the fragment (milli-GPU) of a node with cpu_left milli-CPU, mem_left MiB, n_gpu GPUs with
 * free_[g] milli-GPU free and GPU model node_model (-1: none), under the n_tg specs tg[]. A spec
 * that does not fit the node (CPU, memory when tg_mem is given, model, too few GPUs with enough
 * free) counts all the node's free GPU; one that fits, the GPUs with less free than it asks.
 * tg_mem[i]: the memory spec i needs; NULL: memory is not looked at (FGD's measure). The sums are
 * kept per case and added in the simulator's order, so the result is the simulator's bit for bit. */
double pl_frag(const struct pl_target *tg, size_t n_tg, const int64_t *tg_mem, int64_t cpu_left, int64_t mem_left,
               const int *free_, int n_gpu, int node_model);

#endif
