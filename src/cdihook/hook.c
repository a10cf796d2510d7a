/* hook.c: see hook.h. */
#include "cdihook/hook.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

const char *const ch_linked[] = { "libcuda.so.1", "libnvidia-opticalflow.so.1", NULL };
static const char *const dev_links[] = { "libcuda.so", "libnvidia-opticalflow.so", NULL };

const char *ch_dev_link(const char *soname) {
    for (unsigned i = 0; ch_linked[i]; i++)
        if (!strcmp(soname, ch_linked[i]))
            return dev_links[i];
    return NULL;
}

int ch_path_ok(const char *path) {
    if (path[0] != '/' || strchr(path, '\n'))
        return -EINVAL;
    for (const char *p = path; *p;) {
        while (*p == '/')
            p++;
        const char *e = strchrnul(p, '/');
        size_t n = (size_t)(e - p);
        if (n == 2 && !strncmp(p, "..", 2))
            return -EINVAL;
        p = e;
    }
    return 0;
}

static json_t *load(const char *what, const char *text, size_t len, char *err, size_t errlen) {
    if (len > CH_MAX_JSON) {
        snprintf(err, errlen, "%s: larger than %u bytes", what, CH_MAX_JSON);
        return NULL;
    }
    json_error_t je;
    json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!j)
        snprintf(err, errlen, "%s:%d:%d: %s", what, je.line, je.column, je.text);
    else if (!json_is_object(j)) {
        snprintf(err, errlen, "%s: not a JSON object", what);
        json_decref(j);
        j = NULL;
    }
    return j;
}

int ch_state_bundle(const char *text, size_t len, char *bundle, size_t n, char *err, size_t errlen) {
    json_t *j = load("OCI state (stdin)", text, len, err, errlen);
    if (!j)
        return -EINVAL;
    const char *b = json_string_value(json_object_get(j, "bundle"));
    int r = 0;
    if (!b || b[0] != '/' || strlen(b) >= n) {
        snprintf(err, errlen, "OCI state (stdin): %s", !b ? "no \"bundle\" string" : "\"bundle\" is not an absolute path");
        r = -EINVAL;
    } else
        strcpy(bundle, b);
    json_decref(j);
    return r;
}

int ch_config_root(const char *text, size_t len, const char *bundle, char *root, size_t n, char *err, size_t errlen) {
    char what[300];
    snprintf(what, sizeof(what), "%.280s/config.json", bundle);
    json_t *j = load(what, text, len, err, errlen);
    if (!j)
        return -EINVAL;
    const char *p = json_string_value(json_object_get(json_object_get(j, "root"), "path"));
    int r = -EINVAL;
    if (!p || !p[0])
        snprintf(err, errlen, "%s: no root.path", what);
    else if ((p[0] == '/' ? (size_t)snprintf(root, n, "%s", p) : (size_t)snprintf(root, n, "%s/%s", bundle, p)) >= n)
        snprintf(err, errlen, "%s: root.path too long", what);
    else if (ch_path_ok(root) < 0 || !strcmp(root + strspn(root, "/"), ""))
        snprintf(err, errlen, "%s: root.path '%s' is not a container root", what, root);
    else
        r = 0;
    json_decref(j);
    return r;
}

int ch_ldconf_text(const char *dir, char *buf, size_t n) {
    if (ch_path_ok(dir) < 0)
        return -EINVAL;
    return (size_t)snprintf(buf, n, "%s\n", dir) >= n ? -ENAMETOOLONG : 0;
}
