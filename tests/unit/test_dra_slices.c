/* test_dra_slices.c: the DRA driver's ResourceSlices (src/dra/slices.c) on hand-made inventories:
 * the slices' spec and pool, every attribute of a whole GPU and its types, the consumable capacity
 * of time-sliced and MPS GPUs, MIG on demand (one counter set per GPU in a slice of its own, each
 * placement consuming exactly its slices, the full placement all of them, placements over existing
 * instances left out), existing MIG devices as ordinary devices, the split at 128 devices (64 with
 * counters) and 8 counter sets, names Kubernetes accepts, and the device-name parser. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>

#include "catalog/catalog.h"
#include "dra/slices.h"
#include "inventory_fixture.h"
#include "util/util.h"

#define NODE "gs-node-1"
#define DRIVER GS_DRA_DRIVER_DEFAULT

/* A GPU of a catalogue model, its MIG profiles as NVML lists them in MIG mode. */
static struct gs_gpu *cat_gpu(struct gs_inventory *inv, const char *key, bool mig) {
    const struct gs_model *m = gs_catalog_find(key);
    assert_non_null(m);
    struct gs_gpu *g = fx_gpu(inv, m->nvml_name, m->arch, m->cc_major, m->cc_minor, 0);
    g->mem_total = m->mem_mib << 20;
    snprintf(g->bus_id, sizeof(g->bus_id), "00000000:%02X:00.0", 0x18 + g->index);
    g->mig_capable = m->mig_mem_slices > 0;
    if (!mig)
        return g;
    g->mig_current = g->mig_pending = 1;
    g->mig_mem_slices = m->mig_mem_slices;
    for (size_t k = 0; k < m->n_profiles && k < GS_MAX_PROFILES; k++) {
        const struct gs_profile_spec *s = &m->profiles[k];
        struct gs_gi_profile *p = &g->profiles[g->n_profiles++];
        p->id = s->id;
        p->nvml_index = s->nvml_profile;
        snprintf(p->name, sizeof(p->name), "%s", s->name);
        p->slices = s->slices;
        p->max_instances = p->remaining = s->max_instances;
        p->mem_mib = s->mem_mib;
        p->sm = s->sm;
        p->placement_size = s->mem_slices;
        p->n_starts = s->n_starts;
        memcpy(p->starts, s->starts, sizeof(p->starts));
    }
    return g;
}

/* An existing GPU instance of profile `id` at `start` with one full compute instance. */
static void cat_instance(struct gs_gpu *g, unsigned id, unsigned start) {
    const struct gs_gi_profile *p = gs_gpu_profile_by_id(g, id);
    assert_non_null(p);
    unsigned gi = g->n_gis + 1;
    g->gis[g->n_gis++] = (struct gs_gpu_instance){ gi, id, start, p->placement_size, 1 };
    struct gs_mig_device *m = fx_mig(g, p->name, gi, 0, p->slices, p->mem_mib, p->sm);
    m->gi_profile_id = id;
    m->start = start;
    m->size = p->placement_size;
}

static json_t *build(const struct gs_inventory *inv, const char *policy_yaml, long long gen) {
    struct gs_policy *p = fx_policy(policy_yaml);
    json_t *out = NULL;
    char err[256];
    int r = gs_dra_slices_build(inv, p, NODE, DRIVER, gen, &out, err, sizeof(err));
    free(p);
    if (r < 0)
        fail_msg("gs_dra_slices_build: %d %s", r, err);
    assert_true(json_is_array(out));
    return out;
}

/* Every device of every slice, in order. */
static json_t *all_devices(json_t *slices) {
    json_t *all = json_array(), *s;
    size_t i, j;
    json_array_foreach(slices, i, s) {
        json_t *d, *devs = json_object_get(json_object_get(s, "spec"), "devices");
        json_array_foreach(devs, j, d) json_array_append(all, d);
    }
    return all;
}

static json_t *device(json_t *slices, const char *name) {
    json_t *all = all_devices(slices), *d, *found = NULL;
    size_t i;
    json_array_foreach(all, i, d) if (!strcmp(json_string_value(json_object_get(d, "name")), name)) found = d;
    json_decref(all); /* found is still held by slices */
    return found;
}

static json_t *attr(json_t *dev, const char *name, const char *kind) {
    json_t *a = json_object_get(json_object_get(dev, "attributes"), name);
    if (!a)
        fail_msg("device %s: no attribute %s", json_string_value(json_object_get(dev, "name")), name);
    assert_int_equal(json_object_size(a), 1);
    json_t *v = json_object_get(a, kind);
    if (!v)
        fail_msg("attribute %s: not of type %s", name, kind);
    return v;
}

static const char *sattr(json_t *dev, const char *name) {
    return json_string_value(attr(dev, name, "string"));
}

static const char *cap(json_t *dev, const char *name) {
    json_t *c = json_object_get(json_object_get(dev, "capacity"), name);
    if (!c)
        fail_msg("no capacity %s", name);
    return json_string_value(json_object_get(c, "value"));
}

static const char *policy_of(json_t *dev, const char *capname, const char *path) {
    json_t *p = json_object_get(json_object_get(json_object_get(dev, "capacity"), capname), "requestPolicy");
    assert_non_null(p);
    if (!strcmp(path, "default"))
        return json_string_value(json_object_get(p, "default"));
    return json_string_value(json_object_get(json_object_get(p, "validRange"), path));
}

static unsigned long long counter(json_t *counters, const char *name) {
    json_t *c = json_object_get(counters, name);
    if (!c)
        return 0;
    return strtoull(json_string_value(json_object_get(c, "value")), NULL, 10);
}

/* The counter sets of all slices, by name. */
static json_t *counter_sets(json_t *slices) {
    json_t *sets = json_object(), *s, *cs;
    size_t i, j;
    json_array_foreach(slices, i, s) {
        json_array_foreach(json_object_get(json_object_get(s, "spec"), "sharedCounters"), j, cs) {
            const char *n = json_string_value(json_object_get(cs, "name"));
            assert_null(json_object_get(sets, n)); /* unique in the pool */
            json_object_set(sets, n, json_object_get(cs, "counters"));
        }
    }
    return sets;
}

/* ------------------------------------------------------------------ tests */

static void test_whole_gpu_attributes(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("570.172.08", 12080);
    struct gs_gpu *g = cat_gpu(inv, "H100-SXM5-80GB", false);
    g->numa_node = 1;
    json_t *s = build(inv, "version: v1\n", 7);
    assert_int_equal(json_array_size(s), 1);
    json_t *sl = json_array_get(s, 0), *spec = json_object_get(sl, "spec");
    assert_string_equal(json_string_value(json_object_get(sl, "apiVersion")), "resource.k8s.io/v1");
    assert_string_equal(json_string_value(json_object_get(sl, "kind")), "ResourceSlice");
    assert_string_equal(json_string_value(json_object_get(json_object_get(sl, "metadata"), "name")),
                        NODE "-" DRIVER "-0");
    assert_string_equal(json_string_value(json_object_get(spec, "driver")), DRIVER);
    assert_string_equal(json_string_value(json_object_get(spec, "nodeName")), NODE);
    json_t *pool = json_object_get(spec, "pool");
    assert_string_equal(json_string_value(json_object_get(pool, "name")), NODE);
    assert_int_equal(json_integer_value(json_object_get(pool, "generation")), 7);
    assert_int_equal(json_integer_value(json_object_get(pool, "resourceSliceCount")), 1);
    assert_null(json_object_get(spec, "sharedCounters"));

    json_t *d = device(s, "gpu-0");
    assert_non_null(d);
    assert_string_equal(sattr(d, "type"), "gpu");
    assert_string_equal(sattr(d, "sharing"), "exclusive");
    assert_string_equal(sattr(d, "uuid"), g->uuid);
    assert_int_equal(json_integer_value(attr(d, "index", "int")), 0);
    assert_int_equal(json_integer_value(attr(d, "minor", "int")), 0);
    assert_true(json_is_true(attr(d, "migCapable", "bool")));
    assert_string_equal(sattr(d, "productName"), "NVIDIA H100 80GB HBM3");
    assert_string_equal(sattr(d, "architecture"), "Hopper");
    assert_string_equal(json_string_value(attr(d, "cudaComputeCapability", "version")), "9.0.0");
    assert_string_equal(json_string_value(attr(d, "driverVersion", "version")), "570.172.8"); /* no leading 0 */
    assert_string_equal(json_string_value(attr(d, "cudaDriverVersion", "version")), "12.8.0");
    assert_string_equal(sattr(d, "resource.kubernetes.io/pciBusID"), "0000:18:00.0");
    assert_int_equal(json_integer_value(attr(d, "numaNode", "int")), 1);
    assert_int_equal(json_object_size(json_object_get(d, "attributes")), 13);
    assert_string_equal(cap(d, "memory"), "81559Mi");
    assert_int_equal(json_object_size(json_object_get(d, "capacity")), 1);
    assert_null(json_object_get(d, "allowMultipleAllocations"));
    assert_null(json_object_get(d, "consumesCounters"));
    json_decref(s);

    /* a GPU without a NUMA node has no numaNode; "580.65" is 580.65.0 */
    snprintf(inv->driver_version, sizeof(inv->driver_version), "580.65");
    g->numa_node = -1;
    s = build(inv, "version: v1\n", 1);
    d = device(s, "gpu-0");
    assert_null(json_object_get(json_object_get(d, "attributes"), "numaNode"));
    assert_string_equal(json_string_value(attr(d, "driverVersion", "version")), "580.65.0");
    json_decref(s);
    free(inv);
}

static void test_time_sliced_gpu(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("580.65.06", 13000);
    cat_gpu(inv, "H100-SXM5-80GB", false);
    cat_gpu(inv, "H100-SXM5-80GB", false);
    json_t *s = build(inv,
                      "version: v1\n"
                      "gpuslice:\n"
                      "  gpus:\n"
                      "    - index: \"0\"\n"
                      "      mode: time-slicing\n"
                      "      replicas: 4\n"
                      "      memoryPerReplica: 20GiB\n"
                      "    - index: \"1\"\n"
                      "      mode: time-slicing\n"
                      "      replicas: 3\n"
                      "      memoryPerReplica: auto\n",
                      1);
    json_t *d = device(s, "gpu-0");
    assert_true(json_is_true(json_object_get(d, "allowMultipleAllocations")));
    assert_string_equal(sattr(d, "sharing"), "time-slicing");
    assert_string_equal(cap(d, "memory"), "81559Mi");
    assert_string_equal(policy_of(d, "memory", "default"), "20Gi"); /* one replica's quota */
    assert_string_equal(policy_of(d, "memory", "min"), "1Gi");
    assert_string_equal(policy_of(d, "memory", "step"), "1Gi");
    assert_string_equal(policy_of(d, "memory", "max"), "79Gi"); /* 81559 MiB rounded down to a step */
    assert_string_equal(cap(d, "compute"), "100");
    assert_string_equal(policy_of(d, "compute", "default"), "25");
    assert_string_equal(policy_of(d, "compute", "min"), "1");
    assert_string_equal(policy_of(d, "compute", "max"), "100");
    assert_string_equal(policy_of(d, "compute", "step"), "1");
    assert_null(json_object_get(json_object_get(d, "capacity"), "clients"));
    /* auto: the memory / 3 (26.5 GiB) rounded down to a step; 100 / 3 percent */
    d = device(s, "gpu-1");
    assert_string_equal(policy_of(d, "memory", "default"), "26Gi");
    assert_string_equal(policy_of(d, "compute", "default"), "33");
    json_decref(s);
    free(inv);
}

/* A fractional GPU carries two resources (memory and compute units) of the same GPU: DRA publishes
 * it once, a shared device whose claims name their memory and compute. */
static void test_fractional_gpu_once(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("580.65.06", 13000);
    cat_gpu(inv, "H100-SXM5-80GB", false);
    json_t *s = build(inv,
                      "version: v1\n"
                      "gpuslice:\n"
                      "  gpus:\n"
                      "    - index: \"0\"\n"
                      "      mode: fractional\n",
                      1);
    json_t *all = all_devices(s), *v;
    size_t named = 0, i;
    json_array_foreach(all, i, v) named += !strcmp(json_string_value(json_object_get(v, "name")), "gpu-0");
    json_decref(all);
    assert_int_equal(named, 1);
    json_t *d = device(s, "gpu-0");
    assert_true(json_is_true(json_object_get(d, "allowMultipleAllocations")));
    assert_string_equal(cap(d, "memory"), "81559Mi");
    assert_string_equal(cap(d, "compute"), "100");
    assert_string_equal(policy_of(d, "memory", "default"), "1Gi"); /* one unit of gpuslice.io/gpu-memory */
    json_decref(s);
    free(inv);
}

static void test_mps_gpu(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("580.65.06", 13000);
    cat_gpu(inv, "L4", false);
    cat_gpu(inv, "L4", false);
    /* an MPS and a time-sliced GPU under one default resource name: the device plugin can serve
     * only one of them, DRA (no resource names) both */
    json_t *s = build(inv,
                      "version: v1\n"
                      "gpuslice:\n"
                      "  gpus:\n"
                      "    - index: \"0\"\n"
                      "      mode: mps\n"
                      "      replicas: 3\n"
                      "      computePerReplica: 30%\n"
                      "    - index: \"1\"\n"
                      "      mode: time-slicing\n"
                      "      replicas: 2\n",
                      1);
    assert_string_equal(sattr(device(s, "gpu-1"), "sharing"), "time-slicing");
    json_t *d = device(s, "gpu-0");
    assert_true(json_is_true(json_object_get(d, "allowMultipleAllocations")));
    assert_string_equal(sattr(d, "sharing"), "mps");
    assert_string_equal(sattr(d, "architecture"), "Ada Lovelace");
    assert_false(json_is_true(attr(d, "migCapable", "bool")));
    assert_string_equal(policy_of(d, "compute", "default"), "30");
    assert_string_equal(cap(d, "clients"), "48");
    assert_string_equal(policy_of(d, "clients", "default"), "1");
    assert_string_equal(policy_of(d, "clients", "min"), "1");
    assert_string_equal(policy_of(d, "clients", "max"), "1");
    json_decref(s);
    free(inv);
}

/* Checks the MIG placements of GPU g in slices against its counter set: each consumes exactly
 * its memory slices and compute slices, no counter it consumes exceeds the set; returns how many
 * placements there are. */
static unsigned check_placements(json_t *slices, const struct gs_gpu *g, bool *full_seen) {
    json_t *sets = counter_sets(slices), *all = all_devices(slices), *d;
    char setname[64];
    snprintf(setname, sizeof(setname), "gpu-%u-counter-set", g->index);
    json_t *set = json_object_get(sets, setname);
    unsigned n = 0;
    size_t i;
    json_array_foreach(all, i, d) {
        json_t *cc = json_object_get(d, "consumesCounters");
        struct gs_dra_device_ref ref;
        const char *name = json_string_value(json_object_get(d, "name"));
        if (!cc)
            continue;
        assert_int_equal(gs_dra_device_parse(name, &ref), 0);
        if (ref.gpu != g->index)
            continue;
        assert_non_null(set);
        assert_true(ref.mig);
        n++;
        assert_true(json_is_true(attr(d, "migOnDemand", "bool")));
        assert_int_equal(json_array_size(cc), 1);
        json_t *use = json_array_get(cc, 0), *c = json_object_get(use, "counters");
        assert_string_equal(json_string_value(json_object_get(use, "counterSet")), setname);
        const struct gs_gi_profile *p = gs_gpu_profile_by_id(g, ref.profile_id);
        assert_non_null(p);
        assert_string_equal(sattr(d, "profile"), p->name);
        assert_int_equal(json_integer_value(attr(d, "placementStart", "int")), ref.start);
        assert_int_equal(json_integer_value(attr(d, "placementSize", "int")), p->placement_size);
        assert_int_equal(counter(c, "compute-slices"), p->slices);
        unsigned mem = 0;
        const char *key;
        json_t *v;
        json_object_foreach(c, key, v) {
            assert_true(counter(c, key) <= counter(set, key)); /* every counter it consumes exists */
            assert_true(json_object_get(set, key) != NULL);
            unsigned s;
            if (sscanf(key, "memory-slice-%u", &s) == 1) {
                assert_true(s >= ref.start && s < ref.start + p->placement_size);
                mem++;
            }
        }
        assert_int_equal(mem, p->placement_size);
        char q[32];
        snprintf(q, sizeof(q), "%lluMi", p->mem_mib);
        assert_string_equal(cap(d, "memory"), q);
        /* the full placement consumes all of the set's slices */
        if (p->slices == counter(set, "compute-slices") && p->placement_size == g->mig_mem_slices) {
            json_object_foreach(set, key, v) if (strncmp(key, "profile-", 8) != 0)
                assert_int_equal(counter(c, key), counter(set, key));
            *full_seen = true;
        }
    }
    json_decref(all);
    json_decref(sets);
    return n;
}

static void test_mig_on_demand(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("580.65.06", 13000);
    struct gs_gpu *g = cat_gpu(inv, "H100-SXM5-80GB", true);
    json_t *s = build(inv, "version: v1\n", 3);
    /* the counter set in a slice of its own, then the devices */
    assert_int_equal(json_array_size(s), 2);
    json_t *spec0 = json_object_get(json_array_get(s, 0), "spec"), *spec1 = json_object_get(json_array_get(s, 1), "spec");
    assert_non_null(json_object_get(spec0, "sharedCounters"));
    assert_null(json_object_get(spec0, "devices"));
    assert_null(json_object_get(spec1, "sharedCounters"));
    for (int k = 0; k < 2; k++)
        assert_int_equal(json_integer_value(json_object_get(json_object_get(json_object_get(json_array_get(s, k),
                                                                                                "spec"), "pool"),
                                                            "resourceSliceCount")), 2);
    json_t *sets = counter_sets(s), *set = json_object_get(sets, "gpu-0-counter-set");
    assert_non_null(set);
    /* the GPU: 7 compute slices, 8 memory slices, one 1g.10gb+me at a time */
    assert_int_equal(counter(set, "compute-slices"), 7);
    for (unsigned k = 0; k < 8; k++) {
        char n[32];
        snprintf(n, sizeof(n), "memory-slice-%u", k);
        assert_int_equal(counter(set, n), 1);
    }
    assert_int_equal(counter(set, "profile-20"), 1);
    assert_int_equal(json_object_size(set), 10);
    json_decref(sets);
    /* every placement of every profile: 7 + 3 + 2 + 1 + 1 + 7 + 4 */
    unsigned want = 0;
    for (unsigned k = 0; k < g->n_profiles; k++)
        want += g->profiles[k].n_starts;
    assert_int_equal(want, 25);
    bool full = false;
    assert_int_equal(check_placements(s, g, &full), want);
    assert_true(full);
    json_t *d = device(s, "gpu-0-mig-3g40gb-9-4");
    assert_non_null(d);
    assert_string_equal(sattr(d, "type"), "mig");
    assert_string_equal(sattr(d, "parentUUID"), g->uuid);
    assert_string_equal(cap(d, "multiprocessors"), "60");
    assert_null(json_object_get(json_object_get(d, "attributes"), "uuid"));
    assert_non_null(device(s, "gpu-0-mig-1g10gb-me-20-6"));
    assert_non_null(device(s, "gpu-0-mig-7g80gb-0-0"));
    /* the profile counter makes the +me profile exclusive */
    json_t *cc = json_object_get(device(s, "gpu-0-mig-1g10gb-me-20-3"), "consumesCounters");
    assert_int_equal(counter(json_object_get(json_array_get(cc, 0), "counters"), "profile-20"), 1);
    /* seven 1g.10gb fill the compute slices exactly */
    unsigned sum = 0;
    for (unsigned k = 0; k < 7; k++) {
        char n[64];
        snprintf(n, sizeof(n), "gpu-0-mig-1g10gb-19-%u", k);
        cc = json_object_get(device(s, n), "consumesCounters");
        sum += (unsigned)counter(json_object_get(json_array_get(cc, 0), "counters"), "compute-slices");
    }
    assert_int_equal(sum, 7);
    json_decref(s);
    free(inv);
}

static void test_mig_existing_instances(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("580.65.06", 13000);
    struct gs_gpu *g = cat_gpu(inv, "H100-SXM5-80GB", true);
    cat_instance(g, 9, 4); /* a 3g.40gb on memory slices 4-7 */
    json_t *s = build(inv, "version: v1\n", 1);
    json_t *d = device(s, "gpu-0-mig-3g40gb-9-4");
    assert_non_null(d);
    assert_null(json_object_get(d, "consumesCounters"));
    assert_false(json_is_true(attr(d, "migOnDemand", "bool")));
    assert_string_equal(sattr(d, "uuid"), g->mig[0].uuid);
    assert_string_equal(sattr(d, "sharing"), "exclusive");
    assert_string_equal(cap(d, "memory"), "40448Mi");
    json_t *sets = counter_sets(s), *set = json_object_get(sets, "gpu-0-counter-set");
    assert_int_equal(counter(set, "compute-slices"), 4);
    assert_int_equal(counter(set, "memory-slice-3"), 1);
    assert_null(json_object_get(set, "memory-slice-4"));
    assert_null(json_object_get(set, "memory-slice-7"));
    json_decref(sets);
    /* only what fits in slices 0-3: 1g.10gb x4, 2g x2, 3g at 0, 4g at 0, +me x4, 1g.20gb x2 */
    bool full = false;
    assert_int_equal(check_placements(s, g, &full), 4 + 2 + 1 + 1 + 4 + 2);
    assert_false(full);
    assert_null(device(s, "gpu-0-mig-7g80gb-0-0"));
    assert_null(device(s, "gpu-0-mig-1g10gb-19-4"));
    json_decref(s);

    /* a MIG layout in the policy owns the GPU: its instances only, nothing on demand */
    s = build(inv, "version: v1\ngpuslice:\n  mig:\n    config: all-balanced\n", 1);
    assert_int_equal(json_array_size(s), 1);
    json_t *all = all_devices(s);
    assert_int_equal(json_array_size(all), 1);
    json_decref(all);
    assert_null(json_object_get(json_object_get(json_array_get(s, 0), "spec"), "sharedCounters"));
    json_decref(s);
    free(inv);
}

static void test_mig_shared_by_mps(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("580.65.06", 13000);
    struct gs_gpu *g = cat_gpu(inv, "H100-SXM5-80GB", true);
    cat_instance(g, 9, 0);
    cat_instance(g, 9, 4);
    json_t *s = build(inv, "version: v1\ngpuslice:\n  gpus:\n    - index: \"0\"\n      mode: mps\n      replicas: 2\n", 1);
    json_t *all = all_devices(s);
    assert_int_equal(json_array_size(all), 2); /* the instances, shared; nothing on demand */
    json_t *d = device(s, "gpu-0-mig-3g40gb-9-0");
    assert_true(json_is_true(json_object_get(d, "allowMultipleAllocations")));
    assert_string_equal(sattr(d, "sharing"), "mps");
    assert_string_equal(policy_of(d, "compute", "default"), "50");
    assert_string_equal(policy_of(d, "memory", "default"), "19Gi"); /* 40448 MiB / 2 rounded down */
    json_decref(all);
    json_decref(s);
    free(inv);
}

static void test_split_at_128(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("580.65.06", 13000);
    for (int i = 0; i < 20; i++) {
        struct gs_gpu *g = cat_gpu(inv, "H100-SXM5-80GB", true);
        for (unsigned k = 0; k < 7; k++)
            cat_instance(g, 19, k); /* 7 x 1g.10gb: 140 devices, none on demand */
    }
    json_t *s = build(inv, "version: v1\n", 5);
    assert_int_equal(json_array_size(s), 2);
    json_t *sl;
    size_t i, total = 0;
    json_array_foreach(s, i, sl) {
        json_t *spec = json_object_get(sl, "spec");
        size_t n = json_array_size(json_object_get(spec, "devices"));
        assert_int_equal(n, i == 0 ? 128 : 12);
        total += n;
        assert_int_equal(json_integer_value(json_object_get(json_object_get(spec, "pool"), "resourceSliceCount")), 2);
        assert_int_equal(json_integer_value(json_object_get(json_object_get(spec, "pool"), "generation")), 5);
        char want[128];
        snprintf(want, sizeof(want), NODE "-" DRIVER "-%zu", i);
        assert_string_equal(json_string_value(json_object_get(json_object_get(sl, "metadata"), "name")), want);
    }
    assert_int_equal(total, 140);
    json_decref(s);
    free(inv);
}

/* An Xid taints every device of its GPU (the GPU, MIG instances, on-demand placements) NoSchedule,
 * "<driver>/xid" = the Xid; the other GPUs' devices stay untainted; a slice with a tainted device
 * holds at most 64 devices (the same 140 as test_split_at_128: 64 + 76, not 128 + 12). */
static void test_xid_taints(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("580.65.06", 13000);
    cat_gpu(inv, "L4", false);
    cat_gpu(inv, "H100-SXM5-80GB", true);
    struct gs_policy *p = fx_policy("version: v1\n");
    struct gs_dra_taints t;
    memset(&t, 0, sizeof(t));
    t.xid[1] = true;
    t.xid_code[1] = 79;
    json_t *s = NULL;
    char err[256];
    assert_int_equal(gs_dra_slices_build_tainted(inv, p, &t, NODE, DRIVER, 3, &s, err, sizeof(err)), 0);
    json_t *all = all_devices(s), *d;
    size_t i, tainted = 0;
    json_array_foreach(all, i, d) {
        const char *name = json_string_value(json_object_get(d, "name"));
        json_t *taints = json_object_get(d, "taints");
        if (!strcmp(name, "gpu-0")) {
            assert_null(taints);
            continue;
        }
        assert_int_equal(strncmp(name, "gpu-1", 5), 0);
        assert_int_equal(json_array_size(taints), 1);
        json_t *x = json_array_get(taints, 0);
        assert_string_equal(json_string_value(json_object_get(x, "key")), DRIVER "/xid");
        assert_string_equal(json_string_value(json_object_get(x, "value")), "79");
        assert_string_equal(json_string_value(json_object_get(x, "effect")), "NoSchedule");
        assert_int_equal(json_object_size(x), 3); /* timeAdded is the API server's */
        tainted++;
    }
    assert_true(tainted > 1); /* the GPU and its placements on demand */
    json_decref(all);
    json_decref(s);
    /* healthy again: no taint left; without taints the same slices as gs_dra_slices_build */
    t.xid[1] = false;
    assert_int_equal(gs_dra_slices_build_tainted(inv, p, &t, NODE, DRIVER, 3, &s, err, sizeof(err)), 0);
    json_t *plain = build(inv, "version: v1\n", 3);
    assert_true(json_equal(s, plain));
    json_decref(plain);
    json_decref(s);
    free(p);
    free(inv);

    inv = fx_node("580.65.06", 13000);
    for (int g = 0; g < 20; g++) {
        struct gs_gpu *gpu = cat_gpu(inv, "H100-SXM5-80GB", true);
        for (unsigned k = 0; k < 7; k++)
            cat_instance(gpu, 19, k);
    }
    p = fx_policy("version: v1\n");
    memset(&t, 0, sizeof(t));
    t.xid[0] = true;
    t.xid_code[0] = 48;
    assert_int_equal(gs_dra_slices_build_tainted(inv, p, &t, NODE, DRIVER, 1, &s, err, sizeof(err)), 0);
    size_t total = 0;
    json_array_foreach(s, i, d) {
        size_t n = json_array_size(json_object_get(json_object_get(d, "spec"), "devices"));
        assert_int_equal(n, i == 0 ? 64 : 76); /* GPU 0's 7 tainted in the first: 64; the rest 128 at most */
        total += n;
    }
    assert_int_equal(json_array_size(s), 2);
    assert_int_equal(total, 140);
    json_decref(s);
    free(p);
    free(inv);
}

static void test_split_counters(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("580.65.06", 13000);
    cat_gpu(inv, "L4", false);
    for (int i = 0; i < 9; i++)
        cat_gpu(inv, "H100-SXM5-80GB", true);
    json_t *s = build(inv, "version: v1\n", 1);
    /* 9 counter sets: two slices (8 + 1); 1 + 9 x 25 devices, at most 64 a slice */
    size_t sets = 0, devs = 0, cs_slices = 0, dev_slices = 0;
    json_t *sl;
    size_t i;
    json_array_foreach(s, i, sl) {
        json_t *spec = json_object_get(sl, "spec");
        size_t c = json_array_size(json_object_get(spec, "sharedCounters"));
        size_t d = json_array_size(json_object_get(spec, "devices"));
        assert_true(!c || !d);
        assert_true(c <= 8);
        assert_true(d <= 64);
        sets += c;
        devs += d;
        cs_slices += c > 0;
        dev_slices += d > 0;
        assert_int_equal(json_integer_value(json_object_get(json_object_get(spec, "pool"), "resourceSliceCount")),
                         json_array_size(s));
    }
    assert_int_equal(sets, 9);
    assert_int_equal(cs_slices, 2);
    assert_int_equal(devs, 1 + 9 * 25);
    assert_int_equal(dev_slices, 4); /* ceil(226 / 64) */
    for (unsigned g = 1; g < 10; g++) {
        bool full = false;
        assert_int_equal(check_placements(s, &inv->gpus[g], &full), 25);
        assert_true(full);
    }
    json_decref(s);
    free(inv);
}

/* Names the API server validates: DNS labels for devices and counters, C identifiers (at most 32)
 * for attributes and capacities, at most 32 of them a device, string values at most 64. */
static bool c_ident(const char *s) {
    size_t n = strlen(s);
    if (!n || n > 32 || (s[0] >= '0' && s[0] <= '9'))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
              s[i] == '_'))
            return false;
    return true;
}

static bool dns_label(const char *s) {
    size_t n = strlen(s);
    if (!n || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return false;
    return true;
}

static void test_names_valid(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("580.65.06", 13000);
    const char *models[] = { "A30", "A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB", "H100-NVL",
                             "H200-SXM-141GB", "B200", "T4", "L4" };
    for (size_t m = 0; m < GS_ARRAY_SIZE(models); m++)
        cat_gpu(inv, models[m], gs_catalog_find(models[m])->mig_mem_slices > 0);
    json_t *s = build(inv, "version: v1\n", 1);
    json_t *all = all_devices(s), *d;
    size_t i;
    json_array_foreach(all, i, d) {
        const char *name = json_string_value(json_object_get(d, "name"));
        if (!dns_label(name))
            fail_msg("device name %s", name);
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(d, "attributes"), k, v) {
            const char *id = strchr(k, '/') ? strchr(k, '/') + 1 : k;
            if (!c_ident(id))
                fail_msg("attribute %s", k);
            json_t *str = json_object_get(v, "string");
            assert_true(!str || strlen(json_string_value(str)) <= 64);
        }
        json_object_foreach(json_object_get(d, "capacity"), k, v) assert_true(c_ident(k));
        assert_true(json_object_size(json_object_get(d, "attributes")) + json_object_size(json_object_get(d, "capacity")) <=
                    32);
        json_t *use;
        size_t j;
        json_array_foreach(json_object_get(d, "consumesCounters"), j, use) {
            json_object_foreach(json_object_get(use, "counters"), k, v) assert_true(dns_label(k));
        }
    }
    json_t *sets = counter_sets(s);
    const char *k;
    json_t *v;
    json_object_foreach(sets, k, v) {
        assert_true(dns_label(k));
        assert_true(json_object_size(v) <= 32);
    }
    json_decref(sets);
    json_decref(all);
    json_decref(s);
    free(inv);
}

/* gpuslice.dra.gpus: only the GPUs given to DRA are published; unset: every GPU (a preview). */
static void test_dra_gpus_only(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("580.65.06", 13000);
    cat_gpu(inv, "L4", false);
    cat_gpu(inv, "L4", false);
    cat_gpu(inv, "L4", false);
    static const struct {
        const char *yaml;
        size_t n;
        bool gpu[3];
    } cases[] = {
        { "version: v1\n", 3, { true, true, true } },
        { "gpuslice:\n  dra:\n    gpus: all\n", 3, { true, true, true } },
        { "gpuslice:\n  dra:\n    gpus: none\n", 0, { false, false, false } },
        { "gpuslice:\n  dra:\n    gpus: [\"1\"]\n", 1, { false, true, false } },
    };
    for (size_t i = 0; i < GS_ARRAY_SIZE(cases); i++) {
        json_t *s = build(inv, cases[i].yaml, 1);
        json_t *all = all_devices(s);
        assert_int_equal(json_array_size(all), cases[i].n);
        for (unsigned g = 0; g < 3; g++) {
            char name[16];
            snprintf(name, sizeof(name), "gpu-%u", g);
            assert_int_equal(device(s, name) != NULL, cases[i].gpu[g]);
        }
        json_decref(all);
        json_decref(s);
    }
    free(inv);
}

static void test_left_out_and_errors(void **state) {
    (void)state;
    struct gs_inventory *inv = fx_node("580.65.06", 13000);
    cat_gpu(inv, "L4", false);
    cat_gpu(inv, "L4", false)->lost = true;
    cat_gpu(inv, "L4", false);
    json_t *s = build(inv, "version: v1\ngpuslice:\n  gpus:\n    - index: \"2\"\n      mode: disabled\n", 1);
    json_t *all = all_devices(s);
    assert_int_equal(json_array_size(all), 1); /* lost and disabled GPUs are not offered */
    assert_non_null(device(s, "gpu-0"));
    json_decref(all);
    json_decref(s);

    /* no GPU: one slice without devices (the pool exists, empty) */
    struct gs_inventory *empty = fx_node("580.65.06", 13000);
    s = build(empty, "version: v1\n", 1);
    assert_int_equal(json_array_size(s), 1);
    assert_null(json_object_get(json_object_get(json_array_get(s, 0), "spec"), "devices"));
    json_decref(s);
    free(empty);

    struct gs_policy *p = fx_policy("version: v1\n");
    json_t *out = (json_t *)1;
    char err[256];
    assert_int_equal(gs_dra_slices_build(inv, p, "Node_1", DRIVER, 1, &out, err, sizeof(err)), -EINVAL);
    assert_null(out);
    assert_non_null(strstr(err, "node name 'Node_1'"));
    assert_int_equal(gs_dra_slices_build(inv, p, NODE, "gpu..x", 1, &out, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "driver name 'gpu..x'"));
    assert_int_equal(gs_dra_slices_build(inv, p, NODE, DRIVER, -1, &out, err, sizeof(err)), -EINVAL);
    char long_node[250];
    memset(long_node, 'a', sizeof(long_node) - 1);
    long_node[sizeof(long_node) - 1] = 0;
    assert_int_equal(gs_dra_slices_build(inv, p, long_node, DRIVER, 1, &out, err, sizeof(err)), -EINVAL);
    if (!strstr(err, "longer than 253"))
        fail_msg("%s", err);
    free(p);
    free(inv);
}

static void test_device_parse(void **state) {
    (void)state;
    struct gs_dra_device_ref r;
    assert_int_equal(gs_dra_device_parse("gpu-3", &r), 0);
    assert_int_equal(r.gpu, 3);
    assert_false(r.mig);
    assert_int_equal(gs_dra_device_parse("gpu-12-mig-1g10gb-me-20-6", &r), 0);
    assert_int_equal(r.gpu, 12);
    assert_true(r.mig);
    assert_int_equal(r.profile_id, 20);
    assert_int_equal(r.start, 6);
    assert_int_equal(gs_dra_device_parse("gpu-0-mig-3g40gb-9-4", &r), 0);
    assert_int_equal(r.profile_id, 9);
    assert_int_equal(r.start, 4);
    const char *bad[] = { "", "gpu", "gpu-", "gpu-x", "gpu-01", "gpu-64", "gpu-1-", "gpu-1-mig-", "gpu-1-mig-3g40gb-9",
                          "gpu-1-mig--9-4", "gpu-1-mig-3g40gb-9-8", "gpu-1-mig-3g40gb-x-4", "gpu-1-mig-3G40gb-9-4",
                          "mig-1", "gpu-1-foo" };
    for (size_t i = 0; i < GS_ARRAY_SIZE(bad); i++)
        if (gs_dra_device_parse(bad[i], &r) != -EINVAL)
            fail_msg("'%s' parsed", bad[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_gpu_attributes), cmocka_unit_test(test_time_sliced_gpu),
        cmocka_unit_test(test_mps_gpu), cmocka_unit_test(test_fractional_gpu_once),              cmocka_unit_test(test_mig_on_demand),
        cmocka_unit_test(test_mig_existing_instances), cmocka_unit_test(test_mig_shared_by_mps),
        cmocka_unit_test(test_split_at_128),         cmocka_unit_test(test_split_counters),
        cmocka_unit_test(test_xid_taints),
        cmocka_unit_test(test_names_valid),          cmocka_unit_test(test_left_out_and_errors),
        cmocka_unit_test(test_device_parse),        cmocka_unit_test(test_dra_gpus_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
