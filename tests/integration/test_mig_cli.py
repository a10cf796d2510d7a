"""`gpuslice mig show|plan|apply|export` on a simulated node, through the real binary.

Each test gets its own state directory (and node files in its own tmp dir), so tests are
independent and can run in any order."""
import json
import os
import re
import signal
import subprocess
import time

import pytest
import yaml

GPUSLICE = os.environ.get("GPUSLICE", "build/gpuslice")
ROOT = os.environ.get("GS_SOURCE_ROOT", os.getcwd())
NODE = os.path.join(ROOT, "examples", "nodes", "h100x4-l4x2.yaml")
AMPERE = os.path.join(ROOT, "examples", "nodes", "a100-mixed.yaml")
H200 = os.path.join(ROOT, "examples", "nodes", "h200x8.yaml")
EXAMPLES = os.path.join(ROOT, "examples", "mig")


def run(*args, check=None):
    proc = subprocess.run([GPUSLICE, *args], capture_output=True, text=True, timeout=60)
    if check is not None:
        assert proc.returncode == check, f"exit {proc.returncode}\nstdout:{proc.stdout}\nstderr:{proc.stderr}"
    return proc


@pytest.fixture
def sim(tmp_path):
    """gpuslice on a simulated node (the H100 + L4 example by default) with a private state dir."""
    state = str(tmp_path / "state")

    def call(*args, node=NODE, check=0):
        return run("--log-level", "warn", "--sim", node, "--sim-state", state, *args, check=check)

    return call


def node_file(tmp_path, text, name="node.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def show(sim, node=NODE):
    return json.loads(sim("mig", "show", "--json", node=node).stdout)


def instances(doc, gpu):
    return doc["gpus"][gpu]["instances"]


def profile_counts(doc, gpu):
    counts = {}
    for inst in instances(doc, gpu):
        counts[inst["profile"]] = counts.get(inst["profile"], 0) + 1
    return counts


def uuids_by_placement(doc, gpu):
    return {(i["profile"], i["start"]): i["uuid"] for i in instances(doc, gpu)}


BALANCED_H100 = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}


def test_show_json_schema(sim):
    doc = show(sim)
    assert set(doc) == {"schema", "gpus"}
    assert doc["schema"] == "gpuslice.mig/v1"
    gpus = doc["gpus"]
    assert [g["index"] for g in gpus] == list(range(6))
    for g in gpus:
        assert set(g) == {"index", "name", "mig_capable", "current", "pending", "instances"}
        assert g["current"] in ("enabled", "disabled") and g["pending"] in ("enabled", "disabled")
    h100, l4 = gpus[0], gpus[4]
    assert h100["name"] == "NVIDIA H100 80GB HBM3"
    assert h100["mig_capable"] is True
    assert h100["current"] == "enabled" and h100["pending"] == "enabled"
    assert h100["instances"] == []
    assert l4["name"] == "NVIDIA L4" and l4["mig_capable"] is False and l4["instances"] == []

    sim("mig", "apply", "-c", "all-balanced")
    doc = show(sim)
    for gpu in range(4):
        insts = instances(doc, gpu)
        assert profile_counts(doc, gpu) == BALANCED_H100
        for inst in insts:
            assert set(inst) == {"gi_id", "profile", "start", "size", "compute_instances", "uuid"}
            assert inst["uuid"].startswith("MIG-")
            assert inst["compute_instances"] == 1
            assert isinstance(inst["gi_id"], int)
        # placements are disjoint and inside the 8 memory slices
        used = set()
        for inst in insts:
            slots = set(range(inst["start"], inst["start"] + inst["size"]))
            assert not used & slots and max(slots) < 8
            used |= slots
        assert {i["profile"]: i["size"] for i in insts} == {"1g.10gb": 1, "2g.20gb": 2, "3g.40gb": 4}
    all_uuids = [i["uuid"] for g in doc["gpus"] for i in g["instances"]]
    assert len(all_uuids) == len(set(all_uuids)) == 16
    assert instances(doc, 4) == [] and instances(doc, 5) == []


def test_show_table(sim):
    sim("mig", "apply", "-c", "all-3g.40gb")
    out = sim("mig", "show").stdout
    assert "GPU 0  NVIDIA H100 80GB HBM3  MIG enabled" in out
    assert "GPU 4  NVIDIA L4  MIG not supported" in out
    assert "3g.40gb      placement 0:4  MIG-" in out
    assert "3g.40gb      placement 4:4  MIG-" in out


def test_plan_prints_steps_and_changes_nothing(sim):
    before = show(sim)
    p = sim("mig", "plan", "-c", "all-balanced")
    out = p.stdout
    assert out.count("8 step(s), 0 instance(s) kept") == 4
    assert "create GPU instance 3g.40gb at" in out
    assert "create GPU instance 2g.20gb at" in out
    assert out.count("create GPU instance 1g.10gb at") == 8
    assert out.count("create its compute instance") == 16
    assert "GPU 4 (NVIDIA L4)" not in out  # built-ins select MIG-capable GPUs only
    assert out.rstrip().endswith("32 step(s) in total")
    assert show(sim) == before

    sim("mig", "apply", "-c", "all-balanced")
    before = show(sim)
    # all-1g.10gb keeps the two 1g instances of every GPU
    out = sim("mig", "plan", "-c", "all-1g.10gb").stdout
    assert out.count("14 step(s), 2 instance(s) kept") == 4
    assert out.count("destroy compute instance") == 8
    assert out.count("destroy GPU instance") == 8
    assert "56 step(s) in total" in out
    # a plan through a mode change
    out = sim("mig", "plan", "-c", "all-disabled").stdout
    assert "set MIG mode disabled" in out
    assert out.count("9 step(s)") == 4  # 4 x (CI + GI) + the mode
    # already right
    out = sim("mig", "plan", "-c", "all-balanced").stdout
    assert out.count("already as the layout says") == 4
    assert "0 step(s) in total" in out
    assert show(sim) == before


def test_apply_keeps_matching_instances(sim):
    sim("mig", "apply", "-c", "all-balanced")
    before = show(sim)
    p = sim("mig", "apply", "-c", "all-1g.10gb")
    assert "applied all-1g.10gb: 56 step(s) (40 created, 16 destroyed, 0 mode change(s)), 8 instance(s) kept" \
        in p.stdout
    after = show(sim)
    for gpu in range(4):
        assert profile_counts(after, gpu) == {"1g.10gb": 7}
        old, new = uuids_by_placement(before, gpu), uuids_by_placement(after, gpu)
        common = set(old) & set(new)
        assert len(common) == 2
        for key in common:
            assert old[key] == new[key]
        assert not (set(old.values()) - {old[k] for k in common}) & set(new.values())
    # applying again is a no-op
    p = sim("mig", "apply", "-c", "all-1g.10gb")
    assert "applied all-1g.10gb: 0 step(s) (0 created, 0 destroyed, 0 mode change(s)), 28 instance(s) kept" \
        in p.stdout
    assert show(sim) == after


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_apply_lets_signals_wait(tmp_path, sig):
    """A signal during an apply does not leave the layout half applied: the apply finishes (every
    GPU as the layout says), then the command exits with 128 + the signal and says why."""
    state = str(tmp_path / "state")
    env = dict(os.environ, GPUSLICE_SIM_MIG_DELAY_MS="40")  # each create takes 40 ms, as on a driver
    p = subprocess.Popen([GPUSLICE, "--sim", NODE, "--sim-state", state, "mig", "apply", "-c", "all-1g.10gb"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    time.sleep(0.6)  # 56 calls x 40 ms: about 2.2 s in all
    assert p.poll() is None, "the apply ended before the signal"
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 128 + sig, err
    assert "applied all-1g.10gb: 56 step(s) (56 created" in out
    assert f"{signal.strsignal(sig)} came while the apply ran; it was let finish first" in err
    doc = json.loads(run("--sim", NODE, "--sim-state", state, "mig", "show", "--json", check=0).stdout)
    for gpu in range(4):
        assert profile_counts(doc, gpu) == {"1g.10gb": 7}


def test_sim_mig_delay_is_validated(tmp_path):
    state = str(tmp_path / "state")
    env = dict(os.environ, GPUSLICE_SIM_MIG_DELAY_MS="soon")
    p = subprocess.run([GPUSLICE, "--sim", NODE, "--sim-state", state, "mig", "show"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert p.returncode == 0
    assert "GPUSLICE_SIM_MIG_DELAY_MS: 'soon' is not a number of milliseconds up to 10000: ignored" in p.stderr


def test_export_round_trip_is_a_no_op(sim, tmp_path):
    sim("mig", "apply", "-c", "all-balanced")
    exported = sim("mig", "export").stdout
    doc = yaml.safe_load(exported)
    assert doc["version"] == "v1"
    items = doc["mig-configs"]["current"]
    assert [it["devices"] for it in items] == [[0], [1], [2], [3]]  # the L4s are not MIG-capable
    for it in items:
        assert it["mig-enabled"] is True
        assert it["mig-devices"] == BALANCED_H100
    path = tmp_path / "exported.yaml"
    path.write_text(exported)
    before = show(sim)
    p = sim("mig", "apply", "-f", str(path), "-c", "current")
    assert "applied current: 0 step(s)" in p.stdout
    assert show(sim) == before
    # Change the node, then apply the export: back to the exported layout, with the instances the
    # two layouts share kept.
    sim("mig", "apply", "-c", "all-1g.10gb")
    middle = show(sim)
    p = sim("mig", "apply", "-f", str(path), "-c", "current")
    after = show(sim)
    for gpu in range(4):
        assert profile_counts(after, gpu) == BALANCED_H100
        old, new = uuids_by_placement(middle, gpu), uuids_by_placement(after, gpu)
        for key in set(old) & set(new):
            assert old[key] == new[key]
    # export of a node with MIG disabled on some GPUs
    sim("mig", "apply", "-f", str(path), "-c", "current")
    node = node_file(tmp_path, "gpus:\n  - model: H100-SXM5-80GB\n    mig: enabled\n"
                               "  - model: H100-SXM5-80GB\n  - model: T4\n")
    sim("mig", "apply", "-c", "all-3g.40gb", node=node)
    exported = sim("mig", "export", node=node).stdout
    items = yaml.safe_load(exported)["mig-configs"]["current"]
    assert items == [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        {"devices": [1], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
    ]
    sim("mig", "apply", "-c", "all-disabled", node=node)
    items = yaml.safe_load(sim("mig", "export", node=node).stdout)["mig-configs"]["current"]
    assert items == [{"devices": [0], "mig-enabled": False}, {"devices": [1], "mig-enabled": False}]
    path.write_text(sim("mig", "export", node=node).stdout)
    p = sim("mig", "apply", "-f", str(path), "-c", "current", node=node)
    assert "applied current: 0 step(s)" in p.stdout
    # a node without any MIG-capable GPU exports one all-disabled item
    t4 = node_file(tmp_path, "gpus:\n  - model: T4\n    count: 2\n", "t4.yaml")
    items = yaml.safe_load(sim("mig", "export", node=t4).stdout)["mig-configs"]["current"]
    assert items == [{"devices": "all", "mig-enabled": False}]


H100_ONLY = "gpus:\n  - model: H100-SXM5-80GB\n    count: 8\n    mig: enabled\n"


def example_or_own(tmp_path, name, own):
    path = os.path.join(EXAMPLES, name)
    if os.path.exists(path):
        return path
    return node_file(tmp_path, own, name)


OWN_H100_LAYOUTS = """version: v1
mig-configs:
  all-balanced:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "2g.20gb": 1
        "3g.40gb": 1
  custom-mixed:
    - devices: [0, 1, 2, 3]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
    - devices: [4, 5]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
    - devices: [6]
      mig-enabled: true
      mig-devices:
        "3g.40gb": 1
        "1g.20gb": 2
    - devices: [7]
      mig-enabled: false
"""


def test_apply_layout_file(sim, tmp_path):
    node = node_file(tmp_path, H100_ONLY)
    layouts = example_or_own(tmp_path, "h100.yaml", OWN_H100_LAYOUTS)
    p = sim("mig", "apply", "-f", layouts, "-c", "custom-mixed", node=node)
    assert "applied custom-mixed" in p.stdout
    doc = show(sim, node=node)
    for gpu in range(4):
        assert profile_counts(doc, gpu) == {"1g.10gb": 7}
    assert profile_counts(doc, 4) == profile_counts(doc, 5) == {"3g.40gb": 2}
    assert profile_counts(doc, 6) == {"3g.40gb": 1, "1g.20gb": 2}
    assert doc["gpus"][7]["current"] == "disabled" and doc["gpus"][7]["pending"] == "disabled"
    assert instances(doc, 7) == []
    # the file's config of a built-in name is the file's
    sim("mig", "apply", "-f", layouts, "-c", "all-balanced", node=node)
    doc = show(sim, node=node)
    assert all(profile_counts(doc, gpu) == BALANCED_H100 for gpu in range(8))
    # a config name the file lacks falls back to the built-in
    sim("mig", "apply", "-f", layouts, "-c", "all-7g.80gb", node=node)
    doc = show(sim, node=node)
    assert all(profile_counts(doc, gpu) == {"7g.80gb": 1} for gpu in range(8))


def test_apply_device_filter_and_subsets(sim, tmp_path):
    layouts = node_file(tmp_path, """version: v1
mig-configs:
  by-model:
    - device-filter: ["0x20B010DE"]     # A100-40GB
      devices: all
      mig-enabled: true
      mig-devices: {"3g.20gb": 2}
    - device-filter: ["0x20B710DE"]     # A30
      devices: all
      mig-enabled: true
      mig-devices: {"1g.6gb": 4}
  second-only:
    - devices: [1]
      mig-enabled: true
      mig-devices: {"7g.40gb": 1}
  last-wins:
    - device-filter: ["0x20B010DE"]
      devices: all
      mig-enabled: true
      mig-devices: {"1g.5gb": 7}
    - devices: [1]
      mig-enabled: true
      mig-devices: {"4g.20gb": 1}
""", "layouts.yaml")
    sim("mig", "apply", "-f", layouts, "-c", "by-model", node=AMPERE)
    doc = show(sim, node=AMPERE)
    assert profile_counts(doc, 0) == profile_counts(doc, 1) == {"3g.20gb": 2}
    assert doc["gpus"][2]["current"] == "disabled" and doc["gpus"][2]["pending"] == "disabled"  # not selected
    assert profile_counts(doc, 3) == {"1g.6gb": 4}
    before = show(sim, node=AMPERE)
    sim("mig", "apply", "-f", layouts, "-c", "second-only", node=AMPERE)
    after = show(sim, node=AMPERE)
    assert profile_counts(after, 1) == {"7g.40gb": 1}
    for gpu in (0, 2, 3):
        assert after["gpus"][gpu] == before["gpus"][gpu]
    # both items match GPU 1: the last one wins (mig-parted applies them in order)
    sim("mig", "apply", "-f", layouts, "-c", "last-wins", node=AMPERE)
    doc = show(sim, node=AMPERE)
    assert profile_counts(doc, 0) == {"1g.5gb": 7}
    assert profile_counts(doc, 1) == {"4g.20gb": 1}
    assert doc["gpus"][3] == after["gpus"][3]


def test_layout_file_on_mixed_node_skips_non_mig_gpus(sim, tmp_path):
    layouts = example_or_own(tmp_path, "h100.yaml", OWN_H100_LAYOUTS)
    sim("mig", "plan", "-f", layouts, "-c", "all-balanced")
    sim("mig", "apply", "-f", layouts, "-c", "all-balanced")
    doc = show(sim)
    assert all(profile_counts(doc, gpu) == BALANCED_H100 for gpu in range(4))


def test_process_on_gpu_blocks_mode_change_before_any_change(sim, tmp_path):
    node = node_file(tmp_path, "gpus:\n  - model: H100-SXM5-80GB\n    count: 2\n")
    sim("sim", "process", "add", "--gpu", "1", "--pid", "999", "--mem", "1GiB", node=node)
    before = show(sim, node=node)
    p = sim("mig", "apply", "-c", "all-balanced", node=node, check=1)
    assert "999" in p.stderr
    assert show(sim, node=node) == before


def test_export_round_trip_media_and_double_memory_profiles(sim, tmp_path):
    node = node_file(tmp_path, "gpus:\n  - model: H100-SXM5-80GB\n    mig: enabled\n"
                               "  - model: A30\n    mig: enabled\n")
    layouts = node_file(tmp_path, """version: v1
mig-configs:
  media:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"1g.10gb+me": 1, "1g.20gb": 2, "2g.20gb": 1}
    - devices: [1]
      mig-enabled: true
      mig-devices: {"1g.6gb+me": 1, "1g.6gb": 1, "2g.12gb+me": 1}
""", "layouts.yaml")
    p = sim("mig", "apply", "-f", layouts, "-c", "media", node=node)
    assert "applied media: 14 step(s) (14 created" in p.stdout
    doc = show(sim, node=node)
    assert profile_counts(doc, 0) == {"1g.10gb+me": 1, "1g.20gb": 2, "2g.20gb": 1}
    assert profile_counts(doc, 1) == {"1g.6gb+me": 1, "1g.6gb": 1, "2g.12gb+me": 1}
    exported = tmp_path / "exported.yaml"
    exported.write_text(sim("mig", "export", node=node).stdout)
    items = yaml.safe_load(exported.read_text())["mig-configs"]["current"]
    assert items[0]["mig-devices"] == {"1g.10gb+me": 1, "1g.20gb": 2, "2g.20gb": 1}
    assert items[1]["mig-devices"] == {"1g.6gb+me": 1, "1g.6gb": 1, "2g.12gb+me": 1}
    out = sim("mig", "plan", "-f", str(exported), "-c", "current", node=node).stdout
    assert out.count("already as the layout says") == 2
    p = sim("mig", "apply", "-f", str(exported), "-c", "current", node=node)
    assert "applied current: 0 step(s)" in p.stdout and "7 instance(s) kept" in p.stdout
    assert show(sim, node=node) == doc


def test_in_use_and_force(sim):
    sim("mig", "apply", "-c", "all-balanced")
    doc = show(sim)
    big = next(i for i in instances(doc, 0) if i["profile"] == "3g.40gb")
    sim("sim", "process", "add", "--gpu", "0", "--gi", str(big["gi_id"]), "--pid", "4242", "--mem", "1GiB")
    before = show(sim)
    out = sim("mig", "plan", "-c", "all-1g.10gb").stdout
    assert "in use by process(es): 4242 (apply refuses unless --force)" in out
    p = sim("mig", "apply", "-c", "all-1g.10gb", check=1)
    assert "GPU 0 (NVIDIA H100 80GB HBM3): the layout destroys MIG instances in use by process(es) 4242" in p.stderr
    assert "--force" in p.stderr
    assert "0 step(s) were done before that" in p.stderr
    assert show(sim) == before  # nothing changed, on any GPU
    # --force: the driver refuses to destroy an instance with a process; the failing step is named
    p = sim("mig", "apply", "-c", "all-1g.10gb", "--force", check=1)
    assert "GPU 0: destroy-ci 3g.40gb failed:" in p.stderr
    assert "In use" in p.stderr
    assert "running the apply again continues" in p.stderr
    doc = show(sim)
    assert uuids_by_placement(doc, 0)[("3g.40gb", big["start"])] == big["uuid"]
    # the process ends: the apply converges
    sim("sim", "process", "remove", "--pid", "4242")
    sim("mig", "apply", "-c", "all-1g.10gb")
    doc = show(sim)
    assert all(profile_counts(doc, gpu) == {"1g.10gb": 7} for gpu in range(4))


def test_ampere_needs_reset(sim):
    p = sim("mig", "apply", "-c", "all-balanced", node=AMPERE, check=1)
    assert "GPU 2 (NVIDIA A100-SXM4-80GB): MIG mode is pending enable" in p.stderr
    assert "sim reset-gpu 2" in p.stderr
    doc = show(sim, node=AMPERE)
    assert doc["gpus"][2]["current"] == "disabled" and doc["gpus"][2]["pending"] == "enabled"
    assert "pending enable: needs a GPU reset" in sim("mig", "show", node=AMPERE).stdout
    assert "MIG mode change pending: needs a GPU reset" in sim("mig", "plan", "-c", "all-balanced",
                                                                node=AMPERE).stdout
    sim("sim", "reset-gpu", "2", node=AMPERE)
    sim("mig", "apply", "-c", "all-balanced", node=AMPERE)
    doc = show(sim, node=AMPERE)
    assert profile_counts(doc, 0) == {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
    assert profile_counts(doc, 2) == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    assert profile_counts(doc, 3) == {"1g.6gb": 2, "2g.12gb": 1}


def test_layout_file_errors_change_nothing(sim, tmp_path):
    sim("mig", "apply", "-c", "all-balanced")
    before = show(sim)
    layouts = node_file(tmp_path, """version: v1
mig-configs:
  wrong-model:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7
  too-big:
    - devices: all
      mig-enabled: true
      mig-devices: {"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 1}
""", "layouts.yaml")
    p = sim("mig", "apply", "-f", layouts, "-c", "wrong-model", check=1)
    # FILE:LINE (the item's line or the profile's line, with or without a column)
    assert re.search(re.escape(layouts) + r":[47](:\d+)?: mig-configs\.wrong-model: GPU 0 \(NVIDIA H100 80GB HBM3\) "
                     r"has no MIG profile 1g\.5gb; it has 1g\.10gb, ", p.stderr), p.stderr
    p = sim("mig", "plan", "-f", layouts, "-c", "wrong-model", check=1)
    assert "has no MIG profile 1g.5gb" in p.stderr
    p = sim("mig", "apply", "-f", layouts, "-c", "too-big", check=1)
    assert "4g.40gb + 3g.40gb + 1g.10gb needs 9 memory slices, the GPU has 8" in p.stderr
    p = sim("mig", "apply", "-f", layouts, "-c", "nope", check=1)
    assert "no MIG config 'nope'" in p.stderr
    # a file that does not parse: FILE:LINE:COLUMN
    bad = node_file(tmp_path, "version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: maybe\n",
                    "bad.yaml")
    p = sim("mig", "apply", "-f", bad, "-c", "x", check=1)
    assert p.stderr.startswith(f"gpuslice mig: {bad}:5:")
    p = sim("mig", "apply", "-f", str(tmp_path / "missing.yaml"), "-c", "x", check=1)
    assert "missing.yaml" in p.stderr
    assert show(sim) == before


def test_usage_and_exit_codes(sim):
    p = sim("mig", check=2)
    assert "Usage: gpuslice [GLOBAL OPTIONS] mig COMMAND" in p.stderr
    p = sim("mig", "--help", check=0)
    assert "apply [-f FILE] -c NAME [--force]" in p.stdout
    for sub in ("plan", "apply"):
        p = sim("mig", sub, check=2)
        assert f"gpuslice mig {sub}: -c NAME is required" in p.stderr
        p = sim("mig", sub, "-f", "x.yaml", check=2)
        assert "-c NAME is required" in p.stderr
    p = sim("mig", "explode", check=2)
    assert "unknown command 'explode'" in p.stderr
    p = sim("mig", "show", "extra", check=2)
    assert "unexpected argument 'extra'" in p.stderr
    sim("mig", "apply", "-c", "all-balanced", "--bogus", check=2)
    sim("mig", "apply", "-c", check=2)
    p = sim("mig", "apply", "-c", "balanced", check=1)
    assert "no MIG config 'balanced'" in p.stderr
    p = sim("mig", "apply", "-c", "all-1g.5gb", check=1)  # MIG on: the name is checked first
    assert "has no MIG profile 1g.5gb" in p.stderr
    assert all(g["instances"] == [] for g in show(sim)["gpus"])
    sim("mig", "apply", "-c", "all-balanced", check=0)


def test_h200_board_round_trip(sim, tmp_path):
    layouts = example_or_own(tmp_path, "h200.yaml", """version: v1
mig-configs:
  all-balanced:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}
""")
    sim("mig", "apply", "-f", layouts, "-c", "all-balanced", node=H200)
    doc = show(sim, node=H200)
    assert all(profile_counts(doc, gpu) == {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1} for gpu in range(8))
    path = tmp_path / "current.yaml"
    path.write_text(sim("mig", "export", node=H200).stdout)
    p = sim("mig", "apply", "-f", str(path), "-c", "current", node=H200)
    assert "0 step(s)" in p.stdout and "32 instance(s) kept" in p.stdout
    assert show(sim, node=H200) == doc


def test_layout_for_gpu_with_mig_off_checked_before_any_change(sim, tmp_path):
    """MIG off: profiles cannot be read from the driver yet, so the layout is checked against the
    catalogue's table for the model first; a layout that cannot work changes nothing."""
    node = node_file(tmp_path, "gpus:\n  - model: H100-SXM5-80GB\n")
    before = show(sim, node=node)
    p = sim("mig", "apply", "-c", "all-1g.5gb", node=node, check=1)
    assert "has no MIG profile 1g.5gb" in p.stderr
    assert show(sim, node=node) == before
    bad = tmp_path / "bad.yaml"
    bad.write_text('version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: true\n'
                   '      mig-devices: {"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 1}\n')
    p = sim("mig", "apply", "-f", str(bad), "-c", "x", node=node, check=1)
    assert "needs 9 memory slices, the GPU has 8" in p.stderr and "GPU 0" in p.stderr
    assert show(sim, node=node) == before
    sim("mig", "apply", "-f", str(bad).replace("bad.yaml", "bad.yaml"), "-c", "all-balanced", node=node)


def test_lost_gpu_is_not_skipped_silently(sim, tmp_path):
    node = node_file(tmp_path, "gpus:\n  - model: H100-SXM5-80GB\n    count: 2\n    mig: enabled\n")
    sim("sim", "gpu-lost", "1", node=node)
    p = sim("mig", "apply", "-c", "all-balanced", node=node, check=1)
    assert "GPU 1 cannot be read (lost)" in p.stderr
    assert "lost" in sim("mig", "show", node=node).stdout


def test_plan_disable_has_no_follow_up_line(sim, tmp_path):
    node = node_file(tmp_path, "gpus:\n  - model: H100-SXM5-80GB\n    mig: enabled\n")
    out = sim("mig", "plan", "-c", "all-disabled", node=node).stdout
    assert "set MIG mode disabled" in out and "then: plan the instances" not in out


def sim_env(state, env_extra, *args, node=NODE):
    env = dict(os.environ, **env_extra)
    return subprocess.run([GPUSLICE, "--log-level", "warn", "--sim", node, "--sim-state", state, *args],
                          capture_output=True, text=True, env=env, timeout=60)


def test_fault_schedule_fails_a_create_and_the_next_apply_converges(sim, tmp_path):
    """GPUSLICE_SIM_FAULTS makes the driver refuse the 2nd GPU instance of an apply: the apply fails
    naming the step and the NVML error, the instance made before stays with its UUID, and the next
    apply (no fault) converges."""
    state = str(tmp_path / "state")
    p = sim_env(state, {"GPUSLICE_SIM_FAULTS": "nvmlDeviceCreateGpuInstanceWithPlacement:2:NVML_ERROR_INSUFFICIENT_RESOURCES"},
                "mig", "apply", "-c", "all-balanced")
    assert p.returncode == 1, p.stderr
    assert "GPU 0: create-gi " in p.stderr and "Insufficient Resources" in p.stderr
    assert "call 2 of nvmlDeviceCreateGpuInstanceWithPlacement fails with NVML_ERROR_INSUFFICIENT_RESOURCES" in p.stderr
    assert "running the apply again continues" in p.stderr
    doc = show(sim)
    made = [(gpu, i) for gpu in range(6) for i in instances(doc, gpu)]
    assert len(made) == 1 and made[0][0] == 0
    first = made[0][1]
    sim("mig", "apply", "-c", "all-balanced")
    doc = show(sim)
    assert all(profile_counts(doc, gpu) == BALANCED_H100 for gpu in range(4))
    assert uuids_by_placement(doc, 0)[(first["profile"], first["start"])] == first["uuid"]


def test_fault_schedule_is_parsed_strictly(tmp_path):
    state = str(tmp_path / "state")
    p = sim_env(state, {"GPUSLICE_SIM_FAULTS": "nvmlDeviceGetName:1:NVML_ERROR_UNKNOWN,nvmlDeviceGetName:soon:NVML_ERROR_UNKNOWN"},
                "mig", "show")
    assert p.returncode != 0
    assert "GPUSLICE_SIM_FAULTS: entry 2 'nvmlDeviceGetName:soon:NVML_ERROR_UNKNOWN': call: expected a call number" \
        in p.stderr
    # a lost GPU from the first memory query on: inspect reports it instead of failing whole
    p = sim_env(state, {"GPUSLICE_SIM_FAULTS": "nvmlDeviceGetMemoryInfo:1+:NVML_ERROR_GPU_IS_LOST"}, "inspect", "--json")
    assert p.returncode == 0, p.stderr
    gpus = json.loads(p.stdout)["gpus"]
    assert len(gpus) == 6 and all(g["health"] == "lost" for g in gpus), gpus[0]


def podresources(tmp_path, assignments):
    from podresources_emulator import PodResourcesEmulator
    pr = PodResourcesEmulator(str(tmp_path / "pr.sock")).start()
    pr.set(assignments)
    return pr


def test_device_a_pod_holds_is_in_use(sim, tmp_path):
    """A MIG device the kubelet has assigned to a pod (PodResources) with no process on it: apply
    refuses a layout that destroys it, naming the pod and the device, changes nothing on any GPU,
    and --force destroys it."""
    sim("mig", "apply", "-c", "all-balanced", "--pod-resources-socket", str(tmp_path / "none.sock"))
    big = next(i for i in instances(show(sim), 0) if i["profile"] == "3g.40gb")
    small = next(i for i in instances(show(sim), 1) if i["profile"] == "1g.10gb")
    pr = podresources(tmp_path, [
        ("team-a", "train-0", "main", "nvidia.com/mig-3g.40gb", [big["uuid"]]),
        ("team-b", "infer-0", "main", "nvidia.com/mig-1g.10gb", [small["uuid"]]),  # kept by all-1g.10gb
    ])
    sock = ["--pod-resources-socket", pr.socket_path]
    try:
        before = show(sim)
        out = sim("mig", "plan", "-c", "all-1g.10gb", *sock).stdout
        held = f"{big['uuid']} (GI {big['gi_id']}, 3g.40gb) to team-a/train-0, container main"
        assert f"assigned to pods: {held} (apply refuses unless --force)" in out, out
        assert small["uuid"] not in out
        p = sim("mig", "apply", "-c", "all-1g.10gb", *sock, check=1)
        assert ("GPU 0 (NVIDIA H100 80GB HBM3): the layout destroys what the kubelet has assigned to pods: "
                f"{held}; end those pods or use --force") in p.stderr, p.stderr
        assert "0 step(s) were done before that" in p.stderr
        assert show(sim) == before  # nothing changed, on any GPU
        calls = pr.calls
        p = sim("mig", "apply", "-c", "all-1g.10gb", "--force", *sock)
        assert pr.calls > calls
        doc = show(sim)
        assert all(profile_counts(doc, gpu) == {"1g.10gb": 7} for gpu in range(4))
        assert big["uuid"] not in {i["uuid"] for i in instances(doc, 0)}
        assert small["uuid"] in {i["uuid"] for i in instances(doc, 1)}
    finally:
        pr.stop()


def test_pod_resources_absent_or_not_answering(sim, tmp_path):
    """No socket: no kubelet on this node, said on stderr, and the apply goes on. A socket that does
    not answer, or answers with an error: nothing is changed, unless --force."""
    import socket
    p = sim("mig", "apply", "-c", "all-balanced", "--pod-resources-socket", str(tmp_path / "none.sock"))
    assert f"no kubelet on this node (no PodResources socket {tmp_path / 'none.sock'})" in p.stderr
    before = show(sim)
    stale = str(tmp_path / "stale.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(stale)
    s.close()  # the path stays, nobody listens
    p = sim("mig", "apply", "-c", "all-1g.10gb", "--pod-resources-socket", stale, check=1)
    assert f"cannot ask the kubelet which pods hold which devices (PodResources {stale})" in p.stderr, p.stderr
    assert "nothing is changed (--force goes on without it)" in p.stderr
    assert show(sim) == before
    pr = podresources(tmp_path, [])
    pr.status = __import__("grpc").StatusCode.RESOURCE_EXHAUSTED
    try:
        p = sim("mig", "apply", "-c", "all-1g.10gb", "--pod-resources-socket", pr.socket_path, check=1)
        assert "rejected by rate limit" in p.stderr
        assert show(sim) == before
        # plan changes nothing: it says so and goes on
        p = sim("mig", "plan", "-c", "all-1g.10gb", "--pod-resources-socket", pr.socket_path)
        assert "going on without it" in p.stderr and "step(s) in total" in p.stdout
    finally:
        pr.stop()
    p = sim("mig", "apply", "-c", "all-1g.10gb", "--force", "--pod-resources-socket", stale)
    assert "going on without it" in p.stderr
    assert all(profile_counts(show(sim), gpu) == {"1g.10gb": 7} for gpu in range(4))


def test_reset_pending_gpu_does_not_stop_the_others(sim, tmp_path):
    """A GPU whose MIG mode waits for a reset (Ampere) is left as it is; the other GPUs are
    partitioned, and apply names every GPU that needs a reset and exits 1."""
    none = ["--pod-resources-socket", str(tmp_path / "none.sock")]
    # GPU 2 (A100-80GB, MIG off) pending enable before the layout is applied
    p = sim("mig", "apply", "-c", "all-enabled", *none, node=AMPERE, check=1)
    assert "GPU 2 (NVIDIA A100-SXM4-80GB): MIG mode is pending enable" in p.stderr
    p = sim("mig", "apply", "-c", "all-balanced", *none, node=AMPERE, check=1)
    doc = show(sim, node=AMPERE)
    assert profile_counts(doc, 0) == {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
    assert profile_counts(doc, 1) == {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
    assert profile_counts(doc, 3) == {"1g.6gb": 2, "2g.12gb": 1}
    assert doc["gpus"][2]["pending"] == "enabled" and not instances(doc, 2)
    assert "applied all-balanced to the other GPUs:" in p.stdout
    assert "1 GPU(s) need a GPU reset before their layout: GPU 2 (NVIDIA A100-SXM4-80GB)" in p.stderr, p.stderr
    assert "sim reset-gpu 2); then run the apply again" in p.stderr
    # two GPUs that need a reset: both named
    node = node_file(tmp_path, "gpus:\n  - model: A100-SXM4-40GB\n    mig: enabled\n"
                               "  - model: A100-SXM4-80GB\n    count: 2\n    mig: disabled\n")
    p = sim("mig", "apply", "-c", "all-balanced", *none, node=node, check=1)
    assert "2 GPU(s) need a GPU reset before their layout: GPU 1 (NVIDIA A100-SXM4-80GB)" in p.stderr, p.stderr
    assert "sim reset-gpu 1); GPU 2 (NVIDIA A100-SXM4-80GB): MIG mode is pending enable" in p.stderr
    assert profile_counts(show(sim, node=node), 0) == {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
    for gpu in (1, 2):
        sim("sim", "reset-gpu", str(gpu), node=node)
    p = sim("mig", "apply", "-c", "all-balanced", *none, node=node)
    doc = show(sim, node=node)
    assert all(profile_counts(doc, gpu) == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1} for gpu in (1, 2))


def test_unknown_config_name_says_so(sim, tmp_path):
    """A misspelt config is an unknown config (it was 'has no MIG profile balancd'), with the known
    names and the closest one; nothing changes."""
    before = show(sim)
    for sub in ("apply", "plan"):
        p = sim("mig", sub, "-c", "all-balancd", check=1)
        assert p.stderr == ("gpuslice mig: no MIG config 'all-balancd' (no layout file given, -f FILE; built-in: "
                            "all-disabled, all-enabled, all-balanced, all-<profile>); did you mean 'all-balanced'?\n"), \
            p.stderr
        assert "has no MIG profile" not in p.stderr
    layouts = node_file(tmp_path, """version: v1
mig-configs:
  inference-small:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  training:
    - devices: all
      mig-enabled: false
""", "layouts.yaml")
    p = sim("mig", "apply", "-f", layouts, "-c", "inference-smal", check=1)
    assert p.stderr == (f"gpuslice mig: no MIG config 'inference-smal' in {layouts} (its configs: inference-small, "
                        "training; built-in: all-disabled, all-enabled, all-balanced, all-<profile>); did you mean "
                        "'inference-small'?\n"), p.stderr
    p = sim("mig", "apply", "-f", layouts, "-c", "zzz", check=1)
    assert p.stderr.startswith(f"gpuslice mig: no MIG config 'zzz' in {layouts}") and "did you mean" not in p.stderr
    # a real profile name still works as a built-in, and a profile the GPU lacks still says so
    sim("mig", "plan", "-c", "all-1g.10gb")
    p = sim("mig", "plan", "-c", "all-1g.5gb", check=1)
    assert "has no MIG profile 1g.5gb" in p.stderr
    assert show(sim) == before


def test_layout_naming_missing_gpu_is_an_error(sim, tmp_path):
    """devices: [.., 9] on a 6-GPU node: FILE:LINE:COLUMN of the index, nothing changes (it was
    accepted, and GPU 9 silently skipped)."""
    before = show(sim)
    layouts = node_file(tmp_path, """version: v1
mig-configs:
  custom:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
    - devices: [2, 9, 3]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
""", "layouts.yaml")
    for sub in ("plan", "apply"):
        p = sim("mig", sub, "-f", layouts, "-c", "custom", check=1)
        assert (f"{layouts}:7:20: mig-configs.custom[1].devices[1]: GPU 9 is not on this node (it has 6 GPUs: 0-5)"
                in p.stderr), p.stderr
    assert show(sim) == before


def test_layout_file_that_is_a_fifo_is_refused_clearly(tmp_path):
    """A FIFO given as the layout file is refused at once and named as a FIFO (it said only
    'Invalid argument'); nothing waits on it."""
    fifo = tmp_path / "layouts.yaml"
    os.mkfifo(fifo)
    p = subprocess.run([GPUSLICE, "--sim", NODE, "--sim-state", str(tmp_path / "s"), "mig", "plan", "-f", str(fifo),
                        "-c", "x"], capture_output=True, text=True, timeout=20)
    assert p.returncode == 1 and f"{fifo}: a FIFO, not a regular file" in p.stderr, p.stderr
