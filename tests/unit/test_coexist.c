/* test_coexist.c: another device plugin's resources and GPUs (src/agent/coexist.h), on a
 * device-plugins directory of the test's own (a listening socket of another plugin, the kubelet's
 * checkpoint). Linked with -Wl,--wrap=gs_read_file: every file coexist.c reads goes through
 * __wrap_gs_read_file below, which counts the reads of the checkpoint, so that a check reads it
 * once, whatever uses it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent/coexist.h"
#include "agent/state.h"
#include "kubelet/plugindir.h"
#include "util/util.h"

#include "inventory_fixture.h"

int __real_gs_read_file(const char *path, size_t max, char **out, size_t *len);
int __wrap_gs_read_file(const char *path, size_t max, char **out, size_t *len);

static unsigned checkpoint_reads;

int __wrap_gs_read_file(const char *path, size_t max, char **out, size_t *len) {
    size_t n = strlen(path), m = strlen(GS_KL_CHECKPOINT_NAME);
    if (n >= m && !strcmp(path + n - m, GS_KL_CHECKPOINT_NAME))
        checkpoint_reads++;
    return __real_gs_read_file(path, max, out, len);
}

struct fx {
    char dir[64];
    int sock;                      /* the other plugin's listening socket (-1: none) */
    struct agent_options o;
    struct gs_policy policy;
    struct gs_inventory *inv;
    struct agent *a;
};

static void write_file(const char *dir, const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static void listen_on(struct fx *x, const char *name) {
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", x->dir, name);
    x->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(x->sock >= 0);
    assert_int_equal(bind(x->sock, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(x->sock, 4), 0);
}

static int setup(void **state) {
    struct fx *x = calloc(1, sizeof(*x));
    assert_non_null(x);
    snprintf(x->dir, sizeof(x->dir), "/tmp/gs-coexist-XXXXXX");
    assert_non_null(mkdtemp(x->dir));
    x->sock = -1;
    x->o.kubelet_dir = x->dir;
    x->inv = fx_node("580.65.06", 13000);
    fx_gpu(x->inv, "NVIDIA H100 80GB HBM3", FX_HOPPER, 9, 0, 80);
    fx_gpu(x->inv, "NVIDIA H100 80GB HBM3", FX_HOPPER, 9, 0, 80);
    x->a = calloc(1, sizeof(*x->a));
    assert_non_null(x->a);
    x->a->o = &x->o;
    x->a->policy = &x->policy;
    x->a->inv = x->inv;
    checkpoint_reads = 0;
    *state = x;
    return 0;
}

static int teardown(void **state) {
    struct fx *x = *state;
    char cmd[128];
    if (x->sock >= 0)
        close(x->sock);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", x->dir);
    assert_int_equal(system(cmd), 0);
    free(x->a);
    free(x->inv);
    free(x);
    return 0;
}

/* A plan of one resource, `name`, with one device: the whole GPU g. */
static void plan_one(struct gs_plan *plan, const struct gs_inventory *inv, const char *name, unsigned g) {
    memset(plan, 0, sizeof(*plan));
    plan->n_resources = 1;
    struct gs_resource *r = &plan->resources[0];
    gs_strlcpy(r->name, name, sizeof(r->name));
    r->devices = calloc(1, sizeof(*r->devices));
    assert_non_null(r->devices);
    r->n_devices = r->cap = 1;
    gs_strlcpy(r->devices[0].id, inv->gpus[g].uuid, sizeof(r->devices[0].id));
    gs_strlcpy(r->devices[0].uuid, inv->gpus[g].uuid, sizeof(r->devices[0].uuid));
    r->devices[0].gpu = g;
    plan->n_gpus = inv->n_gpus;
    for (unsigned i = 0; i < inv->n_gpus; i++)
        plan->gpus[i].resource = i == g ? r->name : NULL;
}

/* The checkpoint registers GPU g under `name`, as another plugin does. */
static void checkpoint_with(const struct fx *x, const char *name, unsigned g) {
    char text[512];
    snprintf(text, sizeof(text),
             "{\"Data\":{\"PodDeviceEntries\":null,\"RegisteredDevices\":{\"%s\":[\"%s\"]}},\"Checksum\":1}", name,
             x->inv->gpus[g].uuid);
    write_file(x->dir, GS_KL_CHECKPOINT_NAME, text);
}

/* share, another plugin listening: both of the checkpoint's uses (the resources it registers
 * with IDs not ours, the GPUs its devices name) come from one read per check. */
static void test_share_reads_checkpoint_once_per_check(void **state) {
    struct fx *x = *state;
    x->policy.other_plugin = GS_OTHER_SHARE;
    listen_on(x, "other-plugin.sock");
    checkpoint_with(x, "nvidia.com/gpu", 1);
    for (unsigned poll = 1; poll <= 2; poll++) {
        struct gs_plan plan;
        plan_one(&plan, x->inv, "nvidia.com/gpu", 0);
        agent_coexist_apply(x->a, &plan);
        assert_int_equal(checkpoint_reads, poll);
        /* the resource the other registers GPU 1 under is left out, and GPU 1 with it */
        assert_int_equal(x->a->coexist.n, 1);
        assert_string_equal(x->a->coexist.c[0].resource, "nvidia.com/gpu");
        assert_non_null(strstr(x->a->coexist.c[0].by, "other-plugin.sock"));
        assert_non_null(strstr(x->a->coexist.c[0].by, x->inv->gpus[1].uuid));
        assert_false(x->a->coexist.gpu[0]);
        assert_true(x->a->coexist.gpu[1]);
        assert_int_equal(plan.n_resources, 0);
        gs_plan_free(&plan);
    }
}

/* share: the checkpoint read for the GPUs only (no other socket; NVIDIA's not listening either,
 * so nothing to look for: not read at all); and a resource of another name keeps GPU 0. */
static void test_share_reads_checkpoint_only_when_needed(void **state) {
    struct fx *x = *state;
    x->policy.other_plugin = GS_OTHER_SHARE;
    checkpoint_with(x, "example.com/gpu", 1);
    struct gs_plan plan;
    plan_one(&plan, x->inv, "nvidia.com/gpu", 0);
    agent_coexist_apply(x->a, &plan);
    assert_int_equal(checkpoint_reads, 0);
    assert_int_equal(plan.n_resources, 1);
    gs_plan_free(&plan);

    listen_on(x, "example.sock");
    plan_one(&plan, x->inv, "nvidia.com/gpu", 0);
    agent_coexist_apply(x->a, &plan);
    assert_int_equal(checkpoint_reads, 1);
    assert_int_equal(x->a->coexist.n, 0);  /* example.com/gpu is not ours: no resource of ours conflicts */
    assert_false(x->a->coexist.gpu[0]);
    assert_true(x->a->coexist.gpu[1]);     /* but its GPU is the other's */
    assert_int_equal(plan.n_resources, 1);
    assert_string_equal(plan.resources[0].name, "nvidia.com/gpu");
    gs_plan_free(&plan);
}

/* refuse: the checkpoint is read for the resources only, once; a bad one is named and changes
 * nothing. */
static void test_refuse_bad_checkpoint(void **state) {
    struct fx *x = *state;
    x->policy.other_plugin = GS_OTHER_REFUSE;
    listen_on(x, "example.sock");
    write_file(x->dir, GS_KL_CHECKPOINT_NAME, "{\"Data\":{\"RegisteredDevices\":{\"nvidia.com/gpu\":7}}}");
    struct gs_plan plan;
    plan_one(&plan, x->inv, "nvidia.com/gpu", 0);
    agent_coexist_apply(x->a, &plan);
    assert_int_equal(checkpoint_reads, 1);
    assert_int_equal(x->a->coexist.n, 0);
    assert_int_equal(plan.n_resources, 1);
    gs_plan_free(&plan);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_share_reads_checkpoint_once_per_check, setup, teardown),
        cmocka_unit_test_setup_teardown(test_share_reads_checkpoint_only_when_needed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refuse_bad_checkpoint, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
