#!/usr/bin/env python3
"""nvml_init_rss.py: what libnvidia-ml's own initialisation costs a process, in resident memory and
threads (real GPU only). Loads the library through ctypes and prints VmRSS, VmHWM and Threads
after loading, after nvmlInit_v2, after a device handle and after the CUDA driver version query,
then the mappings over 1 MB resident. Used for the agent's memory figure in docs/benchmarks.md.

    python3 bench/nvml_init_rss.py
"""
import ctypes


def status():
    d = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, v = line.split(":", 1)
            if k in ("VmRSS", "VmHWM", "Threads"):
                d[k] = v.strip()
    return d


def main():
    print("start", status())
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    print("loaded", status())
    print("init", nvml.nvmlInit_v2(), status())
    handle = ctypes.c_void_p()
    print("handle", nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)), status())
    version = ctypes.c_int()
    print("cudaver", nvml.nvmlSystemGetCudaDriverVersion_v2(ctypes.byref(version)), version.value, status())
    with open("/proc/self/maps") as f:
        print("libcuda mapped:", any("libcuda" in line for line in f))
    cur, big = None, []
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5 and ":" not in fields[0]:
                cur = (fields[0], fields[5] if len(fields) >= 6 else "[anon]")
            elif fields[0] == "Rss:" and int(fields[1]) > 1000:
                big.append((int(fields[1]), cur))
    for b in sorted(big, reverse=True)[:8]:
        print("rss", b)
    nvml.nvmlShutdown()


if __name__ == "__main__":
    main()
