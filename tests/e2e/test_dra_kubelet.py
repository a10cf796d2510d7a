"""The DRA driver's kubelet side (gpuslice agent --dra) with the real kubelet: the kubelet's
plugin watcher finds the registration socket in its plugins_registry, asks GetInfo (type
DRAPlugin, v1.DRAPlugin) and tells the agent it registered the driver
(NotifyRegistrationStatus(plugin_registered=true): the agent logs it); after a kubelet restart
the new kubelet finds the socket again and registers the driver again. The kubelet publishes
nothing for a DRA plugin, so the agent's side is what is checked, with the kubelet's own log line
of the registration."""
import os
import subprocess
import time

from e2e import CLUSTER_SH, wait

DRIVER = "gpu.gpuslice.io"


def _dra_args(cluster):
    return ["--dra", "--kubelet-registry-dir", os.path.join(cluster.kubelet_dir, "plugins_registry"),
            "--kubelet-plugins-dir", os.path.join(cluster.kubelet_dir, "plugins")]


def test_dra_plugin_registers_with_the_kubelet_and_again_after_its_restart(cluster, agent):
    a = agent("t4x2.yaml", "version: v1\n", _dra_args(cluster))
    reg_sock = os.path.join(cluster.kubelet_dir, "plugins_registry", f"{DRIVER}-reg.sock")
    wait(lambda: f"registered with the kubelet as {DRIVER} (registration 1)" in a.log(), 120,
         "the kubelet to register the DRA driver (NotifyRegistrationStatus)")
    log = a.log()
    assert f"the kubelet asked GetInfo on {reg_sock}" in log
    assert "refused to register" not in log
    assert os.path.exists(os.path.join(cluster.kubelet_dir, "plugins", DRIVER, "dra.sock"))
    klog = cluster.log("kubelet")
    assert "RegisterPlugin started" in klog and reg_sock in klog, klog[-3000:]
    # a new kubelet walks plugins_registry at its start and registers the driver again; its
    # healthz answers within seconds (the ~60 s seen before was cluster.sh polling the default port
    # base's healthz for a cluster on another base: it now reads the cluster's own)
    t0 = time.monotonic()
    p = subprocess.run(["bash", CLUSTER_SH, "restart-kubelet", cluster.dir], capture_output=True, text=True,
                       timeout=300, env=cluster.env)
    assert p.returncode == 0, p.stdout + p.stderr
    wait(lambda: f"registered with the kubelet as {DRIVER} (registration 2)" in a.log(), 30,
         "the restarted kubelet to register the DRA driver again")
    t_reg = time.monotonic() - t0
    healthz = f"http://127.0.0.1:{cluster.port_base + 248}/healthz"
    wait(lambda: subprocess.run(["curl", "-sf", "-m", "5", healthz], capture_output=True).returncode == 0, 30,
         "the restarted kubelet's healthz")
    print(f"kubelet restart: DRA driver registered again after {t_reg:.1f} s, healthz after "
          f"{time.monotonic() - t0:.1f} s")
    assert a.alive()
    # the device plugins were not disturbed: the node still advertises the GPUs
    cluster.wait_allocatable({"nvidia.com/gpu": 2}, timeout=120)
