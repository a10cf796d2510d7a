/* test_drastate.c: the kubelet's DRA manager checkpoint (src/kubelet/drastate.h) as a real
 * kubelet (v1.36.3, tests/e2e/test_dra_util.py's cluster) wrote it: two pods' claims sharing a GPU
 * (tests/unit/data/dra_manager_state.json), a MIG claim (dra_manager_state_mig.json, ShareID null),
 * no claim at all; and damaged or hostile variants, each refused whole with the field named and
 * nothing handed out. Also the pod logs directory's names. */
#include <errno.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kubelet/drastate.h"
#include "util/util.h"

#ifndef GS_SOURCE_ROOT
#error "GS_SOURCE_ROOT must be defined by the build"
#endif

#define MAXD 16
struct got {
    unsigned n;
    char line[MAXD][512];
};

static void collect(const struct gs_kl_dra_device *d, void *ctx) {
    struct got *g = ctx;
    if (g->n < MAXD)
        snprintf(g->line[g->n++], sizeof(g->line[0]), "%s %s/%s pod=%s %s %s/%s", d->claim_uid, d->ns, d->claim,
                 d->pod_uid, d->driver, d->pool, d->device);
}

static char *load(const char *name, size_t *len) {
    char path[512];
    char *text = NULL;
    snprintf(path, sizeof(path), "%s/tests/unit/data/%s", GS_SOURCE_ROOT, name);
    assert_int_equal(gs_read_file(path, 1 << 20, &text, len), 0);
    return text;
}

static int parse(const char *text, size_t len, struct got *g, char *err, size_t errlen) {
    memset(g, 0, sizeof(*g));
    err[0] = '\0';
    return gs_kl_dra_state_each(text, len, collect, g, err, errlen);
}

static void test_real_kubelet_shared_gpu(void **state) {
    (void)state;
    size_t len;
    char *text = load("dra_manager_state.json", &len);
    struct got g;
    char err[256];
    assert_int_equal(parse(text, len, &g, err, sizeof(err)), 0);
    assert_int_equal(g.n, 2);
    assert_string_equal(g.line[0], "c505de19-0be2-46c7-9f51-b90f046e1870 gs-e2e/dra-util-a "
                                   "pod=f03898f2-0fc3-4752-a32b-eeca916a09d4 gpu.gpuslice.io gs-e2e-node/gpu-0");
    assert_string_equal(g.line[1], "64012617-cb6c-4f69-a81f-6b7dc071f9f6 gs-e2e/dra-util-b "
                                   "pod=ac58ae9c-115b-40f0-848c-e1e355560fa2 gpu.gpuslice.io gs-e2e-node/gpu-0");
    free(text);
}

static void test_real_kubelet_mig_and_empty(void **state) {
    (void)state;
    size_t len;
    char *text = load("dra_manager_state_mig.json", &len);
    struct got g;
    char err[256];
    assert_int_equal(parse(text, len, &g, err, sizeof(err)), 0);
    assert_int_equal(g.n, 1);
    assert_string_equal(g.line[0], "a9bc3970-66be-4ee8-9d69-927f1f87e0e2 gs-e2e/dra-util-mig "
                                   "pod=5716f59f-4425-4828-9f2c-8778dd1df8a8 gpu.gpuslice.io gs-e2e-node/gpu-1-mig-3g40gb-9-0");
    free(text);
    /* what the kubelet wrote once the claims were gone */
    const char *empty = "{\"Data\":\"{\\\"kind\\\":\\\"DRACheckpoint\\\",\\\"apiVersion\\\":\\\"checkpoint.dra.kubelet.k8s.io/v1\\\","
                        "\\\"ClaimInfoStateList\\\":[]}\",\"Checksum\":2361995144}";
    assert_int_equal(parse(empty, strlen(empty), &g, err, sizeof(err)), 0);
    assert_int_equal(g.n, 0);
}

static void test_crc32(void **state) {
    (void)state;
    assert_int_equal(gs_kl_crc32("123456789", 9), 0xcbf43926u); /* the standard check value */
    assert_int_equal(gs_kl_crc32("", 0), 0);
}

/* The real shared-GPU checkpoint's Data with edit applied (a JSON text replacing the first
 * occurrence of from with to), wrapped again with the right checksum (malloc'ed). */
static char *variant(const char *from, const char *to) {
    size_t len;
    char *text = load("dra_manager_state.json", &len);
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    assert_non_null(root);
    const char *data = json_string_value(json_object_get(root, "Data"));
    assert_non_null(data);
    const char *at = strstr(data, from);
    assert_non_null(at);
    size_t n = strlen(data) - strlen(from) + strlen(to) + 1;
    char *d = malloc(n);
    assert_non_null(d);
    snprintf(d, n, "%.*s%s%s", (int)(at - data), data, to, at + strlen(from));
    json_t *out = json_pack("{s:s,s:I}", "Data", d, "Checksum", (json_int_t)gs_kl_crc32(d, strlen(d)));
    char *s = json_dumps(out, JSON_COMPACT);
    json_decref(out);
    json_decref(root);
    free(d);
    free(text);
    return s;
}

static void refused(const char *text, size_t len, const char *want) {
    struct got g;
    char err[256];
    assert_int_equal(parse(text, len, &g, err, sizeof(err)), -EINVAL);
    assert_int_equal(g.n, 0); /* nothing handed out */
    if (!strstr(err, want))
        fail_msg("error '%s' does not say '%s'", err, want);
}

static void refused_variant(const char *from, const char *to, const char *want) {
    char *s = variant(from, to);
    refused(s, strlen(s), want);
    free(s);
}

static void test_damaged_and_hostile(void **state) {
    (void)state;
    size_t len;
    char *text = load("dra_manager_state.json", &len);
    /* checksum off, truncated, not JSON, too large */
    char *t = strdup(text);
    char *ck = strstr(t, "\"Checksum\":1655290920");
    assert_non_null(ck);
    ck[strlen("\"Checksum\":165529092")] = '1';
    refused(t, len, "is not the CRC-32 of Data");
    refused(text, len / 2, "not JSON");
    refused(text, 0, "not JSON");
    refused("[]", 2, "no Data string");
    refused("{\"Data\":\"{}\",\"Checksum\":-1}", 27, "Checksum: not a 32-bit");
    refused("{\"Data\":\"{}\",\"Checksum\":1,\"Data\":\"{}\"}", 38, "not JSON"); /* a key twice */
    refused(text, GS_KL_DRA_STATE_MAX + 1, "over");
    /* a Data byte changed without its checksum: refused, not read */
    t[strlen("{\"Data\":\"{\\\"kind\\\":\\\"DRAC")] = 'X';
    refused(t, len, "CRC-32");
    free(t);
    free(text);
    /* Data itself */
    refused_variant("\"kind\":\"DRACheckpoint\"", "\"kind\":\"Other\"", "kind 'Other'");
    refused_variant("checkpoint.dra.kubelet.k8s.io/v1", "checkpoint.dra.kubelet.k8s.io/v2", "apiVersion");
    refused_variant("\"ClaimInfoStateList\"", "\"Entries\"", "ClaimInfoStateList: missing");
    refused_variant("\"ClaimInfoStateList\":[", "\"ClaimInfoStateList\":{\"x\":[", "not JSON"); /* unbalanced */
    refused_variant("\"PodUIDs\":{", "\"PodUIDs\":[1],\"X\":{", "ClaimInfoStateList[0].PodUIDs: not an object");
    refused_variant("\"f03898f2", "\"../../etc", "is not a pod UID");
    refused_variant("\"DeviceName\":\"gpu-0\"", "\"DeviceName\":7", "ClaimInfoStateList[0].DriverState[gpu.gpuslice.io]"
                                                                  ".Devices[0].DeviceName: not a string");
    refused_variant("\"DeviceName\":\"gpu-0\"", "\"DeviceName\":\"\"", "DeviceName: empty");
    refused_variant("\"Namespace\":\"gs-e2e\"", "\"Namespace\":null", "Namespace: not a string");
    refused_variant("\"ClaimName\":\"dra-util-b\"", "\"ClaimName\":\"dra-util-b\",\"ClaimName\":\"x\"", "not JSON");
    refused_variant("\"Devices\":[", "\"Devices\":{\"a\":[", "not JSON");
    refused_variant("\"RequestNames\":[\"gpu\"]", "\"RequestNames\":[1]", "RequestNames[0]: not a string");
    refused_variant("\"ShareID\":\"f3ddb8e6", "\"ShareID\":{},\"S\":\"f3ddb8e6", "ShareID: not a string");
    refused_variant("{\"ClaimUID\"", "7,{\"ClaimUID\"", "ClaimInfoStateList[0]: not an object");
    /* a device name longer than any bound */
    char big[600];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    char to[700];
    snprintf(to, sizeof(to), "\"DeviceName\":\"%s\"", big);
    refused_variant("\"DeviceName\":\"gpu-0\"", to, "DeviceName: longer than its bound");
    /* null lists are no claims, pods or devices */
    char *s = variant("\"PodUIDs\":{\"f03898f2-0fc3-4752-a32b-eeca916a09d4\":{}}", "\"PodUIDs\":null");
    struct got g;
    char err[256];
    assert_int_equal(parse(s, strlen(s), &g, err, sizeof(err)), 0);
    assert_int_equal(g.n, 1); /* b's only */
    free(s);
    s = variant("\"ClaimInfoStateList\":[", "\"ClaimInfoStateList\":null,\"x\":[");
    assert_int_equal(parse(s, strlen(s), &g, err, sizeof(err)), 0);
    assert_int_equal(g.n, 0);
    free(s);
}

static void test_pod_log_dir(void **state) {
    (void)state;
    char ns[64], pod[GS_KL_POD_NAME_MAX], uid[40];
    assert_int_equal(gs_kl_pod_log_dir_parse("gs-e2e_dra-util-a_7e4f2dcf-b281-4e97-919b-a1a1fc43c587", ns, pod, uid), 0);
    assert_string_equal(ns, "gs-e2e");
    assert_string_equal(pod, "dra-util-a");
    assert_string_equal(uid, "7e4f2dcf-b281-4e97-919b-a1a1fc43c587");
    assert_int_equal(gs_kl_pod_log_dir_parse("kube-system_etcd.node-1_abc", ns, pod, uid), 0);
    assert_string_equal(pod, "etcd.node-1");
    const char *bad[] = { "", "a_b", "a_b_c_d", "_b_c", "a__c", "a_b_", "A_b_c", "a_b/x_c", "a_b_c/..", ".",
                          "a_b_0123456789012345678901234567890123456789" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (gs_kl_pod_log_dir_parse(bad[i], ns, pod, uid) != -EINVAL)
            fail_msg("'%s' taken as a pod's directory", bad[i]);
        assert_true(!ns[0] && !pod[0] && !uid[0]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_kubelet_shared_gpu),
        cmocka_unit_test(test_real_kubelet_mig_and_empty),
        cmocka_unit_test(test_crc32),
        cmocka_unit_test(test_damaged_and_hostile),
        cmocka_unit_test(test_pod_log_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
