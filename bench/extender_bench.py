#!/usr/bin/python3
"""extender_bench.py: decision latency of `gpuslice extender` at trace scale.

Starts the extender on the trace's node list (1,213 nodes, ../shared/traces) pinned to one core
(taskset), then plays pods of the trace's pod list through it as kube-scheduler does with
nodeCacheCapable: filter with every node's name, prioritize with the nodes that passed, bind to the
best (so the cluster fills and the model changes as it would), over one keep-alive connection.
Prints p50/p99/max of each verb measured at the client (request written to answer read: parsing,
the decision, rendering and loopback included) and the extender's own histogram from /metrics.

  bench/extender_bench.py BUILD/gpuslice [--pods N] [--policy gpuslice|fgd] [--cpu 0]
(the extender pinned to --cpu; pin the client elsewhere, e.g. `taskset -c 0 ... --cpu 1`). Prints
the load average at the start and the end: the wall figures are the machine's, not the decision's.
--placements FILE writes each pod's decision (its name, the node bound, how many nodes filter
passed, a SHA-1 of every node's prioritize score): two builds' files are equal when they decide
alike.
"""
import argparse
import csv
import hashlib
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TRACES = os.path.join(HERE, "..", "..", "shared", "traces", "alibaba-gpu-v2023")


def trace_pods(path, n):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    for i in range(n):
        r = rows[i % len(rows)]
        num, milli = int(r["num_gpu"]), int(r["gpu_milli"])
        limits = {}
        if num == 1 and 0 < milli < 1000:
            limits["gpuslice.io/gpu-compute"] = str((milli + 9) // 10)
        elif num > 0:
            limits["nvidia.com/gpu"] = str(num)
        yield {"metadata": {"name": "%s-%d" % (r["name"], i), "namespace": "bench", "uid": "uid-%d" % i},
               "spec": {"containers": [{"name": "c", "resources": {
                   "requests": {"cpu": "%dm" % int(r["cpu_milli"]), "memory": "%dMi" % int(r["memory_mib"])},
                   "limits": limits}}]}}


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gpuslice")
    ap.add_argument("--pods", type=int, default=3000)
    ap.add_argument("--policy", default="gpuslice")
    ap.add_argument("--cpu", default="0")
    ap.add_argument("--nodes", default=os.path.join(TRACES, "openb_node_list_gpu_node.csv"))
    ap.add_argument("--pod-list", default=os.path.join(TRACES, "openb_pod_list_default.csv"))
    ap.add_argument("--placements", help="write each pod's filter, scores and node here")
    a = ap.parse_args()
    load0 = open("/proc/loadavg").read().split()[:3]
    with open(a.nodes) as f:
        names = [r["sn"] for r in csv.DictReader(f)]
    log = tempfile.NamedTemporaryFile("w+", suffix=".log")
    p = subprocess.Popen(["taskset", "-c", a.cpu, a.gpuslice, "extender", "--snapshot", a.nodes,
                          "--listen", "127.0.0.1:0", "--insecure-loopback-http", "--policy", a.policy], stdout=log,
                         stderr=subprocess.STDOUT)
    try:
        port = None
        for _ in range(200):
            m = re.search(r"\(port (\d+)\)", open(log.name).read())
            if m:
                port = int(m.group(1))
                break
            if p.poll() is not None:
                sys.exit(open(log.name).read())
            time.sleep(0.05)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        lat = {"filter": [], "prioritize": [], "bind": []}
        srv = {"filter": [], "prioritize": [], "bind": []}
        cpu = {"filter": [], "prioritize": [], "bind": []}
        passed = placed = 0
        out = open(a.placements, "w") if a.placements else None

        def call(verb, obj):
            body = json.dumps(obj)
            t0 = time.perf_counter()
            conn.request("POST", "/gpuslice/" + verb, body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            lat[verb].append(time.perf_counter() - t0)
            m = re.match(r"decision;dur=([0-9.]+), cpu;dur=([0-9.]+)", resp.getheader("Server-Timing", ""))
            srv[verb].append(float(m.group(1)) / 1e3)
            cpu[verb].append(float(m.group(2)) / 1e3)
            assert resp.status == 200, (verb, resp.status, data[:200])
            return json.loads(data)

        for pod in trace_pods(a.pod_list, a.pods):
            r = call("filter", {"Pod": pod, "NodeNames": names})
            fit = r["NodeNames"]
            passed += len(fit)
            if not fit:
                if out:
                    out.write("%s -\n" % pod["metadata"]["name"])
                continue
            pr = call("prioritize", {"Pod": pod, "NodeNames": fit})
            best = max(pr, key=lambda h: h["Score"])["Host"]
            b = call("bind", {"PodName": pod["metadata"]["name"], "PodNamespace": "bench",
                              "PodUID": pod["metadata"]["uid"], "Node": best})
            placed += b["Error"] == ""
            if out:
                scores = ",".join("%s:%d" % (h["Host"], h["Score"]) for h in pr)
                out.write("%s %s %s passed=%d scores=%s\n" % (pod["metadata"]["name"], best, b["Error"] or "bound",
                                                           len(fit), hashlib.sha1(scores.encode()).hexdigest()))
        if out:
            out.close()
        conn.request("GET", "/metrics")
        metrics = conn.getresponse().read().decode()
        print("gpuslice extender, policy %s, %d nodes, %d pods (%d placed), one core (taskset -c %s)" %
              (a.policy, len(names), a.pods, placed, a.cpu))
        print("nodes passed to prioritize per pod: mean %.0f" % (passed / max(1, len(lat["prioritize"]))))
        print("load average (1, 5, 15 min) at the start %s, at the end %s" %
              (" ".join(load0), " ".join(open("/proc/loadavg").read().split()[:3])))
        for what, table in (("client: request written to answer read", lat),
                            ("server: the decision (parse, decide, render), wall", srv),
                            ("server: the decision's CPU time (thread)", cpu)):
            print("%-11s %8s %8s %8s %8s   %s, ms" % ("verb", "n", "p50", "p99", "max", what))
            for v, xs in table.items():
                if xs:
                    print("%-11s %8d %8.3f %8.3f %8.3f" % (v, len(xs), pct(xs, 50) * 1e3, pct(xs, 99) * 1e3,
                                                           max(xs) * 1e3))
        for line in metrics.splitlines():
            if re.match(r'gpuslice_extender_decision_seconds_bucket\{verb="(filter|prioritize)",le="0.001"\}', line) \
                    or re.match(r'gpuslice_extender_decision_seconds_count\{verb="(filter|prioritize)"', line) \
                    or line.startswith("gpuslice_extender_gpu_allocated_ratio"):
                print("server:", line)
    finally:
        p.terminate()
        p.wait(timeout=10)


if __name__ == "__main__":
    main()
