/* topology.c: where the simulated GPUs sit (PCI addresses and NUMA nodes: pci.c), the PCIe
 * topology between two GPUs (nvmlDeviceGetTopologyCommonAncestor) and NVLink (state, version,
 * what each link reaches), as NVIDIA's device plugin reads them for its preferred allocations.
 *
 * The layout is an 8-GPU HGX-style board per PCI domain: buses 0x18, 0x2a, 0x3a, 0x5d on NUMA
 * node 0 and 0x9a, 0xab, 0xba, 0xdb on NUMA node 1, GPUs 2k and 2k+1 behind one PCIe switch.
 * SXM boards (A100 SXM4: 12 NVLink 3 links; H100 SXM5, H200 SXM: 18 NVLink 4 links; B200: 18
 * NVLink 5 links) reach every other GPU through the board's NVSwitches, each link to one switch
 * (round-robin); the other boards have no NVLink (NOT_SUPPORTED, as a PCIe board answers). */
#include <stdio.h>
#include <string.h>

#include "simlib.h"
#include "util/util.h"

static const struct nvlink_board {
    const char *model;
    unsigned links, version, switches, switch_pci_id;
} boards[] = {
    { "A100-SXM4-40GB", 12, 3, 6, 0x1AF110DE },
    { "A100-SXM4-80GB", 12, 3, 6, 0x1AF110DE },
    { "H100-SXM5-80GB", 18, 4, 4, 0x22A310DE },
    { "H200-SXM-141GB", 18, 4, 4, 0x22A310DE },
    { "B200", 18, 5, 2, 0x22A310DE }, /* its NVSwitch ID not verified: Hopper's */
};

static const struct nvlink_board *board_of(const struct gs_model *m) {
    for (size_t i = 0; i < GS_ARRAY_SIZE(boards); i++)
        if (!strcmp(boards[i].model, m->key))
            return &boards[i];
    return NULL;
}

unsigned sim_nvlink_count(const struct gs_model *m) {
    const struct nvlink_board *b = board_of(m);
    return b ? b->links : 0;
}

void sim_fill_pci(unsigned domain, unsigned bus, unsigned device_id, nvmlPciInfo_t *pci) {
    memset(pci, 0, sizeof(*pci));
    pci->domain = domain;
    pci->bus = bus;
    pci->device = 0;
    pci->pciDeviceId = device_id;
    pci->pciSubSystemId = (device_id & 0xffff0000u) | 0x10DE;
    snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", pci->domain, pci->bus, pci->device);
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", pci->domain, pci->bus, pci->device);
}

EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t d1, nvmlDevice_t d2, nvmlGpuTopologyLevel_t *level) {
    READ_BEGIN;
    struct dev_ref a, b;
    nvmlReturn_t r = resolve_gpu(d1, &a);
    if (r == NVML_SUCCESS)
        r = with_out(resolve_gpu(d2, &b), level);
    if (r == NVML_SUCCESS)
        *level = sim_topology_level(a.index, b.index);
    READ_END(r);
}

/* A link of a GPU: NOT_SUPPORTED on a board without NVLink, INVALID_ARGUMENT for a link the board
 * does not have (NVML's "link is invalid"; NVML 13 counts up to NVML_NVLINK_MAX_LINKS, 36), then the
 * output pointer. */
static nvmlReturn_t resolve_link(nvmlDevice_t d, unsigned link, const void *out, struct dev_ref *ref,
                                 const struct nvlink_board **board) {
    nvmlReturn_t r = resolve_gpu(d, ref);
    if (r != NVML_SUCCESS)
        return r;
    *board = board_of(ref->gpu->model);
    if (!*board)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= (*board)->links)
        return NVML_ERROR_INVALID_ARGUMENT;
    return with_out(NVML_SUCCESS, out);
}

enum link_field { LINK_STATE, LINK_VERSION, LINK_REMOTE_TYPE };

/* One value of a link: its state, NVLink version, or the kind of device at its far end. */
static nvmlReturn_t link_value(const char *fn, nvmlDevice_t d, unsigned link, int *out, enum link_field f) {
    nvmlReturn_t ret_ = lock_state(false, fn);
    if (ret_ != NVML_SUCCESS)
        return ret_;
    struct dev_ref ref;
    const struct nvlink_board *b;
    nvmlReturn_t r = resolve_link(d, link, out, &ref, &b);
    if (r == NVML_SUCCESS)
        *out = f == LINK_STATE     ? NVML_FEATURE_ENABLED
               : f == LINK_VERSION ? (int)b->version
                                   : NVML_NVLINK_DEVICE_TYPE_SWITCH;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, nvmlEnableState_t *isActive) {
    return link_value(__func__, d, link, isActive, LINK_STATE);
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t d, unsigned int link, unsigned int *version) {
    int v = 0;
    nvmlReturn_t r = link_value(__func__, d, link, version ? &v : NULL, LINK_VERSION);
    if (r == NVML_SUCCESS)
        *version = (unsigned)v;
    return r;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t d, unsigned int link,
                                                        nvmlIntNvLinkDeviceType_t *type) {
    return link_value(__func__, d, link, type, LINK_REMOTE_TYPE);
}

/* The NVSwitch at the far end of the link: switches sit on buses 0x05.. of the board's domain. */
EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t *pci) {
    READ_BEGIN;
    struct dev_ref ref;
    const struct nvlink_board *b;
    nvmlReturn_t r = resolve_link(d, link, pci, &ref, &b);
    if (r == NVML_SUCCESS) {
        unsigned domain, bus;
        sim_pci_location(ref.index, &domain, &bus);
        sim_fill_pci(domain, 0x05 + link % b->switches, b->switch_pci_id, pci);
    }
    READ_END(r);
}
EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t *pci) {
    return nvmlDeviceGetNvLinkRemotePciInfo_v2(d, link, pci);
}
