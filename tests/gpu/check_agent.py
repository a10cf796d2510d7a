#!/usr/bin/env python3
"""check_agent.py OUT_DIR: checks what tests/gpu/check_agent.sh's agent wrote from a real GPU.

OUT_DIR holds nvidia-smi.csv (index, uuid, name, memory.total MiB, driver_version), metrics.txt,
features (node labels), cdi/gpuslice.json and agent.log. Prints PASS/FAIL lines; exit status 1 when
a check failed."""
import json
import os
import re
import sys

failed = False


def check(ok, name, detail):
    global failed
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")
    failed |= not ok


def read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        return f"<unreadable: {e}>"


def main(out):
    gpus = [[c.strip() for c in line.split(",")][:5] for line in read(os.path.join(out, "nvidia-smi.csv")).splitlines()
            if line.count(",") >= 4]
    check(bool(gpus), "nvidia_smi", f"{len(gpus)} GPU(s) listed")
    metrics = read(os.path.join(out, "metrics.txt"))
    samples = {}
    for line in metrics.splitlines():
        m = re.match(r"^([a-z_]+)\{([^}]*)\} (\S+)$", line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            samples.setdefault(m.group(1), []).append((labels, m.group(3)))

    for idx, uuid, name, mem_mib, driver in gpus:
        info = [lb for lb, _ in samples.get("gpuslice_gpu_info", []) if lb.get("gpu") == idx]
        check(len(info) == 1 and info[0].get("UUID") == uuid and info[0].get("model_name") == name,
              f"metrics_gpu{idx}_info", f"gpuslice_gpu_info {info} vs nvidia-smi {uuid} '{name}'")
        total = [v for lb, v in samples.get("gpuslice_gpu_memory_total_bytes", []) if lb.get("gpu") == idx]
        check(len(total) == 1 and int(total[0]) >> 20 == int(mem_mib), f"metrics_gpu{idx}_memory_total",
              f"gpuslice_gpu_memory_total_bytes {total} (MiB: {int(total[0]) >> 20 if total else '-'}) "
              f"vs nvidia-smi {mem_mib} MiB")

    labels = dict(line.split("=", 1) for line in read(os.path.join(out, "features")).splitlines() if "=" in line)
    driver = gpus[0][4] if gpus else "?"
    want = {
        "gpuslice.io/cuda.driver-version.full": driver,
        "gpuslice.io/gpu.shared.count": str(len(gpus)),
        "gpuslice.io/gpu.shared.replicas": "4",
        "gpuslice.io/gpu.shared.memory": gpus[0][3] if gpus else "?",
        "gpuslice.io/mig.strategy": "none",
    }
    for key, value in want.items():
        check(labels.get(key) == value, f"label {key}", f"'{labels.get(key)}', expected '{value}'")
    product = labels.get("nvidia.com/gpu.shared.product", "")
    check(bool(gpus) and product.replace("-", " ").startswith(gpus[0][2].replace("-", " ")),
          "label nvidia.com/gpu.shared.product", f"'{product}' for '{gpus[0][2] if gpus else '?'}'")

    spec_path = os.path.join(out, "cdi", "gpuslice.json")
    try:
        with open(spec_path, encoding="utf-8") as f:
            spec = json.load(f)
    except (OSError, ValueError) as e:
        check(False, "cdi_spec", f"{spec_path}: {e}")
        spec = {}
    if spec:
        devices = spec.get("devices", [])
        names = [d.get("name", "") for d in devices]
        check(bool(spec.get("cdiVersion")) and bool(spec.get("kind")) and devices, "cdi_spec",
              f"kind {spec.get('kind')}, cdiVersion {spec.get('cdiVersion')}, devices {names}")
        for idx, uuid, *_ in gpus:
            check(idx in names or uuid in names, f"cdi_device_gpu{idx}", f"a device named {idx} or {uuid} in {names}")
        edits = [spec.get("containerEdits", {})] + [d.get("containerEdits", {}) for d in devices]
        nodes = [n.get("path") for e in edits for n in e.get("deviceNodes", []) or []]
        mounts = [m.get("hostPath") for e in edits for m in e.get("mounts", []) or []]
        missing = [p for p in nodes + mounts if not p or not os.path.exists(p)]
        check(not missing and nodes and mounts, "cdi_paths_exist",
              f"{len(nodes)} device nodes, {len(mounts)} mounts, missing on this machine: {missing[:5]}")
        for want_node in ("/dev/nvidiactl", "/dev/nvidia0"):
            check(want_node in nodes, f"cdi_node {want_node}", f"among {sorted(set(nodes))[:8]}")
        libs = sorted(os.path.basename(p) for p in mounts if p)
        check(any(b.startswith("libcuda.so") for b in libs) and any(b.startswith("libnvidia-ml.so") for b in libs),
              "cdi_driver_libraries", f"{len(libs)} mounts, e.g. {[b for b in libs if b.startswith(('libcuda', 'libnvidia-ml'))]}")

    errors = [line for line in read(os.path.join(out, "agent.log")).splitlines() if "level=error" in line]
    check(not errors, "agent_log_no_errors", f"{len(errors)} error lines{': ' + errors[0][:300] if errors else ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
