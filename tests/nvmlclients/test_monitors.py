"""Two GPU monitors no one here wrote, nvitop and gpustat (pinned, with nvidia-ml-py, installed by
monitors.sh into the peers cache), run on the simulated node and must show it as it is: their
own output (gpustat's JSON and text, nvitop's one-shot report and its Python API) is checked
against `gpuslice inspect --json` and the catalogue's board figures (src/catalog/board.c): names,
bus IDs, memory, utilization, temperatures, power and its limit, clocks, ECC errors, processes.
No skip when pip or the index is missing: monitors.sh fails, and so does the test.

Environment (set by meson): GPUSLICE, GPUSLICE_SIM_LIB, GS_SOURCE_ROOT, GS_SANITIZER_PRELOAD."""
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

ROOT = os.environ.get("GS_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUSLICE = os.environ.get("GPUSLICE") or os.path.join(ROOT, "build", "gpuslice")
HERE = os.path.dirname(os.path.abspath(__file__))
NODE = os.path.join(ROOT, "examples", "nodes", "h100x4-l4x3.yaml")
LIB_DIR = {"x86_64": "usr/lib/x86_64-linux-gnu", "aarch64": "usr/lib/aarch64-linux-gnu"}[platform.machine()]
sys.path.insert(0, HERE)
from catalog_boards import boards  # noqa: E402

KEYS = ["H100-SXM5-80GB"] * 4 + ["L4"] * 3


@pytest.fixture(scope="module")
def node():
    p = subprocess.run([os.path.join(HERE, "monitors.sh")], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, f"monitors.sh failed:\n{p.stderr}"
    site = p.stdout.strip().splitlines()[-1]
    tmp = tempfile.mkdtemp(prefix="gs-monitors-")
    state = os.path.join(tmp, "state")
    sleepers = []

    def gs(*args):
        r = subprocess.run([GPUSLICE, "--sim", NODE, "--sim-state", state, *args], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout

    try:
        gs("sim", "mig-create", "--gpu", "0", "--profile", "3g.40gb", "--start", "4")
        sleepers = [subprocess.Popen(["sleep", "120"]) for _ in range(2)]
        gs("sim", "process", "add", "--gpu", "5", "--pid", str(sleepers[0].pid), "--mem", "2GiB", "--name", "trainer")
        gs("sim", "process", "add", "--gpu", "0", "--gi", "1", "--pid", str(sleepers[1].pid), "--mem", "1GiB")
        gs("sim", "ecc", "6", "uncorrected", "--count", "2")
        env = dict(os.environ, PYTHONPATH=site, GPUSLICE_SIM_NODE=NODE, GPUSLICE_SIM_STATE=state,
                   LD_LIBRARY_PATH=os.path.join(state, "root", LIB_DIR), COLUMNS="160", LINES="60", TERM="xterm")
        if os.environ.get("GS_SANITIZER_PRELOAD"):   # a sanitized simulator: its runtimes first
            env.update(LD_PRELOAD=os.environ["GS_SANITIZER_PRELOAD"], ASAN_OPTIONS="detect_leaks=0")
        inv = json.loads(gs("inspect", "--json"))

        def run(*args):
            r = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120, env=env,
                               stdin=subprocess.DEVNULL)
            assert r.returncode == 0, r.stderr
            return r

        yield {"inv": inv, "run": run, "pids": [s.pid for s in sleepers], "boards": boards(ROOT)}
    finally:
        for s in sleepers:
            s.kill()
            s.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def test_gpustat_json(node):
    inv, (trainer, mig_proc) = node["inv"], node["pids"]
    out = json.loads(node["run"]("-m", "gpustat", "--json").stdout)
    assert out["driver_version"] == inv["driver_version"] == "580.65.06"
    assert len(out["gpus"]) == len(inv["gpus"]) == 7
    for got, want, key in zip(out["gpus"], inv["gpus"], KEYS):
        b = node["boards"][key]
        assert (got["index"], got["uuid"], got["name"]) == (want["index"], want["uuid"], want["name"])
        assert got["memory.total"] == want["memory"]["total_mib"] and got["memory.used"] == want["memory"]["used_mib"]
        assert got["temperature.gpu"] == want["temperature_c"] and got["power.draw"] == int(want["power_w"])
        assert got["enforced.power.limit"] == b["power_default_mw"] // 1000 and got["fan.speed"] is None
        assert got["utilization.enc"] == got["utilization.dec"] == 0
        pids = sorted((p["pid"], p["gpu_memory_usage"]) for p in got["processes"])
        assert pids == sorted((p["pid"], p["used_memory_mib"]) for p in want["processes"])
    g = out["gpus"]
    assert [x["utilization.gpu"] for x in g] == [None] * 4 + [0, 100, 0]   # none under MIG, as the driver
    assert [p["pid"] for p in g[5]["processes"]] == [trainer] and g[5]["memory.used"] == 2048
    assert [p["pid"] for p in g[0]["processes"]] == [mig_proc] and g[0]["processes"][0]["gpu_memory_usage"] == 1024
    assert g[5]["temperature.gpu"] == 65 and g[4]["temperature.gpu"] == 35


def test_gpustat_text(node):
    trainer = node["pids"][0]
    text = node["run"]("-m", "gpustat", "--no-color", "--show-pid", "--show-power").stdout
    lines = text.splitlines()
    assert "580.65.06" in lines[0] and len(lines) == 8, text
    for i, (line, want) in enumerate(zip(lines[1:], node["inv"]["gpus"])):
        m = re.match(r"\[(\d)\] (.+?) +\| +(\d+)°C, +(\?\?|\d+) %, +(\d+) / +(\d+) W \| +(\d+) / (\d+) MB \|",
                     line)
        assert m, line
        assert (int(m[1]), m[2], int(m[3])) == (i, want["name"], want["temperature_c"])
        assert int(m[7]) == want["memory"]["used_mib"] and int(m[8]) == want["memory"]["total_mib"]
        assert int(m[6]) == node["boards"][KEYS[i]]["power_default_mw"] // 1000
        assert m[4] == ("??" if i < 4 else "100" if i == 5 else "0")
    assert re.search(rf"/{trainer}\(2048M\)", lines[6]), lines[6]


def test_nvitop_once(node):
    inv, trainer = node["inv"], node["pids"][0]
    r = node["run"]("-m", "nvitop", "-1", "--ascii")
    assert "ERROR" not in r.stderr and "FunctionNotFound" not in r.stderr, r.stderr
    text = r.stdout
    assert "NVITOP 1.7.2" in text and "Driver Version: 580.65.06" in text and "CUDA Driver Version: 13.0" in text
    rows = [line for line in text.splitlines() if re.match(r"\|\s+\d\s+\S.*\| [0-9A-F]{8}:[0-9A-F]{2}:00\.0 ", line)]
    assert len(rows) == 7, text
    for i, (row, want) in enumerate(zip(rows, inv["gpus"])):
        assert want["pci_bus_id"] in row and want["name"].replace("NVIDIA ", "") in row, row
        assert " On |" in row   # persistence mode
    stats = [line for line in text.splitlines() if re.match(r"\| N/A\s+\d+C\s+P0", line)]
    assert len(stats) == 7, text
    for i, (line, want) in enumerate(zip(stats, inv["gpus"])):
        limit = node["boards"][KEYS[i]]["power_default_mw"] // 1000
        assert f" {want['temperature_c']}C " in line and f"{int(want['power_w'])}W / {limit}W" in line, line
        total = "79.65GiB" if i < 4 else "22.49GiB"   # 81559 MiB and 23034 MiB
        assert f"/ {total}" in line, line
    assert "2048MiB / 22.49GiB" in stats[5] and " 100% " in stats[5]
    mig = [line for line in text.splitlines() if "GI/CI" in line]   # GPU 0's 3g.40gb (40448 MiB)
    assert len(mig) == 1 and "3g.40gb @ GI/CI: 1/0" in mig[0] and "1024MiB / 39.50GiB" in mig[0], text
    procs = [line for line in text.splitlines() if re.match(rf"\|\s+5\s+{trainer}\s+C\s", line)]
    assert len(procs) == 1 and "2048MiB" in procs[0], text
    procs = [line for line in text.splitlines() if re.match(rf"\|\s+0:0\s+{node['pids'][1]}\s+C\s", line)]
    assert len(procs) == 1 and "1024MiB" in procs[0], text   # the process on the MIG device


def test_nvitop_api(node):
    inv = node["inv"]
    out = json.loads(node["run"](os.path.join(HERE, "monitor_api.py")).stdout)
    assert len(out) == 7
    for got, want, key in zip(out, inv["gpus"], KEYS):
        b = node["boards"][key]
        assert (got["index"], got["name"], got["uuid"], got["bus_id"]) == (want["index"], want["name"], want["uuid"],
                                                                          want["pci_bus_id"])
        assert got["memory_total"] == want["memory"]["total_mib"] << 20
        assert got["memory_used"] == want["memory"]["used_mib"] << 20
        assert got["temperature"] == want["temperature_c"] and got["power_usage"] == int(want["power_w"] * 1000)
        assert got["power_limit"] == b["power_default_mw"]
        assert got["max_sm_clock"] == b["max_graphics_mhz"] and got["max_memory_clock"] == b["max_mem_mhz"]
        busy = bool(want["processes"])
        assert got["sm_clock"] == (b["max_graphics_mhz"] if busy else b["app_graphics_mhz"])
        assert got["fan_speed"] is None and got["performance_state"] == "P0" and got["persistence_mode"] == "Enabled"
        assert got["pids"] == sorted(p["pid"] for p in want["processes"])
        assert got["mig_mode"] == (key != "L4") and got["nvlinks"] == (18 if key != "L4" else 0)
    assert [g["ecc_uncorrected"] for g in out] == [0] * 6 + [2]
    assert [g["gpu_utilization"] for g in out][4:] == [0, 100, 0]
