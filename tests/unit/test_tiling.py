"""CPU register tiling and vector lanes (issue 5) against numpy.

The tiler unrolls output axes into accumulator tiles and turns the output-contiguous one
into vector lanes. Each test compares with numpy at sizes that do not divide the tile or
the vector width, on transposed, broadcast and padded (masked) inputs, and over dtypes
whose code paths differ (bool bytes, half storage, float64 -> half casts).
"""
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from codegen.dtypes import dtypes
from codegen.helpers import prod
from dataclasses import dataclass, replace

from codegen.kernel import Kernel, OptOps
from codegen.linearizer import LinearKernel, Linearizer
from codegen.opt import optimize
from codegen.opt.tile_measures import loads_per_update as _loads_per_update
from codegen.target import cpu
from codegen.ops import ReduceOps
from codegen.uops import UOps
from lazyten import Tensor
from lazyten.schedule import create_schedule
from runtimes import get_runtime
from tests.helpers import assert_matmul

SIDES = st.sampled_from([1, 2, 3, 5, 7, 8, 13, 16, 17, 31, 32, 48, 65])


def beyond_l2(cols: int, multiple: int = 64) -> int:
    """Rows of `cols` floats that make an operand twice the L2 cache (and 512 KB at least):
    one the pack pass copies into panels where its lanes are contiguous (D107)."""
    l2 = max(get_runtime("CPU").renderer.target.l2_bytes, 1 << 18)
    rows = 2 * l2 // (4 * cols)
    return rows + -rows % multiple


def rnd(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-4, 5, size=shape).astype(dtype)
    if np.dtype(dtype).kind == "b":
        return rng.random(shape) < 0.5
    return rng.standard_normal(shape).astype(dtype)


@dataclass
class Lowered:
    k: Kernel              # the optimised kernel: its lanes, upcasts, shape
    kernel: LinearKernel   # its uops


def linearized(t: Tensor, tile: int = 256) -> Lowered:
    """The kernel that computes t, lowered for an AVX-512 CPU (16 float lanes) with a
    budget of `tile` accumulators (0: no tiling)."""
    item = create_schedule([t.lazydata])[-1]
    target = replace(cpu(512), tile=tile)
    k = optimize(Kernel(item.ast), target)
    return Lowered(k, Linearizer(k, target).linearize())


@settings(max_examples=12, deadline=None)
@given(m=st.sampled_from([64, 96, 256, 300]), k=st.sampled_from([100, 300, 784]),
       n=st.sampled_from([80, 100, 112]), kind=st.sampled_from(["nn", "nt"]))
@example(m=256, k=300, n=100, kind="nn")
def test_a_matmul_5_to_7_vectors_wide_takes_rows_not_vectors(m, k, n, kind):
    """A matmul whose row is 5-7 vectors (80-112 columns: a 100-wide layer, padded to 112)
    over a B past the L1 unrolls 8-16 rows x 1 vector, not 2 rows x the whole row: those
    vector loads of B at every step streamed it from the L2 (2 x 7: 218 us a call on one
    thread at 256 x 100 over 300, 16 x 1: 121; D140). Rows that 8 does not divide keep the
    wide tile (300 rows: 4 x 1 would leave the FMAs waiting). Against numpy: padded
    columns, a transposed B (Linear's x @ W.T)."""
    a, b = rnd((m, k)), rnd((k, n) if kind == "nn" else (n, k), seed=1)
    out = Tensor(a) @ (Tensor(b) if kind == "nn" else Tensor(b).T)
    bn = b if kind == "nn" else b.T
    lin = linearized(out)
    wide = [o for o in lin.k.applied if o.op is OptOps.UPCAST and o.axis == 1 and 4 < o.amount < 16]
    if m % 8 == 0 and 4 * k * n > cpu(512).cached_bytes:
        assert not wide, lin.k.applied
    assert_matmul(out.numpy(), a, bn)


@pytest.mark.parametrize("m,k,n", [(8, 64, 256), (8, 32, 128), (1, 784, 128), (9, 40, 320),
                                   (16, 100, 304), (4, 256, 256)])
def test_a_small_matmul_keeps_enough_chains_to_hide_the_fma_latency(m, k, n):
    """A small kernel's tile is not cut below 8 vector accumulators (D138): each is a
    chain of FMAs as long as the reduce, and 2 of them (the old budget for 8 x 64 x 256:
    one accumulator per 4096 iterations) left the FMA units idle 3 cycles in 4. The
    values are numpy's."""
    a, b = rnd((m, k)), rnd((k, n), seed=1)
    out = Tensor(a) @ Tensor(b)
    lin = linearized(out)
    accs = [u for u in lin.kernel.uops if u.op is UOps.DEFINE_ACC]
    vectors = sum(-(-u.dtype.count // 16) for u in accs)
    assert vectors >= min(8, m * (n // 16)), (vectors, lin.k.applied)
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-4)


def scalar_input_loads(lin: Lowered) -> list:
    """Loads of one element from an input buffer: what a lane-by-lane gather emits, and
    what a load of the span the lanes touch (one vector load, then a shuffle) avoids."""
    return [u for u in lin.kernel.uops if u.op is UOps.LOAD and u.dtype.count == 1
            and u.src[0].arg[0] != "data0"]


def test_matmul_tiles_into_vector_accumulators():
    a, b = Tensor(rnd((128, 128))), Tensor(rnd((128, 128), seed=1))
    lin = linearized(a @ b)
    assert lin.k.lanes == 16, "the output-contiguous axis should become 16 vector lanes"
    accs = [u for u in lin.kernel.uops if u.op is UOps.DEFINE_ACC]
    assert sum(u.dtype.count for u in accs) == 256, "a 4 x 64 tile of accumulators"
    assert all(u.dtype == dtypes.float32.vec(16) for u in accs)
    # without tiling: one scalar accumulator
    plain = linearized(a @ b, tile=0)
    assert [u.dtype for u in plain.kernel.uops if u.op is UOps.DEFINE_ACC] == [dtypes.float32]
    # a small kernel gets a smaller tile (it buys little run time and costs compile
    # time), but 8 vectors: enough chains to hide the FMA latency (D138)
    small = linearized(Tensor(rnd((16, 16))) @ Tensor(rnd((16, 64), seed=1)))
    assert sum(u.dtype.count for u in small.kernel.uops if u.op is UOps.DEFINE_ACC) == 128


@settings(max_examples=40, deadline=None)
@given(m=SIDES, n=SIDES, k=SIDES, ta=st.booleans(), tb=st.booleans(),
       dtype=st.sampled_from([np.float32, np.float64, np.int32]))
def test_matmul_odd_sizes_and_layouts(m, n, k, ta, tb, dtype):
    a, b = rnd((k, m) if ta else (m, k), dtype), rnd((n, k) if tb else (k, n), dtype, seed=1)
    ta_t, tb_t = Tensor(a), Tensor(b)
    out = (ta_t.T if ta else ta_t) @ (tb_t.T if tb else tb_t)
    ref = (a.T if ta else a) @ (b.T if tb else b)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)


@settings(max_examples=20, deadline=None)
@given(batch=st.sampled_from([1, 3]), m=SIDES, n=SIDES, k=SIDES)
def test_batched_and_broadcast_matmul(batch, m, n, k):
    a, b = rnd((batch, m, k)), rnd((k, n), seed=1)
    bias = rnd((n,), seed=2)
    out = (Tensor(a) @ Tensor(b) + Tensor(bias)).relu()
    np.testing.assert_allclose(out.numpy(), np.maximum(a @ b + bias, 0), rtol=1e-4, atol=1e-4)


@settings(max_examples=25, deadline=None)
@given(rows=SIDES, cols=SIDES, pad=st.tuples(*[st.integers(0, 3)] * 4),
       op=st.sampled_from(["sum", "max"]), axis=st.sampled_from([0, 1]))
@example(rows=17, cols=32, pad=(2, 1, 0, 0), op="sum", axis=0)  # one gated vector load
@example(rows=5, cols=13, pad=(0, 0, 1, 2), op="max", axis=0)   # gated lane by lane
def test_padded_reductions(rows, cols, pad, op, axis):
    """Masked (gated) loads, vector and lane by lane, on both reduce axes."""
    x = rnd((rows, cols))
    padding = ((pad[0], pad[1]), (pad[2], pad[3]))
    t = Tensor(x).pad(padding)
    ref = np.pad(x, padding)
    out = getattr(t, op)(axis=axis)
    np.testing.assert_allclose(out.numpy(), getattr(ref, op)(axis=axis), rtol=1e-5, atol=1e-5)


@settings(max_examples=15, deadline=None)
@given(n=SIDES, c=st.sampled_from([1, 3, 6, 16]), size=st.sampled_from([5, 8, 12]),
       k=st.sampled_from([1, 3, 5]), padding=st.integers(0, 2), stride=st.integers(1, 2))
def test_conv2d_against_numpy(n, c, size, k, padding, stride):
    from tests.helpers import conv_ref
    n = min(n, 4)
    x, w, b = rnd((n, 2, size, size)), rnd((c, 2, k, k), seed=1), rnd((c,), seed=2)
    out = Tensor(x).conv2d(Tensor(w), Tensor(b), padding=padding, stride=stride)
    ref = conv_ref(x, w, b, stride=stride, padding=padding)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.uint8, np.int64, np.float16])
def test_tiled_dtypes(dtype):
    """bool is a byte in memory and i1 in registers; half is stored, computed in float."""
    a, b = rnd((19, 33), dtype), rnd((33, 48), dtype, seed=1)
    wide = np.float32 if dtype == np.float16 else np.int64
    ref = a.astype(wide) @ b.astype(wide)
    out = Tensor(a).cast(dtypes.float32 if dtype == np.float16 else dtypes.int64) @ \
        Tensor(b).cast(dtypes.float32 if dtype == np.float16 else dtypes.int64)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-3)
    # a comparison inside the reduce and a bool result after it
    x = rnd((17, 48), dtype)
    got = (Tensor(x).cast(dtypes.float32) > 0).cast(dtypes.int32).sum(axis=0) > 3
    np.testing.assert_array_equal(got.numpy(), (x.astype(np.float32) > 0).sum(0) > 3)


def test_float64_reduce_to_half():
    """A float64 -> float16 cast on vector lanes goes lane by lane through the helper."""
    a, b = rnd((8, 16), np.float64), rnd((16, 32), np.float64, seed=1)
    out = (Tensor(a) @ Tensor(b)).cast(dtypes.float16)
    np.testing.assert_array_equal(out.numpy(), (a @ b).astype(np.float16))


@pytest.mark.parametrize("ta,tb", [(False, False), (True, True), (False, True), (True, False)])
def test_packed_operand_every_layout(ta, tb):
    """A big strided right-hand operand is packed into panels four vectors wide by one
    extra copy kernel, whatever its layout; the result is unchanged. (A @ B.T with A
    contiguous along the reduce runs as dot products under 256 rows: 256 rows here.)"""
    from lazyten.realize import Stats
    # B twice the L2 (contiguous lanes in L2 are read in place, D107), rows 256 floats apart
    m, k, n = (256 if tb and not ta else 96), beyond_l2(256), 256
    a, b = rnd((k, m) if ta else (m, k)), rnd((n, k) if tb else (k, n), seed=1)
    at, bt = Tensor(a).realize(), Tensor(b).realize()
    out = (at.T if ta else at) @ (bt.T if tb else bt)
    items = create_schedule([out.lazydata])
    assert len(items) == 2, "expected the pack copy and the matmul"
    width = get_runtime("CPU").renderer.target.pack  # four vectors: 64 floats with AVX-512
    assert items[0].out.shape == (n // width, k, width)
    before = Stats.kernels
    got = out.numpy()
    assert Stats.kernels - before == 2
    assert_matmul(got, a.T if ta else a, b.T if tb else b)


@pytest.mark.parametrize("view", ["same", "offset", "flipped"])
def test_kernels_that_pack_one_value_alike_share_the_copy(view):
    """An RNN reads its weight in every time step. Two matmuls of one schedule that pack
    the same value read the same way (W.T: lanes gathered, rows far apart) get one copy
    kernel; another view of it (rows 64 on, or flipped) gets its own. The results match
    numpy on the first run and on the second (from the schedule cache's plan)."""
    from lazyten.realize import Stats
    m, k, n = 96, 256, 256
    big = rnd((n + 64, k))
    x1, x2 = rnd((k, m), seed=1), rnd((k, m), seed=2)
    bigt, t1, t2 = Tensor(big).realize(), Tensor(x1).realize(), Tensor(x2).realize()
    w, w2 = {"same": (big[:n], big[:n]), "offset": (big[:n], big[64:]),
             "flipped": (big[:n], big[:n][::-1])}[view]
    for _ in range(2):
        wt = bigt[:n]
        w2t = {"same": wt, "offset": bigt[64:], "flipped": wt.flip(0)}[view]
        out = (t1.T @ wt.T) * (t2.T @ w2t.T)
        items = create_schedule([out.lazydata])
        copies = [i for i in items if i.ast is not None and i.out.op.name == "CONTIGUOUS"]
        assert len(copies) == (1 if view == "same" else 2)
        before = Stats.kernels
        got = out.numpy()
        assert Stats.kernels - before == len(items)
        np.testing.assert_allclose(got, (x1.T @ w.T) * (x2.T @ w2.T), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("n,batch", [(200, 0), (64, 0), (200, 3)])
def test_no_pack_where_it_does_not_apply(n, batch):
    """Widths not divisible by the panel and small operands are read in place."""
    k = 512
    a = rnd((batch, 32, k) if batch else (32, k))
    b = rnd((batch, k, n) if batch else (k, n), seed=1)
    out = Tensor(a).realize() @ Tensor(b).realize()
    assert len(create_schedule([out.lazydata])) == 1
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("batch,rows,keys,inner", [((4, 4), 128, 128, 32), ((3,), 40, 96, 16),
                                                    ((2, 3), 33, 64, 48), ((64,), 64, 32, 256)])
def test_batched_operands_with_contiguous_lanes_that_fit_in_l1_are_read_in_place(
        batch, rows, keys, inner):
    """A batch's operand under the L1 size whose lanes are contiguous (attention's v in
    P @ v, 128 x 32 a head: 16 KB) is re-read from the cache: no copy kernel, however
    many batches there are. The last case is the one only the L1 rule keeps in place
    (32 KB a batch, 2 MB in all, rows 1 KB apart: packed without it); the others are
    also short-strided enough to read well."""
    p, v = rnd((*batch, rows, keys)), rnd((*batch, keys, inner), seed=1)
    assert keys * inner * 4 <= get_runtime("CPU").renderer.target.cached_bytes
    out = Tensor(p).realize() @ Tensor(v).realize()
    assert len(create_schedule([out.lazydata])) == 1
    np.testing.assert_allclose(out.numpy(), p @ v, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("batch,keys,inner", [((4, 4), 128, 32), ((8, 2), 100, 16),
                                              ((8, 2), 200, 32), ((8, 2), 77, 32),
                                              ((8, 2), 96, 16), ((2, 3), 64, 48)])
def test_batched_operands_in_l1_are_packed_where_their_lanes_would_be_gathered(
        batch, keys, inner):
    """A batch's operand under the L1 size whose lanes would be gathered (attention's k^T:
    its lanes are rows of k) gets panels, the last padded with zeros where no panel
    divides the keys: read in place, each reduce step built its vector a lane at a time
    (4x4x128x32's q @ k^T on one thread: 204 us in place, 7 + 107 packed; at 100 keys 4
    lanes at a time, D103, D141). The result is unchanged."""
    q, k = rnd((*batch, keys, inner)), rnd((*batch, keys, inner), seed=1)
    out = Tensor(q).realize() @ Tensor(k).realize().transpose(-1, -2)
    items = create_schedule([out.lazydata])
    target = get_runtime("CPU").renderer.target
    assert keys * inner * 4 <= target.cached_bytes, "the operand must fit the L1 cache"
    panels = -(-keys // target.pack)
    assert len(items) == 2 and items[0].out.shape == (*batch, panels, inner, target.pack)
    np.testing.assert_allclose(out.numpy(), q @ np.swapaxes(k, -1, -2), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape,transposed", [((2, 3, 128, 64), True), ((2, 3, 128, 64), False),
                                              ((3, 512, 256), False), ((2, 256, 192), True)])
def test_batched_operands_are_packed_per_batch(shape, transposed):
    """A batched matmul's strided operand (attention's k^T: rows of k are 64 floats apart
    along the output's vector lanes) gets one set of panels per batch (D25): the copy
    kernel's output has the batch axes in front; the result is unchanged. (Contiguous
    lanes are packed only beyond the L2 cache, D107: there the reduce is made longer.)"""
    *batch, rows, inner = shape
    cols = 256
    if not transposed:
        inner = max(inner, beyond_l2(cols * prod(batch), 8))
    a = rnd((*batch, rows, inner))
    b = rnd((*batch, cols, inner) if transposed else (*batch, inner, cols), seed=1)
    bt = Tensor(b).realize()
    out = Tensor(a).realize() @ (bt.transpose(-1, -2) if transposed else bt)
    items = create_schedule([out.lazydata])
    width = get_runtime("CPU").renderer.target.pack
    assert len(items) == 2 and items[0].out.shape == (*batch, cols // width, inner, width)
    assert_matmul(out.numpy(), a, np.swapaxes(b, -1, -2) if transposed else b)


@pytest.mark.parametrize("batch,m,k,n", [((), 512, 1024, 128), ((16,), 256, 64, 96),
                                         ((2, 3), 320, 128, 72), ((), 264, 600, 40)])
def test_transposed_left_operand_packs_into_row_panels(batch, m, k, n):
    """A weight gradient's left operand, x^T with x (k, m) in memory, is contiguous along
    the output's rows and 4 * m bytes apart along the reduce: each broadcast of the
    tile's 4 rows read 16 bytes of a new cache line per step. Beyond the L2 cache (D107:
    k grows to make it so) it is copied into panels of rows (D73): P[i // 8, r, i % 8].
    A batch of reduce axes (tokens of a batch, as Linear's weight gradient reduces over
    (batch, tokens)) is merged first; the result is unchanged."""
    k = max(k, beyond_l2(m * prod(batch), 8))
    a = rnd((*batch, k, m))
    b = rnd((*batch, k, n), seed=1)
    at, bt = Tensor(a).realize(), Tensor(b).realize()
    if batch:  # sum over the batch and the reduce: a gradient's (batch, tokens)
        out = (at.unsqueeze(-1) * bt.unsqueeze(-2)).sum(axis=tuple(range(len(batch) + 1)))
        ref = a.reshape(-1, m).T.astype(np.float64) @ b.reshape(-1, n).astype(np.float64)
    else:
        out = at.T @ bt
        ref = a.T.astype(np.float64) @ b.astype(np.float64)
    items = create_schedule([out.lazydata])
    copies = [i for i in items if i.out.shape[-1:] == (8,) and len(i.out.shape) == 3]
    assert len(copies) == 1, [i.out.shape for i in items]
    assert copies[0].out.shape == (m // 8, k * (np.prod(batch, dtype=int) if batch else 1), 8)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-3)


@settings(max_examples=12, deadline=None)
@given(m=st.integers(32, 66).map(lambda x: 8 * x), k=st.integers(128, 700),
       n=st.integers(1, 70), batch=st.sampled_from([(), (3,), (2, 2)]),
       bias=st.booleans())
def test_row_panels_match_numpy(m, k, n, batch, bias):
    """Row panels under any reduce length, output width, batch of reduce axes, and an
    elementwise op after the reduce (a bias), against numpy in float64."""
    a, b, c = rnd((*batch, k, m)), rnd((*batch, k, n), seed=1), rnd((n,), seed=2)
    at, bt = Tensor(a).realize(), Tensor(b).realize()
    out = (at.unsqueeze(-1) * bt.unsqueeze(-2)).sum(axis=tuple(range(len(batch) + 1)))
    out = out + Tensor(c) if bias else out
    ref = a.reshape(-1, m).T.astype(np.float64) @ b.reshape(-1, n).astype(np.float64)
    np.testing.assert_allclose(out.numpy(), ref + c if bias else ref, rtol=1e-4, atol=2e-3)


@pytest.mark.parametrize("m,k", [(100, 1024), (128, 4096), (128, 128), (260, 1024)])
def test_left_operands_that_read_well_are_not_packed(m, k):
    """Rows close together along the reduce (100 and 128 floats apart), a small operand
    (128 x 128: 64 KB), rows no panel divides (260) and a left operand in row order
    (x @ w: contiguous along the reduce, not along the rows) are read in place."""
    a, b = rnd((k, m)), rnd((k, 64), seed=1)
    at, bt = Tensor(a).realize(), Tensor(b).realize()
    for out, ref in ((at.T @ bt, a.T @ b), (Tensor(a.T.copy()).realize() @ bt, a.T @ b)):
        items = create_schedule([out.lazydata])
        assert not any(len(i.out.shape) == 3 and i.out.shape[-1] == 8 for i in items)
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("layout", ["B", "A^T"])
@pytest.mark.parametrize("rows", [32, 128, 512])
def test_operands_with_contiguous_lanes_that_fit_the_l2_are_read_in_place(layout, rows):
    """A right operand contiguous along the lanes (x @ W) or a left one contiguous along
    the rows (a weight gradient's dy^T) that fits half the L2 cache is re-read from there
    as fast as from panels: no copy (D107: 32 x 256 x 256 50 -> 30 us, a weight gradient
    256 x 1024 x 256 710 -> 616 us). One that fills the L2 gets its panels where 64 output
    rows or more read it again (D130: 128 x 1024 x 512 830 -> 533 us; 32 rows: in place),
    and twice the L2, always."""
    l2 = max(get_runtime("CPU").renderer.target.l2_bytes, 1 << 18)
    half, full = l2 // (8 * max(256, rows)), l2 // (4 * max(256, rows))
    # filling the L2: B where 128 rows read it (not 32), dy^T (512 rows) where 256 columns do
    fills = rows == 128 or (rows == 512 and layout == "A^T")
    for k, packed in ((half, False), (full, fills), (beyond_l2(256), True)):
        a = rnd((k, rows) if layout == "A^T" else (rows, k))
        b = rnd((k, 256), seed=1)
        at, bt = Tensor(a).realize(), Tensor(b).realize()
        out = (at.T if layout == "A^T" else at) @ bt
        items = create_schedule([out.lazydata])
        assert (len(items) > 1) == packed, (k, [i.out.shape for i in items])
        ref = (a.T if layout == "A^T" else a).astype(np.float64) @ b.astype(np.float64)
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-3)


def test_reductions_are_not_packed():
    """A plain reduce reads its input once: packing would only add a copy."""
    x = rnd((512, 640))
    for out, kernels, ref in ((Tensor(x).sum(axis=1), 1, x.sum(1)),
                              (Tensor(x).sum(axis=0), 1, x.sum(0)),
                              (Tensor(x).softmax(-1), 1, None)):  # one row kernel (D55)
        assert len(create_schedule([out.lazydata])) == kernels
        if ref is not None:
            np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4)


def test_conv_window_reads_are_one_view():
    """The repeat trick's window views simplify to one affine view, so conv kernels tile."""
    x, w = Tensor(rnd((4, 3, 28, 28))), Tensor(rnd((6, 3, 5, 5), seed=1))
    (item,) = create_schedule([x.conv2d(w).lazydata])
    loads = [n for n in item.ast.walk() if n.op.name == "LOAD"]
    assert loads and all(len(n.arg.st.views) == 1 for n in loads)


@settings(max_examples=15, deadline=None)
@given(rows=st.sampled_from([256, 96, 97]), cols=st.sampled_from([3, 6]),
       op=st.sampled_from(["sum", "max"]))
def test_long_reduce_into_few_outputs_is_split(rows, cols, op):
    """A long reduce with few outputs runs in two stages (chunks, then the partials) so the
    CPU threads share it; lengths with no small divisor (97 and 37, outside the innermost
    axis) stay one kernel."""
    x = rnd((rows, cols, 37, 16))
    out = getattr(Tensor(x), op)(axis=(0, 2, 3))
    kernels = len(create_schedule([out.lazydata]))
    assert kernels == (1 if rows == 97 else 2)
    want = getattr(x.astype(np.float64), op)(axis=(0, 2, 3))
    # float32 partial sums of n normal values: rounding error grows like n * 2^-24 at worst
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=rows * 592 * 2**-24)


@pytest.mark.parametrize("shape,axis", [((64, 32, 128), (0, 2)), ((16, 64, 8, 300), (0, 2, 3)),
                                        ((72, 24, 200), (0, 2))])
def test_a_split_cuts_an_outer_axis_and_keeps_rows_whole(shape, axis):
    """A split reduce cuts an outer reduced axis into chunks where one divides into 8 or
    more, so each chunk reads whole runs of the innermost axis: a conv1d bias gradient
    (64 x 32 x 128 over batch and positions) cut along its 128 positions read 4 floats
    from each of 64 batches per output (0.67 ms); cut along the batch, whole rows (D109)."""
    x = rnd(shape)
    out = Tensor(x).sum(axis=axis)
    items = create_schedule([out.lazydata])
    assert len(items) == 2, [i.out.shape for i in items]
    load = next(n for n in items[0].ast.walk() if n.op.name == "LOAD")
    assert load.arg.st.shape[-1] == shape[-1], load.arg.st.shape  # the innermost axis whole
    want = x.astype(np.float64).sum(axis=axis)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=np.prod(shape) * 2**-24)


@settings(max_examples=12, deadline=None)
@given(rows=st.sampled_from([1, 8, 31, 32, 40]),
       cols=st.sampled_from([8192, 12288, 50257 // 2, 50257, 70000]),
       op=st.sampled_from(["sum", "softmax", "layernorm"]))
def test_long_rows_are_split_only_when_too_few_to_share(rows, cols, op):
    """A reduce over whole trailing rows stays one kernel (a row kernel for softmax and
    layernorm) once there are rows enough for every thread (16 each), or while a row
    fits a row kernel (64K elements: softmax over 8 x 50257 was five kernels split, 299
    us, and is one, 169 us); fewer, longer rows are split so the threads share each row.
    Either way the values are numpy's."""
    from lazyten.split import ROW_MAX
    from runtimes import get_runtime
    threads = get_runtime("CPU").renderer.target.threads
    x = rnd((rows, cols))
    out = {"sum": lambda t: t.sum(-1), "softmax": lambda t: t.softmax(-1),
           "layernorm": lambda t: t.layernorm()}[op](Tensor(x))
    kernels = len(create_schedule([out.lazydata]))
    split = rows < 16 * threads and cols > ROW_MAX and cols % 2 == 0
    assert (kernels > 1) == split or op != "sum"
    if op == "sum":
        want = x.astype(np.float64).sum(-1)
    elif op == "softmax":
        e = np.exp(x - x.max(-1, keepdims=True))
        want = e / e.sum(-1, keepdims=True)
    else:
        want = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=cols * 2**-24)
    if op != "sum" and cols <= ROW_MAX:
        assert kernels == 1, f"a row kernel over {rows} x {cols}: got {kernels} kernels"


def test_the_graph_is_the_same_for_every_device_and_splitting_is_a_schedule_pass():
    """Tensor code builds one REDUCE whatever the device; scheduling for the CPU splits it.
    A split reduce fused into one consumer and read again later by another, and the same
    graph scheduled again from the schedule cache, still compute the sum."""
    x = rnd((256, 6, 24, 24))
    for device in ("CPU", "NULL"):
        lb = Tensor(x, device=device).sum(axis=(0, 2, 3)).lazydata
        assert lb.base.op is ReduceOps.SUM and lb.base.src[0].base.op is not ReduceOps.SUM
    want = x.astype(np.float64).sum(axis=(0, 2, 3))
    for _ in range(2):  # the second time from the schedule cache
        s = Tensor(x).sum(axis=(0, 2, 3))
        a, b = s + 1, s * 2
        np.testing.assert_allclose(a.numpy(), want + 1, rtol=1e-5)
        np.testing.assert_allclose(b.numpy(), want * 2, rtol=1e-5)


def test_gpu_devices_split_reduces_only_to_fill_the_card():
    """D90: a GPU split what is a work-group per output (6 outputs: 1536 work-items) into
    as many chunks as the largest axis allows (256: 1536 work-groups)."""
    x = Tensor(rnd((256, 6, 24, 24)), device="NULL")
    items = create_schedule([x.sum(axis=(0, 2, 3)).lazydata])
    assert [int(np.prod(i.out.shape)) for i in items] == [1536, 6]
    rows = Tensor(rnd((4096, 300)), device="NULL")  # 4096 work-groups of 256: kept whole
    assert len(create_schedule([rows.sum(axis=1).lazydata])) == 1


def test_conv_gradients_are_convolutions():
    """The input gradient is a transposed convolution over a materialised, padded output
    gradient: no load in the backward schedule goes through three views (the overlap-add
    generic autograd would build), and the values match numpy."""
    from tests.helpers import conv_ref
    xn, wn = rnd((2, 3, 12, 12), np.float64), rnd((4, 3, 5, 5), np.float64, seed=1)
    x, w = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
    out = x.conv2d(w, padding=1)
    gn = rnd(out.shape, np.float64, seed=2)
    (out * Tensor(gn)).sum().backward()
    items = create_schedule([x.grad.lazydata, w.grad.lazydata])
    loads = [n for i in items if i.ast is not None for n in i.ast.walk() if n.op.name == "LOAD"]
    assert max(len(n.arg.st.views) for n in loads) <= 2
    # numpy: d/dx sum(g * conv(x, w)) by the adjoint, written out per tap
    xp = np.pad(xn, ((0, 0), (0, 0), (1, 1), (1, 1)))
    gx, gw = np.zeros_like(xp), np.zeros_like(wn)
    for ky in range(5):
        for kx in range(5):
            win = xp[:, :, ky:ky + 10, kx:kx + 10]
            gw[:, :, ky, kx] = np.einsum("bohw,bchw->oc", gn, win)
            gx[:, :, ky:ky + 10, kx:kx + 10] += np.einsum("bohw,oc->bchw", gn, wn[:, :, ky, kx])
    np.testing.assert_allclose(out.numpy(), conv_ref(xn, wn, padding=1), rtol=1e-10)
    np.testing.assert_allclose(x.grad.numpy(), gx[:, :, 1:-1, 1:-1], rtol=1e-10)
    np.testing.assert_allclose(w.grad.numpy(), gw, rtol=1e-10)


@settings(max_examples=40, deadline=None)
@given(size=st.tuples(st.integers(1, 9), st.integers(1, 9)),
       k=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       stride=st.tuples(st.integers(1, 4), st.integers(1, 4)),
       dil=st.tuples(st.integers(1, 2), st.integers(1, 2)))
def test_memoized_windows_match_the_autograd_path(size, k, stride, dil):
    """Without autograd the window chain runs once on the ShapeTracker (memoized); it must
    give the same windows as the Tensor chain autograd uses, and as numpy."""
    if any(d * (kk - 1) + 1 > s for d, kk, s in zip(dil, k, size)):
        return
    x = rnd((2,) + size)
    fast = Tensor(x)._pool(k, stride, dil).numpy()
    slow = Tensor(x, requires_grad=True)._pool(k, stride, dil).numpy()
    out = [(s - d * (kk - 1) - 1) // st_ + 1 for s, kk, st_, d in zip(size, k, stride, dil)]
    ref = np.empty((2, *out, *k), np.float32)
    for oy in range(out[0]):
        for ox in range(out[1]):
            for ky in range(k[0]):
                for kx in range(k[1]):
                    ref[:, oy, ox, ky, kx] = x[:, oy * stride[0] + ky * dil[0], ox * stride[1] + kx * dil[1]]
    np.testing.assert_array_equal(fast, ref)
    np.testing.assert_array_equal(slow, ref)


@settings(max_examples=25, deadline=None)
@given(batch=st.sampled_from([1, 3]), cout=st.sampled_from([1, 2, 6]), cin=st.sampled_from([1, 3]),
       k=st.sampled_from([1, 3, 5]), ow=st.sampled_from([5, 8, 13, 16, 24, 32]),
       op=st.sampled_from(["sum", "max"]), dtype=st.sampled_from([np.float32, np.float64]))
@example(batch=2, cout=6, cin=1, k=5, ow=24, op="sum", dtype=np.float32)  # LeNet's conv1 dW
def test_weight_gradient_reduces_in_lanes(batch, cout, cin, k, ow, op, dtype):
    """A conv weight gradient's output is a window of taps (no vector rows), while its
    inputs walk the reduce contiguously: the tile's accumulators become vectors along the
    reduce, summed across lanes at the end."""
    x, g = rnd((batch, cin, 4 + k, ow + k - 1), dtype), rnd((batch, cout, 5, ow), dtype, seed=1)
    windows = Tensor(x)._pool((k, k), (1, 1), (1, 1)).reshape(batch, 1, cin, 5, ow, k, k)
    out = getattr(windows * Tensor(g).reshape(batch, cout, 1, 5, ow, 1, 1), op)(axis=(0, 3, 4))
    ref = np.empty((cout, cin, k, k), dtype)
    for ky in range(k):
        for kx in range(k):
            prod = x[:, None, :, ky:ky + 5, kx:kx + ow] * g[:, :, None]
            ref[:, :, ky, kx] = getattr(prod, op)(axis=(0, 3, 4))
    if ow % 8 == 0 and (cout > 1 or k > 1):
        lin = linearized(out)
        # 16 lanes where they divide the reduce, or pad it when it is 4 vectors long (D54)
        wide = ow % 16 == 0 or lin.k.padded
        assert lin.k.reduce_lanes and lin.k.lanes == (16 if wide else 8), lin.k.applied
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(out.numpy(), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("bits", [256, 512])
@pytest.mark.parametrize("cout,cin,width", [(64, 64, 16), (32, 48, 14), (8, 3, 32), (32, 3, 32)])
def test_weight_gradient_tile_leaves_registers_for_its_loads(bits, cout, cin, width):
    """Where the reduce takes the lanes, every accumulator of the tile is a vector
    register: the tile keeps no more of them than one with output lanes (half the
    registers), so the loads of each step have room (4 x 4 on AVX2 spilled: 16
    accumulators and 8 loads in 16 registers), and its unrolls are ranked by loads per
    update from the first one."""
    x, g = rnd((2, cin, width + 2, width + 2)), rnd((2, cout, width, width), seed=1)
    windows = Tensor(x)._pool((3, 3), (1, 1), (1, 1)).reshape(2, 1, cin, width, width, 3, 3)
    out = (windows * Tensor(g).reshape(2, cout, 1, width, width, 1, 1)).sum(axis=(0, 3, 4))
    target = cpu(bits)
    k = optimize(Kernel(create_schedule([out.lazydata])[-1].ast), target)
    accumulators = prod(k.upcasts) // max(k.lanes, 1)
    assert k.reduce_lanes and 2 <= accumulators <= target.tile // target.lanes, k.applied
    # and the copies share loads: taps and channels, fewer vector loads than updates (with
    # 3 input channels, 8 output channels alone took 9 loads for 8 updates; 3 taps x 2
    # channels take 5 for 6)
    assert _loads_per_update(k, target) < 1, k.applied
    windows = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))
    ref = np.einsum("ncyxij,nkyx->kcij", windows, g)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-3)


@settings(max_examples=25, deadline=None)
@given(size=st.sampled_from([6, 9, 13, 24, 35]), k=st.sampled_from([2, 3]),
       stride=st.sampled_from([1, 2, 3]), op=st.sampled_from(["max", "mean"]))
@example(size=24, k=2, stride=2, op="max")  # LeNet's pool: 12 lanes from a 23-wide span
def test_pool_lanes_gather_from_a_span(size, k, stride, op):
    """A short reduce (a pool window) is vectorised across the outputs; lanes that read
    memory at a stride load the span they touch once and pick their elements from it."""
    x = rnd((2, 3, size, size))
    out_len = (size - k) // stride + 1
    windows = Tensor(x)._pool((k, k), (stride, stride), (1, 1))
    out = getattr(windows, op)(axis=(-2, -1))
    ref = np.empty((2, 3, out_len, out_len), np.float32)
    for oy in range(out_len):
        for ox in range(out_len):
            win = x[:, :, oy * stride:oy * stride + k, ox * stride:ox * stride + k]
            ref[:, :, oy, ox] = getattr(win, op)(axis=(-2, -1))
    if 8 < out_len <= 16 or out_len % 8 == 0:
        lin = linearized(out)
        assert lin.k.lanes >= 8 and scalar_input_loads(lin) == []
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-6)


def test_operands_broadcast_over_two_output_axes_are_not_packed():
    """Packing copies a panel along the lanes and one reduce axis; an operand that moves
    along two output axes (here T[b, n], transposed in memory, re-read for every a) is
    read in place: no copy kernel."""
    x, t = rnd((2, 8)), rnd((256, 256), seed=1)  # t is stored (n, b)
    xt, tt = Tensor(x).realize(), Tensor(t).realize()
    out = (xt.reshape(2, 1, 1, 8) * tt.T.reshape(1, 256, 256, 1)).sum(axis=3)
    assert len(create_schedule([out.lazydata])) == 1
    ref = (x[:, None, None, :] * t.T[None, :, :, None]).sum(axis=3)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)


@settings(max_examples=20, deadline=None)
@given(rows=st.sampled_from([1, 3, 8, 12, 64]), cols=st.sampled_from([8, 200, 256, 264, 1000, 1024]),
       op=st.sampled_from(["sum", "max"]))
@example(rows=64, cols=1024, op="sum")
def test_long_row_reduces_stream_several_rows(rows, cols, op):
    """A long contiguous reduce with no reuse takes several rows at once (more memory
    streams per core), each a vector of partial results summed across lanes."""
    x = rnd((rows, cols)) * 10
    out = getattr(Tensor(x), op)(axis=1)
    if rows % 2 == 0 and cols % 8 == 0 and cols >= 256:
        lin = linearized(out)
        assert lin.k.reduce_lanes and len(lin.k.upcasts) == 2
    want = getattr(x.astype(np.float64), op)(axis=1)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-3)


@settings(max_examples=20, deadline=None)
@given(h=st.sampled_from([1, 3, 4, 12]), w=st.sampled_from([3, 4, 6, 8, 12, 13]),
       factor=st.sampled_from([2, 3]))
@example(h=12, w=12, factor=2)  # LeNet's pooling backward: 24-wide rows read x // 2
def test_upsampled_reads_take_vector_lanes(h, w, factor):
    """An elementwise kernel reading an upsampled view (index x // 2) is not left to LLVM,
    which gives up on that index: its rows become vector lanes that load the span they
    touch once. Merging rows would make the index a div/mod tangle, so they stay apart."""
    x, y = rnd((2, 3, h, w)), rnd((2, 3, h * factor, w * factor), seed=1)
    up = Tensor(x).reshape(2, 3, h, 1, w, 1).expand(2, 3, h, factor, w, factor)
    out = up.reshape(2, 3, h * factor, w * factor) * Tensor(y) + 1
    ref = np.repeat(np.repeat(x, factor, axis=2), factor, axis=3) * y + 1
    row = w * factor
    if row % 8 == 0 or 8 < row <= 16:
        lin = linearized(out)
        assert lin.k.lanes in (8, 16, row) and lin.k.full_shape[-1] == lin.k.lanes
        if lin.k.lanes % factor == 0:  # lanes see the same pattern in every vector: the span
            assert scalar_input_loads(lin) == []
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6, atol=1e-6)


@settings(max_examples=25, deadline=None)
@given(shape=st.sampled_from([(7,), (24,), (3, 40), (1000,), (1001,), (5, 16, 33), (64, 48)]),
       fn=st.sampled_from(["sin", "cos"]), view=st.sampled_from(["plain", "T", "broadcast"]),
       dtype=st.sampled_from([np.float32, np.float16, np.float64]))
@example(shape=(1000,), fn="sin", view="plain", dtype=np.float32)
def test_sin_and_cos_kernels_take_vector_lanes(shape, fn, view, dtype):
    """float32 sin and cos branch to libm for lanes past 2^24 (D139): LLVM's loop
    vectoriser gives up on a loop with that branch, so their elementwise kernels take
    explicit lanes (a row that is no whole number of vectors is padded to one, its last
    vector masked), and branch once a vector. Fused with other ops, through transposed
    and broadcast views, odd sizes, float16 (computed in float32) and float64 (libm),
    against numpy."""
    x = rnd(shape, dtype) * 30
    y = rnd(shape[-1:], dtype, seed=1)
    if view == "T" and len(shape) > 1:
        x = np.ascontiguousarray(np.swapaxes(x, 0, -1))
        t = Tensor(x).transpose(0, -1)
        x = np.swapaxes(x, 0, -1)
    else:
        t = Tensor(x)
    if view == "broadcast":
        out, ref = getattr(t[..., :1].expand(*shape), fn)() * Tensor(y) + 1, \
            getattr(np, fn)(np.broadcast_to(x[..., :1], shape).astype(np.float64)) * y + 1
    else:
        out, ref = getattr(t, fn)() * Tensor(y) + 1, getattr(np, fn)(x.astype(np.float64)) * y + 1
    row = out.shape[-1]  # (y's broadcast keeps the last axis apart from the others)
    if dtype == np.float32 and view == "plain" and row >= 8:
        assert linearized(out).k.lanes in (8, 16, row)
    tol = 2e-3 if dtype == np.float16 else 1e-6
    np.testing.assert_allclose(out.numpy().astype(np.float64), ref, rtol=tol, atol=tol)


@settings(max_examples=30, deadline=None)
@given(h=st.sampled_from([1, 3, 8]), w=st.sampled_from([4, 5, 8, 12]),
       left=st.integers(0, 5), right=st.integers(0, 5), top=st.integers(0, 2),
       dtype=st.sampled_from([np.float32, np.float64, np.int32, np.float16, np.bool_]))
@example(h=8, w=8, left=4, right=4, top=4, dtype=np.float32)  # LeNet's conv2 input gradient
def test_padded_copies_take_masked_vector_loads(h, w, left, right, top, dtype):
    """A padded copy (its load is contiguous along the row but invalid in the padding)
    becomes vector lanes with one masked load per vector (zeros in the padding), not
    one gated load per element. Rows that are not a whole number of vectors, every pad,
    and dtypes stored differently (bool is not masked: it is stored as bytes)."""
    x = rnd((2, 3, h, w), dtype)
    out = Tensor(x).pad((left, right, top, 0)).contiguous()
    ref = np.pad(x, ((0, 0), (0, 0), (top, 0), (left, right)))
    if (left or right) and dtype != np.bool_:
        lin = linearized(out)
        if (w, left, right) == (8, 4, 4):
            assert lin.k.lanes == 16  # 16-wide rows
        if lin.k.lanes:
            assert scalar_input_loads(lin) == []
    np.testing.assert_array_equal(out.numpy(), ref)
