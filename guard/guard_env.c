/* guard_env.c: where this process's limits come from, and reading them (guard_env.h). The limits
 * come from a read-only file (guard_limits.h: in a container the mounted one, whatever the
 * environment says, or gpuslice exec's sealed memfd, found through the process's ancestors) and
 * every program a guarded process starts loads the guard again (guard_exec.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "guard_base.h"
#include "guard_env.h"
#include "guard_exec.h"
#include "guard_layout.h"
#include "guard_limits.h"

/* The limits file the agent mounts read-only into a container: when it exists, it is the only
 * source of limits (GPUSLICE_GUARD_CONFIG cannot override it). A test build points it elsewhere. */
#ifndef GS_GUARD_DEFAULT_CONFIG
#define GS_GUARD_DEFAULT_CONFIG GS_GUARD_CONF_IN_CONTAINER
#endif
#define DEFAULT_CONFIG GS_GUARD_DEFAULT_CONFIG

void guard_env_init(void) {
    guard_exec_init(DEFAULT_CONFIG); /* the limits' source, and the exec family (guard_exec.c) */
}

/* Looks for an "on-error open" line (any spacing, comments ignored) in a file that did not parse. */
static bool says_fail_open(const char *text) {
    for (const char *p = text; *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char line[256], w1[32], w2[32], extra[2];
        if (len < sizeof(line)) {
            memcpy(line, p, len);
            line[len] = '\0';
            char *hash = strchr(line, '#');
            if (hash)
                *hash = '\0';
            if (sscanf(line, "%31s %31s %1s", w1, w2, extra) == 2 && !strcmp(w1, "on-error") && !strcmp(w2, "open"))
                return true;
        }
        p = eol ? eol + 1 : p + len;
    }
    return false;
}

/* The limits text: read at load from a sealed memfd (gpuslice exec's, or /proc/self/fd/N; see
 * guard_exec.c), or from a regular file (never a FIFO, which would block the program's first CUDA
 * call). NULL with the reason in why. */
static char *read_limits(const char *path, size_t *len, char *why, size_t whylen) {
    char *text = NULL;
    if (g_cfg.from_fd) {
        if (!g_cfg.text)
            snprintf(why, whylen, "%s", g_cfg.why);
        else if ((text = malloc(g_cfg.len + 1)))
            memcpy(text, g_cfg.text, g_cfg.len + 1), *len = g_cfg.len;
        else
            snprintf(why, whylen, "%s", strerror(errno));
        return text;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0)
        snprintf(why, whylen, "%s", strerror(errno));
    else if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        snprintf(why, whylen, "not a regular file");
    else if (!(text = guard_read_all(fd, len)))
        snprintf(why, whylen, "%s", strerror(errno));
    if (fd >= 0)
        close(fd);
    return text;
}

int guard_env_load_limits(struct gs_guard_limits *limits, const char **path_out) {
    const char *path = g_cfg.path[0] ? g_cfg.path : DEFAULT_CONFIG;
    *path_out = path;
    if (g_cfg.ignored[0])
        glog("GPUSLICE_GUARD_CONFIG=%s ignored: the limits come from %s", g_cfg.ignored, g_cfg.source);
    size_t text_len = 0;
    char why[160] = "";
    char *text = read_limits(path, &text_len, why, sizeof(why));
    if (!text) {
        glog("limits file %s: %s: failing closed, allocations are refused", path, why);
        return G_CLOSED;
    }
    char err[512];
    if (gs_guard_limits_parse(path, text, text_len, limits, err, sizeof(err)) < 0) {
        /* A damaged file still says how to fail, if its on-error line survived. */
        bool open_mode = says_fail_open(text);
        glog("%s: failing %s", err, open_mode ? "open: no limits are enforced" : "closed: allocations are refused");
        free(text);
        return open_mode ? G_OPEN : G_CLOSED;
    }
    free(text);
    return G_READY;
}
