"""The API server's checks of `gpuslice doctor` and of the agent (NVIDIA's MIG manager's
nvidia.com/mig.config label on the Node) against the loopback HTTPS emulator of tests/kube/, for
what the real API server is not made to do here: 401, 403, a Node that does not exist, a server
that takes the request and never answers, resource.k8s.io/v1 not served, a SelfSubjectAccessReview
that says no. The same checks against the real API server: tests/e2e/test_operator_api.py.

Environment (set by meson): GPUSLICE, GPUSLICE_SIM_LIB, GS_SOURCE_ROOT."""
import json
import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "kube"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
from emulator import Emulator, Handler, status  # noqa: E402
from kubeconfig import write_kubeconfig  # noqa: E402
from test_kube_emulator import pki  # noqa: E402,F401 (pki: fixture)
from test_agent import H100X2, _mig_policy, _status, h  # noqa: E402,F401 (h: fixture)
from test_doctor import node  # noqa: E402,F401 (node: fixture)
import wait  # noqa: E402 (tests/lib)

LABEL = "nvidia.com/mig.config"


class NodeHandler(Handler):
    """Nodes from server.nodes {name: labels}; the names unauth, forbidden and hang answer 401,
    403 and never; resource.k8s.io/v1 when server.dra; SelfSubjectAccessReviews say server.sar."""

    def do_GET(self):
        srv = self.server
        path = self.path.partition("?")[0]
        if path.startswith("/api/v1/nodes/"):
            name = path[len("/api/v1/nodes/"):]
            srv.node_gets += 1
            if name == "unauth":
                return self.send_json(401, status(401, "Unauthorized", "Unauthorized"))
            if name == "forbidden":
                return self.send_json(403, status(403, "Forbidden", 'nodes "forbidden" is forbidden: User '
                                                  '"system:serviceaccount:gs:gpuslice" cannot get resource "nodes"'))
            if name == "hang":
                time.sleep(60)
                return
            labels = srv.nodes.get(name)
            if labels is None:
                return self.send_json(404, status(404, "NotFound", f'nodes "{name}" not found'))
            return self.send_json(200, {"kind": "Node", "apiVersion": "v1",
                                        "metadata": {"name": name, "labels": dict(labels)}})
        if path == "/apis/resource.k8s.io/v1":
            if srv.dra:
                return self.send_json(200, {"kind": "APIResourceList", "groupVersion": "resource.k8s.io/v1",
                                            "resources": [{"name": "resourceslices", "kind": "ResourceSlice"}]})
            return self.send_json(404, status(404, "NotFound", "the server could not find the requested resource"))
        return super().do_GET()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        if self.path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
            self.server.reviews.append(body["spec"]["resourceAttributes"])
            body["status"] = {"allowed": self.server.sar, "reason": "" if self.server.sar else "no RBAC rule"}
            return self.send_json(201, body)
        return self.send_json(405, status(405, "MethodNotAllowed", "no"))


@pytest.fixture
def api(pki, tmp_path):
    e = Emulator(pki, NodeHandler)
    e.httpd.nodes = {"gpu-1": {"kubernetes.io/hostname": "gpu-1"}}
    e.httpd.node_gets, e.httpd.dra, e.httpd.sar, e.httpd.reviews = 0, True, True, []
    e.kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{e.port}", os.path.join(pki, "ca.crt"),
                                    "{token: new-token}", None, cluster="emu", context="emu")
    yield e
    e.close()


def api_findings(node, api, name, *extra, expect_rc, policy=None):
    t0 = time.monotonic()
    got = [f for f in node.findings("--kubeconfig", api.kubeconfig, "--node-name", name, *extra,
                                    expect_rc=expect_rc, policy=policy) if f["check"].startswith("api")]
    return {f["check"]: f for f in got}, time.monotonic() - t0


def mig_policy_file(node, config="all-balanced", mode=None):
    p = node.tmp / "mig-policy.yaml"
    p.write_text(_mig_policy(config) + (f"  coexistence:\n    otherMigManager: {mode}\n" if mode else ""))
    return p


def test_doctor_good_api(node, api):
    by, _ = api_findings(node, api, "gpu-1", "--dra", expect_rc=0)
    assert [by[c]["status"] for c in ("api", "api.node", "api.mig-manager", "api.dra", "api.dra.rbac")] == ["ok"] * 5
    assert f"https://127.0.0.1:{api.port}" in by["api"]["message"], by
    assert api.httpd.reviews == [{"group": "resource.k8s.io", "resource": "resourceslices", "verb": "create"}]


def test_doctor_without_api_access_warns_once(node):
    findings = node.findings(expect_rc=0)
    got = [f for f in findings if f["check"].startswith("api")]
    assert len(got) == 1 and got[0]["check"] == "api" and got[0]["status"] == "warn", got
    assert "no API access" in got[0]["message"] and "KUBERNETES_SERVICE_HOST" in got[0]["message"]


def test_doctor_401_403_404(node, api):
    by, _ = api_findings(node, api, "unauth", expect_rc=1)
    assert by["api"]["status"] == "fail" and "401 Unauthorized" in by["api"]["message"], by
    assert "api.node" not in by
    by, _ = api_findings(node, api, "forbidden", expect_rc=1)
    assert by["api"]["status"] == "fail" and "may not get Node forbidden" in by["api"]["message"], by
    assert "cannot get resource \"nodes\"" in by["api"]["message"] and "RBAC" in by["api"]["fix"]
    by, _ = api_findings(node, api, "gpu-2", expect_rc=1)
    assert by["api"]["status"] == "ok" and by["api.node"]["status"] == "fail", by
    assert "no Node gpu-2 (the name from --node-name)" in by["api.node"]["message"]
    assert "NODE_NAME" in by["api.node"]["fix"]


def test_doctor_slow_api_is_bounded_and_not_a_failure(node, api):
    by, took = api_findings(node, api, "hang", expect_rc=0)
    assert by["api"]["status"] == "warn" and "did not answer" in by["api"]["message"], by
    assert took < 30, took  # 10 s per request, not the server's 60


def test_doctor_mig_manager_label(node, api):
    api.httpd.nodes["gpu-1"][LABEL] = "all-1g.10gb"
    by, _ = api_findings(node, api, "gpu-1", expect_rc=1, policy=mig_policy_file(node))
    f = by["api.mig-manager"]
    assert f["status"] == "fail" and f"{LABEL}=all-1g.10gb" in f["message"], by
    assert "migManager.enabled=false" in f["fix"] and f"kubectl label node gpu-1 {LABEL}-" in f["fix"]
    by, _ = api_findings(node, api, "gpu-1", expect_rc=0, policy=mig_policy_file(node, mode="warn"))
    assert by["api.mig-manager"]["status"] == "warn", by
    by, _ = api_findings(node, api, "gpu-1", expect_rc=0)  # no MIG layout: NVIDIA's may own MIG
    assert by["api.mig-manager"]["status"] == "ok" and "leaves MIG alone" in by["api.mig-manager"]["message"]


def test_doctor_dra_not_served_nor_allowed(node, api):
    api.httpd.dra, api.httpd.sar = False, False
    by, _ = api_findings(node, api, "gpu-1", "--dra", expect_rc=1)
    assert by["api.dra"]["status"] == "fail" and "404" in by["api.dra"]["message"], by
    assert by["api.dra.rbac"]["status"] == "fail" and "no RBAC rule" in by["api.dra.rbac"]["message"]


# ---- the agent -------------------------------------------------------------------------------

def mig_agent(h, api, name, mode=None):
    node = h.node(H100X2)
    st = os.path.join(h.base, "mig-status.json")
    policy = _mig_policy("all-1g.10gb") + (f"  coexistence:\n    otherMigManager: {mode}\n" if mode else "")
    a = h.agent(node, policy, extra=["--mig-status-file", st, "--kubeconfig", api.kubeconfig, "--node-name", name])
    return a, node, st


def wait_state(st, want, timeout=20):
    def reached():
        try:
            got = _status(st)
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return got if got["state"] == want else None
    return wait.until(reached, timeout=timeout, interval=0.1, what=f"MIG status {want}")


def mig_profiles(node):
    return sorted(d["profile"] for g in node.inspect()["gpus"] for d in (g.get("mig") or {}).get("devices", []))


def test_agent_refuses_the_layout_while_the_label_is_there(h, api):
    api.httpd.nodes["gpu-1"][LABEL] = "all-balanced"
    a, node, st = mig_agent(h, api, "gpu-1")
    got = wait_state(st, "refused")
    assert f"{LABEL}=all-balanced" in got["reason"], got
    a.wait_log(rf"level=warn.*Node gpu-1 carries {LABEL}=all-balanced.*gpuslice applies no MIG layout")
    before = mig_profiles(node)
    time.sleep(1)  # polls go on; nothing is applied
    assert mig_profiles(node) == before != ["1g.10gb"] * 14
    assert _status(st)["state"] == "refused"
    del api.httpd.nodes["gpu-1"][LABEL]
    wait_state(st, "applied")
    assert mig_profiles(node) == ["1g.10gb"] * 14
    a.wait_log(f"Node gpu-1 no longer carries {LABEL}: gpuslice applies its MIG layout")


def test_agent_warn_applies_anyway(h, api):
    api.httpd.nodes["gpu-1"][LABEL] = "all-balanced"
    a, node, st = mig_agent(h, api, "gpu-1", mode="warn")
    wait_state(st, "applied")
    a.wait_log(rf"level=warn.*{LABEL}=all-balanced.*applies its layout anyway")
    assert mig_profiles(node) == ["1g.10gb"] * 14


def test_agent_serves_while_the_api_server_hangs(h, api):
    """The first answer is awaited at most 10 s, without blocking the loop; then the layout is
    applied with a warning. A stop ends the request in flight at once."""
    a, node, st = mig_agent(h, api, "hang")
    a.wait_log("waits for the API server's answer on Node hang", timeout=10)
    t0 = time.monotonic()
    wait_state(st, "applied", timeout=25)
    assert time.monotonic() - t0 >= 7
    a.wait_log("did not answer within 10 s")
    a.wait_resources(["nvidia.com/mig-1g.10gb"], timeout=10)
    t0 = time.monotonic()
    assert a.stop(timeout=5) == 0
    assert time.monotonic() - t0 < 3, "the agent waited for the hanging request"


def test_agent_without_api_access_says_so_once(h):
    node = h.node(H100X2)
    a = h.agent(node, _mig_policy("all-1g.10gb"), resources=["nvidia.com/mig-1g.10gb"])
    line = a.wait_log("NVIDIA's MIG manager check is off")
    assert "not in a cluster" in line
    time.sleep(1)
    assert a.log().count("check is off") == 1


def test_agent_401_is_named_and_the_layout_follows(h, api):
    a, node, st = mig_agent(h, api, "unauth")
    a.wait_log(r"level=warn.*Cannot read Node unauth from the API server: .*401.*RBAC", timeout=10)
    wait_state(st, "applied", timeout=25)  # after the wait at start: the check is not a gate for ever
    a.wait_resources(["nvidia.com/mig-1g.10gb"], timeout=10)
    assert a.log().count("Cannot read Node unauth") == 1  # said once, though asked at every poll


def _maps(a):
    with open(f"/proc/{a.proc.pid}/maps") as f:
        return f.read()


def test_libcurl_is_loaded_only_for_an_api_client(h, api):
    """src/kube loads libcurl at the first client (curlload.h): an agent with API access but no
    MIG layout (nothing for the MIG-manager check to guard, no DRA) maps no libcurl and says
    nothing of the check; with a layout it reads its Node through libcurl."""
    from agent_harness import T4X2
    a = h.agent(h.node(T4X2), "version: v1\n", resources=["nvidia.com/gpu"],
                extra=["--kubeconfig", api.kubeconfig, "--node-name", "gpu-1"])
    assert "libcurl" not in _maps(a)
    assert "MIG manager" not in a.log()
    b, _, st = mig_agent(h, api, "gpu-1", mode="warn")
    wait_state(st, "applied")
    assert "libcurl" in _maps(b)
