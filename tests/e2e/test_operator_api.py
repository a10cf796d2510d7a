"""gpuslice beside NVIDIA's MIG manager, with the real API server: `gpuslice doctor` with the
admin kubeconfig passes `api` on the e2e node; once the Node carries nvidia.com/mig.config (the
label NVIDIA's MIG manager acts on), the doctor fails `api.mig-manager` naming it, and the agent
(a host process with --kubeconfig, on a simulated MIG node whose policy has a layout) warns and,
under gpuslice.coexistence.otherMigManager: refuse, applies nothing: the Node's allocatable stays
without MIG devices and the MIG status says `refused`. The label removed, the agent applies the
layout (14 x 1g.10gb). The label is removed after the test whatever happens."""
import json
import os
import subprocess
import time

import pytest

from e2e import GPUSLICE, wait

LABEL = "nvidia.com/mig.config"
ONE = "nvidia.com/mig-1g.10gb"
H100X2 = "gpus:\n  - model: H100-SXM5-80GB\n    count: 2\n    mig: enabled\n"
POLICY = ("version: v1\nflags:\n  migStrategy: mixed\ngpuslice:\n  mig:\n    config: all-1g.10gb\n"
          "  coexistence:\n    otherMigManager: refuse\n")


@pytest.fixture
def mig_node(cluster):
    path = os.path.join(cluster.dir, "h100x2-migmgr.yaml")
    with open(path, "w") as f:
        f.write(H100X2)
    policy = os.path.join(cluster.dir, "migmgr-policy.yaml")
    with open(policy, "w") as f:
        f.write(POLICY)
    yield path, policy
    cluster.kubectl("label", "node", cluster.node_name, f"{LABEL}-", check=False)


def doctor_api(cluster, node, policy):
    p = subprocess.run([GPUSLICE, "--sim", node, "--sim-state", os.path.join(cluster.dir, "migmgr-doctor"), "doctor",
                        "--config", policy, "--kubeconfig", cluster.kubeconfig, "--node-name", cluster.node_name,
                        "--kubelet-dir", os.path.join(cluster.kubelet_dir, "device-plugins"), "--json"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode in (0, 1), p.stderr
    return {f["check"]: f for f in json.loads(p.stdout)["findings"] if f["check"].startswith("api")}


def status(a):
    try:
        with open(os.path.join(a.base, "mig-status.json")) as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def test_doctor_and_agent_beside_nvidias_mig_manager(cluster, agent, mig_node):
    node, policy = mig_node
    by = doctor_api(cluster, node, policy)
    assert [by[c]["status"] for c in ("api", "api.node", "api.mig-manager")] == ["ok"] * 3, by
    assert f"nodes/{cluster.node_name}" in by["api"]["message"]

    cluster.kubectl("label", "node", cluster.node_name, f"{LABEL}=all-balanced", "--overwrite")
    by = doctor_api(cluster, node, policy)
    f = by["api.mig-manager"]
    assert f["status"] == "fail" and f"{LABEL}=all-balanced" in f["message"], by
    assert "migManager.enabled=false" in f["fix"] and f"kubectl label node {cluster.node_name} {LABEL}-" in f["fix"]

    a = agent(node, POLICY, extra=["--kubeconfig", cluster.kubeconfig, "--node-name", cluster.node_name])
    got = wait(lambda: status(a).get("state") == "refused" and status(a), 60, "the MIG status 'refused'")
    assert f"{LABEL}=all-balanced" in got["reason"], got
    assert f"Node {cluster.node_name} carries {LABEL}=all-balanced" in a.log()
    assert "gpuslice applies no MIG layout while the label is there" in a.log()
    # several polls later, nothing applied: no MIG device reaches the Node
    time.sleep(2)
    assert not [d for g in json.loads(a.sim("inspect", "--json").stdout)["gpus"]
                for d in (g.get("mig") or {}).get("devices", [])]
    # (not the whole allocatable against a copy taken before: what an earlier test's agent served
    # leaves the Node's allocatable at the kubelet's pace, during this test)
    assert not [r for r in cluster.nonzero() if r.startswith("nvidia.com/mig-")], cluster.nonzero()
    assert a.alive()

    cluster.kubectl("label", "node", cluster.node_name, f"{LABEL}-")
    wait(lambda: cluster.nonzero().get(ONE) == 14, 120, f"{ONE}: 14 in the Node's allocatable")
    assert wait(lambda: status(a).get("state") == "applied", 30, "the MIG status 'applied'")
    assert f"Node {cluster.node_name} no longer carries {LABEL}: gpuslice applies its MIG layout" in a.log()
