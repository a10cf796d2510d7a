#!/usr/bin/env python3
"""A plan of `gpuslice plan` through the real kube-scheduler: its pods' requests bound by the
extender on kwok nodes shaped as the plan's target.

`gpuslice plan --out DIR` on Alibaba's GenAI trace (../shared/traces/alibaba-genai-v2026) writes
each pod's requests (requests/POD.yaml: `gpuslice.io/gpu-memory` in GiB, and
`gpuslice.io/gpu-compute` where the plan writes one) and the policy fragment (policy.yaml). The
nodes are what gpuslice's agent would publish on a node of --gpus-per-node GPUs of the plan's model
under that policy: `gpuslice --sim NODE.yaml apply --config policy.yaml --labels` gives the labels
(gpuslice.io/gpu-memory.count, .memory, .product, ...), `--json` the extended resources (a device
per unit); kwok v0.8.0 (tests/e2e/build.sh kwok) keeps --nodes such Nodes alive with its own node
Stages (bench/kwok/stages-node.yaml). `gpuslice extender --kubeconfig` (--policy, default
gpuslice) takes the nodes from those labels and the pods from the API server, and kube-scheduler
(bench/kwok/sched-extender.yaml: filter, prioritize and bind by the extender, whose /bind writes
the Binding with the pod's `gpuslice.io/gpu-index`) places the plan's pods, created one at a time
in the plan's order (by its GPU) or, with --order name, by pod key, each annotated with its GPU of
the plan (plan.json's assignments[].gpu) as `gpuslice.io/plan-gpu`, the extender's hint to keep
the plan's groups together (--no-hint: none). Then:

- every pod must be bound, with a GPU index of its node;
- no GPU holds more units than it has (the pods' requests summed per (node, GPU): gpu-memory
  within the GPU's units, gpu-compute within 100);
- the GPUs used (distinct (node, gpu-index)) against the plan's `gpus`, how many of the plan's
  GPUs of two or more pods kept them together (all on one bound GPU), and how many of the plan's
  GPUs hold pods whose shares, counted as one figure per pod (the larger of its memory and compute
  fractions), add up to more than one GPU (the extender fits the two apart, so those GPUs can be
  kept);
- the placement judged by the plan's own checker (tests/plan/check_plan.py, the pods on the GPUs
  they were bound to): the bound GPUs whose pods' summed duty goes over the plan's budget on more
  steps than it tolerates (the extender sees the requests, not the duty series).

usage (root; from the repository root, the build made):
  GS_E2E_PORT_BASE=17900 python3 bench/kwok_plan.py --build build-fast [--gpu H200] [--nodes 18]
      [--plan-args '--tolerance 1'] [--pods N] [--policy gpuslice] [--no-hint] [--out DIR] [--json FILE]
GS_E2E_DIR=DIR uses a cluster that is up (its scheduler's own configuration restored at the end);
otherwise the script brings up its own in /tmp/gse2e.kwokplan-PORTBASE and takes it down at the
end (bench/kwok_replay.py's helpers). Every process it starts is stopped by its pid; every wait is
bounded; exit 1 with the reason when a pod stays unbound or a check fails.

tests/e2e/test_plan_kwok.py runs the same (check_in_cluster) in the e2e cluster."""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kwok_replay as kr  # noqa: E402  (bench/: kwok_replay's cluster, kwok, extender and scheduler helpers)
from kwok_replay import BenchError, ClusterInfo, wait  # noqa: E402

NS = "kwok-plan"
SEL = "gpuslice.io/kwok-plan"
MEM, SM = "gpuslice.io/gpu-memory", "gpuslice.io/gpu-compute"
ANN = "gpuslice.io/gpu-index"
PLAN_GPU = "gpuslice.io/plan-gpu"
TRACE = ("pod_gpu_memory_used_bytes_anon", "pod_gpu_duty_cycle_anon")
CHECK_PLAN = os.path.join(kr.ROOT, "tests", "plan", "check_plan.py")


def log(msg):
    print(f"[kwok-plan {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------- the plan

def trace_dir():
    """Alibaba's GenAI trace beside the checkout (../shared/traces), or under $GS_SHARED_DIR/traces."""
    for base in (os.environ.get("GS_SHARED_DIR"), os.path.join(kr.ROOT, "..", "shared"), os.path.join(kr.ROOT, "shared")):
        if base and os.path.isdir(os.path.join(base, "traces", "alibaba-genai-v2026")):
            return os.path.join(base, "traces", "alibaba-genai-v2026")
    raise BenchError("the trace alibaba-genai-v2026 is not under ../shared/traces of the checkout (nor "
                     "$GS_SHARED_DIR/traces): Alibaba's GenAI serving trace, pod_gpu_memory_used_bytes_anon and "
                     "pod_gpu_duty_cycle_anon")


def trace_csvs(src_dir, outdir):
    """The trace's two CSVs, extracted from their archives into OUTDIR: (memory, duty)."""
    paths = []
    for name in TRACE:
        src = os.path.join(src_dir, name + ".tar.gz")
        if not os.path.exists(src):
            raise BenchError(f"{src}: missing (Alibaba's GenAI trace, alibaba-genai-v2026, belongs in "
                             f"../shared/traces of the checkout)")
        dst = os.path.join(outdir, name + ".csv")
        if not os.path.exists(dst):
            with tarfile.open(src) as t, open(dst + ".tmp", "wb") as out:
                out.write(t.extractfile(t.getmember(name + ".csv")).read())
            os.replace(dst + ".tmp", dst)
        paths.append(dst)
    return paths


def make_plan(gpuslice, mem_csv, duty_csv, gpu, outdir, extra=()):
    """`gpuslice plan --out OUTDIR` (OUTDIR must not exist): (plan.json's document, {pod key:
    limits}, policy.yaml's path). Each pod's file is its assignment's requests_file, else
    requests/POD.yaml by the plan's naming (a key's '/', ':' and '@' written as '_')."""
    cmd = [gpuslice, "plan", "--memory-csv", mem_csv, "--duty-csv", duty_csv, "--missing", "skip", "--gpu", gpu,
           "--out", outdir, *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise BenchError(f"{shlex.join(cmd)}: exit {r.returncode}\n{r.stderr[-2000:]}")
    with open(os.path.join(outdir, "plan.json")) as f:
        doc = json.load(f)
    reqs = {}
    for a in doc["assignments"]:
        fname = a.get("requests_file") or os.path.join(
            "requests", a["pod"].replace("/", "_").replace(":", "_").replace("@", "_") + ".yaml")
        with open(os.path.join(outdir, fname)) as f:
            y = yaml.safe_load(f)
        lim = (y or {}).get("resources", {}).get("limits")
        if not isinstance(lim, dict) or MEM not in lim:
            raise BenchError(f"{outdir}/{fname}: no resources.limits.{MEM}")
        reqs[a["pod"]] = {k: str(v) for k, v in lim.items()}
    return doc, reqs, os.path.join(outdir, "policy.yaml")


def node_shape(gpuslice, model, count, policy, workdir):
    """What the agent publishes on a node of COUNT simulated MODEL GPUs under POLICY: (labels,
    {extended resource: devices}), from `gpuslice --sim apply --labels` and `--json`."""
    node = os.path.join(workdir, "plan-node.yaml")
    with open(node, "w") as f:
        f.write(f"gpus:\n  - model: {model}\n    count: {count}\n")
    base = [gpuslice, "--sim", node, "--sim-state", os.path.join(workdir, "sim-state"), "apply", "--config", policy]
    out = {}
    for what in ("--labels", "--json"):
        r = subprocess.run(base + [what], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise BenchError(f"{shlex.join(base + [what])}: exit {r.returncode}\n{r.stderr[-2000:]}")
        out[what] = r.stdout
    labels = dict(line.split("=", 1) for line in out["--labels"].splitlines() if "=" in line)
    res = {r["name"]: len(r["devices"]) for r in json.loads(out["--json"])["resources"]}
    if not res.get(MEM) or labels.get(MEM + ".count") != str(count):
        raise BenchError(f"{policy} on {count} x {model}: no {MEM} on every GPU ({res}, {MEM}.count "
                         f"{labels.get(MEM + '.count')})")
    return labels, res


def node_object(name, labels, res):
    alloc = {"cpu": "224", "memory": "2Ti", "pods": "256", **{k: str(v) for k, v in res.items()}}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": dict(labels, **{SEL: "true", "type": "kwok", "kubernetes.io/hostname": name})},
            "spec": {}, "status": {"capacity": alloc, "allocatable": alloc}}


def pod_name(seq, key):
    return f"p{seq:03d}-" + "".join(c if c.isalnum() else "-" for c in key.lower())[:40].strip("-")


def pod_object(name, key, limits, image, plan_gpu=None):
    """The pod of the plan's KEY; PLAN_GPU (not None): its GPU of the plan as gpuslice.io/plan-gpu,
    the extender's hint (docs/extender.md)."""
    ann = {"gpuslice.io/plan-pod": key}
    if plan_gpu is not None:
        ann[PLAN_GPU] = str(plan_gpu)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": {"app": "kwok-plan"}, "annotations": ann},
            "spec": {"nodeSelector": {SEL: "true"},
                     "containers": [{"name": "main", "image": image, "imagePullPolicy": "Never",
                                     "resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                                                   "limits": dict(limits)}}],
                     "terminationGracePeriodSeconds": 0, "automountServiceAccountToken": False,
                     "enableServiceLinks": False, "restartPolicy": "Never"}}


# ---------------------------------------------------------------------------- the cluster

def pods_bound(api, names):
    """{pod: (node, gpu-index)} once every pod of NAMES is bound with its annotation; an error
    naming the unbound ones (and a scheduler message) otherwise."""
    _, lst = api.json("GET", f"/api/v1/namespaces/{NS}/pods")
    got, why = {}, {}
    for p in lst["items"]:
        n = p["metadata"]["name"]
        node = p["spec"].get("nodeName")
        ann = (p["metadata"].get("annotations") or {}).get(ANN)
        if node and ann is not None:
            got[n] = (node, ann)
        for c in p.get("status", {}).get("conditions", []):
            if c.get("type") == "PodScheduled" and c.get("status") == "False":
                why[n] = c.get("message", "")[:300]
    left = [n for n in names if n not in got]
    if left:
        return kr.E2EError(f"{len(left)} of {len(names)} not bound, e.g. {left[:3]}; "
                           f"scheduler: {list(why.items())[:2]}")
    return got


def check_in_cluster(cl, gpuslice, doc, reqs, labels, res, nodes, kwok_bin, workdir, policy="gpuslice",
                     order="plan", pods=None, timeout=600, hint=True):
    """The plan's pods placed by kube-scheduler and the extender on NODES kwok Nodes of the shape
    (LABELS, RES) in the cluster CL (kwok_replay.ClusterInfo), each pod annotated with its GPU of
    the plan (gpuslice.io/plan-gpu) unless not HINT, the scheduler restarted with its own
    configuration and everything made removed at the end. Returns the figures (a dict); raises
    BenchError when a pod is not bound or a GPU holds more than its units."""
    api = kr.Api(cl.dir, cl.api_port)
    assigns = sorted(doc["assignments"], key=lambda a: (a["gpu"], a["pod"]) if order == "plan" else a["pod"])
    if pods:
        assigns = assigns[:pods]
    names = [pod_name(k, a["pod"]) for k, a in enumerate(assigns)]
    node_names = [f"kwok-plan-{i:03d}" for i in range(nodes)]
    kwok = ext = None
    fig = {"plan_gpus": doc["gpus"], "plan_nodes": doc["nodes"], "pods": len(assigns), "nodes": nodes,
           "gpus_per_node": int(labels[MEM + ".count"]), "units_per_gpu": res[MEM] // int(labels[MEM + ".count"]),
           "policy": policy, "order": order, "plan_hint": hint,
           "plan_gpus_over_1000_milli": len(extender_misfits(doc, reqs, int(labels[MEM + ".memory"])))}
    try:
        def namespace():  # made, or still there from a run before once it is done terminating
            st, obj = api.json("GET", f"/api/v1/namespaces/{NS}", ok=None)
            if st == 404:
                api.json("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                        "metadata": {"name": NS}}, ok=(201, 409))
                return False
            return st == 200 and obj["status"].get("phase") == "Active"
        wait(namespace, 120, f"the namespace {NS} Active", 0.5)
        kr.delete_all_pods(api, ns=NS)
        kwok = kr.start_kwok(cl.dir, kwok_bin, SEL, 120, name="kwok-plan")
        t0 = time.monotonic()
        for n in node_names:
            api.json("POST", "/api/v1/nodes", node_object(n, labels, res), ok=(201, 409))

        def ready():
            if not kwok.alive():
                raise BenchError(f"kwok exited:\n{kwok.tail()}")
            _, lst = api.json("GET", f"/api/v1/nodes?labelSelector={SEL}%3Dtrue")
            return sum(1 for it in lst["items"] for c in it.get("status", {}).get("conditions", [])
                       if c["type"] == "Ready" and c["status"] == "True") == nodes
        wait(ready, 120, f"{nodes} kwok nodes Ready", 0.5)
        fig["nodes_ready_s"] = round(time.monotonic() - t0, 1)
        ext, port = kr.start_extender(cl, gpuslice, ["--kubeconfig", os.path.join(cl.dir, "admin.kubeconfig"),
                                                     "--policy", policy], name="kwok-plan-extender")
        wait(lambda: kr.extender_nodes(ext, port) >= nodes, 120, "the extender to list the kwok nodes", 0.5)
        kr.restart_scheduler(cl, kr.sched_config(cl.dir, "gpuslice", workdir, port, port))
        t1 = time.monotonic()
        for name, a in zip(names, assigns):
            api.json("POST", f"/api/v1/namespaces/{NS}/pods", pod_object(name, a["pod"], reqs[a["pod"]], cl.image,
                                                                           a["gpu"] if hint else None))

        def all_bound():
            if not ext.alive():
                raise BenchError(f"the extender exited:\n{ext.tail()}")
            return pods_bound(api, names)
        bound = wait(all_bound, timeout, f"the plan's {len(names)} pods bound", 0.5)
        fig["bind_s"] = round(time.monotonic() - t1, 1)
        # a bind refused (another bind took the GPU first) is retried by the scheduler: shown, not fatal
        fig["extender_warnings"] = [ln for ln in ext.tail(20000).splitlines() if "level=warn" in ln][:5]
    finally:
        try:
            kr.delete_all_pods(api, ns=NS)
            for n in node_names:
                api.json("DELETE", f"/api/v1/nodes/{n}", ok=(200, 202, 404))
            api.json("DELETE", f"/api/v1/namespaces/{NS}", ok=(200, 202, 404))
        finally:
            try:
                kr.restart_scheduler(cl, None)
            finally:
                if ext:
                    ext.stop()
                if kwok:
                    kwok.stop()
    return dict(fig, **tally(assigns, names, reqs, bound, fig["gpus_per_node"], fig["units_per_gpu"]))


def tally(assigns, names, reqs, bound, gpus_per_node, units):
    """The GPUs the pods were bound to against the plan's: distinct (node, GPU), units per GPU."""
    used, held, held_sm, plan_of, npods = {}, {}, {}, {}, {}
    for name, a in zip(names, assigns):
        node, idx = bound[name]
        if not idx.isdigit() or int(idx) >= gpus_per_node:
            raise BenchError(f"{name} ({a['pod']}): {ANN} {idx!r} is not one GPU of {node}'s {gpus_per_node}")
        g = (node, int(idx))
        used.setdefault(g, []).append(name)
        held[g] = held.get(g, 0) + int(reqs[a["pod"]][MEM])
        held_sm[g] = held_sm.get(g, 0) + int(reqs[a["pod"]].get(SM, 0))
        plan_of.setdefault(a["gpu"], set()).add(g)
        npods[a["gpu"]] = npods.get(a["gpu"], 0) + 1
    over = {f"{g[0]}/{g[1]}": s for g, s in held.items() if s > units}
    if over:
        raise BenchError(f"GPUs holding more {MEM} than their {units} units: {over}")
    over = {f"{g[0]}/{g[1]}": s for g, s in held_sm.items() if s > 100}
    if over:
        raise BenchError(f"GPUs holding more {SM} than their 100 units: {over}")
    per = sorted(len(v) for v in used.values())
    return {"bound_by_key": {a["pod"]: bound[name] for name, a in zip(names, assigns)},
            "gpus_bound": len(used), "nodes_used": len({g[0] for g in used}),
            "plan_gpus_of_these_pods": len(plan_of),
            "plan_gpus_shared": sum(1 for g in plan_of if npods[g] > 1),
            "plan_gpus_kept_together": sum(1 for g, v in plan_of.items() if npods[g] > 1 and len(v) == 1),
            "pods_per_gpu_min": per[0], "pods_per_gpu_max": per[-1]}


def extender_misfits(doc, reqs, gpu_mib):
    """The plan's GPUs whose pods would not go on one GPU counted as one figure per pod: the larger
    of its memory's (GiB over the GPU's memory, rounded up to a milli-GPU) and its compute's, 1000
    to a GPU (the extender fits memory and compute apart: docs/extender.md, "What a pod asks")."""
    milli = {}
    for a in doc["assignments"]:
        r = reqs[a["pod"]]
        m = -(-int(r[MEM]) * 1024 * 1000 // gpu_mib)
        milli[a["gpu"]] = milli.get(a["gpu"], 0) + max(m, 10 * int(r.get(SM, 0)))
    return sorted(g for g, v in milli.items() if v > 1000)


def judge(doc, bound_by_key, mem_csv, duty_csv, workdir):
    """The scheduler's placement judged by the plan's own independent checker
    (tests/plan/check_plan.py): the pods on the GPUs they were bound to, with the plan's quotas,
    budget, tolerance and fill. {"gpus_over_budget": GPUs over the budget on more steps than
    tolerated, "worst_steps_over": the most steps over on one GPU, "check": its first lines}."""
    gpus = sorted(set(bound_by_key.values()))
    index = {g: i for i, g in enumerate(gpus)}
    # gpu_list: the plan's GPUs, not these (the checker compares each GPU's minutes with it)
    placed = dict(doc, gpus=len(gpus), gpu_list=[],
                  assignments=[dict(a, gpu=index[bound_by_key[a["pod"]]]) for a in doc["assignments"]
                               if a["pod"] in bound_by_key])
    path = os.path.join(workdir, "bound-placement.json")
    with open(path, "w") as f:
        json.dump(placed, f)
    cmd = [sys.executable, CHECK_PLAN, path, mem_csv, duty_csv, "--gpu-bytes", str(doc["gpu_memory_bytes"]),
           "--budget", str(doc["budget_percent"]), "--tolerance", str(doc["tolerance"]), "--fill", doc["grid"]["fill"]]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    lines = r.stdout.splitlines()
    step = float(doc["grid"]["step_s"])
    over = [re.match(r"GPU (\d+): summed duty over .* for ([0-9.e+-]+) minutes", ln) for ln in lines]
    over = [round(float(m.group(2)) * 60.0 / step) for m in over if m]
    other = [ln for ln in lines if "summed duty over" not in ln and not ln.startswith("ok:")]
    if r.returncode not in (0, 1) or other:  # anything but duty over the budget: the placement is wrong
        raise BenchError(f"{shlex.join(cmd)}: exit {r.returncode}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return {"gpus_over_budget": len(over), "worst_steps_over": max(over, default=0), "check": lines[:3]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build-fast")
    ap.add_argument("--trace-dir", help="the trace (default ../shared/traces/alibaba-genai-v2026, or under "
                                        "$GS_SHARED_DIR/traces)")
    ap.add_argument("--gpu", default="H200", help="the plan's --gpu")
    ap.add_argument("--model", default=None, help="the simulated GPU model of the nodes (default: the plan's)")
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--nodes", type=int, default=18, help="kwok nodes (default 18: the trace's 144 GPUs)")
    ap.add_argument("--plan-args", default="", help="more options of `gpuslice plan`, one shell word list")
    ap.add_argument("--pods", type=int, default=None, help="the plan's first N pods only")
    ap.add_argument("--policy", default="gpuslice", help="the extender's --policy")
    ap.add_argument("--order", choices=("plan", "name"), default="plan")
    ap.add_argument("--no-hint", action="store_true",
                    help="no gpuslice.io/plan-gpu annotation on the pods (the extender's policy alone)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds for every pod to be bound")
    ap.add_argument("--out", default=None)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    gpuslice = os.path.abspath(os.path.join(a.build, "gpuslice"))
    if not os.access(gpuslice, os.X_OK):
        raise BenchError(f"{gpuslice}: not built (meson setup {a.build} && ninja -C {a.build})")
    out = os.path.abspath(a.out or os.path.join(a.build, "kwok-plan"))
    os.makedirs(out, exist_ok=True)
    t0 = time.monotonic()
    mem, duty = trace_csvs(a.trace_dir or trace_dir(), out)
    plan_dir = os.path.join(out, f"plan-{time.strftime('%Y%m%d-%H%M%S')}")
    doc, reqs, policy = make_plan(gpuslice, mem, duty, a.gpu, plan_dir,
                                  ["--gpus-per-node", str(a.gpus_per_node), *shlex.split(a.plan_args)])
    log(f"plan: {doc['pods']} pods on {doc['gpus']} x {doc['gpu_model']} ({doc['nodes']} nodes) in {plan_dir}")
    labels, res = node_shape(gpuslice, a.model or doc["gpu_model"], a.gpus_per_node, policy, out)
    kwok_bin = kr.kwok_binary()
    own, cdir, base = kr.cluster_dir("kwokplan")
    ok = False
    try:
        if own:
            kr.cluster_up(cdir, base)
        cl = ClusterInfo(cdir)
        fig = check_in_cluster(cl, gpuslice, doc, reqs, labels, res, a.nodes, kwok_bin, out, a.policy, a.order,
                               a.pods, a.timeout, not a.no_hint)
        bound = fig.pop("bound_by_key")
        if not a.pods:  # the checker wants every pod of the input
            fig.update(judge(doc, bound, mem, duty, out))
        fig["wall_s"] = round(time.monotonic() - t0, 1)
        fig["plan_args"] = a.plan_args
        fig["load_avg"] = open("/proc/loadavg").read().split()[:3]
        print(json.dumps(fig, indent=1))
        if a.json:
            with open(a.json, "w") as f:
                json.dump(fig, f, indent=1)
        ok = True
    finally:
        if own:
            kr.cluster_down(cdir, ok)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (BenchError, kr.E2EError, kr.KubeHttpError) as e:
        print(f"kwok_plan: {e}", file=sys.stderr)
        sys.exit(1)
