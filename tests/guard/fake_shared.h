/* fake_shared.h: the simulated driver's ground truth across processes (FAKE_CUDA_SHARED=FILE),
 * as the real driver knows it: every process's live bytes per device, held until the process frees
 * them or is gone (a zombie or reaped: the kernel driver frees a dead process's memory). The test
 * creates the file (zeroed, this size) and may set watch_quota; every allocation then checks, under
 * flock(FILE), the live bytes of all processes together on its device. Tests only. */
#ifndef GS_FAKE_SHARED_H
#define GS_FAKE_SHARED_H

#include <stdint.h>

#define FAKE_SHARED_PROCS 512
#define FAKE_SHARED_DEVICES 16

struct fake_shared {
    uint64_t watch_quota;                       /* set by the test; 0 = no watch */
    uint64_t violations;                        /* allocations after which the live bytes passed watch_quota */
    uint64_t max_over;                          /* the most by which they passed it */
    uint64_t max_live[FAKE_SHARED_DEVICES];     /* the most live bytes seen together, per device */
    struct {
        int32_t pid;
        uint32_t pad;
        uint64_t start_time;
        uint64_t used[FAKE_SHARED_DEVICES];
    } procs[FAKE_SHARED_PROCS];
};

#endif
