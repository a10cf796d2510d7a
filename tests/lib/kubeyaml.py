"""kubeyaml.py: the ConfigMap in YAML that the tests of `gpuslice kube -f FILE.yaml` send
(tests/kube/test_kube_emulator.py, tests/e2e/test_kube_client.py), with the JSON it must become:
quoted numbers and words stay strings, a block scalar keeps its lines, false is a boolean."""

# data.mode is on line 7, column 9 of the text (for the tests of a bad value there)
MODE_LINE, MODE_COLUMN = 7, 9


def configmap_yaml(name, labels):
    """The ConfigMap's YAML; labels: the text of a flow mapping, e.g. '{app: web, tier: "1"}'."""
    return f"""apiVersion: v1
kind: ConfigMap
metadata:
  name: {name}
  labels: {labels}
data:
  mode: "0755"
  enabled: "true"
  text: |
    two
    lines
immutable: false
"""


def configmap_json(name, labels, namespace):
    """What configmap_yaml(name, ...) is as JSON, labels as a dict, in namespace."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "data": {"mode": "0755", "enabled": "true", "text": "two\nlines\n"}, "immutable": False}
