/* mps.c: MPS control daemon supervision (see mps.h). The pure part comes first; the I/O part
 * runs the control binary with posix_spawn, its stdin and output in memfds (no pipes to block
 * on or to raise SIGPIPE), and watches daemons through pidfds. */
#include "mps/mps.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config/policy.h"
#include "util/log.h"
#include "util/util.h"

extern char **environ;

#define MS 1000000ULL
#define START_POLL_MS 50        /* how often a starting daemon is looked at */
#define KILL_WAIT_MS 1000       /* from SIGKILL to giving up on seeing the exit */
#define OUTPUT_MAX 4096         /* of one run of the control binary */
#define PERCENT_TOLERANCE 2.0   /* a daemon may round the percentage to its SM granularity */
#define REMOVE_DEPTH_MAX 8

/* ---- pure ---- */

static const char *const state_names[] = { "stopped", "starting", "running", "restarting", "failed" };

const char *gs_mps_state_name(enum gs_mps_state state) {
    return (unsigned)state < GS_ARRAY_SIZE(state_names) ? state_names[state] : "unknown";
}

struct gs_mps_timing gs_mps_timing_defaults(const struct gs_mps_timing *t) {
    struct gs_mps_timing d = t ? *t : (struct gs_mps_timing){ 0 };
    static const struct gs_mps_timing def = {
        .backoff_min_ms = 500,
        .backoff_max_ms = 30000,
        .start_timeout_ms = 10000,
        .command_timeout_ms = 3000,
        .stop_timeout_ms = 5000,
        .probe_interval_ms = 300000,
        .failed_after = 5,
    };
    d.backoff_min_ms = d.backoff_min_ms ? d.backoff_min_ms : def.backoff_min_ms;
    d.backoff_max_ms = d.backoff_max_ms ? d.backoff_max_ms : def.backoff_max_ms;
    if (d.backoff_max_ms < d.backoff_min_ms)
        d.backoff_max_ms = d.backoff_min_ms;
    d.start_timeout_ms = d.start_timeout_ms ? d.start_timeout_ms : def.start_timeout_ms;
    d.command_timeout_ms = d.command_timeout_ms ? d.command_timeout_ms : def.command_timeout_ms;
    d.stop_timeout_ms = d.stop_timeout_ms ? d.stop_timeout_ms : def.stop_timeout_ms;
    d.probe_interval_ms = d.probe_interval_ms ? d.probe_interval_ms : def.probe_interval_ms;
    d.failed_after = d.failed_after ? d.failed_after : def.failed_after;
    return d;
}

uint64_t gs_mps_backoff_ms(const struct gs_mps_timing *t, unsigned failures) {
    uint64_t d = t->backoff_min_ms;
    for (unsigned i = 1; i < failures && d < t->backoff_max_ms; i++)
        d *= 2;
    return d < t->backoff_max_ms ? d : t->backoff_max_ms;
}

static uint64_t after_ms(uint64_t now_ns, uint64_t ms) {
    return ms >= UINT64_MAX / MS || now_ns > UINT64_MAX - ms * MS ? UINT64_MAX : now_ns + ms * MS;
}

enum gs_mps_state gs_mps_fsm_event(struct gs_mps_fsm *f, enum gs_mps_event ev, uint64_t now_ns,
                                   const struct gs_mps_timing *t) {
    switch (ev) {
    case GS_MPS_EV_START:
        if (f->state == GS_MPS_RESTARTING || f->state == GS_MPS_FAILED)
            f->restarts++;
        else if (f->state != GS_MPS_STOPPED)
            break;
        f->state = GS_MPS_STARTING;
        f->due_ns = after_ms(now_ns, t->start_timeout_ms);
        break;
    case GS_MPS_EV_READY:
        if (f->state != GS_MPS_STARTING)
            break;
        f->state = GS_MPS_RUNNING;
        f->ready_ns = now_ns;
        f->due_ns = t->probe_interval_ms == GS_MPS_PROBE_NEVER ? UINT64_MAX : after_ms(now_ns, t->probe_interval_ms);
        break;
    case GS_MPS_EV_PROBED:
        if (f->state == GS_MPS_RUNNING)
            f->due_ns =
                t->probe_interval_ms == GS_MPS_PROBE_NEVER ? UINT64_MAX : after_ms(now_ns, t->probe_interval_ms);
        break;
    case GS_MPS_EV_FAILED:
    case GS_MPS_EV_DIED:
        if (f->state != (ev == GS_MPS_EV_FAILED ? GS_MPS_STARTING : GS_MPS_RUNNING))
            break;
        /* A daemon that ran for a while starts its failures afresh: one crash a day restarts fast. */
        if (ev == GS_MPS_EV_DIED && now_ns - f->ready_ns >= t->backoff_max_ms * MS)
            f->failures = 0;
        if (f->failures < UINT_MAX)
            f->failures++;
        f->state = f->failures >= t->failed_after ? GS_MPS_FAILED : GS_MPS_RESTARTING;
        f->due_ns = after_ms(now_ns, gs_mps_backoff_ms(t, f->failures));
        break;
    case GS_MPS_EV_STOP:
        f->state = GS_MPS_STOPPED;
        f->failures = 0;
        f->due_ns = 0;
        break;
    }
    return f->state;
}

bool gs_mps_fsm_due(const struct gs_mps_fsm *f, uint64_t now_ns) { return now_ns >= f->due_ns; }

bool gs_mps_uuid_valid(const char *uuid) {
    size_t n = strlen(uuid);
    if (n <= 4 || n >= GS_MPS_UUID_MAX || (strncmp(uuid, "GPU-", 4) != 0 && strncmp(uuid, "MIG-", 4) != 0))
        return false;
    return strspn(uuid + 4, "0123456789abcdefABCDEF-") == n - 4;
}

int gs_mps_paths(const char *root, const char *uuid, struct gs_mps_paths *out) {
    if (!root || root[0] != '/' || !gs_mps_uuid_valid(uuid))
        return -EINVAL;
    int rootlen = (int)strnlen(root, GS_MPS_PATH_MAX);
    while (rootlen > 1 && root[rootlen - 1] == '/')
        rootlen--;
    if (rootlen == 1)
        rootlen = 0; /* "/" + "/GPU-..." */
    struct {
        char *buf;
        const char *leaf;
    } parts[] = {
        { out->dir, "" }, { out->pipe, "/pipe" }, { out->log, "/log" },
        { out->pid_file, "/pipe/" GS_MPS_PID_FILE }, { out->socket, "/pipe/" GS_MPS_SOCKET },
    };
    for (size_t i = 0; i < GS_ARRAY_SIZE(parts); i++) {
        int n = snprintf(parts[i].buf, GS_MPS_PATH_MAX, "%.*s/%s%s", rootlen, root, uuid, parts[i].leaf);
        if (n < 0 || n >= GS_MPS_PATH_MAX)
            return -ENAMETOOLONG;
    }
    /* The daemon binds its control socket there; sun_path holds 107 characters and a NUL. */
    if (strlen(out->socket) >= sizeof(((struct sockaddr_un *)NULL)->sun_path))
        return -ENAMETOOLONG;
    return 0;
}

int gs_mps_cmd_thread_percentage(char *buf, size_t len, unsigned percent) {
    if (percent < 1 || percent > 100)
        return -EINVAL;
    int n = snprintf(buf, len, "set_default_active_thread_percentage %u", percent);
    return n < 0 || (size_t)n >= len ? -ENOBUFS : 0;
}

int gs_mps_cmd_pinned_limit(char *buf, size_t len, const char *device, unsigned long long bytes) {
    unsigned long long mib = bytes >> 20;
    if (mib == 0 || !*device || strpbrk(device, " \t\r\n"))
        return -EINVAL;
    int n = snprintf(buf, len, "set_default_device_pinned_mem_limit %s %lluM", device, mib);
    return n < 0 || (size_t)n >= len ? -ENOBUFS : 0;
}

int gs_mps_parse_percentage(const char *reply, double *out) {
    while (*reply == ' ' || *reply == '\t')
        reply++;
    if (*reply < '0' || *reply > '9')
        return -EINVAL; /* also refuses what strtod would take: "inf", "nan", signs */
    char *end;
    double v = strtod(reply, &end);
    end += strspn(end, " \t\r\n");
    if (*end || !(v >= 0.0 && v <= 100.0))
        return -EINVAL;
    *out = v;
    return 0;
}

int gs_mps_parse_pid(const char *text, pid_t *out) {
    size_t digits = strspn(text, "0123456789");
    unsigned long long v;
    char num[16];
    if (digits == 0 || digits >= sizeof(num) || text[digits + strspn(text + digits, " \t\r\n")] != '\0')
        return -EINVAL;
    memcpy(num, text, digits);
    num[digits] = '\0';
    if (gs_parse_uint(num, 2, INT_MAX, &v) < 0)
        return -EINVAL;
    *out = (pid_t)v;
    return 0;
}

int gs_mps_resolve_limits(unsigned replicas, unsigned compute_per_replica, unsigned long long pinned_per_replica,
                          unsigned long long mem_total, unsigned *percent, unsigned long long *pinned) {
    if (replicas < 1)
        return -EINVAL;
    *percent = compute_per_replica == GS_COMPUTE_AUTO ? 100 / replicas
                                                      : (compute_per_replica > 100 ? 100 : compute_per_replica);
    if (*percent == 0)
        *percent = 1;
    if (pinned_per_replica == GS_MEMORY_AUTO)
        *pinned = mem_total / replicas;
    else
        *pinned = mem_total && pinned_per_replica > mem_total ? mem_total : pinned_per_replica;
    return 0;
}

/* ---- supervision ---- */

struct daemon {
    struct gs_mps_gpu gpu;
    struct gs_mps_paths paths;
    struct gs_mps_fsm fsm;
    pid_t pid;          /* from its pid file; 0: none known */
    int pidfd;          /* -1: none (or no pidfd support) */
    bool dirty;         /* its defaults changed: set them again */
    bool reported;      /* the health last reported by a tick */
    uint64_t poll_ns;   /* STARTING: next look */
    char error[256];
};

struct gs_mps_sup {
    char root[GS_MPS_PATH_MAX];
    char control[GS_MPS_PATH_MAX];
    char comm[16];      /* /proc/PID/comm of the control binary: its name, cut at 15 characters */
    struct gs_mps_timing t;
    int epfd;
    struct daemon *d;
    size_t n;
};

/* Keeps errno, so that `return set_error(d, "...: %s", strerror(errno)), -errno;` works. */
__attribute__((format(printf, 2, 3))) static int set_error(struct daemon *d, const char *fmt, ...) {
    int saved = errno;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->error, sizeof(d->error), fmt, ap);
    va_end(ap);
    errno = saved;
    return -1;
}

/* One line of the control binary's output for a message: control characters become '?'. */
static void one_line(char *s, size_t max) {
    size_t n = strnlen(s, max);
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\r'))
        n--;
    s[n] = '\0';
    for (char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
}

static void sleep_ms(unsigned ms) {
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

/* Waits for a child of ours; SIGKILL after timeout_ms. */
static int wait_child(pid_t pid, unsigned timeout_ms, int *status) {
    uint64_t end = after_ms(gs_now_ns(), timeout_ms);
    for (unsigned step = 1;; step = step < 8 ? step * 2 : 10) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid)
            return 0;
        if (r < 0 && errno != EINTR)
            return -errno;
        if (gs_now_ns() >= end) {
            kill(pid, SIGKILL);
            while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
            }
            return -ETIMEDOUT;
        }
        sleep_ms(step);
    }
}

/* A memory file holding "line\n" (empty for line NULL), read from its start. */
static int memfd_with(const char *name, const char *line) {
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (line && (dprintf(fd, "%s\n", line) < 0 || lseek(fd, 0, SEEK_SET) < 0)) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

/* The agent's environment without MPS settings of its own, plus the daemon's three. */
static char **daemon_env(const struct daemon *d, char vars[3][GS_MPS_PATH_MAX + 32]) {
    size_t n = 0;
    while (environ && environ[n])
        n++;
    char **env = calloc(n + 4, sizeof(*env));
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "CUDA_MPS_", 9) != 0 && strncmp(environ[i], "CUDA_VISIBLE_DEVICES=", 21) != 0)
            env[k++] = environ[i];
    snprintf(vars[0], sizeof(vars[0]), "CUDA_MPS_PIPE_DIRECTORY=%s", d->paths.pipe);
    snprintf(vars[1], sizeof(vars[1]), "CUDA_MPS_LOG_DIRECTORY=%s", d->paths.log);
    snprintf(vars[2], sizeof(vars[2]), "CUDA_VISIBLE_DEVICES=%s", d->gpu.uuid);
    for (int i = 0; i < 3; i++)
        env[k++] = vars[i];
    return env;
}

/* Runs the control binary for daemon d: `control -d` (arg "-d") or the client (arg NULL) with
 * the command cmd on stdin. Its stdout and stderr go to out. Returns 0 when it exited with
 * status 0; otherwise -errno with d->error set. */
static int run_control(const struct gs_mps_sup *s, struct daemon *d, const char *arg, const char *cmd, char *out,
                       size_t outlen) {
    const char *what = arg ? arg : cmd;
    out[0] = '\0';
    _cleanup_close_ int in = memfd_with("gs-mps-in", cmd);
    _cleanup_close_ int outfd = memfd_with("gs-mps-out", NULL);
    if (in < 0 || outfd < 0)
        return set_error(d, "memfd_create: %s", strerror(in < 0 ? -in : -outfd)), in < 0 ? in : outfd;
    char vars[3][GS_MPS_PATH_MAX + 32];
    _cleanup_free_ char **env = daemon_env(d, vars);
    if (!env)
        return set_error(d, "out of memory"), -ENOMEM;

    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_adddup2(&fa, in, STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&fa, outfd, STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&fa, outfd, STDERR_FILENO);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1); /* the agent's sockets stay its own */
#endif
    /* The agent blocks the signals it reads through signalfd; the daemon must not inherit that. */
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
#ifdef POSIX_SPAWN_SETSID
    flags |= POSIX_SPAWN_SETSID; /* out of the agent's session: a terminal's ^C does not reach it */
#endif
    posix_spawnattr_setflags(&attr, flags);
    char *argv[] = { (char *)s->control, (char *)arg, NULL };
    pid_t pid;
    int r = strchr(s->control, '/') ? posix_spawn(&pid, s->control, &fa, &attr, argv, env)
                                    : posix_spawnp(&pid, s->control, &fa, &attr, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (r != 0)
        return set_error(d, "cannot run %s%s: %s", s->control, strchr(s->control, '/') ? "" : " (searched in PATH)",
                         strerror(r)),
               -r;

    int status = 0;
    r = wait_child(pid, s->t.command_timeout_ms, &status);
    ssize_t got = pread(outfd, out, outlen - 1, 0);
    out[got > 0 ? got : 0] = '\0';
    char line[160], shown[sizeof(line) + 2] = "";
    gs_strlcpy(line, out, sizeof(line));
    one_line(line, sizeof(line));
    if (line[0])
        snprintf(shown, sizeof(shown), ": %s", line);
    if (r == -ETIMEDOUT)
        return set_error(d, "%s '%s': no exit within %u ms", s->control, what, s->t.command_timeout_ms), r;
    if (r < 0)
        return set_error(d, "%s '%s': waitpid: %s", s->control, what, strerror(-r)), r;
    if (WIFSIGNALED(status))
        return set_error(d, "%s '%s': killed by signal %d%s", s->control, what, WTERMSIG(status), shown), -EIO;
    if (WEXITSTATUS(status) != 0)
        return set_error(d, "%s '%s' exited with status %d%s", s->control, what, WEXITSTATUS(status), shown), -EIO;
    return 0;
}

static int command(const struct gs_mps_sup *s, struct daemon *d, const char *cmd, char *reply, size_t len) {
    return run_control(s, d, NULL, cmd, reply, len);
}

/* The daemon's defaults, then the probe NVIDIA's plugin uses to see that it answers. */
static int set_defaults(const struct gs_mps_sup *s, struct daemon *d) {
    char cmd[128], reply[OUTPUT_MAX];
    int r;
    if (d->gpu.thread_percentage) {
        gs_mps_cmd_thread_percentage(cmd, sizeof(cmd), d->gpu.thread_percentage);
        if ((r = command(s, d, cmd, reply, sizeof(reply))) < 0)
            return r;
    }
    /* Device 0: the daemon sees only its own GPU (CUDA_VISIBLE_DEVICES), and limits set by UUID
     * were found not to apply (NVIDIA k8s-device-plugin #572). */
    if (d->gpu.pinned_mem_limit && gs_mps_cmd_pinned_limit(cmd, sizeof(cmd), "0", d->gpu.pinned_mem_limit) == 0 &&
        (r = command(s, d, cmd, reply, sizeof(reply))) < 0)
        return r;
    if ((r = command(s, d, GS_MPS_CMD_PROBE, reply, sizeof(reply))) < 0)
        return r;
    double v;
    one_line(reply, sizeof(reply));
    if (gs_mps_parse_percentage(reply, &v) < 0)
        return set_error(d, "%s: unexpected answer '%.64s'", GS_MPS_CMD_PROBE, reply), -EPROTO;
    double off = v - d->gpu.thread_percentage;
    if (d->gpu.thread_percentage && (off > PERCENT_TOLERANCE || off < -PERCENT_TOLERANCE))
        return set_error(d, "%s answers %.64s after it was set to %u", GS_MPS_CMD_PROBE, reply,
                         d->gpu.thread_percentage),
               -EPROTO;
    return 0;
}

static bool pid_alive(pid_t pid) { return kill(pid, 0) == 0 || errno == EPERM; }

/* Guards against a pid file naming a process that is not (or no longer) d's control daemon: its
 * name is the control binary's, and its environment, where readable, has d's pipe directory (a
 * reused pid could belong to another GPU's daemon). */
static bool pid_is_control(const struct gs_mps_sup *s, const struct daemon *d, pid_t pid) {
    char path[64];
    _cleanup_free_ char *comm = NULL, *env = NULL;
    size_t len;
    snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
    if (gs_read_file(path, 64, &comm, NULL) < 0)
        return false;
    comm[strcspn(comm, "\n")] = '\0';
    if (strcmp(comm, s->comm) != 0)
        return false;
    snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
    if (gs_read_file(path, 1 << 20, &env, &len) < 0)
        return true;
    for (size_t i = 0; i < len; i += strlen(env + i) + 1)
        if (strncmp(env + i, "CUDA_MPS_PIPE_DIRECTORY=", 24) == 0)
            return strcmp(env + i + 24, d->paths.pipe) == 0;
    return true;
}

/* The live control daemon named by d's pid file, or 0. */
static pid_t pid_from_file(const struct gs_mps_sup *s, const struct daemon *d) {
    _cleanup_free_ char *text = NULL;
    pid_t pid;
    if (gs_read_file(d->paths.pid_file, 64, &text, NULL) < 0 || gs_mps_parse_pid(text, &pid) < 0)
        return 0;
    return pid_alive(pid) && pid_is_control(s, d, pid) ? pid : 0;
}

static void watch(struct gs_mps_sup *s, struct daemon *d, pid_t pid) {
    d->pid = pid;
#ifdef SYS_pidfd_open
    d->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
#endif
    if (d->pidfd >= 0) {
        struct epoll_event ev = { .events = EPOLLIN, .data.fd = d->pidfd };
        epoll_ctl(s->epfd, EPOLL_CTL_ADD, d->pidfd, &ev);
    }
}

static void forget(struct gs_mps_sup *s, struct daemon *d) {
    if (d->pidfd >= 0) {
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, d->pidfd, NULL);
        close(d->pidfd);
        d->pidfd = -1;
    }
    /* A daemon is our child only when the agent is a subreaper (PID 1 in a container): reap it. */
    if (d->pid > 0) {
        waitpid(d->pid, NULL, WNOHANG);
        unlink(d->paths.pid_file);
    }
    d->pid = 0;
}

static bool exited(struct daemon *d) {
    if (d->pidfd >= 0) {
        struct pollfd p = { .fd = d->pidfd, .events = POLLIN };
        return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP));
    }
    return d->pid > 0 && (waitpid(d->pid, NULL, WNOHANG) == d->pid || !pid_alive(d->pid));
}

/* Waits up to ms for the daemon to exit. */
static bool wait_gone(struct daemon *d, unsigned ms) {
    uint64_t end = after_ms(gs_now_ns(), ms);
    for (;;) {
        if (exited(d))
            return true;
        if (gs_now_ns() >= end)
            return false;
        if (d->pidfd >= 0) {
            struct pollfd p = { .fd = d->pidfd, .events = POLLIN };
            poll(&p, 1, 10);
        } else {
            sleep_ms(5);
        }
    }
}

static void kill_daemon(struct gs_mps_sup *s, struct daemon *d) {
    if (d->pid > 0 && !exited(d) && pid_is_control(s, d, d->pid)) {
        kill(d->pid, SIGKILL);
        if (!wait_gone(d, KILL_WAIT_MS))
            log_warn("MPS %s: control daemon (pid %d) still there %u ms after SIGKILL", d->gpu.uuid, (int)d->pid,
                     KILL_WAIT_MS);
    }
    forget(s, d);
}

/* A directory of the daemon's: created 0755, never a symbolic link, ours, not writable by others. */
static int own_dir(struct daemon *d, const char *path) {
    if (mkdir(path, 0755) < 0 && errno != EEXIST)
        return set_error(d, "mkdir %s: %s", path, strerror(errno)), -errno;
    struct stat st;
    if (lstat(path, &st) < 0)
        return set_error(d, "%s: %s", path, strerror(errno)), -errno;
    if (S_ISLNK(st.st_mode))
        return set_error(d, "%s is a symbolic link; refusing to use it", path), -ELOOP;
    _cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0)
        return set_error(d, "%s: %s", path, strerror(errno)), -errno;
    if (st.st_uid != geteuid())
        return set_error(d, "%s belongs to uid %u, not to us (uid %u)", path, (unsigned)st.st_uid,
                         (unsigned)geteuid()),
               -EPERM;
    if ((st.st_mode & 07777) != 0755 && fchmod(fd, 0755) < 0)
        return set_error(d, "chmod 0755 %s: %s", path, strerror(errno)), -errno;
    return 0;
}

static int make_dirs(const struct gs_mps_sup *s, struct daemon *d) {
    int r = gs_mkdir_p(s->root, 0755);
    if (r < 0)
        return set_error(d, "cannot create the MPS root %s: %s", s->root, strerror(-r)), r;
    if ((r = own_dir(d, d->paths.dir)) < 0 || (r = own_dir(d, d->paths.pipe)) < 0 || (r = own_dir(d, d->paths.log)) < 0)
        return r;
    return 0;
}

/* Removes name under dirfd and everything in it, never following a symbolic link. */
static int remove_at(int dirfd, const char *name, unsigned depth) {
    if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
        return 0;
    if (errno != EISDIR)
        return -errno;
    if (depth >= REMOVE_DEPTH_MAX)
        return -ELOOP;
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    DIR *dir = fdopendir(fd);
    if (!dir) {
        int e = -errno;
        close(fd);
        return e;
    }
    int r = 0;
    for (struct dirent *e; (e = readdir(dir));)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 && r == 0)
            r = remove_at(fd, e->d_name, depth + 1);
    closedir(dir);
    if (r == 0 && unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
        r = -errno;
    return r;
}

static int remove_dirs(const struct gs_mps_sup *s, struct daemon *d) {
    _cleanup_close_ int rootfd = open(s->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        return errno == ENOENT ? 0 : (set_error(d, "%s: %s", s->root, strerror(errno)), -errno);
    int r = remove_at(rootfd, d->gpu.uuid, 0);
    if (r < 0)
        set_error(d, "cannot remove %s: %s", d->paths.dir, strerror(-r));
    return r;
}

static void on_failure(const struct gs_mps_sup *s, struct daemon *d, enum gs_mps_event ev, uint64_t now) {
    gs_mps_fsm_event(&d->fsm, ev, now, &s->t);
    log_warn("MPS %s: %s; %s, next start in %llu ms", d->gpu.uuid, d->error, gs_mps_state_name(d->fsm.state),
             (unsigned long long)gs_mps_backoff_ms(&s->t, d->fsm.failures));
}

/* STARTING: pid file, then defaults and the probe; failure only once the start timeout is over,
 * since a daemon may take a moment to listen. */
static void finish_start(struct gs_mps_sup *s, struct daemon *d, uint64_t now) {
    bool due = gs_mps_fsm_due(&d->fsm, now);
    if (!d->pid) {
        pid_t pid = pid_from_file(s, d);
        if (pid)
            watch(s, d, pid);
        else if (!due)
            return;
        else
            set_error(d, "no control daemon in %s within %u ms", d->paths.pid_file, s->t.start_timeout_ms);
    }
    if (d->pid && exited(d)) {
        set_error(d, "control daemon (pid %d) exited while starting", (int)d->pid);
        due = true;
    } else if (d->pid && set_defaults(s, d) == 0) {
        gs_mps_fsm_event(&d->fsm, GS_MPS_EV_READY, now, &s->t);
        d->dirty = false;
        d->error[0] = '\0';
        log_info("MPS %s: control daemon running (pid %d, %s)", d->gpu.uuid, (int)d->pid, d->paths.pipe);
        return;
    }
    if (due) {
        kill_daemon(s, d);
        on_failure(s, d, GS_MPS_EV_FAILED, now);
    }
}

static void start(struct gs_mps_sup *s, struct daemon *d, uint64_t now) {
    gs_mps_fsm_event(&d->fsm, GS_MPS_EV_START, now, &s->t);
    d->poll_ns = after_ms(now, START_POLL_MS);
    if (make_dirs(s, d) < 0) {
        on_failure(s, d, GS_MPS_EV_FAILED, now);
        return;
    }
    pid_t pid = pid_from_file(s, d);
    if (pid) {
        log_info("MPS %s: adopting the running control daemon (pid %d)", d->gpu.uuid, (int)pid);
        watch(s, d, pid);
    } else {
        char out[OUTPUT_MAX];
        /* Left by a daemon that is gone (killed, or the node's last agent): a new one binds anew. */
        unlink(d->paths.pid_file);
        unlink(d->paths.socket);
        if (run_control(s, d, "-d", NULL, out, sizeof(out)) < 0) {
            on_failure(s, d, GS_MPS_EV_FAILED, now);
            return;
        }
    }
    finish_start(s, d, now);
}

/* Quit, SIGKILL if it lingers, directories removed. */
static int stop_daemon(struct gs_mps_sup *s, struct daemon *d) {
    if (!d->pid) {
        pid_t pid = pid_from_file(s, d);
        if (pid)
            watch(s, d, pid);
    }
    if (d->pid > 0 && !exited(d)) {
        char reply[OUTPUT_MAX];
        if (command(s, d, GS_MPS_CMD_QUIT, reply, sizeof(reply)) < 0)
            log_warn("MPS %s: %s", d->gpu.uuid, d->error);
        if (!wait_gone(d, s->t.stop_timeout_ms)) {
            log_warn("MPS %s: control daemon (pid %d) did not quit within %u ms; killing it", d->gpu.uuid,
                     (int)d->pid, s->t.stop_timeout_ms);
            kill_daemon(s, d);
        }
    }
    forget(s, d);
    gs_mps_fsm_event(&d->fsm, GS_MPS_EV_STOP, gs_now_ns(), &s->t);
    int r = remove_dirs(s, d);
    if (r < 0)
        log_warn("MPS %s: %s", d->gpu.uuid, d->error);
    else
        log_info("MPS %s: control daemon stopped, %s removed", d->gpu.uuid, d->paths.dir);
    return r;
}

static void tick_one(struct gs_mps_sup *s, struct daemon *d, uint64_t now) {
    char reply[OUTPUT_MAX];
    switch (d->fsm.state) {
    case GS_MPS_STOPPED:
        start(s, d, now);
        break;
    case GS_MPS_STARTING:
        if (now >= d->poll_ns || (d->pid && exited(d))) {
            d->poll_ns = after_ms(now, START_POLL_MS);
            finish_start(s, d, now);
        }
        break;
    case GS_MPS_RUNNING:
        if (exited(d)) {
            set_error(d, "control daemon (pid %d) exited", (int)d->pid);
            forget(s, d);
            on_failure(s, d, GS_MPS_EV_DIED, now);
        } else if (d->dirty || gs_mps_fsm_due(&d->fsm, now)) {
            int r = d->dirty ? set_defaults(s, d) : command(s, d, GS_MPS_CMD_PROBE, reply, sizeof(reply));
            if (r < 0) {
                kill_daemon(s, d); /* it does not answer: a new one must take the pipe directory */
                on_failure(s, d, GS_MPS_EV_DIED, now);
            } else {
                d->dirty = false;
                gs_mps_fsm_event(&d->fsm, GS_MPS_EV_PROBED, now, &s->t);
            }
        }
        break;
    case GS_MPS_RESTARTING:
    case GS_MPS_FAILED:
        if (gs_mps_fsm_due(&d->fsm, now))
            start(s, d, now);
        break;
    }
}

int gs_mps_sup_tick(struct gs_mps_sup *s, uint64_t now_ns, struct gs_mps_change *changes, size_t max,
                    size_t *n_changes) {
    *n_changes = 0;
    for (size_t i = 0; i < s->n; i++) {
        struct daemon *d = &s->d[i];
        tick_one(s, d, now_ns);
        bool healthy = d->fsm.state == GS_MPS_RUNNING;
        if (healthy != d->reported && *n_changes < max) {
            struct gs_mps_change *c = &changes[(*n_changes)++];
            gs_strlcpy(c->uuid, d->gpu.uuid, sizeof(c->uuid));
            c->healthy = healthy;
            c->state = d->fsm.state;
            d->reported = healthy;
        }
    }
    return 0;
}

uint64_t gs_mps_sup_next_due(const struct gs_mps_sup *s) {
    uint64_t next = UINT64_MAX;
    for (size_t i = 0; i < s->n; i++) {
        const struct daemon *d = &s->d[i];
        uint64_t due = d->fsm.due_ns;
        if (d->fsm.state == GS_MPS_STOPPED || d->dirty)
            due = 0;
        else if (d->fsm.state == GS_MPS_STARTING && d->poll_ns < due)
            due = d->poll_ns;
        if (due < next)
            next = due;
    }
    return next;
}

int gs_mps_sup_fd(const struct gs_mps_sup *s) { return s->epfd; }

static const struct daemon *find(const struct gs_mps_sup *s, const char *uuid) {
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->d[i].gpu.uuid, uuid) == 0)
            return &s->d[i];
    return NULL;
}

enum gs_mps_state gs_mps_sup_state(const struct gs_mps_sup *s, const char *uuid) {
    const struct daemon *d = find(s, uuid);
    return d ? d->fsm.state : GS_MPS_STOPPED;
}

int gs_mps_sup_info(const struct gs_mps_sup *s, const char *uuid, struct gs_mps_info *out) {
    const struct daemon *d = find(s, uuid);
    if (!d)
        return -ENOENT;
    *out = (struct gs_mps_info){
        .state = d->fsm.state,
        .healthy = d->fsm.state == GS_MPS_RUNNING,
        .pid = d->pid,
        .restarts = d->fsm.restarts,
    };
    gs_strlcpy(out->error, d->error, sizeof(out->error));
    return 0;
}

int gs_mps_sup_set_gpus(struct gs_mps_sup *s, const struct gs_mps_gpu *gpus, size_t n) {
    struct gs_mps_paths paths;
    for (size_t i = 0; i < n; i++) {
        int r = gs_mps_paths(s->root, gpus[i].uuid, &paths);
        if (r < 0)
            return log_error("MPS: GPU '%.64s': %s", gpus[i].uuid,
                             r == -EINVAL ? "not a GPU or MIG UUID (GPU-... or MIG-...)"
                                          : "the control socket's path under the MPS root is too long"),
                   r;
        if (gpus[i].thread_percentage > 100)
            return log_error("MPS %s: thread percentage %u is over 100", gpus[i].uuid, gpus[i].thread_percentage),
                   -EINVAL;
        for (size_t j = 0; j < i; j++)
            if (strcmp(gpus[i].uuid, gpus[j].uuid) == 0)
                return log_error("MPS %s: listed twice", gpus[i].uuid), -EINVAL;
    }
    struct daemon *next = calloc(n ? n : 1, sizeof(*next));
    if (!next)
        return -ENOMEM;
    bool *kept = calloc(s->n ? s->n : 1, sizeof(*kept));
    if (!kept) {
        free(next);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        struct daemon *d = &next[i];
        const struct daemon *old = find(s, gpus[i].uuid);
        if (old) {
            *d = *old;
            kept[old - s->d] = true;
            d->dirty = d->dirty || d->gpu.thread_percentage != gpus[i].thread_percentage ||
                       d->gpu.pinned_mem_limit != gpus[i].pinned_mem_limit;
        } else {
            *d = (struct daemon){ .pidfd = -1 };
            gs_mps_paths(s->root, gpus[i].uuid, &d->paths);
        }
        d->gpu = gpus[i];
    }
    for (size_t i = 0; i < s->n; i++)
        if (!kept[i])
            stop_daemon(s, &s->d[i]);
    free(kept);
    free(s->d);
    s->d = next;
    s->n = n;
    return 0;
}

int gs_mps_sup_stop_stale(struct gs_mps_sup *s) {
    DIR *dir = opendir(s->root);
    if (!dir) {
        if (errno == ENOENT)
            return 0;
        return log_error("MPS: cannot read %s: %s", s->root, strerror(errno)), -errno;
    }
    int stopped = 0, first = 0;
    for (struct dirent *e; (e = readdir(dir));) {
        struct daemon d = { .pidfd = -1 };
        if (!gs_mps_uuid_valid(e->d_name) || find(s, e->d_name) || gs_mps_paths(s->root, e->d_name, &d.paths) < 0)
            continue;
        gs_strlcpy(d.gpu.uuid, e->d_name, sizeof(d.gpu.uuid));
        log_info("MPS %s: not served any more", d.gpu.uuid);
        int r = stop_daemon(s, &d);
        if (r < 0 && first == 0)
            first = r;
        stopped++;
    }
    closedir(dir);
    return first < 0 ? first : stopped;
}

int gs_mps_sup_stop_all(struct gs_mps_sup *s) {
    int first = 0;
    for (size_t i = 0; i < s->n; i++) {
        int r = stop_daemon(s, &s->d[i]);
        if (r < 0 && first == 0)
            first = r;
    }
    s->n = 0;
    return first;
}

int gs_mps_sup_new(const struct gs_mps_opts *opts, struct gs_mps_sup **out) {
    const char *root = opts && opts->root ? opts->root : GS_MPS_ROOT_DEFAULT;
    const char *control = opts && opts->control ? opts->control : GS_MPS_CONTROL_DEFAULT;
    if (root[0] != '/' || !*control)
        return log_error("MPS: the root '%s' is not an absolute path", root), -EINVAL;
    struct gs_mps_sup *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    if (gs_strlcpy(s->root, root, sizeof(s->root)) < 0 || gs_strlcpy(s->control, control, sizeof(s->control)) < 0) {
        free(s);
        return -ENAMETOOLONG;
    }
    const char *base = strrchr(control, '/');
    gs_strlcpy(s->comm, base ? base + 1 : control, sizeof(s->comm));
    s->t = gs_mps_timing_defaults(opts ? &opts->timing : NULL);
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (s->epfd < 0) {
        int e = -errno;
        free(s);
        return e;
    }
    *out = s;
    return 0;
}

void gs_mps_sup_free(struct gs_mps_sup *s) {
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        if (s->d[i].pidfd >= 0)
            close(s->d[i].pidfd);
    close(s->epfd);
    free(s->d);
    free(s);
}
