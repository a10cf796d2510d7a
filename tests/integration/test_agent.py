"""Integration tests of the node agent (`gpuslice agent`, a kubelet device plugin) driven through
the kubelet emulator (kubelet_emulator.py) on simulated nodes.

Every test has its own short temporary directory under /tmp (kubelet dir, simulator state,
policy files), its own emulator and its own agent process; all waits are bounded.

Environment (set by meson): GPUSLICE (the binary), GPUSLICE_SIM_LIB, GS_SOURCE_ROOT.
The harness (nodes, agents, the emulator, the `h` fixture) is agent_harness.py; a binary whose
`agent --help` fails is a broken build, and every test fails (nothing is skipped). The Allocate
tests are in test_allocate.py.

Run: /usr/bin/python3 -m pytest -q tests/integration/test_agent.py"""
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time

import grpc
import pytest

from agent_harness import (  # noqa: F401 (h: the fixture)
    BAD_COLS, BAD_LINE, BAD_TS, GPUSLICE, H100_L4, MIXED, NODE_H100X2, NODE_L4X4, POLL_MS, ROOT, T4X2, TS2,
    TS4, WHOLE, h, ids, phys, settle, sock_name, ts_policy,
)
from kubelet_emulator import HEALTHY, UNHEALTHY

import wait  # tests/lib, on the path once agent_harness is imported


# ------------------------------------------------------------------------------- registration

def test_registration_whole_gpus(h):
    node = h.node(T4X2)
    u = node.uuids()
    h.agent(node, WHOLE, resources=["nvidia.com/gpu"])
    settle(h)
    regs = h.kubelet.registrations
    assert [r.resource_name for r in regs] == ["nvidia.com/gpu"], "exactly one registration per resource"
    reg = regs[0]
    assert reg.ok and reg.version == "v1beta1"
    assert reg.endpoint == "gpuslice-nvidia.com_gpu.sock"
    assert stat.S_ISSOCK(os.stat(os.path.join(h.kdir, reg.endpoint)).st_mode)
    # GetDevicePluginOptions was answered synchronously inside the Register RPC.
    assert reg.options is not None and reg.received_at <= reg.options_at <= reg.returned_at
    opts = h.kubelet.options("nvidia.com/gpu")
    assert opts.get_preferred_allocation_available and not opts.pre_start_required
    assert reg.request_options.get_preferred_allocation_available and not reg.request_options.pre_start_required
    devs = h.latest("nvidia.com/gpu")
    assert ids(devs) == sorted(u)
    assert all(d.health == HEALTHY for d in devs)
    assert len(h.kubelet.messages("nvidia.com/gpu")) == 1, "the full list once, then only on change"
    # PreStartContainer answers (the kubelet only calls it when pre_start_required, but it works).
    assert h.kubelet.prestart("nvidia.com/gpu", [u[0]]) is not None


def test_registration_mig_mixed_one_per_resource(h):
    node = h.node(H100_L4)
    u = node.uuids()
    m1g = node.mig_create(0, "1g.10gb", 0)
    m2g = node.mig_create(1, "2g.20gb", 0)
    names = ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb"]
    h.agent(node, MIXED, resources=names)
    settle(h)
    regs = h.kubelet.registrations
    assert sorted(r.resource_name for r in regs) == sorted(names)
    for r in regs:
        assert r.ok and r.version == "v1beta1"
        assert r.endpoint == sock_name(r.resource_name)
        assert "/" not in r.endpoint
        assert os.path.exists(os.path.join(h.kdir, r.endpoint))
        assert r.received_at <= r.options_at <= r.returned_at
        assert r.options.get_preferred_allocation_available and not r.options.pre_start_required
    assert "gpuslice-nvidia.com_mig-1g.10gb.sock" in os.listdir(h.kdir)
    # MIG-mode GPUs are only advertised through their MIG devices; the L4s are whole GPUs.
    assert ids(h.latest("nvidia.com/gpu")) == sorted(u[4:6])
    assert ids(h.latest("nvidia.com/mig-1g.10gb")) == [m1g]
    assert ids(h.latest("nvidia.com/mig-2g.20gb")) == [m2g]


def _own_threads(a):
    """The agent's threads of its own (gRPC's have names of theirs)."""
    names = []
    for t in os.listdir(f"/proc/{a.pid}/task"):
        try:
            with open(f"/proc/{a.pid}/task/{t}/comm") as f:
                names.append(f.read().strip())
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    return sum(n == "gpuslice" for n in names)


def test_one_grpc_thread_for_every_resource(h):
    """The device plugins of every resource (a server and a socket each, and their Register calls)
    are served by one thread: an agent with three resources has as many threads of its own as one
    with a single resource."""
    a = h.agent(h.node(T4X2), WHOLE, resources=["nvidia.com/gpu"])
    settle(h)
    one = _own_threads(a)
    assert a.stop() == 0, a.log()
    node = h.node(H100_L4)
    node.mig_create(0, "1g.10gb", 0)
    node.mig_create(1, "2g.20gb", 0)
    names = ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb"]
    a = h.agent(node, MIXED, resources=names)
    settle(h)
    assert len({r.resource_name for r in h.kubelet.registrations if r.ok}) == 3
    assert _own_threads(a) == one, a.log()


# ------------------------------------------------------------------------------- ListAndWatch

def test_time_slicing_nvidia_file(h):
    node = h.node(T4X2)
    u = node.uuids()
    h.agent(node, TS4, resources=["nvidia.com/gpu"])
    devs = h.latest("nvidia.com/gpu")
    assert ids(devs) == sorted(f"{g}::{n}" for g in u for n in range(4))
    assert all(d.health == HEALTHY for d in devs)


def test_time_slicing_rename_by_default(h):
    node = h.node(T4X2)
    u = node.uuids()
    h.agent(node, ts_policy(2, rename=True), resources=["nvidia.com/gpu.shared"])
    settle(h)
    assert h.kubelet.resources() == ["nvidia.com/gpu.shared"]
    reg = h.kubelet.registrations[0]
    assert reg.endpoint == "gpuslice-nvidia.com_gpu.shared.sock"
    assert ids(h.latest("nvidia.com/gpu.shared")) == sorted(f"{g}::{n}" for g in u for n in range(2))


HETERO = """version: v1
flags:
  migStrategy: mixed
gpuslice:
  gpus:
    - index: "0-1"
      mode: mig
    - index: "2-3"
      mode: disabled
    - index: "4"
      mode: time-slicing
      replicas: 3
    - index: "5"
      mode: whole
"""


def _all_devices(h):
    out = {}
    for res in h.kubelet.resources():
        for d in h.latest(res):
            assert d.id not in out, f"{d.id} advertised twice"
            out[d.id] = (res, d.health)
    return out


def test_heterogeneous_per_gpu_policy(h):
    node = h.node(H100_L4)
    u = node.uuids()
    m0 = node.mig_create(0, "1g.10gb", 0)
    m1 = node.mig_create(1, "1g.10gb", 0)
    m2 = node.mig_create(2, "1g.10gb", 0)          # GPU 2 is disabled: never advertised
    h.agent(node, HETERO, resources=["nvidia.com/mig-1g.10gb"])
    deadline = time.monotonic() + 5
    while len(_all_devices(h)) < 6 and time.monotonic() < deadline:
        time.sleep(0.1)
    settle(h)
    got = _all_devices(h)
    expected = {m0, m1, f"{u[4]}::0", f"{u[4]}::1", f"{u[4]}::2", u[5]}
    assert set(got) == expected, f"advertised {sorted(got)}"
    assert got[m0][0] == got[m1][0] == "nvidia.com/mig-1g.10gb"
    for i in (f"{u[4]}::0", u[5]):
        assert got[i][0].startswith("nvidia.com/gpu"), got[i]
    assert all(health == HEALTHY for _, health in got.values())
    assert m2 not in got and not any(phys(i) in (u[2], u[3]) for i in got)


def test_heterogeneous_apply_json_matches_agent(h):
    node = h.node(H100_L4)
    node.mig_create(0, "1g.10gb", 0)
    node.mig_create(1, "1g.10gb", 0)
    policy = h.write("apply.yaml", HETERO)
    p = node.run("apply", "--config", policy, "--json")
    doc = json.loads(p.stdout)
    assert doc["schema"] == "gpuslice.apply/v1"
    assert isinstance(doc["warnings"], list)
    kinds = {}
    planned = {}
    for res in doc["resources"]:
        for d in res["devices"]:
            planned[d["id"]] = res["name"]
            kinds[d["id"]] = (d["kind"], d["gpu"], d["health"])
    u = node.uuids()
    assert kinds[u[5]] == ("whole", 5, "Healthy")
    assert kinds[f"{u[4]}::2"] == ("replica", 4, "Healthy")
    assert sorted(k for k, g, _ in kinds.values() if k == "mig") == ["mig", "mig"]
    a = h.agent(node, HETERO, resources=sorted(set(planned.values())))
    settle(h)
    got = _all_devices(h)
    assert {i: r for i, (r, _) in got.items()} == planned
    assert a.alive()


def test_mig_single(h):
    node = h.node(NODE_H100X2)
    ms = [node.mig_create(0, "1g.10gb", 0), node.mig_create(0, "1g.10gb", 1), node.mig_create(1, "1g.10gb", 0)]
    h.agent(node, "version: v1\nflags:\n  migStrategy: single\n", resources=["nvidia.com/gpu"])
    settle(h)
    assert h.kubelet.resources() == ["nvidia.com/gpu"]
    devs = h.latest("nvidia.com/gpu")
    assert ids(devs) == sorted(ms)
    assert all(d.health == HEALTHY for d in devs)


def test_mig_mixed(h):
    node = h.node(H100_L4)
    u = node.uuids()
    a = [node.mig_create(0, "1g.10gb", 0), node.mig_create(0, "1g.10gb", 1)]
    b = node.mig_create(3, "3g.40gb", 4)
    h.agent(node, MIXED, resources=["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"])
    settle(h)
    assert sorted(h.kubelet.resources()) == ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"]
    assert ids(h.latest("nvidia.com/mig-1g.10gb")) == sorted(a)
    assert ids(h.latest("nvidia.com/mig-3g.40gb")) == [b]
    assert ids(h.latest("nvidia.com/gpu")) == sorted(u[4:6])


# ------------------------------------------------------------------------------- GetPreferredAllocation

def _check_preferred(got, available, must, size):
    assert len(got) == size, got
    assert len(set(got)) == size, f"duplicates in {got}"
    assert set(got) <= set(available), got
    assert set(must) <= set(got), got


def test_preferred_distributed(h):
    node = h.node(NODE_L4X4)
    u = node.uuids()
    h.agent(node, ts_policy(4), resources=["nvidia.com/gpu"])
    every = [f"{g}::{n}" for g in u for n in range(4)]
    got = h.kubelet.preferred("nvidia.com/gpu", every, [], 2)
    _check_preferred(got, every, [], 2)
    assert len({phys(i) for i in got}) == 2, got
    got = h.kubelet.preferred("nvidia.com/gpu", every, [], 4)
    assert len({phys(i) for i in got}) == 4, got
    # GPU 0 has 2 replicas allocated, GPU 1 has 1, GPUs 2 and 3 none.
    available = [i for i in every if i not in (f"{u[0]}::0", f"{u[0]}::1", f"{u[1]}::0")]
    got = h.kubelet.preferred("nvidia.com/gpu", available, [], 2)
    _check_preferred(got, available, [], 2)
    assert {phys(i) for i in got} == {u[2], u[3]}, got
    got = h.kubelet.preferred("nvidia.com/gpu", available, [], 3)
    assert {phys(i) for i in got} == {u[1], u[2], u[3]}, got
    must = [f"{u[0]}::2"]
    got = h.kubelet.preferred("nvidia.com/gpu", available, must, 2)
    _check_preferred(got, available, must, 2)
    assert {phys(i) for i in got} in ({u[0], u[2]}, {u[0], u[3]}), got


def test_preferred_packed(h):
    node = h.node(NODE_L4X4)
    u = node.uuids()
    flags = "  plugin:\n    sharedDevicesAllocationPolicy: packed\n"
    h.agent(node, ts_policy(4, extra_flags=flags), resources=["nvidia.com/gpu"])
    every = [f"{g}::{n}" for g in u for n in range(4)]
    got = h.kubelet.preferred("nvidia.com/gpu", every, [], 3)
    _check_preferred(got, every, [], 3)
    assert len({phys(i) for i in got}) == 1, got
    must = [f"{u[2]}::1"]
    got = h.kubelet.preferred("nvidia.com/gpu", every, must, 3)
    _check_preferred(got, every, must, 3)
    assert {phys(i) for i in got} == {u[2]}, got
    # Only GPU 1 still has 3 free replicas.
    available = [f"{u[0]}::0", f"{u[0]}::1"] + [f"{u[1]}::{n}" for n in range(4)]
    got = h.kubelet.preferred("nvidia.com/gpu", available, [], 3)
    _check_preferred(got, available, [], 3)
    assert {phys(i) for i in got} == {u[1]}, got


# ------------------------------------------------------------------------------- kubelet restart

def test_kubelet_restart_reregisters_within_1s(h):
    node = h.node(H100_L4)
    node.mig_create(0, "1g.10gb", 0)
    node.mig_create(1, "2g.20gb", 0)
    names = ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb"]
    agent = h.agent(node, MIXED, resources=names)
    before = {n: ids(h.latest(n)) for n in names}
    # gap: how long the new kubelet takes between removing the sockets and listening again. With
    # a short gap, "within 1 s" counts from the restart (the socket removal); with a long one,
    # from the moment kubelet.sock exists again.
    for gap in (0.0, 0.5, 2.0):
        t = h.kubelet.restart(gap=gap)  # removes every socket, the agent's included
        origin = t if gap < 1.0 else t + gap
        for n in names:
            reg = h.kubelet.wait_registration(n, after=t, timeout=5)
            assert reg.received_at - origin < 1.0, \
                f"gap {gap}: {n} re-registered {reg.received_at - t:.2f} s after the restart"
            assert reg.endpoint == sock_name(n)
            assert os.path.exists(os.path.join(h.kdir, reg.endpoint)), "fresh socket"
            msg = h.kubelet.wait_for(n, lambda devs: True, after=t, timeout=3)
            assert ids(msg.devices) == before[n]
        settle(h)
        again = [r.resource_name for r in h.kubelet.registrations if r.received_at > t and r.ok]
        assert sorted(again) == sorted(names), f"one registration per resource, got {again}"
        u = node.uuids()
        assert h.kubelet.allocate("nvidia.com/gpu", [u[4]]).envs["NVIDIA_VISIBLE_DEVICES"] == u[4]
    assert agent.alive()


# ------------------------------------------------------------------------------- config reload

def _count(n):
    return lambda devs: len(devs) == n


def test_sighup_reload(h):
    node = h.node(T4X2)
    agent = h.agent(node, TS2, resources=["nvidia.com/gpu"])
    pid = agent.pid
    assert len(h.latest("nvidia.com/gpu")) == 4
    # SIGHUP with an unchanged file: still alive, still serving the same devices.
    agent.signal(signal.SIGHUP)
    time.sleep(1.0)
    assert agent.alive() and agent.pid == pid
    assert len(h.latest("nvidia.com/gpu")) == 4
    # t before the write: the file watch may reload before the signal arrives
    t = time.monotonic()
    h.write("policy.yaml", TS4)
    agent.signal(signal.SIGHUP)
    msg = h.kubelet.wait_for("nvidia.com/gpu", _count(8), after=t, timeout=5)
    u = node.uuids()
    assert ids(msg.devices) == sorted(f"{g}::{n}" for g in u for n in range(4))
    assert agent.alive() and agent.pid == pid
    assert h.kubelet.allocate("nvidia.com/gpu", [f"{u[1]}::3"]).envs["NVIDIA_VISIBLE_DEVICES"] == u[1]


def test_file_change_reload(h):
    node = h.node(T4X2)
    agent = h.agent(node, TS2, resources=["nvidia.com/gpu"])
    # Rewritten in place.
    t = time.monotonic()
    with open(agent.policy, "w") as f:
        f.write(TS4)
    h.kubelet.wait_for("nvidia.com/gpu", _count(8), after=t, timeout=5)
    # Replaced atomically (as a ConfigMap update does).
    t = time.monotonic()
    tmp = agent.policy + ".new"
    with open(tmp, "w") as f:
        f.write(ts_policy(3))
    os.replace(tmp, agent.policy)
    h.kubelet.wait_for("nvidia.com/gpu", _count(6), after=t, timeout=5)
    assert agent.alive()


def test_bad_file_reload_keeps_old_policy(h):
    node = h.node(T4X2)
    agent = h.agent(node, TS2, resources=["nvidia.com/gpu"])
    good = ids(h.latest("nvidia.com/gpu"))
    t = time.monotonic()
    with open(agent.policy, "w") as f:
        f.write(BAD_TS)
    agent.signal(signal.SIGHUP)
    line = agent.wait_log(r"level=error .*policy\.yaml:\d+:\d+", timeout=5)
    assert re.match(r'^\S+ level=error msg="', line), line
    m = re.search(r"policy\.yaml:(\d+):(\d+)", line)
    assert int(m.group(1)) == BAD_LINE and int(m.group(2)) in BAD_COLS, line
    time.sleep(1.0)
    assert agent.alive()
    assert ids(h.latest("nvidia.com/gpu")) == good, "the old policy stays in force"
    assert all(ids(msg.devices) == good for msg in h.kubelet.messages("nvidia.com/gpu") if msg.time > t)
    # A good file afterwards is applied.
    t = time.monotonic()
    with open(agent.policy, "w") as f:
        f.write(TS4)
    h.kubelet.wait_for("nvidia.com/gpu", _count(8), after=t, timeout=5)


# ------------------------------------------------------------------------------- health

def _gpu_health(devs, uuid):
    return {d.health for d in devs if phys(d.id) == uuid}


def test_xid_unhealthy_within_1s_then_recovers(h):
    node = h.node(T4X2)
    u = node.uuids()
    health = "    recoveryQuietPeriod: 2s\n"
    h.agent(node, ts_policy(2, health=health), resources=["nvidia.com/gpu"])
    t_before = time.monotonic()
    node.run("sim", "xid", "0", "79")
    t_inject = time.monotonic()
    msg = h.kubelet.wait_for("nvidia.com/gpu", lambda devs: _gpu_health(devs, u[0]) == {UNHEALTHY},
                             after=t_before, timeout=5)
    assert msg.time - t_inject < 1.0, f"Unhealthy after {msg.time - t_inject:.2f} s"
    assert len(msg.devices) == 4
    assert _gpu_health(msg.devices, u[1]) == {HEALTHY}
    rec = h.kubelet.wait_for("nvidia.com/gpu", lambda devs: {d.health for d in devs} == {HEALTHY},
                             after=msg.time, timeout=10)
    assert rec.time - t_before >= 1.8, f"recovered after {rec.time - t_before:.2f} s, quiet period is 2 s"
    assert rec.time - t_inject < 5.0


def test_xid_on_mig_gpu(h):
    node = h.node(H100_L4)
    u = node.uuids()
    m0 = node.mig_create(0, "1g.10gb", 0)
    m1 = node.mig_create(1, "1g.10gb", 0)
    h.agent(node, MIXED, resources=["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"])
    t = time.monotonic()
    node.run("sim", "xid", "0", "48")
    msg = h.kubelet.wait_for("nvidia.com/mig-1g.10gb",
                             lambda devs: {d.id: d.health for d in devs}.get(m0) == UNHEALTHY, after=t, timeout=5)
    assert msg.time - t < 1.5
    assert msg.health()[m1] == HEALTHY
    assert {d.health for d in h.latest("nvidia.com/gpu")} == {HEALTHY}
    t = time.monotonic()
    node.run("sim", "xid", "4", "79")
    msg = h.kubelet.wait_for("nvidia.com/gpu", lambda devs: _gpu_health(devs, u[4]) == {UNHEALTHY},
                             after=t, timeout=5)
    assert _gpu_health(msg.devices, u[5]) == {HEALTHY}


def test_ignored_xids(h):
    node = h.node(T4X2)
    u = node.uuids()
    h.agent(node, WHOLE, resources=["nvidia.com/gpu"])
    for xid in (13, 31, 43, 45, 68, 109):
        node.run("sim", "xid", "0", str(xid))
    time.sleep(1.5)
    assert all(d.health == HEALTHY for m in h.kubelet.messages("nvidia.com/gpu") for d in m.devices)
    # The event path works: a critical Xid is seen.
    t = time.monotonic()
    node.run("sim", "xid", "0", "79")
    msg = h.kubelet.wait_for("nvidia.com/gpu", lambda devs: _gpu_health(devs, u[0]) == {UNHEALTHY}, after=t, timeout=5)
    assert msg.time - t < 1.5


def test_custom_ignored_xids(h):
    node = h.node(T4X2)
    u = node.uuids()
    policy = WHOLE + "gpuslice:\n  health:\n    ignoredXids: [79]\n"
    h.agent(node, policy, resources=["nvidia.com/gpu"])
    node.run("sim", "xid", "1", "79")
    time.sleep(1.5)
    assert {d.health for d in h.latest("nvidia.com/gpu")} == {HEALTHY}
    t = time.monotonic()
    node.run("sim", "xid", "1", "48")
    msg = h.kubelet.wait_for("nvidia.com/gpu", lambda devs: _gpu_health(devs, u[1]) == {UNHEALTHY}, after=t, timeout=5)
    assert _gpu_health(msg.devices, u[0]) == {HEALTHY}


def test_gpu_lost(h):
    node = h.node(T4X2)
    u = node.uuids()
    h.agent(node, TS2, resources=["nvidia.com/gpu"])
    t = time.monotonic()
    node.run("sim", "gpu-lost", "1")
    msg = h.kubelet.wait_for("nvidia.com/gpu", lambda devs: _gpu_health(devs, u[1]) == {UNHEALTHY},
                             after=t, timeout=5)
    assert msg.time - t < 5 * POLL_MS / 1000 + 1.0
    assert _gpu_health(msg.devices, u[0]) == {HEALTHY}
    assert len(msg.devices) == 4, "a lost GPU's devices stay listed, as Unhealthy"


# ------------------------------------------------------------------------------- MIG changes at run time

def test_mig_changes_readvertised(h):
    node = h.node(H100_L4)
    m0 = node.mig_create(0, "1g.10gb", 0)
    agent = h.agent(node, MIXED, resources=["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"])
    pid = agent.pid
    t = time.monotonic()
    m1 = node.mig_create(0, "1g.10gb", 1)
    h.kubelet.wait_for("nvidia.com/mig-1g.10gb", lambda devs: ids(devs) == sorted([m0, m1]), after=t, timeout=3)
    # A profile not advertised before: a new resource is registered.
    m2 = node.mig_create(1, "2g.20gb", 0)
    agent.wait_resources(["nvidia.com/mig-2g.20gb"], timeout=3)
    assert ids(h.latest("nvidia.com/mig-2g.20gb")) == [m2]
    assert h.kubelet.registrations[-1].endpoint == "gpuslice-nvidia.com_mig-2g.20gb.sock"
    # Destroy the first instance.
    t = time.monotonic()
    node.mig_destroy(0, node.mig_device(m0)["gi_id"])
    h.kubelet.wait_for("nvidia.com/mig-1g.10gb", lambda devs: ids(devs) == [m1], after=t, timeout=3)
    assert h.kubelet.allocate("nvidia.com/mig-1g.10gb", [m1]).envs["NVIDIA_VISIBLE_DEVICES"] == m1
    with pytest.raises(grpc.RpcError) as err:
        h.kubelet.allocate("nvidia.com/mig-1g.10gb", [m0])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert agent.alive() and agent.pid == pid


def test_gone_resource_gets_an_empty_list_then_stops(h):
    """A resource that leaves the plan (its only MIG instance destroyed) first sends an empty
    device list on its stream, so the kubelet withdraws its devices at once, and stops serving once
    the stream has it: the stream ends and its socket is removed; the other resource stays."""
    node = h.node(H100_L4)
    m0 = node.mig_create(0, "1g.10gb", 0)
    a = h.agent(node, MIXED, resources=["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"])
    sock = os.path.join(h.kdir, sock_name("nvidia.com/mig-1g.10gb"))
    assert os.path.exists(sock)
    t = time.monotonic()
    node.mig_destroy(0, node.mig_device(m0)["gi_id"])
    h.kubelet.wait_for("nvidia.com/mig-1g.10gb", lambda devs: devs == [], after=t, timeout=3)
    h.kubelet.wait_disconnected("nvidia.com/mig-1g.10gb", timeout=3)
    a.wait_log(r"Stopped serving nvidia.com/mig-1g.10gb", timeout=3)
    assert not os.path.exists(sock)
    gpu = ids(h.latest("nvidia.com/gpu"))
    assert gpu and h.kubelet.allocate("nvidia.com/gpu", gpu[:1]).envs["NVIDIA_VISIBLE_DEVICES"] == gpu[0]


def test_deleted_socket_served_again(h):
    """A plugin socket deleted (the kubelet's clean-up does that) is made again and registered
    again, and the new stream lists the devices; kubelet.sock itself did not change."""
    node = h.node(T4X2)
    a = h.agent(node, WHOLE, resources=["nvidia.com/gpu"])
    sock = os.path.join(h.kdir, sock_name("nvidia.com/gpu"))
    t = time.monotonic()
    os.unlink(sock)
    h.kubelet.wait_registration("nvidia.com/gpu", timeout=5, after=t)
    h.kubelet.wait_for("nvidia.com/gpu", lambda devs: ids(devs) == sorted(node.uuids()), after=t, timeout=5)
    assert os.path.exists(sock)
    a.wait_log(r"Socket .*gpuslice-nvidia.com_gpu.sock was deleted")
    assert h.kubelet.allocate("nvidia.com/gpu", [node.uuids()[1]]).envs["NVIDIA_VISIBLE_DEVICES"] == node.uuids()[1]


# ------------------------------------------------------------------------------- process life cycle

def test_sigterm_exits_0_and_removes_sockets(h):
    node = h.node(T4X2)
    agent = h.agent(node, ts_policy(2, rename=True), resources=["nvidia.com/gpu.shared"])
    assert "gpuslice-nvidia.com_gpu.shared.sock" in os.listdir(h.kdir)
    assert agent.stop(timeout=5) == 0, agent.log()
    assert sorted(os.listdir(h.kdir)) == ["kubelet.sock"]
    h.kubelet.wait_disconnected("nvidia.com/gpu.shared", timeout=3)


def test_bad_policy_at_start(h):
    node = h.node(T4X2)
    agent = h.agent(node, BAD_TS)
    rc = agent.wait_exit(10)
    assert rc == 1, agent.log()
    m = re.search(r"policy\.yaml:(\d+):(\d+)", agent.log())
    assert m, agent.log()
    assert int(m.group(1)) == BAD_LINE and int(m.group(2)) in BAD_COLS, agent.log()
    assert h.kubelet.registrations == []
    assert sorted(os.listdir(h.kdir)) == ["kubelet.sock"]


def test_apply_json(h):
    node = h.node(T4X2)
    u = node.uuids()
    policy = h.write("p.yaml", ts_policy(2, rename=True))
    doc = json.loads(node.run("apply", "--config", policy, "--json").stdout)
    assert doc["schema"] == "gpuslice.apply/v1"
    assert [r["name"] for r in doc["resources"]] == ["nvidia.com/gpu.shared"]
    devs = doc["resources"][0]["devices"]
    assert sorted(d["id"] for d in devs) == sorted(f"{g}::{n}" for g in u for n in range(2))
    for d in devs:
        assert d["kind"] == "replica" and d["health"] == "Healthy"
        assert u[d["gpu"]] == phys(d["id"])
    bad = h.write("bad.yaml", BAD_TS)
    p = node.run("apply", "--config", bad, "--json", check=1)
    assert f"bad.yaml:{BAD_LINE}:" in p.stderr


# ------------------------------------------------------------------------------- MIG layouts in the agent

H100X2 = "gpus:\n  - model: H100-SXM5-80GB\n    count: 2\n    mig: enabled\n"


def _mig_policy(config, force=False):
    return (f"version: v1\nflags:\n  migStrategy: mixed\ngpuslice:\n  mig:\n    config: {config}\n"
            f"    force: {'true' if force else 'false'}\n")


def _status(path):
    with open(path) as f:
        return json.load(f)


def test_agent_applies_mig_layout_and_readvertises(h):
    node = h.node(H100X2)
    status = os.path.join(h.base, "mig-status.json")
    names = ["nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb"]
    agent = h.agent(node, _mig_policy("all-balanced"), resources=names, extra=["--mig-status-file", status])
    assert len(h.latest("nvidia.com/mig-1g.10gb")) == 4      # 2 per GPU
    assert len(h.latest("nvidia.com/mig-3g.40gb")) == 2
    st = _status(status)
    assert st["state"] == "applied" and st["config"] == "all-balanced"
    kept_1g = set(ids(h.latest("nvidia.com/mig-1g.10gb")))
    gone_3g = set(ids(h.latest("nvidia.com/mig-3g.40gb")))
    # New layout: 7 x 1g per GPU. The 3g and 2g devices are withdrawn from ListAndWatch before their
    # instances are destroyed, the two 1g instances per GPU stay (same UUIDs), five new ones appear.
    t = time.monotonic()
    h.write("policy.yaml", _mig_policy("all-1g.10gb"))
    agent.signal(signal.SIGHUP)
    msg = h.kubelet.wait_for("nvidia.com/mig-1g.10gb", lambda d: len(d) == 14, timeout=10, after=t)
    assert kept_1g <= set(ids(msg.devices))
    withdrawn = h.kubelet.wait_for("nvidia.com/mig-3g.40gb", lambda d: len(d) == 0, timeout=5, after=t)
    assert withdrawn.time <= msg.time, "3g devices withdrawn before the new 1g devices appear"
    inst = node.inspect()
    assert all(d["uuid"] not in gone_3g for g in inst["gpus"] for d in g["mig"]["devices"])
    assert _status(status)["state"] == "applied"
    # 5 new GPU instances per GPU, each with its compute instance; 2g and 3g (GI + CI) destroyed
    agent.wait_log("MIG layout all-1g.10gb applied: 20 created, 8 destroyed, 4 kept")


def test_agent_mig_layout_blocked_by_process(h):
    node = h.node(H100X2)
    status = os.path.join(h.base, "mig-status.json")
    h.agent(node, _mig_policy("all-balanced"), resources=["nvidia.com/mig-3g.40gb"], extra=["--mig-status-file", status])
    gi = [d for d in node.inspect()["gpus"][0]["mig"]["devices"] if d["profile"] == "3g.40gb"][0]["gi_id"]
    node.run("sim", "process", "add", "--gpu", "0", "--gi", str(gi), "--pid", "4242", "--mem", "1GiB")
    before = node.inspect()
    agent = h.agents[0]
    h.write("policy.yaml", _mig_policy("all-1g.10gb"))
    agent.signal(signal.SIGHUP)
    agent.wait_log("MIG layout all-1g.10gb failed")
    st = _status(status)
    assert st["state"] == "failed" and "4242" in st["reason"] and "--force" in st["reason"]
    after = node.inspect()
    assert [g["mig"]["devices"] for g in before["gpus"]] == [g["mig"]["devices"] for g in after["gpus"]]
    # Nothing was destroyed, so the devices come back in the listing (withdrawal is undone).
    h.kubelet.wait_for("nvidia.com/mig-3g.40gb", lambda d: len(d) == 2, timeout=5)


def test_agent_bad_mig_layout_file(h):
    node = h.node(H100X2)
    status = os.path.join(h.base, "mig-status.json")
    bad = h.write("mig.yaml", "version: v1\nmig-configs:\n  mine:\n    - devices: all\n      mig-enabled: true\n"
                             "      mig-devices: {\"1g.5gb\": 2}\n")
    policy = _mig_policy("mine") + f"    layoutFile: {bad}\n"
    agent = h.agent(node, policy, extra=["--mig-status-file", status])
    line = agent.wait_log("MIG layout mine not applied")
    assert "has no MIG profile 1g.5gb" in line and "mig.yaml:6:21:" in line  # at the profile key
    assert _status(status)["state"] == "failed"
    assert all(not g["mig"]["gpu_instances"] for g in node.inspect()["gpus"])


# ------------------------------------------------------------------------------- guard files of gone pods

def _guard_dirs(root):
    return sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))) if os.path.isdir(root) else []


def _guard_dir_of(resp):
    conf = {m.container_path: m.host_path for m in resp.mounts}["/etc/gpuslice/guard.conf"]
    return os.path.basename(os.path.dirname(conf))


def _wait(cond, timeout, what, agent):
    wait.until(cond, timeout=timeout, what=what, detail=agent.log)


def _gc_agent(h, node, root, pr, grace_ms):
    return h.agent(node, GUARD_POLICY, resources=["nvidia.com/gpu"],
                   extra=["--guard-root", root, "--pod-resources-socket", pr.socket_path,
                          "--guard-gc-interval-ms", "100", "--guard-grace-ms", grace_ms])


GUARD_POLICY = ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                "    - name: nvidia.com/gpu\n      replicas: 4\n      memoryPerReplica: 2GiB\n")


def test_guard_files_of_gone_pods_removed(h):
    from podresources_emulator import PodResourcesEmulator
    node = h.node(T4X2)
    u = node.uuids()
    root = os.path.join(h.base, "guard")
    pr = PodResourcesEmulator(os.path.join(h.base, "pr.sock")).start()
    try:
        pr.set([("default", "keep", "main", "nvidia.com/gpu", [f"{u[0]}::0", f"{u[0]}::1"]),
                ("default", "other", "main", "example.com/fpga", [f"{u[1]}::2"])])
        a = _gc_agent(h, node, root, pr, "0")
        keep = _guard_dir_of(h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::0", f"{u[0]}::1"]))
        # same device ID as the fpga pod, but another resource: not a match
        gone = _guard_dir_of(h.kubelet.allocate("nvidia.com/gpu", [f"{u[1]}::2"]))
        _wait(lambda: gone not in _guard_dirs(root), 5, f"guard dir {gone} of a gone pod not removed", a)
        calls = pr.calls
        _wait(lambda: pr.calls >= calls + 3, 5, "PodResources not asked again", a)
        assert _guard_dirs(root) == [keep]
        assert os.path.exists(os.path.join(root, "ld.so.preload"))  # shared by all pods: kept
        a.wait_log(r"Removed the guard files of a pod that is gone: .*" + gone)
        pr.set([])
        _wait(lambda: _guard_dirs(root) == [], 5, f"guard dir {keep} not removed after its pod went", a)
        assert a.alive()
    finally:
        pr.stop()


def test_guard_files_kept_when_pod_resources_unavailable(h):
    from podresources_emulator import PodResourcesEmulator
    node = h.node(T4X2)
    u = node.uuids()
    root = os.path.join(h.base, "guard")
    pr = PodResourcesEmulator(os.path.join(h.base, "pr.sock")).start()
    pr.status = grpc.StatusCode.RESOURCE_EXHAUSTED
    try:
        a = _gc_agent(h, node, root, pr, "0")
        d = _guard_dir_of(h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::0"]))
        _wait(lambda: pr.calls >= 3, 5, "PodResources not asked", a)
        assert _guard_dirs(root) == [d]          # an error answer removes nothing
        pr.stop()
        time.sleep(0.6)                              # no socket at all: nothing removed either
        assert _guard_dirs(root) == [d] and a.alive()
    finally:
        pr.stop()


def test_guard_files_kept_during_grace(h):
    from podresources_emulator import PodResourcesEmulator
    node = h.node(T4X2)
    u = node.uuids()
    root = os.path.join(h.base, "guard")
    pr = PodResourcesEmulator(os.path.join(h.base, "pr.sock")).start()
    try:
        a = _gc_agent(h, node, root, pr, "60000")
        d = _guard_dir_of(h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::0"]))
        time.sleep(0.8)                              # the pod is not listed yet, but the files are new
        assert _guard_dirs(root) == [d] and a.alive()
    finally:
        pr.stop()


# ------------------------------------------------------------------------------- guard counters vs NVML

# guard/guard_region.h, version 2: header (4 x u32), the lock (64 bytes), 4 x u32 and a u64, 16
# device counters (5 x u64), 1024 process slots (i32 pid, u32 pad, u64 start time, 16 x u64 used).
REGION_VERSION = 2
REGION_DEV = 16 + 64 + 4 * 4 + 8
REGION_SIZE = REGION_DEV + 16 * 5 * 8 + 1024 * (8 + 8 + 16 * 8)


def _write_region(path, used0):
    import struct
    buf = bytearray(REGION_SIZE)
    struct.pack_into("<IIII", buf, 0, 0x47534752, REGION_VERSION, REGION_SIZE, 16)
    struct.pack_into("<Q", buf, REGION_DEV, used0)  # dev[0].used
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(buf)


def _mapper(path):
    """A process that maps the region as a guarded container process does (until killed)."""
    code = ("import mmap, sys, time\n"
            "f = open(sys.argv[1], 'r+b'); m = mmap.mmap(f.fileno(), 0)\n"
            "print('mapped', flush=True); time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code, path], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "mapped"
    return p


def test_guard_counters_reconciled_with_nvml(h):
    node = h.node(T4X2)
    u = node.uuids()
    root = os.path.join(h.base, "guard")
    a = h.agent(node, GUARD_POLICY, resources=["nvidia.com/gpu"],
                extra=["--guard-root", root, "--guard-reconcile-interval-ms", "100", "--guard-gc-interval-ms", "0"])
    d = _guard_dir_of(h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::1"]))
    other = _guard_dir_of(h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::2"]))
    region = os.path.join(root, d, "state", "region")
    _write_region(region, 1 << 30)                      # the guard counted 1 GiB
    _write_region(os.path.join(root, other, "state", "region"), 0)
    procs = [_mapper(region), _mapper(region)]
    bystander = subprocess.Popen(["sleep", "60"])       # on the GPU, but not in the container
    try:
        node.run("sim", "process", "add", "--gpu", "0", "--pid", str(procs[0].pid), "--mem", "1GiB")
        node.run("sim", "process", "add", "--gpu", "0", "--pid", str(procs[1].pid), "--mem", "512MiB")
        node.run("sim", "process", "add", "--gpu", "0", "--pid", str(bystander.pid), "--mem", "4GiB")
        line = a.wait_log(r"Guard reconcile: allocation " + d + " on " + u[0] + r": .*")
        assert "the guard counted 1024 MiB, NVML reports 1536 MiB" in line, line
        assert f"{procs[0].pid}" in line and f"{procs[1].pid}" in line and str(bystander.pid) not in line
        assert "+512 MiB allocated through paths the guard does not see" in line
        m = _samples(_scrape(a))
        nopod = ',namespace="",pod="",container=""'   # no PodResources here: not attributed
        key = 'allocation="%s",UUID="%s"' % (d, u[0]) + nopod
        assert m["gpuslice_guard_memory_used_bytes{%s}" % key] == 1 << 30
        assert m["gpuslice_guard_memory_nvml_bytes{%s}" % key] == 1536 << 20
        assert m["gpuslice_guard_memory_limit_bytes{%s}" % key] == 2 << 30
        okey = 'allocation="%s",UUID="%s"' % (other, u[0]) + nopod
        assert m["gpuslice_guard_memory_nvml_bytes{%s}" % okey] == 0   # no process of its own
        assert "Guard reconcile: allocation " + other not in a.log()
        # The counts agree again once the untracked memory is gone; said once.
        node.run("sim", "process", "remove", "--pid", str(procs[1].pid))
        a.wait_log(r"Guard reconcile: allocation " + d + r" .*agrees with NVML again \(1024 MiB\)")
        time.sleep(0.5)
        assert len(re.findall(r"allocation " + d + " on", a.log())) == 2   # not repeated every pass
        assert a.alive()
    finally:
        for p in procs + [bystander]:
            p.kill()
            p.wait()


def test_metrics_attributed_to_pods(h):
    """PodResources (an emulator built on python3-grpcio) says which pod holds which device: the
    metrics carry namespace/pod/container, for devices and for the guard's figures."""
    from podresources_emulator import PodResourcesEmulator
    node = h.node(T4X2)
    u = node.uuids()
    root = os.path.join(h.base, "guard")
    pr = PodResourcesEmulator(os.path.join(h.base, "pr.sock")).start()
    try:
        pr.set([("ml", "trainer-0", "main", "nvidia.com/gpu", [f"{u[0]}::1"]),
                ("ml", "trainer-0", "sidecar", "example.com/fpga", ["fpga0"]),        # not ours: left out
                ("web", "ghost", "main", "nvidia.com/gpu", ["GPU-not-on-this-node::0"])])
        a = h.agent(node, GUARD_POLICY, resources=["nvidia.com/gpu"],
                    extra=["--guard-root", root, "--pod-resources-socket", pr.socket_path,
                           "--pod-attribution-interval-ms", "100", "--guard-reconcile-interval-ms", "100",
                           "--guard-gc-interval-ms", "0"])
        d = _guard_dir_of(h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::1"]))
        _write_region(os.path.join(root, d, "state", "region"), 1 << 30)
        info = f'gpuslice_pod_device_info{{namespace="ml",pod="trainer-0",container="main",resource="nvidia.com/gpu",device="{u[0]}::1"}}'
        guard = ('gpuslice_guard_memory_used_bytes{allocation="%s",UUID="%s",namespace="ml",pod="trainer-0",'
                 'container="main"}' % (d, u[0]))
        _wait(lambda: _samples(_scrape(a)).get(guard) == 1 << 30, 5, "guard metrics not attributed", a)
        m = _samples(_scrape(a))
        assert m[info] == 1
        assert not [k for k in m if k.startswith("gpuslice_pod_device_info") and k != info]
        calls = pr.calls
        time.sleep(0.5)
        assert 2 <= pr.calls - calls <= 8, "PodResources asked about every 100 ms"  # rate-limited by the interval
        # PodResources gone: said once, attribution dropped rather than kept stale
        pr.stop()
        a.wait_log(r"No pod attribution in the metrics: ")
        _wait(lambda: info not in _samples(_scrape(a)), 5, "stale attribution kept", a)
        assert a.alive()
    finally:
        pr.stop()


def test_guard_reconcile_skips_damaged_regions(h):
    node = h.node(T4X2)
    u = node.uuids()
    root = os.path.join(h.base, "guard")
    a = h.agent(node, GUARD_POLICY, resources=["nvidia.com/gpu"],
                extra=["--guard-root", root, "--guard-reconcile-interval-ms", "100"])
    d = _guard_dir_of(h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::1"]))
    region = os.path.join(root, d, "state", "region")
    os.makedirs(os.path.dirname(region), exist_ok=True)
    with open(region, "wb") as f:                       # a container wrote garbage over its region
        f.write(b"\xff" * REGION_SIZE)
    p = _mapper(region)
    try:
        node.run("sim", "process", "add", "--gpu", "0", "--pid", str(p.pid), "--mem", "1GiB")
        time.sleep(0.6)
        assert "Guard reconcile: allocation" not in a.log() and a.alive()
        with open(region, "r+b") as f:                  # truncated
            f.truncate(100)
        time.sleep(0.4)
        assert a.alive()
        assert "gpuslice_guard_memory_used_bytes{" not in _scrape(a)
    finally:
        p.kill()
        p.wait()


# ------------------------------------------------------------------------------- CDI

PROC_DEVICES = "Character devices:\n  1 mem\n195 nvidia-frontend\n235 nvidia-caps\n509 nvidia-uvm\n\nBlock devices:\n"


def _proc_root(h, minors=""):
    proc = os.path.join(h.base, "proc")
    os.makedirs(os.path.join(proc, "driver", "nvidia-caps"), exist_ok=True)
    with open(os.path.join(proc, "devices"), "w") as f:
        f.write(PROC_DEVICES)
    with open(os.path.join(proc, "driver", "nvidia-caps", "mig-minors"), "w") as f:
        f.write("config 1\nmonitor 2\n" + minors)
    return proc


def _cdi_policy(strategies):
    return ("version: v1\nflags:\n  plugin:\n    deviceListStrategy: [" + ", ".join(strategies) + "]\n"
            "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n")


def _spec(agent):
    with open(os.path.join(agent.cdi_root, "gpuslice.json")) as f:
        return json.load(f)


def test_cdi_spec_written_and_cdi_cri(h):
    from test_cdi import validator
    node = h.node(T4X2)
    u = node.uuids()
    a = h.agent(node, _cdi_policy(["cdi-cri", "cdi-annotations"]), resources=["nvidia.com/gpu"],
                extra=["--proc-root", _proc_root(h)])
    spec = _spec(a)
    assert not list(validator().iter_errors(spec))
    assert spec["kind"] == "gpuslice.io/gpu"
    names = {d["name"] for d in spec["devices"]}
    assert {u[0], u[1], "0", "1"} <= names
    assert not [f for f in os.listdir(a.cdi_root) if f != "gpuslice.json"]  # the temporary file renamed
    r = h.kubelet.allocate("nvidia.com/gpu", [f"{u[1]}::0"])
    assert [d.name for d in r.cdi_devices] == [f"gpuslice.io/gpu={u[1]}"]
    assert dict(r.annotations) == {f"cdi.k8s.io/gpuslice_{u[1]}__0": f"gpuslice.io/gpu={u[1]}"}
    assert "NVIDIA_VISIBLE_DEVICES" not in r.envs     # the runtime gets the devices through CDI only
    assert all(d.name.split("=", 1)[1] in names for d in r.cdi_devices)
    a.wait_log(r"CDI spec written to .*gpuslice.json")


def test_cdi_with_envvar_and_a_custom_kind(h):
    node = h.node(T4X2)
    u = node.uuids()
    a = h.agent(node, _cdi_policy(["envvar", "cdi-cri"]), resources=["nvidia.com/gpu"],
                extra=["--proc-root", _proc_root(h), "--cdi-kind", "example.com/gpu"])
    assert _spec(a)["kind"] == "example.com/gpu"
    r = h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::0", f"{u[0]}::1"])
    assert [d.name for d in r.cdi_devices] == [f"example.com/gpu={u[0]}"]   # one GPU, named once
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == u[0] and not r.annotations


def test_cdi_spec_follows_mig_changes(h):
    node = h.node(H100_L4)
    policy = "version: v1\nflags:\n  migStrategy: mixed\n  plugin:\n    deviceListStrategy: cdi-cri\n"
    proc = _proc_root(h)
    a = h.agent(node, policy, resources=["nvidia.com/gpu"], extra=["--proc-root", proc])
    before = {d["name"] for d in _spec(a)["devices"]}
    mig = node.mig_create(0, "1g.10gb", 0)
    h.kubelet.wait_resources(["nvidia.com/mig-1g.10gb"], timeout=10)
    # mig-minors lacks the new instance: no spec, and Allocate says why instead of naming a
    # device the runtime cannot resolve
    a.wait_log(r"CDI spec not written: MIG device " + mig + r" .*its capability minors are not in mig-minors")
    with pytest.raises(grpc.RpcError) as e:
        h.kubelet.allocate("nvidia.com/mig-1g.10gb", [mig])
    assert f"device {mig} is not in the CDI spec yet (MIG device {mig}" in e.value.details(), e.value.details()
    d = node.mig_device(mig)
    with open(os.path.join(proc, "driver", "nvidia-caps", "mig-minors"), "a") as f:
        f.write(f"gpu{d['minor']}/gi{d['gi_id']}/access 90\ngpu{d['minor']}/gi{d['gi_id']}/ci{d['ci_id']}/access 91\n")
    _wait(lambda: mig in {x["name"] for x in _spec(a)["devices"]}, 5, "MIG device not in the CDI spec", a)
    a.wait_log(r"CDI spec can be written again")
    r = h.kubelet.allocate("nvidia.com/mig-1g.10gb", [mig])
    assert [d.name for d in r.cdi_devices] == [f"gpuslice.io/gpu={mig}"]
    dev = next(d for d in _spec(a)["devices"] if d["name"] == mig)
    assert "/dev/nvidia-caps/nvidia-cap90" in [n["path"] for n in dev["containerEdits"]["deviceNodes"]]
    assert before < {d["name"] for d in _spec(a)["devices"]}


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the fake driver root uses the x86_64 library directory")
def test_cdi_driver_files_seen_through_the_container_mount(h):
    """In its pod the agent sees the host's driver root (nvidiaDriverRoot) mounted elsewhere
    (--container-driver-root): it reads the linker cache there and writes host paths."""
    from test_cdi import fake_driver_root
    node = h.node(T4X2)
    mounted = fake_driver_root(h.base)
    policy = "version: v1\nflags:\n  nvidiaDriverRoot: /run/nvidia/driver\n  plugin:\n    deviceListStrategy: cdi-cri\n"
    a = h.agent(node, policy, resources=["nvidia.com/gpu"],
                extra=["--proc-root", _proc_root(h), "--container-driver-root", mounted])
    mounts = {m["containerPath"]: m["hostPath"] for m in _spec(a)["containerEdits"]["mounts"]}
    assert mounts["/usr/local/nvidia/lib64/libcuda.so.1"] == "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libcuda.so.1"
    assert mounts["/usr/local/nvidia/bin/nvidia-smi"] == "/run/nvidia/driver/usr/bin/nvidia-smi"
    a.wait_log(r"CDI spec written to .* \(4 driver files from /run/nvidia/driver, read at " + re.escape(mounted) + r"\)")


def _transient(agent, name):
    with open(os.path.join(agent.cdi_root, f"gpuslice.io-gpu_{name}.json")) as f:
        return json.load(f)


def test_cdi_guard_edits_in_a_transient_spec(h):
    """With cdi-cri the guard's files and environment are in a per-allocation spec named in the
    answer, not also in the answer's mounts (the runtime would mount them twice); the spec goes
    with the pod."""
    from podresources_emulator import PodResourcesEmulator
    from test_cdi import validator
    node = h.node(T4X2)
    u = node.uuids()
    pr = PodResourcesEmulator(os.path.join(h.base, "pr.sock")).start()
    try:
        policy = _cdi_policy(["cdi-cri"]) + "      memoryPerReplica: 4GiB\n"
        a = h.agent(node, policy, resources=["nvidia.com/gpu"],
                    extra=["--proc-root", _proc_root(h), "--guard-root", os.path.join(h.base, "guard"),
                           "--pod-resources-socket", pr.socket_path, "--guard-gc-interval-ms", "100",
                           "--guard-grace-ms", "0"])
        pr.set([("default", "p", "main", "nvidia.com/gpu", [f"{u[0]}::1"])])
        r = h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::1"])
        names = [d.name for d in r.cdi_devices]
        assert names[0] == f"gpuslice.io/gpu={u[0]}" and names[1].startswith("gpuslice.io/gpu=alloc-") and len(names) == 2
        assert not r.mounts and not r.envs
        alloc = names[1].split("=", 1)[1]
        spec = _transient(a, alloc)
        assert not list(validator().iter_errors(spec))
        (dev,) = spec["devices"]
        assert dev["name"] == alloc
        edits = dev["containerEdits"]
        assert edits["env"] == ["GPUSLICE_GUARD_CONFIG=/etc/gpuslice/guard.conf"]
        mounts = {m["containerPath"]: m for m in edits["mounts"]}
        assert set(mounts) == {"/usr/lib/gpuslice/libgpuslice-guard.so", "/etc/gpuslice/guard.conf",
                               "/run/gpuslice/guard", "/etc/ld.so.preload"}
        assert mounts["/run/gpuslice/guard"]["options"][0] == "rw" and mounts["/etc/gpuslice/guard.conf"]["options"][0] == "ro"
        with open(mounts["/etc/gpuslice/guard.conf"]["hostPath"]) as f:
            assert f"device 0 {u[0]} {4 << 30} 0" in f.read().splitlines()
        # the pod goes: its transient spec goes too (the node's spec stays)
        pr.set([])
        _wait(lambda: not os.path.exists(os.path.join(a.cdi_root, f"gpuslice.io-gpu_{alloc}.json")), 5,
              "transient CDI spec of a gone pod not removed", a)
        assert not os.path.exists(os.path.join(a.cdi_root, f"gpuslice.io-gpu_{alloc}.devices"))
        assert os.path.exists(os.path.join(a.cdi_root, "gpuslice.json"))
        a.wait_log(r"Removed the CDI spec of a pod that is gone")
    finally:
        pr.stop()


def test_cdi_spec_not_written_without_driver(h):
    node = h.node(T4X2)
    proc = os.path.join(h.base, "noproc")
    os.makedirs(proc)
    a = h.agent(node, WHOLE, resources=["nvidia.com/gpu"], extra=["--proc-root", proc])
    a.wait_log(r"CDI spec not written: cannot read .*/noproc/devices")
    time.sleep(0.5)
    assert len(re.findall("CDI spec not written", a.log())) == 1   # said once, not at every pass
    assert not os.path.exists(os.path.join(a.cdi_root, "gpuslice.json")) and a.alive()


# ------------------------------------------------------------------------------- node labels (NFD features file)

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_KEY = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _labels(path):
    with open(path) as f:
        lines = f.read().splitlines()
    out = {}
    for line in lines:
        k, _, v = line.partition("=")
        assert LABEL_KEY.match(k) and len(k.split("/")[1]) <= 63, f"bad label key {k!r}"
        assert LABEL_VALUE.match(v) and len(v) <= 63, f"bad label value {v!r} of {k}"
        out[k] = v
    assert list(out) == sorted(out)
    return out


def test_labels_time_slicing_then_reload(h):
    node = h.node(T4X2)
    a = h.agent(node, ts_policy(4), resources=["nvidia.com/gpu"])
    _wait(lambda: os.path.exists(a.features), 5, "features file not written", a)
    l = _labels(a.features)
    assert l["gpuslice.io/gpu.product"] == "Tesla-T4-SHARED"
    assert l["gpuslice.io/gpu.count"] == "2" and l["gpuslice.io/gpu.replicas"] == "4"
    assert l["gpuslice.io/gpu.sharing-strategy"] == "time-slicing"
    assert l["gpuslice.io/gpu.memory"] == "15360" and l["gpuslice.io/gpu.family"] == "turing"
    assert l["gpuslice.io/gpu.compute.major"] == "7" and l["gpuslice.io/gpu.compute.minor"] == "5"
    assert l["gpuslice.io/mig.capable"] == "false" and l["gpuslice.io/mig.strategy"] == "none"
    assert l["gpuslice.io/cuda.driver-version.full"] == "580.65.06"
    assert l["gpuslice.io/cuda.runtime-version.full"] == "13.0"
    h.write("policy.yaml", WHOLE)
    a.signal(signal.SIGHUP)
    _wait(lambda: _labels(a.features).get("gpuslice.io/gpu.replicas") == "1", 5, "labels not updated on reload", a)
    l = _labels(a.features)
    assert l["gpuslice.io/gpu.product"] == "Tesla-T4" and l["gpuslice.io/gpu.sharing-strategy"] == "none"


def test_labels_mig_layout_state(h):
    node = h.node(H100_L4)
    policy = ("version: v1\nflags:\n  migStrategy: mixed\ngpuslice:\n  mig:\n    config: all-balanced\n")
    a = h.agent(node, policy, resources=["nvidia.com/mig-1g.10gb", "nvidia.com/gpu"],
                extra=["--mig-status-file", os.path.join(h.base, "mig.json")])
    _wait(lambda: os.path.exists(a.features) and
          _labels(a.features).get("gpuslice.io/mig.config.state") == "success", 10, "MIG state label", a)
    l = _labels(a.features)
    assert l["gpuslice.io/mig.config"] == "all-balanced" and l["gpuslice.io/mig.strategy"] == "mixed"
    assert l["gpuslice.io/mig.capable"] == "true"
    # all-balanced on an H100-80GB: 2 x 1g.10gb, 1 x 2g.20gb, 1 x 3g.40gb per GPU, 4 H100s
    assert l["gpuslice.io/mig-1g.10gb.count"] == "8" and l["gpuslice.io/mig-3g.40gb.count"] == "4"
    assert l["gpuslice.io/mig-1g.10gb.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    assert l["gpuslice.io/mig-1g.10gb.slices.gi"] == "1" and l["gpuslice.io/mig-3g.40gb.slices.ci"] == "3"
    assert l["gpuslice.io/gpu.product"] == "NVIDIA-L4" and l["gpuslice.io/gpu.count"] == "2"
    text = _scrape(a)
    mig = [k for k in _samples(text) if k.startswith("gpuslice_mig_device_memory_bytes{")]
    assert len(mig) == 16 and sum('GPU_I_PROFILE="1g.10gb"' in k for k in mig) == 8
    promtool = shutil.which("promtool")
    if promtool:
        p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stdout + p.stderr


def test_labels_file_disabled(h):
    node = h.node(T4X2)
    a = h.agent(node, WHOLE, resources=["nvidia.com/gpu"], extra=["--features-file", ""])
    time.sleep(0.5)
    assert not os.path.exists(a.features) and a.alive()


def test_apply_labels_match_agent(h):
    node = h.node(H100_L4)
    policy_text = open(os.path.join(ROOT, "examples", "policies", "heterogeneous.yaml")).read()
    a = h.agent(node, policy_text, resources=["nvidia.com/gpu.shared"])
    _wait(lambda: os.path.exists(a.features), 5, "features file not written", a)
    p = subprocess.run([GPUSLICE, "--sim", node.path, "--sim-state", node.state, "apply", "--config", a.policy,
                        "--labels"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    with open(a.features) as f:
        assert p.stdout == f.read()
    assert _labels(a.features)["gpuslice.io/gpu.shared.product"] == "NVIDIA-L4"


# ------------------------------------------------------------------------------- Prometheus metrics

def _scrape(agent, path="/metrics"):
    import urllib.request
    line = agent.wait_log(r"Serving metrics on .* \(port \d+\)")
    port = int(re.search(r"\(port (\d+)\)", line).group(1))
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return r.read().decode()


def _samples(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_grafana_dashboard_uses_exported_metrics(h):
    """examples/grafana/gpuslice-dashboard.json: every metric a panel queries is one the agent
    exports (its # TYPE line is there even when it has no samples yet), with the labels used."""
    with open(os.path.join(ROOT, "examples", "grafana", "gpuslice-dashboard.json")) as f:
        dash = json.load(f)
    node = h.node(T4X2)
    text = _scrape(h.agent(node, WHOLE, resources=["nvidia.com/gpu"]))
    exported = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    used = set()
    for p in dash["panels"]:
        for t in p["targets"]:
            used |= set(re.findall(r"\b(gpuslice_[a-z_]+)", t["expr"]))
    assert used and used <= exported, sorted(used - exported)
    assert {"gpuslice_guard_memory_used_bytes", "gpuslice_mps_daemon_state", "gpuslice_gpu_xid_errors_total"} <= used


def test_metrics_scraped_and_valid(h):
    node = h.node(T4X2)
    u = node.uuids()
    policy = ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
              "    - name: nvidia.com/gpu\n      replicas: 2\n      memoryPerReplica: 4GiB\n")
    a = h.agent(node, policy, resources=["nvidia.com/gpu"], extra=["--guard-root", os.path.join(h.base, "g")])
    h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::0"])
    with pytest.raises(grpc.RpcError):
        h.kubelet.allocate("nvidia.com/gpu", ["GPU-no-such-device::0"])
    node.run("sim", "xid", "1", "79")
    h.kubelet.wait_for("nvidia.com/gpu", lambda devs: _gpu_health(devs, u[1]) == {UNHEALTHY}, timeout=5)
    deadline = time.monotonic() + 5
    while True:  # the text is re-rendered every loop iteration (the poll is 200 ms)
        text = _scrape(a)
        s = _samples(text)
        if s.get(f'gpuslice_gpu_healthy{{gpu="1",UUID="{u[1]}"}}') == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert s[f'gpuslice_gpu_info{{gpu="0",UUID="{u[0]}",model_name="Tesla T4",mode="time-slicing"}}'] == 1
    assert s[f'gpuslice_gpu_memory_total_bytes{{gpu="0",UUID="{u[0]}"}}'] == 15360 * 2**20
    assert s[f'gpuslice_gpu_healthy{{gpu="0",UUID="{u[0]}"}}'] == 1
    assert s[f'gpuslice_gpu_healthy{{gpu="1",UUID="{u[1]}"}}'] == 0
    assert s[f'gpuslice_gpu_temperature_celsius{{gpu="0",UUID="{u[0]}"}}'] == 35   # the simulator's idle values
    # idle: 60 W, at most half the board's default limit (a T4's is 70 W)
    assert s[f'gpuslice_gpu_power_usage_watts{{gpu="0",UUID="{u[0]}"}}'] == 35
    assert s[f'gpuslice_gpu_xid_errors_total{{gpu="1",UUID="{u[1]}"}}'] == 1
    assert s['gpuslice_resource_devices{resource="nvidia.com/gpu",health="healthy"}'] == 2
    assert s['gpuslice_resource_devices{resource="nvidia.com/gpu",health="unhealthy"}'] == 2
    assert s[f'gpuslice_replica_memory_quota_bytes{{resource="nvidia.com/gpu",device="{u[0]}::1"}}'] == 4 * 2**30
    assert s['gpuslice_allocations_total{resource="nvidia.com/gpu"}'] == 1
    assert s['gpuslice_allocation_errors_total{resource="nvidia.com/gpu"}'] == 1
    promtool = shutil.which("promtool")
    if promtool:
        p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stdout + p.stderr
    import urllib.error
    with pytest.raises(urllib.error.HTTPError) as e:
        _scrape(a, "/other")
    assert e.value.code == 404


def _metrics_port(agent):
    line = agent.wait_log(r"Serving metrics on .* \(port \d+\)")
    return int(re.search(r"\(port (\d+)\)", line).group(1))


def _raw_http(port, data, timeout=5):
    """Sends data on a fresh connection and returns everything the server sent until it closed."""
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk


def test_metrics_http_protocol(h):
    """The metrics endpoint speaks HTTP/1.x properly: HEAD, keep-alive with pipelined requests,
    405 with Allow, 400 / 505 / 414 / 431 for what it cannot take, closing on Connection: close."""
    node = h.node(T4X2)
    a = h.agent(node, WHOLE, resources=["nvidia.com/gpu"])
    port = _metrics_port(a)
    full = _scrape(a)
    assert "gpuslice_gpu_info" in full

    # two pipelined requests on one connection, the last asking to close
    raw = _raw_http(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
                          b"HEAD /metrics?x=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert raw.startswith(b"HTTP/1.1 200 OK\r\n")
    parts = raw.split(b"HTTP/1.1 ")
    assert len(parts) == 3, raw[:300]
    get_head, get_body = parts[1].split(b"\r\n\r\n", 1)
    assert b"Content-Type: text/plain; version=0.0.4" in get_head
    length = int(re.search(rb"Content-Length: (\d+)", get_head).group(1))
    assert length == len(get_body) and b"gpuslice_gpu_info" in get_body
    head_head, head_body = parts[2].split(b"\r\n\r\n", 1)
    assert head_head.startswith(b"200 OK") and b"Connection: close" in head_head and head_body == b""
    assert int(re.search(rb"Content-Length: (\d+)", head_head).group(1)) > 0

    def status(data):
        return int(_raw_http(port, data).split(b" ", 2)[1])

    assert status(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab") == 405
    assert b"Allow: GET, HEAD" in _raw_http(port, b"PUT /metrics HTTP/1.0\r\n\r\n")
    assert status(b"BREW /metrics HTTP/1.0\r\n\r\n") == 501
    assert status(b"GET /other HTTP/1.0\r\n\r\n") == 404
    assert status(b"GET http://node:9400/metrics HTTP/1.0\r\n\r\n") == 200   # absolute form
    assert status(b"GARBAGE\r\n\r\n") == 400
    assert status(b"GET /metrics HTTP/1.1\r\n\r\n") == 400                     # 1.1 without Host
    assert status(b"GET /metrics HTTP/1.1\r\nHost: x\r\nBad header\r\n\r\n") == 400
    assert status(b"GET /metrics HTTP/1.1\r\nHost: x\r\n Folded: x\r\n\r\n") == 400
    # HTTP/1.0 keep-alive is confirmed (else a 1.0 client waits for the close)
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"HEAD /metrics HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        assert b"Connection: keep-alive\r\n" in s.recv(4096)
    # a "close" wins over a later keep-alive: the server closes after the response
    assert _raw_http(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                           b"Connection: keep-alive\r\n\r\n").startswith(b"HTTP/1.1 200 OK")
    assert status(b"GET /metrics HTTP/2.0\r\n\r\n") == 505
    assert status(b"GET /" + b"a" * 1000 + b" HTTP/1.1\r\n\r\n") == 414
    assert status(b"GET /metrics HTTP/1.1\r\n" + b"X-Filler: " + b"y" * 9000 + b"\r\n\r\n") == 431
    # HTTP/1.0 without keep-alive: the server closes after the response (_raw_http returns)
    assert _raw_http(port, b"GET /metrics HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 200 OK")
    assert a.alive()


def test_metrics_http_slow_clients_do_not_block_scrapes(h):
    """Clients that hold connections (idle, or dripping a head a byte at a time) cannot keep a
    scrape out: the 17th connection evicts the one whose phase started longest ago."""
    import socket
    node = h.node(T4X2)
    a = h.agent(node, WHOLE, resources=["nvidia.com/gpu"])
    port = _metrics_port(a)
    slow = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
    try:
        for s in slow:
            s.sendall(b"GET /metrics HTTP/1.1\r\nX: ")
        for _ in range(3):  # keep dripping: progress does not buy time or a slot
            time.sleep(0.5)
            for s in slow:
                try:
                    s.sendall(b"a")
                except OSError:
                    pass  # evicted
        t = time.monotonic()
        assert "gpuslice_gpu_info" in _scrape(a)
        assert time.monotonic() - t < 2
    finally:
        for s in slow:
            s.close()
    assert a.alive()


_FLOOD = """
import socket, sys, time
port, total, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
held, end, n = [], time.monotonic() + seconds, 0
print("flooding", flush=True)
while n < total and time.monotonic() < end:
    try:
        held.append(socket.create_connection(("127.0.0.1", port), timeout=1))
        n += 1
    except OSError:
        time.sleep(0.001)
    if len(held) > 48:
        held.pop(0).close()
print(n, flush=True)
"""


def _read_response(sock):
    """One HTTP response with a Content-Length from a keep-alive connection (b"" if it closed)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(re.search(rb"Content-Length: (\d+)", head).group(1))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def test_metrics_http_flood_does_not_evict_scrapes(h):
    """A flood of held connections (another process: at most 20000 connections in 4 s, 48 held)
    takes the 16 slots again and again. A keep-alive scraper between its requests (50 ms apart)
    is idle too, but it has been answered before: the flood's connections, which never sent a
    request, make room first (eviction used to take the oldest connection, so the scraper lost
    its connection within a few requests); and requests on fresh connections are answered."""
    import socket
    node = h.node(T4X2)
    a = h.agent(node, WHOLE, resources=["nvidia.com/gpu"])
    port = _metrics_port(a)
    flood = subprocess.Popen([sys.executable, "-c", _FLOOD, str(port), "20000", "4"], stdout=subprocess.PIPE, text=True)
    assert flood.stdout.readline().strip() == "flooding"
    answered = fresh = 0
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            for _ in range(40):
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                out = _read_response(s)
                assert out.startswith(b"HTTP/1.1 200 OK") and b"gpuslice_gpu_info" in out, \
                    f"keep-alive scrape {answered + 1} not answered under the flood: {out[:80]!r}"
                answered += 1
                time.sleep(0.05)
                if answered % 4 == 0:  # and now and then a fresh connection (sent at once)
                    fresh += _raw_http(port, b"GET /metrics HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 200 OK")
    finally:
        flood.wait(10)
    opened = int(flood.stdout.read().strip() or 0)
    assert opened > 200, f"the flood opened only {opened} connections"
    assert answered == 40 and fresh >= 8, (answered, fresh)
    assert "gpuslice_gpu_info" in _scrape(a) and a.alive()


def _cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_metrics_http_out_of_descriptors_does_not_spin(h):
    """With no file descriptor left, accept fails and the connection stays queued: the server
    must back off, not poll a readable socket in a loop, and serve again once descriptors free."""
    import resource
    import socket
    node = h.node(T4X2)
    a = h.agent(node, WHOLE, resources=["nvidia.com/gpu"])
    port = _metrics_port(a)
    pid = a.proc.pid
    old = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    n_open = len(os.listdir(f"/proc/{pid}/fd"))
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (n_open + 1, old[1]))
    conns = []
    try:
        conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
        time.sleep(0.5)
        cpu = _cpu_seconds(pid)
        time.sleep(2)
        assert _cpu_seconds(pid) - cpu < 0.5, "the agent spins while it cannot accept"
    finally:
        for s in conns:
            s.close()
        resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
    assert "gpuslice_gpu_info" in _scrape(a)
    assert a.alive()


def test_metrics_port_in_use_keeps_serving_kubelet(h):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        node = h.node(T4X2)
        a = h.agent(node, WHOLE, resources=["nvidia.com/gpu"],
                    extra=["--metrics-address", f"127.0.0.1:{s.getsockname()[1]}"])
        a.wait_log(r"No metrics: cannot serve metrics on 127\.0\.0\.1:\d+")
        assert a.alive()
    finally:
        s.close()


def test_metrics_bad_address(h):
    node = h.node(T4X2)
    a = h.agent(node, WHOLE, resources=["nvidia.com/gpu"], extra=["--metrics-address", "localhost:99999"])
    a.wait_log(r"metrics address 'localhost:99999': expected HOST:PORT or :PORT")


@pytest.mark.parametrize("args,message", [
    (["agent", "--guard-gc-interval-ms", "abc"], "--guard-gc-interval-ms: 'abc' is not a number of milliseconds"),
    (["agent", "--guard-grace-ms", "-5"], "--guard-grace-ms: '-5' is not a number of milliseconds"),
    (["agent", "--guard-reconcile-interval-ms", "1e3"], "--guard-reconcile-interval-ms: '1e3' is not a number of milliseconds"),
    (["agent", "--pod-attribution-interval-ms", "soon"], "--pod-attribution-interval-ms: 'soon' is not a number of milliseconds"),
    (["agent", "--cdi-kind", "gpu"], "--cdi-kind: 'gpu' is not a CDI kind (VENDOR/CLASS, e.g. gpuslice.io/gpu)"),
    (["agent", "--cdi-kind", "nvidia.com/gpu/x"], "--cdi-kind: 'nvidia.com/gpu/x' is not a CDI kind"),
    (["agent", "--container-driver-root", "driver"], "--container-driver-root: 'driver' is not an absolute path"),
    (["apply", "--json", "--labels"], "--json and --labels cannot be combined"),
])
def test_bad_command_line(h, args, message):
    node = h.node(T4X2)
    p = subprocess.run([GPUSLICE, "--sim", node.path, "--sim-state", node.state, *args],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and message in p.stderr, (p.returncode, p.stderr)


def test_sigterm_exits_promptly(h):
    """SIGTERM to exit in well under the NVML event wait (the event thread used to be joined after
    up to 500 ms in nvmlEventSetWait): a node drain or a rollout waits for every agent to stop.
    Three agents, each asked on its own, so that a wait that only sometimes ends early fails.
    A blocking wait (Popen.wait with a timeout polls, in steps of up to 50 ms), bounded by a
    timer that kills the agent. The time is the agent's own, from its log's timestamps (the
    signal's line to "gpuslice agent stopped"): what the process does after that (a sanitizer
    build's leak scan at exit) and the machine's scheduling of the test are not the agent's
    shutdown path."""
    import datetime
    import threading

    def stamp(line):
        return datetime.datetime.strptime(line.split()[0], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()

    node = h.node(T4X2)
    times = []
    for i in range(3):
        a = h.agent(node, WHOLE, resources=["nvidia.com/gpu"], policy_name=f"policy{i}.yaml")
        a.wait_log(r"Serving metrics")
        time.sleep(0.3 + 0.1 * i)  # somewhere inside the event thread's wait
        killer = threading.Timer(10, a.proc.kill)
        killer.start()
        try:
            t0 = time.monotonic()
            a.signal(signal.SIGTERM)
            rc = a.proc.wait()
            assert time.monotonic() - t0 < 10
        finally:
            killer.cancel()
        assert rc == 0, f"exit {rc} (killed after 10 s?)\n{a.log()}"
        times.append(stamp(a.wait_log(r"gpuslice agent stopped")) - stamp(a.wait_log(r"Signal 15: shutting down")))
    assert max(times) < 0.150, f"SIGTERM to exit took {[round(t * 1000) for t in times]} ms"


def test_idle_agent_sleeps(h):
    """An idle agent's threads wait for events, not in short steps: over 4 s, with the inventory
    poll at its default 2 s and the 10 s and 30 s jobs off, its threads block and wake (voluntary
    context switches, every thread's) fewer than 15 times a second. A 50 ms wait step anywhere
    (the NVML event thread's, the device plugins' gRPC thread's) is 20 a second on its own."""
    node = h.node(T4X2)
    a = h.agent(node, WHOLE, resources=["nvidia.com/gpu"],
                extra=["--poll-interval-ms", "2000", "--pod-attribution-interval-ms", "0",
                       "--guard-reconcile-interval-ms", "0", "--guard-gc-interval-ms", "0"])
    a.wait_log(r"Serving metrics")
    time.sleep(1.0)

    def switches():
        n = 0
        for t in os.listdir(f"/proc/{a.proc.pid}/task"):
            try:
                with open(f"/proc/{a.proc.pid}/task/{t}/status") as f:
                    n += sum(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches:"))
            except FileNotFoundError:  # a thread that ended meanwhile
                pass
        return n

    before = switches()
    time.sleep(4.0)
    woke = switches() - before
    assert a.alive(), a.log()
    assert woke < 4 * 15, f"{woke} wake-ups in 4 s of idling"


# ------------------------------------------------------------------------------- NVML failing (GPUSLICE_SIM_FAULTS)

def _faulty_agent(h, monkeypatch, node, policy, schedule, resources):
    """An agent whose simulated NVML follows the fault schedule (counted in the agent's process
    only: the gpuslice commands the test runs on the node do not get it)."""
    monkeypatch.setenv("GPUSLICE_SIM_FAULTS", schedule)
    try:
        return h.agent(node, policy, resources=resources)
    finally:
        monkeypatch.delenv("GPUSLICE_SIM_FAULTS")


def test_inventory_read_failing_keeps_serving_the_last_list(h, monkeypatch):
    """nvmlDeviceGetCount fails from the 3rd call on: every later poll fails whole. The agent logs
    it, counts it in its metrics, and keeps serving the last good device list (all Healthy, and
    GetPreferredAllocation and Allocate are answered from it)."""
    node = h.node(T4X2)
    u = node.uuids()
    agent = _faulty_agent(h, monkeypatch, node, TS2, "nvmlDeviceGetCount_v2:3+:NVML_ERROR_UNKNOWN",
                          ["nvidia.com/gpu"])
    agent.wait_log(r"Failed to read the GPUs: nvmlDeviceGetCount: Unknown Error", timeout=5)
    agent.wait_log(r"GPUSLICE_SIM_FAULTS: call 3 and later of nvmlDeviceGetCount_v2 fails", timeout=1)
    time.sleep(3 * POLL_MS / 1000)
    assert agent.alive(), agent.log()
    devs = h.latest("nvidia.com/gpu")
    assert len(devs) == 4 and {phys(d.id) for d in devs} == set(u)
    assert {d.health for d in devs} == {HEALTHY}
    avail = ids(devs)
    pref = h.kubelet.preferred("nvidia.com/gpu", avail, size=1)
    assert len(pref) == 1 and pref[0] in avail
    assert h.kubelet.allocate("nvidia.com/gpu", [avail[0]]) is not None
    errors = [v for k, v in _samples(_scrape(agent)).items() if k.startswith("gpuslice_reconcile_errors_total")]
    assert errors and errors[0] >= 2, errors


def test_gpus_lost_in_the_poll_stay_listed_unhealthy(h, monkeypatch):
    """nvmlDeviceGetMemoryInfo answers GPU_IS_LOST from its 9th call on (2 GPUs: the 5th poll):
    both GPUs are then lost. Their devices stay listed, as Unhealthy, and the agent says why."""
    node = h.node(T4X2)
    u = node.uuids()
    agent = _faulty_agent(h, monkeypatch, node, TS2, "nvmlDeviceGetMemoryInfo:9+:NVML_ERROR_GPU_IS_LOST",
                          ["nvidia.com/gpu"])
    first = h.kubelet.messages("nvidia.com/gpu")[0]
    assert {d.health for d in first.devices} == {HEALTHY}, "lost before the schedule's 9th call"
    msg = h.kubelet.wait_for("nvidia.com/gpu", lambda devs: {d.health for d in devs} == {UNHEALTHY}, timeout=10)
    assert len(msg.devices) == 4 and {phys(d.id) for d in msg.devices} == set(u)
    for i in range(2):
        agent.wait_log(rf"GPU {i} \({u[i]}\) is lost: NVML reports GPU_IS_LOST", timeout=1)
    assert agent.alive(), agent.log()
