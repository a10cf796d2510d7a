#!/usr/bin/env python3
"""make_variants.py: the FGD paper's workload variants that the trace directory lacks, built from
the default trace (openb_pod_list_default.csv), deterministic for a seed.

Usage: bench/make_variants.py [TRACE_DIR] [OUT_DIR] [--seed 2023]
  TRACE_DIR  the alibaba-gpu-v2023 CSVs (default ../shared/traces/alibaba-gpu-v2023)
  OUT_DIR    where the variants go (default build-variants; never committed)

The variants, as the paper's artifact describes them (its figure scripts' axes):
  gpuspecXX  "the proportion of workloads with GPU type constraints in terms of GPU requests":
             GPU pods are drawn at random (without replacement) until XX % of the trace's GPU
             request (milli-GPU x #GPUs) carries a gpu_spec; each drawn pod gets a spec from the mix
             of constraints of the published production variant (CONSTRAINT_MIX below), restricted to
             specs under which some node can host the pod (its #GPUs, CPU and memory). Everything
             else is the default trace, row for row. XX = 10, 20, 25, 33.
  cpuXXX     "the proportion of non-GPU workloads in terms of task number": the GPU pods are kept,
             the CPU-only pods resampled so that they are XX/10 % of the tasks (fewer than the
             default's 13.3 %: drawn without replacement; more: all of them plus draws with
             replacement), in creation-time order, renamed openb-pod-0000... XXX = 050, 100, 200, 250.
"""
import csv
import os
import random
import sys

# The constraint mix (spec -> weight): the gpu_spec values of the constrained GPU pods in a sample of
# the published openb_pod_list_gpuspec33.csv (rows openb-pod-4172..4393, 51 constrained of about
# 190 GPU pods), counted by hand. Production constrains mostly to T4, then P100 and the V100s.
CONSTRAINT_MIX = [
    ("T4", 31),
    ("P100", 8),
    ("V100M16|V100M32", 4),
    ("G2", 3),
    ("P100|V100M16|V100M32", 2),
    ("G3", 1),
    ("V100M32", 1),
    ("G2|P100|T4|V100M16|V100M32", 1),
]
GPUSPEC = [10, 20, 25, 33]
CPU = [50, 100, 200, 250]  # tenths of a percent of the tasks


def gpu_req(r):
    return int(r['num_gpu']) * min(1000, int(r['gpu_milli']))


def feasible(r, spec, nodes):
    allowed = set(spec.split('|'))
    for n in nodes:
        if n['model'] in allowed and int(n['gpu']) >= int(r['num_gpu']) and \
                int(n['cpu_milli']) >= int(r['cpu_milli']) and int(n['memory_mib']) >= int(r['memory_mib']):
            return True
    return False


def gpuspec(rows, nodes, pct, seed):
    rng = random.Random(seed * 1000 + pct)
    out = [dict(r) for r in rows]
    gpu = [i for i, r in enumerate(out) if int(r['num_gpu']) > 0]
    total = sum(gpu_req(out[i]) for i in gpu)
    rng.shuffle(gpu)
    specs = [s for s, _ in CONSTRAINT_MIX]
    weights = [w for _, w in CONSTRAINT_MIX]
    done = 0
    for i in gpu:
        if done >= pct * total / 100:
            break
        ok = [(s, w) for s, w in zip(specs, weights) if feasible(out[i], s, nodes)]
        if not ok:
            continue
        out[i]['gpu_spec'] = rng.choices([s for s, _ in ok], [w for _, w in ok])[0]
        done += gpu_req(out[i])
    return out, done / total


def cpu_variant(rows, tenths, seed):
    rng = random.Random(seed * 1000 + tenths)
    gpu = [r for r in rows if int(r['num_gpu']) > 0]
    cpu = [r for r in rows if int(r['num_gpu']) == 0]
    x = tenths / 1000.0
    want = round(x * len(gpu) / (1 - x))
    if want <= len(cpu):
        pick = rng.sample(cpu, want)
    else:
        pick = cpu + [rng.choice(cpu) for _ in range(want - len(cpu))]
    out = [dict(r) for r in gpu + pick]
    # creation-time order (stable; the replay sorts by name and shuffles, as the simulator does)
    out.sort(key=lambda r: int(r['creation_time'] or 0))
    for i, r in enumerate(out):
        r['name'] = 'openb-pod-%04d' % i
    return out


def write(path, fields, rows):
    with open(path + '.tmp', 'w', newline='') as f:
        w = csv.DictWriter(f, fieldnames=fields, lineterminator='\n')
        w.writeheader()
        w.writerows(rows)
    os.replace(path + '.tmp', path)


def main(argv):
    args = [a for a in argv[1:]]
    seed = 2023
    if '--seed' in args:
        k = args.index('--seed')
        seed = int(args[k + 1])
        del args[k:k + 2]
    src = args[0] if len(args) > 0 else '../shared/traces/alibaba-gpu-v2023'
    dst = args[1] if len(args) > 1 else 'build-variants'
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(src, 'openb_pod_list_default.csv'), newline='') as f:
        rd = csv.DictReader(f)
        fields = rd.fieldnames
        rows = list(rd)
    with open(os.path.join(src, 'openb_node_list_gpu_node.csv'), newline='') as f:
        nodes = list(csv.DictReader(f))
    for pct in GPUSPEC:
        out, share = gpuspec(rows, nodes, pct, seed)
        write(os.path.join(dst, 'openb_pod_list_gpuspec%02d.csv' % pct), fields, out)
        print('gpuspec%02d: %.2f %% of the GPU request constrained' % (pct, 100 * share))
    for t in CPU:
        out = cpu_variant(rows, t, seed)
        write(os.path.join(dst, 'openb_pod_list_cpu%03d.csv' % t), fields, out)
        n_cpu = sum(1 for r in out if int(r['num_gpu']) == 0)
        print('cpu%03d: %d tasks, %d CPU-only (%.2f %%)' % (t, len(out), n_cpu, 100 * n_cpu / len(out)))
    # the node list beside them, so that one directory holds a whole replay's input
    with open(os.path.join(src, 'openb_node_list_gpu_node.csv'), newline='') as f:
        data = f.read()
    with open(os.path.join(dst, 'openb_node_list_gpu_node.csv'), 'w', newline='') as f:
        f.write(data)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
