# shellcheck shell=bash disable=SC2154 # budget, dev, cap_reserve, ...: the sourcing script sets them
# lib.sh: what tests/gpu/check_guard.sh and tests/gpu/check_mps.sh share; sourced by them, never run.
# The results file and the logs tarball, the PASS/FAIL/SKIP/FIGURE/# lines, the time budget, the
# steps run under `timeout` (each in its own process group, killed on exit), the exit trap with its
# summary and exit status (0 all passed or skipped, 1 a check failed, 77 no GPU), and the nvidia-smi
# prerequisites. Sourcing it only defines functions and empty state.
#
# The script that sources it
#   sets     budget (seconds for the whole run), dev (the nvidia-smi index), cap_reserve (seconds the
#            budget keeps for the end), cap_min (cap's default MIN), why_max (why's longest answer)
#   defines  why_first OUT ERR (the step's own word on why it gave no answer, or nothing) and
#            cleanup (what the exit trap undoes: kill_live, and whatever else the script started)
#   calls    gs_setup TAG, then gs_traps, then gs_begin SCRIPT, and finish STATUS to exit on purpose.

# ---- results and logs -------------------------------------------------------------------------

gs_setup() { # TAG: results go to $OUT/TAG-gpu-results.txt; the logs stay in a temporary directory
    # and are packed into $OUT/TAG-gpu-logs.tar.gz at the end (one file: a device machine's $OUT
    # brings back only a few)
    gs_tag=$1
    out_dir=${OUT:-/tmp}
    mkdir -p "$out_dir"
    results=$out_dir/$gs_tag-gpu-results.txt
    logs=$(mktemp -d "${TMPDIR:-/tmp}/$gs_tag-gpu-logs.XXXXXX")
    : >"$results"
    stopped_see=$logs # where "stopped early" sends the reader
    keep_results=0    # 1: a copy of the results file goes into the tarball too
}

# ---- reporting --------------------------------------------------------------------------------

failed=0
say() { printf '%s\n' "$*" | tee -a "$results"; }
check() { # STATUS NAME DETAIL
    say "$1 $2: $3"
    if [[ $1 == FAIL ]]; then failed=1; fi
    return 0
}
figure() { say "FIGURE $1 $2 $3"; }
note() { say "# $*"; }

why() { # OUT ERR: one line saying why a step gave no answer
    local s
    s=$(why_first "$1" "$2")
    [[ -n $s ]] || s=$(grep -v '^[[:space:]]*$' "$2" 2>/dev/null | tail -n 1 || true)
    [[ -n $s ]] || s="no output"
    s=${s//$'\n'/ }
    printf '%s' "${s:0:why_max}"
}

rc_note() { # RC TIMEOUT
    if (($1 == 124 || $1 == 137)); then printf 'timed out after %ss' "$2"; else printf 'exit %s' "$1"; fi
}

ratio() { awk -v a="$1" -v b="$2" -v m="${3:-1}" 'BEGIN { if (a != "" && b + 0 > 0) printf "%.3f", m * a / b; else printf "n/a" }'; }
within() { awk -v x="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(x != "n/a" && x != "" && x + 0 >= lo && x + 0 <= hi) }'; }

# ---- time budget and processes ----------------------------------------------------------------

cap() { # WANT [MIN]: prints the timeout to give a step (WANT, or what the budget still allows, less
    # cap_reserve seconds); fails when less than MIN (default cap_min) seconds are left
    local want=$1 min=${2:-$cap_min} left
    left=$((budget - SECONDS - cap_reserve))
    if ((left < min)); then return 1; fi
    if ((want < left)); then echo "$want"; else echo "$left"; fi
}

live=() # pids of `timeout` processes we started; each leads its own process group
forget() {
    local p=$1 q keep=()
    for q in ${live[@]+"${live[@]}"}; do [[ $q == "$p" ]] || keep+=("$q"); done
    live=(${keep[@]+"${keep[@]}"})
}
kill_group() { # PID of a timeout we started: its whole group (gpuslice exec, for one, does not pass SIGTERM on)
    kill -TERM -- "-$1" 2>/dev/null || kill -TERM "$1" 2>/dev/null || true
}
start_bg() { # TIMEOUT OUT ERR CMD...: starts CMD under timeout in the background; sets bg_pid
    local t=$1 o=$2 e=$3
    shift 3
    timeout -k 5 "$t" "$@" >"$o" 2>"$e" </dev/null &
    bg_pid=$!
    live+=("$bg_pid")
}
wait_bg() { # PID: waits for it; returns its exit status
    local rc=0
    wait "$1" || rc=$?
    forget "$1"
    return "$rc"
}
run_to() { # TIMEOUT OUT ERR CMD...: runs CMD under timeout (in the background, so a signal to
    # this script is handled at once); returns CMD's status, 124 when it timed out
    start_bg "$@"
    wait_bg "$bg_pid"
}
kill_live() { # every group still in live: SIGTERM, 2 s, then SIGKILL
    local p
    ((${#live[@]} > 0)) || return 0
    for p in "${live[@]}"; do kill_group "$p"; done
    sleep 2
    for p in "${live[@]}"; do kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null || true; done
    live=()
}

# ---- exit -------------------------------------------------------------------------------------

err_line=""
# shellcheck disable=SC2317 # on_exit runs from the EXIT trap
on_exit() {
    local rc=$?
    trap - EXIT INT TERM
    cleanup
    if ((rc != 0 && rc != 77)) && [[ $rc != "$expected_rc" ]]; then
        check FAIL "check_${gs_tag}_script" "stopped early (status $rc${err_line:+, line $err_line}): see $stopped_see"
    fi
    local np nf ns
    np=$(grep -c '^PASS ' "$results" || true)
    nf=$(grep -c '^FAIL ' "$results" || true)
    ns=$(grep -c '^SKIP ' "$results" || true)
    say "# summary: $np passed, $nf failed, $ns skipped in ${SECONDS}s; logs in $logs and $out_dir/$gs_tag-gpu-logs.tar.gz"
    if ((keep_results)); then cp "$results" "$logs/" 2>/dev/null || true; fi
    tar -czf "$out_dir/$gs_tag-gpu-logs.tar.gz" -C "$(dirname "$logs")" "$(basename "$logs")" 2>/dev/null || true
    if ((rc == 77)); then exit 77; fi
    if ((failed || nf > 0)); then exit 1; fi
    exit "$rc"
}
expected_rc=0
finish() { # STATUS: an exit this script means (not a step that broke)
    expected_rc=$1
    exit "$1"
}
gs_traps() { # from here on every exit goes through on_exit
    trap 'err_line=$LINENO' ERR
    trap on_exit EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# ---- prerequisites ----------------------------------------------------------------------------

gs_begin() { # SCRIPT: the first note; SKIP gpu and exit 77 where nvidia-smi is missing
    note "$1 $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname 2>/dev/null || echo '?'); budget ${budget}s; logs in $logs"
    if ! command -v nvidia-smi >/dev/null; then
        check SKIP gpu "nvidia-smi not found: not a GPU machine"
        finish 77
    fi
}

query_gpu() { # FIELDS: nvidia-smi -i $dev --query-gpu=FIELDS into $logs/gpu.csv; FAIL gpu and exit 1
    # when it fails
    local rc=0
    run_to 30 "$logs/gpu.csv" "$logs/gpu.err" nvidia-smi -i "$dev" --query-gpu="$1" --format=csv,noheader,nounits || rc=$?
    if ((rc != 0)); then
        check FAIL gpu "nvidia-smi -i $dev --query-gpu failed ($(rc_note "$rc" 30)): $(why /dev/null "$logs/gpu.err")"
        finish 1
    fi
}
