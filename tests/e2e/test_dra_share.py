"""DRA sharing and MIG on demand in the real cluster: `gpuslice agent --dra` on a
simulated node of two H100 80GB, both given to DRA (gpuslice.dra.gpus: all): GPU 0 time-sliced
(one device shared by consumable capacity), GPU 1 in MIG mode without a layout (every free
placement a device, made on demand). The chart's DeviceClasses; the real scheduler allocates,
the real kubelet calls NodePrepareResources, containerd applies the claim's CDI spec.

- Two pods with 20Gi and 40Gi memory claims run on the shared GPU together; a third asking 30Gi
  stays Pending (Unschedulable). Inside each, a program on the simulated CUDA driver (80 GiB
  free, FAKE_CUDA_TOTAL_MIB) is held by the guard to its claim's consumedCapacity.memory: it gets
  less than the quota, and past it CUDA_ERROR_OUT_OF_MEMORY (the guard's image and helpers are
  test_guard.py's).
- A 3g.40gb claim: the GI is created at prepare on the placement the scheduler chose (the sim's
  state, `gpuslice --sim NODE inspect`), the container has its GPU's node and the instance's
  capability nodes through CDI, and deleting the pod destroys the instance.
- A malformed GpuConfig opaque config in a claim: the pod does not start and its events name the
  error; examples/dra/gpuconfig.yaml is accepted by the API server (dry-run=server).

What the containers saw comes back through a hostPath directory (the pods must stay running
while the others are checked: a finished pod's claim is deallocated)."""
import json
import os
import re

import pytest
import yaml

from dra_util import DRIVER, SHARED, SHARED_GPU0, allocation, apply_classes, apply_objects, case_dirs, \
    check_guard_quota, checkpoint, claim, claim_pod, claim_spec_file, claim_uid, delete_prefixed, dra_args, \
    dra_policy, guard_script, h100_node, slice_devices, slices, wait_gone
from e2e import NS, ROOT, E2EError, wait, written
from test_guard import IMAGE, _image
from test_pods import SHOW, parse

NODE = h100_node(mig=(1,))
POLICY = dra_policy(SHARED_GPU0, '{index: "1", mode: mig}', flags="  migStrategy: mixed\n")
MIG = f"mig.{DRIVER}"
PREFIX = "dra-share-"


def _claim(name, cls, capacity=None, selector=None, config=None):
    return claim(PREFIX + name, cls, capacity, selector, config)


def _pod(cluster, name, script, out, image=None, env=None):
    """A pod with claim PREFIX+name whose script writes what it saw to OUT/NAME (a hostPath)."""
    return claim_pod(cluster, PREFIX + name, PREFIX + name, script, out=out, image=image, env=env)


def _result(cluster, name):
    return allocation(cluster, PREFIX + name)


_written = written   # what pod PREFIX+NAME wrote to OUT/NAME (e2e.py)


def _uid(cluster, name):
    return claim_uid(cluster, PREFIX + name)


def _gis(a, gpu=1):
    """The (GI profile, placement start) of GPU's instances and its MIG devices, from the sim's state."""
    g = json.loads(a.sim("inspect", "--json").stdout)["gpus"][gpu]
    return [(i["profile_id"], i["placement"]["start"]) for i in g["mig"]["gpu_instances"]], g["mig"]["devices"]


@pytest.fixture
def dra(cluster, agent):
    """The agent on the two-H100 node, its slices in the API server, the chart's classes; its pods
    and claims deleted after the test while it still serves (so they are unprepared)."""
    classes = apply_classes(cluster)
    node, out = case_dirs(cluster, "dra-share", NODE)
    a = agent(node, POLICY, dra_args(cluster) + ["--cdi-hook", ""])
    try:
        wait(lambda: "gpu-0" in slice_devices(slices(cluster)) and
             any(d.startswith("gpu-1-mig-3g40gb-") for d in slice_devices(slices(cluster))), 120,
             "the agent's ResourceSlices (the shared GPU and the MIG placements)")
        yield a, out
    finally:
        delete_prefixed(cluster, PREFIX)
        cluster.kubectl("delete", "deviceclass", *classes, "--ignore-not-found", check=False)


def test_shared_gpu_memory_claims_enforced_by_the_guard(cluster, dra):
    if os.environ.get("GS_SANITIZED") == "1":
        pytest.skip("sanitizer build: guard_app carries ASan/UBSan, whose runtime cannot start after the "
                    "preloaded guard (test_guard.py); the guard in a pod runs in the normal build's e2e stage")
    a, out = dra
    _image(cluster)
    env = {"FAKE_CUDA_TOTAL_MIB": str(80 * 1024)}  # the simulated CUDA driver: a whole H100 free
    for name, gib in (("m20", 20), ("m40", 40)):
        apply_objects(cluster, _claim(name, SHARED, {"memory": f"{gib}Gi"}),
                _pod(cluster, name, guard_script(name, gib), out, IMAGE, env))
    for name, gib in (("m20", 20), ("m40", 40)):
        cluster.wait_phase(PREFIX + name, ("Running",), timeout=180)
        r = _result(cluster, name)
        assert r["device"] == "gpu-0" and r.get("shareID"), r
        past = check_guard_quota(_written(out, name), gib, os.path.join(a.guard_root, f"claim-{_uid(cluster, name)}"))
        print(f"DRA shared {gib}Gi claim: {gib + 2} x 1 GiB asked, {past['ok']} allocated, then error "
              f"{past['first_err']}")
    # 60 GiB of the H100's 79.6 are taken: a third pod asking 30Gi stays Pending
    apply_objects(cluster, _claim("m30", SHARED, {"memory": "30Gi"}), _pod(cluster, "m30", "sleep 3600", out))

    def unschedulable():
        pod = cluster.pod(PREFIX + "m30")
        conds = {c["type"]: c for c in pod["status"].get("conditions", [])}
        c = conds.get("PodScheduled")
        return (c and c["status"] == "False" and c.get("reason") == "Unschedulable") or \
            E2EError(f"conditions {pod['status'].get('conditions')}")
    wait(unschedulable, 120, "the 30Gi claim's pod reported unschedulable")
    assert cluster.pod(PREFIX + "m30")["status"].get("phase") == "Pending"
    assert not cluster.get("resourceclaim", "-n", NS, PREFIX + "m30").get("status", {}).get("allocation")
    # the 20Gi pod gone, its claim unprepared (guard files and spec removed): the 30Gi one fits
    uid20 = _uid(cluster, "m20")
    cluster.kubectl("delete", "pod", "-n", NS, PREFIX + "m20", "--grace-period=1")
    wait_gone(os.path.join(a.guard_root, f"claim-{uid20}"), 120, "the 20Gi claim's guard files")
    wait_gone(claim_spec_file(cluster, uid20), 60, "the 20Gi claim's CDI spec")
    cluster.kubectl("delete", "resourceclaim", "-n", NS, PREFIX + "m20")
    cluster.wait_phase(PREFIX + "m30", ("Running",), timeout=180)
    assert _result(cluster, "m30")["device"] == "gpu-0"


def test_mig_claim_made_on_the_chosen_placement_and_destroyed(cluster, dra):
    a, out = dra
    assert _gis(a)[0] == []
    script = SHOW.replace("> /dev/termination-log", "> /out/mig") + "\necho done >> /out/mig\nsleep 3600"
    sel = f'device.attributes["{DRIVER}"].profile == "3g.40gb"'
    apply_objects(cluster, _claim("mig", MIG, selector=sel), _pod(cluster, "mig", script, out))
    cluster.wait_phase(PREFIX + "mig", ("Running",), timeout=180)
    r = _result(cluster, "mig")
    m = re.fullmatch(r"gpu-1-mig-3g40gb-9-([0-9]+)", r["device"])
    assert m, r
    start = int(m.group(1))
    made, devs = _gis(a)
    assert made == [(9, start)], (made, r)   # exactly the placement the scheduler chose
    assert len(devs) == 1, devs
    seen = parse(_written(out, "mig"))
    uid = _uid(cluster, "mig")
    assert seen["env"].get("GPUSLICE_DRA_DEVICES") == devs[0]["uuid"], seen["env"]
    with open(claim_spec_file(cluster, uid)) as f:
        spec_nodes = [n["path"] for n in json.load(f)["devices"][0]["containerEdits"]["deviceNodes"]]
    caps = [n for n in spec_nodes if n.startswith("/dev/nvidia-caps/")]
    assert len(caps) == 2, spec_nodes      # the GI's and the CI's access nodes
    for n in spec_nodes:
        assert n in seen["node"], (n, seen["node"])
    gpu_nodes = sorted(n for n in seen["node"] if n[len("/dev/nvidia"):].isdigit())
    assert len(gpu_nodes) == 1, seen["node"]
    print(f"DRA MIG on demand: 3g.40gb at slice {start}, {devs[0]['uuid']}, caps {caps}")
    # deleting the pod unprepares the claim: the instance is destroyed
    cluster.kubectl("delete", "pod", "-n", NS, PREFIX + "mig", "--grace-period=1")
    wait(lambda: _gis(a)[0] == [], 120, "the MIG instance destroyed after the pod is gone")
    wait_gone(claim_spec_file(cluster, uid), 60, "the MIG claim's CDI spec")
    wait(lambda: uid not in checkpoint(cluster), 60, "the MIG claim out of the checkpoint")


def test_malformed_gpu_config_named_in_the_pods_events(cluster, dra):
    a, out = dra
    bad = {"apiVersion": "gpuslice.io/v1alpha1", "kind": "GpuConfig", "sharing": {"strategy": "Fast"}}
    apply_objects(cluster, _claim("badcfg", SHARED, {"memory": "1Gi"}, config=bad),
            _pod(cluster, "badcfg", "sleep 3600", out))
    want = "sharing.strategy: 'Fast' is not TimeSlicing or MPS"
    ev = wait(lambda: [e for e in cluster.events(PREFIX + "badcfg") if want in e], 180,
              "the pod's event naming the GpuConfig's error")
    print(f"DRA malformed GpuConfig: event {ev[0]!r}")
    p = cluster.pod(PREFIX + "badcfg")
    assert p["status"].get("phase") == "Pending" and not p["status"].get("containerStatuses", [{}])[0].get(
        "state", {}).get("running"), p["status"]
    assert not os.path.exists(claim_spec_file(cluster, _uid(cluster, "badcfg")))


def test_example_gpu_configs_accepted(cluster):
    """examples/dra/gpuconfig.yaml (docs/dra.md) as the API server validates it."""
    with open(os.path.join(ROOT, "examples", "dra", "gpuconfig.yaml")) as f:
        text = f.read()
    docs = [d for d in yaml.safe_load_all(text) if d]
    for d in docs:
        for cfg in d["spec"]["spec"]["devices"]["config"]:
            params = cfg["opaque"]["parameters"]
            assert cfg["opaque"]["driver"] == DRIVER and params["kind"] == "GpuConfig", cfg
            assert params["apiVersion"] == "gpuslice.io/v1alpha1", cfg
    p = cluster.kubectl("create", "--dry-run=server", "-n", NS, "-f", "-", input=text, check=False)
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr}"
    assert p.stdout.count("(server dry run)") == len(docs), p.stdout
