#!/bin/bash
# build.sh: builds the parts of the e2e cluster from their Go modules, with the ordinary go
# command and its module proxy, into one cache outside the repository:
#   ${GPUSLICE_PEERS_CACHE:-$HOME/.cache/gpuslice-peers}/
#     k8s-VERSION/bin/        kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl
#     etcd-VERSION/bin/       etcd
#     containerd-VERSION/bin/ containerd containerd-shim-runc-v2 ctr
#     helm-VERSION/bin/       helm
#     kwok-VERSION/bin/       kwok (the second node of tests/e2e/test_extender_score.py, and
#                             bench/'s trace-scale runs)
#     nvidia-dra-VERSION/bin/ gpu-kubelet-plugin nvidia-cdi-hook (only when asked: `build.sh
#                             nvidia-dra`, NVIDIA's DRA driver for tests/e2e/test_nvidia_dra.py),
#                             and its chart's templates in nvidia-dra-VERSION/chart/, its
#                             demo/specs/quickstart manifests in nvidia-dra-VERSION/quickstart/
# The versions are the ones the tools modules under tests/e2e/tools/ require; a part is rebuilt
# only when its go.mod or go.sum changes (a stamp of their checksums) or a binary is missing.
# runc and the CNI plugins are Debian's (scripts/deps.sh). Progress goes to stderr; the last line
# on stdout is the bin directories, colon-separated, to put in front of PATH.
# Arguments name the parts to build (default: k8s etcd containerd helm kwok), e.g.
# `build.sh helm` for the chart tests of tests/deploy, which need only Helm.
# GOCACHE and GOMODCACHE are go's own (shared with every other go build of the machine).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tools=$here/tools
cache=${GPUSLICE_PEERS_CACHE:-${HOME:-/tmp}/.cache/gpuslice-peers}
jobs=${GPUSLICE_BUILD_JOBS:-2}

say() { echo "[e2e build] $*" >&2; }
wanted=" ${*:-k8s etcd containerd helm kwok} "
for w in $wanted; do
    case $w in k8s | etcd | containerd | helm | kwok | nvidia-dra) ;; *) say "no part $w (parts: k8s etcd containerd helm kwok nvidia-dra)"; exit 2 ;; esac
done

# version MODULEDIR REQUIRED-MODULE: the version the tools module requires.
version() {
    sed -n "s#^[[:space:]]*\\(require \\)\\{0,1\\}$2 \\(v[^ ]*\\).*#\\2#p" "$tools/$1/go.mod"
}

# progress LABEL: reads `go build -v` (one line per package compiled) and reports every 100.
progress() {
    local label=$1 n=0 start line
    start=$(date +%s)
    while IFS= read -r line; do
        case $line in
        *:*) echo "$line" >&2 ;;  # a compiler message, not a package name
        *) n=$((n + 1))
           [ $((n % 100)) -eq 0 ] && say "$label: $n packages compiled, $(( $(date +%s) - start )) s" ;;
        esac
    done
    say "$label: $n packages compiled (the rest from the go build cache), $(( $(date +%s) - start )) s"
}

# part NAME MODULEDIR MODULE LDFLAGS BIN=PACKAGE...: builds one part into $cache/NAME-VERSION/bin.
part() {
    local name=$1 mod=$2 module=$3 ldflags=$4; shift 4
    local ver dir stamp spec bin pkg missing=0 t0
    case $wanted in *" $name "*) ;; *) return ;; esac
    ver=$(version "$mod" "$module")
    [ -n "$ver" ] || { say "$tools/$mod/go.mod requires no $module"; exit 1; }
    dir=$cache/$name-$ver
    stamp=$(cat "$tools/$mod/go.mod" "$tools/$mod/go.sum" | cksum)
    for spec in "$@"; do [ -x "$dir/bin/${spec%%=*}" ] || missing=1; done
    if [ "$missing" = 0 ] && [ "$(cat "$dir/stamp" 2>/dev/null)" = "$stamp" ]; then
        say "$name $ver: cached in $dir"
        bindirs="${bindirs:+$bindirs:}$dir/bin"
        return
    fi
    command -v go >/dev/null 2>&1 || { say "go is not installed (needed to build $name $ver)"; exit 1; }
    mkdir -p "$dir/bin"
    rm -f "$dir/stamp"
    t0=$(date +%s)
    for spec in "$@"; do
        bin=${spec%%=*}; pkg=${spec#*=}
        say "$name $ver: building $bin ($pkg)"
        if ! (
            cd "$tools/$mod"
            CGO_ENABLED=${cgo:-0} go build -p "$jobs" -v -trimpath -buildvcs=false -mod=readonly \
                -tags "$tags" -ldflags "-s -w $ldflags" -o "$dir/bin/$bin.new" "$pkg" 2>&1
        ) | progress "$name $bin" || [ ! -x "$dir/bin/$bin.new" ]; then
            say "$name $ver: building $bin failed"
            exit 1
        fi
        mv "$dir/bin/$bin.new" "$dir/bin/$bin"
    done
    echo "$stamp" >"$dir/stamp"
    echo "$(( $(date +%s) - t0 ))" >"$dir/build-seconds"
    say "$name $ver: built in $(cat "$dir/build-seconds") s"
    bindirs="${bindirs:+$bindirs:}$dir/bin"
}

mkdir -p "$cache"
exec 9>"$cache/e2e-build.lock"
flock 9 || { say "cannot lock $cache/e2e-build.lock"; exit 1; }
bindirs=""
t_all=$(date +%s)

# Kubernetes: the version the binaries report (hack/lib/version.sh sets the same variables).
k8s=$(version kubernetes k8s.io/kubernetes)
minor=${k8s#v1.}; minor=${minor%%.*}
kv=""
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    kv="$kv -X $pkg.gitVersion=$k8s -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    kv="$kv -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
tags=""
part k8s kubernetes k8s.io/kubernetes "$kv" \
    kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
    kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
    kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler \
    kubelet=k8s.io/kubernetes/cmd/kubelet \
    kubectl=k8s.io/kubernetes/cmd/kubectl

part etcd etcd go.etcd.io/etcd/server/v3 "" etcd=go.etcd.io/etcd/server/v3

# containerd: without cgo the btrfs snapshotter is left out (it needs its headers); the e2e
# cluster uses overlayfs. The version ctr and the daemon report:
cv=$(version containerd github.com/containerd/containerd/v2)
tags="urfave_cli_no_docs no_btrfs no_devmapper no_zfs"
part containerd containerd github.com/containerd/containerd/v2 \
    "-X github.com/containerd/containerd/v2/version.Version=$cv" \
    containerd=github.com/containerd/containerd/v2/cmd/containerd \
    containerd-shim-runc-v2=github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
    ctr=github.com/containerd/containerd/v2/cmd/ctr

hv=$(version helm helm.sh/helm/v3)
tags=""
part helm helm helm.sh/helm/v3 "-X helm.sh/helm/v3/internal/version.version=$hv" helm=helm.sh/helm/v3/cmd/helm

# kwok: nodes and pods simulated on the real API server (the e2e suite's kwok node beside the real
# one, test_extender_score.py; the extender's trace-scale benchmark).
tags=""
part kwok kwok sigs.k8s.io/kwok "" kwok=sigs.k8s.io/kwok/cmd/kwok

# NVIDIA's DRA driver (its kubelet plugin; the controller serves ComputeDomains only, not GPUs)
# and the nvidia-cdi-hook its CDI specs name, from the toolkit version the driver requires. v0.4.1:
# v0.5.0 needs k8s.io/kubernetes v1.37.0-rc.0 and github.com/NVIDIA/go-nvfm, which the module proxy
# refuses. cgo: go-nvml dlopens libnvidia-ml.so.1 (its header warns of deprecations).
tags=""
cgo=1 CGO_CFLAGS="-O2 -Wno-deprecated-declarations" \
    part nvidia-dra nvidia-dra sigs.k8s.io/dra-driver-nvidia-gpu "" \
    gpu-kubelet-plugin=sigs.k8s.io/dra-driver-nvidia-gpu/cmd/gpu-kubelet-plugin \
    nvidia-cdi-hook=github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook
case $wanted in *" nvidia-dra "*)
    ndv=$(version nvidia-dra sigs.k8s.io/dra-driver-nvidia-gpu)
    if [ ! -d "$cache/nvidia-dra-$ndv/chart" ]; then
        ndsrc=$(cd "$tools/nvidia-dra" && go list -m -f '{{.Dir}}' sigs.k8s.io/dra-driver-nvidia-gpu)
        cp -r "$ndsrc/deployments/helm/dra-driver-nvidia-gpu" "$cache/nvidia-dra-$ndv/chart.new"
        chmod -R u+w "$cache/nvidia-dra-$ndv/chart.new"
        mv "$cache/nvidia-dra-$ndv/chart.new" "$cache/nvidia-dra-$ndv/chart"
    fi
    if [ ! -d "$cache/nvidia-dra-$ndv/quickstart" ]; then
        ndsrc=$(cd "$tools/nvidia-dra" && go list -m -f '{{.Dir}}' sigs.k8s.io/dra-driver-nvidia-gpu)
        cp -r "$ndsrc/demo/specs/quickstart" "$cache/nvidia-dra-$ndv/quickstart.new"
        chmod -R u+w "$cache/nvidia-dra-$ndv/quickstart.new"
        mv "$cache/nvidia-dra-$ndv/quickstart.new" "$cache/nvidia-dra-$ndv/quickstart"
    fi ;;
esac

say "all parts ready ($(( $(date +%s) - t_all )) s)"
echo "$bindirs"
