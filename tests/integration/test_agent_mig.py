"""The agent's MIG layout changes and the kubelet's assignments: a MIG device the kubelet has
assigned to a pod (PodResources, emulated by podresources_emulator.py) is kept though no process
runs on it, and the rest of its GPU is laid out around it (state `partial`) until the pod releases
it; `gpuslice.mig.force` destroys it.

Environment (set by meson): GPUSLICE, GPUSLICE_SIM_LIB, GS_SOURCE_ROOT."""
import contextlib
import os
import signal
import time

import grpc

from podresources_emulator import PodResourcesEmulator
from test_agent import H100X2, _mig_policy, _status, h, ids  # noqa: F401 (h: fixture)

import wait  # tests/lib, on the path once agent_harness is imported

BIG = "nvidia.com/mig-3g.40gb"
ONE = "nvidia.com/mig-1g.10gb"
TWO = "nvidia.com/mig-2g.20gb"


def start(h, node, pr, status, extra=()):
    return h.agent(node, _mig_policy("all-balanced"), resources=[BIG],
                   extra=["--mig-status-file", status, "--pod-resources-socket", pr.socket_path, *extra])


def reload(h, agent, policy):
    t = time.monotonic()
    h.write("policy.yaml", policy)
    agent.signal(signal.SIGHUP)
    return t


def big_device(node, gpu=0):
    return next(d for d in node.inspect()["gpus"][gpu]["mig"]["devices"] if d["profile"] == "3g.40gb")


def devices(node):
    return [g["mig"]["devices"] for g in node.inspect()["gpus"]]


def wait_status(path, state, config, timeout=15):
    seen = []

    def reached():
        seen[:] = [_status(path)]
        return seen[0] if seen[0]["state"] == state and seen[0]["config"] == config else None
    return wait.until(reached, timeout=timeout, what=f"MIG status {state} for {config}",
                      detail=lambda: f"last status: {seen[0] if seen else None}")


@contextlib.contextmanager
def holding_3g(h, extra=()):
    """2 H100s in all-balanced, GPU 0's 3g.40gb (at 4) assigned to team-a/train-0 (its process not
    started): (node, status file, PodResources emulator, agent, the held device)."""
    node = h.node(H100X2)
    status = os.path.join(h.base, "mig-status.json")
    pr = PodResourcesEmulator(os.path.join(h.base, "pr.sock")).start()
    try:
        agent = start(h, node, pr, status, extra)
        assert _status(status)["state"] == "applied"
        held = big_device(node)
        assert held["placement"]["start"] == 4
        assert held["uuid"] in ids(h.latest(BIG))
        pr.set([("team-a", "train-0", "main", BIG, [held["uuid"]])])
        yield node, status, pr, agent, held
    finally:
        pr.stop()


def test_agent_lays_out_around_a_device_a_pod_holds(h):
    """A pod holds GPU 0's 3g.40gb (at 4) and the policy asks all-1g.10gb: the held instance stays
    (same GI, same UUID, never withdrawn), the rest of GPU 0 becomes the 1g.10gb that fit beside
    it (4), GPU 1 becomes 7 x 1g.10gb, the status says partial and why, and the kubelet is told
    exactly that; the pod gone, the agent makes the rest without a restart or a policy change."""
    with holding_3g(h, ["--pod-attribution-interval-ms", "200"]) as (node, status, pr, agent, held):
        t = reload(h, agent, _mig_policy("all-1g.10gb"))
        line = agent.wait_log("GPU 0: MIG layout all-1g.10gb partially applied", timeout=10)
        kept = f"{held['uuid']} (GI {held['gi_id']}, 3g.40gb) to team-a/train-0, container main"
        assert kept in line and "not made: 3 x 1g.10gb" in line, line
        st = wait_status(status, "partial", "all-1g.10gb")
        assert st["reason"] == f"GPU 0: kept {kept}; not made: 3 x 1g.10gb", st
        d = devices(node)
        same = [x for x in d[0] if x["uuid"] == held["uuid"]]
        assert len(same) == 1 and same[0]["gi_id"] == held["gi_id"] and same[0]["placement"] == held["placement"]
        assert sorted((x["profile"], x["placement"]["start"]) for x in d[0]) == [
            ("1g.10gb", 0), ("1g.10gb", 1), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4)]
        assert [x["profile"] for x in d[1]] == ["1g.10gb"] * 7
        # allocatable follows: 4 + 7 x 1g.10gb, the held 3g.40gb, no 2g.20gb
        mig_ids = lambda g: sorted(x["uuid"] for x in d[g] if x["profile"] == "1g.10gb")  # noqa: E731
        h.kubelet.wait_for(ONE, lambda ds: ids(ds) == sorted(mig_ids(0) + mig_ids(1)), timeout=5, after=t)
        h.kubelet.wait_for(BIG, lambda ds: ids(ds) == [held["uuid"]], timeout=5, after=t)
        h.kubelet.wait_for(TWO, lambda ds: not ds, timeout=5, after=t)
        assert all(held["uuid"] in m.ids for m in h.kubelet.messages(BIG) if m.time > t), "held device withdrawn"
        # nothing more to do while it is held: no step, no new warning
        wait.holds(lambda: devices(node) == d, polls=10, interval=0.1, what="the held layout unchanged",
                   detail=agent.log)
        assert agent.log().count("partially applied: kept what pods hold") == 1
        # PodResources failing meanwhile: still partial (said once), nothing changed, tried again
        pr.status = grpc.StatusCode.RESOURCE_EXHAUSTED
        calls = pr.calls
        agent.wait_log("MIG layout all-1g.10gb stays partial for now: cannot ask the kubelet", timeout=5)
        wait.until(lambda: pr.calls >= calls + 3, timeout=5,  # asked again meanwhile
                   what="PodResources asked 3 more times", detail=lambda: f"asked {pr.calls - calls} times")
        assert _status(status)["state"] == "partial" and devices(node) == d
        assert agent.log().count("stays partial for now") == 1
        pr.status = None
        # released: the next pass of the re-lay job makes the rest
        pid = agent.pid
        released = time.monotonic()
        pr.set([])
        agent.wait_log("MIG layout all-1g.10gb applied", timeout=15)
        wait_status(status, "applied", "all-1g.10gb")
        d = devices(node)
        assert all([x["profile"] for x in g] == ["1g.10gb"] * 7 for g in d), d
        assert held["uuid"] not in [x["uuid"] for g in d for x in g]
        h.kubelet.wait_for(ONE, lambda ds: len(ds) == 14, timeout=5, after=released)
        h.kubelet.wait_for(BIG, lambda ds: not ds, timeout=5, after=released)
        assert agent.alive() and agent.pid == pid


def test_agent_crash_in_the_middle_of_a_layout_around_a_hold(h, monkeypatch):
    """The agent dies after 3 steps of the layout around a held 3g.40gb (the test hook of
    migapply.c); started again, it asks PodResources, plans around the hold from what is there
    and finishes: the held instance was there at the crash and stays, the rest is as without it."""
    with holding_3g(h) as (node, status, pr, agent, held):
        agent.stop()
        monkeypatch.setenv("GPUSLICE_FAULT_EXIT_AFTER_STEPS", "3")
        crashing = h.agent(node, _mig_policy("all-1g.10gb"),
                           extra=["--mig-status-file", status, "--pod-resources-socket", pr.socket_path])
        assert crashing.wait_exit(10) == 99, crashing.log()
        monkeypatch.delenv("GPUSLICE_FAULT_EXIT_AFTER_STEPS")
        assert held["uuid"] in [d["uuid"] for d in devices(node)[0]]
        h.agent(node, _mig_policy("all-1g.10gb"), resources=[BIG, ONE],
                extra=["--mig-status-file", status, "--pod-resources-socket", pr.socket_path])
        st = wait_status(status, "partial", "all-1g.10gb")
        assert held["uuid"] in st["reason"], st
        d = devices(node)
        assert sorted((x["profile"], x["placement"]["start"], x["uuid"] == held["uuid"]) for x in d[0]) == [
            ("1g.10gb", 0, False), ("1g.10gb", 1, False), ("1g.10gb", 2, False), ("1g.10gb", 3, False),
            ("3g.40gb", 4, True)]
        assert [x["profile"] for x in d[1]] == ["1g.10gb"] * 7
        h.kubelet.wait_for(ONE, lambda ds: len(ds) == 11, timeout=5)


def test_agent_force_destroys_a_device_a_pod_holds(h):
    with holding_3g(h) as (node, status, pr, agent, held):
        # force: the layout goes through whole and the held instance is gone
        reload(h, agent, _mig_policy("all-1g.10gb", force=True))
        agent.wait_log("MIG layout all-1g.10gb applied", timeout=10)
        assert _status(status)["state"] == "applied"
        line = agent.wait_log("forced: destroying what the kubelet has assigned to pods")
        assert f"{held['uuid']} (GI {held['gi_id']}, 3g.40gb) to team-a/train-0, container main" in line, line
        assert all(d["uuid"] != held["uuid"] for g in devices(node) for d in g)
        assert all(len(g) == 7 for g in devices(node))


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
