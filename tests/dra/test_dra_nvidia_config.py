"""Claims moved from NVIDIA's DRA driver (docs/user-guide.md, "Moving from NVIDIA's DRA driver";
docs/dra.md, "NVIDIA's opaque configs"), prepared as the kubelet calls it on examples/dra's node
and policy (test_dra_share.py's: GPU 0 whole, 1 time-sliced, 2 MPS, 3 MIG). NVIDIA's opaque
GpuConfig (resource.nvidia.com/v1beta1) under gpuslice's driver is read and translated: TimeSlicing
(interval Default) on the time-sliced GPU gets the guard of its consumedCapacity, MPS on the MPS GPU
its thread percentage and pinned memory limit (the tighter of the config's and the claim's); an
interval gpuslice cannot honour (Long), MPS on a GPU not in MPS mode, an unknown field: the claim's
error naming the field. Left under driver gpu.nvidia.com for a request gpuslice's driver serves, no
driver would read the config: the claim's error too. gpuslice's apiVersion with NVIDIA's fields is
still refused as an unknown field. Under NVIDIA's driver name (the chart's dra.nvidiaCompat: the
agent's --dra-driver gpu.nvidia.com) NVIDIA's claims and configs are read as they are, and a
config left under gpuslice's name is the one no driver reads. Claims come from files."""
import os

from dra_client import claim
from test_dra_plugin import claim_json, result, running, wait
from test_dra_share import UID, edits, mps_node, start

import pytest

SHARED = result("gpu-1", consumedCapacity={"memory": "20Gi", "compute": "30"},
                shareID="5f0e3c7a-0000-4000-8000-000000000001")
MPS = result("gpu-2", consumedCapacity={"memory": "10Gi", "compute": "40", "clients": "1"},
             shareID="5f0e3c7a-0000-4000-8000-000000000002")
NV_API = "resource.nvidia.com/v1beta1"


def config(driver, api, sharing, kind="GpuConfig"):
    return {"source": "FromClaim", "requests": ["gpu"],
            "opaque": {"driver": driver, "parameters": {"apiVersion": api, "kind": kind, "sharing": sharing}}}


NVIDIA_TS = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}}
NVIDIA_TS_LONG = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}
NVIDIA_MPS = {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 25,
                                               "defaultPinnedDeviceMemoryLimit": "4Gi"}}


def prepare_mps(node, c, name, uid):
    """An MPS claim prepared once the agent sees its GPU's daemon (its view follows the start): the
    container's environment."""
    def prepared():
        got = c.prepare([claim("ns1", name, uid)])[uid]
        return got if got.error == "" else None
    wait(prepared, 60, f"MPS claim {name} prepared")
    return edits(node, uid)["env"]


@pytest.fixture
def node(request):
    yield from running(request, mps_node())


def test_nvidias_gpu_config(node):
    cases = {
        "nv-other-driver": ([SHARED], config("gpu.nvidia.com", NV_API, NVIDIA_TS)),
        "nv-ts": ([SHARED], config("gpu.gpuslice.io", NV_API, NVIDIA_TS)),
        "nv-ts-long": ([SHARED], config("gpu.gpuslice.io", NV_API, NVIDIA_TS_LONG)),
        "nv-mps-on-ts": ([SHARED], config("gpu.gpuslice.io", NV_API, NVIDIA_MPS)),
        "nv-unknown": ([SHARED], config("gpu.gpuslice.io", NV_API, {"strategy": "MPS", "mpsConfig": {"maxClients": 2}})),
        "gs-nvfields": ([SHARED], config("gpu.gpuslice.io", "gpuslice.io/v1alpha1", NVIDIA_TS)),
        "nv-whole": ([result("gpu-0")], config("gpu.gpuslice.io", NV_API, {"strategy": "TimeSlicing"})),
        "nv-mig-on-gpu": ([result("gpu-0")], config("gpu.gpuslice.io", NV_API, {"strategy": "TimeSlicing"},
                                                    kind="MigDeviceConfig")),
    }
    uids = {n: UID[:-2] + "%02d" % i for i, n in enumerate(cases)}
    for n, (results, cfg) in cases.items():
        node.write_claim(claim_json("ns1", n, uids[n], results, [cfg]))
    c = start(node)
    r = c.prepare([claim("ns1", n, u) for n, u in uids.items()])
    err = {n: r[u].error for n, u in uids.items()}

    # translated: TimeSlicing (Default) gets the guard of the claim's consumedCapacity
    assert err["nv-ts"] == "", err["nv-ts"]
    with open(os.path.join(node.dir, "guard", "claim-" + uids["nv-ts"], "limits")) as f:
        assert f"device 0 {node.uuids[1]} {20 << 30} 30\n" in f.read()
    assert "GPUSLICE_GUARD_CONFIG=/etc/gpuslice/guard.conf" in edits(node, uids["nv-ts"])["env"]
    # on a whole GPU: a check that passes, the GPU stays whole
    assert err["nv-whole"] == "", err["nv-whole"]
    assert not os.path.exists(os.path.join(node.dir, "guard", "claim-" + uids["nv-whole"]))

    # another driver's config for a request only gpuslice's driver serves: nobody would read it
    assert ("status.allocation.devices.config[0]: opaque.driver 'gpu.nvidia.com', but its requests are served by "
            "gpu.gpuslice.io") in err["nv-other-driver"], err["nv-other-driver"]
    assert ("opaque config 0 for request gpu (resource.nvidia.com/v1beta1 GpuConfig, from the claim): "
            "sharing.timeSlicingConfig.interval: Long: gpuslice leaves the GPU's hardware time slice") \
        in err["nv-ts-long"], err["nv-ts-long"]
    assert "asks sharing.strategy MPS, but device gpu-1 is TimeSlicing" in err["nv-mps-on-ts"], err["nv-mps-on-ts"]
    assert "sharing.mpsConfig.maxClients: unknown field" in err["nv-unknown"], err["nv-unknown"]
    assert "sharing.timeSlicingConfig: unknown field" in err["gs-nvfields"], err["gs-nvfields"]
    assert "device gpu-0 is a GPU, but its config is a MigDeviceConfig" in err["nv-mig-on-gpu"], err["nv-mig-on-gpu"]
    refused = ["nv-other-driver", "nv-ts-long", "nv-mps-on-ts", "nv-unknown", "gs-nvfields", "nv-mig-on-gpu"]
    for n in refused:
        assert not r[uids[n]].devices, n
        assert not os.path.exists(node.spec_path(uids[n])), n
    assert all(c.unprepare([claim("ns1", n, u)])[u].error == "" for n, u in uids.items())


def test_nvidias_mps_config_sets_the_clients_limits(node):
    uid = UID[:-1] + "9"
    node.write_claim(claim_json("ns1", "nv-mps", uid, [MPS], [config("gpu.gpuslice.io", NV_API, NVIDIA_MPS)]))
    c = start(node)
    pid_file = os.path.join(node.dir, "mps", node.uuids[2], "pipe", "nvidia-cuda-mps-control.pid")
    wait(lambda: os.path.exists(pid_file), 60, f"the MPS daemon of DRA's GPU 2 ({pid_file})")
    env = prepare_mps(node, c, "nv-mps", uid)
    # the tighter of the config's (25 %, 4Gi) and the claim's consumedCapacity (40, 10Gi)
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in env, env
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M" in env, env
    assert "CUDA_MPS_PIPE_DIRECTORY=/mps/pipe" in env, env
    assert c.unprepare([claim("ns1", "nv-mps", uid)])[uid].error == ""


NV_DRIVER = "gpu.nvidia.com"


@pytest.fixture
def compat_node(request):
    n = mps_node()
    n.driver = NV_DRIVER
    n.extra += ["--dra-driver", NV_DRIVER]
    yield from running(request, n)


def test_nvidia_compatible_driver_name(compat_node):
    node = compat_node
    whole, mps, stale = (UID[:-1] + d for d in "678")
    # NVIDIA's quickstart: a whole GPU of class gpu.nvidia.com with a TimeSlicing GpuConfig, and the
    # MPS claim of gpu-test-mps.yaml (50 %, 10Gi) on the MPS GPU
    node.write_claim(claim_json("ns1", "whole", whole, [result("gpu-0", driver=NV_DRIVER)],
                                [config(NV_DRIVER, NV_API, {"strategy": "TimeSlicing"})]))
    quickstart = {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50,
                                                   "defaultPinnedDeviceMemoryLimit": "10Gi"}}
    node.write_claim(claim_json("ns1", "mps", mps, [result("gpu-2", driver=NV_DRIVER, consumedCapacity={
        "memory": "20Gi", "compute": "100", "clients": "1"})], [config(NV_DRIVER, NV_API, quickstart)]))
    node.write_claim(claim_json("ns1", "stale", stale, [result("gpu-0", driver=NV_DRIVER)],
                                [config("gpu.gpuslice.io", "gpuslice.io/v1alpha1", {"strategy": "TimeSlicing"})]))
    c = start(node)
    assert c.get_info().name == NV_DRIVER
    r = c.prepare([claim("ns1", "whole", whole), claim("ns1", "stale", stale)])
    assert r[whole].error == "", r[whole]
    assert not os.path.exists(os.path.join(node.dir, "guard", "claim-" + whole))
    assert ("opaque.driver 'gpu.gpuslice.io', but its requests are served by gpu.nvidia.com") in r[stale].error, r[stale]
    assert not r[stale].devices
    env = prepare_mps(node, c, "mps", mps)
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50" in env, env
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=10240M" in env, env
    assert all(c.unprepare([claim("ns1", n, u)])[u].error == "" for n, u in (("whole", whole), ("mps", mps)))
