"""Prepare's enforcement in the DRA driver (src/dra/share.c, migdemand.c) on the simulated node of
examples/dra (whole GPU 0, time-sliced GPU 1, MPS GPU 2, MIG GPUs 3 and 4) with its policy, called
as the kubelet calls it: a time-sliced claim gets the guard with its consumedCapacity as quota and
compute share, a GpuConfig asking the wrong mode an error (MPS claims: test_dra_mps.py); a MIG placement is created at prepare, destroyed at unprepare, and a kill of the
agent between the steps converges when it is started again. Claims come from files.

Environment (set by meson): GPUSLICE, GPUSLICE_SIM_LIB, GS_SOURCE_ROOT, FAKE_MPS_CONTROL."""
import json
import os

import grpc
import pytest

from dra_client import claim
from test_dra_plugin import DRIVER, ROOT, Node, claim_json, result, running, wait

DRA_NODE = os.path.join(ROOT, "examples", "dra", "node.yaml")
POLICY = os.path.join(ROOT, "examples", "dra", "policy.yaml")
UID = "7a1c0d4e-4f3a-4c1e-9d59-1b2f0c9e0a01"
MIG_DEV = "gpu-3-mig-3g40gb-9-4"  # 3g.40gb (GI profile 9) at memory slice 4 of GPU 3


FAKE = os.environ.get("FAKE_MPS_CONTROL") or os.path.join(ROOT, "build", "tests", "mps", "fake_mps_control")


def dra_policy(directory):
    """POLICY with its MPS root in directory (the agent runs GPU 2's daemon there, nothing in the
    host's /run)."""
    with open(POLICY) as f:
        text = f.read()
    assert "flags:\n" in text
    path = os.path.join(directory, "policy.yaml")
    with open(path, "w") as f:
        f.write(text.replace("flags:\n", f"flags:\n  mpsRoot: {os.path.join(directory, 'mps')}\n", 1))
    return path


def mps_node(control=FAKE):
    n = Node(DRA_NODE)
    n.extra = ["--config", dra_policy(n.dir), "--mps-control", control]
    return n


@pytest.fixture
def node(request):
    yield from running(request, mps_node())


def start(node):
    c = node.start()

    def info():  # as the kubelet: the DRA socket is named in the answer (the socket may not listen yet)
        try:
            return c.get_info()
        except grpc.RpcError:
            return None
    wait(info, 60, "GetInfo on the registration socket")
    return c


def edits(node, uid=UID):
    with open(node.spec_path(uid)) as f:
        return json.load(f)["devices"][0]["containerEdits"]


def gpu_config(strategy):
    return {"source": "FromClaim", "requests": ["gpu"],
            "opaque": {"driver": "gpu.gpuslice.io",
                       "parameters": {"apiVersion": "gpuslice.io/v1alpha1", "kind": "GpuConfig",
                                      "sharing": {"strategy": strategy}}}}


def gis(node, gpu=3):
    inv = json.loads(node.gpuslice("inspect", "--json").stdout)
    return [(g["profile_id"], g["placement"]["start"]) for g in inv["gpus"][gpu]["mig"]["gpu_instances"]], \
        inv["gpus"][gpu]["mig"]["devices"]


def test_time_sliced_claim_gets_the_guard(node):
    node.write_claim(claim_json("ns1", "ts", UID, [result("gpu-1", consumedCapacity={"memory": "20Gi", "compute": "30"},
                                                          shareID="5f0e3c7a-0000-4000-8000-000000000001")]))
    c = start(node)
    r = c.prepare([claim("ns1", "ts", UID)])[UID]
    assert r.error == "", node.log()
    e = edits(node)
    mounts = {m["containerPath"]: m["hostPath"] for m in e["mounts"]}
    guard_dir = os.path.join(node.dir, "guard", "claim-" + UID)
    assert mounts["/etc/gpuslice/guard.conf"] == os.path.join(guard_dir, "limits")
    assert mounts["/run/gpuslice/guard"] == os.path.join(guard_dir, "state")
    assert mounts["/etc/ld.so.preload"] == os.path.join(node.dir, "guard", "ld.so.preload")
    assert "/usr/lib/gpuslice/libgpuslice-guard.so" in mounts
    assert "GPUSLICE_GUARD_CONFIG=/etc/gpuslice/guard.conf" in e["env"]
    with open(os.path.join(guard_dir, "limits")) as f:
        limits = f.read()
    assert f"device 0 {node.uuids[1]} {20 << 30} 30\n" in limits, limits
    # the same answer again; unprepare removes the guard's files with the spec
    assert c.prepare([claim("ns1", "ts", UID)])[UID].error == ""
    assert c.unprepare([claim("ns1", "ts", UID)])[UID].error == ""
    assert not os.path.exists(guard_dir) and not os.path.exists(node.spec_path(UID))


def test_wrong_or_malformed_config_is_the_claims_error(node):
    uid_b = UID[:-1] + "2"
    uid_c = UID[:-1] + "3"
    node.write_claim(claim_json("ns1", "mps-of-ts", UID, [result("gpu-1", consumedCapacity={"memory": "1Gi"})],
                                [gpu_config("MPS")]))
    bad = gpu_config("Fast")
    node.write_claim(claim_json("ns1", "bad", uid_b, [result("gpu-1", consumedCapacity={"memory": "1Gi"})], [bad]))
    node.write_claim(claim_json("ns1", "nomem", uid_c, [result("gpu-1")]))
    c = start(node)
    r = c.prepare([claim("ns1", "mps-of-ts", UID), claim("ns1", "bad", uid_b), claim("ns1", "nomem", uid_c)])
    assert "asks sharing.strategy MPS, but device gpu-1 is TimeSlicing" in r[UID].error
    assert "sharing.strategy: 'Fast' is not TimeSlicing or MPS" in r[uid_b].error
    assert "no consumedCapacity.memory" in r[uid_c].error
    assert all(not r[u].devices for u in r)
    assert sorted(os.listdir(node.cdi)) == ["gpuslice.json"]


def test_mig_on_demand_created_and_destroyed(node):
    node.write_claim(claim_json("ns1", "mig", UID, [result(MIG_DEV)]))
    c = start(node)
    assert gis(node)[0] == []
    r = c.prepare([claim("ns1", "mig", UID)])[UID]
    assert r.error == "", node.log()
    made, devs = gis(node)
    assert made == [(9, 4)]
    assert len(devs) == 1
    uuid = devs[0]["uuid"]
    e = edits(node)
    assert f"GPUSLICE_DRA_DEVICES={uuid}" in e["env"]
    assert [n["path"] for n in e["deviceNodes"]][0] == "/dev/nvidia3"
    assert len(e["deviceNodes"]) == 3 and all(n["path"].startswith("/dev/nvidia-caps/") for n in e["deviceNodes"][1:])
    assert list(r.devices[0].cdi_device_ids) == [f"gpuslice.io/gpu={node.uuids[3]}", f"gpuslice.io/gpu=claim-{UID}-0"]
    assert c.prepare([claim("ns1", "mig", UID)])[UID].error == ""  # idempotent: nothing more made
    assert gis(node)[0] == [(9, 4)]
    assert c.unprepare([claim("ns1", "mig", UID)])[UID].error == ""
    assert gis(node)[0] == []


def test_mig_instance_there_before_is_not_destroyed(node):
    node.gpuslice("mig", "apply", "-c", "all-3g.40gb")  # a layout's instances: at 0 and at 4
    before = gis(node)
    assert (9, 4) in before[0]
    node.write_claim(claim_json("ns1", "mig", UID, [result(MIG_DEV)]))
    c = start(node)
    assert c.prepare([claim("ns1", "mig", UID)])[UID].error == ""
    assert c.unprepare([claim("ns1", "mig", UID)])[UID].error == ""
    assert gis(node) == before


@pytest.mark.parametrize("steps", [1, 2, 3, 4])
def test_mig_kill_between_steps_converges(node, monkeypatch, steps):
    """Steps: 1 the intent recorded, 2 the GI made, 3 recorded, 4 the CI made (5 recorded). The
    agent killed after any of them rolls the claim back when it starts again."""
    node.write_claim(claim_json("ns1", "mig", UID, [result(MIG_DEV)]))
    monkeypatch.setenv("GPUSLICE_DRA_FAULT_EXIT_AFTER_STEPS", str(steps))
    c = start(node)
    with pytest.raises(Exception):
        c.prepare([claim("ns1", "mig", UID)])
    wait(lambda: node.proc.poll() is not None, 30, "the agent to exit")
    assert node.proc.returncode == 99, node.log()
    node.client.close()
    node.proc = None
    monkeypatch.delenv("GPUSLICE_DRA_FAULT_EXIT_AFTER_STEPS")
    c = start(node)
    # started, never completed: rolled back at the start (what it made destroyed, the entry gone)
    assert f"the prepare of ns1/mig ({UID}) started but did not complete before the agent stopped: rolled back" \
        in node.log(), node.log()
    assert gis(node)[0] == []
    with open(os.path.join(node.plugins, DRIVER, "checkpoint.json")) as f:
        assert json.load(f)["claims"] == []
    r = c.prepare([claim("ns1", "mig", UID)])[UID]  # the kubelet's retry prepares it again
    assert r.error == "", node.log()
    made, devs = gis(node)
    assert made == [(9, 4)] and len(devs) == 1
    assert c.unprepare([claim("ns1", "mig", UID)])[UID].error == ""
    assert gis(node)[0] == []


def test_mig_claim_lost_with_the_checkpoint_is_refused_at_unprepare(node):
    """A damaged checkpoint set aside, a MIG claim not rebuilt (its ResourceClaim gone): its
    unprepare is refused naming the set-aside file, since the instance it holds is not known;
    nothing is destroyed. Its ResourceClaim back: still refused (it names a MIG device)."""
    node.write_claim(claim_json("ns1", "mig", UID, [result(MIG_DEV)]))
    c = start(node)
    assert c.prepare([claim("ns1", "mig", UID)])[UID].error == ""
    node.stop()
    ckpt = os.path.join(node.plugins, DRIVER, "checkpoint.json")
    with open(ckpt, "w") as f:
        f.write('{"version": 1, "claims": [')
    os.unlink(os.path.join(node.claims, "ns1", "mig.json"))
    c = start(node)
    err = c.unprepare([claim("ns1", "mig", UID)])[UID].error
    aside = [n for n in os.listdir(os.path.dirname(ckpt)) if n.startswith("checkpoint.json.damaged-")]
    assert len(aside) == 1 and aside[0] in err and "MIG instances it may hold are not known" in err, err
    assert "its ResourceClaim: ResourceClaim ns1/mig not found" in err, err
    assert gis(node)[0] == [(9, 4)] and os.path.exists(node.spec_path(UID))
    node.write_claim(claim_json("ns1", "mig", UID, [result(MIG_DEV)]))
    err = c.unprepare([claim("ns1", "mig", UID)])[UID].error
    assert "it names MIG devices" in err, err
    assert gis(node)[0] == [(9, 4)]
