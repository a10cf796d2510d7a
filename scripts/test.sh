#!/usr/bin/env bash
# test.sh: the README's second command, and what CI runs (.ci/run). Builds with warnings as
# errors and runs every test: the normal build, the same suite under AddressSanitizer and
# UndefinedBehaviorSanitizer, and a bounded run of each libFuzzer target.
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
echo "== build (gcc, -Werror) and test"
setup build
ninja -C build
meson test -C build --print-errorlogs || status=1
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

echo "== e2e (gpuslice in a one-node Kubernetes on loopback; docs/e2e.md)"
# builds the cluster's parts once (cached by version; progress on the terminal; kwok among them,
# the second node of test_extender_score.py), then the suite
if bash tests/e2e/build.sh >/dev/null; then
  rm -f build/tests/e2e/junit.xml
  meson test -C build --setup e2e --suite e2e --print-errorlogs || status=1
  if [ -f build/tests/e2e/junit.xml ]; then  # every pytest case, not the one meson test
    junit() { sed -n "s/.*<testsuite [^>]*$1=\"\([0-9]*\)\".*/\1/p" build/tests/e2e/junit.xml | head -1; }
    t=$(junit tests); f=$(junit failures); e=$(junit errors); sk=$(junit skipped)
    passed=$((passed + ${t:-0} - ${f:-0} - ${e:-0} - ${sk:-0})); failed=$((failed + ${f:-0} + ${e:-0}))
  else
    echo "e2e: no results (build/tests/e2e/junit.xml missing)"; failed=$((failed + 1)); status=1
  fi
else
  echo "e2e: tests/e2e/build.sh failed"; failed=$((failed + 1)); status=1
fi

echo "tests: $passed passed, $failed failed"
exit $status
