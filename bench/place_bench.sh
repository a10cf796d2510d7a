#!/bin/sh
# place_bench.sh: placement decision latency (median, p99, max) and replay wall time on the
# 1,213-node Alibaba cluster, one replay per policy (default trace, seed 42, one core), and the
# plot of the allocation curves (docs/fragmentation.png, with gnuplot) from bench/replay_all.sh's output.
# Usage: bench/place_bench.sh [TRACE_DIR] [GPUSLICE] [REPLAY_ALL_OUT]
set -eu
TRACE_DIR=${1:-../shared/traces/alibaba-gpu-v2023}
GPUSLICE=${2:-build/gpuslice}
OUT=${3:-build/replay-all}
echo "| policy | decision median | decision p99 | decision max | replay (10,866 pods) |"
echo "|---|---|---|---|---|"
for p in random dotprod gpuclustering gpupacking bestfit fgd gpuslice; do
    taskset -c 0 "$GPUSLICE" replay --nodes "$TRACE_DIR/openb_node_list_gpu_node.csv" \
        --pods "$TRACE_DIR/openb_pod_list_default.csv" --policy "$p" --seed 42 --timing |
    awk -v p="$p" '/replay_s=/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        printf "| %s | %s us | %s us | %s us | %.2f s |\n", p, v["decision_us_median"], v["decision_us_p99"],
               v["decision_us_max"], v["replay_s"] }'
done
if command -v gnuplot >/dev/null && [ -s "$OUT/default-fgd-42.csv" ]; then
    gnuplot <<GP
set terminal pngcairo size 1000,600 font ",11"
set output "docs/fragmentation.png"
set datafile separator ","
set title "GPU allocation vs arrived workload, Alibaba default trace (1,213 nodes, 6,212 GPUs), seed 42"
set xlabel "arrived workload (% of cluster GPU capacity)"
set ylabel "GPU allocation ratio (%)"
set key left top
set grid
set xrange [60:130]
set yrange [60:100]
plot x title "ideal" dt 2 lc rgb "#999999", \
  "$OUT/default-random-42.csv" using 1:2 with lines lw 2 title "Random", \
  "$OUT/default-dotprod-42.csv" using 1:2 with lines lw 2 title "DotProd", \
  "$OUT/default-gpuclustering-42.csv" using 1:2 with lines lw 2 title "GpuClustering", \
  "$OUT/default-gpupacking-42.csv" using 1:2 with lines lw 2 title "GpuPacking", \
  "$OUT/default-bestfit-42.csv" using 1:2 with lines lw 2 title "BestFit", \
  "$OUT/default-fgd-42.csv" using 1:2 with lines lw 3 title "FGD", \
  "$OUT/default-gpuslice-42.csv" using 1:2 with lines lw 3 title "gpuslice"
GP
    echo "wrote docs/fragmentation.png"
fi
