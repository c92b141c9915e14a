"""Matmuls whose sizes no vector divides (issue 15, D68), against numpy.

A long output row is padded to whole tiles of vectors and walked in a loop (the last
vector's loads and store masked); rows no tile divides are padded to a multiple of 4 (the
padded rows' loads read element 0, their stores are masked off); a strided operand is
packed into panels padded with zeros past the row's end. Each rule test checks that the
rule fired, so it fails when the rule is off, and every test compares with numpy at odd
sizes, on transposed, sliced, broadcast and batched inputs and over dtypes.
"""
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from codegen.kernel import Kernel, OptOps
from codegen.linearizer import Linearizer
from codegen.opt import optimize
from codegen.target import cpu
from codegen.uops import UOps
from lazyten import Tensor
from lazyten.schedule import create_schedule
from runtimes import get_runtime

SIDES = st.sampled_from([1, 3, 17, 63, 65, 100, 130, 257, 300])
LAYOUTS = ["nn", "tn", "nt", "tt"]


def rnd(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-4, 5, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def operands(m: int, k: int, n: int, layout: str, dtype=np.float32):
    """(a, b) as numpy arrays in the math's layout, and the Tensors, transposed views of
    realized buffers where the layout says so (t: stored transposed)."""
    a = rnd((k, m) if layout[0] == "t" else (m, k), dtype)
    b = rnd((n, k) if layout[1] == "t" else (k, n), dtype, seed=1)
    at, bt = Tensor(a).realize(), Tensor(b).realize()
    at, bt = (at.T if layout[0] == "t" else at), (bt.T if layout[1] == "t" else bt)
    return (a.T if layout[0] == "t" else a), (b.T if layout[1] == "t" else b), at, bt


def lowered(t: Tensor, index: int = -1, vector_bits: int = 512) -> Kernel:
    """A kernel of t's schedule optimised for a CPU `vector_bits` wide; it must emit."""
    target = cpu(vector_bits)
    k = optimize(Kernel(create_schedule([t.lazydata])[index].ast), target)
    Linearizer(k, target).linearize()
    return k


def pads(k: Kernel) -> list[tuple[int, int]]:
    """(axis, amount) of each PAD_OUT the passes applied."""
    return [(o.axis, o.amount) for o in k.applied if o.op is OptOps.PAD_OUT]


@settings(max_examples=40, deadline=None)
@given(m=SIDES, k=SIDES, n=SIDES, layout=st.sampled_from(LAYOUTS),
       dtype=st.sampled_from([np.float32, np.float64]))
@example(m=257, k=300, n=300, layout="nn", dtype=np.float32)  # both pads, packed B
@example(m=64, k=100, n=100, layout="nt", dtype=np.float64)
@example(m=130, k=17, n=300, layout="tn", dtype=np.float32)
def test_odd_matmuls_match_numpy(m, k, n, layout, dtype):
    a, b, at, bt = operands(m, k, n, layout, dtype)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose((at @ bt).numpy(), a @ b, rtol=tol, atol=tol * np.sqrt(k))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_long_rows_pad_to_whole_tiles(layout):
    """300 columns: padded to 320 (five tiles of 4 vectors, 300/320 busy) and walked in a
    loop, not unrolled whole; the tile is 4 rows x 4 vectors as at 320 (65 rows: 68). (A
    transposed B is packed only for 256 rows or more: fewer read it as dot products. B,
    150 KB, is past half of `cpu(512)`'s L2, where D142's 8 x 3 tile does not go.)"""
    a, b, at, bt = operands(65 if layout != "nt" else 260, 128, 300, layout)
    out = at @ bt
    k = lowered(out)
    assert (1, 64) in pads(k) and k.lanes == 16 and k.upcasts == [4, 4, 16], k.applied
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [300, 301])
def test_whole_vectors_of_a_transposed_input_take_the_lanes(n):
    """A weight gradient's A^T is contiguous along its 256 rows: the lanes run there (D66)
    and 300 columns, 4 a tile, are not padded; 301 (no 4 divides them) are."""
    a, b, at, bt = operands(256, 96, n, "tn")
    out = at @ bt
    k = lowered(out)
    assert (pads(k) == []) == (n % 4 == 0) and k.lanes == 16, k.applied
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n,amount", [(200, 32), (100, 16), (1000, 64), (3077, 64)])
def test_long_row_tile_width_keeps_seven_eighths_busy(n, amount):
    """The padded row takes the widest tile (4, 2, 1 vectors) that leaves 7/8 of it real:
    200 -> 224 (2 vectors; 256 would be 78%), 100 -> 112 (1), 1000 -> 1024 (4). (12 rows:
    no 8 of them for the three-vector tile of D142.)"""
    a, b = rnd((12, 24)), rnd((24, n), seed=1)
    out = Tensor(a) @ Tensor(b)
    assert (1, amount) in pads(lowered(out)), lowered(out).applied
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m", [257, 67, 19])
def test_rows_pad_to_the_tile(m):
    """An odd number of rows is padded to a multiple of 4 (257 -> 260) so the tile keeps
    4 rows; their stores are masked off, their loads read element 0 (an index select,
    no value select: `clamped`)."""
    a, b = rnd((m, 200)), rnd((200, 320), seed=1)
    out = Tensor(a) @ Tensor(b)
    k = lowered(out)
    assert (0, 4) in pads(k) and 4 in k.upcasts[:-1], k.applied
    assert k.clamped, "A's loads are masked only by the padding"
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("m,k", [(66, 200), (10, 256), (6, 40)])
def test_rows_that_need_no_padding_keep_their_size(m, k):
    """An even number of rows pads none (2 at a time: as few loads per update, no wasted
    rows). (9 x 40 x 320, once too small for a tile of 4 rows of vectors, pads to 12 rows
    since small kernels keep 8 vector accumulators: D138.)"""
    a, b = rnd((m, k)), rnd((k, 320), seed=1)
    out = Tensor(a) @ Tensor(b)
    assert (0, 4) not in pads(lowered(out)), lowered(out).applied
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-3)


def test_rows_of_a_masked_operand_are_not_padded():
    """An input read through a mask of its own (a padded tensor) keeps its rows and row
    unpadded by these rules; the values are numpy's."""
    a, b = rnd((257, 40)), rnd((40, 300), seed=1)
    out = Tensor(a).pad(((0, 0), (2, 3))) @ Tensor(b).pad(((2, 3), (0, 0)))
    k = lowered(out)
    assert pads(k) == [], k.applied
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("layout", ["nn", "nt", "tt"])
def test_transposed_operand_packs_into_zero_padded_panels(layout):
    """A transposed B (nt: Linear's weight) is copied into panels of the pack width, the
    last one padded with zeros; the matmul reads them as it reads whole panels. A B whose
    rows are contiguous (nn: 784 x 300, rows 300 floats apart) is read in place. (nt from
    256 rows: fewer read a B transposed and contiguous along the reduce as dot products.)"""
    m, k, n = (256 if layout == "nt" else 96), 784, 300
    a, b, at, bt = operands(m, k, n, layout)
    out = at @ bt
    items = create_schedule([out.lazydata])
    width = get_runtime("CPU").renderer.target.pack
    if layout == "nn":
        assert len(items) == 1, [i.out.shape for i in items]
    else:
        assert len(items) == 2 and items[0].out.shape == (-(-n // width), k, width), \
            f"expected a pack copy into padded panels: {[i.out.shape for i in items]}"
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-3)


def test_small_transposed_operand_is_packed():
    """A transposed B too small to pack for its rows' distance (100 x 300, 120 KB) is still
    packed: read in place, its lanes would be gathered one by one."""
    a, b, at, bt = operands(256, 300, 100, "nt")
    out = at @ bt
    assert len(create_schedule([out.lazydata])) == 2
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("m", [1, 32, 65, 255, 256])
@pytest.mark.parametrize("k", [100, 300])
@pytest.mark.parametrize("vector_bits", [256, 512])
def test_linear_forward_under_256_rows_reads_its_weight_as_dot_products(m, k, vector_bits):
    """x @ W.T (Linear's forward: both operands contiguous along the reduce) under 256 rows
    is one kernel whose reduce takes the vector lanes, W read in place (a pack copies W
    for every call and a tile with lanes across W's rows would gather them one by one:
    32 x 300 x 300 0.22 -> 0.14 ms end to end on AVX2); from 256 rows W is packed."""
    a, b, at, bt = operands(m, k, 300, "nt")
    out = at @ bt
    items = create_schedule([out.lazydata])
    assert len(items) == (2 if m >= 256 else 1), [i.out.shape for i in items]
    if m < 256:
        kernel = lowered(out, vector_bits=vector_bits)
        ops = [o.op for o in kernel.applied]
        assert OptOps.REDUCE_LANES in ops and OptOps.LANES not in ops, kernel.applied
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-3)


@settings(max_examples=15, deadline=None)
@given(batch=st.sampled_from([1, 3]), m=SIDES, k=st.sampled_from([5, 70]), n=SIDES,
       broadcast=st.booleans())
def test_batched_and_fused_odd_matmuls(batch, m, k, n, broadcast):
    """Batched (B broadcast or per batch), sliced inputs, and a bias and relu fused after
    the reduce: the padded outputs are computed and dropped."""
    a = rnd((batch, m, k + 1))[:, :, 1:]  # a slice: offset view, rows k + 1 apart
    b = rnd((k, n) if broadcast else (batch, k, n), seed=1)
    bias = rnd((n,), seed=2)
    out = (Tensor(rnd((batch, m, k + 1)))[:, :, 1:] @ Tensor(b) + Tensor(bias)).relu()
    np.testing.assert_allclose(out.numpy(), np.maximum(a @ b + bias, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.int32, np.float16])
def test_odd_matmul_dtypes(dtype):
    """Integers pad too (no division: the padding's products are never stored); half is
    stored as half and accumulated in float."""
    a, b = rnd((257, 33), dtype), rnd((33, 300), dtype, seed=1)
    out = Tensor(a) @ Tensor(b)
    assert pads(lowered(out)), lowered(out).applied
    if dtype == np.float16:
        ref = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
        np.testing.assert_allclose(out.numpy().astype(np.float32), ref.astype(np.float32),
                                   rtol=1e-2, atol=1e-1)
    else:
        np.testing.assert_array_equal(out.numpy(), a @ b)


def test_integer_division_is_not_padded():
    """A kernel that divides integers computes no padding (it would divide by zero)."""
    a, b = rnd((257, 33), np.int32), rnd((33, 300), np.int32, seed=1)
    out = (Tensor(a) @ Tensor(b)) // 7
    assert pads(lowered(out)) == [], lowered(out).applied
    np.testing.assert_array_equal(out.numpy(), (a @ b) // 7)


def test_avx2_pads_to_its_vectors():
    """8 float lanes: 300 pads to 32-wide tiles (320), 4 rows x 4 vectors."""
    a, b = rnd((64, 24)), rnd((24, 300), seed=1)
    k = lowered(Tensor(a) @ Tensor(b), vector_bits=256)
    assert (1, 32) in pads(k) and k.lanes == 8, k.applied


def test_padded_row_stores_are_masked():
    """The stores of rows that may lie in the padding are masked (a fourth, gate source),
    and the padded rows' loads are not value-selected. (B, 150 KB, is past half of the
    L2: D142's 8 x 3 tile does not take it.)"""
    target = replace(cpu(512), tile=256)
    out = Tensor(rnd((257, 128))) @ Tensor(rnd((128, 300), seed=1))
    k = optimize(Kernel(create_schedule([out.lazydata])[-1].ast), target)
    uops = Linearizer(k, target).linearize().uops
    stores = [u for u in uops if u.op is UOps.STORE]
    # a 4 x 4 tile of vectors: row 4i always exists (4 * 64 < 257), rows 4i + 1.. may not.
    # The columns' loop is split at its last tile (D147): in the first 4 tiles every
    # vector lies in the 300 columns (16 stores, the 12 of rows 4i + 1.. gated); in the
    # last, vectors 256 + 16j for j < 2 do, the third in part, the fourth not at all
    # (12 stores: the 9 of rows 4i + 1.. and row 4i's third vector gated)
    gated = sum(len(u.src) == 4 for u in stores)
    assert len(stores) == 28 and gated == 22, f"{gated} of {len(stores)} stores are gated"
    gated_loads = [u for u in uops if u.op is UOps.LOAD and len(u.src) == 3 and u.dtype.count == 1]
    assert gated_loads == [], "A's padded rows read element 0, ungated"


@pytest.mark.parametrize("n", [300, 100, 999])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_padded_panels_are_read_without_masks(n, dtype):
    """A packed B's last panel is padded with zeros in memory, so the lanes past the
    row's end read real memory (for outputs that are not stored): no load of the reduce
    loop is masked (vmaskmovps in every step cost 20% at 512 x 300 x 300); the stores
    past the row's end still are, and the values are numpy's."""
    a, b, at, bt = operands(256, 200, n, "nt", dtype)
    out = at @ bt
    target = cpu(256)
    k = optimize(Kernel(create_schedule([out.lazydata])[-1].ast), target)
    assert pads(k), k.applied
    uops = Linearizer(k, target).linearize().uops
    gated = [u for u in uops if u.op is UOps.LOAD and len(u.src) == 3]
    assert gated == [], f"{len(gated)} masked loads of a zero-padded panel"
    assert any(len(u.src) == 4 for u in uops if u.op is UOps.STORE), "padded stores are masked"
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("n,c,h,padded", [(8, 16, 11, False), (1, 64, 11, False),
                                           (2, 30, 11, True)])
def test_rows_are_not_padded_where_another_axis_takes_the_tile(n, c, h, padded):
    """An unpadded conv's odd output rows (11 -> 9) beside a batch or output channels that
    4 divides: the tile takes those, and no rows are padded (9 -> 12 ran 1.2-1.7x slower,
    D87); with a batch of 2 and 30 channels neither does, and the rows still pad to 12
    (axis 2, after the batch). The values are numpy's."""
    from tests.unit.test_conv_channel_lanes import conv_ref
    x, w = rnd((n, c, h, h)), rnd((c, c, 3, 3), seed=1)
    out = Tensor(x).conv2d(Tensor(w))
    k = lowered(out)
    assert bool(pads(k)) == padded, k.applied
    np.testing.assert_allclose(out.numpy(), conv_ref(x, w, padding=0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m,k,n,layout", [(16, 24, 1000, "nn"), (64, 96, 300, "nn"),
                                          (24, 40, 500, "nn"), (64, 32, 784, "tn"),
                                          (40, 16, 999, "tn"), (300, 40, 300, "tn"),
                                          (100, 24, 784, "nn"), (57, 30, 500, "nn")])
def test_a_long_row_over_a_streamed_b_takes_8_rows_of_3_vectors(m, k, n, layout):
    """A row no tile of 4 vectors divides (300, 500, 784, 999, 1000 columns) over a B read
    in place, past the L1 and within half the L2 (`cpu(512)`: 32 KB and 128 KB), takes 8
    rows x 3 vectors, padded to a multiple of 48, and rows that are no multiple of 8
    padded to one (300 -> 304, 100 -> 104, 57 -> 64) (D142): 24 accumulators, where the
    budget gave 16 rows x 1 vector or 4 x 4 padded to 64."""
    a, b, at, bt = operands(m, k, n, layout)
    out = at @ bt
    kernel = lowered(out)
    assert pads(kernel) == ([] if m % 8 == 0 else [(0, 8)]) + [(1, 48)] and \
        kernel.lanes == 16 and sorted(kernel.upcasts) == [3, 8, 16], kernel.applied
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m,k,n,layout,dtype,bits", [
    (16, 4, 1000, "nn", np.float32, 512),     # B within the L1 (16 KB)
    (16, 64, 1000, "nn", np.float32, 512),    # B past half the L2 (256 KB)
    (16, 24, 100, "nn", np.float32, 512),     # 100 of 144 columns real: under 7/8
    (12, 24, 1000, "nn", np.float32, 512),    # 12 rows: 16 once padded, 75% real
    (16, 24, 1024, "nn", np.float32, 512),    # 4 vectors divide the row
    (16, 24, 1000, "nn", np.float64, 512),    # 8-byte elements: two registers a vector
    (16, 24, 1000, "nn", np.float32, 256),    # 16 vector registers (AVX2)
])
def test_the_three_vector_tile_stays_within_its_measures(m, k, n, layout, dtype, bits):
    """Outside what D142 measured the tile is the budget's, no 48-column padding."""
    a, b, at, bt = operands(m, k, n, layout, dtype)
    out = at @ bt
    kernel = lowered(out, vector_bits=bits)
    assert all(amount % 48 for _, amount in pads(kernel)) and \
        sorted(kernel.upcasts) != [3, 8, 16], kernel.applied
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-4)
