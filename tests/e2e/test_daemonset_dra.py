"""The chart's DaemonSet as the DRA driver in the real cluster: the agent image of
tests/e2e/agent_image.sh, installed with the real Helm with dra.enabled and the simulated node's
values (test_daemonset.py's), on a node of two H100 80GB both given to DRA: GPU 0 time-sliced
(shared by consumable capacity), GPU 1 whole.

- The DaemonSet's agent registers with the real kubelet as the DRA plugin (its registration socket
  in the mounted plugins_registry/) and publishes the node's ResourceSlices with its in-cluster
  identity: the service account token the chart projects (bound to the pod, so it names the node)
  and the chart's RBAC, through the chart's ValidatingAdmissionPolicy, which must let the node's
  own agent write them. No other agent runs: the slices are the DaemonSet's.
- A pod with a shared-GPU claim (examples/dra/claims.yaml's shared template) runs with its guard
  quota equal to the claim's consumedCapacity.memory (test_dra_share.py's check); deleting it
  unprepares the claim (guard files, CDI spec, checkpoint entry gone).
- Two shared claims in one container: the agent reads the pod with its own token (the chart's
  get on pods) and refuses the second (test_dra_twoclaims.py's case).
- helm uninstall: the agent stops (its sockets removed) and the kubelet deletes the node's slices
  of the driver (30 s after the driver's socket went away): none are left.

The pods of this cluster have no service network (docs/e2e.md): the values' apiServer points the
in-cluster client at the API server's address on the node (127.0.0.1, in its certificate)."""
import os
import subprocess
import time

import pytest
import yaml

import test_dra_twoclaims as two
from dra_util import DRIVER, SHARED, SHARED_GPU0, apply_objects, check_guard_quota, checkpoint, claim_pod, \
    claim_spec_file, delete_prefixed, dra_policy, guard_script, h100_node, shared_claim, slice_devices, slices, \
    wait_gone
from e2e import NS, E2EError, wait, written
from test_daemonset import AGENT_IMAGE_SH, DS_NS, IMAGE, RELEASE, WAIT, Chart
from test_guard import IMAGE as GUARD_IMAGE, _image

PREFIX = "dsdra-"
NODE = h100_node()
POLICY = dra_policy(SHARED_GPU0, '{index: "1", mode: whole}')
CLASSES = [DRIVER, SHARED, f"mps.{DRIVER}", f"mig.{DRIVER}"]


class Release(Chart):
    """test_daemonset.py's release (its name, namespace and host paths) with dra.enabled, on a
    simulated node of its own."""

    def __init__(self, cluster):
        super().__init__(cluster)
        own = os.path.join(cluster.dir, "dsdra")
        self.sim, self.out = os.path.join(own, "sim"), os.path.join(own, "out")
        for d in (self.sim, self.out):
            os.makedirs(d, exist_ok=True)
        # the node description at a path the agent sees: the sim's state directory is mounted
        self.node = os.path.join(self.sim, "node.yaml")
        with open(self.node, "w") as f:
            f.write(NODE)

    def values(self, case, overrides=None):
        return super().values(case, {
            "policy": POLICY, "sim": {"node": self.node, "stateDir": self.sim},
            "metrics": {"port": self.c.port_base + 404}, "dra": {"enabled": True},
            # no service network in this cluster: the API server where the node reaches it
            "apiServer": {"host": "127.0.0.1", "port": str(self.c.port_base + 443)}, **(overrides or {})})


@pytest.fixture(scope="module")
def release(cluster):
    env = dict(os.environ, PATH=cluster.env["PATH"])
    p = subprocess.run(["bash", AGENT_IMAGE_SH, cluster.dir, IMAGE], capture_output=True, text=True,
                       timeout=300, env=env)
    assert p.returncode == 0, f"agent_image.sh: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    # test_daemonset.py's namespace, deleted without waiting at its end: gone first
    wait(lambda: cluster.kubectl("get", "namespace", DS_NS, "-o", "jsonpath={.status.phase}",
                                 check=False).stdout != "Terminating", WAIT, f"namespace {DS_NS} deleted")
    cluster.kubectl("create", "namespace", DS_NS, check=False)
    cluster.kubectl("label", "node", cluster.node_name, "--overwrite", "gpuslice.io/gpu=true")
    # the chart owns the DeviceClasses: none left by a test that applied them by hand
    cluster.kubectl("delete", "deviceclass", *CLASSES, "--ignore-not-found", check=False)
    r = Release(cluster)
    try:
        yield r
    finally:
        try:
            delete_prefixed(cluster, PREFIX)
            r.uninstall()
        finally:
            cluster.kubectl("label", "node", cluster.node_name, "gpuslice.io/gpu-", check=False)
            cluster.kubectl("delete", "namespace", DS_NS, "--wait=false", check=False)


def _devices_by_sa(cluster):
    return slice_devices(slices(cluster))


def _connected(cluster):
    """The kubelet's log lines saying it connected to the driver's socket in plugins/."""
    sock = os.path.join(cluster.kubelet_dir, "plugins", DRIVER, "dra.sock")
    return [line for line in cluster.log("kubelet").splitlines()
            if f'driverName="{DRIVER}"' in line and "connected=true" in line and sock in line]


def test_daemonset_agent_registers_and_publishes_its_slices(cluster, release):
    before = len(_connected(cluster))
    release.deploy("publish")
    pod = release.ready("publish")
    reg = os.path.join(cluster.kubelet_dir, "plugins_registry", f"{DRIVER}-reg.sock")
    assert os.path.exists(reg), "the agent's registration socket in the kubelet's plugins_registry/"
    # published through the API server with the pod's own token: admitted by the chart's policy
    wait(lambda: _devices_by_sa(cluster) == ["gpu-0", "gpu-1"] or E2EError(f"devices {_devices_by_sa(cluster)}"),
         WAIT, "the DaemonSet's ResourceSlices (gpu-0 shared, gpu-1 whole)")
    vap = cluster.get("validatingadmissionpolicy", f"{RELEASE}-dra-resourceslices")
    assert vap["spec"]["failurePolicy"] == "Fail"
    for s in slices(cluster):
        assert s["spec"]["nodeName"] == cluster.node_name and s["spec"]["pool"]["name"] == cluster.node_name, s
    # the kubelet's side of the registration (the log is the cluster's: a new line)
    wait(lambda: len(_connected(cluster)) > before, 60, "the kubelet connected to the driver's socket")
    assert pod["spec"]["serviceAccountName"] == RELEASE and not pod["spec"].get("automountServiceAccountToken")
    print(f"DRA DaemonSet: registered, slices {_devices_by_sa(cluster)} written with the pod's token")


def test_shared_claim_pod_gets_the_guard_quota_and_is_unprepared(cluster, release):
    if os.environ.get("GS_SANITIZED") == "1":
        pytest.skip("sanitizer build: guard_app carries ASan/UBSan, whose runtime cannot start after the "
                    "preloaded guard (test_guard.py); the guard in a pod runs in the normal build's e2e stage")
    release.deploy("publish")
    release.ready("publish")
    wait(lambda: "gpu-0" in _devices_by_sa(cluster), WAIT, "the shared GPU's slice")
    _image(cluster)
    name, gib = PREFIX + "m20", 20
    pod = claim_pod(cluster, name, name, guard_script(name, gib), out=release.out, image=GUARD_IMAGE,
                    env={"FAKE_CUDA_TOTAL_MIB": str(80 * 1024)})
    if os.path.exists(os.path.join(release.out, name)):
        os.unlink(os.path.join(release.out, name))
    apply_objects(cluster, shared_claim(name, gib), pod)
    cluster.wait_phase(name, ("Running",), timeout=WAIT)
    c = cluster.get("resourceclaim", "-n", NS, name)
    (r,) = c["status"]["allocation"]["devices"]["results"]
    assert r["driver"] == DRIVER and r["device"] == "gpu-0" and r.get("shareID"), r
    assert r["consumedCapacity"]["memory"] == f"{gib}Gi", r
    uid = c["metadata"]["uid"]
    guard_dir = os.path.join(release.base, "guard", f"claim-{uid}")
    past = check_guard_quota(written(release.out, name), gib, guard_dir)
    assert uid in checkpoint(cluster)
    print(f"DRA DaemonSet: {gib}Gi claim: {gib + 2} x 1 GiB asked, {past['ok']} allocated, then {past['first_err']}")
    cluster.kubectl("delete", "pod", "-n", NS, name, "--grace-period=1")
    wait_gone(guard_dir, 120, "the claim's guard files after the pod is gone")
    wait_gone(claim_spec_file(cluster, uid), 60, "the claim's CDI spec")
    wait(lambda: uid not in checkpoint(cluster), 60, "the claim out of the checkpoint")
    cluster.kubectl("delete", "resourceclaim", "-n", NS, name)


def test_two_shared_claims_in_one_container_refused_with_the_charts_rbac(cluster, release):
    """The DaemonSet's agent reads the claim's pod with its own token (the chart's get on pods):
    the second shared claim of one container is refused (test_dra_twoclaims.py's case)."""
    release.deploy("publish")
    release.ready("publish")
    wait(lambda: "gpu-0" in _devices_by_sa(cluster), WAIT, "the shared GPU's slice")
    try:
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(
            [two._claim("a", 10), two._claim("b", 20), two._pod(cluster, "one", {"main": ["a", "b"]})]))
        want = f"container main of pod {two.PREFIX}one also holds claim {two.PREFIX}"
        ev = wait(lambda: [e for e in cluster.events(two.PREFIX + "one") if want in e], WAIT,
                  "the pod's event naming both claims")
        print(f"DRA DaemonSet: two shared claims in one container: {ev[0][-200:]!r}")
    finally:
        delete_prefixed(cluster, two.PREFIX)


def test_uninstall_leaves_no_slices(cluster, release):
    release.deploy("publish")
    release.ready("publish")
    wait(lambda: _devices_by_sa(cluster) == ["gpu-0", "gpu-1"], WAIT, "the DaemonSet's ResourceSlices")
    t0 = time.monotonic()
    release.uninstall()
    reg = os.path.join(cluster.kubelet_dir, "plugins_registry", f"{DRIVER}-reg.sock")
    assert not os.path.exists(reg), "the agent removed its registration socket at its shutdown"
    # the kubelet deletes the node's slices of a driver 30 s after its socket went away
    wait(lambda: not slices(cluster) or E2EError(f"slices {[s['metadata']['name'] for s in slices(cluster)]}"),
         150, "the node's slices of the driver deleted after helm uninstall")
    assert not {d["metadata"]["name"] for d in cluster.get("deviceclasses")["items"]} & set(CLASSES)
    print(f"DRA DaemonSet: helm uninstall: the agent's sockets gone, its slices deleted by the kubelet "
          f"{time.monotonic() - t0:.0f} s after")
