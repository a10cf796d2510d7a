/* main.c: gpuslice-cdi-hook [--lib-dir DIR] [--ldconfig PATH] [--no-ldconfig]: the createContainer
 * hook of the node's CDI spec (hook.h). It runs on the host with the runtime's privileges before
 * the container starts; everything under the container's root is the image's and hostile: paths
 * are resolved with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS), files are created with
 * O_EXCL | O_NOFOLLOW after removing what was there, and ldconfig (the image's) runs chrooted,
 * with no capabilities, no_new_privs, a clean environment and a 10 s limit. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cdihook/hook.h"

#define CONF_NAME "00-gpuslice.conf"

static int open_in_root(int root, const char *path, int flags) {
    struct open_how how = { .flags = (unsigned long long)(flags | O_CLOEXEC),
                            .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };
    long fd = syscall(SYS_openat2, root, path[0] == '/' ? path + 1 : path, &how, sizeof(how));
    return fd < 0 ? -errno : (int)fd;
}

static int read_fd(int fd, const char *what, char **out, size_t *len) {
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    for (ssize_t r; buf; n += (size_t)r) {
        if (n == cap) {
            if (cap > CH_MAX_JSON) {
                fprintf(stderr, "gpuslice-cdi-hook: %s: larger than %u bytes\n", what, CH_MAX_JSON);
                free(buf);
                return -EFBIG;
            }
            char *nb = realloc(buf, cap *= 2);
            if (!nb)
                free(buf);
            buf = nb;
            if (!buf)
                break;
        }
        if ((r = read(fd, buf + n, cap - n)) < 0 && errno == EINTR)
            r = 0;
        else if (r <= 0) {
            if (r < 0) {
                fprintf(stderr, "gpuslice-cdi-hook: %s: %s\n", what, strerror(errno));
                free(buf);
                return -EIO;
            }
            break;
        }
    }
    if (!buf)
        return -ENOMEM;
    *out = buf;
    *len = n;
    return 0;
}

/* DIR/LINK -> SONAME for each known library in DIR (in the root), unless LINK exists. */
static void make_links(int dir, const char *lib_dir) {
    for (unsigned i = 0; ch_linked[i]; i++) {
        struct stat st;
        if (fstatat(dir, ch_linked[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        const char *link = ch_dev_link(ch_linked[i]);
        if (symlinkat(ch_linked[i], dir, link) < 0 && errno != EEXIST)
            fprintf(stderr, "gpuslice-cdi-hook: %s/%s: %s\n", lib_dir, link, strerror(errno));
    }
}

/* ROOT/etc/ld.so.conf.d/00-gpuslice.conf naming lib_dir. */
static int write_conf(int root, const char *lib_dir) {
    char text[512];
    if (ch_ldconf_text(lib_dir, text, sizeof(text)) < 0)
        return -EINVAL;
    int etc = open_in_root(root, "/etc", O_PATH | O_DIRECTORY);
    if (etc < 0)
        return etc;
    if (mkdirat(etc, "ld.so.conf.d", 0755) < 0 && errno != EEXIST) {
        int r = -errno;
        close(etc);
        return r;
    }
    close(etc);
    int d = open_in_root(root, "/etc/ld.so.conf.d", O_PATH | O_DIRECTORY);
    if (d < 0)
        return d;
    unlinkat(d, CONF_NAME, 0); /* whatever the image put there, a symlink included */
    int fd = openat(d, CONF_NAME, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    int r = fd < 0 ? -errno : 0;
    close(d);
    if (fd >= 0) {
        if (write(fd, text, strlen(text)) != (ssize_t)strlen(text))
            r = -EIO;
        close(fd);
    }
    return r;
}

/* The image's ldconfig, chrooted into the root, without privileges: ldconfig LIB_DIR. */
static int run_ldconfig(int root, const char *ldconfig, const char *lib_dir) {
    int probe = open_in_root(root, ldconfig, O_PATH);
    if (probe < 0) {
        fprintf(stderr, "gpuslice-cdi-hook: %s: not in the image (%s): linker cache not updated\n", ldconfig,
                strerror(-probe));
        return 0;
    }
    close(probe);
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        if (fchdir(root) < 0 || chroot(".") < 0 || chdir("/") < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
            _exit(126);
        for (int c = 0; c <= 63; c++)
            prctl(PR_CAPBSET_DROP, c, 0, 0, 0);
        struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
        struct __user_cap_data_struct none[2] = { { 0 } };
        if (syscall(SYS_capset, &h, none) < 0)
            _exit(126);
        char *const argv[] = { (char *)ldconfig, (char *)lib_dir, NULL };
        char *const envp[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL };
        execve(ldconfig, argv, envp);
        _exit(127);
    }
    int status = 0;
    for (int i = 0; i < 1000; i++) { /* 10 s */
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (i == 999) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            fprintf(stderr, "gpuslice-cdi-hook: %s: killed after 10 s\n", ldconfig);
            return -ETIMEDOUT;
        }
        nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status)) {
        fprintf(stderr, "gpuslice-cdi-hook: %s %s: exit status %d\n", ldconfig, lib_dir,
                WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        return -EIO;
    }
    return 0;
}

int main(int argc, char **argv) {
    enum { OPT_LIB_DIR = 256, OPT_LDCONFIG, OPT_NO_LDCONFIG };
    static const struct option opts[] = {
        { "lib-dir", required_argument, NULL, OPT_LIB_DIR },
        { "ldconfig", required_argument, NULL, OPT_LDCONFIG },
        { "no-ldconfig", no_argument, NULL, OPT_NO_LDCONFIG },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    const char *lib_dir = "/usr/local/nvidia/lib64", *ldconfig = "/sbin/ldconfig";
    bool no_ldconfig = false;
    for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        switch (c) {
        case OPT_LIB_DIR: lib_dir = optarg; break;
        case OPT_LDCONFIG: ldconfig = optarg; break;
        case OPT_NO_LDCONFIG: no_ldconfig = true; break;
        case 'h':
            printf("Usage: gpuslice-cdi-hook [--lib-dir DIR] [--ldconfig PATH] [--no-ldconfig] < OCI-STATE\n\n"
                   "An OCI createContainer hook: in the container's root (from the state's bundle/config.json),\n"
                   "links libcuda.so -> libcuda.so.1 (and libnvidia-opticalflow.so) in DIR (default\n"
                   "/usr/local/nvidia/lib64), writes etc/ld.so.conf.d/" CONF_NAME " naming DIR and runs the\n"
                   "image's ldconfig (default /sbin/ldconfig) chrooted into the root, without privileges.\n");
            return 0;
        default: return 2;
        }
    }
    if (optind < argc || ch_path_ok(lib_dir) < 0 || ch_path_ok(ldconfig) < 0) {
        fprintf(stderr, "gpuslice-cdi-hook: usage: gpuslice-cdi-hook [--lib-dir DIR] [--ldconfig PATH] (absolute "
                        "paths without '..')\n");
        return 2;
    }
    char *text, err[512], bundle[4096], root[4096], cfg[4200];
    size_t len;
    if (read_fd(0, "OCI state (stdin)", &text, &len) < 0)
        return 1;
    int r = ch_state_bundle(text, len, bundle, sizeof(bundle), err, sizeof(err));
    free(text);
    if (r < 0) {
        fprintf(stderr, "gpuslice-cdi-hook: %s\n", err);
        return 1;
    }
    snprintf(cfg, sizeof(cfg), "%s/config.json", bundle);
    int fd = open(cfg, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "gpuslice-cdi-hook: %s: %s\n", cfg, strerror(errno));
        return 1;
    }
    r = read_fd(fd, cfg, &text, &len);
    close(fd);
    if (r < 0)
        return 1;
    r = ch_config_root(text, len, bundle, root, sizeof(root), err, sizeof(err));
    free(text);
    if (r < 0) {
        fprintf(stderr, "gpuslice-cdi-hook: %s\n", err);
        return 1;
    }
    int rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0) {
        fprintf(stderr, "gpuslice-cdi-hook: container root %s: %s\n", root, strerror(errno));
        return 1;
    }
    int dir = open_in_root(rootfd, lib_dir, O_PATH | O_DIRECTORY);
    if (dir < 0) { /* no driver libraries mounted: nothing to do */
        fprintf(stderr, "gpuslice-cdi-hook: %s%s: %s: nothing to link\n", root, lib_dir, strerror(-dir));
        close(rootfd);
        return 0;
    }
    make_links(dir, lib_dir);
    close(dir);
    int rc = 0;
    if ((r = write_conf(rootfd, lib_dir)) < 0) {
        fprintf(stderr, "gpuslice-cdi-hook: %s/etc/ld.so.conf.d/" CONF_NAME ": %s\n", root, strerror(-r));
        rc = 1;
    }
    if (!no_ldconfig && run_ldconfig(rootfd, ldconfig, lib_dir) < 0)
        rc = 1;
    close(rootfd);
    return rc;
}
