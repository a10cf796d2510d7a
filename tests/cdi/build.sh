#!/bin/sh
# build.sh VERSION: builds tests/cdi/validate against the CDI reference library at VERSION
# (v0.5.x: the module's old path; later: tags.cncf.io/container-device-interface) into
# ${GPUSLICE_PEERS_CACHE:-$HOME/.cache/gpuslice-peers}/cdi-VERSION/validate, with the ordinary go
# command and its module proxy, and prints the binary's path. Rebuilt only when the version or
# the sources change (a stamp of their checksums). Fails when go is missing.
set -eu
# shellcheck source=/dev/null # tests/lib/peercache.sh, linted on its own
. "$(dirname "$0")/../lib/peercache.sh"
version=${1:?usage: build.sh VERSION (e.g. v0.5.4, v1.1.2)}
src=$(cd "$(dirname "$0")/validate" && pwd)
cache=$(peer_dir "cdi-$version")
peer_need_go build.sh "the CDI reference library"
case $version in
v0.[0-5].*) old=1; mods=$src/v0.5; module=github.com/container-orchestrated-devices/container-device-interface ;;
*) old=0; mods=$src; module=tags.cncf.io/container-device-interface ;;
esac
stamp=$(cat "$src/main.go" "$mods/go.mod" "$mods/go.sum" | cksum)
peer_cached "$cache" validate "$version $stamp" && exit 0
work=$(peer_workdir "$cache")
trap 'rm -rf "$work"' EXIT
cp "$mods/go.mod" "$mods/go.sum" "$work/"
if [ "$old" = 1 ]; then
    sed "s#tags.cncf.io/container-device-interface/pkg/cdi#$module/pkg/cdi#" "$src/main.go" >"$work/main.go"
else
    cp "$src/main.go" "$work/main.go"
fi
(
    cd "$work"
    go mod edit -require="$module@$version"
    go mod tidy >&2
    CGO_ENABLED=0 go build -o "$cache/validate.new" . >&2
)
peer_install "$cache" validate "$version $stamp"
