"""The DRA driver's kubelet side (src/dra/) in the agent on a simulated node, called as the
kubelet's plugin manager calls it (dra_client.py): registration, NodePrepareResources (batched,
per-claim errors, idempotent, checkpointed across an agent restart), NodeUnprepareResources (the
claim's transient CDI spec removed; unknown claims are no error). Claims come from files in the
shape `kubectl get resourceclaim -o json` prints (--dra-claims-dir).

Environment (set by meson): GPUSLICE, GPUSLICE_SIM_LIB, GS_SOURCE_ROOT."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

import grpc
import pytest

from dra_client import DraClient, claim

ROOT = os.environ.get("GS_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUSLICE = os.environ.get("GPUSLICE") or os.path.join(ROOT, "build", "gpuslice")
NODE = os.path.join(ROOT, "examples", "nodes", "t4x2.yaml")
DRIVER = "gpu.gpuslice.io"
UID_A = "0b7c0d4e-4f3a-4c1e-9d59-1b2f0c9e0a01"
UID_B = "0b7c0d4e-4f3a-4c1e-9d59-1b2f0c9e0a02"


def wait(pred, timeout, what):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def claim_json(ns, name, uid, results, config=()):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"namespace": ns, "name": name, "uid": uid},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.gpuslice.io"}}]}},
            "status": {"allocation": {"devices": {"results": list(results), "config": list(config)}}}}


def result(device, driver=DRIVER, request="gpu", pool="node-1", **extra):
    return dict({"request": request, "driver": driver, "pool": pool, "device": device}, **extra)


class Node:
    def __init__(self, node_file=NODE, extra=()):
        self.node_file, self.extra = node_file, list(extra)  # a node description, agent arguments
        self.driver = DRIVER  # the agent's --dra-driver (its registration socket's name)
        self.dir = tempfile.mkdtemp(prefix="gsdra.", dir="/tmp")  # short: socket paths
        self.kubelet = os.path.join(self.dir, "k")
        self.registry = os.path.join(self.kubelet, "plugins_registry")
        self.plugins = os.path.join(self.kubelet, "plugins")
        self.cdi = os.path.join(self.dir, "cdi")
        self.claims = os.path.join(self.dir, "claims")
        self.state = os.path.join(self.dir, "sim")
        for d in (os.path.join(self.kubelet, "device-plugins"), self.cdi, self.claims):
            os.makedirs(d)
        self.proc = None
        self.log_path = os.path.join(self.dir, "agent.log")
        self.uuids = [g["uuid"] for g in json.loads(self.gpuslice("inspect", "--json").stdout)["gpus"]]

    def gpuslice(self, *args):
        return subprocess.run([GPUSLICE, "--sim", self.node_file, "--sim-state", self.state, *args], capture_output=True,
                              text=True, timeout=60, check=True)

    def write_claim(self, obj):
        md = obj["metadata"]
        os.makedirs(os.path.join(self.claims, md["namespace"]), exist_ok=True)
        with open(os.path.join(self.claims, md["namespace"], md["name"] + ".json"), "w") as f:
            json.dump(obj, f)

    def start(self):
        extra = self.extra
        if "--config" not in extra:  # the GPUs the DRA driver serves: every one (prepare refuses the others)
            policy = os.path.join(self.dir, "policy.yaml")
            with open(policy, "w") as f:
                f.write("version: v1\ngpuslice:\n  dra:\n    gpus: all\n")
            extra = [*extra, "--config", policy]
        args = [GPUSLICE, "--sim", self.node_file, "--sim-state", self.state, "agent", *extra,
                "--kubelet-dir", os.path.join(self.kubelet, "device-plugins"),
                "--pod-resources-socket", os.path.join(self.kubelet, "pr.sock"),
                "--cdi-root", self.cdi, "--guard-root", os.path.join(self.dir, "guard"),
                "--mig-status-file", os.path.join(self.dir, "mig.json"), "--features-file", "",
                "--metrics-address", "", "--poll-interval-ms", "200",
                "--dra", "--kubelet-registry-dir", self.registry, "--kubelet-plugins-dir", self.plugins,
                "--dra-claims-dir", self.claims]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        self.reg_sock = os.path.join(self.registry, self.driver + "-reg.sock")
        wait(lambda: os.path.exists(self.reg_sock) or self.proc.poll() is not None, 60, "the registration socket")
        assert self.proc.poll() is None, self.log()
        self.client = DraClient(self.reg_sock)
        return self.client

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.client.close()
            self.proc.send_signal(signal.SIGTERM)
            assert self.proc.wait(60) == 0, self.log()
        self.proc = None

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def spec_path(self, uid):
        return os.path.join(self.cdi, f"gpuslice.io-gpu_claim-{uid}.json")


@pytest.fixture
def node(request):
    yield from running(request, Node())


def running(request, n):
    """A fixture's node: stopped after the test, its agent's log printed when the test failed."""
    assert os.access(GPUSLICE, os.X_OK), f"GPUSLICE={GPUSLICE}: not the built binary"
    yield n
    n.stop()
    if getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed:
        print(f"---- agent log ({n.log_path})\n{n.log()[-6000:]}")
    shutil.rmtree(n.dir, ignore_errors=True)



def test_registration(node):
    c = node.start()
    info = c.get_info()
    assert info.type == "DRAPlugin"
    assert info.name == DRIVER
    assert info.endpoint == os.path.join(node.plugins, DRIVER, "dra.sock")
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    c.notify(True)
    wait(lambda: "registered with the kubelet as gpu.gpuslice.io (registration 1)" in node.log(), 60,
         "the agent to log the registration")
    c.notify(False, "endpoint already registered")
    wait(lambda: "refused to register gpu.gpuslice.io: endpoint already registered" in node.log(), 60,
         "the agent to log the refusal")


def test_prepare_batch_per_claim_errors(node):
    node.write_claim(claim_json("ns1", "a", UID_A, [result("gpu-1", shareID="5f0e3c7a-0000-4000-8000-000000000001")]))
    node.write_claim(claim_json("ns1", "stale", "11111111-2222-3333-4444-555555555555", [result("gpu-0")]))
    node.write_claim(claim_json("ns1", "other", UID_B, [result("gpu-0", driver="gpu.nvidia.com")]))
    node.write_claim(claim_json("ns1", "nodev", "22222222-2222-3333-4444-555555555555", [result("gpu-9")]))
    c = node.start()
    c.get_info()
    batch = [claim("ns1", "a", UID_A), claim("ns1", "stale", "99999999-2222-3333-4444-555555555555"),
             claim("ns1", "other", UID_B), claim("ns1", "gone", "33333333-2222-3333-4444-555555555555"),
             claim("ns1", "nodev", "22222222-2222-3333-4444-555555555555"), claim("ns1", "bad", "../../etc")]
    r = c.prepare(batch)
    assert set(r) == {cl.uid for cl in batch}
    a = r[UID_A]
    assert a.error == ""
    assert len(a.devices) == 1
    d = a.devices[0]
    assert list(d.request_names) == ["gpu"] and d.pool_name == "node-1" and d.device_name == "gpu-1"
    assert d.share_id == "5f0e3c7a-0000-4000-8000-000000000001"
    assert list(d.cdi_device_ids) == [f"gpuslice.io/gpu={node.uuids[1]}", f"gpuslice.io/gpu=claim-{UID_A}-0"]
    assert "has UID 11111111" in r["99999999-2222-3333-4444-555555555555"].error
    assert "no device of gpu.gpuslice.io" in r[UID_B].error
    assert "not found" in r["33333333-2222-3333-4444-555555555555"].error
    assert "device gpu-9 (pool node-1) is not a device of this node" in r["22222222-2222-3333-4444-555555555555"].error
    assert "is not a UID" in r["../../etc"].error
    for cl in batch[1:]:
        assert not r[cl.uid].devices
    # the transient spec: one device per claim, what the container is told
    with open(node.spec_path(UID_A)) as f:
        spec = json.load(f)
    assert spec["kind"] == "gpuslice.io/gpu"
    assert [dv["name"] for dv in spec["devices"]] == [f"claim-{UID_A}-0"]
    env = spec["devices"][0]["containerEdits"]["env"]
    assert "GPUSLICE_DRA_CLAIM=ns1/a" in env and f"GPUSLICE_DRA_DEVICES={node.uuids[1]}" in env
    assert sorted(os.listdir(node.cdi)) == sorted(["gpuslice.json", os.path.basename(node.spec_path(UID_A))])


def test_prepare_idempotent_and_checkpointed(node):
    node.write_claim(claim_json("ns1", "a", UID_A, [result("gpu-0")]))
    c = node.start()
    c.get_info()
    first = c.prepare([claim("ns1", "a", UID_A)])[UID_A]
    assert first.error == "" and first.devices[0].device_name == "gpu-0"
    # the same answer again, from what was prepared (the claim file now says something else)
    node.write_claim(claim_json("ns1", "a", UID_A, [result("gpu-1")]))
    assert c.prepare([claim("ns1", "a", UID_A)])[UID_A] == first
    assert c.prepare([claim("ns1", "a", UID_A)], version="v1beta1")[UID_A] == first
    # an agent restart keeps it: the checkpoint, not the claim, answers
    node.stop()
    os.unlink(os.path.join(node.claims, "ns1", "a.json"))
    c = node.start()
    c.get_info()
    assert c.prepare([claim("ns1", "a", UID_A)])[UID_A] == first
    assert "1 prepared claim(s)" in node.log()
    # unprepare removes the spec and the checkpoint entry; again, and for an unknown claim, no error
    r = c.unprepare([claim("ns1", "a", UID_A), claim("ns1", "never", UID_B)])
    assert r[UID_A].error == "" and r[UID_B].error == ""
    assert not os.path.exists(node.spec_path(UID_A))
    assert c.unprepare([claim("ns1", "a", UID_A)], version="v1beta1")[UID_A].error == ""
    with open(os.path.join(node.plugins, DRIVER, "checkpoint.json")) as f:
        assert json.load(f)["claims"] == []
    # gone from the checkpoint: a prepare now reads the claim again (and its file is gone)
    assert "not found" in c.prepare([claim("ns1", "a", UID_A)])[UID_A].error


def test_prepare_spec_deleted_is_made_again(node):
    node.write_claim(claim_json("ns1", "a", UID_A, [result("gpu-0")]))
    c = node.start()
    c.get_info()
    first = c.prepare([claim("ns1", "a", UID_A)])[UID_A]
    os.unlink(node.spec_path(UID_A))
    assert c.prepare([claim("ns1", "a", UID_A)])[UID_A] == first
    assert os.path.exists(node.spec_path(UID_A))


def test_hostile_requests(node):
    c = node.start()
    c.get_info()
    # a NUL byte in a string field: refused whole, INVALID_ARGUMENT naming the field
    bad = claim("ns1", "a", "x").SerializeToString().replace(b"\x12\x01x", b"\x12\x03x\x00y")
    req = b"\x0a" + bytes([len(bad)]) + bad
    with pytest.raises(grpc.RpcError) as e:
        c.raw("NodePrepareResources", req)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "claims[0].uid" in e.value.details() and "NUL" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        c.raw("NodePrepareResources", b"\x0a\xff")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as e:
        c.raw("NodeWatchResources", b"")
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    # an empty batch is an empty answer, and the agent still serves
    assert c.prepare([]) == {}
    assert c.get_info().name == DRIVER


def test_dra_options_need_dra(node):
    p = subprocess.run([GPUSLICE, "--sim", NODE, "--sim-state", node.state, "agent", "--dra-driver", "x.io"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "need --dra" in p.stderr
