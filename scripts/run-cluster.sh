#!/usr/bin/env bash
# run-cluster.sh [--dra] [--no-build] [up|down|status]: gpuslice in a real one-node Kubernetes
# without a GPU. Builds gpuslice and the cluster's parts (tests/e2e/build.sh: the first time takes
# long, docs/e2e.md), brings up the e2e cluster (tests/e2e/cluster.sh) in
# ${GS_CLUSTER_DIR:-/tmp/gpuslice-cluster}, starts gpuslice's agent on a simulated node registered
# with the real kubelet, and prints how to kubectl it:
#   (default) the device plugins: 4x H100 in MIG mode + 3x L4, the heterogeneous policy of
#             examples/policies/
#   --dra     the DRA driver: examples/dra/node.yaml and policy.yaml (a whole, a time-sliced, an
#             MPS and two MIG H100s, every GPU DRA's), the chart's DeviceClasses applied, MPS's
#             control daemon the build's stand-in (tests/mps/fake_mps_control); docs/dra.md
# --no-build uses the build directory as it is (no deps.sh, meson or ninja: the test that runs
# this script). GS_BUILD_DIR names gpuslice's build directory (default build). `run-cluster.sh
# down` stops everything it started (by pid) and keeps the logs; `status` says what runs. Needs
# root, like the kubelet and containerd it starts. Everything listens on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${GS_CLUSTER_DIR:-/tmp/gpuslice-cluster}
cmd=up dra=0 build_it=1
for a in "$@"; do
    case $a in
    --dra) dra=1 ;;
    --no-build) build_it=0 ;;
    up|down|status) cmd=$a ;;
    *) echo "usage: run-cluster.sh [--dra] [--no-build] [up|down|status]" >&2; exit 2 ;;
    esac
done
case $cmd in
down|status) exec bash tests/e2e/cluster.sh "$cmd" "$dir" ;;
esac
build=${GS_BUILD_DIR:-build}
if [ "$build_it" = 1 ]; then
    bash scripts/deps.sh
    if [ -d "$build" ]; then meson setup --reconfigure "$build" >/dev/null; else meson setup "$build" >/dev/null; fi
    ninja -C "$build" >/dev/null
fi
[ -x "$build/gpuslice" ] || { echo "run-cluster.sh: no $build/gpuslice (GS_BUILD_DIR)" >&2; exit 1; }
bash tests/e2e/cluster.sh up "$dir"

starttime() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | awk '{print $20}'; }
if [ -f "$dir/run/agent.pid" ]; then
    read -r pid st <"$dir/run/agent.pid"
    if [ "$(starttime "$pid")" = "$st" ]; then
        echo "gpuslice's agent already runs (pid $pid); scripts/run-cluster.sh down stops everything"
        exit 0
    fi
fi
mkdir -p "$dir/agent"
build=$(cd "$build" && pwd)
# shellcheck disable=SC1091
. "$dir/env"

# --dra: the DRA driver on examples/dra/node.yaml, with the flags the e2e tests give it
# (tests/e2e/cluster_agent.py, one source for both); every GPU is DRA's.
dra_up() {
    local node=$PWD/examples/dra/node.yaml state=$dir/sim-dra work=$dir/agent/dra
    local mps=$build/tests/mps/fake_mps_control argv pid
    [ -x "$mps" ] || { echo "run-cluster.sh: no $mps (the MPS stand-in: a build with tests)" >&2; exit 1; }
    mkdir -p "$work/mps"
    python3 tests/e2e/cluster_agent.py dra-policy examples/dra/policy.yaml "$work/mps" >"$work/policy.yaml"
    python3 tests/e2e/cluster_agent.py classes >"$work/deviceclasses.yaml"
    kubectl apply -f "$work/deviceclasses.yaml" >/dev/null
    python3 tests/e2e/cluster_agent.py dra-argv "$dir" "$build/gpuslice" "$node" "$state" "$work/policy.yaml" \
        "$work" "$mps" >"$work/argv"
    mapfile -d '' -t argv <"$work/argv"
    # the stand-in daemon ends by itself after a day (the agent quits it when it stops)
    GS_FAKE_MPS_LIFETIME_S=86400 setsid "${argv[@]}" >>"$dir/logs/agent.log" 2>&1 </dev/null &
    pid=$!
    echo "$pid $(starttime "$pid")" >"$dir/run/agent.pid"
    echo "gpuslice agent --dra started (pid $pid, log $dir/logs/agent.log); waiting for its ResourceSlices..."
    local sel="spec.nodeName=$GS_E2E_NODE,spec.driver=gpu.gpuslice.io" n=0
    for _ in $(seq 90); do
        n=$(kubectl get resourceslices --field-selector "$sel" -o name 2>/dev/null | wc -l)
        [ "$n" -gt 0 ] && break
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "run-cluster.sh: the agent exited; the end of its log:" >&2
            tail -n 20 "$dir/logs/agent.log" >&2
            exit 1
        fi
        sleep 1
    done
    [ "$n" -gt 0 ] || { echo "run-cluster.sh: no ResourceSlice of the agent after 90 s ($dir/logs/agent.log)" >&2; exit 1; }
    # pods of the default namespace need its service account, which the controller-manager makes
    for _ in $(seq 60); do
        kubectl get serviceaccount default -o name >/dev/null 2>&1 && break
        sleep 1
    done
    cat <<EOF

gpuslice's DRA driver runs on a simulated node in a real one-node Kubernetes ($dir): a whole H100
(GPU 0), a time-sliced H100 (1), an MPS L4 (2), two H100s in MIG mode (3, 4); docs/dra.md. Try:
  . $dir/env
  kubectl get deviceclasses; kubectl get resourceslices
  # examples/dra/claims.yaml's templates and pod, and a pod for each other template, made to run
  # here (the host's network, the local image, a shell printing what it got: docs/e2e.md)
  python3 tests/e2e/cluster_agent.py claims $dir | kubectl apply -f -
  kubectl get pods -o wide; kubectl get resourceclaims
  # kubectl logs and exec do not reach this kubelet (docs/e2e.md): its log files, and ctr's exec
  cat $dir/pod-logs/default_shared-20gi_*/main/0.log
  ctr --address $dir/containerd/containerd.sock -n k8s.io tasks exec --exec-id sh-\$\$ \$(kubectl get pod shared-20gi -o jsonpath='{.status.containerStatuses[0].containerID}' | sed 's|.*//||') cat /etc/gpuslice/guard.conf
  python3 tests/e2e/cluster_agent.py claims $dir | kubectl delete -f -
Stop it all: scripts/run-cluster.sh down   (logs stay in $dir/logs)
EOF
}
if [ "$dra" = 1 ]; then
    dra_up
    exit 0
fi

node=$PWD/examples/nodes/h100x4-l4x3.yaml
policy=$PWD/examples/policies/heterogeneous.yaml
state=$dir/sim
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
python3 tests/e2e/cluster_agent.py agent-argv "$dir" "$build/gpuslice" "$node" "$state" "$policy" "$dir/agent" \
    >"$dir/agent/argv"
mapfile -d '' -t argv <"$dir/agent/argv"
setsid "${argv[@]}" >>"$dir/logs/agent.log" 2>&1 </dev/null &
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
