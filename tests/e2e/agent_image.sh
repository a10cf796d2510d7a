#!/bin/bash
# agent_image.sh DIR [NAME]: gpuslice's agent image, made without Docker from a build directory and
# imported into the running e2e cluster of DIR (cluster.sh image) as NAME (default
# gpuslice.local/gpuslice:e2e), for the chart's DaemonSet (tests/e2e/test_daemonset.py, docs/e2e.md).
# The image has the Dockerfile's paths, so the chart runs it unchanged:
#   /usr/bin/gpuslice (the ENTRYPOINT), /usr/bin/gpuslice-cdi-hook (static),
#   /usr/lib/gpuslice/libgpuslice-guard.so, /usr/lib/gpuslice/libgpuslice-nvml-sim.so (found by
#   gpuslice in ../lib/gpuslice/ beside itself), /usr/share/gpuslice/examples/nodes/,
#   libcurl (loaded by dlopen at the first API client), every shared library those load (ldd:
#   the loader, libc, libyaml, ...; a sanitizer build's
#   runtimes too) at the host's paths, and Debian's static busybox as /bin/sh, cp, mv, chmod (the
#   chart's install-guard and install-cdi-hook init containers run `/bin/sh -c "cp ... && mv ..."`).
# The binaries: $GPUSLICE, $GPUSLICE_SIM_LIB, $GS_GUARD_LIB, $GS_CDIHOOK (meson's e2e environment
# sets them), else those of $GS_BUILD_DIR (default build/ of the source tree).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dir=${1:-}
name=${2:-gpuslice.local/gpuslice:e2e}
case $dir in /*) ;; *) echo "usage: agent_image.sh DIR [NAME] (DIR: the cluster's absolute path)" >&2; exit 2 ;; esac
die() { echo "[agent_image] $*" >&2; exit 1; }

build=${GS_BUILD_DIR:-$root/build}
gpuslice=${GPUSLICE:-$build/gpuslice}
sim=${GPUSLICE_SIM_LIB:-$build/sim/libgpuslice-nvml-sim.so}
guard=${GS_GUARD_LIB:-$build/guard/libgpuslice-guard.so}
hook=${GS_CDIHOOK:-$build/src/cdihook/gpuslice-cdi-hook}
for f in "$gpuslice" "$sim" "$guard" "$hook"; do
    [ -f "$f" ] || die "$f: not built (GS_BUILD_DIR, or GPUSLICE, GPUSLICE_SIM_LIB, GS_GUARD_LIB, GS_CDIHOOK)"
done
if ! [ -x /bin/busybox ] || ! { ldd /bin/busybox 2>&1 || true; } | grep -q "not a dynamic executable"; then
    die "no static /bin/busybox (scripts/deps.sh installs busybox-static)"
fi
mkdir -p "$dir/images"
rootfs=$(mktemp -d "$dir/images/agent-rootfs.XXXXXX")
trap 'rm -rf "$rootfs"' EXIT

# put SRC DST: the file SRC (its target, if a link) at DST inside the image.
put() { install -D -m "${3:-0755}" "$(realpath "$1")" "$rootfs/$2"; }

put "$gpuslice" usr/bin/gpuslice
put "$hook" usr/bin/gpuslice-cdi-hook
put "$guard" usr/lib/gpuslice/libgpuslice-guard.so
put "$sim" usr/lib/gpuslice/libgpuslice-nvml-sim.so
# libcurl, which src/kube loads at its first API client (dlopen: ldd does not name it)
curl=$(ldconfig -p | awk '$1 == "libcurl.so.4" && /x86-64/ && !n++ {print $NF}')  # no early exit: pipefail
[ -n "$curl" ] || die "no libcurl.so.4 (Debian's libcurl4: the Kubernetes API client loads it)"
put "$curl" "${curl#/}"
# the shared libraries each loads, at the path the loader finds them (ldd's "NAME => PATH" and
# the loader's own line); the CDI hook is static
for lib in $(ldd "$gpuslice" "$sim" "$guard" "$curl" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// && NF > 1 {print $1}' | sort -u); do
    [ -f "$rootfs$lib" ] || put "$lib" "${lib#/}"
done
for f in "$root"/examples/nodes/*.yaml; do
    put "$f" "usr/share/gpuslice/examples/nodes/$(basename "$f")" 0644
done
put /bin/busybox bin/busybox
for a in sh cp mv chmod cat ls; do
    ln -s busybox "$rootfs/bin/$a"
done
mkdir -p "$rootfs/etc" "$rootfs/tmp" "$rootfs/proc" "$rootfs/sys" "$rootfs/dev"
echo "root:x:0:0:root:/:/bin/sh" >"$rootfs/etc/passwd"
echo "root:x:0:" >"$rootfs/etc/group"
bash "$here/cluster.sh" image "$dir" "$name" "$rootfs" '["/usr/bin/gpuslice"]'
