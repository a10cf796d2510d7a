"""Checks Kubernetes objects against the API types of Debian's python3-kubernetes (the official
client, whose models are generated from the Kubernetes OpenAPI spec; Debian 12 ships 22.6.0, the
Kubernetes 1.22 API).

validate(obj) returns a list of errors, empty when the object is valid:
  * every key is a field of its type (a misspelt or misplaced key is an error, where kubectl
    apply would only warn or drop it);
  * every value has its field's type: string, integer, boolean, list, map or nested object
    (so `"true"` versus `true` in a nodeSelector or an env value is caught);
  * required fields are present (the models' own client-side validation, run by deserializing).
Enum values (e.g. hostPath type) are not in these models; the tests check the ones they use.
Custom resources (ServiceMonitor) have no model: the caller checks them by hand.
"""
import re

from kubernetes import client
from kubernetes.client import models

# apiVersion of each kind the chart and the examples use.
API_VERSIONS = {
    "Namespace": "v1", "ServiceAccount": "v1", "ConfigMap": "v1", "Secret": "v1", "Service": "v1", "Pod": "v1",
    "DaemonSet": "apps/v1", "Deployment": "apps/v1", "NetworkPolicy": "networking.k8s.io/v1",
    "ClusterRole": "rbac.authorization.k8s.io/v1", "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
}

_PRIMITIVES = {"str": str, "int": int, "bool": bool, "float": (int, float), "datetime": str, "date": str,
               "quantity": (str, int, float)}

# resource.Quantity fields, typed str in the Python models but a number or a string in the API
# (`nvidia.com/gpu: 1`).
_QUANTITIES = {("V1ResourceRequirements", "limits"): "dict(str, quantity)",
               ("V1ResourceRequirements", "requests"): "dict(str, quantity)",
               ("V1EmptyDirVolumeSource", "size_limit"): "quantity"}


def model_name(obj):
    kind = obj.get("kind")
    version = obj.get("apiVersion", "")
    if kind not in API_VERSIONS:
        return None
    return "V1" + kind if version == API_VERSIONS[kind] else None


def _check(value, typ, path, errors):
    if value is None:
        return
    if typ == "object":
        return
    if typ in _PRIMITIVES:
        want = _PRIMITIVES[typ]
        ok = isinstance(value, want) and not (typ != "bool" and isinstance(value, bool))
        if not ok:
            errors.append(f"{path}: expected {typ}, got {type(value).__name__} {value!r}")
        return
    m = re.fullmatch(r"list\[(.*)\]|dict\(str, (.*)\)", typ)
    if m:  # list[T] or dict(str, T)
        is_list = m.group(1) is not None
        if not isinstance(value, list if is_list else dict):
            errors.append(f"{path}: expected a {'list' if is_list else 'map'}, got {type(value).__name__}")
            return
        for k, v in enumerate(value) if is_list else value.items():
            if not is_list and not isinstance(k, str):
                errors.append(f"{path}: key {k!r} is not a string")
            _check(v, m.group(1) or m.group(2), f"{path}[{k}]" if is_list else f"{path}.{k}", errors)
        return
    klass = getattr(models, typ, None)
    if klass is None:
        errors.append(f"{path}: unknown type {typ}")
        return
    if not isinstance(value, dict):
        errors.append(f"{path}: expected an object ({typ}), got {type(value).__name__}")
        return
    by_json = {j: attr for attr, j in klass.attribute_map.items()}
    for k, v in value.items():
        if k not in by_json:
            errors.append(f"{path}: unknown field {k!r} in {typ} (fields: {', '.join(sorted(by_json))})")
            continue
        attr = by_json[k]
        _check(v, _QUANTITIES.get((typ, attr), klass.openapi_types[attr]), f"{path}.{k}", errors)


def validate(obj):
    name = model_name(obj)
    if name is None:
        return [f"{obj.get('apiVersion')}/{obj.get('kind')}: not a kind/apiVersion these tests know"]
    errors = []
    _check(obj, name, obj["kind"], errors)
    if not errors:
        try:  # required fields: the models raise ValueError on a missing one
            client.ApiClient()._ApiClient__deserialize(obj, name)
        except (ValueError, TypeError) as e:
            errors.append(f"{obj['kind']}: {e}")
    return errors
