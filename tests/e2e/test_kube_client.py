"""gpuslice's Kubernetes REST client (src/kube, through `gpuslice kube`) against the real API
server: the Node, a ConfigMap's life with a 409 on a stale update, list pages with continue
tokens, a watch's ADDED/MODIFIED/DELETED, an informer that survives an API server restart, and a
service account's token with the cluster CA (RBAC: configmaps only, so a Node is refused with the
server's own message). What the real server cannot be made to do is in tests/kube/."""
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

from e2e import GPUSLICE, NS, ROOT, E2EError, wait

sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from kubeconfig import write_kubeconfig  # noqa: E402
from kubeyaml import MODE_COLUMN, MODE_LINE, configmap_json, configmap_yaml  # noqa: E402

LABEL = "gpuslice.io/kube-client-test"


def kube(cluster, *args, kubeconfig=None, env=None, check=True, timeout=60):
    cmd = [GPUSLICE, "kube"]
    if kubeconfig is not False:
        cmd += ["--kubeconfig", kubeconfig or cluster.kubeconfig]
    p = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=timeout,
                       env=env or cluster.env)
    if check and p.returncode != 0:
        raise E2EError(f"gpuslice kube {' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def write_json(tmp_path, name, obj):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(obj))
    return str(path)


def configmap(name, data, rv=None):
    meta = {"name": name, "namespace": NS, "labels": {LABEL: "1"}}
    if rv:
        meta["resourceVersion"] = rv
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


class Lines:
    """A process whose stdout lines are read on a thread; the caller waits for lines matching."""

    def __init__(self, argv, env):
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.q = queue.Queue()
        self.seen = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.q.put(line.rstrip("\n"))

    def wait_for(self, pred, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.q.get(timeout=0.5)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            ev = json.loads(line)
            self.seen.append(ev)
            if pred(ev):
                return ev
        raise E2EError(f"no {what} in {timeout} s; seen {self.seen}; exit {self.proc.poll()}; "
                       f"stderr {self.stop()}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return err


def cleanup(cluster):
    cluster.kubectl("delete", "configmap", "-n", NS, "-l", LABEL, "--wait=false", check=False)


def test_get_node(cluster):
    node = json.loads(kube(cluster, "get", "nodes", cluster.node_name).stdout)
    assert node["kind"] == "Node"
    assert node["metadata"]["name"] == cluster.node_name
    assert node["metadata"]["uid"] == cluster.node()["metadata"]["uid"]
    p = kube(cluster, "get", "nodes", "gs-no-such-node", check=False)
    assert p.returncode == 1
    assert p.stderr.strip() == ('gpuslice kube: GET /api/v1/nodes/gs-no-such-node: 404 Not Found: '
                                'nodes "gs-no-such-node" not found')


def test_configmap_create_update_conflict_delete(cluster, tmp_path):
    cleanup(cluster)
    try:
        created = json.loads(kube(cluster, "create", "-f", write_json(tmp_path, "c", configmap("kc-a", {"k": "1"}))).stdout)
        rv1 = created["metadata"]["resourceVersion"]
        assert cluster.get("configmap", "kc-a", "-n", NS)["data"] == {"k": "1"}
        p = kube(cluster, "create", "-f", write_json(tmp_path, "c", configmap("kc-a", {"k": "1"})), check=False)
        assert p.returncode == 1 and "409 Conflict: configmaps \"kc-a\" already exists" in p.stderr, p.stderr
        # an update from the version read: accepted
        upd = json.loads(kube(cluster, "replace", "-f", write_json(tmp_path, "u", configmap("kc-a", {"k": "2"}, rv1))).stdout)
        assert upd["metadata"]["resourceVersion"] != rv1
        assert cluster.get("configmap", "kc-a", "-n", NS)["data"] == {"k": "2"}
        # the same stale version again: 409, the server's message, nothing changed
        p = kube(cluster, "replace", "-f", write_json(tmp_path, "s", configmap("kc-a", {"k": "3"}, rv1)), check=False)
        assert p.returncode == 1
        assert ("409 Conflict: Operation cannot be fulfilled on configmaps \"kc-a\": the object has been modified"
                in p.stderr), p.stderr
        assert cluster.get("configmap", "kc-a", "-n", NS)["data"] == {"k": "2"}
        kube(cluster, "patch", "configmaps", "kc-a", "-n", NS, "-p", '{"data":{"m":"x"}}')
        kube(cluster, "apply", "--force", "-f", write_json(tmp_path, "a", configmap("kc-b", {"k": "applied"})))
        assert cluster.get("configmap", "kc-a", "-n", NS)["data"] == {"k": "2", "m": "x"}
        assert cluster.get("configmap", "kc-b", "-n", NS)["data"] == {"k": "applied"}
        kube(cluster, "delete", "configmaps", "kc-a", "-n", NS)
        p = kube(cluster, "get", "cm", "kc-a", "-n", NS, check=False)
        assert p.returncode == 1 and '404 Not Found: configmaps "kc-a" not found' in p.stderr, p.stderr
    finally:
        cleanup(cluster)


def test_objects_from_yaml(cluster, tmp_path):
    """create, apply and replace -f FILE.yaml: the server takes the object as kubectl would send it
    (quoted numbers and words stay strings, false a boolean); a value kubectl would read as
    another number is refused before any request."""
    cleanup(cluster)
    cm = configmap_yaml("kc-yaml", f'{{{LABEL}: "1"}}')
    try:
        y = tmp_path / "cm.yaml"
        y.write_text(cm)
        created = json.loads(kube(cluster, "create", "-n", NS, "-f", str(y)).stdout)
        assert created["metadata"]["namespace"] == NS
        got = cluster.get("configmap", "kc-yaml", "-n", NS)
        want = configmap_json("kc-yaml", {LABEL: "1"}, NS)
        assert {k: got[k] for k in ("data", "immutable")} == {k: want[k] for k in ("data", "immutable")}
        assert got["metadata"]["labels"] == want["metadata"]["labels"]
        # replace from the version read, then server-side apply from stdin
        y.write_text(cm.replace("  name: kc-yaml\n", f"  name: kc-yaml\n  resourceVersion: \"{created['metadata']['resourceVersion']}\"\n")
                     .replace('enabled: "true"', 'enabled: "false"'))
        kube(cluster, "replace", "-n", NS, "-f", str(y))
        assert cluster.get("configmap", "kc-yaml", "-n", NS)["data"]["enabled"] == "false"
        p = subprocess.run([GPUSLICE, "kube", "--kubeconfig", cluster.kubeconfig, "apply", "--force", "-n", NS, "-f", "-"],
                           input=cm.replace("kc-yaml", "kc-yaml-applied"), capture_output=True, text=True, timeout=60,
                           env=cluster.env)
        assert p.returncode == 0, p.stderr
        assert cluster.get("configmap", "kc-yaml-applied", "-n", NS)["data"]["mode"] == "0755"
        bad = tmp_path / "bad.yaml"
        bad.write_text(cm.replace("kc-yaml", "kc-yaml-bad").replace('mode: "0755"', "mode: 0755"))
        p = kube(cluster, "create", "-n", NS, "-f", str(bad), check=False)
        assert p.returncode == 1
        assert f"{bad}:{MODE_LINE}:{MODE_COLUMN}: data.mode: '0755' is a number" in p.stderr, p.stderr
        p = kube(cluster, "get", "cm", "kc-yaml-bad", "-n", NS, check=False)
        assert p.returncode == 1 and "404 Not Found" in p.stderr, p.stderr
    finally:
        cleanup(cluster)


def test_list_pages_with_continue(cluster, tmp_path):
    cleanup(cluster)
    try:
        names = [f"kc-page-{i}" for i in range(5)]
        for n in names:
            kube(cluster, "create", "-f", write_json(tmp_path, n, configmap(n, {"i": n})))
        sel = ("-n", NS, "-l", f"{LABEL}=1", "-o", "name")
        first = kube(cluster, "list", "configmaps", *sel, "--limit", "2").stdout.splitlines()
        assert len(first) == 3 and first[2].startswith("continue: "), first
        token = first[2][len("continue: "):]
        second = kube(cluster, "list", "configmaps", *sel, "--limit", "2", "--continue", token).stdout.splitlines()
        assert len(second) == 3 and second[2].startswith("continue: "), second
        third = kube(cluster, "list", "configmaps", *sel, "--limit", "2",
                     "--continue", second[2][len("continue: "):]).stdout.splitlines()
        assert len(third) == 1, third  # the last page: no continue token
        paged = first[:2] + second[:2] + third
        assert paged == [f"{NS}/{n}" for n in names]
        # every page in one call (pages of 2 would be 3 requests; the default page is 500)
        assert kube(cluster, "list", "configmaps", *sel).stdout.splitlines() == paged
        assert kube(cluster, "list", "cm", "-A", "-l", f"{LABEL}=1", "-o", "name").stdout.splitlines() == paged
    finally:
        cleanup(cluster)


def test_watch_added_modified_deleted(cluster, tmp_path):
    cleanup(cluster)
    w = Lines([GPUSLICE, "kube", "--kubeconfig", cluster.kubeconfig, "watch", "configmaps", "-n", NS,
               "-l", f"{LABEL}=1", "--watch-timeout", "120"], cluster.env)
    try:
        time.sleep(1)  # the watch is open (an object made before it would come as ADDED anyway)
        kube(cluster, "create", "-f", write_json(tmp_path, "w", configmap("kc-w", {"k": "1"})))
        w.wait_for(lambda e: e["type"] == "ADDED" and e.get("name") == "kc-w", 60, "ADDED kc-w")
        kube(cluster, "patch", "cm", "kc-w", "-n", NS, "-p", '{"data":{"k":"2"}}')
        w.wait_for(lambda e: e["type"] == "MODIFIED" and e.get("name") == "kc-w", 60, "MODIFIED kc-w")
        kube(cluster, "delete", "cm", "kc-w", "-n", NS)
        w.wait_for(lambda e: e["type"] == "DELETED" and e.get("name") == "kc-w", 60, "DELETED kc-w")
        types = [e["type"] for e in w.seen if e.get("name") == "kc-w"]
        assert types == ["ADDED", "MODIFIED", "DELETED"], w.seen
    finally:
        w.stop()
        cleanup(cluster)


def test_informer_survives_apiserver_restart(cluster, tmp_path):
    """The informer lists, watches, loses the connection when the API server stops, backs off
    while it is down, relists when it is back and sees what changed meanwhile and after."""
    cleanup(cluster)
    kube(cluster, "create", "-f", write_json(tmp_path, "r0", configmap("kc-r0", {"k": "0"})))
    w = Lines([GPUSLICE, "kube", "--kubeconfig", cluster.kubeconfig, "--timeout", "10000", "watch", "configmaps",
               "-n", NS, "-l", f"{LABEL}=1", "--informer"], cluster.env)
    try:
        w.wait_for(lambda e: e["type"] == "LIST" and [i["name"] for i in e["items"]] == ["kc-r0"], 60, "the first LIST")
        kube(cluster, "create", "-f", write_json(tmp_path, "r1", configmap("kc-r1", {"k": "1"})))
        w.wait_for(lambda e: e["type"] == "ADDED" and e.get("name") == "kc-r1", 60, "ADDED kc-r1")
        lists = sum(e["type"] == "LIST" for e in w.seen)
        cluster.cluster("restart-apiserver", timeout=300)
        kube(cluster, "create", "-f", write_json(tmp_path, "r2", configmap("kc-r2", {"k": "2"})))
        # after the restart: a relist that holds kc-r2, or the resumed watch's ADDED
        w.wait_for(lambda e: (e["type"] == "LIST" and "kc-r2" in [i["name"] for i in e["items"]]) or
                   (e["type"] == "ADDED" and e.get("name") == "kc-r2"), 120, "kc-r2 after the restart")
        assert sum(e["type"] == "LIST" for e in w.seen) > lists, "no relist after the connection dropped"
        kube(cluster, "delete", "cm", "kc-r1", "-n", NS)
        w.wait_for(lambda e: e["type"] == "DELETED" and e.get("name") == "kc-r1", 60, "DELETED kc-r1 after the restart")
        err = w.stop()
        assert w.proc.returncode == 0, err
        assert "relisting" in err, err  # the dropped watch was reported
    finally:
        w.stop()
        cleanup(cluster)


def test_service_account_token_and_cluster_ca(cluster, tmp_path):
    sa = "gs-kube-client"
    rbac = f"""apiVersion: v1
kind: ServiceAccount
metadata: {{name: {sa}, namespace: {NS}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: {sa}, namespace: {NS}}}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {sa}, namespace: {NS}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {sa}}}
subjects:
- {{kind: ServiceAccount, name: {sa}, namespace: {NS}}}
"""
    cluster.kubectl("apply", "-f", "-", input=rbac)
    cleanup(cluster)
    try:
        token = cluster.kubectl("create", "token", sa, "-n", NS, "--duration", "10m").stdout.strip()
        ca = os.path.join(cluster.dir, "pki", "ca.crt")
        server = f"https://127.0.0.1:{cluster.port_base + 443}"
        (tmp_path / "token").write_text(token + "\n")
        kc = write_kubeconfig(tmp_path / "sa.kubeconfig", server, ca, "{tokenFile: token}", NS, cluster="e2e",
                              user_name="sa", context="sa")
        # the context's namespace is the default one; configmaps are allowed
        kube(cluster, "create", "-f", write_json(tmp_path, "t", configmap("kc-sa", {"by": "sa"})), kubeconfig=kc)
        assert kube(cluster, "list", "cm", "-l", f"{LABEL}=1", "-o", "name",
                    kubeconfig=kc).stdout.split() == [f"{NS}/kc-sa"]
        # nodes are not: the API server's own words
        p = kube(cluster, "get", "nodes", cluster.node_name, kubeconfig=kc, check=False)
        assert p.returncode == 1
        assert (f'403 Forbidden: nodes "{cluster.node_name}" is forbidden: User "system:serviceaccount:{NS}:{sa}" '
                'cannot get resource "nodes"') in p.stderr, p.stderr
        # in-cluster: the service account directory as a pod has it, the service's host and port
        sadir = tmp_path / "serviceaccount"
        sadir.mkdir()
        (sadir / "token").write_text(token)
        (sadir / "ca.crt").write_text(open(ca).read())
        (sadir / "namespace").write_text(NS)
        env = dict(cluster.env, KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(cluster.port_base + 443))
        env.pop("KUBECONFIG", None)
        got = json.loads(kube(cluster, "--service-account-dir", str(sadir), "get", "cm", "kc-sa", kubeconfig=False,
                              env=env).stdout)
        assert got["data"] == {"by": "sa"}
        # a token that is not the cluster's: 401 with the server's message
        (sadir / "token").write_text("not-a-token")
        p = kube(cluster, "--service-account-dir", str(sadir), "get", "cm", "kc-sa", kubeconfig=False, env=env,
                 check=False)
        assert p.returncode == 1 and "401 Unauthorized" in p.stderr, p.stderr
        # a CA that did not sign the server's certificate: refused
        other = tmp_path / "other"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(other) + ".key",
                        "-out", str(other) + ".crt", "-days", "1", "-subj", "/CN=other"], check=True,
                       capture_output=True)
        (sadir / "token").write_text(token)
        (sadir / "ca.crt").write_text(open(str(other) + ".crt").read())
        p = kube(cluster, "--service-account-dir", str(sadir), "get", "cm", "kc-sa", kubeconfig=False, env=env,
                 check=False)
        assert p.returncode == 1 and "certificate" in p.stderr.lower(), p.stderr
    finally:
        cleanup(cluster)
        cluster.kubectl("delete", "-f", "-", "--wait=false", input=rbac, check=False)
