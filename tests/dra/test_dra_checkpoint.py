"""The DRA driver's checkpoint when someone else wrote it (src/dra/ckptfile.c, server.c): a
damaged one (truncated, garbage, empty, a UID twice, too many claims, a FIFO, a link) never stops
the agent: its device plugins register and serve, the file is set aside next to it (renamed,
byte for byte), named with the reason in the log and by `gpuslice doctor`, and the claims it held
are rebuilt from their ResourceClaims. A newer version's file is left byte for byte: the DRA
driver does not start, the device plugins serve. No path comes from the file: an entry's guard
directory outside the guard root is never removed.

The node is test_dra_plugin.py's (claims from --dra-claims-dir), with the kubelet emulator of
tests/integration on its device-plugins directory. Environment (set by meson): GPUSLICE,
GPUSLICE_SIM_LIB, GS_SOURCE_ROOT."""
import json
import os
import stat
import subprocess
import sys
import time

import pytest

import test_dra_plugin as base
from dra_client import DraClient, claim

for sub in ("integration", "kube", "lib"):
    sys.path.insert(0, os.path.join(base.ROOT, "tests", sub))
from emulator import Emulator, Handler, status  # noqa: E402
from kubeconfig import write_kubeconfig  # noqa: E402
from kubelet_emulator import KubeletEmulator  # noqa: E402
from test_kube_emulator import pki  # noqa: E402,F401 (pki: fixture)

UID_A, DRIVER = base.UID_A, base.DRIVER
POLICY = 'version: v1\ngpuslice:\n  dra:\n    gpus: ["1"]\n'  # GPU 0: the device plugin's; GPU 1: DRA's


class Node(base.Node):
    def __init__(self):
        super().__init__()
        policy = os.path.join(self.dir, "dra-policy.yaml")
        with open(policy, "w") as f:
            f.write(POLICY)
        self.extra = ["--config", policy, "--node-name", "node-1"]  # the pool of the claims' results
        self.kubelet_emu = KubeletEmulator(os.path.join(self.kubelet, "device-plugins")).start()
        self.ckpt = os.path.join(self.plugins, DRIVER, "checkpoint.json")
        self.guard = os.path.join(self.dir, "guard")

    def start_agent(self, dra=True, kubeconfig=None):
        """Starts the agent (claims from the files, or with kubeconfig from the API server); waits
        for the device plugin and, with dra, the DRA registration (a DraClient returned)."""
        source = ["--kubeconfig", kubeconfig] if kubeconfig else ["--dra-claims-dir", self.claims]
        args = [base.GPUSLICE, "--sim", self.node_file, "--sim-state", self.state, "agent", *self.extra,
                "--kubelet-dir", os.path.join(self.kubelet, "device-plugins"),
                "--pod-resources-socket", os.path.join(self.kubelet, "pr.sock"),
                "--cdi-root", self.cdi, "--guard-root", self.guard,
                "--mig-status-file", os.path.join(self.dir, "mig.json"), "--features-file", "",
                "--metrics-address", "", "--poll-interval-ms", "200",
                "--dra", "--kubelet-registry-dir", self.registry, "--kubelet-plugins-dir", self.plugins, *source]
        before = len(self.kubelet_emu.registrations)  # an earlier agent's registration is not this one's
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, f"the agent exited {self.proc.returncode}\n{self.log()}"
            try:
                regs = self.kubelet_emu.registrations
                # returned: the emulator's client is this agent's (until then the last agent's, closed
                # under a call made on it)
                if len(regs) <= before or regs[-1].returned_at is None:
                    raise AssertionError("not registered yet")
                self.kubelet_emu.wait_resources({"nvidia.com/gpu"}, timeout=0.5)
                break
            except Exception:
                time.sleep(0.05)
                assert time.monotonic() < deadline, f"no nvidia.com/gpu registration\n{self.log()}"
        if not dra:
            return None
        self.reg_sock = os.path.join(self.registry, DRIVER + "-reg.sock")
        base.wait(lambda: os.path.exists(self.reg_sock) or self.proc.poll() is not None, 60, "the registration socket")
        assert self.proc.poll() is None, self.log()
        self.client = DraClient(self.reg_sock)
        self.client.get_info()
        return self.client

    def stop(self):
        if self.proc and self.proc.poll() is None and not hasattr(self, "client"):
            self.proc.terminate()
            assert self.proc.wait(60) == 0, self.log()
            self.proc = None
        super().stop()
        if hasattr(self, "client"):
            del self.client

    def serves_gpu0(self):
        devs = self.kubelet_emu.devices("nvidia.com/gpu")
        assert [d.id for d in devs] == [self.uuids[0]], devs
        r = self.kubelet_emu.allocate("nvidia.com/gpu", [self.uuids[0]])
        assert r.envs["NVIDIA_VISIBLE_DEVICES"] == self.uuids[0], r

    def asides(self):
        d = os.path.dirname(self.ckpt)
        return sorted(os.path.join(d, n) for n in os.listdir(d) if n.startswith("checkpoint.json.damaged-"))

    def doctor(self):
        p = subprocess.run([base.GPUSLICE, "--sim", self.node_file, "--sim-state", self.state, "doctor", "-j",
                            "--kubelet-dir", os.path.join(self.kubelet, "device-plugins"), "--cdi-root", self.cdi,
                            "--guard-root", self.guard, "--dra", "--config", self.extra[1],
                            "--pod-resources-socket", os.path.join(self.kubelet, "pr.sock")],
                           capture_output=True, text=True, timeout=60)
        return [f for f in json.loads(p.stdout)["findings"] if f["check"] == "dra.checkpoint"]


@pytest.fixture
def node(request):
    n = Node()
    try:
        yield from base.running(request, n)
    finally:
        n.kubelet_emu.stop()


def entry(uid, **extra):
    return dict({"uid": uid, "namespace": "ns1", "name": "c-" + uid[:8], "devices": []}, **extra)


def many(n):
    return json.dumps({"version": 1, "claims": [entry(f"{i:08d}-0000-4000-8000-000000000000") for i in range(n)]})


FULL = json.dumps({"version": 1, "claims": [entry(UID_A)]}, indent=1)

DAMAGED = {
    "truncated": (FULL[: len(FULL) // 2].encode(), "checkpoint: line "),
    "garbage": (b"\x00\xffnot json at all", "checkpoint: line 1"),
    "empty": (b"", "checkpoint: line 1, column 0"),
    "duplicate": (json.dumps({"version": 1, "claims": [entry(UID_A), entry(UID_A)]}).encode(),
                  f"claims[1].uid: {UID_A} listed twice"),
    "too-many": (many(4097).encode(), "claims: 4097 claims, more than 4096"),
    "not-a-version": (b'{"version": "1", "claims": []}', "version: not 1"),
}


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_damaged_checkpoint_set_aside(node, case):
    text, why = DAMAGED[case]
    os.makedirs(os.path.dirname(node.ckpt))
    with open(node.ckpt, "wb") as f:
        f.write(text)
    c = node.start_agent()
    node.serves_gpu0()
    asides = node.asides()
    assert len(asides) == 1, asides
    with open(asides[0], "rb") as f:
        assert f.read() == text  # renamed, never rewritten
    line = [ln for ln in node.log().splitlines() if "damaged checkpoint" in ln and "set aside as" in ln]
    assert line and node.ckpt in line[0] and why in line[0] and asides[0] in line[0], node.log()
    # the driver serves, empty
    node.write_claim(base.claim_json("ns1", "a", UID_A, [base.result("gpu-1")]))
    assert c.prepare([claim("ns1", "a", UID_A)])[UID_A].error == ""
    with open(node.ckpt) as f:
        assert [e["uid"] for e in json.load(f)["claims"]] == [UID_A]
    found = node.doctor()
    warn = [f for f in found if f["status"] == "warn" and asides[0] in f["message"]]
    assert warn and why in warn[0]["message"], found


def test_fifo_checkpoint_set_aside(node):
    os.makedirs(os.path.dirname(node.ckpt))
    os.mkfifo(node.ckpt)  # an open for reading would wait for a writer for ever
    node.start_agent()
    node.serves_gpu0()
    asides = node.asides()
    assert len(asides) == 1 and stat.S_ISFIFO(os.lstat(asides[0]).st_mode), asides
    assert "a FIFO, not a regular file" in node.log()
    assert any("a FIFO" in f["message"] for f in node.doctor())


def test_link_checkpoint_not_followed(node):
    os.makedirs(os.path.dirname(node.ckpt))
    target = os.path.join(node.dir, "elsewhere.json")
    with open(target, "w") as f:
        f.write('{"version": 1, "claims": []}')
    os.symlink(target, node.ckpt)
    node.start_agent()
    node.serves_gpu0()
    assert "symbolic link (not followed)" in node.log()
    assert os.path.islink(node.asides()[0])
    with open(target) as f:
        assert f.read() == '{"version": 1, "claims": []}'


def test_truncated_checkpoint_rebuilt_from_claims(node):
    """The claims a truncated checkpoint held come back from their ResourceClaims (their CDI
    specs are still there); the kubelet gets the same answer as before."""
    node.write_claim(base.claim_json("ns1", "a", UID_A, [base.result("gpu-1")]))
    c = node.start_agent()
    first = c.prepare([claim("ns1", "a", UID_A)])[UID_A]
    assert first.error == ""
    node.stop()
    with open(node.ckpt, "rb") as f:
        text = f.read()
    with open(node.ckpt, "wb") as f:
        f.write(text[: len(text) // 2])
    c = node.start_agent()
    node.serves_gpu0()
    assert c.prepare([claim("ns1", "a", UID_A)])[UID_A] == first
    log = node.log()
    assert "rebuilt from its ResourceClaim" in log and "1 claim(s) rebuilt" in log, log
    with open(node.ckpt) as f:
        assert [e["uid"] for e in json.load(f)["claims"]] == [UID_A]
    assert c.unprepare([claim("ns1", "a", UID_A)])[UID_A].error == ""
    assert not os.path.exists(node.spec_path(UID_A))


def test_newer_version_left_alone(node):
    os.makedirs(os.path.dirname(node.ckpt))
    text = b'{"version": 2, "claims": [{"uid": "x", "future": true}]}\n'
    with open(node.ckpt, "wb") as f:
        f.write(text)
    node.start_agent(dra=False)
    node.serves_gpu0()
    base.wait(lambda: "the DRA driver does not start" in node.log(), 30, "the refusal in the log")
    assert "version: 2, newer than this agent's 1" in node.log()
    assert not os.path.exists(os.path.join(node.registry, DRIVER + "-reg.sock"))
    time.sleep(0.5)
    assert node.proc.poll() is None
    with open(node.ckpt, "rb") as f:
        assert f.read() == text
    assert node.asides() == []
    found = node.doctor()
    assert any(f["status"] == "fail" and "newer than this agent's" in f["message"] for f in found), found


def test_guard_path_from_checkpoint_never_used(node):
    """An entry naming a guard directory outside the guard root: unprepare removes the claim's own
    directory (GUARD_ROOT/claim-<uid>), never the one named."""
    outside = os.path.join(node.dir, "precious")
    os.makedirs(os.path.join(outside, "sub"))
    with open(os.path.join(outside, "sub", "keep"), "w") as f:
        f.write("keep")
    own = os.path.join(node.guard, "claim-" + UID_A)
    os.makedirs(os.path.join(own, "state"))
    os.makedirs(os.path.dirname(node.ckpt))
    dev = {"request": "gpu", "pool": "node-1", "device": "gpu-1",
           "cdi": [f"gpuslice.io/gpu={node.uuids[1]}", f"gpuslice.io/gpu=claim-{UID_A}"]}
    with open(node.ckpt, "w") as f:
        json.dump({"version": 1, "claims": [entry(UID_A, guard=outside, devices=[dev])]}, f)
    c = node.start_agent()
    assert c.unprepare([claim("ns1", "a", UID_A)])[UID_A].error == ""
    assert os.path.exists(os.path.join(outside, "sub", "keep"))
    assert not os.path.exists(own)
    with open(node.ckpt) as f:
        assert json.load(f)["claims"] == []
    assert node.asides() == []


class ClaimsHandler(Handler):
    """The API server's ResourceClaims (server.claims, a list of objects): each one, and all of
    them listed; no ResourceSlice (the publisher's creates answered as made); 404 for the rest."""

    def do_GET(self):
        srv = self.server
        path, _, query = self.path.partition("?")
        srv.requests.append(path)
        if path == "/apis/resource.k8s.io/v1/resourceslices" and "watch" not in query:
            return self.send_json(200, {"kind": "ResourceSliceList", "apiVersion": "resource.k8s.io/v1",
                                        "metadata": {"resourceVersion": "1"}, "items": []})
        if path == "/apis/resource.k8s.io/v1/resourceclaims":
            srv.lists += 1
            return self.send_json(200, {"kind": "ResourceClaimList", "apiVersion": "resource.k8s.io/v1",
                                        "metadata": {"resourceVersion": "7"}, "items": srv.claims})
        for c in srv.claims:
            md = c["metadata"]
            if path == f"/apis/resource.k8s.io/v1/namespaces/{md['namespace']}/resourceclaims/{md['name']}":
                return self.send_json(200, c)
        return self.send_json(404, status(404, "NotFound", "not here"))

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if self.path.partition("?")[0] == "/apis/resource.k8s.io/v1/resourceslices":
            body.setdefault("metadata", {})["resourceVersion"] = "2"
            return self.send_json(201, body)
        return self.send_json(404, status(404, "NotFound", "not here"))


@pytest.fixture
def api(pki, tmp_path):
    e = Emulator(pki, ClaimsHandler)
    e.httpd.claims = []
    e.kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{e.port}", os.path.join(pki, "ca.crt"),
                                    "{token: new-token}", None, cluster="emu", context="emu")
    yield e
    e.close()


def test_garbage_checkpoint_rebuilt_from_the_api_server(node, api):
    """The claims prepared here come back from the API server's ResourceClaims listed once (those
    of another node's pool and those whose spec is gone are not rebuilt)."""
    uid_b, uid_c = UID_A[:-1] + "2", UID_A[:-1] + "3"
    api.httpd.claims = [base.claim_json("ns1", "a", UID_A, [base.result("gpu-1")]),
                        base.claim_json("ns2", "other-node", uid_b, [base.result("gpu-1", pool="node-2")]),
                        base.claim_json("ns2", "unprepared", uid_c, [base.result("gpu-1")])]
    c = node.start_agent(kubeconfig=api.kubeconfig)
    first = c.prepare([claim("ns1", "a", UID_A)])[UID_A]
    assert first.error == "", node.log()
    node.stop()
    with open(node.ckpt, "wb") as f:
        f.write(b"\x00garbage")
    c = node.start_agent(kubeconfig=api.kubeconfig)
    node.serves_gpu0()
    assert c.prepare([claim("ns1", "a", UID_A)])[UID_A] == first
    assert api.httpd.lists == 1
    log = node.log()
    assert f"ns1/a ({UID_A}) rebuilt from its ResourceClaim" in log, log
    assert "1 claim(s) rebuilt" in log and "0 not" in log, log
    with open(node.ckpt) as f:
        assert [e["uid"] for e in json.load(f)["claims"]] == [UID_A]
    assert not os.path.exists(node.spec_path(uid_b)) and not os.path.exists(node.spec_path(uid_c))


def test_newer_version_deletes_the_slices(node, api):
    """With the DRA driver refused, the node's ResourceSlices of the driver go (no claim can be
    prepared here); the device plugins serve."""
    os.makedirs(os.path.dirname(node.ckpt))
    with open(node.ckpt, "w") as f:
        f.write('{"version": 3, "claims": []}')
    node.start_agent(dra=False, kubeconfig=api.kubeconfig)
    node.serves_gpu0()
    base.wait(lambda: "no ResourceSlice of driver gpu.gpuslice.io is left for node node-1" in node.log(), 30,
              "the slices deleted")
    assert "deleting the ResourceSlices of driver gpu.gpuslice.io for node node-1" in node.log()
    with open(node.ckpt) as f:
        assert f.read() == '{"version": 3, "claims": []}'
