/* pci.c: where the simulated GPUs sit on the board (topology.c describes the layout): GPU
 * `index`'s PCI domain and bus, and its NUMA node. Pure, so that the root (root.c) and the NVML
 * queries (device.c, topology.c) share it without calling each other; and the PCIe level between
 * two GPUs that follows from it (nvmlDeviceGetTopologyCommonAncestor, the nearest GPUs). */
#include "simlib.h"

void sim_pci_location(unsigned index, unsigned *domain, unsigned *bus) {
    static const unsigned buses[8] = { 0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb };
    *domain = index / 8;
    *bus = buses[index % 8];
}

int sim_numa_node(unsigned index) { return (int)(index % 8 / 4); }

nvmlGpuTopologyLevel_t sim_topology_level(unsigned a, unsigned b) {
    unsigned da, ba, db, bb;
    sim_pci_location(a, &da, &ba);
    sim_pci_location(b, &db, &bb);
    if (a == b)
        return NVML_TOPOLOGY_INTERNAL;
    if (da != db)
        return NVML_TOPOLOGY_SYSTEM;
    if (a / 2 == b / 2)
        return NVML_TOPOLOGY_SINGLE;
    return sim_numa_node(a) == sim_numa_node(b) ? NVML_TOPOLOGY_NODE : NVML_TOPOLOGY_SYSTEM;
}
