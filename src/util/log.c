/* log.c: see log.h. Writes each event with a single write(2) so lines from several threads or
 * processes sharing stderr do not interleave. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static enum gs_log_level current_level = GS_LOG_INFO;
static const char *const level_names[] = { "error", "warn", "info", "debug" };

void gs_log_set_level(enum gs_log_level level) { current_level = level; }

int gs_log_parse_level(const char *s, enum gs_log_level *out) {
    for (int i = 0; i <= GS_LOG_DEBUG; i++) {
        if (strcmp(s, level_names[i]) == 0) {
            *out = (enum gs_log_level)i;
            return 0;
        }
    }
    return -EINVAL;
}

int gs_log(enum gs_log_level level, const char *fmt, ...) {
    if (level > current_level)
        return -1;
    int saved = errno;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);

    char line[1400];
    size_t n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof(line) - n, ".%03ldZ level=%s msg=\"", (long)(tv.tv_usec / 1000),
                          level_names[level]);
    /* Escape quotes, backslashes and newlines so one event stays one line. */
    for (const char *p = msg; *p && n + 4 < sizeof(line); p++) {
        if (*p == '"' || *p == '\\') {
            line[n++] = '\\';
            line[n++] = *p;
        } else if (*p == '\n') {
            line[n++] = '\\';
            line[n++] = 'n';
        } else {
            line[n++] = *p;
        }
    }
    if (n + 2 < sizeof(line)) {
        line[n++] = '"';
        line[n++] = '\n';
    }
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
    errno = saved;
    return -1;
}
