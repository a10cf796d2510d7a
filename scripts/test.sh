#!/usr/bin/env bash
# test.sh: the README's second command, and what CI runs (.ci/run). Builds with warnings as
# errors and runs every test: the normal build, the same suite under AddressSanitizer and
# UndefinedBehaviorSanitizer, a bounded run of each libFuzzer target, and the end-to-end suite in a
# real one-node Kubernetes (beside the others: it mostly waits on its cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
# cuda.h of CUDA 12 and 13 (NVIDIA's runtime wheels, cached), for the guard's cuda.h check.
GS_CUDA_INCLUDE=$(bash scripts/cuda-headers.sh)
export GS_CUDA_INCLUDE

setup() { # dir, meson options...
  local dir=$1; shift
  if [ -d "$dir" ]; then meson setup --reconfigure "$dir" "$@" >/dev/null; else meson setup "$dir" "$@" >/dev/null; fi
}

passed=0; failed=0
record() { # testlog.json of one meson test run
  local p f
  p=$(grep -c '"result": "OK"' "$1" || true)
  f=$(grep -c '"result": "\(FAIL\|TIMEOUT\|ERROR\|UNEXPECTEDPASS\)"' "$1" || true)
  passed=$((passed + p)); failed=$((failed + f))
}

status=0
echo "== build (gcc, -Werror)"
setup build
ninja -C build

# The e2e stage mostly waits on its cluster (pods starting, the kubelet's and controllers'
# periods), so it runs beside the other stages, from the same build; its output goes to a log
# printed when it ends. Neither meson test rebuilds (--no-rebuild): build/ is built above.
e2e_log=build/meson-logs/e2e-stage.log
mkdir -p build/meson-logs
rm -f build/tests/e2e/junit.xml
echo "== e2e (gpuslice in a one-node Kubernetes on loopback; docs/e2e.md): started beside the other stages, log in $e2e_log"
(
  # builds the cluster's parts once (cached by version; kwok among them, the second node of
  # test_extender_score.py), then the suite
  if bash tests/e2e/build.sh >/dev/null; then
    exec meson test -C build --no-rebuild --setup e2e --suite e2e --print-errorlogs
  fi
  echo "e2e: tests/e2e/build.sh failed"
  exit 2
) >"$e2e_log" 2>&1 &
e2e_pid=$!
# a later stage that cannot build ends the script (set -e): the e2e stage is still let end (it
# takes its cluster down) and its log shown
trap 'if kill -0 "$e2e_pid" 2>/dev/null; then echo "== waiting for the e2e stage to end"; wait "$e2e_pid"; cat "$e2e_log"; fi' EXIT

echo "== test (gcc build)"
meson test -C build --no-rebuild --print-errorlogs || status=1
record build/meson-logs/testlog.json

echo "== AddressSanitizer + UndefinedBehaviorSanitizer"
setup build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug
ninja -C build-asan
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  meson test -C build-asan --print-errorlogs || status=1
record build-asan/meson-logs/testlog.json

echo "== fuzz targets (clang, libFuzzer, bounded time)"
CC=clang setup build-fuzz -Dfuzz=true -Dtests=false -Db_lundef=false
ninja -C build-fuzz
meson test -C build-fuzz --suite fuzz --print-errorlogs || status=1
record build-fuzz/meson-logs/testlog.json

echo "== e2e: waiting for the stage started beside the others"
e2e_rc=0
wait "$e2e_pid" || e2e_rc=$?
cat "$e2e_log"
[ "$e2e_rc" -eq 0 ] || status=1
if [ -f build/tests/e2e/junit.xml ]; then  # every pytest case, not the one meson test
  junit() { sed -n "s/.*<testsuite [^>]*$1=\"\([0-9]*\)\".*/\1/p" build/tests/e2e/junit.xml | head -1; }
  t=$(junit tests); f=$(junit failures); e=$(junit errors); sk=$(junit skipped)
  passed=$((passed + ${t:-0} - ${f:-0} - ${e:-0} - ${sk:-0})); failed=$((failed + ${f:-0} + ${e:-0}))
else
  echo "e2e: no results (build/tests/e2e/junit.xml missing)"; failed=$((failed + 1)); status=1
fi

echo "tests: $passed passed, $failed failed"
exit $status
