"""DRA sharing and MIG on demand in the real cluster (issue 19): `gpuslice agent --dra` on a
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

from dra_util import DRIVER, apply_classes, checkpoint, claim_pod_yaml, claim_spec_file, claim_yaml, dra_args, \
    slice_devices, slices, wait_gone
from e2e import NS, ROOT, E2EError, wait, written
from test_guard import CUDA_ERROR_OUT_OF_MEMORY, IMAGE, _image, _kv
from test_pods import SHOW, parse

NODE = """gpus:
  - model: H100-SXM5-80GB
  - model: H100-SXM5-80GB
    mig: enabled
driver_version: "580.65.06"
cuda_version: "13.0"
"""
POLICY = """version: v1
flags:
  plugin:
    deviceListStrategy: cdi-cri
  migStrategy: mixed
gpuslice:
  gpus:
    - index: "0"
      mode: time-slicing
      replicas: 4
      memoryPerReplica: auto
    - index: "1"
      mode: mig
  dra:
    gpus: all
"""
SHARED = f"shared.{DRIVER}"
MIG = f"mig.{DRIVER}"
GIB = 1 << 30
PREFIX = "dra-share-"


def _claim(name, cls, capacity=None, selector=None, config=None):
    c = yaml.safe_load(claim_yaml(PREFIX + name, cls, selector))
    if capacity:
        c["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": capacity}
    if config:
        c["spec"]["devices"]["config"] = [{"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": config}}]
    return c


def _pod(cluster, name, script, out, image=None, env=None):
    """A pod with claim PREFIX+name whose script writes what it saw to OUT/NAME (a hostPath)."""
    pod = yaml.safe_load(claim_pod_yaml(cluster, PREFIX + name, PREFIX + name, script))
    main = pod["spec"]["containers"][0]
    if image:
        main["image"] = image
    main["env"] = [{"name": k, "value": v} for k, v in (env or {}).items()]
    main["volumeMounts"] = [{"name": "out", "mountPath": "/out"}]
    pod["spec"]["volumes"] = [{"name": "out", "hostPath": {"path": out, "type": "Directory"}}]
    return pod


def _create(cluster, *objs):
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objs))


def _result(cluster, name):
    a = cluster.get("resourceclaim", "-n", NS, PREFIX + name).get("status", {}).get("allocation")
    assert a, f"claim {PREFIX + name} not allocated"
    (r,) = a["devices"]["results"]
    assert r["driver"] == DRIVER and r["pool"] == cluster.node_name, r
    return r


_written = written   # what pod PREFIX+NAME wrote to OUT/NAME (e2e.py)


def _uid(cluster, name):
    return cluster.get("resourceclaim", "-n", NS, PREFIX + name)["metadata"]["uid"]


def _gis(a, gpu=1):
    """The (GI profile, placement start) of GPU's instances and its MIG devices, from the sim's state."""
    g = json.loads(a.sim("inspect", "--json").stdout)["gpus"][gpu]
    return [(i["profile_id"], i["placement"]["start"]) for i in g["mig"]["gpu_instances"]], g["mig"]["devices"]


def _cleanup(cluster):
    names = cluster.kubectl("get", "pods", "-n", NS, "-o", "name", check=False).stdout.split()
    mine = [n for n in names if n.split("/", 1)[1].startswith(PREFIX)]
    if mine:
        cluster.kubectl("delete", "-n", NS, "--grace-period=1", "--wait=true", *mine, check=False, timeout=180)
    names = cluster.kubectl("get", "resourceclaims", "-n", NS, "-o", "name", check=False).stdout.split()
    mine = [n for n in names if n.split("/", 1)[1].startswith(PREFIX)]
    if mine:
        cluster.kubectl("delete", "-n", NS, "--wait=false", *mine, check=False)


@pytest.fixture
def dra(cluster, agent):
    """The agent on the two-H100 node, its slices in the API server, the chart's classes; its pods
    and claims deleted after the test while it still serves (so they are unprepared)."""
    classes = apply_classes(cluster)
    base = os.path.join(cluster.dir, "dra-share")
    os.makedirs(base, exist_ok=True)
    node = os.path.join(base, "node.yaml")
    with open(node, "w") as f:
        f.write(NODE)
    out = os.path.join(base, "out")
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        os.unlink(os.path.join(out, f))
    a = agent(node, POLICY, dra_args(cluster) + ["--cdi-hook", ""])
    try:
        wait(lambda: "gpu-0" in slice_devices(slices(cluster)) and
             any(d.startswith("gpu-1-mig-3g40gb-") for d in slice_devices(slices(cluster))), 120,
             "the agent's ResourceSlices (the shared GPU and the MIG placements)")
        yield a, out
    finally:
        _cleanup(cluster)
        cluster.kubectl("delete", "deviceclass", *classes, "--ignore-not-found", check=False)


def _guard_script(name, quota_gib):
    """Within the quota (less one GiB: the context's share), then past it."""
    return ("{\nsed 's/^/preload /' /etc/ld.so.preload\n"
            f"/opt/gs/guard_app alloc 1G {quota_gib - 2} | sed 's/^/within /'\n"
            f"/opt/gs/guard_app alloc 1G {quota_gib + 2} | sed 's/^/past /'\n"
            f"echo done\n}} > /out/{name} 2>&1\nsleep 3600")


def test_shared_gpu_memory_claims_enforced_by_the_guard(cluster, dra):
    if os.environ.get("GS_SANITIZED") == "1":
        pytest.skip("sanitizer build: guard_app carries ASan/UBSan, whose runtime cannot start after the "
                    "preloaded guard (test_guard.py); the guard in a pod runs in the normal build's e2e stage")
    a, out = dra
    _image(cluster)
    env = {"FAKE_CUDA_TOTAL_MIB": str(80 * 1024)}  # the simulated CUDA driver: a whole H100 free
    for name, gib in (("m20", 20), ("m40", 40)):
        _create(cluster, _claim(name, SHARED, {"memory": f"{gib}Gi"}),
                _pod(cluster, name, _guard_script(name, gib), out, IMAGE, env))
    for name, gib in (("m20", 20), ("m40", 40)):
        cluster.wait_phase(PREFIX + name, ("Running",), timeout=180)
        r = _result(cluster, name)
        assert r["device"] == "gpu-0" and r.get("shareID"), r
        msg = _written(out, name)
        preload = [line.split(" ", 1)[1] for line in msg.splitlines() if line.startswith("preload ")]
        assert preload and preload[0].endswith("libgpuslice-guard.so"), msg
        within, past = _kv(msg, "within"), _kv(msg, "past")
        assert within.get("ok") == str(gib - 2) and within.get("first_err") == "0", msg
        # the quota is the claim's consumedCapacity.memory: GIB - 1 or GIB of the GIB + 2 asked (the
        # context's share), though the simulated driver has 80 GiB free
        assert int(past.get("ok", "-1")) in (gib - 1, gib), msg
        assert past.get("first_err") == str(CUDA_ERROR_OUT_OF_MEMORY), msg
        uid = _uid(cluster, name)
        with open(os.path.join(a.guard_root, f"claim-{uid}", "limits")) as f:
            limits = f.read()
        assert f" {gib * GIB} 25\n" in limits, limits  # compute: one replica's share (not asked)
        print(f"DRA shared {gib}Gi claim: {gib + 2} x 1 GiB asked, {past['ok']} allocated, then error "
              f"{past['first_err']}")
    # 60 GiB of the H100's 79.6 are taken: a third pod asking 30Gi stays Pending
    _create(cluster, _claim("m30", SHARED, {"memory": "30Gi"}), _pod(cluster, "m30", "sleep 3600", out))

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
    _create(cluster, _claim("mig", MIG, selector=sel), _pod(cluster, "mig", script, out))
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
    _create(cluster, _claim("badcfg", SHARED, {"memory": "1Gi"}, config=bad),
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
