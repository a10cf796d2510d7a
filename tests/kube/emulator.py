"""A loopback HTTPS server for what the real API server never does (tests/kube/test_kube_emulator.py):
malformed JSON, a chunked body cut short or without end, an oversized answer, a 401 until the
token file holds the new token, a 410 in a watch stream, a watch line without end, a server that
takes the request and never answers, and one that accepts the connection and never speaks TLS.

Certificates: a CA and a server certificate for 127.0.0.1 made with openssl in a directory."""
import http.server
import json
import os
import socket
import ssl
import subprocess
import threading
import time

NS = "t"
BASE = f"/api/v1/namespaces/{NS}/configmaps"


def make_pki(dir):
    """ca.crt, server.crt/key (SAN IP 127.0.0.1) and other-ca.crt (an unrelated CA) in dir."""
    def ossl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=dir)
    for ca in ("ca", "other-ca"):
        ossl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key", "-out", f"{ca}.crt",
             "-days", "2", "-subj", f"/CN=gpuslice-test-{ca}")
    ossl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
         "-subj", "/CN=127.0.0.1")
    with open(os.path.join(dir, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    ossl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
         "-out", "server.crt", "-days", "2", "-extfile", "san.ext")


def status(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "reason": reason, "code": code}


def configmap(name, rv):
    return {"kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": NS, "resourceVersion": str(rv)}, "data": {"k": "v"}}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def start_chunked(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_GET(self):
        srv = self.server
        path, _, query = self.path.partition("?")
        srv.requests.append(self.path)
        name = path[len(BASE) + 1:] if path.startswith(BASE + "/") else None
        if path == BASE and "watch=1" in query:
            return self.watch(query)
        if path == BASE:
            srv.lists += 1
            return self.send_json(200, {"kind": "ConfigMapList", "apiVersion": "v1",
                                        "metadata": {"resourceVersion": "10"}, "items": [configmap("a", 10)]})
        if name == "ok":
            return self.send_json(200, configmap("ok", 5))
        if name == "malformed":
            body = b'{"kind": "ConfigMap", "metadata": {"name": '
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if name == "truncated":
            self.start_chunked()
            self.chunk(b'{"kind": "ConfigMap", "metadata": {"name": "trunc')
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if name == "endless":
            self.start_chunked()
            end = time.monotonic() + 30
            try:
                self.chunk(b'{"kind": "ConfigMap", "data": {"k": "')
                while time.monotonic() < end:
                    self.chunk(b"x" * 65536)
            except OSError:
                pass
            self.close_connection = True
            return
        if name == "oversized":
            size = 8 << 20
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            try:
                for _ in range(size // 65536):
                    self.wfile.write(b" " * 65536)
            except OSError:
                pass
            return
        if name == "forbidden":
            return self.send_json(403, status(403, "Forbidden", f'configmaps "forbidden" is forbidden: User '
                                              f'"system:serviceaccount:t:x" cannot get resource "configmaps"'))
        if name == "token":
            if self.headers.get("Authorization") == f"Bearer {srv.good_token}":
                return self.send_json(200, configmap("token", 7))
            srv.rejected += 1
            if srv.token_file:  # the token rotates now: the next read of the file sees the new one
                with open(srv.token_file + ".new", "w") as f:
                    f.write(srv.good_token + "\n")
                os.replace(srv.token_file + ".new", srv.token_file)
            return self.send_json(401, status(401, "Unauthorized", "Unauthorized"))
        if name == "hang":
            time.sleep(60)
            return
        self.send_json(404, status(404, "NotFound", f'configmaps "{name}" not found'))

    def watch(self, query):
        srv = self.server
        srv.watches += 1
        self.start_chunked()
        try:
            if "fieldSelector=metadata.name%3Dendless" in query:  # one line that never ends
                end = time.monotonic() + 30
                self.chunk(b'{"type":"ADDED","object":{"metadata":{"name":"')
                while time.monotonic() < end:
                    self.chunk(b"y" * 65536)
                return
            ev = {"type": "ADDED", "object": configmap(f"w{srv.watches}", 11)}
            self.chunk(json.dumps(ev).encode() + b"\n")
            time.sleep(0.2)
            gone = status(410, "Expired", "too old resource version: 10 (20)")
            self.chunk(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
            self.chunk(b"")
        except OSError:
            pass


class Emulator:
    def __init__(self, pki, handler=Handler):
        """handler: Handler or a subclass of it (tests/integration/test_doctor_api.py serves Nodes)."""
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(os.path.join(pki, "server.crt"), os.path.join(pki, "server.key"))
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        h = self.httpd
        h.requests, h.lists, h.watches, h.rejected = [], 0, 0, 0
        h.good_token, h.token_file = "new-token", None
        self.port = h.server_address[1]
        # a listener that accepts (the kernel does) and never speaks
        self.mute = socket.socket()
        self.mute.bind(("127.0.0.1", 0))
        self.mute.listen(16)
        self.mute_port = self.mute.getsockname()[1]
        self.thread = threading.Thread(target=h.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.mute.close()
