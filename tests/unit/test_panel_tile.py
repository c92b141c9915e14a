"""The AVX2 matmul tile a B panel wide (D143): 3 rows x 4 vectors where 3 divides the rows.

Decisions are checked for `cpu(256)` (16 registers of 8 lanes) and `cpu(512)` whatever the
host; values against numpy on the host's tuning, which CI's 256-bit pass
(`CPU_VECTOR_BITS=256`, .ci/run) makes the AVX2 one, so the tile's kernels run there.
Each decision test fails with the rule off.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen.kernel import Kernel, OptOps
from codegen.linearizer import Linearizer
from codegen.opt import optimize
from codegen.target import cpu
from lazyten import Tensor
from lazyten.schedule import create_schedule


def operands(m: int, k: int, n: int, layout: str, dtype=np.float32):
    """(a, b) in the math's layout and their Tensors, transposed views where the layout
    says so (t: stored transposed)."""
    rng = np.random.default_rng(m * 7919 + k * 31 + n)
    a = rng.standard_normal((k, m) if layout[0] == "t" else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if layout[1] == "t" else (k, n)).astype(dtype)
    at, bt = Tensor(a).realize(), Tensor(b).realize()
    at, bt = (at.T if layout[0] == "t" else at), (bt.T if layout[1] == "t" else bt)
    return (a.T if layout[0] == "t" else a), (b.T if layout[1] == "t" else b), at @ bt


def lowered(t: Tensor, vector_bits: int) -> Kernel:
    """The last kernel of t's schedule optimised for a CPU `vector_bits` wide; it must emit."""
    target = cpu(vector_bits)
    k = optimize(Kernel(create_schedule([t.lazydata])[-1].ast), target)
    Linearizer(k, target).linearize()
    return k


def panel_tile(k: Kernel) -> bool:
    return k.lanes == 8 and sorted(k.upcasts) == [3, 4, 8] and \
        not any(o.op is OptOps.PAD_OUT for o in k.applied)


@pytest.mark.parametrize("m,k,n,layout", [(384, 256, 512, "nn"), (96, 64, 256, "nt"),
                                          (768, 40, 256, "tn"), (48, 200, 96, "tt"),
                                          (3, 300, 64, "nn"), (192, 130, 160, "nn")])
def test_rows_three_divide_take_3_rows_of_a_b_panel(m, k, n, layout):
    """Rows 3 divides, a row of whole 4-vector panels (packed, or B in place for tn), B
    past the L1: 3 rows x 4 vectors on AVX2, 12 accumulators (the budget gave 4 x 2).
    (A Linear's forward under 256 rows, nt at 96 here, packs its weight too.)"""
    a, b, out = operands(m, k, n, layout)
    kernel = lowered(out, 256)
    assert panel_tile(kernel), kernel.applied
    # the rows' upcast comes before the vectors' (the other order spills B's vectors)
    upcasts = [o.amount for o in kernel.applied if o.op is OptOps.UPCAST]
    assert upcasts[-2:] == [3, 4], kernel.applied
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m,k,n,layout,dtype,bits", [
    (384, 256, 512, "nn", np.float32, 512),   # 32 registers: AVX-512's own tile
    (256, 256, 512, "nn", np.float32, 256),   # rows 3 does not divide
    (384, 256, 100, "nn", np.float32, 256),   # 100 columns: no whole panels
    (384, 16, 64, "nn", np.float32, 256),     # B within the L1 (4 KB)
    (384, 256, 512, "nn", np.float64, 256),   # 8-byte elements
])
def test_the_panel_tile_stays_within_its_measures(m, k, n, layout, dtype, bits):
    a, b, out = operands(m, k, n, layout, dtype)
    kernel = lowered(out, bits)
    assert not panel_tile(kernel), kernel.applied
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-4)


@settings(max_examples=12, deadline=None)
@given(m=st.sampled_from([3, 6, 27, 96, 129]), k=st.sampled_from([1, 17, 64, 257]),
       n=st.sampled_from([32, 64, 96, 160]), layout=st.sampled_from(["nn", "tn", "nt", "tt"]),
       batch=st.sampled_from([(), (2,)]))
def test_panel_tiled_matmuls_match_numpy(m, k, n, layout, batch):
    """Odd reduces, batches and every layout, at rows the tile takes, against numpy."""
    rng = np.random.default_rng(m + k + n)
    a = rng.standard_normal((*batch, m, k)).astype(np.float32)
    b = rng.standard_normal((*batch, k, n)).astype(np.float32)
    ta = Tensor(np.ascontiguousarray(np.swapaxes(a, -1, -2))).realize().transpose(-1, -2) \
        if layout[0] == "t" else Tensor(a).realize()
    tb = Tensor(np.ascontiguousarray(np.swapaxes(b, -1, -2))).realize().transpose(-1, -2) \
        if layout[1] == "t" else Tensor(b).realize()
    np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-4, atol=1e-4)
