"""pytest fixtures of the e2e tests (see e2e.py): `cluster` (one per run: built and brought up
by tests/e2e/build.sh and cluster.sh, taken down at the end, its logs printed for a failure) and
`agent` (a factory: gpuslice's agent on a simulated node, stopped after the test, with the
test's pods deleted). Nothing here skips: a machine that cannot run the cluster fails the tests
with the reason (cluster.sh's own message and the tail of the failing component's log)."""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e import CLUSTER_SH, GPUSLICE, NS, Agent, Cluster, E2EError, wait  # noqa: E402

_failed = []


def pytest_runtest_logreport(report):
    if report.failed:
        _failed.append(report.nodeid)


def _tails(dir, lines=40):
    out = []
    for log in sorted(glob.glob(os.path.join(dir, "logs", "*.log"))):
        with open(log, errors="replace") as f:
            tail = f.read().splitlines()[-lines:]
        out.append(f"---- {log} (last {len(tail)} lines)\n" + "\n".join(tail))
    return "\n".join(out)


def _reaper(dir):
    """A watcher outside this process group that takes the cluster down if this run ends without
    doing it: meson's timeout sends SIGTERM to the group and SIGKILL half a second later, too soon
    for the teardown, and the cluster's daemons (in sessions of their own) outlived the run and
    held the ports of the next one. cluster.sh down stops by PID and start time, so the second
    down after a normal teardown (its logs kept for a failure) stops nothing."""
    subprocess.Popen(
        ["bash", "-c", 'while kill -0 "$1" 2>/dev/null; do sleep 2; done; '
         '[ -d "$2/run" ] && exec bash "$3" down "$2" >>"$2/logs/reaper.log" 2>&1', "gs-e2e-reaper",
         str(os.getpid()), dir, CLUSTER_SH],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


@pytest.fixture(scope="session")
def cluster():
    assert os.geteuid() == 0, "the e2e cluster needs root (the kubelet and containerd make cgroups and mounts)"
    assert os.access(GPUSLICE, os.X_OK), f"GPUSLICE={GPUSLICE}: not the built binary"
    reuse = os.environ.get("GS_E2E_DIR")
    if reuse:
        c = Cluster(reuse)
        c.cluster("status")
        c.kubectl("create", "namespace", NS, check=False)
        wait(lambda: c.kubectl("get", "serviceaccount", "default", "-n", NS, check=False).returncode == 0,
             60, f"the default service account of {NS}")
        yield c
        return
    dir = tempfile.mkdtemp(prefix="gse2e.", dir="/tmp")  # short: unix socket paths live under it
    _reaper(dir)
    p = subprocess.run(["bash", CLUSTER_SH, "up", dir], capture_output=True, text=True, timeout=1500)
    if p.returncode != 0:
        msg = f"cluster.sh up {dir}: exit {p.returncode}\n{p.stderr[-6000:]}\n{_tails(dir)}"
        subprocess.run(["bash", CLUSTER_SH, "down", dir], capture_output=True, timeout=300)
        pytest.fail(msg, pytrace=False)
    c = Cluster(dir)
    c.kubectl("create", "namespace", NS)
    wait(lambda: c.kubectl("get", "serviceaccount", "default", "-n", NS, check=False).returncode == 0,
         60, f"the default service account of {NS}")
    yield c
    d = subprocess.run(["bash", CLUSTER_SH, "down", dir], capture_output=True, text=True, timeout=300)
    if _failed:
        print(f"\n==== e2e: {len(_failed)} failed; cluster logs kept in {dir}/logs\n{_tails(dir)}")
    print(d.stderr)
    if not _failed and not os.environ.get("GS_E2E_KEEP"):
        shutil.rmtree(dir, ignore_errors=True)


@pytest.fixture
def agent(cluster):
    """agent(NODE, POLICY_TEXT, extra=()) starts gpuslice's agent; stopped after the test, and the
    test's pods deleted while it still serves (so the kubelet releases their devices)."""
    agents = []

    def start(node, policy, extra=()):
        a = Agent(cluster, node, policy, extra)
        agents.append(a)
        return a

    yield start
    try:
        cluster.delete_pods()
    finally:
        for a in agents:
            try:
                a.stop()
            except E2EError as e:
                print(e)
        for a in agents:
            print(f"---- agent log {a.log_path}\n{a.log()[-4000:]}")
        # an agent stopped keeps its ResourceSlices (a restart finds them; the kubelet deletes them
        # about 30 s after the plugin is gone): deleted here, so that the next test's extender does
        # not take the node's GPUs for the DRA driver's
        drivers = {a.extra[a.extra.index("--dra-driver") + 1] if "--dra-driver" in a.extra[:-1] else "gpu.gpuslice.io"
                   for a in agents if "--dra" in a.extra}
        for d in sorted(drivers):
            cluster.kubectl("delete", "resourceslices", "--wait=true", "--ignore-not-found", "--field-selector",
                            f"spec.nodeName={cluster.node_name},spec.driver={d}", check=False, timeout=90)
