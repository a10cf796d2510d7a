#!/usr/bin/env bash
# run-sim.sh: the README's first command. Builds gpuslice and runs its main job on a simulated
# node (no GPU needed): inspect the example node (4x H100 with MIG, 2x L4).
# Arguments are passed to gpuslice instead, e.g. `scripts/run-sim.sh inspect --json`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
if [ -d build ]; then meson setup --reconfigure build >/dev/null; else meson setup build >/dev/null; fi
ninja -C build >/dev/null
node=examples/nodes/h100x4-l4x2.yaml
state="${GPUSLICE_SIM_STATE:-$PWD/build/sim-state}"
if [ $# -eq 0 ]; then set -- inspect; fi
exec build/gpuslice --sim "$node" --sim-state "$state" "$@"
