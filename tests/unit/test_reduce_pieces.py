"""A reduce over a join (codegen/peel.py `reduce_plan`, D163), against numpy.

A `cat` reduced along its joined axis (the norm of every gradient joined end to end, a
matmul over [x, h]) reads each piece through its view's padding: every reduce step
checked which piece it was in, and LLVM vectorized none of it (the norm of 21 gradients,
41 000 numbers, took 0.27 ms where one contiguous buffer takes 0.004). The reduce loop
is now cut where those gates switch, each run reading its pieces unchecked. Tests: the
checks are gone from the loops, and reductions of joins at odd sizes, dtypes, axes and
layouts (computed pieces, transposed, broadcast, padded) equal numpy's.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from codegen.kernel import Kernel
from codegen.linearizer import Linearizer
from codegen.ops import BinaryOps
from codegen.opt import optimize
from codegen.target import cpu
from codegen.uops import UOps
from lazyten import Tensor
from lazyten.schedule import create_schedule


def _checks_in_reduce_loops(t: Tensor, bits: int = 512) -> int:
    """Comparisons computed from a reduce loop's index in the last kernel of `t`."""
    k = optimize(Kernel(create_schedule([t.lazydata])[-1].ast), cpu(bits))
    uops = Linearizer(k, cpu(bits)).linearize().uops
    uses: dict[int, bool] = {}

    def uses_reduce_loop(u) -> bool:
        if id(u) not in uses:
            uses[id(u)] = (u.op is UOps.LOOP and str(u.arg).startswith("ridx")) or \
                (u.op is not UOps.LOOP and any(map(uses_reduce_loop, u.src)))
        return uses[id(u)]
    return sum(1 for u in uops if u.op is UOps.ALU and u.arg is BinaryOps.CMPLT
               and uses_reduce_loop(u))


@pytest.mark.parametrize("bits", [256, 512])
@pytest.mark.parametrize("sizes", [(4608, 16, 2304, 7, 3000), (5, 3), (64, 64, 64, 64)])
def test_a_sum_over_a_cat_checks_nothing_in_its_loops(bits, sizes):
    """The sum of squares of buffers joined end to end: no step checks its piece."""
    rng = np.random.default_rng(len(sizes))
    arrays = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    flat = Tensor.cat(*[Tensor(a).realize() for a in arrays])
    assert _checks_in_reduce_loops((flat * flat).sum(), bits) == 0
    want = sum((a.astype(np.float64) ** 2).sum() for a in arrays)
    assert (flat * flat).sum().item() == pytest.approx(want, rel=1e-5)


def test_a_matmul_over_a_cat_along_its_reduce_axis_checks_nothing():
    """[x, h] @ W, a recurrent cell's one matmul over its input and state."""
    rng = np.random.default_rng(1)
    x, h = rng.standard_normal((8, 40)).astype(np.float32), rng.standard_normal((8, 24)).astype(np.float32)
    w = rng.standard_normal((64, 96)).astype(np.float32)
    out = Tensor.cat(Tensor(x).realize(), Tensor(h).realize(), dim=1) @ Tensor(w).realize()
    assert _checks_in_reduce_loops(out) == 0
    np.testing.assert_allclose(out.numpy(), np.concatenate([x, h], 1) @ w, rtol=1e-4, atol=1e-4)


_OPS = [(lambda t: t, lambda a: a), (lambda t: t.exp(), np.exp), (lambda t: t * 2 + 1, lambda a: a * 2 + 1),
        (lambda t: t.abs().sqrt(), lambda a: np.sqrt(np.abs(a)))]
_REDUCES = [("sum", lambda t, ax, kd: t.sum(ax, keepdim=kd), lambda a, ax, kd: a.sum(ax, keepdims=kd)),
            ("max", lambda t, ax, kd: t.amax(ax, keepdim=kd), lambda a, ax, kd: a.max(ax, keepdims=kd)),
            ("mean", lambda t, ax, kd: t.mean(ax, keepdim=kd), lambda a, ax, kd: a.mean(ax, keepdims=kd))]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 41), min_size=2, max_size=6), st.integers(1, 5),
       st.sampled_from([np.float32, np.float64, np.int32]), st.integers(0, 2), st.booleans(),
       st.booleans(), st.integers(0, 3), st.sampled_from([0, 1, (0, 1)]), st.booleans())
def test_reduces_of_joins_match_numpy(widths, rows, dtype, reduce, keepdim, transposed, op,
                                      axis, pad):
    """Pieces of odd widths joined along axis 1 (each through its own op, read transposed
    or broadcast along the rows), padded with zeros or not, reduced along the joined
    axis, the other or both: numpy's values."""
    rng = np.random.default_rng(sum(widths) * rows + op)
    name, lazy_reduce, np_reduce = _REDUCES[reduce]
    if dtype == np.int32:
        arrays = [rng.integers(-50, 50, (rows, w)).astype(dtype) for w in widths]
        fn, ref_fn = (lambda t: t * 2 + 1, lambda a: a * 2 + 1) if op else _OPS[0]
        if name == "mean":
            name, lazy_reduce, np_reduce = _REDUCES[0]
    else:
        arrays = [rng.standard_normal((rows, w)).astype(dtype) for w in widths]
        fn, ref_fn = _OPS[op]
    arrays[0] = arrays[0][:1]  # broadcast along the rows
    tensors = [Tensor(np.ascontiguousarray(a.T)).T if transposed else Tensor(a) for a in arrays]
    tensors[0] = tensors[0].expand(rows, widths[0])
    joined = Tensor.cat(*[fn(t) for t in tensors], dim=1)
    ref = np.concatenate([ref_fn(np.broadcast_to(a, (rows, a.shape[1])).astype(np.float64))
                          for a in arrays], 1)
    if pad:
        joined, ref = joined.pad(((0, 0), (3, 2))), np.pad(ref, ((0, 0), (3, 2)))
    got = lazy_reduce(joined, axis, keepdim).numpy()
    want = np_reduce(ref, axis, keepdim)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-9,
                               atol=1e-4 if dtype == np.float32 else 1e-9)
