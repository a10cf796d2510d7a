"""gpuslice plan's requests and its time: each pod's fractional requests and DRA ResourceClaimTemplates
under --out, read as YAML and checked for every pod against the JSON's assignments (check_plan.py
--out), the policy fragment read by gpuslice's own policy loader (`gpuslice apply`, `gpuslice dra
slices` on a simulated node), the templates read by gpuslice's YAML reader (`gpuslice kube create -f`
against a loopback API server emulator), the compute split, and the tolerance and the risk report in
minutes on grids whose step is not a minute."""
import json
import os
import subprocess
import sys
import tempfile

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "kube"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
from emulator import Emulator, make_pki  # noqa: E402
from test_kube_emulator import Posts  # noqa: E402  (the emulator taking POSTs, each body kept)
from kubeconfig import write_kubeconfig  # noqa: E402
from test_plan import CHECK, GPUSLICE, H100, H200, checked, mig_input, plan, prom, prom_plan, small, trace  # noqa: E402,F401
from test_plan import PromHandler  # noqa: E402

GIB = 2**30


def sim_node(tmp_path, model):
    node = tmp_path / "node.yaml"
    node.write_text(f"gpus:\n  - model: {model}\n    count: 2\n")
    state = tmp_path / f"sim-{len(os.listdir(tmp_path))}"
    state.mkdir()
    return ["--sim", str(node), "--sim-state", str(state)]


@pytest.mark.parametrize("gpu,model,gpu_bytes,tolerance,requests,target", [
    ("H200", "H200-SXM-141GB", H200, 0, "fractional", 56),
    ("H100", "H100-SXM5-80GB", H100, 1, "fractional", 66),
    ("H200", "H200-SXM-141GB", H200, 1, "dra", 46),
    ("H100", "H100-SXM5-80GB", H100, 0, "dra", None),
])
def test_trace_requests(trace, tmp_path, gpu, model, gpu_bytes, tolerance, requests, target):
    """Every pod's requests file checked against its assignment (check_plan.py --out); on each GPU the
    memory requests within the units the agent advertises for it, which gpuslice's own policy loader
    reports for the plan's policy fragment on a simulated node of the model."""
    mem, duty = trace
    doc = checked(tmp_path, mem, duty, gpu_bytes, tolerance, "--gpu", gpu, "--missing", "skip", "--requests", requests)
    if target is not None:
        assert doc["gpus"] <= target
    out = doc["out"]
    assert doc["requests"] == requests
    assert len(os.listdir(out / "requests")) == doc["pods"] == 143
    sim = sim_node(tmp_path, model)
    if requests == "fractional":
        assert doc["files"] == {"policy": ["policy.yaml"], "requests": "requests/", "claim_templates": None}
        p = subprocess.run([GPUSLICE, *sim, "apply", "--config", str(out / "policy.yaml"), "--json"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        a = json.loads(p.stdout)
        assert {g["mode"] for g in a["gpus"]} == {"fractional"}
        res = {r["name"]: r for r in a["resources"]}
        per_gpu = [d for d in res["gpuslice.io/gpu-memory"]["devices"] if d["gpu"] == 0]
        assert len(per_gpu) == doc["memory_units_per_gpu"]
        assert len([d for d in res["gpuslice.io/gpu-compute"]["devices"] if d["gpu"] == 0]) == 100
        # the requests of a GPU add up to what one GPU advertises
        assert max(g["memory_gib_units"] for g in doc["gpu_list"]) <= len(per_gpu)
        assert max(g["compute_units"] for g in doc["gpu_list"]) <= 100
        a0 = doc["assignments"][0]
        assert a0["requests"] == {"gpuslice.io/gpu-memory": a0["memory_gib"],
                                  "gpuslice.io/gpu-compute": a0["compute_percent"]}
    else:
        assert doc["files"]["claim_templates"] == "claim-templates/"
        policy = yaml.safe_load((out / "policy.yaml").read_text())
        assert policy["gpuslice"]["dra"] == {"gpus": "all"}
        p = subprocess.run([GPUSLICE, *sim, "dra", "slices", "--config", str(out / "policy.yaml"), "--node", "n1"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        devs = [d for s in json.loads(p.stdout)["items"] for d in s["spec"].get("devices", [])]
        assert len(devs) == 2
        for d in devs:
            assert d["attributes"]["sharing"] == {"string": "time-slicing"} and d["allowMultipleAllocations"]
            cap = d["capacity"]
            assert cap["compute"]["value"] == "100"
            assert cap["memory"]["requestPolicy"]["validRange"]["max"] == f"{doc['memory_units_per_gpu']}Gi"
            # every template's claim fits the device, and its model is the one the claims select
            assert doc["memory_units_per_gpu"] * GIB <= int(cap["memory"]["value"][:-2]) * 2**20
        # the claims select the model of the plan, by the name the slices publish
        names = {d["attributes"]["productName"]["string"] for d in devs}
        assert len(names) == 1
        for f in (out / "claim-templates").iterdir():
            t = yaml.safe_load(f.read_text())
            sel = t["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]["expression"]
            assert sel == f'device.attributes["gpu.gpuslice.io"].productName.startsWith("{names.pop()}")'
            names.add(devs[0]["attributes"]["productName"]["string"])
        shapes = {(a["requests"]["memory"], a["requests"]["compute"]) for a in doc["assignments"]}
        assert len(os.listdir(out / "claim-templates")) == len(shapes)


def test_templates_read_by_gpuslice_kube(tmp_path):
    """The templates as gpuslice's own YAML reader types them (kubectl's typing) are what Python's YAML
    reads: `gpuslice kube create -f` posts each one, as JSON, to the resource.k8s.io/v1 path."""
    mem, duty = small(tmp_path, GOOD_MEM, GOOD_DUTY_COLLIDE)
    out = tmp_path / "out"
    plan(mem, duty, "--gpu", "H100", "--requests", "dra", "--out", str(out))
    pki = tempfile.mkdtemp(prefix="gs-plan-pki.")
    make_pki(pki)
    e = Emulator(pki, Posts)
    e.httpd.posted = []
    try:
        kc = write_kubeconfig(str(tmp_path / "kubeconfig"), f"https://127.0.0.1:{e.port}", os.path.join(pki, "ca.crt"),
                              "{token: t}", "t", cluster="emu", user_name="u", context="emu")
        files = sorted((out / "claim-templates").iterdir())
        assert files
        for f in files:
            p = subprocess.run([GPUSLICE, "kube", "--kubeconfig", kc, "create", "-f", str(f), "-o", "name"],
                               capture_output=True, text=True, timeout=30)
            assert p.returncode == 0, p.stderr
            assert p.stdout == f.stem + "\n"
            posted = e.httpd.posted[-1]
            assert posted["metadata"].pop("namespace") == "t"  # the kubeconfig's, added by the client
            assert posted == yaml.safe_load(f.read_text())
        assert e.httpd.requests == ["/apis/resource.k8s.io/v1/namespaces/t/resourceclaimtemplates"] * len(files)
    finally:
        e.close()


def test_mig_pods_under_dra(tmp_path):
    """MIG pods under DRA: a template per profile on the MIG class, checked like the shared ones."""
    mem, duty = mig_input(tmp_path)
    out = tmp_path / "out"
    doc = json.loads(plan(mem, duty, "--json", "--gpu", "H100", "--mode", "mig", "--requests", "dra",
                          "--out", str(out)).stdout)
    assert doc["files"]["policy"] == ["mig-layouts.yaml", "policy-node-0.yaml"]
    assert os.listdir(out / "claim-templates") == ["gpuslice-plan-mig-1g.10gb.yaml"]
    assert {a["requests"]["claim_template"] for a in doc["assignments"]} == {"gpuslice-plan-mig-1g.10gb"}
    policy = yaml.safe_load((out / "policy-node-0.yaml").read_text())
    assert policy["gpuslice"]["dra"] == {"gpus": "all"} and policy["gpuslice"]["gpus"][0] == {"index": "0", "mode": "mig"}
    c = subprocess.run([sys.executable, CHECK, str(out / "plan.json"), mem, duty, "--gpu-bytes", str(H100),
                        "--out", str(out), "--requests", "dra"], capture_output=True, text=True, timeout=60)
    assert c.returncode == 0, c.stdout


def test_prometheus_step_is_the_grids(prom):
    """A Prometheus step of 30 s: the grid's step, and --tolerance 1m is 2 steps of it."""
    PromHandler.mode = "ok"
    p = prom_plan(prom, "--json", "--step", "30s", "--tolerance", "1m")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["grid"]["step_s"] == 30 and doc["tolerated_steps"] == 2 and doc["tolerated_minutes"] == 1.0


# two pods at 60 % in different steps: they share one GPU, and its 100 compute units split 60 / 40
GOOD_MEM = ["0,1000,a", "60,1000,a", "120,1000,a", "0,2000,b", "60,2000,b", "120,2000,b"]
GOOD_DUTY_COLLIDE = ["60,0,a", "0,60,a", "0,120,a", "0,0,b", "60,60,b", "0,120,b"]


def test_compute_split(tmp_path):
    mem, duty = small(tmp_path, GOOD_MEM, GOOD_DUTY_COLLIDE)
    out = tmp_path / "out"
    doc = json.loads(plan(mem, duty, "--json", "--gpu", "L4", "--out", str(out)).stdout)
    assert doc["gpus"] == 1
    # 60 + 40: one pod's minute at 60 % over its share; 50 + 50 would cap both
    by_pod = {a["pod"]: a for a in doc["assignments"]}
    assert sorted(a["compute_percent"] for a in by_pod.values()) == [40, 60]
    assert sum(a["compute_capped_minutes"] for a in by_pod.values()) == 1.0
    assert doc["gpu_list"][0]["compute_units"] == 100
    for pod, a in by_pod.items():
        lim = yaml.safe_load((out / "requests" / f"{pod}.yaml").read_text())["resources"]["limits"]
        assert lim == {"gpuslice.io/gpu-memory": 1, "gpuslice.io/gpu-compute": a["compute_percent"]}
    # a budget of 70 % splits 70 units: 60 and 10
    doc = json.loads(plan(mem, duty, "--json", "--gpu", "L4", "--budget", "70").stdout)
    assert doc["gpus"] == 1 and sorted(a["compute_percent"] for a in doc["assignments"]) == [10, 60]
    # a pod alone on its GPU gets all of it
    alone = small(tmp_path, GOOD_MEM[:3], GOOD_DUTY_COLLIDE[:3])
    doc = json.loads(plan(*alone, "--json", "--gpu", "L4").stdout)
    assert [a["compute_percent"] for a in doc["assignments"]] == [100]
    assert doc["assignments"][0]["compute_capped_minutes"] == 0
    # memory only: no gpu-compute, compute_percent null
    out = tmp_path / "none"
    doc = json.loads(plan(mem, duty, "--json", "--gpu", "L4", "--compute", "none", "--out", str(out)).stdout)
    assert {a["compute_percent"] for a in doc["assignments"]} == {None}
    assert yaml.safe_load((out / "requests" / "a.yaml").read_text()) == {"resources": {"limits": {"gpuslice.io/gpu-memory": 1}}}
    p = plan(mem, duty, "--gpu", "L4", "--compute", "none", "--requests", "dra", check=False)
    assert p.returncode == 2 and "--compute none needs --requests fractional" in p.stderr


def test_pods_per_gpu_within_its_compute_units(tmp_path):
    """A pod asks at least 1 % of compute: with a budget of 2 %, 3 idle pods need 2 GPUs."""
    mem = [f"0,1,{p}" for p in "abc"] + [f"60,1,{p}" for p in "abc"]
    duty = [f"0,0,{p}" for p in "abc"] + [f"0,60,{p}" for p in "abc"]
    m, d = small(tmp_path, mem, duty)
    doc = json.loads(plan(m, d, "--json", "--gpu", "L4", "--budget", "2").stdout)
    assert doc["gpus"] == 2 and doc["lower_bound"]["pods"] == 2
    assert json.loads(plan(m, d, "--json", "--gpu", "L4", "--budget", "2", "--compute", "none").stdout)["gpus"] == 1


def grid_input(tmp_path, step, steps, collide):
    """Two pods on a grid of `step` seconds: 60 % each at different steps, and on `collide` steps both."""
    mem, duty = ["timestamp_anon,value,container_ip"], ["value,timestamp_anon,container_ip"]
    for k in range(steps):
        t = 1000 + k * step
        for pod, busy in (("a", k % 2 == 0 or k < collide), ("b", k % 2 == 1 or k < collide)):
            mem.append(f"{t},{GIB},{pod}")
            duty.append(f"{60 if busy else 10},{t},{pod}")
    mp, dp = tmp_path / f"m{step}.csv", tmp_path / f"d{step}.csv"
    mp.write_text("\n".join(mem) + "\n")
    dp.write_text("\n".join(duty) + "\n")
    return str(mp), str(dp)


def check_minutes(tmp_path, mem, duty, args, checker_args):
    out = tmp_path / f"out-{len(os.listdir(tmp_path))}"
    doc = json.loads(plan(mem, duty, "--json", "--gpu", "L4", "--out", str(out), *args).stdout)
    c = subprocess.run([sys.executable, CHECK, str(out / "plan.json"), mem, duty, "--gpu-bytes",
                        str(doc["gpu_memory_bytes"]),
                        *checker_args, "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert c.returncode == 0, c.stdout
    return doc, (out / "plan.txt").read_text()


@pytest.mark.parametrize("step", [30, 120])
def test_tolerance_and_risk_in_minutes(tmp_path, step):
    """6 steps of both pods at 60 %: 3 minutes on a 30 s grid, 12 on a 120 s one. --tolerance 3m lets
    them share a GPU on the first only (a count of steps would refuse the first and allow 3 steps of
    the second); a share of the window is minutes too, and the risk report says minutes."""
    mem, duty = grid_input(tmp_path, step, 60, 6)
    doc, text = check_minutes(tmp_path, mem, duty, ["--tolerance", "3m"], ["--tolerance-seconds", "180"])
    assert doc["grid"]["step_s"] == step and doc["grid"]["steps"] == 60
    assert doc["tolerated_steps"] == 180 // step and doc["tolerated_minutes"] == (180 // step) * step / 60
    if step == 30:
        assert doc["gpus"] == 1
        g = doc["gpu_list"][0]
        assert g["steps_over_budget"] == 6 and g["minutes_over_budget"] == 3.0
        assert [o["minutes"] for o in g["over_budget"]] == [0.5] * 6
        assert {p["pod"] for p in g["over_budget"][0]["pods"]} == {"a", "b"}
        assert "over it tolerated 3.0 minutes: 6 whole steps of 30 s (3.0 minutes) a GPU" in text
        assert "GPU 0: 3.0 minutes over 100 % (6 steps)" in text
        assert "  at 1000, 3.0 minutes, up to 120.00 %: a 60.00 % b 60.00 %" in text
        assert "over the budget: 3.0 minutes on 1 GPUs" in text
    else:
        assert doc["gpus"] == 2 and doc["tolerated_steps"] == 1
        assert "risk report" not in text
    # 10 % of the window: 3 minutes of 30 (30 s grid), 12 of 120 (120 s grid): one GPU on both
    doc, text = check_minutes(tmp_path, mem, duty, ["--tolerance", "10"], ["--tolerance", "10"])
    assert doc["gpus"] == 1 and doc["tolerated_steps"] == 6
    assert doc["tolerated_minutes"] == pytest.approx(step / 10)
    assert doc["gpu_list"][0]["minutes_over_budget"] == pytest.approx(6 * step / 60)


@pytest.mark.parametrize("arg,error", [
    ("3x", "--tolerance: '3x' is not a percent"),
    ("m", "--tolerance: 'm' is not a percent"),
    ("0m", "--tolerance: '0m' is not a duration"),
    ("-5m", "--tolerance: '-5m' is not a duration"),
])
def test_tolerance_errors(tmp_path, arg, error):
    mem, duty = small(tmp_path, GOOD_MEM, GOOD_DUTY_COLLIDE)
    p = plan(mem, duty, "--gpu", "L4", "--tolerance", arg, check=False)
    assert p.returncode == 2 and error in p.stderr, p.stderr


def test_checker_catches_bad_requests(tmp_path):
    """check_plan.py --out fails a request below the quota, a GPU's compute over the budget, a missing
    limit, minutes that are not the steps' time."""
    mem, duty = small(tmp_path, GOOD_MEM, GOOD_DUTY_COLLIDE)
    out = tmp_path / "out"
    plan(mem, duty, "--json", "--gpu", "L4", "--out", str(out))

    def check(*args):
        return subprocess.run([sys.executable, CHECK, str(out / "plan.json"), mem, duty, "--gpu-bytes", "3000",
                               "--out", str(out), "--memory-units", "22", *args],
                              capture_output=True, text=True, timeout=60)

    assert check().returncode == 0
    a = out / "requests" / "a.yaml"
    good = a.read_text()
    a.write_text(good.replace("gpuslice.io/gpu-compute: 60", "gpuslice.io/gpu-compute: 61")
                 .replace("gpuslice.io/gpu-compute: 40", "gpuslice.io/gpu-compute: 61"))
    c = check()
    assert c.returncode == 1 and "GPU 0: compute requests of" in c.stdout and "over the budget" in c.stdout, c.stdout
    a.write_text("resources:\n  limits:\n    gpuslice.io/gpu-memory: 1\n")
    c = check()
    assert c.returncode == 1 and "not the limits" in c.stdout
    a.write_text(good)
    assert check("--memory-units", "1").returncode == 1
    doc = json.loads((out / "plan.json").read_text())
    doc["gpu_list"][0]["minutes_over_budget"] = 7
    (out / "plan.json").write_text(json.dumps(doc))
    c = check("--tolerance", "50")
    assert c.returncode == 1 and "minutes_over_budget 7" in c.stdout
