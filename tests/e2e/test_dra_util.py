"""Per-pod GPU utilization of pods with DRA claims in the real cluster
(gpuslice_pod_gpu_utilization_ratio, docs/user-guide.md#per-pod-gpu-utilization): `gpuslice agent
--dra` on a simulated node of two H100 80GB, GPU 0 time-sliced (one device shared by consumable
capacity), GPU 1 in MIG mode without a layout (placements made at prepare). The real scheduler
allocates, the real kubelet prepares the claims and records them in its DRA manager checkpoint
(ROOT/dra_manager_state), and writes its pods' log directories (podLogsDir); the agent ties
each pod's processes (their cgroups name the pod's UID) to the GPU of its claim from that
checkpoint and names the pod from that directory.

- Two pods with memory claims on the shared GPU: their containers' processes run known duty
  schedules (`gpuslice sim util`: 30 % and 60 %), a host process 10 %; each pod's series must be
  its schedule within the tolerance of tests/integration/test_pod_utilization.py, the host
  process in the no-pod series.
- A 3g.40gb claim: the process of its pod runs on the instance made at prepare, and the instance's
  figure (GPM) goes to that pod's series with the MIG device's labels."""
import json
import os
import re
import subprocess
import time

import pytest

from dra_util import SHARED, SHARED_GPU0, DRIVER, apply_classes, apply_objects, case_dirs, claim, claim_pod, \
    delete_prefixed, dra_args, dra_policy, h100_node, slice_devices, slices
from e2e import NS, read_env, wait

NODE = h100_node(mig=(1,))
POLICY = dra_policy(SHARED_GPU0, '{index: "1", mode: mig}', flags="  migStrategy: mixed\n")
MIG = f"mig.{DRIVER}"
PREFIX = "dra-util-"
METRIC = "gpuslice_pod_gpu_utilization_ratio"
TOL = 0.05   # as tests/integration/test_pod_utilization.py: a period of a 1 s interval may fall in the next


@pytest.fixture
def dra(cluster, agent):
    """The agent on the two-H100 node with a 1 s attribution interval, the kubelet's pod logs
    directory named; its pods and claims deleted after the test while it still serves."""
    classes = apply_classes(cluster)
    node, out = case_dirs(cluster, "dra-util", NODE)
    logs = read_env(os.path.join(cluster.dir, "env"))["GS_E2E_POD_LOGS"]
    a = agent(node, POLICY, dra_args(cluster) + ["--cdi-hook", "", "--pod-attribution-interval-ms", "1000",
                                                 "--pod-logs-dir", logs])
    procs = []   # host processes, and (pid, gpu) of the simulated node's processes
    try:
        wait(lambda: "gpu-0" in slice_devices(slices(cluster)) and
             any(d.startswith("gpu-1-mig-3g40gb-") for d in slice_devices(slices(cluster))), 120,
             "the agent's ResourceSlices (the shared GPU and the MIG placements)")
        yield a, out, procs
    finally:
        for p in procs:   # a MIG instance in use is not destroyed: the claim's unprepare would fail
            if isinstance(p, tuple):
                a.sim("sim", "process", "remove", "--pid", str(p[0]), "--gpu", str(p[1]), check=False)
            else:
                p.kill()
                p.wait()
        delete_prefixed(cluster, PREFIX)
        cluster.kubectl("delete", "deviceclass", *classes, "--ignore-not-found", check=False)


def _pod_pid(cluster, name):
    """The host PID of pod NAME's container process (`sleep 3600`): the process whose cgroup names
    the pod's UID (cgroupfs pod<UID>, systemd pod<UID with '_'>) and whose command is the script's."""
    uid = cluster.pod(name)["metadata"]["uid"]
    keys = (f"pod{uid}", f"pod{uid.replace('-', '_')}")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cgroup") as f:
                cg = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        if any(k in cg for k in keys) and cmd[:2] == [b"sleep", b"3600"]:
            return int(pid)
    return None


def _run(a, procs, pid, gpu, sm, gi=None):
    procs.append((pid, gpu))
    a.sim("sim", "process", "add", "--gpu", str(gpu), *(["--gi", str(gi)] if gi is not None else []), "--pid", str(pid),
          "--mem", "256MiB")
    a.sim("sim", "util", "--pid", str(pid), "--gpu", str(gpu), "--sm", sm)


def _series(a, gpu):
    """{(namespace, pod, container): (value, labels)} of METRIC for GPU index gpu."""
    out = {}
    for key, v in a.samples().items():
        if key.startswith(METRIC + "{") and f',gpu="{gpu}",' in key:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', key))
            out[(labels["namespace"], labels["pod"], labels["container"])] = (v, labels)
    return out


def _expect(a, gpu, truth, timeout=30):
    """Waits until each (ns, pod, container) of truth has its value within TOL and every other
    series of the GPU is at most TOL; returns the series."""
    deadline = time.monotonic() + timeout
    while True:
        got = _series(a, gpu)
        vals = {k: v for k, (v, _) in got.items()}
        if all(k in vals and abs(vals[k] - v) <= TOL for k, v in truth.items()) and \
                all(v <= TOL for k, v in vals.items() if k not in truth):
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"GPU {gpu}: expected {truth}, got {vals}\n{a.log()[-3000:]}")
        time.sleep(0.3)


def test_two_pods_sharing_a_gpu_by_claims_have_their_own_series(cluster, dra):
    a, out, procs = dra
    for name, gib in (("a", 10), ("b", 20)):
        apply_objects(cluster, claim(PREFIX + name, SHARED, {"memory": f"{gib}Gi"}),
                      claim_pod(cluster, PREFIX + name, PREFIX + name, "sleep 3600", out=out))
    pids = {}
    for name in ("a", "b"):
        cluster.wait_phase(PREFIX + name, ("Running",), timeout=180)
        pids[name] = wait(lambda: _pod_pid(cluster, PREFIX + name), 60, f"pod {name}'s container process")
    assert os.path.exists(os.path.join(cluster.kubelet_dir, "dra_manager_state"))
    host = subprocess.Popen(["sleep", "600"])
    procs.append(host)
    _run(a, procs, pids["a"], 0, "30")
    _run(a, procs, pids["b"], 0, "60,60,60,60")
    _run(a, procs, host.pid, 0, "10")
    got = _expect(a, 0, {(NS, PREFIX + "a", "main"): 0.30, (NS, PREFIX + "b", "main"): 0.60, ("", "", ""): 0.10})
    assert got[(NS, PREFIX + "a", "main")][1]["UUID"] == a.uuids()[0]
    print(f"DRA per-pod utilization on a shared GPU: { {k: v for k, (v, _) in got.items()} }")
    # the duty changes: the next intervals follow
    a.sim("sim", "util", "--pid", str(pids["a"]), "--gpu", "0", "--sm", "50")
    _expect(a, 0, {(NS, PREFIX + "a", "main"): 0.50, (NS, PREFIX + "b", "main"): 0.60, ("", "", ""): 0.10})
    assert "Per-pod utilization:" not in a.log(), a.log()[-3000:]


def test_mig_claim_pod_gets_its_instance_figure(cluster, dra):
    a, out, procs = dra
    sel = f'device.attributes["{DRIVER}"].profile == "3g.40gb"'
    apply_objects(cluster, claim(PREFIX + "mig", MIG, selector=sel),
                  claim_pod(cluster, PREFIX + "mig", PREFIX + "mig", "sleep 3600", out=out))
    cluster.wait_phase(PREFIX + "mig", ("Running",), timeout=180)
    pid = wait(lambda: _pod_pid(cluster, PREFIX + "mig"), 60, "the MIG pod's container process")
    devs = json.loads(a.sim("inspect", "--json").stdout)["gpus"][1]["mig"]["devices"]
    assert len(devs) == 1, devs
    _run(a, procs, pid, 1, "40", gi=devs[0]["gi_id"])
    got = _expect(a, 1, {(NS, PREFIX + "mig", "main"): 0.40})
    labels = got[(NS, PREFIX + "mig", "main")][1]
    assert labels["mig_uuid"] == devs[0]["uuid"] and labels["GPU_I_PROFILE"] == "3g.40gb", labels
    assert labels["GPU_I_ID"] == str(devs[0]["gi_id"]), labels
