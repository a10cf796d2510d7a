/* alloc.h: what Allocate answers and which devices GetPreferredAllocation suggests. Pure: the
 * node's device files and MIG capability minors are passed in, so every answer is unit-tested. */
#ifndef GS_ALLOC_H
#define GS_ALLOC_H

#include <stdbool.h>
#include <stddef.h>

#include "config/policy.h"
#include "core/plan.h"

#define GS_ALLOC_MAX_DEVSPECS 160

struct gs_devspec {
    char container_path[128];
    char host_path[384];
    char permissions[4]; /* "rw" */
};

struct gs_mount {
    char container_path[256];
    char host_path[256];
    bool read_only;
};

#define GS_ALLOC_MAX_GUARDED 16

/* The guard's part of an answer: the VRAM quota of each GPU the container sees, in the order of
 * NVIDIA_VISIBLE_DEVICES (= the container's CUDA ordinals). The agent turns it into files and
 * mounts (gs_guard_*), as that is I/O. */
struct gs_guard_quota {
    char uuid[GS_UUID_LEN];
    unsigned ordinal;
    unsigned long long bytes;
    unsigned arch;              /* the GPU's NVML architecture (gs_arch_name) */
    unsigned compute_pct;       /* the guard's compute share (0: none; fractional GPUs, set by the agent) */
};

#define GS_ALLOC_MAX_ENVS 8
#define GS_ALLOC_MAX_CDI 64
#define GS_ALLOC_MAX_EXTRA_MOUNTS 8

/* A value holds a list of 32 UUIDs (a DRA request's devices); gs_alloc_add_env refuses a longer
 * one, never cuts it. */
#define GS_ENV_VALUE_MAX 2048
struct gs_env {
    char key[160];
    char value[GS_ENV_VALUE_MAX];
};

/* Where an MPS client finds its daemon: the GPU's pipe directory and the node's shared memory. */
#define GS_MPS_PIPE_IN_CONTAINER "/mps/pipe"

struct gs_alloc_response {
    char *visible_devices;            /* NVIDIA_VISIBLE_DEVICES value (malloc'd) */
    unsigned n_guarded;               /* > 0: inject the guard with these quotas */
    struct gs_guard_quota guarded[GS_ALLOC_MAX_GUARDED];
    unsigned n_envs;                  /* besides NVIDIA_VISIBLE_DEVICES: MPS client settings, the guard's */
    struct gs_env envs[GS_ALLOC_MAX_ENVS];
    unsigned n_extra_mounts;          /* MPS's (here), then the guard's files (added by the agent) */
    struct gs_mount extra_mounts[GS_ALLOC_MAX_EXTRA_MOUNTS];
    char mps_uuid[GS_UUID_LEN];       /* MPS replicas: the GPU or MIG instance whose daemon serves them */
    bool visible_env;                 /* set NVIDIA_VISIBLE_DEVICES (strategy envvar or volume-mounts) */
    unsigned n_cdi;                   /* cdi-cri / cdi-annotations: the CDI devices (GPU or MIG UUIDs, as
                                         the spec names them; the agent qualifies them with its kind) */
    char cdi[GS_ALLOC_MAX_CDI][GS_UUID_LEN + 64];
    bool cdi_cri;                     /* put them in the answer's cdi_devices */
    char cdi_annotation[128];         /* non-empty: put them in this annotation (cdi-annotations) */
    unsigned n_devspecs;
    struct gs_devspec devspecs[GS_ALLOC_MAX_DEVSPECS];
    unsigned n_mounts;
    struct gs_mount *mounts;          /* volume-mounts strategy: one per device (malloc'd) */
};

/* /proc/driver/nvidia-caps/mig-minors: "gpu<minor>/gi<gi>/access <N>" and
 * "gpu<minor>/gi<gi>/ci<ci>/access <N>" (plus "config 1", "monitor 2"). */
struct gs_mig_minor {
    unsigned gpu, gi;
    int ci;                           /* -1: the GPU instance's own access capability */
    unsigned minor;
};
struct gs_mig_minors {
    size_t n;
    struct gs_mig_minor *entries;
};
/* Parses the file's text; unknown paths are skipped, malformed lines are errors naming the line. */
int gs_mig_minors_parse(const char *name, const char *text, struct gs_mig_minors *out, char *err, size_t errlen);
void gs_mig_minors_free(struct gs_mig_minors *mm);
/* -1 if absent. */
int gs_mig_minor_lookup(const struct gs_mig_minors *mm, unsigned gpu, unsigned gi, int ci);

/* Does dev_root + path exist? (I/O supplied by the caller.) */
typedef bool (*gs_exists_fn)(const char *host_path, void *ctx);

/* Builds the Allocate answer for one container. Errors (-errno, message in err):
 *   -ENOENT  an ID this resource does not advertise ("unknown device ID 'X' for nvidia.com/gpu")
 *   -E2BIG   more than one device of a replicated resource with failRequestsGreaterThanOne
 *   -EINVAL  an empty request or a duplicate ID
 *   -ENODEV  a MIG device whose capability minors are missing from mig-minors (passDeviceSpecs)
 *   -EXDEV   MPS replicas of more than one GPU or MIG instance (a client talks to one daemon)
 * MPS replicas get the daemon's pipe directory (POLICY mpsRoot/<uuid>/pipe at /mps/pipe) and the
 * node's MPS shared memory (mpsRoot/shm at /dev/shm) mounted, CUDA_MPS_PIPE_DIRECTORY, and the
 * sum of the replicas' limits as CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (at most 100) and
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("0=<MiB>M"): two replicas get twice one's share. */
int gs_allocate(const struct gs_resource *r, const char *const *ids, size_t n, const struct gs_policy *pol,
                const struct gs_mig_minors *mm, gs_exists_fn exists, void *ctx, struct gs_alloc_response *out,
                char *err, size_t errlen);
void gs_alloc_response_free(struct gs_alloc_response *resp);

/* Adds an environment variable / a mount to an answer; -ENOSPC when full, -E2BIG when a key, value
 * or path is too long (nothing is cut). */
int gs_alloc_add_env(struct gs_alloc_response *out, const char *key, const char *value);
int gs_alloc_add_mount(struct gs_alloc_response *out, const char *container_path, const char *host_path, bool read_only);

#define GS_ALLOC_SIZE_HIST 9

/* GetPreferredAllocation: chooses `size` IDs from `avail` (always including `must`), writing
 * pointers to the chosen strings of avail/must into out (room for size). Replicas and MIG devices
 * are spread over GPUs (distributed: fewest allocated first), packed (most allocated first), or
 * placed by fragmentation: each replica goes to the GPU whose FGD fragmentation (the placement
 * engine's measure, src/place/frag.h) grows least, under the node's request sizes seen so far
 * (hist[k]: requests of k devices, k = 1..8; NULL or all zero: single replicas), ties to the most
 * allocated GPU. Whole GPUs prefer one NUMA node. Returns the number chosen (< size if not enough). */
size_t gs_preferred(const struct gs_resource *r, const char *const *avail, size_t n_avail, const char *const *must,
                    size_t n_must, size_t size, enum gs_alloc_policy policy, const unsigned *hist, const char **out);

#endif
