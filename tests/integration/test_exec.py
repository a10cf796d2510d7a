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


# ---- the limits survive every way of starting a child ---------------------------------------------

LAUNCHERS = ["system", "popen", "posix_spawn", "posix_spawnp", "execve", "execveat", "fexecve", "closefrom"]


def kv_of(p):
    return dict(l.split("=", 1) for l in p.stdout.splitlines() if "=" in l)


@pytest.fixture
def mine(tmp_path):
    """The limits a hostile program would rather have: 1 GiB, failing open, a region of its own."""
    path = tmp_path / "mine.conf"
    path.write_text(f"gpuslice-guard 1\non-error open\nregion {tmp_path}/mine-region\ndevice 0 - {1 << 30} 0\n")
    return str(path)


def tamperings(mine):
    """What the parent does to its environment before starting the child: nothing, its own limits
    file, its own sealed memfd (/proc/self/fd/40), its own file without LD_PRELOAD, no LD_PRELOAD,
    and (C only) its own sealed memfd where gpuslice exec keeps the limits (descriptor 1000 of the
    parent, an ancestor of the child, but below gpuslice exec: the outermost one counts)."""
    return [["-"], [mine], ["memfd:" + mine], [mine, "nopreload"], ["-", "nopreload"], ["anchor:" + mine]]


def assert_refused_as_the_parent(p, what):
    kv = kv_of(p)
    assert p.returncode == 0, (what, p.stdout, p.stderr)
    # 100 MiB under the 64 MiB quota: refused, and the child sees the quota as its GPU's total
    assert kv.get("ok") == "0" and kv.get("first_err") == "2", (what, p.stdout, p.stderr)
    assert kv.get("held_total") == str(64 << 20), (what, p.stdout)


@pytest.mark.skipif(SANITIZED, reason="the preloaded guard cannot run inside a sanitizer runtime (tests/guard)")
@pytest.mark.parametrize("how", LAUNCHERS)
def test_child_keeps_the_limits_whatever_starts_it(env, mine, how):
    """A guarded program starts `guard_app alloc` through a C launcher (system and popen run their
    shell through glibc's internal posix_spawn, which no preload wraps; closefrom closes every
    descriptor before the exec, as Python's close_fds does), after naming limits of its own or
    removing LD_PRELOAD: the child is refused exactly as the parent would be, and a child within
    the quota succeeds (the guard before failed closed there, or granted 1 GiB)."""
    env["LD_LIBRARY_PATH"] = FAKE_CUDA_DIR
    for tamper in tamperings(mine):
        p = run(env, "exec", "--vram", "64MiB", "--", GUARD_APP, "start-child", how, "100M", *tamper)
        assert_refused_as_the_parent(p, (how, tamper))
        p = run(env, "exec", "--vram", "64MiB", "--", GUARD_APP, "start-child", how, "32M", *tamper)
        kv = kv_of(p)
        assert p.returncode == 0 and kv.get("ok") == "1", (how, tamper, p.stdout, p.stderr)
    assert leftovers(env) == []


PY_LAUNCHER = r'''
import os, subprocess, sys, time
how, app, size, cfg, preload = sys.argv[1:6]
env = dict(os.environ)
if cfg != "-":
    env["GPUSLICE_GUARD_CONFIG"] = cfg
if preload == "nopreload":
    env.pop("LD_PRELOAD", None)
sys.stdout.flush()
if how == "subprocess":        # close_fds=True, the default: every descriptor closed in the child
    sys.exit(subprocess.run([app, "alloc", size], env=env, close_fds=True).returncode)
if how == "os.system":
    os.environ.clear()
    os.environ.update(env)
    sys.exit(os.waitstatus_to_exitcode(os.system(f"'{app}' alloc {size}")))
if how == "orphan":            # started by a process that is gone by then: re-parented
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        middle = os.getpid()
        if os.fork() == 0:
            os.close(r)
            while os.getppid() == middle:            # the middle process exits first
                time.sleep(0.01)
            os.dup2(w, 1)
            os.closerange(3, 65536)
            os.execve(app, [app, "alloc", size], env)
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    out = b""
    while chunk := os.read(r, 65536):
        out += chunk
    sys.stdout.write(out.decode())
    sys.exit(0)
sys.exit(2)
'''


@pytest.mark.skipif(SANITIZED, reason="the preloaded guard cannot run inside a sanitizer runtime (tests/guard)")
@pytest.mark.parametrize("how", ["syscall", "orphan"])
def test_the_limits_do_not_come_from_the_environment(env, mine, how):
    """The execve system call, which no wrapper sees, with limits of the parent's own in the
    environment (LD_PRELOAD kept): the child's guard takes the limits from gpuslice exec, its
    ancestor, not from the environment; also from a grandchild whose parent has exited
    (gpuslice exec is its subreaper, so it stays an ancestor)."""
    env["LD_LIBRARY_PATH"] = FAKE_CUDA_DIR
    for tamper in ([mine], ["memfd:" + mine]):
        p = run(env, "exec", "--vram", "64MiB", "--", GUARD_APP, "start-child", how, "100M", *tamper)
        assert_refused_as_the_parent(p, (how, tamper))
        assert "GPUSLICE_GUARD_CONFIG=" + tamper[0].replace("memfd:" + mine, "/proc/self/fd/40") + " ignored" in p.stderr
    assert leftovers(env) == []


@pytest.mark.skipif(SANITIZED, reason="the preloaded guard cannot run inside a sanitizer runtime (tests/guard)")
@pytest.mark.parametrize("how", ["subprocess", "os.system", "orphan"])
def test_python_children_keep_the_limits(env, mine, how):
    """Python's launchers: subprocess (close_fds=True, as torchrun starts its workers), os.system,
    and a grandchild whose parent has exited (re-parented to gpuslice exec, its subreaper), each
    with the environment tampered with: refused as the parent; 32 MiB within the quota works."""
    env["LD_LIBRARY_PATH"] = FAKE_CUDA_DIR
    for tamper in tamperings(mine):
        if tamper[0].startswith(("memfd:", "anchor:")):
            continue  # C only (tests/guard/guard_app.c)
        cfg, preload = tamper[0], tamper[1] if len(tamper) > 1 else "-"
        p = run(env, "exec", "--vram", "64MiB", "--", "python3", "-c", PY_LAUNCHER, how, GUARD_APP, "100M", cfg,
                preload)
        assert_refused_as_the_parent(p, (how, tamper))
        p = run(env, "exec", "--vram", "64MiB", "--", "python3", "-c", PY_LAUNCHER, how, GUARD_APP, "32M", cfg,
                preload)
        assert p.returncode == 0 and kv_of(p).get("ok") == "1", (how, tamper, p.stdout, p.stderr)
    assert leftovers(env) == []


@pytest.mark.skipif(SANITIZED, reason="the preloaded guard cannot run inside a sanitizer runtime (tests/guard)")
def test_nested_exec_is_refused(env):
    """gpuslice exec under gpuslice exec: the outer limits would apply anyway, so the inner one says
    so rather than seem to grant its own."""
    p = run(env, "exec", "--vram", "64MiB", "--", GPUSLICE, "exec", "--vram", "1GiB", "--", "true")
    assert p.returncode == 1
    assert "gpuslice exec: already under gpuslice exec (pid " in p.stderr, p.stderr
    assert leftovers(env) == []


def test_descriptor_1000_and_a_low_open_files_limit(env, tmp_path):
    """Descriptor 1000 is where gpuslice exec keeps the limits: one the caller passed there still
    reaches the command, and under a soft open-files limit below 1000 exec works and the command
    gets the caller's limit."""
    data = tmp_path / "data"
    data.write_text("passed-through")
    fd = os.open(data, os.O_RDONLY)
    try:
        os.dup2(fd, 1000)
        p = subprocess.run([GPUSLICE, "exec", "--vram", "1GiB", "--", "sh", "-c", "cat /proc/self/fd/1000"],
                           capture_output=True, text=True, env=env, timeout=60, pass_fds=(1000,))
    finally:
        os.close(1000)
        os.close(fd)
    assert p.returncode == 0 and p.stdout == "passed-through", (p.stdout, p.stderr)
    import resource

    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    p = subprocess.run([GPUSLICE, "exec", "--vram", "1GiB", "--", "sh", "-c", 'ulimit -n; cat "$GPUSLICE_GUARD_CONFIG"'],
                       capture_output=True, text=True, env=env, timeout=60, preexec_fn=low_limit)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "256" and "gpuslice-guard 1" in p.stdout, p.stdout
    assert leftovers(env) == []
