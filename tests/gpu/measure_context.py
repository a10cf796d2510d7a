"""measure_context.py: on a machine with a real NVIDIA GPU, measures what one CUDA context costs
in GPU memory, the figure behind the guard's `context-overhead` (gs_guard_context_overhead_default
in guard/guard_limits.c, estimates until this has run; docs/guard.md keeps the table).

    python3 tests/gpu/measure_context.py [GPU_INDEX]

Reads NVML's used memory on the GPU (nvmlDeviceGetMemoryInfo), creates the primary context with
the driver API (cuDevicePrimaryCtxRetain, cuCtxSetCurrent, one 1 MiB allocation so that the context
is fully set up, freed again), reads NVML again, and prints one line per figure:

    FIGURE context_overhead_mib <MiB> gpu=<name> arch_cc=<major.minor> driver=<version>
    FIGURE context_overhead_lazy_mib ...   (the same with CUDA_MODULE_LOADING=LAZY, in a child)

Other processes on the GPU change NVML's used memory too: run it on an idle GPU and run it twice.
Read-only: it changes no GPU setting. Exit status 77 when there is no GPU (no libcuda or NVML)."""
import ctypes as C
import os
import subprocess
import sys


class Mem(C.Structure):
    _fields_ = [("total", C.c_ulonglong), ("free", C.c_ulonglong), ("used", C.c_ulonglong)]


def used_mib(nvml, handle):
    m = Mem()
    if nvml.nvmlDeviceGetMemoryInfo(handle, C.byref(m)) != 0:
        raise SystemExit("nvmlDeviceGetMemoryInfo failed")
    return m.used / (1 << 20)


def measure(index):
    try:
        nvml = C.CDLL("libnvidia-ml.so.1")
        cuda = C.CDLL("libcuda.so.1")
    except OSError as e:
        print(f"SKIP measure_context: {e}")
        sys.exit(77)
    if nvml.nvmlInit_v2() != 0:
        print("SKIP measure_context: nvmlInit_v2 failed")
        sys.exit(77)
    h = C.c_void_p()
    nvml.nvmlDeviceGetHandleByIndex_v2(index, C.byref(h))
    name = C.create_string_buffer(96)
    nvml.nvmlDeviceGetName(h, name, 96)
    drv = C.create_string_buffer(96)
    nvml.nvmlSystemGetDriverVersion(drv, 96)
    before = used_mib(nvml, h)
    assert cuda.cuInit(0) == 0
    dev, ctx, ptr = C.c_int(), C.c_void_p(), C.c_ulonglong()
    # The CUDA ordinal of NVML's GPU `index` is the same when CUDA_VISIBLE_DEVICES is unset.
    assert cuda.cuDeviceGet(C.byref(dev), index) == 0
    major, minor = C.c_int(), C.c_int()
    cuda.cuDeviceGetAttribute(C.byref(major), 75, dev)  # COMPUTE_CAPABILITY_MAJOR
    cuda.cuDeviceGetAttribute(C.byref(minor), 76, dev)
    assert cuda.cuDevicePrimaryCtxRetain(C.byref(ctx), dev) == 0
    assert cuda.cuCtxSetCurrent(ctx) == 0
    assert cuda.cuMemAlloc_v2(C.byref(ptr), C.c_size_t(1 << 20)) == 0
    assert cuda.cuMemFree_v2(ptr) == 0
    after = used_mib(nvml, h)
    return after - before, name.value.decode(), f"{major.value}.{minor.value}", drv.value.decode()


def main():
    index = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    if os.environ.get("GS_MEASURE_CHILD"):
        mib, name, cc, drv = measure(index)
        print(f"{mib:.0f} {name.replace(' ', '_')} {cc} {drv}")
        return
    for label, extra in (("context_overhead_mib", {"CUDA_MODULE_LOADING": "EAGER"}),
                         ("context_overhead_lazy_mib", {"CUDA_MODULE_LOADING": "LAZY"})):
        env = dict(os.environ, GS_MEASURE_CHILD="1", **extra)
        p = subprocess.run([sys.executable, __file__, str(index)], capture_output=True, text=True, env=env)
        if p.returncode == 77:
            print(p.stdout.strip())
            sys.exit(77)
        if p.returncode != 0:
            print(f"FAIL {label}: {p.stderr.strip()[-300:]}")
            sys.exit(1)
        mib, name, cc, drv = p.stdout.split()
        print(f"FIGURE {label} {mib} gpu={name} arch_cc={cc} driver={drv}")


if __name__ == "__main__":
    main()
