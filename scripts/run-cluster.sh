#!/usr/bin/env bash
# run-cluster.sh [up|down|status]: gpuslice in a real one-node Kubernetes without a GPU. Builds
# gpuslice and the cluster's parts (tests/e2e/build.sh: the first time takes long, docs/e2e.md),
# brings up the e2e cluster (tests/e2e/cluster.sh) in ${GS_CLUSTER_DIR:-/tmp/gpuslice-cluster},
# starts gpuslice's agent on a simulated node (4x H100 in MIG mode + 3x L4, the heterogeneous
# policy of examples/policies/) registered with the real kubelet, and prints how to kubectl it.
# GS_BUILD_DIR names gpuslice's build directory (default build). `run-cluster.sh down` stops everything it started (by pid) and keeps the logs; `status` says
# what runs. Needs root, like the kubelet and containerd it starts. Everything listens on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${GS_CLUSTER_DIR:-/tmp/gpuslice-cluster}
cmd=${1:-up}
case $cmd in
down|status) exec bash tests/e2e/cluster.sh "$cmd" "$dir" ;;
up) ;;
*) echo "usage: run-cluster.sh [up|down|status]" >&2; exit 2 ;;
esac
bash scripts/deps.sh
build=${GS_BUILD_DIR:-build}
if [ -d "$build" ]; then meson setup --reconfigure "$build" >/dev/null; else meson setup "$build" >/dev/null; fi
ninja -C "$build" >/dev/null
bash tests/e2e/cluster.sh up "$dir"

node=$PWD/examples/nodes/h100x4-l4x3.yaml
policy=$PWD/examples/policies/heterogeneous.yaml
state=$dir/sim
starttime() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | awk '{print $20}'; }
if [ -f "$dir/run/agent.pid" ]; then
    read -r pid st <"$dir/run/agent.pid"
    if [ "$(starttime "$pid")" = "$st" ]; then
        echo "gpuslice's agent already runs (pid $pid); scripts/run-cluster.sh down stops everything"
        exit 0
    fi
fi
mkdir -p "$dir/agent"
# the same hand-made MIG layout as run-sim.sh, for the policy's MIG GPUs
if [ ! -d "$state" ]; then
    gs() { "$build/gpuslice" --sim "$node" --sim-state "$state" "$@" >/dev/null; }
    gs sim mig-create --gpu 0 --profile 3g.40gb --start 0
    gs sim mig-create --gpu 0 --profile 2g.20gb --start 4
    gs sim mig-create --gpu 0 --profile 1g.10gb --start 6
    gs sim mig-create --gpu 1 --profile 7g.80gb --start 0
    gs sim mig-create --gpu 2 --profile 4g.40gb --start 0
    gs sim mig-create --gpu 2 --profile 3g.40gb --start 4
    for slot in 0 1 2 3 4 5 6; do gs sim mig-create --gpu 3 --profile 1g.10gb --start "$slot"; done
fi
# shellcheck disable=SC1091
. "$dir/env"
setsid "$build/gpuslice" --sim "$node" --sim-state "$state" agent --config "$policy" \
    --kubelet-dir "$GS_E2E_KUBELET_DIR/device-plugins" \
    --pod-resources-socket "$GS_E2E_KUBELET_DIR/pod-resources/kubelet.sock" \
    --cdi-root "$GS_E2E_CDI_DIR" --cdi-hook "" --guard-root "$dir/agent/guard" \
    --mig-status-file "$dir/agent/mig-status.json" --features-file "$dir/agent/features" \
    --metrics-address "127.0.0.1:$((GS_E2E_PORT_BASE + 402))" \
    >>"$dir/logs/agent.log" 2>&1 </dev/null &
pid=$!
echo "$pid $(starttime "$pid")" >"$dir/run/agent.pid"
echo "gpuslice agent started (pid $pid, log $dir/logs/agent.log); waiting for the node's GPUs..."
for _ in $(seq 60); do
    kubectl get node "$GS_E2E_NODE" -o 'jsonpath={.status.allocatable}' 2>/dev/null | grep -q nvidia.com && break
    sleep 1
done
cat <<EOF

gpuslice runs on a simulated node in a real one-node Kubernetes ($dir). Try:
  . $dir/env
  kubectl describe node $GS_E2E_NODE | sed -n '/^Capacity/,/^System Info/p'
  kubectl run gpu-test --image $GS_E2E_TEST_IMAGE --image-pull-policy Never --restart Never \\
      --overrides '{"spec":{"hostNetwork":true,"containers":[{"name":"gpu-test","image":"$GS_E2E_TEST_IMAGE","imagePullPolicy":"Never","command":["sh","-c","env | grep NVIDIA; sleep 3600"],"resources":{"limits":{"nvidia.com/mig-1g.10gb":1}}}]}}'
  kubectl get pod gpu-test -o wide
  $build/gpuslice --sim $node --sim-state $state sim xid 4 79     # an Xid on an L4: watch allocatable
  curl -s 127.0.0.1:$((GS_E2E_PORT_BASE + 402))/metrics | grep gpuslice_pod_device_info
Stop it all: scripts/run-cluster.sh down   (logs stay in $dir/logs)
EOF
