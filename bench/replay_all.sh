#!/bin/sh
# replay_all.sh: every policy x trace x seed (42..51) through `gpuslice replay`, then the table of the
# mean GPU allocation ratio at 100 % arrived workload next to the FGD paper's own numbers.
# Usage: bench/replay_all.sh [TRACE_DIR] [RESULTS_DIR] [GPUSLICE] [OUT_DIR]
#   TRACE_DIR    the alibaba-gpu-v2023 CSVs (default ../shared/traces/alibaba-gpu-v2023)
#   RESULTS_DIR  the paper's expected results (default ../shared/traces/fgd-atc23-results)
#   env: TRACES="default gpushare40 ..." POLICIES="fgd gpuslice ..." SEEDS="42 43" JOBS=2
#        VARIANTS=DIR: where bench/make_variants.py wrote the variants the trace directory lacks
#        (gpuspec10..33, cpu050..250; default build-variants); a trace missing from TRACE_DIR is
#        read from there
set -eu
TRACE_DIR=${1:-../shared/traces/alibaba-gpu-v2023}
RESULTS_DIR=${2:-../shared/traces/fgd-atc23-results}
GPUSLICE=${3:-build/gpuslice}
OUT=${4:-build/replay-all}
VARIANTS=${VARIANTS:-build-variants}
TRACES=${TRACES:-"default gpushare20 gpushare40 gpushare60 gpushare80 gpushare100 multigpu20 multigpu30 multigpu40 multigpu50 gpuspec10 gpuspec20 gpuspec25 gpuspec33 cpu050 cpu100 cpu200 cpu250"}
POLICIES=${POLICIES:-"random dotprod gpuclustering gpupacking bestfit fgd gpuslice"}
SEEDS=${SEEDS:-"42 43 44 45 46 47 48 49 50 51"}
JOBS=${JOBS:-2}
mkdir -p "$OUT"
# JOBS replays at a time; each writes OUT/TRACE-POLICY-SEED.csv (kept: a rerun only fills gaps)
for tr in $TRACES; do
    [ -s "$TRACE_DIR/openb_pod_list_$tr.csv" ] || [ -s "$VARIANTS/openb_pod_list_$tr.csv" ] || {
        echo "replay_all.sh: no openb_pod_list_$tr.csv in $TRACE_DIR or $VARIANTS (bench/make_variants.py)" >&2
        exit 1
    }
done
export OUT GPUSLICE TRACE_DIR VARIANTS
# shellcheck disable=SC2016 # the single-quoted script is expanded by sh -c, per line of xargs
for tr in $TRACES; do for p in $POLICIES; do for s in $SEEDS; do
    echo "$tr $p $s"
done; done; done | xargs -P "$JOBS" -L 1 sh -c '
    f="$OUT/$0-$1-$2.csv" pods="$TRACE_DIR/openb_pod_list_$0.csv"
    [ -s "$pods" ] || pods="$VARIANTS/openb_pod_list_$0.csv"
    [ -s "$f" ] || { "$GPUSLICE" replay --nodes "$TRACE_DIR/openb_node_list_gpu_node.csv" \
        --pods "$pods" --policy "$1" --seed "$2" --out "$f.tmp" >"$f.sum" &&
        mv "$f.tmp" "$f"; }'
python3 - "$OUT" "$RESULTS_DIR" "$TRACES" "$POLICIES" "$SEEDS" <<'PY'
import csv, sys, statistics as st
out, res, traces, pols, seeds = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split(), sys.argv[5].split()
names = {'random': '01-Random', 'dotprod': '02-DotProd', 'gpuclustering': '03-GpuClustering',
         'gpupacking': '04-GpuPacking', 'bestfit': '05-BestFit', 'fgd': '06-FGD'}
paper = {}
for r in csv.DictReader(open(res + '/analysis_allo_discrete.csv')):
    if r['seed'] in seeds and r['100']:
        paper.setdefault((r['workload'], r['sc_policy']), []).append(float(r['100']))
def mine(tr, p):
    v = []
    for s in seeds:
        for r in csv.DictReader(open(f'{out}/{tr}-{p}-{s}.csv')):
            if r['arrived_pct'] == '100' and r['gpu_alloc_pct']:
                v.append(float(r['gpu_alloc_pct']))
    return v
print('| workload | policy | gpuslice replay (mean of %d seeds) | stdev | paper | error |' % len(seeds))
print('|---|---|---|---|---|---|')
for tr in traces:
    for p in pols:
        m = mine(tr, p)
        pp = paper.get(('openb_pod_list_' + tr, names.get(p, '')), [])
        mm = st.mean(m) if m else float('nan')
        sd = st.stdev(m) if len(m) > 1 else 0.0
        if pp:
            pm = st.mean(pp)
            print(f'| {tr} | {p} | {mm:.2f} | {sd:.2f} | {pm:.2f} | {mm - pm:+.2f} |')
        else:
            print(f'| {tr} | {p} | {mm:.2f} | {sd:.2f} | - | - |')
PY
