/* nvml_sim.c: libgpuslice-nvml-sim.so, a simulated NVIDIA driver that exports the NVML functions
 * gpuslice uses, over a node described in YAML. gpuslice loads it with dlopen exactly as it loads
 * the driver's libnvidia-ml.so.1, so every line above the dlopen seam is the same on a laptop, in
 * CI and on a GPU node.
 *
 * Configuration (read by nvmlInit_v2): GPUSLICE_SIM_NODE = node description file (required),
 * GPUSLICE_SIM_STATE = state directory (default ${XDG_RUNTIME_DIR:-/tmp}/gpuslice-sim-<uid>),
 * GPUSLICE_SIM_MIG_DELAY_MS = how long each MIG reconfiguration call takes (default 0; a driver
 * takes a noticeable time to create or destroy an instance, and tests interrupt an apply there).
 *
 * Fidelity: real profile IDs, placements, caps and NVML return codes (see docs/simulator.md).
 * Every call locks the shared state (flock on DIR/lock) so concurrent processes see one node. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config/nodedesc.h"
#include "gpu/nvml_types.h"
#include "gpu/sim_state.h"
#include "util/util.h"

#define EXPORT __attribute__((visibility("default")))
#define NO_GI 0xFFFFFFFFu

/* ---- handles ------------------------------------------------------------------------------ */

enum handle_kind { H_GPU = 1, H_MIG, H_GI, H_CI };
struct sim_handle {
    unsigned kind, gpu, gi, ci;
};

static struct sim_handle gpu_handles[GS_NODE_MAX_GPUS];
static struct sim_handle mig_handles[GS_NODE_MAX_GPUS][SIM_MAX_GI][SIM_MAX_CI];
static struct sim_handle gi_handles[GS_NODE_MAX_GPUS][SIM_MAX_GI];
static struct sim_handle ci_handles[GS_NODE_MAX_GPUS][SIM_MAX_GI][SIM_MAX_CI];

struct nvmlEventSet_st {
    int inotify_fd;
    unsigned long long types[GS_NODE_MAX_GPUS]; /* registered event types per GPU */
    unsigned long long cursor;                  /* last event sequence delivered */
};

/* ---- process-wide library state ----------------------------------------------------------- */

static pthread_mutex_t lib_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned init_count;
static unsigned mig_delay_ms; /* GPUSLICE_SIM_MIG_DELAY_MS */

/* A MIG reconfiguration call takes this long, as on a driver (outside the state lock). */
static void mig_call_delay(void) {
    if (mig_delay_ms) {
        struct timespec ts = { .tv_sec = mig_delay_ms / 1000, .tv_nsec = (long)(mig_delay_ms % 1000) * 1000000L };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
        }
    }
}
static struct gs_nodedesc node;
static struct sim_state *st;              /* cached copy of DIR/state.json */
static char state_dir[PATH_MAX];
static char state_path[PATH_MAX + 16];
static int lock_fd = -1;
static pid_t lock_pid;          /* flock belongs to the open file: a forked child needs its own */
static struct stat cache_st;   /* identity of the cached state file: inode, size, mtime */
static unsigned long long cache_gen; /* generation stored in DIR/lock, bumped by every writer */
static bool cache_valid;
static unsigned long long call_count;      /* for tests: proves calls reach this library */

EXPORT unsigned long long gpusliceSimCallCount(void) { return __atomic_load_n(&call_count, __ATOMIC_RELAXED); }

static void sim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sim_log(const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(stderr, "gpuslice-nvml-sim: %s\n", buf);
}

/* Writers replace the file (new inode); an edit in place changes size or mtime. */
static bool same_file_version(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* File timestamps are coarse and inodes are reused, so the stat identity alone could match a
 * newer file: every writer also bumps a generation counter kept in the lock file. */
static unsigned long long read_generation(void) {
    unsigned long long gen = 0;
    if (pread(lock_fd, &gen, sizeof(gen), 0) != (ssize_t)sizeof(gen))
        gen = 0;
    return gen;
}

static int load_state_locked(void) {
    struct stat sb;
    if (stat(state_path, &sb) < 0)
        return -errno;
    unsigned long long gen = read_generation();
    if (cache_valid && gen == cache_gen && same_file_version(&sb, &cache_st))
        return 0;
    _cleanup_free_ char *text = NULL;
    int r = gs_read_file(state_path, 64 << 20, &text, NULL);
    if (r < 0)
        return r;
    char err[512];
    r = sim_state_from_json(state_path, text, st, err, sizeof(err));
    if (r < 0) {
        sim_log("%s", err);
        cache_valid = false;
        return r;
    }
    cache_st = sb;
    cache_gen = gen;
    cache_valid = true;
    return 0;
}

static int save_state_locked(void) {
    _cleanup_free_ char *text = sim_state_to_json(st);
    if (!text)
        return -ENOMEM;
    int r = gs_write_file_atomic(state_path, text, strlen(text), false);
    if (r < 0) {
        sim_log("Failed to write %s: %s", state_path, strerror(-r));
        cache_valid = false;
        return r;
    }
    cache_gen = read_generation() + 1;
    if (pwrite(lock_fd, &cache_gen, sizeof(cache_gen), 0) != (ssize_t)sizeof(cache_gen) ||
        stat(state_path, &cache_st) < 0)
        cache_valid = false;
    return 0;
}

static int reopen_lock(void) {
    char lock_path[PATH_MAX + 8];
    snprintf(lock_path, sizeof(lock_path), "%s/lock", state_dir);
    int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    close(lock_fd);
    lock_fd = fd;
    lock_pid = getpid();
    return 0;
}

/* Each NVML entry point runs between lock_state() and unlock_state(). The process mutex guards the
 * cached copy between threads; flock guards the file between processes. */
static nvmlReturn_t lock_state(bool write) {
    __atomic_add_fetch(&call_count, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&lib_lock);
    if (init_count == 0) {
        pthread_mutex_unlock(&lib_lock);
        return NVML_ERROR_UNINITIALIZED;
    }
    if (lock_pid != getpid() && reopen_lock() < 0) {
        pthread_mutex_unlock(&lib_lock);
        return NVML_ERROR_UNKNOWN;
    }
    while (flock(lock_fd, write ? LOCK_EX : LOCK_SH) < 0) {
        if (errno != EINTR) {
            pthread_mutex_unlock(&lib_lock);
            return NVML_ERROR_UNKNOWN;
        }
    }
    if (load_state_locked() < 0) {
        flock(lock_fd, LOCK_UN);
        pthread_mutex_unlock(&lib_lock);
        return NVML_ERROR_UNKNOWN;
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t unlock_state(nvmlReturn_t ret, bool save) {
    if (save && ret == NVML_SUCCESS && save_state_locked() < 0)
        ret = NVML_ERROR_UNKNOWN;
    flock(lock_fd, LOCK_UN);
    pthread_mutex_unlock(&lib_lock);
    return ret;
}

static unsigned long long random_seed(void) {
    unsigned long long seed = 0;
    if (getrandom(&seed, sizeof(seed), 0) != (ssize_t)sizeof(seed))
        seed = (unsigned long long)time(NULL) ^ ((unsigned long long)getpid() << 32);
    return seed & 0x7fffffffffffffffULL;
}

static nvmlReturn_t sim_init(void) {
    const char *node_path = getenv("GPUSLICE_SIM_NODE");
    if (!node_path || !*node_path) {
        sim_log("GPUSLICE_SIM_NODE is not set: it must name the simulated node description (YAML)");
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    char err[512];
    if (gs_nodedesc_load(node_path, &node, err, sizeof(err)) < 0) {
        sim_log("%s", err);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    const char *dir = getenv("GPUSLICE_SIM_STATE");
    if (dir && *dir) {
        if (gs_strlcpy(state_dir, dir, sizeof(state_dir)) < 0) {
            sim_log("GPUSLICE_SIM_STATE is too long");
            return NVML_ERROR_INVALID_ARGUMENT;
        }
    } else {
        const char *rt = getenv("XDG_RUNTIME_DIR");
        snprintf(state_dir, sizeof(state_dir), "%s/gpuslice-sim-%u", rt && *rt ? rt : "/tmp", (unsigned)getuid());
    }
    const char *delay = getenv("GPUSLICE_SIM_MIG_DELAY_MS");
    mig_delay_ms = 0;
    unsigned long long v;
    if (delay && *delay) {
        if (gs_parse_uint(delay, 0, 10000, &v) < 0)
            sim_log("GPUSLICE_SIM_MIG_DELAY_MS: '%s' is not a number of milliseconds up to 10000: ignored", delay);
        else
            mig_delay_ms = (unsigned)v;
    }
    int r = gs_mkdir_p(state_dir, 0700);
    if (r < 0) {
        sim_log("Failed to create state directory %s: %s", state_dir, strerror(-r));
        return NVML_ERROR_NO_PERMISSION;
    }
    char lock_path[PATH_MAX + 8];
    snprintf(lock_path, sizeof(lock_path), "%s/lock", state_dir);
    snprintf(state_path, sizeof(state_path), "%s/state.json", state_dir);
    lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    lock_pid = getpid();
    if (lock_fd < 0) {
        sim_log("Failed to open %s: %s", lock_path, strerror(errno));
        return NVML_ERROR_NO_PERMISSION;
    }
    st = calloc(1, sizeof(*st));
    if (!st) {
        close(lock_fd);
        lock_fd = -1;
        return NVML_ERROR_MEMORY;
    }
    cache_valid = false;
    flock(lock_fd, LOCK_EX);
    char fp[sizeof(st->fingerprint)];
    sim_state_fingerprint(&node, fp, sizeof(fp));
    bool fresh = true;
    if (access(state_path, F_OK) == 0) {
        if (load_state_locked() == 0 && strcmp(st->fingerprint, fp) == 0)
            fresh = false;
        else
            sim_log("State in %s does not match %s (or is damaged): starting a fresh simulated node", state_dir,
                    node_path);
    }
    nvmlReturn_t ret = NVML_SUCCESS;
    if (fresh) {
        sim_state_init(st, &node, random_seed());
        if (save_state_locked() < 0)
            ret = NVML_ERROR_NO_PERMISSION;
    }
    flock(lock_fd, LOCK_UN);
    if (ret != NVML_SUCCESS) {
        free(st);
        st = NULL;
        close(lock_fd);
        lock_fd = -1;
    }
    return ret;
}

/* libnvidia-ml starts a thread of its own in nvmlInit (driver 580 on an H200: a process's thread
 * count goes from 1 to 2). A program that blocks signals after nvmlInit leaves them unblocked in
 * that thread, which then takes them with the default action. The simulation starts an idle
 * thread too, so tests catch that. */
static pthread_t helper;
static bool helper_running;             /* under lib_lock */
static unsigned long helper_gen;        /* under helper_lock: a helper runs until its generation ends */
static pthread_mutex_t helper_lock = PTHREAD_MUTEX_INITIALIZER; /* its own: lib_lock is never the helper's */
static pthread_cond_t helper_cv = PTHREAD_COND_INITIALIZER;
static pthread_once_t helper_atfork_once = PTHREAD_ONCE_INIT;

static void *helper_main(void *arg) {
    unsigned long gen = (unsigned long)(uintptr_t)arg;
    pthread_mutex_lock(&helper_lock);
    while (helper_gen == gen)
        pthread_cond_wait(&helper_cv, &helper_lock);
    pthread_mutex_unlock(&helper_lock);
    return NULL;
}

/* A forked child has no helper thread, and the parent's may have held helper_lock at the fork. */
static void helper_after_fork(void) {
    pthread_mutex_init(&helper_lock, NULL);
    pthread_cond_init(&helper_cv, NULL);
    helper_running = false;
}

static void helper_atfork(void) { pthread_atfork(NULL, NULL, helper_after_fork); }

static void helper_start(void) { /* under lib_lock */
    pthread_once(&helper_atfork_once, helper_atfork);
    pthread_mutex_lock(&helper_lock);
    unsigned long gen = helper_gen;
    pthread_mutex_unlock(&helper_lock);
    helper_running = pthread_create(&helper, NULL, helper_main, (void *)(uintptr_t)gen) == 0;
}

/* Under lib_lock: ends the helper's generation; true with *t the thread to join (after unlocking:
 * a concurrent nvmlInit may then start the next one) when one was running. */
static bool helper_stop(pthread_t *t) {
    pthread_mutex_lock(&helper_lock);
    helper_gen++;
    pthread_cond_broadcast(&helper_cv);
    pthread_mutex_unlock(&helper_lock);
    *t = helper;
    bool was_running = helper_running;
    helper_running = false;
    return was_running;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) {
    pthread_mutex_lock(&lib_lock);
    nvmlReturn_t ret = NVML_SUCCESS;
    if (init_count == 0) {
        ret = sim_init();
        if (ret == NVML_SUCCESS && !helper_running)
            helper_start();
    }
    if (ret == NVML_SUCCESS)
        init_count++;
    pthread_mutex_unlock(&lib_lock);
    return ret;
}

EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&lib_lock);
    nvmlReturn_t ret = NVML_SUCCESS;
    bool join = false;
    pthread_t stopping;
    if (init_count == 0) {
        ret = NVML_ERROR_UNINITIALIZED;
    } else if (--init_count == 0) {
        free(st);
        st = NULL;
        close(lock_fd);
        lock_fd = -1;
        cache_valid = false;
        join = helper_stop(&stopping);
    }
    pthread_mutex_unlock(&lib_lock);
    if (join)
        pthread_join(stopping, NULL);
    return ret;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient Resources";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Version mismatch between argument and API";
    default: return "Unknown Error";
    }
}

/* ---- handle resolution ---------------------------------------------------------------------- */

static bool in_array(const void *p, const void *base, size_t bytes) {
    return (const char *)p >= (const char *)base && (const char *)p < (const char *)base + bytes;
}

static const struct sim_handle *as_handle(const void *p, unsigned kind) {
    const struct sim_handle *h = p;
    if (!p)
        return NULL;
    switch (kind) {
    case H_GPU:
        if (!in_array(p, gpu_handles, sizeof(gpu_handles)))
            return NULL;
        break;
    case H_MIG:
        if (!in_array(p, mig_handles, sizeof(mig_handles)))
            return NULL;
        break;
    case H_GI:
        if (!in_array(p, gi_handles, sizeof(gi_handles)))
            return NULL;
        break;
    case H_CI:
        if (!in_array(p, ci_handles, sizeof(ci_handles)))
            return NULL;
        break;
    default:
        return NULL;
    }
    return h->kind == kind ? h : NULL;
}

static nvmlDevice_t gpu_handle(unsigned i) {
    gpu_handles[i] = (struct sim_handle){ H_GPU, i, 0, 0 };
    return (nvmlDevice_t)&gpu_handles[i];
}
static nvmlDevice_t mig_handle(unsigned g, unsigned gi, unsigned ci) {
    mig_handles[g][gi][ci] = (struct sim_handle){ H_MIG, g, gi, ci };
    return (nvmlDevice_t)&mig_handles[g][gi][ci];
}
static nvmlGpuInstance_t gi_handle(unsigned g, unsigned gi) {
    gi_handles[g][gi] = (struct sim_handle){ H_GI, g, gi, 0 };
    return (nvmlGpuInstance_t)&gi_handles[g][gi];
}
static nvmlComputeInstance_t ci_handle(unsigned g, unsigned gi, unsigned ci) {
    ci_handles[g][gi][ci] = (struct sim_handle){ H_CI, g, gi, ci };
    return (nvmlComputeInstance_t)&ci_handles[g][gi][ci];
}

/* Resolves a device handle (whole GPU or MIG device) against the current state. */
struct dev_ref {
    struct sim_gpu *gpu;
    unsigned index;
    struct sim_gi *gi;   /* NULL for a whole GPU */
    struct sim_ci *ci;
    unsigned gi_id, ci_id;
};

static nvmlReturn_t resolve_device(nvmlDevice_t d, struct dev_ref *ref) {
    memset(ref, 0, sizeof(*ref));
    const struct sim_handle *h = as_handle(d, H_GPU);
    if (!h)
        h = as_handle(d, H_MIG);
    if (!h || h->gpu >= st->n_gpus)
        return NVML_ERROR_INVALID_ARGUMENT;
    ref->gpu = &st->gpus[h->gpu];
    ref->index = h->gpu;
    if (ref->gpu->lost)
        return NVML_ERROR_GPU_IS_LOST;
    if (h->kind == H_MIG) {
        struct sim_gi *gi = &ref->gpu->gis[h->gi];
        if (!ref->gpu->mig_current || !gi->used || !gi->cis[h->ci].used)
            return NVML_ERROR_INVALID_ARGUMENT; /* the MIG device was destroyed */
        ref->gi = gi;
        ref->ci = &gi->cis[h->ci];
        ref->gi_id = h->gi;
        ref->ci_id = h->ci;
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t resolve_gpu(nvmlDevice_t d, struct dev_ref *ref) {
    nvmlReturn_t r = resolve_device(d, ref);
    if (r == NVML_SUCCESS && ref->gi)
        return NVML_ERROR_INVALID_ARGUMENT;
    return r;
}

static nvmlReturn_t resolve_mig_gpu(nvmlDevice_t d, struct dev_ref *ref) {
    nvmlReturn_t r = resolve_gpu(d, ref);
    if (r != NVML_SUCCESS)
        return r;
    if (!ref->gpu->model->mig_mem_slices || !ref->gpu->mig_current)
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

static nvmlReturn_t resolve_gi(nvmlGpuInstance_t g, struct dev_ref *ref) {
    memset(ref, 0, sizeof(*ref));
    const struct sim_handle *h = as_handle(g, H_GI);
    if (!h || h->gpu >= st->n_gpus)
        return NVML_ERROR_INVALID_ARGUMENT;
    ref->gpu = &st->gpus[h->gpu];
    ref->index = h->gpu;
    if (ref->gpu->lost)
        return NVML_ERROR_GPU_IS_LOST;
    if (!ref->gpu->mig_current || !ref->gpu->gis[h->gi].used)
        return NVML_ERROR_INVALID_ARGUMENT;
    ref->gi = &ref->gpu->gis[h->gi];
    ref->gi_id = h->gi;
    return NVML_SUCCESS;
}

static nvmlReturn_t resolve_ci(nvmlComputeInstance_t c, struct dev_ref *ref) {
    memset(ref, 0, sizeof(*ref));
    const struct sim_handle *h = as_handle(c, H_CI);
    if (!h || h->gpu >= st->n_gpus)
        return NVML_ERROR_INVALID_ARGUMENT;
    ref->gpu = &st->gpus[h->gpu];
    ref->index = h->gpu;
    if (ref->gpu->lost)
        return NVML_ERROR_GPU_IS_LOST;
    struct sim_gi *gi = &ref->gpu->gis[h->gi];
    if (!ref->gpu->mig_current || !gi->used || !gi->cis[h->ci].used)
        return NVML_ERROR_INVALID_ARGUMENT;
    ref->gi = gi;
    ref->ci = &gi->cis[h->ci];
    ref->gi_id = h->gi;
    ref->ci_id = h->ci;
    return NVML_SUCCESS;
}

/* A resolved handle's result, or INVALID_ARGUMENT when the call's output pointer is NULL (NVML
 * checks the handle first). */
static nvmlReturn_t with_out(nvmlReturn_t r, const void *out) {
    return r == NVML_SUCCESS && !out ? NVML_ERROR_INVALID_ARGUMENT : r;
}

/* A MIG device handle (NOT_SUPPORTED for a GPU handle, as NVML answers), then the output pointer. */
static nvmlReturn_t resolve_mig_device_out(nvmlDevice_t d, struct dev_ref *ref, const void *out) {
    nvmlReturn_t r = resolve_device(d, ref);
    if (r == NVML_SUCCESS && !ref->ci)
        r = NVML_ERROR_NOT_SUPPORTED;
    return with_out(r, out);
}

/* Read-only entry point helper: lock, run body, unlock. */
#define READ_BEGIN                                                                                            \
    nvmlReturn_t ret_ = lock_state(false);                                                                    \
    if (ret_ != NVML_SUCCESS)                                                                                 \
        return ret_;
#define READ_END(r) return unlock_state((r), false)
#define WRITE_BEGIN                                                                                           \
    nvmlReturn_t ret_ = lock_state(true);                                                                     \
    if (ret_ != NVML_SUCCESS)                                                                                 \
        return ret_;
#define WRITE_END(r) return unlock_state((r), true)

/* ---- system and device queries -------------------------------------------------------------- */

static nvmlReturn_t copy_string(char *dst, unsigned len, const char *src) {
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    READ_BEGIN;
    READ_END(copy_string(version, length, st->driver_version));
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    READ_BEGIN;
    char buf[64];
    snprintf(buf, sizeof(buf), "%d.%s", st->cuda_major, st->driver_version);
    READ_END(copy_string(version, length, buf));
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) {
    READ_BEGIN;
    if (!v)
        READ_END(NVML_ERROR_INVALID_ARGUMENT);
    *v = st->cuda_major * 1000 + st->cuda_minor * 10;
    READ_END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { return nvmlSystemGetCudaDriverVersion_v2(v); }

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    READ_BEGIN;
    if (!count)
        READ_END(NVML_ERROR_INVALID_ARGUMENT);
    *count = st->n_gpus;
    READ_END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    READ_BEGIN;
    if (!device || index >= st->n_gpus)
        READ_END(NVML_ERROR_INVALID_ARGUMENT);
    if (st->gpus[index].lost)
        READ_END(NVML_ERROR_GPU_IS_LOST);
    *device = gpu_handle(index);
    READ_END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    READ_BEGIN;
    if (!uuid || !device)
        READ_END(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned i = 0; i < st->n_gpus; i++) {
        struct sim_gpu *g = &st->gpus[i];
        char u[SIM_UUID_LEN];
        sim_gpu_uuid(g->model, i, u, sizeof(u));
        if (strcmp(u, uuid) == 0) {
            if (g->lost)
                READ_END(NVML_ERROR_GPU_IS_LOST);
            *device = gpu_handle(i);
            READ_END(NVML_SUCCESS);
        }
        if (!g->mig_current)
            continue;
        for (unsigned gi = 0; gi < SIM_MAX_GI; gi++) {
            for (unsigned ci = 0; ci < SIM_MAX_CI; ci++) {
                if (!g->gis[gi].used || !g->gis[gi].cis[ci].used)
                    continue;
                char legacy[SIM_UUID_LEN + 32];
                snprintf(legacy, sizeof(legacy), "MIG-%s/%u/%u", u, gi, ci);
                if (strcmp(g->gis[gi].cis[ci].uuid, uuid) == 0 || strcmp(legacy, uuid) == 0) {
                    *device = mig_handle(i, gi, ci);
                    READ_END(NVML_SUCCESS);
                }
            }
        }
    }
    READ_END(NVML_ERROR_NOT_FOUND);
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), index);
    if (r == NVML_SUCCESS)
        *index = ref.index;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_device(d, &ref);
    if (r == NVML_SUCCESS) {
        char u[SIM_UUID_LEN];
        if (ref.ci)
            r = copy_string(uuid, length, ref.ci->uuid);
        else {
            sim_gpu_uuid(ref.gpu->model, ref.index, u, sizeof(u));
            r = copy_string(uuid, length, u);
        }
    }
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_device(d, &ref);
    if (r == NVML_SUCCESS) {
        if (ref.ci) {
            /* MIG devices report "<GPU name> MIG <profile>", as the driver does. */
            const struct gs_profile_spec *p = gs_model_profile_by_id(ref.gpu->model, ref.gi->profile_id);
            char buf[160];
            snprintf(buf, sizeof(buf), "%s MIG %s", ref.gpu->model->nvml_name, p ? p->name : "?");
            r = copy_string(name, length, buf);
        } else {
            r = copy_string(name, length, ref.gpu->model->nvml_name);
        }
    }
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_device(d, &ref);
    if (r == NVML_SUCCESS && ref.ci)
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS && !minor)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *minor = ref.index;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_device(d, &ref), pci);
    if (r == NVML_SUCCESS) {
        memset(pci, 0, sizeof(*pci));
        /* Buses spaced as on an 8-GPU HGX board: 0x18, 0x2a, 0x3a, ... */
        static const unsigned buses[8] = { 0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb };
        pci->domain = ref.index / 8;
        pci->bus = buses[ref.index % 8];
        pci->device = 0;
        pci->pciDeviceId = ref.gpu->model->pci_device_id;
        pci->pciSubSystemId = (ref.gpu->model->pci_device_id & 0xffff0000u) | 0x10DE;
        snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", pci->domain, pci->bus, pci->device);
        snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", pci->domain, pci->bus,
                 pci->device);
    }
    READ_END(r);
}

static unsigned long long used_bytes(const struct sim_gpu *g, int gi, int ci) {
    unsigned long long sum = 0;
    for (unsigned i = 0; i < g->n_procs; i++)
        if (gi < 0 || (g->procs[i].gi == gi && (ci < 0 || g->procs[i].ci == ci)))
            sum += g->procs[i].mem;
    return sum;
}

static void memory_of(const struct dev_ref *ref, unsigned long long *total, unsigned long long *used) {
    if (ref->ci) {
        const struct gs_profile_spec *p = gs_model_profile_by_id(ref->gpu->model, ref->gi->profile_id);
        *total = (p ? p->mem_mib : 0) << 20;
        *used = used_bytes(ref->gpu, (int)ref->gi_id, -1);
    } else {
        *total = ref->gpu->model->mem_mib << 20;
        *used = used_bytes(ref->gpu, -1, -1);
    }
    if (*used > *total)
        *used = *total;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *mem) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_device(d, &ref), mem);
    if (r == NVML_SUCCESS) {
        memory_of(&ref, &mem->total, &mem->used);
        mem->free = mem->total - mem->used;
    }
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *mem) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_device(d, &ref), mem);
    if (r == NVML_SUCCESS && mem->version != nvmlMemory_v2)
        r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (r == NVML_SUCCESS) {
        memory_of(&ref, &mem->total, &mem->used);
        mem->reserved = 0;
        mem->free = mem->total - mem->used;
    }
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t d, unsigned int *arch) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_device(d, &ref), arch);
    if (r == NVML_SUCCESS)
        *arch = (unsigned)ref.gpu->model->arch;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_device(d, &ref);
    if (r == NVML_SUCCESS && (!major || !minor))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        *major = ref.gpu->model->cc_major;
        *minor = ref.gpu->model->cc_minor;
    }
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_device(d, &ref);
    if (r == NVML_SUCCESS && (ref.ci || ref.gpu->mig_current))
        r = NVML_ERROR_NOT_SUPPORTED; /* as the driver: no utilization for MIG devices or their parent */
    if (r == NVML_SUCCESS && !u)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        /* The simulator has no clock of work: a GPU with processes is reported busy. */
        u->gpu = ref.gpu->n_procs ? 100 : 0;
        unsigned long long total, used;
        memory_of(&ref, &total, &used);
        u->memory = total ? (unsigned)(used * 100 / total) : 0;
    }
    READ_END(r);
}

/* Compute mode: a setting of the physical GPU, kept in the state (the real call needs root). */
EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t d, unsigned int *mode) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), mode);
    if (r == NVML_SUCCESS)
        *mode = ref.gpu->compute_mode;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t d, unsigned int mode) {
    WRITE_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_gpu(d, &ref);
    if (r == NVML_SUCCESS && mode > NVML_COMPUTEMODE_EXCLUSIVE_PROCESS)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && mode == NVML_COMPUTEMODE_EXCLUSIVE_THREAD)
        r = NVML_ERROR_NOT_SUPPORTED; /* removed from the driver long ago */
    if (r == NVML_SUCCESS)
        ref.gpu->compute_mode = mode;
    WRITE_END(r);
}

/* Temperature and power are synthetic (no thermal model): a GPU with processes is warm and draws
 * more. MIG device handles have neither, as with the driver. */
EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, unsigned int sensor, unsigned int *temp) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_gpu(d, &ref);
    if (r == NVML_SUCCESS && (sensor != NVML_TEMPERATURE_GPU || !temp))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *temp = ref.gpu->n_procs ? 65 : 35;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *power) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), power);
    if (r == NVML_SUCCESS)
        *power = ref.gpu->n_procs ? 240000 : 60000;
    READ_END(r);
}

/* Processes: GPU handle = every process on the GPU; MIG handle = those on its GPU instance. */
static nvmlReturn_t list_processes(nvmlDevice_t d, unsigned int *count, void *infos, size_t stride, bool with_ids) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_device(d, &ref), count);
    if (r != NVML_SUCCESS)
        READ_END(r);
    unsigned n = 0;
    for (unsigned i = 0; i < ref.gpu->n_procs; i++)
        if (!ref.ci || ref.gpu->procs[i].gi == (int)ref.gi_id)
            n++;
    if (n > 0 && (!infos || *count < n)) {
        *count = n;
        READ_END(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    unsigned k = 0;
    for (unsigned i = 0; i < ref.gpu->n_procs; i++) {
        const struct sim_proc *p = &ref.gpu->procs[i];
        if (ref.ci && p->gi != (int)ref.gi_id)
            continue;
        char *slot = (char *)infos + stride * k++;
        if (with_ids) {
            nvmlProcessInfo_t pi = { p->pid, p->mem, p->gi < 0 ? NO_GI : (unsigned)p->gi,
                                     p->ci < 0 ? NO_GI : (unsigned)p->ci };
            memcpy(slot, &pi, sizeof(pi));
        } else {
            nvmlProcessInfo_v1_t pi = { p->pid, p->mem };
            memcpy(slot, &pi, sizeof(pi));
        }
    }
    *count = n;
    READ_END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                           nvmlProcessInfo_t *infos) {
    return list_processes(d, count, infos, sizeof(nvmlProcessInfo_t), true);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *count,
                                                           nvmlProcessInfo_t *infos) {
    return list_processes(d, count, infos, sizeof(nvmlProcessInfo_t), true);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *count,
                                                        nvmlProcessInfo_v1_t *infos) {
    return list_processes(d, count, infos, sizeof(nvmlProcessInfo_v1_t), false);
}

/* ---- MIG mode ------------------------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current, unsigned int *pending) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_gpu(d, &ref);
    if (r == NVML_SUCCESS && !ref.gpu->model->mig_mem_slices)
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS && (!current || !pending))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        *current = ref.gpu->mig_current;
        *pending = ref.gpu->mig_pending;
    }
    READ_END(r);
}

static bool gpu_has_instances(const struct sim_gpu *g) {
    for (unsigned i = 0; i < SIM_MAX_GI; i++)
        if (g->gis[i].used)
            return true;
    return false;
}

/* Ampere sets a pending mode that a GPU reset activates; Hopper and newer switch at once. The
 * driver refuses to toggle while processes run or (when disabling) while instances exist. */
EXPORT nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t d, unsigned int mode, nvmlReturn_t *activationStatus) {
    mig_call_delay();
    WRITE_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_gpu(d, &ref);
    if (r == NVML_SUCCESS && !ref.gpu->model->mig_mem_slices)
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS && (mode > 1 || !activationStatus))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        WRITE_END(r);
    struct sim_gpu *g = ref.gpu;
    if (g->mig_current == mode && g->mig_pending == mode) {
        *activationStatus = NVML_SUCCESS;
        WRITE_END(NVML_SUCCESS);
    }
    if (g->n_procs > 0 || (mode == 0 && gpu_has_instances(g))) {
        *activationStatus = NVML_ERROR_IN_USE;
        WRITE_END(NVML_ERROR_IN_USE);
    }
    g->mig_pending = mode;
    if (g->model->arch >= GS_ARCH_HOPPER) {
        g->mig_current = mode;
        *activationStatus = NVML_SUCCESS;
    } else {
        *activationStatus = g->mig_current == mode ? NVML_SUCCESS : NVML_ERROR_RESET_REQUIRED;
    }
    WRITE_END(NVML_SUCCESS);
}

/* ---- GPU-instance profiles and placements ---------------------------------------------------- */

static void fill_profile_common(const struct gs_profile_spec *p, unsigned *id, unsigned *slice, unsigned *inst,
                                unsigned *sm, unsigned *ce, unsigned *dec, unsigned *enc, unsigned *jpeg,
                                unsigned *ofa, unsigned long long *mem) {
    *id = p->id;
    *slice = p->slices;
    *inst = p->max_instances;
    *sm = p->sm;
    *ce = p->ce;
    *dec = p->dec;
    *enc = p->enc;
    *jpeg = p->jpeg;
    *ofa = p->ofa;
    *mem = p->mem_mib;
}

/* Shared checks for the profile-index queries: the enumeration contract is 0,1,2,... until
 * INVALID_ARGUMENT, with NOT_SUPPORTED for indices this GPU lacks. */
static nvmlReturn_t lookup_profile_index(nvmlDevice_t d, unsigned profile, const struct gs_profile_spec **out) {
    struct dev_ref ref;
    nvmlReturn_t r = resolve_gpu(d, &ref);
    if (r != NVML_SUCCESS)
        return r;
    if (!ref.gpu->model->mig_mem_slices)
        return NVML_ERROR_NOT_SUPPORTED;
    if (profile >= NVML_GPU_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!ref.gpu->mig_current)
        return NVML_ERROR_NOT_SUPPORTED;
    *out = gs_model_profile_by_nvml(ref.gpu->model, profile);
    return *out ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t d, unsigned int profile,
                                                       nvmlGpuInstanceProfileInfo_t *info) {
    READ_BEGIN;
    const struct gs_profile_spec *p = NULL;
    nvmlReturn_t r = lookup_profile_index(d, profile, &p);
    if (r == NVML_SUCCESS && !info)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        memset(info, 0, sizeof(*info));
        fill_profile_common(p, &info->id, &info->sliceCount, &info->instanceCount, &info->multiprocessorCount,
                            &info->copyEngineCount, &info->decoderCount, &info->encoderCount, &info->jpegCount,
                            &info->ofaCount, &info->memorySizeMB);
    }
    READ_END(r);
}

static nvmlReturn_t fill_profile_v(const struct gs_profile_spec *p, void *vinfo) {
    unsigned version = *(unsigned *)vinfo;
    if (version == nvmlGpuInstanceProfileInfo_v2) {
        nvmlGpuInstanceProfileInfo_v2_t *info = vinfo;
        memset(info, 0, sizeof(*info));
        info->version = version;
        fill_profile_common(p, &info->id, &info->sliceCount, &info->instanceCount, &info->multiprocessorCount,
                            &info->copyEngineCount, &info->decoderCount, &info->encoderCount, &info->jpegCount,
                            &info->ofaCount, &info->memorySizeMB);
        snprintf(info->name, sizeof(info->name), "MIG %s", p->name);
        return NVML_SUCCESS;
    }
    if (version == nvmlGpuInstanceProfileInfo_v3) {
        nvmlGpuInstanceProfileInfo_v3_t *info = vinfo;
        memset(info, 0, sizeof(*info));
        info->version = version;
        fill_profile_common(p, &info->id, &info->sliceCount, &info->instanceCount, &info->multiprocessorCount,
                            &info->copyEngineCount, &info->decoderCount, &info->encoderCount, &info->jpegCount,
                            &info->ofaCount, &info->memorySizeMB);
        snprintf(info->name, sizeof(info->name), "MIG %s", p->name);
        return NVML_SUCCESS;
    }
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t d, unsigned int profile, void *info) {
    READ_BEGIN;
    const struct gs_profile_spec *p = NULL;
    nvmlReturn_t r = lookup_profile_index(d, profile, &p);
    if (r == NVML_SUCCESS && !info)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        r = fill_profile_v(p, info);
    READ_END(r);
}

/* Resolves a GI profile ID (19, 9, ...) on a MIG-capable GPU, MIG mode not required. */
static nvmlReturn_t lookup_profile_id(nvmlDevice_t d, unsigned profile_id, struct dev_ref *ref,
                                      const struct gs_profile_spec **out) {
    nvmlReturn_t r = resolve_gpu(d, ref);
    if (r != NVML_SUCCESS)
        return r;
    if (!ref->gpu->model->mig_mem_slices)
        return NVML_ERROR_NOT_SUPPORTED;
    *out = gs_model_profile_by_id(ref->gpu->model, profile_id);
    return *out ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t d, unsigned int profileId, void *info) {
    READ_BEGIN;
    struct dev_ref ref;
    const struct gs_profile_spec *p = NULL;
    nvmlReturn_t r = lookup_profile_id(d, profileId, &ref, &p);
    if (r == NVML_SUCCESS && !ref.gpu->mig_current)
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS && !info)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        r = fill_profile_v(p, info);
    READ_END(r);
}

/* Returns every placement of the profile, occupied or not, whether MIG is enabled or not. */
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t d, unsigned int profileId,
                                                                 nvmlGpuInstancePlacement_t *placements,
                                                                 unsigned int *count) {
    READ_BEGIN;
    struct dev_ref ref;
    const struct gs_profile_spec *p = NULL;
    nvmlReturn_t r = lookup_profile_id(d, profileId, &ref, &p);
    if (r == NVML_SUCCESS && !count)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        READ_END(r);
    if (!placements) {
        *count = p->n_starts;
        READ_END(NVML_SUCCESS);
    }
    if (*count < p->n_starts) {
        *count = p->n_starts;
        READ_END(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned i = 0; i < p->n_starts; i++)
        placements[i] = (nvmlGpuInstancePlacement_t){ p->starts[i], p->mem_slices };
    *count = p->n_starts;
    READ_END(NVML_SUCCESS);
}

static unsigned occupied_mask(const struct sim_gpu *g) {
    unsigned mask = 0;
    for (unsigned i = 0; i < SIM_MAX_GI; i++)
        if (g->gis[i].used)
            mask |= ((1u << g->gis[i].size) - 1) << g->gis[i].start;
    return mask;
}

static unsigned count_profile(const struct sim_gpu *g, unsigned profile_id) {
    unsigned n = 0;
    for (unsigned i = 0; i < SIM_MAX_GI; i++)
        if (g->gis[i].used && g->gis[i].profile_id == profile_id)
            n++;
    return n;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t d, unsigned int profileId,
                                                             unsigned int *count) {
    READ_BEGIN;
    struct dev_ref ref;
    const struct gs_profile_spec *p = NULL;
    nvmlReturn_t r = lookup_profile_id(d, profileId, &ref, &p);
    if (r == NVML_SUCCESS && !ref.gpu->mig_current)
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS && !count)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        READ_END(r);
    /* Placements of one profile are aligned intervals of equal size: a greedy scan counts the
     * largest set of further instances that fit. */
    unsigned mask = occupied_mask(ref.gpu), n = 0;
    unsigned left = p->max_instances - count_profile(ref.gpu, p->id);
    for (unsigned i = 0; i < p->n_starts && n < left; i++) {
        unsigned m = ((1u << p->mem_slices) - 1) << p->starts[i];
        if (!(mask & m)) {
            mask |= m;
            n++;
        }
    }
    *count = n;
    READ_END(NVML_SUCCESS);
}

/* GI IDs come from the driver. Like the real one (mig.md §2.8), the simulator numbers slots as a
 * binary tree over memory slices (7g -> 0, 1g at slot s -> 7+s, 2g -> 3..6) except for half-GPU
 * instances, which take the lowest free of 1 and 2: a 3g created at slot 4 first gets GI 1.
 * Callers must read IDs back (nvmlGpuInstanceGetInfo), never derive them. */
static int assign_gi_id(const struct sim_gpu *g, unsigned start, unsigned size) {
    unsigned slices = g->model->mig_mem_slices;
    int id;
    if (size == slices)
        id = 0;
    else if (size * 2 == slices)
        id = !g->gis[1].used ? 1 : 2;
    else if (slices == 8 && size == 2)
        id = (int)(3 + start / 2);
    else if (slices == 8 && size == 1)
        id = (int)(7 + start);
    else if (slices == 4 && size == 1) /* A30 */
        id = (int)(3 + start);
    else
        id = -1;
    if (id >= 0 && id < SIM_MAX_GI && !g->gis[id].used)
        return id;
    for (int i = 0; i < SIM_MAX_GI; i++) /* defensive: should not happen for valid placements */
        if (!g->gis[i].used)
            return i;
    return -1;
}

static nvmlReturn_t create_gi_locked(struct dev_ref *ref, const struct gs_profile_spec *p, unsigned start,
                                     nvmlGpuInstance_t *out) {
    struct sim_gpu *g = ref->gpu;
    if (count_profile(g, p->id) >= p->max_instances)
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    unsigned m = ((1u << p->mem_slices) - 1) << start;
    if (occupied_mask(g) & m)
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    int id = assign_gi_id(g, start, p->mem_slices);
    if (id < 0)
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    struct sim_gi *gi = &g->gis[id];
    memset(gi, 0, sizeof(*gi));
    gi->used = true;
    gi->profile_id = p->id;
    gi->start = start;
    gi->size = p->mem_slices;
    *out = gi_handle(ref->index, (unsigned)id);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t d, unsigned int profileId,
                                                            const nvmlGpuInstancePlacement_t *placement,
                                                            nvmlGpuInstance_t *gpuInstance) {
    mig_call_delay();
    WRITE_BEGIN;
    struct dev_ref ref;
    const struct gs_profile_spec *p = NULL;
    nvmlReturn_t r = lookup_profile_id(d, profileId, &ref, &p);
    if (r == NVML_SUCCESS && !ref.gpu->mig_current)
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS && (!placement || !gpuInstance || placement->size != p->mem_slices))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        bool valid = false;
        for (unsigned i = 0; i < p->n_starts; i++)
            valid |= p->starts[i] == placement->start;
        r = valid ? create_gi_locked(&ref, p, placement->start, gpuInstance) : NVML_ERROR_INVALID_ARGUMENT;
    }
    WRITE_END(r);
}

/* Without a placement the driver picks the slot. Observed order for 1g on H100: 6,4,5,0,1,2,3;
 * larger profiles are placed from the top down. This reproduces the user guide's example where
 * `-cgi 19,19,14,9` fails but `-cgi 9,19,14,19` succeeds. */
EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t d, unsigned int profileId,
                                               nvmlGpuInstance_t *gpuInstance) {
    mig_call_delay();
    WRITE_BEGIN;
    struct dev_ref ref;
    const struct gs_profile_spec *p = NULL;
    nvmlReturn_t r = lookup_profile_id(d, profileId, &ref, &p);
    if (r == NVML_SUCCESS && !ref.gpu->mig_current)
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS && !gpuInstance)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        WRITE_END(r);
    static const unsigned one_slice_order[] = { 6, 4, 5, 0, 1, 2, 3 };
    unsigned order[GS_MAX_STARTS], n = p->n_starts;
    if (p->mem_slices == 1 && ref.gpu->model->mig_mem_slices == 8) {
        memcpy(order, one_slice_order, sizeof(one_slice_order));
        n = 7;
    } else {
        for (unsigned i = 0; i < n; i++)
            order[i] = p->starts[n - 1 - i];
    }
    r = NVML_ERROR_INSUFFICIENT_RESOURCES;
    for (unsigned i = 0; i < n && r == NVML_ERROR_INSUFFICIENT_RESOURCES; i++)
        r = create_gi_locked(&ref, p, order[i], gpuInstance);
    WRITE_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t d, unsigned int profileId,
                                             nvmlGpuInstance_t *gpuInstances, unsigned int *count) {
    READ_BEGIN;
    struct dev_ref ref;
    const struct gs_profile_spec *p = NULL;
    nvmlReturn_t r = lookup_profile_id(d, profileId, &ref, &p);
    if (r == NVML_SUCCESS && !ref.gpu->mig_current)
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS && (!count || !gpuInstances))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        READ_END(r);
    unsigned n = 0;
    for (unsigned i = 0; i < SIM_MAX_GI; i++) {
        if (!ref.gpu->gis[i].used || ref.gpu->gis[i].profile_id != profileId)
            continue;
        if (n >= *count)
            READ_END(NVML_ERROR_INSUFFICIENT_SIZE);
        gpuInstances[n++] = gi_handle(ref.index, i);
    }
    *count = n;
    READ_END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t d, unsigned int id, nvmlGpuInstance_t *gi) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_mig_gpu(d, &ref), gi);
    if (r == NVML_SUCCESS)
        r = id < SIM_MAX_GI && ref.gpu->gis[id].used ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
    if (r == NVML_SUCCESS)
        *gi = gi_handle(ref.index, id);
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t g, nvmlGpuInstanceInfo_t *info) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gi(g, &ref), info);
    if (r == NVML_SUCCESS) {
        info->device = gpu_handle(ref.index);
        info->id = ref.gi_id;
        info->profileId = ref.gi->profile_id;
        info->placement = (nvmlGpuInstancePlacement_t){ ref.gi->start, ref.gi->size };
    }
    READ_END(r);
}

static bool gi_has_processes(const struct sim_gpu *g, unsigned gi, int ci) {
    for (unsigned i = 0; i < g->n_procs; i++)
        if (g->procs[i].gi == (int)gi && (ci < 0 || g->procs[i].ci == ci))
            return true;
    return false;
}

EXPORT nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t g) {
    mig_call_delay();
    WRITE_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_gi(g, &ref);
    if (r != NVML_SUCCESS)
        WRITE_END(r);
    for (unsigned c = 0; c < SIM_MAX_CI; c++)
        if (ref.gi->cis[c].used)
            WRITE_END(NVML_ERROR_IN_USE);
    if (gi_has_processes(ref.gpu, ref.gi_id, -1))
        WRITE_END(NVML_ERROR_IN_USE);
    memset(ref.gi, 0, sizeof(*ref.gi));
    WRITE_END(NVML_SUCCESS);
}

/* ---- compute instances ---------------------------------------------------------------------- */

/* CI profile table of a GI: CI profile index c-slices for c <= G and not (c < G && 2c > G + 1)
 * (go-nvlib's rule), over 1,2,3,4,7 slices. A REV2 1-slice GI (twice the memory) offers
 * 1_SLICE_REV1, as `nvidia-smi mig -cgi 15 -C` showed on GH200. */
static bool ci_profile_spec(const struct sim_gpu *g, const struct sim_gi *gi, unsigned profile, unsigned *slices) {
    const struct gs_profile_spec *gp = gs_model_profile_by_id(g->model, gi->profile_id);
    if (!gp)
        return false;
    unsigned G = gp->slices;
    if (gp->nvml_profile == NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2) {
        *slices = 1;
        return profile == NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1;
    }
    static const unsigned csl[] = { 1, 2, 3, 4, 7 };
    if (profile >= GS_ARRAY_SIZE(csl))
        return false;
    unsigned c = csl[profile];
    if (c > G || (c < G && 2 * c > G + 1))
        return false;
    *slices = c;
    return true;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t g, unsigned int profile,
                                                                unsigned int engProfile,
                                                                nvmlComputeInstanceProfileInfo_t *info) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_gi(g, &ref);
    if (r == NVML_SUCCESS && (!info || profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT ||
                              engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED))
        r = NVML_ERROR_INVALID_ARGUMENT;
    unsigned c = 0;
    if (r == NVML_SUCCESS && !ci_profile_spec(ref.gpu, ref.gi, profile, &c))
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) {
        const struct gs_profile_spec *gp = gs_model_profile_by_id(ref.gpu->model, ref.gi->profile_id);
        *info = (nvmlComputeInstanceProfileInfo_t){
            .id = profile,
            .sliceCount = c,
            .instanceCount = gp->slices / c,
            .multiprocessorCount = gp->sm * c / gp->slices,
            .sharedCopyEngineCount = gp->ce,
            .sharedDecoderCount = gp->dec,
            .sharedEncoderCount = gp->enc,
            .sharedJpegCount = gp->jpeg,
            .sharedOfaCount = gp->ofa,
        };
    }
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t g, unsigned int profileId,
                                                        nvmlComputeInstance_t *out) {
    mig_call_delay();
    WRITE_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_gi(g, &ref);
    unsigned c = 0;
    if (r == NVML_SUCCESS && !out)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && !ci_profile_spec(ref.gpu, ref.gi, profileId, &c))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        WRITE_END(r);
    const struct gs_profile_spec *gp = gs_model_profile_by_id(ref.gpu->model, ref.gi->profile_id);
    unsigned used_mask = 0, same = 0;
    int free_id = -1;
    for (unsigned i = 0; i < SIM_MAX_CI; i++) {
        const struct sim_ci *ci = &ref.gi->cis[i];
        if (ci->used) {
            used_mask |= ((1u << ci->size) - 1) << ci->start;
            same += ci->profile == profileId;
        } else if (free_id < 0) {
            free_id = (int)i;
        }
    }
    if (free_id < 0 || same >= gp->slices / c)
        WRITE_END(NVML_ERROR_INSUFFICIENT_RESOURCES);
    for (unsigned start = 0; start + c <= gp->slices; start += c) {
        unsigned m = ((1u << c) - 1) << start;
        if (used_mask & m)
            continue;
        struct sim_ci *ci = &ref.gi->cis[free_id];
        ci->used = true;
        ci->profile = profileId;
        ci->start = start;
        ci->size = c;
        sim_mig_uuid(st->seed, ++st->uuid_counter, ci->uuid, sizeof(ci->uuid));
        *out = ci_handle(ref.index, ref.gi_id, (unsigned)free_id);
        WRITE_END(NVML_SUCCESS);
    }
    WRITE_END(NVML_ERROR_INSUFFICIENT_RESOURCES);
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t g, unsigned int profileId,
                                                      nvmlComputeInstance_t *cis, unsigned int *count) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_gi(g, &ref);
    if (r == NVML_SUCCESS && (!cis || !count))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        READ_END(r);
    unsigned n = 0;
    for (unsigned i = 0; i < SIM_MAX_CI; i++) {
        if (!ref.gi->cis[i].used || ref.gi->cis[i].profile != profileId)
            continue;
        if (n >= *count)
            READ_END(NVML_ERROR_INSUFFICIENT_SIZE);
        cis[n++] = ci_handle(ref.index, ref.gi_id, i);
    }
    *count = n;
    READ_END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t g, unsigned int id,
                                                         nvmlComputeInstance_t *ci) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gi(g, &ref), ci);
    if (r == NVML_SUCCESS)
        r = id < SIM_MAX_CI && ref.gi->cis[id].used ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
    if (r == NVML_SUCCESS)
        *ci = ci_handle(ref.index, ref.gi_id, id);
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t c, nvmlComputeInstanceInfo_t *info) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_ci(c, &ref), info);
    if (r == NVML_SUCCESS) {
        info->device = mig_handle(ref.index, ref.gi_id, ref.ci_id);
        info->gpuInstance = gi_handle(ref.index, ref.gi_id);
        info->id = ref.ci_id;
        info->profileId = ref.ci->profile;
        info->placement = (nvmlComputeInstancePlacement_t){ ref.ci->start, ref.ci->size };
    }
    READ_END(r);
}
EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t c, nvmlComputeInstanceInfo_t *info) {
    return nvmlComputeInstanceGetInfo_v2(c, info);
}

EXPORT nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t c) {
    mig_call_delay();
    WRITE_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_ci(c, &ref);
    if (r == NVML_SUCCESS && gi_has_processes(ref.gpu, ref.gi_id, (int)ref.ci_id))
        r = NVML_ERROR_IN_USE;
    if (r == NVML_SUCCESS)
        memset(ref.ci, 0, sizeof(*ref.ci));
    WRITE_END(r);
}

/* ---- MIG device handles --------------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *count) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), count);
    if (r == NVML_SUCCESS)
        *count = ref.gpu->mig_current ? (ref.gpu->model->mig_mem_slices == 8 ? 7 : ref.gpu->model->mig_mem_slices)
                                      : 0;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index, nvmlDevice_t *mig) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_mig_gpu(d, &ref);
    if (r == NVML_SUCCESS && (!mig || index >= 7))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r != NVML_SUCCESS)
        READ_END(r);
    unsigned k = 0;
    for (unsigned gi = 0; gi < SIM_MAX_GI; gi++)
        for (unsigned ci = 0; ci < SIM_MAX_CI; ci++)
            if (ref.gpu->gis[gi].used && ref.gpu->gis[gi].cis[ci].used && k++ == index) {
                *mig = mig_handle(ref.index, gi, ci);
                READ_END(NVML_SUCCESS);
            }
    READ_END(NVML_ERROR_NOT_FOUND);
}

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *isMig) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_device(d, &ref), isMig);
    if (r == NVML_SUCCESS)
        *isMig = ref.ci != NULL;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t *parent) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_device(mig, &ref);
    if (r == NVML_SUCCESS && (!ref.ci || !parent))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *parent = gpu_handle(ref.index);
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int *id) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_mig_device_out(d, &ref, id);
    if (r == NVML_SUCCESS)
        *id = ref.gi_id;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned int *id) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_mig_device_out(d, &ref, id);
    if (r == NVML_SUCCESS)
        *id = ref.ci_id;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t d, nvmlDeviceAttributes_t *attr) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = resolve_device(d, &ref);
    if (r == NVML_SUCCESS && !ref.ci)
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS && !attr)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        const struct gs_profile_spec *gp = gs_model_profile_by_id(ref.gpu->model, ref.gi->profile_id);
        *attr = (nvmlDeviceAttributes_t){
            .multiprocessorCount = gp->sm * ref.ci->size / gp->slices,
            .sharedCopyEngineCount = gp->ce,
            .sharedDecoderCount = gp->dec,
            .sharedEncoderCount = gp->enc,
            .sharedJpegCount = gp->jpeg,
            .sharedOfaCount = gp->ofa,
            .gpuInstanceSliceCount = gp->slices,
            .computeInstanceSliceCount = ref.ci->size,
            .memorySizeMB = gp->mem_mib,
        };
    }
    READ_END(r);
}

/* ---- events --------------------------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    READ_BEGIN;
    if (!set)
        READ_END(NVML_ERROR_INVALID_ARGUMENT);
    struct nvmlEventSet_st *s = calloc(1, sizeof(*s));
    if (!s)
        READ_END(NVML_ERROR_MEMORY);
    /* The state file is replaced by rename: IN_MOVED_TO on the directory wakes waiters. */
    s->inotify_fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (s->inotify_fd < 0 || inotify_add_watch(s->inotify_fd, state_dir, IN_MOVED_TO | IN_CLOSE_WRITE) < 0) {
        if (s->inotify_fd >= 0)
            close(s->inotify_fd);
        free(s);
        READ_END(NVML_ERROR_UNKNOWN);
    }
    s->cursor = st->event_seq;
    *set = s;
    READ_END(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), types);
    if (r == NVML_SUCCESS)
        *types = nvmlEventTypeXidCriticalError;
    READ_END(r);
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set) {
    READ_BEGIN;
    struct dev_ref ref;
    nvmlReturn_t r = with_out(resolve_gpu(d, &ref), set);
    if (r == NVML_SUCCESS && (types & ~nvmlEventTypeXidCriticalError))
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS)
        set->types[ref.index] |= types;
    READ_END(r);
}

/* Finds the oldest event after the set's cursor on a registered GPU. Caller holds the lock. */
static bool next_event(struct nvmlEventSet_st *s, nvmlEventData_t *data) {
    const struct sim_event *best = NULL;
    unsigned best_gpu = 0;
    for (unsigned i = 0; i < st->n_gpus; i++) {
        if (!(s->types[i] & nvmlEventTypeXidCriticalError))
            continue;
        for (unsigned e = 0; e < st->gpus[i].n_events; e++) {
            const struct sim_event *ev = &st->gpus[i].events[e];
            if (ev->seq > s->cursor && (!best || ev->seq < best->seq)) {
                best = ev;
                best_gpu = i;
            }
        }
    }
    if (!best) {
        s->cursor = st->event_seq > s->cursor ? s->cursor : st->event_seq;
        return false;
    }
    s->cursor = best->seq;
    *data = (nvmlEventData_t){
        .device = gpu_handle(best_gpu),
        .eventType = nvmlEventTypeXidCriticalError,
        .eventData = best->xid,
        .gpuInstanceId = best->gi,
        .computeInstanceId = best->gi == NO_GI ? NO_GI : 0,
    };
    return true;
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    if (!set || !data)
        return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t deadline = gs_now_ns() + (uint64_t)timeoutms * 1000000ULL;
    for (;;) {
        char buf[4096];
        while (read(set->inotify_fd, buf, sizeof(buf)) > 0) /* drain: we re-read the state below */
            ;
        nvmlReturn_t r = lock_state(false);
        if (r != NVML_SUCCESS)
            return r;
        bool found = next_event(set, data);
        unlock_state(NVML_SUCCESS, false);
        if (found)
            return NVML_SUCCESS;
        uint64_t now = gs_now_ns();
        if (now >= deadline)
            return NVML_ERROR_TIMEOUT;
        struct pollfd pfd = { .fd = set->inotify_fd, .events = POLLIN };
        int ms = (int)((deadline - now + 999999) / 1000000);
        if (poll(&pfd, 1, ms) < 0 && errno != EINTR)
            return NVML_ERROR_UNKNOWN;
    }
}
EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    close(set->inotify_fd);
    free(set);
    return NVML_SUCCESS;
}

/* ---- simulator controls (not NVML) ---------------------------------------------------------- */

/* Each control returns 0 or -errno and writes a message to err. */
#define CTL_BEGIN                                                                                             \
    if (lock_state(true) != NVML_SUCCESS) {                                                                   \
        snprintf(err, errlen, "simulated NVML is not initialised");                                           \
        return -ENXIO;                                                                                        \
    }
#define CTL_END(rc)                                                                                           \
    do {                                                                                                      \
        int rc_ = (rc);                                                                                       \
        if (unlock_state(rc_ == 0 ? NVML_SUCCESS : NVML_ERROR_UNKNOWN, rc_ == 0) != NVML_SUCCESS && rc_ == 0) { \
            snprintf(err, errlen, "failed to save the simulated state in %s", state_dir);                    \
            rc_ = -EIO;                                                                                       \
        }                                                                                                     \
        return rc_;                                                                                           \
    } while (0)

static int check_gpu(unsigned gpu, char *err, size_t errlen) {
    if (gpu >= st->n_gpus) {
        snprintf(err, errlen, "GPU %u does not exist: the node has %u GPU(s)", gpu, st->n_gpus);
        return -ENODEV;
    }
    return 0;
}

EXPORT int gpusliceSimInjectXid(unsigned gpu, unsigned long long xid, unsigned gi_id, char *err, size_t errlen) {
    CTL_BEGIN;
    int r = check_gpu(gpu, err, errlen);
    if (r < 0)
        CTL_END(r);
    struct sim_gpu *g = &st->gpus[gpu];
    if (gi_id != NO_GI && (gi_id >= SIM_MAX_GI || !g->gis[gi_id].used)) {
        snprintf(err, errlen, "GPU %u has no GPU instance %u", gpu, gi_id);
        CTL_END(-ENOENT);
    }
    if (g->n_events == SIM_EVENT_RING) {
        memmove(&g->events[0], &g->events[1], sizeof(g->events[0]) * (SIM_EVENT_RING - 1));
        g->n_events--;
    }
    g->events[g->n_events++] = (struct sim_event){ ++st->event_seq, xid, gi_id };
    CTL_END(0);
}

EXPORT int gpusliceSimProcessAdd(unsigned gpu, int gi_id, int ci_id, unsigned pid, unsigned long long mem_bytes,
                                 const char *name, char *err, size_t errlen) {
    CTL_BEGIN;
    int r = check_gpu(gpu, err, errlen);
    if (r < 0)
        CTL_END(r);
    struct sim_gpu *g = &st->gpus[gpu];
    if (pid == 0) {
        snprintf(err, errlen, "pid must be > 0");
        CTL_END(-EINVAL);
    }
    if (g->lost) {
        snprintf(err, errlen, "GPU %u is lost", gpu);
        CTL_END(-ENODEV);
    }
    unsigned long long total = g->model->mem_mib << 20;
    if (g->mig_current) {
        if (gi_id < 0 || gi_id >= SIM_MAX_GI || !g->gis[gi_id].used) {
            snprintf(err, errlen, "GPU %u is in MIG mode: a process must run on an existing MIG device", gpu);
            CTL_END(-EINVAL);
        }
        if (ci_id < 0)
            for (int c = 0; c < SIM_MAX_CI && ci_id < 0; c++)
                if (g->gis[gi_id].cis[c].used)
                    ci_id = c;
        if (ci_id < 0 || ci_id >= SIM_MAX_CI || !g->gis[gi_id].cis[ci_id].used) {
            snprintf(err, errlen, "GPU %u GPU instance %d has no compute instance %d", gpu, gi_id, ci_id);
            CTL_END(-EINVAL);
        }
        total = gs_model_profile_by_id(g->model, g->gis[gi_id].profile_id)->mem_mib << 20;
    } else if (gi_id >= 0) {
        snprintf(err, errlen, "GPU %u is not in MIG mode", gpu);
        CTL_END(-EINVAL);
    } else {
        ci_id = -1;
    }
    for (unsigned i = 0; i < g->n_procs; i++) {
        if (g->procs[i].pid == pid) {
            snprintf(err, errlen, "process %u already runs on GPU %u", pid, gpu);
            CTL_END(-EEXIST);
        }
    }
    if (g->n_procs == SIM_MAX_PROCS) {
        snprintf(err, errlen, "GPU %u already has %d processes", gpu, SIM_MAX_PROCS);
        CTL_END(-ENOSPC);
    }
    unsigned long long used = used_bytes(g, g->mig_current ? gi_id : -1, -1);
    if (mem_bytes > total - used) {
        snprintf(err, errlen, "out of memory: %llu MiB requested, %llu MiB free", mem_bytes >> 20,
                 (total - used) >> 20);
        CTL_END(-ENOMEM);
    }
    struct sim_proc *p = &g->procs[g->n_procs++];
    *p = (struct sim_proc){ .pid = pid, .mem = mem_bytes, .gi = g->mig_current ? gi_id : -1, .ci = ci_id };
    gs_strlcpy(p->name, name ? name : "", sizeof(p->name));
    CTL_END(0);
}

EXPORT int gpusliceSimProcessRemove(unsigned pid, int gpu, char *err, size_t errlen) {
    CTL_BEGIN;
    unsigned removed = 0;
    for (unsigned i = 0; i < st->n_gpus; i++) {
        if (gpu >= 0 && (unsigned)gpu != i)
            continue;
        struct sim_gpu *g = &st->gpus[i];
        for (unsigned k = 0; k < g->n_procs;) {
            if (g->procs[k].pid == pid) {
                g->procs[k] = g->procs[--g->n_procs];
                removed++;
            } else {
                k++;
            }
        }
    }
    if (!removed) {
        snprintf(err, errlen, "no simulated process %u", pid);
        CTL_END(-ESRCH);
    }
    CTL_END(0);
}

/* A GPU reset activates a pending MIG mode and, as on real hardware, drops every GPU and compute
 * instance (they do not survive a reset). It is refused while processes run. */
EXPORT int gpusliceSimResetGpu(unsigned gpu, char *err, size_t errlen) {
    CTL_BEGIN;
    int r = check_gpu(gpu, err, errlen);
    if (r < 0)
        CTL_END(r);
    struct sim_gpu *g = &st->gpus[gpu];
    if (g->n_procs) {
        snprintf(err, errlen, "GPU %u cannot be reset: %u process(es) still use it", gpu, g->n_procs);
        CTL_END(-EBUSY);
    }
    g->mig_current = g->mig_pending;
    g->lost = false;
    memset(g->gis, 0, sizeof(g->gis));
    CTL_END(0);
}

EXPORT int gpusliceSimSetLost(unsigned gpu, int lost, char *err, size_t errlen) {
    CTL_BEGIN;
    int r = check_gpu(gpu, err, errlen);
    if (r < 0)
        CTL_END(r);
    st->gpus[gpu].lost = lost != 0;
    CTL_END(0);
}
