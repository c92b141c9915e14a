"""Tensor ops that must give numpy's (or PyTorch's) answers where they once did not:
abs of unsigned integers, logsumexp of integers, cross-entropy with -inf logits,
bool - bool, tanh/cos/sigmoid and their gradients, and the fast-math flags of division.
(Division, ulp bounds, float16 reductions and vector casts run per device in
tests/backend/test_numerics.py.)"""
import numpy as np
import pytest

from codegen.dtypes import dtypes
from codegen.linearizer import linearize
from codegen.renderer.llvmir import LLVMRenderer
from lazyten import Tensor
from lazyten.schedule import create_schedule


def llvm_source(out: Tensor) -> str:
    (item,) = [i for i in create_schedule([out.lazydata]) if i.ast is not None]
    renderer = LLVMRenderer()
    return renderer.render(linearize(item.ast, renderer.target))


def test_division_renders_fdiv_without_reciprocal_flags():
    """`arcp` would let LLVM turn x / y into x * (1/y) again."""
    x = Tensor(np.arange(1, 65, dtype=np.float32))
    for out in (x / (x + 1), x / 3.0):
        divisions = [line for line in llvm_source(out).splitlines() if " fdiv " in line]
        assert divisions, "a float division must render as fdiv"
        assert not any("arcp" in line or "fast" in line for line in divisions), divisions
        one = "0x3FF0000000000000"  # 1.0: x * (1/y) divides 1 by y
        assert not any(f"fdiv float {one}" in line for line in divisions), divisions


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int64])
def test_abs_of_integers(dtype):
    """uint8 abs was max(x, -x), and -x wraps: abs(200) was 200 but abs(3) was 253."""
    info = np.iinfo(dtype)
    x = np.array([info.min, info.min + 1, -3, 0, 3, 200, info.max]).astype(dtype)  # wraps
    got = Tensor(x).abs().numpy()
    assert got.dtype == dtype and np.array_equal(got, np.abs(x)), (got, np.abs(x))


@pytest.mark.parametrize("dtype", [np.int16, np.int32, np.int64, np.uint8, np.bool_])
def test_logsumexp_of_integers_is_float(dtype):
    """x - max(x) in int16 wrapped (-30000 - 30000 = 5536) and exp of it was inf."""
    x = np.array([[-30000, 30000, 2], [1, 2, 3]]).astype(dtype)
    got = Tensor(x).logsumexp(axis=1).numpy()
    x64 = x.astype(np.float64)
    m = x64.max(1, keepdims=True)
    want = (np.log(np.exp(x64 - m).sum(1, keepdims=True)) + m)[:, 0]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_cross_entropy_with_minus_inf_logits():
    """A -inf logit of a class that is not the target is fine in PyTorch; the label
    smoothing term (0 * -inf) made the loss NaN here."""
    logits = np.array([[1.0, -np.inf, 2.0], [0.5, 0.2, -np.inf]], np.float32)
    labels = np.array([0, 1])
    x = Tensor(logits, requires_grad=True)
    loss = x.cross_entropy(Tensor(labels))
    loss.backward()
    shifted = logits - logits.max(1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    np.testing.assert_allclose(loss.numpy(), -logp[[0, 1], labels].mean(), rtol=1e-6)
    softmax = np.exp(logp)
    softmax[[0, 1], labels] -= 1
    np.testing.assert_allclose(x.grad.numpy(), softmax / 2, rtol=1e-6, atol=1e-7)


def test_bool_minus_bool_raises():
    a, b = Tensor([True, False]), Tensor([True, True])
    for fn in (lambda: a - b, lambda: a - True, lambda: True - a, lambda: a.sub(b)):
        with pytest.raises(TypeError, match="subtraction of bool tensors"):
            fn()
    assert np.array_equal((a - 1).numpy(), np.array([0, -1]))  # bool - int is int, as PyTorch


def test_float16_sum_mean_keep_float16_and_gradients():
    x = Tensor(np.full((3, 40_000), 0.5, np.float16), requires_grad=True)
    total = x.sum()
    assert total.dtype == dtypes.float16
    x.mean().backward()
    assert x.grad.dtype == dtypes.float16
    np.testing.assert_array_equal(x.grad.numpy(), np.float16(1 / 120_000))


@pytest.mark.parametrize("name", ["tanh", "cos", "sin", "sigmoid", "exp"])
def test_gradients_against_finite_differences(name):
    x = np.concatenate([np.linspace(-6, 6, 41), [1e-6, -1e-6, 0.0]])
    t = Tensor(x, requires_grad=True)
    getattr(t, name)().sum().backward()
    eps = 1e-6
    ref = (lambda v: 1 / (1 + np.exp(-v))) if name == "sigmoid" else getattr(np, name)
    want = (ref(x + eps) - ref(x - eps)) / (2 * eps)
    np.testing.assert_allclose(t.grad.numpy(), want, rtol=1e-6, atol=1e-9)


def test_sigmoid_tails_and_tanh_signs():
    """sigmoid(-100) is 3.7e-44, a float32 subnormal, not 1 / (1 + inf) = 0."""
    x = np.array([-103.0, -100.0, -90.0, -20.0, 20.0, 100.0], np.float32)
    want = np.exp(x.astype(np.float64)) / (1 + np.exp(x.astype(np.float64)))
    error = np.abs(Tensor(x).sigmoid().numpy() - want)
    assert np.all(error <= 2.5 * np.spacing(want.astype(np.float32))), error  # subnormal ulps
    special = np.array([np.inf, -np.inf, np.nan, 0.0, 30.0, -30.0], np.float32)
    np.testing.assert_array_equal(Tensor(special).tanh().numpy(), np.tanh(special))
    np.testing.assert_array_equal(Tensor(special).sigmoid().numpy(),
                                  np.array([1, 0, np.nan, 0.5, 1, 9.357623e-14], np.float32))


def test_integer_tensor_divided_by_a_negative_python_number():
    """Found by the fuzzer: the -1 became the uint8 tensor's dtype (255) before the
    division was promoted to float."""
    x = np.array([0, 3, 4], np.uint8)
    np.testing.assert_array_equal((Tensor(x) / -1).numpy(), x / -1)
    np.testing.assert_array_equal((-6 / Tensor(x + 1)).numpy(), (-6 / (x + 1)).astype(np.float32))
    np.testing.assert_array_equal((Tensor(x.astype(np.int8)) / -2).numpy(), x.astype(np.int8) / -2)


def test_16_bit_integer_powers_round_once():
    """bfloat16 x ** 3 multiplied in bfloat16, rounding twice: 1.9453125 ** 3 = 7.3615 gave
    7.34375 instead of 7.375 (found by the fuzzer, seed 581). Computed in float32 and
    rounded once, every power below is the exact power rounded to the nearest value."""
    from tests.helpers import rne_bf16
    x = rne_bf16(np.random.default_rng(0).uniform(-3, 3, 4000).astype(np.float32))
    for n in (2, 3, 4, 5, -1, -2, -3):
        exact = x.astype(np.float64) ** n
        got = (Tensor(x, dtype=dtypes.bfloat16) ** n).float().numpy()
        np.testing.assert_array_equal(got, rne_bf16(exact.astype(np.float32)), err_msg=f"n={n}")
        got16 = (Tensor(x.astype(np.float16)) ** n).numpy()
        np.testing.assert_array_equal(got16, exact.astype(np.float16), err_msg=f"f16 n={n}")
