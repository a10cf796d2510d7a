"""Integration tests of fractional GPUs (docs/fractional.md) against the kubelet emulator: the
agent advertises gpuslice.io/gpu-memory (a device per GiB) and gpuslice.io/gpu-compute (100 per
GPU), GetPreferredAllocation keeps a container's units on one GPU and puts its compute on its
memory's GPU, Allocate refuses units of two GPUs, and the guard's limits file carries the
container's quota and compute share. Without API access (as here) a container's two allocations
are paired by time. Harness and fixture: agent_harness.py.

Environment (set by meson): GPUSLICE (the binary), GPUSLICE_SIM_LIB, GS_SOURCE_ROOT.

Run: /usr/bin/python3 -m pytest -q tests/integration/test_fractional.py"""
import os

import grpc
import pytest

from agent_harness import h  # noqa: F401 (h: fixture)

MEM, SM = "gpuslice.io/gpu-memory", "gpuslice.io/gpu-compute"
NODE = "gpus:\n  - model: H100-SXM5-80GB\n    count: 2\n  - model: L4\n    count: 1\n"
POLICY = "version: v1\ngpuslice:\n  gpus:\n    - {model: \"NVIDIA H100*\", mode: fractional}\n"


def _start(h):
    node = h.node(NODE)
    guard_root = os.path.join(h.base, "guard")
    agent = h.agent(node, POLICY, resources=[MEM, SM, "nvidia.com/gpu"], extra=["--guard-root", guard_root])
    return node.uuids(), agent


def _units(h, resource, uuid):
    return [d.id for d in h.latest(resource) if d.id.startswith(uuid + "::")]


def _limits(resp):
    mounts = {m.container_path: m.host_path for m in resp.mounts}
    with open(mounts["/etc/gpuslice/guard.conf"]) as f:
        return mounts["/etc/gpuslice/guard.conf"], [ln for ln in f.read().splitlines() if ln.startswith("device ")]


def test_units_advertised(h):
    u, _ = _start(h)
    assert len(_units(h, MEM, u[0])) == 80 and len(_units(h, MEM, u[1])) == 80  # 79.6 GiB each, rounded
    assert len(_units(h, SM, u[0])) == 100
    assert not _units(h, MEM, u[2])  # the L4 has no rule: a whole GPU
    assert [d.id for d in h.latest("nvidia.com/gpu")] == [u[2]]


def test_preferred_one_gpu_best_fit(h):
    u, _ = _start(h)
    # 50 GiB of GPU 0 taken: best fit puts 10 GiB on GPU 0, 40 GiB on GPU 1; 81 fits nowhere
    avail = _units(h, MEM, u[0])[50:] + _units(h, MEM, u[1])
    got = h.kubelet.preferred(MEM, avail, size=10)
    assert len(got) == 10 and all(i.startswith(u[0] + "::") for i in got)
    got = h.kubelet.preferred(MEM, avail, size=40)
    assert len(got) == 40 and all(i.startswith(u[1] + "::") for i in got)
    assert h.kubelet.preferred(MEM, avail, size=81) == []


def test_memory_and_compute_of_one_container_share_gpu_and_guard(h):
    u, agent = _start(h)
    mem = _units(h, MEM, u[1])[:10]
    r1 = h.kubelet.allocate(MEM, mem)
    assert r1.envs["NVIDIA_VISIBLE_DEVICES"] == u[1]
    path1, dev1 = _limits(r1)
    assert dev1 == [f"device 0 {u[1]} {10 << 30} 0"]
    # the compute of the same container: GPU 1 (its memory's), though best fit would take GPU 0
    sm_avail = _units(h, SM, u[0])[60:] + _units(h, SM, u[1])  # 40 free on GPU 0, 100 on GPU 1
    got = h.kubelet.preferred(SM, sm_avail, size=30)
    assert len(got) == 30 and all(i.startswith(u[1] + "::") for i in got), got
    r2 = h.kubelet.allocate(SM, got)
    assert r2.envs["NVIDIA_VISIBLE_DEVICES"] == u[1]
    path2, dev2 = _limits(r2)
    assert path2 == path1, "one limits file for the container's two resources"
    assert dev2 == [f"device 0 {u[1]} {10 << 30} 30"]
    assert {m.container_path: m.host_path for m in r1.mounts} == {m.container_path: m.host_path for m in r2.mounts}
    agent.wait_log(r"Allocate gpuslice.io/gpu-compute: 30 units of GPU 1 .*with its other resource")
    # the next container's memory is a container of its own
    r3 = h.kubelet.allocate(MEM, _units(h, MEM, u[1])[10:50])
    path3, dev3 = _limits(r3)
    assert path3 != path1 and dev3 == [f"device 0 {u[1]} {40 << 30} 0"]


def test_compute_alone_gets_a_share_without_quota(h):
    u, _ = _start(h)
    r = h.kubelet.allocate(SM, _units(h, SM, u[0])[:25])
    assert _limits(r)[1] == [f"device 0 {u[0]} 0 25"]


def test_units_of_two_gpus_refused(h):
    u, _ = _start(h)
    with pytest.raises(grpc.RpcError) as e:
        h.kubelet.allocate(MEM, _units(h, MEM, u[0])[:60] + _units(h, MEM, u[1])[:30])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert ("gpuslice.io/gpu-memory: the 90 units of one container must be of one GPU, these are of GPUs "
            "0 (60), 1 (30)") in e.value.details()
