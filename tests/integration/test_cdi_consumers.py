"""Every CDI spec gpuslice writes, loaded by the CDI reference library (the parser inside
containerd, CRI-O and podman) at v0.5.4 (containerd 1.7.0, podman 4.2/4.3, CRI-O on CDI 0.5.x) and
at its current release: no errors, the devices listed, and injecting them gives exactly the spec's
device nodes, mounts, environment and hooks. tests/cdi/build.sh builds the library's loader
(tests/cdi/validate) with go, cached by version; without go these tests fail.

Environment (set by meson): GPUSLICE, GPUSLICE_SIM_LIB, GS_SOURCE_ROOT."""
import json
import os
import subprocess

import pytest

from agent_harness import T4X2, h  # noqa: F401 (h: the fixture)
from test_agent import _cdi_policy, _proc_root, _spec
from test_cdi import fake_driver_root, inspect, run, sim

ROOT = os.environ.get("GS_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VERSIONS = ["v0.5.4", "v1.1.2"]


@pytest.fixture(scope="module", params=VERSIONS)
def cdi_lib(request):
    p = subprocess.run([os.path.join(ROOT, "tests", "cdi", "build.sh"), request.param], capture_output=True,
                       text=True, timeout=900)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip().splitlines()[-1]


def load(lib, spec_dir, *inject):
    args = [lib, "-dir", spec_dir] + (["-inject", ",".join(inject)] if inject else [])
    p = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def expect(spec, name):
    """What injecting device `name` of `spec` must give: the device's and the spec's edits."""
    dev = next(d for d in spec["devices"] if d["name"] == name)
    edits = [dev["containerEdits"], spec.get("containerEdits", {})]
    nodes = sorted((n["path"], n["major"], n["minor"]) for e in edits for n in e.get("deviceNodes", []))
    mounts = sorted((m["hostPath"], m["containerPath"]) for e in edits for m in e.get("mounts", []))
    env = sorted(v for e in edits for v in e.get("env", []))
    hooks = sorted(x["path"] for e in edits for x in e.get("hooks", []))
    return nodes, mounts, env, hooks


def got(res):
    assert not res["injectError"] and not res["unresolved"], res
    hooks = (res["hooks"] or {}).get("createContainer") or []
    return (sorted((d["path"], d["major"], d["minor"]) for d in res["deviceNodes"] or []),
            sorted((m["source"], m["destination"]) for m in res["mounts"] or []),
            sorted(res["env"] or []), sorted(x["path"] for x in hooks))


def check_dir(lib, spec_dir, spec):
    res = load(lib, spec_dir)
    assert res["errors"] == {}, res["errors"]
    assert res["devices"] == sorted(f"{spec['kind']}={d['name']}" for d in spec["devices"])
    for d in spec["devices"]:
        assert got(load(lib, spec_dir, f"{spec['kind']}={d['name']}")) == expect(spec, d["name"]), d["name"]


def save(tmp, name, text):
    d = os.path.join(tmp, "specs-" + name)
    os.makedirs(d)
    with open(os.path.join(d, name + ".json"), "w") as f:
        f.write(text)
    return d


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the fake driver root uses the x86_64 library directory")
def test_node_spec_with_driver_files_and_hook(cdi_lib, tmp_path):
    tmp = str(tmp_path)
    root = fake_driver_root(tmp, video=True)
    p = run(tmp, "t4x2.yaml", "cdi", "generate", "--driver-root", root)
    assert p.returncode == 0, p.stderr
    spec = json.loads(p.stdout)
    assert spec["containerEdits"]["hooks"] and spec["containerEdits"]["mounts"]
    check_dir(cdi_lib, save(tmp, "gpuslice", p.stdout), spec)


@pytest.mark.parametrize("kind", ["gpuslice.io/gpu", "nvidia.com/gpu"])
def test_node_spec_with_mig_devices(cdi_lib, tmp_path, kind):
    tmp = str(tmp_path)
    node = "a100-mixed.yaml"
    sim(tmp, node, "mig-create", "--gpu", "0", "--profile", "3g.20gb", "--start", "4")
    g0 = inspect(tmp, node)["gpus"][0]
    minors = "".join(f"gpu{g0['minor']}/gi{m['gi_id']}/access {10 + 2 * k}\n"
                     f"gpu{g0['minor']}/gi{m['gi_id']}/ci{m['ci_id']}/access {11 + 2 * k}\n"
                     for k, m in enumerate(g0["mig"]["devices"]))
    p = run(tmp, node, "cdi", "generate", "--kind", kind, minors="config 1\nmonitor 2\n" + minors)
    assert p.returncode == 0, p.stderr
    spec = json.loads(p.stdout)
    assert any(d["name"].startswith("MIG-") for d in spec["devices"])
    check_dir(cdi_lib, save(tmp, "gpuslice", p.stdout), spec)


def test_agent_node_and_guard_specs(cdi_lib, h):  # noqa: F811 (h: the fixture)
    """The specs the agent writes during Allocate: the node's and the per-allocation guard spec."""
    node = h.node(T4X2)
    u = node.uuids()
    policy = _cdi_policy(["cdi-cri"]) + "      memoryPerReplica: 4GiB\n"
    a = h.agent(node, policy, resources=["nvidia.com/gpu"],
                extra=["--proc-root", _proc_root(h), "--guard-root", os.path.join(h.base, "guard")])
    r = h.kubelet.allocate("nvidia.com/gpu", [f"{u[0]}::1"])
    names = [d.name for d in r.cdi_devices]
    assert len(names) == 2 and names[1].startswith("gpuslice.io/gpu=alloc-")
    res = load(cdi_lib, a.cdi_root, *names)
    assert res["errors"] == {}, res["errors"]
    spec = _spec(a)
    assert set(res["devices"]) >= {f"gpuslice.io/gpu={d['name']}" for d in spec["devices"]} | {names[1]}
    with open(os.path.join(a.cdi_root, f"gpuslice.io-gpu_{names[1].split('=', 1)[1]}.json")) as f:
        alloc = json.load(f)
    assert alloc["cdiVersion"] == "0.3.0"           # a name starting with a letter, nothing newer
    want = [sorted(x + y) for x, y in zip(expect(spec, u[0]), expect(alloc, alloc["devices"][0]["name"]))]
    assert list(got(res)) == want
