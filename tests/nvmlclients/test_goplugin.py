"""NVIDIA's device plugin's NVML paths on the simulated node, walked by NVIDIA's own libraries:
goplugin/ (built by build.sh on github.com/NVIDIA/go-nvml and go-nvlib; the plugin's own module is
not served by the Go module proxy) run against the simulator through the simulated node's driver
root (LD_LIBRARY_PATH = its lib directory, where libnvidia-ml.so.1 is the simulator), checked
against `gpuslice inspect --json`: whole GPUs, MIG devices with their capability device paths
(the plugin's GetPaths from mig-minors), NVLink on SXM boards and none on PCIe ones, the PCIe
topology, and an Xid through an event set. Before the simulator had them, the first
nvmlDeviceGetTopologyCommonAncestor ended the program (exit 127, undefined symbol). No skip when
go is missing: build.sh fails, and so does the test.

Environment (set by meson): GPUSLICE, GPUSLICE_SIM_LIB, GS_SOURCE_ROOT."""
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time

import pytest

ROOT = os.environ.get("GS_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUSLICE = os.environ.get("GPUSLICE") or os.path.join(ROOT, "build", "gpuslice")
HERE = os.path.dirname(os.path.abspath(__file__))
NVLINKS = {"H100-SXM5-80GB": 18, "H200-SXM-141GB": 18, "A100-SXM4-40GB": 12, "A100-SXM4-80GB": 12, "B200": 18}
LIB_DIR = {"x86_64": "usr/lib/x86_64-linux-gnu", "aarch64": "usr/lib/aarch64-linux-gnu"}[platform.machine()]


@pytest.fixture(scope="module")
def goplugin():
    p = subprocess.run([os.path.join(HERE, "build.sh")], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, f"build.sh failed:\n{p.stderr}"
    return p.stdout.strip().splitlines()[-1]


class Node:
    def __init__(self, name):
        self.path = os.path.join(ROOT, "examples", "nodes", name)
        self.dir = tempfile.mkdtemp(prefix="gs-nvmlc-")
        self.state = os.path.join(self.dir, "state")
        self.root = os.path.join(self.state, "root")

    def gs(self, *args):
        p = subprocess.run([GPUSLICE, "--sim", self.path, "--sim-state", self.state, *args],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return p.stdout

    def inspect(self):
        return json.loads(self.gs("inspect", "--json"))

    def env(self):
        env = dict(os.environ, GPUSLICE_SIM_NODE=self.path, GPUSLICE_SIM_STATE=self.state,
                   LD_LIBRARY_PATH=os.path.join(self.root, LIB_DIR))
        if os.environ.get("GS_SANITIZER_PRELOAD"):   # a sanitized simulator: its runtimes first
            env.update(LD_PRELOAD=os.environ["GS_SANITIZER_PRELOAD"], ASAN_OPTIONS="detect_leaks=0")
        return env

    def run(self, goplugin, *args):
        self.gs("inspect")       # the root is made when the node is first opened
        p = subprocess.run([goplugin, "-root", self.root, *args], capture_output=True, text=True, timeout=60,
                           env=self.env())
        assert p.returncode == 0, f"goplugin exit {p.returncode}:\n{p.stderr}"
        return json.loads(p.stdout)


@pytest.fixture
def node():
    made = []

    def make(name):
        made.append(Node(name))
        return made[-1]
    yield make
    for n in made:
        shutil.rmtree(n.dir, ignore_errors=True)


def models(n):
    """The catalogue model key of each GPU, from the node file (count expanded)."""
    import yaml
    with open(n.path) as f:
        doc = yaml.safe_load(f)
    return [g["model"] for g in doc["gpus"] for _ in range(g.get("count", 1))]


def check_gpus(n, out):
    inv = n.inspect()
    assert out["driver_version"] == inv["driver_version"]
    assert len(out["gpus"]) == len(inv["gpus"])
    for want, got, model in zip(inv["gpus"], out["gpus"], models(n)):
        assert got["uuid"] == want["uuid"] and got["name"] == want["name"] and got["minor"] == want["minor"]
        assert got["memory_total"] == want["memory"]["total_mib"] << 20
        assert got["pci_bus_id"] == want["pci_bus_id"] and got["compute_capability"] == want["compute_capability"]
        assert got["paths"] == [f"/dev/nvidia{want['minor']}"] and os.path.isfile(n.root + got["paths"][0])
        assert got["numa_node"] == want["index"] % 8 // 4      # from the root's sysfs, as the plugin reads it
        links = NVLINKS.get(model, 0)
        assert got["nvlinks"] == links, model
        if links:    # every link reaches one of the board's NVSwitches
            assert len(set(got["nvlink_remotes"])) > 1 and got["nvlink_error"] == "Invalid Argument"
            assert all(r.startswith(want["pci_bus_id"][:9]) and r not in [g["pci_bus_id"] for g in inv["gpus"]]
                       for r in got["nvlink_remotes"])
        else:
            assert got["nvlink_error"] == "Not Supported" and got["nvlink_remotes"] == []
    return inv


def test_whole_gpus_on_an_sxm_node(goplugin, node):
    n = node("h200x8.yaml")
    out = n.run(goplugin)
    check_gpus(n, out)
    t = out["topology"]
    assert [t[i][i] for i in range(8)] == [0] * 8                        # INTERNAL
    assert t[0][1] == t[1][0] == 10 and t[0][2] == 40 and t[0][4] == 50   # SINGLE, NODE, SYSTEM
    assert all(t[i][j] == t[j][i] for i in range(8) for j in range(8))
    assert all(g["mig_enabled"] and g["mig"] == [] for g in out["gpus"])   # MIG on, no instances yet


def test_whole_gpus_on_a_pcie_node(goplugin, node):
    n = node("t4x2.yaml")
    out = n.run(goplugin)
    check_gpus(n, out)
    assert out["topology"] == [[0, 10], [10, 0]]


def test_mig_mixed_with_pcie_gpus(goplugin, node):
    n = node("h100x4-l4x3.yaml")
    n.gs("sim", "mig-create", "--gpu", "0", "--profile", "3g.40gb", "--start", "4")
    n.gs("sim", "mig-create", "--gpu", "0", "--profile", "1g.10gb", "--start", "0")
    n.gs("sim", "mig-create", "--gpu", "2", "--profile", "7g.80gb", "--start", "0")
    out = n.run(goplugin)
    inv = check_gpus(n, out)
    for want, got in zip(inv["gpus"], out["gpus"]):
        migs = (want.get("mig") or {}).get("devices", [])
        assert got["mig_enabled"] == ((want.get("mig") or {}).get("current") == "enabled")
        assert sorted((m["uuid"], m["gi_id"], m["ci_id"], m["profile"], m["memory_total"]) for m in got["mig"]) == \
               sorted((m["uuid"], m["gi_id"], m["ci_id"], m["profile"], m["memory_mib"] << 20) for m in migs)
        for m in got["mig"]:     # the plugin's GetPaths: the parent and two capability devices, present
            gi_cap = 3 + want["minor"] * 135 + m["gi_id"] * 9
            assert m["paths"] == [f"/dev/nvidia{want['minor']}", f"/dev/nvidia-caps/nvidia-cap{gi_cap}",
                                  f"/dev/nvidia-caps/nvidia-cap{gi_cap + 1 + m['ci_id']}"]
            assert all(os.path.isfile(n.root + p) for p in m["paths"])
    assert sum(len(g["mig"]) for g in out["gpus"]) == 3


def test_health_xid_through_an_event_set(goplugin, node):
    n = node("h100x4-l4x3.yaml")
    n.gs("inspect")
    p = subprocess.Popen([goplugin, "-root", n.root, "-wait-ms", "10000"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=n.env())
    try:
        assert p.stderr.readline().strip() == "ready"
        time.sleep(0.1)
        n.gs("sim", "xid", "5", "79")
        stdout, stderr = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 0, stderr
    out = json.loads(stdout)
    assert out["xid"] == 79 and out["xid_uuid"] == n.inspect()["gpus"][5]["uuid"], out
