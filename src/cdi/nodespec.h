/* nodespec.h: the node's CDI spec (cdi.h) from the system, and the MIG capability minors it and
 * Allocate's device specs need: the I/O around the pure spec builder, shared by the agent and
 * `gpuslice cdi generate`. */
#ifndef GS_CDI_NODESPEC_H
#define GS_CDI_NODESPEC_H

#include <stddef.h>

#include "core/alloc.h"
#include "core/inventory.h"

/* Reads and parses PROC_ROOT/driver/nvidia-caps/mig-minors (Allocate's device specs, CDI specs).
 * Returns 0 or -errno with "cannot read PATH: ..." or the parser's PATH:LINE error in err. */
int gs_cdi_read_mig_minors(const char *proc_root, struct gs_mig_minors *mm, char *err, size_t errlen);

/* The CDI spec of the node (cdi/cdi.h) from the system: device numbers from PROC_ROOT/devices
 * and mig-minors, the driver's libraries from READ_ROOT/etc/ld.so.cache and its tools from
 * READ_ROOT/usr/bin, where READ_ROOT is the host's DRIVER_ROOT as this process sees it (the
 * policy's containerDriverRoot; the spec names host paths under DRIVER_ROOT). A missing cache
 * only means no libraries (*n_driver_files says how many files were found). HOOK is the host path
 * of gpuslice-cdi-hook the spec names ("": none; NULL: the environment variable GPUSLICE_CDI_HOOK,
 * else GS_CDI_HOOK_PATH). Returns 0 with the JSON text in *out (caller frees), or -errno with the
 * file named in err. */
int gs_cdi_node_spec(const struct gs_inventory *inv, const char *proc_root, const char *driver_root,
                     const char *read_root, const char *kind, const char *hook, char **out, unsigned *n_driver_files,
                     char *err, size_t errlen);

#endif
