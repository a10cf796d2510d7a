"""nvidia-ml-py (NVIDIA's Python binding of NVML, pinned, installed by pynvml.sh into the peers
cache) calls every NVML function the simulated library exports (`nm -D --defined-only`), through
pynvml_calls.py in a child process loading the simulator as the simulated driver root's
libnvidia-ml.so.1; the values are checked against `gpuslice inspect --json`. An exported function
no call reaches fails the test, so a new export needs a call here. No skip when pip or the index
is missing: pynvml.sh fails, and so does the test.

Environment (set by meson): GPUSLICE, GPUSLICE_SIM_LIB, GS_SOURCE_ROOT."""
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

ROOT = os.environ.get("GS_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUSLICE = os.environ.get("GPUSLICE") or os.path.join(ROOT, "build", "gpuslice")
SIM_LIB = os.environ.get("GPUSLICE_SIM_LIB") or os.path.join(ROOT, "build", "sim", "libgpuslice-nvml-sim.so")
HERE = os.path.dirname(os.path.abspath(__file__))
NODE = os.path.join(ROOT, "examples", "nodes", "h100x4-l4x3.yaml")
LIB_DIR = {"x86_64": "usr/lib/x86_64-linux-gnu", "aarch64": "usr/lib/aarch64-linux-gnu"}[platform.machine()]


def exported():
    p = subprocess.run(["nm", "-D", "--defined-only", SIM_LIB], capture_output=True, text=True, check=True, timeout=30)
    return sorted({line.split()[-1] for line in p.stdout.splitlines() if line.split()[-1].startswith("nvml")})


def test_every_exported_function_through_nvidia_ml_py():
    p = subprocess.run([os.path.join(HERE, "pynvml.sh")], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"pynvml.sh failed:\n{p.stderr}"
    site = p.stdout.strip().splitlines()[-1]
    tmp = tempfile.mkdtemp(prefix="gs-pynvml-")
    try:
        state = os.path.join(tmp, "state")

        def gs(*args):
            r = subprocess.run([GPUSLICE, "--sim", NODE, "--sim-state", state, *args], capture_output=True, text=True,
                               timeout=60)
            assert r.returncode == 0, r.stderr
            return r.stdout

        gs("sim", "mig-create", "--gpu", "0", "--profile", "3g.40gb", "--start", "4")
        sleeper = subprocess.Popen(["sleep", "60"])
        try:
            gs("sim", "process", "add", "--gpu", "5", "--pid", str(sleeper.pid), "--mem", "2GiB")
            inv = json.loads(gs("inspect", "--json"))
            env = dict(os.environ, PYTHONPATH=site, GPUSLICE_SIM_NODE=NODE, GPUSLICE_SIM_STATE=state,
                       LD_LIBRARY_PATH=os.path.join(state, "root", LIB_DIR))
            if os.environ.get("GS_SANITIZER_PRELOAD"):   # a sanitized simulator: its runtimes first
                env.update(LD_PRELOAD=os.environ["GS_SANITIZER_PRELOAD"], ASAN_OPTIONS="detect_leaks=0")
            r = subprocess.run([sys.executable, os.path.join(HERE, "pynvml_calls.py")], capture_output=True,
                               text=True, timeout=120, env=env)
        finally:
            sleeper.kill()
            sleeper.wait()
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    missing = sorted(set(exported()) - set(out["called"]))
    assert not missing, f"exported but never called through nvidia-ml-py: {missing}"

    assert out["driver_version"] == inv["driver_version"] == "580.65.06"
    assert out["nvml_version"] == "13.580.65.06" and out["cuda_v1"] == out["cuda_v2"] == 13000
    assert out["error_string"] == "In use by another client"
    assert len(out["gpus"]) == len(inv["gpus"]) == 7
    for got, want in zip(out["gpus"], inv["gpus"]):
        assert (got["index"], got["uuid"], got["name"], got["minor"]) == (want["index"], want["uuid"], want["name"],
                                                                          want["minor"])
        assert got["pci_bus_id"] == want["pci_bus_id"] and got["pci_device_id"] == want["pci_device_id"]
        assert got["cc"] == want["compute_capability"] and got["compute_mode"] == 0
        assert got["brand"] == 14      # NVML_BRAND_NVIDIA, as the driver reports data-center boards
        assert got["memory_total"] == got["memory_v2_total"] == want["memory"]["total_mib"] << 20
        assert got["memory_used"] >> 20 == want["memory"]["used_mib"]
        assert got["temperature"] == want["temperature_c"] and got["power_mw"] == want["power_w"] * 1000
        pids = sorted([p["pid"], p["used_memory_mib"] << 20] for p in want["processes"])
        assert got["procs"] == got["procs_v2"] == pids and got["procs_v1_count"] == len(pids)
        assert got["supported_events"] == 8 and got["is_mig_handle"] == 0     # Xid critical errors
        sxm = want["name"].startswith("NVIDIA H100")
        assert got["mig_mode_error"] is None if sxm else got["mig_mode_error"] == 3   # NOT_SUPPORTED on the L4
        assert got["max_mig"] == (7 if sxm else 0)
        assert got["utilization_error"] == 3 if sxm else got["utilization_gpu"] == (100 if pids else 0)
        if sxm:     # 18 NVLink 4 links to the board's NVSwitches, then "link is invalid"
            assert len(got["nvlinks"]) == 18 and got["nvlink_error"] == 2
            assert all(x["state"] == 1 and x["version"] == 4 and x["type"] == 2 for x in got["nvlinks"])
            assert {x["remote"] for x in got["nvlinks"]} == {f"00000000:0{b}:00.0" for b in (5, 6, 7, 8)}
            assert got["nvlink_version_error"] == got["nvlink_type_error"] == 2
        else:       # a PCIe board: no NVLink at all
            assert got["nvlinks"] == [] and got["nvlink_error"] == 3
            assert got["nvlink_version_error"] == got["nvlink_type_error"] == 3
    t = out["topology"]
    assert [t[i][i] for i in range(7)] == [0] * 7 and t[0][1] == 10 and t[0][3] == 40 and t[0][4] == 50
    assert out["compute_mode_set"] == 3
    assert out["mig_mode"] == [1, 1] and out["set_mig_mode"] == 0
    assert out["profile_1slice"] == {"id": 19, "memory_mb": 9984, "v_name": "MIG 1g.10gb", "by_id_name": "MIG 1g.10gb",
                                     "instances": 7}
    assert out["placements"] == [[i, 1] for i in range(7)]
    assert out["capacity_before"] == 7 and out["capacity_after"] == 5 and out["capacity_end"] == 7
    assert out["gi"] == {"id": 7, "profile": 19, "start": 0} and out["gis"] == [7, 13]
    # CI profiles: v1 (no name), the V function's v2 struct, a 1-slice CI inside a 3g (nvidia-smi's name)
    assert out["ci_profiles"] == [{"id": 0, "slices": 1, "instances": 1, "sm": 16, "name": None},
                                  {"id": 0, "slices": 1, "instances": 1, "sm": 16, "name": "MIG 1g.10gb"},
                                  {"id": 0, "slices": 1, "instances": 3, "sm": 20, "name": "MIG 1c.3g.40gb"}]
    m = out["mig_device"]
    assert m["name"] == "NVIDIA H100 80GB HBM3 MIG 1g.10gb" and m["is_mig"] == 1 and (m["gi"], m["ci"]) == (7, 0)
    assert m["memory"] == 9984 << 20 and m["sm"] == 16 and m["parent"] == inv["gpus"][1]["uuid"]
    assert m["uuid"] in m["by_index"] and len(m["by_index"]) == 2
    assert out["gpm_support"] == [1, 0]                             # H100, L4
    assert out["gpm_mig"] == [[0, 0.0], [3, 0.0]]                   # idle GI; DRAM bandwidth not simulated
    assert out["gpm_mixed"] == 2 and out["gpm_h4"] == 3             # INVALID_ARGUMENT, NOT_SUPPORTED
    assert out["wait_timeout"] == 10 and out["wait_v1"] == 10      # NVML_ERROR_TIMEOUT: no Xid on GPU 4
