/* devrecord.h: an allocation's devices record, "RESOURCE\tID" lines, written at Allocate (shared.c,
 * on the gRPC thread) and read by the clean-up of gone pods (cleanup.c). Its own module, so that
 * the handlers and the clean-up do not call each other. */
#ifndef GS_AGENT_DEVRECORD_H
#define GS_AGENT_DEVRECORD_H

#include <stddef.h>

/* Writes the devices record of an allocation (atomically). 0 or -errno (-ENOBUFS: too many IDs). */
int agent_write_devices_record(const char *path, const char *resource, const char *const *ids, size_t n);

#endif
