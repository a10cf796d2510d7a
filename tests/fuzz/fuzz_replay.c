/* fuzz_replay.c: libFuzzer target for the trace replay's CSV loaders and, on the small traces they
 * accept, the placement engine behind them. The input is a node CSV, a NUL byte, then a pod CSV.
 * Beyond what the sanitizers catch it checks the loaders' promises (an error is one non-empty line
 * that starts with the file's name; an accepted trace is within the engine's ranges) and that a
 * replay of an accepted trace ends with its results in range, under FGD and gpuslice's policy. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "place/replay.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* the bytes in a memory file; its /proc path into path */
static int memfile(const char *name, const uint8_t *data, size_t size, char *path, size_t len) {
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    if ((size && write(fd, data, size) != (ssize_t)size) || lseek(fd, 0, SEEK_SET) != 0) {
        close(fd);
        return -1;
    }
    snprintf(path, len, "/proc/self/fd/%d", fd);
    return fd;
}

static void check_error(int rc, const char *err, const char *path) {
    if (rc >= 0)
        return;
    if (rc == -ENOMEM)
        return;
    if (!err[0] || strchr(err, '\n') || strncmp(err, path, strlen(path)) != 0)
        __builtin_trap();
}

static void check_trace(const struct rp_trace *t) {
    if (!t->n_nodes || !t->n_pods)
        __builtin_trap();
    for (size_t i = 0; i < t->n_nodes; i++) {
        const struct pl_node *n = &t->nodes[i];
        if (n->n_gpu < 0 || n->n_gpu > PL_MAX_GPUS || n->cpu_cap < 0 || n->mem_cap < 0 || !t->node_names[i][0])
            __builtin_trap();
        for (int g = 0; g < n->n_gpu; g++)
            if (n->gpu_free[g] != PL_MILLI)
                __builtin_trap();
    }
    bool gpu = false;
    for (size_t i = 0; i < t->n_nodes; i++)
        gpu |= t->nodes[i].n_gpu > 0;
    if (!gpu)
        __builtin_trap(); /* rp_load_nodes refuses a cluster without a GPU */
    gpu = false;
    for (size_t i = 0; i < t->n_pods; i++) {
        const struct pl_pod *p = &t->pods[i];
        if (p->num_gpu < 0 || p->num_gpu > PL_MAX_GPUS || p->gpu_milli < 0 || p->gpu_milli > PL_MILLI ||
            (p->num_gpu > 1 && p->gpu_milli > 0 && p->gpu_milli < PL_MILLI) || p->cpu < 0 || p->mem < 0 ||
            !t->pod_names[i][0])
            __builtin_trap();
        gpu |= p->num_gpu > 0 && p->gpu_milli > 0;
    }
    if (!gpu)
        __builtin_trap(); /* rp_load_pods refuses a trace without a GPU request */
}

/* events the replay would have: the inflated GPU request over the smallest request */
static double events(const struct rp_trace *t) {
    double cap = 0, least = 0;
    for (size_t i = 0; i < t->n_nodes; i++)
        cap += (double)t->nodes[i].n_gpu * PL_MILLI;
    for (size_t i = 0; i < t->n_pods; i++) {
        double g = t->pods[i].num_gpu > 0 ? (double)t->pods[i].gpu_milli * t->pods[i].num_gpu : 0;
        if (g > 0 && (least == 0 || g < least))
            least = g;
    }
    return least > 0 ? 1.3 * cap / least + (double)t->n_pods : 0;
}

static void replay(const struct rp_trace *t, enum pl_policy pol) {
    struct rp_options o = { .policy = pol, .seed = 42, .inflation = 1.3 };
    struct rp_result r;
    if (rp_run(t, &o, &r) == 0) {
        if (r.n_pct < 0 || r.n_pct > RP_MAX_PCT + 1 || r.n_failed > r.n_events ||
            !(r.final_alloc_pct >= 0 && r.final_alloc_pct <= 100.0 + 1e-9))
            __builtin_trap();
        for (int x = 0; x < r.n_pct; x++)
            if (r.alloc_pct[x] == r.alloc_pct[x] && !(r.alloc_pct[x] >= 0 && r.alloc_pct[x] <= 100.01))
                __builtin_trap();
    }
    rp_result_release(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t nsize = nul ? (size_t)(nul - data) : size;
    const uint8_t *pods = nul ? nul + 1 : data + size;
    size_t psize = size - nsize - (nul ? 1 : 0);
    char npath[64], ppath[64], err[512];
    int nfd = memfile("nodes", data, nsize, npath, sizeof(npath));
    int pfd = memfile("pods", pods, psize, ppath, sizeof(ppath));
    if (nfd >= 0 && pfd >= 0) {
        struct rp_trace t = { 0 };
        err[0] = '\0';
        int rc = rp_load_nodes(&t, npath, err, sizeof(err));
        check_error(rc, err, npath);
        if (rc == 0) {
            err[0] = '\0';
            rc = rp_load_pods(&t, ppath, err, sizeof(err));
            check_error(rc, err, ppath);
        }
        if (rc == 0) {
            check_trace(&t);
            if (t.n_nodes <= 32 && events(&t) <= 3000) {
                replay(&t, PL_FGD);
                replay(&t, PL_GPUSLICE);
            }
        }
        rp_trace_free(&t);
    }
    if (nfd >= 0)
        close(nfd);
    if (pfd >= 0)
        close(pfd);
    return 0;
}
