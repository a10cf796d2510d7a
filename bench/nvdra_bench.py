"""NVIDIA's DRA driver (sigs.k8s.io/dra-driver-nvidia-gpu v0.4.1, its gpu-kubelet-plugin; built by
`tests/e2e/build.sh nvidia-dra`) measured in the e2e cluster as bench/dra_bench.py measures
gpuslice's, on the same 8-GPU simulated node (examples/dra/h100x8.yaml; NVIDIA's driver has no
policy: it publishes GPUs 0-5 whole, and nothing of the two MIG-mode GPUs without instances), run
the way tests/e2e/test_nvidia_dra.py runs it (a host process, its driver root made from the
simulated root, registered with the real kubelet):

  - prepare latency of a whole-GPU claim (the chart's gpu.nvidia.com class), from the kubelet's
    own histograms, scraped from its port (base + 250) with the admin client certificate
    (bench/kubehttp.py): pods with one claim each, one after another, so the change of _sum over
    one pod is that pod's one call as the kubelet timed it:
    dra_grpc_operations_duration_seconds{method_name=".../NodePrepareResources"} (the gRPC call
    to the driver) and dra_operations_duration_seconds{operation_name="PrepareResources"} (the
    kubelet's whole handling of the pod's claims); and pod create -> Running;
  - the plugin's resident memory (VmRSS, VmHWM, Pss) once its slices are published and again after
    the pods.

Not a test: nothing is asserted on the timings, but every wait is bounded and it fails loudly
(exit 1) when a pod never runs or the kubelet's histogram does not count one call.

usage (root; from the repository root, after `meson setup build-bench && ninja -C build-bench`):
  GS_E2E_PORT_BASE=18500 /usr/bin/python3 bench/nvdra_bench.py --build build-bench [--pods 10] [--json F]
It brings up a cluster of its own (taken down at the end) unless GS_E2E_DIR names one that is up."""
import argparse
import os
import statistics
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _p in ("bench", "tests/e2e", "tests/nvmlclients"):
    sys.path.insert(0, os.path.join(ROOT, _p))
ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--build", default="build")
ap.add_argument("--pods", type=int, default=10, help="pods one after another")
ap.add_argument("--json")
ARGS = ap.parse_args()
BUILD = os.path.abspath(ARGS.build)
os.environ.setdefault("GPUSLICE", os.path.join(BUILD, "gpuslice"))
os.environ.setdefault("GS_GUARD_LIB", os.path.join(BUILD, "guard", "libgpuslice-guard.so"))
# dra_bench.py's histogram reader (it parses its own arguments at import; only --build matters)
_argv, sys.argv = sys.argv, [sys.argv[0], "--build", BUILD]
import dra_bench  # noqa: E402
sys.argv = _argv
import e2e_plugins  # noqa: E402
import kubehttp  # noqa: E402
import test_nvidia_dra as tn  # noqa: E402
from dra_bench import GRPC, OPS, kubelet_sums, pct  # noqa: E402
from dra_util import claim_pod_yaml  # noqa: E402
from e2e import NS, E2EError, wait  # noqa: E402

NODE = os.path.join(ROOT, "examples", "dra", "h100x8.yaml")


def counted(kubelet, before):
    """The kubelet's sums once both histograms have counted one more call (only NVIDIA's driver
    serves claims while this runs), else None."""
    a = kubelet_sums(kubelet)
    return a if all(a.get(m, (0, 0))[1] > before.get(m, (0, 0))[1] for m in (GRPC, OPS)) else None


def pods(cluster, kubelet, n):
    """n pods with one whole-GPU claim each, one after another: the kubelet's times, seconds."""
    grpc_s, ops_s, start_s = [], [], []
    for i in range(n):
        name = f"bench-{i}"
        before = kubelet_sums(kubelet)
        pod = yaml.safe_load(claim_pod_yaml(cluster, tn.PREFIX + name, tn.PREFIX + name, "sleep 3600"))
        t0 = time.monotonic()
        tn.create(cluster, tn.nv_claim(name), pod)
        cluster.wait_phase(tn.PREFIX + name, ("Running",), timeout=180)
        start_s.append(time.monotonic() - t0)
        after = wait(lambda: counted(kubelet, before), 30, "the kubelet's histograms to count the prepare")
        for metric, out in ((GRPC, grpc_s), (OPS, ops_s)):
            (s0, c0), (s1, c1) = before.get(metric, (0.0, 0)), after[metric]
            if c1 != c0 + 1:
                raise E2EError(f"{metric}: {c1 - c0} calls counted over pod {name}, not 1")
            out.append(s1 - s0)
        uid = cluster.get("resourceclaim", "-n", NS, tn.PREFIX + name)["metadata"]["uid"]
        cluster.kubectl("delete", "pod", "-n", NS, tn.PREFIX + name, "--grace-period=1")
        tn.wait_unprepared(cluster, uid, 120)
        cluster.kubectl("delete", "resourceclaim", "-n", NS, tn.PREFIX + name)
    return {"kubelet_grpc": grpc_s, "kubelet_op": ops_s, "pod_running": start_s}


def rss(pid):
    return {k: v / 1024 for k, v in e2e_plugins.memory(pid).items()}  # MiB


def run(cluster):
    kubelet = kubehttp.Client(cluster.dir, cluster.port_base + 250, timeout=30)
    bin_dir, chart = tn.build()
    base = tempfile.mkdtemp(prefix="nvdra-bench.", dir=cluster.dir)
    tn.create(cluster, tn.device_class(chart))
    p = tn.NvidiaDra(cluster, bin_dir, NODE, os.path.join(base, "sim"))
    results = {"rss": {}}
    try:
        # GPUs 0-5 whole; 6 and 7 are in MIG mode without instances, which v0.4.1 publishes
        # nothing for (MIG devices made on demand are its DynamicMIG gate, alpha, off)
        want = [f"gpu-{i}" for i in range(6)]
        wait(lambda: p.alive_or_fail() or tn.slice_devices(tn.nv_slices(cluster)) == want, 180,
             "NVIDIA's plugin's devices gpu-0 .. gpu-5 in its ResourceSlices")
        time.sleep(2)
        results["devices"] = tn.slice_devices(tn.nv_slices(cluster))
        pid = p.proc.pid   # unshare and sh exec the plugin: the same process
        results["rss"]["slices published"] = rss(pid)
        results["whole"] = pods(cluster, kubelet, ARGS.pods)
        results["rss"]["after the pods"] = rss(pid)
    finally:
        tn.cleanup(cluster)
        p.stop()
        cluster.kubectl("delete", "resourceslices", "--field-selector", f"spec.driver={tn.DRIVER}", check=False)
        cluster.kubectl("delete", "deviceclass", tn.DRIVER, "--ignore-not-found", check=False)
    return results


def table(results):
    r = results["whole"]
    lines = ["| claim kind | kubelet gRPC NodePrepareResources p50 / p99 (ms) | kubelet PrepareResources p50 / p99 "
             "(ms) | pod create -> Running p50 (s) |", "| --- | --- | --- | --- |",
             f"| whole GPU (gpu.nvidia.com) | {pct(r['kubelet_grpc'], 50) * 1000:.1f} / "
             f"{pct(r['kubelet_grpc'], 99) * 1000:.1f} | {pct(r['kubelet_op'], 50) * 1000:.1f} / "
             f"{pct(r['kubelet_op'], 99) * 1000:.1f} | {statistics.median(r['pod_running']):.2f} |",
             "", "| NVIDIA's gpu-kubelet-plugin | VmRSS (MiB) | VmHWM (MiB) | Pss (MiB) |", "| --- | --- | --- | --- |"]
    for what, m in results["rss"].items():
        lines.append(f"| {what} | {m['VmRSS']:.1f} | {m['VmHWM']:.1f} | {m['Pss']:.1f} |")
    return "\n".join(lines)


def main():
    # dra_bench.py's cluster handling (a cluster of its own, or GS_E2E_DIR's; exit 1 on a failed
    # wait; --json), with this bench's run and table
    dra_bench.run, dra_bench.table, dra_bench.ARGS.json = run, table, ARGS.json
    dra_bench.main()


if __name__ == "__main__":
    main()
