"""Fractional GPUs in the real cluster (docs/fractional.md): the agent, a host
process with the admin kubeconfig (--kubeconfig: it pairs a container's memory and compute through
the pod it finds in the API server), on a simulated node of one H100 80GB in mode fractional and
one L4 advertised whole (so that a pod can ask nvidia.com/gpu beside a fraction). The real
scheduler sums the node's units, the real kubelet calls GetPreferredAllocation and Allocate.

- The Node's allocatable: gpuslice.io/gpu-memory 80 (GiB), gpuslice.io/gpu-compute 100 (%).
- Impossible requests: 81 GiB stays Pending with the scheduler's `Insufficient
  gpuslice.io/gpu-memory`; a fraction beside nvidia.com/gpu fails admission
  (UnexpectedAdmissionError) with the agent's message in the pod's status.
- Heterogeneous pods side by side: 40 GiB and four 10 GiB pods (one of them with 30 % compute)
  all Running on the one H100; each container's guard limits file (/etc/gpuslice/guard.conf)
  names its own quota (and 30 for the compute one); a sixth 10 GiB pod stays Pending
  (Insufficient gpuslice.io/gpu-memory). What the running pods saw comes back through a hostPath.
- The guard's quota inside a pod is its request: guard_app on the simulated CUDA driver (80 GiB
  free) gets less than 10 GiB and then CUDA_ERROR_OUT_OF_MEMORY (test_guard.py's image; skipped in
  a sanitizer build, as there)."""
import os
import re
import shutil

import pytest

from e2e import NS, E2EError, written
from test_guard import CUDA_ERROR_OUT_OF_MEMORY, IMAGE, _image, _kv

MEM, SM, GPU = "gpuslice.io/gpu-memory", "gpuslice.io/gpu-compute", "nvidia.com/gpu"
GIB = 1 << 30
NODE = "gpus:\n  - model: H100-SXM5-80GB\n  - model: L4\n"
POLICY = ("version: v1\nflags:\n  plugin:\n    deviceListStrategy: cdi-cri\n"
          "gpuslice:\n  gpus:\n    - {model: \"NVIDIA H100*\", mode: fractional}\n")
ALLOCATABLE = {MEM: 80, SM: 100, GPU: 1}


@pytest.fixture
def frac(cluster, agent):
    """The agent on the H100 + L4 node with API access; its allocatable in the API server."""
    base = os.path.join(cluster.dir, "fractional")
    shutil.rmtree(base, ignore_errors=True)
    out = os.path.join(base, "out")
    os.makedirs(out)
    node = os.path.join(base, "node.yaml")
    with open(node, "w") as f:
        f.write(NODE)
    a = agent(node, POLICY, extra=["--kubeconfig", cluster.kubeconfig, "--node-name", cluster.node_name,
                                   "--cdi-hook", ""])
    cluster.wait_allocatable(ALLOCATABLE, timeout=120)
    return a, out


def _insufficient(cluster, name):
    cond = cluster.wait_unschedulable(name, timeout=120)
    assert f"Insufficient {MEM}" in cond["message"], cond
    assert cluster.pod(name)["status"]["phase"] == "Pending"
    return cond


def test_allocatable_and_impossible_requests(cluster, frac):
    a, _ = frac
    assert cluster.nonzero("capacity") == ALLOCATABLE
    # more memory than the GPU has: the scheduler refuses it
    cluster.create_pod("frac-81g", {MEM: 81}, "true")
    cond = _insufficient(cluster, "frac-81g")
    print(f"fractional: 81 GiB on an 80 GiB H100: {cond['message']}")
    # a fraction beside a whole GPU: scheduled (the node has both), refused by the agent's Allocate
    cluster.create_pod("frac-mixed", {MEM: 10, GPU: 1}, "true")
    st = cluster.wait_phase("frac-mixed", ("Failed",), timeout=120)["status"]
    want = f"pod {NS}/frac-mixed asks for {MEM} together with whole GPUs (nvidia.com/gpu)"
    assert st.get("reason") == "UnexpectedAdmissionError", st
    assert want in st.get("message", ""), st
    assert not st.get("containerStatuses", [{}])[0].get("state", {}).get("running"), st
    assert want in a.log()
    print(f"fractional: a fraction beside nvidia.com/gpu: {st['reason']}: {st['message']}")


def _limits_script(name):
    return (f"{{ grep '^device ' /etc/gpuslice/guard.conf; sed 's/^/preload /' /etc/ld.so.preload; echo done; }}"
            f" > /out/{name} 2>&1\nsleep 3600")


def test_heterogeneous_pods_share_one_gpu(cluster, frac):
    a, out = frac
    (h100, _l4) = a.uuids()
    pods = {"frac-40g": (40, 0), "frac-10g-0": (10, 30), "frac-10g-1": (10, 0), "frac-10g-2": (10, 0),
            "frac-10g-3": (10, 0)}
    for name, (gib, pct) in pods.items():
        res = {MEM: gib, **({SM: pct} if pct else {})}
        cluster.create_pod(name, res, _limits_script(name), out=out)
    for name, (gib, pct) in pods.items():
        cluster.wait_phase(name, ("Running",), timeout=180)
        msg = written(out, name)
        devices = [line for line in msg.splitlines() if line.startswith("device ")]
        # one GPU, the H100, with the pod's quota and compute share: both of its resources in one file
        assert devices == [f"device 0 {h100} {gib * GIB} {pct}"], msg
        preload = [line.split(" ", 1)[1] for line in msg.splitlines() if line.startswith("preload ")]
        assert preload and preload[0].endswith("libgpuslice-guard.so"), msg
        print(f"fractional: {name} ({gib} GiB, {pct} %) Running: {devices[0]}")
    # 80 of the H100's 80 units taken: a sixth pod asking 10 GiB stays Pending
    cluster.create_pod("frac-10g-extra", {MEM: 10}, "true")
    cond = _insufficient(cluster, "frac-10g-extra")
    print(f"fractional: a sixth 10 GiB pod: {cond['message']}")
    # the compute pod's two allocations were paired through its pod in the API server
    pair = re.compile(rf"Allocate ({MEM}|{SM}): (10|30) units of GPU 0 for pod {NS}/frac-10g-0 \(container 0, with its "
                      r"other resource\): guard quota 10240 MiB, compute 30%")
    assert pair.search(a.log()), a.log()[-4000:]


def test_allocation_past_the_quota_fails_inside_a_fractional_pod(cluster, frac):
    if os.environ.get("GS_SANITIZED") == "1":
        pytest.skip("sanitizer build: guard_app carries ASan/UBSan, whose runtime cannot start after the "
                    "preloaded guard (test_guard.py); the guard in a pod runs in the normal build's e2e stage")
    _image(cluster)
    script = ("{\n/opt/gs/guard_app alloc 1G 8 | sed 's/^/within /'\n"
              "/opt/gs/guard_app alloc 1G 12 | sed 's/^/past /'\n} > /dev/termination-log 2>&1")
    env = {"FAKE_CUDA_TOTAL_MIB": str(80 * 1024)}   # the simulated CUDA driver: the whole H100 free
    try:
        cluster.create_pod("frac-guard", {MEM: 10}, script + "\n", image=IMAGE, env=env)
        phase, code, msg = cluster.termination_message("frac-guard", timeout=180)
    except E2EError:
        print(f"---- pod events: {cluster.events('frac-guard')}")
        raise
    assert phase == "Succeeded", (phase, code, msg)
    within, past = _kv(msg, "within"), _kv(msg, "past")
    assert within.get("ok") == "8" and within.get("first_err") == "0", msg
    # the quota is the 10 GiB asked (less the context's share), though the driver has 80 GiB free
    assert int(past.get("ok", "-1")) in (9, 10), msg
    assert past.get("first_err") == str(CUDA_ERROR_OUT_OF_MEMORY), msg
    print(f"fractional: 10 GiB pod: 12 x 1 GiB asked, {past['ok']} allocated, then error {past['first_err']}")
