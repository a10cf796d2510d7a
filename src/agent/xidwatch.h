/* xidwatch.h: the agent's NVML event thread. It waits in nvmlEventSetWait and forwards each Xid
 * event, as a struct gpu_event, to a pipe the main loop reads. */
#ifndef GS_AGENT_XIDWATCH_H
#define GS_AGENT_XIDWATCH_H

#include "gpu/gpu.h"

struct xidwatch;

/* Opens the node's event set and starts the thread, which writes to pipe_wr and owns it from then
 * on. Returns 0, or -errno (gpu_node_error says why; pipe_wr stays the caller's). */
int xidwatch_start(struct gpu_node *node, int pipe_wr, struct xidwatch **out);

/* Stops the thread without waiting for its NVML wait to end: a thread outside the wait is joined
 * and everything freed; one inside it is left to the process's exit with what it uses (the event
 * set, the pipe, the library: gpu_node_close sees the wait). NULL: nothing. */
void xidwatch_stop(struct xidwatch *x);

#endif
