"""The Node's capacity and allocatable in the real API server show what the policy says, for each
sharing mode: gpuslice's agent registers with the real kubelet, which publishes the devices'
count in the Node's status. Each test compares the API server's figures with fixed expectations
(from the node description and the policy) and with `gpuslice apply` on the same simulated node."""
import os

from e2e import NS, wait  # noqa: F401

H100X2 = "gpus:\n  - model: H100-SXM5-80GB\n    count: 2\n    mig: enabled\n"
FAKE_MPS = os.environ.get("FAKE_MPS_CONTROL", "")


def _node_file(cluster, name, text):
    path = os.path.join(cluster.dir, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def test_whole_gpus(cluster, agent):
    a = agent("t4x2.yaml", "version: v1\n")
    cluster.wait_allocatable({"nvidia.com/gpu": 2})
    cluster.wait_allocatable({"nvidia.com/gpu": 2}, field="capacity", timeout=20)
    assert a.apply_json() == {"nvidia.com/gpu": 2}


def test_time_sliced_replicas(cluster, agent):
    ts = ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
          "    - name: nvidia.com/gpu\n      replicas: 4\n")
    a = agent("t4x2.yaml", ts)
    cluster.wait_allocatable({"nvidia.com/gpu": 8})
    cluster.wait_allocatable({"nvidia.com/gpu": 8}, field="capacity", timeout=20)
    assert a.apply_json() == {"nvidia.com/gpu": 8}


def test_mig_mixed_per_profile(cluster, agent):
    """The agent lays out all-balanced (2 x 1g + 2g + 3g per H100) and advertises each profile as
    a resource of its own; the L4 cards stay whole."""
    policy = "version: v1\nflags:\n  migStrategy: mixed\ngpuslice:\n  mig:\n    config: all-balanced\n"
    a = agent("h100x4-l4x3.yaml", policy)
    want = {"nvidia.com/gpu": 3, "nvidia.com/mig-1g.10gb": 8, "nvidia.com/mig-2g.20gb": 4,
            "nvidia.com/mig-3g.40gb": 4}
    cluster.wait_allocatable(want, timeout=90)
    assert a.apply_json() == want


def test_mig_single(cluster, agent):
    """migStrategy single: every H100 in 1g.10gb (7 each), advertised as nvidia.com/gpu."""
    policy = "version: v1\nflags:\n  migStrategy: single\ngpuslice:\n  mig:\n    config: all-1g.10gb\n"
    a = agent(_node_file(cluster, "h100x2.yaml", H100X2), policy)
    cluster.wait_allocatable({"nvidia.com/gpu": 14}, timeout=90)
    assert a.apply_json() == {"nvidia.com/gpu": 14}


def test_mps_replicas(cluster, agent):
    """MPS: 3 replicas per T4, each served by the GPU's control daemon (the stand-in
    tests/mps/fake_mps_control): replicas are advertised once the daemons run."""
    assert FAKE_MPS and os.access(FAKE_MPS, os.X_OK), f"FAKE_MPS_CONTROL={FAKE_MPS!r}: not the built stand-in"
    root = os.path.join(cluster.dir, "mps")
    os.makedirs(root, exist_ok=True)
    policy = (f"version: v1\nflags:\n  mpsRoot: {root}\nsharing:\n  mps:\n    resources:\n"
              f"    - name: nvidia.com/gpu\n      replicas: 3\n")
    a = agent("t4x2.yaml", policy, extra=["--mps-control", FAKE_MPS])
    cluster.wait_allocatable({"nvidia.com/gpu": 6}, timeout=60)
    assert a.apply_json()["nvidia.com/gpu"] == 6
