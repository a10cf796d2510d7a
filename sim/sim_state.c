/* sim_state.c: initial state, JSON (de)serialisation and UUIDs of the simulated node.
 * The state file is input from outside (anyone can edit it), so loading validates every field. */
#include "sim_state.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "util/util.h"

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static uint64_t fnv1a(const char *s, uint64_t h) {
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001B3ULL;
    }
    return h;
}

static void format_uuid(const char *prefix, uint64_t a, uint64_t b, char *buf, size_t len) {
    snprintf(buf, len, "%s%08" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%012" PRIx64, prefix,
             a >> 32, (a >> 16) & 0xffff, a & 0xffff, b >> 48, (uint64_t)(b & 0xffffffffffffULL));
}

void sim_gpu_uuid(const struct gs_model *m, unsigned index, char *buf, size_t len) {
    uint64_t x = fnv1a(m->key, 0xCBF29CE484222325ULL) ^ ((uint64_t)index * 0x9E3779B97F4A7C15ULL);
    uint64_t a = splitmix64(&x), b = splitmix64(&x);
    format_uuid("GPU-", a, b, buf, len);
}

void sim_mig_uuid(unsigned long long seed, unsigned long long counter, char *buf, size_t len) {
    uint64_t x = seed ^ (counter * 0xD1B54A32D192ED03ULL);
    uint64_t a = splitmix64(&x), b = splitmix64(&x);
    format_uuid("MIG-", a, b, buf, len);
}

void sim_state_fingerprint(const struct gs_nodedesc *nd, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = '\0';
    for (unsigned i = 0; i < nd->n_gpus && n < len; i++) {
        int w = snprintf(buf + n, len - n, "%s%s:%s", i ? "," : "", nd->gpus[i].model->key,
                         nd->gpus[i].mig_enabled ? "mig" : "nomig");
        if (w < 0)
            break;
        n += (size_t)w;
    }
    if (n < len)
        snprintf(buf + n, len - n, ";driver=%s;cuda=%d.%d", nd->driver_version, nd->cuda_major, nd->cuda_minor);
}

/* Zeroes the state's header only: each GPU entry is zeroed when it is filled. The state is sized
 * for the largest node, and touching all of it would make every process that loads the simulated
 * NVML resident in ~1.3 MiB it never uses; entries at and past n_gpus are never read. */
static void reset_header(struct sim_state *s) {
    memset(s, 0, offsetof(struct sim_state, gpus));
}

unsigned long long sim_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000ULL + (unsigned long long)ts.tv_nsec / 1000000ULL;
}

static json_t *health_to_json(const struct sim_health *h) {
    json_t *retired = json_array();
    for (unsigned i = 0; i < h->n_retired; i++)
        json_array_append_new(retired, json_pack("{s:I,s:I,s:i}", "address", (json_int_t)h->retired[i].address,
                                                 "timestamp", (json_int_t)h->retired[i].timestamp, "cause",
                                                 (int)h->retired[i].cause));
    return json_pack("{s:[[I,I],[I,I]],s:o,s:b,s:I,s:I}", "ecc", (json_int_t)h->ecc[0][0], (json_int_t)h->ecc[0][1],
                     (json_int_t)h->ecc[1][0], (json_int_t)h->ecc[1][1], "retired", retired, "retire_pending",
                     h->retire_pending, "energy_mj", (json_int_t)h->energy_mj, "energy_ms",
                     (json_int_t)h->energy_ms);
}

/* A GPU's "health" member; absent in state files of older versions: no errors, energy from now. */
static int health_from_json(json_t *jh, struct sim_health *h) {
    memset(h, 0, sizeof(*h));
    h->energy_ms = sim_now_ms();
    if (!jh)
        return 0;
    json_t *ecc = json_object_get(jh, "ecc"), *retired = json_object_get(jh, "retired"), *jr;
    json_t *mj = json_object_get(jh, "energy_mj"), *ms = json_object_get(jh, "energy_ms");
    if (!json_is_array(ecc) || json_array_size(ecc) != 2 || !json_is_array(retired) ||
        json_array_size(retired) > SIM_MAX_RETIRED || !json_is_boolean(json_object_get(jh, "retire_pending")) ||
        !json_is_integer(mj) || !json_is_integer(ms) || json_integer_value(mj) < 0 || json_integer_value(ms) < 0)
        return -EINVAL;
    for (size_t t = 0; t < 2; t++) {
        json_t *row = json_array_get(ecc, t);
        for (size_t c = 0; c < 2; c++) {
            json_t *v = json_array_get(row, c);
            if (!json_is_array(row) || json_array_size(row) != 2 || !json_is_integer(v) || json_integer_value(v) < 0)
                return -EINVAL;
            h->ecc[t][c] = (unsigned long long)json_integer_value(v);
        }
    }
    size_t i;
    json_array_foreach(retired, i, jr) {
        json_t *a = json_object_get(jr, "address"), *ts = json_object_get(jr, "timestamp");
        json_t *c = json_object_get(jr, "cause");
        if (!json_is_integer(a) || !json_is_integer(ts) || !json_is_integer(c) || json_integer_value(a) < 0 ||
            json_integer_value(ts) < 0 || json_integer_value(c) < 0 || json_integer_value(c) > 1)
            return -EINVAL;
        h->retired[h->n_retired++] = (struct sim_retired){ (unsigned long long)json_integer_value(a),
                                                           (unsigned long long)json_integer_value(ts),
                                                           (unsigned)json_integer_value(c) };
    }
    h->retire_pending = json_is_true(json_object_get(jh, "retire_pending"));
    h->energy_mj = (unsigned long long)json_integer_value(mj);
    h->energy_ms = (unsigned long long)json_integer_value(ms);
    return 0;
}

void sim_state_init(struct sim_state *s, const struct gs_nodedesc *nd, unsigned long long seed) {
    reset_header(s);
    sim_state_fingerprint(nd, s->fingerprint, sizeof(s->fingerprint));
    s->seed = seed;
    gs_strlcpy(s->driver_version, nd->driver_version, sizeof(s->driver_version));
    s->cuda_major = nd->cuda_major;
    s->cuda_minor = nd->cuda_minor;
    s->n_gpus = nd->n_gpus;
    for (unsigned i = 0; i < nd->n_gpus; i++) {
        memset(&s->gpus[i], 0, sizeof(s->gpus[i]));
        s->gpus[i].model = nd->gpus[i].model;
        s->gpus[i].mig_current = s->gpus[i].mig_pending = nd->gpus[i].mig_enabled ? 1 : 0;
        s->gpus[i].health.energy_ms = sim_now_ms();
    }
}

char *sim_state_to_json(const struct sim_state *s) {
    json_t *root = json_object();
    json_object_set_new(root, "version", json_integer(1));
    json_object_set_new(root, "fingerprint", json_string(s->fingerprint));
    json_object_set_new(root, "seed", json_integer((json_int_t)(s->seed & 0x7fffffffffffffffULL)));
    json_object_set_new(root, "uuid_counter", json_integer((json_int_t)s->uuid_counter));
    json_object_set_new(root, "event_seq", json_integer((json_int_t)s->event_seq));
    json_object_set_new(root, "driver_version", json_string(s->driver_version));
    json_object_set_new(root, "cuda_major", json_integer(s->cuda_major));
    json_object_set_new(root, "cuda_minor", json_integer(s->cuda_minor));
    json_t *gpus = json_array();
    for (unsigned i = 0; i < s->n_gpus; i++) {
        const struct sim_gpu *g = &s->gpus[i];
        json_t *jg = json_object();
        json_object_set_new(jg, "model", json_string(g->model->key));
        json_object_set_new(jg, "mig_current", json_integer(g->mig_current));
        json_object_set_new(jg, "mig_pending", json_integer(g->mig_pending));
        json_object_set_new(jg, "compute_mode", json_integer(g->compute_mode));
        json_object_set_new(jg, "lost", json_boolean(g->lost));
        json_t *gis = json_array();
        for (unsigned id = 0; id < SIM_MAX_GI; id++) {
            const struct sim_gi *gi = &g->gis[id];
            if (!gi->used)
                continue;
            json_t *jgi = json_pack("{s:i,s:i,s:i,s:i}", "id", (int)id, "profile_id", (int)gi->profile_id, "start",
                                    (int)gi->start, "size", (int)gi->size);
            json_t *cis = json_array();
            for (unsigned c = 0; c < SIM_MAX_CI; c++) {
                const struct sim_ci *ci = &gi->cis[c];
                if (ci->used)
                    json_array_append_new(cis, json_pack("{s:i,s:i,s:i,s:i,s:s}", "id", (int)c, "profile",
                                                         (int)ci->profile, "start", (int)ci->start, "size",
                                                         (int)ci->size, "uuid", ci->uuid));
            }
            json_object_set_new(jgi, "cis", cis);
            json_array_append_new(gis, jgi);
        }
        json_object_set_new(jg, "gis", gis);
        json_t *procs = json_array();
        for (unsigned p = 0; p < g->n_procs; p++) {
            const struct sim_proc *pr = &g->procs[p];
            json_t *jp = json_pack("{s:I,s:I,s:i,s:i,s:s,s:I,s:I}", "pid", (json_int_t)pr->pid, "mem",
                                   (json_int_t)pr->mem, "gi", pr->gi, "ci", pr->ci, "name", pr->name, "since",
                                   (json_int_t)pr->since_us, "util_since", (json_int_t)pr->util_since_us);
            json_t *ju = json_array();
            for (unsigned k = 0; k < pr->n_util; k++)
                json_array_append_new(ju, json_integer(pr->util[k]));
            json_object_set_new(jp, "util", ju);
            json_array_append_new(procs, jp);
        }
        json_object_set_new(jg, "procs", procs);
        json_t *events = json_array();
        for (unsigned e = 0; e < g->n_events; e++)
            json_array_append_new(events, json_pack("{s:I,s:I,s:I}", "seq", (json_int_t)g->events[e].seq, "xid",
                                                    (json_int_t)g->events[e].xid, "gi",
                                                    (json_int_t)g->events[e].gi));
        json_object_set_new(jg, "events", events);
        json_object_set_new(jg, "health", health_to_json(&g->health));
        json_array_append_new(gpus, jg);
    }
    json_object_set_new(root, "gpus", gpus);
    char *text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(root);
    return text;
}

/* Reads an integer member in [min, max]; on failure formats an error naming the field. */
static int get_int(json_t *obj, const char *key, long long min, long long max, long long *out, const char *path,
                   const char *ctx, char *err, size_t errlen) {
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v)) {
        snprintf(err, errlen, "%s: %s.%s: missing or not an integer", path, ctx, key);
        return -EINVAL;
    }
    long long x = json_integer_value(v);
    if (x < min || x > max) {
        snprintf(err, errlen, "%s: %s.%s: %lld out of range %lld..%lld", path, ctx, key, x, min, max);
        return -ERANGE;
    }
    *out = x;
    return 0;
}

#define GET(obj, key, min, max, dst)                                                                          \
    do {                                                                                                      \
        long long v_;                                                                                         \
        int r_ = get_int(obj, key, min, max, &v_, path, ctx, err, errlen);                                    \
        if (r_ < 0)                                                                                           \
            goto fail;                                                                                        \
        (dst) = v_;                                                                                           \
    } while (0)

static int parse_gpu(json_t *jg, struct sim_gpu *g, unsigned idx, const char *path, char *err, size_t errlen) {
    char ctx[64];
    snprintf(ctx, sizeof(ctx), "gpus[%u]", idx);
    const char *model = json_string_value(json_object_get(jg, "model"));
    g->model = gs_catalog_find(model);
    if (!g->model) {
        snprintf(err, errlen, "%s: %s.model: unknown model", path, ctx);
        return -EINVAL;
    }
    GET(jg, "mig_current", 0, 1, g->mig_current);
    GET(jg, "mig_pending", 0, 1, g->mig_pending);
    if (json_object_get(jg, "compute_mode")) /* absent in state files of older versions: default */
        GET(jg, "compute_mode", 0, 3, g->compute_mode);
    g->lost = json_is_true(json_object_get(jg, "lost"));
    json_t *gis = json_object_get(jg, "gis");
    size_t i;
    json_t *jgi;
    if (!json_is_array(gis))
        goto bad;
    json_array_foreach(gis, i, jgi) {
        unsigned id;
        GET(jgi, "id", 0, SIM_MAX_GI - 1, id);
        struct sim_gi *gi = &g->gis[id];
        if (gi->used)
            goto bad;
        gi->used = true;
        GET(jgi, "profile_id", 0, 255, gi->profile_id);
        GET(jgi, "start", 0, 7, gi->start);
        GET(jgi, "size", 1, 8, gi->size);
        const struct gs_profile_spec *p = gs_model_profile_by_id(g->model, gi->profile_id);
        if (!p || p->mem_slices != gi->size || gi->start + gi->size > g->model->mig_mem_slices)
            goto bad;
        json_t *cis = json_object_get(jgi, "cis"), *jci;
        size_t k;
        if (!json_is_array(cis))
            goto bad;
        json_array_foreach(cis, k, jci) {
            unsigned cid;
            GET(jci, "id", 0, SIM_MAX_CI - 1, cid);
            struct sim_ci *ci = &gi->cis[cid];
            if (ci->used)
                goto bad;
            ci->used = true;
            GET(jci, "profile", 0, 8, ci->profile);
            GET(jci, "start", 0, 7, ci->start);
            GET(jci, "size", 1, 8, ci->size);
            const char *u = json_string_value(json_object_get(jci, "uuid"));
            if (!u || gs_strlcpy(ci->uuid, u, sizeof(ci->uuid)) < 0 || strncmp(u, "MIG-", 4) != 0)
                goto bad;
        }
    }
    json_t *procs = json_object_get(jg, "procs"), *jp;
    if (!json_is_array(procs) || json_array_size(procs) > SIM_MAX_PROCS)
        goto bad;
    json_array_foreach(procs, i, jp) {
        struct sim_proc *pr = &g->procs[g->n_procs++];
        GET(jp, "pid", 1, 0x7fffffff, pr->pid);
        GET(jp, "mem", 0, (long long)1 << 50, pr->mem);
        GET(jp, "gi", -1, SIM_MAX_GI - 1, pr->gi);
        GET(jp, "ci", -1, SIM_MAX_CI - 1, pr->ci);
        const char *nm = json_string_value(json_object_get(jp, "name"));
        gs_strlcpy(pr->name, nm ? nm : "", sizeof(pr->name));
        if (json_object_get(jp, "since")) /* absent in state files of older versions: no schedule */
            GET(jp, "since", 0, LLONG_MAX, pr->since_us);
        if (json_object_get(jp, "util_since"))
            GET(jp, "util_since", 0, LLONG_MAX, pr->util_since_us);
        json_t *ju = json_object_get(jp, "util"), *jv;
        size_t k;
        if (ju && (!json_is_array(ju) || json_array_size(ju) > SIM_UTIL_STEPS))
            goto bad;
        json_array_foreach(ju, k, jv) {
            if (!json_is_integer(jv) || json_integer_value(jv) < 0 || json_integer_value(jv) > 100)
                goto bad;
            pr->util[pr->n_util++] = (unsigned char)json_integer_value(jv);
        }
    }
    json_t *events = json_object_get(jg, "events"), *je;
    if (!json_is_array(events) || json_array_size(events) > SIM_EVENT_RING)
        goto bad;
    json_array_foreach(events, i, je) {
        struct sim_event *ev = &g->events[g->n_events++];
        GET(je, "seq", 0, LLONG_MAX, ev->seq);
        GET(je, "xid", 0, LLONG_MAX, ev->xid);
        GET(je, "gi", 0, 0xFFFFFFFFLL, ev->gi);
    }
    if (health_from_json(json_object_get(jg, "health"), &g->health) < 0) {
        snprintf(err, errlen, "%s: %s.health: malformed ECC counters, retired pages or energy", path, ctx);
        return -EINVAL;
    }
    return 0;
bad:
    snprintf(err, errlen, "%s: %s: malformed MIG instance, process or event entry", path, ctx);
fail:
    return -EINVAL;
}

int sim_state_from_json(const char *path, const char *text, struct sim_state *s, char *err, size_t errlen) {
    json_error_t jerr;
    json_t *root = json_loads(text, 0, &jerr);
    if (!root) {
        snprintf(err, errlen, "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
        return -EINVAL;
    }
    reset_header(s);
    const char *ctx = "state";
    int r = -EINVAL;
    long long version;
    GET(root, "version", 1, 1, version);
    (void)version;
    const char *fp = json_string_value(json_object_get(root, "fingerprint"));
    const char *dv = json_string_value(json_object_get(root, "driver_version"));
    if (!fp || !dv) {
        snprintf(err, errlen, "%s: fingerprint or driver_version missing", path);
        goto fail;
    }
    gs_strlcpy(s->fingerprint, fp, sizeof(s->fingerprint));
    gs_strlcpy(s->driver_version, dv, sizeof(s->driver_version));
    GET(root, "seed", 0, LLONG_MAX, s->seed);
    GET(root, "uuid_counter", 0, LLONG_MAX, s->uuid_counter);
    GET(root, "event_seq", 0, LLONG_MAX, s->event_seq);
    GET(root, "cuda_major", 0, 99, s->cuda_major);
    GET(root, "cuda_minor", 0, 99, s->cuda_minor);
    json_t *gpus = json_object_get(root, "gpus"), *jg;
    if (!json_is_array(gpus) || json_array_size(gpus) > GS_NODE_MAX_GPUS) {
        snprintf(err, errlen, "%s: gpus: missing or more than %d", path, GS_NODE_MAX_GPUS);
        goto fail;
    }
    size_t i;
    json_array_foreach(gpus, i, jg) {
        memset(&s->gpus[i], 0, sizeof(s->gpus[i]));
        if (parse_gpu(jg, &s->gpus[i], (unsigned)i, path, err, errlen) < 0)
            goto fail;
        s->n_gpus++;
    }
    r = 0;
fail:
    json_decref(root);
    return r;
}
