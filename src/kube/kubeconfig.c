/* kubeconfig.c: kubeconfig files and the in-cluster service account (kubeconfig.h). Parsing is
 * pure; kube_config_load, kube_config_in_cluster and kube_config_default read files. */
#include "kubeconfig.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config/yamlutil.h"
#include "kube/kubeapi.h"
#include "util/util.h"

/* Keys whose meaning this client does not implement: refused rather than silently ignored. */
static const char *const unsupported_user[] = { "exec",   "auth-provider", "username",      "password", "as",
                                                "as-uid", "as-groups",     "as-user-extra", NULL };
static const char *const unsupported_cluster[] = { "proxy-url", "tls-server-name", NULL };

void kube_config_free(struct kube_config *c) {
    if (!c)
        return;
    free(c->server);
    free(c->ca_file);
    free(c->ca_pem);
    free(c->cert_file);
    free(c->cert_pem);
    free(c->key_file);
    free(c->key_pem);
    free(c->token);
    free(c->token_file);
    free(c->namespace);
    *c = (struct kube_config){ 0 };
}

/* ---- base64 ---- */

static int b64_value(unsigned char ch) {
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+')
        return 62;
    if (ch == '/')
        return 63;
    return -1;
}

int kube_base64_decode(const char *in, size_t len, char **out, size_t *outlen) {
    *out = NULL;
    *outlen = 0;
    if (len % 4 != 0)
        return -EINVAL;
    char *buf = malloc(len / 4 * 3 + 1);
    if (!buf)
        return -ENOMEM;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        int v[4];
        bool last = i + 4 == len;
        for (int k = 0; k < 4; k++) {
            unsigned char ch = (unsigned char)in[i + k];
            v[k] = b64_value(ch);
            /* '=' only as the last one or two characters */
            if (v[k] < 0 && !(ch == '=' && last && k >= 2 && (k == 3 || in[i + 3] == '='))) {
                free(buf);
                return -EINVAL;
            }
        }
        buf[o++] = (char)((v[0] << 2) | (v[1] >> 4));
        if (v[2] >= 0)
            buf[o++] = (char)(((v[1] & 15) << 4) | (v[2] >> 2));
        if (v[2] >= 0 && v[3] >= 0)
            buf[o++] = (char)(((v[2] & 3) << 6) | v[3]);
        if (v[2] < 0 && v[3] >= 0) {
            free(buf);
            return -EINVAL;
        }
    }
    buf[o] = '\0';
    *out = buf;
    *outlen = o;
    return 0;
}

/* ---- the parser ---- */

struct parse {
    struct gs_yaml *y;
    const char *base_dir;
    struct kube_config *c;
};

/* A new string: the file name s, relative to base_dir unless absolute. */
static int file_name(struct parse *p, const yaml_node_t *node, const char *path, const char *s, char **out) {
    if (!*s)
        return gs_yaml_error(p->y, node, path, "empty file name");
    int n = (s[0] == '/' || !p->base_dir || !*p->base_dir) ? asprintf(out, "%s", s)
                                                           : asprintf(out, "%s/%s", p->base_dir, s);
    return n < 0 ? -ENOMEM : 0;
}

/* The entry of list `list` (clusters, users, contexts) named `want`, its `inner` mapping in *out. */
static int find_named(struct parse *p, yaml_node_t *root, const char *list, const char *inner, const char *want,
                      const yaml_node_t *ref, const char *refpath, yaml_node_t **out, char path[GS_YAML_PATH_MAX]) {
    static const char *const entry_keys[] = { "name", "cluster", "user", "context", "extensions", NULL };
    yaml_node_t *seq = gs_yaml_map_get(p->y, root, list);
    if (!seq || gs_yaml_is_null(seq))
        return gs_yaml_error(p->y, ref, refpath, "\"%s\" is not in %s (the file has no %s)", want, list, list);
    int r = gs_yaml_expect(p->y, seq, list, YAML_SEQUENCE_NODE);
    if (r < 0)
        return r;
    for (size_t i = 0; i < gs_yaml_seq_len(seq); i++) {
        yaml_node_t *e = gs_yaml_seq_at(p->y, seq, i);
        char epath[GS_YAML_PATH_MAX], npath[GS_YAML_PATH_MAX];
        gs_yaml_path_index(epath, list, i);
        if ((r = gs_yaml_expect(p->y, e, epath, YAML_MAPPING_NODE)) < 0 ||
            (r = gs_yaml_check_keys(p->y, e, epath, entry_keys)) < 0)
            return r;
        const char *name;
        yaml_node_t *nn = gs_yaml_map_get(p->y, e, "name");
        if (!nn)
            return gs_yaml_error(p->y, e, epath, "missing \"name\"");
        if ((r = gs_yaml_scalar(p->y, nn, gs_yaml_path_key(npath, epath, "name"), &name)) < 0)
            return r;
        if (strcmp(name, want) != 0)
            continue;
        yaml_node_t *v = gs_yaml_map_get(p->y, e, inner);
        gs_yaml_path_key(path, epath, inner);
        if (!v || gs_yaml_is_null(v))
            return gs_yaml_error(p->y, e, epath, "missing \"%s\"", inner);
        if ((r = gs_yaml_expect(p->y, v, path, YAML_MAPPING_NODE)) < 0)
            return r;
        *out = v;
        return 0;
    }
    return gs_yaml_error(p->y, ref, refpath, "\"%s\" is not in %s", want, list);
}

/* The optional string value of key in map: *out NULL when absent or null; *node its node. */
static int opt_string(struct parse *p, yaml_node_t *map, const char *mpath, const char *key, const char **out,
                      yaml_node_t **node, char path[GS_YAML_PATH_MAX]) {
    *out = NULL;
    *node = gs_yaml_map_get(p->y, map, key);
    gs_yaml_path_key(path, mpath, key);
    if (!*node || gs_yaml_is_null(*node))
        return 0;
    return gs_yaml_scalar(p->y, *node, path, out);
}

static int refuse_keys(struct parse *p, yaml_node_t *map, const char *mpath, const char *const *keys) {
    for (size_t i = 0; keys[i]; i++) {
        yaml_node_t *v = gs_yaml_map_get(p->y, map, keys[i]);
        if (v) {
            char path[GS_YAML_PATH_MAX];
            return gs_yaml_error(p->y, v, gs_yaml_path_key(path, mpath, keys[i]), "not supported by gpuslice");
        }
    }
    return 0;
}

/* A PEM credential: KEY (a file) or KEY-data (base64), not both. */
static int credential(struct parse *p, yaml_node_t *map, const char *mpath, const char *key, char **file, char **pem,
                      size_t *pem_len) {
    char dkey[64], fpath[GS_YAML_PATH_MAX], dpath[GS_YAML_PATH_MAX];
    const char *f = NULL, *d = NULL;
    yaml_node_t *fn = NULL, *dn = NULL;
    snprintf(dkey, sizeof dkey, "%s-data", key);
    int r = opt_string(p, map, mpath, key, &f, &fn, fpath);
    if (r == 0)
        r = opt_string(p, map, mpath, dkey, &d, &dn, dpath);
    if (r < 0)
        return r;
    if (f && d)
        return gs_yaml_error(p->y, dn, dpath, "both %s and %s are given: keep one", key, dkey);
    if (f)
        return file_name(p, fn, fpath, f, file);
    if (d) {
        r = kube_base64_decode(d, strlen(d), pem, pem_len);
        if (r == -EINVAL)
            return gs_yaml_error(p->y, dn, dpath, "not base64 (standard alphabet, padded, on one line)");
        if (r < 0)
            return r;
        if (!strstr(*pem, "-----BEGIN "))
            return gs_yaml_error(p->y, dn, dpath, "not PEM once decoded (no \"-----BEGIN \" line)");
    }
    return 0;
}

static int dup_to(char **dst, const char *s) {
    if (!s)
        return 0;
    *dst = strdup(s);
    return *dst ? 0 : -ENOMEM;
}

static int parse_cluster(struct parse *p, yaml_node_t *m, const char *mpath) {
    char path[GS_YAML_PATH_MAX];
    const char *s;
    yaml_node_t *n;
    int r = gs_yaml_check_keys(p->y, m, mpath, NULL);
    if (r == 0)
        r = refuse_keys(p, m, mpath, unsupported_cluster);
    if (r == 0)
        r = opt_string(p, m, mpath, "server", &s, &n, path);
    if (r < 0)
        return r;
    if (!s)
        return gs_yaml_error(p->y, m, mpath, "missing \"server\"");
    if (strncmp(s, "https://", 8) != 0 && strncmp(s, "http://", 7) != 0)
        return gs_yaml_error(p->y, n, path, "\"%s\" is not an https:// (or http://) URL", s);
    const char *host = strstr(s, "://") + 3;
    if (!*host || *host == '/')
        return gs_yaml_error(p->y, n, path, "\"%s\" has no host", s);
    if (strpbrk(s, "?# \t"))
        return gs_yaml_error(p->y, n, path, "\"%s\": a server URL has no query, fragment or spaces", s);
    size_t len = strlen(s);
    while (len > 0 && s[len - 1] == '/')
        len--;
    if (!(p->c->server = strndup(s, len)))
        return -ENOMEM;
    if ((r = credential(p, m, mpath, "certificate-authority", &p->c->ca_file, &p->c->ca_pem, &p->c->ca_pem_len)) < 0)
        return r;
    n = gs_yaml_map_get(p->y, m, "insecure-skip-tls-verify");
    if (n && !gs_yaml_is_null(n))
        r = gs_yaml_bool(p->y, n, gs_yaml_path_key(path, mpath, "insecure-skip-tls-verify"), &p->c->insecure);
    return r;
}

static int parse_user(struct parse *p, yaml_node_t *m, const char *mpath) {
    char path[GS_YAML_PATH_MAX];
    const char *s;
    yaml_node_t *n;
    int r = gs_yaml_check_keys(p->y, m, mpath, NULL);
    if (r == 0)
        r = refuse_keys(p, m, mpath, unsupported_user);
    if (r == 0)
        r = credential(p, m, mpath, "client-certificate", &p->c->cert_file, &p->c->cert_pem, &p->c->cert_pem_len);
    if (r == 0)
        r = credential(p, m, mpath, "client-key", &p->c->key_file, &p->c->key_pem, &p->c->key_pem_len);
    if (r < 0)
        return r;
    bool cert = p->c->cert_file || p->c->cert_pem, key = p->c->key_file || p->c->key_pem;
    if (cert != key)
        return gs_yaml_error(p->y, m, mpath, "%s without %s", cert ? "client-certificate" : "client-key",
                             cert ? "client-key" : "client-certificate");
    if ((r = opt_string(p, m, mpath, "token", &s, &n, path)) < 0)
        return r;
    if (s && !*s)
        return gs_yaml_error(p->y, n, path, "empty token");
    if ((r = dup_to(&p->c->token, s)) < 0)
        return r;
    if ((r = opt_string(p, m, mpath, "tokenFile", &s, &n, path)) < 0)
        return r;
    if (s && p->c->token)
        return gs_yaml_error(p->y, n, path, "both token and tokenFile are given: keep one");
    return s ? file_name(p, n, path, s, &p->c->token_file) : 0;
}

int kube_config_parse(const char *name, const char *text, size_t len, const char *base_dir, const char *context,
                      struct kube_config *out, char *err, size_t errlen) {
    _cleanup_yaml_ struct gs_yaml y = { 0 };
    *out = (struct kube_config){ 0 };
    int r = gs_yaml_load(&y, name, text, len, err, errlen);
    if (r < 0)
        return r;
    struct parse p = { .y = &y, .base_dir = base_dir, .c = out };
    yaml_node_t *root = gs_yaml_root(&y), *ctx, *cl, *us, *n;
    char path[GS_YAML_PATH_MAX], cpath[GS_YAML_PATH_MAX];
    const char *cur = context, *cluster, *user, *ns;
    if (!root) {
        r = gs_yaml_error(&y, NULL, NULL, "empty kubeconfig");
        goto out;
    }
    if ((r = gs_yaml_expect(&y, root, "", YAML_MAPPING_NODE)) < 0 || (r = gs_yaml_check_keys(&y, root, "", NULL)) < 0)
        goto out;
    n = gs_yaml_map_get(&y, root, "kind");
    const char *kind;
    if (n && !gs_yaml_is_null(n)) {
        if ((r = gs_yaml_scalar(&y, n, "kind", &kind)) < 0)
            goto out;
        if (strcmp(kind, "Config") != 0) {
            r = gs_yaml_error(&y, n, "kind", "\"%s\", not Config: not a kubeconfig", kind);
            goto out;
        }
    }
    const yaml_node_t *ref = root;
    const char *refpath = "current-context";
    if (!cur) {
        if ((r = opt_string(&p, root, "", "current-context", &cur, &n, path)) < 0)
            goto out;
        if (!cur || !*cur) {
            r = gs_yaml_error(&y, n ? n : root, "current-context", "missing (name a context to use)");
            goto out;
        }
        ref = n;
    } else {
        refpath = "context";
    }
    if ((r = find_named(&p, root, "contexts", "context", cur, ref, refpath, &ctx, cpath)) < 0)
        goto out;
    static const char *const context_keys[] = { "cluster", "user", "namespace", "extensions", NULL };
    if ((r = gs_yaml_check_keys(&y, ctx, cpath, context_keys)) < 0)
        goto out;
    yaml_node_t *cn, *un, *nn;
    char clpath[GS_YAML_PATH_MAX], upath[GS_YAML_PATH_MAX], npath[GS_YAML_PATH_MAX];
    if ((r = opt_string(&p, ctx, cpath, "cluster", &cluster, &cn, clpath)) < 0 ||
        (r = opt_string(&p, ctx, cpath, "user", &user, &un, upath)) < 0 ||
        (r = opt_string(&p, ctx, cpath, "namespace", &ns, &nn, npath)) < 0)
        goto out;
    if (!cluster) {
        r = gs_yaml_error(&y, ctx, cpath, "missing \"cluster\"");
        goto out;
    }
    if ((r = find_named(&p, root, "clusters", "cluster", cluster, cn, clpath, &cl, path)) < 0 ||
        (r = parse_cluster(&p, cl, path)) < 0)
        goto out;
    if (user) {
        if ((r = find_named(&p, root, "users", "user", user, un, upath, &us, path)) < 0 ||
            (r = parse_user(&p, us, path)) < 0)
            goto out;
    }
    r = dup_to(&out->namespace, ns && *ns ? ns : "default");
out:
    if (r < 0)
        kube_config_free(out);
    return r;
}

int kube_config_load(const char *path, const char *context, struct kube_config *out, char *err, size_t errlen) {
    _cleanup_free_ char *text = NULL, *dir = NULL;
    size_t len;
    *out = (struct kube_config){ 0 };
    int r = gs_yaml_read_file(path, &text, &len, err, errlen);
    if (r < 0)
        return r;
    const char *slash = strrchr(path, '/');
    if (slash && !(dir = strndup(path, slash == path ? 1 : (size_t)(slash - path))))
        return -ENOMEM;
    return kube_config_parse(path, text, len, dir, context, out, err, errlen);
}

int kube_config_in_cluster(const char *sa_dir, struct kube_config *out, char *err, size_t errlen) {
    _cleanup_free_ char *nsfile = NULL, *ns = NULL; /* before any goto */
    size_t len = 0;
    *out = (struct kube_config){ 0 };
    const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
    if (!sa_dir)
        sa_dir = KUBE_SA_DIR;
    if (!host || !*host) {
        return kube_errf(err, errlen, -ENOENT,
                         "not in a cluster: KUBERNETES_SERVICE_HOST is not set (give a kubeconfig)");
    }
    if (!port || !*port)
        return kube_errf(err, errlen, -EINVAL, "KUBERNETES_SERVICE_HOST is set but KUBERNETES_SERVICE_PORT is not");
    unsigned long long pnum;
    if (gs_parse_uint(port, 1, 65535, &pnum) < 0)
        return kube_errf(err, errlen, -EINVAL, "KUBERNETES_SERVICE_PORT=\"%.32s\": not a port number", port);
    if (strpbrk(host, "/?#@ []"))
        return kube_errf(err, errlen, -EINVAL, "KUBERNETES_SERVICE_HOST=\"%.64s\": not a host name or address", host);
    bool v6 = strchr(host, ':') != NULL;
    int r = -ENOMEM;
    if (asprintf(&out->server, v6 ? "https://[%s]:%llu" : "https://%s:%llu", host, pnum) < 0 ||
        asprintf(&out->token_file, "%s/token", sa_dir) < 0 || asprintf(&out->ca_file, "%s/ca.crt", sa_dir) < 0) {
        out->server = out->token_file = out->ca_file = NULL;
        goto fail;
    }
    struct stat st;
    const char *need[] = { out->token_file, out->ca_file };
    for (size_t i = 0; i < GS_ARRAY_SIZE(need); i++) {
        if (stat(need[i], &st) < 0) {
            r = kube_errf(err, errlen, -errno, "%s: %s (the service account's %s)", need[i], strerror(errno),
                          i == 0 ? "token" : "CA certificate");
            goto fail;
        }
    }
    if (asprintf(&nsfile, "%s/namespace", sa_dir) < 0) {
        nsfile = NULL;
        goto fail;
    }
    r = gs_read_file_ex(nsfile, 4096, 0, &ns, &len, err, errlen);
    if (r == -ENOENT) {
        r = 0;
    } else if (r < 0) {
        goto fail;
    }
    while (len > 0 && (ns[len - 1] == '\n' || ns[len - 1] == ' '))
        ns[--len] = '\0';
    if ((r = dup_to(&out->namespace, len ? ns : "default")) < 0)
        goto fail;
    return 0;
fail:
    kube_config_free(out);
    return r;
}

int kube_config_default(const char *path, const char *context, struct kube_config *out, char *err, size_t errlen) {
    if (path && *path)
        return kube_config_load(path, context, out, err, errlen);
    const char *env = getenv("KUBECONFIG");
    if (env && *env) {
        _cleanup_free_ char *first = strndup(env, strcspn(env, ":"));
        if (!first)
            return -ENOMEM;
        return kube_config_load(first, context, out, err, errlen);
    }
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    if (host && *host && !context)
        return kube_config_in_cluster(NULL, out, err, errlen);
    const char *home = getenv("HOME");
    _cleanup_free_ char *def = NULL;
    if (!home || asprintf(&def, "%s/.kube/config", home) < 0) {
        def = NULL;
        return kube_errf(err, errlen, -EINVAL, "no kubeconfig: give --kubeconfig, set KUBECONFIG or run in a cluster");
    }
    return kube_config_load(def, context, out, err, errlen);
}
