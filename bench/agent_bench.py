"""Benchmarks of the node agent (issue: device plugin), driven through the kubelet emulator.

usage: /usr/bin/python3 bench/agent_bench.py [--gpuslice build/gpuslice] [--calls 5000]

On a simulated node of 8 x H100-SXM5-80GB with 64 time-sliced replicas each (512 devices):
  - Allocate latency (median, p99) seen by a Python gRPC client: an upper bound of the agent's
    own time, since it includes the Python client's overhead;
  - Xid -> Unhealthy: from the simulated driver accepting the Xid (in-process ctypes call into the
    simulated NVML library) to the ListAndWatch message marking the GPU's replicas Unhealthy;
  - kubelet restart -> re-registered: from the restart (sockets removed, kubelet.sock re-created)
    to the Register call of the last resource;
  - the agent's resident memory (VmRSS, VmHWM, and smaps_rollup's shared/private split) at the end.
The agent runs as deployed: metrics served (on a free port), labels written (to the temp dir), its
default log level (info; --log-level to change it).
Prints a markdown table. Bounded: every wait has a timeout, the agent is stopped at the end."""
import argparse
import ctypes
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from kubelet_emulator import KubeletEmulator  # noqa: E402

RESOURCE = "nvidia.com/gpu.shared"


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100.0 * (len(values) - 1))))]


def write_smaps_summary(pid, path):
    """Resident kB per mapped file (anonymous mappings by their name), biggest first."""
    per = {}
    name = None
    for line in open(f"/proc/{pid}/smaps"):
        head = line.split()
        if head and "-" in head[0] and not head[0].endswith(":"):
            name = head[5] if len(head) > 5 else "[anon]"
            per.setdefault(name, {"Rss": 0, "Anonymous": 0})
        elif head and head[0] in ("Rss:", "Anonymous:"):
            per[name][head[0][:-1]] += int(head[1])
    with open(path, "w") as out:
        out.write("rss_kb anon_kb mapping\n")
        for n, v in sorted(per.items(), key=lambda kv: -kv[1]["Rss"]):
            out.write(f"{v['Rss']} {v['Anonymous']} {n}\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpuslice", default=os.path.join(ROOT, "build", "gpuslice"))
    ap.add_argument("--sim-lib", default=os.path.join(ROOT, "build", "sim", "libgpuslice-nvml-sim.so"))
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--xid-trials", type=int, default=20)
    ap.add_argument("--restarts", type=int, default=10)
    ap.add_argument("--list-strategy", default="envvar",
                    help="the policy's deviceListStrategy (cdi-cri: each Allocate names CDI devices)")
    ap.add_argument("--log-level", default="info",
                    help="the agent's --log-level (default info, the agent's own default, as deployed)")
    ap.add_argument("--smaps", help="write the agent's resident memory per mapping (from /proc/PID/smaps) here")
    args = ap.parse_args()

    base = tempfile.mkdtemp(prefix="gs-b-", dir="/tmp")
    node = os.path.join(base, "node.yaml")
    with open(node, "w") as f:
        f.write("gpus:\n  - model: H100-SXM5-80GB\n    count: 8\n")
    policy = os.path.join(base, "policy.yaml")
    with open(policy, "w") as f:
        f.write("version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
                "    - name: nvidia.com/gpu\n      replicas: 64\n"
                f"flags:\n  plugin:\n    deviceListStrategy: {args.list_strategy}\n"
                "gpuslice:\n  health:\n    recoveryQuietPeriod: 1s\n")
    state = os.path.join(base, "state")
    kdir = os.path.join(base, "k")
    kubelet = KubeletEmulator(kdir).start()
    env = dict(os.environ, GPUSLICE_SIM_LIB=args.sim_lib)
    agent = subprocess.Popen([args.gpuslice, "--sim", node, "--sim-state", state, "--log-level", args.log_level, "agent",
                              "--config", policy, "--kubelet-dir", kdir,
                              "--features-file", os.path.join(base, "features"), "--cdi-root", os.path.join(base, "cdi"),
                              "--metrics-address", "127.0.0.1:0"], env=env,
                             stderr=open(os.path.join(base, "agent.log"), "w"))
    print(f"agent log: {base}/agent.log", file=sys.stderr)
    try:
        kubelet.wait_resources([RESOURCE], timeout=20)
        ids = [d.id for d in kubelet.devices(RESOURCE)]
        assert len(ids) == 512, len(ids)

        # Allocate latency
        rng = random.Random(42)
        for _ in range(200):  # warm-up
            kubelet.allocate(RESOURCE, [rng.choice(ids)])
        lat = []
        for _ in range(args.calls):
            i = rng.choice(ids)
            t = time.perf_counter()
            kubelet.allocate(RESOURCE, [i])
            lat.append((time.perf_counter() - t) * 1e6)

        # Xid -> Unhealthy, through the simulated driver in this process.
        os.environ["GPUSLICE_SIM_NODE"] = node
        os.environ["GPUSLICE_SIM_STATE"] = state
        sim = ctypes.CDLL(args.sim_lib)
        assert sim.nvmlInit_v2() == 0
        inject = sim.gpusliceSimInjectXid
        inject.argtypes = [ctypes.c_uint, ctypes.c_ulonglong, ctypes.c_uint, ctypes.c_char_p, ctypes.c_size_t]
        err = ctypes.create_string_buffer(256)
        health = []
        last = None
        for trial in range(args.xid_trials):
            gpu = trial % 8
            prefix = kubelet.devices(RESOURCE)[gpu * 64].id.split("::")[0]

            def sick(devs, prefix=prefix):
                return all(not d.healthy for d in devs if d.id.startswith(prefix))

            def well(devs):
                return all(d.healthy for d in devs)

            # Healthy again (the policy's 1 s quiet period) before the next Xid.
            kubelet.wait_for(RESOURCE, well, timeout=10, after=last)
            t = time.monotonic()
            assert inject(gpu, 79, 0xFFFFFFFF, err, 256) == 0, err.value
            msg = kubelet.wait_for(RESOURCE, sick, timeout=5, after=t)
            health.append((msg.time - t) * 1e3)
            last = msg.time
        sim.nvmlShutdown()

        # kubelet restart -> re-registered
        rereg = []
        for _ in range(args.restarts):
            t = kubelet.restart()
            reg = kubelet.wait_registration(RESOURCE, timeout=10, after=t)
            rereg.append((reg.received_at - t) * 1e3)
            kubelet.wait_resources([RESOURCE], timeout=10)

        status = open(f"/proc/{agent.pid}/status").read()
        rss = {k: v.strip() for k, v in (line.split(":", 1) for line in status.splitlines() if ":" in line)}
        rollup = open(f"/proc/{agent.pid}/smaps_rollup").read()
        rss.update({k: v.strip() for k, v in (line.split(":", 1) for line in rollup.splitlines()[1:] if ":" in line)})
        if args.smaps:
            write_smaps_summary(agent.pid, args.smaps)
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(10)
        except subprocess.TimeoutExpired:
            agent.kill()
        kubelet.stop()

    print(f"| metric | value |\n|---|---|")
    print(f"| devices advertised | {len(ids)} (8 GPUs x 64 replicas) |")
    print(f"| Allocate latency, {len(lat)} calls, median | {statistics.median(lat):.0f} us |")
    print(f"| Allocate latency p99 | {pct(lat, 99):.0f} us |")
    print(f"| Allocate latency max | {max(lat):.0f} us |")
    if health:
        print(f"| Xid -> Unhealthy ListAndWatch, {len(health)} trials, median | {statistics.median(health):.1f} ms |")
        print(f"| Xid -> Unhealthy, max | {max(health):.1f} ms |")
    if rereg:
        print(f"| kubelet restart -> re-registered, {len(rereg)} trials, median | {statistics.median(rereg):.1f} ms |")
        print(f"| kubelet restart -> re-registered, max | {max(rereg):.1f} ms |")
    print(f"| agent VmRSS at the end | {rss.get('VmRSS')} |")
    print(f"| agent VmHWM (peak RSS) | {rss.get('VmHWM')} |")
    for k in ("Shared_Clean", "Shared_Dirty", "Private_Clean", "Private_Dirty", "Anonymous"):
        print(f"| agent {k} (smaps_rollup) | {rss.get(k)} |")
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
