/* test_sim.c: the simulated NVML library behaves like the driver, for every model in the
 * catalogue, exercised through the real dlopen backend (gpu/nvml.c). */
#include <dlfcn.h>
#include <errno.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "catalog/catalog.h"
#include "sim_fixture.h"

static bool overlaps(unsigned s1, unsigned z1, unsigned s2, unsigned z2) { return s1 < s2 + z2 && s2 < s1 + z1; }

static nvmlGpuInstance_t create_at(struct sim_fixture *f, nvmlDevice_t d, const struct gs_profile_spec *p,
                                   unsigned start, nvmlReturn_t *ret) {
    nvmlGpuInstancePlacement_t pl = { start, p->mem_slices };
    nvmlGpuInstance_t gi = NULL;
    *ret = f->api->DeviceCreateGpuInstanceWithPlacement(d, p->id, &pl, &gi);
    return gi;
}

/* The backend must reach the simulator through dlopen, not through code linked into this test. */
static void test_backend_uses_dlopen(void **state) {
    (void)state;
    assert_null(dlsym(RTLD_DEFAULT, "nvmlInit_v2")); /* nothing NVML-like is linked in */
    struct sim_fixture f;
    assert_int_equal(sim_fixture_open(&f, "gpus:\n  - model: L4\n"), 0);
    Dl_info info;
    assert_true(dladdr((void *)f.api->DeviceGetCount, &info) != 0);
    assert_non_null(strstr(info.dli_fname, "libgpuslice-nvml-sim.so"));
    unsigned long long (*calls)(void) = (unsigned long long (*)(void))gpu_node_symbol(f.node, "gpusliceSimCallCount");
    assert_non_null(calls);
    unsigned long long before = calls();
    struct gs_inventory *inv = calloc(1, sizeof(*inv));
    assert_int_equal(gpu_inventory_read(f.node, inv), 0);
    assert_true(calls() > before);
    assert_int_equal(inv->n_gpus, 1);
    assert_string_equal(inv->gpus[0].name, "NVIDIA L4");
    assert_false(inv->gpus[0].mig_capable);
    free(inv);
    sim_fixture_close(&f);
}

static void test_no_driver_message(void **state) {
    (void)state;
    struct gpu_node *n = NULL;
    char err[512];
    assert_int_equal(gpu_node_open("libnvidia-ml-does-not-exist.so.1", &n, err, sizeof(err)), -ENOENT);
    assert_non_null(strstr(err, "NVIDIA driver not found: could not load libnvidia-ml-does-not-exist.so.1: "));
    /* A library that is not NVML is refused with the missing symbol named. */
    assert_int_equal(gpu_node_open("libm.so.6", &n, err, sizeof(err)), -ENOSYS);
    assert_non_null(strstr(err, "nvmlInit_v2"));
}

/* Every valid placement accepted; every pair of placements: overlapping ones and a second
 * instance of a capped profile rejected with INSUFFICIENT_RESOURCES, all others accepted. */
static void test_placements_every_model(void **state) {
    (void)state;
    for (size_t mi = 0; mi < gs_catalog_count(); mi++) {
        const struct gs_model *m = gs_catalog_get(mi);
        if (!m->mig_mem_slices)
            continue;
        char yaml[256];
        one_gpu_yaml(yaml, sizeof(yaml), m->key, 1);
        struct sim_fixture f;
        assert_int_equal(sim_fixture_open(&f, yaml), 0);
        nvmlDevice_t d = sim_device(&f, 0);
        assert_non_null(d);
        unsigned pairs = 0;
        for (size_t a = 0; a < m->n_profiles; a++) {
            const struct gs_profile_spec *pa = &m->profiles[a];
            /* Possible placements as NVML reports them match the catalogue. */
            nvmlGpuInstancePlacement_t pl[8];
            unsigned cnt = 8;
            assert_int_equal(f.api->DeviceGetGpuInstancePossiblePlacements(d, pa->id, pl, &cnt), NVML_SUCCESS);
            assert_int_equal(cnt, pa->n_starts);
            for (unsigned sa = 0; sa < pa->n_starts; sa++) {
                nvmlReturn_t r;
                nvmlGpuInstance_t gi = create_at(&f, d, pa, pa->starts[sa], &r);
                assert_int_equal(r, NVML_SUCCESS);
                nvmlGpuInstanceInfo_t info;
                assert_int_equal(f.api->GpuInstanceGetInfo(gi, &info), NVML_SUCCESS);
                assert_int_equal(info.profileId, pa->id);
                assert_int_equal(info.placement.start, pa->starts[sa]);
                assert_int_equal(info.placement.size, pa->mem_slices);
                for (size_t b = 0; b < m->n_profiles; b++) {
                    const struct gs_profile_spec *pb = &m->profiles[b];
                    for (unsigned sb = 0; sb < pb->n_starts; sb++) {
                        bool clash = overlaps(pa->starts[sa], pa->mem_slices, pb->starts[sb], pb->mem_slices) ||
                                     (pa->id == pb->id && pa->max_instances == 1);
                        nvmlReturn_t r2;
                        nvmlGpuInstance_t gi2 = create_at(&f, d, pb, pb->starts[sb], &r2);
                        if (r2 != (clash ? NVML_ERROR_INSUFFICIENT_RESOURCES : NVML_SUCCESS))
                            fail_msg("%s: %s@%u then %s@%u returned %d", m->key, pa->name, pa->starts[sa], pb->name,
                                     pb->starts[sb], r2);
                        if (r2 == NVML_SUCCESS)
                            assert_int_equal(f.api->GpuInstanceDestroy(gi2), NVML_SUCCESS);
                        pairs++;
                    }
                }
                assert_int_equal(f.api->GpuInstanceDestroy(gi), NVML_SUCCESS);
            }
            /* Invalid starts are rejected as invalid arguments, not placed elsewhere. */
            nvmlReturn_t r;
            create_at(&f, d, pa, m->mig_mem_slices, &r);
            assert_int_equal(r, NVML_ERROR_INVALID_ARGUMENT);
        }
        assert_true(pairs > 0);
        sim_fixture_close(&f);
    }
}

/* Instance caps: +me profiles once; the Nth+1 instance of every profile refused. */
static void test_caps_every_model(void **state) {
    (void)state;
    for (size_t mi = 0; mi < gs_catalog_count(); mi++) {
        const struct gs_model *m = gs_catalog_get(mi);
        if (!m->mig_mem_slices)
            continue;
        char yaml[256];
        one_gpu_yaml(yaml, sizeof(yaml), m->key, 1);
        struct sim_fixture f;
        assert_int_equal(sim_fixture_open(&f, yaml), 0);
        nvmlDevice_t d = sim_device(&f, 0);
        for (size_t a = 0; a < m->n_profiles; a++) {
            const struct gs_profile_spec *p = &m->profiles[a];
            unsigned remaining = 0;
            assert_int_equal(f.api->DeviceGetGpuInstanceRemainingCapacity(d, p->id, &remaining), NVML_SUCCESS);
            assert_int_equal(remaining, p->max_instances);
            nvmlGpuInstance_t gis[8];
            unsigned made = 0;
            for (unsigned s = 0; s < p->n_starts; s++) {
                nvmlReturn_t r;
                nvmlGpuInstance_t gi = create_at(&f, d, p, p->starts[s], &r);
                if (r == NVML_SUCCESS)
                    gis[made++] = gi;
            }
            assert_int_equal(made, p->max_instances);
            assert_int_equal(f.api->DeviceGetGpuInstanceRemainingCapacity(d, p->id, &remaining), NVML_SUCCESS);
            assert_int_equal(remaining, 0);
            nvmlGpuInstance_t extra;
            assert_int_equal(f.api->DeviceCreateGpuInstance(d, p->id, &extra), NVML_ERROR_INSUFFICIENT_RESOURCES);
            for (unsigned i = 0; i < made; i++)
                assert_int_equal(f.api->GpuInstanceDestroy(gis[i]), NVML_SUCCESS);
        }
        sim_fixture_close(&f);
    }
}

/* IN_USE: a GI with a CI, a CI with a process; the UUID changes when re-created; GI IDs come from
 * the driver (read back, not derived). */
static void test_in_use_and_uuids(void **state) {
    (void)state;
    for (size_t mi = 0; mi < gs_catalog_count(); mi++) {
        const struct gs_model *m = gs_catalog_get(mi);
        if (!m->mig_mem_slices)
            continue;
        char yaml[256];
        one_gpu_yaml(yaml, sizeof(yaml), m->key, 1);
        struct sim_fixture f;
        assert_int_equal(sim_fixture_open(&f, yaml), 0);
        const struct gs_profile_spec *p = gs_model_profile_by_nvml(m, NVML_GPU_INSTANCE_PROFILE_1_SLICE);
        assert_non_null(p);
        unsigned gi_id, ci_id, gi_id2, ci_id2;
        char uuid1[96], uuid2[96];
        assert_int_equal(gpu_gi_create(f.node, 0, p->id, p->starts[1], &gi_id), 0);
        assert_int_equal(gpu_ci_create_full(f.node, 0, gi_id, &ci_id, uuid1, sizeof(uuid1)), 0);
        assert_memory_equal(uuid1, "MIG-", 4);
        assert_int_equal(gpu_gi_destroy(f.node, 0, gi_id), -EBUSY);
        assert_int_equal(gpu_node_last_nvml(f.node), NVML_ERROR_IN_USE);
        gs_sim_process_add_fn add = (gs_sim_process_add_fn)gpu_node_symbol(f.node, "gpusliceSimProcessAdd");
        gs_sim_process_remove_fn rm = (gs_sim_process_remove_fn)gpu_node_symbol(f.node, "gpusliceSimProcessRemove");
        char err[256];
        assert_int_equal(add(0, (int)gi_id, -1, 4242, 1 << 20, "trainer", err, sizeof(err)), 0);
        assert_int_equal(gpu_ci_destroy(f.node, 0, gi_id, ci_id), -EBUSY);
        assert_non_null(strstr(gpu_node_error(f.node), "In use"));
        /* The process shows up on the parent GPU and on the MIG device. */
        struct gs_inventory *inv = calloc(1, sizeof(*inv));
        assert_int_equal(gpu_inventory_read(f.node, inv), 0);
        assert_int_equal(inv->gpus[0].n_procs, 1);
        assert_int_equal(inv->gpus[0].procs[0].pid, 4242);
        assert_int_equal(inv->gpus[0].procs[0].gi_id, (int)gi_id);
        assert_int_equal(inv->gpus[0].n_mig, 1);
        assert_string_equal(inv->gpus[0].mig[0].uuid, uuid1);
        assert_string_equal(inv->gpus[0].mig[0].profile, p->name);
        assert_int_equal(rm(4242, -1, err, sizeof(err)), 0);
        assert_int_equal(gpu_ci_destroy(f.node, 0, gi_id, ci_id), 0);
        assert_int_equal(gpu_gi_destroy(f.node, 0, gi_id), 0);
        assert_int_equal(gpu_gi_destroy(f.node, 0, gi_id), -ENOENT);
        /* Same placement again: a new MIG UUID. */
        assert_int_equal(gpu_gi_create(f.node, 0, p->id, p->starts[1], &gi_id2), 0);
        assert_int_equal(gpu_ci_create_full(f.node, 0, gi_id2, &ci_id2, uuid2, sizeof(uuid2)), 0);
        assert_string_not_equal(uuid1, uuid2);
        /* The MIG UUID resolves to a MIG device handle whose parent is GPU 0. */
        nvmlDevice_t mig, parent;
        unsigned is_mig = 0;
        assert_int_equal(f.api->DeviceGetHandleByUUID(uuid2, &mig), NVML_SUCCESS);
        assert_int_equal(f.api->DeviceIsMigDeviceHandle(mig, &is_mig), NVML_SUCCESS);
        assert_int_equal(is_mig, 1);
        assert_int_equal(f.api->DeviceGetDeviceHandleFromMigDeviceHandle(mig, &parent), NVML_SUCCESS);
        assert_ptr_equal(parent, sim_device(&f, 0));
        assert_int_equal(f.api->DeviceGetHandleByUUID(uuid1, &mig), NVML_ERROR_NOT_FOUND);
        free(inv);
        sim_fixture_close(&f);
    }
}

/* MIG mode: Ampere leaves current != pending until a GPU reset; Hopper and newer switch at once.
 * MIG calls with MIG disabled are NOT_SUPPORTED; non-MIG GPUs have no MIG mode. */
static void test_mig_mode_switch(void **state) {
    (void)state;
    for (size_t mi = 0; mi < gs_catalog_count(); mi++) {
        const struct gs_model *m = gs_catalog_get(mi);
        char yaml[256];
        one_gpu_yaml(yaml, sizeof(yaml), m->key, 0);
        struct sim_fixture f;
        assert_int_equal(sim_fixture_open(&f, yaml), 0);
        nvmlDevice_t d = sim_device(&f, 0);
        unsigned cur = 9, pend = 9;
        nvmlReturn_t act;
        if (!m->mig_mem_slices) {
            assert_int_equal(f.api->DeviceGetMigMode(d, &cur, &pend), NVML_ERROR_NOT_SUPPORTED);
            assert_int_equal(gpu_mig_set_mode(f.node, 0, true, &act), -EOPNOTSUPP);
            sim_fixture_close(&f);
            continue;
        }
        assert_int_equal(f.api->DeviceGetMigMode(d, &cur, &pend), NVML_SUCCESS);
        assert_int_equal(cur, 0);
        nvmlGpuInstance_t gi;
        assert_int_equal(f.api->DeviceCreateGpuInstance(d, m->profiles[0].id, &gi), NVML_ERROR_NOT_SUPPORTED);
        nvmlGpuInstanceProfileInfo_t pinfo;
        assert_int_equal(f.api->DeviceGetGpuInstanceProfileInfo(d, 0, &pinfo), NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(gpu_mig_set_mode(f.node, 0, true, &act), 0);
        assert_int_equal(f.api->DeviceGetMigMode(d, &cur, &pend), NVML_SUCCESS);
        assert_int_equal(pend, 1);
        char err[256];
        gs_sim_reset_gpu_fn reset = (gs_sim_reset_gpu_fn)gpu_node_symbol(f.node, "gpusliceSimResetGpu");
        if (m->arch < GS_ARCH_HOPPER) {
            assert_int_equal(cur, 0);
            assert_int_equal(act, NVML_ERROR_RESET_REQUIRED);
            assert_int_equal(f.api->DeviceCreateGpuInstance(d, m->profiles[0].id, &gi), NVML_ERROR_NOT_SUPPORTED);
            assert_int_equal(reset(0, err, sizeof(err)), 0);
            assert_int_equal(f.api->DeviceGetMigMode(d, &cur, &pend), NVML_SUCCESS);
        } else {
            assert_int_equal(act, NVML_SUCCESS);
        }
        assert_int_equal(cur, 1);
        assert_int_equal(pend, 1);
        /* Enumerate profiles until INVALID_ARGUMENT: exactly the catalogue's, by real ID. */
        unsigned found = 0;
        for (unsigned pi = 0;; pi++) {
            nvmlReturn_t r = f.api->DeviceGetGpuInstanceProfileInfo(d, pi, &pinfo);
            if (r == NVML_ERROR_INVALID_ARGUMENT)
                break;
            if (r == NVML_ERROR_NOT_SUPPORTED)
                continue;
            assert_int_equal(r, NVML_SUCCESS);
            const struct gs_profile_spec *p = gs_model_profile_by_nvml(m, pi);
            assert_non_null(p);
            assert_int_equal(pinfo.id, p->id);
            assert_int_equal(pinfo.memorySizeMB, p->mem_mib);
            found++;
        }
        assert_int_equal(found, m->n_profiles);
        /* Disabling with an instance present is refused; after destroying it, it works. */
        unsigned gi_id;
        assert_int_equal(gpu_gi_create(f.node, 0, m->profiles[0].id, m->profiles[0].starts[0], &gi_id), 0);
        assert_int_equal(gpu_mig_set_mode(f.node, 0, false, &act), -EBUSY);
        assert_int_equal(gpu_gi_destroy(f.node, 0, gi_id), 0);
        assert_int_equal(gpu_mig_set_mode(f.node, 0, false, &act), 0);
        assert_int_equal(f.api->DeviceGetMigMode(d, &cur, &pend), NVML_SUCCESS);
        assert_int_equal(pend, 0);
        assert_int_equal(cur, m->arch < GS_ARCH_HOPPER ? 1 : 0);
        /* On Ampere a reset drops instances created while the old mode was still active. */
        if (m->arch < GS_ARCH_HOPPER) {
            assert_int_equal(gpu_gi_create(f.node, 0, m->profiles[0].id, m->profiles[0].starts[0], &gi_id), 0);
            assert_int_equal(reset(0, err, sizeof(err)), 0);
            assert_int_equal(f.api->DeviceGetMigMode(d, &cur, &pend), NVML_SUCCESS);
            assert_int_equal(cur, 0);
        }
        sim_fixture_close(&f);
    }
}

/* Driver placement order without an explicit placement (MIG user guide example, A100):
 * `-cgi 19,19,14,9` fails at the 3g while `-cgi 9,19,14,19` succeeds. */
static void test_auto_placement_order(void **state) {
    (void)state;
    struct sim_fixture f;
    assert_int_equal(sim_fixture_open(&f, "gpus:\n  - model: A100-SXM4-40GB\n    mig: enabled\n"), 0);
    nvmlDevice_t d = sim_device(&f, 0);
    nvmlGpuInstance_t g[4];
    assert_int_equal(f.api->DeviceCreateGpuInstance(d, 19, &g[0]), NVML_SUCCESS);
    assert_int_equal(f.api->DeviceCreateGpuInstance(d, 19, &g[1]), NVML_SUCCESS);
    assert_int_equal(f.api->DeviceCreateGpuInstance(d, 14, &g[2]), NVML_SUCCESS);
    assert_int_equal(f.api->DeviceCreateGpuInstance(d, 9, &g[3]), NVML_ERROR_INSUFFICIENT_RESOURCES);
    for (int i = 0; i < 3; i++)
        assert_int_equal(f.api->GpuInstanceDestroy(g[i]), NVML_SUCCESS);
    static const unsigned order[] = { 9, 19, 14, 19 };
    for (int i = 0; i < 4; i++)
        assert_int_equal(f.api->DeviceCreateGpuInstance(d, order[i], &g[i]), NVML_SUCCESS);
    /* GI IDs are read back from the driver: the first 3g (at slot 4) got GI 1. */
    nvmlGpuInstanceInfo_t info;
    assert_int_equal(f.api->GpuInstanceGetInfo(g[0], &info), NVML_SUCCESS);
    assert_int_equal(info.placement.start, 4);
    assert_int_equal(info.id, 1);
    /* A destroyed GI's handle is no longer valid. */
    assert_int_equal(f.api->GpuInstanceDestroy(g[1]), NVML_SUCCESS);
    assert_int_equal(f.api->GpuInstanceGetInfo(g[1], &info), NVML_ERROR_INVALID_ARGUMENT);
    sim_fixture_close(&f);
}

/* Xid events reach every event set registered on the GPU, including those of other processes. */
static void test_xid_events(void **state) {
    (void)state;
    struct sim_fixture f;
    assert_int_equal(sim_fixture_open(&f, "gpus:\n  - model: L4\n    count: 2\n"), 0);
    struct gpu_events *ev;
    assert_int_equal(gpu_events_open(f.node, &ev), 0);
    struct gpu_event e;
    assert_int_equal(gpu_events_wait(ev, 10, &e), -ETIMEDOUT);
    gs_sim_inject_xid_fn inject = (gs_sim_inject_xid_fn)gpu_node_symbol(f.node, "gpusliceSimInjectXid");
    char err[256];
    assert_int_equal(inject(1, 79, 0xFFFFFFFFu, err, sizeof(err)), 0);
    assert_int_equal(gpu_events_wait(ev, 1000, &e), 0);
    assert_int_equal(e.gpu, 1);
    assert_int_equal(e.xid, 79);
    assert_int_equal(e.gi_id, 0xFFFFFFFFu);
    assert_int_equal(gpu_events_wait(ev, 10, &e), -ETIMEDOUT);
    /* Another process injects while we wait. */
    pid_t pid = fork();
    if (pid == 0) {
        usleep(50000);
        struct gpu_node *n2;
        char e2[256];
        if (gpu_node_open(sim_lib(), &n2, e2, sizeof(e2)) < 0)
            _exit(2);
        gs_sim_inject_xid_fn inj2 = (gs_sim_inject_xid_fn)gpu_node_symbol(n2, "gpusliceSimInjectXid");
        int r = inj2(0, 48, 0xFFFFFFFFu, e2, sizeof(e2));
        gpu_node_close(n2);
        _exit(r == 0 ? 0 : 1);
    }
    assert_int_equal(gpu_events_wait(ev, 5000, &e), 0);
    assert_int_equal(e.gpu, 0);
    assert_int_equal(e.xid, 48);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(inject(7, 79, 0xFFFFFFFFu, err, sizeof(err)), -ENODEV);
    assert_non_null(strstr(err, "GPU 7 does not exist"));
    gpu_events_close(ev);
    sim_fixture_close(&f);
}

/* A lost GPU answers GPU_IS_LOST and is reported lost in the inventory; recovery restores it. */
static void test_gpu_lost(void **state) {
    (void)state;
    struct sim_fixture f;
    assert_int_equal(sim_fixture_open(&f, "gpus:\n  - model: T4\n    count: 2\n"), 0);
    nvmlDevice_t d1 = sim_device(&f, 1);
    gs_sim_set_lost_fn lose = (gs_sim_set_lost_fn)gpu_node_symbol(f.node, "gpusliceSimSetLost");
    char err[256];
    assert_int_equal(lose(1, 1, err, sizeof(err)), 0);
    char uuid[96];
    assert_int_equal(f.api->DeviceGetUUID(d1, uuid, sizeof(uuid)), NVML_ERROR_GPU_IS_LOST);
    struct gs_inventory *inv = calloc(1, sizeof(*inv));
    assert_int_equal(gpu_inventory_read(f.node, inv), 0);
    assert_false(inv->gpus[0].lost);
    assert_true(inv->gpus[1].lost);
    assert_int_equal(lose(1, 0, err, sizeof(err)), 0);
    assert_int_equal(gpu_inventory_read(f.node, inv), 0);
    assert_false(inv->gpus[1].lost);
    assert_string_equal(inv->gpus[1].name, "Tesla T4");
    free(inv);
    sim_fixture_close(&f);
}

/* State persists across processes and opens; a changed node description starts a fresh node;
 * a damaged state file is an error, not a crash. */
static void test_state_persistence(void **state) {
    (void)state;
    struct sim_fixture f;
    assert_int_equal(sim_fixture_open(&f, "gpus:\n  - model: H100-SXM5-80GB\n    mig: enabled\n"), 0);
    unsigned gi_id, ci_id;
    char uuid[96];
    assert_int_equal(gpu_gi_create(f.node, 0, 9, 4, &gi_id), 0);
    assert_int_equal(gpu_ci_create_full(f.node, 0, gi_id, &ci_id, uuid, sizeof(uuid)), 0);
    gpu_node_close(f.node);
    char e[512];
    assert_int_equal(gpu_node_open(sim_lib(), &f.node, e, sizeof(e)), 0);
    struct gs_inventory *inv = calloc(1, sizeof(*inv));
    assert_int_equal(gpu_inventory_read(f.node, inv), 0);
    assert_int_equal(inv->gpus[0].n_mig, 1);
    assert_string_equal(inv->gpus[0].mig[0].uuid, uuid);
    assert_int_equal(inv->gpus[0].mig[0].start, 4);
    gpu_node_close(f.node);
    /* Damage the state: nvmlInit starts fresh (with a message), it does not crash. */
    char path[400];
    snprintf(path, sizeof(path), "%s/state.json", f.state_dir);
    FILE *fp = fopen(path, "w");
    fputs("{\"version\": 1, \"gpus\": [{\"model\": \"H100", fp);
    fclose(fp);
    assert_int_equal(gpu_node_open(sim_lib(), &f.node, e, sizeof(e)), 0);
    f.api = gpu_node_api(f.node);
    assert_int_equal(gpu_inventory_read(f.node, inv), 0);
    assert_int_equal(inv->gpus[0].n_mig, 0);
    assert_int_equal(inv->gpus[0].mig_current, 1);
    /* Damaged while open: calls fail with an NVML error instead of using garbage. */
    fp = fopen(path, "w");
    fputs("{\"version\": 2}", fp);
    fclose(fp);
    unsigned count;
    assert_int_equal(f.api->DeviceGetCount(&count), NVML_ERROR_UNKNOWN);
    free(inv);
    sim_fixture_close(&f);
}

/* MIG device handles: by index (dense here, NOT_FOUND past the last), their IDs, memory and
 * processes; the parent's process list includes them. */
static void test_mig_device_handles(void **state) {
    (void)state;
    struct sim_fixture f;
    assert_int_equal(sim_fixture_open(&f, "gpus:\n  - model: H200-SXM-141GB\n    mig: enabled\n"), 0);
    unsigned gi_a, gi_b, ci;
    char ua[96], ub[96];
    assert_int_equal(gpu_gi_create(f.node, 0, 9, 0, &gi_a), 0);       /* 3g.71gb at 0 */
    assert_int_equal(gpu_ci_create_full(f.node, 0, gi_a, &ci, ua, sizeof(ua)), 0);
    assert_int_equal(gpu_gi_create(f.node, 0, 19, 6, &gi_b), 0);      /* 1g.18gb at 6 */
    assert_int_equal(gpu_ci_create_full(f.node, 0, gi_b, &ci, ub, sizeof(ub)), 0);
    nvmlDevice_t d = sim_device(&f, 0), mig;
    unsigned max = 0;
    assert_int_equal(f.api->DeviceGetMaxMigDeviceCount(d, &max), NVML_SUCCESS);
    assert_int_equal(max, 7);
    unsigned seen = 0;
    for (unsigned i = 0; i < max; i++) {
        nvmlReturn_t r = f.api->DeviceGetMigDeviceHandleByIndex(d, i, &mig);
        if (r == NVML_ERROR_NOT_FOUND)
            continue;
        assert_int_equal(r, NVML_SUCCESS);
        seen++;
        char uuid[96];
        unsigned gi, cid;
        assert_int_equal(f.api->DeviceGetUUID(mig, uuid, sizeof(uuid)), NVML_SUCCESS);
        assert_int_equal(f.api->DeviceGetGpuInstanceId(mig, &gi), NVML_SUCCESS);
        assert_int_equal(f.api->DeviceGetComputeInstanceId(mig, &cid), NVML_SUCCESS);
        assert_int_equal(cid, 0);
        nvmlMemory_t mem;
        assert_int_equal(f.api->DeviceGetMemoryInfo(mig, &mem), NVML_SUCCESS);
        if (gi == gi_a) {
            assert_string_equal(uuid, ua);
            assert_int_equal(mem.total, 71168ULL << 20);
        } else {
            assert_int_equal(gi, gi_b);
            assert_string_equal(uuid, ub);
            assert_int_equal(mem.total, 16384ULL << 20);
        }
    }
    assert_int_equal(seen, 2);
    assert_int_equal(f.api->DeviceGetMigDeviceHandleByIndex(d, 7, &mig), NVML_ERROR_INVALID_ARGUMENT);
    unsigned gi;
    assert_int_equal(f.api->DeviceGetGpuInstanceId(d, &gi), NVML_ERROR_NOT_SUPPORTED);
    /* A process on GI b: listed on its MIG device and on the parent, not on GI a's device. */
    gs_sim_process_add_fn add = (gs_sim_process_add_fn)gpu_node_symbol(f.node, "gpusliceSimProcessAdd");
    char err[256];
    assert_int_equal(add(0, (int)gi_b, 0, 777, 512ULL << 20, "infer", err, sizeof(err)), 0);
    assert_int_equal(add(0, (int)gi_b, 0, 778, 64ULL << 30, "huge", err, sizeof(err)), -ENOMEM);
    assert_int_equal(f.api->DeviceGetHandleByUUID(ub, &mig), NVML_SUCCESS);
    nvmlProcessInfo_t procs[4];
    unsigned n = 4;
    assert_int_equal(f.api->DeviceGetComputeRunningProcesses(mig, &n, procs), NVML_SUCCESS);
    assert_int_equal(n, 1);
    assert_int_equal(procs[0].pid, 777);
    assert_int_equal(procs[0].gpuInstanceId, gi_b);
    n = 0;
    assert_int_equal(f.api->DeviceGetComputeRunningProcesses(d, &n, NULL), NVML_ERROR_INSUFFICIENT_SIZE);
    assert_int_equal(n, 1);
    assert_int_equal(f.api->DeviceGetHandleByUUID(ua, &mig), NVML_SUCCESS);
    n = 4;
    assert_int_equal(f.api->DeviceGetComputeRunningProcesses(mig, &n, procs), NVML_SUCCESS);
    assert_int_equal(n, 0);
    sim_fixture_close(&f);
}

static void test_uninitialised_and_bad_node(void **state) {
    (void)state;
    setenv("GPUSLICE_SIM_NODE", "/nonexistent/node.yaml", 1);
    struct gpu_node *n;
    char err[512];
    assert_int_equal(gpu_node_open(sim_lib(), &n, err, sizeof(err)), -EIO);
    assert_non_null(strstr(err, "nvmlInit failed"));
    unsetenv("GPUSLICE_SIM_NODE");
    assert_int_equal(gpu_node_open(sim_lib(), &n, err, sizeof(err)), -EIO);
}

/* The number after KEY (e.g. "Threads:", "SigBlk:") in a /proc status file, read in BASE; `missing`
 * when the file or the key is not there. */
static unsigned long long status_field(const char *path, const char *key, int base, unsigned long long missing) {
    FILE *f = fopen(path, "r");
    char line[256];
    unsigned long long v = missing;
    size_t kl = strlen(key);
    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, key, kl)) {
            v = strtoull(line + kl, NULL, base);
            break;
        }
    if (f)
        fclose(f);
    return v;
}

static int read_thread_count(void) {
    return (int)status_field("/proc/self/status", "Threads:", 10, (unsigned long long)-1);
}

/* The process's thread count once it is `want` (a joined thread may leave the count a moment
 * later), or what it is after 2 s. */
static int thread_count_settled(int want) {
    int n = read_thread_count();
    for (int i = 0; i < 200 && n != want; i++) {
        usleep(10000);
        n = read_thread_count();
    }
    return n;
}

static void *init_shutdown_cycles(void *arg) {
    const struct nvml_api *api = arg;
    for (int i = 0; i < 200; i++) {
        if (api->Init() != NVML_SUCCESS || api->Shutdown() != NVML_SUCCESS)
            return (void *)1;
    }
    return NULL;
}

/* SigBlk of thread tid, from /proc/self/task/TID/status (0 when unreadable). */
static unsigned long long blocked_signals(const char *tid) {
    char path[300];
    snprintf(path, sizeof(path), "/proc/self/task/%s/status", tid);
    return status_field(path, "SigBlk:", 16, 0);
}

/* gpu_node_open calls nvmlInit with every signal blocked, so the thread the library starts there
 * never takes a signal meant for the program, whatever the program blocks later (on an H200 the
 * agent died of its own SIGTERM before); the caller's mask is as it was. */
static void test_init_thread_blocks_signals(void **state) {
    (void)state;
    /* The caller blocks nothing (the test runner may have blocked signals: not here). */
    sigset_t none, saved, after;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, &saved);
    struct sim_fixture f;
    assert_int_equal(sim_fixture_open(&f, "gpus:\n  - model: L4\n"), 0);
    pthread_sigmask(SIG_SETMASK, &saved, &after);
    assert_false(sigismember(&after, SIGTERM)); /* the caller's mask is given back */
    char self[32];
    snprintf(self, sizeof(self), "%d", (int)getpid());
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    unsigned others = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, self))
            continue;
        /* read for 200 ms: a thread starts with every signal blocked (glibc) and sets its own
         * mask a moment later */
        unsigned long long want = (1ULL << (SIGTERM - 1)) | (1ULL << (SIGINT - 1)) | (1ULL << (SIGHUP - 1));
        for (int i = 0; i < 20; i++, usleep(10000)) {
            unsigned long long m = blocked_signals(e->d_name);
            if ((m & want) != want)
                fail_msg("thread %s blocks %llx, not SIGTERM, SIGINT and SIGHUP", e->d_name, m);
        }
        others++;
    }
    closedir(d);
    assert_true(others >= 1); /* the simulated NVML's own thread */
    sim_fixture_close(&f);
}

/* As libnvidia-ml, nvmlInit starts a thread of its own; the last nvmlShutdown ends it, also when
 * other threads init and shut down concurrently. */
static void test_init_thread(void **state) {
    (void)state;
    int before = read_thread_count();
    assert_true(before >= 1);
    struct sim_fixture f;
    assert_int_equal(sim_fixture_open(&f, "gpus:\n  - model: L4\n"), 0);
    assert_int_equal(thread_count_settled(before + 1), before + 1);
    assert_int_equal(f.api->Init(), NVML_SUCCESS); /* nested: no second thread */
    assert_int_equal(thread_count_settled(before + 1), before + 1);
    assert_int_equal(f.api->Shutdown(), NVML_SUCCESS);
    assert_int_equal(thread_count_settled(before + 1), before + 1);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, init_shutdown_cycles, (void *)f.api), 0);
    for (int i = 0; i < 4; i++) {
        void *r = (void *)2;
        assert_int_equal(pthread_join(t[i], &r), 0);
        assert_null(r);
    }
    assert_int_equal(thread_count_settled(before + 1), before + 1);
    const struct nvml_api *api = f.api;
    assert_int_equal(api->Shutdown(), NVML_SUCCESS); /* the fixture's init: the last one */
    assert_int_equal(thread_count_settled(before), before);
    /* Init-shutdown cycles from four threads with no init held in between. */
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, init_shutdown_cycles, (void *)api), 0);
    for (int i = 0; i < 4; i++) {
        void *r = (void *)2;
        assert_int_equal(pthread_join(t[i], &r), 0);
        assert_null(r);
    }
    assert_int_equal(thread_count_settled(before), before);
    assert_int_equal(api->Init(), NVML_SUCCESS); /* for the fixture's close, which shuts down */
    /* A forked child (no helper thread of its own) shuts down, inits and shuts down again. */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(10);
        bool ok = api->Shutdown() == NVML_SUCCESS && api->Init() == NVML_SUCCESS &&
                  thread_count_settled(2) == 2 && api->Shutdown() == NVML_SUCCESS && thread_count_settled(1) == 1;
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    sim_fixture_close(&f);
    assert_int_equal(thread_count_settled(before), before);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backend_uses_dlopen),
        cmocka_unit_test(test_init_thread),
        cmocka_unit_test(test_init_thread_blocks_signals),
        cmocka_unit_test(test_no_driver_message),
        cmocka_unit_test(test_placements_every_model),
        cmocka_unit_test(test_caps_every_model),
        cmocka_unit_test(test_in_use_and_uuids),
        cmocka_unit_test(test_mig_mode_switch),
        cmocka_unit_test(test_auto_placement_order),
        cmocka_unit_test(test_xid_events),
        cmocka_unit_test(test_gpu_lost),
        cmocka_unit_test(test_state_persistence),
        cmocka_unit_test(test_mig_device_handles),
        cmocka_unit_test(test_uninitialised_and_bad_node),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
