"""NVIDIA's DRA driver for GPUs (sigs.k8s.io/dra-driver-nvidia-gpu v0.4.1, its kubelet plugin
gpu-kubelet-plugin, built by `tests/e2e/build.sh nvidia-dra`) on the simulated node, beside
gpuslice's DRA driver, in the real cluster: what each enforces.

The plugin runs as a host process (as the agent does), registered with the real kubelet
(plugins_registry/, plugins/gpu.nvidia.com/), publishing ResourceSlices to the real API server
with the admin's kubeconfig, writing its claims' CDI specs where containerd reads them. Its driver
root is made from the simulated node's root (docs/simulator.md#the-nodes-root): the root's usr/
and etc/ (libnvidia-ml.so.1, the simulated NVML, and libcuda.so.VERSION; nvidia-smi's stand-in;
the ld.so.cache), and dev/ as character devices numbered as the driver numbers them (NVIDIA's
CDI generator takes only character devices, and containerd stats them when it applies the spec;
nothing opens them). What the plugin reads at fixed host paths comes from the simulated root in a
mount namespace of its own (/proc/driver, /sys/bus/pci/devices), as NVIDIA's device plugin is run
(tests/nvmlclients/test_nvidia_plugin.py). The CDI hook the spec names is the toolkit's own
nvidia-cdi-hook, built beside it. The DeviceClass is the chart's templates/deviceclass-gpu.yaml,
rendered by the real Helm from the chart copied beside the binary, without its
extendedResourceName (a class serving nvidia.com/gpu would take the other tests' pods).

- Its ResourceSlices: gpu-0 and gpu-1 with the simulated GPUs' UUIDs, productName, architecture
  and memory capacity, as the simulated NVML reports them.
- A pod with a claim of gpu.nvidia.com runs: the container has its GPU's device node (and not the
  other's), the spec's env and the driver's libcuda.so.VERSION from the driver root.
- What each enforces, side by side on one kubelet (gpuslice's agent on a simulated node of its
  own, its classes the chart's): two pods share one GPU of NVIDIA's through one ResourceClaim
  (v0.4.1's way of sharing by default; its TimeSlicingSettings and MPSSupport gates are alpha,
  off); in each, tests/guard's guard_app on the simulated CUDA driver (80 GiB free) allocates
  22 x 1 GiB and gets all 22 (nothing at the node holds a pod to a share: the claim has no amount
  to hold it to); a pod with a 20Gi claim of gpuslice's shared class gets 19 or 20 and then
  CUDA_ERROR_OUT_OF_MEMORY (the guard). The simulated CUDA driver counts each process's memory
  alone, so the two NVIDIA pods' 44 GiB is not checked against the GPU's 80: what is shown is that
  no limit applies, not what a real GPU does when its memory runs out. (The two simulated nodes'
  GPU 0 have the same UUID, derived from model and index, docs/simulator.md; each has its own
  state.)
- Not run here: v0.4.1's TimeSlicingSettings gate sets a time slice with `nvidia-smi
  compute-policy`, which the simulated root's nvidia-smi stand-in does not do (it would exit 0
  having done nothing), and MPSSupport starts a control-daemon Deployment of NVIDIA's image; its
  slices carry no pcieRoot attribute (the simulated root's sys/bus/pci/devices/BDF is a directory,
  not sysfs's link into the PCI hierarchy: the plugin logs "error getting PCIe root").

No skip when go is missing: build.sh fails, and so does the test. The guard part is skipped in a
sanitizer build, as test_guard.py."""
import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from dra_util import BUILD_SH, DRIVER as GS_DRIVER, apply_classes, claim_yaml, dra_args, slice_devices, slices
from e2e import GPUSLICE, NS, E2EError, HostProc, wait, written
from test_dra_share import NODE as GS_NODE, POLICY as GS_POLICY
from test_guard import CUDA_ERROR_OUT_OF_MEMORY, IMAGE, _image, _kv
from test_pods import SHOW, parse

DRIVER = "gpu.nvidia.com"
LIB_DIR = "usr/lib/x86_64-linux-gnu"
# test_dra_share.py's node of two H100 80GB (driver 580.65.06), without MIG for NVIDIA's driver
NODE = GS_NODE.replace("    mig: enabled\n", "")
PREFIX = "nvdra-"
# the plugin's own namespace: the simulated root's files over the host paths it reads
NAMESPACE = """set -eu
mount --make-rprivate /
mount --bind "$SIM_ROOT/proc/driver" /proc/driver
mount --bind "$SIM_ROOT/sys/bus/pci/devices" /sys/bus/pci/devices
exec "$@"
"""


def build():
    """(the bin directory of gpu-kubelet-plugin and nvidia-cdi-hook, the chart's directory)"""
    b = subprocess.run(["bash", BUILD_SH, "nvidia-dra"], capture_output=True, text=True, timeout=1800)
    assert b.returncode == 0 and b.stdout.strip(), f"build.sh nvidia-dra: exit {b.returncode}\n{b.stderr[-3000:]}"
    bin_dir = b.stdout.strip().splitlines()[-1]
    return bin_dir, os.path.join(os.path.dirname(bin_dir), "chart")


def device_class(chart):
    """The chart's gpu.nvidia.com DeviceClass, rendered by the real Helm, without its
    extendedResourceName."""
    b = subprocess.run(["bash", BUILD_SH, "helm"], capture_output=True, text=True, timeout=1800)
    assert b.returncode == 0 and b.stdout.strip(), f"build.sh helm: exit {b.returncode}\n{b.stderr[-3000:]}"
    helm = os.path.join(b.stdout.strip().splitlines()[-1], "helm")
    # its namespace other than default and gpuResourcesEnabledOverride, as its validation.yaml asks
    # (it refuses GPUs by default, as a guard against a device plugin on the same node)
    p = subprocess.run([helm, "template", "nvdra", chart, "-n", "nvidia-dra-driver-gpu",
                        "--set", "gpuResourcesEnabledOverride=true", "-s", "templates/deviceclass-gpu.yaml",
                        "--kube-version", "1.36.0", "--api-versions", "resource.k8s.io/v1"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    (dc,) = [d for d in yaml.safe_load_all(p.stdout) if d]
    assert dc["kind"] == "DeviceClass" and dc["metadata"]["name"] == DRIVER, dc
    dc["spec"].pop("extendedResourceName", None)
    return dc


def driver_root(sim_root, root):
    """ROOT: the simulated root's usr/ and etc/, and its dev/ files as character devices."""
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.join(root, "dev", "nvidia-caps"))
    for d in ("usr", "etc"):
        shutil.copytree(os.path.join(sim_root, d), os.path.join(root, d), symlinks=True)
    majors = {}
    with open(os.path.join(sim_root, "proc", "devices")) as f:
        for line in f:
            m = re.match(r"\s*(\d+) (\S+)$", line)
            if m:
                majors[m.group(2)] = int(m.group(1))
    fe, uvm, caps = majors["nvidia-frontend"], majors["nvidia-uvm"], majors["nvidia-caps"]
    fixed = {"nvidiactl": (fe, 255), "nvidia-modeset": (fe, 254), "nvidia-uvm": (uvm, 0),
             "nvidia-uvm-tools": (uvm, 1)}
    for dirpath, _, files in os.walk(os.path.join(sim_root, "dev")):
        for name in files:
            rel = os.path.relpath(os.path.join(dirpath, name), os.path.join(sim_root, "dev"))
            if rel in fixed:
                num = fixed[rel]
            elif re.fullmatch(r"nvidia\d+", rel):
                num = (fe, int(rel[len("nvidia"):]))
            elif re.fullmatch(r"nvidia-caps/nvidia-cap\d+", rel):
                num = (caps, int(rel.rsplit("cap", 1)[1]))
            else:
                continue
            os.mknod(os.path.join(root, "dev", rel), 0o20666, os.makedev(*num))
    return root


class NvidiaDra(HostProc):
    """NVIDIA's gpu-kubelet-plugin on the simulated node NODE (state STATE), a host process with
    the real kubelet's DRA directories; its pid in DIR/run/nvidia-dra.pid (cluster.sh down)."""

    def __init__(self, cluster, bin_dir, node, state, extra=()):
        subprocess.run([GPUSLICE, "--sim", node, "--sim-state", state, "inspect"], check=True,
                       capture_output=True, timeout=60)   # makes the simulated root
        self.sim_root = os.path.join(state, "root")
        self.root = driver_root(self.sim_root, os.path.join(os.path.dirname(state), "driver-root"))
        self.plugin_dir = os.path.join(cluster.kubelet_dir, "plugins", DRIVER)
        env = dict(os.environ, GPUSLICE_SIM_NODE=node, GPUSLICE_SIM_STATE=state, SIM_ROOT=self.sim_root,
                   KUBECONFIG=cluster.kubeconfig)
        if os.environ.get("GS_SANITIZER_PRELOAD"):   # a sanitized simulator: its runtimes first
            env.update(LD_PRELOAD=os.environ["GS_SANITIZER_PRELOAD"], ASAN_OPTIONS="detect_leaks=0")
        cmd = ["unshare", "-m", "sh", "-c", NAMESPACE, "sh", os.path.join(bin_dir, "gpu-kubelet-plugin"),
               "--node-name", cluster.node_name, "--namespace", NS, "--kubeconfig", cluster.kubeconfig,
               "--cdi-root", cluster.cdi_dir, "--nvidia-driver-root", self.root,
               "--container-driver-root", self.root,
               "--nvidia-cdi-hook-path", os.path.join(bin_dir, "nvidia-cdi-hook"),
               "--image-name", "gpuslice.local/nvidia-dra-unused:e2e",
               "--kubelet-registrar-directory-path", os.path.join(cluster.kubelet_dir, "plugins_registry"),
               "--kubelet-plugins-directory-path", os.path.join(cluster.kubelet_dir, "plugins"),
               "-v", "4", *extra]
        super().__init__(cluster, "nvidia-dra", cmd, env)

    def alive_or_fail(self):
        if not self.alive():
            raise E2EError(f"NVIDIA's gpu-kubelet-plugin exited {self.proc.returncode}:\n{self.log()[-6000:]}")


def nv_claim(name):
    return yaml.safe_load(claim_yaml(PREFIX + name, DRIVER))


def gs_claim(name, gib):
    c = yaml.safe_load(claim_yaml(PREFIX + name, f"shared.{GS_DRIVER}"))
    c["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"memory": f"{gib}Gi"}}
    return c


def claim_pod(cluster, name, claim, script, out, image=None, env=None):
    """A pod using ResourceClaim PREFIX+CLAIM whose script writes what it saw to OUT/NAME."""
    pod = yaml.safe_load(cluster.pod_yaml(PREFIX + name, {}, script, image=image, out=out, env=env))
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": PREFIX + claim}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    return pod


def create(cluster, *objs):
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objs))


def cleanup(cluster):
    for kind, wait_ in (("pods", "true"), ("resourceclaims", "false")):
        names = cluster.kubectl("get", kind, "-n", NS, "-o", "name", check=False).stdout.split()
        mine = [n for n in names if n.split("/", 1)[1].startswith(PREFIX)]
        if mine:
            cluster.kubectl("delete", "-n", NS, "--grace-period=1", f"--wait={wait_}", *mine, check=False,
                            timeout=180)


def nv_slices(cluster):
    return slices(cluster, DRIVER)


def spec_file(cluster, uid):
    """The claim's transient CDI spec, as the plugin names it (cdiapi.GenerateTransientSpecName)."""
    return os.path.join(cluster.cdi_dir, f"k8s.{DRIVER}-claim_{uid}.yaml")


def wait_unprepared(cluster, uid, timeout):
    """Until the claim's CDI spec is gone (the plugin deletes it at NodeUnprepareResources)."""
    wait(lambda: not os.path.exists(spec_file(cluster, uid)), timeout, f"claim {uid} unprepared (its CDI spec gone)")


@pytest.fixture(scope="module")
def nvdra_build():
    return build()


@pytest.fixture
def nvdra(cluster, nvdra_build):
    """NVIDIA's plugin on the 2-GPU node, its slices in the API server, its chart's DeviceClass;
    its pods and claims deleted while it still serves (so they are unprepared), then it is stopped
    and its slices deleted (the kubelet does not delete a gone driver's slices)."""
    bin_dir, chart = nvdra_build
    base = os.path.join(cluster.dir, "nvdra")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(os.path.join(base, "out"))
    node = os.path.join(base, "node.yaml")
    with open(node, "w") as f:
        f.write(NODE)
    create(cluster, device_class(chart))
    p = NvidiaDra(cluster, bin_dir, node, os.path.join(base, "sim"))
    try:
        try:
            wait(lambda: p.alive_or_fail() or slice_devices(nv_slices(cluster)) == ["gpu-0", "gpu-1"], 120,
                 "NVIDIA's plugin's ResourceSlices (gpu-0, gpu-1)")
        except E2EError:
            print(f"NVIDIA DRA plugin log:\n{p.log()[-6000:]}")
            raise
        yield p, node, os.path.join(base, "out")
    finally:
        try:
            cleanup(cluster)
        finally:
            ok = p.stop()
            print(f"---- NVIDIA DRA plugin log (stopped, SIGTERM {'obeyed' if ok else 'ignored'})\n{p.log()[-4000:]}")
            cluster.kubectl("delete", "resourceslices", "--field-selector", f"spec.driver={DRIVER}", check=False)
            cluster.kubectl("delete", "deviceclass", DRIVER, "--ignore-not-found", check=False)


def inspect(node):
    """The simulated node's GPUs as `gpuslice inspect --json` has them."""
    state = os.path.join(os.path.dirname(node), "sim")
    return json.loads(subprocess.run([GPUSLICE, "--sim", node, "--sim-state", state, "inspect", "--json"],
                                     capture_output=True, text=True, check=True, timeout=60).stdout)["gpus"]


def test_slices_name_the_simulated_gpus(cluster, nvdra):
    p, node, _ = nvdra
    items = nv_slices(cluster)
    devs = {d["name"]: d for s in items for d in s["spec"]["devices"]}
    for s in items:
        assert s["spec"]["nodeName"] == cluster.node_name and s["spec"]["pool"]["name"] == cluster.node_name, s
    for g in inspect(node):
        d = devs[f"gpu-{g['minor']}"]   # NVIDIA's names: the GPU's minor number
        attrs = {k: next(iter(v.values())) for k, v in d["attributes"].items()}
        assert attrs["type"] == "gpu" and attrs["uuid"] == g["uuid"], attrs
        assert attrs["productName"] == g["name"] == "NVIDIA H100 80GB HBM3", attrs
        assert (attrs["architecture"], attrs["brand"]) == ("Hopper", "Nvidia"), attrs
        # versions as semver: 9.0 -> 9.0.0, the driver's 580.65.06 -> 580.65.6, CUDA 13.0 -> 13.0.0
        assert (attrs["cudaComputeCapability"], attrs["driverVersion"], attrs["cudaDriverVersion"]) == \
            ("9.0.0", "580.65.6", "13.0.0"), attrs
        assert attrs["resource.kubernetes.io/pciBusID"] == g["pci_bus_id"][4:].lower(), (attrs, g["pci_bus_id"])
        assert d["capacity"] == {"memory": {"value": f"{g['memory']['total_mib']}Mi"}}, d["capacity"]
        assert not d.get("allowMultipleAllocations"), d   # no consumable capacity: one claim per GPU
        print(f"NVIDIA DRA slice: gpu-{g['minor']} uuid {attrs['uuid']} productName {attrs['productName']!r} "
              f"memory {d['capacity']['memory']['value']} attributes {sorted(attrs)}")
    # no PCIe root: the simulated root's sys/bus/pci/devices/BDF is a directory, not the link into
    # the PCI hierarchy it is in sysfs (the plugin logs "error getting PCIe root")
    assert "error getting PCIe root for device 0" in p.log()


def test_pod_gets_its_gpu_through_the_claims_cdi_spec(cluster, nvdra):
    p, node, out = nvdra
    script = SHOW.replace("> /dev/termination-log", "> /out/one") + "\necho done >> /out/one\nsleep 3600"
    gpu1 = inspect(node)[1]
    sel = f'device.attributes["{DRIVER}"].uuid == "{gpu1["uuid"]}"'
    c = nv_claim("one")
    c["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [{"cel": {"expression": sel}}]
    create(cluster, c, claim_pod(cluster, "one", "one", script, out))
    cluster.wait_phase(PREFIX + "one", ("Running",), timeout=180)
    claim = cluster.get("resourceclaim", "-n", NS, PREFIX + "one")
    (r,) = claim["status"]["allocation"]["devices"]["results"]
    assert (r["driver"], r["pool"], r["device"]) == (DRIVER, cluster.node_name, "gpu-1"), r
    with open(spec_file(cluster, claim["metadata"]["uid"])) as f:
        spec = yaml.safe_load(f)
    seen = parse(written(out, "one"))
    (dev,) = spec["devices"]
    nodes = [n["path"] for n in dev["containerEdits"]["deviceNodes"]]
    assert nodes == ["/dev/nvidia1"], nodes
    common = spec.get("containerEdits") or {}
    for n in nodes + [n["path"] for n in common.get("deviceNodes") or []]:
        assert n in seen["node"], (n, seen["node"])
    assert "/dev/nvidia0" not in seen["node"], seen["node"]
    for e in common.get("env") or []:
        k, v = e.split("=", 1)
        assert seen["env"].get(k) == v, (e, seen["env"])
    mounts = [m["containerPath"] for m in common.get("mounts") or []]
    assert f"/{LIB_DIR}/libcuda.so.580.65.06" in mounts, mounts
    print(f"NVIDIA DRA pod: gpu-1, device nodes {sorted(n for n in seen['node'] if n.startswith('/dev/nvidia'))}, "
          f"env {[e for e in common.get('env') or []]}, hooks {[h['args'][1] for h in common.get('hooks') or []]}, "
          f"{len(mounts)} mounts")


def _alloc_script(name, n):
    return ("{\nsed 's/^/preload /' /etc/ld.so.preload 2>/dev/null\n"
            f"/opt/gs/guard_app alloc 1G {n} | sed 's/^/alloc /'\necho done\n}} > /out/{name} 2>&1\nsleep 3600")


def test_two_pods_on_one_nvidia_claim_allocate_without_limit(cluster, nvdra):
    """NVIDIA's sharing: two pods on one GPU through one claim; each allocates 22 GiB and gets it
    all (guard_app runs without a guard here, so in a sanitizer build too)."""
    p, _, out = nvdra
    _image(cluster)
    env = {"FAKE_CUDA_TOTAL_MIB": str(80 * 1024)}  # the simulated CUDA driver: a whole H100 free
    create(cluster, nv_claim("shared"),
           claim_pod(cluster, "nv-a", "shared", _alloc_script("nv-a", 22), out, IMAGE, env),
           claim_pod(cluster, "nv-b", "shared", _alloc_script("nv-b", 22), out, IMAGE, env))
    for name in ("nv-a", "nv-b"):
        cluster.wait_phase(PREFIX + name, ("Running",), timeout=180)
    nv = cluster.get("resourceclaim", "-n", NS, PREFIX + "shared")
    (r,) = nv["status"]["allocation"]["devices"]["results"]
    assert r["driver"] == DRIVER and r["device"].startswith("gpu-"), r
    users = sorted(u["name"] for u in nv["status"].get("reservedFor") or [])
    assert users == [PREFIX + "nv-a", PREFIX + "nv-b"], users   # one claim, one GPU, two pods
    for name in ("nv-a", "nv-b"):
        msg = written(out, name)
        got = _kv(msg, "alloc")
        assert not [line for line in msg.splitlines() if line.startswith("preload ")], msg
        assert got.get("ok") == "22" and got.get("first_err") == "0", msg
        print(f"NVIDIA DRA, pod {name} on {r['device']} (the claim shared by both pods): 22 x 1 GiB asked, "
              f"{got['ok']} allocated")


def test_beside_it_a_gpuslice_share_is_enforced(cluster, agent, nvdra):
    """gpuslice's agent on the same kubelet while NVIDIA's plugin serves: a 20Gi claim of its
    shared class, the same 22 GiB refused past the share."""
    if os.environ.get("GS_SANITIZED") == "1":
        pytest.skip("sanitizer build: guard_app carries ASan/UBSan, whose runtime cannot start after the "
                    "preloaded guard (test_guard.py); this runs in the normal build's e2e stage")
    p, _, out = nvdra
    _image(cluster)
    gs_node = os.path.join(os.path.dirname(out), "gs-node.yaml")   # test_dra_share.py's: GPU 0 shared
    with open(gs_node, "w") as f:
        f.write(GS_NODE)
    gs_classes = apply_classes(cluster)
    a = agent(gs_node, GS_POLICY, dra_args(cluster) + ["--cdi-hook", ""])
    try:
        wait(lambda: "gpu-0" in slice_devices(slices(cluster)), 120, "gpuslice's ResourceSlice (gpu-0)")
        env = {"FAKE_CUDA_TOTAL_MIB": str(80 * 1024)}
        create(cluster, gs_claim("gs20", 20), claim_pod(cluster, "gs20", "gs20", _alloc_script("gs20", 22), out,
                                                        IMAGE, env))
        cluster.wait_phase(PREFIX + "gs20", ("Running",), timeout=180)
        p.alive_or_fail()
        msg = written(out, "gs20")
        got = _kv(msg, "alloc")
        preload = [line.split(" ", 1)[1] for line in msg.splitlines() if line.startswith("preload ")]
        assert preload and preload[0].endswith("libgpuslice-guard.so"), msg
        assert int(got.get("ok", "-1")) in (19, 20), msg   # the 20Gi share, less the context's
        assert got.get("first_err") == str(CUDA_ERROR_OUT_OF_MEMORY), msg
        print(f"gpuslice DRA, 20Gi claim: 22 x 1 GiB asked, {got['ok']} allocated, then error {got['first_err']}")
    finally:
        cleanup(cluster)
        cluster.kubectl("delete", "deviceclass", *gs_classes, "--ignore-not-found", check=False)
