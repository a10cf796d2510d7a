"""An Xid takes the device out of what the scheduler may allocate: the agent on the
two-T4 node gives DRA both GPUs (whole). A critical Xid on GPU 0 (the simulator's `sim xid 0 79`)
taints gpu-0 in the published ResourceSlice (`gpu.gpuslice.io/xid` = 79, NoSchedule: DRA device
taints, DRADeviceTaints beta and on by default in 1.36; the pool's generation bumped), as NVIDIA's
DRA driver taints its devices:

- the pod running on gpu-0 keeps it (Running, its claim still allocated gpu-0);
- once it is gone, a new claim for GPU 0 is not allocated the tainted device: its pod stays
  Pending (Unschedulable: "cannot allocate all claims");
- a claim that tolerates the taint is allocated gpu-0 (so the taint, not anything else, kept the
  other one out);
- after the policy's quiet period without another Xid the taint is gone (a new generation) and the
  pending pod is allocated gpu-0 and runs."""
import time

import yaml

from dra_util import (DRIVER, apply_classes, claim_yaml, create_claim_pod, delete_pods_and_claims, dra_args,
                      slices)
from e2e import NS, wait

QUIET = 30
POLICY = ("version: v1\nflags:\n  plugin:\n    deviceListStrategy: cdi-cri\n"
          f"gpuslice:\n  dra:\n    gpus: all\n  health:\n    recoveryQuietPeriod: {QUIET}s\n")
GPU0 = f'device.attributes["{DRIVER}"].index == 0'
TAINT = f"{DRIVER}/xid"
SLEEP = "sleep 3600"
PREFIX = "drataint-"


def _device(cluster, name):
    """(the device as the API server has it, the pool's generation)."""
    for s in slices(cluster):
        for d in s["spec"].get("devices") or []:
            if d["name"] == name:
                return d, s["spec"]["pool"]["generation"]
    return None, None


def _claim_pod(cluster, name, tolerate=False):
    claim = yaml.safe_load(claim_yaml(PREFIX + name, selector=GPU0))
    if tolerate:
        claim["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [
            {"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(claim))
    create_claim_pod(cluster, PREFIX + name, PREFIX + name, SLEEP)


def _allocated(cluster, name):
    al = cluster.get("resourceclaim", "-n", NS, PREFIX + name).get("status", {}).get("allocation")
    return [r["device"] for r in al["devices"]["results"]] if al else []


def test_xid_taints_the_device_until_it_recovers(cluster, agent):
    classes = apply_classes(cluster)
    a = agent("t4x2.yaml", POLICY, dra_args(cluster) + ["--cdi-hook", ""])
    try:
        wait(lambda: _device(cluster, "gpu-0")[0] and _device(cluster, "gpu-1")[0], 120, "the slices of both GPUs")
        assert "taints" not in _device(cluster, "gpu-0")[0]
        _claim_pod(cluster, "held")
        cluster.wait_phase(PREFIX + "held", ("Running",), timeout=180)
        assert _allocated(cluster, "held") == ["gpu-0"]
        gen = _device(cluster, "gpu-0")[1]

        t0 = time.monotonic()
        a.sim("sim", "xid", "0", "79")
        d, g = wait(lambda: (lambda d, g: d and d.get("taints") and (d, g))(*_device(cluster, "gpu-0")), 60,
                    "gpu-0 tainted in the slice after Xid 79")
        print(f"DRA taint: Xid 79 on GPU 0 -> gpu-0 tainted in the API server after {time.monotonic() - t0:.1f} s")
        assert [(t["key"], t["value"], t["effect"]) for t in d["taints"]] == [(TAINT, "79", "NoSchedule")], d
        assert d["taints"][0].get("timeAdded"), d  # set by the API server
        assert g > gen, (g, gen)
        assert "taints" not in _device(cluster, "gpu-1")[0]
        # the running pod keeps its device
        assert cluster.pod(PREFIX + "held")["status"]["phase"] == "Running"
        assert _allocated(cluster, "held") == ["gpu-0"]
        cluster.kubectl("delete", "pod", "-n", NS, PREFIX + "held", "--grace-period=1", "--wait=true", timeout=120)
        wait(lambda: not _allocated(cluster, "held"), 60, "the held claim deallocated")

        # a new claim for GPU 0 is not allocated the tainted device
        a.sim("sim", "xid", "0", "79")  # (the quiet period starts again)
        _claim_pod(cluster, "new")
        cond = cluster.wait_unschedulable(PREFIX + "new", timeout=60)
        assert "cannot allocate all claims" in cond.get("message", ""), cond
        assert _allocated(cluster, "new") == []
        # one that tolerates the taint is
        a.sim("sim", "xid", "0", "79")
        _claim_pod(cluster, "tolerating", tolerate=True)
        cluster.wait_phase(PREFIX + "tolerating", ("Running",), timeout=180)
        assert _allocated(cluster, "tolerating") == ["gpu-0"]
        assert cluster.pod(PREFIX + "new")["status"]["phase"] == "Pending"
        assert _device(cluster, "gpu-0")[0].get("taints"), "the taint went before the quiet period"
        cluster.kubectl("delete", "pod", "-n", NS, PREFIX + "tolerating", "--grace-period=1", "--wait=true",
                        timeout=120)

        # healthy again: the taint goes, the pending pod gets gpu-0
        t1 = time.monotonic()
        d, g2 = wait(lambda: (lambda d, g: d and not d.get("taints") and (d, g))(*_device(cluster, "gpu-0")),
                     QUIET + 60, "gpu-0 untainted after the quiet period")
        assert g2 > g, (g2, g)
        cluster.wait_phase(PREFIX + "new", ("Running",), timeout=240)
        assert _allocated(cluster, "new") == ["gpu-0"]
        print(f"DRA taint: gone {time.monotonic() - t1:.1f} s after the tolerating pod left "
              f"(quiet period {QUIET} s from the last Xid)")
    finally:
        delete_pods_and_claims(cluster, PREFIX)
        a.stop()
        cluster.kubectl("delete", "deviceclass", *classes, "--ignore-not-found", check=False)
