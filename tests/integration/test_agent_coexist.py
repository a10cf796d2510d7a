"""The agent beside another device plugin (src/agent/coexist.c): a fake NVIDIA plugin (the
emulator's self-test plugin on nvidia-gpu.sock, registering nvidia.com/gpu), and a plugin of
another name whose resource only the kubelet's checkpoint tells. Under
gpuslice.coexistence.otherPlugin: refuse (the default) gpuslice does not register a resource the
other serves, and does once it is gone; under warn both register, with a warning; under share
gpuslice also leaves out every GPU the other's devices name, under any resource name.

Run: /usr/bin/python3 -m pytest -q tests/integration/test_agent_coexist.py"""
import json
import os
import socket
import stat

from agent_harness import POLL_MS, T4X2, WHOLE, h, ids, ts_policy  # noqa: F401 (h: the fixture)
from test_emulator import FakePlugin

import wait  # tests/lib, on the path once agent_harness is imported

GPU = "nvidia.com/gpu"
OURS = "gpuslice-nvidia.com_gpu.sock"


def fake(h, endpoint="nvidia-gpu.sock", devices=("GPU-fake-0", "GPU-fake-1")):
    p = FakePlugin(h.kdir, resource=GPU, endpoint=endpoint, devices=devices).serve()
    p.register()
    return p


def gone(p):
    """The plugin stops and removes its socket, as NVIDIA's does on exit."""
    p.stop()
    if os.path.lexists(p.socket_path):
        os.unlink(p.socket_path)


def ours(h):
    return [r for r in h.kubelet.registrations if r.resource_name == GPU and r.endpoint == OURS]


def holds(n, pred, what, a):
    """pred() stays true over n of the agent's polls (checked at each)."""
    wait.holds(pred, polls=n, interval=POLL_MS / 1000, what=what, detail=a.log)


def test_refuse_while_nvidia_serves_then_take_over(h):
    node = h.node(T4X2)
    other = fake(h)
    try:
        a = h.agent(node, WHOLE)
        line = a.wait_log(r"nvidia.com/gpu is served by nvidia-gpu.sock \(NVIDIA's device plugin\): gpuslice "
                          r"does not register it")
        assert "[warn]" in line.lower() or "warn" in line.lower()
        holds(8, lambda: a.alive() and ours(h) == [] and not os.path.exists(os.path.join(h.kdir, OURS)),
              "the agent alive, not registering a resource NVIDIA's plugin serves, no socket of its own", a)
        assert ids(h.latest(GPU)) == ["GPU-fake-0", "GPU-fake-1"]
    finally:
        gone(other)
    a.wait_log(r"nvidia.com/gpu is no longer served by nvidia-gpu.sock .*: gpuslice registers it", timeout=5)
    reg = h.kubelet.wait_registration(GPU, timeout=5, after=other.register_ended)
    assert reg.endpoint == OURS
    # the first ListAndWatch message of the new registration may follow Register by a moment
    h.kubelet.wait_for(GPU, lambda devs: sorted(d.id for d in devs) == sorted(node.uuids()), timeout=5)


def test_withdraws_when_nvidia_starts_later(h):
    node = h.node(T4X2)
    a = h.agent(node, WHOLE, resources=[GPU])
    assert len(ours(h)) == 1
    other = fake(h)
    try:
        a.wait_log(r"nvidia.com/gpu is served by nvidia-gpu.sock", timeout=5)
        a.wait_log(r"Withdrawing nvidia.com/gpu", timeout=5)
        holds(4, lambda: not os.path.exists(os.path.join(h.kdir, OURS)) and len(ours(h)) == 1,
              "withdrawn: no socket, not registered again while NVIDIA's plugin serves", a)
    finally:
        gone(other)
    h.kubelet.wait_registration(GPU, timeout=5, after=other.register_ended)
    assert len(ours(h)) == 2


def test_warn_registers_beside_it(h):
    node = h.node(T4X2)
    other = fake(h)
    try:
        a = h.agent(node, WHOLE + "gpuslice:\n  coexistence:\n    otherPlugin: warn\n")
        a.wait_log(r"nvidia.com/gpu is also served by nvidia-gpu.sock \(NVIDIA's device plugin\): both register it")
        reg = h.kubelet.wait_registration(GPU, timeout=5, after=other.register_ended)
        assert reg.endpoint == OURS
        names = [r.endpoint for r in h.kubelet.registrations if r.resource_name == GPU and r.ok]
        assert names == ["nvidia-gpu.sock", OURS]
    finally:
        gone(other)


def checkpoint(h, registered):
    with open(os.path.join(h.kdir, "kubelet_internal_checkpoint"), "w") as f:
        json.dump({"Data": {"PodDeviceEntries": None, "RegisteredDevices": registered}, "Checksum": 1}, f)


def test_other_plugin_named_by_the_checkpoint(h):
    node = h.node(T4X2)
    other = fake(h, endpoint="vendor-gpu.sock")
    checkpoint(h, {GPU: ["GPU-fake-0", "GPU-fake-1"]})
    try:
        a = h.agent(node, WHOLE)
        line = a.wait_log(r"nvidia.com/gpu is served by another device plugin \(listening: vendor-gpu.sock; ")
        assert "GPU-fake-0" in line
        holds(6, lambda: ours(h) == [], "not registered while the other plugin serves it", a)
    finally:
        gone(other)
    h.kubelet.wait_registration(GPU, timeout=5, after=other.register_ended)


def test_checkpoint_of_our_own_devices_is_no_conflict(h):
    """A plugin of another resource beside a checkpoint that registers our own devices (gpuslice's
    last run): gpuslice registers."""
    node = h.node(T4X2)
    other = FakePlugin(h.kdir, resource="example.com/fpga", endpoint="fpga.sock").serve()
    other.register()
    checkpoint(h, {GPU: sorted(node.uuids()), "example.com/fpga": ["dev-0", "dev-1"]})
    try:
        a = h.agent(node, WHOLE, resources=[GPU])
        assert "served by" not in a.log()
    finally:
        gone(other)


def test_stale_nvidia_socket_is_no_conflict(h):
    node = h.node(T4X2)
    path = os.path.join(h.kdir, "nvidia-gpu.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()  # the socket file stays, nothing listens (a plugin that was killed)
    assert stat.S_ISSOCK(os.lstat(path).st_mode)
    a = h.agent(node, WHOLE, resources=[GPU])
    assert "served by" not in a.log()


SHARE = "gpuslice:\n  coexistence:\n    otherPlugin: share\n"
SHARED = "nvidia.com/gpu.shared"


def test_share_serves_only_the_gpus_the_other_does_not(h):
    """NVIDIA's plugin serves GPU 0 whole as nvidia.com/gpu; gpuslice time-slices under a name of
    its own (renameByDefault). Under share it advertises GPU 1's replicas only (GPU 0's would be
    the same GPU counted twice, under another name); refuse, which compares names only, would
    advertise both. When NVIDIA's plugin goes, GPU 0 comes back."""
    node = h.node(T4X2)
    u0, u1 = node.uuids()
    other = fake(h, devices=(u0,))
    checkpoint(h, {GPU: [u0]})
    try:
        a = h.agent(node, ts_policy(2, rename=True) + SHARE)
        a.wait_log(r"GPU 0 \(%s\) is served by another device plugin .*leaves it out" % u0, timeout=10)
        h.kubelet.wait_for(SHARED, lambda devs: sorted(d.id for d in devs) == [f"{u1}::0", f"{u1}::1"],
                           timeout=10)
        assert ours(h) == [], "gpuslice registered nvidia.com/gpu, which NVIDIA's plugin serves"
        holds(4, lambda: a.alive() and sorted(d.id for d in h.latest(SHARED)) == [f"{u1}::0", f"{u1}::1"],
              "GPU 1's replicas only, the agent alive", a)
    finally:
        gone(other)
    a.wait_log(r"GPU 0 \(%s\) is no longer served by another device plugin: gpuslice serves it" % u0, timeout=10)
    h.kubelet.wait_for(SHARED, lambda devs: sorted(d.id for d in devs) ==
                       sorted(f"{u}::{r}" for u in (u0, u1) for r in (0, 1)), timeout=10)


def test_refuse_compares_names_only(h):
    """The same node under refuse: the renamed resource does not collide by name, so both GPUs'
    replicas are advertised (the warning is about nvidia.com/gpu only). The share test above fails
    without its GPU check; this one pins what refuse does."""
    node = h.node(T4X2)
    u0, u1 = node.uuids()
    other = fake(h, devices=(u0,))
    checkpoint(h, {GPU: [u0]})
    try:
        a = h.agent(node, ts_policy(2, rename=True))
        h.kubelet.wait_for(SHARED, lambda devs: len(devs) == 4, timeout=10)
        assert "leaves it out" not in a.log()
    finally:
        gone(other)


def test_share_other_plugin_of_another_name_by_its_devices(h):
    """A plugin of another name (vendor-gpu.sock) registering a resource gpuslice does not serve
    (example.com/gpu) with GPU 1's UUID, as the checkpoint says: under share gpuslice serves GPU 0
    only, whole, under nvidia.com/gpu. Device IDs that name no GPU (dev-0) are ignored."""
    node = h.node(T4X2)
    u0, u1 = node.uuids()
    other = FakePlugin(h.kdir, resource="example.com/gpu", endpoint="vendor-gpu.sock", devices=(u1,)).serve()
    other.register()
    checkpoint(h, {"example.com/gpu": [u1], "example.com/fpga": ["dev-0"]})
    try:
        a = h.agent(node, WHOLE + SHARE)
        a.wait_log(r"GPU 1 \(%s\) is served by another device plugin" % u1, timeout=10)
        h.kubelet.wait_for(GPU, lambda devs: sorted(d.id for d in devs) == [u0], timeout=10)
        assert "GPU 0 (" not in a.log()
    finally:
        gone(other)
