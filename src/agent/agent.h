/* agent.h: the node agent. Observes the GPUs (NVML), applies the sharing policy (plan), serves
 * the kubelet (one device plugin per resource), and reacts to events: Xid errors, GPUs lost,
 * MIG changes, policy reloads (SIGHUP or file change), kubelet restarts, SIGTERM. */
#ifndef GS_AGENT_H
#define GS_AGENT_H

#include "gpu/gpu.h"

struct agent_options {
    const char *config_path;      /* sharing policy (NULL: defaults: whole GPUs, MIG none) */
    const char *kubelet_dir;      /* /var/lib/kubelet/device-plugins */
    const char *proc_root;        /* /proc: driver/nvidia-caps/mig-minors */
    const char *sysfs_root;       /* /sys: bus/pci/devices/<bus>/numa_node */
    unsigned poll_ms;             /* inventory re-read interval */
    const char *mig_status_path;  /* where the MIG layout status is written (JSON) */
    const char *guard_root;       /* per-allocation guard files (limits, counters) */
    const char *guard_lib;        /* libgpuslice-guard.so on the host, mounted into containers */
    const char *pod_resources;    /* the kubelet's PodResources socket (guard files of gone pods) */
    unsigned guard_gc_ms;         /* how often to look for them */
    unsigned guard_grace_ms;      /* files younger than this are kept (the pod may not be listed yet) */
    unsigned guard_reconcile_ms;  /* how often the guard's counters are compared with NVML (0: never) */
    unsigned pod_attribution_ms;  /* how often PodResources is asked who holds which device (0: never) */
    const char *pod_logs_dir;     /* the kubelet's podLogsDir: DRA pods' names (NULL: /var/log/pods) */
    const char *features_file;    /* node labels for Node Feature Discovery (NULL or "": none) */
    const char *metrics_address;  /* Prometheus metrics, "HOST:PORT" or ":PORT" (NULL or "": none) */
    const char *mps_control;      /* nvidia-cuda-mps-control (NULL: found in PATH) */
    const char *cdi_root;         /* where the CDI spec is written (NULL or "": none) */
    const char *cdi_kind;         /* its kind (NULL: nvidia.com/gpu) */
    const char *container_driver_root; /* where the host's driver root is mounted for the agent (NULL: the
                                        * policy's containerDriverRoot, else nvidiaDriverRoot) */
    const char *cdi_hook;         /* host path of gpuslice-cdi-hook named in the CDI spec ("": none; NULL:
                                   * $GPUSLICE_CDI_HOOK, else GS_CDI_HOOK_PATH) */
    const char *default_driver_root;   /* the policy's nvidiaDriverRoot and nvidiaDevRoot where it leaves
                                        * them "/" (--sim: the simulated node's root; NULL: "/") */
    bool dra;                     /* also serve the DRA driver's kubelet side (src/dra/dra.h) */
    const char *dra_driver;       /* its name (NULL: gpu.gpuslice.io) */
    const char *dra_registry_dir; /* the kubelet's plugins_registry (NULL: /var/lib/kubelet/plugins_registry) */
    const char *dra_plugins_dir;  /* the kubelet's plugins directory (NULL: /var/lib/kubelet/plugins) */
    const char *dra_claims_dir;   /* claims from files there (NS/NAME.json), not from the API server */
    unsigned dra_resync_ms;       /* how often the published slices are checked (0: 60 s) */
    const char *kubeconfig;       /* the API server (NULL: the in-cluster service account, if any) */
    const char *node_name;        /* the agent's Node (NULL: $NODE_NAME, else the host name) */
};

/* Runs until SIGTERM/SIGINT. Returns the process exit code. */
int agent_run(struct gpu_node *node, const struct agent_options *o);

#endif
