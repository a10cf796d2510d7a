"""A plan of `gpuslice plan` through the real kube-scheduler (bench/kwok_plan.py's check, in the e2e
cluster): the plan of Alibaba's GenAI trace (../shared/traces/alibaba-genai-v2026, or under
$GS_SHARED_DIR/traces) on H200 and on H100-80GB, its requests/POD.yaml applied to its 143 pods, each annotated with
its GPU of the plan (`gpuslice.io/plan-gpu`, the extender's hint), bound by the scheduler with `gpuslice extender --kubeconfig` (its /bind writes each Binding with the pod's
`gpuslice.io/gpu-index`) on 18 kwok Nodes (the trace's 144 GPUs) shaped as the agent publishes a
node of 8 simulated GPUs of the model under the plan's policy.yaml (`gpuslice --sim apply --labels`, `--json`):

- every pod is bound, to a GPU index of its node, and no GPU holds more gpuslice.io/gpu-memory or
  gpuslice.io/gpu-compute than its units;
- the scheduler reproduces the plan's GPU count: the GPUs the pods were bound to, distinct (node,
  gpu-index), are at least the plan's memory bound and at most the plan's GPUs plus 2 (the
  extender fits memory and compute apart, as the node does, and keeps the plan's groups together;
  a pod whose bind lost a race to another's is retried and may open a GPU of its own).

Printed, not asserted: the placement judged by tests/plan/check_plan.py (the pods' summed duty per
bound GPU; docs/benchmarks.md, "A plan through the real kube-scheduler").

kwok and the extender are stopped by their pids (also in DIR/run, so that `cluster.sh down` stops
them if the test dies); the Nodes and pods are deleted and the scheduler's own configuration is
restored. Every wait is bounded."""
import json
import os
import sys
import time

import pytest

from e2e import GPUSLICE, ROOT

sys.path.insert(0, os.path.join(ROOT, "bench"))
import kwok_plan as kp  # noqa: E402  (bench/)
import kwok_replay as kr  # noqa: E402

NODES = 18


# (the plan's --gpu, its GPUs at most, a GPU's gpuslice.io/gpu-memory units, the product label)
TARGETS = {"H200": ("H200", 56, 140, "NVIDIA-H200"), "H100": ("H100-80GB", 69, 80, "NVIDIA-H100-80GB-HBM3")}


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_plan_requests_bound_by_the_scheduler(cluster, tmp_path, target):
    gpu, most, units, product = TARGETS[target]
    t0 = time.monotonic()
    mem, duty = kp.trace_csvs(kp.trace_dir(), str(tmp_path))
    doc, reqs, policy = kp.make_plan(GPUSLICE, mem, duty, gpu, str(tmp_path / "plan"))
    assert doc["pods"] == len(reqs) == 143 and doc["gpus"] <= most, {k: doc[k] for k in ("pods", "gpus")}
    labels, res = kp.node_shape(GPUSLICE, doc["gpu_model"], 8, policy, str(tmp_path))
    assert res[kp.MEM] == 8 * units and labels[kp.MEM + ".product"] == product, (res, labels)

    fig = kp.check_in_cluster(kr.ClusterInfo(cluster.dir), GPUSLICE, doc, reqs, labels, res, NODES,
                              kr.kwok_binary(), str(tmp_path), timeout=120)
    bound = fig.pop("bound_by_key")
    assert len(bound) == 143
    assert doc["lower_bound"]["memory"] <= fig["gpus_bound"] <= doc["gpus"] + 2, fig
    fig.update(kp.judge(doc, bound, mem, duty, str(tmp_path)))
    print(f"test_plan_kwok {target}: {time.monotonic() - t0:.1f} s: {json.dumps(fig)}")
