"""gpuslice plan: the plans on Alibaba's GenAI trace meet their targets and pass the independent
checker (check_plan.py); variants of the trace are never planned worse than first-fit decreasing;
bad input is refused with a clear error and leaves no output."""
import json
import os
import random
import socket
import subprocess
import sys
import tarfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

GPUSLICE = os.environ["GPUSLICE"]
ROOT = os.environ["GS_SOURCE_ROOT"]
HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "check_plan.py")
H200 = 143771 * 1024 * 1024
H100 = 81559 * 1024 * 1024


def trace_dir():
    """The trace beside the checkout (../shared/traces), or under $GS_SHARED_DIR/traces."""
    for base in (os.environ.get("GS_SHARED_DIR"), os.path.join(ROOT, "..", "shared"), os.path.join(ROOT, "shared")):
        if base:
            d = os.path.join(base, "traces", "alibaba-genai-v2026")
            if os.path.isdir(d):
                return d
    raise AssertionError("the trace alibaba-genai-v2026 is not under ../shared/traces of the checkout "
                         "(nor $GS_SHARED_DIR/traces)")


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("trace")
    src = trace_dir()
    for name in ("pod_gpu_memory_used_bytes_anon", "pod_gpu_duty_cycle_anon"):
        with tarfile.open(os.path.join(src, name + ".tar.gz")) as t:
            member = t.getmember(name + ".csv")
            with open(d / (name + ".csv"), "wb") as out:
                out.write(t.extractfile(member).read())
    return str(d / "pod_gpu_memory_used_bytes_anon.csv"), str(d / "pod_gpu_duty_cycle_anon.csv")


def plan(mem, duty, *args, check=True):
    p = subprocess.run([GPUSLICE, "plan", "--memory-csv", mem, "--duty-csv", duty, *args],
                       capture_output=True, text=True, timeout=120)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def checked(tmp_path, mem, duty, gpu_bytes, tolerance, *args):
    p = plan(mem, duty, "--json", "--tolerance", str(tolerance), *args)
    doc = json.loads(p.stdout)
    path = tmp_path / "plan.json"
    path.write_text(p.stdout)
    c = subprocess.run([sys.executable, CHECK, str(path), mem, duty, "--gpu-bytes", str(gpu_bytes),
                        "--tolerance", str(tolerance), "--fill", doc["grid"]["fill"]],
                       capture_output=True, text=True, timeout=300)
    assert c.returncode == 0, c.stdout + c.stderr
    return doc


@pytest.mark.parametrize("gpu,gpu_bytes,tolerance,target,memory_bound", [
    ("H200", H200, 0, 56, 37),
    ("H200-141GB", H200, 1, 46, 37),
    ("H100-80GB", H100, 0, 69, 64),
    ("H100", H100, 1, 66, 64),
])
def test_trace_targets(trace, tmp_path, gpu, gpu_bytes, tolerance, target, memory_bound):
    mem, duty = trace
    # the search is deterministic; its wall-clock limit raised so that a loaded machine cannot cut it
    doc = checked(tmp_path, mem, duty, gpu_bytes, tolerance, "--gpu", gpu, "--missing", "skip", "--time-limit", "600")
    assert doc["gpus"] <= target and doc["search"]["complete"]
    assert doc["lower_bound"]["memory"] == memory_bound
    assert doc["gap"] == doc["gpus"] - doc["lower_bound"]["bound"]
    assert doc["pods"] == 143 and doc["skipped"] == ["ad921d60486366258809553a3db49a4a (no duty series)"]
    assert doc["grid"]["steps"] == 1441 and doc["grid"]["step_s"] == 57.0
    a = doc["assignments"][0]
    assert set(a) >= {"pod", "gpu", "memory_bytes", "compute_percent"}
    # the risk report: every over-budget step with the pods busy then
    for g in doc["gpu_list"]:
        assert len(g["over_budget"]) == g["steps_over_budget"] <= doc["tolerated_steps"]
        for o in g["over_budget"]:
            assert o["duty_percent"] > 100 and o["pods"]


def test_trace_fill_peak(trace, tmp_path):
    # steps without a sample counted at the pod's peak: a stricter plan, checked the same way
    mem, duty = trace
    last = checked(tmp_path, mem, duty, H200, 0, "--gpu", "H200", "--missing", "skip")
    peak = checked(tmp_path, mem, duty, H200, 0, "--gpu", "H200", "--missing", "skip", "--fill", "peak")
    assert peak["grid"]["fill"] == "peak" and last["grid"]["fill"] == "last"
    assert peak["lower_bound"]["duty"] > last["lower_bound"]["duty"]


def test_trace_missing_series_is_an_error(trace):
    mem, duty = trace
    p = plan(mem, duty, "--gpu", "H200", check=False)
    assert p.returncode == 1 and p.stdout == ""
    assert "pod ad921d60486366258809553a3db49a4a has a memory series but no duty series" in p.stderr


def test_table_and_out_dir(trace, tmp_path):
    mem, duty = trace
    out = tmp_path / "out"
    p = plan(mem, duty, "--gpu", "H100-80GB", "--missing", "skip", "--out", str(out))
    assert "lower bound 64 (memory 64" in p.stdout
    assert "x H100-SXM5-80GB" in p.stdout
    doc = json.loads((out / "plan.json").read_text())
    assert (out / "duty.svg").read_text().startswith("<svg")
    assert "mode: fractional" in (out / "policy.yaml").read_text()
    reqs = sorted(os.listdir(out / "requests"))
    assert len(reqs) == 143
    a = doc["assignments"][0]
    text = (out / "requests" / (a["pod"] + ".yaml")).read_text()
    assert f"gpuslice.io/gpu-memory: {a['memory_gib']}" in text
    assert f"gpuslice.io/gpu-compute: {a['compute_percent']}" in text
    assert a["requests_file"] == "requests/" + a["pod"] + ".yaml"
    assert a["memory_gib"] * 2**30 >= a["memory_bytes"]
    # an existing directory is refused and left as it was
    p = plan(mem, duty, "--gpu", "H100-80GB", "--missing", "skip", "--out", str(out), check=False)
    assert p.returncode == 1 and "exists" in p.stderr and p.stdout == ""
    assert sorted(os.listdir(out / "requests")) == reqs


def variants(mem, duty, tmp_path):
    """Variants the planner was not tuned on: each pod's duty series shifted in time (rotated over
    its own samples), pods resampled with replacement, memory scaled."""
    rng = random.Random(7)

    def load(path):
        rows = {}
        with open(path) as f:
            head = f.readline().strip().split(",")
            for line in f:
                r = dict(zip(head, line.strip().split(",")))
                rows.setdefault(r["container_ip"], []).append((r["timestamp_anon"], float(r["value"])))
        return rows

    m, d = load(mem), load(duty)
    keys = sorted(set(m) & set(d))

    def write(name, mrows, drows):
        mp, dp = tmp_path / (name + "_mem.csv"), tmp_path / (name + "_duty.csv")
        with open(mp, "w") as f:
            f.write("timestamp_anon,value,container_ip\n")
            for k, rows in mrows.items():
                f.writelines(f"{t},{v:.1f},{k}\n" for t, v in rows)
        with open(dp, "w") as f:
            f.write("value,timestamp_anon,container_ip\n")
            for k, rows in drows.items():
                f.writelines(f"{v},{t},{k}\n" for t, v in rows)
        return str(mp), str(dp)

    out = []
    shifted = {}
    for k in keys:
        r = d[k]
        s = rng.randrange(len(r))
        vals = [v for _, v in r]
        shifted[k] = [(t, vals[(i + s) % len(r)]) for i, (t, _) in enumerate(r)]
    out.append(("shifted", write("shifted", {k: m[k] for k in keys}, shifted)))
    picks = [rng.choice(keys) for _ in keys]
    out.append(("resampled", write("resampled", {f"r{i}-{k}": m[k] for i, k in enumerate(picks)},
                                   {f"r{i}-{k}": d[k] for i, k in enumerate(picks)})))
    out.append(("scaled", write("scaled", {k: [(t, v * 0.8) for t, v in m[k]] for k in keys},
                                {k: d[k] for k in keys})))
    return out


def test_variants_never_worse_than_first_fit(trace, tmp_path):
    mem, duty = trace
    for name, (vm, vd) in variants(mem, duty, tmp_path):
        for gpu, gpu_bytes in (("H200", H200), ("H100-80GB", H100)):
            for tol in (0, 1):
                doc = checked(tmp_path, vm, vd, gpu_bytes, tol, "--gpu", gpu, "--time-limit", "600")
                ffd = json.loads(plan(vm, vd, "--json", "--gpu", gpu, "--tolerance", str(tol),
                                      "--time-limit", "0").stdout)
                assert doc["gpus"] <= ffd["gpus"], (name, gpu, tol)
                assert doc["gpus"] <= doc["first_fit_decreasing_gpus"] == ffd["gpus"]
                print(name, gpu, tol, doc["gpus"], "first-fit", ffd["gpus"], "bound", doc["lower_bound"]["bound"])


def small(tmp_path, mem_rows, duty_rows, mem_head="timestamp_anon,value,container_ip",
          duty_head="value,timestamp_anon,container_ip"):
    mp, dp = tmp_path / "m.csv", tmp_path / "d.csv"
    mp.write_text(mem_head + "\n" + "".join(r + "\n" for r in mem_rows))
    dp.write_text(duty_head + "\n" + "".join(r + "\n" for r in duty_rows))
    return str(mp), str(dp)


GOOD_MEM = ["0,1000,a", "60,1000,a", "120,1000,a", "0,2000,b", "60,2000,b", "120,2000,b"]
GOOD_DUTY = ["60,0,a", "0,60,a", "0,120,a", "0,0,b", "60,60,b", "0,120,b"]


def test_small_plan_and_gap_fill(tmp_path):
    # both pods at 60 % in different steps: one GPU
    mem, duty = small(tmp_path, GOOD_MEM, GOOD_DUTY)
    doc = json.loads(plan(mem, duty, "--json", "--gpu", "L4").stdout)
    assert doc["gpus"] == 1 and doc["gpu_model"] == "L4"
    # a's step at 60 s missing: it counts as a's last value (60 %), so a and b collide there
    duty_rows = [r for r in GOOD_DUTY if r != "0,60,a"]
    mem, duty = small(tmp_path, GOOD_MEM, duty_rows)
    doc = json.loads(plan(mem, duty, "--json", "--gpu", "L4").stdout)
    assert doc["gpus"] == 2
    # with 40 % of steps tolerated they share again
    doc = json.loads(plan(mem, duty, "--json", "--gpu", "L4", "--tolerance", "40").stdout)
    assert doc["gpus"] == 1 and doc["gpu_list"][0]["steps_over_budget"] == 1
    assert {p["pod"] for p in doc["gpu_list"][0]["over_budget"][0]["pods"]} == {"a", "b"}


@pytest.mark.parametrize("mem_rows,duty_rows,args,error", [
    (GOOD_MEM[:2] + ["x,1,a"], GOOD_DUTY, [], "m.csv:4: timestamp_anon 'x' is not a number"),
    (GOOD_MEM + ["180,nan,a"], GOOD_DUTY, [], "m.csv:8: pod a: memory value is NaN"),
    (GOOD_MEM + ["180,inf,a"], GOOD_DUTY, [], "m.csv:8: pod a: memory value is infinite"),
    (GOOD_MEM, GOOD_DUTY + ["-5,180,a"], [], "d.csv:8: pod a: duty value -5 is negative"),
    (GOOD_MEM, GOOD_DUTY + ["150,180,a"], [], "d.csv:8: pod a: duty 150 is over 100 %"),
    (GOOD_MEM + ["120,1000,a"], GOOD_DUTY, [], "m.csv:8: pod a: duplicate memory sample at timestamp 120"),
    (GOOD_MEM + ["180,1,a,extra"], GOOD_DUTY, [], "m.csv:8: 4 fields, the header has 3"),
    (GOOD_MEM + ["180,1,a b"], GOOD_DUTY, [], "m.csv:8: pod key 'a b' is not"),
    (GOOD_MEM + ["0,1000,c"], GOOD_DUTY, [], "pod c has a memory series but no duty series"),
    (GOOD_MEM + ["0,300000000000,c"], GOOD_DUTY + ["1,0,c"], [],
     "pod c: its memory quota 279.4 GiB (peak 279.4 GiB) is more than one L4's 22.5 GiB"),
    (GOOD_MEM, GOOD_DUTY, ["--gpu", "X9000"], "--gpu: 'X9000' is not in the catalogue; it has"),
    (GOOD_MEM, GOOD_DUTY, ["--gpu", "A100"], "--gpu: 'A100' names several GPU models: A100-SXM4-40GB, A100-SXM4-80GB"),
])
def test_bad_input(tmp_path, mem_rows, duty_rows, args, error):
    mem, duty = small(tmp_path, mem_rows, duty_rows)
    out = tmp_path / "out"
    p = plan(mem, duty, *(args or ["--gpu", "L4"]), "--out", str(out), check=False)
    assert p.returncode == 1, p.stdout
    assert error in p.stderr
    assert p.stdout == "" and not out.exists()
    assert not [n for n in os.listdir(tmp_path) if n.startswith("out")]


def test_header_needs_its_columns(tmp_path):
    mem, duty = small(tmp_path, GOOD_MEM, GOOD_DUTY, mem_head="ts,value,container_ip")
    p = plan(mem, duty, "--gpu", "L4", check=False)
    assert p.returncode == 1
    assert "m.csv:1: the header has no column timestamp_anon" in p.stderr


@pytest.mark.parametrize("short,key", [("h200", "H200-SXM-141GB"), ("H100", "H100-SXM5-80GB"),
                                       ("A100-80GB", "A100-SXM4-80GB"), ("L4", "L4"), ("H100-NVL", "H100-NVL")])
def test_short_forms_resolve(tmp_path, short, key):
    mem, duty = small(tmp_path, GOOD_MEM, GOOD_DUTY)
    assert json.loads(plan(mem, duty, "--json", "--gpu", short).stdout)["gpu_model"] == key


class PromHandler(BaseHTTPRequestHandler):
    mode = "ok"
    queries = []

    def log_message(self, *a):
        pass

    def do_GET(self):
        u = urllib.parse.urlparse(self.path)
        q = urllib.parse.parse_qs(u.query)
        PromHandler.queries.append((u.path, q))
        mode = PromHandler.mode
        if mode == "slow":
            time.sleep(4)
        if mode == "503":
            return self.answer(503, json.dumps({"status": "error", "errorType": "unavailable",
                                                "error": "overloaded"}))
        if mode == "400":
            return self.answer(400, json.dumps({"status": "error", "errorType": "bad_data",
                                                "error": "parse error at char 4"}))
        if mode == "garbage":
            return self.answer(200, "<html>not prometheus</html>")
        start, step = float(q["start"][0]), float(q["step"][0])
        memory = "gpuslice_guard_memory_used_bytes" in q["query"][0]
        pods = ["a", "b"] if memory or mode != "missing" else ["a"]
        result = []
        for i, pod in enumerate(pods):
            vals = []
            for k in range(10):
                t = start + k * step
                if memory:
                    v = str(10 * 2**30 + i)
                else:
                    v = "0.6" if (k % 2) == i else "0.1"
                    if mode == "nan" and k == 3:
                        v = "NaN"
                vals.append([t, v])
            result.append({"metric": {"namespace": "ns", "pod": pod}, "values": vals})
        self.answer(200, json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}))

    def answer(self, code, body):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def prom():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), PromHandler)
    srv.daemon_threads = True
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    PromHandler.queries = []
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()
    th.join(timeout=10)


def prom_plan(url, *args):
    return subprocess.run([GPUSLICE, "plan", "--prometheus", url, "--window", "9m", "--step", "60s",
                           "--end", "1700000540", "--gpu", "H100", "--timeout", "2", *args],
                          capture_output=True, text=True, timeout=60)


def test_prometheus_source(prom):
    PromHandler.mode = "ok"
    p = prom_plan(prom, "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["gpus"] == 1 and {a["pod"] for a in doc["assignments"]} == {"ns/a", "ns/b"}
    assert doc["grid"]["steps"] == 10 and doc["grid"]["step_s"] == 60
    # 0.6 + 0.1 every step: 70 %; over a budget of 60 % the two pods need two GPUs
    p = prom_plan(prom, "--json", "--budget", "60")
    assert json.loads(p.stdout)["gpus"] == 2
    paths = {path for path, _ in PromHandler.queries}
    assert paths == {"/api/v1/query_range"}
    queries = {q["query"][0] for _, q in PromHandler.queries}
    assert queries == {'sum by (namespace, pod) (gpuslice_guard_memory_used_bytes{pod!=""})',
                       'sum by (namespace, pod) (gpuslice_pod_gpu_utilization_ratio{pod!=""})'}
    _, q = PromHandler.queries[0]
    assert q["start"] == ["1700000000.000"] and q["end"] == ["1700000540.000"] and q["step"] == ["60.000"]


@pytest.mark.parametrize("mode,error", [
    ("503", "HTTP 503: overloaded"),
    ("400", "HTTP 400: parse error at char 4"),
    ("garbage", "memory query: the answer is not JSON"),
    ("slow", "timed out after 20"),
    ("missing", "pod ns/b has a memory series but no duty series"),
    ("nan", "utilization query: ns/a, point 3: pod ns/a: duty value is NaN"),
])
def test_prometheus_errors(prom, tmp_path, mode, error):
    PromHandler.mode = mode
    out = tmp_path / "out"
    t0 = time.monotonic()
    p = prom_plan(prom, "--out", str(out))
    assert p.returncode == 1 and p.stdout == "" and not out.exists()
    assert error in p.stderr, p.stderr
    assert time.monotonic() - t0 < 20


def test_prometheus_down(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = prom_plan(f"http://127.0.0.1:{port}")
    assert p.returncode == 1 and p.stdout == ""
    assert f"--prometheus http://127.0.0.1:{port}:" in p.stderr
    assert "onnect" in p.stderr, p.stderr


def mig_input(tmp_path):
    """Four pods of 8 GiB at 5-11 % duty: a 1g.10gb instance each on an H100 (1/7 of its compute)."""
    mem = ["timestamp_anon,value,container_ip"]
    duty = ["value,timestamp_anon,container_ip"]
    for i, pod in enumerate("abcd"):
        for t in range(5):
            mem.append(f"{t * 60},{8 * 2**30 + i},{pod}")
            duty.append(f"{5 + i + (3 if t == i else 0)},{t * 60},{pod}")
    mp, dp = tmp_path / "m.csv", tmp_path / "d.csv"
    mp.write_text("\n".join(mem) + "\n")
    dp.write_text("\n".join(duty) + "\n")
    return str(mp), str(dp)


@pytest.mark.parametrize("mode", ["mig", "auto"])
def test_mig_layouts(tmp_path, mode):
    mem, duty = mig_input(tmp_path)
    out = tmp_path / "out"
    doc = json.loads(plan(mem, duty, "--json", "--gpu", "H100", "--mode", mode, "--out", str(out)).stdout)
    assert doc["gpus"] == 1 and doc["mode"] == mode
    g = doc["gpu_list"][0]
    assert g["mode"] == "mig"
    assert sorted(x["profile"] for x in g["mig_layout"]) == ["1g.10gb"] * 4
    assert len({x["start"] for x in g["mig_layout"]}) == 4
    assert {a["mig_profile"] for a in doc["assignments"]} == {"1g.10gb"}
    assert {a["compute_percent"] for a in doc["assignments"]} == {14}
    assert 'nvidia.com/mig-1g.10gb: 1' in (out / "requests" / "a.yaml").read_text()
    policy = (out / "policy-node-0.yaml").read_text()
    assert 'index: "0"\n      mode: mig' in policy and "migStrategy: mixed" in policy
    # the layout file is one gpuslice mig plans on an H100 (the simulated node's GPU 0)
    state = tmp_path / "sim"
    state.mkdir()
    p = subprocess.run([GPUSLICE, "--sim", os.path.join(ROOT, "examples/nodes/h100x4-l4x3.yaml"), "--sim-state",
                        str(state), "mig", "plan", "-f", str(out / "mig-layouts.yaml"), "-c", "plan-node-0"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("create GPU instance 1g.10gb") == 4
    # the plan is still a valid shared plan for the checker
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    c = subprocess.run([sys.executable, CHECK, str(tmp_path / "plan.json"), mem, duty, "--gpu-bytes", str(H100)],
                       capture_output=True, text=True, timeout=60)
    assert c.returncode == 0, c.stdout


def test_mig_needs_a_mig_gpu(tmp_path):
    mem, duty = mig_input(tmp_path)
    p = plan(mem, duty, "--gpu", "L4", "--mode", "mig", check=False)
    assert p.returncode == 1 and "--mode mig: L4 has no MIG" in p.stderr
    # pods at 60 % need a 7g.80gb each (4g.40gb is 4/7, 57 %): in MIG two GPUs, shared one
    mem, duty = small(tmp_path, GOOD_MEM, GOOD_DUTY)
    doc = json.loads(plan(mem, duty, "--json", "--gpu", "H100", "--mode", "auto").stdout)
    assert doc["gpus"] == 1 and doc["gpu_list"][0]["mode"] == "shared"
    assert doc["alternatives"] == {"shared": 1, "mig": 2}
    assert {a["mig_profile"] for a in doc["assignments"]} == {None}


def test_trace_auto_is_the_shared_plan(trace, tmp_path):
    mem, duty = trace
    doc = checked(tmp_path, mem, duty, H200, 0, "--gpu", "H200", "--missing", "skip", "--mode", "auto")
    assert doc["gpus"] <= 56
    assert doc["alternatives"]["mig"] > doc["alternatives"]["shared"] == doc["gpus"]


def test_checker_catches_bad_plans(tmp_path):
    """check_plan.py fails a plan that breaks any of its rules (so a passing check means something)."""
    mem, duty = small(tmp_path, GOOD_MEM, GOOD_DUTY)
    good = json.loads(plan(mem, duty, "--json", "--gpu", "L4").stdout)

    def check(doc, *args):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(doc))
        return subprocess.run([sys.executable, CHECK, str(path), mem, duty, *args], capture_output=True, text=True,
                              timeout=60)

    assert check(good, "--gpu-bytes", "3000").returncode == 0
    low = json.loads(json.dumps(good))
    low["assignments"][0]["memory_bytes"] = 999
    c = check(low, "--gpu-bytes", "3000")
    assert c.returncode == 1 and "is below its observed peak" in c.stdout
    c = check(good, "--gpu-bytes", "2999")
    assert c.returncode == 1 and "exceed the GPU's 2999" in c.stdout
    c = check(good, "--gpu-bytes", "3000", "--budget", "50")
    assert c.returncode == 1 and "summed duty over 50.0 % on 2 steps, 0 allowed" in c.stdout
    assert check(good, "--gpu-bytes", "3000", "--budget", "50", "--tolerance", "67").returncode == 0
    gone = json.loads(json.dumps(good))
    gone["assignments"].pop()
    c = check(gone, "--gpu-bytes", "3000")
    assert c.returncode == 1 and "of the input is not in the plan" in c.stdout
    twice = json.loads(json.dumps(good))
    twice["assignments"].append(dict(twice["assignments"][0], gpu=3))
    c = check(twice, "--gpu-bytes", "3000")
    assert c.returncode == 1 and "assigned twice" in c.stdout and "GPU 3 is not in 0..0" in c.stdout
