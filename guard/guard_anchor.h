/* guard_anchor.h: where a process under `gpuslice exec` finds its limits, whatever it did to its
 * environment and descriptors. `gpuslice exec` keeps the limits in a sealed memfd (no one can change
 * its content) at descriptor GS_GUARD_ANCHOR_FD of its own process, and is the child subreaper of
 * everything it starts, so every descendant, orphans included, has it among its ancestors. The
 * guard walks its process's ancestors (/proc/PID/stat) and takes the limits of the outermost one
 * that holds such a memfd there (/proc/PID/fd/N, readable by the same user): a descendant cannot
 * put itself above `gpuslice exec`, so nothing it starts, under any environment, with any
 * descriptors closed, by any launcher, gets limits other than the ones `gpuslice exec` was given.
 * Header-only, so that the guard and `gpuslice exec` (which refuses to run nested) look the same way. */
#ifndef GS_GUARD_ANCHOR_H
#define GS_GUARD_ANCHOR_H

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define GS_GUARD_ANCHOR_FD 1000
#define GS_GUARD_ANCHOR_NAME "gpuslice-limits" /* the memfd's name: /proc/PID/fd/N reads "/memfd:NAME (deleted)" */
#define GS_GUARD_ANCHOR_MAX_DEPTH 4096         /* ancestors looked at, at most */

/* The parent of pid from /proc/PID/stat (field 4), or -1 when unreadable. */
static inline pid_t gs_proc_ppid(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may contain spaces and parentheses */
    if (!p || p[1] != ' ' || !p[2] || p[3] != ' ')
        return -1;
    char *end;
    long v = strtol(p + 4, &end, 10);
    return end == p + 4 || *end != ' ' || v < 0 ? -1 : (pid_t)v;
}

/* Whether pid holds a limits memfd at GS_GUARD_ANCHOR_FD (by its name; its seals are checked by
 * whoever opens it). */
static inline bool gs_guard_anchor_at(pid_t pid) {
    static const char want[] = "/memfd:" GS_GUARD_ANCHOR_NAME " (deleted)";
    char path[64], target[sizeof(want) + 1];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, GS_GUARD_ANCHOR_FD);
    ssize_t n = readlink(path, target, sizeof(target));
    return n == (ssize_t)sizeof(want) - 1 && !memcmp(target, want, sizeof(want) - 1);
}

/* The outermost ancestor of the calling process (its parent, grandparent, ... up to pid 1) that
 * holds the limits, or 0 when none does. */
static inline pid_t gs_guard_anchor_find(void) {
    pid_t found = 0;
    pid_t pid = getppid();
    for (unsigned depth = 0; pid > 0 && depth < GS_GUARD_ANCHOR_MAX_DEPTH; depth++) {
        if (gs_guard_anchor_at(pid))
            found = pid;
        if (pid == 1)
            break;
        pid = gs_proc_ppid(pid);
    }
    return found;
}

#endif
