/* wire.c: the extender API's JSON (wire.h). Pure. */
#include "extender/wire.h"

#include "extender/podclaims.h"
#include "util/quantity.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* obj[key], the key matched without regard to case (Go's decoder) */
static json_t *get_ci(const json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    if (v || !json_is_object(obj))
        return v;
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)obj, k, x) if (strcasecmp(k, key) == 0) return x;
    return NULL;
}

/* the resources a pod's sum is taken of: milli-CPU, bytes, counts, %, GiB (gpuslice.io/gpu-memory
 * units, docs/fractional.md) */
enum { R_CPU, R_MEM, R_GPUS, R_COMPUTE, R_GPU_MEM, R_COUNT };
static const char *const res_names[R_COUNT] = { "cpu", "memory", EX_RES_GPU, EX_RES_COMPUTE, EX_RES_MEMORY };
struct req {
    int64_t v[R_COUNT];
};
#define GPU_MEM_GIB_MAX (1 << 20) /* gpuslice.io/gpu-memory in GiB: a byte quantity ("10Gi") is beyond */

/* one quantity of a ResourceList (list.NAME at where) added to r: requests, limits and overhead
 * alike; every conversion and sum checked. CPU in thousandths (MilliValue), the rest in units
 * (Value), both rounded up as Kubernetes rounds; GPUs must be whole. */
static int add_quantity(const json_t *v, const char *where, const char *name, struct req *r, char *err,
                        size_t errlen) {
    int i = !strcmp(name, "cpu")            ? R_CPU
            : !strcmp(name, "memory")       ? R_MEM
            : !strcmp(name, EX_RES_COMPUTE) ? R_COMPUTE
            : !strcmp(name, EX_RES_MEMORY)  ? R_GPU_MEM
                                            : R_GPUS; /* nvidia.com/gpu, nvidia.com/gpu.shared */
    int scale = i == R_CPU ? -3 : 0;
    const char *txt = json_string_value(v);
    int64_t x = 0;
    int e = 0;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
        if (x < 0 || (scale && __builtin_mul_overflow(x, (int64_t)1000, &x)))
            e = -ERANGE;
    } else if (!txt || (e = gs_quantity_parse(txt, scale, i == R_GPUS ? GS_QTY_EXACT : 0, &x)) == -EINVAL) {
        snprintf(err, errlen, "%s.%s: '%.40s': not a quantity", where, name, txt ? txt : "(not a string)");
        return -EINVAL;
    } else if (e == 0 && x < 0) {
        e = -ERANGE;
    }
    if (e == -EDOM) {
        snprintf(err, errlen, "%s.%s: '%.40s': GPUs are counted in whole devices", where, name, txt);
        return -EINVAL;
    }
    if (e < 0) {
        char num[32];
        if (!txt)
            snprintf(num, sizeof(num), "%lld", (long long)json_integer_value(v));
        snprintf(err, errlen, "%s.%s: '%.40s': out of range", where, name, txt ? txt : num);
        return -EINVAL;
    }
    if (i == R_GPU_MEM && x > GPU_MEM_GIB_MAX) { /* the node counts GiB (a device per GiB): "10Gi" is 10 Gi units */
        snprintf(err, errlen, "%s.%s: '%.40s': gpuslice.io/gpu-memory is counted in GiB (write 10 for 10 GiB)", where,
                 name, txt ? txt : "");
        return -EINVAL;
    }
    if (__builtin_add_overflow(r->v[i], x, &r->v[i])) {
        snprintf(err, errlen, "%s.%s: '%.40s': the pod's sum of %s overflows", where, name, txt ? txt : "",
                 res_names[i]);
        return -EINVAL;
    }
    return 0;
}

/* the resources of one container (requests, else limits, per resource) added to r; where names
 * the container ("Pod.spec.containers[3]") */
static int container_req(const json_t *c, const char *where, struct req *r, char *err, size_t errlen) {
    const json_t *res = json_object_get(c, "resources");
    const json_t *rq = json_object_get(res, "requests"), *lim = json_object_get(res, "limits");
    static const char *const names[] = {
        "cpu", "memory", EX_RES_GPU, EX_RES_GPU_SHARED, EX_RES_COMPUTE, EX_RES_MEMORY
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const json_t *v = json_object_get(rq, names[i]);
        const char *from = "requests";
        if (!v) {
            v = json_object_get(lim, names[i]);
            from = "limits";
        }
        char at[96];
        snprintf(at, sizeof(at), "%s.resources.%s", where, from);
        int e = v ? add_quantity(v, at, names[i], r, err, errlen) : 0;
        if (e < 0)
            return e;
    }
    return 0;
}

/* the containers' sum (init false) or the largest init container's, per resource, into tot */
static int containers(const json_t *spec, const char *field, bool init, struct req *tot, char *err, size_t errlen) {
    const json_t *arr = json_object_get(spec, field);
    size_t i;
    const json_t *c;
    json_array_foreach(arr, i, c) {
        char where[64];
        snprintf(where, sizeof(where), "Pod.spec.%s[%zu]", field, i);
        struct req r = { { 0 } };
        int e = container_req(c, where, init ? &r : tot, err, errlen); /* checked sums into tot */
        if (e < 0)
            return e;
        for (int k = 0; init && k < R_COUNT; k++) /* init containers run one at a time: the largest counts */
            tot->v[k] = r.v[k] > tot->v[k] ? r.v[k] : tot->v[k];
    }
    return 0;
}

/* pod.spec.overhead (the RuntimeClass's, added to the pod's requests as the scheduler does) added to tot */
static int overhead(const json_t *spec, struct req *tot, char *err, size_t errlen) {
    const json_t *oh = json_object_get(spec, "overhead");
    static const char *const names[] = {
        "cpu", "memory", EX_RES_GPU, EX_RES_GPU_SHARED, EX_RES_COMPUTE, EX_RES_MEMORY
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const json_t *v = json_object_get(oh, names[i]);
        int e = v ? add_quantity(v, "Pod.spec.overhead", names[i], tot, err, errlen) : 0;
        if (e < 0)
            return e;
    }
    return 0;
}

static void copy_str(char *dst, size_t len, const json_t *v) {
    const char *s = json_string_value(v);
    snprintf(dst, len, "%s", s ? s : "");
}

/* Appends name to the '|'-separated list (false: it does not fit, or the name is no label value). */
static bool spec_add(char *spec, size_t len, const json_t *v) {
    const char *s = json_string_value(v);
    size_t o = strlen(spec), n = s ? strlen(s) : 0;
    if (!n || strchr(s, '|') || o + (o > 0) + n + 1 > len)
        return false;
    if (o)
        spec[o++] = '|';
    memcpy(spec + o, s, n + 1);
    return true;
}

/* The GPU models (EX_PRODUCT_LABEL's values) the pod's required node affinity allows: the union
 * over its nodeSelectorTerms (ORed), each term's `In` expression on the label; a term without one
 * allows any model, and so does anything not understood (NotIn, a list too long): the scheduler
 * enforces the affinity itself, this only tells the policy. A nodeSelector on the label narrows it
 * to its value. */
static void pod_gpu_spec(const json_t *spec, char *out, size_t len) {
    out[0] = '\0';
    const json_t *terms = json_object_get(
        json_object_get(json_object_get(json_object_get(spec, "affinity"), "nodeAffinity"),
                        "requiredDuringSchedulingIgnoredDuringExecution"),
        "nodeSelectorTerms");
    size_t t, e;
    const json_t *term, *ex;
    bool any = !json_is_array(terms) || json_array_size(terms) == 0;
    json_array_foreach(terms, t, term) {
        bool constrained = false;
        json_array_foreach(json_object_get(term, "matchExpressions"), e, ex) {
            const char *key = json_string_value(json_object_get(ex, "key"));
            const char *op = json_string_value(json_object_get(ex, "operator"));
            if (!key || strcmp(key, EX_PRODUCT_LABEL) != 0 || !op || strcmp(op, "In") != 0 || constrained)
                continue;
            size_t k;
            const json_t *v;
            constrained = true;
            json_array_foreach(json_object_get(ex, "values"), k, v)
                if (!spec_add(out, len, v))
                    any = true;
        }
        any |= !constrained;
    }
    const json_t *sel = json_object_get(json_object_get(spec, "nodeSelector"), EX_PRODUCT_LABEL);
    if (json_is_string(sel)) {
        char one[EX_SPEC_MAX] = "";
        if (!spec_add(one, sizeof(one), sel))
            return; /* as if none: any model */
        bool in = any;
        for (const char *p = out; !in && *p;) {
            size_t n = strcspn(p, "|");
            in = n == strlen(one) && strncmp(p, one, n) == 0;
            p += n + (p[n] == '|');
        }
        if (in) { /* else no node takes the pod: the scheduler says so */
            memcpy(out, one, strlen(one) + 1);
            return;
        }
    }
    if (any)
        out[0] = '\0';
}

/* the pod's gpuslice.io/plan-gpu: a string of 1..len-1 characters of [A-Za-z0-9._-], else none
 * (a hint: a value out of shape is not an error, the pod is placed by the policy alone) */
static void plan_group(const json_t *v, char *out, size_t len) {
    const char *s = json_string_value(v);
    size_t n = s ? strlen(s) : 0;
    out[0] = '\0';
    if (!n || n >= len || strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != n)
        return;
    memcpy(out, s, n + 1);
}

int ex_pod_from_json(const json_t *pod, struct ex_pod *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    if (!json_is_object(pod)) {
        snprintf(err, errlen, "Pod: not an object");
        return -EINVAL;
    }
    const json_t *md = json_object_get(pod, "metadata"), *spec = json_object_get(pod, "spec");
    copy_str(out->uid, sizeof(out->uid), json_object_get(md, "uid"));
    copy_str(out->ns, sizeof(out->ns), json_object_get(md, "namespace"));
    copy_str(out->name, sizeof(out->name), json_object_get(md, "name"));
    plan_group(json_object_get(json_object_get(md, "annotations"), EX_ANN_PLAN_GPU), out->plan_gpu,
               sizeof(out->plan_gpu));
    struct req main_ = { { 0 } }, init = { { 0 } }, tot;
    int e = containers(spec, "containers", false, &main_, err, errlen);
    if (e == 0)
        e = containers(spec, "initContainers", true, &init, err, errlen);
    for (int k = 0; k < R_COUNT; k++)
        tot.v[k] = main_.v[k] > init.v[k] ? main_.v[k] : init.v[k];
    if (e == 0)
        e = overhead(spec, &tot, err, errlen);
    if (e < 0)
        return e;
    out->cpu = tot.v[R_CPU];
    out->mem = tot.v[R_MEM] / (1 << 20) + (tot.v[R_MEM] % (1 << 20) != 0); /* bytes to MiB, rounded up */
    int64_t gpus = tot.v[R_GPUS], compute = tot.v[R_COMPUTE];
    if (gpus > PL_MAX_GPUS * 64 || compute > 100000 || tot.v[R_GPU_MEM] > GPU_MEM_GIB_MAX) {
        snprintf(err, errlen, "Pod: %lld GPUs, %lld %% of a GPU, %lld GiB of GPU memory: out of range", (long long)gpus,
                 (long long)compute, (long long)tot.v[R_GPU_MEM]);
        return -EINVAL;
    }
    out->gpu_mem_mib = tot.v[R_GPU_MEM] * 1024; /* GiB (bounded above) to MiB */
    out->gpus = (int)gpus;
    out->compute_pct = (int)compute;
    pod_gpu_spec(spec, out->gpu_spec, sizeof(out->gpu_spec));
    return ex_pod_claims_from_json(pod, &out->claims, err, errlen); /* podclaims.h */
}

/* A JSON scanner for ExtenderArgs' top level: with 1,213 nodes the node names are most of the
 * request, and jansson's tree of them cost more than the decision (docs/benchmarks.md). The names
 * are taken in place (the body is copied and each name NUL-terminated there), also those of Nodes
 * (without nodeCacheCapable: whole v1.Nodes, of which only metadata.name is read); the Pod is parsed
 * with jansson from its extent, once its size is known to be bounded. Every value is checked as
 * JSON (RFC 8259) on the way, nesting at most MAX_DEPTH deep. */
#define MAX_DEPTH 64

struct scan {
    char *p, *end;
    int depth;
    size_t values; /* the values scanned so far */
};

static void ws(struct scan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

/* a string at s->p (its quote); *esc: it holds an escape. Returns its content's start, NULL when
 * it is not a valid string; s->p after the closing quote */
static char *scan_string(struct scan *s, bool *esc) {
    if (s->p >= s->end || *s->p != '"')
        return NULL;
    char *start = ++s->p;
    *esc = false;
    while (s->p < s->end) {
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') {
            s->p++;
            return start;
        }
        if (c < 0x20)
            return NULL;
        if (c == '\\') {
            *esc = true;
            if (++s->p >= s->end)
                return NULL;
            if (*s->p == 'u') {
                for (int k = 1; k <= 4; k++)
                    if (s->p + k >= s->end || !isxdigit((unsigned char)s->p[k]))
                        return NULL;
                s->p += 4;
            } else if (!strchr("\"\\/bfnrt", *s->p)) {
                return NULL;
            }
        }
        s->p++;
    }
    return NULL;
}

static bool scan_value(struct scan *s);

static bool scan_number(struct scan *s) {
    char *q = s->p;
    if (q < s->end && *q == '-')
        q++;
    if (q >= s->end || !isdigit((unsigned char)*q))
        return false;
    if (*q == '0')
        q++;
    else
        while (q < s->end && isdigit((unsigned char)*q))
            q++;
    if (q < s->end && *q == '.') {
        if (++q >= s->end || !isdigit((unsigned char)*q))
            return false;
        while (q < s->end && isdigit((unsigned char)*q))
            q++;
    }
    if (q < s->end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < s->end && (*q == '+' || *q == '-'))
            q++;
        if (q >= s->end || !isdigit((unsigned char)*q))
            return false;
        while (q < s->end && isdigit((unsigned char)*q))
            q++;
    }
    s->p = q;
    return true;
}

/* an array or object's members, after its opening bracket */
static bool scan_members(struct scan *s, char close, bool keys) {
    if (++s->depth > MAX_DEPTH)
        return false;
    ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        s->depth--;
        return true;
    }
    for (;;) {
        bool esc;
        ws(s);
        if (keys) {
            if (!scan_string(s, &esc))
                return false;
            ws(s);
            if (s->p >= s->end || *s->p++ != ':')
                return false;
            ws(s);
        }
        if (!scan_value(s))
            return false;
        ws(s);
        if (s->p >= s->end)
            return false;
        char c = *s->p++;
        if (c == close) {
            s->depth--;
            return true;
        }
        if (c != ',')
            return false;
    }
}

static bool scan_value(struct scan *s) {
    bool esc;
    if (s->p >= s->end)
        return false;
    s->values++;
    switch (*s->p) {
    case '"': return scan_string(s, &esc) != NULL;
    case '{': s->p++; return scan_members(s, '}', true);
    case '[': s->p++; return scan_members(s, ']', false);
    case 't':
    case 'f':
    case 'n': {
        const char *w = *s->p == 't' ? "true" : *s->p == 'f' ? "false" : "null";
        size_t n = strlen(w);
        if ((size_t)(s->end - s->p) < n || memcmp(s->p, w, n) != 0)
            return false;
        s->p += n;
        return true;
    }
    default: return scan_number(s);
    }
}

static int args_fail(struct ex_args *a, int r, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int args_fail(struct ex_args *a, int r, char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    ex_args_free(a);
    return r;
}

/* name (a node's, in place at v, n bytes) appended to a->names: at most max names */
static int add_name(struct ex_args *a, size_t max, size_t *cap, const char *what, char *v, size_t n, bool esc,
                    char *err, size_t errlen) {
    if (!v || esc || n == 0 || n >= EX_NAME_MAX)
        return snprintf(err, errlen, "ExtenderArgs: %s[%zu]: not a node name (1..%d characters, no escapes)", what,
                        a->n_names, EX_NAME_MAX - 1),
               -EBADMSG;
    if (a->n_names == max)
        return snprintf(err, errlen, "ExtenderArgs: %s: more than %zu nodes, the most this extender takes", what,
                        max),
               -E2BIG;
    if (a->n_names == *cap) {
        size_t c = *cap ? 2 * *cap : 256;
        c = c > max ? max : c;
        const char **nn = realloc(a->names, (c ? c : 1) * sizeof(*nn));
        if (!nn)
            return snprintf(err, errlen, "out of memory"), -ENOMEM;
        a->names = nn;
        *cap = c;
    }
    v[n] = '\0'; /* the closing quote */
    a->names[a->n_names++] = v;
    return 0;
}

/* An object's members at s->p ('{'): each key (its text, kn bytes) handed to member(), which
 * scans the value; -EBADMSG when it is not a valid object, or member()'s error. */
typedef int (*member_fn)(struct scan *s, const char *key, size_t kn, bool esc, void *ctx);
static int scan_object(struct scan *s, member_fn member, void *ctx) {
    if (s->p >= s->end || *s->p != '{')
        return -EBADMSG;
    s->p++;
    s->values++;
    if (++s->depth > MAX_DEPTH)
        return -EBADMSG;
    ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        s->depth--;
        return 0;
    }
    for (;;) {
        bool esc;
        ws(s);
        char *k = scan_string(s, &esc);
        if (!k)
            return -EBADMSG;
        size_t kn = (size_t)(s->p - 1 - k);
        ws(s);
        if (s->p >= s->end || *s->p++ != ':')
            return -EBADMSG;
        ws(s);
        int r = member(s, k, kn, esc, ctx);
        if (r < 0)
            return r;
        ws(s);
        if (s->p >= s->end)
            return -EBADMSG;
        char c = *s->p++;
        if (c == '}') {
            s->depth--;
            return 0;
        }
        if (c != ',')
            return -EBADMSG;
    }
}

/* a scan of node names: where they go, at most max (cap: a->names' room), the error's text */
struct node_list {
    struct ex_args *a;
    size_t max, cap;
    char *err;
    size_t errlen;
    bool have_items, have_md, have_name;
};

/* An array's elements at s->p ('['), each scanned by elem(). */
typedef int (*elem_fn)(struct scan *s, void *ctx);
static int scan_array(struct scan *s, elem_fn elem, void *ctx) {
    if (s->p >= s->end || *s->p != '[')
        return -EBADMSG;
    s->p++;
    s->values++;
    ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return 0;
    }
    for (;;) {
        ws(s);
        int r = elem(s, ctx);
        if (r < 0)
            return r;
        ws(s);
        if (s->p >= s->end || (*s->p != ',' && *s->p != ']'))
            return -EBADMSG;
        if (*s->p++ == ']')
            return 0;
    }
}

static int name_elem(struct scan *s, void *ctx) {
    struct node_list *l = ctx;
    bool esc = false;
    char *v = scan_string(s, &esc);
    return add_name(l->a, l->max, &l->cap, "NodeNames", v, v ? (size_t)(s->p - 1 - v) : 0, esc, l->err, l->errlen);
}

/* NodeNames: an array of strings, each NUL-terminated in place, at most max */
static int scan_names(struct scan *s, struct ex_args *a, size_t max, char *err, size_t errlen) {
    struct node_list l = { .a = a, .max = max, .err = err, .errlen = errlen };
    err[0] = '\0';
    int r = scan_array(s, name_elem, &l);
    if (r < 0 && !err[0])
        snprintf(err, errlen, "ExtenderArgs: at byte %zu: NodeNames: not an array of node names",
                 (size_t)(s->p - a->buf));
    return r;
}

static bool is_key(const char *k, size_t kn, bool esc, const char *want) {
    return !esc && kn == strlen(want) && !memcmp(k, want, kn);
}

static int node_md_member(struct scan *s, const char *k, size_t kn, bool esc, void *ctx) {
    struct node_list *l = ctx;
    if (!is_key(k, kn, esc, "name"))
        return scan_value(s) ? 0 : -EBADMSG;
    if (l->have_name)
        return snprintf(l->err, l->errlen, "ExtenderArgs: Nodes.items[%zu].metadata.name: duplicate key",
                        l->a->n_names),
               -EBADMSG;
    l->have_name = true;
    bool e = false;
    char *v = scan_string(s, &e);
    return add_name(l->a, l->max, &l->cap, "Nodes.items", v, v ? (size_t)(s->p - 1 - v) : 0, e, l->err, l->errlen);
}

static int node_member(struct scan *s, const char *k, size_t kn, bool esc, void *ctx) {
    struct node_list *l = ctx;
    if (!is_key(k, kn, esc, "metadata"))
        return scan_value(s) ? 0 : -EBADMSG;
    if (l->have_md)
        return -EBADMSG;
    l->have_md = true;
    return scan_object(s, node_md_member, l);
}

static int node_elem(struct scan *s, void *ctx) {
    struct node_list *l = ctx;
    size_t before = l->a->n_names;
    l->have_md = l->have_name = false;
    int r = scan_object(s, node_member, l);
    if (r == 0 && l->a->n_names == before)
        return snprintf(l->err, l->errlen, "ExtenderArgs: Nodes.items[%zu]: not a node name", before), -EBADMSG;
    return r;
}

static int nodes_member(struct scan *s, const char *k, size_t kn, bool esc, void *ctx) {
    struct node_list *l = ctx;
    if (!is_key(k, kn, esc, "items"))
        return scan_value(s) ? 0 : -EBADMSG;
    if (l->have_items || s->p >= s->end || *s->p != '[')
        return snprintf(l->err, l->errlen, "ExtenderArgs: Nodes.items: not an array"), -EBADMSG;
    l->have_items = true;
    return scan_array(s, node_elem, l);
}

/* Nodes (a v1.NodeList, nodeCacheCapable false): the names of its items, metadata.name, taken in
 * place as NodeNames' (no jansson tree of whole Nodes) */
static int scan_nodes(struct scan *s, struct ex_args *a, size_t max, char *err, size_t errlen) {
    struct node_list l = { .a = a, .max = max, .err = err, .errlen = errlen };
    err[0] = '\0';
    int r = scan_object(s, nodes_member, &l);
    if (r < 0 && !err[0])
        snprintf(err, errlen, "ExtenderArgs: at byte %zu: Nodes: not JSON", (size_t)(s->p - a->buf));
    if (r == 0 && !l.have_items)
        return snprintf(err, errlen, "ExtenderArgs: Nodes.items: not an array"), -EBADMSG;
    return r;
}

static json_t *parse_extent(const char *from, const char *to, const char *what, char *err, size_t errlen) {
    json_error_t je;
    json_t *j = json_loadb(from, (size_t)(to - from), JSON_REJECT_DUPLICATES, &je);
    if (!j)
        snprintf(err, errlen, "ExtenderArgs: %s: %s", what, je.text);
    return j;
}

int ex_args_parse(const char *body, size_t len, size_t max_names, struct ex_args *a, char *err, size_t errlen) {
    memset(a, 0, sizeof(*a));
    a->buf = malloc(len + 1);
    if (!a->buf)
        return snprintf(err, errlen, "out of memory"), -ENOMEM;
    memcpy(a->buf, body, len);
    a->buf[len] = '\0';
    struct scan s = { a->buf, a->buf + len, 0 };
    ws(&s);
    if (s.p >= s.end || *s.p != '{') {
        bool valid = scan_value(&s);
        ws(&s);
        if (valid && s.p == s.end)
            return args_fail(a, -EBADMSG, err, errlen, "ExtenderArgs: not a JSON object");
        return args_fail(a, -EBADMSG, err, errlen, "ExtenderArgs: at byte %zu: not JSON", (size_t)(s.p - a->buf));
    }
    s.p++;
    s.depth = 1;
    const char *pod_from = NULL, *pod_to = NULL, *nodes_from = NULL, *nodes_to = NULL;
    bool have_names = false, first = true;
    for (;;) {
        ws(&s);
        if (first && s.p < s.end && *s.p == '}') {
            s.p++;
            break;
        }
        first = false;
        bool esc;
        char *k = scan_string(&s, &esc);
        if (!k)
            return args_fail(a, -EBADMSG, err, errlen, "ExtenderArgs: at byte %zu: expected a key",
                             (size_t)(s.p - a->buf));
        size_t kn = (size_t)(s.p - 1 - k);
        ws(&s);
        if (s.p >= s.end || *s.p++ != ':')
            return args_fail(a, -EBADMSG, err, errlen, "ExtenderArgs: at byte %zu: expected ':'",
                             (size_t)(s.p - a->buf));
        ws(&s);
        char *v = s.p;
        bool is_pod = !esc && kn == 3 && !strncasecmp(k, "Pod", 3);
        bool is_names = !esc && kn == 9 && !strncasecmp(k, "NodeNames", 9);
        bool is_nodes = !esc && kn == 5 && !strncasecmp(k, "Nodes", 5);
        if ((is_pod && pod_from) || (is_names && have_names) || (is_nodes && nodes_from))
            return args_fail(a, -EBADMSG, err, errlen, "ExtenderArgs: at byte %zu: duplicate key",
                             (size_t)(k - a->buf));
        size_t values = s.values;
        if (is_names && !(s.end - v >= 4 && !memcmp(v, "null", 4))) {
            int r = scan_names(&s, a, max_names, err, errlen);
            if (r < 0) {
                ex_args_free(a);
                return r;
            }
            have_names = true;
        } else if (!scan_value(&s)) {
            return args_fail(a, -EBADMSG, err, errlen, "ExtenderArgs: at byte %zu: not JSON", (size_t)(s.p - a->buf));
        }
        if (is_pod && (size_t)(s.p - v) > EX_POD_BYTES_MAX)
            return args_fail(a, -E2BIG, err, errlen, "ExtenderArgs: Pod: %zu bytes, more than %d", (size_t)(s.p - v),
                             EX_POD_BYTES_MAX);
        if (is_pod && s.values - values > EX_POD_VALUES_MAX)
            return args_fail(a, -E2BIG, err, errlen, "ExtenderArgs: Pod: more than %d JSON values", EX_POD_VALUES_MAX);
        if (is_pod)
            pod_from = v, pod_to = s.p;
        if (is_nodes)
            nodes_from = v, nodes_to = s.p;
        ws(&s);
        if (s.p >= s.end)
            return args_fail(a, -EBADMSG, err, errlen, "ExtenderArgs: at byte %zu: the object is not closed",
                             (size_t)(s.p - a->buf));
        char c = *s.p++;
        if (c == '}')
            break;
        if (c != ',')
            return args_fail(a, -EBADMSG, err, errlen, "ExtenderArgs: at byte %zu: expected ',' or '}'",
                             (size_t)(s.p - 1 - a->buf));
    }
    ws(&s);
    if (s.p != s.end)
        return args_fail(a, -EBADMSG, err, errlen, "ExtenderArgs: at byte %zu: text after the object",
                         (size_t)(s.p - a->buf));
    if (!pod_from || *pod_from != '{')
        return args_fail(a, -EBADMSG, err, errlen, "ExtenderArgs: no Pod");
    if (!have_names && !(nodes_from && *nodes_from == '{'))
        return args_fail(a, -EBADMSG, err, errlen, "ExtenderArgs: neither NodeNames nor Nodes.items");
    json_t *pod = parse_extent(pod_from, pod_to, "Pod", err, errlen);
    int r = pod ? ex_pod_from_json(pod, &a->pod, err, errlen) : -EBADMSG;
    json_decref(pod);
    if (r == 0 && !have_names) { /* the names of Nodes, scanned again (in place, as NodeNames') */
        struct scan ns = { (char *)nodes_from, (char *)nodes_to, 1, 0 };
        r = scan_nodes(&ns, a, max_names, err, errlen);
    }
    if (r < 0) {
        ex_args_free(a);
        return r;
    }
    if (!a->names && !(a->names = calloc(1, sizeof(*a->names)))) {
        ex_args_free(a);
        return snprintf(err, errlen, "out of memory"), -ENOMEM;
    }
    return 0;
}

void ex_args_free(struct ex_args *a) {
    free(a->names);
    free(a->buf);
    memset(a, 0, sizeof(*a));
}

static char *dump(json_t *j, size_t *len) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    *len = s ? strlen(s) : 0;
    return s;
}

/* A growing text, for the answers that list every node: written by hand, as json_pack per node
 * costs more than the decision (docs/benchmarks.md). */
struct out {
    char *s;
    size_t len, cap;
    bool failed;
};

static void put(struct out *o, const char *p, size_t n) {
    if (o->failed)
        return;
    if (o->len + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 4096;
        while (o->len + n + 1 > cap)
            cap *= 2;
        char *ns = realloc(o->s, cap);
        if (!ns) {
            o->failed = true;
            return;
        }
        o->s = ns;
        o->cap = cap;
    }
    memcpy(o->s + o->len, p, n);
    o->len += n;
    o->s[o->len] = '\0';
}

static void puts_(struct out *o, const char *p) {
    put(o, p, strlen(p));
}

/* a JSON string (RFC 8259 escapes; bytes >= 0x80 as they are: the names came as valid JSON) */
static void put_str(struct out *o, const char *p) {
    put(o, "\"", 1);
    const char *run = p;
    for (; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        put(o, run, (size_t)(p - run));
        char esc[8];
        if (c == '"' || c == '\\')
            snprintf(esc, sizeof(esc), "\\%c", c);
        else
            snprintf(esc, sizeof(esc), "\\u%04x", c);
        puts_(o, esc);
        run = p + 1;
    }
    put(o, run, (size_t)(p - run));
    put(o, "\"", 1);
}

static char *finish(struct out *o, size_t *len) {
    if (o->failed) {
        free(o->s);
        *len = 0;
        return NULL;
    }
    *len = o->len;
    return o->s;
}

/* "KEY":{"node":"why",...} of the nodes with verdict v */
static void put_failed(struct out *o, const char *key, enum ex_verdict v, const char *const *names,
                       const enum ex_verdict *verdicts, char (*reasons)[EX_REASON_MAX], size_t n) {
    put_str(o, key);
    puts_(o, ":{");
    bool first = true;
    for (size_t k = 0; k < n; k++)
        if (verdicts[k] == v) {
            if (!first)
                puts_(o, ",");
            first = false;
            put_str(o, names[k]);
            puts_(o, ":");
            put_str(o, reasons[k]);
        }
    puts_(o, "}");
}

char *ex_filter_render(const char *const *names, const enum ex_verdict *verdicts, char (*reasons)[EX_REASON_MAX],
                       size_t n, size_t *len) {
    struct out o = { 0 };
    puts_(&o, "{\"NodeNames\":[");
    bool first = true;
    for (size_t k = 0; k < n; k++)
        if (verdicts[k] == EX_FIT) {
            if (!first)
                puts_(&o, ",");
            first = false;
            put_str(&o, names[k]);
        }
    puts_(&o, "],");
    put_failed(&o, "FailedNodes", EX_FAIL, names, verdicts, reasons, n);
    puts_(&o, ",");
    put_failed(&o, "FailedAndUnresolvableNodes", EX_UNRESOLVABLE, names, verdicts, reasons, n);
    puts_(&o, ",\"Error\":\"\"}");
    return finish(&o, len);
}

char *ex_filter_error_render(const char *error, size_t *len) {
    return dump(
        json_pack("{s:n, s:{}, s:{}, s:s}", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error", error),
        len);
}

char *ex_priorities_render(const char *const *names, const int64_t *scores, size_t n, size_t *len) {
    struct out o = { 0 };
    puts_(&o, "[");
    for (size_t k = 0; k < n; k++) {
        char num[32], *e = num + sizeof(num), *q = e;
        unsigned long long v = scores[k] < 0 ? 0 : (unsigned long long)scores[k]; /* 0..10 */
        *--q = '}';
        do
            *--q = (char)('0' + v % 10);
        while (v /= 10);
        puts_(&o, k ? ",{\"Host\":" : "{\"Host\":");
        put_str(&o, names[k]);
        puts_(&o, ",\"Score\":");
        put(&o, q, (size_t)(e - q));
    }
    puts_(&o, "]");
    return finish(&o, len);
}

int ex_bind_args_parse(const char *body, size_t len, struct ex_bind_args *b, char *err, size_t errlen) {
    memset(b, 0, sizeof(*b));
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(root)) {
        snprintf(err, errlen,
                 root ? "ExtenderBindingArgs: not a JSON object" : "ExtenderBindingArgs: line %d column %d: %s",
                 je.line, je.column, je.text);
        json_decref(root);
        return -EBADMSG;
    }
    static const char *const keys[] = { "PodName", "PodNamespace", "PodUID", "Node" };
    char *dst[] = { b->name, b->ns, b->uid, b->node };
    size_t sz[] = { sizeof(b->name), sizeof(b->ns), sizeof(b->uid), sizeof(b->node) };
    for (size_t i = 0; i < 4; i++) {
        const char *s = json_string_value(get_ci(root, keys[i]));
        if (!s || (i != 2 && !s[0]) || strlen(s) >= sz[i]) {
            snprintf(err, errlen, "ExtenderBindingArgs: %s: missing or too long", keys[i]);
            json_decref(root);
            return -EBADMSG;
        }
        snprintf(dst[i], sz[i], "%s", s);
    }
    json_decref(root);
    return 0;
}

char *ex_bind_result_render(const char *error, size_t *len) {
    return dump(json_pack("{s:s}", "Error", error ? error : ""), len);
}
