/* ckptfile.h: the DRA driver's checkpoint file (PLUGINS/<driver>/checkpoint.json) on disk, for the
 * driver (server.c) and `gpuslice doctor`: read without trusting what is there (not followed when a
 * link, not opened when not a regular file, bounded), and a damaged one set aside next to it
 * (renamed, never deleted) so that the driver starts empty and the file stays for a person to read. */
#ifndef GS_DRA_CKPTFILE_H
#define GS_DRA_CKPTFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "dra/prepare.h"

#define DRA_CHECKPOINT_FILE_MAX (64u << 20) /* bytes read at most */
#define DRA_CHECKPOINT_ASIDE ".damaged-"     /* PATH.damaged-YYYYMMDDTHHMMSSZ (-N when taken) */

/* The checkpoint at path into out: 0; -ENOENT (no file: out empty); -ENOTSUP (a newer version:
 * another agent's, to be left as it is); -EINVAL (damaged: a symbolic link, not a regular file,
 * larger than DRA_CHECKPOINT_FILE_MAX, unreadable, or text dra_checkpoint_parse refuses); -ENOMEM.
 * On error "PATH: why" in err, why saying where the parser stopped. */
int dra_checkpoint_read(const char *path, struct dra_checkpoint *out, char *err, size_t errlen);

/* Renames path to path DRA_CHECKPOINT_ASIDE <now in UTC> (a "-N" suffix when that name is taken:
 * nothing is ever replaced); the new path in aside. 0, or -errno with why in err. */
int dra_checkpoint_set_aside(const char *path, time_t now, char *aside, size_t len, char *err, size_t errlen);

/* Whether name, a file name in the driver's directory, is a checkpoint set aside
 * ("checkpoint.json.damaged-..."). */
bool dra_checkpoint_is_aside(const char *name);

#endif
