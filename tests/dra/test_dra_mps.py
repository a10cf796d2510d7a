"""MPS under the DRA driver and per-request scoping, on the simulated node of examples/dra (whole
GPU 0, time-sliced GPU 1, MPS GPU 2, MIG GPUs 3 and 4), called as the kubelet calls it: the agent
runs a supervised control daemon (the stand-in tests/mps/fake_mps_control) for the GPU DRA serves
in MPS mode, an MPS claim gets that daemon's pipe, thread share and memory limit, and a claim is
refused, saying why, when the daemon cannot run; a claim of two requests gives each request's
device its own edits only, two time-sliced requests their own guard limits. Claims come from
files; the MPS root is the test's.

Environment (set by meson): GPUSLICE, GPUSLICE_SIM_LIB, GS_SOURCE_ROOT, FAKE_MPS_CONTROL."""
import json
import os

import pytest

from dra_client import claim
from test_dra_plugin import claim_json, result, running, wait
from test_dra_share import gpu_config, mps_node, start

UID = "5d2c0d4e-4f3a-4c1e-9d59-1b2f0c9e0a01"


@pytest.fixture
def node(request):
    yield from running(request, mps_node())


@pytest.fixture
def node_without_daemon(request):
    yield from running(request, mps_node("/nonexistent/nvidia-cuda-mps-control"))


def devices(node, uid=UID):
    with open(node.spec_path(uid)) as f:
        return json.load(f)["devices"]


def mps_claim(node, name="mps"):
    node.write_claim(claim_json("ns1", name, UID, [result("gpu-2", consumedCapacity={"memory": "10Gi", "compute": "25",
                                                                                     "clients": "1"})],
                                [gpu_config("MPS")]))


def test_daemon_runs_for_the_dra_mps_gpu_and_the_claim_gets_its_limits(node):
    mps_claim(node)
    c = start(node)
    pid_file = os.path.join(node.dir, "mps", node.uuids[2], "pipe", "nvidia-cuda-mps-control.pid")
    wait(lambda: os.path.exists(pid_file), 60, f"the MPS daemon of DRA's GPU 2 ({pid_file})")
    for other in (0, 1):  # only the MPS GPU has a daemon
        assert not os.path.exists(os.path.join(node.dir, "mps", node.uuids[other]))

    def prepared():  # the agent's view of the daemon follows its start
        r = c.prepare([claim("ns1", "mps", UID)])[UID]
        return r if r.error == "" else None
    r = wait(prepared, 30, "the MPS claim prepared")
    assert list(r.devices[0].cdi_device_ids)[1] == f"gpuslice.io/gpu=claim-{UID}-0"
    e = devices(node)[0]["containerEdits"]
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in e["env"]
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=10240M" in e["env"]
    assert "CUDA_MPS_PIPE_DIRECTORY=/mps/pipe" in e["env"]
    mounts = {m["containerPath"]: m["hostPath"] for m in e["mounts"]}
    assert mounts["/mps/pipe"] == os.path.join(node.dir, "mps", node.uuids[2], "pipe")
    assert os.path.isdir(mounts["/mps/pipe"]) and os.path.isdir(mounts["/dev/shm"])
    assert "/etc/ld.so.preload" not in mounts  # MPS: no guard


def test_prepare_fails_saying_why_when_the_daemon_cannot_run(node_without_daemon):
    node = node_without_daemon
    mps_claim(node)
    c = start(node)
    r = c.prepare([claim("ns1", "mps", UID)])[UID]
    assert "request gpu: device gpu-2 is shared by MPS, but" in r.error, r.error
    assert "control daemon" in r.error and node.uuids[2] in r.error, r.error
    assert not r.devices and not os.path.exists(node.spec_path(UID))
    assert not os.path.exists(os.path.join(node.dir, "mps", node.uuids[2], "pipe", "nvidia-cuda-mps-control.pid"))


def test_two_requests_each_get_their_own_edits(node):
    """A time-sliced request and an MPS request of one claim: the guard only in the first's device,
    MPS's pipe and limits only in the second's, each device's GPUSLICE_DRA_DEVICES its own GPU."""
    node.write_claim(claim_json("ns1", "two", UID,
                                [result("gpu-1", request="ts", consumedCapacity={"memory": "2Gi", "compute": "50"}),
                                 result("gpu-2", request="mps", consumedCapacity={"memory": "4Gi", "compute": "30",
                                                                                  "clients": "1"})]))
    c = start(node)

    def prepared():
        r = c.prepare([claim("ns1", "two", UID)])[UID]
        return r if r.error == "" else None
    r = wait(prepared, 60, "the two-request claim prepared")
    assert [list(d.request_names) for d in r.devices] == [["ts"], ["mps"]]
    assert [list(d.cdi_device_ids) for d in r.devices] == [
        [f"gpuslice.io/gpu={node.uuids[1]}", f"gpuslice.io/gpu=claim-{UID}-0"],
        [f"gpuslice.io/gpu={node.uuids[2]}", f"gpuslice.io/gpu=claim-{UID}-1"]]
    ts, mps = (d["containerEdits"] for d in devices(node))
    assert f"GPUSLICE_DRA_DEVICES={node.uuids[1]}" in ts["env"] and f"GPUSLICE_DRA_DEVICES_TS={node.uuids[1]}" in ts["env"]
    assert f"GPUSLICE_DRA_DEVICES={node.uuids[2]}" in mps["env"] and f"GPUSLICE_DRA_DEVICES_MPS={node.uuids[2]}" in mps["env"]
    ts_mounts = {m["containerPath"]: m["hostPath"] for m in ts["mounts"]}
    mps_mounts = {m["containerPath"] for m in mps["mounts"]}
    assert "/etc/gpuslice/guard.conf" in ts_mounts and "/mps/pipe" not in ts_mounts
    assert not any(v.startswith("CUDA_MPS_") for v in ts["env"])
    assert "/mps/pipe" in mps_mounts and "/etc/gpuslice/guard.conf" not in mps_mounts
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30" in mps["env"] and "GPUSLICE_GUARD_CONFIG" not in " ".join(mps["env"])
    # the guard's limits: the time-sliced request's GPU at ordinal 0 (the only GPU its container sees)
    with open(ts_mounts["/etc/gpuslice/guard.conf"]) as f:
        lines = [ln for ln in f.read().splitlines() if ln.startswith("device ")]
    assert lines == [f"device 0 {node.uuids[1]} {2 << 30} 50"], lines


def test_two_guarded_requests_each_get_their_own_limits(node):
    """Two time-sliced requests of one claim: each request's guard limits in a directory of its own
    (GUARD_ROOT/claim-<uid>/r<I>), its GPU at CUDA ordinal 0 with its own quota; both removed at
    unprepare."""
    node.write_claim(claim_json("ns1", "twots", UID,
                                [result("gpu-1", request="small", shareID="5f0e3c7a-0000-4000-8000-00000000000a",
                                        consumedCapacity={"memory": "1Gi", "compute": "10"}),
                                 result("gpu-1", request="big", shareID="5f0e3c7a-0000-4000-8000-00000000000b",
                                        consumedCapacity={"memory": "3Gi", "compute": "40"})]))
    c = start(node)
    r = c.prepare([claim("ns1", "twots", UID)])[UID]
    assert r.error == "", node.log()
    claim_dir = os.path.join(node.dir, "guard", "claim-" + UID)
    for i, (dev, gib, pct) in enumerate(zip(devices(node), (1, 3), (10, 40))):
        mounts = {m["containerPath"]: m["hostPath"] for m in dev["containerEdits"]["mounts"]}
        assert mounts["/etc/gpuslice/guard.conf"] == os.path.join(claim_dir, f"r{i}", "limits"), mounts
        assert mounts["/run/gpuslice/guard"] == os.path.join(claim_dir, f"r{i}", "state"), mounts
        with open(mounts["/etc/gpuslice/guard.conf"]) as f:
            lines = [ln for ln in f.read().splitlines() if ln.startswith("device ")]
        assert lines == [f"device 0 {node.uuids[1]} {gib << 30} {pct}"], lines
    assert c.unprepare([claim("ns1", "twots", UID)])[UID].error == ""
    assert not os.path.exists(claim_dir) and not os.path.exists(node.spec_path(UID))
    wait(lambda: f"DRA: unprepared ns1/twots ({UID})" in node.log(), 10, "the unprepare in the agent's log")
