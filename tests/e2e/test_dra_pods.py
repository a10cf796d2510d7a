"""The DRA driver end to end: `gpuslice agent --dra` on a simulated node of the real
cluster, with the e2e cluster's kubeconfig, publishes its ResourceSlices in the API server (only
the GPU the policy's gpuslice.dra.gpus gives DRA; the other stays the device plugin's); a pod
with a ResourceClaim of the chart's DeviceClass gpu.gpuslice.io is allocated the GPU by the real
scheduler, the kubelet calls NodePrepareResources, the agent reads the claim from the API server,
and the container sees the GPU's device node through the claim's CDI spec (not the other GPU's);
deleting the pod unprepares it (the spec and checkpoint entry gone). A kubelet restart keeps a
prepared claim, and the slices it wipes at its start are written again at once (the agent watches
them); an agent restart finds the slices as they are, without duplicating them.
Called as the kubelet calls it: a claim for another driver, a claim whose UID changed (deleted
and made again), a claim that does not exist, and unprepare of a claim never prepared."""
import json
import os
import subprocess
import time

from dra_util import (DRIVER, apply_classes, checkpoint, claim_spec_file, create_claim, create_claim_pod,
                      dra_args, kubelet_client, slice_devices, slices, wait_gone)
from e2e import CLUSTER_SH, NS, wait
from test_pods import SHOW, parse

# GPU 0 is DRA's, GPU 1 the device plugin's.
POLICY = ("version: v1\nflags:\n  plugin:\n    deviceListStrategy: cdi-cri\n"
          "gpuslice:\n  dra:\n    gpus: [\"0\"]\n")
SLEEP = "sleep 3600"


def _agent(cluster, agent):
    a = agent("t4x2.yaml", POLICY, dra_args(cluster) + ["--cdi-hook", ""])
    wait(lambda: slice_devices(slices(cluster)) == ["gpu-0"] or slices(cluster), 120,
         "the agent's ResourceSlices in the API server")
    return a


def _one_slice(cluster):
    items = slices(cluster)
    assert len(items) == 1, [s["metadata"]["name"] for s in items]
    return items[0]


def _minor(a, uuid):
    return next(g["minor"] for g in json.loads(a.sim("inspect", "--json").stdout)["gpus"] if g["uuid"] == uuid)


def _cleanup(cluster, *claims):
    cluster.kubectl("delete", "pods", "-n", NS, "--all", "--grace-period=1", "--wait=true", check=False, timeout=120)
    for c in claims:
        cluster.kubectl("delete", "resourceclaim", "-n", NS, c, "--ignore-not-found", check=False)


def test_slices_claim_prepare_unprepare_and_restarts(cluster, agent):
    classes = apply_classes(cluster)
    a = _agent(cluster, agent)
    try:
        s = _one_slice(cluster)
        assert slice_devices([s]) == ["gpu-0"], s
        assert s["spec"]["pool"]["name"] == cluster.node_name and s["spec"]["nodeName"] == cluster.node_name
        gen = s["spec"]["pool"]["generation"]
        assert gen >= 1
        # GPU 1 stays the device plugin's; GPU 0 is not also advertised there
        cluster.wait_allocatable({"nvidia.com/gpu": 1}, timeout=120)

        # a pod with a claim: allocated by the scheduler, prepared by the agent, seen through CDI
        uuid0 = a.uuids()[0]
        claim = create_claim(cluster, "dra-pods-whole")
        create_claim_pod(cluster, "dra-whole", "dra-pods-whole", SHOW)
        p = cluster.wait_phase("dra-whole", ("Succeeded",), timeout=180)
        msg = p["status"]["containerStatuses"][0]["state"]["terminated"].get("message", "")
        seen = parse(msg)
        uid = claim["metadata"]["uid"]
        assert seen["env"].get("GPUSLICE_DRA_CLAIM") == f"{NS}/dra-pods-whole", seen["env"]
        assert seen["env"].get("GPUSLICE_DRA_DEVICES") == uuid0, seen["env"]
        gpus = sorted(n for n in seen["node"] if n[len("/dev/nvidia"):].isdigit())
        assert gpus == [f"/dev/nvidia{_minor(a, uuid0)}"], seen["node"]
        assert f"prepared {NS}/dra-pods-whole ({uid})" in a.log()
        # deleting the pod unprepares the claim: its CDI spec and checkpoint entry go
        cluster.kubectl("delete", "pod", "-n", NS, "dra-whole", "--grace-period=1")
        wait_gone(claim_spec_file(cluster, uid), 120, "the claim's CDI spec after the pod is gone")
        wait(lambda: uid not in checkpoint(cluster), 60, "the claim out of the checkpoint")
        assert f"unprepared {NS}/dra-pods-whole ({uid})" in a.log()

        # a running pod's claim through a kubelet restart: slices kept, the claim still prepared
        claim2 = create_claim(cluster, "dra-pods-held")
        create_claim_pod(cluster, "dra-held", "dra-pods-held", SLEEP)
        cluster.wait_phase("dra-held", ("Running",), timeout=180)
        uid2 = claim2["metadata"]["uid"]
        # (a claim no pod reserves any more is deallocated: read it while its pod runs)
        alloc = cluster.get("resourceclaim", "-n", NS, "dra-pods-held")["status"]["allocation"]
        assert [(r["driver"], r["pool"], r["device"]) for r in alloc["devices"]["results"]] == \
            [(DRIVER, cluster.node_name, "gpu-0")]
        spec2 = claim_spec_file(cluster, uid2)
        assert os.path.exists(spec2) and uid2 in checkpoint(cluster)
        gen = _one_slice(cluster)["spec"]["pool"]["generation"]
        regs = a.log().count("registered with the kubelet as")
        subprocess.run(["bash", CLUSTER_SH, "restart-kubelet", cluster.dir], capture_output=True, text=True,
                       timeout=300, env=cluster.env)
        wait(lambda: a.log().count("registered with the kubelet as") > regs, 180,
             "the restarted kubelet to register the driver again")
        assert cluster.pod("dra-held")["status"]["phase"] == "Running"
        assert os.path.exists(spec2) and uid2 in checkpoint(cluster)
        # the new kubelet wipes the node's slices at its start: the agent sees it (its watch) and
        # writes them again, a new generation of the pool
        wait(lambda: slice_devices(slices(cluster)) == ["gpu-0"], 30, "the slices after the kubelet restart")
        s = _one_slice(cluster)
        assert s["spec"]["pool"]["generation"] >= gen
        gen = s["spec"]["pool"]["generation"]

        # an agent restart: the slices are found as they are (not duplicated), the claim kept
        names = [x["metadata"]["name"] for x in slices(cluster)]
        a.restart()
        wait(lambda: "publishing the ResourceSlices" in a.log().rsplit("gpuslice agent starting", 1)[-1], 60,
             "the restarted agent's publisher")
        time.sleep(3)  # its first sync
        items = slices(cluster)
        assert [x["metadata"]["name"] for x in items] == names
        assert items[0]["spec"]["pool"]["generation"] >= gen and slice_devices(items) == ["gpu-0"]
        assert uid2 in checkpoint(cluster)
        cluster.kubectl("delete", "pod", "-n", NS, "dra-held", "--grace-period=1")
        wait_gone(spec2, 120, "the held claim's CDI spec after its pod is gone")
    finally:
        _cleanup(cluster, "dra-pods-whole", "dra-pods-held")
        a.stop()
        cluster.kubectl("delete", "deviceclass", *classes, "--ignore-not-found", check=False)
    # the agent gone, its slices stay for the next one (the pool is the node's)
    assert slice_devices(slices(cluster)) == ["gpu-0"]


def test_prepare_answers_for_claims_it_cannot_prepare(cluster, agent):
    """As the kubelet calls it: each claim's own error, from the claim the API server has."""
    _agent(cluster, agent)
    dra_client, c = kubelet_client(cluster)
    try:
        # another driver's allocation (written into the claim's status as a scheduler would)
        other = create_claim(cluster, "dra-pods-other", cls="gpu.gpuslice.io")
        patch = {"status": {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": "other.example.com", "pool": "p", "device": "d"}]}}}}
        cluster.kubectl("patch", "resourceclaim", "-n", NS, "dra-pods-other", "--subresource=status",
                        "--type=merge", "-p", json.dumps(patch))
        ouid = other["metadata"]["uid"]
        r = c.prepare([dra_client.claim(NS, "dra-pods-other", ouid)])
        assert "has no device of gpu.gpuslice.io" in r[ouid].error, r[ouid]
        # the UID changed: deleted and made again under the same name
        cluster.kubectl("delete", "resourceclaim", "-n", NS, "dra-pods-other")
        new = create_claim(cluster, "dra-pods-other")
        assert new["metadata"]["uid"] != ouid
        r = c.prepare([dra_client.claim(NS, "dra-pods-other", ouid)])
        assert f"has UID {new['metadata']['uid']}, not {ouid}" in r[ouid].error, r[ouid]
        # not there at all; in one batch with the first, each its own answer
        gone = "00000000-0000-0000-0000-000000000001"
        r = c.prepare([dra_client.claim(NS, "dra-pods-none", gone), dra_client.claim(NS, "dra-pods-other", ouid)])
        assert "not found" in r[gone].error and "has UID" in r[ouid].error, r
        # unprepare of a claim never prepared (its pod long gone): no error
        r = c.unprepare([dra_client.claim(NS, "dra-pods-none", gone)])
        assert r[gone].error == "", r
    finally:
        c.close()
        _cleanup(cluster, "dra-pods-other")
