#!/usr/bin/env bash
# check_inspect.sh: on a machine with a real NVIDIA GPU, runs `gpuslice inspect` against the
# driver's NVML and checks it against nvidia-smi. Strictly read-only: it never changes MIG mode,
# compute mode or clocks, and never resets a GPU (inspect only reads; nvidia-smi is only queried).
#
#   tests/gpu/check_inspect.sh [PATH/TO/gpuslice] [OUT_DIR]
#
# Writes inspect.json, inspect.txt, nvidia-smi.csv, nvidia-smi-L.txt and the comparison to OUT_DIR
# (default: a temporary directory) and exits non-zero on any mismatch.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
gpuslice=${1:-$here/../../build/gpuslice}
out=${2:-$(mktemp -d)}
mkdir -p "$out"

command -v nvidia-smi >/dev/null || { echo "check_inspect: nvidia-smi not found: not a GPU machine" >&2; exit 77; }

nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id,pci.device_id,mig.mode.current,mig.mode.pending,driver_version \
  --format=csv,noheader,nounits > "$out/nvidia-smi.csv"
nvidia-smi -L > "$out/nvidia-smi-L.txt"
nvidia-smi -q > "$out/nvidia-smi-q.txt" || true
"$gpuslice" inspect --json > "$out/inspect.json"
"$gpuslice" inspect > "$out/inspect.txt"
python3 "$here/compare_inspect.py" "$out/inspect.json" "$out/nvidia-smi.csv" "$out/nvidia-smi-L.txt" | tee "$out/compare.txt"
