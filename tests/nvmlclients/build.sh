#!/bin/sh
# build.sh: builds tests/nvmlclients/goplugin (the NVML paths of NVIDIA's device plugin, on
# NVIDIA's go-nvml and go-nvlib at the versions its go.mod pins) into
# ${GPUSLICE_PEERS_CACHE:-$HOME/.cache/gpuslice-peers}/goplugin-VERSIONS/goplugin with the ordinary
# go command and its module proxy, and prints the binary's path. Rebuilt only when the versions or
# the sources change (a stamp of their checksums). Fails when go is missing.
set -eu
src=$(cd "$(dirname "$0")/goplugin" && pwd)
command -v go >/dev/null 2>&1 || { echo "build.sh: go is not installed (needed to build the NVML client)" >&2; exit 1; }
versions=$(sed -n 's#^[[:space:]]*github.com/NVIDIA/\(go-nvml\|go-nvlib\) \(v[^ ]*\).*#\1@\2#p' "$src/go.mod" | sort | tr '\n' '+')
cache=${GPUSLICE_PEERS_CACHE:-${HOME:-/tmp}/.cache/gpuslice-peers}/goplugin-${versions%+}
stamp=$(cat "$src/main.go" "$src/go.mod" "$src/go.sum" | cksum)
if [ -x "$cache/goplugin" ] && [ "$(cat "$cache/stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "$cache/goplugin"
    exit 0
fi
mkdir -p "$cache"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$src/main.go" "$src/go.mod" "$src/go.sum" "$work/"
(
    cd "$work"
    # go-nvml is cgo (it dlopens libnvidia-ml.so.1); its header's deprecation warnings are noise
    CGO_ENABLED=1 CGO_CFLAGS="-O2 -Wno-deprecated-declarations" go build -mod=mod -o "$cache/goplugin.new" . >&2
)
mv "$cache/goplugin.new" "$cache/goplugin"
echo "$stamp" >"$cache/stamp"
echo "$cache/goplugin"
