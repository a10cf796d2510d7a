/* probe.c: the doctor's I/O (sockets: kubelet/plugindir.h): directories (can the agent
 * write there?), a library (does it load?), directory listings, the scheduler extender's
 * /healthz and filter (through the Kubernetes client, src/kube). */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "doctor/doctor.h"
#include "kube/kube.h"
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

/* A client of an extender's URL: the kube client over plain HTTP, or HTTPS with tls's CA (else the
 * system's) and its client certificate, if any. Each request 3 s to connect and 5 s in all;
 * warn_only (the chart's init container, which the agent waits for) 2 s in all, so both requests
 * at most 4 s. */
static struct kube_client *ext_client(const char *server, bool warn_only, const struct gs_doc_extender_tls *tls,
                                      char *err, size_t errlen) {
    struct kube_config cfg = { 0 };
    struct kube_limits lim = KUBE_DEFAULT_LIMITS;
    lim.connect_timeout_ms = warn_only ? 2000 : 3000;
    lim.timeout_ms = warn_only ? 2000 : 5000;
    lim.max_response = (size_t)1 << 20;
    struct kube_client *c = NULL;
    if (!(cfg.server = strdup(server)) || (tls && tls->ca_file && !(cfg.ca_file = strdup(tls->ca_file))) ||
        (tls && tls->cert_file && !(cfg.cert_file = strdup(tls->cert_file))) ||
        (tls && tls->key_file && !(cfg.key_file = strdup(tls->key_file)))) {
        kube_config_free(&cfg);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (kube_client_new(&cfg, &lim, &c, err, errlen) < 0)
        c = NULL;
    kube_config_free(&cfg);
    return c;
}

void gs_doc_check_extender(struct gs_doc_report *r, const char *url, const char *node, bool warn_only,
                           const struct gs_doc_extender_tls *tls) {
    char base[GS_DOC_TEXT_MAX], why[GS_DOC_TEXT_MAX], health_err[GS_DOC_TEXT_MAX], filter_err[GS_DOC_TEXT_MAX];
    struct gs_doc_extender e = { .url = url, .node = node, .base = base, .health_err = health_err,
                                 .filter_err = filter_err, .health_r = -EIO, .filter_r = -EIO,
                                 .warn_only = warn_only, .client_cert = tls && tls->cert_file };
    health_err[0] = filter_err[0] = '\0';
    size_t n = strlen(url);
    while (n && url[n - 1] == '/') /* the scheduler joins urlPrefix and the verb with one '/' */
        n--;
    char prefix[GS_DOC_TEXT_MAX];
    snprintf(prefix, sizeof(prefix), "%.*s", (int)n, url);
    if (gs_doc_extender_base(prefix, base, sizeof(base), why, sizeof(why)) < 0) {
        e.bad_url = why;
        gs_doc_extender_findings(r, &e);
        return;
    }
    e.url = prefix;
    struct kube_client *hc = ext_client(base, warn_only, tls, health_err, sizeof(health_err));
    struct kube_client *fc = hc ? ext_client(prefix, warn_only, tls, filter_err, sizeof(filter_err)) : NULL;
    json_t *answer = NULL;
    char *args = gs_doc_extender_args(node);
    if (hc)
        e.health_r = kube_request(hc, "GET", "/healthz", NULL, NULL, NULL, health_err, sizeof(health_err));
    if (fc && e.health_r == 0)
        e.filter_r = args ? kube_request(fc, "POST", "/filter", "application/json", args, &answer, filter_err,
                                         sizeof(filter_err))
                          : -ENOMEM;
    e.filter_answer = answer;
    gs_doc_extender_findings(r, &e);
    json_decref(answer);
    free(args);
    kube_client_free(fc);
    kube_client_free(hc);
}
