"""cudadrv.py: the CUDA driver API through ctypes, shared by tests/gpu/guard_torch.py and
tests/gpu/mps_client.py (imported, never run; they put this directory first on sys.path).

Driver loads libcuda.so.1 and binds the functions a backend names: each is looked up with dlsym
(ctypes' getattr), so a preloaded guard answers the names it hooks. A missing required function
makes the backend unavailable; a missing optional one fails only where it is called. Then: CUresult
checking (CudaError, with the error's name), device 0's primary context, names and attributes,
PTX modules and their functions, allocations and kernel launches.

Also shared: import_torch (torch, or BackendUnavailable saying why not) and matmul_operands (torch's
compute-bound step); wait_for (the go file that starts two processes together) and measure (the
timed loop both scripts measure throughput with).
"""
import ctypes as C
import os
import time

CUDA_ERROR_OUT_OF_MEMORY = 2
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_JIT_ERROR_LOG_BUFFER = 5
CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6

# PTX ISA 7.0 / sm_70: any driver for CUDA >= 11 JIT-compiles it for the GPU at hand.
PTX_HEADER = rb"""
.version 7.0
.target sm_70
.address_size 64
"""


def ptx_entry(name, preds, floats):
    """PTX: the start of kernel NAME(.u64 NAME_out, .u32 NAME_iters), as the scripts' compute
    kernels begin: PREDS predicate and FLOATS f32 registers; %rd2 = NAME_out as a global address,
    %r1 = NAME_iters, %r3 = the thread's index and %f1 = that as a float. The next line follows."""
    return (f"""
.visible .entry {name}(
\t.param .u64 {name}_out,
\t.param .u32 {name}_iters
)
{{
\t.reg .pred \t%p<{preds}>;
\t.reg .b32 \t%r<4>;
\t.reg .f32 \t%f<{floats}>;
\t.reg .b64 \t%rd<3>;

\tld.param.u64 \t%rd1, [{name}_out];
\tld.param.u32 \t%r1, [{name}_iters];
\tcvta.to.global.u64 \t%rd2, %rd1;
\tmov.u32 \t%r3, %tid.x;
\tcvt.rn.f32.u32 \t%f1, %r3;""").encode()


_P = C.POINTER
ARGTYPES = {  # every function either backend binds; all return a CUresult (int)
    "cuInit": [C.c_uint],
    "cuDriverGetVersion": [_P(C.c_int)],
    "cuDeviceGetCount": [_P(C.c_int)],
    "cuDeviceGet": [_P(C.c_int), C.c_int],
    "cuDeviceGetName": [C.c_char_p, C.c_int, C.c_int],
    "cuDeviceGetAttribute": [_P(C.c_int), C.c_int, C.c_int],
    "cuDeviceTotalMem_v2": [_P(C.c_size_t), C.c_int],
    "cuDevicePrimaryCtxRetain": [_P(C.c_void_p), C.c_int],
    "cuDevicePrimaryCtxRelease": [C.c_int],
    "cuCtxSetCurrent": [C.c_void_p],
    "cuCtxSynchronize": [],
    "cuMemGetInfo_v2": [_P(C.c_size_t), _P(C.c_size_t)],
    "cuMemAlloc_v2": [_P(C.c_uint64), C.c_size_t],
    "cuMemFree_v2": [C.c_uint64],
    "cuModuleLoadData": [_P(C.c_void_p), C.c_char_p],
    "cuModuleLoadDataEx": [_P(C.c_void_p), C.c_char_p, C.c_uint, _P(C.c_int), _P(C.c_void_p)],
    "cuModuleGetFunction": [_P(C.c_void_p), C.c_void_p, C.c_char_p],
    "cuLaunchKernel": [C.c_void_p, C.c_uint, C.c_uint, C.c_uint, C.c_uint, C.c_uint, C.c_uint,
                       C.c_uint, C.c_void_p, C.c_void_p, C.c_void_p],
    "cuGetErrorName": [C.c_int, _P(C.c_char_p)],
    "cuGetErrorString": [C.c_int, _P(C.c_char_p)],
}


class BackendUnavailable(Exception):
    pass


class CudaError(Exception):
    pass


def import_torch():
    """torch, when it imports and sees a CUDA device; else BackendUnavailable."""
    try:
        import torch  # noqa: PLC0415 (imported here: the driver backend must work without it)
    except Exception as e:  # ImportError, or a broken install raising anything
        raise BackendUnavailable(f"torch does not import: {e}") from e
    if not torch.cuda.is_available():
        raise BackendUnavailable(f"torch {torch.__version__} sees no CUDA device (built for CUDA {torch.version.cuda})")
    return torch


def matmul_operands(torch, n):
    """For torch's compute-bound step: N x N matrices a, b (random) and c (empty) on the GPU, in
    bf16 (fp16 where the GPU has no bf16), and that type's name."""
    dt = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    a = torch.randn(n, n, device="cuda", dtype=dt)
    b = torch.randn(n, n, device="cuda", dtype=dt)
    c = torch.empty(n, n, device="cuda", dtype=dt)
    return a, b, c, str(dt).replace("torch.", "")


class Driver:
    """libcuda.so.1 with the functions REQUIRED (and those of OPTIONAL it has) bound, device 0."""

    CODE = "({})"  # how a failure message shows the CUresult number

    def __init__(self, required, optional=()):
        try:
            self.lib = C.CDLL("libcuda.so.1")
        except OSError as e:
            raise BackendUnavailable(f"libcuda.so.1 does not load: {e}") from e
        self._f = {}
        for names, needed in ((required, True), (optional, False)):
            for name in names:
                try:
                    fn = getattr(self.lib, name)  # dlsym(libcuda, name): the guard answers hooked names
                except AttributeError as e:
                    if needed:
                        raise BackendUnavailable(f"libcuda.so.1 has no {name}") from e
                    continue
                fn.restype = C.c_int
                fn.argtypes = ARGTYPES[name]
                self._f[name] = fn
        self.dev = C.c_int(0)
        self.ctx = None

    def fn(self, name):
        f = self._f.get(name)
        if f is None:
            raise CudaError(f"libcuda.so.1 has no {name}")
        return f

    def error_text(self, r):
        """The error's name (and its description where cuGetErrorString is bound), or `CUresult R`."""
        name, text = C.c_char_p(), C.c_char_p()
        f = self._f.get("cuGetErrorName")
        if f is None or f(r, C.byref(name)) != 0 or not name.value:
            return f"CUresult {r}"
        g = self._f.get("cuGetErrorString")
        s = g is not None and g(r, C.byref(text)) == 0 and text.value
        return name.value.decode() + (f" ({text.value.decode()})" if s else "")

    def failure(self, r, what):
        return f"{what}: {self.error_text(r)} " + self.CODE.format(r)

    def check(self, r, what):
        if r != 0:
            raise CudaError(self.failure(r, what))

    def init_context(self, count=False, device_what="cuDeviceGet"):
        """cuInit, device 0 (after cuDeviceGetCount says there is one, with COUNT), its primary
        context retained (self.ctx) and made current."""
        self.check(self.fn("cuInit")(0), "cuInit")
        if count:
            n = C.c_int()
            self.check(self.fn("cuDeviceGetCount")(C.byref(n)), "cuDeviceGetCount")
            if n.value < 1:
                raise CudaError("cuDeviceGetCount: no CUDA device visible")
        self.check(self.fn("cuDeviceGet")(C.byref(self.dev), 0), device_what)
        ctx = C.c_void_p()
        self.check(self.fn("cuDevicePrimaryCtxRetain")(C.byref(ctx), self.dev), "cuDevicePrimaryCtxRetain")
        self.ctx = ctx
        self.check(self.fn("cuCtxSetCurrent")(ctx), "cuCtxSetCurrent")

    def driver_version(self):
        """The driver's CUDA version as `12.8`."""
        v = C.c_int()
        self.check(self.fn("cuDriverGetVersion")(C.byref(v)), "cuDriverGetVersion")
        return f"{v.value // 1000}.{v.value % 1000 // 10}"

    def device_name(self):
        """The device's name (bytes)."""
        name = C.create_string_buffer(256)
        self.check(self.fn("cuDeviceGetName")(name, 256, self.dev), "cuDeviceGetName")
        return name.value

    def attribute(self, attr, what="cuDeviceGetAttribute"):
        v = C.c_int()
        self.check(self.fn("cuDeviceGetAttribute")(C.byref(v), attr, self.dev), what)
        return v.value

    def sm_count(self, what="cuDeviceGetAttribute"):
        return self.attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, what)

    def get_function(self, module, name, what="cuModuleGetFunction"):
        """The kernel NAME (str) of a loaded module."""
        fn = C.c_void_p()
        self.check(self.fn("cuModuleGetFunction")(C.byref(fn), module, name.encode()), what)
        return fn

    def mem_alloc(self, n, oom=False):
        """N bytes of device memory as a c_uint64; with OOM, None when the driver says out of memory."""
        p = C.c_uint64()
        r = self.fn("cuMemAlloc_v2")(C.byref(p), n)
        if oom and r == CUDA_ERROR_OUT_OF_MEMORY:
            return None
        self.check(r, f"cuMemAlloc_v2({n})")
        return p

    def sync(self):
        self.check(self.fn("cuCtxSynchronize")(), "cuCtxSynchronize")

    def make_launcher(self, fn, grid, block, args, what):
        """A function that launches kernel FN (asynchronously) on GRID blocks of BLOCK threads with
        ARGS (ctypes values: the function keeps them, and their addresses are the parameters, so a
        change to one's value shows in the next launch); CudaError (WHAT) when a launch fails."""
        launch = self.fn("cuLaunchKernel")
        params = (C.c_void_p * len(args))(*(C.addressof(a) for a in args))

        def one():
            r = launch(fn, grid, 1, 1, block, 1, 1, 0, None, params, None)
            if r != 0:
                self.check(r, what)

        one.keep = (args, params)  # the parameters must outlive the launches
        return one


def wait_for(path, wait, poll):
    """True once PATH exists; False when WAIT seconds pass first. It looks every POLL seconds."""
    end = time.monotonic() + wait
    while not os.path.exists(path):
        if time.monotonic() > end:
            return False
        time.sleep(poll)
    return True


def measure(step, seconds, tick):
    """Calls STEP (it returns the iterations it did) for SECONDS, and TICK(t, rate) about every
    second (t: seconds since the start; rate: iterations/s since the last tick). Returns the
    iterations done and the seconds they took."""
    t0 = last = time.monotonic()
    done = done_last = 0
    while True:
        done += step()
        now = time.monotonic()
        if now - last >= 1.0:
            tick(now - t0, (done - done_last) / (now - last))
            last, done_last = now, done
        if now - t0 >= seconds:
            break
    return done, now - t0
