"""A cat of heavy computed pieces is one kernel whose loop splits by piece (D145), against numpy.

A join (`cat`: WHEREs or ADDs of padded views) that is stored computes each piece only where
its view is not padding (codegen/peel.py `mask_plan`, D122), so rule 4 of the scheduler
counts a piece's padded read by such a join at the positions the mask lets through, and
rule 7 counts a gated piece as computed once, by the kernel that inlines it. Before, a
piece of 16 ops or more was stored on its own and copied again by the join: an LSTM's
backward stored its four gate gradients one by one each step. The pieces stay stored
where the split would not hold: more than 8 of them, pieces narrower than 16 along the
innermost axis (`stack(..., -1)`: a vector straddles them), a piece two joins read.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import lazyten as lt
from lazyten import Tensor
from lazyten.realize import Stats
from lazyten.schedule import create_schedule


def heavy(t):
    """About 40 ops per element, five transcendental functions."""
    return t.sigmoid() * t.tanh() + (t * 0.5).exp().sigmoid() * t.tanh().tanh() + t.sin().tanh()


def heavy_np(a):
    def sig(x):
        return 1 / (1 + np.exp(-x))
    return sig(a) * np.tanh(a) + sig(np.exp(a * 0.5)) * np.tanh(np.tanh(a)) + np.tanh(np.sin(a))


def kernels(*ts) -> int:
    return len([i for i in create_schedule([t.lazydata for t in ts]) if i.ast is not None])


def arrays(n, shape, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


@pytest.mark.parametrize("n,shape,dim", [(4, (32, 64), 1), (4, (32, 64), 0), (2, (7, 48), 1),
                                         (3, (5, 40, 33), 1), (8, (16, 32), 1)])
def test_a_cat_of_heavy_pieces_is_one_kernel(n, shape, dim):
    xs = arrays(n, shape)
    out = Tensor.cat(*[heavy(Tensor(x)) for x in xs], dim=dim)
    assert kernels(out) == 1
    np.testing.assert_allclose(out.numpy(), np.concatenate([heavy_np(x) for x in xs], dim),
                               rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("case", ["stack_last", "nine_pieces", "narrow_inner"])
def test_pieces_stay_stored_where_the_split_would_not_hold(case):
    if case == "stack_last":  # pieces interleaved element by element along the lanes
        xs = arrays(4, (32, 64))
        out, want = Tensor.stack([heavy(Tensor(x)) for x in xs], -1), \
            np.stack([heavy_np(x) for x in xs], -1)
    elif case == "nine_pieces":
        xs = arrays(9, (32, 64))
        out, want = Tensor.cat(*[heavy(Tensor(x)) for x in xs], dim=1), \
            np.concatenate([heavy_np(x) for x in xs], 1)
    else:  # 12-wide pieces along the innermost axis: vectors of 8 or 16 straddle them
        xs = arrays(4, (512, 12))
        out, want = Tensor.cat(*[heavy(Tensor(x)) for x in xs], dim=1), \
            np.concatenate([heavy_np(x) for x in xs], 1)
    assert kernels(out) == len(xs) + 1
    np.testing.assert_allclose(out.numpy(), want, rtol=2e-5, atol=2e-5)


def test_a_piece_two_joins_read_is_stored_once():
    a, b, c = (Tensor(x) for x in arrays(3, (32, 64)))
    shared = heavy(a)
    one, two = Tensor.cat(shared, heavy(b), dim=1), Tensor.cat(heavy(c), shared, dim=1)
    assert kernels(one, two) == 3  # the shared piece, then each join with its own piece
    np.testing.assert_allclose(one.numpy(), np.concatenate([heavy_np(a.numpy()), heavy_np(
        b.numpy())], 1), rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(two.numpy(), np.concatenate([heavy_np(c.numpy()), heavy_np(
        a.numpy())], 1), rtol=2e-5, atol=2e-5)


def test_an_lstm_step_backward_stores_no_gate_gradient_alone():
    """Each step's backward was four gate-gradient kernels, their copy into the step's
    (N, 4H) gradient and the matmul by W_hh; the gate gradients are now made in the
    copy's kernel, so a step is about 2 kernels, not 6 (or 3 where it stores the cell
    state's gradient, rule 7)."""
    rng = np.random.default_rng(0)
    steps, n, h = 6, 8, 32
    lstm = lt.nn.LSTM(h, h, batch_first=True)
    x = Tensor(rng.standard_normal((n, steps, h)).astype(np.float32), requires_grad=True)
    out, _ = lstm(x)
    out.sum().backward()
    before = Stats.kernels
    Tensor.realize(x.grad, lstm.weight_hh_l0.grad)  # (with the forward: 3 kernels a step)
    assert Stats.kernels - before <= 6 * steps + 4, Stats.kernels - before


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 70), min_size=2, max_size=9), st.integers(1, 9),
       st.sampled_from([0, 1]), st.booleans(), st.booleans())
def test_cats_of_heavy_pieces_match_numpy(widths, rows, dim, transposed, summed):
    """Odd widths (narrow ones stay stored), 2-9 pieces, either axis, pieces read
    transposed, the join read again by a reduce (stored: the reduce repeats no work)."""
    rng = np.random.default_rng(len(widths) * 100 + rows)
    xs = [rng.standard_normal((w, rows) if transposed else (rows, w)).astype(np.float32)
          for w in widths]
    ts = [Tensor(x).T if transposed else Tensor(x) for x in xs]
    ns = [x.T if transposed else x for x in xs]
    if dim == 0:
        ts, ns = [t.T for t in ts], [a.T for a in ns]
    out = Tensor.cat(*[heavy(t) for t in ts], dim=dim)
    want = np.concatenate([heavy_np(a) for a in ns], dim)
    if summed:
        total = (out * out).sum(1 - dim)
        np.testing.assert_allclose(total.numpy(), (want * want).sum(1 - dim), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out.numpy(), want, rtol=2e-5, atol=2e-5)
