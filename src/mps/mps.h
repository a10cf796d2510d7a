/* mps.h: supervision of NVIDIA MPS control daemons, one `nvidia-cuda-mps-control -d` per GPU or MIG
 * instance shared with MPS (NVIDIA's plugin runs one per resource, for all its GPUs, and does not
 * watch it after start: NVIDIA/k8s-device-plugin v0.20.0, cmd/mps-control-daemon).
 *
 * Each daemon gets its own directories under the MPS root (flags.mpsRoot):
 *   <root>/<uuid>/pipe   CUDA_MPS_PIPE_DIRECTORY: the daemon's `control` socket and its pid file
 *                        `nvidia-cuda-mps-control.pid`; mounted into client containers
 *   <root>/<uuid>/log    CUDA_MPS_LOG_DIRECTORY: control.log, server.log
 * and CUDA_VISIBLE_DEVICES=<uuid>, so the daemon sees one device, which it numbers 0.
 *
 * What this relies on about the real nvidia-cuda-mps-control (NVIDIA's MPS documentation and
 * man page; NVIDIA k8s-device-plugin): `-d` starts the daemon in the background (the started
 * process exits, the daemon lives on); the same binary without arguments is the client, which
 * reads commands on stdin, writes answers on stdout and exits non-zero when no daemon serves the
 * pipe directory; the daemon writes its pid to <pipe>/nvidia-cuda-mps-control.pid;
 * `get_default_active_thread_percentage` answers a number such as "25.0"; the memory limit is
 * `set_default_device_pinned_mem_limit <dev> <integer>M|G`, and the device is given as index 0
 * (the only device the daemon sees) because NVIDIA found limits set by UUID not applied (NVIDIA
 * k8s-device-plugin PR #572); defaults only apply to MPS servers started after they are set;
 * `quit` ends the daemon. Tests run against a stand-in (tests/mps/fake_mps_control.c).
 *
 * A dead daemon is seen through a pidfd on the pid of its pid file (poll: readable when the
 * process exits; kill(pid, 0) where pidfds are missing), so its GPU turns unhealthy at the next
 * tick; the fd from gs_mps_sup_fd() wakes the caller's epoll at once. It is restarted with
 * exponential backoff. A daemon found running at start (an agent restart) is adopted when it
 * answers and is the control binary (/proc/PID/comm, and the pipe directory in its environment),
 * and gets its defaults set again. gs_mps_sup_stop_stale() stops those of GPUs no longer served.
 *
 * The pure part (backoff, state machine, command texts, replies, paths) is separate from the
 * I/O part (gs_mps_sup_*), which runs the control binary synchronously with short timeouts from
 * the caller's event loop: no threads. It reaps its own children by pid, so the caller must not
 * reap with waitpid(-1) nor set SIGCHLD to SIG_IGN. Errors are -errno; the message with its
 * context goes to the log and to gs_mps_info.error. Not thread-safe: one thread drives a
 * supervisor. */
#ifndef GS_MPS_H
#define GS_MPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define GS_MPS_UUID_MAX 64
#define GS_MPS_PATH_MAX 512
#define GS_MPS_CONTROL_DEFAULT "nvidia-cuda-mps-control"
#define GS_MPS_PID_FILE "nvidia-cuda-mps-control.pid"
#define GS_MPS_SOCKET "control"
#define GS_MPS_CMD_PROBE "get_default_active_thread_percentage"
#define GS_MPS_CMD_QUIT "quit"

enum gs_mps_state {
    GS_MPS_STOPPED = 0, /* not started (yet), or stopped */
    GS_MPS_STARTING,    /* spawned or found; waiting for it to answer and take its defaults */
    GS_MPS_RUNNING,     /* answered: the GPU's MPS devices are healthy */
    GS_MPS_RESTARTING,  /* died or failed to start; started again after a backoff */
    GS_MPS_FAILED,      /* failed `failed_after` times in a row; still retried every backoff_max_ms */
};

/* "stopped", "starting", "running", "restarting", "failed" (for labels and metrics). */
const char *gs_mps_state_name(enum gs_mps_state state);

/* ---- pure ---- */

#define GS_MPS_PROBE_NEVER 0xFFFFFFFFu

/* Zeros mean the defaults given. */
struct gs_mps_timing {
    unsigned backoff_min_ms;    /* 500: first restart delay, doubled on each failure */
    unsigned backoff_max_ms;    /* 30000; also how long a daemon must run for its failures to be forgotten */
    unsigned start_timeout_ms;  /* 10000: from start to answering with its defaults set */
    unsigned command_timeout_ms; /* 3000: one run of the control binary (client, or `-d` until it forks) */
    unsigned stop_timeout_ms;   /* 5000: from `quit` to the daemon's exit, then SIGKILL */
    unsigned probe_interval_ms; /* 300000: a running daemon is asked to answer this often (each probe adds
                                 * four lines to its control.log, in /run); GS_MPS_PROBE_NEVER */
    unsigned failed_after;      /* 5: consecutive failures before FAILED */
};

/* The timing with defaults filled in. */
struct gs_mps_timing gs_mps_timing_defaults(const struct gs_mps_timing *t);

/* Delay before restart number `failures` (>= 1): min * 2^(failures-1), at most max (ms). */
uint64_t gs_mps_backoff_ms(const struct gs_mps_timing *t, unsigned failures);

enum gs_mps_event {
    GS_MPS_EV_START,    /* STOPPED: start; RESTARTING/FAILED: the backoff is over */
    GS_MPS_EV_READY,    /* STARTING: it answered with its defaults set */
    GS_MPS_EV_FAILED,   /* STARTING: failed or timed out */
    GS_MPS_EV_DIED,     /* RUNNING: the daemon exited, or stopped answering */
    GS_MPS_EV_PROBED,   /* RUNNING: it answered a probe */
    GS_MPS_EV_STOP,     /* any: stopped on purpose */
};

struct gs_mps_fsm {
    enum gs_mps_state state;
    unsigned failures;   /* consecutive failures (reset after backoff_max_ms of running) */
    unsigned restarts;   /* starts after the first, for metrics */
    uint64_t ready_ns;   /* when it last became RUNNING */
    uint64_t due_ns;     /* STARTING: give up; RESTARTING/FAILED: start again; RUNNING: next probe */
};

/* Applies an event at time now (monotonic ns); t must have its defaults filled in. Events that
 * do not apply to the state are ignored. Returns the new state. */
enum gs_mps_state gs_mps_fsm_event(struct gs_mps_fsm *f, enum gs_mps_event ev, uint64_t now_ns,
                                   const struct gs_mps_timing *t);

/* True when the state's deadline (due_ns) has come. */
bool gs_mps_fsm_due(const struct gs_mps_fsm *f, uint64_t now_ns);

/* GPU-... or MIG-... followed by hex digits and dashes, shorter than GS_MPS_UUID_MAX: safe as a
 * directory name. The old "MIG-GPU-<uuid>/<gi>/<ci>" form is refused (use the MIG UUID). */
bool gs_mps_uuid_valid(const char *uuid);

struct gs_mps_paths {
    char dir[GS_MPS_PATH_MAX];     /* <root>/<uuid> */
    char pipe[GS_MPS_PATH_MAX];    /* <root>/<uuid>/pipe */
    char log[GS_MPS_PATH_MAX];     /* <root>/<uuid>/log */
    char pid_file[GS_MPS_PATH_MAX]; /* <pipe>/nvidia-cuda-mps-control.pid */
    char socket[GS_MPS_PATH_MAX];  /* <pipe>/control: must fit in a unix socket address (107) */
};

/* -EINVAL for a bad root (not absolute) or UUID, -ENAMETOOLONG when the control socket's path
 * would not fit in sockaddr_un. */
int gs_mps_paths(const char *root, const char *uuid, struct gs_mps_paths *out);

/* "set_default_active_thread_percentage 25"; percent in 1..100. Returns 0, -EINVAL or -ENOBUFS. */
int gs_mps_cmd_thread_percentage(char *buf, size_t len, unsigned percent);

/* "set_default_device_pinned_mem_limit 0 4096M": bytes rounded down to MiB (at least 1 MiB). */
int gs_mps_cmd_pinned_limit(char *buf, size_t len, const char *device, unsigned long long bytes);

/* The answer to get_default_active_thread_percentage ("25.0\n") in 0..100. 0 or -EINVAL. */
int gs_mps_parse_percentage(const char *reply, double *out);

/* A pid file's text ("1234\n"): a pid > 1. 0 or -EINVAL. */
int gs_mps_parse_pid(const char *text, pid_t *out);

/* The policy's per-replica limits for one GPU (or MIG instance) of mem_total bytes:
 * computePerReplica GS_COMPUTE_AUTO -> 100 / replicas; pinnedMemoryPerReplica GS_MEMORY_AUTO ->
 * mem_total / replicas (0 when mem_total is unknown: no limit); explicit limits larger than the
 * memory are capped to it. -EINVAL when replicas < 1. */
int gs_mps_resolve_limits(unsigned replicas, unsigned compute_per_replica, unsigned long long pinned_per_replica,
                          unsigned long long mem_total, unsigned *percent, unsigned long long *pinned);

/* ---- supervision (I/O) ---- */

struct gs_mps_opts {
    const char *root;            /* flags.mpsRoot; NULL: GS_MPS_ROOT_DEFAULT (config/policy.h) */
    const char *control;         /* the control binary; NULL: GS_MPS_CONTROL_DEFAULT found in PATH */
    struct gs_mps_timing timing; /* zeros: defaults */
};

/* One GPU or MIG instance served by MPS, with the daemon's defaults. */
struct gs_mps_gpu {
    char uuid[GS_MPS_UUID_MAX];          /* as NVML prints it: GPU-... or MIG-... */
    unsigned thread_percentage;          /* 1..100: set_default_active_thread_percentage; 0: not set (100) */
    unsigned long long pinned_mem_limit; /* bytes: set_default_device_pinned_mem_limit; 0: not set */
};

/* A GPU whose health changed in a tick: healthy means its daemon is RUNNING. */
struct gs_mps_change {
    char uuid[GS_MPS_UUID_MAX];
    bool healthy;
    enum gs_mps_state state;
};

struct gs_mps_info {
    enum gs_mps_state state;
    bool healthy;
    pid_t pid;          /* the daemon's, 0 when none */
    unsigned restarts;
    char error[256];    /* the last failure, "" when none since it last became RUNNING */
};

struct gs_mps_sup;

/* Starts nothing; the MPS root is created when the first daemon starts. -EINVAL for a relative
 * root, -ENAMETOOLONG, -ENOMEM. */
int gs_mps_sup_new(const struct gs_mps_opts *opts, struct gs_mps_sup **out);

/* The GPUs to serve (all of them: the list replaces the previous one). GPUs no longer listed are
 * stopped now (quit, directories removed); new ones start at the next tick; changed defaults are
 * set again at the next tick (they reach MPS servers started afterwards). -EINVAL for a bad UUID,
 * a UUID listed twice or a percentage over 100, -ENAMETOOLONG when a daemon's socket path would
 * be too long (nothing changed then). */
int gs_mps_sup_set_gpus(struct gs_mps_sup *s, const struct gs_mps_gpu *gpus, size_t n);

/* Does what is due at now (gs_now_ns()): starts, checks, restarts. Writes up to max GPUs whose
 * health changed to changes and their number to *n_changes (further changes are reported by the
 * next tick). Returns 0 or -errno for a failure of the supervisor itself; a daemon's failures
 * are its state. */
int gs_mps_sup_tick(struct gs_mps_sup *s, uint64_t now_ns, struct gs_mps_change *changes, size_t max,
                    size_t *n_changes);

/* When the next tick is due (monotonic ns; UINT64_MAX: nothing to do until a daemon dies). */
uint64_t gs_mps_sup_next_due(const struct gs_mps_sup *s);

/* An epoll fd, readable when a supervised daemon has exited: add it to the event loop and tick. */
int gs_mps_sup_fd(const struct gs_mps_sup *s);

/* GS_MPS_STOPPED for a GPU that is not served. */
enum gs_mps_state gs_mps_sup_state(const struct gs_mps_sup *s, const char *uuid);
/* -ENOENT for a GPU that is not served. */
int gs_mps_sup_info(const struct gs_mps_sup *s, const char *uuid, struct gs_mps_info *out);

/* Stops the daemons of GPUs under the root that are not served (left by an agent that served
 * them before it restarted) and removes their directories; call it after gs_mps_sup_set_gpus().
 * Entries whose name is not a GPU or MIG UUID are left alone. Returns how many were stopped, or
 * the first error, having tried them all. */
int gs_mps_sup_stop_stale(struct gs_mps_sup *s);

/* Stops every daemon (quit, SIGKILL after stop_timeout_ms) and removes its directories. Returns
 * the first error, having tried them all. */
int gs_mps_sup_stop_all(struct gs_mps_sup *s);

/* Frees the supervisor; daemons still running are left running (a restarted agent adopts them). */
void gs_mps_sup_free(struct gs_mps_sup *s);

#endif
