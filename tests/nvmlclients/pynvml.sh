#!/bin/sh
# pynvml.sh: installs nvidia-ml-py (NVIDIA's own Python binding of NVML, the package named
# `pynvml` on import) at a pinned version into
# ${GPUSLICE_PEERS_CACHE:-$HOME/.cache/gpuslice-peers}/nvidia-ml-py-VERSION with pip install
# --target, and prints that directory (for PYTHONPATH). Installed once per version. Fails when
# neither pip nor the package index can be reached.
set -eu
version=${1:-13.615.71}
dir=${GPUSLICE_PEERS_CACHE:-${HOME:-/tmp}/.cache/gpuslice-peers}/nvidia-ml-py-$version
if [ -f "$dir/pynvml.py" ] && [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$version" ]; then
    echo "$dir"
    exit 0
fi
python=${PYTHON:-python3}
"$python" -m pip --version >/dev/null 2>&1 || { echo "pynvml.sh: $python has no pip (needed to install nvidia-ml-py)" >&2; exit 1; }
rm -rf "$dir.new"
"$python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --target "$dir.new" "nvidia-ml-py==$version" >&2
rm -rf "$dir"
mv "$dir.new" "$dir"
echo "$version" >"$dir/.stamp"
echo "$dir"
