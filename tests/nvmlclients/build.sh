#!/bin/sh
# build.sh: builds tests/nvmlclients/goplugin (the NVML paths of NVIDIA's device plugin, on
# NVIDIA's go-nvml and go-nvlib at the versions its go.mod pins) into
# ${GPUSLICE_PEERS_CACHE:-$HOME/.cache/gpuslice-peers}/goplugin-VERSIONS/goplugin with the ordinary
# go command and its module proxy, and prints the binary's path. Rebuilt only when the versions or
# the sources change (a stamp of their checksums). Fails when go is missing.
set -eu
# shellcheck source=/dev/null # tests/lib/peercache.sh, linted on its own
. "$(dirname "$0")/../lib/peercache.sh"
src=$(cd "$(dirname "$0")/goplugin" && pwd)
peer_need_go build.sh "the NVML client"
versions=$(sed -n 's#^[[:space:]]*github.com/NVIDIA/\(go-nvml\|go-nvlib\) \(v[^ ]*\).*#\1@\2#p' "$src/go.mod" | sort | tr '\n' '+')
cache=$(peer_dir "goplugin-${versions%+}")
stamp=$(cat "$src/main.go" "$src/go.mod" "$src/go.sum" | cksum)
peer_cached "$cache" goplugin "$stamp" && exit 0
work=$(peer_workdir "$cache")
trap 'rm -rf "$work"' EXIT
cp "$src/main.go" "$src/go.mod" "$src/go.sum" "$work/"
(
    cd "$work"
    # go-nvml is cgo (it dlopens libnvidia-ml.so.1); its header's deprecation warnings are noise
    CGO_ENABLED=1 CGO_CFLAGS="-O2 -Wno-deprecated-declarations" go build -mod=mod -o "$cache/goplugin.new" . >&2
)
peer_install "$cache" goplugin "$stamp"
