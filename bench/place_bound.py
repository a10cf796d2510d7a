#!/usr/bin/python3
"""place_bound.py: how much GPU a placement of the same GPU-sharing pods could allocate at 100 %
arrived workload. The sharing pods a replay placed up to the end of its 100 % bucket are packed
offline into whole GPUs (1000 milli each): once optimally (cutting-stock integer program, HiGHS
through scipy.optimize.milp; its proven lower bound on the number of GPUs is used) and once with
best-fit decreasing (one packing, for comparison, not a bound). A GPU that holds a sharing pod
holds no whole-GPU pod, and at least OPT GPUs hold sharing pods, so the allocation ratio of any
placement of these pods is at most 100 * (capacity - OPT * 1000 + their milli) / capacity. The
bound ignores CPU, memory, GPU models and node boundaries (each only makes packing harder), and
holds for these pods: another policy places a few different ones after its first failures, so its
own run gives its own bound.

Needs python3-scipy (Debian). Usage (from the repository root, after building):
  /usr/bin/python3 bench/place_bound.py [--trace default] [--policy gpuslice] [--seeds 42-51]
      [--traces ../shared/traces/alibaba-gpu-v2023] [--gpuslice build/gpuslice]
"""
import argparse
import csv
import math
import os
import subprocess
import sys
import tempfile
from collections import Counter

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAP = 1000


def patterns(sizes):
    """Every multiset of the sizes that fits one GPU."""
    out = []

    def rec(i, room, cur):
        if cur:
            out.append(list(cur))
        for j in range(i, len(sizes)):
            if sizes[j] <= room:
                cur.append(sizes[j])
                rec(j, room - sizes[j], cur)
                cur.pop()
    rec(0, CAP, [])
    return out


def optimal_gpus(shares):
    cnt = Counter(shares)
    sizes = sorted(cnt, reverse=True)
    pats = patterns(sizes)
    a = np.zeros((len(sizes), len(pats)))
    for j, p in enumerate(pats):
        for s in p:
            a[sizes.index(s), j] += 1
    need = np.array([cnt[s] for s in sizes], dtype=float)
    res = milp(np.ones(len(pats)), constraints=LinearConstraint(a, lb=need, ub=np.inf),
               integrality=np.ones(len(pats)), bounds=Bounds(0, np.inf), options={"time_limit": 300})
    if res.status not in (0, 1) or res.mip_dual_bound is None:  # 1: time limit, the bound still holds
        sys.exit(f"place_bound: the integer program failed: {res.message}")
    return math.ceil(res.mip_dual_bound - 1e-9)  # proven: no packing uses fewer GPUs


def bfd_gpus(shares):
    free = []
    for s in sorted(shares, reverse=True):
        best = -1
        for i, f in enumerate(free):
            if f >= s and (best < 0 or f < free[best]):
                best = i
        if best < 0:
            free.append(CAP - s)
        else:
            free[best] -= s
    return len(free)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", default=os.path.join(ROOT, "..", "shared", "traces", "alibaba-gpu-v2023"))
    ap.add_argument("--trace", default="default")
    ap.add_argument("--policy", default="gpuslice")
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--gpuslice", default=os.path.join(ROOT, "build", "gpuslice"))
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    nodes = os.path.join(args.traces, "openb_node_list_gpu_node.csv")
    with open(nodes) as f:
        capacity = sum(int(r["gpu"]) for r in csv.DictReader(f)) * CAP
    print(f"| seed | {args.policy} alloc at 100 % | sharing pods placed | optimal packing: free % | bound | "
          f"best-fit decreasing: free % | its allocation |")
    print("|---|---|---|---|---|---|---|")
    tot = Counter()
    with tempfile.TemporaryDirectory(prefix="gs-bound-") as tmp:
        for seed in seeds:
            out, shares_path = os.path.join(tmp, "curve.csv"), os.path.join(tmp, "shares.txt")
            subprocess.run([args.gpuslice, "replay", "--nodes", nodes, "--pods",
                            os.path.join(args.traces, f"openb_pod_list_{args.trace}.csv"), "--policy", args.policy,
                            "--seed", str(seed), "--out", out, "--placed-shares", shares_path],
                           check=True, stdout=subprocess.DEVNULL)
            with open(out) as f:
                row = [r for r in csv.DictReader(f) if r["arrived_pct"] == "100" and r["gpu_alloc_pct"]]
            if not row:
                sys.exit(f"place_bound: seed {seed}: the replay has no event at 100 % arrived")
            alloc = float(row[0]["gpu_alloc_pct"])
            with open(shares_path) as f:
                shares = [int(line) for line in f if line.strip()]
            used = sum(shares)
            opt = (optimal_gpus(shares) * CAP - used) / capacity * 100
            bfd = (bfd_gpus(shares) * CAP - used) / capacity * 100
            tot.update({"alloc": alloc, "opt": opt, "bfd": bfd, "n": 1})
            print(f"| {seed} | {alloc:.2f} | {len(shares)} | {opt:.2f} | {100 - opt:.2f} | {bfd:.2f} | {100 - bfd:.2f} |")
    n = tot["n"]
    print(f"| mean | {tot['alloc'] / n:.2f} | | {tot['opt'] / n:.2f} | {100 - tot['opt'] / n:.2f} | "
          f"{tot['bfd'] / n:.2f} | {100 - tot['bfd'] / n:.2f} |")


if __name__ == "__main__":
    main()
