/* health.c: one message of the resource-health stream (see health.h). */
#include "dra/health.h"

#include <stdio.h>
#include <string.h>

#include "dra/slices.h"

static V1alpha1__HealthStatus status_of(enum dra_health h) {
    switch (h) {
    case DRA_HEALTH_HEALTHY:
        return V1ALPHA1__HEALTH_STATUS__HEALTHY;
    case DRA_HEALTH_UNHEALTHY:
        return V1ALPHA1__HEALTH_STATUS__UNHEALTHY;
    default:
        return V1ALPHA1__HEALTH_STATUS__UNKNOWN;
    }
}

static bool listed(const struct dra_health_msg *m, const char *name) {
    for (size_t i = 0; i < m->resp.n_devices; i++)
        if (!strcmp(m->name[i], name))
            return true;
    return false;
}

/* name's entry, with the health (and message) of d (NULL: Unknown). */
static void add(struct dra_health_msg *m, const char *name, const struct dra_device *d, int64_t now, size_t *left) {
    if (listed(m, name))
        return;
    size_t i = m->resp.n_devices;
    if (i >= DRA_HEALTH_MAX) {
        (*left)++;
        return;
    }
    snprintf(m->name[i], sizeof(m->name[i]), "%s", name);
    snprintf(m->message[i], sizeof(m->message[i]), "%s", d ? d->health_message : "its GPU is not on the node");
    v1alpha1__device_identifier__init(&m->id[i]);
    m->id[i].pool_name = m->pool;
    m->id[i].device_name = m->name[i];
    v1alpha1__device_health__init(&m->dev[i]);
    m->dev[i].device = &m->id[i];
    m->dev[i].health = status_of(d ? d->health : DRA_HEALTH_UNKNOWN);
    m->dev[i].last_updated_time = now;
    m->dev[i].health_check_timeout_seconds = DRA_HEALTH_TIMEOUT_S;
    m->dev[i].message = m->message[i];
    m->ptrs[i] = &m->dev[i];
    m->resp.n_devices = i + 1;
}

static const struct dra_device *gpu_of(const char *device, const struct dra_device *devs, size_t n) {
    struct gs_dra_device_ref ref;
    if (gs_dra_device_parse(device, &ref) < 0)
        return NULL;
    for (size_t k = 0; k < n; k++)
        if (devs[k].index == ref.gpu)
            return &devs[k];
    return NULL;
}

void dra_health_build(const char *pool, const struct dra_device *devs, size_t n, const struct dra_checkpoint *cp,
                      int64_t now, struct dra_health_msg *out, size_t *left_out) {
    v1alpha1__node_watch_resources_response__init(&out->resp);
    out->resp.devices = out->ptrs;
    snprintf(out->pool, sizeof(out->pool), "%s", pool);
    *left_out = 0;
    for (size_t k = 0; k < n; k++)
        add(out, devs[k].name, &devs[k], now, left_out);
    for (size_t c = 0; cp && c < cp->n; c++)
        for (unsigned j = 0; j < cp->claims[c].n_devices; j++) {
            const struct dra_prepared_device *p = &cp->claims[c].devices[j];
            if (!strcmp(p->pool, pool))
                add(out, p->device, gpu_of(p->device, devs, n), now, left_out);
        }
}
