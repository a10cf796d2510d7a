/* fake_mps_control.c: a stand-in for nvidia-cuda-mps-control, for tests only. It behaves the way
 * src/mps/mps.h relies on the real one behaving:
 *   -d    daemonizes (the started process exits 0 once the daemon listens); the daemon listens
 *         on $CUDA_MPS_PIPE_DIRECTORY/control (a unix socket, as the real one's log says), writes
 *         its pid to $CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid, and records its
 *         environment ("env NAME=VALUE") and every command ("cmd TEXT") in
 *         $CUDA_MPS_LOG_DIRECTORY/control.log. Exits 1 when a daemon already serves the directory.
 *   (no argument)  the client: sends each stdin line to the daemon, prints the answers; exits 1
 *         when no daemon answers.
 * Commands: get_default_active_thread_percentage ("100.0" until set), set_default_active_thread_
 * percentage N (answers "N.0"), set_default_device_pinned_mem_limit DEV VALUE,
 * get_default_device_pinned_mem_limit DEV, quit. With GS_FAKE_MPS_JOURNAL set, the daemon also
 * appends "<CUDA_VISIBLE_DEVICES> <command>" lines to that file, which outlives the log directory.
 * A daemon ends by itself after GS_FAKE_MPS_LIFETIME_S seconds (default 120), so a failed test
 * leaves nothing behind for long. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static const char *pipe_dir(void) {
    const char *d = getenv("CUDA_MPS_PIPE_DIRECTORY");
    return d ? d : "/tmp/nvidia-mps";
}

static int socket_addr(struct sockaddr_un *a) {
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path, sizeof(a->sun_path), "%s/control", pipe_dir());
    return n < 0 || (size_t)n >= sizeof(a->sun_path) ? -1 : 0;
}

static int connect_daemon(void) {
    struct sockaddr_un a;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || socket_addr(&a) < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

static void append(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void append(const char *path, const char *fmt, ...) {
    FILE *f = path ? fopen(path, "a") : NULL;
    if (!f)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fclose(f);
}

static int client(void) {
    char line[512];
    while (fgets(line, sizeof(line), stdin)) {
        line[strcspn(line, "\n")] = '\0';
        if (!line[0])
            continue;
        int fd = connect_daemon();
        if (fd < 0) {
            fprintf(stderr, "Cannot find MPS control daemon process\n");
            return 1;
        }
        dprintf(fd, "%s\n", line);
        shutdown(fd, SHUT_WR);
        char buf[512];
        ssize_t n;
        while ((n = read(fd, buf, sizeof(buf))) > 0)
            fwrite(buf, 1, (size_t)n, stdout);
        close(fd);
    }
    return 0;
}

/* One command; returns 1 for quit. */
static int serve(int fd, const char *log, const char *journal, double *percent, char *pinned, size_t pinned_len) {
    char line[512];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof(line) - 1 && (r = read(fd, line + n, sizeof(line) - 1 - n)) > 0)
        n += (size_t)r;
    line[n] = '\0';
    line[strcspn(line, "\r\n")] = '\0';
    const char *gpu = getenv("CUDA_VISIBLE_DEVICES");
    append(log, "cmd %s\n", line);
    append(journal, "%s %s\n", gpu ? gpu : "-", line);
    char dev[64], value[64];
    unsigned v;
    if (strcmp(line, "get_default_active_thread_percentage") == 0) {
        dprintf(fd, "%.1f\n", *percent);
    } else if (sscanf(line, "set_default_active_thread_percentage %u", &v) == 1 && v <= 100) {
        *percent = v;
        dprintf(fd, "%.1f\n", *percent);
    } else if (sscanf(line, "set_default_device_pinned_mem_limit %63s %63s", dev, value) == 2) {
        snprintf(pinned, pinned_len, "%s", value);
    } else if (sscanf(line, "get_default_device_pinned_mem_limit %63s", dev) == 1) {
        dprintf(fd, "%s\n", pinned[0] ? pinned : "0M");
    } else if (strcmp(line, "quit") == 0) {
        return 1;
    } else {
        dprintf(fd, "Unrecognized command\n");
    }
    return 0;
}

static int daemonize(void) {
    struct sockaddr_un a;
    char pid_file[512], log[512];
    const char *log_dir = getenv("CUDA_MPS_LOG_DIRECTORY");
    snprintf(pid_file, sizeof(pid_file), "%s/nvidia-cuda-mps-control.pid", pipe_dir());
    snprintf(log, sizeof(log), "%s/control.log", log_dir ? log_dir : "/var/log/nvidia-mps");
    int probe = connect_daemon();
    if (probe >= 0) {
        fprintf(stderr, "An instance of this daemon is already running\n");
        return 1;
    }
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0 || socket_addr(&a) < 0)
        return 1;
    unlink(a.sun_path);
    if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 16) < 0) {
        fprintf(stderr, "Cannot listen on %s: %s\n", a.sun_path, strerror(errno));
        return 1;
    }
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid > 0)
        _exit(0); /* the started process: the daemon listens already */
    setsid();
    unlink(pid_file);
    append(pid_file, "%d\n", (int)getpid());
    static const char *const vars[] = { "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY", "CUDA_VISIBLE_DEVICES",
                                        NULL };
    for (size_t i = 0; vars[i]; i++)
        append(log, "env %s=%s\n", vars[i], getenv(vars[i]) ? getenv(vars[i]) : "");
    const char *life = getenv("GS_FAKE_MPS_LIFETIME_S");
    alarm(life ? (unsigned)atoi(life) : 120);
    freopen("/dev/null", "r", stdin);
    freopen("/dev/null", "w", stdout);
    freopen("/dev/null", "w", stderr);

    double percent = 100.0;
    char pinned[64] = "";
    const char *journal = getenv("GS_FAKE_MPS_JOURNAL");
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        int quit = serve(fd, log, journal, &percent, pinned, sizeof(pinned));
        close(fd);
        if (quit) {
            unlink(a.sun_path);
            unlink(pid_file);
            return 0;
        }
    }
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    if (argc > 1 && strcmp(argv[1], "-d") == 0)
        return daemonize();
    if (argc > 1) {
        fprintf(stderr, "usage: %s [-d]\n", argv[0]);
        return 2;
    }
    return client();
}
