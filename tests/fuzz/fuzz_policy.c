/* fuzz_policy.c: libFuzzer target for the sharing policy parser. Beyond what the sanitizers
 * catch it checks the parser's promises: an error is one non-empty line starting with the input
 * name and leaves the output alone, and a success is a policy the agent can trust without
 * checking it again (modes, replica ranges, terminated strings, valid resource names). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "config/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool terminated(const char *s, size_t size) { return memchr(s, '\0', size) != NULL; }

/* DOMAIN/NAME with one slash, at most 63 characters: the shape the kubelet accepts. */
static bool resource_ok(const char *s, size_t size, bool may_be_empty) {
    if (!terminated(s, size))
        return false;
    if (!*s)
        return may_be_empty;
    const char *slash = strchr(s, '/');
    return slash && slash != s && slash[1] && !strchr(slash + 1, '/') && strlen(s) < GS_RESOURCE_NAME_MAX;
}

/* MPS shares must fit in one GPU; every limit in range. */
static void check_mps_limits(unsigned replicas, unsigned compute, unsigned long long pinned) {
    if (replicas > GS_MPS_MAX_REPLICAS || compute > 100 || (compute && replicas * compute > 100) || pinned == 0)
        __builtin_trap();
}

static void check_replicated(const struct gs_ts_resource *list, unsigned n, bool mps) {
    for (unsigned i = 0; i < n; i++) {
        const struct gs_ts_resource *r = &list[i];
        if (!resource_ok(r->name, sizeof(r->name), false) || !resource_ok(r->rename, sizeof(r->rename), true))
            __builtin_trap();
        if (r->replicas < 2 || r->replicas > 1024 || r->n_devices > GS_POLICY_MAX_DEVICES ||
            r->devices_count > GS_POLICY_MAX_DEVICES)
            __builtin_trap();
        if (mps)
            check_mps_limits(r->replicas, r->compute_per_replica, r->pinned_per_replica);
        else if (r->compute_per_replica || r->pinned_per_replica)
            __builtin_trap();
        /* exactly one of all / count / list */
        if ((int)r->devices_all + (r->devices_count > 0) + (r->n_devices > 0) != 1)
            __builtin_trap();
        for (unsigned j = 0; j < r->n_devices; j++)
            if (!terminated(r->devices[j].text, sizeof(r->devices[j].text)) || !r->devices[j].text[0])
                __builtin_trap();
    }
}

static void check(const struct gs_policy *p) {
    if (p->mig_strategy > GS_MIG_MIXED || p->id_strategy > GS_ID_INDEX || p->alloc_policy > GS_ALLOC_PACKED)
        __builtin_trap();
    if (p->list_strategy == 0 || (p->list_strategy & ~(unsigned)(GS_LIST_ENVVAR | GS_LIST_VOLUME_MOUNTS |
                                                                 GS_LIST_CDI_ANNOTATIONS | GS_LIST_CDI_CRI)))
        __builtin_trap();
    if (!terminated(p->driver_root, sizeof(p->driver_root)) || p->driver_root[0] != '/' ||
        !terminated(p->dev_root, sizeof(p->dev_root)) || p->dev_root[0] != '/')
        __builtin_trap();

    if (p->n_ts_resources > GS_POLICY_MAX_RESOURCES || (p->ts_present != (p->n_ts_resources > 0)) ||
        p->n_mps_resources > GS_POLICY_MAX_RESOURCES || (p->mps_present && p->ts_present))
        __builtin_trap();
    check_replicated(p->ts_resources, p->n_ts_resources, false);
    check_replicated(p->mps_resources, p->n_mps_resources, true);
    if (!terminated(p->mps_root, sizeof(p->mps_root)) || p->mps_root[0] != '/' ||
        !terminated(p->cdi_annotation_prefix, sizeof(p->cdi_annotation_prefix)) ||
        strlen(p->cdi_annotation_prefix) < 2 || p->cdi_annotation_prefix[strlen(p->cdi_annotation_prefix) - 1] != '/' ||
        !terminated(p->container_driver_root, sizeof(p->container_driver_root)) ||
        (p->container_driver_root[0] && p->container_driver_root[0] != '/'))
        __builtin_trap();

    if (p->n_rules > GS_POLICY_MAX_RULES)
        __builtin_trap();
    for (unsigned i = 0; i < p->n_rules; i++) {
        const struct gs_gpu_rule *r = &p->rules[i];
        if (r->mode < GS_MODE_WHOLE || r->mode > GS_MODE_MPS || r->line == 0)
            __builtin_trap();
        bool shared = r->mode == GS_MODE_TIME_SLICING || r->mode == GS_MODE_MPS;
        if (shared != (r->replicas != 0) || r->replicas > 1024 || r->replicas == 1)
            __builtin_trap();
        if (r->mode == GS_MODE_MPS)
            check_mps_limits(r->replicas, r->compute_per_replica, r->pinned_per_replica);
        if (r->memory_per_replica && !shared)
            __builtin_trap();
        if (!resource_ok(r->resource, sizeof(r->resource), true) ||
            (r->resource[0] && (r->mode == GS_MODE_MIG || r->mode == GS_MODE_DISABLED)))
            __builtin_trap();
        if (r->mode == GS_MODE_MIG && p->mig_strategy == GS_MIG_NONE)
            __builtin_trap();
        switch (r->kind) {
        case GS_SEL_INDEX:
            if (r->index_mask == 0)
                __builtin_trap();
            break;
        case GS_SEL_UUID:
        case GS_SEL_MODEL:
            if (!terminated(r->pattern, sizeof(r->pattern)) || !r->pattern[0] ||
                (r->kind == GS_SEL_UUID && strncmp(r->pattern, "GPU-", 4) != 0))
                __builtin_trap();
            break;
        default:
            __builtin_trap();
        }
    }

    if (p->n_ignored_xids > GS_POLICY_MAX_XIDS || p->recovery_quiet_s > 7u * 24 * 3600)
        __builtin_trap();
    for (unsigned i = 0; i < p->n_ignored_xids; i++)
        if (p->ignored_xids[i] > 65535 || !gs_policy_xid_ignored(p, p->ignored_xids[i]))
            __builtin_trap();

    if (p->n_warnings > 8)
        __builtin_trap();
    for (unsigned i = 0; i < p->n_warnings; i++)
        if (!terminated(p->warnings[i], sizeof(p->warnings[i])) || !p->warnings[i][0] || strchr(p->warnings[i], '\n'))
            __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* static: the struct is about 150 KiB */
    static struct gs_policy p, before;
    char err[512];
    memset(err, 'x', sizeof(err)); /* so a missing terminator shows up */
    memset(&p, 0x5A, sizeof(p));
    memcpy(&before, &p, sizeof(p));

    int r = gs_policy_parse("fuzz.yaml", (const char *)data, size, &p, err, sizeof(err));
    if (r < 0) {
        if (!memchr(err, '\0', sizeof(err)) || strncmp(err, "fuzz.yaml:", 10) != 0 || strchr(err, '\n'))
            __builtin_trap();
        if (memcmp(&p, &before, sizeof(p)) != 0)
            __builtin_trap();
        return 0;
    }
    check(&p);
    return 0;
}
