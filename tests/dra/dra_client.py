"""A kubelet-side client of gpuslice's DRA driver (what the kubelet's plugin manager calls), for
tests: the _pb2 modules are generated at import time from the project's own protos
(src/dra/dra.proto, src/dra/pluginregistration.proto) with Debian's python3-grpc-tools into a
private temporary directory, as tests/integration/kubelet_emulator.py does for the device plugin.

DraClient(reg_sock) talks to the registration socket (GetInfo, NotifyRegistrationStatus) and to the
endpoint GetInfo names (NodePrepareResources, NodeUnprepareResources, over v1 or v1beta1: the same
messages on the wire, called by their method paths)."""
import atexit
import importlib
import os
import shutil
import sys
import tempfile

import grpc

ROOT = os.environ.get("GS_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROTOS = [os.path.join(ROOT, "src", "dra", n) for n in ("dra.proto", "pluginregistration.proto")]


def _generate():
    from grpc_tools import protoc

    out = tempfile.mkdtemp(prefix="gs-drapb-")
    atexit.register(shutil.rmtree, out, True)
    mods = []
    for path in PROTOS:
        name = "gs_" + os.path.basename(path).replace(".proto", "")
        shutil.copyfile(path, os.path.join(out, name + ".proto"))
        include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
        rc = protoc.main(["grpc_tools.protoc", "-I" + out, "-I" + include, "--python_out=" + out,
                          "--grpc_python_out=" + out, os.path.join(out, name + ".proto")])
        if rc != 0:
            raise RuntimeError(f"grpc_tools.protoc failed ({rc}) on {path}")
        mods.append(name)
    sys.path.insert(0, out)
    try:
        return [importlib.import_module(m + "_pb2") for m in mods]
    finally:
        sys.path.remove(out)


dra_pb, reg_pb = _generate()

SERVICES = {"v1": "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
            "v1beta1": "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"}


def claim(ns, name, uid):
    return dra_pb.Claim(namespace=ns, name=name, uid=uid)


class DraClient:
    def __init__(self, reg_sock, timeout=30):
        self.timeout = timeout
        self.reg = grpc.insecure_channel("unix:" + reg_sock)
        self.dra = None

    def close(self):
        self.reg.close()
        if self.dra:
            self.dra.close()

    def _unary(self, channel, path, req, resp_type):
        call = channel.unary_unary(path, request_serializer=lambda m: m.SerializeToString(),
                                   response_deserializer=resp_type.FromString)
        return call(req, timeout=self.timeout)

    def get_info(self):
        info = self._unary(self.reg, "/pluginregistration.Registration/GetInfo", reg_pb.InfoRequest(),
                           reg_pb.PluginInfo)
        if self.dra is None:
            self.dra = grpc.insecure_channel("unix:" + info.endpoint)
        return info

    def notify(self, registered, error=""):
        return self._unary(self.reg, "/pluginregistration.Registration/NotifyRegistrationStatus",
                           reg_pb.RegistrationStatus(plugin_registered=registered, error=error),
                           reg_pb.RegistrationStatusResponse)

    def prepare(self, claims, version="v1"):
        """{uid: NodePrepareResourceResponse}"""
        r = self._unary(self.dra, f"/{SERVICES[version]}/NodePrepareResources",
                        dra_pb.NodePrepareResourcesRequest(claims=claims), dra_pb.NodePrepareResourcesResponse)
        return dict(r.claims)

    def unprepare(self, claims, version="v1"):
        r = self._unary(self.dra, f"/{SERVICES[version]}/NodeUnprepareResources",
                        dra_pb.NodeUnprepareResourcesRequest(claims=claims), dra_pb.NodeUnprepareResourcesResponse)
        return dict(r.claims)

    def raw(self, method, data, version="v1"):
        """Sends bytes as the request of METHOD; returns the answer's bytes (or raises grpc.RpcError)."""
        call = self.dra.unary_unary(f"/{SERVICES[version]}/{method}", request_serializer=lambda b: b,
                                    response_deserializer=lambda b: b)
        return call(data, timeout=self.timeout)
