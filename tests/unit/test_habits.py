"""PyTorch spellings (lazyten/aliases.py, interop.py, switches.py, max(dim) in reduce.py,
cat([...]) in movement.py), each against numpy or the tinygrad spelling it aliases, and
the errors that name the right spelling for a wrong one. Setitem and the in-place methods
are in test_inplace.py."""
import threading

import numpy as np
import pytest
from hypothesis import given, strategies as st

import lazyten
from lazyten import Tensor, dtypes
from tests.gradcheck import check_grad, spaced
from tests.helpers import assert_tensor, fast, shapes, tensor_and_array

# ---- max(dim) / min(dim) ----
@pytest.mark.parametrize("largest", [True, False])
@given(data=st.data(), shape=shapes(min_dims=1, max_dims=3, max_side=4), keepdim=st.booleans(),
       dtype=st.sampled_from([dtypes.float32, dtypes.int32, dtypes.uint8, dtypes.bool]))
@fast(12)
def test_max_dim_values_and_indices(largest, data, shape, keepdim, dtype):
    x, arr = data.draw(tensor_and_array(shape, dtype, low=0, high=2))  # many ties
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    name, np_fn, np_arg = ("max", np.max, np.argmax) if largest else ("min", np.min, np.argmin)
    by_position = getattr(x, name)(dim, keepdim)
    by_keyword = getattr(x, name)(dim=dim, keepdim=keepdim)
    for out in (by_position, by_keyword):
        values, indices = out  # unpacks, and has .values and .indices
        assert out.values is values and out.indices is indices
        assert_tensor(values, np_fn(arr, axis=dim, keepdims=keepdim), dtype=dtype, exact=True)
        assert_tensor(indices, np_arg(arr, axis=dim, keepdims=keepdim), dtype=dtypes.int64)
    assert_tensor(getattr(x, name)(axis=dim, keepdim=keepdim),  # tinygrad's spelling
                  np_fn(arr, axis=dim, keepdims=keepdim), dtype=dtype, exact=True)


def test_max_dim_nan_and_gradient_to_the_first_tie():
    arr = np.array([[1.0, np.nan, 3.0, np.nan], [2.0, 5.0, 5.0, 0.0]], np.float32)
    values, indices = Tensor(arr).max(1)
    np.testing.assert_array_equal(values.numpy(), [np.nan, 5.0])
    np.testing.assert_array_equal(indices.numpy(), [1, 1])  # first NaN, first of the tie
    x = Tensor([[1.0, 4.0, 4.0], [3.0, 3.0, 0.0]], requires_grad=True)
    x.max(dim=1).values.sum().backward()  # PyTorch: the gradient goes to the index
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 1, 0], [1, 0, 0]])
    y = Tensor([[1.0, 4.0, 4.0]], requires_grad=True)
    y.max(axis=1).sum().backward()  # amax: ties share
    np.testing.assert_array_equal(y.grad.numpy(), [[0, 0.5, 0.5]])


def test_max_dim_gradient_against_finite_differences():
    x, = spaced(np.random.default_rng(1), (3, 4))
    check_grad(lambda t: t.max(1).values, x)
    check_grad(lambda t: t.min(dim=0, keepdim=True).values, x)


def test_max_of_other_tensor_is_maximum():
    a, b = np.array([1.0, 5.0, -2.0], np.float32), np.array([3.0, 2.0, -1.0], np.float32)
    np.testing.assert_array_equal(Tensor(a).max(Tensor(b)).numpy(), np.maximum(a, b))
    np.testing.assert_array_equal(Tensor(a).min(Tensor(b)).numpy(), np.minimum(a, b))
    assert Tensor(a).max().item() == 5.0 and Tensor(a).min().item() == -2.0


# ---- dim= aliases, cat/stack lists, keyword names ----
@pytest.mark.parametrize("name", ["sum", "mean", "var", "std", "prod", "argmax", "argmin",
                                  "logsumexp", "softmax", "log_softmax", "cumsum", "amax", "amin"])
def test_dim_is_axis(name):
    arr = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    x = Tensor(arr)
    np.testing.assert_allclose(getattr(x, name)(dim=1).numpy(), getattr(x, name)(axis=1).numpy())
    with pytest.raises(TypeError, match="axis= and dim="):
        getattr(x, name)(axis=1, dim=1)


def test_sum_dtype_and_acc_dtype():
    x = Tensor(np.full(300, 200, np.uint8))
    for kw in ({"dtype": dtypes.int32}, {"acc_dtype": dtypes.int32}):
        out = x.sum(**kw)
        assert out.dtype == dtypes.int32 and out.item() == 60000
    half = Tensor(np.full(4, 0.5, np.float16))
    assert half.sum(acc_dtype=dtypes.float32).dtype == dtypes.float32
    assert x[:3].prod(dtype=dtypes.int64).item() == 200 ** 3
    with pytest.raises(TypeError, match="acc_dtype"):
        x.sum(dtype=dtypes.int32, acc_dtype=dtypes.int64)


def test_movement_keywords():
    arr = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = Tensor(arr)
    a, b = Tensor(arr[:, :1]), Tensor(arr[:, 1:])
    cases = [
        (Tensor.cat([a, b], dim=1), np.concatenate([arr[:, :1], arr[:, 1:]], 1)),
        (Tensor.cat((a, b), 1), np.concatenate([arr[:, :1], arr[:, 1:]], 1)),
        (Tensor.cat(a, b, dim=1), np.concatenate([arr[:, :1], arr[:, 1:]], 1)),
        (a.cat(b, dim=1), np.concatenate([arr[:, :1], arr[:, 1:]], 1)),
        (Tensor.stack([x, x], dim=1), np.stack([arr, arr], 1)),
        (Tensor.stack([x, x], -1), np.stack([arr, arr], -1)),
        (x.reshape(shape=(6, 4)), arr.reshape(6, 4)), (x.view(4, 6), arr.reshape(4, 6)),
        (x.permute(dims=(2, 0, 1)), arr.transpose(2, 0, 1)),
        (x.permute(order=(2, 0, 1)), arr.transpose(2, 0, 1)),
        (x.flip(dims=(0, 2)), np.flip(arr, (0, 2))), (x.flip(axis=1), np.flip(arr, 1)),
        (x.transpose(0, 2), arr.transpose(2, 1, 0)),
        (x[:, :1].expand(-1, 5, -1), np.broadcast_to(arr[:, :1], (2, 5, 4))),
        (x[:, :1].expand(size=(2, 2, 4)), np.broadcast_to(arr[:, :1], (2, 2, 4))),
        (x[:, :1].squeeze(dim=1), arr[:, 0]), (x.unsqueeze(dim=0), arr[None]),
        (x.flatten(start_dim=1), arr.reshape(2, 12)), (x.sum(dim=(0, 2)), arr.sum((0, 2))),
        (x.gather(dim=2, index=Tensor(np.zeros((2, 3, 1), np.int64))), arr[:, :, :1]),
    ]
    for got, want in cases:
        np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(x.split(2, dim=2)[1].numpy(), arr[:, :, 2:])
    np.testing.assert_array_equal(x.chunk(3, axis=1)[2].numpy(), arr[:, 2:])


# ---- conversions and accessors ----
def test_numpy_and_python_conversions():
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = Tensor(arr)
    np.testing.assert_array_equal(np.asarray(x), arr)
    assert np.asarray(x, dtype=np.float64).dtype == np.float64
    assert np.array(x, copy=True).shape == (2, 3)
    with pytest.raises(ValueError, match="copy"):
        np.asarray(x, copy=False)
    try:  # numpy's operators give way to the Tensor's: never a silent ndarray result
        product = np.float32(2) * x
    except TypeError:  # numpy scalars are not Tensor operands (yet)
        product = None
    assert not isinstance(product, np.ndarray)
    assert float(x[1, 2]) == 5.0 and int(x[1, 1]) == 4 and bool(x[0, 1])
    assert [10, 20, 30][Tensor(2)] == 30 and range(Tensor([3]))[-1] == 2
    with pytest.raises(TypeError, match="integer"):
        [1, 2][Tensor(1.0)]
    with pytest.raises(TypeError, match=r"\(2, 3\)"):
        float(x)
    assert x.size() == (2, 3) and x.size(1) == 3 and x.size(-2) == 2 and x.dim() == 2
    assert isinstance(x.shape, tuple)
    assert x.cpu().device == "CPU"
    assert x.to(dtypes.float16).dtype == dtypes.float16 and x.to(float).dtype == dtypes.float32
    assert x.to("CPU", dtypes.int32).dtype == dtypes.int32
    assert x.to(Tensor([1], dtype=dtypes.int8)).dtype == dtypes.int8
    assert x.to() is not x and x.to(device="CPU").device == "CPU"


def test_only_floats_require_grad():
    for make in (lambda: Tensor([1, 2], requires_grad=True),
                 lambda: Tensor.zeros(2, dtype=dtypes.int32, requires_grad=True),
                 lambda: Tensor.arange(3, requires_grad=True),
                 lambda: Tensor.eye(2, dtype=dtypes.bool, requires_grad=True),
                 lambda: Tensor.randint(0, 5, (2,), requires_grad=True),
                 lambda: Tensor([1, 2]).requires_grad_()):
        with pytest.raises(RuntimeError, match="only floating point tensors can require"):
            make()
    w = Tensor([1.0]).requires_grad_()
    assert w.requires_grad
    (w * 3).sum().backward()
    assert w.grad.item() == 3.0


# ---- no_grad and train ----
def test_no_grad_spellings():
    w = Tensor([1.0], requires_grad=True)
    assert not Tensor.no_grad and Tensor.no_grad == 0
    with Tensor.no_grad():
        assert Tensor.no_grad and (w * 2)._ctx is None

    @Tensor.no_grad()
    def f():
        return w * 2

    @lazyten.no_grad()
    def g():
        return w * 2
    @Tensor.no_grad
    def bare():
        return w * 2

    @lazyten.no_grad
    def bare_too():
        return w * 2
    assert f()._ctx is None and g()._ctx is None and (w * 2)._ctx is not None
    assert bare()._ctx is None and bare_too()._ctx is None and not Tensor.no_grad
    Tensor.no_grad = True  # tinygrad's spelling still sets it
    try:
        assert (w * 2)._ctx is None
    finally:
        Tensor.no_grad = False
    seen = []
    with Tensor.no_grad():  # per thread, as before
        thread = threading.Thread(target=lambda: seen.append(bool(Tensor.no_grad)))
        thread.start()
        thread.join()
    assert seen == [False]

    @Tensor.train()
    def training():
        return bool(Tensor.training)
    assert training() and not Tensor.training


def test_randint_spellings():
    Tensor.manual_seed(0)
    a = Tensor.randint(3, 7, (500,))
    b = Tensor.randint(4, size=(2, 3))
    c = Tensor.randint(2, 3, low=5, high=6)  # tinygrad's: shape, then low= high=
    assert a.dtype == dtypes.int64 and a.shape == (500,)
    assert set(np.unique(a.numpy())) == {3, 4, 5, 6}
    assert b.shape == (2, 3) and b.numpy().min() >= 0 and b.numpy().max() < 4
    assert c.dtype == dtypes.int32 and (c.numpy() == 5).all()
    with pytest.raises(ValueError, match="high"):
        Tensor.randint(5, 5, (2,))


# ---- wrong spellings name the right one ----
def _x():
    return Tensor.ones(2, 3)


WRONG = [  # (call, exception type, a piece of the message naming the right spelling)
    (lambda: _x().cat([_x()]), TypeError, "Tensor.cat([a, b], dim=0)"),
    (lambda: Tensor.cat([_x(), 3]), TypeError, "Tensor.cat([a, b], dim=0)"),
    (lambda: Tensor.cat([_x()], [_x()]), TypeError, "Tensor.cat([a, b], dim=0)"),
    (lambda: Tensor.stack(_x(), [_x()]), TypeError, "Tensor.stack([a, b], dim=0)"),
    (lambda: Tensor.cat([]), ValueError, "at least one tensor"),
    (lambda: _x().sum(keepdims=True), TypeError, "keepdim="),
    (lambda: _x().mean(dims=1), TypeError, "dim="),
    (lambda: _x().sum(axis=0, dim=0), TypeError, "pass one"),
    (lambda: _x().max(dim=(0, 1)), TypeError, "max(axis=(0, 1))"),
    (lambda: _x().max((0, 1)), TypeError, "amax(dim=(0, 1))"),
    (lambda: _x().max(0, axis=1), TypeError, "axis="),
    (lambda: _x().min(_x(), 1), TypeError, "min(other)"),
    (lambda: _x().reshape(3, 2, shape=(6,)), TypeError, "shape="),
    (lambda: _x().flatten(start=1), TypeError, "start_dim="),
    (lambda: _x().squeeze(dims=0), TypeError, "dim="),
    (lambda: _x().permute(dim=(1, 0)), TypeError, "dims="),
    (lambda: _x().softmax(dim=1, axis=1), TypeError, "pass one"),
    (lambda: _x().sum(dtype=dtypes.int32, acc_dtype=dtypes.int64), TypeError, "pass one"),
    (lambda: float(_x()), TypeError, "one-element"),
    (lambda: np.asarray(_x(), copy=False), ValueError, "copy=None"),
    (lambda: _x().size("a"), TypeError, "dim must be an int"),
    (lambda: Tensor.randint(1, 2, 3, (4,)), TypeError, "(low, high, size)"),
    (lambda: _x().to("CPU", "CPU"), TypeError, "a device, a dtype"),
]


@pytest.mark.parametrize("case", range(len(WRONG)))
def test_wrong_spellings_name_the_right_one(case):
    call, exc, needle = WRONG[case]
    with pytest.raises(exc) as info:
        call()
    assert needle in str(info.value), f"{needle!r} not in {str(info.value)!r}"
    assert not isinstance(info.value, AttributeError)


@pytest.mark.parametrize("scalar", [np.float32(2.5), np.float64(-1.5), np.int64(3), np.int8(-2),
                                    np.bool_(True)])
def test_numpy_scalars_act_as_python_numbers(scalar):
    """As in PyTorch: a numpy scalar in an op is a Python number (its kind, not its dtype,
    decides the result's dtype), on either side."""
    arr = np.array([1.0, -2.0, 4.0], np.float32)
    x = Tensor(arr)
    expected = arr * scalar.item()  # a Python number keeps float32
    for got in (x * scalar, scalar * x):
        assert got.dtype == dtypes.float32
        np.testing.assert_allclose(got.numpy(), expected.astype(np.float32), rtol=1e-6)
    ints = Tensor(np.array([1, 2], np.int32))
    if isinstance(scalar.item(), (bool, int)):
        assert (ints + scalar).dtype == dtypes.int32


def test_numpy_types_and_scalars_name_dtypes():
    x = Tensor([1.0, 2.0])
    assert x.to(np.float64).dtype == dtypes.float64
    assert x.cast(np.bool_).dtype == dtypes.bool and x.cast(np.uint16).dtype == dtypes.uint16
    assert Tensor(np.float16(1.5)).dtype == dtypes.float16  # a numpy scalar keeps its dtype
    assert Tensor(np.int8(3)).dtype == dtypes.int8


# ---- lazyten.nn / lazyten.optim after `import lazyten` ----
def test_submodules_are_attributes_of_the_package():
    """`torch.optim.Adam` works after `import torch`: so does `lazyten.optim.Adam`, in a new
    process (where nothing imported lazyten.optim before), and a misspelling still raises."""
    import subprocess
    import sys
    code = ("import lazyten, numpy as np\n"
            "w = lazyten.Tensor(np.ones(3, np.float32), requires_grad=True)\n"
            "opt = lazyten.optim.SGD([w], lr=0.5)\n"
            "lazyten.nn.functional.relu(w).sum().backward(); opt.step()\n"
            "print(w.numpy().tolist(), lazyten.nn.Linear(2, 3).weight.shape)\n"
            "try:\n    lazyten.optimm\nexcept AttributeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert lines[0] == "[0.5, 0.5, 0.5] (3, 2)"
    assert "optimm" in lines[1]
