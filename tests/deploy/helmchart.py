"""helmchart: the gpuslice Helm chart (deploy/helm/gpuslice) rendered by the real Helm, for the
tests in this directory and tests/e2e/test_chart_real.py.

helm is Helm v3.22.0 built from its Go module by `tests/e2e/build.sh helm`, cached by version
outside the tree (instant once built; the first build takes about 4 minutes on 2 cores), or the
binary $GS_HELM names. When it cannot be built, every test that renders the chart fails with the
build's output: the chart is never checked with a stand-in.

Values overrides are given as a dict, written to a values file and passed with `-f`, so Helm
merges them as it merges a user's values file (maps key by key, a null deletes the key, anything
else replaces). `helm template` leaves NOTES.txt out; notes() renders it with Helm's engine (tpl)
in a copy of the chart.
"""
import json
import os
import re
import shutil
import subprocess
import tempfile

import yaml

ROOT = os.environ.get("GS_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHART = os.path.join(ROOT, "deploy", "helm", "gpuslice")
MANIFESTS = os.path.join(ROOT, "deploy", "manifests", "gpuslice.yaml")
RENDER_MANIFESTS = os.path.join(ROOT, "scripts", "render-manifests.sh")
BUILD_SH = os.path.join(ROOT, "tests", "e2e", "build.sh")
RELEASE = "gpuslice"
NAMESPACE = "gpuslice-system"


class HelmError(Exception):
    pass


_helm = None
_helm_error = None
_rendered = {}


def helm():
    """The helm binary: $GS_HELM, else built (or found cached) by tests/e2e/build.sh helm."""
    global _helm, _helm_error
    if _helm:
        return _helm
    if _helm_error:
        raise HelmError(_helm_error)
    path = os.environ.get("GS_HELM")
    if not path:
        try:
            p = subprocess.run(["bash", BUILD_SH, "helm"], capture_output=True, text=True, timeout=1800)
        except subprocess.TimeoutExpired as e:
            _helm_error = f"bash {BUILD_SH} helm: building Helm took more than {e.timeout} s"
            raise HelmError(_helm_error) from None
        lines = p.stdout.splitlines()
        if p.returncode != 0 or not lines:
            _helm_error = (f"the chart tests need the real Helm, and `bash {BUILD_SH} helm` (which builds it from its Go "
                           f"module) failed with exit status {p.returncode}:\n{p.stderr[-4000:]}")
            raise HelmError(_helm_error)
        path = os.path.join(lines[-1], "helm")
    if not os.access(path, os.X_OK):
        _helm_error = f"no helm binary at {path}"
        raise HelmError(_helm_error)
    _helm = path
    return _helm


def run(*args, timeout=120):
    """Runs helm ARGS; returns its stdout, or raises HelmError with its stderr."""
    p = subprocess.run([helm(), *args], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise HelmError(f"helm {' '.join(args)}: exit status {p.returncode}\n{p.stderr}")
    return p.stdout


def _values_args(overrides, tmp):
    if overrides is None:
        return []
    path = os.path.join(tmp, "values.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(overrides, f)
    return ["-f", path]


def template_text(overrides=None):
    """What `helm template gpuslice deploy/helm/gpuslice --namespace gpuslice-system [-f OVERRIDES]`
    prints (one run per set of overrides: the chart does not change while the tests run)."""
    key = json.dumps(overrides, sort_keys=True)
    if key not in _rendered:
        with tempfile.TemporaryDirectory(prefix="gs-helm-") as tmp:
            _rendered[key] = run("template", RELEASE, CHART, "--namespace", NAMESPACE, *_values_args(overrides, tmp))
    return _rendered[key]


def split_documents(text):
    """[(source, text, parsed)] of helm's output, in its order, documents that are only comments
    left out; source is the `# Source:` line's template."""
    docs = []
    # each document keeps its last line break (a block scalar that ends it keeps its newline, as
    # when kubectl or Helm itself reads the whole stream)
    for chunk in re.split(r"(?m)^---[ \t]*\n", text):
        lines = chunk.split("\n", 1)
        if not lines[0].startswith("# Source: "):
            if chunk.strip():
                raise HelmError(f"a document of helm template without its # Source line:\n{chunk[:500]}")
            continue
        body = lines[1] if len(lines) > 1 else ""
        parsed = yaml.safe_load(body)
        if parsed is not None:
            docs.append((lines[0][len("# Source: "):], body, parsed))
    return docs


def render(overrides=None):
    """The chart's documents as `helm template` renders them: [(source, text, parsed)]."""
    return split_documents(template_text(overrides))


def notes(overrides=None):
    """NOTES.txt rendered by Helm's engine with the same values and release (helm template leaves
    it out, and `helm install --dry-run` needs a cluster): a copy of the chart with one template
    more, which renders the file's text (a value) with tpl."""
    with open(os.path.join(CHART, "templates", "NOTES.txt")) as f:
        text = f.read()
    with tempfile.TemporaryDirectory(prefix="gs-helm-notes-") as tmp:
        chart = os.path.join(tmp, "gpuslice")
        shutil.copytree(CHART, chart)
        with open(os.path.join(chart, "templates", "zz-gs-notes.yaml"), "w") as f:
            f.write("kind: GsNotes\ntext: {{ tpl .Values.gsNotesText . | toJson }}\n")
        merged = dict(overrides or {}, gsNotesText=text)
        out = run("template", RELEASE, chart, "--namespace", NAMESPACE, *_values_args(merged, tmp),
                  "--show-only", "templates/zz-gs-notes.yaml")
    (doc,) = split_documents(out)
    return doc[2]["text"]


def lint(overrides=None):
    """`helm lint --strict` of the chart (with OVERRIDES): its output, or HelmError."""
    with tempfile.TemporaryDirectory(prefix="gs-helm-") as tmp:
        return run("lint", "--strict", CHART, "--namespace", NAMESPACE, *_values_args(overrides, tmp))


def load_chart():
    """(Chart.yaml, values.yaml) as parsed data: the chart's metadata and default values."""
    with open(os.path.join(CHART, "Chart.yaml")) as f:
        chart = yaml.safe_load(f)
    with open(os.path.join(CHART, "values.yaml")) as f:
        values = yaml.safe_load(f) or {}
    return chart, values


def rendered_manifests():
    """What scripts/render-manifests.sh writes to deploy/manifests/gpuslice.yaml, with this helm."""
    p = subprocess.run(["bash", RENDER_MANIFESTS, "-"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "GS_HELM": helm()})
    if p.returncode != 0:
        raise HelmError(f"scripts/render-manifests.sh -: exit status {p.returncode}\n{p.stderr}")
    return p.stdout


def namespace_doc():
    """The Namespace document of deploy/manifests/gpuslice.yaml (the objects need it first)."""
    with open(MANIFESTS) as f:
        ns = next(d for d in yaml.safe_load_all(f) if d is not None)
    assert ns["kind"] == "Namespace" and ns["metadata"]["name"] == NAMESPACE, ns
    return yaml.safe_dump(ns)
