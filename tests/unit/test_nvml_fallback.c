/* test_nvml_fallback.c: against an old NVML (fake_nvml_old.so: unversioned names only, v1
 * process struct, no MIG calls) the backend resolves the fallbacks, reads processes with the
 * right stride, and reports MIG as unsupported instead of failing. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gpu/gpu.h"

static void test_old_driver(void **state) {
    (void)state;
    struct gpu_node *n;
    char err[512];
    assert_int_equal(gpu_node_open(GS_FAKE_OLD_LIB, &n, err, sizeof(err)), 0);
    const struct nvml_api *a = gpu_node_api(n);
    assert_true(a->processes_v1);
    assert_true(a->profile_info_v1);
    assert_null(a->DeviceGetMigMode);
    struct gs_inventory *inv = calloc(1, sizeof(*inv));
    assert_int_equal(gpu_inventory_read(n, inv), 0);
    assert_int_equal(inv->n_gpus, 2);
    assert_string_equal(inv->gpus[0].name, "Tesla T4");
    assert_false(inv->gpus[0].mig_capable);
    assert_int_equal(inv->gpus[1].n_procs, 2);
    assert_int_equal(inv->gpus[1].procs[0].pid, 1000);
    assert_int_equal(inv->gpus[1].procs[1].pid, 1001);
    assert_int_equal(inv->gpus[1].procs[1].mem_bytes, 101ULL << 20);
    assert_int_equal(inv->gpus[1].procs[1].gi_id, -1);
    /* MIG operations degrade to a clear error naming the missing function. */
    nvmlReturn_t act;
    assert_int_equal(gpu_mig_set_mode(n, 0, true, &act), -EOPNOTSUPP);
    assert_non_null(strstr(gpu_node_error(n), "nvmlDeviceSetMigMode: not provided by"));
    struct gpu_events *ev;
    assert_int_equal(gpu_events_open(n, &ev), -EOPNOTSUPP);
    free(inv);
    gpu_node_close(n);
}

int main(void) {
    const struct CMUnitTest tests[] = { cmocka_unit_test(test_old_driver) };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
