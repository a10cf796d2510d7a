"""`gpuslice cdi generate` on simulated nodes: the spec validates against the CDI JSON schema
(python3-jsonschema, Draft 7) and its device nodes match the node (GPU minors, majors from
/proc/devices, MIG capability minors from mig-minors); bad inputs are clear errors.

Environment (set by meson): GPUSLICE, GPUSLICE_SIM_LIB, GS_SOURCE_ROOT."""
import json
import os
import re
import shutil
import subprocess
import tempfile

import jsonschema
import pytest

ROOT = os.environ.get("GS_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUSLICE = os.environ.get("GPUSLICE") or os.path.join(ROOT, "build", "gpuslice")
SCHEMA_DIR = os.path.join(ROOT, "tests", "data", "cdi-schema")
PROC_DEVICES = ("Character devices:\n  1 mem\n  4 /dev/vc/0\n195 nvidia\n195 nvidia-frontend\n"
                "235 nvidia-caps\n509 nvidia-uvm\n\nBlock devices:\n  8 sd\n259 blkext\n")


def validator():
    with open(os.path.join(SCHEMA_DIR, "schema.json")) as f:
        schema = json.load(f)
    with open(os.path.join(SCHEMA_DIR, "defs.json")) as f:
        defs = json.load(f)
    resolver = jsonschema.RefResolver(base_uri="file://" + SCHEMA_DIR + "/", referrer=schema,
                                      store={"file://" + SCHEMA_DIR + "/defs.json": defs, "defs.json": defs})
    return jsonschema.Draft7Validator(schema, resolver=resolver)


@pytest.fixture
def tmp():
    d = tempfile.mkdtemp(prefix="gs-cdi-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def run(tmp, node, *args, proc=PROC_DEVICES, minors=None):
    procdir = os.path.join(tmp, "proc")
    os.makedirs(os.path.join(procdir, "driver", "nvidia-caps"), exist_ok=True)
    if proc is not None:
        with open(os.path.join(procdir, "devices"), "w") as f:
            f.write(proc)
    if minors is not None:
        with open(os.path.join(procdir, "driver", "nvidia-caps", "mig-minors"), "w") as f:
            f.write(minors)
    return subprocess.run([GPUSLICE, "--sim", os.path.join(ROOT, "examples", "nodes", node), "--sim-state",
                           os.path.join(tmp, "state"), *args, "--proc-root", procdir],
                          capture_output=True, text=True, timeout=60)


def sim(tmp, node, *args):
    p = subprocess.run([GPUSLICE, "--sim", os.path.join(ROOT, "examples", "nodes", node), "--sim-state",
                        os.path.join(tmp, "state"), "sim", *args], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


def inspect(tmp, node):
    p = subprocess.run([GPUSLICE, "--sim", os.path.join(ROOT, "examples", "nodes", node), "--sim-state",
                        os.path.join(tmp, "state"), "inspect", "--json"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def nodes(dev):
    return [(n["path"], n["major"], n["minor"]) for n in dev["containerEdits"]["deviceNodes"]]


def test_schema_rejects_bad_documents():
    v = validator()
    assert list(v.iter_errors({"cdiVersion": "0.6.0"}))                       # no kind, no devices
    assert not list(v.iter_errors({"cdiVersion": "0.6.0", "kind": "a.com/b", "devices": [
        {"name": "x", "containerEdits": {}}]}))


def test_whole_gpus(tmp):
    nodriver = os.path.join(tmp, "nodriver")     # a driver root without libcuda (the simulated one has it)
    os.makedirs(nodriver)
    p = run(tmp, "t4x2.yaml", "cdi", "generate", "--driver-root", nodriver)
    assert p.returncode == 0, p.stderr
    spec = json.loads(p.stdout)
    validator().validate(spec)
    # the lowest version the content needs: device names starting with a digit need 0.5.0
    assert spec["cdiVersion"] == "0.5.0" and spec["kind"] == "gpuslice.io/gpu"
    assert spec["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    assert "hooks" not in spec["containerEdits"]       # no libcuda mounted: nothing for the hook to link
    inv = inspect(tmp, "t4x2.yaml")
    devs = {d["name"]: d for d in spec["devices"]}
    assert len(devs) == len(spec["devices"]) == 4
    for i, g in enumerate(inv["gpus"]):
        want = [(f"/dev/nvidia{g['minor']}", 195, g["minor"])]
        assert nodes(devs[str(i)]) == want and nodes(devs[g["uuid"]]) == want
    assert nodes(spec) == [("/dev/nvidiactl", 195, 255), ("/dev/nvidia-uvm", 509, 0), ("/dev/nvidia-uvm-tools", 509, 1)]


def test_mig_devices(tmp):
    node = "a100-mixed.yaml"
    sim(tmp, node, "mig-create", "--gpu", "0", "--profile", "3g.20gb", "--start", "4")
    sim(tmp, node, "mig-create", "--gpu", "0", "--profile", "1g.5gb", "--start", "0")
    inv = inspect(tmp, node)
    g0 = inv["gpus"][0]
    migs = g0["mig"]["devices"]
    assert len(migs) == 2
    minors = "".join(f"gpu{g0['minor']}/gi{m['gi_id']}/access {10 + 3 * k}\n"
                     f"gpu{g0['minor']}/gi{m['gi_id']}/ci{m['ci_id']}/access {11 + 3 * k}\n"
                     for k, m in enumerate(migs))
    p = run(tmp, node, "cdi", "generate", "--kind", "example.com/gpu", minors="config 1\nmonitor 2\n" + minors)
    assert p.returncode == 0, p.stderr
    spec = json.loads(p.stdout)
    validator().validate(spec)
    assert spec["kind"] == "example.com/gpu"
    devs = {d["name"]: d for d in spec["devices"]}
    for k, m in enumerate(migs):
        want = [(f"/dev/nvidia{g0['minor']}", 195, g0["minor"]),
                (f"/dev/nvidia-caps/nvidia-cap{10 + 3 * k}", 235, 10 + 3 * k),
                (f"/dev/nvidia-caps/nvidia-cap{11 + 3 * k}", 235, 11 + 3 * k)]
        assert nodes(devs[m["uuid"]]) == want
        assert nodes(devs[f"0:{m['gi_id']}:{m['ci_id']}"]) == want
    # a MIG device whose minors are missing is an error naming it, not a spec without its caps
    p = run(tmp, node, "cdi", "generate", minors="config 1\n")
    assert p.returncode == 1 and re.search(r"MIG device MIG-\S+ \(GPU 0, GI \d+, CI \d+\): its capability minors", p.stderr)


def test_bad_inputs(tmp):
    p = run(tmp, "t4x2.yaml", "cdi", "generate", proc="Character devices:\n  1 mem\n")
    assert p.returncode == 1 and "devices: no nvidia-frontend character device" in p.stderr
    p = run(tmp, "t4x2.yaml", "cdi", "generate", proc="Character devices:\n  1 mem\nxyz nvidia\n")
    assert p.returncode == 1 and re.search(r"/devices:3: malformed line 'xyz nvidia'", p.stderr)
    p = run(tmp, "t4x2.yaml", "cdi", "generate", "--kind", "nokind")
    assert p.returncode == 1 and "CDI kind 'nokind': expected VENDOR/CLASS" in p.stderr
    os.unlink(os.path.join(tmp, "proc", "devices"))
    p = run(tmp, "t4x2.yaml", "cdi", "generate", proc=None)
    assert p.returncode == 1 and "cannot read" in p.stderr


VIDEO_LIBS = [("libnvcuvid.so.580.65.06", "libnvcuvid.so.1"), ("libnvidia-encode.so.580.65.06", "libnvidia-encode.so.1"),
              ("libnvidia-opticalflow.so.580.65.06", "libnvidia-opticalflow.so.1"),
              ("libvdpau_nvidia.so.580.65.06", "libvdpau_nvidia.so.1"), ("libnvidia-fbc.so.580.65.06", "libnvidia-fbc.so.1"),
              ("libnvidia-nvvm70.so.4", "libnvidia-nvvm70.so.4")]


def fake_driver_root(tmp, video=False):
    """A driver root with a linker cache made by the real ldconfig: driver libraries (with their
    sonames), a library that is not the driver's, and nvidia-smi; with video, also the video and
    display libraries and libnvidia-nvvm70."""
    root = os.path.join(tmp, "driver")
    libdir = os.path.join(root, "usr", "lib", "x86_64-linux-gnu")
    os.makedirs(libdir)
    os.makedirs(os.path.join(root, "usr", "bin"))
    os.makedirs(os.path.join(root, "etc"))
    src = os.path.join(tmp, "empty.c")
    with open(src, "w") as f:
        f.write("int gs_fake_driver_symbol;\n")
    for real, soname in [("libcuda.so.580.65.06", "libcuda.so.1"), ("libnvidia-ml.so.580.65.06", "libnvidia-ml.so.1"),
                         ("libnvidia-ptxjitcompiler.so.580.65.06", "libnvidia-ptxjitcompiler.so.1"),
                         ("libfoo.so.2.0", "libfoo.so.2")] + VIDEO_LIBS * video:
        subprocess.run(["cc", "-shared", "-fPIC", "-o", os.path.join(libdir, real), f"-Wl,-soname,{soname}", src],
                       check=True)
    os.symlink("libcuda.so.1", os.path.join(libdir, "libcuda.so"))   # the development link: not mounted
    with open(os.path.join(root, "usr", "bin", "nvidia-smi"), "w") as f:
        f.write("#!/bin/sh\n")
    with open(os.path.join(root, "etc", "ld.so.conf"), "w") as f:
        f.write("/usr/lib/x86_64-linux-gnu\n")
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    subprocess.run([ldconfig, "-r", root], check=True)
    return root


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the fake driver root uses the x86_64 library directory")
def test_driver_libraries_from_the_linker_cache(tmp):
    root = fake_driver_root(tmp)
    p = run(tmp, "t4x2.yaml", "cdi", "generate", "--driver-root", root)
    assert p.returncode == 0, p.stderr
    spec = json.loads(p.stdout)
    assert not list(validator().iter_errors(spec))
    mounts = {m["containerPath"]: m for m in spec["containerEdits"]["mounts"]}
    lib = os.path.join(root, "usr", "lib", "x86_64-linux-gnu")
    assert set(mounts) == {"/usr/local/nvidia/lib64/libcuda.so.1", "/usr/local/nvidia/lib64/libnvidia-ml.so.1",
                           "/usr/local/nvidia/lib64/libnvidia-ptxjitcompiler.so.1", "/usr/local/nvidia/bin/nvidia-smi"}
    assert mounts["/usr/local/nvidia/lib64/libcuda.so.1"]["hostPath"] == os.path.join(lib, "libcuda.so.1")
    assert os.path.realpath(mounts["/usr/local/nvidia/lib64/libcuda.so.1"]["hostPath"]) == \
        os.path.join(lib, "libcuda.so.580.65.06")
    assert mounts["/usr/local/nvidia/bin/nvidia-smi"]["hostPath"] == os.path.join(root, "usr", "bin", "nvidia-smi")
    assert all(m["options"] == ["ro", "nosuid", "nodev", "bind"] for m in mounts.values())
    # A damaged cache is an error naming it, not a spec without libraries.
    with open(os.path.join(root, "etc", "ld.so.cache"), "r+b") as f:
        f.truncate(30)
    p = run(tmp, "t4x2.yaml", "cdi", "generate", "--driver-root", root)
    assert p.returncode == 1 and "ld.so.cache" in p.stderr, p.stderr


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the fake driver root uses the x86_64 library directory")
def test_video_libraries_modeset_and_the_hook(tmp):
    root = fake_driver_root(tmp, video=True)
    os.makedirs(os.path.join(root, "dev"))
    open(os.path.join(root, "dev", "nvidia-modeset"), "w").close()
    p = run(tmp, "t4x2.yaml", "cdi", "generate", "--driver-root", root)
    assert p.returncode == 0, p.stderr
    spec = json.loads(p.stdout)
    assert not list(validator().iter_errors(spec))
    edits = spec["containerEdits"]
    mounts = {m["containerPath"] for m in edits["mounts"]}
    assert {f"/usr/local/nvidia/lib64/{soname}" for _, soname in VIDEO_LIBS} <= mounts
    assert ("/dev/nvidia-modeset", 195, 254) in nodes(spec)
    assert edits["hooks"] == [{"hookName": "createContainer", "path": "/usr/local/bin/gpuslice-cdi-hook",
                               "args": ["gpuslice-cdi-hook", "--lib-dir", "/usr/local/nvidia/lib64"]}]
    p = run(tmp, "t4x2.yaml", "cdi", "generate", "--driver-root", root, "--hook", "/opt/gs/hook")
    assert json.loads(p.stdout)["containerEdits"]["hooks"][0]["path"] == "/opt/gs/hook"
    p = run(tmp, "t4x2.yaml", "cdi", "generate", "--driver-root", root, "--hook", "")
    assert "hooks" not in json.loads(p.stdout)["containerEdits"]


NVIDIA_YAML = """---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: all
  containerEdits: {}
containerEdits: {}
"""


def test_warning_when_another_spec_defines_our_devices(tmp):
    scan = os.path.join(tmp, "scan")
    os.makedirs(scan)
    with open(os.path.join(scan, "nvidia.yaml"), "w") as f:
        f.write(NVIDIA_YAML)
    p = run(tmp, "t4x2.yaml", "cdi", "generate", "--scan-dir", scan)          # our own kind: no clash
    assert p.returncode == 0 and "warning" not in p.stderr, p.stderr
    p = run(tmp, "t4x2.yaml", "cdi", "generate", "--kind", "nvidia.com/gpu", "--scan-dir", scan)
    assert p.returncode == 0, p.stderr
    assert re.search(r"warning: \S+/nvidia.yaml: defines nvidia.com/gpu=0 \(1 of our devices\)", p.stderr), p.stderr
    # JSON too; hostile files (garbage, deep nesting, a symlink, too large, our own file) are no crash
    inv = inspect(tmp, "t4x2.yaml")
    with open(os.path.join(scan, "other.json"), "w") as f:
        json.dump({"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu",
                   "devices": [{"name": g["uuid"], "containerEdits": {}} for g in inv["gpus"]]}, f)
    with open(os.path.join(scan, "garbage.yaml"), "wb") as f:
        f.write(b"\x00\xff: [ {{{" + b"[" * 100000)
    with open(os.path.join(scan, "big.json"), "w") as f:
        f.write(" " * (5 << 20))
    with open(os.path.join(scan, "gpuslice.json"), "w") as f:
        f.write(NVIDIA_YAML)
    os.symlink("/etc/passwd", os.path.join(scan, "link.yaml"))
    p = run(tmp, "t4x2.yaml", "cdi", "generate", "--kind", "nvidia.com/gpu", "--scan-dir", scan)
    assert p.returncode == 0, p.stderr
    assert re.search(r"other.json: defines nvidia.com/gpu=GPU-\S+, nvidia.com/gpu=GPU-\S+ \(2 of our devices\)", p.stderr)
    assert "gpuslice.json" not in p.stderr and "link.yaml" not in p.stderr and "big.json" not in p.stderr


# ------------------------------------------------------------------------------- the simulated node's root

def sim_root(tmp):
    return os.path.join(tmp, "state", "root")


def generate(tmp, node, *args):
    return subprocess.run([GPUSLICE, "--sim", os.path.join(ROOT, "examples", "nodes", node), "--sim-state",
                           os.path.join(tmp, "state"), "cdi", "generate", *args],
                          capture_output=True, text=True, timeout=60)


def test_generate_on_the_simulated_node(tmp):
    """`gpuslice --sim examples/nodes/h100x4-l4x3.yaml cdi generate` with no --proc-root or
    --driver-root: device numbers from the simulated node's proc/, capability minors from its
    mig-minors, the stand-in driver's libraries from its linker cache (before: 'no nvidia-frontend
    character device: is the NVIDIA driver loaded?')."""
    node = "h100x4-l4x3.yaml"
    sim(tmp, node, "mig-create", "--gpu", "2", "--profile", "1g.10gb", "--start", "6")
    p = generate(tmp, node)
    assert p.returncode == 0, p.stderr
    spec = json.loads(p.stdout)
    validator().validate(spec)
    inv = inspect(tmp, node)
    devs = {d["name"]: d for d in spec["devices"]}
    assert len(inv["gpus"]) == 7
    m = inv["gpus"][2]["mig"]["devices"][0]
    gi_cap = 3 + 2 * 135 + m["gi_id"] * 9         # the driver's numbering: 9 minors per GI, 135 per GPU
    assert nodes(devs[m["uuid"]]) == [("/dev/nvidia2", 195, 2), (f"/dev/nvidia-caps/nvidia-cap{gi_cap}", 235, gi_cap),
                                      (f"/dev/nvidia-caps/nvidia-cap{gi_cap + 1 + m['ci_id']}", 235,
                                       gi_cap + 1 + m["ci_id"])]
    root = sim_root(tmp)
    for path, _, _ in nodes(devs[m["uuid"]]) + nodes(spec):
        assert os.path.isfile(root + path), path        # the root holds every node the spec names
    mounts = {x["containerPath"]: x["hostPath"] for x in spec["containerEdits"]["mounts"]}
    assert os.path.samefile(mounts["/usr/local/nvidia/lib64/libnvidia-ml.so.1"], os.environ["GPUSLICE_SIM_LIB"])
    assert mounts["/usr/local/nvidia/lib64/libcuda.so.1"].startswith(root + "/")
    assert mounts["/usr/local/nvidia/bin/nvidia-smi"] == root + "/usr/bin/nvidia-smi"
    assert spec["containerEdits"]["hooks"][0]["hookName"] == "createContainer"   # libcuda is mounted


def test_simulated_linker_cache_read_by_ldconfig(tmp):
    """The simulated driver root's etc/ld.so.cache, written by the simulator, is one glibc's own
    ldconfig reads (and the project's parser, through cdi generate above)."""
    assert generate(tmp, "t4x2.yaml").returncode == 0
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    p = subprocess.run([ldconfig, "-p", "-C", os.path.join(sim_root(tmp), "etc", "ld.so.cache")],
                       capture_output=True, text=True, timeout=30, check=True)
    libs = dict(re.findall(r"^\s+(\S+) \([^)]*\) => (\S+)$", p.stdout, re.M))
    assert set(libs) == {"libnvidia-ml.so.1", "libcuda.so.1"}
    assert all(v.startswith("/usr/lib/") and os.path.exists(sim_root(tmp) + v) for v in libs.values())
    assert "2 libs found" in p.stdout


def test_simulated_caps_follow_mig_instances(tmp):
    """dev/nvidia-caps holds config, monitor and the capability files of the instances that exist:
    made with the instance, removed with it; mig-minors lists every GI and CI of every GPU."""
    node = "a100-mixed.yaml"
    caps = os.path.join(sim_root(tmp), "dev", "nvidia-caps")
    sim(tmp, node, "mig-create", "--gpu", "0", "--profile", "3g.20gb", "--start", "4")
    g = inspect(tmp, node)["gpus"][0]
    m = g["mig"]["devices"][0]
    gi_cap = 3 + m["gi_id"] * 9
    assert sorted(os.listdir(caps)) == sorted(["nvidia-cap1", "nvidia-cap2", f"nvidia-cap{gi_cap}",
                                               f"nvidia-cap{gi_cap + 1 + m['ci_id']}"])
    sim(tmp, node, "mig-destroy", "--gpu", "0", "--gi", str(m["gi_id"]))
    assert sorted(os.listdir(caps)) == ["nvidia-cap1", "nvidia-cap2"]
    with open(os.path.join(sim_root(tmp), "proc", "driver", "nvidia-caps", "mig-minors")) as f:
        lines = f.read().splitlines()
    n_gpus = len(inspect(tmp, node)["gpus"])
    assert lines[:4] == ["config 1", "monitor 2", "gpu0/gi0/access 3", "gpu0/gi0/ci0/access 4"]
    assert len(lines) == 2 + n_gpus * 15 * 9 and "gpu1/gi0/access 138" in lines


def test_explicit_roots_override_the_simulated_ones(tmp):
    """--proc-root and --driver-root still win under --sim."""
    empty = os.path.join(tmp, "empty")
    os.makedirs(empty)
    p = generate(tmp, "t4x2.yaml", "--proc-root", empty)
    assert p.returncode == 1 and f"cannot read {empty}/devices" in p.stderr
    p = run(tmp, "t4x2.yaml", "cdi", "generate", "--driver-root", empty)
    assert p.returncode == 0, p.stderr
    assert "mounts" not in json.loads(p.stdout)["containerEdits"]    # no linker cache there: no libraries
