/* probe.c: the doctor's I/O (sockets: kubelet/plugindir.h): directories (can the agent
 * write there?), a library (does it load?), directory listings. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "doctor/doctor.h"
#include "util/util.h"

int gs_doc_dir_usable(const char *path, bool *exists, char *why, size_t whylen) {
    char cur[PATH_MAX];
    *exists = false;
    if (gs_strlcpy(cur, path, sizeof(cur)) < 0) {
        snprintf(why, whylen, "%s: path too long", path);
        return -ENAMETOOLONG;
    }
    for (bool first = true;; first = false) {
        struct stat st;
        if (stat(cur, &st) == 0) {
            *exists = first;
            if (!S_ISDIR(st.st_mode)) {
                snprintf(why, whylen, "%s is not a directory", cur);
                return -ENOTDIR;
            }
            if (access(cur, W_OK | X_OK) < 0) {
                int e = errno;
                snprintf(why, whylen, "%s: %s", cur, strerror(e));
                return -e;
            }
            return 0;
        }
        if (errno != ENOENT && errno != ENOTDIR) { /* ENOTDIR: an ancestor is a file, named below */
            int e = errno;
            snprintf(why, whylen, "%s: %s", cur, strerror(e));
            return -e;
        }
        char *slash = strrchr(cur, '/');
        if (!slash || slash == cur) { /* "/" always exists; a relative path: the working directory */
            if (slash)
                cur[1] = '\0';
            else
                gs_strlcpy(cur, ".", sizeof(cur));
            continue;
        }
        *slash = '\0';
    }
}

int gs_doc_lib_loadable(const char *path, char *why, size_t whylen) {
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        snprintf(why, whylen, "pipe: %s", strerror(errno));
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, whylen, "fork: %s", strerror(errno));
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    if (pid == 0) {
        close(pfd[0]);
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char *e = dlerror();
            ssize_t w = write(pfd[1], e ? e : "dlopen failed", e ? strlen(e) : 13);
            (void)w;
            _exit(1);
        }
        _exit(0);
    }
    close(pfd[1]);
    char buf[512];
    ssize_t n = 0, r;
    while (n < (ssize_t)sizeof(buf) - 1 && (r = read(pfd[0], buf + n, sizeof(buf) - 1 - (size_t)n)) > 0)
        n += r;
    close(pfd[0]);
    buf[n > 0 ? n : 0] = '\0';
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    snprintf(why, whylen, "%s", n > 0 ? buf : "the loading process died");
    return -1;
}

int gs_doc_list_dir(const char *dir, unsigned max, gs_doc_entry_fn fn, void *ctx) {
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    int n = 0;
    for (struct dirent *e; (unsigned)n < max && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        struct stat st;
        bool sock = fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISSOCK(st.st_mode);
        fn(ctx, dir, e->d_name, sock);
        n++;
    }
    closedir(d);
    return n;
}
