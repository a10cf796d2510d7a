/* specdir.c: other specs in the CDI directories that define our devices (see cdi.h). The I/O
 * half of gs_cdi_conflicts: reads regular files only, at most GS_CDI_SCAN_MAX bytes each. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cdi/cdi.h"
#include "util/util.h"

#define MAX_FILES 256

/* Reads one file without following a symlink at its name, bounded. */
static int read_bounded(int dirfd, const char *name, char **text, size_t *len) {
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > (off_t)GS_CDI_SCAN_MAX) {
        close(fd);
        return -EFBIG;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (!buf)
        return -ENOMEM;
    buf[got] = '\0';
    *text = buf;
    *len = got;
    return 0;
}

int gs_cdi_scan_dirs(const char *kind, const char *spec, const char *const *dirs, size_t n_dirs,
                     const char *own_prefix, gs_cdi_warn_fn warn, void *ctx) {
    char **names;
    size_t n;
    int r = gs_cdi_device_names(spec, &names, &n);
    if (r < 0)
        return r;
    struct stat seen[8];
    size_t n_seen = 0;
    int total = 0;
    for (size_t d = 0; d < n_dirs && d < 8; d++) {
        int dfd = open(dirs[d], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct stat st;
        if (dfd < 0)
            continue;
        bool dup = fstat(dfd, &st) < 0;
        for (size_t k = 0; k < n_seen && !dup; k++)
            dup = seen[k].st_dev == st.st_dev && seen[k].st_ino == st.st_ino;
        DIR *dir = dup ? NULL : fdopendir(dfd);
        if (!dir) {
            close(dfd);
            continue;
        }
        seen[n_seen++] = st;
        unsigned files = 0;
        for (struct dirent *e; (e = readdir(dir)) && files < MAX_FILES;) {
            if (e->d_name[0] == '.' || (!gs_has_suffix(e->d_name, ".json") && !gs_has_suffix(e->d_name, ".yaml")) ||
                (own_prefix && !strncmp(e->d_name, own_prefix, strlen(own_prefix))))
                continue;
            files++;
            char *text = NULL, msg[512], file[600];
            size_t len = 0;
            snprintf(file, sizeof(file), "%s/%s", dirs[d], e->d_name);
            if (read_bounded(dirfd(dir), e->d_name, &text, &len) < 0)
                continue;
            int c = gs_cdi_conflicts(kind, (const char *const *)names, n, file, text, len, msg, sizeof(msg));
            free(text);
            if (c > 0) {
                total += c;
                warn(ctx, msg);
            }
        }
        closedir(dir);
    }
    free(names);
    return total;
}
