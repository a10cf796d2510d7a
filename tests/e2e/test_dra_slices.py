"""What the DRA driver publishes, in the real API server and scheduler (docs/dra.md): the
ResourceSlices `gpuslice dra slices` prints for a simulated node with a whole GPU, a time-sliced
GPU, an MPS GPU and two GPUs in MIG mode (examples/dra/) are created for real (`kubectl create`:
the API server's validation runs) and read back unchanged, so no field of the beta features
(partitionable devices' sharedCounters and consumesCounters, consumable capacity's
allowMultipleAllocations and requestPolicy) was dropped; then, with the chart's DeviceClasses, the
real kube-scheduler allocates ResourceClaims for pods: a CEL selector on the attributes, 20Gi and
40Gi of the shared GPU (and a third claim of 30Gi that no longer fits there), an MPS compute share,
a MIG profile placed on demand. The kubelet side of the driver is not in this test (the pods stay in
ContainerCreating: no plugin prepares the claims), so the driver name is one of its own and every
object is deleted afterwards."""
import json
import os
import re
import subprocess
import tempfile

import pytest
import yaml

from e2e import GPUSLICE, NS, ROOT, E2EError, wait

DRIVER = "slices-e2e.gpuslice.io"
NODE_YAML = os.path.join(ROOT, "examples", "dra", "node.yaml")
POLICY = os.path.join(ROOT, "examples", "dra", "policy.yaml")
CHART = os.path.join(ROOT, "deploy", "helm", "gpuslice")
BUILD_SH = os.path.join(ROOT, "tests", "e2e", "build.sh")
PREFIX = "dra-slices-"
H100 = "NVIDIA H100 80GB HBM3"

_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
           "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "": 1}


def quantity(q):
    """A Kubernetes quantity as an integer (the forms these objects use)."""
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|Pi|k|M|G|T|)", str(q))
    assert m, f"quantity {q!r}"
    return int(m.group(1)) * _SUFFIX[m.group(2)]


def normalized(x, key=None):
    """x with every quantity (capacity values, request policies, counters) as an integer."""
    if isinstance(x, dict):
        return {k: normalized(v, k) for k, v in x.items()}
    if isinstance(x, list):
        return [normalized(v) for v in x]
    if isinstance(x, str) and key in ("value", "default", "min", "max", "step"):
        return quantity(x)
    return x


def slices_of(cluster, state):
    p = subprocess.run([GPUSLICE, "--sim", NODE_YAML, "--sim-state", state, "dra", "slices", "--config", POLICY,
                        "--node", cluster.node_name, "--dra-driver", DRIVER, "--generation", "1"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"gpuslice dra slices: exit {p.returncode}\n{p.stderr}"
    return json.loads(p.stdout)


def device_classes():
    """The chart's DeviceClasses (real Helm), for DRIVER, without extended resource names (a
    class serving nvidia.com/gpu would take the other tests' pods on this node)."""
    b = subprocess.run(["bash", BUILD_SH, "helm"], capture_output=True, text=True, timeout=1800)
    assert b.returncode == 0 and b.stdout.strip(), f"build.sh helm: exit {b.returncode}\n{b.stderr[-3000:]}"
    helm = os.path.join(b.stdout.strip().splitlines()[-1], "helm")
    p = subprocess.run([helm, "template", "gpuslice", CHART, "-s", "templates/dra-deviceclasses.yaml",
                        "--set", "dra.enabled=true", "--set", f"dra.driver={DRIVER}",
                        "--set", "dra.extendedResourceNames=false"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    docs = [d for d in yaml.safe_load_all(p.stdout) if d]
    assert [d["kind"] for d in docs] == ["DeviceClass"] * 4, docs
    return docs


def claim_yaml(name, cls, selector=None, capacity=None):
    req = {"name": "gpu", "exactly": {"deviceClassName": cls}}
    if selector:
        req["exactly"]["selectors"] = [{"cel": {"expression": selector}}]
    if capacity:
        req["exactly"]["capacity"] = {"requests": capacity}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": PREFIX + name, "namespace": NS}, "spec": {"devices": {"requests": [req]}}}


def pod_yaml(cluster, name):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": PREFIX + name, "namespace": NS},
            "spec": {"hostNetwork": True, "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                     "automountServiceAccountToken": False, "enableServiceLinks": False,
                     "resourceClaims": [{"name": "gpu", "resourceClaimName": PREFIX + name}],
                     "containers": [{"name": "main", "image": cluster.image, "imagePullPolicy": "Never",
                                     "command": ["/bin/sh", "-c", "sleep 3600"],
                                     "resources": {"claims": [{"name": "gpu"}]}}]}}


def create(cluster, objs):
    text = "\n---\n".join(json.dumps(o) for o in objs)
    p = cluster.kubectl("create", "-f", "-", input=text, check=False)
    assert p.returncode == 0, f"the API server refused:\n{p.stdout}\n{p.stderr}"
    return p.stdout


def allocation(cluster, name, timeout=120):
    """The claim's status.allocation once the scheduler has made it, and the pod bound to the node."""
    def check():
        c = cluster.get("resourceclaim", "-n", NS, PREFIX + name)
        a = c.get("status", {}).get("allocation")
        if not a:
            pod = cluster.get("pod", "-n", NS, PREFIX + name)
            return E2EError(f"not allocated; pod conditions {pod['status'].get('conditions')}")
        return a
    a = wait(check, timeout, f"the allocation of claim {PREFIX + name}")
    wait(lambda: cluster.get("pod", "-n", NS, PREFIX + name)["spec"].get("nodeName") == cluster.node_name,
         timeout, f"pod {PREFIX + name} bound to {cluster.node_name}")
    results = a["devices"]["results"]
    assert len(results) == 1, a
    r = results[0]
    assert r["driver"] == DRIVER and r["pool"] == cluster.node_name and r["request"] == "gpu", r
    return r


@pytest.fixture(scope="module")
def published(cluster):
    """The node's slices and the chart's classes, created for real; deleted at the end with the
    claims and pods of the tests."""
    with tempfile.TemporaryDirectory(prefix="gs-dra-sim-") as state:
        lst = slices_of(cluster, state)
    classes = device_classes()
    try:
        out = create(cluster, lst["items"])
        assert out.count("created") == len(lst["items"]), out
        create(cluster, classes)
        yield {s["metadata"]["name"]: s for s in lst["items"]}
    finally:
        for kind in ("pod", "resourceclaim"):
            names = cluster.kubectl("get", kind, "-n", NS, "-o", "name", check=False).stdout.split()
            mine = [n for n in names if n.split("/", 1)[1].startswith(PREFIX)]
            if mine:
                cluster.kubectl("delete", "-n", NS, "--grace-period=0", "--force", "--wait=false", *mine, check=False)
        cluster.kubectl("delete", "resourceslice", "--field-selector", f"spec.driver={DRIVER}", check=False)
        for c in classes:
            cluster.kubectl("delete", "deviceclass", c["metadata"]["name"], check=False)


def devices(slices):
    return {d["name"]: d for s in slices.values() for d in s["spec"].get("devices", [])}


def test_slices_accepted_and_read_back_unchanged(cluster, published):
    got = {s["metadata"]["name"]: s for s in cluster.get("resourceslice", "--field-selector",
                                                          f"spec.driver={DRIVER}")["items"]}
    assert sorted(got) == sorted(published)
    for name, sent in published.items():
        # every field sent is there as sent: none of the beta features' fields was dropped
        assert normalized(got[name]["spec"]) == normalized(sent["spec"]), name
    devs = devices(published)
    # the node: GPU 0 whole, 1 time-sliced, 2 MPS, 3 and 4 MIG placements (25 each) on demand
    assert devs["gpu-0"]["attributes"]["sharing"] == {"string": "exclusive"}
    assert devs["gpu-1"]["allowMultipleAllocations"] is True
    assert devs["gpu-2"]["attributes"]["sharing"] == {"string": "mps"}
    mig = [n for n in devs if n.startswith(("gpu-3-mig-", "gpu-4-mig-"))]
    assert len(mig) == 50 and all(devs[n]["consumesCounters"] for n in mig)
    counter_slices = [s for s in got.values() if s["spec"].get("sharedCounters")]
    assert len(counter_slices) == 1 and not counter_slices[0]["spec"].get("devices")
    assert sorted(c["name"] for c in counter_slices[0]["spec"]["sharedCounters"]) == \
        ["gpu-3-counter-set", "gpu-4-counter-set"]
    assert all(len(s["spec"].get("devices", [])) <= 64 for s in got.values())
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in got.values()} == {len(got)}


def test_cel_selector_on_attributes(cluster, published):
    sel = (f'device.attributes["{DRIVER}"].productName == "{H100}" && '
           f'device.attributes["{DRIVER}"].driverVersion.compareTo(semver("580.0.0")) >= 0 && '
           f'device.attributes["{DRIVER}"].cudaComputeCapability.compareTo(semver("9.0.0")) >= 0 && '
           f'device.capacity["{DRIVER}"].memory.compareTo(quantity("79Gi")) >= 0')
    create(cluster, [claim_yaml("whole", DRIVER, sel), pod_yaml(cluster, "whole")])
    r = allocation(cluster, "whole")
    assert r["device"] == "gpu-0", r  # the only H100 given whole


def test_shared_gpu_memory_claims(cluster, published):
    create(cluster, [claim_yaml("shared20", f"shared.{DRIVER}", capacity={"memory": "20Gi"}),
                     pod_yaml(cluster, "shared20")])
    r = allocation(cluster, "shared20")
    assert r["device"] == "gpu-1", r
    assert quantity(r["consumedCapacity"]["memory"]) == 20 * 2**30, r
    assert quantity(r["consumedCapacity"]["compute"]) == 25, r  # one replica's share: not asked, the default
    assert r.get("shareID"), r
    create(cluster, [claim_yaml("shared40", f"shared.{DRIVER}", capacity={"memory": "40Gi", "compute": "50"}),
                     pod_yaml(cluster, "shared40")])
    r = allocation(cluster, "shared40")
    assert r["device"] == "gpu-1" and quantity(r["consumedCapacity"]["memory"]) == 40 * 2**30, r
    assert quantity(r["consumedCapacity"]["compute"]) == 50, r
    # 60 GiB of the H100's 79.6 are taken: 30 more do not fit, and no other GPU is time-sliced
    create(cluster, [claim_yaml("shared30", f"shared.{DRIVER}", capacity={"memory": "30Gi"}),
                     pod_yaml(cluster, "shared30")])

    def unschedulable():
        pod = cluster.get("pod", "-n", NS, PREFIX + "shared30")
        conds = {c["type"]: c for c in pod["status"].get("conditions", [])}
        c = conds.get("PodScheduled")
        return (c and c["status"] == "False" and c.get("reason") == "Unschedulable") or \
            E2EError(f"conditions {pod['status'].get('conditions')}")
    wait(unschedulable, 120, "the 30Gi claim's pod reported unschedulable")
    c = cluster.get("resourceclaim", "-n", NS, PREFIX + "shared30")
    assert not c.get("status", {}).get("allocation"), c["status"]


def test_mps_compute_share(cluster, published):
    create(cluster, [claim_yaml("mps", f"mps.{DRIVER}", capacity={"compute": "30"}), pod_yaml(cluster, "mps")])
    r = allocation(cluster, "mps")
    assert r["device"] == "gpu-2", r
    assert quantity(r["consumedCapacity"]["compute"]) == 30, r
    assert quantity(r["consumedCapacity"]["clients"]) == 1, r


def test_mig_profile_on_demand(cluster, published):
    sel = f'device.attributes["{DRIVER}"].profile == "3g.40gb"'
    create(cluster, [claim_yaml("mig", f"mig.{DRIVER}", sel), pod_yaml(cluster, "mig")])
    r = allocation(cluster, "mig")
    m = re.fullmatch(r"gpu-([34])-mig-3g40gb-9-([04])", r["device"])
    assert m, r
    d = devices(published)[r["device"]]
    assert d["attributes"]["migOnDemand"] == {"bool": True}
    assert d["consumesCounters"][0]["counterSet"] == f"gpu-{m.group(1)}-counter-set"


def test_example_claims_accepted(cluster, published):
    """examples/dra/claims.yaml (docs/dra.md) as the API server validates it, CEL included."""
    with open(os.path.join(ROOT, "examples", "dra", "claims.yaml")) as f:
        text = f.read()
    p = cluster.kubectl("create", "--dry-run=server", "-n", NS, "-f", "-", input=text, check=False)
    assert p.returncode == 0, f"{p.stdout}\n{p.stderr}"
    assert p.stdout.count("(server dry run)") == 5, p.stdout
