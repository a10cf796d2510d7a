"""An API server restart in the middle of a prepare: the agent reads each ResourceClaim
from the API server at NodePrepareResources (src/dra/claimkube.c).

- Called as the kubelet calls it while the API server is down (cluster.sh restart-apiserver, in
  the background): the claim gets its own error at once ("not read", well within the kubelet's
  45 s for the call), no device and nothing left behind (no CDI spec, not in the checkpoint);
  the same call once the API server is back (the kubelet's retry) prepares it.
- A pod with a claim created just before the same restart: whatever the restart interrupts (the
  scheduler's allocation, the kubelet's claim read, the agent's: the interleaving is not the
  test's to choose, the kubelet reads the claim itself just before it calls the agent), the pod
  ends Running and its claim prepared."""
import json
import os
import subprocess
import threading
import time

from dra_util import (DRIVER, apply_classes, checkpoint, claim_spec_file, claim_yaml, create_claim_pod,
                      delete_pods_and_claims, dra_args, kubelet_client, slice_devices, slices)
from e2e import CLUSTER_SH, NS, wait

POLICY = ("version: v1\nflags:\n  plugin:\n    deviceListStrategy: cdi-cri\n"
          "gpuslice:\n  dra:\n    gpus: all\n")  # gpu-0 the direct calls' claim's, gpu-1 the pod's
PREFIX = "draapi-"
KUBELET_TIMEOUT = 45  # the kubelet's deadline for NodePrepareResources


def _api_up(cluster):
    p = subprocess.run(["kubectl", "get", "--raw", "/readyz"], capture_output=True, text=True, timeout=10,
                       env=cluster.env)
    return p.returncode == 0


class Restart(threading.Thread):
    """cluster.sh restart-apiserver in the background (the API server stopped, started, ready)."""

    def __init__(self, cluster):
        super().__init__(daemon=True)
        self.cluster, self.result = cluster, None
        self.start()

    def run(self):
        self.result = subprocess.run(["bash", CLUSTER_SH, "restart-apiserver", self.cluster.dir],
                                     capture_output=True, text=True, timeout=300, env=self.cluster.env)

    def done(self, timeout=300):
        self.join(timeout)
        assert self.result is not None and self.result.returncode == 0, self.result
        wait(lambda: _api_up(self.cluster), 60, "the API server ready")


def test_prepare_through_an_api_server_restart(cluster, agent):
    classes = apply_classes(cluster)
    a = agent("t4x2.yaml", POLICY, dra_args(cluster) + ["--cdi-hook", ""])
    dra_client, c = None, None
    try:
        wait(lambda: slice_devices(slices(cluster)) == ["gpu-0", "gpu-1"], 120, "the agent's slice")
        # a claim allocated on gpu-0 (written as a scheduler would; no pod: the calls are the test's)
        name = PREFIX + "direct"
        cluster.kubectl("apply", "-f", "-", input=claim_yaml(name))
        patch = {"status": {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": cluster.node_name, "device": "gpu-0"}]}}}}
        cluster.kubectl("patch", "resourceclaim", "-n", NS, name, "--subresource=status", "--type=merge",
                        "-p", json.dumps(patch))
        uid = cluster.get("resourceclaim", "-n", NS, name)["metadata"]["uid"]
        dra_client, c = kubelet_client(cluster)
        # and a pod's claim, the API server restarted as the pod is scheduled and prepared
        pod = PREFIX + "pod"
        cluster.kubectl("apply", "-f", "-", input=claim_yaml(pod, selector=f'device.attributes["{DRIVER}"].index == 1'))
        create_claim_pod(cluster, pod, pod, "sleep 3600")

        r = Restart(cluster)
        wait(lambda: not _api_up(cluster), 60, "the API server to go down")
        t0 = time.monotonic()
        ans = c.prepare([dra_client.claim(NS, name, uid)])[uid]
        took = time.monotonic() - t0
        print(f"DRA prepare with the API server down: answered in {took:.2f} s: {ans.error!r}")
        assert f"ResourceClaim {NS}/{name} not read" in ans.error, ans
        assert not ans.devices
        assert took < KUBELET_TIMEOUT / 3, f"{took:.1f} s for a claim the API server cannot give"
        assert not os.path.exists(claim_spec_file(cluster, uid)) and uid not in checkpoint(cluster)
        r.done()
        # the kubelet's retry, the API server back (its fail-fast window passes within seconds)
        ans = wait(lambda: (lambda x: not x.error and x)(c.prepare([dra_client.claim(NS, name, uid)])[uid]), 60,
                   "the prepare to succeed with the API server back")
        assert [(d.pool_name, d.device_name) for d in ans.devices] == [(cluster.node_name, "gpu-0")], ans
        assert os.path.exists(claim_spec_file(cluster, uid)) and uid in checkpoint(cluster)
        assert c.unprepare([dra_client.claim(NS, name, uid)])[uid].error == ""
        cluster.kubectl("delete", "resourceclaim", "-n", NS, name)
        cluster.wait_phase(pod, ("Running",), timeout=240)
        puid = cluster.get("resourceclaim", "-n", NS, pod)["metadata"]["uid"]
        assert puid in checkpoint(cluster) and f"prepared {NS}/{pod} ({puid})" in a.log()
    finally:
        if c:
            c.close()
        delete_pods_and_claims(cluster, PREFIX)
        a.stop()
        cluster.kubectl("delete", "deviceclass", *classes, "--ignore-not-found", check=False)
