"""Vector loads and stores on GPUs (D98): an elementwise kernel's work-item takes four
adjacent outputs as the lanes of a vector; loads and stores of contiguous memory at
aligned indexes are one float4 (int4, uint4) each, everything else lane by lane
(codegen/vector_memory.py). Values are computed on OpenCL (pocl) with kernels lowered for
a GPU target, where a driver is installed; the decisions and sources need no device.
"""
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import codegen.opt.gpu as gpu_pass
from codegen.dtypes import dtypes
from codegen.kernel import Kernel, OptOps
from codegen.linearizer import linearize
from codegen.opt import optimize
from codegen.renderer.cuda import CUDARenderer
from codegen.renderer.opencl import OpenCLRenderer
from codegen.shape.shapetracker import ShapeTracker
from codegen.target import gpu
from codegen.uops import UOps
from codegen.vector_memory import split_lanes
from lazyten import Tensor
from lazyten.schedule import create_schedule
from tests.unit.test_work_item_cpu import _opencl, _run_with

GPU = gpu("TEST", local_size=64)


@pytest.fixture(autouse=True)
def small_gpu(monkeypatch):
    """The work-item floor lowered, so small shapes take several outputs per work-item."""
    monkeypatch.setattr(gpu_pass, "_GPU_MIN_ITEMS", 4)


def _ast(t: Tensor):
    return create_schedule([t.lazydata])[-1].ast


def _ops(t: Tensor):
    return [(o.op, o.amount) for o in optimize(Kernel(_ast(t)), GPU).applied
            if o.op in (OptOps.UPCAST, OptOps.STRIDE_UPCAST, OptOps.LANES)]


def _cuda(t: Tensor) -> str:
    return CUDARenderer(GPU).render(linearize(_ast(t), GPU))


def _x(shape, dtype=np.float32, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * 8).astype(dtype)


def test_float32_work_items_take_a_vector_of_adjacent_outputs():
    t = Tensor(_x((8, 64))) * 2 + Tensor(_x((8, 64), seed=1))
    assert _ops(t) == [(OptOps.UPCAST, 4), (OptOps.LANES, 4)]
    for dtype in ("int32", "uint32"):
        assert _ops(Tensor(_x((8, 64))).cast(dtype) + 1) == [(OptOps.UPCAST, 4), (OptOps.LANES, 4)]


@pytest.mark.parametrize("dtype", ["float16", "float64", "int64", "bool", "uint8"])
def test_other_types_keep_strided_outputs(dtype):
    """A buffer whose type has no vector spelling (or one wider than 16 bytes for 4 lanes):
    the copies stay strided, so neighbouring work-items keep reading neighbouring scalars."""
    t = Tensor(_x((8, 64))).cast(dtype) + Tensor(_x((8, 64), seed=1)).cast(dtype)
    assert _ops(t) == [(OptOps.STRIDE_UPCAST, 4)]


def test_aligned_views():
    base = ShapeTracker.from_shape((8, 20))
    assert gpu_pass._aligned(base, 1, 4)
    assert gpu_pass._aligned(base.shrink(((0, 8), (4, 20))), 1, 4)
    assert not gpu_pass._aligned(base.shrink(((0, 8), (1, 17))), 1, 4)      # offset 1
    assert not gpu_pass._aligned(ShapeTracker.from_shape((8, 18)).shrink(((0, 8), (0, 16))), 1, 4)
    assert not gpu_pass._aligned(base.reshape((8, 4, 5)).permute((0, 2, 1)), 2, 4)


def test_cuda_source_reads_and_writes_float4():
    src = _cuda(Tensor(_x((8, 64))) * 2 + Tensor(_x((8, 64), seed=1)))
    assert len(re.findall(r"float4 \w+ = \*\(\(float4\*\)\(data[12]\+", src)) == 2, src
    assert re.search(r"\*\(\(float4\*\)\(data0\+\w+\)\) = ", src), src
    assert not re.search(r"data\d\[", src), src  # no scalar access left


def test_unaligned_and_strided_loads_go_lane_by_lane():
    """A slice starting at an odd column and a transposed operand: their loads are four
    scalars each; the aligned output is still one float4 store."""
    a, b = Tensor(_x((8, 69))), Tensor(_x((64, 8), seed=1))
    src = _cuda(a[:, 5:] + b.T)
    assert len(re.findall(r"= data1\[", src)) == 4 and len(re.findall(r"= data2\[", src)) == 4, src
    assert "float4" in src and re.search(r"\*\(\(float4\*\)\(data0\+\w+\)\) = ", src), src


def test_padding_of_whole_vectors_is_one_gated_vector_load():
    """Zero padding whose edges fall between vectors: one gate for the whole vector."""
    src = _cuda(Tensor(_x((8, 56))).pad(((0, 0), (4, 4))) + 1)
    assert re.search(r"\? \*\(\(float4\*\)\(data1\+\w+\)\) : make_float4\(0.0f, 0.0f", src), src
    assert not re.search(r"data\d\[", src), src


def test_lane_gates_split_lane_by_lane():
    """A gated vector load whose gate differs by lane (the linearizer makes one where a
    mask ends inside a vector) becomes one gated scalar load per lane."""
    from codegen.uops import UOp
    f4, i32, b = dtypes.float32.vec(4), dtypes.int32, dtypes.bool
    buf = UOp(UOps.DEFINE_GLOBAL, None, (), ("data0", dtypes.float32))
    idx = UOp(UOps.CONST, i32, (), 0)
    gates = [UOp(UOps.CONST, b, (), k % 2 == 0) for k in range(4)]
    gate = UOp(UOps.VECTORIZE, b.vec(4), tuple(gates))
    load = UOp(UOps.LOAD, f4, (buf, idx, gate))
    out = split_lanes([buf, idx, *gates, gate, load, UOp(UOps.EXTRACT, dtypes.float32, (load,), 3)],
                      CUDARenderer(GPU).native_vector)
    loads = [u for u in out if u.op is UOps.LOAD]
    assert [u.dtype for u in loads] == [dtypes.float32] * 4
    assert [u.src[2] for u in loads] == gates


def test_opencl_source_uses_global_vector_pointers():
    t = Tensor(_x((8, 64))).cast("int32") * 3
    src = OpenCLRenderer(GPU).render(linearize(_ast(t), GPU))
    assert "*((__global int4*)(data0+" in src and "(int4)(" in src, src


def test_split_lanes_leaves_only_native_vectors():
    t = (Tensor(_x((8, 56))).pad(((0, 0), (4, 4))) + Tensor(_x((8, 64), seed=1))).exp()
    kernel = linearize(_ast(t), GPU)
    native = CUDARenderer(GPU).native_vector
    assert any(u.dtype is not None and u.dtype.count > 1 and u.op is UOps.ALU for u in kernel.uops)
    for u in split_lanes(kernel.uops, native):
        vector = u.dtype is not None and u.dtype.count > 1
        assert not vector or (u.op in (UOps.LOAD, UOps.VECTORIZE) and native(u.dtype)), u
        if u.op is UOps.LOAD and vector:
            assert all(g.dtype.count == 1 for g in u.src[2:]), "one gate for all lanes"
    assert split_lanes(kernel.uops, lambda dtype: False) != kernel.uops


_VIEWS = ["plain", "offset", "transposed", "broadcast", "padded", "padded4", "flipped"]


def _view(x: Tensor, kind: str, rows: int, cols: int) -> Tensor:
    """A (rows, cols) view of a base tensor `x` built for it (see _base)."""
    if kind == "offset":
        return x[:, 3:3 + cols]
    if kind == "transposed":
        return x.T
    if kind == "broadcast":
        return x.expand(rows, cols)
    if kind == "padded":
        return x.pad(((0, 0), (2, 1)))
    if kind == "padded4":
        return x.pad(((0, 0), (4, 0)))
    if kind == "flipped":
        return x.flip(1)
    return x


def _base(kind: str, rows: int, cols: int, dtype, seed: int) -> np.ndarray:
    """Whole numbers, so that a * 3 + b is exact in float32 whether or not the device's
    compiler fuses it into one FMA (NVRTC and NVIDIA's OpenCL do by default)."""
    shape = {"offset": (rows, cols + 5), "transposed": (cols, rows), "broadcast": (1, cols),
             "padded": (rows, cols - 3), "padded4": (rows, cols - 4)}.get(kind, (rows, cols))
    return np.round(_x(shape, np.float64, seed)).astype(dtype)


def _np_view(x: np.ndarray, kind: str, rows: int, cols: int) -> np.ndarray:
    if kind == "offset":
        return x[:, 3:3 + cols]
    if kind == "transposed":
        return x.T
    if kind == "broadcast":
        return np.broadcast_to(x, (rows, cols))
    if kind == "padded":
        return np.pad(x, ((0, 0), (2, 1)))
    if kind == "padded4":
        return np.pad(x, ((0, 0), (4, 0)))
    if kind == "flipped":
        return x[:, ::-1]
    return x


@given(rows=st.integers(1, 6), cols=st.integers(5, 40), kinds=st.tuples(*[st.sampled_from(_VIEWS)] * 2),
       dtype=st.sampled_from([np.float32, np.int32, np.uint32]))
@settings(max_examples=25, deadline=None)
def test_vector_kernels_match_numpy_on_opencl(rows, cols, kinds, dtype):
    """Every mix of aligned, offset, strided, broadcast, padded and flipped operands, at
    widths that four lanes divide or not, computed by kernels lowered for the GPU target."""
    _opencl()
    xs = [_base(kind, rows, cols, dtype, seed) for seed, kind in enumerate(kinds)]
    a, b = (_view(Tensor(x, device="OPENCL"), k, rows, cols) for x, k in zip(xs, kinds))
    na, nb = (_np_view(x, k, rows, cols) for x, k in zip(xs, kinds))
    got = _run_with(GPU, a * 3 + b)
    np.testing.assert_array_equal(got, (na * dtype(3) + nb).astype(dtype))
