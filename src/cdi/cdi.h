/* cdi.h: Container Device Interface specs for the node's GPUs and MIG devices (CDI 0.6.0, the
 * format in ../shared/reference/kubelet-device-plugin.md §3). Pure: device numbers come from the
 * caller (read from /proc/devices and driver/nvidia-caps/mig-minors), the result is JSON text.
 *
 * Devices: one per GPU, named by its UUID and by its index ("GPU-...", "0"), one per MIG device,
 * named by its UUID and "<gpu>:<gi>:<ci>" ("MIG-...", "0:3:0"). Replicas of a GPU use the GPU's
 * device. The spec-level edits hold the control nodes every CUDA container needs
 * (/dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools). */
#ifndef GS_CDI_H
#define GS_CDI_H

#include <stddef.h>

#include "core/alloc.h"
#include "core/inventory.h"

#define GS_CDI_KIND "nvidia.com/gpu"
#define GS_CDI_VERSION "0.6.0"

struct gs_dev_majors {
    int nvidia;      /* "nvidia-frontend" (or "nvidia"): /dev/nvidiaN, /dev/nvidiactl (minor 255) */
    int uvm;         /* "nvidia-uvm": /dev/nvidia-uvm (0), /dev/nvidia-uvm-tools (1); -1 if not loaded */
    int caps;        /* "nvidia-caps": /dev/nvidia-caps/nvidia-capN; -1 if absent */
};

/* Parses /proc/devices (its "Character devices:" section). The nvidia major is required; errors
 * name the file and line ("/proc/devices:3: malformed line"). Returns 0 or -EINVAL / -ENOENT. */
int gs_proc_devices_parse(const char *name, const char *text, struct gs_dev_majors *out, char *err, size_t errlen);

/* The spec as JSON text (malloc'ed, caller frees). kind: "vendor/class". mm may be NULL when no
 * GPU has MIG devices. Errors: -EINVAL (bad kind), -ENODEV (a MIG device without capability
 * minors or no nvidia-caps major), -ENOMEM; message in err. */
int gs_cdi_spec(const struct gs_inventory *inv, const struct gs_dev_majors *maj, const struct gs_mig_minors *mm,
                const char *kind, char **out, char *err, size_t errlen);

/* The fully qualified CDI name of a device: "nvidia.com/gpu=GPU-...". */
void gs_cdi_qualified(const char *kind, const char *name, char *buf, size_t len);

#endif
