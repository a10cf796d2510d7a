/* test_dra_health.c: one message of the DRA resource-health stream (src/dra/health.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dra/health.h"

static struct dra_device gpu(unsigned index, enum dra_health h, const char *msg) {
    struct dra_device d;
    memset(&d, 0, sizeof(d));
    snprintf(d.name, sizeof(d.name), "gpu-%u", index);
    d.index = index;
    d.health = h;
    snprintf(d.health_message, sizeof(d.health_message), "%s", msg);
    return d;
}

static const V1alpha1__DeviceHealth *find(const struct dra_health_msg *m, const char *name) {
    for (size_t i = 0; i < m->resp.n_devices; i++)
        if (!strcmp(m->resp.devices[i]->device->device_name, name))
            return m->resp.devices[i];
    return NULL;
}

static void test_devices_with_their_health(void **state) {
    (void)state;
    struct dra_device devs[2] = { gpu(0, DRA_HEALTH_UNHEALTHY, "critical Xid 79"), gpu(1, DRA_HEALTH_HEALTHY, "") };
    struct dra_health_msg *m = malloc(sizeof(*m));
    size_t left = 99;
    dra_health_build("node-a", devs, 2, NULL, 1700000000, m, &left);
    assert_int_equal(left, 0);
    assert_int_equal(m->resp.n_devices, 2);
    const V1alpha1__DeviceHealth *d0 = find(m, "gpu-0"), *d1 = find(m, "gpu-1");
    assert_non_null(d0);
    assert_non_null(d1);
    assert_string_equal(d0->device->pool_name, "node-a");
    assert_int_equal(d0->health, V1ALPHA1__HEALTH_STATUS__UNHEALTHY);
    assert_string_equal(d0->message, "critical Xid 79");
    assert_int_equal(d1->health, V1ALPHA1__HEALTH_STATUS__HEALTHY);
    assert_int_equal(d0->last_updated_time, 1700000000);
    assert_int_equal(d0->health_check_timeout_seconds, DRA_HEALTH_TIMEOUT_S);
    /* it packs as the kubelet reads it */
    size_t len = protobuf_c_message_get_packed_size(&m->resp.base);
    uint8_t *buf = malloc(len);
    protobuf_c_message_pack(&m->resp.base, buf);
    V1alpha1__NodeWatchResourcesResponse *back = v1alpha1__node_watch_resources_response__unpack(NULL, len, buf);
    assert_non_null(back);
    assert_int_equal(back->n_devices, 2);
    v1alpha1__node_watch_resources_response__free_unpacked(back, NULL);
    free(buf);
    free(m);
}

/* Prepared MIG placements are listed with their GPU's health; another pool's devices and a
 * device of a GPU the node does not have are not taken for this node's. */
static void test_prepared_devices_take_their_gpus_health(void **state) {
    (void)state;
    struct dra_device devs[1] = { gpu(0, DRA_HEALTH_UNHEALTHY, "critical Xid 48") };
    struct dra_prepared claims[1];
    memset(claims, 0, sizeof(claims));
    claims[0].n_devices = 4;
    snprintf(claims[0].devices[0].pool, sizeof(claims[0].devices[0].pool), "node-a");
    snprintf(claims[0].devices[0].device, sizeof(claims[0].devices[0].device), "gpu-0-mig-1g-10gb-19-3");
    snprintf(claims[0].devices[1].pool, sizeof(claims[0].devices[1].pool), "node-a");
    snprintf(claims[0].devices[1].device, sizeof(claims[0].devices[1].device), "gpu-0"); /* listed once */
    snprintf(claims[0].devices[2].pool, sizeof(claims[0].devices[2].pool), "node-a");
    snprintf(claims[0].devices[2].device, sizeof(claims[0].devices[2].device), "gpu-7");
    snprintf(claims[0].devices[3].pool, sizeof(claims[0].devices[3].pool), "node-b");
    snprintf(claims[0].devices[3].device, sizeof(claims[0].devices[3].device), "gpu-3");
    struct dra_checkpoint cp = { 1, 1, claims };
    struct dra_health_msg *m = malloc(sizeof(*m));
    size_t left = 0;
    dra_health_build("node-a", devs, 1, &cp, 5, m, &left);
    assert_int_equal(m->resp.n_devices, 3);
    const V1alpha1__DeviceHealth *mig = find(m, "gpu-0-mig-1g-10gb-19-3"), *gone = find(m, "gpu-7");
    assert_non_null(mig);
    assert_int_equal(mig->health, V1ALPHA1__HEALTH_STATUS__UNHEALTHY);
    assert_string_equal(mig->message, "critical Xid 48");
    assert_non_null(gone);
    assert_int_equal(gone->health, V1ALPHA1__HEALTH_STATUS__UNKNOWN);
    assert_null(find(m, "gpu-3"));
    free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_devices_with_their_health),
        cmocka_unit_test(test_prepared_devices_take_their_gpus_health),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
