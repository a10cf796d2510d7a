"""A MIG layout change while a pod holds an instance, with the real kubelet's PodResources API
saying who holds what: the agent's pass over the GPUs sees the pod's 3g.40gb instance, refuses
the layout that would destroy it (the status names the pod), destroys nothing, and the Node's
allocatable comes back to what it was; the pod runs on. With `force: true` the layout goes
through and allocatable follows the new layout."""
import json
import os

from e2e import NS, wait
from kubelet_state import all_assigned

BIG = "nvidia.com/mig-3g.40gb"
H100X2 = "gpus:\n  - model: H100-SXM5-80GB\n    count: 2\n    mig: enabled\n"


def mig_policy(config, force=False):
    return (f"version: v1\nflags:\n  migStrategy: mixed\ngpuslice:\n  mig:\n    config: {config}\n"
            f"    force: {'true' if force else 'false'}\n")


def status(a):
    with open(os.path.join(a.base, "mig-status.json")) as f:
        return json.load(f)


def test_mig_layout_change_keeps_the_held_instance(cluster, agent):
    node = os.path.join(cluster.dir, "h100x2-mig.yaml")
    with open(node, "w") as f:
        f.write(H100X2)
    a = agent(node, mig_policy("all-balanced"))
    balanced = {"nvidia.com/mig-1g.10gb": 4, "nvidia.com/mig-2g.20gb": 2, BIG: 2}
    cluster.wait_allocatable(balanced, timeout=90)
    cluster.create_pod("holder", {BIG: 1}, "sleep 3600")
    cluster.wait_phase("holder", ("Running",))
    (held,) = all_assigned(cluster, BIG)
    cid = cluster.pod("holder")["status"]["containerStatuses"][0]["containerID"]

    a.write_policy(mig_policy("all-1g.10gb"))
    st = wait(lambda: status(a)["config"] == "all-1g.10gb" and status(a)["state"] == "failed" and status(a),
              60, "the layout to be refused")
    assert held in st["reason"] and f"{NS}/holder" in st["reason"], st
    cluster.wait_allocatable(balanced, timeout=60)
    p = cluster.pod("holder")
    assert p["status"]["phase"] == "Running" and p["status"]["containerStatuses"][0]["containerID"] == cid
    assert held in [d["uuid"] for g in json.loads(a.sim("inspect", "--json").stdout)["gpus"]
                    for d in (g.get("mig") or {}).get("devices", [])]

    # force: the layout goes through, the held instance is gone, allocatable follows
    a.write_policy(mig_policy("all-1g.10gb", force=True))
    wait(lambda: status(a)["state"] == "applied" and status(a)["config"] == "all-1g.10gb", 60,
         "the forced layout")
    cluster.wait_allocatable({"nvidia.com/mig-1g.10gb": 14}, timeout=60)
