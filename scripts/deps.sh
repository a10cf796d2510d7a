#!/usr/bin/env bash
# deps.sh: installs the Debian packages gpuslice needs to build and test, if any are missing.
# Used by the README's two commands (run-sim.sh, test.sh); safe to run again.
set -euo pipefail

packages=(
  gcc libstdc++-12-dev clang libclang-rt-14-dev pkg-config meson ninja-build
  libyaml-dev libjansson-dev libcmocka-dev libcurl4-openssl-dev libssl-dev
  libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
  prometheus shellcheck
  python3 python3-pip python3-pytest python3-yaml python3-grpcio python3-grpc-tools python3-protobuf python3-jsonschema
  python3-kubernetes
  podman runc busybox-static
  containernetworking-plugins openssl curl
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

# apt's progress goes to a log, not the screen; on a failure its end is shown
log=${GPUSLICE_DEPS_LOG:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/gpuslice-deps.log}
mkdir -p "$(dirname "$log")"
echo "Installing Debian packages: ${missing[*]} (apt's output: $log)" >&2
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
if ! { $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  echo "deps.sh: installing the Debian packages failed; the end of $log:" >&2
  tail -n 30 "$log" >&2
  exit 1
fi
echo "Installed." >&2
