/* nodespec.c: the node's CDI spec from /proc, the driver root's linker cache and usr/bin (see
 * nodespec.h). */
#include "cdi/nodespec.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cdi/cdi.h"
#include "util/util.h"

/* Reads PROC_ROOT/NAME (at most 1 MiB) into *text; path gets the file's name for messages. */
static int read_proc_file(const char *proc_root, const char *name, char path[PATH_MAX], char **text, char *err,
                          size_t errlen) {
    snprintf(path, PATH_MAX, "%s/%s", proc_root, name);
    int r = gs_read_file(path, 1 << 20, text, NULL);
    if (r < 0)
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(-r));
    return r;
}

int gs_cdi_read_mig_minors(const char *proc_root, struct gs_mig_minors *mm, char *err, size_t errlen) {
    char path[PATH_MAX];
    _cleanup_free_ char *text = NULL;
    int r = read_proc_file(proc_root, "driver/nvidia-caps/mig-minors", path, &text, err, errlen);
    return r < 0 ? r : gs_mig_minors_parse(path, text, mm, err, errlen);
}

static bool file_exists(const char *path, void *ctx) {
    (void)ctx;
    return access(path, F_OK) == 0;
}

int gs_cdi_node_spec(const struct gs_inventory *inv, const char *proc_root, const char *driver_root,
                     const char *read_root, const char *kind, const char *hook, char **out, unsigned *n_driver_files,
                     char *err, size_t errlen) {
    *out = NULL;
    char path[PATH_MAX];
    _cleanup_free_ char *devices = NULL;
    int r = read_proc_file(proc_root, "devices", path, &devices, err, errlen);
    if (r < 0)
        return r;
    struct gs_dev_majors maj;
    if ((r = gs_proc_devices_parse(path, devices, &maj, err, errlen)) < 0)
        return r;
    bool any_mig = false;
    for (unsigned i = 0; i < inv->n_gpus; i++)
        any_mig |= inv->gpus[i].n_mig > 0;
    struct gs_mig_minors mm = { 0 };
    if (any_mig && (r = gs_cdi_read_mig_minors(proc_root, &mm, err, errlen)) < 0)
        return r;
    snprintf(path, sizeof(path), "%s%setc/ld.so.cache", read_root,
             read_root[0] && read_root[strlen(read_root) - 1] == '/' ? "" : "/");
    _cleanup_free_ char *cache = NULL;
    size_t len = 0;
    if (gs_read_file(path, 64 << 20, &cache, &len) < 0)
        len = 0; /* no cache: no libraries */
    struct gs_cdi_driver *drv = malloc(sizeof(*drv));
    if (!drv) {
        gs_mig_minors_free(&mm);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    char cerr[256];
    if (gs_cdi_driver_files(driver_root, read_root, len ? (const unsigned char *)cache : NULL, len, file_exists, NULL,
                            drv, cerr, sizeof(cerr)) < 0) {
        snprintf(err, errlen, "%s (%s)", cerr, path);
        free(drv);
        gs_mig_minors_free(&mm);
        return -EINVAL;
    }
    if (!hook)
        hook = getenv("GPUSLICE_CDI_HOOK"); /* the hook's host path ("": none) */
    if (hook)
        snprintf(drv->hook, sizeof(drv->hook), "%s", hook);
    if (n_driver_files)
        *n_driver_files = drv->n;
    r = gs_cdi_spec(inv, &maj, any_mig ? &mm : NULL, drv, kind, out, err, errlen);
    free(drv);
    gs_mig_minors_free(&mm);
    return r;
}
