#!/usr/bin/python3
"""extender_limits_bench.py: the peak memory of `gpuslice extender` under the largest requests it
accepts and a flood above them, against the chart's memory limit.

Starts the extender (loopback, port 0) on a made-up snapshot of --nodes nodes (in 500 states of
their GPUs) whose names are as long as Kubernetes allows (253 characters), so that the most names a request may name is the
absolute cap (15,000), then, each part bounded in count and time:
  1. the largest accepted requests: filter and prioritize naming every node known plus made-up
     ones up to the cap, with a Pod near its bounds (3 MiB, 65,536 JSON values), --rounds times;
  2. the same from --conns connections at once (the HTTP server's limit is 16);
  3. above the bounds, from --conns connections at once: one name more than the cap, a Pod of
     too many JSON values, a body of one-letter names under the body limit (1.7 M names), a body
     over it (8 MiB);
  4. --made-up filters of distinct made-up pods (never bound), timed from the extender's
     Server-Timing CPU figure: what the estimate's refresh costs as they pile up.
Prints each part's answers and the process's VmHWM / VmRSS (/proc/PID/status) after it, and the
peak against the chart's resources.limits.memory of the extender (deploy/helm/gpuslice/values.yaml).

  bench/extender_limits_bench.py BUILD/gpuslice [--nodes 12000] [--policy gpuslice] [--conns 16]
                                 [--rounds 3] [--made-up 60000] [--max-seconds 300]
"""
import argparse
import http.client
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VALUES = os.path.join(HERE, "..", "deploy", "helm", "gpuslice", "values.yaml")
NAMES_CAP = 15000          # EX_REQ_NODES_MAX (src/extender/model.h)
POD_BYTES_MAX = 3 << 20    # EX_POD_BYTES_MAX (src/extender/wire.h)
POD_VALUES_MAX = 65536     # EX_POD_VALUES_MAX


def chart_limit_mib():
    """the extender's resources.limits.memory in the chart's values, MiB"""
    text = open(VALUES).read()
    sect = text[text.index("\nextender:"):]
    m = re.search(r"\n    limits:\n(?:      .*\n)*?      memory: (\d+)(Mi|Gi)", sect)
    return int(m.group(1)) * (1024 if m.group(2) == "Gi" else 1)


def vm(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmHWM", "VmRSS"):
                out[k] = int(v.split()[0]) / 1024.0
    return out


def long_name(prefix, i):
    s = "%s%06d-" % (prefix, i)
    return s + "x" * (253 - len(s))


def big_pod(uid):
    """a Pod near EX_POD_BYTES_MAX and EX_POD_VALUES_MAX, asking half a GPU"""
    env = [{"name": "E%05d" % k, "value": "v"} for k in range(20000)]  # 3 values each
    pod = {"metadata": {"name": "big-" + uid, "namespace": "bench", "uid": uid, "annotations": {"a": ""}},
           "spec": {"containers": [{"name": "c", "env": env, "resources": {
               "requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"gpuslice.io/gpu-compute": "50"}}}]}}
    size = len(json.dumps(pod))
    pod["metadata"]["annotations"]["a"] = "y" * (POD_BYTES_MAX - size - 4096)
    return pod


def post(port, path, body, timeout=60):
    """one request on its own connection: (status, body, Server-Timing CPU ms or None)"""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", path, body, {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        m = re.search(r"cpu;dur=([0-9.]+)", r.getheader("Server-Timing", "") or "")
        return r.status, data, float(m.group(1)) if m else None
    except (OSError, http.client.HTTPException) as e:  # a body refused before it was read, an answer cut
        return "failed (%s)" % type(e).__name__, b"", None
    finally:
        c.close()


def raw_over(port, length):
    """a head announcing a body over the limit: the answer before the body is sent"""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"POST /gpuslice/filter HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % length)
        out = s.recv(4096)
    return int(out.split()[1]) if out.startswith(b"HTTP/1.1 ") else out[:40]


def at_once(n, fn):
    res = [None] * n

    def run(k):
        res[k] = fn(k)
    ts = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gpuslice")
    ap.add_argument("--nodes", type=int, default=12000)
    ap.add_argument("--policy", default="gpuslice")
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--made-up", type=int, default=60000)
    ap.add_argument("--max-seconds", type=float, default=300)
    a = ap.parse_args()
    t_start = time.monotonic()
    limit = chart_limit_mib()
    load0 = open("/proc/loadavg").read().split()[:3]
    tmp = tempfile.mkdtemp(prefix="extender-limits-")
    known = [long_name("node-", i) for i in range(a.nodes)]
    # 500 node states (the trace's 1,213 nodes are 15 to 280 while they fill): what the estimate's
    # refresh recomputes per state
    rng = random.Random(42)
    free = [[rng.choice((0, 250, 500, 750, 1000)) for _ in range(8)] for _ in range(500)]
    snap = {"nodes": [{"name": n, "cpuMilli": 64000, "memoryMiB": 524288, "gpuModel": "A100", "gpus": 8,
                       "gpuMemoryMiB": 81920, "gpuFree": free[i % 500]} for i, n in enumerate(known)]}
    with open(os.path.join(tmp, "snap.json"), "w") as f:
        json.dump(snap, f)
    log = open(os.path.join(tmp, "extender.log"), "w+")
    p = subprocess.Popen([a.gpuslice, "extender", "--snapshot", os.path.join(tmp, "snap.json"),
                          "--listen", "127.0.0.1:0", "--insecure-loopback-http", "--policy", a.policy],
                         stdout=log, stderr=subprocess.STDOUT)
    try:
        port = None
        for _ in range(600):
            m = re.search(r"\(port (\d+)\)", open(log.name).read())
            if m:
                port = int(m.group(1))
                break
            if p.poll() is not None:
                sys.exit("the extender exited: " + open(log.name).read())
            time.sleep(0.05)
        if not port:
            sys.exit("the extender did not start: " + open(log.name).read())
        print("gpuslice extender, policy %s, snapshot of %d nodes (names of 253 characters), pid %d" %
              (a.policy, a.nodes, p.pid))
        print("at the start: VmHWM %(VmHWM).1f MiB, VmRSS %(VmRSS).1f MiB" % vm(p.pid))
        most = min(NAMES_CAP, a.nodes + a.nodes // 4 + 256)
        names = known + [long_name("made-up-", i) for i in range(most - len(known))]
        pod = big_pod("u-big")
        pod_text = json.dumps(pod)
        body = json.dumps({"Pod": pod, "NodeNames": names}).encode()
        print("largest accepted: %d names, a Pod of %d bytes; body %d bytes" % (len(names), len(pod_text), len(body)))

        def part(title, fn):
            if time.monotonic() - t_start > a.max_seconds:
                print("%s: skipped (past --max-seconds)" % title)
                return
            t0 = time.monotonic()
            out = fn()
            print("%s: %s (%.1f s); VmHWM %.1f MiB, VmRSS %.1f MiB" %
                  ((title, out, time.monotonic() - t0) + tuple(vm(p.pid)[k] for k in ("VmHWM", "VmRSS"))))

        def largest():
            got = []
            for _ in range(a.rounds):
                st, data, cpu = post(port, "/gpuslice/filter", body)
                fit = json.loads(data)["NodeNames"] if st == 200 else []
                pst, _, pcpu = post(port, "/gpuslice/prioritize",
                                    json.dumps({"Pod": pod, "NodeNames": fit or names[:1]}).encode())
                got.append("filter %s (%d fit, %.0f ms CPU), prioritize %s (%.0f ms CPU)" %
                           (st, len(fit), cpu or 0, pst, pcpu or 0))
            return "; ".join(sorted(set(re.sub(r"\d+ ms", "N ms", g) for g in got))) + \
                " [last: %s]" % got[-1]
        part("1. largest accepted, x%d" % a.rounds, largest)

        def largest_at_once():
            sts = []
            for _ in range(a.rounds):
                sts += [r[0] for r in at_once(a.conns, lambda k: post(port, "/gpuslice/filter", body))]
            return "%d filters from %d connections at once: statuses %s" % (len(sts), a.conns, sorted(set(sts)))
        part("2. largest accepted, %d at once" % a.conns, largest_at_once)

        one_more = json.dumps({"Pod": pod, "NodeNames": names + ["one-more"]}).encode()
        values = json.dumps({"Pod": {"metadata": {"uid": "v"}, "x": [[]] * (POD_VALUES_MAX + 10)},
                             "NodeNames": ["a"]}).encode()
        body_max = NAMES_CAP * (254 + 3) + POD_BYTES_MAX + 4096  # EX_ARGS_BODY_MAX
        n_letters = (body_max - 300) // 4
        flood_pod = {"metadata": {"uid": "f"}, "spec": {"containers": [{"name": "c", "resources": {
            "limits": {"gpuslice.io/gpu-compute": "50"}}}]}}
        letters = b'{"Pod": ' + json.dumps(flood_pod).encode() + b', "NodeNames": [' + \
            b",".join([b'"a"'] * n_letters) + b"]}"
        assert len(letters) <= body_max

        def above():
            out = []
            for what, b in (("one name over the cap", one_more), ("a Pod of too many values", values),
                            ("%d one-letter names (%d bytes)" % (n_letters, len(letters)), letters)):
                sts = []
                for _ in range(a.rounds):
                    sts += [r[0] for r in at_once(a.conns, lambda k: post(port, "/gpuslice/filter", b))]
                out.append("%s: %s" % (what, sorted(set(map(str, sts)))))
            sts = []
            for _ in range(a.rounds):
                sts += at_once(a.conns, lambda k: raw_over(port, 8 << 20))
            out.append("an 8 MiB body (over the limit): %s" % sorted(set(map(str, sts))))
            return "; ".join(out)
        part("3. above the bounds, %d connections at once, x%d" % (a.conns, a.rounds), above)

        def made_up():
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            cpu, sts = [], set()
            few = known[:16]
            t0 = time.monotonic()
            for k in range(a.made_up):
                if time.monotonic() - t_start > a.max_seconds:
                    break
                q = {"metadata": {"name": "m%d" % k, "namespace": "bench", "uid": "made-up-%d" % k},
                     "spec": {"containers": [{"name": "c", "resources": {
                         "requests": {"cpu": "%dm" % (1000 + k), "memory": "%dMi" % (1024 + k)},
                         "limits": {"gpuslice.io/gpu-compute": str(1 + k % 90)}}}]}}
                c.request("POST", "/gpuslice/filter", json.dumps({"Pod": q, "NodeNames": few}),
                          {"Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
                sts.add(r.status)
                m = re.search(r"cpu;dur=([0-9.]+)", r.getheader("Server-Timing", ""))
                cpu.append(float(m.group(1)))
            c.close()
            n = len(cpu)
            if n < 2000:
                return "%d filters: too few to compare" % n

            def stat(xs):
                xs = sorted(xs)
                return "p50 %.3f, p99 %.3f, max %.3f ms" % (statistics.median(xs), xs[int(0.99 * (len(xs) - 1))],
                                                           xs[-1])
            return ("%d filters of distinct made-up pods in %.0f s, statuses %s; CPU per filter: first 1,000 %s; "
                    "last 1,000 %s" % (n, time.monotonic() - t0, sorted(sts), stat(cpu[:1000]), stat(cpu[-1000:])))
        part("4. made-up pods, never bound", made_up)

        v = vm(p.pid)
        assert p.poll() is None, "the extender died: " + open(log.name).read()[-2000:]
        print("peak RSS (VmHWM) %.1f MiB of the chart's limits.memory %d MiB (%.0f %%); VmRSS at the end %.1f MiB" %
              (v["VmHWM"], limit, 100.0 * v["VmHWM"] / limit, v["VmRSS"]))
        print("load average (1, 5, 15 min) at the start %s, at the end %s; %.0f s in all" %
              (" ".join(load0), " ".join(open("/proc/loadavg").read().split()[:3]), time.monotonic() - t_start))
    finally:
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        log.close()


if __name__ == "__main__":
    main()
