/* lib.c: libgpuslice-nvml-sim.so, a simulated NVIDIA driver that exports the NVML functions
 * gpuslice uses, over a node described in YAML. gpuslice loads it with dlopen exactly as it loads
 * the driver's libnvidia-ml.so.1, so every line above the dlopen seam is the same on a laptop, in
 * CI and on a GPU node. This file: the library's lifetime (nvmlInit, nvmlShutdown), the state lock
 * every call runs under, and the fault schedule; simlib.h lists the other files.
 *
 * Configuration (read by nvmlInit_v2): GPUSLICE_SIM_NODE = node description file (required),
 * GPUSLICE_SIM_STATE = state directory (default ${XDG_RUNTIME_DIR:-/tmp}/gpuslice-sim-<uid>),
 * GPUSLICE_SIM_MIG_DELAY_MS = how long each MIG reconfiguration call takes (default 0; a driver
 * takes a noticeable time to create or destroy an instance, and tests interrupt an apply there),
 * GPUSLICE_SIM_FAULTS = the fault schedule (faults.h). nvmlInit also creates the node's root,
 * STATE_DIR/root (root.c).
 *
 * Fidelity: real profile IDs, placements, caps and NVML return codes (see docs/simulator.md).
 * Every call locks the shared state (flock on DIR/lock) so concurrent processes see one node. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config/nodedesc.h"
#include "faults.h"
#include "simctl.h"
#include "simlib.h"
#include "util/util.h"

/* ---- process-wide library state ----------------------------------------------------------- */

static pthread_mutex_t lib_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned init_count;
static unsigned mig_delay_ms; /* GPUSLICE_SIM_MIG_DELAY_MS */

void mig_call_delay(void) {
    if (mig_delay_ms) {
        struct timespec ts = { .tv_sec = mig_delay_ms / 1000, .tv_nsec = (long)(mig_delay_ms % 1000) * 1000000L };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
        }
    }
}
static struct gs_nodedesc node;
struct sim_state *sim_st;
char sim_state_dir[PATH_MAX];
static char state_path[PATH_MAX + 16];
static int lock_fd = -1;
static pid_t lock_pid;          /* flock belongs to the open file: a forked child needs its own */
static struct stat cache_st;   /* identity of the cached state file: inode, size, mtime */
static unsigned long long cache_gen; /* generation stored in DIR/lock, bumped by every writer */
static bool cache_valid;
static unsigned long long call_count;      /* for tests: proves calls reach this library */
static struct sim_faults faults;           /* GPUSLICE_SIM_FAULTS, under lib_lock */

EXPORT unsigned long long gpusliceSimCallCount(void) { return __atomic_load_n(&call_count, __ATOMIC_RELAXED); }

void sim_log(const char *fmt, ...) {
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
    r = sim_state_from_json(state_path, text, sim_st, err, sizeof(err));
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
    _cleanup_free_ char *text = sim_state_to_json(sim_st);
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
    snprintf(lock_path, sizeof(lock_path), "%s/lock", sim_state_dir);
    int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    close(lock_fd);
    lock_fd = fd;
    lock_pid = getpid();
    return 0;
}

/* Under lib_lock: counts a call of `fn` and returns the error the schedule gives it. */
static nvmlReturn_t fault_locked(const char *fn) {
    if (!fn || !faults.n)
        return NVML_SUCCESS;
    const struct sim_fault *hit;
    nvmlReturn_t r = sim_faults_next(&faults, fn, &hit);
    /* An "N+" entry fails every later call too: it is logged once, at the Nth. */
    if (hit && faults.calls[hit->counter] == hit->nth)
        sim_log("GPUSLICE_SIM_FAULTS: call %llu%s of %s fails with %s", hit->nth, hit->and_later ? " and later" : "",
                fn, sim_faults_error_name(hit->ret));
    return r;
}

nvmlReturn_t sim_fault_check(const char *fn) {
    __atomic_add_fetch(&call_count, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&lib_lock);
    nvmlReturn_t r = init_count == 0 ? NVML_ERROR_UNINITIALIZED : fault_locked(fn);
    pthread_mutex_unlock(&lib_lock);
    return r;
}

int sim_set_faults(const char *spec, char *err, size_t errlen) {
    struct sim_faults next;
    int r = sim_faults_parse("fault schedule", spec, &next, err, errlen);
    if (r < 0)
        return r;
    pthread_mutex_lock(&lib_lock);
    if (init_count == 0) {
        r = -ENXIO;
        snprintf(err, errlen, "simulated NVML is not initialised");
    } else {
        faults = next;
    }
    pthread_mutex_unlock(&lib_lock);
    return r;
}

/* The process mutex guards the cached copy between threads; flock guards the file between
 * processes. A scheduled fault fails the call before it sees the state. */
nvmlReturn_t lock_state(bool write, const char *fn) {
    __atomic_add_fetch(&call_count, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&lib_lock);
    nvmlReturn_t fault = init_count == 0 ? NVML_ERROR_UNINITIALIZED : fault_locked(fn);
    if (fault != NVML_SUCCESS) {
        pthread_mutex_unlock(&lib_lock);
        return fault;
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

nvmlReturn_t unlock_state(nvmlReturn_t ret, bool save) {
    if (save && ret == NVML_SUCCESS && save_state_locked() < 0)
        ret = NVML_ERROR_UNKNOWN;
    else if (save && ret == NVML_SUCCESS)
        (void)sim_root_sync(sim_st, sim_state_dir); /* instances, processes made or gone */
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
        if (gs_strlcpy(sim_state_dir, dir, sizeof(sim_state_dir)) < 0) {
            sim_log("GPUSLICE_SIM_STATE is too long");
            return NVML_ERROR_INVALID_ARGUMENT;
        }
    } else {
        const char *rt = getenv("XDG_RUNTIME_DIR");
        snprintf(sim_state_dir, sizeof(sim_state_dir), "%s/gpuslice-sim-%u", rt && *rt ? rt : "/tmp", (unsigned)getuid());
    }
    /* Counted per process from this nvmlInit (docs/simulator.md#fault-schedule). */
    if (sim_faults_parse("GPUSLICE_SIM_FAULTS", getenv("GPUSLICE_SIM_FAULTS"), &faults, err, sizeof(err)) < 0) {
        sim_log("%s", err);
        return NVML_ERROR_INVALID_ARGUMENT;
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
    int r = gs_mkdir_p(sim_state_dir, 0700);
    if (r < 0) {
        sim_log("Failed to create state directory %s: %s", sim_state_dir, strerror(-r));
        return NVML_ERROR_NO_PERMISSION;
    }
    char lock_path[PATH_MAX + 8];
    snprintf(lock_path, sizeof(lock_path), "%s/lock", sim_state_dir);
    snprintf(state_path, sizeof(state_path), "%s/state.json", sim_state_dir);
    lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    lock_pid = getpid();
    if (lock_fd < 0) {
        sim_log("Failed to open %s: %s", lock_path, strerror(errno));
        return NVML_ERROR_NO_PERMISSION;
    }
    sim_st = calloc(1, sizeof(*sim_st));
    if (!sim_st) {
        close(lock_fd);
        lock_fd = -1;
        return NVML_ERROR_MEMORY;
    }
    cache_valid = false;
    flock(lock_fd, LOCK_EX);
    char fp[sizeof(sim_st->fingerprint)];
    sim_state_fingerprint(&node, fp, sizeof(fp));
    bool fresh = true;
    if (access(state_path, F_OK) == 0) {
        if (load_state_locked() == 0 && strcmp(sim_st->fingerprint, fp) == 0)
            fresh = false;
        else
            sim_log("State in %s does not match %s (or is damaged): starting a fresh simulated node", sim_state_dir,
                    node_path);
    }
    nvmlReturn_t ret = NVML_SUCCESS;
    if (fresh) {
        sim_state_init(sim_st, &node, random_seed());
        if (save_state_locked() < 0)
            ret = NVML_ERROR_NO_PERMISSION;
    }
    /* The node's files (/proc, /dev, the driver root) beside its state: a failure only costs the
     * tools that read them, so it is reported and NVML goes on. */
    char root[PATH_MAX];
    sim_root_dir(sim_state_dir, root, sizeof(root));
    if (ret == NVML_SUCCESS && (r = sim_root_create(sim_st, sim_state_dir)) < 0 && r != -EROFS)
        sim_log("Failed to create the node's root %s: %s", root, strerror(-r));
    flock(lock_fd, LOCK_UN);
    if (ret != NVML_SUCCESS) {
        free(sim_st);
        sim_st = NULL;
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

/* NVML_INIT_FLAG_NO_GPUS (1) and NVML_INIT_FLAG_NO_ATTACH (2) change nothing here: the simulated
 * node always has its GPUs and attaches to none. nvidia-ml-py's nvmlInit calls this. */
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    return flags & ~3u ? NVML_ERROR_INVALID_ARGUMENT : nvmlInit_v2();
}

EXPORT nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&lib_lock);
    nvmlReturn_t ret = NVML_SUCCESS;
    bool join = false;
    pthread_t stopping;
    if (init_count == 0) {
        ret = NVML_ERROR_UNINITIALIZED;
    } else if (--init_count == 0) {
        free(sim_st);
        sim_st = NULL;
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
