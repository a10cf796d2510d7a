"""`gpuslice doctor --extender URL`: the scheduler extender's /healthz and a filter for a pod that
asks for nothing, against a real `gpuslice extender` on loopback (tests/extender's harness), the
same extender stopped, a URL that is not one, and an HTTP server that answers /healthz but is not
an extender (a filter that fails or refuses the node); with --extender-warn (the chart's init
container) the same failures are warnings and the node ready, each request bounded at 2 s.
docs/doctor.md.

Environment (set by meson): GPUSLICE, GPUSLICE_SIM_LIB, GS_SOURCE_ROOT."""
import http.server
import json
import os
import re
import socket
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "extender"))
from test_doctor import node  # noqa: E402,F401 (node: fixture)
from test_extender_http import Extender  # noqa: E402
from test_extender_tls import Extender as TlsExtender, make_tls  # noqa: E402


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


def test_an_extender_with_tls(node, tmp_path):
    """Over https:// with the extender's CA: /healthz is open; the filter needs the scheduler's client
    certificate (--extender-cert/--extender-key), and without it the finding says to give one."""
    tls = tmp_path / "tls"
    tls.mkdir()
    make_tls(str(tls))
    e = TlsExtender(tmp_path, tls)
    try:
        url = f"https://127.0.0.1:{e.port}/gpuslice"
        ca = ("--extender-ca", str(tls / "ca.crt"))
        got = ext_findings(node.findings("--extender", url, *ca, "--extender-cert", str(tls / "scheduler.crt"),
                                         "--extender-key", str(tls / "scheduler.key"), "--node-name", "split",
                                         expect_rc=0))
        assert [(f["check"], f["status"]) for f in got] == [("extender", "ok"), ("extender.filter", "ok")], got
        got = ext_findings(node.findings("--extender", url, *ca, "--node-name", "split", expect_rc=1))
        assert [(f["check"], f["status"]) for f in got] == [("extender", "ok"), ("extender.filter", "fail")], got
        assert "--extender-cert" in got[1]["fix"], got
        # a client certificate of another CA: the handshake fails, named as the doctor's request
        got = ext_findings(node.findings("--extender", url, *ca, "--extender-cert", str(tls / "wrong.crt"),
                                         "--extender-key", str(tls / "wrong.key"), "--node-name", "split",
                                         expect_rc=1))
        assert got[0]["status"] == "fail", got
        # the extender's CA not given: its serving certificate is not trusted
        got = ext_findings(node.findings("--extender", url, "--node-name", "split", expect_rc=1))
        assert got[0]["status"] == "fail" and "/healthz" in got[0]["message"], got
    finally:
        e.stop()
    for args, why in ((("--extender", url, "--extender-cert", "c.pem"),
                       "--extender-cert and --extender-key go together"),
                      (("--extender-ca", "ca.pem"), "without --extender URL"),
                      (("--extender", "http://127.0.0.1:1/x", "--extender-ca", "ca.pem"), "is not an https:// URL")):
        p = node.run(*args)
        assert p.returncode == 2 and why in p.stderr, p.stderr


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


# ---- --extender-warn: the chart's init container (docs/doctor.md), whose exit status gates the agent

WARN_NOTE = " (--extender-warn: a warning, the agent starts)"


def timed_findings(node, *args, expect_rc):
    t0 = time.monotonic()
    got = ext_findings(node.findings(*args, expect_rc=expect_rc))
    return got, time.monotonic() - t0


def test_warn_only_an_extender_down_is_a_warning_and_the_node_ready(node, tmp_path):
    e = Extender(tmp_path, policy="gpuslice")
    try:
        url = f"http://127.0.0.1:{e.port}/gpuslice"
        # up: the same two ok findings as without --extender-warn, ready
        got = ext_findings(node.findings("--extender", url, "--extender-warn", "--node-name", "split", expect_rc=0))
        assert [(f["check"], f["status"]) for f in got] == [("extender", "ok"), ("extender.filter", "ok")], got
        assert f"{url}/filter passes a pod that asks for no GPU on split" in got[1]["message"]
        assert not [f for f in got if "--extender-warn" in f["message"]], got
    finally:
        assert e.stop() == 0
    # down: a warning that says why and that the agent starts, exit 0; without the flag not ready
    got = ext_findings(node.findings("--extender", url, "--extender-warn", "--node-name", "split", expect_rc=0))
    assert [(f["check"], f["status"]) for f in got] == [("extender", "warn")], got
    assert got[0]["message"].startswith(f"http://127.0.0.1:{e.port}: GET /healthz:"), got[0]
    assert got[0]["message"].endswith(WARN_NOTE), got[0]
    assert "gpuslice extender" in got[0]["fix"] and "urlPrefix" in got[0]["fix"]
    got = ext_findings(node.findings("--extender", url, "--node-name", "split", expect_rc=1))
    assert [(f["check"], f["status"]) for f in got] == [("extender", "fail")], got
    assert WARN_NOTE not in got[0]["message"]
    # the text output and the termination message the init container writes: a warning line
    log = tmp_path / "termination-log"
    p = node.run("--extender", url, "--extender-warn", "--node-name", "split", "--termination-log", str(log),
                 json_out=False)
    assert p.returncode == 0, p.stdout + p.stderr
    line = next(ln for ln in p.stdout.splitlines() if " extender:" in ln)
    assert line.startswith("warn extender: ") and WARN_NOTE + "; fix: " in line, line
    assert "warn extender: " in log.read_text() and "fail extender" not in log.read_text()


def test_warn_only_a_filter_that_refuses_the_node_is_a_warning(node):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotAnExtender)
    srv.filter, srv.bodies = (200, json.dumps({"Error": "model not ready"}).encode()), []
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/prefix"
        got = ext_findings(node.findings("--extender", url, "--extender-warn", "--node-name", "n1", expect_rc=0))
        assert [(f["check"], f["status"]) for f in got] == [("extender", "ok"), ("extender.filter", "warn")], got
        assert got[1]["message"].endswith("answered Error: model not ready" + WARN_NOTE), got[1]
        ext_findings(node.findings("--extender", url, "--node-name", "n1", expect_rc=1))
    finally:
        srv.shutdown()
        srv.server_close()
    assert len(srv.bodies) == 2, "the filter is asked in both modes"


def test_warn_only_a_bad_url_is_a_warning(node):
    got = ext_findings(node.findings("--extender", "ext:8888", "--extender-warn", "--node-name", "n1", expect_rc=0))
    assert [(f["check"], f["status"]) for f in got] == [("extender", "warn")], got
    assert got[0]["message"] == "--extender ext:8888: not an http:// or https:// URL" + WARN_NOTE


class HangingFilter(NotAnExtender):
    """/healthz answers at once; a filter is not answered until the test ends."""

    def do_POST(self):
        self.server.bodies.append(self.path)
        self.server.release.wait(30)


def timed_out_ms(finding):
    """How long the request waited, from libcurl's "timed out after N milliseconds"."""
    m = re.search(r"timed out after (\d+) milliseconds", finding["message"])
    assert m, finding
    return int(m.group(1))


def test_warn_only_bounds_an_extender_that_does_not_answer(node):
    """The init container delays the agent by at most 2 s a request: a socket that accepts and never
    answers /healthz, then an extender whose filter never answers; the normal mode waits 5 s. The
    wait is libcurl's own count in the message; the doctor's whole run, beside one refused at once,
    is only checked loosely (the machine is shared)."""
    base_got, base = timed_findings(node, "--extender", "http://127.0.0.1:1/x", "--extender-warn", "--node-name",
                                    "n1", expect_rc=0)  # refused at once: the rest of the doctor's time
    assert [f["status"] for f in base_got] == ["warn"], base_got
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(8)  # the kernel completes the connection; nothing reads or answers
    try:
        url = f"http://127.0.0.1:{mute.getsockname()[1]}/gpuslice"
        got, took = timed_findings(node, "--extender", url, "--extender-warn", "--node-name", "n1", expect_rc=0)
        assert [(f["check"], f["status"]) for f in got] == [("extender", "warn")], got
        assert 2000 <= timed_out_ms(got[0]) < 2500 and took - base < 5, (got, took, base)
        got, took = timed_findings(node, "--extender", url, "--node-name", "n1", expect_rc=1)
        assert [(f["check"], f["status"]) for f in got] == [("extender", "fail")], got
        assert 5000 <= timed_out_ms(got[0]) < 5500  # the normal mode's 5 s
    finally:
        mute.close()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HangingFilter)
    srv.bodies, srv.release = [], threading.Event()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/prefix"
        got, took = timed_findings(node, "--extender", url, "--extender-warn", "--node-name", "n1", expect_rc=0)
    finally:
        srv.release.set()
        srv.shutdown()
        srv.server_close()
    assert [(f["check"], f["status"]) for f in got] == [("extender", "ok"), ("extender.filter", "warn")], got
    assert got[1]["message"].endswith(WARN_NOTE), got[1]
    assert 2000 <= timed_out_ms(got[1]) < 2500 and took - base < 5, (got, took, base)
    assert srv.bodies == ["/prefix/filter"]


def test_extender_warn_needs_extender(node):
    p = node.run("--extender-warn")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "--extender-warn: without --extender URL" in p.stderr
