"""PyTorch's first-hour Tensor methods (lazyten/compat.py, the generated in-place twins of
lazyten/inplace.py, var/std(unbiased=)) against numpy, gradients against float64 finite
differences, and the AttributeError that suggests names."""
import copy

import numpy as np
import pytest
from hypothesis import given, strategies as st

from lazyten import Tensor, dtypes
from lazyten.inplace import INPLACE_TWINS
from tests.gradcheck import check_grad, spaced
from tests.helpers import ALL, FLOATS, INTS, NP, assert_tensor, fast, shapes, tensor_and_array


def _dims(draw, ndim: int) -> tuple[int, int]:
    d1 = draw(st.integers(-ndim, ndim - 1))
    d2 = draw(st.integers(-ndim, ndim - 1).filter(lambda d: d % ndim != d1 % ndim))
    return d1, d2


# ---- views: diagonal, diag, narrow, unbind, movedim, swapaxes, t ----
@fast(10)
@given(st.data(), shapes(2, 4), st.sampled_from(ALL))
def test_diagonal_against_numpy(data, shape, dtype):
    x, arr = data.draw(tensor_and_array(shape, dtype, low=-9, high=9))
    d1, d2 = _dims(data.draw, len(shape))
    offset = data.draw(st.integers(-max(shape) - 1, max(shape) + 1))
    assert_tensor(x.diagonal(offset, d1, d2), np.diagonal(arr, offset, d1, d2), exact=True)


@fast(8)
@given(st.data(), shapes(1, 2), st.integers(-3, 3))
def test_diag_and_trace_against_numpy(data, shape, k):
    x, arr = data.draw(tensor_and_array(shape, dtypes.float32))
    assert_tensor(x.diag(k), np.diag(arr, k), exact=True)
    if len(shape) == 2:
        assert_tensor(x.trace(), np.trace(arr))
    xi = Tensor(arr.astype(np.int8))
    if len(shape) == 2:  # integer traces sum in int64, as PyTorch's
        assert_tensor(xi.trace(), np.trace(arr.astype(np.int8).astype(np.int64)))


@fast(10)
@given(st.data(), shapes(1, 4), st.sampled_from(ALL))
def test_narrow_unbind_movedim_against_numpy(data, shape, dtype):
    x, arr = data.draw(tensor_and_array(shape, dtype, low=-9, high=9))
    ndim = len(shape)
    dim = data.draw(st.integers(-ndim, ndim - 1))
    n = shape[dim]
    start = data.draw(st.integers(-n, n))
    begin = start + n if start < 0 else start
    length = data.draw(st.integers(0, n - begin))
    want = np.take(arr, range(begin, begin + length), axis=dim)
    assert_tensor(x.narrow(dim, start, length), want, exact=True)
    pieces = x.unbind(dim)
    assert len(pieces) == n
    for i, piece in enumerate(pieces):
        assert_tensor(piece, np.take(arr, i, axis=dim), exact=True)
    count = data.draw(st.integers(1, ndim))
    source = data.draw(st.permutations(range(ndim)))[:count]
    dest = data.draw(st.permutations(range(-ndim, 0)))[:count]
    if len({d % ndim for d in dest}) == count:
        assert_tensor(x.movedim(source, dest), np.moveaxis(arr, source, dest), exact=True)
    assert_tensor(x.moveaxis(source[0], dest[0]), np.moveaxis(arr, source[0], dest[0]),
                  exact=True)
    if ndim >= 2:
        d1, d2 = _dims(data.draw, ndim)
        assert_tensor(x.swapaxes(d1, d2), np.swapaxes(arr, d1, d2), exact=True)
        assert_tensor(x.swapdims(d1, d2), np.swapaxes(arr, d1, d2), exact=True)
        assert_tensor(x.mT, np.swapaxes(arr, -1, -2), exact=True)
    if ndim <= 2:
        assert_tensor(x.t(), arr.T, exact=True)


def test_view_errors_name_the_shapes():
    x = Tensor.ones(2, 3, 4)
    with pytest.raises(ValueError, match=r"\(2, 3, 4\)"):
        x.t()
    assert x.narrow(2, -1, 1).shape == (2, 3, 1) and x.narrow(1, -3, 3).shape == (2, 3, 4)
    with pytest.raises(IndexError, match="size 3"):
        x.narrow(1, 2, 2)
    with pytest.raises(IndexError, match="out of range"):
        x.narrow(1, -4, 1)
    with pytest.raises(ValueError, match="dim1 and dim2"):
        x.diagonal(0, 1, -2)
    with pytest.raises(ValueError, match="different numbers"):
        x.movedim((0, 1), 2)
    with pytest.raises(ValueError, match="repeated"):
        x.movedim((0, 0), (1, 2))
    with pytest.raises(ValueError, match=r"\(2, 3, 4\)"):
        x.trace()
    with pytest.raises(ValueError, match=r"\(2, 3, 4\)"):
        x.diag()


# ---- matrix products ----
def test_products_against_numpy():
    rng = np.random.default_rng(0)
    a, b, v = rng.standard_normal((3, 4)), rng.standard_normal((4, 5)), rng.standard_normal(4)
    ba, bb = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 5))
    c, bc = rng.standard_normal((1, 5)), rng.standard_normal((2, 3, 5))
    assert_tensor(Tensor(a).mm(Tensor(b)), a @ b)
    assert_tensor(Tensor(ba).bmm(Tensor(bb)), ba @ bb)
    assert_tensor(Tensor(a).mv(Tensor(v)), a @ v)
    assert_tensor(Tensor(v).outer(Tensor(a[0])), np.outer(v, a[0]))
    assert_tensor(Tensor(c).addmm(Tensor(a), Tensor(b), beta=0.5, alpha=2), 0.5 * c + 2 * a @ b)
    assert_tensor(Tensor(bc).baddbmm(Tensor(ba), Tensor(bb), alpha=-1), bc - ba @ bb)
    nan = Tensor(np.full((3, 5), np.nan))  # beta=0: the input is not read (PyTorch)
    assert_tensor(nan.addmm(Tensor(a), Tensor(b), beta=0), a @ b)


def test_product_errors_name_the_shapes():
    m, v, b = Tensor.ones(2, 3), Tensor.ones(3), Tensor.ones(2, 3, 4)
    with pytest.raises(ValueError, match=r"mm needs .*\(2, 3\) and \(2, 3\)"):
        m.mm(m)
    with pytest.raises(ValueError, match=r"\(2, 3, 4\)"):
        b.mm(m.T)
    with pytest.raises(ValueError, match=r"bmm .*\(2, 3\)"):
        m.bmm(b)
    with pytest.raises(ValueError, match=r"bmm .*\(2, 3, 4\) and \(3, 4, 2\)"):
        b.bmm(Tensor.ones(3, 4, 2))  # no broadcasting of the batch, as PyTorch
    with pytest.raises(ValueError, match=r"mv .*\(3,\) and \(3,\)"):
        v.mv(v)
    with pytest.raises(ValueError, match=r"outer .*\(2, 3\)"):
        m.outer(v)
    with pytest.raises(ValueError, match=r"addmm: input of shape \(3, 3\)"):
        Tensor.ones(3, 3).addmm(m, Tensor.ones(3, 2))


# ---- cumprod ----
@fast(12)
@given(st.data(), shapes(0, 3), st.sampled_from(FLOATS + INTS + [dtypes.bool]))
def test_cumprod_against_numpy(data, shape, dtype):
    x, arr = data.draw(tensor_and_array(shape, dtype, low=-2, high=2))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1)) if shape else 0
    out = x.cumprod(dim)
    if dtype.is_float:
        want = np.cumprod(arr.astype(np.float32), axis=dim if shape else None)
        want = want.reshape(arr.shape).astype(arr.dtype)
        assert_tensor(out, want, rtol=1e-2 if dtype == dtypes.float16 else None)
    else:  # integers and bools multiply in int64, as PyTorch's
        want = np.cumprod(arr.astype(np.int64), axis=dim if shape else None).reshape(arr.shape)
        assert_tensor(out, want)


def test_cumprod_long_with_zeros_and_nan():
    rng = np.random.default_rng(1)
    arr = rng.uniform(0.9, 1.1, (3, 40))
    arr[0, 7] = arr[1, 0] = arr[2, 39] = 0.0
    arr[1, 20] = np.nan
    assert_tensor(Tensor(arr).cumprod(dim=1), np.cumprod(arr, axis=1), rtol=1e-12)
    assert_tensor(Tensor(arr.T.copy()).cumprod(0, dtype=dtypes.float32),
                  np.cumprod(arr.T, axis=0).astype(np.float32))


@pytest.mark.parametrize("n", [1, 5, 19])
def test_cumprod_gradient_with_zeros(n):
    arr = spaced(np.random.default_rng(n), (2, n), amp=3)[0] + 0.1
    arr[0, n // 2] = 0.0  # one zero, and a row with two: no log/exp trick survives these
    arr[1, :2] = 0.0
    check_grad(lambda t: t.cumprod(1), arr)
    check_grad(lambda t: t.cumprod(0), arr.T.copy())


# ---- fmod, remainder, floor_divide ----
def _quotients(rng, shape, dtype=np.float64):
    """(x, y) with x / y kept away from integers: both remainders are smooth there."""
    y = rng.uniform(0.5, 2, shape) * rng.choice([-1, 1], shape)
    x = y * (rng.integers(-3, 4, shape) + rng.uniform(0.2, 0.8, shape))
    return x.astype(dtype), y.astype(dtype)


@fast(10)
@given(st.data(), shapes(0, 3), st.sampled_from(FLOATS + INTS))
def test_fmod_remainder_against_numpy(data, shape, dtype):
    x, arr = data.draw(tensor_and_array(shape, dtype, low=-20, high=20))
    div = data.draw(tensor_and_array(shape, dtype, low=1, high=7))[1]
    div = div * np.where(np.arange(div.size).reshape(div.shape) % 2, 1, -1).astype(div.dtype) \
        if dtype != dtypes.uint8 else div
    div = np.asarray(div, dtype=NP[dtype])  # 0-d products are numpy scalars
    y = Tensor(div)
    assert_tensor(x.fmod(y), np.fmod(arr, div))
    assert_tensor(x.remainder(y), np.remainder(arr, div))
    assert_tensor(x.floor_divide(y), np.floor_divide(arr, div))
    assert_tensor(x.fmod(3), np.fmod(arr, NP[dtype](3)))
    assert_tensor(x.remainder(-3) if dtype != dtypes.uint8 else x.remainder(3),
                  np.remainder(arr, NP[dtype](-3 if dtype != dtypes.uint8 else 3)))


def test_fmod_sign_follows_the_dividend():
    x = Tensor([-7.0, 7.0, -7.0, 7.0])
    y = Tensor([3.0, -3.0, -3.0, 3.0])
    assert x.fmod(y).tolist() == [-1.0, 1.0, -1.0, 1.0]
    assert x.remainder(y).tolist() == [2.0, -2.0, -1.0, 1.0]


def test_fmod_remainder_gradients():
    x, y = _quotients(np.random.default_rng(2), (3, 4))
    check_grad(lambda a, b: a.fmod(b), x, y)
    check_grad(lambda a, b: a.remainder(b), x, y)
    check_grad(lambda a: a.fmod(1.7), x)


# ---- gradients of the views and products ----
def test_view_and_product_gradients():
    rng = np.random.default_rng(3)
    a, b, c = spaced(rng, (3, 4, 5), (5, 2), (4, 2))
    check_grad(lambda t: t.diagonal(1, 0, 2), a)
    check_grad(lambda t: t.diagonal(-1, 2, 1), a)
    check_grad(lambda t: t[0].trace(), a)
    check_grad(lambda t: t[0, 0].diag(-2), a)
    check_grad(lambda t: t.narrow(2, -3, 2).movedim(0, -1), a)
    check_grad(lambda t: t.unbind(1)[2].t(), a)
    check_grad(lambda t, u: t[0].mm(u), a, b)
    check_grad(lambda t, u, v: v.addmm(t[0], u, beta=0.5, alpha=-2), a, b, c)
    check_grad(lambda t, u: t[0, 0].outer(u[:, 0]), a, b)
    check_grad(lambda t, u: t[0].mv(u[:, 1]), a, b)


# ---- reductions ----
@fast(8)
@given(st.data(), shapes(1, 3), st.sampled_from(ALL))
def test_count_nonzero_against_numpy(data, shape, dtype):
    x, arr = data.draw(tensor_and_array(shape, dtype, low=-1, high=1))
    dim = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    want = np.asarray(np.count_nonzero(arr, axis=dim), dtype=np.int64)
    assert_tensor(x.count_nonzero(dim), want)
    assert_tensor(x.count_nonzero(axis=dim), want)


def test_var_std_unbiased():
    arr = np.random.default_rng(4).standard_normal((3, 5))
    x = Tensor(arr)
    for unbiased, ddof in ((True, 1), (False, 0)):
        assert_tensor(x.var(dim=1, unbiased=unbiased), arr.var(axis=1, ddof=ddof))
        assert_tensor(x.std(unbiased=unbiased), np.asarray(arr.std(ddof=ddof)))
    with pytest.raises(TypeError, match="correction=0 and unbiased=True"):
        x.var(correction=0, unbiased=True)


def test_leaky_relu():
    arr = np.array([-2.0, -0.5, 0.0, 3.0])
    assert_tensor(Tensor(arr).leaky_relu(0.2), np.where(arr > 0, arr, 0.2 * arr))
    assert_tensor(Tensor(arr).leaky_relu(), np.where(arr > 0, arr, 0.01 * arr))


# ---- new tensors, types, autograd state ----
def test_new_tensors_take_self_dtype_and_device():
    x = Tensor.ones(2, dtype=dtypes.float16)
    for out, want in ((x.new_zeros(2, 3), np.zeros((2, 3))), (x.new_ones((4,)), np.ones(4)),
                      (x.new_full((2, 2), 7), np.full((2, 2), 7)),
                      (x.new_tensor([1, 2]), np.array([1, 2])),
                      (x.new_tensor(Tensor([1.5, 2.5])), np.array([1.5, 2.5]))):
        assert out.device == x.device and not out.requires_grad
        assert_tensor(out, want, dtype=dtypes.float16)
    assert x.new_empty(3, 2).shape == (3, 2) and x.new_empty(3).dtype == dtypes.float16
    assert x.new_zeros(2, dtype=dtypes.int32).dtype == dtypes.int32
    grad = x.float().new_ones(2, requires_grad=True)
    assert grad.requires_grad and grad.is_leaf
    source = Tensor([1.0], requires_grad=True)
    copied = source.new_tensor(source)
    assert copied.is_leaf and not copied.requires_grad


def test_as_methods():
    x, other = Tensor(np.arange(6.0)), Tensor.ones(2, 3, dtype=dtypes.int32)
    assert_tensor(x.view_as(other), np.arange(6.0).reshape(2, 3))
    assert_tensor(x.reshape_as(other), np.arange(6.0).reshape(2, 3))
    assert_tensor(x[:3].expand_as(other), np.broadcast_to(np.arange(3.0), (2, 3)))
    assert x.type_as(other).dtype == dtypes.int32


def test_type():
    assert Tensor([1.0]).type() == "lazyten.FloatTensor"
    assert Tensor([1]).type() == "lazyten.LongTensor"
    assert Tensor([True]).type() == "lazyten.BoolTensor"
    assert Tensor([1.0]).type(dtypes.float16).dtype == dtypes.float16
    assert Tensor([1.5]).type("torch.IntTensor").dtype == dtypes.int32
    assert Tensor([1.5]).type("lazyten.DoubleTensor").dtype == dtypes.float64
    with pytest.raises(TypeError, match="unknown tensor type"):
        Tensor([1.0]).type("torch.QuuxTensor")


def test_is_leaf_grad_fn_detach_():
    leaf = Tensor([1.0, 2.0], requires_grad=True)
    plain = Tensor([1.0, 2.0])
    out = leaf * 2
    assert leaf.is_leaf and leaf.grad_fn is None and plain.is_leaf
    assert not out.is_leaf and out.grad_fn is not None
    assert (plain * 2).is_leaf and (plain * 2).grad_fn is None  # nothing to record
    with Tensor.no_grad():
        assert (leaf * 2).is_leaf
    kept = out.sum()
    kept.backward()
    assert not out.is_leaf  # still a computed tensor after backward frees its graph
    cut = leaf * 3
    assert cut.detach_() is cut and cut.is_leaf and not cut.requires_grad
    assert cut.grad_fn is None


# ---- in-place twins ----
def test_every_inplace_twin_has_its_out_of_place_op():
    for name in INPLACE_TWINS:
        assert callable(getattr(Tensor, name, None)), name
        assert callable(getattr(Tensor, name + "_")), name + "_"


UNARY = [n for n in INPLACE_TWINS if n in
         "abs neg exp exp2 expm1 log log2 log1p sqrt rsqrt reciprocal square sin cos tan sinh "
         "cosh asinh tanh sigmoid relu erf erfc floor ceil round trunc sign".split()]


@pytest.mark.parametrize("name", UNARY)
def test_unary_inplace_matches_out_of_place(name):
    arr = np.array([[0.3, 1.7, 2.5], [0.6, 3.2, 1.1]], dtype=np.float32)
    x = Tensor(arr)
    before = x * 1
    view = x[0]
    assert getattr(x, name + "_")() is x
    assert_tensor(x, getattr(Tensor(arr), name)().numpy())
    assert_tensor(before, arr)  # tensors read before the update keep the old value
    assert_tensor(view, arr[0])


@fast(12)
@given(st.data(), shapes(0, 3), st.sampled_from(ALL),
       st.sampled_from(["abs", "neg", "sign", "floor", "exp", "sqrt", "relu", "square"]))
def test_inplace_twins_over_dtypes(data, shape, dtype, name):
    """name_ stores name's result when its kind fits (bool < int < float), else refuses."""
    if dtype == dtypes.bool and name in ("neg", "sign", "square"):
        return  # the out-of-place op refuses bools already
    x, arr = data.draw(tensor_and_array(shape, dtype, low=0, high=5))
    want = getattr(Tensor(arr), name)()
    if want.dtype.is_float and not dtype.is_float:
        with pytest.raises(RuntimeError, match=f"{name}_: the result is"):
            getattr(x, name + "_")()
        return
    getattr(x, name + "_")()
    assert_tensor(x, want.cast(dtype).numpy())


def test_binary_inplace_and_kind_rules():
    arr = np.array([[1.5, -2.0], [3.0, -4.5]])
    x = Tensor(arr)
    x.pow_(2).fmod_(4).remainder_(-3)
    assert_tensor(x, np.remainder(np.fmod(arr ** 2, 4), -3))
    x.masked_fill_(Tensor([[True, False], [False, True]]), 9)
    assert x.numpy()[0, 0] == 9 and x.numpy()[1, 1] == 9
    ints = Tensor([1, 2, 3])
    ints.masked_fill_(Tensor([False, True, False]), 2.7)  # a fill casts, as PyTorch
    assert ints.tolist() == [1, 2, 3]
    ints.abs_().neg_()
    assert ints.tolist() == [-1, -2, -3] and ints.dtype == dtypes.int64
    with pytest.raises(RuntimeError, match="sqrt_: the result is float32"):
        ints.sqrt_()
    with pytest.raises(RuntimeError, match="leaf tensor"):
        Tensor([1.0], requires_grad=True).exp_()


def test_inplace_twins_gradient():
    arr = spaced(np.random.default_rng(5), (2, 3))[0]

    def fn(t):
        y = t * 1
        y.exp_()
        y.cumprod_(1)
        return y

    check_grad(fn, arr)


# ---- names spelt differently ----
def test_other_spellings_name_lazytens():
    x = Tensor([1.0])
    with pytest.raises(AttributeError, match=r"'astype'; lazyten spells it cast\(dtype\)"):
        x.astype(np.float16)
    with pytest.raises(AttributeError, match=r"in-place view .*close names: unsqueeze"):
        x.unsqueeze_(0)
    with pytest.raises(AttributeError, match=r"'ravel'; lazyten spells it flatten\(\)"):
        _ = Tensor.ravel  # on the class too
    assert not hasattr(x, "astype") and getattr(x, "cuda", None) is None
    with pytest.raises(AttributeError) as error:  # other typos: Python's own suggestion,
        x.unsqeeze(0)  # which needs the name and the object on the error
    assert error.value.name == "unsqeeze" and error.value.obj is x


def test_attribute_reads_stay_generic():
    """No __getattr__ on Tensor: CPython specializes attribute reads only without one."""
    assert all("__getattr__" not in vars(cls) for cls in Tensor.__mro__)


def test_copy_and_probes_still_work():
    x = Tensor([1.0, 2.0])
    assert copy.copy(x).tolist() == [1.0, 2.0]
    assert not hasattr(x, "_nope") and not hasattr(x, "__torch_function__")
    names = [n for n in dir(x) if not n.startswith("_")]
    assert "astype" in names and "numel" in names  # dir() lists them; reading astype raises
