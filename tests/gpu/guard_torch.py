#!/usr/bin/env python3
"""guard_torch.py: the process side of tests/gpu/check_guard.sh (real GPU, read-only).

    guard_torch.py [--backend auto|torch|driver] oom QUOTA
    guard_torch.py [--backend ...] hold BYTES SECONDS
    guard_torch.py [--backend ...] launch N [ROUNDS]
    guard_torch.py [--backend ...] busy SECONDS [GO_FILE]
    guard_torch.py --backend driver probe

check_guard.sh runs these with and without `gpuslice exec`; this file only measures and prints.
Sizes take the suffixes gpuslice takes (10GiB, 512MiB, plain bytes).

Backends:
  torch   PyTorch, the workload the guard is for. cudart fetches every driver function through
          cuGetProcAddress, so this exercises the guard's cuGetProcAddress layer.
  driver  ctypes on libcuda.so.1 (cuMemAlloc_v2, cuMemGetInfo_v2, and cuLaunchKernel on hand-written
          PTX that the driver JIT-compiles). ctypes looks each function up with dlsym, so this
          exercises the guard's dlsym layer, and it needs nothing but the driver: the memory and
          launch checks still run where torch is missing.
  auto    torch if it imports, else driver.

Output (stdout, flushed line by line):
  oom     `PASS|FAIL name: detail` and `FIGURE name value unit` lines, judged here.
  hold    `held N` or `oom N` (N the bytes asked for), then sleeps SECONDS holding them.
  launch  `launches_per_s R rounds R1 R2 ...` (R the median round).
  busy    `ready ...`, then `tick T iters_per_s X tflops Y` about every second, and at the end
          `mean iters_per_s X tflops Y seconds S`.
Any other failure: `error ...` on stdout and a non-zero exit.
"""
import argparse
import ctypes as C
import os
import re
import signal
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))  # cudadrv.py, wherever this is run from
from cudadrv import (PTX_HEADER, BackendUnavailable, CudaError, Driver,  # noqa: E402
                     import_torch, matmul_operands, measure, ptx_entry, wait_for)

# Before torch is imported (the caching allocator reads it when CUDA is first used): without
# expandable segments every 256 MiB tensor is exactly one cudaMalloc (cuMemAlloc_v2) of 256 MiB
# (blocks of 10 MiB and more are rounded up to 2 MiB, which 256 MiB already is), so the bytes the
# test allocated are the bytes the guard reserved and the out-of-memory point is exact. With
# expandable segments (an option, and the default in some builds) the allocator reserves address
# space and maps physical memory into it with cuMemCreate/cuMemMap in segment-sized pieces as it
# grows; the OOM point then depends on the segment granularity and on the allocator's own
# unmap-and-retry on failure, and the check would measure the allocator, not the guard.
os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:False"
os.environ["PYTORCH_ALLOC_CONF"] = "expandable_segments:False"  # the name torch >= 2.9 prefers

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40
CHUNK = 256 * MiB

_UNITS = {"": 1, "B": 1, "K": KiB, "KiB": KiB, "KB": 1000, "M": MiB, "MiB": MiB, "MB": 1000**2,
          "G": GiB, "GiB": GiB, "GB": 1000**3, "T": TiB, "TiB": TiB, "TB": 1000**4}


def parse_size(s):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([A-Za-z]*)", s.strip())
    if not m or m.group(2) not in _UNITS:
        raise argparse.ArgumentTypeError(f"'{s}' is not a size such as 10GiB, 512MiB or 1073741824")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def out(*args):
    print(*args, flush=True)


def verdict(ok, name, detail):
    out(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")


def gib(n):
    return f"{n / GiB:.3f}"


class Limits:
    """The guard's limits file (GPUSLICE_GUARD_CONFIG; format in guard/guard_limits.h)."""

    def __init__(self, path):
        self.path = path
        self.overhead = 0
        self.fail_closed = True
        self.devices = {}  # ordinal -> (vram bytes, compute percent)
        with open(path, encoding="utf-8") as f:
            for line in f:
                w = line.split("#", 1)[0].split()
                if len(w) == 2 and w[0] == "context-overhead":
                    self.overhead = int(w[1])
                elif len(w) == 2 and w[0] == "on-error":
                    self.fail_closed = w[1] != "open"
                elif len(w) == 5 and w[0] == "device":
                    self.devices[int(w[1])] = (int(w[3]), int(w[4]))

    @staticmethod
    def current():
        path = os.environ.get("GPUSLICE_GUARD_CONFIG")
        if not path:
            return None
        try:
            return Limits(path)
        except OSError:
            return None


# ---- torch ---------------------------------------------------------------------------------------

class TorchBackend:
    name = "torch"

    def __init__(self):
        self.torch = import_torch()
        self._oom_type = getattr(self.torch.cuda, "OutOfMemoryError", None)

    def describe(self):
        t = self.torch
        return f"torch={t.__version__} cuda={t.version.cuda} device={t.cuda.get_device_name(0)}"

    def init(self):
        self.torch.cuda.init()
        self.torch.cuda.set_device(0)
        self.torch.cuda.synchronize()

    def _is_oom(self, e):
        if self._oom_type is not None and isinstance(e, self._oom_type):
            return True
        return isinstance(e, RuntimeError) and "out of memory" in str(e).lower()

    def mem_info(self):
        return self.torch.cuda.mem_get_info()

    def device_total(self):
        return self.torch.cuda.get_device_properties(0).total_memory

    def alloc(self, n):
        """Returns a handle, or None on out-of-memory."""
        try:
            return self.torch.empty(n, dtype=self.torch.uint8, device="cuda")
        except Exception as e:
            if self._is_oom(e):
                return None
            raise

    def free(self, h):
        del h

    def release_all(self):
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()

    def sync(self):
        self.torch.cuda.synchronize()

    def tiny_launcher(self):
        x = self.torch.zeros(1, device="cuda")
        add = x.add_

        def f():  # returns None: never turn the tensor into a bool (that would sync)
            add(1)

        return f

    def busy_step(self):
        """A compute-bound step: 8 bf16 (or fp16) 8192^3 matrix products, then a sync."""
        t = self.torch
        n, k = 8192, 8
        a, b, c, dtype = matmul_operands(t, n)

        def step():
            for _ in range(k):
                t.matmul(a, b, out=c)
            t.cuda.synchronize()
            return k

        return step, 2.0 * n ** 3, f"matmul {n}x{n}x{n} {dtype}, {k} per sync"


# ---- the driver through ctypes --------------------------------------------------------------------

# gs_noop: an empty kernel. gs_spin: each thread runs a dependent FMA chain ITERS long and stores
# the result (so it cannot be optimised away). PTX_HEADER, ptx_entry: cudadrv.py (ISA 7.0, sm_70).
PTX = PTX_HEADER + rb"""
.visible .entry gs_noop()
{
	ret;
}
""" + ptx_entry("gs_spin", preds=2, floats=4) + rb"""
	mov.f32 	%f2, 0f3F7FBE77;
	mov.f32 	%f3, 0f3DCCCCCD;
	mov.u32 	%r2, 0;
$L__spin:
	fma.rn.f32 	%f1, %f1, %f2, %f3;
	add.s32 	%r2, %r2, 1;
	setp.lt.u32 	%p1, %r2, %r1;
	@%p1 bra 	$L__spin;
	st.global.f32 	[%rd2], %f1;
	ret;
}
"""


class DriverBackend(Driver):
    name = "driver"

    def __init__(self):
        super().__init__(
            required=("cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuCtxSynchronize",
                      "cuMemGetInfo_v2", "cuDeviceTotalMem_v2", "cuMemAlloc_v2", "cuMemFree_v2"),
            optional=(  # launch, busy and descriptions only
                "cuDeviceGetName", "cuDeviceGetAttribute", "cuDriverGetVersion", "cuModuleLoadData",
                "cuModuleGetFunction", "cuLaunchKernel", "cuGetErrorName"))
        self.ptrs = []
        self.module = None

    def describe(self):
        parts = []
        try:
            parts.append(f"driver-api={self.driver_version()}")
            parts.append(f"device={self.device_name().decode().replace(' ', '_')}")
        except CudaError as e:
            parts.append(f"({e})")
        return " ".join(parts)

    def init(self):
        self.init_context()

    def mem_info(self):
        free, total = C.c_size_t(), C.c_size_t()
        self.check(self.fn("cuMemGetInfo_v2")(C.byref(free), C.byref(total)), "cuMemGetInfo_v2")
        return free.value, total.value

    def device_total(self):
        t = C.c_size_t()
        self.check(self.fn("cuDeviceTotalMem_v2")(C.byref(t), self.dev), "cuDeviceTotalMem_v2")
        return t.value

    def alloc(self, n):
        p = self.mem_alloc(n, oom=True)
        if p is None:
            return None
        self.ptrs.append(p.value)
        return p.value

    def free(self, h):
        self.check(self.fn("cuMemFree_v2")(h), "cuMemFree_v2")
        self.ptrs.remove(h)

    def release_all(self):
        for p in list(self.ptrs):
            self.free(p)

    def function(self, name):
        if self.module is None:
            mod = C.c_void_p()
            self.check(self.fn("cuModuleLoadData")(C.byref(mod), PTX), "cuModuleLoadData (PTX JIT)")
            self.module = mod
        return self.get_function(self.module, name)

    def tiny_launcher(self):
        fn = self.function("gs_noop")
        launch = self.fn("cuLaunchKernel")
        return lambda: launch(fn, 1, 1, 1, 1, 1, 1, 0, None, None, None)

    def busy_step(self):
        fn = self.function("gs_spin")
        grid, block = self.sm_count() * 8, 256
        out_ptr = C.c_uint64(self.alloc(4) or 0)
        if not out_ptr.value:
            raise CudaError("cannot allocate 4 bytes")
        iters = C.c_uint32(1 << 12)  # the calibration below changes it: the launches see the new value
        one = self.make_launcher(fn, grid, block, (out_ptr, iters), "cuLaunchKernel(gs_spin)")
        one()  # the first launch loads the module (lazy loading): not part of the calibration
        self.sync()
        # Calibrate: about 10 ms a kernel when alone on the GPU.
        for _ in range(8):
            t0 = time.perf_counter()
            one()
            self.sync()
            dt = time.perf_counter() - t0
            if dt > 0.008 or iters.value >= 1 << 30:
                break
            iters.value = min(1 << 30, iters.value * max(2, min(16, int(0.010 / max(dt, 1e-5)))))
        k = 4

        def step():
            for _ in range(k):
                one()
            self.sync()
            return k

        # One FMA = 2 FLOP per thread per iteration.
        return step, 2.0 * grid * block * iters.value, f"gs_spin grid={grid} block={block} iters={iters.value}, {k} per sync"


def make_backend(which):
    if which == "torch":
        return TorchBackend()
    if which == "driver":
        return DriverBackend()
    try:
        return TorchBackend()
    except BackendUnavailable:
        return DriverBackend()


# ---- subcommands ----------------------------------------------------------------------------------

def cmd_oom(be, args):
    quota = args.quota
    tag = f"oom_{be.name}"
    lim = Limits.current()
    overhead = lim.overhead if lim else 0
    if lim is None:
        out(f"FAIL {tag}_limits: GPUSLICE_GUARD_CONFIG is not set or unreadable: not running under the guard")
    elif lim.devices.get(0, (0, 0))[0] != quota:
        out(f"FAIL {tag}_limits: the limits file {lim.path} gives ordinal 0 {lim.devices.get(0)} "
            f"(vram, compute %), the check expects {quota} B")
    be.init()
    free, total = be.mem_info()
    dev_total = be.device_total()
    out(f"FIGURE {tag}_mem_get_info_total {gib(total)} GiB")
    out(f"FIGURE {tag}_mem_get_info_free {gib(free)} GiB")
    what = "torch.cuda.get_device_properties(0).total_memory" if be.name == "torch" else "cuDeviceTotalMem_v2"
    out(f"FIGURE {tag}_device_total_memory {gib(dev_total)} GiB")
    out(f"# {tag}: mem_get_info total={total} free={free}; {what}={dev_total}; quota={quota}; "
        f"context-overhead={overhead}")
    # docs/guard.md: cuMemGetInfo reports the quota as the total, and free = total - what the
    # container has reserved; the primary context counts `context-overhead` bytes while retained.
    verdict(total == quota, f"{tag}_total",
            f"mem_get_info total {total} B ({gib(total)} GiB), quota {quota} B")
    hi = quota - overhead
    lo = hi - CHUNK
    verdict(lo <= free <= hi, f"{tag}_free",
            f"mem_get_info free {free} B, expected quota - context-overhead ({overhead} B) = {hi} B "
            f"(at most 256 MiB less for the framework's own early allocations)")

    held, allocated, oom = [], 0, False
    ceiling = quota + 4 * GiB  # a guard that does not stop us: stop well before the card is full
    t0 = time.monotonic()
    while allocated < ceiling:
        h = be.alloc(CHUNK)
        if h is None:
            oom = True
            break
        held.append(h)
        allocated += CHUNK
    dt = time.monotonic() - t0
    out(f"FIGURE {tag}_allocated_at_oom {gib(allocated)} GiB")
    if not oom:
        verdict(False, f"{tag}_limit", f"no out-of-memory error after {gib(allocated)} GiB in 256 MiB chunks "
                                       f"(quota {gib(quota)} GiB): the quota is not enforced")
    else:
        ok = quota - GiB < allocated <= quota
        verdict(ok, f"{tag}_limit",
                f"out-of-memory after {allocated} B = {allocated // CHUNK} x 256 MiB ({gib(allocated)} GiB) "
                f"in {dt:.2f} s; expected in ({gib(quota - GiB)}, {gib(quota)}] GiB")
    try:
        free2, _ = be.mem_info()
        out(f"FIGURE {tag}_free_at_oom {gib(free2)} GiB")
    except Exception as e:  # report, do not judge
        out(f"# {tag}: mem_get_info after the OOM failed: {e}")
    if be.name == "torch":
        out(f"FIGURE {tag}_torch_reserved {gib(be.torch.cuda.memory_reserved())} GiB")
    for h in held:
        be.free(h)
    held.clear()
    be.release_all()
    return 0


def cmd_hold(be, args):
    be.init()
    h = be.alloc(args.bytes)
    if h is None:
        out(f"oom {args.bytes}")
        return 0
    be.sync()
    out(f"held {args.bytes}")
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        time.sleep(min(0.2, max(0.0, end - time.monotonic())))
    be.free(h)
    be.release_all()
    return 0


def cmd_launch(be, args):
    be.init()
    f = be.tiny_launcher()
    bad = 0
    for _ in range(min(2000, args.n)):
        r = f()
        if r:
            bad = r
    be.sync()
    rates = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        for _ in range(args.n):
            r = f()  # None (torch) or a CUresult (driver)
            if r:
                bad = r
        be.sync()
        rates.append(args.n / (time.perf_counter() - t0))
    if bad:
        out(f"error a launch returned CUresult {bad}")
        return 1
    out(f"launches_per_s {statistics.median(rates):.1f} rounds {' '.join(f'{r:.0f}' for r in rates)}")
    return 0


def cmd_busy(be, args):
    be.init()
    step, flop, desc = be.busy_step()
    for _ in range(3):
        step()
    out(f"ready backend={be.name} {desc}")
    if args.go and not wait_for(args.go, args.wait, 0.02):
        out(f"error no go file {args.go} after {args.wait} s")
        return 3
    done, el = measure(step, args.seconds,
                       lambda t, rate: out(f"tick {t:.2f} iters_per_s {rate:.3f} tflops {rate * flop / 1e12:.2f}"))
    out(f"mean iters_per_s {done / el:.3f} tflops {done * flop / el / 1e12:.2f} seconds {el:.2f}")
    return 0


def cmd_probe(be, _args):
    be.init()
    desc = be.describe()
    free, total = be.mem_info()
    jit = "ok"
    if isinstance(be, DriverBackend):
        try:
            be.function("gs_noop")
            be.function("gs_spin")
        except CudaError as e:
            jit = f"failed ({e})"
    out(f"probe backend={be.name} {desc} mem_total={total} mem_free={free} ptx_jit={jit}")
    return 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--backend", choices=("auto", "torch", "driver"), default="auto")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("oom")
    s.add_argument("quota", type=parse_size)
    s = sub.add_parser("hold")
    s.add_argument("bytes", type=parse_size)
    s.add_argument("seconds", type=float)
    s = sub.add_parser("launch")
    s.add_argument("n", type=int)
    s.add_argument("rounds", type=int, nargs="?", default=5)
    s = sub.add_parser("busy")
    s.add_argument("seconds", type=float)
    s.add_argument("go", nargs="?", default=None)
    s.add_argument("--wait", type=float, default=120.0, help="seconds to wait for GO_FILE")
    sub.add_parser("probe")
    args = p.parse_args(argv)

    # SIGTERM (timeout, the shell's cleanup): exit through Python so the guard's atexit hook gives
    # this process's bytes back at once.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        be = make_backend(args.backend)
    except BackendUnavailable as e:
        out(f"error backend {args.backend} unavailable: {e}")
        return 4
    cmds = {"oom": cmd_oom, "hold": cmd_hold, "launch": cmd_launch, "busy": cmd_busy, "probe": cmd_probe}
    try:
        return cmds[args.cmd](be, args)
    except CudaError as e:
        out(f"error {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
