/* agent.c (cli): `gpuslice agent` (the node daemon) and `gpuslice apply` (the one-shot form:
 * what the node would advertise under a policy, without serving the kubelet). */
#include <errno.h>
#include <stddef.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent.h"
#include "kubelet/podresources.h"
#include "cdi/cdi.h"
#include "cli/cli.h"
#include "dra/dra.h"
#include "core/labels.h"
#include "core/plan.h"
#include "util/log.h"
#include "util/util.h"

#define DEFAULT_KUBELET_DIR "/var/lib/kubelet/device-plugins"

static const char *kind_name(enum gs_dev_kind k) {
    return k == GS_DEV_REPLICA ? "replica" : k == GS_DEV_MIG ? "mig" : k == GS_DEV_MPS ? "mps" : "whole";
}

int cmd_agent(const struct cli *cli, int argc, char **argv) {
    enum { OPT_KUBELET_DIR = 256, OPT_PROC_ROOT, OPT_SYSFS_ROOT, OPT_POLL, OPT_MIG_STATUS, OPT_GUARD_ROOT,
           OPT_POD_RESOURCES, OPT_GUARD_GC, OPT_GUARD_GRACE, OPT_GUARD_RECONCILE, OPT_POD_ATTRIBUTION, OPT_FEATURES, OPT_METRICS, OPT_MPS_CONTROL, OPT_CDI_ROOT, OPT_CDI_KIND, OPT_CONTAINER_DRIVER_ROOT,
           OPT_CDI_HOOK, OPT_DRA, OPT_DRA_DRIVER, OPT_DRA_REGISTRY, OPT_DRA_PLUGINS, OPT_DRA_CLAIMS, OPT_KUBECONFIG,
           OPT_NODE_NAME, OPT_POD_LOGS };
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "kubelet-dir", required_argument, NULL, OPT_KUBELET_DIR },
        { "proc-root", required_argument, NULL, OPT_PROC_ROOT },
        { "sysfs-root", required_argument, NULL, OPT_SYSFS_ROOT },
        { "poll-interval-ms", required_argument, NULL, OPT_POLL },
        { "mig-status-file", required_argument, NULL, OPT_MIG_STATUS },
        { "guard-root", required_argument, NULL, OPT_GUARD_ROOT },
        { "pod-resources-socket", required_argument, NULL, OPT_POD_RESOURCES },
        { "guard-gc-interval-ms", required_argument, NULL, OPT_GUARD_GC },
        { "guard-grace-ms", required_argument, NULL, OPT_GUARD_GRACE },
        { "guard-reconcile-interval-ms", required_argument, NULL, OPT_GUARD_RECONCILE },
        { "pod-attribution-interval-ms", required_argument, NULL, OPT_POD_ATTRIBUTION },
        { "pod-logs-dir", required_argument, NULL, OPT_POD_LOGS },
        { "features-file", required_argument, NULL, OPT_FEATURES },
        { "metrics-address", required_argument, NULL, OPT_METRICS },
        { "mps-control", required_argument, NULL, OPT_MPS_CONTROL },
        { "cdi-root", required_argument, NULL, OPT_CDI_ROOT },
        { "cdi-kind", required_argument, NULL, OPT_CDI_KIND },
        { "container-driver-root", required_argument, NULL, OPT_CONTAINER_DRIVER_ROOT },
        { "cdi-hook", required_argument, NULL, OPT_CDI_HOOK },
        { "dra", no_argument, NULL, OPT_DRA },
        { "dra-driver", required_argument, NULL, OPT_DRA_DRIVER },
        { "kubelet-registry-dir", required_argument, NULL, OPT_DRA_REGISTRY },
        { "kubelet-plugins-dir", required_argument, NULL, OPT_DRA_PLUGINS },
        { "dra-claims-dir", required_argument, NULL, OPT_DRA_CLAIMS },
        { "kubeconfig", required_argument, NULL, OPT_KUBECONFIG },
        { "node-name", required_argument, NULL, OPT_NODE_NAME },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    char guard_lib[PATH_MAX];
    struct agent_options o = {
        .kubelet_dir = DEFAULT_KUBELET_DIR,
        .poll_ms = 2000,
        .mig_status_path = "/run/gpuslice/mig-status.json",
        .guard_root = "/var/lib/gpuslice/guard",
        .guard_lib = cli_guard_lib_path(guard_lib),
        .pod_resources = GS_PODRESOURCES_SOCKET,
        .guard_gc_ms = 60000,
        .guard_grace_ms = 120000,
        .guard_reconcile_ms = 30000,
        .pod_attribution_ms = 10000,
        .features_file = GS_FEATURES_FILE,
        .metrics_address = ":9402",
        .cdi_root = "/var/run/cdi",
        .cdi_kind = GS_CDI_KIND,
    };
    int c;
    while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
        unsigned long long v;
        switch (c) {
        case 'c': o.config_path = optarg; break;
        case OPT_KUBELET_DIR: o.kubelet_dir = optarg; break;
        case OPT_POD_LOGS: o.pod_logs_dir = optarg; break;
        case OPT_PROC_ROOT: o.proc_root = optarg; break;
        case OPT_SYSFS_ROOT: o.sysfs_root = optarg; break;
        case OPT_MIG_STATUS: o.mig_status_path = optarg; break;
        case OPT_GUARD_ROOT: o.guard_root = optarg; break;
        case OPT_POD_RESOURCES: o.pod_resources = optarg; break;
        case OPT_FEATURES: o.features_file = optarg; break;
        case OPT_METRICS: o.metrics_address = optarg; break;
        case OPT_MPS_CONTROL: o.mps_control = optarg; break;
        case OPT_CDI_ROOT: o.cdi_root = optarg; break;
        case OPT_CDI_KIND: o.cdi_kind = optarg; break;
        case OPT_CONTAINER_DRIVER_ROOT: o.container_driver_root = optarg; break;
        case OPT_CDI_HOOK: o.cdi_hook = optarg; break;
        case OPT_DRA: o.dra = true; break;
        case OPT_DRA_DRIVER: o.dra_driver = optarg; break;
        case OPT_DRA_REGISTRY: o.dra_registry_dir = optarg; break;
        case OPT_DRA_PLUGINS: o.dra_plugins_dir = optarg; break;
        case OPT_DRA_CLAIMS: o.dra_claims_dir = optarg; break;
        case OPT_KUBECONFIG: o.kubeconfig = optarg; break;
        case OPT_NODE_NAME:
            if (!optarg[0])
                return cli_usage_error("agent", "--node-name: empty");
            o.node_name = optarg;
            break;
        case OPT_GUARD_GC:
        case OPT_GUARD_GRACE:
        case OPT_GUARD_RECONCILE:
        case OPT_POD_ATTRIBUTION: {
            static const struct {
                int opt;
                const char *name;
                size_t field;
            } ms_opts[] = {
                { OPT_GUARD_GC, "guard-gc-interval-ms", offsetof(struct agent_options, guard_gc_ms) },
                { OPT_GUARD_GRACE, "guard-grace-ms", offsetof(struct agent_options, guard_grace_ms) },
                { OPT_GUARD_RECONCILE, "guard-reconcile-interval-ms", offsetof(struct agent_options, guard_reconcile_ms) },
                { OPT_POD_ATTRIBUTION, "pod-attribution-interval-ms", offsetof(struct agent_options, pod_attribution_ms) },
            };
            size_t k = 0;
            while (ms_opts[k].opt != c)
                k++;
            if (gs_parse_uint(optarg, 0, 86400000, &v) < 0) {
                return cli_usage_error("agent", "--%s: '%s' is not a number of milliseconds", ms_opts[k].name, optarg);
            }
            unsigned ms = (unsigned)v;
            memcpy((char *)&o + ms_opts[k].field, &ms, sizeof(ms));
            break;
        }
        case OPT_POLL:
            if (gs_parse_uint(optarg, 50, 3600000, &v) < 0) {
                return cli_usage_error("agent", "--poll-interval-ms: '%s' is not a number in 50..3600000", optarg);
            }
            o.poll_ms = (unsigned)v;
            break;
        case 'h':
            printf("Usage: gpuslice [GLOBAL OPTIONS] agent [--config POLICY.yaml] [OPTIONS]\n\n"
                   "The node daemon: a kubelet device plugin (API v1beta1) per resource name, for whole GPUs,\n"
                   "time-sliced replicas and MIG devices, with health from Xid events. Runs until SIGTERM;\n"
                   "SIGHUP or a change of the policy file reloads the policy without a restart.\n\n"
                   "  -c, --config FILE         sharing policy (NVIDIA device-plugin config or gpuslice's;\n"
                   "                            docs/policy.md); default: every GPU whole\n"
                   "  --kubelet-dir DIR         device-plugin directory (default %s)\n"
                   "  --proc-root DIR           where driver/nvidia-caps/mig-minors is (default /proc;\n"
                   "                            under --sim the simulated node's ROOT/proc)\n"
                   "  --sysfs-root DIR          where bus/pci/devices/*/numa_node is (default /sys;\n"
                   "                            under --sim ROOT/sys)\n"
                   "  --poll-interval-ms N      how often the GPUs are re-read for MIG and health changes\n"
                   "                            (default 2000)\n"
                   "  --mig-status-file FILE    where the MIG layout status (pending, applied, failed) is\n"
                   "                            written when the policy names one (default\n"
                   "                            /run/gpuslice/mig-status.json)\n"
                   "  --guard-root DIR          per-allocation guard files for replicas with a VRAM quota\n"
                   "                            (memoryPerReplica; default /var/lib/gpuslice/guard)\n"
                   "  --pod-resources-socket S  the kubelet's PodResources socket, asked which pods still\n"
                   "                            hold their devices (default %s)\n"
                   "  --guard-gc-interval-ms N  how often guard files of gone pods are removed (60000; 0 never)\n"
                   "  --guard-grace-ms N        files younger than this are kept (default 120000)\n"
                   "  --guard-reconcile-interval-ms N\n"
                   "                            how often the guard's counters are compared with NVML's\n"
                   "                            per-process memory, logged and exported (30000; 0 never)\n"
                   "  --pod-attribution-interval-ms N\n"
                   "                            how often PodResources is asked which pod holds which device,\n"
                   "                            for the metrics' namespace/pod/container labels (10000; 0 never)\n"
                   "  --pod-logs-dir DIR        the kubelet's podLogsDir, where the names of pods with\n"
                   "                            DRA claims are read (default /var/log/pods)\n"
                   "  --features-file FILE      node labels for Node Feature Discovery's local source, rewritten\n"
                   "                            when they change (default " GS_FEATURES_FILE ";\n"
                   "                            \"\" for none)\n"
                   "  --metrics-address ADDR    Prometheus metrics at http://ADDR/metrics, HOST:PORT or :PORT\n"
                   "                            (default :9402; \"\" for none)\n"
                   "  --mps-control PATH        nvidia-cuda-mps-control, run once per MPS-shared GPU or MIG\n"
                   "                            instance (default: found in PATH)\n"
                   "  --cdi-root DIR            where the CDI spec of the node is written, as gpuslice.json,\n"
                   "                            whenever the devices change (default /var/run/cdi; \"\" for none)\n"
                   "  --cdi-kind VENDOR/CLASS   its kind, the prefix of the names that cdi-cri and\n"
                   "                            cdi-annotations give the runtime (default " GS_CDI_KIND ")\n"
                   "  --cdi-hook PATH           the host path of gpuslice-cdi-hook, which the spec names as a\n"
                   "                            createContainer hook when it mounts libcuda (default\n"
                   "                            $GPUSLICE_CDI_HOOK, else " GS_CDI_HOOK_PATH "; \"\" for none)\n"
                   "  --container-driver-root DIR  where the host's driver root (the policy's\n"
                   "                            nvidiaDriverRoot) is mounted for the agent, e.g. /driver-root\n"
                   "                            in its container (default: the policy's containerDriverRoot,\n"
                   "                            else the driver root itself)\n"
                   "  --dra                     also serve the DRA driver's kubelet side (plugin registration,\n"
                   "                            NodePrepareResources / NodeUnprepareResources; docs/dra.md)\n"
                   "  --dra-driver NAME         its driver name (default " DRA_DRIVER_DEFAULT ")\n"
                   "  --kubelet-registry-dir DIR  the kubelet's plugin registration directory, where\n"
                   "                            NAME-reg.sock goes (default " DRA_REGISTRY_DIR_DEFAULT ")\n"
                   "  --kubelet-plugins-dir DIR the kubelet's plugins directory: NAME/dra.sock and the\n"
                   "                            prepared claims' checkpoint (default " DRA_PLUGINS_DIR_DEFAULT ");\n"
                   "                            without --dra, where a run with it left NAME/: its stale\n"
                   "                            ResourceSlices are deleted then (docs/dra.md)\n"
                   "  --dra-claims-dir DIR      read each ResourceClaim from DIR/NAMESPACE/NAME.json (as\n"
                   "                            kubectl get -o json prints it) instead of the API server\n"
                   "  --kubeconfig FILE         the API server, to read the agent's Node for NVIDIA's MIG\n"
                   "                            manager's nvidia.com/mig.config label (default: the in-cluster\n"
                   "                            service account when in a cluster, else the check is off);\n"
                   "                            with --dra also where ResourceClaims are read and the node's\n"
                   "                            ResourceSlices published (default there: $KUBECONFIG,\n"
                   "                            in-cluster, then ~/.kube/config)\n"
                   "  --node-name NAME          the agent's Node (default $NODE_NAME, else the host name), the\n"
                   "                            ResourceSlices' spec.nodeName and pool\n",
                   DEFAULT_KUBELET_DIR, GS_PODRESOURCES_SOCKET);
            return GS_EXIT_OK;
        default: return GS_EXIT_USAGE;
        }
    }
    if (o.cdi_kind && !gs_cdi_kind_valid(o.cdi_kind)) {
        return cli_usage_error("agent", "--cdi-kind: '%s' is not a CDI kind (VENDOR/CLASS, e.g. %s)", o.cdi_kind, GS_CDI_KIND);
    }
    if (o.cdi_hook && o.cdi_hook[0] && o.cdi_hook[0] != '/') {
        return cli_usage_error("agent", "--cdi-hook: '%s' is not an absolute path (\"\" for no hook)", o.cdi_hook);
    }
    if (o.container_driver_root && o.container_driver_root[0] != '/') {
        return cli_usage_error("agent", "--container-driver-root: '%s' is not an absolute path", o.container_driver_root);
    }
    if (!o.dra && (o.dra_driver || o.dra_registry_dir || o.dra_claims_dir)) {
        return cli_usage_error("agent", "--dra-driver, --kubelet-registry-dir and --dra-claims-dir need --dra");
    }
    if (cli_no_more_args("agent", argc, argv, optind) != GS_EXIT_OK)
        return GS_EXIT_USAGE;
    struct gpu_node *node;
    int rc = cli_open_node(cli, &node);
    if (rc != GS_EXIT_OK)
        return rc;
    /* Unless given, the node's own: under --sim the simulated node's root (also the policy's
     * default nvidiaDriverRoot and nvidiaDevRoot there). */
    char sim_proc[PATH_MAX], sim_sys[PATH_MAX], sim_root[PATH_MAX];
    if (!o.proc_root)
        o.proc_root = cli_node_path(node, "proc", "/proc", sim_proc);
    if (!o.sysfs_root)
        o.sysfs_root = cli_node_path(node, "sys", "/sys", sim_sys);
    o.default_driver_root = cli_node_path(node, "", NULL, sim_root);
    rc = agent_run(node, &o);
    gpu_node_close(node);
    return rc;
}

static void print_apply_table(const struct gs_inventory *inv, const struct gs_plan *plan) {
    printf("%-4s %-24s %-13s %-8s %s\n", "GPU", "NAME", "MODE", "REPLICAS", "RESOURCE");
    for (unsigned i = 0; i < plan->n_gpus; i++) {
        const struct gs_gpu_plan *g = &plan->gpus[i];
        printf("%-4u %-24.24s %-13s %-8u ", i, inv->gpus[i].name, gs_mode_name(g->mode),
               g->mode == GS_MODE_TIME_SLICING || g->mode == GS_MODE_MPS ? g->replicas : 0);
        /* every resource with a device on this GPU (a MIG GPU can carry several profiles) */
        unsigned shown = 0;
        for (unsigned k = 0; k < plan->n_resources; k++) {
            const struct gs_resource *r = &plan->resources[k];
            for (unsigned d = 0; d < r->n_devices; d++) {
                if (r->devices[d].gpu == i) {
                    printf("%s%s", shown++ ? "," : "", r->name);
                    break;
                }
            }
        }
        printf("%s\n", shown ? "" : "-");
    }
    printf("\n%-30s %8s %8s\n", "RESOURCE", "DEVICES", "HEALTHY");
    for (unsigned i = 0; i < plan->n_resources; i++) {
        const struct gs_resource *r = &plan->resources[i];
        unsigned healthy = 0;
        for (unsigned k = 0; k < r->n_devices; k++)
            healthy += r->devices[k].healthy;
        printf("%-30s %8u %8u\n", r->name, r->n_devices, healthy);
        for (unsigned k = 0; k < r->n_devices; k++) {
            const struct gs_device *d = &r->devices[k];
            printf("  %-58s GPU %u %s", d->id, d->gpu, kind_name(d->kind));
            if (d->kind == GS_DEV_MPS)
                printf(" %u%% pinned %llu MiB", d->mps_percent, d->mps_pinned >> 20);
            if (d->quota)
                printf(" VRAM quota %llu MiB", d->quota >> 20);
            printf("\n");
        }
    }
    for (unsigned i = 0; i < plan->n_warnings; i++)
        printf("warning: %s\n", plan->warnings[i]);
}

static void print_apply_json(const struct gs_plan *plan, const char *mig_config, unsigned mig_steps) {
    json_t *resources = json_array();
    for (unsigned i = 0; i < plan->n_resources; i++) {
        const struct gs_resource *r = &plan->resources[i];
        json_t *devs = json_array();
        for (unsigned k = 0; k < r->n_devices; k++) {
            const struct gs_device *d = &r->devices[k];
            json_t *dj = json_pack("{s:s,s:i,s:s,s:s}", "id", d->id, "gpu", (int)d->gpu, "kind", kind_name(d->kind),
                                   "health", d->healthy ? "Healthy" : "Unhealthy");
            if (d->kind == GS_DEV_MPS) {
                json_object_set_new(dj, "mps_uuid", json_string(d->uuid));
                json_object_set_new(dj, "active_thread_percentage", json_integer(d->mps_percent));
                json_object_set_new(dj, "pinned_memory_bytes", json_integer((json_int_t)d->mps_pinned));
            }
            if (d->quota)
                json_object_set_new(dj, "vram_quota_bytes", json_integer((json_int_t)d->quota));
            json_array_append_new(devs, dj);
        }
        json_array_append_new(resources, json_pack("{s:s,s:b,s:o}", "name", r->name, "replicated", r->replicated,
                                                   "devices", devs));
    }
    json_t *gpus = json_array();
    for (unsigned i = 0; i < plan->n_gpus; i++)
        json_array_append_new(gpus, json_pack("{s:i,s:s,s:i,s:o}", "index", (int)i, "mode",
                                              gs_mode_name(plan->gpus[i].mode), "replicas",
                                              (int)plan->gpus[i].replicas, "resource",
                                              plan->gpus[i].resource ? json_string(plan->gpus[i].resource) : json_null()));
    json_t *warnings = json_array();
    for (unsigned i = 0; i < plan->n_warnings; i++)
        json_array_append_new(warnings, json_string(plan->warnings[i]));
    json_t *root = json_pack("{s:s,s:o,s:o,s:o}", "schema", "gpuslice.apply/v1", "gpus", gpus, "resources", resources,
                             "warnings", warnings);
    if (mig_config && mig_config[0])
        json_object_set_new(root, "mig_layout", json_pack("{s:s,s:i}", "config", mig_config, "steps", (int)mig_steps));
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    printf("%s\n", s);
    free(s);
    json_decref(root);
}

int cmd_apply(const struct cli *cli, int argc, char **argv) {
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "json", no_argument, NULL, 'j' },
        { "labels", no_argument, NULL, 'l' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    const char *config = NULL;
    bool as_json = false, as_labels = false;
    int c;
    while ((c = getopt_long(argc, argv, "c:jlh", opts, NULL)) != -1) {
        switch (c) {
        case 'c': config = optarg; break;
        case 'j': as_json = true; break;
        case 'l': as_labels = true; break;
        case 'h':
            printf("Usage: gpuslice [GLOBAL OPTIONS] apply [--config POLICY.yaml] [--json | --labels]\n\n"
                   "Reconciles once and prints every resource and device the node will advertise under the\n"
                   "policy, without serving the kubelet: with the VRAM quota of each guarded replica, and\n"
                   "first what the policy's MIG layout (gpuslice.mig.config) would change, as `mig plan`\n"
                   "does. --json prints schema gpuslice.apply/v1 (docs/cli.md);\n"
                   "--labels prints the node labels the agent writes to its features file.\n");
            return GS_EXIT_OK;
        default: return GS_EXIT_USAGE;
        }
    }
    if (cli_no_more_args("apply", argc, argv, optind) != GS_EXIT_OK)
        return GS_EXIT_USAGE;
    if (as_json && as_labels) {
        return cli_usage_error("apply", "--json and --labels cannot be combined");
    }
    struct gs_policy policy;
    gs_policy_init(&policy);
    if (config) {
        char err[512];
        if (gs_policy_load(config, &policy, err, sizeof(err)) < 0) {
            fprintf(stderr, "gpuslice: %s\n", err);
            return GS_EXIT_FAILURE;
        }
        for (unsigned i = 0; i < policy.n_warnings; i++)
            fprintf(stderr, "gpuslice: warning: %s: %s\n", config, policy.warnings[i]);
    }
    struct gpu_node *node;
    _cleanup_free_ struct gs_inventory *inv = NULL;
    int rc = cli_read_node(cli, &node, &inv);
    if (rc != GS_EXIT_OK)
        return rc;
    struct gs_plan plan;
    if (gs_plan_build(inv, &policy, NULL, &plan) < 0) {
        fprintf(stderr, "gpuslice: out of memory\n");
        gpu_node_close(node);
        return GS_EXIT_FAILURE;
    }
    if (plan.n_errors) { /* settings this node cannot honour: the agent would leave them out */
        for (unsigned i = 0; i < plan.n_errors; i++)
            fprintf(stderr, "gpuslice: %s\n", plan.errors[i]);
        gs_plan_free(&plan);
        gpu_node_close(node);
        return GS_EXIT_FAILURE;
    }
    /* The policy's MIG layout: what the agent would change before serving. The resources below
     * are the node's as it is now; after the layout they follow the new instances. */
    unsigned mig_steps = 0;
    if (policy.mig_config[0] && !as_labels &&
        (rc = cli_mig_preview(inv, policy.mig_layout_file, policy.mig_config, !as_json, &mig_steps)) != GS_EXIT_OK) {
        gs_plan_free(&plan);
        gpu_node_close(node);
        return rc;
    }
    bool table = !as_json && !as_labels;
    if (mig_steps && table)
        printf("(the resources below are the node's now; the agent advertises the new instances once the "
               "layout is applied)\n\n");
    else if (policy.mig_config[0] && table)
        printf("\n");
    if (as_labels) {
        char *text = malloc(1 << 16);
        int n = text ? gs_labels_format(inv, &policy, &plan, NULL, text, 1 << 16) : -ENOMEM;
        if (n >= 0)
            fwrite(text, 1, (size_t)n, stdout);
        else
            fprintf(stderr, "gpuslice: cannot format the labels: %s\n", strerror(-n));
        free(text);
        rc = n >= 0 ? GS_EXIT_OK : GS_EXIT_FAILURE;
    } else if (as_json) {
        print_apply_json(&plan, policy.mig_config, mig_steps);
    } else {
        print_apply_table(inv, &plan);
    }
    gs_plan_free(&plan);
    gpu_node_close(node);
    return rc;
}
