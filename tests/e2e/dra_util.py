"""Helpers of the DRA e2e tests (test_dra_pods.py, and the sharing and MIG-at-prepare tests): the
simulated two-H100 node and the agent's DRA policy and arguments against the e2e cluster, the
chart's DeviceClasses, ResourceClaims and pods that use them, their allocations and clean-up, the
guard's quota as a shared claim's container sees it, the node's ResourceSlices as the API server
has them, the claims' transient CDI specs, and a kubelet-side gRPC client (tests/dra/dra_client.py)
on the agent's DRA socket."""
import json
import os
import sys

import yaml

import cluster_agent
from e2e import NS, ROOT, wait
from test_guard import CUDA_ERROR_OUT_OF_MEMORY, _kv
from test_pods import CDI

DRIVER = cluster_agent.DRIVER
CHART = cluster_agent.CHART
BUILD_SH = cluster_agent.BUILD_SH
SHARED = f"shared.{DRIVER}"
GIB = 1 << 30
# GPU 0 time-sliced in four replicas: with DRA, one device shared by consumable capacity
SHARED_GPU0 = '{index: "0", mode: time-slicing, replicas: 4, memoryPerReplica: auto}'


def h100_node(mig=()):
    """A simulated node of two H100 80GB (those of an index in MIG in MIG mode, without a layout),
    driver 580.65.06, CUDA 13.0."""
    gpus = "".join("  - model: H100-SXM5-80GB\n" + ("    mig: enabled\n" if i in mig else "") for i in range(2))
    return f'gpus:\n{gpus}driver_version: "580.65.06"\ncuda_version: "13.0"\n'


def dra_policy(*gpus, dra="all", flags=""):
    """The agent's policy: CDI device names (test_pods.CDI) and FLAGS (more lines under flags:), the
    GPU entries GPUS (YAML flow mappings), gpuslice.dra.gpus DRA ("all" or a YAML list)."""
    return CDI + flags + "gpuslice:\n  gpus:\n" + "".join(f"    - {g}\n" for g in gpus) + f"  dra:\n    gpus: {dra}\n"


def case_dirs(cluster, name, node):
    """DIR/NAME with the node description NODE in node.yaml and an empty out/ (the pods' hostPath):
    (the node.yaml path, out)."""
    base = os.path.join(cluster.dir, name)
    out = os.path.join(base, "out")
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        os.unlink(os.path.join(out, f))
    path = os.path.join(base, "node.yaml")
    with open(path, "w") as f:
        f.write(node)
    return path, out


def dra_args(cluster, driver=DRIVER):
    """The agent's flags for the DRA driver on the e2e cluster's kubelet and API server
    (cluster_agent.dra_args, which scripts/run-cluster.sh --dra uses too)."""
    return cluster_agent.dra_args(cluster.kubelet_dir, cluster.kubeconfig, cluster.node_name, driver)


def dra_socket(cluster, driver=DRIVER):
    return os.path.join(cluster.kubelet_dir, "plugins", driver, "dra.sock")


def checkpoint(cluster, driver=DRIVER):
    """The UIDs of the claims the agent holds prepared (its checkpoint)."""
    path = os.path.join(cluster.kubelet_dir, "plugins", driver, "checkpoint.json")
    try:
        with open(path) as f:
            return {c["uid"] for c in json.load(f)["claims"]}
    except FileNotFoundError:
        return set()


def device_classes(driver=DRIVER, extended=False):
    """The chart's DeviceClasses for driver, rendered by the real Helm (without extended resource
    names unless asked: a class serving nvidia.com/gpu would take the other tests' pods)."""
    return cluster_agent.device_classes(driver, extended)


def apply_classes(cluster, driver=DRIVER):
    docs = device_classes(driver)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    return [d["metadata"]["name"] for d in docs]


def slices(cluster, driver=DRIVER):
    """The node's ResourceSlices of driver in the API server."""
    return cluster.get("resourceslices", "--field-selector",
                       f"spec.nodeName={cluster.node_name},spec.driver={driver}")["items"]


def slice_devices(items):
    return sorted(d["name"] for s in items for d in s["spec"].get("devices") or [])


def claim_yaml(name, cls=DRIVER, selector=None):
    req = {"name": "gpu", "exactly": {"deviceClassName": cls}}
    if selector:
        req["exactly"]["selectors"] = [{"cel": {"expression": selector}}]
    return yaml.safe_dump({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                           "metadata": {"name": name, "namespace": NS}, "spec": {"devices": {"requests": [req]}}})


def create_claim(cluster, name, cls=DRIVER, selector=None):
    cluster.kubectl("apply", "-f", "-", input=claim_yaml(name, cls, selector))
    return cluster.get("resourceclaim", "-n", NS, name)


def claim_pod_yaml(cluster, name, claim, script, **opts):
    """A pod (the e2e image) whose container uses the ResourceClaim `claim`; OPTS: Cluster.pod_yaml's
    image, out (a host directory at /out) and env."""
    pod = yaml.safe_load(cluster.pod_yaml(name, {}, script, **opts))
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    return yaml.safe_dump(pod)


def create_claim_pod(cluster, name, claim, script):
    cluster.kubectl("apply", "-f", "-", input=claim_pod_yaml(cluster, name, claim, script))


def delete_pods_and_claims(cluster, prefix):
    """The test namespace's pods (waited for: their claims are unprepared while the agent serves)
    and the ResourceClaims named PREFIX..."""
    cluster.kubectl("delete", "pods", "-n", NS, "--all", "--grace-period=1", "--wait=true", check=False, timeout=120)
    names = cluster.kubectl("get", "resourceclaims", "-n", NS, "-o", "name", check=False).stdout.split()
    mine = [n for n in names if n.split("/", 1)[1].startswith(prefix)]
    if mine:
        cluster.kubectl("delete", "-n", NS, "--wait=false", *mine, check=False)


def claim(name, cls=DRIVER, capacity=None, selector=None, config=None):
    """claim_yaml's ResourceClaim (a dict), its request asking CAPACITY (e.g. {"memory": "20Gi"}),
    with CONFIG as the driver's opaque parameters (a GpuConfig)."""
    c = yaml.safe_load(claim_yaml(name, cls, selector))
    if capacity:
        c["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": capacity}
    if config:
        c["spec"]["devices"]["config"] = [{"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": config}}]
    return c


def shared_claim(name, gib):
    """A claim of GIB GiB of memory on a shared GPU."""
    return claim(name, SHARED, {"memory": f"{gib}Gi"})


def claim_pod(cluster, name, claim, script, **opts):
    """claim_pod_yaml's pod, a dict."""
    return yaml.safe_load(claim_pod_yaml(cluster, name, claim, script, **opts))


def apply_objects(cluster, *objs):
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objs))


def allocation(cluster, name):
    """The one device result of claim NAME's allocation, asserted the driver's on the node."""
    a = cluster.get("resourceclaim", "-n", NS, name).get("status", {}).get("allocation")
    assert a, f"claim {name} not allocated"
    (r,) = a["devices"]["results"]
    assert r["driver"] == DRIVER and r["pool"] == cluster.node_name, r
    return r


def claim_uid(cluster, name):
    return cluster.get("resourceclaim", "-n", NS, name)["metadata"]["uid"]


def delete_prefixed(cluster, prefix, kinds=("pods", "resourceclaims")):
    """The test namespace's objects of KINDS named PREFIX..., kind after kind, each waited for (the
    pods first: their claims are unprepared while the agent serves)."""
    for kind in kinds:
        names = cluster.kubectl("get", kind, "-n", NS, "-o", "name", check=False).stdout.split()
        mine = [n for n in names if n.split("/", 1)[1].startswith(prefix)]
        if mine:
            cluster.kubectl("delete", "-n", NS, "--grace-period=1", "--wait=true", *mine, check=False, timeout=180)


def guard_script(name, quota_gib):
    """A container's script for a shared claim of QUOTA_GIB: tests/guard's program on the simulated
    CUDA driver allocates within the quota (less one GiB: the context's share), then past it; what
    it got goes to /out/NAME."""
    return ("{\nsed 's/^/preload /' /etc/ld.so.preload\n"
            f"/opt/gs/guard_app alloc 1G {quota_gib - 2} | sed 's/^/within /'\n"
            f"/opt/gs/guard_app alloc 1G {quota_gib + 2} | sed 's/^/past /'\n"
            f"echo done\n}} > /out/{name} 2>&1\nsleep 3600")


def check_guard_quota(msg, gib, guard_dir):
    """What guard_script's container wrote (MSG) for a claim of GIB GiB, and the claim's guard
    files in GUARD_DIR: the guard preloaded, held to the claim's memory; returns the allocations
    past the quota (_kv)."""
    preload = [line.split(" ", 1)[1] for line in msg.splitlines() if line.startswith("preload ")]
    assert preload and preload[0].endswith("libgpuslice-guard.so"), msg
    within, past = _kv(msg, "within"), _kv(msg, "past")
    assert within.get("ok") == str(gib - 2) and within.get("first_err") == "0", msg
    # the quota is the claim's consumedCapacity.memory: GIB - 1 or GIB of the GIB + 2 asked (the
    # context's share), though the simulated driver has 80 GiB free
    assert int(past.get("ok", "-1")) in (gib - 1, gib), msg
    assert past.get("first_err") == str(CUDA_ERROR_OUT_OF_MEMORY), msg
    with open(os.path.join(guard_dir, "limits")) as f:
        limits = f.read()
    assert f" {gib * GIB} 25\n" in limits, limits  # compute: one replica's share (not asked)
    return past


def claim_spec_file(cluster, uid, kind="gpuslice.io/gpu"):
    """The transient CDI spec of a prepared claim (src/dra/prepare.h: dra_claim_spec_file)."""
    return os.path.join(cluster.cdi_dir, f"{kind.replace('/', '-')}_claim-{uid}.json")


def wait_gone(path, timeout, what):
    return wait(lambda: not os.path.exists(path), timeout, what)


def kubelet_client(cluster, driver=DRIVER):
    """(tests/dra's dra_client module, a DraClient on the agent's sockets): calls as the kubelet
    makes them, on a connection of their own beside the kubelet's."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "dra"))
    import dra_client  # noqa: E402 (generates its stubs with grpc_tools at import)
    c = dra_client.DraClient(os.path.join(cluster.kubelet_dir, "plugins_registry", f"{driver}-reg.sock"), timeout=60)
    c.get_info()
    return dra_client, c
