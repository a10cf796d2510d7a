"""`gpuslice doctor` on the simulated node: a good node passes (exit 0), and each injected fault
(no CDI in containerd's config, NVIDIA's plugin socket, a bad policy, no PodResources socket, a
stale kubelet.sock, a conflicting CDI spec, an MPS root that cannot be written) is found, named,
and comes with its fix (docs/doctor.md)."""
import json
import os
import socket
import subprocess

import pytest

GPUSLICE = os.environ.get("GPUSLICE", "build/gpuslice")
ROOT = os.environ.get("GS_SOURCE_ROOT", os.getcwd())
NODE = os.path.join(ROOT, "examples", "nodes", "t4x2.yaml")

CONTAINERD_ON = """version = 2
[plugins."io.containerd.grpc.v1.cri"]
  enable_cdi = true
  cdi_spec_dirs = ["{cdi}"]
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
"""

MPS_POLICY = """version: v1
flags:
  mpsRoot: {mps}
sharing:
  mps:
    resources:
      - name: nvidia.com/gpu
        replicas: 2
"""


class Node:
    """A simulated node with a kubelet directory whose sockets listen, a containerd config with
    CDI on, empty CDI directories and writable MPS and guard roots: everything the agent needs."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.kubelet = tmp / "kubelet"
        self.plugins = self.kubelet / "device-plugins"
        self.plugins.mkdir(parents=True)
        (self.kubelet / "plugins_registry").mkdir()
        (self.kubelet / "pod-resources").mkdir()
        self.cdi = tmp / "cdi"
        self.cdi.mkdir()
        self.containerd = tmp / "config.toml"
        self.containerd.write_text(CONTAINERD_ON.format(cdi=self.cdi))
        self.mps = tmp / "mps"
        self.policy = tmp / "policy.yaml"
        self.policy.write_text(MPS_POLICY.format(mps=self.mps))
        self.socks = []
        self.listen(self.plugins / "kubelet.sock")
        self.listen(self.kubelet / "pod-resources" / "kubelet.sock")

    def listen(self, path):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(path))
        s.listen(8)
        self.socks.append(s)
        return s

    def stale(self, path):
        """A socket file nobody listens on: bound, then closed without unlinking."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(path))
        s.close()

    def run(self, *extra, json_out=True, policy=None):
        args = [GPUSLICE, "--sim", NODE, "--sim-state", str(self.tmp / "state"), "doctor",
                "--config", str(policy or self.policy), "--kubelet-dir", str(self.plugins),
                "--pod-resources-socket", str(self.kubelet / "pod-resources" / "kubelet.sock"),
                "--cdi-root", str(self.cdi), "--containerd-config", str(self.containerd),
                "--crio-config", "", "--guard-root", str(self.tmp / "guard"),
                "--operator-dir", str(self.tmp / "no-operator"), *extra]
        if json_out:
            args.append("--json")
        proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
        return proc

    def findings(self, *extra, expect_rc, policy=None):
        proc = self.run(*extra, policy=policy)
        assert proc.returncode == expect_rc, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        doc = json.loads(proc.stdout)
        assert doc["schema"] == "gpuslice.doctor/v1"
        assert doc["ready"] == (expect_rc == 0)
        for f in doc["findings"]:
            assert set(f) == {"check", "status", "message", "fix"}
            assert f["status"] in ("ok", "warn", "fail")
            if f["status"] != "ok":
                assert f["fix"], f  # every problem comes with its fix
        return doc["findings"]

    def close(self):
        for s in self.socks:
            s.close()


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path)
    yield n
    n.close()


def only(findings, check):
    got = [f for f in findings if f["check"] == check]
    assert got, f"no {check} finding in {findings}"
    return got


def test_good_node_is_ready(node):
    findings = node.findings(expect_rc=0)
    assert not [f for f in findings if f["status"] == "fail"], findings
    by = {f["check"]: f for f in findings}
    assert by["nvml"]["status"] == "ok" and "2 GPUs" in by["nvml"]["message"]
    assert "580.65.06" in by["nvml"]["message"]
    assert by["devices"]["status"] == "ok"
    assert by["kubelet.socket"]["status"] == "ok"
    assert by["kubelet.podresources"]["status"] == "ok"
    assert by["cdi.runtime"]["status"] == "ok" and "enable_cdi = true" in by["cdi.runtime"]["message"]
    assert by["cdi.conflict"]["status"] == "ok"
    assert by["mps.root"]["status"] == "ok"
    assert by["plugin.competing"]["status"] == "ok"
    assert by["policy"]["status"] == "ok"
    # the text form: one line per finding and the verdict
    proc = node.run(json_out=False)
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[-1].startswith("node ready: 0 failed")


def test_no_cdi_in_containerd(node):
    node.containerd.write_text(CONTAINERD_ON.format(cdi=node.cdi).replace("enable_cdi = true", "enable_cdi = false"))
    f = only(node.findings(expect_rc=0), "cdi.runtime")[0]
    # the default deviceListStrategy (envvar) does not need CDI: a warning
    assert f["status"] == "warn" and "enable_cdi = false (line 3)" in f["message"]
    assert 'set enable_cdi = true under [plugins."io.containerd.grpc.v1.cri"]' in f["fix"]
    # a policy that answers with CDI names needs it: not ready
    cdi_policy = node.tmp / "cdi-policy.yaml"
    cdi_policy.write_text("version: v1\nflags:\n  plugin:\n    deviceListStrategy: cdi-cri\n")
    f = only(node.findings(expect_rc=1, policy=cdi_policy), "cdi.runtime")[0]
    assert f["status"] == "fail" and "answers with CDI names" in f["message"]
    # containerd 2.x's version 3 config without the key: on by default
    node.containerd.write_text("version = 3\n[plugins.'io.containerd.cri.v1.runtime']\n")
    f = only(node.findings(expect_rc=0, policy=cdi_policy), "cdi.runtime")[0]
    assert f["status"] == "ok" and "version 3 default" in f["message"]


def test_nvidia_plugin_socket(node):
    node.listen(node.plugins / "nvidia-gpu.sock")
    f = only(node.findings(expect_rc=1), "plugin.competing")[0]
    assert f["status"] == "fail" and "nvidia-gpu.sock (listening)" in f["message"]
    assert "devicePlugin.enabled=false" in f["fix"]
    share = node.tmp / "share-policy.yaml"
    share.write_text("version: v1\ngpuslice:\n  coexistence:\n    otherPlugin: share\n")
    f = only(node.findings(expect_rc=0, policy=share), "plugin.competing")[0]
    assert f["status"] == "warn" and "otherPlugin: share" in f["message"], f


def test_checkpoint_names_registered_resources(node):
    (node.plugins / "kubelet_internal_checkpoint").write_text(
        '{"Data":{"PodDeviceEntries":[],"RegisteredDevices":{"nvidia.com/gpu":["GPU-0","GPU-1"]}},"Checksum":1}')
    f = only(node.findings(expect_rc=0), "plugin.checkpoint")[0]
    assert f["status"] == "ok" and "1 resources (2 devices): nvidia.com/gpu" in f["message"]
    (node.plugins / "kubelet_internal_checkpoint").write_text('{"Data": [')
    f = only(node.findings(expect_rc=0), "plugin.checkpoint")[0]
    assert f["status"] == "warn" and "not JSON" in f["message"]


def test_bad_policy(node):
    bad = node.tmp / "bad.yaml"
    bad.write_text("version: v1\nsharing:\n  timeSlicing:\n    resources:\n      - name: nvidia.com/gpu\n        replicas: 1\n")
    f = only(node.findings(expect_rc=1, policy=bad), "policy")[0]
    assert f["status"] == "fail" and f"{bad}:6:" in f["message"] and "replicas" in f["message"]
    assert "docs/policy.md" in f["fix"]


def test_no_podresources_socket(node):
    node.socks.pop().close()
    os.unlink(node.kubelet / "pod-resources" / "kubelet.sock")
    f = only(node.findings(expect_rc=0), "kubelet.podresources")[0]
    assert f["status"] == "warn" and "does not exist" in f["message"]
    assert "--pod-resources-socket" in f["fix"]


def test_stale_kubelet_socket(node):
    node.socks.pop(0).close()  # the listening kubelet.sock goes; a stale one is left
    os.unlink(node.plugins / "kubelet.sock")
    node.stale(node.plugins / "kubelet.sock")
    f = only(node.findings(expect_rc=1), "kubelet.socket")[0]
    assert f["status"] == "fail" and "stale socket: nothing listens on it" in f["message"]
    assert "restart" in f["fix"]
    os.unlink(node.plugins / "kubelet.sock")
    f = only(node.findings(expect_rc=1), "kubelet.socket")[0]
    assert "does not exist" in f["message"]


def test_conflicting_cdi_spec(node):
    (node.cdi / "other.json").write_text(json.dumps({
        "cdiVersion": "0.5.0", "kind": "gpuslice.io/gpu",
        "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}]}))
    fs = only(node.findings(expect_rc=1), "cdi.conflict")
    assert fs[0]["status"] == "fail" and "other.json" in fs[0]["message"]
    assert "gpuslice.io/gpu=0" in fs[0]["message"]
    assert "--cdi-kind" in fs[0]["fix"]


def test_mps_root_not_writable(node):
    blocker = node.tmp / "afile"
    blocker.write_text("")
    node.policy.write_text(MPS_POLICY.format(mps=blocker / "mps"))
    f = only(node.findings(expect_rc=1), "mps.root")[0]
    assert f["status"] == "fail" and f"{blocker} is not a directory" in f["message"]
    assert "flags.mpsRoot" in f["fix"]


def test_no_kubelet_dir_and_termination_log(node, tmp_path):
    log = tmp_path / "termination-log"
    proc = node.run("--kubelet-dir", str(tmp_path / "nowhere"), "--termination-log", str(log), json_out=False)
    assert proc.returncode == 1
    assert "fail kubelet.dir:" in proc.stdout and "fix: pass the kubelet's device-plugins directory" in proc.stdout
    assert proc.stdout.splitlines()[-1].startswith("node NOT ready: 1 failed")
    text = log.read_text()
    assert text.startswith("fail kubelet.dir:") and len(text) <= 4096



def test_termination_log_at_a_fifo_or_link_is_refused(node, tmp_path):
    """A FIFO nobody reads at --termination-log used to hang the doctor in fopen for ever; it, a
    symbolic link and a device are refused by kind, at once, and the doctor exits 1."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    victim = tmp_path / "victim"
    victim.write_text("keep")
    link = tmp_path / "link"
    link.symlink_to(victim)
    for path, kind in ((fifo, "a FIFO"), (link, "a symbolic link (not followed)"),
                       ("/dev/null", "a character device")):
        proc = node.run("--termination-log", str(path), json_out=False)   # 60 s timeout: a hang fails
        assert proc.returncode == 1, proc.stderr
        assert f"gpuslice doctor: --termination-log {path}: {kind}, not a regular file" in proc.stderr, proc.stderr
        assert "node ready" in proc.stdout                               # the report itself was printed
    assert victim.read_text() == "keep"                                  # nothing written through the link


def test_usage_errors(node):
    assert node.run("--no-such-option", json_out=False).returncode == 2
    assert node.run("extra", json_out=False).returncode == 2
    assert node.run("--cdi-kind", "nokind", json_out=False).returncode == 2
