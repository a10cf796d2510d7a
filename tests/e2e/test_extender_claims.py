"""ResourceClaims in the scheduler extender's model (gpuslice's DRA driver's claims), in the real
cluster: `gpuslice agent --dra` on a simulated node of two H100 80GB, GPU 0 the DRA driver's
(gpuslice.dra.gpus, time-sliced: one shared device by consumable capacity) and GPU 1 the device
plugin's (nvidia.com/gpu); `gpuslice extender --kubeconfig` watches the Node (its gpuslice.io/gpu.*
labels: the device plugin's GPU), the driver's ResourceSlices (GPU 0 is DRA's), the claims and the
pods; the real kube-scheduler runs with it as filter, prioritize and bind, without
managedResources (pods whose GPU comes from a claim ask for no extended resource, so only then are
they sent to the extender).

- Two pods with 20Gi and 40Gi claims of shared.gpu.gpuslice.io run on GPU 0 (the scheduler's DRA
  allocator picks the device, the extender passes the node and binds them).
- A third pod with a 30Gi claim stays Pending (the scheduler's DRA plugin refuses first), and the
  extender's own filter, asked with that pod, refuses the node with the per-GPU reason from the
  claims' consumedCapacity: "no single time-sliced DRA GPU has 30 GiB free (free per GPU: ...)".
- A 15Gi claim: the extender's filter passes the node, and the pod runs.
- A pod asking nvidia.com/gpu: 1 is bound by the extender to GPU 1 (its gpuslice.io/gpu-index),
  never the DRA GPU 0, and its container sees GPU 1's device node; the extender refuses a pod
  asking two (unresolvable: GPU 0 is the DRA driver's).
The scheduler is restarted with its own configuration afterwards, the labels removed, the pods
and claims deleted while the agent still serves (so that they are unprepared)."""
import json
import os
import time

import pytest
import yaml

from dra_util import DRIVER, GIB, SHARED_GPU0, allocation, apply_classes, apply_objects, case_dirs, claim_pod, \
    delete_prefixed, dra_args, dra_policy, h100_node, shared_claim, slice_devices, slices
from e2e import NS, E2EError, extender_open, start_extender, wait, write_sched_config
from test_extender import features, metrics, restart_scheduler

NODE = h100_node()
POLICY = dra_policy(SHARED_GPU0, dra='["0"]')
PREFIX = "ext-claims-"
LABEL = "gpuslice.io/gpu."
ANN = "gpuslice.io/gpu-index"
MIB = 1 << 20
SCRIPT = ("ls /dev | grep -E '^nvidia[0-9]+$' | tr '\\n' ' ' > /out/$NAME.tmp; mv /out/$NAME.tmp /out/$NAME; "
          "sleep 3600")


def _metrics(cluster, addr):
    """The extender's metrics, {} while it does not answer yet."""
    try:
        return metrics(cluster, addr)
    except OSError:
        return {}


def post(cluster, addr, verb, body):
    """The extender's VERB with BODY, as the scheduler calls it (its client certificate)."""
    with extender_open(cluster, addr, f"/gpuslice/{verb}", body) as r:
        return json.loads(r.read())


def quantity_bytes(q):
    units = {"Ki": 1 << 10, "Mi": MIB, "Gi": GIB, "Ti": 1 << 40}
    for u, m in units.items():
        if q.endswith(u):
            return int(q[:-len(u)]) * m
    return int(q)


def fmt(b):
    return f"{b // GIB} GiB" if b % GIB == 0 else f"{b // MIB} MiB"


def _claim(name, gib):
    return shared_claim(PREFIX + name, gib)


def _claim_pod(cluster, name):
    return claim_pod(cluster, PREFIX + name, PREFIX + name, "sleep 3600")


def _gpu_pod(cluster, name, count, out):
    y = cluster.pod_yaml(PREFIX + name, {"nvidia.com/gpu": count}, f"NAME={name}; " + SCRIPT)
    y += (f"    volumeMounts:\n    - {{name: out, mountPath: /out}}\n  volumes:\n  - name: out\n"
          f"    hostPath: {{path: {out}, type: DirectoryOrCreate}}\n")
    return yaml.safe_load(y)


@pytest.fixture
def setup(cluster, agent):
    """The DeviceClasses, the agent (DRA driver on GPU 0, device plugin on GPU 1), the Node labelled
    from its features file, the extender, the scheduler with the extender; all undone after."""
    classes = apply_classes(cluster)
    node, out = case_dirs(cluster, "ext-claims", NODE)
    addr = f"127.0.0.1:{cluster.port_base + 412}"
    labelled, ext, restarted = [], None, False
    try:
        a = agent(node, POLICY, dra_args(cluster) + ["--cdi-hook", ""])
        wait(lambda: slice_devices(slices(cluster)) == ["gpu-0"] or E2EError(slice_devices(slices(cluster))), 120,
             "the agent's ResourceSlice of GPU 0")
        cluster.wait_allocatable({"nvidia.com/gpu": 1}, timeout=120)
        labels = wait(lambda: {k: v for k, v in features(a).items() if k.startswith(LABEL)}, 30,
                      "the agent's gpu labels in its features file")
        assert labels[LABEL + "count"] == "1", labels  # the device plugin's GPU only
        labelled.extend(labels)
        cluster.kubectl("label", "node", cluster.node_name, "--overwrite", *[f"{k}={v}" for k, v in labels.items()])
        ext = start_extender(cluster, "extender-claims", addr)
        wait(lambda: _metrics(cluster, addr).get("gpuslice_extender_nodes") == 1, 60, "the extender's model of the Node")
        # filter, prioritize and bind for every pod (no managedResources: a pod with only claims asks
        # for no extended resource, and the scheduler sends an extender only pods asking for one of
        # its managedResources when it has any)
        conf = write_sched_config(os.path.join(os.path.dirname(node), "scheduler.yaml"), cluster,
                                  f"https://{addr}/gpuslice")
        restarted = True
        restart_scheduler(cluster, conf)
        yield a, addr, out, ext.proc, ext.log_path
    finally:
        delete_prefixed(cluster, PREFIX)
        if restarted:
            restart_scheduler(cluster, None)
        if ext:
            ext.stop(10)
        if labelled:
            cluster.kubectl("label", "node", cluster.node_name, *[k + "-" for k in labelled], check=False)
        cluster.kubectl("delete", "deviceclass", *classes, "--ignore-not-found", check=False)


def _allocation(cluster, name):
    return allocation(cluster, PREFIX + name)


def _filter(cluster, addr, name):
    """The extender's filter answer for the pod as the API server has it, on the node."""
    return post(cluster, addr, "filter", {"Pod": cluster.pod(PREFIX + name), "NodeNames": [cluster.node_name]})


def test_claims_in_the_extender(cluster, setup):
    a, addr, out, proc, log_path = setup
    t0 = time.monotonic()
    node = cluster.node_name
    (dev,) = [d for s in slices(cluster) for d in s["spec"]["devices"]]
    capacity = quantity_bytes(dev["capacity"]["memory"]["value"])

    # 20Gi and 40Gi claims: both on the shared GPU 0, placed through the extender
    for name, gib in (("m20", 20), ("m40", 40)):
        apply_objects(cluster, _claim(name, gib), _claim_pod(cluster, name))
        cluster.wait_phase(PREFIX + name, ("Running",), timeout=180)
        r = _allocation(cluster, name)
        assert r["device"] == "gpu-0" and quantity_bytes(r["consumedCapacity"]["memory"]) == gib * GIB, r
    wait(lambda: metrics(cluster, addr).get("gpuslice_extender_binds_total", 0) >= 2, 30, "the extender's binds")

    # 30Gi: Pending; the extender's filter refuses the node per GPU (20 GiB free of 80, less 60 taken)
    apply_objects(cluster, _claim("m30", 30), _claim_pod(cluster, "m30"))

    def unschedulable():
        pod = cluster.pod(PREFIX + "m30")
        c = {c["type"]: c for c in pod["status"].get("conditions", [])}.get("PodScheduled")
        return (c and c["status"] == "False" and c.get("reason") == "Unschedulable") or \
            E2EError(f"conditions {pod['status'].get('conditions')}")
    wait(unschedulable, 120, "the 30Gi claim's pod reported unschedulable")
    free = capacity - 60 * GIB
    reason = (f"claim {PREFIX}m30 (request gpu): no single time-sliced DRA GPU has 30 GiB free "
              f"(free per GPU: {fmt(free)}; {fmt(free)} in all)")
    ans = wait(lambda: (lambda r: r if node in (r.get("FailedNodes") or {}) else E2EError(r))(
        _filter(cluster, addr, "m30")), 60, "the extender's filter refusing the 30Gi claim")
    assert ans["FailedNodes"][node] == reason, ans
    assert not ans.get("NodeNames") and not ans.get("Error"), ans
    assert cluster.pod(PREFIX + "m30")["status"].get("phase") == "Pending"
    print(f"extender on the 30Gi claim: {ans['FailedNodes'][node]}")

    # 15Gi: the extender passes the node, and the pod runs there
    apply_objects(cluster, _claim("m15", 15))
    wait(lambda: cluster.get("resourceclaim", "-n", NS, PREFIX + "m15"), 30, "the 15Gi claim")
    apply_objects(cluster, _claim_pod(cluster, "m15"))
    ans = _filter(cluster, addr, "m15")
    assert ans.get("NodeNames") == [node] and not ans.get("FailedNodes"), ans
    cluster.wait_phase(PREFIX + "m15", ("Running",), timeout=180)
    assert _allocation(cluster, "m15")["device"] == "gpu-0"
    # now 20 GiB less 15 are free: the 30Gi claim is refused with the new free share
    free -= 15 * GIB
    wait(lambda: fmt(free) in (_filter(cluster, addr, "m30").get("FailedNodes") or {}).get(node, "") or
         E2EError(_filter(cluster, addr, "m30")), 60, "the extender counting the 15Gi claim")

    # nvidia.com/gpu: 1 is bound by the extender to GPU 1, never the DRA GPU 0
    apply_objects(cluster, _gpu_pod(cluster, "g1", 1, out))
    cluster.wait_phase(PREFIX + "g1", ("Running",), timeout=120)
    pod = cluster.pod(PREFIX + "g1")
    assert pod["metadata"].get("annotations", {}).get(ANN) == "1", pod["metadata"]
    seen = wait(lambda: (lambda p: open(p).read().split() if os.path.exists(p) else None)(
        os.path.join(out, "g1")), 60, "the device nodes g1 writes")
    uuid1 = a.uuids()[1]
    minor1 = next(g["minor"] for g in json.loads(a.sim("inspect", "--json").stdout)["gpus"] if g["uuid"] == uuid1)
    assert seen == [f"nvidia{minor1}"], seen
    # two GPUs: the device plugin serves one of the node's two
    two = _gpu_pod(cluster, "g2", 2, out)
    two["metadata"]["uid"] = "ext-claims-g2-uid"
    ans = post(cluster, addr, "filter", {"Pod": two, "NodeNames": [node]})
    why = (ans.get("FailedAndUnresolvableNodes") or {}).get(node, "")
    assert "the device plugin serves 1 of the node's 2: GPU 0 the DRA driver's" in why, ans

    m = metrics(cluster, addr)
    assert m["gpuslice_extender_binds_total"] >= 4, m  # m20, m40, m15, g1
    assert proc.poll() is None
    with open(log_path, errors="replace") as f:
        log = f.read()
    assert f"ResourceSlices of {DRIVER} from the API server" in log, log[-3000:]
    assert a.alive()
    print(f"test_extender_claims: {time.monotonic() - t0:.1f} s")
