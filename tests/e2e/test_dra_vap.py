"""The chart's ValidatingAdmissionPolicy for the DRA driver (templates/dra-rbac.yaml)
in the real API server: rendered by the real Helm (tests/deploy/helmchart.py) under a release of
the test's own with a driver name of its own, applied, and then ResourceSlices written as the
agent writes them: with a token of the release's service account bound to a Pod on the node (the
TokenRequest puts the pod's node in the token's `authentication.kubernetes.io/node-name`, which
the policy takes as the agent's node; `kubectl create token --bound-object-kind Pod`).

- a slice of the agent's node: created, updated and deleted;
- a slice of another node: its create refused with the policy's message, and (made by the
  admin) its update and delete refused too;
- a slice of the node but of another driver: refused;
- a token not bound to a pod (no node in it): refused, the message says why."""
import base64
import json
import os
import sys
import tempfile

import yaml

from e2e import NS, ROOT, wait

sys.path.insert(0, os.path.join(ROOT, "tests", "deploy"))
import helmchart  # noqa: E402

RELEASE = "drarest-vap"
DRIVER = "vap.gpuslice.io"
OTHER = "drarest-vap-other-node"
SLEEP = "sleep 3600"


def _slice(name, node, driver=DRIVER, devices=1):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"d{i}"} for i in range(devices)]}}


class As:
    """kubectl as the bearer of token (no client certificate: the admin kubeconfig's would win)."""

    def __init__(self, cluster, token):
        self.c, self.token = cluster, token
        raw = json.loads(cluster.kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout)
        cl = raw["clusters"][0]["cluster"]
        self.server = cl["server"]
        self.tmp = tempfile.mkdtemp(prefix="gs-vap-")
        self.ca = cl.get("certificate-authority") or os.path.join(self.tmp, "ca.crt")
        if "certificate-authority-data" in cl:
            with open(self.ca, "wb") as f:
                f.write(base64.b64decode(cl["certificate-authority-data"]))
        self.kubeconfig = os.path.join(self.tmp, "empty")
        open(self.kubeconfig, "w").close()

    def kubectl(self, *args, input=None):
        return self.c.kubectl("--kubeconfig", self.kubeconfig, "--server", self.server, "--certificate-authority",
                              self.ca, "--token", self.token, *args, input=input, check=False)

    def create(self, obj):
        return self.kubectl("create", "-f", "-", input=yaml.safe_dump(obj))


def _denied(p):
    return p.returncode != 0 and "ValidatingAdmissionPolicy" in p.stderr and "denied request" in p.stderr


def test_each_node_writes_only_its_own_slices(cluster):
    text = helmchart.run("template", RELEASE, helmchart.CHART, "--namespace", NS, "-s", "templates/dra-rbac.yaml",
                         "--set", "dra.enabled=true", "--set", f"dra.driver={DRIVER}")
    docs = [d for d in yaml.safe_load_all(text) if d]
    assert sorted(d["kind"] for d in docs) == ["ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                                               "ValidatingAdmissionPolicyBinding"], [d["kind"] for d in docs]
    node = cluster.node_name
    mine, other, admins = f"{RELEASE}-mine", f"{RELEASE}-other", f"{RELEASE}-admins"
    names = (mine, other, admins, f"{RELEASE}-driver", f"{RELEASE}-unbound")
    try:
        cluster.kubectl("create", "serviceaccount", "-n", NS, RELEASE)
        cluster.kubectl("apply", "-f", "-", input=text)
        pod = yaml.safe_load(cluster.pod_yaml(RELEASE, {}, SLEEP))
        pod["spec"]["serviceAccountName"] = RELEASE
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(pod))
        wait(lambda: cluster.pod(RELEASE)["spec"].get("nodeName"), 120, "the token's pod bound to the node")
        token = cluster.kubectl("create", "token", "-n", NS, RELEASE, "--bound-object-kind", "Pod",
                                "--bound-object-name", RELEASE, "--duration", "20m").stdout.strip()
        agent = As(cluster, token)
        who = json.loads(agent.kubectl("auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
        assert who["username"] == f"system:serviceaccount:{NS}:{RELEASE}", who
        assert who["extra"]["authentication.kubernetes.io/node-name"] == [node], who

        # another node's slice: refused once the policy is in force (the API server loads it
        # within seconds); one made before that is the admin's to delete
        def refused_other():
            p = agent.create(_slice(other, OTHER))
            if p.returncode == 0:
                cluster.kubectl("delete", "resourceslice", other, "--ignore-not-found")
            return _denied(p) and p
        p = wait(refused_other, 60, "the policy to refuse another node's slice")
        assert f"the agent of node '{node}' may not change ResourceSlices of node '{OTHER}'" in p.stderr, p.stderr
        assert f"{RELEASE}-dra-resourceslices" in p.stderr, p.stderr

        # its own node's: created, updated, deleted
        p = agent.create(_slice(mine, node))
        assert p.returncode == 0, p.stderr
        s = cluster.get("resourceslice", mine)
        s["spec"]["devices"].append({"name": "d9"})
        s["spec"]["pool"]["generation"] = 2
        p = agent.kubectl("replace", "-f", "-", input=json.dumps(s))
        assert p.returncode == 0, p.stderr
        assert [d["name"] for d in cluster.get("resourceslice", mine)["spec"]["devices"]] == ["d0", "d9"]
        p = agent.kubectl("delete", "resourceslice", mine)
        assert p.returncode == 0, p.stderr

        # another node's slice made by the admin: the agent may neither update nor delete it
        cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(_slice(admins, OTHER)))
        s = cluster.get("resourceslice", admins)
        s["spec"]["pool"]["generation"] = 2
        p = agent.kubectl("replace", "-f", "-", input=json.dumps(s))
        assert _denied(p) and f"may not change ResourceSlices of node '{OTHER}'" in p.stderr, p.stderr
        p = agent.kubectl("delete", "resourceslice", admins)
        assert _denied(p) and f"may not change ResourceSlices of node '{OTHER}'" in p.stderr, p.stderr
        assert cluster.get("resourceslice", admins)["spec"]["pool"]["generation"] == 1

        # its own node, another driver's slice
        p = agent.create(_slice(f"{RELEASE}-driver", node, driver="other.gpuslice.io"))
        assert _denied(p) and f"publishes the slices of its own driver only ({DRIVER})" in p.stderr, p.stderr

        # a token bound to no pod names no node
        plain = cluster.kubectl("create", "token", "-n", NS, RELEASE, "--duration", "20m").stdout.strip()
        p = As(cluster, plain).create(_slice(f"{RELEASE}-unbound", node))
        assert _denied(p) and "the agent's token names no node" in p.stderr, p.stderr
    finally:
        for n in names:
            cluster.kubectl("delete", "resourceslice", n, "--ignore-not-found", check=False)
        cluster.kubectl("delete", "-f", "-", "--ignore-not-found", input=text, check=False)
        cluster.kubectl("delete", "pod", "-n", NS, RELEASE, "--grace-period=1", "--ignore-not-found", check=False,
                        timeout=120)
        cluster.kubectl("delete", "serviceaccount", "-n", NS, RELEASE, "--ignore-not-found", check=False)
