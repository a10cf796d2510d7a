#!/bin/sh
# build-nvdp.sh: builds NVIDIA's own device plugin (the Go module github.com/NVIDIA/k8s-device-plugin,
# command cmd/nvidia-device-plugin) at a pinned version into
# ${GPUSLICE_PEERS_CACHE:-$HOME/.cache/gpuslice-peers}/nvidia-device-plugin-VERSION/nvidia-device-plugin
# with the ordinary go command and its module proxy, and prints the binary's path. Built once per
# version (a stamp of the version and of this script). The module proxy serves the plugin at
# v0.18.0 only, and without a version list, so `go install MODULE@v0.18.0` cannot resolve it: a
# throwaway module requires it with `go get` and builds the command from there. Fails when go is
# missing.
set -eu
# shellcheck source=/dev/null # tests/lib/peercache.sh, linted on its own
. "$(dirname "$0")/../lib/peercache.sh"
version=${1:-v0.18.0}
module=github.com/NVIDIA/k8s-device-plugin
peer_need_go build-nvdp.sh "NVIDIA's device plugin"
cache=$(peer_dir "nvidia-device-plugin-$version")
stamp="$version $(cksum <"$0")"
peer_cached "$cache" nvidia-device-plugin "$stamp" && exit 0
work=$(peer_workdir "$cache")
trap 'rm -rf "$work"' EXIT
(
    cd "$work"
    printf 'module gpuslice.test/nvdp\n\ngo 1.24\n' >go.mod
    go get "$module/cmd/nvidia-device-plugin@$version" >&2
    # the plugin is cgo (go-nvml dlopens libnvidia-ml.so.1); go-nvml's header warns of deprecations
    CGO_ENABLED=1 CGO_CFLAGS="-O2 -Wno-deprecated-declarations" \
        go build -o "$cache/nvidia-device-plugin.new" "$module/cmd/nvidia-device-plugin" >&2
)
peer_install "$cache" nvidia-device-plugin "$stamp"
