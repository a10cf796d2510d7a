#!/usr/bin/env bash
# test-fresh.sh: runs the README's test command as a new user would, to find a test that depends on
# something an earlier run left on the machine. It clones the checkout's commit (default HEAD, or
# the one named) into a new directory beside a link to ../shared, and runs `bash .ci/run` there
# with CI=true and no standard input, in a private mount namespace where /run (so /var/run/cdi)
# is an empty tmpfs and /etc/cdi and /var/lib/kubelet, where the host has them, are empty tmpfs
# too. After the run, each of those paths the host did not have (and /var/log/pods, where a kubelet
# left to its defaults writes pod logs) must still be absent: a test that made one fails the check. Root is needed (unshare -m, mount).
#   scripts/test-fresh.sh [REF]          the cluster parts from the peers cache (as CI has them)
#   scripts/test-fresh.sh --no-cache [REF]
#                                        an empty peers cache of its own: everything is built, as
#                                        on a new machine (about 40 minutes more on 2 cores)
# The clone is left in /tmp/gs-fresh.*/ for its logs (build*/meson-logs).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
cache=""
if [ "${1:-}" = "--no-cache" ]; then cache=yes; shift; fi
ref=${1:-HEAD}
[ "$(id -u)" -eq 0 ] || { echo "test-fresh.sh: run as root (it mounts in a namespace of its own)" >&2; exit 2; }

work=$(mktemp -d /tmp/gs-fresh.XXXXXX)
git clone -q "$src" "$work/gpuslice"
git -C "$work/gpuslice" checkout -q --detach "$(git -C "$src" rev-parse "$ref")"
[ -d "$src/../shared" ] && ln -s "$(cd "$src/../shared" && pwd)" "$work/shared"
[ -n "$cache" ] && export GPUSLICE_PEERS_CACHE=$work/peers

host_paths=(/etc/cdi /var/lib/kubelet /var/run/cdi /run/gpuslice /var/log/pods)
absent=()
for p in "${host_paths[@]}"; do [ -e "$p" ] || absent+=("$p"); done

echo "== test-fresh: $(git -C "$work/gpuslice" log --oneline -1) in $work/gpuslice"
rc=0
# shellcheck disable=SC2016  # expanded by the inner shell
unshare -m --propagation private env GS_FRESH_DIR="$work/gpuslice" bash -c '
  set -eu
  mount -t tmpfs -o mode=0755 gs-fresh-run /run
  mkdir -m 1777 /run/lock
  ln -s /dev/shm /run/shm
  for p in /etc/cdi /var/lib/kubelet; do
    if [ -d "$p" ]; then mount -t tmpfs -o mode=0755 gs-fresh "$p"; fi
  done
  cd "$GS_FRESH_DIR"
  CI=true exec bash .ci/run </dev/null
' || rc=$?

made=()
for p in "${absent[@]}"; do [ -e "$p" ] && made+=("$p"); done
if [ ${#made[@]} -gt 0 ]; then
  echo "test-fresh: the suite made host paths it must not need: ${made[*]}" >&2
  [ "$rc" -ne 0 ] || rc=1
fi
echo "== test-fresh: .ci/run exited $rc (clone and logs in $work)"
exit "$rc"
