/* guard_proc.h: a process's start time and state from /proc/PID/stat, which tell a live process
 * from a dead one (a zombie holds no GPU memory) and from a reused pid. Header-only, so that the
 * guard and its test driver (tests/guard/fake_cuda.c) read them the same way. */
#ifndef GS_GUARD_PROC_H
#define GS_GUARD_PROC_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* Start time (field 22 of /proc/PID/stat) and state (field 3, when state is not NULL); 0 when
 * unreadable. */
static inline uint64_t gs_proc_stat(pid_t pid, char *state) {
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may contain spaces and parentheses */
    if (!p)
        return 0;
    /* fields after ')': 3 state ... 22 starttime */
    if (state)
        *state = p[1] == ' ' ? p[2] : '?';
    unsigned field = 2;
    for (p++; *p && field < 22; p++)
        if (*p == ' ')
            field++;
    return strtoull(p, NULL, 10);
}

#endif
