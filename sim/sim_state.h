/* sim_state.h: the simulated node's hardware state, shared by every process that opens the same
 * state directory (the agent, `gpuslice mig apply`, tests), as they would share one real node.
 *
 * The state is a JSON file (DIR/state.json) replaced atomically (write + rename) under an
 * exclusive flock on DIR/lock; readers take a shared lock and reload only when the file's inode
 * changed. Internal to the simulated NVML library. */
#ifndef GS_SIM_STATE_H
#define GS_SIM_STATE_H

#include <stdbool.h>
#include <stddef.h>

#include "catalog/catalog.h"
#include "config/nodedesc.h"

#define SIM_MAX_GI 15        /* GI IDs 0..14, as the driver's */
#define SIM_MAX_CI 8         /* CI IDs 0..7 within a GI */
#define SIM_MAX_PROCS 128    /* per GPU */
#define SIM_EVENT_RING 64    /* per GPU; older events are dropped */
#define SIM_UUID_LEN 48
#define SIM_UTIL_STEPS 16    /* entries of a process's duty schedule */

struct sim_ci {
    bool used;
    unsigned profile;          /* CI profile ID (= NVML_COMPUTE_INSTANCE_PROFILE_* value) */
    unsigned start, size;      /* compute slices within the GI */
    char uuid[SIM_UUID_LEN];   /* MIG-xxxxxxxx-... */
};

struct sim_gi {
    bool used;
    unsigned profile_id;       /* GI profile ID (19, 9, ...) */
    unsigned start, size;      /* memory slices */
    struct sim_ci cis[SIM_MAX_CI];
};

struct sim_proc {
    unsigned pid;
    unsigned long long mem;    /* bytes */
    int gi, ci;                /* -1 when not on a MIG device */
    char name[64];
    unsigned long long since_us;      /* when it started (CLOCK_REALTIME us): no sample before */
    unsigned long long util_since_us; /* when its duty schedule was set (util.c) */
    unsigned n_util;                  /* 0: no schedule, busy sharing the GPU evenly (100/n %) */
    unsigned char util[SIM_UTIL_STEPS]; /* SM % of each sampling period, cycled from util_since_us */
};

struct sim_event {
    unsigned long long seq;
    unsigned long long xid;
    unsigned gi;               /* 0xFFFFFFFF when not tied to a GPU instance */
};

/* Memory health and energy (health.c reads them; `gpuslice sim ecc` and `sim retire-page` set
 * them through ctl_health.c). */
#define SIM_MAX_RETIRED 64   /* pages (rows) per GPU */
struct sim_retired {
    unsigned long long address;   /* page address (Turing) or row (Ampere and newer) */
    unsigned long long timestamp; /* seconds since the epoch */
    unsigned cause;               /* 0 multiple single-bit errors, 1 a double-bit error */
};

struct sim_health {
    unsigned long long ecc[2][2]; /* [corrected, uncorrected][volatile, aggregate] error counts */
    unsigned n_retired;
    struct sim_retired retired[SIM_MAX_RETIRED];
    bool retire_pending;          /* a page or row waits for the next GPU reset */
    unsigned long long energy_mj; /* energy used up to energy_ms (CLOCK_REALTIME, milliseconds) */
    unsigned long long energy_ms;
};

struct sim_gpu {
    const struct gs_model *model;
    unsigned mig_current, mig_pending;
    unsigned compute_mode;            /* NVML_COMPUTEMODE_*: 0 default */
    bool lost;
    struct sim_gi gis[SIM_MAX_GI];
    unsigned n_procs;
    struct sim_proc procs[SIM_MAX_PROCS];
    unsigned n_events;
    struct sim_event events[SIM_EVENT_RING]; /* oldest first */
    struct sim_health health;
};

struct sim_state {
    char fingerprint[GS_NODE_MAX_GPUS * 24 + 64];
    unsigned long long seed;          /* random per state dir: MIG UUIDs differ between nodes */
    unsigned long long uuid_counter;  /* bumped per created CI: re-created instances get new UUIDs */
    unsigned long long event_seq;
    char driver_version[32];
    int cuda_major, cuda_minor;
    unsigned n_gpus;
    struct sim_gpu gpus[GS_NODE_MAX_GPUS];
};

/* Fresh state for a node description (MIG mode as described, no instances). */
void sim_state_init(struct sim_state *s, const struct gs_nodedesc *nd, unsigned long long seed);
/* The fingerprint that ties a state file to its node description. */
void sim_state_fingerprint(const struct gs_nodedesc *nd, char *buf, size_t len);

/* Serialise to JSON text (malloc'd) / parse and validate JSON text. Parse errors name `path`. */
char *sim_state_to_json(const struct sim_state *s);
int sim_state_from_json(const char *path, const char *text, struct sim_state *s, char *err, size_t errlen);

/* Milliseconds since the epoch (the energy counter's clock). */
unsigned long long sim_now_ms(void);

/* Deterministic UUIDs. */
void sim_gpu_uuid(const struct gs_model *m, unsigned index, char *buf, size_t len);
void sim_mig_uuid(unsigned long long seed, unsigned long long counter, char *buf, size_t len);

#endif
