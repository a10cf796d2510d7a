# shellcheck shell=sh
# peercache.sh: the cache of the test-only peers built from the Go module proxy (the CDI
# reference library's loader, the NVML clients, NVIDIA's device plugin), sourced by their build
# scripts: one directory per peer and version under
# ${GPUSLICE_PEERS_CACHE:-$HOME/.cache/gpuslice-peers}, a binary and the stamp it was built from.
# (tests/e2e/build.sh keeps the cluster's parts in the same cache with a lock of its own.)

# peer_dir NAME: the cache directory of one peer build.
peer_dir() {
    echo "${GPUSLICE_PEERS_CACHE:-${HOME:-/tmp}/.cache/gpuslice-peers}/$1"
}

# peer_need_go WHO WHAT: fails, naming WHAT, when the go command is missing.
peer_need_go() {
    command -v go >/dev/null 2>&1 || { echo "$1: go is not installed (needed to build $2)" >&2; exit 1; }
}

# peer_cached DIR BIN STAMP: true, printing DIR/BIN, when DIR/BIN exists and was built from STAMP.
peer_cached() {
    if [ -x "$1/$2" ] && [ "$(cat "$1/stamp" 2>/dev/null)" = "$3" ]; then
        echo "$1/$2"
        return 0
    fi
    return 1
}

# peer_workdir DIR: creates DIR and a scratch directory in it; prints the scratch directory's path
# (the caller removes it at exit).
peer_workdir() {
    mkdir -p "$1"
    mktemp -d "$1/build.XXXXXX"
}

# peer_install DIR BIN STAMP: DIR/BIN.new (what the build wrote) becomes DIR/BIN, built from STAMP;
# prints DIR/BIN.
peer_install() {
    mv "$1/$2.new" "$1/$2"
    echo "$3" >"$1/stamp"
    echo "$1/$2"
}
