"""Pods in the device plugin's style served by DRA: the chart's DeviceClasses with
extendedResourceName (DRAExtendedResource, beta and on by default in Kubernetes 1.36: the e2e
cluster sets no gate), `gpuslice agent --dra` on a simulated node of three T4s, one node served
both ways: GPU 0 by the device plugin (nvidia.com/gpu), GPU 1 (whole) and GPU 2 (time-sliced, 4
replicas) by DRA.

- A pod with `resources.limits: {gpu.gpuslice.io/gpu: 1}` and no claim is scheduled through the
  whole-GPU class: the scheduler makes the pod's claim (annotated as the extended resource's),
  allocates GPU 1, the kubelet has gpuslice prepare it (NodePrepareResources for the implicit
  claim, its transient CDI spec), and the container has GPU 1's node through CDI, no other.
- On the same node a pod asking `nvidia.com/gpu: 1` gets GPU 0 from the device plugin, no claim:
  the class's name does not take the device plugin's pods (why the chart does not name it
  nvidia.com/gpu: docs/dra.md).
- `gpu.gpuslice.io/gpu.shared: 1` is one replica of the time-sliced GPU: the claim's
  consumedCapacity is one replica's memory and compute (a quarter of the T4's 15 GiB in 1Gi steps,
  25 %), the guard's limits."""
import json
import os

import yaml

from dra_util import DRIVER, checkpoint, claim_spec_file, device_classes, dra_args, slice_devices, slices, wait_gone
from e2e import NS, E2EError, wait
from test_pods import CDI, SHOW, parse

NODE = "gpus:\n  - model: T4\n    count: 3\n"
POLICY = CDI + """gpuslice:
  gpus:
    - {index: "2", mode: time-slicing, replicas: 4}
  dra:
    gpus: ["1", "2"]
"""
WHOLE, SHARED = f"{DRIVER}/gpu", f"{DRIVER}/gpu.shared"
ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
PREFIX = "dra-ext-"


def _gpus(seen):
    return sorted(n for n in seen["node"] if n[len("/dev/nvidia"):].isdigit())


def _minor(a, index):
    return json.loads(a.sim("inspect", "--json").stdout)["gpus"][index]["minor"]


def _claim_of(cluster, pod):
    """The claim the scheduler made for the pod's extended resources (owned by it, annotated)."""
    uid = cluster.pod(pod)["metadata"]["uid"]
    for c in cluster.get("resourceclaims", "-n", NS)["items"]:
        owners = c["metadata"].get("ownerReferences", [])
        if c["metadata"].get("annotations", {}).get(ANNOTATION) == "true" and any(o["uid"] == uid for o in owners):
            return c
    return None


def _message(cluster, name):
    p = cluster.wait_phase(name, ("Succeeded",), timeout=180)
    return p, parse(p["status"]["containerStatuses"][0]["state"]["terminated"].get("message", ""))


def test_extended_resource_pods_through_the_device_classes(cluster, agent):
    docs = device_classes(extended=True)
    ext = {d["metadata"]["name"]: d["spec"].get("extendedResourceName") for d in docs}
    assert ext[DRIVER] == WHOLE and ext[f"shared.{DRIVER}"] == SHARED, ext
    node = os.path.join(cluster.dir, "dra-ext-node.yaml")
    with open(node, "w") as f:
        f.write(NODE)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    try:
        a = agent(node, POLICY, dra_args(cluster) + ["--cdi-hook", ""])
        wait(lambda: slice_devices(slices(cluster)) == ["gpu-1", "gpu-2"] or E2EError(slice_devices(slices(cluster))),
             120, "the agent's slices (GPUs 1 and 2)")
        cluster.wait_allocatable({"nvidia.com/gpu": 1}, timeout=120)   # GPU 0, the device plugin's

        # the device plugin's resource: GPU 0, no claim
        cluster.create_pod(PREFIX + "dp", {"nvidia.com/gpu": 1}, SHOW)
        p, seen = _message(cluster, PREFIX + "dp")
        assert _gpus(seen) == [f"/dev/nvidia{_minor(a, 0)}"], seen["node"]
        assert not p["status"].get("extendedResourceClaimStatus") and not _claim_of(cluster, PREFIX + "dp"), p["status"]

        # the class's resource: a claim made by the scheduler, prepared by gpuslice, GPU 1 through CDI
        # (running 30 s, while its claim is checked prepared; then it ends and says what it saw)
        cluster.create_pod(PREFIX + "whole", {WHOLE: 1}, SHOW + "\nsleep 30")
        cluster.wait_phase(PREFIX + "whole", ("Running",), timeout=180)
        c = wait(lambda: _claim_of(cluster, PREFIX + "whole"), 60, "the pod's extended-resource claim")
        (r,) = c["status"]["allocation"]["devices"]["results"]
        assert r["driver"] == DRIVER and r["device"] == "gpu-1" and r["pool"] == cluster.node_name, r
        uid, name = c["metadata"]["uid"], c["metadata"]["name"]
        st = cluster.pod(PREFIX + "whole")["status"].get("extendedResourceClaimStatus", {})
        assert st.get("resourceClaimName") == name, st
        assert uid in checkpoint(cluster) and os.path.exists(claim_spec_file(cluster, uid))
        assert f"prepared {NS}/{name} ({uid})" in a.log()
        _, seen = _message(cluster, PREFIX + "whole")
        assert _gpus(seen) == [f"/dev/nvidia{_minor(a, 1)}"], seen["node"]
        assert seen["env"].get("GPUSLICE_DRA_DEVICES") == a.uuids()[1], seen["env"]
        print(f"DRA extended resource {WHOLE}: claim {name} on {r['device']}, /dev/nvidia{_minor(a, 1)} in the pod")

        # one replica of the time-sliced GPU
        cluster.create_pod(PREFIX + "shared", {SHARED: 1}, "sleep 3600")
        cluster.wait_phase(PREFIX + "shared", ("Running",), timeout=180)
        c2 = wait(lambda: _claim_of(cluster, PREFIX + "shared"), 60, "the shared pod's claim")
        (r2,) = c2["status"]["allocation"]["devices"]["results"]
        assert r2["device"] == "gpu-2" and r2.get("shareID"), r2
        assert r2["consumedCapacity"] == {"memory": "3Gi", "compute": "25"}, r2
        with open(os.path.join(a.guard_root, f"claim-{c2['metadata']['uid']}", "limits")) as f:
            limits = f.read()
        assert f" {3 << 30} 25\n" in limits, limits
        print(f"DRA extended resource {SHARED}: {r2['consumedCapacity']}")

        # the pods gone: their claims unprepared (and deleted with their owner)
        cluster.delete_pods(timeout=120)
        wait_gone(claim_spec_file(cluster, uid), 120, "the extended-resource claim's CDI spec")
        wait(lambda: uid not in checkpoint(cluster), 60, "the claim out of the checkpoint")
    finally:
        cluster.kubectl("delete", "pods", "-n", NS, "--all", "--grace-period=1", "--wait=true", check=False,
                        timeout=120)
        cluster.kubectl("delete", "deviceclass", *ext, "--ignore-not-found", check=False)

