"""NVIDIA's own device plugin (v0.18.0, built by tests/nvmlclients/build-nvdp.sh) on the same
simulated node, registered with the same real kubelet: the same NVIDIA config gives the same
resources in the API server, and the same device IDs in the kubelet's checkpoint, from either
plugin (a check of the simulator, and of gpuslice's drop-in claim). The plugin runs the way
tests/nvmlclients/test_nvidia_plugin.py runs it (its mount namespace script: the simulated root
over the host paths it reads, its socket directory the real kubelet's device-plugins directory),
its pid in DIR/run/nvidia-device-plugin.pid so that `cluster.sh down` stops it too."""
import os
import subprocess
import sys

import pytest

from e2e import ROOT, E2EError, proc_start, terminate, wait
from kubelet_state import checkpoint

NVML_CLIENTS = os.path.join(ROOT, "tests", "nvmlclients")
sys.path.insert(0, NVML_CLIENTS)
from test_nvidia_plugin import LIB_DIR, NAMESPACE, plugin_bin  # noqa: E402,F401 (plugin_bin: the fixture)

TIME_SLICING = ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                "      - name: nvidia.com/gpu\n        replicas: 4\n")
MIXED = "version: v1\nflags:\n  migStrategy: mixed\n"


class NvidiaPlugin:
    def __init__(self, cluster, plugin_bin, node, state, config_path):
        self.c = cluster
        root = os.path.join(state, "root")
        kdir = os.path.join(cluster.kubelet_dir, "device-plugins")
        cdi = os.path.join(cluster.dir, "nvdp-cdi")
        os.makedirs(cdi, exist_ok=True)
        env = dict(os.environ, GPUSLICE_SIM_NODE=node, GPUSLICE_SIM_STATE=state,
                   LD_LIBRARY_PATH=os.path.join(root, LIB_DIR), SIM_ROOT=root, KUBELET_DIR=kdir, CDI_DIR=cdi)
        if os.environ.get("GS_SANITIZER_PRELOAD"):   # a sanitized simulator: its runtimes first
            env.update(LD_PRELOAD=os.environ["GS_SANITIZER_PRELOAD"], ASAN_OPTIONS="detect_leaks=0")
        self.log_path = os.path.join(cluster.dir, "logs", "nvidia-device-plugin.log")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                ["unshare", "-m", "sh", "-c", NAMESPACE, "sh", plugin_bin,
                 "--kubelet-socket", os.path.join(kdir, "kubelet.sock"), "--config-file", config_path,
                 "--driver-root", root, "--driver-root-ctr-path", root, "--dev-root", root],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.pidfile = os.path.join(cluster.dir, "run", "nvidia-device-plugin.pid")
        with open(self.pidfile, "w") as f:
            f.write(f"{self.proc.pid} {proc_start(self.proc.pid)}\n")

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self):
        terminate(self.proc, 15)
        os.unlink(self.pidfile)


def registered(cluster, resources):
    """The device IDs the kubelet's checkpoint has for RESOURCES, sorted."""
    reg = checkpoint(cluster).get("RegisteredDevices") or {}
    return {r: sorted(reg.get(r) or []) for r in resources}


@pytest.mark.parametrize("config,node,mig", [
    ("time-slicing", "t4x2.yaml", False),
    ("mig-mixed", "h100x4-l4x3.yaml", True),
])
def test_same_config_same_resources_from_either_plugin(cluster, agent, plugin_bin, config, node, mig):
    policy = TIME_SLICING if config == "time-slicing" else MIXED
    a = agent(node, policy)
    if mig:  # instances made by hand, as an operator would, before either plugin reads them
        a.stop()
        for gpu, profile, start in ((0, "3g.40gb", 0), (0, "1g.10gb", 6), (1, "7g.80gb", 0), (2, "2g.20gb", 0)):
            a.sim("sim", "mig-create", "--gpu", str(gpu), "--profile", profile, "--start", str(start))
        a.start()
    want = a.apply_json()
    cluster.wait_allocatable(want, timeout=60)
    ids = registered(cluster, want)
    a.stop()
    wait(lambda: not cluster.nonzero(), 60, "allocatable to drop once gpuslice's agent is gone")

    p = NvidiaPlugin(cluster, plugin_bin, a.node, a.sim_state, a.policy)
    try:
        try:
            cluster.wait_allocatable(want, timeout=60)
            wait(lambda: registered(cluster, want) == ids, 20, "the same device IDs in the kubelet's checkpoint")
        except E2EError:
            print(f"NVIDIA device plugin log:\n{p.log()[-6000:]}")
            raise
    finally:
        p.stop()
