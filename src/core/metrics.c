/* metrics.c: Prometheus text exposition of the node's GPUs, slices and the agent's counters. */
#include "core/metrics.h"

#include <errno.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

struct out {
    char *buf;
    size_t len, off;
    bool full;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...) {
    if (o->full)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(o->buf + o->off, o->len - o->off, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= o->len - o->off)
        o->full = true;
    else
        o->off += (size_t)w;
}

/* A label value: backslash, double quote and newline escaped. */
static const char *esc(const char *in, char *out, size_t len) {
    size_t n = 0;
    for (; *in && n + 2 < len; in++) {
        if (*in == '\\' || *in == '"' || *in == '\n') {
            out[n++] = '\\';
            out[n++] = *in == '\n' ? 'n' : *in;
        } else {
            out[n++] = *in;
        }
    }
    out[n] = '\0';
    return out;
}

static void header(struct out *o, const char *name, const char *type, const char *help) {
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void gs_metrics_count_alloc(struct gs_metrics_counters *c, const char *resource, bool ok) {
    unsigned i = 0;
    while (i < c->n_resources && strcmp(c->res[i].name, resource))
        i++;
    if (i == c->n_resources) {
        if (c->n_resources == GS_PLAN_MAX_RESOURCES)
            return;
        c->n_resources++;
        snprintf(c->res[i].name, sizeof(c->res[i].name), "%s", resource);
    }
    if (ok)
        c->res[i].allocations++;
    else
        c->res[i].errors++;
}

const struct gs_pod_device *gs_metrics_pod_of(const struct gs_metrics_counters *c, const char *resource,
                                              const char *device) {
    for (unsigned i = 0; c->pods_known && device[0] && i < c->n_pod_devices; i++)
        if (!strcmp(c->pod_devices[i].resource, resource) && !strcmp(c->pod_devices[i].device, device))
            return &c->pod_devices[i];
    return NULL;
}

int gs_metrics_format(const struct gs_inventory *inv, const struct gs_plan *plan, const struct gs_health *health,
                      const struct gs_metrics_counters *c, char *buf, size_t len) {
    struct out o = { buf, len, 0, false };
    char e1[2 * GS_UUID_LEN], e2[2 * GS_UUID_LEN], e3[2 * GS_RESOURCE_NAME_MAX];
#define GPU_LABELS "gpu=\"%u\",UUID=\"%s\""
#define GPU_ARGS(i) (i), esc(inv->gpus[i].uuid, e1, sizeof(e1))

    header(&o, "gpuslice_gpu_info", "gauge", "A GPU of the node (always 1), with its model and sharing mode.");
    for (unsigned i = 0; i < inv->n_gpus; i++)
        put(&o, "gpuslice_gpu_info{" GPU_LABELS ",model_name=\"%s\",mode=\"%s\"} 1\n", GPU_ARGS(i),
            esc(inv->gpus[i].name, e2, sizeof(e2)), i < plan->n_gpus ? gs_mode_name(plan->gpus[i].mode) : "unknown");
    header(&o, "gpuslice_gpu_memory_total_bytes", "gauge", "GPU memory in total.");
    for (unsigned i = 0; i < inv->n_gpus; i++)
        put(&o, "gpuslice_gpu_memory_total_bytes{" GPU_LABELS "} %llu\n", GPU_ARGS(i), inv->gpus[i].mem_total);
    header(&o, "gpuslice_gpu_memory_used_bytes", "gauge", "GPU memory in use, as NVML reports it.");
    for (unsigned i = 0; i < inv->n_gpus; i++)
        put(&o, "gpuslice_gpu_memory_used_bytes{" GPU_LABELS "} %llu\n", GPU_ARGS(i), inv->gpus[i].mem_used);
    header(&o, "gpuslice_gpu_utilization_ratio", "gauge",
           "Fraction of the last sample period a kernel ran (NVML utilization.gpu / 100).");
    for (unsigned i = 0; i < inv->n_gpus; i++)
        if (inv->gpus[i].util_valid)
            put(&o, "gpuslice_gpu_utilization_ratio{" GPU_LABELS "} %.2f\n", GPU_ARGS(i), inv->gpus[i].util_gpu / 100.0);
    header(&o, "gpuslice_gpu_temperature_celsius", "gauge", "GPU core temperature (NVML, dcgm-exporter's DCGM_FI_DEV_GPU_TEMP).");
    for (unsigned i = 0; i < inv->n_gpus; i++)
        if (inv->gpus[i].temp_valid)
            put(&o, "gpuslice_gpu_temperature_celsius{" GPU_LABELS "} %u\n", GPU_ARGS(i), inv->gpus[i].temperature_c);
    header(&o, "gpuslice_gpu_power_usage_watts", "gauge", "Board power draw (NVML, dcgm-exporter's DCGM_FI_DEV_POWER_USAGE).");
    for (unsigned i = 0; i < inv->n_gpus; i++)
        if (inv->gpus[i].power_valid)
            put(&o, "gpuslice_gpu_power_usage_watts{" GPU_LABELS "} %.3f\n", GPU_ARGS(i), inv->gpus[i].power_mw / 1000.0);
    header(&o, "gpuslice_gpu_healthy", "gauge", "1 if the GPU is healthy (no critical Xid, not lost), else 0.");
    for (unsigned i = 0; i < inv->n_gpus; i++)
        put(&o, "gpuslice_gpu_healthy{" GPU_LABELS "} %d\n", GPU_ARGS(i),
            !inv->gpus[i].lost && !(health && i < GS_MAX_GPUS && health->unhealthy[i]));
    header(&o, "gpuslice_gpu_xid_errors_total", "counter", "Xid events seen on the GPU since the agent started.");
    for (unsigned i = 0; i < inv->n_gpus && i < GS_MAX_GPUS; i++)
        put(&o, "gpuslice_gpu_xid_errors_total{" GPU_LABELS "} %llu\n", GPU_ARGS(i), c->xid_total[i]);
    header(&o, "gpuslice_gpu_processes", "gauge", "Compute processes on the GPU.");
    for (unsigned i = 0; i < inv->n_gpus; i++)
        put(&o, "gpuslice_gpu_processes{" GPU_LABELS "} %u\n", GPU_ARGS(i), inv->gpus[i].n_procs);

    header(&o, "gpuslice_mig_device_memory_bytes", "gauge", "Memory of a MIG device (GPU instance).");
    for (unsigned i = 0; i < inv->n_gpus; i++)
        for (unsigned k = 0; k < inv->gpus[i].n_mig; k++) {
            const struct gs_mig_device *m = &inv->gpus[i].mig[k];
            put(&o, "gpuslice_mig_device_memory_bytes{" GPU_LABELS ",GPU_I_ID=\"%u\",GPU_I_PROFILE=\"%s\",mig_uuid=\"%s\"} %llu\n",
                GPU_ARGS(i), m->gi_id, esc(m->profile, e2, sizeof(e2)), esc(m->uuid, e3, sizeof(e3)), m->mem_mib << 20);
        }

    header(&o, "gpuslice_resource_devices", "gauge", "Devices advertised to the kubelet, by resource and health.");
    for (unsigned i = 0; i < plan->n_resources; i++) {
        const struct gs_resource *r = &plan->resources[i];
        unsigned healthy = 0;
        for (unsigned k = 0; k < r->n_devices; k++)
            healthy += r->devices[k].healthy;
        esc(r->name, e3, sizeof(e3));
        put(&o, "gpuslice_resource_devices{resource=\"%s\",health=\"healthy\"} %u\n", e3, healthy);
        put(&o, "gpuslice_resource_devices{resource=\"%s\",health=\"unhealthy\"} %u\n", e3, r->n_devices - healthy);
    }
    header(&o, "gpuslice_replica_memory_quota_bytes", "gauge",
           "VRAM the guard allows one time-sliced replica (memoryPerReplica).");
    for (unsigned i = 0; i < plan->n_resources; i++) {
        const struct gs_resource *r = &plan->resources[i];
        for (unsigned k = 0; k < r->n_devices; k++)
            if (r->devices[k].kind == GS_DEV_REPLICA && r->devices[k].quota)
                put(&o, "gpuslice_replica_memory_quota_bytes{resource=\"%s\",device=\"%s\"} %llu\n",
                    esc(r->name, e3, sizeof(e3)), esc(r->devices[k].id, e1, sizeof(e1)), r->devices[k].quota);
    }
    /* The guard's figures per allocation, attributed to the pod that holds its devices. */
    static const struct {
        const char *name, *help;
        size_t field;
    } guard_metrics[] = {
        { "gpuslice_guard_memory_limit_bytes", "VRAM quota of a guarded allocation on a GPU.",
          offsetof(struct gs_guard_usage, limit) },
        { "gpuslice_guard_memory_used_bytes", "VRAM the guard counted for the allocation (all its processes).",
          offsetof(struct gs_guard_usage, counted) },
        { "gpuslice_guard_memory_nvml_bytes",
          "VRAM NVML reports for the allocation's processes (includes what no hook sees, such as contexts).",
          offsetof(struct gs_guard_usage, nvml) },
    };
    for (size_t m = 0; m < sizeof(guard_metrics) / sizeof(guard_metrics[0]); m++) {
        header(&o, guard_metrics[m].name, "gauge", guard_metrics[m].help);
        for (unsigned i = 0; i < c->n_guard; i++) {
            const struct gs_guard_usage *g = &c->guard[i];
            const struct gs_pod_device *pd = gs_metrics_pod_of(c, g->resource, g->device);
            char ns[128], pod[256], ctr[128];
            unsigned long long v;
            memcpy(&v, (const char *)g + guard_metrics[m].field, sizeof(v));
            put(&o, "%s{allocation=\"%s\",UUID=\"%s\",namespace=\"%s\",pod=\"%s\",container=\"%s\"} %llu\n",
                guard_metrics[m].name, esc(g->allocation, e3, sizeof(e3)), esc(g->uuid, e1, sizeof(e1)),
                esc(pd ? pd->ns : "", ns, sizeof(ns)), esc(pd ? pd->pod : "", pod, sizeof(pod)),
                esc(pd ? pd->container : "", ctr, sizeof(ctr)), v);
        }
    }
    header(&o, "gpuslice_pod_device_info", "gauge",
           "A device the kubelet assigned to a container (PodResources), always 1.");
    for (unsigned i = 0; i < c->n_pod_devices; i++) {
        const struct gs_pod_device *pd = &c->pod_devices[i];
        char ns[128], pod[256], ctr[128];
        put(&o, "gpuslice_pod_device_info{namespace=\"%s\",pod=\"%s\",container=\"%s\",resource=\"%s\",device=\"%s\"} 1\n",
            esc(pd->ns, ns, sizeof(ns)), esc(pd->pod, pod, sizeof(pod)), esc(pd->container, ctr, sizeof(ctr)),
            esc(pd->resource, e3, sizeof(e3)), esc(pd->device, e1, sizeof(e1)));
    }
    header(&o, "gpuslice_pod_gpu_utilization_ratio", "gauge",
           "Share of the GPU's time (of the MIG device's, with mig_uuid) a container's processes kept it busy, mean "
           "over the last sampling interval; empty namespace/pod/container: processes of no known container.");
    for (unsigned i = 0; i < c->n_pod_util; i++) {
        const struct gs_pod_util *u = &c->pod_util[i];
        char ns[128], pod[256], ctr[128];
        put(&o, "gpuslice_pod_gpu_utilization_ratio{namespace=\"%s\",pod=\"%s\",container=\"%s\",gpu=\"%u\",UUID=\"%s\"",
            esc(u->ns, ns, sizeof(ns)), esc(u->pod, pod, sizeof(pod)), esc(u->container, ctr, sizeof(ctr)), u->gpu,
            esc(u->uuid, e1, sizeof(e1)));
        if (u->mig_uuid[0])
            put(&o, ",GPU_I_ID=\"%u\",GPU_I_PROFILE=\"%s\",mig_uuid=\"%s\"", u->gi_id, esc(u->profile, e2, sizeof(e2)),
                esc(u->mig_uuid, e3, sizeof(e3)));
        put(&o, "} %.4f\n", u->ratio);
    }
    header(&o, "gpuslice_mps_daemon_state", "gauge",
           "1 for the state the MPS control daemon of a GPU or MIG instance is in (running, starting, restarting, failed).");
    for (unsigned i = 0; i < c->n_mps; i++)
        put(&o, "gpuslice_mps_daemon_state{UUID=\"%s\",state=\"%s\"} 1\n", esc(c->mps[i].uuid, e1, sizeof(e1)),
            esc(c->mps[i].state, e2, sizeof(e2)));
    header(&o, "gpuslice_mps_daemon_restarts_total", "counter", "Restarts of the MPS control daemon of a GPU or MIG instance.");
    for (unsigned i = 0; i < c->n_mps; i++)
        put(&o, "gpuslice_mps_daemon_restarts_total{UUID=\"%s\"} %u\n", esc(c->mps[i].uuid, e1, sizeof(e1)),
            c->mps[i].restarts);
    header(&o, "gpuslice_allocations_total", "counter", "Allocate calls answered, by resource.");
    for (unsigned i = 0; i < c->n_resources; i++)
        put(&o, "gpuslice_allocations_total{resource=\"%s\"} %llu\n", esc(c->res[i].name, e3, sizeof(e3)),
            c->res[i].allocations);
    header(&o, "gpuslice_allocation_errors_total", "counter", "Allocate calls refused, by resource.");
    for (unsigned i = 0; i < c->n_resources; i++)
        put(&o, "gpuslice_allocation_errors_total{resource=\"%s\"} %llu\n", esc(c->res[i].name, e3, sizeof(e3)),
            c->res[i].errors);
    header(&o, "gpuslice_reconcile_duration_seconds", "gauge", "Time the last inventory read and plan took.");
    put(&o, "gpuslice_reconcile_duration_seconds %.6f\n", c->reconcile_seconds);
    header(&o, "gpuslice_reconcile_errors_total", "counter", "Inventory reads or plans that failed.");
    put(&o, "gpuslice_reconcile_errors_total %llu\n", c->reconcile_errors);
    header(&o, "gpuslice_policy_reloads_total", "counter", "Policy reloads, by result.");
    put(&o, "gpuslice_policy_reloads_total{result=\"applied\"} %llu\n", c->policy_reloads);
    put(&o, "gpuslice_policy_reloads_total{result=\"rejected\"} %llu\n", c->policy_reload_errors);
#undef GPU_LABELS
#undef GPU_ARGS
    if (o.full)
        return -ENOSPC;
    return (int)o.off;
}
