"""gpuslice's agent on the e2e cluster, as the tests (e2e.py's Agent, dra_util.py) and
scripts/run-cluster.sh start it: one source for its flags, for the chart's DeviceClasses (rendered
by the real Helm), for the DRA example policy with an MPS root of the cluster's, and for
examples/dra/claims.yaml made runnable in that cluster (its pods on the host's network and the
cluster's local image: docs/e2e.md says why). Imports nothing of the harness, so that e2e.py can
import it. As a program (scripts/run-cluster.sh):

  cluster_agent.py agent-argv DIR GPUSLICE NODE STATE POLICY WORK
        the agent's command line on the cluster in DIR (its DIR/env), NUL-separated
  cluster_agent.py dra-argv DIR GPUSLICE NODE STATE POLICY WORK MPS_CONTROL     the same, --dra
  cluster_agent.py dra-policy SRC MPS_ROOT     SRC's policy with flags.mpsRoot set, on stdout
  cluster_agent.py classes [DRIVER]            the chart's DeviceClasses, YAML on stdout
  cluster_agent.py claims DIR [FILE]           FILE's objects (default examples/dra/claims.yaml),
        its pods made to run in the cluster in DIR, and a pod for each template no pod uses
"""
import copy
import os
import re
import subprocess
import sys

import yaml

ROOT = os.environ.get("GS_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DRIVER = "gpu.gpuslice.io"
CHART = os.path.join(ROOT, "deploy", "helm", "gpuslice")
BUILD_SH = os.path.join(ROOT, "tests", "e2e", "build.sh")
CLAIMS = os.path.join(ROOT, "examples", "dra", "claims.yaml")
# what a pod of `claims` prints at its start (its log: DIR/pod-logs, docs/e2e.md), then it sleeps
SHOW = ("env | grep -E '^(GPUSLICE_|CUDA_|NVIDIA_)' | sort\n"
        "[ -f /etc/gpuslice/guard.conf ] && sed 's/^/guard /' /etc/gpuslice/guard.conf\n"
        "for n in /dev/nvidia* /dev/nvidia-caps/*; do [ -e \"$n\" ] && echo \"node $n\"; done\n"
        "echo ready\nexec sleep 3600\n")


def host_args(kubelet_dir, cdi_dir, work, metrics, poll_ms=None):
    """The flags of every agent on the e2e cluster: the kubelet's device-plugin directory and
    PodResources socket under KUBELET_DIR, the CDI root the cluster's containerd reads, the guard's
    files and the agent's status files under WORK, its metrics on METRICS (HOST:PORT)."""
    args = ["--kubelet-dir", os.path.join(kubelet_dir, "device-plugins"),
            "--pod-resources-socket", os.path.join(kubelet_dir, "pod-resources", "kubelet.sock"),
            "--cdi-root", cdi_dir, "--guard-root", os.path.join(work, "guard"),
            "--mig-status-file", os.path.join(work, "mig-status.json"),
            "--features-file", os.path.join(work, "features"),
            "--metrics-address", metrics]
    if poll_ms is not None:
        args += ["--poll-interval-ms", str(poll_ms)]
    return args


def dra_args(kubelet_dir, kubeconfig, node_name, driver=DRIVER):
    """The agent's flags for the DRA driver on the cluster's kubelet (registration and plugins
    directories under KUBELET_DIR) and API server (KUBECONFIG, the Node NODE_NAME)."""
    return ["--dra", "--dra-driver", driver,
            "--kubelet-registry-dir", os.path.join(kubelet_dir, "plugins_registry"),
            "--kubelet-plugins-dir", os.path.join(kubelet_dir, "plugins"),
            "--kubeconfig", kubeconfig, "--node-name", node_name]


def read_env(path):
    """DIR/env of cluster.sh: {NAME: value}."""
    env = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"^(?:export )?([A-Z0-9_]+)=(.*)$", line.strip())
            if m:
                env[m.group(1)] = m.group(2)
    return env


def agent_argv(cluster_dir, gpuslice, node, state, policy, work):
    """The command line of an agent on the cluster in CLUSTER_DIR (its DIR/env): the simulated NODE
    (its state in STATE), POLICY, its files under WORK, no CDI hook."""
    env = read_env(os.path.join(cluster_dir, "env"))
    metrics = f"127.0.0.1:{int(env['GS_E2E_PORT_BASE']) + 402}"
    return [gpuslice, "--sim", node, "--sim-state", state, "agent", "--config", policy,
            *host_args(env["GS_E2E_KUBELET_DIR"], env["GS_E2E_CDI_DIR"], work, metrics), "--cdi-hook", ""]


def dra_argv(cluster_dir, gpuslice, node, state, policy, work, mps_control):
    """agent_argv's with the DRA driver on the cluster's kubelet and API server, MPS_CONTROL as the
    MPS control daemon (the policy's flags.mpsRoot: with_mps_root)."""
    env = read_env(os.path.join(cluster_dir, "env"))
    return [*agent_argv(cluster_dir, gpuslice, node, state, policy, work), "--mps-control", mps_control,
            *dra_args(env["GS_E2E_KUBELET_DIR"], env["KUBECONFIG"], env["GS_E2E_NODE"])]


def with_mps_root(text, root):
    """The policy TEXT with flags.mpsRoot set to ROOT (where MPS's pipes and shared memory go)."""
    doc = yaml.safe_load(text)
    if not isinstance(doc, dict):
        raise ValueError("the policy is not a mapping")
    flags = doc.setdefault("flags", {})
    if not isinstance(flags, dict):
        raise ValueError("the policy's flags is not a mapping")
    flags["mpsRoot"] = root
    return yaml.safe_dump(doc, sort_keys=False)


def helm():
    """The real Helm's binary (tests/e2e/build.sh helm: built once, cached)."""
    b = subprocess.run(["bash", BUILD_SH, "helm"], capture_output=True, text=True, timeout=1800)
    if b.returncode != 0 or not b.stdout.strip():
        raise RuntimeError(f"build.sh helm: exit {b.returncode}\n{b.stderr[-3000:]}")
    return os.path.join(b.stdout.strip().splitlines()[-1], "helm")


def device_classes(driver=DRIVER, extended=None):
    """The chart's DeviceClasses for DRIVER (a list of dicts), rendered by the real Helm; EXTENDED
    True or False sets dra.extendedResourceNames (None: the chart's default)."""
    args = [helm(), "template", "gpuslice", CHART, "-s", "templates/dra-deviceclasses.yaml",
            "--set", "dra.enabled=true", "--set", f"dra.driver={driver}"]
    if extended is not None:
        args += ["--set", f"dra.extendedResourceNames={'true' if extended else 'false'}"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"helm template: exit {p.returncode}\n{p.stderr}")
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def _runnable(pod, image):
    """POD (a dict) made to run in the e2e cluster: the host's network (the cluster has no pod
    network), IMAGE pulled never, each container printing what it sees (SHOW) and sleeping."""
    spec = pod["spec"]
    spec.update(hostNetwork=True, dnsPolicy="Default", automountServiceAccountToken=False,
                enableServiceLinks=False, terminationGracePeriodSeconds=1)
    for c in spec.get("containers") or []:
        c.update(image=image, imagePullPolicy="Never", command=["/bin/sh", "-c", SHOW])
        c.pop("args", None)
    return pod


def runnable_claims(text, image):
    """The objects of TEXT (a claims file: ResourceClaimTemplates and pods), its pods _runnable with
    IMAGE, and for each template that no pod names a pod named after it: a copy of the file's
    first pod (or of a bare one) with that template as its claim."""
    docs = [d for d in yaml.safe_load_all(text) if d]
    for d in docs:
        if not isinstance(d, dict) or "kind" not in d:
            raise ValueError("a document of the claims file is not a Kubernetes object")
    pods = [d for d in docs if d["kind"] == "Pod"]
    used = {rc.get("resourceClaimTemplateName") for p in pods for rc in p["spec"].get("resourceClaims") or []}
    model = pods[0] if pods else {
        "apiVersion": "v1", "kind": "Pod", "metadata": {},
        "spec": {"restartPolicy": "Never", "resourceClaims": [{"name": "gpu"}],
                 "containers": [{"name": "main", "resources": {"claims": [{"name": "gpu"}]}}]}}
    out = []
    for d in docs:
        out.append(_runnable(d, image) if d["kind"] == "Pod" else d)
    for d in docs:
        name = d["metadata"]["name"]
        if d["kind"] != "ResourceClaimTemplate" or name in used:
            continue
        pod = copy.deepcopy(model)
        pod["metadata"] = {"name": name}
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": name}]
        for c in pod["spec"]["containers"]:
            c["resources"] = {"claims": [{"name": "gpu"}]}
        out.append(_runnable(pod, image))
    return out


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "agent-argv" and len(argv) == 8:
        sys.stdout.write("".join(a + "\0" for a in agent_argv(*argv[2:])))
    elif cmd == "dra-argv" and len(argv) == 9:
        sys.stdout.write("".join(a + "\0" for a in dra_argv(*argv[2:])))
    elif cmd == "dra-policy" and len(argv) == 4:
        with open(argv[2]) as f:
            sys.stdout.write(with_mps_root(f.read(), argv[3]))
    elif cmd == "classes" and len(argv) in (2, 3):
        sys.stdout.write(yaml.safe_dump_all(device_classes(*argv[2:])))
    elif cmd == "claims" and len(argv) in (3, 4):
        image = read_env(os.path.join(argv[2], "env"))["GS_E2E_TEST_IMAGE"]
        with open(argv[3] if len(argv) == 4 else CLAIMS) as f:
            sys.stdout.write(yaml.safe_dump_all(runnable_claims(f.read(), image), sort_keys=False))
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (OSError, ValueError, KeyError, RuntimeError, yaml.YAMLError) as e:
        sys.stderr.write(f"cluster_agent.py: {e}\n")
        sys.exit(1)
