/* test_simfaults.c: the simulated NVML library's fault schedule (GPUSLICE_SIM_FAULTS): the pure
 * parser and counters (sim/faults.c), then the schedule as the library applies it, through the
 * real dlopen backend. */
#include <dlfcn.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../sim/faults.h"
#include "sim_fixture.h"
#include "util/util.h"

static void test_parse_entries(void **state) {
    (void)state;
    struct sim_faults f;
    char err[256] = "";
    assert_int_equal(sim_faults_parse("X", "nvmlDeviceCreateGpuInstanceWithPlacement:2:NVML_ERROR_INSUFFICIENT_RESOURCES,"
                                           "nvmlDeviceGetMemoryInfo:1+:NVML_ERROR_GPU_IS_LOST,"
                                           "nvmlDeviceGetCount:3:NVML_ERROR_UNKNOWN",
                                      &f, err, sizeof(err)),
                     0);
    assert_int_equal(f.n, 3);
    assert_string_equal(f.entries[0].func, "nvmlDeviceCreateGpuInstanceWithPlacement");
    assert_int_equal(f.entries[0].nth, 2);
    assert_false(f.entries[0].and_later);
    assert_int_equal(f.entries[0].ret, NVML_ERROR_INSUFFICIENT_RESOURCES);
    assert_string_equal(f.entries[1].func, "nvmlDeviceGetMemoryInfo");
    assert_int_equal(f.entries[1].nth, 1);
    assert_true(f.entries[1].and_later);
    assert_int_equal(f.entries[1].ret, NVML_ERROR_GPU_IS_LOST);
    /* An older name is its newer function: the library's nvmlDeviceGetCount runs _v2. */
    assert_string_equal(f.entries[2].func, "nvmlDeviceGetCount_v2");
    assert_int_equal(sim_faults_parse("X", "", &f, err, sizeof(err)), 0);
    assert_int_equal(f.n, 0);
    assert_int_equal(sim_faults_parse("X", NULL, &f, err, sizeof(err)), 0);
    assert_int_equal(f.n, 0);
}

static void test_counting(void **state) {
    (void)state;
    struct sim_faults f;
    char err[256];
    assert_int_equal(sim_faults_parse("X",
                                      "nvmlDeviceGetName:2:NVML_ERROR_TIMEOUT,nvmlDeviceGetUUID:3+:NVML_ERROR_GPU_IS_LOST,"
                                      "nvmlDeviceGetName:4:NVML_ERROR_IN_USE",
                                      &f, err, sizeof(err)),
                     0);
    const struct sim_fault *hit = NULL;
    /* Functions not named are neither failed nor counted. */
    for (int i = 0; i < 5; i++)
        assert_int_equal(sim_faults_next(&f, "nvmlDeviceGetIndex", &hit), NVML_SUCCESS);
    assert_null(hit);
    /* Two entries of one function share its counter: calls 2 and 4 fail, 1, 3 and 5 pass. */
    nvmlReturn_t name_expect[] = { NVML_SUCCESS, NVML_ERROR_TIMEOUT, NVML_SUCCESS, NVML_ERROR_IN_USE, NVML_SUCCESS };
    for (int i = 0; i < 5; i++)
        assert_int_equal(sim_faults_next(&f, "nvmlDeviceGetName", NULL), name_expect[i]);
    /* "3+": the third and every later call. */
    nvmlReturn_t uuid_expect[] = { NVML_SUCCESS, NVML_SUCCESS, NVML_ERROR_GPU_IS_LOST, NVML_ERROR_GPU_IS_LOST,
                                   NVML_ERROR_GPU_IS_LOST };
    for (int i = 0; i < 5; i++) {
        assert_int_equal(sim_faults_next(&f, "nvmlDeviceGetUUID", &hit), uuid_expect[i]);
        assert_true(i < 2 ? hit == NULL : hit == &f.entries[1]);
    }
}

/* Bad schedules: refused whole, with the entry (number and text) and the field named. */
static void test_errors(void **state) {
    (void)state;
    static const struct {
        const char *spec, *msg;
    } cases[] = {
        { "nvmlDeviceGetName", "X: entry 1 'nvmlDeviceGetName': entry: expected FUNCTION:N:ERROR" },
        { "nvmlDeviceGetName:1", "X: entry 1 'nvmlDeviceGetName:1': entry: expected" },
        { "nvmlDeviceGetNam:1:NVML_ERROR_UNKNOWN", "entry 1 'nvmlDeviceGetNam:1:NVML_ERROR_UNKNOWN': function: not an NVML function" },
        { "nvmlShutdown:1:NVML_ERROR_UNKNOWN", "function: this function cannot be scheduled to fail" },
        { "nvmlDeviceGetName:1:NVML_ERROR_UNKNOWN,gpusliceSimResetGpu:1:NVML_ERROR_UNKNOWN",
          "entry 2 'gpusliceSimResetGpu:1:NVML_ERROR_UNKNOWN': function:" },
        { ":1:NVML_ERROR_UNKNOWN", "entry 1 ':1:NVML_ERROR_UNKNOWN': function:" },
        { "nvmlDeviceGetName:0:NVML_ERROR_UNKNOWN", "call: expected a call number from 1" },
        { "nvmlDeviceGetName::NVML_ERROR_UNKNOWN", "call:" },
        { "nvmlDeviceGetName:+:NVML_ERROR_UNKNOWN", "call:" },
        { "nvmlDeviceGetName:1++:NVML_ERROR_UNKNOWN", "call:" },
        { "nvmlDeviceGetName:-1:NVML_ERROR_UNKNOWN", "call:" },
        { "nvmlDeviceGetName: 1:NVML_ERROR_UNKNOWN", "call:" },
        { "nvmlDeviceGetName:1000000001:NVML_ERROR_UNKNOWN", "call:" },
        { "nvmlDeviceGetName:99999999999999999999999:NVML_ERROR_UNKNOWN", "call:" },
        { "nvmlDeviceGetName:1:NVML_SUCCESS", "error: expected an NVML error name" },
        { "nvmlDeviceGetName:1:GPU_IS_LOST", "error:" },
        { "nvmlDeviceGetName:1:NVML_ERROR_GPU_IS_LOST:x", "error:" },
        { "nvmlDeviceGetName:1:15", "error:" },
        { "nvmlDeviceGetName:1:NVML_ERROR_UNKNOWN,", "entry 2 '': entry: empty" },
        { ",nvmlDeviceGetName:1:NVML_ERROR_UNKNOWN", "entry 1 '': entry: empty" },
        { "nvmlDeviceGetName:1:NVML_ERROR_UNKNOWN,,nvmlDeviceGetName:2:NVML_ERROR_UNKNOWN", "entry 2 '': entry: empty" },
    };
    for (size_t i = 0; i < GS_ARRAY_SIZE(cases); i++) {
        struct sim_faults f;
        char err[256] = "";
        assert_int_equal(sim_faults_parse("X", cases[i].spec, &f, err, sizeof(err)), -EINVAL);
        if (!strstr(err, cases[i].msg))
            fail_msg("'%s': got '%s', expected '%s'", cases[i].spec, err, cases[i].msg);
        assert_int_equal(f.n, 0);
    }
    /* At most SIM_FAULTS_MAX entries. */
    char spec[SIM_FAULTS_MAX * 48 + 64] = "";
    for (int i = 0; i <= SIM_FAULTS_MAX; i++)
        snprintf(spec + strlen(spec), sizeof(spec) - strlen(spec), "%snvmlDeviceGetName:%d:NVML_ERROR_UNKNOWN",
                 i ? "," : "", i + 1);
    struct sim_faults f;
    char err[256] = "";
    assert_int_equal(sim_faults_parse("X", spec, &f, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "entry 33 "));
    assert_non_null(strstr(err, "more than 32 entries"));
}

/* Every function a schedule may name is one the library exports: a misspelt table entry would
 * accept a schedule that never fires. */
static void test_functions_exported(void **state) {
    (void)state;
    void *dl = dlopen(sim_lib(), RTLD_NOW | RTLD_LOCAL);
    assert_non_null(dl);
    size_t n = 0;
    for (const char *fn; (fn = sim_faults_function(n)); n++)
        if (!dlsym(dl, fn))
            fail_msg("%s is in the fault table but not exported by %s", fn, sim_lib());
    assert_true(n > 50);
    assert_string_equal(sim_faults_error_name(NVML_ERROR_GPU_IS_LOST), "NVML_ERROR_GPU_IS_LOST");
    assert_null(sim_faults_error_name(NVML_SUCCESS));
    dlclose(dl);
}

static const char *const L4 = "gpus:\n  - model: L4\n";

/* The library fails exactly the scheduled calls, counted from gpusliceSimSetFaults. */
static void test_library_applies_schedule(void **state) {
    (void)state;
    struct sim_fixture f;
    assert_int_equal(sim_fixture_open(&f, L4), 0);
    nvmlDevice_t d = sim_device(&f, 0);
    assert_non_null(d);
    nvmlMemory_t mem;
    assert_int_equal(f.api->DeviceGetMemoryInfo(d, &mem), NVML_SUCCESS); /* before arming: not counted */
    assert_int_equal(sim_fixture_faults(&f, "nvmlDeviceGetMemoryInfo:2:NVML_ERROR_GPU_IS_LOST,"
                                            "nvmlDeviceGetHandleByIndex:2+:NVML_ERROR_UNKNOWN"),
                     0);
    assert_int_equal(f.api->DeviceGetMemoryInfo(d, &mem), NVML_SUCCESS);
    assert_int_equal(f.api->DeviceGetMemoryInfo(d, &mem), NVML_ERROR_GPU_IS_LOST);
    assert_int_equal(f.api->DeviceGetMemoryInfo(d, &mem), NVML_SUCCESS);
    nvmlDevice_t h;
    assert_int_equal(f.api->DeviceGetHandleByIndex(0, &h), NVML_SUCCESS);
    for (int i = 0; i < 3; i++)
        assert_int_equal(f.api->DeviceGetHandleByIndex(0, &h), NVML_ERROR_UNKNOWN);
    /* The backend's inventory keeps the GPU with the error its handle lookup got. */
    struct gs_inventory *inv = calloc(1, sizeof(*inv));
    assert_int_equal(gpu_inventory_read(f.node, inv), 0);
    assert_string_equal(inv->gpus[0].error, "Unknown Error");
    assert_false(inv->gpus[0].lost);
    /* A bad schedule is refused and leaves the armed one in place; "" clears it. */
    assert_int_equal(sim_fixture_faults(&f, "nvmlDeviceGetHandleByIndex:x:NVML_ERROR_UNKNOWN"), -EINVAL);
    assert_int_equal(f.api->DeviceGetHandleByIndex(0, &h), NVML_ERROR_UNKNOWN);
    assert_int_equal(sim_fixture_faults(&f, ""), 0);
    assert_int_equal(f.api->DeviceGetHandleByIndex(0, &h), NVML_SUCCESS);
    assert_int_equal(gpu_inventory_read(f.node, inv), 0);
    assert_string_equal(inv->gpus[0].error, "");
    assert_string_equal(inv->gpus[0].name, "NVIDIA L4");
    free(inv);
    sim_fixture_close(&f);
}

/* GPUSLICE_SIM_FAULTS is read by nvmlInit: a bad one fails it (the library names the entry on
 * stderr), a good one counts from there. */
static void test_environment(void **state) {
    (void)state;
    struct sim_fixture f;
    setenv("GPUSLICE_SIM_FAULTS", "nvmlDeviceGetCount:1:NVML_ERROR_NOPE", 1);
    assert_int_not_equal(sim_fixture_open(&f, L4), 0);
    assert_null(f.node);
    sim_fixture_close(&f);
    setenv("GPUSLICE_SIM_FAULTS", "nvmlDeviceGetCount_v2:1:NVML_ERROR_TIMEOUT", 1);
    assert_int_equal(sim_fixture_open(&f, L4), 0);
    unsetenv("GPUSLICE_SIM_FAULTS");
    unsigned n = 0;
    assert_int_equal(f.api->DeviceGetCount(&n), NVML_ERROR_TIMEOUT);
    assert_int_equal(f.api->DeviceGetCount(&n), NVML_SUCCESS);
    assert_int_equal(n, 1);
    sim_fixture_close(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_entries),
        cmocka_unit_test(test_counting),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_functions_exported),
        cmocka_unit_test(test_library_applies_schedule),
        cmocka_unit_test(test_environment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
