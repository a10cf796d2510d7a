"""gpuslice's DRA driver measured in the e2e cluster (tests/e2e: real kube-apiserver, scheduler,
kubelet, containerd), on the 8-GPU simulated node examples/dra/h100x8.yaml with its policy
(examples/dra/h100x8-policy.yaml), whose gpuslice.dra.gpus gives GPUs 2-7 to DRA (2, 3 whole;
4, 5 time-sliced; 6, 7 MIG on demand) and GPUs 0, 1 to the device plugin, one agent serving both:

  - prepare latency per claim kind (whole GPU, 10Gi of a shared GPU, a 1g.10gb MIG instance made
    on demand), from the kubelet's own histograms, scraped from its port (base + 250) with the
    admin client certificate (bench/kubehttp.py): pods with one claim each, one after
    another, so the change of _sum over one pod is that pod's one call as the kubelet timed it:
    dra_grpc_operations_duration_seconds{method_name=".../NodePrepareResources"} (the gRPC call
    to the driver) and dra_operations_duration_seconds{operation_name="PrepareResources"} (the
    kubelet's whole handling of the pod's claims); and from the driver's side, NodePrepareResources
    called on the agent's socket as the kubelet calls it (tests/dra/dra_client.py), timed round
    trip, for claims whose allocation the bench writes into their status as the scheduler would
    (the claim read from the API server is in it), each unprepared after;
  - the agent's resident memory (VmRSS, VmHWM, Pss) with both the device plugin and DRA, once its
    slices are published and again after the pods, beside the same agent without --dra;
  - Xid 79 on a DRA GPU (`gpuslice sim xid 2 79`): the time until its device leaves the
    published ResourceSlices, if it does (bounded wait), and back;
  - (phase health) Xid 79 on the GPU of a running pod's whole-GPU claim: the time until the
    kubelet shows the device Unhealthy in the pod's status (containerStatuses[].
    allocatedResourcesStatus, fed by the agent's DRAResourceHealth stream; test_dra_health.py's
    reader), polled every 50 ms from before the `sim xid` command, and until it is Healthy again
    after the quiet period (--quiet, added to the policy's gpuslice.health).

Not a test: nothing is asserted on the timings, but every wait is bounded and it fails loudly
(exit 1) when a pod never runs, a call fails or the kubelet's histogram does not count one call.

usage (root; from the repository root, after `meson setup build-bench && ninja -C build-bench`):
  GS_E2E_PORT_BASE=18500 /usr/bin/python3 bench/dra_bench.py --build build-bench [--pods 10] [--calls 50]
      [--phases prepare,health] [--xids 3] [--quiet 10] [--json results.json]
It brings up a cluster of its own (taken down at the end) unless GS_E2E_DIR names one that is up."""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--build", default="build")
ap.add_argument("--pods", type=int, default=10, help="pods one after another per claim kind")
ap.add_argument("--calls", type=int, default=50, help="direct NodePrepareResources calls per claim kind")
ap.add_argument("--xid-wait", type=float, default=30, help="seconds to wait for a slice change after an Xid")
ap.add_argument("--phases", default="prepare,health", help="prepare (with RSS and the slices' Xid), health")
ap.add_argument("--xids", type=int, default=3, help="Xid trials of the health phase")
ap.add_argument("--quiet", type=int, default=10, help="gpuslice.health.recoveryQuietPeriod, seconds")
ap.add_argument("--json")
ARGS = ap.parse_args()
build = os.path.abspath(ARGS.build)
os.environ.setdefault("GS_GUARD_LIB", os.path.join(build, "guard", "libgpuslice-guard.so"))
for p in ("bench", "tests/e2e", "tests/nvmlclients"):
    sys.path.insert(0, os.path.join(ROOT, p))
_argv, sys.argv = sys.argv, [sys.argv[0], "--build", build]  # e2e_plugins parses its own arguments at import
import e2e_plugins  # noqa: E402
import kubehttp  # noqa: E402
sys.argv = _argv
from dra_util import (DRIVER, apply_classes, checkpoint, claim_pod_yaml, claim_yaml, dra_args,  # noqa: E402
                      kubelet_client, slice_devices, slices)
from e2e import CLUSTER_SH, NS, Agent, Cluster, E2EError, wait  # noqa: E402
from test_dra_health import _health  # noqa: E402

NODE = os.path.join(ROOT, "examples", "dra", "h100x8.yaml")
with open(os.path.join(ROOT, "examples", "dra", "h100x8-policy.yaml")) as _f:
    POLICY = _f.read() + f"  health:\n    recoveryQuietPeriod: {ARGS.quiet}s\n"
KINDS = {  # kind: (class, capacity requests, CEL selector)
    "whole": (DRIVER, None, None),
    "shared": (f"shared.{DRIVER}", {"memory": "10Gi"}, None),
    "mig": (f"mig.{DRIVER}", None, f'device.attributes["{DRIVER}"].profile == "1g.10gb"'),
}
GRPC = "dra_grpc_operations_duration_seconds"
OPS = "dra_operations_duration_seconds"


def log(msg):
    print(msg, flush=True)


def kubelet_sums(kubelet):
    """{metric: (sum, count)} of the kubelet's DRA prepare histograms (successful calls only)."""
    _, text = kubelet.request("GET", "/metrics")
    keys = {GRPC: ('method_name="/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"',
                   'grpc_status_code="OK"'),
            OPS: ('operation_name="PrepareResources"', 'is_error="false"')}
    out = {}
    for line in text.decode().splitlines():
        for metric, want in keys.items():
            part = line[len(metric) + 1:].split("{", 1)[0] if line.startswith(metric + "_") else ""
            if part in ("sum", "count") and all(k in line for k in want):
                s, c = out.get(metric, (0.0, 0))
                v = float(line.rsplit(" ", 1)[1])
                out[metric] = (s + v, c) if part == "sum" else (s, c + int(v))
    return out


def claim_obj(name, kind):
    cls, cap, sel = KINDS[kind]
    c = yaml.safe_load(claim_yaml(name, cls, sel))
    if cap:
        c["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": cap}
    return c


def apply(cluster, *objs):
    cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objs))


def uid_of(cluster, name):
    return cluster.get("resourceclaim", "-n", NS, name)["metadata"]["uid"]


def pods_phase(cluster, kubelet, kind, n):
    """n pods with one claim of kind each, one after another: the kubelet's times, seconds."""
    grpc_s, ops_s, start_s = [], [], []
    for i in range(n):
        name = f"dra-bench-{kind}-{i}"
        before = kubelet_sums(kubelet)
        pod = yaml.safe_load(claim_pod_yaml(cluster, name, name, "sleep 3600"))
        t0 = time.monotonic()
        apply(cluster, claim_obj(name, kind), pod)
        cluster.wait_phase(name, ("Running",), timeout=180)
        start_s.append(time.monotonic() - t0)
        uid = uid_of(cluster, name)
        after = wait(lambda: (lambda a: a if a.get(GRPC, (0, 0))[1] > before.get(GRPC, (0, 0))[1] and
                              a.get(OPS, (0, 0))[1] > before.get(OPS, (0, 0))[1] else None)(kubelet_sums(kubelet)),
                     30, "the kubelet's histograms to count the prepare")
        for metric, out in ((GRPC, grpc_s), (OPS, ops_s)):
            ds = after[metric][0] - before.get(metric, (0.0, 0))[0]
            dc = after[metric][1] - before.get(metric, (0.0, 0))[1]
            if dc != 1:
                raise E2EError(f"{metric}: {dc} calls counted over pod {name}, not 1")
            out.append(ds)
        cluster.kubectl("delete", "pod", "-n", NS, name, "--grace-period=1")
        wait(lambda: uid not in checkpoint(cluster), 120, f"claim {name} unprepared")
        cluster.kubectl("delete", "resourceclaim", "-n", NS, name)
    return {"kubelet_grpc": grpc_s, "kubelet_op": ops_s, "pod_running": start_s}


def free_devices(cluster, kind):
    """The devices of kind in the node's slices (the ones a bench claim may be given)."""
    out = []
    for s in slices(cluster):
        for d in s["spec"].get("devices") or []:
            a = {k: list(v.values())[0] for k, v in d["attributes"].items()}
            if kind == "whole" and a.get("sharing") == "exclusive" and a.get("type") == "gpu":
                out.append(d["name"])
            elif kind == "shared" and a.get("sharing") == "time-slicing":
                out.append(d["name"])
            elif kind == "mig" and a.get("profile") == "1g.10gb" and a.get("migOnDemand"):
                out.append(d["name"])
    return sorted(out)


def direct_phase(cluster, kind, n):
    """n NodePrepareResources calls on the agent's socket (claims allocated by the bench), each
    unprepared after: the driver's round trip, seconds."""
    dra_client, c = kubelet_client(cluster)
    prep, unprep = [], []
    try:
        device = free_devices(cluster, kind)[0]
        for i in range(n):
            name = f"dra-bench-direct-{kind}-{i}"
            apply(cluster, claim_obj(name, kind))
            res = {"request": "gpu", "driver": DRIVER, "pool": cluster.node_name, "device": device}
            if kind == "shared":
                res.update(consumedCapacity={"memory": "10Gi", "compute": "25"}, shareID=str(uuid.uuid4()))
            cluster.kubectl("patch", "resourceclaim", "-n", NS, name, "--subresource=status", "--type=merge",
                            "-p", json.dumps({"status": {"allocation": {"devices": {"results": [res]}}}}))
            uid = uid_of(cluster, name)
            cl = dra_client.claim(NS, name, uid)
            t0 = time.monotonic()
            r = c.prepare([cl])[uid]
            prep.append(time.monotonic() - t0)
            if r.error:
                raise E2EError(f"prepare {name} ({device}): {r.error}")
            t0 = time.monotonic()
            r = c.unprepare([cl])[uid]
            unprep.append(time.monotonic() - t0)
            if r.error:
                raise E2EError(f"unprepare {name}: {r.error}")
            cluster.kubectl("delete", "resourceclaim", "-n", NS, name, "--wait=false")
    finally:
        c.close()
    return {"direct_prepare": prep, "direct_unprepare": unprep, "device": device}


def xid_phase(cluster, a, gpu=2):
    dev = f"gpu-{gpu}"
    t0 = time.monotonic()
    a.sim("sim", "xid", str(gpu), "79")
    sim_s = time.monotonic() - t0
    try:
        wait(lambda: dev not in slice_devices(slices(cluster)), ARGS.xid_wait, f"{dev} out of the slices",
             interval=0.02)
        out_s = time.monotonic() - t0
    except E2EError:
        return {"sim_xid_s": sim_s, "out_of_slices_s": None}
    try:
        wait(lambda: dev in slice_devices(slices(cluster)), 120, f"{dev} back in the slices", interval=0.1)
        back_s = time.monotonic() - t0
    except E2EError:
        back_s = None
    return {"sim_xid_s": sim_s, "out_of_slices_s": out_s, "back_s": back_s}


def health_phase(cluster, a, trials):
    """Xid 79 on the GPU of a running pod's claim -> Unhealthy in the pod's status, and back."""
    name = "dra-bench-health"
    pod = yaml.safe_load(claim_pod_yaml(cluster, name, name, "sleep 3600"))
    apply(cluster, claim_obj(name, "whole"), pod)
    cluster.wait_phase(name, ("Running",), timeout=180)
    device = cluster.get("resourceclaim", "-n", NS, name)["status"]["allocation"]["devices"]["results"][0]["device"]
    gpu = int(device.split("-")[1])
    rid = "gpuslice.io/gpu=" + a.uuids()[gpu]
    wait(lambda: _health(cluster, name, rid)[0] == "Healthy", 120, f"{rid} Healthy in the pod's status")
    out = []
    for i in range(trials):
        time.sleep(random.uniform(0, 2))
        t0 = time.monotonic()
        a.sim("sim", "xid", str(gpu), "79")
        wait(lambda: _health(cluster, name, rid)[0] == "Unhealthy", 120, f"{rid} Unhealthy after Xid 79", 0.05)
        t_out = time.monotonic() - t0
        in_slices = device in slice_devices(slices(cluster))
        wait(lambda: _health(cluster, name, rid)[0] == "Healthy", ARGS.quiet + 120, f"{rid} Healthy again", 0.05)
        out.append({"unhealthy_s": t_out, "healthy_again_s": time.monotonic() - t0, "still_in_slices": in_slices})
        log(f"health trial {i}: Unhealthy after {t_out:.2f} s, Healthy after {out[-1]['healthy_again_s']:.2f} s")
    cluster.kubectl("delete", "pod", "-n", NS, name, "--grace-period=1")
    cluster.kubectl("delete", "resourceclaim", "-n", NS, name, "--wait=false")
    return {"device": device, "trials": out}


def pct(v, p):
    s = sorted(v)
    return s[min(len(s) - 1, max(0, int(round(p / 100 * len(s) + 0.5)) - 1))]


def ms(v):
    return f"{v * 1000:.1f}" if v is not None else "-"


def rss_of(a):
    m = e2e_plugins.memory(a.proc.pid)
    return {k: v / 1024 for k, v in m.items()}  # MiB


def run(cluster):
    kubelet = kubehttp.Client(cluster.dir, cluster.port_base + 250, timeout=30)
    results = {"kinds": {}, "rss": {}}
    phases = ARGS.phases.split(",")
    if "prepare" in phases:
        # the same node and policy without --dra: the device plugin serves every GPU
        a = Agent(cluster, NODE, POLICY, ["--cdi-hook", ""])
        wait(lambda: cluster.nonzero(), 120, "the device plugin's resources in allocatable")
        time.sleep(2)
        results["rss"]["device plugin only"] = rss_of(a)
        a.stop()
    classes = apply_classes(cluster)
    a = Agent(cluster, NODE, POLICY, dra_args(cluster) + ["--cdi-hook", ""])
    try:
        wait(lambda: set(free_devices(cluster, "whole")) == {"gpu-2", "gpu-3"} and
             len(free_devices(cluster, "mig")) == 14, 120, "the agent's slices")
        cluster.wait_allocatable({"nvidia.com/gpu": 2}, timeout=120)
        time.sleep(2)
        if "health" in phases:
            results["health"] = health_phase(cluster, a, ARGS.xids)
        if "prepare" not in phases:
            return results
        results["rss"]["device plugin + DRA, slices published"] = rss_of(a)
        for kind in KINDS:
            log(f"== {kind}: {ARGS.pods} pods")
            r = pods_phase(cluster, kubelet, kind, ARGS.pods)
            log(f"== {kind}: {ARGS.calls} direct calls")
            r.update(direct_phase(cluster, kind, ARGS.calls))
            results["kinds"][kind] = r
            log(f"{kind}: kubelet gRPC p50 {ms(pct(r['kubelet_grpc'], 50))} ms, direct p50 "
                f"{ms(pct(r['direct_prepare'], 50))} ms")
        results["rss"]["device plugin + DRA, after the pods"] = rss_of(a)
        results["xid"] = xid_phase(cluster, a)
    finally:
        for kind in ("pods", "resourceclaims"):
            cluster.kubectl("delete", kind, "-n", NS, "--all", "--grace-period=1", "--wait=true", check=False,
                            timeout=180)
        a.stop()
        cluster.kubectl("delete", "deviceclass", *classes, "--ignore-not-found", check=False)
    return results


def table(results):
    lines = [] if not results.get("kinds") else ["| claim kind | kubelet gRPC NodePrepareResources p50 / p99 (ms) | kubelet PrepareResources p50 / p99 "
             "(ms) | direct call p50 / p99 (ms) | direct unprepare p50 (ms) | pod create -> Running p50 (s) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for kind, r in results.get("kinds", {}).items():
        lines.append(f"| {kind} ({r['device']}) | "
                     f"{ms(pct(r['kubelet_grpc'], 50))} / {ms(pct(r['kubelet_grpc'], 99))} | "
                     f"{ms(pct(r['kubelet_op'], 50))} / {ms(pct(r['kubelet_op'], 99))} | "
                     f"{ms(pct(r['direct_prepare'], 50))} / {ms(pct(r['direct_prepare'], 99))} | "
                     f"{ms(pct(r['direct_unprepare'], 50))} | {statistics.median(r['pod_running']):.2f} |")
    if results.get("rss"):
        lines += ["", "| agent | VmRSS (MiB) | VmHWM (MiB) | Pss (MiB) |", "| --- | --- | --- | --- |"]
    for what, m in results["rss"].items():
        lines.append(f"| {what} | {m['VmRSS']:.1f} | {m['VmHWM']:.1f} | {m['Pss']:.1f} |")
    h = results.get("health")
    if h:
        out = ", ".join(f"{x['unhealthy_s']:.2f}" for x in h["trials"])
        back = ", ".join(f"{x['healthy_again_s']:.2f}" for x in h["trials"])
        kept = [x["still_in_slices"] for x in h["trials"]]
        lines += ["", f"Xid 79 -> {h['device']} Unhealthy in the pod's status: {out} s; Healthy again: {back} s "
                  f"after the Xid; still in the slices while Unhealthy: {kept}"]
    x = results.get("xid")
    if x:
        lines += ["", f"Xid 79 on gpu-2: `sim xid` {ms(x.get('sim_xid_s'))} ms; out of the ResourceSlices "
                  f"{ms(x.get('out_of_slices_s'))} ms; back {ms(x.get('back_s'))} ms after the Xid"]
    return "\n".join(lines)


def main():
    reuse = os.environ.get("GS_E2E_DIR")
    dir = reuse or tempfile.mkdtemp(prefix="gse2e.", dir="/tmp")
    if not reuse:
        p = subprocess.run(["bash", CLUSTER_SH, "up", dir], capture_output=True, text=True, timeout=1500)
        if p.returncode != 0:
            sys.exit(f"cluster.sh up {dir}: exit {p.returncode}\n{p.stderr[-4000:]}")
    cluster = Cluster(dir)
    cluster.kubectl("create", "namespace", NS, check=False)
    wait(lambda: cluster.kubectl("get", "serviceaccount", "default", "-n", NS, check=False).returncode == 0,
         60, f"the default service account of {NS}")
    try:
        results = run(cluster)
    except E2EError as e:
        print(f"dra_bench: {e}", file=sys.stderr)
        sys.exit(1)
    finally:
        if not reuse:
            subprocess.run(["bash", CLUSTER_SH, "down", dir], capture_output=True, timeout=300)
    if ARGS.json:
        with open(ARGS.json, "w") as f:
            json.dump(results, f, indent=1)
    print(table(results))


if __name__ == "__main__":
    main()
