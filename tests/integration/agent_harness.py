"""The harness of the agent's integration tests (test_agent.py, test_allocate.py,
test_agent_mps.py): simulated nodes, agent processes and the kubelet emulator
(kubelet_emulator.py), the `h` fixture, and the policies and node descriptions the tests share.

Every test has its own short temporary directory under /tmp (kubelet dir, simulator state,
policy files), its own emulator and its own agent process; all waits are bounded.

Environment (set by meson): GPUSLICE (the binary), GPUSLICE_SIM_LIB, GS_SOURCE_ROOT.
A binary whose `agent --help` fails is a broken build: the `h` fixture fails every test that
uses it (nothing is skipped)."""
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
import wait  # noqa: E402  (tests/lib)

from kubelet_emulator import EmulatorError, KubeletEmulator

ROOT = os.environ.get("GS_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUSLICE = os.environ.get("GPUSLICE") or os.path.join(ROOT, "build", "gpuslice")
H100_L4 = os.path.join(ROOT, "examples", "nodes", "h100x4-l4x2.yaml")
T4X2 = os.path.join(ROOT, "examples", "nodes", "t4x2.yaml")
POLL_MS = 200


@functools.lru_cache(maxsize=None)
def agent_broken():
    """None if `gpuslice agent --help` works, else why not (asked once per test run)."""
    try:
        p = subprocess.run([GPUSLICE, "agent", "--help"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if p.returncode != 0:
        return f"exit {p.returncode}: {(p.stdout + p.stderr).strip()[:300]}"
    return None


# ------------------------------------------------------------------------------- policies

WHOLE = "version: v1\n"

# NVIDIA's documented time-slicing file, unchanged.
def ts_policy(replicas, rename=False, fail_gt_one=False, extra_flags="", health=""):
    text = "version: v1\n"
    if extra_flags:
        text += "flags:\n" + extra_flags
    text += "sharing:\n  timeSlicing:\n"
    if rename:
        text += "    renameByDefault: true\n"
    if fail_gt_one:
        text += "    failRequestsGreaterThanOne: true\n"
    text += f"    resources:\n    - name: nvidia.com/gpu\n      replicas: {replicas}\n"
    if health:
        text += "gpuslice:\n  health:\n" + health
    return text


TS2 = ts_policy(2)
TS4 = ts_policy(4)

# replicas: 1 on line 6, value at column 17 (as in the policy.h example).
BAD_TS = """version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 1
"""
BAD_LINE, BAD_COLS = 6, (7, 17)

MIXED = """version: v1
flags:
  migStrategy: mixed
"""

NODE_H100X2 = """gpus:
  - model: H100-SXM5-80GB
    count: 2
    mig: enabled
"""

NODE_L4X4 = """gpus:
  - model: L4
    count: 4
"""


def sock_name(resource):
    return "gpuslice-" + resource.replace("/", "_") + ".sock"


def phys(device_id):
    return device_id.split("::")[0]


# ------------------------------------------------------------------------------- harness

class Node:
    """A simulated node: a node description plus a private state directory."""

    def __init__(self, path, state):
        self.path = path
        self.state = state

    def run(self, *args, check=0, timeout=30):
        p = subprocess.run([GPUSLICE, "--sim", self.path, "--sim-state", self.state, *args],
                           capture_output=True, text=True, timeout=timeout)
        if check is not None:
            assert p.returncode == check, f"gpuslice {' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
        return p

    def inspect(self):
        return json.loads(self.run("inspect", "--json").stdout)

    def uuids(self):
        return [g["uuid"] for g in self.inspect()["gpus"]]

    def mig_create(self, gpu, profile, start):
        out = self.run("sim", "mig-create", "--gpu", str(gpu), "--profile", profile, "--start", str(start)).stdout.strip()
        assert out.startswith("MIG-"), f"mig-create printed {out!r}"
        return out

    def mig_device(self, uuid):
        for g in self.inspect()["gpus"]:
            for d in (g.get("mig") or {}).get("devices", []):
                if d["uuid"] == uuid:
                    return dict(d, gpu=g["index"], minor=g.get("minor", g["index"]))
        raise AssertionError(f"no MIG device {uuid} in inspect")

    def mig_destroy(self, gpu, gi):
        self.run("sim", "mig-destroy", "--gpu", str(gpu), "--gi", str(gi))


class Agent:
    def __init__(self, harness, node, policy, extra):
        self.h = harness
        self.node = node
        self.policy = policy
        self.log_path = os.path.join(harness.base, f"agent{len(harness.agents)}.log")
        self.features = os.path.join(harness.base, f"features{len(harness.agents)}")
        if "--features-file" not in extra:  # never the node's real NFD directory
            extra = ["--features-file", self.features, *extra]
        if "--metrics-address" not in extra:  # a free port: agents run side by side
            extra = ["--metrics-address", "127.0.0.1:0", *extra]
        self.cdi_root = os.path.join(harness.base, f"cdi{len(harness.agents)}")
        if "--cdi-root" not in extra:  # never the node's real /var/run/cdi
            extra = ["--cdi-root", self.cdi_root, *extra]
        args = [GPUSLICE, "--sim", node.path, "--sim-state", node.state, "agent", "--config", policy,
                "--kubelet-dir", harness.kdir, "--poll-interval-ms", str(POLL_MS), *extra]
        self.args = args
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
        self.started_at = time.monotonic()

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc.poll() is None

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def signal(self, sig):
        assert self.alive(), f"agent already exited ({self.proc.returncode})\n{self.log()}"
        self.proc.send_signal(sig)

    def wait_exit(self, timeout):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"agent still running after {timeout} s\n{self.log()}") from None

    def stop(self, timeout=10):
        self.signal(signal.SIGTERM)
        return self.wait_exit(timeout)

    def wait_resources(self, names, timeout=10):
        """Waits until every resource in names is registered and has sent its first device list."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.alive():
                raise AssertionError(f"agent exited with {self.proc.returncode} before registering "
                                     f"{sorted(names)}\n{self.log()}")
            try:
                self.h.kubelet.wait_resources(names, timeout=0.2)
                return
            except EmulatorError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"agent did not register {sorted(names)} within {timeout} s; "
                                         f"registered: {self.h.kubelet.resources()}\n{self.log()}") from None

    def wait_log(self, pattern, timeout=5):
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        while True:
            for line in self.log().splitlines():
                if rx.search(line):
                    return line
            if time.monotonic() > deadline:
                raise AssertionError(f"no log line matching {pattern!r} within {timeout} s\n{self.log()}")
            time.sleep(0.05)


class Harness:
    def __init__(self):
        self.base = tempfile.mkdtemp(prefix="gs-", dir="/tmp")
        self.kdir = os.path.join(self.base, "k")
        self.kubelet = KubeletEmulator(self.kdir).start()
        self.agents = []
        self._nodes = 0

    def node(self, source=T4X2):
        """A node from a file path, or from YAML text written to a file."""
        self._nodes += 1
        if "\n" in source:
            path = os.path.join(self.base, f"node{self._nodes}.yaml")
            with open(path, "w") as f:
                f.write(source)
            source = path
        return Node(source, os.path.join(self.base, f"s{self._nodes}"))

    def write(self, name, text):
        path = os.path.join(self.base, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def agent(self, node, policy_text, resources=(), extra=(), policy_name="policy.yaml"):
        policy = self.write(policy_name, policy_text)
        a = Agent(self, node, policy, list(extra))
        self.agents.append(a)
        if resources:
            a.wait_resources(resources)
        return a

    def latest(self, resource):
        return self.kubelet.devices(resource)

    def close(self):
        for a in self.agents:
            if a.alive():
                a.proc.send_signal(signal.SIGTERM)
                try:
                    a.proc.wait(5)
                except subprocess.TimeoutExpired:
                    a.proc.kill()
                    a.proc.wait(5)
            print(f"---- agent {a.pid} (exit {a.proc.returncode}) log:\n{a.log()[-6000:]}")
        self.kubelet.stop()
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture
def h():
    """A harness; fails (never skips) when the binary's agent command is broken."""
    broken = agent_broken()
    assert broken is None, f"`{GPUSLICE} agent --help` fails: {broken}"
    harness = Harness()
    yield harness
    harness.close()


def ids(devices):
    return sorted(d.id for d in devices)


def settle(h):
    """Waits until what the kubelet emulator has received (registrations, and ListAndWatch messages
    per resource) has stopped changing for four polls of 0.1 s, at most 5 s: the agent's answer to
    what the test did is complete, without a fixed sleep."""
    kubelet = h.kubelet

    def received():
        regs = kubelet.registrations
        return len(regs), tuple((r, len(kubelet.messages(r))) for r in sorted({g.resource_name for g in regs}))
    return wait.steady(received, what="the agent's registrations and device lists")
