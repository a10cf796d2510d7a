#!/usr/bin/env python3
"""mps_client.py: the CUDA client of tests/gpu/check_mps.sh (real GPU; it only runs kernels).

    mps_client.py [--backend driver|torch] probe
    mps_client.py [--backend driver] calibrate [--blocks B] [--target-ms MS]
    mps_client.py [--backend driver|torch] run SECONDS [--iters N] [--blocks B] [--go FILE] [--wait S]
                                                   [--label L]

It knows nothing about MPS: whether it runs as an MPS client is decided by its environment
(CUDA_MPS_PIPE_DIRECTORY naming a directory where a control daemon listens, and
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), which the driver reads in cuInit. It reports what it sees
(the SM count, the MPS variables) and how many kernels it completes per second.

Backends:
  driver  (default) ctypes on libcuda.so.1 only: the primary context, a PTX kernel that the driver
          JIT-compiles (cuModuleLoadDataEx), cuLaunchKernel, cuCtxSynchronize. No torch needed.
          The kernel `gs_mps_fma` is compute-bound: every thread runs 4 independent FMA chains,
          16 FMAs per loop trip, ITERS trips, and touches memory only for one store that never
          happens (the result is never 0; the compiler cannot know). A launch has BLOCKS blocks of
          256 threads (default 32768: tens of waves even on the whole GPU, so the SMs a client may
          use, not the wave count, decide its speed). One iteration = one such launch.
  torch   optional: bf16 (or fp16) 8192^3 matrix products; one iteration = one product.

calibrate: on the GPU as this process sees it, picks ITERS so that one launch takes about
TARGET_MS (default 20) ms; check_mps.sh calibrates once, alone and without MPS, and passes the same
ITERS to every client, so all clients run the very same kernel and their rates compare.

run: warms up, prints `ready`, waits for GO_FILE to exist (when given: two clients start
together), then launches for SECONDS, printing a `tick` about every second and a `result` at the
end. Kernels are launched two at a time, then synchronized.

Output: one JSON object per line on stdout, flushed, each with "event":
  probe       backend, device, sms, driver_version, ptx_jit ("ok" or why not), mps_* environment
  calibrated  iters, kernel_ms, blocks, threads_per_block, sms
  ready       label, backend, sms, iters, blocks, desc, mps_* environment
  tick        t (s since go), iters_per_s over the last interval
  result      label, iters_per_s, launches, seconds, tflops, sms, kernel_ms (mean), mps_* environment
  error       message (then a non-zero exit: 1 CUDA error, 3 no go file, 4 backend unavailable)
"""
import argparse
import ctypes as C
import json
import os
import signal
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))  # cudadrv.py, wherever this is run from
from cudadrv import (CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, PTX_HEADER,  # noqa: E402
                     BackendUnavailable, CudaError, Driver, import_torch, matmul_operands, measure, ptx_entry,
                     wait_for)

THREADS = 256
FMA_PER_TRIP = 16

# PTX_HEADER, ptx_entry: cudadrv.py (ISA 7.0, sm_70: Volta and later are the GPUs whose MPS honours
# CUDA_MPS_ACTIVE_THREAD_PERCENTAGE). One loop trip: FMA_PER_TRIP FMAs, 4 on each of 4 independent chains.
FMA_TRIP = b"".join(b"\n\tfma.rn.f32 \t%%f%d, %%f%d, %%f5, %%f6;" % (c, c) for _ in range(4) for c in (1, 2, 3, 4))
PTX = PTX_HEADER + ptx_entry("gs_mps_fma", preds=3, floats=10) + rb"""
	add.f32 	%f2, %f1, 0f3F800000;
	add.f32 	%f3, %f1, 0f40000000;
	add.f32 	%f4, %f1, 0f40400000;
	mov.f32 	%f5, 0f3F7FBE77;
	mov.f32 	%f6, 0f3DCCCCCD;
	mov.u32 	%r2, 0;
	setp.eq.u32 	%p1, %r1, 0;
	@%p1 bra 	$L__done;
$L__trip:""" + FMA_TRIP + rb"""
	add.s32 	%r2, %r2, 1;
	setp.lt.u32 	%p1, %r2, %r1;
	@%p1 bra 	$L__trip;
$L__done:
	add.f32 	%f7, %f1, %f2;
	add.f32 	%f8, %f3, %f4;
	add.f32 	%f9, %f7, %f8;
	setp.eq.f32 	%p2, %f9, 0f00000000;
	@%p2 st.global.f32 	[%rd2], %f9;
	ret;
}
"""


def emit(event, **fields):
    d = {"event": event}
    d.update(fields)
    print(json.dumps(d), flush=True)


def mps_env():
    return {
        "mps_pipe_directory": os.environ.get("CUDA_MPS_PIPE_DIRECTORY", ""),
        "mps_active_thread_percentage": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", ""),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
    }


# ---- the driver through ctypes --------------------------------------------------------------------

class DriverBackend(Driver):
    name = "driver"
    CODE = "[{}]"

    def __init__(self):
        super().__init__(required=(
            "cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetName",
            "cuDeviceGetAttribute", "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease", "cuCtxSetCurrent",
            "cuCtxSynchronize", "cuModuleLoadDataEx", "cuModuleGetFunction", "cuLaunchKernel", "cuMemAlloc_v2",
            "cuMemFree_v2", "cuGetErrorName", "cuGetErrorString"))
        self.module = None
        self.fn_fma = None
        self.out_ptr = None
        self.sms = 0

    def init(self):
        self.init_context(count=True, device_what="cuDeviceGet(0)")
        self.sms = self.sm_count("cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)")

    def describe(self):
        version = self.driver_version()
        return {"device": self.device_name().decode(errors="replace"), "driver_version": version}

    def load(self):
        """JIT-compiles the PTX; CudaError with the JIT's error log when it fails."""
        if self.fn_fma is not None:
            return
        log = C.create_string_buffer(8192)
        opts = (C.c_int * 2)(CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
        vals = (C.c_void_p * 2)(C.cast(log, C.c_void_p), C.c_void_p(len(log)))
        mod = C.c_void_p()
        r = self.fn("cuModuleLoadDataEx")(C.byref(mod), PTX, 2, opts, vals)
        if r != 0:
            jit = log.value.decode(errors="replace").strip().replace("\n", " | ")
            raise CudaError(self.failure(r, "cuModuleLoadDataEx (PTX JIT)") + (f": {jit[:500]}" if jit else ""))
        self.module = mod
        self.fn_fma = self.get_function(mod, "gs_mps_fma", "cuModuleGetFunction(gs_mps_fma)")
        self.out_ptr = self.mem_alloc(256)

    def launcher(self, blocks, iters):
        """A function that launches one gs_mps_fma kernel (asynchronously)."""
        self.load()
        return self.make_launcher(self.fn_fma, blocks, THREADS, (self.out_ptr, C.c_uint32(iters)),
                                  "cuLaunchKernel(gs_mps_fma)")

    def close(self):
        try:
            if self.out_ptr is not None:
                self._f["cuMemFree_v2"](self.out_ptr)
            if self.ctx is not None:
                self._f["cuDevicePrimaryCtxRelease"](self.dev)
        except Exception:  # closing is best effort: the process is about to exit
            pass


# ---- torch (optional) ----------------------------------------------------------------------------

class TorchBackend:
    name = "torch"

    def __init__(self):
        self.torch = import_torch()
        self.sms = 0

    def init(self):
        t = self.torch
        t.cuda.set_device(0)
        t.cuda.synchronize()
        self.sms = t.cuda.get_device_properties(0).multi_processor_count

    def describe(self):
        t = self.torch
        return {"device": t.cuda.get_device_name(0), "torch": t.__version__, "torch_cuda": t.version.cuda}

    def load(self):
        pass

    def step_fn(self):
        t = self.torch
        n = 8192
        a, b, c, dtype = matmul_operands(t, n)

        def one():
            t.matmul(a, b, out=c)

        return one, 2.0 * n ** 3, f"matmul {n}x{n}x{n} {dtype}"

    def sync(self):
        self.torch.cuda.synchronize()

    def close(self):
        pass


def make_backend(which):
    return TorchBackend() if which == "torch" else DriverBackend()


# ---- subcommands ----------------------------------------------------------------------------------

def cmd_probe(be, _args):
    be.init()
    info = be.describe()
    jit = "ok"
    try:
        be.load()
    except CudaError as e:
        jit = f"failed: {e}"
    emit("probe", backend=be.name, sms=be.sms, ptx_jit=jit, **info, **mps_env())
    return 0


def cmd_calibrate(be, args):
    if be.name != "driver":
        emit("error", message="calibrate applies to the driver backend only")
        return 2
    be.init()
    target = args.target_ms / 1000.0
    iters = 64

    def timed(n):
        one = be.launcher(args.blocks, n)
        one()
        be.sync()  # the first launch of a module may do lazy loading: not timed
        ts = []
        for _ in range(3):
            t0 = time.perf_counter()
            one()
            be.sync()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    dt = timed(iters)
    for _ in range(20):  # grow until a launch takes at least a quarter of the target
        if dt >= target / 4 or iters >= 1 << 26:
            break
        iters = min(1 << 26, iters * max(2, min(64, int(target / 4 / max(dt, 1e-6)) + 1)))
        dt = timed(iters)
    iters = max(1, min(1 << 26, int(iters * target / max(dt, 1e-6))))
    dt = timed(iters)
    emit("calibrated", iters=iters, kernel_ms=round(dt * 1000, 3), blocks=args.blocks,
         threads_per_block=THREADS, sms=be.sms, **mps_env())
    return 0


def cmd_run(be, args):
    be.init()
    if be.name == "driver":
        if args.iters < 1:
            emit("error", message="run needs --iters N >= 1 (from calibrate) with the driver backend")
            return 2
        one = be.launcher(args.blocks, args.iters)
        flop = 2.0 * FMA_PER_TRIP * args.iters * args.blocks * THREADS
        desc = f"gs_mps_fma blocks={args.blocks} threads={THREADS} iters={args.iters} fma_per_trip={FMA_PER_TRIP}"
    else:
        one, flop, desc = be.step_fn()
    k = 2  # launches between synchronizations

    def step():
        for _ in range(k):
            one()
        be.sync()
        return k

    for _ in range(2):  # warm up (server connection, module load, clocks)
        step()
    emit("ready", label=args.label, backend=be.name, sms=be.sms, iters=args.iters, blocks=args.blocks, desc=desc,
         **mps_env())
    if args.go and not wait_for(args.go, args.wait, 0.01):
        emit("error", message=f"no go file {args.go} after {args.wait} s")
        return 3
    done, el = measure(step, args.seconds,
                       lambda t, rate: emit("tick", label=args.label, t=round(t, 3), iters_per_s=round(rate, 4)))
    rate = done / el
    emit("result", label=args.label, backend=be.name, iters_per_s=round(rate, 4), launches=done,
         seconds=round(el, 3), tflops=round(rate * flop / 1e12, 3), kernel_ms=round(1000.0 * el / done, 3),
         sms=be.sms, **mps_env())
    return 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--backend", choices=("driver", "torch"), default="driver")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("probe")
    s = sub.add_parser("calibrate")
    s.add_argument("--blocks", type=int, default=32768)
    s.add_argument("--target-ms", type=float, default=20.0)
    s = sub.add_parser("run")
    s.add_argument("seconds", type=float)
    s.add_argument("--iters", type=int, default=0, help="FMA loop trips per thread (driver backend; from calibrate)")
    s.add_argument("--blocks", type=int, default=32768)
    s.add_argument("--go", default=None, help="start measuring once this file exists")
    s.add_argument("--wait", type=float, default=120.0, help="seconds to wait for the go file")
    s.add_argument("--label", default="")
    args = p.parse_args(argv)
    if getattr(args, "blocks", 1) < 1 or getattr(args, "blocks", 1) > 2**31 - 1:
        p.error("--blocks must be in 1..2^31-1")

    # SIGTERM (timeout, the shell's cleanup): leave through Python, so the context is released
    # and an MPS server sees its client go.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        be = make_backend(args.backend)
    except BackendUnavailable as e:
        emit("error", message=f"backend {args.backend} unavailable: {e}")
        return 4
    cmds = {"probe": cmd_probe, "calibrate": cmd_calibrate, "run": cmd_run}
    try:
        return cmds[args.cmd](be, args)
    except CudaError as e:
        emit("error", message=str(e))
        return 1
    except Exception as e:  # torch raises RuntimeError for CUDA failures
        emit("error", message=f"{type(e).__name__}: {e}")
        return 1
    finally:
        be.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
