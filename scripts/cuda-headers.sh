#!/usr/bin/env bash
# cuda-headers.sh: fetches the CUDA driver API header (cuda.h) of each CUDA major version the guard
# is checked against, from NVIDIA's CUDA runtime wheels on PyPI (no toolkit install), cached by
# version under ${GPUSLICE_PEERS_CACHE:-$HOME/.cache/gpuslice-peers}. Prints the include
# directories, colon-separated, for GS_CUDA_INCLUDE (tests/guard/check_cuda_h.sh). Progress and
# errors go to stderr; exits non-zero if a header cannot be had.
set -euo pipefail
cache=${GPUSLICE_PEERS_CACHE:-$HOME/.cache/gpuslice-peers}
# wheel name, version, the header's directory inside the wheel
wheels=(
  "nvidia-cuda-runtime-cu12 12.9.79 nvidia/cuda_runtime/include"
  "nvidia-cuda-runtime 13.5.37 nvidia/cu13/include"
)
pip=()
for py in python3 /usr/bin/python3; do
  if "$py" -m pip --version >/dev/null 2>&1; then pip=("$py" -m pip); break; fi
done
dirs=()
for w in "${wheels[@]}"; do
  read -r name version inner <<<"$w"
  dest="$cache/cuda-h/$name-$version"
  if [ ! -f "$dest/include/cuda.h" ]; then
    [ ${#pip[@]} -gt 0 ] || { echo "cuda-headers.sh: no python3 with pip to fetch $name" >&2; exit 1; }
    echo "cuda-headers.sh: fetching cuda.h from $name $version" >&2
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    "${pip[@]}" download -q --no-deps --only-binary=:all: -d "$tmp" "$name==$version" >&2
    mkdir -p "$tmp/x"
    python3 - "$tmp" "$inner" <<'PY'
import glob, sys, zipfile
tmp, inner = sys.argv[1], sys.argv[2]
(whl,) = glob.glob(tmp + "/*.whl")
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        if n.startswith(inner + "/") and n.endswith(".h"):
            z.extract(n, tmp + "/x")
PY
    [ -f "$tmp/x/$inner/cuda.h" ] || { echo "cuda-headers.sh: no $inner/cuda.h in $name $version" >&2; exit 1; }
    rm -rf "$dest"
    mkdir -p "$dest"
    mv "$tmp/x/$inner" "$dest/include"
    rm -rf "$tmp"
    trap - EXIT
  fi
  dirs+=("$dest/include")
done
(IFS=:; echo "${dirs[*]}")
