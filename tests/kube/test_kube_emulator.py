"""gpuslice kube (src/kube) against tests/kube/emulator.py, for what the real API server cannot be
made to do: each test fails without the client behaviour it names (bounded bodies and lines,
timeouts, the token re-read on 401, relisting after 410, a prompt stop), and objects read from
YAML files. The rest of the client is tested against the real API server in
tests/e2e/test_kube_client.py."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
from emulator import BASE, Emulator, Handler, make_pki  # noqa: E402
from kubeconfig import write_kubeconfig  # noqa: E402
from kubeyaml import MODE_COLUMN, MODE_LINE, configmap_json, configmap_yaml  # noqa: E402

GPUSLICE = os.environ.get("GPUSLICE", "gpuslice")


@pytest.fixture(scope="module")
def pki():
    d = tempfile.mkdtemp(prefix="gs-kube-pki.")
    make_pki(d)
    return d


@pytest.fixture
def emu(pki):
    e = Emulator(pki)
    yield e
    e.close()


def kubeconfig(dir, port, ca, user):
    return write_kubeconfig(os.path.join(dir, "kubeconfig"), f"https://127.0.0.1:{port}", ca, user, "t",
                            cluster="emu", user_name="u", context="emu")


@pytest.fixture
def kc(emu, pki, tmp_path):
    return kubeconfig(str(tmp_path), emu.port, os.path.join(pki, "ca.crt"), "{token: old-token}")


def kube(kc, *args, timeout=30):
    t0 = time.monotonic()
    p = subprocess.run([GPUSLICE, "kube", "--kubeconfig", kc, *args], capture_output=True, text=True,
                       timeout=timeout)
    p.elapsed = time.monotonic() - t0
    return p


def test_get_checks_the_servers_ca(emu, pki, tmp_path, kc):
    emu.httpd.good_token = "old-token"
    p = kube(kc, "get", BASE + "/ok")
    assert p.returncode == 0, p.stderr
    assert '"name": "ok"' in p.stdout
    other = kubeconfig(str(tmp_path), emu.port, os.path.join(pki, "other-ca.crt"), "{token: old-token}")
    p = kube(other, "get", BASE + "/ok")
    assert p.returncode == 1
    assert "certificate" in p.stderr.lower(), p.stderr


def test_status_message_of_an_error(kc):
    p = kube(kc, "get", BASE + "/forbidden")
    assert p.returncode == 1
    assert p.stderr.strip() == (f"gpuslice kube: GET {BASE}/forbidden: 403 Forbidden: configmaps \"forbidden\" is "
                                "forbidden: User \"system:serviceaccount:t:x\" cannot get resource \"configmaps\"")


def test_malformed_json(kc):
    p = kube(kc, "get", BASE + "/malformed")
    assert p.returncode == 1
    assert f"GET {BASE}/malformed: the answer is not JSON" in p.stderr, p.stderr


def test_truncated_chunked_body(kc):
    p = kube(kc, "get", BASE + "/truncated")
    assert p.returncode == 1
    assert f"GET {BASE}/truncated: " in p.stderr and "not JSON" not in p.stderr, p.stderr


def test_endless_chunked_body_stops_at_the_limit(kc):
    p = kube(kc, "--max-response", "1048576", "get", BASE + "/endless")
    assert p.returncode == 1
    assert "the response is over 1048576 bytes" in p.stderr, p.stderr
    assert p.elapsed < 10, p.elapsed  # the server would go on for 30 s


def test_oversized_response(kc):
    p = kube(kc, "--max-response", "1048576", "get", BASE + "/oversized")
    assert p.returncode == 1
    assert "over" in p.stderr and "limit" in p.stderr, p.stderr
    p = kube(kc, "get", BASE + "/oversized")  # the default limit (64 MiB) takes 8 MiB of spaces: not JSON
    assert "not JSON" in p.stderr, p.stderr


def test_401_rereads_the_token_file_and_retries(emu, pki, tmp_path):
    tok = tmp_path / "token"
    tok.write_text("old-token\n")
    emu.httpd.token_file = str(tok)
    k = kubeconfig(str(tmp_path), emu.port, os.path.join(pki, "ca.crt"), f"{{tokenFile: {tok}}}")
    p = kube(k, "get", BASE + "/token")
    assert p.returncode == 0, p.stderr
    assert '"name": "token"' in p.stdout
    assert emu.httpd.rejected == 1  # one 401 (the old token), then the new one
    # an inline token cannot change: the 401 is the answer
    k = kubeconfig(str(tmp_path), emu.port, os.path.join(pki, "ca.crt"), "{token: old-token}")
    p = kube(k, "get", BASE + "/token")
    assert p.returncode == 1
    assert "401 Unauthorized" in p.stderr, p.stderr


def test_watch_410_is_reported(kc):
    p = kube(kc, "watch", "configmaps")
    assert p.returncode == 1
    assert '"type":"ADDED"' in p.stdout
    assert "ERROR event 410 Expired: too old resource version" in p.stderr, p.stderr


def test_informer_relists_after_410(emu, kc):
    p = kube(kc, "watch", "configmaps", "--informer", "--for", "3")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    lists = [ln for ln in lines if ln.startswith('{"type":"LIST"')]
    assert len(lists) >= 2, p.stdout  # listed, watched, got 410, listed again
    assert lines[0].startswith('{"type":"LIST","resourceVersion":"10"'), lines[0]
    assert '"type":"ADDED"' in lines[1], lines
    assert emu.httpd.lists >= 2 and emu.httpd.watches >= 1
    watch = [r for r in emu.httpd.requests if "watch=1" in r][0]
    assert "resourceVersion=10" in watch and "allowWatchBookmarks=true" in watch, watch


def test_watch_line_is_bounded(kc):
    p = kube(kc, "--max-response", "262144", "watch", "configmaps", "--field-selector", "metadata.name=endless")
    assert p.returncode == 1
    assert "a watch event over 262144 bytes" in p.stderr, p.stderr
    assert p.elapsed < 10


def test_server_that_never_answers_times_out(kc):
    p = kube(kc, "--timeout", "1500", "get", BASE + "/hang")
    assert p.returncode == 1
    assert "timed out" in p.stderr.lower() or "timeout" in p.stderr.lower(), p.stderr
    assert 1.0 < p.elapsed < 8, p.elapsed


def test_server_that_never_speaks_tls_times_out(emu, pki, tmp_path):
    k = kubeconfig(str(tmp_path), emu.mute_port, os.path.join(pki, "ca.crt"), "{token: t}")
    p = kube(k, "--timeout", "1500", "--connect-timeout", "1000", "get", BASE + "/ok")
    assert p.returncode == 1
    assert "time" in p.stderr.lower(), p.stderr
    assert p.elapsed < 8, p.elapsed


def test_informer_stops_at_once_while_a_request_hangs(emu, pki, tmp_path):
    """SIGTERM while the informer's list waits on a server that never answers: the cancel handle
    wakes the transfer, the thread is joined and the command exits well before any timeout."""
    k = kubeconfig(str(tmp_path), emu.mute_port, os.path.join(pki, "ca.crt"), "{token: t}")
    proc = subprocess.Popen([GPUSLICE, "kube", "--kubeconfig", k, "--timeout", "60000", "watch", "configmaps",
                             "--informer"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    assert proc.poll() is None
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert time.monotonic() - t0 < 1.5


class Posts(Handler):
    """The emulator, also taking POSTs: each body is kept and sent back as the created object."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        self.server.requests.append(self.path)
        self.server.posted.append(body)
        self.send_json(201, body)


CM_YAML = configmap_yaml("from-yaml", '{app: web, tier: "1"}')
CM_JSON = configmap_json("from-yaml", {"app": "web", "tier": "1"}, "t")


def test_create_from_yaml(pki, tmp_path):
    """create -f FILE.yaml (and YAML on stdin) sends the object as JSON, typed as kubectl types it;
    a bad file is refused before any request, naming the file, line, column and field."""
    e = Emulator(pki, Posts)
    e.httpd.posted = []
    try:
        kc = kubeconfig(str(tmp_path), e.port, os.path.join(pki, "ca.crt"), "{token: t}")
        y = tmp_path / "cm.yaml"
        y.write_text(CM_YAML)
        p = kube(kc, "create", "-f", str(y), "-o", "name")
        assert p.returncode == 0, p.stderr
        assert p.stdout == "from-yaml\n"
        p = subprocess.run([GPUSLICE, "kube", "--kubeconfig", kc, "create", "-f", "-"], input=CM_YAML,
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout) == CM_JSON
        assert e.httpd.posted == [CM_JSON, CM_JSON]
        assert e.httpd.requests == ["/api/v1/namespaces/t/configmaps"] * 2
        # JSON as before
        j = tmp_path / "cm.json"
        j.write_text(json.dumps(CM_JSON))
        assert kube(kc, "create", "-f", str(j)).returncode == 0
        assert e.httpd.posted[-1] == CM_JSON
        n = len(e.httpd.requests)
        bad = tmp_path / "bad.yaml"
        bad.write_text(CM_YAML.replace('mode: "0755"', "mode: 0755"))
        p = kube(kc, "create", "-f", str(bad))
        assert p.returncode == 1
        assert p.stderr == (f"gpuslice kube: {bad}:{MODE_LINE}:{MODE_COLUMN}: data.mode: '0755' is a number to kubectl's YAML (1.1) but "
                            "not a plain decimal: quote it for a string, or write the number in decimal\n")
        bad.write_text(CM_YAML.replace("  enabled:", "  mode:"))
        p = kube(kc, "apply", "-f", str(bad))
        assert p.returncode == 1
        assert p.stderr == (f"gpuslice kube: {bad}:{MODE_LINE + 1}:3: data.mode: duplicate key 'mode' (first at "
                            f"line {MODE_LINE}, column 3)\n")
        bad.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [x\n")
        p = kube(kc, "create", "-f", str(bad))
        assert p.returncode == 1 and p.stderr.startswith(f"gpuslice kube: {bad}:") and "syntax error" in p.stderr
        assert len(e.httpd.requests) == n
    finally:
        e.close()
