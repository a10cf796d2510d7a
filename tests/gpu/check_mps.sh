#!/usr/bin/env bash
# check_mps.sh: on a machine with a real NVIDIA GPU, measures what MPS does with two CUDA clients
# given 30 % and 70 % active threads, against plain time-slicing (docs/user-guide.md#mps).
# It starts its own nvidia-cuda-mps-control daemon the way the agent does (src/mps/mps.h): a
# private pipe and log directory (CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY under a mktemp
# directory), CUDA_VISIBLE_DEVICES=<the GPU's UUID>, `nvidia-cuda-mps-control -d`, an answer to
# get_default_active_thread_percentage; it always sends it `quit` on exit and removes the
# directory. It never changes GPU settings (no compute mode, MIG mode, clocks or reset): it only
# queries nvidia-smi, runs the MPS daemon and runs CUDA programs (tests/gpu/mps_client.py).
#
#   tests/gpu/check_mps.sh
#
# Environment (all optional):
#   OUT              results go to $OUT/mps-gpu-results.txt, every step's output and the daemon's
#                    control.log/server.log to $OUT/mps-gpu-logs.tar.gz (default /tmp)
#   GS_DEVICE        the GPU's nvidia-smi index (default 0)
#   GS_BUDGET_S      seconds the whole run may take (default 270, under 5 minutes); a step that no
#                    longer fits is reported SKIP
#   GS_MPS_SECONDS   seconds each concurrent pair measures (default 15); GS_MPS_ALONE_SECONDS each
#                    client alone under MPS (default 10); GS_SOLO_SECONDS the plain solo run (8)
#   GS_MPS_CONTROL   the control binary (default nvidia-cuda-mps-control from PATH)
#   GS_MPS_TORCH     auto (default): also a torch pair under MPS when torch imports and time is
#                    left; 0: never; 1: always try
#   PYTHON           the python3 to run mps_client.py (default python3)
#
# Prints `PASS|FAIL|SKIP name: detail` for each check, `FIGURE name value unit` for each figure and
# `# ...` notes, all also into $OUT/mps-gpu-results.txt. Exit status: 0 all passed or skipped,
# 1 a check failed, 77 no GPU here (nvidia-smi missing).
#
# Steps (one kernel for all: mps_client.py's FMA kernel, ITERS calibrated once, alone, without MPS,
# to about 20 ms a launch on the whole GPU; throughput = launches completed per second):
#   plain solo          one client, no MPS: the whole GPU's rate (reference)
#   mps_daemon          the daemon starts in its private directory and answers
#   mps pair            clients with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30 and =70, started together
#                       (a go file), SECONDS each: mps_throughput_30/_70, mps_ratio_70_over_30;
#                       PASS when the ratio is in [1.6, 3.2] (MPS splitting SMs 30:70 gives ~2.33)
#   mps alone 30 / 70   each client alone under MPS with its percentage (figures)
#   mps torch pair      the same with torch matrix products, when torch is there (figures)
#   mps_daemon_quit     `quit` ends the daemon (and its server)
#   timeslice pair      the same two clients without MPS (their pipe directory is an empty one: no
#                       daemon, so they are ordinary CUDA processes and the percentages mean
#                       nothing): ratio ~1.0 (figures)
#
# Time: about 2 minutes (each step runs under `timeout` and within the budget; processes this
# script started are killed on exit, the daemon is told `quit`, then killed by pid if it stays).
set -Eeuo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
py=${PYTHON:-python3}
client=$here/mps_client.py
budget=${GS_BUDGET_S:-270}
t_pair=${GS_MPS_SECONDS:-15}
t_alone=${GS_MPS_ALONE_SECONDS:-10}
t_solo=${GS_SOLO_SECONDS:-8}
torch_mode=${GS_MPS_TORCH:-auto}
mps_control=${GS_MPS_CONTROL:-nvidia-cuda-mps-control}
dev=${GS_DEVICE:-0}
cap_reserve=25 cap_min=20 why_max=400 # lib.sh: cap keeps 25 s for quit, cleanup and tar; wants 20 s
gs_setup mps                          # $OUT/mps-gpu-results.txt, $OUT/mps-gpu-logs.tar.gz
stopped_see="the logs" keep_results=1 # the tarball holds a copy of the results file too

# Each client's environment is set per run: nothing inherited may pick a daemon, a limit or a device.
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY CUDA_MPS_ACTIVE_THREAD_PERCENTAGE \
    CUDA_MPS_PINNED_DEVICE_MEM_LIMIT CUDA_VISIBLE_DEVICES GPUSLICE_GUARD_CONFIG
case ${LD_PRELOAD:-} in *libgpuslice-guard*) unset LD_PRELOAD ;; esac
export PYTHONUNBUFFERED=1 CUDA_DEVICE_ORDER=PCI_BUS_ID

# ---- reporting (say, check, figure, note, why, rc_note, ratio, within: lib.sh) ------------------

jget() { # FILE EVENT KEY: a number or string field of the first JSON line with that event
    awk -v ev="$2" -v k="$3" '
        index($0, "\"event\": \"" ev "\"") {
            if (match($0, "\"" k "\": (\"[^\"]*\"|[-+0-9.eE]+|true|false|null)")) {
                v = substr($0, RSTART + length(k) + 4, RLENGTH - length(k) - 4)
                gsub(/^"|"$/, "", v)
                print v
                exit
            }
        }' "$1" 2>/dev/null || true
}

why_first() { # OUT ERR (for lib.sh's why): the client's JSON error message
    local s
    s=$(jget "$1" error message)
    [[ -z $s ]] || s="error: $s"
    printf '%s' "$s"
}

ticks() { # OUT: the per-second rates
    awk 'index($0, "\"event\": \"tick\"") && match($0, /"iters_per_s": [-+0-9.eE]+/) {
        printf "%s ", substr($0, RSTART + 15, RLENGTH - 15) }' "$1" 2>/dev/null || true
}

# ---- the MPS daemon ---------------------------------------------------------------------------

mps_dir="" mps_pipe="" mps_log="" mps_pid="" mps_up=0 gpu_uuid=""
mps_servers=() # server pids seen (get_server_list)
n_servers=0
denv=()        # the daemon's environment

mps_cmd() { # OUT TIMEOUT COMMAND: one command to the daemon through the control binary (the client)
    local rc=0
    printf '%s\n' "$3" | timeout -k 2 "$2" env "${denv[@]}" "$mps_control" >"$1" 2>&1 || rc=$?
    return "$rc"
}

procs_with_pipe() { # DIR: pids whose environment names DIR as CUDA_MPS_PIPE_DIRECTORY (only this
    # script's daemon, its server and its clients can: DIR is a fresh mktemp directory)
    local e p
    for e in /proc/[0-9]*/environ; do
        p=${e#/proc/}
        p=${p%/environ}
        [[ $p != "$$" ]] || continue
        if grep -qzxF "CUDA_MPS_PIPE_DIRECTORY=$1" "$e" 2>/dev/null; then echo "$p"; fi
    done
    return 0
}

alive() { kill -0 "$1" 2>/dev/null; }

wait_gone() { # PID SECONDS: 0 once PID has exited
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        alive "$1" || return 0
        sleep 0.1
    done
    ! alive "$1"
}

end_pid() { # PID WHAT: SIGTERM, then SIGKILL, a process this script started
    alive "$1" || return 0
    note "$2 (pid $1) still running: SIGTERM"
    kill -TERM "$1" 2>/dev/null || true
    wait_gone "$1" 3 && return 0
    note "$2 (pid $1) still running: SIGKILL"
    kill -KILL "$1" 2>/dev/null || true
    wait_gone "$1" 2 || true
}

mps_start() { # 0 when the daemon runs and answers
    local rc=0 i p reply=""
    mps_dir=$(mktemp -d /tmp/gs-mps.XXXXXX) # short: <pipe>/control must fit in a unix socket address
    mps_pipe=$mps_dir/pipe
    mps_log=$mps_dir/log
    mkdir -p "$mps_pipe" "$mps_log"
    chmod 755 "$mps_dir" "$mps_pipe" "$mps_log"
    denv=("CUDA_MPS_PIPE_DIRECTORY=$mps_pipe" "CUDA_MPS_LOG_DIRECTORY=$mps_log" "CUDA_VISIBLE_DEVICES=$gpu_uuid")
    note "mps daemon: ${denv[*]} $mps_control -d"
    mps_up=1 # from here on, the exit trap sends quit whatever happens
    run_to 30 "$logs/mps_daemon_start.out" "$logs/mps_daemon_start.err" env "${denv[@]}" "$mps_control" -d || rc=$?
    if ((rc != 0)); then
        check FAIL mps_daemon "$mps_control -d failed ($(rc_note "$rc" 30)): $(why /dev/null "$logs/mps_daemon_start.err"); control.log: $(tail -n 2 "$mps_log/control.log" 2>/dev/null | tr '\n' ' ')"
        return 1
    fi
    for ((i = 0; i < 50; i++)); do # answers within 10 s
        if mps_cmd "$logs/mps_probe.out" 5 get_default_active_thread_percentage; then
            reply=$(tr -d '[:space:]' <"$logs/mps_probe.out")
            [[ ! $reply =~ ^[0-9]+(\.[0-9]+)?$ ]] || break
        fi
        reply=""
        sleep 0.2
    done
    if [[ -f $mps_pipe/nvidia-cuda-mps-control.pid ]]; then
        mps_pid=$(tr -dc '0-9' <"$mps_pipe/nvidia-cuda-mps-control.pid")
    fi
    if [[ -z $mps_pid ]]; then # no pid file: the process with our pipe directory that is the control binary
        for p in $(procs_with_pipe "$mps_pipe"); do
            if [[ $(cat "/proc/$p/comm" 2>/dev/null) == "$(basename "$mps_control" | cut -c1-15)" ]]; then mps_pid=$p; fi
        done
    fi
    if [[ -z $reply ]]; then
        check FAIL mps_daemon "the daemon does not answer get_default_active_thread_percentage after 10 s: $(tr '\n' ' ' <"$logs/mps_probe.out" | cut -c1-200); control.log: $(tail -n 2 "$mps_log/control.log" 2>/dev/null | tr '\n' ' ')"
        return 1
    fi
    check PASS mps_daemon "started in $mps_dir (pid ${mps_pid:-unknown}, CUDA_VISIBLE_DEVICES=$gpu_uuid); get_default_active_thread_percentage answers $reply"
    return 0
}

mps_server_snapshot() { # TAG: server and client pids while clients run, into the logs; sets n_servers
    local s
    n_servers=0
    mps_cmd "$logs/mps_servers_$1.txt" 5 get_server_list || true
    while read -r s; do
        [[ $s =~ ^[0-9]+$ ]] || continue
        n_servers=$((n_servers + 1))
        mps_servers+=("$s")
        mps_cmd "$logs/mps_clients_$1_$s.txt" 5 "get_client_list $s" || true
        note "mps $1: server $s, clients: $(tr '\n' ' ' <"$logs/mps_clients_$1_$s.txt")"
    done <"$logs/mps_servers_$1.txt"
    return 0
}

mps_stop() { # quit, wait, kill what stays (by pid: ours only), keep the logs, remove the directory
    local p rc=0 left
    ((mps_up)) || return 0
    mps_up=0
    mps_cmd "$logs/mps_quit.out" 10 quit || rc=$?
    if [[ -n $mps_pid ]]; then
        if wait_gone "$mps_pid" 10; then
            check PASS mps_daemon_quit "the daemon (pid $mps_pid) exited after quit"
        else
            check FAIL mps_daemon_quit "the daemon (pid $mps_pid) still runs 10 s after quit (client $(rc_note "$rc" 10)): killing it"
            end_pid "$mps_pid" "mps control daemon"
        fi
    else
        note "mps: no daemon pid known (no pid file); quit: $(rc_note "$rc" 10) $(tr '\n' ' ' <"$logs/mps_quit.out" 2>/dev/null | cut -c1-200)"
    fi
    for p in ${mps_servers[@]+"${mps_servers[@]}"}; do
        if alive "$p" && ! wait_gone "$p" 3; then end_pid "$p" "mps server"; fi
    done
    left=$(procs_with_pipe "$mps_pipe" | tr '\n' ' ')
    if [[ -n $left ]]; then
        check FAIL mps_cleanup "processes still using the private pipe directory after quit: $left"
        for p in $left; do end_pid "$p" "process with CUDA_MPS_PIPE_DIRECTORY=$mps_pipe"; done
    fi
    mkdir -p "$logs/mps-daemon-log"
    cp -a "$mps_log/." "$logs/mps-daemon-log/" 2>/dev/null || true
    ls -la "$mps_pipe" >"$logs/mps-pipe-dir.txt" 2>&1 || true
    rm -rf "$mps_dir" 2>/dev/null || true
    return 0
}

# (cap, start_bg, wait_bg, run_to, kill_group, kill_live, finish and the exit trap: lib.sh)
# shellcheck disable=SC2317 # cleanup runs from the exit trap
cleanup() {
    kill_live
    mps_stop
    [[ -z ${nodaemon:-} ]] || rm -rf "$nodaemon" 2>/dev/null || true
}
gs_traps

skip_all() { # REASON
    local c
    for c in mps_daemon mps_split mps_alone timeslice_pair; do check SKIP "$c" "$1"; done
}

# ---- prerequisites ----------------------------------------------------------------------------

gs_begin check_mps.sh

rc=0
run_to 30 "$logs/nvidia-smi-query.csv" "$logs/nvidia-smi-query.err" nvidia-smi \
    --query-gpu=name,uuid,driver_version,compute_mode --format=csv || rc=$?
run_to 30 "$logs/nvidia-smi.txt" "$logs/nvidia-smi.err" nvidia-smi || true
query_gpu name,uuid,driver_version,compute_mode,mig.mode.current,memory.total
IFS=',' read -r gpu_name gpu_uuid gpu_driver gpu_cmode gpu_mig gpu_mem <"$logs/gpu.csv" || true
trim() { local s=$1; s=${s#"${s%%[![:space:]]*}"}; printf '%s' "${s%"${s##*[![:space:]]}"}"; }
gpu_name=$(trim "${gpu_name:-}") gpu_uuid=$(trim "${gpu_uuid:-}") gpu_driver=$(trim "${gpu_driver:-}")
gpu_cmode=$(trim "${gpu_cmode:-}") gpu_mig=$(trim "${gpu_mig:-}") gpu_mem=$(trim "${gpu_mem:-}")
note "gpu $dev: $gpu_name, $gpu_uuid, driver $gpu_driver, compute mode $gpu_cmode, MIG $gpu_mig, $gpu_mem MiB"
if [[ ! $gpu_uuid =~ ^GPU-[0-9a-fA-F-]+$ ]]; then
    check FAIL gpu "nvidia-smi gave no GPU UUID for index $dev: '$(head -c 200 "$logs/gpu.csv")'"
    finish 1
fi
if [[ $gpu_cmode == Prohibited ]]; then
    skip_all "compute mode is Prohibited: no CUDA process may run (this script never changes it)"
    finish 0
fi
if [[ $gpu_mig == Enabled ]]; then
    skip_all "MIG mode is enabled on GPU $dev: this check measures MPS on a whole GPU (this script never changes MIG mode)"
    finish 0
fi
shared_ok=1
if [[ $gpu_cmode != Default ]]; then
    shared_ok=0
    note "compute mode is '$gpu_cmode', not Default: one process at a time, so only MPS (one server process) can run two clients; the time-slicing pair is skipped (this script never changes it)"
fi

run_to 30 "$logs/apps.csv" "$logs/apps.err" nvidia-smi -i "$dev" --query-compute-apps=pid,process_name,used_memory \
    --format=csv,noheader || true
others=$(grep -c '[0-9]' "$logs/apps.csv" || true)
figure gpu_other_processes "$others" processes
if ((others > 0)); then note "other processes use the GPU ($(tr '\n' ';' <"$logs/apps.csv" | cut -c1-200)): the figures below are disturbed by them"; fi
{
    echo "id: $(id 2>&1)"
    echo "control: $mps_control -> $(command -v "$mps_control" 2>&1 || echo missing)"
    echo "server: $(command -v nvidia-cuda-mps-server 2>&1 || echo 'nvidia-cuda-mps-server not in PATH')"
    echo "running mps processes (pgrep, read-only):"
    pgrep -a -f 'nvidia-cuda-mps-(control|server)' 2>&1 || echo none
    df -h /dev/shm 2>&1 || true
} >"$logs/host.txt"
if pgrep -f 'nvidia-cuda-mps-(control|server)' >/dev/null 2>&1; then
    note "an MPS daemon or server of someone else runs on this machine (see host.txt): this script uses its own pipe directory, but the GPU is shared with it"
fi

mps_ok=1 mps_why=""
if ! command -v "$mps_control" >/dev/null; then
    mps_ok=0
    mps_why="$mps_control not found (set GS_MPS_CONTROL to its path)"
elif [[ -z ${GS_MPS_CONTROL:-} ]] && ! command -v nvidia-cuda-mps-server >/dev/null; then
    note "nvidia-cuda-mps-server is not in PATH: the daemon may fail to start a server for the clients"
fi

if ! command -v "$py" >/dev/null; then
    check FAIL python "$py not found: the CUDA clients are python (set PYTHON)"
    finish 1
fi

# The clients' environments. Without MPS: the GPU by UUID, and a pipe directory where no daemon
# listens (so a daemon at the default /tmp/nvidia-mps cannot take them), so each is an ordinary
# CUDA process. Under MPS: the daemon's directories and no CUDA_VISIBLE_DEVICES (NVIDIA's MPS
# documentation: the server exposes only the daemon's device; clients must not set it).
nodaemon=$(mktemp -d /tmp/gs-nomps.XXXXXX)
cenv=()
client_env() { # plain|mps PERCENT(optional)
    if [[ $1 == mps ]]; then
        cenv=("CUDA_MPS_PIPE_DIRECTORY=$mps_pipe" "CUDA_MPS_LOG_DIRECTORY=$mps_log")
    else
        cenv=("CUDA_VISIBLE_DEVICES=$gpu_uuid" "CUDA_MPS_PIPE_DIRECTORY=$nodaemon" "CUDA_MPS_LOG_DIRECTORY=$nodaemon")
    fi
    [[ -z ${2:-} ]] || cenv+=("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$2")
    return 0
}

# ---- the client: probe and calibration, alone and without MPS ----------------------------------

client_env plain
rc=0
run_to 60 "$logs/probe.out" "$logs/probe.err" env "${cenv[@]}" "$py" "$client" probe || rc=$?
if ((rc != 0)) || [[ -z $(jget "$logs/probe.out" probe sms) ]]; then
    check FAIL cuda_client "mps_client.py probe ($(rc_note "$rc" 60)): $(why "$logs/probe.out" "$logs/probe.err")"
    finish 1
fi
jit=$(jget "$logs/probe.out" probe ptx_jit)
sms_full=$(jget "$logs/probe.out" probe sms)
note "client: device $(jget "$logs/probe.out" probe device), driver API $(jget "$logs/probe.out" probe driver_version), $sms_full SMs, PTX JIT $jit"
figure gpu_sms "$sms_full" SMs
if [[ $jit != ok ]]; then
    check FAIL cuda_client "the driver cannot JIT-compile the client's PTX kernel: $jit"
    finish 1
fi

blocks=32768
rc=0
run_to 60 "$logs/calibrate.out" "$logs/calibrate.err" env "${cenv[@]}" "$py" "$client" calibrate --blocks "$blocks" \
    --target-ms 20 || rc=$?
iters=$(jget "$logs/calibrate.out" calibrated iters)
if [[ ! $iters =~ ^[0-9]+$ ]]; then
    check FAIL cuda_client "calibration ($(rc_note "$rc" 60)): $(why "$logs/calibrate.out" "$logs/calibrate.err")"
    finish 1
fi
figure kernel_ms_whole_gpu "$(jget "$logs/calibrate.out" calibrated kernel_ms)" ms
note "kernel: gs_mps_fma, $blocks blocks x 256 threads, $iters loop trips of 16 FMAs (one launch ~20 ms on the whole GPU)"

# run_client NAME SECONDS KIND PERCENT [BACKEND]: one client alone; sets r (iterations/s) or ""
# and r_why (why not: "time budget..." or the client's error)
run_client() {
    local name=$1 secs=$2 kind=$3 pct=$4 be=${5:-driver} t rc=0 o=$logs/$1
    r="" r_why=""
    t=$(cap $((secs + 60)) $((secs + 15))) || { r_why="time budget: $((budget - SECONDS))s left"; return 0; }
    client_env "$kind" "$pct"
    run_to "$t" "$o.out" "$o.err" env "${cenv[@]}" "$py" "$client" --backend "$be" run "$secs" --iters "$iters" \
        --blocks "$blocks" --label "$name" || rc=$?
    r=$(jget "$o.out" result iters_per_s)
    if [[ -z $r ]]; then
        r_why="$name gave no figure ($(rc_note "$rc" "$t")): $(why "$o.out" "$o.err")"
        note "$r_why"
        return 0
    fi
    note "$name: $(jget "$o.out" result launches) launches in $(jget "$o.out" result seconds) s, $(jget "$o.out" result sms) SMs seen, $(jget "$o.out" result tflops) TFLOP/s; per second: $(ticks "$o.out")"
    return 0
}

# run_pair NAME SECONDS KIND [BACKEND]: clients with 30 % and 70 % started together (a go file);
# sets r30 r70 (iterations/s, "" when missing) and pair_why
run_pair() {
    local name=$1 secs=$2 kind=$3 be=${4:-driver} t rc=0 go p30 p70 i ready=0 o30 o70
    r30="" r70="" pair_why=""
    t=$(cap $((secs + 120)) $((secs + 30))) || { pair_why="time budget: $((budget - SECONDS))s left"; return 0; }
    o30=$logs/${name}_30 o70=$logs/${name}_70 go=$logs/$name.go
    rm -f "$go"
    client_env "$kind" 30
    start_bg "$t" "$o30.out" "$o30.err" env "${cenv[@]}" "$py" "$client" --backend "$be" run "$secs" --iters "$iters" \
        --blocks "$blocks" --go "$go" --wait $((t - secs - 5)) --label "${name}_30"
    p30=$bg_pid
    client_env "$kind" 70
    start_bg "$t" "$o70.out" "$o70.err" env "${cenv[@]}" "$py" "$client" --backend "$be" run "$secs" --iters "$iters" \
        --blocks "$blocks" --go "$go" --wait $((t - secs - 5)) --label "${name}_70"
    p70=$bg_pid
    for ((i = 0; i < (t - secs - 10) * 10; i++)); do # both warmed up
        if grep -q '"event": "ready"' "$o30.out" && grep -q '"event": "ready"' "$o70.out"; then
            ready=1
            break
        fi
        if ! alive "$p30" || ! alive "$p70"; then break; fi
        sleep 0.1
    done
    if ((!ready)); then
        kill_group "$p30"
        kill_group "$p70"
        wait_bg "$p30" || true
        wait_bg "$p70" || true
        pair_why="the two clients did not both start: 30 %: $(why "$o30.out" "$o30.err"); 70 %: $(why "$o70.out" "$o70.err")"
        return 0
    fi
    touch "$go"
    sleep 3
    run_to 15 "$logs/${name}_apps.csv" "$logs/${name}_apps.err" nvidia-smi -i "$dev" \
        --query-compute-apps=pid,process_name,used_memory --format=csv,noheader || true
    if [[ $kind == mps ]]; then mps_server_snapshot "$name"; fi
    wait_bg "$p30" || rc=$?
    wait_bg "$p70" || rc=$?
    r30=$(jget "$o30.out" result iters_per_s)
    r70=$(jget "$o70.out" result iters_per_s)
    if [[ -z $r30 || -z $r70 ]]; then
        pair_why="no throughput ($(rc_note "$rc" "$t")): 30 %: $(why "$o30.out" "$o30.err"); 70 %: $(why "$o70.out" "$o70.err")"
        return 0
    fi
    note "$name 30 %: $(jget "$o30.out" result launches) launches in $(jget "$o30.out" result seconds) s, $(jget "$o30.out" result sms) SMs seen; per second: $(ticks "$o30.out")"
    note "$name 70 %: $(jget "$o70.out" result launches) launches in $(jget "$o70.out" result seconds) s, $(jget "$o70.out" result sms) SMs seen; per second: $(ticks "$o70.out")"
    note "$name compute apps (nvidia-smi): $(tr '\n' ';' <"$logs/${name}_apps.csv" | cut -c1-300)"
    return 0
}

# ---- plain solo: the whole GPU's rate ----------------------------------------------------------

run_client solo_plain "$t_solo" plain ""
solo=$r
if [[ -n $solo ]]; then
    figure solo_throughput "$solo" iterations/s
    figure solo_tflops "$(jget "$logs/solo_plain.out" result tflops)" TFLOP/s
elif [[ $r_why == "time budget"* ]]; then
    check SKIP solo_plain "$r_why"
else
    check FAIL solo_plain "$r_why"
fi

# ---- MPS ----------------------------------------------------------------------------------------

if ((!mps_ok)); then
    for c in mps_daemon mps_split mps_alone; do check SKIP "$c" "$mps_why"; done
elif mps_start; then
    run_pair mps_pair "$t_pair" mps
    if [[ -n $r30 && -n $r70 ]]; then
        q=$(ratio "$r70" "$r30")
        s30=$(jget "$logs/mps_pair_30.out" result sms)
        s70=$(jget "$logs/mps_pair_70.out" result sms)
        figure mps_throughput_30 "$r30" iterations/s
        figure mps_throughput_70 "$r70" iterations/s
        figure mps_ratio_70_over_30 "$q" ratio
        figure mps_sms_seen_30 "$s30" SMs
        figure mps_sms_seen_70 "$s70" SMs
        if [[ -n $solo ]]; then
            figure mps_share_30 "$(ratio "$r30" "$solo" 100)" percent_of_solo
            figure mps_share_70 "$(ratio "$r70" "$solo" 100)" percent_of_solo
            figure mps_sum_share "$(awk -v a="$r30" -v b="$r70" -v s="$solo" 'BEGIN { printf "%.1f", 100 * (a + b) / s }')" percent_of_solo
        fi
        if [[ $s30 =~ ^[0-9]+$ && $s70 =~ ^[0-9]+$ ]] && ((s30 > 0 && s30 < sms_full)); then
            note "the clients see $s30 and $s70 of $sms_full SMs: the SM split alone predicts a ratio of $(ratio "$s70" "$s30")"
        fi
        if ((n_servers == 0)); then
            note "get_server_list named no MPS server while the pair ran: were the clients MPS clients at all?"
        fi
        if within "$q" 1.6 3.2; then
            check PASS mps_split "under MPS, 70 % vs 30 % active threads: $r70 vs $r30 iterations/s, ratio $q in [1.6, 3.2] (2.33 when SMs split 70:30)"
        else
            check FAIL mps_split "under MPS, 70 % vs 30 % active threads: $r70 vs $r30 iterations/s, ratio $q not in [1.6, 3.2] (2.33 when SMs split 70:30; ~1 would be time-slicing)"
        fi
    elif [[ $pair_why == "time budget"* ]]; then
        check SKIP mps_split "$pair_why"
    else
        check FAIL mps_split "$pair_why; control.log: $(tail -n 3 "$mps_log/control.log" 2>/dev/null | tr '\n' ' ' | cut -c1-300)"
    fi

    # each alone, with its percentage
    run_client mps_alone_30 "$t_alone" mps 30
    a30=$r alone_why=$r_why
    run_client mps_alone_70 "$t_alone" mps 70
    a70=$r alone_why="$alone_why${alone_why:+; }$r_why"
    for p in 30 70; do
        v=a$p
        [[ -n ${!v} ]] || continue
        figure "mps_alone_throughput_$p" "${!v}" iterations/s
        figure "mps_alone_sms_seen_$p" "$(jget "$logs/mps_alone_$p.out" result sms)" SMs
        [[ -z $solo ]] || figure "mps_alone_share_$p" "$(ratio "${!v}" "$solo" 100)" percent_of_solo
    done
    if [[ -n $a30 && -n $a70 ]]; then
        figure mps_alone_ratio_70_over_30 "$(ratio "$a70" "$a30")" ratio
        [[ -z $r30 ]] || figure mps_pair_over_alone_30 "$(ratio "$r30" "$a30")" ratio
        [[ -z $r70 ]] || figure mps_pair_over_alone_70 "$(ratio "$r70" "$a70")" ratio
        check PASS mps_alone "each client alone under MPS ran: 30 % $a30, 70 % $a70 iterations/s (figures; solo without MPS ${solo:-n/a})"
    elif [[ $alone_why == "time budget"* ]]; then
        check SKIP mps_alone "$alone_why"
    else
        check FAIL mps_alone "$alone_why"
    fi

    # the same pair with torch, when torch is there (figures only)
    if [[ $torch_mode != 0 ]]; then
        if t=$(cap 60 $((t_alone + 60))); then
            client_env plain
            rc=0
            run_to "$t" "$logs/probe_torch.out" "$logs/probe_torch.err" env "${cenv[@]}" "$py" "$client" --backend torch \
                probe || rc=$?
            if [[ -n $(jget "$logs/probe_torch.out" probe sms) ]]; then
                note "torch: $(jget "$logs/probe_torch.out" probe torch) (CUDA $(jget "$logs/probe_torch.out" probe torch_cuda))"
                run_pair mps_torch_pair "$t_alone" mps torch
                if [[ -n $r30 && -n $r70 ]]; then
                    figure mps_torch_throughput_30 "$r30" matmuls/s
                    figure mps_torch_throughput_70 "$r70" matmuls/s
                    figure mps_torch_ratio_70_over_30 "$(ratio "$r70" "$r30")" ratio
                    figure mps_torch_tflops_30 "$(jget "$logs/mps_torch_pair_30.out" result tflops)" TFLOP/s
                    figure mps_torch_tflops_70 "$(jget "$logs/mps_torch_pair_70.out" result tflops)" TFLOP/s
                else
                    note "mps torch pair: $pair_why"
                fi
            elif [[ $torch_mode == 1 ]]; then
                check FAIL mps_torch "GS_MPS_TORCH=1, but torch is not usable ($(rc_note "$rc" "$t")): $(why "$logs/probe_torch.out" "$logs/probe_torch.err")"
            else
                note "no torch pair: $(why "$logs/probe_torch.out" "$logs/probe_torch.err")"
            fi
        else
            note "no torch pair: time budget"
        fi
    fi
else
    for c in mps_split mps_alone; do check SKIP "$c" "no MPS daemon (mps_daemon failed)"; done
fi
mps_stop

# ---- time-slicing: the same pair without MPS ----------------------------------------------------

if ((!shared_ok)); then
    check SKIP timeslice_pair "compute mode $gpu_cmode allows one process at a time"
else
    run_pair timeslice_pair "$t_pair" plain
    if [[ -n $r30 && -n $r70 ]]; then
        figure timeslice_throughput_30 "$r30" iterations/s
        figure timeslice_throughput_70 "$r70" iterations/s
        figure timeslice_ratio_70_over_30 "$(ratio "$r70" "$r30")" ratio
        if [[ -n $solo ]]; then
            figure timeslice_share_30 "$(ratio "$r30" "$solo" 100)" percent_of_solo
            figure timeslice_share_70 "$(ratio "$r70" "$solo" 100)" percent_of_solo
        fi
        check PASS timeslice_pair "without MPS (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE means nothing then): $r70 vs $r30 iterations/s, ratio $(ratio "$r70" "$r30") (figures; ~1.0 expected)"
    elif [[ $pair_why == "time budget"* ]]; then
        check SKIP timeslice_pair "$pair_why"
    else
        check FAIL timeslice_pair "$pair_why"
    fi
fi
finish 0
