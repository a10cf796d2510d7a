"""kubehttp.py: HTTPS to the e2e cluster's components (tests/e2e/cluster.sh) with its CA and admin
client certificate (system:masters: the API server's admin, and authorized by the kubelet's
webhook), for the benches in bench/ (e2e_plugins.py, kwok_replay.py). Standard library only.

  c = Client(cluster_dir, port)                  # one kept connection; one Client per thread
  status, obj = c.json("GET", "/api/v1/nodes")   # a JSON body parsed; bytes otherwise
  status, data = c.request("POST", path, yaml_text, "application/yaml")
  conn = c.connect(timeout)                      # a connection of its own (a watch, a scrape)

A body that is not bytes or str is sent as JSON. A status not in `ok` raises KubeHttpError with
the method, the URL, the status and the start of the answer (ok=None: any status)."""
import http.client
import json
import os
import ssl


class KubeHttpError(Exception):
    pass


class Client:
    """A kept HTTPS connection to 127.0.0.1:PORT; http.client connections are not shared between
    threads. verify=False for a component whose serving certificate is its own, self-signed (the
    scheduler's)."""

    def __init__(self, cluster_dir, port, timeout=60, verify=True):
        pki = os.path.join(cluster_dir, "pki")
        self.ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
        if not verify:
            self.ctx.check_hostname = False
            self.ctx.verify_mode = ssl.CERT_NONE
        self.ctx.load_cert_chain(os.path.join(pki, "admin.crt"), os.path.join(pki, "admin.key"))
        self.cdir, self.port, self.timeout, self.conn = cluster_dir, port, timeout, None

    def connect(self, timeout=None):
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx,
                                           timeout=timeout or self.timeout)

    def request(self, method, path, body=None, ctype="application/json", ok=(200, 201, 202)):
        """(status, the answer's bytes)."""
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        for attempt in (1, 2):  # a kept connection the server closed is opened again once
            if self.conn is None:
                self.conn = self.connect()
            try:
                self.conn.request(method, path, body=body, headers={"Content-Type": ctype} if body else {})
                r = self.conn.getresponse()
                data = r.read()
                break
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt == 2:
                    raise
        if ok and r.status not in ok:
            raise KubeHttpError(f"{method} https://127.0.0.1:{self.port}{path}: {r.status} {data[:600]!r}")
        return r.status, data

    def json(self, method, path, body=None, ctype="application/json", ok=(200, 201, 202)):
        """(status, the answer parsed when it is a JSON object or array, else its bytes; None when empty)."""
        status, data = self.request(method, path, body, ctype, ok)
        if not data:
            return status, None
        return status, json.loads(data) if data[:1] in b"{[" else data
