/* procmaps.h: which processes map a given file, from /proc/PID/maps. The agent uses it to find
 * the processes of a container that runs under the guard (they map its counters region), so it can
 * compare the guard's counters with what NVML reports for those processes. Pure parsing. */
#ifndef GS_PROCMAPS_H
#define GS_PROCMAPS_H

#include <stdbool.h>

/* True if the text of a /proc/PID/maps file has a mapping of the file with device major:minor
 * and inode `ino`. Lines that do not have the kernel's layout ("start-end perms offset
 * major:minor inode [path]", hexadecimal device numbers) are skipped. */
bool gs_maps_has_file(const char *maps, unsigned major, unsigned minor, unsigned long long ino);

#endif
