"""A tenant (or whatever else writes where the agent reads) must not crash or wedge the agent
: a guarded container truncating or garbling its counters region while the reconcile
reads it, a FIFO where the policy is (at start and swapped in at a reload), a full disk under
Allocate, half-written allocation directories, and symbolic links planted in a guard allocation
directory for the root-owned GC to follow. Harness and fixture: agent_harness.py; the counters
region's layout: test_agent.py.

Environment (set by meson): GPUSLICE (the binary), GPUSLICE_SIM_LIB, GS_SOURCE_ROOT.

Run: /usr/bin/python3 -m pytest -q tests/integration/test_agent_hostile.py"""
import errno
import os
import re
import signal
import stat
import struct
import subprocess
import sys
import time

import grpc
import pytest

import agent_harness
from agent_harness import T4X2, TS2, h  # noqa: F401 (h: fixture)
from test_agent import GUARD_POLICY, REGION_SIZE, REGION_VERSION, _guard_dir_of, _guard_dirs, _samples, _scrape, _wait


def _valid_region():
    buf = bytearray(REGION_SIZE)
    struct.pack_into("<IIII", buf, 0, 0x47534752, REGION_VERSION, REGION_SIZE, 16)
    return bytes(buf)


# ------------------------------------------------------------------------------- the counters region

def _reconciling_agent(h, interval_ms, n):
    """An agent reconciling every interval_ms, with n guarded allocations: (agent, dirs, regions)."""
    node = h.node(T4X2)
    u = node.uuids()
    root = os.path.join(h.base, "guard")
    a = h.agent(node, GUARD_POLICY, resources=["nvidia.com/gpu"],
                extra=["--guard-root", root, "--guard-reconcile-interval-ms", str(interval_ms),
                       "--guard-gc-interval-ms", "0"])
    dirs = [_guard_dir_of(h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::{i}"])) for i in range(n)]
    return a, dirs, [os.path.join(root, d, "state", "region") for d in dirs]


def test_region_truncated_under_the_reconcile_does_not_kill_the_agent(h):
    """The agent used to map each region, check its size, then read it: a container truncating it
    in between killed the agent with SIGBUS (within seconds at a 10 ms reconcile interval). Four
    guarded allocations have their regions flipped between valid, truncated and garbage for 6 s;
    the agent stays up, says which region is unusable (once, not every pass), and reconciles a
    region that is valid again."""
    a, dirs, regions = _reconciling_agent(h, 10, 4)
    valid = _valid_region()
    with open(regions[0], "wb") as f:                 # the size of a region of this version, in the log
        f.write(valid[:100])
    a.wait_log(r"skipping allocation " + dirs[0] + r": .*\(100 bytes, a version \d+ region has \d+\)")
    # One process per region (no GIL between them): valid for a moment, then empty, again and
    # again, and now and then 100 bytes. Reading an empty file through a mapping faults.
    code = ("import os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDWR); head = bytes.fromhex(sys.argv[2]); size = int(sys.argv[3])\n"
            "end = time.monotonic() + float(sys.argv[4]); i = 0\n"
            "while time.monotonic() < end:\n"
            "    os.ftruncate(fd, size); os.pwrite(fd, head, 0); os.ftruncate(fd, 0 if i % 64 else 100); i += 1\n")
    flippers = [subprocess.Popen([sys.executable, "-c", code, p, valid[:64].hex(), str(REGION_SIZE), "6"])
                for p in regions]
    try:
        deadline = time.monotonic() + 7
        while time.monotonic() < deadline and a.alive() and any(f.poll() is None for f in flippers):
            time.sleep(0.1)
    finally:
        for f in flippers:
            f.kill()
            f.wait()
    assert a.alive(), f"the agent died ({a.proc.returncode}, {-a.proc.returncode if a.proc.returncode else ''})\n{a.log()}"
    # bounded: at most 3 reports per allocation whatever the container does
    for d in dirs:
        assert len(re.findall(r"skipping allocation " + d + ":", a.log())) <= 3, a.log()[-3000:]
    # garbage (a counter no GPU has) is refused as well, and a valid region is read again
    with open(regions[0], "wb") as f:
        f.write(valid[:104] + b"\xff" * 8 + valid[112:])
    os.truncate(regions[1], 0)
    os.truncate(regions[2], 0)
    for p in regions[1:]:
        with open(p, "wb") as f:
            f.write(valid)
    m = {}
    for _ in range(50):
        m = _samples(_scrape(a))  # until the reconcile has dropped region 0 and read the other three
        used = [k for k in m if k.startswith("gpuslice_guard_memory_used_bytes{")]
        if len(used) == 3 and not [k for k in used if dirs[0] in k]:
            break
        time.sleep(0.1)
    used = [k for k in m if k.startswith("gpuslice_guard_memory_used_bytes{")]
    assert len(used) == 3 and not [k for k in used if dirs[0] in k], used
    assert a.alive()


def test_region_replaced_by_a_fifo_or_a_link(h):
    """A region replaced by a FIFO or a symbolic link (to a file outside the container) is refused
    without blocking and without following the link."""
    a, (d1, d2), (r1, r2) = _reconciling_agent(h, 50, 2)
    outside = h.write("outside-region", "")
    with open(outside, "wb") as f:
        f.write(_valid_region())
    os.unlink(r1)
    os.mkfifo(r1)
    os.unlink(r2)
    os.symlink(outside, r2)
    a.wait_log(r"skipping allocation " + d1 + r": .*not usable \(not a regular file\)")
    a.wait_log(r"skipping allocation " + d2 + r": .*not usable \(a symbolic link\)")
    t = time.monotonic()
    assert a.stop(5) == 0 and time.monotonic() - t < 3


# ------------------------------------------------------------------------------- a FIFO as the policy

def test_fifo_policy_at_start_is_an_error_not_a_hang(h):
    node = h.node(T4X2)
    path = os.path.join(h.base, "fifo-policy.yaml")
    os.mkfifo(path)
    a = agent_harness.Agent(h, node, path, [])
    h.agents.append(a)
    assert a.wait_exit(10) == 1
    assert f"Cannot read policy {path}: a FIFO, not a regular file" in a.log(), a.log()


def test_fifo_swapped_in_at_reload_keeps_serving(h):
    """A FIFO swapped in for the policy: the reload says why and counts the error, the running
    policy stays in force (Allocate answers), a regular file is taken again, SIGTERM works."""
    node = h.node(T4X2)
    u = node.uuids()
    a = h.agent(node, TS2, resources=["nvidia.com/gpu"])
    os.unlink(a.policy)
    os.mkfifo(a.policy)
    a.signal(signal.SIGHUP)
    a.wait_log(r"Cannot read policy " + re.escape(a.policy) + r": a FIFO, not a regular file; keeping the running policy")
    assert h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::1"]).envs["NVIDIA_VISIBLE_DEVICES"] == u[0]
    _wait(lambda: _samples(_scrape(a)).get('gpuslice_policy_reloads_total{result="rejected"}', 0) >= 1, 5,
          "policy reload error not counted", a)
    # a ConfigMap-style symbolic link to a regular file is followed
    target = h.write("real-policy.yaml", agent_harness.ts_policy(4))
    os.unlink(a.policy)
    os.symlink(target, a.policy)
    a.signal(signal.SIGHUP)
    h.kubelet.wait_for("nvidia.com/gpu", lambda devs: len(devs) == 8, timeout=5)
    t = time.monotonic()
    assert a.stop(5) == 0 and time.monotonic() - t < 3


# ------------------------------------------------------------------------------- a full disk

def _tmpfs_wrapper(h, mountpoint, size):
    """A program that runs gpuslice in a private mount namespace with a tmpfs of `size` at
    mountpoint (root only: the tests run as root in CI)."""
    os.makedirs(mountpoint, exist_ok=True)
    path = os.path.join(h.base, "in-tmpfs.sh")
    with open(path, "w") as f:
        f.write("#!/bin/sh\nexec unshare -m sh -c 'mount -t tmpfs -o size=%s tmpfs \"$0\" && exec \"$@\"' %s %s \"$@\"\n"
                % (size, mountpoint, agent_harness.GPUSLICE))
    os.chmod(path, 0o755)
    return path


def _fill(path):
    """Fills the file system of path; returns the filler's path."""
    filler = os.path.join(path, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
    finally:
        os.close(fd)
    return filler


def test_allocate_on_a_full_disk(h, monkeypatch):
    """ENOSPC (a real one: a small tmpfs under the guard root) fails Allocate with
    RESOURCE_EXHAUSTED and the errno's text, leaves no partial allocation directory, and
    Allocate works again once there is room."""
    assert os.geteuid() == 0, "the full-disk test mounts a tmpfs: run the tests as root (CI does)"
    node = h.node(T4X2)
    u = node.uuids()
    root = os.path.join(h.base, "guard")
    monkeypatch.setattr(agent_harness, "GPUSLICE", _tmpfs_wrapper(h, root, "256k"))
    a = h.agent(node, GUARD_POLICY, resources=["nvidia.com/gpu"],
                extra=["--guard-root", root, "--guard-gc-interval-ms", "0"])
    seen = f"/proc/{a.pid}/root{root}"     # the agent's mount namespace
    _wait(lambda: os.path.ismount(seen), 5, "no tmpfs in the agent's namespace", a)
    ok = _guard_dir_of(h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::0"]))
    filler = _fill(seen)
    for _ in range(3):
        with pytest.raises(grpc.RpcError) as e:
            h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::1"])
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, (e.value.code(), e.value.details())
        assert re.search(r"cannot (write|create) " + re.escape(root) + r"/a\S+: No space left on device",
                         e.value.details()), e.value.details()
    assert _guard_dirs(seen) == [ok], "a failed Allocate left its directory behind"
    assert [n for n in os.listdir(seen) if ".tmp." in n] == []
    os.unlink(filler)
    again = _guard_dir_of(h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::1"]))
    assert sorted(_guard_dirs(seen)) == sorted([ok, again])
    key = 'gpuslice_allocation_errors_total{resource="nvidia.com/gpu"}'
    _wait(lambda: _samples(_scrape(a)).get(key) == 3, 5, "3 Allocate errors not counted", a)
    assert a.alive()


# ------------------------------------------------------------------------------- the guard GC

def _gc_agent(h, node, root, pr, grace_ms="0"):
    return h.agent(node, GUARD_POLICY, resources=["nvidia.com/gpu"],
                   extra=["--guard-root", root, "--pod-resources-socket", pr.socket_path,
                          "--guard-gc-interval-ms", "100", "--guard-grace-ms", grace_ms])


def test_gc_removes_incomplete_directories(h):
    """A directory without its devices record (an Allocate that failed half-way) used to be kept
    for ever ("cannot tell"); it goes once older than the grace period (and 10 s), even while
    PodResources does not answer. A young one, and complete ones of live pods, stay."""
    from podresources_emulator import PodResourcesEmulator
    node = h.node(T4X2)
    u = node.uuids()
    root = os.path.join(h.base, "guard")
    pr = PodResourcesEmulator(os.path.join(h.base, "pr.sock")).start()
    try:
        pr.set([("default", "keep", "main", "nvidia.com/gpu", [f"{u[0]}::0"])])
        a = _gc_agent(h, node, root, pr)
        keep = _guard_dir_of(h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::0"]))
        old, young = os.path.join(root, "a0-old"), os.path.join(root, "a0-young")
        for d in (old, young):
            os.makedirs(os.path.join(d, "state"))
            with open(os.path.join(d, "limits"), "w") as f:
                f.write("gpuslice-guard 1\n")
        past = time.time() - 600
        os.utime(os.path.join(old, "state"), (past, past))
        os.utime(old, (past, past))
        _wait(lambda: not os.path.exists(old), 5, "incomplete directory not removed", a)
        a.wait_log(r"Removed the guard files of an incomplete allocation \(no devices record\): " + re.escape(old))
        pr.status = grpc.StatusCode.UNAVAILABLE          # PodResources down: incomplete ones still go
        os.makedirs(os.path.join(old, "state"))
        os.utime(old, (past, past))
        _wait(lambda: not os.path.exists(old), 5, "incomplete directory not removed without PodResources", a)
        time.sleep(0.5)
        assert os.path.isdir(young) and os.path.isdir(os.path.join(root, keep)) and a.alive()
    finally:
        pr.stop()


def test_gc_does_not_follow_links_out_of_the_tree(h):
    """The container can write its state directory: links planted there (to a file, to a
    directory outside) are removed as links, what they point to survives; and a directory
    swapped for a link while the GC runs (a bounded race loop) never makes it delete outside."""
    from podresources_emulator import PodResourcesEmulator
    node = h.node(T4X2)
    u = node.uuids()
    root = os.path.join(h.base, "guard")
    victim = os.path.join(h.base, "victim")
    os.makedirs(os.path.join(victim, "sub"))
    for p in (os.path.join(victim, "precious"), os.path.join(victim, "sub", "precious")):
        with open(p, "w") as f:
            f.write("keep me\n")
    pr = PodResourcesEmulator(os.path.join(h.base, "pr.sock")).start()
    try:
        keep = [("default", "keep", "main", "nvidia.com/gpu", [f"{u[0]}::0"])]
        # the three pods are alive while their containers plant the links (else the GC, every
        # 100 ms, may remove a directory between two of the test's steps), then gone
        pr.set(keep + [("default", f"gone{i}", "main", "nvidia.com/gpu", [f"{u[0]}::{i}"]) for i in range(1, 4)])
        a = _gc_agent(h, node, root, pr)
        planted = []
        for i in range(1, 4):
            d = _guard_dir_of(h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::{i}"]))
            state = os.path.join(root, d, "state")
            os.makedirs(os.path.join(state, "deep", "er"))
            os.symlink(victim, os.path.join(state, "dirlink"))
            os.symlink(os.path.join(victim, "precious"), os.path.join(state, "deep", "er", "filelink"))
            planted.append(d)
        pr.set(keep)
        # the race: a directory in the state dir of a live pod's allocation flips to a link to the
        # victim and back while the GC (every 100 ms) removes the others'
        live = _guard_dir_of(h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::0"]))
        _wait(lambda: not (set(planted) & set(_guard_dirs(root))), 5, "guard dirs of gone pods not removed", a)
        race = os.path.join(root, live, "state", "flip")
        pr.set([])
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and os.path.isdir(os.path.join(root, live)):
            try:
                for d in (race, os.path.join(race, "x")):   # never the parents: the GC removes them
                    if not os.path.isdir(d):
                        os.mkdir(d)
                with open(os.path.join(race, "x", "f"), "w") as f:
                    f.write("x")
                os.rename(race, race + ".old")
                os.symlink(victim, race)
                os.unlink(race)
                os.rename(race + ".old", race)
            except OSError:
                pass                                   # the GC got there first
        _wait(lambda: live not in _guard_dirs(root), 5, "guard dir of the racing pod not removed", a)
        for p in (os.path.join(victim, "precious"), os.path.join(victim, "sub", "precious")):
            with open(p) as f:
                assert f.read() == "keep me\n", p
        assert stat.S_ISDIR(os.lstat(os.path.join(victim, "sub")).st_mode) and a.alive()
    finally:
        pr.stop()
