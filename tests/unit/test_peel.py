"""Peeling a global loop at a window's border (codegen/peel.py, D70), against numpy.

A padded conv reads its input through a mask: input row y + kh - 1 exists only for
1 <= y + kh <= H. The linearizer splits the output-row loop into border rows and an
interior where that check folds to true, so the interior's loads carry no per-step
validity. Each test checks that the rule fired (it fails without it) and compares with a
numpy convolution or pool at odd sizes, strides, paddings and layouts; the outer loop
the threads split is run piece by piece, pieces that straddle or miss a segment included.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from codegen.kernel import Kernel, Opt, OptOps
from codegen import linearizer
from codegen.linearizer import Linearizer
from codegen.ops import BinaryOps, UnaryOps
from codegen import opt
from codegen.opt import optimize
from codegen.opt.pieces import interleave_pieces
from codegen.peel import mask_plan, peel_plan
from codegen.shape.symbolic import Variable
from codegen.target import Target, cpu
from codegen.uops import UOps
from lazyten import Tensor
from lazyten.realize import run_schedule
from lazyten.schedule import create_schedule
from runtimes import get_runtime
from runtimes.base import Buffer
from tests.unit.test_conv_speed_rules import im2col_conv, rnd


def _plan(k: Kernel, target: Target):
    """What the linearizer decides for an optimised kernel: (axis, segments) or None."""
    lin = Linearizer(k, target)
    lin._begin(open_loops=False)
    return peel_plan(k, lin.gidx, lin.lane, lin._combos())


def _optimised(t: Tensor, bits: int) -> Kernel:
    return optimize(Kernel(create_schedule([t.lazydata])[-1].ast), cpu(bits))


def _row_checks(uops, loop) -> int:
    """Comparisons computed from this loop's index (a window's row checks)."""
    uses: dict[int, bool] = {}

    def uses_loop(u) -> bool:
        if id(u) not in uses:
            uses[id(u)] = u is loop or (u.op is not UOps.LOOP and any(map(uses_loop, u.src)))
        return uses[id(u)]
    return sum(1 for u in uops if u.op is UOps.ALU and u.arg is BinaryOps.CMPLT and uses_loop(u))


@pytest.mark.parametrize("bits", [256, 512])
@pytest.mark.parametrize("n,c,hw", [(2, 16, 28), (2, 32, 14), (1, 8, 56)])
def test_padded_conv_peels_its_border_rows(bits, n, c, hw, monkeypatch):
    """The output-row loop of a padded 3x3 conv splits into its first row, the interior
    and its last row (or blocks of rows where the tile unrolls some); inside the
    interior no check depends on the row (unpeeled, the loads check it at every step)."""
    out = Tensor(rnd((n, c, hw, hw))).conv2d(Tensor(rnd((c, c, 3, 3), seed=1)), padding=1)
    k = _optimised(out, bits)
    plan = _plan(k, cpu(bits))
    assert plan is not None, k.applied
    axis, segments = plan
    rows = k.global_shape[axis]  # the output rows, or blocks of them the tile unrolls
    assert hw % rows == 0 and segments == [(0, 1), (1, rows - 1), (rows - 1, rows)], plan
    uops = Linearizer(k, cpu(bits)).linearize().uops
    loops = [u for u in uops if u.op is UOps.LOOP and u.arg == f"gidx{axis}"]
    assert len(loops) == 3 and _row_checks(uops, loops[1]) == 0
    monkeypatch.setattr(linearizer, "peel_plan", lambda *args: None)
    uops = Linearizer(k, cpu(bits)).linearize().uops
    loops = [u for u in uops if u.op is UOps.LOOP and u.arg == f"gidx{axis}"]
    assert len(loops) == 1 and _row_checks(uops, loops[0]) > 0


def test_no_window_no_peel():
    """A matmul and an unpadded conv read no mask that a global index bounds: one loop."""
    a, b = Tensor(rnd((64, 48))), Tensor(rnd((48, 40), seed=1))
    assert _plan(_optimised(a @ b, 256), cpu(256)) is None
    out = Tensor(rnd((2, 8, 12, 12))).conv2d(Tensor(rnd((8, 8, 3, 3), seed=1)))
    assert _plan(_optimised(out, 256), cpu(256)) is None


@pytest.mark.parametrize("n,cin,cout,h,w,k,stride,padding", [
    (2, 3, 5, 13, 13, 3, 1, 1), (1, 8, 9, 7, 7, 3, 1, 1), (2, 4, 6, 56, 56, 3, 1, 1),
    (2, 5, 7, 14, 14, 3, 2, 1), (1, 3, 4, 13, 9, 5, 1, 2), (2, 16, 32, 8, 8, 3, 1, 1),
    (1, 16, 16, 28, 28, 3, 1, 1), (2, 6, 8, 30, 28, 3, 2, 1), (1, 4, 4, 6, 6, 3, 1, 3)])
def test_peeled_convs_match_numpy(n, cin, cout, h, w, k, stride, padding):
    """Odd channel counts, 13/7/28/56 pixels, stride 2, a 5x5 window padded by 2, padding
    beyond the window's reach; a transposed (non-contiguous) input too."""
    x, wt, b = rnd((n, cin, h, w)), rnd((cout, cin, k, k), seed=1), rnd((cout,), seed=2)
    ref = im2col_conv(x, wt, b, padding)[:, :, ::stride, ::stride]
    out = Tensor(x).conv2d(Tensor(wt), Tensor(b), stride=stride, padding=padding)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)
    xt = Tensor(np.ascontiguousarray(x.transpose(0, 1, 3, 2))).transpose(2, 3)
    out = xt.conv2d(Tensor(wt), Tensor(b), stride=stride, padding=padding)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("hw", [7, 16, 28])
def test_padded_pools_match_numpy(hw):
    """Pools read their windows through padding too (a max: -inf there)."""
    xn = rnd((2, 3, hw, hw))
    got = Tensor(xn).max_pool2d((3, 3), stride=1, padding=1).numpy()
    pad = np.pad(xn, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    win = np.lib.stride_tricks.sliding_window_view(pad, (3, 3), axis=(2, 3))
    np.testing.assert_allclose(got, win.max(axis=(-2, -1)), rtol=1e-6)
    got = Tensor(xn).avg_pool2d((3, 3), stride=1, padding=1).numpy()
    win = np.lib.stride_tricks.sliding_window_view(np.pad(xn, ((0, 0), (0, 0), (1, 1), (1, 1))),
                                                   (3, 3), axis=(2, 3))
    np.testing.assert_allclose(got, win.mean(axis=(-2, -1)), rtol=1e-5, atol=1e-6)


def test_peeled_outer_loop_runs_in_any_pieces():
    """Where the peeled loop is the outer one (the rows outermost, as order_loops puts
    them for a narrow image with many channels), its segments clip the threads' piece
    [core_start, core_end): pieces that cross a segment's end, hold one row, or miss a
    segment entirely compute the same rows."""
    target = get_runtime("CPU").renderer.target
    x, wt = rnd((2, 32, 14, 14)), rnd((32, 32, 3, 3), seed=1)
    t = Tensor(x).conv2d(Tensor(wt), padding=1)
    items = create_schedule([t.lazydata])
    run_schedule(items[:-1])
    k = optimize(Kernel(items[-1].ast), target)
    plan = _plan(k, target)
    if plan is None or plan[0] != 0:  # the passes kept another loop outermost: force it
        k = Kernel(items[-1].ast)
        for opt in optimize(Kernel(items[-1].ast), target).applied:
            if opt.op is not OptOps.OUTER:
                k.apply(opt)
        plan = _plan(k, target)
        assert plan is not None, k.applied
        k.apply(Opt(OptOps.OUTER, plan[0]))
    rows = k.global_shape[0]
    assert _plan(k, target) == (0, [(0, 1), (1, rows - 1), (rows - 1, rows)])
    runtime = get_runtime("CPU")
    spec = runtime.renderer.program(Linearizer(k, target).linearize())
    assert "smax" in spec.src  # the segments clip the threads' bounds
    program = runtime.program(spec, runtime.compiler.compile_cached(spec.name, spec.src))
    out = Buffer(runtime, int(np.prod(items[-1].out.shape)), items[-1].out.dtype)
    bufs = [out] + [b.realized for b in items[-1].inputs]
    ptrs = [b.ensure_allocated()[1] for b in bufs]
    n = spec.global_size[0]
    for cut in ([0, n], [0, 1, n], [0, 2, n - 1, n], list(range(n + 1))):
        out.copyin(memoryview(np.full(items[-1].out.shape, np.nan, np.float32)).cast("B"))
        for start, end in zip(cut, cut[1:]):
            program.fn(*ptrs, start, end)
        result = np.empty(items[-1].out.shape, np.float32)
        out.copyout(memoryview(result).cast("B"))
        np.testing.assert_allclose(result.reshape(t.shape), im2col_conv(x, wt), rtol=1e-4,
                                   atol=1e-4)


def test_bounded_index_is_a_variable_or_one_value():
    """A one-row segment's index is a number: its body is specialised whole."""
    assert not isinstance(Variable("gidx1", 3, 3), Variable)


# ---- an elementwise kernel split where its gates switch (D122) ----
def _exps_per_loop(uops, name: str) -> list[int]:
    """The exps inside each loop of `name` (a segment's loop and the loops it holds)."""
    counts, current = [], None
    for u in uops:
        if u.op is UOps.LOOP and u.arg == name and current is None:
            counts.append(0)
            current = u
        elif u.op is UOps.END and u.src[0] is current:
            current = None
        elif current is not None and u.op is UOps.ALU and u.arg in (UnaryOps.EXP, UnaryOps.EXP2):
            counts[-1] += 1
    return counts


@pytest.mark.parametrize("bits", [256, 512])
@pytest.mark.parametrize("rows,width,dim", [(8, 64, 1), (4, 48, 0), (3, 40, 1), (5, 16, 0)])
def test_a_cat_of_computed_values_computes_each_piece_in_its_place(bits, rows, width, dim):
    """A cat of three exps, each inlined and gated to 0 outside its place (D117), splits
    its loop along the joined axis where the gates switch: each segment computes its own
    piece (one exp a copy), where the kernel as one loop computed all three everywhere.
    Values against numpy. (Pieces of one width are side by side in one iteration where the
    interleave pass runs, tests/unit/test_interleave_pieces.py: here it is left out, so
    that the split the uneven pieces get is what is tested.)"""
    rng = np.random.default_rng(rows * width)
    arrays = [rng.standard_normal((rows, width)).astype(np.float32) for _ in range(3)]
    out = Tensor.cat(*[Tensor(a).exp() for a in arrays], dim=dim)
    np.testing.assert_allclose(out.numpy(), np.exp(np.concatenate(arrays, dim)), rtol=1e-6)
    passes = [p for p in opt.PASSES if p is not interleave_pieces]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(opt, "PASSES", passes)
        k = optimize(Kernel(create_schedule([Tensor.cat(*[Tensor(a).exp() for a in arrays],
                                                        dim=dim).lazydata])[-1].ast), cpu(bits))
    lin = Linearizer(k, cpu(bits))
    lin._begin(open_loops=False)
    plan = mask_plan(k, lin.gidx, lin.lane, lin._combos())
    assert plan is not None, k.applied
    axis, segments = plan
    copies = len(lin._combos())
    counts = _exps_per_loop(Linearizer(k, cpu(bits)).linearize().uops, f"gidx{axis}")
    assert len(counts) == len(segments)
    for (lo, hi), n in zip(segments, counts):  # (a vector on a switch keeps two pieces)
        assert n <= copies * (1 if hi - lo > 1 else 2), (segments, counts)
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(linearizer, "mask_plan", lambda *args: None)
    try:
        assert _exps_per_loop(Linearizer(k, cpu(bits)).linearize().uops,
                              f"gidx{axis}") == [3 * copies]
    finally:
        monkeypatch.undo()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 37), min_size=2, max_size=5), st.integers(1, 6),
       st.booleans(), st.booleans())
def test_cats_and_stacks_of_computed_values_match_numpy(widths, rows, stack, transposed):
    """Pieces of odd widths (vectors straddle the switches), cats and stacks, pieces read
    transposed, each through its own op, against numpy."""
    rng = np.random.default_rng(sum(widths) * rows)
    ops = [(lambda t: t.exp(), np.exp), (lambda t: t.sigmoid(), lambda a: 1 / (1 + np.exp(-a))),
           (lambda t: (t * 2).cos(), lambda a: np.cos(a * 2)), (lambda t: -t, np.negative)]
    shape = (lambda w: (rows, widths[0])) if stack else (lambda w: (rows, w))
    arrays = [rng.standard_normal(shape(w)).astype(np.float32) for w in widths]
    tensors = [Tensor(np.ascontiguousarray(a.T)).T if transposed else Tensor(a) for a in arrays]
    pieces = [ops[i % 4][0](t) for i, t in enumerate(tensors)]
    want = [ops[i % 4][1](a.astype(np.float64)) for i, a in enumerate(arrays)]
    out = Tensor.stack(pieces, 1) if stack else Tensor.cat(*pieces, dim=1)
    ref = np.stack(want, 1) if stack else np.concatenate(want, 1)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n,w,dim", [(256, 256, 0), (97, 300, 0), (33, 1000, 1), (300, 17, 0)])
def test_joins_big_enough_for_the_threads_match_numpy(n, w, dim):
    """Joins of 2-4 computed pieces large enough that the threads split the outer loop:
    each thread's piece is clipped to the segments it meets (straddling two, or inside
    one), against numpy in float64."""
    rng = np.random.default_rng(n + w)
    arrays = [rng.standard_normal((n, w)).astype(np.float32) for _ in range(4)]
    ts = [Tensor(a) for a in arrays]
    wide = [a.astype(np.float64) for a in arrays]
    out = Tensor.stack([ts[0].exp(), ts[1].sigmoid(), (ts[2] * 2).cos(), -ts[3]], dim)
    ref = np.stack([np.exp(wide[0]), 1 / (1 + np.exp(-wide[1])), np.cos(wide[2] * 2), -wide[3]], dim)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6, atol=1e-6)
    out = Tensor.cat(ts[0].exp(), ts[1].sigmoid(), ts[2].tanh(), dim=dim)
    ref = np.concatenate([np.exp(wide[0]), 1 / (1 + np.exp(-wide[1])), np.tanh(wide[2])], dim)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("steps", [33, 64, 130])
def test_a_stack_of_a_recurrences_steps_computes_each_in_its_place(steps):
    """A `stack` of a recurrence's L per-step values gates switch L times: past 32 runs the
    loop was left whole and every element computed all L pieces (a quadratic stack: a
    64-step LSTM's backward took 3.5-4.0 ms a step where 16 took 0.7). Up to 256 runs, so
    far as the kernel stays small, each run computes its own piece (D162). Values
    against numpy."""
    rng = np.random.default_rng(steps)
    arrays = [rng.standard_normal((2, 16)).astype(np.float32) for _ in range(steps)]
    out = Tensor.stack([Tensor(a).exp() for a in arrays], 0)
    np.testing.assert_allclose(out.numpy(), np.exp(np.stack(arrays, 0)), rtol=1e-6)
    k = optimize(Kernel(create_schedule([Tensor.stack([Tensor(a).exp() for a in arrays],
                                                      0).lazydata])[-1].ast), cpu(512))
    lin = Linearizer(k, cpu(512))
    lin._begin(open_loops=False)
    plan = mask_plan(k, lin.gidx, lin.lane, lin._combos())
    assert plan is not None and len(plan[1]) >= steps, k.applied
    counts = _exps_per_loop(Linearizer(k, cpu(512)).linearize().uops, f"gidx{plan[0]}")
    assert max(counts) <= 2 * len(lin._combos()), counts  # (a run a vector straddles: two)
