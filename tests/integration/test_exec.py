"""`gpuslice exec`: the limits file it writes, --device on a simulated node, the quota enforced on
the simulated CUDA driver (tests/guard), the exit status, signals passed on, and cleanup.

Environment (set by meson): GPUSLICE, GS_SOURCE_ROOT, GS_BUILD_ROOT, GS_SANITIZED."""
import os
import signal
import subprocess
import time

import pytest

ROOT = os.environ.get("GS_SOURCE_ROOT", os.getcwd())
GPUSLICE = os.environ.get("GPUSLICE", os.path.join(ROOT, "build", "gpuslice"))
BUILD = os.environ.get("GS_BUILD_ROOT", os.path.dirname(GPUSLICE))
GUARD_LIB = os.path.join(BUILD, "guard", "libgpuslice-guard.so")
FAKE_CUDA_DIR = os.path.join(BUILD, "tests", "guard")
GUARD_APP = os.path.join(FAKE_CUDA_DIR, "guard_app")
NODE = os.path.join(ROOT, "examples", "nodes", "h100x4-l4x2.yaml")
SANITIZED = os.environ.get("GS_SANITIZED") == "1"


@pytest.fixture
def env(tmp_path):
    e = dict(os.environ)
    e["XDG_RUNTIME_DIR"] = str(tmp_path / "rt")
    e["GPUSLICE_GUARD_LIB"] = GUARD_LIB
    os.makedirs(e["XDG_RUNTIME_DIR"])
    return e


def run(env, *args, timeout=60):
    return subprocess.run([GPUSLICE, *args], capture_output=True, text=True, env=env, timeout=timeout)


def leftovers(env):
    return os.listdir(env["XDG_RUNTIME_DIR"])


SHOW = ["sh", "-c", 'cat "$GPUSLICE_GUARD_CONFIG"; echo "preload=$LD_PRELOAD"; echo "cvd=${CUDA_VISIBLE_DEVICES-unset}"']


def test_limits_file_and_environment(env):
    p = run(env, "exec", "--vram", "512MiB", "--compute", "30%", "--", *SHOW)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "gpuslice-guard 1" and "on-error closed" in lines
    devices = [l for l in lines if l.startswith("device ")]
    assert len(devices) == 16 and devices[0] == "device 0 - 536870912 30" and devices[15] == "device 15 - 536870912 30"
    assert any(l.startswith("region " + env["XDG_RUNTIME_DIR"] + "/gpuslice-exec-") for l in lines)
    assert "preload=" + GUARD_LIB in lines and "cvd=unset" in lines
    assert leftovers(env) == []                         # the private directory is gone


def test_device_gets_its_uuid(env, tmp_path):
    state = str(tmp_path / "state")
    sim = ["--sim", NODE, "--sim-state", state]
    p = subprocess.run([GPUSLICE, *sim, "inspect", "--json"], capture_output=True, text=True, env=env, timeout=60)
    import json
    uuid = json.loads(p.stdout)["gpus"][4]["uuid"]
    p = run(env, *sim, "exec", "--vram", "1GiB", "--device", "4", "--", *SHOW)
    assert p.returncode == 0, p.stderr
    devices = [l for l in p.stdout.splitlines() if l.startswith("device ")]
    assert devices == [f"device 0 {uuid} 1073741824 0"]  # CUDA's 0 is GPU 4, for NVML lookups
    assert "cvd=4" in p.stdout.splitlines()
    p = run(env, *sim, "exec", "--vram", "1GiB", "--device", "6", "--", "true")
    assert p.returncode == 2 and "gpuslice exec: --device 6: the node has 6 GPUs (0-5)" in p.stderr
    assert leftovers(env) == []


@pytest.mark.parametrize("args,message", [
    (["--", "true"], "--vram is required"),
    (["--vram", "lots", "--", "true"], "--vram: 'lots' is not a size"),
    (["--vram", "1GiB", "--compute", "0%", "--", "true"], "--compute: '0%' is not a percentage 1..100"),
    (["--vram", "1GiB", "--compute", "150", "--", "true"], "--compute: '150' is not a percentage 1..100"),
    (["--vram", "1GiB", "--device", "x", "--", "true"], "--device: 'x' is not a GPU index"),
    (["--vram", "1GiB"], "no command given"),
])
def test_bad_arguments(env, args, message):
    p = run(env, "exec", *args)
    assert p.returncode == 2 and message in p.stderr, p.stderr
    assert leftovers(env) == []



@pytest.mark.parametrize("vram,message", [
    ("100", "--vram: '100' has no unit; give one, such as 100MiB or 100GiB"),   # 100 bytes, silently, before
    ("8589934592", "--vram: '8589934592' has no unit"),
    ("100KiB", "--vram: '100KiB' is less than 1MiB, the smallest quota"),
    ("1023KiB", "--vram: '1023KiB' is less than 1MiB"),
    ("512B", "--vram: '512B' is less than 1MiB"),
])
def test_vram_without_unit_or_too_small(env, vram, message):
    p = run(env, "exec", "--vram", vram, "--", "true")
    assert p.returncode == 2 and "gpuslice exec: " + message in p.stderr, p.stderr
    assert leftovers(env) == []
    for ok in ("1MiB", "1024KiB", "512MiB", "8GiB", "1G"):
        p = run(env, "exec", "--vram", ok, "--", "true")
        assert p.returncode == 0, (ok, p.stderr)

def test_exit_status_and_missing_command(env):
    assert run(env, "exec", "--vram", "1GiB", "--", "sh", "-c", "exit 5").returncode == 5
    p = run(env, "exec", "--vram", "1GiB", "--", "/nonexistent/program")
    assert p.returncode == 127 and "/nonexistent/program" in p.stderr
    assert run(env, "exec", "--vram", "1GiB", "--", "sh", "-c", "kill -KILL $$").returncode == 128 + 9
    assert leftovers(env) == []


def test_sigterm_passed_on(env):
    script = 'trap "echo got-term; exit 7" TERM; echo ready; while :; do sleep 0.05; done'
    p = subprocess.Popen([GPUSLICE, "exec", "--vram", "1GiB", "--", "sh", "-c", script],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline().strip() == "ready"
    assert len(leftovers(env)) == 1                     # the limits and counters while it runs
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=10)
    assert "got-term" in out and p.returncode == 7, err
    assert leftovers(env) == []


@pytest.mark.skipif(SANITIZED, reason="the preloaded guard cannot run inside a sanitizer runtime (tests/guard)")
def test_quota_enforced_on_the_simulated_driver(env):
    env["LD_LIBRARY_PATH"] = FAKE_CUDA_DIR
    p = run(env, "exec", "--vram", "64MiB", "--", GUARD_APP, "alloc", "16M", "8")
    assert p.returncode == 0, p.stderr
    kv = dict(l.split("=", 1) for l in p.stdout.splitlines() if "=" in l)
    assert kv["ok"] == "4" and kv["first_err"] == "2"   # the fifth 16 MiB: CUDA_ERROR_OUT_OF_MEMORY
    assert kv["held_fake_used"] == str(64 << 20)
    p = run(env, "exec", "--vram", "64MiB", "--compute", "25%", "--", GUARD_APP, "pace", "1000", "1000")
    kv = dict(l.split("=", 1) for l in p.stdout.splitlines() if "=" in l)
    assert 200 <= int(kv["share_permille"]) <= 300, p.stdout
    assert leftovers(env) == []


@pytest.mark.skipif(SANITIZED, reason="the preloaded guard cannot run inside a sanitizer runtime (tests/guard)")
@pytest.mark.parametrize("sim", [False, True], ids=["driver", "sim"])
def test_preloaded_library_is_the_guard(env, tmp_path, sim):
    """The library exec preloads refuses an allocation past the quota, found as a user finds it:
    no GPUSLICE_GUARD_LIB, and under --sim no GPUSLICE_SIM_LIB either (the simulator's library is
    looked up after the guard's; both lookups once shared one buffer)."""
    env.pop("GPUSLICE_GUARD_LIB", None)
    env.pop("GPUSLICE_SIM_LIB", None)
    env["LD_LIBRARY_PATH"] = FAKE_CUDA_DIR
    args = ["--sim", NODE, "--sim-state", str(tmp_path / "state")] if sim else []
    device = ["--device", "0"] if sim else []
    p = run(env, *args, "exec", "--vram", "32MiB", *device, "--", "sh", "-c",
            'echo "preload=$LD_PRELOAD"; exec "$0" alloc 16M 3', GUARD_APP)
    assert p.returncode == 0, p.stderr
    assert os.path.basename(p.stdout.splitlines()[0]) == "libgpuslice-guard.so", p.stdout
    kv = dict(l.split("=", 1) for l in p.stdout.splitlines() if "=" in l)
    assert kv["ok"] == "2" and kv["first_err"] == "2", p.stdout  # the third 16 MiB is refused
    assert leftovers(env) == []
