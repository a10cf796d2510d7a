#!/bin/bash
# cluster.sh up|down|status|restart-kubelet|restart-apiserver|restart-scheduler|extender-certs DIR, cluster.sh image DIR NAME ROOTFS [ENTRYPOINT]: a one-node Kubernetes cluster on loopback, for gpuslice's e2e
# tests (docs/e2e.md). Everything lives under DIR (an absolute path, short: unix socket paths
# under it must stay below 108 bytes):
#   pki/        CA, serving and client certificates (openssl), the service-account key pair, and
#               the scheduler extender's own CA and certificates (extender-certs)
#   *.kubeconfig admin (for kubectl), kubelet, scheduler, controller-manager
#   etcd/ containerd/ kubelet/ (the kubelet's --root-dir: device-plugins/, pod-resources/)
#   cdi/        the CDI spec directory containerd reads (cdi_spec_dirs)
#   cni/        the CNI configuration: Debian's loopback plugin only, so that the runtime's
#               network is ready (the node Ready); the tests' pods use hostNetwork, since
#               containerd's CRI wants an eth0 with an address, which would be outside 127/8
#   images/     the pause and test images, OCI archives of Debian's busybox-static
#   logs/       one log per process, kept after `down` for a failing test
#   run/        NAME.pid (pid and start time) of every process started; `down` stops them by
#               those pids, and any other NAME.pid a harness left there (the agent) first
#   env         KUBECONFIG, the node name and the ports, for tests and people (source it)
# `image` makes an image NAME of the directory ROOTFS (one layer; its entrypoint the JSON array
# ENTRYPOINT, default ["/bin/sh"]) the same way and imports it into the running cluster's containerd.
# The parts come from tests/e2e/build.sh (built once, cached by version). Needs root (the
# kubelet and containerd create cgroups, mounts and namespaces). Every wait is bounded.
# The kubelet runs in a mount namespace of its own where DIR/kubelet is also /var/lib/kubelet
# (its device-plugin socket path is fixed there); DIR/kubelet is a shared mount, so what the
# kubelet mounts for pods is seen by containerd; the host's /var/lib is not touched.
# GS_E2E_SCHEDULER_CONFIG=FILE (up, restart-scheduler): the scheduler runs with --config FILE, a
# KubeSchedulerConfiguration, which must name its clientConnection.kubeconfig (DIR/scheduler.kubeconfig)
# and leaderElection.leaderElect: false itself (the scheduler ignores those flags beside --config).
# GS_E2E_CONTROLLER_MANAGER_ARGS (up): more arguments for the controller-manager, split at spaces
# (bench/kwok_replay.py: a long --node-monitor-grace-period for 1,213 kwok nodes with slow leases).
# Ports: GS_E2E_PORT_BASE (default 16000) + 379/380 etcd, 443 API server, 257 controller-
# manager, 259 scheduler, 250 kubelet, 248 kubelet healthz; all bound to 127.0.0.1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cmd=${1:-}
dir=${2:-}
case $cmd in up|down|status|restart-kubelet|restart-apiserver|restart-scheduler|extender-certs|image) ;;
*) echo "usage: cluster.sh up|down|status|restart-kubelet|restart-apiserver|restart-scheduler|extender-certs DIR, or cluster.sh image DIR NAME ROOTFS [ENTRYPOINT]" >&2; exit 2 ;;
esac
case $dir in /*) ;; *) echo "cluster.sh: DIR must be an absolute path (got '${dir}')" >&2; exit 2 ;; esac

NODE=${GS_E2E_NODE:-gs-e2e-node}
base=${GS_E2E_PORT_BASE:-16000}
CGROOT=gs-e2e-$base
P_ETCD=$((base + 379)) P_PEER=$((base + 380)) P_API=$((base + 443)) P_KCM=$((base + 257))
P_SCHED=$((base + 259)) P_KUBELET=$((base + 250)) P_HEALTHZ=$((base + 248))
PAUSE_IMAGE=gpuslice.local/pause:e2e
TEST_IMAGE=gpuslice.local/busybox:e2e
say() { echo "[cluster] $*" >&2; }
die() { say "$*"; exit 1; }

# ---------------------------------------------------------------------------- processes

# starttime PID: field 22 of /proc/PID/stat (the pid's start, in clock ticks since boot).
starttime() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | awk '{print $20}'; }

# alive NAME: the process of run/NAME.pid is running (same pid and start time).
alive() {
    local f=$dir/run/$1.pid pid st
    [ -f "$f" ] || return 1
    read -r pid st <"$f" || return 1
    [ -n "$pid" ] && [ "$(starttime "$pid")" = "$st" ]
}

# start NAME COMMAND...: starts COMMAND in a session of its own, output to logs/NAME.log.
start() {
    local name=$1; shift
    alive "$name" && die "$name is already running (run/$name.pid)"
    setsid "$@" >>"$dir/logs/$name.log" 2>&1 </dev/null &
    local pid=$!
    echo "$pid $(starttime "$pid")" >"$dir/run/$name.pid"
    say "$name started (pid $pid, log $dir/logs/$name.log)"
}

# stop NAME [SECONDS]: SIGTERM to the pid of run/NAME.pid, SIGKILL after SECONDS (default 10).
stop() {
    local name=$1 secs=${2:-10} pid st i
    [ -f "$dir/run/$name.pid" ] || return 0
    read -r pid st <"$dir/run/$name.pid" || true
    if alive "$name"; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < secs * 10; i++)); do
            [ "$(starttime "$pid")" = "$st" ] || break
            sleep 0.1
        done
        if [ "$(starttime "$pid")" = "$st" ]; then
            say "$name (pid $pid) still running after ${secs} s: SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 0.2
        fi
        say "$name stopped (pid $pid)"
    fi
    rm -f "$dir/run/$name.pid"
}

# wait_for WHAT SECONDS COMMAND...: runs COMMAND every 0.5 s until it succeeds, at most SECONDS.
wait_for() {
    local what=$1 secs=$2 i; shift 2
    for ((i = 0; i < secs * 2; i++)); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.5
    done
    die "timed out after ${secs} s waiting for $what (logs in $dir/logs)"
}

kc() { kubectl --kubeconfig "$dir/admin.kubeconfig" "$@"; }

# ---------------------------------------------------------------------------- certificates

# cert NAME CN [O] [SAN]: a key and a certificate signed by the cluster's CA (CERT_CA=NAME: by
# DIR/pki/NAME.crt instead).
cert() {
    local name=$1 cn=$2 o=${3:-} san=${4:-} ca=${CERT_CA:-ca} subj ext
    [ -f "$dir/pki/$name.crt" ] && return 0
    subj="/CN=$cn"; [ -n "$o" ] && subj="/O=$o$subj"
    ext=$dir/pki/$name.ext
    {
        echo "basicConstraints=CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        if [ -n "$san" ]; then
            echo "extendedKeyUsage=serverAuth,clientAuth"
            echo "subjectAltName=$san"
        else
            echo "extendedKeyUsage=clientAuth"
        fi
    } >"$ext"
    openssl req -new -newkey rsa:2048 -nodes -keyout "$dir/pki/$name.key" -subj "$subj" \
        -out "$dir/pki/$name.csr" 2>/dev/null
    openssl x509 -req -in "$dir/pki/$name.csr" -CA "$dir/pki/$ca.crt" -CAkey "$dir/pki/$ca.key" \
        -CAcreateserial -days 30 -extfile "$ext" -out "$dir/pki/$name.crt" 2>/dev/null
    rm -f "$dir/pki/$name.csr" "$ext"
}

# ca NAME CN: DIR/pki/NAME.crt and .key, a self-signed CA, unless it exists.
ca() {
    mkdir -p "$dir/pki"
    chmod 700 "$dir/pki"
    [ -f "$dir/pki/$1.crt" ] && return 0
    openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$dir/pki/$1.key" -days 30 \
        -subj "/CN=$2" -out "$dir/pki/$1.crt" 2>/dev/null
}

certificates() {
    ca ca gpuslice-e2e-ca
    cert apiserver kube-apiserver "" \
        "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
    cert kubelet-serving "system:node:$NODE" system:nodes "IP:127.0.0.1,DNS:localhost,DNS:$NODE"
    cert admin kubernetes-admin system:masters
    cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
    cert kubelet "system:node:$NODE" system:nodes
    cert scheduler system:kube-scheduler
    cert controller-manager system:kube-controller-manager
    [ -f "$dir/pki/sa.key" ] || openssl genrsa -out "$dir/pki/sa.key" 2048 2>/dev/null
    openssl rsa -in "$dir/pki/sa.key" -pubout -out "$dir/pki/sa.pub" 2>/dev/null
    extender_certs
}

# extender-certs (also at up): the scheduler extender's TLS (docs/extender.md) in DIR/pki, under a
# CA of its own that signs nothing else: extender.crt/key, its serving certificate for
# 127.0.0.1, and extender-scheduler.crt/key, kube-scheduler's client certificate (CN
# kube-scheduler); extender-ca.crt verifies both. Kept when they exist.
extender_certs() {
    ca extender-ca gpuslice-e2e-extender-ca
    CERT_CA=extender-ca cert extender gpuslice-extender "" "IP:127.0.0.1"
    CERT_CA=extender-ca cert extender-scheduler kube-scheduler
}

# kubeconfig NAME CERT: a kubeconfig for the API server with the client certificate CERT.
kubeconfig() {
    cat >"$dir/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: gpuslice-e2e
  cluster:
    server: https://127.0.0.1:$P_API
    certificate-authority: $dir/pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $dir/pki/$2.crt
    client-key: $dir/pki/$2.key
contexts:
- name: gpuslice-e2e
  context: {cluster: gpuslice-e2e, user: $2}
current-context: gpuslice-e2e
EOF
}

# ---------------------------------------------------------------------------- images

# blob FILE: moves FILE into the layout's blobs as sha256/DIGEST and prints "DIGEST SIZE".
blob() {
    local d s
    d=$(sha256sum "$1" | cut -d' ' -f1)
    s=$(stat -c %s "$1")
    mv "$1" "$layout/blobs/sha256/$d"
    echo "$d $s"
}

# image NAME ARCHIVE ROOTFS ENTRYPOINT-JSON: an OCI archive (oci-layout, index.json, manifest,
# config, one layer) of the directory ROOTFS, named NAME for `ctr images import`.
image() {
    local name=$1 out=$2 rootfs=$3 entry=$4 ldigest lsize diffid cdigest csize mdigest msize
    layout=$(mktemp -d "$dir/images/layout.XXXXXX")
    mkdir -p "$layout/blobs/sha256"
    echo '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$rootfs" -cf "$layout/layer.tar" .
    diffid=$(sha256sum "$layout/layer.tar" | cut -d' ' -f1)
    read -r ldigest lsize < <(blob "$layout/layer.tar")
    printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":%s,"Env":["PATH=/bin"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
        "$entry" "$diffid" >"$layout/config.json"
    read -r cdigest csize < <(blob "$layout/config.json")
    printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
        "$cdigest" "$csize" "$ldigest" "$lsize" >"$layout/manifest.json"
    read -r mdigest msize < <(blob "$layout/manifest.json")
    printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
        "$mdigest" "$msize" "$name" "${name##*:}" >"$layout/index.json"
    tar -C "$layout" -cf "$out" oci-layout index.json blobs
    rm -rf "$layout"
}

images() {
    local rootfs
    mkdir -p "$dir/images"
    [ -f "$dir/images/busybox.tar" ] && return 0
    if ! [ -x /bin/busybox ] || ! { ldd /bin/busybox 2>&1 || true; } | grep -q "not a dynamic executable"; then
        die "no static /bin/busybox (scripts/deps.sh installs busybox-static)"
    fi
    rootfs=$(mktemp -d "$dir/images/rootfs.XXXXXX")
    mkdir -p "$rootfs/bin" "$rootfs/etc" "$rootfs/tmp" "$rootfs/proc" "$rootfs/sys" "$rootfs/dev"
    cp /bin/busybox "$rootfs/bin/busybox"
    for a in sh cat ls env sleep grep sed awk stat md5sum readlink test echo true false mount head wc; do
        ln -s busybox "$rootfs/bin/$a"
    done
    echo "root:x:0:0:root:/:/bin/sh" >"$rootfs/etc/passwd"
    echo "root:x:0:" >"$rootfs/etc/group"
    # The pause container: sleeps until killed (the CRI stops sandboxes with SIGKILL).
    image "$PAUSE_IMAGE" "$dir/images/pause.tar" "$rootfs" '["/bin/busybox","sleep","2147483647"]'
    image "$TEST_IMAGE" "$dir/images/busybox.tar" "$rootfs" '["/bin/sh"]'
    rm -rf "$rootfs"
}

# ---------------------------------------------------------------------------- configuration

configs() {
    mkdir -p "$dir/containerd" "$dir/cni/net.d" "$dir/cdi" "$dir/kubelet" "$dir/pod-logs"
    cat >"$dir/cni/net.d/10-gpuslice-e2e.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "gpuslice-e2e", "plugins": [{"type": "loopback"}]}
EOF
    cat >"$dir/containerd/config.toml" <<EOF
version = 3
root = "$dir/containerd/root"
state = "$dir/containerd/state"
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.tracing.processor.v1.otlp",
                    "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$dir/containerd/containerd.sock"
[ttrpc]
  address = "$dir/containerd/containerd.sock.ttrpc"
[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = "$dir/containerd/opt"
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "$PAUSE_IMAGE"
  [plugins.'io.containerd.cri.v1.runtime']
    # no CAP_SYS_RESOURCE here: runc cannot lower oom_score_adj below containerd's own
    restrict_oom_score_adj = true
    enable_cdi = true
    cdi_spec_dirs = ["$dir/cdi"]
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["/usr/lib/cni"]
      conf_dir = "$dir/cni/net.d"
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "$(command -v runc)"
          SystemdCgroup = false
EOF
    cat >"$dir/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $P_KUBELET
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $P_HEALTHZ
tlsCertFile: $dir/pki/kubelet-serving.crt
tlsPrivateKeyFile: $dir/pki/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $dir/pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$dir/containerd/containerd.sock
cgroupDriver: cgroupfs
# a cgroup root per cluster, so two clusters on one machine never share (or clean up) /kubepods
cgroupRoot: /$CGROOT
# this machine kind's cgroups are v1 (hybrid): kubelets from 1.35 refuse them unless told
failCgroupV1: false
failSwapOn: false
podLogsDir: $dir/pod-logs
staticPodPath: ""
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
maxPods: 40
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
nodeStatusUpdateFrequency: 2s
nodeStatusReportFrequency: 10s
syncFrequency: 5s
fileCheckFrequency: 5s
shutdownGracePeriod: 0s
EOF
    kubeconfig admin admin
    kubeconfig kubelet kubelet
    kubeconfig scheduler scheduler
    kubeconfig controller-manager controller-manager
}

# ---------------------------------------------------------------------------- up / down

ports_free() {
    local p
    for p in $P_ETCD $P_PEER $P_API $P_KCM $P_SCHED $P_KUBELET $P_HEALTHZ; do
        if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            die "port $p on 127.0.0.1 is in use (another cluster? GS_E2E_PORT_BASE moves every port)"
        fi
    done
}

node_ready() {
    [ "$(kc get node "$NODE" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

# The API server (up, restart-apiserver).
apiserver_start() {
    start kube-apiserver kube-apiserver --etcd-servers "http://127.0.0.1:$P_ETCD" \
        --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$P_API" \
        --tls-cert-file "$dir/pki/apiserver.crt" --tls-private-key-file "$dir/pki/apiserver.key" \
        --client-ca-file "$dir/pki/ca.crt" \
        --kubelet-client-certificate "$dir/pki/apiserver-kubelet-client.crt" \
        --kubelet-client-key "$dir/pki/apiserver-kubelet-client.key" \
        --service-account-key-file "$dir/pki/sa.pub" --service-account-signing-key-file "$dir/pki/sa.key" \
        --service-account-issuer https://kubernetes.default.svc \
        --service-cluster-ip-range 10.96.0.0/24 \
        --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
        --allow-privileged=true --profiling=false --endpoint-reconciler-type none
}

# The scheduler (up, restart-scheduler), with --config GS_E2E_SCHEDULER_CONFIG when set.
scheduler_start() {
    local conf=()
    if [ -n "${GS_E2E_SCHEDULER_CONFIG:-}" ]; then
        [ -f "$GS_E2E_SCHEDULER_CONFIG" ] || die "GS_E2E_SCHEDULER_CONFIG: no file $GS_E2E_SCHEDULER_CONFIG"
        conf=(--config "$GS_E2E_SCHEDULER_CONFIG")
    fi
    start kube-scheduler kube-scheduler --kubeconfig "$dir/scheduler.kubeconfig" \
        --authentication-kubeconfig "$dir/scheduler.kubeconfig" \
        --authorization-kubeconfig "$dir/scheduler.kubeconfig" \
        --bind-address 127.0.0.1 --secure-port "$P_SCHED" --leader-elect=false --profiling=false "${conf[@]}"
}

# restart-scheduler: the scheduler stopped and started again (another GS_E2E_SCHEDULER_CONFIG).
restart_scheduler() {
    local b
    b=$(sed -n 's/^GS_E2E_PORT_BASE=//p' "$dir/env")
    [ "$b" = "$base" ] || die "GS_E2E_PORT_BASE is $base but the cluster in $dir runs on $b"
    alive kube-apiserver || die "the API server is not running in $dir"
    PATH=$(env_path):$PATH
    stop kube-scheduler
    scheduler_start
    wait_for "the scheduler's /healthz" 60 curl -sfk "https://127.0.0.1:$P_SCHED/healthz"
}

up() {
    [ "$(id -u)" = 0 ] || die "the kubelet and containerd need root"
    if alive kube-apiserver; then say "already up in $dir (cluster.sh down $dir stops it)"; return 0; fi
    local bins
    bins=$("$here/build.sh") || die "tests/e2e/build.sh failed"
    export PATH="$bins:$PATH"
    for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl containerd \
             containerd-shim-runc-v2 ctr runc openssl unshare; do
        command -v "$b" >/dev/null || die "$b not found (tests/e2e/build.sh builds the cluster's parts; runc: scripts/deps.sh)"
    done
    [ -x /usr/lib/cni/loopback ] || die "no /usr/lib/cni/loopback (scripts/deps.sh installs containernetworking-plugins)"
    mkdir -p "$dir/logs" "$dir/run"
    ports_free
    certificates
    configs
    images
    cat >"$dir/env" <<EOF
export KUBECONFIG=$dir/admin.kubeconfig
export PATH=$bins:\$PATH
GS_E2E_NODE=$NODE
GS_E2E_KUBELET_DIR=$dir/kubelet
GS_E2E_CDI_DIR=$dir/cdi
GS_E2E_POD_LOGS=$dir/pod-logs
GS_E2E_CONTAINERD_SOCK=$dir/containerd/containerd.sock
GS_E2E_TEST_IMAGE=$TEST_IMAGE
GS_E2E_PORT_BASE=$base
EOF
    local t0
    t0=$(date +%s)

    start etcd etcd --name gs-e2e --data-dir "$dir/etcd" \
        --listen-client-urls "http://127.0.0.1:$P_ETCD" --advertise-client-urls "http://127.0.0.1:$P_ETCD" \
        --listen-peer-urls "http://127.0.0.1:$P_PEER" --initial-advertise-peer-urls "http://127.0.0.1:$P_PEER" \
        --initial-cluster "gs-e2e=http://127.0.0.1:$P_PEER" --listen-metrics-urls "" \
        --unsafe-no-fsync --quota-backend-bytes 1073741824
    wait_for "etcd" 60 curl -sf "http://127.0.0.1:$P_ETCD/health"

    apiserver_start
    wait_for "the API server" 120 kc get --raw /readyz

    # shellcheck disable=SC2086 # GS_E2E_CONTROLLER_MANAGER_ARGS is split at spaces
    start kube-controller-manager kube-controller-manager --kubeconfig "$dir/controller-manager.kubeconfig" \
        --authentication-kubeconfig "$dir/controller-manager.kubeconfig" \
        --authorization-kubeconfig "$dir/controller-manager.kubeconfig" \
        --bind-address 127.0.0.1 --secure-port "$P_KCM" --leader-elect=false \
        --service-account-private-key-file "$dir/pki/sa.key" --root-ca-file "$dir/pki/ca.crt" \
        --use-service-account-credentials --profiling=false ${GS_E2E_CONTROLLER_MANAGER_ARGS:-}
    scheduler_start

    start containerd containerd --config "$dir/containerd/config.toml"
    wait_for "containerd" 60 ctr --address "$dir/containerd/containerd.sock" version
    local img
    for img in pause busybox; do
        ctr --address "$dir/containerd/containerd.sock" -n k8s.io images import --no-unpack=false \
            --platform linux/amd64 "$dir/images/$img.tar" >>"$dir/logs/images.log" 2>&1 ||
            die "ctr images import $img.tar failed ($dir/logs/images.log)"
    done

    kubelet_start
    wait_for "the node $NODE to be Ready" 180 node_ready
    say "cluster up in $(( $(date +%s) - t0 )) s: export KUBECONFIG=$dir/admin.kubeconfig"
}

# The kubelet's cgroup root, made in every cgroup hierarchy (cpuset's cpus and mems from the top).
cgroot_make() {
    local h
    for h in /sys/fs/cgroup/*/; do
        [ -d "$h" ] || continue
        mkdir -p "$h$CGROOT"
        if [ -f "${h}cpuset.cpus" ]; then
            [ -n "$(cat "$h$CGROOT/cpuset.cpus")" ] || cat "${h}cpuset.cpus" >"$h$CGROOT/cpuset.cpus"
            [ -n "$(cat "$h$CGROOT/cpuset.mems")" ] || cat "${h}cpuset.mems" >"$h$CGROOT/cpuset.mems"
        fi
    done
}

# The cgroup root removed, deepest first, once its processes are gone (down).
cgroot_remove() {
    local h
    for h in /sys/fs/cgroup/*/; do
        [ -d "$h$CGROOT" ] || continue
        find "$h$CGROOT" -depth -type d -exec rmdir {} + 2>/dev/null ||
            say "cgroup $h$CGROOT not removed (processes left in it?)"
    done
}

kubelet_start() {
    cgroot_make
    # DIR/kubelet shared, so the kubelet's pod mounts (in its namespace) reach containerd's.
    if ! mountpoint -q "$dir/kubelet"; then
        mount --bind "$dir/kubelet" "$dir/kubelet"
        mount --make-shared "$dir/kubelet"
    fi
    # shellcheck disable=SC2016 # the script's $0 and $@ are the arguments after it
    start kubelet unshare -m --propagation unchanged /bin/sh -c '
        set -e
        mount --make-slave /
        mount -t tmpfs -o mode=0755 gs-e2e-varlib /var/lib
        mkdir /var/lib/kubelet
        mount --bind "$0" /var/lib/kubelet
        exec "$@"' "$dir/kubelet" \
        kubelet --config "$dir/kubelet-config.yaml" --kubeconfig "$dir/kubelet.kubeconfig" \
        --root-dir "$dir/kubelet" --hostname-override "$NODE" --node-ip 127.0.0.1 --v 2
}

# env_path: the bin directories the env file puts in front of PATH.
env_path() {
    # shellcheck disable=SC2016 # a literal $PATH in the env file
    sed -n 's#^export PATH=\(.*\):\$PATH$#\1#p' "$dir/env"
}

# restart-kubelet: the kubelet stopped by its pid and started again (pods keep running). Its
# healthz is on the cluster's port base (DIR/env), whatever GS_E2E_PORT_BASE says: without it a
# cluster on another base was polled on 16248 for the whole 60 s.
restart_kubelet() {
    local b
    b=$(sed -n 's/^GS_E2E_PORT_BASE=//p' "$dir/env")
    PATH=$(env_path):$PATH
    stop kubelet 15
    kubelet_start
    wait_for "the kubelet's healthz" 60 curl -sf "http://127.0.0.1:$((${b:-$base} + 248))/healthz"
}

# restart-apiserver: the API server stopped by its pid and started again on the same etcd (watches
# drop, clients reconnect); the port base must be the cluster's.
restart_apiserver() {
    local b
    b=$(sed -n 's/^GS_E2E_PORT_BASE=//p' "$dir/env")
    [ "$b" = "$base" ] || die "GS_E2E_PORT_BASE is $base but the cluster in $dir runs on $b"
    PATH=$(env_path):$PATH
    stop kube-apiserver 20
    apiserver_start
    wait_for "the API server" 120 kc get --raw /readyz
}

# The containers of the node: killed and deleted through containerd (a shim exits with its last
# task); what is left once containerd is gone (it died first): the containers' init processes by
# the pids in their bundles, then this containerd's shims (their command line names its socket).
containers_down() {
    local sock=$dir/containerd/containerd.sock t f pid p
    if alive containerd; then
        for t in $(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
            ctr --address "$sock" -n k8s.io tasks kill -s KILL "$t" >/dev/null 2>&1 || true
        done
        sleep 1
        for t in $(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
            ctr --address "$sock" -n k8s.io tasks delete -f "$t" >/dev/null 2>&1 || true
        done
    fi
    stop containerd 15
    for f in "$dir"/containerd/state/io.containerd.runtime.v2.task/*/*/init.pid; do
        [ -f "$f" ] || continue
        pid=$(cat "$f")
        # only a process whose root is this cluster's container root (a pid may have been reused)
        case $(readlink "/proc/$pid/root" 2>/dev/null) in
        "$dir"/*) kill -KILL "$pid" 2>/dev/null && say "container init stopped (pid $pid)" ;;
        esac
    done
    for p in /proc/[0-9]*; do
        if { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -q "containerd-shim-runc-v2 .*-address $sock\( \|\$\)"; then
            kill -KILL "${p#/proc/}" 2>/dev/null && say "shim stopped (pid ${p#/proc/})"
        fi
    done
}

# Mounts left under DIR (container root filesystems, pod volumes, the kubelet bind), deepest first.
unmount_all() {
    local m
    awk '{print $2}' /proc/self/mounts | grep "^$dir/" | sort -r | while read -r m; do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || say "cannot unmount $m"
    done
}

down() {
    local f name
    [ -d "$dir/run" ] || { say "nothing to stop in $dir"; return 0; }
    [ -f "$dir/env" ] && PATH=$(env_path):$PATH
    # what a harness started and recorded here (the agent) first, then the node, then the rest
    for f in "$dir"/run/*.pid; do
        [ -f "$f" ] || continue
        name=$(basename "$f" .pid)
        case $name in etcd|kube-apiserver|kube-controller-manager|kube-scheduler|containerd|kubelet) ;;
        *) stop "$name" ;;
        esac
    done
    stop kubelet 15
    containers_down
    stop kube-scheduler
    stop kube-controller-manager
    stop kube-apiserver 20
    stop etcd
    unmount_all
    cgroot_remove
    say "cluster down (logs kept in $dir/logs)"
}

status() {
    local f name rc=0
    for f in "$dir"/run/*.pid; do
        [ -f "$f" ] || continue
        name=$(basename "$f" .pid)
        if alive "$name"; then echo "$name: running (pid $(cut -d' ' -f1 "$f"))"; else echo "$name: not running"; rc=1; fi
    done
    if [ -f "$dir/env" ] && alive kube-apiserver; then
        PATH=$(env_path):$PATH
        kc get nodes -o wide 2>&1 || rc=1
    fi
    return $rc
}

# import_image NAME ROOTFS [ENTRYPOINT]: an OCI archive of ROOTFS imported as NAME (cluster.sh image).
import_image() {
    local name=${1:?cluster.sh image DIR NAME ROOTFS} rootfs=${2:?cluster.sh image DIR NAME ROOTFS} out
    local entry=${3:-'["/bin/sh"]'}
    [ -d "$rootfs" ] || die "$rootfs: not a directory"
    alive containerd || die "containerd is not running in $dir"
    PATH=$(env_path):$PATH
    out=$dir/images/$(echo "$name" | tr '/:' '__').tar
    image "$name" "$out" "$rootfs" "$entry"
    ctr --address "$dir/containerd/containerd.sock" -n k8s.io images import --platform linux/amd64 "$out" \
        >>"$dir/logs/images.log" 2>&1 || die "ctr images import $out failed ($dir/logs/images.log)"
    say "image $name imported"
}

case $cmd in
restart-kubelet) restart_kubelet ;;
restart-apiserver) restart_apiserver ;;
restart-scheduler) restart_scheduler ;;
extender-certs) extender_certs ;;
image) import_image "${3:-}" "${4:-}" "${5:-}" ;;
*) "$cmd" ;;
esac
