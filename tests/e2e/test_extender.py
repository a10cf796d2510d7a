"""The scheduler extender in the real cluster: `gpuslice extender --kubeconfig` (a host process)
keeps its model from the API server, and the e2e cluster's kube-scheduler is restarted with a
KubeSchedulerConfiguration naming it (filter, prioritize, bind; nodeCacheCapable; the fractional
resources managed, not ignored). The agent (a host process with --kubeconfig, so that its
GetPreferredAllocation finds a pod's gpuslice.io/gpu-index) serves a simulated node with two
fractional H100s (80 GiB units and 100 compute units each); the Node is labelled from the agent's
features file as NFD would.

- a 40 GiB pod: the extender binds it (the Binding carries the GPU's annotation), and the
  container's device node is the GPU its annotation names;
- another 40 GiB pod takes the other GPU (two do not fit one): each GPU has ~39.6 GiB left;
- a 60 GiB pod, which the scheduler's sum (80 of 160 units free) would bind, stays Pending with the
  extender's per-GPU reason in its FailedScheduling event;
- the first pod deleted, the extender gives its share back and the 60 GiB pod runs on that GPU.
The scheduler is restarted with its own configuration afterwards, the labels removed."""
import json
import os
import subprocess
import time

import pytest

from e2e import CLUSTER_SH, NS, extender_open, start_extender, wait, write_sched_config

H100X2 = "gpus:\n  - model: H100-SXM5-80GB\n    count: 2\n"
POLICY = ("version: v1\nflags:\n  plugin:\n    deviceListStrategy: cdi-cri\n"
          "gpuslice:\n  gpus:\n    - {model: \"NVIDIA H100*\", mode: fractional}\n")
MEM, SM = "gpuslice.io/gpu-memory", "gpuslice.io/gpu-compute"
ANN = "gpuslice.io/gpu-index"
# the container writes its GPU device nodes where the test reads them (a hostPath), then holds its
# units (the e2e node has no address for `kubectl logs`)
SCRIPT = "ls /dev | grep -E '^nvidia[0-9]+$' | tr '\\n' ' ' > /out/$NAME.tmp; mv /out/$NAME.tmp /out/$NAME; sleep 600"


def restart_scheduler(cluster, config):
    env = dict(cluster.env, GS_E2E_PORT_BASE=str(cluster.port_base))
    env.pop("GS_E2E_SCHEDULER_CONFIG", None)
    if config:
        env["GS_E2E_SCHEDULER_CONFIG"] = config
    p = subprocess.run(["bash", CLUSTER_SH, "restart-scheduler", cluster.dir], capture_output=True, text=True,
                       timeout=180, env=env)
    assert p.returncode == 0, f"cluster.sh restart-scheduler: exit {p.returncode}\n{p.stderr[-3000:]}"


def metrics(cluster, addr):
    """The extender's /metrics (over HTTPS with the scheduler's client certificate), {name: value}."""
    with extender_open(cluster, addr, "/metrics", timeout=5) as r:
        out = {}
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                out[k] = float(v)
        return out


def features(agent):
    try:
        with open(os.path.join(agent.base, "features")) as f:
            return dict(line.strip().split("=", 1) for line in f if "=" in line)
    except FileNotFoundError:
        return {}


@pytest.fixture
def extender(cluster):
    """The extender (a host process) and a scheduler configuration naming it, which manages the
    fractional resources and nvidia.com/gpu; the scheduler's own configuration back after."""
    addr = f"127.0.0.1:{cluster.port_base + 410}"
    ext = start_extender(cluster, "extender", addr)
    conf = write_sched_config(os.path.join(cluster.dir, "extender-scheduler.yaml"), cluster,
                              f"https://{addr}/gpuslice", managed=(MEM, SM, "nvidia.com/gpu"))
    labelled = []
    try:
        yield addr, conf, ext.proc, ext.log_path, labelled
    finally:
        restart_scheduler(cluster, None)
        ext.stop(10)
        if labelled:
            cluster.kubectl("label", "node", cluster.node_name, *[k + "-" for k in labelled], check=False)


def run(cluster, name, gib):
    out = os.path.join(cluster.dir, "extender-out")
    os.makedirs(out, exist_ok=True)
    y = cluster.pod_yaml(name, {MEM: gib}, f"NAME={name}; " + SCRIPT)
    y += (f"    volumeMounts:\n    - {{name: out, mountPath: /out}}\n  volumes:\n  - name: out\n"
          f"    hostPath: {{path: {out}, type: DirectoryOrCreate}}\n")
    cluster.kubectl("apply", "-f", "-", input=y)


def gpu_of(cluster, name):
    return cluster.pod(name)["metadata"].get("annotations", {}).get(ANN)


def devices(cluster, name):
    def got():
        try:
            with open(os.path.join(cluster.dir, "extender-out", name)) as f:
                return f.read().split() or ["(none)"]
        except FileNotFoundError:
            return None
    return wait(got, 60, f"the device nodes {name} writes")


def test_extender_in_the_real_scheduler(cluster, agent, extender):
    addr, conf, proc, log_path, labelled = extender
    t0 = time.monotonic()
    node = os.path.join(cluster.dir, "h100x2-ext.yaml")
    with open(node, "w") as f:
        f.write(H100X2)
    a = agent(node, POLICY, extra=["--kubeconfig", cluster.kubeconfig, "--node-name", cluster.node_name,
                                   "--cdi-hook", ""])
    cluster.wait_allocatable({MEM: 160, SM: 200}, timeout=120)
    labels = wait(lambda: {k: v for k, v in features(a).items() if k.startswith(MEM + ".")}, 30,
                  "the agent's gpu-memory labels in its features file")
    assert labels[MEM + ".count"] == "2", labels
    labelled.extend(labels)
    cluster.kubectl("label", "node", cluster.node_name, "--overwrite", *[f"{k}={v}" for k, v in labels.items()])
    wait(lambda: metrics(cluster, addr).get("gpuslice_extender_nodes") == 1, 30, "the extender's model of the Node")
    restart_scheduler(cluster, conf)

    # 40 GiB: bound by the extender (the Binding's annotation on the pod), its device that GPU
    run(cluster, "ext-a", 40)
    cluster.wait_phase("ext-a", ("Running",), timeout=120)
    ga = gpu_of(cluster, "ext-a")
    assert ga in ("0", "1"), cluster.pod("ext-a")["metadata"]
    assert devices(cluster, "ext-a") == [f"nvidia{ga}"]
    # 50 GiB: a GPU offers the node's 80 units (its 79.6 GiB rounded, as the kubelet admits them),
    # 40 + 50 do not fit one, so the other GPU
    other = "1" if ga == "0" else "0"
    run(cluster, "ext-b", 50)
    cluster.wait_phase("ext-b", ("Running",), timeout=90)
    assert gpu_of(cluster, "ext-b") == other
    assert devices(cluster, "ext-b") == [f"nvidia{other}"]
    m = metrics(cluster, addr)
    assert m["gpuslice_extender_binds_total"] == 2 and m["gpuslice_extender_pods_bound"] == 2, m

    # 60 GiB: the node's sum has 70 units free, no GPU has 60 GiB (40 and 30): Pending with the reason
    assert cluster.resources()[MEM] - (40 + 50) >= 60
    run(cluster, "ext-d", 60)
    free = {ga: 500, other: 375}  # milli-GPU of 80 units
    reason = (f"no single GPU has 750 milli-GPU free (free per GPU: {free['0']},{free['1']}; 875 in all)")
    ev = wait(lambda: [e for e in cluster.events("ext-d") if reason in e], 60,
              "ext-d's FailedScheduling event with the extender's reason")
    assert cluster.pod("ext-d")["status"]["phase"] == "Pending" and not cluster.pod("ext-d")["spec"].get("nodeName")
    print(ev[0])

    # the first pod leaves: its share is given back, and the 60 GiB pod gets its GPU
    cluster.kubectl("delete", "pod", "-n", NS, "ext-a", "--grace-period=1", "--wait=false")
    cluster.wait_phase("ext-d", ("Running",), timeout=90)
    assert gpu_of(cluster, "ext-d") == ga
    assert devices(cluster, "ext-d") == [f"nvidia{ga}"]
    wait(lambda: metrics(cluster, addr).get("gpuslice_extender_pods_bound") == 2, 30, "ext-a's share given back")
    assert proc.poll() is None
    with open(log_path, errors="replace") as f:
        log = f.read()
    assert "GPU nodes from the API server" in log and "bound pods from the API server" in log
    assert a.alive()
    print(f"test_extender: {time.monotonic() - t0:.1f} s")
