"""Bad input fails at the call, before anything runs, with the right exception type and a
message that names the shapes (or axes, dtypes, devices) involved."""
import numpy as np
import pytest

from lazyten import Tensor
from lazyten.realize import Stats


def t(*shape, dtype=None):
    return Tensor.ones(*shape, dtype=dtype)


def raises(exc, fn, *needles):
    """fn() raises `exc` before any kernel runs, and the message holds every needle."""
    before = Stats.kernels
    with pytest.raises(exc) as info:
        fn()
    assert Stats.kernels == before, "the error came after running kernels"
    message = str(info.value)
    for needle in needles:
        assert str(needle) in message, f"{needle!r} not in message {message!r}"
    return message


# ---- broadcasting and elementwise ----
@pytest.mark.parametrize("op", ["+", "-", "*", "/", "//", "%", "**", "<", "==", "&"])
def test_binary_shape_mismatch_names_both_shapes(op):
    x = t(2, 3, dtype="int32")
    y = t(4, 3, dtype="int32")
    raises(ValueError, lambda: eval(f"x {op} y", {"x": x, "y": y}), "(2, 3)", "(4, 3)")


def test_broadcast_mismatch_in_where_maximum_and_lerp():
    raises(ValueError, lambda: (t(2, 3) > 0).where(t(3, 2), 0), "(2, 3)", "(3, 2)")
    raises(ValueError, lambda: t(5).maximum(t(4)), "(5,)", "(4,)")
    raises(ValueError, lambda: t(1, 5).minimum(t(2, 4)), "(1, 5)", "(2, 4)")


def test_bad_operand_types():
    raises(TypeError, lambda: t(2) + "a", "str")
    raises(TypeError, lambda: t(2) * [1, 2, 3][0:0], "list")
    raises(TypeError, lambda: t(2) & t(2), "float32")
    raises(TypeError, lambda: ~t(2), "float32")
    raises(TypeError, lambda: -Tensor([True, False]), "bool")


def test_integer_to_negative_integer_power():
    raises(ValueError, lambda: Tensor([1, 2, 3]) ** -1, "negative")


# ---- reductions and axes ----
@pytest.mark.parametrize("method", ["sum", "max", "min", "mean", "var", "std", "prod", "argmax",
                                    "argmin", "softmax", "log_softmax", "logsumexp", "cumsum"])
def test_axis_out_of_range_is_index_error(method):
    x = t(2, 3)
    raises(IndexError, lambda: getattr(x, method)(2), "2", "2 dims")
    raises(IndexError, lambda: getattr(x, method)(-3), "-3")


def test_bad_axes():
    raises(ValueError, lambda: t(2, 3).sum((0, 0)), "(0, 0)")
    raises(ValueError, lambda: t(2, 3).sum((1, -1)), "repeats")
    raises(TypeError, lambda: t(2, 3).sum(1.0), "1.0")
    raises(TypeError, lambda: t(2, 3).max("x"), "'x'")
    raises(ValueError, lambda: t(0, 3).max(0), "(0, 3)")
    raises(ValueError, lambda: t(0, 3).argmax(0), "(0, 3)")


# ---- movement ----
def test_impossible_reshapes():
    raises(ValueError, lambda: t(2, 3).reshape(4, 2), "(2, 3)", "(4, 2)")
    raises(ValueError, lambda: t(2, 3).reshape(-1, 4), "(2, 3)", "(-1, 4)")
    raises(ValueError, lambda: t(2, 3).reshape(-1, -1), "only one -1")
    raises(ValueError, lambda: t(2, 3).view(7), "(2, 3)", "(7,)")
    raises(ValueError, lambda: t(2, 3).reshape(-2, -3), "(-2, -3)")


def test_bad_permute_transpose_and_dims():
    raises(ValueError, lambda: t(2, 3, 4).permute(0, 1), "(2, 3, 4)")
    raises(ValueError, lambda: t(2, 3, 4).permute(0, 1, 1), "permutation")
    raises(IndexError, lambda: t(2, 3).permute(0, 2), "2")
    raises(IndexError, lambda: t(2, 3).transpose(0, 5), "5", "2 dims")
    raises(IndexError, lambda: t(2, 3).unsqueeze(4), "4")
    raises(IndexError, lambda: t(2, 3).squeeze(2), "2")
    raises(IndexError, lambda: t(2, 3).flip(2), "2")
    raises(IndexError, lambda: t(2, 3).flatten(3), "3")
    raises(TypeError, lambda: t(2, 3).flip(0.5), "0.5")


def test_bad_expand_pad_shrink_repeat():
    raises(ValueError, lambda: t(2, 3).expand(4, 3), "(2, 3)", "(4, 3)")
    raises(ValueError, lambda: t(2, 3).expand(3), "(2, 3)")
    raises(ValueError, lambda: t(2, 3).pad(((1, 1),)), "(2, 3)")
    raises(ValueError, lambda: t(2, 3).pad((1, 1, 1)), "(2, 3)")
    raises(ValueError, lambda: t(2, 3).pad(((0, 0), (-2, -2))), "(2, 3)")
    raises(ValueError, lambda: t(2, 3).shrink(((0, 3), (0, 3))), "(2, 3)")
    raises(ValueError, lambda: t(2, 3).shrink(((0, 2),)), "(2, 3)")
    raises(ValueError, lambda: t(2, 3).repeat(2), "(2, 3)")


def test_bad_split_chunk_cat_stack():
    raises(ValueError, lambda: t(5, 2).split([2, 2]), "[2, 2]", "(5, 2)")
    raises(ValueError, lambda: t(5, 2).split(0), "0")
    raises(ValueError, lambda: t(5, 2).split([6, -1]), "[6, -1]", "(5, 2)")
    raises(ValueError, lambda: t(5, 2).chunk(0), "0")
    raises(ValueError, lambda: t(2, 3).cat(t(2, 4)), "(2, 3)", "(2, 4)")
    raises(ValueError, lambda: t(2, 3).cat(t(2, 3, 1), dim=1), "(2, 3)", "(2, 3, 1)")
    raises(ValueError, lambda: t(2, 3).stack(t(3, 2)), "(2, 3)", "(3, 2)")
    raises(IndexError, lambda: t(2, 3).cat(t(2, 3), dim=2), "2")
    raises(ValueError, lambda: Tensor(1.0).cat(Tensor(2.0)), "()", "stack")


def test_tril_needs_two_dims():
    raises(ValueError, lambda: t(3).tril(), "(3,)")
    raises(ValueError, lambda: t(3).triu(), "(3,)")


# ---- indexing ----
def test_bad_indices():
    x = t(2, 3)
    raises(IndexError, lambda: x[2], "2", "size 2")
    raises(IndexError, lambda: x[0, -4], "-4", "size 3")
    raises(IndexError, lambda: x[0, 0, 0], "(2, 3)")
    raises(IndexError, lambda: x[..., ...], "ellipsis")
    raises(IndexError, lambda: x[1.5], "1.5")
    raises(IndexError, lambda: x["a"], "'a'")
    raises(IndexError, lambda: x[Tensor([0.0, 1.0])], "float32")
    raises(IndexError, lambda: x[Tensor([True, False, True])], "(3,)", "(2, 3)")  # a mask
    raises(IndexError, lambda: x[True], "True")
    raises(IndexError, lambda: x[Tensor([[0, 1]]), Tensor([0, 1, 2])], "(1, 2)", "(3,)")


def test_bad_gather():
    x = t(3, 4)
    raises(ValueError, lambda: x.gather(1, Tensor([0, 1])), "(2,)", "2 dims")
    raises(ValueError, lambda: x.gather(1, Tensor([[0]] * 4)), "(4, 1)", "(3, 4)")
    raises(TypeError, lambda: x.gather(0, Tensor([[0.0]])), "float32")
    raises(IndexError, lambda: x.gather(2, Tensor([[0]])), "2")


# ---- nn ----
def test_matmul_mismatch():
    raises(ValueError, lambda: t(2, 3) @ t(4, 5), "(2, 3)", "(4, 5)")
    raises(ValueError, lambda: t(3) @ t(4), "(3,)", "(4,)")
    raises(ValueError, lambda: t(2, 2, 3) @ t(3, 3, 2), "(2, 2, 3)", "(3, 3, 2)")
    raises(ValueError, lambda: Tensor(2.0) @ t(2), "()")
    raises(ValueError, lambda: t(3).dot(t(2)), "(3,)", "(2,)")
    raises(ValueError, lambda: t(2, 3).linear(t(4, 5)), "(2, 3)", "(5, 4)")


def test_conv_mismatches():
    raises(ValueError, lambda: t(1, 3, 5, 5).conv2d(t(4, 2, 3, 3)), "(1, 3, 5, 5)", "(4, 2, 3, 3)")
    raises(ValueError, lambda: t(3, 5, 5).conv2d(t(4, 3, 3, 3)), "(3, 5, 5)", "(4, 3, 3, 3)")
    raises(ValueError, lambda: t(1, 4, 5, 5).conv2d(t(3, 2, 3, 3), groups=2), "groups=2")
    raises(ValueError, lambda: t(1, 3, 5, 5).conv2d(t(4, 3, 3, 3), t(3)), "(3,)", "(4,)")
    raises(ValueError, lambda: t(1, 3, 2, 2).conv2d(t(4, 3, 3, 3)), "(3, 3)", "(2, 2)")
    raises(ValueError, lambda: t(1, 3, 5, 5).conv2d(t(4, 3, 3, 3), padding=(1, 2, 3)), "(1, 2, 3)")
    raises(ValueError, lambda: t(1, 3, 5, 5).conv_transpose2d(t(2, 3, 3, 3)), "(1, 3, 5, 5)",
           "(2, 3, 3, 3)")
    raises(ValueError, lambda: t(1, 1, 2, 1).conv_transpose2d(t(1, 1, 2, 2), padding=1),
           "(1, 1, 2, 1)", "output size (1, 0)")
    raises(ValueError, lambda: t(1, 2, 2).max_pool2d(3), "(3, 3)", "(2, 2)")
    raises(ValueError, lambda: t(1, 2, 2).avg_pool2d(3), "(3, 3)", "(2, 2)")


# ---- creation, dtypes, devices ----
def test_unknown_dtypes():
    raises(TypeError, lambda: Tensor([1.0], dtype="float128"), "float128")
    raises(TypeError, lambda: Tensor([1.0], dtype="complex64"), "complex64")
    raises(TypeError, lambda: Tensor.zeros(2, dtype="bogus"), "bogus")
    raises(TypeError, lambda: t(2).cast("int4"), "int4")
    raises(TypeError, lambda: Tensor(np.array([1 + 2j])), "complex128")
    raises(TypeError, lambda: Tensor(np.array([1, 2], np.longdouble)), np.dtype(np.longdouble).name)
    raises(TypeError, lambda: Tensor(["a", "b"]), "<U1")


def test_unknown_devices():
    raises(ValueError, lambda: Tensor([1.0], device="TPU"), "TPU", "CPU")
    raises(ValueError, lambda: Tensor.zeros(2, device="cpu:x"), "cpu:x")
    raises(TypeError, lambda: Tensor([1.0], device=3), "3")
    raises(ValueError, lambda: Tensor.ones(2, device="GPU"), "GPU")


def test_bad_creation_arguments():
    raises(ValueError, lambda: Tensor.zeros(2, -1), "(2, -1)")
    raises(ValueError, lambda: Tensor.ones(2.5), "2.5")
    raises(ValueError, lambda: Tensor.full((2, "a"), 1.0), "'a'")
    raises(ValueError, lambda: Tensor.arange(0, 5, 0), "step")
    raises(ValueError, lambda: Tensor.rand(-3), "-3")
    raises(ValueError, lambda: Tensor([[1, 2], [3]]), "")


def test_item_len_bool_on_wrong_shapes():
    raises(ValueError, lambda: t(2, 3).item(), "(2, 3)")
    raises(TypeError, lambda: len(Tensor(1.0)), "0-d")
    raises(ValueError, lambda: bool(t(2)), "(2,)")
    raises(ValueError, lambda: t(2, 3).backward(), "(2, 3)")
