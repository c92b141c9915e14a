"""PyTorch's top-level namespace (`import lazyten as torch`; lazyten/functions.py and
functions_ops.py): each function against numpy, torch's overloads (max/min/sum/std), dtype
aliases, grad mode as call, block and decorator, seeding, safetensors-only save/load, the
callable `lazyten.tensor` module, and a training loop written as a PyTorch script."""
import pathlib
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, strategies as st

import lazyten
from lazyten import Tensor, dtypes, functions
from tests.helpers import assert_tensor, fast, shapes

RNG = np.random.default_rng(7)
A = RNG.standard_normal((3, 4)).astype(np.float32)
B = RNG.standard_normal((3, 4)).astype(np.float32)
POS = np.abs(A) + 0.5  # inside every domain below (log, sqrt, acosh wants >= 1: POS + 1)
CALLABLE_MODULES = ("tensor", "einsum", "split", "scatter")


def t(arr) -> Tensor:
    return Tensor(np.asarray(arr))


# ---- the namespace itself ----
def test_every_name_resolves_on_the_package():
    assert len(functions.__all__) == len(set(functions.__all__)) > 150
    for name in functions.__all__:
        value = getattr(lazyten, name)
        if name in CALLABLE_MODULES:
            assert value is sys.modules[f"lazyten.{name}"] and callable(value), name
        else:
            assert value is getattr(functions, name), f"lazyten.{name} is not functions.{name}"
    for missing in ("check_out", "as_input", "np", "optimm", "__wrapped__"):
        with pytest.raises(AttributeError):
            getattr(lazyten, missing)
    assert {"zeros", "float32", "cuda", "nn"} <= set(dir(lazyten))


def test_submodules_named_like_functions_are_callable_modules():
    from lazyten.tensor import Tensor as T  # the module still imports
    assert T is Tensor and lazyten.tensor.Tensor is Tensor
    x = lazyten.tensor([1., 2.])
    assert_tensor(x, np.array([1., 2.], np.float32))
    assert_tensor(lazyten.einsum("ij->ji", t(A)), A.T)
    assert [p.shape for p in lazyten.split(t(A), 3, dim=1)] == [(3, 3), (3, 1)]
    got = lazyten.scatter(t(np.zeros((2, 2), np.float32)), 1, t(np.array([[1], [0]])), 5.0)
    assert_tensor(got, np.array([[0, 5], [5, 0]], np.float32))


def test_import_stays_lazy_and_tensor_calls_in_a_new_process():
    code = ("import sys, lazyten\n"
            "print('lazyten.functions' in sys.modules, 'lazyten.nn' in sys.modules)\n"
            "print(lazyten.tensor([1, 2]).tolist(), 'lazyten.functions' in sys.modules)\n"
            "print(lazyten.zeros(2).tolist(), 'zeros' in vars(lazyten))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["False False", "[1, 2] True", "[0.0, 0.0] True"]


def test_out_and_non_tensor_inputs_are_refused():
    x = t(A)
    for call in (lambda: lazyten.exp(x, out=x), lambda: lazyten.sum(x, 0, out=x),
                 lambda: lazyten.zeros(2, out=x), lambda: lazyten.cat([x, x], out=x),
                 lambda: lazyten.add(x, x, out=x), lambda: lazyten.max(x, 1, out=x)):
        with pytest.raises(TypeError, match="out= is not supported"):
            call()
    with pytest.raises(TypeError, match=r"input must be a Tensor, got list .*lazyten.tensor"):
        lazyten.exp([1.0, 2.0])
    with pytest.raises(TypeError, match="generator="):
        lazyten.rand(2, generator=object())


# ---- elementwise math and comparisons ----
UNARY = {"abs": np.abs, "neg": np.negative, "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1,
         "log": np.log, "log2": np.log2, "log1p": np.log1p, "sqrt": np.sqrt,
         "rsqrt": lambda a: 1 / np.sqrt(a), "square": np.square, "reciprocal": np.reciprocal,
         "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
         "arctan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
         "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
         "sigmoid": lambda a: 1 / (1 + np.exp(-a)), "relu": lambda a: np.maximum(a, 0),
         "sign": np.sign, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "round": np.round,
         "frac": lambda a: a - np.trunc(a), "isnan": np.isnan, "isinf": np.isinf,
         "isfinite": np.isfinite, "logical_not": np.logical_not, "absolute": np.abs}
SPECIAL = np.where(A > 1, np.nan, np.where(A < -1, np.inf, A)).astype(np.float32)
DOMAIN = {"log": POS, "log2": POS, "log1p": POS, "sqrt": POS, "rsqrt": POS, "reciprocal": POS,
          "asin": np.tanh(A), "acos": np.tanh(A), "atanh": np.tanh(A), "acosh": POS + 1,
          "round": A * 3, "isnan": SPECIAL, "isinf": SPECIAL, "isfinite": SPECIAL,
          "logical_not": A > 0}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_against_numpy(name):
    arr = DOMAIN.get(name, A)
    assert_tensor(getattr(lazyten, name)(t(arr)), UNARY[name](arr), rtol=2e-5, atol=1e-6)


BINARY = {"maximum": np.maximum, "minimum": np.minimum, "atan2": np.arctan2,
          "logaddexp": np.logaddexp, "fmod": np.fmod, "remainder": np.remainder,
          "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
          "gt": np.greater, "greater_equal": np.greater_equal, "mul": np.multiply,
          "div": np.divide, "add": np.add, "sub": np.subtract, "copysign": np.copysign,
          "max": np.maximum, "min": np.minimum, "isclose": np.isclose, "matmul": np.matmul}


@fast(8)
@given(st.sampled_from(sorted(BINARY)), st.sampled_from([((3, 4), (4,)), ((3, 1), (1, 4)),
                                                          ((4,), (3, 4)), ((2, 3, 4), (4,))]))
def test_binary_broadcast_against_numpy(name, shapes_ab):
    a = RNG.standard_normal(shapes_ab[0]).astype(np.float32)
    b = RNG.standard_normal(shapes_ab[1]).astype(np.float32)
    b = np.where(b < 0, b - 0.25, b + 0.25).astype(np.float32)  # no division by ~0
    a[..., :1] = b[..., :1] if name in ("eq", "le", "isclose") else a[..., :1]  # some equal
    if name == "matmul":
        b = b.reshape(4, 1) if b.ndim == 1 else b.reshape(4, 3)
        a = a.reshape(-1, 4) if a.shape[-1] == 4 else a.reshape(1, -1)[:, :4]
    assert_tensor(getattr(lazyten, name)(t(a), t(b)), BINARY[name](a, b), rtol=2e-5, atol=1e-6)


def test_arithmetic_overloads():
    x, y = t(A), t(B)
    assert_tensor(lazyten.add(x, y, alpha=2), A + 2 * B)
    assert_tensor(lazyten.sub(2.0, x, alpha=3), 2 - 3 * A)
    assert_tensor(lazyten.pow(t(POS), 2.5), POS ** np.float32(2.5), rtol=1e-5)
    assert_tensor(lazyten.pow(2.0, x), np.float32(2) ** A, rtol=1e-5)
    assert_tensor(lazyten.div(x * 10, 3, rounding_mode="floor"), np.floor(A * 10 / 3))
    assert_tensor(lazyten.round(x * 30, decimals=1), np.round(A * 30, 1), rtol=1e-5)
    assert_tensor(lazyten.clamp(x, -0.5, 0.5), np.clip(A, -0.5, 0.5))
    assert_tensor(lazyten.clip(x, min=0.1), np.maximum(A, 0.1))
    assert_tensor(lazyten.where(x > 0, x, y), np.where(A > 0, A, B))
    assert_tensor(lazyten.where(x > 0, x, 0.0), np.where(A > 0, A, 0).astype(np.float32))
    rows, cols = lazyten.where(x > 0)
    assert [rows.numpy().tolist(), cols.numpy().tolist()] == [v.tolist() for v in np.nonzero(A > 0)]
    assert lazyten.allclose(x, x * (1 + 1e-6)) and not lazyten.allclose(x, y)
    assert lazyten.equal(x, t(A.copy())) and not lazyten.equal(x, y)
    assert not lazyten.equal(x, x.reshape(4, 3))  # one shape, not only one set of values


# ---- reductions: torch's overloads ----
@fast(8)
@given(shapes(1, 3, max_side=4), st.data())
def test_reductions_along_a_dim(shape, data):
    arr = RNG.standard_normal(shape).astype(np.float32)
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    keep = data.draw(st.booleans())
    x = t(arr)
    assert_tensor(lazyten.sum(x, dim, keepdim=keep), arr.sum(dim, keepdims=keep), rtol=1e-5)
    assert_tensor(lazyten.mean(x, dim=dim, keepdim=keep), arr.mean(dim, keepdims=keep), rtol=1e-5)
    assert_tensor(lazyten.argmax(x, dim, keep), np.argmax(arr, dim, keepdims=keep))
    assert_tensor(lazyten.cumsum(x, dim), np.cumsum(arr, dim), rtol=1e-5, atol=1e-5)
    values, indices = lazyten.max(x, dim, keep)
    assert_tensor(values, arr.max(dim, keepdims=keep))
    assert_tensor(indices, np.argmax(arr, dim, keepdims=keep))
    low = lazyten.min(x, dim=dim, keepdim=keep)
    assert_tensor(low.values, arr.min(dim, keepdims=keep))
    assert_tensor(low.indices, np.argmin(arr, dim, keepdims=keep))
    if shape[dim] > 1:
        assert_tensor(lazyten.std(x, dim, keepdim=keep), arr.std(dim, ddof=1, keepdims=keep),
                      rtol=1e-4)


def test_overloads_of_max_min_sum_std():
    x, y, ints = t(A), t(B), t(np.arange(12).reshape(3, 4))
    assert lazyten.max(x).shape == () and lazyten.max(x).item() == A.max()
    assert lazyten.min(x).item() == A.min()
    assert_tensor(lazyten.max(x, y), np.maximum(A, B))
    assert_tensor(lazyten.min(x, other=y), np.minimum(A, B))
    result = lazyten.max(x, 0, True)
    assert result.values.shape == (1, 4) and result.indices.dtype == dtypes.int64
    with pytest.raises(TypeError, match="needs dim"):
        lazyten.max(x, keepdim=True)
    assert lazyten.sum(ints).dtype == dtypes.int64 and lazyten.sum(ints).item() == 66
    assert_tensor(lazyten.sum(x, (0, 1)), np.float32(A.sum()), rtol=1e-5)
    assert_tensor(lazyten.sum(ints, dim=1, dtype=lazyten.float64), np.arange(12.).reshape(3, 4).sum(1))
    assert_tensor(lazyten.mean(ints, dtype=lazyten.float64), np.float64(5.5))  # cast first
    assert_tensor(lazyten.cumsum(ints, 0, dtype=lazyten.float32), np.cumsum(ints.numpy(), 0, np.float32))
    assert_tensor(lazyten.std(x), np.float32(A.std(ddof=1)), rtol=1e-5)
    assert_tensor(lazyten.std(x, False), np.float32(A.std()), rtol=1e-5)  # (input, unbiased)
    assert_tensor(lazyten.std(x, 1, False), A.std(1), rtol=1e-5)  # (input, dim, unbiased)
    assert_tensor(lazyten.var(x, dim=0, correction=0), A.var(0), rtol=1e-5)
    assert_tensor(lazyten.prod(x, 1), A.prod(1), rtol=1e-5)
    assert_tensor(lazyten.logsumexp(x, 1), np.log(np.exp(A).sum(1)), rtol=1e-5)
    assert_tensor(lazyten.norm(x), np.float32(np.sqrt((A * A).sum())), rtol=1e-5)
    assert lazyten.all(x > -9).item() and not lazyten.any(x > 9).item()
    assert_tensor(lazyten.any(x > 1, 1), (A > 1).any(1))
    assert_tensor(lazyten.softmax(x, 1), np.exp(A) / np.exp(A).sum(1, keepdims=True), rtol=1e-5)
    assert lazyten.softmax(x, -1, dtype=lazyten.float64).dtype == dtypes.float64
    log_p = A - np.log(np.exp(A).sum(0, keepdims=True))
    assert_tensor(lazyten.log_softmax(x, dim=0), log_p, rtol=1e-5, atol=1e-6)
    assert lazyten.numel(x) == 12 and lazyten.is_tensor(x) and not lazyten.is_tensor(A)


# ---- shapes, joining, indexing, linear algebra, sorting ----
@fast(6)
@given(shapes(1, 3, max_side=4), st.data())
def test_shape_ops_against_numpy(shape, data):
    arr = RNG.standard_normal(shape).astype(np.float32)
    dim = data.draw(st.integers(0, len(shape) - 1))
    x = t(arr)
    assert_tensor(lazyten.cat([x, x * 2], dim=dim), np.concatenate([arr, arr * 2], dim))
    assert_tensor(lazyten.stack((x, x), dim), np.stack([arr, arr], dim))
    assert_tensor(lazyten.flip(x, (dim,)), np.flip(arr, dim))
    assert_tensor(lazyten.roll(x, 1, dim), np.roll(arr, 1, dim))
    assert_tensor(lazyten.unsqueeze(x, dim), np.expand_dims(arr, dim))
    assert_tensor(lazyten.flatten(x), arr.reshape(-1))
    assert_tensor(lazyten.permute(x, tuple(reversed(range(len(shape))))), arr.transpose())
    pieces = lazyten.chunk(x, 2, dim)
    assert_tensor(lazyten.concat(pieces, dim), arr)
    assert_tensor(lazyten.repeat_interleave(x, 2, dim=dim), np.repeat(arr, 2, dim))


def test_indexing_and_triangles():
    x, idx = t(A), np.array([[0, 3], [1, 1], [2, 0]])
    assert_tensor(lazyten.gather(x, 1, t(idx)), np.take_along_axis(A, idx, 1))
    assert_tensor(lazyten.index_select(x, 1, t(np.array([0, 2]))), A[:, [0, 2]])
    assert_tensor(lazyten.masked_select(x, x > 0), A[A > 0])
    assert_tensor(lazyten.tril(x), np.tril(A))
    assert_tensor(lazyten.triu(x, 1), np.triu(A, 1))
    assert_tensor(lazyten.transpose(x, 0, 1), A.T)
    assert_tensor(lazyten.reshape(x, (4, 3)), A.reshape(4, 3))
    assert_tensor(lazyten.squeeze(t(A[None])), A)
    big, small = lazyten.broadcast_tensors(x, t(B[0]))
    assert big.shape == small.shape == (3, 4)
    assert [p.shape for p in lazyten.split(x, [1, 3], 1)] == [(3, 1), (3, 3)]


def test_linear_algebra():
    x, y = t(A), t(B)
    assert_tensor(lazyten.matmul(x, y.T), A @ B.T, rtol=1e-5, atol=1e-6)
    assert_tensor(lazyten.mm(x, y.T), A @ B.T, rtol=1e-5, atol=1e-6)
    assert_tensor(lazyten.bmm(x[None], y.T[None]), (A @ B.T)[None], rtol=1e-5, atol=1e-6)
    assert_tensor(lazyten.einsum("ij,kj->ik", x, y), A @ B.T, rtol=1e-5, atol=1e-6)
    assert_tensor(lazyten.outer(x[0], y[0]), np.outer(A[0], B[0]), rtol=1e-6)
    assert_tensor(lazyten.dot(x[0], y[0]), np.float32(A[0] @ B[0]), rtol=1e-5)
    with pytest.raises(ValueError, match="1-d"):
        lazyten.dot(x, y)


def test_sorting_and_sampling():
    x = t(A)
    values, indices = lazyten.sort(x)
    assert_tensor(values, np.sort(A, -1))
    assert_tensor(indices, np.argsort(A, -1, kind="stable"))
    assert_tensor(lazyten.sort(x, 0, True).values, -np.sort(-A, 0))
    assert_tensor(lazyten.argsort(x, dim=1), np.argsort(A, 1, kind="stable"))
    assert_tensor(lazyten.topk(x, 2).values, -np.sort(-A, -1)[:, :2])
    weights = t(np.array([[0.0, 1.0, 3.0], [2.0, 0.0, 0.0]], np.float32))
    lazyten.manual_seed(3)
    draws = lazyten.multinomial(weights, 50, replacement=True).numpy()
    assert draws.shape == (2, 50) and set(draws[0]) <= {1, 2} and set(draws[1]) == {0}
    lazyten.manual_seed(3)
    again = lazyten.multinomial(weights, 50, replacement=True).numpy()
    np.testing.assert_array_equal(again, draws)


# ---- creation, dtypes, seeding ----
def test_creation_matches_torch_dtypes_and_values():
    assert lazyten.tensor([1, 2]).dtype == dtypes.int64 and lazyten.tensor(3.0).dtype == dtypes.float32
    assert lazyten.tensor([True]).dtype == dtypes.bool
    assert lazyten.tensor(np.ones(2)).dtype == dtypes.float64  # numpy keeps its dtype
    assert lazyten.tensor([1, 2], dtype=lazyten.float16).dtype == dtypes.float16
    w = lazyten.tensor([1.0, 2.0], requires_grad=True)
    copy = lazyten.tensor(w * 2)
    assert copy.requires_grad is False and w.requires_grad and copy.tolist() == [2.0, 4.0]
    assert lazyten.as_tensor(w) is w and lazyten.as_tensor(w, dtype=lazyten.float64).dtype == dtypes.float64
    assert lazyten.from_numpy(np.arange(3, dtype=np.int32)).dtype == dtypes.int32
    with pytest.raises(TypeError, match="numpy.ndarray"):
        lazyten.from_numpy([1, 2])
    for size in ((2, 3), ((2, 3),), ([2, 3],)):
        assert lazyten.zeros(*size).shape == lazyten.ones(*size).shape == (2, 3)
    assert lazyten.zeros(size=(2, 3)).shape == lazyten.empty(2, 3).shape == (2, 3)
    assert lazyten.ones(2, dtype=lazyten.int32).dtype == dtypes.int32
    assert lazyten.full((2, 2), 3).dtype == dtypes.int64 and lazyten.full((2,), 3.0).tolist() == [3.0] * 2
    assert_tensor(lazyten.arange(5), np.arange(5))
    assert_tensor(lazyten.arange(start=1, end=7, step=2), np.arange(1, 7, 2))
    assert_tensor(lazyten.arange(0, 1, 0.25), np.arange(0, 1, 0.25, dtype=np.float32))
    assert_tensor(lazyten.linspace(0, 1, 5), np.linspace(0, 1, 5, dtype=np.float32))
    assert_tensor(lazyten.eye(3, 2), np.eye(3, 2, dtype=np.float32))
    assert_tensor(lazyten.logspace(0, 2, 3), np.array([1, 10, 100], np.float32))
    assert_tensor(lazyten.tril_indices(3, 3), np.stack(np.tril_indices(3)))
    like = lazyten.ones(2, 3, dtype=lazyten.int64)
    assert_tensor(lazyten.zeros_like(like), np.zeros((2, 3), np.int64))
    assert_tensor(lazyten.ones_like(like, dtype=lazyten.float32), np.ones((2, 3), np.float32))
    assert_tensor(lazyten.full_like(like, 7), np.full((2, 3), 7))
    assert lazyten.rand_like(lazyten.ones(2, dtype=lazyten.float64)).dtype == dtypes.float64
    assert lazyten.randn(3, requires_grad=True).requires_grad


def _draws() -> list:
    halves = t(np.full(40, 0.5, np.float32))
    means, stds = t(np.zeros(3, np.float32)), t(np.ones((2, 1), np.float32))
    made = [lazyten.rand(50), lazyten.randn(2, 3), lazyten.randint(0, 10, (40,)),
            lazyten.randint(5, (4,)), lazyten.randperm(9), lazyten.normal(2.0, 0.5, size=(1000,)),
            lazyten.normal(means, stds), lazyten.bernoulli(halves),
            lazyten.randint_like(t(np.ones(5, np.float32)), 3, 5)]
    return [x.numpy() for x in made]


def test_random_creation_ranges_and_seed():
    lazyten.manual_seed(11)
    first = _draws()
    lazyten.manual_seed(11)
    for a, b in zip(first, _draws()):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(lazyten.rand(50).numpy(), first[0])  # the generator moved on
    rand, _, ints, ints2, perm, normal, normal_t, coins, like = first
    assert 0 <= rand.min() and rand.max() < 1 and ints.dtype == np.int64 and set(ints) <= set(range(10))
    assert set(ints2) <= set(range(5)) and sorted(perm) == list(range(9)) and perm.dtype == np.int64
    assert abs(normal.mean() - 2) < 0.1 and abs(normal.std() - 0.5) < 0.1
    assert normal_t.shape == (2, 3) and set(coins) <= {0.0, 1.0} and 0 < coins.sum() < 40
    assert like.dtype == np.float32 and set(like) <= {3.0, 4.0}
    with pytest.raises(TypeError, match=r"\(high, size\)"):
        lazyten.randint(3, 10)  # tinygrad's randint(*shape) is not torch's


def test_dtype_aliases():
    aliases = {"float32": "float32", "float": "float32", "float16": "float16", "half": "float16",
               "bfloat16": "bfloat16", "float64": "float64", "double": "float64", "int8": "int8",
               "int16": "int16", "short": "int16", "int32": "int32", "int": "int32",
               "int64": "int64", "long": "int64", "uint8": "uint8", "bool": "bool"}
    for alias, name in aliases.items():
        assert getattr(lazyten, alias) is getattr(dtypes, name), alias
        assert isinstance(getattr(lazyten, alias), lazyten.dtype)
    assert lazyten.tensor([1.7], dtype=lazyten.long).tolist() == [1]
    assert lazyten.get_default_dtype() == lazyten.float32


# ---- grad mode ----
def _records() -> bool:
    return bool((lazyten.ones(2, requires_grad=True) * 2).requires_grad)


def test_grad_mode_blocks_decorators_and_exceptions():
    assert lazyten.is_grad_enabled() and _records()
    with lazyten.no_grad():
        assert not lazyten.is_grad_enabled() and not _records()
        with lazyten.enable_grad():
            assert _records()
        with lazyten.set_grad_enabled(True):
            assert _records()
        assert not _records()
    for make in (lazyten.no_grad, lazyten.inference_mode, lambda: lazyten.set_grad_enabled(False)):
        with pytest.raises(KeyError):
            with make():
                assert not _records()
                raise KeyError("inside")
        assert lazyten.is_grad_enabled(), f"{make} did not restore the mode after an exception"
    decorated = [lazyten.no_grad(_records), lazyten.no_grad()(_records),
                 lazyten.inference_mode(_records), lazyten.inference_mode()(_records),
                 lazyten.set_grad_enabled(False)(_records)]
    assert lazyten.is_grad_enabled()  # decorating changes nothing by itself
    assert [f() for f in decorated] == [False] * 5 and lazyten.is_grad_enabled()
    with lazyten.no_grad():
        assert lazyten.enable_grad(_records)() and lazyten.enable_grad()(_records)()
        assert not lazyten.inference_mode(False)(_records)()  # changes nothing
    assert lazyten.inference_mode(False)(_records)()

    def raises():
        assert not lazyten.is_grad_enabled()
        raise KeyError("inside")
    with pytest.raises(KeyError):
        lazyten.no_grad(raises)()
    assert lazyten.is_grad_enabled()


def test_set_grad_enabled_as_a_call():
    try:
        lazyten.set_grad_enabled(False)
        assert not lazyten.is_grad_enabled() and not _records()
        lazyten.set_grad_enabled(True)
        assert lazyten.is_grad_enabled() and _records()
    finally:
        lazyten.set_grad_enabled(True)


# ---- devices ----
def test_device_and_cuda(monkeypatch):
    cpu = lazyten.device("cpu")
    assert cpu == "CPU" and cpu.type == "cpu" and cpu.index is None and repr(cpu) == "device(type='cpu')"
    assert lazyten.device("cuda", 1) == "CUDA:1" and lazyten.device("cuda:0").index == 0
    assert lazyten.device(cpu) is cpu and t(A).to(cpu).device == cpu
    assert lazyten.zeros(2, device=lazyten.device("cpu")).device == "CPU"
    with pytest.raises(ValueError, match="unknown device"):
        lazyten.device("mps")
    try:
        lazyten.functions.get_runtime("CUDA")
        opens = True
    except Exception:
        opens = False
    assert lazyten.cuda.is_available() is opens and (lazyten.cuda.device_count() > 0) is opens

    class Driver:
        def ints(self, name, n):
            assert name == "cuDeviceGetCount"
            return (3,)

    class Runtime:
        cu = Driver()
    monkeypatch.setattr(functions, "get_runtime", lambda name: Runtime())
    assert lazyten.cuda.is_available() and lazyten.cuda.device_count() == 3

    def missing(name):
        raise RuntimeError("CUDA: libcuda.so not found")
    monkeypatch.setattr(functions, "get_runtime", missing)
    assert not lazyten.cuda.is_available() and lazyten.cuda.device_count() == 0


# ---- save / load: safetensors, never pickle ----
def test_save_load_round_trip(tmp_path):
    model = lazyten.nn.Linear(3, 2)
    state = {**model.state_dict(), "steps": lazyten.tensor([5], dtype=lazyten.int64),
             "half": lazyten.tensor([1.5, -2.0], dtype=lazyten.bfloat16)}
    path = tmp_path / "model.safetensors"
    lazyten.save(state, path)
    loaded = lazyten.load(str(path), map_location="cpu")
    assert set(loaded) == set(state)
    for name, value in state.items():
        assert loaded[name].dtype == value.dtype and loaded[name].shape == value.shape
        np.testing.assert_array_equal(loaded[name].numpy(), value.numpy())
    other = lazyten.nn.Linear(3, 2)
    other.load_state_dict({k: v for k, v in lazyten.load(path).items() if k in ("weight", "bias")})
    np.testing.assert_array_equal(other.weight.numpy(), model.weight.numpy())


def test_save_load_refuse_everything_else(tmp_path):
    path = tmp_path / "x.safetensors"
    for obj in (t(A), [t(A)], {"a": 1.0}, {"opt": {"lr": t(A)}}, {1: t(A)}):
        with pytest.raises(TypeError, match="lazyten never pickles"):
            lazyten.save(obj, path)
    with pytest.raises(TypeError, match="path"), open(tmp_path / "f", "wb") as handle:
        lazyten.save({"a": t(A)}, handle)
    lazyten.save({"a": t(A)}, path)
    with pytest.raises(TypeError, match="map_location"):
        lazyten.load(path, map_location={"cuda:0": "cpu"})
    marker = tmp_path / "unpickled"
    evil = tmp_path / "evil.pt"  # a pickle that would write `marker` if it were loaded
    evil.write_bytes(pickle.dumps(_Trap(str(marker))))
    with pytest.raises(ValueError, match="never unpickles"):
        lazyten.load(evil)
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    with pytest.raises(ValueError):
        lazyten.load(garbage)
    assert not marker.exists()


class _Trap:
    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


# ---- a PyTorch script, as written for PyTorch ----
def test_training_loop_written_like_pytorch():
    import lazyten as torch
    torch.manual_seed(0)
    inputs = torch.randn(256, 2)
    labels = (inputs[:, 0] * inputs[:, 1] > 0).long()  # XOR of the signs: needs the hidden layer
    model = torch.nn.Sequential(torch.nn.Linear(2, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    losses = []
    for _ in range(60):
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    with torch.no_grad():
        predictions = torch.argmax(model(inputs), dim=1)
        accuracy = (predictions == labels).float().mean().item()
    assert losses[-1] < 0.5 * losses[0], f"loss went {losses[0]:.3f} -> {losses[-1]:.3f}"
    assert accuracy > 0.9, f"accuracy {accuracy:.3f} after 60 steps (losses {losses[::10]})"


def test_docs_list_every_function():
    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "ops.md").read_text()
    section = text.split("## PyTorch's top-level functions", 1)[1].split("\n## ", 1)[0]
    words = set(re.findall(r"[A-Za-z_0-9]+", section))
    assert not sorted(set(functions.__all__) - words), "functions missing from docs/ops.md"
