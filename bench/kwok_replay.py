#!/usr/bin/env python3
"""Alibaba's GPU trace through the real kube-scheduler, on 1,213 kwok nodes.

The e2e cluster (tests/e2e/cluster.sh: real etcd, kube-apiserver, controller-manager and
kube-scheduler v1.36.3) gets the trace's 1,213 GPU nodes (openb_node_list_gpu_node.csv) as Nodes
that kwok v0.8.0 (tests/e2e/build.sh kwok) keeps alive (its own node-initialize and
node-heartbeat-with-lease Stages, bench/kwok/stages-node.yaml; --pod-stages adds its pod-ready
Stage). The trace's pods are created in the arrival order of `gpuslice replay --seed N`
(`replay --dump-order`: the name sort, Go's shuffle and the inflation draws of the FGD paper's
simulator), until the arrived GPU request reaches 100 % of the cluster's GPU capacity (the last
event of the 100 % bucket), and the scheduler decides where each goes. Runs (--runs):

  least       the default scheduler, NodeResourcesFit LeastAllocated (bench/kwok/sched-least.yaml)
  most        the default scheduler, NodeResourcesFit MostAllocated (bench/kwok/sched-most.yaml)
  fgd         filter and prioritize by `gpuslice extender --policy fgd --workload PODS.csv`
              (bench/kwok/sched-extender.yaml): FGD's target workload from the workload's pod list,
              as `replay`'s FGD takes it (a platform would feed it from its history)
  fgd-online  the same without --workload: FGD's targets from the pods the extender has seen so far
  gpuslice    the same under gpuslice's policy (online by design: no --workload)

What a pod asks (requests cpu and memory as the trace says; limits for the extended resources):
a share of one GPU (num_gpu 1, gpu_milli < 1000) `gpuslice.io/gpu-compute: gpu_milli/10` (the
extender's unit, docs/extender.md); k whole GPUs `nvidia.com/gpu: k`; every GPU pod also
`gpuslice.io/gpu-milli` (its milli-GPU: the share, or 1000 k), the sum the default scheduler can
check. A pod with a gpu_spec gets a node affinity on `gpuslice.io/gpu.product`. The nodes
advertise cpu (millicores), memory, nvidia.com/gpu (the count), gpuslice.io/gpu-compute (100 per
GPU) and gpuslice.io/gpu-milli (1000 per GPU), and carry the labels the agent publishes
(gpuslice.io/gpu.product, gpuslice.io/gpu.count) and gpuslice.io/kwok-replay=true, which every
trace pod selects (so nothing lands on the cluster's one real node, which is also cordoned when the
cluster is this script's own).

Pods are created one at a time in that order (so the scheduler's queue, ordered by arrival, has the
replay's order), at most --window of them without an outcome yet: the scheduler's throughput, not
the harness's, sets the pace (the mean depth of its queue is reported). A pod the scheduler finds
unschedulable is deleted, as `replay` drops a pod that fits nowhere (the replay never retries one;
since pods never leave, a retry could not succeed either). --ext-source api runs the extender as a
deployment runs it: `gpuslice extender --kubeconfig` takes the nodes from the labels above and the
pods from the API server as they bind, and a second extender entry sends the scheduler's bind to
its /bind, which records the GPU and writes the Binding; the script waits for its model to hold
every node before it starts the scheduler (the Bindings are written by the extender's bind
workers, docs/extender.md). --ext-source snapshot (the default): the extender on the
trace's node list (--snapshot), its model knowing the pods only from the scheduler's calls, and the
bind through this script's shim (the extender's /bind, then the Binding created here).

For each run: the GPU allocation ratio at 100 % arrived workload (FGD's metric, as `replay`
computes it: per 1 % bucket of arrived GPU request, the mean over the pod events in it), as the
scheduler bound the pods, and physically: each node's bound pods packed onto its GPUs in bind order
(a share on the GPU with the least free milli-GPU that holds it, k whole GPUs on free ones); a pod
that does not fit there is "overcommitted" (the node's sum of gpu-milli held it, no GPU does: what
the extender's per-GPU filter prevents) and left out of the physical ratio. Beside it `gpuslice
replay`'s figure for fgd and gpuslice (same seed and order), pods unschedulable, the scheduler's
throughput (pod outcomes per second, first creation to last outcome) and its own scheduling
attempt latency (scheduler_scheduling_attempt_duration_seconds), and the extender's decision
latency from its /metrics histogram. The curves go to OUT/curve-WORKLOAD-RUN.csv
(arrived_pct,alloc_pct,phys_alloc_pct) and a PNG (matplotlib when it can be imported; gnuplot
otherwise; neither: the CSVs only).

usage (root; from the repository root, after `meson setup build-kwok && ninja -C build-kwok`):
  GS_E2E_PORT_BASE=17800 python3 bench/kwok_replay.py --build build-kwok [--workloads default,gpushare40]
      [--runs least,most,fgd,gpuslice] [--seed 42] [--max-pct 100] [--out DIR] [--json FILE]
GS_E2E_DIR=DIR uses a cluster that is up (its real node is not cordoned; nodes it already has from
an earlier run are reused); otherwise the script brings up its own in /tmp/gse2e.kwok-PORTBASE (one
per GS_E2E_PORT_BASE, so that two runs on different port bases do not share a directory) and takes
it down at the end (kept with GS_E2E_KEEP=1). Every process it starts is stopped by its pid; every
wait is bounded; it fails loudly (exit 1) when a node never becomes Ready, a pod never gets an
outcome, or a component dies."""
import argparse
import csv
import http.client
import http.server
import json
import math
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.join(ROOT, "bench", "kwok")
CLUSTER_SH = os.path.join(ROOT, "tests", "e2e", "cluster.sh")
BUILD_SH = os.path.join(ROOT, "tests", "e2e", "build.sh")
NS = "kwok-replay"
SEL = "gpuslice.io/kwok-replay"
PRODUCT = "gpuslice.io/gpu.product"
MILLI = "gpuslice.io/gpu-milli"
COMPUTE = "gpuslice.io/gpu-compute"
GPU = "nvidia.com/gpu"
RUNS = ("least", "most", "fgd", "fgd-online", "gpuslice")
POLICY = {"fgd": "fgd", "fgd-online": "fgd", "gpuslice": "gpuslice"}  # the extender runs and their policy
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
from e2e import E2EError, proc_start, read_env, wait  # noqa: E402
from kubehttp import Client as Api, KubeHttpError  # noqa: E402  (bench/: this script's directory)
# 1,213 leases renewed every 30 s are as many API writes as the pods: in its own cluster the script
# renews them every 5 minutes and lets the node lifecycle controller wait an hour for one
GRACE = "--node-monitor-grace-period=3600s"


class BenchError(Exception):
    pass


def log(msg):
    print(f"[kwok-replay {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------- the trace

def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def pod_gpu_milli(p):
    """The pod's GPU request as `replay` counts it (gpu_milli clipped to 1000, times num_gpu)."""
    n, m = int(p["num_gpu"]), min(1000, max(0, int(p["gpu_milli"])))
    return n * m if n > 0 and m > 0 else 0


def is_share(p):
    return int(p["num_gpu"]) == 1 and 0 < int(p["gpu_milli"]) < 1000


def node_object(n):
    gpus = int(n["gpu"])
    res = {"cpu": f"{n['cpu_milli']}m", "memory": f"{n['memory_mib']}Mi", "pods": "1000",
           GPU: str(gpus), COMPUTE: str(100 * gpus), MILLI: str(1000 * gpus)}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": n["sn"], "annotations": {"kwok.x-k8s.io/node": "fake"},
                     "labels": {SEL: "true", "type": "kwok", "kubernetes.io/hostname": n["sn"],
                                PRODUCT: n["model"], "gpuslice.io/gpu.count": str(gpus)}},
        "spec": {},
        "status": {"capacity": res, "allocatable": res},
    }


def pod_object(name, seq, p, image):
    req = {"cpu": f"{p['cpu_milli']}m", "memory": f"{p['memory_mib']}Mi"}
    lim = {}
    if is_share(p):
        lim = {COMPUTE: str(int(p["gpu_milli"]) // 10), MILLI: str(int(p["gpu_milli"]))}
    elif pod_gpu_milli(p):
        lim = {GPU: p["num_gpu"], MILLI: str(1000 * int(p["num_gpu"]))}
    expr = [{"key": SEL, "operator": "In", "values": ["true"]}]
    spec = (p.get("gpu_spec") or "").strip()
    if spec:
        expr.append({"key": PRODUCT, "operator": "In", "values": spec.split("|")})
    res = {"requests": req}
    if lim:
        res["limits"] = lim
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "kwok-replay"},
                     "annotations": {"gpuslice.io/replay-seq": str(seq), "gpuslice.io/trace-pod": p["name"]}},
        "spec": {
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expr}]}}},
            "containers": [{"name": "main", "image": image, "imagePullPolicy": "Never", "resources": res}],
            "terminationGracePeriodSeconds": 0, "automountServiceAccountToken": False,
            "enableServiceLinks": False, "restartPolicy": "Never",
        },
    }


def replay_order(gpuslice, nodes_csv, pods_csv, seed, outdir, tag):
    """`gpuslice replay --dump-order`: the events in arrival order, and replay's figures for fgd and
    gpuslice (the order is the same for every policy: the policy's own draws come after it)."""
    order = os.path.join(outdir, f"order-{tag}.csv")
    figs = {}
    for pol in ("fgd", "gpuslice"):
        cmd = [gpuslice, "replay", "--nodes", nodes_csv, "--pods", pods_csv, "--policy", pol, "--seed", str(seed),
               "--out", os.path.join(outdir, f"replay-{tag}-{pol}.csv")]
        cmd += ["--dump-order", order if pol == "fgd" else os.path.join(outdir, f"order-{tag}-{pol}.csv")]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise BenchError(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stderr}")
        kv = dict(x.split("=", 1) for x in r.stdout.split() if "=" in x)
        figs[pol] = kv
    for pol in ("fgd", "gpuslice"):  # replay's node per event, for the agreement of the extender runs
        figs[pol]["nodes"] = [e["node"] for e in read_csv(order if pol == "fgd" else
                                                           os.path.join(outdir, f"order-{tag}-{pol}.csv"))]
    return read_csv(order), figs


# ---------------------------------------------------------------------------- processes

class Proc:
    """A process in a session of its own, its pid and start time in CDIR/run/NAME.pid (so that
    cluster.sh down stops it too if this script dies), stopped by that pid."""

    def __init__(self, cdir, name, cmd, env=None):
        self.name, self.logpath = name, os.path.join(cdir, "logs", f"{name}.log")
        self.pidfile = os.path.join(cdir, "run", f"{name}.pid")
        self.logf = open(self.logpath, "ab")
        self.log_from = self.logf.tell()  # tail() reads this run's part of the log only
        self.p = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True, env=env)
        with open(self.pidfile, "w") as f:
            f.write(f"{self.p.pid} {proc_start(self.p.pid)}\n")

    def alive(self):
        return self.p.poll() is None

    def tail(self, n=3000):
        with open(self.logpath, errors="replace") as f:
            f.seek(self.log_from)
            return f.read()[-n:]

    def stop(self, timeout=15):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(10)
        self.logf.close()
        try:
            os.unlink(self.pidfile)
        except OSError:
            pass


# ---------------------------------------------------------------------------- the bind shim

class BindShim:
    """The scheduler's binder for the extender runs (see the top): POST .../bind is passed to the
    extender's /bind, then the Binding is created in the API server."""

    def __init__(self, cdir, api_port, extender_port):
        shim = self
        self.errors = []
        self.local = threading.local()

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                err = shim.bind(body)
                out = json.dumps({"Error": err}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.cdir, self.api_port, self.ext_port = cdir, api_port, extender_port
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        self.port = self.srv.server_address[1]
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()

    def bind(self, body):
        if not hasattr(self.local, "api"):
            self.local.api = Api(self.cdir, self.api_port)
            self.local.ext = None
        try:
            args = json.loads(body)
            for attempt in (1, 2):
                if self.local.ext is None:
                    self.local.ext = http.client.HTTPConnection("127.0.0.1", self.ext_port, timeout=30)
                try:
                    self.local.ext.request("POST", "/gpuslice/bind", body=body,
                                           headers={"Content-Type": "application/json"})
                    r = self.local.ext.getresponse()
                    res = json.loads(r.read() or b"{}")
                    break
                except (http.client.HTTPException, OSError):
                    self.local.ext.close()
                    self.local.ext = None
                    if attempt == 2:
                        raise
            if res.get("Error"):
                return res["Error"]
            self.local.api.json("POST", f"/api/v1/namespaces/{args['PodNamespace']}/pods/{args['PodName']}/binding",
                                {"apiVersion": "v1", "kind": "Binding",
                                 "metadata": {"name": args["PodName"], "namespace": args["PodNamespace"],
                                              "uid": args.get("PodUID", "")},
                                 "target": {"apiVersion": "v1", "kind": "Node", "name": args["Node"]}})
            return ""
        except Exception as e:  # the scheduler gets the error and records it on the pod
            self.errors.append(str(e)[:300])
            return f"kwok_replay bind shim: {e}"[:500]

    def stop(self):
        self.srv.shutdown()
        self.srv.server_close()


# ---------------------------------------------------------------------------- metrics

def scrape(conn_factory, path="/metrics"):
    c = conn_factory()
    try:
        c.request("GET", path)
        r = c.getresponse()
        text = r.read().decode(errors="replace")
        if r.status != 200:
            raise BenchError(f"GET {path}: {r.status} {text[:300]}")
        return text
    finally:
        c.close()


def histogram(text, name, match=None):
    """{le: cumulative count}, sum and count of the series of histogram NAME whose labels include
    MATCH (all such series summed)."""
    buckets, total, count = {}, 0.0, 0
    pat = re.compile(re.escape(name) + r'_(bucket|sum|count)(?:\{([^}]*)\})? (\S+)$')
    for line in text.splitlines():
        m = pat.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if match and any(labels.get(k) != v for k, v in match.items()):
            continue
        v = float(m.group(3))
        if m.group(1) == "bucket":
            le = float(labels["le"]) if labels["le"] != "+Inf" else math.inf
            buckets[le] = buckets.get(le, 0) + v
        elif m.group(1) == "sum":
            total += v
        else:
            count += int(v)
    return {"buckets": buckets, "sum": total, "count": count}


def hist_diff(a, b):
    return {"buckets": {le: b["buckets"].get(le, 0) - a["buckets"].get(le, 0) for le in b["buckets"]},
            "sum": b["sum"] - a["sum"], "count": b["count"] - a["count"]}


def quantile_bound(h, q):
    """The upper bound of the bucket that holds quantile q (None without observations)."""
    if not h["count"]:
        return None
    for le in sorted(h["buckets"]):
        if h["buckets"][le] >= q * h["count"]:
            return le
    return math.inf


# ---------------------------------------------------------------------------- one run

class Outcomes:
    """What the watch saw of each pod: bound (node, the time) or unschedulable."""

    def __init__(self):
        self.lock = threading.Condition()
        self.bound, self.unsched, self.errors = {}, {}, {}
        self.bind_seq = []  # pod names in the order the watch saw them bound

    def done(self):
        return len(self.bound) + len(self.unsched)


def watch_pods(api, out, stop, rv, to_delete, dead):
    path = f"/api/v1/namespaces/{NS}/pods?watch=1&allowWatchBookmarks=true&timeoutSeconds=240"
    while not stop.is_set():
        conn = api.connect(timeout=90)
        try:
            conn.request("GET", f"{path}&resourceVersion={rv}")
            r = conn.getresponse()
            if r.status != 200:
                raise BenchError(f"watch pods: {r.status} {r.read()[:300]!r}")
            while not stop.is_set():
                line = r.readline()
                if not line:
                    break
                ev = json.loads(line)
                obj = ev.get("object", {})
                if ev.get("type") == "ERROR":
                    raise BenchError(f"watch pods: {obj}")
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                if ev.get("type") not in ("ADDED", "MODIFIED"):
                    continue
                name = obj["metadata"]["name"]
                node = obj.get("spec", {}).get("nodeName")
                with out.lock:
                    if node and name not in out.bound:
                        out.bound[name] = (node, time.monotonic())
                        out.bind_seq.append(name)
                        out.unsched.pop(name, None)
                        out.lock.notify_all()
                        continue
                    for c in obj.get("status", {}).get("conditions", []):
                        if c.get("type") == "PodScheduled" and c.get("status") == "False" and not node:
                            if c.get("reason") == "Unschedulable":
                                if name not in out.unsched:
                                    out.unsched[name] = time.monotonic()
                                    to_delete.put(name)
                                    out.lock.notify_all()
                            else:
                                out.errors[name] = c.get("message", "")[:300]
        except (OSError, http.client.HTTPException, ValueError):
            pass  # the watch is opened again from the last resourceVersion
        except BenchError as e:
            dead.append(str(e))
            return
        finally:
            conn.close()


def deleter(api, to_delete, stop):
    while not (stop.is_set() and to_delete.empty()):
        try:
            name = to_delete.get(timeout=0.5)
        except queue.Empty:
            continue
        api.json("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}", {"gracePeriodSeconds": 0}, ok=(200, 202, 404))


def delete_all_pods(api, stall=300, timeout=3600, ns=NS):
    """Every pod of the namespace NS deleted (grace 0). A collection of 8,000 pods can take the API
    server longer than its request timeout on a loaded machine (504): asked again until none is left.
    Bounded by progress: fails when the count left has not fallen for STALL seconds (or after
    TIMEOUT in all); a fixed 600 s was too short for 8,883 pods at load average 20-30."""
    slow = Api(api.cdir, api.port, timeout=180)
    last = {"left": None, "t": time.monotonic()}

    def gone():
        try:
            _, l = slow.json("GET", f"/api/v1/namespaces/{ns}/pods?limit=1")
            if not l["items"]:
                return True
            md = l["metadata"]
            left = len(l["items"]) + int(md.get("remainingItemCount") or 0)
            if md.get("continue") and "remainingItemCount" not in md:
                pass  # a count the server did not give: only TIMEOUT bounds the wait
            elif last["left"] is None or left < last["left"]:
                last.update(left=left, t=time.monotonic())
            elif time.monotonic() - last["t"] > stall:
                raise BenchError(f"deleting the replay's pods: {left} left, none gone in {stall} s")
            slow.json("DELETE", f"/api/v1/namespaces/{ns}/pods", {"gracePeriodSeconds": 0}, ok=(200, 202, 504))
        except (OSError, http.client.HTTPException) as e:  # the server closed a request it took too long on
            return E2EError(f"delete the pods: {e}")
        return E2EError(f"{last['left']} pods left")
    wait(gone, timeout, "the replay's pods to be gone", 1)


def pack(nodes, pods_by_name, events, outcomes):
    """Each node's bound pods on its GPUs in bind order; the set of overcommitted pod names."""
    free = {n["sn"]: [1000] * int(n["gpu"]) for n in nodes}
    over = set()
    for name in outcomes.bind_seq:
        p = pods_by_name[name]
        g = free[outcomes.bound[name][0]]
        if is_share(p):
            m = int(p["gpu_milli"])
            fit = [i for i in range(len(g)) if g[i] >= m]
            if fit:
                i = min(fit, key=lambda i: (g[i], i))
                g[i] -= m
            else:
                over.add(name)
        elif pod_gpu_milli(p):
            k = int(p["num_gpu"])
            whole = [i for i in range(len(g)) if g[i] == 1000]
            if len(whole) >= k:
                for i in whole[:k]:
                    g[i] = 0
            else:
                over.add(name)
    return over


def curve(events, pods_by_name, total_milli, taken):
    """replay's discretisation: per whole % of arrived GPU request, the mean over the events in
    that bucket of the allocation ratio after the event (round(x, 2), half-even, as replay)."""
    sums, cnt, arrived, alloc = {}, {}, 0, 0
    for e in events:
        p = pods_by_name[e["name"]]
        g = pod_gpu_milli(p)
        arrived += g
        if e["name"] in taken:
            alloc += g
        b = round(arrived / (total_milli / 1000.0) / 10.0)
        sums[b] = sums.get(b, 0.0) + round(alloc / (total_milli / 1000.0) / 10.0, 2)
        cnt[b] = cnt.get(b, 0) + 1
    return {b: round(sums[b] / cnt[b], 2) for b in sums}


def sched_config(cdir, run, outdir, ext_port=None, shim_port=None):
    """The KubeSchedulerConfiguration of a run, from bench/kwok/sched-*.yaml with the cluster's paths."""
    src = os.path.join(HERE, "sched-extender.yaml" if run in POLICY else f"sched-{run}.yaml")
    with open(src) as f:
        text = f.read()
    text = text.replace("@KUBECONFIG@", os.path.join(cdir, "scheduler.kubeconfig"))
    text = text.replace("@EXTENDER@", f"http://127.0.0.1:{ext_port}/gpuslice")
    text = text.replace("@SHIM@", f"http://127.0.0.1:{shim_port}/gpuslice")
    out = os.path.join(outdir, f"sched-{run}.yaml")
    with open(out, "w") as f:
        f.write(text)
    return out


def restart_scheduler(cl, conf=None):
    """The cluster's kube-scheduler restarted with the configuration CONF (None: its own)."""
    env = dict(os.environ, PATH=cl.path, GS_E2E_PORT_BASE=str(cl.base))
    env.pop("GS_E2E_SCHEDULER_CONFIG", None)
    if conf:
        env["GS_E2E_SCHEDULER_CONFIG"] = conf
    r = subprocess.run(["bash", CLUSTER_SH, "restart-scheduler", cl.dir], capture_output=True, text=True,
                       timeout=120, env=env)
    if r.returncode != 0:
        raise BenchError(f"cluster.sh restart-scheduler: exit {r.returncode}\n{r.stderr[-3000:]}")


def start_extender(cl, gpuslice, args, name="kwok-extender"):
    """`gpuslice extender ARGS --listen 127.0.0.1:0 --insecure-loopback-http`: (its Proc, its port)."""
    ext = Proc(cl.dir, name, [gpuslice, "extender", *args, "--listen", "127.0.0.1:0", "--insecure-loopback-http"])
    m = wait(lambda: re.search(r"\(port (\d+)\)", ext.tail()) or (not ext.alive() and "dead"),
             30, "the extender to listen")
    if m == "dead":
        raise BenchError(f"the extender exited:\n{ext.tail()}")
    return ext, int(m.group(1))


def extender_nodes(ext, port):
    """The extender's gpuslice_extender_nodes (its /metrics); fails when it has exited."""
    if not ext.alive():
        raise BenchError(f"the extender exited:\n{ext.tail()}")
    t = scrape(lambda: http.client.HTTPConnection("127.0.0.1", port, timeout=10))
    n = re.search(r"^gpuslice_extender_nodes (\d+)$", t, re.M)
    return int(n.group(1)) if n else 0


def one_run(a, cl, workload, run, events, pods_by_name, nodes, total_milli, figs):
    api = Api(cl.dir, cl.api_port)
    delete_all_pods(api)
    ext = shim = None
    try:
        if run in POLICY:
            api_src = a.ext_source == "api"
            src = ["--kubeconfig", os.path.join(cl.dir, "admin.kubeconfig")] if api_src else ["--snapshot", a.nodes_csv]
            args = [*src, "--policy", POLICY[run]]
            if run == "fgd":
                args += ["--workload", a.wl_files[workload]]
            ext, ext_port = start_extender(cl, a.gpuslice, args)
            if api_src:  # its own bind writes the Binding; GPU pods are unresolvable until it has the nodes
                wait(lambda: extender_nodes(ext, ext_port) >= len(nodes), 300,
                     "the extender to list the nodes from the API server", 1)
                conf = sched_config(cl.dir, run, a.out, ext_port, ext_port)
            else:
                shim = BindShim(cl.dir, cl.api_port, ext_port)
                conf = sched_config(cl.dir, run, a.out, ext_port, shim.port)
        else:
            conf = sched_config(cl.dir, run, a.out)
        restart_scheduler(cl, conf)
        sched_conn = lambda: Api(cl.dir, cl.sched_port, verify=False).connect(10)  # noqa: E731
        ext_conn = (lambda: http.client.HTTPConnection("127.0.0.1", ext_port, timeout=10)) if ext else None
        # the scheduler has synced its informers once it is healthy; give it the nodes' view
        time.sleep(2)
        s_before = scrape(sched_conn)
        e_before = scrape(ext_conn) if ext else ""

        out, stop, to_delete, dead = Outcomes(), threading.Event(), queue.Queue(), []
        _, l = api.json("GET", f"/api/v1/namespaces/{NS}/pods?limit=1")
        threads = [threading.Thread(target=watch_pods, daemon=True,
                                    args=(Api(cl.dir, cl.api_port), out, stop, l["metadata"]["resourceVersion"],
                                          to_delete, dead)),
                   threading.Thread(target=deleter, daemon=True, args=(Api(cl.dir, cl.api_port), to_delete, stop))]
        for t in threads:
            t.start()
        t0 = time.monotonic()
        depth_sum, depth_n, last_progress, last_done = 0, 0, t0, 0
        names = []
        for k, e in enumerate(events):
            name = f"r{k:05d}-{e['pod']}"
            e["name"] = name
            names.append(name)
            pods_by_name[name] = pods_by_name[e["pod"]]
            with out.lock:
                while k - out.done() >= a.window:
                    out.lock.wait(1.0)
                    if out.done() != last_done:
                        last_done, last_progress = out.done(), time.monotonic()
                    elif time.monotonic() - last_progress > a.stall:
                        raise BenchError(f"no pod outcome for {a.stall} s ({out.done()} of {k} created); "
                                         f"errors: {list(out.errors.items())[:3]}")
                    if dead:
                        raise BenchError(dead[0])
                depth_sum += k - out.done()
                depth_n += 1
            api.json("POST", f"/api/v1/namespaces/{NS}/pods", pod_object(name, k, pods_by_name[e["pod"]], cl.image))
            if k and k % 1000 == 0:
                log(f"  {workload}/{run}: {k} pods created, {out.done()} with an outcome "
                    f"({len(out.unsched)} unschedulable), {time.monotonic() - t0:.0f} s")
        t_created = time.monotonic()
        with out.lock:
            while out.done() < len(events):
                out.lock.wait(1.0)
                if out.done() != last_done:
                    last_done, last_progress = out.done(), time.monotonic()
                elif time.monotonic() - last_progress > a.stall:
                    missing = [n for n in names if n not in out.bound and n not in out.unsched][:5]
                    raise BenchError(f"no pod outcome for {a.stall} s ({out.done()} of {len(events)}); "
                                     f"waiting on {missing}; errors: {list(out.errors.items())[:3]}")
                if dead:
                    raise BenchError(dead[0])
        t_end = max([t for _, t in out.bound.values()] + list(out.unsched.values()))
        stop.set()
        for t in threads[1:]:
            t.join(60)
        s_after = scrape(sched_conn)
        e_after = scrape(ext_conn) if ext else ""
    finally:
        if shim:
            shim.stop()
        if ext:
            ext.stop()

    over = pack(nodes, pods_by_name, events, out)
    bound = set(out.bound)
    sched_c = curve(events, pods_by_name, total_milli, bound)
    phys_c = curve(events, pods_by_name, total_milli, bound - over)
    with open(os.path.join(a.out, f"outcome-{workload}-{run}.csv"), "w") as f:
        f.write("seq,pod,node,overcommitted\n")  # node empty: unschedulable
        for k, e in enumerate(events):
            f.write(f"{k},{e['pod']},{out.bound.get(e['name'], ('',))[0]},{int(e['name'] in over)}\n")
    with open(os.path.join(a.out, f"curve-{workload}-{run}.csv"), "w") as f:
        f.write("arrived_pct,alloc_pct,phys_alloc_pct\n")
        for b in sorted(sched_c):
            f.write(f"{b},{sched_c[b]:.2f},{phys_c[b]:.2f}\n")
    res = {
        "workload": workload, "run": run, "pods": len(events), "bound": len(bound),
        "unschedulable": len(out.unsched), "overcommitted": len(over),
        "overcommitted_gpu_pods_share": sum(1 for n in over if is_share(pods_by_name[n])),
        "alloc_at_100": sched_c.get(100), "phys_alloc_at_100": phys_c.get(100),
        "create_s": round(t_created - t0, 1), "wall_s": round(t_end - t0, 1),
        "pods_per_s": round(len(events) / (t_end - t0), 1), "mean_queue": round(depth_sum / max(1, depth_n), 1),
        "sched_errors": len(out.errors),
    }
    h = hist_diff(histogram(s_before, "scheduler_scheduling_attempt_duration_seconds"),
                  histogram(s_after, "scheduler_scheduling_attempt_duration_seconds"))
    res["sched_attempts"] = h["count"]
    res["sched_attempt_mean_ms"] = round(1000 * h["sum"] / h["count"], 2) if h["count"] else None
    res["sched_attempt_p99_le_ms"] = (lambda v: v if v is None else round(1000 * v, 2))(quantile_bound(h, 0.99))
    if ext:
        for verb in ("filter", "prioritize", "bind"):
            eh = hist_diff(histogram(e_before, "gpuslice_extender_decision_seconds", {"verb": verb}),
                           histogram(e_after, "gpuslice_extender_decision_seconds", {"verb": verb}))
            res[f"ext_{verb}_n"] = eh["count"]
            res[f"ext_{verb}_mean_us"] = round(1e6 * eh["sum"] / eh["count"], 1) if eh["count"] else None
            q = quantile_bound(eh, 0.99)
            res[f"ext_{verb}_p99_le_us"] = None if q is None else (round(1e6 * q) if q != math.inf else "inf")
        res["ext_source"] = a.ext_source
        res["bind_shim_errors"] = len(shim.errors) if shim else 0
        res["replay_alloc_at_100"] = figs[POLICY[run]].get("alloc_at_100")
        rn = figs[POLICY[run]]["nodes"]
        res["same_node_as_replay"] = sum(1 for k, e in enumerate(events)
                                         if (out.bound.get(e["name"], ("",))[0] or "") == rn[k])
        res["replay_failed_to_100"] = sum(1 for k in range(len(events)) if not rn[k])
    return res


# ---------------------------------------------------------------------------- the cluster

class ClusterInfo:
    def __init__(self, cdir):
        self.dir = cdir
        env = read_env(os.path.join(cdir, "env"))
        self.path = env["PATH"].replace("$PATH", os.environ.get("PATH", ""))
        base = self.base = int(env["GS_E2E_PORT_BASE"])
        self.api_port, self.sched_port = base + 443, base + 259
        self.image = env.get("GS_E2E_TEST_IMAGE", "gpuslice.local/busybox:e2e")
        self.real_node = env.get("GS_E2E_NODE", "gs-e2e-node")


def kwok_binary():
    """kwok from tests/e2e/build.sh (cached by version; built there if it is not)."""
    r = subprocess.run(["bash", BUILD_SH, "kwok"], capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise BenchError(f"tests/e2e/build.sh kwok: exit {r.returncode}\n{r.stderr[-3000:]}")
    return os.path.join(r.stdout.strip().splitlines()[-1], "kwok")


def cluster_dir(tag):
    """(own, DIR, PORT_BASE): GS_E2E_DIR, a cluster that is up, or the script's own cluster's
    directory /tmp/gse2e.TAG-PORTBASE (GS_E2E_PORT_BASE, default 17800), refused when an API server
    answers on that port base already (another run's: its pods and its `down` would be shared)."""
    base = os.environ.get("GS_E2E_PORT_BASE", "17800")
    if os.environ.get("GS_E2E_DIR"):
        return False, os.environ["GS_E2E_DIR"], base
    cdir = f"/tmp/gse2e.{tag}-{base}"
    try:
        socket.create_connection(("127.0.0.1", int(base) + 443), timeout=2).close()
        busy = True
    except OSError:
        busy = False
    if busy:
        raise BenchError(f"an API server answers on port {int(base) + 443} already (another run on "
                         f"GS_E2E_PORT_BASE={base}?): another port base, or GS_E2E_DIR={cdir} to use it")
    return True, cdir, base


def cluster_up(cdir, base):
    env = dict(os.environ, GS_E2E_PORT_BASE=base, GS_E2E_CONTROLLER_MANAGER_ARGS=GRACE)
    t0 = time.monotonic()
    r = subprocess.run(["bash", CLUSTER_SH, "up", cdir], capture_output=True, text=True, timeout=900, env=env)
    if r.returncode != 0:
        raise BenchError(f"cluster.sh up {cdir}: exit {r.returncode}\n{r.stderr[-4000:]}")
    log(f"cluster up in {cdir} in {time.monotonic() - t0:.0f} s")


def cluster_down(cdir, ok):
    """cluster.sh down; the directory removed after a run that went well (kept with GS_E2E_KEEP=1)."""
    d = subprocess.run(["bash", CLUSTER_SH, "down", cdir], capture_output=True, text=True, timeout=300)
    log(d.stderr.strip().splitlines()[-1] if d.stderr.strip() else f"cluster.sh down: exit {d.returncode}")
    if ok and d.returncode == 0 and not os.environ.get("GS_E2E_KEEP"):
        shutil.rmtree(cdir, ignore_errors=True)


def start_kwok(cdir, kwok_bin, selector, lease_seconds, pod_stages=False, name="kwok"):
    """kwok keeping the Nodes labelled SELECTOR=true alive (bench/kwok's node Stages)."""
    stages = [os.path.join(HERE, "stages-node.yaml")] + \
        ([os.path.join(HERE, "stage-pod-ready.yaml")] if pod_stages else [])
    return Proc(cdir, name, [kwok_bin, "--kubeconfig", os.path.join(cdir, "admin.kubeconfig"),
                             "--manage-nodes-with-label-selector", f"{selector}=true",
                             "--node-lease-duration-seconds", str(lease_seconds), "-v", "WARN",
                             "--config", ",".join(stages)])


def create_nodes(api, nodes, timeout):
    _, have = api.json("GET", f"/api/v1/nodes?labelSelector={SEL}%3Dtrue")
    known = {n["metadata"]["name"] for n in have["items"]}
    t0 = time.monotonic()
    for n in nodes:
        if n["sn"] not in known:
            api.json("POST", "/api/v1/nodes", node_object(n))
    log(f"{len(nodes) - len(known)} nodes created ({len(known)} there already) in {time.monotonic() - t0:.0f} s")

    def ready():
        _, l = api.json("GET", f"/api/v1/nodes?labelSelector={SEL}%3Dtrue")
        ok = sum(1 for it in l["items"] for c in it.get("status", {}).get("conditions", [])
                 if c["type"] == "Ready" and c["status"] == "True")
        alloc_ok = all(it["status"].get("allocatable", {}).get(MILLI) for it in l["items"])
        return ok == len(nodes) and alloc_ok
    wait(ready, timeout, f"{len(nodes)} kwok nodes Ready", 2)
    log(f"{len(nodes)} nodes Ready in {time.monotonic() - t0:.0f} s")


def plot(outdir, workload, runs):
    """allocation ratio vs arrived workload, one line per run (scheduled and physical)."""
    png = os.path.join(outdir, f"curves-{workload}.png")
    data = {}
    for r in runs:
        rows = read_csv(os.path.join(outdir, f"curve-{workload}-{r}.csv"))
        data[r] = [(int(x["arrived_pct"]), float(x["alloc_pct"]), float(x["phys_alloc_pct"])) for x in rows]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        plt = None
    if not plt and not os.environ.get("KWOK_REPLAY_PLOT_CHILD"):
        # matplotlib in a venv of the output directory (made once), and the plot drawn from there
        venv = os.path.join(outdir, "venv")
        py = os.path.join(venv, "bin", "python3")
        try:
            if not os.path.exists(py):
                subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=300)
                subprocess.run([py, "-m", "pip", "install", "-q", "matplotlib"], check=True, timeout=900)
            subprocess.run([py, os.path.abspath(__file__), "--plot", outdir, workload, ",".join(runs)], check=True,
                           timeout=300, env=dict(os.environ, KWOK_REPLAY_PLOT_CHILD="1"))
            return png
        except (subprocess.SubprocessError, OSError) as e:
            log(f"no matplotlib in a venv ({e}); trying gnuplot")
    if plt:
        fig, ax = plt.subplots(figsize=(10, 6))
        ax.plot([0, 100], [0, 100], ":", color="#999999", label="ideal")
        for pol in ("fgd", "gpuslice"):
            f = os.path.join(outdir, f"replay-{workload}-{pol}.csv")
            if os.path.exists(f):
                pts = [(int(x["arrived_pct"]), float(x["gpu_alloc_pct"])) for x in read_csv(f)
                       if x["gpu_alloc_pct"] and int(x["arrived_pct"]) <= 100]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], ":", lw=2, label=f"gpuslice replay --policy {pol}")
        for r, pts in data.items():
            ax.plot([p[0] for p in pts], [p[2] for p in pts], label=f"{r} (physical)")
            if any(p[1] != p[2] for p in pts):
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "--", label=f"{r} (as bound)")
        ax.set_xlim(50, 100)
        ax.set_ylim(50, 100)
        ax.set_xlabel("arrived workload (% of cluster GPU capacity)")
        ax.set_ylabel("GPU allocation ratio (%)")
        ax.set_title(f"kube-scheduler on 1,213 kwok nodes, Alibaba {workload} trace")
        ax.grid(True)
        ax.legend(loc="upper left")
        fig.savefig(png, dpi=100)
        return png
    if shutil.which("gnuplot"):
        lines = ", ".join(f'"{outdir}/curve-{workload}-{r}.csv" using 1:3 with lines lw 2 title "{r}"' for r in runs)
        script = (f'set terminal pngcairo size 1000,600\nset output "{png}"\nset datafile separator ","\n'
                  f'set key left top\nset grid\nset xrange [50:100]\nset yrange [50:100]\n'
                  f'set xlabel "arrived workload (%)"\nset ylabel "GPU allocation ratio (%)"\n'
                  f'plot x title "ideal" dt 2, {lines}\n')
        subprocess.run(["gnuplot"], input=script, text=True, check=True, timeout=60)
        return png
    return None


def table(results):
    hdr = ("| workload | run | pods | unschedulable | overcommitted | alloc at 100 % (bound) | physical | "
           "replay | pods/s | mean queue | sched. attempt mean | extender filter mean / p99 <= | prioritize | bind |")
    rows = [hdr, "|" + "---|" * (hdr.count("|") - 1)]
    for r in results:
        def ext(v):
            n, p = r.get(f"ext_{v}_mean_us"), r.get(f"ext_{v}_p99_le_us")
            return "-" if n is None else f"{n} us / {p} us"
        rows.append(f"| {r['workload']} | {r['run']} | {r['pods']} | {r['unschedulable']} | {r['overcommitted']} | "
                    f"{r['alloc_at_100']} | {r['phys_alloc_at_100']} | {r.get('replay_alloc_at_100', '-')} | "
                    f"{r['pods_per_s']} | {r['mean_queue']} | {r['sched_attempt_mean_ms']} ms | {ext('filter')} | "
                    f"{ext('prioritize')} | {ext('bind')} |")
    return "\n".join(rows)


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--plot":  # OUT WORKLOAD RUNS: the curves' PNG only
        print(plot(sys.argv[2], sys.argv[3], sys.argv[4].split(",")))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build-kwok")
    ap.add_argument("--trace-dir", default=os.path.join(ROOT, "..", "shared", "traces", "alibaba-gpu-v2023"))
    ap.add_argument("--variants-dir", help="where bench/make_variants.py wrote variants (gpuspec33 ...)")
    ap.add_argument("--workloads", default="default")
    ap.add_argument("--runs", default=",".join(RUNS), help="RUN (every workload) or WORKLOAD/RUN, comma-separated")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--max-pct", type=int, default=100, help="replay the events up to this arrived %% bucket")
    ap.add_argument("--window", type=int, default=200, help="pods created without an outcome yet, at most")
    ap.add_argument("--stall", type=float, default=180, help="seconds without any pod outcome: fail")
    ap.add_argument("--pod-stages", action="store_true", help="kwok's pod-ready Stage too (bound pods Running)")
    ap.add_argument("--ext-source", choices=("api", "snapshot"), default="snapshot",
                    help="the extender's nodes and pods: the API server (--kubeconfig; its own bind writes the "
                         "Binding) or the trace's node list (--snapshot, with this script's bind shim)")
    ap.add_argument("--lease-seconds", type=int, default=None,
                    help="kwok's node lease (renewed every quarter of it); default 1200 in the script's own "
                         "cluster (its controller-manager's --node-monitor-grace-period is 3600s), else 120")
    ap.add_argument("--out", default=None)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    a.runs = a.runs.split(",")
    for r in a.runs:  # RUN for every workload, or WORKLOAD/RUN for that one
        if r.split("/")[-1] not in RUNS or r.count("/") > 1:
            ap.error(f"--runs: {r!r}: expected some of {', '.join(RUNS)}, each alone or as WORKLOAD/RUN")
    a.gpuslice = os.path.abspath(os.path.join(a.build, "gpuslice"))
    a.nodes_csv = os.path.abspath(os.path.join(a.trace_dir, "openb_node_list_gpu_node.csv"))
    a.out = os.path.abspath(a.out or os.path.join(a.build, "kwok-replay"))
    os.makedirs(a.out, exist_ok=True)
    if not os.access(a.gpuslice, os.X_OK):
        raise BenchError(f"{a.gpuslice}: not built (meson setup {a.build} && ninja -C {a.build})")
    wl_files = {}
    for w in a.workloads.split(","):
        cands = [os.path.join(d, f"openb_pod_list_{w}.csv") for d in (a.trace_dir, a.variants_dir) if d]
        f = next((c for c in cands if os.path.exists(c)), None)
        if not f:
            raise BenchError(f"--workloads {w}: no openb_pod_list_{w}.csv in {' or '.join(cands)}")
        wl_files[w] = f
    a.wl_files = wl_files

    kwok_bin = kwok_binary()
    own, cdir, base = cluster_dir("kwok")
    if a.lease_seconds is None:
        a.lease_seconds = 1200 if own else 120
    ok = False
    kwok = None
    results = []
    try:
        if own:
            cluster_up(cdir, base)
        cl = ClusterInfo(cdir)
        api = Api(cdir, cl.api_port)
        if own:
            api.json("PATCH", f"/api/v1/nodes/{cl.real_node}", {"spec": {"unschedulable": True}},
                     ctype="application/merge-patch+json")
        api.json("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
                 ok=(201, 409))
        kwok = start_kwok(cdir, kwok_bin, SEL, a.lease_seconds, a.pod_stages)
        nodes = read_csv(a.nodes_csv)
        total_milli = 1000 * sum(int(n["gpu"]) for n in nodes)
        create_nodes(api, nodes, 600)
        if not kwok.alive():
            raise BenchError(f"kwok exited:\n{kwok.tail()}")
        for w, f in wl_files.items():
            order, figs = replay_order(a.gpuslice, a.nodes_csv, f, a.seed, a.out, w)
            events = [e for e in order if int(e["bucket"]) <= a.max_pct]
            pods_by_name = {p["name"]: p for p in read_csv(f)}
            log(f"{w}: {len(events)} pods up to {a.max_pct} % arrived (of {len(order)} events); replay seed {a.seed}: "
                f"fgd {figs['fgd'].get('alloc_at_100')}, gpuslice {figs['gpuslice'].get('alloc_at_100')}")
            wruns = [r.split("/")[-1] for r in a.runs if "/" not in r or r.split("/")[0] == w]
            for run in wruns:
                t0 = time.monotonic()
                res = one_run(a, cl, w, run, [dict(e) for e in events], pods_by_name, nodes, total_milli, figs)
                res["run_s"] = round(time.monotonic() - t0, 1)
                results.append(res)
                log(f"{w}/{run}: {json.dumps(res)}")
                if not kwok.alive():
                    raise BenchError(f"kwok exited:\n{kwok.tail()}")
                if a.json:
                    with open(a.json, "w") as jf:
                        json.dump({"seed": a.seed, "max_pct": a.max_pct, "window": a.window, "ext_source": a.ext_source,
                                   "pod_stages": a.pod_stages, "results": results}, jf, indent=1)
            if a.max_pct >= 100:
                png = plot(a.out, w, wruns)
                log(f"plot: {png or 'none (neither matplotlib nor gnuplot); the CSVs are in ' + a.out}")
        delete_all_pods(api)
        print(table(results))
        ok = True
    finally:
        if kwok:
            kwok.stop()
        if own:
            cluster_down(cdir, ok)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (BenchError, E2EError, KubeHttpError) as e:
        print(f"kwok_replay: {e}", file=sys.stderr)
        sys.exit(1)
