"""kubeconfig.py: the kubeconfig files the Python tests hand to `gpuslice kube` (tests/kube's
emulator, tests/e2e's API server): one cluster, one user, one context with a namespace. Imported
with tests/lib on sys.path (tests/kube/test_kube_emulator.py, tests/e2e/test_kube_client.py,
tests/integration/test_doctor_api.py)."""


def kubeconfig_text(server, ca, user, namespace, cluster="test", user_name="u", context="test"):
    """The kubeconfig's YAML: server (https://HOST:PORT), ca (the CA file's path), user (the user's
    fields in YAML flow style, e.g. "{token: T}" or "{tokenFile: F}"), namespace (the context's;
    None: a context without one)."""
    ns = "" if namespace is None else f", namespace: {namespace}"
    return f"""apiVersion: v1
kind: Config
clusters:
- name: {cluster}
  cluster: {{server: "{server}", certificate-authority: {ca}}}
users:
- name: {user_name}
  user: {user}
contexts:
- name: {context}
  context: {{cluster: {cluster}, user: {user_name}{ns}}}
current-context: {context}
"""


def write_kubeconfig(path, server, ca, user, namespace, **names):
    """Writes kubeconfig_text(...) to path; returns path as a str."""
    with open(path, "w") as f:
        f.write(kubeconfig_text(server, ca, user, namespace, **names))
    return str(path)
