"""Rule 4's padded reads (lazyten/schedule.py, D117): an elementwise value whose ops do not
map 0 to 0 (sigmoid, exp, + 1) read through padding (a pad, a cat, a stack) stays inlined,
gated to 0 where the view is padding (lazyten/kernel_builder.py), unless the padded read
would repeat much work; then it is materialised first, as before."""
import numpy as np
from hypothesis import assume, given, settings, strategies as st

from lazyten import Tensor
from lazyten.schedule import create_schedule

UNARY = {"sigmoid": (lambda t: t.sigmoid(), lambda a: 1 / (1 + np.exp(-a))),
         "exp": (lambda t: t.exp(), np.exp),
         "plus_one": (lambda t: t + 1, lambda a: a + 1),
         "cos": (lambda t: t.cos(), np.cos),
         "relu": (lambda t: t.relu(), lambda a: np.maximum(a, 0))}


def _kernels(t: Tensor) -> int:
    return len([i for i in create_schedule([t.lazydata]) if i.ast is not None])


def test_a_cat_of_two_computed_values_is_one_kernel():
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((8, 64)).astype(np.float32) for _ in range(2))
    out = Tensor(a).sigmoid().cat((Tensor(b) + 1).exp(), dim=-1)
    assert _kernels(out) == 1  # (were three: each half stored, then the cat)
    np.testing.assert_allclose(out.numpy(), np.concatenate([1 / (1 + np.exp(-a)),
                                                            np.exp(b + 1)], -1), rtol=1e-5)


def test_a_small_value_padded_widely_is_stored_first():
    """A padded read that computes the value's ops at many more positions than it has
    (here 256 x 256 positions for 16 x 16 values of 30 ops) materialises it first."""
    a = np.random.default_rng(1).standard_normal((16, 16)).astype(np.float32)
    x = Tensor(a)
    for _ in range(30):
        x = (x * 0.9 + 0.1).exp() * 0.01
    out = x.pad(((0, 240), (0, 240))).contiguous()  # (a pad alone is a view of x)
    assert _kernels(out) == 2
    want = a
    for _ in range(30):
        want = np.exp(want * np.float32(0.9) + np.float32(0.1)) * np.float32(0.01)
    np.testing.assert_allclose(out.numpy(), np.pad(want, ((0, 240), (0, 240))), rtol=1e-4)


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=3), ops=st.lists(
    st.sampled_from(sorted(UNARY)), min_size=1, max_size=3), data=st.data())
def test_padded_reads_of_computed_values_match_numpy(shape, ops, data):
    """Pads, cats, stacks and padded views read again (a shrink of a pad, a pad of a
    pad), of chains of ops that do and do not map 0 to 0, against numpy."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    a = rng.standard_normal(shape).astype(np.float32)
    x, want = Tensor(a), a.astype(np.float64)
    for name in ops:
        # cos of a large value (exp of exp) turns float32 rounding into any error at all:
        # the padding is what is tested here (docs/numerics.md states cos's bounds)
        assume(name != "cos" or np.abs(want).max() <= 16)
        x, want = UNARY[name][0](x), UNARY[name][1](want)
    assume(np.abs(want).max() < 80)  # (float32 overflows where float64 does not: exp of 89)
    kind = data.draw(st.sampled_from(["pad", "cat", "stack", "pad_shrink", "pad_pad"]))
    pads = [(data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))) for _ in shape]
    if kind == "pad":
        out, ref = x.pad(tuple(pads)), np.pad(want, pads)
    elif kind == "cat":
        dim = data.draw(st.integers(0, len(shape) - 1))
        out, ref = x.cat(x.exp(), (x * 2).sigmoid(), dim=dim), \
            np.concatenate([want, np.exp(want), 1 / (1 + np.exp(-want * 2))], dim)
    elif kind == "stack":
        out, ref = x.stack((x + 1).sigmoid(), dim=0), np.stack([want, 1 / (1 + np.exp(-want - 1))])
    elif kind == "pad_shrink":
        padded, ref = x.pad(tuple(pads)), np.pad(want, pads)
        box = tuple((lo // 2, n) for (lo, _), n in zip(pads, ref.shape))
        out, ref = padded.shrink(box), ref[tuple(slice(lo, hi) for lo, hi in box)]
    else:
        inner = [(p[1], p[0]) for p in pads]
        out = (x.pad(tuple(pads)) + 1).exp().pad(tuple(inner))
        ref = np.pad(np.exp(np.pad(want, pads) + 1), inner)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-5)
