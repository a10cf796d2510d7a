/* doctor.c (cli): `gpuslice doctor`: checks the node as the agent needs it and prints one line
 * per finding with its fix (docs/doctor.md). The findings and parsers are src/doctor/'s. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cdi/cdi.h"
#include "cdi/nodespec.h"
#include "cli/cli.h"
#include "config/miglayout.h"
#include "config/policy.h"
#include "core/plan.h"
#include "doctor/doctor.h"
#include "dra/dra.h"
#include "kube/kube.h"
#include "kubelet/plugindir.h"
#include "kubelet/podresources.h"
#include "mig/migapply.h"
#include "util/util.h"

#define DEFAULT_KUBELET_DIR "/var/lib/kubelet/device-plugins"
#define DEFAULT_CONTAINERD "/etc/containerd/config.toml"
#define DEFAULT_CRIO "/etc/crio/crio.conf"
#define OPERATOR_VALIDATIONS "/run/nvidia/validations"

struct doc {
    const struct cli *cli;
    struct gs_doc_report rep;
    const char *config, *kubelet_dir, *pod_resources, *cdi_root, *cdi_kind, *guard_root, *proc_root;
    const char *containerd, *crio, *operator_dir;
    const char *kubeconfig, *node_name; /* the API server's checks (check_api) */
    const char *extender;               /* --extender URL: its /healthz and filter */
    bool extender_warn;                 /* --extender-warn: its failures are warnings */
    struct gs_doc_extender_tls extender_tls; /* --extender-ca, --extender-cert, --extender-key */
    bool dra;
    const char *scan[GS_DOC_MAX_DIRS];
    size_t n_scan;
    struct gpu_node *node;
    struct gs_inventory *inv;
    struct gs_policy policy;
    bool policy_ok, plan_ok;
    struct gs_plan plan;
    char root[PATH_MAX];     /* the node's root: "/" or the simulated node's */
    int cdi_needed;          /* the policy's deviceListStrategy names cdi-cri or cdi-annotations */
    struct gs_doc_cdi_config rt;
    bool rt_read;
    enum gs_doc_runtime rt_kind;
};

#define ADD(d, check, st, fix, ...) gs_doc_add(&(d)->rep, check, st, fix, __VA_ARGS__)

static void check_nvml(struct doc *d) {
    char err[1024];
    int r;
    if (d->cli->sim_node) {
        r = cli_open_node(d->cli, &d->node) == GS_EXIT_OK ? 0 : -ENOENT;
        snprintf(err, sizeof(err), "the simulated node %s could not be opened (the error is above)", d->cli->sim_node);
    } else {
        r = gpu_node_open(d->cli->nvml_lib, &d->node, err, sizeof(err));
    }
    if (r < 0) {
        d->node = NULL;
        ADD(d, "nvml", GS_DOC_FAIL,
            "install the NVIDIA driver on the node, or mount its driver root into the agent (the chart's "
            "driver.root) and pass --nvml-lib ROOT/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
            "NVML does not load: %s", err);
        return;
    }
    d->inv = calloc(1, sizeof(*d->inv));
    char sys[PATH_MAX];
    if (!d->inv || gpu_inventory_read_sysfs(d->node, cli_node_path(d->node, "sys", "/sys", sys), d->inv) < 0) {
        ADD(d, "nvml", GS_DOC_FAIL, "check the driver with nvidia-smi; dmesg names the failing GPU",
            "NVML loads but the GPUs cannot be read: %s", d->inv ? gpu_node_error(d->node) : "out of memory");
        free(d->inv);
        d->inv = NULL;
        return;
    }
    char names[256] = "";
    size_t used = 0;
    for (unsigned i = 0; i < d->inv->n_gpus && used < sizeof(names) - 40; i++)
        used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s", i ? ", " : "", d->inv->gpus[i].name);
    const char *where = d->cli->sim_node ? " on the simulated node " : "";
    if (!d->inv->n_gpus) {
        ADD(d, "nvml", GS_DOC_FAIL, "check that the GPUs are visible to the driver (nvidia-smi -L, lspci -d 10de:)",
            "NVML %s%s%s sees no GPU", d->inv->driver_version, where, d->cli->sim_node ? d->cli->sim_node : "");
        return;
    }
    ADD(d, "nvml", GS_DOC_OK, NULL, "driver %s, CUDA %d.%d, %u GPUs%s%s: %s", d->inv->driver_version,
        d->inv->cuda_driver_version / 1000, d->inv->cuda_driver_version % 1000 / 10, d->inv->n_gpus, where,
        d->cli->sim_node ? d->cli->sim_node : "", names);
}

static void check_device_nodes(struct doc *d) {
    if (!d->inv)
        return;
    const char *dev_root = d->policy_ok && strcmp(d->policy.dev_root, "/") ? d->policy.dev_root : d->root;
    char missing[GS_DOC_TEXT_MAX / 2] = "", path[2 * PATH_MAX];
    size_t used = 0;
    unsigned n = 0, bad = 0;
    for (unsigned i = 0; i <= d->inv->n_gpus + 1; i++) {
        char name[32];
        if (i == d->inv->n_gpus)
            snprintf(name, sizeof(name), "nvidiactl");
        else if (i == d->inv->n_gpus + 1)
            snprintf(name, sizeof(name), "nvidia-uvm");
        else
            snprintf(name, sizeof(name), "nvidia%u", d->inv->gpus[i].minor);
        snprintf(path, sizeof(path), "%s%sdev/%s", dev_root, dev_root[strlen(dev_root) - 1] == '/' ? "" : "/", name);
        struct stat st;
        n++;
        bool ok = stat(path, &st) == 0 && (S_ISCHR(st.st_mode) || (d->cli->sim_node && S_ISREG(st.st_mode)));
        if (!ok && used < sizeof(missing) - 40) {
            bad++;
            used += (size_t)snprintf(missing + used, sizeof(missing) - used, "%s%s", bad > 1 ? ", " : "", path);
        }
    }
    if (bad)
        ADD(d, "devices", GS_DOC_FAIL,
            "load the driver's modules and create the nodes (nvidia-modprobe -u -c=0, or the GPU Operator's driver); "
            "if the driver is in a container, set the policy's flags.nvidiaDevRoot",
            "%u of %u device nodes missing: %s", bad, n, missing);
    else
        ADD(d, "devices", GS_DOC_OK, NULL, "%u device nodes under %s%sdev (nvidia0..., nvidiactl, nvidia-uvm)", n,
            dev_root, dev_root[strlen(dev_root) - 1] == '/' ? "" : "/");
}

static void check_privileges(struct doc *d) {
    char *status = NULL;
    size_t len = 0;
    unsigned long long cap = 0;
    bool admin = gs_read_file("/proc/self/status", 1 << 16, &status, &len) == 0 &&
                 gs_doc_capeff_parse(status, len, &cap) == 0 && (cap >> GS_DOC_CAP_SYS_ADMIN & 1);
    free(status);
    bool root = geteuid() == 0;
    bool mig = d->policy_ok && d->policy.mig_config[0];
    if (root && admin)
        ADD(d, "privileges", GS_DOC_OK, NULL, "root with CAP_SYS_ADMIN");
    else
        ADD(d, "privileges", mig ? GS_DOC_FAIL : GS_DOC_WARN,
            "run the agent as root with CAP_SYS_ADMIN (the chart's DaemonSet is privileged)",
            "%s%s: the agent needs root for the kubelet's directories%s", root ? "root" : "not root",
            admin ? " with CAP_SYS_ADMIN" : " without CAP_SYS_ADMIN",
            mig ? ", and CAP_SYS_ADMIN for the policy's MIG layout (gpuslice.mig.config)" : "");
}

static void socket_finding(struct doc *d, const char *check, const char *path, enum gs_doc_status missing_status,
                           const char *what, const char *fix) {
    int e;
    enum gs_kl_sock_state s = gs_kl_socket_probe(path, &e);
    switch (s) {
    case GS_KL_SOCK_LISTENING: ADD(d, check, GS_DOC_OK, NULL, "%s is listening (%s)", path, what); break;
    case GS_KL_SOCK_ABSENT: ADD(d, check, missing_status, fix, "%s does not exist (%s)", path, what); break;
    case GS_KL_SOCK_STALE:
        ADD(d, check, missing_status, fix, "%s is a stale socket: nothing listens on it (%s)", path, what);
        break;
    case GS_KL_SOCK_NOT_SOCKET: ADD(d, check, missing_status, fix, "%s is not a socket (%s)", path, what); break;
    case GS_KL_SOCK_ERROR: ADD(d, check, missing_status, fix, "%s: %s (%s)", path, strerror(e), what); break;
    }
}

struct plugins {
    struct doc *d;
    char nvidia[GS_DOC_TEXT_MAX / 2], other[GS_DOC_TEXT_MAX / 2];
    unsigned n_nvidia_live, n_nvidia_stale, n_other, n_ours;
    bool checkpoint;
};

static void on_entry(void *ctx, const char *dir, const char *name, bool is_socket) {
    struct plugins *p = ctx;
    enum gs_kl_socket_kind k = gs_kl_socket_kind(name);
    if (!strcmp(name, "kubelet_internal_checkpoint"))
        p->checkpoint = true;
    if (!is_socket || k == GS_KL_SOCK_NONE || k == GS_KL_SOCK_KUBELET)
        return;
    if (k == GS_KL_SOCK_OURS) {
        p->n_ours++;
        return;
    }
    char path[2 * PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    int e;
    bool live = gs_kl_socket_probe(path, &e) == GS_KL_SOCK_LISTENING;
    char *buf = k == GS_KL_SOCK_NVIDIA ? p->nvidia : p->other;
    size_t n = strlen(buf);
    if (n < GS_DOC_TEXT_MAX / 2 - 80)
        snprintf(buf + n, GS_DOC_TEXT_MAX / 2 - n, "%s%s (%s)", n ? ", " : "", name, live ? "listening" : "stale");
    if (k == GS_KL_SOCK_NVIDIA)
        live ? p->n_nvidia_live++ : p->n_nvidia_stale++;
    else
        p->n_other++;
}

static void check_kubelet(struct doc *d) {
    struct stat st;
    if (stat(d->kubelet_dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
        ADD(d, "kubelet.dir", GS_DOC_FAIL,
            "pass the kubelet's device-plugins directory with --kubelet-dir (the chart's hostPaths.kubeletDir; "
            "k0s and microk8s keep it elsewhere)",
            "%s is not a directory: the kubelet is not installed there or not running", d->kubelet_dir);
        return;
    }
    ADD(d, "kubelet.dir", GS_DOC_OK, NULL, "%s exists", d->kubelet_dir);
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/kubelet.sock", d->kubelet_dir);
    socket_finding(d, "kubelet.socket", path, GS_DOC_FAIL, "the kubelet's device-plugin registration",
                   "start (or restart) the kubelet; a stale socket is left by a kubelet that stopped - the kubelet "
                   "replaces it when it starts");
    char reg[PATH_MAX];
    snprintf(reg, sizeof(reg), "%s", d->kubelet_dir);
    char *slash = strrchr(reg, '/');
    if (slash)
        *slash = '\0';
    snprintf(path, sizeof(path), "%s/plugins_registry", reg);
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        ADD(d, "kubelet.plugins_registry", GS_DOC_OK, NULL, "%s exists (DRA drivers register there)", path);
    else
        ADD(d, "kubelet.plugins_registry", GS_DOC_WARN,
            "a kubelet with Dynamic Resource Allocation creates it; the device plugins gpuslice serves do not need it",
            "%s does not exist", path);
    snprintf(path, sizeof(path), "%s/plugins/%s", reg, DRA_DRIVER_DEFAULT); /* the DRA driver's checkpoint */
    gs_doc_check_dra_checkpoint(&d->rep, path, d->dra);
    socket_finding(d, "kubelet.podresources", d->pod_resources, GS_DOC_WARN,
                   "the kubelet's PodResources API: guard files of gone pods, pod labels of metrics, MIG changes",
                   "check the kubelet's pod-resources directory and mount it (the chart mounts "
                   "/var/lib/kubelet/pod-resources); pass --pod-resources-socket when it is elsewhere");

    struct plugins p = { .d = d };
    gs_doc_list_dir(d->kubelet_dir, 4096, on_entry, &p);
    if (p.n_nvidia_live && d->policy_ok && d->policy.other_plugin == GS_OTHER_SHARE)
        ADD(d, "plugin.competing", GS_DOC_WARN,
            "give gpuslice's resources names NVIDIA's plugin does not register (renameByDefault, MIG devices); "
            "docs/operator.md",
            "NVIDIA's device plugin serves on this node: %s; under gpuslice.coexistence.otherPlugin: share gpuslice "
            "leaves out its resource names and the GPUs its devices name",
            p.nvidia);
    else if (p.n_nvidia_live)
        ADD(d, "plugin.competing", GS_DOC_FAIL,
            "turn NVIDIA's device plugin off on this node (GPU Operator: devicePlugin.enabled=false; docs/operator.md), "
            "or set gpuslice.coexistence.otherPlugin: share (gpuslice serves only the GPUs it does not) and give the "
            "two plugins different resource names",
            "NVIDIA's device plugin serves on this node: %s; two plugins advertising nvidia.com/gpu double-count the "
            "GPUs", p.nvidia);
    else if (p.n_nvidia_stale)
        ADD(d, "plugin.competing", GS_DOC_WARN, "remove the stale socket files; the kubelet does not use them",
            "NVIDIA's device plugin left sockets with nothing listening: %s", p.nvidia);
    else
        ADD(d, "plugin.competing", GS_DOC_OK, NULL, "no NVIDIA device plugin socket in %s", d->kubelet_dir);
    if (p.n_other)
        ADD(d, "plugin.other", GS_DOC_OK, NULL, "other device plugins: %s", p.other);

    snprintf(path, sizeof(path), "%s/kubelet_internal_checkpoint", d->kubelet_dir);
    char *text = NULL, err[256];
    size_t len = 0;
    if (!p.checkpoint)
        return;
    int r = gs_read_file(path, GS_KL_CHECKPOINT_MAX, &text, &len);
    char names[GS_KL_MAX_RESOURCES][GS_KL_RESOURCE_MAX];
    unsigned n = 0, n_dev = 0;
    if (r == 0)
        r = gs_kl_checkpoint_parse(text, len, names, GS_KL_MAX_RESOURCES, &n, &n_dev, err, sizeof(err));
    else
        snprintf(err, sizeof(err), "%s", strerror(-r));
    free(text);
    if (r < 0) {
        ADD(d, "plugin.checkpoint", GS_DOC_WARN, "the kubelet rewrites it when plugins register; a damaged file "
            "can be removed while the kubelet is stopped", "%s: %s", path, err);
        return;
    }
    char list[GS_DOC_TEXT_MAX / 2] = "";
    size_t used = 0;
    for (unsigned i = 0; i < n && used < sizeof(list) - GS_KL_RESOURCE_MAX - 4; i++)
        used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "", names[i]);
    ADD(d, "plugin.checkpoint", GS_DOC_OK, NULL, "the kubelet's checkpoint registers %u resources (%u devices)%s%s",
        n, n_dev, n ? ": " : "", list);
}

static void check_policy(struct doc *d) {
    gs_policy_init(&d->policy);
    d->policy_ok = true;
    d->cdi_needed = d->policy.list_strategy & (GS_LIST_CDI_CRI | GS_LIST_CDI_ANNOTATIONS);
    if (!d->config) {
        ADD(d, "policy", GS_DOC_OK, NULL, "no --config: the defaults (every GPU whole)");
    } else {
        char err[512];
        if (gs_policy_load(d->config, &d->policy, err, sizeof(err)) < 0) {
            d->policy_ok = false;
            gs_policy_init(&d->policy);
            ADD(d, "policy", GS_DOC_FAIL, "correct the policy file (docs/policy.md); the agent refuses to start on it",
                "%s", err);
            return;
        }
        d->cdi_needed = d->policy.list_strategy & (GS_LIST_CDI_CRI | GS_LIST_CDI_ANNOTATIONS);
        ADD(d, "policy", GS_DOC_OK, NULL, "%s parses", d->config);
        for (unsigned i = 0; i < d->policy.n_warnings; i++)
            ADD(d, "policy", GS_DOC_WARN, "remove the setting, or see docs/policy.md for what gpuslice honours",
                "%s: %s", d->config, d->policy.warnings[i]);
    }
}

static void check_plan(struct doc *d) {
    if (!d->inv || !d->policy_ok)
        return;
    if (gs_plan_build(d->inv, &d->policy, NULL, &d->plan) < 0) {
        ADD(d, "policy.plan", GS_DOC_FAIL, NULL, "out of memory");
        return;
    }
    d->plan_ok = true;
    for (unsigned i = 0; i < d->plan.n_errors; i++)
        ADD(d, "policy.plan", GS_DOC_FAIL, "change the setting for this node's GPUs (gpuslice apply shows the plan)",
            "%s", d->plan.errors[i]);
    for (unsigned i = 0; i < d->plan.n_warnings; i++)
        ADD(d, "policy.plan", GS_DOC_WARN, "gpuslice apply --config FILE shows what the node advertises", "%s",
            d->plan.warnings[i]);
    if (!d->plan.n_errors)
        ADD(d, "policy.plan", GS_DOC_OK, NULL, "the node advertises %u resources under the policy",
            d->plan.n_resources);
    if (!d->policy.mig_config[0])
        return;
    struct gs_layout_file *layouts = NULL;
    char err[2048];
    int r = 0;
    if (d->policy.mig_layout_file[0]) {
        layouts = malloc(sizeof(*layouts));
        r = layouts ? gs_miglayout_load(d->policy.mig_layout_file, layouts, err, sizeof(err)) : -ENOMEM;
    }
    struct gs_mig_plan *plans = r == 0 ? calloc(GS_MAX_GPUS, sizeof(*plans)) : NULL;
    bool selected[GS_MAX_GPUS];
    if (r == 0)
        r = plans ? gs_mig_plan_node(d->inv, layouts, d->policy.mig_config, plans, selected, err, sizeof(err)) : -ENOMEM;
    if (r < 0)
        ADD(d, "policy.mig", GS_DOC_FAIL, "correct the layout (docs/mig.md); gpuslice mig plan shows the steps",
            "MIG layout %s: %s", d->policy.mig_config, r == -ENOMEM ? "out of memory" : err);
    else
        ADD(d, "policy.mig", GS_DOC_OK, NULL, "MIG layout %s plans on this node", d->policy.mig_config);
    free(plans);
    free(layouts);
}

static void check_runtime(struct doc *d) {
    const struct {
        const char *path;
        enum gs_doc_runtime kind;
        const char *name;
    } rts[] = { { d->containerd, GS_DOC_CONTAINERD, "containerd" }, { d->crio, GS_DOC_CRIO, "CRI-O" } };
    enum gs_doc_status need = d->cdi_needed ? GS_DOC_FAIL : GS_DOC_WARN;
    const char *why = d->cdi_needed ? "the policy's deviceListStrategy answers with CDI names"
                                    : "needed for deviceListStrategy cdi-cri or cdi-annotations";
    bool found = false;
    for (size_t i = 0; i < GS_ARRAY_SIZE(rts); i++) {
        if (!rts[i].path || !rts[i].path[0] || access(rts[i].path, F_OK) < 0)
            continue;
        found = true;
        char *text = NULL, err[512];
        size_t len = 0;
        struct gs_doc_cdi_config c;
        int r = gs_read_file(rts[i].path, GS_DOC_CONFIG_MAX, &text, &len);
        if (r < 0)
            snprintf(err, sizeof(err), "%s: %s", rts[i].path, strerror(-r));
        else
            r = gs_doc_cdi_config_parse(rts[i].kind, rts[i].path, text, len, &c, err, sizeof(err));
        free(text);
        if (r < 0) {
            ADD(d, "cdi.runtime", GS_DOC_WARN, "check the file by hand; the doctor reads a TOML subset (docs/doctor.md)",
                "%s config not read: %s", rts[i].name, err);
            continue;
        }
        if (!d->rt_read) {
            d->rt = c;
            d->rt_read = true;
            d->rt_kind = rts[i].kind;
        }
        char fix[GS_DOC_TEXT_MAX];
        snprintf(fix, sizeof(fix), "set enable_cdi = true under %s in %s and restart %s",
                 gs_doc_cdi_table(rts[i].kind, c.version), rts[i].path, rts[i].name);
        int on = gs_doc_cdi_enabled(rts[i].kind, &c);
        if (on == 0)
            ADD(d, "cdi.runtime", need, fix, "%s: enable_cdi = false (line %u): the runtime ignores CDI devices (%s)",
                rts[i].path, c.enable_line, why);
        else if (on < 0)
            ADD(d, "cdi.runtime", need, fix,
                "%s: no enable_cdi (config version %d): containerd 1.7 leaves CDI off, 2.x turns it on (%s)",
                rts[i].path, c.version, why);
        else
            ADD(d, "cdi.runtime", GS_DOC_OK, NULL, "%s: CDI on (%s%s)", rts[i].path,
                rts[i].kind == GS_DOC_CRIO ? "CRI-O always" : c.enable_cdi > 0 ? "enable_cdi = true" : "version 3 default",
                c.imports ? "; imported drop-ins not read" : "");
    }
    if (!found)
        ADD(d, "cdi.runtime", GS_DOC_WARN, "pass --containerd-config PATH or --crio-config PATH",
            "no container runtime config at %s or %s: the CDI setting was not checked",
            d->containerd ? d->containerd : "-", d->crio ? d->crio : "-");
}

static void warn_conflict(void *ctx, const char *msg) {
    ADD((struct doc *)ctx, "cdi.conflict", GS_DOC_FAIL,
        "remove the other spec, or give gpuslice another kind (--cdi-kind); the runtime refuses devices two specs "
        "define", "%s", msg);
}

static void check_cdi_dirs(struct doc *d) {
    if (!d->cdi_root[0]) {
        ADD(d, "cdi.root", d->cdi_needed ? GS_DOC_FAIL : GS_DOC_OK, "pass --cdi-root DIR (the runtime's CDI directory)",
            "--cdi-root \"\": the agent writes no CDI spec");
    } else {
        bool exists;
        char why[PATH_MAX + 64];
        if (gs_doc_dir_usable(d->cdi_root, &exists, why, sizeof(why)) < 0)
            ADD(d, "cdi.root", d->cdi_needed ? GS_DOC_FAIL : GS_DOC_WARN,
                "mount the host's CDI directory writable into the agent (the chart's hostPaths.cdiRoot)",
                "the agent cannot write its CDI spec: %s", why);
        else
            ADD(d, "cdi.root", GS_DOC_OK, NULL, "%s %s", d->cdi_root, exists ? "is writable" : "can be created");
    }
    /* the directories the runtime reads: its cdi_spec_dirs, else the CDI default */
    const char *dirs[GS_DOC_MAX_DIRS + 1];
    size_t n = 0;
    if (d->n_scan) {
        for (size_t i = 0; i < d->n_scan; i++)
            dirs[n++] = d->scan[i];
    } else if (d->rt_read && d->rt.dirs_given) {
        for (unsigned i = 0; i < d->rt.n_dirs; i++)
            dirs[n++] = d->rt.dirs[i];
    } else {
        dirs[n++] = "/etc/cdi";
        dirs[n++] = "/var/run/cdi";
    }
    bool listed = !d->cdi_root[0];
    for (size_t i = 0; i < n && !listed; i++)
        listed = !strcmp(dirs[i], d->cdi_root) ||
                 (!strcmp(dirs[i], "/var/run/cdi") && !strcmp(d->cdi_root, "/run/cdi")) ||
                 (!strcmp(dirs[i], "/run/cdi") && !strcmp(d->cdi_root, "/var/run/cdi"));
    if (!listed && d->rt_read && d->rt.dirs_given)
        ADD(d, "cdi.root", d->cdi_needed ? GS_DOC_FAIL : GS_DOC_WARN, "add it to the runtime's cdi_spec_dirs, or pass a "
            "--cdi-root the runtime reads", "%s is not among the runtime's cdi_spec_dirs", d->cdi_root);
    if (!d->inv)
        return;
    char proc[PATH_MAX], *spec = NULL, err[512];
    const char *proc_root = d->proc_root ? d->proc_root : cli_node_path(d->node, "proc", "/proc", proc);
    const char *drv = strcmp(d->policy.driver_root, "/") ? d->policy.driver_root : d->root;
    if (gs_cdi_node_spec(d->inv, proc_root, drv, drv, d->cdi_kind, NULL, &spec, NULL, err, sizeof(err)) < 0) {
        ADD(d, "cdi.spec", d->cdi_needed ? GS_DOC_FAIL : GS_DOC_WARN, "check the driver's device numbers in /proc/devices",
            "the node's CDI spec cannot be built: %s", err);
        return;
    }
    unsigned before = d->rep.n;
    int c = gs_cdi_scan_dirs(d->cdi_kind, spec, dirs, n, "gpuslice", warn_conflict, d);
    free(spec);
    if (c == 0 && d->rep.n == before)
        ADD(d, "cdi.conflict", GS_DOC_OK, NULL, "no other spec in the %zu CDI directories defines %s devices of ours",
            n, d->cdi_kind);
}

static bool plan_has(const struct doc *d, enum gs_gpu_mode mode, bool quota) {
    for (unsigned i = 0; d->plan_ok && i < d->plan.n_gpus; i++)
        if (!quota && d->plan.gpus[i].mode == mode)
            return true;
    for (unsigned i = 0; quota && d->plan_ok && i < d->plan.n_resources; i++)
        for (unsigned k = 0; k < d->plan.resources[i].n_devices; k++)
            if (d->plan.resources[i].devices[k].quota)
                return true;
    return false;
}

static void check_dirs(struct doc *d) {
    bool exists;
    char why[PATH_MAX + 64];
    bool mps = plan_has(d, GS_MODE_MPS, false), quota = plan_has(d, GS_MODE_DEFAULT, true);
    if (!mps)
        ADD(d, "mps.root", GS_DOC_OK, NULL, "no GPU is MPS-shared under the policy (%s not needed)", d->policy.mps_root);
    else if (gs_doc_dir_usable(d->policy.mps_root, &exists, why, sizeof(why)) < 0)
        ADD(d, "mps.root", GS_DOC_FAIL, "mount a writable host directory there, or set flags.mpsRoot in the policy",
            "the MPS root is not writable: %s", why);
    else
        ADD(d, "mps.root", GS_DOC_OK, NULL, "%s %s", d->policy.mps_root, exists ? "is writable" : "can be created");
    enum gs_doc_status need = quota ? GS_DOC_FAIL : GS_DOC_WARN;
    if (gs_doc_dir_usable(d->guard_root, &exists, why, sizeof(why)) < 0)
        ADD(d, "guard.root", need, "mount a writable host directory (the chart's hostPaths.guardRoot) or pass --guard-root",
            "the guard root is not writable: %s", why);
    else
        ADD(d, "guard.root", GS_DOC_OK, NULL, "%s %s", d->guard_root, exists ? "is writable" : "can be created");
    char buf[PATH_MAX];
    const char *lib = cli_guard_lib_path(buf);
    if (!lib)
        ADD(d, "guard.lib", need, "install " GS_GUARD_LIB_NAME " beside gpuslice or set GPUSLICE_GUARD_LIB",
            GS_GUARD_LIB_NAME " not found: replicas with a VRAM quota cannot be served");
    else if (gs_doc_lib_loadable(lib, why, sizeof(why)) < 0)
        ADD(d, "guard.lib", need, "reinstall it from the same build as gpuslice", "%s does not load: %s", lib, why);
    else
        ADD(d, "guard.lib", GS_DOC_OK, NULL, "%s loads", lib);
}

static void check_operator(struct doc *d) {
    struct stat st;
    bool operator = stat(d->operator_dir, &st) == 0 && S_ISDIR(st.st_mode);
    const char *label = "the " GS_DOC_MIG_LABEL " label itself is the api.mig-manager finding's";
    if (operator && d->policy_ok && d->policy.mig_config[0])
        ADD(d, "operator.mig-manager", GS_DOC_WARN,
            "turn NVIDIA's MIG manager off (GPU Operator: migManager.enabled=false; docs/operator.md)",
            "NVIDIA's GPU Operator validated this node (%s) and the policy changes MIG (gpuslice.mig.config): two MIG "
            "managers would fight over the GPUs; %s", d->operator_dir, label);
    else
        ADD(d, "operator.mig-manager", GS_DOC_OK, NULL, "%s; %s", operator ? "NVIDIA's GPU Operator validated this node" : "no sign of NVIDIA's GPU Operator",
            label);
}

/* DRA: resource.k8s.io/v1 served, and a SelfSubjectAccessReview of creating ResourceSlices. */
static void ask_dra(struct kube_client *c, struct gs_doc_api *a, char *api_err, char *sar_err, size_t errlen,
                    json_t **sar) {
    a->dra_api_r = kube_get(c, "/apis/resource.k8s.io/v1", NULL, api_err, errlen);
    a->dra_api_err = api_err;
    json_t *review = json_pack("{s:s,s:s,s:{s:{s:s,s:s,s:s}}}", "apiVersion", "authorization.k8s.io/v1", "kind",
                               "SelfSubjectAccessReview", "spec", "resourceAttributes", "group", "resource.k8s.io",
                               "resource", "resourceslices", "verb", "create");
    a->sar_r = review ? kube_create(c, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review, sar, sar_err,
                                    errlen)
                      : -ENOMEM;
    json_decref(review);
    a->sar_err = sar_err;
    json_t *status = a->sar_r == 0 ? json_object_get(*sar, "status") : NULL;
    a->sar_allowed = json_is_true(json_object_get(status, "allowed"));
    a->sar_reason = json_string_value(json_object_get(status, "reason"));
}

/* The API server, when the doctor can reach it (--kubeconfig, else the in-cluster service
 * account): its own Node (authentication, the name, nvidia.com/mig.config), and DRA's API. Each
 * request bounded (5 s to connect, 10 s in all). */
static void check_api(struct doc *d) {
    struct gs_doc_api a = { .mig_config = d->policy_ok ? d->policy.mig_config : NULL,
                            .mig_warn = d->policy_ok && d->policy.other_mig_manager == GS_OTHER_MIG_WARN,
                            .dra = d->dra };
    char cfg_err[1024], node_err[1024], dra_err[1024], sar_err[1024], host[256], path[KUBE_URL_MAX], source[PATH_MAX + 16];
    struct kube_config cfg = { 0 };
    int r;
    if (d->kubeconfig) {
        r = kube_config_load(d->kubeconfig, NULL, &cfg, cfg_err, sizeof(cfg_err));
        snprintf(source, sizeof(source), "--kubeconfig %s", d->kubeconfig);
    } else {
        r = kube_config_in_cluster(NULL, &cfg, cfg_err, sizeof(cfg_err));
        snprintf(source, sizeof(source), "the in-cluster service account");
        if (r == -ENOENT && !getenv("KUBERNETES_SERVICE_HOST"))
            snprintf(cfg_err, sizeof(cfg_err), "no --kubeconfig, and not in a cluster (no KUBERNETES_SERVICE_HOST)");
    }
    struct kube_limits lim = KUBE_DEFAULT_LIMITS;
    lim.connect_timeout_ms = 5000;
    lim.timeout_ms = 10000;
    lim.max_response = (size_t)4 << 20;
    struct kube_client *c = NULL;
    char server[512] = "";
    if (r == 0) {
        snprintf(server, sizeof(server), "%s", cfg.server);
        r = kube_client_new(&cfg, &lim, &c, cfg_err, sizeof(cfg_err));
    }
    kube_config_free(&cfg);
    if (r < 0) {
        a.why_none = cfg_err;
        a.bad_config = d->kubeconfig || getenv("KUBERNETES_SERVICE_HOST");
        gs_doc_api_findings(&d->rep, &a);
        return;
    }
    a.server = server;
    a.source = source;
    a.node = host;
    json_t *node = NULL, *sar = NULL;
    /* the Node's name as the agent takes it: --node-name, $NODE_NAME (the chart's, from
     * spec.nodeName), else the lower-cased host name (the kubelet's default) */
    a.node_r = gs_node_name(d->node_name, host, sizeof(host), &a.node_from, node_err, sizeof(node_err));
    if (a.node_r == 0 && (a.node_r = kube_path(path, sizeof(path), "v1", NULL, "nodes", a.node)) < 0)
        snprintf(node_err, sizeof(node_err), "'%s' is not a Node name", a.node);
    else if (a.node_r == 0)
        a.node_r = kube_get(c, path, &node, node_err, sizeof(node_err));
    a.node_err = node_err;
    a.mig_label = json_string_value(json_object_get(json_object_get(json_object_get(node, "metadata"), "labels"),
                                                    GS_DOC_MIG_LABEL));
    if (d->dra && (a.node_r == 0 || a.node_r == -ENOENT))
        ask_dra(c, &a, dra_err, sar_err, sizeof(dra_err), &sar);
    gs_doc_api_findings(&d->rep, &a);
    json_decref(node);
    json_decref(sar);
    kube_client_free(c);
}

static void usage(FILE *f) {
    fprintf(f,
            "Usage: gpuslice [GLOBAL OPTIONS] doctor [--config POLICY.yaml] [OPTIONS]\n\n"
            "Checks the node as the agent needs it: NVML and the GPUs, device nodes, privileges, the kubelet's\n"
            "sockets, competing device plugins, the policy and its MIG layout, the container runtime's CDI\n"
            "setting and directories, the MPS and guard paths, the API server (the agent's Node, NVIDIA's MIG\n"
            "manager's label on it, DRA). One line per finding with its fix\n"
            "(docs/doctor.md). Exit status: 0 ready, 1 not ready (a failed check), 2 usage.\n\n"
            "  -c, --config FILE           the sharing policy, parsed and planned as the agent would\n"
            "  --kubelet-dir DIR           device-plugin directory (default " DEFAULT_KUBELET_DIR ")\n"
            "  --pod-resources-socket S    the kubelet's PodResources socket (default " GS_PODRESOURCES_SOCKET ")\n"
            "  --cdi-root DIR              where the agent writes its CDI spec (default /var/run/cdi)\n"
            "  --cdi-kind VENDOR/CLASS     its kind (default " GS_CDI_KIND ")\n"
            "  --cdi-dir DIR               a CDI directory to scan for conflicting specs (repeatable; default:\n"
            "                              the runtime's cdi_spec_dirs, else /etc/cdi and /var/run/cdi)\n"
            "  --containerd-config PATH    containerd's config (default " DEFAULT_CONTAINERD "; \"\": none)\n"
            "  --crio-config PATH          CRI-O's config (default " DEFAULT_CRIO "; \"\": none)\n"
            "  --guard-root DIR            the guard's files (default /var/lib/gpuslice/guard)\n"
            "  --proc-root DIR             where devices and mig-minors are (default /proc; --sim: ROOT/proc)\n"
            "  --operator-dir DIR          the GPU Operator's validation marks (default " OPERATOR_VALIDATIONS ")\n"
            "  --kubeconfig FILE           the API server's checks with this kubeconfig (default: the in-cluster\n"
            "                              service account when in a cluster, else none)\n"
            "  --node-name NAME            the Node the agent runs as (default $NODE_NAME, else the host name)\n"
            "  --dra                       the agent serves the DRA driver (agent --dra): check DRA's API and RBAC\n"
            "  --extender URL              the scheduler extender's urlPrefix: its /healthz, and a filter for an\n"
            "                              empty pod on this node\n"
            "  --extender-warn             with --extender: what it finds is at worst a warning (the node stays\n"
            "                              ready), each request 2 s at most (the chart's init container)\n"
            "  --extender-ca FILE          with an https:// --extender: the CA of its serving certificate (PEM)\n"
            "  --extender-cert FILE        the client certificate to present (PEM; an extender with TLS takes\n"
            "  --extender-key FILE         requests only with one its client CA verifies: the scheduler's), its key\n"
            "  --json                      schema gpuslice.doctor/v1 (docs/cli.md)\n"
            "  --termination-log FILE      also write the failures and warnings there (e.g. /dev/termination-log)\n");
}

int cmd_doctor(const struct cli *cli, int argc, char **argv) {
    enum { OPT_KUBELET_DIR = 256, OPT_POD_RESOURCES, OPT_CDI_ROOT, OPT_CDI_KIND, OPT_CDI_DIR, OPT_CONTAINERD, OPT_CRIO,
           OPT_GUARD_ROOT, OPT_PROC_ROOT, OPT_OPERATOR, OPT_TERMLOG, OPT_KUBECONFIG, OPT_NODE_NAME, OPT_DRA, OPT_EXTENDER,
           OPT_EXTENDER_WARN, OPT_EXTENDER_CA, OPT_EXTENDER_CERT, OPT_EXTENDER_KEY };
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "kubelet-dir", required_argument, NULL, OPT_KUBELET_DIR },
        { "pod-resources-socket", required_argument, NULL, OPT_POD_RESOURCES },
        { "cdi-root", required_argument, NULL, OPT_CDI_ROOT },
        { "cdi-kind", required_argument, NULL, OPT_CDI_KIND },
        { "cdi-dir", required_argument, NULL, OPT_CDI_DIR },
        { "containerd-config", required_argument, NULL, OPT_CONTAINERD },
        { "crio-config", required_argument, NULL, OPT_CRIO },
        { "guard-root", required_argument, NULL, OPT_GUARD_ROOT },
        { "proc-root", required_argument, NULL, OPT_PROC_ROOT },
        { "operator-dir", required_argument, NULL, OPT_OPERATOR },
        { "termination-log", required_argument, NULL, OPT_TERMLOG },
        { "kubeconfig", required_argument, NULL, OPT_KUBECONFIG },
        { "node-name", required_argument, NULL, OPT_NODE_NAME },
        { "dra", no_argument, NULL, OPT_DRA },
        { "extender", required_argument, NULL, OPT_EXTENDER },
        { "extender-warn", no_argument, NULL, OPT_EXTENDER_WARN },
        { "extender-ca", required_argument, NULL, OPT_EXTENDER_CA },
        { "extender-cert", required_argument, NULL, OPT_EXTENDER_CERT },
        { "extender-key", required_argument, NULL, OPT_EXTENDER_KEY },
        { "json", no_argument, NULL, 'j' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    static struct doc d; /* the report is large; one per process */
    memset(&d, 0, sizeof(d));
    d.cli = cli;
    d.kubelet_dir = DEFAULT_KUBELET_DIR;
    d.pod_resources = GS_PODRESOURCES_SOCKET;
    d.cdi_root = "/var/run/cdi";
    d.cdi_kind = GS_CDI_KIND;
    d.guard_root = "/var/lib/gpuslice/guard";
    d.containerd = DEFAULT_CONTAINERD;
    d.crio = DEFAULT_CRIO;
    d.operator_dir = OPERATOR_VALIDATIONS;
    const char *termlog = NULL;
    bool as_json = false;
    int c;
    while ((c = getopt_long(argc, argv, "c:jh", opts, NULL)) != -1) {
        switch (c) {
        case 'c': d.config = optarg; break;
        case OPT_KUBELET_DIR: d.kubelet_dir = optarg; break;
        case OPT_POD_RESOURCES: d.pod_resources = optarg; break;
        case OPT_CDI_ROOT: d.cdi_root = optarg; break;
        case OPT_CDI_KIND:
            if (!gs_cdi_kind_valid(optarg))
                return cli_usage_error("doctor", "--cdi-kind: '%s' is not a CDI kind (VENDOR/CLASS)", optarg);
            d.cdi_kind = optarg;
            break;
        case OPT_CDI_DIR:
            if (d.n_scan == GS_DOC_MAX_DIRS)
                return cli_usage_error("doctor", "--cdi-dir: at most %d directories", GS_DOC_MAX_DIRS);
            d.scan[d.n_scan++] = optarg;
            break;
        case OPT_CONTAINERD: d.containerd = optarg; break;
        case OPT_CRIO: d.crio = optarg; break;
        case OPT_GUARD_ROOT: d.guard_root = optarg; break;
        case OPT_PROC_ROOT: d.proc_root = optarg; break;
        case OPT_OPERATOR: d.operator_dir = optarg; break;
        case OPT_TERMLOG: termlog = optarg; break;
        case OPT_KUBECONFIG: d.kubeconfig = optarg; break;
        case OPT_NODE_NAME:
            if (!optarg[0])
                return cli_usage_error("doctor", "--node-name: empty");
            d.node_name = optarg;
            break;
        case OPT_DRA: d.dra = true; break;
        case OPT_EXTENDER: d.extender = optarg; break;
        case OPT_EXTENDER_WARN: d.extender_warn = true; break;
        case OPT_EXTENDER_CA: d.extender_tls.ca_file = optarg; break;
        case OPT_EXTENDER_CERT: d.extender_tls.cert_file = optarg; break;
        case OPT_EXTENDER_KEY: d.extender_tls.key_file = optarg; break;
        case 'j': as_json = true; break;
        case 'h': usage(stdout); return GS_EXIT_OK;
        default: usage(stderr); return GS_EXIT_USAGE;
        }
    }
    if (cli_no_more_args("doctor", argc, argv, optind) != GS_EXIT_OK)
        return GS_EXIT_USAGE;
    if (d.extender_warn && !d.extender)
        return cli_usage_error("doctor", "--extender-warn: without --extender URL there is no extender to check");
    if ((d.extender_tls.ca_file || d.extender_tls.cert_file || d.extender_tls.key_file) && !d.extender)
        return cli_usage_error("doctor", "--extender-ca, --extender-cert, --extender-key: without --extender URL "
                                         "there is no extender to check");
    if (!d.extender_tls.cert_file != !d.extender_tls.key_file)
        return cli_usage_error("doctor", "--extender-cert and --extender-key go together");
    if ((d.extender_tls.ca_file || d.extender_tls.cert_file) && d.extender && strncmp(d.extender, "https://", 8) != 0)
        return cli_usage_error("doctor", "--extender-ca, --extender-cert: --extender %s is not an https:// URL",
                               d.extender);
    check_policy(&d);
    check_nvml(&d);
    if (!d.node || !cli_node_path(d.node, "", NULL, d.root))
        snprintf(d.root, sizeof(d.root), "/");
    check_device_nodes(&d);
    check_privileges(&d);
    check_plan(&d);
    check_kubelet(&d);
    check_runtime(&d);
    check_cdi_dirs(&d);
    check_dirs(&d);
    check_operator(&d);
    check_api(&d);
    if (d.extender) {
        char host[256], why[512];
        const char *from;
        if (gs_node_name(d.node_name, host, sizeof(host), &from, why, sizeof(why)) < 0)
            fprintf(stderr, "gpuslice doctor: the extender's check without a Node: %s\n", why);
        gs_doc_check_extender(&d.rep, d.extender, host, d.extender_warn, &d.extender_tls);
    }
    if (as_json) {
        char *s = gs_doc_json(&d.rep);
        if (s)
            printf("%s\n", s);
        free(s);
    } else {
        gs_doc_print_text(&d.rep, stdout);
    }
    int rc = gs_doc_exit_code(&d.rep);
    if (termlog) {
        char msg[4096], why[PATH_MAX + 64] = "";
        size_t n = gs_doc_summary(&d.rep, msg, sizeof(msg));
        /* Never blocks: a FIFO, a device or a link at the path is refused by its kind. */
        FILE *f = gs_fopen_write(termlog, GS_WRITE_TRUNC, why, sizeof(why));
        bool ok = f && fwrite(msg, 1, n, f) == n;
        if (f && fclose(f) != 0)
            ok = false;
        if (!ok) {
            if (f || !why[0])
                snprintf(why, sizeof(why), "%s: %s", termlog, strerror(errno));
            fprintf(stderr, "gpuslice doctor: --termination-log %s\n", why);
            rc = GS_EXIT_FAILURE;
        }
    }
    if (d.plan_ok)
        gs_plan_free(&d.plan);
    free(d.inv);
    if (d.node)
        gpu_node_close(d.node);
    return rc;
}
