"""The kubelet emulator as a program (docs/user-guide.md, "Watch the agent serve a kubelet"): the
agent on a simulated node registers with it, and --allocate prints the agent's answer.

Environment (set by meson): GPUSLICE, GPUSLICE_SIM_LIB, GS_SOURCE_ROOT."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

ROOT = os.environ.get("GS_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUSLICE = os.environ.get("GPUSLICE") or os.path.join(ROOT, "build", "gpuslice")
EMULATOR = os.path.join(ROOT, "tests", "integration", "kubelet_emulator.py")
NODE = os.path.join(ROOT, "examples", "nodes", "t4x2.yaml")


@pytest.fixture
def base():
    d = tempfile.mkdtemp(prefix="gs-e-", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def emulator(*args, timeout=60):
    return subprocess.run([sys.executable, EMULATOR, *args], capture_output=True, text=True, timeout=timeout)


def test_emulator_program_serves_the_agent(base):
    sim = [GPUSLICE, "--sim", NODE, "--sim-state", os.path.join(base, "s")]
    uuids = [g["uuid"] for g in json.loads(subprocess.run([*sim, "inspect", "--json"], capture_output=True,
                                                          text=True, check=True, timeout=60).stdout)["gpus"]]
    kdir = os.path.join(base, "k")
    os.makedirs(kdir)
    with open(os.path.join(base, "agent.log"), "wb") as log:
        agent = subprocess.Popen([*sim, "agent", "--kubelet-dir", kdir, "--cdi-root", "", "--metrics-address", "",
                                  "--features-file", ""], stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        p = emulator("--dir", kdir, "--allocate", f"nvidia.com/gpu={uuids[1]}", "--timeout", "20")
        assert p.returncode == 0, p.stdout + p.stderr
        lines = [json.loads(line) for line in p.stdout.splitlines()]
        assert lines[0] == {"listening": os.path.join(kdir, "kubelet.sock")}
        assert {"registered": "nvidia.com/gpu", "endpoint": "gpuslice-nvidia.com_gpu.sock", "error": None} in lines
        devices = [l for l in lines if l.get("resource") == "nvidia.com/gpu"][0]["devices"]
        assert sorted(d["id"] for d in devices) == sorted(uuids) and {d["health"] for d in devices} == {"Healthy"}
        (answer,) = [l for l in lines if "allocate" in l]
        assert answer["response"]["envs"] == {"NVIDIA_VISIBLE_DEVICES": uuids[1]}
        # An ID the agent does not serve: its error, exit 1.
        p = emulator("--dir", kdir, "--allocate", "nvidia.com/gpu=GPU-nothing", "--timeout", "20")
        assert p.returncode == 1
        (answer,) = [json.loads(l) for l in p.stdout.splitlines() if '"allocate"' in l]
        assert answer["error"].startswith("INVALID_ARGUMENT") and "GPU-nothing" in answer["error"]
    finally:
        agent.terminate()
        agent.wait(10)


def test_emulator_program_bad_arguments(base):
    p = emulator("--dir", base, "--allocate", "nvidia.com/gpu")
    assert p.returncode == 2 and "expected NAME=ID[,ID...]" in p.stderr
    p = emulator("--dir", base, "--resource", "example.com/none", "--timeout", "0.5")
    assert p.returncode == 1 and "not registered within 0.5 s" in p.stdout
