"""The guard in a pod: a time-sliced replica with a VRAM quota (memoryPerReplica: 2GiB), run by
the real kubelet and containerd. The agent's Allocate answer mounts the guard library, its limits
and /etc/ld.so.preload into the container; inside it, a program on the simulated CUDA driver
(tests/guard: guard_app and its libcuda.so.1, in an image with the host's dynamic loader and libc)
gets 1 GiB, and is refused past the quota (CUDA_ERROR_OUT_OF_MEMORY), though the simulated GPU
has 16 GiB free. In a sanitizer build guard_app carries the sanitizer's runtime, which cannot come
after a preloaded guard (it crashes in the runtime's start-up, as tests/guard/test_guard.c says):
there the test skips and says so; the e2e stage of scripts/test.sh runs in the normal build."""
import os
import shutil
import subprocess
import tempfile

import pytest

from e2e import GUARD_LIB

GUARD_APP = os.environ.get("GS_GUARD_APP", "")
FAKE_CUDA = os.environ.get("GS_FAKE_CUDA", "")
IMAGE = "gpuslice.local/guard-test:e2e"
POLICY = ("version: v1\nflags:\n  plugin:\n    deviceListStrategy: cdi-cri\nsharing:\n  timeSlicing:\n"
          "    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n      memoryPerReplica: 2GiB\n")
SCRIPT = r"""{
sed 's/^/preload /' /etc/ld.so.preload
/opt/gs/guard_app alloc 1G 1 | sed 's/^/within /'
/opt/gs/guard_app alloc 1G 3 | sed 's/^/past /'
} > /dev/termination-log 2>&1"""
CUDA_ERROR_OUT_OF_MEMORY = 2


def _needed(binary):
    """The host libraries BINARY loads (ldd), but the simulated driver, which the image has."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=30, check=True).stdout
    libs = set()
    for line in out.splitlines():
        path = line.split("=>")[-1].split("(")[0].strip()
        if path.startswith("/") and os.path.basename(path) != "libcuda.so.1":
            libs.add(path)
    return libs


def _image(cluster):
    for what, path in (("GS_GUARD_APP", GUARD_APP), ("GS_FAKE_CUDA", FAKE_CUDA), ("GS_GUARD_LIB", GUARD_LIB)):
        assert path and os.path.exists(path), f"{what}={path!r}: not built"
    root = tempfile.mkdtemp(prefix="guard-rootfs.", dir=cluster.dir)
    try:
        files = {"/bin/busybox": "bin/busybox", GUARD_APP: "opt/gs/guard_app", FAKE_CUDA: "opt/gs/libcuda.so.1"}
        for lib in _needed(GUARD_APP) | _needed(FAKE_CUDA):   # the loader, libc (and sanitizer runtimes)
            files.setdefault(lib, lib.lstrip("/"))
        for src, dst in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(dst)), exist_ok=True)
            shutil.copy(os.path.realpath(src), os.path.join(root, dst))
        for applet in ("sh", "sed", "cat"):
            os.symlink("busybox", os.path.join(root, "bin", applet))
        for d in ("etc", "tmp", "proc", "sys", "dev"):
            os.makedirs(os.path.join(root, d), exist_ok=True)
        cluster.cluster("image", IMAGE, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _kv(msg, prefix):
    return dict(line[len(prefix) + 1:].split("=", 1) for line in msg.splitlines()
                if line.startswith(prefix + " ") and "=" in line)


def test_allocation_past_the_quota_fails_inside_the_pod(cluster, agent):
    if os.environ.get("GS_SANITIZED") == "1":
        pytest.skip("sanitizer build: guard_app carries ASan/UBSan, whose runtime cannot start after the "
                    "preloaded guard; the guard in a pod runs in the normal build's e2e stage")
    _image(cluster)
    agent("t4x2.yaml", POLICY, extra=["--cdi-hook", ""])
    cluster.wait_allocatable({"nvidia.com/gpu": 8})
    msg = cluster.run_pod("guarded", {"nvidia.com/gpu": 1}, SCRIPT, image=IMAGE)
    preload = [line.split(" ", 1)[1] for line in msg.splitlines() if line.startswith("preload ")]
    assert preload and preload[0].endswith("libgpuslice-guard.so"), msg
    within, past = _kv(msg, "within"), _kv(msg, "past")
    assert within.get("ok") == "1" and within.get("first_err") == "0", msg
    assert int(past.get("ok", "-1")) in (1, 2), msg          # 2 GiB less the context's share
    assert past.get("first_err") == str(CUDA_ERROR_OUT_OF_MEMORY), msg
    print(f"guard in a pod: 1 GiB x 3 past a 2 GiB quota: {past.get('ok')} allocated, then error {past['first_err']}")
