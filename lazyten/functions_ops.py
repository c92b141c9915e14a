"""PyTorch's top-level ops (`torch.exp(x)`, `torch.sum(x, dim=1)`, `torch.cat([a, b])`) as
thin functions: (input, torch's arguments) -> what the Tensor method of that meaning returns
(a few compose two methods: `equal`, `round(decimals=)`, `dot`), so values, dtypes,
gradients and errors are the method's. `out=` is a TypeError (tensors are values, not memory
an op writes into). lazyten/functions.py re-exports `__all__`. This module's `abs all any
max min pow round sum` shadow Python's builtins, which its code therefore never uses.
"""
from __future__ import annotations
from typing import Any, Callable

from lazyten.elementwise import broadcast_shape
from lazyten.tensor import Tensor


def check_out(name: str, out: Any) -> None:
    """Refuse torch's `out=`: there is no memory to write a result into."""
    if out is not None:
        raise TypeError(f"lazyten.{name}: out= is not supported (tensors are values, not memory "
                        f"an op writes into): write `result = lazyten.{name}(...)` instead")


def as_input(name: str, value: Any, out: Any = None) -> Tensor:
    """`value` when it is a Tensor (the op's input), else a TypeError naming the op."""
    check_out(name, out)
    if not isinstance(value, Tensor):
        raise TypeError(f"lazyten.{name}: input must be a Tensor, got {type(value).__name__} "
                        f"(make one with lazyten.tensor(data))")
    return value


def _unary(name: str, method: str | None = None) -> Callable[..., Any]:
    """torch.<name>(input) as input.<method>()."""
    method = method or name

    def op(input: Tensor, *, out: Any = None) -> Any:
        return getattr(as_input(name, input, out), method)()
    return _named(op, name, method)


def _binary(name: str, method: str | None = None) -> Callable[..., Any]:
    """torch.<name>(input, other) as input.<method>(other)."""
    method = method or name

    def op(input: Tensor, other: Any, *, out: Any = None) -> Any:
        return getattr(as_input(name, input, out), method)(other)
    return _named(op, name, method)


def _forward(name: str, method: str | None = None) -> Callable[..., Any]:
    """torch.<name>(input, *args, **kwargs) as input.<method>(*args, **kwargs), for methods
    whose arguments are torch's (names, order and defaults)."""
    method = method or name

    def op(input: Tensor, *args: Any, out: Any = None, **kwargs: Any) -> Any:
        return getattr(as_input(name, input, out), method)(*args, **kwargs)
    return _named(op, name, method)


def _cast_first(name: str) -> Callable[..., Any]:
    """torch.<name>(input, *args, dtype=None, **kwargs): input cast to dtype, then the method."""
    def op(input: Tensor, *args: Any, dtype: Any = None, out: Any = None, **kwargs: Any) -> Any:
        x = as_input(name, input, out)
        return getattr(x if dtype is None else x.cast(dtype), name)(*args, **kwargs)
    return _named(op, name, name, " (dtype= casts the input first)")


def _named(op: Callable[..., Any], name: str, method: str, note: str = "") -> Callable[..., Any]:
    op.__name__ = op.__qualname__ = name
    op.__module__ = __name__
    op.__doc__ = f"torch.{name}: input.{method}(...){note}; see Tensor.{method}."
    return op


# ---- elementwise math ----
abs = _unary("abs")
absolute = _unary("absolute", "abs")
neg = _unary("neg")
negative = _unary("negative", "neg")
exp = _unary("exp")
exp2 = _unary("exp2")
expm1 = _unary("expm1")
log = _unary("log")
log2 = _unary("log2")
log1p = _unary("log1p")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
square = _unary("square")
reciprocal = _unary("reciprocal")
sin, cos, tan = _unary("sin"), _unary("cos"), _unary("tan")
asin, acos, atan = _unary("asin"), _unary("acos"), _unary("atan")
arcsin, arccos, arctan = _unary("arcsin", "asin"), _unary("arccos", "acos"), _unary("arctan", "atan")
sinh, cosh, tanh = _unary("sinh"), _unary("cosh"), _unary("tanh")
asinh, acosh, atanh = _unary("asinh"), _unary("acosh"), _unary("atanh")
arcsinh, arccosh = _unary("arcsinh", "asinh"), _unary("arccosh", "acosh")
arctanh = _unary("arctanh", "atanh")
erf, erfc = _unary("erf"), _unary("erfc")
sigmoid = _unary("sigmoid")
relu = _unary("relu")
selu = _unary("selu")
celu = _forward("celu")
sign = _unary("sign")
floor, ceil, trunc = _unary("floor"), _unary("ceil"), _unary("trunc")
fix = _unary("fix", "trunc")
frac = _unary("frac")
isnan, isinf, isfinite = _unary("isnan"), _unary("isinf"), _unary("isfinite")
isposinf, isneginf = _unary("isposinf"), _unary("isneginf")
logical_not = _unary("logical_not")
bitwise_not = _unary("bitwise_not")
nan_to_num = _forward("nan_to_num")
clamp = _forward("clamp")
clip = _forward("clip")
clamp_min, clamp_max = _forward("clamp_min"), _forward("clamp_max")
lerp = _forward("lerp")
addcmul, addcdiv = _forward("addcmul"), _forward("addcdiv")

maximum, minimum = _binary("maximum"), _binary("minimum")
atan2 = _binary("atan2")
arctan2 = _binary("arctan2", "atan2")
logaddexp, logaddexp2 = _binary("logaddexp"), _binary("logaddexp2")
copysign = _binary("copysign")
fmod, remainder = _binary("fmod"), _binary("remainder")
floor_divide = _binary("floor_divide")
logical_and, logical_or = _binary("logical_and"), _binary("logical_or")
logical_xor = _binary("logical_xor")
bitwise_and, bitwise_or = _binary("bitwise_and"), _binary("bitwise_or")
bitwise_xor = _binary("bitwise_xor")
bitwise_left_shift = _binary("bitwise_left_shift", "lshift")
bitwise_right_shift = _binary("bitwise_right_shift", "rshift")

# ---- comparisons ----
eq, ne = _binary("eq"), _binary("ne")
lt, le, gt, ge = _binary("lt"), _binary("le"), _binary("gt"), _binary("ge")
greater, greater_equal = _binary("greater", "gt"), _binary("greater_equal", "ge")
less, less_equal = _binary("less", "lt"), _binary("less_equal", "le")
not_equal = _binary("not_equal", "ne")
isclose = _forward("isclose")
allclose = _forward("allclose")


def equal(input: Tensor, other: Tensor) -> bool:
    """torch.equal: True when both have one shape and equal elements (a Python bool)."""
    first, second = as_input("equal", input), as_input("equal", other)
    return first.shape == second.shape and bool((first == second).all())


def _operands(name: str, input: Any, other: Any, out: Any) -> tuple[Tensor, Any, bool]:
    """(tensor, other operand, reversed): torch's arithmetic also takes a number first."""
    if not isinstance(input, Tensor) and isinstance(other, Tensor):
        check_out(name, out)
        return other, input, True
    return as_input(name, input, out), other, False


def _scaled(name: str, input: Any, other: Any, alpha: Any, out: Any) -> Tensor:
    x, y, swapped = _operands(name, input, other, out)
    if alpha != 1:  # input (+ or -) alpha * other, the tensor on either side
        x, y = (x * alpha, y) if swapped else (x, y * alpha)
    return getattr(x, name)(y, reverse=swapped)


def add(input: Any, other: Any, *, alpha: Any = 1, out: Any = None) -> Tensor:
    """torch.add: input + alpha * other."""
    return _scaled("add", input, other, alpha, out)


def sub(input: Any, other: Any, *, alpha: Any = 1, out: Any = None) -> Tensor:
    """torch.sub: input - alpha * other."""
    return _scaled("sub", input, other, alpha, out)


def mul(input: Any, other: Any, *, out: Any = None) -> Tensor:
    """torch.mul: input * other."""
    x, y, swapped = _operands("mul", input, other, out)
    return x.mul(y, reverse=swapped)


def div(input: Any, other: Any, *, rounding_mode: str | None = None,
        out: Any = None) -> Tensor:
    """torch.div: input / other; rounding_mode None, 'trunc' or 'floor'."""
    x, y, swapped = _operands("div", input, other, out)
    return x.div(y, reverse=swapped, rounding_mode=rounding_mode)


def pow(input: Any, exponent: Any, *, out: Any = None) -> Tensor:
    """torch.pow: input ** exponent (either may be a number)."""
    x, y, swapped = _operands("pow", input, exponent, out)
    return x.pow(y, reverse=swapped)


subtract, multiply, divide, true_divide = sub, mul, div, div


def round(input: Tensor, *, decimals: int = 0, out: Any = None) -> Tensor:
    """torch.round: half to even; with `decimals`, of input * 10**decimals, scaled back."""
    x = as_input("round", input, out)
    if decimals == 0:
        return x.round()
    scale = 10.0 ** decimals
    return (x * scale).round() / scale


def where(condition: Tensor, input: Any = None, other: Any = None) -> Any:
    """torch.where(condition, input, other): input where condition, else other;
    torch.where(condition) alone: condition.nonzero(as_tuple=True)."""
    cond = as_input("where", condition)
    if input is None and other is None:
        return cond.nonzero(as_tuple=True)
    if input is None or other is None:
        raise TypeError("lazyten.where takes (condition) or (condition, input, other)")
    return cond.where(input, other)


# ---- reductions ----
sum = _forward("sum")
prod = _forward("prod")
amax, amin = _forward("amax"), _forward("amin")
argmax, argmin = _forward("argmax"), _forward("argmin")
all, any = _forward("all"), _forward("any")
norm = _forward("norm")
logsumexp = _forward("logsumexp")
cumprod = _forward("cumprod")
cummax, cummin = _forward("cummax"), _forward("cummin")
logcumsumexp = _forward("logcumsumexp")
median = _forward("median")
kthvalue = _forward("kthvalue")
count_nonzero = _forward("count_nonzero")
std_mean, var_mean = _forward("std_mean"), _forward("var_mean")
mean, cumsum = _cast_first("mean"), _cast_first("cumsum")


def _extreme(name: str, input: Tensor, dim: Any, keepdim: bool, other: Any, out: Any) -> Any:
    x = as_input(name, input, out)
    if isinstance(dim, Tensor) or other is not None:  # torch.max(a, b): elementwise
        if keepdim or (other is not None and dim is not None):
            raise TypeError(f"lazyten.{name}(input, other) takes two tensors and nothing else")
        y = other if other is not None else dim
        return x.maximum(y) if name == "max" else x.minimum(y)
    if dim is None:
        if keepdim:
            raise TypeError(f"lazyten.{name}(input, keepdim=True) needs dim (as PyTorch)")
        return x.max() if name == "max" else x.min()
    return x.max(dim, keepdim) if name == "max" else x.min(dim, keepdim)


def max(input: Tensor, dim: Any = None, keepdim: bool = False, *,
        other: Any = None, out: Any = None) -> Any:
    """torch.max: max(input) the largest element (0-d); max(input, dim, keepdim=False) the
    named tuple (values, indices); max(input, other) the elementwise maximum."""
    return _extreme("max", input, dim, keepdim, other, out)


def min(input: Tensor, dim: Any = None, keepdim: bool = False, *,
        other: Any = None, out: Any = None) -> Any:
    """torch.min: as torch.max, for the minimum."""
    return _extreme("min", input, dim, keepdim, other, out)


def _spread(name: str, input: Tensor, dim: Any, unbiased: Any, keepdim: bool,
            correction: Any, out: Any) -> Tensor:
    x = as_input(name, input, out)
    if isinstance(dim, bool):  # torch.std(x, False): the old (input, unbiased) overload
        dim, unbiased = None, dim
    kwargs = {"unbiased": unbiased} if unbiased is not None else {}
    if correction is not None:
        kwargs["correction"] = correction
    return getattr(x, name)(dim, keepdim, **kwargs)


def std(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
        correction: Any = None, out: Any = None) -> Tensor:
    """torch.std: correction 1 (unbiased) unless `correction=` or `unbiased=False`."""
    return _spread("std", input, dim, unbiased, keepdim, correction, out)


def var(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
        correction: Any = None, out: Any = None) -> Tensor:
    """torch.var: correction 1 (unbiased) unless `correction=` or `unbiased=False`."""
    return _spread("var", input, dim, unbiased, keepdim, correction, out)


_softmax, _log_softmax = _cast_first("softmax"), _cast_first("log_softmax")


def softmax(input: Tensor, dim: int, dtype: Any = None, *, out: Any = None) -> Tensor:
    """torch.softmax: with `dtype`, the input is cast to it first."""
    return _softmax(input, dim, dtype=dtype, out=out)


def log_softmax(input: Tensor, dim: int, dtype: Any = None, *, out: Any = None) -> Tensor:
    """torch.log_softmax: with `dtype`, the input is cast to it first."""
    return _log_softmax(input, dim, dtype=dtype, out=out)


def dropout(input: Tensor, p: float = 0.5, train: bool = True) -> Tensor:
    """torch.dropout: zero elements with probability p (scaled by 1 / (1 - p)) when train."""
    return as_input("dropout", input).dropout(p, training=train)


# ---- shapes, joining, indexing ----
def _tensors(name: str, tensors: Any) -> list[Tensor]:
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise TypeError(f"lazyten.{name} takes a non-empty list or tuple of tensors, got "
                        f"{tensors!r}")
    return [as_input(name, item) for item in tensors]


def cat(tensors: Any, dim: int = 0, *, out: Any = None) -> Tensor:
    """torch.cat: join along an existing dim (inputs cast once to their common dtype)."""
    check_out("cat", out)
    return Tensor.cat(*_tensors("cat", tensors), dim=dim)


def stack(tensors: Any, dim: int = 0, *, out: Any = None) -> Tensor:
    """torch.stack: join along a new dim."""
    check_out("stack", out)
    return Tensor.stack(*_tensors("stack", tensors), dim=dim)


concat = concatenate = cat
reshape = _forward("reshape")
flatten, unflatten = _forward("flatten"), _forward("unflatten")
squeeze, unsqueeze = _forward("squeeze"), _forward("unsqueeze")
transpose = _forward("transpose")
swapaxes, swapdims = _forward("swapaxes"), _forward("swapdims")
permute = _forward("permute")
movedim, moveaxis = _forward("movedim"), _forward("moveaxis")
t = _unary("t")
split, chunk, unbind = _forward("split"), _forward("chunk"), _forward("unbind")
narrow = _forward("narrow")
broadcast_to = _forward("broadcast_to", "expand")
gather, index_select = _forward("gather"), _forward("index_select")
masked_select, masked_fill = _forward("masked_select"), _forward("masked_fill")
scatter, scatter_add = _forward("scatter"), _forward("scatter_add")
scatter_reduce, index_add = _forward("scatter_reduce"), _forward("index_add")
nonzero = _forward("nonzero")
tril, triu = _forward("tril"), _forward("triu")
flip, roll = _forward("flip"), _forward("roll")
tile = _forward("tile")
repeat_interleave = _forward("repeat_interleave")
diagonal, diag, trace = _forward("diagonal"), _forward("diag"), _unary("trace")
diff = _forward("diff")
unique = _forward("unique")
bincount, histc = _forward("bincount"), _forward("histc")
searchsorted, bucketize = _forward("searchsorted"), _forward("bucketize")
clone, detach = _unary("clone"), _unary("detach")
numel = _unary("numel")
is_floating_point = _unary("is_floating_point")


def broadcast_tensors(*tensors: Tensor) -> tuple[Tensor, ...]:
    """torch.broadcast_tensors: each input expanded (a view) to their common shape."""
    inputs = _tensors("broadcast_tensors", list(tensors))
    shape = broadcast_shape(*(x.shape for x in inputs))
    return tuple(x.expand(shape) for x in inputs)


def broadcast_shapes(*shapes: Any) -> tuple[int, ...]:
    """torch.broadcast_shapes: the shape the given shapes broadcast to (a tuple)."""
    return broadcast_shape(*(tuple(s) if isinstance(s, (tuple, list)) else (s,) for s in shapes))


def meshgrid(*tensors: Any, indexing: str | None = None) -> tuple[Tensor, ...]:
    """torch.meshgrid: grids as expanded views; indexing 'ij' (the default) or 'xy'."""
    inputs = _tensors("meshgrid", list(tensors[0]) if len(tensors) == 1 and
                      isinstance(tensors[0], (list, tuple)) else list(tensors))
    return tuple(Tensor.meshgrid(*inputs, indexing=indexing or "ij"))


# ---- linear algebra ----
matmul = _binary("matmul")
mm, bmm, mv = _forward("mm"), _forward("bmm"), _forward("mv")
outer = _forward("outer")
addmm, baddbmm = _forward("addmm"), _forward("baddbmm")
cdist = _forward("cdist")


def dot(input: Tensor, other: Tensor, *, out: Any = None) -> Tensor:
    """torch.dot: the inner product of two 1-d tensors of one length (0-d result)."""
    x, y = as_input("dot", input, out), as_input("dot", other)
    if x.ndim != 1 or y.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"lazyten.dot takes two 1-d tensors of one length, got shapes "
                         f"{x.shape} and {y.shape} (matmul for others)")
    return x.matmul(y)


def einsum(equation: str, *operands: Any) -> Tensor:
    """torch.einsum(equation, *operands) or (equation, [operands])."""
    return Tensor.einsum(equation, *operands)


# ---- sorting and sampling ----
sort, argsort, topk = _forward("sort"), _forward("argsort"), _forward("topk")
multinomial = _forward("multinomial")

# every public function defined or made above (the two checks are helpers, not torch's)
__all__ = [name for name, value in list(globals().items())
           if callable(value) and getattr(value, "__module__", None) == __name__
           and not name.startswith("_") and name not in ("check_out", "as_input")]
