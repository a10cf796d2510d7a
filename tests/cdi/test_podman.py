"""podman (Debian 12's 4.3.1, a real consumer no one here wrote: its CDI library is the reference
library 0.5.x) runs containers with gpuslice's CDI devices, and the test looks inside them at what
was injected: the environment, the device nodes (created by the runtime: 195:N for the GPUs), the
driver's files mounted read-only, the hook's work (libcuda.so link, linker configuration, the
image's linker cache) and, for an allocation with a VRAM quota, the guard's files.

How podman runs here: as root, each run in a private mount namespace (`unshare -m`) with a tmpfs on
/run, so the spec directory podman 4.3 reads (/var/run/cdi: it has no --cdi-spec-dir) is the test's
own and nothing of the machine's /run or /etc/cdi is read or written; its storage (vfs) lives in
the test's directory; runc as the OCI runtime with cgroupfs (crun 1.8 refuses this machine's hybrid
cgroup layout); no network; rlimits below the hard limits (the sandbox lacks CAP_SYS_RESOURCE, so
podman's defaults, above them, cannot be set). The image is imported from a tarball: Debian's static
busybox and the static /sbin/ldconfig, no registry. podman, runc and busybox-static come from
scripts/deps.sh; without them (or without root) the tests fail.

Environment (set by meson): GPUSLICE, GPUSLICE_SIM_LIB, GS_CDIHOOK, GS_SOURCE_ROOT."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

import pytest

ROOT = os.environ.get("GS_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOOK = os.environ.get("GS_CDIHOOK", "")
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from agent_harness import T4X2, h  # noqa: E402,F401 (h: the fixture)
from test_agent import _cdi_policy, _proc_root, _spec  # noqa: E402
from test_cdi import fake_driver_root, run  # noqa: E402

IMAGE = "localhost/gpuslice-cdi-test:busybox"
LIB = "/usr/local/nvidia/lib64"
RUN = r"""set -e
mount -t tmpfs -o mode=0755 gs-run /run
mkdir /run/cdi
mount --bind "$GS_SPECS" /run/cdi
if [ -d /etc/cdi ]; then mount -t tmpfs gs-etc-cdi /etc/cdi; fi
exec podman --root "$GS_STORE" --runroot /run/containers/storage --storage-driver vfs \
    --events-backend none --cgroup-manager cgroupfs "$@"
"""


def podman(work, specs, *args, timeout=120):
    """podman ARGS in a private mount namespace where SPECS is /var/run/cdi."""
    env = dict(os.environ, GS_SPECS=specs, GS_STORE=os.path.join(work, "store"))
    return subprocess.run(["unshare", "-m", "--propagation", "private", "/bin/sh", "-c", RUN, "podman", *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def work():
    for tool in ("podman", "runc", "unshare"):
        assert shutil.which(tool), f"{tool} is not installed (scripts/deps.sh installs podman and runc)"
    assert os.geteuid() == 0, "podman runs rootful here: the tests need root"
    assert HOOK and os.access(HOOK, os.X_OK), f"GS_CDIHOOK={HOOK!r}: not the built hook"
    d = tempfile.mkdtemp(prefix="gs-podman-", dir="/tmp")
    busybox = "/bin/busybox"
    p = subprocess.run(["ldd", busybox], capture_output=True, text=True)
    assert os.path.exists(busybox) and "not a dynamic executable" in p.stderr, \
        "no static /bin/busybox (scripts/deps.sh installs busybox-static)"
    tar = os.path.join(d, "rootfs.tar")
    with tarfile.open(tar, "w") as t:
        t.add(busybox, "bin/busybox")
        t.add(shutil.which("ldconfig") or "/sbin/ldconfig", "sbin/ldconfig")  # static, as glibc builds it
    empty = os.path.join(d, "empty")
    os.makedirs(empty)
    p = podman(d, empty, "import", tar, IMAGE)
    assert p.returncode == 0, p.stderr
    yield d
    shutil.rmtree(d, ignore_errors=True)


def inside(work, specs, devices, script):
    """Runs SCRIPT (busybox sh) in a container of the image with DEVICES; returns its stdout."""
    args = ["run", "--rm", "--runtime", "runc", "--network", "none", "--ulimit", "nofile=1024:1024",
            "--ulimit", "nproc=1024:1024"]
    for dev in devices:
        args += ["--device", dev]
    p = podman(work, specs, *args, IMAGE, "/bin/busybox", "sh", "-c", script)
    assert p.returncode == 0, f"podman run: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p.stdout


SHOW = r"""export PATH=/bin:/sbin
busybox env | busybox sed 's/^/env /'
for n in /dev/nvidia*; do busybox stat -c 'node %n %F %t %T' "$n"; done
busybox grep -E ' (/usr/local/nvidia|/etc/gpuslice|/etc/ld.so.preload|/usr/lib/gpuslice|/run/gpuslice)' /proc/mounts | busybox sed 's/^/mount /'
for f in $(busybox awk '{print $2}' /proc/mounts | busybox grep -E '^(/usr/local/nvidia|/etc/gpuslice|/etc/ld.so.preload|/usr/lib/gpuslice|/run/gpuslice)'); do
    [ -f "$f" ] && busybox md5sum "$f" | busybox sed 's/^/md5 /'
done
for l in /usr/local/nvidia/lib64/*.so; do [ -L "$l" ] && echo "link $l $(busybox readlink "$l")"; done
[ -f /etc/ld.so.conf.d/00-gpuslice.conf ] && busybox sed 's/^/ldconf /' /etc/ld.so.conf.d/00-gpuslice.conf
[ -f /etc/ld.so.cache ] && ldconfig -p | busybox sed 's/^/cache /'
true
"""


# what podman and busybox's shell put in every container's environment
PODMAN_ENV = {"PATH", "HOSTNAME", "HOME", "TERM", "container", "SHLVL", "PWD"}


def parse(out):
    res = {"env": set(), "node": {}, "mount": {}, "md5": {}, "link": {}, "ldconf": [], "cache": []}
    for line in out.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "env":
            res["env"].add(rest)
        elif kind == "node":
            path, desc = rest.split(" ", 1)
            ftype, major, minor = desc.rsplit(" ", 2)  # "%F %t %T": type, major and minor in hex
            res["node"][path] = (ftype, int(major, 16), int(minor, 16))
        elif kind == "mount":
            f = rest.split()
            res["mount"][f[1]] = set(f[3].split(","))
        elif kind == "md5":
            digest, path = rest.split()
            res["md5"][path] = digest
        elif kind == "link":
            path, target = rest.split()
            res["link"][path] = target
        elif kind in ("ldconf", "cache"):
            res[kind].append(rest.strip())
    return res


def md5(path):
    with open(path, "rb") as f:
        return hashlib.md5(f.read()).hexdigest()


def edits(spec, name):
    dev = next(d for d in spec["devices"] if d["name"] == name)
    return [dev["containerEdits"], spec.get("containerEdits", {})]


def check_injected(res, specs_and_names):
    """Exactly the listed devices' and specs' nodes, environment and mounts are in the container."""
    nodes, env, mounts = {}, set(), {}
    for spec, name in specs_and_names:
        for e in edits(spec, name):
            nodes.update({n["path"]: ("character special file", n["major"], n["minor"]) for n in e.get("deviceNodes", [])})
            env |= set(e.get("env", []))
            mounts.update({m["containerPath"]: m for m in e.get("mounts", [])})
    assert res["node"] == nodes
    assert {e for e in res["env"] if e.split("=", 1)[0] not in PODMAN_ENV} == env
    assert set(res["mount"]) == set(mounts)
    for dst, m in mounts.items():
        assert "ro" in res["mount"][dst] or "ro" not in m.get("options", []), (dst, res["mount"][dst])
        if os.path.isfile(m["hostPath"]):
            assert res["md5"][dst] == md5(m["hostPath"]), f"{dst} is not {m['hostPath']}"


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the fake driver root uses the x86_64 library directory")
def test_node_spec_device_with_driver_files_and_hook(work, tmp_path):
    tmp = str(tmp_path)
    root = fake_driver_root(tmp, video=True)
    p = run(tmp, "t4x2.yaml", "cdi", "generate", "--driver-root", root, "--hook", HOOK, "--scan-dir", tmp)
    assert p.returncode == 0, p.stderr
    spec = json.loads(p.stdout)
    assert spec["cdiVersion"] == "0.5.0" and spec["containerEdits"]["hooks"][0]["path"] == HOOK
    specs = os.path.join(tmp, "specs")
    os.makedirs(specs)
    with open(os.path.join(specs, "gpuslice.json"), "w") as f:
        f.write(p.stdout)
    res = parse(inside(work, specs, ["gpuslice.io/gpu=0"], SHOW))
    check_injected(res, [(spec, "0")])
    assert res["node"]["/dev/nvidia0"] == ("character special file", 195, 0) and "/dev/nvidia1" not in res["node"]
    assert "NVIDIA_VISIBLE_DEVICES=void" in res["env"]
    assert f"{LIB}/libcuda.so.1" in res["mount"] and f"{LIB}/libnvcuvid.so.1" in res["mount"]
    # the hook, run by podman's runtime on the host, worked inside the container's root
    assert res["link"] == {f"{LIB}/libcuda.so": "libcuda.so.1", f"{LIB}/libnvidia-opticalflow.so": "libnvidia-opticalflow.so.1"}
    assert res["ldconf"] == [LIB]
    assert any(line.startswith("libcuda.so.1 ") and line.endswith(f"=> {LIB}/libcuda.so.1") for line in res["cache"]), \
        res["cache"]
    # GPU 0 by its UUID: the same device nodes
    uuid = next(d["name"] for d in spec["devices"] if d["name"].startswith("GPU-")
                and [n["path"] for n in d["containerEdits"]["deviceNodes"]] == ["/dev/nvidia0"])
    assert parse(inside(work, specs, [f"gpuslice.io/gpu={uuid}"], SHOW))["node"] == res["node"]


def test_unknown_device_is_refused(work, tmp_path):
    """The narrowest check that podman resolved names through the spec: a name the spec lacks is
    refused before any container is made."""
    tmp = str(tmp_path)
    p = run(tmp, "t4x2.yaml", "cdi", "generate", "--hook", "", "--scan-dir", tmp)
    assert p.returncode == 0, p.stderr
    specs = os.path.join(tmp, "specs")
    os.makedirs(specs)
    with open(os.path.join(specs, "gpuslice.json"), "w") as f:
        f.write(p.stdout)
    q = podman(work, specs, "run", "--rm", "--runtime", "runc", "--network", "none", "--device", "gpuslice.io/gpu=7",
               IMAGE, "/bin/busybox", "true")
    assert q.returncode != 0 and "unresolvable CDI devices gpuslice.io/gpu=7" in q.stderr, q.stderr


def test_agent_guard_allocation(work, h):  # noqa: F811 (h: the fixture)
    """The agent's node spec and the per-allocation guard spec of a replica with a VRAM quota,
    both named in the Allocate answer, given to podman as the kubelet gives them to the runtime."""
    node = h.node(T4X2)
    u = node.uuids()
    policy = _cdi_policy(["cdi-cri"]) + "      memoryPerReplica: 4GiB\n"
    a = h.agent(node, policy, resources=["nvidia.com/gpu"],
                extra=["--proc-root", _proc_root(h), "--guard-root", os.path.join(h.base, "guard"), "--cdi-hook", HOOK])
    r = h.kubelet.allocate("nvidia.com/gpu", [f"{u[1]}::0"])
    names = [d.name for d in r.cdi_devices]
    assert len(names) == 2 and names[0] == f"gpuslice.io/gpu={u[1]}" and names[1].startswith("gpuslice.io/gpu=alloc-")
    alloc_name = names[1].split("=", 1)[1]
    with open(os.path.join(a.cdi_root, f"gpuslice.io-gpu_{alloc_name}.json")) as f:
        alloc = json.load(f)
    res = parse(inside(work, a.cdi_root, names, SHOW + "busybox cat /etc/gpuslice/guard.conf | busybox sed 's/^/conf /'\n"))
    check_injected(res, [(_spec(a), u[1]), (alloc, alloc_name)])
    assert res["node"]["/dev/nvidia1"] == ("character special file", 195, 1) and "/dev/nvidia0" not in res["node"]
    assert "GPUSLICE_GUARD_CONFIG=/etc/gpuslice/guard.conf" in res["env"]
    assert {"/etc/gpuslice/guard.conf", "/etc/ld.so.preload"} <= set(res["mount"])
    mounts = {m["containerPath"]: m["hostPath"] for m in alloc["devices"][0]["containerEdits"]["mounts"]}
    guard = next(p for p in mounts if p.endswith("libgpuslice-guard.so"))
    assert res["md5"][guard] == md5(mounts[guard])
