"""check_plan.py: checks a `gpuslice plan --json` plan against its input CSVs, written apart from
the planner (it shares no code with src/consolidate).

    check_plan.py PLAN.json MEMORY.csv DUTY.csv --gpu-bytes N [--budget PCT] [--tolerance PCT]
                  [--duty-ratio] [--fill last|peak]

It rebuilds the time grid as docs/plan.md defines it (step 0 at the earliest timestamp of either
file, the step the median difference between consecutive distinct timestamps, each sample at its
nearest step, two samples of a pod in one step: the larger; a step without a sample: the pod's
last value, before its first sample its first value, or with --fill peak its peak), then for every
GPU of the plan recomputes the summed memory quotas and the summed duty at every step. It fails
(exit 1, one line per finding) when a pod of the input is missing from the plan or appears twice,
a GPU index is outside 0..gpus-1, a quota is below the pod's observed peak, a GPU's quotas exceed
N bytes, or a GPU's summed duty is over the budget on more steps than the tolerance allows.
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("plan")
    ap.add_argument("memory")
    ap.add_argument("duty")
    ap.add_argument("--gpu-bytes", type=int, required=True)
    ap.add_argument("--budget", type=float, default=100.0)
    ap.add_argument("--tolerance", type=float, default=0.0)
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
    allowed = int(math.floor(a.tolerance / 100.0 * steps + 1e-9))
    worst = 0
    for g in range(gpus):
        if mem_sum[g] > a.gpu_bytes:
            problems.append(f"GPU {g}: quotas {mem_sum[g]} bytes exceed the GPU's {a.gpu_bytes}")
        over = sum(1 for v in duty_sum[g] if v > a.budget + 1e-6)
        worst = max(worst, over)
        if over > allowed:
            problems.append(f"GPU {g}: summed duty over {a.budget} % on {over} steps, {allowed} allowed")
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"ok: {len(where)} pods on {gpus} GPUs, {steps} steps of {step} s, most steps over budget on one GPU "
          f"{worst} (allowed {allowed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
