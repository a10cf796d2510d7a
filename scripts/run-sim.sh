#!/usr/bin/env bash
# run-sim.sh: the README's first command. Builds gpuslice and runs its main job on a simulated
# node (no GPU needed): `gpuslice apply` of a per-GPU policy (MIG on the H100s, time-slicing on
# two L4s, the third whole) on 4x H100 + 3x L4, printing every resource and device the node
# advertises to Kubernetes. The simulated node starts fresh each time, with a few MIG instances created the way
# an operator would by hand (`sim mig-create`).
# With arguments, runs gpuslice with them on the same simulated node instead, e.g.
#   scripts/run-sim.sh inspect --json
#   scripts/run-sim.sh agent --config examples/policies/heterogeneous.yaml --kubelet-dir /tmp/kubelet
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
if [ -d build ]; then meson setup --reconfigure build >/dev/null; else meson setup build >/dev/null; fi
ninja -C build >/dev/null
node=examples/nodes/h100x4-l4x3.yaml
state="${GPUSLICE_SIM_STATE:-$PWD/build/sim-state}"
gs() { build/gpuslice --sim "$node" --sim-state "$state" "$@"; }
if [ $# -gt 0 ]; then
  exec build/gpuslice --sim "$node" --sim-state "$state" "$@"
fi
rm -rf "$state"
# GPU 0: 3g.40gb + 2g.20gb + 1g.10gb x2; GPU 1: 7g.80gb; GPU 2: 4g.40gb + 3g.40gb; GPU 3: 1g.10gb x7
gs sim mig-create --gpu 0 --profile 3g.40gb --start 0 >/dev/null
gs sim mig-create --gpu 0 --profile 2g.20gb --start 4 >/dev/null
gs sim mig-create --gpu 0 --profile 1g.10gb --start 6 >/dev/null
gs sim mig-create --gpu 1 --profile 7g.80gb --start 0 >/dev/null
gs sim mig-create --gpu 2 --profile 4g.40gb --start 0 >/dev/null
gs sim mig-create --gpu 2 --profile 3g.40gb --start 4 >/dev/null
for slot in 0 1 2 3 4 5 6; do gs sim mig-create --gpu 3 --profile 1g.10gb --start "$slot" >/dev/null; done
echo "== gpuslice apply --config examples/policies/heterogeneous.yaml (simulated node: $node)"
gs apply --config examples/policies/heterogeneous.yaml
