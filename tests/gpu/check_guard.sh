#!/usr/bin/env bash
# check_guard.sh: on a machine with a real NVIDIA GPU, checks the guard (libgpuslice-guard.so)
# through `gpuslice exec` with real CUDA programs (tests/gpu/guard_torch.py): the quota as
# cuMemGetInfo and nvidia-smi report it, the out-of-memory point, two processes under one quota,
# the kernel-launch overhead, and the compute share. It never changes GPU settings (no MIG mode,
# compute mode, clocks or reset): it only queries nvidia-smi and runs CUDA programs.
#
#   tests/gpu/check_guard.sh [PATH/TO/gpuslice]
#
# Environment (all optional):
#   GPUSLICE            the gpuslice binary (default build/gpuslice; the argument wins)
#   GPUSLICE_GUARD_LIB  the guard (default build/guard/libgpuslice-guard.so)
#   PYTHON              the python3 that has torch (default python3)
#   OUT                 results go to $OUT/guard-gpu-results.txt, every step's output to
#                       $OUT/guard-gpu-logs.tar.gz (default /tmp)
#   GS_DEVICE           GPU index to use (default: 0, and exec without --device)
#   GS_BUDGET_S         seconds the whole run may take (default 330, under 6 minutes); a check
#                       that no longer fits is reported SKIP
#   GS_ALLOW_PIP=1      when torch does not import: pip install torch into a venv (needs network)
#   GS_EXEC=gpuslice|emulated  how guarded commands start: `gpuslice exec` (default, when the
#                       binary runs here) or this script's emulation of it (the same limits file
#                       and LD_PRELOAD), for a machine where gpuslice's libraries are missing
#
# Prints `PASS|FAIL|SKIP name: detail` for each check, `FIGURE name value unit` for each figure and
# `# ...` notes, all also into $OUT/guard-gpu-results.txt. Exit status: 0 all passed or skipped,
# 1 a check failed, 77 no GPU here (nvidia-smi missing).
#
# Checks (BE: torch, or the CUDA driver API through ctypes where torch is missing; the driver-API
# ones also run beside torch, since they reach the guard through dlsym, not cuGetProcAddress):
#   exec_basics, nvidia_smi_quota      exec runs a command; nvidia-smi under it reports the quota
#   oom_BE_*                           --vram 10GiB: cuMemGetInfo total = quota; OOM in (9, 10] GiB
#   hold_BE_*                          two processes under one 8 GiB quota (children of ONE exec:
#                                      each exec has its own region): 5+5 refused, 5+2.5 fits,
#                                      a SIGKILLed holder's bytes are reclaimed
#   busy_BE_alone_share, _share        --compute 30%: throughput over solo, alone and beside an
#                                      unguarded competitor; 30 +- 10 points
#   launch_BE                          tiny-kernel launches/s guarded (no compute limit) vs not
#
# Time: about 4 minutes with torch (each torch process takes seconds to start). Every step runs
# under `timeout` and within the budget; background processes are killed on exit.
set -Eeuo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
self=$here/$(basename "$0")
# shellcheck source=lib.sh
. "$here/lib.sh"

to_bytes() { # SIZE (as gpuslice takes it: 10GiB, 512MiB, 1073741824) -> bytes
    local s=$1 n u
    [[ $s =~ ^([0-9]+)([A-Za-z]*)$ ]] || return 1
    n=${BASH_REMATCH[1]} u=${BASH_REMATCH[2]}
    case $u in
    "" | B) echo "$n" ;;
    K | KiB) echo $((n << 10)) ;;
    M | MiB) echo $((n << 20)) ;;
    G | GiB) echo $((n << 30)) ;;
    T | TiB) echo $((n << 40)) ;;
    KB) echo $((n * 1000)) ;;
    MB) echo $((n * 1000000)) ;;
    GB) echo $((n * 1000000000)) ;;
    TB) echo $((n * 1000000000000)) ;;
    *) return 1 ;;
    esac
}

# ---- `gpuslice exec`, emulated: what src/cli/exec.c does, for a machine where the gpuslice binary
# cannot run (its gRPC, YAML, ... libraries missing). The guard itself needs only libc.
if [[ ${1:-} == --exec-emulated ]]; then
    shift
    vram="" compute=0 device=""
    while (($# > 0)); do
        case $1 in
        --vram) vram=$2 && shift 2 ;;
        --compute) compute=${2%\%} && shift 2 ;;
        --device) device=$2 && shift 2 ;;
        --) shift && break ;;
        *) echo "check_guard.sh --exec-emulated: unknown option $1" >&2 && exit 2 ;;
        esac
    done
    bytes=$(to_bytes "$vram") || { echo "check_guard.sh --exec-emulated: bad --vram '$vram'" >&2; exit 2; }
    rt=${XDG_RUNTIME_DIR:-/tmp}
    dir=$(mktemp -d "$rt/gpuslice-exec-XXXXXX")
    trap 'rm -f "$dir/limits" "$dir/region"; rmdir "$dir" 2>/dev/null || true' EXIT
    trap 'exit 143' TERM
    {
        printf 'gpuslice-guard 1\non-error closed\nregion %s\ncontext-overhead 0\n' "$dir/region"
        if [[ -n $device ]]; then
            printf 'device 0 - %s %s\n' "$bytes" "$compute"
        else
            for i in $(seq 0 15); do printf 'device %s - %s %s\n' "$i" "$bytes" "$compute"; done
        fi
    } >"$dir/limits"
    envs=("LD_PRELOAD=${GPUSLICE_GUARD_LIB:?}${LD_PRELOAD:+:$LD_PRELOAD}" "GPUSLICE_GUARD_CONFIG=$dir/limits")
    [[ -z $device ]] || envs+=("CUDA_VISIBLE_DEVICES=$device")
    rc=0
    env "${envs[@]}" "$@" || rc=$?
    exit "$rc"
fi

gpuslice=${1:-${GPUSLICE:-$root/build/gpuslice}}
guard_lib=${GPUSLICE_GUARD_LIB:-$root/build/guard/libgpuslice-guard.so}
py=${PYTHON:-python3}
gt=$here/guard_torch.py
budget=${GS_BUDGET_S:-330}
cap_reserve=10 cap_min=30 why_max=300 # lib.sh: cap keeps 10 s for the end, wants 30 s by default
gs_setup guard                        # $OUT/guard-gpu-results.txt, $OUT/guard-gpu-logs.tar.gz

# The guard must be in the guarded processes only: not in this shell nor in the unguarded runs.
unset GPUSLICE_GUARD_CONFIG
case ${LD_PRELOAD:-} in *libgpuslice-guard*) unset LD_PRELOAD ;; esac
export GPUSLICE_GUARD_LIB=$guard_lib PYTHONUNBUFFERED=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
# Why: guard_torch.py, at the top (PYTORCH_ALLOC_CONF is the name torch >= 2.9 prefers).
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False PYTORCH_ALLOC_CONF=expandable_segments:False

if [[ -n ${GS_DEVICE:-} ]]; then
    dev=$GS_DEVICE
    dev_opt=(--device "$dev")
    uenv=("CUDA_VISIBLE_DEVICES=$dev")
else
    dev=0
    dev_opt=()
    uenv=()
fi

# ---- reporting (say, check, figure, note, why, rc_note: lib.sh) --------------------------------

relay() { # FILE: the PASS/FAIL/SKIP/FIGURE/# lines a python step printed
    local line
    [[ -f $1 ]] || return 0
    while IFS= read -r line; do
        case $line in
        "PASS "* | "SKIP "* | "FIGURE "* | "# "*) say "$line" ;;
        "FAIL "*) say "$line" && failed=1 ;;
        esac
    done <"$1"
    return 0
}

why_first() { # OUT ERR (for lib.sh's why): the step's `error ...` line, else the guard's last word
    local s
    s=$(grep -h -m1 '^error ' "$1" 2>/dev/null || true)
    [[ -n $s ]] || s=$(grep -h 'gpuslice-guard\[' "$2" 2>/dev/null | tail -n 1 || true)
    printf '%s' "$s"
}

guard_notes() { # ERR: the guard's own stderr lines (why it failed open or closed), once each
    local line
    [[ -f $1 ]] || return 0
    while IFS= read -r line; do note "guard said: ${line:0:300}"; done < <(grep -h 'gpuslice-guard\[' "$1" | sort -u | head -n 3 || true)
    return 0
}

# ---- time budget and processes ----------------------------------------------------------------

skip_budget() { check SKIP "$1" "time budget: ${budget}s for the whole run, $((budget - SECONDS))s left"; }

# (cap, start_bg, wait_bg, run_to, kill_group, kill_live, finish and the exit trap: lib.sh)
# shellcheck disable=SC2317 # cleanup runs from the exit trap
cleanup() { kill_live; }
gs_traps

sampler=""
start_sampler() { # FILE: GPU utilization every second while a measurement runs
    timeout -k 2 200 nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -i "$dev" -l 1 \
        >"$1" 2>/dev/null </dev/null &
    sampler=$!
    live+=("$sampler")
}
stop_sampler() {
    [[ -n $sampler ]] || return 0
    kill_group "$sampler"
    wait "$sampler" 2>/dev/null || true
    forget "$sampler"
    sampler=""
}
mean_of() { awk '$1 ~ /^[0-9.]+$/ { s += $1; n++ } END { if (n) printf "%.1f", s / n; else printf "n/a" }' "$1"; }

# ---- prerequisites ----------------------------------------------------------------------------

gs_begin check_guard.sh
query_gpu name,driver_version,memory.total,mig.mode.current,compute_mode
IFS=',' read -r gpu_name gpu_driver gpu_mem gpu_mig gpu_cmode <"$logs/gpu.csv" || true
gpu_mem=${gpu_mem// /} gpu_mig=${gpu_mig# } gpu_cmode=${gpu_cmode# }
note "gpu $dev: ${gpu_name}, driver ${gpu_driver# }, ${gpu_mem} MiB, MIG ${gpu_mig}, compute mode ${gpu_cmode}"
figure gpu_memory_total "$gpu_mem" MiB
rc=0
run_to 30 "$logs/apps.csv" "$logs/apps.err" nvidia-smi -i "$dev" --query-compute-apps=pid,used_memory \
    --format=csv,noheader,nounits || rc=$?
others=$(grep -c '[0-9]' "$logs/apps.csv" || true)
figure gpu_other_processes "$others" processes
if ((others > 0)); then note "other processes use the GPU: the compute figures below are disturbed by them"; fi
shared_ok=1
if [[ $gpu_cmode != Default ]]; then
    shared_ok=0
    note "compute mode is '$gpu_cmode', not Default: the checks that run two CUDA processes at once are skipped (this script never changes it)"
fi

if [[ ! -r $guard_lib ]]; then
    check FAIL guard_lib "$guard_lib not found (build it: meson compile -C build; or set GPUSLICE_GUARD_LIB)"
    finish 1
fi

exec_mode=${GS_EXEC:-auto}
gs_version=""
if [[ $exec_mode != emulated ]]; then
    if [[ -x $gpuslice ]] && gs_version=$(timeout 10 "$gpuslice" --version 2>"$logs/gpuslice-version.err"); then
        exec_mode=gpuslice
    elif [[ $exec_mode == gpuslice ]]; then
        check FAIL gpuslice_binary "GS_EXEC=gpuslice, but $gpuslice does not run: $(why /dev/null "$logs/gpuslice-version.err")"
        finish 1
    else
        if [[ -x $gpuslice ]]; then
            reason="does not run here ($(why /dev/null "$logs/gpuslice-version.err"))"
        else
            reason="is not there or not executable"
        fi
        check SKIP gpuslice_binary "$gpuslice $reason: guarded runs use this script's emulation of gpuslice exec (the same limits file, LD_PRELOAD)"
        exec_mode=emulated
    fi
fi
if [[ $exec_mode == gpuslice ]]; then
    exec_pre=("$gpuslice" exec)
    note "guarded runs: $gs_version exec, guard $guard_lib"
else
    exec_pre=(bash "$self" --exec-emulated)
    note "guarded runs: emulated gpuslice exec, guard $guard_lib"
fi

# exec itself: options accepted (--compute too), the command's exit status passed through.
rc=0
# shellcheck disable=SC2016 # expanded by sh -c, under the guard
run_to 20 "$logs/exec_basics.out" "$logs/exec_basics.err" "${exec_pre[@]}" --vram 1GiB --compute 30% ${dev_opt[@]+"${dev_opt[@]}"} \
    -- sh -c 'test -n "$GPUSLICE_GUARD_CONFIG" && test -r "$GPUSLICE_GUARD_CONFIG" && exit 7' || rc=$?
if ((rc == 7)); then
    check PASS exec_basics "exec --vram 1GiB --compute 30% ran the command with a readable limits file and passed its exit status 7 on"
else
    check FAIL exec_basics "expected exit status 7, got $(rc_note "$rc" 20): $(why /dev/null "$logs/exec_basics.err")"
fi

# nvidia-smi inside the guard: docs/guard.md says nvmlDeviceGetMemoryInfo reports the quota.
rc=0
run_to 30 "$logs/nvsmi_quota.out" "$logs/nvsmi_quota.err" "${exec_pre[@]}" --vram 10GiB ${dev_opt[@]+"${dev_opt[@]}"} \
    -- nvidia-smi -i "$dev" --query-gpu=memory.total,memory.used --format=csv,noheader,nounits || rc=$?
q_total=$(awk -F', *' 'NR == 1 { print $1 }' "$logs/nvsmi_quota.out")
if ((rc == 0)) && [[ $q_total == 10240 ]]; then
    check PASS nvidia_smi_quota "nvidia-smi under exec --vram 10GiB reports memory.total 10240 MiB (physical ${gpu_mem} MiB)"
else
    check FAIL nvidia_smi_quota "nvidia-smi under exec --vram 10GiB: memory.total '${q_total}' MiB ($(rc_note "$rc" 30)), expected 10240 (physical ${gpu_mem}): $(why /dev/null "$logs/nvsmi_quota.err")"
fi

# ---- the python side: torch, or the driver through ctypes --------------------------------------

torch_ok=0 driver_ok=0 jit_ok=0 torch_why="" driver_why=""
if ! command -v "$py" >/dev/null; then
    torch_why="$py not found"
    driver_why=$torch_why
else
    probe_torch() {
        local rc=0 t
        t=$(cap 120) || { torch_why="no time left to import torch"; return 0; }
        run_to "$t" "$logs/probe_torch.out" "$logs/probe_torch.err" env ${uenv[@]+"${uenv[@]}"} "$py" "$gt" --backend torch probe || rc=$?
        if ((rc == 0)) && grep -q '^probe ' "$logs/probe_torch.out"; then
            torch_ok=1
            note "torch: $(grep -m1 '^probe ' "$logs/probe_torch.out")"
        else
            torch_why="torch not usable ($(rc_note "$rc" "$t")): $(why "$logs/probe_torch.out" "$logs/probe_torch.err")"
        fi
    }
    probe_torch
    if ((!torch_ok)) && [[ ${GS_ALLOW_PIP:-0} == 1 ]]; then
        venv=${GS_VENV:-$out_dir/gs-torch-venv}
        if t=$(cap 240 60); then
            note "GS_ALLOW_PIP=1: installing torch into $venv (up to ${t}s)"
            rc=0
            # shellcheck disable=SC2016 # expanded by bash -c
            run_to "$t" "$logs/pip.out" "$logs/pip.err" bash -c \
                '"$1" -m venv --system-site-packages "$2" && "$2/bin/python" -m pip install --quiet torch' _ "$py" "$venv" || rc=$?
            if ((rc == 0)); then
                py=$venv/bin/python
                probe_torch
            else
                torch_why="$torch_why; pip install torch failed ($(rc_note "$rc" "$t")): $(why /dev/null "$logs/pip.err")"
            fi
        else
            torch_why="$torch_why; no time left for pip install torch"
        fi
    elif ((!torch_ok)); then
        torch_why="$torch_why (set GS_ALLOW_PIP=1 to pip install it)"
    fi
    rc=0
    run_to 60 "$logs/probe_driver.out" "$logs/probe_driver.err" env ${uenv[@]+"${uenv[@]}"} "$py" "$gt" --backend driver probe || rc=$?
    if ((rc == 0)) && grep -q '^probe ' "$logs/probe_driver.out"; then
        driver_ok=1
        note "driver API: $(grep -m1 '^probe ' "$logs/probe_driver.out")"
        if grep -q 'ptx_jit=ok' "$logs/probe_driver.out"; then jit_ok=1; fi
    else
        driver_why="the driver through ctypes is not usable ($(rc_note "$rc" 60)): $(why "$logs/probe_driver.out" "$logs/probe_driver.err")"
    fi
fi
if ((torch_ok)); then
    primary=torch
elif ((driver_ok)); then
    primary=driver
    check SKIP torch "$torch_why: the checks run on the CUDA driver API through ctypes instead"
else
    primary=""
    check SKIP torch "$torch_why"
    check SKIP driver_api "$driver_why"
fi

# ---- checks -----------------------------------------------------------------------------------

# oom BACKEND: under exec --vram 10GiB, cuMemGetInfo's total is the quota and 256 MiB allocations
# fail with out-of-memory after (9, 10] GiB. guard_torch.py judges and prints the lines.
step_oom() {
    local be=$1 name=oom_$1 t rc=0
    t=$(cap 150) || { skip_budget "$name"; return 0; }
    run_to "$t" "$logs/$name.out" "$logs/$name.err" "${exec_pre[@]}" --vram 10GiB ${dev_opt[@]+"${dev_opt[@]}"} \
        -- "$py" "$gt" --backend "$be" oom 10GiB || rc=$?
    relay "$logs/$name.out"
    guard_notes "$logs/$name.err"
    if ! grep -Eq "^(PASS|FAIL) ${name}_limit:" "$logs/$name.out"; then
        check FAIL "$name" "no verdict ($(rc_note "$rc" "$t")): $(why "$logs/$name.out" "$logs/$name.err")"
    fi
}

# hold BACKEND: two processes under ONE quota. Each `gpuslice exec` makes its own limits file and
# counters region (a private mkdtemp directory), so two exec invocations never share a quota; the
# processes of one container are the children of one exec: here `exec -- bash hold_inner.sh`.
write_hold_inner() {
    cat >"$logs/hold_inner.sh" <<'EOF'
#!/usr/bin/env bash
# Runs under ONE gpuslice exec (check_guard.sh): every process started here inherits its
# LD_PRELOAD and GPUSLICE_GUARD_CONFIG, so all of them share one limits file and one region.
# A holds 5 GiB; B asks 5 GiB (over the 8 GiB quota together), then 2.5 GiB (fits); A is killed
# with SIGKILL (no exit hook runs); B3 asks 5 GiB (fits once A's bytes are reclaimed).
set -u
py=$1 gt=$2 be=$3 d=$4
G=1073741824
ask() { # NAME BYTES
    timeout --foreground -k 5 60 "$py" "$gt" --backend "$be" hold "$2" 1 >"$d/$1.out" 2>"$d/$1.err" </dev/null
    echo "$1_rc $?"
}
"$py" "$gt" --backend "$be" hold $((5 * G)) 120 >"$d/A.out" 2>"$d/A.err" </dev/null &
a=$!
echo "A_pid $a"
for _ in $(seq 1 900); do
    grep -Eq '^(held|oom|error)' "$d/A.out" 2>/dev/null && break
    kill -0 "$a" 2>/dev/null || break
    sleep 0.1
done
if ! grep -q '^held' "$d/A.out" 2>/dev/null; then
    echo "A_not_held"
    kill -KILL "$a" 2>/dev/null
    wait "$a" 2>/dev/null
    exit 3
fi
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits >"$d/apps.csv" 2>&1 || true
ask B $((5 * G))
ask B2 $((5 * G / 2))
kill -KILL "$a" 2>/dev/null
wait "$a" 2>/dev/null
echo "A_killed"
ask B3 $((5 * G))
EOF
}
answer() { grep -Em1 '^(held|oom|error)' "$1" 2>/dev/null | awk '{ print $1 }' || true; }
step_hold() {
    local be=$1 name=hold_$1 t rc=0 d a b b2 b3 apid used f
    if ((!shared_ok)); then check SKIP "$name" "compute mode $gpu_cmode allows one process only"; return 0; fi
    t=$(cap 200 60) || { skip_budget "$name"; return 0; }
    d=$logs/$name
    mkdir -p "$d"
    [[ -f $logs/hold_inner.sh ]] || write_hold_inner
    run_to "$t" "$d/inner.out" "$d/inner.err" "${exec_pre[@]}" --vram 8GiB ${dev_opt[@]+"${dev_opt[@]}"} \
        -- bash "$logs/hold_inner.sh" "$py" "$gt" "$be" "$d" || rc=$?
    for f in A B B2 B3; do guard_notes "$d/$f.err"; done
    a=$(answer "$d/A.out")
    if [[ $a != held ]]; then
        check FAIL "${name}_A" "process A could not hold 5 GiB under an 8 GiB quota (${a:-no answer}; inner $(rc_note "$rc" "$t")): $(why "$d/A.out" "$d/A.err")"
        return 0
    fi
    apid=$(awk '$1 == "A_pid" { print $2 }' "$d/inner.out")
    used=$(awk -F', *' -v p="$apid" '$1 == p { print $2 }' "$d/apps.csv" 2>/dev/null | head -n 1)
    if [[ $used =~ ^[0-9]+$ ]]; then
        figure "${name}_A_device_used" "$used" MiB
        note "$name: A holds 5120 MiB through the guard; nvidia-smi counts ${used} MiB for it (the difference is the CUDA context, which exec does not count: its limits file says context-overhead 0)"
    else
        note "$name: nvidia-smi lists no compute process with A's pid $apid (a pid namespace?)"
    fi
    b=$(answer "$d/B.out")
    case $b in
    oom) check PASS "${name}_shared_quota" "A holds 5 GiB; B asking 5 GiB under the same 8 GiB quota gets out-of-memory" ;;
    held) check FAIL "${name}_shared_quota" "B got 5 GiB while A held 5 GiB: 10 GiB under one 8 GiB quota" ;;
    *) check FAIL "${name}_shared_quota" "B gave no answer: $(why "$d/B.out" "$d/B.err")" ;;
    esac
    b2=$(answer "$d/B2.out")
    case $b2 in
    held) check PASS "${name}_fits" "B got 2.5 GiB next to A's 5 GiB (7.5 GiB <= 8 GiB)" ;;
    oom) check FAIL "${name}_fits" "B was refused 2.5 GiB next to A's 5 GiB although 7.5 GiB <= 8 GiB" ;;
    *) check FAIL "${name}_fits" "B2 gave no answer: $(why "$d/B2.out" "$d/B2.err")" ;;
    esac
    b3=$(answer "$d/B3.out")
    case $b3 in
    held) check PASS "${name}_dead_reclaimed" "after A was killed with SIGKILL, 5 GiB could be had again (the dead process's bytes were given back)" ;;
    oom) check FAIL "${name}_dead_reclaimed" "A was killed with SIGKILL, yet 5 GiB are still refused: its bytes were not reclaimed" ;;
    *) check FAIL "${name}_dead_reclaimed" "B3 gave no answer ($(rc_note "$rc" "$t")): $(why "$d/B3.out" "$d/B3.err")" ;;
    esac
}

# launch BACKEND N: tiny kernel launches per second, unguarded and under exec (no compute limit:
# the hot path docs/guard.md promises is one atomic load and a branch); then under --compute 100%.
step_launch() {
    local be=$1 n=$2 name=launch_$1 t rc=0 r0 r1 q
    t=$(cap 90 45) || { skip_budget "$name"; return 0; }
    run_to "$t" "$logs/${name}_plain.out" "$logs/${name}_plain.err" env ${uenv[@]+"${uenv[@]}"} \
        "$py" "$gt" --backend "$be" launch "$n" || rc=$?
    r0=$(awk '$1 == "launches_per_s" { print $2; exit }' "$logs/${name}_plain.out")
    if [[ -z $r0 ]]; then
        check FAIL "$name" "unguarded run gave no figure ($(rc_note "$rc" "$t")): $(why "$logs/${name}_plain.out" "$logs/${name}_plain.err")"
        return 0
    fi
    t=$(cap 90 45) || { skip_budget "$name"; return 0; }
    rc=0
    run_to "$t" "$logs/${name}_guard.out" "$logs/${name}_guard.err" "${exec_pre[@]}" --vram 20GiB ${dev_opt[@]+"${dev_opt[@]}"} \
        -- "$py" "$gt" --backend "$be" launch "$n" || rc=$?
    guard_notes "$logs/${name}_guard.err"
    r1=$(awk '$1 == "launches_per_s" { print $2; exit }' "$logs/${name}_guard.out")
    if [[ -z $r1 ]]; then
        check FAIL "$name" "guarded run gave no figure ($(rc_note "$rc" "$t")): $(why "$logs/${name}_guard.out" "$logs/${name}_guard.err")"
        return 0
    fi
    q=$(ratio "$r1" "$r0")
    figure "${name}_unguarded" "$r0" launches/s
    figure "${name}_guarded" "$r1" launches/s
    figure "${name}_ratio" "$q" ratio
    note "$name rounds: unguarded $(sed -n 's/.*rounds //p' "$logs/${name}_plain.out"); guarded $(sed -n 's/.*rounds //p' "$logs/${name}_guard.out")"
    if within "$q" 0.90 1000; then
        check PASS "$name" "guarded $r1 vs unguarded $r0 launches/s (ratio $q >= 0.90; one run each, so a few % is noise)"
    else
        check FAIL "$name" "guarded $r1 vs unguarded $r0 launches/s: ratio $q < 0.90"
    fi
    # With a compute limit every launch goes through the pacer (events around it): its cost, as a
    # figure only (--compute 100%, so the budget itself never makes a launch wait).
    t=$(cap 90 45) || return 0
    rc=0
    run_to "$t" "$logs/${name}_paced.out" "$logs/${name}_paced.err" "${exec_pre[@]}" --vram 20GiB --compute 100% \
        ${dev_opt[@]+"${dev_opt[@]}"} -- "$py" "$gt" --backend "$be" launch "$n" || rc=$?
    r1=$(awk '$1 == "launches_per_s" { print $2; exit }' "$logs/${name}_paced.out")
    if [[ -n $r1 ]]; then
        figure "${name}_paced" "$r1" launches/s
        figure "${name}_paced_ratio" "$(ratio "$r1" "$r0")" ratio
    else
        note "${name}_paced: no figure ($(rc_note "$rc" "$t")): $(why "$logs/${name}_paced.out" "$logs/${name}_paced.err")"
    fi
}

# busy BACKEND SOLO ALONE SHARED: the compute share, with a compute-bound loop (bf16 matrix
# products with torch, an FMA-chain kernel with the driver backend), in three runs:
#   solo    unguarded, alone on the GPU for SOLO s: the reference throughput;
#   alone   under exec --vram 20GiB --compute 30%, alone for ALONE s: the pacer by itself;
#   shared  an unguarded competitor and a process under exec --vram 20GiB --compute 30%, started
#           together (a go file) and run for SHARED s each.
# A share is the guarded process's throughput over the solo throughput; expected 30 +- 10 points.
# GPU utilization (nvidia-smi, every second) is recorded for each run.
busy_rate() { awk '$1 == "mean" { print $3; exit }' "$1" 2>/dev/null || true; }
busy_tflops() { awk '$1 == "mean" { print $5; exit }' "$1" 2>/dev/null || true; }
busy_ticks() { # OUT SOLO_RATE: the per-second shares
    awk -v s="$2" '$1 == "tick" { printf "%.0f ", 100 * $4 / s }' "$1" 2>/dev/null || true
}
share_verdict() { # NAME SHARE DETAIL
    if within "$2" 20 40; then
        check PASS "$1" "under --compute 30% the process got $2% of its solo throughput (expected 30 +- 10); $3"
    else
        local hint=""
        if within "$2" 90 1000; then
            hint="; the pacer never slowed it: do its launches bypass the hooked calls (cuLaunchKernel, cuLaunchKernelEx, cuLaunchCooperativeKernel, cuGraphLaunch and their _ptsz forms)?"
        fi
        check FAIL "$1" "under --compute 30% the process got $2% of its solo throughput, expected 30 +- 10; $3$hint"
    fi
}
step_busy() {
    local be=$1 t_solo=$2 t_alone=$3 t_shared=$4 name=busy_$1 t rc=0 o solo solo_tf a a_share u go pc pg i ready=0 g c share cshare
    if ((!shared_ok)); then check SKIP "$name" "compute mode $gpu_cmode allows one process only"; return 0; fi

    # solo
    t=$(cap $((t_solo + 80)) $((t_solo + 20))) || { skip_budget "$name"; return 0; }
    o=$logs/${name}_solo
    start_sampler "$o.util"
    run_to "$t" "$o.out" "$o.err" env ${uenv[@]+"${uenv[@]}"} "$py" "$gt" --backend "$be" busy "$t_solo" || rc=$?
    stop_sampler
    solo=$(busy_rate "$o.out")
    solo_tf=$(busy_tflops "$o.out")
    if [[ -z $solo ]] || ! within "$solo" 0.000001 1e15; then
        check FAIL "$name" "the solo run gave no throughput ($(rc_note "$rc" "$t")): $(why "$o.out" "$o.err")"
        return 0
    fi
    figure "${name}_solo_throughput" "$solo_tf" TFLOP/s
    figure "${name}_solo_gpu_util" "$(mean_of "$o.util")" percent
    note "$name: $(grep -m1 '^ready' "$o.out"); solo $solo iterations/s"

    # alone, guarded
    if t=$(cap $((t_alone + 80)) $((t_alone + 20))); then
        o=$logs/${name}_alone
        rc=0
        start_sampler "$o.util"
        run_to "$t" "$o.out" "$o.err" "${exec_pre[@]}" --vram 20GiB --compute 30% ${dev_opt[@]+"${dev_opt[@]}"} \
            -- "$py" "$gt" --backend "$be" busy "$t_alone" || rc=$?
        stop_sampler
        guard_notes "$o.err"
        a=$(busy_rate "$o.out")
        if [[ -z $a ]]; then
            check FAIL "${name}_alone_share" "no throughput figure ($(rc_note "$rc" "$t")): $(why "$o.out" "$o.err")"
        else
            a_share=$(ratio "$a" "$solo" 100)
            u=$(mean_of "$o.util")
            figure "${name}_alone_throughput" "$(busy_tflops "$o.out")" TFLOP/s
            figure "${name}_alone_share" "$a_share" percent_of_solo
            figure "${name}_alone_gpu_util" "$u" percent
            note "${name}_alone per second (% of solo): $(busy_ticks "$o.out" "$solo")"
            share_verdict "${name}_alone_share" "$a_share" "alone on the GPU, GPU utilization ${u}%"
        fi
    else
        skip_budget "${name}_alone_share"
    fi

    # shared with an unguarded competitor
    t=$(cap $((t_shared + 150)) $((t_shared + 40))) || { skip_budget "${name}_share"; return 0; }
    go=$logs/${name}.go
    rm -f "$go"
    start_bg "$t" "$logs/${name}_competitor.out" "$logs/${name}_competitor.err" env ${uenv[@]+"${uenv[@]}"} \
        "$py" "$gt" --backend "$be" busy "$t_shared" "$go"
    pc=$bg_pid
    start_bg "$t" "$logs/${name}_guarded.out" "$logs/${name}_guarded.err" "${exec_pre[@]}" --vram 20GiB --compute 30% \
        ${dev_opt[@]+"${dev_opt[@]}"} -- "$py" "$gt" --backend "$be" busy "$t_shared" "$go"
    pg=$bg_pid
    for ((i = 0; i < 1200; i++)); do # both warmed up: at most 120 s
        if grep -q '^ready' "$logs/${name}_competitor.out" && grep -q '^ready' "$logs/${name}_guarded.out"; then
            ready=1
            break
        fi
        if ! kill -0 "$pc" 2>/dev/null || ! kill -0 "$pg" 2>/dev/null; then break; fi
        sleep 0.1
    done
    if ((!ready)); then
        kill_group "$pc"
        kill_group "$pg"
        wait_bg "$pc" || true
        wait_bg "$pg" || true
        check FAIL "${name}_share" "the two processes did not both start: competitor: $(why "$logs/${name}_competitor.out" "$logs/${name}_competitor.err"); guarded: $(why "$logs/${name}_guarded.out" "$logs/${name}_guarded.err")"
        return 0
    fi
    start_sampler "$logs/${name}_shared.util"
    touch "$go"
    rc=0
    wait_bg "$pc" || rc=$?
    wait_bg "$pg" || rc=$?
    stop_sampler
    guard_notes "$logs/${name}_guarded.err"
    g=$(busy_rate "$logs/${name}_guarded.out")
    c=$(busy_rate "$logs/${name}_competitor.out")
    if [[ -z $g || -z $c ]]; then
        check FAIL "${name}_share" "no throughput figure ($(rc_note "$rc" "$t")): competitor: $(why "$logs/${name}_competitor.out" "$logs/${name}_competitor.err"); guarded: $(why "$logs/${name}_guarded.out" "$logs/${name}_guarded.err")"
        return 0
    fi
    share=$(ratio "$g" "$solo" 100)
    cshare=$(ratio "$c" "$solo" 100)
    u=$(mean_of "$logs/${name}_shared.util")
    figure "${name}_guarded_throughput" "$(busy_tflops "$logs/${name}_guarded.out")" TFLOP/s
    figure "${name}_competitor_throughput" "$(busy_tflops "$logs/${name}_competitor.out")" TFLOP/s
    figure "${name}_guarded_share" "$share" percent_of_solo
    figure "${name}_competitor_share" "$cshare" percent_of_solo
    figure "${name}_shared_gpu_util" "$u" percent
    note "${name}_guarded per second (% of solo): $(busy_ticks "$logs/${name}_guarded.out" "$solo")"
    note "${name}_competitor per second (% of solo): $(busy_ticks "$logs/${name}_competitor.out" "$solo")"
    share_verdict "${name}_share" "$share" "next to an unguarded competitor that got ${cshare}%, GPU utilization ${u}%"
}

# Most telling first: a check that no longer fits the budget is reported SKIP.
if [[ -z $primary ]]; then
    for c in oom hold busy launch; do check SKIP "$c" "no CUDA program can run here: $torch_why; $driver_why"; done
else
    step_oom "$primary"
    step_hold "$primary"
    if [[ $primary == torch ]]; then
        step_busy torch 10 10 20
    fi
    # The driver's own cuLaunchKernel (through dlsym) surely passes the guard's hook, whatever path
    # cudart and cuBLAS take: this tells a pacer that is off from launches that bypass it.
    if ((jit_ok)); then
        step_busy driver 6 8 12
    else
        check SKIP busy_driver "the driver API cannot run the PTX kernels: ${driver_why:-$(grep -m1 '^probe' "$logs/probe_driver.out" || true)}"
    fi
    if [[ $primary == torch ]]; then
        step_launch torch 20000
    fi
    if ((jit_ok)); then
        step_launch driver 50000
    fi
    # Memory through the driver API as well: dlsym lookups instead of cudart's cuGetProcAddress.
    if [[ $primary == torch ]] && ((driver_ok)); then
        step_oom driver
        step_hold driver
    elif [[ $primary == torch ]]; then
        check SKIP driver_api "$driver_why"
    fi
fi
finish 0
