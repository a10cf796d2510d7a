/* dracheck.c: the DRA driver's checkpoint as `gpuslice doctor` sees it (doctor.h:
 * gs_doc_check_dra_checkpoint): the file read as the agent reads it (dra/ckptfile.h), and the
 * damaged ones the agent set aside next to it, each read again for why it was. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "doctor/doctor.h"
#include "dra/ckptfile.h"

#define ASIDE_LISTED 4 /* set-aside files named one by one; the rest counted */

struct asides {
    struct gs_doc_report *r;
    unsigned n;
};

static void on_aside(void *ctx, const char *dir, const char *name, bool is_socket) {
    struct asides *a = ctx;
    (void)is_socket;
    if (!dra_checkpoint_is_aside(name) || a->n++ >= ASIDE_LISTED)
        return;
    char path[PATH_MAX + 256], why[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    struct dra_checkpoint cp;
    int rc = dra_checkpoint_read(path, &cp, why, sizeof(why));
    dra_checkpoint_free(&cp);
    const char *slash = strstr(why, ": ");
    gs_doc_add(a->r, "dra.checkpoint", GS_DOC_WARN,
               "the claims it held were rebuilt from their ResourceClaims where they could be (the agent's log "
               "names each); read it, then remove it",
               "%s: a damaged checkpoint the agent set aside (%s)", path,
               rc == 0 ? "it reads now" : slash ? slash + 2 : why);
}

void gs_doc_check_dra_checkpoint(struct gs_doc_report *r, const char *dir, bool dra) {
    struct stat st;
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
        if (dra)
            gs_doc_add(r, "dra.checkpoint", GS_DOC_OK, NULL, "%s does not exist yet (the driver makes it)", dir);
        return;
    }
    char path[PATH_MAX + 32], why[1024];
    snprintf(path, sizeof(path), "%s/checkpoint.json", dir);
    struct dra_checkpoint cp;
    int rc = dra_checkpoint_read(path, &cp, why, sizeof(why));
    size_t n = cp.n;
    dra_checkpoint_free(&cp);
    if (rc == 0 || rc == -ENOENT)
        gs_doc_add(r, "dra.checkpoint", GS_DOC_OK, NULL, "%s: %zu prepared claim(s)%s", path, n,
                   rc == -ENOENT ? " (no file)" : "");
    else if (rc == -ENOTSUP)
        gs_doc_add(r, "dra.checkpoint", GS_DOC_FAIL,
                   "run the agent version that wrote it, or move it away (its prepared claims are then not known "
                   "to the driver)",
                   "%s: the DRA driver does not start on it (the device plugins do)", why);
    else
        gs_doc_add(r, "dra.checkpoint", GS_DOC_WARN,
                   "nothing to do: the agent sets it aside at its start and rebuilds the claims from their "
                   "ResourceClaims",
                   "%s: damaged", why);
    struct asides a = { r, 0 };
    gs_doc_list_dir(dir, 4096, on_aside, &a);
    if (a.n > ASIDE_LISTED)
        gs_doc_add(r, "dra.checkpoint", GS_DOC_WARN, "read them, then remove them",
                   "%u more damaged checkpoints set aside in %s", a.n - ASIDE_LISTED, dir);
}
