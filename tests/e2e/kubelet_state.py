"""What the real kubelet recorded: its device-manager checkpoint (DIR/kubelet/device-plugins/
kubelet_internal_checkpoint) holds, per pod and container, the device IDs it assigned and the
agent's Allocate answer as it received it (ContainerAllocateResponse, protobuf, base64). The
messages are decoded with the v1beta1 definitions the integration tests compile
(tests/integration/kubelet/api.proto, through kubelet_emulator's generated modules)."""
import base64
import json
import os
import sys

from e2e import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from kubelet_emulator import pb  # noqa: E402


def checkpoint(cluster):
    with open(os.path.join(cluster.kubelet_dir, "device-plugins", "kubelet_internal_checkpoint")) as f:
        return json.load(f)["Data"]


def allocations(cluster, pod_uid):
    """[(container, resource, device IDs, ContainerAllocateResponse)] the kubelet holds for a pod."""
    out = []
    for e in checkpoint(cluster).get("PodDeviceEntries") or []:
        if e["PodUID"] != pod_uid:
            continue
        ids = sorted(i for per_numa in e["DeviceIDs"].values() for i in per_numa)
        resp = pb.ContainerAllocateResponse.FromString(base64.b64decode(e["AllocResp"]))
        out.append((e["ContainerName"], e["ResourceName"], ids, resp))
    return out


def all_assigned(cluster, resource):
    """Every device ID of RESOURCE the kubelet has assigned to a pod, with repeats."""
    ids = []
    for e in checkpoint(cluster).get("PodDeviceEntries") or []:
        if e["ResourceName"] == resource:
            ids += [i for per_numa in e["DeviceIDs"].values() for i in per_numa]
    return ids
