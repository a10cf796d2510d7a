"""`scripts/run-cluster.sh --dra` end to end, as a person runs it (docs/dra.md's first steps): the
script (with --no-build: meson built it) brings up the e2e cluster in a directory of this test's
own, on a port base of its own, starts the agent's DRA driver on examples/dra/node.yaml with the
chart's DeviceClasses and prints how to apply examples/dra/claims.yaml; the printed command is
run, and every pod it makes (the file's pod and one for each other template: a whole H100, 20 GiB
and 30 % of the time-sliced H100, an MPS client of the L4, a 3g.40gb MIG device made on demand)
gets to Running with what its claim promises: its device's UUID, the guard's limits of the shared
claim, MPS's thread share and memory limit, the MIG instance. What a pod saw is read from its log
file on the host (DIR/pod-logs) and inside it with ctr's exec, as the script prints them: kubectl
logs and exec have no address of the kubelet to go to in this cluster (docs/e2e.md; checked).
The printed delete unprepares every claim (their CDI specs go, the MIG instance is destroyed).
`run-cluster.sh down` then stops every process the run started, by the pids in DIR/run (the agent,
and through it MPS's control daemon, among them), and frees the ports.
Not in the e2e pytest run (its name is no test_*.py): meson runs it as a test of its own
(tests/e2e/meson.build), so that its cluster never shares the machine with the suite's."""
import glob
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time

from cluster_agent import ROOT, read_env

SCRIPT = os.path.join(ROOT, "scripts", "run-cluster.sh")
GPUSLICE = os.environ.get("GPUSLICE") or os.path.join(ROOT, "build", "gpuslice")
NODE = os.path.join(ROOT, "examples", "dra", "node.yaml")
GIB = 1 << 30
PODS = ("shared-20gi", "h100-whole", "mps-25", "mig-3g40gb")


def _port_base():
    """A port base whose ports (cluster.sh's, + 248..443, and the agent's metrics + 402) are free on
    loopback, away from the suite's default 16000."""
    for base in range(18000, 30000, 500):
        ports = [base + o for o in (248, 250, 257, 259, 379, 380, 402, 443)]
        if all(_free(p) for p in ports):
            return base
    raise AssertionError("no free port base on 127.0.0.1 in 18000..30000")


def _free(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # only a listener makes it busy
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _reaper(env, dir):
    """run-cluster.sh down once this test's process is gone, however it ends (meson's timeout kills
    the group before a finally runs); a second down after the test's own stops nothing."""
    subprocess.Popen(
        ["bash", "-c", 'while kill -0 "$1" 2>/dev/null; do sleep 2; done; '
         '[ -d "$2/run" ] && exec bash "$3" down >>"$2/reaper.log" 2>&1', "gs-runcluster-reaper",
         str(os.getpid()), dir, SCRIPT],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        start_new_session=True)


def _kubectl(env, *args, input=None, timeout=60):
    p = subprocess.run(["kubectl", *args], input=input, capture_output=True, text=True, timeout=timeout, env=env)
    assert p.returncode == 0, f"kubectl {' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p.stdout


def _wait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last is True:
            return
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}; last: {last}")


def _pod_log(dir, pod):
    """What POD's container printed (SHOW of cluster_agent), from the kubelet's log file, once it
    says "ready": {"env": {NAME: value}, "guard": [lines], "node": [paths]}."""
    files = glob.glob(os.path.join(dir, "pod-logs", f"default_{pod}_*", "main", "0.log"))
    if not files:
        return None
    seen = {"env": {}, "guard": [], "node": [], "ready": False}
    with open(files[0]) as f:
        for line in f:
            # CRI log lines: TIME STREAM TAG TEXT
            text = line.rstrip("\n").split(" ", 3)[-1]
            if text == "ready":
                seen["ready"] = True
            elif text.startswith("guard "):
                seen["guard"].append(text[6:])
            elif text.startswith("node "):
                seen["node"].append(text[5:])
            elif "=" in text:
                k, _, v = text.partition("=")
                seen["env"][k] = v
    return seen if seen["ready"] else None


def _alive(pid, start):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19] == start
    except OSError:
        return False


def test_run_cluster_dra_applies_the_example_claims():
    assert os.geteuid() == 0, "the cluster needs root (the kubelet and containerd make cgroups and mounts)"
    assert os.access(GPUSLICE, os.X_OK), f"GPUSLICE={GPUSLICE}: not the built binary"
    dir = tempfile.mkdtemp(prefix="gsrc.", dir="/tmp")  # short: unix socket paths live under it
    base = _port_base()
    env = dict(os.environ, GS_CLUSTER_DIR=dir, GS_BUILD_DIR=os.path.dirname(GPUSLICE), GS_E2E_PORT_BASE=str(base))
    _reaper(env, dir)
    ok = False
    try:
        p = subprocess.run(["bash", SCRIPT, "--dra", "--no-build"], capture_output=True, text=True, timeout=1500,
                           env=env, cwd="/")
        assert p.returncode == 0, f"run-cluster.sh --dra: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
        apply = f"python3 tests/e2e/cluster_agent.py claims {dir} | kubectl apply -f -"
        assert apply in p.stdout and f". {dir}/env" in p.stdout, p.stdout
        cenv = read_env(os.path.join(dir, "env"))
        kenv = dict(env, KUBECONFIG=cenv["KUBECONFIG"], PATH=cenv["PATH"].replace(":$PATH", "") + ":" + env["PATH"])

        # the chart's four classes, the node's slices: every GPU of examples/dra/node.yaml
        classes = _kubectl(kenv, "get", "deviceclasses", "-o", "name").split()
        assert sorted(classes) == sorted(f"deviceclass.resource.k8s.io/{c}gpu.gpuslice.io"
                                         for c in ("", "shared.", "mps.", "mig.")), classes
        sel = f"spec.nodeName={cenv['GS_E2E_NODE']},spec.driver=gpu.gpuslice.io"
        devices = {d["name"] for s in json.loads(_kubectl(kenv, "get", "resourceslices", "--field-selector", sel,
                                                          "-o", "json"))["items"]
                   for d in s["spec"].get("devices") or []}
        assert {"gpu-0", "gpu-1", "gpu-2"} <= devices, sorted(devices)
        assert any(d.startswith("gpu-3-mig-3g40gb-") for d in devices), sorted(devices)

        # the printed command, as printed (from the repository's root)
        a = subprocess.run(["bash", "-c", apply], capture_output=True, text=True, timeout=120, env=kenv, cwd=ROOT)
        assert a.returncode == 0, f"{apply}: exit {a.returncode}\n{a.stdout}\n{a.stderr}"

        def running():
            pods = json.loads(_kubectl(kenv, "get", "pods", "-n", "default", "-o", "json"))["items"]
            phases = {p["metadata"]["name"]: p["status"].get("phase") for p in pods}
            return True if all(phases.get(n) == "Running" for n in PODS) and len(phases) == len(PODS) else phases
        _wait(running, 300, "the example claims' pods to run")
        seen = {}

        def logged():
            for n in PODS:
                if n not in seen and _pod_log(dir, n):
                    seen[n] = _pod_log(dir, n)
            return True if len(seen) == len(PODS) else sorted(seen)
        _wait(logged, 60, "each pod's log to say ready")

        gpus = json.loads(subprocess.run([GPUSLICE, "--sim", NODE, "--sim-state", os.path.join(dir, "sim-dra"),
                                          "inspect", "--json"], capture_output=True, text=True, timeout=60,
                                         check=True).stdout)["gpus"]
        uuid = [g["uuid"] for g in gpus]

        # 20 GiB and 30 % of the time-sliced H100 (GPU 1): the guard's limits for its claim
        s = seen["shared-20gi"]
        assert s["env"].get("GPUSLICE_DRA_CLAIM", "").startswith("default/shared-20gi-gpu-"), s["env"]
        assert s["env"].get("GPUSLICE_DRA_DEVICES") == uuid[1], s["env"]
        assert any(line.endswith(f" {uuid[1]} {20 * GIB} 30") for line in s["guard"]), s["guard"]
        # the whole H100 its CEL selector picks (GPU 0), no guard
        w = seen["h100-whole"]
        assert w["env"].get("GPUSLICE_DRA_DEVICES") == uuid[0] and not w["guard"], w
        assert [n for n in w["node"] if n[len("/dev/nvidia"):].isdigit()] == [f"/dev/nvidia{gpus[0]['minor']}"], w
        # an MPS client of the L4 (GPU 2): the thread share and pinned memory its claim asks
        m = seen["mps-25"]
        assert m["env"].get("GPUSLICE_DRA_DEVICES") == uuid[2], m["env"]
        assert m["env"].get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") == "25", m["env"]
        assert m["env"].get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") == "0=10240M", m["env"]
        assert m["env"].get("CUDA_MPS_PIPE_DIRECTORY") == "/mps/pipe", m["env"]
        # a 3g.40gb instance made on demand on an H100 in MIG mode
        g = seen["mig-3g40gb"]
        assert g["env"].get("GPUSLICE_DRA_DEVICES", "").startswith("MIG-"), g["env"]
        assert len([n for n in g["node"] if n.startswith("/dev/nvidia-caps/")]) == 2, g["node"]

        # what the script prints for logs and exec, run as printed: the log file says what the pod
        # printed, ctr's exec reads the guard's limits inside the container
        lines = p.stdout.splitlines()
        cat = next(x.strip() for x in lines if x.strip().startswith(f"cat {dir}/pod-logs/"))
        r = subprocess.run(["bash", "-c", cat], capture_output=True, text=True, timeout=60, env=kenv)
        assert r.returncode == 0 and f"GPUSLICE_DRA_DEVICES={uuid[1]}" in r.stdout, (cat, r.stdout, r.stderr)
        ctr = next(x.strip() for x in lines if x.strip().startswith("ctr "))
        r = subprocess.run(["bash", "-c", ctr], capture_output=True, text=True, timeout=60, env=kenv)
        assert r.returncode == 0, (ctr, r.stdout, r.stderr)
        assert f"device 0 {uuid[1]} {20 * GIB} 30" in r.stdout.splitlines(), r.stdout
        # kubectl logs has no address of the kubelet to go to (docs/e2e.md says so and why)
        r = subprocess.run(["kubectl", "logs", "shared-20gi"], capture_output=True, text=True, timeout=60, env=kenv)
        assert r.returncode != 0 and "no preferred addresses" in r.stderr, (r.stdout, r.stderr)

        # the printed delete: every claim unprepared (its CDI spec gone), the MIG instance destroyed
        assert glob.glob(os.path.join(dir, "cdi", "*_claim-*.json")), os.listdir(os.path.join(dir, "cdi"))
        delete = next(x.strip() for x in lines if x.strip().endswith("| kubectl delete -f -"))
        r = subprocess.run(["bash", "-c", delete], capture_output=True, text=True, timeout=180, env=kenv, cwd=ROOT)
        assert r.returncode == 0, (delete, r.stdout, r.stderr)
        _wait(lambda: not glob.glob(os.path.join(dir, "cdi", "*_claim-*.json")) or os.listdir(os.path.join(dir, "cdi")),
              120, "the claims' CDI specs to go")
        gpus = json.loads(subprocess.run([GPUSLICE, "--sim", NODE, "--sim-state", os.path.join(dir, "sim-dra"),
                                          "inspect", "--json"], capture_output=True, text=True, timeout=60,
                                         check=True).stdout)["gpus"]
        assert not gpus[3]["mig"]["gpu_instances"] and not gpus[4]["mig"]["gpu_instances"], gpus[3]["mig"]
        ok = True
    finally:
        pids = {}
        for f in glob.glob(os.path.join(dir, "run", "*.pid")):
            with open(f) as fh:
                pid, _, start = fh.read().strip().partition(" ")
            pids[os.path.basename(f)[:-4]] = (int(pid), start)
        mps = []  # the control daemons' pids (the agent removes their directories when it stops)
        for f in glob.glob(os.path.join(dir, "agent", "dra", "mps", "*", "pipe", "nvidia-cuda-mps-control.pid")):
            with open(f) as fh:
                mps += [int(x) for x in fh.read().split()]
        d = subprocess.run(["bash", SCRIPT, "down"], capture_output=True, text=True, timeout=300, env=env)
        if not ok:
            for log in sorted(glob.glob(os.path.join(dir, "logs", "*.log"))):
                with open(log, errors="replace") as f:
                    print(f"---- {log}\n" + "\n".join(f.read().splitlines()[-30:]))
    assert d.returncode == 0, d.stderr
    assert "agent" in pids and "kubelet" in pids and "kube-apiserver" in pids, pids
    left = {n: p for n, (p, st) in pids.items() if _alive(p, st)}
    assert not left, f"still running after run-cluster.sh down: {left}"
    assert mps, "no MPS control daemon's pid file: the agent started none"
    for pid in mps:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as c:
                cmd = c.read()
        except OSError:
            continue
        assert b"fake_mps_control" not in cmd, f"MPS's control daemon {pid} outlived the agent"
    busy = [base + o for o in (248, 250, 257, 259, 379, 380, 402, 443) if not _free(base + o)]
    assert not busy, f"ports still bound after down: {busy}"
    shutil.rmtree(dir, ignore_errors=True)
