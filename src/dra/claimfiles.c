/* claimfiles.c: a claim source over files (see dra.h: dra_claim_files_source), DIR/NS/NAME.json
 * as `kubectl get resourceclaim -o json` writes them, and the pods of their reservedFor in
 * DIR/NS/pods/NAME.json. */
#include "dra/dra.h"
#include "dra/prepare.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* A namespace or name as a path component: no '/', not empty, not starting with '.'. */
static bool component_ok(const char *s) {
    return s[0] && s[0] != '.' && !strchr(s, '/') && strlen(s) < 254;
}

static int fetch_file(void *ctx, const char *driver, const char *ns, const char *name, const char *uid,
                      struct dra_claim *out, char *err, size_t errlen) {
    const char *dir = ctx;
    if (!component_ok(ns) || !component_ok(name)) {
        snprintf(err, errlen, "'%.63s/%.200s' is not a claim's namespace and name", ns, name);
        return -EINVAL;
    }
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s/%s/%s.json", dir, ns, name) >= (int)sizeof(path)) {
        snprintf(err, errlen, "%s: path too long", dir);
        return -ENAMETOOLONG;
    }
    char *text = NULL, why[512];
    size_t len = 0;
    int rc = gs_read_file_ex(path, 1u << 20, 0, &text, &len, why, sizeof(why));
    if (rc < 0) {
        if (rc == -ENOENT)
            snprintf(err, errlen, "ResourceClaim %.63s/%.200s not found (%.300s)", ns, name, path);
        else
            snprintf(err, errlen, "%s", why);
        return rc;
    }
    rc = dra_claim_parse(text, len, driver, ns, name, uid, out, why, sizeof(why));
    free(text);
    if (rc < 0)
        snprintf(err, errlen, "%.300s: %.400s", path, why);
    return rc;
}

/* A pod of a claim's reservedFor: DIR/NS/pods/NAME.json, as `kubectl get pod -o json` writes it. */
static int pod_file(void *ctx, const char *ns, const char *name, char **json, size_t *len, char *err, size_t errlen) {
    const char *dir = ctx;
    char path[PATH_MAX];
    *json = NULL;
    if (!component_ok(ns) || !component_ok(name)) {
        snprintf(err, errlen, "'%.63s/%.200s' is not a pod's namespace and name", ns, name);
        return -EINVAL;
    }
    if (snprintf(path, sizeof(path), "%s/%s/pods/%s.json", dir, ns, name) >= (int)sizeof(path)) {
        snprintf(err, errlen, "%s: path too long", dir);
        return -ENAMETOOLONG;
    }
    return gs_read_file_ex(path, 1u << 20, 0, json, len, err, errlen);
}

/* Every DIR/NS/NAME.json (at most 4096 namespaces and 4096 files in each looked at). */
static int each_file(void *ctx, const char *driver, void (*fn)(void *arg, struct dra_claim *c), void *arg, char *err,
                     size_t errlen) {
    const char *dir = ctx;
    DIR *top = opendir(dir);
    if (!top) {
        int e = errno;
        snprintf(err, errlen, "%s: %s", dir, strerror(e));
        return -e;
    }
    struct dra_claim *c = calloc(1, sizeof(*c));
    struct dirent *ns;
    for (unsigned i = 0; c && i < 4096 && (ns = readdir(top)); i++) {
        char sub[PATH_MAX];
        if (!component_ok(ns->d_name) || snprintf(sub, sizeof(sub), "%s/%s", dir, ns->d_name) >= (int)sizeof(sub))
            continue;
        DIR *d = opendir(sub);
        struct dirent *f;
        for (unsigned k = 0; d && k < 4096 && (f = readdir(d)); k++) {
            char path[PATH_MAX], *text = NULL, why[512];
            size_t len = 0, n = strlen(f->d_name);
            if (!component_ok(f->d_name) || n < 6 || strcmp(f->d_name + n - 5, ".json") != 0 ||
                snprintf(path, sizeof(path), "%s/%s", sub, f->d_name) >= (int)sizeof(path) ||
                gs_read_file_ex(path, 1u << 20, GS_READ_NOFOLLOW, &text, &len, why, sizeof(why)) < 0)
                continue;
            if (dra_claim_parse(text, len, driver, NULL, NULL, NULL, c, why, sizeof(why)) == 0) {
                fn(arg, c);
                dra_claim_free(c);
            }
            free(text);
        }
        if (d)
            closedir(d);
    }
    closedir(top);
    bool ok = c != NULL;
    free(c);
    if (!ok)
        snprintf(err, errlen, "out of memory");
    return ok ? 0 : -ENOMEM;
}

struct dra_claim_source dra_claim_files_source(const char *dir) {
    return (struct dra_claim_source){ (void *)dir, fetch_file, pod_file, each_file };
}
