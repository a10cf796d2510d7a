/* devrecord.c: an allocation's devices record (devrecord.h). */
#include "agent/devrecord.h"

#include <errno.h>
#include <stdio.h>

#include "util/util.h"

int agent_write_devices_record(const char *path, const char *resource, const char *const *ids, size_t n) {
    char devices[8192];
    size_t dl = 0;
    for (size_t i = 0; i < n && dl < sizeof(devices); i++)
        dl += (size_t)snprintf(devices + dl, sizeof(devices) - dl, "%s\t%s\n", resource, ids[i]);
    if (dl >= sizeof(devices))
        return -ENOBUFS;
    return gs_write_file_atomic(path, devices, dl, false);
}
