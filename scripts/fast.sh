#!/usr/bin/env bash
# fast.sh: the fast loop for a contributor: builds (gcc, -Werror) in build-fast/ and runs the unit
# tests and the lint suite (shellcheck, HACKING.md's layering check), nothing else: no apt-get, no
# sanitizer or fuzz build, no integration tests. Arguments are passed to `meson test` (e.g.
# `./scripts/fast.sh plan policy` runs two unit programs). The full suite stays ./scripts/test.sh
# (README, CI).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-fast
if [ -d "$dir" ]; then meson setup --reconfigure "$dir" >/dev/null; else meson setup "$dir" >/dev/null; fi
ninja -C "$dir"
if [ $# -gt 0 ]; then
  exec meson test -C "$dir" --print-errorlogs "$@"
fi
exec meson test -C "$dir" --suite unit --suite lint --print-errorlogs
