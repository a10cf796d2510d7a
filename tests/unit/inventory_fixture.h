/* inventory_fixture.h: hand-made inventories, policies and plans for the unit tests of what is
 * rendered from them (test_labels.c, test_metrics.c, test_cdi.c): a node with a driver version,
 * GPUs of a real model's name, architecture, compute capability and memory, and MIG devices; and
 * a matcher of whole lines in the rendered text. Include after cmocka.h. */
#ifndef GS_TEST_INVENTORY_FIXTURE_H
#define GS_TEST_INVENTORY_FIXTURE_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/policy.h"
#include "core/inventory.h"
#include "core/plan.h"

/* NVML architecture numbers (gs_arch_name) */
#define FX_AMPERE 7
#define FX_ADA 8
#define FX_HOPPER 9

static inline struct gs_inventory *fx_node(const char *driver_version, int cuda_driver_version) {
    struct gs_inventory *inv = calloc(1, sizeof(*inv));
    assert_non_null(inv);
    snprintf(inv->driver_version, sizeof(inv->driver_version), "%s", driver_version);
    inv->cuda_driver_version = cuda_driver_version;
    return inv;
}

/* Appends a GPU (index = minor = its position) with a UUID made from its index. */
static inline struct gs_gpu *fx_gpu(struct gs_inventory *inv, const char *name, unsigned arch, int cc_major,
                                    int cc_minor, unsigned long long mem_gib) {
    assert_true(inv->n_gpus < GS_MAX_GPUS);
    unsigned i = inv->n_gpus++;
    struct gs_gpu *g = &inv->gpus[i];
    g->index = g->minor = i;
    g->numa_node = -1;
    g->compute_mode = 0;
    snprintf(g->uuid, sizeof(g->uuid), "GPU-%08x-aaaa-bbbb-cccc-%012x", 0x1000u + i, i);
    snprintf(g->name, sizeof(g->name), "%s", name);
    g->arch = arch;
    g->cc_major = cc_major;
    g->cc_minor = cc_minor;
    g->mem_total = mem_gib << 30;
    return g;
}

/* Adds a MIG device (and puts the GPU in MIG mode). */
static inline struct gs_mig_device *fx_mig(struct gs_gpu *g, const char *profile, unsigned gi, unsigned ci,
                                           unsigned slices, unsigned long long mem_mib, unsigned sm) {
    assert_true(g->n_mig < GS_MAX_MIG_DEVICES);
    g->mig_capable = true;
    g->mig_current = g->mig_pending = 1;
    struct gs_mig_device *m = &g->mig[g->n_mig++];
    memset(m, 0, sizeof(*m));
    snprintf(m->uuid, sizeof(m->uuid), "MIG-%08x-%04x-%04x-0000-000000000000", 0x1000u + g->index, gi, ci);
    snprintf(m->profile, sizeof(m->profile), "%s", profile);
    m->gi_id = gi;
    m->ci_id = ci;
    m->gi_slices = m->ci_slices = slices;
    m->mem_mib = mem_mib;
    m->sm = sm;
    return m;
}

static inline struct gs_policy *fx_policy(const char *yaml) {
    struct gs_policy *p = calloc(1, sizeof(*p));
    assert_non_null(p);
    char err[512];
    if (gs_policy_parse("test.yaml", yaml, strlen(yaml), p, err, sizeof(err)) < 0)
        fail_msg("policy: %s", err);
    return p;
}

/* A policy and the plan it gives for an inventory. */
struct fx_planned {
    struct gs_policy *policy;
    struct gs_plan plan;
};

static inline struct fx_planned fx_plan(const struct gs_inventory *inv, const char *policy_yaml,
                                        const struct gs_health *health) {
    struct fx_planned p = { fx_policy(policy_yaml), { 0 } };
    assert_int_equal(gs_plan_build(inv, p.policy, health, &p.plan), 0);
    return p;
}

static inline void fx_plan_free(struct fx_planned *p) {
    gs_plan_free(&p->plan);
    free(p->policy);
}

/* Does text hold this line, whole? */
static inline bool fx_has_line(const char *text, const char *line) {
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)); p++)
        if ((p == text || p[-1] == '\n') && p[n] == '\n')
            return true;
    return false;
}

#endif
