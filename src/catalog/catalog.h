/* catalog.h: the GPU model catalogue. Pure data, no I/O.
 *
 * Real MIG data per model (GPU-instance profile IDs, names, memory in MiB, SM counts, instance
 * caps, placements in memory slices), from captures of `nvidia-smi mig -lgip/-lgipp` and NVML
 * (sources and confidence in docs/simulator.md). Used by the simulated NVML library and by offline
 * tools. Running code never plans from this table: it reads each GPU's profiles from NVML. */
#ifndef GS_CATALOG_H
#define GS_CATALOG_H

#include <stdbool.h>
#include <stddef.h>

/* nvmlDeviceArchitecture_t values. */
enum gs_arch {
    GS_ARCH_TURING = 6,
    GS_ARCH_AMPERE = 7,
    GS_ARCH_ADA = 8,
    GS_ARCH_HOPPER = 9,
    GS_ARCH_BLACKWELL = 10,
};

#define GS_MAX_STARTS 8

struct gs_profile_spec {
    unsigned nvml_profile;        /* NVML_GPU_INSTANCE_PROFILE_* index (0 = 1 slice, 7 = 1 slice REV1, ...) */
    unsigned id;                  /* GI profile ID, as nvidia-smi -lgip prints (19, 20, 15, 14, 9, 5, 0 on 8-slice GPUs) */
    const char *name;             /* "1g.10gb", "1g.10gb+me" */
    unsigned slices;              /* compute (GPU) slices: sliceCount */
    unsigned mem_slices;          /* memory slices occupied: placement size */
    unsigned max_instances;       /* instanceCount */
    unsigned long long mem_mib;   /* memorySizeMB (MiB) */
    unsigned sm, ce, dec, enc, jpeg, ofa;
    unsigned n_starts;
    unsigned starts[GS_MAX_STARTS]; /* valid placement starts, in memory slices */
    bool verified;                /* false: numbers not seen in a real capture (see docs/simulator.md) */
};

struct gs_model {
    const char *key;              /* catalogue name used in node descriptions: "H100-SXM5-80GB" */
    const char *nvml_name;        /* what nvmlDeviceGetName returns: "NVIDIA H100 80GB HBM3" */
    unsigned pci_device_id;       /* packed as NVML's pciDeviceId: 0x<device><vendor> */
    enum gs_arch arch;
    int cc_major, cc_minor;       /* CUDA compute capability */
    unsigned long long mem_mib;   /* total framebuffer memory as NVML reports it (MiB) */
    unsigned sm_count;
    unsigned mig_mem_slices;      /* 8 (A100/H100/H200/B200), 4 (A30), 0 = not MIG-capable */
    size_t n_profiles;
    const struct gs_profile_spec *profiles; /* in NVML profile-index order */
    bool verified;                /* false if any row is unverified */
};

size_t gs_catalog_count(void);
const struct gs_model *gs_catalog_get(size_t i);
/* Case-insensitive lookup by catalogue key. NULL if unknown. */
const struct gs_model *gs_catalog_find(const char *key);
/* Lookup by PCI device ID (0x<device><vendor>). NULL if unknown. */
const struct gs_model *gs_catalog_find_pci(unsigned pci_device_id);
/* Comma-separated list of every key, for error messages ("A30, A100-SXM4-40GB, ..."). */
const char *gs_catalog_keys(void);

/* A model's board as the driver reports it (src/catalog/board.c cites the sources). Every model of
 * the catalogue has one. */
struct gs_board {
    unsigned max_graphics_mhz, max_mem_mhz, max_video_mhz; /* Max Clocks (the SM clock is the graphics clock) */
    unsigned app_graphics_mhz, app_mem_mhz;                /* Default Applications Clocks */
    unsigned power_default_mw, power_min_mw, power_max_mw; /* power management limit and its bounds */
    unsigned pcie_gen, pcie_width;                         /* maximum PCIe link generation and width */
    unsigned long long bar1_mib;
    unsigned fans;                                         /* 0: passively cooled (every data-center board) */
    const char *vbios;
    bool verified;                                         /* true: clocks and power from a capture */
};
const struct gs_board *gs_model_board(const struct gs_model *m);

/* Profile lookups within one model; NULL if absent. */
const struct gs_profile_spec *gs_model_profile_by_id(const struct gs_model *m, unsigned id);
const struct gs_profile_spec *gs_model_profile_by_nvml(const struct gs_model *m, unsigned nvml_profile);
const struct gs_profile_spec *gs_model_profile_by_name(const struct gs_model *m, const char *name);

#endif
