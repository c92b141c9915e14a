"""x[index] = value, the in-place methods, boolean masks and nonzero (lazyten/inplace.py),
against numpy: setitem against numpy's setitem over drawn index kinds, masks against
numpy's boolean indexing, in-place ops against the out-of-place result, and the value rule
of docs/design.md (tensors read before an update keep the old value) after each."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import lazyten
from lazyten import Tensor, dtypes
from lazyten.realize import Stats
from tests.gradcheck import check_grad, spaced
from tests.helpers import assert_tensor, fast, shapes, tensor_and_array

# ---- x[index] = value against numpy ----
@st.composite
def index_for(draw, shape):
    """A numpy index for `shape`: ints, slices with steps, None, one Ellipsis, integer
    arrays (with repeats) or one boolean mask over some leading dims."""
    if draw(st.integers(0, 5)) == 0:  # a boolean mask over the leading dims
        k = draw(st.integers(1, len(shape)))
        size = int(np.prod(shape[:k]))
        bits = draw(st.lists(st.booleans(), min_size=size, max_size=size))
        return (np.asarray(bits, dtype=np.bool_).reshape(shape[:k]),)
    items, arrays = [], 0
    for n in shape:
        kind = draw(st.sampled_from(["int", "slice", "slice", "full", "array"]))
        if kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            step = draw(st.sampled_from([None, 1, 2, 3, -1, -2]))
            ends = st.one_of(st.none(), st.none(), st.integers(-n - 1, n + 1))  # None often:
            start, stop = draw(ends), draw(ends)  # random ends make most strided slices empty
            items.append(slice(start, stop, step))
        elif kind == "array" and arrays == 0:
            arrays += 1
            items.append(np.asarray(draw(st.lists(st.integers(-n, n - 1), min_size=1,
                                                  max_size=3)), dtype=np.int64))
        else:
            items.append(slice(None))
    if draw(st.booleans()):
        items.insert(draw(st.integers(0, len(items))), None)
    if draw(st.booleans()) and items:  # replace a run of trailing full slices by ...
        cut = draw(st.integers(0, len(items)))
        if all(isinstance(i, slice) and i == slice(None) for i in items[cut:]):
            items = items[:cut] + [Ellipsis]
    return tuple(items)


def _as_tensors(index):
    return tuple(Tensor(i) if isinstance(i, np.ndarray) else i for i in index)


@given(data=st.data(), shape=shapes(min_dims=1, max_dims=3, max_side=4),
       dtype=st.sampled_from([dtypes.float32, dtypes.int32, dtypes.bool]),
       layout=st.sampled_from(["contiguous", "flip", "step"]))
@fast(25)
def test_setitem_matches_numpy(data, shape, dtype, layout):
    x, arr = data.draw(tensor_and_array(shape, dtype, layout=layout, low=-9, high=9))
    index = data.draw(index_for(shape))
    target = arr[index].shape
    if data.draw(st.booleans()):  # a scalar value (cast to x's dtype as PyTorch)
        value = data.draw(st.sampled_from([7, -3, 2.5, True]))
        np_value = value
    else:  # an array broadcasting to the indexed shape (trailing dims, some set to 1)
        vshape = tuple(1 if data.draw(st.booleans()) else s for s in
                       target[data.draw(st.integers(0, len(target))):])
        np_value = data.draw(st.lists(st.integers(-9, 9), min_size=int(np.prod(vshape)),
                                      max_size=int(np.prod(vshape))))
        np_value = np.asarray(np_value, dtype=np.float32).reshape(vshape)
        value = Tensor(np_value)
    expected = arr.copy()
    expected[index] = np_value  # numpy casts to the array's dtype, as PyTorch
    before = x * 1 if dtype != dtypes.bool else x & True  # read before the update
    old = arr.copy()
    x[_as_tensors(index)] = value
    assert_tensor(x, expected, dtype=dtype, exact=True)
    assert_tensor(before, old, dtype=dtype, exact=True)  # the value rule


STRIDED = [(slice(None, None, -1),), (slice(None), slice(None, None, -2)),
           (slice(3, 0, -2), slice(1, None, 3)), (slice(None, None, 2), 4),
           (Ellipsis, slice(4, None, -3)), (-1, slice(-2, None, -1)), (None, 1, slice(None, 2))]


@pytest.mark.parametrize("index", STRIDED, ids=str)
def test_setitem_strided(index):
    arr = np.arange(20, dtype=np.float32).reshape(4, 5)
    x = Tensor(arr)
    value = -1 - np.arange(int(np.prod(arr[index].shape)), dtype=np.float32).reshape(
        arr[index].shape)
    x[index] = Tensor(value)
    expected = arr.copy()
    expected[index] = value
    np.testing.assert_array_equal(x.numpy(), expected)


def test_setitem_keeps_values_read_before():
    """design.md: a tensor or view taken before `x[...] = v` keeps the old value, whether
    x was realized or lazy, and whatever is realized first."""
    for realize_first in (False, True):
        x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).realize()
        doubled, row, alias = x * 2, x[0], x
        if realize_first:
            doubled.realize()
        x[0] = 5
        x[:, 2] += 1  # Python: t = x[:, 2]; t += 1; x[:, 2] = t
        x[1, ::2] = Tensor([-1.0, -2.0])
        np.testing.assert_array_equal(x.numpy(), [[5, 5, 6], [-1, 4, -2]])
        np.testing.assert_array_equal(doubled.numpy(), [[0, 2, 4], [6, 8, 10]])
        np.testing.assert_array_equal(row.numpy(), [0, 1, 2])  # views are not aliases
        assert alias is x


def test_setitem_mask_with_scalar_runs_no_extra_kernel_for_the_count():
    x = Tensor(np.array([[1.0, -2.0], [-3.0, 4.0]])).realize()
    before = Stats.kernels
    x[x < 0] = 0.0  # a where over the whole tensor: nothing realized at the call
    assert Stats.kernels == before, "masked fill with a scalar realized something at the call"
    np.testing.assert_array_equal(x.numpy(), [[1, 0], [0, 4]])


def test_setitem_errors():
    x = Tensor.zeros(3, 4)
    with pytest.raises(IndexError, match="3"):
        x[3] = 1.0
    with pytest.raises(ValueError, match=r"\(2,\).*\(3,\)"):
        x[:, 0] = Tensor([1.0, 2.0])
    with pytest.raises(IndexError, match=r"\(2,\)"):
        x[Tensor([True, False])] = 1.0
    with pytest.raises(IndexError, match="out of range"):
        x[Tensor([0, 5])] = 1.0
        x.numpy()


def test_setitem_repeated_indices_last_write_wins_as_numpy():
    x, arr = Tensor.zeros(4), np.zeros(4, np.float32)
    idx = np.array([1, 3, 1, 1])
    x[Tensor(idx)] = Tensor([1.0, 2.0, 3.0, 4.0])
    arr[idx] = [1, 2, 3, 4]
    np.testing.assert_array_equal(x.numpy(), arr)


# ---- gradients through setitem ----
@pytest.mark.parametrize("kind", ["basic", "step", "tensor", "mask"])
def test_setitem_gradient(kind):
    """The overwritten part of the old value gets no gradient; the value gets the rest."""
    rng = np.random.default_rng(0)
    x, v = spaced(rng, (3, 4), (3, 2))
    index = {"basic": (slice(None), slice(1, 3)), "step": (slice(None), slice(3, None, -2)),
             "tensor": (slice(None), np.array([0, 2])),
             "mask": (slice(None), np.array([True, False, True, False]))}[kind]

    def fn(a, b):
        out = a * 1  # a non-leaf: PyTorch refuses in-place updates of leaves needing grad
        out[_as_tensors(index)] = b
        return out
    check_grad(fn, x, v)


def test_setitem_on_a_leaf_that_requires_grad_is_refused():
    w = Tensor.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        w[0] = 2.0
    with pytest.raises(RuntimeError, match="leaf"):
        w += 1
    with Tensor.no_grad():  # as an optimiser step
        w[0] = 2.0
        w += 1
    np.testing.assert_array_equal(w.numpy(), [3, 2, 2])
    assert w.requires_grad and w._ctx is None


def test_gradients_of_tensors_computed_before_an_update_use_the_old_graph():
    """y read h before h was updated in place: y's gradient follows h's old value (as
    PyTorch's graph of nodes, not of tensors, gives)."""
    a = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    h = a * a
    y = h * 3
    h[1] = 0.0
    h.mul_(2)
    (y.sum() + h.sum()).backward()
    # y = 3a^2 -> 6a; h = 2a^2 except h[1] = 0 -> 4a, 0 at 1
    np.testing.assert_allclose(a.grad.numpy(), [6 + 4, 12 + 0, 18 + 12])


# ---- in-place methods ----
@pytest.mark.parametrize("name,args,ref", [
    ("add_", (2.5,), lambda a: a + 2.5), ("sub_", (1.0,), lambda a: a - 1),
    ("mul_", (-2.0,), lambda a: a * -2), ("div_", (4.0,), lambda a: a / 4),
    ("clamp_", (-1.0, 1.0), lambda a: np.clip(a, -1, 1)),
    ("clamp_min_", (0.0,), lambda a: np.maximum(a, 0)),
    ("clamp_max_", (0.0,), lambda a: np.minimum(a, 0)),
    ("fill_", (7.0,), lambda a: np.full_like(a, 7)),
    ("zero_", (), np.zeros_like)])
def test_inplace_methods(name, args, ref):
    arr = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    x = Tensor(arr).realize()
    before = x + 0
    out = getattr(x, name)(*args)
    assert out is x, f"{name} must return the tensor itself"
    np.testing.assert_allclose(x.numpy(), ref(arr), rtol=1e-6)
    np.testing.assert_array_equal(before.numpy(), arr)


def test_inplace_dtype_rules_follow_pytorch():
    x = Tensor([1, 2, 3])
    with pytest.raises(RuntimeError, match="int64"):
        x.add_(0.5)  # a float result cannot be stored in an integer tensor
    with pytest.raises(RuntimeError, match="int64"):
        x /= 2
    x[0] = 2.7  # assignment casts, as PyTorch
    x.fill_(Tensor(4.9))
    np.testing.assert_array_equal(x.numpy(), [4, 4, 4])
    h = Tensor([1.0, 2.0], dtype=dtypes.float16)
    h += Tensor([0.5, 0.5])  # float32 into float16: narrowed, as PyTorch
    assert h.dtype == dtypes.float16
    np.testing.assert_array_equal(h.numpy(), [1.5, 2.5])


def test_clamp_family():
    arr = np.array([-2.0, -0.5, 0.5, 2.0], np.float32)
    x = Tensor(arr)
    np.testing.assert_array_equal(x.clamp(-1, 1).numpy(), np.clip(arr, -1, 1))
    np.testing.assert_array_equal(x.clamp_min(0).numpy(), np.maximum(arr, 0))
    np.testing.assert_array_equal(x.clamp_max(0).numpy(), np.minimum(arr, 0))
    # PyTorch's keywords
    np.testing.assert_array_equal(x.clamp(min=-1, max=1).numpy(), np.clip(arr, -1, 1))
    np.testing.assert_array_equal(x.clamp(max=0).numpy(), np.minimum(arr, 0))
    np.testing.assert_array_equal(x.clip(min=0).numpy(), np.maximum(arr, 0))
    np.testing.assert_array_equal(x.clone().clamp_(min=-1).numpy(), np.maximum(arr, -1))


# ---- boolean masks and nonzero ----
@given(data=st.data(), shape=shapes(min_dims=0, max_dims=3, max_side=4),
       dtype=st.sampled_from([dtypes.float32, dtypes.int8]))
@fast(15)
def test_mask_indexing_matches_numpy(data, shape, dtype):
    x, arr = data.draw(tensor_and_array(shape, dtype, low=-5, high=5))
    k = data.draw(st.integers(min(1, len(shape)), len(shape))) if shape else 0
    if not shape:
        return
    mask = arr.reshape(-1)[:int(np.prod(shape[:k]))].reshape(shape[:k]) > 0 if k else arr > 0
    got = x[Tensor(mask)]
    assert_tensor(got, arr[mask], dtype=dtype, exact=True)
    np.testing.assert_array_equal(x.nonzero().numpy(), np.argwhere(arr))
    for got_dim, want_dim in zip(x.nonzero(as_tuple=True), np.nonzero(arr)):
        np.testing.assert_array_equal(got_dim.numpy(), want_dim)
    if len(shape) >= 2:  # a mask after a slice, and after an Ellipsis
        inner = arr[0] > 0
        assert_tensor(x[1:, Tensor(inner)] if inner.ndim == len(shape) - 1 else x[1:],
                      arr[1:, inner] if inner.ndim == len(shape) - 1 else arr[1:], exact=True)
        last = arr[(0,) * (len(shape) - 1)] > 0
        assert_tensor(x[..., Tensor(last)], arr[..., last], exact=True)


def test_nonzero_of_a_0d_tensor():
    assert Tensor(3.0).nonzero().shape == (1, 0)
    assert Tensor(0.0).nonzero().shape == (0, 0)
    assert Tensor(True).nonzero(as_tuple=True)[0].shape == (1,)


def test_setitem_and_inplace_methods_under_jit():
    """Captured and replayed: each call updates the realized parameter in place."""
    w = Tensor(np.zeros(4, np.float32)).realize()

    def step(x):
        w[1:3] = w[1:3] + x[:2]
        w.mul_(2)
        return w.sum().realize()
    jitted = lazyten.jit(step)
    ref = np.zeros(4)
    for i in range(4):
        x = np.arange(4, dtype=np.float32) + i
        out = jitted(Tensor(x))
        ref[1:3] += x[:2]
        ref *= 2
        np.testing.assert_allclose(out.item(), ref.sum(), err_msg=f"call {i + 1}")
        np.testing.assert_allclose(w.numpy(), ref, err_msg=f"parameter after call {i + 1}")
