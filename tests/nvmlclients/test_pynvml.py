"""nvidia-ml-py (NVIDIA's Python binding of NVML, pinned, installed by pynvml.sh into the peers
cache) calls every NVML function the simulated library exports (`nm -D --defined-only`), through
pynvml_calls.py in a child process loading the simulator as the simulated driver root's
libnvidia-ml.so.1; the values are checked against `gpuslice inspect --json`. An exported function
no call reaches fails the test, so a new export needs a call here. No skip when pip or the index
is missing: pynvml.sh fails, and so does the test.

What monitors read (clocks, power, ECC, BAR1, PCIe, samples, field values, topology, P2P, ...) is
checked against the catalogue's board figures (src/catalog/board.c, read by catalog_boards.py),
the node's layout and the memory errors the test injects with `gpuslice sim ecc` and
`gpuslice sim retire-page`; test_memory_health_before_ampere checks the retired pages of a
Turing board and what a GPU reset clears.

Environment (set by meson): GPUSLICE, GPUSLICE_SIM_LIB, GS_SOURCE_ROOT."""
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.environ.get("GS_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUSLICE = os.environ.get("GPUSLICE") or os.path.join(ROOT, "build", "gpuslice")
SIM_LIB = os.environ.get("GPUSLICE_SIM_LIB") or os.path.join(ROOT, "build", "sim", "libgpuslice-nvml-sim.so")
HERE = os.path.dirname(os.path.abspath(__file__))
NODE = os.path.join(ROOT, "examples", "nodes", "h100x4-l4x3.yaml")
LIB_DIR = {"x86_64": "usr/lib/x86_64-linux-gnu", "aarch64": "usr/lib/aarch64-linux-gnu"}[platform.machine()]
sys.path.insert(0, HERE)
from catalog_boards import boards  # noqa: E402


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
            gs("sim", "ecc", "5", "corrected", "--count", "3")
            gs("sim", "ecc", "6", "uncorrected")
            gs("sim", "retire-page", "5", "0x2000", "--double-bit")
            gs("sim", "retire-page", "5", "4096")
            inv = json.loads(gs("inspect", "--json"))
            env = dict(os.environ, PYTHONPATH=site, GPUSLICE_SIM_NODE=NODE, GPUSLICE_SIM_STATE=state,
                       LD_LIBRARY_PATH=os.path.join(state, "root", LIB_DIR))
            if os.environ.get("GS_SANITIZER_PRELOAD"):   # a sanitized simulator: its runtimes first
                env.update(LD_PRELOAD=os.environ["GS_SANITIZER_PRELOAD"], ASAN_OPTIONS="detect_leaks=0")
            r = subprocess.run([sys.executable, os.path.join(HERE, "pynvml_calls.py"), str(sleeper.pid)],
                               capture_output=True, text=True, timeout=120, env=env)
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
    check_monitoring(out, inv, sleeper.pid)


NS, INVAL, NOT_FOUND = {"err": 3}, {"err": 2}, {"err": 6}   # NOT_SUPPORTED, INVALID_ARGUMENT, NOT_FOUND


def check_monitoring(out, inv, sleeper_pid):
    cat = boards(ROOT)
    for i, (g, want) in enumerate(zip(out["gpus"], inv["gpus"])):
        m, b = g["mon"], cat["H100-SXM5-80GB" if i < 4 else "L4"]
        busy = bool(want["processes"])
        mx = [b["max_graphics_mhz"], b["max_graphics_mhz"], b["max_mem_mhz"], b["max_video_mhz"]]
        app = [b["app_graphics_mhz"], NS, b["app_mem_mhz"], NS]
        assert m["max_clock"] == mx and m["app_clock"] == m["default_app_clock"] == app
        assert m["clock"] == (mx if busy else [b["app_graphics_mhz"]] * 2 + [b["app_mem_mhz"], b["max_video_mhz"]])
        assert m["clock_ids"] == [[m["clock"][t], app[t], app[t], mx[t] if t < 2 else NS] for t in range(4)]
        assert m["power_limit"] == m["power_default"] == m["power_enforced"] == b["power_default_mw"]
        assert m["power_constraints"] == [b["power_min_mw"], b["power_max_mw"]]
        assert g["power_mw"] <= b["power_default_mw"] and (g["power_mw"] == b["power_default_mw"]) == (i == 5)
        e1, e2 = m["energy"]   # mJ: at least 50 ms at the power it draws, and only growing
        assert e2 - e1 >= g["power_mw"] * 50 // 1000 and e2 - e1 < g["power_mw"] * 5
        assert m["fans"] == b["fans"] == 0 and m["fan_speed"] == NS and m["pstate"] == 0 and m["persistence"] == 1
        assert m["ecc_mode"] == [1, 1]
        ecc = {5: [[3, 3], [0, 0]], 6: [[0, 0], [1, 1]]}.get(i, [[0, 0], [0, 0]])
        assert m["ecc"] == ecc and m["ecc_dram"] == [ecc[0][1], ecc[1][1]] and m["ecc_l2"] == 0
        # Hopper and Ada remap rows: the two retired pages of GPU 5 are a correctable and an uncorrectable row
        assert m["retired"] == [NS, NS] and m["retired_pending"] == NS
        assert m["remapped"] == ([1, 1, 1, 0] if i == 5 else [0, 0, 0, 0])
        assert m["bar1"] == [b["bar1_mib"] << 20, (1 + 2 * len(want["processes"])) << 20,
                             (b["bar1_mib"] << 20) - ((1 + 2 * len(want["processes"])) << 20)]
        assert re.fullmatch(r"13\d{11}", m["serial"]) and m["vbios"] == b["vbios"]
        domain, bus = int(want["pci_bus_id"][:8], 16), int(want["pci_bus_id"][9:11], 16)
        assert m["board_id"] == domain << 16 | bus << 8
        numa = 0 if i < 4 else 1     # buses 0x18..0x5d on node 0, 0x9a.. on node 1
        assert m["numa"] == numa and m["cpus"] == ([0xFFFFFFFF, 0] if numa == 0 else [0xFFFFFFFF << 32, 0])
        assert m["pcie"] == [b["pcie_gen"], b["pcie_gen"], b["pcie_width"], b["pcie_width"]]
        lane = {4: 1969, 5: 3938}[b["pcie_gen"]]
        assert m["pcie_kbs"] == ([lane * b["pcie_width"] * 10] * 2 if busy else [0, 0])
        assert m["encoder"] == m["decoder"] == [0, 167000] and m["accounting"] == 0
        util = NS if i < 4 else [1, [100 if busy else 0]]          # none under MIG
        mem = NS if i < 4 else [1, [want["memory"]["used_mib"] * 100 // want["memory"]["total_mib"]]]
        assert m["samples"] == [[1, [g["power_mw"]]], util, mem, [1, [0]], [1, [0]], [1, [m["clock"][0]]],
                                [1, [m["clock"][2]]], NS, [1, [0]], [1, [0]]]
        remap = {5: [1, 1, 1, 0]}.get(i, [0, 0, 0, 0])
        links = 18 if i < 4 else 0
        assert m["fields"][:6] == [1, 1, ecc[0][0], ecc[1][0], ecc[0][1], ecc[1][1]]
        assert m["fields"][6:9] == [NS] * 3 and m["fields"][10] == links
        assert m["fields"][11] == (0 if links else NS) and m["fields"][12:16] == remap
        assert m["fields"][16] == g["power_mw"] and m["fields"][17] == NS
        assert 0 < m["fields"][9] <= e1      # read before the energy calls
        assert m["fabric"] == ({"status": 0, "state": 3, "clique": 0} if i < 4 else NS)
        assert m["display"] == [0, 0] and m["driver_model"] == NS and m["driver_model_v1"] == 3
        assert m["graphics_procs"] == m["mps_procs"] == [] and m["by_bus_id"] == [True, True]
    assert len({g["mon"]["serial"] for g in out["gpus"]}) == 7
    assert out["gpu_set"] == [[0, 1, 2, 3], [0, 1, 2, 3], [4, 5, 6], [4, 5, 6]] and out["gpu_set_error"] == 2
    assert out["nearest"] == [[1], [1, 2, 3], [1, 2, 3, 4, 5, 6]]
    # NVLink within the SXM board; across NUMA nodes the host bridge; two L4s behind one switch: PCIe only
    assert out["p2p"] == {"0-1": [0] * 5, "0-4": [3] * 5, "4-5": [0, 0, 5, 5, 0], "0-0": [INVAL] * 5}
    assert out["by_bus_id_errors"] == [6, 2, 2]
    assert out["process_names"] == ["sleep", NOT_FOUND]
    # GPU instances and compute instances listed with *count 0 on input; CI capacity of a 1g GI and
    # of the 3g GI whose one CI takes all of it; a CI profile the GI cannot hold
    assert out["ci_capacity"] == [1, 0, 0, 2]
    m = out["mig_device"]
    assert m["bar1"] == [((cat["H100-SXM5-80GB"]["bar1_mib"] // 8) - 1) << 20, 0]
    assert m["clock_error"] == m["ecc_error"] == 2


def test_memory_health_before_ampere():
    """A Turing board (T4) retires pages instead of remapping rows; a GPU reset clears the volatile
    ECC counters and the pending status, not the aggregate counters or the pages."""
    p = subprocess.run([os.path.join(HERE, "pynvml.sh")], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"pynvml.sh failed:\n{p.stderr}"
    node = os.path.join(ROOT, "examples", "nodes", "t4x2.yaml")
    tmp = tempfile.mkdtemp(prefix="gs-pynvml-t4-")
    state = os.path.join(tmp, "state")

    def gs(*args, ok=True):
        r = subprocess.run([GPUSLICE, "--sim", node, "--sim-state", state, *args], capture_output=True, text=True,
                           timeout=60)
        assert (r.returncode == 0) == ok, r.stderr
        return r.stderr

    def health():
        env = dict(os.environ, PYTHONPATH=p.stdout.strip().splitlines()[-1], GPUSLICE_SIM_NODE=node,
                   GPUSLICE_SIM_STATE=state, LD_LIBRARY_PATH=os.path.join(state, "root", LIB_DIR))
        if os.environ.get("GS_SANITIZER_PRELOAD"):
            env.update(LD_PRELOAD=os.environ["GS_SANITIZER_PRELOAD"], ASAN_OPTIONS="detect_leaks=0")
        r = subprocess.run([sys.executable, os.path.join(HERE, "pynvml_health.py")], capture_output=True, text=True,
                           timeout=60, env=env)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    try:
        gs("inspect")   # makes the node and its root, where the library is
        assert health()["retired"] == [[], []] and health()["pending"] == 0
        gs("sim", "ecc", "0", "corrected", "--count", "5")
        gs("sim", "retire-page", "0", "0x1000", "--double-bit")
        gs("sim", "retire-page", "0", "0x2000")
        gs("sim", "retire-page", "0", "12288")
        assert "0x2000 is already retired" in gs("sim", "retire-page", "0", "8192", ok=False)
        assert "GPU 2 does not exist" in gs("sim", "ecc", "2", "corrected", ok=False)
        assert "--count" in gs("sim", "ecc", "0", "corrected", "--count", "0", ok=False)
        h = health()
        assert h["name"] == "Tesla T4" and h["pcie"] == boards(ROOT)["T4"]["pcie_gen"] == 3
        assert h["retired"] == [[0x2000, 0x3000], [0x1000]] and h["pending"] == 1
        assert h["remapped"] == {"err": 3} and h["fields"] == [2, 1, 1, {"err": 3}]
        assert h["ecc"] == [[5, 5], [0, 0]]
        gs("sim", "reset-gpu", "0")
        h = health()
        assert h["retired"] == [[0x2000, 0x3000], [0x1000]] and h["pending"] == 0 and h["fields"][2] == 0
        assert h["ecc"] == [[0, 5], [0, 0]]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
