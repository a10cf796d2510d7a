"""The extender's score decides among several nodes in the real cluster: the real
kube-scheduler with `gpuslice extender --kubeconfig` (test_extender.py's fixture and scheduler
configuration) chooses between the cluster's real node (its kubelet, gpuslice's agent on two
simulated fractional H100s) and a second Node with the same two GPUs that kwok v0.8.0
(tests/e2e/build.sh kwok, part of the e2e build) keeps alive with its own node Stages
(bench/kwok/stages-node.yaml).

The two disagree by construction: a filler pod (20 GiB, pinned to the real node, 500m CPU and
512 MiB) holds part of one of the real node's GPUs, and the kwok node is empty with far more CPU
and memory. The extender's policy (gpuslice's packing score) prefers the real node, whose used
GPU takes the pod without breaking a whole one; the default scheduler's LeastAllocated (CPU and
memory) prefers the empty kwok node.

- the extender's own /prioritize, called with the pod as the scheduler calls it (ExtenderArgs with
  the NodeNames), scores the real node above the kwok node;
- the pod (20 GiB) lands on the node it scored highest; its Binding's gpuslice.io/gpu-index is the
  GPU the extender chose and the container's device node is that GPU;
- the same pod under the scheduler's own configuration (no extender) lands on the kwok node, so
  the placement above is the score's and not the default one's.

kwok is stopped by its pid (also in DIR/run, so that `cluster.sh down` stops it if the test
dies); its Node and the pods on it are deleted. Every wait is bounded."""
import json
import os
import subprocess
import time

from e2e import NS, ROOT, E2EError, HostProc, extender_open, wait
from test_extender import ANN, H100X2, MEM, POLICY, SCRIPT, SM, devices, extender, features, metrics  # noqa: F401
from test_extender import gpu_of, restart_scheduler

BUILD_SH = os.path.join(ROOT, "tests", "e2e", "build.sh")
STAGES = os.path.join(ROOT, "bench", "kwok", "stages-node.yaml")
KWOK_NODE = "gs-e2e-kwok-1"
KWOK_SEL = "gpuslice.io/e2e-kwok"
FILLER_GIB, POD_GIB = 20, 20


def kwok_bin():
    """kwok from tests/e2e/build.sh (cached by version; built here if it is not)."""
    p = subprocess.run(["bash", BUILD_SH, "kwok"], capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, f"tests/e2e/build.sh kwok: exit {p.returncode}\n{p.stderr[-3000:]}"
    path = os.path.join(p.stdout.strip().splitlines()[-1], "kwok")
    assert os.access(path, os.X_OK), f"build.sh kwok printed {p.stdout!r}: no {path}"
    return path


def start_kwok(cluster):
    """kwok managing the Nodes labelled KWOK_SEL=true."""
    return HostProc(cluster, "kwok-e2e", [kwok_bin(), "--kubeconfig", cluster.kubeconfig,
                                          "--manage-nodes-with-label-selector", f"{KWOK_SEL}=true",
                                          "--node-lease-duration-seconds", "40", "-v", "WARN", "--config", STAGES])


def node_object(labels, alloc):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": KWOK_NODE, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": dict(labels, **{KWOK_SEL: "true", "type": "kwok",
                                                   "kubernetes.io/hostname": KWOK_NODE})},
            "spec": {}, "status": {"capacity": alloc, "allocatable": alloc}}


def ready(cluster, name):
    n = cluster.get("node", name)
    return any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))


def pod_object(cluster, name, gib, node=None, cpu=None, memory=None):
    out = os.path.join(cluster.dir, "extender-out")
    os.makedirs(out, exist_ok=True)
    res = {"limits": {MEM: str(gib)}}
    if cpu:
        res["requests"] = {"cpu": cpu, "memory": memory}
        res["limits"].update(cpu=cpu, memory=memory)
    spec = {"hostNetwork": True, "dnsPolicy": "Default", "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1, "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "containers": [{"name": "main", "image": cluster.image, "imagePullPolicy": "Never",
                            "command": ["/bin/sh", "-c", f"NAME={name}; " + SCRIPT], "resources": res,
                            "volumeMounts": [{"name": "out", "mountPath": "/out"}]}],
            "volumes": [{"name": "out", "hostPath": {"path": out, "type": "DirectoryOrCreate"}}]}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec}


def prioritize(cluster, addr, pod, nodes):
    """The extender's /prioritize as the scheduler calls it (nodeCacheCapable: NodeNames; its client
    certificate): {node: score}."""
    with extender_open(cluster, addr, "/gpuslice/prioritize", {"Pod": pod, "NodeNames": nodes}) as r:
        return {h["Host"]: h["Score"] for h in json.loads(r.read())}


def bound_node(cluster, name):
    return cluster.pod(name)["spec"].get("nodeName") or E2EError(f"{name} not bound: {cluster.events(name)}")


def test_extender_score_places_among_nodes(cluster, agent, extender):
    addr, conf, proc, log_path, labelled = extender
    t0 = time.monotonic()
    real = cluster.node_name
    node = os.path.join(cluster.dir, "h100x2-score.yaml")
    with open(node, "w") as f:
        f.write(H100X2)
    a = agent(node, POLICY, extra=["--kubeconfig", cluster.kubeconfig, "--node-name", real, "--cdi-hook", ""])
    cluster.wait_allocatable({MEM: 160, SM: 200}, timeout=120)
    labels = wait(lambda: {k: v for k, v in features(a).items() if k.startswith(MEM + ".")}, 30,
                  "the agent's gpu-memory labels in its features file")
    assert labels[MEM + ".count"] == "2", labels
    labelled.extend(labels)
    cluster.kubectl("label", "node", real, "--overwrite", *[f"{k}={v}" for k, v in labels.items()])

    kwok = start_kwok(cluster)
    try:
        # the kwok node: the same two GPUs (labels and allocatable), far more CPU and memory
        alloc = {"cpu": "64", "memory": "256Gi", "pods": "110", MEM: "160", SM: "200"}
        cluster.kubectl("create", "-f", "-", input=json.dumps(node_object(labels, alloc)))
        wait(lambda: ready(cluster, KWOK_NODE) and cluster.get("node", KWOK_NODE)["status"]
             .get("allocatable", {}).get(MEM) == "160", 120, f"{KWOK_NODE} Ready with its allocatable (kwok)")
        assert kwok.alive(), kwok.log()[-3000:]
        wait(lambda: metrics(cluster, addr).get("gpuslice_extender_nodes") == 2, 60, "the extender's model of both Nodes")
        restart_scheduler(cluster, conf)

        # the filler: part of one of the real node's GPUs, bound by the extender
        cluster.kubectl("apply", "-f", "-", input=json.dumps(
            pod_object(cluster, "score-filler", FILLER_GIB, node=real, cpu="500m", memory="512Mi")))
        cluster.wait_phase("score-filler", ("Running",), timeout=120)
        gf = gpu_of(cluster, "score-filler")
        assert gf in ("0", "1") and devices(cluster, "score-filler") == [f"nvidia{gf}"], cluster.pod("score-filler")

        # the extender's scores for the pod, asked as the scheduler asks
        probe = json.loads(cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(
            pod_object(cluster, "score-ext", POD_GIB))).stdout)
        scores = prioritize(cluster, addr, probe, [real, KWOK_NODE])
        print(f"test_extender_score: the extender's /prioritize: {scores}")
        assert set(scores) == {real, KWOK_NODE} and scores[real] > scores[KWOK_NODE], \
            f"the set-up should make the extender prefer the real node: {scores}"
        best = max(scores, key=scores.get)

        # the pod lands where the extender scored highest, on the GPU it chose
        cluster.kubectl("apply", "-f", "-", input=json.dumps(pod_object(cluster, "score-ext", POD_GIB)))
        assert wait(lambda: bound_node(cluster, "score-ext"), 120, "score-ext bound") == best
        cluster.wait_phase("score-ext", ("Running",), timeout=120)
        ge = gpu_of(cluster, "score-ext")
        assert ge in ("0", "1"), cluster.pod("score-ext")["metadata"]
        assert devices(cluster, "score-ext") == [f"nvidia{ge}"]
        print(f"test_extender_score: filler on GPU {gf}, score-ext on {best} GPU {ge}")
        m = metrics(cluster, addr)
        assert m["gpuslice_extender_binds_total"] >= 2 and m["gpuslice_extender_pods_bound"] == 2, m

        # the same pod under the scheduler's own configuration: LeastAllocated takes the empty node
        cluster.kubectl("delete", "pod", "-n", NS, "score-ext", "--grace-period=1", "--wait=true", timeout=120)
        restart_scheduler(cluster, None)
        cluster.kubectl("apply", "-f", "-", input=json.dumps(pod_object(cluster, "score-default", POD_GIB)))
        other = wait(lambda: bound_node(cluster, "score-default"), 120, "score-default bound")
        assert other == KWOK_NODE != best, f"without the extender score-default went to {other}"
        assert not cluster.pod("score-default")["metadata"].get("annotations", {}).get(ANN)
        assert kwok.alive() and proc.poll() is None and a.alive()
        print(f"test_extender_score: {time.monotonic() - t0:.1f} s")
    finally:
        # nothing runs the kwok node's pods: deleted at once, then the Node, then kwok by its pid
        try:
            pods = cluster.get("pods", "-n", NS, "--field-selector", f"spec.nodeName={KWOK_NODE}")["items"]
            for p in pods:
                cluster.kubectl("delete", "pod", "-n", NS, p["metadata"]["name"], "--grace-period=0", "--force",
                                check=False)
            # gone before the next test, whose pods would fit its GPUs
            cluster.kubectl("delete", "node", KWOK_NODE, "--ignore-not-found", "--wait=true", timeout=90)
        finally:
            print(f"---- kwok log\n{kwok.log()[-2000:]}")
            stopped = kwok.stop()
    assert stopped, f"kwok (pid {kwok.proc.pid}) still running 10 s after SIGTERM: killed"
