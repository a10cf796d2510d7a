/* guard_base.c: the guard's log line and the fault points of test builds (guard_base.h). */
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "guard_base.h"

void glog(const char *fmt, ...) {
    char buf[512];
    int n = snprintf(buf, sizeof(buf), "gpuslice-guard[%d]: ", (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = strlen(buf);
    if (len + 1 < sizeof(buf))
        buf[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, len);
    (void)w;
}

#ifdef GS_GUARD_FAULT_POINTS
static struct {
    char name[64];
    long nth;
    _Atomic long hits;
} g_fault = { .nth = 1 };

void guard_fault_init(void) {
    const char *fault = getenv("GPUSLICE_GUARD_FAULT");
    if (fault && *fault) {
        snprintf(g_fault.name, sizeof(g_fault.name), "%s", fault);
        char *colon = strchr(g_fault.name, ':');
        if (colon) {
            *colon = '\0';
            g_fault.nth = strtol(colon + 1, NULL, 10);
        }
    }
}

void guard_fault_point(const char *name) {
    if (g_fault.name[0] && !strcmp(name, g_fault.name) && atomic_fetch_add(&g_fault.hits, 1) + 1 == g_fault.nth)
        raise(SIGKILL);
}
#endif
