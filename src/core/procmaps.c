/* procmaps.c: see procmaps.h. */
#include "core/procmaps.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Skips one field of non-blank characters and the blanks after it; NULL at the end of the line. */
static const char *next_field(const char *p) {
    while (*p && *p != ' ' && *p != '\n')
        p++;
    if (*p != ' ')
        return NULL;
    while (*p == ' ')
        p++;
    return *p && *p != '\n' ? p : NULL;
}

static bool parse_hex(const char *p, char stop, unsigned long long max, unsigned long long *out, const char **end) {
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F')))
        return false;
    char *e;
    errno = 0;
    unsigned long long v = strtoull(p, &e, 16);
    if (errno || *e != stop || v > max)
        return false;
    *out = v;
    *end = e;
    return true;
}

static bool line_maps(const char *line, unsigned major, unsigned minor, unsigned long long ino) {
    const char *p = line;
    for (int i = 0; i < 3 && p; i++) /* address range, permissions, offset */
        p = next_field(p);
    if (!p)
        return false;
    unsigned long long maj, min;
    const char *e;
    if (!parse_hex(p, ':', 0xfffULL, &maj, &e) || !parse_hex(e + 1, ' ', 0xfffffULL, &min, &e))
        return false;
    p = e;
    while (*p == ' ')
        p++;
    if (*p < '0' || *p > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long i = strtoull(p, &end, 10);
    if (errno || (*end != ' ' && *end != '\n' && *end != '\0'))
        return false;
    return i != 0 && i == ino && maj == major && min == minor;
}

bool gs_maps_has_file(const char *maps, unsigned major, unsigned minor, unsigned long long ino) {
    for (const char *line = maps; line && *line;) {
        if (line_maps(line, major, minor, ino))
            return true;
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    return false;
}
