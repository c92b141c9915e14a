"""A reduce kernel's padded output axis split at its last tile (codegen/peel.py pad_plan,
D147), against numpy.

A matmul of 300 columns walks them in tiles of whole vectors padded to 320 (OptOps.PAD_OUT,
D57): the last tile is part padding, so B's vector loads are masked, and were masked at
every step of the reduce in every tile. The linearizer now splits that global loop where
the masks switch: the whole tiles run with plain loads and stores, the partial tile keeps
its masks, a tile wholly in the padding stores nothing. Each structural test fails
without the split (the checks then sit in every tile's reduce loop); the values are
compared with numpy at odd sizes, transposed, broadcast and sliced operands, and the outer
loop the threads split is run in arbitrary pieces.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from codegen import linearizer
from codegen.kernel import Kernel
from codegen.linearizer import Linearizer
from codegen.opt import optimize
from codegen.peel import pad_plan
from codegen.target import cpu
from codegen.uops import UOps
from lazyten import Tensor
from lazyten.realize import run_schedule
from lazyten.schedule import create_schedule
from runtimes import get_runtime
from runtimes.base import Buffer


def rnd(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _product(kind: str, m: int, k: int, n: int, seed: int = 0):
    """(lazyten product, numpy product) of kind nn (a @ b), tn (a.T @ b), nt (a @ b.T)."""
    a = rnd((k, m) if kind == "tn" else (m, k), seed)
    b = rnd((n, k) if kind == "nt" else (k, n), seed + 1)
    ta, tb = Tensor(a), Tensor(b)
    want = (a.T if kind == "tn" else a) @ (b.T if kind == "nt" else b)
    return (ta.T if kind == "tn" else ta) @ (tb.T if kind == "nt" else tb), want


def _masked_reduce_loads(uops) -> list[int]:
    """For each reduce loop, how many loads inside it are masked (a gate source) or read
    through a select of their index or value."""
    counts, current = [], None
    for u in uops:
        if u.op is UOps.LOOP and str(u.arg).startswith("ridx") and current is None:
            counts.append(0)
            current = u
        elif u.op is UOps.END and u.src[0] is current:
            current = None
        elif current is not None and u.op is UOps.LOAD and (
                len(u.src) == 3 or any(s.op is UOps.ALU and s.arg.name == "WHERE" for s in u.src)):
            counts[-1] += 1
    return counts


@pytest.mark.parametrize("bits", [256, 512])
@pytest.mark.parametrize("kind,m,k,n", [("nn", 512, 300, 300), ("nn", 256, 100, 300),
                                         ("tn", 300, 512, 300), ("nn", 96, 64, 999)])
def test_a_padded_matmul_masks_only_its_last_tile(bits, kind, m, k, n, monkeypatch):
    """The columns' loop splits at its last whole tile: the reduce loop of the whole tiles
    has no masked load (unsplit, one reduce loop masks B's loads in every tile)."""
    out, want = _product(kind, m, k, n)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-3)
    out, _ = _product(kind, m, k, n)
    kern = optimize(Kernel(create_schedule([out.lazydata])[-1].ast), cpu(bits))
    lin = Linearizer(kern, cpu(bits))
    lin._begin(open_loops=False)
    plan = pad_plan(kern, lin.gidx, lin.lane, lin._combos())
    assert plan is not None, kern.applied
    axis, segments = plan
    assert len(segments) >= 2 and segments[0][0] == 0, segments
    masked = _masked_reduce_loads(Linearizer(kern, cpu(bits)).linearize().uops)
    assert masked[0] == 0 and any(masked), (segments, masked)
    monkeypatch.setattr(linearizer, "pad_plan", lambda *args: None)
    unsplit = _masked_reduce_loads(Linearizer(kern, cpu(bits)).linearize().uops)
    assert len(unsplit) == 1 and unsplit[0] > 0, unsplit


def test_an_unpadded_matmul_is_not_split():
    out, _ = _product("nn", 128, 64, 256)
    kern = optimize(Kernel(create_schedule([out.lazydata])[-1].ast), cpu(256))
    lin = Linearizer(kern, cpu(256))
    lin._begin(open_loops=False)
    assert pad_plan(kern, lin.gidx, lin.lane, lin._combos()) is None, kern.applied


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(["nn", "tn", "nt"]), st.integers(1, 70), st.integers(1, 40),
       st.integers(17, 130), st.booleans(), st.integers(0, 2**16))
def test_padded_products_match_numpy(kind, m, k, n, epilogue, seed):
    """Odd sizes of every layout, with an elementwise epilogue read through a broadcast
    bias (the kernel's stores and the bias's loads are masked in the last tile too)."""
    out, want = _product(kind, m, k, n, seed)
    bias = rnd((n,), seed + 2)
    if epilogue:
        out, want = (out + Tensor(bias)).relu(), np.maximum(want + bias, 0)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [300, 999])
def test_sliced_and_broadcast_operands_match_numpy(n):
    """B a column slice of a wider array (its rows' padding lies in real memory) and A one
    row broadcast over 37 rows."""
    wide, row = rnd((64, n + 21), 1), rnd((1, 64), 2)
    out = Tensor(row).expand(37, 64) @ Tensor(wide)[:, 5:5 + n]
    np.testing.assert_allclose(out.numpy(), np.broadcast_to(row, (37, 64)) @ wide[:, 5:5 + n],
                               rtol=1e-4, atol=1e-4)


def test_the_split_outer_loop_runs_in_any_pieces():
    """The threads' piece [core_start, core_end) of the outer loop is clipped to each
    segment: pieces that cross the split, hold one tile or miss a segment compute the same
    product."""
    a, b = rnd((40, 32)), rnd((32, 300), 1)
    items = create_schedule([(Tensor(a) @ Tensor(b)).lazydata])
    run_schedule(items[:-1])
    runtime = get_runtime("CPU")
    target = runtime.renderer.target
    kern = optimize(Kernel(items[-1].ast), target)
    lin = Linearizer(kern, target)
    lin._begin(open_loops=False)
    plan = pad_plan(kern, lin.gidx, lin.lane, lin._combos())
    assert plan is not None, kern.applied
    spec = runtime.renderer.program(Linearizer(kern, target).linearize())
    program = runtime.program(spec, runtime.compiler.compile_cached(spec.name, spec.src))
    out = Buffer(runtime, 40 * 300, items[-1].out.dtype)
    ptrs = [buf.ensure_allocated()[1] for buf in [out] + [x.realized for x in items[-1].inputs]]
    n = spec.global_size[0]
    for cut in ([0, n], [0, 1, n], [0, n - 1, n], list(range(n + 1))):
        out.copyin(memoryview(np.full((40, 300), np.nan, np.float32)).cast("B"))
        for start, end in zip(cut, cut[1:]):
            program.fn(*ptrs, start, end)
        result = np.empty((40, 300), np.float32)
        out.copyout(memoryview(result).cast("B"))
        np.testing.assert_allclose(result, a @ b, rtol=1e-4, atol=1e-4)
