#!/usr/bin/env bash
# check_agent.sh: on a machine with a real NVIDIA GPU, runs the node agent against the driver's
# NVML, with no kubelet (its registration waits for kubelet.sock, which never comes), twice:
#
#   1. time-slicing (4 replicas): its Prometheus metrics, node labels and CDI spec (device nodes
#      and driver libraries found on this machine) against nvidia-smi and the file system
#      (tests/gpu/check_agent.py), its clean stop on SIGTERM, its resident memory with
#      libnvidia-ml loaded;
#   2. MPS (4 replicas of 25 %): the agent starts and supervises nvidia-cuda-mps-control for the
#      GPU; a CUDA client given what Allocate gives a container (the GPU's pipe directory and
#      CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25) sees about a quarter of the SMs (mps_client.py
#      probe, beside a probe without MPS); on SIGTERM the agent stops the daemon.
#
# Read-only towards the GPU: no MIG, no compute-mode change (the MPS policy does not ask for
# EXCLUSIVE_PROCESS); the agent only queries NVML and runs the MPS daemon, a user-space process.
#
#   tests/gpu/check_agent.sh [PATH/TO/gpuslice] [OUT_DIR]
#
# Environment: PYTHON (default python3), GS_MPS_CONTROL (the control binary, default: from PATH).
# Prints `PASS|FAIL name: detail`, `FIGURE name value unit` and `# ...` lines; exit status 0 all
# passed, 1 a check failed, 77 no GPU here.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
gpuslice=${1:-$root/build/gpuslice}
out=${2:-$(mktemp -d)}
py=${PYTHON:-python3}
command -v nvidia-smi >/dev/null || { echo "check_agent: nvidia-smi not found: not a GPU machine" >&2; exit 77; }

status=0
check() { # STATUS NAME DETAIL
    echo "$1 $2: $3"
    if [[ $1 == FAIL ]]; then status=1; fi
}

mkdir -p "$out"
nvidia-smi --query-gpu=index,uuid,name,memory.total,driver_version --format=csv,noheader,nounits >"$out/nvidia-smi.csv"
uuid=$(awk -F', *' 'NR == 1 { print $2 }' "$out/nvidia-smi.csv")

agent="" port=0 mps_root="" mps=""
# shellcheck disable=SC2317,SC2009 # called from the EXIT trap; ps: pgrep may be missing
cleanup() { # also when a timeout stops this script: no agent, MPS daemon or temporary root left
    if [[ -n $agent ]]; then
        kill -TERM "$agent" 2>/dev/null
        for _ in $(seq 1 30); do kill -0 "$agent" 2>/dev/null || break; sleep 0.5; done
        kill -KILL "$agent" 2>/dev/null
        agent=""
    fi
    if [[ -n $mps_root && -d $mps_root ]]; then
        if ps -eo comm= | grep -q '^nvidia-cuda-mps'; then
            echo quit | CUDA_MPS_PIPE_DIRECTORY=$mps_root/$uuid/pipe timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1
        fi
        cp -r "$mps_root/$uuid/log" "$mps/daemon-log" 2>/dev/null
        rm -rf "$mps_root"
    fi
}
trap cleanup EXIT
trap 'exit 143' TERM INT

start_agent() { # POLICY DIR [EXTRA...]: the agent in the background; true once its metrics answer (15 s)
    local policy=$1 dir=$2
    shift 2
    mkdir -p "$dir/kubelet" "$dir/cdi"
    # a free port, as the kernel hands one out (the agent logs it if it was taken meanwhile)
    port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$gpuslice" agent --config "$policy" --kubelet-dir "$dir/kubelet" --features-file "$dir/features" \
        --metrics-address "127.0.0.1:$port" --cdi-root "$dir/cdi" --guard-root "$dir/guard" \
        --mig-status-file "$dir/mig-status.json" --pod-resources-socket "$dir/no-pod-resources.sock" "$@" \
        >"$dir/agent.log" 2>&1 &
    agent=$!
    local _
    for _ in $(seq 1 30); do
        metrics "$dir" && return 0
        sleep 0.5
    done
    return 1
}
metrics() { # DIR: the agent's metrics into DIR/metrics.txt
    "$py" -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode())' \
        "http://127.0.0.1:$port/metrics" >"$1/metrics.txt" 2>/dev/null && [[ -s $1/metrics.txt ]]
}
stop_agent() { # NAME DIR: SIGTERM; PASS when it was alive and exits 0 within 15 s
    local name=$1 dir=$2 alive=0 rc=0
    kill -0 "$agent" 2>/dev/null && alive=1
    kill -TERM "$agent" 2>/dev/null
    for _ in $(seq 1 30); do kill -0 "$agent" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$agent" 2>/dev/null; then
        kill -KILL "$agent" 2>/dev/null
        rc=137
        wait "$agent" 2>/dev/null
    else
        wait "$agent" || rc=$?
    fi
    agent=""
    rm -f "$dir"/kubelet/*.sock # sockets do not go into the tarball
    if ((alive)) && ((rc == 0)); then
        check PASS "$name" "ran without a kubelet and stopped cleanly on SIGTERM"
    else
        check FAIL "$name" "alive=$alive, exit status $rc after SIGTERM: $(tail -n 2 "$dir/agent.log" | tr '\n' ' ')"
    fi
}
# ---- 1. time-slicing ----------------------------------------------------------------------------
ts=$out/time-slicing
if start_agent "$root/examples/policies/nvidia-time-slicing.yaml" "$ts"; then
    check PASS agent_metrics "served at 127.0.0.1:$port/metrics"
else
    check FAIL agent_metrics "no answer on 127.0.0.1:$port within 15 s"
fi
sleep 2 # a few poll rounds (every 2 s by default) before the memory figures
st=/proc/$agent/status
echo "FIGURE agent_vmhwm_real_nvml $(awk '$1 == "VmHWM:" { print $2 }' "$st" 2>/dev/null) kB"
echo "FIGURE agent_threads $(awk '$1 == "Threads:" { print $2 }' "$st" 2>/dev/null) threads"
cp "/proc/$agent/smaps" "$ts/agent-smaps.txt" 2>/dev/null || true
for t in /proc/"$agent"/task/*; do printf '%s %s\n' "${t##*/}" "$(cat "$t/comm" 2>/dev/null)"; done >"$ts/agent-threads.txt" 2>/dev/null
# The largest resident mappings (smaps Rss, kB), for where the memory goes.
awk '/^[0-9a-f]+-[0-9a-f]+ / { name = (NF >= 6 ? $6 : "[anon]") } $1 == "Rss:" { rss[name] += $2 }
     END { for (n in rss) print rss[n], n }' "$ts/agent-smaps.txt" 2>/dev/null | sort -rn | head -n 6 |
    while read -r kb name; do echo "# agent rss: $kb kB $name"; done
stop_agent agent_lifecycle "$ts"
cp "$out/nvidia-smi.csv" "$ts/"
"$py" "$here/check_agent.py" "$ts" || status=1

# ---- 2. MPS -------------------------------------------------------------------------------------
# The daemon's control socket path must fit sun_path: a short root under /tmp.
mps_root=$(mktemp -d /tmp/gs-mps-root.XXXXXX)
mps=$out/mps
mkdir -p "$mps"
cat >"$mps/policy.yaml" <<EOF
version: v1
flags:
  mpsRoot: $mps_root
sharing:
  mps:
    resources:
      - name: nvidia.com/gpu
        replicas: 4
        computePerReplica: 25%
EOF
extra=()
[[ -z ${GS_MPS_CONTROL:-} ]] || extra=(--mps-control "$GS_MPS_CONTROL")
running=0
if start_agent "$mps/policy.yaml" "$mps" ${extra[@]+"${extra[@]}"}; then
    for _ in $(seq 1 40); do # the daemon's first answer can take seconds
        metrics "$mps" && grep -q "gpuslice_mps_daemon_state{UUID=\"$uuid\",state=\"running\"} 1" "$mps/metrics.txt" &&
            running=1 && break
        sleep 0.5
    done
fi
if ((running)); then
    check PASS mps_daemon_running "gpuslice_mps_daemon_state running for $uuid"
else
    check FAIL mps_daemon_running "no running daemon in the metrics after 20 s: $(grep -h 'mps' "$mps/agent.log" | tail -n 2 | tr '\n' ' ')"
fi
grep -hE '^nvidia.com/(gpu.sharing-strategy|gpu.replicas|mps.capable)=' "$mps/features" 2>/dev/null | sed 's/^/# label: /'
if grep -qx 'gpuslice.io/gpu.sharing-strategy=mps' "$mps/features" 2>/dev/null; then
    check PASS mps_label "gpuslice.io/gpu.sharing-strategy=mps"
else
    check FAIL mps_label "no gpuslice.io/gpu.sharing-strategy=mps in $mps/features"
fi
# What Allocate gives an MPS replica's container: the pipe directory and the thread percentage.
probe() { # OUT [ENV...]: mps_client.py probe; prints the SM count it saw
    local o=$1
    shift
    # --foreground: in this script's process group, so a timeout of the whole check stops it too
    env "$@" timeout --foreground -k 5 25 "$py" "$here/mps_client.py" probe >"$o" 2>"$o.err"
    "$py" -c 'import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("event") == "probe": print(e.get("sms", "")); break' "$o" 2>/dev/null
}
sms_all=$(probe "$mps/probe-plain.json")
sms_mps=$(probe "$mps/probe-mps.json" "CUDA_MPS_PIPE_DIRECTORY=$mps_root/$uuid/pipe" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25)
echo "FIGURE mps_client_sms_plain ${sms_all:-n/a} SMs"
echo "FIGURE mps_client_sms_25pct ${sms_mps:-n/a} SMs"
if [[ $sms_all =~ ^[0-9]+$ && $sms_mps =~ ^[0-9]+$ ]] &&
    awk -v a="$sms_all" -v m="$sms_mps" 'BEGIN { exit !(m > 0 && m < a && m / a >= 0.20 && m / a <= 0.30) }'; then
    check PASS mps_client_share "a client through the agent's daemon at 25 % sees $sms_mps of $sms_all SMs"
else
    check FAIL mps_client_share "SMs seen: '$sms_mps' under MPS at 25 %, '$sms_all' without: $(tail -qn 1 "$mps/probe-mps.json" "$mps/probe-mps.json.err" 2>/dev/null | tr '\n' ' ')"
fi
stop_agent mps_agent_lifecycle "$mps"
left=""
for _ in $(seq 1 20); do # the server may take a moment after the daemon's quit
    left=$(ps -eo pid=,comm= | awk '$2 ~ /^nvidia-cuda-mps/ { print $1 "/" $2 }' | tr '\n' ' ')
    [[ -n $left ]] || break
    sleep 0.5
done
if [[ -z $left ]]; then
    check PASS mps_daemon_stopped "no nvidia-cuda-mps-control/-server left after the agent stopped"
else
    check FAIL mps_daemon_stopped "still running after the agent stopped: $left (cleanup sends quit)"
fi
exit "$status" # cleanup: the daemon's logs into $mps/daemon-log, the temporary root removed
