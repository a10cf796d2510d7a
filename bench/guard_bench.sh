#!/usr/bin/env bash
# guard_bench.sh: the guard's added cost per cuLaunchKernel and per cuMemAlloc_v2+cuMemFree_v2,
# in ns (best of 5 runs of 10M / 1M calls) and in instructions (callgrind, repeatable), with and
# without the guard, over a driver whose calls return at once. usage: bench/guard_bench.sh [BUILD]
set -euo pipefail
build=${1:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ln -s "$PWD/$build/bench/libfake-cuda-bench.so" "$dir/libcuda.so.1"
printf 'gpuslice-guard 1\non-error closed\nregion %s/region\ndevice 0 - 1099511627776 0\n' "$dir" > "$dir/limits"
# the same with a compute limit: the paced launch path (two events and a mutex per launch; the
# stand-in's events take no time, so the pacer never waits and only its bookkeeping is measured)
printf 'gpuslice-guard 1\non-error closed\nregion %s/region2\ndevice 0 - 1099511627776 50\n' "$dir" > "$dir/limits-paced"
app="$build/bench/guard_bench"
guard="$PWD/$build/guard/libgpuslice-guard.so"
best() { # mode n preload?
  local b=""
  for _ in 1 2 3 4 5; do
    local v
    if [ "$3" = yes ]; then
      v=$(LD_LIBRARY_PATH="$dir" LD_PRELOAD="$guard" GPUSLICE_GUARD_CONFIG="$dir/limits" "$app" "$1" "$2" | awk '{print $2}')
    else
      v=$(LD_LIBRARY_PATH="$dir" "$app" "$1" "$2" | awk '{print $2}')
    fi
    if [ -z "$b" ] || awk -v a="$v" -v b="$b" 'BEGIN{exit !(a<b)}'; then b=$v; fi
  done
  echo "$b"
}
instr() { # mode preload?  -> instructions per call from callgrind (100000 calls minus 0)
  local out="$dir/cg.out" total n=100000
  if [ "$2" = yes ]; then
    LD_LIBRARY_PATH="$dir" LD_PRELOAD="$guard" GPUSLICE_GUARD_CONFIG="$dir/limits" valgrind --tool=callgrind --callgrind-out-file="$out" "$app" "$1" $n >/dev/null 2>&1
  else
    LD_LIBRARY_PATH="$dir" valgrind --tool=callgrind --callgrind-out-file="$out" "$app" "$1" $n >/dev/null 2>&1
  fi
  total=$(grep -E '^summary:' "$out" | awk '{print $2}')
  local base_out="$dir/cg0.out"
  if [ "$2" = yes ]; then
    LD_LIBRARY_PATH="$dir" LD_PRELOAD="$guard" GPUSLICE_GUARD_CONFIG="$dir/limits" valgrind --tool=callgrind --callgrind-out-file="$base_out" "$app" "$1" 0 >/dev/null 2>&1
  else
    LD_LIBRARY_PATH="$dir" valgrind --tool=callgrind --callgrind-out-file="$base_out" "$app" "$1" 0 >/dev/null 2>&1
  fi
  local base
  base=$(grep -E '^summary:' "$base_out" | awk '{print $2}')
  awk -v t="$total" -v b="$base" -v n=$n 'BEGIN{printf "%.1f", (t-b)/n}'
}
echo "| call | without guard | with guard | added |"
echo "|---|---|---|---|"
for mode in launch alloc; do
  n=10000000; [ $mode = alloc ] && n=1000000
  a=$(best $mode $n no); b=$(best $mode $n yes)
  printf '| %s (ns/call, best of 5) | %s | %s | %.2f |\n' "$mode" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN{print b-a}')"
  if command -v valgrind >/dev/null; then
    ia=$(instr $mode no); ib=$(instr $mode yes)
    printf '| %s (instructions/call, callgrind) | %s | %s | %.1f |\n' "$mode" "$ia" "$ib" "$(awk -v a="$ia" -v b="$ib" 'BEGIN{print b-a}')"
  fi
done
p=""
for _ in 1 2 3 4 5; do
  v=$(LD_LIBRARY_PATH="$dir" LD_PRELOAD="$guard" GPUSLICE_GUARD_CONFIG="$dir/limits-paced" "$app" launch 1000000 | awk '{print $2}')
  if [ -z "$p" ] || awk -v a="$v" -v b="$p" 'BEGIN{exit !(a<b)}'; then p=$v; fi
done
a=$(best launch 10000000 no)
printf '| launch with a 50 %% compute limit (ns/call, best of 5) | %s | %s | %.2f |\n' "$a" "$p" "$(awk -v a="$a" -v b="$p" 'BEGIN{print b-a}')"
