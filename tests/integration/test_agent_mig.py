"""The agent's MIG layout changes and the kubelet's assignments: a MIG device the kubelet has
assigned to a pod (PodResources, emulated by podresources_emulator.py) counts as in use, as a
process on it does, though no process runs on it; `gpuslice.mig.force` overrides.

Environment (set by meson): GPUSLICE, GPUSLICE_SIM_LIB, GS_SOURCE_ROOT."""
import os
import signal
import time

import grpc

from podresources_emulator import PodResourcesEmulator
from test_agent import H100X2, _mig_policy, _status, h, ids  # noqa: F401 (h: fixture)

BIG = "nvidia.com/mig-3g.40gb"


def start(h, node, pr, status):
    return h.agent(node, _mig_policy("all-balanced"), resources=[BIG],
                   extra=["--mig-status-file", status, "--pod-resources-socket", pr.socket_path])


def reload(h, agent, policy):
    t = time.monotonic()
    h.write("policy.yaml", policy)
    agent.signal(signal.SIGHUP)
    return t


def big_device(node, gpu=0):
    return next(d for d in node.inspect()["gpus"][gpu]["mig"]["devices"] if d["profile"] == "3g.40gb")


def devices(node):
    return [g["mig"]["devices"] for g in node.inspect()["gpus"]]


def test_agent_keeps_a_device_a_pod_holds(h):
    node = h.node(H100X2)
    status = os.path.join(h.base, "mig-status.json")
    pr = PodResourcesEmulator(os.path.join(h.base, "pr.sock")).start()
    try:
        agent = start(h, node, pr, status)
        assert _status(status)["state"] == "applied"
        held = big_device(node)
        assert held["uuid"] in ids(h.latest(BIG))
        pr.set([("team-a", "train-0", "main", BIG, [held["uuid"]])])  # assigned; its process not started
        before = devices(node)
        t = reload(h, agent, _mig_policy("all-1g.10gb"))
        line = agent.wait_log("MIG layout all-1g.10gb failed", timeout=10)
        st = _status(status)
        assert st["state"] == "failed" and st["config"] == "all-1g.10gb", st
        assert (f"GPU 0 (NVIDIA H100 80GB HBM3): the layout destroys what the kubelet has assigned to pods: "
                f"{held['uuid']} (GI {held['gi_id']}, 3g.40gb) to team-a/train-0, container main") in st["reason"], st
        assert "--force" in st["reason"] and held["uuid"] in line
        assert devices(node) == before, "nothing destroyed, on any GPU"
        # nothing destroyed: the withdrawn devices are advertised again
        h.kubelet.wait_for(BIG, lambda d: len(d) == 2 and held["uuid"] in ids(d), timeout=5, after=t)
        # force: the layout goes through and the held instance is gone
        reload(h, agent, _mig_policy("all-1g.10gb", force=True))
        agent.wait_log("MIG layout all-1g.10gb applied", timeout=10)
        assert _status(status)["state"] == "applied"
        assert agent.wait_log("forced: destroying what the kubelet has assigned to pods")
        assert all(d["uuid"] != held["uuid"] for g in devices(node) for d in g)
    finally:
        pr.stop()


def test_agent_mig_layout_waits_for_pod_resources(h):
    """PodResources answering with an error: the layout is not applied (nothing destroyed), the
    status says why; with force it goes through, said in the log."""
    node = h.node(H100X2)
    status = os.path.join(h.base, "mig-status.json")
    pr = PodResourcesEmulator(os.path.join(h.base, "pr.sock")).start()
    try:
        agent = start(h, node, pr, status)
        before = devices(node)
        pr.status = grpc.StatusCode.RESOURCE_EXHAUSTED
        reload(h, agent, _mig_policy("all-1g.10gb"))
        agent.wait_log("MIG layout all-1g.10gb failed", timeout=10)
        st = _status(status)
        assert st["state"] == "failed", st
        assert "cannot ask the kubelet which pods hold which devices" in st["reason"], st
        assert "rejected by rate limit" in st["reason"] and "nothing is changed" in st["reason"], st
        assert devices(node) == before
        reload(h, agent, _mig_policy("all-1g.10gb", force=True))
        agent.wait_log("MIG layout all-1g.10gb applied", timeout=10)
        assert agent.wait_log("forced without knowing what pods hold")
        assert all(len(g) == 7 for g in devices(node))
    finally:
        pr.stop()


def test_agent_without_kubelet_says_so(h):
    node = h.node(H100X2)
    status = os.path.join(h.base, "mig-status.json")
    agent = h.agent(node, _mig_policy("all-balanced"), resources=[BIG],
                    extra=["--mig-status-file", status, "--pod-resources-socket", os.path.join(h.base, "none.sock")])
    agent.wait_log("No kubelet on this node .no PodResources socket .*none.sock.: only processes count as in use")
    assert _status(status)["state"] == "applied"
