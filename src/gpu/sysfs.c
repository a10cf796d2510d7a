/* sysfs.c: what the inventory takes from sysfs rather than NVML (see gpu.h). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpu/gpu.h"
#include "util/util.h"

/* SYSFS_ROOT/bus/pci/devices/<bus id>/numa_node, -1 when unknown. */
static int read_numa(const char *sysfs_root, const char *bus_id) {
    unsigned dom, bus, dev, fn;
    if (sscanf(bus_id, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4)
        return -1;
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/bus/pci/devices/%04x:%02x:%02x.%x/numa_node", sysfs_root, dom, bus, dev, fn);
    _cleanup_free_ char *text = NULL;
    if (gs_read_file(path, 64, &text, NULL) < 0)
        return -1;
    char *end;
    long v = strtol(text, &end, 10);
    if (end == text || v < 0 || v > 1024)
        return -1;
    return (int)v;
}

int gpu_inventory_read_sysfs(struct gpu_node *node, const char *sysfs_root, struct gs_inventory *inv) {
    int r = gpu_inventory_read(node, inv);
    if (r < 0)
        return r;
    for (unsigned i = 0; i < inv->n_gpus; i++)
        if (inv->gpus[i].bus_id[0])
            inv->gpus[i].numa_node = read_numa(sysfs_root ? sysfs_root : "/sys", inv->gpus[i].bus_id);
    return 0;
}
