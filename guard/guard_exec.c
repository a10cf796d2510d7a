/* guard_exec.c: the guard's limits follow every program a guarded process starts.
 *
 * Where the limits come from, decided once at load (guard_exec_init), in this order:
 *   1. the file the agent mounts read-only into a container (GPUSLICE_GUARD_CONFIG is ignored);
 *   2. `gpuslice exec`: the sealed memfd it keeps at GS_GUARD_ANCHOR_FD of its own process, found
 *      by walking this process's ancestors (guard_anchor.h). Nothing in the environment or in the
 *      descriptors a process inherits counts, so a child started by system(), popen(), a launcher
 *      that closes every descriptor (Python's close_fds, closefrom) or one that names its own
 *      GPUSLICE_GUARD_CONFIG gets the limits `gpuslice exec` was given;
 *   3. GPUSLICE_GUARD_CONFIG (a file, or /proc/self/fd/N: a sealed memfd at N), as the tests and a
 *      hand-made LD_PRELOAD use it: cooperative.
 * The limits are read at load from a descriptor (2, and 3 with /proc/self/fd/N), before the program
 * can close it.
 *
 * So that the guard is loaded at all, every program a guarded process executes gets LD_PRELOAD
 * with the guard (and GPUSLICE_GUARD_CONFIG naming where the limits are) back in its environment,
 * whatever the caller put there: execve, execv, execvp, execvpe, execl, execlp, execle, fexecve,
 * execveat, posix_spawn, posix_spawnp, and system and popen (glibc starts their shells with an
 * internal posix_spawn that no preload can wrap, so the guard runs them itself when the environment
 * lacks the guard, and always for popen). The exec wrappers run in children of fork and vfork
 * (Python's subprocess), where only async-signal-safe calls are safe: they use no malloc, no stdio
 * and no dlsym (the real functions are resolved at load), only the stack, and mmap for an
 * environment too large for it. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "guard_anchor.h"
#include "guard_exec.h"
#include "guard_limits.h"

#define EXPORT __attribute__((visibility("default")))
#define FD_CONFIG_PREFIX "/proc/self/fd/"
#define SEALS_NEEDED (F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK)

extern char **environ;

struct guard_config g_cfg = { .fd = -1, .fd_num = -1 };
static char g_self_path[512];

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*fexecve_fn)(int, char *const[], char *const[]);
typedef int (*execveat_fn)(int, const char *, char *const[], char *const[], int);
typedef int (*posix_spawn_fn)(pid_t *, const char *, const posix_spawn_file_actions_t *, const posix_spawnattr_t *,
                              char *const[], char *const[]);
typedef int (*system_fn)(const char *);
typedef int (*pclose_fn)(FILE *);

static execve_fn real_execve, real_execvpe;
static fexecve_fn real_fexecve;
static execveat_fn real_execveat;
static posix_spawn_fn real_posix_spawn, real_posix_spawnp;
static system_fn real_system;
static pclose_fn real_pclose;

guard_dlsym_fn real_dlsym;

void resolve_dlsym(void) {
    if (real_dlsym)
        return;
    /* glibc >= 2.34 versions dlsym GLIBC_2.34 in libc; older ones GLIBC_2.2.5 (x86-64) or 2.17. */
    static const char *const versions[] = { "GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", NULL };
    for (const char *const *v = versions; *v && !real_dlsym; v++)
        real_dlsym = (guard_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", *v);
}

/* The real function: resolved at load; a call before the guard's constructor (another library's)
 * looks it up then. */
static void *next_sym(const char *name) {
    resolve_dlsym();
    return real_dlsym ? real_dlsym(RTLD_NEXT, name) : NULL;
}
#define REAL(name) (real_##name ? real_##name : (real_##name = (__typeof__(real_##name))next_sym(#name)))

char *guard_read_all(int fd, size_t *len) {
    char *text = calloc(1, GS_GUARD_LIMITS_MAX + 2);
    size_t n = 0;
    while (text && n <= GS_GUARD_LIMITS_MAX) {
        ssize_t r = pread(fd, text + n, GS_GUARD_LIMITS_MAX + 1 - n, (off_t)n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            free(text);
            errno = e;
            return NULL;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    *len = n;
    return text;
}

/* The limits from a sealed memfd at fd (no one can change its content), into g_cfg.text, or why not. */
static void read_sealed(int fd) {
    g_cfg.from_fd = true;
    int seals = fd < 0 ? -1 : fcntl(fd, F_GET_SEALS);
    if (fd < 0)
        snprintf(g_cfg.why, sizeof(g_cfg.why), "%s", strerror(errno));
    else if (seals < 0 || (seals & SEALS_NEEDED) != SEALS_NEEDED)
        snprintf(g_cfg.why, sizeof(g_cfg.why), "the descriptor is not a sealed memfd (its content could change)");
    else if (!(g_cfg.text = guard_read_all(fd, &g_cfg.len)))
        snprintf(g_cfg.why, sizeof(g_cfg.why), "%s", strerror(errno));
    char *small = g_cfg.text ? realloc(g_cfg.text, g_cfg.len + 1) : NULL; /* kept for the process's life */
    if (small)
        g_cfg.text = small;
}

static void find_self(void) {
    Dl_info info;
    if (!g_self_path[0] && dladdr((void *)find_self, &info) && info.dli_fname)
        snprintf(g_self_path, sizeof(g_self_path), "%s", info.dli_fname);
}

void guard_exec_init(const char *mounted_config) {
    find_self();
    resolve_dlsym();
    REAL(execve);
    REAL(execvpe);
    REAL(fexecve);
    REAL(execveat); /* NULL before glibc 2.34: the system call then */
    REAL(posix_spawn);
    REAL(posix_spawnp);
    REAL(system);
    REAL(pclose);
    const char *env = getenv("GPUSLICE_GUARD_CONFIG");
    struct stat st;
    pid_t anchor;
    if (stat(mounted_config, &st) == 0) {
        /* In a container: the read-only file the agent mounted, whatever the environment says. */
        snprintf(g_cfg.path, sizeof(g_cfg.path), "%s", mounted_config);
        snprintf(g_cfg.source, sizeof(g_cfg.source), "%.63s", mounted_config);
    } else if ((anchor = gs_guard_anchor_find()) > 0) {
        /* Under gpuslice exec: its memfd, through its /proc entry (descriptors of our own may be gone). */
        snprintf(g_cfg.path, sizeof(g_cfg.path), "/proc/%d/fd/%d", (int)anchor, GS_GUARD_ANCHOR_FD);
        snprintf(g_cfg.source, sizeof(g_cfg.source), "gpuslice exec (pid %d)", (int)anchor);
        int fd = open(g_cfg.path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        read_sealed(fd);
        if (fd >= 0)
            close(fd);
    } else if (env && strlen(env) < sizeof(g_cfg.path)) {
        strcpy(g_cfg.path, env);
        /* A sealed memfd at N: kept at a descriptor of the guard's own, and put back at N for the
         * programs this one executes (guarded_env). */
        if (!strncmp(env, FD_CONFIG_PREFIX, strlen(FD_CONFIG_PREFIX))) {
            char *end;
            long n = strtol(env + strlen(FD_CONFIG_PREFIX), &end, 10);
            g_cfg.from_fd = true;
            if (*end == '\0' && n >= 0 && n < 65536 && (g_cfg.fd = fcntl((int)n, F_DUPFD_CLOEXEC, 512)) >= 0) {
                g_cfg.fd_num = (int)n;
                read_sealed(g_cfg.fd);
            } else {
                snprintf(g_cfg.why, sizeof(g_cfg.why), "no such descriptor at load time");
            }
        }
        return;
    } else {
        snprintf(g_cfg.path, sizeof(g_cfg.path), "%s", mounted_config);
        return;
    }
    if (env && strcmp(env, g_cfg.path) != 0)
        snprintf(g_cfg.ignored, sizeof(g_cfg.ignored), "%.500s", env);
}

/* ---- the environment of an exec'd program ----------------------------------------------------- */

/* Whether an LD_PRELOAD value (names separated by ':' or blanks) names the guard. */
static bool preload_has_self(const char *v) {
    size_t self = strlen(g_self_path);
    while (*v) {
        size_t n = strcspn(v, ": \t");
        if (n == self && !memcmp(v, g_self_path, n))
            return true;
        v += n;
        if (*v)
            v++;
    }
    return false;
}

/* A sealed-memfd config at N (GPUSLICE_GUARD_CONFIG=/proc/self/fd/N) is put back at N before an
 * exec, from the guard's copy, or, when the program closed that too (closefrom), from the text read
 * at load into a new sealed memfd. System calls only. */
static void restore_config_fd(void) {
    if (g_cfg.fd_num < 0)
        return;
    if (g_cfg.fd >= 0 && fcntl(g_cfg.fd, F_GETFD) >= 0) {
        dup2(g_cfg.fd, g_cfg.fd_num); /* without close-on-exec: the child reads it */
        return;
    }
    if (!g_cfg.text)
        return;
    int fd = memfd_create(GS_GUARD_ANCHOR_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return;
    if (write(fd, g_cfg.text, g_cfg.len) == (ssize_t)g_cfg.len &&
        fcntl(fd, F_ADD_SEALS, SEALS_NEEDED | F_SEAL_SEAL) == 0)
        dup2(fd, g_cfg.fd_num);
    close(fd);
}

/* Room for an exec'd program's environment: on the stack, or mapped when larger (a vfork child
 * must not call malloc; the mapping is given back when the exec fails or in the parent). */
struct env_room {
    _Alignas(char *) char stack[16384];
    void *map;
    size_t map_len;
};

static void env_room_done(struct env_room *r) {
    if (r->map)
        munmap(r->map, r->map_len);
    r->map = NULL;
}

static char *put(char *dst, const char *s) {
    size_t n = strlen(s);
    memcpy(dst, s, n);
    return dst + n;
}

/* envp with LD_PRELOAD naming the guard (prepended to the value the dynamic linker would use: the
 * last LD_PRELOAD) and one GPUSLICE_GUARD_CONFIG, this process's, replacing whatever the caller
 * put there; envp itself when it has both already. Async-signal-safe. */
static char *const *guarded_env(char *const envp[], struct env_room *room) {
    room->map = NULL;
    restore_config_fd();
    const char *cfg = g_cfg.path[0] ? g_cfg.path : NULL;
    size_t n = 0, n_cfg = 0, n_preload = 0;
    const char *last_preload = NULL;
    bool cfg_ok = !cfg;
    for (; envp && envp[n]; n++) {
        if (!strncmp(envp[n], "LD_PRELOAD=", 11)) {
            n_preload++;
            last_preload = envp[n] + 11;
        } else if (!strncmp(envp[n], "GPUSLICE_GUARD_CONFIG=", 22)) {
            n_cfg++;
            cfg_ok = cfg && !strcmp(envp[n] + 22, cfg);
        }
    }
    bool want_preload = g_self_path[0] != '\0';
    bool preload_ok = !want_preload || (n_preload == 1 && preload_has_self(last_preload));
    if (preload_ok && cfg_ok && n_cfg <= 1)
        return envp;
    size_t need = (n + 3) * sizeof(char *) + sizeof("LD_PRELOAD=:") + strlen(g_self_path) +
                  (last_preload ? strlen(last_preload) : 0) + sizeof("GPUSLICE_GUARD_CONFIG=") + (cfg ? strlen(cfg) : 0);
    char *mem = room->stack;
    if (need > sizeof(room->stack)) {
        mem = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED)
            return envp;
        room->map = mem;
        room->map_len = need;
    }
    char **out = (char **)(void *)mem;
    char *str = mem + (n + 3) * sizeof(char *);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (cfg && !strncmp(envp[i], "GPUSLICE_GUARD_CONFIG=", 22))
            continue; /* ours is added below */
        if (want_preload && !strncmp(envp[i], "LD_PRELOAD=", 11))
            continue; /* likewise */
        out[k++] = envp[i];
    }
    if (want_preload) {
        out[k++] = str;
        str = put(str, "LD_PRELOAD=");
        if (last_preload && preload_has_self(last_preload)) {
            str = put(str, last_preload); /* the one the dynamic linker uses names the guard already */
        } else {
            str = put(str, g_self_path);
            if (last_preload && *last_preload) {
                *str++ = ':';
                str = put(str, last_preload);
            }
        }
        *str++ = '\0';
    }
    if (cfg) {
        out[k++] = str;
        str = put(str, "GPUSLICE_GUARD_CONFIG=");
        str = put(str, cfg);
        *str++ = '\0';
    }
    out[k] = NULL;
    return out;
}

/* ---- the exec family ------------------------------------------------------------------------- */

#define GUARDED_CALL(call)                                                                                     \
    struct env_room room_;                                                                                     \
    int r_ = (call);                                                                                           \
    int e_ = errno;                                                                                            \
    env_room_done(&room_);                                                                                     \
    errno = e_;                                                                                                \
    return r_

#define NO_REAL(name)                                                                                          \
    if (!REAL(name)) {                                                                                         \
        errno = ENOSYS;                                                                                        \
        return -1;                                                                                             \
    }

EXPORT int execve(const char *path, char *const argv[], char *const envp[]) {
    NO_REAL(execve);
    GUARDED_CALL(real_execve(path, argv, guarded_env(envp, &room_)));
}

EXPORT int execvpe(const char *file, char *const argv[], char *const envp[]) {
    NO_REAL(execvpe);
    GUARDED_CALL(real_execvpe(file, argv, guarded_env(envp, &room_)));
}

EXPORT int fexecve(int fd, char *const argv[], char *const envp[]) {
    NO_REAL(fexecve);
    GUARDED_CALL(real_fexecve(fd, argv, guarded_env(envp, &room_)));
}

EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags) {
    if (REAL(execveat)) {
        GUARDED_CALL(real_execveat(dirfd, path, argv, guarded_env(envp, &room_), flags));
    }
    GUARDED_CALL((int)syscall(SYS_execveat, dirfd, path, argv, guarded_env(envp, &room_), flags));
}

EXPORT int execv(const char *path, char *const argv[]) { return execve(path, argv, environ); }
EXPORT int execvp(const char *file, char *const argv[]) { return execvpe(file, argv, environ); }

/* The variadic forms: argv collected on the stack (mapped when longer: no malloc after fork), then
 * the execve family. */
#define ARGS_ON_STACK 512
#define COLLECT_ARGS(first, extra_after)                                                                      \
    size_t n_ = 1;                                                                                            \
    va_list ap_;                                                                                              \
    va_start(ap_, first);                                                                                     \
    while (va_arg(ap_, char *))                                                                               \
        n_++;                                                                                                 \
    va_end(ap_);                                                                                              \
    char *stack_[ARGS_ON_STACK], **argv_ = stack_;                                                            \
    size_t map_len_ = (n_ + 1) * sizeof(char *);                                                              \
    if (n_ + 1 > ARGS_ON_STACK &&                                                                             \
        (argv_ = mmap(NULL, map_len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)) == MAP_FAILED) { \
        errno = ENOMEM;                                                                                       \
        return -1;                                                                                            \
    }                                                                                                         \
    va_start(ap_, first);                                                                                     \
    argv_[0] = (char *)first;                                                                                 \
    for (size_t i_ = 1; i_ <= n_; i_++)                                                                       \
        argv_[i_] = va_arg(ap_, char *);                                                                      \
    extra_after;                                                                                              \
    va_end(ap_)

#define ARGS_DONE(r)                                                                                          \
    int e_ = errno;                                                                                           \
    if (argv_ != stack_)                                                                                      \
        munmap(argv_, map_len_);                                                                              \
    errno = e_;                                                                                               \
    return (r)

EXPORT int execl(const char *path, const char *arg, ...) {
    COLLECT_ARGS(arg, (void)0);
    int r = execve(path, argv_, environ);
    ARGS_DONE(r);
}

EXPORT int execlp(const char *file, const char *arg, ...) {
    COLLECT_ARGS(arg, (void)0);
    int r = execvpe(file, argv_, environ);
    ARGS_DONE(r);
}

EXPORT int execle(const char *path, const char *arg, ...) {
    char *const *envp;
    COLLECT_ARGS(arg, envp = va_arg(ap_, char *const *));
    int r = execve(path, argv_, envp);
    ARGS_DONE(r);
}

static int spawn_guarded(posix_spawn_fn real, pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                         const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
    if (!real)
        return ENOSYS;
    struct env_room room;
    int r = real(pid, path, fa, attr, argv, guarded_env(envp, &room));
    env_room_done(&room);
    return r;
}

EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                       const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
    return spawn_guarded(REAL(posix_spawn), pid, path, fa, attr, argv, envp);
}

EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                        const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
    return spawn_guarded(REAL(posix_spawnp), pid, file, fa, attr, argv, envp);
}

/* ---- system and popen ------------------------------------------------------------------------ */

#define SHELL "/bin/sh"

/* pid's wait status, or -1. */
static int wait_status(pid_t pid) {
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return status;
}

/* system(line) as glibc runs it (SIGINT and SIGQUIT ignored and SIGCHLD blocked while it waits;
 * the shell gets their defaults back), with the environment env. */
static int shell_system(const char *line, char *const env[]) {
    struct sigaction ign = { .sa_handler = SIG_IGN }, intr, quit;
    sigemptyset(&ign.sa_mask);
    sigset_t chld, omask, dfl;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, &omask);
    sigaction(SIGINT, &ign, &intr);
    sigaction(SIGQUIT, &ign, &quit);
    sigemptyset(&dfl);
    if (intr.sa_handler != SIG_IGN)
        sigaddset(&dfl, SIGINT);
    if (quit.sa_handler != SIG_IGN)
        sigaddset(&dfl, SIGQUIT);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setsigdefault(&attr, &dfl);
    posix_spawnattr_setsigmask(&attr, &omask);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    char *argv[] = { (char *)"sh", (char *)"-c", (char *)"--", (char *)line, NULL };
    pid_t pid;
    int e = REAL(posix_spawn) ? real_posix_spawn(&pid, SHELL, NULL, &attr, argv, env) : ENOSYS;
    int status = e == 0 ? wait_status(pid) : 127 << 8; /* as if the shell had exited 127 */
    posix_spawnattr_destroy(&attr);
    sigaction(SIGINT, &intr, NULL);
    sigaction(SIGQUIT, &quit, NULL);
    sigprocmask(SIG_SETMASK, &omask, NULL);
    return status;
}

EXPORT int system(const char *line) {
    struct env_room room;
    char *const *env = guarded_env(environ, &room);
    int r = !line || env == environ ? (REAL(system) ? real_system(line) : -1) : shell_system(line, env);
    env_room_done(&room);
    return r;
}

/* The streams popen opened and their shells. popen always runs its shell itself (the environment
 * may lack the guard at any call), so it knows every stream it must close in a new child (POSIX). */
struct popen_child {
    FILE *f;
    int fd;
    pid_t pid;
    struct popen_child *next;
};
static struct popen_child *g_popen;
static pthread_mutex_t g_popen_lock = PTHREAD_MUTEX_INITIALIZER;

EXPORT FILE *popen(const char *command, const char *mode) {
    bool rd = false, wr = false, cloexec = false;
    for (const char *m = mode; m && *m; m++) {
        if (*m == 'r')
            rd = true;
        else if (*m == 'w')
            wr = true;
        else if (*m == 'e')
            cloexec = true;
        else
            rd = wr = true; /* refused below */
    }
    struct popen_child *c = calloc(1, sizeof(*c));
    int p[2];
    if (!mode || rd == wr || !c || pipe2(p, O_CLOEXEC) < 0) {
        int e = !mode || rd == wr ? EINVAL : errno;
        free(c);
        errno = e;
        return NULL;
    }
    int parent = rd ? p[0] : p[1], child = rd ? p[1] : p[0], target = rd ? STDOUT_FILENO : STDIN_FILENO;
    if (child == target) { /* stdin or stdout was closed: dup2 onto itself would keep close-on-exec */
        int d = fcntl(child, F_DUPFD_CLOEXEC, 3);
        close(child);
        child = d;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    pthread_mutex_lock(&g_popen_lock);
    for (struct popen_child *o = g_popen; o; o = o->next)
        posix_spawn_file_actions_addclose(&fa, o->fd);
    if (child >= 0)
        posix_spawn_file_actions_adddup2(&fa, child, target);
    struct env_room room;
    room.map = NULL;
    char *argv[] = { (char *)"sh", (char *)"-c", (char *)"--", (char *)command, NULL };
    int e = child < 0 ? EMFILE : !REAL(posix_spawn) ? ENOSYS
                                                      : real_posix_spawn(&c->pid, SHELL, &fa, NULL, argv,
                                                                         guarded_env(environ, &room));
    env_room_done(&room);
    posix_spawn_file_actions_destroy(&fa);
    if (child >= 0)
        close(child);
    if (e == 0 && !cloexec)
        fcntl(parent, F_SETFD, 0);
    c->f = e == 0 ? fdopen(parent, rd ? "r" : "w") : NULL;
    if (!c->f) {
        if (e == 0) { /* no stream: the shell is still reaped */
            e = errno;
            close(parent);
            while (waitpid(c->pid, NULL, 0) < 0 && errno == EINTR)
                ;
        } else {
            close(parent);
        }
        pthread_mutex_unlock(&g_popen_lock);
        free(c);
        errno = e;
        return NULL;
    }
    c->fd = parent;
    c->next = g_popen;
    g_popen = c;
    pthread_mutex_unlock(&g_popen_lock);
    return c->f;
}

EXPORT int pclose(FILE *f) {
    pthread_mutex_lock(&g_popen_lock);
    struct popen_child **pp = &g_popen, *c = NULL;
    for (; *pp; pp = &(*pp)->next) {
        if ((*pp)->f == f) {
            c = *pp;
            *pp = c->next;
            break;
        }
    }
    pthread_mutex_unlock(&g_popen_lock);
    if (!c) /* not one of ours */
        return REAL(pclose) ? real_pclose(f) : -1;
    fclose(f);
    int status = wait_status(c->pid);
    free(c);
    return status;
}
