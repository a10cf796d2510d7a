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

echo "Installing Debian packages: ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
