/* snapshot.h: the extender's nodes from a file instead of the API server (the bench, tests, a
 * what-if): the trace's node list (a .csv: sn, cpu_milli, memory_mib, gpu, model, as
 * `gpuslice replay` reads it) or a JSON snapshot:
 *   {"nodes": [{"name": "n1", "cpuMilli": 32000, "memoryMiB": 262144, "gpuModel": "A100",
 *               "gpus": 2, "gpuMemoryMiB": 81920, "replicas": 0, "gpuFree": [400, 400]}]}
 * (gpus defaults to gpuFree's length, gpuFree to 1000 per GPU). Reads the file only here. */
#ifndef GS_EXTENDER_SNAPSHOT_H
#define GS_EXTENDER_SNAPSHOT_H

#include <stddef.h>

#include "extender/model.h"

/* *nodes (malloc'd) and *n; -errno with "FILE: nodes[3].gpuFree[1]: ..." in err. */
int ex_snapshot_load(const char *path, struct ex_node_spec **nodes, size_t *n, char *err, size_t errlen);
/* The JSON snapshot from text (pure), for tests and the fuzz-minded. */
int ex_snapshot_parse(const char *text, size_t len, const char *what, struct ex_node_spec **nodes, size_t *n, char *err,
                      size_t errlen);

#endif
