"""gpuslice's agent and NVIDIA's device plugin (built by tests/nvmlclients/build-nvdp.sh into the
peers cache) side by side on one simulated node, each served by the kubelet emulator
(tests/integration/kubelet_emulator.py), in turn, with the same NVIDIA config:

  - CPU time while idle: the plugin's CPU time (user + system, every thread's, in nanoseconds from
    /proc/PID/task/*/schedstat) and its threads' voluntary context switches (their wake-ups) over
    --idle seconds after its resources are registered and nothing asks anything of it;
  - Allocate latency (median, p99) of --calls one-device Allocate calls from the emulator's Python
    gRPC client (the client's own time included, the same for both);
  - SIGTERM -> exit: from the signal to the process reaped (os.waitpid), and its exit status.
Each plugin runs --runs times per config (a fresh process each time; the SIGTERM figure has one
sample per run). Needs root (NVIDIA's plugin runs in a private mount namespace, as
tests/nvmlclients/test_nvidia_plugin.py runs it), go (build-nvdp.sh) and a build of gpuslice.

usage: /usr/bin/python3 bench/plugin_quiet_bench.py --build build-fast [--runs 3] [--idle 60]
           [--calls 2000] [--configs time-slicing,mig-mixed] [--plugins gpuslice,nvidia]
Prints each run as it goes and a markdown table (median and min-max over the runs). Bounded:
every wait has a timeout, and every process started is stopped by its PID."""
import argparse
import os
import random
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "nvmlclients"))

CONFIGS = {  # name: (NVIDIA config, node, hand-made MIG instances (gpu, profile, start))
    "time-slicing": ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                     "      - name: nvidia.com/gpu\n        replicas: 4\n", "t4x2.yaml", ()),
    "mig-mixed": ("version: v1\nflags:\n  migStrategy: mixed\n", "h100x4-l4x3.yaml",
                  ((0, "3g.40gb", 0), (0, "1g.10gb", 6), (1, "7g.80gb", 0), (2, "2g.20gb", 0))),
}


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100.0 * (len(values) - 1))))]


def cpu_and_wakeups(pid):
    """(CPU ns, voluntary context switches) summed over the process's threads now."""
    ns = switches = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                ns += int(f.read().split()[0])
            with open(f"/proc/{pid}/task/{t}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        switches += int(line.split()[1])
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    return ns, switches


class Turn:
    """One plugin process on a fresh simulated node and a fresh kubelet emulator."""

    def __init__(self, args, plugin, config):
        import kubelet_emulator
        from test_nvidia_plugin import Node
        self.args, self.plugin = args, plugin
        text, node_file, mig = CONFIGS[config]
        self.node = Node(node_file)
        self.policy_text = text
        self.policy = self.node.policy(text)
        self.node.gs("inspect")  # the root is made when the node is first opened
        for gpu, profile, start in mig:
            self.node.gs("sim", "mig-create", "--gpu", str(gpu), "--profile", profile, "--start", str(start))
        self.want = self.node.apply(text)
        self.kdir = tempfile.mkdtemp(prefix="gs-k-", dir="/tmp")
        self.emu = kubelet_emulator.KubeletEmulator(self.kdir).start()
        self.log_path = os.path.join(self.node.dir, f"{plugin}.log")
        self.proc = None

    def start(self):
        from test_nvidia_plugin import LIB_DIR, NAMESPACE
        n = self.node
        env = dict(os.environ, GPUSLICE_SIM_NODE=n.path, GPUSLICE_SIM_STATE=n.state, GPUSLICE_SIM_LIB=self.args.sim_lib)
        if self.plugin == "gpuslice":
            cmd = [self.args.gpuslice, "--sim", n.path, "--sim-state", n.state, "agent", "--config", self.policy,
                   "--kubelet-dir", self.kdir, "--features-file", "", "--metrics-address", "127.0.0.1:0",
                   "--cdi-root", os.path.join(n.dir, "cdi-gs"), "--guard-root", os.path.join(n.dir, "guard"),
                   "--mig-status-file", os.path.join(n.dir, "mig-status.json"),
                   "--pod-resources-socket", os.path.join(n.dir, "no-pod-resources.sock")]
        else:
            cdi = os.path.join(n.dir, "cdi")
            os.makedirs(cdi, exist_ok=True)
            env.update(LD_LIBRARY_PATH=os.path.join(n.root, LIB_DIR), SIM_ROOT=n.root, KUBELET_DIR=self.kdir,
                       CDI_DIR=cdi)
            cmd = ["unshare", "-m", "sh", "-c", NAMESPACE, "sh", self.args.nvdp,  # unshare and sh exec: one PID
                   "--kubelet-socket", os.path.join(self.kdir, "kubelet.sock"), "--config-file", self.policy,
                   "--driver-root", n.root, "--driver-root-ctr-path", n.root, "--dev-root", n.root]
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.emu.wait_resources(list(self.want), timeout=60)

    def allocate(self, calls):
        rng = random.Random(42)
        pool = [(r, d.id) for r in self.want for d in self.emu.devices(r)]
        for _ in range(100):  # warm-up
            r, i = rng.choice(pool)
            self.emu.allocate(r, [i])
        lat = []
        for _ in range(calls):
            r, i = rng.choice(pool)
            t = time.perf_counter()
            self.emu.allocate(r, [i])
            lat.append((time.perf_counter() - t) * 1e3)
        return lat

    def idle(self, seconds):
        time.sleep(1.0)  # what the last Allocate left (gRPC's threads, a heap trim) settles
        ns0, sw0 = cpu_and_wakeups(self.proc.pid)
        time.sleep(seconds)
        ns1, sw1 = cpu_and_wakeups(self.proc.pid)
        return (ns1 - ns0) / 1e6, sw1 - sw0

    def sigterm(self):
        """(ms from SIGTERM to the process's exit, seen on its pidfd; exit status)."""
        fd = os.pidfd_open(self.proc.pid)
        try:
            p = select.poll()
            p.register(fd, select.POLLIN)
            t = time.perf_counter()
            os.kill(self.proc.pid, signal.SIGTERM)
            done = p.poll(15000)
            ms = (time.perf_counter() - t) * 1e3
        finally:
            os.close(fd)
        if not done:
            self.proc.kill()
        return ms, self.proc.wait(10)

    def close(self):
        if self.proc and self.proc.returncode is None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.emu.stop()
        shutil.rmtree(self.kdir, ignore_errors=True)
        shutil.rmtree(self.node.dir, ignore_errors=True)


def one_run(args, plugin, config):
    t = Turn(args, plugin, config)
    try:
        t.start()
        lat = t.allocate(args.calls)
        cpu_ms, wakeups = t.idle(args.idle)
        stop_ms, rc = t.sigterm()
        if rc != 0:
            raise SystemExit(f"{plugin} exited {rc} on SIGTERM; its log:\n{open(t.log_path).read()}")
        return {"alloc_p50": statistics.median(lat), "alloc_p99": pct(lat, 99), "idle_cpu_ms": cpu_ms,
                "idle_wakeups": wakeups, "stop_ms": stop_ms}
    except BaseException:
        if os.path.exists(t.log_path):
            print(f"--- {plugin} log ---\n{open(t.log_path).read()[-4000:]}", file=sys.stderr)
        raise
    finally:
        t.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--idle", type=float, default=60.0, help="seconds of idle CPU measurement per run")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--configs", default="time-slicing,mig-mixed")
    ap.add_argument("--plugins", default="gpuslice,nvidia")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    args.gpuslice = os.path.join(build, "gpuslice")
    args.sim_lib = os.path.join(build, "sim", "libgpuslice-nvml-sim.so")
    os.environ.update(GPUSLICE=args.gpuslice, GPUSLICE_SIM_LIB=args.sim_lib, GS_SOURCE_ROOT=ROOT)
    plugins = args.plugins.split(",")
    if "nvidia" in plugins:
        p = subprocess.run([os.path.join(ROOT, "tests", "nvmlclients", "build-nvdp.sh")], capture_output=True,
                           text=True, timeout=1200)
        if p.returncode != 0:
            raise SystemExit(f"build-nvdp.sh failed:\n{p.stderr}")
        args.nvdp = p.stdout.strip().splitlines()[-1]
    results = {}
    for config in args.configs.split(","):
        for run in range(args.runs):
            for plugin in plugins:
                r = one_run(args, plugin, config)
                results.setdefault((config, plugin), []).append(r)
                print(f"{config} {plugin} run {run + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in r.items()),
                      flush=True)
    rows = [("Allocate p50 (ms)", "alloc_p50", "{:.3f}"), ("Allocate p99 (ms)", "alloc_p99", "{:.3f}"),
            (f"CPU while idle, {args.idle:g} s (ms)", "idle_cpu_ms", "{:.1f}"),
            (f"wake-ups while idle, {args.idle:g} s", "idle_wakeups", "{:.0f}"),
            ("SIGTERM -> exit (ms)", "stop_ms", "{:.1f}")]
    print(f"\n{args.runs} runs each; median (min-max)\n")
    print("| config | figure | " + " | ".join(plugins) + " |")
    print("|---|---|" + "---|" * len(plugins))
    for config in args.configs.split(","):
        for label, key, fmt in rows:
            cells = []
            for plugin in plugins:
                v = [r[key] for r in results[(config, plugin)]]
                cells.append(f"{fmt.format(statistics.median(v))} ({fmt.format(min(v))}-{fmt.format(max(v))})")
            print(f"| {config} | {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
