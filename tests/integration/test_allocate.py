"""Integration tests of the agent's Allocate answers: visible devices in request order,
replicas deduplicated, the index strategy, device specs (whole GPUs, MIG capabilities through
mig-minors), refused requests, and the guard's mounts and limits file for replicas with
memoryPerReplica. Harness and fixture: agent_harness.py.

Environment (set by meson): GPUSLICE (the binary), GPUSLICE_SIM_LIB, GS_SOURCE_ROOT.

Run: /usr/bin/python3 -m pytest -q tests/integration/test_allocate.py"""
import os
import stat
import subprocess

import grpc
import pytest

from agent_harness import H100_L4, MIXED, T4X2, TS4, WHOLE, h, ts_policy  # noqa: F401 (h: fixture)


# ------------------------------------------------------------------------------- Allocate

def test_allocate_whole_env_in_request_order(h):
    node = h.node(T4X2)
    u = node.uuids()
    h.agent(node, WHOLE, resources=["nvidia.com/gpu"])
    r = h.kubelet.allocate("nvidia.com/gpu", [u[1], u[0]])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == f"{u[1]},{u[0]}"
    assert list(r.devices) == [], "no device specs without passDeviceSpecs"
    r = h.kubelet.allocate("nvidia.com/gpu", [u[0]])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == u[0]


def test_allocate_replicas_deduplicated(h):
    node = h.node(T4X2)
    u = node.uuids()
    h.agent(node, TS4, resources=["nvidia.com/gpu"])
    r = h.kubelet.allocate("nvidia.com/gpu", [f"{u[1]}::2", f"{u[0]}::0", f"{u[1]}::3"])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == f"{u[1]},{u[0]}"
    r = h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::3"])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == u[0]


def test_allocate_index_strategy(h):
    node = h.node(T4X2)
    u = node.uuids()
    flags = "  plugin:\n    deviceIDStrategy: index\n"
    h.agent(node, ts_policy(2, extra_flags=flags), resources=["nvidia.com/gpu"])
    r = h.kubelet.allocate("nvidia.com/gpu", [f"{u[1]}::0", f"{u[0]}::1", f"{u[1]}::1"])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == "1,0"


def test_allocate_index_strategy_whole(h):
    node = h.node(T4X2)
    u = node.uuids()
    h.agent(node, "version: v1\nflags:\n  plugin:\n    deviceIDStrategy: index\n", resources=["nvidia.com/gpu"])
    assert h.kubelet.allocate("nvidia.com/gpu", [u[1], u[0]]).envs["NVIDIA_VISIBLE_DEVICES"] == "1,0"


def _devroot(h, files):
    root = os.path.join(h.base, "devroot")
    for f in files:
        path = os.path.join(root, f.lstrip("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").close()
    return root


def _specs(response):
    out = {}
    for d in response.devices:
        assert d.container_path not in out, f"duplicate device spec {d.container_path}"
        out[d.container_path] = d
    return out


def test_allocate_device_specs(h):
    node = h.node(T4X2)
    u = node.uuids()
    root = _devroot(h, ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0"])   # no uvm-tools, no nvidia1
    flags = f"  nvidiaDevRoot: {root}\n  plugin:\n    passDeviceSpecs: true\n"
    h.agent(node, ts_policy(2, extra_flags=flags), resources=["nvidia.com/gpu"])
    specs = _specs(h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::0", f"{u[0]}::1"]))
    assert sorted(specs) == ["/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidiactl"]
    for path, d in specs.items():
        assert d.host_path == root + path
        assert "r" in d.permissions and "w" in d.permissions


def test_allocate_device_specs_missing_gpu_node_refused(h):
    # Optional nodes (nvidia-uvm, ...) are listed only when they exist under the dev root; a
    # missing /dev/nvidia<minor> fails the Allocate with the path named, rather than starting a
    # container without its GPU.
    node = h.node(T4X2)
    u = node.uuids()
    root = _devroot(h, ["/dev/nvidiactl", "/dev/nvidia-uvm-tools", "/dev/nvidia0"])   # no nvidia-uvm, no nvidia1
    flags = f"  nvidiaDevRoot: {root}\n  plugin:\n    passDeviceSpecs: true\n"
    h.agent(node, f"version: v1\nflags:\n{flags}", resources=["nvidia.com/gpu"])
    specs = _specs(h.kubelet.allocate("nvidia.com/gpu", [u[0]]))
    assert sorted(specs) == ["/dev/nvidia-uvm-tools", "/dev/nvidia0", "/dev/nvidiactl"]
    with pytest.raises(grpc.RpcError) as e:
        h.kubelet.allocate("nvidia.com/gpu", [u[1]])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"device node {root}/dev/nvidia1 does not exist" in e.value.details()


def _mig_minors(ngpus=8, ngi=15, nci=8):
    """A /proc/driver/nvidia-caps/mig-minors as the driver writes it."""
    lines = ["config 1", "monitor 2"]
    n = 3
    for g in range(ngpus):
        for gi in range(ngi):
            lines.append(f"gpu{g}/gi{gi}/access {n}")
            n += 1
            for ci in range(nci):
                lines.append(f"gpu{g}/gi{gi}/ci{ci}/access {n}")
                n += 1
    table = {}
    for line in lines:
        key, value = line.split()
        table[key] = int(value)
    return "\n".join(lines) + "\n", table


def test_allocate_mig_device_specs(h):
    node = h.node(H100_L4)
    m = node.mig_create(1, "1g.10gb", 0)
    dev = node.mig_device(m)
    text, table = _mig_minors()
    gi_cap = table[f"gpu{dev['minor']}/gi{dev['gi_id']}/access"]
    ci_cap = table[f"gpu{dev['minor']}/gi{dev['gi_id']}/ci{dev['ci_id']}/access"]
    proc = os.path.join(h.base, "proc")
    os.makedirs(os.path.join(proc, "driver", "nvidia-caps"))
    with open(os.path.join(proc, "driver", "nvidia-caps", "mig-minors"), "w") as f:
        f.write(text)
    root = _devroot(h, ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0",
                        f"/dev/nvidia{dev['minor']}", f"/dev/nvidia-caps/nvidia-cap{gi_cap}",
                        f"/dev/nvidia-caps/nvidia-cap{ci_cap}"])
    policy = MIXED + f"  nvidiaDevRoot: {root}\n  plugin:\n    passDeviceSpecs: true\n"
    h.agent(node, policy, resources=["nvidia.com/mig-1g.10gb"], extra=["--proc-root", proc])
    r = h.kubelet.allocate("nvidia.com/mig-1g.10gb", [m])
    assert r.envs["NVIDIA_VISIBLE_DEVICES"] == m
    specs = _specs(r)
    assert sorted(specs) == sorted(["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                    f"/dev/nvidia{dev['minor']}", f"/dev/nvidia-caps/nvidia-cap{gi_cap}",
                                    f"/dev/nvidia-caps/nvidia-cap{ci_cap}"])
    for path, d in specs.items():
        assert d.host_path == root + path


def test_allocate_rejects_unknown_ids(h):
    node = h.node(T4X2)
    u = node.uuids()
    h.agent(node, TS4, resources=["nvidia.com/gpu"])
    for bad in ["GPU-00000000-0000-0000-0000-000000000000", f"{u[0]}::4", u[0], "MIG-nothing"]:
        with pytest.raises(grpc.RpcError) as err:
            h.kubelet.allocate("nvidia.com/gpu", [f"{u[1]}::0", bad])
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (bad, err.value)
        assert bad in err.value.details(), (bad, err.value.details())
    # The agent still serves after rejected requests.
    assert h.kubelet.allocate("nvidia.com/gpu", [f"{u[1]}::0"]).envs["NVIDIA_VISIBLE_DEVICES"] == u[1]


def test_fail_requests_greater_than_one(h):
    node = h.node(T4X2)
    u = node.uuids()
    h.agent(node, ts_policy(2, fail_gt_one=True), resources=["nvidia.com/gpu"])
    assert h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::1"]).envs["NVIDIA_VISIBLE_DEVICES"] == u[0]
    with pytest.raises(grpc.RpcError) as err:
        h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::0", f"{u[1]}::0"])
    assert "maximum request size for shared resources is 1" in err.value.details()


# ------------------------------------------------------------------------------- the guard in Allocate

def test_allocate_injects_guard_for_memory_per_replica(h):
    node = h.node(T4X2)
    u = node.uuids()
    guard_root = os.path.join(h.base, "guard")
    policy = ("version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
              "    - name: nvidia.com/gpu\n      replicas: 4\n      memoryPerReplica: 2GiB\n")
    h.agent(node, policy, resources=["nvidia.com/gpu.shared"], extra=["--guard-root", guard_root])
    resp = h.kubelet.allocate("nvidia.com/gpu.shared", [f"{u[1]}::0", f"{u[1]}::3", f"{u[0]}::2"])
    assert resp.envs["NVIDIA_VISIBLE_DEVICES"] == f"{u[1]},{u[0]}"
    assert resp.envs["GPUSLICE_GUARD_CONFIG"] == "/etc/gpuslice/guard.conf"
    mounts = {m.container_path: m for m in resp.mounts}
    assert set(mounts) == {"/usr/lib/gpuslice/libgpuslice-guard.so", "/etc/gpuslice/guard.conf",
                           "/run/gpuslice/guard", "/etc/ld.so.preload"}
    assert mounts["/etc/gpuslice/guard.conf"].read_only and not mounts["/run/gpuslice/guard"].read_only
    assert mounts["/usr/lib/gpuslice/libgpuslice-guard.so"].host_path.endswith("libgpuslice-guard.so")
    assert os.path.exists(mounts["/usr/lib/gpuslice/libgpuslice-guard.so"].host_path)
    with open(mounts["/etc/ld.so.preload"].host_path) as f:
        assert f.read().strip() == "/usr/lib/gpuslice/libgpuslice-guard.so"
    with open(mounts["/etc/gpuslice/guard.conf"].host_path) as f:
        limits = f.read().splitlines()
    assert limits[0] == "gpuslice-guard 1" and "on-error closed" in limits
    assert "region /run/gpuslice/guard/region" in limits
    # container ordinal 0 = GPU 1 with two replicas (4 GiB), ordinal 1 = GPU 0 with one (2 GiB)
    assert f"device 0 {u[1]} {4 << 30} 0" in limits
    assert f"device 1 {u[0]} {2 << 30} 0" in limits
    assert os.path.isdir(mounts["/run/gpuslice/guard"].host_path)
    # The region exists, empty and writable by any user of the container (the directory is root's)
    st = os.stat(os.path.join(mounts["/run/gpuslice/guard"].host_path, "region"))
    assert stat.S_IMODE(st.st_mode) == 0o666 and st.st_size == 0
    # Each container gets its own limits and counters.
    resp2 = h.kubelet.allocate("nvidia.com/gpu.shared", [f"{u[0]}::1"])
    other = {m.container_path: m.host_path for m in resp2.mounts}
    assert other["/etc/gpuslice/guard.conf"] != mounts["/etc/gpuslice/guard.conf"].host_path


def test_allocate_without_memory_per_replica_injects_nothing(h):
    node = h.node(T4X2)
    u = node.uuids()
    h.agent(node, ts_policy(2), resources=["nvidia.com/gpu"])
    resp = h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::0"])
    assert "GPUSLICE_GUARD_CONFIG" not in resp.envs and len(resp.mounts) == 0


@pytest.mark.skipif(os.environ.get("GS_SANITIZED") == "1",
                    reason="the preloaded guard cannot run inside a sanitizer runtime (tests/guard)")
def test_mounted_guard_library_is_the_guard(h, monkeypatch):
    """The library the agent mounts as the guard refuses an allocation past a quota. The agent
    finds both its libraries as on a node: no GPUSLICE_SIM_LIB, no GPUSLICE_GUARD_LIB (under
    --sim the simulator's lookup once overwrote the guard's path, so the NVML simulator was
    mounted where the guard should be)."""
    monkeypatch.delenv("GPUSLICE_SIM_LIB", raising=False)
    monkeypatch.delenv("GPUSLICE_GUARD_LIB", raising=False)
    build = os.environ.get("GS_BUILD_ROOT") or os.path.dirname(os.environ["GPUSLICE"])
    fake_cuda = os.path.join(build, "tests", "guard")
    node = h.node(T4X2)
    u = node.uuids()
    policy = ("version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
              "    - name: nvidia.com/gpu\n      replicas: 2\n      memoryPerReplica: 1GiB\n")
    h.agent(node, policy, resources=["nvidia.com/gpu.shared"], extra=["--guard-root", os.path.join(h.base, "g")])
    resp = h.kubelet.allocate("nvidia.com/gpu.shared", [f"{u[0]}::0"])
    lib = {m.container_path: m for m in resp.mounts}["/usr/lib/gpuslice/libgpuslice-guard.so"].host_path
    limits = h.write("limits", f"gpuslice-guard 1\non-error closed\nregion {h.base}/region\n"
                               f"device 0 - {32 << 20} 0\n")
    env = dict(os.environ, LD_PRELOAD=lib, GPUSLICE_GUARD_CONFIG=limits, LD_LIBRARY_PATH=fake_cuda)
    p = subprocess.run([os.path.join(fake_cuda, "guard_app"), "alloc", "16M", "3"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    kv = dict(l.split("=", 1) for l in p.stdout.splitlines() if "=" in l)
    assert kv["ok"] == "2" and kv["first_err"] == "2", (lib, p.stdout)  # the third 16 MiB is refused


# ------------------------------------------------------------------------------- time-sliced MIG devices

def test_allocate_time_sliced_mig_device(h):
    """NVIDIA-style time-slicing of a MIG resource: each MIG device advertised `replicas` times as
    `<MIG-UUID>::<n>` (before, the entry selected nothing and the devices were advertised once);
    Allocate maps replicas back to their MIG device, and the guard's quota is the MIG device's
    memory / replicas."""
    node = h.node(H100_L4)
    m0 = node.mig_create(1, "1g.10gb", 0)
    m1 = node.mig_create(1, "1g.10gb", 1)
    guard_root = os.path.join(h.base, "guard")
    policy = MIXED + ("sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/mig-1g.10gb\n"
                      "      replicas: 3\n      memoryPerReplica: 3GiB\n")
    h.agent(node, policy, resources=["nvidia.com/mig-1g.10gb"], extra=["--guard-root", guard_root])
    ids = sorted(d.id for d in h.kubelet.devices("nvidia.com/mig-1g.10gb"))
    assert ids == sorted(f"{m}::{n}" for m in (m0, m1) for n in range(3))
    resp = h.kubelet.allocate("nvidia.com/mig-1g.10gb", [f"{m1}::2", f"{m1}::0"])
    assert resp.envs["NVIDIA_VISIBLE_DEVICES"] == m1
    mounts = {m.container_path: m for m in resp.mounts}
    with open(mounts["/etc/gpuslice/guard.conf"].host_path) as f:
        limits = f.read().splitlines()
    assert f"device 0 {m1} {6 << 30} 0" in limits          # two replicas: twice the quota


# ------------------------------------------------------------------------------- the simulated node's root

def test_allocate_device_specs_on_the_simulated_root(h):
    """passDeviceSpecs with no nvidiaDevRoot on a simulated node: the device nodes of its root
    (docs/simulator.md#the-nodes-root), which exist; before the root, nvidia1 was refused."""
    node = h.node(T4X2)
    u = node.uuids()
    h.agent(node, ts_policy(2, extra_flags="  plugin:\n    passDeviceSpecs: true\n"), resources=["nvidia.com/gpu"])
    r = h.kubelet.allocate("nvidia.com/gpu", [f"{u[1]}::0"])
    specs = _specs(r)
    assert sorted(specs) == ["/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia1",
                             "/dev/nvidiactl"]
    root = os.path.join(node.state, "root")
    for path, d in specs.items():
        assert d.host_path == root + path and os.path.isfile(d.host_path)


def test_allocate_mig_device_specs_on_the_simulated_root(h):
    """A MIG device's capability nodes from the simulated node's own mig-minors (no --proc-root)."""
    node = h.node(H100_L4)
    m = node.mig_create(1, "1g.10gb", 0)
    dev = node.mig_device(m)
    _, table = _mig_minors(ngpus=6)
    gi_cap = table[f"gpu{dev['minor']}/gi{dev['gi_id']}/access"]
    ci_cap = table[f"gpu{dev['minor']}/gi{dev['gi_id']}/ci{dev['ci_id']}/access"]
    h.agent(node, MIXED + "  plugin:\n    passDeviceSpecs: true\n", resources=["nvidia.com/mig-1g.10gb"])
    r = h.kubelet.allocate("nvidia.com/mig-1g.10gb", [m])
    specs = _specs(r)
    caps = [f"/dev/nvidia-caps/nvidia-cap{gi_cap}", f"/dev/nvidia-caps/nvidia-cap{ci_cap}"]
    assert sorted(specs) == sorted(["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset",
                                    f"/dev/nvidia{dev['minor']}", *caps])
    root = os.path.join(node.state, "root")
    for path, d in specs.items():
        assert d.host_path == root + path and os.path.isfile(d.host_path), path


def test_allocate_cdi_strategies_on_the_simulated_node(h):
    """cdi-cri and cdi-annotations with no --proc-root: the agent writes the node's spec from the
    simulated root and answers with its names (before: 'no nvidia-frontend character device')."""
    import json
    node = h.node(H100_L4)
    m = node.mig_create(0, "3g.40gb", 4)
    policy = ("version: v1\nflags:\n  migStrategy: mixed\n  plugin:\n"
              "    deviceListStrategy: [cdi-cri, cdi-annotations]\n")
    a = h.agent(node, policy, resources=["nvidia.com/mig-3g.40gb", "nvidia.com/gpu"])
    a.wait_log(r"CDI spec written to .*gpuslice.json")
    with open(os.path.join(a.cdi_root, "gpuslice.json")) as f:
        spec = json.load(f)
    names = {d["name"] for d in spec["devices"]}
    assert m in names
    r = h.kubelet.allocate("nvidia.com/mig-3g.40gb", [m])
    assert [d.name for d in r.cdi_devices] == [f"gpuslice.io/gpu={m}"]
    mounts = {x["containerPath"]: x["hostPath"] for x in spec["containerEdits"]["mounts"]}
    lib = mounts["/usr/local/nvidia/lib64/libnvidia-ml.so.1"]
    assert lib.startswith(os.path.join(node.state, "root") + "/")
    assert os.path.samefile(lib, os.environ["GPUSLICE_SIM_LIB"])   # the stand-in driver's NVML is the simulator


# ------------------------------------------------------------------------------- hostile requests

def test_allocate_rejects_ids_with_a_nul_byte(h):
    """protobuf-c hands string fields over as C strings: "ID\\0junk" used to be taken as "ID"."""
    node = h.node(T4X2)
    u = node.uuids()
    h.agent(node, TS4, resources=["nvidia.com/gpu"])
    for ids, where in [([f"{u[0]}::0\x00junk"], "container_requests[0].devices_ids[0]"),
                       ([f"{u[1]}::0", f"{u[0]}::1\x00"], "container_requests[0].devices_ids[1]")]:
        with pytest.raises(grpc.RpcError) as err:
            h.kubelet.allocate("nvidia.com/gpu", ids)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value
        assert where in err.value.details() and "contains a NUL byte" in err.value.details(), err.value.details()
        assert "\\0" in err.value.details(), err.value.details()
    assert h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::0"]).envs["NVIDIA_VISIBLE_DEVICES"] == u[0]


def test_preferred_allocation_validated(h):
    """Every field of GetPreferredAllocation is checked, with the field and ID named: a size of
    at least 1 and at most the available IDs, must-include IDs among the available ones and no
    more of them than the size, known IDs, none twice, no NUL byte."""
    node = h.node(T4X2)
    u = node.uuids()
    h.agent(node, TS4, resources=["nvidia.com/gpu"])
    every = [f"{g}::{n}" for g in u for n in range(4)]
    bad = [
        (every, [], 0, "allocation_size: 0 is not a positive number of devices"),
        (every, [], -3, "allocation_size: -3 is not a positive number of devices"),
        (every[:2], [], 3, "allocation_size: 3 is more than the 2 available_deviceIDs"),
        (every, every[:3], 2, "must_include_deviceIDs: 3 IDs, more than allocation_size 2"),
        (every[:4], [every[5]], 2, f"must_include_deviceIDs[0]: device ID '{every[5]}' is not in available_deviceIDs"),
        (every[:4] + [every[1]], [], 2, f"available_deviceIDs[4]: device ID '{every[1]}' listed twice"),
        (every, [every[2], every[2]], 2, f"must_include_deviceIDs[1]: device ID '{every[2]}' listed twice"),
        (every + ["GPU-nothing::0"], [], 2, "available_deviceIDs[8]: unknown device ID 'GPU-nothing::0'"),
        (every[:3] + [every[3] + "\x00x"], [], 2, "available_deviceIDs[3]: "),
        (every, [every[0] + "\x00"], 1, "must_include_deviceIDs[0]: "),
    ]
    for avail, must, size, message in bad:
        with pytest.raises(grpc.RpcError) as err:
            h.kubelet.preferred("nvidia.com/gpu", avail, must, size)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (message, err.value)
        assert "container_requests[0]." + message in err.value.details(), (message, err.value.details())
    got = h.kubelet.preferred("nvidia.com/gpu", every, [every[5]], 2)
    assert len(got) == 2 and every[5] in got and len(set(got)) == 2



H100_WHOLE = "gpus:\n  - model: H100-SXM5-80GB\n    count: 2\ndriver_version: \"580.65.06\"\ncuda_version: \"13.0\"\n"


@pytest.mark.parametrize("node_file,arch_mib", [(T4X2, 300), (H100_WHOLE, 500)], ids=["turing", "hopper"])
def test_guard_context_overhead_follows_the_gpu(h, node_file, arch_mib):
    """The limits file counts each CUDA context at the estimate for the GPU's architecture (a T4 is
    Turing: 300 MiB; an H100 is Hopper: 500 MiB), not one figure for every GPU."""
    node = h.node(node_file)
    u = node.uuids()
    policy = ("version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
              "    - name: nvidia.com/gpu\n      replicas: 2\n      memoryPerReplica: 2GiB\n")
    h.agent(node, policy, resources=["nvidia.com/gpu.shared"], extra=["--guard-root", os.path.join(h.base, "g")])
    resp = h.kubelet.allocate("nvidia.com/gpu.shared", [f"{u[0]}::0"])
    with open({m.container_path: m for m in resp.mounts}["/etc/gpuslice/guard.conf"].host_path) as f:
        limits = f.read().splitlines()
    assert f"context-overhead {arch_mib << 20}" in limits, limits
