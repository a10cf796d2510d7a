"""check_plan.py: checks a `gpuslice plan --json` plan against its input CSVs, written apart from
the planner (it shares no code with src/consolidate).

    check_plan.py PLAN.json MEMORY.csv DUTY.csv --gpu-bytes N [--budget PCT] [--tolerance PCT]
                  [--tolerance-seconds S] [--duty-ratio] [--fill last|peak]
                  [--out DIR --memory-units N [--requests fractional|dra]]

It rebuilds the time grid as docs/plan.md defines it (step 0 at the earliest timestamp of either
file, the step the median difference between consecutive distinct timestamps, each sample at its
nearest step, two samples of a pod in one step: the larger; a step without a sample: the pod's
last value, before its first sample its first value, or with --fill peak its peak), then for every
GPU of the plan recomputes the summed memory quotas and the summed duty at every step. It fails
(exit 1, one line per finding) when a pod of the input is missing from the plan or appears twice,
a GPU index is outside 0..gpus-1, a quota is below the pod's observed peak, a GPU's quotas exceed
N bytes, or a GPU's summed duty is over the budget on more minutes than the tolerance allows (a
share of the window's minutes, steps x step: as many whole steps as fit in it; or S seconds), or
the plan's minutes over the budget are not its steps over times the step.

With --out (the plan's --out directory), every pod's requests file is read as YAML and checked
against its assignment: fractional, `resources.limits` with gpuslice.io/gpu-memory (whole GiB, at
least the quota) and gpuslice.io/gpu-compute (1..100) and nothing else; on each GPU the memory
requests within N units and the compute requests within the budget. With dra, the pod's
resourceClaims names a ResourceClaimTemplate of claim-templates/ whose fields are those of
resource.k8s.io/v1, with the same memory (Gi) and compute, and its container's resources.claims
names the claim.
Prints a summary line on success.
"""
import argparse
import csv
import json
import math
import statistics
import sys


def read(path, scale):
    series = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            key = row["container_ip"]
            series.setdefault(key, []).append((float(row["timestamp_anon"]), float(row["value"]) * scale))
    return series


K8S_V1 = {
    # the fields of resource.k8s.io/v1 a template of the plan may use, by object path
    "": {"apiVersion", "kind", "metadata", "spec"},
    "metadata": {"name", "namespace", "labels", "annotations"},
    "spec": {"metadata", "spec"},
    "spec.spec": {"devices"},
    "spec.spec.devices": {"requests", "constraints", "config"},
    "request": {"name", "exactly", "firstAvailable"},
    "exactly": {"deviceClassName", "selectors", "allocationMode", "count", "adminAccess", "tolerations",
                "capacity"},
    "selector": {"cel"},
    "cel": {"expression"},
    "capacity": {"requests"},
    "config": {"requests", "opaque"},
    "opaque": {"driver", "parameters"},
}


def quantity_gi(q):
    if not (isinstance(q, str) and q.endswith("Gi") and q[:-2].isdigit()):
        raise ValueError(f"memory {q!r} is not whole Gi")
    return int(q[:-2])


def unknown(obj, kind, where):
    extra = set(obj) - K8S_V1[kind]
    return [f"{where}: fields {sorted(extra)} are not resource.k8s.io/v1's"] if extra else []


def check_template(t, name):
    """A ResourceClaimTemplate's structure against resource.k8s.io/v1; its shape (memory Gi, compute)."""
    w = f"claim template {name}"
    out = unknown(t, "", w)
    if t.get("apiVersion") != "resource.k8s.io/v1" or t.get("kind") != "ResourceClaimTemplate":
        out.append(f"{w}: not a resource.k8s.io/v1 ResourceClaimTemplate")
    out += unknown(t["metadata"], "metadata", w)
    if t["metadata"].get("name") != name:
        out.append(f"{w}: metadata.name is {t['metadata'].get('name')!r}")
    out += unknown(t["spec"], "spec", w) + unknown(t["spec"]["spec"], "spec.spec", w)
    dev = t["spec"]["spec"]["devices"]
    out += unknown(dev, "spec.spec.devices", w)
    reqs = dev["requests"]
    if len(reqs) != 1:
        return out + [f"{w}: {len(reqs)} requests"], None, None
    r = reqs[0]
    out += unknown(r, "request", w)
    ex = r["exactly"]
    out += unknown(ex, "exactly", w)
    for sel in ex.get("selectors", []):
        out += unknown(sel, "selector", w) + unknown(sel["cel"], "cel", w)
    for c in dev.get("config", []):
        out += unknown(c, "config", w) + unknown(c["opaque"], "opaque", w)
        if c["requests"] != [r["name"]] or c["opaque"]["driver"] != "gpu.gpuslice.io":
            out.append(f"{w}: a config for {c['requests']} of driver {c['opaque']['driver']}")
    shape = None
    if "capacity" in ex:
        out += unknown(ex["capacity"], "capacity", w)
        cap = ex["capacity"]["requests"]
        if set(cap) != {"memory", "compute"} or not isinstance(cap["compute"], str):
            out.append(f"{w}: capacity requests {cap}")
        else:
            shape = (quantity_gi(cap["memory"]), int(cap["compute"]))
    return out, ex["deviceClassName"], shape


def check_requests(plan, a):
    """Each pod's requests file (YAML) against its assignment, and what each GPU's requests add up to."""
    import os
    import yaml
    out = []
    units = [0] * plan["gpus"]
    compute = [0] * plan["gpus"]
    files = set(os.listdir(os.path.join(a.out, "requests")))
    templates = {}
    for asg in plan["assignments"]:
        pod, g = asg["pod"], asg["gpu"]
        name = asg["requests_file"]
        files.discard(os.path.basename(name))
        doc = yaml.safe_load(open(os.path.join(a.out, name)))
        mig = asg["mig_profile"]
        if a.requests == "dra":
            claims = doc.get("resourceClaims")
            if set(doc) != {"resourceClaims", "resources"} or len(claims) != 1 or \
                    doc["resources"] != {"claims": [{"name": claims[0]["name"]}]}:
                out.append(f"pod {pod}: {name} is not a resourceClaims and its container's resources.claims")
                continue
            tname = claims[0]["resourceClaimTemplateName"]
            if tname != asg["requests"]["claim_template"]:
                out.append(f"pod {pod}: template {tname}, the JSON says {asg['requests']['claim_template']}")
            if tname not in templates:
                path = os.path.join(a.out, "claim-templates", tname + ".yaml")
                templates[tname] = check_template(yaml.safe_load(open(path)), tname)
            problems, cls, shape = templates[tname]
            out += problems
            if mig:
                if cls != "mig.gpu.gpuslice.io":
                    out.append(f"pod {pod}: MIG, but its class is {cls}")
                continue
            if cls != "shared.gpu.gpuslice.io" or shape is None:
                out.append(f"pod {pod}: class {cls}, shape {shape}")
                continue
            mem_units, comp = shape
        else:
            lim = (doc.get("resources") or {}).get("limits") or {}
            if mig:
                if lim != {f"nvidia.com/mig-{mig}": 1}:
                    out.append(f"pod {pod}: MIG {mig}, its limits {lim}")
                continue
            want = {"gpuslice.io/gpu-memory", "gpuslice.io/gpu-compute"} if asg["compute_percent"] is not None \
                else {"gpuslice.io/gpu-memory"}
            if set(doc) != {"resources"} or set(lim) != want or not all(isinstance(v, int) for v in lim.values()):
                out.append(f"pod {pod}: {name} says {doc}, not the limits {sorted(want)} as integers")
                continue
            mem_units, comp = lim["gpuslice.io/gpu-memory"], lim.get("gpuslice.io/gpu-compute", 0)
            if asg["requests"] != lim:
                out.append(f"pod {pod}: the JSON's requests {asg['requests']} are not the file's {lim}")
        if mem_units < 1 or mem_units * 2**30 < asg["memory_bytes"]:
            out.append(f"pod {pod}: a memory request of {mem_units} GiB is below its quota {asg['memory_bytes']}")
        if comp != (asg["compute_percent"] or 0) or (asg["compute_percent"] is not None and not 1 <= comp <= 100):
            out.append(f"pod {pod}: compute request {comp}, compute_percent {asg['compute_percent']}")
        units[g] += mem_units
        compute[g] += comp
    if files:
        out.append(f"requests/ has files of no pod: {sorted(files)[:3]}")
    for g in range(plan["gpus"]):
        if plan["gpu_list"][g]["mode"] == "mig":
            continue
        if a.memory_units is not None and units[g] > a.memory_units:
            out.append(f"GPU {g}: memory requests of {units[g]} GiB, the GPU has {a.memory_units} units")
        if compute[g] > a.budget:
            out.append(f"GPU {g}: compute requests of {compute[g]} %, over the budget {a.budget}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("plan")
    ap.add_argument("memory")
    ap.add_argument("duty")
    ap.add_argument("--gpu-bytes", type=int, required=True)
    ap.add_argument("--budget", type=float, default=100.0)
    ap.add_argument("--tolerance", type=float, default=0.0)
    ap.add_argument("--tolerance-seconds", type=float, default=0.0)
    ap.add_argument("--out")
    ap.add_argument("--memory-units", type=int)
    ap.add_argument("--requests", choices=["fractional", "dra"], default="fractional")
    ap.add_argument("--duty-ratio", action="store_true")
    ap.add_argument("--fill", choices=["last", "peak"], default="last")
    a = ap.parse_args()

    plan = json.load(open(a.plan))
    mem = read(a.memory, 1.0)
    duty = read(a.duty, 100.0 if a.duty_ratio else 1.0)
    stamps = sorted({t for s in (mem, duty) for v in s.values() for t, _ in v})
    t0 = stamps[0]
    step = statistics.median([b - c for c, b in zip(stamps, stamps[1:])]) if len(stamps) > 1 else 60.0
    steps = int(math.floor((stamps[-1] - t0) / step + 0.5)) + 1

    problems = []
    gpus = plan["gpus"]
    where = {}
    quota = {}
    for asg in plan["assignments"]:
        pod = asg["pod"]
        if pod in where:
            problems.append(f"pod {pod} is assigned twice")
        g = asg["gpu"]
        if not (isinstance(g, int) and 0 <= g < gpus):
            problems.append(f"pod {pod}: GPU {g} is not in 0..{gpus - 1}")
        where[pod] = g
        quota[pod] = asg["memory_bytes"]
    both = set(mem) & set(duty)
    for pod in sorted(both):
        if pod not in where:
            problems.append(f"pod {pod} of the input is not in the plan")
    for pod in where:
        if pod not in both:
            problems.append(f"pod {pod} of the plan has not both series in the input")

    mem_sum = [0] * gpus
    duty_sum = [[0.0] * steps for _ in range(gpus)]
    for pod, g in where.items():
        if pod not in both or not (isinstance(g, int) and 0 <= g < gpus):
            continue
        peak = max(v for _, v in mem[pod])
        if quota[pod] < peak:
            problems.append(f"pod {pod}: quota {quota[pod]} is below its observed peak {peak:.0f}")
        mem_sum[g] += quota[pod]
        cells = [None] * steps
        for t, v in duty[pod]:
            i = int(math.floor((t - t0) / step + 0.5))
            cells[i] = v if cells[i] is None else max(cells[i], v)
        dpeak = max(c for c in cells if c is not None)
        last = next(c for c in cells if c is not None)
        row = duty_sum[g]
        for i in range(steps):
            if cells[i] is not None:
                last = cells[i]
                row[i] += last
            else:
                row[i] += dpeak if a.fill == "peak" else last
    # the tolerance is time: a share of the window (steps x step seconds) or seconds; a GPU may be
    # over the budget on as many whole steps as fit in it
    tolerated_s = a.tolerance_seconds if a.tolerance_seconds > 0 else a.tolerance / 100.0 * steps * step
    allowed = int(math.floor(tolerated_s / step + 1e-9))
    same = a.tolerance_seconds > 0 or abs(plan["tolerance"] - a.tolerance / 100.0) < 1e-12  # the plan's own
    if same and abs(plan["tolerated_minutes"] - allowed * step / 60.0) > 1e-6:
        problems.append(f"tolerated_minutes {plan['tolerated_minutes']}: {allowed} steps of {step} s are "
                        f"{allowed * step / 60.0} minutes")
    worst = 0
    for g in range(gpus):
        if mem_sum[g] > a.gpu_bytes:
            problems.append(f"GPU {g}: quotas {mem_sum[g]} bytes exceed the GPU's {a.gpu_bytes}")
        over = sum(1 for v in duty_sum[g] if v > a.budget + 1e-6)
        worst = max(worst, over)
        if over * step > tolerated_s + 1e-6 * step:
            problems.append(f"GPU {g}: summed duty over {a.budget} % for {over * step / 60.0:g} minutes, "
                            f"{tolerated_s / 60.0:g} allowed")
        if g < len(plan["gpu_list"]):
            # the plan's minutes are its steps over times the step; the planner rounds duty up to
            # hundredths of a percent, so it may count a step more than this float sum, never fewer
            said, steps_said = plan["gpu_list"][g]["minutes_over_budget"], plan["gpu_list"][g]["steps_over_budget"]
            if abs(said - steps_said * step / 60.0) > 1e-6 or \
                    (plan["budget_percent"] == a.budget and steps_said < over):
                problems.append(f"GPU {g}: minutes_over_budget {said} for {steps_said} steps, but {over} steps of "
                                f"{step} s are over")
    if a.out:
        problems += check_requests(plan, a)
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"ok: {len(where)} pods on {gpus} GPUs, {steps} steps of {step} s, most steps over budget on one GPU "
          f"{worst} (allowed {allowed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
