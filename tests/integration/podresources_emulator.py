"""A PodResources v1 server for tests: answers /v1.PodResourcesLister/List on a unix socket with
the assignments the test sets, the way the kubelet answers it (pods -> containers -> devices).

The messages come from src/kubelet/podresources.proto, the same file the agent is built from,
compiled here with grpc_tools; the service is registered by hand (that file declares no service)."""
import atexit
import importlib
import os
import shutil
import sys
import tempfile
import threading
from concurrent import futures

import grpc

ROOT = os.environ.get("GS_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROTO_PATH = os.path.join(ROOT, "src", "kubelet", "podresources.proto")


def _generate():
    from grpc_tools import protoc

    out = tempfile.mkdtemp(prefix="gs-prpb-")
    atexit.register(shutil.rmtree, out, True)
    name = "gs_podresources_v1"
    shutil.copyfile(PROTO_PATH, os.path.join(out, name + ".proto"))
    rc = protoc.main(["grpc_tools.protoc", "-I" + out, "--python_out=" + out, os.path.join(out, name + ".proto")])
    if rc != 0:
        raise RuntimeError(f"grpc_tools.protoc failed ({rc}) on {PROTO_PATH}")
    sys.path.insert(0, out)
    try:
        return importlib.import_module(name + "_pb2")
    finally:
        sys.path.remove(out)


pb = _generate()


class PodResourcesEmulator:
    """assignments: list of (namespace, pod, container, resource, [device ids])."""

    def __init__(self, socket_path):
        self.socket_path = socket_path
        self.assignments = []
        self.calls = 0
        self.status = None          # a grpc.StatusCode to fail List with, e.g. RESOURCE_EXHAUSTED
        self._lock = threading.Lock()
        self._server = None

    def set(self, assignments):
        with self._lock:
            self.assignments = list(assignments)

    def _list(self, request, context):
        with self._lock:
            self.calls += 1
            if self.status is not None:
                context.abort(self.status, "rejected by rate limit")
            pods = {}
            for ns, pod, container, resource, ids in self.assignments:
                p = pods.setdefault((ns, pod), pb.PodResources(name=pod, namespace=ns))
                c = next((c for c in p.containers if c.name == container), None)
                if c is None:
                    c = p.containers.add(name=container)
                c.devices.add(resource_name=resource, device_ids=list(ids))
            return pb.ListPodResourcesResponse(pod_resources=list(pods.values()))

    def start(self):
        handler = grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
            "List": grpc.unary_unary_rpc_method_handler(
                self._list, request_deserializer=pb.ListPodResourcesRequest.FromString,
                response_serializer=pb.ListPodResourcesResponse.SerializeToString),
        })
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self._server.add_generic_rpc_handlers((handler,))
        self._server.add_insecure_port("unix:" + self.socket_path)
        self._server.start()
        return self

    def stop(self):
        if self._server:
            self._server.stop(0)
            self._server = None
