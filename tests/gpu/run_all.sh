#!/usr/bin/env bash
# run_all.sh: every real-GPU check in this folder, in one go, within one time budget: what one call
# on a borrowed GPU machine runs. Read-only towards the GPU, as each check is (no MIG mode, compute
# mode, clocks or reset): the guard's CUDA declarations against cuda.h, inspect, the agent on
# NVML, the guard, MPS.
#
#   tests/gpu/run_all.sh [BIN_DIR]
#
# BIN_DIR holds gpuslice and libgpuslice-guard.so (default: build/ and build/guard/ of this
# checkout); BIN_DIR/lib, when there, is put on LD_LIBRARY_PATH for gpuslice and what it execs (for a
# machine without Debian's libyaml, libjansson and libprotobuf-c: copy them there).
#
# Environment: OUT (results, default /tmp/gpuslice-gpu-checks), GS_BUDGET_S (seconds for the
# whole run, default 420: about 5 % inspect and agent, 55 % guard, 40 % MPS), GS_CHECKS (which:
# default "cuda_h inspect agent guard mps"; "share", tests/gpu/check_share.sh, runs only when named:
# it takes about 10 minutes alone, GS_SHARE_BUDGET_S, default 560).
# Writes $OUT/summary.txt (each check's exit status and its PASS/FAIL/SKIP/FIGURE lines), the
# checks' outputs in $OUT/checks-logs.tar.gz and their own log tarballs: at most five files.
# Exit status: 0 when no check failed, 1 otherwise, 77 with no GPU.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${1:-}
if [[ -n $bin ]]; then
    bin=$(cd "$bin" && pwd) || { echo "run_all: no directory $1" >&2; exit 2; }
    gpuslice=$bin/gpuslice guard=$bin/libgpuslice-guard.so
else
    gpuslice=$root/build/gpuslice guard=$root/build/guard/libgpuslice-guard.so
fi
export OUT=${OUT:-/tmp/gpuslice-gpu-checks}
mkdir -p "$OUT"
summary=$OUT/summary.txt
: >"$summary"
budget=${GS_BUDGET_S:-420}
checks=${GS_CHECKS:-cuda_h inspect agent guard mps}

command -v nvidia-smi >/dev/null || { echo "run_all: nvidia-smi not found: not a GPU machine" | tee -a "$summary"; exit 77; }

# gpuslice alone gets the carried libraries: torch and the CUDA programs keep the machine's own.
wrap=$OUT/.gpuslice-wrapped
if [[ -n $bin && -d $bin/lib ]]; then
    mkdir -p "$wrap"
    # shellcheck disable=SC2016 # $LD_LIBRARY_PATH and $@ are the wrapper's, expanded when it runs
    printf '#!/bin/bash\nLD_LIBRARY_PATH=%q${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %q "$@"\n' "$bin/lib" "$gpuslice" >"$wrap/gpuslice"
    chmod +x "$wrap/gpuslice"
    gpuslice=$wrap/gpuslice
fi

{
    echo "# $(date -u +%FT%TZ) $(uname -srm)"
    timeout 30 nvidia-smi --query-gpu=index,name,driver_version,memory.total,mig.mode.current,compute_mode \
        --format=csv,noheader
    timeout 10 "$gpuslice" --version 2>&1 | head -n 2
    timeout 60 python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1 | tail -n 1
} >>"$summary"

status=0
run() { # NAME TIMEOUT CMD...: one check, its output kept in $OUT/NAME.log
    local name=$1 t=$2 rc=0 start=$SECONDS
    shift 2
    timeout -k 10 "$t" "$@" >"$OUT/$name.log" 2>&1 || rc=$?
    echo "== $name: exit $rc after $((SECONDS - start)) s" >>"$summary"
    grep -E '^(PASS|FAIL|SKIP|FIGURE|# )|mismatch|OK|match|differ|hooked|^[-+]' "$OUT/$name.log" >>"$summary" || true
    if ((rc != 0 && rc != 77)); then status=1; fi
}

want() { [[ " $checks " == *" $1 "* ]]; }
if want cuda_h; then # the guard's hand-declared CUDA API against this machine's cuda.h (77 without one)
    run cuda_h 60 sh "$root/tests/guard/check_cuda_h.sh" "$root/guard/cuda_api.h" cc
fi
if want inspect || want agent; then # both read-only NVML; their files go into one tarball
    mkdir -p "$OUT/nvml"
    if want inspect; then run inspect $((budget / 20 + 10)) bash "$here/check_inspect.sh" "$gpuslice" "$OUT/nvml/inspect"; fi
    if want agent; then run agent 120 bash "$here/check_agent.sh" "$gpuslice" "$OUT/nvml/agent"; fi
    tar -C "$OUT" -czf "$OUT/nvml.tar.gz" nvml && rm -rf "$OUT/nvml"
fi
if want guard; then
    GS_BUDGET_S=$((budget * 55 / 100)) GPUSLICE_GUARD_LIB=$guard \
        run guard $((budget * 55 / 100 + 30)) bash "$here/check_guard.sh" "$gpuslice"
fi
if want mps; then
    GS_BUDGET_S=$((budget * 40 / 100)) GS_MPS_TORCH=${GS_MPS_TORCH:-0} GS_MPS_SECONDS=${GS_MPS_SECONDS:-10} \
        GS_MPS_ALONE_SECONDS=${GS_MPS_ALONE_SECONDS:-6} GS_SOLO_SECONDS=${GS_SOLO_SECONDS:-6} \
        run mps $((budget * 40 / 100 + 30)) bash "$here/check_mps.sh"
fi
if want share; then
    GS_BUDGET_S=${GS_SHARE_BUDGET_S:-560} GPUSLICE_GUARD_LIB=$guard run share $((${GS_SHARE_BUDGET_S:-560} + 30)) \
        bash "$here/check_share.sh" "$gpuslice" "${bin:-$root/build}/sim/libgpuslice-nvml-sim.so"
fi
rm -rf "$wrap"
# Few files: a borrowed machine's $OUT brings back at most eight.
(cd "$OUT" && shopt -s nullglob && f=(./*.log ./*-results.txt) && tar -czf checks-logs.tar.gz "${f[@]}" && rm -f "${f[@]}")
cat "$summary"
exit "$status"
