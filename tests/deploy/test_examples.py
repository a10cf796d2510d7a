"""Tests of examples/workloads/: one folder per sharing mode, each with a policy.yaml and the
workload YAML that uses it.

Each policy is given to the real `gpuslice apply` on the simulated node its comment names (after
the MIG layout the policy asks the agent for, where it asks for one); every extended resource the
workload requests must be among the resources apply prints (--json), and every nvidia.com/ label
of its nodeSelector among the labels the agent would publish (--labels). The workloads are checked
against the Kubernetes API types (k8s_schema.py).

Environment (set by meson): GPUSLICE, GS_SOURCE_ROOT."""
import json
import os
import re
import subprocess
import tempfile

import pytest
import yaml

import k8s_schema

ROOT = os.environ.get("GS_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUSLICE = os.environ.get("GPUSLICE") or os.path.join(ROOT, "build", "gpuslice")
WORKLOADS = os.path.join(ROOT, "examples", "workloads")
MODES = ["whole", "time-slicing", "mig", "mps"]

# What each mode's policy must make the node advertise (mode as `apply --json` names it) and the
# resource its workload asks for.
EXPECTED = {
    "whole": ("whole", "nvidia.com/gpu"),
    "time-slicing": ("time-slicing", "nvidia.com/gpu.shared"),
    "mig": ("mig", "nvidia.com/mig-1g.10gb"),
    "mps": ("mps", "nvidia.com/gpu.shared"),
}


def _load(path):
    with open(path) as f:
        return f.read()


def workload(mode):
    files = [f for f in sorted(os.listdir(os.path.join(WORKLOADS, mode))) if f != "policy.yaml"]
    assert len(files) == 1, f"{mode}: one workload file besides policy.yaml, found {files}"
    with open(os.path.join(WORKLOADS, mode, files[0])) as f:
        return yaml.safe_load(f)


def pod_spec(obj):
    return obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]


def requested(obj):
    out = set()
    for c in pod_spec(obj)["containers"] + pod_spec(obj).get("initContainers", []):
        for section in ("limits", "requests"):
            out |= {r for r in c.get("resources", {}).get(section, {}) if "/" in r}
    return out


def try_it(mode):
    """The commands of the policy's `# Try it:` comment, as argument lists."""
    cmds = []
    for line in _load(os.path.join(WORKLOADS, mode, "policy.yaml")).splitlines():
        m = re.match(r"#\s+(?:Try it:\s+)?(gpuslice .*)$", line)
        if m:
            cmds.append(m.group(1).split()[1:])
    assert cmds, f"{mode}/policy.yaml has no '# Try it: gpuslice ...' comment"
    return cmds


class SimNode:
    def __init__(self, node, state):
        self.node, self.state = node, state

    def run(self, *args):
        p = subprocess.run([GPUSLICE, "--sim", self.node, "--sim-state", self.state, *args],
                           capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert p.returncode == 0, f"gpuslice {' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
        return p.stdout


def setup_node(mode, state):
    """Runs the policy's Try-it commands but the last (MIG layouts); returns the node and the
    policy path of the last one, which must be `apply --config POLICY`."""
    cmds = try_it(mode)
    node = None
    for cmd in cmds:
        assert cmd[0] == "--sim", cmd
        if node is None:
            node = SimNode(os.path.join(ROOT, cmd[1]), state)
        assert os.path.join(ROOT, cmd[1]) == node.node, "one node per example"
    last = cmds[-1][2:]
    assert last[:2] == ["apply", "--config"] and last[2] == f"examples/workloads/{mode}/policy.yaml", last
    for cmd in cmds[:-1]:
        node.run(*cmd[2:])
    return node, os.path.join(ROOT, last[2])


def test_one_folder_per_mode():
    assert sorted(d for d in os.listdir(WORKLOADS) if os.path.isdir(os.path.join(WORKLOADS, d))) == sorted(MODES)


@pytest.mark.parametrize("mode", MODES)
def test_workload_is_valid_kubernetes(mode):
    obj = workload(mode)
    assert obj["kind"] in ("Pod", "Deployment")
    assert k8s_schema.validate(obj) == []
    assert requested(obj) == {EXPECTED[mode][1]}
    for c in pod_spec(obj)["containers"]:
        lim = c["resources"]["limits"]
        assert lim[EXPECTED[mode][1]] == 1, "extended resources are whole numbers, one device or replica"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod_spec(obj)["tolerations"]


@pytest.mark.parametrize("mode", MODES)
def test_policy_serves_the_workload(mode):
    want_mode, resource = EXPECTED[mode]
    with tempfile.TemporaryDirectory(prefix="gs-ex-") as state:
        node, policy = setup_node(mode, state)
        out = json.loads(node.run("apply", "--config", policy, "--json"))
        labels = dict(line.split("=", 1) for line in node.run("apply", "--config", policy, "--labels").splitlines())
    modes = {g["mode"] for g in out["gpus"]}
    assert want_mode in modes, f"{mode}: no GPU in mode {want_mode}: {out['gpus']}"
    names = {r["name"]: r for r in out["resources"]}
    obj = workload(mode)
    for r in requested(obj):
        assert r in names, f"{mode}: the workload asks for {r}; the node advertises {sorted(names)}"
        assert names[r]["devices"], r
    replicas = obj["spec"].get("replicas", 1) if obj["kind"] == "Deployment" else 1
    assert len(names[resource]["devices"]) >= replicas, f"{mode}: not enough {resource} for {replicas} pods"
    assert out["warnings"] == [], f"{mode}: {out['warnings']}"
    for key, value in (pod_spec(obj).get("nodeSelector") or {}).items():
        if key.startswith("nvidia.com/"):
            assert labels.get(key) == value, f"{mode}: nodeSelector {key}={value}; the agent labels {key}={labels.get(key)}"


def test_time_slicing_policy_has_a_vram_quota():
    text = _load(os.path.join(WORKLOADS, "time-slicing", "policy.yaml"))
    res = yaml.safe_load(text)["sharing"]["timeSlicing"]["resources"][0]
    assert res["memoryPerReplica"] == "auto"


def test_mps_root_matches_the_chart():
    with open(os.path.join(ROOT, "deploy", "helm", "gpuslice", "values.yaml")) as f:
        values = yaml.safe_load(f)
    policy = yaml.safe_load(_load(os.path.join(WORKLOADS, "mps", "policy.yaml")))
    assert policy["flags"]["mpsRoot"] == values["hostPaths"]["mpsRoot"]
