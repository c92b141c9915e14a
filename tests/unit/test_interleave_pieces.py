"""A join's pieces side by side in one iteration (codegen/opt/pieces.py, D149), against numpy.

A `cat` of pieces of one width, computed in place (D117, D145), used to be cut into one
loop per piece (D122), each piece recomputing what it shares with the others. The pass
splits the joined axis into the pieces as copies of one iteration, so a shared value is
one uop. Each structural test fails without the pass (the cut loops hold one exp per
piece); the values are compared with numpy over sizes, piece counts, layouts and
broadcasts, and with the pass left out.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from codegen import opt
from codegen.kernel import Kernel, OptOps
from codegen.linearizer import Linearizer
from codegen.ops import UnaryOps
from codegen.opt import optimize
from codegen.opt.pieces import PIECE_MIN, PIECES_MAX, interleave_pieces
from codegen.target import cpu
from codegen.uops import UOps
from lazyten import Tensor
from lazyten.schedule import create_schedule

# what each piece does with the shared value s (an exp) and a second input c; numpy's twin
_PIECES = [(lambda s, c: s * 2, lambda s, c: s * 2),
           (lambda s, c: s + c, lambda s, c: s + c),
           (lambda s, c: s.sqrt(), lambda s, c: np.sqrt(s)),
           (lambda s, c: -s * c, lambda s, c: -s * c),
           (lambda s, c: s * s, lambda s, c: s * s),
           (lambda s, c: s.reciprocal(), lambda s, c: 1 / s),
           (lambda s, c: c - s, lambda s, c: c - s),
           (lambda s, c: s.maximum(c), lambda s, c: np.maximum(s, c))]


def _kernel(t: Tensor, bits: int = 256) -> Kernel:
    """The optimised kernel that stores `t` (the join, its pieces inlined)."""
    ast = create_schedule([t.lazydata])[-1].ast
    assert ast.arg.st.shape == t.shape
    return optimize(Kernel(ast), cpu(bits))


def _exps(k: Kernel, bits: int = 256) -> int:
    uops = Linearizer(k, cpu(bits)).linearize().uops
    return sum(u.op is UOps.ALU and u.arg in (UnaryOps.EXP, UnaryOps.EXP2) for u in uops)


def _inputs(rng, rows: int, width: int, transposed: bool, broadcast: bool):
    a = rng.standard_normal((width, rows) if transposed else (rows, width)).astype(np.float32)
    b = rng.standard_normal((width,) if broadcast else (rows, width)).astype(np.float32)
    ta = Tensor(a).T if transposed else Tensor(a)
    return ta, Tensor(b), (a.T if transposed else a), b


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 9), st.integers(PIECE_MIN, 40), st.integers(2, PIECES_MAX), st.booleans(),
       st.booleans(), st.sampled_from([0, 1]))
def test_pieces_that_share_a_value_compute_it_once(rows, width, n, transposed, broadcast, dim):
    """n pieces of one width, each a different op on one exp: the kernel holds one exp (it
    held n, one per piece's loop), and the values are numpy's."""
    rng = np.random.default_rng(rows * 100 + width * 10 + n)
    ta, tb, a, b = _inputs(rng, rows, width, transposed, broadcast)
    pieces = _PIECES[:n]

    def join():
        s = (ta * 0.5 + tb).exp()
        return Tensor.cat(*[f(s, tb) for f, _ in pieces], dim=dim)
    s = np.exp(a * np.float32(0.5) + b)
    want = np.concatenate([g(s, np.broadcast_to(b, s.shape)) for _, g in pieces], axis=dim)
    np.testing.assert_allclose(join().numpy(), want, rtol=2e-6, atol=1e-6)
    k = _kernel(join())
    assert any(o.op is OptOps.STRIDE_UPCAST and o.amount == n for o in k.applied), k.applied
    assert _exps(k) == 1


def test_an_lstm_steps_gate_gradients_share_the_gates():
    """The join an LSTM cell's backward stores (its four gates' gradients, D145): each
    piece recomputes the step's gates and cell from the pre-activations; side by side they
    are computed once for all four (fewer exps than four segments held). Values: the
    gradient against numpy's LSTM cell backward."""
    rng = np.random.default_rng(7)
    n, h = 6, 16
    pre = rng.standard_normal((n, 4 * h)).astype(np.float32)
    c0 = rng.standard_normal((n, h)).astype(np.float32)
    dh = rng.standard_normal((n, h)).astype(np.float32)

    def gradient() -> Tensor:
        x = Tensor(pre, requires_grad=True)
        i, f, g, o = x.chunk(4, -1)
        c = f.sigmoid() * Tensor(c0) + i.sigmoid() * g.tanh()
        (o.sigmoid() * c.tanh() * Tensor(dh)).sum().backward()
        assert x.grad is not None
        return x.grad
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    pi, pf, pg, po = np.split(pre.astype(np.float64), 4, axis=1)
    si, sf, tg, so = sig(pi), sig(pf), np.tanh(pg), sig(po)
    cc = sf * c0 + si * tg
    dc = dh * so * (1 - np.tanh(cc) ** 2)
    want = np.concatenate([dc * tg * si * (1 - si), dc * c0 * sf * (1 - sf),
                           dc * si * (1 - tg ** 2), dh * np.tanh(cc) * so * (1 - so)], axis=1)
    np.testing.assert_allclose(gradient().numpy(), want, rtol=1e-4, atol=1e-6)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(opt, "PASSES", [p for p in opt.PASSES if p is not interleave_pieces])
        cut = _exps(_kernel(gradient()))
    together = _kernel(gradient())
    assert any(o.op is OptOps.STRIDE_UPCAST and o.amount == 4 for o in together.applied)
    assert _exps(together) < cut, (_exps(together), cut)


@pytest.mark.parametrize("widths", [(40, 24), (8, 8, 16), (64,) * (PIECES_MAX + 1), (4, 4, 4)])
def test_uneven_many_or_narrow_pieces_keep_their_own_loops(widths):
    """Pieces of different widths, more than PIECES_MAX, or narrower than PIECE_MIN are
    not interleaved (the loop is cut where their gates switch, D122); values are numpy's."""
    rng = np.random.default_rng(len(widths))
    arrays = [rng.standard_normal((3, w)).astype(np.float32) for w in widths]
    out = Tensor.cat(*[Tensor(a).exp() for a in arrays], dim=1)
    np.testing.assert_allclose(out.numpy(), np.exp(np.concatenate(arrays, 1)), rtol=1e-6)
    k = _kernel(Tensor.cat(*[Tensor(a).exp() for a in arrays], dim=1))
    assert not any(o.op is OptOps.STRIDE_UPCAST for o in k.applied), k.applied
