/* cdi.h: Container Device Interface specs for the node's GPUs and MIG devices (the format in
 * the CNCF container-device-interface SPEC.md; cdiVersion: the lowest the content needs,
 * gs_cdi_min_version). Pure: device numbers come from the
 * caller (read from /proc/devices and driver/nvidia-caps/mig-minors), the result is JSON text.
 *
 * Devices: one per GPU, named by its UUID and by its index ("GPU-...", "0"), one per MIG device,
 * named by its UUID and "<gpu>:<gi>:<ci>" ("MIG-...", "0:3:0"). Replicas of a GPU use the GPU's
 * device. The spec-level edits hold the control nodes every CUDA container needs
 * (/dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools) and the driver's files: its compute
 * libraries, found in the driver root's linker cache, mounted read-only under
 * /usr/local/nvidia/lib64 (on the LD_LIBRARY_PATH of NVIDIA's CUDA images) by their sonames, and
 * its tools (nvidia-smi, ...) under /usr/local/nvidia/bin (on their PATH), the environment
 * NVIDIA_VISIBLE_DEVICES=void (so that NVIDIA's runtime in legacy mode adds no GPU of its own) and,
 * when libcuda is mounted and a hook path is given, a createContainer hook (gpuslice-cdi-hook,
 * src/cdihook/) that links libcuda.so -> libcuda.so.1 and adds the library directory to the
 * container's own linker cache. */
#ifndef GS_CDI_H
#define GS_CDI_H

#include <stdbool.h>
#include <stddef.h>

#include "core/alloc.h"
#include "core/inventory.h"

/* gpuslice's own kind: NVIDIA's container toolkit writes nvidia.com/gpu specs into the same
 * directories, and the CDI library drops every device two specs both define. The class has no
 * dot (a dot needs CDI 0.6.0). */
#define GS_CDI_KIND "gpuslice.io/gpu"
#define GS_CDI_HOOK_PATH "/usr/local/bin/gpuslice-cdi-hook" /* on the host; the chart installs it */

struct gs_dev_majors {
    int nvidia;      /* "nvidia-frontend" (or "nvidia"): /dev/nvidiaN, /dev/nvidiactl (minor 255) */
    int uvm;         /* "nvidia-uvm": /dev/nvidia-uvm (0), /dev/nvidia-uvm-tools (1); -1 if not loaded */
    int caps;        /* "nvidia-caps": /dev/nvidia-caps/nvidia-capN; -1 if absent */
};

/* Parses /proc/devices (its "Character devices:" section). The nvidia major is required; errors
 * name the file and line ("/proc/devices:3: malformed line"). Returns 0 or -EINVAL / -ENOENT. */
int gs_proc_devices_parse(const char *name, const char *text, struct gs_dev_majors *out, char *err, size_t errlen);

#define GS_CDI_MAX_DRIVER_FILES 48
#define GS_CDI_LIB_DIR "/usr/local/nvidia/lib64"
#define GS_CDI_BIN_DIR "/usr/local/nvidia/bin"

/* The driver's files to mount into containers. */
struct gs_cdi_driver {
    char hook[256]; /* the host path of gpuslice-cdi-hook ("": no hook); used when libcuda is mounted */
    bool modeset;   /* /dev/nvidia-modeset exists (read_root/dev/nvidia-modeset) */
    unsigned n;
    struct {
        char host[384];       /* under the driver root */
        char container[128];  /* GS_CDI_LIB_DIR/<soname> or GS_CDI_BIN_DIR/<name> */
    } files[GS_CDI_MAX_DRIVER_FILES];
};

/* Finds the driver's compute libraries (libcuda.so.1, libnvidia-ml.so.1, libnvidia-ptxjitcompiler,
 * libnvidia-nvvm, libcudadebugger, ...) in the driver root's linker cache (its bytes in cache, this
 * machine's architecture only, first entry per soname) and its tools in its usr/bin (exists() is
 * asked about read_root + path: the root as this process sees it, e.g. mounted in the agent's
 * container). The spec's host paths are host_root + the cache's paths, as the container runtime
 * on the host sees them. Returns 0 (possibly no files), or -EINVAL from the cache parser. */
int gs_cdi_driver_files(const char *host_root, const char *read_root, const unsigned char *cache, size_t len,
                        gs_exists_fn exists, void *ctx, struct gs_cdi_driver *out, char *err, size_t errlen);

/* The spec as JSON text (malloc'ed, caller frees). kind: "vendor/class". mm may be NULL when no
 * GPU has MIG devices; drv may be NULL (no driver files). Errors: -EINVAL (bad kind), -ENODEV (a
 * MIG device without capability minors or no nvidia-caps major), -ENOMEM; message in err. */
int gs_cdi_spec(const struct gs_inventory *inv, const struct gs_dev_majors *maj, const struct gs_mig_minors *mm,
                const struct gs_cdi_driver *drv, const char *kind, char **out, char *err, size_t errlen);

/* A transient spec for one allocation (CDI's "<vendor>-<class>_<id>" file): one device `name`
 * whose edits are the answer's per-container items, the guard's files and MPS's pipe and shared
 * memory as mounts (read-only ones "ro", others "rw", all "nosuid", "nodev", "rbind") and the
 * environment (GPUSLICE_GUARD_CONFIG, CUDA_MPS_*). JSON text in *out (caller frees); -ENOMEM. */
int gs_cdi_alloc_spec(const char *kind, const char *name, const struct gs_alloc_response *a, char **out, char *err,
                      size_t errlen);

struct json_t;

/* The lowest cdiVersion whose parser accepts the spec, computed as the CDI reference library's
 * MinimumRequiredVersion does (specs-go/version.go): "0.3.0", raised to 0.4.0 by a mount with a
 * type, 0.5.0 by a device name not starting with a letter or a device node with a hostPath,
 * 0.6.0 by annotations or a dot in the kind's class, 0.7.0 by intelRdt or additionalGids. */
const char *gs_cdi_min_version(const struct json_t *spec);

/* Another spec defining devices of ours: called with the file name and text (JSON or YAML, at
 * most GS_CDI_SCAN_MAX bytes) of another spec; writes "FILE: defines KIND=NAME, ... (n devices)"
 * into msg and returns the number of our device names (names[0..n)) it also defines under kind,
 * 0 when none, -EINVAL when the text is not a spec (msg: why). Hostile input: bounded depth. */
#define GS_CDI_SCAN_MAX (4u << 20)
int gs_cdi_conflicts(const char *kind, const char *const *names, size_t n, const char *file, const char *text,
                     size_t len, char *msg, size_t msglen);

/* The device names of a spec's JSON text (the spec gs_cdi_spec wrote): a malloc'ed array of n
 * pointers into a malloc'ed copy, both freed with free(*names). -EINVAL / -ENOMEM. */
int gs_cdi_device_names(const char *spec, char ***names, size_t *n);

/* Warns (warn(ctx, "FILE: defines KIND=NAME, ... (n of our devices)"), once per file) about every
 * spec in dirs (duplicates skipped; *.json and *.yaml, at most 256 files each, symlinks not
 * followed) that defines one of the devices of `spec` (our spec's JSON text) under `kind`, except
 * our own files (names starting with own_prefix, e.g. "gpuslice"). Returns the number of devices
 * defined twice, or -EINVAL when spec is not a spec. The runtime's CDI library refuses such
 * devices in both specs ("conflicting device"). */
typedef void (*gs_cdi_warn_fn)(void *ctx, const char *msg);
int gs_cdi_scan_dirs(const char *kind, const char *spec, const char *const *dirs, size_t n_dirs,
                     const char *own_prefix, gs_cdi_warn_fn warn, void *ctx);

/* A CDI kind: VENDOR/CLASS ("nvidia.com/gpu"). */
bool gs_cdi_kind_valid(const char *kind);

/* The fully qualified CDI name of a device: "nvidia.com/gpu=GPU-...". */
void gs_cdi_qualified(const char *kind, const char *name, char *buf, size_t len);

#endif
