#!/usr/bin/env bash
# plan_trace.sh: `gpuslice plan` on Alibaba's GenAI trace, the four targets of docs/plan.md, each
# timed (wall, user, max RSS) with its GPU count, first-fit decreasing's and the lower bound.
#   bench/plan_trace.sh [BUILD_DIR] [TRACE_DIR]
# BUILD_DIR defaults to build-fast, TRACE_DIR to ../shared/traces/alibaba-genai-v2026 of the checkout.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build-fast}"
trace="${2:-$root/../shared/traces/alibaba-genai-v2026}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
tar -xzf "$trace/pod_gpu_memory_used_bytes_anon.tar.gz" -C "$tmp"
tar -xzf "$trace/pod_gpu_duty_cycle_anon.tar.gz" -C "$tmp"
echo "$(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg), $(git -C "$root" rev-parse --short HEAD)"
for args in "--gpu H200" "--gpu H200 --tolerance 1" "--gpu H100-80GB" "--gpu H100-80GB --tolerance 1"; do
  # shellcheck disable=SC2086  # the arguments are words
  /usr/bin/time -f "%e s wall, %U s user, %M KiB max RSS" -o "$tmp/time" \
    "$build/gpuslice" plan --memory-csv "$tmp/pod_gpu_memory_used_bytes_anon.csv" \
    --duty-csv "$tmp/pod_gpu_duty_cycle_anon.csv" --missing skip $args --json > "$tmp/plan.json"
  python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
b = d["lower_bound"]["bound"]
print("%s: %d GPUs (first-fit decreasing %d, bound %d), %s" % (sys.argv[2], d["gpus"], d["first_fit_decreasing_gpus"], b,
      open(sys.argv[3]).read().strip()))' \
    "$tmp/plan.json" "$args" "$tmp/time"
done
