"""NVIDIA's own quickstart manifests (sigs.k8s.io/dra-driver-nvidia-gpu v0.4.1,
demo/specs/quickstart/v1, copied into the parts' cache by `tests/e2e/build.sh nvidia-dra`) on
gpuslice's DRA driver in its NVIDIA-compatible mode (docs/dra.md): the agent `--dra --dra-driver
gpu.nvidia.com` on a simulated node of eight A100-SXM4-40GB (GPUs 0, 2, 4, 6 whole; 1, 3, 5, 7 in
MIG mode, placements made on demand: gpu-test4's 1g.5gb, 2g.10gb and 3g.20gb profiles, gpu-test6's
a100 selector on the even indexes), the chart's DeviceClasses rendered by the real Helm with
`dra.nvidiaCompat=true` (gpu.nvidia.com, mig.nvidia.com...).

Each manifest is applied as NVIDIA wrote it: its Namespace, ResourceClaim(Template)s, requests,
selectors, constraints, opaque configs, tolerations and replicas unchanged. Only what this cluster
needs of a pod is swapped, by cluster_agent.py's rewrite (the one `cluster_agent.py claims` uses):
the pod on the host's network (no pod network here), the cluster's local image pulled never, and
its containers' command a shell printing what it got (the GPU UUIDs in its environment, its
device nodes) instead of `nvidia-smi -L` or the nbody sample. What a container printed is read
from the kubelet's log file (kubectl logs does not reach this kubelet: docs/e2e.md).

- gpu-test1: two pods, each its own GPU (two distinct whole GPUs, each container only its own node);
- gpu-test2: one pod, two containers sharing one claim's GPU;
- gpu-test3: two pods sharing one ResourceClaim's GPU (reservedFor both);
- gpu-test4: four replicas, each a claim of four MIG requests on one parent GPU
  (matchAttribute parentUUID): every container sees only its own request's MIG device;
- gpu-test5 (TimeSlicing interval Long, MPS on gpu.nvidia.com) is refused at prepare at its
  first config, `sharing.timeSlicingConfig.interval: Long` named in the pod's events, and
  gpu-test-mps (MPS on a gpu.nvidia.com, i.e. whole, GPU) with `sharing.strategy MPS` and the
  device named: the pods stay Pending, no container started;
- gpu-test6: its selector picks the even-indexed A100s (one each for the four replicas), and its
  TimeSlicing interval Long is refused at prepare, named in the events: no silent acceptance.
"""
import contextlib
import glob
import json
import os
import re
import subprocess

import pytest
import yaml

import cluster_agent
from dra_util import BUILD_SH, case_dirs, dra_args, dra_policy, slice_devices, slices
from e2e import Agent, E2EError, wait

NV = "gpu.nvidia.com"
WHOLE = (0, 2, 4, 6)
MIG = (1, 3, 5, 7)
NODE = "gpus:\n" + "".join(f"  - model: A100-SXM4-40GB\n    mig: {'enabled' if i in MIG else 'disabled'}\n"
                           for i in range(8)) + 'driver_version: "570.172.08"\ncuda_version: "12.8"\n'
POLICY = dra_policy('{index: "1,3,5,7", mode: mig}', flags="  migStrategy: mixed\n")
NAMESPACES = ("gpu-test1", "gpu-test2", "gpu-test3", "gpu-test4", "gpu-test5", "gpu-test6", "gpu-test-mps")
INTERVAL = ("sharing.timeSlicingConfig.interval: Long: gpuslice leaves the GPU's hardware time slice as it is "
            "(Default only; the guard shares the GPU by compute percentage instead)")
MPS_ON_WHOLE = "its GpuConfig asks sharing.strategy MPS, but device gpu-{} is a whole GPU by the node's policy"


def _quickstart():
    """The directory of NVIDIA's v1 quickstart manifests in the parts' cache (build.sh nvidia-dra)."""
    b = subprocess.run(["bash", BUILD_SH, "nvidia-dra"], capture_output=True, text=True, timeout=1800)
    assert b.returncode == 0 and b.stdout.strip(), f"build.sh nvidia-dra: exit {b.returncode}\n{b.stderr[-3000:]}"
    d = os.path.join(os.path.dirname(b.stdout.strip().splitlines()[-1]), "quickstart", "v1")
    assert os.path.isfile(os.path.join(d, "gpu-test1.yaml")), f"{d}: no NVIDIA quickstart manifests"
    return d


def _classes():
    """The chart's DeviceClasses with dra.nvidiaCompat=true, rendered by the real Helm (no extended
    resource names: nvidia.com/gpu stays the device plugins' for the suite's other tests)."""
    p = subprocess.run([cluster_agent.helm(), "template", "gpuslice", cluster_agent.CHART,
                        "-s", "templates/dra-deviceclasses.yaml", "--set", "dra.enabled=true",
                        "--set", "dra.nvidiaCompat=true", "--set", "dra.extendedResourceNames=false"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"helm template: exit {p.returncode}\n{p.stderr}"
    return [d for d in yaml.safe_load_all(p.stdout) if d]


class NvNode:
    def __init__(self, cluster, agent, quickstart):
        self.c, self.a, self.dir = cluster, agent, quickstart
        self.gpus = json.loads(agent.sim("inspect", "--json").stdout)["gpus"]

    def apply(self, name):
        """Manifest NAME (gpu-test1...) applied, its pods (and Deployments' pod templates) made to run here."""
        with open(os.path.join(self.dir, f"{name}.yaml")) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        for d in docs:
            if d["kind"] == "Pod":
                cluster_agent._runnable(d, self.c.image)
            elif d["kind"] == "Deployment":
                cluster_agent._runnable(d["spec"]["template"], self.c.image)
        self.c.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs, sort_keys=False))

    def pods(self, ns):
        return self.c.get("pods", "-n", ns)["items"]

    def running(self, ns, count, timeout=150):
        def check():
            ps = self.pods(ns)
            ph = {p["metadata"]["name"]: p["status"].get("phase") for p in ps}
            return ps if len(ps) == count and all(v == "Running" for v in ph.values()) else E2EError(str(ph))
        return wait(check, timeout, f"{count} pods of {ns} Running")

    def seen(self, ns, pod, ctr, timeout=60):
        """What container CTR of POD printed (cluster_agent's SHOW), from the kubelet's log file:
        {"env": {NAME: value}, "node": [paths]}."""
        def read():
            files = glob.glob(os.path.join(self.c.pod_logs, f"{ns}_{pod}_*", ctr, "0.log"))
            if not files:
                return None
            with open(files[0]) as f:
                texts = [line.rstrip("\n").split(" ", 3)[-1] for line in f]  # CRI: TIME STREAM TAG TEXT
            if "ready" not in texts:
                return None
            return {"node": [t[len("node "):] for t in texts if t.startswith("node ")],
                    "env": dict(t.split("=", 1) for t in texts if "=" in t and not t.startswith(("node ", "guard ")))}
        return wait(read, timeout, f"{ns}/{pod} {ctr}'s log to say ready")

    def claim_of(self, pod):
        (st,) = pod["status"]["resourceClaimStatuses"]
        return self.c.get("resourceclaim", "-n", pod["metadata"]["namespace"], st["resourceClaimName"])

    def results(self, claim):
        a = claim.get("status", {}).get("allocation")
        assert a, f"claim {claim['metadata']['name']} not allocated"
        for r in a["devices"]["results"]:
            assert r["driver"] == NV and r["pool"] == self.c.node_name, r
        return a["devices"]["results"]

    def whole(self, uuid):
        """The index of whole GPU UUID (asserted one of the whole ones)."""
        g = next((g for g in self.gpus if g["uuid"] == uuid), None)
        assert g and g["index"] in WHOLE, (uuid, [x["uuid"] for x in self.gpus])
        return g

    def gpu_nodes(self, seen):
        return sorted(n for n in seen["node"] if n[len("/dev/nvidia"):].isdigit())

    def refused(self, ns, pod, *texts, timeout=120):
        """POD's events once they have the kubelet's prepare error with every one of TEXTS; the pod asserted not running."""
        def check():
            ev = self.c.get("events", "-n", ns, "--field-selector", f"involvedObject.name={pod}")["items"]
            msgs = [e.get("message", "") for e in ev]
            return [m for m in msgs if all(t in m for t in texts)] or E2EError(f"events {msgs}")
        msgs = wait(check, timeout, f"{ns}/{pod}'s events to name {texts}")
        p = self.c.get("pod", "-n", ns, pod)
        assert p["status"].get("phase") == "Pending", p["status"]
        assert not any(s.get("state", {}).get("running") for s in p["status"].get("containerStatuses") or []), p
        return msgs

    def claimed(self, ns, count):
        """NS's COUNT pods once each has its claim (made by the controller from its template)."""
        def check():
            ps = self.pods(ns)
            return len(ps) == count and all(p["status"].get("resourceClaimStatuses") for p in ps) and ps
        return wait(check, 60, f"{count} pods of {ns} with their claims")

    @contextlib.contextmanager
    def manifest(self, name):
        """Manifest NAME applied (apply), its namespace deleted after (its claims unprepared)."""
        self.apply(name)
        try:
            yield name
        finally:
            self.c.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=true", check=False, timeout=180)


@pytest.fixture(scope="module")
def nv(cluster):
    quickstart = _quickstart()
    classes = _classes()
    names = [d["metadata"]["name"] for d in classes]
    assert {NV, "mig.nvidia.com"} <= set(names), names
    # another test's class of the same name (NVIDIA's chart's) is replaced, not merged into
    cluster.kubectl("delete", "deviceclass", *names, "--ignore-not-found", check=False)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(classes))
    # slices another gpu.nvidia.com driver left on the node (NVIDIA's own, test_nvidia_dra.py) go first
    cluster.kubectl("delete", "resourceslices", "--wait=true", "--ignore-not-found", "--field-selector",
                    f"spec.nodeName={cluster.node_name},spec.driver={NV}", check=False, timeout=90)
    node, _ = case_dirs(cluster, "nv-manifests", NODE)
    a = Agent(cluster, node, POLICY, dra_args(cluster, NV) + ["--cdi-hook", ""])
    try:
        def ready():
            devs = slice_devices(slices(cluster, NV))
            return all(f"gpu-{i}" in devs for i in WHOLE) and \
                all(any(d.startswith(f"gpu-{i}-mig-3g20gb-") for d in devs) for i in MIG) and devs
        wait(ready, 120, "the agent's gpu.nvidia.com slices: the whole A100s and the MIG placements")
        yield NvNode(cluster, a, quickstart)
    finally:
        for ns in NAMESPACES:
            cluster.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=true", check=False, timeout=180)
        try:
            a.stop()
        finally:
            print(f"---- agent log {a.log_path}\n{a.log()[-4000:]}")
            cluster.kubectl("delete", "resourceslices", "--wait=true", "--ignore-not-found", "--field-selector",
                            f"spec.nodeName={cluster.node_name},spec.driver={NV}", check=False, timeout=90)
            cluster.kubectl("delete", "deviceclass", *names, "--ignore-not-found", check=False)


def _one_uuid(env):
    u = env.get("GPUSLICE_DRA_DEVICES", "")
    assert u and "," not in u, env
    return u


def test_gpu_test1_two_pods_two_distinct_gpus(nv):
    ns = "gpu-test1"
    with nv.manifest(ns):
        nv.running(ns, 2)
        uuids = []
        for pod in ("pod1", "pod2"):
            s = nv.seen(ns, pod, "ctr")
            u = _one_uuid(s["env"])
            g = nv.whole(u)
            assert nv.gpu_nodes(s) == [f"/dev/nvidia{g['minor']}"], s["node"]
            assert s["env"].get("GPUSLICE_DRA_CLAIM", "").startswith(f"{ns}/{pod}-gpu-"), s["env"]
            uuids.append(u)
        assert len(set(uuids)) == 2, uuids


def test_gpu_test2_two_containers_share_one_gpu(nv):
    ns = "gpu-test2"
    with nv.manifest(ns):
        (pod,) = nv.running(ns, 1)
        s0, s1 = nv.seen(ns, "pod", "ctr0"), nv.seen(ns, "pod", "ctr1")
        u = _one_uuid(s0["env"])
        assert _one_uuid(s1["env"]) == u, (s0["env"], s1["env"])
        g = nv.whole(u)
        assert nv.gpu_nodes(s0) == nv.gpu_nodes(s1) == [f"/dev/nvidia{g['minor']}"], (s0["node"], s1["node"])
        (r,) = nv.results(nv.claim_of(pod))
        assert r["device"] == f"gpu-{g['index']}", r


def test_gpu_test3_two_pods_share_one_claim(nv):
    ns = "gpu-test3"
    with nv.manifest(ns):
        nv.running(ns, 2)
        s1, s2 = nv.seen(ns, "pod1", "ctr"), nv.seen(ns, "pod2", "ctr")
        u = _one_uuid(s1["env"])
        assert _one_uuid(s2["env"]) == u, (s1["env"], s2["env"])
        g = nv.whole(u)
        assert nv.gpu_nodes(s1) == nv.gpu_nodes(s2) == [f"/dev/nvidia{g['minor']}"]
        assert s1["env"].get("GPUSLICE_DRA_CLAIM") == s2["env"].get("GPUSLICE_DRA_CLAIM") == f"{ns}/single-gpu"
        claim = nv.c.get("resourceclaim", "-n", ns, "single-gpu")
        (r,) = nv.results(claim)
        assert r["device"] == f"gpu-{g['index']}", r
        assert sorted(x["name"] for x in claim["status"]["reservedFor"]) == ["pod1", "pod2"], claim["status"]


def test_gpu_test4_four_mig_devices_of_one_parent_each_container_its_own(nv):
    ns = "gpu-test4"
    reqs = {"ctr0": "mig-1g-5gb-0", "ctr1": "mig-1g-5gb-1", "ctr2": "mig-2g-10gb", "ctr3": "mig-3g-20gb"}
    profile = {"mig-1g-5gb-0": "1g5gb", "mig-1g-5gb-1": "1g5gb", "mig-2g-10gb": "2g10gb", "mig-3g-20gb": "3g20gb"}
    with nv.manifest(ns):
        pods = nv.running(ns, 4, timeout=180)
        gpus = json.loads(nv.a.sim("inspect", "--json").stdout)["gpus"]
        parent_of = {d["uuid"]: g["index"] for g in gpus for d in g["mig"].get("devices") or []}
        parents = []
        for pod in pods:
            name = pod["metadata"]["name"]
            results = {r["request"]: r["device"] for r in nv.results(nv.claim_of(pod))}
            assert sorted(results) == sorted(reqs.values()), results
            idx = {int(re.fullmatch(r"gpu-([0-9]+)-mig-.*", d).group(1)) for d in results.values()}
            assert len(idx) == 1 and idx <= set(MIG), results  # the constraint: one parent
            for req, dev in results.items():
                assert dev.startswith(f"gpu-{next(iter(idx))}-mig-{profile[req]}-"), (req, dev)
            uuids, caps = [], []
            for ctr, req in reqs.items():
                s = nv.seen(ns, name, ctr)
                u = _one_uuid(s["env"])
                assert u.startswith("MIG-") and parent_of.get(u) in idx, (u, parent_of)
                own = "GPUSLICE_DRA_DEVICES_" + req.upper().replace("-", "_")
                assert s["env"].get(own) == u, s["env"]
                others = [k for k in s["env"] if k.startswith("GPUSLICE_DRA_DEVICES_") and k != own]
                assert not others, s["env"]
                mine = {n for n in s["node"] if n.startswith("/dev/nvidia-caps/")}
                assert len(mine) == 2, s["node"]  # its GI's and CI's access nodes
                uuids.append(u)
                caps.append(mine)
            assert len(set(uuids)) == 4, uuids
            assert all(not caps[i] & caps[j] for i in range(4) for j in range(i + 1, 4)), caps
            parents.append(next(iter(idx)))
        assert sorted(parents) == list(MIG), parents  # each replica's claim a whole MIG GPU's worth


def test_gpu_test5_interval_long_and_mps_on_a_whole_gpu_refused(nv):
    ns = "gpu-test5"
    with nv.manifest(ns):
        msgs = nv.refused(ns, "pod0", "opaque config 0 for request ts-gpu (resource.nvidia.com/v1beta1 GpuConfig, "
                                      "from the claim)", INTERVAL)
        (pod,) = nv.claimed(ns, 1)
        results = nv.results(nv.claim_of(pod))
        assert sorted(r["request"] for r in results) == ["mps-gpu", "ts-gpu"], results
        print(f"gpu-test5 refused: {msgs[0]}")


def test_gpu_test6_selector_picks_even_a100s_interval_long_refused(nv):
    ns = "gpu-test6"
    with nv.manifest(ns):
        pods = nv.claimed(ns, 4)
        devices = []
        for pod in pods:
            nv.refused(ns, pod["metadata"]["name"], "request gpu", INTERVAL)
            (r,) = nv.results(nv.claim_of(pod))
            devices.append(r["device"])
        assert sorted(devices) == [f"gpu-{i}" for i in WHOLE], devices


def test_gpu_test_mps_on_a_whole_gpu_refused(nv):
    ns = "gpu-test-mps"
    with nv.manifest(ns):
        (pod,) = nv.claimed(ns, 1)
        (r,) = nv.results(nv.claim_of(pod))
        idx = int(r["device"].split("-")[1])
        assert idx in WHOLE, r
        msgs = nv.refused(ns, "test-pod", "request mps-gpu: " + MPS_ON_WHOLE.format(idx))
        print(f"gpu-test-mps refused: {msgs[0]}")
