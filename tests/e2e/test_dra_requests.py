"""A claim of several requests end to end, each container naming one: `gpuslice agent --dra` on a
simulated node of two T4s (GPU 0 whole, GPU 1 MPS-shared with the stand-in control daemon, both
DRA's), a pod whose claim has request "whole" (gpu.gpuslice.io) and request "mps"
(mps.gpu.gpuslice.io, 25 % of the threads and 4 GiB), and three containers: one naming "whole",
one naming "mps", one naming the claim. Each container shows what it sees (its environment, mounts
and device nodes): a request's devices, MPS's pipe and limits reach only the containers naming it
(each result is a CDI device of its own); the claim's container sees both. The MPS daemon is the
agent's, started for the GPU DRA serves in MPS mode (its pipe directory is what the container
mounts)."""
import json
import os

import yaml

from dra_util import apply_classes, dra_args, delete_prefixed, slice_devices, slices
from e2e import NS, wait
from test_pods import SHOW, parse

FAKE_MPS = os.environ.get("FAKE_MPS_CONTROL", "")
CLAIM = "dra-req-two"


def _policy(root):
    return (f"version: v1\nflags:\n  mpsRoot: {root}\n  plugin:\n    deviceListStrategy: cdi-cri\n"
            "gpuslice:\n  gpus:\n    - index: \"1\"\n      mode: mps\n      replicas: 4\n"
            "      computePerReplica: 25%\n  dra:\n    gpus: all\n")


def _claim():
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": CLAIM, "namespace": NS},
            "spec": {"devices": {"requests": [
                {"name": "whole", "exactly": {"deviceClassName": "gpu.gpuslice.io"}},
                {"name": "mps", "exactly": {"deviceClassName": "mps.gpu.gpuslice.io",
                                            "capacity": {"requests": {"compute": "25", "memory": "4Gi"}}}}]}}}


def _pod(cluster):
    pod = yaml.safe_load(cluster.pod_yaml("dra-req-pod", {}, SHOW))
    main = pod["spec"]["containers"][0]
    containers = []
    for name, request in (("whole", "whole"), ("mps", "mps"), ("all", None)):
        c = json.loads(json.dumps(main))
        c["name"] = name
        c["resources"] = {"claims": [dict({"name": "gpu"}, **({"request": request} if request else {}))]}
        containers.append(c)
    pod["spec"]["containers"] = containers
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": CLAIM}]
    return pod


def _minors(a):
    return {g["uuid"]: g["minor"] for g in json.loads(a.sim("inspect", "--json").stdout)["gpus"]}


def _gpu_nodes(seen):
    return sorted(n for n in seen["node"] if n[len("/dev/nvidia"):].isdigit())


def test_each_container_sees_only_its_requests(cluster, agent):
    assert FAKE_MPS and os.access(FAKE_MPS, os.X_OK), f"FAKE_MPS_CONTROL={FAKE_MPS!r}: not the built stand-in"
    apply_classes(cluster)
    root = os.path.join(cluster.dir, "mps-dra-req")
    os.makedirs(root, exist_ok=True)
    a = agent("t4x2.yaml", _policy(root), dra_args(cluster) + ["--cdi-hook", "", "--mps-control", FAKE_MPS])
    try:
        wait(lambda: slice_devices(slices(cluster)) == ["gpu-0", "gpu-1"], 120, "the agent's two slices' devices")
        u0, u1 = a.uuids()[:2]
        pid_file = os.path.join(root, u1, "pipe", "nvidia-cuda-mps-control.pid")
        wait(lambda: os.path.exists(pid_file), 60, "the MPS daemon of DRA's GPU 1")
        minors = _minors(a)
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([_claim(), _pod(cluster)]))
        p = cluster.wait_phase("dra-req-pod", ("Succeeded",), timeout=240)
        seen = {s["name"]: parse(s["state"]["terminated"].get("message", "")) for s in p["status"]["containerStatuses"]}
        whole, mps, every = seen["whole"], seen["mps"], seen["all"]

        # "whole": GPU 0, nothing of MPS
        assert whole["env"].get("GPUSLICE_DRA_CLAIM") == f"{NS}/{CLAIM}", whole["env"]
        assert whole["env"].get("GPUSLICE_DRA_DEVICES") == u0 and whole["env"].get("GPUSLICE_DRA_DEVICES_WHOLE") == u0
        assert "GPUSLICE_DRA_DEVICES_MPS" not in whole["env"], whole["env"]
        assert not any(k.startswith("CUDA_MPS_") for k in whole["env"]), whole["env"]
        assert "/mps/pipe" not in whole["mount"], sorted(whole["mount"])
        assert _gpu_nodes(whole) == [f"/dev/nvidia{minors[u0]}"], whole["node"]

        # "mps": GPU 1 through its daemon, with its request's limits
        assert mps["env"].get("GPUSLICE_DRA_DEVICES") == u1 and mps["env"].get("GPUSLICE_DRA_DEVICES_MPS") == u1
        assert "GPUSLICE_DRA_DEVICES_WHOLE" not in mps["env"], mps["env"]
        assert mps["env"].get("CUDA_MPS_PIPE_DIRECTORY") == "/mps/pipe" and "/mps/pipe" in mps["mount"], mps
        assert mps["env"].get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") == "25", mps["env"]
        assert mps["env"].get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") == "0=4096M", mps["env"]
        assert _gpu_nodes(mps) == [f"/dev/nvidia{minors[u1]}"], mps["node"]

        # the claim's container: both requests
        assert every["env"].get("GPUSLICE_DRA_DEVICES_WHOLE") == u0, every["env"]
        assert every["env"].get("GPUSLICE_DRA_DEVICES_MPS") == u1, every["env"]
        assert "/mps/pipe" in every["mount"], sorted(every["mount"])
        assert _gpu_nodes(every) == sorted([f"/dev/nvidia{minors[u0]}", f"/dev/nvidia{minors[u1]}"]), every["node"]
    finally:
        delete_prefixed(cluster, "dra-req-")
