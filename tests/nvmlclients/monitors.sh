#!/bin/sh
# monitors.sh: installs two GPU monitors from the package index, nvitop and gpustat, with
# nvidia-ml-py (NVIDIA's Python binding they run on) and their dependencies, each at a pinned
# version, with pip install --no-deps --target into
# ${GPUSLICE_PEERS_CACHE:-$HOME/.cache/gpuslice-peers}/gpu-monitors-STAMP, and prints that directory
# (for PYTHONPATH; the monitors' entry points are run as `python -m nvitop` and `python -m gpustat`).
# Installed once per set of versions. Fails when neither pip nor the package index can be reached.
set -eu
pkgs="nvidia-ml-py==13.615.71 nvitop==1.7.2 gpustat==1.1.1 psutil==7.2.2 blessed==1.52.0 wcwidth==0.9.4 jinxed==2.1.0"
python=${PYTHON:-python3}
pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
stamp="py$pyver $pkgs"
dir=${GPUSLICE_PEERS_CACHE:-${HOME:-/tmp}/.cache/gpuslice-peers}/gpu-monitors-$(printf '%s' "$stamp" | cksum | cut -d' ' -f1)
if [ -f "$dir/nvitop/__init__.py" ] && [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "$dir"
    exit 0
fi
"$python" -m pip --version >/dev/null 2>&1 || { echo "monitors.sh: $python has no pip (needed to install nvitop and gpustat)" >&2; exit 1; }
rm -rf "$dir.new"
# shellcheck disable=SC2086 # one word per package
"$python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --target "$dir.new" $pkgs >&2
rm -rf "$dir"
mv "$dir.new" "$dir"
echo "$stamp" >"$dir/.stamp"
echo "$dir"
