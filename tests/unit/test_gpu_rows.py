"""GPU row kernels (D94, issue 16): softmax, log_softmax and layernorm as one kernel with a
work-group per row. Values run end to end on OpenCL (pocl) with the runtime's Target
replaced by a GPU's, so the scheduler, the passes and the renderer all take the GPU path;
the CUDA source of the same kernels is checked for its stores.
"""
import dataclasses
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import lazyten.programs as programs
import lazyten.schedule_cache as schedule_cache
from codegen.kernel import Kernel, OptOps, is_row_kernel
from codegen.linearizer import linearize
from codegen.opt import optimize
from codegen.renderer.cuda import CUDARenderer
from codegen.row_group import held_steps
from codegen.target import gpu
from lazyten import Tensor
from lazyten.schedule import create_schedule
from tests.unit.test_work_item_cpu import _opencl

GPU = gpu("OPENCL", local_size=256, max_group=1024)


@pytest.fixture
def gpu_opencl(monkeypatch):
    """OPENCL with a GPU's Target: kernels lowered for a GPU and run on the CPU driver."""
    runtime = _opencl()
    monkeypatch.setattr(runtime.renderer, "target", GPU)
    monkeypatch.setattr(programs, "_PROGRAMS", OrderedDict())
    monkeypatch.setattr(schedule_cache, "_SCHEDULES", {})
    return runtime


def _rnd(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 3


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _log_softmax(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def _layernorm(x):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)


OPS = {"softmax": (lambda t: t.softmax(-1), _softmax),
       "log_softmax": (lambda t: t.log_softmax(-1), _log_softmax),
       "layernorm": (lambda t: t.layernorm(-1), _layernorm)}


def test_a_gpu_softmax_is_one_kernel_with_a_work_group_per_row(gpu_opencl):
    t = Tensor(_rnd((64, 1000)), device="OPENCL").softmax(-1)
    items = [i for i in create_schedule([t.lazydata]) if i.ast is not None]
    assert len(items) == 1 and is_row_kernel(items[0].ast), [i.ast for i in items]
    k = optimize(Kernel(items[0].ast), GPU)
    assert [(o.op, o.amount) for o in k.applied if o.op is OptOps.GROUP] == \
        [(OptOps.GROUP, 64)], k.applied  # 1000 / row_items(16) = 62.5 -> 64 work-items
    src = CUDARenderer(GPU).render(linearize(items[0].ast, GPU))
    assert src.count("__syncthreads()") >= 2 and "if (lidx0 == 0) data0" not in src, src


def test_a_long_row_takes_the_devices_largest_work_group():
    ast = [i.ast for i in create_schedule([Tensor.empty(8, 65536, device="NULL_CUDA")
                                           .softmax(-1).lazydata]) if i.ast is not None]
    assert len(ast) == 1
    k = optimize(Kernel(ast[0]), GPU)
    assert k.group == 1024, k.applied
    small = gpu("OPENCL", local_size=256, max_group=256, local_memory=4 << 10)
    assert optimize(Kernel(ast[0]), small).group == 256  # the device's limit
    # local memory for two scratch arrays of 8-byte accumulators: 4 KB holds 256 each
    tiny = gpu("OPENCL", local_size=256, max_group=1024, local_memory=2 << 10)
    assert optimize(Kernel(ast[0]), tiny).group == 128


def test_a_short_share_is_held_in_registers_and_a_long_one_loops_over_chunks():
    """65536 x 1000: 64 work-items a row, 16 elements each, unrolled: x is loaded once per
    element (the max, the sum and the store share the loads), the last share gated;
    50257 wide: 50 elements for each of 1024 work-items, held too (row_held 56). A
    60000-wide row leaves 59 to each: 3 steps unrolled (the last gated), then a loop over
    7 chunks of 8 steps whose 8 loads come before its stores (D96), in each of 2 walks:
    the max and the sum take one (online softmax)."""
    assert GPU.row_held == 56 and GPU.row_chunk == 8
    for width, held in ((1000, True), (50257, True), (60000, False)):
        ast = [i.ast for i in create_schedule([Tensor.empty(64, width, device="NULL_CUDA")
                                               .softmax(-1).lazydata]) if i.ast is not None]
        k = optimize(Kernel(ast[0]), GPU)
        assert (held_steps(k, GPU) > 0) == held, (width, k.group)
        src = CUDARenderer(GPU).render(linearize(ast[0], GPU))
        loads = src.count("data1[")
        if held:
            assert "for (" not in src.split("__syncthreads")[0] and loads == -(-width // k.group)
            last = src.rstrip().splitlines()[-2].strip()
            assert last.startswith("if (") and "data0[" in last, src  # the last share: gated
            continue
        walks = src.split("for (int chunk")
        assert len(walks) == 3 and loads == 3 + 2 * GPU.row_chunk, src
        assert src.count(" < 7; chunk") == 2 and src.count("? data1[") == 1, src
        body = walks[2].split("\n  }")[0]  # the store loop's body
        assert body.rindex("data1[") < body.index("data0["), body


def test_a_work_group_larger_than_usual_is_stated_to_the_compiler():
    """A row kernel's 1024 work-items are stated in the source (CUDA __launch_bounds__,
    OpenCL reqd_work_group_size), so the compiler keeps within the registers they leave
    each (D96); a kernel with the usual group is unbounded, its source independent of its
    launch size (D42)."""
    from codegen.renderer.opencl import OpenCLRenderer
    row = [i.ast for i in create_schedule([Tensor.empty(8, 50257, device="NULL_CUDA")
                                           .softmax(-1).lazydata]) if i.ast is not None][0]
    plain = create_schedule([(Tensor.empty(4096, device="NULL_CUDA") + 1).lazydata])[-1].ast
    cuda, cl = CUDARenderer(GPU), OpenCLRenderer(GPU)
    assert "__launch_bounds__(1024) void" in cuda.render(linearize(row, GPU))
    assert "reqd_work_group_size(1024, 1, 1))) void" in cl.render(linearize(row, GPU))
    for r in (cuda, cl):
        assert "bounds" not in r.render(linearize(plain, GPU)) and \
            "reqd" not in r.render(linearize(plain, GPU))


@pytest.mark.parametrize("held,chunk", [(0, 1), (0, 3), (2, 5), (24, 8)])
@pytest.mark.parametrize("width", [255, 1000, 2048, 3 * 1024 + 5, 5 * 1024])
def test_walks_in_chunks_and_held_steps_agree(gpu_opencl, monkeypatch, held, chunk, width):
    """Any split of the walk into held steps and chunks (with and without steps left over,
    with and without a gated last step) gives the same values."""
    target = gpu("OPENCL", local_size=256, max_group=256)
    monkeypatch.setattr(gpu_opencl.renderer, "target",
                        dataclasses.replace(target, row_held=held, row_chunk=chunk))
    x = _rnd((3, width), seed=width)
    for op, (lazy_fn, np_fn) in OPS.items():
        got = lazy_fn(Tensor(x, device="OPENCL")).numpy()
        np.testing.assert_allclose(got, np_fn(x.astype(np.float64)), rtol=2e-4, atol=2e-5,
                                   err_msg=op)


def test_rows_too_short_for_a_warp_are_walked_by_one_work_item():
    ast = [i.ast for i in create_schedule([Tensor.empty(4096, 100, device="NULL_CUDA")
                                           .softmax(-1).lazydata]) if i.ast is not None]
    assert len(ast) == 1 and is_row_kernel(ast[0])
    k = optimize(Kernel(ast[0]), GPU)
    assert not k.group and OptOps.LOCAL in [o.op for o in k.applied], k.applied


@given(rows=st.integers(1, 40), width=st.sampled_from([1, 7, 31, 64, 255, 256, 257, 1000,
                                                        3000, 27648, 30000, 65536]),
       op=st.sampled_from(sorted(OPS)), layout=st.sampled_from(["plain", "t", "bcast"]))
@settings(max_examples=25, deadline=None)
def test_gpu_row_kernel_values(gpu_opencl, rows, width, op, layout):
    """Odd widths (a last share shorter than the group), transposed and broadcast input."""
    lazy_fn, np_fn = OPS[op]
    if layout == "t":
        x = _rnd((width, rows))
        t, x = Tensor(x, device="OPENCL").T, x.T
    elif layout == "bcast":
        x = np.broadcast_to(_rnd((1, width)), (rows, width))
        t = Tensor(_rnd((1, width)), device="OPENCL").expand(rows, width)
    else:
        x = _rnd((rows, width))
        t = Tensor(x, device="OPENCL")
    got = (lazy_fn(t) * 2).numpy()
    np.testing.assert_allclose(got, np_fn(x.astype(np.float64)) * 2, rtol=2e-4, atol=2e-5)


@given(rows=st.integers(1, 12), width=st.sampled_from([300, 1000]))
@settings(max_examples=6, deadline=None)
def test_gpu_row_kernel_gradients(gpu_opencl, rows, width):
    """softmax's backward sums grad * y over each row: a row kernel too."""
    x, w = _rnd((rows, width)), _rnd((rows, width), 1)
    t = Tensor(x, device="OPENCL", requires_grad=True)
    (t.softmax(-1) * Tensor(w, device="OPENCL")).sum().backward()
    y = _softmax(x.astype(np.float64))
    want = y * (w - (w * y).sum(-1, keepdims=True))
    np.testing.assert_allclose(t.grad.numpy(), want, rtol=1e-3, atol=1e-6)


def test_gpu_row_kernel_edges(gpu_opencl):
    """Rows over two axes (layernorm of the last two), float16 rows (float32 accumulators
    in local memory), rows with -inf entries (masked scores) and a NaN in one row."""
    x = _rnd((6, 5, 300))
    t = Tensor(x, device="OPENCL")
    mean, var = x.mean((-2, -1), keepdims=True), x.var((-2, -1), keepdims=True)
    np.testing.assert_allclose(t.layernorm(axis=(-2, -1)).numpy(),
                               (x - mean) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)
    half = x.astype(np.float16)
    np.testing.assert_allclose(Tensor(half, device="OPENCL").softmax(-1).numpy(),
                               _softmax(half.astype(np.float64)), rtol=2e-3, atol=2e-4)
    masked = x.copy()
    masked[:, :, ::3] = -np.inf
    np.testing.assert_allclose(Tensor(masked, device="OPENCL").softmax(-1).numpy(),
                               _softmax(masked.astype(np.float64)), rtol=1e-5, atol=1e-7)
    nan = x.copy()
    nan[0, 0, 5] = np.nan
    got = Tensor(nan, device="OPENCL").softmax(-1).numpy()
    assert np.isnan(got[0, 0]).all() and np.isfinite(got[1:]).all() and \
        np.isfinite(got[0, 1:]).all()


def _special_rows(draw_kinds, width, seed):
    """Rows of standard normal values scaled by 3, with some rows -inf at a leading run,
    everywhere or at every third element, +inf or NaN at one element, or far from 0 (so
    that exp of a difference from a stale max over- or underflows)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((len(draw_kinds), width)).astype(np.float32) * 3
    for r, kind in enumerate(draw_kinds):
        at = int(rng.integers(width))
        if kind == "lead":
            x[r, :at + 1] = -np.inf
        elif kind == "all":
            x[r] = -np.inf
        elif kind == "third":
            x[r, ::3] = -np.inf
        elif kind in ("inf", "nan"):
            x[r, at] = np.inf if kind == "inf" else np.nan
        elif kind == "far":
            x[r] += np.float32(rng.choice([-200.0, 200.0]))
            x[r, at] += np.float32(90)  # a late max, 90 above the rest
    return x


@given(kinds=st.lists(st.sampled_from(["plain", "lead", "all", "third", "inf", "nan", "far"]),
                      min_size=1, max_size=6),
       width=st.sampled_from([700, 1000, 3000]), online=st.booleans(),
       chunk=st.sampled_from([1, 3, 8]))
@settings(max_examples=25, deadline=None)
def test_online_softmax_rows_match_the_separate_walks(gpu_opencl, monkeypatch, kinds, width,
                                                      online, chunk):
    """A looping row walk takes a softmax's max and sum in one pass (D96): -inf, +inf and
    NaN entries, rows -inf from the start or everywhere, and rows far from 0 give what
    numpy's max, sum of exp(x - max) and output give (NaN where it gives NaN)."""
    target = gpu("OPENCL", local_size=256, max_group=256)
    monkeypatch.setattr(gpu_opencl.renderer, "target", dataclasses.replace(
        target, row_held=0, row_chunk=chunk, row_online=online))
    x = _special_rows(kinds, width, seed=width * 7 + chunk)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for lazy_fn, np_fn in (OPS["softmax"], OPS["log_softmax"]):
            got = lazy_fn(Tensor(x, device="OPENCL")).numpy()
            np.testing.assert_allclose(got, np_fn(x.astype(np.float64)), rtol=2e-4, atol=2e-5)


def test_target_fields_from_a_string():
    """`with_fields` (bench --target, TARGET_FIELDS): ints, bools and tuples by the field's
    type; an unknown field or a missing value names the fields there are."""
    from codegen.target import with_fields
    t = with_fields(GPU, "row_held=0, row_chunk=3,row_online=0,max_local=64x64x4")
    assert (t.row_held, t.row_chunk, t.row_online, t.max_local) == (0, 3, False, (64, 64, 4))
    assert with_fields(GPU, "") == GPU
    for bad in ("rows=3", "row_held", "name=1"):
        with pytest.raises(ValueError, match="row_chunk"):
            with_fields(GPU, bad)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
@pytest.mark.parametrize("axis", [0, 1])
def test_online_softmax_of_other_dtypes_and_axes(gpu_opencl, monkeypatch, dtype, axis):
    """The looping walk with the online softmax (D96) over 16-bit rows (float32
    accumulators), float64 rows, and rows strided in memory (softmax over axis 0)."""
    target = gpu("OPENCL", local_size=256, max_group=256)
    monkeypatch.setattr(gpu_opencl.renderer, "target",
                        dataclasses.replace(target, row_held=0, row_chunk=3))
    t = Tensor(_rnd((1000, 6) if axis == 0 else (6, 1000)), device="OPENCL").cast(dtype)
    wide = (lambda u: u) if dtype == "float64" else (lambda u: u.float())  # numpy reads it
    x = wide(t).numpy().astype(np.float64)  # the values as rounded to the dtype
    tol = 1e-2 if dtype != "float64" else 1e-12
    m = x.max(axis, keepdims=True)
    log_sum = np.log(np.exp(x - m).sum(axis, keepdims=True))
    np.testing.assert_allclose(wide(t.softmax(axis)).numpy(), np.exp(x - m - log_sum),
                               rtol=tol, atol=tol * 1e-2)
    np.testing.assert_allclose(wide(t.log_softmax(axis)).numpy(), x - m - log_sum,
                               rtol=tol, atol=tol)
