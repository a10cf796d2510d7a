"""NVIDIA's own device plugin (github.com/NVIDIA/k8s-device-plugin v0.18.0, built by build-nvdp.sh
into the peers cache) on the simulated node, served by the kubelet emulator
(tests/integration/kubelet_emulator.py) through registration, ListAndWatch, GetPreferredAllocation
and Allocate: whole GPUs (an SXM board and a PCIe one), time-slicing in NVIDIA's config format,
MIG mixed, CDI names, and an Xid marking a GPU unhealthy. The drop-in claim is checked: the
resources it registers and the device IDs it lists are what `gpuslice apply --json` says for the
same config on the same node.

The plugin loads the simulator as the stand-in driver root's libnvidia-ml.so.1 (LD_LIBRARY_PATH,
--driver-root, --driver-root-ctr-path, --dev-root at the simulated root). What it reads at fixed
host paths comes from the simulated root inside a private mount namespace (`unshare -m`, root
needed; nothing outside it is touched): /proc/driver (nvidia-caps/mig-minors),
/sys/bus/pci/devices (NUMA nodes), its socket directory /var/lib/kubelet/device-plugins (the
emulator's directory, over a tmpfs /var/lib) and /var/run/cdi (a directory of the test, on a tmpfs over /run: the host needs none of these
directories). Before the
simulator had NVIDIA's topology calls its first whole-GPU GetPreferredAllocation ended it (exit
127, undefined symbol nvmlDeviceGetTopologyCommonAncestor); without mig-minors it refused MIG
devices; without the driver's libcuda.so.VERSION its CDI generator refused to start. No skip when
go is missing: build-nvdp.sh fails, and so does the test.

Environment (set by meson): GPUSLICE, GPUSLICE_SIM_LIB, GS_SOURCE_ROOT."""
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = os.environ.get("GS_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUSLICE = os.environ.get("GPUSLICE") or os.path.join(ROOT, "build", "gpuslice")
HERE = os.path.dirname(os.path.abspath(__file__))
LIB_DIR = {"x86_64": "usr/lib/x86_64-linux-gnu", "aarch64": "usr/lib/aarch64-linux-gnu"}[platform.machine()]
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import kubelet_emulator  # noqa: E402  (Debian's python3-grpcio)

# Inside the plugin's mount namespace: the simulated root's files over the host paths it reads.
NAMESPACE = """set -eu
mount --make-rprivate /
mount --bind "$SIM_ROOT/proc/driver" /proc/driver
mount --bind "$SIM_ROOT/sys/bus/pci/devices" /sys/bus/pci/devices
mount -t tmpfs -o mode=0755 gs-nvdp /var/lib
mkdir -p /var/lib/kubelet/device-plugins
mount --bind "$KUBELET_DIR" /var/lib/kubelet/device-plugins
# /var/run/cdi need not exist on the host: a tmpfs over /run (this namespace's alone) holds it
mount -t tmpfs -o mode=0755 gs-nvdp-run /run
mkdir -p /run/cdi
mount --bind "$CDI_DIR" /run/cdi
# the root's device files as character devices, numbered as the driver numbers them (NVIDIA's CDI
# generator takes only character devices), on a tmpfs over ROOT/dev seen by the plugin alone
major() { awk -v name="$1" '$2 == name { print $1 }' "$SIM_ROOT/proc/devices"; }
fe=$(major nvidia-frontend) uvm=$(major nvidia-uvm) caps=$(major nvidia-caps)
files=$(cd "$SIM_ROOT/dev" && find . -type f)
mount -t tmpfs -o mode=0755 gs-nvdp-dev "$SIM_ROOT/dev"
mkdir "$SIM_ROOT/dev/nvidia-caps"
for f in $files; do
    f=${f#./}
    case $f in
    nvidiactl) n="$fe 255" ;;
    nvidia-modeset) n="$fe 254" ;;
    nvidia-uvm) n="$uvm 0" ;;
    nvidia-uvm-tools) n="$uvm 1" ;;
    nvidia-caps/nvidia-cap*) n="$caps ${f#nvidia-caps/nvidia-cap}" ;;
    nvidia[0-9]*) n="$fe ${f#nvidia}" ;;
    *) continue ;;
    esac
    mknod "$SIM_ROOT/dev/$f" c $n
done
exec "$@"
"""
SXM8 = "gpus:\n  - model: H100-SXM5-80GB\n    count: 8\n"     # an HGX board, MIG off
TIME_SLICING = """version: v1
sharing:
  timeSlicing:
    resources:
      - name: nvidia.com/gpu
        replicas: 4
"""
MIXED = "version: v1\nflags:\n  migStrategy: mixed\n"


@pytest.fixture(scope="module")
def plugin_bin():
    p = subprocess.run([os.path.join(HERE, "build-nvdp.sh")], capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, f"build-nvdp.sh failed:\n{p.stderr}"
    return p.stdout.strip().splitlines()[-1]


class Node:
    def __init__(self, name=None, text=None):
        self.dir = tempfile.mkdtemp(prefix="gs-nvdp-")
        self.path = os.path.join(ROOT, "examples", "nodes", name) if name else os.path.join(self.dir, "node.yaml")
        if text:
            with open(self.path, "w") as f:
                f.write(text)
        self.state = os.path.join(self.dir, "state")
        self.root = os.path.join(self.state, "root")

    def gs(self, *args, policy=None):
        if policy is not None:
            args = (args[0], "--config", self.policy(policy), *args[1:])
        p = subprocess.run([GPUSLICE, "--sim", self.path, "--sim-state", self.state, *args],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return p.stdout

    def policy(self, text):
        path = os.path.join(self.dir, "config.yaml")
        with open(path, "w") as f:
            f.write(text)
        return path

    def inspect(self):
        return json.loads(self.gs("inspect", "--json"))

    def apply(self, policy):
        """gpuslice's answer for the same config: {resource: sorted device IDs}."""
        out = json.loads(self.gs("apply", "--json", policy=policy))
        return {r["name"]: sorted(d["id"] for d in r["devices"]) for r in out["resources"] if r["devices"]}

    @contextlib.contextmanager
    def plugin(self, plugin_bin, policy, resources, *flags):
        """NVIDIA's plugin under `policy` (its config file) in its own mount namespace, registered
        with a fresh kubelet emulator; yields (emulator, the CDI directory). The plugin's log is
        shown when the block fails, and it must exit 0 on SIGTERM."""
        self.gs("inspect")      # the root is made when the node is first opened
        kdir = tempfile.mkdtemp(prefix="gs-k-", dir="/tmp")
        cdi = os.path.join(self.dir, "cdi")
        os.makedirs(cdi, exist_ok=True)
        env = dict(os.environ, GPUSLICE_SIM_NODE=self.path, GPUSLICE_SIM_STATE=self.state,
                   LD_LIBRARY_PATH=os.path.join(self.root, LIB_DIR), SIM_ROOT=self.root, KUBELET_DIR=kdir,
                   CDI_DIR=cdi)
        if os.environ.get("GS_SANITIZER_PRELOAD"):   # a sanitized simulator: its runtimes first
            env.update(LD_PRELOAD=os.environ["GS_SANITIZER_PRELOAD"], ASAN_OPTIONS="detect_leaks=0")
        log_path = os.path.join(self.dir, "plugin.log")
        emu = kubelet_emulator.KubeletEmulator(kdir).start()
        with open(log_path, "w") as log:
            p = subprocess.Popen(["unshare", "-m", "sh", "-c", NAMESPACE, "sh", plugin_bin,
                                  "--kubelet-socket", os.path.join(kdir, "kubelet.sock"),
                                  "--config-file", self.policy(policy), "--driver-root", self.root,
                                  "--driver-root-ctr-path", self.root, "--dev-root", self.root, *flags],
                                 stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            try:
                emu.wait_resources(resources, timeout=30)
                time.sleep(0.3)     # resources it should not have registered come in the same burst
                yield emu, cdi
            except BaseException:
                with open(log_path) as f:
                    print(f"NVIDIA device plugin log:\n{f.read()}")
                raise
            p.send_signal(signal.SIGTERM)
            assert p.wait(timeout=15) == 0, open(log_path).read()
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            emu.stop()
            shutil.rmtree(kdir, ignore_errors=True)


@pytest.fixture
def node():
    made = []

    def make(name=None, text=None):
        made.append(Node(name, text))
        return made[-1]
    yield make
    for n in made:
        shutil.rmtree(n.dir, ignore_errors=True)


def listed(emu):
    """Every registered resource and its device IDs, as the plugin listed them."""
    return {r: sorted(d.id for d in emu.devices(r)) for r in emu.resources()}


def check_preferred(emu, resource, available, size, must=()):
    """GetPreferredAllocation answers with a valid set: `size` distinct available IDs, the
    must-include ones among them."""
    got = emu.preferred(resource, available, must_include=list(must), size=size)
    assert len(got) == size == len(set(got)) and set(got) <= set(available) and set(must) <= set(got), got
    return got


def test_whole_gpus_on_an_sxm_board(plugin_bin, node):
    n = node(text=SXM8)
    inv = n.inspect()
    uuid = [g["uuid"] for g in inv["gpus"]]
    minor = {g["uuid"]: g["minor"] for g in inv["gpus"]}
    policy = "version: v1\n"
    with n.plugin(plugin_bin, policy, ["nvidia.com/gpu"], "--pass-device-specs") as (emu, _):
        assert listed(emu) == n.apply(policy) == {"nvidia.com/gpu": sorted(uuid)}
        reg = emu.wait_registration("nvidia.com/gpu")
        assert reg.endpoint == "nvidia-gpu.sock" and reg.options.get_preferred_allocation_available
        # NUMA nodes from the simulated sysfs: GPUs 0-3 on node 0, 4-7 on node 1
        assert {d.id: d.numa for d in emu.devices("nvidia.com/gpu")} == {u: (i // 4,) for i, u in enumerate(uuid)}
        # go-gpuallocator's best-effort policy over the board's topology (TopologyCommonAncestor per
        # pair, NVLink state and remote PCI info per link: NVSwitch ends are not counted as GPU
        # links, so PCIe decides): a pair behind one PCIe switch, a quad on one NUMA node
        pair = check_preferred(emu, "nvidia.com/gpu", uuid, 2)
        assert sorted(uuid.index(u) for u in pair) in [[k, k + 1] for k in range(0, 8, 2)], pair
        assert sorted(check_preferred(emu, "nvidia.com/gpu", uuid, 2, must=[uuid[3]])) == sorted(uuid[2:4])
        quad = check_preferred(emu, "nvidia.com/gpu", uuid, 4)
        assert sorted(quad) in [sorted(uuid[:4]), sorted(uuid[4:])], quad
        # Allocate: NVIDIA_VISIBLE_DEVICES (the default envvar strategy, UUIDs) and, with
        # --pass-device-specs, each GPU's device node under the dev root
        r = emu.allocate("nvidia.com/gpu", pair)
        assert dict(r.envs) == {"NVIDIA_VISIBLE_DEVICES": ",".join(pair)} and not r.cdi_devices
        assert sorted((d.container_path, d.host_path, d.permissions) for d in r.devices) == \
               sorted((f"/dev/nvidia{minor[u]}", f"{n.root}/dev/nvidia{minor[u]}", "rw") for u in pair)
        assert all(os.path.isfile(d.host_path) for d in r.devices)


def test_whole_gpus_on_a_pcie_node(plugin_bin, node):
    n = node("t4x2.yaml")
    uuid = [g["uuid"] for g in n.inspect()["gpus"]]
    policy = "version: v1\nflags:\n  plugin:\n    deviceIDStrategy: index\n"
    with n.plugin(plugin_bin, policy, ["nvidia.com/gpu"]) as (emu, _):
        assert listed(emu) == n.apply(policy) == {"nvidia.com/gpu": sorted(uuid)}   # IDs stay UUIDs
        assert check_preferred(emu, "nvidia.com/gpu", uuid, 2) and \
               check_preferred(emu, "nvidia.com/gpu", uuid, 1, must=[uuid[1]]) == [uuid[1]]
        r = emu.allocate("nvidia.com/gpu", [uuid[1]])
        assert dict(r.envs) == {"NVIDIA_VISIBLE_DEVICES": "1"}      # deviceIDStrategy: index


@pytest.mark.parametrize("rename", [False, True])
def test_time_slicing(plugin_bin, node, rename):
    n = node("t4x2.yaml")
    uuid = [g["uuid"] for g in n.inspect()["gpus"]]
    res = "nvidia.com/gpu.shared" if rename else "nvidia.com/gpu"
    policy = TIME_SLICING.replace("  timeSlicing:\n", "  timeSlicing:\n    renameByDefault: true\n" if rename
                                  else "  timeSlicing:\n")
    with n.plugin(plugin_bin, policy, [res]) as (emu, _):
        replicas = sorted(f"{u}::{k}" for u in uuid for k in range(4))
        assert listed(emu) == n.apply(policy) == {res: replicas}
        # replicas: distributed over the GPUs, not packed on one (the plugin's distributedAlloc)
        two = check_preferred(emu, res, replicas, 2)
        assert {i.split("::")[0] for i in two} == set(uuid), two
        r = emu.allocate(res, [two[0]])
        assert dict(r.envs) == {"NVIDIA_VISIBLE_DEVICES": two[0].split("::")[0]}   # the GPU, not the replica


def test_time_slicing_refuses_more_than_one_replica_when_asked(plugin_bin, node):
    n = node("t4x2.yaml")
    u = n.inspect()["gpus"][0]["uuid"]
    policy = TIME_SLICING.replace("  timeSlicing:\n", "  timeSlicing:\n    failRequestsGreaterThanOne: true\n")
    with n.plugin(plugin_bin, policy, ["nvidia.com/gpu"]) as (emu, _):
        assert listed(emu) == n.apply(policy)
        with pytest.raises(kubelet_emulator.grpc.RpcError) as e:
            emu.allocate("nvidia.com/gpu", [f"{u}::0", f"{u}::1"])
        assert "maximum request size for shared resources is 1; found 2" in e.value.details(), e.value.details()


def mixed_node(node):
    n = node("h100x4-l4x3.yaml")
    n.gs("sim", "mig-create", "--gpu", "0", "--profile", "3g.40gb", "--start", "4")
    n.gs("sim", "mig-create", "--gpu", "0", "--profile", "1g.10gb", "--start", "0")
    n.gs("sim", "mig-create", "--gpu", "2", "--profile", "7g.80gb", "--start", "0")
    return n


def test_mig_mixed(plugin_bin, node):
    n = mixed_node(node)
    inv = n.inspect()
    migs = {m["uuid"]: (g, m) for g in inv["gpus"] for m in (g.get("mig") or {}).get("devices", [])}
    assert len(migs) == 3
    resources = ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb", "nvidia.com/mig-7g.80gb"]
    with n.plugin(plugin_bin, MIXED, resources, "--pass-device-specs") as (emu, _):
        got = listed(emu)
        # the L4s whole; GPUs 1 and 3 (MIG on, no instances) nowhere; one resource per profile
        assert got == n.apply(MIXED)
        assert sorted(got) == resources and got["nvidia.com/gpu"] == sorted(g["uuid"] for g in inv["gpus"][4:])
        for u, (g, m) in migs.items():
            res = f"nvidia.com/mig-{m['profile']}"
            assert got[res] == [u]
            assert check_preferred(emu, res, [u], 1) == [u]
            r = emu.allocate(res, [u])
            assert dict(r.envs) == {"NVIDIA_VISIBLE_DEVICES": u}
            # the plugin's GetPaths: the parent and the GI and CI capability nodes from mig-minors
            gi_cap = 3 + g["minor"] * 135 + m["gi_id"] * 9
            want = [f"/dev/nvidia{g['minor']}", f"/dev/nvidia-caps/nvidia-cap{gi_cap}",
                    f"/dev/nvidia-caps/nvidia-cap{gi_cap + 1 + m['ci_id']}"]
            assert [(d.container_path, d.host_path) for d in r.devices] == [(p, n.root + p) for p in want]
            assert all(os.path.isfile(d.host_path) for d in r.devices)


def test_cdi_names(plugin_bin, node):
    """deviceListStrategy cdi-cri: Allocate answers with the CDI names of the spec the plugin wrote
    at start (kind k8s.device-plugin.nvidia.com/gpu) from the simulated driver root."""
    n = mixed_node(node)
    inv = n.inspect()
    policy = MIXED + "  plugin:\n    deviceListStrategy: [cdi-cri]\n"
    with n.plugin(plugin_bin, policy, ["nvidia.com/gpu", "nvidia.com/mig-3g.40gb"]) as (emu, cdi):
        assert listed(emu) == n.apply(MIXED)      # gpuslice's own CDI kind differs; the devices do not
        specs = [json.load(open(os.path.join(cdi, f))) if f.endswith(".json") else None for f in os.listdir(cdi)]
        assert len(specs) == 1 and specs[0]["kind"] == "k8s.device-plugin.nvidia.com/gpu", os.listdir(cdi)
        nodes = {d["name"]: [x["path"] for x in d["containerEdits"]["deviceNodes"]] for d in specs[0]["devices"]}
        mig = emu.devices("nvidia.com/mig-3g.40gb")[0].id
        l4 = inv["gpus"][4]["uuid"]
        g0 = inv["gpus"][0]
        gi_cap = 3 + g0["minor"] * 135 + next(m["gi_id"] for m in g0["mig"]["devices"] if m["uuid"] == mig) * 9
        assert nodes[l4] == [f"/dev/nvidia{inv['gpus'][4]['minor']}"]
        assert nodes[mig] == [f"/dev/nvidia{g0['minor']}", f"/dev/nvidia-caps/nvidia-cap{gi_cap}",
                              f"/dev/nvidia-caps/nvidia-cap{gi_cap + 1}"]
        for res, u in [("nvidia.com/mig-3g.40gb", mig), ("nvidia.com/gpu", l4)]:
            r = emu.allocate(res, [u])
            assert [d.name for d in r.cdi_devices] == [f"k8s.device-plugin.nvidia.com/gpu={u}"] and not r.envs


def test_xid_marks_the_gpu_unhealthy(plugin_bin, node):
    n = node("t4x2.yaml")
    uuid = [g["uuid"] for g in n.inspect()["gpus"]]
    with n.plugin(plugin_bin, "version: v1\n", ["nvidia.com/gpu"]) as (emu, _):
        time.sleep(0.5)        # its health thread registers the event set after the first list
        n.gs("sim", "xid", "1", "79")
        emu.wait_for("nvidia.com/gpu", lambda ds: {d.id: d.health for d in ds} ==
                     {uuid[0]: "Healthy", uuid[1]: "Unhealthy"}, timeout=20)
