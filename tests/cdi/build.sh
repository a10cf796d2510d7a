#!/bin/sh
# build.sh VERSION: builds tests/cdi/validate against the CDI reference library at VERSION
# (v0.5.x: the module's old path; later: tags.cncf.io/container-device-interface) into
# ${GPUSLICE_PEERS_CACHE:-$HOME/.cache/gpuslice-peers}/cdi-VERSION/validate, with the ordinary go
# command and its module proxy, and prints the binary's path. Rebuilt only when the version or
# the sources change (a stamp of their checksums). Fails when go is missing.
set -eu
version=${1:?usage: build.sh VERSION (e.g. v0.5.4, v1.1.2)}
src=$(cd "$(dirname "$0")/validate" && pwd)
cache=${GPUSLICE_PEERS_CACHE:-${HOME:-/tmp}/.cache/gpuslice-peers}/cdi-$version
command -v go >/dev/null 2>&1 || { echo "build.sh: go is not installed (needed to build the CDI reference library)" >&2; exit 1; }
case $version in
v0.[0-5].*) old=1; mods=$src/v0.5; module=github.com/container-orchestrated-devices/container-device-interface ;;
*) old=0; mods=$src; module=tags.cncf.io/container-device-interface ;;
esac
stamp=$(cat "$src/main.go" "$mods/go.mod" "$mods/go.sum" | cksum)
if [ -x "$cache/validate" ] && [ "$(cat "$cache/stamp" 2>/dev/null)" = "$version $stamp" ]; then
    echo "$cache/validate"
    exit 0
fi
mkdir -p "$cache"
work=$(mktemp -d "$cache/build.XXXXXX")
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
mv "$cache/validate.new" "$cache/validate"
echo "$version $stamp" >"$cache/stamp"
echo "$cache/validate"
