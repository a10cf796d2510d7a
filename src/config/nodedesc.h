/* nodedesc.h: the simulated node description (YAML), parsed and validated. Pure parsing: the
 * caller supplies the bytes; gs_nodedesc_load() is the only function that reads a file.
 *
 *   gpus:
 *     - model: H100-SXM5-80GB    # a key of the model catalogue (case-insensitive)
 *       count: 4                 # optional, default 1, 1..64 (total over all entries <= 64)
 *       mig: enabled             # optional: enabled|disabled (default disabled)
 *     - model: L4
 *       count: 2
 *   driver_version: "580.65.06" # optional, default "580.65.06"
 *   cuda_version: "13.0"        # optional, default "13.0" (major.minor)
 */
#ifndef GS_NODEDESC_H
#define GS_NODEDESC_H

#include <stdbool.h>
#include <stddef.h>

#include "catalog/catalog.h"

#define GS_NODE_MAX_GPUS 64

struct gs_node_gpu {
    const struct gs_model *model;
    bool mig_enabled;
};

struct gs_nodedesc {
    unsigned n_gpus;                         /* expanded: one entry per GPU, in NVML index order */
    struct gs_node_gpu gpus[GS_NODE_MAX_GPUS];
    char driver_version[32];                 /* digits and dots only */
    int cuda_major, cuda_minor;
};

/* Parses YAML text. `name` is used in error messages (normally the file path).
 * On error returns -EINVAL (or -ENOMEM) and writes one line to err:
 *   "node.yaml:4:12: gpus[0].model: unknown model 'H100'; known models: A30, ..." */
int gs_nodedesc_parse(const char *name, const char *text, size_t len, struct gs_nodedesc *out, char *err,
                      size_t errlen);

/* Reads and parses a file (at most 1 MiB). Errors as above; I/O errors name the file. */
int gs_nodedesc_load(const char *path, struct gs_nodedesc *out, char *err, size_t errlen);

#endif
