"""Claims moved from NVIDIA's DRA driver (docs/user-guide.md, "Moving from NVIDIA's DRA driver"),
prepared as the kubelet calls it on examples/dra's node and policy (test_dra_share.py's): NVIDIA's
opaque GpuConfig (resource.nvidia.com/v1beta1) left under driver gpu.nvidia.com is another
driver's and ignored (the claim is prepared with the guard of its consumedCapacity); moved to
gpu.gpuslice.io as it is, it is the claim's error naming the apiVersion; gpuslice's apiVersion
with NVIDIA's mpsConfig or timeSlicingConfig is refused as an unknown field; gpuslice's
TimeSlicing strategy on a whole GPU passes. Claims come from files."""
import os

from dra_client import claim
from test_dra_plugin import claim_json, result, running
from test_dra_share import UID, edits, mps_node, start

import pytest

SHARED = result("gpu-1", consumedCapacity={"memory": "20Gi", "compute": "30"},
                shareID="5f0e3c7a-0000-4000-8000-000000000001")


def config(driver, api, sharing):
    return {"source": "FromClaim", "requests": ["gpu"],
            "opaque": {"driver": driver, "parameters": {"apiVersion": api, "kind": "GpuConfig", "sharing": sharing}}}


NVIDIA_TS = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}
NVIDIA_MPS = {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}}


@pytest.fixture
def node(request):
    yield from running(request, mps_node())


def test_nvidias_gpu_config(node):
    uids = [UID[:-1] + str(i) for i in range(5)]
    node.write_claim(claim_json("ns1", "nv-ignored", uids[0], [SHARED],
                                [config("gpu.nvidia.com", "resource.nvidia.com/v1beta1", NVIDIA_TS)]))
    node.write_claim(claim_json("ns1", "nv-moved", uids[1], [SHARED],
                                [config("gpu.gpuslice.io", "resource.nvidia.com/v1beta1", NVIDIA_TS)]))
    node.write_claim(claim_json("ns1", "nv-mps", uids[2], [SHARED],
                                [config("gpu.gpuslice.io", "gpuslice.io/v1alpha1", NVIDIA_MPS)]))
    node.write_claim(claim_json("ns1", "nv-ts", uids[3], [SHARED],
                                [config("gpu.gpuslice.io", "gpuslice.io/v1alpha1", NVIDIA_TS)]))
    node.write_claim(claim_json("ns1", "ts-whole", uids[4], [result("gpu-0")],
                                [config("gpu.gpuslice.io", "gpuslice.io/v1alpha1", {"strategy": "TimeSlicing"})]))
    c = start(node)
    names = ["nv-ignored", "nv-moved", "nv-mps", "nv-ts", "ts-whole"]
    r = c.prepare([claim("ns1", n, u) for n, u in zip(names, uids)])

    # another driver's config: not read; the claim has the guard of its consumedCapacity
    assert r[uids[0]].error == "", r[uids[0]]
    with open(os.path.join(node.dir, "guard", "claim-" + uids[0], "limits")) as f:
        assert f"device 0 {node.uuids[1]} {20 << 30} 30\n" in f.read()
    assert "GPUSLICE_GUARD_CONFIG=/etc/gpuslice/guard.conf" in edits(node, uids[0])["env"]
    # NVIDIA's config under gpuslice's driver: the apiVersion named; NVIDIA's fields under
    # gpuslice's apiVersion: unknown
    assert ("opaque config 0 for request gpu (gpuslice.io/v1alpha1 GpuConfig, from the claim): apiVersion: "
            "'resource.nvidia.com/v1beta1', not gpuslice.io/v1alpha1") in r[uids[1]].error, r[uids[1]]
    assert "sharing.mpsConfig: unknown field" in r[uids[2]].error, r[uids[2]]
    assert "sharing.timeSlicingConfig: unknown field" in r[uids[3]].error, r[uids[3]]
    assert not any(r[u].devices for u in uids[1:4])
    for u in uids[1:4]:
        assert not os.path.exists(node.spec_path(u))
    # gpuslice's TimeSlicing strategy on a whole GPU: a check that passes (the GPU stays whole)
    assert r[uids[4]].error == "", r[uids[4]]
    assert not os.path.exists(os.path.join(node.dir, "guard", "claim-" + uids[4]))
    assert all(c.unprepare([claim("ns1", n, u)])[u].error == "" for n, u in zip(names, uids))
