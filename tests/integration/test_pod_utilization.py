"""Per-pod GPU utilization (gpuslice_pod_gpu_utilization_ratio, docs/user-guide.md#metrics): the
simulated node's processes run known duty schedules (`gpuslice sim util`), PodResources (an
emulator) says which container holds which device, and each container's metric must be its
processes' share of the GPU within TOL, with the processes of no pod under empty pod labels and
the sum over a GPU equal to the GPU's own utilization. Covered: a time-sliced GPU with the guard
and a fractional GPU (processes tied to their container by the guard's counters region they map),
an MPS GPU held by one container (a process in a pod's cgroup, beside a host process), time-sliced
and MPS GPUs shared by two pods without the guard (pod UIDs from cgroups and the kubelet's
checkpoint), MIG instances of an H100 (NVML GPM per GPU instance) and an A100 in MIG mode (no
figure at all: said once), pods with DRA claims sharing a GPU (the kubelet's DRA checkpoint and pod
logs directory; a damaged checkpoint logged), and a real Prometheus (Debian's `prometheus`)
scraping the agent and answering a PromQL query.

Environment (set by meson): GPUSLICE, GPUSLICE_SIM_LIB, GS_SOURCE_ROOT, FAKE_MPS_CONTROL."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
import zlib

import pytest

from agent_harness import T4X2, h  # noqa: F401 (h: fixture)
from podresources_emulator import PodResourcesEmulator

import wait  # tests/lib, on the path once agent_harness is imported
from test_agent import GUARD_POLICY, _guard_dir_of, _mapper, _samples, _scrape, _write_region

ROOT = os.environ.get("GS_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAKE_MPS = os.environ.get("FAKE_MPS_CONTROL") or os.path.join(ROOT, "build", "tests", "mps", "fake_mps_control")
TOL = 0.05          # a period (100 ms) of a 1 s interval can fall into the next one: 10 %, rarely
INTERVAL_MS = 1000
METRIC = "gpuslice_pod_gpu_utilization_ratio"


def _series(text, gpu):
    """{(namespace, pod, container): value} of METRIC for GPU index gpu."""
    out = {}
    for key, v in _samples(text).items():
        if key.startswith(METRIC + "{") and f',gpu="{gpu}",' in key:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', key))
            out[(labels["namespace"], labels["pod"], labels["container"])] = v
    return out


def _util(text, gpu):
    for key, v in _samples(text).items():
        if key.startswith(f'gpuslice_gpu_utilization_ratio{{gpu="{gpu}",'):
            return v
    return None


def _expect(agent, gpu, truth, timeout=15):
    """Waits until every (ns, pod, container) of truth has its value within TOL (and no other
    series of the GPU is above TOL); returns the last scrape."""
    last = {}

    def matches():
        text = _scrape(agent)
        got = last["got"] = _series(text, gpu)
        ok = all(k in got and abs(got[k] - v) <= TOL for k, v in truth.items()) and \
            all(v <= TOL for k, v in got.items() if k not in truth)
        return text if ok else None
    return wait.until(matches, timeout=timeout, interval=0.2, what=f"GPU {gpu}: the series {truth}",
                      detail=lambda: f"got {last.get('got')}\n{agent.log()[-3000:]}")


class Procs:
    """Processes started by a test, stopped by PID."""

    def __init__(self):
        self.procs = []

    def mapper(self, region):
        p = _mapper(region)
        self.procs.append(p)
        return p.pid

    def sleeper(self):
        p = subprocess.Popen(["sleep", "60"])
        self.procs.append(p)
        return p.pid

    def stop(self):
        for p in self.procs:
            p.kill()
            p.wait()


def _run(node, pid, gpu, sm):
    node.run("sim", "process", "add", "--gpu", str(gpu), "--pid", str(pid), "--mem", "256MiB")
    node.run("sim", "util", "--pid", str(pid), "--gpu", str(gpu), "--sm", sm)


def _agent(h, node, policy, pr, extra=()):
    return h.agent(node, policy, extra=["--pod-resources-socket", pr.socket_path,
                                        "--pod-attribution-interval-ms", str(INTERVAL_MS), *extra])


def test_time_sliced_gpu_with_the_guard_and_prometheus(h):
    node = h.node(T4X2)
    u = node.uuids()
    root = os.path.join(h.base, "guard")
    pr = PodResourcesEmulator(os.path.join(h.base, "pr.sock")).start()
    procs = Procs()
    try:
        pr.set([("ml", "a", "main", "nvidia.com/gpu", [f"{u[0]}::1"]),
                ("ml", "b", "main", "nvidia.com/gpu", [f"{u[0]}::2"]),
                ("ml", "idle", "main", "nvidia.com/gpu", [f"{u[0]}::3"])])
        a = _agent(h, node, GUARD_POLICY, pr, ["--guard-root", root, "--guard-gc-interval-ms", "0"])
        a.wait_resources(["nvidia.com/gpu"])
        regions = {}
        for pod, dev in (("a", 1), ("b", 2), ("idle", 3)):
            d = _guard_dir_of(h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::{dev}"]))
            regions[pod] = os.path.join(root, d, "state", "region")
            _write_region(regions[pod], 0)
        # a: two processes, 20 % and 80 %/0 % alternating (40 % mean); b: 25 %; a host process 15 %
        _run(node, procs.mapper(regions["a"]), 0, "20")
        _run(node, procs.mapper(regions["a"]), 0, "80,0")
        _run(node, procs.mapper(regions["b"]), 0, "25")
        _run(node, procs.sleeper(), 0, "15")
        text = _expect(a, 0, {("ml", "a", "main"): 0.60, ("ml", "b", "main"): 0.25,
                              ("ml", "idle", "main"): 0.0, ("", "", ""): 0.15})
        total = sum(_series(text, 0).values())
        assert abs(total - 1.0) <= 2 * TOL, total
        # the GPU's own figure is its last period's (80 %/0 % alternate): 60 or 100 %
        assert _util(text, 0) in (0.6, 1.0), _util(text, 0)
        assert _series(text, 1) == {("", "", ""): 0.0}   # GPU 1: nothing runs, nobody holds it
        # the duty changes: the next intervals follow, and the sum is the GPU's utilization
        for p in procs.procs[:2]:
            node.run("sim", "util", "--pid", str(p.pid), "--sm", "10")
        text = _expect(a, 0, {("ml", "a", "main"): 0.20, ("ml", "b", "main"): 0.25, ("", "", ""): 0.15})
        assert abs(sum(_series(text, 0).values()) - _util(text, 0)) <= 2 * TOL
        _prometheus_reads_back(h, a, 'gpuslice_pod_gpu_utilization_ratio{namespace="ml",pod="b",gpu="0"}', 0.25)
        assert a.alive()
    finally:
        procs.stop()
        pr.stop()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _prometheus_reads_back(h, agent, query, want):
    """A real Prometheus scrapes the agent every second; the PromQL query answers want (TOL)."""
    prom = shutil.which("prometheus")
    assert prom, "Debian's prometheus package is a test dependency (scripts/deps.sh)"
    line = agent.wait_log(r"Serving metrics on .* \(port \d+\)")
    target = "127.0.0.1:" + re.search(r"\(port (\d+)\)", line).group(1)
    cfg = h.write("prometheus.yml", "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                  f"scrape_configs:\n  - job_name: gpuslice\n    static_configs:\n      - targets: ['{target}']\n")
    port = _free_port()
    log = open(os.path.join(h.base, "prometheus.log"), "wb")
    p = subprocess.Popen([prom, f"--config.file={cfg}", f"--storage.tsdb.path={os.path.join(h.base, 'tsdb')}",
                          f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log,
                         stdin=subprocess.DEVNULL)
    try:
        seen = {}

        def answered():
            try:
                url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
                with urllib.request.urlopen(url, timeout=5) as r:
                    res = json.load(r)["data"]["result"]
                if len(res) == 1:
                    seen["got"] = float(res[0]["value"][1])
                    return abs(seen["got"] - want) <= TOL
            except (OSError, ValueError, KeyError):
                pass
            return False

        def prom_log():
            with open(os.path.join(h.base, "prometheus.log"), errors="replace") as f:
                return f"Prometheus answered {seen.get('got')}\n{f.read()[-3000:]}"
        wait.until(answered, timeout=60, interval=0.5, what=f"{query} = {want} from Prometheus", detail=prom_log)
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        log.close()


FRAC_NODE = "gpus:\n  - model: H100-SXM5-80GB\n    count: 1\n"
FRAC_POLICY = "version: v1\ngpuslice:\n  gpus:\n    - {model: \"NVIDIA H100*\", mode: fractional}\n"
MEM = "gpuslice.io/gpu-memory"


def test_fractional_gpu(h):
    node = h.node(FRAC_NODE)
    u = node.uuids()
    root = os.path.join(h.base, "guard")
    pr = PodResourcesEmulator(os.path.join(h.base, "pr.sock")).start()
    procs = Procs()
    try:
        a = _agent(h, node, FRAC_POLICY, pr, ["--guard-root", root, "--guard-gc-interval-ms", "0"])
        a.wait_resources([MEM])
        units = [d.id for d in h.latest(MEM) if d.id.startswith(u[0] + "::")]
        small, big = units[:10], units[10:50]
        pr.set([("llm", "small", "infer", MEM, small), ("llm", "big", "train", MEM, big)])
        r_small = os.path.join(root, _guard_dir_of(h.kubelet.allocate(MEM, small)), "state", "region")
        r_big = os.path.join(root, _guard_dir_of(h.kubelet.allocate(MEM, big)), "state", "region")
        assert r_small != r_big
        _write_region(r_small, 0)
        _write_region(r_big, 0)
        _run(node, procs.mapper(r_small), 0, "10")
        _run(node, procs.mapper(r_big), 0, "55")
        _run(node, procs.mapper(r_big), 0, "30,10")   # 20 % mean
        text = _expect(a, 0, {("llm", "small", "infer"): 0.10, ("llm", "big", "train"): 0.75, ("", "", ""): 0.0})
        assert abs(sum(_series(text, 0).values()) - 0.85) <= 2 * TOL
    finally:
        procs.stop()
        pr.stop()


def _fake_proc(h, node, pods):
    """A /proc for the agent: the simulated node's proc entries, and for each pid a directory with
    its maps (the real one) and a cgroup file: a pod's (kubepods, with pods[pid] as the pod's UID
    when it is a string) for pods[pid] true, else a host service's."""
    fake = os.path.join(h.base, "proc")
    os.makedirs(fake)
    sim_proc = os.path.join(node.state, "root", "proc")
    for name in os.listdir(sim_proc):
        if not name.isdigit():
            os.symlink(os.path.join(sim_proc, name), os.path.join(fake, name))
    for pid, pod in pods.items():
        d = os.path.join(fake, str(pid))
        os.makedirs(d)
        os.symlink(f"/proc/{pid}/maps", os.path.join(d, "maps"))
        with open(os.path.join(d, "cgroup"), "w") as f:
            uid = (pod if isinstance(pod, str) else "0a1b2c3d-0000-4000-8000-000000000000").replace("-", "_")
            f.write("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/"
                    "cri-containerd-0123456789abcdef.scope\n" % uid if pod else "0::/system.slice/ollama.service\n")
    return fake


def test_mps_gpu_held_by_one_container(h):
    node = h.node(T4X2)
    u = node.uuids()
    node.inspect()  # the simulated node's root exists before the fake /proc points into it
    procs = Procs()
    client, host = procs.sleeper(), procs.sleeper()
    fake = _fake_proc(h, node, {client: True, host: False})
    pr = PodResourcesEmulator(os.path.join(h.base, "pr.sock")).start()
    try:
        pr.set([("sim", "solver", "mps-client", "nvidia.com/gpu", [f"{u[1]}::0"])])
        policy = (f"version: v1\nflags:\n  mpsRoot: {os.path.join(h.base, 'mps')}\nsharing:\n  mps:\n"
                  "    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n")
        a = _agent(h, node, policy, pr, ["--mps-control", FAKE_MPS, "--proc-root", fake])
        a.wait_resources(["nvidia.com/gpu"])
        h.kubelet.allocate("nvidia.com/gpu", [f"{u[1]}::0"])
        _run(node, client, 1, "45")
        _run(node, host, 1, "20")
        text = _expect(a, 1, {("sim", "solver", "mps-client"): 0.45, ("", "", ""): 0.20})
        assert abs(sum(_series(text, 1).values()) - _util(text, 1)) <= 2 * TOL
        # a second container on the GPU: a process that maps no guarded allocation is no longer
        # known to be the first one's
        pr.set([("sim", "solver", "mps-client", "nvidia.com/gpu", [f"{u[1]}::0"]),
                ("sim", "other", "main", "nvidia.com/gpu", [f"{u[1]}::2"])])
        _expect(a, 1, {("sim", "solver", "mps-client"): 0.0, ("sim", "other", "main"): 0.0, ("", "", ""): 0.65})
    finally:
        procs.stop()
        pr.stop()


def _checkpoint(h, entries):
    """The kubelet's device-plugin checkpoint: (pod UID, container, resource, [ids]) entries."""
    data = {"Data": {"PodDeviceEntries": [
        {"PodUID": uid, "ContainerName": ctr, "ResourceName": res, "DeviceIDs": {"-1": ids}, "AllocResp": ""}
        for uid, ctr, res, ids in entries], "RegisteredDevices": {}}, "Checksum": 0}
    with open(os.path.join(h.kdir, "kubelet_internal_checkpoint"), "w") as f:
        json.dump(data, f)


UID_A, UID_B = "6f1d2c3b-0000-4000-8000-00000000000a", "6f1d2c3b-0000-4000-8000-00000000000b"


@pytest.mark.parametrize("mode", ["time-slicing", "mps"])
def test_shared_gpu_without_the_guard_by_pod_uid(h, mode):
    """Two pods on one GPU and no guard: each process's pod UID (its cgroup) and the kubelet's
    checkpoint (UID -> container -> devices) say whose it is."""
    node = h.node(T4X2)
    u = node.uuids()
    node.inspect()
    procs = Procs()
    pa1, pa2, pb, host = procs.sleeper(), procs.sleeper(), procs.sleeper(), procs.sleeper()
    fake = _fake_proc(h, node, {pa1: UID_A, pa2: UID_A, pb: UID_B, host: False})
    pr = PodResourcesEmulator(os.path.join(h.base, "pr.sock")).start()
    try:
        dev_a, dev_b = [f"{u[0]}::0"], [f"{u[0]}::1"]
        pr.set([("team", "a", "train", "nvidia.com/gpu", dev_a), ("team", "b", "serve", "nvidia.com/gpu", dev_b)])
        _checkpoint(h, [(UID_A, "train", "nvidia.com/gpu", dev_a), (UID_B, "serve", "nvidia.com/gpu", dev_b)])
        if mode == "mps":
            policy = (f"version: v1\nflags:\n  mpsRoot: {os.path.join(h.base, 'mps')}\nsharing:\n  mps:\n"
                      "    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n")
            extra = ["--mps-control", FAKE_MPS]
        else:
            policy, extra = ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                             "    - name: nvidia.com/gpu\n      replicas: 4\n"), []
        a = _agent(h, node, policy, pr, ["--proc-root", fake, *extra])
        a.wait_resources(["nvidia.com/gpu"])
        h.kubelet.allocate("nvidia.com/gpu", dev_a)
        h.kubelet.allocate("nvidia.com/gpu", dev_b)
        _run(node, pa1, 0, "15")
        _run(node, pa2, 0, "50,0")   # 25 %
        _run(node, pb, 0, "35")
        _run(node, host, 0, "5")
        text = _expect(a, 0, {("team", "a", "train"): 0.40, ("team", "b", "serve"): 0.35, ("", "", ""): 0.05})
        assert abs(sum(_series(text, 0).values()) - 0.80) <= 2 * TOL
        # without the checkpoint the two pods cannot be told apart: neither gets the other's
        os.unlink(os.path.join(h.kdir, "kubelet_internal_checkpoint"))
        _expect(a, 0, {("team", "a", "train"): 0.0, ("team", "b", "serve"): 0.0, ("", "", ""): 0.80})
    finally:
        procs.stop()
        pr.stop()


def _mig_series(text):
    """{(namespace, pod, container, mig_uuid): value} of METRIC's MIG series."""
    out = {}
    for key, v in _samples(text).items():
        if key.startswith(METRIC + "{") and "mig_uuid=" in key:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', key))
            out[(labels["namespace"], labels["pod"], labels["container"], labels["mig_uuid"])] = v
    return out


H100_MIG = "gpus:\n  - model: H100-SXM5-80GB\n    count: 1\n    mig: enabled\n"
A100_MIG = "gpus:\n  - model: A100-SXM4-40GB\n    count: 1\n    mig: enabled\n"
MIXED = "version: v1\nflags:\n  migStrategy: mixed\n"


def test_mig_instances_by_gpm(h):
    """Under MIG NVML has no per-process utilization: each GPU instance's GPM figure (Hopper) goes
    to the one container holding its MIG device, or to the instance's no-pod series."""
    node = h.node(H100_MIG)
    held, free = node.mig_create(0, "3g.40gb", 0), node.mig_create(0, "3g.40gb", 4)
    gi_held, gi_free = node.mig_device(held)["gi_id"], node.mig_device(free)["gi_id"]
    procs = Procs()
    pr = PodResourcesEmulator(os.path.join(h.base, "pr.sock")).start()
    try:
        pr.set([("ml", "big", "main", "nvidia.com/mig-3g.40gb", [held])])
        a = _agent(h, node, MIXED, pr)
        a.wait_resources(["nvidia.com/mig-3g.40gb"])
        for gi, sm in ((gi_held, "20"), (gi_held, "30,0"), (gi_free, "25")):
            pid = procs.sleeper()
            node.run("sim", "process", "add", "--gpu", "0", "--gi", str(gi), "--pid", str(pid), "--mem", "256MiB")
            node.run("sim", "util", "--pid", str(pid), "--sm", sm)
        want = {("ml", "big", "main", held): 0.35, ("", "", "", held): 0.0, ("", "", "", free): 0.25}
        last = {}

        def matches():
            text = _scrape(a)
            got = last["got"] = _mig_series(text)
            return text if set(got) == set(want) and all(abs(got[k] - v) <= TOL for k, v in want.items()) else None
        text = wait.until(matches, timeout=15, interval=0.2, what=f"the MIG series {want}",
                          detail=lambda: f"got {last.get('got')}\n{a.log()[-3000:]}")
        line = [ln for ln in text.splitlines() if ln.startswith(METRIC + '{namespace="ml"')][0]
        assert f'GPU_I_ID="{gi_held}",GPU_I_PROFILE="3g.40gb",mig_uuid="{held}"' in line, line
        assert "no per-pod utilization" not in a.log()
    finally:
        procs.stop()
        pr.stop()


def test_mig_gpu_before_hopper_has_no_per_pod_figure(h):
    """An A100 in MIG mode has neither per-process utilization nor GPM: the agent says so once and
    exports nothing for the GPU rather than a wrong figure."""
    node = h.node(A100_MIG)
    mig = node.mig_create(0, "3g.20gb", 0)
    procs = Procs()
    pr = PodResourcesEmulator(os.path.join(h.base, "pr.sock")).start()
    try:
        pr.set([("ml", "a", "main", "nvidia.com/mig-3g.20gb", [mig])])
        a = _agent(h, node, MIXED, pr)
        node.run("sim", "process", "add", "--gpu", "0", "--gi", str(node.mig_device(mig)["gi_id"]), "--pid",
                 str(procs.sleeper()), "--mem", "256MiB")
        a.wait_log(r"GPU 0 \(.*\): NVML has no per-process utilization \(in MIG mode: no GPM", timeout=10)
        wait.holds(lambda: not [ln for ln in _scrape(a).splitlines() if ln.startswith(METRIC + "{")],
                   polls=8, interval=INTERVAL_MS / 4000, what="no per-pod series for the GPU", detail=a.log)
        assert len(re.findall(r"NVML has no per-process utilization", a.log())) == 1
    finally:
        procs.stop()
        pr.stop()


def _dra_state(path, claims, damage=False):
    """The kubelet's DRA manager checkpoint (src/kubelet/drastate.h, as a v1.36 kubelet writes it):
    claims (claim UID, namespace, name, [pod UIDs], [device names of gpu.gpuslice.io]); damage: a
    checksum that is not the data's. Written by renaming, as the kubelet does."""
    data = json.dumps({"kind": "DRACheckpoint", "apiVersion": "checkpoint.dra.kubelet.k8s.io/v1",
                       "ClaimInfoStateList": [
                           {"ClaimUID": cu, "ClaimName": name, "Namespace": ns, "PodUIDs": {p: {} for p in pods},
                            "DriverState": {"gpu.gpuslice.io": {"Devices": [
                                {"PoolName": "node", "DeviceName": d, "ShareID": None, "RequestNames": ["gpu"],
                                 "CDIDeviceIDs": []} for d in devs]}}}
                           for cu, ns, name, pods, devs in claims]}, separators=(",", ":"))
    crc = zlib.crc32(data.encode()) ^ (1 if damage else 0)
    with open(path + ".tmp", "w") as f:
        json.dump({"Data": data, "Checksum": crc}, f)
    os.rename(path + ".tmp", path)


def test_dra_pods_sharing_a_gpu_by_the_kubelets_dra_checkpoint(h):
    """Two pods with DRA claims on GPU 0 (the agent with --dra; no device plugin holds the GPU):
    the kubelet's DRA checkpoint (next to --kubelet-dir) gives their UIDs the GPU, the pod logs
    directory their names (one container: its name; two: ""). A damaged checkpoint is logged
    with its path and the pods' processes go to the no-pod series until it is whole again."""
    node = h.node(T4X2)
    node.inspect()
    procs = Procs()
    pa, pb, host = procs.sleeper(), procs.sleeper(), procs.sleeper()
    fake = _fake_proc(h, node, {pa: UID_A, pb: UID_B, host: False})
    logs = os.path.join(h.base, "pod-logs")
    os.makedirs(os.path.join(logs, f"team_a_{UID_A}", "train"))
    os.makedirs(os.path.join(logs, f"team_b_{UID_B}", "serve"))
    os.makedirs(os.path.join(logs, f"team_b_{UID_B}", "sidecar"))
    os.makedirs(os.path.join(logs, "team_old_6f1d2c3b-0000-4000-8000-0000000000ff", "main"))
    state = os.path.join(os.path.dirname(h.kdir), "dra_manager_state")
    claims = [("c1a5e000-0000-4000-8000-00000000000a", "team", "ca", [UID_A], ["gpu-0"]),
              ("c1a5e000-0000-4000-8000-00000000000b", "team", "cb", [UID_B], ["gpu-0"]),
              ("c1a5e000-0000-4000-8000-00000000000c", "team", "cc", [UID_A], ["gpu-1"])]
    _dra_state(state, claims)
    dra = [os.path.join(h.base, d) for d in ("registry", "plugins", "claims")]
    for d in dra:
        os.makedirs(d)
    pr = PodResourcesEmulator(os.path.join(h.base, "pr.sock")).start()
    try:
        pr.set([])
        policy = ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
                  "      replicas: 4\ngpuslice:\n  dra:\n    gpus: all\n")
        a = _agent(h, node, policy, pr, ["--proc-root", fake, "--pod-logs-dir", logs, "--dra",
                                         "--kubelet-registry-dir", dra[0], "--kubelet-plugins-dir", dra[1],
                                         "--dra-claims-dir", dra[2]])
        _run(node, pa, 0, "20")
        _run(node, pb, 0, "45")
        _run(node, host, 0, "10")
        _expect(a, 0, {("team", "a", "train"): 0.20, ("team", "b", ""): 0.45, ("", "", ""): 0.10})
        # a's claim of GPU 1: its series there too (its process runs on GPU 0 only)
        _expect(a, 1, {("team", "a", "train"): 0.0, ("", "", ""): 0.0})
        _dra_state(state, claims, damage=True)
        _expect(a, 0, {("", "", ""): 0.75})
        assert re.search(r"Per-pod utilization: the kubelet's DRA checkpoint " + re.escape(state) +
                         r": Checksum \d+ is not the CRC-32 of Data", a.log()), a.log()[-3000:]
        _dra_state(state, claims)
        _expect(a, 0, {("team", "a", "train"): 0.20, ("team", "b", ""): 0.45, ("", "", ""): 0.10})
        # a pod of no logs directory: logged, its processes no pod's
        shutil.rmtree(os.path.join(logs, f"team_a_{UID_A}"))
        _expect(a, 0, {("team", "b", ""): 0.45, ("", "", ""): 0.30})
        assert f"pod logs directory {logs}: no directory of pod {UID_A} (namespace team)" in a.log()
        assert a.alive()
    finally:
        procs.stop()
        pr.stop()
