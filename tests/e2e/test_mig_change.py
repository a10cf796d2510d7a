"""A MIG layout change while a pod holds an instance, with the real kubelet's PodResources API
saying who holds what. GPU 0 has the node's only 3g.40gb, a pod holds it, and the policy asks
all-1g.10gb: the agent keeps the held instance (same UUID, the pod runs on), lays the rest of GPU 0
out in the 1g.10gb that fit beside it, makes GPU 1 7 x 1g.10gb, says `partial` (the status names
the pod, the instance and what was not made), and the Node's allocatable is exactly that; the pod
deleted, GPU 0 converges to 7 x 1g.10gb without a restart and allocatable says 14. With
`force: true` the held instance is destroyed and the layout goes through whole."""
import json
import os

from e2e import NS, wait
from kubelet_state import all_assigned

ONE, TWO, BIG = "nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb"
H100X2 = "gpus:\n  - model: H100-SXM5-80GB\n    count: 2\n    mig: enabled\n"
# GPU 0: all-balanced (its 3g.40gb at 4); GPU 1: 3 x 2g.20gb, so the pod's 3g.40gb is GPU 0's
LAYOUTS = """version: v1
mig-configs:
  start:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    - devices: [1]
      mig-enabled: true
      mig-devices: {"2g.20gb": 3}
"""


def mig_policy(config, force=False, layouts=None):
    return (f"version: v1\nflags:\n  migStrategy: mixed\ngpuslice:\n  mig:\n    config: {config}\n"
            f"    force: {'true' if force else 'false'}\n" + (f"    layoutFile: {layouts}\n" if layouts else ""))


def status(a):
    with open(os.path.join(a.base, "mig-status.json")) as f:
        return json.load(f)


def mig_devices(a):
    """[[(profile, start, uuid, gi_id)] per GPU], as the simulated node has them."""
    gpus = json.loads(a.sim("inspect", "--json").stdout)["gpus"]
    return [sorted((d["profile"], d["placement"]["start"], d["uuid"], d["gi_id"])
                   for d in (g.get("mig") or {}).get("devices", [])) for g in gpus]


def hold_3g(cluster, agent, layouts_text=None):
    node = os.path.join(cluster.dir, "h100x2-mig.yaml")
    with open(node, "w") as f:
        f.write(H100X2)
    layouts = None
    if layouts_text:
        layouts = os.path.join(cluster.dir, "mig-layouts.yaml")
        with open(layouts, "w") as f:
            f.write(layouts_text)
    a = agent(node, mig_policy("start" if layouts else "all-balanced", layouts=layouts),
              extra=["--pod-attribution-interval-ms", "1000"])
    cluster.wait_allocatable({ONE: 2, TWO: 4, BIG: 1} if layouts else {ONE: 4, TWO: 2, BIG: 2}, timeout=120)
    cluster.create_pod("holder", {BIG: 1}, "sleep 3600")
    cluster.wait_phase("holder", ("Running",), timeout=120)
    (held,) = all_assigned(cluster, BIG)
    cid = cluster.pod("holder")["status"]["containerStatuses"][0]["containerID"]
    return a, layouts, held, cid


def test_mig_layout_change_keeps_the_held_instance(cluster, agent):
    a, layouts, held, cid = hold_3g(cluster, agent, LAYOUTS)
    before = mig_devices(a)
    (big,) = [d for d in before[0] if d[2] == held]
    assert big[:2] == ("3g.40gb", 4), before

    a.write_policy(mig_policy("all-1g.10gb", layouts=layouts))
    st = wait(lambda: status(a)["config"] == "all-1g.10gb" and status(a)["state"] == "partial" and status(a), 120,
              "the layout to be applied around the held instance")
    kept = f"{held} (GI {big[3]}, 3g.40gb) to {NS}/holder, container main"
    assert st["reason"] == f"GPU 0: kept {kept}; not made: 3 x 1g.10gb", st
    assert f"GPU 0: MIG layout all-1g.10gb partially applied: kept what pods hold: {kept}" in a.log()
    cluster.wait_allocatable({ONE: 11, BIG: 1}, timeout=120)
    now = mig_devices(a)
    assert big in now[0], now  # same profile, placement, UUID and GI
    assert [(d[0], d[1]) for d in now[0]] == [("1g.10gb", s) for s in range(4)] + [("3g.40gb", 4)], now
    assert [(d[0], d[1]) for d in now[1]] == [("1g.10gb", s) for s in range(7)], now
    p = cluster.pod("holder")
    assert p["status"]["phase"] == "Running" and p["status"]["containerStatuses"][0]["containerID"] == cid

    # the pod gone, the agent's next pass makes the rest of the layout, without a restart
    pid = a.proc.pid
    cluster.kubectl("delete", "pod", "-n", NS, "holder", "--grace-period=1", "--wait=false")
    wait(lambda: status(a)["state"] == "applied" and status(a)["config"] == "all-1g.10gb", 120,
         "the whole layout once the pod is gone")
    cluster.wait_allocatable({ONE: 14}, timeout=120)
    now = mig_devices(a)
    assert all([(d[0], d[1]) for d in g] == [("1g.10gb", s) for s in range(7)] for g in now), now
    assert held not in [d[2] for g in now for d in g]
    assert a.proc.pid == pid and a.proc.poll() is None


def test_mig_layout_change_forced_destroys_the_held_instance(cluster, agent):
    a, _, held, _ = hold_3g(cluster, agent)
    a.write_policy(mig_policy("all-1g.10gb", force=True))
    wait(lambda: status(a)["state"] == "applied" and status(a)["config"] == "all-1g.10gb", 120,
         "the forced layout")
    cluster.wait_allocatable({ONE: 14}, timeout=120)
    assert held not in [d[2] for g in mig_devices(a) for d in g]
    assert "forced: destroying what the kubelet has assigned to pods: " + held in a.log()
