"""A plan's quotas reach the guard: the plan of Alibaba's GenAI trace on H200 (`gpuslice plan --out`,
bench/kwok_plan.py's make_plan), its policy.yaml given to the real agent on a simulated node of 8
H200s (`gpuslice --sim`) against the kubelet emulator (tests/integration/agent_harness.py), and
the pods the plan put on its first GPUs allocated their requests/POD.yaml as the kubelet does
(GetPreferredAllocation for the request's size, then Allocate):

- the agent advertises gpuslice.io/gpu-memory, 140 units per H200, under the plan's policy;
- the pods of the plan's GPU g, offered the free units of the node's GPU g (as the kubelet offers
  a node's units once the scheduler chose it), each get all their units there: the GPU's units
  hold the plan's GPU's GiB requests (its quotas, each rounded up);
- each allocation's guard limits file says `device 0 GPU-UUID BYTES SHARE`: BYTES the request's
  GiB, which holds the plan's quota (memory_bytes) and is less than 1 GiB over it, and SHARE the
  plan's gpu-compute when its requests carry one, else 0 (no cap).

Environment (set by meson): GPUSLICE, GPUSLICE_SIM_LIB, GS_SOURCE_ROOT; the trace under
../shared/traces of the checkout or $GS_SHARED_DIR/traces."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("GS_SOURCE_ROOT") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from agent_harness import GPUSLICE, h  # noqa: E402,F401 (h: fixture)
import kwok_plan as kp  # noqa: E402  (bench/)

H200X8 = "gpus:\n  - model: H200-SXM-141GB\n    count: 8\n"
GUARD_CONF = "/etc/gpuslice/guard.conf"
PLAN_GPUS = (0, 1, 2)  # the pods of these GPUs of the plan (4, 4 and 3 on the trace, 140 units on GPU 0)


def limits_file(resp):
    mounts = {m.container_path: m.host_path for m in resp.mounts}
    assert GUARD_CONF in mounts, f"no guard limits file among the mounts {sorted(mounts)}"
    with open(mounts[GUARD_CONF]) as f:
        return [ln for ln in f.read().splitlines() if ln.startswith("device ")]


def test_guard_files_carry_the_plans_quotas(h, tmp_path):
    mem, duty = kp.trace_csvs(kp.trace_dir(), str(tmp_path))
    doc, reqs, policy = kp.make_plan(GPUSLICE, mem, duty, "H200", str(tmp_path / "plan"))
    node = h.node(H200X8)
    with open(policy) as f:
        agent = h.agent(node, f.read(), resources=[kp.MEM], extra=["--guard-root", os.path.join(h.base, "guard")])
    uuids = node.uuids()
    free = [d.id for d in h.latest(kp.MEM)]
    assert len(free) == 8 * 140 and {i.split("::")[0] for i in free} == set(uuids)
    compute = any(kp.SM in r for r in reqs.values())
    if compute:
        agent.wait_resources([kp.SM])
    free_sm = [d.id for d in h.latest(kp.SM)] if compute else []

    checked = 0
    for g in PLAN_GPUS:
        pods = [a for a in doc["assignments"] if a["gpu"] == g]
        assert len(pods) >= 2, f"the plan's GPU {g} holds {len(pods)} pods"
        uuid = uuids[g]
        for a in pods:
            lim = reqs[a["pod"]]
            gib = int(lim[kp.MEM])
            assert gib == a["memory_gib"] and a["memory_bytes"] <= gib << 30 < a["memory_bytes"] + (1 << 30), (a, lim)
            got = h.kubelet.preferred(kp.MEM, [i for i in free if i.startswith(uuid + "::")], size=gib)
            assert len(got) == gib and {i.split("::")[0] for i in got} == {uuid}, (a["pod"], gib, got)
            r = h.kubelet.allocate(kp.MEM, got)
            free = [i for i in free if i not in set(got)]
            share = 0
            if kp.SM in lim:  # the container's compute on its memory's GPU, one limits file for both
                share = int(lim[kp.SM])
                sm = h.kubelet.preferred(kp.SM, [i for i in free_sm if i.startswith(uuid + "::")], size=share)
                assert sm and {i.split("::")[0] for i in sm} == {uuid}, (a["pod"], sm)
                r = h.kubelet.allocate(kp.SM, sm)
                free_sm = [i for i in free_sm if i not in set(sm)]
            assert r.envs["NVIDIA_VISIBLE_DEVICES"] == uuid
            assert limits_file(r) == [f"device 0 {uuid} {gib << 30} {share}"], (a["pod"], lim)
            checked += 1
    assert checked >= 2 * len(PLAN_GPUS) and agent.alive()
