#!/usr/bin/env bash
# check_share.sh: the guard's compute share beside a neighbour on a real GPU, the
# simulated NVML's answers against the driver's, and whether the driver enforces a per-container
# memory limit. Read-only towards the GPU: no MIG mode, compute mode, clocks or reset; it only
# queries nvidia-smi / NVML and runs CUDA programs, and stops everything it starts.
#
#   tests/gpu/check_share.sh [GPUSLICE [SIM_LIB]]
#
# GPUSLICE defaults to build/gpuslice, SIM_LIB to build/sim/libgpuslice-nvml-sim.so. Environment:
# OUT (results: $OUT/share-gpu-results.txt and share-gpu-logs.tar.gz), GS_BUDGET_S (default 600),
# GS_SHARE_SECONDS (each measured run, default 12), GS_SHARE_REPS (default 3), GS_SHARE_BACKENDS
# (default "torch driver": guard_torch.py's PyTorch bf16 matmul and driver-API spin kernel), PYTHON,
# PYNVML_DIR (where pynvml is; else tests/nvmlclients/pynvml.sh installs it, which needs the
# package index), GS_SIM_NODE (the node description for the NVML comparison, default
# examples/nodes/h200x8.yaml).
#
# Cases, each GS_SHARE_REPS times and for each backend (share = throughput over the solo run's):
#   alone        --compute 30%, nothing else on the GPU                      30 +- 5 points
#   unguarded    --compute 30% beside an unguarded copy of the same loop     30 +- 5
#   guarded50    --compute 30% beside a --compute 50% copy                   30 +- 5 and 50 +- 5
#   guarded40    --compute 40% beside another --compute 40%                  40 +- 5 each
# Lines: `FIGURE share_BE_CASE_rN PERCENT percent`, then `PASS|FAIL share_BE_CASE` on the median.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=tests/gpu/lib.sh
. "$here/lib.sh"
gpuslice=${1:-$root/build/gpuslice}
sim_lib=${2:-$root/build/sim/libgpuslice-nvml-sim.so}
budget=${GS_BUDGET_S:-600} dev=0 cap_reserve=10 cap_min=20 why_max=200
secs=${GS_SHARE_SECONDS:-12} reps=${GS_SHARE_REPS:-3} backends=${GS_SHARE_BACKENDS:-torch driver}
py=${PYTHON:-python3} gt=$here/guard_torch.py
why_first() { grep -m1 '^error' "$1" 2>/dev/null || tail -n 1 "$2" 2>/dev/null || true; }
# shellcheck disable=SC2317 # cleanup runs from lib.sh's exit trap
cleanup() { kill_live; }
gs_setup share
gs_traps
gs_begin check_share.sh
query_gpu name,driver_version,memory.total,mig.mode.current,compute_mode
IFS=, read -r gpu_name gpu_driver _ gpu_mig gpu_cmode <"$logs/gpu.csv"
note "gpu 0: $gpu_name, driver ${gpu_driver# }, MIG ${gpu_mig# }, compute mode ${gpu_cmode# }"

rate() { awk '$1 == "mean" { print $3; exit }' "$1" 2>/dev/null || true; }
busy() { # OUT BE GO PCT: starts one busy loop (PCT 0: unguarded) in the background; sets bg_pid
    local o=$1 be=$2 go=$3 pct=$4 t
    t=$(cap $((secs + 150)) $((secs + 30))) || return 1
    if ((pct == 0)); then
        start_bg "$t" "$o.out" "$o.err" "$py" "$gt" --backend "$be" busy "$secs" "$go"
    else
        start_bg "$t" "$o.out" "$o.err" "$gpuslice" exec --compute "$pct%" -- "$py" "$gt" --backend "$be" busy "$secs" "$go"
    fi
}
pair() { # NAME BE PCT_A PCT_B (PCT_B: -1 none, 0 unguarded): prints "SHARE_A SHARE_B" in % of solo
    local name=$1 be=$2 a=$3 b=$4 go=$logs/$1.go pa pb="" i
    rm -f "$go"
    busy "$logs/$name.a" "$be" "$go" "$a" || return 1
    pa=$bg_pid
    if ((b >= 0)); then busy "$logs/$name.b" "$be" "$go" "$b" || return 1; pb=$bg_pid; fi
    for ((i = 0; i < 1200; i++)); do
        grep -q '^ready' "$logs/$name.a.out" 2>/dev/null && { [[ -z $pb ]] || grep -q '^ready' "$logs/$name.b.out" 2>/dev/null; } && break
        sleep 0.1
    done
    touch "$go"
    wait_bg "$pa" || true
    if [[ -n $pb ]]; then wait_bg "$pb" || true; fi
    echo "$(ratio "$(rate "$logs/$name.a.out")" "$solo" 100) $(ratio "$(rate "$logs/$name.b.out" 2>/dev/null)" "$solo" 100)"
}
median() { tr ' ' '\n' | grep -v '^n/a$' | grep . | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "n/a" }'; }

for be in $backends; do
    o=$logs/solo_$be
    t=$(cap $((secs + 150))) || { check SKIP "share_$be" "out of time"; continue; }
    run_to "$t" "$o.out" "$o.err" "$py" "$gt" --backend "$be" busy "$secs" || true
    solo=$(rate "$o.out")
    if [[ -z $solo ]]; then check SKIP "share_$be" "the solo run gave no rate: $(why "$o.out" "$o.err")"; continue; fi
    figure "share_${be}_solo_rate" "$solo" iters/s
    for c in "alone 30 -1" "unguarded 30 0" "guarded50 30 50" "guarded40 40 40"; do
        read -r cname pa pb <<<"$c"
        as="" bs=""
        for ((r = 1; r <= reps; r++)); do
            res=$(pair "${be}_${cname}_r$r" "$be" "$pa" "$pb") || { note "share_${be}_$cname: out of time after $((r - 1)) runs"; break; }
            read -r x y <<<"$res"
            figure "share_${be}_${cname}_r$r" "$x" percent
            if ((pb > 0)); then figure "share_${be}_${cname}_neighbour_r$r" "$y" percent; bs+=" $y"; fi
            as+=" $x"
        done
        ma=$(echo "$as" | median)
        if ! within "$ma" $((pa - 5)) $((pa + 5)); then
            check FAIL "share_${be}_$cname" "median ${ma}% at ${pa}% (runs:$as)"
        elif ((pb > 0)) && ! within "$(echo "$bs" | median)" $((pb - 5)) $((pb + 5)); then
            check FAIL "share_${be}_$cname" "the ${pb}% neighbour got $(echo "$bs" | median)% (runs:$bs)"
        else
            check PASS "share_${be}_$cname" "median ${ma}% at ${pa}% (runs:$as${bs:+; neighbour:$bs})"
        fi
    done
done

# The simulator's NVML against the driver's (nvidia-ml-py on both).
pdir=${PYNVML_DIR:-}
if [[ -z $pdir ]]; then pdir=$(sh "$root/tests/nvmlclients/pynvml.sh" 2>"$logs/pynvml.err") || pdir=""; fi
if [[ -z $pdir ]]; then
    check SKIP nvml_fidelity "no nvidia-ml-py: $(tail -n 1 "$logs/pynvml.err")"
elif [[ ! -f $sim_lib ]]; then
    check SKIP nvml_fidelity "no simulator library at $sim_lib"
else
    rc=0
    run_to 120 "$logs/compare_nvml.out" "$logs/compare_nvml.err" env PYTHONPATH="$pdir" "$py" "$here/compare_nvml.py" \
        "$sim_lib" "${GS_SIM_NODE:-$root/examples/nodes/h200x8.yaml}" || rc=$?
    grep -E '^(match|differ|info) ' "$logs/compare_nvml.out" | sed 's/^/# nvml /' | tee -a "$results" >/dev/null
    if ((rc == 0)); then check PASS nvml_fidelity "$(tail -n 1 "$logs/compare_nvml.out")"
    else check FAIL nvml_fidelity "$(tail -n 1 "$logs/compare_nvml.out") $(tail -n 1 "$logs/compare_nvml.err")"; fi
fi

# NVIDIA's per-container memory limit (NVIDIA_GPU_MEMORY_LIMITS, driver r615 and newer): present?
major=${gpu_driver# }
major=${major%%.*}
figure driver_major "$major" version
if ((major < 615)); then
    check SKIP memory_limit_env "driver $major is older than r615: no NVIDIA_GPU_MEMORY_LIMITS"
else
    # A child under a 1 GiB limit asks for 2 GiB; refused means the driver enforces it.
    rc=0
    run_to 120 "$logs/memlimit.out" "$logs/memlimit.err" env NVIDIA_GPU_MEMORY_LIMITS=0:1073741824 \
        "$py" "$gt" --backend driver hold 2GiB 1 || rc=$?
    if grep -q '^oom' "$logs/memlimit.out"; then
        check PASS memory_limit_env "a child under NVIDIA_GPU_MEMORY_LIMITS=0:1GiB was refused 2 GiB: the driver enforces it"
    else
        note "memory_limit_env: $(head -n 1 "$logs/memlimit.out") (status $rc): not enforced with this spelling"
        check SKIP memory_limit_env "not enforced by driver $major (or another spelling of the variable)"
    fi
fi
finish 0
