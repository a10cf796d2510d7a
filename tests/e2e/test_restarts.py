"""Restarts against the real kubelet, Xid health, metrics through the real PodResources API and
a bad policy, each while pods hold devices."""
import os
import signal
import time

from e2e import NS, E2EError, proc_start, wait  # noqa: F401
from kubelet_state import all_assigned

TS2 = ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
       "    - name: nvidia.com/gpu\n      replicas: 2\n")
HOLD = "echo started > /dev/termination-log; sleep 3600"


def _running(cluster, names):
    for n in names:
        cluster.wait_phase(n, ("Running",))
    return {n: cluster.pod(n)["status"]["containerStatuses"][0]["containerID"] for n in names}


def test_kubelet_restart_reregisters_and_keeps_pods(cluster, agent):
    agent("t4x2.yaml", TS2)
    cluster.wait_allocatable({"nvidia.com/gpu": 4})
    cluster.create_pod("hold0", {"nvidia.com/gpu": 1}, HOLD)
    cluster.create_pod("hold1", {"nvidia.com/gpu": 1}, HOLD)
    before = _running(cluster, ["hold0", "hold1"])
    assigned = sorted(all_assigned(cluster, "nvidia.com/gpu"))
    pid = cluster.pid("kubelet")
    t0 = time.monotonic()
    cluster.cluster("restart-kubelet")
    assert proc_start(pid) is None, "the old kubelet is still running"
    # the kubelet re-created kubelet.sock: the agent registers again and allocatable comes back
    cluster.wait_allocatable({"nvidia.com/gpu": 4}, timeout=90)
    t_back = time.monotonic() - t0
    after = _running(cluster, ["hold0", "hold1"])
    assert after == before, "containers were restarted"
    for n in ("hold0", "hold1"):
        assert cluster.pod(n)["status"]["containerStatuses"][0]["restartCount"] == 0
    assert sorted(all_assigned(cluster, "nvidia.com/gpu")) == assigned
    print(f"kubelet restart: allocatable back after {t_back:.1f} s")


def test_agent_restart_hands_no_device_out_twice(cluster, agent):
    a = agent("t4x2.yaml", TS2)
    cluster.wait_allocatable({"nvidia.com/gpu": 4})
    cluster.create_pod("a0", {"nvidia.com/gpu": 1}, HOLD)
    cluster.create_pod("a1", {"nvidia.com/gpu": 1}, HOLD)
    before = _running(cluster, ["a0", "a1"])
    a.restart()
    cluster.wait_allocatable({"nvidia.com/gpu": 4}, timeout=60)
    cluster.create_pod("a2", {"nvidia.com/gpu": 1}, HOLD)
    cluster.create_pod("a3", {"nvidia.com/gpu": 1}, HOLD)
    _running(cluster, ["a2", "a3"])
    ids = all_assigned(cluster, "nvidia.com/gpu")
    assert len(ids) == 4 and len(set(ids)) == 4, f"a device handed out twice: {ids}"
    assert _running(cluster, ["a0", "a1"]) == before


def test_xid_takes_devices_out_and_back(cluster, agent):
    quiet = 6
    policy = TS2 + f"gpuslice:\n  health:\n    recoveryQuietPeriod: {quiet}s\n"
    a = agent("t4x2.yaml", policy)
    cluster.wait_allocatable({"nvidia.com/gpu": 4})
    t0 = time.monotonic()
    a.sim("sim", "xid", "0", "79")
    cluster.wait_allocatable({"nvidia.com/gpu": 2}, timeout=30)
    t_out = time.monotonic() - t0
    cluster.wait_allocatable({"nvidia.com/gpu": 4}, timeout=60)
    t_back = time.monotonic() - t0
    assert cluster.resources("capacity")["nvidia.com/gpu"] == 4
    assert t_back >= quiet - 0.5, f"back after {t_back:.1f} s, the quiet period is {quiet} s"
    print(f"Xid 79 on GPU 0: out of allocatable after {t_out:.1f} s, back after {t_back:.1f} s (quiet {quiet} s)")


def test_metrics_attribute_pods_through_pod_resources(cluster, agent):
    a = agent("t4x2.yaml", TS2, extra=["--pod-attribution-interval-ms", "500"])
    cluster.wait_allocatable({"nvidia.com/gpu": 4})
    cluster.create_pod("metered", {"nvidia.com/gpu": 1}, HOLD)
    _running(cluster, ["metered"])
    (dev,) = all_assigned(cluster, "nvidia.com/gpu")
    key = (f'gpuslice_pod_device_info{{namespace="{NS}",pod="metered",container="main",'
           f'resource="nvidia.com/gpu",device="{dev}"}}')
    wait(lambda: a.samples().get(key) == 1, 30, key)
    infos = [k for k in a.samples() if k.startswith("gpuslice_pod_device_info{")]
    assert infos == [key], infos


def test_bad_policy_refused_while_pods_run(cluster, agent):
    a = agent("t4x2.yaml", TS2)
    cluster.wait_allocatable({"nvidia.com/gpu": 4})
    cluster.create_pod("steady", {"nvidia.com/gpu": 1}, HOLD)
    before = _running(cluster, ["steady"])
    # replicas: 1 is refused (NVIDIA's rule: time-slicing needs at least 2)
    a.write_policy("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                   "    - name: nvidia.com/gpu\n      replicas: 1\n")
    wait(lambda: "Rejected policy" in a.log() and "keeping the running policy" in a.log(), 20,
         "the agent to refuse the policy")
    time.sleep(3)
    assert a.alive()
    assert cluster.nonzero() == {"nvidia.com/gpu": 4}
    assert _running(cluster, ["steady"]) == before
    a.proc.send_signal(signal.SIGHUP)  # a reload of the same bad file changes nothing either
    time.sleep(2)
    assert a.alive() and cluster.nonzero() == {"nvidia.com/gpu": 4}
