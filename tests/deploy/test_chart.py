"""Tests of the Helm chart (deploy/helm/gpuslice) and the plain manifests (deploy/manifests).

No cluster here: the chart is rendered by the real Helm (`helm template`, helmchart.py in this
directory; helm is built by tests/e2e/build.sh helm, cached) and linted by it (`helm lint
--strict`); the objects are checked against the Kubernetes API types (k8s_schema.py, Debian's
python3-kubernetes); and the DaemonSet's container is run for real: the same arguments, environment and init container, given to the real gpuslice on
a simulated node, with every path the pod mounts redirected into a temporary directory, against
the kubelet emulator of tests/integration.

Environment (set by meson): GPUSLICE (the binary), GPUSLICE_SIM_LIB, GS_SOURCE_ROOT; GS_HELM (a
helm binary instead of the one build.sh builds), optional."""
import difflib
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest
import yaml

import helmchart
import k8s_schema

ROOT = helmchart.ROOT
GPUSLICE = os.environ.get("GPUSLICE") or os.path.join(ROOT, "build", "gpuslice")
SIM_LIB = os.environ.get("GPUSLICE_SIM_LIB") or os.path.join(os.path.dirname(GPUSLICE), "sim", "libgpuslice-nvml-sim.so")
GUARD_LIB = os.path.join(os.path.dirname(GPUSLICE), "guard", "libgpuslice-guard.so")
MANIFESTS = helmchart.MANIFESTS
REGENERATE = "regenerate it: scripts/render-manifests.sh"
DEPLOY_MD = os.path.join(ROOT, "docs", "deploy.md")
T4X2 = os.path.join(ROOT, "examples", "nodes", "t4x2.yaml")
TS_POLICY = os.path.join(ROOT, "examples", "workloads", "time-slicing", "policy.yaml")
IMAGE_LIB_DIR = "/usr/lib/gpuslice"  # where the Dockerfile puts the guard (check_dockerfile.py checks it)
IMAGE_HOOK = "/usr/bin/gpuslice-cdi-hook"  # and the CDI hook
CDIHOOK = os.environ.get("GS_CDIHOOK") or os.path.join(os.path.dirname(GPUSLICE), "src", "cdihook", "gpuslice-cdi-hook")

sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from kubelet_emulator import KubeletEmulator  # noqa: E402


def read(path):
    with open(path) as f:
        return f.read()


def objects(docs):
    return [parsed for _, _, parsed in docs]


def find(objs, kind):
    found = [o for o in objs if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def pod_spec(objs):
    return find(objs, "DaemonSet")["spec"]["template"]["spec"]


def agent_container(objs):
    return next(c for c in pod_spec(objs)["containers"] if c["name"] == "agent")


def default_objects():
    return objects(helmchart.render())


# ------------------------------------------------------------------------------------------ (a) rendering

def test_default_render_equals_plain_manifests():
    with open(MANIFESTS) as f:
        plain = [d for d in yaml.safe_load_all(f) if d is not None]
    rendered = default_objects()
    ns = plain[0]
    assert ns["kind"] == "Namespace" and ns["metadata"]["name"] == helmchart.NAMESPACE
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert [o["kind"] for o in plain[1:]] == [o["kind"] for o in rendered]
    for got, want in zip(plain[1:], rendered):
        assert got == want, f"deploy/manifests/gpuslice.yaml differs from the chart's {want['kind']}; {REGENERATE}"


def test_plain_manifests_are_what_the_script_renders():
    """deploy/manifests/gpuslice.yaml is, to the byte, what scripts/render-manifests.sh writes with
    the real Helm: a chart change without regenerating the file fails here."""
    want = helmchart.rendered_manifests()
    got = read(MANIFESTS)
    diff = "".join(difflib.unified_diff(got.splitlines(True), want.splitlines(True), "deploy/manifests/gpuslice.yaml",
                                        "scripts/render-manifests.sh -", n=1))
    assert got == want, f"deploy/manifests/gpuslice.yaml is not what the chart renders; {REGENERATE}\n{diff[:4000]}"
    assert want.count("\n# Source: gpuslice/templates/") == len(default_objects())


def test_default_render_kinds_and_order():
    assert [o["kind"] for o in default_objects()] == ["ServiceAccount", "ConfigMap", "ClusterRole", "ClusterRoleBinding",
                                                      "Service", "DaemonSet"]
    notes = helmchart.notes()
    assert "kubectl -n gpuslice-system logs ds/gpuslice -c agent" in notes


def test_chart_metadata_matches_project_version():
    chart, values = helmchart.load_chart()
    assert chart["apiVersion"] == "v2" and chart["name"] == "gpuslice" and chart["type"] == "application"
    version = re.search(r"version\s*:\s*'([^']+)'", read(os.path.join(ROOT, "meson.build"))).group(1)
    assert chart["appVersion"] == version, "Chart.yaml appVersion is the agent's version (meson.build)"
    assert values["image"]["tag"] == version
    assert agent_container(default_objects())["image"] == f"gpuslice:{version}"


def test_service_monitor_enabled():
    objs = objects(helmchart.render({"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}))
    assert "ServiceMonitor" not in [o["kind"] for o in default_objects()]
    assert [o["kind"] for o in objs][-1] == "ServiceMonitor", "unknown kinds come last, as helm template orders them"
    sm, svc = find(objs, "ServiceMonitor"), find(objs, "Service")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["namespace"] == helmchart.NAMESPACE
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert sm["metadata"]["labels"]["app.kubernetes.io/name"] == "gpuslice"
    sel = sm["spec"]["selector"]["matchLabels"]
    assert all(svc["metadata"]["labels"].get(k) == v for k, v in sel.items()), "the ServiceMonitor selects the Service"
    assert sm["spec"]["namespaceSelector"]["matchNames"] == [helmchart.NAMESPACE]
    assert sm["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]
    assert any(p["name"] == "metrics" for p in svc["spec"]["ports"])


def test_unprivileged():
    objs = objects(helmchart.render({"securityContext": {"privileged": False}, "runtimeClassName": "nvidia"}))
    sc = agent_container(objs)["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["readOnlyRootFilesystem"] is True
    assert pod_spec(objs)["hostPID"] is True, "the guard reconcile needs the host's processes either way"
    assert "Unprivileged" in helmchart.notes({"securityContext": {"privileged": False}})
    default_sc = agent_container(default_objects())["securityContext"]
    assert default_sc["privileged"] is True and "allowPrivilegeEscalation" not in default_sc, \
        "privileged with allowPrivilegeEscalation false is refused by the API server"


def test_custom_node_selector_replaces_default_with_null():
    # Helm merges maps: a null deletes a key of the chart's values.yaml (the affinity's nodeAffinity
    # below); the default nodeSelector is empty, so the user's labels are the selector. A null for a
    # key values.yaml does not have is not deleted: Helm keeps it, and renders it as null.
    sel = {"feature.node.kubernetes.io/pci-10de.present": "true"}
    spec = pod_spec(objects(helmchart.render({"nodeSelector": sel})))
    assert spec["nodeSelector"] == {"feature.node.kubernetes.io/pci-10de.present": "true"}
    kept = pod_spec(objects(helmchart.render({"nodeSelector": {"nvidia.com/gpu.present": None, **sel}})))
    assert kept["nodeSelector"] == {"nvidia.com/gpu.present": None, **sel}
    merged = pod_spec(objects(helmchart.render({"nodeSelector": {"gpu": "yes"}})))
    assert merged["nodeSelector"] == {"gpu": "yes"}  # the default selects nothing: the affinity does
    assert "nodeSelector" not in pod_spec(objects(helmchart.render({"nodeSelector": None})))
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]}]}]}}}
    assert pod_spec(objects(helmchart.render({"affinity": aff})))["affinity"] == aff  # the terms list replaces the default's
    assert "affinity" not in pod_spec(objects(helmchart.render({"affinity": {"nodeAffinity": None}})))


def _node_matches(spec, labels):
    """Whether a node with these labels is selected: nodeSelector AND any nodeSelectorTerm."""
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    terms = (spec.get("affinity") or {}).get("nodeAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms")
    if not terms:
        return True
    for t in terms:
        exprs = t.get("matchExpressions", [])
        assert all(e["operator"] == "In" for e in exprs)
        if all(labels.get(e["key"]) in e["values"] for e in exprs):
            return True
    return False


def test_default_node_selection_without_nfd_or_gfd():
    """The DaemonSet lands on a GPU node labelled by the user (no NFD/GFD), by NFD's PCI vendor
    label or by GFD's label, and not on a node without GPUs."""
    spec = pod_spec(default_objects())
    assert "nodeSelector" not in spec
    assert _node_matches(spec, {"gpuslice.io/gpu": "true"})
    assert _node_matches(spec, {"feature.node.kubernetes.io/pci-10de.present": "true"})
    assert _node_matches(spec, {"nvidia.com/gpu.present": "true"})
    assert not _node_matches(spec, {"kubernetes.io/os": "linux"})
    assert not _node_matches(spec, {"gpuslice.io/gpu": "false"})
    # a cluster with NFD: its label only
    nfd = pod_spec(objects(helmchart.render({"affinity": None,
                                             "nodeSelector": {"feature.node.kubernetes.io/pci-10de.present": "true"}})))
    assert _node_matches(nfd, {"feature.node.kubernetes.io/pci-10de.present": "true"})
    assert not _node_matches(nfd, {"gpuslice.io/gpu": "true"})


def test_doctor_init_container():
    spec = pod_spec(default_objects())
    first = spec["initContainers"][0]
    assert first["name"] == "doctor" and "doctor" in first["args"]
    assert first["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert _arg(first, "--termination-log") == "/dev/termination-log"
    assert _arg(first, "--containerd-config") == "/host-containerd/config.toml"
    assert {"name": "containerd-config", "mountPath": "/host-containerd", "readOnly": True} in first["volumeMounts"]
    agent = agent_container(default_objects())
    for flag in ("--config", "--kubelet-dir", "--pod-resources-socket", "--guard-root", "--cdi-root", "--nvml-lib"):
        assert _arg(first, flag) == _arg(agent, flag), flag  # the doctor checks what the agent uses
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols["containerd-config"]["hostPath"] == {"path": "/etc/containerd", "type": "Directory"}
    off = pod_spec(objects(helmchart.render({"doctor": {"enabled": False}})))
    assert [c["name"] for c in off["initContainers"]] == ["install-guard", "install-cdi-hook"]
    assert "containerd-config" not in {v["name"] for v in off["volumes"]}
    none = pod_spec(objects(helmchart.render({"doctor": {"containerdConfigDir": ""}})))
    assert _arg(none["initContainers"][0], "--containerd-config") == ""
    assert "containerd-config" not in {v["name"] for v in none["volumes"]}


def test_api_access_of_the_doctor_and_the_agent():
    """The doctor and the agent GET their own Node (nvidia.com/mig.config): a token of their own
    (the pod's automount stays off), NODE_NAME from spec.nodeName, and get on nodes only."""
    objs = default_objects()
    role, binding, sa = find(objs, "ClusterRole"), find(objs, "ClusterRoleBinding"), find(objs, "ServiceAccount")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
                             {"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews"],
                              "verbs": ["create"]}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": helmchart.NAMESPACE}]
    spec = pod_spec(objs)
    vols = {v["name"]: v for v in spec["volumes"]}
    sources = vols["api-token"]["projected"]["sources"]
    assert sources[0]["serviceAccountToken"]["path"] == "token"
    assert sources[1]["configMap"]["name"] == "kube-root-ca.crt"
    token = {"name": "api-token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True}
    for c in spec["initContainers"] + spec["containers"]:
        has = token in c.get("volumeMounts", [])
        assert has == (c["name"] in ("doctor", "agent")), c["name"]
        if has:
            env = {e["name"]: e for e in c["env"]}
            assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}, c["name"]


def test_fractional_grants_list_on_pods():
    """fractional.enabled adds list on pods to the agent's ClusterRole (docs/fractional.md): it finds
    the pod being admitted on its node; the default grants no access to pods."""
    pods_rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}
    assert pods_rule not in find(default_objects(), "ClusterRole")["rules"]
    objs = objects(helmchart.render({"fractional": {"enabled": True}}))
    role = find(objs, "ClusterRole")
    assert role["rules"][-1] == pods_rule and len(role["rules"]) == 3, role["rules"]
    assert find(objs, "ClusterRoleBinding")["roleRef"]["name"] == role["metadata"]["name"]


DRA = {"dra": {"enabled": True, "driver": "gpu.example.com"}}


@pytest.mark.parametrize("kubelet_dir", ["/var/lib/kubelet", "/var/lib/k0s/kubelet"])
def test_dra_driver_in_the_daemonset(kubelet_dir):
    """dra.enabled runs the agent as the DRA driver (docs/dra.md): --dra with the driver's name, the
    kubelet's plugins_registry/ and plugins/ mounted at their host paths (the kubelet dials the
    socket path the agent registers) and named by the agent's flags, the API token and NODE_NAME,
    the DRA ClusterRole bound to the pod's ServiceAccount, and the doctor's --dra. The default has
    none of it."""
    objs = objects(helmchart.render({**DRA, "kubeletDir": kubelet_dir}))
    spec, agent = pod_spec(objs), agent_container(objs)
    args = agent["args"]
    assert args.count("--dra") == 1 and args.index("--dra") > args.index("agent")
    assert _arg(agent, "--dra-driver") == "gpu.example.com"
    vols = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m for m in agent["volumeMounts"]}
    for name, flag, sub in (("kubelet-plugins-registry", "--kubelet-registry-dir", "plugins_registry"),
                            ("kubelet-plugins", "--kubelet-plugins-dir", "plugins")):
        host = f"{kubelet_dir}/{sub}"
        assert vols[name]["hostPath"] == {"path": host, "type": "Directory"}, name
        assert mounts[name] == {"name": name, "mountPath": host}, "read-write, at the host path"
        assert _arg(agent, flag) == host, flag
    assert {"name": "api-token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            "readOnly": True} in agent["volumeMounts"]
    # DRA pods' utilization: the kubelet's root read-only where the agent looks for dra_manager_state
    # (the parent of --kubelet-dir's mount), the pod logs directory read-only at its host path
    assert vols["kubelet-root"]["hostPath"] == {"path": kubelet_dir, "type": "Directory"}
    assert mounts["kubelet-root"] == {"name": "kubelet-root", "mountPath": "/var/lib/kubelet", "readOnly": True}
    assert os.path.dirname(_arg(agent, "--kubelet-dir")) == "/var/lib/kubelet"
    assert vols["pod-logs"]["hostPath"] == {"path": "/var/log/pods", "type": "DirectoryOrCreate"}
    assert mounts["pod-logs"] == {"name": "pod-logs", "mountPath": "/var/log/pods", "readOnly": True}
    assert _arg(agent, "--pod-logs-dir") == "/var/log/pods"
    off = agent_container(objects(helmchart.render({"dra": {**DRA["dra"], "podUtilization": False},
                                                    "kubeletDir": kubelet_dir})))
    assert "--pod-logs-dir" not in off["args"]
    assert not {"kubelet-root", "pod-logs"} & {m["name"] for m in off["volumeMounts"]}
    env = {e["name"]: e for e in agent["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    doctor = spec["initContainers"][0]
    assert doctor["name"] == "doctor" and doctor["args"].count("--dra") == 1
    assert doctor["args"].index("--dra") > doctor["args"].index("doctor")
    bindings = [o for o in objs if o["kind"] == "ClusterRoleBinding" and o["metadata"]["name"].endswith("-dra")]
    assert len(bindings) == 1 and bindings[0]["roleRef"]["name"] == f"{helmchart.RELEASE}-dra"
    assert bindings[0]["subjects"] == [{"kind": "ServiceAccount", "name": spec["serviceAccountName"],
                                        "namespace": helmchart.NAMESPACE}]
    role = next(o for o in objs if o["kind"] == "ClusterRole" and o["metadata"]["name"] == f"{helmchart.RELEASE}-dra")
    assert {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get", "list"]} in role["rules"]
    vap = find(objs, "ValidatingAdmissionPolicy")
    assert vap["spec"]["matchConditions"][0]["expression"].endswith(
        f'"system:serviceaccount:{helmchart.NAMESPACE}:{spec["serviceAccountName"]}"')
    for o in objs:
        if k8s_schema.model_name(o):  # DeviceClass and the admission policy: the API server's (test_chart_real)
            assert k8s_schema.validate(o) == [], o["kind"]
    out = helmchart.lint({**DRA, "kubeletDir": kubelet_dir})
    assert "0 chart(s) failed" in out and "[WARNING]" not in out, out
    # the agent knows every flag the chart gives it
    help_flags = _help_defaults("agent")
    for a in args[args.index("agent") + 1:]:
        assert not a.startswith("--") or a in help_flags, a
    default = pod_spec(default_objects())
    assert all("--dra" not in c.get("args", []) for c in default["initContainers"] + default["containers"])
    assert not {"kubelet-plugins-registry", "kubelet-plugins"} & {v["name"] for v in default["volumes"]}


def test_doctor_runs_and_fails_a_broken_node(pods):
    """The rendered doctor container on the simulated node: ready with the agent's mounts and the
    kubelet listening; a stale kubelet.sock fails it, the failure in its termination message."""
    pod = pods()
    pod.run_init_containers()
    assert "node ready" in pod.doctor.stdout
    pod.kubelet.stop()
    if os.path.exists(os.path.join(pod.kdir, "kubelet.sock")):
        os.unlink(os.path.join(pod.kdir, "kubelet.sock"))
    ctr = pod.spec["initContainers"][0]
    p = subprocess.run(pod.gpuslice_args(ctr), capture_output=True, text=True, timeout=60, env=pod.env(ctr))
    assert p.returncode == 1, p.stdout
    msg = read(os.path.join(pod.base, "termination-log"))
    assert msg.startswith("fail kubelet.socket:") and "fix:" in msg


def test_runtime_class_instead_of_driver_root():
    default = default_objects()
    assert "runtimeClassName" not in pod_spec(default)
    args = agent_container(default)["args"]
    assert args[args.index("--nvml-lib") + 1] == "/driver-root/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
    assert args.index("--nvml-lib") < args.index("agent"), "--nvml-lib is a global option"
    vol = {v["name"]: v for v in pod_spec(default)["volumes"]}["driver-root"]
    assert vol["hostPath"]["path"] == "/"
    assert "dev" in [v["name"] for v in pod_spec(default)["volumes"]]
    nodev = pod_spec(objects(helmchart.render({"hostPaths": {"dev": ""}})))
    assert "dev" not in [v["name"] for v in nodev["volumes"]]
    assert "dev" not in [m["name"] for m in nodev["containers"][0]["volumeMounts"]]
    rc = objects(helmchart.render({"runtimeClassName": "nvidia", "driver": {"root": "/run/nvidia/driver"}}))
    spec, c = pod_spec(rc), agent_container(rc)
    assert spec["runtimeClassName"] == "nvidia"
    assert "--nvml-lib" not in c["args"]
    assert "driver-root" not in [v["name"] for v in spec["volumes"]]
    assert "driver-root" not in [m["name"] for m in c["volumeMounts"]]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    other = objects(helmchart.render({"driver": {"root": "/run/nvidia/driver", "nvmlLibrary": "/usr/lib64/libnvidia-ml.so.1"}}))
    args = agent_container(other)["args"]
    assert args[args.index("--nvml-lib") + 1] == "/driver-root/usr/lib64/libnvidia-ml.so.1"
    assert {v["name"]: v for v in pod_spec(other)["volumes"]}["driver-root"]["hostPath"]["path"] == "/run/nvidia/driver"


def test_metrics_port_everywhere():
    objs = objects(helmchart.render({"metrics": {"port": 9500}}))
    c = agent_container(objs)
    assert c["args"][c["args"].index("--metrics-address") + 1] == ":9500"
    assert c["ports"] == [{"name": "metrics", "containerPort": 9500, "protocol": "TCP"}]
    assert find(objs, "Service")["spec"]["ports"][0]["port"] == 9500


def test_agent_options_and_policy_values():
    over = {"agent": {"logLevel": "debug", "pollIntervalMs": 500, "mpsControl": "/driver-root/usr/bin/nvidia-cuda-mps-control",
                      "extraArgs": ["--guard-grace-ms", "300000"]},
            "policy": "version: v1\nflags:\n  migStrategy: mixed\n", "kubeletDir": "/var/lib/k0s/kubelet"}
    objs = objects(helmchart.render(over))
    args = agent_container(objs)["args"]
    assert args[:2] == ["--log-level", "debug"]
    assert args[args.index("--poll-interval-ms") + 1] == "500"
    assert args[args.index("--mps-control") + 1] == "/driver-root/usr/bin/nvidia-cuda-mps-control"
    assert args[-2:] == ["--guard-grace-ms", "300000"]
    assert "--mps-control" not in agent_container(default_objects())["args"]
    assert find(objs, "ConfigMap")["data"]["policy.yaml"] == over["policy"]
    vols = {v["name"]: v["hostPath"]["path"] for v in pod_spec(objs)["volumes"] if "hostPath" in v}
    assert vols["device-plugins"] == "/var/lib/k0s/kubelet/device-plugins"
    assert vols["pod-resources"] == "/var/lib/k0s/kubelet/pod-resources"


# ------------------------------------------------------------------------------------------ (b) structure

RENDERS = {
    "default": None,
    "unprivileged": {"securityContext": {"privileged": False}, "runtimeClassName": "nvidia", "hostPaths": {"dev": ""}},
    "servicemonitor": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
                       "podAnnotations": {"example.com/team": "ml"}, "imagePullSecrets": [{"name": "regcred"}]},
}


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_helm_lint_strict(name):
    """`helm lint --strict`: the chart is well formed, and renders without a warning under each value set."""
    out = helmchart.lint(RENDERS[name])
    assert "1 chart(s) linted, 0 chart(s) failed" in out, out
    assert "[WARNING]" not in out and "[ERROR]" not in out, out


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_objects_validate_against_kubernetes_api(name):
    for obj in objects(helmchart.render(RENDERS[name])):
        if obj["kind"] == "ServiceMonitor":
            continue  # a CRD: checked in test_service_monitor_enabled
        assert k8s_schema.validate(obj) == [], obj["kind"]


def test_plain_manifests_validate_against_kubernetes_api():
    with open(MANIFESTS) as f:
        for obj in yaml.safe_load_all(f):
            if obj is not None:
                assert k8s_schema.validate(obj) == [], obj["kind"]


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_objects_are_consistent(name):
    objs = objects(helmchart.render(RENDERS[name]))
    for o in objs:
        if o["kind"] in ("ClusterRole", "ClusterRoleBinding"):  # cluster-scoped: no namespace
            assert "namespace" not in o["metadata"], o["kind"]
        else:
            assert o["metadata"]["namespace"] == helmchart.NAMESPACE, o["kind"]
        assert o["metadata"]["labels"]["app.kubernetes.io/name"] == "gpuslice"
    ds, svc, sa, cm = (find(objs, k) for k in ("DaemonSet", "Service", "ServiceAccount", "ConfigMap"))
    spec = ds["spec"]["template"]["spec"]
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels.get(k) == v for k, v in ds["spec"]["selector"]["matchLabels"].items())
    assert all(pod_labels.get(k) == v for k, v in svc["spec"]["selector"].items()), "the Service selects the pods"
    assert svc["spec"]["type"] == "ClusterIP"
    assert spec["serviceAccountName"] == sa["metadata"]["name"]
    assert sa["automountServiceAccountToken"] is False and spec["automountServiceAccountToken"] is False
    assert spec["hostPID"] is True and not spec.get("hostNetwork") and not spec.get("hostIPC")
    assert spec["priorityClassName"] == "system-node-critical"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert "nodeSelector" not in spec  # the default affinity selects GPU nodes (test_default_node_selection_...)
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    c = agent_container(objs)
    assert "command" not in c, "the image's ENTRYPOINT is gpuslice"
    ports = {p["name"]: p for p in c["ports"]}
    assert [p["targetPort"] for p in svc["spec"]["ports"]] == ["metrics"] and "metrics" in ports
    assert svc["spec"]["ports"][0]["port"] == ports["metrics"]["containerPort"]
    for probe in (c["livenessProbe"], c["readinessProbe"]):
        assert probe["httpGet"] == {"path": "/metrics", "port": "metrics"}
    assert c["resources"]["requests"]["memory"] and c["resources"]["limits"]["memory"]
    assert c["securityContext"]["runAsUser"] == 0 and c["securityContext"]["readOnlyRootFilesystem"] is True
    vols = {v["name"]: v for v in spec["volumes"]}
    assert len(vols) == len(spec["volumes"])
    used = set()
    for ctr in spec["containers"] + spec["initContainers"]:
        assert ctr["image"] == c["image"]
        for m in ctr["volumeMounts"]:
            assert m["name"] in vols, f"{ctr['name']} mounts unknown volume {m['name']}"
            used.add(m["name"])
    assert used == set(vols), "every volume is mounted"
    for v in vols.values():
        if "hostPath" in v:
            assert v["hostPath"]["type"] in ("Directory", "DirectoryOrCreate"), v["name"]
            assert os.path.isabs(v["hostPath"]["path"])
    assert vols["policy"]["configMap"]["name"] == cm["metadata"]["name"]
    policy_mount = next(m for m in c["volumeMounts"] if m["name"] == "policy")
    cfg = c["args"][c["args"].index("--config") + 1]
    assert os.path.dirname(cfg) == policy_mount["mountPath"] and os.path.basename(cfg) in cm["data"]


def _help_defaults(*args):
    """{flag: default path} from `gpuslice ... --help` (wrapped lines joined)."""
    p = subprocess.run([GPUSLICE, *args, "--help"], capture_output=True, text=True, timeout=20)
    assert p.returncode == 0, p.stderr
    entries, cur = [], None
    for line in p.stdout.splitlines():
        m = re.match(r"^\s{2}(?:-\w, )?(--[\w-]+)(.*)$", line)
        if m:
            cur = [m.group(1), m.group(2)]
            entries.append(cur)
        elif cur and line.startswith(" " * 20):
            cur[1] += " " + line.strip()
        else:
            cur = None
    out = {}
    for flag, text in entries:
        d = re.search(r"default:?\s+(/[^\s;)]+)", text)
        out[flag] = d.group(1) if d else None
    return out


def _under(path, root):
    return path == root or path.startswith(root.rstrip("/") + "/")


def test_host_paths_are_agent_defaults_or_documented():
    agent_flags = _help_defaults("agent")
    global_flags = _help_defaults()
    objs = default_objects()
    spec, c = pod_spec(objs), agent_container(objs)
    args = c["args"]
    split = args.index("agent")
    given = {}
    for i, a in enumerate(args):
        if a.startswith("--"):
            flags = global_flags if i < split else agent_flags
            assert a in flags, f"{a} is not an option of gpuslice{'' if i < split else ' agent'} --help"
            given[a] = args[i + 1]
    # the agent's mounts; a volume only an init container mounts (the doctor's containerd config) by its
    init_mounts = {m["name"]: m for ctr in spec["initContainers"] for m in ctr["volumeMounts"]}
    mounts = {**init_mounts, **{m["name"]: m for m in c["volumeMounts"]}}
    doc = read(DEPLOY_MD)
    table = [line for line in doc.splitlines() if line.startswith("| `/")]
    for v in spec["volumes"]:
        if "hostPath" not in v:
            continue
        host, inside = v["hostPath"]["path"], mounts[v["name"]]["mountPath"]
        assert any(line.startswith(f"| `{host}`") for line in table), \
            f"host path {host} ({v['name']}) has no row in docs/deploy.md's host path table"
        # flags whose value (or, when not given, default) lies under this mount
        backing = [f for f, d in {**agent_flags, **global_flags}.items()
                   if (given.get(f) or d) and str(given.get(f) or d).startswith("/") and _under(given.get(f) or d, inside)]
        for f in backing:
            default = agent_flags.get(f) or global_flags.get(f)
            if default and f not in ("--nvml-lib",):
                assert _under(default, host), f"{f}: the agent's default {default} is not under host path {host}"
        if not backing:
            row = next(line for line in table if line.startswith(f"| `{host}`"))
            assert len(row) > 60, f"host path {host} is backed by no agent flag: docs/deploy.md must say why"
    # The paths the agent hands to the kubelet must be the same inside the pod and on the host.
    for name in ("guard-root", "guard-lib", "mps-root"):
        assert mounts[name]["mountPath"] == {v["name"]: v for v in spec["volumes"]}[name]["hostPath"]["path"], name
    policy_h = read(os.path.join(ROOT, "src", "config", "policy.h"))
    mps_default = re.search(r'#define GS_MPS_ROOT_DEFAULT "([^"]+)"', policy_h).group(1)
    assert helmchart.load_chart()[1]["hostPaths"]["mpsRoot"] == mps_default, "flags.mpsRoot's default"


def test_every_value_is_documented():
    """Every value of values.yaml has a row in docs/deploy.md's values table; a value the templates
    pass through toYaml (a Kubernetes object) is one row."""
    tdir = os.path.join(helmchart.CHART, "templates")
    templates = "".join(read(os.path.join(tdir, f)) for f in sorted(os.listdir(tdir)))
    verbatim = set(re.findall(r"toYaml \.Values\.([\w.]+)", templates))
    assert {"nodeSelector", "resources", "tolerations"} <= verbatim

    def leaves(d, prefix=""):
        for k, v in d.items():
            if isinstance(v, dict) and v and prefix + k not in verbatim:
                yield from leaves(v, f"{prefix}{k}.")
            else:
                yield prefix + k

    doc = read(DEPLOY_MD)
    keys = list(leaves(helmchart.load_chart()[1]))
    assert "hostPaths.mpsRoot" in keys and "resources" in keys
    for key in keys:
        assert f"\n| `{key}` |" in doc, f"value {key} is not in docs/deploy.md's values table"
    for key in re.findall(r"^\| `([\w.]+)` \|", doc, re.M):
        if not key.startswith("/"):
            assert key in keys, f"docs/deploy.md documents {key}, which values.yaml does not have"


# ------------------------------------------------------------------------------------------ the pod, run

class RenderedPod:
    """The DaemonSet's pod on a simulated node: init containers then the agent, with the pod's
    mounts redirected under a temporary directory standing for the host."""

    def __init__(self, overrides=None, node=T4X2):
        self.objs = objects(helmchart.render(overrides))
        self.spec = pod_spec(self.objs)
        self.base = tempfile.mkdtemp(prefix="gs-d-", dir="/tmp")
        self.image = os.path.join(self.base, "image")
        os.makedirs(self.image + IMAGE_LIB_DIR)
        shutil.copy(GUARD_LIB, self.image + IMAGE_LIB_DIR)
        os.makedirs(os.path.dirname(self.image + IMAGE_HOOK))
        shutil.copy(CDIHOOK, self.image + IMAGE_HOOK)
        self.mounts = {}  # mountPath -> volume
        vols = {v["name"]: v for v in self.spec["volumes"]}
        for ctr in self.spec["containers"] + self.spec["initContainers"]:
            for m in ctr["volumeMounts"]:
                self.mounts[m["mountPath"]] = vols[m["name"]]
        for path, vol in self.mounts.items():
            os.makedirs(self.host(path), exist_ok=True)
            if "configMap" in vol:
                cm = next(o for o in self.objs if o["kind"] == "ConfigMap"
                          and o["metadata"]["name"] == vol["configMap"]["name"])
                for key, text in cm["data"].items():
                    with open(os.path.join(self.host(path), key), "w") as f:
                        f.write(text)
        self.kdir = self.host("/var/lib/kubelet/device-plugins")
        self.node = node
        self.proc = None
        self.nvml_link = None  # the simulated NVML the doctor's run linked into the driver root
        self.log_path = os.path.join(self.base, "agent.log")
        self.kubelet = KubeletEmulator(self.kdir).start()

    def host(self, path):
        """Where a path inside the pod lives here: under the temporary host or the image."""
        best = max((m for m in self.mounts if _under(path, m)), key=len, default=None)
        if best is not None:
            return self.base + path
        if _under(path, IMAGE_LIB_DIR) or path == IMAGE_HOOK:
            return self.image + path
        return path

    def unhost(self, path):
        assert path.startswith(self.base + "/"), path
        return path[len(self.base):]

    def run_init_containers(self):
        for ctr in self.spec["initContainers"]:
            if ctr["name"] == "doctor":  # gpuslice itself, on the simulated node
                self.doctor = subprocess.run(self.gpuslice_args(ctr), capture_output=True, text=True, timeout=60,
                                             env=self.env(ctr))
                assert self.doctor.returncode == 0, f"init container doctor:\n{self.doctor.stdout}"
                if self.nvml_link:  # the agent's run sets the driver root up itself
                    os.unlink(self.nvml_link)
                    self.nvml_link = None
                continue
            cmd = ctr["command"] + ctr.get("args", [])
            assert cmd[:2] == ["/bin/sh", "-c"], "init containers run a shell line"
            script = " ".join(self.host(w) if w.startswith("/") else w for w in shlex.split(cmd[2]))
            p = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=30)
            assert p.returncode == 0, f"init container {ctr['name']}: {p.stderr}"

    def start_agent(self):
        c = next(c for c in self.spec["containers"] if c["name"] == "agent")
        self.args = self.gpuslice_args(c)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=log, env=self.env(c))
        return self

    def env(self, c):
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE")}
        for e in c.get("env", []):
            if "value" not in e:  # valueFrom (NODE_NAME): the kubelet's; no API server here
                continue
            env[e["name"]] = self.host(e["value"]) if e["value"].startswith("/") else e["value"]
        return env

    def gpuslice_args(self, c):
        """The container's gpuslice command line on the simulated node, its paths under the host."""
        args = []
        for i, a in enumerate(c["args"]):
            if i and c["args"][i - 1] == "--metrics-address":
                a = "127.0.0.1:0"  # a free port: tests run side by side
            elif a == "/dev/termination-log":
                a = os.path.join(self.base, "termination-log")
            elif a.startswith("/"):
                a = self.host(a)
            args.append(a)
        if "--nvml-lib" in args:  # the host's driver root holds the simulated NVML library
            lib = args[args.index("--nvml-lib") + 1]
            os.makedirs(os.path.dirname(lib), exist_ok=True)
            if not os.path.lexists(lib):
                os.symlink(SIM_LIB, lib)
                self.nvml_link = lib
        return [GPUSLICE, "--sim", self.node, "--sim-state", os.path.join(self.base, "sim"), *args]

    def log(self):
        return read(self.log_path)

    def wait_log(self, pattern, timeout=10):
        deadline = time.monotonic() + timeout
        while True:
            m = re.search(pattern, self.log())
            if m:
                return m
            assert self.proc.poll() is None, f"agent exited with {self.proc.returncode}\n{self.args}\n{self.log()}"
            assert time.monotonic() < deadline, f"no log line matching {pattern!r}\n{self.args}\n{self.log()}"
            time.sleep(0.05)

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self.kubelet.stop()
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture
def pods():
    made = []

    def make(overrides=None):
        made.append(RenderedPod(overrides))
        return made[-1]

    yield make
    for p in made:
        print(f"---- {p.args if p.proc else 'not started'}\n{p.log()[-4000:] if p.proc else ''}")
        p.close()


@pytest.mark.parametrize("name", ["default", "unprivileged"])
def test_agent_runs_with_rendered_pod(pods, name):
    pod = pods(RENDERS[name])
    pod.run_init_containers()
    lib = pod.host(helmchart.load_chart()[1]["hostPaths"]["guardLib"] + "/libgpuslice-guard.so")
    assert os.path.isfile(lib), "the init container installs the guard library on the host"
    assert not os.path.exists(lib.replace("libgpuslice-guard.so", ".libgpuslice-guard.so.new"))
    pod.run_init_containers()  # a restarted pod replaces it
    pod.start_agent()
    m = pod.wait_log(r"Serving metrics on \S+ \(port (\d+)\)")
    pod.kubelet.wait_resources(["nvidia.com/gpu"], timeout=10)
    assert len(pod.kubelet.devices("nvidia.com/gpu")) == 2
    # the probes' endpoint
    with urllib.request.urlopen(f"http://127.0.0.1:{m.group(1)}/metrics", timeout=5) as r:
        assert r.status == 200 and "gpuslice_gpu_info" in r.read().decode()
    features = pod.host("/etc/kubernetes/node-feature-discovery/features.d/gpuslice")
    deadline = time.monotonic() + 5
    while not os.path.exists(features) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "gpuslice.io/gpu.count=2" in read(features).splitlines()
    pod.proc.send_signal(signal.SIGTERM)
    assert pod.proc.wait(10) == 0, pod.log()


def test_rendered_pod_serves_the_dra_driver_in_the_kubelets_directories(pods, monkeypatch):
    """The DRA render's doctor and agent on the simulated node: the doctor passes with --dra (no API
    server here: its API checks are left out), and the agent's registration and DRA sockets are in
    the volumes the pod mounts from the kubelet's plugins_registry/ and plugins/."""
    monkeypatch.setenv("KUBECONFIG", "/nonexistent")  # no API server, not this machine's config
    pod = pods({**DRA, "policy": "version: v1\ngpuslice:\n  dra:\n    gpus: all\n"})
    pod.run_init_containers()
    assert "node ready" in pod.doctor.stdout
    pod.start_agent()
    pod.wait_log(r"DRA: driver gpu\.example\.com serving")
    reg = pod.host("/var/lib/kubelet/plugins_registry/gpu.example.com-reg.sock")
    sock = pod.host("/var/lib/kubelet/plugins/gpu.example.com/dra.sock")
    for path in (reg, sock):
        assert stat.S_ISSOCK(os.stat(path).st_mode), path
    pod.proc.send_signal(signal.SIGTERM)
    assert pod.proc.wait(10) == 0, pod.log()


def test_guard_mounts_are_host_paths(pods):
    """With a memoryPerReplica policy, the agent's Allocate answer names host files for the kubelet
    to mount: they must exist and lie in host paths the pod mounts at the same place."""
    pod = pods({"policy": read(TS_POLICY)})
    pod.run_init_containers()
    pod.start_agent()
    pod.kubelet.wait_resources(["nvidia.com/gpu.shared"], timeout=10)
    dev = sorted(d.id for d in pod.kubelet.devices("nvidia.com/gpu.shared"))[0]
    resp = pod.kubelet.allocate("nvidia.com/gpu.shared", [dev])
    assert resp.envs["GPUSLICE_GUARD_CONFIG"] == "/etc/gpuslice/guard.conf"
    identity = {v["hostPath"]["path"] for p, v in pod.mounts.items() if "hostPath" in v and v["hostPath"]["path"] == p}
    mounts = {m.container_path: m.host_path for m in resp.mounts}
    assert set(mounts) >= {"/usr/lib/gpuslice/libgpuslice-guard.so", "/etc/gpuslice/guard.conf", "/etc/ld.so.preload"}
    for inside, here in mounts.items():
        assert os.path.exists(here), f"{inside}: {here} does not exist"
        on_host = pod.unhost(here)
        assert any(_under(on_host, h) for h in identity), f"{inside} comes from {on_host}, not a host path of the pod"
    assert pod.unhost(mounts["/usr/lib/gpuslice/libgpuslice-guard.so"]) == "/var/lib/gpuslice/lib/libgpuslice-guard.so"
    pod.proc.send_signal(signal.SIGTERM)
    assert pod.proc.wait(10) == 0, pod.log()


def test_default_policy_is_accepted():
    policy = find(default_objects(), "ConfigMap")["data"]["policy.yaml"]
    with tempfile.TemporaryDirectory(prefix="gs-d-") as d:
        path = os.path.join(d, "policy.yaml")
        with open(path, "w") as f:
            f.write(policy)
        p = subprocess.run([GPUSLICE, "--sim", T4X2, "--sim-state", os.path.join(d, "s"), "apply", "--config", path,
                            "--json"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    out = yaml.safe_load(p.stdout)
    assert [r["name"] for r in out["resources"]] == ["nvidia.com/gpu"] and out["warnings"] == []
    assert {g["mode"] for g in out["gpus"]} == {"whole"}


# ------------------------------------------------------------------------------------------ the CDI hook

def _arg(container, flag):
    args = container["args"]
    assert args.count(flag) == 1, f"{flag} given {args.count(flag)} times"
    return args[args.index(flag) + 1]


def _hook_installs(spec):
    """{host directory: installed path} of the init containers that install gpuslice-cdi-hook,
    from their shell line (cp to a temporary name, mv into place) and hostPath volumes."""
    vols = {v["name"]: v for v in spec["volumes"]}
    out = {}
    for ctr in spec["initContainers"]:
        if "command" not in ctr:  # the doctor: gpuslice itself, installs nothing
            continue
        words = shlex.split(ctr["command"][2])
        if IMAGE_HOOK not in words:
            continue
        mv = words.index("mv")
        src, dst = words[mv + 2], words[mv + 3]  # mv -f TMP DST
        assert words[1:3] == [IMAGE_HOOK, src] and words[mv + 1] == "-f", words
        assert os.path.dirname(src) == os.path.dirname(dst), "renamed within one directory: atomic"
        mount = next(m for m in ctr["volumeMounts"] if _under(dst, m["mountPath"]))
        host = vols[mount["name"]]["hostPath"]["path"]
        assert mount["mountPath"] == host, "mounted at its host path: the installed path is the host's"
        out[host] = dst
    return out


@pytest.mark.parametrize("over,hook_dir", [(None, "/var/lib/gpuslice/bin"),
                                           ({"hostPaths": {"cdiHook": "/opt/bin"}}, "/opt/bin"),
                                           ({"runtimeClassName": "nvidia", "securityContext": {"privileged": False}},
                                            "/var/lib/gpuslice/bin")])
def test_cdi_hook_installed_where_the_agent_points(over, hook_dir):
    """The container runtime runs the spec's hook on the host: an init container installs it in a
    host directory, and the agent's --cdi-hook names the installed file there."""
    objs = objects(helmchart.render(over))
    spec, c = pod_spec(objs), agent_container(objs)
    hook = _arg(c, "--cdi-hook")
    assert hook == hook_dir + "/gpuslice-cdi-hook"
    assert _hook_installs(spec) == {hook_dir: hook}
    assert _arg(c, "--cdi-root") == helmchart.load_chart()[1]["hostPaths"]["cdi"]
    assert all(k8s_schema.validate(o) == [] for o in objs if o["kind"] != "ServiceMonitor")


def test_cdi_hook_off():
    objs = objects(helmchart.render({"hostPaths": {"cdiHook": ""}}))
    spec, c = pod_spec(objs), agent_container(objs)
    assert _arg(c, "--cdi-hook") == ""
    assert _hook_installs(spec) == {}
    assert "cdi-hook" not in {v["name"] for v in spec["volumes"]}
    assert [i["name"] for i in spec["initContainers"]] == ["doctor", "install-guard"]


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the fake driver root uses the x86_64 library directory")
def test_rendered_pod_installs_the_hook_the_spec_names(pods):
    """The rendered pod for real: its init containers install the built hook on the (temporary)
    host, atomically and again on a restart, and the CDI spec the agent then writes names that
    host file as its createContainer hook."""
    from test_cdi import PROC_DEVICES, fake_driver_root
    work = tempfile.mkdtemp(prefix="gs-dh-", dir="/tmp")
    try:
        proc = os.path.join(work, "proc")
        os.makedirs(proc)
        with open(os.path.join(proc, "devices"), "w") as f:
            f.write(PROC_DEVICES)
        pod = pods({"agent": {"extraArgs": ["--proc-root", proc]}})
        pod.run_init_containers()
        hook = _arg(agent_container(pod.objs), "--cdi-hook")
        installed = pod.host(hook)
        assert installed.startswith(pod.base + "/") and os.access(installed, os.X_OK)
        assert read_bytes(installed) == read_bytes(CDIHOOK), "the image's hook, whole"
        assert os.listdir(os.path.dirname(installed)) == ["gpuslice-cdi-hook"], "no temporary file left"
        before = os.stat(installed).st_ino
        pod.run_init_containers()  # a restarted pod replaces it: a new file renamed into place
        assert os.stat(installed).st_ino != before and read_bytes(installed) == read_bytes(CDIHOOK)
        # the host's driver root, with libcuda: the spec then names the hook
        shutil.copytree(fake_driver_root(work), pod.host("/driver-root"), symlinks=True, dirs_exist_ok=True)
        os.unlink(pod.host("/driver-root" + helmchart.load_chart()[1]["driver"]["nvmlLibrary"]))  # start_agent's
        pod.start_agent()
        pod.wait_log(r"CDI spec written to ")
        with open(pod.host("/var/run/cdi/gpuslice.json")) as f:
            cdi = yaml.safe_load(f)
        hooks = cdi["containerEdits"]["hooks"]
        assert [pod.unhost(x["path"]) for x in hooks] == [hook] and hooks[0]["hookName"] == "createContainer"
        pod.proc.send_signal(signal.SIGTERM)
        assert pod.proc.wait(10) == 0, pod.log()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


# ------------------------------------------------------------------------------------------ metrics exposure

def test_metrics_bound_to_the_pod_ip():
    """metrics.bindFieldPath: the agent serves metrics only on the address the Downward API gives
    (the probes reach the pod's IP, so status.podIP keeps them working); by default every address."""
    c = agent_container(objects(helmchart.render({"metrics": {"bindFieldPath": "status.podIP", "port": 9500}})))
    args = c["args"]
    assert args[args.index("--metrics-address") + 1] == "$(GPUSLICE_METRICS_IP):9500"
    env = {e["name"]: e for e in c["env"]}
    assert env["GPUSLICE_METRICS_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    names = [e["name"] for e in c["env"]]
    assert names.index("GPUSLICE_METRICS_IP") >= 0 and c["ports"][0]["containerPort"] == 9500
    default = agent_container(default_objects())
    assert default["args"][default["args"].index("--metrics-address") + 1] == ":9402"
    assert "GPUSLICE_METRICS_IP" not in {e["name"] for e in default["env"]}
    for obj in objects(helmchart.render({"metrics": {"bindFieldPath": "status.podIP"}})):
        if obj["kind"] != "ServiceMonitor":
            assert k8s_schema.validate(obj) == [], obj["kind"]


def test_metrics_network_policy_example():
    """deploy/manifests/metrics-networkpolicy.yaml: a valid NetworkPolicy that selects the agent
    pods (the chart's labels, in its namespace) and lets in only the metrics port."""
    with open(os.path.join(ROOT, "deploy", "manifests", "metrics-networkpolicy.yaml")) as f:
        (np,) = [d for d in yaml.safe_load_all(f) if d is not None]
    assert np["kind"] == "NetworkPolicy" and k8s_schema.validate(np) == []
    ds = find(default_objects(), "DaemonSet")
    assert np["metadata"]["namespace"] == ds["metadata"]["namespace"]
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in np["spec"]["podSelector"]["matchLabels"].items())
    assert np["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = np["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": helmchart.load_chart()[1]["metrics"]["port"]}]
    assert rule["from"], "an empty from would let every pod in"
    assert "metrics-networkpolicy.yaml" in read(DEPLOY_MD)


# ------------------------------------------------------------------------------------------ the scheduler extender

EXTENDER = {"extender": {"enabled": True}}
EXTENDER_KINDS = ["ServiceAccount", "ConfigMap", "ClusterRole", "ClusterRoleBinding", "Service", "Deployment",
                  "Secret", "Secret", "NetworkPolicy"]


def extender_objects(over=None, kinds=EXTENDER_KINDS):
    """{kind: object} of the extender's objects (component: extender) in a render with extender.enabled
    (the Secrets by name)."""
    objs = objects(helmchart.render({"extender": {"enabled": True, **(over or {})}}))
    mine = [o for o in objs if o["metadata"]["labels"].get("app.kubernetes.io/component") == "extender"]
    assert sorted(o["kind"] for o in mine) == sorted(kinds), [o["kind"] for o in mine]
    return {o["metadata"]["name"] if o["kind"] == "Secret" else o["kind"]: o for o in mine}, objs


def _help_flags(*args):
    p = subprocess.run([GPUSLICE, *args, "--help"], capture_output=True, text=True, timeout=20)
    assert p.returncode == 0, p.stderr
    return set(re.findall(r"^\s+(--[\w-]+)", p.stdout, re.M))


def test_extender_off_by_default():
    """Off by default: no object of the extender, and the rest of the render as without the block
    (the doctor does not check the extender: it answers only the scheduler's client certificate);
    the plain manifests are compared byte for byte in test_plain_manifests_are_what_the_script_renders."""
    assert helmchart.load_chart()[1]["extender"]["enabled"] is False
    default = default_objects()
    assert not [o for o in default if "extender" in o["metadata"]["name"]]
    _, objs = extender_objects()
    rest = [o for o in objs if o["metadata"]["labels"].get("app.kubernetes.io/component") != "extender"]
    assert rest == default, "extender.enabled adds objects and changes none of the agent's"
    assert all("--extender" not in c.get("args", []) for c in pod_spec(objs)["initContainers"])
    assert "extender" not in helmchart.notes()
    out = helmchart.lint({"extender": {"enabled": True, "clusterIP": "10.96.0.88"}})
    assert "0 chart(s) failed" in out and "[WARNING]" not in out, out


def test_extender_deployment():
    ext, objs = extender_objects()
    dep, svc, sa = ext["Deployment"], ext["Service"], ext["ServiceAccount"]
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}
    tmpl = dep["spec"]["template"]
    labels = tmpl["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in dep["spec"]["selector"]["matchLabels"].items())
    assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items()), "the Service selects the extender"
    # and neither the DaemonSet nor the metrics Service selects the extender's pods
    ds, metrics = find(objs, "DaemonSet"), next(o for o in objs if o["metadata"]["name"] == "gpuslice-metrics")
    for sel in (ds["spec"]["selector"]["matchLabels"], metrics["spec"]["selector"]):
        assert not all(labels.get(k) == v for k, v in sel.items()), sel
    spec = tmpl["spec"]
    assert spec["serviceAccountName"] == sa["metadata"]["name"] != "gpuslice"
    assert spec.get("automountServiceAccountToken", True) and sa.get("automountServiceAccountToken", True), \
        "--api takes the in-cluster service account's token"
    (c,) = spec["containers"]
    assert c["image"] == agent_container(objs)["image"] and "command" not in c
    d = "/etc/gpuslice/extender-tls"
    assert c["args"] == ["extender", "--api", "--listen", "0.0.0.0:8888", "--tls-cert-file", f"{d}/tls.crt",
                         "--tls-key-file", f"{d}/tls.key", "--client-ca-file", f"{d}/ca.crt",
                         "--allowed-client-name", "kube-scheduler", "--policy", "gpuslice"]
    flags = _help_flags("extender")
    assert {a for a in c["args"] if a.startswith("--")} <= flags, flags
    assert c["volumeMounts"] == [{"name": "tls", "mountPath": d, "readOnly": True}]
    assert spec["volumes"] == [{"name": "tls", "secret": {"secretName": "gpuslice-extender-tls", "defaultMode": 0o440}}]
    assert spec["securityContext"] == {"fsGroup": 65534} and c["securityContext"]["runAsGroup"] == 65534
    assert c["ports"] == [{"name": "https", "containerPort": 8888, "protocol": "TCP"}]
    assert svc["spec"]["ports"] == [{"name": "https", "port": 8888, "targetPort": "https", "protocol": "TCP"}]
    assert svc["spec"]["type"] == "ClusterIP" and "clusterIP" not in svc["spec"]
    for probe in (c["livenessProbe"], c["readinessProbe"]):
        assert probe["httpGet"] == {"path": "/healthz", "port": "https", "scheme": "HTTPS"}
    assert c["resources"] == helmchart.load_chart()[1]["extender"]["resources"]
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True and sc["capabilities"] == {"drop": ["ALL"]}
    for o in ext.values():
        assert o["metadata"]["labels"]["app.kubernetes.io/name"] == "gpuslice"
        if o["kind"].startswith("Cluster"):
            assert "namespace" not in o["metadata"]
        else:
            assert o["metadata"]["namespace"] == helmchart.NAMESPACE
        assert k8s_schema.validate(o) == [], o["kind"]
    over, _ = extender_objects({"policy": "fgd", "port": 9900, "nodeSelector": {"role": "ctl"},
                                "tolerations": [{"key": "ctl", "operator": "Exists"}]})
    oc = over["Deployment"]["spec"]["template"]["spec"]
    assert oc["containers"][0]["args"][-2:] == ["--policy", "fgd"] and "0.0.0.0:9900" in oc["containers"][0]["args"]
    assert oc["nodeSelector"] == {"role": "ctl"} and oc["tolerations"] == [{"key": "ctl", "operator": "Exists"}]
    assert over["Service"]["spec"]["ports"][0]["port"] == 9900


def _write_secret(secret, d):
    """The Secret's data as files in d (tls.crt, tls.key, ca.crt); returns d."""
    import base64
    os.makedirs(d, exist_ok=True)
    for k, v in secret["data"].items():
        with open(os.path.join(d, k), "wb") as f:
            f.write(base64.b64decode(v))
    return d


def test_extender_tls_secrets_serve_the_scheduler(tmp_path):
    """The certificates the chart makes work with the real extender: its serving certificate is
    valid for the Service's names and extender.clusterIP under the chart's CA, the scheduler's
    client certificate (CN and DNS name kube-scheduler, clientAuth) is served with
    --allowed-client-name kube-scheduler as the chart passes it, no certificate gets 401, and
    another release's client certificate (another CA) fails the handshake. A named Secret
    (extender.tls.secretName) replaces both: none is made, the Deployment mounts that one."""
    import http.client
    import socket
    import ssl
    ext, _ = extender_objects({"clusterIP": "10.96.0.88"})
    srv = _write_secret(ext["gpuslice-extender-tls"], str(tmp_path / "srv"))
    cli = _write_secret(ext["gpuslice-extender-scheduler-client"], str(tmp_path / "cli"))
    assert ext["gpuslice-extender-tls"]["type"] == "kubernetes.io/tls"
    text = subprocess.run(["openssl", "x509", "-in", os.path.join(srv, "tls.crt"), "-noout", "-text"],
                          capture_output=True, text=True, check=True).stdout
    svc = f"gpuslice-extender.{helmchart.NAMESPACE}.svc"
    for name in ("DNS:gpuslice-extender,", f"DNS:{svc},", f"DNS:{svc}.cluster.local", "IP Address:10.96.0.88"):
        assert name in text, text
    text = subprocess.run(["openssl", "x509", "-in", os.path.join(cli, "tls.crt"), "-noout", "-text"],
                          capture_output=True, text=True, check=True).stdout
    assert "CN = kube-scheduler" in text and "DNS:kube-scheduler" in text and "TLS Web Client Authentication" in text
    for d in (srv, cli):
        assert subprocess.run(["openssl", "verify", "-CAfile", os.path.join(d, "ca.crt"), os.path.join(d, "tls.crt")],
                              capture_output=True).returncode == 0
    other, _ = extender_objects()
    stranger = _write_secret(other["gpuslice-extender-scheduler-client"], str(tmp_path / "other"))
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps({"nodes": [{"name": "n", "cpuMilli": 8000, "memoryMiB": 65536, "gpuModel": "A100",
                                           "gpuMemoryMiB": 81920, "gpuFree": [1000]}]}))
    args = ext["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]
    mount = "/etc/gpuslice/extender-tls"
    tls_args = [a.replace(mount, srv) for a in args[args.index("--tls-cert-file"):args.index("--policy")]]
    log = open(tmp_path / "ext.log", "w+")
    p = subprocess.Popen([GPUSLICE, "extender", "--snapshot", str(snap), "--listen", "127.0.0.1:0", *tls_args],
                         stdout=log, stderr=subprocess.STDOUT)
    try:
        port = None
        for _ in range(200):
            m = re.search(r"\(port (\d+)\)", read(log.name))
            if m:
                port = int(m.group(1))
                break
            assert p.poll() is None, read(log.name)
            time.sleep(0.05)
        assert port, read(log.name)

        def call(cert_dir, path="/gpuslice/filter"):
            ctx = ssl.create_default_context(cafile=os.path.join(cli, "ca.crt"))
            if cert_dir:
                ctx.load_cert_chain(os.path.join(cert_dir, "tls.crt"), os.path.join(cert_dir, "tls.key"))
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            # the Service's name checked against the certificate, as the scheduler checks the urlPrefix's host
            c.sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname=svc)
            body = json.dumps({"Pod": {"metadata": {"name": "p", "namespace": "d", "uid": "u"},
                                       "spec": {"containers": []}}, "NodeNames": ["n"]})
            c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            out = (r.status, r.read())
            c.close()
            return out
        st, body = call(cli)
        assert st == 200 and json.loads(body)["NodeNames"] == ["n"], body
        assert call(None)[0] == 401
        with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
            call(stranger)
    finally:
        p.terminate()
        p.wait(10)
        log.close()
    named, _ = extender_objects({"tls": {"secretName": "mine"}},
                                kinds=[k for k in EXTENDER_KINDS if k != "Secret"])
    vols = named["Deployment"]["spec"]["template"]["spec"]["volumes"]
    assert vols == [{"name": "tls", "secret": {"secretName": "mine", "defaultMode": 0o440}}]


def test_extender_network_policy():
    """The NetworkPolicy selects the extender's pods and admits to its port only the scheduler: its
    pods (kube-system, component: kube-scheduler by default) and the CIDRs of a host-network
    scheduler; a policy naming neither is refused at render (it would admit everyone); off with
    extender.networkPolicy.enabled false."""
    ext, _ = extender_objects()
    np = ext["NetworkPolicy"]
    labels = ext["Deployment"]["spec"]["template"]["metadata"]["labels"]
    sel = np["spec"]["podSelector"]["matchLabels"]
    assert all(labels.get(k) == v for k, v in sel.items()) and sel == ext["Service"]["spec"]["selector"]
    assert np["spec"]["policyTypes"] == ["Ingress"]
    assert np["spec"]["ingress"] == [{"from": [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "kube-system"}}, "podSelector": {"matchLabels": {"component": "kube-scheduler"}}}],
        "ports": [{"protocol": "TCP", "port": 8888}]}]
    assert k8s_schema.validate(np) == []
    hosts, _ = extender_objects({"port": 9900, "networkPolicy": {"schedulerPodLabels": None,
                                                                 "schedulerCIDRs": ["10.0.0.10/32", "10.0.0.11/32"]}})
    assert hosts["NetworkPolicy"]["spec"]["ingress"] == [{"from": [{"ipBlock": {"cidr": "10.0.0.10/32"}},
                                                                   {"ipBlock": {"cidr": "10.0.0.11/32"}}],
                                                          "ports": [{"protocol": "TCP", "port": 9900}]}]
    with pytest.raises(helmchart.HelmError, match="schedulerPodLabels or schedulerCIDRs"):
        helmchart.render({"extender": {"enabled": True, "networkPolicy": {"schedulerPodLabels": None}}})
    extender_objects({"networkPolicy": {"enabled": False}}, kinds=[k for k in EXTENDER_KINDS if k != "NetworkPolicy"])
    notes = helmchart.notes(EXTENDER)
    assert "extender.networkPolicy.schedulerCIDRs" in notes and "gpuslice-extender-scheduler-client" in notes


def test_extender_policy_is_accepted():
    """The chart's --policy is one `gpuslice extender` takes: an unknown one is its usage error."""
    for name in (helmchart.load_chart()[1]["extender"]["policy"], "fgd"):
        p = subprocess.run([GPUSLICE, "extender", "--snapshot", "/nonexistent.json", "--policy", name],
                           capture_output=True, text=True, timeout=20)
        assert "--policy" not in p.stderr, p.stderr
    p = subprocess.run([GPUSLICE, "extender", "--api", "--policy", "random"], capture_output=True, text=True, timeout=20)
    assert p.returncode != 0 and "--policy 'random'" in p.stderr


def test_extender_rbac_is_exactly_what_docs_say():
    """list and watch on nodes and pods, and on the DRA driver's ResourceSlices, ResourceClaims and
    their templates, create on pods/binding (docs/extender.md), bound to the extender's own service
    account; nothing for the agent's."""
    ext, _ = extender_objects()
    role, binding, sa = ext["ClusterRole"], ext["ClusterRoleBinding"], ext["ServiceAccount"]
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    dra = {("resource.k8s.io", r, v) for r in ("resourceslices", "resourceclaims", "resourceclaimtemplates")
           for v in ("list", "watch")}
    assert granted == {("", "nodes", "list"), ("", "nodes", "watch"), ("", "pods", "list"), ("", "pods", "watch"),
                       ("", "pods", "get"), ("", "pods/binding", "create")} | dra
    assert all(set(rule) == {"apiGroups", "resources", "verbs"} for rule in role["rules"]), "no resourceNames etc."
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": helmchart.NAMESPACE}]
    doc = read(os.path.join(ROOT, "docs", "extender.md"))
    assert "needs `list` and `watch` on nodes and pods, `get` on pods and\n`create` on `pods/binding`" in doc
    assert "`list` and `watch` on `resourceslices`, `resourceclaims` and\n`resourceclaimtemplates`" in doc


def _scheduler_config(ext):
    cm = ext["ConfigMap"]
    assert list(cm["data"]) == ["scheduler-config.yaml"]
    return yaml.safe_load(cm["data"]["scheduler-config.yaml"])


def _doc_scheduler_config():
    doc = read(os.path.join(ROOT, "docs", "extender.md"))
    block = re.search(r"## The scheduler configuration to add\n\n```yaml\n(.*?)```", doc, re.S).group(1)
    return yaml.safe_load(block)


def test_extender_scheduler_config():
    """The ConfigMap's KubeSchedulerConfiguration parses, is docs/extender.md's but for the Service's
    URL, and names the Service's port; extender.clusterIP puts the fixed address in both."""
    ext, _ = extender_objects()
    cfg, want = _scheduler_config(ext), _doc_scheduler_config()
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1" and cfg["kind"] == "KubeSchedulerConfiguration"
    (entry,) = cfg["extenders"]
    (doc_entry,) = want["extenders"]
    svc = ext["Service"]
    url = f"https://{svc['metadata']['name']}.{helmchart.NAMESPACE}.svc:{svc['spec']['ports'][0]['port']}/gpuslice"
    assert entry["urlPrefix"] == url
    assert {k: v for k, v in entry.items() if k != "urlPrefix"} == {k: v for k, v in doc_entry.items() if k != "urlPrefix"}
    assert (entry["filterVerb"], entry["prioritizeVerb"], entry["bindVerb"]) == ("filter", "prioritize", "bind")
    fixed, _ = extender_objects({"clusterIP": "10.96.0.88", "port": 9900, "weight": 2,
                                 "ignoreFractionalResources": True})
    (e2,) = _scheduler_config(fixed)["extenders"]
    assert e2["urlPrefix"] == "https://10.96.0.88:9900/gpuslice" and e2["weight"] == 2
    assert fixed["Service"]["spec"]["clusterIP"] == "10.96.0.88"
    assert {r["name"]: r["ignoredByScheduler"] for r in e2["managedResources"]} == {
        "nvidia.com/gpu": False, "gpuslice.io/gpu-compute": True, "gpuslice.io/gpu-memory": True}
    # claimPods: no managedResources, so claim-only pods reach the extender; the rest unchanged
    claims, _ = extender_objects({"claimPods": True})
    (e3,) = _scheduler_config(claims)["extenders"]
    assert "managedResources" not in e3
    assert {k: v for k, v in e3.items()} == {k: v for k, v in entry.items() if k != "managedResources"}
    # HTTPS with the scheduler's client certificate, its files where extender.tls.schedulerCertDir says
    assert entry["enableHTTPS"] is True
    d = "/etc/kubernetes/gpuslice-extender"
    assert entry["tlsConfig"] == {"certFile": f"{d}/tls.crt", "keyFile": f"{d}/tls.key", "caFile": f"{d}/ca.crt"}
    other, _ = extender_objects({"tls": {"schedulerCertDir": "/srv/x"}})
    assert _scheduler_config(other)["extenders"][0]["tlsConfig"]["keyFile"] == "/srv/x/tls.key"
    assert "BEGIN" not in ext["ConfigMap"]["data"]["scheduler-config.yaml"], "no key or certificate inline"


def test_extender_lint_and_notes():
    out = helmchart.lint(EXTENDER)
    assert "1 chart(s) linted, 0 chart(s) failed" in out and "[WARNING]" not in out, out
    notes = helmchart.notes(EXTENDER)
    assert "Deployment gpuslice-extender" in notes and "kube-scheduler" in notes
    assert "get configmap gpuslice-extender-scheduler-config -o jsonpath='{.data.scheduler-config\\.yaml}'" in notes
    assert "extender.clusterIP" in notes
    assert "extender.clusterIP" not in helmchart.notes({"extender": {"enabled": True, "clusterIP": "10.96.0.88"}})


def test_dra_classes_extended_resource_names():
    """The DeviceClasses' extendedResourceName (docs/dra.md): by default named after the driver
    (never nvidia.com/gpu, which device plugins advertise: where one does, the scheduler never
    takes the class); dra.extendedResourcePrefix replaces the prefix; false leaves them out."""
    def ext(over):
        objs = objects(helmchart.render({"dra": {**DRA["dra"], **over}}))
        return {o["metadata"]["name"]: o["spec"].get("extendedResourceName")
                for o in objs if o["kind"] == "DeviceClass"}
    d = "gpu.example.com"
    assert ext({}) == {d: f"{d}/gpu", f"shared.{d}": f"{d}/gpu.shared", f"mps.{d}": None, f"mig.{d}": None}
    assert ext({"extendedResourcePrefix": "nvidia.com"})[d] == "nvidia.com/gpu"
    assert ext({"extendedResourcePrefix": "nvidia.com"})[f"shared.{d}"] == "nvidia.com/gpu.shared"
    assert set(ext({"extendedResourceNames": False}).values()) == {None}
    # the API server's check of an extended resource name (a domain-prefixed name outside
    # kubernetes.io; the real API server takes them in tests/e2e/test_dra_extended.py)
    for name in ext({}).values():
        if name:
            prefix, _, base = name.partition("/")
            assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", prefix) and "kubernetes.io" not in prefix, name
            assert re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", base) and len(base) <= 63, name


def test_dra_nvidia_compat_names():
    """dra.nvidiaCompat (docs/dra.md, NVIDIA-compatible mode): the driver gpu.nvidia.com for the
    agent, the admission policy and the classes (dra.driver unused); NVIDIA's class names for whole
    GPUs (exclusive ones only: a whole-GPU claim never lands on a time-sliced share; nvidia.com/gpu)
    and MIG devices; gpuslice's shared and MPS classes keep names of their own. Off by default."""
    def render(over):
        return objects(helmchart.render({"dra": {**DRA["dra"], **over}}))

    objs = render({"nvidiaCompat": True})
    classes = {o["metadata"]["name"]: o["spec"] for o in objs if o["kind"] == "DeviceClass"}
    nv = "gpu.nvidia.com"
    assert set(classes) == {nv, "mig.nvidia.com", f"shared.{nv}", f"mps.{nv}"}
    sel = {n: c["selectors"][0]["cel"]["expression"] for n, c in classes.items()}
    attr = f'device.attributes["{nv}"]'
    assert sel[nv] == f'device.driver == "{nv}" && {attr}.type == "gpu" && {attr}.sharing == "exclusive"'
    assert sel["mig.nvidia.com"] == f'device.driver == "{nv}" && {attr}.type == "mig" && {attr}.sharing == "exclusive"'
    assert sel[f"shared.{nv}"] == f'device.driver == "{nv}" && {attr}.sharing == "time-slicing"'
    assert sel[f"mps.{nv}"] == f'device.driver == "{nv}" && {attr}.sharing == "mps"'
    assert classes[nv]["extendedResourceName"] == "nvidia.com/gpu"
    assert classes[f"shared.{nv}"]["extendedResourceName"] == "nvidia.com/gpu.shared"
    assert "extendedResourceName" not in classes["mig.nvidia.com"]
    assert _arg(agent_container(objs), "--dra-driver") == nv
    vap = next(o for o in objs if o["kind"] == "ValidatingAdmissionPolicy" and "dra" in o["metadata"]["name"])
    assert f'variables.slice.spec.driver == "{nv}"' in json.dumps(vap["spec"]["validations"]).replace('\\"', '"')
    assert "gpu.example.com" not in json.dumps(objs)
    # an explicit prefix and extendedResourceNames still apply
    ext = {o["metadata"]["name"]: o["spec"].get("extendedResourceName")
           for o in render({"nvidiaCompat": True, "extendedResourcePrefix": "example.com"}) if o["kind"] == "DeviceClass"}
    assert ext[nv] == "example.com/gpu"
    assert {o["spec"].get("extendedResourceName") for o in render({"nvidiaCompat": True, "extendedResourceNames": False})
            if o["kind"] == "DeviceClass"} == {None}
    # off (the default): dra.driver's names, nothing of NVIDIA's
    off = render({})
    assert {o["metadata"]["name"] for o in off if o["kind"] == "DeviceClass"} == \
        {"gpu.example.com", "shared.gpu.example.com", "mps.gpu.example.com", "mig.gpu.example.com"}
    assert "nvidia.com" not in json.dumps([o for o in off if o["kind"] in ("DeviceClass", "ValidatingAdmissionPolicy")])
    with open(os.path.join(helmchart.CHART, "values.yaml")) as f:
        assert yaml.safe_load(f)["dra"]["nvidiaCompat"] is False


def test_api_server_address_for_nodes_without_the_service_network():
    """apiServer.host/port: the doctor's and the agent's KUBERNETES_SERVICE_HOST and _PORT (a
    container's env wins over the kubelet's service variables); none by default."""
    spec = pod_spec(objects(helmchart.render({"apiServer": {"host": "10.0.0.5", "port": "6443"}})))
    for c in spec["initContainers"] + spec["containers"]:
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        want = c["name"] in ("doctor", "agent")
        assert (env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")) == \
            (("10.0.0.5", "6443") if want else (None, None)), c["name"]
    agent = agent_container(objects(helmchart.render({"apiServer": {"host": "api.example"}})))
    assert {"name": "KUBERNETES_SERVICE_PORT", "value": "443"} in agent["env"]
    default = pod_spec(default_objects())
    assert all("KUBERNETES_SERVICE_HOST" not in json.dumps(c) for c in default["initContainers"] + default["containers"])


def test_dra_rbac_reads_the_pods_of_a_claim():
    """With dra.enabled the agent may get pods (a shared claim's pods, read at prepare: one guarded
    claim a container, docs/dra.md), and only get; without it, nothing on pods."""
    objs = objects(helmchart.render(DRA))
    role = next(o for o in objs if o["kind"] == "ClusterRole" and o["metadata"]["name"] == f"{helmchart.RELEASE}-dra")
    assert [r for r in role["rules"] if "pods" in r["resources"]] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    assert not any("pods" in r["resources"] for o in default_objects() if o["kind"] == "ClusterRole"
                   for r in o["rules"])
