/* kube.c (cli): `gpuslice kube`, the Kubernetes REST client (src/kube) for people and tests:
 * get, list, create, replace, apply, patch, delete and watch, with --kubeconfig; objects from
 * files in JSON or YAML (kubeyaml.h). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/kubeyaml.h"
#include "kube/kube.h"
#include "util/util.h"

#define CMD "kube"

/* The resources the command knows by name; others are given with --api-version. */
static const struct resource {
    const char *plural, *kind, *short_name, *api_version;
    bool namespaced;
} resources[] = {
    { "nodes", "Node", "no", "v1", false },
    { "namespaces", "Namespace", "ns", "v1", false },
    { "pods", "Pod", "po", "v1", true },
    { "configmaps", "ConfigMap", "cm", "v1", true },
    { "secrets", "Secret", NULL, "v1", true },
    { "serviceaccounts", "ServiceAccount", "sa", "v1", true },
    { "services", "Service", "svc", "v1", true },
    { "events", "Event", "ev", "v1", true },
    { "leases", "Lease", NULL, "coordination.k8s.io/v1", true },
    { "daemonsets", "DaemonSet", "ds", "apps/v1", true },
    { "deployments", "Deployment", "deploy", "apps/v1", true },
    { "roles", "Role", NULL, "rbac.authorization.k8s.io/v1", true },
    { "rolebindings", "RoleBinding", NULL, "rbac.authorization.k8s.io/v1", true },
    { "clusterroles", "ClusterRole", NULL, "rbac.authorization.k8s.io/v1", false },
    { "clusterrolebindings", "ClusterRoleBinding", NULL, "rbac.authorization.k8s.io/v1", false },
    { "resourceslices", "ResourceSlice", NULL, "resource.k8s.io/v1", false },
    { "resourceclaims", "ResourceClaim", NULL, "resource.k8s.io/v1", true },
    { "resourceclaimtemplates", "ResourceClaimTemplate", NULL, "resource.k8s.io/v1", true },
    { "deviceclasses", "DeviceClass", NULL, "resource.k8s.io/v1", false },
    { "validatingadmissionpolicies", "ValidatingAdmissionPolicy", NULL, "admissionregistration.k8s.io/v1", false },
    { "validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding", NULL, "admissionregistration.k8s.io/v1",
      false },
};

struct opts {
    const char *kubeconfig, *sa_dir, *context, *ns, *api_version, *label, *field, *rv, *cont, *file, *patch,
        *patch_type;
    const char *output;
    unsigned limit, watch_timeout, run_for;
    bool all_ns, cluster_scoped, force, informer, objects;
    struct kube_limits lim;
};

static int usage(FILE *f) {
    fprintf(f, "Usage: gpuslice kube [OPTIONS] VERB ...\n"
               "  get RESOURCE NAME              the object, as JSON\n"
               "  list RESOURCE                  every page (or one with --limit), as JSON or names\n"
               "  create -f FILE                 POST the object of FILE (JSON or YAML; - for stdin)\n"
               "  replace -f FILE                PUT it (with metadata.resourceVersion: refused if stale)\n"
               "  apply -f FILE [--force]        server-side apply (field manager gpuslice)\n"
               "  patch RESOURCE NAME -p PATCH [--type merge|strategic|json]\n"
               "  delete RESOURCE NAME\n"
               "  watch RESOURCE                 one JSON line per event; --informer: list, then watch,\n"
               "                                 relisting after errors, until --for or SIGTERM\n"
               "RESOURCE: a plural (configmaps), kind (ConfigMap), short name (cm), or an API path (/api/v1/...);\n"
               "others with --api-version GROUP/VERSION [--cluster-scoped].\n"
               "Options:\n"
               "  --kubeconfig FILE   default $KUBECONFIG, in-cluster, then ~/.kube/config\n"
               "  --context NAME      the kubeconfig context (default current-context)\n"
               "  --service-account-dir DIR  in-cluster: $KUBERNETES_SERVICE_HOST/PORT and DIR's token, ca.crt\n"
               "                      and namespace (a pod's is " KUBE_SA_DIR ")\n"
               "  -n, --namespace NS  default the context's or the service account's\n"
               "  -A, --all-namespaces  list or watch in every namespace\n"
               "  -l, --selector SEL  label selector;  --field-selector SEL\n"
               "  --limit N --continue TOKEN   one page of a list\n"
               "  -o, --output json|name       (get, list; default json)\n"
               "  --resource-version RV        watch from RV\n"
               "  --watch-timeout S   a watch's timeoutSeconds (default 300);  --for S  how long to run\n"
               "  --objects           watch: print each event's object too\n"
               "  --timeout MS        per request (default 30000);  --connect-timeout MS (default 10000)\n"
               "  --max-response BYTES  the largest answer read (default 64 MiB)\n"
               "Exit status: 0 success, 1 the request failed (the API server's message on stderr), 2 usage.\n");
    return f == stdout ? GS_EXIT_OK : GS_EXIT_USAGE;
}

static const struct resource *find_resource(const char *name) {
    size_t n = strlen(name);
    for (size_t i = 0; i < GS_ARRAY_SIZE(resources); i++) {
        const struct resource *r = &resources[i];
        if (!strcmp(name, r->plural) || !strcasecmp(name, r->kind) || (r->short_name && !strcmp(name, r->short_name)) ||
            (n + 1 == strlen(r->plural) && !strncmp(name, r->plural, n)))
            return r;
    }
    return NULL;
}

static const struct resource *find_kind(const char *kind) {
    for (size_t i = 0; i < GS_ARRAY_SIZE(resources); i++)
        if (!strcmp(kind, resources[i].kind))
            return &resources[i];
    return NULL;
}

/* The path of RESOURCE [NAME] per the options; an argument starting with '/' is the path itself. */
static int resource_path(const struct opts *o, const char *def_ns, const char *what, const char *name, char *buf,
                         size_t len) {
    if (what[0] == '/') {
        if (gs_strlcpy(buf, what, len) < 0)
            return cli_usage_error(CMD, "%s: too long", what);
        return GS_EXIT_OK;
    }
    const char *api = o->api_version, *plural = what;
    bool namespaced = !o->cluster_scoped;
    if (!api) {
        const struct resource *r = find_resource(what);
        if (!r)
            return cli_usage_error(CMD, "unknown resource '%s' (give --api-version GROUP/VERSION)", what);
        api = r->api_version, plural = r->plural, namespaced = r->namespaced;
    }
    const char *ns = namespaced && !(o->all_ns && !name) ? (o->ns ? o->ns : def_ns) : NULL;
    int r = kube_path(buf, len, api, ns, plural, name);
    if (r < 0)
        return cli_usage_error(CMD, "cannot build a path of %s %s/%s/%s: %s", api, ns ? ns : "", plural,
                               name ? name : "", strerror(-r));
    return GS_EXIT_OK;
}

static int fail(const char *err) {
    fprintf(stderr, "gpuslice kube: %s\n", err);
    return GS_EXIT_FAILURE;
}

static void print_json(const json_t *j) {
    char *s = json_dumps(j, JSON_INDENT(2));
    if (s)
        puts(s);
    free(s);
    fflush(stdout);
}

static void print_names(const json_t *list) {
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(list, "items"), i, item) {
        const char *ns = kube_meta(item, "namespace");
        printf("%s%s%s\n", ns ? ns : "", ns ? "/" : "", kube_meta(item, "name") ? kube_meta(item, "name") : "");
    }
    const char *cont = kube_meta(list, "continue");
    if (cont && *cont)
        printf("continue: %s\n", cont);
    fflush(stdout);
}

#define FILE_MAX ((size_t)64 << 20) /* the largest -f FILE read */

/* FILE's text ("-": stdin), at most FILE_MAX bytes; 0, or GS_EXIT_FAILURE having said why. */
static int read_input(const char *file, char **text, size_t *len) {
    bool in = !strcmp(file, "-");
    FILE *f = in ? stdin : fopen(file, "r");
    if (!f) {
        fprintf(stderr, "gpuslice kube: %s: %s\n", file, strerror(errno));
        return GS_EXIT_FAILURE;
    }
    size_t cap = 0, n = 0, got = 0;
    char *buf = NULL;
    int rc = GS_EXIT_OK;
    do {
        if (n + 1 >= cap) {
            size_t want = cap ? cap * 2 : 65536;
            char *b = n + 1 > FILE_MAX ? NULL : realloc(buf, want);
            if (!b) {
                fprintf(stderr, "gpuslice kube: %s: %s\n", file,
                        n + 1 > FILE_MAX ? "larger than 64 MiB" : "out of memory");
                rc = GS_EXIT_FAILURE;
                break;
            }
            buf = b, cap = want;
        }
        n += got = fread(buf + n, 1, cap - n - 1, f);
    } while (got);
    if (rc == GS_EXIT_OK && ferror(f)) {
        fprintf(stderr, "gpuslice kube: %s: %s\n", file, strerror(errno));
        rc = GS_EXIT_FAILURE;
    }
    if (!in)
        fclose(f);
    if (rc != GS_EXIT_OK) {
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    *text = buf, *len = n;
    return GS_EXIT_OK;
}

/* The object of -f FILE (JSON; YAML when FILE ends in .yaml or .yml or its text does not start
 * with '{') and its path: the collection (create) or the object (the rest). */
static int load_object(const struct opts *o, const char *def_ns, bool collection, json_t **obj, char *path,
                       size_t len) {
    if (!o->file)
        return cli_usage_error(CMD, "give -f FILE (a JSON or YAML object)");
    _cleanup_free_ char *text = NULL;
    size_t text_len;
    int rc = read_input(o->file, &text, &text_len);
    if (rc != GS_EXIT_OK)
        return rc;
    const char *first = text + strspn(text, " \t\r\n");
    if (gs_has_suffix(o->file, ".yaml") || gs_has_suffix(o->file, ".yml") || *first != '{') {
        char err[1024];
        if (cli_kube_yaml_object(o->file, text, text_len, obj, err, sizeof err) < 0) {
            fprintf(stderr, "gpuslice kube: %s\n", err);
            return GS_EXIT_FAILURE;
        }
    } else {
        json_error_t je;
        if (!(*obj = json_loadb(text, text_len, 0, &je))) {
            fprintf(stderr, "gpuslice kube: %s:%d:%d: %s\n", o->file, je.line, je.column, je.text);
            return GS_EXIT_FAILURE;
        }
    }
    const char *api = json_string_value(json_object_get(*obj, "apiVersion"));
    const char *kind = json_string_value(json_object_get(*obj, "kind"));
    const char *name = kube_meta(*obj, "name"), *ns = kube_meta(*obj, "namespace");
    if (!json_is_object(*obj) || !api || !kind || !name) {
        fprintf(stderr, "gpuslice kube: %s: an object needs apiVersion, kind and metadata.name\n", o->file);
        return GS_EXIT_FAILURE;
    }
    const struct resource *r = find_kind(kind);
    char plural[128];
    if (r) {
        gs_strlcpy(plural, r->plural, sizeof plural);
    } else { /* kind to resource as the API names most: lower case, plural */
        size_t n = strlen(kind);
        if (n + 3 > sizeof plural)
            return fail("kind too long");
        for (size_t i = 0; i <= n; i++)
            plural[i] = (char)(kind[i] >= 'A' && kind[i] <= 'Z' ? kind[i] + 32 : kind[i]);
        if (n && plural[n - 1] == 'y')
            strcpy(plural + n - 1, "ies");
        else
            strcat(plural, plural[n - 1] == 's' ? "es" : "s");
    }
    bool namespaced = r ? r->namespaced : !o->cluster_scoped;
    const char *use_ns = namespaced ? (ns ? ns : (o->ns ? o->ns : def_ns)) : NULL;
    if (namespaced && !ns)
        json_object_set_new(json_object_get(*obj, "metadata"), "namespace", json_string(use_ns));
    rc = kube_path(path, len, api, use_ns, plural, collection ? NULL : name);
    if (rc < 0) {
        fprintf(stderr, "gpuslice kube: %s: no API path for %s %s %s: %s\n", o->file, api, kind, name, strerror(-rc));
        return GS_EXIT_FAILURE;
    }
    return GS_EXIT_OK;
}

/* ---- watch ---- */

static volatile sig_atomic_t stop_signal;
static void on_signal(int sig) {
    stop_signal = sig;
}

struct watch_out {
    bool objects;
};

/* Prints one compact JSON line and frees it. */
static void print_line(json_t *line) {
    char *s = json_dumps(line, JSON_COMPACT);
    if (s)
        printf("%s\n", s);
    fflush(stdout);
    free(s);
    json_decref(line);
}

static void print_event(const struct watch_out *w, const char *type, json_t *obj) {
    json_t *line = json_pack("{s:s}", "type", type);
    const char *ns = kube_meta(obj, "namespace"), *name = kube_meta(obj, "name");
    const char *rv = kube_meta(obj, "resourceVersion");
    if (ns)
        json_object_set_new(line, "namespace", json_string(ns));
    if (name)
        json_object_set_new(line, "name", json_string(name));
    if (rv)
        json_object_set_new(line, "resourceVersion", json_string(rv));
    if (w->objects)
        json_object_set(line, "object", obj);
    print_line(line);
}

static int on_event(void *ctx, enum kube_event_type type, json_t *obj) {
    print_event(ctx, kube_event_name(type), obj);
    return stop_signal ? 1 : 0;
}

static int on_list(void *ctx, json_t *list) {
    const struct watch_out *w = ctx;
    json_t *line = json_pack("{s:s}", "type", "LIST"), *items = json_array();
    const char *rv = kube_meta(list, "resourceVersion");
    if (rv)
        json_object_set_new(line, "resourceVersion", json_string(rv));
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(list, "items"), i, item) {
        json_t *e = json_object();
        const char *ns = kube_meta(item, "namespace");
        if (ns)
            json_object_set_new(e, "namespace", json_string(ns));
        json_object_set_new(e, "name", json_string(kube_meta(item, "name") ? kube_meta(item, "name") : ""));
        if (w->objects)
            json_object_set(e, "object", item);
        json_array_append_new(items, e);
    }
    json_object_set_new(line, "items", items);
    print_line(line);
    return 0;
}

static void on_error(void *ctx, int r, const char *msg) {
    (void)ctx;
    fprintf(stderr, "gpuslice kube: %s (%s); relisting\n", msg, strerror(-r));
}

static int run_watch(struct kube_client *c, const struct opts *o, const char *path) {
    struct watch_out w = { .objects = o->objects };
    char err[1024];
    struct sigaction sa = { .sa_handler = on_signal };
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (!o->informer) {
        struct kube_list_opts lo = { .label_selector = o->label,
                                     .field_selector = o->field,
                                     .resource_version = o->rv };
        unsigned t = o->run_for ? o->run_for : o->watch_timeout;
        int r = kube_watch(c, path, &lo, t, on_event, &w, err, sizeof err);
        return r < 0 ? fail(err) : GS_EXIT_OK;
    }
    struct kube_informer_ops ops = { .path = path,
                                     .label_selector = o->label,
                                     .field_selector = o->field,
                                     .watch_timeout_s = o->watch_timeout,
                                     .on_list = on_list,
                                     .on_event = on_event,
                                     .on_error = on_error,
                                     .ctx = &w };
    struct kube_informer *inf;
    int r = kube_informer_start(c, &ops, &inf, err, sizeof err);
    if (r < 0)
        return fail(err);
    uint64_t end = o->run_for ? gs_now_ns() + (uint64_t)o->run_for * 1000000000ull : 0;
    while (!stop_signal && (!end || gs_now_ns() < end)) {
        struct timespec ts = { 0, 50 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    kube_informer_stop(inf);
    return GS_EXIT_OK;
}

/* ---- the command ---- */

static int parse_uint_opt(const char *name, const char *s, unsigned long long max, unsigned long long *out) {
    if (gs_parse_uint(s, 0, max, out) < 0)
        return cli_usage_error(CMD, "--%s: '%s' is not a number up to %llu", name, s, max);
    return GS_EXIT_OK;
}

static int parse_opts(int argc, char **argv, struct opts *o) {
    enum {
        O_KUBECONFIG = 256,
        O_CONTEXT,
        O_FIELD,
        O_LIMIT,
        O_CONTINUE,
        O_RV,
        O_WATCH_TIMEOUT,
        O_FOR,
        O_TIMEOUT,
        O_CONNECT_TIMEOUT,
        O_SA_DIR,
        O_MAX_RESPONSE,
        O_API,
        O_CLUSTER,
        O_FORCE,
        O_INFORMER,
        O_OBJECTS,
        O_TYPE
    };
    static const struct option lopts[] = {
        { "kubeconfig", required_argument, NULL, O_KUBECONFIG },
        { "context", required_argument, NULL, O_CONTEXT },
        { "service-account-dir", required_argument, NULL, O_SA_DIR },
        { "namespace", required_argument, NULL, 'n' },
        { "all-namespaces", no_argument, NULL, 'A' },
        { "selector", required_argument, NULL, 'l' },
        { "field-selector", required_argument, NULL, O_FIELD },
        { "limit", required_argument, NULL, O_LIMIT },
        { "continue", required_argument, NULL, O_CONTINUE },
        { "output", required_argument, NULL, 'o' },
        { "resource-version", required_argument, NULL, O_RV },
        { "watch-timeout", required_argument, NULL, O_WATCH_TIMEOUT },
        { "for", required_argument, NULL, O_FOR },
        { "timeout", required_argument, NULL, O_TIMEOUT },
        { "connect-timeout", required_argument, NULL, O_CONNECT_TIMEOUT },
        { "max-response", required_argument, NULL, O_MAX_RESPONSE },
        { "api-version", required_argument, NULL, O_API },
        { "cluster-scoped", no_argument, NULL, O_CLUSTER },
        { "force", no_argument, NULL, O_FORCE },
        { "informer", no_argument, NULL, O_INFORMER },
        { "objects", no_argument, NULL, O_OBJECTS },
        { "filename", required_argument, NULL, 'f' },
        { "patch", required_argument, NULL, 'p' },
        { "type", required_argument, NULL, O_TYPE },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    int c;
    unsigned long long v;
    while ((c = getopt_long(argc, argv, "n:Al:o:f:p:h", lopts, NULL)) != -1) {
        int rc = GS_EXIT_OK;
        switch (c) {
        case O_KUBECONFIG: o->kubeconfig = optarg; break;
        case O_CONTEXT: o->context = optarg; break;
        case O_SA_DIR: o->sa_dir = optarg; break;
        case 'n': o->ns = optarg; break;
        case 'A': o->all_ns = true; break;
        case 'l': o->label = optarg; break;
        case O_FIELD: o->field = optarg; break;
        case O_CONTINUE: o->cont = optarg; break;
        case 'o': o->output = optarg; break;
        case O_RV: o->rv = optarg; break;
        case O_API: o->api_version = optarg; break;
        case O_CLUSTER: o->cluster_scoped = true; break;
        case O_FORCE: o->force = true; break;
        case O_INFORMER: o->informer = true; break;
        case O_OBJECTS: o->objects = true; break;
        case 'f': o->file = optarg; break;
        case 'p': o->patch = optarg; break;
        case O_TYPE: o->patch_type = optarg; break;
        case O_LIMIT: rc = parse_uint_opt("limit", optarg, 100000, &v), o->limit = (unsigned)v; break;
        case O_WATCH_TIMEOUT:
            rc = parse_uint_opt("watch-timeout", optarg, 86400, &v), o->watch_timeout = (unsigned)v;
            break;
        case O_FOR: rc = parse_uint_opt("for", optarg, 86400 * 365, &v), o->run_for = (unsigned)v; break;
        case O_TIMEOUT: rc = parse_uint_opt("timeout", optarg, 86400000, &v), o->lim.timeout_ms = (unsigned)v; break;
        case O_CONNECT_TIMEOUT:
            rc = parse_uint_opt("connect-timeout", optarg, 86400000, &v), o->lim.connect_timeout_ms = (unsigned)v;
            break;
        case O_MAX_RESPONSE:
            rc = parse_uint_opt("max-response", optarg, 1ull << 40, &v), o->lim.max_response = (size_t)v;
            o->lim.max_line = (size_t)v;
            break;
        case 'h': return usage(stdout) == GS_EXIT_OK ? -1 : GS_EXIT_USAGE;
        default: return GS_EXIT_USAGE;
        }
        if (rc != GS_EXIT_OK)
            return rc;
    }
    if (o->output && strcmp(o->output, "json") && strcmp(o->output, "name"))
        return cli_usage_error(CMD, "-o: '%s' is not json or name", o->output);
    return GS_EXIT_OK;
}

static int patch_type(const char *s, enum kube_patch_type *t) {
    static const char *const names[] = { "merge", "strategic", "json" };
    for (size_t i = 0; i < GS_ARRAY_SIZE(names); i++)
        if (!strcmp(s, names[i])) {
            *t = (enum kube_patch_type)i;
            return GS_EXIT_OK;
        }
    return cli_usage_error(CMD, "--type: '%s' is not merge, strategic or json", s);
}

static int run_verb(struct kube_client *c, const struct opts *o, const char *verb, int n, char **args) {
    char path[KUBE_URL_MAX], err[1024];
    const char *ns = kube_client_namespace(c);
    json_t *out = NULL, *obj = NULL;
    int r, rc;
    bool get = !strcmp(verb, "get"), del = !strcmp(verb, "delete"), patch = !strcmp(verb, "patch");
    if (get || del || patch) {
        bool raw = n == 1 && args[0][0] == '/'; /* an object's API path */
        if (n != 2 && !raw)
            return cli_usage_error(CMD, "%s RESOURCE NAME (or an API path)", verb);
        if ((rc = resource_path(o, ns, args[0], raw ? NULL : args[1], path, sizeof path)) != GS_EXIT_OK)
            return rc;
        if (get) {
            r = kube_get(c, path, &out, err, sizeof err);
        } else if (del) {
            r = kube_delete(c, path, &out, err, sizeof err);
        } else {
            enum kube_patch_type t = KUBE_PATCH_MERGE;
            json_error_t je;
            if (!o->patch)
                return cli_usage_error(CMD, "patch: give -p PATCH (JSON)");
            if (o->patch_type && (rc = patch_type(o->patch_type, &t)) != GS_EXIT_OK)
                return rc;
            if (!(obj = json_loads(o->patch, 0, &je)))
                return cli_usage_error(CMD, "-p: not JSON (column %d: %s)", je.column, je.text);
            r = kube_patch(c, path, t, obj, "gpuslice", false, &out, err, sizeof err);
        }
    } else if (!strcmp(verb, "list") || !strcmp(verb, "watch")) {
        if (n != 1)
            return cli_usage_error(CMD, "%s RESOURCE", verb);
        if ((rc = resource_path(o, ns, args[0], NULL, path, sizeof path)) != GS_EXIT_OK)
            return rc;
        if (verb[0] == 'w')
            return run_watch(c, o, path);
        struct kube_list_opts lo = {
            .label_selector = o->label, .field_selector = o->field, .continue_token = o->cont, .limit = o->limit
        };
        r = o->limit ? kube_list(c, path, &lo, &out, err, sizeof err)
                     : kube_list_all(c, path, &lo, &out, err, sizeof err);
        if (r == 0 && o->output && !strcmp(o->output, "name")) {
            print_names(out);
            json_decref(out);
            return GS_EXIT_OK;
        }
    } else if (!strcmp(verb, "create") || !strcmp(verb, "replace") || !strcmp(verb, "apply")) {
        if (n != 0)
            return cli_usage_error(CMD, "%s -f FILE", verb);
        bool create = verb[0] == 'c';
        if ((rc = load_object(o, ns, create, &obj, path, sizeof path)) != GS_EXIT_OK) {
            json_decref(obj);
            return rc;
        }
        if (create)
            r = kube_create(c, path, obj, &out, err, sizeof err);
        else if (verb[0] == 'r')
            r = kube_update(c, path, obj, &out, err, sizeof err);
        else
            r = kube_patch(c, path, KUBE_PATCH_APPLY, obj, "gpuslice", o->force, &out, err, sizeof err);
    } else {
        return cli_usage_error(CMD, "unknown verb '%s' (get, list, create, replace, apply, patch, delete, watch)",
                               verb);
    }
    json_decref(obj);
    if (r < 0)
        return fail(err);
    if (o->output && !strcmp(o->output, "name")) {
        /* an object, or the Status a delete may answer with (details.name) */
        const char *name = kube_meta(out, "name");
        if (!name)
            name = json_string_value(json_object_get(json_object_get(out, "details"), "name"));
        printf("%s\n", name ? name : "");
    } else
        print_json(out);
    json_decref(out);
    return GS_EXIT_OK;
}

int cmd_kube(const struct cli *cli, int argc, char **argv) {
    (void)cli;
    struct opts o = { 0 };
    int rc = parse_opts(argc, argv, &o);
    if (rc == -1)
        return GS_EXIT_OK;
    if (rc != GS_EXIT_OK)
        return rc;
    if (optind >= argc)
        return usage(stderr);
    struct kube_client *c;
    char err[1024];
    if (o.sa_dir && (o.kubeconfig || o.context))
        return cli_usage_error(CMD, "--service-account-dir is in-cluster: not with --kubeconfig or --context");
    if (o.sa_dir) {
        struct kube_config cfg;
        int r = kube_config_in_cluster(o.sa_dir, &cfg, err, sizeof err);
        if (r == 0)
            r = kube_client_new(&cfg, &o.lim, &c, err, sizeof err);
        kube_config_free(&cfg);
        if (r < 0)
            return fail(err);
    } else if (kube_client_open(o.kubeconfig, o.context, &o.lim, &c, err, sizeof err) < 0) {
        return fail(err);
    }
    rc = run_verb(c, &o, argv[optind], argc - optind - 1, argv + optind + 1);
    kube_client_free(c);
    return rc;
}
