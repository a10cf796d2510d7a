"""The Helm chart through the real Helm (helm.sh/helm/v3, built by tests/e2e/build.sh; rendered
by tests/deploy/helmchart.py, as the chart tests of tests/deploy render it) and the real API
server: `helm template` renders deploy/helm/gpuslice under several value sets, and every object
is accepted by the API server's own validation (`kubectl apply --dry-run=server`: schemas, defaulting,
admission with Pod Security at the level the chart's namespace asks for). The default render is
then applied for real and its ServiceAccount is checked to have no API access beyond get on nodes
(the doctor and the agent read their own Node for nvidia.com/mig.config; rbac-node.yaml)."""
import os
import sys

import pytest
import yaml

from e2e import ROOT, wait

sys.path.insert(0, os.path.join(ROOT, "tests", "deploy"))
import helmchart  # noqa: E402

RENDERS = {
    "default": None,
    "unprivileged-runtimeclass": {"securityContext": {"privileged": False}, "runtimeClassName": "nvidia"},
    "no-node-selector-no-dev": {"nodeSelector": None, "hostPaths": {"dev": "", "cdiHook": ""}},
    "options": {"metrics": {"port": 9500}, "agent": {"logLevel": "debug", "extraArgs": ["--guard-grace-ms", "300000"]},
                "podAnnotations": {"a": "b"}, "imagePullSecrets": [{"name": "regcred"}]},
    "service-monitor": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
    # the DRA driver: the agent's --dra and the kubelet's plugin directories, its RBAC, admission
    # policy and DeviceClasses (no extended resource names: dry run only, but kept off as elsewhere)
    "dra": {"dra": {"enabled": True, "extendedResourceNames": False}},
}
# kinds of CRDs this cluster does not have (the Prometheus Operator's): left out of what is applied
NOT_APPLIED = {"ServiceMonitor"}


def docs(text):
    return [d for d in yaml.safe_load_all(text) if d is not None]


def applicable(overrides):
    """The chart's documents as `helm template` prints them, without those of NOT_APPLIED kinds."""
    kept = [f"# Source: {source}\n{text}" for source, text, parsed in helmchart.render(overrides)
            if parsed["kind"] not in NOT_APPLIED]
    return "---\n" + "---\n".join(kept)


@pytest.fixture(scope="module")
def namespace(cluster):
    # the Namespace the plain manifests put first (the chart has none: `helm install -n`'s)
    cluster.kubectl("apply", "-f", "-", input=helmchart.namespace_doc())
    yield helmchart.NAMESPACE
    cluster.kubectl("delete", "namespace", helmchart.NAMESPACE, "--wait=false", check=False)


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_api_server_accepts_rendered_objects(cluster, namespace, name):
    text = applicable(RENDERS[name])
    p = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=text, check=False)
    assert p.returncode == 0, f"{name}: the API server refused the chart's objects\n{p.stdout}\n{p.stderr}"
    assert p.stdout.count("(server dry run)") == len(docs(text)), p.stdout


def test_chart_installed_for_real_has_no_api_access(cluster, namespace):
    text = helmchart.template_text(None)
    cluster.kubectl("apply", "-f", "-", input=text)
    try:
        ds = wait(lambda: cluster.get("daemonset", "-n", namespace, helmchart.RELEASE).get("status"), 30,
                  "the DaemonSet's status")
        # no node carries nvidia.com/gpu.present=true here: the DaemonSet schedules nothing
        assert ds.get("desiredNumberScheduled", 0) == 0, ds
        sa = f"system:serviceaccount:{namespace}:{helmchart.RELEASE}"
        for verb, res in (("get", "pods"), ("list", "nodes"), ("get", "configmaps"), ("create", "events"),
                          ("watch", "nodes"), ("patch", "nodes"), ("get", "secrets")):
            p = cluster.kubectl("auth", "can-i", verb, res, "-n", namespace, "--as", sa, check=False)
            assert p.stdout.strip() == "no", f"{sa} can {verb} {res}: {p.stdout}{p.stderr}"
        p = cluster.kubectl("auth", "can-i", "get", "nodes", "--as", sa, check=False)
        assert p.stdout.strip() == "yes", f"{sa} cannot get nodes: {p.stdout}{p.stderr}"
    finally:
        cluster.kubectl("delete", "-f", "-", "--wait=false", input=text, check=False)
