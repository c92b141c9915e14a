"""Every Tensor is a value: in-place updates (assign, optimiser steps) never change a tensor
computed, viewed or cloned before them, whatever order the program realizes things in."""
import itertools

import numpy as np
import pytest
from hypothesis import given, strategies as st

from lazyten import Tensor, optim
from lazyten.realize import Stats


def realized(a) -> Tensor:
    return Tensor(np.asarray(a, dtype=np.float32)).realize()


@pytest.mark.parametrize("read_first", ["target", "snapshot"])
def test_clone_is_a_snapshot(read_first):
    c = realized([1, 2, 3])
    snap = c.clone()
    c.assign(c + 5)
    first, second = (c, snap) if read_first == "target" else (snap, c)
    first.numpy()
    np.testing.assert_array_equal(snap.numpy(), [1, 2, 3], err_msg="clone() taken before assign")
    np.testing.assert_array_equal(c.numpy(), [6, 7, 8])


# (name, lazyten view of a (2, 3) tensor, the same view in numpy): all non-identity
_VIEWS = [
    ("flip0", lambda t: t.flip(0), lambda a: a[::-1]),
    ("flip1", lambda t: t.flip(1), lambda a: a[:, ::-1]),
    ("transpose", lambda t: t.T.reshape(2, 3), lambda a: a.T.reshape(2, 3)),
    ("shift", lambda t: t.reshape(6).pad(((1, -1),)).reshape(2, 3),
     lambda a: np.r_[0, a.reshape(6)[:-1]].reshape(2, 3)),
    ("shift_back", lambda t: t.reshape(6).pad(((-1, 1),)).reshape(2, 3),
     lambda a: np.r_[a.reshape(6)[1:], 0].reshape(2, 3)),
    ("row_swap", lambda t: t[[1, 0]], lambda a: a[[1, 0]]),
    ("expand_row", lambda t: t[1:].expand(2, 3), lambda a: np.broadcast_to(a[1:], (2, 3))),
]
# how the value is built from the view: bare, through an elementwise op, mixed with identity
_WRAPS = [
    ("bare", lambda v, t: v, lambda v, a: v),
    ("exp_log", lambda v, t: (v + 1).exp().log() - 1, lambda v, a: v),
    ("plus_self", lambda v, t: v + t, lambda v, a: v + a),
    ("view_of_op", None, None),  # the view taken of an elementwise op over the target
]


@pytest.mark.parametrize("view", _VIEWS, ids=[v[0] for v in _VIEWS])
@pytest.mark.parametrize("wrap", _WRAPS, ids=[w[0] for w in _WRAPS])
def test_assign_reading_its_target_through_a_view(view, wrap):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = realized(a)
    _, lz_view, np_view = view
    _, lz_wrap, np_wrap = wrap
    if lz_wrap is None:
        value, expected = lz_view(x * 2 + 1), np_view(a * 2 + 1)
    else:
        value, expected = lz_wrap(lz_view(x), x), np_wrap(np_view(a), a)
    x.assign(value)
    np.testing.assert_allclose(x.numpy(), expected, rtol=1e-5, atol=1e-5,
                               err_msg=f"x.assign({view[0]} / {wrap[0]})")


def test_views_and_detached_tensors_keep_the_old_value():
    v = realized([1, 2, 3])
    tail, whole, doubled = v[1:], v.detach(), v * 2
    v.assign(v * 10).realize()
    np.testing.assert_array_equal(v.numpy(), [10, 20, 30])
    np.testing.assert_array_equal(tail.numpy(), [2, 3])
    np.testing.assert_array_equal(whole.numpy(), [1, 2, 3])
    np.testing.assert_array_equal(doubled.numpy(), [2, 4, 6])


@given(order=st.permutations(range(4)), updates=st.integers(1, 3))
def test_values_do_not_depend_on_realize_order(order, updates):
    """A program with reads before and after several updates: any realize order gives the
    values of the program run eagerly."""
    base = np.array([1.0, -2.0, 3.0], dtype=np.float32)
    x = realized(base)
    before_sum, before_view = x.sum(), x.flip(0) * 3
    for _ in range(updates):
        x.assign(x * 2 + 1)
    after = x + 1
    tensors = [before_sum, before_view, x, after]
    ref = base.copy()
    for _ in range(updates):
        ref = ref * 2 + 1
    expected = [base.sum(), base[::-1] * 3, ref, ref + 1]
    for i in order:
        np.testing.assert_allclose(tensors[i].numpy(), expected[i], rtol=1e-6)
    for t, e in zip(tensors, expected):
        np.testing.assert_allclose(t.numpy(), e, rtol=1e-6)


# losses that read the parameter in an elementwise op (not only through a matmul)
_LOSSES = {
    "square": (lambda w, x: ((w * x) ** 2).sum(), lambda w, x: ((w * x) ** 2).sum()),
    "matmul_bias": (lambda w, x: ((x @ w) + w.sum(0)).relu().sum(),
                    lambda w, x: np.maximum(x @ w + w.sum(0), 0).sum()),
    "product": (lambda w, x: (w * x).sum() * (w * w).sum(),
                lambda w, x: (w * x).sum() * (w * w).sum()),
}


@pytest.mark.parametrize("loss_name", sorted(_LOSSES))
@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
def test_loss_item_after_step_is_the_loss_before_the_update(loss_name, opt_name):
    """The PyTorch loop: backward, step, then read the loss (computed with the old weights)."""
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((3, 3)).astype(np.float32)
    x0 = rng.standard_normal((3, 3)).astype(np.float32)
    lz_loss, np_loss = _LOSSES[loss_name]
    w = Tensor(w0, requires_grad=True)
    opt = getattr(optim, opt_name)([w], lr=0.1)
    loss = lz_loss(w, Tensor(x0))
    loss.backward()
    opt.step()
    np.testing.assert_allclose(loss.item(), np_loss(w0.astype(np.float64), x0), rtol=1e-5)
    assert not np.allclose(w.numpy(), w0), "the step changed nothing"


def test_optimiser_step_without_other_readers_copies_nothing():
    """The common case copies no parameter, and realizes the gradients and the update in
    at most two realizes (the optimiser realizes the gradients it replays the update on),
    none once the update is replayed."""
    rng = np.random.default_rng(1)
    w = Tensor(rng.standard_normal((4, 4)).astype(np.float32), requires_grad=True)
    b = Tensor(rng.standard_normal(4).astype(np.float32), requires_grad=True)
    opt = optim.Adam([w, b], lr=0.1)
    x = Tensor(rng.standard_normal((8, 4)).astype(np.float32))
    for _ in range(4):
        opt.zero_grad()
        ((x @ w + b).relu().sum()).backward()
        copies, schedules = Stats.copies_on_write, Stats.schedules
        opt.step()
        assert Stats.copies_on_write == copies, "a parameter was copied with no other reader"
        assert Stats.schedules <= schedules + 2, "the update took more than one realize"


def test_copy_on_write_only_when_a_reader_is_alive():
    x = realized([1, 2, 3])
    reader = x * 2
    copies = Stats.copies_on_write
    x.assign(x + 1).realize()
    assert Stats.copies_on_write == copies + 1, "a live reader of the old value needs a copy"
    np.testing.assert_array_equal(reader.numpy(), [2, 4, 6])
    del reader
    x.assign(x + 1).realize()
    assert Stats.copies_on_write == copies + 1, "no reader is alive: no copy"
    np.testing.assert_array_equal(x.numpy(), [3, 4, 5])


def test_copies_on_write_reuse_one_copy_kernel_per_shape_and_dtype():
    """The copy's AST is the same object each time (memoised), so its program is found
    without hashing a new AST; other shapes and dtypes get their own."""
    from codegen.dtypes import dtypes
    from lazyten.schedule_item import copy_ast
    assert copy_ast((3,), dtypes.float32) is copy_ast((3,), dtypes.float32)
    assert copy_ast((3,), dtypes.float32) is not copy_ast((3,), dtypes.int32)
    assert copy_ast((3,), dtypes.float32) is not copy_ast((1, 3), dtypes.float32)
    x = realized([1, 2, 3])
    for i in range(3):  # each update copies the old value for its live reader
        reader = x * 1
        x.assign(x + 1).realize()
        np.testing.assert_array_equal(reader.numpy(), np.array([1, 2, 3]) + i)
    np.testing.assert_array_equal(x.numpy(), [4, 5, 6])


def test_two_updates_reading_each_other_keep_old_values_for_readers():
    a, b = realized([1, 2]), realized([3, 4])
    before = a * b
    a_new, b_new = a + b, a - b
    a.assign(a_new)
    b.assign(b_new)
    for t in itertools.chain([a, b]):
        t.realize()
    np.testing.assert_array_equal(a.numpy(), [4, 6])
    np.testing.assert_array_equal(b.numpy(), [-2, -2])
    np.testing.assert_array_equal(before.numpy(), [3, 8])


@pytest.mark.parametrize("alias", ["pow1", "contiguous", "detach", "Tensor"])
def test_assign_to_a_tensor_sharing_a_buffer_leaves_the_other_alone(alias):
    """Ops that return their input's buffer unchanged make two Tensors of one LazyBuffer;
    assigning to one must not change the other (found by the gradient work: y = x ** 1).
    (`x.reshape(x.shape)` and `x.cast(x.dtype)` return `x` itself, as PyTorch's `.to` does.)"""
    x = realized([1, 2])
    y = {"pow1": lambda: x ** 1, "contiguous": x.contiguous, "detach": x.detach,
         "Tensor": lambda: Tensor(x)}[alias]()
    y.assign(realized([5, 6])).realize()
    np.testing.assert_array_equal(x.numpy(), [1, 2])
    np.testing.assert_array_equal(y.numpy(), [5, 6])


# ops that change nothing, each of which once returned the very Tensor it was called on
_NO_OPS = {
    "reshape": lambda t: t.reshape(t.shape), "view": lambda t: t.view(*t.shape),
    "full slice": lambda t: t[-3:3], "shrink": lambda t: t.shrink(((0, 3),)),
    "sum of 0-d": lambda t: t[0].sum(), "sum over no axes": lambda t: t.sum(axis=()),
    "cast": lambda t: t.cast(t.dtype), "to": lambda t: t.to(t.device),
    "abs of unsigned": lambda t: t.cast("uint8").abs(), "floor of int": lambda t: t.int().floor(),
    "round of int": lambda t: t.int().round(), "sign of bool": lambda t: (t > 1).sign(),
}


@pytest.mark.parametrize("name", sorted(_NO_OPS))
def test_an_op_that_changes_nothing_still_returns_a_new_value(name):
    """Found by the fuzzer: `x1 = x0.sum(); x0 += x1` changed x1 (x1 was x0)."""
    x = realized([1, 2, 3])
    y = _NO_OPS[name](x)
    before = y.numpy().copy()
    x += 10
    if name in ("cast", "to", "reshape", "view", "full slice", "shrink", "sum over no axes"):
        y += 100  # and the other way round
    np.testing.assert_array_equal(x.numpy(), [11, 12, 13])
    expected = before + (100 if name in ("cast", "to", "reshape", "view", "full slice",
                                         "shrink", "sum over no axes") else 0)
    np.testing.assert_array_equal(y.numpy(), expected)


def test_a_new_value_from_a_no_op_keeps_its_gradient():
    x = Tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    (x.reshape(2).cast(x.dtype) * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3, 3])
