"""Two shared claims in one container: each time-sliced claim's guard files mount at
the same container paths, so a container holding two would run under one claim's limits. The
agent (`gpuslice agent --dra`, a simulated node of one time-sliced H100 80GB given to DRA) reads
the pods of a shared claim's reservedFor at prepare and refuses the second guarded claim of a
container, naming both claims, the pod and the container (share.h: dra_share_one_guard).

- One container with claims of 10Gi and 20Gi on the shared GPU: the pod does not start, its
  events carry the refusal naming both claims; deleting it unprepares the one that was prepared
  (its guard files gone).
- The same two claims in two containers of one pod: both prepared, the pod runs, each claim's
  guard limits its own memory."""
import os

import yaml

from dra_util import GIB, apply_classes, checkpoint, claim_uid, delete_prefixed, dra_args, dra_policy, shared_claim, \
    slice_devices, slices, wait_gone
from e2e import NS, E2EError, wait

NODE = "gpus:\n  - model: H100-SXM5-80GB\n"
POLICY = dra_policy('{index: "0", mode: time-slicing, replicas: 4}')
PREFIX = "dra-two-"


def _claim(name, gib):
    return shared_claim(PREFIX + name, gib)


def _pod(cluster, name, containers):
    """A pod whose containers (name -> [claim names]) each hold those claims."""
    pod = yaml.safe_load(cluster.pod_yaml(PREFIX + name, {}, "sleep 3600"))
    base = pod["spec"]["containers"][0]
    pod["spec"]["containers"] = []
    claims = []
    for cname, held in containers.items():
        c = dict(base, name=cname, resources={"claims": [{"name": h} for h in held]})
        pod["spec"]["containers"].append(c)
        claims += [h for h in held if h not in claims]
    pod["spec"]["resourceClaims"] = [{"name": h, "resourceClaimName": PREFIX + h} for h in claims]
    return pod


def _uid(cluster, name):
    return claim_uid(cluster, PREFIX + name)


def test_second_guarded_claim_of_a_container_refused(cluster, agent):
    classes = apply_classes(cluster)
    node = os.path.join(cluster.dir, "dra-two-node.yaml")
    with open(node, "w") as f:
        f.write(NODE)
    try:
        a = agent(node, POLICY, dra_args(cluster) + ["--cdi-hook", ""])
        wait(lambda: slice_devices(slices(cluster)) == ["gpu-0"] or E2EError(slice_devices(slices(cluster))), 120,
             "the agent's slice of the shared GPU")
        # one container, two shared claims: refused, both named
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(
            [_claim("a", 10), _claim("b", 20), _pod(cluster, "one", {"main": ["a", "b"]})]))
        want = f"container main of pod {PREFIX}one also holds claim {PREFIX}"
        ev = wait(lambda: [e for e in cluster.events(PREFIX + "one") if want in e], 180,
                  "the pod's event naming both claims")
        assert f"claim {NS}/{PREFIX}a" in ev[0] or f"claim {NS}/{PREFIX}b" in ev[0], ev[0]
        assert f"{PREFIX}a" in ev[0] and f"{PREFIX}b" in ev[0], ev[0]
        print(f"DRA two shared claims in one container: {ev[0]!r}")
        p = cluster.pod(PREFIX + "one")
        assert p["status"].get("phase") == "Pending", p["status"]
        uids = {n: _uid(cluster, n) for n in ("a", "b")}

        def one_prepared():  # the first prepared, the second refused
            held = checkpoint(cluster)
            got = [n for n in ("a", "b") if uids[n] in held]
            return got if len(got) == 1 else E2EError(f"prepared {got}; the checkpoint holds {sorted(held)}")
        try:
            prepared = wait(one_prepared, 60, "one of the two claims prepared")
        except E2EError as e:  # what the agent did with the two claims, for the failure's report
            lines = [ln for ln in a.log().splitlines() if uids["a"] in ln or uids["b"] in ln or "also holds" in ln]
            raise AssertionError(f"{e}\nclaims {uids}\nagent:\n" + "\n".join(lines[-40:])) from None
        guard = os.path.join(a.guard_root, f"claim-{_uid(cluster, prepared[0])}")
        assert os.path.isdir(guard)
        cluster.kubectl("delete", "pod", "-n", NS, PREFIX + "one", "--grace-period=1")
        wait_gone(guard, 120, "the prepared claim's guard files after the pod is gone")

        # the two claims in two containers of one pod: each its own guard
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(_pod(cluster, "two", {"c1": ["a"], "c2": ["b"]})))
        cluster.wait_phase(PREFIX + "two", ("Running",), timeout=180)
        for n, gib in (("a", 10), ("b", 20)):
            uid = _uid(cluster, n)
            assert uid in checkpoint(cluster)
            with open(os.path.join(a.guard_root, f"claim-{uid}", "limits")) as f:
                limits = f.read()
            assert f" {gib * GIB} " in limits, limits
        print("DRA two shared claims in two containers of one pod: both prepared, the pod runs")
    finally:
        delete_prefixed(cluster, PREFIX)
        cluster.kubectl("delete", "deviceclass", *classes, "--ignore-not-found", check=False)
