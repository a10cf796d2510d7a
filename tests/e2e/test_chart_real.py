"""The Helm chart through the real Helm (helm.sh/helm/v3, built by tests/e2e/build.sh) and the
real API server: `helm template` renders deploy/helm/gpuslice under several value sets, the
result must equal what tests/deploy/helmlite.py renders (the stand-in the chart tests in
tests/deploy use, so those tests check what Helm really produces), and every object is accepted
by the API server's own validation (`kubectl apply --dry-run=server`: schemas, defaulting,
admission with Pod Security at the level the chart's namespace asks for). The default render is
then applied for real and its ServiceAccount is checked to have no API access (the agent talks to
the kubelet only; the chart has no RBAC objects, and needs none)."""
import os
import subprocess
import sys

import pytest
import yaml

from e2e import ROOT, wait

sys.path.insert(0, os.path.join(ROOT, "tests", "deploy"))
import helmlite  # noqa: E402

CHART = os.path.join(ROOT, "deploy", "helm", "gpuslice")
RENDERS = {
    "default": None,
    "unprivileged-runtimeclass": {"securityContext": {"privileged": False}, "runtimeClassName": "nvidia"},
    "no-node-selector-no-dev": {"nodeSelector": None, "hostPaths": {"dev": "", "cdiHook": ""}},
    "options": {"metrics": {"port": 9500}, "agent": {"logLevel": "debug", "extraArgs": ["--guard-grace-ms", "300000"]},
                "podAnnotations": {"a": "b"}, "imagePullSecrets": [{"name": "regcred"}]},
    "service-monitor": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
}
# needs the Prometheus Operator's CRD, which this cluster does not have
NOT_APPLIED = {"service-monitor"}


def helm_template(cluster, overrides, tmp_path):
    args = ["helm", "template", helmlite.RELEASE, CHART, "--namespace", helmlite.NAMESPACE]
    if overrides is not None:
        vf = tmp_path / "values.yaml"
        vf.write_text(yaml.safe_dump(overrides))
        args += ["-f", str(vf)]
    p = subprocess.run(args, capture_output=True, text=True, timeout=60, env=cluster.env)
    assert p.returncode == 0, f"{' '.join(args)}: exit {p.returncode}\n{p.stderr}"
    return p.stdout


def docs(text):
    return [d for d in yaml.safe_load_all(text) if d is not None]


@pytest.fixture(scope="module")
def namespace(cluster):
    cluster.kubectl("apply", "-f", "-", input=helmlite.NAMESPACE_DOC)
    yield helmlite.NAMESPACE
    cluster.kubectl("delete", "namespace", helmlite.NAMESPACE, "--wait=false", check=False)


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_real_helm_renders_what_helmlite_renders(cluster, name, tmp_path):
    real = docs(helm_template(cluster, RENDERS[name], tmp_path))
    lite = [parsed for _, _, parsed in helmlite.render(RENDERS[name])]
    assert [d["kind"] for d in real] == [d["kind"] for d in lite]
    assert real == lite


@pytest.mark.parametrize("name", sorted(set(RENDERS) - NOT_APPLIED))
def test_api_server_accepts_rendered_objects(cluster, namespace, name, tmp_path):
    text = helm_template(cluster, RENDERS[name], tmp_path)
    p = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=text, check=False)
    assert p.returncode == 0, f"{name}: the API server refused the chart's objects\n{p.stdout}\n{p.stderr}"
    assert p.stdout.count("(server dry run)") == len(docs(text)), p.stdout


def test_chart_installed_for_real_has_no_api_access(cluster, namespace, tmp_path):
    text = helm_template(cluster, None, tmp_path)
    cluster.kubectl("apply", "-f", "-", input=text)
    try:
        ds = wait(lambda: cluster.get("daemonset", "-n", namespace, helmlite.RELEASE).get("status"), 30,
                  "the DaemonSet's status")
        # no node carries nvidia.com/gpu.present=true here: the DaemonSet schedules nothing
        assert ds.get("desiredNumberScheduled", 0) == 0, ds
        sa = f"system:serviceaccount:{namespace}:{helmlite.RELEASE}"
        for verb, res in (("get", "pods"), ("list", "nodes"), ("get", "configmaps"), ("create", "events")):
            p = cluster.kubectl("auth", "can-i", verb, res, "-n", namespace, "--as", sa, check=False)
            assert p.stdout.strip() == "no", f"{sa} can {verb} {res}: {p.stdout}{p.stderr}"
    finally:
        cluster.kubectl("delete", "-f", "-", "--wait=false", input=text, check=False)
