"""The work-item CPU target (an OpenCL CPU driver such as pocl, D56) and its passes.

Such a device runs a work-group as a loop over its work-items, with local memory as
ordinary memory behind barriers, so its kernels must have no group reduce; each work-item
keeps a register tile instead. A GPU device keeps the GPU target's kernels. Kernels
lowered for either target must compute the same values (checked on OPENCL when a driver
is installed).
"""
import random
import types

import numpy as np
import pytest

from codegen.kernel import Kernel, OptOps
from codegen.linearizer import Linearizer, linearize
from codegen.opt import optimize
from codegen.renderer.opencl import OpenCLRenderer
from codegen.target import gpu, work_item_cpu
from lazyten import Context, Tensor
from lazyten.realize import launch, run_schedule
from lazyten.schedule import create_schedule
from runtimes import Buffer, get_runtime
from runtimes.build_progress import BuildProgress
from runtimes.compile_pool import CompilePool
from runtimes.cpu_llvm import LLVMCompiler
import runtimes.build_progress as build_progress


def _rnd(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _ast(t: Tensor):
    return create_schedule([t.lazydata])[-1].ast


CPU_ITEMS = work_item_cpu("TEST", threads=2, local_size=256)


def test_a_long_reduce_with_few_outputs_is_no_group_reduce_on_a_work_item_cpu():
    long = _ast(Tensor(_rnd((4, 4096))).sum(axis=1))
    assert OptOps.GROUP in [o.op for o in optimize(Kernel(long), gpu("TEST")).applied]
    ops = [o.op for o in optimize(Kernel(long), CPU_ITEMS).applied]
    assert OptOps.GROUP not in ops, f"work-item CPU target chose a group reduce: {ops}"
    src = OpenCLRenderer(CPU_ITEMS).render(linearize(long, CPU_ITEMS))
    assert "barrier" not in src and "__local" not in src, src


def test_a_matmul_work_item_keeps_a_register_tile_within_the_budget():
    a, b = Tensor(_rnd((64, 48))), Tensor(_rnd((48, 40), 1))
    ast = _ast(a @ b)
    k = optimize(Kernel(ast), CPU_ITEMS)
    ups = [o for o in k.applied if o.op is OptOps.UPCAST]
    assert len(ups) == 2, f"both output axes of a matmul are reused: {k.applied}"
    assert 1 < np.prod(k.upcasts) <= CPU_ITEMS.item_tile, k.upcasts
    assert not k.lanes, "the C renderers draw no vector lanes"
    accs = [u for u in linearize(ast, CPU_ITEMS).uops if u.op.name == "DEFINE_ACC"]
    assert len(accs) == np.prod(k.upcasts)
    assert not [o for o in optimize(Kernel(ast), gpu("TEST")).applied if o.op is OptOps.UPCAST]


def test_no_tile_where_no_input_is_reused_or_too_few_work_items_remain():
    pool = _ast(Tensor(_rnd((8, 16, 16))).reshape(8, 8, 2, 8, 2).max(axis=(2, 4)))
    assert not [o for o in optimize(Kernel(pool), CPU_ITEMS).applied if o.op is OptOps.UPCAST]
    small = _ast(Tensor(_rnd((4, 300))) @ Tensor(_rnd((300, 4), 1)))  # 16 outputs
    assert not [o for o in optimize(Kernel(small), CPU_ITEMS).applied if o.op is OptOps.UPCAST]


def _device(kind: int, cpu_flag: int = 2):
    """A stand-in for runtimes.opencl.OpenCLDevice with a device of type `kind`."""
    device = types.SimpleNamespace(type=kind, max_work_group_size=4096, max_compute_units=3,
                                   local_mem_size=48 << 10, max_work_item_sizes=[1024, 1024, 64])
    return types.SimpleNamespace(device=device, cl=types.SimpleNamespace(
        device_type=types.SimpleNamespace(CPU=cpu_flag)))


def test_the_opencl_target_follows_the_device_type_and_the_override():
    opencl = pytest.importorskip("runtimes.opencl")
    cpu_dev, gpu_dev = _device(2), _device(4)
    assert opencl.device_target(cpu_dev) == work_item_cpu("OPENCL", 3, 256)
    assert opencl.device_target(gpu_dev) == gpu("OPENCL", local_size=256, max_group=4096)
    with Context(OPENCL_TARGET="gpu"):
        assert opencl.device_target(cpu_dev) == gpu("OPENCL", local_size=256, max_group=4096)
    with Context(OPENCL_TARGET="cpu"):
        assert opencl.device_target(gpu_dev) == work_item_cpu("OPENCL", 3, 256)
    with Context(OPENCL_TARGET="fpga"), pytest.raises(ValueError, match="OPENCL_TARGET"):
        opencl.device_target(gpu_dev)


def _opencl():
    try:
        return get_runtime("OPENCL")
    except Exception as e:  # no pyopencl or no driver
        pytest.skip(f"OPENCL unavailable: {e}")


def _run_with(target, t: Tensor, device: str = "OPENCL") -> np.ndarray:
    """The last kernel of `t` lowered for `target`, run on the device."""
    runtime = get_runtime(device)
    items = create_schedule([t.lazydata])
    run_schedule(items[:-1])
    item = items[-1]
    spec = OpenCLRenderer(target).program(Linearizer(optimize(Kernel(item.ast), target),
                                                     target).linearize())
    program = runtime.program(spec, runtime.compiler.compile_cached(spec.name, spec.src))
    out = Buffer(runtime, int(np.prod(item.out.shape)), item.out.dtype)
    launch(spec, program, [out] + [b.realized for b in item.inputs], device)
    result = np.empty(item.out.shape, np.dtype(item.out.dtype.fmt))
    out.copyout(memoryview(result).cast("B"))
    return result


@pytest.mark.parametrize("target", [CPU_ITEMS, gpu("TEST", local_size=64)], ids=["cpu", "gpu"])
def test_both_targets_compute_the_same_on_opencl_at_odd_sizes(target):
    _opencl()
    a, b = _rnd((37, 53)), _rnd((53, 29), 1)
    x, w = _rnd((3, 5, 11, 13), 2), _rnd((7, 5, 3, 3), 3)
    r = _rnd((3, 5000), 4)
    x4 = x.reshape(1, 3, 5, 11, 13, 1)
    ref_conv = np.zeros((3, 7, 9, 11), np.float32)
    for ky in range(3):
        for kx in range(3):
            ref_conv += np.einsum("bcyx,oc->boyx", x[:, :, ky:ky + 9, kx:kx + 11], w[:, :, ky, kx])
    cases = [
        (lambda d: Tensor(a, device=d) @ Tensor(b, device=d), a @ b),
        (lambda d: Tensor(x, device=d).conv2d(Tensor(w, device=d)), ref_conv),
        (lambda d: Tensor(r, device=d).sum(axis=1), r.sum(axis=1)),
        (lambda d: Tensor(r, device=d).max(axis=1), r.max(axis=1)),
        (lambda d: (Tensor(x4, device=d) * Tensor(x4.transpose(1, 0, 2, 3, 4, 5), device=d))
         .sum(axis=(2, 3)), (x4 * x4.transpose(1, 0, 2, 3, 4, 5)).sum(axis=(2, 3))),
    ]
    for make, ref in cases:
        got = _run_with(target, make("OPENCL"))
        np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-3)


def test_opencl_builds_run_on_the_compile_pool():
    compiler = _opencl().compiler
    assert compiler.threaded and compiler.worker_args, "OpenCL builds in parallel (D56)"
    assert type(compiler)(*compiler.worker_args).key == compiler.key, \
        "a worker process must build for the same device"


class TaggedCompiler(LLVMCompiler):
    """Marks each binary with the argument it was made with: here "here", in a worker
    process what `worker_args` passed."""

    def __init__(self, tag: str = "here"):
        super().__init__()
        self.tag, self.worker_args = tag, ("worker",)

    def compile(self, src: str) -> bytes:
        return super().compile(src) + self.tag.encode()


def test_a_worker_process_makes_its_compiler_from_worker_args():
    pool = CompilePool(TaggedCompiler(), workers=1)
    try:
        nonce = random.getrandbits(40)  # no earlier run left these in the disk cache
        sources = [f"define void @tagged{i}() {{\n  ret void\n}}\n; {nonce}" for i in range(12)]
        binaries = [job.result() for job in [pool.submit(f"t{i}", src)
                                             for i, src in enumerate(sources)]]
    finally:
        pool.close()
    assert pool.workers_started == 1
    tags = {b[-6:] for b in binaries}
    assert b"worker" in tags, f"no binary came from a worker made with worker_args: {tags}"


class _Terminal:
    """A stderr that says it is a terminal and keeps what is written."""

    def __init__(self, tty: bool):
        self.tty, self.text = tty, ""

    def isatty(self) -> bool:
        return self.tty

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("tty", [True, False])
def test_build_progress_counts_on_a_terminal_only(monkeypatch, tty):
    stream = _Terminal(tty)
    monkeypatch.setattr("sys.stderr", stream)
    monkeypatch.setattr(build_progress, "_PROGRESS_AFTER", 0.0)
    progress = BuildProgress()
    for _ in range(3):
        progress.queued()
    for _ in range(3):
        progress.done()
    if not tty:
        assert stream.text == "", "nothing is written where no one watches"
        return
    assert "building kernels: 1/3" in stream.text and "building kernels: 2/3" in stream.text
    assert stream.text.endswith("\r" + " " * len("building kernels: 2/3") + "\r"), \
        f"the counter is erased when the build ends: {stream.text!r}"
    progress.queued()  # a later build starts counting afresh
    assert (progress.total, progress.finished) == (1, 0)


def test_build_progress_is_silent_for_short_builds(monkeypatch):
    stream = _Terminal(True)
    monkeypatch.setattr("sys.stderr", stream)
    progress = BuildProgress()  # the real threshold: a second
    for _ in range(4):
        progress.queued()
    for _ in range(4):
        progress.done()
    assert stream.text == ""
