"""helmlite: renders the gpuslice Helm chart without Helm, for the tests in this directory.

This is NOT Helm. It implements exactly the template constructs deploy/helm/gpuslice uses, with
Helm's semantics for them, and refuses anything else (so the chart cannot start relying on more
without this file, and its tests, learning it):

  {{ PIPELINE }}                      the value, printed as Go's text/template prints it
  {{- ... }} / {{ ... -}}             trim the white space before / after the action
  {{ if PIPELINE }} ... {{ else }} ... {{ end }}   Go's truth: false, 0, "", nil, empty map/list
  {{/* comment */}}
  PIPELINE   COMMAND [| COMMAND]...   a piped value is passed as the command's last argument
  COMMAND    OPERAND | FUNCTION [OPERAND]...
  OPERAND    .Values.a.b  .Release.Name  .Release.Namespace  .Release.Service
             .Chart.Name  .Chart.Version  .Chart.AppVersion  "string"  integer
  FUNCTION   toYaml  indent N  nindent N  quote  not

Values are the chart's values.yaml deep-merged with overrides the way Helm merges `-f` files
(maps merge key by key, a null deletes the key, anything else replaces). Numbers print as Helm
prints them (Helm reads values as float64: 1000000 prints as 1e+06). A value that does not exist
is an error when printed (Helm prints nothing) and false in an `if`. toYaml uses PyYAML instead of
Go's yaml library: the text may differ, the parsed YAML does not.

Output is ordered like `helm template`: templates/*.yaml (not _*.tpl, not NOTES.txt) split into
documents, empty ones dropped, sorted by kind in Helm's install order.

Command line (regenerates deploy/manifests/gpuslice.yaml; see docs/deploy.md):
  /usr/bin/python3 tests/deploy/helmlite.py --manifests > deploy/manifests/gpuslice.yaml
"""
import copy
import decimal
import json
import os
import re
import sys

import yaml

ROOT = os.environ.get("GS_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHART = os.path.join(ROOT, "deploy", "helm", "gpuslice")
RELEASE = "gpuslice"
NAMESPACE = "gpuslice-system"

# Helm's releaseutil.InstallOrder; kinds not listed come after, alphabetically.
INSTALL_ORDER = [
    "PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy",
    "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList", "ConfigMap", "StorageClass",
    "PersistentVolume", "PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole", "ClusterRoleList",
    "ClusterRoleBinding", "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList",
    "Service", "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment", "HorizontalPodAutoscaler",
    "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress", "APIService",
]

# The Namespace the plain manifests add in front of the chart's objects: the pods need hostPID,
# hostPath volumes and (by default) privileged, which Pod Security admission allows only here.
NAMESPACE_DOC = f"""apiVersion: v1
kind: Namespace
metadata:
  name: {NAMESPACE}
  labels:
    pod-security.kubernetes.io/enforce: privileged
"""


class TemplateError(Exception):
    pass


class _Missing:
    """A value path that does not exist (`.Values.nope`)."""

    def __init__(self, path):
        self.path = path


def merge_values(base, override):
    """Helm's coalescing of a user values file over the chart's: returns a new dict."""
    out = copy.deepcopy(base)
    for k, v in (override or {}).items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge_values(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def go_number(v):
    """fmt.Sprint of the float64 Helm holds for a YAML number: shortest digits, %e from 1e+06."""
    f = float(v)
    if f == 0:
        return "0"
    sign, digits, exponent = decimal.Decimal(repr(f)).normalize().as_tuple()
    ds = "".join(map(str, digits))
    exp10 = len(ds) + exponent - 1
    minus = "-" if sign else ""
    if exp10 < -4 or exp10 >= 6:
        mant = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
        return f"{minus}{mant}e{'-' if exp10 < 0 else '+'}{abs(exp10):02d}"
    if exp10 >= len(ds) - 1:
        return minus + ds + "0" * (exp10 - len(ds) + 1)
    if exp10 >= 0:
        return minus + ds[:exp10 + 1] + "." + ds[exp10 + 1:]
    return minus + "0." + "0" * (-exp10 - 1) + ds


def go_print(v):
    if isinstance(v, _Missing):
        raise TemplateError(f"{v.path}: no such value")
    if v is None:
        raise TemplateError("printing a null value")
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return go_number(v)
    if isinstance(v, str):
        return v
    raise TemplateError(f"printing a {type(v).__name__} directly (use toYaml)")


def truth(v):
    if isinstance(v, _Missing) or v is None:
        return False
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return v != 0
    if isinstance(v, (str, list, dict)):
        return len(v) > 0
    return True


def _to_yaml(v):
    if isinstance(v, _Missing):
        raise TemplateError(f"toYaml {v.path}: no such value")
    text = yaml.safe_dump(v, default_flow_style=False, sort_keys=True, allow_unicode=True)
    if text.endswith("\n...\n"):  # PyYAML's end marker after a plain scalar
        text = text[:-4]
    return text[:-1] if text.endswith("\n") else text


def _indent(n, s):
    pad = " " * int(n)
    return pad + go_print(s).replace("\n", "\n" + pad)


FUNCTIONS = {
    "toYaml": (1, _to_yaml),
    "indent": (2, _indent),
    "nindent": (2, lambda n, s: "\n" + _indent(n, s)),
    "quote": (1, lambda s: json.dumps(go_print(s), ensure_ascii=False)),
    "not": (1, lambda v: not truth(v)),
}

_TOKEN = re.compile(r'\s*(?:(?P<field>(?:\.[A-Za-z_][A-Za-z0-9_]*)+)|(?P<str>"(?:[^"\\]|\\.)*")|(?P<num>-?\d+)'
                    r'|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)|(?P<pipe>\|))')


def _tokens(expr):
    pos, out = 0, []
    expr = expr.rstrip()
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if not m or m.end() == pos:
            raise TemplateError(f"unsupported syntax at {expr[pos:]!r} in {{{{ {expr} }}}}")
        pos = m.end()
        out.append((m.lastgroup, m.group(m.lastgroup)))
    return out


class Context:
    def __init__(self, values, chart, release, namespace):
        self.root = {
            "Values": values,
            "Release": {"Name": release, "Namespace": namespace, "Service": "Helm"},
            "Chart": {"Name": chart["name"], "Version": chart["version"], "AppVersion": chart.get("appVersion")},
        }

    def field(self, path):
        parts = path.lstrip(".").split(".")
        if parts[0] not in ("Values", "Release", "Chart"):
            raise TemplateError(f"unsupported object {path}")
        if parts[0] != "Values" and (len(parts) != 2 or parts[1] not in self.root[parts[0]]):
            raise TemplateError(f"unsupported field {path}")
        v = self.root
        for p in parts:
            if not isinstance(v, dict) or p not in v:
                return _Missing(path)
            v = v[p]
        return v


def _operand(ctx, kind, text):
    if kind == "field":
        return ctx.field(text)
    if kind == "str":
        return json.loads(text)
    if kind == "num":
        return int(text)
    raise TemplateError(f"unexpected {text!r}")


def eval_pipeline(ctx, expr):
    toks = _tokens(expr)
    commands, cur = [], []
    for t in toks:
        if t[0] == "pipe":
            commands.append(cur)
            cur = []
        else:
            cur.append(t)
    commands.append(cur)
    value, piped = None, False
    for cmd in commands:
        if not cmd:
            raise TemplateError(f"empty command in {{{{ {expr} }}}}")
        kind, text = cmd[0]
        if kind == "ident":
            if text not in FUNCTIONS:
                raise TemplateError(f"unsupported function {text!r}")
            arity, fn = FUNCTIONS[text]
            args = [_operand(ctx, k, t) for k, t in cmd[1:]]
            if piped:
                args.append(value)
            if len(args) != arity:
                raise TemplateError(f"{text} takes {arity} argument(s), got {len(args)} in {{{{ {expr} }}}}")
            value = fn(*args)
        else:
            if piped or len(cmd) != 1:
                raise TemplateError(f"unsupported command in {{{{ {expr} }}}}")
            value = _operand(ctx, kind, text)
        piped = True
    return value


_ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.S)


def _parse(text, name):
    """Returns a tree: a list of str and ("out", expr) / ("if", expr, then, else_)."""
    parts = []  # (kind, payload)
    pos = 0
    for m in _ACTION.finditer(text):
        parts.append(["text", text[pos:m.start()]])
        body = m.group(2).strip()
        if m.group(1):
            parts[-1][1] = parts[-1][1].rstrip(" \t\r\n")
        parts.append(["action", body, bool(m.group(3))])
        pos = m.end()
    parts.append(["text", text[pos:]])
    for i, p in enumerate(parts):  # right trims apply to the following text
        if p[0] == "action" and p[2]:
            parts[i + 1][1] = parts[i + 1][1].lstrip(" \t\r\n")

    root = []
    stack = [(root, None)]  # (list being filled, the if node)
    for p in parts:
        cur = stack[-1][0]
        if p[0] == "text":
            if p[1]:
                cur.append(p[1])
            continue
        body = p[1]
        if body.startswith("/*"):
            if not body.endswith("*/"):
                raise TemplateError(f"{name}: unterminated comment")
            continue
        word = body.split(None, 1)[0] if body else ""
        if word == "if":
            node = ["if", body[2:].strip(), [], []]
            cur.append(node)
            stack.append((node[2], node))
        elif word == "else":
            if body != "else" or stack[-1][1] is None or cur is stack[-1][1][3]:
                raise TemplateError(f"{name}: unsupported or misplaced {{{{ {body} }}}}")
            stack[-1] = (stack[-1][1][3], stack[-1][1])
        elif word == "end":
            if body != "end" or stack[-1][1] is None:
                raise TemplateError(f"{name}: misplaced {{{{ end }}}}")
            stack.pop()
        elif word in ("range", "with", "define", "template", "include", "block", "define", "tpl", "fail",
                      "required", "lookup"):
            raise TemplateError(f"{name}: {{{{ {word} }}}} is not supported by helmlite")
        else:
            cur.append(["out", body])
    if len(stack) != 1:
        raise TemplateError(f"{name}: {{{{ if }}}} without {{{{ end }}}}")
    return root


def _exec(ctx, nodes, out, name):
    for n in nodes:
        if isinstance(n, str):
            out.append(n)
        elif n[0] == "out":
            try:
                out.append(go_print(eval_pipeline(ctx, n[1])))
            except TemplateError as e:
                raise TemplateError(f"{name}: {e}") from None
        else:
            _exec(ctx, n[2] if truth(eval_pipeline(ctx, n[1])) else n[3], out, name)


def render_text(text, ctx, name="template"):
    out = []
    _exec(ctx, _parse(text, name), out, name)
    return "".join(out)


def load_chart(chart_dir=CHART):
    with open(os.path.join(chart_dir, "Chart.yaml")) as f:
        chart = yaml.safe_load(f)
    with open(os.path.join(chart_dir, "values.yaml")) as f:
        values = yaml.safe_load(f) or {}
    return chart, values


def _split_docs(text):
    return [d for d in re.split(r"(?m)^---[ \t]*$", text) if d.strip()]


def render(overrides=None, release=RELEASE, namespace=NAMESPACE, chart_dir=CHART, notes=False):
    """Renders the chart. Returns a list of (source, text, parsed) per document, ordered like
    `helm template`; with notes=True, returns the rendered NOTES.txt instead."""
    chart, values = load_chart(chart_dir)
    ctx = Context(merge_values(values, overrides), chart, release, namespace)
    tdir = os.path.join(chart_dir, "templates")
    if notes:
        with open(os.path.join(tdir, "NOTES.txt")) as f:
            return render_text(f.read(), ctx, "NOTES.txt")
    docs = []
    for fname in sorted(os.listdir(tdir)):
        if fname.startswith("_") or not fname.endswith((".yaml", ".yml")):
            continue
        with open(os.path.join(tdir, fname)) as f:
            text = render_text(f.read(), ctx, fname)
        for d in _split_docs(text):
            parsed = yaml.safe_load(d)
            if parsed is None:  # comments only
                continue
            docs.append((f"{chart['name']}/templates/{fname}", d.strip("\n") + "\n", parsed))

    def order(i_doc):
        i, (_, _, parsed) = i_doc
        kind = parsed.get("kind", "")
        return (0, INSTALL_ORDER.index(kind), "", i) if kind in INSTALL_ORDER else (1, 0, kind, i)

    return [d for _, d in sorted(enumerate(docs), key=order)]


def manifests_text(docs):
    """The plain manifests: the Namespace, then the chart's documents as `helm template` prints them."""
    out = ["# gpuslice plain manifests: the Helm chart deploy/helm/gpuslice rendered with its default values\n"
           f"# (release {RELEASE}, namespace {NAMESPACE}), after the Namespace it needs. Do not edit: regenerate\n"
           "# with `helm template gpuslice deploy/helm/gpuslice -n gpuslice-system` (plus the Namespace) or\n"
           "# `/usr/bin/python3 tests/deploy/helmlite.py --manifests`; tests/deploy checks that they are equal.\n"
           "# Install: kubectl apply -f deploy/manifests/gpuslice.yaml (docs/deploy.md).\n",
           "---\n# Pod Security admission must allow hostPID, hostPath volumes and privileged pods here.\n",
           NAMESPACE_DOC]
    for source, text, _ in docs:
        out.append(f"---\n# Source: {source}\n{text}")
    # Helm leaves the white space of `indent` at line ends; YAML ignores it, the file does without.
    return "".join(line.rstrip() + "\n" for line in "".join(out).splitlines())


def main(argv):
    if argv[1:] == ["--manifests"]:
        sys.stdout.write(manifests_text(render()))
        return 0
    if argv[1:] == ["--notes"]:
        sys.stdout.write(render(notes=True))
        return 0
    sys.stderr.write("usage: helmlite.py --manifests | --notes\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
