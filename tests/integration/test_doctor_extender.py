"""`gpuslice doctor --extender URL`: the scheduler extender's /healthz and a filter for a pod that
asks for nothing, against a real `gpuslice extender` on loopback (tests/extender's harness), the
same extender stopped, a URL that is not one, and an HTTP server that answers /healthz but is not
an extender (a filter that fails or refuses the node). docs/doctor.md.

Environment (set by meson): GPUSLICE, GPUSLICE_SIM_LIB, GS_SOURCE_ROOT."""
import http.server
import json
import os
import sys
import threading

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "extender"))
from test_doctor import node  # noqa: E402,F401 (node: fixture)
from test_extender_http import Extender  # noqa: E402


def ext_findings(findings):
    return [f for f in findings if f["check"].startswith("extender")]


def test_a_real_extender_passes(node, tmp_path):
    e = Extender(tmp_path, policy="gpuslice")
    try:
        url = f"http://127.0.0.1:{e.port}/gpuslice"
        got = ext_findings(node.findings("--extender", url + "/", "--node-name", "split", expect_rc=0))
        assert [(f["check"], f["status"]) for f in got] == [("extender", "ok"), ("extender.filter", "ok")], got
        assert f"http://127.0.0.1:{e.port}/healthz answered" in got[0]["message"]
        assert f"{url}/filter passes a pod that asks for no GPU on split" in got[1]["message"]
        st, text = e.get("/metrics")  # the filter was the extender's own, as the scheduler calls it
        assert st == 200 and 'gpuslice_extender_requests_total{verb="filter"} 1' in text.decode(), text
    finally:
        assert e.stop() == 0
    # the same URL with nothing listening: not ready, the filter not asked
    got = ext_findings(node.findings("--extender", url, "--node-name", "split", expect_rc=1))
    assert [(f["check"], f["status"]) for f in got] == [("extender", "fail")], got
    assert f"http://127.0.0.1:{e.port}: GET /healthz:" in got[0]["message"]
    assert "gpuslice extender" in got[0]["fix"] and "urlPrefix" in got[0]["fix"]


@pytest.mark.parametrize("url,why", [("127.0.0.1:8888/gpuslice", "not an http:// or https:// URL"),
                                     ("http:///gpuslice", "not HTTP[S]://HOST[:PORT][/PREFIX]"),
                                     ("http://127.0.0.1:8888?x", "not HTTP[S]://HOST[:PORT][/PREFIX]")])
def test_a_bad_url_fails(node, url, why):
    got = ext_findings(node.findings("--extender", url, "--node-name", "n1", expect_rc=1))
    assert [(f["check"], f["status"]) for f in got] == [("extender", "fail")], got
    assert got[0]["message"] == f"--extender {url}: {why}" and "urlPrefix" in got[0]["fix"]


class NotAnExtender(http.server.BaseHTTPRequestHandler):
    """/healthz answers; a filter answers server.filter (status, body)."""

    def do_GET(self):
        self.answer(200, b"ok\n" if self.path == "/healthz" else b"")

    def do_POST(self):
        self.server.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.answer(*self.server.filter)

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("status,body,msg", [
    (404, b"not found", "(a filter for a pod that asks for no GPU, on n1): POST /filter: "),
    (200, b"<html>", "POST /filter: the answer is not JSON"),
    (200, b"[1]", "answered, but not with an ExtenderFilterResult"),
    (200, json.dumps({"Error": "model not ready"}).encode(), "answered Error: model not ready"),
    (200, json.dumps({"nodenames": [], "failedNodes": {"n1": "no GPUs here"}}).encode(),
     "refused n1 for a pod that asks for no GPU: no GPUs here"),
    (200, json.dumps({"NodeNames": ["n2"]}).encode(), "refused n1 for a pod that asks for no GPU: the node is not"),
])
def test_a_filter_that_does_not_pass_the_node_fails(node, status, body, msg):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotAnExtender)
    srv.filter, srv.bodies = (status, body), []
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/prefix"
        got = ext_findings(node.findings("--extender", url, "--node-name", "n1", expect_rc=1))
    finally:
        srv.shutdown()
        srv.server_close()
    assert [(f["check"], f["status"]) for f in got] == [("extender", "ok"), ("extender.filter", "fail")], got
    assert msg in got[1]["message"], got[1]
    # what the doctor sent: ExtenderArgs as a nodeCacheCapable scheduler sends them, an empty pod
    (args,) = srv.bodies
    assert args["NodeNames"] == ["n1"] and args["Pod"]["metadata"]["name"] == "gpuslice-doctor-probe"
    assert args["Pod"]["spec"]["containers"] == [{"name": "probe", "image": "none"}]
