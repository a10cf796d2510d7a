"""gpuslice extender over HTTPS with client certificates (loopback), and its bind's safety against
an API server emulator (tests/kube/emulator.py's HTTPS server, serving Nodes, Pods and Bindings):

- a client without a certificate gets 401 for everything but /healthz, and nothing changes; one
  whose certificate another CA signed fails the handshake; the scheduler's is served; with
  --allowed-client-name, a certificate of the right CA naming someone else gets 401;
- plain HTTP is refused at start on a non-loopback address, and without --insecure-loopback-http;
- a bind naming a pod the filter never saw, a UID the API server does not show for that pod, a pod
  already bound or not Pending is refused with its reason, writes no Binding and leaves the model as
  it was; a good one writes the Binding with the pod's UID as its precondition.

Certificates are made with openssl in the test's directory."""
import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "kube"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
from emulator import Emulator, Handler, make_pki, status  # noqa: E402
from kubeconfig import write_kubeconfig  # noqa: E402
import wait  # noqa: E402 (tests/lib)

GPUSLICE = os.environ.get("GPUSLICE", "gpuslice")

SNAPSHOT = {"nodes": [{"name": "idle", "cpuMilli": 32000, "memoryMiB": 262144, "gpuModel": "A100",
                       "gpuMemoryMiB": 81920, "gpuFree": [1000, 1000]}]}


def ossl(d, *args):
    subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)


def make_tls(d):
    """In d: ca.crt/key (the extender's client CA and its server certificate's), server.crt/key (SAN
    IP 127.0.0.1), scheduler.crt/key (clientAuth, SAN DNS kube-scheduler), intruder.crt/key (the
    same CA, SAN DNS intruder), wrong.crt/key (the scheduler's name, signed by another CA)."""
    for ca in ("ca", "other-ca"):
        ossl(d, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key", "-out", f"{ca}.crt",
             "-days", "2", "-subj", f"/CN=gpuslice-extender-test-{ca}")

    def leaf(name, ca, cn, ext):
        with open(os.path.join(d, f"{name}.ext"), "w") as f:
            f.write(ext)
        ossl(d, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", f"/CN={cn}")
        ossl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext")
    leaf("server", "ca", "gpuslice-extender", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    leaf("scheduler", "ca", "kube-scheduler", "subjectAltName=DNS:kube-scheduler\nextendedKeyUsage=clientAuth\n")
    leaf("intruder", "ca", "intruder", "subjectAltName=DNS:intruder\nextendedKeyUsage=clientAuth\n")
    leaf("wrong", "other-ca", "kube-scheduler", "subjectAltName=DNS:kube-scheduler\nextendedKeyUsage=clientAuth\n")


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    make_tls(str(d))
    return d


class Extender:
    """`gpuslice extender` with TLS (the certificates of tls), its nodes from a snapshot or the
    API server (source: the arguments)."""

    def __init__(self, tmp_path, tls, source=None, extra=()):
        if source is None:
            snap = tmp_path / "snap.json"
            snap.write_text(json.dumps(SNAPSHOT))
            source = ["--snapshot", str(snap)]
        self.tls = tls
        self.log = open(tmp_path / "extender.log", "w+")
        self.p = subprocess.Popen([GPUSLICE, "extender", *source, "--listen", "127.0.0.1:0", "--policy", "gpuslice",
                                   "--tls-cert-file", str(tls / "server.crt"), "--tls-key-file", str(tls / "server.key"),
                                   "--client-ca-file", str(tls / "ca.crt"), *extra],
                                  stdout=self.log, stderr=subprocess.STDOUT)
        def port():
            text = self.text()
            assert self.p.poll() is None, text
            m = re.search(r"\(port (\d+)\)", text)
            return int(m.group(1)) if m else None
        self.port = wait.until(port, timeout=20, what="the extender's port in its log", detail=self.text)

    def text(self):
        with open(self.log.name) as f:
            return f.read()

    def context(self, cert):
        ctx = ssl.create_default_context(cafile=str(self.tls / "ca.crt"))
        if cert:
            ctx.load_cert_chain(str(self.tls / f"{cert}.crt"), str(self.tls / f"{cert}.key"))
        return ctx

    def request(self, method, path, obj=None, cert="scheduler"):
        c = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=10, context=self.context(cert))
        try:
            body = None if obj is None else json.dumps(obj)
            c.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
            r = c.getresponse()
            data = r.read()
            return r.status, (json.loads(data) if data[:1] in (b"{", b"[") else data.decode())
        finally:
            c.close()

    def metric(self, name):
        st, text = self.request("GET", "/metrics")
        assert st == 200, text
        m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
        assert m, text
        return float(m.group(1))

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.log.close()


def pod_obj(name, uid, gpus=1, node="", phase="Pending"):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": uid, "resourceVersion": "5"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {
                "limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"cpu": "1"}}}]},
            "status": {"phase": phase}}


def filter_args(pod, nodes=("idle",)):
    return {"Pod": pod, "NodeNames": list(nodes)}


def test_client_certificates(tmp_path, tls):
    """No certificate: 401 but /healthz, nothing counted nor committed; another CA's: no handshake;
    plain HTTP to the TLS port: no answer; the scheduler's: served."""
    e = Extender(tmp_path, tls)
    try:
        assert e.request("GET", "/healthz", cert=None) == (200, "ok\n")
        st, text = e.request("POST", "/x/filter", filter_args(pod_obj("p", "u1")), cert=None)
        assert st == 401 and "client certificate" in text
        st, _ = e.request("POST", "/x/bind", {"PodName": "p", "PodNamespace": "default", "PodUID": "u1",
                                              "Node": "idle"}, cert=None)
        assert st == 401
        assert e.request("GET", "/metrics", cert=None)[0] == 401
        with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
            e.request("POST", "/x/filter", filter_args(pod_obj("p", "u1")), cert="wrong")
        with socket.create_connection(("127.0.0.1", e.port), timeout=5) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            s.settimeout(5)
            try:
                got = s.recv(4096)
            except ConnectionResetError:
                got = b""
            assert b"HTTP/1.1" not in got
        # the scheduler's certificate: the first requests counted are its own
        assert e.metric("gpuslice_extender_unauthorized_total") == 3
        assert e.metric('gpuslice_extender_requests_total{verb="filter"}') == 0
        assert e.metric('gpuslice_extender_requests_total{verb="bind"}') == 0
        assert e.metric("gpuslice_extender_pods_bound") == 0
        st, r = e.request("POST", "/x/filter", filter_args(pod_obj("p", "u1", gpus=2)))
        assert st == 200 and r["NodeNames"] == ["idle"], r
        st, r = e.request("POST", "/x/bind", {"PodName": "p", "PodNamespace": "default", "PodUID": "u1",
                                              "Node": "idle"})
        assert st == 200 and r == {"Error": ""}, r
        assert e.metric("gpuslice_extender_pods_bound") == 1
        assert "certificate verify failed" in e.text()
    finally:
        e.stop()


def test_pipelined_and_keep_alive_over_tls(tmp_path, tls):
    """Two requests in one TLS record get two answers (the second from what OpenSSL decrypted
    beyond the first read, which poll does not see), then a third on the same connection; a
    large body arrives in many records."""
    e = Extender(tmp_path, tls)
    try:
        # 6 KB each: both in one 12 KB record, of which a read of the 8 KB request buffer leaves 4 KB
        # inside OpenSSL
        # (padded in an annotation: a request may name only a few more nodes than the extender knows)
        padded = pod_obj("p", "u1")
        padded["metadata"]["annotations"] = {"pad": "x" * 5800}
        body = json.dumps(filter_args(padded, ["idle"])).encode()
        req = b"POST /x/filter HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        assert 6000 < len(req) < 8000
        t0 = time.monotonic()
        with socket.create_connection(("127.0.0.1", e.port), timeout=10) as raw:
            with e.context("scheduler").wrap_socket(raw, server_hostname="127.0.0.1") as s:
                s.sendall(req + req)
                out = b""
                while out.count(b"HTTP/1.1 200 OK") < 2 or not out.endswith(b"}"):
                    got = s.recv(65536)
                    assert got, out
                    out += got
                assert out.count(b'"NodeNames":["idle"]') == 2, out
                assert time.monotonic() - t0 < 5, "the second request waited for the connection's deadline"
                large = pod_obj("p", "u2")
                large["metadata"]["annotations"] = {"pad": "y" * 200000}
                big = json.dumps({"Pod": large, "NodeNames": ["idle"] + [f"n{i}" for i in range(200)]})
                s.sendall(b"POST /x/filter HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
                          % len(big) + big.encode())
                out = b""
                while True:
                    got = s.recv(65536)
                    if not got:
                        break
                    out += got
                assert out.startswith(b"HTTP/1.1 200 OK") and b'"idle"' in out and b'"n199"' in out, out[:300]
    finally:
        e.stop()


def test_an_unverified_clients_body_is_not_read(tmp_path, tls):
    """A client without a certificate that announces the largest body the extender takes gets its
    401 at once, before it has sent any of it (nothing of it is held), and the connection closes;
    the extender's memory does not grow with what such clients announce."""
    e = Extender(tmp_path, tls)
    try:
        def vm_rss():
            with open(f"/proc/{e.p.pid}/status") as f:
                return int(re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M).group(1))
        before = vm_rss()
        conns = []
        try:
            for _ in range(8):
                raw = socket.create_connection(("127.0.0.1", e.port), timeout=10)
                s = e.context(None).wrap_socket(raw, server_hostname="127.0.0.1")
                s.sendall(b"POST /x/filter HTTP/1.1\r\nHost: x\r\nContent-Length: 6000000\r\n\r\n" + b"{" * 16000)
                conns.append(s)
            for s in conns:
                t0 = time.monotonic()
                out = b""
                while True:
                    got = s.recv(65536)
                    if not got:
                        break
                    out += got
                assert out.startswith(b"HTTP/1.1 401 Unauthorized"), out[:200]
                assert b"client certificate" in out
                assert time.monotonic() - t0 < 5, "the 401 waited for the body or a deadline"
        finally:
            for s in conns:
                s.close()
        assert vm_rss() - before < 8 * 1024, (before, vm_rss())  # not 8 x 6 MB of bodies
        assert e.metric("gpuslice_extender_unauthorized_total") == 8
    finally:
        e.stop()


def test_allowed_client_name(tmp_path, tls):
    """--allowed-client-name kube-scheduler: the same CA's certificate for another name gets 401."""
    e = Extender(tmp_path, tls, extra=["--allowed-client-name", "kube-scheduler"])
    try:
        st, _ = e.request("POST", "/x/filter", filter_args(pod_obj("p", "u1")), cert="intruder")
        assert st == 401
        st, r = e.request("POST", "/x/filter", filter_args(pod_obj("p", "u1")))
        assert st == 200 and r["NodeNames"] == ["idle"]
    finally:
        e.stop()


def test_plain_http_only_on_loopback_and_asked_for(tmp_path, tls):
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps(SNAPSHOT))
    base = [GPUSLICE, "extender", "--snapshot", str(snap)]
    for listen in ("0.0.0.0:0", ":0", "10.1.2.3:0"):
        r = subprocess.run([*base, "--insecure-loopback-http", "--listen", listen], capture_output=True, text=True,
                           timeout=10)
        assert r.returncode == 2 and f"--listen {listen} without TLS" in r.stderr and "loopback" in r.stderr, r.stderr
    r = subprocess.run([*base, "--listen", "127.0.0.1:0"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "--insecure-loopback-http" in r.stderr and "--tls-cert-file" in r.stderr
    r = subprocess.run([*base, "--tls-cert-file", str(tls / "server.crt")], capture_output=True, text=True,
                       timeout=10)
    assert r.returncode == 2 and "missing: --tls-key-file --client-ca-file" in r.stderr
    r = subprocess.run([*base, "--insecure-loopback-http", "--tls-cert-file", str(tls / "server.crt")],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "one or the other" in r.stderr
    r = subprocess.run([*base, "--listen", "127.0.0.1:0", "--tls-cert-file", str(tls / "server.crt"),
                        "--tls-key-file", str(tls / "intruder.key"), "--client-ca-file", str(tls / "ca.crt")],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 1 and "intruder.key" in r.stderr


# ---- the bind's checks against the API server ----

class ApiHandler(Handler):
    """Nodes (one GPU node, two A100s), Pods (server.pods: name -> object), empty DRA lists,
    watches that stay quiet, and Bindings (recorded in server.bindings)."""

    def do_GET(self):
        srv = self.server
        path, _, query = self.path.partition("?")
        if "watch=1" in query:
            self.start_chunked()
            try:
                for _ in range(20):
                    time.sleep(0.1)
                    if srv.closing:
                        break
                self.chunk(b"")
            except OSError:
                pass
            return
        if path == "/api/v1/nodes":
            node = {"metadata": {"name": "idle", "labels": {
                "gpuslice.io/gpu.count": "2", "gpuslice.io/gpu.memory": "81920",
                "gpuslice.io/gpu.product": "A100"}},
                "status": {"allocatable": {"cpu": "32", "memory": "256Gi"}}}
            return self.send_json(200, {"kind": "NodeList", "metadata": {"resourceVersion": "7"}, "items": [node]})
        if path == "/api/v1/pods":
            return self.send_json(200, {"kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": []})
        if path.startswith("/apis/resource.k8s.io/v1/"):
            return self.send_json(200, {"kind": "List", "metadata": {"resourceVersion": "7"}, "items": []})
        pre = "/api/v1/namespaces/default/pods/"
        if path.startswith(pre):
            name = path[len(pre):]
            srv.pod_gets.append(name)
            p = srv.pods.get(name)
            if p is None:
                return self.send_json(404, status(404, "NotFound", f'pods "{name}" not found'))
            return self.send_json(200, p)
        return self.send_json(404, status(404, "NotFound", "not served here"))

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        m = re.fullmatch(r"/api/v1/namespaces/default/pods/([^/]+)/binding", self.path)
        if not m:
            return self.send_json(405, status(405, "MethodNotAllowed", "no"))
        self.server.bindings.append(body)
        return self.send_json(201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})


@pytest.fixture
def api(tmp_path):
    pki = tmp_path / "pki"
    pki.mkdir()
    make_pki(str(pki))
    e = Emulator(str(pki), ApiHandler)
    e.httpd.pods, e.httpd.bindings, e.httpd.pod_gets, e.httpd.closing = {}, [], [], False
    e.kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{e.port}",
                                    str(pki / "ca.crt"), "{token: t}", None)
    yield e
    e.httpd.closing = True
    e.close()


@pytest.fixture
def api_ext(tmp_path, tls, api):
    e = Extender(tmp_path, tls, source=["--kubeconfig", api.kubeconfig])
    wait.until(lambda: e.metric("gpuslice_extender_nodes") >= 1, timeout=20, interval=0.1,
               what="the extender's first node from the API server", detail=e.text)
    yield e
    e.stop()


def bind(e, name, uid):
    st, r = e.request("POST", "/x/bind", {"PodName": name, "PodNamespace": "default", "PodUID": uid,
                                          "Node": "idle"})
    assert st == 200
    return r["Error"]


def both_gpus_free(e):
    """A filter of a pod that needs both GPUs passes: the model committed nothing."""
    st, r = e.request("POST", "/x/filter", filter_args(pod_obj("probe", "probe-uid", gpus=2)))
    return st == 200 and r["NodeNames"] == ["idle"]


def test_bind_refusals_change_nothing(api_ext, api):
    e = api_ext
    # never filtered: refused before the API server is asked
    assert "not seen by the extender's filter" in bind(e, "ghost", "ghost-uid")
    assert "no PodUID" in bind(e, "ghost", "")
    assert api.httpd.pod_gets == []
    # the filter saw u1 as p1; the API server's p1 is another pod (u9): no Binding
    api.httpd.pods["p1"] = pod_obj("p1", "u9", gpus=2)
    st, r = e.request("POST", "/x/filter", filter_args(pod_obj("p1", "u1", gpus=2)))
    assert st == 200 and r["NodeNames"] == ["idle"]
    err = bind(e, "p1", "u1")
    assert "uid u1 is not the API server's (u9)" in err, err
    # a bind naming u1 with another pod's name
    assert "the extender's filter saw that uid as default/p1" in bind(e, "p2", "u1")
    # already bound, and not Pending
    api.httpd.pods["p3"] = pod_obj("p3", "u3", gpus=2, node="idle", phase="Running")
    api.httpd.pods["p4"] = pod_obj("p4", "u4", gpus=2, phase="Succeeded")
    for name, uid in (("p3", "u3"), ("p4", "u4")):
        st, _ = e.request("POST", "/x/filter", filter_args(pod_obj(name, uid, gpus=2)))
        assert st == 200
    assert "already bound to node idle" in bind(e, "p3", "u3")
    assert "status.phase Succeeded, not Pending" in bind(e, "p4", "u4")
    # a pod gone
    st, _ = e.request("POST", "/x/filter", filter_args(pod_obj("p5", "u5", gpus=2)))
    assert "not found" in bind(e, "p5", "u5")
    assert api.httpd.bindings == []
    assert e.metric("gpuslice_extender_pods_bound") == 0
    assert e.metric('gpuslice_extender_errors_total{verb="bind"}') == 7
    assert both_gpus_free(e)
    # the real one: its Binding with the UID as its precondition and the GPUs in the annotation
    api.httpd.pods["p6"] = pod_obj("p6", "u6", gpus=2)
    st, _ = e.request("POST", "/x/filter", filter_args(pod_obj("p6", "u6", gpus=2)))
    assert bind(e, "p6", "u6") == ""
    (b,) = api.httpd.bindings
    assert b["metadata"]["uid"] == "u6" and b["metadata"]["name"] == "p6" and b["target"]["name"] == "idle"
    assert b["metadata"]["annotations"]["gpuslice.io/gpu-index"] == "0,1"
    assert e.metric("gpuslice_extender_pods_bound") == 1
    assert not both_gpus_free(e)
