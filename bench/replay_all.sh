#!/bin/sh
# replay_all.sh: every policy x trace x seed (42..51) through `gpuslice replay`, then the table of the
# mean GPU allocation ratio at 100 % arrived workload next to the FGD paper's own numbers, the mean
# power_at_100 (PWR's model), and gpuslice - FGD per seed (mean, min / max); missing runs are listed.
# Usage: bench/replay_all.sh [TRACE_DIR] [RESULTS_DIR] [GPUSLICE] [OUT_DIR]
#   TRACE_DIR    the alibaba-gpu-v2023 CSVs (default ../shared/traces/alibaba-gpu-v2023)
#   RESULTS_DIR  the paper's expected results (default ../shared/traces/fgd-atc23-results)
#   env: TRACES="default gpushare40 ..." POLICIES="fgd gpuslice ..." SEEDS="42 43" JOBS=2
#        VARIANTS=DIR: where bench/make_variants.py wrote the variants the trace directory lacks
#        (gpuspec10..33, cpu050..250; default build-variants); a trace missing from TRACE_DIR is
#        read from there
#        SUMMARY_ONLY=1: no replay, only the tables of the runs OUT_DIR already has
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
[ "${SUMMARY_ONLY:-0}" = 1 ] || for tr in $TRACES; do for p in $POLICIES; do for s in $SEEDS; do
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
missing = []
def mine(tr, p):
    """allocation at 100 % arrived and power_at_100 (kW, from the .sum line) per seed; a missing
    run is listed, not counted"""
    v, w = {}, {}
    for s in seeds:
        f = f'{out}/{tr}-{p}-{s}.csv'
        try:
            rows = list(csv.DictReader(open(f)))
            summ = open(f + '.sum').read().split()
        except OSError:
            missing.append((tr, p, s))
            continue
        for r in rows:
            if r['arrived_pct'] == '100' and r['gpu_alloc_pct']:
                v[s] = float(r['gpu_alloc_pct'])
        for kv in summ:
            if kv.startswith('power_at_100='):
                w[s] = float(kv.split('=')[1])
    return v, w
def fmt(x, f='%.2f'):
    return f % x if x == x else '-'
print('| workload | policy | gpuslice replay (mean of %d seeds) | stdev | paper | error | power_at_100 kW (mean) |' % len(seeds))
print('|---|---|---|---|---|---|---|')
got = {}
for tr in traces:
    for p in pols:
        m, w = mine(tr, p)
        got[(tr, p)] = m
        pp = paper.get(('openb_pod_list_' + tr, names.get(p, '')), [])
        mm = st.mean(m.values()) if m else float('nan')
        sd = st.stdev(m.values()) if len(m) > 1 else 0.0
        pw = fmt(st.mean(w.values()) if w else float('nan'), '%.1f')
        n = '' if len(m) == len(seeds) else f' ({len(m)} seeds)'
        if pp:
            pm = st.mean(pp)
            print(f'| {tr} | {p}{n} | {fmt(mm)} | {sd:.2f} | {pm:.2f} | {fmt(mm - pm, "%+.2f")} | {pw} |')
        else:
            print(f'| {tr} | {p}{n} | {fmt(mm)} | {sd:.2f} | - | - | {pw} |')
if 'fgd' in pols and 'gpuslice' in pols:
    print()
    print('| workload | FGD | gpuslice | gpuslice - FGD (mean) | min / max over seeds | seeds ahead |')
    print('|---|---|---|---|---|---|')
    for tr in traces:
        f, g = got[(tr, 'fgd')], got[(tr, 'gpuslice')]
        both = [s for s in seeds if s in f and s in g]
        if not both:
            print(f'| {tr} | - | - | - | - | - |')
            continue
        d = [g[s] - f[s] for s in both]
        print(f'| {tr} | {st.mean(f[s] for s in both):.2f} | {st.mean(g[s] for s in both):.2f} | '
              f'{st.mean(d):+.2f} | {min(d):+.2f} / {max(d):+.2f} | {sum(x > 0 for x in d)} of {len(both)} |')
if missing:
    cells = {}
    for tr, p, s in missing:
        cells.setdefault((tr, p), []).append(s)
    print()
    print('missing runs (%d): ' % len(missing) +
          '; '.join(f'{tr} {p} ' + ('all seeds' if len(v) == len(seeds) else ' '.join(v))
                    for (tr, p), v in cells.items()))
PY
