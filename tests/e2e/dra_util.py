"""Helpers of the DRA e2e tests (test_dra_pods.py, and the sharing and MIG-at-prepare tests): the
agent's DRA arguments against the e2e cluster, the chart's DeviceClasses, ResourceClaims and pods
that use them, the node's ResourceSlices as the API server has them, the claims' transient CDI
specs, and a kubelet-side gRPC client (tests/dra/dra_client.py) on the agent's DRA socket."""
import json
import os
import subprocess
import sys

import yaml

from e2e import NS, ROOT, wait

DRIVER = "gpu.gpuslice.io"
CHART = os.path.join(ROOT, "deploy", "helm", "gpuslice")
BUILD_SH = os.path.join(ROOT, "tests", "e2e", "build.sh")


def dra_args(cluster, driver=DRIVER):
    """The agent's flags for the DRA driver on the e2e cluster's kubelet and API server."""
    return ["--dra", "--dra-driver", driver,
            "--kubelet-registry-dir", os.path.join(cluster.kubelet_dir, "plugins_registry"),
            "--kubelet-plugins-dir", os.path.join(cluster.kubelet_dir, "plugins"),
            "--kubeconfig", cluster.kubeconfig, "--node-name", cluster.node_name]


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
    b = subprocess.run(["bash", BUILD_SH, "helm"], capture_output=True, text=True, timeout=1800)
    assert b.returncode == 0 and b.stdout.strip(), f"build.sh helm: exit {b.returncode}\n{b.stderr[-3000:]}"
    helm = os.path.join(b.stdout.strip().splitlines()[-1], "helm")
    p = subprocess.run([helm, "template", "gpuslice", CHART, "-s", "templates/dra-deviceclasses.yaml",
                        "--set", "dra.enabled=true", "--set", f"dra.driver={driver}",
                        "--set", f"dra.extendedResourceNames={'true' if extended else 'false'}"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return [d for d in yaml.safe_load_all(p.stdout) if d]


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


def claim_pod_yaml(cluster, name, claim, script):
    """A pod (the e2e image) whose container uses the ResourceClaim `claim`."""
    pod = yaml.safe_load(cluster.pod_yaml(name, {}, script))
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
