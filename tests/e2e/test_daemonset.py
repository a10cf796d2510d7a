"""The chart's DaemonSet in the real cluster: gpuslice's image, made without Docker from the build
directory (tests/e2e/agent_image.sh: the binaries, the simulated NVML library and every library
they load, a static busybox), installed with the real Helm (deploy/helm/gpuslice) on the simulated
node (values sim.enabled, hostNetwork, the cluster's kubelet and CDI directories), scheduled by the
real DaemonSet controller and scheduler, run by the real kubelet and containerd.

- Node selection: the pod lands on the GPU node (labelled gpuslice.io/gpu=true, the default
  affinity), its agent registers with the kubelet and allocatable shows what the policy says; a
  second Node without GPU labels (a bare Node object: the DaemonSet controller makes a pod per
  matching node whatever its kubelet, and the values tolerate every taint, so only the selection
  keeps a pod off it) gets none, and does get one once labelled (the check can fail); with the
  NFD/GFD-style values (nodeSelector nvidia.com/gpu.present=true) only the node carrying that label
  gets one. A pod of the workload gets a replica from the DaemonSet's agent (CDI, the hook the
  init container installed).
- The doctor init container (docs/doctor.md): on a good node it passes and the agent starts; each
  seeded fault (no CDI in containerd's config, NVIDIA's plugin socket listening, a policy that does
  not parse, no PodResources socket) is named in the init container's termination message, one
  helm upgrade each, the fault undone after its test.

Each test installs what it needs (`helm upgrade --install`, a pod annotation naming the case, so
every case is a new pod) and waits for the pod of its case; the release is uninstalled, and its pod
gone, before the tests after this file start their own agents."""
import json
import os
import socket
import subprocess

import pytest
import yaml

from e2e import ROOT, E2EError, wait

CHART = os.path.join(ROOT, "deploy", "helm", "gpuslice")
AGENT_IMAGE_SH = os.path.join(ROOT, "tests", "e2e", "agent_image.sh")
IMAGE = "gpuslice.local/gpuslice:e2e"
RELEASE = "gs-ds"
DS_NS = "gs-e2e-ds"
NOGPU = "gs-e2e-nogpu"
CASE = "gpuslice.test/case"
SELECTOR = f"app.kubernetes.io/instance={RELEASE}"
# 2 time-sliced replicas per T4 on t4x2.yaml: nvidia.com/gpu 4. CDI through the CRI, so the
# doctor fails a runtime without CDI (with the default deviceListStrategy it would only warn).
POLICY = ("version: v1\nflags:\n  plugin:\n    deviceListStrategy: cdi-cri\nsharing:\n  timeSlicing:\n"
          "    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n")
WANT = {"nvidia.com/gpu": 4}
BAD_POLICY = "version: v1\nflags:\n  migStrategy: sometimes\n"
WAIT = 180   # a pod through three init containers on a loaded 2-core machine


class Chart:
    def __init__(self, cluster):
        self.c = cluster
        self.base = os.path.join(cluster.dir, "ds")
        for d in ("guard", "lib", "bin", "run", "mps", "nfd", "sim", "containerd", "containerd-nocdi",
                  "no-pod-resources"):
            os.makedirs(os.path.join(self.base, d), exist_ok=True)
        # the doctor reads the cluster's own containerd config (a copy: the directory beside it
        # holds containerd's root and sockets); the fault is the same file with CDI off
        with open(os.path.join(cluster.dir, "containerd", "config.toml")) as f:
            config = f.read()
        assert "enable_cdi = true" in config, "cluster.sh's containerd config turns CDI on"
        for d, text in (("containerd", config), ("containerd-nocdi", config.replace("enable_cdi = true", "enable_cdi = false"))):
            with open(os.path.join(self.base, d, "config.toml"), "w") as f:
                f.write(text)
        self.port = cluster.port_base + 403   # hostNetwork: a port of this cluster's range

    def values(self, case, overrides=None):
        b = self.base
        v = {
            "image": {"repository": IMAGE.split(":")[0], "tag": IMAGE.split(":")[1], "pullPolicy": "Never"},
            "policy": POLICY,
            "sim": {"enabled": True, "node": "/usr/share/gpuslice/examples/nodes/t4x2.yaml",
                    "stateDir": os.path.join(b, "sim")},
            # the cluster's pods have no pod network (docs/e2e.md): the node's, on a port of its range
            "hostNetwork": True,
            "metrics": {"port": self.port},
            "kubeletDir": self.c.kubelet_dir,
            # every host path under the cluster's directory, never the machine's /var/lib or /run
            "hostPaths": {"guardRoot": f"{b}/guard", "guardLib": f"{b}/lib", "cdiHook": f"{b}/bin",
                          "run": f"{b}/run", "mpsRoot": f"{b}/mps", "cdi": self.c.cdi_dir,
                          "nfdFeatures": f"{b}/nfd", "dev": "", "podLogs": self.c.pod_logs},
            "doctor": {"containerdConfigDir": f"{b}/containerd"},
            # the bare Node is tainted not-ready/unreachable: tolerate everything, so that only the
            # selection keeps a pod off it
            "tolerations": [{"operator": "Exists"}],
            "podAnnotations": {CASE: case},
        }
        if os.environ.get("GS_SANITIZED") == "1":   # ASan's shadow and quarantine
            v["resources"] = {"requests": {"cpu": "20m", "memory": "32Mi"}, "limits": {"memory": "2Gi"}}
        for k, val in (overrides or {}).items():
            if isinstance(val, dict) and isinstance(v.get(k), dict):
                v[k] = {**v[k], **val}
            else:
                v[k] = val
        return v

    def deploy(self, case, overrides=None):
        path = os.path.join(self.base, f"values-{case}.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(self.values(case, overrides), f)
        p = subprocess.run(["helm", "upgrade", "--install", RELEASE, CHART, "-n", DS_NS, "-f", path],
                           capture_output=True, text=True, timeout=120, env=self.c.env)
        if p.returncode != 0:
            raise E2EError(f"helm upgrade --install {RELEASE} ({case}): exit {p.returncode}\n{p.stdout}\n{p.stderr}")

    def pods(self, case=None):
        """The release's pods that are not being deleted (of CASE, if given)."""
        items = self.c.get("pods", "-n", DS_NS, "-l", SELECTOR)["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")
                and (case is None or p["metadata"].get("annotations", {}).get(CASE) == case)]

    def daemonset(self):
        return self.c.get("daemonset", "-n", DS_NS, RELEASE)

    def settled(self):
        """The DaemonSet's status once its controller has seen its current spec."""
        ds = self.daemonset()
        st = ds.get("status", {})
        return st if st.get("observedGeneration") == ds["metadata"]["generation"] else None

    def pod_of(self, case, node):
        def find():
            ps = [p for p in self.pods(case) if target(p) == node]
            return ps[0] if ps else E2EError(f"pods {[(p['metadata']['name'], target(p)) for p in self.pods()]}")
        return wait(find, WAIT, f"the DaemonSet's pod of case {case} on {node}")

    def ready(self, case):
        def check():
            p = self.pod_of(case, self.c.node_name)
            cs = p["status"].get("containerStatuses") or [{}]
            return p if cs[0].get("ready") else E2EError(f"pod {p['metadata']['name']}: {status_line(p)}")
        return wait(check, WAIT, f"the agent of case {case} ready")

    def doctor(self, case):
        """(exit code, termination message) of the doctor init container of CASE's pod, once it
        has terminated (its state, or the last state of a restarted one)."""
        def check():
            p = self.pod_of(case, self.c.node_name)
            for s in p["status"].get("initContainerStatuses", []):
                if s["name"] == "doctor":
                    t = s["state"].get("terminated") or s.get("lastState", {}).get("terminated")
                    if t:
                        return t.get("exitCode"), t.get("message", "")
            return E2EError(status_line(p))
        return wait(check, WAIT, f"the doctor of case {case} to finish")

    def uninstall(self):
        subprocess.run(["helm", "uninstall", RELEASE, "-n", DS_NS], capture_output=True, text=True,
                       timeout=120, env=self.c.env)
        wait(lambda: not self.c.get("pods", "-n", DS_NS, "-l", SELECTOR)["items"], WAIT,
             "the DaemonSet's pods to be gone")


def target(pod):
    """The node a DaemonSet pod is for: its nodeName once bound, else the controller's affinity."""
    if pod["spec"].get("nodeName"):
        return pod["spec"]["nodeName"]
    terms = pod["spec"].get("affinity", {}).get("nodeAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
    for t in terms:
        for f in t.get("matchFields", []):
            if f["key"] == "metadata.name":
                return f["values"][0]
    return None


def status_line(pod):
    st = pod["status"]
    return json.dumps({"phase": st.get("phase"), "init": st.get("initContainerStatuses"),
                       "containers": st.get("containerStatuses")})[:3000]


def label(cluster, node, *labels):
    cluster.kubectl("label", "node", node, "--overwrite", *labels)


@pytest.fixture(scope="module")
def chart(cluster):
    env = dict(os.environ, PATH=cluster.env["PATH"])
    p = subprocess.run(["bash", AGENT_IMAGE_SH, cluster.dir, IMAGE], capture_output=True, text=True,
                       timeout=300, env=env)
    assert p.returncode == 0, f"agent_image.sh: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    cluster.kubectl("create", "namespace", DS_NS, check=False)
    label(cluster, cluster.node_name, "gpuslice.io/gpu=true")
    ch = Chart(cluster)
    try:
        yield ch
    finally:
        try:
            ch.uninstall()
        finally:
            cluster.kubectl("label", "node", cluster.node_name, "gpuslice.io/gpu-", "nvidia.com/gpu.present-",
                            check=False)
            cluster.kubectl("delete", "node", NOGPU, "--ignore-not-found", check=False)
            cluster.kubectl("delete", "namespace", DS_NS, "--wait=false", check=False)


@pytest.fixture
def nogpu(cluster):
    """A second Node, bare (no kubelet, no GPU labels), deleted after the test."""
    cluster.kubectl("apply", "-f", "-", input=f"apiVersion: v1\nkind: Node\nmetadata:\n  name: {NOGPU}\n")
    yield NOGPU
    cluster.kubectl("delete", "node", NOGPU, "--ignore-not-found")


def test_daemonset_lands_on_the_gpu_node_only(cluster, chart, nogpu):
    node = cluster.node_name
    chart.deploy("selection")
    chart.ready("selection")
    cluster.wait_allocatable(WANT, timeout=WAIT)
    st = wait(lambda: (s := chart.settled()) and s.get("desiredNumberScheduled") == 1 and s, 60,
              "the DaemonSet's status: one node")
    assert [target(p) for p in chart.pods()] == [node], st
    # the same node labelled: the controller makes a pod for it (so its absence above was the selection)
    label(cluster, nogpu, "gpuslice.io/gpu=true")
    wait(lambda: any(target(p) == nogpu for p in chart.pods()), 60, f"a pod for {nogpu} once labelled")
    # NFD/GFD-style selection: only nodes with nvidia.com/gpu.present=true, whatever else they carry
    label(cluster, node, "nvidia.com/gpu.present=true")
    chart.deploy("gfd", {"affinity": None, "nodeSelector": {"nvidia.com/gpu.present": "true"}})
    chart.ready("gfd")
    wait(lambda: (s := chart.settled()) and s.get("desiredNumberScheduled") == 1
         and [target(p) for p in chart.pods()] == [node], 60,
         f"the pods: {node} only (not {nogpu}, which has gpuslice.io/gpu=true but not nvidia.com/gpu.present)")
    cluster.wait_allocatable(WANT, timeout=WAIT)
    print(f"DaemonSet: on {node} only (default affinity and GFD-style nodeSelector); {nogpu} gets a pod once labelled")


def test_doctor_passes_and_a_pod_gets_a_replica(cluster, chart):
    chart.deploy("good")
    pod = chart.ready("good")
    code, msg = chart.doctor("good")
    assert code == 0 and not [line for line in msg.splitlines() if line.startswith("fail ")], msg
    cluster.wait_allocatable(WANT, timeout=WAIT)
    assert {c["name"] for c in pod["status"]["initContainerStatuses"]} == {"install-sim", "doctor", "install-guard",
                                                                          "install-cdi-hook"}
    # a workload pod: a replica through CDI from the spec the DaemonSet's agent wrote, and the
    # libcuda.so link of the hook its init container installed
    out = cluster.run_pod("ds-user", {"nvidia.com/gpu": 1},
                          "{ ls /dev | grep -E '^nvidia[0-9]+$'; readlink /usr/local/nvidia/lib64/libcuda.so; }"
                          " > /dev/termination-log 2>&1", timeout=WAIT)
    lines = out.split()
    try:
        assert len([x for x in lines if x.startswith("nvidia")]) == 1, out
        assert "libcuda.so.1" in lines, out
    finally:
        cluster.delete_pods()


@pytest.fixture
def competing_plugin(cluster):
    """NVIDIA's device plugin's socket, listening, in the kubelet's device-plugins directory."""
    path = os.path.join(cluster.kubelet_dir, "device-plugins", "nvidia-gpu.sock")
    if os.path.exists(path):
        os.unlink(path)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(16)
    yield path
    s.close()
    os.unlink(path)


FAULTS = {
    # case: (values, the finding's line start, a word it must name, exit code)
    "no-cdi": (lambda ch: {"doctor": {"containerdConfigDir": f"{ch.base}/containerd-nocdi"}},
               "fail cdi.runtime", "enable_cdi", 1),
    "competing-plugin": (lambda ch: {}, "fail plugin.competing", "nvidia-gpu.sock", 1),
    "bad-policy": (lambda ch: {"policy": BAD_POLICY}, "fail policy", "/etc/gpuslice/policy.yaml:3:", 1),
    # only a warning (the device plugins work without it): the agent starts, the message names it
    "no-pod-resources": (lambda ch: {"podResourcesDir": f"{ch.base}/no-pod-resources"},
                         "warn kubelet.podresources", "kubelet.sock", 0),
}


@pytest.mark.parametrize("case", list(FAULTS))
def test_doctor_names_the_seeded_fault(cluster, chart, case, request):
    values, start, word, want_code = FAULTS[case]
    if case == "competing-plugin":
        request.getfixturevalue("competing_plugin")
    chart.deploy(case, values(chart))
    code, msg = chart.doctor(case)
    found = [line for line in msg.splitlines() if line.startswith(start + ":")]
    assert code == want_code, msg
    assert found and word in found[0] and "; fix: " in found[0], msg
    print(f"doctor, {case}: exit {code}: {found[0]}")

