"""A claim of several requests end to end, each container naming one: `gpuslice agent --dra` on a
simulated node of two T4s (GPU 0 whole, GPU 1 MPS-shared with the stand-in control daemon, both
DRA's), a pod whose claim has request "whole" (gpu.gpuslice.io) and request "mps"
(mps.gpu.gpuslice.io, 25 % of the threads and 4 GiB), and three containers: one naming "whole",
one naming "mps", one naming the claim. Each container shows what it sees (its environment, mounts
and device nodes): a request's devices, MPS's pipe and limits reach only the containers naming it
(each result is a CDI device of its own); the claim's container sees both. The MPS daemon is the
agent's, started for the GPU DRA serves in MPS mode (its pipe directory is what the container
mounts). A claim of four requests, each a 1g.10gb MIG device made on demand, and four containers,
one a request: each sees its own MIG device only (its UUID, its two capability nodes)."""
import json
import os

import yaml

from dra_util import DRIVER, apply_classes, case_dirs, delete_prefixed, dra_args, dra_policy, h100_node, slice_devices, \
    slices
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


def _pod(cluster, name="dra-req-pod", claim=CLAIM, names=(("whole", "whole"), ("mps", "mps"), ("all", None))):
    pod = yaml.safe_load(cluster.pod_yaml(name, {}, SHOW))
    main = pod["spec"]["containers"][0]
    containers = []
    for name, request in names:
        c = json.loads(json.dumps(main))
        c["name"] = name
        c["resources"] = {"claims": [dict({"name": "gpu"}, **({"request": request} if request else {}))]}
        containers.append(c)
    pod["spec"]["containers"] = containers
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
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


def test_four_mig_requests_each_container_sees_its_own(cluster, agent):
    apply_classes(cluster)
    node, _ = case_dirs(cluster, "dra-req-mig", h100_node(mig=(0, 1)))
    policy = dra_policy('{index: "0,1", mode: mig}', flags="  migStrategy: mixed\n")
    a = agent(node, policy, dra_args(cluster) + ["--cdi-hook", ""])
    try:
        wait(lambda: any(d.startswith("gpu-0-mig-1g10gb-") for d in slice_devices(slices(cluster))), 120,
             "the MIG placements in the slices")
        sel = f'device.attributes["{DRIVER}"].profile == "1g.10gb"'
        reqs = [{"name": f"r{i}", "exactly": {"deviceClassName": f"mig.{DRIVER}",
                                              "selectors": [{"cel": {"expression": sel}}]}} for i in range(4)]
        claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": "dra-req-mig", "namespace": NS}, "spec": {"devices": {"requests": reqs}}}
        pod = _pod(cluster, "dra-req-migpod", "dra-req-mig", [(f"c{i}", f"r{i}") for i in range(4)])
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([claim, pod]))
        p = cluster.wait_phase("dra-req-migpod", ("Succeeded",), timeout=240)
        seen = {s["name"]: parse(s["state"]["terminated"].get("message", "")) for s in p["status"]["containerStatuses"]}
        uuids, caps = [], []
        for i in range(4):
            env = seen[f"c{i}"]["env"]
            uuid = env.get("GPUSLICE_DRA_DEVICES", "")
            assert uuid.startswith("MIG-") and "," not in uuid, env
            assert env.get(f"GPUSLICE_DRA_DEVICES_R{i}") == uuid, env
            assert not any(env.get(f"GPUSLICE_DRA_DEVICES_R{j}") for j in range(4) if j != i), env
            mine = {n for n in seen[f"c{i}"]["node"] if n.startswith("/dev/nvidia-caps/")}
            assert len(mine) == 2, seen[f"c{i}"]["node"]   # its GI's and CI's access nodes, no other's
            uuids.append(uuid)
            caps.append(mine)
        assert len(set(uuids)) == 4, uuids
        for i in range(4):
            for j in range(i + 1, 4):
                assert not caps[i] & caps[j], (i, j, caps)
        print(f"DRA four MIG requests: {uuids}, caps {caps}")
    finally:
        delete_prefixed(cluster, "dra-req-")
