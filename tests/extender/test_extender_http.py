"""gpuslice extender over HTTP (loopback): the extender API's filter, prioritize and bind as
kube-scheduler calls them, /healthz and /metrics, and requests a hostile or broken client sends."""
import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
import wait  # noqa: E402 (tests/lib)

GPUSLICE = os.environ.get("GPUSLICE", "gpuslice")

SNAPSHOT = {"nodes": [
    {"name": "split", "cpuMilli": 32000, "memoryMiB": 262144, "gpuModel": "A100", "gpuMemoryMiB": 81920,
     "gpuFree": [400, 400]},
    {"name": "one", "cpuMilli": 32000, "memoryMiB": 262144, "gpuModel": "A100", "gpuMemoryMiB": 81920,
     "gpuFree": [600, 0]},
    {"name": "idle", "cpuMilli": 32000, "memoryMiB": 262144, "gpuModel": "A100", "gpuMemoryMiB": 81920,
     "gpuFree": [1000, 1000]},
]}


def pod(uid, limits, requests=None):
    return {"metadata": {"name": "p-" + uid, "namespace": "default", "uid": uid},
            "spec": {"containers": [{"name": "c", "resources": {"limits": limits,
                                                                "requests": requests or {"cpu": "1"}}}]}}


class Extender:
    def __init__(self, tmp_path, policy="fgd", extra=()):
        snap = tmp_path / "snap.json"
        snap.write_text(json.dumps(SNAPSHOT))
        self.log = open(tmp_path / "extender.log", "w+")
        self.p = subprocess.Popen([GPUSLICE, "extender", "--snapshot", str(snap), "--listen", "127.0.0.1:0",
                                   "--insecure-loopback-http", "--policy", policy, *extra], stdout=self.log,
                                  stderr=subprocess.STDOUT)
        def port():
            text = open(self.log.name).read()
            assert self.p.poll() is None, text
            m = re.search(r"\(port (\d+)\)", text)
            return int(m.group(1)) if m else None
        self.port = wait.until(port, timeout=20, what="the extender's port in its log",
                               detail=lambda: open(self.log.name).read())

    def raw(self, data, timeout=5, shut=True):
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            s.sendall(data)
            if shut:
                s.shutdown(socket.SHUT_WR)
            out = b""
            while True:
                try:
                    b = s.recv(65536)
                except socket.timeout:
                    break
                if not b:
                    break
                out += b
            return out

    def post(self, path, obj):
        body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        out = self.raw(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                       b"Connection: close\r\n\r\n" % (path.encode(), len(body)) + body)
        head, _, rest = out.partition(b"\r\n\r\n")
        status = int(head.split()[1])
        return status, (json.loads(rest) if rest and status in (200, 400) and rest[:1] in b"{[" else rest)

    def alive(self):
        assert self.p.poll() is None, "the extender died: " + open(self.log.name).read()
        st, _ = self.get("/healthz")
        assert st == 200

    def get(self, path):
        out = self.raw(b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path.encode())
        head, _, rest = out.partition(b"\r\n\r\n")
        return int(head.split()[1]), rest

    def stop(self):
        self.p.terminate()
        rc = self.p.wait(timeout=10)
        self.log.close()
        return rc


@pytest.fixture
def ext(tmp_path):
    e = Extender(tmp_path)
    yield e
    assert e.stop() == 0


def test_filter_per_gpu_fit(ext):
    """A node with two GPUs at 0.4 free each fails a 0.5 pod the scheduler's sum (0.8) would allow;
    a node it does not know is unresolvable for a GPU pod."""
    st, r = ext.post("/gpuslice/filter", {"Pod": pod("u1", {"gpuslice.io/gpu-compute": "50"}),
                                          "NodeNames": ["split", "one", "idle", "ghost"]})
    assert st == 200
    assert r["NodeNames"] == ["one", "idle"]
    assert "no single GPU has 500 milli-GPU free" in r["FailedNodes"]["split"]
    assert "ghost" in r["FailedAndUnresolvableNodes"]
    assert r["Error"] == ""
    # memory beyond what any GPU has: unresolvable everywhere, with the sizes
    st, r = ext.post("/gpuslice/filter", {"Pod": pod("u2", {"gpuslice.io/gpu-memory": "100"}),
                                          "NodeNames": ["idle"]})
    assert "81920 MiB" in r["FailedAndUnresolvableNodes"]["idle"]
    # a CPU-only pod: every node, known or not
    st, r = ext.post("/gpuslice/filter", {"Pod": pod("u3", {}), "NodeNames": ["split", "ghost"]})
    assert r["NodeNames"] == ["split", "ghost"]


def test_prioritize_and_bind(ext):
    """prioritize scores 0..10 (0: does not fit); bind picks the GPU (of a pod the filter saw) and the
    next filter sees it."""
    p = pod("u1", {"gpuslice.io/gpu-compute": "50"})
    st, r = ext.post("/gpuslice/filter", {"Pod": p, "NodeNames": ["one"]})
    assert st == 200 and r["NodeNames"] == ["one"]
    st, r = ext.post("/gpuslice/prioritize", {"Pod": p, "NodeNames": ["split", "one", "idle"]})
    assert st == 200
    scores = {h["Host"]: h["Score"] for h in r}
    assert scores["split"] == 0 and max(scores.values()) == 10
    assert all(0 <= s <= 10 for s in scores.values())
    st, r = ext.post("/gpuslice/bind", {"PodName": "p-u1", "PodNamespace": "default", "PodUID": "u1", "Node": "one"})
    assert st == 200 and r == {"Error": ""}
    st, r = ext.post("/gpuslice/filter", {"Pod": pod("u2", {"gpuslice.io/gpu-compute": "50"}), "NodeNames": ["one"]})
    assert "free per GPU: 100,0" in r["FailedNodes"]["one"]
    # bind of a pod the filter never saw: a clear error, not a guess
    st, r = ext.post("/gpuslice/bind", {"PodName": "x", "PodNamespace": "default", "PodUID": "nope", "Node": "one"})
    assert "not seen by the extender's filter" in r["Error"]
    st, text = ext.get("/metrics")
    text = text.decode()
    assert 'gpuslice_extender_requests_total{verb="filter"} 2' in text
    assert "gpuslice_extender_binds_total 1" in text
    assert re.search(r'gpuslice_extender_decision_seconds_count\{verb="prioritize"\} 1', text)
    assert 'gpuslice_extender_filter_nodes_total{result="failed"} 1' in text


def test_malformed_requests(ext):
    """Bad JSON, wrong shapes, bad quantities, wrong methods and paths: 4xx with the reason."""
    cases = [
        (b"{", "ExtenderArgs: at byte 1"),
        (b'{"Pod": {}, "NodeNames": ["a"]', "not closed"),
        (b'{"Pod": ' + b"[" * 100 + b"]" * 100 + b', "NodeNames": []}', "not JSON"),
        (b"[]", "not a JSON object"),
        (b'{"NodeNames": []}', "no Pod"),
        (b'{"Pod": {}}', "neither NodeNames nor Nodes"),
        (json.dumps({"Pod": pod("u", {}, {"cpu": "lots"}), "NodeNames": []}).encode(), "'lots': not a quantity"),
        (b"\xff\xfe\x00garbage", "ExtenderArgs"),
    ]
    for body, msg in cases:
        st, r = ext.post("/gpuslice/filter", body)
        assert st == 400, (body, st, r)
        assert msg in r["Error"], (body, r)
    st, _ = ext.post("/gpuslice/prioritize", b"{")
    assert st == 400
    st, _ = ext.get("/gpuslice/filter")
    assert st == 405
    st, _ = ext.get("/nope")
    assert st == 404
    # chunked bodies are not taken (kube-scheduler sends a Content-Length)
    out = ext.raw(b"POST /gpuslice/filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 411 ")
    assert ext.raw(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab").startswith(
        b"HTTP/1.1 400 ")
    ext.alive()


def test_oversized_request(tmp_path):
    """A body over --max-body is refused before it is read (413); the server goes on."""
    e = Extender(tmp_path, extra=["--max-body", "64KiB"])
    try:
        big = json.dumps({"Pod": pod("u", {}), "NodeNames": ["n%d" % i for i in range(20000)]}).encode()
        assert len(big) > 64 * 1024
        out = e.raw(b"POST /gpuslice/filter HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(big), shut=False)
        assert out.startswith(b"HTTP/1.1 413 ")
        out = e.raw(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X: " + b"y" * 9000 + b"\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 431 ")
        e.alive()
    finally:
        assert e.stop() == 0


def test_slow_and_cut_requests(ext):
    """A client that sends half a body and stops does not hold the server: others are answered
    meanwhile, and the slow one is cut at the deadline; a body cut short by a close is dropped."""
    body = json.dumps({"Pod": pod("u", {"gpuslice.io/gpu-compute": "10"}), "NodeNames": ["idle"]}).encode()
    slow = socket.create_connection(("127.0.0.1", ext.port), timeout=30)
    slow.sendall(b"POST /gpuslice/filter HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body[:10])
    t0 = time.monotonic()
    st, r = ext.post("/gpuslice/filter", body)
    assert st == 200 and r["NodeNames"] == ["idle"]
    assert time.monotonic() - t0 < 2
    # the slow one is closed within the 10 s deadline of a request (head and body)
    slow.settimeout(20)
    got = b""
    while True:
        b = slow.recv(4096)
        if not b:
            break
        got += b
    assert time.monotonic() - t0 < 15
    assert not got.startswith(b"HTTP/1.1 200")
    slow.close()
    # cut short: the connection closes mid-body
    with socket.create_connection(("127.0.0.1", ext.port), timeout=5) as s:
        s.sendall(b"POST /gpuslice/filter HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"Pod\"")
    ext.alive()


def test_keep_alive_pipelined(ext):
    """kube-scheduler keeps its connection: two requests pipelined on one get two answers."""
    body = json.dumps({"Pod": pod("u", {"gpuslice.io/gpu-compute": "10"}), "NodeNames": ["idle", "one"]}).encode()
    req = b"POST /g/prioritize HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    out = ext.raw(req + req, timeout=3)
    assert out.count(b"HTTP/1.1 200 OK") == 2
    assert out.count(b'"Host":"idle"') == 2


def test_bad_command_line(tmp_path):
    r = subprocess.run([GPUSLICE, "extender"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "--snapshot FILE is required" in r.stderr
    r = subprocess.run([GPUSLICE, "extender", "--snapshot", "x.json", "--policy", "random"], capture_output=True,
                       text=True, timeout=10)
    assert r.returncode == 2 and "--policy 'random'" in r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"nodes": [{"name": "n", "gpuFree": [2000]}]}')
    r = subprocess.run([GPUSLICE, "extender", "--snapshot", str(bad), "--insecure-loopback-http"], capture_output=True,
                       text=True, timeout=10)
    assert r.returncode == 1 and "nodes[0].gpuFree[0]: expected milli-GPU 0..1000" in r.stderr
    r = subprocess.run([GPUSLICE, "extender", "--snapshot", str(tmp_path / "none.json"), "--insecure-loopback-http"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 1 and "none.json: No such file or directory" in r.stderr
    r = subprocess.run([GPUSLICE, "extender", "--snapshot", str(bad), "--listen", "127.0.0.1:99999",
                        "--insecure-loopback-http"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 1
