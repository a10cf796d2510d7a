"""CLI integration tests: the real gpuslice binary on a simulated node.

Each test gets its own state directory, so tests are independent and can run in any order."""
import json
import os
import subprocess

import pytest

GPUSLICE = os.environ.get("GPUSLICE", "build/gpuslice")
ROOT = os.environ.get("GS_SOURCE_ROOT", os.getcwd())
NODE = os.path.join(ROOT, "examples", "nodes", "h100x4-l4x2.yaml")
AMPERE = os.path.join(ROOT, "examples", "nodes", "a100-mixed.yaml")


def run(*args, check=None, env=None):
    proc = subprocess.run([GPUSLICE, *args], capture_output=True, text=True, env=env, timeout=60)
    if check is not None:
        assert proc.returncode == check, f"exit {proc.returncode}\nstdout:{proc.stdout}\nstderr:{proc.stderr}"
    return proc


@pytest.fixture
def sim(tmp_path):
    """Returns a function running gpuslice on the example node with a private state dir."""
    state = str(tmp_path / "state")

    def call(*args, node=NODE, check=0):
        return run("--sim", node, "--sim-state", state, *args, check=check)

    return call


def inspect(sim, node=NODE):
    return json.loads(sim("inspect", "--json", node=node).stdout)


def test_inspect_json_schema(sim):
    doc = inspect(sim)
    assert doc["schema"] == "gpuslice.inspect/v1"
    assert doc["driver_version"] == "580.65.06"
    assert doc["cuda_driver_version"] == "13.0"
    assert doc["nvml_library"].endswith("libgpuslice-nvml-sim.so")
    gpus = doc["gpus"]
    assert [g["index"] for g in gpus] == [0, 1, 2, 3, 4, 5]
    h100 = gpus[0]
    assert h100["name"] == "NVIDIA H100 80GB HBM3"
    assert h100["uuid"].startswith("GPU-")
    assert h100["pci_device_id"] == "0x233010DE"
    assert h100["architecture"] == "hopper"
    assert h100["compute_capability"] == "9.0"
    assert h100["memory"] == {"total_mib": 81559, "used_mib": 0}
    assert h100["health"] == "ok"
    mig = h100["mig"]
    assert mig["capable"] and mig["current"] == "enabled" and mig["pending"] == "enabled"
    assert mig["memory_slices"] == 8
    by_name = {p["name"]: p for p in mig["profiles"]}
    assert by_name["1g.10gb"]["id"] == 19 and by_name["1g.10gb"]["free"] == 7
    assert by_name["3g.40gb"]["placements"] == [{"start": 0, "size": 4}, {"start": 4, "size": 4}]
    assert by_name["7g.80gb"]["memory_mib"] == 81152
    assert mig["devices"] == [] and mig["gpu_instances"] == []
    l4 = gpus[4]
    assert l4["mig"] == {"capable": False}
    assert l4["architecture"] == "ada"
    assert len({g["uuid"] for g in gpus}) == 6


def test_inspect_table(sim):
    out = sim("inspect").stdout
    assert "Node: 6 GPU(s), driver 580.65.06, CUDA 13.0" in out
    assert "GPU 4  NVIDIA L4" in out
    assert "MIG         not supported" in out
    assert "free        1g.10gb x7, 2g.20gb x3" in out


def test_processes_and_memory(sim):
    sim("sim", "process", "add", "--gpu", "4", "--pid", "321", "--mem", "3GiB", "--name", "python")
    doc = inspect(sim)
    l4 = doc["gpus"][4]
    assert l4["processes"] == [{"pid": 321, "used_memory_mib": 3072, "gi_id": None, "ci_id": None}]
    assert l4["memory"]["used_mib"] == 3072
    assert l4["utilization"]["gpu"] == 100
    # The same pid twice, too much memory, a MIG GPU without an instance: clear errors.
    p = sim("sim", "process", "add", "--gpu", "4", "--pid", "321", "--mem", "1GiB", check=1)
    assert "process 321 already runs on GPU 4" in p.stderr
    p = sim("sim", "process", "add", "--gpu", "5", "--pid", "9", "--mem", "64GiB", check=1)
    assert "out of memory" in p.stderr
    p = sim("sim", "process", "add", "--gpu", "0", "--pid", "9", "--mem", "1GiB", check=1)
    assert "is in MIG mode" in p.stderr
    p = sim("sim", "process", "add", "--gpu", "4", "--pid", "9", "--mem", "lots", check=2)
    assert "--mem" in p.stderr
    sim("sim", "process", "remove", "--pid", "321")
    assert inspect(sim)["gpus"][4]["processes"] == []
    p = sim("sim", "process", "remove", "--pid", "321", check=1)
    assert "no simulated process 321" in p.stderr


def test_lost_gpu_and_recovery(sim):
    sim("sim", "gpu-lost", "5")
    doc = inspect(sim)
    assert doc["gpus"][5]["health"] == "lost"
    assert doc["gpus"][5]["error"] == "GPU is lost"
    assert doc["gpus"][4]["health"] == "ok"
    sim("sim", "gpu-lost", "5", "--recover")
    assert inspect(sim)["gpus"][5]["health"] == "ok"


def test_ampere_reset_activates_pending_mode(sim, tmp_path):
    doc = inspect(sim, node=AMPERE)
    assert doc["driver_version"] == "570.172.08"
    assert doc["gpus"][3]["name"] == "NVIDIA A30"
    a30 = doc["gpus"][3]["mig"]
    assert {p["name"]: p["id"] for p in a30["profiles"]} == {
        "1g.6gb": 14, "2g.12gb": 5, "4g.24gb": 0, "1g.6gb+me": 21, "2g.12gb+me": 6}
    sim("sim", "reset-gpu", "3", node=AMPERE)
    p = sim("sim", "reset-gpu", "9", node=AMPERE, check=1)
    assert "GPU 9 does not exist" in p.stderr


def test_xid_command(sim):
    sim("sim", "xid", "4", "79")
    p = sim("sim", "xid", "4", "notanumber", check=2)
    assert "XID" in p.stderr
    p = sim("sim", "xid", "0", "79", "--gi", "3", check=1)
    assert "GPU 0 has no GPU instance 3" in p.stderr


def test_state_is_shared_between_processes(sim):
    sim("sim", "process", "add", "--gpu", "5", "--pid", "77", "--mem", "1GiB")
    # A second, independent process sees the first one's change.
    assert inspect(sim)["gpus"][5]["processes"][0]["pid"] == 77


def test_no_driver(tmp_path):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = str(tmp_path)
    p = run("inspect", check=3, env=env)
    assert "NVIDIA driver not found: could not load libnvidia-ml.so.1:" in p.stderr
    p = run("--nvml-lib", "/nonexistent/libnvidia-ml.so.1", "inspect", check=3)
    assert "could not load /nonexistent/libnvidia-ml.so.1" in p.stderr


def test_bad_node_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus:\n  - model: H100\n")
    p = run("--sim", str(bad), "inspect", check=1)
    assert f"{bad}:2:" in p.stderr
    assert "unknown model" in p.stderr
    p = run("--sim", str(tmp_path / "missing.yaml"), "inspect", check=1)
    assert "missing.yaml" in p.stderr


@pytest.mark.parametrize("args", [[], ["inspect"], ["sim"]])
def test_help(args):
    p = run(*args, "--help", check=0)
    assert "Usage: gpuslice" in p.stdout


def test_usage_errors(sim):
    assert run(check=2).returncode == 2
    p = run("frobnicate", check=2)
    assert "unknown command 'frobnicate'" in p.stderr
    p = run("sim", "xid", "0", "79", check=2)
    assert "needs the simulated node" in p.stderr
    p = sim("sim", "explode", check=2)
    assert "unknown subcommand" in p.stderr
    p = run("--log-level", "loud", "inspect", check=2)
    assert "--log-level" in p.stderr
    p = sim("inspect", "extra", check=2)
    p = run("--sim-state", "/tmp/x", "inspect", check=2)
    assert "--sim-state needs --sim" in p.stderr
    assert run("--version", check=0).stdout.startswith("gpuslice ")


def test_gpu_check_script_compares(sim, tmp_path):
    """tests/gpu/compare_inspect.py (run on real GPUs) detects agreement and mismatches."""
    doc = inspect(sim)
    (tmp_path / "inspect.json").write_text(json.dumps(doc))
    rows = []
    for g in doc["gpus"]:
        mig = g["mig"]
        cur = mig["current"].capitalize() if mig["capable"] else "[N/A]"
        pend = mig["pending"].capitalize() if mig["capable"] else "[N/A]"
        rows.append(f"{g['index']}, {g['uuid']}, {g['name']}, {g['memory']['total_mib']}, {g['pci_bus_id']}, "
                    f"{g['pci_device_id']}, {cur}, {pend}, {doc['driver_version']}")
    (tmp_path / "smi.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "smi-L.txt").write_text("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-x)\n")
    script = os.path.join(ROOT, "tests", "gpu", "compare_inspect.py")
    args = ["/usr/bin/python3", script, str(tmp_path / "inspect.json"), str(tmp_path / "smi.csv"),
            str(tmp_path / "smi-L.txt")]
    ok = subprocess.run(args, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout
    assert "0 mismatches" in ok.stdout
    (tmp_path / "smi.csv").write_text("\n".join(rows).replace("81559", "81920") + "\n")
    bad = subprocess.run(args, capture_output=True, text=True)
    assert bad.returncode == 1
    assert "FAIL GPU 0 memory.total MiB" in bad.stdout


def _tiny_trace(tmp_path):
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n" +
                     "".join(f"node-{i},64000,262144,4,T4\n" for i in range(3)))
    pods = tmp_path / "pods.csv"
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
            "deletion_time,scheduled_time"]
    for i in range(40):
        num, milli = (1, 250 + 100 * (i % 6)) if i % 3 else (1, 1000)
        rows.append(f"pod-{i:03d},2000,8192,{num},{milli},,LS,Running,0,0,0")
    pods.write_text("\n".join(rows) + "\n")
    return str(nodes), str(pods)


def test_replay_placed_shares(tmp_path):
    """--placed-shares writes one sharing pod's milli-GPU per line; an unwritable path is an error
    naming it, after the replay itself (its summary is still printed)."""
    nodes, pods = _tiny_trace(tmp_path)
    out = tmp_path / "shares.txt"
    p = run("replay", "--nodes", nodes, "--pods", pods, "--policy", "fgd", "--seed", "42",
            "--placed-shares", str(out), check=0)
    assert "alloc_at_100=" in p.stdout
    shares = [int(x) for x in out.read_text().split()]
    assert shares and all(250 <= s <= 750 for s in shares)
    bad = str(tmp_path / "no-such-dir" / "shares.txt")
    p = run("replay", "--nodes", nodes, "--pods", pods, "--policy", "fgd", "--seed", "42",
            "--placed-shares", bad)
    assert p.returncode != 0
    assert f"gpuslice replay: {bad}: No such file or directory" in p.stderr


def test_replay_dump_order(tmp_path):
    """--dump-order writes every event in arrival order: the seeded shuffle of the name-sorted pods,
    then the inflation draws (3x the capacity: pods repeat), each with the bucket, node and GPUs it took; the
    order depends on the seed only, not on the policy, and the placements add up to the summary."""
    nodes, pods = _tiny_trace(tmp_path)

    def dump(policy, seed):
        out = tmp_path / f"order-{policy}-{seed}.csv"
        p = run("replay", "--nodes", nodes, "--pods", pods, "--policy", policy, "--seed", str(seed),
                "--inflation", "3", "--dump-order", str(out), check=0)
        kv = dict(x.split("=", 1) for x in p.stdout.split() if "=" in x)
        lines = out.read_text().splitlines()
        assert lines[0] == "seq,pod,bucket,node,gpus"
        return kv, [line.split(",") for line in lines[1:]]

    kv, rows = dump("fgd", 42)
    assert len(rows) == int(kv["events"]) > 40
    assert [int(r[0]) for r in rows] == list(range(len(rows)))
    assert sorted({r[1] for r in rows}) == [f"pod-{i:03d}" for i in range(40)]
    assert [r[1] for r in rows[:40]] != [f"pod-{i:03d}" for i in range(40)]  # shuffled
    assert sum(1 for r in rows if not r[3]) == int(kv["failed"])
    assert all(not r[4] for r in rows if not r[3])
    assert {r[3] for r in rows if r[3]} <= {"node-0", "node-1", "node-2"}
    assert all(0 <= int(g) < 4 for r in rows if r[4] for g in r[4].split("|"))
    buckets = [int(r[2]) for r in rows]
    assert buckets == sorted(buckets) and buckets[-1] >= 100
    _, again = dump("gpuslice", 42)
    assert [r[1] for r in again] == [r[1] for r in rows]
    _, other = dump("fgd", 43)
    assert [r[1] for r in other] != [r[1] for r in rows]


def test_replay_says_why_there_is_no_figure_at_100(tmp_path):
    """A trace too small for the paper's 1 % buckets, or one whose arrivals stop short of 100 %,
    prints alloc_at_100=none and says why on stderr (it printed alloc_at_100=nan)."""
    nodes, pods = _tiny_trace(tmp_path)
    p = run("replay", "--nodes", nodes, "--pods", pods, "--policy", "fgd", "--seed", "42", check=0)
    assert "alloc_at_100=none " in p.stdout and "nan" not in p.stdout
    assert "no pod arrived within that 1 % bucket (the cluster has 12 GPUs, so one pod adds up to 8.3 %" in p.stderr
    p = run("replay", "--nodes", nodes, "--pods", pods, "--policy", "fgd", "--seed", "42", "--inflation", "0.5",
            check=0)
    assert "alloc_at_100=none " in p.stdout
    assert "the arrivals reached only 44 % of the cluster's GPU capacity (--inflation 0.50)" in p.stderr


def test_sim_root_serves_every_command(sim, tmp_path):
    """--sim points cdi generate and the agent's defaults at the simulated node's root
    (STATE/root, docs/simulator.md#the-nodes-root): cdi generate works with no option (before:
    '/proc/devices: no nvidia-frontend character device'), the root's nvidia-smi stand-in runs, its
    NUMA nodes follow the board (0 for the first four GPUs, 1 for the next), and `agent --help`
    names the defaults."""
    p = sim("cdi", "generate", node=os.path.join(ROOT, "examples", "nodes", "h100x4-l4x3.yaml"))
    spec = json.loads(p.stdout)
    assert len([d for d in spec["devices"] if d["name"].startswith("GPU-")]) == 7
    root = tmp_path / "state" / "root"
    smi = subprocess.run([str(root / "usr" / "bin" / "nvidia-smi")], capture_output=True, text=True, timeout=10)
    assert smi.returncode == 0 and "simulated node" in smi.stdout
    inv = inspect(sim, node=os.path.join(ROOT, "examples", "nodes", "h100x4-l4x3.yaml"))
    for g in inv["gpus"]:
        bus = g["pci_bus_id"][4:].lower()
        numa = (root / "sys" / "bus" / "pci" / "devices" / bus / "numa_node").read_text().strip()
        assert numa == str(g["index"] % 8 // 4)
    h = run("agent", "--help", check=0)
    assert "under --sim the simulated node's ROOT/proc" in h.stdout


def test_apply_previews_the_policys_mig_layout_and_shows_quotas(sim, tmp_path):
    """apply shows what the policy's MIG layout (gpuslice.mig.config) would change before the agent
    serves, and the VRAM quota of each guarded replica (it ignored both)."""
    node7 = os.path.join(ROOT, "examples", "nodes", "h100x4-l4x3.yaml")
    policy = tmp_path / "p.yaml"
    policy.write_text("version: v1\nflags:\n  migStrategy: mixed\ngpuslice:\n  mig:\n    config: all-1g.10gb\n")
    p = sim("apply", "--config", str(policy), node=node7)
    assert p.stdout.startswith("MIG layout all-1g.10gb (gpuslice.mig.config), applied by the agent before it serves:")
    assert "GPU 0 (NVIDIA H100 80GB HBM3): 14 step(s), 0 instance(s) kept" in p.stdout
    assert "56 step(s) in total" in p.stdout and "the agent advertises the new instances" in p.stdout
    j = json.loads(sim("apply", "--config", str(policy), "--json", node=node7).stdout)
    assert j["mig_layout"] == {"config": "all-1g.10gb", "steps": 56}
    # After the layout is applied, nothing is left to change.
    sim("mig", "apply", "-c", "all-1g.10gb", node=node7)
    p = sim("apply", "--config", str(policy), node=node7)
    assert "0 step(s) in total" in p.stdout and "the agent advertises the new instances" not in p.stdout
    assert "nvidia.com/mig-1g.10gb" in p.stdout
    # An unknown config is an error, as for the agent.
    policy.write_text("version: v1\nflags:\n  migStrategy: mixed\ngpuslice:\n  mig:\n    config: all-balancd\n")
    p = sim("apply", "--config", str(policy), node=node7, check=1)
    assert "no MIG config 'all-balancd'" in p.stderr
    # Quotas: memoryPerReplica on each replica.
    policy.write_text("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
                      "      replicas: 2\n      memoryPerReplica: 4GiB\n")
    p = sim("apply", "--config", str(policy), node=os.path.join(ROOT, "examples", "nodes", "t4x2.yaml"))
    replicas = [l for l in p.stdout.splitlines() if " replica" in l]
    assert len(replicas) == 4 and all(l.endswith("replica VRAM quota 4096 MiB") for l in replicas), p.stdout
    j = json.loads(sim("apply", "--config", str(policy), "--json",
                       node=os.path.join(ROOT, "examples", "nodes", "t4x2.yaml")).stdout)
    assert {d["vram_quota_bytes"] for r in j["resources"] for d in r["devices"]} == {4 << 30}


def test_dra_slices_takes_the_agents_driver_flag(sim):
    """`dra slices --dra-driver NAME` (the agent's flag) names the driver in every slice; `--driver`
    is the same."""
    node = os.path.join(ROOT, "examples", "dra", "node.yaml")
    policy = os.path.join(ROOT, "examples", "dra", "policy.yaml")
    outs = []
    for flag in ("--dra-driver", "--driver"):
        out = json.loads(sim("dra", "slices", "--config", policy, "--node", "n1", flag, "gpu.example.com",
                             node=node).stdout)
        assert out["items"] and {s["spec"]["driver"] for s in out["items"]} == {"gpu.example.com"}, out
        outs.append(out)
    assert outs[0] == outs[1]
    bad = sim("dra", "slices", "--config", policy, "--node", "n1", "--dra-driver", "Not_A_Name", node=node, check=1)
    assert "Not_A_Name" in bad.stderr
