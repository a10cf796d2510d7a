/* miglayout.h: MIG layout files in mig-parted's v1 format, parsed and validated. Pure parsing:
 * gs_miglayout_load is the only function that reads a file. Profile names are kept as written and
 * resolved per GPU model when the layout is applied (the same name can mean different profile IDs
 * on different GPUs).
 *
 *   version: v1
 *   mig-configs:
 *     all-disabled:
 *       - devices: all
 *         mig-enabled: false
 *     custom:
 *       - devices: [0, 1, 2, 3]             # NVML indices, or "all"
 *         mig-enabled: true
 *         mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
 *       - device-filter: ["0x233010DE"]      # optional PCI device IDs (0x<device><vendor>)
 *         devices: all
 *         mig-enabled: false
 *
 * Rules (mig-parted's): version "v1"; mig-configs maps names to non-empty lists; devices and
 * mig-enabled required; mig-devices required when enabled (may be {}), absent or empty when
 * disabled; counts >= 0 and a non-empty map may not have all counts 0; profile names match
 * [<c>c.]<g>g.<n>gb[+attr[,attr]|-attr]; unknown keys are errors. */
#ifndef GS_MIGLAYOUT_H
#define GS_MIGLAYOUT_H

#include <stdbool.h>
#include <stddef.h>

#define GS_LAYOUT_MAX_CONFIGS 128 /* mig-parted's default file has 68 */
#define GS_LAYOUT_MAX_ITEMS 16
#define GS_LAYOUT_MAX_PROFILES 16
#define GS_LAYOUT_MAX_FILTERS 16
#define GS_LAYOUT_NAME_MAX 64
#define GS_LAYOUT_PROFILE_MAX 32

struct gs_layout_count {
    char profile[GS_LAYOUT_PROFILE_MAX]; /* "1g.10gb", "1g.10gb+me" */
    unsigned count;
    unsigned line, column;               /* of the key, for "unknown profile for this model" errors */
};

struct gs_layout_item {
    bool all_devices;
    unsigned long long device_mask;      /* devices: [indices] (0..63) */
    unsigned top_index, top_at;          /* the highest index listed and its position in the list */
    unsigned top_line, top_column;       /* where it is written, for "no such GPU" errors */
    unsigned n_filters;
    unsigned filters[GS_LAYOUT_MAX_FILTERS]; /* PCI device IDs, 0x<device><vendor> */
    bool mig_enabled;
    unsigned n_counts;
    struct gs_layout_count counts[GS_LAYOUT_MAX_PROFILES];
    unsigned line;                       /* of the item, for messages */
};

struct gs_layout_config {
    char name[GS_LAYOUT_NAME_MAX];
    unsigned n_items;
    struct gs_layout_item items[GS_LAYOUT_MAX_ITEMS];
    unsigned line;
};

struct gs_layout_file {
    char name[256];                      /* the file, for messages */
    unsigned n_configs;
    struct gs_layout_config configs[GS_LAYOUT_MAX_CONFIGS];
};

/* Parses YAML text. On error returns -EINVAL (or -ENOMEM) and writes one line to err:
 *   "layouts.yaml:9:11: mig-configs.custom[0].mig-devices.1g.10gbb: invalid MIG profile name ..." */
int gs_miglayout_parse(const char *name, const char *text, size_t len, struct gs_layout_file *out, char *err,
                       size_t errlen);
int gs_miglayout_load(const char *path, struct gs_layout_file *out, char *err, size_t errlen);

const struct gs_layout_config *gs_miglayout_find(const struct gs_layout_file *f, const char *config);

/* The message for a config name that is neither in f (may be NULL) nor built in:
 * "no MIG config 'all-balancd' in layouts.yaml (its configs: a, b; built-in: all-disabled,
 * all-enabled, all-balanced, all-<profile>); did you mean 'all-balanced'?". Returns -ENOENT. */
int gs_miglayout_unknown_config(const struct gs_layout_file *f, const char *config, char *err, size_t errlen);

/* True for a profile name of the grammar above ("1g.10gb", "1c.2g.20gb", "1g.10gb+me"). */
bool gs_miglayout_profile_valid(const char *name);

/* Refuses a config whose `devices` lists a GPU index the node does not have (n_gpus GPUs):
 * -ENODEV and "layouts.yaml:9:22: mig-configs.custom[0].devices[1]: GPU 9 is not on this node
 * (it has 4 GPUs: 0-3)". */
int gs_miglayout_check_gpus(const struct gs_layout_file *f, const struct gs_layout_config *c, unsigned n_gpus,
                            char *err, size_t errlen);

/* The item that applies to GPU `index` with PCI device ID `pci` (both devices and device-filter
 * must match; as mig-parted applies every matching item in order, the last one wins), or NULL. */
const struct gs_layout_item *gs_layout_item_for(const struct gs_layout_config *c, unsigned index, unsigned pci);

#endif
