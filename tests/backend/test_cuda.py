"""The CUDA runtime where no GPU may be present: importing it, the missing-library error,
and its ctypes plumbing against a fake libcuda/libnvrtc written in Python (argument order,
launch geometry, copies, error names, the NVRTC log in a CompileError). Where `nvcc` is
installed, the CUDA C the renderer writes is also compiled for real (syntax and PTX asm)."""
import ctypes
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from lazyten import Tensor
import runtimes
import runtimes.base
from runtimes import CompileError
import runtimes.cuda as cuda

NVCC = shutil.which("nvcc") or next(
    (p for p in (os.path.join(os.environ.get("CUDA_PATH", "/usr/local/cuda"), "bin", "nvcc"),)
     if os.path.exists(p)), None)


def test_import_needs_no_cuda_library():
    assert callable(cuda.make_runtime) and cuda.CUDARuntime.__name__ == "CUDARuntime"


def test_missing_library_names_it():
    with pytest.raises(RuntimeError, match=r"libnot_a_cuda_lib\.so \(testing\) not found"):
        cuda.load_library("not_a_cuda_lib", "testing")


@pytest.mark.parametrize("missing", ["cuda", "nvrtc"])
def test_make_runtime_says_which_library_is_missing(monkeypatch, missing):
    real, fakes = cuda.load_library, {"cuda": _fake_cuda({}), "nvrtc": _fake_nvrtc([])}

    def load(stem, what):
        return real("not_installed_" + stem, what) if stem == missing else fakes[stem]
    monkeypatch.setattr(cuda, "load_library", load)
    with pytest.raises(RuntimeError, match=f"libnot_installed_{missing}"):
        cuda.make_runtime("CUDA")


# ---- a fake driver and NVRTC: plain Python functions behind the ctypes names ----
class _Fake:
    """Functions are attributes so _API can set argtypes on them; `calls` records them."""

    def __init__(self, **fns):
        self.calls = []
        for name, fn in fns.items():
            setattr(self, name, self._recording(name, fn))

    def _recording(self, name, fn):
        def call(*args):
            self.calls.append((name, args))
            return fn(*args) or 0
        return call


# the fake device's attributes (cuda.h numbers): an sm_89 with CUDA's usual limits
ATTRIBUTES = {75: 8, 76: 9, 1: 1024, 2: 1024, 3: 1024, 4: 64, 5: 2**31 - 1, 6: 65535,
              7: 65535, 8: 48 << 10, 10: 32}


def _set(ref, value):
    ref._obj.value = value  # a byref() argument: write through it


_GET_CURRENT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))
_SET_CURRENT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                           ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p))


def _as_c_functions(fake, launches: list, current: list, status: list) -> None:
    """The three driver functions the native launch calls (D99) as C functions (ctypes
    callbacks), recorded as the others are. A launch reads its kernel's two buffers (the
    tests' kernels all take two) and returns `status[0]`."""
    def launch(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        args = [ctypes.cast(params[i], ctypes.POINTER(ctypes.c_uint64)).contents.value
                for i in range(2)]
        launches.append(((gx, gy, gz), (bx, by, bz), args))
        return status[0]

    def get(ref):
        ref[0] = current[0]

    fake.cuLaunchKernel = _LAUNCH(fake._recording("cuLaunchKernel", launch))
    fake.cuCtxGetCurrent = _GET_CURRENT(fake._recording("cuCtxGetCurrent", get))
    fake.cuCtxSetCurrent = _SET_CURRENT(fake._recording(
        "cuCtxSetCurrent", lambda c: current.__setitem__(0, c or 0)))


def _fake_cuda(memory: dict, native: bool = False):
    def alloc(ref, nbytes):
        address = 0x1000 * (len(memory) + 1)
        memory[address] = bytearray(nbytes)
        _set(ref, address)

    def htod(dest, src, n):
        memory[dest][:n] = src[:n]

    def dtoh(dest, src, n):
        ctypes.memmove(dest, bytes(memory[src][:n]), n)

    def dtod(dest, src, n):  # src may point inside an allocation
        base = max(a for a in memory if a <= src)
        memory[dest][:n] = memory[base][src - base:src - base + n]

    def launch(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        n = len(params)  # the argument pointers, read while the launch is in progress
        args = [ctypes.cast(params[i], ctypes.POINTER(ctypes.c_uint64)).contents.value
                for i in range(n)]
        launches.append(((gx, gy, gz), (bx, by, bz), args))
    launches, current = [], [0]
    fake = _Fake(
        cuInit=lambda flags: None, cuDeviceGetCount=lambda ref: _set(ref, 1),
        cuDeviceGet=lambda ref, i: _set(ref, i),
        cuDeviceGetAttribute=lambda ref, attr, dev: _set(ref, ATTRIBUTES[attr]),
        cuDevicePrimaryCtxRetain=lambda ref, dev: _set(ref, 77),
        cuCtxSetCurrent=lambda c: current.__setitem__(0, c.value if hasattr(c, "value") else c),
        cuCtxGetCurrent=lambda ref: _set(ref, current[0]),
        cuCtxSynchronize=lambda: None, cuMemAlloc_v2=alloc,
        cuMemFree_v2=lambda address: None if memory.pop(address, None) is not None else 1,
        cuMemcpyHtoD_v2=htod, cuMemcpyDtoH_v2=dtoh, cuMemcpyDtoD_v2=dtod,
        cuModuleLoadData=lambda ref, image: _set(ref, 5),
        cuModuleGetFunction=lambda ref, module, name: _set(ref, 6),
        cuLaunchKernel=launch, cuEventCreate=lambda ref, flags: _set(ref, 9),
        cuEventRecord=lambda event, stream: None, cuEventSynchronize=lambda event: None,
        cuEventElapsedTime=lambda ref, start, end: _set(ref, 1.5),
        cuGetErrorName=lambda status, ref: _set(ref, b"CUDA_ERROR_INVALID_VALUE"))
    graphs: dict = {"nodes": {}}

    def add_node(ref, graph, deps, ndeps, params):
        node = 100 + len(graphs["nodes"])
        graphs["nodes"][node] = _node(params._obj)
        _set(ref, node)

    def set_node(exec_, node, params):
        graphs["nodes"][node.value] = _node(params._obj)

    def graph_launch(exec_, stream):
        launches.extend(graphs["nodes"].values())
    for name, fn in dict(
            cuGraphCreate=lambda ref, flags: _set(ref, 50),
            cuGraphAddKernelNode_v2=add_node,
            cuGraphInstantiateWithFlags=lambda ref, graph, flags: _set(ref, 60),
            cuGraphExecKernelNodeSetParams_v2=set_node, cuGraphLaunch=graph_launch,
            cuGraphExecDestroy=lambda e: None, cuGraphDestroy=lambda g: None).items():
        setattr(fake, name, fake._recording(name, fn))
    fake.launches, fake.status = launches, [0]
    if native:
        _as_c_functions(fake, launches, current, fake.status)
    return fake


def _node(p, arity: int = 2) -> tuple:
    """A kernel node's launch as the fake driver keeps it: its `arity` arguments (the
    kernels of the graph test take two buffers) are copied when the node is added or set,
    as the real driver does."""
    args = [ctypes.cast(p.kernelParams[i], ctypes.POINTER(ctypes.c_uint64)).contents.value
            for i in range(arity)]
    return ((p.gridDimX, p.gridDimY, p.gridDimZ), (p.blockDimX, p.blockDimY, p.blockDimZ),
            args)


def _fake_nvrtc(sources: list):
    log = b"kernel.cu(1): error: identifier \"nope\" is undefined\0"

    def compile_program(prog, n, options):
        opts = [options[i].decode() for i in range(n)]
        sources[-1] = (sources[-1][0], opts)
        return 6 if b"nope" in sources[-1][0] else 0  # NVRTC_ERROR_COMPILATION

    def write(data):
        return lambda prog, out: ctypes.memmove(out, data, len(data)) and None
    return _Fake(
        nvrtcVersion=lambda major, minor: (_set(major, 12), _set(minor, 4)) and None,
        nvrtcCreateProgram=lambda ref, src, name, n, h, i: sources.append((src, None)),
        nvrtcCompileProgram=compile_program, nvrtcDestroyProgram=lambda ref: None,
        nvrtcGetProgramLogSize=lambda prog, ref: _set(ref, len(log)),
        nvrtcGetProgramLog=write(log), nvrtcGetCUBINSize=lambda prog, ref: _set(ref, 5),
        nvrtcGetCUBIN=write(b"CUBIN"),
        nvrtcGetErrorString=lambda status: b"NVRTC_ERROR_COMPILATION")


@pytest.fixture
def fake_cuda(monkeypatch, tmp_path):
    return _fake_runtime(monkeypatch, tmp_path, native=False)


@pytest.fixture(params=["ctypes", "native"])
def launching_cuda(request, monkeypatch, tmp_path):
    """The fake device launching through ctypes, or through the native `cuda_launch`
    builtin (D99: its driver functions are C functions there)."""
    runtime, memory, sources = _fake_runtime(monkeypatch, tmp_path, request.param == "native")
    assert (runtime.native is not None) == (request.param == "native")
    return runtime, memory, sources


def _fake_runtime(monkeypatch, tmp_path, native: bool):
    monkeypatch.setattr(runtimes.base, "cache_dir", lambda: tmp_path)  # keep fake CUBINs out
    # programs loaded on another test's fake device must not be found by name
    import lazyten.programs
    import lazyten.schedule_cache
    monkeypatch.setattr(lazyten.programs, "_PROGRAMS", type(lazyten.programs._PROGRAMS)())
    monkeypatch.setattr(lazyten.schedule_cache, "_SCHEDULES", {})
    memory, sources = {}, []
    fakes = {"cuda": _fake_cuda(memory, native), "nvrtc": _fake_nvrtc(sources)}
    monkeypatch.setattr(cuda, "load_library", lambda stem, what: fakes[stem])
    runtime = cuda.make_runtime("CUDA:0")
    return runtime, memory, sources


def test_device_setup_and_compile_options(fake_cuda):
    runtime, _, sources = fake_cuda
    assert runtime.arch == "89" and runtime.compiler.key == "cuda-nvrtc12.4-sm_89"
    assert runtime.compiler.compile('extern "C" __global__ void k() {}') == b"CUBIN"
    assert sources[-1][1] == ["--gpu-architecture=sm_89"]


def test_the_target_follows_the_device_limits(fake_cuda, monkeypatch):
    """Issue 16: the launch configuration comes from the device: a device with 128
    work-items per group, 16 KB of shared memory and 32 in dim 2 gets a Target saying so,
    and its kernels' work-groups keep within it."""
    runtime, _, _ = fake_cuda
    assert runtime.renderer.target == cuda.gpu("CUDA", max_group=1024, warp=32)  # the usual
    monkeypatch.setitem(ATTRIBUTES, 1, 128)
    monkeypatch.setitem(ATTRIBUTES, 4, 32)
    monkeypatch.setitem(ATTRIBUTES, 8, 16 << 10)
    small = runtime.target()
    assert (small.local_size, small.local_memory, small.max_local, small.max_group) == \
        (128, 16 << 10, (1024, 1024, 32), 128)


def test_compile_error_carries_nvrtc_log_and_source(fake_cuda):
    runtime, _, _ = fake_cuda
    with pytest.raises(CompileError) as info:
        runtime.compiler.compile_checked("k", 'extern "C" __global__ void k() { nope; }')
    assert "NVRTC_ERROR_COMPILATION" in str(info.value) and "undefined" in info.value.log
    assert "   1 extern" in str(info.value)


def test_copies_and_driver_errors(fake_cuda):
    runtime, memory, _ = fake_cuda
    buf = runtime.allocator.alloc(16)
    runtime.allocator.copyin(buf, memoryview(np.arange(4, dtype=np.float32)).cast("B"))
    out = np.zeros(4, np.float32)
    runtime.allocator.copyout(memoryview(out).cast("B"), buf)
    np.testing.assert_array_equal(out, np.arange(4))
    run = runtime.allocator.alloc(8)  # a run of device memory copied within it (D105)
    runtime.allocator.copy_within(run, buf, 4, 8)
    runtime.allocator.copyout(memoryview(out[:2]).cast("B"), run)
    np.testing.assert_array_equal(out[:2], [1, 2])
    runtime.allocator._free(buf)
    with pytest.raises(RuntimeError, match=r"cuMemFree_v2 failed: CUDA_ERROR_INVALID_VALUE"):
        runtime.allocator._free(buf)  # the fake fails a double free


def test_tensor_program_launch_geometry(launching_cuda, monkeypatch):
    runtime, memory, sources = launching_cuda
    monkeypatch.setitem(runtimes._OPEN, "CUDA:7", runtime)  # a name no real device uses here
    x = Tensor(np.ones((3, 1000), np.float32), device="CUDA:7")
    (x * 2).sum(axis=1).realize()
    grid, block, pointers = runtime.cu.lib.launches[-1]
    assert grid == (3, 1, 1) and block == (256, 1, 1)  # one work-group per row: group reduce
    assert len(pointers) == 2 and all(p in memory for p in pointers)  # both device buffers
    src = sources[-1][0].decode()
    # named after its body (D42): the kind's letter and a hash
    assert re.search(r'extern "C" __global__ void r_[0-9a-f]{16}\(', src) and "__syncthreads();" in src


def test_a_launch_makes_few_driver_calls(launching_cuda, monkeypatch):
    """Issue 16: a replayed kernel cost 27 us on an H100, four driver calls through a
    checking wrapper. A launch not timed records no events; the context is set only where
    another is current."""
    runtime, memory, _ = launching_cuda
    monkeypatch.setitem(runtimes._OPEN, "CUDA:7", runtime)
    x = Tensor(np.ones(1000, np.float32), device="CUDA:7").realize()
    (x + 1).realize()  # (the same number each time: a changing one becomes an input, D104)
    calls = runtime.cu.lib.calls
    calls.clear()
    (x + 1).realize()
    names = [name for name, _ in calls]
    assert "cuEventRecord" not in names and names.count("cuLaunchKernel") == 1, names
    assert "cuCtxSetCurrent" not in names, names  # already current
    runtime.cu.lib.cuCtxSetCurrent(c_void(0))  # another context made current
    calls.clear()
    (x + 1).realize()
    assert [n for n, _ in calls].count("cuCtxSetCurrent") >= 1
    _, _, pointers = runtime.cu.lib.launches[-1]
    assert len(pointers) == 2 and all(p in memory for p in pointers)


@pytest.mark.parametrize("graph", [1, 0])
def test_a_jit_replays_as_one_cuda_graph(launching_cuda, monkeypatch, graph):
    """Item 4 of issue 16: a replayed capture is one graph launch whose nodes follow each
    call's input and output buffers; JIT_GRAPH=0 launches the kernels one by one. Both
    launch the same kernels on the same buffers."""
    from lazyten import Context, jit
    runtime, memory, _ = launching_cuda
    monkeypatch.setitem(runtimes._OPEN, "CUDA:7", runtime)

    @jit
    def f(t):
        return ((t * 2).realize() + 1).realize()
    xs = [Tensor(np.full(1000, i, np.float32), device="CUDA:7").realize() for i in range(4)]
    with Context(JIT_GRAPH=graph):
        for x in xs[:2]:
            f(x)
        for x in xs[2:]:
            runtime.cu.lib.launches.clear()
            out = f(x)
            launches = runtime.cu.lib.launches
            assert len(launches) == 2, launches
            (_, _, first), (_, _, second) = launches
            assert first[1] == x.lazydata.realized._buf  # this call's input
            assert second[1] == first[0] and second[0] == out.lazydata.realized._buf
    names = [name for name, _ in runtime.cu.lib.calls]
    assert ("cuGraphLaunch" in names) == bool(graph), names


def test_a_failed_native_launch_raises_with_the_error_name(launching_cuda, monkeypatch):
    runtime, _, _ = launching_cuda
    monkeypatch.setitem(runtimes._OPEN, "CUDA:7", runtime)
    x = Tensor(np.ones(1000, np.float32), device="CUDA:7").realize()
    for _ in range(3):  # eager, then its plan (the launcher)
        (x + 1).realize()
    if runtime.native is None:
        return  # (the ctypes fake's launch cannot fail; its errors are tested above)
    runtime.cu.lib.status[0] = 1
    for _ in range(2):  # the plan's launcher, then the general path (a new graph)
        with pytest.raises(RuntimeError, match=r"cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE"):
            (x + 1).realize()
        with pytest.raises(RuntimeError, match=r"cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE"):
            (x * 5).realize()


def test_the_native_launch_checks_its_arguments(launching_cuda):
    """A wrong count or a value that is no int raises before anything is launched."""
    runtime, memory, _ = launching_cuda
    if runtime.native is None:
        return
    from runtimes.cuda_api import arg_block
    from runtimes.cuda_launch import LaunchRecord
    record = LaunchRecord(runtime.driver, 77, 6, [1, 1, 1], [32, 1, 1], *arg_block(2))
    launches = runtime.cu.lib.launches
    with pytest.raises(TypeError, match="launch record and the kernel's buffers"):
        runtime.native(record.address, 4096)
    with pytest.raises(TypeError):
        runtime.native(record.address, 4096, "not a pointer")
    with pytest.raises(TypeError):
        runtime.native()
    assert not launches
    assert runtime.native(record.address, 4096, 8192) == 0
    assert launches == [((1, 1, 1), (32, 1, 1), [4096, 8192])]


def test_the_native_launch_writes_only_its_argument_block(launching_cuda):
    """cuda_launch writes the buffers' pointers into the argument block its record names
    and nowhere else (tests/unit/test_native_writes.py says why): here the block is two
    slots inside a larger array of sentinels."""
    runtime, _, _ = launching_cuda
    if runtime.native is None:
        return
    from runtimes.cuda_launch import LaunchRecord
    block = (ctypes.c_uint64 * 512)(*[7] * 512)
    values = (ctypes.c_uint64 * 2).from_buffer(block, 8 * 100)
    params = (ctypes.c_void_p * 2)(*[ctypes.addressof(values) + 8 * i for i in range(2)])
    record = LaunchRecord(runtime.driver, 77, 6, [2, 1, 1], [64, 1, 1], values, params)
    assert runtime.native(record.address, 4096, 8192) == 0
    assert [i for i, v in enumerate(block) if v != 7] == [100, 101]
    assert list(values) == [4096, 8192]
    assert list(record.slots) == [*runtime.driver, 77, 6, 2, 1, 1, 64, 1, 1,
                                  ctypes.addressof(values), ctypes.addressof(params), 2]


def test_a_native_launch_that_cannot_be_built_leaves_ctypes(monkeypatch, tmp_path):
    """Where LLVM cannot build or load `cuda_launch`, the device still opens and launches
    through ctypes."""
    from runtimes import cuda_launch

    def fail():
        raise RuntimeError("LLVM has no target here")
    monkeypatch.setattr(cuda_launch, "_LAUNCH", [])
    monkeypatch.setattr(cuda_launch, "_make", fail)
    runtime, memory, _ = _fake_runtime(monkeypatch, tmp_path, native=True)
    assert runtime.native is None
    monkeypatch.setitem(runtimes._OPEN, "CUDA:7", runtime)
    (Tensor(np.ones(1000, np.float32), device="CUDA:7") + 1).realize()
    _, _, pointers = runtime.cu.lib.launches[-1]
    assert all(p in memory for p in pointers)


def c_void(value):
    return ctypes.c_void_p(value)


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
def test_rendered_cuda_compiles_with_nvcc(fake_cuda, monkeypatch, tmp_path):
    runtime, _, sources = fake_cuda
    monkeypatch.setitem(runtimes._OPEN, "CUDA:7", runtime)
    a = Tensor(np.ones((5, 300), np.float16), device="CUDA:7")
    b = Tensor(np.ones((300,), np.float64), device="CUDA:7")
    ((a.exp().max(axis=0) / b) > 0.5).where(a.cast("int8").sum(axis=0), -1).realize()
    (Tensor(np.ones((2, 3, 4, 5), np.int64), device="CUDA:7").permute(3, 1, 0, 2) % 3).realize()
    assert sources
    for i, (src, _) in enumerate(sources):
        path = tmp_path / f"k{i}.cu"
        path.write_bytes(src)
        result = subprocess.run([NVCC, "-cubin", "-arch=sm_89", "-o", str(tmp_path / f"k{i}.cubin"),
                                 str(path)], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr + src.decode()


def _every_primitive_ast():
    """One kernel AST per (op, dtype) pair the IR allows, plus launch-shape variants."""
    from codegen.dtypes import dtypes
    from codegen.ops import BinaryOps, ReduceOps, TernaryOps, UnaryOps
    from lazyten.schedule import create_schedule

    def lb(dtype, shape=(61,)):
        return Tensor(np.zeros(shape), dtype=dtype, device="CPU").lazydata
    outs = [lb(d).e(op) for d in (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
            for op in (UnaryOps.EXP2, UnaryOps.EXP, UnaryOps.LOG2, UnaryOps.SIN, UnaryOps.COS,
                       UnaryOps.SQRT, UnaryOps.RECIP)]
    for d in dtypes.all():
        outs += [lb(d).e(UnaryOps.NEG), lb(dtypes.bool).e(TernaryOps.WHERE, lb(d), lb(d))]
        outs += [lb(d).cast(other) for other in dtypes.all() if other != d]
        outs += [lb(d).bitcast(other) for other in dtypes.all()
                 if other.itemsize == d.itemsize and dtypes.bool not in (d, other)]
        outs += [lb(d, (7, 300)).r(op, (1,)) for op in ReduceOps]  # group reduces
        outs.append(lb(d, (9000, 3)).r(ReduceOps.MAX, (0,)))
        shifts = {BinaryOps.SHL, BinaryOps.SHR}
        skip = ({BinaryOps.AND, BinaryOps.OR, BinaryOps.XOR, *shifts} if d.is_float else
                {BinaryOps.IDIV, BinaryOps.MOD, BinaryOps.FDIV, *shifts} if d == dtypes.bool else
                {BinaryOps.FDIV})
        outs += [lb(d).e(op, lb(d)) for op in BinaryOps if op not in skip]
    return [item.ast for out in outs for item in create_schedule([out]) if item.ast is not None]


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
def test_every_primitive_renders_valid_cuda(tmp_path):
    from codegen.linearizer import linearize
    from codegen.renderer.cuda import CUDARenderer
    renderer, seen, lines = CUDARenderer(), set(), []
    asts = _every_primitive_ast()
    for i, ast in enumerate(asts):
        kernel = linearize(ast, renderer.target)
        for line in renderer.render(kernel).splitlines():
            if line.startswith("__device__"):  # shared helpers: once per file
                if line in seen:
                    continue
                seen.add(line)
            lines.append(line.replace(f"void {kernel.name}(", f"void k{i}_{kernel.name}("))
    path = tmp_path / "all.cu"
    path.write_text("\n".join(lines))
    result = subprocess.run([NVCC, "-cubin", "-arch=sm_89", "-o", str(tmp_path / "all.cubin"),
                             str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert len(asts) > 200


def _null_cuda_sources() -> list[str]:
    """Realize real programs on NULL_CUDA (the NULL device rendering CUDA C): two LeNet-style
    training steps with Adam, attention with its backward, sorting, gathers and scatters,
    wide row kernels, every dtype's group reduces, casts and math; returns the source of
    every kernel it rendered."""
    from codegen.dtypes import dtypes
    from lazyten import Context
    import lazyten.nn as nn
    from lazyten import optim
    from runtimes import get_runtime
    rng = np.random.default_rng(0)
    runtime = get_runtime("NULL_CUDA")
    with Context(DEVICE="NULL_CUDA"):
        conv1, conv2, fc = nn.Conv2d(1, 6, 5), nn.Conv2d(6, 16, 5, padding=1), nn.Linear(400, 10)
        params = [conv1.weight, conv1.bias, conv2.weight, conv2.bias, fc.weight, fc.bias]
        opt = optim.Adam(params)
        x = Tensor(rng.standard_normal((8, 1, 28, 28)).astype(np.float32))
        y = Tensor(rng.integers(0, 10, 8).astype(np.int32))
        for _ in range(2):
            h = conv2(conv1(x).relu().max_pool2d()).relu().max_pool2d().flatten(1)
            loss = fc(h).cross_entropy(y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        q, k, v = (Tensor(rng.standard_normal((2, 3, 17, 8)).astype(np.float32),
                          requires_grad=True) for _ in range(3))
        q.scaled_dot_product_attention(k, v, is_causal=True).sum().backward()
        Tensor.stack(q.grad, k.grad, v.grad).realize()
        t = Tensor(rng.standard_normal((5, 33)).astype(np.float32))
        idx = Tensor(rng.integers(0, 33, (5, 4)).astype(np.int64))
        for out in (t.sort(1)[0], t.topk(3, 1)[1], t.gather(1, idx), t.cumsum(1),
                    t.scatter(1, idx, 1.0), t[Tensor([4, 0, 2])], t.softmax(0), t.var(1)):
            out.realize()
        wide = Tensor(rng.standard_normal((2, 60000)).astype(np.float32))  # row kernels:
        for out in (wide.softmax(1), wide.log_softmax(1), wide[:, :3000].layernorm(),  # a
                    wide[:, :1000].softmax(1)):  # loop of chunks, online softmax, held
            out.realize()
        big = Tensor(rng.standard_normal((400, 500)).astype(np.float32))  # vector loads and
        # stores (float4, int4), aligned
        for out in (big * 2 + 1, big[:, 4:] - big[:, :496], big.cast(dtypes.int32) * 3,
                    big[:, 1:497] + big.T[:496].T, big.pad(((0, 0), (4, 8))).exp(),  # or not
                    big.cast(dtypes.uint32) >> 1):
            out.realize()
        long = Tensor(rng.standard_normal(40000).astype(np.float32))  # group reduces
        for d in dtypes.all():  # (combined across warps by shuffles where the type allows)
            long.cast(d).sum().realize()
            long.cast(d).max().realize()
        for d in dtypes.all():
            a = t.cast(d)
            for other in dtypes.all():
                a.cast(other).realize()
            (a * 2 + 1).realize()
            a.max(axis=1).realize()
            if d.is_float:
                (a.exp() + a.sin() + a.abs().sqrt() + a.abs().log()).realize()
    return sorted(runtime.sources)


def test_null_cuda_renders_real_programs():
    """Runs everywhere (CI too): the CUDA renderer handles every kernel of real programs."""
    sources = _null_cuda_sources()
    assert len(sources) > 150
    assert all('extern "C" __global__' in src for src in sources)


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
def test_null_cuda_kernels_compile_with_nvcc(tmp_path):
    """Every kernel those programs render is CUDA C that nvcc accepts (one file, so the
    shared __device__ helpers appear once)."""
    seen, lines = set(), []
    for i, src in enumerate(_null_cuda_sources()):
        for line in src.splitlines():
            if line.startswith("__device__"):
                if line in seen:
                    continue
                seen.add(line)
            lines.append(line.replace("__global__ void ", f"__global__ void k{i}_", 1))
    path = tmp_path / "null_cuda.cu"
    path.write_text("\n".join(lines))
    result = subprocess.run([NVCC, "-cubin", "-arch=sm_89", "-o", str(tmp_path / "all.cubin"),
                             str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
