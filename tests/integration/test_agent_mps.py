"""MPS in the agent: one control daemon per MPS-shared GPU, started with its own directories and
defaults, watched (a dead daemon makes exactly its GPU's devices Unhealthy, and Healthy again
after the restart), changed on policy reload, quit on shutdown; Allocate answers carry the
per-container limits. The daemon is the stand-in tests/mps/fake_mps_control (FAKE_MPS_CONTROL),
which records its environment and the commands it receives in its log directory.

Environment (set by meson): GPUSLICE, GPUSLICE_SIM_LIB, GS_SOURCE_ROOT, FAKE_MPS_CONTROL."""
import os
import signal
import subprocess
import time

import grpc
import pytest

from kubelet_emulator import HEALTHY, UNHEALTHY
from test_agent import GPUSLICE, T4X2, _samples, _scrape, _wait, h, phys  # noqa: F401 (h: fixture)

import wait  # tests/lib, on the path once agent_harness is imported

ROOT = os.environ.get("GS_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAKE = os.environ.get("FAKE_MPS_CONTROL") or os.path.join(ROOT, "build", "tests", "mps", "fake_mps_control")


def mps_policy(root, replicas=4, extra="", fail_gt_one=None):
    fail = "" if fail_gt_one is None else f"    failRequestsGreaterThanOne: {str(fail_gt_one).lower()}\n"
    return (f"version: v1\nflags:\n  mpsRoot: {root}\nsharing:\n  mps:\n{fail}    resources:\n"
            f"    - name: nvidia.com/gpu\n      replicas: {replicas}\n{extra}")


def rules_policy(root, mps_gpu):
    return (f"version: v1\nflags:\n  mpsRoot: {root}\ngpuslice:\n  gpus:\n"
            f"  - index: \"{mps_gpu}\"\n    mode: mps\n    replicas: 2\n    resourceName: nvidia.com/gpu.mps\n"
            f"  - index: \"0-1\"\n    mode: whole\n")


def start(h, node, policy, resources):
    return h.agent(node, policy, resources=resources, extra=["--mps-control", FAKE])


def control_log(root, uuid):
    path = os.path.join(root, uuid, "log", "control.log")
    with open(path) as f:
        return f.read().splitlines()


def daemon_pid(root, uuid):
    with open(os.path.join(root, uuid, "pipe", "nvidia-cuda-mps-control.pid")) as f:
        return int(f.read().strip())


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is not alive
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def wait_running(root, uuid, timeout=5):
    def running():
        try:
            log = control_log(root, uuid)
        except FileNotFoundError:
            return False
        return "cmd set_default_active_thread_percentage" in " ".join(log) or \
            any(line.startswith("cmd get_default") for line in log)
    wait.until(running, timeout=timeout, what=f"an MPS daemon for {uuid} under {root}")


def test_daemon_per_gpu_with_environment_and_defaults(h):
    node = h.node(T4X2)
    u = node.uuids()
    mem = node.inspect()["gpus"][0]["memory"]["total_mib"]
    root = os.path.join(h.base, "mps")
    a = start(h, node, mps_policy(root), ["nvidia.com/gpu"])
    msg = h.kubelet.wait_for("nvidia.com/gpu", lambda d: len(d) == 8 and {x.health for x in d} == {HEALTHY}, timeout=10)
    assert sorted(x.id for x in msg.devices) == sorted(f"{g}::{k}" for g in u for k in range(4))
    for uuid in u:
        log = control_log(root, uuid)
        env = dict(l[4:].split("=", 1) for l in log if l.startswith("env "))
        assert env["CUDA_MPS_PIPE_DIRECTORY"] == os.path.join(root, uuid, "pipe")
        assert env["CUDA_MPS_LOG_DIRECTORY"] == os.path.join(root, uuid, "log")
        assert env["CUDA_VISIBLE_DEVICES"] == uuid
        cmds = [l[4:] for l in log if l.startswith("cmd ")]
        # failRequestsGreaterThanOne (MPS's default): the daemon's defaults are one replica's share
        assert "set_default_active_thread_percentage 25" in cmds
        assert f"set_default_device_pinned_mem_limit 0 {mem // 4}M" in cmds
        assert "get_default_active_thread_percentage" in cmds
    assert os.stat(os.path.join(root, "shm")).st_mode & 0o1777 == 0o1777
    labels = open(a.features).read()
    assert "gpuslice.io/mps.capable=true" in labels and "gpuslice.io/gpu.sharing-strategy=mps" in labels
    assert "gpuslice.io/gpu.count=2" in labels and "gpuslice.io/gpu.replicas=4" in labels
    running = [f'gpuslice_mps_daemon_state{{UUID="{uuid}",state="running"}}' for uuid in u]
    _wait(lambda: all(_samples(_scrape(a)).get(k) == 1 for k in running), 5, "daemons not running in the metrics", a)


def test_allocate_carries_per_container_limits(h):
    node = h.node(T4X2)
    u = node.uuids()
    mem = node.inspect()["gpus"][0]["memory"]["total_mib"]
    root = os.path.join(h.base, "mps")
    start(h, node, mps_policy(root), ["nvidia.com/gpu"])
    h.kubelet.wait_for("nvidia.com/gpu", lambda d: len(d) == 8 and {x.health for x in d} == {HEALTHY}, timeout=10)
    r = h.kubelet.allocate("nvidia.com/gpu", [f"{u[1]}::2"])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == u[1]
    assert r.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/pipe"
    assert r.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert r.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={mem // 4}M"
    mounts = {m.container_path: m for m in r.mounts}
    assert mounts["/mps/pipe"].host_path == os.path.join(root, u[1], "pipe") and not mounts["/mps/pipe"].read_only
    assert mounts["/dev/shm"].host_path == os.path.join(root, "shm")
    with pytest.raises(grpc.RpcError) as e:  # failRequestsGreaterThanOne
        h.kubelet.allocate("nvidia.com/gpu", [f"{u[1]}::0", f"{u[1]}::1"])
    assert "maximum request size for shared resources is 1" in e.value.details()


def test_mps_with_the_guard(h):
    node = h.node(T4X2)
    u = node.uuids()
    root = os.path.join(h.base, "mps")
    guard = os.path.join(h.base, "guard")
    policy = mps_policy(root, replicas=2, extra="      memoryPerReplica: 4GiB\n")
    h.agent(node, policy, resources=["nvidia.com/gpu"], extra=["--mps-control", FAKE, "--guard-root", guard])
    h.kubelet.wait_for("nvidia.com/gpu", lambda d: len(d) == 4 and {x.health for x in d} == {HEALTHY}, timeout=10)
    r = h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::1"])
    mounts = {m.container_path: m.host_path for m in r.mounts}
    assert {"/mps/pipe", "/dev/shm", "/etc/gpuslice/guard.conf", "/etc/ld.so.preload",
            "/usr/lib/gpuslice/libgpuslice-guard.so", "/run/gpuslice/guard"} <= set(mounts)
    assert r.envs["GPUSLICE_GUARD_CONFIG"] == "/etc/gpuslice/guard.conf"
    assert r.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    with open(mounts["/etc/gpuslice/guard.conf"]) as f:
        assert f"device 0 {u[0]} {4 << 30} 0" in f.read().splitlines()


def test_two_replicas_get_twice_the_share(h):
    node = h.node(T4X2)
    u = node.uuids()
    mem = node.inspect()["gpus"][0]["memory"]["total_mib"]
    root = os.path.join(h.base, "mps")
    extra = "      computePerReplica: 20%\n      pinnedMemoryPerReplica: 2GiB\n"
    start(h, node, mps_policy(root, replicas=3, extra=extra, fail_gt_one=False), ["nvidia.com/gpu"])
    h.kubelet.wait_for("nvidia.com/gpu", lambda d: len(d) == 6 and {x.health for x in d} == {HEALTHY}, timeout=10)
    r = h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::0", f"{u[0]}::2"])
    assert r.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "40"
    assert r.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"
    # Containers may hold several replicas: the daemon keeps its own defaults (100 %, no limit),
    # since a client can lower the daemon's percentage but not raise it.
    cmds = [l[4:] for l in control_log(root, u[0]) if l.startswith("cmd ")]
    assert not any(c.startswith("set_default_active_thread_percentage") for c in cmds)
    assert not any(c.startswith("set_default_device_pinned_mem_limit") for c in cmds)
    with pytest.raises(grpc.RpcError) as e:  # one client talks to one daemon
        h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::0", f"{u[1]}::0"])
    assert "must share one GPU" in e.value.details()
    assert mem > 0


def test_dead_daemon_makes_its_gpu_unhealthy_then_healthy(h):
    node = h.node(T4X2)
    u = node.uuids()
    root = os.path.join(h.base, "mps")
    a = start(h, node, mps_policy(root, replicas=2), ["nvidia.com/gpu"])
    h.kubelet.wait_for("nvidia.com/gpu", lambda d: len(d) == 4 and {x.health for x in d} == {HEALTHY}, timeout=10)
    pid = daemon_pid(root, u[0])
    t = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    msg = h.kubelet.wait_for("nvidia.com/gpu", lambda d: {x.health for x in d if phys(x.id) == u[0]} == {UNHEALTHY},
                             after=t, timeout=5)
    assert msg.time - t < 1.0, f"Unhealthy after {msg.time - t:.2f} s"
    assert {x.health for x in msg.devices if phys(x.id) == u[1]} == {HEALTHY}
    back = h.kubelet.wait_for("nvidia.com/gpu", lambda d: {x.health for x in d} == {HEALTHY}, after=msg.time,
                              timeout=10)
    assert back.time - t < 5.0
    new = daemon_pid(root, u[0])
    assert new != pid and alive(new)
    a.wait_log(r"MPS daemon of " + u[0] + r" is running: its devices are Healthy")
    key = f'gpuslice_mps_daemon_restarts_total{{UUID="{u[0]}"}}'
    _wait(lambda: _samples(_scrape(a)).get(key) == 1, 5, "restart not counted in the metrics", a)
    assert _samples(_scrape(a))[f'gpuslice_mps_daemon_state{{UUID="{u[0]}",state="running"}}'] == 1


def test_reload_moves_mps_between_gpus_and_shutdown_quits(h, monkeypatch):
    node = h.node(T4X2)
    u = node.uuids()
    root = os.path.join(h.base, "mps")
    journal = os.path.join(h.base, "mps-journal")   # outlives the daemons' log directories
    monkeypatch.setenv("GS_FAKE_MPS_JOURNAL", journal)
    a = start(h, node, rules_policy(root, 0), ["nvidia.com/gpu.mps", "nvidia.com/gpu"])
    h.kubelet.wait_for("nvidia.com/gpu.mps", lambda d: sorted(x.id for x in d) == [f"{u[0]}::0", f"{u[0]}::1"]
                       and {x.health for x in d} == {HEALTHY}, timeout=10)
    old = daemon_pid(root, u[0])
    t = time.monotonic()
    with open(a.policy, "w") as f:
        f.write(rules_policy(root, 1))
    h.kubelet.wait_for("nvidia.com/gpu.mps", lambda d: sorted(x.id for x in d) == [f"{u[1]}::0", f"{u[1]}::1"]
                       and {x.health for x in d} == {HEALTHY}, after=t, timeout=10)
    h.kubelet.wait_for("nvidia.com/gpu", lambda d: [x.id for x in d] == [u[0]], after=t, timeout=5)
    _wait(lambda: not os.path.exists(os.path.join(root, u[0])), 5, "GPU 0's MPS directories not removed", a)
    assert not alive(old)
    with open(journal) as f:
        assert f"{u[0]} quit" in f.read().splitlines()   # told to quit, not killed
    new = daemon_pid(root, u[1])
    assert a.stop() == 0
    assert not alive(new) and not os.path.exists(os.path.join(root, u[1]))
    with open(journal) as f:
        assert f"{u[1]} quit" in f.read().splitlines()


def test_policy_errors(h):
    node = h.node(T4X2)
    root = os.path.join(h.base, "mps")
    policy = h.write("bad.yaml", mps_policy(root, replicas=49))
    p = subprocess.run([GPUSLICE, "--sim", node.path, "--sim-state", node.state, "apply", "--config", policy],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and f"{policy}:8:17: sharing.mps.resources[0].replicas: number of replicas must be <= 48 (got 49)" in p.stderr, p.stderr
    policy = h.write("bad2.yaml", mps_policy(root, replicas=4, extra="      computePerReplica: 30%\n"))
    p = subprocess.run([GPUSLICE, "--sim", node.path, "--sim-state", node.state, "apply", "--config", policy],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and f"{policy}:9:" in p.stderr and "100" in p.stderr, p.stderr
    # A rule for a GPU the node does not have: said, and the rest is served.
    text = rules_policy(root, 7)
    a = start(h, node, text, ["nvidia.com/gpu"])
    a.wait_log(r"policy line \d+: gpuslice.gpus selects GPU indices beyond the node's 2 GPUs \(mode mps\)")
    assert not os.path.exists(root) or os.listdir(root) in ([], ["shm"])


def _modes(node):
    return [g["compute_mode"] for g in node.inspect()["gpus"]]


def test_compute_mode_only_when_asked(h):
    node = h.node(T4X2)
    root = os.path.join(h.base, "mps")
    a = start(h, node, mps_policy(root), ["nvidia.com/gpu"])
    h.kubelet.wait_for("nvidia.com/gpu", lambda d: len(d) == 8 and {x.health for x in d} == {HEALTHY}, timeout=10)
    assert _modes(node) == ["default", "default"]          # left as it is (NVIDIA's plugin sets it)
    t = time.monotonic()
    with open(a.policy, "w") as f:
        f.write(mps_policy(root) + "gpuslice:\n  mps:\n    exclusiveProcess: true\n")
    a.wait_log(r"GPU 1: compute mode set to EXCLUSIVE_PROCESS \(MPS, gpuslice.mps.exclusiveProcess\)")
    assert _modes(node) == ["exclusive_process", "exclusive_process"]
    # MPS no longer asked for on the node: the previous mode comes back
    with open(a.policy, "w") as f:
        f.write("version: v1\n")
    h.kubelet.wait_for("nvidia.com/gpu", lambda d: len(d) == 2, after=t, timeout=10)
    _wait(lambda: _modes(node) == ["default", "default"], 5, "compute modes not restored", a)


def test_compute_mode_restored_when_the_agent_stops(h):
    node = h.node(T4X2)
    root = os.path.join(h.base, "mps")
    policy = mps_policy(root) + "gpuslice:\n  mps:\n    exclusiveProcess: true\n"
    a = start(h, node, policy, ["nvidia.com/gpu"])
    a.wait_log(r"GPU 0: compute mode set to EXCLUSIVE_PROCESS")
    assert _modes(node)[0] == "exclusive_process"
    assert a.stop() == 0
    assert _modes(node)[0] == "default"


def cdi_mps_allocation(h):
    """An agent serving 4 MPS replicas per GPU of T4X2 with the cdi-cri strategy, and its Allocate
    answer for replica 3 of GPU 1: (agent, GPU UUIDs, MPS root, answer). Also used by
    test_cdi_consumers.py."""
    from test_agent import _proc_root
    node = h.node(T4X2)
    u = node.uuids()
    root = os.path.join(h.base, "mps")
    policy = mps_policy(root).replace("version: v1\nflags:\n", "version: v1\nflags:\n  plugin:\n    deviceListStrategy: cdi-cri\n")
    a = h.agent(node, policy, resources=["nvidia.com/gpu"], extra=["--mps-control", FAKE, "--proc-root", _proc_root(h)])
    h.kubelet.wait_for("nvidia.com/gpu", lambda d: len(d) == 8 and {x.health for x in d} == {HEALTHY}, timeout=10)
    return a, u, root, h.kubelet.allocate("nvidia.com/gpu", [f"{u[1]}::3"])


def test_cdi_mps_edits_in_a_transient_spec(h):
    from test_agent import _transient
    from test_cdi import validator
    a, u, root, r = cdi_mps_allocation(h)
    assert not r.mounts and not r.envs
    alloc = r.cdi_devices[1].name.split("=", 1)[1]
    spec = _transient(a, alloc)
    assert not list(validator().iter_errors(spec))
    edits = spec["devices"][0]["containerEdits"]
    assert "CUDA_MPS_PIPE_DIRECTORY=/mps/pipe" in edits["env"] and "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in edits["env"]
    mounts = {m["containerPath"]: m["hostPath"] for m in edits["mounts"]}
    assert mounts["/mps/pipe"] == os.path.join(root, u[1], "pipe") and mounts["/dev/shm"] == os.path.join(root, "shm")
