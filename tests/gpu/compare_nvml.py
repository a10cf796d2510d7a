#!/usr/bin/env python3
"""compare_nvml.py: the simulated node's NVML answers against the real driver's, through
nvidia-ml-py (NVIDIA's binding, imported as pynvml), for the functions the simulator exports that
read without changing state. Read-only towards the GPU.

    compare_nvml.py SIM_LIB NODE_YAML       # prints `match NAME VALUE` / `differ NAME real=.. sim=..`
    compare_nvml.py --dump                  # (the children) the answers of the libnvidia-ml.so.1 found

PYTHONPATH must reach pynvml (tests/nvmlclients/pynvml.sh installs it and prints the directory).
GPU 0 of each side is compared; the node description should describe the real GPU (model, count).
Values that differ by nature (UUIDs, PCI bus IDs, temperatures, power, used memory, utilization,
processes) are printed as `info` lines, not judged. Exit status: 0 when every judged value
matched, 1 otherwise, 2 when a side could not be read.
"""
import json
import os
import subprocess
import sys
import tempfile

JUDGED = ["count_positive", "name",
          "memory_total", "memory_v2_total", "arch", "cc", "pci_device_id", "compute_mode", "mig_mode",
          "max_mig", "is_mig_handle", "utilization_error", "proc_util_error_kind", "nvlink_links",
          "supported_events"]


def dump():
    import pynvml as N

    def err(f, *a):
        try:
            f(*a)
            return None
        except N.NVMLError as e:
            return e.value

    def s(v):
        return v.decode() if isinstance(v, bytes) else v

    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    d = {"driver_version_major": s(N.nvmlSystemGetDriverVersion()).split(".")[0],
         "nvml_version_major": s(N.nvmlSystemGetNVMLVersion()).split(".")[0],
         "cuda_driver_version": N.nvmlSystemGetCudaDriverVersion_v2(),
         "count_positive": N.nvmlDeviceGetCount() > 0, "name": s(N.nvmlDeviceGetName(h)),
         "uuid": s(N.nvmlDeviceGetUUID(h)), "arch": N.nvmlDeviceGetArchitecture(h),
         "cc": "%d.%d" % N.nvmlDeviceGetCudaComputeCapability(h)}
    pci = N.nvmlDeviceGetPciInfo_v3(h)
    d["pci_device_id"], d["pci_bus_id"] = "0x%08X" % pci.pciDeviceId, s(pci.busId)
    m1, m2 = N.nvmlDeviceGetMemoryInfo(h), N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
    d["memory_total"], d["memory_v2_total"], d["memory_used"] = m1.total, m2.total, m1.used
    d["compute_mode"] = N.nvmlDeviceGetComputeMode(h)
    d["temperature"] = N.nvmlDeviceGetTemperature(h, N.NVML_TEMPERATURE_GPU)
    d["power_mw"] = N.nvmlDeviceGetPowerUsage(h)
    d["utilization_error"] = err(N.nvmlDeviceGetUtilizationRates, h)
    e = err(N.nvmlDeviceGetProcessUtilization, h, 0)
    # NOT_FOUND (no sample) and SUCCESS both mean the call is supported
    d["proc_util_error_kind"] = "supported" if e in (None, N.NVML_ERROR_NOT_FOUND) else e
    d["procs"] = len(N.nvmlDeviceGetComputeRunningProcesses(h))
    d["mig_mode"] = err(N.nvmlDeviceGetMigMode, h) or list(N.nvmlDeviceGetMigMode(h))
    d["max_mig"] = N.nvmlDeviceGetMaxMigDeviceCount(h)
    d["is_mig_handle"] = N.nvmlDeviceIsMigDeviceHandle(h)
    d["supported_events"] = N.nvmlDeviceGetSupportedEventTypes(h)
    links = 0
    for link in range(36):
        if err(N.nvmlDeviceGetNvLinkState, h, link) is not None:
            break
        links += 1
    d["nvlink_links"] = links
    N.nvmlShutdown()
    print(json.dumps(d, default=lambda v: getattr(v, "value", str(v))))


def side(env):
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--dump"], env=env, capture_output=True,
                       text=True, timeout=120)
    if p.returncode != 0:
        print("error: %s" % (p.stderr.strip().splitlines() or ["no output"])[-1])
        sys.exit(2)
    return json.loads(p.stdout)


def main(argv):
    if argv[:1] == ["--dump"]:
        dump()
        return 0
    if len(argv) != 2:
        print(__doc__)
        return 2
    sim_lib, node = argv
    real = side(dict(os.environ))
    with tempfile.TemporaryDirectory() as d:
        os.symlink(os.path.abspath(sim_lib), os.path.join(d, "libnvidia-ml.so.1"))
        env = dict(os.environ, LD_LIBRARY_PATH=d, GPUSLICE_SIM_NODE=os.path.abspath(node),
                   GPUSLICE_SIM_STATE=os.path.join(d, "state"))
        sim = side(env)
    bad = 0
    for k in sorted(set(real) | set(sim)):
        if k not in JUDGED:
            print("info %s real=%s sim=%s" % (k, real.get(k), sim.get(k)))
        elif real.get(k) == sim.get(k):
            print("match %s %s" % (k, real.get(k)))
        else:
            bad += 1
            print("differ %s real=%s sim=%s" % (k, real.get(k), sim.get(k)))
    print("%s nvml_fidelity: %d of %d judged answers differ" % ("FAIL" if bad else "PASS", bad, len(JUDGED)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
