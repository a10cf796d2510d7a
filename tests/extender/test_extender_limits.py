"""gpuslice extender over HTTP (loopback) against callers that send too much: a request naming far
more nodes than the model knows is refused with the reason and the process's peak memory stays
small, the largest accepted request is answered, and a pod whose quantities overflow int64 when
summed is refused instead of fitting every node."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_extender_http import Extender, pod  # noqa: E402  (the same extender, started alike)


def vm_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError("no %s in /proc/%d/status" % (field, pid))


def names_body(n):
    return b'{"Pod": ' + json.dumps(pod("u-flood", {})).encode() + b', "NodeNames": [' + b",".join([b'"a"'] * n) + b"]}"


def test_names_flood_refused_memory_bounded(tmp_path):
    """8 MiB of one-letter node names (1.68 M of them took the extender from 6 to 362 MiB and kept
    it): refused while scanned, 413 with the reason; the peak RSS stays under 64 MiB. With the
    default body limit the same body is refused before it is read."""
    e = Extender(tmp_path, extra=["--max-body", "8MiB"])
    try:
        body = names_body(2000000)
        assert 8000000 < len(body) <= 8 << 20
        st, r = e.post("/gpuslice/filter", body)
        assert st == 413
        assert b"more than 259 nodes, the most this extender takes" in r
        st, r = e.post("/gpuslice/prioritize", body)
        assert st == 413 and b"too large" in r
        hwm = vm_kib(e.p.pid, "VmHWM")
        assert hwm < 64 * 1024, "peak RSS %d KiB" % hwm
        # the largest request accepted: the 3 nodes known plus 256
        st, r = e.post("/gpuslice/filter", names_body(259))
        assert st == 200 and r["Error"] == "" and len(r["NodeNames"]) == 259  # no GPU asked: fits
        st, r = e.post("/gpuslice/filter", names_body(260))
        assert st == 413
        e.alive()
    finally:
        assert e.stop() == 0
    d = Extender(tmp_path)
    try:
        out = d.raw(b"POST /gpuslice/filter HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body),
                    shut=False)
        assert out.startswith(b"HTTP/1.1 413 ")
        d.alive()
    finally:
        assert d.stop() == 0


def test_quantity_sum_overflow_refused(tmp_path):
    """1,100 containers of 9,090,909,090,909,091 GPUs each: 10^19 in all, past int64. Wrapped, the
    pod fit every node; it is refused, the reason naming the container's field."""
    e = Extender(tmp_path, policy="gpuslice")
    try:
        p = pod("u-over", {})
        p["spec"]["containers"] = [{"name": "c%d" % k, "resources": {"limits": {"nvidia.com/gpu": "9090909090909091"}}}
                                   for k in range(1100)]
        st, r = e.post("/gpuslice/filter", {"Pod": p, "NodeNames": ["split", "one", "idle"]})
        assert st == 400
        assert r["NodeNames"] is None
        assert ".resources.limits.nvidia.com/gpu" in r["Error"] and "overflows" in r["Error"]
        p["spec"]["containers"] = [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1e19"}}}]
        st, r = e.post("/gpuslice/filter", {"Pod": p, "NodeNames": ["idle"]})
        assert st == 400 and "out of range" in r["Error"]
        e.alive()
    finally:
        assert e.stop() == 0
