#!/usr/bin/env bash
# check_agent.sh: on a machine with a real NVIDIA GPU, runs the node agent against the driver's
# NVML for a few seconds, with no kubelet (its registration waits for kubelet.sock, which never
# comes), and checks what it produced from the real GPU: the Prometheus metrics, the node labels
# and the CDI spec (device nodes and driver libraries found on this machine), against nvidia-smi
# and the file system (tests/gpu/check_agent.py). It also records the agent's peak resident memory
# with libnvidia-ml loaded. Read-only towards the GPU: the policy is time-slicing (4 replicas, no
# MIG, no MPS); the agent only queries NVML.
#
#   tests/gpu/check_agent.sh [PATH/TO/gpuslice] [OUT_DIR]
#
# Prints `PASS|FAIL name: detail` and `FIGURE name value unit` lines; exit status 0 all passed,
# 1 a check failed, 77 no GPU here.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
gpuslice=${1:-$root/build/gpuslice}
out=${2:-$(mktemp -d)}
py=${PYTHON:-python3}
command -v nvidia-smi >/dev/null || { echo "check_agent: nvidia-smi not found: not a GPU machine" >&2; exit 77; }

mkdir -p "$out/kubelet" "$out/cdi"
nvidia-smi --query-gpu=index,uuid,name,memory.total,driver_version --format=csv,noheader,nounits >"$out/nvidia-smi.csv"
port=$(( (RANDOM % 20000) + 30000 ))
"$gpuslice" agent --config "$root/examples/policies/nvidia-time-slicing.yaml" --kubelet-dir "$out/kubelet" \
    --features-file "$out/features" --metrics-address "127.0.0.1:$port" --cdi-root "$out/cdi" \
    --guard-root "$out/guard" --mig-status-file "$out/mig-status.json" \
    --pod-resources-socket "$out/no-pod-resources.sock" >"$out/agent.log" 2>&1 &
agent=$!
trap 'kill "$agent" 2>/dev/null; wait "$agent" 2>/dev/null' EXIT

# The metrics are served once the first inventory is published: wait up to 15 s for them.
ok=0
for _ in $(seq 1 30); do
    if "$py" -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode())' \
        "http://127.0.0.1:$port/metrics" >"$out/metrics.txt" 2>/dev/null && [[ -s $out/metrics.txt ]]; then
        ok=1
        break
    fi
    sleep 0.5
done
sleep 2 # a few poll rounds (the default poll interval is 2 s) before the memory figure
hwm=$(awk '$1 == "VmHWM:" { print $2 }' "/proc/$agent/status" 2>/dev/null || true)
rss=$(awk '$1 == "VmRSS:" { print $2 }' "/proc/$agent/status" 2>/dev/null || true)
threads=$(awk '$1 == "Threads:" { print $2 }' "/proc/$agent/status" 2>/dev/null || true)
cp "/proc/$agent/smaps" "$out/agent-smaps.txt" 2>/dev/null || true
for t in /proc/"$agent"/task/*; do printf '%s %s\n' "${t##*/}" "$(cat "$t/comm" 2>/dev/null)"; done >"$out/agent-threads.txt" 2>/dev/null
alive=0
kill -0 "$agent" 2>/dev/null && alive=1
kill -TERM "$agent" 2>/dev/null
rc=0
wait "$agent" || rc=$?
trap - EXIT

status=0
if ((ok)); then echo "PASS agent_metrics: served at 127.0.0.1:$port/metrics"; else echo "FAIL agent_metrics: no answer on 127.0.0.1:$port within 15 s" && status=1; fi
if ((alive)) && ((rc == 0)); then
    echo "PASS agent_lifecycle: ran without a kubelet and stopped cleanly on SIGTERM"
else
    echo "FAIL agent_lifecycle: alive=$alive, exit status $rc after SIGTERM: $(tail -n 2 "$out/agent.log" | tr '\n' ' ')" && status=1
fi
echo "FIGURE agent_vmhwm_real_nvml ${hwm:-n/a} kB"
echo "FIGURE agent_vmrss_real_nvml ${rss:-n/a} kB"
echo "FIGURE agent_threads ${threads:-n/a} threads"
# The largest resident mappings (smaps Rss, kB), for where the memory goes.
awk '/^[0-9a-f]+-[0-9a-f]+ / { name = (NF >= 6 ? $6 : "[anon]") } $1 == "Rss:" { rss[name] += $2 }
     END { for (n in rss) print rss[n], n }' "$out/agent-smaps.txt" 2>/dev/null | sort -rn | head -n 6 |
    while read -r kb name; do echo "# agent rss: $kb kB $name"; done
rm -f "$out"/kubelet/*.sock # sockets do not go into the tarball
"$py" "$here/check_agent.py" "$out" || status=1
exit "$status"
