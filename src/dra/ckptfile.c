/* ckptfile.c: the checkpoint file on disk (see ckptfile.h). */
#include "dra/ckptfile.h"

#include <errno.h>
#include <fcntl.h> /* renameat2 (_GNU_SOURCE) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

int dra_checkpoint_read(const char *path, struct dra_checkpoint *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    char why[512];
    int rc = gs_read_file_ex(path, DRA_CHECKPOINT_FILE_MAX, GS_READ_NOFOLLOW, &text, &len, why, sizeof(why));
    if (rc < 0) {
        snprintf(err, errlen, "%s", why); /* "PATH: a FIFO, not a regular file", "PATH: larger than ..." */
        return rc == -ENOENT || rc == -ENOMEM ? rc : -EINVAL;
    }
    rc = dra_checkpoint_parse(text, len, out, why, sizeof(why));
    if (rc < 0)
        snprintf(err, errlen, "%s: %s", path, why);
    return rc;
}

int dra_checkpoint_set_aside(const char *path, time_t now, char *aside, size_t len, char *err, size_t errlen) {
    struct tm tm;
    char stamp[32];
    if (!gmtime_r(&now, &tm) || strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm) == 0)
        snprintf(stamp, sizeof(stamp), "%lld", (long long)now);
    for (unsigned i = 0; i < 100; i++) {
        int n = i ? snprintf(aside, len, "%s%s%s-%u", path, DRA_CHECKPOINT_ASIDE, stamp, i)
                  : snprintf(aside, len, "%s%s%s", path, DRA_CHECKPOINT_ASIDE, stamp);
        if (n < 0 || (size_t)n >= len) {
            snprintf(err, errlen, "%s: the set-aside name is too long", path);
            return -ENAMETOOLONG;
        }
        if (renameat2(AT_FDCWD, path, AT_FDCWD, aside, RENAME_NOREPLACE) == 0)
            return 0;
        if (errno != EEXIST) {
            int e = errno;
            snprintf(err, errlen, "cannot rename %s to %s: %s", path, aside, strerror(e));
            return -e;
        }
    }
    snprintf(err, errlen, "cannot rename %s: 100 set-aside names of this second are taken", path);
    return -EEXIST;
}

bool dra_checkpoint_is_aside(const char *name) {
    static const char prefix[] = "checkpoint.json" DRA_CHECKPOINT_ASIDE;
    return strncmp(name, prefix, sizeof(prefix) - 1) == 0 && name[sizeof(prefix) - 1] != '\0';
}
