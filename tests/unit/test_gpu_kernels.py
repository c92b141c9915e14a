"""GPU kernel shapes (issue 16): register tiles with strided copies, elementwise work-items
taking several outputs, launch limits, the local memory of a group reduce, 32-bit indexes,
and the GPU's reduce splitting. Values are computed on OpenCL (pocl) with kernels lowered
for the GPU target, where a driver is installed; the layout checks need no device.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import codegen.opt.gpu as gpu_pass
import lazyten.split as split
from codegen.kernel import Kernel, OptOps
from codegen.linearizer import linearize
from codegen.ops import ReduceOps
from codegen.opt import optimize
from codegen.renderer.cuda import CUDARenderer
from codegen.target import gpu
from lazyten import Tensor
from lazyten.schedule import create_schedule
from tests.unit.test_work_item_cpu import _opencl, _run_with

GPU = gpu("TEST", local_size=64)
GPU256 = gpu("TEST", local_size=256)  # room for a 16 x 16 staged work-group


def _rnd(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _ast(t: Tensor):
    return create_schedule([t.lazydata])[-1].ast


@pytest.fixture
def small_gpu(monkeypatch):
    """The GPU passes' work-item floor lowered, so small shapes get tiles and items."""
    monkeypatch.setattr(gpu_pass, "_GPU_MIN_ITEMS", 16)


def test_a_gpu_matmul_tile_is_square_and_strided_along_the_row(small_gpu):
    ast = _ast(Tensor(_rnd((64, 48))) @ Tensor(_rnd((48, 64), 1)))
    k = optimize(Kernel(ast), GPU)
    ups = [o for o in k.applied if o.op in (OptOps.UPCAST, OptOps.STRIDE_UPCAST)]
    assert [o.op for o in ups].count(OptOps.STRIDE_UPCAST) >= 1, k.applied
    per_axis: dict[int, int] = {}
    for o in ups:
        per_axis[o.axis] = per_axis.get(o.axis, 1) * o.amount
    assert len(per_axis) == 2 and max(per_axis.values()) <= 4 * min(per_axis.values()), \
        f"a square tile, not a row: {k.applied}"
    assert np.prod(k.upcasts) <= GPU.item_tile
    # the row's copies are 1/amount of the row apart: neighbouring work-items stay adjacent
    src = CUDARenderer().render(linearize(ast, GPU))
    assert "+16]" in src or "+16)" in src, src


@given(m=st.integers(1, 70), n=st.integers(1, 70), k=st.integers(1, 40))
@settings(max_examples=12, deadline=None)
def test_gpu_tiled_matmul_values_on_opencl(m, n, k):
    _opencl()
    gpu_pass._GPU_MIN_ITEMS, old = 16, gpu_pass._GPU_MIN_ITEMS
    try:
        a, b = _rnd((m, k)), _rnd((k, n), 1)
        got = _run_with(GPU, Tensor(a, device="OPENCL") @ Tensor(b, device="OPENCL"))
    finally:
        gpu_pass._GPU_MIN_ITEMS = old
    np.testing.assert_allclose(got.reshape(m, n), a @ b, rtol=1e-4, atol=1e-4)


@given(shape=st.lists(st.integers(1, 40), min_size=1, max_size=3))
@settings(max_examples=12, deadline=None)
def test_gpu_elementwise_items_values_on_opencl(shape):
    _opencl()
    gpu_pass._GPU_MIN_ITEMS, old = 4, gpu_pass._GPU_MIN_ITEMS
    try:
        x, y = _rnd(shape), _rnd(shape, 1)
        t = (Tensor(x, device="OPENCL") * Tensor(y, device="OPENCL") + 1).exp()
        got = _run_with(GPU, t)
    finally:
        gpu_pass._GPU_MIN_ITEMS = old
    np.testing.assert_allclose(got.reshape(shape), np.exp(x * y + 1), rtol=1e-5)


def test_elementwise_work_items_take_strided_outputs(small_gpu):
    """(float32 takes them adjacent, as a vector: tests/unit/test_gpu_vectors.py)"""
    ast = _ast(Tensor(_rnd((8, 64)).astype(np.float64)) + 1)
    applied = optimize(Kernel(ast), GPU).applied
    assert [(o.op, o.amount) for o in applied if o.op is OptOps.STRIDE_UPCAST] == \
        [(OptOps.STRIDE_UPCAST, GPU.elementwise_items)], applied


def test_launch_sizes_keep_each_dim_within_its_limit():
    groups, local = gpu_pass.launch_sizes([1, 1, 512], 256, (1024, 1024, 64))
    assert local[2] <= 64 and np.prod(local) <= 256, local
    assert all(g * l >= s for g, l, s in zip(groups, local, [1, 1, 512]))


def test_a_group_reduce_with_a_tile_fits_local_memory(small_gpu):
    """64 accumulators x 256 work-items x 4 bytes was 64 KB of __shared__: NVRTC refused it
    (0xc000 max), found on an H100 with item_tile=64."""
    target = gpu("TEST", local_size=256)
    big = type(target)(**{**target.__dict__, "item_tile": 64})
    ast = _ast((Tensor(_rnd((16, 1, 4096))) * Tensor(_rnd((1, 16, 4096), 1))).sum(axis=2))
    k = optimize(Kernel(ast), big)
    assert k.group and np.prod(k.upcasts) > 1, k.applied
    assert k.group * np.prod(k.upcasts) * 8 <= big.local_memory, (k.group, k.upcasts)


def test_a_gpu_matmul_indexes_in_32_bits():
    """A 4096^3 iteration space indexes 2^24 elements: int fits (it was long long, D89)."""
    def src(t: Tensor) -> str:
        return CUDARenderer().render(linearize(_ast(t), CUDARenderer.target))
    a, b = (Tensor.empty(4096, 4096, device="NULL_CUDA") for _ in range(2))
    assert "long long gidx" not in src(a @ b) and "int gidx0" in src(a @ b)
    big = Tensor.empty(1 << 15, 1 << 16, device="NULL_CUDA")
    assert "long long gidx" in src(big.sum(axis=1) + 0)


def _stage_outputs(t: Tensor) -> list[int]:
    """The outputs of each reduce kernel of `t`'s schedule."""
    return [int(np.prod(item.out.shape)) for item in create_schedule([t.lazydata])
            if item.ast is not None and any(isinstance(n.op, ReduceOps) for n in item.ast.walk())]


@pytest.mark.parametrize("shape, axis, stage1", [
    ((1 << 26,), 0, 2048),           # one output: 2048 work-groups
    ((4096, 16384), 0, 16384 * 32),  # a column sum: 16384 work-items -> 2^19
])
def test_gpu_splits_a_reduce_too_narrow_for_the_card(shape, axis, stage1):
    x = Tensor.empty(*shape, device="NULL_CUDA")
    outs = _stage_outputs(x.sum(axis=axis))
    assert outs[0] == stage1 and len(outs) == 2, outs


def test_gpu_keeps_reduces_that_fill_the_card_whole():
    rows = Tensor.empty(4096, 16384, device="NULL_CUDA")
    assert len(_stage_outputs(rows.sum(axis=1))) == 1  # 4096 work-groups
    assert len(_stage_outputs(Tensor.empty(64, 300, device="NULL_CUDA").sum(axis=0))) == 1
    assert split._GPU_MIN_CHUNK >= 64


# ---- local-memory stages (D92) ----
def _opts(t: Tensor, target=GPU):
    return [o.op for o in optimize(Kernel(_ast(t)), target).applied]


def test_a_tiled_matmul_stages_its_operands_in_local_memory():
    a, b = (Tensor.empty(512, 512, device="NULL_CUDA") for _ in range(2))
    ast = _ast(a @ b)
    k = optimize(Kernel(ast), CUDARenderer.target)
    assert OptOps.STAGE in [o.op for o in k.applied] and k.local == {0: 16, 1: 16}, k.applied
    src = CUDARenderer().render(linearize(ast, CUDARenderer.target))
    assert src.count("__shared__ float stage") == 2 and src.count("__syncthreads();") == 2, src
    # the operands are read from local memory inside the stage's steps, not from data1/2
    steps = src[src.index("for (int ridx1"):]
    assert "data1[" not in steps and "data2[" not in steps, src


def test_no_stage_without_a_shared_operand_or_a_tile():
    x = Tensor.empty(4096, 16384, device="NULL_CUDA")
    assert OptOps.STAGE not in _opts(x.sum(axis=0), CUDARenderer.target)  # nothing shared
    a, b = Tensor.empty(64, 40, device="NULL_CUDA"), Tensor.empty(40, 48, device="NULL_CUDA")
    assert OptOps.STAGE not in _opts(a @ b, CUDARenderer.target)  # too small to tile


@given(m=st.sampled_from([128, 256]), n=st.sampled_from([128, 256]),
       k=st.integers(33, 130), pad=st.booleans())
@settings(max_examples=10, deadline=None)
def test_staged_matmul_values_on_opencl(m, n, k, pad):
    """Stages of 32 steps over k (k % 32 == 0 stages; other k reads memory directly); a
    padded operand stages zeros where it reads nothing. With tiles of at most 8 x 8, 128
    rows and columns leave 16 x 16 work-items at least: the group divides them."""
    _opencl()
    gpu_pass._GPU_MIN_ITEMS, old = 16, gpu_pass._GPU_MIN_ITEMS
    try:
        a, b = _rnd((m, k)), _rnd((k + 32 * pad, n), 1)
        ta = Tensor(a, device="OPENCL")
        if pad:
            ta = ta.pad(((0, 0), (0, 32)))
        t = ta @ Tensor(b, device="OPENCL")
        if (k + 32 * pad) % 32 == 0:
            assert OptOps.STAGE in _opts(t, GPU256), _opts(t, GPU256)
        assert OptOps.STAGE not in _opts(t, GPU)  # 64 work-items: no 16 x 16 group
        got = _run_with(GPU256, t)
    finally:
        gpu_pass._GPU_MIN_ITEMS = old
    want = a @ b[:k]
    np.testing.assert_allclose(got.reshape(m, n), want, rtol=1e-4, atol=1e-4)
