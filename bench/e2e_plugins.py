"""gpuslice's agent and NVIDIA's device plugin (v0.18.0, tests/nvmlclients/build-nvdp.sh) side by
side in the e2e cluster (tests/e2e: real kube-apiserver, scheduler, kubelet, containerd), each in
turn on the same simulated node with the same NVIDIA config, registered with the same kubelet:

  - resident memory of the plugin's process (VmRSS and VmHWM from /proc/PID/status, Pss from
    /proc/PID/smaps_rollup) once its resources are in the Node's allocatable, and again after the
    pods below;
  - Allocate latency at the kubelet: the kubelet's own histogram
    kubelet_device_plugin_alloc_duration_seconds (its /metrics, scraped over TLS with the admin
    client certificate), read before and after each pod: pods run one after another, so the
    change of _sum over one pod is that pod's one Allocate call as the kubelet timed it; the
    histogram's buckets (Prometheus' defaults, the first one 5 ms) give the coarse view;
  - the pod-level time: from the POST of a pod to the API server showing its container started
    (or already finished), polled every 20 ms;
  - Xid 79 on GPU 0 (`gpuslice sim xid 0 79`): the time until the kubelet's device-manager
    checkpoint no longer lists a device of that GPU as healthy (its inode and mtime polled every
    1 ms; from before the `sim xid` command, whose own time is recorded too), and until
    the Node's allocatable in the API server changes (polled every 20 ms; the kubelet reports node
    status every 2 s in this cluster: each Xid comes after a random wait of 0-2 s), which devices
    went, and whether they come back (gpuslice: after its quiet period; NVIDIA's plugin: waited
    for --nvidia-recovery-wait seconds, then restarted for the next trial).

It brings up a cluster of its own (tests/e2e/cluster.sh up, GS_E2E_PORT_BASE chooses its ports)
and takes it down at the end (its directory removed after a good run, kept with its logs after a
failure or with GS_E2E_KEEP=1), or uses the one at GS_E2E_DIR. It is not a test (no timing is
asserted), but everything it waits for is bounded and it fails loudly (exit 1, with the plugin's
log) when a plugin never registers, a pod never starts, the kubelet's histogram does not count
one Allocate per pod, or an Xid never shows.

usage (root; from the repository root, after `meson setup build-bench && ninja -C build-bench`):
  GS_E2E_PORT_BASE=17300 /usr/bin/python3 bench/e2e_plugins.py --build build-bench [--runs 3] [--pods 30]
      [--xids 3] [--configs time-slicing,mig-mixed] [--json results.json]
  /usr/bin/python3 bench/e2e_plugins.py --table results.json     # the table again, from the file
Prints each run's figures as it goes and a markdown table (median and min-max over the runs)."""
import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NS = "gs-e2e"
XID = 79
CONFIGS = {  # name: (NVIDIA config, node, hand-made MIG instances (gpu, profile, start))
    "time-slicing": ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                     "      - name: nvidia.com/gpu\n        replicas: 4\n", "t4x2.yaml", ()),
    "mig-mixed": ("version: v1\nflags:\n  migStrategy: mixed\n", "h100x4-l4x3.yaml",
                  ((0, "3g.40gb", 0), (0, "1g.10gb", 6), (1, "7g.80gb", 0), (2, "2g.20gb", 0))),
}
ALLOC = "kubelet_device_plugin_alloc_duration_seconds"
RNG = random.Random(18)


class BenchError(Exception):
    pass


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build", help="meson build dir with gpuslice and the simulator")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pods", type=int, default=30, help="pods one after another, per plugin and run")
    ap.add_argument("--xids", type=int, default=3, help="Xid trials per plugin and run")
    ap.add_argument("--configs", default="time-slicing,mig-mixed")
    ap.add_argument("--quiet", type=int, default=10, help="gpuslice's recoveryQuietPeriod, seconds")
    ap.add_argument("--nvidia-recovery-wait", type=float, default=30,
                    help="seconds to wait for NVIDIA's plugin to advertise the GPU again (first trial of a run)")
    ap.add_argument("--json", help="write every measurement to this file")
    ap.add_argument("--table", metavar="JSON", help="only print the table of a file --json wrote")
    a = ap.parse_args()
    a.configs = a.configs.split(",")
    for c in a.configs:
        if c not in CONFIGS:
            ap.error(f"--configs: unknown config {c!r} (known: {', '.join(CONFIGS)})")
    return a


ARGS = None  # main() parses the command line: importing the module parses nothing


def build_dir(argv):
    """--build of the command line (the rest left alone: a script importing this module has options
    of its own), before e2e is imported: it reads GPUSLICE... when imported."""
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--build", default="build")
    return os.path.abspath(ap.parse_known_args(argv)[0].build)


# e2e.py reads these when imported
build = build_dir(sys.argv[1:])
os.environ.setdefault("GPUSLICE", os.path.join(build, "gpuslice"))
os.environ.setdefault("GPUSLICE_SIM_LIB", os.path.join(build, "sim", "libgpuslice-nvml-sim.so"))
os.environ.setdefault("GS_SOURCE_ROOT", ROOT)
for p in (os.path.join(ROOT, "tests", "e2e"), os.path.join(ROOT, "tests", "nvmlclients")):
    sys.path.insert(0, p)
from e2e import CLUSTER_SH, GPUSLICE, NODES, Agent, Cluster, E2EError, wait  # noqa: E402
from kubelet_state import checkpoint  # noqa: E402
from test_nvidia_side_by_side import NvidiaPlugin  # noqa: E402
from kubehttp import Client, KubeHttpError  # noqa: E402  (bench/: this script's directory)


def log(msg):
    print(msg, flush=True)


def alloc_histogram(kubelet):
    """{resource: {"sum": s, "count": n, "buckets": {le: cumulative}}} from the kubelet's /metrics."""
    _, text = kubelet.request("GET", "/metrics")
    out = {}
    pat = re.compile(ALLOC + r'_(bucket|sum|count)\{([^}]*)\} (\S+)$')
    for line in text.decode().splitlines():
        m = pat.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        h = out.setdefault(labels["resource_name"], {"sum": 0.0, "count": 0, "buckets": {}})
        if m.group(1) == "bucket":
            h["buckets"][float(labels["le"])] = int(float(m.group(3)))
        else:
            h[m.group(1)] = float(m.group(3)) if m.group(1) == "sum" else int(float(m.group(3)))
    return out


def bucket_quantile(before, after, q):
    """The upper bound of the histogram bucket holding quantile q of the observations between two
    scrapes (summed over resources): what the kubelet's histogram alone can say."""
    les = sorted({le for h in after.values() for le in h["buckets"]})
    cum = [sum(h["buckets"].get(le, 0) - before.get(r, {"buckets": {}})["buckets"].get(le, 0)
               for r, h in after.items()) for le in les]
    total = cum[-1] if cum else 0
    for le, c in zip(les, cum):
        if total and c >= q * total:
            return le
    return None


# ---------------------------------------------------------------------------- the plugin's process

def memory(pid):
    """{VmRSS, VmHWM, Pss} in kB of PID."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0])
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                out["Pss"] = int(line.split()[1])
    return out


class Turn:
    """One plugin on a fresh simulated node state (the config's MIG instances made by hand first,
    as an operator would, so both plugins find the same ones)."""

    def __init__(self, cluster, plugin, plugin_bin, config):
        self.c, self.plugin, self.plugin_bin = cluster, plugin, plugin_bin
        self.nvidia_config, node, instances = CONFIGS[config]
        self.node = os.path.join(NODES, node)
        self.dir = tempfile.mkdtemp(prefix=f"bench-{plugin}.", dir=cluster.dir)
        self.state = os.path.join(self.dir, "sim")
        self.gs("inspect")  # makes the simulated root
        for gpu, profile, start in instances:
            self.gs("sim", "mig-create", "--gpu", str(gpu), "--profile", profile, "--start", str(start))
        self.config_path = os.path.join(self.dir, "nvidia-config.yaml")
        with open(self.config_path, "w") as f:
            f.write(self.nvidia_config)
        out = json.loads(self.gs("apply", "--config", self.config_path, "--json"))
        self.want = {r["name"]: len(r["devices"]) for r in out["resources"] if r["devices"]}
        self.gpu0 = json.loads(self.gs("inspect", "--json"))["gpus"][0]["uuid"]
        self.proc = None

    def gs(self, *args):
        p = subprocess.run([GPUSLICE, "--sim", self.node, "--sim-state", self.state, *args],
                           capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise BenchError(f"gpuslice {' '.join(args)}: exit {p.returncode}\n{p.stderr}")
        return p.stdout

    def start(self):
        if self.plugin == "gpuslice":
            # the same NVIDIA config plus gpuslice's quiet period (NVIDIA's plugin never recovers)
            policy = self.nvidia_config + f"gpuslice:\n  health:\n    recoveryQuietPeriod: {ARGS.quiet}s\n"
            self.proc = _StateAgent(self.c, self.node, policy, self.state)
            self.pid = self.proc.proc.pid
        else:
            self.proc = NvidiaPlugin(self.c, self.plugin_bin, self.node, self.state, self.config_path)
            self.pid = self.proc.proc.pid
        t0 = time.monotonic()
        try:
            self.c.wait_allocatable(self.want, timeout=120)
        except E2EError as e:
            raise BenchError(f"{self.plugin} never registered {self.want}: {e}\n{self.log()}") from e
        exe = os.readlink(f"/proc/{self.pid}/exe")
        if os.path.basename(exe) not in ("gpuslice", "nvidia-device-plugin"):
            raise BenchError(f"pid {self.pid} is {exe}, not the plugin")
        return time.monotonic() - t0

    def stop(self):
        self.proc.stop()
        try:
            wait(lambda: not self.c.nonzero(), 120, f"allocatable to drop once {self.plugin} is gone")
        except E2EError as e:
            raise BenchError(str(e)) from e

    def log(self):
        return f"---- {self.plugin} log (tail)\n{self.proc.log()[-6000:]}" if self.proc else ""


class _StateAgent(Agent):
    """gpuslice's agent (tests/e2e's harness, as the e2e tests run it) on a simulated node state
    made beforehand, shared with nothing."""

    def __init__(self, cluster, node, policy, state):
        self._state = state
        super().__init__(cluster, node, policy)

    def start(self):
        self.sim_state = self._state
        super().start()


# ---------------------------------------------------------------------------- measurements

def pod_body(cluster, name, resource):
    return cluster.pod_yaml(name, {resource: 1}, "exit 0")


def started(pod):
    for st in (pod.get("status") or {}).get("containerStatuses") or []:
        if "running" in st["state"] or "terminated" in st["state"]:
            return True
    return False


def run_pods(turn, api, kubelet, n):
    """N pods one after another; per pod the kubelet's Allocate time (ms, the change of the
    histogram's _sum) and create -> started (ms). Returns (alloc_ms, pod_ms, bucket p50, p99)."""
    resources = sorted(turn.want)
    alloc, pods = [], []
    first = before = alloc_histogram(kubelet)
    for i in range(n):
        name = f"bench-{turn.plugin[:2]}-{i}"
        resource = resources[i % len(resources)]
        t0 = time.monotonic()
        api.request("POST", f"/api/v1/namespaces/{NS}/pods", pod_body(turn.c, name, resource), "application/yaml")
        deadline = t0 + 120
        while True:
            _, pod = api.json("GET", f"/api/v1/namespaces/{NS}/pods/{name}")
            if started(pod):
                pods.append((time.monotonic() - t0) * 1e3)
                break
            if pod["status"].get("phase") == "Failed" or time.monotonic() > deadline:
                raise BenchError(f"pod {name} ({resource}) never started: {json.dumps(pod['status'])[:2000]}"
                                 f"\n{turn.log()}")
            time.sleep(0.02)
        after = alloc_histogram(kubelet)
        dn = sum(h["count"] for h in after.values()) - sum(h["count"] for h in before.values())
        if dn != 1:
            raise BenchError(f"pod {name}: the kubelet's {ALLOC} counted {dn} Allocate calls, not 1")
        alloc.append((sum(h["sum"] for h in after.values()) - sum(h["sum"] for h in before.values())) * 1e3)
        before = after
        api.request("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}?gracePeriodSeconds=0")
        deadline = time.monotonic() + 120
        while api.request("GET", f"/api/v1/namespaces/{NS}/pods/{name}", ok=None)[0] != 404:
            if time.monotonic() > deadline:
                raise BenchError(f"pod {name} not gone 120 s after its deletion")
            time.sleep(0.05)
    return alloc, pods, bucket_quantile(first, before, 0.5), bucket_quantile(first, before, 0.99)


def healthy_in_checkpoint(turn):
    try:
        reg = checkpoint(turn.c).get("RegisteredDevices") or {}
    except (OSError, ValueError):  # being rewritten
        return None
    return {r: sorted(reg.get(r) or []) for r in turn.want}


def xid_trial(turn, api, recover_wait):
    """Xid 79 on GPU 0: ms to the checkpoint, s to the allocatable change, what changed, and s
    until allocatable is back (None: not back within recover_wait)."""
    def allocatable():
        _, node = api.json("GET", f"/api/v1/nodes/{turn.c.node_name}")
        return {k: int(v) for k, v in node["status"].get("allocatable", {}).items()
                if k.startswith("nvidia.com/") and int(v)}

    base_ck = healthy_in_checkpoint(turn)
    if allocatable() != turn.want or not base_ck or any(len(v) != turn.want[r] for r, v in base_ck.items()):
        raise BenchError(f"{turn.plugin}: not every device healthy before the Xid: {allocatable()}")
    # the kubelet reports node status every 2 s: an Xid at a random point of that period, not at
    # the same point after the last change every time
    phase = RNG.uniform(0, 2.0)
    time.sleep(phase)
    t0 = time.monotonic()
    turn.gs("sim", "xid", "0", str(XID))
    t_cli = time.monotonic() - t0
    ck, seen = None, None
    path = os.path.join(turn.c.kubelet_dir, "device-plugins", "kubelet_internal_checkpoint")
    while time.monotonic() - t0 < 60:
        try:
            st = os.stat(path)
        except FileNotFoundError:  # between the kubelet's write and rename
            st = None
        if st and (st.st_ino, st.st_mtime_ns) != seen:  # read again only when rewritten
            seen = (st.st_ino, st.st_mtime_ns)
            now = healthy_in_checkpoint(turn)
            if now and now != base_ck:
                ck = (time.monotonic() - t0) * 1e3
                break
        time.sleep(0.001)
    if ck is None:
        raise BenchError(f"{turn.plugin}: Xid {XID} on GPU 0 never left the kubelet's checkpoint in 60 s\n{turn.log()}")
    while True:
        got = allocatable()
        if got != turn.want:
            t_api = time.monotonic() - t0
            break
        if time.monotonic() - t0 > 60:
            raise BenchError(f"{turn.plugin}: allocatable never changed in 60 s after Xid {XID}\n{turn.log()}")
        time.sleep(0.02)
    time.sleep(3)   # the rest of the change (MIG: one plugin instance per resource) in the next node status
    settled, now = allocatable(), healthy_in_checkpoint(turn) or {}
    went = {r: sorted(set(base_ck[r]) - set(now.get(r, []))) for r in base_ck}
    went = {r: ids for r, ids in went.items() if ids}
    gone = [i for ids in went.values() for i in ids]
    if not gone or not all(i.startswith(turn.gpu0) or turn.gpu0 in i for i in gone if not i.startswith("MIG-")):
        raise BenchError(f"{turn.plugin}: the Xid on GPU 0 took out {gone}")
    back = None
    while time.monotonic() - t0 < recover_wait:
        if allocatable() == turn.want:
            back = time.monotonic() - t0
            break
        time.sleep(0.1)
    return {"cli_ms": t_cli * 1e3, "checkpoint_ms": ck, "api_s": t_api, "first_allocatable": got,
            "allocatable": settled, "went": went, "back_s": back, "waited_s": recover_wait, "phase_s": phase}


def one_turn(cluster, api, kubelet, plugin, plugin_bin, config):
    turn = Turn(cluster, plugin, plugin_bin, config)
    r = {"plugin": plugin, "config": config, "want": turn.want, "loadavg": open("/proc/loadavg").read().split()[:3]}
    try:
        r["register_s"] = turn.start()
        time.sleep(2)
        r["mem_registered"] = memory(turn.pid)
        r["alloc_ms"], r["pod_ms"], r["bucket_p50_s"], r["bucket_p99_s"] = run_pods(turn, api, kubelet, ARGS.pods)
        r["mem_after_pods"] = memory(turn.pid)
        r["xids"] = []
        for trial in range(ARGS.xids):
            if plugin == "gpuslice":
                recover = ARGS.quiet + 60
            else:
                recover = ARGS.nvidia_recovery_wait if trial == 0 else 0
                if trial:   # it never marks a device healthy again: a fresh plugin
                    turn.stop()
                    turn.start()
            x = xid_trial(turn, api, recover)
            if plugin == "gpuslice" and x["back_s"] is None:
                raise BenchError(f"gpuslice: GPU 0 not back {recover} s after the Xid\n{turn.log()}")
            r["xids"].append(x)
            log(f"    xid {trial + 1}: checkpoint {x['checkpoint_ms']:.0f} ms, allocatable {x['api_s']:.2f} s "
                f"-> {x['allocatable']}, back {fmt_s(x['back_s'], x['waited_s'])} (sim xid CLI {x['cli_ms']:.0f} ms)")
    except BaseException:
        if turn.proc:
            log(turn.log())
        raise
    finally:
        if turn.proc:
            turn.stop()
    return r


def fmt_s(v, waited):
    return f"{v:.1f} s" if v is not None else (f"not within {waited:.0f} s" if waited else "not waited")


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100.0 * (len(values) - 1))))]


def summary_line(r):
    m0, m1 = r["mem_registered"], r["mem_after_pods"]
    return (f"  {r['config']} / {r['plugin']}: registered in {r['register_s']:.1f} s; "
            f"VmRSS/VmHWM/Pss {m0['VmRSS']}/{m0['VmHWM']}/{m0['Pss']} kB, after {len(r['pod_ms'])} pods "
            f"{m1['VmRSS']}/{m1['VmHWM']}/{m1['Pss']} kB; Allocate at the kubelet p50 {pct(r['alloc_ms'], 50):.2f} "
            f"p99 {pct(r['alloc_ms'], 99):.2f} ms (buckets: p50 <= {r['bucket_p50_s']} s, p99 <= "
            f"{r['bucket_p99_s']} s); create->started p50 {pct(r['pod_ms'], 50):.0f} p99 {pct(r['pod_ms'], 99):.0f} ms")


# ---------------------------------------------------------------------------- the table

ROWS = [
    ("start -> allocatable in the API server (s)", lambda r: r["register_s"], "{:.1f}"),
    ("VmRSS after registration (kB)", lambda r: r["mem_registered"]["VmRSS"], "{:.0f}"),
    ("Pss after registration (kB)", lambda r: r["mem_registered"]["Pss"], "{:.0f}"),
    ("VmRSS after the pods (kB)", lambda r: r["mem_after_pods"]["VmRSS"], "{:.0f}"),
    ("VmHWM after the pods (kB)", lambda r: r["mem_after_pods"]["VmHWM"], "{:.0f}"),
    ("Pss after the pods (kB)", lambda r: r["mem_after_pods"]["Pss"], "{:.0f}"),
    ("Allocate at the kubelet, p50 (ms)", lambda r: pct(r["alloc_ms"], 50), "{:.2f}"),
    ("Allocate at the kubelet, p99 (ms)", lambda r: pct(r["alloc_ms"], 99), "{:.2f}"),
    ("Allocate, histogram bucket of p99 (<= s)", lambda r: r["bucket_p99_s"], "{:g}"),
    ("pod create -> container started, p50 (ms)", lambda r: pct(r["pod_ms"], 50), "{:.0f}"),
    ("pod create -> container started, p99 (ms)", lambda r: pct(r["pod_ms"], 99), "{:.0f}"),
    ("Xid -> kubelet checkpoint, median of trials (ms)",
     lambda r: statistics.median(x["checkpoint_ms"] for x in r["xids"]), "{:.0f}"),
    ("the same, counted from the end of the sim xid command (ms)",
     lambda r: statistics.median(x["checkpoint_ms"] - x["cli_ms"] for x in r["xids"]), "{:.1f}"),
    ("Xid -> allocatable changed, median of trials (s)",
     lambda r: statistics.median(x["api_s"] for x in r["xids"]), "{:.2f}"),
]


def spread(values, fmt):
    if not values:
        return "-"
    med = fmt.format(statistics.median(values))
    return med if len(values) == 1 else f"{med} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def table(results):
    lines = []
    for config in ARGS.configs:
        rs = {p: [r for r in results if r["config"] == config and r["plugin"] == p] for p in ("gpuslice", "nvidia")}
        if not rs["gpuslice"] and not rs["nvidia"]:
            continue
        want = (rs["gpuslice"] or rs["nvidia"])[0]["want"]
        lines.append(f"\n{config} ({CONFIGS[config][1]}, allocatable {want}); median (min-max) over "
                     f"{len(rs['gpuslice'])} runs, {ARGS.pods} pods and {ARGS.xids} Xid trials per run\n")
        lines.append("| metric | gpuslice | NVIDIA v0.18.0 |")
        lines.append("|---|---|---|")
        for label, f, fmt in ROWS:
            lines.append(f"| {label} | {spread([f(r) for r in rs['gpuslice']], fmt)} | "
                         f"{spread([f(r) for r in rs['nvidia']], fmt)} |")
        for p in ("gpuslice", "nvidia"):
            xs = [x for r in rs[p] for x in r["xids"]]
            went = sorted({json.dumps({r: len(ids) for r, ids in x["went"].items()}, sort_keys=True) for x in xs})
            alloc = sorted({json.dumps(x["allocatable"], sort_keys=True) for x in xs})
            backs = [x["back_s"] for x in xs if x["back_s"] is not None]
            waited = [x for x in xs if x["waited_s"]]
            lines.append(f"\n{p}: the Xid took out (devices of GPU 0 per resource) {'; '.join(went)}; "
                         f"allocatable became {'; '.join(alloc)}; "
                         f"back in {len(backs)} of {len(waited)} trials waited for"
                         + (f" (after {spread(backs, '{:.1f}')} s)" if backs else "")
                         + (f", each waited for at most {max(x['waited_s'] for x in waited):.0f} s" if waited else ""))
    return "\n".join(lines)


# ---------------------------------------------------------------------------- main

def versions(cluster):
    def out(*cmd):
        p = subprocess.run(list(cmd), capture_output=True, text=True, env=cluster.env)
        return (p.stdout or p.stderr).strip().splitlines()[0] if (p.stdout or p.stderr).strip() else "?"
    commit = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                            text=True).stdout.strip() or "(not a git checkout)"
    return {"gpuslice": commit, "kubelet": out("kubelet", "--version"), "containerd": out("containerd", "--version"),
            "nvidia-device-plugin": "v0.18.0", "nproc": os.cpu_count(), "loadavg": open("/proc/loadavg").read().strip()}


def main():
    global ARGS
    ARGS = parse_args()
    if ARGS.table:
        with open(ARGS.table) as f:
            saved = json.load(f)
        for k in ("runs", "pods", "xids", "configs"):
            setattr(ARGS, k, saved["args"][k])
        log(f"{json.dumps(saved['info'])}\n{table(saved['results'])}")
        return
    if os.geteuid() != 0:
        raise BenchError("needs root (the cluster's kubelet and containerd, NVIDIA's plugin's mount namespace)")
    for f in (GPUSLICE, os.environ["GPUSLICE_SIM_LIB"]):
        if not os.path.exists(f):
            raise BenchError(f"{f}: not built (--build)")
    p = subprocess.run([os.path.join(ROOT, "tests", "nvmlclients", "build-nvdp.sh")], capture_output=True,
                       text=True, timeout=1200)
    if p.returncode != 0:
        raise BenchError(f"build-nvdp.sh failed:\n{p.stderr}")
    plugin_bin = p.stdout.strip().splitlines()[-1]
    own = not os.environ.get("GS_E2E_DIR")
    cdir = os.environ.get("GS_E2E_DIR") or tempfile.mkdtemp(prefix="gse2e.", dir="/tmp")
    if own:
        log(f"bringing up a cluster in {cdir} (port base {os.environ.get('GS_E2E_PORT_BASE', '16000')})")
        p = subprocess.run(["bash", CLUSTER_SH, "up", cdir], capture_output=True, text=True, timeout=1500)
        if p.returncode != 0:
            subprocess.run(["bash", CLUSTER_SH, "down", cdir], capture_output=True, timeout=300)
            raise BenchError(f"cluster.sh up {cdir}: exit {p.returncode}\n{p.stderr[-6000:]}")
    results, ok = [], False
    try:
        cluster = Cluster(cdir)
        cluster.kubectl("create", "namespace", NS, check=False)
        wait(lambda: cluster.kubectl("get", "serviceaccount", "default", "-n", NS, check=False).returncode == 0,
             60, f"the default service account of {NS}")
        if cluster.nonzero():
            raise BenchError(f"the node already advertises {cluster.nonzero()}: another plugin is registered")
        api = Client(cluster.dir, cluster.port_base + 443, timeout=30)
        kubelet = Client(cluster.dir, cluster.port_base + 250, timeout=30)
        info = versions(cluster)
        log(f"versions and machine: {json.dumps(info)}")
        for run in range(ARGS.runs):
            order = ("gpuslice", "nvidia") if run % 2 == 0 else ("nvidia", "gpuslice")
            for config in ARGS.configs:
                for plugin in order:
                    log(f"run {run + 1}/{ARGS.runs}: {config}, {plugin}")
                    r = one_turn(cluster, api, kubelet, plugin, plugin_bin, config)
                    r["run"] = run + 1
                    results.append(r)
                    log(summary_line(r))
        info["loadavg_end"] = open("/proc/loadavg").read().strip()
        log(table(results))
        if ARGS.json:
            with open(ARGS.json, "w") as f:
                json.dump({"info": info, "args": vars(ARGS), "results": results}, f, indent=1)
        ok = True
    finally:
        if own:
            d = subprocess.run(["bash", CLUSTER_SH, "down", cdir], capture_output=True, text=True, timeout=300)
            log(d.stderr.strip().splitlines()[-1] if d.stderr.strip() else f"cluster.sh down: exit {d.returncode}")
            if ok and d.returncode == 0 and not os.environ.get("GS_E2E_KEEP"):
                shutil.rmtree(cdir, ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    except (BenchError, E2EError, KubeHttpError) as e:
        print(f"e2e_plugins.py: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
