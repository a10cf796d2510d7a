"""Every CDI spec gpuslice writes, loaded by the CDI reference library (the parser inside
containerd, CRI-O and podman) at v0.5.4 (containerd 1.7.0, podman 4.2/4.3, CRI-O on CDI 0.5.x) and
at its current release: no errors, the devices listed, and injecting them gives exactly the spec's
device nodes, mounts, environment and hooks. tests/cdi/build.sh builds the library's loader
(tests/cdi/validate) with go, cached by version; without go these tests fail. The specs: the node's
(`cdi generate` and the agent's, with the hook the agent's --cdi-hook names), and the agent's
per-allocation specs for the guard and for MPS replicas.

Environment (set by meson): GPUSLICE, GPUSLICE_SIM_LIB, GS_SOURCE_ROOT, FAKE_MPS_CONTROL."""
import json
import os
import subprocess

import pytest

from agent_harness import GPUSLICE, T4X2, h  # noqa: F401 (h: the fixture)
from test_agent import _cdi_policy, _proc_root, _spec
from test_agent_mps import cdi_mps_allocation
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
    alloc, res = check_allocation(cdi_lib, a, names, u[0])
    assert alloc["cdiVersion"] == "0.3.0"           # a name starting with a letter, nothing newer
    nodes, mounts, env, hooks = got(res)
    assert "GPUSLICE_GUARD_CONFIG=/etc/gpuslice/guard.conf" in env
    assert {"/etc/gpuslice/guard.conf", "/etc/ld.so.preload"} <= {dst for _, dst in mounts}


def check_allocation(lib, agent, names, uuid):
    """Loads the agent's CDI directory (the node's spec and the per-allocation spec names[1]) and
    injects the allocation's names: exactly the node device's edits, the node spec's and the
    allocation spec's. Returns the allocation spec and what was injected."""
    res = load(lib, agent.cdi_root, *names)
    assert res["errors"] == {}, res["errors"]
    spec = _spec(agent)
    assert names[0] == f"gpuslice.io/gpu={uuid}"
    assert set(res["devices"]) >= {f"gpuslice.io/gpu={d['name']}" for d in spec["devices"]} | {names[1]}
    with open(os.path.join(agent.cdi_root, f"gpuslice.io-gpu_{names[1].split('=', 1)[1]}.json")) as f:
        alloc = json.load(f)
    assert [d["name"] for d in alloc["devices"]] == [names[1].split("=", 1)[1]]
    want = [sorted(x + y) for x, y in zip(expect(spec, uuid), expect(alloc, alloc["devices"][0]["name"]))]
    assert list(got(res)) == want
    return alloc, res


def test_agent_mps_spec(cdi_lib, h):  # noqa: F811 (h: the fixture)
    """The per-allocation spec the agent writes for an MPS replica (its daemon's pipe directory,
    the shared memory directory, the replica's thread percentage): loaded and injected beside the
    node's device."""
    a, u, root, r = cdi_mps_allocation(h)
    assert not r.mounts and not r.envs
    names = [d.name for d in r.cdi_devices]
    assert len(names) == 2 and names[1].startswith("gpuslice.io/gpu=alloc-")
    alloc, res = check_allocation(cdi_lib, a, names, u[1])
    assert alloc["cdiVersion"] == "0.3.0"
    nodes, mounts, env, hooks = got(res)
    assert ("/dev/nvidia1", 195, 1) in nodes and ("/dev/nvidia0", 195, 0) not in nodes
    assert {"CUDA_MPS_PIPE_DIRECTORY=/mps/pipe", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25",
            "NVIDIA_VISIBLE_DEVICES=void"} <= set(env)
    assert (os.path.join(root, u[1], "pipe"), "/mps/pipe") in mounts
    assert (os.path.join(root, "shm"), "/dev/shm") in mounts
    assert not any(src.startswith(os.path.join(root, u[0])) for src, _ in mounts), "GPU 0's daemon is not mounted"


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the fake driver root uses the x86_64 library directory")
def test_agent_cdi_hook_option(cdi_lib, h):  # noqa: F811 (h: the fixture)
    """`agent --cdi-hook PATH`: the node spec the agent writes names the hook there (where the chart
    installs it on the host), and injecting a device gives the runtime exactly that hook."""
    node = h.node(T4X2)
    u = node.uuids()
    root = fake_driver_root(h.base)
    policy = f"version: v1\nflags:\n  nvidiaDriverRoot: {root}\n  plugin:\n    deviceListStrategy: cdi-cri\n"
    hook = "/var/lib/gpuslice-test/bin/gpuslice-cdi-hook"
    a = h.agent(node, policy, resources=["nvidia.com/gpu"], extra=["--proc-root", _proc_root(h), "--cdi-hook", hook])
    spec = _spec(a)
    assert [x["path"] for x in spec["containerEdits"]["hooks"]] == [hook]
    res = load(cdi_lib, a.cdi_root, f"gpuslice.io/gpu={u[0]}")
    assert got(res) == expect(spec, u[0]) and got(res)[3] == [hook]
    assert a.stop() == 0
    b = h.agent(node, policy, extra=["--proc-root", _proc_root(h), "--cdi-hook", ""])
    b.wait_log(r"CDI spec written to ")  # the emulator already lists the first agent's resource
    spec = _spec(b)
    assert "hooks" not in spec["containerEdits"] and spec["containerEdits"]["mounts"]
    assert got(load(cdi_lib, b.cdi_root, f"gpuslice.io/gpu={u[0]}"))[3] == []


def test_agent_cdi_hook_must_be_absolute(h):  # noqa: F811 (h: the fixture)
    node = h.node(T4X2)
    p = subprocess.run([GPUSLICE, "--sim", node.path, "--sim-state", node.state, "agent", "--cdi-hook",
                        "bin/gpuslice-cdi-hook"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "--cdi-hook: 'bin/gpuslice-cdi-hook' is not an absolute path" in p.stderr
