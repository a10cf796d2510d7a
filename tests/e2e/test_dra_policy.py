"""Prepare checks the policy's gpuslice.dra.gpus in the real cluster: the agent on the
two-T4 node gives DRA both GPUs, then the policy changes so GPU 1 leaves DRA.

- Allocated by the real scheduler, then the policy changed: with the agent stopped (the kubelet
  cannot prepare, the slices stay in the API server for 30 s), a pod's claim for GPU 1 is
  allocated gpu-1; the agent starts again under a policy that keeps only GPU 0: it publishes
  gpu-0 alone, and the kubelet's prepare of the claim gets the agent's error naming the device
  and the key (the pod's events; the pod does not start). The policy file changed under the
  running agent (it watches it: inotify on the file's directory) gives GPU 1 back: the slices say
  so, and the kubelet's retry prepares the claim (the pod runs).
- A forged allocation on GPU 1 (written into the claim's status, with the pod it is reserved for,
  the pod bound to the node by its spec) after the running agent reloaded a policy without it:
  refused alike; the policy reloaded without the key: the slice lists no device."""
import json

import yaml

from dra_util import (DRIVER, apply_classes, claim_yaml, create_claim_pod, delete_pods_and_claims, dra_args,
                      slice_devices, slices)
from e2e import NS, wait

BOTH = ("version: v1\nflags:\n  plugin:\n    deviceListStrategy: cdi-cri\n"
        "gpuslice:\n  dra:\n    gpus: [\"0\", \"1\"]\n")
ONLY0 = BOTH.replace('[\"0\", \"1\"]', '[\"0\"]')
NONE = BOTH.split("gpuslice:")[0]
SLEEP = "sleep 3600"
PREFIX = "drapol-"


def _refused(cluster, pod, device):
    """The kubelet's event for this pod (by its UID: an earlier run's pod of the name left its own)
    with the agent's refusal of device (None: not yet)."""
    uid = cluster.pod(pod)["metadata"]["uid"]
    ev = cluster.get("events", "-n", NS, "--field-selector", f"involvedObject.uid={uid}")["items"]
    for m in (e.get("message", "") for e in ev):
        if f"device {device} " in m and "gpuslice.dra.gpus" in m:
            return m
    return None


def test_prepare_refuses_a_gpu_the_policy_took_from_dra(cluster, agent):
    classes = apply_classes(cluster)
    a = agent("t4x2.yaml", BOTH, dra_args(cluster) + ["--cdi-hook", ""])
    try:
        wait(lambda: slice_devices(slices(cluster)) == ["gpu-0", "gpu-1"], 120, "the slices of both GPUs")
        # allocated while GPU 1 is DRA's, prepared after it left: the agent stopped in between
        a.stop()
        claim = PREFIX + "sched"
        gpu1 = f'device.attributes["{DRIVER}"].index == 1'
        cluster.kubectl("apply", "-f", "-", input=claim_yaml(claim, selector=gpu1))
        create_claim_pod(cluster, claim, claim, SLEEP)

        def allocated():
            al = cluster.get("resourceclaim", "-n", NS, claim).get("status", {}).get("allocation")
            return al and [(r["driver"], r["device"]) for r in al["devices"]["results"]]
        assert wait(allocated, 60, "the scheduler to allocate the claim from the slices left") == [(DRIVER, "gpu-1")]
        a.write_policy(ONLY0)
        a.start()
        wait(lambda: slice_devices(slices(cluster)) == ["gpu-0"], 120, "the slices of GPU 0 alone")
        ev = wait(lambda: _refused(cluster, claim, "gpu-1"), 180, "the kubelet's event with the agent's refusal")
        assert f"NodePrepareResources failed for ResourceClaim {claim}" in ev, ev
        assert "is on GPU 1, which the policy's gpuslice.dra.gpus does not give to the DRA driver" in ev, ev
        assert cluster.pod(claim)["status"]["phase"] == "Pending"
        assert f"{NS}/{claim}" in a.log() and "gpuslice.dra.gpus does not give" in a.log()

        # the policy file changed under the running agent: GPU 1 is DRA's again, the kubelet's retry
        # prepares the claim
        a.write_policy(BOTH)
        wait(lambda: slice_devices(slices(cluster)) == ["gpu-0", "gpu-1"], 60, "the reloaded policy's slices")
        assert "Applied the new policy" in a.log()
        cluster.wait_phase(claim, ("Running",), timeout=240)
        assert f"prepared {NS}/{claim} (" in a.log()
        cluster.kubectl("delete", "pod", "-n", NS, claim, "--grace-period=1", "--wait=true", timeout=120)

        # reloaded without GPU 1, then a forged allocation on it
        a.write_policy(ONLY0)
        wait(lambda: slice_devices(slices(cluster)) == ["gpu-0"], 60, "the slices after the reload")
        # (past the scheduler, which allocates a claim again: the pod names its node, the claim's
        # status its allocation and the pod it is reserved for, as the scheduler writes them)
        forged = PREFIX + "forged"
        cluster.kubectl("apply", "-f", "-", input=claim_yaml(forged))
        pod = yaml.safe_load(cluster.pod_yaml(forged, {}, SLEEP))
        pod["spec"]["nodeName"] = cluster.node_name
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": forged}]
        pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(pod))
        patch = {"status": {
            "allocation": {"devices": {"results": [
                {"request": "gpu", "driver": DRIVER, "pool": cluster.node_name, "device": "gpu-1"}]}},
            "reservedFor": [{"resource": "pods", "name": forged, "uid": cluster.pod(forged)["metadata"]["uid"]}]}}
        cluster.kubectl("patch", "resourceclaim", "-n", NS, forged, "--subresource=status", "--type=merge",
                        "-p", json.dumps(patch))
        ev = wait(lambda: _refused(cluster, forged, "gpu-1"), 180, "the refusal of the forged allocation")
        assert f"ResourceClaim {forged}" in ev, ev
        assert cluster.pod(forged)["status"]["phase"] == "Pending"

        # reloaded without the key: the agent's DRA driver serves no GPU, its slice lists none
        a.write_policy(NONE)
        wait(lambda: slices(cluster) and slice_devices(slices(cluster)) == [], 60, "a slice without devices")
    finally:
        delete_pods_and_claims(cluster, PREFIX)
        a.stop()
        cluster.kubectl("delete", "deviceclass", *classes, "--ignore-not-found", check=False)
