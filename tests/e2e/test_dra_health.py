"""The DRA driver's resource-health stream (DRAResourceHealth.NodeWatchResources) with
the real kubelet: the kubelet (1.36: the ResourceHealthStatus feature gate, beta, on by default)
opens the stream on the agent's DRA socket once it registers the driver, and shows each allocated
device's health in the pod's status (containerStatuses[].allocatedResourcesStatus). A pod holds
a whole-GPU claim: its device is Healthy; a critical Xid on the GPU (the simulator's `sim xid 0
79`) makes it Unhealthy in the pod's status (the time from the Xid is printed: docs/benchmarks.md),
and after the policy's quiet period without another Xid it is Healthy again."""
import time

from dra_util import DRIVER, apply_classes, create_claim, create_claim_pod, dra_args
from e2e import NS, wait

QUIET = 10
# GPU 0 is DRA's, GPU 1 the device plugin's (as test_dra_pods.py).
POLICY = ("version: v1\nflags:\n  plugin:\n    deviceListStrategy: cdi-cri\n"
          f"gpuslice:\n  dra:\n    gpus: [\"0\"]\n  health:\n    recoveryQuietPeriod: {QUIET}s\n")


def _health(cluster, pod, resource_id):
    """(health, message) the pod's status gives the device of its claim "gpu", which the kubelet
    names by the device's first CDI ID ((None, None): not listed yet)."""
    for cs in cluster.pod(pod)["status"].get("containerStatuses", []):
        for entry in cs.get("allocatedResourcesStatus") or []:
            for r in entry.get("resources") or [] if entry.get("name") == "claim:gpu" else []:
                if r.get("resourceID") == resource_id:
                    return r.get("health"), r.get("message")
    return None, None


def test_xid_shows_in_the_pod_status_and_recovers(cluster, agent):
    classes = apply_classes(cluster)
    a = agent("t4x2.yaml", POLICY, dra_args(cluster) + ["--cdi-hook", ""])
    try:
        wait(lambda: f"registered with the kubelet as {DRIVER}" in a.log(), 120, "the kubelet to register the driver")
        create_claim(cluster, "dra-health")
        create_claim_pod(cluster, "dra-health", "dra-health", "sleep 3600")
        cluster.wait_phase("dra-health", ("Running",), timeout=180)
        alloc = cluster.get("resourceclaim", "-n", NS, "dra-health")["status"]["allocation"]
        results = [(r["driver"], r["pool"], r["device"]) for r in alloc["devices"]["results"]]
        assert results == [(DRIVER, cluster.node_name, "gpu-0")], results
        # the kubelet names the device by its first CDI ID: the node spec's device, GPU 0's UUID
        device = "gpuslice.io/gpu=" + a.uuids()[0]
        wait(lambda: _health(cluster, "dra-health", device)[0] == "Healthy", 60,
             f"{device} Healthy in the pod's allocatedResourcesStatus")
        assert "Successfully started WatchResources health stream" in cluster.log("kubelet")

        t0 = time.monotonic()
        a.sim("sim", "xid", "0", "79")
        wait(lambda: _health(cluster, "dra-health", device)[0] == "Unhealthy", 60,
             f"{device} Unhealthy in the pod's status after Xid 79")
        t_out = time.monotonic() - t0
        # the agent's why, in the pod's status (ResourceHealthStatusMessage, beta, on by default)
        assert "critical Xid 79" in (_health(cluster, "dra-health", device)[1] or ""), cluster.pod("dra-health")
        wait(lambda: _health(cluster, "dra-health", device)[0] == "Healthy", 120,
             f"{device} Healthy again after the quiet period")
        t_back = time.monotonic() - t0
        assert t_back >= QUIET - 0.5, f"Healthy again after {t_back:.1f} s, the quiet period is {QUIET} s"
        print(f"DRA health: Xid 79 on GPU 0 -> Unhealthy in the pod status after {t_out:.1f} s, "
              f"Healthy again after {t_back:.1f} s (quiet period {QUIET} s)")
    finally:
        cluster.kubectl("delete", "pods", "-n", NS, "--all", "--grace-period=1", "--wait=true", check=False,
                        timeout=120)
        cluster.kubectl("delete", "resourceclaim", "-n", NS, "dra-health", "--ignore-not-found", check=False)
        a.stop()
        cluster.kubectl("delete", "deviceclass", *classes, "--ignore-not-found", check=False)
