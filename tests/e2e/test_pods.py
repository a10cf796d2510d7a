"""Pods through the real scheduler, kubelet and containerd: each pod asks for one resource, the
scheduler binds it to the node, the kubelet calls the agent's Allocate and records the answer in
its checkpoint, containerd 2 injects the CDI devices from the spec the agent wrote (the simulated
node's device nodes, created by runc from their numbers), and the container reports what it sees
through its termination message. The tests compare that with the Allocate answer the kubelet
recorded, so each fails if the runtime or the agent drops a part of it."""
import json
import os

from e2e import NS, wait
from kubelet_state import all_assigned, allocations

# What the container reports: its environment, its mounts outside the runtime's own, and the
# GPU device nodes with their type and numbers (busybox stat: %t %T in hex).
SHOW = r"""{
env | sed 's/^/env /'
awk '{print "mount " $2}' /proc/mounts | grep -v -E ' /(proc|sys|dev)(/|$)| /etc/(hosts|hostname|resolv.conf)$'
for n in /dev/nvidia* /dev/nvidia-caps/*; do [ -e "$n" ] && stat -c 'node %n %F %t %T' "$n"; done
true
} > /dev/termination-log"""

CDI = "version: v1\nflags:\n  plugin:\n    deviceListStrategy: cdi-cri\n"
CDI_TS2 = CDI + "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n"


def parse(msg):
    res = {"env": {}, "mount": set(), "node": {}}
    for line in msg.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "env":
            k, _, v = rest.partition("=")
            res["env"][k] = v
        elif kind == "mount":
            res["mount"].add(rest)
        elif kind == "node":
            path, desc = rest.split(" ", 1)
            ftype, major, minor = desc.rsplit(" ", 2)
            res["node"][path] = (ftype, int(major, 16), int(minor, 16))
    return res


def _uid(cluster, name):
    return cluster.pod(name)["metadata"]["uid"]


def _check_promised(cluster, name, seen, resource, n=1):
    """The container saw every env, mount and device of the Allocate answer the kubelet holds."""
    allocs = allocations(cluster, _uid(cluster, name))
    assert [(c, r, len(ids)) for c, r, ids, _ in allocs] == [("main", resource, n)], allocs
    _, _, ids, resp = allocs[0]
    for k, v in resp.envs.items():
        assert seen["env"].get(k) == v, f"env {k}={v} promised, container has {seen['env'].get(k)!r}"
    for m in resp.mounts:
        assert m.container_path in seen["mount"], f"mount {m.container_path} promised; mounts {sorted(seen['mount'])}"
    for d in resp.devices:
        assert d.container_path in seen["node"], f"device {d.container_path} promised; nodes {seen['node']}"
    return ids, resp


def _kind(cluster):
    """The kind of the node's CDI spec the agent wrote (--cdi-kind)."""
    with open(os.path.join(cluster.cdi_dir, "gpuslice.json")) as f:
        return json.load(f)["kind"]


def _cdi_nodes(cluster, cdi_names):
    """The device nodes the CDI spec in the cluster's CDI directory gives those CDI names."""
    nodes = {}
    for f in os.listdir(cluster.cdi_dir):
        if not f.endswith(".json"):
            continue
        with open(os.path.join(cluster.cdi_dir, f)) as fh:
            spec = json.load(fh)
        kind = spec["kind"]
        edits = [spec.get("containerEdits") or {}]
        for d in spec.get("devices", []):
            if f"{kind}={d['name']}" in cdi_names:
                edits.append(d.get("containerEdits") or {})
        if any(f"{kind}={d['name']}" in cdi_names for d in spec.get("devices", [])):
            for e in edits:
                for n in e.get("deviceNodes") or []:
                    nodes[n["path"]] = (n.get("major"), n.get("minor"))
    return nodes


def test_whole_gpu_pod_sees_its_cdi_devices(cluster, agent):
    a = agent("t4x2.yaml", CDI, extra=["--cdi-hook", ""])
    cluster.wait_allocatable({"nvidia.com/gpu": 2})
    seen = parse(cluster.run_pod("whole", {"nvidia.com/gpu": 1}, SHOW))
    ids, resp = _check_promised(cluster, "whole", seen, "nvidia.com/gpu")
    cdi = [d.name for d in resp.cdi_devices]
    assert cdi == [f"{_kind(cluster)}={ids[0]}"], cdi
    want = _cdi_nodes(cluster, set(cdi))
    gpu_nodes = {p for p in want if p.startswith("/dev/nvidia") and p[len("/dev/nvidia"):].isdigit()}
    assert len(gpu_nodes) == 1, want
    for path, (major, minor) in want.items():
        assert seen["node"].get(path) == ("character special file", major, minor), (path, seen["node"])
    # only the allocated GPU's node: the other GPU's is not in the container
    assert sorted(p for p in seen["node"] if p[len("/dev/nvidia"):].isdigit()) == sorted(gpu_nodes)
    assert ids[0] in a.uuids()


def test_time_sliced_pods_share_a_gpu_and_one_more_stays_pending(cluster, agent):
    a = agent("t4x2.yaml", CDI_TS2, extra=["--cdi-hook", ""])
    cluster.wait_allocatable({"nvidia.com/gpu": 4})
    for i in range(4):
        cluster.create_pod(f"ts{i}", {"nvidia.com/gpu": 1}, SHOW + "\nsleep 3600", restart="Never")
    for i in range(4):
        cluster.wait_phase(f"ts{i}", ("Running",))
    assigned = all_assigned(cluster, "nvidia.com/gpu")
    assert len(assigned) == 4 and len(set(assigned)) == 4, assigned
    assert {i.split("::")[0] for i in assigned} == set(a.uuids())
    # a fifth replica does not exist: the scheduler says so and leaves the pod Pending
    cluster.create_pod("ts-extra", {"nvidia.com/gpu": 1}, "true")

    def unschedulable():
        p = cluster.pod("ts-extra")
        conds = {c["type"]: c for c in p["status"].get("conditions", [])}
        c = conds.get("PodScheduled")
        return c and c.get("reason") == "Unschedulable" and c
    cond = wait(unschedulable, 60, "ts-extra Unschedulable")
    assert "Insufficient nvidia.com/gpu" in cond["message"], cond
    assert cluster.pod("ts-extra")["status"]["phase"] == "Pending"


def test_mig_pod_sees_its_instance(cluster, agent):
    policy = CDI + "  migStrategy: mixed\ngpuslice:\n  mig:\n    config: all-balanced\n"
    agent("h100x4-l4x3.yaml", policy, extra=["--cdi-hook", ""])
    wait(lambda: cluster.nonzero().get("nvidia.com/mig-3g.40gb") == 4, 90, "the 3g.40gb instances")
    seen = parse(cluster.run_pod("mig", {"nvidia.com/mig-3g.40gb": 1}, SHOW))
    ids, resp = _check_promised(cluster, "mig", seen, "nvidia.com/mig-3g.40gb")
    cdi = [d.name for d in resp.cdi_devices]
    assert cdi == [f"{_kind(cluster)}={ids[0]}"], cdi
    want = _cdi_nodes(cluster, set(cdi))
    assert any(p.startswith("/dev/nvidia-caps/") for p in want), want
    for path, (major, minor) in want.items():
        assert seen["node"].get(path) == ("character special file", major, minor), (path, seen["node"])


def test_mps_pod_sees_its_pipe_and_thread_percentage(cluster, agent):
    """MPS, 4 replicas per T4 (the stand-in control daemon): the container has the MPS pipe
    directory mounted and its share of the GPU's threads (25 %), through the Allocate answer and
    the per-allocation CDI spec containerd injects."""
    fake = os.environ.get("FAKE_MPS_CONTROL", "")
    assert fake and os.access(fake, os.X_OK), f"FAKE_MPS_CONTROL={fake!r}: not the built stand-in"
    root = os.path.join(cluster.dir, "mps-pods")
    os.makedirs(root, exist_ok=True)
    policy = (f"version: v1\nflags:\n  mpsRoot: {root}\n  plugin:\n    deviceListStrategy: cdi-cri\n"
              f"sharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n")
    agent("t4x2.yaml", policy, extra=["--cdi-hook", "", "--mps-control", fake])
    cluster.wait_allocatable({"nvidia.com/gpu": 8}, timeout=60)
    seen = parse(cluster.run_pod("mps", {"nvidia.com/gpu": 1}, SHOW))
    _check_promised(cluster, "mps", seen, "nvidia.com/gpu")
    pipe = seen["env"].get("CUDA_MPS_PIPE_DIRECTORY")
    assert pipe and pipe in seen["mount"], (pipe, sorted(seen["mount"]))
    assert seen["env"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25", seen["env"]
